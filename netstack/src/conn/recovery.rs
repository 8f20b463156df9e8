//! Loss recovery at round-trip scale, built around smoltcp.
//!
//! smoltcp retransmits on its own timer, which never fires sooner than one second
//! (`RTTE_MIN_RTO`), and after three duplicate ACKs, which a request/response connection
//! with one reply in flight never gets; it ignores SACK. So one lost reply, FIN or SYN-ACK
//! used to cost a second. smoltcp has no way to be told to retransmit, and its send buffer
//! cannot be read back, but the table sees every frame a connection sends (`view.rs`) and
//! every segment it receives (before smoltcp does). So each connection keeps a **copy of
//! every frame that takes sequence space** (SYN-ACK, data, FIN) until the peer
//! acknowledges it, and the table sends copies again itself. A copy is an exact duplicate,
//! which is legal TCP (RFC 9293 §3.10.7.4: the receiver drops what it has and
//! acknowledges), except that it carries the newest acknowledgment number and window the
//! connection sent, so the peer never sees an outdated ACK. The peer's acknowledgment then
//! moves smoltcp on as if its own segment had arrived, and stops smoltcp's timer.
//!
//! ```text
//! smoltcp egress ─▶ view.rs frames it ─▶ Flight::on_send: copy kept (seq, end, sent at);
//!                                         smoltcp's own retransmissions counted
//! frame in ─▶ Flight::on_ack (ACK, SACK, D-SACK) ─▶ smoltcp
//!               drops acknowledged copies, samples the RTT, marks SACKed copies, finds
//!               lost ones (a later one arrived, or the peer sent its data again), measures
//!               the peer's ACK delay of lone segments, re-arms the probe timer
//! poll_egress ─▶ Flight::next_resend: lost copies at once, a probe when its timer runs out
//! ```
//!
//! - **Tail-loss probe** (RFC 8985 §7). When nothing new is acknowledged for the probe
//!   timeout (PTO), the newest copy the peer has not SACKed goes out again (the oldest, for
//!   a peer without SACK: each probe then repairs a hole). With two or more segments in
//!   flight the PTO is `rto_min` + 2·RTT; one segment alone waits for its peer's measured
//!   ACK delay instead (below). RFC 8985 waits 2·SRTT and, for a single segment in flight,
//!   adds the worst case of the peer's delayed ACK (200 ms); Linux adds its route's
//!   `rto_min` there (with `rto_min 1ms`, 2·SRTT + 1 ms, the client's think time in SRTT).
//!   RTT is
//!   - for data and FINs, the smallest time the connection's client took to acknowledge
//!     data in the last second or so, rather than the smoothed time. A request/response
//!     client acknowledges a reply with its next request, so its smoothed RTT is its think
//!     time (3 ms at 300 requests/s per connection), and a probe that waited for it would
//!     let every lost reply wait that long; the smallest is the network's round trip as
//!     long as some acknowledgments come at once, and rises when none does for a second
//!     (a client that is saturated, or always delays its ACK).
//!   - before the client has acknowledged any data, what clients of the table usually
//!     take (SRTT + 4·RTTVAR of all their data acknowledgments, RFC 6298), and before any
//!     client has, nothing: smoltcp's timer. The ACK that completes the handshake is no
//!     guide: a client's kernel sends it at once.
//!   - for a SYN-ACK, the table's handshake round trip (SRTT + 4·RTTVAR), 0 before the
//!     first.
//!
//!   A probe that brings no acknowledgment doubles the PTO; after [`MAX_PROBES`] of them
//!   ([`MAX_HANDSHAKE_PROBES`] for a SYN-ACK, so forged SYNs earn little) probing stops
//!   until the peer acknowledges something, and smoltcp's own timer (one second,
//!   doubling) carries on. Sending new data re-arms the timer; an ACK of new data re-arms
//!   it and resets the backoff. So the SYN-ACK, the only reply of an idle connection, the
//!   last of several segments and a FIN are repaired one PTO after they were lost, and a
//!   lost ACK from the peer costs one spurious probe.
//! - **A lone segment waits for its peer's ACK delay.** A client that delays its ACK
//!   until its next request (Linux does, in its interactive "pingpong" mode: the ACK rides
//!   on the next request, or goes when its delayed-ACK timer fires) acknowledges a reply
//!   after its think time, which no round-trip measurement predicts. So each connection
//!   measures it ([`AckDelays`]): the time from each lone segment's (last) transmission to
//!   its ACK, over its last [`ACK_DELAY_SAMPLES`] lone segments. A lone data segment or
//!   FIN is probed after the second largest of them (the largest before 32 are kept; about
//!   the 94th percentile, and one outlier does not count) plus a margin: a quarter of the
//!   floor, a sixteenth of the delay if more, and for a delay of over four floors a
//!   quarter of it less the floor if more still (a long delay is a client's pass over
//!   many connections, whose pace drifts with its load, below); at least the floor, at most
//!   [`MAX_ACK_DELAY`] (500 ms; RFC 8985's worst-case delayed ACK is 200 ms, but a
//!   client's think time may be longer) unless `rto_min` + 2·RTT is longer
//!   (every ACK of the last second took longer). With two or more in flight a client
//!   acknowledges at once (RFC 9293 §3.8.6.3): `rto_min` + 2·RTT. A probe that proves
//!   spurious (D-SACK, or the original's ACK crossed it) shows only that the delay was
//!   longer than its wait: it counts as that wait, and each one more before an ACK comes in
//!   time as twice its wait, so a connection whose client turns slow, every lone reply then
//!   probed before its ACK, learns within a few probes, as a timer backs off. A probe that repaired a loss is no sample. Measured with the client of
//!   `bench-loss.sh` (one thread sending a Poisson stream round-robin over 64 Linux
//!   connections with `rto_min 1ms`: each connection's next request, and its ACK, 3.2 ms
//!   ± 0.4 ms after the last; its delayed-ACK timer, `ato:4`, rarely fires first), a lost
//!   reply waited 4.4 ms on average for its probe and 1.4 to 1.7 % of replies were probed
//!   for nothing. This replaced a stretch learned from spurious probes alone (one floor
//!   more for each, a sixteenth less for each timely ACK, up to four floors), which sees
//!   only whether a delay passed the timeout, not the delay: there 2.2 to 4.4 % were
//!   probed for nothing, a lost reply waited up to 5.2 ms (and 2·RTT more whenever no
//!   quick ACK had come for a second and the minimum RTT rose), and a client later than
//!   5.2 ms (at 10,000 connections, 100 to 170 ms) had nearly every reply probed.
//!   The margin of long delays: one thread serving 10,000 connections acknowledges each
//!   reply with its next request, a whole pass over its connections later, and that pass
//!   slows for every connection at once when the thread gets less CPU. With a sixteenth
//!   as the margin, each such slowdown of more than 6 % (the client's throughput varied by
//!   more than that from second to second) had the replies of every connection probed
//!   for nothing, dozens in one pass of the table, until each connection had learned the
//!   new delay from its own probes: 3 to 6 probes per 100 requests once the connections
//!   had started. With a quarter, none (at 100 ms, a lost reply waits 24 ms more).
//! - **The peer's retransmission.** When the client sends again data (or a FIN) that we
//!   had acknowledged, its retransmission timer fired without an acknowledgment: every copy
//!   that carried one (sent after that data arrived, and not acknowledged by this segment)
//!   was lost, and goes out again at once. This needs no timing (a request/response client
//!   sends nothing else while it waits for a reply), so it holds on a busy host where the
//!   time a segment waited in our queue is unknown. A late-acknowledging client's lost
//!   reply is repaired by whichever comes first, its probe or the client's own timer (its
//!   RTO or tail-loss probe: at least its route's `rto_min`). At worst a copy that was only
//!   late goes out twice. The client retransmits only if the lost segment carried the
//!   first acknowledgment of its data: the last segment of a multi-segment reply, or a
//!   reply whose request smoltcp had acknowledged on its own, leaves it nothing to
//!   retransmit, and only a probe repairs that. So lone segments are always probed,
//!   however late their client acknowledges (leaving them unprobed made the 1 % loss test
//!   of `server/tests/loss.rs` wait for smoltcp's second).
//! - **Probes are paid for** by acknowledgments: every ACK of new data (any connection's)
//!   earns the table one probe, up to [`PROBE_CREDIT`] saved, and every probe spends one. A probe
//!   due when none is left is withheld, and that connection's episode left to smoltcp's
//!   timer. So probing never sends more copies than the clients acknowledge (each copy
//!   makes a client answer), and clients too busy to acknowledge (thousands of
//!   connections served by one thread, whose ACKs come with their next request a second
//!   later) are not sent a copy of nearly every reply on top (with 3,000 such
//!   connections, their answers to the copies overflowed the AF_XDP fill ring and the
//!   kernel dropped frames).
//! - **SACK re-send** (RACK, RFC 8985 §6, simplified). When the peer SACKs a segment, or
//!   acknowledges one, every unSACKed copy sent before it counts as lost once that
//!   segment's RTT plus a reordering window (a quarter of the minimum RTT) has passed
//!   since the copy went out, and goes out again at once. A copy sent again is newer than
//!   everything delivered so far, so it is only declared lost again after something sent
//!   later arrives: re-sends follow the peer's ACKs and cannot run away. This repairs one
//!   of several segments in about one RTT, where smoltcp waits for three duplicate ACKs.
//! - **The other direction.** When a request from the client is lost, the client's own
//!   fast retransmit, RACK and probes repair it; they need duplicate ACKs with SACK
//!   blocks from us. smoltcp answers out-of-order data and duplicates at once (an ACK
//!   with one SACK block when SACK was negotiated); the table's tests hold it to that.
//!   A lone request that is lost is invisible to us: it costs the client's own timer (a
//!   Linux client at 250 Hz with `rto_min 1ms`: `rto:8`, 8 ms), for any server.
//! - **The floor, `rto_min`** (`--rto-min`, default [`DEFAULT_RTO_MIN`], 1 ms): no copy
//!   is sent again by the timer sooner than this after the previous transmission. 1 ms is
//!   what datacenter Linux hosts set on their routes (`ip route ... rto_min 1ms`; the
//!   kernel's default is 200 ms), and is well above a TAP, veth or datacenter round trip
//!   (tens to hundreds of µs) and the scheduling delays of a busy host, which a peer's ACK
//!   may meet; with the minimum RTT in the PTO (above) it repairs a lost reply within
//!   about a millisecond (after its ACK delay, for a client that acknowledges late),
//!   where a tuned Linux server waits for twice its smoothed RTT, the client's think time
//!   included. SACK re-sends need no floor: the peer's ACKs pace them. `None` turns
//!   recovery off (smoltcp alone). A larger floor also means a larger margin on a lone
//!   segment's ACK delay.
//! - **Counters** ([`RecoveryStats`]): probes (sent, withheld, sent later because of a
//!   client's ACK delay, proved spurious, and repaired a loss, with their wait), SACK
//!   re-sends and re-sends after a peer's
//!   retransmission; of the copies sent again, those that repaired a loss (acknowledged no
//!   sooner than a round trip after they went out, and no D-SACK for them by the time data
//!   sent after them is acknowledged: the peer had them first, and reported no duplicate)
//!   and the spurious ones: the peer reported them as duplicates with a D-SACK block (RFC
//!   2883; Linux does when SACK is negotiated, which smoltcp does whenever the client
//!   offers it), or acknowledged them sooner than the connection's smallest round trip
//!   (its SYN-ACK's included) after they went out (that ACK left the peer before the copy
//!   arrived, so the original had). Without
//!   SACK, for a SYN-ACK, and for a copy whose connection ends before the next ACK, the
//!   outcome is unknown and counted in neither. smoltcp's own retransmissions are counted
//!   from the frames (a segment below the highest sequence number sent).
//! - **Why a copy may be sent as it is.** smoltcp negotiates no TCP timestamps (the table
//!   gives it no timestamp generator), so a copy carries no stale TSval for the peer's PAWS
//!   check to drop; its sequence numbers, flags, options and payload are those smoltcp
//!   sent, and only the acknowledgment number and window are brought up to date.
//!
//! Costs: a copy of each frame sent with data (a memcpy of the frame, about 100
//! instructions per frame besides), and per segment received a read of its options. The
//! copies of a connection hold at most its unacknowledged bytes plus 54 bytes of headers
//! per segment: in request/response use one reply, at worst the send buffer again. At
//! thousands of connections a connection's state is out of cache whenever its next segment
//! comes, so what matters there is how many cache lines an ACK and a reply touch, not the
//! instructions: [`Flight`] keeps everything both read in its first few lines, a lone copy
//! of up to [`INLINE_FRAME_BYTES`] included ([`Copies`]; in heap queues, each kept and
//! dropped reply touched three more allocations), and the table prefetches those lines
//! with the slot's when a segment comes, so the misses overlap (at 10,000 connections,
//! about 9 % more requests per second with one reply in flight each).

