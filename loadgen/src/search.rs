//! `--search P:US`: the highest open-loop rate at which the corrected P-th percentile stays
//! under US microseconds (mutilate's `--search`), found by bisection.
//!
//! ```text
//! closed loop, same connections × pipeline ─▶ capacity C (the upper bound)
//! probe(C): passes → C is the answer (the SLO holds at the most these connections carry)
//! else bisect [0, C]: probe(mid) passes → lo = mid, fails → hi = mid,
//!   past saturation → hi = min(mid, the rate it sent)
//!   until hi − lo ≤ 2 % of hi or 12 probes
//! ```
//!
//! The search never probes above a rate that failed, so it never climbs past saturation; a
//! probe past saturation (see [`Report::saturated`]) also bounds it by the rate it sent, which
//! is what the server carried.
//!
//! Every probe is a full open-loop run (warm-up, window, drain). A probe passes only when its
//! self-checks pass too: the rate was reached (sent within 2 % of the arrivals its schedule
//! produced), the generator kept up (its own send
//! lag p99 under `--late-us`), no errors, no verification mismatch. A probe that fails a
//! self-check counts as a failure even if its latency looks fine, since its latency does not
//! describe the server at that rate; the result says which check bounded the search.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::config::Config;
use crate::histogram::Percentiles;
use crate::report::{RATE_TOLERANCE, Report};
use crate::run::{RunError, run_with_stop};

/// Relative width of the final bracket.
pub const TOLERANCE: f64 = 0.02;
/// Most open-loop probes per search.
pub const MAX_PROBES: usize = 12;
/// The reason of a probe past saturation (see [`Report::saturated`]).
pub const PAST_SATURATION: &str = "past saturation";

/// A latency objective: percentile `percentile` (e.g. 99.9) at most `limit_us` µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slo {
    /// The percentile, 0 < P < 100.
    pub percentile: f64,
    /// The bound, µs.
    pub limit_us: f64,
}

impl Slo {
    /// Parses `P:US` (`99:500`, `p99.9:1000`).
    ///
    /// # Errors
    /// A message when it is not a percentile below 100 and a positive bound.
    pub fn parse(s: &str) -> Result<Slo, String> {
        let bad = || format!("{s:?}: expected P:US, e.g. 99:500 (p99 under 500 µs)");
        let (p, us) = s.split_once(':').ok_or_else(bad)?;
        let p: f64 = p
            .trim()
            .trim_start_matches('p')
            .parse()
            .map_err(|_| bad())?;
        let us: f64 = us.trim().parse().map_err(|_| bad())?;
        if !(p > 0.0 && p < 100.0 && us > 0.0 && us.is_finite()) {
            return Err(bad());
        }
        Ok(Slo {
            percentile: p,
            limit_us: us,
        })
    }
}

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    /// Rate asked for, requests/s.
    pub rate: f64,
    /// Rate sent, requests/s.
    pub achieved_rate: f64,
    /// The corrected latency at the SLO's percentile, µs.
    pub latency_us: f64,
    /// Whether it met the SLO and passed its self-checks.
    pub ok: bool,
    /// Why not: `slo`, or the self-check that failed; null when ok.
    pub reason: Option<String>,
}

/// What a probe measured, as the search sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Rate sent, requests/s.
    pub achieved_rate: f64,
    /// The corrected latency at the SLO's percentile, µs.
    pub latency_us: f64,
    /// The first self-check that failed, or `None`.
    pub failed_check: Option<String>,
}

/// The outcome of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The highest rate that passed, or `None` when none did.
    pub rate: Option<f64>,
    /// Index in `probes` of that rate's probe.
    pub best: Option<usize>,
    /// Every probe, in the order run.
    pub probes: Vec<Probe>,
    /// What bounded the search from above: `slo`, a self-check, or `capacity` when the
    /// capacity itself passed.
    pub limited_by: String,
}

