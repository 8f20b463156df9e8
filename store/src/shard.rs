//! One core's cache shard: the table, the budget, the clock hand, CAS and flush state.

use core::hash::BuildHasher;
use core::mem;

use hashbrown::hash_table::OccupiedEntry;
use hashbrown::{DefaultHashBuilder, HashTable};

use crate::error::StoreError;
use crate::expiry::{Deadline, Expiry, Now, Ttl};
use crate::item::{self, GENERATION_MASK, Item, Liveness, MAX_KEY_LEN};
use crate::stats::ShardStats;

/// Sizes of one shard, from the server's command line.
#[derive(Debug, Clone, Copy)]
pub struct ShardConfig {
    /// This shard's memory budget in bytes (memcached `-m`, divided among cores); covers
    /// items ([`item_size`](crate::item_size)) and the hash table.
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
/// bucket and its heap block are two dependent loads: prefetch [`Hint::bucket`] for every key
/// first, then (the buckets arriving meanwhile) [`Hint::block`] for every key, and the misses
/// of all keys overlap at each stage.
#[derive(Debug, Clone, Copy)]
pub struct Hint<'a> {
    item: &'a Item,
}

impl<'a> Hint<'a> {
    /// The address of the item's bucket in the table (32 bytes, within one cache line):
    /// only for a prefetch; taking it reads nothing.
    #[inline]
    pub fn bucket(self) -> *const u8 {
        core::ptr::from_ref(self.item).cast()
    }

    /// The item's heap block, which a lookup reads after the bucket (it compares the key
    /// there): only for a prefetch of its cache lines. Finding it reads the bucket.
    #[inline]
    pub fn block(self) -> &'a [u8] {
        self.item.block()
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

/// Who asks the clock hand for a victim ([`Shard::evict_one`]): what it may take and how
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

/// One core's cache: a hashbrown table of items under a byte budget, with CLOCK eviction,
/// memcached expiry, CAS and `flush_all`. See the crate docs for the design.
///
/// Single-threaded by contract: every method takes `&mut self` or `&self`, there are no
/// locks or atomics; a `Shard` may be moved to the core that owns it (`Send`).
pub struct Shard {
    config: ShardConfig,
    table: HashTable<Item>,
    hasher: DefaultHashBuilder,
    stats: ShardStats,
    /// Bytes charged for the table's allocation ([`item::malloc_chunk`] of it).
    table_bytes: usize,
    /// hashbrown's control-group width on this target (16 with SSE2, 8 otherwise).
    group_width: usize,
    /// The last CAS the counter handed out.
    last_cas: u64,
    /// The flush generation: items stored in any other one were flushed. Counts `flush_all`s
    /// (applied ones) modulo 2^17.
    generation: u32,
    /// A delayed `flush_all` takes effect at this unix time.
    pending_flush_at: Option<u64>,
    /// The clock hand (a bucket index).
    hand: usize,
    /// The expiry sweep's cursor (a bucket index).
    sweep_hand: usize,
    /// Live-item limit while the table cannot grow within the budget (see `reserve_slot`).
    item_cap: usize,
    /// Whether live items may be evicted to make room (memcached's `-M` turns it off).
    evict: bool,
    /// Live items evicted and not yet taken, while someone wants them.
    evictions: Option<Vec<Evicted>>,
    #[cfg(test)]
    rebuilds: usize,
    /// The heap when the budget was last lowered: the most it may hold until it is back
    /// under the budget (tests only).
    #[cfg(test)]
    lowered_heap: u64,
}

impl Shard {
    /// Creates an empty shard. Nothing is allocated until the first store.
    pub fn new(config: ShardConfig) -> Shard {
        // Measure the control-group width once: a 4-bucket table is 4 x (32 + 1) + width.
        let probe: HashTable<Item> = HashTable::with_capacity(1);
        let group_width = probe
            .allocation_size()
            .saturating_sub(probe.num_buckets() * (mem::size_of::<Item>() + 1));
        Shard {
            config,
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            stats: ShardStats {
                limit_maxbytes: config.memory_limit_bytes as u64,
                ..ShardStats::default()
            },
            table_bytes: 0,
            group_width,
            last_cas: 0,
            generation: 0,
            pending_flush_at: None,
            hand: 0,
            sweep_hand: 0,
            item_cap: usize::MAX,
            evict: true,
            evictions: None,
            #[cfg(test)]
            rebuilds: 0,
            #[cfg(test)]
            lowered_heap: 0,
        }
    }

