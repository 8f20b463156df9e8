//! One core's cache shard: segments, the table, the budget, the eviction hand, CAS and flush
//! state.

use core::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;

use crate::error::StoreError;
use crate::expiry::{Deadline, Expiry, Now, Ttl};
use crate::item::{Fields, GENERATION_MASK, ItemMut, ItemRef, Liveness, MAX_KEY_LEN};
use crate::segment::{self, Segment, Segments, State};
use crate::stats::ShardStats;
use crate::table::{self, Loc, Table, offset_of, segment_of};

/// Sizes of one shard, from the server's command line.
#[derive(Debug, Clone, Copy)]
pub struct ShardConfig {
    /// This shard's memory budget in bytes (memcached `-m`, divided among cores); covers
    /// the segments items are written to and the hash table.
    pub memory_limit_bytes: usize,
    /// memcached `-I` (default 1 MiB): an item whose [`item_size`](crate::item_size)
    /// exceeds it is refused with [`StoreError::TooLarge`].
    pub max_item_size: usize,
}

/// How a store treats an existing key (protocol.txt, "Storage commands").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if the key is not live.
    Add,
    /// Store only if the key is live.
    Replace,
    /// Add the data after the live item's value, keeping its flags and expiry.
    Append,
    /// Add the data before the live item's value, keeping its flags and expiry.
    Prepend,
}

/// Direction of [`Shard::incr_decr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    /// Add, wrapping at 2^64.
    Incr,
    /// Subtract, stopping at 0.
    Decr,
}

/// Where the new CAS of an item a call creates or modifies comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewCas {
    /// The next value of the shard's counter: what every protocol does by default.
    Next,
    /// This value, chosen by the client (meta protocol `E<token>`), whatever it is; the counter
    /// is not advanced. CAS values play no part in `flush_all` or eviction, so any value is
    /// safe; two items may then share a CAS, and a later counter value may be lower.
    Given(u64),
}

/// One store request (protocol.txt, "Storage commands"): what to write under which key, on
/// what conditions, for [`Shard::store`].
///
/// Start from [`Write::new`] and set what differs:
/// `Write { flags: 5, ttl: Ttl::Exptime(60), ..Write::new(StoreMode::Set, b"k", b"v") }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write<'a> {
    /// How an existing key is treated.
    pub mode: StoreMode,
    /// The key (1 to 250 bytes).
    pub key: &'a [u8],
    /// The value, or the bytes appended or prepended.
    pub value: &'a [u8],
    /// The client's opaque flags (`Append`/`Prepend` keep the item's).
    pub flags: u32,
    /// How long the item lives (`Append`/`Prepend` keep the item's expiry).
    pub ttl: Ttl,
    /// Non-zero: a compare-and-swap against the live item's CAS.
    pub cas: u64,
    /// Where the stored item's CAS comes from.
    pub new_cas: NewCas,
}

impl<'a> Write<'a> {
    /// A plain store in `mode`: flags 0, never expires, no compare, the counter's next CAS.
    pub const fn new(mode: StoreMode, key: &'a [u8], value: &'a [u8]) -> Write<'a> {
        Write {
            mode,
            key,
            value,
            flags: 0,
            ttl: Ttl::Exptime(0),
            cas: 0,
            new_cas: NewCas::Next,
        }
    }
}

/// One `incr`/`decr` request (protocol.txt, "Increment/Decrement"), for [`Shard::incr_decr`].
///
/// Start from [`Arith::new`] and set what differs:
/// `Arith { create: Some((0, 0)), ..Arith::new(b"hits", Delta::Incr, 1) }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arith<'a> {
    /// The key (1 to 250 bytes).
    pub key: &'a [u8],
    /// Add or subtract.
    pub direction: Delta,
    /// The amount.
    pub delta: u64,
    /// On a missing key: store this initial value with this expiration time (the binary
    /// protocol's counters); `None` fails with [`StoreError::NotFound`].
    pub create: Option<(u64, i64)>,
    /// Non-zero: the live item's CAS must be this.
    pub cas: u64,
    /// Where the item's new CAS comes from.
    pub new_cas: NewCas,
}

impl<'a> Arith<'a> {
    /// `direction` by `delta` on `key`: no creation, no compare, the counter's next CAS.
    pub const fn new(key: &'a [u8], direction: Delta, delta: u64) -> Arith<'a> {
        Arith {
            key,
            direction,
            delta,
            create: None,
            cas: 0,
            new_cas: NewCas::Next,
        }
    }
}

/// A borrowed view of a live item, valid until the next call on the shard.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    /// The value bytes.
    pub value: &'a [u8],
    /// The client's opaque flags.
    pub flags: u32,
    /// The item's CAS unique.
    pub cas: u64,
    /// When the item expires: 0 = never, else the unix second in which it dies (its expiry
    /// rounded down to the second; [`ItemView::expiry_ms`] has the millisecond).
    pub exptime: u32,
    /// When the item expires: 0 = never, else the unix millisecond from which it is dead.
    pub expiry_ms: u64,
    /// The unix second of the item's last store, fetch or touch before this call (clamped to
    /// `u32`); see [`ItemView::idle_secs`].
    pub last_access: u32,
    /// Whether a client had fetched the item (get, touch) before this call.
    pub fetched: bool,
    /// Meta protocol: the item was invalidated ([`Shard::invalidate`]) and is stale.
    pub stale: bool,
    /// Meta protocol: a client holds the item's recache token ([`Shard::claim_win`]).
    pub win_sent: bool,
}

impl ItemView<'_> {
    /// Seconds since the item's last access as of `now` (0 if the clock went back): the meta
    /// protocol's `l` flag and `me`'s `la`.
    pub fn idle_secs(&self, now: impl Into<Now>) -> u64 {
        now.into()
            .secs()
            .saturating_sub(u64::from(self.last_access))
    }
}