/// Bisects over open-loop rates in `(0, capacity]`, calling `probe` for each; stops early
/// when `stop` is set (the outcome then holds what was found so far).
pub fn bisect(
    slo: Slo,
    capacity: f64,
    stop: &AtomicBool,
    mut probe: impl FnMut(f64) -> Measurement,
) -> Outcome {
    let mut probes = Vec::new();
    let mut run = |rate: f64, probes: &mut Vec<Probe>| -> bool {
        let m = probe(rate);
        let reason = m
            .failed_check
            .clone()
            .or_else(|| (m.latency_us > slo.limit_us).then(|| "slo".to_string()));
        probes.push(Probe {
            rate,
            achieved_rate: m.achieved_rate,
            latency_us: m.latency_us,
            ok: reason.is_none(),
            reason,
        });
        probes.last().is_some_and(|p| p.ok)
    };
    let (mut lo, mut hi) = (0.0f64, capacity);
    let mut best = None;
    let mut limited_by = String::from("capacity");
    // A rate past saturation caps the bracket at what that probe sent.
    let cap = |hi: f64, p: &Probe| {
        if p.reason.as_deref() == Some(PAST_SATURATION) && p.achieved_rate > 0.0 {
            hi.min(p.achieved_rate)
        } else {
            hi
        }
    };
    if run(capacity, &mut probes) {
        return Outcome {
            rate: Some(capacity),
            best: Some(0),
            probes,
            limited_by,
        };
    }
    limited_by.clone_from(probes[0].reason.as_ref().expect("a failed probe says why"));
    hi = cap(hi, &probes[0]);
    while probes.len() < MAX_PROBES && hi - lo > TOLERANCE * hi && !stop.load(Ordering::Relaxed) {
        let mid = (lo + hi) / 2.0;
        if run(mid, &mut probes) {
            lo = mid;
            best = Some(probes.len() - 1);
        } else {
            hi = cap(mid, probes.last().expect("just run"));
            limited_by.clone_from(probes.last().and_then(|p| p.reason.as_ref()).expect("why"));
        }
    }
    Outcome {
        rate: best.map(|_| lo),
        best,
        probes,
        limited_by,
    }
}

/// The search's view of an open-loop report: the corrected latency at the SLO's percentile and
/// the first self-check that failed.
pub fn measure(report: &Report, slo: Slo) -> Measurement {
    let corrected = report.corrected.as_ref().unwrap_or(&report.service).all();
    let latency_us = if corrected.is_empty() {
        f64::INFINITY
    } else {
        corrected.value_at_quantile(slo.percentile / 100.0) as f64 / 1_000.0
    };
    let late_us = report.config.late_threshold.as_secs_f64() * 1e6;
    // Against what the schedule produced, not the target: at low rates a short window's
    // Poisson count alone strays from the target by more than the tolerance.
    let failed_check = if report.saturated() {
        Some(PAST_SATURATION.to_string())
    } else if (report.sent as f64) < report.scheduled as f64 * (1.0 - RATE_TOLERANCE) {
        Some("rate not reached".to_string())
    } else if Percentiles::of(&report.generator_lag).p99 > late_us {
        Some("generator could not keep up".to_string())
    } else if report.errors.total() > 0 {
        Some("errors".to_string())
    } else if report.verify.mismatches > 0 {
        Some("verify mismatches".to_string())
    } else {
        None
    };
    Measurement {
        achieved_rate: report.achieved_rate(),
        latency_us,
        failed_check,
    }
}

/// A search against real servers: the closed-loop capacity, then the probes.
#[derive(Debug, Clone)]
pub struct SearchRun {
    /// The objective.
    pub slo: Slo,
    /// The closed-loop run that set the upper bound.
    pub capacity: Report,
    /// The bisection.
    pub outcome: Outcome,
    /// One report per probe, in the order run.
    pub reports: Vec<Report>,
}

