//! How long a connection may live without progress: the table's own clocks, one set per
//! slot, because smoltcp's only clock (`timeout`) counts from the last segment heard, and
//! a peer that keeps sending (duplicate ACKs, window probes, keep-alives) while it never
//! acknowledges our data would keep the connection forever.
//!
//! | phase | ends when | then |
//! |---|---|---|
//! | handshake | [`HANDSHAKE_TIMEOUT`] after the SYN | dropped (handshake failed) |
//! | connecting (`client.rs`) | [`HANDSHAKE_TIMEOUT`] after `connect` | reset (`ConnEvent::TimedOut`) |
//! | open | data waited [`GIVE_UP_TIMEOUT`] for an acknowledgement that never came | reset |
//! | open | `idle_timeout` (if set) with no data either way | closed (FIN) |
//! | closing | data waited [`GIVE_UP_TIMEOUT`] as above, or [`CLOSE_TIMEOUT`] after the close | reset |
//!
//! **Give-up.** "Data waited" means the send queue (unsent plus unacknowledged bytes) was
//! not empty and did not shrink: only an acknowledgement of new data dequeues from it,
//! the application only adds (the table counts what it adds, so an ACK is never hidden by
//! a write in the same round). The clock restarts at every such acknowledgement, as the
//! kernel's retransmission count restarts at every ACK; it gives up after the same time
//! with or without retransmissions in between, so a peer that keeps its receive window at
//! zero (reads nothing) is given up too. Where a kernel gives up after 15 retransmissions
//! (`tcp_retries2`, about 15 minutes), memspin gives up after 30 s, four retransmissions at
//! smoltcp's 1 s minimum timeout: a cache client that has acknowledged nothing for 30 s
//! is gone, and each one holds a slot and its buffers.
//!
//! **Idle.** memcached's `idle_timeout`: no data received, nothing waiting to be sent and
//! nothing unread for that long. Acknowledgements and keep-alives do not count.
//!
//! The table reads each open slot's queues whenever its bucket is refreshed (after ingress
//! and after egress), and folds the earliest of these deadlines into the bucket's timer
//! (`timer.rs`), so an expiry is handled when due without scanning connections.

use smoltcp::time::{Duration, Instant};

/// A handshake not completed this long after its SYN is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Data the peer has not acknowledged for this long (no ACK of new data) aborts the
/// connection: the retransmission give-up.
pub const GIVE_UP_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection the server closed is reset if it has not finished closing this long
/// after the close (bounds FIN-WAIT-2 and LAST-ACK, as `tcp_fin_timeout` does).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(60);

/// The connection's phase, as far as its clocks are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Handshake,
    Open,
    Closing,
}

/// Why a connection's time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// The handshake did not complete in [`HANDSHAKE_TIMEOUT`].
    Handshake,
    /// Data went unacknowledged for [`GIVE_UP_TIMEOUT`].
    GiveUp,
    /// No data either way for the idle timeout.
    Idle,
    /// Not closed [`CLOSE_TIMEOUT`] after the close.
    Closing,
}

/// One connection's clocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lifetime {
    /// When the current stage began.
    since: Instant,
    /// The send queue as last seen, plus what the application added since.
    send_mark: usize,
    /// Since when the send queue has been non-empty without shrinking.
    waiting_since: Option<Instant>,
    /// The last time data arrived or was queued either way.
    active_at: Instant,
    /// Unread received data at the last look.
    input_pending: bool,
}

impl Lifetime {
    /// Clocks for a stage starting at `now`.
    pub(crate) fn start(now: Instant) -> Lifetime {
        Lifetime {
            since: now,
            send_mark: 0,
            waiting_since: None,
            active_at: now,
            input_pending: false,
        }
    }

    /// The stage changes (handshake → open → closing) at `now`; the data clocks go on.
    pub(crate) fn next_stage(&mut self, now: Instant) {
        self.since = now;
    }

    /// The application queued `bytes` more to send.
    pub(crate) fn wrote(&mut self, bytes: usize) {
        self.send_mark += bytes;
    }

    /// A look at the socket at `now`: its send and receive queues, and whether data
    /// arrived since the last look.
    pub(crate) fn observe(
        &mut self,
        now: Instant,
        send_queue: usize,
        recv_queue: usize,
        arrived: bool,
    ) {
        let acked = send_queue < self.send_mark;
        self.send_mark = send_queue;
        if send_queue == 0 {
            self.waiting_since = None;
        } else if acked || self.waiting_since.is_none() {
            self.waiting_since = Some(now);
        }
        self.input_pending = recv_queue > 0;
        if arrived || acked || send_queue > 0 || recv_queue > 0 {
            self.active_at = now;
        }
    }

