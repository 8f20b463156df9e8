//! One connection's loss recovery: the copies it keeps ([`Flight::on_send`]), what each
//! acknowledgment tells of them ([`Flight::on_ack`]), and which copy goes out again when
//! ([`Flight::next_resend`], [`Flight::resent`]). The module docs of `recovery` describe
//! the mechanisms; the table calls these from its ingress hook and resend loop.

use smoltcp::time::{Duration, Instant};

use super::copies::{Copies, Sent};
use super::rtt::{AckDelays, MinRtt, after, before, earliest};
use super::{
    MAX_ACK_DELAY, MAX_HANDSHAKE_PROBES, MAX_PROBES, PROBE_CREDIT, Recovery, RecoveryStats,
    refresh_ack,
};
use crate::demux::{SegmentRepr, flags};

/// Re-sent copies acknowledged and waiting one more ACK for a D-SACK.
const PENDING: usize = 8;

/// What `next_resend` wants sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resend {
    pub(super) index: usize,
    pub(super) kind: ResendKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ResendKind {
    /// SACK showed a later segment arrived.
    Lost,
    /// The peer sent again data this copy acknowledged.
    PeerRetransmit,
    /// The probe timer ran out.
    Probe,
}

/// A copy sent again and acknowledged whose outcome is not yet known.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Pending {
    pub(super) seq: u32,
    pub(super) end: u32,
    /// SND.MAX when it was sent again (see [`Sent::settle`]).
    pub(super) settle: u32,
    /// Sent again by a probe.
    pub(super) probe: bool,
    /// From the original transmission to the probe, µs.
    pub(super) wait_us: u32,
    /// A probe of a lone segment: from the original transmission to its ACK, µs (an ACK
    /// delay sample if the probe proves spurious); 0 otherwise.
    pub(super) delay_us: u32,
}

/// The newest-sent segment known to have arrived (RACK.xmit_ts, RACK.end_seq, RACK.rtt).
#[derive(Debug, Clone, Copy)]
pub(super) struct Delivered {
    pub(super) sent_at: Instant,
    pub(super) end: u32,
    pub(super) rtt: Duration,
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
    /// A SYN or SYN-ACK was seen: the fields below follow the connection.
    pub(super) synced: bool,
    /// The peer SACKs: SACK-permitted on our SYN-ACK, which smoltcp echoes from the SYN;
    /// on a connection we opened, on the peer's SYN-ACK ([`Flight::on_syn_ack`]).
    pub(super) sack_ok: bool,
    /// This end opened the connection (its first copy was a SYN): its peer is a server,
    /// which acknowledges a request at once.
    pub(super) active: bool,
    /// Probes sent since the peer last acknowledged new data.
    pub(super) backoff: u8,
    /// Oldest unacknowledged sequence number (SND.UNA).
    pub(super) snd_una: u32,
    /// Next sequence number after the highest sent (SND.MAX).
    pub(super) snd_max: u32,
    /// The smallest RTT sample of the connection's life, its SYN-ACK's included, µs; 0:
    /// none. A lower bound of its round trip even when its client has acknowledged every
    /// reply late for a while (and `min_rtt` rose): what tells a probe's own ACK from one
    /// that crossed it.
    pub(super) least_rtt_us: u32,
    /// Acknowledgment number and window field of the newest segment sent after the SYN.
    pub(super) ack: Option<(u32, u16)>,
    /// SND.MAX when a copy last went out on the peer's retransmission, until the peer
    /// acknowledges up to it: meanwhile a retransmission of the peer's may answer that
    /// copy, and shows nothing lost.
    pub(super) recover: Option<u32>,
    pub(super) probe_at: Option<Instant>,
    pub(super) lost_at: Option<Instant>,
    /// The smallest RTT sample of the last second or so (see [`MinRtt`]).
    pub(super) min_rtt: MinRtt,
    pub(super) delivered: Option<Delivered>,
    /// How long the peer took to acknowledge this connection's latest lone segments.
    pub(super) ack_delays: AckDelays,
    /// Copies sent again and acknowledged, outcome not yet known (below).
    pub(super) pending_len: usize,
    pub(super) copies: Copies,
    /// Copies sent again and acknowledged, outcome not yet known. Spurious if a D-SACK
    /// reports them, recovered once an ACK beyond `settle` comes without one (the peer had
    /// the copy and said nothing of a duplicate).
    pub(super) pending: [Pending; PENDING],
}