    /// Whether live items may be evicted to make room (the default). Off (memcached's `-M`), a
    /// store that needs room takes back only dead items the clock hand meets within
    /// [`NO_EVICT_SCAN`] buckets, and fails with [`StoreError::OutOfMemory`] if that is not
    /// enough; live items stay until they are deleted, expire or are flushed.
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
        self.table.is_empty()
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
        let found = find_live(
            &mut self.table,
            &mut self.stats,
            self.table_bytes,
            self.generation,
            hash,
            key,
            now,
        );
        match found {
            Ok(entry) => {
                self.stats.get_hits += 1;
                let item = entry.into_mut();
                let (fetched, last_access) = (item.fetched(), item.last_access());
                item.mark_fetched(now);
                Some(ItemView {
                    fetched,
                    last_access,
                    ..view(item)
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
    /// hand, warming every key's item before looking any of them up lets their cache misses
    /// overlap instead of following one another. A lookup reads the table's control bytes,
    /// then the item's bucket, then its heap block (the key, CAS and value), each load
    /// waiting for the one before; see [`Hint`] for taking them in stages. Finding the hint
    /// reads the control bytes only. Only a hint: the bucket taken is the first whose 7-bit
    /// tag matches, the key's in all but rare cases, dead or alive; nothing changes and
    /// nothing is counted.
    #[inline]
    pub fn hint(&self, key: &[u8]) -> Option<Hint<'_>> {
        let hash = self.hasher.hash_one(key);
        self.table.find(hash, |_| true).map(|item| Hint { item })
    }

    /// TOUCH / GAT: gives a live item a new expiry (`ttl` as in [`Shard::store`]) and
    /// returns it, marked fetched and accessed as [`Shard::get`] does (the view reports the item
    /// as it was before). The CAS is kept, as memcached does. Counts
    /// `touch_hits`/`touch_misses`.
    ///
    /// A `ttl` that is already expired still returns the item this once; it is
    /// invisible from then on.
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
        let found = find_live(
            &mut self.table,
            &mut self.stats,
            self.table_bytes,
            self.generation,
            hash,
            key,
            now,
        );
        match found {
            Ok(entry) => {
                self.stats.touch_hits += 1;
                let item = entry.into_mut();
                let expired = item.expires();
                item.set_deadline(deadline_for(ttl, item.deadline(), now));
                self.stats.curr_expiring =
                    self.stats.curr_expiring - u64::from(expired) + u64::from(item.expires());
                let (fetched, last_access) = (item.fetched(), item.last_access());
                if mark {
                    item.mark_fetched(now);
                }
                Some(ItemView {
                    fetched,
                    last_access,
                    ..view(item)
                })
            }
            Err(_) => {
                self.stats.touch_misses += 1;
                None
            }
        }
    }

    /// Looks a key up without touching it: no fetched mark, no clock bump, no access time, no
    /// counters (a dead item found is still reclaimed). For the meta protocol's `u` flag and
    /// `me`.
    pub fn peek(&mut self, key: &[u8], now: impl Into<Now>) -> Option<ItemView<'_>> {
        let now = now.into();
        self.advance(now);
        check_key(key).ok()?;
        let hash = self.hasher.hash_one(key);
        let index = self.lookup(hash, key, now).ok()?;
        self.table.get_bucket(index).map(view)
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
        let Ok(index) = self.lookup(hash, key, now) else {
            self.stats.delete_misses += 1;
            return Err(StoreError::NotFound);
        };
        if cas != 0
            && self
                .table
                .get_bucket(index)
                .is_some_and(|it| it.cas() != cas)
        {
            return Err(StoreError::Exists);
        }
        let new_cas = self.take_cas(new_cas);
        let Some(item) = self.table.get_bucket_mut(index) else {
            return Err(StoreError::NotFound);
        };
        item.mark_stale();
        item.set_cas(new_cas);
        if let Some(exptime) = exptime {
            let expired = item.expires();
            item.set_deadline(Expiry::resolve(exptime, now).encode(now));
            self.stats.curr_expiring =
                self.stats.curr_expiring - u64::from(expired) + u64::from(item.expires());
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
        self.mark_live(key, now.into(), Item::mark_fetched)
    }

    /// Applies `mark` to the live item under `key`, counting nothing; whether it was there.
    fn mark_live(&mut self, key: &[u8], now: Now, mark: impl FnOnce(&mut Item, Now)) -> bool {
        self.advance(now);
        if check_key(key).is_err() {
            return false;
        }
        let hash = self.hasher.hash_one(key);
        let Ok(index) = self.lookup(hash, key, now) else {
            return false;
        };
        match self.table.get_bucket_mut(index) {
            Some(item) => {
                mark(item, now);
                true
            }
            None => false,
        }
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
        let Ok(index) = self.lookup(hash, key, now) else {
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
            let item = Item::new(key, [value, b""], flags, deadline, new_cas);
            self.put(hash, None, item, now)?;
            return Ok(new_cas);
        };
        if mode == StoreMode::Add {
            return Err(StoreError::NotStored);
        }
        let Some(old) = self.table.get_bucket(index) else {
            return Err(StoreError::NotFound);
        };
        if cas != 0 && old.cas() != cas {
            self.stats.cas_badval += 1;
            return Err(StoreError::Exists);
        }
        let mut item = if extends {
            let old_value = old.value();
            self.check_size(key.len(), old_value.len().saturating_add(value.len()))?;
            let parts = if mode == StoreMode::Append {
                [old_value, value]
            } else {
                [value, old_value]
            };
            Item::new(key, parts, old.flags(), old.deadline(), 0)
        } else {
            let deadline = deadline_for(ttl, old.deadline(), now);
            if deadline.passed(now) {
                self.remove_at(index, Removal::Client);
                if cas != 0 {
                    self.stats.cas_hits += 1;
                }
                self.stats.total_items += 1;
                return Ok(self.take_cas(new_cas));
            }
            if old.value().len() == value.len() {
                // Same length (a counter, a fixed-size record): rewrite the block in place
                // instead of allocating a new one and freeing the old; nothing is charged
                // differently and the item stays in its bucket.
                let new_cas = self.take_cas(new_cas);
                let generation = self.generation;
                let Some(item) = self.table.get_bucket_mut(index) else {
                    return Err(StoreError::NotFound);
                };
                let expired = item.expires();
                item.overwrite(value, flags, deadline, new_cas);
                item.stamp(generation, now);
                self.stats.curr_expiring =
                    self.stats.curr_expiring - u64::from(expired) + u64::from(item.expires());
                self.stats.total_items += 1;
                if cas != 0 {
                    self.stats.cas_hits += 1;
                }
                return Ok(new_cas);
            }
            Item::new(key, [value, b""], flags, deadline, 0)
        };
        let new_cas = self.take_cas(new_cas);
        item.set_cas(new_cas);
        self.put(hash, Some(index), item, now)?;
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
        let Ok(index) = self.lookup(hash, key, now) else {
            self.stats.delete_misses += 1;
            return Err(StoreError::NotFound);
        };
        if cas != 0
            && self
                .table
                .get_bucket(index)
                .is_some_and(|it| it.cas() != cas)
        {
            return Err(StoreError::Exists);
        }
        self.remove_at(index, Removal::Client);
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
        let Ok(index) = self.lookup(hash, key, now) else {
            return false;
        };
        self.remove_at(index, Removal::Client);
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
        let mut digits = [0u8; item::MAX_DIGITS];
        let Ok(index) = self.lookup(hash, key, now) else {
            match direction {
                Delta::Incr => self.stats.incr_misses += 1,
                Delta::Decr => self.stats.decr_misses += 1,
            }
            let Some((initial, exptime)) = create else {
                return Err(StoreError::NotFound);
            };
            let text = item::format_decimal(initial, &mut digits);
            self.check_size(key.len(), text.len())?;
            let expiry = Expiry::resolve(exptime, now);
            let new_cas = self.take_cas(new_cas);
            self.stats.total_items += 1;
            if expiry != Expiry::Expired {
                let item = Item::new(key, [text, b""], 0, expiry.encode(now), new_cas);
                self.put(hash, None, item, now)?;
            }
            return Ok((initial, new_cas));
        };
        let Some(old) = self.table.get_bucket(index) else {
            return Err(StoreError::NotFound);
        };
        // memcached: an empty value is non-numeric before the CAS is compared, any other
        // value after.
        if old.value().is_empty() {
            return Err(StoreError::NonNumeric);
        }
        if cas != 0 && old.cas() != cas {
            return Err(StoreError::Exists);
        }
        let current = item::parse_decimal(old.value()).ok_or(StoreError::NonNumeric)?;
        let next = match direction {
            Delta::Incr => current.wrapping_add(delta),
            Delta::Decr => current.saturating_sub(delta),
        };
        let text = item::format_decimal(next, &mut digits);
        if text.len() == old.value().len() {
            // Same length: rewrite in place, no allocation.
            let new_cas = self.take_cas(new_cas);
            let Some(item) = self.table.get_bucket_mut(index) else {
                return Err(StoreError::NotFound);
            };
            item.value_mut().copy_from_slice(text);
            item.set_cas(new_cas);
            item.mark_accessed(now);
            self.count_delta_hit(direction);
            return Ok((next, new_cas));
        }
        self.check_size(key.len(), text.len())?;
        let mut item = Item::new(key, [text, b""], old.flags(), old.deadline(), 0);
        // memcached rewrites a result no longer than the old value in place (padded with
        // spaces): the item stays fetched, stale, won as it was. A longer one is a new item.
        if text.len() < old.value().len() {
            item.keep_marks(old);
        }
        let new_cas = self.take_cas(new_cas);
        item.set_cas(new_cas);
        self.put(hash, Some(index), item, now)?;
        self.count_delta_hit(direction);
        Ok((next, new_cas))
    }

    /// memcached `flush_all [delay]`: every item stored before `now + delay` becomes
    /// invisible at that time. `delay` follows the `exptime` rules; 0 (or anything already
    /// past) flushes now. A later call replaces a pending delayed flush.
    ///
    /// Takes O(1): the shard moves to its next flush generation, which makes every item
    /// stored in an earlier one dead (whatever its CAS, client-chosen ones included); they are
    /// reclaimed lazily (on access, by the sweep, by the clock hand). Generations count
    /// modulo 2^17: the flush that wraps the count reclaims every item at once (all are dead
    /// then), so no item can outlive a flush and return 2^17 flushes later.
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
    /// Examines at most `max_items` items, continuing where the previous call stopped,
    /// and walks at most one revolution of the table per call. Returns how many it
    /// reclaimed.
    pub fn sweep_expired(&mut self, max_items: usize, now: impl Into<Now>) -> usize {
        let now = now.into();
        self.advance(now);
        let buckets = self.table.num_buckets();
        if self.table.is_empty() || buckets == 0 {
            return 0;
        }
        let (mut examined, mut reclaimed) = (0, 0);
        for _ in 0..buckets {
            if examined >= max_items {
                break;
            }
            let index = self.sweep_hand & (buckets - 1);
            self.sweep_hand = index.wrapping_add(1);
            let Some(item) = self.table.get_bucket(index) else {
                continue;
            };
            examined += 1;
            if item.liveness(now, self.generation) != Liveness::Live {
                self.remove_at(index, Removal::Reclaimed);
                reclaimed += 1;
            }
        }
        reclaimed
    }

    /// The LRU crawler's walk (memcached's `lru_crawler crawl`, and memspin's background
    /// crawler): from bucket `start`, looks at up to `max_items` items in bucket order and
    /// takes back the dead (expired or flushed) ones, counting `crawler_items_checked`,
    /// `crawler_reclaimed` and, for an expired item no client fetched, `expired_unfetched`.
    /// Live items are left as they are (no clock bump, no access time). The caller keeps the
    /// cursor ([`Crawled::next`]) between calls; a table that grows between two calls moves
    /// items, so a walk in steps may miss or look twice at some, as memcached's crawler may.
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
            done.next += 1;
            let Some(item) = self.table.get_bucket(index) else {
                continue;
            };
            done.checked += 1;
            let liveness = item.liveness(now, self.generation);
            if liveness != Liveness::Live {
                self.remove_at(index, Removal::Crawled(liveness));
                done.reclaimed += 1;
            }
        }
        self.stats.crawler_items_checked += done.checked as u64;
        done
    }

