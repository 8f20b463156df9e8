//! `--sweep R1,R2,...`: one open-loop run per rate, then a latency-vs-throughput table (and,
//! with `--plot`, a plot; see `output::plot_sweep`).
//!
//! ```text
//! for rate in rates: Config { rate, .. } → run → Report ─▶ table row (achieved rate, p50/p99/p99.9)
//! ```

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Config;
use crate::histogram::Percentiles;
use crate::report::Report;
use crate::run::{RunError, run_with_stop};

/// Runs `config` once per rate (prefilling only before the first), stopping early when `stop`
/// is set.
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
        reports.push(run_with_stop(&cfg, stop.clone())?);
    }
    Ok(reports)
}

/// The latency-vs-throughput table: one row per rate, corrected latency in µs.
pub fn sweep_table(reports: &[Report]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12}{:>12}{:>8}{:>12}{:>12}{:>12}{:>12}{:>10}{:>10}{:>8}",
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
            "{:>12.0}{:>12.0}{:>8.3}{:>12.1}{:>12.1}{:>12.1}{:>12.1}{:>10}{:>10}{:>8}",
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
            r.errors.total()
        );
    }
    out
}
