//! Starting a run: build the keyspace and place its keys on servers and connections, note the
//! environment (asking each server for its version and settings), decide the kernel
//! timestamps (enabling the NIC's for `--timestamps hardware`, put back afterwards), start and
//! pin the workers, step them through connect, prefill and start together, merge their
//! intervals into the time series (printing a progress line for each), and merge what they
//! measured.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant, SystemTime};

use crate::client::Codec;
use crate::client::steer::{Shares, SteerError, connect_steered, place_by_owner};
use crate::config::{Config, ConfigError, MAX_VALUE_SIZE, Net};
use crate::environment::Environment;
use crate::histogram::Percentiles;
use crate::placement::{PlacementError, place};
use crate::report::{Report, StampSummary};
use crate::tstamp::StampPlan;
use crate::worker::{Clock, IntervalStats, Shared, Tick, worker_main};
use crate::workload::{Keyspace, value_pattern};

/// Delay between publishing the start time and the start, so every worker is waiting for it.
const START_DELAY_NS: u64 = 2_000_000;

/// Why a run could not take place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The configuration is invalid.
    Config(ConfigError),
    /// A connection could not be opened at start-up.
    Connect {
        /// The server.
        server: SocketAddr,
        /// What went wrong.
        kind: std::io::ErrorKind,
    },
    /// The bypass client's device or table could not be set up (the message says why).
    Net(String),
    /// A worker thread panicked.
    WorkerPanicked,
    /// The keys cannot be placed on the servers (ketama put too few on one).
    Placement(PlacementError),
    /// `--steer` could not give every worker its connections.
    Steer(SteerError),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Config(e) => e.fmt(f),
            RunError::Connect { server, kind } => write!(f, "cannot connect to {server}: {kind}"),
            RunError::Net(e) => f.write_str(e),
            RunError::WorkerPanicked => f.write_str("a worker thread panicked"),
            RunError::Placement(e) => e.fmt(f),
            RunError::Steer(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RunError {}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e)
    }
}

/// Runs `config` to completion and returns the merged report.
///
/// # Errors
/// [`RunError`] when the configuration is invalid or a connection fails at start-up. Errors
/// during the run are counted in the report instead.
pub fn run(config: &Config) -> Result<Report, RunError> {
    run_with_stop(config, Arc::new(AtomicBool::new(false)))
}

