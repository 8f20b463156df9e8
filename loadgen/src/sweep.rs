//! `--sweep R1,R2,...`: one open-loop run per rate, then a latency-vs-throughput table (and,
//! with `--plot`, a plot; see `output::plot_sweep`).
//!
//! ```text
//! for rate in rates: Config { rate, .. } → run → Report ─▶ table row (achieved rate, p50/p99/p99.9)
//!                    past saturation (Report::saturated) → stop: the rates after it are not run
//! ```
//!
//! A point past saturation holds the server at its capacity, and its corrected latency grows
//! with the run's length, not with the rate; every further point would only repeat that, for
//! as long again. So the sweep ends at the first such point, and the table says so.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Config;
use crate::histogram::Percentiles;
use crate::report::Report;
use crate::run::{RunError, run_with_stop};

/// Runs `config` once per rate (prefilling only before the first), stopping after the first
/// point past saturation, or early when `stop` is set.
///
/// # Errors
/// The first [`RunError`]; the reports of earlier rates are dropped with it.
pub fn sweep(
    config: &Config,
    rates: &[f64],
    stop: Arc<AtomicBool>,
) -> Result<Vec<Report>, RunError> {
    let mut reports = Vec::with_capacity(rates.len());
    for (i, &rate) in rates.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut cfg = config.clone();
        cfg.rate = Some(rate);
        cfg.prefill = config.prefill && i == 0;
        if cfg.progress {
            eprintln!("sweep: rate {rate:.0}/s ({} of {})", i + 1, rates.len());
        }
        let report = run_with_stop(&cfg, stop.clone())?;
        let saturated = report.saturated();
        if saturated && cfg.progress && i + 1 < rates.len() {
            eprintln!(
                "sweep: past saturation at {rate:.0}/s (sent {:.0}/s): the {} rate(s) after it are not run",
                report.achieved_rate(),
                rates.len() - i - 1
            );
        }
        reports.push(report);
        if saturated {
            break;
        }
    }
    Ok(reports)
}

/// The latency-vs-throughput table: one row per rate, corrected latency in µs, the points past
/// saturation marked, and a last line when the sweep stopped at one.
pub fn sweep_table(reports: &[Report]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12}{:>12}{:>8}{:>12}{:>12}{:>12}{:>12}{:>10}{:>10}{:>8}  saturated",
        "target/s",
        "achieved/s",
        "ratio",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "svc p99",
        "late",
        "unsent",
        "errors"
    );
    for r in reports {
        let target = r.config.rate.unwrap_or_default();
        let primary = Percentiles::of(&r.corrected.as_ref().unwrap_or(&r.service).all());
        let service = Percentiles::of(&r.service.all());
        let _ = writeln!(
            out,
            "{:>12.0}{:>12.0}{:>8.3}{:>12.1}{:>12.1}{:>12.1}{:>12.1}{:>10}{:>10}{:>8}  {}",
            target,
            r.achieved_rate(),
            if target > 0.0 {
                r.achieved_rate() / target
            } else {
                0.0
            },
            primary.p50,
            primary.p99,
            primary.p99_9,
            service.p99,
            r.late,
            r.never_sent,
            r.errors.total(),
            if r.saturated() { "yes" } else { "no" }
        );
    }
    if let Some(r) = reports.iter().find(|r| r.saturated()) {
        let _ = writeln!(
            out,
            "past saturation at {:.0}/s: sent {:.0}/s, {} arrivals waiting at the end; the sweep stops there",
            r.config.rate.unwrap_or_default(),
            r.achieved_rate(),
            r.backlog_end
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::histogram::OpKind;
    use crate::output::plot_sweep;
    use crate::report::StampSummary;
    use crate::worker::ThreadStats;

    /// A report of an open-loop run at `rate` whose schedule produced `rate` arrivals in 1 s,
    /// that sent `sent` of them with corrected latencies around `us` µs; the rest waited for a
    /// slot and were never sent.
    fn point(rate: f64, sent: u64, us: u64) -> Report {
        let mut t = ThreadStats::new();
        for i in 0..sent {
            t.corrected.record(OpKind::GetHit, us * 1_000 + i);
            t.service.record(OpKind::GetHit, us * 500);
        }
        t.counts[OpKind::GetHit.index()] = sent;
        (t.scheduled, t.sent, t.window_end_ns, t.thread_rate) =
            (rate as u64, sent, 1_000_000_000, rate);
        t.backlog_end = t.scheduled - sent;
        t.backpressured = if t.backlog_end > 0 { sent } else { 0 };
        let cfg = Config {
            rate: Some(rate),
            duration: Duration::from_secs(1),
            ..Config::default()
        };
        Report::from_threads(&cfg, vec![t], None, StampSummary::as_asked(&cfg))
    }

    #[test]
    fn table_has_one_row_per_rate_with_achieved_rate_and_corrected_percentiles() {
        let reports = [point(1_000.0, 1_000, 50), point(4_000.0, 4_000, 900)];
        let table = sweep_table(&reports);
        let rows: Vec<Vec<&str>> = table
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert_eq!(&rows[0][..3], ["1000", "1000", "1.000"], "{table}");
        assert_eq!(&rows[1][..3], ["4000", "4000", "1.000"], "{table}");
        let p50: f64 = rows[1][3].parse().unwrap();
        // Corrected latencies 900 µs + i ns for i < 4,000: the median is 902 µs.
        assert!((901.5..=902.5).contains(&p50), "{table}");
        assert!(table.lines().next().unwrap().contains("p99.9 µs"));
        assert!(rows.iter().all(|r| r.last() == Some(&"no")), "{table}");

        let dir = std::env::temp_dir().join(format!("loadgen-sweep-{}", std::process::id()));
        for name in ["sweep.svg", "sweep.png"] {
            plot_sweep(&dir.join(name), &reports).unwrap();
            assert!(std::fs::metadata(dir.join(name)).unwrap().len() > 1_000);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_point_past_saturation_is_marked_and_the_table_says_the_sweep_stopped() {
        let reports = [point(1_000.0, 1_000, 50), point(4_000.0, 3_000, 90_000)];
        assert!(!reports[0].saturated() && reports[1].saturated());
        let table = sweep_table(&reports);
        let rows: Vec<Vec<&str>> = table
            .lines()
            .skip(1)
            .take(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(&rows[1][..3], ["4000", "3000", "0.750"], "{table}");
        assert_eq!(rows[1].last(), Some(&"yes"), "{table}");
        let last = table.lines().last().unwrap();
        assert!(
            last.starts_with("past saturation at 4000/s: sent 3000/s, 1000 arrivals waiting"),
            "{table}"
        );
    }
}
