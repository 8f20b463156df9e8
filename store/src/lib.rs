//! One core's memcached cache shard: hash table, items, memory budget, eviction, expiry, CAS.
//!
//! ```text
//! NIC queue → netstack (core n) → protocol parse → server engine → store Shard (core n) → reply
//! ```
//!
//! The store never sees protocol types: the server's engine translates requests into calls
//! on [`Shard`] and results ([`ItemView`], [`StoreError`]) back into replies. A `Shard` is
//! single-threaded by contract (no locks, no atomics; `Send`, moved to its core once).
//! Time is always an argument (`now`, a [`Now`] from the caller's injected clock: unix time to
//! the millisecond, or whole unix seconds as a `u64`); the store never reads a clock.
//!
//! ```
//! use store::{Arith, Delta, Shard, ShardConfig, StoreError, StoreMode, Ttl, Write};
//!
//! let now = 1_700_000_000; // unix seconds, from the caller's clock
//! let mut shard = Shard::new(ShardConfig { memory_limit_bytes: 64 << 20, max_item_size: 1 << 20 });
//! let hello = Write { ttl: Ttl::Exptime(10), ..Write::new(StoreMode::Set, b"greeting", b"hello") };
//! let cas = shard.store(hello, now)?;
//! assert_eq!(shard.get(b"greeting", now).map(|v| v.value), Some(&b"hello"[..]));
//! // A stale CAS is refused; the current one is accepted.
//! let hi = Write::new(StoreMode::Set, b"greeting", b"hi");
//! assert_eq!(shard.store(Write { cas: cas + 1, ..hi }, now), Err(StoreError::Exists));
//! shard.store(Write { cas, ..hi }, now)?;
//! let hit = Arith::new(b"hits", Delta::Incr, 1);
//! assert_eq!(shard.incr_decr(Arith { create: Some((100, 0)), ..hit }, now)?.0, 100);
//! assert_eq!(shard.incr_decr(hit, now)?.0, 101);
//! // Ten seconds later the first value would have expired; the second never does.
//! assert!(shard.get(b"greeting", now + 10).is_some());
//! # Ok::<(), StoreError>(())
//! ```
//!
//! # Memory layout
//!
//! The table is a hashbrown [`HashTable`](hashbrown::HashTable) of 32-byte items (two per
//! cache line): a `Box<[u8]>` holding `[cas: u64][key_len: u8][key][value]`; `u32` expiry
//! second, flags and last-access second; and one `u32` packing the flush generation (17 bits)
//! with the expiry's milliseconds (10 bits), a fetched bit, the meta protocol's stale and
//! recache-token bits and a 2-bit clock counter.
//! Key and value are copied once, into that one heap block, when an item is stored; a GET hit
//! walks control bytes → bucket → block and allocates nothing. The bucket and the block are
//! two dependent cache misses when the table is cold; a caller with several keys in hand
//! (a pipelined frame's GETs) prefetches every key's bucket, then every key's block
//! ([`Shard::hint`], [`Hint`]), so that the misses of all keys overlap at each stage
//! (`cargo bench -p store -- get_hit_cold`). A store over a live item whose value keeps its
//! length rewrites the block in place, allocating nothing.
//!
//! The CAS lives in the block, in front of the key, because it is a full 64-bit value (the
//! meta protocol's `E` lets a client choose any) and is only ever read or written together
//! with the key; the bucket keeps what the clock hand and the sweep decide on and what every
//! read updates. The price is 8 bytes more per block than a CAS kept in the bucket, which
//! [`item_size`] charges.
//!
//! The trade-off, against the alternatives considered:
//! - *One block per item (chosen)*: at most one allocation per store (none for a value that
//!   keeps its length), exact sizes, freeing is `free`; the allocator's 8-byte header and
//!   16-byte rounding are the per-item cost and are charged ([`item_size`]). Metadata stays
//!   in the bucket, so the clock hand and the expiry sweep read only the table's contiguous
//!   array, never the blocks.
//! - *Slab/arena with size classes* (memcached, Pelikan segments): no allocator calls and
//!   no fragmentation outside the arena, but slab-class waste (memcached's 1.25 growth
//!   factor wastes up to 20 %) and rebalancing logic; the crate would need its own
//!   allocator for one benefit the system allocator mostly gives.
//! - *Metadata in the block, 16-byte buckets*: smaller table, but every expiry check and
//!   eviction decision would chase a pointer.
//!
//! # Memory budget
//!
//! `heap_bytes = bytes + table` never exceeds `memory_limit_bytes` (see below for a budget
//! lowered at run time), where `bytes` sums [`item_size`] (the heap block as glibc sizes it)
//! and `table` is the table's own allocation (buckets × 33 bytes + one control group, also allocator-rounded). The table
//! grows by doubling; a doubling happens only if the bigger table fits next to the items,
//! otherwise the table keeps its size and live items are capped at 7/8 of its capacity
//! (tombstones are purged by an occasional rebuild). The cost of growth is thus charged
//! before it happens, never discovered after.
//!
//! The budget may change at run time ([`Shard::set_memory_limit`], memcached's
//! `cache_memlimit`). A higher one is usable at once. A lower one is reached by
//! [`Shard::shrink`] in bounded steps, evicting with the clock hand and rebuilding the table
//! smaller once its items fit in half of it; until then the heap as it is stands for the
//! budget, so a store makes room for itself only and the heap never grows past what it held
//! when the budget was lowered. [`Shard::release`] frees a given amount the same way, for
//! memcached's `slabs reassign` (a page of memory taken from the items).
//!
//! # Eviction: CLOCK over the table
//!
//! A store that would exceed the budget evicts with CLOCK, in its counting form (GCLOCK):
//! each item has a 2-bit counter, 1 when stored, raised by each fetch up to 3. The clock's
//! circle is the table's own bucket array: the hand walks bucket indices; a dead (expired
//! or flushed) item it meets is reclaimed, a live one with a non-zero counter is aged by
//! one and passed over, one at zero is evicted. A new item therefore survives at least one
//! full revolution of the hand, and an item fetched often survives up to three without
//! being read again. The counter (rather than a single reference bit) keeps the first
//! revolution after a fill from degenerating into FIFO: without it, every bit is set when
//! eviction starts, the hand clears them all, and then evicts hot and cold items alike.
//!
//! With eviction off ([`Shard::set_eviction`], memcached's `-M`) live items are never
//! evicted: a store that needs room takes back dead items the hand meets within
//! [`NO_EVICT_SCAN`] buckets, else fails with [`StoreError::OutOfMemory`] (counted in
//! `outofmemory`).
//!
//! Why CLOCK rather than LRU: LRU needs a doubly linked list (two indices per item, more
//! than the 32-byte bucket has room for) and relinks two neighbours on every hit, i.e.
//! writes to cold cache lines on the read path. CLOCK approximates LRU's hit ratio, a hit
//! only bumps a counter in the bucket it already read, and the same walk reclaims expired
//! items for free. The price: positions follow hash order, not arrival order, and a resize
//! reshuffles them (an item may then be aged twice in quick succession).
//!
//! # Expiry, flush and CAS
//!
//! memcached's rules ([`Expiry`]): 0 never, up to [`REALTIME_MAXDELTA`] relative, above it
//! absolute, negative or past absolute already expired; or a unix millisecond, as Redis
//! clients give it ([`Ttl::AtMillis`]), honoured to the millisecond (an item keeps its expiry
//! as a second and the milliseconds into it, so memcached's whole seconds cost nothing more).
//! Dead items are found lazily (any
//! access is a miss and reclaims them), by [`Shard::sweep_expired`] and the LRU crawler's
//! walk ([`Shard::crawl`], counted apart) from an idle loop, and by the clock hand. Every modification takes a new CAS from a per-shard counter, or the
//! one a client chose ([`NewCas`]). Flushing does not look at CAS values: the shard counts
//! flush generations, stamps each item with the one it was stored in, and
//! [`Shard::flush_all`] (at its due time for a delayed flush) moves to the next generation,
//! which makes every earlier item dead in O(1).
//!
//! Each item also keeps the second of its last store, fetch or touch
//! ([`ItemView::last_access`]), for the meta protocol's `l` flag and `me`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod expiry;
mod item;
mod shard;
mod stats;

pub use error::StoreError;
pub use expiry::{Expiry, Now, REALTIME_MAXDELTA, Ttl};
pub use item::{MAX_KEY_LEN, item_size, malloc_chunk};
pub use shard::{
    Arith, Crawled, Delta, EVICTION_LOG_LEN, Evicted, Hint, ItemView, NO_EVICT_SCAN, NewCas, Shard,
    ShardConfig, StoreMode, Write,
};
pub use stats::ShardStats;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
