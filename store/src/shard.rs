//! One core's cache shard: the `Shard` type and the operations clients call (lookups,
//! stores, deletes, touches, arithmetic), over the segments and the table. Each other job
//! has its own file:
//!
//! | file | job |
//! |---|---|
//! | `request.rs` | the values callers hand in and get back (`Write`, `Arith`, `ItemView`, ...) |
//! | `budget.rs` | where items are written, `heap_bytes`, table growth, a lowered budget |
//! | `eviction.rs` | the eviction hand: second chances, evictions, compaction |
//! | `walk.rs` | `flush_all`, the expiry sweep, the crawler, `visit`, `stats reset` |
//! | `check.rs` | the accounting invariants the tests check (tests only) |

use core::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;

use crate::error::StoreError;
use crate::expiry::{Deadline, Expiry, Now, Ttl};
use crate::item::{self, Fields, GENERATION_MASK, ItemMut, ItemRef, Liveness, MAX_KEY_LEN, Tail};
use crate::segment::{self, Segment, Segments, State};
use crate::stats::ShardStats;
use crate::table::{self, Loc, Table, offset_of, segment_of};

mod budget;
#[cfg(test)]
mod check;
mod eviction;
mod request;
mod walk;

pub use budget::MAX_SEGMENT_BYTES;

/// Bytes of an item [`Shard::item_hint`] gives for a prefetch: two cache lines, the header,
/// the key and the start of the value of all but large items.
pub const ITEM_HINT_BYTES: usize = 128;
use budget::segment_size_for;
pub use eviction::{EVICTION_LOG_LEN, Evicted, NO_EVICT_SCAN};
pub use request::{
    Arith, BucketHint, Crawled, Delta, Hint, ItemView, NewCas, ShardConfig, StoreMode, Write,
};

/// Why an item leaves the table, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    /// Deleted or overwritten by a client.
    Client,
    /// Dead (expired or flushed) and taken back.
    Reclaimed,
    /// Dead, and taken back by the LRU crawler ([`Shard::crawl`]): expired, or flushed.
    Crawled(Liveness),
    /// Live, removed to make room.
    Evicted,
    /// Live, removed to free a page for `slabs reassign` ([`Shard::release`]).
    Released,
}

/// Who asks the eviction hand for a victim ([`Shard::evict_one`]): what it may take and how
/// the taking is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    /// A store that needs room: with eviction off only dead items, and a failure counts
    /// `outofmemory`.
    Store,
    /// The shard shrinking to a lowered budget: as a store, but a failure is not counted.
    Shrink,
    /// A page freed for `slabs reassign`: live items too, even with eviction off (an
    /// operator asked for it), counted in `slab_reassign_evictions_nomem`, not `evictions`.
    Release,
}

/// Why a lookup found no live item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Miss {
    /// Not present.
    Absent,
    /// Present but dead (expired or flushed); it has just been reclaimed.
    Dead(Liveness),
}

/// One core's cache: items appended to segments, found through a table of 8-byte entries,
/// under a byte budget, evicted segment by segment in FIFO order with a second chance for
/// the items that were read; memcached expiry, CAS and `flush_all`. See the crate docs for
/// the design.
///
/// Single-threaded by contract: every method takes `&mut self` or `&self`, there are no
/// locks or atomics; a `Shard` may be moved to the core that owns it (`Send`).
pub struct Shard {
    config: ShardConfig,
    table: Table,
    segs: Segments,
    hasher: DefaultHashBuilder,
    stats: ShardStats,
    /// Bytes of a segment (see `segment_size_for`).
    segment_size: usize,
    /// The last CAS the counter handed out.
    last_cas: u64,
    /// The flush generation: items in segments of any other one were flushed. Counts
    /// `flush_all`s (applied ones) modulo 2^17.
    generation: u32,
    /// A delayed `flush_all` takes effect at this unix time.
    pending_flush_at: Option<u64>,
    /// No segment can be wholly dead before this unix millisecond (a lower bound on their
    /// last deadlines; 0 after a flush): the search for one is skipped until then.
    dead_segment_check_ms: u64,
    /// The expiry sweep's cursor (a bucket index).
    sweep_hand: usize,
    /// With eviction off, where the search for a dead item goes on (a bucket index).
    scan_hand: usize,
    /// Whether live items may be evicted to make room (memcached's `-M` turns it off).
    evict: bool,
    /// Live items evicted and not yet taken, while someone wants them.
    evictions: Option<Vec<Evicted>>,
    /// Scratch for a value built from an old one (append, prepend, incr), kept between calls.
    scratch: Vec<u8>,
    /// Times the table's load called for growing and the bigger table was not worth its
    /// memory (tests only).
    #[cfg(test)]
    capped: usize,
    /// The table size whose growth was last refused, so each size counts once.
    refused_buckets: usize,
    /// The heap and the memory when the budget was last lowered: the most each may hold
    /// until it is back under the budget (tests only).
    #[cfg(test)]
    lowered: (u64, usize),
}

