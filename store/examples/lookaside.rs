//! Miss ratio of one shard used as a look-aside cache, as `scripts/bench-capacity.sh`
//! measures it through a server, in seconds rather than minutes: a seeded stream of GETs over
//! 2,000,000 keys with Zipf popularity, each miss followed by a SET of a 100-byte value, in
//! batches of 100 GETs whose misses are set after the batch; the first third warms up. The
//! stream is the script's in kind (keys, sizes, skew, length, batching), not its draws, so the
//! figures agree with the script's to about the third decimal.
//!
//! Beside the miss ratio it prints three figures of the stream, each for a cache holding as
//! many items as the shard held at the end: the share of counted GETs for a key not
//! requested before (a miss in any cache, whatever its size); Belady's MIN, which evicts the
//! key used again last and knows the future (no policy misses less with that many items);
//! a cache that knows the popularity and holds the most popular keys requested so far
//! (with requests drawn independently, as here, the least a policy that does not know the
//! future misses); and three policies that learn from the stream, simulated item by item:
//! FIFO with a second chance (a 2-bit counter raised by each hit, as the store keeps it per
//! item), S3-FIFO (a small FIFO of a tenth for new keys, a ghost list of keys evicted from
//! it, a main FIFO with the same counter; SOSP '23) and frequency admission in front of the
//! first (TinyLFU with exact counts: a missed key enters only if asked for more often than
//! the key it would evict). With `SIZES=N,N,...` it also prints those policies' miss ratios
//! with caches of those item counts, to see how many items a miss ratio takes.
//!
//! ```text
//! cargo run --release -p store --example lookaside -- [MEMORY_MB (64)] [ALPHA ... (0.99 0.8)]
//! ```

use std::collections::VecDeque;

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
    belady_ratio: f64,
    popular_ratio: f64,
    clock_ratio: f64,
    s3fifo_ratio: f64,
    tiny_lfu_ratio: f64,
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
    let held = stats.curr_items as usize;
    let (first, belady, popular) = bounds(stream, held);
    Run {
        miss_ratio: misses as f64 / counted as f64,
        first_ratio: first as f64 / counted as f64,
        belady_ratio: belady as f64 / counted as f64,
        popular_ratio: popular as f64 / counted as f64,
        clock_ratio: clock_fifo(stream, held) as f64 / counted as f64,
        s3fifo_ratio: s3_fifo(stream, held) as f64 / counted as f64,
        tiny_lfu_ratio: tiny_lfu(stream, held) as f64 / counted as f64,
        items: stats.curr_items,
        evictions: stats.evictions,
        evicted_unfetched: stats.evicted_unfetched,
    }
}

/// Counted misses of three caches of `held` items on `stream`: first requests only, Belady's
/// MIN, and the most popular keys requested so far (key `i` has rank `i + 1`).
fn bounds(stream: &[u32], held: usize) -> (usize, usize, usize) {
    // Where each request's key is asked for next (`u32::MAX`: never).
    let mut next = vec![u32::MAX; stream.len()];
    let mut later = vec![u32::MAX; KEYS];
    for (n, &i) in stream.iter().enumerate().rev() {
        next[n] = later[i as usize];
        later[i as usize] = n as u32;
    }
    // Belady's MIN with bypass: a max-heap of (next use, key), stale pairs skipped.
    let mut cached = vec![None::<u32>; KEYS];
    let (mut len, mut belady) = (0usize, 0usize);
    let mut heap = std::collections::BinaryHeap::new();
    // The most popular keys requested so far: a Fenwick tree counts the keys seen below a rank.
    let mut tree = vec![0u32; KEYS + 1];
    let mut seen = vec![false; KEYS];
    let (mut first, mut popular) = (0usize, 0usize);
    for (n, &i) in stream.iter().enumerate() {
        let k = i as usize;
        let counted = n >= WARMUP;
        let new = !seen[k];
        if new {
            seen[k] = true;
            let mut at = k + 1;
            while at <= KEYS {
                tree[at] += 1;
                at += at & at.wrapping_neg();
            }
        } else {
            let (mut more_popular, mut at) = (0usize, k);
            while at > 0 {
                more_popular += tree[at] as usize;
                at &= at - 1;
            }
            popular += usize::from(counted && more_popular >= held);
        }
        first += usize::from(counted && new);
        popular += usize::from(counted && new);
        if cached[k].is_none() {
            belady += usize::from(counted);
            len += 1;
        }
        cached[k] = Some(next[n]);
        heap.push((next[n], i));
        while len > held {
            let (use_at, victim) = heap.pop().expect("the heap holds every cached key");
            if cached[victim as usize] == Some(use_at) {
                cached[victim as usize] = None;
                len -= 1;
            }
        }
    }
    (first, belady, popular)
}

