//! The workload: a keyspace generated before the run, key popularity, the GET/SET mix and value
//! sizes, all drawn from seeded generators.
//!
//! ```text
//! Keyspace (all keys, built once) ─┐
//! Picker (one per connection, seeded, over its KeySet) → Pick { command, key, value_len }
//!   (+ a multi-get's keys) → client encoder
//! ```
//!
//! Every key is owned by exactly one connection (see `placement.rs`), which writes it during
//! prefill; under `--verify` a connection uses only its own keys, so it always knows the last
//! version it wrote (see `verify.rs`).

use std::fmt;

use rand::{Rng, SeedableRng, rngs::SmallRng};
use std::collections::VecDeque;

use rand_distr::{Distribution, Normal, Zipf};

use crate::placement::KeySet;

/// Longest key memcached accepts.
pub const MAX_KEY_SIZE: usize = 250;

/// How keys are chosen: a rank over the whole keyspace, then placed among the keys the
/// connection may use (see `placement::KeySet::place`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Zipf with exponent `s` over key ranks (rank 0 is the hottest key).
    Zipf(f64),
    /// Normal around the middle of the keyspace with this standard deviation in keys (`None`:
    /// a sixth of the keyspace), drawn again when it falls outside: memtier's `G` pattern with
    /// its default median and `--key-stddev`.
    Gaussian(Option<f64>),
    /// Each connection walks its keys in order from a seeded starting point, wrapping around
    /// (memtier's `S` pattern, per connection).
    Sequential,
}

impl fmt::Display for KeyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDist::Uniform => f.write_str("uniform"),
            KeyDist::Zipf(s) => write!(f, "zipf:{s}"),
            KeyDist::Gaussian(None) => f.write_str("gaussian"),
            KeyDist::Gaussian(Some(sd)) => write!(f, "gaussian:{sd}"),
            KeyDist::Sequential => f.write_str("sequential"),
        }
    }
}

/// Value sizes: one size, a uniform range, or a weighted list (memtier's `--data-size-list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSizes {
    /// Every value this long.
    Fixed(usize),
    /// Uniform in `min..=max`.
    Range(usize, usize),
    /// `(size, weight)` pairs: a size is drawn with probability weight / total weight.
    Weighted(Vec<(usize, u32)>),
}

impl ValueSizes {
    /// The smallest size.
    pub fn min(&self) -> usize {
        match self {
            ValueSizes::Fixed(n) => *n,
            ValueSizes::Range(lo, _) => *lo,
            ValueSizes::Weighted(l) => l.iter().map(|p| p.0).min().unwrap_or(0),
        }
    }

    /// The largest size.
    pub fn max(&self) -> usize {
        match self {
            ValueSizes::Fixed(n) => *n,
            ValueSizes::Range(_, hi) => *hi,
            ValueSizes::Weighted(l) => l.iter().map(|p| p.0).max().unwrap_or(0),
        }
    }

    /// The sizes `min..=max` of a range (a single size when equal).
    pub fn range(min: usize, max: usize) -> ValueSizes {
        if min == max {
            ValueSizes::Fixed(min)
        } else {
            ValueSizes::Range(min, max)
        }
    }
}

impl fmt::Display for ValueSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSizes::Fixed(n) => write!(f, "{n}"),
            ValueSizes::Range(lo, hi) => write!(f, "{lo}-{hi}"),
            ValueSizes::Weighted(l) => {
                for (i, (size, weight)) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{size}:{weight}")?;
                }
                Ok(())
            }
        }
    }
}

/// Every key of the run, generated before it starts: `k` then the zero-padded index, `key_size`
/// bytes each, stored back to back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyspace {
    key_size: usize,
    count: u64,
    bytes: Vec<u8>,
}

/// Why a keyspace cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyspaceError {
    /// No keys asked for.
    Empty,
    /// The key size is 0 or above [`MAX_KEY_SIZE`].
    BadKeySize,
    /// `key_size` bytes cannot hold `k` plus the largest index.
    KeysTooShort {
        /// The smallest key size that works.
        needed: usize,
    },
}

