//! Worker cores: each owns a packet path's queue, its connections and an engine (with its
//! store shard), and busy-polls them.
//!
//! ```text
//! worker i (pinned core): loop {
//!     poll queue i → each connection with work takes a turn → engine (keys of shard i here;
//!     others forwarded) → mesh: send forwarded batches, execute other workers' requests,
//!     deliver their replies → send
//! } until stop
//! ```
//!
//! Where each part lives:
//! - `supervise`: starting the workers ([`spawn`]), signals, the doorbell, the stop grace,
//!   pinning and the open-file limit;
//! - `turn`: one connection's turn, written once over a `Socket` trait both kinds of socket
//!   implement;
//! - `smoltcp`: the loop of the TAP (`tap`) and AF_XDP (`xdp`) paths and the table both
//!   build; `kernel`: the loop on kernel sockets and epoll;
//! - `mesh`: forwarding between workers; `idle`: when a worker may sleep.

#[cfg(debug_assertions)]
pub mod failpoint;
pub mod idle;
pub mod kernel;
pub mod mesh;
pub mod smoltcp;
mod supervise;
pub mod tap;
pub mod turn;
pub mod xdp;

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use store::Now;

use crate::stats::WorkerFigures;
pub use idle::{Activity, IdleState, PARK_MAX, SPIN_BUDGET};
pub use supervise::{
    Plan, STOP_GRACE, WorkerResult, cpus_for, pin, raise_fd_limit, report_final, spawn,
    stop_on_signals, stopping,
};

/// Unix time in whole seconds: the engine's clock.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A worker's clock, read once per loop iteration: a clock read costs as much as a small
/// request, so the engine's time, smoltcp's timestamps and the idle policy share one read.
#[derive(Debug, Clone, Copy)]
pub struct LoopClock {
    start: Instant,
    start_unix_micros: u64,
}

/// One reading of a [`LoopClock`].
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    /// Monotonic time.
    pub at: Instant,
    /// Unix time to the millisecond (the start's wall-clock time plus monotonic time since),
    /// for the engine.
    pub now: Now,
    /// The same instant as smoltcp counts it (microseconds since the unix epoch).
    pub net: netstack::smoltcp::time::Instant,
}

impl LoopClock {
    /// A clock anchored to the wall clock now.
    pub fn new() -> LoopClock {
        let start_unix_micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        LoopClock {
            start: Instant::now(),
            start_unix_micros,
        }
    }

    /// Reads the clock once.
    pub fn tick(&self) -> Tick {
        let at = Instant::now();
        let micros = self.start_unix_micros + at.duration_since(self.start).as_micros() as u64;
        Tick {
            at,
            now: Now::from_millis(micros / 1000),
            net: netstack::smoltcp::time::Instant::from_micros(micros as i64),
        }
    }
}

impl Default for LoopClock {
    fn default() -> Self {
        LoopClock::new()
    }
}

/// What a worker's loop counts for `stats workers`: each iteration's time goes to busy or idle
/// by whether it found work (a parked wait counts as idle).
#[derive(Debug)]
pub struct LoopMeter {
    last: Instant,
    progress: bool,
}

impl LoopMeter {
    /// A meter whose first iteration starts at `at`.
    pub fn new(at: Instant) -> LoopMeter {
        LoopMeter {
            last: at,
            progress: false,
        }
    }

    /// An iteration starts at `at`: the previous one (from the last call) is counted.
    pub fn tick(&mut self, at: Instant, figures: &mut WorkerFigures) {
        let ns = at.saturating_duration_since(self.last).as_nanos() as u64;
        self.last = at;
        figures.polls += 1;
        if self.progress {
            figures.busy_ns += ns;
            figures.polls_with_work += 1;
        } else {
            figures.idle_ns += ns;
        }
    }

    /// Whether the iteration that started at the last tick found work.
    pub fn done(&mut self, progress: bool) {
        self.progress = progress;
    }
}

/// The loop's clock reading as the engine and the latency instrument take it.
#[derive(Debug, Clone, Copy)]
pub struct Time {
    /// Unix time to the millisecond, for the engine.
    pub now: Now,
    /// [`crate::control::monotonic_ns`] of the same instant: when bytes read now arrived.
    pub ns: u64,
}
