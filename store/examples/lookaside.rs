//! Miss ratio of one shard used as a look-aside cache, as `scripts/bench-capacity.sh`
//! measures it through a server, in seconds rather than minutes: a seeded stream of GETs over
//! 2,000,000 keys with Zipf popularity, each miss followed by a SET of a 100-byte value, in
//! batches of 100 GETs whose misses are set after the batch; the first third warms up. The
//! stream is the script's in kind (keys, sizes, skew, length, batching), not its draws, so the
//! figures agree with the script's to about the third decimal.
//!
//! Beside the miss ratio it prints two bounds of the stream that no eviction policy passes:
//! the share of counted GETs for a key not requested before (a miss in any cache), and a
//! popularity oracle, a cache that holds the most popular keys, as many as the shard held at
//! the end (with requests drawn independently, keeping the most popular keys misses least).
//!
//! ```text
//! cargo run --release -p store --example lookaside -- [MEMORY_MB (64)] [ALPHA ... (0.99 0.8)]
//! ```

use store::{Shard, ShardConfig, StoreMode, Write};

const KEYS: usize = 2_000_000;
const REQUESTS: usize = 3_000_000;
const WARMUP: usize = REQUESTS / 3;
const BATCH: usize = 100;
const VALUE_LEN: usize = 100;
const SEED: u64 = 20_261_207;
/// Any fixed second: nothing in the stream expires.
const NOW: u64 = 1_700_000_000;

/// splitmix64: a small seeded generator, enough for a reproducible stream.
struct Rng(u64);

impl Rng {
    /// A uniform draw in [0, 1).
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `REQUESTS` key numbers drawn with Zipf(`alpha`) popularity over `KEYS` keys: key `i` has
/// rank `i + 1`.
fn stream(alpha: f64) -> Vec<u32> {
    let mut cumulative = Vec::with_capacity(KEYS);
    let mut total = 0.0;
    for rank in 1..=KEYS {
        total += (rank as f64).powf(-alpha);
        cumulative.push(total);
    }
    let mut rng = Rng(SEED);
    (0..REQUESTS)
        .map(|_| {
            let x = rng.next_f64() * total;
            cumulative.partition_point(|&c| c <= x).min(KEYS - 1) as u32
        })
        .collect()
}

/// The script's key for number `i`: `k` and ten digits (11 bytes).
fn key(i: u32) -> [u8; 11] {
    let mut k = *b"k0000000000";
    let mut n = i;
    for digit in k[1..].iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// What one run counted.
struct Run {
    miss_ratio: f64,
    first_ratio: f64,
    oracle_ratio: f64,
    items: u64,
    evictions: u64,
    evicted_unfetched: u64,
}

fn run(memory_mb: usize, stream: &[u32]) -> Run {
    let mut shard = Shard::new(ShardConfig {
        memory_limit_bytes: memory_mb << 20,
        max_item_size: 1 << 20,
    });
    let value = [b'x'; VALUE_LEN];
    let (mut counted, mut misses) = (0usize, 0usize);
    let mut missed = Vec::with_capacity(BATCH);
    for (n, batch) in stream.chunks(BATCH).enumerate() {
        missed.clear();
        for &i in batch {
            if shard.get(&key(i), NOW).is_none() {
                missed.push(i);
            }
        }
        for &i in &missed {
            shard
                .store(Write::new(StoreMode::Set, &key(i), &value), NOW)
                .expect("a set with eviction on is stored");
        }
        if n * BATCH >= WARMUP {
            counted += batch.len();
            misses += missed.len();
        }
    }
    let stats = shard.stats();
    let held = stats.curr_items;
    let mut seen = vec![false; KEYS];
    let (mut first, mut oracle) = (0usize, 0usize);
    for (n, &i) in stream.iter().enumerate() {
        let new = !seen[i as usize];
        seen[i as usize] = true;
        if n >= WARMUP {
            first += usize::from(new);
            oracle += usize::from(new || u64::from(i) >= held);
        }
    }
    Run {
        miss_ratio: misses as f64 / counted as f64,
        first_ratio: first as f64 / counted as f64,
        oracle_ratio: oracle as f64 / counted as f64,
        items: held,
        evictions: stats.evictions,
        evicted_unfetched: stats.evicted_unfetched,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let memory_mb: usize = args.next().map_or(64, |a| a.parse().expect("MEMORY_MB"));
    let mut alphas: Vec<f64> = args.map(|a| a.parse().expect("ALPHA")).collect();
    if alphas.is_empty() {
        alphas = vec![0.99, 0.8];
    }
    println!(
        "| alpha | miss ratio | first requests | popularity oracle | items at the end \
         | evictions | evicted unfetched |"
    );
    println!("|---|---|---|---|---|---|---|");
    for alpha in alphas {
        let r = run(memory_mb, &stream(alpha));
        println!(
            "| {alpha} | {:.4} | {:.4} | {:.4} | {} | {} | {} |",
            r.miss_ratio, r.first_ratio, r.oracle_ratio, r.items, r.evictions, r.evicted_unfetched
        );
    }
}
