//! One worker thread: its connections, its arrival schedule, its histograms, and the epoll loop
//! that drives them. Nothing is shared with other workers during the run but the stop flag and
//! the once-a-second progress channel.
//!
//! ```text
//! Pacer (schedule) ─due, a free slot─▶ Conn.out ─write─▶ server
//!                                  error queue ─TX stamp─▶ Conn.inflight (send time)
//! server ─recvmsg (RX stamp)─▶ Conn.inb ─decode─▶ reply ─▶ LatencySet (service, corrected),
//!   generator delay (handled − RX stamp), verify, counters
//! ```
//!
//! **Transport.** Over kernel sockets the loop is epoll's; with the bypass client
//! ([`crate::bypass`], `--net tap`) each round polls the thread's own stack instead (ingress,
//! connection events, replies copied into `Conn.inb`, output, egress, send stamps), and the
//! same `issue`, `decode_replies`, `refill` and `fail` serve both.
//!
//! **Open loop.** The thread's [`Pacer`] hands out due arrivals, oldest first, one per free
//! slot: on the connection whose reply freed it, as soon as the reply is decoded (as closed
//! loop refills), and round robin in the loop for arrivals that find slots free. With every slot
//! busy the thread waits for replies only, so its cost per request does not grow with the
//! backlog (see [`crate::pacing`]).
//!
//! **Waiting.** A thread that sleeps in `epoll_wait` while a reply is on its way adds its own
//! wake-up (25–30 µs on a virtual machine) to the time it takes to notice the reply. Under
//! `--idle spin` (the default) a thread with any request in flight polls without sleeping; with
//! nothing in flight it sleeps until `--spin-us` before its next arrival, then polls up to it.
//! `--idle sleep` sleeps whenever it waits (except that window). With kernel timestamps the
//! service time excludes the wake-up either way; the generator delay shows it.
//!
//! Spinning only pays on a core of one's own. A thread whose core is shared (another busy
//! thread, or the server under test itself, which then waits for the generator's time slice to
//! end before it can answer) spends much of its time runnable but waiting for the CPU;
//! [`SpinGuard`] notices that from the thread's run delay (`/proc/thread-self/schedstat`) and
//! has it sleep whenever it waits, up to each arrival too, for a while.
//!
//! The loop's cost grows with the requests sent, not with the connections held: sockets are
//! watched edge-triggered (the kernel reports a socket again only when something new arrives),
//! timeouts come from a [`TimeoutQueue`] of deadlines in send order, and only connections that
//! are down or connecting are visited by the periodic housekeeping.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use netstack::conn::RecoveryStats;
use netstack::{ConnEvent, ConnId};

use crate::arrival::Schedule;
use crate::bypass::Bypass;
use crate::client::{Codec, DecodeError, Expect, MultiHit, MultiKeys, Reply, Request};
use crate::config::{Config, Idle};
use crate::conn::{Answered, Conn, ConnState, FlushOutcome, InFlight, ReadOutcome, RxTime};
use crate::histogram::{HIGHEST_NS, LatencySet, OpKind, new_histogram, new_interval_histogram};
use crate::pacing::{Arrival, MAX_GAP_SAMPLES, Pacer};
use crate::placement::Placement;
use crate::sys::{self, EDGE, ERROR, ERRQUEUE_BATCH, Epoll, ErrQueue, HANGUP, READABLE, WRITABLE};
use crate::timeouts::TimeoutQueue;
use crate::tstamp::{self, StampClock, Timestamps};
use crate::verify::{self, VerifyCounts};
use crate::workload::{Command, Keyspace, Picker, derive_seed};

/// What every socket is watched for: replies, and the peer's hang-up (`EPOLLRDHUP`, so that
/// bytes and a FIN that arrive together are read up to the end), edge-triggered.
const WATCH: u32 = READABLE | HANGUP | EDGE;
/// How often timeouts and reconnects are looked at.
const HOUSEKEEPING_NS: u64 = 2_000_000;
/// Requests in flight per connection during prefill (at least the pipeline depth).
const PREFILL_DEPTH: usize = 32;
/// First reconnect delay; it doubles per failure up to [`MAX_BACKOFF_NS`].
const BACKOFF_NS: u64 = 10_000_000;
const MAX_BACKOFF_NS: u64 = 1_000_000_000;
/// Transmit stamps are read from a connection's error queue once this many replies await them
/// or this many notifications came (each read takes up to `ERRQUEUE_BATCH`).
const SETTLE_BATCH: usize = 8;
/// ... or once the oldest reply has waited this long (housekeeping); a reply whose stamp has not
/// come by then is recorded with the generator's own send time.
const STAMP_WAIT_NS: u64 = 5_000_000;
/// Spinning pauses when the thread waited this long for its CPU ...
const SHARED_WAIT_NS: u64 = 2_000_000;
/// ... within this window (a tenth of it) ...
const SHARED_WINDOW_NS: u64 = 20_000_000;
/// ... for this long; then it spins again (and pauses again if its core is still shared).
const SPIN_PAUSE_NS: u64 = 100_000_000;
/// How long start-up waits for every connection.
const CONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// Seed streams.
const SEED_PICKER: u64 = 1;
const SEED_SCHEDULE: u64 = 2;

/// Monotonic run clock in nanoseconds since an epoch shared by all threads.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Clock {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since the epoch.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// The wall clock (`CLOCK_REALTIME`, which software timestamps read), ns since the Unix epoch.
fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Decides whether a `--idle spin` thread may spin, from how long it waits for its CPU: a
/// thread that waited [`SHARED_WAIT_NS`] within [`SHARED_WINDOW_NS`] shares its core, and sleeps
/// whenever it waits for [`SPIN_PAUSE_NS`]. Time and the run delay are passed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinGuard {
    window_start_ns: u64,
    window_start_delay_ns: u64,
    paused_until_ns: u64,
}

impl SpinGuard {
    /// A guard that allows spinning, counting from `now_ns` and the run delay `delay_ns`.
    pub fn new(now_ns: u64, delay_ns: u64) -> SpinGuard {
        SpinGuard {
            window_start_ns: now_ns,
            window_start_delay_ns: delay_ns,
            paused_until_ns: 0,
        }
    }

    /// Takes a reading of the thread's run delay (`delay_ns`, a running total) at `now_ns`.
    pub fn observe(&mut self, now_ns: u64, delay_ns: u64) {
        let waited = delay_ns.saturating_sub(self.window_start_delay_ns);
        let shared = waited >= SHARED_WAIT_NS;
        if shared {
            self.paused_until_ns = now_ns + SPIN_PAUSE_NS;
        }
        if shared || now_ns.saturating_sub(self.window_start_ns) >= SHARED_WINDOW_NS {
            self.window_start_ns = now_ns;
            self.window_start_delay_ns = delay_ns;
        }
    }

    /// Whether the thread may spin at `now_ns`.
    pub fn may_spin(&self, now_ns: u64) -> bool {
        now_ns >= self.paused_until_ns
    }
}

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
    /// Prefill: keys written.
    pub prefill_keys: u64,
    /// Prefill: keys not confirmed stored.
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

