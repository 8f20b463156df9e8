//! Latency histograms: one HDR histogram of integer nanoseconds per operation kind, kept per
//! thread and merged bucket-wise (never by averaging percentiles).
//!
//! ```text
//! reply parsed → OpKind → LatencySet (thread) ──merge──▶ LatencySet (run) → Percentiles (µs)
//! ```

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Lowest recordable latency (1 ns).
pub const LOWEST_NS: u64 = 1;
/// Highest recordable latency (one hour); larger values saturate here.
pub const HIGHEST_NS: u64 = 3_600 * 1_000_000_000;
/// Significant decimal digits kept by every histogram (0.1 % relative error).
pub const SIGFIG: u8 = 3;

/// A small latency histogram that grows to the largest value recorded (lowest 1 ns, the
/// crate's precision), for the many short intervals of a time series.
pub fn new_interval_histogram() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(LOWEST_NS, 2, SIGFIG).expect("valid bounds");
    h.auto(true);
    h
}

/// A fresh latency histogram with the crate's bounds.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGFIG)
        .expect("static histogram bounds are valid")
}

/// What a reply turned out to be; each kind has its own histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// A GET that returned a value.
    GetHit,
    /// A GET that found no value.
    GetMiss,
    /// A SET that the server stored.
    Set,
    /// A DELETE, whether it found its key or not.
    Delete,
    /// A multi-key GET (`--multiget`), however many of its keys were found.
    MultiGet,
    /// Anything else: error statuses (SERVER_ERROR, out of memory, NOT_STORED, ...).
    Other,
}

impl OpKind {
    /// Every kind, in report order.
    pub const ALL: [OpKind; 6] = [
        OpKind::GetHit,
        OpKind::GetMiss,
        OpKind::Set,
        OpKind::Delete,
        OpKind::MultiGet,
        OpKind::Other,
    ];

    /// The `snake_case` name used in tables, JSON keys and file names.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::GetHit => "get_hit",
            OpKind::GetMiss => "get_miss",
            OpKind::Set => "set",
            OpKind::Delete => "delete",
            OpKind::MultiGet => "multiget",
            OpKind::Other => "other",
        }
    }

    /// Position in [`OpKind::ALL`].
    pub const fn index(self) -> usize {
        match self {
            OpKind::GetHit => 0,
            OpKind::GetMiss => 1,
            OpKind::Set => 2,
            OpKind::Delete => 3,
            OpKind::MultiGet => 4,
            OpKind::Other => 5,
        }
    }
}

/// One histogram per [`OpKind`], all in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencySet {
    per_op: [Histogram<u64>; 6],
}

impl Default for LatencySet {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencySet {
    /// Four empty histograms.
    pub fn new() -> Self {
        LatencySet {
            per_op: std::array::from_fn(|_| new_histogram()),
        }
    }

    /// Records one latency; values beyond [`HIGHEST_NS`] saturate, zero counts as 1 ns.
    #[inline]
    pub fn record(&mut self, kind: OpKind, latency_ns: u64) {
        self.per_op[kind.index()].saturating_record(latency_ns.max(LOWEST_NS));
    }

    /// The histogram of one operation kind.
    pub fn op(&self, kind: OpKind) -> &Histogram<u64> {
        &self.per_op[kind.index()]
    }

    /// All kinds merged into one histogram.
    pub fn all(&self) -> Histogram<u64> {
        let mut all = new_histogram();
        for h in &self.per_op {
            all.add(h).expect("histograms share bounds");
        }
        all
    }

    /// Adds `other` bucket by bucket.
    pub fn merge(&mut self, other: &LatencySet) {
        for (mine, theirs) in self.per_op.iter_mut().zip(&other.per_op) {
            mine.add(theirs).expect("histograms share bounds");
        }
    }

    /// Number of recorded values over all kinds.
    pub fn len(&self) -> u64 {
        self.per_op.iter().map(Histogram::len).sum()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The quantiles every report lists, with their labels.
pub const REPORT_QUANTILES: [(&str, f64); 5] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("p99.99", 0.9999),
];

/// Summary of one histogram in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Percentiles {
    /// Number of recorded values.
    pub count: u64,
    /// Mean, µs.
    pub mean: f64,
    /// Median, µs.
    pub p50: f64,
    /// 90th percentile, µs.
    pub p90: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// 99.9th percentile, µs.
    pub p99_9: f64,
    /// 99.99th percentile, µs.
    pub p99_99: f64,
    /// Largest value, µs.
    pub max: f64,
}

impl Percentiles {
    /// Reads the report quantiles off a nanosecond histogram; all zero when it is empty.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        let us = |q: f64| ns_to_us(h.value_at_quantile(q));
        Percentiles {
            count: h.len(),
            mean: h.mean() / 1_000.0,
            p50: us(0.50),
            p90: us(0.90),
            p99: us(0.99),
            p99_9: us(0.999),
            p99_99: us(0.9999),
            max: ns_to_us(h.max()),
        }
    }

    /// The five report quantiles followed by max, in table order.
    pub fn columns(&self) -> [f64; 6] {
        [
            self.p50,
            self.p90,
            self.p99,
            self.p99_9,
            self.p99_99,
            self.max,
        ]
    }
}

