//! The idle policy: what a worker does when a loop iteration leaves it without work.
//!
//! ```text
//! loop iteration ─▶ Activity ─▶ IdleState::after ─▶ None: poll again (spin)
//!                                                └▶ Some(limit): sleep on the queue's fd and the
//!                                                   mesh's eventfd (never past the next timer)
//! ```
//!
//! - `spin`: never sleeps. The lowest latency, one whole core per worker: for dedicated boxes.
//! - `park`: sleeps after [`SPIN_BUDGET`] without work. Under a steady trickle of requests
//!   (one every 20 µs is 50,000/s) it never reaches the budget and burns a core all the same.
//! - `adaptive` (the default over TAP): sleeps whenever waiting for the next arrival is
//!   expected to cost more CPU spinning than a sleep and a wake-up cost, learning where that
//!   point lies from the recent gaps between arrivals.
//!
//! **Adaptive, in detail.** Each time work arrives after the worker ran out of it, the gap
//! (from the end of the last work to the arrival) is kept; the last [`GAP_SAMPLES`] gaps stand
//! for what comes next. A worker that spins for a window `W` before sleeping pays, per gap `g`,
//! `min(g, W)` of spinning, plus what the sleep costs when `g > W`: the wake-up cost `C`, or,
//! when the rest of the wait `g - W` is shorter than that, only the wait and the system call
//! ([`SLEEP_FLOOR`]): a sleep whose frame is already queued, or comes during the call, returns
//! before the thread leaves its CPU. (Over TAP that case is common: a peer's kernel that
//! answers a frame at once, a duplicate's D-SACK or a new connection's quick ACKs, does it
//! inside the worker's own write, so the answer is queued when the write returns. Charged a
//! whole wake-up, those near-zero gaps would make spinning after every reply look cheaper
//! than it is.) The spin window is the `W` that minimises the sum of those costs over the kept gaps, recomputed every
//! [`RELEARN_EVERY`] gaps: `0` (sleep as soon as the queue is found empty) when most gaps are
//! longer than a wake-up costs, the length of a cluster of short gaps when arrivals come in
//! bursts (the window then covers the burst and the worker sleeps between bursts), and the
//! longest gap seen when every gap is shorter than a wake-up (a saturated worker spins). For
//! arrivals without memory (Poisson, as an open-loop generator makes them) the expected wait
//! does not shrink with the time spent waiting, and the rule reduces to "sleep at once if the
//! mean gap exceeds `C`, else spin", the optimum for such arrivals; for ordinary traffic it is
//! the offline optimum of the recent past. Before [`GAP_SAMPLES`] gaps are known, the window
//! is `C` itself: spinning as long as a wake-up costs never pays more than twice the best
//! choice, whatever the arrivals (the ski-rental bound).
//!
//! `C` is the CPU time a sleep and its wake-up take on the worker's thread (the system call,
//! leaving the CPU and being scheduled again), measured: the worker reads its thread's CPU
//! clock around one sleep in [`WAKE_SAMPLE_EVERY`] and feeds the figure to
//! [`IdleState::record_wake_cost`], which keeps a moving average (starting from
//! [`WAKE_COST_DEFAULT`], bounded to [`WAKE_COST_MIN`]..=[`WAKE_COST_MAX`]). What the policy
//! minimises is the worker's own CPU time, which is what `/proc/PID/stat` charges it; the
//! latency a sleep adds (the scheduler's wake-up, longer on a virtual machine) is not weighed, so a latency-bound deployment on its own cores keeps `--idle spin`.
//!
//! A sleep ends at once when a frame arrives (the TAP fd or the AF_XDP socket becomes
//! readable), when another worker sends forwarded work (its eventfd), when the connection
//! table's next timer is due, or after [`PARK_MAX`] (to look at the stop flag). The worker
//! reads the time; this module only does arithmetic on the instants it is given.

use std::time::{Duration, Instant};

use crate::cli::Idle;
use crate::engine::Engine;

use super::Tick;