/// Like [`run`], ending the window early when `stop` becomes true (SIGINT).
///
/// # Errors
/// As [`run`].
///
/// # Panics
/// If a worker thread cannot be spawned.
pub fn run_with_stop(config: &Config, stop: Arc<AtomicBool>) -> Result<Report, RunError> {
    config.check()?;
    let keyspace = Keyspace::new(config.keys, config.key_size).map_err(ConfigError::from)?;
    // Steered over kernel sockets: connections first (each probed for its worker), then keys
    // by owner. Over the bypass client the threads open and probe their own connections,
    // and the keys are placed once all are kept (between barriers 1 and 2).
    let bypass_steer = config.steer && config.net.bypass().is_some();
    let steered = if config.steer && !bypass_steer {
        let s = connect_steered(config.servers[0], config.protocol, config.connections)
            .map_err(RunError::Steer)?;
        Some(s)
    } else {
        None
    };
    let placement = match &steered {
        _ if bypass_steer => None,
        Some(s) => Some({
            let conn_workers: Vec<usize> = s.conns.iter().map(|c| c.1).collect();
            place_by_owner(
                config.keys,
                |k| keyspace.key(k),
                s.workers,
                &conn_workers,
                config.verify,
            )
            .map_err(RunError::Steer)?
        }),
        None => Some(
            place(
                config.distribution,
                &config.names(),
                config.connections,
                config.keys,
                |k| keyspace.key(k),
                config.verify,
            )
            .map_err(RunError::Placement)?,
        ),
    };
    let mut steer_connections = steered.as_ref().map(|s| {
        let mut counts = vec![0; s.workers];
        for &(_, w) in &s.conns {
            counts[w] += 1;
        }
        counts
    });
    let steered_streams = steered
        .map(|s| s.conns.into_iter().map(Some).collect())
        .unwrap_or_default();
    let pattern = if config.verify {
        Vec::new()
    } else {
        value_pattern(config.value_max, config.seed)
    };
    let threads = config.threads;
    let cores = pick_cores(config);
    let environment = Environment::capture(
        &config.names(),
        &config.servers,
        generator_cpus(config, cores.as_deref()),
        config.protocol,
        SystemTime::now(),
    );
    // Kept until the workers are done: dropping it restores the NICs' stamping settings.
    let stamps = match config.net {
        Net::Kernel => StampPlan::new(config.timestamps, &config.servers),
        Net::Tap(_) | Net::Xdp(_) => StampPlan::device(),
    };
    if config.progress {
        if let Some(note) = &stamps.note {
            eprintln!("memspin-loadgen: {note}");
        }
        let enabled = stamps.enabled_interfaces();
        if !enabled.is_empty() {
            eprintln!(
                "memspin-loadgen: hardware timestamping on for {} until the run ends",
                enabled.join(", ")
            );
        }
    }
    let shared = Arc::new(Shared {
        config: config.clone(),
        keyspace,
        placement: placement.map(OnceLock::from).unwrap_or_default(),
        codec: Codec::new(config.protocol, MAX_VALUE_SIZE.max(config.value_max)),
        pattern,
        clock: Clock::new(),
        stamps: stamps.source,
        stop,
        barrier: Barrier::new(threads + 1),
        abort: AtomicBool::new(false),
        start_ns: AtomicU64::new(0),
        connect_error: Mutex::new(None),
        net_error: Mutex::new(None),
        steered: Mutex::new(steered_streams),
        shares: bypass_steer.then(|| Mutex::new(Shares::new(config.connections))),
        steer_error: Mutex::new(None),
    });
    let (tx, rx) = mpsc::channel::<Tick>();
    let mut handles = Vec::with_capacity(threads);
    for id in 0..threads {
        let core = cores.as_ref().map(|c| c[id % c.len()]);
        let (shared, tx) = (shared.clone(), tx.clone());
        let handle = std::thread::Builder::new()
            .name(format!("loadgen-{id}"))
            .spawn(move || worker_main(id, core, shared, tx))
            .expect("spawn a worker thread");
        handles.push(handle);
    }
    drop(tx);
    shared.barrier.wait(); // 1: everyone connected or failed
    let failed = *shared
        .connect_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let net_failed = shared
        .net_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let mut steer_failed = shared
        .steer_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(shares) = &shared.shares
        && failed.is_none()
        && net_failed.is_none()
        && steer_failed.is_none()
    {
        match place_bypass_steered(config, &shared, shares) {
            Ok(counts) => steer_connections = Some(counts),
            Err(e) => steer_failed = Some(e),
        }
    }
    if failed.is_some() || net_failed.is_some() || steer_failed.is_some() {
        shared.abort.store(true, Ordering::SeqCst);
    }
    shared.barrier.wait(); // 2
    if let Some(e) = net_failed {
        for h in handles {
            let _ = h.join();
        }
        return Err(RunError::Net(e));
    }
    // A steering failure also fails connections (it resets them): it is the cause.
    if let Some(e) = steer_failed {
        for h in handles {
            let _ = h.join();
        }
        return Err(RunError::Steer(e));
    }
    if let Some((server, kind)) = failed {
        for h in handles {
            let _ = h.join();
        }
        return Err(RunError::Connect { server, kind });
    }
    let prefill_started = Instant::now();
    if config.prefill && config.progress {
        eprintln!("prefill: writing {} keys ...", config.keys);
    }
    shared.barrier.wait(); // 3: prefilled
    let prefill_seconds = config
        .prefill
        .then(|| prefill_started.elapsed().as_secs_f64());
    let start_ns = shared.clock.now_ns() + START_DELAY_NS;
    // The window's start on the wall clock, for the interval log.
    let window_start = SystemTime::now() + Duration::from_nanos(START_DELAY_NS) + config.warmup;
    shared.start_ns.store(start_ns, Ordering::SeqCst);
    shared.barrier.wait(); // 4: go
    let intervals = collect_intervals(config, &rx);
    let mut stats = Vec::with_capacity(threads);
    let mut panicked = false;
    for h in handles {
        match h.join() {
            Ok(s) => stats.push(s),
            Err(_) => panicked = true,
        }
    }
    if panicked {
        return Err(RunError::WorkerPanicked);
    }
    let stamp_summary = StampSummary {
        source: stamps.source,
        note: stamps.note.clone(),
    };
    drop(stamps);
    let mut report = Report::from_threads(config, stats, prefill_seconds, stamp_summary);
    report.set_intervals(intervals);
    report.steer_connections = steer_connections;
    report.environment = Some(environment);
    report.window_start = Some(window_start);
    Ok(report)
}

