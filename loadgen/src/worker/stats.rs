//! What a thread measures: its counters and latency histograms for the whole window
//! ([`ThreadStats`]), the time series it hands on once an interval has passed ([`Tick`] of
//! [`IntervalStats`]), and [`record_reply`], which files one reply's latencies in both.

use hdrhistogram::Histogram;
use netstack::conn::RecoveryStats;

use crate::conn::{InFlight, RxTime};
use crate::histogram::{HIGHEST_NS, LatencySet, OpKind, new_histogram, new_interval_histogram};
use crate::verify::VerifyCounts;

/// Error counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ErrorCounts {
    /// Connection attempts that failed (refused, unreachable, timed out).
    pub refused: u64,
    /// Connections closed or reset by the server.
    pub reset: u64,
    /// Requests with no reply within the timeout (their connection is then reopened).
    pub timeout: u64,
    /// Replies that could not be decoded or answered another request (connection reopened).
    pub protocol: u64,
    /// Requests lost in flight when their connection failed (not retried).
    pub aborted: u64,
    /// Replies carrying an error status (SERVER_ERROR, CLIENT_ERROR, error statuses).
    pub server: u64,
}

impl ErrorCounts {
    /// Sum of all counters.
    pub fn total(&self) -> u64 {
        self.refused + self.reset + self.timeout + self.protocol + self.aborted + self.server
    }

    /// Adds `o`.
    pub fn merge(&mut self, o: &ErrorCounts) {
        self.refused += o.refused;
        self.reset += o.reset;
        self.timeout += o.timeout;
        self.protocol += o.protocol;
        self.aborted += o.aborted;
        self.server += o.server;
    }
}

/// Everything one thread measured.
#[derive(Debug, Clone)]
pub struct ThreadStats {
    /// Latency from the actual send (service time), per op.
    pub service: LatencySet,
    /// Latency from the intended send time (open loop only), per op.
    pub corrected: LatencySet,
    /// Open loop: actual minus intended send time.
    pub send_lag: Histogram<u64>,
    /// Open loop: send lag of requests sent in the loop iteration where they fell due (the
    /// generator's own delay, not waiting for a connection).
    pub generator_lag: Histogram<u64>,
    /// From a reply's kernel receive stamp to the generator handling it, ns.
    pub generator_delay: Histogram<u64>,
    /// Measured replies whose send time was a kernel transmit stamp.
    pub tx_kernel: u64,
    /// Measured replies whose reply time was a kernel receive stamp.
    pub rx_kernel: u64,
    /// Connections on which `SO_TIMESTAMPING` could not be set.
    pub stamp_failures: u64,
    /// Time in the window the thread was runnable but waited for its CPU, ns.
    pub cpu_wait_ns: u64,
    /// `--idle spin`: time in the window the thread slept instead of spinning, because its core
    /// was shared (see [`SpinGuard`]), ns.
    pub spin_paused_ns: u64,
    /// Replies per [`OpKind`] (index order of `OpKind::ALL`).
    pub counts: [u64; 6],
    /// Keys found by measured multi-gets.
    pub keys_hit: u64,
    /// Keys multi-gets found nothing for.
    pub keys_missed: u64,
    /// Errors.
    pub errors: ErrorCounts,
    /// Verification counters.
    pub verify: VerifyCounts,
    /// Open loop: arrivals due in the window.
    pub scheduled: u64,
    /// Requests sent in the window.
    pub sent: u64,
    /// Open loop: sent more than the late threshold after their intended time.
    pub late: u64,
    /// Open loop: due in the window but never sent.
    pub never_sent: u64,
    /// Open loop: sent in the window after waiting for a free connection slot.
    pub backpressured: u64,
    /// Open loop: arrivals due before the window and still waiting at its start.
    pub backlog_start: u64,
    /// Open loop: arrivals due before the window's end and never sent (`never_sent` of them
    /// due in the window).
    pub backlog_end: u64,
    /// Open loop: how long the oldest arrival of `backlog_end` had waited at the end, ns.
    pub backlog_end_wait_ns: u64,
    /// CPU time the thread used in the window, ns.
    pub cpu_ns: u64,
    /// Open loop: gaps between intended times (sample), ns.
    pub intended_gaps: Vec<f64>,
    /// Open loop: gaps between actual sends of consecutive arrivals (sample), ns.
    pub sent_gaps: Vec<f64>,
    /// This thread's arrival rate, per second.
    pub thread_rate: f64,
    /// Start of the measurement window, run-clock ns.
    pub window_start_ns: u64,
    /// End of the measurement window (earlier when stopped), run-clock ns.
    pub window_end_ns: u64,
    /// Prefill: keys written, and keys given up on before they were sent (each key once).
    pub prefill_keys: u64,
    /// Prefill: keys not confirmed stored (error replies, keys given up on).
    pub prefill_errors: u64,
    /// The core this thread was asked to run on and could not be pinned to.
    pub pin_failed: Option<usize>,
    /// Bypass client: its table's loss-recovery counters over the window and the drain.
    pub recovery: Option<RecoveryStats>,
}

