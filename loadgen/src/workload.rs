//! The workload: a keyspace generated before the run, key popularity, the GET/SET mix and value
//! sizes, all drawn from seeded generators.
//!
//! ```text
//! Keyspace (all keys, built once) ─┐
//! Picker (one per connection, seeded) → Pick { command, key, value_len } → client encoder
//! ```
//!
//! Under `--verify` every key belongs to exactly one connection (`key % connections ==
//! connection`), so a connection always knows the last version it wrote; see `verify.rs`.

use std::fmt;

use rand::{Rng, SeedableRng, rngs::SmallRng};
use rand_distr::{Distribution, Zipf};

/// Longest key memcached accepts.
pub const MAX_KEY_SIZE: usize = 250;

/// How keys are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Zipf with exponent `s` over key ranks (rank 0 is the hottest key).
    Zipf(f64),
}

impl fmt::Display for KeyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDist::Uniform => f.write_str("uniform"),
            KeyDist::Zipf(s) => write!(f, "zipf:{s}"),
        }
    }
}

/// Every key of the run, generated before it starts: `k` then the zero-padded index, `key_size`
/// bytes each, stored back to back.
#[derive(Debug, Clone)]
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
}

/// One request chosen by a [`Picker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// GET or SET.
    pub command: Command,
    /// Key index in the [`Keyspace`].
    pub key: u64,
    /// Value length for a SET (0 for a GET).
    pub value_len: usize,
}

/// Workload parameters shared by all pickers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    /// Number of keys.
    pub keys: u64,
    /// Key popularity.
    pub key_dist: KeyDist,
    /// Fraction of GETs, 0..=1.
    pub get_ratio: f64,
    /// Smallest value, bytes.
    pub value_min: usize,
    /// Largest value, bytes (inclusive).
    pub value_max: usize,
}

/// Why a [`Mix`] cannot be sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MixError {
    /// The get ratio is outside 0..=1.
    GetRatio,
    /// The zipf exponent is negative or not a number.
    ZipfExponent,
    /// The smallest value is larger than the largest.
    ValueRange,
}

impl fmt::Display for MixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MixError::GetRatio => "get ratio must be between 0 and 1",
            MixError::ZipfExponent => "zipf exponent must be a number >= 0",
            MixError::ValueRange => "value size range MIN-MAX needs MIN <= MAX",
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
        if let KeyDist::Zipf(s) = self.key_dist
            && !(s >= 0.0 && s.is_finite())
        {
            return Err(MixError::ZipfExponent);
        }
        if self.value_min > self.value_max {
            return Err(MixError::ValueRange);
        }
        Ok(())
    }
}

/// Which keys a connection may use: all of them, or (under `--verify`) only its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Any connection may send any key.
    Shared,
    /// Key `k` belongs to connection `k % total`; this picker serves connection `index`.
    Owned {
        /// This connection's global index.
        index: u64,
        /// Number of connections in the run.
        total: u64,
    },
}

impl Ownership {
    /// Moves key `k` into this connection's residue class, staying in the same block of
    /// `total` ranks so the popularity shape is kept.
    #[inline]
    pub fn place(self, k: u64, keys: u64) -> u64 {
        match self {
            Ownership::Shared => k,
            Ownership::Owned { index, total } => {
                let placed = k - k % total + index;
                if placed >= keys {
                    placed - total
                } else {
                    placed
                }
            }
        }
    }

    /// Iterates over the keys this connection owns (all keys when shared).
    pub fn owned_keys(self, keys: u64) -> impl Iterator<Item = u64> {
        let (start, step) = match self {
            Ownership::Shared => (0, 1),
            Ownership::Owned { index, total } => (index, total),
        };
        (start..keys).step_by(step as usize)
    }
}

/// Seeded request chooser for one connection.
#[derive(Debug, Clone)]
pub struct Picker {
    rng: SmallRng,
    zipf: Option<Zipf<f64>>,
    mix: Mix,
    ownership: Ownership,
}