/// How long a parking worker (`--idle park`) spins without progress before it waits on its
/// queue.
pub const SPIN_BUDGET: Duration = Duration::from_micros(200);
/// The longest a sleeping worker sleeps before it looks at the stop flag again.
pub const PARK_MAX: Duration = Duration::from_millis(100);
/// Expired items examined per idle sweep.
const SWEEP_ITEMS: usize = 256;
/// Time between expiry sweeps.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Gaps between arrivals the adaptive policy learns its window from.
pub const GAP_SAMPLES: usize = 64;
/// New gaps between two recomputations of the window.
pub const RELEARN_EVERY: usize = 16;
/// The wake-up cost assumed before one is measured.
pub const WAKE_COST_DEFAULT: Duration = Duration::from_micros(5);
/// Lowest wake-up cost the policy believes (a measurement below is an artefact).
pub const WAKE_COST_MIN: Duration = Duration::from_micros(1);
/// Highest wake-up cost the policy believes (a measurement above had the thread preempted).
pub const WAKE_COST_MAX: Duration = Duration::from_micros(100);
/// One sleep in this many has its CPU cost measured.
pub const WAKE_SAMPLE_EVERY: u32 = 32;
/// A gap longer than this counts as this long (it decides nothing more, and fits 32 bits).
const GAP_MAX_NANOS: u64 = 1 << 31;
/// What a sleep costs beyond the wait itself when it ends before the thread leaves its CPU
/// (the frame is already queued, or comes during the system call): the `poll(2)` call.
pub const SLEEP_FLOOR: Duration = Duration::from_micros(1);

/// What one loop iteration did, as the idle policy needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Nothing to do: no frame, no connection with work, nothing from other workers.
    Idle,
    /// Work done, and more may be waiting (the queue was not found empty, or work was left
    /// for the next iteration): poll again.
    Worked,
    /// Work done and none left: the queue was found empty and nothing waits for another
    /// iteration. The worker may sleep now without polling its queue once more.
    Drained,
}

/// Recent gaps between arrivals, and the spin window they make cheapest.
#[derive(Debug, Clone)]
struct Gaps {
    /// The last [`GAP_SAMPLES`] gaps in nanoseconds (a ring; `len` of them valid).
    nanos: [u32; GAP_SAMPLES],
    next: usize,
    len: usize,
    /// Gaps added since the window was last computed.
    fresh: usize,
    /// The window, once enough gaps are known.
    window: Option<Duration>,
}

impl Gaps {
    fn new() -> Gaps {
        Gaps {
            nanos: [0; GAP_SAMPLES],
            next: 0,
            len: 0,
            fresh: 0,
            window: None,
        }
    }

    fn record(&mut self, gap: Duration, wake_cost: Duration) {
        let nanos = u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX);
        // At most GAP_MAX_NANOS (2^31), so it fits.
        self.nanos[self.next] = nanos.min(GAP_MAX_NANOS) as u32;
        self.next = (self.next + 1) % GAP_SAMPLES;
        self.len = (self.len + 1).min(GAP_SAMPLES);
        self.fresh += 1;
        if self.len == GAP_SAMPLES && (self.window.is_none() || self.fresh >= RELEARN_EVERY) {
            self.fresh = 0;
            self.window = Some(best_window(&self.nanos, wake_cost));
        }
    }
}

/// The spin window that minimises the CPU spent waiting over `gaps` (nanoseconds): each gap
/// `g` costs `g` when it is at most the window `W` (spun through), else `W` of spinning and
/// then the sleep: `min(g - W + SLEEP_FLOOR, wake_cost)` (a short rest of the wait ends the
/// sleep before the thread leaves its CPU). The windows tried are `0` and each gap; ties go
/// to the shorter window.
fn best_window(gaps: &[u32], wake_cost: Duration) -> Duration {
    let mut sorted = [0u32; GAP_SAMPLES];
    let n = gaps.len().min(GAP_SAMPLES);
    sorted[..n].copy_from_slice(&gaps[..n]);
    let sorted = &mut sorted[..n];
    sorted.sort_unstable();
    // prefix[i]: the sum of the i shortest gaps.
    let mut prefix = [0u64; GAP_SAMPLES + 1];
    for (i, &gap) in sorted.iter().enumerate() {
        prefix[i + 1] = prefix[i] + u64::from(gap);
    }
    let wake = u64::try_from(wake_cost.as_nanos()).unwrap_or(u64::MAX);
    let floor = SLEEP_FLOOR.as_nanos() as u64;
    let cost = |window: u64| -> u64 {
        // Gaps up to the window are spun through.
        let spun = sorted.partition_point(|&g| u64::from(g) <= window);
        // The others spin the window and sleep; a sleep whose rest of the wait plus the
        // floor is under a wake-up costs that (gap + floor), from this index on a wake-up.
        let dear_from = window.saturating_add(wake.saturating_sub(floor));
        let cheap_end = spun + sorted[spun..].partition_point(|&g| u64::from(g) < dear_from);
        let cheap = (cheap_end - spun) as u64;
        let dear = (n - cheap_end) as u64;
        prefix[spun]
            .saturating_add(prefix[cheap_end] - prefix[spun])
            .saturating_add(cheap.saturating_mul(floor))
            .saturating_add(dear.saturating_mul(window.saturating_add(wake)))
    };
    let mut best = (cost(0), 0u64);
    for &gap in sorted.iter() {
        let window = u64::from(gap);
        let c = cost(window);
        if c < best.0 {
            best = (c, window);
        }
    }
    Duration::from_nanos(best.1)
}