impl Default for Flight {
    fn default() -> Self {
        Flight {
            synced: false,
            sack_ok: false,
            active: false,
            backoff: 0,
            snd_una: 0,
            snd_max: 0,
            least_rtt_us: 0,
            ack: None,
            recover: None,
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

/// Bytes at the start of a [`Flight`] that an ACK of a lone small copy reads and its
/// successor's copy writes (the fields before `copies`, the inline copy and its frame).
const HOT_BYTES: usize = 384;

impl Flight {
    /// Prefetches the cache lines an ACK and the next copy touch (see [`HOT_BYTES`]).
    #[inline]
    pub(crate) fn prefetch(&self) {
        let start: *const u8 = (self as *const Flight).cast();
        for offset in (0..HOT_BYTES.min(size_of::<Flight>())).step_by(64) {
            crate::conn::ingress::prefetch_line(start.wrapping_add(offset));
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

    /// A frame of this connection went out at `now` (its Ethernet header written). Returns
    /// whether it carried sequence space never sent before (not smoltcp's retransmission).
    pub(crate) fn on_send(
        &mut self,
        recovery: &Recovery,
        stats: &mut RecoveryStats,
        frame: &[u8],
        seg: &SegmentRepr,
        now: Instant,
    ) -> bool {
        if seg.flags & flags::RST != 0 {
            return false;
        }
        // With recovery off only smoltcp's retransmissions are counted.
        let keep = recovery.enabled();
        let syn = seg.flags & flags::SYN != 0;
        if !syn && let Some(ack) = seg.ack_number {
            self.ack = Some((ack, seg.window_len));
        }
        let len = seg.segment_len();
        if len == 0 {
            return false;
        }
        let (seq, end) = (seg.seq_number, seg.seq_number.wrapping_add(len));
        if !self.synced || (syn && seq != self.snd_una) {
            // The SYN-ACK of a new connection (or anything first seen).
            self.reset();
            self.synced = true;
            // A SYN without ACK: this end opened the connection.
            self.active = syn && seg.ack_number.is_none();
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
            return false;
        }
        let overlaps = before(seq, self.snd_max);
        if !keep {
            stats.smoltcp_retransmits += u64::from(overlaps);
            self.snd_max = end;
            return true;
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
        true
    }

    /// The peer's SYN-ACK to a connection we opened: it SACKs only if it says so (our SYN
    /// always offers it).
    pub(crate) fn on_syn_ack(&mut self, sack_permitted: bool) {
        if self.active {
            self.sack_ok = sack_permitted;
        }
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
            if self.recover.is_some_and(|recover| !before(ack, recover)) {
                self.recover = None;
            }
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
        // had reached it when it did, so the first copy that carried one was lost, or is
        // very late, or still in flight (`lost_time` waits a round trip for its ACK). This
        // is how a lost reply of a peer that acknowledges late is found before its probe:
        // the peer's own timer (a Linux client's probe or RTO, at least its route's
        // `rto_min`) resends its request. Only that copy: the peer's ACK of it shows
        // whether later ones are missing too (RACK, below), and each copy sent again on a
        // guess draws an ACK at once from the peer, three of which are smoltcp's signal
        // for a fast retransmit, that is, more evidence of this kind for us. And once per
        // round trip (`recover`): until the peer acknowledges all we had sent when that
        // copy went out, its retransmission may be its table's answer to our copy (the
        // peer runs this code too), not a sign that anything is missing.
        let len = seg.segment_len();
        if len > 0
            && seg.flags & flags::SYN == 0
            && !before(ack, self.snd_una)
            && self.recover.is_none()
            && let Some((our_ack, _)) = self.ack
        {
            let end = seg.seq_number.wrapping_add(len);
            if !after(end, our_ack)
                && let Some(copy) = self
                    .copies
                    .iter_mut()
                    .find(|copy| !copy.sacked && !copy.syn && !before(copy.peer_ack, end))
            {
                copy.lost = true;
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
            ResendKind::PeerRetransmit => {
                stats.peer_retransmit_resends += 1;
                self.recover = Some(self.snd_max);
            }
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
                // Nothing known of how soon peers acknowledge data (a table that just
                // started). A server acknowledges a request at once, so a connection this
                // end opened waits for the handshake's round trip; a client may delay its
                // ACK for its think time, so a reply is left to smoltcp's timer.
                0 if recovery.data_delay.is_empty() => {
                    if !self.active || recovery.handshake_rtt.is_empty() {
                        return None;
                    }
                    recovery.handshake_rtt.timeout_us()
                }
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
    pub(super) fn sample_rtt(
        &mut self,
        recovery: &mut Recovery,
        rtt: Duration,
        syn: bool,
        now: Instant,
    ) {
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

    /// When copy `index` counts as lost: if the peer's retransmission showed it missing,
    /// once a round trip (the newest delivered segment's RTT, at least the minimum) and the
    /// reordering window have passed since it went out; if it was sent before the newest
    /// delivered segment, once that segment's RTT and the reordering window have passed.
    ///
    /// A peer's retransmission shows only that none of our acknowledgments had reached the
    /// peer when it left. A copy sent less than a round trip ago cannot have reached it by
    /// then: it is in flight, and its ACK usually comes before this time and drops it. The
    /// peer's retransmission may itself be a copy its table sent because of one of ours
    /// (both ends run this code): sending in-flight copies again at once would make each
    /// end's duplicates the other's evidence, a loop that outlives the loss that began it.
    /// `tests::a_peers_retransmission_crossing_our_reply_sends_nothing_again` shows it.
    fn lost_time(&self, index: usize) -> Option<Instant> {
        let copy = &self.copies[index];
        let min_rtt = Duration::from_micros(u64::from(self.min_rtt.micros()));
        let reordering = min_rtt / 4;
        if copy.lost {
            let rtt = self.delivered.map_or(min_rtt, |d| d.rtt.max(min_rtt));
            return Some(copy.sent_at + rtt + reordering);
        }
        let delivered = self.delivered?;
        let sent_before = copy.sent_at < delivered.sent_at
            || (copy.sent_at == delivered.sent_at && before(copy.end, delivered.end));
        if copy.sacked || !sent_before {
            return None;
        }
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
