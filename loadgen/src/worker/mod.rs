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
//! wake-up (tens of µs on a virtual machine: `scripts/bench-loadgen-delay.sh` measures it, the
//! `sleep` against the `defaults` runs) to the time it takes to notice the reply. Under
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
//!
//! **Files.** This file holds the thread's state ([`Worker`]) and its life ([`worker_main`]);
//! the rest is split by job:
//!
//! | file | holds |
//! |---|---|
//! | `clock.rs` | the run clock, the wall clock, [`SpinGuard`] |
//! | `stats.rs` | [`ThreadStats`], the time series ([`IntervalStats`]), recording a reply |
//! | `conns.rs` | connection slots: connect, ready, fail and back off, housekeeping |
//! | `send.rs` | encoding requests, closed-loop refill, open-loop dispatch, kernel writes |
//! | `receive.rs` | epoll events, reads, transmit stamps, decoding replies in order |
//! | `stack.rs` | the bypass client's round over its own TCP stack, and `--steer`'s probe on it |
//! | `phases.rs` | prefill, the run loop (window, drain, pacing, waiting), ticks |

mod clock;
mod conns;
mod phases;
mod receive;
mod send;
mod stack;
mod stats;

pub use clock::{Clock, SpinGuard};
pub use stats::{ErrorCounts, IntervalStats, ThreadStats};
pub(crate) use stats::{Tick, record_reply};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::Duration;

use netstack::conn::RecoveryStats;
use netstack::{ConnEvent, ConnId};

use clock::realtime_ns;

use crate::arrival::Schedule;
use crate::bypass::Bypass;
use crate::client::steer::{Shares, SteerError};
use crate::client::{Codec, DecodeError, Expect, MultiHit, MultiKeys, Reply, Request};
use crate::config::{Config, Idle};
use crate::conn::{
    Answered, Conn, ConnState, FlushOutcome, InFlight, LostSet, PrefillSet, ReadOutcome, RxTime,
};
use crate::histogram::OpKind;
use crate::pacing::{Arrival, MAX_GAP_SAMPLES, Pacer};
use crate::placement::{KeySet, Placement};
use crate::sys::{self, EDGE, ERROR, ERRQUEUE_BATCH, Epoll, ErrQueue, HANGUP, READABLE, WRITABLE};
use crate::timeouts::TimeoutQueue;
use crate::tstamp::{self, StampClock, Timestamps};
use crate::verify;
use crate::workload::{Command, Keyspace, Picker, derive_seed};

/// What every socket is watched for: replies, and the peer's hang-up (`EPOLLRDHUP`, so that
/// bytes and a FIN that arrive together are read up to the end), edge-triggered.
const WATCH: u32 = READABLE | HANGUP | EDGE;
/// How often timeouts and reconnects are looked at.
const HOUSEKEEPING_NS: u64 = 2_000_000;
/// Requests in flight per connection during prefill (at least the pipeline depth).
const PREFILL_DEPTH: usize = 32;
/// A connection's prefill gives up the keys it has left after this many failures (closed,
/// refused, timed out) with no reply between them: its server is gone. A lost request alone
/// costs one failure, and the reply to the next request clears the count. Each failure takes
/// at most `--timeout-ms` and the back-off, so a server that never comes back holds the
/// prefill for about four timeouts; one that refuses, for the first back-offs (70 ms).
const PREFILL_GIVE_UP: u32 = 4;
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

/// State shared by the workers and the thread that started them.
pub(crate) struct Shared {
    pub config: Config,
    pub keyspace: Keyspace,
    /// Which keys each connection picks and owns; with `--steer` over the bypass client, set
    /// between barriers 1 and 2, once every connection knows its worker.
    pub placement: OnceLock<Placement>,
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
    /// `--steer`: per connection index, its connection, opened and probed before the run, and
    /// the worker serving it.
    pub steered: Mutex<Vec<Option<(std::net::TcpStream, usize)>>>,
    /// `--steer` over the bypass client: the shares the threads fill as their connections
    /// answer the probe.
    pub shares: Option<Mutex<Shares>>,
    /// `--steer` over the bypass client: why a thread could not keep its connections.
    pub steer_error: Mutex<Option<SteerError>>,
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
    /// `--steer` over the bypass client, start-up: connections this thread opened and
    /// probed, and why its connections could not be kept.
    steer_tries: usize,
    steer_failure: Option<SteerError>,
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
    if let Some(w) = w.as_mut() {
        if let Err((addr, kind)) = w.connect_all() {
            record_connect_error(&shared, addr, kind);
        }
        if let Some(e) = w.steer_failure.take() {
            let mut slot = shared
                .steer_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            slot.get_or_insert(e);
        }
    }
    shared.barrier.wait(); // 1: connected (or failed)
    shared.barrier.wait(); // 2: the starter decided whether to go on (and placed steered keys)
    if shared.abort.load(Ordering::SeqCst)
        && let Some(w) = w.as_mut()
    {
        w.reset_bypass();
    }
    let Some(mut w) = w.filter(|_| !shared.abort.load(Ordering::SeqCst)) else {
        return ThreadStats::new();
    };
    if shared.shares.is_some() {
        w.assign_keys();
    }
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
            // Steered over the bypass client, keys are placed once the connections know
            // their workers (`assign_keys`); a one-key stand-in holds their place till then.
            let (pick, own) = match shared.placement.get() {
                Some(p) => (p.pick[index].clone(), p.own[index].clone()),
                None => (KeySet::all(1), KeySet::all(1)),
            };
            let picker = Picker::new(
                cfg.mix(),
                pick,
                derive_seed(cfg.seed, SEED_PICKER, index as u64),
            );
            let mut conn = Conn::new(index, server, picker, own, cfg.verify);
            if let Some((stream, worker)) = shared
                .steered
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get_mut(index)
                .and_then(Option::take)
            {
                conn.steered = Some(stream);
                conn.worker = Some(worker);
            }
            conns.push(conn);
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
            steer_tries: 0,
            steer_failure: None,
            shared,
        })
    }

    /// Gives every connection its keys from the run's placement (steered over the bypass
    /// client, placed after the connections were kept).
    ///
    /// # Panics
    /// If the keys were not placed (the starter places them before barrier 2).
    fn assign_keys(&mut self) {
        let cfg = &self.shared.config;
        let placement = self
            .shared
            .placement
            .get()
            .expect("keys placed by barrier 2");
        for c in &mut self.conns {
            let picker = Picker::new(
                cfg.mix(),
                placement.pick[c.index].clone(),
                derive_seed(cfg.seed, SEED_PICKER, c.index as u64),
            );
            c.assign_keys(picker, placement.own[c.index].clone(), cfg.verify);
        }
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
}