/// Where a lookup will read, from [`Shard::hint`], for a caller that prefetches. The item's
/// table entry and the item itself are two dependent loads: prefetch [`Hint::bucket`] for
/// every key first, then (the buckets arriving meanwhile) [`Hint::block`] for every key, and
/// the misses of all keys overlap at each stage.
#[derive(Debug, Clone, Copy)]
pub struct Hint<'a> {
    entry: &'a u64,
    block: &'a [u8],
}

impl<'a> Hint<'a> {
    /// An address in the item's table bucket (one 64-byte cache line, shared with up to six
    /// other entries): the bucket's start plus the entry's slot number, so that hints of two
    /// items never compare equal. Only for a prefetch; taking it reads nothing.
    #[inline]
    pub fn bucket(self) -> *const u8 {
        let entry: *const u8 = core::ptr::from_ref(self.entry).cast();
        let slot = entry.addr() % 64 / 8;
        entry.wrapping_sub(entry.addr() % 64).wrapping_add(slot)
    }

    /// The item in its segment (header, key, value), which a lookup reads after the entry (it
    /// compares the key there): only for a prefetch of its cache lines.
    #[inline]
    pub fn block(self) -> &'a [u8] {
        self.block
    }
}

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

/// What one [`Shard::crawl`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Crawled {
    /// Items looked at.
    pub checked: usize,
    /// Of those, dead ones taken back.
    pub reclaimed: usize,
    /// The bucket the next call starts from: [`Shard::num_buckets`] once the walk reached the
    /// table's end.
    pub next: usize,
}

/// Why a lookup found no live item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Miss {
    /// Not present.
    Absent,
    /// Present but dead (expired or flushed); it has just been reclaimed.
    Dead(Liveness),
}

/// Smallest segment: a budget below 32 of these still gets segments of this size.
const MIN_SEGMENT_BYTES: usize = 4096;
/// Largest segment (items larger than a segment get one of their own, of their size).
pub const MAX_SEGMENT_BYTES: usize = 1 << 20;
/// Live items are evicted only while dead bytes are at most 1/`DEAD_SHARE` of the segment
/// memory; above it the eviction hand keeps every live item, taking back only dead bytes.
const DEAD_SHARE: usize = 4;
/// Entries per bucket at which the table considers doubling (4 of 7 slots).
const GROW_LOAD: usize = 4;
/// Entries per bucket the table holds before inserts start failing often (9/10 of 7).
const FULL_LOAD_TENTHS: usize = 63;