impl Shard {
    /// Creates an empty shard. Nothing is allocated until the first store.
    pub fn new(config: ShardConfig) -> Shard {
        Shard {
            config,
            table: Table::default(),
            segs: Segments::default(),
            hasher: DefaultHashBuilder::default(),
            stats: ShardStats {
                limit_maxbytes: config.memory_limit_bytes as u64,
                ..ShardStats::default()
            },
            segment_size: segment_size_for(config.memory_limit_bytes),
            last_cas: 0,
            generation: 0,
            pending_flush_at: None,
            dead_segment_check_ms: u64::MAX,
            sweep_hand: 0,
            scan_hand: 0,
            evict: true,
            evictions: None,
            scratch: Vec::new(),
            #[cfg(test)]
            capped: 0,
            refused_buckets: 0,
            #[cfg(test)]
            lowered: (0, 0),
        }
    }

    /// Whether live items may be evicted to make room (the default). Off (memcached's `-M`), a
    /// store that needs room takes back only dead items (whole segments whose items all
    /// expired or were flushed, or dead items met within [`NO_EVICT_SCAN`] buckets), and fails
    /// with [`StoreError::OutOfMemory`] if that is not enough; live items stay until they are
    /// deleted, expire or are flushed.
    pub fn set_eviction(&mut self, evict: bool) {
        self.evict = evict;
    }

    /// Whether live items may be evicted to make room.
    pub fn evicts(&self) -> bool {
        self.evict
    }

    /// The configuration this shard was built with.
    pub fn config(&self) -> &ShardConfig {
        &self.config
    }

    /// The shard's counters.
    pub fn stats(&self) -> &ShardStats {
        &self.stats
    }

    /// Items held, including dead ones not yet reclaimed.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the shard holds no item at all.
    pub fn is_empty(&self) -> bool {
        self.table.len() == 0
    }

    /// Bytes the shard holds from the allocator: its segments (in use and one spare at most)
    /// and its table. Kept within the budget, except for one segment while the eviction hand
    /// moves read items (see the crate docs).
    pub fn memory_bytes(&self) -> usize {
        self.segs.bytes + self.table.bytes()
    }