/// Runs the search for `config` (its rate is ignored).
///
/// # Errors
/// The first [`RunError`].
pub fn search(config: &Config, slo: Slo, stop: Arc<AtomicBool>) -> Result<SearchRun, RunError> {
    let mut closed = config.clone();
    closed.rate = None;
    if closed.progress {
        eprintln!("search: closed loop for the capacity");
    }
    let capacity = run_with_stop(&closed, stop.clone())?;
    let mut reports = Vec::new();
    let mut error = None;
    let outcome = bisect(slo, capacity.ops_per_sec().max(1.0), &stop, |rate| {
        let mut cfg = config.clone();
        cfg.rate = Some(rate);
        cfg.prefill = false;
        if cfg.progress {
            eprintln!("search: probe at {rate:.0}/s");
        }
        match run_with_stop(&cfg, stop.clone()) {
            Ok(r) => {
                let m = measure(&r, slo);
                reports.push(r);
                m
            }
            Err(e) => {
                error.get_or_insert(e);
                stop.store(true, Ordering::Relaxed);
                Measurement {
                    achieved_rate: 0.0,
                    latency_us: f64::INFINITY,
                    failed_check: Some("run failed".to_string()),
                }
            }
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    Ok(SearchRun {
        slo,
        capacity,
        outcome,
        reports,
    })
}

/// The search's table: one row per probe, then the answer.
pub fn search_table(s: &SearchRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "search: highest rate with corrected p{} under {} µs (capacity, closed loop: {:.0}/s)",
        s.slo.percentile,
        s.slo.limit_us,
        s.capacity.ops_per_sec()
    );
    let _ = writeln!(
        out,
        "{:>12}{:>12}{:>14}  verdict",
        "rate/s", "achieved/s", "latency µs"
    );
    for p in &s.outcome.probes {
        let _ = writeln!(
            out,
            "{:>12.0}{:>12.0}{:>14.1}  {}",
            p.rate,
            p.achieved_rate,
            p.latency_us,
            p.reason.as_deref().unwrap_or("ok")
        );
    }
    match s.outcome.rate {
        Some(r) => {
            let _ = writeln!(
                out,
                "result: {r:.0}/s (bounded by: {})",
                s.outcome.limited_by
            );
        }
        None => {
            let _ = writeln!(
                out,
                "result: no rate met the objective (bounded by: {})",
                s.outcome.limited_by
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An M/M/1 server with service rate `mu` (requests/s): the response time is exponential
    /// with rate `mu − lambda`, so its p-quantile is −ln(1 − p) / (mu − lambda). At or above
    /// `mu` it cannot keep up. A generator that can send at most `generator_max` fails its
    /// self-check above that.
    fn mm1(mu: f64, generator_max: f64, p: f64) -> impl FnMut(f64) -> Measurement {
        move |lambda| {
            if lambda > generator_max {
                return Measurement {
                    achieved_rate: generator_max,
                    latency_us: 10.0,
                    failed_check: Some("generator could not keep up".into()),
                };
            }
            if lambda >= mu {
                return Measurement {
                    achieved_rate: mu,
                    latency_us: f64::INFINITY,
                    failed_check: Some(PAST_SATURATION.into()),
                };
            }
            Measurement {
                achieved_rate: lambda,
                latency_us: -(1.0 - p / 100.0).ln() / (mu - lambda) * 1e6,
                failed_check: None,
            }
        }
    }

    /// An open-loop report at 1,000/s whose schedule produced `scheduled` arrivals, of which
    /// `sent` went out, with a generator lag of `lag_us` and corrected latencies of 100 µs.
    /// `waited` of them waited for a free connection slot.
    fn report(scheduled: u64, sent: u64, lag_us: u64, errors: u64, waited: u64) -> Report {
        use crate::histogram::OpKind;
        use crate::report::StampSummary;
        let mut t = crate::worker::ThreadStats::new();
        for _ in 0..sent {
            t.corrected.record(OpKind::GetHit, 100_000);
            t.service.record(OpKind::GetHit, 50_000);
            t.generator_lag.record(lag_us * 1_000).unwrap();
        }
        t.counts[OpKind::GetHit.index()] = sent;
        (t.scheduled, t.sent, t.thread_rate) = (scheduled, sent, 1_000.0);
        t.window_end_ns = 1_000_000_000;
        t.errors.timeout = errors;
        t.backpressured = waited;
        let cfg = Config {
            rate: Some(1_000.0),
            duration: std::time::Duration::from_secs(1),
            ..Config::default()
        };
        Report::from_threads(&cfg, vec![t], None, StampSummary::as_asked(&cfg))
    }

    #[test]
    fn probes_are_judged_by_their_self_checks() {
        let slo = Slo::parse("99:500").unwrap();
        // 900 arrivals in the window (a Poisson shortfall, 10 % under the target), all sent.
        let m = measure(&report(900, 900, 5, 0, 0), slo);
        assert_eq!(m.failed_check, None);
        assert!((m.latency_us - 100.0).abs() < 0.2, "{}", m.latency_us);
        assert_eq!(
            measure(&report(1_000, 900, 5, 0, 0), slo)
                .failed_check
                .as_deref(),
            Some("rate not reached")
        );
        // The same shortfall with most requests waiting for a slot: the server was the limit.
        assert_eq!(
            measure(&report(1_000, 900, 5, 0, 800), slo)
                .failed_check
                .as_deref(),
            Some(PAST_SATURATION)
        );
        assert_eq!(
            measure(&report(1_000, 1_000, 5_000, 0, 0), slo)
                .failed_check
                .as_deref(),
            Some("generator could not keep up")
        );
        assert_eq!(
            measure(&report(1_000, 1_000, 5, 1, 0), slo)
                .failed_check
                .as_deref(),
            Some("errors")
        );
    }

    #[test]
    fn slo_parses() {
        assert_eq!(
            Slo::parse("99:500"),
            Ok(Slo {
                percentile: 99.0,
                limit_us: 500.0
            })
        );
        assert_eq!(Slo::parse("p99.9:1000").unwrap().percentile, 99.9);
        for bad in ["99", "100:5", "0:5", "99:0", "x:1", "99:-3"] {
            assert!(Slo::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bisection_finds_the_mm1_rate_within_the_tolerance() {
        let slo = Slo::parse("99:500").unwrap();
        let mu = 100_000.0;
        // p99 = ln(100) / (mu − λ) ≤ 500 µs  ⇔  λ ≤ mu − ln(100) / 500e-6 ≈ 90,790/s.
        let want = mu - 100f64.ln() / 500e-6;
        let stop = AtomicBool::new(false);
        let out = bisect(slo, mu * 1.1, &stop, mm1(mu, f64::INFINITY, 99.0));
        let got = out.rate.unwrap();
        assert!(
            got <= want && got >= want * (1.0 - 2.0 * TOLERANCE),
            "{got} vs {want}"
        );
        assert!(out.probes.len() <= MAX_PROBES, "{}", out.probes.len());
        assert_eq!(out.limited_by, "slo");
        // Every passing probe met the SLO, every failing one did not or failed a check.
        for p in &out.probes {
            assert_eq!(p.ok, p.reason.is_none());
            if p.ok {
                assert!(p.latency_us <= 500.0 && p.rate <= want);
            }
        }
        assert_eq!(out.probes[out.best.unwrap()].rate, got);
        // The first probe, at 1.1 × mu, was past saturation and sent mu: the bracket starts
        // from there, and no later probe climbs above it.
        assert_eq!(out.probes[0].reason.as_deref(), Some(PAST_SATURATION));
        assert_eq!(out.probes[1].rate, mu / 2.0);
        assert!(
            out.probes[1..].iter().all(|p| p.rate < mu),
            "{:?}",
            out.probes
        );
    }

    #[test]
    fn a_probe_that_fails_a_self_check_is_a_failure_whatever_its_latency() {
        let slo = Slo::parse("99:500").unwrap();
        let stop = AtomicBool::new(false);
        // The generator tops out at 50,000/s, far below the server's SLO rate: the search
        // must not trust the fine latencies it reports above that.
        let out = bisect(slo, 110_000.0, &stop, mm1(100_000.0, 50_000.0, 99.0));
        let got = out.rate.unwrap();
        assert!(
            (50_000.0 * (1.0 - 2.0 * TOLERANCE)..=50_000.0).contains(&got),
            "{got}"
        );
        assert_eq!(out.limited_by, "generator could not keep up");
        assert!(
            out.probes
                .iter()
                .filter(|p| p.rate > 50_000.0)
                .all(|p| !p.ok)
        );
    }

    #[test]
    fn capacity_that_meets_the_slo_is_the_answer_and_nothing_passing_is_none() {
        let stop = AtomicBool::new(false);
        let easy = Slo::parse("50:100000").unwrap();
        let out = bisect(easy, 50_000.0, &stop, mm1(100_000.0, f64::INFINITY, 50.0));
        assert_eq!((out.rate, out.probes.len()), (Some(50_000.0), 1));
        assert_eq!(out.limited_by, "capacity");
        // 1 µs at p99 is below even an idle M/M/1's 46 µs: nothing passes.
        let impossible = Slo::parse("99:1").unwrap();
        let out = bisect(
            impossible,
            50_000.0,
            &stop,
            mm1(100_000.0, f64::INFINITY, 99.0),
        );
        assert_eq!(out.rate, None);
        assert_eq!(out.probes.len(), MAX_PROBES);
        // A stop request ends the search after the probe under way.
        stop.store(true, Ordering::Relaxed);
        let out = bisect(
            Slo::parse("99:500").unwrap(),
            110_000.0,
            &stop,
            mm1(100_000.0, f64::INFINITY, 99.0),
        );
        assert_eq!(out.probes.len(), 1);
    }
}