/// The segment size for a budget: 1/32 of it as a power of two, from 4 KiB to 1 MiB.
fn segment_size_for(limit: usize) -> usize {
    let target = (limit / 32).clamp(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES);
    1 << (usize::BITS - 1 - target.leading_zeros())
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
    /// Times the table's load called for doubling and the bigger table was not worth its
    /// memory (tests only).
    #[cfg(test)]
    capped: usize,
    /// The table size whose doubling was last refused, so each size counts once.
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
        match self.lookup(hash, key, now) {
            Ok(loc) => {
                self.stats.get_hits += 1;
                let mut item = self.item_mut(self.table.get(loc));
                let (fetched, last_access) = (item.get().fetched(), item.get().last_access());
                item.mark_fetched(now);
                Some(ItemView {
                    fetched,
                    last_access,
                    ..view(item.into_ref())
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
            self.remove_at(loc, Removal::Client);
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
        self.remove_at(loc, Removal::Client);
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
        self.remove_at(loc, Removal::Client);
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

    /// memcached `flush_all [delay]`: every item stored before `now + delay` becomes
    /// invisible at that time. `delay` follows the `exptime` rules; 0 (or anything already
    /// past) flushes now. A later call replaces a pending delayed flush.
    ///
    /// Takes O(segments): the shard moves to its next flush generation and closes its open
    /// segments, which makes every item in a segment of an earlier generation dead (whatever
    /// its CAS, client-chosen ones included); their segments are taken back whole when room is
    /// needed, and their items on access, by the sweep and by the eviction hand. Generations
    /// count modulo 2^17: the flush that wraps the count reclaims every item at once (all are
    /// dead then), so no item can outlive a flush and return 2^17 flushes later.
    pub fn flush_all(&mut self, delay: i64, now: impl Into<Now>) {
        let now = now.into();
        self.advance(now);
        match Expiry::resolve(delay, now) {
            Expiry::At(at) if at > now.millis() => self.pending_flush_at = Some(at),
            _ => self.apply_flush(),
        }
    }

    /// Reclaims dead (expired or flushed) items; call from an idle loop.
    ///
    /// Examines at most `max_items` items, continuing where the previous call stopped, and
    /// walks at most one revolution of the table per call. Returns how many it reclaimed. A
    /// segment whose last item goes is taken back with it.
    pub fn sweep_expired(&mut self, max_items: usize, now: impl Into<Now>) -> usize {
        let now = now.into();
        self.advance(now);
        let before = self.stats.reclaimed;
        let slots = self.table.num_buckets() * table::SLOTS;
        let mut examined = 0;
        for _ in 0..slots {
            if examined >= max_items || self.table.len() == 0 {
                break;
            }
            let at = self.sweep_hand % slots;
            self.sweep_hand = at + 1;
            let loc = Loc {
                bucket: at / table::SLOTS,
                slot: at % table::SLOTS,
            };
            let e = self.table.get(loc);
            if e == 0 {
                continue;
            }
            examined += 1;
            if self.liveness(e, now) != Liveness::Live {
                self.remove_at(loc, Removal::Reclaimed);
            }
        }
        (self.stats.reclaimed - before) as usize
    }

    /// The LRU crawler's walk (memcached's `lru_crawler crawl`, and memspin's background
    /// crawler): from bucket `start`, looks at the items of whole buckets in bucket order, at
    /// most `max_items` of them (when `max_items` is smaller than the first bucket's count,
    /// only that many of its items, and the walk moves past it), and takes back the dead (expired or flushed) ones, counting
    /// `crawler_items_checked`, `crawler_reclaimed` and, for an expired item no client
    /// fetched, `expired_unfetched`. Live items are left as they are (no clock bump, no access
    /// time). The caller keeps the cursor ([`Crawled::next`]) between calls; entries stay in
    /// their buckets while the table keeps its size, so a walk in steps sees every item that
    /// stays for the whole walk (only a resize may make it miss or repeat some).
    pub fn crawl(&mut self, start: usize, max_items: usize, now: impl Into<Now>) -> Crawled {
        let now = now.into();
        self.advance(now);
        let buckets = self.num_buckets();
        let mut done = Crawled {
            next: start.min(buckets),
            ..Crawled::default()
        };
        while done.next < buckets && done.checked < max_items {
            let index = done.next;
            let mut held = [(Loc { bucket: 0, slot: 0 }, 0u64); table::SLOTS];
            let mut n = 0;
            for found in self.table.bucket(index) {
                held[n] = found;
                n += 1;
            }
            if done.checked > 0 && done.checked + n > max_items {
                break;
            }
            // A bucket with more entries than the call may look at: only its first ones.
            n = n.min(max_items - done.checked);
            done.next += 1;
            for &(loc, e) in &held[..n] {
                done.checked += 1;
                let liveness = self.liveness(e, now);
                if liveness != Liveness::Live {
                    self.remove_at(loc, Removal::Crawled(liveness));
                    done.reclaimed += 1;
                }
            }
        }
        self.stats.crawler_items_checked += done.checked as u64;
        done
    }

    /// Frees about `bytes` of memory for a page `slabs reassign` moves out of the item class:
    /// the eviction hand takes back dead items and evicts live ones from the oldest segments
    /// (with eviction off too: an operator asked for it, and without a second chance), counting
    /// them in `slab_reassign_evictions_nomem` rather than `evictions`, as memcached counts the
    /// items of a page it moves. At most `max_items` items go per call. Returns the bytes freed
    /// (the heap's decrease), less than `bytes` when the call's items ran out or the shard is
    /// empty. A segment's memory returns to the allocator once its last item is gone.
    pub fn release(&mut self, bytes: usize, max_items: usize, now: impl Into<Now>) -> usize {
        let now = now.into();
        self.advance(now);
        let before = self.stats.heap_bytes;
        let mut taken = 0;
        while before - self.stats.heap_bytes < bytes as u64 && taken < max_items {
            if !self.evict_one(now, Victim::Release) {
                break;
            }
            taken += 1;
        }
        (before - self.stats.heap_bytes) as usize
    }

    /// Changes the memory budget (memcached's `cache_memlimit`; this shard's share of it). A
    /// higher budget is usable at once. Under a lower one the shard is over its budget until
    /// [`Shard::shrink`] brings it down; meanwhile a store makes room for itself only, so the
    /// heap does not grow, and no store pays for the whole difference. New segments take the
    /// size the new budget calls for.
    pub fn set_memory_limit(&mut self, bytes: usize) {
        #[cfg(test)]
        {
            self.lowered = (self.stats.heap_bytes, self.memory_bytes());
        }
        self.config.memory_limit_bytes = bytes;
        self.stats.limit_maxbytes = bytes as u64;
        let size = segment_size_for(bytes);
        if size != self.segment_size {
            self.segment_size = size;
            self.segs.drop_spares(0);
        }
    }

    /// Whether the shard holds more than its budget (after [`Shard::set_memory_limit`]
    /// lowered it): its items and table, or its segments and table.
    pub fn over_budget(&self) -> bool {
        let limit = self.config.memory_limit_bytes;
        self.stats.heap_bytes > limit as u64 || self.memory_bytes() > limit
    }

    /// One bounded step down to a lowered budget: spare segments are freed, the table is
    /// rebuilt smaller when its items fit in half of it (at most once per call, O(buckets)),
    /// else the eviction hand evicts from the oldest segments, at most `max_items` items per
    /// call, as a store would (with eviction off, memcached's `-M`, only dead items go, and
    /// live ones stay over the budget until they are deleted or expire; stores needing room
    /// are refused meanwhile). A segment's memory returns to the allocator once its last item
    /// is gone. Returns whether the shard is still over its budget.
    pub fn shrink(&mut self, max_items: usize, now: impl Into<Now>) -> bool {
        let now = now.into();
        self.advance(now);
        self.segs.drop_spares(0);
        let mut rebuilt = false;
        let mut taken = 0;
        while self.over_budget() {
            if !rebuilt && self.shrink_table() {
                rebuilt = true;
                continue;
            }
            if taken >= max_items || !self.evict_one(now, Victim::Shrink) {
                break;
            }
            self.segs.drop_spares(0);
            taken += 1;
        }
        self.over_budget()
    }

    /// Rebuilds the table with half its buckets, when its items fit there at no more than
    /// [`GROW_LOAD`] per bucket; an empty table gives its allocation back. Returns whether it
    /// did.
    fn shrink_table(&mut self) -> bool {
        let buckets = self.num_buckets();
        let len = self.table.len();
        if buckets == 0 {
            return false;
        }
        if len == 0 {
            self.table = Table::default();
        } else if buckets >= 2 && len <= GROW_LOAD * (buckets / 2) {
            self.rebuild_table(buckets / 2);
        } else {
            return false;
        }
        self.refresh_heap();
        true
    }

    /// Buckets in the table (0 before the first store): the range [`Shard::visit`] walks.
    pub fn num_buckets(&self) -> usize {
        self.table.num_buckets()
    }

    /// Calls `f(key, item, size)` for every live item in buckets `start..end` (clamped to the
    /// table), in bucket order, without touching them (no fetched mark, no counters; dead
    /// items are skipped, not reclaimed). `size` is what the item is charged
    /// ([`item_size`](crate::item_size)). For inspection (`lru_crawler metadump`, `stats
    /// sizes`, Redis `SCAN` with the bucket index as its cursor): walking the whole table costs
    /// time in proportion to it, so a caller walks it in slices.
    ///
    /// A walk in slices is stable while the table keeps its size: an entry stays in its
    /// bucket from insert to removal, so an item that is live for the whole walk is visited
    /// exactly once, whatever is stored or removed between slices. The table changes size
    /// only when it doubles while the cache fills or halves under a budget lowered at run
    /// time; a walk across such a resize may miss or repeat items, as a caller can tell from
    /// [`Shard::num_buckets`] changing between slices.
    pub fn visit(
        &self,
        start: usize,
        end: usize,
        now: impl Into<Now>,
        mut f: impl FnMut(&[u8], ItemView<'_>, usize),
    ) {
        let now = now.into();
        let end = end.min(self.num_buckets());
        for index in start..end {
            for (_, e) in self.table.bucket(index) {
                let item = self.item(e);
                if self.liveness(e, now) == Liveness::Live {
                    f(item.key(), view(item), item.size());
                }
            }
        }
    }

    /// Zeroes the counters `stats reset` resets (hits, misses, stores, evictions, ...),
    /// keeping what describes the cache now (items, bytes, the budget).
    pub fn reset_stats(&mut self) {
        let kept = ShardStats {
            curr_items: self.stats.curr_items,
            curr_expiring: self.stats.curr_expiring,
            bytes: self.stats.bytes,
            heap_bytes: self.stats.heap_bytes,
            limit_maxbytes: self.stats.limit_maxbytes,
            ..ShardStats::default()
        };
        self.stats = kept;
    }

    /// Keeps a record of every live item evicted from now on (off by default), for
    /// [`Shard::take_evictions`]; at most [`EVICTION_LOG_LEN`] wait, later ones are not kept.
    pub fn set_eviction_log(&mut self, on: bool) {
        if on {
            self.evictions.get_or_insert_with(Vec::new);
        } else {
            self.evictions = None;
        }
    }

    /// Hands each eviction recorded since the last call to `f`, oldest first.
    pub fn take_evictions(&mut self, mut f: impl FnMut(&Evicted)) {
        if let Some(list) = self.evictions.as_mut() {
            for evicted in list.drain(..) {
                f(&evicted);
            }
        }
    }

    // ---- internals ----

    /// Applies a delayed flush whose time has come. Called first by every operation, so
    /// items stored by this call (at `now >= at`) survive it.
    #[inline]
    fn advance(&mut self, now: Now) {
        if let Some(at) = self.pending_flush_at
            && now.millis() >= at
        {
            self.apply_flush();
        }
    }

    /// Flushes now: moves to the next flush generation and closes the open segments (every
    /// segment holds items of one generation). On a wrap of the count, segments of the
    /// generation now reused may still wait to be taken back; every item is dead at this
    /// point, so all are reclaimed at once (O(n), once per 2^17 flushes).
    fn apply_flush(&mut self) {
        self.pending_flush_at = None;
        self.generation = (self.generation + 1) & GENERATION_MASK;
        for class in 0..segment::CLASSES {
            if let Some(id) = self.segs.open[class] {
                self.seal(id);
            }
        }
        self.dead_segment_check_ms = 0;
        if self.generation == 0 {
            while let Some(&id) = self.segs.fifo.front() {
                self.reclaim_segment(id, Removal::Reclaimed);
            }
        }
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
                segs[segment_of(e)].item(offset_of(e)).key() == key
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

    /// Finds the live item under `key`; a dead item found is reclaimed.
    #[inline]
    fn lookup(&mut self, hash: u64, key: &[u8], now: Now) -> Result<Loc, Miss> {
        let segs = &self.segs.segs;
        let found = self.table.find(hash, |e| {
            segs[segment_of(e)].item(offset_of(e)).key() == key
        });
        let Some(loc) = found else {
            return Err(Miss::Absent);
        };
        match self.liveness(self.table.get(loc), now) {
            Liveness::Live => Ok(loc),
            dead => {
                self.remove_at(loc, Removal::Reclaimed);
                Err(Miss::Dead(dead))
            }
        }
    }

    /// Bytes of the budget in use: the segments held, less what is free in them (the open
    /// segments' unwritten room, the spare segment, the part of the oldest segment the
    /// eviction hand has passed and not kept), plus the table. Live items, dead items not yet taken back
    /// and the unwritten tails of sealed segments all count.
    fn heap_now(&self) -> u64 {
        let open_room: usize = self
            .segs
            .open
            .iter()
            .flatten()
            .map(|&id| self.segs.segs[id].room())
            .sum();
        let spare: usize = self
            .segs
            .spare
            .iter()
            .map(|&id| self.segs.segs[id].data.len())
            .sum();
        let passed = self
            .segs
            .fifo
            .front()
            .map_or(0, |&id| self.segs.segs[id].hand - self.segs.segs[id].keep);
        (self.segs.bytes - open_room - spare - passed + self.table.bytes()) as u64
    }

    /// Brings `heap_bytes` up to date ([`Shard::heap_now`]).
    fn refresh_heap(&mut self) {
        self.stats.heap_bytes = self.heap_now();
    }

    /// Takes the item at `loc` out of the table and marks its bytes dead.
    fn remove_at(&mut self, loc: Loc, why: Removal) {
        let e = self.table.remove(loc);
        let item = self.item(e);
        let (size, expires, fetched) = (item.size(), item.expires(), item.fetched());
        self.item_mut(e).mark_deleted();
        self.stats.bytes -= size as u64;
        self.refresh_heap();
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
            let after = self.heap_now() + size as u64;
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
                self.refresh_heap();
                self.stats.total_items += 1;
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
            self.remove_at(loc, Removal::Client);
        }
        self.make_room(size, now)?;
        let e = self.append(hash, fields, now)?;
        if !self.table_insert(hash, e, now) {
            // Eviction off and the key's buckets full of live items: the item just written
            // is dead bytes, and the store fails as one without room does.
            self.item_mut(e).mark_deleted();
            self.kill_bytes(segment_of(e), size);
            self.refresh_heap();
            self.stats.outofmemory += 1;
            return Err(StoreError::OutOfMemory);
        }
        self.stats.curr_expiring += expiring;
        self.stats.bytes += size as u64;
        self.refresh_heap();
        self.stats.curr_items += 1;
        self.stats.total_items += 1;
        Ok(())
    }

    /// Evicts until an item of `size` bytes fits in the budget beside what is in use (the
    /// heap, see `heap_now`; over a lowered budget, beside the heap as it is), so that a store
    /// over a lowered budget makes room for itself; `append` keeps the segments within it.
    fn make_room(&mut self, size: usize, now: Now) -> Result<(), StoreError> {
        let limit = (self.config.memory_limit_bytes as u64).max(self.heap_now());
        let table_growth = if self.table.num_buckets() == 0 {
            Table::bytes_for(1)
        } else {
            0
        };
        while self.heap_now() + (table_growth + size) as u64 > limit {
            if !self.evict_one(now, Victim::Store) {
                return Err(StoreError::OutOfMemory);
            }
        }
        Ok(())
    }

    /// Whether an item of `size` bytes in `class` can be written without evicting anything.
    fn has_room(&self, size: usize, class: usize) -> bool {
        if size <= self.segment_size
            && let Some(id) = self.segs.open[class]
            && self.segs.segs[id].room() >= size
        {
            return true;
        }
        let capacity = size.max(self.segment_size);
        (capacity == self.segment_size && !self.segs.spare.is_empty())
            || self.memory_bytes() + capacity <= self.config.memory_limit_bytes
    }

    /// Writes a new item to the open segment of its expiry class (or to a segment of its own
    /// when it is larger than a segment), evicting to make room for a segment when the budget
    /// is reached; returns its table entry (not yet in the table).
    fn append(&mut self, hash: u64, fields: &Fields<'_>, now: Now) -> Result<u64, StoreError> {
        let size = fields.size();
        let class = segment::class_of(fields.deadline, now);
        let (id, offset) = loop {
            if let Some(at) = self.space(size, class) {
                break at;
            }
            if !self.evict_one(now, Victim::Store) {
                return Err(StoreError::OutOfMemory);
            }
        };
        let seg = &mut self.segs.segs[id];
        fields.write(&mut seg.data[offset..offset + size]);
        seg.write = offset + size;
        seg.live_items += 1;
        seg.live_bytes += size;
        self.note_deadline(id, fields.deadline);
        self.refresh_heap();
        Ok(table::entry(hash, id, offset))
    }

    /// Room for `size` bytes in `class` without evicting: in its open segment, else in a new
    /// one (the spare, or a new buffer within the budget). Returns the segment and offset.
    fn space(&mut self, size: usize, class: usize) -> Option<(usize, usize)> {
        if size > self.segment_size {
            let budget = self.config.memory_limit_bytes;
            if self.memory_bytes() + size > budget {
                return None;
            }
            // A segment of its own, sealed from the start.
            let id = self.segs.take(size, self.segment_size)?;
            self.segs.open(id, class, self.generation, State::Sealed);
            return Some((id, 0));
        }
        if let Some(id) = self.segs.open[class] {
            let seg = &self.segs.segs[id];
            if seg.room() >= size {
                return Some((id, seg.write));
            }
            self.seal(id);
        }
        let table_to_come = if self.table.num_buckets() == 0 {
            Table::bytes_for(1)
        } else {
            0
        };
        let budget = self.config.memory_limit_bytes.saturating_sub(table_to_come);
        let capacity = if !self.segs.spare.is_empty() {
            self.segment_size
        } else {
            self.segment_size
                .min(budget.saturating_sub(self.memory_bytes()))
        };
        if capacity < size {
            return None;
        }
        let id = self.segs.take(capacity, self.segment_size)?;
        self.segs.open(id, class, self.generation, State::Open);
        Some((id, 0))
    }

    /// Puts entry `e` (of `hash`) in the table, doubling the table when its load calls for it
    /// and the bigger table is worth its memory; when the entry finds no free slot near its
    /// home bucket, an item of that bucket is evicted for it (a dead one first; a live one
    /// only with eviction on). Returns whether the entry was placed.
    fn table_insert(&mut self, hash: u64, e: u64, now: Now) -> bool {
        let buckets = self.table.num_buckets();
        if buckets == 0 {
            self.table = Table::with_buckets(1);
        } else if self.table.len() >= GROW_LOAD * buckets {
            self.maybe_grow();
        }
        if self.table.insert(hash, e).is_some() {
            return true;
        }
        // The capped path: evict from the home bucket (a dead item first, else the one
        // nearest the eviction hand, which would go soonest anyway: its dead bytes then lie
        // where the hand takes segments back next) and take its slot.
        let home = self.table.home_of(hash);
        let mut victim = None;
        let mut oldest = u64::MAX;
        for (loc, other) in self.table.bucket(home) {
            if self.liveness(other, now) != Liveness::Live {
                victim = Some((loc, Removal::Reclaimed));
                break;
            }
            let queued = self.segs.segs[segment_of(other)].queued;
            if queued < oldest {
                oldest = queued;
                victim = Some((loc, Removal::Evicted));
            }
        }
        if victim.is_some_and(|(_, why)| why == Removal::Evicted) && !self.evict {
            return false;
        }
        if let Some((loc, why)) = victim {
            if why == Removal::Evicted {
                self.log_eviction(self.table.get(loc), now);
            }
            self.remove_at(loc, why);
        }
        let placed = self.table.insert(hash, e);
        debug_assert!(placed.is_some(), "a slot of the home bucket was freed");
        true
    }

    /// Doubles the table if the items the budget holds at their current mean size would
    /// overload it, and the bigger table fits beside the segments now. What the budget holds
    /// beside the bigger table is counted less one segment: the spare, or the one the
    /// eviction hand is emptying, holds no items that count.
    fn maybe_grow(&mut self) {
        let buckets = self.table.num_buckets();
        if self.refused_buckets == buckets || self.stats.bytes == 0 {
            return;
        }
        let limit = self.config.memory_limit_bytes;
        let bigger = Table::bytes_for(buckets * 2);
        let mean = (self.stats.bytes / self.table.len().max(1) as u64).max(1) as usize;
        let would_hold = limit.saturating_sub(bigger + self.segment_size) / mean;
        let worth = would_hold * 10 > FULL_LOAD_TENTHS * buckets;
        let fits = self.segs.bytes + bigger <= limit;
        if worth && fits {
            self.rebuild_table(buckets * 2);
            self.refresh_heap();
        } else {
            self.refused_buckets = buckets;
            #[cfg(test)]
            {
                self.capped += 1;
            }
        }
    }

    /// Moves every entry into a new table of `buckets` buckets (rehashing each item's key);
    /// an entry that finds no slot there is evicted (unlikely at the loads this is called at).
    fn rebuild_table(&mut self, buckets: usize) {
        let old = core::mem::replace(&mut self.table, Table::with_buckets(buckets));
        self.refused_buckets = 0;
        let mut lost = Vec::new();
        for e in old.entries() {
            let hash = self.hasher.hash_one(self.item(e).key());
            if self.table.insert(hash, e).is_none() {
                lost.push(e);
            }
        }
        for e in lost {
            let item = self.item(e);
            let (size, expires, fetched) = (item.size(), item.expires(), item.fetched());
            self.item_mut(e).mark_deleted();
            self.stats.bytes -= size as u64;
            self.stats.curr_items -= 1;
            self.stats.curr_expiring -= u64::from(expires);
            self.stats.evictions += 1;
            if !fetched {
                self.stats.evicted_unfetched += 1;
            }
            self.kill_bytes(segment_of(e), size);
        }
    }

    /// Records the eviction of the live item of entry `e`: `evicted_nonzero`, `evicted_time`
    /// and the eviction log.
    fn log_eviction(&mut self, e: u64, now: Now) {
        let item = self.segs.segs[segment_of(e)].item(offset_of(e));
        if item.deadline() != Deadline::NEVER {
            self.stats.evicted_nonzero += 1;
        }
        self.stats.evicted_time = now.secs().saturating_sub(u64::from(item.last_access()));
        if let Some(log) = self.evictions.as_mut()
            && log.len() < EVICTION_LOG_LEN
        {
            log.push(Evicted {
                key: item.key().into(),
                fetched: item.fetched(),
                exptime: item.exptime(),
                last_access: item.last_access(),
                value_len: item.value().len(),
            });
        }
    }

    /// Takes back one segment whose items are all dead (flushed, or all expired), if there is
    /// one; returns whether it did.
    fn reclaim_dead_segment(&mut self, now: Now, why: Removal) -> bool {
        if now.millis() < self.dead_segment_check_ms {
            return false;
        }
        let generation = self.generation;
        let mut next_check = u64::MAX;
        let mut dead = None;
        for &id in &self.segs.fifo {
            let seg = &self.segs.segs[id];
            if seg.generation != generation || seg.expired(now) {
                dead = Some(id);
                break;
            }
            if seg.last_deadline_ms != 0 && seg.last_deadline_ms != u64::MAX {
                next_check = next_check.min(seg.last_deadline_ms);
            }
        }
        match dead {
            Some(id) => {
                self.reclaim_segment(id, why);
                true
            }
            None => {
                self.dead_segment_check_ms = next_check;
                false
            }
        }
    }

    /// Removes every item of segment `id` (all dead: counted as `why`) and takes it back.
    fn reclaim_segment(&mut self, id: usize, why: Removal) {
        self.seal(id);
        let mut offset = 0;
        while self.segs.segs[id].state != State::Free && offset < self.segs.segs[id].write {
            let seg = &self.segs.segs[id];
            if offset == seg.keep && seg.hand > seg.keep {
                // The eviction hand is passing over it: skip what it passed and did not keep.
                offset = seg.hand;
                continue;
            }
            let item = seg.item(offset);
            let next = seg.next(offset);
            if !item.deleted() {
                let hash = self.hasher.hash_one(item.key());
                let loc = self
                    .table
                    .find(hash, |e| segment_of(e) == id && offset_of(e) == offset);
                match loc {
                    Some(loc) => self.remove_at(loc, why),
                    None => debug_assert!(false, "a live item without an entry"),
                }
            }
            offset = next;
        }
    }

    /// The eviction hand: looks at the next item of the oldest segment. A dead item (expired or
    /// flushed) is reclaimed; for a store, a live one the hand keeps ([`Shard::keeps`]: read
    /// since it was written or last kept, or any while many bytes are dead) moves down to the
    /// part of the segment the hand keeps, its clock counter lowered by one; any other live
    /// one is evicted.
    /// A segment whose last live item goes is taken back; one the hand has passed over with
    /// kept items goes to the FIFO's tail ([`Shard::end_pass`]). Returns false if there is
    /// nothing to take, or, with eviction off (and `victim` not [`Victim::Release`]), if no dead
    /// item was found (then a store counts `outofmemory`).
    fn evict_one(&mut self, now: Now, victim: Victim) -> bool {
        let done = self.evict_step(now, victim);
        self.refresh_heap();
        done
    }

    /// [`Shard::evict_one`] but for `heap_bytes`.
    fn evict_step(&mut self, now: Now, victim: Victim) -> bool {
        if self.reclaim_dead_segment(now, Removal::Reclaimed) {
            return true;
        }
        if !self.evict && victim != Victim::Release && !self.compacts() {
            return self.reclaim_one_dead(now, victim);
        }
        // Bounded: each turn looks at one item or ends a pass over a segment, and an item is
        // kept at most three times (its clock counter drops each time).
        loop {
            let Some(&id) = self.segs.fifo.front() else {
                return false;
            };
            if self.segs.segs[id].state == State::Open {
                self.seal(id);
                continue;
            }
            let seg = &self.segs.segs[id];
            if seg.hand >= seg.write {
                // The segment is taken back or its kept part is room for stores again: the
                // caller looks whether that is room enough before anything live goes.
                self.end_pass(id);
                return true;
            }
            let offset = seg.hand;
            let item = seg.item(offset);
            let (size, deleted) = (item.size(), item.deleted());
            let hash = if deleted {
                0
            } else {
                self.hasher.hash_one(item.key())
            };
            self.segs.segs[id].hand = offset + size;
            if deleted {
                continue;
            }
            let Some(loc) = self
                .table
                .find(hash, |e| segment_of(e) == id && offset_of(e) == offset)
            else {
                debug_assert!(false, "a live item without an entry");
                continue;
            };
            let e = self.table.get(loc);
            let why = match self.liveness(e, now) {
                Liveness::Live if victim == Victim::Release => Removal::Released,
                Liveness::Live
                    if victim != Victim::Release
                        && (!self.evict || (victim == Victim::Store && self.keeps(e))) =>
                {
                    if self.keep_item(id, loc, offset, size) {
                        // Its last live item copied out, the segment was taken back.
                        return true;
                    }
                    continue;
                }
                Liveness::Live => {
                    self.log_eviction(e, now);
                    Removal::Evicted
                }
                Liveness::Expired | Liveness::Flushed => Removal::Reclaimed,
            };
            self.remove_at(loc, why);
            return true;
        }
    }

    /// Whether the eviction hand, making room for a store, keeps the live item of entry `e`:
    /// if it was read since it was written or last kept (clock counter above 0), or while
    /// more than [`DEAD_SHARE`] of the segment memory is dead bytes (deleted or overwritten
    /// items), which a pass over segments takes back without evicting anything.
    fn keeps(&self, e: u64) -> bool {
        if self.item(e).clock() > 0 {
            return true;
        }
        let passed = self
            .segs
            .fifo
            .front()
            .map_or(0, |&id| self.segs.segs[id].hand - self.segs.segs[id].keep);
        // `passed` includes the item being decided on, still live: at most its size too few.
        self.segs.dead_bytes.saturating_sub(passed) * DEAD_SHARE > self.segs.bytes
    }

    /// Gives the live item at `offset` of the oldest segment `id` (entry at `loc`, `size`
    /// bytes) a second chance, its clock counter lowered by one: it is copied to the open
    /// segment of its class when that has room, so that the oldest segment empties and is
    /// taken back whole; else it moves down to the segment's kept part, which
    /// [`Shard::end_pass`] turns into an open segment. Kept items thus fill open segments
    /// rather than leaving a sealed segment mostly unwritten.
    /// Returns whether segment `id` was taken back (its last live item copied out).
    fn keep_item(&mut self, id: usize, loc: Loc, offset: usize, size: usize) -> bool {
        let e = self.table.get(loc);
        let class = self.segs.segs[id].class;
        if let Some(open) = self.segs.open[class]
            && open != id
            && self.segs.segs[open].room() >= size
        {
            let deadline = self.item(e).deadline();
            let (src, dst) = two_segments(&mut self.segs.segs, id, open);
            let to = dst.write;
            dst.data[to..to + size].copy_from_slice(&src.data[offset..offset + size]);
            ItemMut::new(&mut dst.data[to..]).age();
            ItemMut::new(&mut src.data[offset..]).mark_deleted();
            dst.write = to + size;
            dst.live_items += 1;
            dst.live_bytes += size;
            self.note_deadline(open, deadline);
            self.table.set(loc, table::moved(e, open, to));
            // The oldest segment is taken back here if this was its last live item.
            self.kill_bytes(id, size);
            return self.segs.segs[id].state == State::Free;
        }
        let seg = &mut self.segs.segs[id];
        let to = seg.keep;
        seg.data.copy_within(offset..offset + size, to);
        seg.keep = to + size;
        ItemMut::new(&mut seg.data[to..]).age();
        self.table.set(loc, table::moved(e, id, to));
        false
    }

    /// With eviction off, whether the hand may compact: pass over the oldest segments keeping
    /// every live item, which turns their dead bytes into room. Only while more than a
    /// segment's worth of bytes is dead: each pass drops the dead bytes of the segment it
    /// passed, so the hand stops within one turn of the FIFO.
    fn compacts(&self) -> bool {
        self.segs.dead_bytes > self.segment_size
    }

    /// Ends the eviction hand's pass over the oldest segment `id`: without kept items it is
    /// taken back; with some, its kept part becomes its content and it goes to the FIFO's
    /// tail. Of it and its class's open segment, the one with more unwritten room stays (or
    /// becomes) the open one and the other is sealed, so what a seal leaves unwritten is
    /// less than an item the open segment could not take.
    fn end_pass(&mut self, id: usize) {
        let seg = &mut self.segs.segs[id];
        let kept = seg.keep;
        if kept == 0 {
            debug_assert_eq!(seg.live_items, 0);
            seg.live_items = 0;
            self.free_segment(id);
            return;
        }
        debug_assert!(
            seg.live_bytes <= kept,
            "every live item is in the kept part"
        );
        self.segs.dead_bytes -= seg.write - kept;
        seg.write = kept;
        seg.hand = 0;
        seg.keep = 0;
        let class = seg.class;
        let room = seg.room();
        seg.state = State::Sealed;
        self.segs.fifo.pop_front();
        self.segs.enqueue(id);
        let open = match self.segs.open[class] {
            None => true,
            Some(other) if self.segs.segs[other].room() < room => {
                self.seal(other);
                true
            }
            Some(_) => false,
        };
        if open {
            self.segs.segs[id].state = State::Open;
            self.segs.open[class] = Some(id);
        }
        self.refresh_heap();
    }

    /// With eviction off: takes back the first dead item among the next [`NO_EVICT_SCAN`]
    /// buckets' entries; counts `outofmemory` for a store that found none.
    fn reclaim_one_dead(&mut self, now: Now, victim: Victim) -> bool {
        let buckets = self.table.num_buckets();
        if buckets > 0 {
            for _ in 0..buckets.min(NO_EVICT_SCAN) {
                let index = self.scan_hand & (buckets - 1);
                let dead = self
                    .table
                    .bucket(index)
                    .find(|&(_, e)| self.liveness(e, now) != Liveness::Live);
                if let Some((loc, _)) = dead {
                    self.remove_at(loc, Removal::Reclaimed);
                    return true;
                }
                self.scan_hand = index.wrapping_add(1);
            }
        }
        if victim == Victim::Store {
            self.stats.outofmemory += 1;
        }
        false
    }

    /// Asserts the accounting invariants (tests only).
    #[cfg(test)]
    #[track_caller]
    pub(crate) fn check_invariants(&self) {
        use crate::segment::CLASSES;
        let mut bytes = 0u64;
        let mut expiring = 0;
        let mut per_segment = vec![(0usize, 0usize); self.segs.segs.len()];
        for e in self.table.entries() {
            let item = self.item(e);
            assert!(!item.deleted(), "an entry points at dead bytes");
            let id = segment_of(e);
            assert_ne!(
                self.segs.segs[id].state,
                State::Free,
                "an entry in a free segment"
            );
            assert!(offset_of(e) + item.size() <= self.segs.segs[id].write);
            let hash = self.hasher.hash_one(item.key());
            assert_eq!(table::entry(hash, id, offset_of(e)), e, "the entry's tag");
            bytes += item.size() as u64;
            expiring += usize::from(item.expires());
            per_segment[id].0 += 1;
            per_segment[id].1 += item.size();
        }
        assert_eq!(self.stats.bytes, bytes, "bytes");
        assert_eq!(self.stats.curr_items, self.table.len() as u64, "curr_items");
        assert_eq!(self.stats.curr_expiring, expiring as u64, "curr_expiring");
        assert_eq!(self.stats.heap_bytes, self.heap_now(), "heap_bytes");
        assert!(
            self.stats.heap_bytes >= self.stats.bytes + self.table.bytes() as u64,
            "heap_bytes covers the items and the table"
        );
        let limit = self.config.memory_limit_bytes;
        assert!(
            self.stats.heap_bytes <= (limit as u64).max(self.lowered.0),
            "heap_bytes {} over the budget {limit}",
            self.stats.heap_bytes,
        );
        assert!(
            self.memory_bytes() <= limit.max(self.lowered.1),
            "memory {} over the budget {limit}",
            self.memory_bytes(),
        );
        let mut held = 0;
        let mut dead = 0;
        for (id, seg) in self.segs.segs.iter().enumerate() {
            held += seg.data.len();
            if seg.state == State::Free {
                assert_eq!(per_segment[id], (0, 0));
                continue;
            }
            assert_eq!(
                (seg.live_items, seg.live_bytes),
                per_segment[id],
                "segment {id}"
            );
            assert!(
                seg.generation == self.generation || seg.state == State::Sealed,
                "only a sealed segment may be of an earlier flush generation"
            );
            dead += seg.write - seg.live_bytes;
            if seg.state == State::Sealed {
                assert!(seg.live_items > 0, "an empty sealed segment {id} is kept");
            }
        }
        assert_eq!(held, self.segs.bytes, "segment bytes");
        assert_eq!(dead, self.segs.dead_bytes, "dead bytes");
        assert!(self.segs.spare.len() <= 1, "at most one spare");
        assert_eq!(
            self.segs.fifo.len() + self.segs.spare.len() + self.segs.unused.len(),
            self.segs.segs.len()
        );
        for class in 0..CLASSES {
            if let Some(id) = self.segs.open[class] {
                assert_eq!(self.segs.segs[id].state, State::Open);
                assert_eq!(self.segs.segs[id].generation, self.generation);
            }
        }
    }

    /// Jumps the flush generation forward, as `generation - current` immediate flushes
    /// that reclaimed nothing would (tests only: 2^17 real flushes take too long).
    #[cfg(test)]
    pub(crate) fn skip_to_generation(&mut self, generation: u32) {
        assert!(self.generation < generation && generation <= GENERATION_MASK);
        for class in 0..crate::segment::CLASSES {
            if let Some(id) = self.segs.open[class] {
                self.seal(id);
            }
        }
        self.generation = generation;
        self.dead_segment_check_ms = 0;
    }

    /// How many times the table's load called for doubling and the table kept its size, the
    /// bigger one not being worth its memory beside the items (tests only).
    #[cfg(test)]
    pub(crate) fn rebuilds(&self) -> usize {
        self.capped
    }

    /// The segment size (tests only).
    #[cfg(test)]
    pub(crate) fn segment_size(&self) -> usize {
        self.segment_size
    }

    /// Bytes of dead items not yet taken back (tests only).
    #[cfg(test)]
    pub(crate) fn dead_bytes(&self) -> usize {
        self.segs.dead_bytes
    }
}
/// Evictions [`Shard::set_eviction_log`] keeps until they are taken.
pub const EVICTION_LOG_LEN: usize = 1024;

/// A live item that was evicted, as [`Shard::take_evictions`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    /// Its key.
    pub key: Box<[u8]>,
    /// Whether a client had fetched it.
    pub fetched: bool,
    /// Its expiry second (0: never).
    pub exptime: u32,
    /// The unix second of its last access.
    pub last_access: u32,
    /// Its value's length.
    pub value_len: usize,
}

/// Segments `a` and `b` (distinct), both mutable.
fn two_segments(segs: &mut [Segment], a: usize, b: usize) -> (&mut Segment, &mut Segment) {
    debug_assert_ne!(a, b);
    if a < b {
        let (low, high) = segs.split_at_mut(b);
        (&mut low[a], &mut high[0])
    } else {
        let (low, high) = segs.split_at_mut(a);
        (&mut high[0], &mut low[b])
    }
}

/// Buckets looked at for a dead item when eviction is off, before a store that
/// needs room fails: bounded, so a full cache of live items refuses a store quickly.
pub const NO_EVICT_SCAN: usize = 1024;

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

#[inline]
fn view(item: ItemRef<'_>) -> ItemView<'_> {
    ItemView {
        value: item.value(),
        flags: item.flags(),
        cas: item.cas(),
        exptime: item.exptime(),
        expiry_ms: item.deadline().millis(),
        last_access: item.last_access(),
        fetched: item.fetched(),
        stale: item.stale(),
        win_sent: item.win_sent(),
    }
}