/// The idle policy's state: when a worker may sleep, and for how long; and the expiry sweep.
#[derive(Debug, Clone)]
pub struct IdleState {
    policy: Idle,
    /// When the last iteration with work ran (its end, for adaptive).
    last_work: Instant,
    /// True once the worker ran out of work since `last_work`: the next work is an arrival.
    waiting: bool,
    last_sweep: Instant,
    /// How long until the engine's background work is due (`None`: none pending), as
    /// [`IdleState::maybe_sweep`] last found: a sleep ends by then.
    background: Option<Duration>,
    gaps: Gaps,
    wake_cost: Duration,
    sleeps: u32,
    stats: IdleStats,
}

/// Counters of one worker's idle policy, for the exit report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdleStats {
    /// Sleeps the policy allowed.
    pub sleeps: u64,
    /// Of those, sleeps right after work, without another empty poll ([`Activity::Drained`]).
    pub sleeps_drained: u64,
    /// Gaps between arrivals recorded.
    pub gaps: u64,
}

impl IdleState {
    /// A fresh state for `policy` at `now`.
    pub fn new(policy: Idle, now: Instant) -> Self {
        IdleState {
            policy,
            last_work: now,
            waiting: false,
            last_sweep: now,
            background: None,
            gaps: Gaps::new(),
            wake_cost: WAKE_COST_DEFAULT,
            sleeps: 0,
            stats: IdleStats::default(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> Idle {
        self.policy
    }

    /// Records one loop iteration that began at `started` and ended at `ended`; returns how
    /// long the worker may sleep on its queue now (`None`: do not sleep; poll again).
    pub fn after_iteration(
        &mut self,
        progress: bool,
        started: Instant,
        ended: Instant,
    ) -> Option<Duration> {
        self.after(
            if progress {
                Activity::Worked
            } else {
                Activity::Idle
            },
            started,
            ended,
        )
    }

    /// Records what one loop iteration did, from `started` (when it began to look for work)
    /// to `ended`; returns how long the worker may sleep on its queue now (`None`: do not
    /// sleep; poll again).
    ///
    /// An arrival's gap ends when the iteration that found it started, not when the work it
    /// brought was done: counted to the end, every gap carried the work of the batch that ended
    /// it, and a saturated worker (32 x 16 pipelined over TAP: batches of tens of
    /// microseconds, the generator's turnaround a few) learned gaps longer than a wake-up and
    /// slept after every batch, 9 % of its samples, its throughput down by a quarter.
    pub fn after(
        &mut self,
        activity: Activity,
        started: Instant,
        ended: Instant,
    ) -> Option<Duration> {
        let now = ended;
        match activity {
            Activity::Worked | Activity::Drained => {
                if self.waiting {
                    self.gaps.record(
                        started.saturating_duration_since(self.last_work),
                        self.wake_cost,
                    );
                    self.stats.gaps += 1;
                }
                self.last_work = now;
                self.waiting = activity == Activity::Drained;
            }
            Activity::Idle => self.waiting = true,
        }
        let idle_for = now.saturating_duration_since(self.last_work);
        let sleep = match (self.policy, activity) {
            (Idle::Spin, _) | (_, Activity::Worked) => false,
            (Idle::Park, Activity::Drained) => false,
            (Idle::Park, Activity::Idle) => idle_for >= SPIN_BUDGET,
            (Idle::Adaptive, Activity::Drained) => self.window().is_zero(),
            (Idle::Adaptive, Activity::Idle) => idle_for >= self.window(),
        };
        // Not past the engine's next background step (a paused crawl).
        let limit = self.background.map_or(PARK_MAX, |due| due.min(PARK_MAX));
        if !sleep || limit.is_zero() {
            return None;
        }
        self.stats.sleeps += 1;
        if activity == Activity::Drained {
            self.stats.sleeps_drained += 1;
        }
        Some(limit)
    }

    /// The adaptive policy's spin window now: learned from the recent gaps, or the wake-up
    /// cost until enough are known.
    pub fn window(&self) -> Duration {
        self.gaps.window.unwrap_or(self.wake_cost)
    }

    /// The wake-up cost the policy assumes now.
    pub fn wake_cost(&self) -> Duration {
        self.wake_cost
    }

    /// True if the sleep about to start should have its CPU cost measured (one in
    /// [`WAKE_SAMPLE_EVERY`], adaptive only).
    pub fn sample_sleep(&mut self) -> bool {
        if self.policy != Idle::Adaptive {
            return false;
        }
        self.sleeps = self.sleeps.wrapping_add(1);
        self.sleeps % WAKE_SAMPLE_EVERY == 1
    }

    /// Runs `sleep`; if it is `sampled` ([`IdleState::sample_sleep`]), reads the thread's CPU
    /// time with `cpu_time` before and after it and records the difference
    /// ([`IdleState::record_wake_cost`]). The clock is a system call
    /// (`CLOCK_THREAD_CPUTIME_ID` has no vDSO path), so the other sleeps do not read it.
    pub fn measured_sleep<T>(
        &mut self,
        sampled: bool,
        mut cpu_time: impl FnMut() -> Option<Duration>,
        sleep: impl FnOnce() -> T,
    ) -> T {
        let before = if sampled { cpu_time() } else { None };
        let result = sleep();
        if let Some(before) = before
            && let Some(after) = cpu_time()
        {
            self.record_wake_cost(after.saturating_sub(before));
        }
        result
    }

    /// Records the CPU time one sleep and its wake-up took on the worker's thread: the
    /// wake-up cost moves an eighth of the way towards it (a value outside
    /// [`WAKE_COST_MIN`]..=[`WAKE_COST_MAX`] is clamped first).
    pub fn record_wake_cost(&mut self, cpu: Duration) {
        let sample = cpu.clamp(WAKE_COST_MIN, WAKE_COST_MAX);
        let old = self.wake_cost.as_nanos() as i128;
        let new = old + (sample.as_nanos() as i128 - old) / 8;
        self.wake_cost = Duration::from_nanos(u64::try_from(new.max(0)).unwrap_or(u64::MAX));
    }

    /// The counters.
    pub fn stats(&self) -> IdleStats {
        self.stats
    }

    /// The exit report's line.
    pub fn report(&self) -> String {
        format!(
            "idle {:?}: {:?}, spin window {:?}, wake-up cost {:?}",
            self.policy,
            self.stats,
            self.window(),
            self.wake_cost
        )
    }

    /// Runs a bounded expiry sweep (the background crawler) when one is due, and the engine's
    /// other background work ([`Engine::housekeep`]); notes when more is due, so a sleep ends
    /// in time for it. Returns whether that did work.
    pub fn maybe_sweep(&mut self, engine: &mut Engine, tick: Tick) -> bool {
        if tick.at.duration_since(self.last_sweep) >= SWEEP_EVERY {
            self.last_sweep = tick.at;
            engine.sweep_expired(SWEEP_ITEMS, tick.now);
        }
        let ns = crate::control::monotonic_ns_at(tick.at);
        let worked = engine.housekeep(tick.now, ns);
        self.background = engine.background_wait_ns(ns).map(Duration::from_nanos);
        worked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// One loop iteration that takes no time, at `at`.
    fn step(state: &mut IdleState, activity: Activity, at: Instant) -> Option<Duration> {
        state.after(activity, at, at)
    }

    /// Drives an adaptive state through `gaps` arrivals (each served in one iteration that
    /// drains the queue and takes no time), spinning `US` at a time while it may not sleep;
    /// returns the state and the time reached.
    #[track_caller]
    fn arrivals(state: &mut IdleState, now: Instant, gaps: &[Duration]) -> Instant {
        arrivals_with_work(state, now, gaps, Duration::ZERO)
    }

    /// As [`arrivals`], each arrival's iteration taking `work` (from the arrival on); the next
    /// gap starts when that work ends.
    #[track_caller]
    fn arrivals_with_work(
        state: &mut IdleState,
        mut now: Instant,
        gaps: &[Duration],
        work: Duration,
    ) -> Instant {
        let mut asleep = false;
        for &gap in gaps {
            let arrival = now + gap;
            let mut at = now;
            // Empty iterations until the arrival, unless asleep (until the arrival wakes it).
            while !asleep {
                at += US;
                if at >= arrival {
                    break;
                }
                asleep = step(state, Activity::Idle, at).is_some();
            }
            now = arrival + work;
            asleep = state.after(Activity::Drained, arrival, now).is_some();
        }
        now
    }

    #[test]
    fn spin_never_sleeps() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Spin, t0);
        for i in 0..1000 {
            assert_eq!(step(&mut s, Activity::Idle, t0 + US * i), None);
        }
        assert_eq!(
            step(&mut s, Activity::Drained, t0 + Duration::from_secs(1)),
            None
        );
    }

    #[test]
    fn park_sleeps_after_its_budget_only() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Park, t0);
        assert_eq!(
            step(&mut s, Activity::Drained, t0),
            None,
            "park never skips the budget"
        );
        assert_eq!(step(&mut s, Activity::Idle, t0 + SPIN_BUDGET - US), None);
        assert_eq!(
            step(&mut s, Activity::Idle, t0 + SPIN_BUDGET),
            Some(PARK_MAX)
        );
        // Work resets the budget.
        let t1 = t0 + SPIN_BUDGET * 2;
        assert_eq!(step(&mut s, Activity::Worked, t1), None);
        assert_eq!(step(&mut s, Activity::Idle, t1 + SPIN_BUDGET / 2), None);
    }

