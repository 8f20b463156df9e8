//! Starting a run: build the keyspace, decide the kernel timestamps (enabling the NIC's for
//! `--timestamps hardware`, put back afterwards), start and pin the workers, step them through
//! connect, prefill and start together, print progress once a second, and merge what they
//! measured.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::client::Codec;
use crate::config::{Config, ConfigError, MAX_VALUE_SIZE};
use crate::histogram::{Percentiles, new_histogram};
use crate::report::{Report, StampSummary};
use crate::tstamp::StampPlan;
use crate::worker::{Clock, Shared, TICK_NS, Tick, worker_main};
use crate::workload::{Keyspace, value_pattern};

/// Delay between publishing the start time and the start, so every worker is waiting for it.
const START_DELAY_NS: u64 = 2_000_000;

/// Why a run could not take place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// A worker thread panicked.
    WorkerPanicked,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Config(e) => e.fmt(f),
            RunError::Connect { server, kind } => write!(f, "cannot connect to {server}: {kind}"),
            RunError::WorkerPanicked => f.write_str("a worker thread panicked"),
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
    let pattern = if config.verify {
        Vec::new()
    } else {
        value_pattern(config.value_max, config.seed)
    };
    let threads = config.threads;
    let cores = pick_cores(config);
    // Kept until the workers are done: dropping it restores the NICs' stamping settings.
    let stamps = StampPlan::new(config.timestamps, &config.servers);
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
        codec: Codec::new(config.protocol, MAX_VALUE_SIZE.max(config.value_max)),
        pattern,
        clock: Clock::new(),
        stamps: stamps.source,
        stop,
        barrier: Barrier::new(threads + 1),
        abort: AtomicBool::new(false),
        start_ns: AtomicU64::new(0),
        connect_error: Mutex::new(None),
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
    if failed.is_some() {
        shared.abort.store(true, Ordering::SeqCst);
    }
    shared.barrier.wait(); // 2
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
    shared.start_ns.store(start_ns, Ordering::SeqCst);
    shared.barrier.wait(); // 4: go
    show_progress(config, &rx);
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
    Ok(Report::from_threads(
        config,
        stats,
        prefill_seconds,
        stamp_summary,
    ))
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

/// Prints one line per second once every thread reported that second.
fn show_progress(config: &Config, rx: &mpsc::Receiver<Tick>) {
    let threads = config.threads;
    let mut pending: BTreeMap<u64, (usize, u64, u64, Histogram<u64>)> = BTreeMap::new();
    // A second that overlaps the warm-up is labelled warm-up.
    let warmup_ticks = (config.warmup.as_nanos() as u64).div_ceil(TICK_NS);
    for tick in rx {
        let entry = pending
            .entry(tick.index)
            .or_insert_with(|| (0, 0, 0, new_histogram()));
        entry.0 += 1;
        entry.1 += tick.completed;
        entry.2 += tick.errors;
        entry.3.add(&tick.latency).expect("same bounds");
        if entry.0 == threads
            && let Some((_, completed, errors, latency)) = pending.remove(&tick.index)
            && config.progress
        {
            let p = Percentiles::of(&latency);
            let phase = if tick.index <= warmup_ticks {
                "warm-up"
            } else {
                "run"
            };
            let which = if config.is_open_loop() {
                "corrected"
            } else {
                "service"
            };
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "[{:>4} s] {phase:<7} {:>12.0} ops/s   p50 {:>9.1} µs   p99 {:>9.1} µs ({which})   errors {errors}",
                tick.index,
                completed as f64 * 1e9 / TICK_NS as f64,
                p.p50,
                p.p99
            );
        }
    }
}