/// Nanoseconds to microseconds.
pub fn ns_to_us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

/// Writes `h` (nanoseconds) in HdrHistogram's percentile-distribution text format, values in
/// milliseconds, five ticks per half distance: the format HdrHistogram's plotter reads.
pub fn hgrm(h: &Histogram<u64>) -> String {
    const SCALE: f64 = 1_000_000.0; // ns → ms
    let mut out = String::new();
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / SCALE;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(
                    out,
                    "{value:12.3} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(out, "{value:12.3} {q:2.12} {total:10}");
            }
        }
    }
    let (mean, stdev) = if h.is_empty() {
        (0.0, 0.0)
    } else {
        (h.mean() / SCALE, h.stdev() / SCALE)
    };
    let _ = writeln!(
        out,
        "#[Mean    = {mean:12.3}, StdDeviation   = {stdev:12.3}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        h.max() as f64 / SCALE,
        h.len()
    );
    let sub_buckets = (2u64 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two();
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        sub_buckets
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::SmallRng};

    #[test]
    fn merge_is_bucket_wise_and_equals_one_histogram_of_all_samples() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut parts = [LatencySet::new(), LatencySet::new(), LatencySet::new()];
        let mut single = LatencySet::new();
        for i in 0..30_000u64 {
            // Three threads with very different latency profiles.
            let part = (i % 3) as usize;
            let ns = match part {
                0 => rng.random_range(1_000..50_000),
                1 => rng.random_range(100_000..5_000_000),
                _ => rng.random_range(10..1_000_000_000),
            };
            let kind = OpKind::ALL[(i % 6) as usize];
            parts[part].record(kind, ns);
            single.record(kind, ns);
        }
        let mut merged = LatencySet::new();
        for p in &parts {
            merged.merge(p);
        }
        for kind in OpKind::ALL {
            assert_eq!(merged.op(kind), single.op(kind), "{}", kind.name());
        }
        assert_eq!(merged.all(), single.all());
        assert_eq!(merged.len(), 30_000);
        // Averaging per-thread p99s would be far from the merged p99: merging must not do that.
        let avg_p99: f64 = parts
            .iter()
            .map(|p| Percentiles::of(&p.all()).p99)
            .sum::<f64>()
            / parts.len() as f64;
        let merged_p99 = Percentiles::of(&merged.all()).p99;
        assert!(
            (avg_p99 - merged_p99).abs() > 1_000.0,
            "{avg_p99} vs {merged_p99}"
        );
    }

    #[test]
    fn percentiles_are_in_microseconds_at_the_right_ranks() {
        let mut h = new_histogram();
        // 1..=10_000 µs, one sample each.
        for us in 1..=10_000u64 {
            h.record(us * 1_000).unwrap();
        }
        let p = Percentiles::of(&h);
        assert_eq!(p.count, 10_000);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.001 + 0.001;
        assert!(close(p.p50, 5_000.0), "{p:?}");
        assert!(close(p.p90, 9_000.0), "{p:?}");
        assert!(close(p.p99, 9_900.0), "{p:?}");
        assert!(close(p.p99_9, 9_990.0), "{p:?}");
        assert!(close(p.p99_99, 9_999.0), "{p:?}");
        assert!(close(p.max, 10_000.0), "{p:?}");
        assert!(close(p.mean, 5_000.5), "{p:?}");
        assert_eq!(p.columns()[5], p.max);
    }

    #[test]
    fn empty_histogram_summarises_to_zero() {
        assert_eq!(Percentiles::of(&new_histogram()), Percentiles::default());
    }

    #[test]
    fn zero_and_huge_latencies_are_clamped_not_lost() {
        let mut s = LatencySet::new();
        s.record(OpKind::Set, 0);
        s.record(OpKind::Set, u64::MAX);
        assert_eq!(s.op(OpKind::Set).len(), 2);
        assert!(s.op(OpKind::Set).max() >= HIGHEST_NS);
    }

    #[test]
    fn hgrm_has_the_plotter_layout() {
        let mut h = new_histogram();
        for us in 1..=1_000u64 {
            h.record(us * 1_000).unwrap();
        }
        let text = hgrm(&h);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        let rows: Vec<Vec<&str>> = lines[2..]
            .iter()
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(rows.len() > 20);
        // First row: smallest value (1 µs = 0.001 ms), percentile 0.
        assert_eq!(rows[0][0], "0.001");
        // Rows are monotone in value, percentile and count; the last one is 100 % without the
        // inverse column.
        for w in rows.windows(2) {
            let f = |r: &Vec<&str>, i: usize| r[i].parse::<f64>().unwrap();
            assert!(f(&w[1], 0) >= f(&w[0], 0));
            assert!(f(&w[1], 1) >= f(&w[0], 1));
            assert!(f(&w[1], 2) >= f(&w[0], 2));
        }
        let last = rows.last().unwrap();
        assert_eq!(last.len(), 3);
        assert_eq!(last[1], "1.000000000000");
        assert_eq!(last[2], "1000");
        assert!(
            text.contains("#[Max     =        1.000, Total count    =         1000]"),
            "{text}"
        );
        assert!(text.contains("SubBuckets     =         2048]"), "{text}");
        assert!(text.trim_end().ends_with(']'));
    }
}
