//! One core's memcached cache shard: segments of items, hash table, memory budget, eviction,
//! expiry, CAS.
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
//! Items lie in **segments**: buffers of one size per shard (1/32 of the budget as a power of
//! two, from 4 KiB to 1 MiB: 1 MiB from a 32 MiB budget up) that items are appended to, one
//! after the other, with no allocator header and no rounding. An item is a header of 22 to
//! 27 bytes and its key and value ([`item_size`], [`item_size_expiring`]):
//!
//! ```text
//! [cas: u64][flags: u32][last_access: u32][meta: u16][key_len: u8][key][len: u24 or u32][exptime: u32]?[value]
//! ```
//!
//! `len` is the value's length and two bits: whether it takes four bytes (a value of 4 MiB
//! or more) and whether the expiry's unix second follows (only an item that expires has
//! one). So the common item, one that never expires with a value under 4 MiB, has a 22-byte
//! header. Giving an expiry to an item that had none writes it anew ([`Shard::touch`]); any
//! other change of expiry, and a value of the same length, is written in place. (With
//! eviction off every item has the expiry's second, so every touch is in place.) `meta` packs
//! the expiry's milliseconds, a 2-bit clock counter and the fetched, stale, recache-token and
//! deleted marks; the flush generation is the segment's. An item larger than a segment (up to
//! `-I`) gets a segment of its own, of its size.
//!
//! The **table** is an array of 64-byte buckets (one cache line), each of seven 8-byte
//! entries (`tag: 16 bits | segment: 24 | offset: 24`) and a word saying how far past the
//! bucket its entries spilled (linear probing, bucket by bucket, at most 32 on). A GET reads
//! the key's bucket, compares 16-bit tags, then reads the item (one line for a small one) to
//! compare the key: two dependent cache misses when cold, as a caller that prefetches can
//! overlap ([`Shard::hint`], `cargo bench -p store -- get_hit_cold`); a miss usually reads the
//! bucket only. A GET hit allocates nothing, and neither does a store into the open segment
//! (`store/tests/get_allocates_nothing.rs`).
//!
//! Items are grouped by **expiry**: each of seven classes (never; at most 10 s, 1 min, 10 min,
//! 1 h, 1 day left; longer) appends to its own open segment, so a segment's items die at
//! about the same time, and a segment all of whose items expired (or were flushed) is taken
//! back at once when room is needed.
//!
//! The trade-off, against the alternatives considered:
//! - *Segments (chosen)*: 22 to 27 bytes of header and 8 bytes of table (at up to 90 % load) per
//!   item; reclaiming is a segment at a time. The price: an overwrite, a delete or an
//!   eviction leaves dead bytes where the item was, until its segment is taken back (bounded
//!   below), and a value that changes its length is written anew rather than in place.
//! - *One `malloc` block per item and a 32-byte bucket*: exact frees, but the allocator's
//!   8-byte header and 16-byte rounding plus the bucket cost about 60 bytes more per small
//!   item than this layout.
//! - *Slab classes* (memcached): no dead bytes, but up to 20 % lost to class rounding, a
//!   48-byte item header and page rebalancing.
//!
//! # Memory budget
//!
//! The budget (`memory_limit_bytes`, this shard's share of `-m`) bounds what the shard holds
//! from the allocator: its segments (those in use and at most one spare) plus its table
//! ([`Shard::memory_bytes`]). A new segment is taken only within it; at the budget, the
//! eviction hand empties the oldest segment first. The table starts at one bucket and
//! grows when it holds 4 entries a bucket, if a bigger table lets the budget hold more items
//! at their mean size (less one segment: the spare or the one being emptied; counting at most
//! 5.6 a bucket, since entries never move and a fuller table's lookups drift further from
//! their homes under churn): to 5/4, 3/2 or twice its buckets, whichever holds the most, so
//! that a budget nearly all of items is not left with a table twice what they need (with 64
//! MiB of 133-byte items, 5 MiB of table rather than 8: 6 % more items, `cargo run --release
//! -p store --example lookaside`). A store of a new key first has the
//! eviction hand take segments back until the bigger table fits beside them (compacting
//! while many bytes are dead, so segments full of dead bytes never hold the table at its
//! size). Otherwise it keeps its size and
//! fills to 7 a bucket, an insert that finds no slot near its home evicting the item of its
//! home bucket nearest the eviction hand (whose segment the hand takes back soonest, so its
//! dead bytes do not linger). So RSS stays within the budget plus
//! the process's fixed costs: no per-item allocation exists to fragment the heap.
//!
//! `heap_bytes` is the part of the budget in use: segment bytes written (live items, dead
//! ones not yet taken back, the unwritten tails of sealed segments) and the table; `bytes` is
//! the live items' sizes. Both stay within the budget.
//!
//! The budget may change at run time ([`Shard::set_memory_limit`], memcached's
//! `cache_memlimit`). A higher one is usable at once. A lower one is reached by
//! [`Shard::shrink`] in bounded steps, evicting from the oldest segments (whose buffers go
//! back to the allocator once empty) and halving the table once its items fit; until then a
//! store makes room for itself only. New segments take the size the new budget calls for.
//! [`Shard::release`] frees a given amount the same way, for memcached's `slabs reassign`.
//!
//! # Eviction: segments in FIFO order, with a second chance
//!
//! Segments are kept in the order they were opened. When a store needs room, the eviction
//! hand walks the oldest segment item by item: a dead item (expired, flushed) is reclaimed;
//! a live one read since it was written or last kept (clock counter above 0, raised by each
//! fetch up to 3) is kept, its counter lowered by one: copied to its class's open segment
//! when that has room, else moved down to the segment's start; any other is evicted. Once
//! the hand has passed over the whole segment, it is taken back if it kept nothing in it,
//! else its kept part becomes its content and it goes to the FIFO's tail, where of it and
//! its class's open segment the one with more free room is open for new items and the other
//! sealed: a seal leaves unwritten less than one item the open segment could not take. Each
//! segment taken back ends the hand's turn, so a store evicts nothing live once that made
//! room (`segment_tests::mixed_sizes_rewritten_under_a_third_of_the_budget_evict_nothing`).
//! A new item thus survives one
//! full turn of the FIFO, and an item read often survives up to three more without being
//! read again: S3-FIFO's insight that most items are never read again, so the one-hit
//! wonders go first, applied segment by segment (`tests::hot_items_survive_a_scan`). A hit
//! only bumps a counter in the item's header, which the hit reads anyway.
//!
//! **Dead bytes.** An overwrite, a delete or an eviction leaves the old bytes dead in their
//! segment. A segment whose last live item goes is taken back at once. The others are
//! reclaimed when the hand passes over them; and while dead bytes exceed a quarter of the
//! segment memory, the hand keeps every live item it meets (compacting, evicting nothing
//! live), so live items are evicted only while at least three quarters of the segments hold
//! live items or unwritten tails (`segment_tests::overwrite_churn_evicts_no_live_item_and_bounds_dead_bytes`).
//!
//! With eviction off ([`Shard::set_eviction`], memcached's `-M`) live items are never
//! evicted: a store that needs room takes back wholly dead segments; while more than a
//! segment's worth of bytes is dead, the hand compacts the oldest segments keeping every live
//! item; else dead items found within [`NO_EVICT_SCAN`] buckets go; failing that the store
//! fails with [`StoreError::OutOfMemory`] (counted in `outofmemory`) and an item it would
//! have replaced is left as it was. A new item whose table buckets are full of live items
//! fails the same way. Every item is then laid out with its expiry's second (0 for never,
//! 4 bytes more for an item that never expires), so that a touch or `gat` giving it an expiry
//! is written in place and needs no room
//! (`segment_tests::with_eviction_off_a_touch_on_a_full_budget_keeps_the_item`).
//!
//! # Walking the table
//!
//! [`Shard::visit`] and [`Shard::crawl`] walk bucket indexes, [`Shard::num_buckets`] of them,
//! so a caller can walk in slices with the index as its cursor (`lru_crawler metadump`, the
//! crawler). Entries never move while the table keeps its size, so a key that exists for
//! the whole walk is visited once, whatever is stored or removed between slices; only a
//! resize (growing while the cache fills, halving under a lowered budget) may make a walk
//! miss or repeat items. [`Shard::visit_in_order`] walks by ranges of key positions instead
//! (the low 32 bits of a key's hash, which its home bucket grows with), a cursor no resize
//! moves (Redis `SCAN`).
//!
//! # Expiry, flush and CAS
//!
//! memcached's rules ([`Expiry`]): 0 never, up to [`REALTIME_MAXDELTA`] relative, above it
//! absolute, negative or past absolute already expired; or a unix millisecond, as Redis
//! clients give it ([`Ttl::AtMillis`]), honoured to the millisecond (an item keeps its expiry
//! as a second and the milliseconds into it, so memcached's whole seconds cost nothing more).
//! Dead items are found lazily (any
//! access is a miss and reclaims them), by [`Shard::sweep_expired`] and the LRU crawler's
//! walk ([`Shard::crawl`], counted apart) from an idle loop, by the eviction hand, and a
//! segment at a time when all of a segment's items are dead. Every modification takes a new
//! CAS from a per-shard counter, or the one a client chose ([`NewCas`]). Flushing does not
//! look at CAS values: the shard counts flush generations, stamps each segment with the one
//! it was opened in, and [`Shard::flush_all`] (at its due time for a delayed flush) moves to
//! the next generation and closes the open segments, which makes every earlier item dead at
//! once.
//!
//! Each item also keeps the second of its last store, fetch or touch
//! ([`ItemView::last_access`]), for the meta protocol's `l` flag and `me`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod expiry;
mod item;
mod segment;
mod shard;
mod stats;
mod table;

pub use error::StoreError;
pub use expiry::{Expiry, Now, REALTIME_MAXDELTA, Ttl};
pub use item::{MAX_KEY_LEN, item_size, item_size_expiring, malloc_chunk};
pub use shard::{
    Arith, BucketHint, Crawled, Delta, EVICTION_LOG_LEN, Evicted, Hint, ITEM_HINT_BYTES, ItemView,
    MAX_SEGMENT_BYTES, NO_EVICT_SCAN, NewCas, Shard, ShardConfig, StoreMode, Write,
};
pub use stats::ShardStats;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod segment_tests;
#[cfg(test)]
mod tests;