/// State shared by the workers and the thread that started them.
pub(crate) struct Shared {
    pub config: Config,
    pub keyspace: Keyspace,
    /// Which keys each connection picks and owns.
    pub placement: Placement,
    pub codec: Codec,
    pub pattern: Vec<u8>,
    pub clock: Clock,
    /// The kernel timestamps sockets are set up for.
    pub stamps: Timestamps,
    pub stop: Arc<AtomicBool>,
    pub barrier: Barrier,
    pub abort: AtomicBool,
    pub start_ns: AtomicU64,
    pub connect_error: Mutex<Option<(SocketAddr, std::io::ErrorKind)>>,
    /// Why a thread's bypass stack could not be set up.
    pub net_error: Mutex<Option<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connect,
    Prefill,
    Run,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Reset,
    Protocol,
    Timeout,
    Refused,
}

/// A worker thread's state.
struct Worker {
    shared: Arc<Shared>,
    conns: Vec<Conn>,
    epoll: Epoll,
    stats: ThreadStats,
    phase: Phase,
    open_loop: bool,
    pipeline: usize,
    /// Free request slots on Ready connections.
    ready_free: usize,
    /// Requests in flight on all connections.
    in_flight: usize,
    /// Connections with encoded requests to write (each once: `Conn::dirty`).
    dirty: Vec<usize>,
    /// Deadlines of the requests in flight.
    timeouts: TimeoutQueue,
    /// Connections that failed and are connecting or down, each once (`Conn::unready_listed`);
    /// some may have become ready since, housekeeping drops those.
    unready: Vec<usize>,
    /// Connections with replies awaiting their transmit stamps, each once (`Conn::unsettled`).
    unsettled: Vec<usize>,
    scratch: Vec<u8>,
    // Run window, run-clock ns.
    t0: u64,
    t_end: u64,
    ended: bool,
    drain_deadline: u64,
    // Open loop.
    pacer: Option<Pacer>,
    rr: usize,
    last_sent_ns: Option<u64>,
    /// The thread's CPU time when the window opened, ns.
    cpu_start_ns: Option<u64>,
    // Progress.
    ticks: Sender<Tick>,
    next_tick_ns: u64,
    tick_index: i64,
    interval_ns: u64,
    interval: IntervalStats,
    /// A multi-get's values as decoded (reused).
    multi_hits: Vec<MultiHit>,
    next_housekeeping_ns: u64,
    ready_events: Vec<(u64, u32)>,
    // Waiting.
    idle: Idle,
    spin_guard: SpinGuard,
    /// This thread's scheduler statistics, where the kernel keeps them.
    sched: Option<sys::SchedStat>,
    /// Run delay and time at the last housekeeping pass.
    last_delay_ns: u64,
    last_housekeeping_ns: u64,
    // Kernel timestamps.
    stamp_clock: StampClock,
    errqueue: ErrQueue,
    control: Vec<u8>,
    // Bypass client (`--net tap`).
    bypass: Option<Box<Bypass>>,
    /// Connection events taken from the table (reused).
    net_events: Vec<(ConnId, ConnEvent)>,
    /// Connections the table had data or news for in this round: index, stamps, whether
    /// the peer closed or reset (reused).
    arrived: Vec<(usize, netstack::Stamps, bool)>,
    /// Connections with requests written since their last send stamp (`Conn::tx_pending`).
    to_stamp: Vec<usize>,
    /// Connections with output the send buffer did not take yet (reused).
    blocked: Vec<usize>,
    /// Start-up: the first connection that failed to open.
    connect_failure: Option<(SocketAddr, std::io::ErrorKind)>,
    /// The table's loss-recovery counters when the window opened.
    recovery_start: Option<RecoveryStats>,
}