    // The reason this policy exists: at 50,000 requests/s (a gap of 20 µs, never 200 µs),
    // `park` never sleeps.
    #[test]
    fn park_never_sleeps_at_50k_per_second_and_adaptive_does() {
        let t0 = Instant::now();
        let gaps = vec![Duration::from_micros(20); 500];
        let mut park = IdleState::new(Idle::Park, t0);
        arrivals(&mut park, t0, &gaps);
        assert_eq!(park.stats().sleeps, 0);
        let mut adaptive = IdleState::new(Idle::Adaptive, t0);
        arrivals(&mut adaptive, t0, &gaps);
        assert_eq!(
            adaptive.window(),
            Duration::ZERO,
            "20 µs gaps > a 5 µs wake-up"
        );
        assert!(adaptive.stats().sleeps >= 490, "{:?}", adaptive.stats());
        assert!(
            adaptive.stats().sleeps_drained >= 400,
            "{:?}",
            adaptive.stats()
        );
    }

    #[test]
    fn before_enough_gaps_the_window_is_the_wake_up_cost() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        assert_eq!(s.window(), WAKE_COST_DEFAULT);
        assert_eq!(
            step(&mut s, Activity::Drained, t0),
            None,
            "the window is not zero yet"
        );
        assert_eq!(
            step(&mut s, Activity::Idle, t0 + WAKE_COST_DEFAULT - US),
            None
        );
        assert_eq!(
            step(&mut s, Activity::Idle, t0 + WAKE_COST_DEFAULT),
            Some(PARK_MAX)
        );
    }

    #[test]
    fn short_gaps_make_it_spin() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        let gaps = vec![Duration::from_micros(2); GAP_SAMPLES * 2];
        let end = arrivals(&mut s, t0, &gaps);
        assert_eq!(s.window(), Duration::from_micros(2));
        assert_eq!(step(&mut s, Activity::Drained, end), None);
        assert_eq!(step(&mut s, Activity::Idle, end + US), None);
    }

    // Before: a gap ran to the end of the iteration that found the arrival, so it carried
    // that iteration's work. A saturated worker whose batches take longer than a wake-up
    // (pipelined 32 x 16 over TAP) learned long gaps and slept after every batch.
    #[test]
    fn the_work_an_arrival_brings_is_not_part_of_its_gap() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        let gaps = vec![Duration::from_micros(2); GAP_SAMPLES * 2];
        let end = arrivals_with_work(&mut s, t0, &gaps, Duration::from_micros(30));
        assert_eq!(s.window(), Duration::from_micros(2));
        assert_eq!(s.stats().sleeps, 0, "{:?}", s.stats());
        assert_eq!(step(&mut s, Activity::Drained, end), None);
    }

    #[test]
    fn bursts_are_spun_through_and_the_pauses_slept() {
        // Bursts of 4 arrivals 1 µs apart, 100 µs between bursts: spin 1 µs, sleep between.
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        let mut gaps = Vec::new();
        for _ in 0..GAP_SAMPLES {
            gaps.extend([Duration::from_micros(100), US, US, US]);
        }
        arrivals(&mut s, t0, &gaps);
        assert_eq!(s.window(), US);
    }

    #[test]
    fn the_window_follows_a_change_of_load() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        let end = arrivals(&mut s, t0, &vec![Duration::from_micros(2); GAP_SAMPLES]);
        assert_eq!(s.window(), Duration::from_micros(2));
        // The load drops: gaps of 50 µs.
        arrivals(&mut s, end, &vec![Duration::from_micros(50); GAP_SAMPLES]);
        assert_eq!(s.window(), Duration::ZERO);
    }

    #[test]
    fn best_window_minimises_the_cost() {
        let c = Duration::from_micros(10);
        // All gaps above the wake-up cost: sleep at once.
        assert_eq!(best_window(&[20_000, 30_000, 40_000], c), Duration::ZERO);
        // All below: spin through the longest.
        assert_eq!(
            best_window(&[2_000, 3_000, 4_000], c),
            Duration::from_nanos(4_000)
        );
        // Half 3 µs, half 1 ms: sleeping at once costs each 3 µs gap its wait and the floor
        // (4 µs) and each 1 ms gap a wake-up, 4 + 4 + 10 + 10 = 28 µs, less than spinning
        // 3 µs first (3 + 3 + 2 × (3 + 10) = 32 µs) or spinning through (2,006 µs).
        assert_eq!(
            best_window(&[3_000, 1_000_000, 3_000, 1_000_000], c),
            Duration::ZERO
        );
        // Bursts of three 1 µs gaps after each 1 ms one: spin 1 µs (3 + 11 = 14 per burst)
        // rather than sleep (3 × 2 + 10 = 16).
        assert_eq!(
            best_window(&[1_000, 1_000, 1_000, 1_000_000], c),
            Duration::from_nanos(1_000)
        );
        // Brute force agrees on a mixed sample.
        let gaps: Vec<u32> = (0..GAP_SAMPLES as u32)
            .map(|i| (i * 7919 % 97) * 300)
            .collect();
        let floor = SLEEP_FLOOR.as_nanos() as u64;
        let cost = |w: u64| -> u64 {
            gaps.iter()
                .map(|&g| {
                    let g = u64::from(g);
                    if g <= w {
                        g
                    } else {
                        w + (g - w + floor).min(10_000)
                    }
                })
                .sum()
        };
        let best = best_window(&gaps, c).as_nanos() as u64;
        for &w in gaps
            .iter()
            .map(|g| u64::from(*g))
            .collect::<Vec<_>>()
            .iter()
        {
            assert!(cost(best) <= cost(w), "window {best} costs more than {w}");
        }
        assert!(cost(best) <= cost(0));
    }

    // Before: a sleep was charged a whole wake-up however soon it ended. Over TAP a probe's
    // D-SACK (or any answer the peer's kernel sends at once) is queued by the time the
    // worker's write returns, so one near-zero gap in three taught it to spin a microsecond
    // or more after every reply, where sleeping at once costs a `poll` that returns at once.
    #[test]
    fn answers_already_queued_do_not_make_it_spin() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        for _ in 0..100 {
            s.record_wake_cost(Duration::from_micros(15));
        }
        let mut gaps = Vec::new();
        for _ in 0..GAP_SAMPLES {
            gaps.extend([Duration::from_micros(100), Duration::from_micros(100), US]);
        }
        arrivals(&mut s, t0, &gaps);
        assert_eq!(s.window(), Duration::ZERO);
    }

    #[test]
    fn the_wake_up_cost_is_learned_and_bounded() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        for _ in 0..100 {
            s.record_wake_cost(Duration::from_micros(20));
        }
        let learned = s.wake_cost();
        assert!(
            learned > Duration::from_micros(19) && learned <= Duration::from_micros(20),
            "{learned:?}"
        );
        for _ in 0..100 {
            s.record_wake_cost(Duration::from_secs(1));
        }
        assert!(s.wake_cost() <= WAKE_COST_MAX);
        for _ in 0..100 {
            s.record_wake_cost(Duration::ZERO);
        }
        assert!(s.wake_cost() >= WAKE_COST_MIN);
        // A dearer wake-up makes spinning through 20 µs gaps the better choice.
        let mut s = IdleState::new(Idle::Adaptive, t0);
        for _ in 0..100 {
            s.record_wake_cost(Duration::from_micros(50));
        }
        arrivals(&mut s, t0, &vec![Duration::from_micros(20); GAP_SAMPLES]);
        assert_eq!(s.window(), Duration::from_micros(20));
    }

    #[test]
    fn sleeps_are_sampled_one_in_n_and_only_when_adaptive() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        let sampled = (0..WAKE_SAMPLE_EVERY * 4)
            .filter(|_| s.sample_sleep())
            .count();
        assert_eq!(sampled, 4);
        let mut park = IdleState::new(Idle::Park, t0);
        assert!(!(0..100).any(|_| park.sample_sleep()));
    }

    // Before: the loop read the thread's CPU clock after every sleep, sampled or not, a
    // system call per sleep (0.7 per request at 10,000/s over TAP) for one sleep in 32.
    #[test]
    fn only_sampled_sleeps_read_the_cpu_clock() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        let mut reads = 0u32;
        let mut cpu = Duration::ZERO;
        for _ in 0..WAKE_SAMPLE_EVERY * 4 {
            let sampled = s.sample_sleep();
            let slept = s.measured_sleep(
                sampled,
                || {
                    reads += 1;
                    cpu += Duration::from_micros(10);
                    Some(cpu)
                },
                || 7,
            );
            assert_eq!(slept, 7);
        }
        assert_eq!(reads, 8, "two reads per sampled sleep, four sampled");
        assert!(s.wake_cost() > WAKE_COST_DEFAULT, "{:?}", s.wake_cost());
        let mut park = IdleState::new(Idle::Park, t0);
        let sampled = park.sample_sleep();
        park.measured_sleep(
            sampled,
            || -> Option<Duration> { panic!("park measures nothing") },
            || (),
        );
    }

    #[test]
    fn huge_gaps_do_not_overflow() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        arrivals(&mut s, t0, &vec![Duration::from_secs(3600); GAP_SAMPLES]);
        assert_eq!(s.window(), Duration::ZERO);
    }

    #[test]
    fn worked_iterations_are_not_gaps() {
        let t0 = Instant::now();
        let mut s = IdleState::new(Idle::Adaptive, t0);
        for i in 0..100 {
            assert_eq!(step(&mut s, Activity::Worked, t0 + US * i), None);
        }
        assert_eq!(s.stats().gaps, 0);
        step(&mut s, Activity::Idle, t0 + US * 100);
        step(&mut s, Activity::Worked, t0 + US * 103);
        assert_eq!(s.stats().gaps, 1);
    }

    // Regression guard: a crawl paused by `lru_crawler sleep` on an idle worker went on only
    // when the worker woke on its own (every 100 ms): a sleep now ends when the next step is
    // due, and does not start while a lowered budget is being reached.
    #[test]
    fn a_sleep_ends_when_the_engines_background_work_is_due() {
        let mut engine = crate::engine::tests::engine();
        let clock = super::super::LoopClock::new();
        let tick = clock.tick();
        let mut s = IdleState::new(Idle::Park, tick.at);
        s.maybe_sweep(&mut engine, tick);
        let idle = tick.at + SPIN_BUDGET;
        assert_eq!(
            step(&mut s, Activity::Idle, idle),
            Some(PARK_MAX),
            "nothing due"
        );
        let control = engine.control().clone();
        control.crawler.set_sleep_us(20_000);
        // More items than one step looks at.
        let mut requests = String::new();
        for i in 0..2 * crate::engine::HOUSEKEEPING_ITEMS {
            requests.push_str(&format!("set k{i} 0 0 1 noreply\r\nv\r\n"));
        }
        requests.push_str("lru_crawler crawl 1\r\n");
        engine.execute(
            &mut crate::engine::Session::default(),
            requests.as_bytes(),
            &mut Vec::new(),
            tick.now,
        );
        assert!(s.maybe_sweep(&mut engine, tick), "a step now");
        let limit = step(&mut s, Activity::Idle, idle).expect("a sleep");
        assert!(limit <= Duration::from_millis(20), "{limit:?}");
    }
}