    /// The earliest moment one of this connection's clocks runs out, and which.
    pub(crate) fn deadline(
        &self,
        stage: Stage,
        idle_timeout: Option<Duration>,
    ) -> Option<(Instant, Expiry)> {
        let give_up = self
            .waiting_since
            .map(|since| (since + GIVE_UP_TIMEOUT, Expiry::GiveUp));
        let other = match stage {
            Stage::Handshake => return Some((self.since + HANDSHAKE_TIMEOUT, Expiry::Handshake)),
            Stage::Open => idle_timeout
                .filter(|_| self.waiting_since.is_none() && !self.input_pending)
                .map(|idle| (self.active_at + idle, Expiry::Idle)),
            Stage::Closing => Some((self.since + CLOSE_TIMEOUT, Expiry::Closing)),
        };
        match (give_up, other) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// Which clock has run out at `now`, if any.
    pub(crate) fn expired(
        &self,
        now: Instant,
        stage: Stage,
        idle_timeout: Option<Duration>,
    ) -> Option<Expiry> {
        self.deadline(stage, idle_timeout)
            .filter(|&(when, _)| when <= now)
            .map(|(_, why)| why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Instant {
        Instant::from_secs(100) + Duration::from_secs(secs)
    }

    #[test]
    fn unacknowledged_data_gives_up_after_the_documented_time() {
        let mut life = Lifetime::start(at(0));
        life.next_stage(at(0));
        life.wrote(100);
        life.observe(at(1), 100, 0, false);
        assert_eq!(
            life.deadline(Stage::Open, None),
            Some((at(1) + GIVE_UP_TIMEOUT, Expiry::GiveUp))
        );
        // Retransmissions and segments that acknowledge nothing new change nothing.
        for second in 2..31 {
            life.observe(at(second), 100, 0, false);
            assert_eq!(life.expired(at(second), Stage::Open, None), None);
        }
        assert_eq!(
            life.expired(at(31), Stage::Open, None),
            Some(Expiry::GiveUp)
        );
    }

    #[test]
    fn every_acknowledgement_restarts_the_clock_even_behind_a_write() {
        let mut life = Lifetime::start(at(0));
        life.wrote(100);
        life.observe(at(0), 100, 0, false);
        // 20 s later the peer acknowledges 50 bytes and the application writes 50 more in
        // the same round: the queue is back at 100, but the ACK is seen.
        life.wrote(50);
        life.observe(at(20), 100, 0, false);
        assert_eq!(life.expired(at(49), Stage::Open, None), None);
        assert_eq!(
            life.expired(at(50), Stage::Open, None),
            Some(Expiry::GiveUp)
        );
        // Everything acknowledged: no clock at all (no idle timeout configured).
        life.observe(at(21), 0, 0, false);
        assert_eq!(life.deadline(Stage::Open, None), None);
    }

    #[test]
    fn idle_counts_data_only_and_not_while_anything_is_pending() {
        let idle = Some(Duration::from_secs(5));
        let mut life = Lifetime::start(at(0));
        assert_eq!(
            life.deadline(Stage::Open, idle),
            Some((at(5), Expiry::Idle))
        );
        life.observe(at(3), 0, 0, true);
        assert_eq!(
            life.expired(at(7), Stage::Open, idle),
            None,
            "data arrived at 3"
        );
        assert_eq!(life.expired(at(8), Stage::Open, idle), Some(Expiry::Idle));
        // Unread input: not idle, however old.
        life.observe(at(4), 0, 10, false);
        life.observe(at(5), 0, 10, false);
        assert_eq!(life.deadline(Stage::Open, idle), None);
        // A reply waiting for its ACK: the give-up clock, not idle.
        life.observe(at(6), 0, 0, false);
        life.wrote(10);
        life.observe(at(6), 10, 0, false);
        assert_eq!(life.expired(at(20), Stage::Open, idle), None);
        life.observe(at(7), 0, 0, false);
        assert_eq!(
            life.deadline(Stage::Open, idle),
            Some((at(12), Expiry::Idle))
        );
        // Without an idle timeout an idle connection lives forever.
        assert_eq!(life.deadline(Stage::Open, None), None);
    }

    #[test]
    fn handshakes_and_closes_are_bounded() {
        let mut life = Lifetime::start(at(0));
        assert_eq!(
            life.expired(at(10), Stage::Handshake, None),
            Some(Expiry::Handshake)
        );
        assert_eq!(life.expired(at(9), Stage::Handshake, None), None);
        life.next_stage(at(1));
        life.next_stage(at(2));
        assert_eq!(life.expired(at(61), Stage::Closing, None), None);
        assert_eq!(
            life.expired(at(62), Stage::Closing, Some(Duration::from_secs(1))),
            Some(Expiry::Closing),
            "idle does not apply while closing"
        );
        life.wrote(1);
        life.observe(at(3), 1, 0, false);
        assert_eq!(
            life.expired(at(33), Stage::Closing, None),
            Some(Expiry::GiveUp)
        );
    }
}