/// Runs worker `id` to completion: connect, (prefill), run, and return what it measured.
pub(crate) fn worker_main(
    id: usize,
    core: Option<core_affinity::CoreId>,
    shared: Arc<Shared>,
    ticks: Sender<Tick>,
) -> ThreadStats {
    let pin_failed = core
        .filter(|&c| !core_affinity::set_for_current(c))
        .map(|c| c.id);
    sys::tighten_timer_slack();
    let mut w = match Worker::new(id, shared.clone(), ticks) {
        Ok(w) => Some(w),
        Err(kind) => {
            record_connect_error(&shared, shared.config.servers[0], kind);
            None
        }
    };
    if let Some((path, link)) = shared.config.net.bypass()
        && let Some(worker) = w.as_mut()
    {
        let (threads, conns) = (shared.config.threads, worker.conns.len());
        let servers = &shared.config.servers;
        match Bypass::open(
            path,
            link,
            servers,
            (id, threads),
            conns,
            shared.clock.now_ns(),
        ) {
            Ok(b) => {
                // Waited on (level-triggered) when a thread sleeps.
                if let Err(e) = worker.epoll.add(b.fd(), READABLE, u64::MAX) {
                    let mut slot = shared
                        .net_error
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    slot.get_or_insert(format!("epoll: {e}"));
                }
                worker.bypass = Some(Box::new(b));
            }
            Err(e) => {
                let mut slot = shared
                    .net_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                slot.get_or_insert(e);
                w = None;
            }
        }
    }
    if let Some(w) = w.as_mut()
        && let Err((addr, kind)) = w.connect_all()
    {
        record_connect_error(&shared, addr, kind);
    }
    shared.barrier.wait(); // 1: connected (or failed)
    shared.barrier.wait(); // 2: the starter decided whether to go on
    if shared.abort.load(Ordering::SeqCst)
        && let Some(w) = w.as_mut()
    {
        w.reset_bypass();
    }
    let Some(mut w) = w.filter(|_| !shared.abort.load(Ordering::SeqCst)) else {
        return ThreadStats::new();
    };
    w.stats.pin_failed = pin_failed;
    w.read_stamp_clock();
    if shared.config.prefill {
        w.prefill();
    }
    shared.barrier.wait(); // 3: prefilled
    shared.barrier.wait(); // 4: start time published
    let start_ns = shared.start_ns.load(Ordering::SeqCst);
    w.run(start_ns);
    w.reset_bypass();
    w.stats
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
fn record_growing(h: &mut Histogram<u64>, ns: u64) {
    let ns = ns.clamp(1, HIGHEST_NS);
    if h.record(ns).is_err() {
        h.saturating_record(ns);
    }
}

fn record_connect_error(shared: &Shared, addr: SocketAddr, kind: std::io::ErrorKind) {
    let mut slot = shared
        .connect_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    slot.get_or_insert((addr, kind));
}

impl Worker {
    fn new(
        id: usize,
        shared: Arc<Shared>,
        ticks: Sender<Tick>,
    ) -> Result<Worker, std::io::ErrorKind> {
        let cfg = &shared.config;
        let mut conns = Vec::new();
        for index in (id..cfg.connections).step_by(cfg.threads) {
            let server = cfg.servers[index % cfg.servers.len()];
            let picker = Picker::new(
                cfg.mix(),
                shared.placement.pick[index].clone(),
                derive_seed(cfg.seed, SEED_PICKER, index as u64),
            );
            let own = shared.placement.own[index].clone();
            conns.push(Conn::new(index, server, picker, own, cfg.verify));
        }
        let epoll = Epoll::new(conns.len().max(16)).map_err(|e| e.kind())?;
        let mut stats = ThreadStats::new();
        if let Some(rate) = cfg.rate {
            stats.thread_rate = rate / cfg.threads as f64;
        }
        Ok(Worker {
            open_loop: cfg.rate.is_some(),
            pipeline: cfg.pipeline,
            scratch: Vec::new(),
            conns,
            epoll,
            stats,
            phase: Phase::Connect,
            ready_free: 0,
            in_flight: 0,
            dirty: Vec::new(),
            timeouts: TimeoutQueue::new(),
            unready: Vec::new(),
            unsettled: Vec::new(),
            t0: 0,
            t_end: u64::MAX,
            ended: false,
            drain_deadline: u64::MAX,
            pacer: None,
            rr: 0,
            last_sent_ns: None,
            cpu_start_ns: None,
            ticks,
            next_tick_ns: u64::MAX,
            tick_index: 0,
            interval_ns: cfg.interval.as_nanos() as u64,
            interval: IntervalStats::new(),
            multi_hits: Vec::new(),
            next_housekeeping_ns: 0,
            ready_events: Vec::new(),
            idle: cfg.idle,
            spin_guard: SpinGuard::new(0, 0),
            sched: None,
            last_delay_ns: 0,
            last_housekeeping_ns: 0,
            stamp_clock: StampClock::new(),
            errqueue: ErrQueue::new(),
            control: vec![0; tstamp::CONTROL_LEN],
            bypass: None,
            net_events: Vec::new(),
            arrived: Vec::new(),
            to_stamp: Vec::new(),
            blocked: Vec::new(),
            connect_failure: None,
            recovery_start: None,
            shared,
        })
    }

    /// Bypass client: resets its connections before the thread ends (a process that exits
    /// leaves no kernel to do it).
    fn reset_bypass(&mut self) {
        let now = self.shared.clock.now_ns();
        if let Some(net) = self.bypass.as_mut() {
            net.abort_all(self.conns.iter_mut().filter_map(|c| c.link.take()), now);
        }
    }

    /// Reads the wall clock against the run clock (see [`StampClock`]).
    fn read_stamp_clock(&mut self) {
        let before = self.shared.clock.now_ns();
        let real = realtime_ns();
        let after = self.shared.clock.now_ns();
        self.stamp_clock.update(before, real, after);
    }

    fn depth(&self) -> usize {
        match self.phase {
            Phase::Prefill => self.pipeline.max(PREFILL_DEPTH),
            _ => self.pipeline,
        }
    }

    /// Whether events at `now` count (the window and the drain after it).
    fn counting(&self, now: u64) -> bool {
        self.phase == Phase::Run && now >= self.t0
    }

    // ---- connections -------------------------------------------------------------------

    /// Opens every connection and waits until all are up.
    fn connect_all(&mut self) -> Result<(), (SocketAddr, std::io::ErrorKind)> {
        for i in 0..self.conns.len() {
            let server = self.conns[i].server;
            self.open(i, 0).map_err(|k| (server, k))?;
        }
        let deadline = Instant::now() + CONNECT_DEADLINE;
        if self.bypass.is_some() {
            // Busy-polls the stack until every handshake is done or one failed.
            while let Some(c) = self.conns.iter().find(|c| c.state == ConnState::Connecting) {
                if let Some(failure) = self.connect_failure {
                    return Err(failure);
                }
                if Instant::now() >= deadline {
                    return Err((c.server, std::io::ErrorKind::TimedOut));
                }
                let now = self.shared.clock.now_ns();
                self.poll_bypass(now, now);
            }
            return self.connect_failure.map_or(Ok(()), Err);
        }
        while let Some(c) = self.conns.iter().find(|c| c.state == ConnState::Connecting) {
            let server = c.server;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err((server, std::io::ErrorKind::TimedOut));
            }
            let ready: Vec<(u64, u32)> = self
                .epoll
                .wait(Some(left))
                .map_err(|e| (server, e.kind()))?
                .collect();
            for (token, _) in ready {
                let i = token as usize;
                if self.conns[i].state == ConnState::Connecting {
                    let c = &mut self.conns[i];
                    let res = sys::connect_result(c.stream.as_ref().expect("connecting socket"));
                    if let Err(e) = res {
                        return Err((c.server, e.kind()));
                    }
                    self.became_ready(i, 0);
                }
            }
        }
        Ok(())
    }

    /// Starts connection `i`; `Err` only when the attempt failed at once.
    fn open(&mut self, i: usize, now: u64) -> Result<(), std::io::ErrorKind> {
        if let Some(net) = self.bypass.as_mut() {
            let id = net.connect(self.conns[i].server, i)?;
            let c = &mut self.conns[i];
            c.link = Some(id);
            c.state = ConnState::Connecting;
            c.since_ns = now;
            return Ok(());
        }
        let (stream, connected) =
            sys::connect_nonblocking(&self.conns[i].server).map_err(|e| e.kind())?;
        let interest = if connected { WATCH } else { WATCH | WRITABLE };
        self.epoll
            .add(stream.as_raw_fd(), interest, i as u64)
            .map_err(|e| e.kind())?;
        let c = &mut self.conns[i];
        c.stream = Some(stream);
        c.state = ConnState::Connecting;
        c.since_ns = now;
        c.write_interest = !connected;
        if connected {
            self.became_ready(i, now);
        }
        Ok(())
    }

    fn became_ready(&mut self, i: usize, now: u64) {
        if let Some(flags) = self.shared.stamps.socket_flags()
            && self.conns[i].enable_stamps(flags).is_err()
        {
            self.stats.stamp_failures += 1;
        }
        let c = &mut self.conns[i];
        c.state = ConnState::Ready;
        c.failures = 0;
        if c.write_interest {
            c.write_interest = false;
            if let Some(s) = c.stream.as_ref() {
                let _ = self.epoll.modify(s.as_raw_fd(), WATCH, i as u64);
            }
        }
        if self.ready_free == 0
            && let Some(p) = self.pacer.as_mut()
        {
            p.slot_freed_after_all_busy(now);
        }
        self.ready_free += self.depth();
        if self.phase != Phase::Connect {
            self.refill(i, now);
        }
    }

    /// Closes connection `i` after `why`; its in-flight requests are lost, never retried.
    fn fail(&mut self, i: usize, why: Failure, now: u64) {
        if self.phase == Phase::Connect && self.conns[i].state == ConnState::Connecting {
            let kind = match why {
                Failure::Timeout => std::io::ErrorKind::TimedOut,
                _ => std::io::ErrorKind::ConnectionRefused,
            };
            self.connect_failure
                .get_or_insert((self.conns[i].server, kind));
        }
        if let (Some(id), Some(net)) = (self.conns[i].link, self.bypass.as_mut()) {
            net.abort(id);
        }
        self.settle(i, now, true);
        let counting = self.counting(now);
        let depth = self.depth();
        let verify = self.shared.config.verify;
        let timeout_ns = self.shared.config.timeout.as_nanos() as u64;
        let c = &mut self.conns[i];
        if c.state == ConnState::Ready {
            self.ready_free -= depth - c.inflight.len();
        }
        if !c.unready_listed {
            c.unready_listed = true;
            self.unready.push(i);
        }
        let lost = c.close();
        self.in_flight -= lost.len();
        let warmup = self.tick_index < 0;
        for r in &lost {
            if verify {
                match r.command {
                    Command::Set => c.key_state(r.key).maybe_stored(r.version),
                    Command::Delete => c.key_state(r.key).maybe_deleted(),
                    Command::Get | Command::MultiGet => {}
                }
            }
            if self.phase == Phase::Prefill {
                self.stats.prefill_errors += 1;
            } else if r.measured {
                if now.saturating_sub(r.sent_ns) >= timeout_ns {
                    self.stats.errors.timeout += 1;
                } else {
                    self.stats.errors.aborted += 1;
                }
                self.interval.errors += 1;
            }
        }
        if counting {
            match why {
                Failure::Reset => self.stats.errors.reset += 1,
                Failure::Protocol => self.stats.errors.protocol += 1,
                Failure::Refused => self.stats.errors.refused += 1,
                Failure::Timeout => {}
            }
            if why != Failure::Timeout && !warmup {
                self.interval.errors += 1;
            }
        }
        c.failures = c.failures.saturating_add(1);
        let backoff = (BACKOFF_NS << (c.failures - 1).min(10)).min(MAX_BACKOFF_NS);
        c.state = ConnState::Down {
            retry_at_ns: now + backoff,
        };
    }

    // ---- sending -----------------------------------------------------------------------

    /// Encodes one request on connection `i`; `measured` when it goes out in the window.
    fn issue(&mut self, i: usize, intended_ns: u64, measured: bool, now: u64) {
        let sh = &*self.shared;
        let verify = sh.config.verify;
        let timeout_ns = sh.config.timeout.as_nanos() as u64;
        let c = &mut self.conns[i];
        let (command, key, value_len) = if self.phase == Phase::Prefill {
            let key = c.own.nth(c.prefill_sent);
            c.prefill_sent += 1;
            self.stats.prefill_keys += 1;
            (Command::Set, key, c.picker.value_len())
        } else {
            let p = c.picker.pick(&mut c.multi);
            (p.command, p.key, p.value_len)
        };
        let key_bytes = sh.keyspace.key(key);
        let opaque = c.take_opaque();
        let mut version = 0;
        let nkeys = if command == Command::MultiGet {
            sh.config.multiget
        } else {
            0
        };
        let value: &[u8] = match command {
            Command::Set if verify => {
                version = c.key_state(key).next_version();
                self.scratch.resize(value_len, 0);
                verify::fill_value(key_bytes, version, &mut self.scratch);
                &self.scratch
            }
            Command::Set => &sh.pattern[..value_len],
            _ => &[],
        };
        let multi_start = c.multi.len() - nkeys;
        let multi_keys = c.multi.make_contiguous();
        let request = Request {
            command,
            key: key_bytes,
            multi: MultiKeys::new(&sh.keyspace, &multi_keys[multi_start..]),
            value,
            ttl: sh.config.ttl,
            opaque,
        };
        sh.codec.encode(&request, &mut c.out);
        let end_offset = c.encoded_end();
        c.inflight.push_back(InFlight {
            command,
            key,
            nkeys: nkeys as u32,
            version,
            opaque,
            intended_ns,
            sent_ns: now,
            measured,
            end_offset,
            tx_kernel_ns: None,
            tx_hw_ns: None,
        });
        self.timeouts
            .push(now.saturating_add(timeout_ns), i, opaque);
        self.ready_free -= 1;
        self.in_flight += 1;
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(i);
        }
        if measured {
            self.stats.sent += 1;
        }
    }

    /// Fills connection `i` up to the depth: with the prefill's keys, with new requests in closed
    /// loop, and with the oldest due arrivals in open loop (a slot that a reply freed takes the
    /// next waiting arrival at once).
    fn refill(&mut self, i: usize, now: u64) {
        if self.conns[i].state != ConnState::Ready {
            return;
        }
        let depth = self.depth();
        match self.phase {
            Phase::Connect => {}
            Phase::Prefill => {
                let count = self.conns[i].own.len();
                while self.conns[i].inflight.len() < depth && self.conns[i].prefill_sent < count {
                    self.issue(i, now, false, now);
                }
            }
            Phase::Run if self.open_loop => {
                while self.conns[i].inflight.len() < depth {
                    let Some(a) = self.pacer.as_mut().and_then(|p| p.take(now)) else {
                        break;
                    };
                    self.send_arrival(i, a, now);
                }
            }
            Phase::Run => {
                if self.ended || now >= self.t_end {
                    return;
                }
                let measured = now >= self.t0;
                while self.conns[i].inflight.len() < depth {
                    self.issue(i, now, measured, now);
                }
            }
        }
    }

    /// Open loop: sends due arrivals on free connections, oldest first, round robin.
    fn dispatch(&mut self, now: u64) {
        while self.ready_free > 0 && self.pacer.as_ref().is_some_and(|p| p.is_due(now)) {
            let n = self.conns.len();
            let Some(i) = (0..n).map(|k| (self.rr + k) % n).find(|&i| {
                self.conns[i].state == ConnState::Ready
                    && self.conns[i].inflight.len() < self.pipeline
            }) else {
                debug_assert!(false, "ready_free {} with no free slot", self.ready_free);
                self.ready_free = 0;
                break;
            };
            let Some(a) = self.pacer.as_mut().and_then(|p| p.take(now)) else {
                break;
            };
            self.rr = (i + 1) % n;
            self.send_arrival(i, a, now);
        }
    }

    /// Open loop: sends arrival `a` on connection `i` (which has a free slot) and records its
    /// send lag.
    fn send_arrival(&mut self, i: usize, a: Arrival, now: u64) {
        self.issue(i, a.intended_ns, a.measured, now);
        if !a.measured {
            return;
        }
        let lag = now.saturating_sub(a.intended_ns);
        self.stats.send_lag.saturating_record(lag.max(1));
        if lag > self.shared.config.late_threshold.as_nanos() as u64 {
            self.stats.late += 1;
        }
        if a.waited {
            self.stats.backpressured += 1;
        } else {
            self.stats.generator_lag.saturating_record(lag.max(1));
        }
        if let Some(prev) = self.last_sent_ns
            && self.stats.sent_gaps.len() < MAX_GAP_SAMPLES
        {
            self.stats.sent_gaps.push(now.saturating_sub(prev) as f64);
        }
        self.last_sent_ns = Some(now);
    }

    fn flush_dirty(&mut self, now: u64) {
        if self.bypass.is_some() {
            return self.flush_dirty_bypass(now);
        }
        while let Some(i) = self.dirty.pop() {
            let c = &mut self.conns[i];
            c.dirty = false;
            if c.state != ConnState::Ready || !c.has_output() {
                continue;
            }
            match c.flush() {
                Ok(FlushOutcome::Done) => {}
                Ok(FlushOutcome::Blocked) => {
                    if !c.write_interest {
                        c.write_interest = true;
                        if let Some(s) = c.stream.as_ref() {
                            let _ = self.epoll.modify(s.as_raw_fd(), WATCH | WRITABLE, i as u64);
                        }
                    }
                }
                Err(_) => self.fail(i, Failure::Reset, now),
            }
        }
    }

    /// Bypass client: queues every dirty connection's output in its socket; what its send
    /// buffer does not take is tried again in the next round.
    fn flush_dirty_bypass(&mut self, now: u64) {
        let mut blocked = std::mem::take(&mut self.blocked);
        while let Some(i) = self.dirty.pop() {
            let c = &mut self.conns[i];
            c.dirty = false;
            let (ConnState::Ready, Some(id), true) = (c.state, c.link, c.has_output()) else {
                continue;
            };
            let net = self.bypass.as_mut().expect("a bypass worker");
            match net.write(id, &c.out[c.out_pos..]) {
                Some(n) => {
                    c.out_pos += n;
                    c.bytes_written += n as u64;
                    if n > 0 && !c.tx_pending {
                        c.tx_pending = true;
                        self.to_stamp.push(i);
                    }
                    if c.out_pos == c.out.len() {
                        c.out.clear();
                        c.out_pos = 0;
                    } else {
                        blocked.push(i);
                    }
                }
                None => self.fail(i, Failure::Reset, now),
            }
        }
        for &i in &blocked {
            if !self.conns[i].dirty && self.conns[i].state == ConnState::Ready {
                self.conns[i].dirty = true;
                self.dirty.push(i);
            }
        }
        blocked.clear();
        self.blocked = blocked;
    }

    /// Bypass client: one round of the stack (ingress, connection events, replies, output,
    /// egress, send stamps); then, if nothing happened and `deadline_ns` is ahead, waits for
    /// a frame until then (or the table's next timer).
    fn poll_bypass(&mut self, now: u64, deadline_ns: u64) {
        let clock = self.shared.clock;
        let mut progress = self
            .bypass
            .as_mut()
            .expect("a bypass worker")
            .ingress(clock.now_ns());
        let mut events = std::mem::take(&mut self.net_events);
        self.bypass
            .as_mut()
            .expect("a bypass worker")
            .events(&mut events);
        for &(id, event) in &events {
            progress = true;
            let now = clock.now_ns();
            let Some(i) = self.conns.iter().position(|c| c.link == Some(id)) else {
                // A connection given up on while it was opening: it has no use now.
                if event == ConnEvent::Established {
                    self.bypass.as_mut().expect("a bypass worker").abort(id);
                }
                continue;
            };
            match (event, self.conns[i].state) {
                (ConnEvent::Established, ConnState::Connecting) => self.became_ready(i, now),
                (ConnEvent::Refused, _) => self.fail(i, Failure::Refused, now),
                (ConnEvent::TimedOut, ConnState::Connecting) => self.fail(i, Failure::Refused, now),
                (ConnEvent::TimedOut, _) => self.fail(i, Failure::Timeout, now),
                (ConnEvent::Reset | ConnEvent::Closed, _) => self.fail(i, Failure::Reset, now),
                (ConnEvent::Established, _) => {}
            }
        }
        self.net_events = events;
        let mut arrived = std::mem::take(&mut self.arrived);
        {
            let Worker { bypass, conns, .. } = &mut *self;
            let net = bypass.as_mut().expect("a bypass worker");
            net.serve(|i, io, stamps| {
                let c = &mut conns[i];
                let mut closed = false;
                loop {
                    c.make_room();
                    match io.recv_slice(c.free_space()) {
                        Ok(0) => break,
                        Ok(n) => c.received(n),
                        Err(_) => {
                            closed = true;
                            break;
                        }
                    }
                }
                arrived.push((i, stamps, closed));
            });
        }
        for &(i, stamps, closed) in &arrived {
            progress = true;
            let rx_ns = self.bypass.as_ref().and_then(|b| b.received_ns(stamps));
            let handled_ns = clock.now_ns();
            if self.conns[i].state != ConnState::Ready {
                continue;
            }
            let rx = RxTime {
                handled_ns,
                kernel_ns: rx_ns,
                hw_ns: None,
            };
            if let Err(()) = self.decode_replies(i, rx) {
                self.fail(i, Failure::Protocol, handled_ns);
                continue;
            }
            if closed {
                self.fail(i, Failure::Reset, handled_ns);
                continue;
            }
            self.refill(i, handled_ns);
        }
        arrived.clear();
        self.arrived = arrived;
        self.flush_dirty_bypass(now);
        let net = self.bypass.as_mut().expect("a bypass worker");
        progress |= net.egress(clock.now_ns(), || clock.now_ns());
        // Requests written before this egress are stamped with it once their connection's
        // new data went out in it.
        let mut k = 0;
        while k < self.to_stamp.len() {
            let i = self.to_stamp[k];
            let c = &mut self.conns[i];
            let sent = c.link.and_then(|id| net.sent_in_latest_egress(id));
            if c.link.is_some() && sent.is_none() {
                k += 1;
                continue;
            }
            if let Some(ns) = sent {
                for r in c.inflight.iter_mut().filter(|r| r.tx_kernel_ns.is_none()) {
                    r.tx_kernel_ns = Some(ns);
                }
            }
            c.tx_pending = false;
            self.to_stamp.swap_remove(k);
        }
        let now = clock.now_ns();
        if progress || !self.dirty.is_empty() || deadline_ns <= now {
            return;
        }
        let mut wait_ns = deadline_ns - now;
        if let Some(timer_ns) = net.poll_delay_ns(now) {
            wait_ns = wait_ns.min(timer_ns);
        }
        if wait_ns > 0 {
            let _ = self.epoll.wait(Some(Duration::from_nanos(wait_ns)));
        }
    }

    // ---- receiving ---------------------------------------------------------------------

    fn on_event(&mut self, i: usize, events: u32) {
        match self.conns[i].state {
            ConnState::Down { .. } => {}
            ConnState::Connecting => {
                let res =
                    sys::connect_result(self.conns[i].stream.as_ref().expect("connecting socket"));
                let now = self.shared.clock.now_ns();
                match res {
                    Ok(()) if events & WRITABLE != 0 => self.became_ready(i, now),
                    Ok(()) => {}
                    Err(_) => self.fail(i, Failure::Refused, now),
                }
            }
            ConnState::Ready => {
                let mut events = events;
                if events & ERROR != 0 && self.conns[i].stamped {
                    // Transmit stamps on the error queue, read in batches. (A reset or a
                    // failed connection also reports a hang-up, which is read below.)
                    events &= !ERROR;
                    let c = &mut self.conns[i];
                    c.errqueue_events = c.errqueue_events.saturating_add(1);
                    if c.errqueue_events as usize >= SETTLE_BATCH
                        || c.awaiting.len() >= SETTLE_BATCH
                    {
                        let now = self.shared.clock.now_ns();
                        self.settle(i, now, false);
                    }
                }
                if events & WRITABLE != 0 && self.conns[i].write_interest {
                    let c = &mut self.conns[i];
                    match c.flush() {
                        Ok(FlushOutcome::Done) => {
                            c.write_interest = false;
                            if let Some(s) = c.stream.as_ref() {
                                let _ = self.epoll.modify(s.as_raw_fd(), WATCH, i as u64);
                            }
                        }
                        Ok(FlushOutcome::Blocked) => {}
                        Err(_) => {
                            let now = self.shared.clock.now_ns();
                            return self.fail(i, Failure::Reset, now);
                        }
                    }
                }
                if events & (READABLE | HANGUP) != 0 {
                    self.on_readable(i, events & HANGUP != 0);
                }
            }
        }
    }

    /// Reads and handles the replies on connection `i` until the socket is drained.
    ///
    /// The socket is edge-triggered, so it is not reported again for bytes already there: read
    /// again while a read filled the buffer (more may wait) or the peer hung up (read up to
    /// the end). A shorter read took everything there was; what arrives later is a new event.
    fn on_readable(&mut self, i: usize, hangup: bool) {
        loop {
            let outcome = self.conns[i].read_some(&mut self.control);
            let rx_ns = self.shared.clock.now_ns();
            let stamps = match outcome {
                Ok(ReadOutcome::Data(_, stamps)) => stamps,
                Ok(ReadOutcome::WouldBlock) => return,
                Ok(ReadOutcome::Closed) | Err(_) => return self.fail(i, Failure::Reset, rx_ns),
            };
            let rx = RxTime {
                handled_ns: rx_ns,
                kernel_ns: stamps
                    .software_ns
                    .and_then(|t| self.stamp_clock.to_run_ns(t)),
                hw_ns: stamps.hardware_ns,
            };
            let more = hangup || self.conns[i].buffer_full();
            if let Err(()) = self.decode_replies(i, rx) {
                return self.fail(i, Failure::Protocol, rx_ns);
            }
            self.refill(i, rx_ns);
            if !more {
                return;
            }
        }
    }

    /// Reads connection `i`'s error queue, then records the replies now stamped, oldest first,
    /// and those that waited [`STAMP_WAIT_NS`] (all of them when `force`) with the generator's
    /// own send time.
    fn settle(&mut self, i: usize, now: u64, force: bool) {
        if self.conns[i].stamped {
            self.drain_tx_stamps(i);
        }
        self.conns[i].errqueue_events = 0;
        let (open_loop, hardware) = (self.open_loop, self.shared.stamps == Timestamps::Hardware);
        while let Some(a) = self.conns[i].awaiting.front() {
            let stamped = a.request.tx_kernel_ns.is_some() || a.request.tx_hw_ns.is_some();
            if !(stamped || force || now.saturating_sub(a.rx.handled_ns) >= STAMP_WAIT_NS) {
                break;
            }
            let a = self.conns[i].awaiting.pop_front().expect("front checked");
            record_reply(
                &mut self.stats,
                (&mut self.interval, self.tick_index < 0),
                (open_loop, hardware),
                a.kind,
                &a.request,
                &a.rx,
            );
        }
    }

    /// Settles every connection whose oldest reply has waited [`STAMP_WAIT_NS`] for its stamp
    /// (all of them when `force`).
    fn settle_waiting(&mut self, now: u64, force: bool) {
        let mut k = 0;
        while k < self.unsettled.len() {
            let i = self.unsettled[k];
            if force
                || self.conns[i]
                    .awaiting
                    .front()
                    .is_some_and(|a| now.saturating_sub(a.rx.handled_ns) >= STAMP_WAIT_NS)
            {
                self.settle(i, now, force);
            }
            if self.conns[i].awaiting.is_empty() {
                self.conns[i].unsettled = false;
                self.unsettled.swap_remove(k);
            } else {
                k += 1;
            }
        }
    }

    /// Reads connection `i`'s error queue and stamps the requests its transmit stamps cover;
    /// returns the messages read.
    fn drain_tx_stamps(&mut self, i: usize) -> usize {
        let mut total = 0;
        loop {
            let Ok(n) = self.conns[i].read_errqueue(&mut self.errqueue) else {
                return total;
            };
            for k in 0..n {
                let ctl = tstamp::parse_control(self.errqueue.control(k));
                let software = ctl
                    .stamps
                    .software_ns
                    .and_then(|t| self.stamp_clock.to_run_ns(t));
                let hardware = ctl.stamps.hardware_ns;
                if let Some(key) = ctl.tx_key
                    && (software.is_some() || hardware.is_some())
                {
                    self.conns[i].apply_tx_stamp(key, software, hardware);
                }
            }
            total += n;
            if n < ERRQUEUE_BATCH {
                return total;
            }
        }
    }

    /// Decodes every complete reply on connection `i`, received at `rx`.
    fn decode_replies(&mut self, i: usize, rx: RxTime) -> Result<(), ()> {
        let sh = &*self.shared;
        let verify = sh.config.verify;
        let open_loop = self.open_loop;
        let prefill = self.phase == Phase::Prefill;
        let warmup = self.tick_index < 0;
        let ready = self.conns[i].state == ConnState::Ready;
        let hardware = sh.stamps == Timestamps::Hardware;
        let hits = &mut self.multi_hits;
        let Conn {
            inb,
            in_start,
            in_end,
            inflight,
            key_states,
            own,
            multi,
            stamped,
            awaiting,
            ..
        } = &mut self.conns[i];
        while let Some(front) = inflight.front().copied() {
            let key = sh.keyspace.key(front.key);
            let nkeys = front.nkeys as usize;
            let keys: &[u64] = if nkeys > 0 {
                &multi.make_contiguous()[..nkeys]
            } else {
                &[]
            };
            let expect = Expect {
                command: front.command,
                key,
                multi: MultiKeys::new(&sh.keyspace, keys),
                opaque: front.opaque,
            };
            let buf = &inb[*in_start..*in_end];
            let (reply, used) = match sh.codec.decode(buf, &expect, hits) {
                Ok(ok) => ok,
                Err(DecodeError::Incomplete) => break,
                Err(DecodeError::Invalid(_)) => return Err(()),
            };
            let kind = match reply {
                Reply::Hit { .. } => OpKind::GetHit,
                Reply::Miss => OpKind::GetMiss,
                Reply::Stored => OpKind::Set,
                Reply::Deleted | Reply::NotFound => OpKind::Delete,
                Reply::Multi { .. } => OpKind::MultiGet,
                Reply::NotStored | Reply::ServerError => OpKind::Other,
            };
            let slot = |k: u64| own.position(k).expect("a verified key is owned") as usize;
            if verify {
                match reply {
                    Reply::Hit { value } => {
                        let state = &mut key_states[slot(front.key)];
                        self.stats.verify.check_hit(state, key, value);
                    }
                    Reply::Miss => self
                        .stats
                        .verify
                        .check_miss(&mut key_states[slot(front.key)]),
                    Reply::Stored => key_states[slot(front.key)].stored(front.version),
                    Reply::Deleted | Reply::NotFound => key_states[slot(front.key)].deleted(),
                    Reply::Multi { .. } => {
                        let mut found = hits.iter().peekable();
                        for (n, &k) in keys.iter().enumerate() {
                            let state = &mut key_states[slot(k)];
                            match found.next_if(|h| h.index == n) {
                                Some(h) => self.stats.verify.check_hit(
                                    state,
                                    sh.keyspace.key(k),
                                    &buf[h.value.clone()],
                                ),
                                None => self.stats.verify.check_miss(state),
                            }
                        }
                    }
                    Reply::NotStored | Reply::ServerError => {}
                }
            }
            if prefill {
                if kind != OpKind::Set {
                    self.stats.prefill_errors += 1;
                }
            } else {
                if front.measured {
                    self.stats.counts[kind.index()] += 1;
                    if let Reply::Multi { hits: found } = reply {
                        self.stats.keys_hit += found as u64;
                        self.stats.keys_missed += (nkeys - found) as u64;
                    }
                    if reply == Reply::ServerError {
                        self.stats.errors.server += 1;
                    }
                }
                if reply == Reply::ServerError && (front.measured || warmup) {
                    self.interval.errors += 1;
                }
                if *stamped && front.tx_kernel_ns.is_none() && front.tx_hw_ns.is_none() {
                    // Its transmit stamp has not been read yet: record it once it has.
                    awaiting.push_back(Answered {
                        kind,
                        request: front,
                        rx,
                    });
                } else {
                    record_reply(
                        &mut self.stats,
                        (&mut self.interval, warmup),
                        (open_loop, hardware),
                        kind,
                        &front,
                        &rx,
                    );
                }
            }
            multi.drain(..nkeys);
            *in_start += used;
            inflight.pop_front();
            self.in_flight -= 1;
            if ready {
                if self.ready_free == 0
                    && let Some(p) = self.pacer.as_mut()
                {
                    p.slot_freed_after_all_busy(rx.handled_ns);
                }
                self.ready_free += 1;
            }
        }
        let bytes_left = inflight.is_empty() && *in_start < *in_end;
        let c = &mut self.conns[i];
        if !c.awaiting.is_empty() && !c.unsettled {
            c.unsettled = true;
            self.unsettled.push(i);
        }
        if bytes_left {
            // Bytes nobody asked for.
            return Err(());
        }
        Ok(())
    }

    // ---- housekeeping ------------------------------------------------------------------

    /// Times out stuck requests and reopens connections that are due.
    ///
    /// Looks at the deadlines that passed and at the connections that are not ready, never at
    /// every connection.
    fn housekeeping(&mut self, now: u64) {
        if let Some(delay) = self.sched.as_ref().and_then(sys::SchedStat::run_delay_ns) {
            if self.counting(now) && !self.ended {
                self.stats.cpu_wait_ns += delay.saturating_sub(self.last_delay_ns);
                if self.idle == Idle::Spin && !self.spin_guard.may_spin(now) {
                    self.stats.spin_paused_ns += now.saturating_sub(self.last_housekeeping_ns);
                }
            }
            self.spin_guard.observe(now, delay);
            (self.last_delay_ns, self.last_housekeeping_ns) = (delay, now);
        }
        if self.shared.stamps.socket_flags().is_some() {
            self.read_stamp_clock();
            self.settle_waiting(now, false);
        }
        let timeout_ns = self.shared.config.timeout.as_nanos() as u64;
        while let Some(i) = {
            let conns = &self.conns;
            // A connection answers in order, so a request still waiting is the front one.
            self.timeouts.pop_due(now, |i, opaque| {
                conns[i]
                    .inflight
                    .front()
                    .is_some_and(|f| f.opaque == opaque)
            })
        } {
            self.fail(i, Failure::Timeout, now);
        }
        let mut k = 0;
        while k < self.unready.len() {
            let i = self.unready[k];
            match self.conns[i].state {
                ConnState::Ready => {}
                ConnState::Connecting => {
                    // A connect that hangs (SYN dropped) is a failed attempt after the timeout.
                    if now.saturating_sub(self.conns[i].since_ns) >= timeout_ns {
                        self.fail(i, Failure::Refused, now);
                    }
                }
                ConnState::Down { retry_at_ns } => {
                    if retry_at_ns <= now && !self.ended && self.open(i, now).is_err() {
                        self.fail(i, Failure::Refused, now);
                    }
                }
            }
            if self.conns[i].state == ConnState::Ready {
                self.conns[i].unready_listed = false;
                self.unready.swap_remove(k);
            } else {
                k += 1;
            }
        }
        self.next_housekeeping_ns = now + HOUSEKEEPING_NS;
    }

    /// Hands the current interval to the starting thread and begins the next.
    fn send_tick(&mut self) {
        let tick = Tick {
            index: self.tick_index,
            stats: std::mem::take(&mut self.interval),
        };
        let _ = self.ticks.send(tick);
        self.tick_index += 1;
        self.next_tick_ns += self.interval_ns;
    }

    /// Waits for events until `deadline_ns` and handles them.
    fn poll(&mut self, now: u64, deadline_ns: u64) {
        if self.bypass.is_some() {
            return self.poll_bypass(now, deadline_ns);
        }
        let timeout = Duration::from_nanos(deadline_ns.saturating_sub(now));
        let mut ready = std::mem::take(&mut self.ready_events);
        ready.clear();
        if let Ok(events) = self.epoll.wait(Some(timeout)) {
            ready.extend(events);
        }
        for &(token, events) in &ready {
            self.on_event(token as usize, events);
            // Write what this reply freed at once, not after the whole batch: with thousands of
            // connections a batch takes milliseconds, and a request encoded at the start of it
            // would carry a send time (taken when its slot freed) long before its write, and
            // the server would wait on the client (and see its delayed ACKs) meanwhile.
            // Each connection is still written once per flush, so this adds no writes.
            if !self.dirty.is_empty() {
                self.flush_dirty(now);
            }
        }
        self.ready_events = ready;
    }

    // ---- phases ------------------------------------------------------------------------

    /// Writes every owned key once (closed loop, deep pipeline, unrecorded).
    fn prefill(&mut self) {
        self.phase = Phase::Prefill;
        self.ready_free = self
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Ready)
            .count()
            * self.depth();
        let now = self.shared.clock.now_ns();
        for i in 0..self.conns.len() {
            self.refill(i, now);
        }
        loop {
            let now = self.shared.clock.now_ns();
            self.flush_dirty(now);
            let pending = self.conns.iter().any(|c| {
                !c.inflight.is_empty()
                    || (c.prefill_sent < c.own.len() && !matches!(c.state, ConnState::Down { .. }))
            });
            if !pending || self.shared.stop.load(Ordering::Relaxed) {
                break;
            }
            if now >= self.next_housekeeping_ns {
                self.housekeeping(now);
            }
            self.poll(now, self.next_housekeeping_ns);
        }
    }

    fn run(&mut self, start_ns: u64) {
        let cfg = &self.shared.config;
        let threads = cfg.threads;
        self.phase = Phase::Run;
        self.t0 = start_ns + cfg.warmup.as_nanos() as u64;
        self.t_end = self.t0 + cfg.duration.as_nanos() as u64;
        self.drain_deadline = u64::MAX;
        self.stats.window_start_ns = self.t0;
        // Intervals are aligned on the window's start; the first one may begin before the run.
        let warmup_intervals = cfg.warmup.as_nanos().div_ceil(u128::from(self.interval_ns)) as u64;
        self.tick_index = -(warmup_intervals as i64);
        self.next_tick_ns = self.t0 - (warmup_intervals.saturating_sub(1)) * self.interval_ns;
        if warmup_intervals == 0 {
            self.next_tick_ns = self.t0 + self.interval_ns;
        }
        let id = self.conns.first().map_or(0, |c| c.index % threads);
        if let Some(rate) = cfg.rate {
            let phase = id as f64 / threads as f64;
            let seed = derive_seed(cfg.seed, SEED_SCHEDULE, id as u64);
            let schedule = Schedule::new(cfg.arrival, rate / threads as f64, start_ns, phase, seed);
            self.pacer = Some(Pacer::new(schedule, self.t0, self.t_end));
        }
        let timeout_ns = cfg.timeout.as_nanos() as u64;
        let spin_ns = cfg.spin.as_nanos() as u64;
        // Slots are depth-dependent; recount them for the run's depth.
        self.ready_free = self
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Ready)
            .map(|c| self.pipeline - c.inflight.len().min(self.pipeline))
            .sum();
        // Wait for the start.
        while self.shared.clock.now_ns() < start_ns {
            std::hint::spin_loop();
        }
        // Opened here: thread-self names the thread that opens it.
        self.sched = sys::SchedStat::open();
        self.last_delay_ns = self
            .sched
            .as_ref()
            .and_then(sys::SchedStat::run_delay_ns)
            .unwrap_or(0);
        self.last_housekeeping_ns = self.shared.clock.now_ns();
        self.spin_guard = SpinGuard::new(self.last_housekeeping_ns, self.last_delay_ns);
        let now = self.shared.clock.now_ns();
        for i in 0..self.conns.len() {
            self.refill(i, now);
        }
        loop {
            let now = self.shared.clock.now_ns();
            if self.cpu_start_ns.is_none() && now >= self.t0 {
                self.cpu_start_ns = Some(sys::thread_cpu_ns());
                self.recovery_start = self.bypass.as_ref().map(|b| b.recovery());
            }
            if !self.ended && (now >= self.t_end || self.shared.stop.load(Ordering::Relaxed)) {
                self.ended = true;
                self.t_end = self.t_end.min(now);
                self.drain_deadline = now + timeout_ns;
                if let Some(start) = self.cpu_start_ns {
                    self.stats.cpu_ns = sys::thread_cpu_ns().saturating_sub(start);
                }
                // Arrivals due before the end that this loop had not reached yet go out now if a
                // slot is free (late, and counted so); whatever still waits is never sent.
                if let Some(p) = self.pacer.as_mut() {
                    p.end_at(self.t_end);
                    self.dispatch(now);
                    self.close_pacer();
                }
            } else if !self.ended && self.open_loop {
                self.dispatch(now);
            }
            self.flush_dirty(now);
            if now >= self.next_housekeeping_ns {
                self.housekeeping(now);
            }
            // An interval is handed on once it has passed, except the one the window ends in,
            // which also takes the replies of the drain after the window (sent below).
            while now >= self.next_tick_ns && self.next_tick_ns < self.t_end {
                self.send_tick();
            }
            if self.ended && (self.in_flight == 0 || now >= self.drain_deadline) {
                break;
            }
            // A thread whose core turned out to be shared does not spin at all for a while.
            let paused = self.idle == Idle::Spin && !self.spin_guard.may_spin(now);
            let mut deadline = self.next_tick_ns.min(self.next_housekeeping_ns);
            if !self.ended {
                deadline = deadline.min(self.t_end);
                // Sleep until shortly before the next arrival, then busy-poll up to it; with
                // every slot busy there is nothing to send before a reply frees one.
                if let Some(due) = self.pacer.as_ref().and_then(|p| p.wake_at(self.ready_free)) {
                    let window = if paused { 0 } else { spin_ns };
                    deadline = deadline.min(due.saturating_sub(window));
                }
            } else {
                deadline = deadline.min(self.drain_deadline);
            }
            if self.idle == Idle::Spin && self.in_flight > 0 && !paused {
                // A reply is due: poll without sleeping, so that no wake-up delays it.
                deadline = now;
            }
            self.poll(now, deadline);
        }
        let now = self.shared.clock.now_ns();
        self.settle_waiting(now, true);
        // Whatever is still in flight after the drain has timed out.
        for i in 0..self.conns.len() {
            if !self.conns[i].inflight.is_empty() {
                self.fail(i, Failure::Timeout, now);
            }
        }
        self.send_tick();
        self.stats.window_end_ns = self.t_end;
        if let Some(b) = self.bypass.as_ref() {
            let start = self.recovery_start.unwrap_or_default();
            self.stats.recovery = Some(b.recovery().since(&start));
        }
    }

    /// Open loop, at the window's end: arrivals still waiting are never sent; takes the
    /// pacer's counts.
    fn close_pacer(&mut self) {
        let Some(p) = self.pacer.as_mut() else {
            return;
        };
        p.close();
        let c = p.counts();
        let s = &mut self.stats;
        s.scheduled = c.scheduled;
        s.never_sent = c.never_sent;
        s.backlog_start = c.backlog_start;
        s.backlog_end = c.backlog_end;
        s.backlog_end_wait_ns = c.backlog_end_wait_ns;
        s.intended_gaps = p.take_intended_gaps();
        debug_assert_eq!(
            c.sent, s.sent,
            "the pacer and the worker count the same sends"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spinning_pauses_while_the_thread_waits_for_its_cpu() {
        const MS: u64 = 1_000_000;
        const US: u64 = 1_000;
        let mut g = SpinGuard::new(0, 0);
        // A core of its own: microseconds of waiting now and then (a kernel worker).
        for t in 1..=50 {
            g.observe(t * 2 * MS, t * 20 * US);
            assert!(g.may_spin(t * 2 * MS), "{t}");
        }
        // Two milliseconds of waiting within 20 ms: the core is shared.
        let (t0, d0) = (100 * MS, MS);
        g.observe(t0, d0);
        g.observe(t0 + 2 * MS, d0 + MS);
        assert!(g.may_spin(t0 + 2 * MS));
        g.observe(t0 + 4 * MS, d0 + 2 * MS);
        assert!(!g.may_spin(t0 + 4 * MS));
        assert!(!g.may_spin(t0 + 4 * MS + SPIN_PAUSE_NS - 1));
        // Sleeping while it waits, it hardly waits for the CPU: spinning resumes after the
        // pause ...
        g.observe(t0 + 50 * MS, d0 + 2 * MS + 10 * US);
        let t1 = t0 + 4 * MS + SPIN_PAUSE_NS;
        assert!(g.may_spin(t1));
        // ... and pauses again as soon as the core turns out to be shared still.
        g.observe(t1, d0 + 2 * MS + 20 * US);
        g.observe(t1 + 2 * MS, d0 + 4 * MS + 20 * US);
        assert!(!g.may_spin(t1 + 2 * MS));
    }
}
