//! Shard operation costs: `cargo bench -p store -- shard/`.
//!
//! Keys are generated before the run (16 bytes, `key:` plus 12 hex digits); values are
//! 32 bytes. Results pass through `black_box`. The plain names use 10 000 keys (about
//! 1.3 MiB of table and blocks, cache-resident: the store's own cost); `_cold` uses
//! 1 000 000 keys (about 130 MiB, so most lookups miss the caches, as on a big server).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use store::{Shard, ShardConfig, StoreMode, Write};

const NOW: u64 = 1_700_000_000;
/// Cache-resident keyspace.
const KEYS: usize = 10_000;
/// Keyspace far beyond L2 (and most of a shared L3).
const COLD_KEYS: usize = 1_000_000;

#[path = "support/keys.rs"]
mod support;
use support::keys;

fn shard(memory_limit_bytes: usize) -> Shard {
    Shard::new(ShardConfig {
        memory_limit_bytes,
        max_item_size: 1 << 20,
    })
}

fn bench(c: &mut Criterion) {
    let value = [b'v'; 32];
    let keys = keys(KEYS);

    let mut group = c.benchmark_group("shard");
    group.throughput(Throughput::Elements(1));

    // GET hit: every key present, visited in a fixed pseudo-random order.
    let mut s = shard(256 << 20);
    for k in &keys {
        s.store(Write::new(StoreMode::Set, k, &value), NOW).unwrap();
    }
    let mut i = 0usize;
    group.bench_function("get_hit/key16/value32", |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            let v = s.get(black_box(&keys[i]), NOW).map(|v| v.value.len());
            black_box(v)
        })
    });

    let misses = self::keys(2 * KEYS);
    let mut i = 0usize;
    group.bench_function("get_miss/key16", |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            black_box(s.get(black_box(&misses[KEYS + i]), NOW).is_some())
        })
    });

    // SET over existing keys with room to spare: the in-place overwrite path.
    let mut i = 0usize;
    group.bench_function("set/key16/value32", |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            black_box(s.store(Write::new(StoreMode::Set, black_box(&keys[i]), &value), NOW))
        })
    });
    drop(s);

    // GET hit over a large keyspace: dominated by cache misses (control byte, bucket, block).
    let cold = self::keys(COLD_KEYS);
    let mut s = shard(1 << 30);
    for k in &cold {
        s.store(Write::new(StoreMode::Set, k, &value), NOW).unwrap();
    }
    let mut i = 0usize;
    group.bench_function("get_hit_cold/key16/value32", |b| {
        b.iter(|| {
            i = (i + 7919) % COLD_KEYS;
            let v = s.get(black_box(&cold[i]), NOW).map(|v| v.value.len());
            black_box(v)
        })
    });

    // One step of the LRU crawler over the large table (what a worker does per loop iteration
    // during `lru_crawler crawl`): 256 live items looked at, in bucket order.
    let mut cursor = 0usize;
    group.throughput(Throughput::Elements(256));
    group.bench_function("crawl_step/256_items_cold", |b| {
        b.iter(|| {
            let step = s.crawl(cursor, 256, NOW);
            cursor = if step.next >= s.num_buckets() {
                0
            } else {
                step.next
            };
            black_box(step.checked)
        })
    });
    // The cold GETs above, 16 keys at a time (a pipelined frame's GETs), without and with
    // prefetching first, as the server does: every block (`Hint::block`, which reads the
    // bucket), or every bucket and then every block (`Hint::bucket`, then `Hint::block`). The
    // misses of the 16 then overlap. Per element, one GET.
    let mut i = 0usize;
    let mut batch = [0usize; 16];
    let next_batch = |i: &mut usize, batch: &mut [usize; 16]| {
        for slot in batch.iter_mut() {
            *i = (*i + 7919) % COLD_KEYS;
            *slot = *i;
        }
    };
    group.throughput(Throughput::Elements(16));
    group.bench_function("get_hit_cold_x16/key16/value32", |b| {
        b.iter(|| {
            next_batch(&mut i, &mut batch);
            for &k in &batch {
                let v = s.get(black_box(&cold[k]), NOW).map(|v| v.value.len());
                black_box(v);
            }
        })
    });
    group.bench_function("get_hit_cold_x16_prefetched/key16/value32", |b| {
        b.iter(|| {
            next_batch(&mut i, &mut batch);
            for &k in &batch {
                if let Some(hint) = s.hint(black_box(&cold[k])) {
                    prefetch_lines(hint.block());
                }
            }
            for &k in &batch {
                let v = s.get(black_box(&cold[k]), NOW).map(|v| v.value.len());
                black_box(v);
            }
        })
    });
    group.bench_function("get_hit_cold_x16_prefetched_2stage/key16/value32", |b| {
        b.iter(|| {
            next_batch(&mut i, &mut batch);
            prefetch_two_stage(&s, &cold, &batch);
            for &k in &batch {
                let v = s.get(black_box(&cold[k]), NOW).map(|v| v.value.len());
                black_box(v);
            }
        })
    });
    // SETs over existing cold keys, 16 at a time, with the two-stage prefetch: the same-length
    // overwrite rewrites each block in place.
    group.bench_function("set_cold_x16_prefetched_2stage/key16/value32", |b| {
        b.iter(|| {
            next_batch(&mut i, &mut batch);
            prefetch_two_stage(&s, &cold, &batch);
            for &k in &batch {
                let r = s.store(Write::new(StoreMode::Set, black_box(&cold[k]), &value), NOW);
                black_box(r.is_ok());
            }
        })
    });
    group.throughput(Throughput::Elements(1));
    drop(s);
    drop(cold);

    // SET of ever-new keys into a full 4 MiB budget: every store evicts one item.
    let many = self::keys(1_000_000);
    let mut s = shard(4 << 20);
    for k in &many[..200_000] {
        s.store(Write::new(StoreMode::Set, k, &value), NOW).unwrap();
    }
    assert!(
        s.stats().evictions > 0,
        "the budget is full before measuring"
    );
    let mut i = 0usize;
    group.bench_function("set_evicting/key16/value32", |b| {
        b.iter(|| {
            i = (i + 1) % many.len();
            black_box(s.store(Write::new(StoreMode::Set, black_box(&many[i]), &value), NOW))
        })
    });
    group.finish();
}

/// The server's two-stage prefetch of a pipeline's keys: every key's bucket, then (the
/// buckets arriving meanwhile) every key's block.
fn prefetch_two_stage(s: &Shard, cold: &[[u8; 16]], batch: &[usize; 16]) {
    let mut hints = [None; 16];
    for (hint, &k) in hints.iter_mut().zip(batch) {
        let bucket = s.bucket_hint(black_box(&cold[k]));
        prefetch(bucket.bucket());
        *hint = Some(bucket);
    }
    for hint in hints.iter().flatten() {
        if let Some(item) = s.item_hint(*hint) {
            prefetch_lines(item);
        }
    }
}

/// The prefetches the server issues (`server/src/engine/core.rs`): the first and last cache
/// lines of a block, and the one line holding an address.
fn prefetch_lines(bytes: &[u8]) {
    prefetch(bytes.as_ptr());
    prefetch(bytes.as_ptr().wrapping_add(bytes.len().saturating_sub(1)));
}

fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch never faults and reads nothing the program sees.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at.cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

criterion_group!(benches, bench);
criterion_main!(benches);