impl fmt::Display for KeyspaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyspaceError::Empty => f.write_str("the keyspace needs at least one key"),
            KeyspaceError::BadKeySize => write!(f, "key size must be 1..={MAX_KEY_SIZE} bytes"),
            KeyspaceError::KeysTooShort { needed } => {
                write!(
                    f,
                    "key size too small for this many keys: need at least {needed} bytes"
                )
            }
        }
    }
}

impl std::error::Error for KeyspaceError {}

impl Keyspace {
    /// Builds `count` distinct keys of exactly `key_size` bytes.
    ///
    /// # Errors
    /// [`KeyspaceError`] when the sizes do not allow it.
    pub fn new(count: u64, key_size: usize) -> Result<Keyspace, KeyspaceError> {
        let total = Self::check(count, key_size)?;
        let mut bytes = Vec::with_capacity(total);
        let width = key_size - 1;
        for i in 0..count {
            bytes.push(b'k');
            bytes.extend_from_slice(format!("{i:0width$}").as_bytes());
        }
        debug_assert_eq!(bytes.len(), total);
        Ok(Keyspace {
            key_size,
            count,
            bytes,
        })
    }

    /// Checks that `count` keys of `key_size` bytes can be built; returns their total size.
    ///
    /// # Errors
    /// [`KeyspaceError`] when the sizes do not allow it.
    pub fn check(count: u64, key_size: usize) -> Result<usize, KeyspaceError> {
        if count == 0 {
            return Err(KeyspaceError::Empty);
        }
        if key_size == 0 || key_size > MAX_KEY_SIZE {
            return Err(KeyspaceError::BadKeySize);
        }
        let digits = (count - 1).to_string().len();
        if key_size < digits + 1 {
            return Err(KeyspaceError::KeysTooShort { needed: digits + 1 });
        }
        let total = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(key_size));
        total.ok_or(KeyspaceError::BadKeySize)
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Always false: a keyspace has at least one key.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes per key.
    pub fn key_size(&self) -> usize {
        self.key_size
    }

    /// The key with index `i`.
    ///
    /// # Panics
    /// If `i >= len()`.
    #[inline]
    pub fn key(&self, i: u64) -> &[u8] {
        let start = i as usize * self.key_size;
        &self.bytes[start..start + self.key_size]
    }
}

/// The command a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Read one key.
    Get,
    /// Write one key.
    Set,
    /// Remove one key.
    Delete,
    /// Read several keys in one request (`--multiget N`).
    MultiGet,
}

/// One request chosen by a [`Picker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// What to do.
    pub command: Command,
    /// Key index in the [`Keyspace`] (the first key of a multi-get).
    pub key: u64,
    /// Value length for a SET (0 otherwise).
    pub value_len: usize,
}

/// Workload parameters shared by all pickers.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    /// Number of keys.
    pub keys: u64,
    /// Key popularity.
    pub key_dist: KeyDist,
    /// Fraction of GETs (multi-gets with `multiget > 1`), 0..=1.
    pub get_ratio: f64,
    /// Fraction of DELETEs, 0..=1 − `get_ratio`; the rest are SETs.
    pub delete_ratio: f64,
    /// Keys per GET: 1 for single-key GETs, more for multi-gets.
    pub multiget: usize,
    /// Value sizes of SETs.
    pub value_sizes: ValueSizes,
}

/// Why a [`Mix`] cannot be sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MixError {
    /// The get ratio is outside 0..=1.
    GetRatio,
    /// The delete ratio is outside 0..=1, or GETs and DELETEs add up to more than 1.
    DeleteRatio,
    /// The zipf exponent is negative or not a number.
    ZipfExponent,
    /// The gaussian standard deviation is not a positive number.
    GaussianDeviation,
    /// The smallest value is larger than the largest.
    ValueRange,
    /// A weighted size list that is empty or whose weights add up to 0.
    ValueWeights,
    /// Zero keys per GET.
    MultiGet,
}