    /// Frees about `bytes` of memory for a page `slabs reassign` moves out of the item class:
    /// the clock hand takes back dead items and evicts live ones (with eviction off too: an
    /// operator asked for it), counting them in `slab_reassign_evictions_nomem` rather than
    /// `evictions`, as memcached counts the items of a page it moves. At most `max_items`
    /// items go per call. Returns the bytes freed (the heap's decrease), less than `bytes`
    /// when the call's items ran out or the shard is empty.
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
    /// heap does not grow, and no store pays for the whole difference.
    pub fn set_memory_limit(&mut self, bytes: usize) {
        #[cfg(test)]
        {
            self.lowered_heap = self.stats.heap_bytes;
        }
        self.config.memory_limit_bytes = bytes;
        self.stats.limit_maxbytes = bytes as u64;
    }

    /// Whether the shard holds more than its budget (after [`Shard::set_memory_limit`]
    /// lowered it).
    pub fn over_budget(&self) -> bool {
        self.stats.heap_bytes > self.config.memory_limit_bytes as u64
    }

    /// One bounded step down to a lowered budget: the table is rebuilt smaller when its items
    /// fit in half of it (at most once per call, O(buckets)), else the clock hand evicts, at
    /// most `max_items` items per call, as a store would (with eviction off, memcached's `-M`,
    /// only dead items go, and live ones stay over the budget until they are deleted or
    /// expire; stores needing room are refused meanwhile). Returns whether the shard is still
    /// over its budget.
    pub fn shrink(&mut self, max_items: usize, now: impl Into<Now>) -> bool {
        let now = now.into();
        self.advance(now);
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
            taken += 1;
        }
        self.over_budget()
    }

