//! A loop of GET hits on one shard, for looking at what a hit costs outside criterion: under
//! `valgrind --tool=cachegrind` (instructions a GET), `perf record`, or timed as it is. The
//! keys and values are `benches/shard.rs`'s (16-byte keys, 32-byte values, a 256 MiB
//! budget), stored in order, then read `ITERS` times stepping `STRIDE` keys at a time (the
//! bench's 7919 by default; 1 reads the items in the order they lie in their segments).
//!
//! ```text
//! KEYS=10000 ITERS=2000000 STRIDE=7919 cargo run --release -p store --example get_loop
//! ```
//!
//! Prints the time per GET, and the total of the values' lengths (so nothing is optimised
//! away).

use std::hint::black_box;
use std::time::Instant;

use store::{Shard, ShardConfig, StoreMode, Write};

#[path = "../benches/support/keys.rs"]
mod support;

const NOW: u64 = 1_700_000_000;

/// The environment variable `name` as a number, or `default`.
fn env(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

fn main() {
    let keys = env("KEYS", 10_000).max(1);
    let iters = env("ITERS", 2_000_000);
    let stride = env("STRIDE", 7919) % keys;
    let keys = support::keys(keys);
    let mut shard = Shard::new(ShardConfig {
        memory_limit_bytes: 256 << 20,
        max_item_size: 1 << 20,
    });
    let value = [b'v'; 32];
    for k in &keys {
        shard
            .store(Write::new(StoreMode::Set, k, &value), NOW)
            .expect("room for every key");
    }
    let (mut i, mut total) = (0usize, 0usize);
    let start = Instant::now();
    for _ in 0..iters {
        i += stride;
        if i >= keys.len() {
            i -= keys.len();
        }
        total += shard
            .get(black_box(&keys[i]), NOW)
            .map_or(0, |v| v.value.len());
    }
    let elapsed = start.elapsed();
    println!(
        "{:.1} ns a GET over {} keys, stride {stride} (values: {total} bytes)",
        elapsed.as_nanos() as f64 / iters.max(1) as f64,
        keys.len()
    );
}