use std::collections::VecDeque;

use smoltcp::time::{Duration, Instant};

use crate::demux::{SegmentRepr, flags, tcp_field};

/// Default `--rto-min`: the floor of the probe timeout.
pub const DEFAULT_RTO_MIN: Duration = Duration::from_millis(1);

/// Smallest accepted `rto_min`.
pub const MIN_RTO_MIN: Duration = Duration::from_micros(10);

/// Largest accepted `rto_min` (smoltcp's own timer fires by then).
pub const MAX_RTO_MIN: Duration = Duration::from_secs(1);

/// Probes per loss episode before the table leaves recovery to smoltcp's timer: with a
/// 1 ms PTO they are sent 1, 3, 7, 15, 31 and 63 ms after the loss.
pub const MAX_PROBES: u8 = 6;

/// Probes of a SYN-ACK (a forged SYN earns at most this many more SYN-ACKs).
pub const MAX_HANDSHAKE_PROBES: u8 = 2;

/// Probes a table may send without acknowledgments to pay for them (see
/// [`Recovery::credit`]).
pub const PROBE_CREDIT: u32 = 64;

/// Re-sent copies acknowledged and waiting one more ACK for a D-SACK.
const PENDING: usize = 8;

/// The longest a lone segment's probe waits for its client's acknowledgment (unless every
/// ACK of the last second took longer): half of smoltcp's own one-second timer. RFC 8985
/// waits at most its worst-case delayed ACK (`WCDelAckT`, 200 ms), but a client whose ACK
/// rides on its next request acknowledges after its think time, which may be longer (one
/// thread serving 10,000 connections: up to 250 ms); a probe before that is sent for
/// nothing every time. A client that acknowledges later than this still has its lone
/// segments probed after this long (see the module's "ACK delay").
pub const MAX_ACK_DELAY: Duration = Duration::from_millis(500);

/// How many of its client's latest acknowledgment delays of lone segments a connection
/// keeps (see the module's "a lone segment waits for its peer's ACK delay").
pub const ACK_DELAY_SAMPLES: usize = 32;

/// Unit of a kept delay, µs: a `u16` holds up to 524 ms, past [`MAX_ACK_DELAY`].
const ACK_DELAY_UNIT_US: u32 = 8;

/// Copy storage a connection keeps when it ends (more is freed).
const RETAINED_COPY_BYTES: usize = 32 * 1024;

/// Most copy storage a connection reserves when its first copy does not fit inline (see
/// [`Copies`]): two frames at MTU 1500.
const RESERVED_COPY_BYTES: usize = 4096;

/// Counters of loss recovery, per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Tail-loss probes sent: copies sent again because nothing was acknowledged for a
    /// probe timeout.
    pub probes: u64,
    /// Copies sent again because the peer SACKed or acknowledged a later segment.
    pub sack_resends: u64,
    /// Copies sent again (probes and SACK re-sends) that repaired a loss: acknowledged no
    /// sooner than a round trip after they went out, and not reported as a duplicate by the
    /// time data sent after them was acknowledged.
    pub recovered: u64,
    /// Copies sent again that the peer already had: reported as duplicates (D-SACK), or
    /// acknowledged by an ACK that left the peer before they arrived. The original had
    /// arrived; only its acknowledgment was late or lost.
    pub spurious: u64,
    /// Segments smoltcp sent again itself (its one-second timer or its fast retransmit on
    /// three duplicate ACKs), seen on egress.
    pub smoltcp_retransmits: u64,
    /// Probes that were due but not sent, because the table's clients had not
    /// acknowledged enough to pay for them; the connection is probed again only once its
    /// client acknowledges something (smoltcp's timer carries on meanwhile).
    pub probes_withheld: u64,
    /// Probes the peer already had (counted in `spurious` too). Of a lone segment, each
    /// is one of its connection's ACK delay samples (at least the timeout it was sent at).
    pub probes_spurious: u64,
    /// Probes sent later than the floor and the round trip alone would have sent them,
    /// because their lone segment's client acknowledges later than that (its measured ACK
    /// delay set the timeout).
    pub probes_stretched: u64,
    /// Probes that repaired a loss (counted in `recovered` too).
    pub probes_recovered: u64,
    /// The time from the original transmission to the probe, summed over
    /// `probes_recovered`, in µs: divided by it, how long a lost segment waited for its
    /// repair.
    pub probes_recovered_us: u64,
    /// Copies sent again at once because the peer sent again data they had acknowledged:
    /// the peer never got them (it retransmits because no acknowledgment came).
    pub peer_retransmit_resends: u64,
}

/// Loss recovery settings and what the table learned of the network, shared by its
/// connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recovery {
    /// The floor; `None`: recovery off.
    rto_min: Option<Duration>,
    /// The smallest RTT of the last second over all connections, handshakes included: a
    /// lower bound of the network's round trip.
    net_rtt: MinRtt,
    /// How long clients take to acknowledge data, over all connections (RFC 6298's
    /// smoothing): the probe timeout of a connection whose client has not acknowledged
    /// data yet.
    data_delay: Smoothed,
    /// The round trip of handshakes (SYN-ACK to ACK), smoothed: the probe timeout of a
    /// SYN-ACK.
    handshake_rtt: Smoothed,
    /// How long clients take to acknowledge lone segments, over all connections (RFC
    /// 6298's smoothing, no variation assumed at first): what a connection that has not
    /// yet measured 32 of its own expects at least. A table's clients are usually alike
    /// (one generator, one kind of application), and a new connection's first lone replies
    /// are acknowledged at once (Linux's quick-ACK mode at the start of a connection,
    /// up to 16 segments), which tells nothing of how late the client acknowledges later.
    lone_delay: Smoothed,
    /// Probes the table may send now: each acknowledgment of new data earns one (up to
    /// [`PROBE_CREDIT`]), each probe spends one. So probing is clocked by what the clients
    /// acknowledge: it can never send more copies than they answer, and clients that stop
    /// answering (overloaded, or gone) are not sent more.
    credit: u32,
    /// Heap copy storage a slot reserves when a copy first does not fit inline: two frames
    /// of the device's largest size, at most [`RESERVED_COPY_BYTES`], so a
    /// request/response connection with small replies never allocates, and one with larger
    /// ones grows it once per slot.
    reserve_bytes: usize,
}

impl Recovery {
    /// Recovery with floor `rto_min` (`None`: off) for frames of up to `frame_bytes`.
    pub(crate) fn new(rto_min: Option<Duration>, frame_bytes: usize) -> Self {
        Recovery {
            rto_min,
            net_rtt: MinRtt::default(),
            data_delay: Smoothed::default(),
            handshake_rtt: Smoothed::default(),
            lone_delay: Smoothed::default(),
            credit: PROBE_CREDIT,
            reserve_bytes: (2 * frame_bytes).min(RESERVED_COPY_BYTES),
        }
    }

    /// Recovery is on (else only smoltcp's retransmissions are counted).
    pub(crate) fn enabled(&self) -> bool {
        self.rto_min.is_some()
    }

    /// A lone segment's ACK delay (as a connection recorded it), for the table's prior.
    fn lone_delay_sample(&mut self, us: u32) {
        let us = us.max(1);
        if self.lone_delay.is_empty() {
            self.lone_delay = Smoothed {
                srtt_us: us,
                rttvar_us: 0,
            };
        } else {
            self.lone_delay.update(us);
        }
    }

    /// The floor in µs (0 with recovery off).
    fn floor_us(&self) -> u32 {
        self.rto_min.map_or(0, |floor| {
            u32::try_from(floor.total_micros()).unwrap_or(u32::MAX)
        })
    }
}

/// One kept frame that took sequence space `seq..end`.
#[derive(Debug, Clone, Copy)]
struct Sent {
    seq: u32,
    end: u32,
    /// Frame bytes in `Flight::copies`.
    len: u32,
    /// Last time it went out (by smoltcp or by us).
    sent_at: Instant,
    /// When smoltcp sent it (first, or again itself): what a probe's wait and an ACK delay
    /// are measured from.
    first_sent: Instant,
    /// Sent more than once: no RTT sample from it (Karn).
    resent: bool,
    /// Sent again by us, outcome not yet known (SACK peers only).
    ours: bool,
    /// SND.MAX when we last sent it again: an ACK beyond it acknowledges data sent after
    /// the copy, so the peer had the copy before it.
    settle: u32,
    /// The peer SACKed it.
    sacked: bool,
    /// A SYN-ACK.
    syn: bool,
    /// The acknowledgment number it carried when it first went out.
    peer_ack: u32,
    /// Last sent again by a probe (rather than a re-send of a copy found lost).
    probed: bool,
    /// The peer sent again data this copy acknowledged: it never arrived.
    lost: bool,
    /// The peer reported it as a duplicate (D-SACK) since we sent it again.
    duplicate: bool,
}

/// What `next_resend` wants sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resend {
    index: usize,
    kind: ResendKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResendKind {
    /// SACK showed a later segment arrived.
    Lost,
    /// The peer sent again data this copy acknowledged.
    PeerRetransmit,
    /// The probe timer ran out.
    Probe,
}

/// A copy sent again and acknowledged whose outcome is not yet known.
#[derive(Debug, Clone, Copy, Default)]
struct Pending {
    seq: u32,
    end: u32,
    /// SND.MAX when it was sent again (see [`Sent::settle`]).
    settle: u32,
    /// Sent again by a probe.
    probe: bool,
    /// From the original transmission to the probe, µs.
    wait_us: u32,
    /// A probe of a lone segment: from the original transmission to its ACK, µs (an ACK
    /// delay sample if the probe proves spurious); 0 otherwise.
    delay_us: u32,
}

/// The newest-sent segment known to have arrived (RACK.xmit_ts, RACK.end_seq, RACK.rtt).
#[derive(Debug, Clone, Copy)]
struct Delivered {
    sent_at: Instant,
    end: u32,
    rtt: Duration,
}

/// One connection's unacknowledged segments and recovery state.
///
/// Laid out for the common case at many connections, where each connection's state is out
/// of cache when its next segment comes: what every ACK and every send reads or writes
/// (sequence numbers, timers, the RTT, the ACK delays, and the oldest copy with its frame,
/// [`Copies`]) comes first, in consecutive cache lines of one page, and the rest (the heap
/// queues of further copies, copies waiting for a D-SACK) after it.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Flight {
    /// A SYN-ACK was seen: the fields below follow the connection.
    synced: bool,
    /// The peer SACKs (SACK-permitted on our SYN-ACK, which smoltcp echoes from the SYN).
    sack_ok: bool,
    /// Probes sent since the peer last acknowledged new data.
    backoff: u8,
    /// Oldest unacknowledged sequence number (SND.UNA).
    snd_una: u32,
    /// Next sequence number after the highest sent (SND.MAX).
    snd_max: u32,
    /// The smallest RTT sample of the connection's life, its SYN-ACK's included, µs; 0:
    /// none. A lower bound of its round trip even when its client has acknowledged every
    /// reply late for a while (and `min_rtt` rose): what tells a probe's own ACK from one
    /// that crossed it.
    least_rtt_us: u32,
    /// Acknowledgment number and window field of the newest segment sent after the SYN.
    ack: Option<(u32, u16)>,
    probe_at: Option<Instant>,
    lost_at: Option<Instant>,
    /// The smallest RTT sample of the last second or so (see [`MinRtt`]).
    min_rtt: MinRtt,
    delivered: Option<Delivered>,
    /// How long the peer took to acknowledge this connection's latest lone segments.
    ack_delays: AckDelays,
    /// Copies sent again and acknowledged, outcome not yet known (below).
    pending_len: usize,
    copies: Copies,
    /// Copies sent again and acknowledged, outcome not yet known. Spurious if a D-SACK
    /// reports them, recovered once an ACK beyond `settle` comes without one (the peer had
    /// the copy and said nothing of a duplicate).
    pending: [Pending; PENDING],
}