    /// Rebuilds the table with half its buckets or fewer (room for twice its items), when its
    /// items fit in half of them; an empty table gives its allocation back. Returns whether
    /// it did.
    fn shrink_table(&mut self) -> bool {
        let buckets = self.num_buckets();
        let len = self.table.len();
        if buckets == 0 {
            return false;
        }
        if len == 0 {
            self.table = HashTable::new();
        } else if buckets >= 8 && len * 2 <= full_capacity(buckets / 2) {
            let hasher = &self.hasher;
            self.table
                .shrink_to(len * 2, |it| hasher.hash_one(it.key()));
        } else {
            return false;
        }
        self.table_bytes = table_charge(self.table.allocation_size());
        self.stats.heap_bytes = self.stats.bytes + self.table_bytes as u64;
        self.item_cap = usize::MAX;
        true
    }

    /// Asserts the accounting invariants (tests only).
    #[cfg(test)]
    #[track_caller]
    pub(crate) fn check_invariants(&self) {
        let bytes: u64 = self.table.iter().map(|it| it.size() as u64).sum();
        assert_eq!(self.stats.bytes, bytes, "bytes");
        assert_eq!(self.stats.curr_items, self.table.len() as u64, "curr_items");
        let expiring = self.table.iter().filter(|it| it.expires()).count();
        assert_eq!(self.stats.curr_expiring, expiring as u64, "curr_expiring");
        assert_eq!(
            self.table_bytes,
            table_charge(self.table.allocation_size()),
            "table bytes"
        );
        assert_eq!(
            self.stats.heap_bytes,
            self.stats.bytes + self.table_bytes as u64,
            "heap_bytes"
        );
        assert!(
            self.stats.heap_bytes <= (self.config.memory_limit_bytes as u64).max(self.lowered_heap),
            "heap_bytes {} over the budget {}",
            self.stats.heap_bytes,
            self.config.memory_limit_bytes
        );
        for it in self.table.iter() {
            assert!(it.generation() <= self.generation, "generation");
        }
    }