impl fmt::Display for MixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MixError::GetRatio => "get ratio must be between 0 and 1",
            MixError::DeleteRatio => {
                "delete ratio must be between 0 and 1, and get + delete ratio at most 1"
            }
            MixError::ZipfExponent => "zipf exponent must be a number >= 0",
            MixError::GaussianDeviation => "gaussian standard deviation must be a number > 0",
            MixError::ValueRange => "value size range MIN-MAX needs MIN <= MAX",
            MixError::ValueWeights => "a value size list needs sizes with weights above 0",
            MixError::MultiGet => "--multiget needs at least 1 key",
        })
    }
}

impl std::error::Error for MixError {}

impl Mix {
    /// Checks the parameters.
    ///
    /// # Errors
    /// The first [`MixError`] found.
    pub fn check(&self) -> Result<(), MixError> {
        if !(0.0..=1.0).contains(&self.get_ratio) {
            return Err(MixError::GetRatio);
        }
        if !(0.0..=1.0).contains(&self.delete_ratio)
            || self.get_ratio + self.delete_ratio > 1.0 + 1e-9
        {
            return Err(MixError::DeleteRatio);
        }
        match self.key_dist {
            KeyDist::Zipf(s) if !(s >= 0.0 && s.is_finite()) => {
                return Err(MixError::ZipfExponent);
            }
            KeyDist::Gaussian(Some(sd)) if !(sd > 0.0 && sd.is_finite()) => {
                return Err(MixError::GaussianDeviation);
            }
            _ => {}
        }
        match &self.value_sizes {
            ValueSizes::Range(lo, hi) if lo > hi => return Err(MixError::ValueRange),
            ValueSizes::Weighted(l) if l.is_empty() || l.iter().all(|p| p.1 == 0) => {
                return Err(MixError::ValueWeights);
            }
            _ => {}
        }
        if self.multiget == 0 {
            return Err(MixError::MultiGet);
        }
        Ok(())
    }
}

/// Seeded request chooser for one connection.
#[derive(Debug, Clone)]
pub struct Picker {
    rng: SmallRng,
    zipf: Option<Zipf<f64>>,
    gaussian: Option<Normal<f64>>,
    /// Cumulative weights of a weighted size list.
    size_cdf: Vec<u64>,
    /// Sequential: the next position in the connection's key set.
    next_seq: u64,
    mix: Mix,
    keyset: KeySet,
}