/// A request of cached key `k` (`counter[k]` is `Some`) raises its counter, up to 3; false
/// for a key not cached.
fn hit(counter: &mut [Option<u8>], k: usize) -> bool {
    match counter[k].as_mut() {
        Some(c) => {
            *c = (*c + 1).min(3);
            true
        }
        None => false,
    }
}

/// The hand's step over the oldest key of `fifo`: one with a counter above 0 goes to the
/// tail, its counter lowered; any other leaves the cache.
fn second_chance(fifo: &mut VecDeque<u32>, counter: &mut [Option<u8>]) {
    let v = fifo.pop_front().expect("a full cache holds keys");
    match counter[v as usize].as_mut() {
        Some(c) if *c > 0 => {
            *c -= 1;
            fifo.push_back(v);
        }
        _ => counter[v as usize] = None,
    }
}

/// Counted misses of a cache whose hits raise a key's counter ([`hit`]) and whose misses
/// `admit` takes: it makes room and caches the key (its counter `Some(0)`).
fn replay(stream: &[u32], mut admit: impl FnMut(u32, &mut [Option<u8>])) -> usize {
    let mut counter = vec![None::<u8>; KEYS];
    let mut misses = 0;
    for (n, &i) in stream.iter().enumerate() {
        if !hit(&mut counter, i as usize) {
            misses += usize::from(n >= WARMUP);
            admit(i, &mut counter);
        }
    }
    misses
}

/// Counted misses of FIFO with a second chance over `held` items: a hit raises the key's
/// counter (up to 3); the hand gives a key with a counter above 0 another turn, lowering it.
fn clock_fifo(stream: &[u32], held: usize) -> usize {
    let mut fifo = VecDeque::with_capacity(held + 1);
    replay(stream, |i, counter| {
        while fifo.len() >= held.max(1) {
            second_chance(&mut fifo, counter);
        }
        counter[i as usize] = Some(0);
        fifo.push_back(i);
    })
}

/// Counted misses of S3-FIFO over `held` items: new keys enter a small FIFO of a tenth of
/// them; leaving it, a key hit since it entered moves to the main FIFO, any other is evicted
/// and remembered in a ghost FIFO of as many keys as the cache holds; a missed key still in
/// the ghost list enters the main FIFO directly. The main FIFO gives a second chance as
/// [`clock_fifo`] does.
fn s3_fifo(stream: &[u32], held: usize) -> usize {
    let held = held.max(2);
    let small_cap = (held / 10).max(1);
    // Where each key was added to the ghost list (by count of additions), while it is there.
    let mut ghost_at = vec![None::<u64>; KEYS];
    let (mut small, mut main, mut ghost) = (VecDeque::new(), VecDeque::new(), VecDeque::new());
    let mut ghosts_added = 0u64;
    replay(stream, |i, counter| {
        while small.len() + main.len() >= held {
            if small.len() >= small_cap || main.is_empty() {
                let v: u32 = small.pop_front().expect("the small FIFO holds keys");
                if counter[v as usize].is_some_and(|c| c > 0) {
                    counter[v as usize] = Some(0);
                    main.push_back(v);
                } else {
                    counter[v as usize] = None;
                    ghost_at[v as usize] = Some(ghosts_added);
                    ghost.push_back((v, ghosts_added));
                    ghosts_added += 1;
                    if ghost.len() > held {
                        let (old, at) = ghost.pop_front().expect("the ghost list holds keys");
                        if ghost_at[old as usize] == Some(at) {
                            ghost_at[old as usize] = None;
                        }
                    }
                }
            } else {
                second_chance(&mut main, counter);
            }
        }
        counter[i as usize] = Some(0);
        if ghost_at[i as usize].take().is_some() {
            main.push_back(i);
        } else {
            small.push_back(i);
        }
    })
}

