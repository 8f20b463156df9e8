//! Loss recovery at round-trip scale, built around smoltcp.
//!
//! smoltcp retransmits on its own timer, which never fires sooner than one second
//! (`RTTE_MIN_RTO`), and after three duplicate ACKs, which a request/response connection
//! with one segment in flight never gets; it ignores SACK. It has no way to be told to
//! retransmit, and its send buffer cannot be read back, but the table sees every frame a
//! connection sends (`view.rs`, through [`BucketPeers`]) and every segment it receives,
//! before smoltcp does ([`ConnTable::recovery_ingress`]). So each connection keeps a **copy
//! of every frame that takes sequence space** (SYN, SYN-ACK, data, FIN) until the peer
//! acknowledges it, and the table sends copies again itself ([`ConnTable::resend`]). A
//! copy is an exact duplicate, which is legal TCP (RFC 9293 §3.10.7.4: the receiver drops
//! what it has and acknowledges), except that it carries the newest acknowledgment number
//! and window the connection sent, so the peer never sees an outdated ACK. The peer's
//! acknowledgment then moves smoltcp on as if its own segment had arrived.
//!
//! ```text
//! smoltcp egress ─▶ view.rs frames it ─▶ BucketPeers::sent ─▶ Flight::on_send: copy kept
//! frame in ─▶ ConnTable::recovery_ingress ─▶ Flight::on_ack (ACK, SACK, D-SACK) ─▶ smoltcp
//!               drops acknowledged copies, samples the RTT, marks SACKed copies, finds
//!               lost ones, measures the peer's ACK delay of lone segments, re-arms the probe
//! poll_egress ─▶ ConnTable::resend ─▶ Flight::next_resend: lost copies at once, a probe
//!                                     when its timer runs out
//! ```
//!
//! The mechanisms (`flight.rs` holds them, per connection; the estimators they read are in
//! `rtt.rs`, the copies in `copies.rs`):
//!
//! - **Tail-loss probe** (RFC 8985 §7). When nothing new is acknowledged for the probe
//!   timeout (PTO), the newest copy the peer has not SACKed goes out again (the oldest, for
//!   a peer without SACK). With two or more segments in flight the PTO is `rto_min` +
//!   2·RTT, RTT being the smallest time the connection's peer took to acknowledge data in
//!   the last second or so ([`MIN_RTT_WINDOW`](rtt::MIN_RTT_WINDOW)): a request/response
//!   peer acknowledges with its next request, so its smoothed RTT is its think time, while
//!   the minimum is the network's round trip as long as some acknowledgments come at once.
//!   Before a connection has a sample it uses what the table's peers usually take (SRTT +
//!   4·RTTVAR, RFC 6298), and before any peer has, smoltcp's timer; a SYN or SYN-ACK uses
//!   the table's handshake round trip. A probe that brings no acknowledgment doubles the
//!   PTO; after [`MAX_PROBES`] ([`MAX_HANDSHAKE_PROBES`] for a handshake) probing stops
//!   until the peer acknowledges something, and smoltcp's timer carries on.
//! - **A lone segment waits for its peer's ACK delay.** A peer that delays its ACK until
//!   its next request (Linux's "pingpong" mode) acknowledges a lone reply after its think
//!   time, which no round trip predicts. Each connection measures it ([`AckDelays`](rtt::AckDelays)):
//!   the time from each lone segment's transmission to its ACK over its last
//!   [`ACK_DELAY_SAMPLES`], and probes a lone segment after a high quantile of them plus a
//!   margin, at least the floor and at most [`MAX_ACK_DELAY`] (unless `rto_min` + 2·RTT is
//!   longer). A probe that proves spurious counts as a sample of its wait (each one more in
//!   a row as twice it), so a peer that turns slow is learned within a few probes.
//!   `tests::a_lone_segments_timeout_follows_its_clients_ack_delay` shows it.
//! - **The peer's retransmission.** When the peer sends again data (or a FIN) we had
//!   acknowledged, no acknowledgment had reached it when it did: the first copy that
//!   carried one is lost and goes out again once it was sent at least a round trip ago (the
//!   newest delivered segment's RTT, at least the minimum, and the reordering window), at
//!   once if it was; sent more recently it may be in flight, and goes out again only if
//!   its ACK does not come within that time. Only that copy: the peer's ACK of it shows
//!   what else is missing (RACK, below). And once per round trip: until the peer
//!   acknowledges all that had been sent when that copy went out, a retransmission of the
//!   peer's may be its answer to the copy, and shows nothing. A copy sent again on this
//!   evidence is itself the peer's evidence (both ends run this code), and each duplicate
//!   draws an ACK at once, three of which make smoltcp retransmit; without these limits
//!   each end's duplicates would drive the other's, a loop that outlives the loss that
//!   began it. `tests::a_peers_retransmission_crossing_our_reply_sends_nothing_again`.
//! - **Probes are paid for** by acknowledgments: every ACK of new data (any connection's)
//!   earns the table one probe, up to [`PROBE_CREDIT`] saved, and every probe spends one; a
//!   probe due when none is left is withheld, and that episode is left to smoltcp's timer.
//!   So probing never sends more copies than the peers acknowledge, and peers too busy to
//!   acknowledge are not sent a copy of nearly every segment on top.
//! - **SACK re-send** (RACK, RFC 8985 §6, simplified). When the peer SACKs or acknowledges
//!   a segment, every unSACKed copy sent before it counts as lost once that segment's RTT
//!   plus a reordering window (a quarter of the minimum RTT) has passed, and goes out again
//!   at once. A copy sent again is newer than everything delivered so far, so it is only
//!   declared lost again after something sent later arrives: re-sends follow the peer's
//!   ACKs and cannot run away.
//! - **The floor, `rto_min`** (`--rto-min`, default [`DEFAULT_RTO_MIN`]): no copy is sent
//!   again by a timer sooner than this after its previous transmission. 1 ms is what
//!   datacenter Linux hosts set on their routes (`ip route ... rto_min 1ms`) and is well
//!   above a TAP, veth or datacenter round trip and a busy host's scheduling delays. SACK
//!   re-sends need no floor: the peer's ACKs pace them. `None` turns recovery off.
//! - **Both ends.** A server table repairs its lost SYN-ACKs and replies, a client table
//!   (`client.rs`) its lost SYNs and requests, with the same code: a copy does not know
//!   which end sent it. One difference: before any peer of the table has acknowledged
//!   data, a connection the table opened probes after the floor and twice the handshake
//!   round trip (a server acknowledges a request at once), where an accepted one leaves
//!   its first reply to smoltcp's timer (a client may delay its ACK for its think time).
//!   `tests::client::a_lost_request_is_repaired_at_round_trip_scale` and
//!   `a_lost_syn_is_probed_after_the_floor` show the client's side.
//! - **Counters** ([`RecoveryStats`], listed by [`RecoveryStats::fields`]): probes sent,
//!   withheld, stretched by an ACK delay, spurious and recovered (with their wait), SACK
//!   re-sends, re-sends after a peer's retransmission, and of the copies sent again those
//!   that repaired a loss (acknowledged no sooner than a round trip after they went out,
//!   and no D-SACK for them by the time data sent after them is acknowledged) and the
//!   spurious ones (a D-SACK, RFC 2883, or an ACK sooner than the connection's smallest
//!   round trip after the copy went out). Without SACK, and for a copy whose connection
//!   ends before the next ACK, the outcome is unknown and counted in neither.
//!
//! **Why a copy may be sent as it is.** smoltcp negotiates no TCP timestamps (the table
//! gives it no timestamp generator), so a copy carries no stale TSval for the peer's PAWS
//! check; only its acknowledgment number and window are brought up to date
//! ([`refresh_ack`], with an incremental checksum).
//!
//! **Costs.** A copy of each frame sent with sequence space (a memcpy) and, per segment
//! received, a read of its options. A connection's copies hold at most its unacknowledged
//! bytes plus the headers of each segment. At thousands of connections a connection's
//! state is out of cache whenever its next segment comes, so [`Flight`] keeps what an ACK
//! and a reply both touch in its first few cache lines, a lone small copy included
//! ([`Copies`](copies::Copies)), and ingress prefetches those lines with the slot's.

