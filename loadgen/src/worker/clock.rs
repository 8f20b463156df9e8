//! The run clock every thread shares, the wall clock that software timestamps read, and
//! [`SpinGuard`], which decides whether a `--idle spin` thread may spin on a core it shares.

use std::time::Instant;

use super::{SHARED_WAIT_NS, SHARED_WINDOW_NS, SPIN_PAUSE_NS};

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
pub(super) fn realtime_ns() -> u64 {
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