    /// Jumps the flush generation forward, as `generation - current` immediate flushes
    /// that reclaimed nothing would (tests only: 2^17 real flushes take too long).
    #[cfg(test)]
    pub(crate) fn skip_to_generation(&mut self, generation: u32) {
        assert!(self.generation < generation && generation <= GENERATION_MASK);
        self.generation = generation;
    }

    /// How many times the table was rebuilt at the same size (tests only).
    #[cfg(test)]
    pub(crate) fn rebuilds(&self) -> usize {
        self.rebuilds
    }

    /// Buckets in the table (0 before the first store): the range [`Shard::visit`] walks.
    pub fn num_buckets(&self) -> usize {
        if self.table.allocation_size() == 0 {
            0
        } else {
            self.table.num_buckets()
        }
    }

    /// Calls `f(key, item, size)` for every live item in buckets `start..end` (clamped to the
    /// table), in bucket order, without touching them (no fetched mark, no counters; dead
    /// items are skipped, not reclaimed). `size` is what the item is charged
    /// ([`item_size`](crate::item_size)). For inspection (`lru_crawler metadump`, `stats
    /// sizes`): walking the whole table costs time in proportion to it, so a caller walks
    /// it in slices. A table that grows between two slices moves items, so a walk in slices
    /// may miss or repeat items stored meanwhile.
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
            let Some(item) = self.table.get_bucket(index) else {
                continue;
            };
            if item.liveness(now, self.generation) == Liveness::Live {
                f(item.key(), view(item), item.size());
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

    /// Flushes now: moves to the next flush generation. On a wrap of the count, items of
    /// the generation now reused may still wait to be reclaimed; every item is dead at this
    /// point, so all are reclaimed at once (O(n), once per 2^17 flushes).
    fn apply_flush(&mut self) {
        self.pending_flush_at = None;
        self.generation = (self.generation + 1) & GENERATION_MASK;
        if self.generation == 0 {
            let table_bytes = self.table_bytes;
            for item in self.table.drain() {
                account_removed(&mut self.stats, table_bytes, &item, Removal::Reclaimed);
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

    /// TooLarge if over `max_item_size`; OutOfMemory if it cannot fit even alone.
    fn check_size(&self, key_len: usize, value_len: usize) -> Result<(), StoreError> {
        let size = item::item_size(key_len, value_len);
        if size > self.config.max_item_size {
            return Err(StoreError::TooLarge);
        }
        // With every item evicted, the table (at least its smallest allocation) remains. Over
        // a lowered budget, the heap as it is stands for the budget (see `put`).
        let table_floor = self.table_bytes.max(self.table_bytes_for(4));
        let limit = (self.config.memory_limit_bytes as u64).max(self.stats.heap_bytes);
        if size.saturating_add(table_floor) as u64 > limit {
            return Err(StoreError::OutOfMemory);
        }
        Ok(())
    }

    /// Finds the live item under `key` and returns its bucket index; a dead item found is
    /// reclaimed.
    fn lookup(&mut self, hash: u64, key: &[u8], now: Now) -> Result<usize, Miss> {
        let found = find_live(
            &mut self.table,
            &mut self.stats,
            self.table_bytes,
            self.generation,
            hash,
            key,
            now,
        );
        found.map(|entry| entry.bucket_index())
    }

    fn remove_at(&mut self, index: usize, why: Removal) {
        if let Ok(entry) = self.table.get_bucket_entry(index) {
            let (item, _) = entry.remove();
            self.account_removed(&item, why);
        }
    }

    fn account_removed(&mut self, item: &Item, why: Removal) {
        account_removed(&mut self.stats, self.table_bytes, item, why);
    }

    /// Puts `item` in the table, replacing the item at `existing` (same key) if given,
    /// evicting as needed to stay within the budget. Over a budget that was lowered
    /// ([`Shard::set_memory_limit`]), the heap as it is stands for the budget: the store makes
    /// room for itself only, and [`Shard::shrink`] does the rest in bounded steps.
    fn put(
        &mut self,
        hash: u64,
        existing: Option<usize>,
        mut item: Item,
        now: Now,
    ) -> Result<(), StoreError> {
        item.stamp(self.generation, now);
        let size = item.size();
        let limit = (self.config.memory_limit_bytes as u64).max(self.stats.heap_bytes);
        if let Some(index) = existing {
            let Some(slot) = self.table.get_bucket_mut(index) else {
                return Err(StoreError::NotFound);
            };
            let old_size = slot.size() as u64;
            let after = self.stats.bytes - old_size + size as u64 + self.table_bytes as u64;
            if after <= limit {
                // Common overwrite: same slot, no table work.
                let expiring = item.expires();
                let old = mem::replace(slot, item);
                self.stats.curr_expiring =
                    self.stats.curr_expiring - u64::from(old.expires()) + u64::from(expiring);
                drop(old);
                self.stats.bytes = self.stats.bytes - old_size + size as u64;
                self.stats.heap_bytes = self.stats.bytes + self.table_bytes as u64;
                self.stats.total_items += 1;
                return Ok(());
            }
            // Eviction needed: take the old item out first so the hand cannot pick it.
            self.remove_at(index, Removal::Client);
        }
        self.make_room(size, limit, now)?;
        self.reserve_slot(size, now)?;
        let hasher = &self.hasher;
        self.stats.curr_expiring += u64::from(item.expires());
        self.table
            .insert_unique(hash, item, |it| hasher.hash_one(it.key()));
        self.stats.bytes += size as u64;
        self.stats.heap_bytes = self.stats.bytes + self.table_bytes as u64;
        self.stats.curr_items += 1;
        self.stats.total_items += 1;
        Ok(())
    }

    /// Evicts until an item of `size` bytes fits in `limit` bytes next to the current table,
    /// and (while the table cannot grow) until a slot is free under `item_cap`.
    fn make_room(&mut self, size: usize, limit: u64, now: Now) -> Result<(), StoreError> {
        while self.stats.bytes + self.table_bytes as u64 + size as u64 > limit
            || self.table.len() >= self.item_cap
        {
            if !self.evict_one(now, Victim::Store) {
                return Err(StoreError::OutOfMemory);
            }
        }
        Ok(())
    }

    /// Makes sure the next insert lands in a free slot without hashbrown reallocating
    /// behind the budget's back.
    ///
    /// When no slot is free (live items plus tombstones fill the table):
    /// 1. at most half full of live items: hashbrown rehashes in place (no memory change);
    /// 2. else, if the doubled table fits next to the items and the incoming one: grow;
    /// 3. else the table keeps its size: evict down to 7/8 of its capacity, cap live items
    ///    there until the next growth, and rebuild it without tombstones (O(n), at most once
    ///    per capacity/8 inserts; the old and new tables coexist for the duration).
    fn reserve_slot(&mut self, size: usize, now: Now) -> Result<(), StoreError> {
        if self.table.len() < self.table.capacity() {
            return Ok(());
        }
        // The unallocated table reports one bucket; it has none.
        let buckets = if self.table.allocation_size() == 0 {
            0
        } else {
            self.table.num_buckets()
        };
        let full_cap = full_capacity(buckets);
        let len = self.table.len();
        let hasher = &self.hasher;
        if buckets > 0 && len < full_cap / 2 {
            self.table.reserve(1, |it| hasher.hash_one(it.key()));
            debug_assert_eq!(self.table.num_buckets(), buckets);
            return Ok(());
        }
        let grown_buckets = if buckets == 0 { 4 } else { buckets * 2 };
        let grown = self.table_bytes_for(grown_buckets);
        let limit = self.config.memory_limit_bytes as u64;
        if self.stats.bytes + grown as u64 + size as u64 <= limit {
            self.table.reserve(1, |it| hasher.hash_one(it.key()));
            self.table_bytes = table_charge(self.table.allocation_size());
            debug_assert_eq!(self.table.num_buckets(), grown_buckets);
            debug_assert_eq!(self.table_bytes, grown);
            self.stats.heap_bytes = self.stats.bytes + self.table_bytes as u64;
            self.item_cap = usize::MAX;
            return Ok(());
        }
        if buckets == 0 {
            return Err(StoreError::OutOfMemory);
        }
        self.item_cap = full_cap - (full_cap / 8).max(1);
        while self.table.len() >= self.item_cap {
            if !self.evict_one(now, Victim::Store) {
                return Err(StoreError::OutOfMemory);
            }
        }
        let mut fresh = HashTable::with_capacity(full_cap);
        debug_assert_eq!(fresh.num_buckets(), buckets);
        let hasher = &self.hasher;
        for it in self.table.drain() {
            fresh.insert_unique(hasher.hash_one(it.key()), it, |it| {
                hasher.hash_one(it.key())
            });
        }
        self.table = fresh;
        #[cfg(test)]
        {
            self.rebuilds += 1;
        }
        debug_assert!(self.table.len() < self.table.capacity());
        Ok(())
    }

    /// Advances the clock hand to the next victim and removes it: a dead (expired or
    /// flushed) item is reclaimed, an item with a non-zero counter is aged and passed over,
    /// one at zero is evicted. Returns false if the table is empty, or, with eviction off
    /// (and `victim` not [`Victim::Release`]), if no dead item was met within
    /// [`NO_EVICT_SCAN`] buckets (then a store counts `outofmemory`).
    fn evict_one(&mut self, now: Now, victim: Victim) -> bool {
        let buckets = self.table.num_buckets();
        if self.table.is_empty() || buckets == 0 {
            return false;
        }
        let generation = self.generation;
        if !self.evict && victim != Victim::Release {
            for _ in 0..buckets.min(NO_EVICT_SCAN) {
                let index = self.hand & (buckets - 1);
                self.hand = index.wrapping_add(1);
                let dead = self
                    .table
                    .get_bucket(index)
                    .is_some_and(|item| item.liveness(now, generation) != Liveness::Live);
                if dead {
                    self.remove_at(index, Removal::Reclaimed);
                    return true;
                }
            }
            if victim == Victim::Store {
                self.stats.outofmemory += 1;
            }
            return false;
        }
        // Four revolutions always suffice: counters start at most at 3.
        for _ in 0..=4 * buckets {
            let index = self.hand & (buckets - 1);
            self.hand = index.wrapping_add(1);
            let Some(item) = self.table.get_bucket_mut(index) else {
                continue;
            };
            let why = match item.liveness(now, generation) {
                Liveness::Live if item.clock() > 0 => {
                    item.age();
                    continue;
                }
                Liveness::Live if victim == Victim::Release => Removal::Released,
                Liveness::Live => {
                    if item.deadline() != Deadline::NEVER {
                        self.stats.evicted_nonzero += 1;
                    }
                    self.stats.evicted_time =
                        now.secs().saturating_sub(u64::from(item.last_access()));
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
                    Removal::Evicted
                }
                Liveness::Expired | Liveness::Flushed => Removal::Reclaimed,
            };
            self.remove_at(index, why);
            return true;
        }
        false
    }

    /// Bytes charged for a table of `buckets` buckets (hashbrown's layout: 32-byte buckets,
    /// then one control byte per bucket plus a trailing group, in one allocation).
    fn table_bytes_for(&self, buckets: usize) -> usize {
        item::malloc_chunk(buckets * (mem::size_of::<Item>() + 1) + self.group_width)
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

/// Buckets the clock hand looks at for a dead item when eviction is off, before a store that
/// needs room fails: bounded, so a full cache of live items refuses a store quickly.
pub const NO_EVICT_SCAN: usize = 1024;

/// Updates the counters for an item that left the table.
fn account_removed(stats: &mut ShardStats, table_bytes: usize, item: &Item, why: Removal) {
    stats.bytes -= item.size() as u64;
    stats.heap_bytes = stats.bytes + table_bytes as u64;
    stats.curr_items -= 1;
    stats.curr_expiring -= u64::from(item.expires());
    match why {
        Removal::Client => {}
        Removal::Reclaimed => {
            stats.reclaimed += 1;
            if !item.fetched() {
                stats.expired_unfetched += 1;
            }
        }
        Removal::Crawled(why) => {
            stats.crawler_reclaimed += 1;
            // memcached's crawler counts an unfetched item that expired, not one flushed.
            if !item.fetched() && why == Liveness::Expired {
                stats.expired_unfetched += 1;
            }
        }
        Removal::Evicted => {
            stats.evictions += 1;
            if !item.fetched() {
                stats.evicted_unfetched += 1;
            }
        }
        Removal::Released => stats.slab_reassign_evictions_nomem += 1,
    }
}

/// The read path's lookup: the live item's entry, or why there is none (a dead item is
/// reclaimed on the spot). Takes the shard's fields apart so the entry can be returned.
#[inline(always)]
fn find_live<'t>(
    table: &'t mut HashTable<Item>,
    stats: &mut ShardStats,
    table_bytes: usize,
    generation: u32,
    hash: u64,
    key: &[u8],
    now: Now,
) -> Result<OccupiedEntry<'t, Item>, Miss> {
    let Ok(entry) = table.find_entry(hash, |it| it.key() == key) else {
        return Err(Miss::Absent);
    };
    match entry.get().liveness(now, generation) {
        Liveness::Live => Ok(entry),
        dead => {
            let (item, _) = entry.remove();
            account_removed(stats, table_bytes, &item, Removal::Reclaimed);
            Err(Miss::Dead(dead))
        }
    }
}

/// Bytes charged for a table allocation of `allocation_size` bytes (none if unallocated).
fn table_charge(allocation_size: usize) -> usize {
    if allocation_size == 0 {
        0
    } else {
        item::malloc_chunk(allocation_size)
    }
}

/// hashbrown's usable capacity for `buckets` buckets (7/8 load; one free slot when tiny).
const fn full_capacity(buckets: usize) -> usize {
    if buckets < 8 {
        buckets.saturating_sub(1)
    } else {
        buckets / 8 * 7
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

#[inline]
fn view(item: &Item) -> ItemView<'_> {
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
