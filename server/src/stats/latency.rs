//! `stats latency`: how long requests spend inside memspin, per command kind, as HDR
//! histograms one worker records into and `stats` sums over workers.
//!
//! ```text
//! frame read (loop tick) ─▶ request executed ─▶ reply in the connection's output ─▶ socket
//!        arrival ─────────────── time inside memspin ───────────────▶ end of the engine call
//! ```
//!
//! A request's time runs from the loop iteration in which its bytes were first seen unserved
//! (the packet path stamps the connection with that iteration's clock reading) to the end of
//! the engine call that executed it, which is when its reply is in the connection's output,
//! handed to the socket in the same turn. A request forwarded to another worker runs until
//! its reply is put into the connection's output on its way back. One clock read per engine
//! call that executed anything serves every request of that call (a pipeline shares it), and
//! recording is an index increment in a histogram allocated up front: nothing allocates or
//! locks on a request's path.
//!
//! A request waiting behind others of its connection (its turn used up, output backed up)
//! counts that wait; the bytes of a connection that keeps sending while it is served carry
//! the stamp of the first unserved bytes, so a request arriving while earlier ones of the same
//! connection wait is counted from their arrival (an overstatement of at most the wait).
//!
//! Kinds count the store operations a request makes: each key of a multi-key `get` is one
//! `get` (as `cmd_get` counts it), a store one `set`, and so on; a request that makes none
//! (`version`, `stats`, `mn`, an error) is `other`.

use hdrhistogram::Histogram;

/// The command kinds `stats latency` reports, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A read of one key (get, gets, binary GET*, meta `mg`).
    Get = 0,
    /// A store (set, add, replace, append, prepend, cas, binary SET*, meta `ms`).
    Set = 1,
    /// A delete (text, binary, meta `md`).
    Delete = 2,
    /// incr, decr, meta `ma`.
    Arith = 3,
    /// touch, gat, gats, binary TOUCH/GAT*.
    Touch = 4,
    /// flush_all.
    Flush = 5,
    /// Anything else: version, stats, noop, verbosity, errors.
    Other = 6,
}

/// How many kinds there are.
pub const KINDS: usize = 7;

impl Kind {
    /// Every kind, in `stats latency` order.
    pub const ALL: [Kind; KINDS] = [
        Kind::Get,
        Kind::Set,
        Kind::Delete,
        Kind::Arith,
        Kind::Touch,
        Kind::Flush,
        Kind::Other,
    ];

    /// The kind's name in `stats latency` lines.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::Set => "set",
            Kind::Delete => "delete",
            Kind::Arith => "arith",
            Kind::Touch => "touch",
            Kind::Flush => "flush",
            Kind::Other => "other",
        }
    }

    /// The kind with this index (`Other` for any other number).
    pub fn from_index(index: u8) -> Kind {
        Kind::ALL
            .get(usize::from(index))
            .copied()
            .unwrap_or(Kind::Other)
    }
}

/// The longest time recorded; longer ones count as this (10 s).
pub const MAX_NS: u64 = 10_000_000_000;

/// Significant digits the histograms keep (values within 1 %).
const SIGFIG: u8 = 2;

/// The quantiles reported, with their names.
pub const QUANTILES: [(&str, f64); 6] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99_9", 0.999),
    ("p99_99", 0.9999),
    ("max", 1.0),
];

/// One histogram per kind, of nanoseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    kinds: Vec<Histogram<u64>>,
}

impl Default for Latency {
    fn default() -> Latency {
        Latency::new()
    }
}

impl Latency {
    /// Empty histograms, allocated now (about 30 KiB each), never resized.
    pub fn new() -> Latency {
        let kinds = (0..KINDS)
            .map(|_| {
                let mut h = Histogram::new_with_bounds(1, MAX_NS, SIGFIG)
                    .expect("static histogram bounds are valid");
                h.auto(false);
                h
            })
            .collect();
        Latency { kinds }
    }

