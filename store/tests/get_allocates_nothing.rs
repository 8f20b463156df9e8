//! A GET hit allocates nothing; a store allocates nothing unless it takes a new segment or the
//! table doubles.
//!
//! Counts allocations made by this thread through a wrapping global allocator. This
//! file is its own test binary, so the allocator affects nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use store::{Arith, Shard, ShardConfig, StoreMode, Write};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System` upholds the `GlobalAlloc` contract; the counter is a const-initialised
// thread-local `Cell`, which neither allocates nor re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's `layout` contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn get_hit_and_store_into_the_open_segment_allocate_nothing() {
    const NOW: u64 = 1_700_000_000;
    let mut s = Shard::new(ShardConfig {
        memory_limit_bytes: 64 << 20,
        max_item_size: 1 << 20,
    });
    let keys: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("key:{i:012}").into_bytes())
        .collect();
    // Warm up: the table has grown to hold every key.
    for k in &keys {
        s.store(Write::new(StoreMode::Set, k, &[b'v'; 32]), NOW)
            .unwrap();
    }

    let before = allocations();
    let mut found = 0;
    for k in &keys {
        found += usize::from(s.get(k, NOW).is_some_and(|v| v.value.len() == 32));
    }
    assert_eq!(found, keys.len());
    assert_eq!(allocations() - before, 0, "GET hits allocated");

    // An overwrite with a value of the same length rewrites the block in place.
    let before = allocations();
    s.store(Write::new(StoreMode::Set, &keys[0], &[b'w'; 32]), NOW)
        .unwrap();
    assert_eq!(allocations() - before, 0);
    assert_eq!(s.get(&keys[0], NOW).unwrap().value, [b'w'; 32]);

    // One of another length is appended to the open segment, which has room: nothing is
    // allocated at all.
    let before = allocations();
    s.store(Write::new(StoreMode::Set, &keys[0], &[b'x'; 33]), NOW)
        .unwrap();
    assert_eq!(
        allocations() - before,
        0,
        "a store into the open segment allocated"
    );
    // New keys too: their 72 KB fit in the open 1 MiB segment; the one allocation is the
    // table doubling from 256 to 512 buckets at 1,024 items.
    let more: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("new:{i:08}").into_bytes())
        .collect();
    let before = allocations();
    for k in &more {
        s.store(Write::new(StoreMode::Set, k, &[b'y'; 32]), NOW)
            .unwrap();
    }
    assert_eq!(allocations() - before, 1, "one table, no segment");

    // incr on a same-length number rewrites in place.
    s.store(Write::new(StoreMode::Set, b"n", b"10"), NOW)
        .unwrap();
    let before = allocations();
    s.incr_decr(Arith::new(b"n", store::Delta::Incr, 5), NOW)
        .unwrap();
    assert_eq!(allocations() - before, 0);
}