impl Default for Flight {
    fn default() -> Self {
        Flight {
            synced: false,
            sack_ok: false,
            backoff: 0,
            snd_una: 0,
            snd_max: 0,
            least_rtt_us: 0,
            ack: None,
            probe_at: None,
            lost_at: None,
            min_rtt: MinRtt::default(),
            delivered: None,
            ack_delays: AckDelays::default(),
            pending_len: 0,
            copies: Copies::default(),
            pending: [Pending::default(); PENDING],
        }
    }
}

/// Frame bytes kept beside a connection's other recovery state for its oldest copy (see
/// [`Copies`]): a reply of up to about 200 bytes over IPv4 (a GET hit of a small value).
const INLINE_FRAME_BYTES: usize = 256;

/// A connection's kept copies, oldest first. A copy whose frame fits
/// [`INLINE_FRAME_BYTES`] and that is the only one when it is sent is kept inline, in
/// [`Flight`]'s own memory: in request/response use with small replies, every copy. So
/// keeping a reply and dropping it when its ACK comes touch no memory of their own (with
/// heap queues, at 10,000 connections, each was a cache and TLB miss). Other copies, and
/// every copy sent while one is kept, go to heap queues (`more`, and their frames back to
/// back in `bytes`), which a slot keeps (up to [`RETAINED_COPY_BYTES`]) for its next
/// connections.
#[derive(Debug)]
struct Copies {
    /// The oldest copy, kept inline; `None`: all copies are in `more`.
    first: Option<Sent>,
    /// The frame of `first` (its first `first.len` bytes).
    first_frame: [u8; INLINE_FRAME_BYTES],
    /// The copies after `first` (or all of them), oldest first.
    more: VecDeque<Sent>,
    /// The frames of `more`, back to back, oldest first.
    bytes: VecDeque<u8>,
}

impl Default for Copies {
    fn default() -> Self {
        Copies {
            first: None,
            first_frame: [0; INLINE_FRAME_BYTES],
            more: VecDeque::new(),
            bytes: VecDeque::new(),
        }
    }
}

impl Copies {
    #[inline]
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }

    #[inline]
    fn front(&self) -> Option<&Sent> {
        self.first.as_ref().or_else(|| self.more.front())
    }

    fn back(&self) -> Option<&Sent> {
        self.more.back().or(self.first.as_ref())
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Sent> {
        self.first.iter_mut().chain(self.more.iter_mut())
    }

    /// Keeps `sent` and its `frame` as the newest copy; heap queues that are still empty
    /// reserve `reserve_bytes` (at least the frame).
    fn push_back(&mut self, sent: Sent, frame: &[u8], reserve_bytes: usize) {
        if self.is_empty() && frame.len() <= INLINE_FRAME_BYTES {
            self.first_frame[..frame.len()].copy_from_slice(frame);
            self.first = Some(sent);
            return;
        }
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(reserve_bytes.max(frame.len()));
            self.more.reserve(4);
        }
        self.more.push_back(sent);
        self.bytes.extend(frame);
    }

    /// Drops the oldest copy.
    fn pop_front(&mut self) {
        if self.first.take().is_some() {
            return;
        }
        if let Some(copy) = self.more.pop_front() {
            if self.more.is_empty() {
                self.bytes.clear();
            } else {
                self.bytes.drain(..copy.len as usize);
            }
        }
    }

    /// Drops the newest copy.
    fn pop_back(&mut self) {
        if let Some(copy) = self.more.pop_back() {
            let new_len = self.bytes.len() - copy.len as usize;
            self.bytes.truncate(new_len);
        } else {
            self.first = None;
        }
    }

    /// The frame of copy `index`, in at most two pieces.
    fn frame(&self, index: usize) -> (&[u8], &[u8]) {
        let index = match &self.first {
            Some(first) if index == 0 => return (&self.first_frame[..first.len as usize], &[]),
            Some(_) => index - 1,
            None => index,
        };
        let start: usize = self.more.iter().take(index).map(|c| c.len as usize).sum();
        let end = start + self.more[index].len as usize;
        let (a, b) = self.bytes.as_slices();
        if end <= a.len() {
            (&a[start..end], &[])
        } else if start >= a.len() {
            (&b[start - a.len()..end - a.len()], &[])
        } else {
            (&a[start..], &b[..end - a.len()])
        }
    }

    /// Drops every copy; keeps the heap queues' storage up to [`RETAINED_COPY_BYTES`].
    fn clear(&mut self) {
        self.first = None;
        self.more.clear();
        self.bytes.clear();
        if self.bytes.capacity() > RETAINED_COPY_BYTES {
            self.bytes = VecDeque::new();
        }
    }
}

impl std::ops::Index<usize> for Copies {
    type Output = Sent;

    fn index(&self, index: usize) -> &Sent {
        match &self.first {
            Some(first) if index == 0 => first,
            Some(_) => &self.more[index - 1],
            None => &self.more[index],
        }
    }
}

impl std::ops::IndexMut<usize> for Copies {
    fn index_mut(&mut self, index: usize) -> &mut Sent {
        match &mut self.first {
            Some(first) if index == 0 => first,
            Some(_) => &mut self.more[index - 1],
            None => &mut self.more[index],
        }
    }
}

/// How long a minimum RTT sample counts: between half of this and all of it.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(1);

/// The smallest RTT sample of the last [`MIN_RTT_WINDOW`] (at least its second half). A
/// request/response client acknowledges a reply with its next request, or after its
/// delayed-ACK timer, so most samples include the client's own delay; whenever its next
/// request follows at once, a sample is the network's round trip, and the minimum keeps
/// it. A client that is slow to acknowledge every reply (saturated, or always delaying its
/// ACK) raises the minimum once the window has passed.
///
/// Two half-windows: the minimum of the current one and of the one before; when the
/// current one is over it becomes the one before (or is forgotten, if no sample came for
/// a whole window).
#[derive(Debug, Clone, Copy)]
struct MinRtt {
    /// Smallest sample of the current half-window, µs; 0: none.
    current_us: u32,
    /// Smallest sample of the half-window before, µs; 0: none.
    previous_us: u32,
    /// When the current half-window started.
    started: Instant,
}

impl Default for MinRtt {
    fn default() -> Self {
        MinRtt {
            current_us: 0,
            previous_us: 0,
            started: Instant::ZERO,
        }
    }
}

impl MinRtt {
    fn update(&mut self, us: u32, now: Instant) {
        let age = now - self.started;
        if self.current_us == 0 || age >= MIN_RTT_WINDOW / 2 {
            self.previous_us = if age < MIN_RTT_WINDOW {
                self.current_us
            } else {
                0
            };
            self.current_us = us;
            self.started = now;
        } else {
            self.current_us = self.current_us.min(us);
        }
    }

    /// The minimum in µs; 0: no sample yet.
    fn micros(&self) -> u32 {
        match (self.current_us, self.previous_us) {
            (0, p) => p,
            (c, 0) => c,
            (c, p) => c.min(p),
        }
    }
}

/// RFC 6298's smoothed RTT and variation (gains 1/8 and 1/4), in µs.
#[derive(Debug, Clone, Copy, Default)]
struct Smoothed {
    /// 0: no sample yet.
    srtt_us: u32,
    rttvar_us: u32,
}

impl Smoothed {
    fn update(&mut self, us: u32) {
        if self.srtt_us == 0 {
            self.srtt_us = us;
            self.rttvar_us = us / 2;
        } else {
            let deviation = self.srtt_us.abs_diff(us);
            self.rttvar_us = ((u64::from(self.rttvar_us) * 3 + u64::from(deviation)) / 4) as u32;
            self.srtt_us = ((u64::from(self.srtt_us) * 7 + u64::from(us)) / 8) as u32;
        }
    }

    fn is_empty(&self) -> bool {
        self.srtt_us == 0
    }

    /// SRTT + 4·RTTVAR: later than almost every sample so far; 0 without samples.
    fn timeout_us(&self) -> u64 {
        u64::from(self.srtt_us) + 4 * u64::from(self.rttvar_us)
    }
}

/// The time a connection's peer took to acknowledge each of its latest
/// [`ACK_DELAY_SAMPLES`] lone segments (a data segment or FIN alone in flight), from the
/// segment's last transmission to the ACK, and a high quantile of them: the largest, or
/// once all are kept the second largest (about the 94th percentile: one outlier, such as
/// a client descheduled for a while, does not count). A request/response client that
/// delays its ACK until its next request (Linux in its interactive "pingpong" mode)
/// acknowledges after its think time, which no round trip predicts but which these
/// samples measure. A probe that proved spurious tells only that the delay was longer
/// than the time until its D-SACK (or the original's ACK) came: one counts as that time,
/// each one more in a row as twice it, so a client that acknowledges far later than its
/// connection has seen (one whose replies are all probed: no sample below the timeout
/// comes) is learned after a few spurious probes, as a timer backs off. 72 bytes a
/// connection.
#[derive(Debug, Clone, Copy, Default)]
struct AckDelays {
    /// In units of [`ACK_DELAY_UNIT_US`], oldest overwritten first.
    samples: [u16; ACK_DELAY_SAMPLES],
    /// Samples kept (up to [`ACK_DELAY_SAMPLES`]).
    len: u8,
    /// Where the next sample goes.
    next: u8,
    /// The quantile in µs; 0: no sample yet.
    quantile_us: u32,
    /// Spurious probes since the last ACK that came before its probe.
    censored: u8,
}

impl AckDelays {
    /// An ACK `delay` after the segment went out; returns the sample kept, µs.
    fn add(&mut self, delay: Duration) -> u32 {
        self.censored = 0;
        self.push(delay)
    }

    fn push(&mut self, delay: Duration) -> u32 {
        let units = delay.total_micros() / u64::from(ACK_DELAY_UNIT_US);
        let units = u16::try_from(units).unwrap_or(u16::MAX);
        self.samples[usize::from(self.next)] = units;
        self.next = ((usize::from(self.next) + 1) % ACK_DELAY_SAMPLES) as u8;
        self.len = self.len.saturating_add(1).min(ACK_DELAY_SAMPLES as u8);
        let (mut first, mut second) = (0u16, 0u16);
        for &sample in &self.samples[..usize::from(self.len)] {
            if sample > first {
                second = first;
                first = sample;
            } else if sample > second {
                second = sample;
            }
        }
        let quantile = if usize::from(self.len) == ACK_DELAY_SAMPLES {
            second
        } else {
            first
        };
        self.quantile_us = (u32::from(quantile) * ACK_DELAY_UNIT_US).max(1);
        u32::from(units) * ACK_DELAY_UNIT_US
    }

    /// A probe that proved spurious was acknowledged `delay` after the original went out:
    /// the original's own ACK would have come later still. One such sample counts as
    /// `delay` (the quantile's margin already lets it through now and then); each one more
    /// before an ACK comes in time counts as twice its delay, as a timer backs off.
    fn add_censored(&mut self, delay: Duration) -> u32 {
        let factor = if self.censored == 0 { 1 } else { 2 };
        self.censored = self.censored.saturating_add(1);
        self.push(delay * factor)
    }

    /// How long a lone segment waits for its ACK: the quantile, at least the table's
    /// `prior_us` until all [`ACK_DELAY_SAMPLES`] are the connection's own, and a margin (a
    /// quarter of the floor; a sixteenth of that if more; a quarter of it less the floor if
    /// more still); `None` before any sample.
    fn timeout(&self, floor_us: u32, prior_us: u32) -> Option<Duration> {
        let mut quantile = self.quantile_us;
        if usize::from(self.len) < ACK_DELAY_SAMPLES {
            quantile = quantile.max(prior_us);
        }
        if quantile == 0 {
            return None;
        }
        let margin = (floor_us / 4)
            .max(quantile / 16)
            .max((quantile / 4).saturating_sub(floor_us));
        Some(Duration::from_micros(
            u64::from(quantile) + u64::from(margin),
        ))
    }
}

/// `a` is before `b` in sequence space (RFC 9293 §3.4, modulo 2^32).
#[inline]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[inline]
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

#[inline]
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Bytes at the start of a [`Flight`] that an ACK of a lone small copy reads and its
/// successor's copy writes (the fields before `copies`, the inline copy and its frame).
const HOT_BYTES: usize = 384;

