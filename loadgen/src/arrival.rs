//! Open-loop arrival schedules and the statistics that check them.
//!
//! Each thread owns a [`Schedule`] at `rate / threads`; the superposition of independent Poisson
//! processes is a Poisson process at the total rate. The schedule only says *when* a request is
//! due; a request that cannot be sent then keeps its intended time, so generator and connection
//! queueing shows up in the corrected latency.
//!
//! ```text
//! Schedule (intended times) → backlog → free connection slot → send (actual time)
//! ```

use rand::{SeedableRng, rngs::SmallRng};
use rand_distr::{Distribution, Exp1};
use serde::Serialize;

/// How open-loop arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalKind {
    /// Exponential gaps (a Poisson process): the default, and what real clients look like.
    Poisson,
    /// Evenly spaced arrivals, `1 / rate` apart.
    Uniform,
}

impl ArrivalKind {
    /// The CLI spelling.
    pub const fn name(self) -> &'static str {
        match self {
            ArrivalKind::Poisson => "poisson",
            ArrivalKind::Uniform => "uniform",
        }
    }
}

/// A seeded, endless sequence of intended send times (nanoseconds on the run clock).
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: ArrivalKind,
    mean_gap_ns: f64,
    next_ns: f64,
    rng: SmallRng,
}

impl Schedule {
    /// A schedule of `rate_per_sec` arrivals per second starting after `start_ns`.
    ///
    /// `phase` in `[0, 1)` offsets a uniform schedule by that fraction of a gap, so that several
    /// uniform threads interleave instead of firing together; Poisson schedules ignore it.
    ///
    /// # Panics
    /// If `rate_per_sec` is not positive and finite (the CLI rejects such rates).
    pub fn new(
        kind: ArrivalKind,
        rate_per_sec: f64,
        start_ns: u64,
        phase: f64,
        seed: u64,
    ) -> Schedule {
        assert!(
            rate_per_sec.is_finite() && rate_per_sec > 0.0,
            "arrival rate must be positive"
        );
        let mean_gap_ns = 1e9 / rate_per_sec;
        let mut s = Schedule {
            kind,
            mean_gap_ns,
            next_ns: start_ns as f64,
            rng: SmallRng::seed_from_u64(seed),
        };
        s.next_ns += match kind {
            ArrivalKind::Poisson => s.gap(),
            ArrivalKind::Uniform => phase.clamp(0.0, 1.0) * mean_gap_ns,
        };
        s
    }

    fn gap(&mut self) -> f64 {
        match self.kind {
            ArrivalKind::Poisson => {
                let e: f64 = Exp1.sample(&mut self.rng);
                e * self.mean_gap_ns
            }
            ArrivalKind::Uniform => self.mean_gap_ns,
        }
    }

    /// The next intended send time, without consuming it.
    #[inline]
    pub fn peek_ns(&self) -> u64 {
        self.next_ns as u64
    }

    /// Consumes and returns the next intended send time.
    #[inline]
    pub fn advance(&mut self) -> u64 {
        let now = self.peek_ns();
        self.next_ns += self.gap();
        now
    }

    /// Mean gap between arrivals, ns.
    pub fn mean_gap_ns(&self) -> f64 {
        self.mean_gap_ns
    }
}

/// Kolmogorov–Smirnov statistic of `samples` against the exponential distribution with the
/// given `mean` (the largest distance between the empirical and the exponential CDF).
///
/// Sorts `samples` in place. Returns 0 for an empty slice.
pub fn ks_exponential(samples: &mut [f64], mean: f64) -> f64 {
    if samples.is_empty() || mean.is_nan() || mean <= 0.0 {
        return 0.0;
    }
    samples.sort_unstable_by(f64::total_cmp);
    let n = samples.len() as f64;
    let mut d: f64 = 0.0;
    for (i, &x) in samples.iter().enumerate() {
        let cdf = 1.0 - (-x.max(0.0) / mean).exp();
        let below = i as f64 / n;
        let above = (i + 1) as f64 / n;
        d = d.max((cdf - below).abs()).max((above - cdf).abs());
    }
    d
}

/// The one-sided KS statistic D⁺ of `samples` (sorted ascending) against the exponential
/// distribution with the given `mean`: how far the empirical CDF rises above the exponential
/// one, i.e. the excess of short gaps, judged at gap lengths of at least `resolution` (0: at
/// every length). Bunched sends (bursts) raise it; sends that cannot come closer than some
/// floor lower the empirical CDF instead and leave it near 0. Below the resolution, a gap's
/// length is the sender's timing jitter rather than the schedule's: a send a few µs late
/// followed by one on time makes a short gap although nothing was held back.
pub fn ks_excess_short(sorted: &[f64], mean: f64, resolution: f64) -> f64 {
    if sorted.is_empty() || mean.is_nan() || mean <= 0.0 {
        return 0.0;
    }
    let n = sorted.len() as f64;
    sorted
        .iter()
        .enumerate()
        .filter(|&(_, &x)| x >= resolution)
        .map(|(i, &x)| (i + 1) as f64 / n - (1.0 - (-x.max(0.0) / mean).exp()))
        .fold(0.0, f64::max)
}