    /// Looks a key up; a hit marks the item fetched (raising its clock counter), records the
    /// access time and allocates nothing. The view reports the item as it was before this
    /// call (`fetched`, `last_access`).
    ///
    /// Counts `get_hits`, or `get_misses` plus `get_expired`/`get_flushed` for a dead item
    /// (which is reclaimed on the spot).
    pub fn get(&mut self, key: &[u8], now: impl Into<Now>) -> Option<ItemView<'_>> {
        let now = now.into();
        self.advance(now);
        if check_key(key).is_err() {
            self.stats.get_misses += 1;
            return None;
        }
        let hash = self.hasher.hash_one(key);
        match self.find_live(hash, key, now) {
            Ok((_, e, tail)) => {
                self.stats.get_hits += 1;
                // Everything read before the fetch is marked, and once: the marks are
                // written to the item's bytes, which the reads would otherwise read again.
                let data = &mut self.segs.segs[segment_of(e)].data[offset_of(e)..];
                let (value, before) = view_parts(ItemRef::new(data), tail);
                ItemMut::new(data).mark_fetched(now);
                Some(ItemView {
                    value: &data[value],
                    ..before
                })
            }
            Err(Miss::Absent) => {
                self.stats.get_misses += 1;
                None
            }
            Err(Miss::Dead(why)) => {
                self.stats.get_misses += 1;
                match why {
                    Liveness::Flushed => self.stats.get_flushed += 1,
                    _ => self.stats.get_expired += 1,
                }
                None
            }
        }
    }

    /// Where a lookup of `key` will read, for a caller that prefetches: with several keys in
    /// hand, warming every key's entry and item before looking any of them up lets their
    /// cache misses overlap instead of following one another. A lookup reads the key's home
    /// bucket (one cache line of entries), then the item in its segment; see [`Hint`] for
    /// taking them in stages. Finding the hint reads the bucket. Only a hint: the entry taken
    /// is the first whose 16-bit tag matches, the key's in all but rare cases, dead or alive;
    /// nothing changes and nothing is counted.
    #[inline]
    pub fn hint(&self, key: &[u8]) -> Option<Hint<'_>> {
        let hash = self.hasher.hash_one(key);
        let loc = self.table.find(hash, |_| true)?;
        Some(Hint {
            entry: self.table.entry_ref(loc),
            block: self.item(self.table.get(loc)).block(),
        })
    }

    /// The first stage of a prefetch of `key`'s lookup: its hash and its home bucket's
    /// address ([`BucketHint::bucket`]); reads nothing. Prefetch the buckets of every key of a
    /// batch, then take [`Shard::item_hint`] of each.
    #[inline]
    pub fn bucket_hint(&self, key: &[u8]) -> BucketHint {
        let hash = self.hasher.hash_one(key);
        BucketHint {
            hash,
            bucket: self.table.home_address(hash),
        }
    }

    /// The second stage: reads the bucket of [`Shard::bucket_hint`] (which the first stage's
    /// prefetch brought, or is bringing) and gives the first [`ITEM_HINT_BYTES`] of the
    /// segment from where the item its first tag-matching entry points at starts (header, key,
    /// then the value's start), for a prefetch of their cache lines; reads nothing of the
    /// item (its length is in its header). `None` when no entry matches.
    #[inline]
    pub fn item_hint(&self, hint: BucketHint) -> Option<&[u8]> {
        let loc = self.table.find(hint.hash, |_| true)?;
        let e = self.table.get(loc);
        let data = &self.segs.segs[segment_of(e)].data;
        let start = offset_of(e);
        data.get(start..(start + ITEM_HINT_BYTES).min(data.len()))
    }

    /// TOUCH / GAT: gives a live item a new expiry (`ttl` as in [`Shard::store`]) and
    /// returns it, marked fetched and accessed as [`Shard::get`] does (the view reports the item
    /// as it was before). The CAS is kept, as memcached does. Counts
    /// `touch_hits`/`touch_misses`.
    ///
    /// A `ttl` that is already expired still returns the item this once; it is
    /// invisible from then on. An expiry given to an item laid out without one writes it
    /// anew; should no room be made for that (only when eviction was turned off after the
    /// item was stored), the touch counts as a miss and the item stays as it was.
    pub fn touch(&mut self, key: &[u8], ttl: Ttl, now: impl Into<Now>) -> Option<ItemView<'_>> {
        self.touch_marking(key, ttl, true, now.into())
    }

    /// [`Shard::touch`] that leaves the item unmarked: no fetched mark, no clock bump, no
    /// access time (meta `mg <key> T<ttl> u`). Counts `touch_hits`/`touch_misses`.
    pub fn touch_unbumped(
        &mut self,
        key: &[u8],
        ttl: Ttl,
        now: impl Into<Now>,
    ) -> Option<ItemView<'_>> {
        self.touch_marking(key, ttl, false, now.into())
    }

    /// [`Shard::touch`] when `mark`, else [`Shard::touch_unbumped`].
    pub fn touch_marking(
        &mut self,
        key: &[u8],
        ttl: Ttl,
        mark: bool,
        now: Now,
    ) -> Option<ItemView<'_>> {
        self.advance(now);
        if check_key(key).is_err() {
            self.stats.touch_misses += 1;
            return None;
        }
        let hash = self.hasher.hash_one(key);
        let Ok(loc) = self.lookup(hash, key, now) else {
            self.stats.touch_misses += 1;
            return None;
        };
        let e = self.table.get(loc);
        let old = self.item(e);
        let (fetched, last_access) = (old.fetched(), old.last_access());
        let deadline = deadline_for(ttl, old.deadline(), now);
        let Ok(e) = self.set_deadline(hash, loc, deadline, now) else {
            // No room to write the item anew with an expiry (eviction off, memory full).
            self.stats.touch_misses += 1;
            return None;
        };
        self.stats.touch_hits += 1;
        let mut item = self.item_mut(e);
        if mark {
            item.mark_fetched(now);
        }
        Some(ItemView {
            fetched,
            last_access,
            ..view(item.into_ref())
        })
    }

    /// Looks a key up without touching it: no fetched mark, no clock bump, no access time, no
    /// counters (a dead item found is still reclaimed). For the meta protocol's `u` flag and
    /// `me`.
    pub fn peek(&mut self, key: &[u8], now: impl Into<Now>) -> Option<ItemView<'_>> {
        let now = now.into();
        self.advance(now);
        check_key(key).ok()?;
        let hash = self.hasher.hash_one(key);
        let loc = self.lookup(hash, key, now).ok()?;
        Some(view(self.item(self.table.get(loc))))
    }

    /// Meta protocol `md <key> I`: marks a live item stale instead of removing it, hands its
    /// recache token out again, gives it a new CAS (returned) and, with `exptime`, a new
    /// expiry. `cas != 0` must match the item's CAS. The access time is kept.
    ///
    /// # Errors
    ///
    /// As [`Shard::delete`]: [`StoreError::NotFound`] (counts `delete_misses`),
    /// [`StoreError::Exists`], [`StoreError::KeyTooLong`].
    pub fn invalidate(
        &mut self,
        key: &[u8],
        cas: u64,
        exptime: Option<i64>,
        now: impl Into<Now>,
    ) -> Result<u64, StoreError> {
        self.invalidate_with(key, cas, exptime, NewCas::Next, now)
    }

    /// [`Shard::invalidate`], with the item's new CAS taken from `new_cas` (meta protocol
    /// `md ... I E<token>`); returns that CAS.
    ///
    /// # Errors
    ///
    /// As [`Shard::invalidate`].
    pub fn invalidate_with(
        &mut self,
        key: &[u8],
        cas: u64,
        exptime: Option<i64>,
        new_cas: NewCas,
        now: impl Into<Now>,
    ) -> Result<u64, StoreError> {
        let now = now.into();
        self.advance(now);
        check_key(key)?;
        let hash = self.hasher.hash_one(key);
        let Ok(loc) = self.lookup(hash, key, now) else {
            self.stats.delete_misses += 1;
            return Err(StoreError::NotFound);
        };
        let e = self.table.get(loc);
        if cas != 0 && self.item(e).cas() != cas {
            return Err(StoreError::Exists);
        }
        let new_cas = self.take_cas(new_cas);
        let mut item = self.item_mut(e);
        item.mark_stale();
        item.set_cas(new_cas);
        if let Some(exptime) = exptime {
            self.set_deadline(hash, loc, Expiry::resolve(exptime, now).encode(now), now)?;
        }
        Ok(new_cas)
    }

    /// Meta protocol: records that a client was handed the recache token of a live item (the
    /// `W` flag), so later readers are told another client has it (`Z`). Returns whether the
    /// item was there.
    pub fn claim_win(&mut self, key: &[u8], now: impl Into<Now>) -> bool {
        self.mark_live(key, now.into(), |item, _| item.mark_win_sent())
    }

    /// Records a client fetch of a live item as [`Shard::get`] does (fetched mark, clock bump,
    /// access time) without looking it up for the client: nothing is counted. For an item the
    /// client was just handed by another call (meta `mg ... N` creates it on a miss, and
    /// memcached marks it fetched once the reply is written). Returns whether the item was
    /// there.
    pub fn mark_fetched(&mut self, key: &[u8], now: impl Into<Now>) -> bool {
        self.mark_live(key, now.into(), |item, now| item.mark_fetched(now))
    }

    /// Applies `mark` to the live item under `key`, counting nothing; whether it was there.
    fn mark_live(
        &mut self,
        key: &[u8],
        now: Now,
        mark: impl FnOnce(&mut ItemMut<'_>, Now),
    ) -> bool {
        self.advance(now);
        if check_key(key).is_err() {
            return false;
        }
        let hash = self.hasher.hash_one(key);
        let Ok(loc) = self.lookup(hash, key, now) else {
            return false;
        };
        let mut item = self.item_mut(self.table.get(loc));
        mark(&mut item, now);
        true
    }

    /// Stores `write.value` under `write.key` per `write.mode`; returns the item's new CAS
    /// (from `write.new_cas`).
    ///
    /// `write.ttl` is the client's: memcached's exptime (0 = never, 1..=30 days relative, above
    /// that an absolute unix time), a unix millisecond, or the live item's expiry kept. One that
    /// is already expired (a negative exptime, a time `<= now`) stores nothing: the store
    /// succeeds, removes any old item and keeps nothing. `Append`/`Prepend` ignore `flags` and
    /// `ttl` and keep the item's.
    ///
    /// `write.cas != 0` makes it a compare-and-swap, for every mode: counts `cas_hits`,
    /// `cas_misses` or `cas_badval`.
    ///
    /// A new item is appended to the open segment of its expiry class; no allocation happens
    /// unless a new segment must be taken. A value of the old one's length is rewritten in
    /// place.
    ///
    /// # Errors
    ///
    /// - [`StoreError::KeyTooLong`]: the key is empty or longer than 250 bytes.
    /// - [`StoreError::TooLarge`]: `item_size(key, resulting value) > max_item_size`.
    /// - [`StoreError::NotFound`]: `cas != 0` and the key is missing (`Set`, `Replace`).
    /// - [`StoreError::NotStored`]: `Add` on a live key (whatever `cas`), `Replace` on a
    ///   missing key, or `Append`/`Prepend` on a missing key (whatever `cas`, as memcached).
    /// - [`StoreError::Exists`]: `cas != 0` and the live item's CAS differs.
    /// - [`StoreError::OutOfMemory`]: the item does not fit in the budget even alone.
    ///
    /// On any error nothing changes, except that a dead item under the key is reclaimed.
    pub fn store(&mut self, write: Write<'_>, now: impl Into<Now>) -> Result<u64, StoreError> {
        let now = now.into();
        let Write {
            mode,
            key,
            value,
            flags,
            ttl,
            cas,
            new_cas,
        } = write;
        self.advance(now);
        check_key(key)?;
        let extends = matches!(mode, StoreMode::Append | StoreMode::Prepend);
        if !extends {
            self.check_size(key.len(), value.len())?;
        }
        let hash = self.hasher.hash_one(key);
        let Ok(loc) = self.lookup(hash, key, now) else {
            // memcached: append and prepend need an item, and say "not stored" without one,
            // a CAS given or not (only set and replace, its compare-and-swap forms, miss).
            if extends {
                return Err(StoreError::NotStored);
            }
            if cas != 0 {
                self.stats.cas_misses += 1;
                return Err(StoreError::NotFound);
            }
            if mode != StoreMode::Set && mode != StoreMode::Add {
                return Err(StoreError::NotStored);
            }
            let deadline = deadline_for(ttl, Deadline::NEVER, now);
            let new_cas = self.take_cas(new_cas);
            if deadline.passed(now) {
                self.stats.total_items += 1;
                return Ok(new_cas);
            }
            let fields = self.fields(key, [value, b""], flags, deadline, new_cas, 0, now);
            self.put(hash, None, &fields, now)?;
            return Ok(new_cas);
        };
        if mode == StoreMode::Add {
            return Err(StoreError::NotStored);
        }
        let e = self.table.get(loc);
        let old = self.item(e);
        let (old_cas, old_flags, old_deadline) = (old.cas(), old.flags(), old.deadline());
        let (old_len, old_expires) = (old.value().len(), old.expires());
        if cas != 0 && old_cas != cas {
            self.stats.cas_badval += 1;
            return Err(StoreError::Exists);
        }
        if extends {
            self.check_size(key.len(), old_len.saturating_add(value.len()))?;
            let mut buf = core::mem::take(&mut self.scratch);
            buf.clear();
            buf.extend_from_slice(self.item(e).value());
            let parts = if mode == StoreMode::Append {
                [&buf[..], value]
            } else {
                [value, &buf[..]]
            };
            let new_cas = self.take_cas(new_cas);
            let fields = self.fields(key, parts, old_flags, old_deadline, new_cas, 0, now);
            let stored = self.put(hash, Some(loc), &fields, now);
            self.scratch = buf;
            stored?;
            if cas != 0 {
                self.stats.cas_hits += 1;
            }
            return Ok(new_cas);
        }
        let deadline = deadline_for(ttl, old_deadline, now);
        if deadline.passed(now) {
            self.remove_at(loc, hash, Removal::Client);
            if cas != 0 {
                self.stats.cas_hits += 1;
            }
            self.stats.total_items += 1;
            return Ok(self.take_cas(new_cas));
        }
        if old_len == value.len() && self.item(e).holds(deadline) {
            // Same length (a counter, a fixed-size record): rewrite the item in place; nothing
            // is charged differently and its entry stays as it is.
            let new_cas = self.take_cas(new_cas);
            self.item_mut(e)
                .overwrite(value, flags, deadline, new_cas, now);
            self.note_deadline(segment_of(e), deadline);
            self.stats.curr_expiring = self.stats.curr_expiring - u64::from(old_expires)
                + u64::from(deadline != Deadline::NEVER);
            self.stats.total_items += 1;
            if cas != 0 {
                self.stats.cas_hits += 1;
            }
            return Ok(new_cas);
        }
        let new_cas = self.take_cas(new_cas);
        let fields = self.fields(key, [value, b""], flags, deadline, new_cas, 0, now);
        self.put(hash, Some(loc), &fields, now)?;
        if cas != 0 {
            self.stats.cas_hits += 1;
        }
        Ok(new_cas)
    }

    /// Removes a live item. `cas != 0` must match the item's CAS.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] (counts `delete_misses`), [`StoreError::Exists`] on a CAS
    /// mismatch, [`StoreError::KeyTooLong`] for an empty or over-long key.
    pub fn delete(&mut self, key: &[u8], cas: u64, now: impl Into<Now>) -> Result<(), StoreError> {
        let now = now.into();
        self.advance(now);
        check_key(key)?;
        let hash = self.hasher.hash_one(key);
        let Ok(loc) = self.lookup(hash, key, now) else {
            self.stats.delete_misses += 1;
            return Err(StoreError::NotFound);
        };
        if cas != 0 && self.item(self.table.get(loc)).cas() != cas {
            return Err(StoreError::Exists);
        }
        self.remove_at(loc, hash, Removal::Client);
        self.stats.delete_hits += 1;
        Ok(())
    }

    /// Removes the live item under `key` whatever its CAS, without counting a delete: what
    /// memcached does to the old item when a store is refused for its size or for memory
    /// ("avoid stale data persisting in cache because we failed alloc"). Returns whether an
    /// item was removed; a dead one found is reclaimed as on any access.
    pub fn unlink(&mut self, key: &[u8], now: impl Into<Now>) -> bool {
        let now = now.into();
        self.advance(now);
        if check_key(key).is_err() {
            return false;
        }
        let hash = self.hasher.hash_one(key);
        let Ok(loc) = self.lookup(hash, key, now) else {
            return false;
        };
        self.remove_at(loc, hash, Removal::Client);
        true
    }

    /// memcached's 64-bit unsigned decimal `incr`/`decr`; returns `(new value, new CAS)`, the
    /// CAS taken from `arith.new_cas`.
    ///
    /// `incr` wraps at 2^64, `decr` stops at 0. The value is rewritten as plain decimal
    /// (memcached pads a shorter result with spaces; this store does not). Flags and expiry
    /// are kept. On a missing key, `create = Some((initial, exptime))` (binary protocol)
    /// stores `initial` with flags 0 and returns it; `cas` is not checked then.
    /// Counts `incr_hits`/`incr_misses` or `decr_hits`/`decr_misses`.
    ///
    /// # Errors
    ///
    /// - [`StoreError::NotFound`]: missing key and `create` is `None`.
    /// - [`StoreError::Exists`]: `cas != 0` and the item's CAS differs.
    /// - [`StoreError::NonNumeric`]: the value is not ASCII digits whose value fits a `u64`.
    /// - [`StoreError::KeyTooLong`], [`StoreError::TooLarge`], [`StoreError::OutOfMemory`]
    ///   as for [`Shard::store`].
    pub fn incr_decr(
        &mut self,
        arith: Arith<'_>,
        now: impl Into<Now>,
    ) -> Result<(u64, u64), StoreError> {
        let now = now.into();
        let Arith {
            key,
            delta,
            direction,
            create,
            cas,
            new_cas,
        } = arith;
        self.advance(now);
        check_key(key)?;
        let hash = self.hasher.hash_one(key);
        let mut digits = [0u8; crate::item::MAX_DIGITS];
        let Ok(loc) = self.lookup(hash, key, now) else {
            match direction {
                Delta::Incr => self.stats.incr_misses += 1,
                Delta::Decr => self.stats.decr_misses += 1,
            }
            let Some((initial, exptime)) = create else {
                return Err(StoreError::NotFound);
            };
            let text = crate::item::format_decimal(initial, &mut digits);
            self.check_size(key.len(), text.len())?;
            let expiry = Expiry::resolve(exptime, now);
            let new_cas = self.take_cas(new_cas);
            self.stats.total_items += 1;
            if expiry != Expiry::Expired {
                let fields = self.fields(key, [text, b""], 0, expiry.encode(now), new_cas, 0, now);
                self.put(hash, None, &fields, now)?;
            }
            return Ok((initial, new_cas));
        };
        let e = self.table.get(loc);
        let old = self.item(e);
        // memcached: an empty value is non-numeric before the CAS is compared, any other
        // value after.
        if old.value().is_empty() {
            return Err(StoreError::NonNumeric);
        }
        if cas != 0 && old.cas() != cas {
            return Err(StoreError::Exists);
        }
        let current = crate::item::parse_decimal(old.value()).ok_or(StoreError::NonNumeric)?;
        let next = match direction {
            Delta::Incr => current.wrapping_add(delta),
            Delta::Decr => current.saturating_sub(delta),
        };
        let text = crate::item::format_decimal(next, &mut digits);
        let old_len = old.value().len();
        if text.len() == old_len {
            // Same length: rewrite in place, no allocation.
            let new_cas = self.take_cas(new_cas);
            let mut item = self.item_mut(e);
            item.value_mut().copy_from_slice(text);
            item.set_cas(new_cas);
            item.mark_accessed(now);
            self.count_delta_hit(direction);
            return Ok((next, new_cas));
        }
        self.check_size(key.len(), text.len())?;
        // memcached rewrites a result no longer than the old value in place (padded with
        // spaces): the item stays fetched, stale, won as it was. A longer one is a new item.
        let marks = if text.len() < old_len { old.marks() } else { 0 };
        let (flags, deadline) = (old.flags(), old.deadline());
        let new_cas = self.take_cas(new_cas);
        let fields = self.fields(key, [text, b""], flags, deadline, new_cas, marks, now);
        self.put(hash, Some(loc), &fields, now)?;
        self.count_delta_hit(direction);
        Ok((next, new_cas))
    }

    /// The CAS for an item this call creates or modifies.
    #[inline]
    fn take_cas(&mut self, new_cas: NewCas) -> u64 {
        match new_cas {
            NewCas::Next => {
                self.last_cas += 1;
                self.last_cas
            }
            NewCas::Given(cas) => cas,
        }
    }

    fn count_delta_hit(&mut self, direction: Delta) {
        match direction {
            Delta::Incr => self.stats.incr_hits += 1,
            Delta::Decr => self.stats.decr_hits += 1,
        }
    }

    /// TooLarge if over `max_item_size` (or a value over what an item's length word holds,
    /// 1 GiB - 1: memcached's `-I` is at most 1 GiB);
    /// OutOfMemory if it cannot fit even alone.
    fn check_size(&self, key_len: usize, value_len: usize) -> Result<(), StoreError> {
        let size = crate::item::item_size(key_len, value_len);
        if size > self.config.max_item_size || value_len > crate::item::MAX_VALUE_LEN {
            return Err(StoreError::TooLarge);
        }
        // With every item evicted, the table (at least its smallest allocation) remains. Over
        // a lowered budget, the heap as it is stands for the budget (see `put`).
        let table_floor = self.table.bytes().max(Table::bytes_for(1));
        let limit = (self.config.memory_limit_bytes as u64).max(self.stats.heap_bytes);
        if size.saturating_add(table_floor) as u64 > limit {
            return Err(StoreError::OutOfMemory);
        }
        Ok(())
    }

    /// The fields of a new item, stamped with `now`.
    #[allow(clippy::too_many_arguments)]
    fn fields<'a>(
        &self,
        key: &'a [u8],
        value: [&'a [u8]; 2],
        flags: u32,
        deadline: Deadline,
        cas: u64,
        marks: u16,
        now: Now,
    ) -> Fields<'a> {
        Fields {
            key,
            value,
            flags,
            deadline,
            cas,
            last_access: crate::expiry::clamp_u32(now.secs()),
            marks,
            expiry_field: !self.evict,
        }
    }

    #[inline]
    fn item(&self, e: u64) -> ItemRef<'_> {
        self.segs.segs[segment_of(e)].item(offset_of(e))
    }

    #[inline]
    fn item_mut(&mut self, e: u64) -> ItemMut<'_> {
        ItemMut::new(&mut self.segs.segs[segment_of(e)].data[offset_of(e)..])
    }

    #[inline]
    fn liveness(&self, e: u64, now: Now) -> Liveness {
        let flushed = self.segs.segs[segment_of(e)].generation != self.generation;
        self.item(e).liveness(now, flushed)
    }

    /// Gives the live item at `loc` (of `hash`) a new deadline, keeping `curr_expiring` and
    /// its segment's last deadline up to date; returns its entry. In place when the item has
    /// room for it; an item without an expiry that is given one is written anew, to the open
    /// segment of its new expiry class, as it was (CAS, flags, marks, last access), which
    /// counts no store.
    ///
    /// # Errors
    ///
    /// [`StoreError::OutOfMemory`] if the item must be written anew and no room can be made
    /// (eviction off); the item is then kept as it was, unless making room evicted it.
    fn set_deadline(
        &mut self,
        hash: u64,
        loc: Loc,
        deadline: Deadline,
        now: Now,
    ) -> Result<u64, StoreError> {
        let e = self.table.get(loc);
        let mut buf = core::mem::take(&mut self.scratch);
        let item = self.item(e);
        if item.holds(deadline) {
            self.scratch = buf;
            let expired = self.item(e).expires();
            self.item_mut(e).set_deadline(deadline);
            self.note_deadline(segment_of(e), deadline);
            self.stats.curr_expiring = self.stats.curr_expiring - u64::from(expired)
                + u64::from(deadline != Deadline::NEVER);
            return Ok(e);
        }
        buf.clear();
        buf.extend_from_slice(item.key());
        buf.extend_from_slice(item.value());
        let key_len = item.key().len();
        let (key, value) = buf.split_at(key_len);
        let fields = Fields {
            key,
            value: [value, b""],
            flags: item.flags(),
            deadline,
            cas: item.cas(),
            last_access: item.last_access(),
            marks: item.marks(),
            expiry_field: !self.evict,
        };
        let total_items = self.stats.total_items;
        let stored = self.put(hash, Some(loc), &fields, now);
        self.stats.total_items = total_items;
        let found = stored.and_then(|()| {
            let segs = &self.segs.segs;
            let loc = self.table.find(hash, |e| {
                segs[segment_of(e)].item(offset_of(e)).has_key(key)
            });
            loc.map(|loc| self.table.get(loc))
                .ok_or(StoreError::OutOfMemory)
        });
        self.scratch = buf;
        found
    }

    /// Records that segment `id` holds an item with `deadline`.
    fn note_deadline(&mut self, id: usize, deadline: Deadline) {
        self.segs.segs[id].note_deadline(deadline);
        if deadline != Deadline::NEVER {
            self.dead_segment_check_ms = self.dead_segment_check_ms.min(deadline.millis());
        }
    }

    /// The hash of the key of the item entry `e` names, for a removal by a caller that has
    /// not hashed the key (a walk, the capped path).
    fn hash_of(&self, e: u64) -> u64 {
        self.hasher.hash_one(self.item(e).key())
    }

    /// Finds the live item under `key`; a dead item found is reclaimed.
    #[inline(always)]
    fn lookup(&mut self, hash: u64, key: &[u8], now: Now) -> Result<Loc, Miss> {
        self.find_live(hash, key, now).map(|(loc, ..)| loc)
    }

    /// [`Shard::lookup`], with the entry found and its item's [`Tail`].
    #[inline(always)]
    fn find_live(&mut self, hash: u64, key: &[u8], now: Now) -> Result<(Loc, u64, Tail), Miss> {
        let segs = &self.segs.segs;
        // Inlined into the probe whatever the caller: where the compiler chose a call per
        // candidate, it took a third of a cache-resident GET's time.
        let found = self.table.find_entry(
            hash,
            #[inline(always)]
            |e| segs[segment_of(e)].item(offset_of(e)).has_key(key),
        );
        let Some((loc, e)) = found else {
            return Err(Miss::Absent);
        };
        let seg = &self.segs.segs[segment_of(e)];
        let found = seg.item(offset_of(e));
        let tail = found.tail();
        let flushed = seg.generation != self.generation;
        match item::liveness(found.deadline_at(tail.exptime), now, flushed) {
            Liveness::Live => Ok((loc, e, tail)),
            dead => Err(self.reclaim_found(loc, hash, dead)),
        }
    }

    /// Reclaims the dead item a lookup found: out of the lookup's inlined path.
    #[cold]
    #[inline(never)]
    fn reclaim_found(&mut self, loc: Loc, hash: u64, dead: Liveness) -> Miss {
        self.remove_at(loc, hash, Removal::Reclaimed);
        Miss::Dead(dead)
    }

    /// Takes the item at `loc` (its key's hash `hash`) out of the table and marks its bytes
    /// dead.
    fn remove_at(&mut self, loc: Loc, hash: u64, why: Removal) {
        let e = self.table.remove(loc, hash);
        let item = self.item(e);
        let (size, expires, fetched) = (item.size(), item.expires(), item.fetched());
        self.item_mut(e).mark_deleted();
        // The heap figure changes only if the segment is taken back (`free_segment`).
        self.stats.bytes -= size as u64;
        self.stats.curr_items -= 1;
        self.stats.curr_expiring -= u64::from(expires);
        match why {
            Removal::Client => {}
            Removal::Reclaimed => {
                self.stats.reclaimed += 1;
                if !fetched {
                    self.stats.expired_unfetched += 1;
                }
            }
            Removal::Crawled(why) => {
                self.stats.crawler_reclaimed += 1;
                // memcached's crawler counts an unfetched item that expired, not one flushed.
                if !fetched && why == Liveness::Expired {
                    self.stats.expired_unfetched += 1;
                }
            }
            Removal::Evicted => {
                self.stats.evictions += 1;
                if !fetched {
                    self.stats.evicted_unfetched += 1;
                }
            }
            Removal::Released => self.stats.slab_reassign_evictions_nomem += 1,
        }
        self.kill_bytes(segment_of(e), size);
    }

    /// Counts `size` bytes of segment `id` dead (an item removed or moved); a sealed segment
    /// left without live items is taken back.
    fn kill_bytes(&mut self, id: usize, size: usize) {
        let seg = &mut self.segs.segs[id];
        seg.live_items -= 1;
        seg.live_bytes -= size;
        self.segs.dead_bytes += size;
        if seg.live_items == 0 && seg.state == State::Sealed {
            self.free_segment(id);
        }
    }

    /// Takes back a segment without live items, keeping its buffer as the one spare while the
    /// shard is within its budget.
    fn free_segment(&mut self, id: usize) {
        let keep =
            self.segs.spare.is_empty() && self.memory_bytes() <= self.config.memory_limit_bytes;
        self.segs.release(id, keep, self.segment_size);
        self.refresh_heap();
    }

    /// Closes segment `id` to stores; taken back at once if nothing in it is live.
    fn seal(&mut self, id: usize) {
        self.segs.seal(id);
        if self.segs.segs[id].live_items == 0 && self.segs.segs[id].state == State::Sealed {
            self.free_segment(id);
        }
        self.refresh_heap();
    }

    /// Puts an item in the table, replacing the one at `existing` (same key) if given,
    /// making room as needed. Over a budget that was lowered ([`Shard::set_memory_limit`]),
    /// the heap as it is stands for the budget: the store makes room for itself only, and
    /// [`Shard::shrink`] does the rest in bounded steps.
    fn put(
        &mut self,
        hash: u64,
        existing: Option<Loc>,
        fields: &Fields<'_>,
        now: Now,
    ) -> Result<(), StoreError> {
        let size = fields.size();
        let expiring = u64::from(fields.deadline != Deadline::NEVER);
        if let Some(loc) = existing {
            let old = self.table.get(loc);
            let old_size = self.item(old).size() as u64;
            let after = self.stats.heap_bytes + size as u64;
            let class = segment::class_of(fields.deadline, now);
            if after <= self.config.memory_limit_bytes as u64 && self.has_room(size, class) {
                // Common overwrite: the new item goes where stores go and takes over the old
                // one's entry; the old bytes are dead.
                let e = self.append(hash, fields, now)?;
                self.table.set(loc, e);
                let old_item = self.item(old);
                self.stats.curr_expiring =
                    self.stats.curr_expiring - u64::from(old_item.expires()) + expiring;
                self.item_mut(old).mark_deleted();
                self.kill_bytes(segment_of(old), old_size as usize);
                self.stats.bytes = self.stats.bytes - old_size + size as u64;
                self.stats.total_items += 1;
                // Current without a recount: `append` added the item's bytes, and the old
                // item's dead bytes count until its segment is taken back (`free_segment`).
                debug_assert_eq!(self.stats.heap_bytes, self.heap_now());
                return Ok(());
            }
            if !self.evict {
                // Eviction off: nothing live goes, so the old item stays while room is made
                // (the hand may move it; its entry follows), and stays if none can be.
                self.make_room(size, now)?;
                while !self.has_room(size, class) {
                    if !self.evict_one(now, Victim::Store) {
                        return Err(StoreError::OutOfMemory);
                    }
                }
            }
            // Eviction needed: take the old item out first so the hand cannot pick it.
            self.remove_at(loc, hash, Removal::Client);
        } else {
            self.make_room_for_table(now);
        }
        self.make_room(size, now)?;
        let e = self.append(hash, fields, now)?;
        if !self.table_insert(hash, e, now) {
            // Eviction off and the key's buckets full of live items: the item just written
            // is dead bytes, and the store fails as one without room does.
            self.item_mut(e).mark_deleted();
            self.kill_bytes(segment_of(e), size);
            self.stats.outofmemory += 1;
            return Err(StoreError::OutOfMemory);
        }
        self.stats.curr_expiring += expiring;
        self.stats.bytes += size as u64;
        self.stats.curr_items += 1;
        self.stats.total_items += 1;
        debug_assert_eq!(self.stats.heap_bytes, self.heap_now());
        Ok(())
    }
}