mod copies;
mod flight;
mod rtt;

use smoltcp::phy::{Device, TxToken};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpAddress;

use super::ingress::prefetch_line;
use super::{Bucket, ConnTable, Phase, Slot, find_peer};
use crate::Poll;
use crate::demux::{SegmentRepr, TcpFrame, tcp_field};
use crate::view::{PeerMac, Peers};
use rtt::{MinRtt, Smoothed};

pub(crate) use flight::Flight;

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

/// The longest a lone segment's probe waits for its client's acknowledgment (unless every
/// ACK of the last second took longer): half of smoltcp's own one-second timer. RFC 8985
/// waits at most its worst-case delayed ACK (`WCDelAckT`, 200 ms), but a client whose ACK
/// rides on its next request acknowledges after its think time, which may be longer (one
/// client thread passing over thousands of connections); a probe before that is sent for
/// nothing every time. A client that acknowledges later than this still has its lone
/// segments probed after this long (see the module's "ACK delay").
pub const MAX_ACK_DELAY: Duration = Duration::from_millis(500);

/// How many of its client's latest acknowledgment delays of lone segments a connection
/// keeps (see the module's "a lone segment waits for its peer's ACK delay").
pub const ACK_DELAY_SAMPLES: usize = 32;

/// Most copy storage a connection reserves when its first copy does not fit inline (see
/// [`Copies`]): two frames at MTU 1500.
const RESERVED_COPY_BYTES: usize = 4096;