    /// Records `count` requests of `kind` that took `ns` nanoseconds (clamped to 1 ns ..
    /// [`MAX_NS`]). Allocates nothing.
    #[inline]
    pub fn record(&mut self, kind: Kind, ns: u64, count: u64) {
        if let Some(h) = self.kinds.get_mut(kind as usize) {
            h.saturating_record_n(ns.clamp(1, MAX_NS), count);
        }
    }

    /// Adds another worker's histograms.
    pub fn add(&mut self, other: &Latency) {
        for (mine, theirs) in self.kinds.iter_mut().zip(&other.kinds) {
            // Same bounds on every worker: adding cannot fail.
            let _ = mine.add(theirs);
        }
    }

    /// Empties every histogram (`stats reset`).
    pub fn reset(&mut self) {
        self.kinds.iter_mut().for_each(Histogram::reset);
    }

    /// Requests recorded of `kind`.
    pub fn count(&self, kind: Kind) -> u64 {
        self.kinds.get(kind as usize).map_or(0, Histogram::len)
    }

    /// Calls `emit(name, value)` for every line of `stats latency`: per kind with requests,
    /// `latency:<kind>:count`, the mean and the [`QUANTILES`] in nanoseconds.
    pub fn lines(&self, mut emit: impl FnMut(&str, &dyn std::fmt::Display)) {
        for kind in Kind::ALL {
            let h = &self.kinds[kind as usize];
            if h.is_empty() {
                continue;
            }
            let name = kind.name();
            emit(&format!("latency:{name}:count"), &h.len());
            emit(
                &format!("latency:{name}:mean_ns"),
                &(h.mean().round() as u64),
            );
            for (q, quantile) in QUANTILES {
                let value = if quantile >= 1.0 {
                    h.max()
                } else {
                    h.value_at_quantile(quantile)
                };
                emit(&format!("latency:{name}:{q}_ns"), &value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(l: &Latency) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        l.lines(|name, value| out.push((name.to_string(), value.to_string().parse().unwrap())));
        out
    }

    #[test]
    fn percentiles_are_monotonic_and_within_one_percent() {
        let mut l = Latency::new();
        for ns in 1..=10_000u64 {
            l.record(Kind::Get, ns * 100, 1);
        }
        l.record(Kind::Set, 5_000, 3);
        let got = lines(&l);
        let get: Vec<u64> = got
            .iter()
            .filter(|(n, _)| n.starts_with("latency:get:p") || n == "latency:get:max_ns")
            .map(|&(_, v)| v)
            .collect();
        assert_eq!(get.len(), QUANTILES.len());
        assert!(get.windows(2).all(|w| w[0] <= w[1]), "{got:?}");
        let p50 = get[0] as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.01, "{p50}");
        assert_eq!(got[0], ("latency:get:count".to_string(), 10_000));
        assert!(got.contains(&("latency:set:count".to_string(), 3)));
        assert!(
            !got.iter().any(|(n, _)| n.starts_with("latency:delete")),
            "empty kinds are left out"
        );
    }

    #[test]
    fn out_of_range_times_are_clamped_not_lost() {
        let mut l = Latency::new();
        l.record(Kind::Other, 0, 1);
        l.record(Kind::Other, u64::MAX, 1);
        assert_eq!(l.count(Kind::Other), 2);
    }

    #[test]
    fn workers_add_up_and_reset_empties() {
        let mut a = Latency::new();
        let mut b = Latency::new();
        a.record(Kind::Delete, 1000, 2);
        b.record(Kind::Delete, 2000, 5);
        a.add(&b);
        assert_eq!(a.count(Kind::Delete), 7);
        a.reset();
        assert_eq!(a.count(Kind::Delete), 0);
        assert!(lines(&a).is_empty());
    }

    #[test]
    fn kinds_round_trip_their_index() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_index(kind as u8), kind);
        }
        assert_eq!(Kind::from_index(200), Kind::Other);
    }
}