/// Counted misses of frequency admission in front of FIFO with a second chance over `held`
/// items (TinyLFU, TOS '17, with exact counts where it keeps a sketch): every request counts
/// its key, all counts halve every `10 * held` requests, and a missed key enters a full cache
/// only if it was asked for more often than the key the hand would evict. A key turned away
/// is not cached at all: to a memcached client, a SET acknowledged and then a miss.
fn tiny_lfu(stream: &[u32], held: usize) -> usize {
    let held = held.max(1);
    let mut count = vec![0u32; KEYS];
    let mut counter = vec![None::<u8>; KEYS];
    let mut fifo = VecDeque::with_capacity(held + 1);
    let mut misses = 0;
    for (n, &i) in stream.iter().enumerate() {
        let k = i as usize;
        if n > 0 && n % (10 * held) == 0 {
            count.iter_mut().for_each(|c| *c /= 2);
        }
        count[k] += 1;
        if hit(&mut counter, k) {
            continue;
        }
        misses += usize::from(n >= WARMUP);
        if fifo.len() >= held {
            // The hand's next victim: keys with a counter above 0 go round, lowered.
            while let Some(&v) = fifo.front()
                && counter[v as usize].is_some_and(|c| c > 0)
            {
                second_chance(&mut fifo, &mut counter);
            }
            let v = *fifo.front().expect("a full cache holds keys");
            if count[k] <= count[v as usize] {
                continue;
            }
            second_chance(&mut fifo, &mut counter);
        }
        counter[k] = Some(0);
        fifo.push_back(i);
    }
    misses
}

fn main() {
    let mut args = std::env::args().skip(1);
    let memory_mb: usize = args.next().map_or(64, |a| a.parse().expect("MEMORY_MB"));
    let mut alphas: Vec<f64> = args.map(|a| a.parse().expect("ALPHA")).collect();
    if alphas.is_empty() {
        alphas = vec![0.99, 0.8];
    }
    println!(
        "| alpha | miss ratio | first requests | Belady's MIN | most popular seen \
         | FIFO, second chance | S3-FIFO | TinyLFU | items at the end | evictions \
         | evicted unfetched |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let sizes: Vec<usize> = std::env::var("SIZES").map_or(Vec::new(), |v| {
        v.split(',')
            .map(|n| n.trim().parse().expect("SIZES"))
            .collect()
    });
    let mut by_size = Vec::new();
    for alpha in alphas {
        let stream = stream(alpha);
        let r = run(memory_mb, &stream);
        println!(
            "| {alpha} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {} | {} | {} |",
            r.miss_ratio,
            r.first_ratio,
            r.belady_ratio,
            r.popular_ratio,
            r.clock_ratio,
            r.s3fifo_ratio,
            r.tiny_lfu_ratio,
            r.items,
            r.evictions,
            r.evicted_unfetched
        );
        let counted = (REQUESTS - WARMUP) as f64;
        for &items in &sizes {
            let clock = clock_fifo(&stream, items) as f64 / counted;
            let s3 = s3_fifo(&stream, items) as f64 / counted;
            let lfu = tiny_lfu(&stream, items) as f64 / counted;
            by_size.push(format!(
                "| {alpha} | {items} | {clock:.4} | {s3:.4} | {lfu:.4} |"
            ));
        }
    }
    if !by_size.is_empty() {
        println!();
        println!("| alpha | items | FIFO, second chance | S3-FIFO | TinyLFU |");
        println!("|---|---|---|---|---|");
        for row in by_size {
            println!("{row}");
        }
    }
}