/// Defines [`RecoveryStats`] from one list of its counters, each with its doc comment and
/// a one-line description, so that [`RecoveryStats::fields`], [`RecoveryStats::add`] and
/// [`RecoveryStats::since`] cannot miss a counter.
macro_rules! recovery_stats {
    ($($(#[$doc:meta])* $name:ident: $description:literal,)*) => {
        /// Counters of loss recovery, per table.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct RecoveryStats {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl RecoveryStats {
            /// How many counters [`fields`](Self::fields) lists.
            pub const COUNT: usize = [$(stringify!($name)),*].len();

            /// Every counter, in declaration order: its field name (`snake_case`), a
            /// one-line description and its value. For rendering them all without naming
            /// each.
            pub fn fields(&self) -> [RecoveryCounter; Self::COUNT] {
                [$(RecoveryCounter {
                    name: stringify!($name),
                    description: $description,
                    value: self.$name,
                }),*]
            }

            /// Adds `other`'s counters to these (the tables of several workers).
            pub fn add(&mut self, other: &RecoveryStats) {
                $(self.$name = self.$name.wrapping_add(other.$name);)*
            }

            /// What was counted since `base` was read (each counter less `base`'s, at
            /// least 0).
            pub fn since(&self, base: &RecoveryStats) -> RecoveryStats {
                RecoveryStats {
                    $($name: self.$name.saturating_sub(base.$name),)*
                }
            }
        }
    };
}

/// One counter of [`RecoveryStats`], as [`RecoveryStats::fields`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryCounter {
    /// The field's name, `snake_case` (`probes`, `probes_recovered_us`, ...).
    pub name: &'static str,
    /// What it counts, one line.
    pub description: &'static str,
    /// Its value.
    pub value: u64,
}

recovery_stats! {
    /// Tail-loss probes sent: copies sent again because nothing was acknowledged for a
    /// probe timeout.
    probes: "tail-loss probes sent",
    /// Copies sent again because the peer SACKed or acknowledged a later segment.
    sack_resends: "copies sent again because the peer SACKed or acknowledged a later segment",
    /// Copies sent again (probes and SACK re-sends) that repaired a loss: acknowledged no
    /// sooner than a round trip after they went out, and not reported as a duplicate by the
    /// time data sent after them was acknowledged.
    recovered: "copies sent again that repaired a loss",
    /// Copies sent again that the peer already had: reported as duplicates (D-SACK), or
    /// acknowledged by an ACK that left the peer before they arrived. The original had
    /// arrived; only its acknowledgment was late or lost.
    spurious: "copies sent again that the peer already had",
    /// Segments smoltcp sent again itself (its one-second timer or its fast retransmit on
    /// three duplicate ACKs), seen on egress.
    smoltcp_retransmits: "segments smoltcp sent again itself (its timer or fast retransmit)",
    /// Probes that were due but not sent, because the table's clients had not
    /// acknowledged enough to pay for them; the connection is probed again only once its
    /// client acknowledges something (smoltcp's timer carries on meanwhile).
    probes_withheld: "probes due but not sent, unpaid for by acknowledgments",
    /// Probes the peer already had (counted in `spurious` too). Of a lone segment, each
    /// is one of its connection's ACK delay samples (at least the timeout it was sent at).
    probes_spurious: "probes the peer already had",
    /// Probes sent later than the floor and the round trip alone would have sent them,
    /// because their lone segment's client acknowledges later than that (its measured ACK
    /// delay set the timeout).
    probes_stretched: "probes sent later because of the peer's measured ACK delay",
    /// Probes that repaired a loss (counted in `recovered` too).
    probes_recovered: "probes that repaired a loss",
    /// The time from the original transmission to the probe, summed over
    /// `probes_recovered`, in µs: divided by it, how long a lost segment waited for its
    /// repair.
    probes_recovered_us: "from the original transmission to the probe, summed over probes that repaired a loss, us",
    /// Copies sent again because the peer sent again data they had acknowledged: the peer
    /// never got them (it retransmits because no acknowledgment came), and no ACK came
    /// within a round trip of their transmission. Of each retransmission, the first copy
    /// that acknowledged it.
    peer_retransmit_resends: "copies sent again because the peer retransmitted data they acknowledged",
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

/// The connections of one bucket as `view.rs` sees them while it frames their segments:
/// where each goes, a copy of each for loss recovery, and the send stamp of a connection
/// the table opened.
pub(super) struct BucketPeers<'a, S> {
    pub(super) slots: &'a mut [Slot<S>],
    pub(super) recovery: &'a Recovery,
    pub(super) stats: &'a mut RecoveryStats,
    pub(super) now: Instant,
}

