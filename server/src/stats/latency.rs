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
//! recording is a few shifts and an increment in a histogram allocated up front ([`Histogram`],
//! an HDR histogram: exact below 256 ns, then within 0.8 %): nothing allocates or locks on a
//! request's path.
//!
//! A request waiting behind others of its connection (its turn used up, output backed up)
//! counts that wait; the bytes of a connection that keeps sending while it is served carry
//! the stamp of the first unserved bytes, so a request arriving while earlier ones of the same
//! connection wait is counted from their arrival (an overstatement of at most the wait).
//!
//! Kinds count the store operations a request makes: each key of a multi-key `get` is one
//! `get` (as `cmd_get` counts it), a store one `set`, and so on; a request that makes none
//! (`version`, `stats`, `mn`, an error) is `other`.

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

/// Linear slots per power of two past the exact range (2^7): a recorded time is kept within
/// 1/128 of itself (0.8 %), as an HDR histogram of two significant digits keeps it.
const HALF_BITS: u32 = 7;
/// Times below this are counted exactly.
const EXACT: u64 = 1 << (HALF_BITS + 1);
/// Slots: the exact range, then 128 per power of two up to [`MAX_NS`] (below 2^34).
const SLOTS: usize = ((34 - HALF_BITS as usize) + 1) << HALF_BITS;

/// The quantiles reported, with their names.
pub const QUANTILES: [(&str, f64); 6] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99_9", 0.999),
    ("p99_99", 0.9999),
    ("max", 1.0),
];

/// An HDR (high dynamic range) histogram of nanoseconds: exact below 256 ns, then 128 linear
/// slots per power of two, so every time is kept within 0.8 % from 1 ns to [`MAX_NS`], in a
/// fixed array (28 KiB). Recording is a few shifts and an increment.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    sum_ns: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            counts: vec![0; SLOTS].into_boxed_slice(),
            total: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

/// The slot of a time (at most [`MAX_NS`]).
#[inline]
fn slot(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    // The bits above the top HALF_BITS + 1 are dropped: v >> shift is in 128..256.
    let shift = (63 - ns.leading_zeros()) - HALF_BITS;
    (((shift + 1) as usize) << HALF_BITS) + ((ns >> shift) as usize - (EXACT as usize >> 1))
}

/// The largest time a slot holds.
fn highest_in(slot: usize) -> u64 {
    if (slot as u64) < EXACT {
        return slot as u64;
    }
    let shift = (slot >> HALF_BITS) as u32 - 1;
    let sub = (slot as u64 & ((1 << HALF_BITS) - 1)) + (EXACT >> 1);
    ((sub + 1) << shift) - 1
}

impl Histogram {
    /// Counts `count` times of `ns` nanoseconds (clamped to 1 ns ..= [`MAX_NS`]).
    #[inline]
    pub fn record(&mut self, ns: u64, count: u64) {
        let ns = ns.clamp(1, MAX_NS);
        if let Some(slot) = self.counts.get_mut(slot(ns)) {
            *slot += count;
        }
        self.total += count;
        // 584 years of time summed before it saturates.
        self.sum_ns = self.sum_ns.saturating_add(ns.saturating_mul(count));
        self.max_ns = self.max_ns.max(ns);
    }

    /// Times recorded.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The mean time, in nanoseconds.
    pub fn mean(&self) -> u64 {
        self.sum_ns.checked_div(self.total).unwrap_or(0)
    }

    /// The largest time recorded, exactly.
    pub fn max(&self) -> u64 {
        self.max_ns
    }

    /// The time at `quantile` (0 to 1): the largest value of the slot holding it (as HDR
    /// histograms report it), never above the largest recorded.
    pub fn value_at_quantile(&self, quantile: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (slot, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return highest_in(slot).min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// Adds another histogram's counts.
    pub fn add(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.total += other.total;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Empties it.
    pub fn reset(&mut self) {
        self.counts.fill(0);
        self.total = 0;
        self.sum_ns = 0;
        self.max_ns = 0;
    }
}

/// One histogram per kind, of nanoseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    kinds: [Histogram; KINDS],
}

impl Default for Latency {
    fn default() -> Latency {
        Latency::new()
    }
}

impl Latency {
    /// Empty histograms, allocated now (28 KiB each), never resized.
    pub fn new() -> Latency {
        Latency {
            kinds: std::array::from_fn(|_| Histogram::default()),
        }
    }

    /// Records `count` requests of `kind` that took `ns` nanoseconds (clamped to 1 ns ..
    /// [`MAX_NS`]). Allocates nothing.
    #[inline]
    pub fn record(&mut self, kind: Kind, ns: u64, count: u64) {
        self.kinds[kind as usize].record(ns, count);
    }

    /// Adds another worker's histograms.
    pub fn add(&mut self, other: &Latency) {
        for (mine, theirs) in self.kinds.iter_mut().zip(&other.kinds) {
            mine.add(theirs);
        }
    }

    /// Empties every histogram (`stats reset`).
    pub fn reset(&mut self) {
        self.kinds.iter_mut().for_each(Histogram::reset);
    }

    /// Requests recorded of `kind`.
    pub fn count(&self, kind: Kind) -> u64 {
        self.kinds[kind as usize].len()
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
            emit(&format!("latency:{name}:mean_ns"), &h.mean());
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
    fn slots_keep_every_time_within_one_128th() {
        let mut last = 0;
        let mut ns = 1u64;
        while ns <= MAX_NS {
            let s = slot(ns);
            assert!(s >= last && s < SLOTS, "{ns}: slot {s}");
            last = s;
            let high = highest_in(s);
            assert!(high >= ns, "{ns} in a slot up to {high}");
            assert!((high - ns) as f64 <= ns as f64 / 128.0, "{ns}: {high}");
            ns += 1 + ns / 97;
        }
        assert_eq!(slot(255), 255);
        assert_eq!(slot(256), 256);
        assert_eq!(highest_in(256), 257);
        assert_eq!(slot(MAX_NS), slot(MAX_NS));
    }

    #[test]
    fn quantiles_match_a_sorted_list() {
        let mut h = Histogram::default();
        let mut all = Vec::new();
        let mut x = 12345u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let ns = 100 + (x >> 40) % 5_000_000;
            h.record(ns, 1);
            all.push(ns);
        }
        all.sort_unstable();
        for q in [0.5, 0.9, 0.99, 0.999] {
            let exact = all[((q * all.len() as f64).ceil() as usize).max(1) - 1];
            let got = h.value_at_quantile(q);
            assert!(
                got >= exact && (got - exact) as f64 <= exact as f64 / 128.0,
                "{q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.max(), *all.last().unwrap());
        assert_eq!(h.len(), 20_000);
    }

    #[test]
    fn kinds_round_trip_their_index() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_index(kind as u8), kind);
        }
        assert_eq!(Kind::from_index(200), Kind::Other);
    }
}