impl Picker {
    /// A picker for one connection.
    ///
    /// # Panics
    /// If `mix` does not pass [`Mix::check`].
    pub fn new(mix: Mix, ownership: Ownership, seed: u64) -> Picker {
        mix.check().expect("workload mix was checked at start-up");
        let zipf = match mix.key_dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(s) => {
                Some(Zipf::new(mix.keys as f64, s).expect("checked zipf parameters"))
            }
        };
        Picker {
            rng: SmallRng::seed_from_u64(seed),
            zipf,
            mix,
            ownership,
        }
    }

    /// The next request.
    #[inline]
    pub fn pick(&mut self) -> Pick {
        let command = if self.rng.random::<f64>() < self.mix.get_ratio {
            Command::Get
        } else {
            Command::Set
        };
        let rank = self.key_rank();
        let key = self.ownership.place(rank, self.mix.keys);
        let value_len = match command {
            Command::Get => 0,
            Command::Set => self.value_len(),
        };
        Pick {
            command,
            key,
            value_len,
        }
    }

    /// A value length from the configured range.
    #[inline]
    pub fn value_len(&mut self) -> usize {
        if self.mix.value_min == self.mix.value_max {
            self.mix.value_min
        } else {
            self.rng
                .random_range(self.mix.value_min..=self.mix.value_max)
        }
    }

    fn key_rank(&mut self) -> u64 {
        match &self.zipf {
            None => self.rng.random_range(0..self.mix.keys),
            Some(z) => {
                let r: f64 = z.sample(&mut self.rng);
                (r as u64).saturating_sub(1).min(self.mix.keys - 1)
            }
        }
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
            value_min: 10,
            value_max: 20,
        }
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
        let mut p = Picker::new(mix(100, KeyDist::Uniform), Ownership::Shared, 1);
        let picks: Vec<Pick> = (0..100_000).map(|_| p.pick()).collect();
        let gets = picks.iter().filter(|p| p.command == Command::Get).count();
        assert!((89_000..91_000).contains(&gets), "{gets}");
        for pick in &picks {
            assert!(pick.key < 100);
            match pick.command {
                Command::Get => assert_eq!(pick.value_len, 0),
                Command::Set => assert!((10..=20).contains(&pick.value_len)),
            }
        }
    }

    #[test]
    fn zipf_makes_rank_zero_hottest() {
        let mut p = Picker::new(mix(1_000, KeyDist::Zipf(1.0)), Ownership::Shared, 2);
        let mut counts = vec![0u32; 1_000];
        for _ in 0..100_000 {
            counts[p.pick().key as usize] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
        // H(1000) ≈ 7.485: rank 0 gets about 13.4 % of requests.
        assert!((12_000..15_000).contains(&counts[0]), "{}", counts[0]);
    }

    #[test]
    fn owned_keys_stay_with_their_connection() {
        for keys in [7u64, 10, 64, 1_001] {
            let total = 4;
            for index in 0..total {
                let own = Ownership::Owned { index, total };
                let mut p = Picker::new(mix(keys, KeyDist::Zipf(0.99)), own, index);
                for _ in 0..2_000 {
                    let k = p.pick().key;
                    assert!(
                        k < keys && k % total == index,
                        "key {k} keys {keys} conn {index}"
                    );
                }
                assert!(own.owned_keys(keys).all(|k| k % total == index));
            }
            let all: u64 = (0..total)
                .map(|index| Ownership::Owned { index, total }.owned_keys(keys).count() as u64)
                .sum();
            assert_eq!(all, keys);
        }
    }

    #[test]
    fn pickers_are_reproducible_from_the_seed() {
        let a: Vec<Pick> = {
            let mut p = Picker::new(mix(50, KeyDist::Uniform), Ownership::Shared, 5);
            (0..100).map(|_| p.pick()).collect()
        };
        let mut p = Picker::new(mix(50, KeyDist::Uniform), Ownership::Shared, 5);
        assert!(a.iter().all(|x| *x == p.pick()));
    }

    #[test]
    fn bad_mixes_are_rejected() {
        let mut m = mix(10, KeyDist::Uniform);
        m.get_ratio = 1.5;
        assert_eq!(m.check(), Err(MixError::GetRatio));
        let mut m = mix(10, KeyDist::Zipf(-1.0));
        assert_eq!(m.check(), Err(MixError::ZipfExponent));
        m.key_dist = KeyDist::Uniform;
        m.value_min = 30;
        assert_eq!(m.check(), Err(MixError::ValueRange));
    }
}
