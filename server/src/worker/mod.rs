//! Worker cores: each owns a packet path's queue, its connections and an engine (with its
//! store shard), and busy-polls them.
//!
//! ```text
//! worker (pinned core): loop { poll queue → serve ready connections → engine → send } until stop
//! ```

pub mod kernel;
pub mod tap;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cli::Idle;
use crate::engine::Engine;
use crate::stats;

/// How long a parking worker spins without progress before it waits on its queue.
pub const SPIN_BUDGET: Duration = Duration::from_micros(200);
/// The longest a parked worker sleeps before it looks at the stop flag again.
pub const PARK_MAX: Duration = Duration::from_millis(100);
/// Expired items examined per idle sweep.
const SWEEP_ITEMS: usize = 256;
/// Time between expiry sweeps.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Unix time in whole seconds: the engine's clock.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Pins the calling thread to `cpu` (or to the first CPU it may use). Returns the CPU chosen.
///
/// # Errors
/// When the CPU does not exist or pinning fails.
pub fn pin(cpu: Option<usize>) -> Result<usize, String> {
    let cores = core_affinity::get_core_ids().ok_or("cannot list the CPUs this process may use")?;
    let core = match cpu {
        Some(id) => cores
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| format!("CPU {id} is not available to this process"))?,
        None => *cores.first().ok_or("no CPU available")?,
    };
    if core_affinity::set_for_current(core) {
        Ok(core.id)
    } else {
        Err(format!("pinning to CPU {} failed", core.id))
    }
}

/// The idle policy's state: when a parking worker may block, and for how long.
pub struct IdleState {
    policy: Idle,
    last_progress: Instant,
    last_sweep: Instant,
}

impl IdleState {
    /// A fresh state for `policy`.
    pub fn new(policy: Idle) -> Self {
        let now = Instant::now();
        IdleState {
            policy,
            last_progress: now,
            last_sweep: now,
        }
    }

    /// Records one loop iteration; returns how long the worker may block on its queue now
    /// (`None`: do not block).
    pub fn after_iteration(&mut self, progress: bool) -> Option<Duration> {
        let now = Instant::now();
        if progress {
            self.last_progress = now;
            return None;
        }
        match self.policy {
            Idle::Spin => None,
            Idle::Park if now.duration_since(self.last_progress) >= SPIN_BUDGET => Some(PARK_MAX),
            Idle::Park => None,
        }
    }

    /// Runs a bounded expiry sweep when one is due.
    pub fn maybe_sweep(&mut self, engine: &mut Engine, now_unix: u64) {
        let now = Instant::now();
        if now.duration_since(self.last_sweep) >= SWEEP_EVERY {
            self.last_sweep = now;
            engine.sweep_expired(SWEEP_ITEMS, now_unix);
        }
    }
}

/// A stop flag set by SIGINT and SIGTERM.
///
/// # Errors
/// When the handlers cannot be installed.
pub fn stop_on_signals() -> std::io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// True once a stop was requested.
pub fn stopping(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed)
}

/// Writes the final statistics to stderr, one `STAT name value` line each.
pub fn report_final(engine: &Engine) {
    let snapshot = engine.snapshot();
    let mut text = String::from("memspin stopped; final stats:\n");
    stats::general(&snapshot, unix_now(), |name, value| {
        text.push_str(&format!("STAT {name} {value}\n"));
    });
    eprint!("{text}");
}

/// Raises the open-file limit so `conn_limit` clients fit (as memcached does for `-c`).
///
/// # Errors
/// When the hard limit is too low; the message says which limit to raise.
pub fn raise_fd_limit(conn_limit: usize) -> Result<(), String> {
    let wanted = conn_limit as u64 + 64;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid struct to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    if limit.rlim_cur >= wanted {
        return Ok(());
    }
    limit.rlim_cur = wanted.min(limit.rlim_max);
    // SAFETY: setrlimit with a valid struct, soft limit within the hard limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
    }
    if limit.rlim_cur < wanted {
        return Err(format!(
            "-c {conn_limit} needs {wanted} open files but the hard limit is {} (raise `ulimit -Hn`)",
            limit.rlim_max
        ));
    }
    Ok(())
}