impl Picker {
    /// A picker for one connection that picks from `keyset`.
    ///
    /// # Panics
    /// If `mix` does not pass [`Mix::check`] or `keyset` is empty.
    pub fn new(mix: Mix, keyset: KeySet, seed: u64) -> Picker {
        mix.check().expect("workload mix was checked at start-up");
        assert!(!keyset.is_empty(), "a connection needs keys");
        let keys = mix.keys as f64;
        let zipf = match mix.key_dist {
            KeyDist::Zipf(s) => Some(Zipf::new(keys, s).expect("checked zipf parameters")),
            _ => None,
        };
        let gaussian = match mix.key_dist {
            KeyDist::Gaussian(sd) => Some(
                Normal::new(keys / 2.0, sd.unwrap_or(keys / 6.0))
                    .expect("checked gaussian parameters"),
            ),
            _ => None,
        };
        let size_cdf = match &mix.value_sizes {
            ValueSizes::Weighted(l) => l
                .iter()
                .scan(0u64, |acc, p| {
                    *acc += u64::from(p.1);
                    Some(*acc)
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        let next_seq = rng.random_range(0..keyset.len());
        Picker {
            rng,
            zipf,
            gaussian,
            size_cdf,
            next_seq,
            mix,
            keyset,
        }
    }

    /// The next request; a multi-get's keys (the first one included) are appended to `multi`.
    #[inline]
    pub fn pick(&mut self, multi: &mut VecDeque<u64>) -> Pick {
        let r: f64 = self.rng.random();
        let command = if r < self.mix.get_ratio {
            if self.mix.multiget > 1 {
                Command::MultiGet
            } else {
                Command::Get
            }
        } else if r < self.mix.get_ratio + self.mix.delete_ratio {
            Command::Delete
        } else {
            Command::Set
        };
        let key = self.next_key();
        if command == Command::MultiGet {
            multi.push_back(key);
            for _ in 1..self.mix.multiget {
                let k = self.next_key();
                multi.push_back(k);
            }
        }
        let value_len = match command {
            Command::Set => self.value_len(),
            _ => 0,
        };
        Pick {
            command,
            key,
            value_len,
        }
    }

    /// A value length drawn from the configured sizes.
    #[inline]
    pub fn value_len(&mut self) -> usize {
        match &self.mix.value_sizes {
            ValueSizes::Fixed(n) => *n,
            ValueSizes::Range(lo, hi) => self.rng.random_range(*lo..=*hi),
            ValueSizes::Weighted(l) => {
                let total = *self.size_cdf.last().expect("checked non-empty");
                let x = self.rng.random_range(0..total);
                let i = self.size_cdf.partition_point(|&c| c <= x);
                l[i].0
            }
        }
    }

    /// The next key of this connection.
    #[inline]
    pub fn next_key(&mut self) -> u64 {
        let keys = self.mix.keys;
        let rank = match self.mix.key_dist {
            KeyDist::Uniform => self.rng.random_range(0..keys),
            KeyDist::Zipf(_) => {
                let z = self.zipf.as_ref().expect("zipf set up");
                let r: f64 = z.sample(&mut self.rng);
                (r as u64).saturating_sub(1).min(keys - 1)
            }
            KeyDist::Gaussian(_) => {
                let g = self.gaussian.expect("gaussian set up");
                let mut x = g.sample(&mut self.rng);
                // Drawn again when outside the keyspace, as memtier does (bounded, for
                // keyspaces far narrower than the deviation).
                for _ in 0..64 {
                    if x >= 0.0 && x < keys as f64 {
                        break;
                    }
                    x = g.sample(&mut self.rng);
                }
                (x.max(0.0) as u64).min(keys - 1)
            }
            KeyDist::Sequential => {
                let n = self.next_seq;
                self.next_seq = (n + 1) % self.keyset.len();
                return self.keyset.nth(n);
            }
        };
        self.keyset.place(rank, keys)
    }
}

/// Derives the seed of one generator (`stream` names its purpose, `index` its owner) from the
/// run's seed, so that every connection and thread draws an independent, reproducible sequence.
pub fn derive_seed(seed: u64, stream: u64, index: u64) -> u64 {
    let mut x = seed
        ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ index.wrapping_mul(0xd6e8_feb8_6659_fd93);
    x ^= x >> 32;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93);
    x ^= x >> 32;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93);
    x ^ (x >> 32)
}

/// Filler bytes for values when `--verify` is off: printable, seeded, as long as the largest
/// value.
pub fn value_pattern(max_len: usize, seed: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_fa11);
    (0..max_len)
        .map(|_| rng.random_range(b'a'..=b'z'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(keys: u64, key_dist: KeyDist) -> Mix {
        Mix {
            keys,
            key_dist,
            get_ratio: 0.9,
            delete_ratio: 0.0,
            multiget: 1,
            value_sizes: ValueSizes::Range(10, 20),
        }
    }

    fn picks(m: Mix, keyset: KeySet, seed: u64, n: usize) -> Vec<Pick> {
        let mut p = Picker::new(m, keyset, seed);
        let mut multi = VecDeque::new();
        (0..n).map(|_| p.pick(&mut multi)).collect()
    }

    #[test]
    fn keys_are_distinct_fixed_size_and_padded() {
        let ks = Keyspace::new(1_000, 8).unwrap();
        assert_eq!(ks.key(0), b"k0000000");
        assert_eq!(ks.key(999), b"k0000999");
        let set: std::collections::HashSet<&[u8]> = (0..1_000).map(|i| ks.key(i)).collect();
        assert_eq!(set.len(), 1_000);
        assert_eq!(
            Keyspace::new(1_000, 3).unwrap_err(),
            KeyspaceError::KeysTooShort { needed: 4 }
        );
        assert_eq!(Keyspace::new(0, 3).unwrap_err(), KeyspaceError::Empty);
        assert_eq!(
            Keyspace::new(1, 251).unwrap_err(),
            KeyspaceError::BadKeySize
        );
        assert_eq!(Keyspace::new(10, 2).unwrap().key(9), b"k9");
    }

    #[test]
    fn mix_and_sizes_follow_the_parameters() {
        let m = Mix {
            delete_ratio: 0.05,
            ..mix(100, KeyDist::Uniform)
        };
        let picks = picks(m, KeySet::all(100), 1, 100_000);
        let count = |c: Command| picks.iter().filter(|p| p.command == c).count();
        assert!((89_000..91_000).contains(&count(Command::Get)));
        assert!((4_500..5_500).contains(&count(Command::Delete)));
        assert!((4_500..5_500).contains(&count(Command::Set)));
        for pick in &picks {
            assert!(pick.key < 100);
            match pick.command {
                Command::Set => assert!((10..=20).contains(&pick.value_len)),
                _ => assert_eq!(pick.value_len, 0),
            }
        }
    }

    #[test]
    fn weighted_value_sizes_follow_their_weights() {
        let m = Mix {
            get_ratio: 0.0,
            value_sizes: ValueSizes::Weighted(vec![(100, 3), (1_000, 1), (7, 0)]),
            ..mix(10, KeyDist::Uniform)
        };
        let picks = picks(m, KeySet::all(10), 3, 40_000);
        let n100 = picks.iter().filter(|p| p.value_len == 100).count();
        let n1000 = picks.iter().filter(|p| p.value_len == 1_000).count();
        assert_eq!(n100 + n1000, 40_000);
        assert!((29_000..31_000).contains(&n100), "{n100}");
        assert_eq!(
            ValueSizes::Weighted(vec![(100, 3), (1_000, 1)]).to_string(),
            "100:3,1000:1"
        );
    }

    #[test]
    fn multi_gets_carry_their_keys() {
        let m = Mix {
            get_ratio: 1.0,
            multiget: 4,
            ..mix(50, KeyDist::Uniform)
        };
        let mut p = Picker::new(m, KeySet::all(50), 1);
        let mut multi = VecDeque::new();
        for n in 1..=10 {
            let pick = p.pick(&mut multi);
            assert_eq!(pick.command, Command::MultiGet);
            assert_eq!(multi.len(), 4 * n);
            assert_eq!(multi[4 * (n - 1)], pick.key);
        }
    }

    #[test]
    fn zipf_makes_rank_zero_hottest() {
        let mut counts = vec![0u32; 1_000];
        for p in picks(
            mix(1_000, KeyDist::Zipf(1.0)),
            KeySet::all(1_000),
            2,
            100_000,
        ) {
            counts[p.key as usize] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
        // H(1000) ≈ 7.485: rank 0 gets about 13.4 % of requests.
        assert!((12_000..15_000).contains(&counts[0]), "{}", counts[0]);
    }

    fn moments(keys: impl Iterator<Item = u64>) -> (f64, f64) {
        let v: Vec<f64> = keys.map(|k| k as f64).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        (mean, var.sqrt())
    }

    /// memtier's defaults: median in the middle, standard deviation a sixth of the keyspace, so
    /// the keyspace ends at ±3σ; a normal cut there has σ·0.9866 (1 − 6φ(3)/(2Φ(3) − 1)).
    #[test]
    fn gaussian_keys_have_the_normal_moments() {
        let keys = 1_000_000;
        let (mean, sd) = moments(
            picks(
                mix(keys, KeyDist::Gaussian(None)),
                KeySet::all(keys),
                4,
                200_000,
            )
            .iter()
            .map(|p| p.key),
        );
        let sigma = keys as f64 / 6.0;
        assert!((mean - 500_000.0).abs() < 1_500.0, "mean {mean}");
        assert!((sd / (sigma * 0.9866) - 1.0).abs() < 0.01, "sd {sd}");
        // An explicit deviation, far inside the keyspace: plain normal moments.
        let (mean, sd) = moments(
            picks(
                mix(keys, KeyDist::Gaussian(Some(10_000.0))),
                KeySet::all(keys),
                5,
                200_000,
            )
            .iter()
            .map(|p| p.key),
        );
        assert!((mean - 500_000.0).abs() < 100.0, "mean {mean}");
        assert!((sd / 10_000.0 - 1.0).abs() < 0.01, "sd {sd}");
    }

    /// Sequential keys walk the connection's own keys in order and wrap: every key equally
    /// often, mean (n − 1)/2 and the uniform deviation over a whole number of laps.
    #[test]
    fn sequential_keys_walk_in_order_and_cover_uniformly() {
        let keys = 1_000;
        let p = picks(mix(keys, KeyDist::Sequential), KeySet::all(keys), 6, 10_000);
        assert!(p.windows(2).all(|w| w[1].key == (w[0].key + 1) % keys));
        let (mean, sd) = moments(p.iter().map(|p| p.key));
        assert!((mean - 499.5).abs() < 1e-9, "{mean}");
        let uniform_sd = ((keys * keys - 1) as f64 / 12.0).sqrt();
        assert!((sd - uniform_sd).abs() < 1e-6, "{sd}");
        // Within a key set: only its keys, in order.
        let own = KeySet::Stride {
            first: 3,
            step: 4,
            keys,
        };
        let p = picks(mix(keys, KeyDist::Sequential), own, 7, 600);
        assert!(p.iter().all(|p| p.key % 4 == 3));
        assert!(
            p.windows(2)
                .all(|w| w[1].key == w[0].key + 4 || w[1].key == 3)
        );
    }

    #[test]
    fn keys_stay_in_their_set() {
        for keys in [7u64, 10, 64, 1_001] {
            let total = 4;
            for index in 0..total {
                let own = KeySet::Stride {
                    first: index,
                    step: total,
                    keys,
                };
                for dist in [
                    KeyDist::Zipf(0.99),
                    KeyDist::Gaussian(None),
                    KeyDist::Uniform,
                ] {
                    for p in picks(mix(keys, dist), own.clone(), index, 2_000) {
                        assert!(
                            p.key < keys && p.key % total == index,
                            "key {} keys {keys} conn {index}",
                            p.key
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pickers_are_reproducible_from_the_seed() {
        let a = picks(mix(50, KeyDist::Uniform), KeySet::all(50), 5, 100);
        let b = picks(mix(50, KeyDist::Uniform), KeySet::all(50), 5, 100);
        assert_eq!(a, b);
    }

    #[test]
    fn bad_mixes_are_rejected() {
        let mut m = mix(10, KeyDist::Uniform);
        m.get_ratio = 1.5;
        assert_eq!(m.check(), Err(MixError::GetRatio));
        m.get_ratio = 0.9;
        m.delete_ratio = 0.2;
        assert_eq!(m.check(), Err(MixError::DeleteRatio));
        m.delete_ratio = 0.0;
        m.key_dist = KeyDist::Zipf(-1.0);
        assert_eq!(m.check(), Err(MixError::ZipfExponent));
        m.key_dist = KeyDist::Gaussian(Some(0.0));
        assert_eq!(m.check(), Err(MixError::GaussianDeviation));
        m.key_dist = KeyDist::Uniform;
        m.value_sizes = ValueSizes::Range(30, 20);
        assert_eq!(m.check(), Err(MixError::ValueRange));
        m.value_sizes = ValueSizes::Weighted(vec![(5, 0)]);
        assert_eq!(m.check(), Err(MixError::ValueWeights));
        m.value_sizes = ValueSizes::Fixed(5);
        m.multiget = 0;
        assert_eq!(m.check(), Err(MixError::MultiGet));
    }
}