impl Flight {
    /// Prefetches the cache lines an ACK and the next copy touch (see [`HOT_BYTES`]).
    #[inline]
    pub(crate) fn prefetch(&self) {
        let start: *const u8 = (self as *const Flight).cast();
        for offset in (0..HOT_BYTES.min(size_of::<Flight>())).step_by(64) {
            super::prefetch_line(start.wrapping_add(offset));
        }
    }

    /// When the table must call [`next_resend`](Self::next_resend) without new frames.
    #[inline]
    pub(crate) fn deadline(&self) -> Option<Instant> {
        earliest(self.probe_at, self.lost_at)
    }

    /// Something is due at `now`.
    #[inline]
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|at| at <= now)
    }

    /// Forgets the connection (it ended, or its slot takes a new one). Copies sent again
    /// and acknowledged, whose D-SACK might still have come, are counted in neither
    /// `recovered` nor `spurious`.
    pub(crate) fn reset(&mut self) {
        let mut copies = std::mem::take(&mut self.copies);
        copies.clear();
        *self = Flight {
            copies,
            ..Flight::default()
        };
    }

    /// A frame of this connection went out at `now` (its Ethernet header written).
    pub(crate) fn on_send(
        &mut self,
        recovery: &Recovery,
        stats: &mut RecoveryStats,
        frame: &[u8],
        seg: &SegmentRepr,
        now: Instant,
    ) {
        if seg.flags & flags::RST != 0 {
            return;
        }
        // With recovery off only smoltcp's retransmissions are counted.
        let keep = recovery.enabled();
        let syn = seg.flags & flags::SYN != 0;
        if !syn && let Some(ack) = seg.ack_number {
            self.ack = Some((ack, seg.window_len));
        }
        let len = seg.segment_len();
        if len == 0 {
            return;
        }
        let (seq, end) = (seg.seq_number, seg.seq_number.wrapping_add(len));
        if !self.synced || (syn && seq != self.snd_una) {
            // The SYN-ACK of a new connection (or anything first seen).
            self.reset();
            self.synced = true;
            self.snd_una = seq;
            self.snd_max = seq;
            self.sack_ok = seg.sack_permitted;
        }
        if !after(end, self.snd_max) {
            // Nothing new: smoltcp sent old data again itself.
            stats.smoltcp_retransmits += 1;
            for copy in self.copies.iter_mut() {
                if before(copy.seq, end) && after(copy.end, seq) {
                    copy.sent_at = now;
                    copy.first_sent = now;
                    copy.resent = true;
                }
            }
            return;
        }
        let overlaps = before(seq, self.snd_max);
        if !keep {
            stats.smoltcp_retransmits += u64::from(overlaps);
            self.snd_max = end;
            return;
        }
        if overlaps {
            // smoltcp went back (its timer) and sent old and new data together: this copy
            // replaces those it covers.
            stats.smoltcp_retransmits += 1;
            while let Some(back) = self.copies.back()
                && !before(back.seq, seq)
            {
                self.copies.pop_back();
            }
        }
        let sent = Sent {
            seq,
            end,
            len: frame.len() as u32,
            sent_at: now,
            first_sent: now,
            resent: overlaps,
            ours: false,
            settle: 0,
            sacked: false,
            syn,
            peer_ack: seg.ack_number.unwrap_or(0),
            probed: false,
            lost: false,
            duplicate: false,
        };
        self.copies.push_back(sent, frame, recovery.reserve_bytes);
        self.snd_max = end;
        self.probe_at = self.probe_time(recovery, now);
    }

    /// A segment of this connection arrived at `now` (before smoltcp sees it).
    pub(crate) fn on_ack(
        &mut self,
        recovery: &mut Recovery,
        stats: &mut RecoveryStats,
        seg: &SegmentRepr,
        now: Instant,
    ) {
        if !recovery.enabled() || !self.synced || seg.flags & flags::RST != 0 {
            return;
        }
        let Some(ack) = seg.ack_number else { return };
        if after(ack, self.snd_max) {
            // Acknowledges what was never sent: smoltcp answers it; nothing to learn.
            return;
        }
        let blocks = seg.sack_blocks();
        let mut first_sack = 0;
        if let Some(&(left, right)) = blocks.first() {
            let dsack = !after(right, ack)
                || blocks.get(1).is_some_and(|&(l2, r2)| {
                    !before(left, l2) && !after(right, r2) && (left, right) != (l2, r2)
                });
            if dsack {
                self.duplicate_reported(left, right, recovery, stats);
                first_sack = 1;
            }
        }
        self.settle_pending(ack, stats);
        if after(ack, self.snd_una) {
            // A data segment (or FIN) alone in flight: its ACK delay is a sample.
            let lone = self.copies.len() == 1 && self.copies.front().is_some_and(|c| !c.syn);
            self.snd_una = ack;
            // Something new arrived: one more probe is paid for.
            recovery.credit = recovery.credit.saturating_add(1).min(PROBE_CREDIT);
            let mut sample = None;
            while let Some(&copy) = self.copies.front() {
                if after(copy.end, ack) {
                    break;
                }
                if !copy.resent {
                    sample = Some(copy);
                }
                // The original's ACK delay, if this is a probe of a lone segment that may
                // prove spurious.
                let delay = (lone && copy.probed).then(|| now - copy.first_sent);
                if copy.ours {
                    // An acknowledgment sooner than any round trip after the copy went out
                    // was sent before the copy arrived: the original had.
                    let fastest = match (self.least_rtt_us, recovery.net_rtt.micros()) {
                        (0, t) | (t, 0) => t,
                        (c, t) => c.min(t),
                    };
                    let crossed = now - copy.sent_at < Duration::from_micros(u64::from(fastest));
                    if crossed {
                        stats.spurious += 1;
                        if copy.probed {
                            stats.probes_spurious += 1;
                            if let Some(delay) = delay {
                                let us = self.ack_delays.add_censored(delay);
                                recovery.lone_delay_sample(us);
                            }
                        }
                    } else if !copy.syn {
                        // (A SYN-ACK is never reported with a D-SACK: its outcome is
                        // unknown.)
                        let micros =
                            |d: Duration| u32::try_from(d.total_micros()).unwrap_or(u32::MAX);
                        self.push_pending(Pending {
                            seq: copy.seq,
                            end: copy.end,
                            settle: copy.settle,
                            probe: copy.probed,
                            wait_us: micros(copy.sent_at - copy.first_sent),
                            delay_us: delay.map_or(0, micros),
                        });
                    }
                } else if copy.duplicate
                    && let Some(delay) = delay
                {
                    // Reported as a duplicate by this very segment (its D-SACK).
                    let us = self.ack_delays.add_censored(delay);
                    recovery.lone_delay_sample(us);
                }
                self.copies.pop_front();
            }
            if let Some(copy) = sample {
                let rtt = now - copy.sent_at;
                self.sample_rtt(recovery, rtt, copy.syn, now);
                self.deliver(copy, rtt);
                if lone {
                    let us = self.ack_delays.add(rtt);
                    recovery.lone_delay_sample(us);
                }
            }
            self.backoff = 0;
            self.probe_at = if self.copies.is_empty() {
                None
            } else {
                self.probe_time(recovery, now)
            };
        }
        for &(left, right) in &blocks[first_sack..] {
            let mut newest = None;
            for copy in self.copies.iter_mut() {
                if !copy.sacked && !before(copy.seq, left) && !after(copy.end, right) {
                    copy.sacked = true;
                    if !copy.resent {
                        newest = Some(*copy);
                    }
                }
            }
            if let Some(copy) = newest {
                self.deliver(copy, now - copy.sent_at);
            }
        }
        // The peer sent again data (or a FIN) that we had acknowledged: no acknowledgment
        // reached it within its retransmission timeout, so every copy that carried one was
        // lost (or is very late). This is how a lost reply of a peer that acknowledges late
        // is found before its probe: the peer's own timer (a Linux client's
        // probe or RTO, at least its route's `rto_min`) resends its request.
        let len = seg.segment_len();
        if len > 0
            && seg.flags & flags::SYN == 0
            && !before(ack, self.snd_una)
            && let Some((our_ack, _)) = self.ack
        {
            let end = seg.seq_number.wrapping_add(len);
            if !after(end, our_ack) {
                for copy in self.copies.iter_mut() {
                    if !copy.sacked && !copy.syn && !before(copy.peer_ack, end) {
                        copy.lost = true;
                    }
                }
            }
        }
        self.detect_lost();
    }

    /// The next copy to send again at `now`, if any is due; clears what is due but finds
    /// nothing to send.
    pub(crate) fn next_resend(
        &mut self,
        recovery: &Recovery,
        stats: &mut RecoveryStats,
        now: Instant,
    ) -> Option<Resend> {
        if !recovery.enabled() {
            return None;
        }
        if self.lost_at.is_some_and(|at| at <= now) {
            if let Some(index) = (0..self.copies.len()).find(|&i| self.is_lost(i, now)) {
                let kind = if self.copies[index].lost {
                    ResendKind::PeerRetransmit
                } else {
                    ResendKind::Lost
                };
                return Some(Resend { index, kind });
            }
            self.detect_lost();
        }
        if self.probe_at.is_some_and(|at| at <= now) {
            let index = if self.sack_ok {
                (0..self.copies.len())
                    .rev()
                    .find(|&i| !self.copies[i].sacked)
            } else {
                (!self.copies.is_empty()).then_some(0)
            };
            match index {
                Some(_) if recovery.credit == 0 => {
                    // Unpaid: this episode is left to smoltcp's timer.
                    stats.probes_withheld += 1;
                    self.backoff = MAX_PROBES;
                    self.probe_at = None;
                }
                Some(index) => {
                    return Some(Resend {
                        index,
                        kind: ResendKind::Probe,
                    });
                }
                None => self.probe_at = None,
            }
        }
        None
    }

    /// Frame bytes of the copy `resend` names.
    pub(crate) fn copy_len(&self, resend: Resend) -> usize {
        self.copies[resend.index].len as usize
    }

    /// Writes the copy `resend` names into `frame` (exactly [`copy_len`](Self::copy_len)
    /// bytes), with the newest acknowledgment number and window.
    pub(crate) fn write_copy(&self, resend: Resend, frame: &mut [u8]) {
        let (a, b) = self.copies.frame(resend.index);
        frame[..a.len()].copy_from_slice(a);
        frame[a.len()..].copy_from_slice(b);
        if !self.copies[resend.index].syn
            && let Some((ack, window)) = self.ack
        {
            refresh_ack(frame, ack, window);
        }
    }

    /// The copy `resend` named went out at `now`.
    pub(crate) fn resent(
        &mut self,
        recovery: &mut Recovery,
        stats: &mut RecoveryStats,
        resend: Resend,
        now: Instant,
    ) {
        let stretched = self.pto(recovery).is_some_and(|(_, by_delay)| by_delay);
        let copy = &mut self.copies[resend.index];
        copy.sent_at = now;
        copy.resent = true;
        copy.ours |= self.sack_ok;
        copy.settle = self.snd_max;
        copy.probed = resend.kind == ResendKind::Probe;
        copy.lost = false;
        copy.duplicate = false;
        match resend.kind {
            ResendKind::Lost => stats.sack_resends += 1,
            ResendKind::PeerRetransmit => stats.peer_retransmit_resends += 1,
            ResendKind::Probe => {
                stats.probes += 1;
                stats.probes_stretched += u64::from(stretched);
                recovery.credit = recovery.credit.saturating_sub(1);
                self.backoff = self.backoff.saturating_add(1);
                self.probe_at = self.probe_time(recovery, now);
            }
        }
        self.detect_lost();
    }

    /// When the next probe is due if one is sent or acknowledged at `now`; `None` once
    /// the probes of this episode are used up or recovery is off.
    fn probe_time(&self, recovery: &Recovery, now: Instant) -> Option<Instant> {
        recovery.rto_min?;
        let limit = match self.copies.front() {
            Some(copy) if copy.syn => MAX_HANDSHAKE_PROBES,
            _ => MAX_PROBES,
        };
        if self.backoff >= limit {
            return None;
        }
        let (pto, _) = self.pto(recovery)?;
        Some(now + pto * (1u32 << self.backoff))
    }

    /// The probe timeout before backoff, and whether the client's measured ACK delay set
    /// it (rather than the floor and the round trip); `None`: smoltcp's timer.
    ///
    /// One data segment (or FIN) alone in flight, once its client acknowledged one,
    /// waits for that quantile of the client's ACK delay and a margin ([`AckDelays`]): a
    /// client that delays its ACK until its next request is probed just after it usually
    /// acknowledges, one that acknowledges at once after the floor. At least the floor; at
    /// most [`MAX_ACK_DELAY`] (beyond RFC 8985's worst case of a delayed ACK), or the floor and
    /// twice the RTT if longer (a client every one of whose acknowledgments took longer
    /// for a second). With two or more in flight, a peer acknowledges at once (RFC 9293
    /// §3.8.6.3): the floor and twice the RTT.
    fn pto(&self, recovery: &Recovery) -> Option<(Duration, bool)> {
        let rto_min = recovery.rto_min?;
        let front = self.copies.front()?;
        let rtt_us = if front.syn {
            recovery.handshake_rtt.timeout_us()
        } else {
            match self.min_rtt.micros() {
                // Nothing known of how soon clients acknowledge data (a table that just
                // started): smoltcp's timer.
                0 if recovery.data_delay.is_empty() => return None,
                0 => recovery.data_delay.timeout_us(),
                us => u64::from(us),
            }
        };
        let base = rto_min + Duration::from_micros(2 * rtt_us);
        if self.copies.len() == 1
            && !front.syn
            && let Some(wait) = self.ack_delays.timeout(
                recovery.floor_us(),
                u32::try_from(recovery.lone_delay.timeout_us()).unwrap_or(u32::MAX),
            )
        {
            let wait = wait.min(MAX_ACK_DELAY.max(base)).max(rto_min);
            return Some((wait, wait > base));
        }
        Some((base, false))
    }

    /// An RTT sample from a segment sent once (a SYN-ACK if `syn`) and acknowledged at
    /// `now`. The ACK of a SYN-ACK is the client's kernel answering at once; how soon a
    /// client acknowledges data (at once, with its next request, or when its delayed-ACK
    /// timer fires) is another matter, and what a probe of data waits for.
    fn sample_rtt(&mut self, recovery: &mut Recovery, rtt: Duration, syn: bool, now: Instant) {
        let rtt_us = u32::try_from(rtt.total_micros()).unwrap_or(u32::MAX).max(1);
        recovery.net_rtt.update(rtt_us, now);
        if self.least_rtt_us == 0 || rtt_us < self.least_rtt_us {
            self.least_rtt_us = rtt_us;
        }
        if syn {
            recovery.handshake_rtt.update(rtt_us);
        } else {
            self.min_rtt.update(rtt_us, now);
            recovery.data_delay.update(rtt_us);
        }
    }

    /// `copy` (sent once) is known to have arrived after `rtt`.
    fn deliver(&mut self, copy: Sent, rtt: Duration) {
        let newer = self.delivered.is_none_or(|d| {
            copy.sent_at > d.sent_at || (copy.sent_at == d.sent_at && after(copy.end, d.end))
        });
        if newer {
            self.delivered = Some(Delivered {
                sent_at: copy.sent_at,
                end: copy.end,
                rtt,
            });
        }
    }

    /// When copy `index` counts as lost: at once if the peer's retransmission showed it
    /// never arrived; if it was sent before the newest delivered segment, once that
    /// segment's RTT and the reordering window have passed.
    fn lost_time(&self, index: usize) -> Option<Instant> {
        let copy = &self.copies[index];
        if copy.lost {
            return Some(copy.sent_at);
        }
        let delivered = self.delivered?;
        let sent_before = copy.sent_at < delivered.sent_at
            || (copy.sent_at == delivered.sent_at && before(copy.end, delivered.end));
        if copy.sacked || !sent_before {
            return None;
        }
        let reordering = Duration::from_micros(u64::from(self.min_rtt.micros() / 4));
        Some(copy.sent_at + delivered.rtt + reordering)
    }

    fn is_lost(&self, index: usize, now: Instant) -> bool {
        self.lost_time(index).is_some_and(|at| at <= now)
    }

    /// Recomputes when the next copy counts as lost.
    fn detect_lost(&mut self) {
        self.lost_at = (0..self.copies.len())
            .filter_map(|i| self.lost_time(i))
            .min();
    }

    /// The peer got `left..right` twice (D-SACK): the copies we sent again there were
    /// spurious.
    fn duplicate_reported(
        &mut self,
        left: u32,
        right: u32,
        recovery: &mut Recovery,
        stats: &mut RecoveryStats,
    ) {
        let overlaps = |seq: u32, end: u32| before(seq, right) && after(end, left);
        let mut kept = 0;
        let mut probes = 0;
        for i in 0..self.pending_len {
            let entry = self.pending[i];
            if overlaps(entry.seq, entry.end) {
                stats.spurious += 1;
                probes += u64::from(entry.probe);
                if entry.delay_us > 0 {
                    let delay = Duration::from_micros(u64::from(entry.delay_us));
                    let us = self.ack_delays.add_censored(delay);
                    recovery.lone_delay_sample(us);
                }
            } else {
                self.pending[kept] = entry;
                kept += 1;
            }
        }
        self.pending_len = kept;
        for copy in self.copies.iter_mut() {
            if copy.ours && overlaps(copy.seq, copy.end) {
                copy.ours = false;
                copy.duplicate = true;
                stats.spurious += 1;
                probes += u64::from(copy.probed);
            }
        }
        stats.probes_spurious += probes;
    }

    /// Copies acknowledged, and not reported as duplicates by the time `ack` acknowledges
    /// data sent after them: recovered.
    fn settle_pending(&mut self, ack: u32, stats: &mut RecoveryStats) {
        let mut kept = 0;
        for i in 0..self.pending_len {
            let entry = self.pending[i];
            if after(ack, entry.settle) {
                stats.recovered += 1;
                if entry.probe {
                    stats.probes_recovered += 1;
                    stats.probes_recovered_us += u64::from(entry.wait_us);
                }
            } else {
                self.pending[kept] = entry;
                kept += 1;
            }
        }
        self.pending_len = kept;
    }

    fn push_pending(&mut self, entry: Pending) {
        if self.pending_len == PENDING {
            // Full: the oldest is forgotten, counted in neither.
            self.pending.copy_within(1.., 0);
            self.pending_len -= 1;
        }
        self.pending[self.pending_len] = entry;
        self.pending_len += 1;
    }

    /// Copies kept (for tests).
    #[cfg(test)]
    pub(crate) fn copies(&self) -> usize {
        self.copies.len()
    }

    /// SND.MAX (for tests).
    #[cfg(test)]
    pub(crate) fn snd_max(&self) -> u32 {
        self.snd_max
    }

    /// The peer SACKs (for tests).
    #[cfg(test)]
    pub(crate) fn sack_ok(&self) -> bool {
        self.sack_ok
    }

    /// The connection's minimum RTT in µs (for tests).
    #[cfg(test)]
    pub(crate) fn min_rtt_us(&self) -> u32 {
        self.min_rtt.micros()
    }

    /// The quantile of the connection's ACK delays of lone segments in µs, 0 before
    /// enough samples (for tests).
    #[cfg(test)]
    pub(crate) fn ack_delay_us(&self) -> u32 {
        self.ack_delays.quantile_us
    }
}