impl<S> Peers for BucketPeers<'_, S> {
    fn peer(&self, addr: IpAddress, ports: u32) -> Option<PeerMac> {
        find_peer(self.slots, addr, ports)
    }

    fn sent(&mut self, slot: usize, frame: &[u8]) {
        let Ok(tcp) = TcpFrame::new_checked(frame) else {
            return;
        };
        if let Ok(seg) = SegmentRepr::parse(&tcp) {
            let slot = &mut self.slots[slot];
            let new = slot
                .flight
                .on_send(self.recovery, self.stats, frame, &seg, self.now);
            if new && slot.client && seg.payload_len > 0 {
                slot.stamps.sent = Some(self.now);
            }
        }
    }

    fn unresolved(&mut self, slot: usize) {
        let slot = &mut self.slots[slot];
        slot.waiting = slot.client && slot.phase == Phase::Connecting;
    }
}

impl<S: Default> ConnTable<S> {
    /// Shows a segment from a peer to its connection's loss recovery (its ACK and SACK
    /// blocks), before smoltcp processes it.
    pub(super) fn recovery_ingress(&mut self, bucket: usize, tcp: &TcpFrame<&[u8]>, now: Instant) {
        if !self.recovery.enabled() {
            return;
        }
        let slots = &mut self.buckets[bucket].slots;
        // Usually the first touch of this connection's state since its last segment, and at
        // many connections out of cache: ask for every line the lookup and the ACK read (and
        // the reply's copy will write) at once, rather than miss on one after the other.
        for slot in slots.iter() {
            prefetch_line((&raw const slot.peer).cast());
            slot.flight.prefetch();
        }
        let Some(peer) = find_peer(slots, tcp.src_addr(), tcp.ports()) else {
            return;
        };
        if let Ok(seg) = SegmentRepr::parse(tcp) {
            slots[peer.slot]
                .flight
                .on_ack(&mut self.recovery, &mut self.stats.recovery, &seg, now);
        }
    }

    /// Sends the copies loss recovery owes in `bucket` (lost ones, then probes);
    /// `Poll::Idle` if the device ran out of transmit tokens first.
    pub(super) fn resend<D: Device>(
        &mut self,
        bucket_index: usize,
        device: &mut D,
        now: Instant,
    ) -> Poll {
        let Self {
            buckets,
            recovery,
            stats,
            ..
        } = self;
        let Bucket { sockets, slots, .. } = &mut buckets[bucket_index];
        for slot in slots.iter_mut() {
            let Some(handle) = slot.handle else { continue };
            if slot.phase == Phase::Free || !slot.flight.due(now) {
                continue;
            }
            let state = sockets.get::<tcp::Socket>(handle).state();
            if !matches!(
                state,
                tcp::State::SynSent
                    | tcp::State::SynReceived
                    | tcp::State::Established
                    | tcp::State::FinWait1
                    | tcp::State::Closing
                    | tcp::State::CloseWait
                    | tcp::State::LastAck
            ) {
                // Nothing of ours can be waiting for an acknowledgment.
                slot.flight.reset();
                continue;
            }
            while let Some(resend) = slot.flight.next_resend(recovery, &mut stats.recovery, now) {
                let Some(tx) = device.transmit(now) else {
                    return Poll::Idle;
                };
                let flight = &slot.flight;
                tx.consume(flight.copy_len(resend), |frame| {
                    flight.write_copy(resend, frame)
                });
                slot.flight
                    .resent(recovery, &mut stats.recovery, resend, now);
                stats.frames_out += 1;
            }
        }
        Poll::Progress
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
mod tests;