impl ThreadStats {
    pub(crate) fn new() -> ThreadStats {
        ThreadStats {
            service: LatencySet::new(),
            corrected: LatencySet::new(),
            send_lag: new_histogram(),
            generator_lag: new_histogram(),
            generator_delay: new_histogram(),
            tx_kernel: 0,
            rx_kernel: 0,
            stamp_failures: 0,
            cpu_wait_ns: 0,
            spin_paused_ns: 0,
            counts: [0; 6],
            keys_hit: 0,
            keys_missed: 0,
            errors: ErrorCounts::default(),
            verify: VerifyCounts::default(),
            scheduled: 0,
            sent: 0,
            late: 0,
            never_sent: 0,
            backpressured: 0,
            backlog_start: 0,
            backlog_end: 0,
            backlog_end_wait_ns: 0,
            cpu_ns: 0,
            intended_gaps: Vec::new(),
            sent_gaps: Vec::new(),
            thread_rate: 0.0,
            window_start_ns: 0,
            window_end_ns: 0,
            prefill_keys: 0,
            prefill_errors: 0,
            pin_failed: None,
            recovery: None,
        }
    }
}

/// What one thread measured in one interval of the time series.
#[derive(Debug, Clone)]
pub struct IntervalStats {
    /// Service times of the replies recorded in it, ns.
    pub service: Histogram<u64>,
    /// Corrected latencies (open loop), ns.
    pub corrected: Histogram<u64>,
    /// Replies recorded.
    pub completed: u64,
    /// Errors: error replies, failed connections, requests lost.
    pub errors: u64,
}

impl IntervalStats {
    /// An empty interval.
    pub fn new() -> IntervalStats {
        IntervalStats {
            service: new_interval_histogram(),
            corrected: new_interval_histogram(),
            completed: 0,
            errors: 0,
        }
    }

    /// Adds `o` (another thread's same interval).
    pub fn merge(&mut self, o: &IntervalStats) {
        self.service
            .add(&o.service)
            .expect("auto-resizing histogram");
        self.corrected
            .add(&o.corrected)
            .expect("auto-resizing histogram");
        self.completed += o.completed;
        self.errors += o.errors;
    }
}

impl Default for IntervalStats {
    fn default() -> Self {
        IntervalStats::new()
    }
}

/// One interval of one thread: the interval `[t0 + index × I, t0 + (index + 1) × I)` of the
/// run clock, `t0` the start of the window (negative indices are the warm-up). In the window
/// it holds the measured replies the thread recorded while the interval was current; the last
/// one also those recorded while the thread drained its requests after the window.
#[derive(Debug)]
pub(crate) struct Tick {
    /// Interval number.
    pub index: i64,
    /// What the thread recorded in it.
    pub stats: IntervalStats,
}

/// Records one reply's latencies: the service time (a hardware pair on the NIC's clock;
/// otherwise the kernel's software stamps on the run clock, with the generator's own readings
/// where one is missing), the corrected latency (open loop), the generator delay and the stamp
/// counts for a measured reply; in the current interval a measured reply, or any reply during
/// the warm-up (`warmup`).
pub(crate) fn record_reply(
    stats: &mut ThreadStats,
    (interval, warmup): (&mut IntervalStats, bool),
    (open_loop, hardware): (bool, bool),
    kind: OpKind,
    req: &InFlight,
    rx: &RxTime,
) {
    // The reply's time on the run clock: its kernel arrival when stamped.
    let reply_ns = rx.kernel_ns.unwrap_or(rx.handled_ns);
    let service = match (rx.hw_ns, req.tx_hw_ns) {
        (Some(r), Some(t)) => r.saturating_sub(t),
        _ => reply_ns.saturating_sub(req.tx_kernel_ns.unwrap_or(req.sent_ns)),
    };
    let corrected = reply_ns.saturating_sub(req.intended_ns);
    if req.measured {
        if hardware {
            stats.tx_kernel += u64::from(req.tx_hw_ns.is_some());
            stats.rx_kernel += u64::from(rx.hw_ns.is_some());
        } else {
            stats.tx_kernel += u64::from(req.tx_kernel_ns.is_some());
            stats.rx_kernel += u64::from(rx.kernel_ns.is_some());
        }
        if let Some(k) = rx.kernel_ns {
            stats
                .generator_delay
                .saturating_record(rx.handled_ns.saturating_sub(k).max(1));
        }
        stats.service.record(kind, service);
        if open_loop {
            stats.corrected.record(kind, corrected);
        }
    }
    if req.measured || warmup {
        interval.completed += 1;
        record_growing(&mut interval.service, service);
        if open_loop {
            record_growing(&mut interval.corrected, corrected);
        }
    }
}

/// Records `ns` (clamped to the crate's bounds) in an auto-resizing histogram, which grows to
/// hold it (`saturating_record` would clamp it to the histogram's current top instead).
pub(super) fn record_growing(h: &mut Histogram<u64>, ns: u64) {
    let ns = ns.clamp(1, HIGHEST_NS);
    if h.record(ns).is_err() {
        h.saturating_record(ns);
    }
}