/// Puts `ack` and `window` into the TCP header of `frame` (an Ethernet frame of a TCP
/// segment written by smoltcp, over IPv4 or over IPv6 without extension headers), updating
/// the checksum incrementally (RFC 1624, eqn. 3; the pseudo-header does not change).
pub(super) fn refresh_ack(frame: &mut [u8], ack: u32, window: u16) {
    let Some(&ver_ihl) = frame.get(14) else {
        return;
    };
    let tcp = match ver_ihl >> 4 {
        6 => 14 + 40,
        _ => 14 + usize::from(ver_ihl & 0x0f) * 4,
    };
    if frame.len() < tcp + 20 {
        return;
    }
    let word = |frame: &[u8], at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
    let ack_at = tcp + tcp_field::ACK.start;
    let window_at = tcp + tcp_field::WINDOW.start;
    let checksum_at = tcp + tcp_field::CHECKSUM.start;
    let mut checksum = word(frame, checksum_at);
    let ack_bytes = ack.to_be_bytes();
    let changes = [
        (ack_at, u16::from_be_bytes([ack_bytes[0], ack_bytes[1]])),
        (ack_at + 2, u16::from_be_bytes([ack_bytes[2], ack_bytes[3]])),
        (window_at, window),
    ];
    for (at, new) in changes {
        let old = word(frame, at);
        if old != new {
            checksum = checksum_replace(checksum, old, new);
            frame[at..at + 2].copy_from_slice(&new.to_be_bytes());
        }
    }
    frame[checksum_at..checksum_at + 2].copy_from_slice(&checksum.to_be_bytes());
}