/// `--steer` over the bypass client, once every thread kept its connections: places the
/// keys by the workers the connections landed on (for the workers to take after barrier 2);
/// returns the connections per worker.
fn place_bypass_steered(
    config: &Config,
    shared: &Shared,
    shares: &Mutex<Shares>,
) -> Result<Vec<usize>, SteerError> {
    let shares = shares
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (Some(conn_workers), Some(workers)) = (shares.conn_workers(), shares.workers()) else {
        return Err(shares.unspread());
    };
    let placement = place_by_owner(
        config.keys,
        |k| shared.keyspace.key(k),
        workers,
        &conn_workers,
        config.verify,
    )?;
    let _ = shared.placement.set(placement);
    let mut counts = vec![0; workers];
    for &w in &conn_workers {
        counts[w] += 1;
    }
    Ok(counts)
}

/// The CPUs the generator's threads run on: the pinned ones in use, or those the process may
/// use.
fn generator_cpus(config: &Config, cores: Option<&[core_affinity::CoreId]>) -> Vec<usize> {
    let mut cpus: Vec<usize> = match cores {
        Some(c) if !c.is_empty() => (0..config.threads).map(|t| c[t % c.len()].id).collect(),
        _ => core_affinity::get_core_ids()
            .unwrap_or_default()
            .iter()
            .map(|c| c.id)
            .collect(),
    };
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// The core of each thread: `--cpus`, or the cores this process may run on; `None` without
/// pinning.
fn pick_cores(config: &Config) -> Option<Vec<core_affinity::CoreId>> {
    if !config.pin {
        return None;
    }
    match &config.cpus {
        Some(list) => Some(
            list.iter()
                .map(|&id| core_affinity::CoreId { id })
                .collect(),
        ),
        None => core_affinity::get_core_ids().filter(|c| !c.is_empty()),
    }
}

/// Merges the threads' intervals as they come: an interval every thread has reported gets a
/// progress line (stderr) and, in the window, joins the time series; intervals some thread
/// never reported (threads stopped by a signal at slightly different times) are merged from
/// what came once all threads are done.
fn collect_intervals(config: &Config, rx: &mpsc::Receiver<Tick>) -> Vec<(i64, IntervalStats)> {
    let threads = config.threads;
    let mut pending: BTreeMap<i64, (usize, IntervalStats)> = BTreeMap::new();
    let mut done = Vec::new();
    let finish = |index: i64, stats: IntervalStats, done: &mut Vec<(i64, IntervalStats)>| {
        if config.progress {
            progress_line(config, index, &stats);
        }
        if index >= 0 {
            done.push((index, stats));
        }
    };
    for tick in rx {
        let entry = pending.entry(tick.index).or_default();
        entry.0 += 1;
        entry.1.merge(&tick.stats);
        if entry.0 == threads
            && let Some((_, stats)) = pending.remove(&tick.index)
        {
            finish(tick.index, stats, &mut done);
        }
    }
    for (index, (_, stats)) in pending {
        finish(index, stats, &mut done);
    }
    done.sort_by_key(|d| d.0);
    done
}

fn progress_line(config: &Config, index: i64, stats: &IntervalStats) {
    let interval_s = config.interval.as_secs_f64();
    let (latency, which) = if config.is_open_loop() {
        (&stats.corrected, "corrected")
    } else {
        (&stats.service, "service")
    };
    let p = Percentiles::of(latency);
    let phase = if index < 0 { "warm-up" } else { "run" };
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "[{:>7.2} s] {phase:<7} {:>12.0} ops/s   p50 {:>9.1} µs   p99 {:>9.1} µs ({which})   errors {}",
        (index + 1) as f64 * interval_s,
        stats.completed as f64 / interval_s,
        p.p50,
        p.p99,
        stats.errors
    );
}