/// The deadline `ttl` gives an item whose current deadline is `kept` ([`Deadline::NEVER`] for
/// a new one); an expired one has passed at `now`.
fn deadline_for(ttl: Ttl, kept: Deadline, now: Now) -> Deadline {
    match ttl {
        Ttl::Exptime(exptime) => Expiry::resolve(exptime, now).encode(now),
        Ttl::AtMillis(at) => Expiry::at_millis(at, now).encode(now),
        Ttl::Keep => kept,
    }
}

#[inline]
fn check_key(key: &[u8]) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        Err(StoreError::KeyTooLong)
    } else {
        Ok(())
    }
}

/// An item's view with its value as a range of the item's bytes (from its header), for a
/// reader that changes the item's marks before it replies: the value does not move.
#[inline(always)]
fn view_parts(item: ItemRef<'_>, tail: Tail) -> (core::ops::Range<usize>, ItemView<'static>) {
    let view = ItemView {
        value: &[],
        flags: item.flags(),
        cas: item.cas(),
        exptime: tail.exptime,
        expiry_ms: item.deadline_at(tail.exptime).millis(),
        last_access: item.last_access(),
        fetched: item.fetched(),
        stale: item.stale(),
        win_sent: item.win_sent(),
    };
    (tail.value, view)
}

#[inline]
fn view(item: ItemRef<'_>) -> ItemView<'_> {
    let (value, parts) = view_parts(item, item.tail());
    ItemView {
        value: item.bytes(value),
        ..parts
    }
}