/// The Internet checksum `sum` after one 16-bit word changed from `old` to `new`.
fn checksum_replace(sum: u16, old: u16, new: u16) -> u16 {
    let mut s = u32::from(!sum) + u32::from(!old) + u32::from(new);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demux::TcpFrame;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        IpAddress, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr,
        TcpSeqNumber,
    };

    const SERVER: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
    const CLIENT: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
    /// The server's initial sequence number in most tests.
    const ISS: u32 = 1000;

    /// A segment as a frame, and what `SegmentRepr` reads of it.
    struct Frame {
        bytes: Vec<u8>,
        seg: SegmentRepr,
    }

    /// A TCP segment from `src` to `dst` in an Ethernet frame, with good checksums.
    #[allow(clippy::too_many_arguments)]
    fn frame(
        src: Ipv4Address,
        dst: Ipv4Address,
        control: TcpControl,
        seq: u32,
        ack: Option<u32>,
        window: u16,
        payload: &[u8],
        sack: &[(u32, u32)],
    ) -> Frame {
        let mut sack_ranges = [None; 3];
        for (range, &block) in sack_ranges.iter_mut().zip(sack) {
            *range = Some(block);
        }
        let tcp = TcpRepr {
            src_port: if src == SERVER { 11211 } else { 40000 },
            dst_port: if src == SERVER { 40000 } else { 11211 },
            control,
            seq_number: TcpSeqNumber(seq as i32),
            ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: window,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: control == TcpControl::Syn,
            sack_ranges,
            timestamp: None,
            payload,
        };
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let mut bytes = vec![0u8; 14 + ip.buffer_len() + tcp.buffer_len()];
        bytes[12..14].copy_from_slice(&[0x08, 0x00]);
        let caps = ChecksumCapabilities::default();
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut bytes[14..34]), &caps);
        tcp.emit(
            &mut TcpPacket::new_unchecked(&mut bytes[34..]),
            &IpAddress::Ipv4(src),
            &IpAddress::Ipv4(dst),
            &caps,
        );
        let seg = SegmentRepr::parse(&TcpFrame::new_checked(&bytes[..]).unwrap()).unwrap();
        Frame { bytes, seg }
    }

    /// The server's segment `seq..seq + len` (with `ack`, window 500).
    fn data(seq: u32, len: usize, ack: u32) -> Frame {
        let payload: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8).collect();
        frame(
            SERVER,
            CLIENT,
            TcpControl::Psh,
            seq,
            Some(ack),
            500,
            &payload,
            &[],
        )
    }

    /// The client's acknowledgment of `ack` with `sack` blocks.
    fn ack(ack: u32, sack: &[(u32, u32)]) -> SegmentRepr {
        frame(
            CLIENT,
            SERVER,
            TcpControl::None,
            7,
            Some(ack),
            1000,
            &[],
            sack,
        )
        .seg
    }

    fn at(us: i64) -> Instant {
        Instant::from_micros(us)
    }

    /// A flight whose SYN-ACK (`iss`, SACK permitted or not) is acknowledged at 100 µs,
    /// with a first RTT sample of 100 µs.
    fn synced(iss: u32, sack_ok: bool) -> (Recovery, RecoveryStats, Flight) {
        let mut recovery = Recovery::new(Some(DEFAULT_RTO_MIN), 1514);
        let mut stats = RecoveryStats::default();
        let mut flight = Flight::default();
        let mut syn_ack = frame(
            SERVER,
            CLIENT,
            TcpControl::Syn,
            iss,
            Some(7),
            4096,
            &[],
            &[],
        );
        if !sack_ok {
            syn_ack.seg.sack_permitted = false;
        }
        flight.on_send(&recovery, &mut stats, &syn_ack.bytes, &syn_ack.seg, at(0));
        assert_eq!(flight.copies(), 1);
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &ack(iss.wrapping_add(1), &[]),
            at(100),
        );
        assert_eq!(
            (flight.copies(), flight.min_rtt_us()),
            (0, 0),
            "a SYN-ACK gives no sample"
        );
        // As the ACK of a first reply, at once, would.
        flight.sample_rtt(&mut recovery, Duration::from_micros(100), false, at(100));
        assert_eq!(flight.min_rtt_us(), 100);
        (recovery, stats, flight)
    }

    fn send(
        flight: &mut Flight,
        recovery: &Recovery,
        stats: &mut RecoveryStats,
        f: &Frame,
        now: Instant,
    ) {
        flight.on_send(recovery, stats, &f.bytes, &f.seg, now);
    }

    /// Sends what `next_resend` asks for at `now`; returns the frames.
    fn resend_due(
        flight: &mut Flight,
        recovery: &mut Recovery,
        stats: &mut RecoveryStats,
        now: Instant,
    ) -> Vec<Vec<u8>> {
        let mut sent = Vec::new();
        while let Some(resend) = flight.next_resend(recovery, stats, now) {
            let mut bytes = vec![0xa5; flight.copy_len(resend)];
            flight.write_copy(resend, &mut bytes);
            flight.resent(recovery, stats, resend, now);
            sent.push(bytes);
            assert!(sent.len() < 100, "runaway");
        }
        assert!(!flight.due(now), "nothing left due");
        sent
    }

    fn seq_of(bytes: &[u8]) -> SegmentRepr {
        SegmentRepr::parse(&TcpFrame::new_checked(bytes).unwrap()).unwrap()
    }

    fn checksum_ok(bytes: &[u8]) -> bool {
        let ip = Ipv4Packet::new_checked(&bytes[14..]).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        tcp.verify_checksum(
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr()),
        )
    }

    #[test]
    fn a_probe_is_the_newest_copy_with_the_newest_ack_and_a_good_checksum() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        let d1 = data(ISS + 1, 100, 7);
        let d2 = data(ISS + 101, 50, 7);
        send(&mut flight, &recovery, &mut stats, &d1, at(1000));
        send(&mut flight, &recovery, &mut stats, &d2, at(1000));
        // A pure ACK of new data from the client, with a new window.
        let pure = frame(
            SERVER,
            CLIENT,
            TcpControl::None,
            ISS + 151,
            Some(60),
            333,
            &[],
            &[],
        );
        send(&mut flight, &recovery, &mut stats, &pure, at(1100));
        let pto = DEFAULT_RTO_MIN + Duration::from_micros(200);
        assert_eq!(flight.deadline(), Some(at(1000) + pto));
        assert!(
            resend_due(
                &mut flight,
                &mut recovery,
                &mut stats,
                at(1000) + pto - Duration::from_micros(1)
            )
            .is_empty()
        );
        let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(1000) + pto);
        assert_eq!(sent.len(), 1);
        let probe = seq_of(&sent[0]);
        assert_eq!((probe.seq_number, probe.payload_len), (ISS + 101, 50));
        assert_eq!((probe.ack_number, probe.window_len), (Some(60), 333));
        assert!(checksum_ok(&sent[0]));
        assert_eq!(&sent[0][54..], &d2.bytes[54..], "the same payload");
        assert_eq!(stats.probes, 1);
        // The next probe after twice the PTO.
        assert_eq!(flight.deadline(), Some(at(1000) + pto + pto * 2));
    }

    #[test]
    fn the_probe_timeout_follows_the_smallest_round_trip_of_the_last_second() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        let floor = |rtt_us: u64| DEFAULT_RTO_MIN + Duration::from_micros(2 * rtt_us);
        let mut seq = ISS + 1;
        let mut now = at(1000);
        // A reply of two segments, acknowledged `ack_us` later; returns the PTO it was sent
        // with. (A lone segment waits for its client's ACK delay instead.)
        let mut round = |ack_us: u64, flight: &mut Flight| {
            now += Duration::from_micros(10);
            send(flight, &recovery, &mut stats, &data(seq, 10, 7), now);
            send(flight, &recovery, &mut stats, &data(seq + 10, 10, 7), now);
            seq += 20;
            let pto = flight.deadline().unwrap() - now;
            now += Duration::from_micros(ack_us);
            flight.on_ack(&mut recovery, &mut stats, &ack(seq, &[]), now);
            pto
        };
        // A client that acknowledges at once: the floor plus the 100 µs round trip twice.
        assert_eq!(round(100, &mut flight), floor(100));
        // A request/response client acknowledges a reply with its next request, here 3 ms
        // later, and now and then at once: the quick ones keep the PTO at the network's
        // round trip, so a lost reply costs about a millisecond, not a think time.
        for k in 0..1000 {
            let ack_us = if k % 50 == 0 { 100 } else { 3000 };
            assert_eq!(round(ack_us, &mut flight), floor(100), "reply {k}");
        }
        // A client that takes 3 ms for every acknowledgment (saturated) for over a second:
        // the PTO grows with it, so probes do not add to a client already slow.
        for _ in 0..400 {
            round(3000, &mut flight);
        }
        assert_eq!(round(3000, &mut flight), floor(3000));
        assert_eq!(flight.min_rtt_us(), 3000);
        // Quick acknowledgments again: back to the floor at once.
        round(40, &mut flight);
        assert_eq!(round(40, &mut flight), floor(40));
        assert_eq!(stats, RecoveryStats::default(), "no probe was due");
    }

    #[test]
    fn probes_are_paid_for_by_acknowledgments_of_new_data() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        let pto = DEFAULT_RTO_MIN + Duration::from_micros(200);
        // The table's clients acknowledged little lately: one probe left.
        recovery.credit = 1;
        let sent_at = at(1000);
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1, 100, 7),
            sent_at,
        );
        let first = sent_at + pto;
        assert_eq!(
            resend_due(&mut flight, &mut recovery, &mut stats, first).len(),
            1
        );
        // The second is due but unpaid: withheld, and the episode left to smoltcp.
        let second = first + pto * 2;
        assert!(resend_due(&mut flight, &mut recovery, &mut stats, second).is_empty());
        assert_eq!((stats.probes, stats.probes_withheld), (1, 1));
        assert_eq!(flight.deadline(), None);
        // Another connection's client acknowledges new data (here, its SYN-ACK): one more,
        // for the next episode, which this connection's next reply starts once its client
        // acknowledged the first.
        let mut other = Flight::default();
        let syn_ack = frame(
            SERVER,
            CLIENT,
            TcpControl::Syn,
            5000,
            Some(9),
            4096,
            &[],
            &[],
        );
        send(&mut other, &recovery, &mut stats, &syn_ack, at(5000));
        other.on_ack(&mut recovery, &mut stats, &ack(5001, &[]), at(5100));
        assert_eq!(recovery.credit, 1);
        flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(6000));
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 101, 100, 7),
            at(7000),
        );
        assert_eq!(
            resend_due(&mut flight, &mut recovery, &mut stats, at(7000) + pto).len(),
            1
        );
        assert_eq!((stats.probes, stats.probes_withheld), (2, 1));
        // Acknowledgments refill the credit up to its limit, no further.
        for k in 0..2 * PROBE_CREDIT {
            let seq = 5001 + k;
            let f = data(seq, 1, 9);
            send(&mut other, &recovery, &mut stats, &f, at(6000));
            other.on_ack(&mut recovery, &mut stats, &ack(seq + 1, &[]), at(6100));
        }
        assert_eq!(recovery.credit, PROBE_CREDIT);
    }

    #[test]
    fn without_a_sample_of_its_own_a_connection_waits_for_what_clients_usually_take() {
        let mut recovery = Recovery::new(Some(DEFAULT_RTO_MIN), 1514);
        let mut stats = RecoveryStats::default();
        let syn_ack = |iss: u32| {
            frame(
                SERVER,
                CLIENT,
                TcpControl::Syn,
                iss,
                Some(7),
                4096,
                &[],
                &[],
            )
        };
        // A table that just started: a SYN-ACK is probed at the floor, data not at all
        // (nothing is known of how soon clients acknowledge it: smoltcp's timer).
        let mut first = Flight::default();
        send(&mut first, &recovery, &mut stats, &syn_ack(ISS), at(0));
        assert_eq!(first.deadline(), Some(at(0) + DEFAULT_RTO_MIN));
        first.on_ack(&mut recovery, &mut stats, &ack(ISS + 1, &[]), at(100));
        send(
            &mut first,
            &recovery,
            &mut stats,
            &data(ISS + 1, 10, 7),
            at(200),
        );
        assert_eq!(first.deadline(), None);
        // Its client acknowledges 3 ms later (with its next request, say).
        first.on_ack(&mut recovery, &mut stats, &ack(ISS + 11, &[]), at(3200));
        assert_eq!(first.min_rtt_us(), 3000, "a sample of its own");
        // A new connection's SYN-ACK waits for the handshakes' round trip (100 µs, and
        // four times its variation, 50 µs), its first reply for the clients' usual
        // acknowledgment (3 ms, plus four times 1.5 ms).
        let mut second = Flight::default();
        send(
            &mut second,
            &recovery,
            &mut stats,
            &syn_ack(9000),
            at(10_000),
        );
        let handshake = Duration::from_micros(100 + 4 * 50);
        assert_eq!(
            second.deadline(),
            Some(at(10_000) + DEFAULT_RTO_MIN + handshake * 2)
        );
        second.on_ack(&mut recovery, &mut stats, &ack(9001, &[]), at(10_100));
        send(
            &mut second,
            &recovery,
            &mut stats,
            &data(9001, 10, 7),
            at(10_200),
        );
        // Its first reply, a lone one, waits for what the table's clients took to
        // acknowledge a lone segment (3 ms, no variation yet) and a quarter of the floor.
        assert_eq!(
            second.deadline(),
            Some(at(10_200) + Duration::from_micros(3000 + 250))
        );
        // The first connection, with an ACK delay of its own, is probed just after it: 3
        // ms and a quarter of the floor.
        send(
            &mut first,
            &recovery,
            &mut stats,
            &data(ISS + 11, 10, 7),
            at(20_000),
        );
        assert_eq!(
            first.deadline(),
            Some(at(20_000) + Duration::from_micros(3000 + 250))
        );
    }

    #[test]
    fn without_sack_the_probe_is_the_oldest_copy() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, false);
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1, 100, 7),
            at(0),
        );
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 101, 100, 7),
            at(0),
        );
        let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(10_000));
        assert_eq!(seq_of(&sent[0]).seq_number, ISS + 1);
    }

    #[test]
    fn a_dsack_makes_a_probe_spurious_and_no_dsack_makes_it_recovered() {
        for (dsack_in_next_ack, spurious) in [
            (None, false),
            (Some(0), true),
            (Some(1), true),
            (Some(3), true),
        ] {
            let (mut recovery, mut stats, mut flight) = synced(ISS, true);
            send(
                &mut flight,
                &recovery,
                &mut stats,
                &data(ISS + 1, 100, 7),
                at(0),
            );
            assert_eq!(
                resend_due(&mut flight, &mut recovery, &mut stats, at(5_000)).len(),
                1
            );
            let end = ISS + 101;
            let dsack = [(ISS + 1, end)];
            match dsack_in_next_ack {
                // The probe's own ACK carries the D-SACK.
                Some(0) => flight.on_ack(&mut recovery, &mut stats, &ack(end, &dsack), at(5_100)),
                // The original's ACKs (its delayed ACK, or a pipelining client's next
                // requests) crossed the probe; the D-SACK follows them.
                Some(crossed) => {
                    for k in 0..crossed {
                        let t = at(5_120 + 10 * k);
                        flight.on_ack(&mut recovery, &mut stats, &ack(end, &[]), t);
                    }
                    assert_eq!((stats.recovered, stats.spurious), (0, 0), "not settled yet");
                    flight.on_ack(&mut recovery, &mut stats, &ack(end, &dsack), at(5_150));
                }
                None => flight.on_ack(&mut recovery, &mut stats, &ack(end, &[]), at(5_100)),
            }
            // The next reply, sent after the probe, is acknowledged without a D-SACK: the
            // client had the probe before it, and reported no duplicate.
            send(
                &mut flight,
                &recovery,
                &mut stats,
                &data(end, 10, 7),
                at(6_000),
            );
            flight.on_ack(&mut recovery, &mut stats, &ack(end + 10, &[]), at(6_100));
            assert_eq!(
                (stats.recovered, stats.spurious),
                (u64::from(!spurious), u64::from(spurious)),
                "{dsack_in_next_ack:?}"
            );
            assert_eq!((flight.copies(), flight.deadline()), (0, None));
        }
    }

    #[test]
    fn an_ack_sooner_than_a_round_trip_after_the_probe_crossed_it_and_makes_it_spurious() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1, 100, 7),
            at(0),
        );
        assert_eq!(
            resend_due(&mut flight, &mut recovery, &mut stats, at(5_000)).len(),
            1
        );
        // The client's ACK of the original (with its next request) comes 60 µs after the
        // probe left, less than the 100 µs round trip: it was sent before the probe came.
        flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(5_060));
        assert_eq!((stats.recovered, stats.spurious), (0, 1));
        // The client's D-SACK for the probe follows: counted once.
        let dsack = [(ISS + 1, ISS + 101)];
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &ack(ISS + 101, &dsack),
            at(5_110),
        );
        flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(9_000));
        assert_eq!((stats.recovered, stats.spurious), (0, 1));
    }

    #[test]
    fn a_lost_segment_is_resent_once_a_later_one_is_sacked_and_the_reordering_window_passed() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        for k in 0..3 {
            send(
                &mut flight,
                &recovery,
                &mut stats,
                &data(ISS + 1 + k * 100, 100, 7),
                at(1000),
            );
        }
        // The first and third arrive after 100 µs; the second does not.
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &ack(ISS + 101, &[(ISS + 201, ISS + 301)]),
            at(1100),
        );
        // RACK: the second is lost 100 µs (that RTT) + SRTT/4 after it was sent.
        assert_eq!(flight.deadline(), Some(at(1125)));
        assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1124)).is_empty());
        let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(1125));
        assert_eq!(sent.len(), 1);
        assert_eq!(seq_of(&sent[0]).seq_number, ISS + 101);
        assert_eq!(stats.sack_resends, 1);
        // Sent again at 1125, it is newer than anything delivered: not lost again until
        // something sent after it arrives; only the probe timer remains.
        let deadline = flight.deadline().unwrap();
        assert!(deadline > at(1125) + DEFAULT_RTO_MIN, "{deadline}");
        flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 301, &[]), at(1230));
        assert_eq!((flight.copies(), flight.deadline()), (0, None));
        // Settled once data sent after the re-send is acknowledged without a D-SACK.
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 301, 10, 7),
            at(1500),
        );
        flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 311, &[]), at(2000));
        assert_eq!((stats.recovered, stats.spurious), (1, 0));
    }

    #[test]
    fn smoltcp_retransmissions_are_counted_and_replace_the_copies_they_cover() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1, 100, 7),
            at(0),
        );
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 101, 100, 7),
            at(0),
        );
        // smoltcp's timer: old data again.
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1, 100, 7),
            at(1_000_000),
        );
        assert_eq!((stats.smoltcp_retransmits, flight.copies()), (1, 2));
        // Old and new data together: one copy now holds them.
        let both = data(ISS + 1, 300, 7);
        send(&mut flight, &recovery, &mut stats, &both, at(2_000_000));
        assert_eq!((stats.smoltcp_retransmits, flight.copies()), (2, 1));
        let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(3_000_000));
        assert_eq!(&sent[0][54..], &both.bytes[54..]);
        assert_eq!(flight.snd_max(), ISS + 301);
    }

    #[test]
    fn a_retransmitted_syn_ack_is_smoltcps_and_a_new_one_starts_over() {
        let mut recovery = Recovery::new(Some(DEFAULT_RTO_MIN), 1514);
        let mut stats = RecoveryStats::default();
        let mut flight = Flight::default();
        let syn_ack = frame(
            SERVER,
            CLIENT,
            TcpControl::Syn,
            ISS,
            Some(7),
            4096,
            &[],
            &[],
        );
        send(&mut flight, &recovery, &mut stats, &syn_ack, at(0));
        send(&mut flight, &recovery, &mut stats, &syn_ack, at(1_000_000));
        assert_eq!((stats.smoltcp_retransmits, flight.copies()), (1, 1));
        // Probes of a SYN-ACK stop early.
        let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(1_001_000));
        assert_eq!(sent.len(), 1);
        assert_eq!(
            &sent[0][..],
            &syn_ack.bytes[..],
            "a SYN-ACK is sent as it was"
        );
        resend_due(&mut flight, &mut recovery, &mut stats, at(1_003_000));
        assert_eq!(stats.probes, u64::from(MAX_HANDSHAKE_PROBES));
        assert_eq!(flight.deadline(), None);
        // The slot's next connection.
        let other = frame(
            SERVER,
            CLIENT,
            TcpControl::Syn,
            5000,
            Some(9),
            4096,
            &[],
            &[],
        );
        send(&mut flight, &recovery, &mut stats, &other, at(2_000_000));
        assert_eq!(flight.copies(), 1);
        flight.on_ack(&mut recovery, &mut stats, &ack(5001, &[]), at(2_000_040));
        assert_eq!(flight.copies(), 0);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let iss = u32::MAX - 150;
        let (mut recovery, mut stats, mut flight) = synced(iss, true);
        let d1 = data(iss.wrapping_add(1), 100, 7);
        let d2 = data(iss.wrapping_add(101), 100, 7);
        send(&mut flight, &recovery, &mut stats, &d1, at(1000));
        send(&mut flight, &recovery, &mut stats, &d2, at(1000));
        assert_eq!(flight.snd_max(), iss.wrapping_add(201));
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &ack(iss.wrapping_add(101), &[]),
            at(1100),
        );
        assert_eq!(flight.copies(), 1);
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &ack(iss.wrapping_add(201), &[]),
            at(1200),
        );
        assert_eq!(flight.copies(), 0);
        assert_eq!(stats, RecoveryStats::default());
    }

    /// Copy `index` as a re-send would write it.
    fn copy_bytes(flight: &Flight, index: usize) -> Vec<u8> {
        let resend = Resend {
            index,
            kind: ResendKind::Probe,
        };
        let mut bytes = vec![0xa5; flight.copy_len(resend)];
        flight.write_copy(resend, &mut bytes);
        bytes
    }

    #[test]
    fn small_lone_copies_stay_inline_and_others_go_to_the_heap_in_order() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        // Request/response with small replies: no heap storage at all.
        let mut seq = ISS + 1;
        for i in 0..20i64 {
            let reply = data(seq, 100, 7);
            seq += 100;
            send(
                &mut flight,
                &recovery,
                &mut stats,
                &reply,
                at(1000 + 100 * i),
            );
            assert_eq!(copy_bytes(&flight, 0), reply.bytes);
            flight.on_ack(
                &mut recovery,
                &mut stats,
                &ack(seq, &[]),
                at(1050 + 100 * i),
            );
            assert_eq!(flight.copies(), 0);
        }
        assert_eq!(
            (
                flight.copies.more.capacity(),
                flight.copies.bytes.capacity()
            ),
            (0, 0)
        );
        // Small, large, small: the first inline, the others behind it on the heap.
        let d1 = data(seq, 100, 7);
        let d2 = data(seq + 100, 600, 7);
        let d3 = data(seq + 700, 50, 7);
        for f in [&d1, &d2, &d3] {
            send(&mut flight, &recovery, &mut stats, f, at(5000));
        }
        assert!(flight.copies.first.is_some());
        assert_eq!(flight.copies.more.len(), 2);
        for (index, f) in [&d1, &d2, &d3].into_iter().enumerate() {
            assert_eq!(copy_bytes(&flight, index), f.bytes, "copy {index}");
        }
        flight.on_ack(&mut recovery, &mut stats, &ack(seq + 100, &[]), at(5100));
        assert!(flight.copies.first.is_none());
        assert_eq!(copy_bytes(&flight, 0), d2.bytes);
        assert_eq!(copy_bytes(&flight, 1), d3.bytes);
        // A small copy sent while others are kept goes behind them, not inline.
        let d4 = data(seq + 750, 20, 7);
        send(&mut flight, &recovery, &mut stats, &d4, at(5200));
        assert!(flight.copies.first.is_none());
        assert_eq!(copy_bytes(&flight, 2), d4.bytes);
        // smoltcp goes back and sends d3 and d4's data again with more: that copy replaces
        // both.
        let d34 = data(seq + 700, 200, 7);
        send(&mut flight, &recovery, &mut stats, &d34, at(5300));
        assert_eq!(flight.copies(), 2);
        assert_eq!(copy_bytes(&flight, 1), d34.bytes);
        flight.on_ack(&mut recovery, &mut stats, &ack(seq + 900, &[]), at(5400));
        assert_eq!(flight.copies(), 0);
        // A frame too large to keep inline goes to the heap even alone.
        let d5 = data(seq + 900, 400, 7);
        send(&mut flight, &recovery, &mut stats, &d5, at(6000));
        assert!(flight.copies.first.is_none());
        assert_eq!(copy_bytes(&flight, 0), d5.bytes);
    }

    #[test]
    fn copies_survive_the_ring_wrapping() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        // Every copy is probed (to read it back), none is paid for by an acknowledgment.
        recovery.credit = 1000;
        let mut seq = ISS + 1;
        let mut now = at(1000);
        let mut unacked: VecDeque<Frame> = VecDeque::new();
        let mut wrapped = 0;
        for round in 0..300usize {
            let f = data(seq, 37 * (round % 7) + round % 5 + 1, 7);
            seq += f.seg.payload_len as u32;
            send(&mut flight, &recovery, &mut stats, &f, now);
            unacked.push_back(f);
            // The peer acknowledges all but the newest three.
            if unacked.len() > 3 {
                let oldest = unacked.pop_front().unwrap();
                let end = oldest.seg.seq_number + oldest.seg.payload_len as u32;
                now += Duration::from_micros(100);
                flight.on_ack(&mut recovery, &mut stats, &ack(end, &[]), now);
            }
            wrapped += usize::from(!flight.copies.bytes.as_slices().1.is_empty());
            // The newest comes out of a probe byte for byte.
            now = flight.deadline().unwrap();
            let sent = resend_due(&mut flight, &mut recovery, &mut stats, now);
            assert_eq!(sent.len(), 1, "round {round}");
            assert_eq!(
                &sent[0][..],
                &unacked.back().unwrap().bytes[..],
                "round {round}"
            );
            assert_eq!(flight.copies(), unacked.len());
        }
        assert!(
            wrapped > 10,
            "the copies wrapped around the ring {wrapped} times"
        );
    }

    #[test]
    fn recovery_off_keeps_no_copy_and_counts_smoltcps_retransmissions() {
        let recovery = Recovery::new(None, 1514);
        let mut stats = RecoveryStats::default();
        let mut flight = Flight::default();
        let syn_ack = frame(
            SERVER,
            CLIENT,
            TcpControl::Syn,
            ISS,
            Some(7),
            4096,
            &[],
            &[],
        );
        send(&mut flight, &recovery, &mut stats, &syn_ack, at(0));
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1, 100, 7),
            at(0),
        );
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1, 100, 7),
            at(1_000_000),
        );
        assert_eq!((flight.copies(), flight.deadline()), (0, None));
        assert_eq!(stats.smoltcp_retransmits, 1);
    }

    /// The client's segment `seq..seq + len` (with `ack`): a request.
    fn request(seq: u32, len: usize, ack: u32) -> SegmentRepr {
        let payload = vec![b'r'; len];
        frame(
            CLIENT,
            SERVER,
            TcpControl::Psh,
            seq,
            Some(ack),
            1000,
            &payload,
            &[],
        )
        .seg
    }

    /// A synced connection with its table's recovery state, its next sequence number and
    /// the clock, for a run of lone segments.
    struct Lone {
        recovery: Recovery,
        stats: RecoveryStats,
        flight: Flight,
        seq: u32,
        now: Instant,
    }

    impl Lone {
        fn new() -> Self {
            let (recovery, stats, flight) = synced(ISS, true);
            Lone {
                recovery,
                stats,
                flight,
                seq: ISS + 1,
                now: at(1000),
            }
        }

        /// Sends a lone segment, has it acknowledged `ack_us` later, and returns the probe
        /// timeout it had.
        fn round(&mut self, ack_us: u64) -> Duration {
            let Lone {
                recovery,
                stats,
                flight,
                seq,
                now,
            } = self;
            send(flight, recovery, stats, &data(*seq, 10, 7), *now);
            *seq += 10;
            let pto = flight.deadline().unwrap() - *now;
            *now += Duration::from_micros(ack_us);
            flight.on_ack(recovery, stats, &ack(*seq, &[]), *now);
            *now += Duration::from_micros(100);
            pto
        }
    }

    #[test]
    fn a_lone_segments_timeout_follows_its_clients_ack_delay() {
        let mut c = Lone::new();
        let base = DEFAULT_RTO_MIN + Duration::from_micros(200);
        let us = Duration::from_micros;
        // Before any ACK delay of its own: the floor and twice the 100 µs round trip.
        let first = c.round(3000);
        assert_eq!(first, base);
        // A client that acknowledges each reply with its next request, 3.0 to 3.4 ms later
        // (in steps of 104 µs: whole units of 8 µs): the largest delay so far, or until 32
        // are its own what the table's clients take if longer (smoothed, plus four
        // deviations), and a quarter of the floor.
        for k in 1..ACK_DELAY_SAMPLES as u64 {
            let prior = c.recovery.lone_delay.timeout_us();
            let pto = c.round(3000 + 104 * (k % 5));
            let largest = 3000 + 104 * (k - 1).min(4);
            assert_eq!(pto, us(largest.max(prior) + 250), "reply {k}");
        }
        // All 32 kept: the second largest. One outlier (a client descheduled for 30 ms)
        // does not count; a second one does.
        c.round(30_000);
        let pto = c.round(3000);
        assert_eq!(pto, us(3416 + 250));
        c.round(30_000);
        let pto = c.round(3000);
        assert_eq!(
            pto,
            us(30_000 + 30_000 / 4 - 1000),
            "a quarter of the delay less the floor, more than 250 µs and a sixteenth"
        );
        // Two segments in c.flight are acknowledged at once by any client: the floor and the
        // round trip.
        send(
            &mut c.flight,
            &c.recovery,
            &mut c.stats,
            &data(c.seq, 10, 7),
            c.now,
        );
        send(
            &mut c.flight,
            &c.recovery,
            &mut c.stats,
            &data(c.seq + 10, 10, 7),
            c.now,
        );
        assert_eq!(c.flight.deadline(), Some(c.now + base));
        // Once the first is acknowledged, the second waits alone.
        c.now += us(100);
        c.flight
            .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 10, &[]), c.now);
        assert_eq!(
            c.flight.deadline(),
            Some(c.now + us(30_000 + 30_000 / 4 - 1000))
        );
        c.now += us(100);
        c.flight
            .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 20, &[]), c.now);
        c.seq += 20;
        // A client that acknowledges at once: within 32 replies, the floor alone.
        for _ in 0..ACK_DELAY_SAMPLES {
            c.round(100);
        }
        let pto = c.round(100);
        assert_eq!(pto, DEFAULT_RTO_MIN);
        assert_eq!(c.stats, RecoveryStats::default(), "no probe was due");
        // A new connection in the slot starts with none.
        c.flight.reset();
        assert_eq!(c.flight.ack_delay_us(), 0);
    }

    #[test]
    fn a_lone_segments_timeout_is_at_most_max_ack_delay() {
        let mut c = Lone::new();
        // A client that acknowledges 300 ms late c.now and then, and at once otherwise: its
        // lone replies wait 500 ms at most.
        for k in 0..10 {
            let ack_us = if k % 2 == 0 { 520_000 } else { 100 };
            c.round(ack_us);
        }
        let pto = c.round(100);
        assert_eq!(pto, MAX_ACK_DELAY);
        // One whose every acknowledgment took 300 ms for over a second: its round trip is
        // that long, and so is its timeout (the floor and twice the round trip, or less).
        for _ in 0..10 {
            c.round(520_000);
        }
        assert_eq!(c.flight.min_rtt_us(), 520_000);
        // Once 32 are its own (the table's smoothed delays, of both kinds, no longer
        // count).
        for _ in 0..ACK_DELAY_SAMPLES {
            c.round(520_000);
        }
        let pto = c.round(520_000);
        assert_eq!(pto, Duration::from_micros(520_000 + 520_000 / 4 - 1000));
        assert_eq!(c.stats, RecoveryStats::default(), "no probe was due");
    }

    #[test]
    fn a_lone_segments_margin_is_a_sixteenth_of_a_few_floors_and_a_quarter_of_long_delays() {
        let mut c = Lone::new();
        let us = Duration::from_micros;
        for _ in 0..ACK_DELAY_SAMPLES {
            c.round(4000);
        }
        // Up to four floors: a quarter of the floor, or a sixteenth of the delay if more.
        assert_eq!(c.round(4000), us(4000 + 250));
        for _ in 0..ACK_DELAY_SAMPLES {
            c.round(8000);
        }
        assert_eq!(c.round(8000), us(8000 + 1000));
        // Longer: a quarter of the delay less the floor.
        for _ in 0..ACK_DELAY_SAMPLES {
            c.round(100_000);
        }
        assert_eq!(c.round(100_000), us(100_000 + 24_000));
    }

    /// One thread serving 10,000 connections acknowledges each reply with its next request,
    /// one pass over all of them later (about 100 ms), and that pass takes every connection
    /// as long as the others: when the thread slows down by a tenth (it gets less CPU for a
    /// while), every connection's delay grows by a tenth at once. With a sixteenth as the
    /// margin, every lone reply was then probed for nothing, thousands at a time, until each
    /// connection had learned the new delay from its own spurious probes.
    #[test]
    fn a_client_whose_pace_slows_by_a_tenth_is_not_probed() {
        let mut c = Lone::new();
        for k in 0..4 * ACK_DELAY_SAMPLES as u64 {
            c.round(98_000 + 1000 * (k % 5));
        }
        for _ in 0..ACK_DELAY_SAMPLES {
            let pto = c.round(112_000);
            assert!(pto > Duration::from_millis(112), "{pto}");
        }
    }

    #[test]
    fn spurious_probes_of_a_lone_segment_lengthen_its_timeout_fast() {
        let mut c = Lone::new();
        // A client that acknowledged at once, then delays every ACK until its next request,
        // 50 ms later (a D-SACK answers a probe at once, as Linux does).
        for _ in 0..ACK_DELAY_SAMPLES {
            c.round(100);
        }
        let mut probes = Vec::new();
        for _ in 0..20 {
            send(
                &mut c.flight,
                &c.recovery,
                &mut c.stats,
                &data(c.seq, 10, 7),
                c.now,
            );
            let sent = c.now;
            let probe_at = c.flight.deadline().unwrap();
            if probe_at - sent < Duration::from_millis(50) {
                resend_due(&mut c.flight, &mut c.recovery, &mut c.stats, probe_at);
                probes.push(probe_at - sent);
                // The D-SACK acknowledges the original too, a round trip after the probe.
                c.now = probe_at + Duration::from_micros(100);
                let dsack = [(c.seq, c.seq + 10)];
                c.flight.on_ack(
                    &mut c.recovery,
                    &mut c.stats,
                    &ack(c.seq + 10, &dsack),
                    c.now,
                );
            }
            if c.flight.copies() == 1 {
                c.now = sent + Duration::from_millis(50);
                c.flight
                    .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 10, &[]), c.now);
            }
            c.seq += 10;
            c.now += Duration::from_micros(100);
        }
        // Each spurious probe counts as twice its wait, and once two are kept the timeout
        // follows: after a dozen, the client's 50 ms delay is its timeout.
        assert!(probes.len() <= 12, "{probes:?}");
        assert_eq!(
            c.stats.probes_spurious,
            probes.len() as u64,
            "{:?}",
            c.stats
        );
        assert_eq!(c.stats.probes_recovered, 0);
        let pto = c.round(50_000);
        assert!(pto > Duration::from_millis(50), "{pto}");
    }

    #[test]
    fn a_probe_that_repaired_a_loss_is_counted_with_its_wait_and_no_delay_sample() {
        let mut c = Lone::new();
        for _ in 0..4 {
            c.round(3000);
        }
        assert_eq!(c.flight.ack_delay_us(), 3000);
        let sent = c.now;
        send(
            &mut c.flight,
            &c.recovery,
            &mut c.stats,
            &data(c.seq, 10, 7),
            sent,
        );
        let probe_at = c.flight.deadline().unwrap();
        assert_eq!(probe_at - sent, Duration::from_micros(3250));
        assert_eq!(
            resend_due(&mut c.flight, &mut c.recovery, &mut c.stats, probe_at).len(),
            1
        );
        // The probe is acknowledged (with the client's next request) 3 ms later, without a
        // D-SACK, and so is the next reply: the original was lost.
        let answer = probe_at + Duration::from_millis(3);
        c.flight
            .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 10, &[]), answer);
        send(
            &mut c.flight,
            &c.recovery,
            &mut c.stats,
            &data(c.seq + 10, 10, 7),
            answer,
        );
        let later = answer + Duration::from_micros(100);
        c.flight
            .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 20, &[]), later);
        assert_eq!((c.stats.recovered, c.stats.probes_spurious), (1, 0));
        assert_eq!(
            (c.stats.probes_recovered, c.stats.probes_recovered_us),
            (1, 3250)
        );
        // A loss is no delay of the client's: the timeout stays.
        assert_eq!(c.flight.ack_delay_us(), 3000);
    }

    #[test]
    fn a_peer_retransmitting_data_a_copy_acknowledged_shows_that_copy_lost() {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        // The client's request 7..17 came; the reply acknowledges it.
        let reply = data(ISS + 1, 100, 17);
        send(&mut flight, &recovery, &mut stats, &reply, at(1000));
        let probe_at = flight.deadline().unwrap();
        // A new request (a pipelining client), and a pure ACK, whose acknowledgment does
        // not cover the reply: no evidence, the reply may be on its way.
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &request(17, 10, ISS + 1),
            at(1100),
        );
        flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 1, &[]), at(1150));
        assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1150)).is_empty());
        // smoltcp acknowledges the new request (a pure ACK); the reply did not carry that.
        let pure = frame(
            SERVER,
            CLIENT,
            TcpControl::None,
            ISS + 101,
            Some(27),
            500,
            &[],
            &[],
        );
        send(&mut flight, &recovery, &mut stats, &pure, at(1160));
        // The client sends 17..27 again: only our ACK of it (the pure ACK) is known lost.
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &request(17, 10, ISS + 1),
            at(1200),
        );
        assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1200)).is_empty());
        // The client sends 7..17 again, long before the probe: it never got the reply.
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &request(7, 10, ISS + 1),
            at(1300),
        );
        assert!(at(1300) < probe_at);
        let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(1300));
        assert_eq!(sent.len(), 1);
        assert_eq!(&sent[0][54..], &reply.bytes[54..]);
        assert_eq!(
            (
                stats.peer_retransmit_resends,
                stats.probes,
                stats.sack_resends
            ),
            (1, 0, 0)
        );
        // Sent again, it waits for the next evidence: nothing more is due.
        assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1400)).is_empty());
        // An old retransmission, whose acknowledgment is below what the client has since
        // acknowledged, is stale evidence.
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 101, 10, 27),
            at(1500),
        );
        flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(1600));
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &request(7, 10, ISS + 1),
            at(1700),
        );
        assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1700)).is_empty());
        assert_eq!(stats.peer_retransmit_resends, 1);
    }

    #[test]
    fn an_incremental_checksum_matches_a_full_one() {
        for (ack, window) in [
            (0, 0),
            (u32::MAX, u16::MAX),
            (0x1234_5678, 0x9abc),
            (7, 500),
        ] {
            let mut f = data(ISS, 33, 0xdead_beef).bytes;
            refresh_ack(&mut f, ack, window);
            let seg = seq_of(&f);
            assert_eq!((seg.ack_number, seg.window_len), (Some(ack), window));
            assert!(checksum_ok(&f), "{ack:#x} {window:#x}");
        }
    }

    #[test]
    fn an_incremental_checksum_holds_over_ipv6() {
        use smoltcp::wire::Ipv6Packet;
        for (ack, window) in [(0, 0), (u32::MAX, u16::MAX), (0x1234_5678, 0x9abc)] {
            let mut f = crate::demux::tests::SYN6_FRAME.to_vec();
            refresh_ack(&mut f, ack, window);
            let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
            let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
            assert_eq!((tcp.ack_number().0 as u32, tcp.window_len()), (ack, window));
            assert!(
                tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into()),
                "{ack:#x} {window:#x}"
            );
        }
    }
}