/// The 5 % critical value of the one-sample KS statistic for `n` samples (asymptotic).
pub fn ks_critical_5pct(n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    1.358 / (n as f64).sqrt()
}

/// The 5 % critical value of a one-sided KS statistic (D⁺ or D⁻) for `n` samples
/// (asymptotic: `sqrt(ln(1/0.05) / 2n)`).
pub fn ks_critical_one_sided_5pct(n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    1.2239 / (n as f64).sqrt()
}

/// Asymptotic p-value of KS statistic `d` for `n` samples (Kolmogorov distribution with
/// Stephens' small-sample correction).
pub fn ks_p_value(d: f64, n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let sn = (n as f64).sqrt();
    let lambda = (sn + 0.12 + 0.11 / sn) * d;
    if lambda < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    for k in 1..=100 {
        let k = f64::from(k);
        let term = (-2.0 * k * k * lambda * lambda).exp();
        sum += if k as u32 % 2 == 1 { term } else { -term };
        if term < 1e-12 {
            break;
        }
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

/// Mean and coefficient of variation (stddev / mean) of `samples`: a Poisson process has
/// exponential gaps with CV 1, an evenly spaced one CV 0.
pub fn mean_and_cv(samples: &[f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let var = samples.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
    (mean, cv)
}

/// What the self-check found about a set of inter-arrival gaps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GapCheck {
    /// Number of gaps examined.
    pub samples: u64,
    /// Their mean, µs.
    pub mean_gap_us: f64,
    /// The mean the schedule asks for, µs.
    pub expected_mean_gap_us: f64,
    /// Coefficient of variation (1 for Poisson, 0 for evenly spaced).
    pub cv: f64,
    /// KS statistic against the exponential distribution with the expected mean.
    pub ks_statistic: f64,
    /// Its 5 % critical value for this many samples.
    pub ks_critical_5pct: f64,
    /// Asymptotic p-value of the statistic.
    pub ks_p_value: f64,
    /// `ks_statistic <= ks_critical_5pct`: the gaps are consistent with a Poisson process.
    pub looks_exponential: bool,
    /// The one-sided KS statistic D⁺: how far the share of gaps up to any length from
    /// `resolution_us` on exceeds the exponential one (more short gaps than Poisson).
    pub ks_excess_short: f64,
    /// The shortest gap length D⁺ is judged at, µs: for the sends, the generator's own send
    /// lag p99 (its timing jitter), at most a quarter of the expected mean gap; 0 for the
    /// schedule.
    pub resolution_us: f64,
    /// Its 5 % critical value for this many samples.
    pub ks_critical_one_sided_5pct: f64,
    /// `ks_excess_short > ks_critical_one_sided_5pct`: more short gaps than a Poisson process
    /// has, i.e. arrivals came in bursts. Gaps that are merely never shorter than some floor
    /// (a send path's cost) fail `looks_exponential` but are not bunched.
    pub bunched: bool,
}

impl GapCheck {
    /// Checks `gaps_ns` (consumed: sorted in place) against exponential gaps of
    /// `expected_mean_ns`, judging bunching at gaps of at least `jitter_ns` (the sender's
    /// timing jitter), or a quarter of the mean if that is less.
    pub fn of(gaps_ns: &mut [f64], expected_mean_ns: f64, jitter_ns: f64) -> GapCheck {
        let (mean, cv) = mean_and_cv(gaps_ns);
        let d = ks_exponential(gaps_ns, expected_mean_ns);
        let crit = ks_critical_5pct(gaps_ns.len());
        let resolution = jitter_ns.clamp(0.0, expected_mean_ns / 4.0);
        let excess = ks_excess_short(gaps_ns, expected_mean_ns, resolution);
        let crit_one_sided = ks_critical_one_sided_5pct(gaps_ns.len());
        GapCheck {
            samples: gaps_ns.len() as u64,
            mean_gap_us: mean / 1_000.0,
            expected_mean_gap_us: expected_mean_ns / 1_000.0,
            cv,
            ks_statistic: d,
            ks_critical_5pct: crit,
            ks_p_value: ks_p_value(d, gaps_ns.len()),
            looks_exponential: !gaps_ns.is_empty() && d <= crit,
            ks_excess_short: excess,
            resolution_us: resolution / 1_000.0,
            ks_critical_one_sided_5pct: crit_one_sided,
            bunched: excess > crit_one_sided,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(kind: ArrivalKind, rate: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut s = Schedule::new(kind, rate, 1_000, 0.0, seed);
        let mut prev = s.advance();
        (0..n)
            .map(|_| {
                let t = s.advance();
                let g = (t - prev) as f64;
                prev = t;
                g
            })
            .collect()
    }

    #[test]
    fn poisson_gaps_have_the_right_mean_and_dispersion() {
        let rate = 50_000.0; // 20 µs mean gap
        let g = gaps(ArrivalKind::Poisson, rate, 200_000, 1);
        let (mean, cv) = mean_and_cv(&g);
        assert!((mean - 20_000.0).abs() < 20_000.0 * 0.01, "mean {mean}");
        assert!((cv - 1.0).abs() < 0.02, "cv {cv}");
        // Counts in fixed windows: a Poisson process has variance == mean (index of dispersion 1).
        let mut s = Schedule::new(ArrivalKind::Poisson, rate, 0, 0.0, 2);
        let window_ns = 1_000_000; // 1 ms → 50 expected arrivals
        let mut counts = vec![0u64; 4_000];
        loop {
            let t = s.advance();
            let w = (t / window_ns) as usize;
            if w >= counts.len() {
                break;
            }
            counts[w] += 1;
        }
        let c: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
        let (m, cv) = mean_and_cv(&c);
        let dispersion = (cv * m) * (cv * m) / m;
        assert!((m - 50.0).abs() < 1.0, "mean count {m}");
        assert!((dispersion - 1.0).abs() < 0.1, "dispersion {dispersion}");
    }

    #[test]
    fn ks_is_small_for_exponential_and_large_for_uniform() {
        let mut p = gaps(ArrivalKind::Poisson, 10_000.0, 20_000, 3);
        let check = GapCheck::of(&mut p, 100_000.0, 0.0);
        assert!(check.looks_exponential, "{check:?}");
        assert!(check.ks_statistic < 0.015, "{check:?}");
        assert!(check.ks_p_value > 0.01, "{check:?}");

        let mut u = gaps(ArrivalKind::Uniform, 10_000.0, 20_000, 3);
        let check = GapCheck::of(&mut u, 100_000.0, 0.0);
        assert!(!check.looks_exponential, "{check:?}");
        // All gaps equal the mean: the distance is 1 - 1/e at x = mean.
        assert!(check.ks_statistic > 0.6, "{check:?}");
        assert!(check.ks_p_value < 1e-6, "{check:?}");
        assert!(check.cv < 1e-3, "{check:?}");

        // Poisson gaps at the wrong rate fail too.
        let mut p = gaps(ArrivalKind::Poisson, 12_000.0, 20_000, 4);
        assert!(!GapCheck::of(&mut p, 100_000.0, 0.0).looks_exponential);
    }

    /// How a simulated sender departs from a Poisson schedule (10,000/s).
    #[derive(Clone, Copy, Default)]
    struct Sender {
        /// Two sends at least this far apart (a late send shortens the next gap).
        floor_ns: u64,
        /// Every second arrival sent together with the next.
        pairs: bool,
        /// Each send late by a random few µs, as a sleeping sender's wake-ups are: half by
        /// up to 0.5 µs, 40 % by up to 5, 9 % by up to 17 and 1 % by up to 60 (the demo's
        /// send lag: p50 0.5, p90 4.7, p99 17 µs).
        jitter: bool,
        /// Held up for 1 to 4 ms about three times a second, then sending what came due.
        stalls: bool,
    }

    /// The gaps between the sends of `sender`.
    fn sent_gaps(sender: Sender) -> Vec<f64> {
        let mut s = Schedule::new(ArrivalKind::Poisson, 10_000.0, 0, 0.0, 5);
        let mut rng = SmallRng::seed_from_u64(11);
        let mut uniform = |lo: f64, hi: f64| lo + (hi - lo) * rand::Rng::random::<f64>(&mut rng);
        let mut sends = Vec::new();
        let mut last = 0u64;
        let mut stall_until = 0u64;
        for i in 0..100_000u64 {
            let due = s.advance();
            let mut at = if sender.pairs && i % 2 == 0 {
                s.peek_ns()
            } else {
                due.max(last + sender.floor_ns)
            };
            if sender.jitter {
                let u = uniform(0.0, 1.0);
                let (lo, hi) = match u {
                    u if u < 0.5 => (0.0, 500.0),
                    u if u < 0.9 => (500.0, 4_700.0),
                    u if u < 0.99 => (4_700.0, 17_000.0),
                    _ => (17_000.0, 60_000.0),
                };
                at += uniform(lo, hi) as u64;
            }
            if sender.stalls {
                // A stall begins at an arrival with probability 3 in 10,000 (3 a second);
                // what comes due during it goes out when it ends.
                if at >= stall_until && uniform(0.0, 1.0) < 3e-4 {
                    stall_until = at + uniform(1e6, 4e6) as u64;
                }
                at = at.max(stall_until);
            }
            sends.push(at.max(last));
            last = at.max(last);
        }
        sends.windows(2).map(|w| (w[1] - w[0]) as f64).collect()
    }

    /// The p99 of the late sends of `Sender::jitter`, ns: the send lag such a sender reports.
    const JITTER_P99_NS: f64 = 17_000.0;

    #[test]
    fn a_send_floor_is_not_exponential_but_only_bursts_are_bunched() {
        let mut plain = sent_gaps(Sender::default());
        let check = GapCheck::of(&mut plain, 100_000.0, 0.0);
        assert!(check.looks_exponential && !check.bunched, "{check:?}");
        // No two sends closer than 5 µs: about 5 % of the gaps are missing at the short end,
        // which the two-sided test sees and the one-sided one, rightly, does not.
        let mut floored = sent_gaps(Sender {
            floor_ns: 5_000,
            ..Sender::default()
        });
        let check = GapCheck::of(&mut floored, 100_000.0, 0.0);
        assert!(!check.looks_exponential, "{check:?}");
        assert!(!check.bunched, "{check:?}");
        assert!(check.ks_excess_short < check.ks_critical_one_sided_5pct);
        // Every other request held back and sent with the next one: half the gaps are 0.
        let mut bursts = sent_gaps(Sender {
            pairs: true,
            ..Sender::default()
        });
        let check = GapCheck::of(&mut bursts, 100_000.0, 0.0);
        assert!(check.bunched && !check.looks_exponential, "{check:?}");
        assert!(check.ks_excess_short > 0.3, "{check:?}");
    }

    #[test]
    fn jitter_below_the_resolution_is_not_bunching_and_stalls_are() {
        let jittery = Sender {
            jitter: true,
            ..Sender::default()
        };
        // Judged at every length, a few µs of jitter in a sleeping sender's wake-ups looks
        // like bursts: a late send and an on-time one make a gap of a µs or two.
        let check = GapCheck::of(&mut sent_gaps(jittery), 100_000.0, 0.0);
        assert!(check.bunched, "{check:?}");
        // From the sender's own send lag p99 on, it is not.
        let check = GapCheck::of(&mut sent_gaps(jittery), 100_000.0, JITTER_P99_NS);
        assert!(!check.bunched, "{check:?}");
        assert_eq!(check.resolution_us, 17.0);
        // Millisecond stalls and whatever came due sent at once: bunched at any resolution.
        let stalled = Sender {
            stalls: true,
            ..jittery
        };
        let check = GapCheck::of(&mut sent_gaps(stalled), 100_000.0, JITTER_P99_NS);
        assert!(check.bunched, "{check:?}");
        // So is a sender that holds every other request for the next.
        let paired = Sender {
            pairs: true,
            ..jittery
        };
        let check = GapCheck::of(&mut sent_gaps(paired), 100_000.0, JITTER_P99_NS);
        assert!(check.bunched && check.ks_excess_short > 0.3, "{check:?}");
        // A sender whose lag p99 is milliseconds (stalled often) is judged from a quarter
        // of the mean gap, not from its lag.
        let check = GapCheck::of(&mut sent_gaps(stalled), 100_000.0, 3e6);
        assert_eq!(check.resolution_us, 25.0);
        assert!(check.bunched, "{check:?}");
    }

    #[test]
    fn uniform_schedule_is_evenly_spaced_with_phase() {
        let mut s = Schedule::new(ArrivalKind::Uniform, 1_000.0, 0, 0.5, 9);
        assert_eq!(s.advance(), 500_000);
        assert_eq!(s.advance(), 1_500_000);
        assert_eq!(s.peek_ns(), 2_500_000);
    }

    #[test]
    fn schedules_are_reproducible_from_the_seed() {
        let a = gaps(ArrivalKind::Poisson, 1_000.0, 100, 42);
        let b = gaps(ArrivalKind::Poisson, 1_000.0, 100, 42);
        let c = gaps(ArrivalKind::Poisson, 1_000.0, 100, 43);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn ks_p_value_is_a_probability_and_falls_with_distance() {
        let small = ks_p_value(0.005, 10_000);
        let large = ks_p_value(0.05, 10_000);
        assert!(small > 0.9 && small <= 1.0, "{small}");
        assert!(large < 1e-10, "{large}");
        assert_eq!(ks_exponential(&mut [], 1.0), 0.0);
    }
}
