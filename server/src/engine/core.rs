//! The engine's core: this worker's store shard and every figure `stats` reports, behind the
//! operations every protocol adapter calls.
//!
//! ```text
//! adapter (binary, text, ...) ─▶ Core::get / store / touch / delete / arith / flush_all ─▶ store::Shard
//!                                   └─ counts cmd_get, cmd_set, cmd_touch, cmd_flush, ... as it goes,
//!                                      the latency instrument's samples, `stats detail` prefixes,
//!                                      and `watch` events
//! ```
//!
//! It knows no protocol: adapters translate requests into these calls and results back into
//! replies, and every counter is kept here, so `cmd_get` or `cmd_set` mean the same whichever
//! protocol a client speaks, and a new statistic is added in one place. The store's own
//! counters (hits, misses, evictions) are counted by the store. Each operation also counts one
//! latency sample of its kind ([`Kind`]), which the engine records once the request's engine
//! call ends.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use store::{Arith, ItemView, NewCas, Now, Shard, StoreError, StoreMode, Ttl, Write};

use super::budget::InputBudget;
use super::config::{EngineConfig, HOUSEKEEPING_ITEMS, PAGE_BYTES, PREFETCH_MAX};
use super::marks::WriteMarks;
use crate::control::{Control, EventKind, MemoryFigures, uri_encode};
use crate::stats::{
    Background, CacheDump, Counters, Group, KINDS, Kind, Latency, NamespaceKeys, Prefixes, RawPath,
    SIZES_STEP, ServerInfo, Snapshot, WorkerFigures,
};

/// Buckets `stats cachedump` walks between checks that the dump is full.
const CACHEDUMP_SLICE_BUCKETS: usize = 1024;

/// The background work a worker does between turns: the crawl an `lru_crawler crawl` asked
/// for, the page a `slabs reassign` frees, and the background crawler's place.
#[derive(Debug, Default)]
struct Housekeeping {
    /// The requested crawls seen ([`crate::control::Crawler::requested`]).
    crawls_seen: u64,
    /// This worker's part of the requested crawl, while it runs.
    crawl: Option<CrawlRun>,
    /// Where the background crawler goes on (a bucket).
    background_at: usize,
    /// The page moves seen ([`crate::control::PageMoves::requested`]).
    moves_seen: u64,
    /// The shard's figures as last published for other workers.
    published: MemoryFigures,
    /// Set when a step towards a lowered budget freed nothing (eviction off, `-M`, and no dead
    /// item near the hand): the next try waits for the background crawler's next turn.
    shrink_stalled: bool,
    /// Bytes of this worker's share of a page still to free.
    release_left: u64,
}

/// This worker's part of a requested crawl.
#[derive(Debug, Clone, Copy)]
struct CrawlRun {
    /// The next bucket.
    next: usize,
    /// Items it may still look at (`lru_crawler tocrawl`; `u64::MAX`: all).
    left: u64,
    /// Not before this time (the loop's monotonic nanoseconds): `lru_crawler sleep`.
    due_ns: u64,
}

/// One worker's store shard, counters and configuration.
pub(crate) struct Core {
    shard: Shard,
    /// Bytes the open transactions of this worker's connections hold (their `Charge`s).
    queued: Arc<AtomicUsize>,
    counters: Counters,
    config: EngineConfig,
    /// Connection figures, as the packet path counts them (since start).
    info: ServerInfo,
    /// `info` at the last `stats reset`.
    info_base: ServerInfo,
    /// The worker loop's figures, as it counts them (since start).
    figures: WorkerFigures,
    /// `figures` at the last `stats reset` (with its packet counters named).
    figures_base: WorkerFigures,
    /// The packet path's counters, as the loop last copied them.
    raw_path: RawPath,
    /// `stats detail` counts, while on.
    prefixes: Prefixes,
    /// `stats latency`.
    latency: Latency,
    /// Store operations of each kind made since the engine last recorded them.
    samples: [u64; KINDS],
    /// The kinds with samples (bit `kind`), and how many samples there are in all.
    sample_kinds: u8,
    samples_total: u64,
    /// The kind of the request an adapter is executing (for a request it forwards).
    kind: Kind,
    /// The table size last published for other workers' metadumps.
    published_buckets: usize,
    /// `stats reset`s so far: a forwarded request stamped before the last one is not timed.
    resets: u32,
    /// The number of the connection whose request runs now (0: none, or another worker's),
    /// for `watch` lines' `cfd`.
    cfd: u64,
    /// Background work between turns.
    house: Housekeeping,
    /// Writes to watched keys (RESP `WATCH`), noted by every operation that changes a key.
    marks: WriteMarks,
    /// Bytes this worker's connections may hold in large commands still arriving.
    budget: InputBudget,
}

impl Core {
    /// The bytes this worker's open transactions hold, shared with their charges.
    pub fn queued_pool(&self) -> &Arc<AtomicUsize> {
        &self.queued
    }

    /// A core with an empty shard.
    pub fn new(config: EngineConfig) -> Core {
        let mut shard = Shard::new(config.shard);
        shard.set_eviction(!config.control.settings.no_evictions);
        let budget = InputBudget::new(config.max_body() as usize);
        Core {
            shard,
            queued: Arc::default(),
            counters: Counters::default(),
            figures: WorkerFigures {
                worker: config.worker,
                ..WorkerFigures::default()
            },
            figures_base: WorkerFigures::default(),
            raw_path: RawPath::None,
            config,
            info: ServerInfo::default(),
            info_base: ServerInfo::default(),
            prefixes: Prefixes::default(),
            latency: Latency::new(),
            samples: [0; KINDS],
            sample_kinds: 0,
            samples_total: 0,
            kind: Kind::Other,
            published_buckets: 0,
            resets: 0,
            cfd: 0,
            house: Housekeeping::default(),
            marks: WriteMarks::default(),
            budget,
        }
    }

    /// Names the connection whose requests run next (0: another worker's), for `watch`.
    #[inline]
    pub fn set_cfd(&mut self, cfd: u64) {
        self.cfd = cfd;
    }

    /// `stats reset`s so far.
    #[inline]
    pub fn resets(&self) -> u32 {
        self.resets
    }

    /// Publishes the table's size when a store grew it (other workers' metadumps read it).
    #[inline]
    fn publish_buckets(&mut self) {
        let buckets = self.shard.num_buckets();
        if buckets != self.published_buckets {
            self.published_buckets = buckets;
            self.config
                .control
                .publish_table_buckets(self.config.worker, buckets);
        }
    }

    /// What every worker shares.
    #[inline]
    pub fn control(&self) -> &Arc<Control> {
        &self.config.control
    }

    /// Names the kind of the request being executed, for one the adapter forwards (local
    /// operations count their own kind).
    #[inline]
    pub fn classify(&mut self, kind: Kind) {
        self.kind = kind;
    }

    /// The kind named last with [`Core::classify`].
    #[inline]
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Counts one latency sample of `kind`.
    #[inline]
    fn sample(&mut self, kind: Kind) {
        self.samples[kind as usize] += 1;
        self.sample_kinds |= 1 << kind as u8;
        self.samples_total += 1;
    }

    /// Forgets the samples counted so far (a forwarded request's are timed where it arrived).
    #[inline]
    pub fn take_samples(&mut self) {
        self.drain_samples(|_, _, _| {});
    }

    /// Hands each kind with samples and their count to `f`, and forgets them.
    #[inline]
    fn drain_samples(&mut self, mut f: impl FnMut(&mut Latency, Kind, u64)) {
        let mut kinds = self.sample_kinds;
        while kinds != 0 {
            let index = kinds.trailing_zeros() as usize;
            kinds &= kinds - 1;
            let count = std::mem::take(&mut self.samples[index]);
            f(&mut self.latency, Kind::from_index(index as u8), count);
        }
        self.sample_kinds = 0;
        self.samples_total = 0;
    }

    /// Operations counted since they were last recorded or forgotten.
    #[inline]
    pub fn samples_pending(&self) -> u64 {
        self.samples_total
    }

    /// Counts `count` samples of `kind` (the parts of a request other workers answered before
    /// it was done here).
    #[inline]
    pub fn sample_parts(&mut self, kind: Kind, count: u64) {
        if count > 0 {
            self.samples[kind as usize] += count;
            self.sample_kinds |= 1 << kind as u8;
            self.samples_total += count;
        }
    }

    /// Counts one `other` sample: a request that made no store operation.
    #[inline]
    pub fn record_pending_other(&mut self) {
        self.sample(Kind::Other);
    }

    /// Records every sample counted so far as requests that spent `ns` inside memspin, and
    /// forgets them.
    #[inline]
    pub fn record_samples(&mut self, ns: u64) {
        let kinds = self.sample_kinds;
        if kinds.is_power_of_two() {
            // One kind, the common case: no loop.
            let index = kinds.trailing_zeros() as usize;
            self.samples[index] = 0;
            let kind = Kind::from_index(index as u8);
            self.latency.record(kind, ns, self.samples_total);
            self.sample_kinds = 0;
            self.samples_total = 0;
            return;
        }
        self.drain_samples(|latency, kind, count| latency.record(kind, ns, count));
    }

    /// Records `count` requests of `kind` that spent `ns` inside memspin.
    #[inline]
    pub fn record_latency(&mut self, kind: Kind, ns: u64, count: u64) {
        self.latency.record(kind, ns, count);
    }

    /// A read seen by `stats detail` and `watch fetchers` (`found`: the value's length).
    #[inline]
    fn observe_get(
        control: &Control,
        prefixes: &mut Prefixes,
        cfd: u64,
        key: &[u8],
        found: Option<usize>,
        now: Now,
    ) {
        if control.detail() {
            prefixes.record(key, |c| {
                c.get += 1;
                c.hit += u64::from(found.is_some());
            });
        }
        let watchers = &control.watchers;
        if watchers.wants(EventKind::Fetchers) {
            watchers.publish(EventKind::Fetchers, now, |line| {
                line.push_str("type=item_get key=");
                uri_encode(line, key);
                let (status, class, size) = match found {
                    Some(size) => ("found", 1, size),
                    None => ("not_found", 0, 0),
                };
                let _ = write!(line, " status={status} clsid={class} cfd={cfd} size={size}");
            });
        }
    }

    /// A store seen by `stats detail`, `watch mutations` and `watch evictions`.
    fn observe_store(&mut self, write: &Write<'_>, status: &str, now: Now) {
        if self.config.control.detail() {
            self.prefixes.record(write.key, |c| c.set += 1);
        }
        let watchers = &self.config.control.watchers;
        if watchers.wants(EventKind::Mutations) {
            let command = match (write.mode, write.cas) {
                (StoreMode::Set, 0) => "set",
                (_, c) if c != 0 => "cas",
                (StoreMode::Add, _) => "add",
                (StoreMode::Replace, _) => "replace",
                (StoreMode::Append, _) => "append",
                (StoreMode::Prepend, _) => "prepend",
                (StoreMode::Set, _) => "set",
            };
            let ttl = match write.ttl {
                Ttl::Exptime(e) if e > 0 && e <= store::REALTIME_MAXDELTA => e,
                Ttl::Exptime(e) if e > 0 => e.saturating_sub(now.secs() as i64).max(0),
                Ttl::AtMillis(at) => (at.saturating_sub(now.millis()) / 1000) as i64,
                _ => 0,
            };
            let cfd = self.cfd;
            watchers.publish(EventKind::Mutations, now, |line| {
                line.push_str("type=item_store key=");
                uri_encode(line, write.key);
                let _ = write!(
                    line,
                    " status={status} cmd={command} ttl={ttl} clsid=1 cfd={cfd} size={}",
                    write.value.len()
                );
            });
        }
        self.publish_evictions(now);
    }

    /// Hands the store's evictions to `watch evictions` (and keeps the store recording them
    /// only while someone watches).
    fn publish_evictions(&mut self, now: Now) {
        let watchers = &self.config.control.watchers;
        let wanted = watchers.wants(EventKind::Evictions);
        self.shard.set_eviction_log(wanted);
        if !wanted {
            return;
        }
        let now_secs = now.secs();
        self.shard.take_evictions(|evicted| {
            watchers.publish(EventKind::Evictions, now, |line| {
                line.push_str("type=eviction key=");
                uri_encode(line, &evicted.key);
                let ttl = if evicted.exptime == 0 {
                    -1
                } else {
                    i64::from(evicted.exptime) - now_secs as i64
                };
                let _ = write!(
                    line,
                    " fetch={} ttl={ttl} la={} clsid=1 size={}",
                    if evicted.fetched { "yes" } else { "no" },
                    now_secs.saturating_sub(u64::from(evicted.last_access)),
                    evicted.value_len
                );
            });
        });
    }

    /// Starts loading the items lookups of `keys` in this worker's shard will read, without
    /// waiting for them; changes nothing. In two stages: every key's home bucket
    /// ([`store::Shard::bucket_hint`], which reads nothing), then every key's item
    /// ([`store::Shard::item_hint`], which reads the bucket the first stage brought, or is
    /// bringing, but not the item), so that the misses of all keys overlap at each stage
    /// instead of each key's two following one another. Keys past [`PREFETCH_MAX`] are not
    /// looked at.
    #[inline]
    pub fn prefetch(&self, keys: &[&[u8]]) {
        let mut hints: [Option<store::BucketHint>; PREFETCH_MAX] = [None; PREFETCH_MAX];
        for (hint, key) in hints.iter_mut().zip(keys) {
            let bucket = self.shard.bucket_hint(key);
            if !bucket.bucket().is_null() {
                prefetch_line(bucket.bucket());
                *hint = Some(bucket);
            }
        }
        for hint in hints.iter().take(keys.len()).flatten() {
            if let Some(item) = self.shard.item_hint(*hint) {
                prefetch_lines(item);
            }
        }
    }

    /// A read: looks `key` up (a hit is marked fetched), counting `cmd_get`.
    pub fn get(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        self.get_view(key, now)
    }

    /// [`Core::get`] for a caller that needs the value only (RESP `GET`): the value comes back
    /// in registers, not in a copy of the whole view in memory whose wide loads would wait for
    /// the narrow stores that wrote it.
    pub fn get_value(&mut self, key: &[u8], now: Now) -> Option<&[u8]> {
        self.get_view(key, now).map(|item| item.value)
    }

    #[inline(always)]
    fn get_view(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        self.counters.cmd_get += 1;
        self.sample(Kind::Get);
        let observed = self.observed();
        let item = self.shard.get(key, now);
        if observed {
            let found = item.map(|item| item.value.len());
            Core::observe_get(
                &self.config.control,
                &mut self.prefixes,
                self.cfd,
                key,
                found,
                now,
            );
        }
        item
    }

    /// True when `stats detail` or a watcher wants to see reads (one relaxed load).
    #[inline]
    fn observed(&self) -> bool {
        self.config.control.observes_reads()
    }

    /// A read that leaves the item as it is (no fetched mark, no clock bump; meta `u`):
    /// counts `cmd_get`, not the store's hits and misses.
    pub fn get_unbumped(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        self.counters.cmd_get += 1;
        self.sample(Kind::Get);
        let observed = self.observed();
        let item = self.shard.peek(key, now);
        if observed {
            let found = item.map(|item| item.value.len());
            Core::observe_get(
                &self.config.control,
                &mut self.prefixes,
                self.cfd,
                key,
                found,
                now,
            );
        }
        item
    }

    /// Looks at an item for the engine's own decisions (compare rules, sizes, metadata):
    /// nothing is counted or marked.
    pub fn peek(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        self.shard.peek(key, now)
    }

    /// A touch (or get-and-touch): new expiry for a held key, counting `cmd_touch`.
    pub fn touch(&mut self, key: &[u8], ttl: Ttl, now: Now) -> Option<ItemView<'_>> {
        self.touch_marking(key, ttl, true, now)
    }

    /// [`Core::touch`] that leaves the item unmarked (no fetched mark, no clock bump, no
    /// access time: meta `mg ... T u`), counting `cmd_touch`.
    pub fn touch_unbumped(&mut self, key: &[u8], ttl: Ttl, now: Now) -> Option<ItemView<'_>> {
        self.touch_marking(key, ttl, false, now)
    }

    fn touch_marking(
        &mut self,
        key: &[u8],
        ttl: Ttl,
        mark: bool,
        now: Now,
    ) -> Option<ItemView<'_>> {
        self.counters.cmd_touch += 1;
        self.sample(Kind::Touch);
        let observed = self.observed();
        let item = self.shard.touch_marking(key, ttl, mark, now);
        if item.is_some() {
            self.marks.note(key);
        }
        if observed {
            let found = item.map(|item| item.value.len());
            Core::observe_get(
                &self.config.control,
                &mut self.prefixes,
                self.cfd,
                key,
                found,
                now,
            );
        }
        item
    }

    /// A new expiry set as part of another command (meta `ma` with `T`): the store counts it
    /// as a touch, `cmd_touch` does not.
    pub fn retouch(&mut self, key: &[u8], ttl: Ttl, now: Now) {
        if self.shard.touch(key, ttl, now).is_some() {
            self.marks.note(key);
        }
    }

    /// A store in any mode, counting `cmd_set` (and `store_no_memory` when no room could be
    /// made for it); one whose item can never fit (`-I`; not an append or prepend) is refused
    /// as [`Core::refuse_too_large`] refuses it, without unlinking the old item.
    ///
    /// # Errors
    /// As [`Shard::store`].
    pub fn store(&mut self, write: Write<'_>, now: Now) -> Result<u64, StoreError> {
        let extends = matches!(write.mode, StoreMode::Append | StoreMode::Prepend);
        if !extends && !self.fits(write.key.len(), write.value.len()) {
            // An item that can never fit is refused before anything is stored, and counted
            // as memcached counts it, in `store_too_large` and not `cmd_set`, whichever
            // protocol it came in (text, binary and meta refuse it from its header; RESP's
            // SET gets here). An append past the limit is a store that did not happen.
            self.refuse_too_large(write.key, false, now);
            return Err(StoreError::TooLarge);
        }
        self.counters.cmd_set += 1;
        self.sample(Kind::Set);
        let result = self.shard.store(write, now);
        if result.is_ok() {
            self.marks.note(write.key);
        }
        self.publish_buckets();
        if result == Err(StoreError::OutOfMemory) {
            self.counters.store_no_memory += 1;
        }
        if self.config.control.detail() || self.config.control.watchers.any() {
            let status = match result {
                Ok(_) => "stored",
                Err(StoreError::Exists) => "exists",
                Err(StoreError::NotFound) => "not_found",
                Err(StoreError::TooLarge) => "too_large",
                Err(StoreError::OutOfMemory) => "no_memory",
                Err(_) => "not_stored",
            };
            self.observe_store(&write, status, now);
        }
        result
    }

    /// A store the client did not ask for as such (meta `N`: an item created on a miss, or an
    /// append retried as an add), not counted in `cmd_set`.
    ///
    /// # Errors
    /// As [`Shard::store`].
    pub fn vivify(&mut self, write: Write<'_>, now: Now) -> Result<u64, StoreError> {
        let result = self.shard.store(write, now);
        if result.is_ok() {
            self.marks.note(write.key);
        }
        self.publish_buckets();
        if self.config.control.watchers.any() {
            self.publish_evictions(now);
        }
        result
    }

    /// A store refused before its value was read because it can never fit (`-I`): counted in
    /// `store_too_large` (not `cmd_set`, as memcached counts it), whichever protocol it came
    /// in. With `unlink`, the item held under `key` goes too, so no stale value survives the
    /// refused store (memcached does so for a SET, and for any meta `ms`).
    pub fn refuse_too_large(&mut self, key: &[u8], unlink: bool, now: Now) {
        self.counters.store_too_large += 1;
        self.sample(Kind::Set);
        if unlink && self.shard.unlink(key, now) {
            self.marks.note(key);
        }
        if self.config.control.detail() || self.config.control.watchers.any() {
            let write = Write::new(StoreMode::Set, key, b"");
            self.observe_store(&write, "too_large", now);
        }
    }

    /// Removes the item under `key` without counting a delete: after a store refused for
    /// memory, as memcached does (see [`Core::refuse_too_large`]).
    pub fn unlink(&mut self, key: &[u8], now: Now) {
        if self.shard.unlink(key, now) {
            self.marks.note(key);
        }
    }

    /// Whether an item of this key and value length can ever be stored (`-I`).
    pub fn fits(&self, key_len: usize, value_len: usize) -> bool {
        store::item_size(key_len, value_len) <= self.config.shard.max_item_size
    }

    /// Removes a live item; `cas != 0` must match.
    ///
    /// # Errors
    /// As [`Shard::delete`].
    pub fn delete(&mut self, key: &[u8], cas: u64, now: Now) -> Result<(), StoreError> {
        self.sample(Kind::Delete);
        if self.config.control.detail() {
            self.prefixes.record(key, |c| c.del += 1);
        }
        let result = self.shard.delete(key, cas, now);
        if result.is_ok() {
            self.marks.note(key);
        }
        result
    }

    /// Marks a live item stale (meta `md` with `I`).
    ///
    /// # Errors
    /// As [`Shard::invalidate_with`].
    pub fn invalidate(
        &mut self,
        key: &[u8],
        cas: u64,
        exptime: Option<i64>,
        new_cas: NewCas,
        now: Now,
    ) -> Result<u64, StoreError> {
        self.sample(Kind::Delete);
        let result = self.shard.invalidate_with(key, cas, exptime, new_cas, now);
        if result.is_ok() {
            self.marks.note(key);
        }
        result
    }

    /// Records that a client holds the item's recache token (meta `W`).
    pub fn claim_win(&mut self, key: &[u8], now: Now) {
        self.shard.claim_win(key, now);
    }

    /// Marks a live item fetched, as a read does, without counting a read: the item a meta
    /// `mg ... N` just created and handed to the client (memcached marks it once the reply is
    /// written, and counts that `mg` once).
    pub fn mark_fetched(&mut self, key: &[u8], now: Now) {
        self.shard.mark_fetched(key, now);
    }

    /// incr/decr.
    ///
    /// # Errors
    /// As [`Shard::incr_decr`].
    pub fn arith(&mut self, arith: Arith<'_>, now: Now) -> Result<(u64, u64), StoreError> {
        self.sample(Kind::Arith);
        let result = self.shard.incr_decr(arith, now);
        if result.is_ok() {
            self.marks.note(arith.key);
        }
        self.publish_buckets();
        if self.config.control.watchers.any() {
            self.publish_evictions(now);
        }
        result
    }

    /// A compare value no item under `key` matches, for a `cas` (or meta `C`) of 0: memcached
    /// reads CAS 0 as "none" and never matches it, where the store reads it as "no compare". So
    /// the answers are memcached's (NOT_FOUND when missing, EXISTS when held), any non-zero
    /// value but the held item's CAS is taken; clients may give items any CAS (meta `E`), so no
    /// fixed value would do.
    pub fn cas_matching_nothing(&mut self, key: &[u8], now: Now) -> u64 {
        match self.shard.peek(key, now) {
            Some(item) if item.cas == 1 => 2,
            _ => 1,
        }
    }

    /// flush_all on this worker's shard, counting `cmd_flush` (other workers flush theirs with
    /// [`Core::flush_for_another`]).
    pub fn flush_all(&mut self, delay: i64, now: Now) {
        self.counters.cmd_flush += 1;
        self.sample(Kind::Flush);
        log::info!("flush_all (delay {delay})");
        self.note_flush(now);
        self.shard.flush_all(delay, now);
    }

    /// This worker's share of a flush_all another worker received (counted there).
    pub fn flush_for_another(&mut self, delay: i64, now: Now) {
        self.note_flush(now);
        self.shard.flush_all(delay, now);
    }

    /// Empties this worker's shard now, counting `cmd_flush`: a flush, then every item
    /// reclaimed at once (O(n) in the table's buckets), so the shard counts no item after it
    /// as Redis's keyspace counts no key after `FLUSHALL`. Other workers empty theirs with
    /// [`Core::clear_for_another`].
    pub fn clear(&mut self, now: Now) {
        self.counters.cmd_flush += 1;
        self.sample(Kind::Flush);
        self.clear_for_another(now);
    }

    /// This worker's share of a [`Core::clear`] another worker received (counted there).
    pub fn clear_for_another(&mut self, now: Now) {
        self.note_flush(now);
        self.shard.flush_all(0, now);
        self.shard.sweep_expired(usize::MAX, now);
    }

    /// Notes, before a flush, a write to each watched key it removes.
    fn note_flush(&mut self, now: Now) {
        let shard = &mut self.shard;
        self.marks.note_held(|key| shard.peek(key, now).is_some());
    }

    /// The input budget for large commands (see [`InputBudget`]).
    pub fn budget(&self) -> &InputBudget {
        &self.budget
    }

    /// The write marks of watched keys (see [`WriteMarks`]).
    pub fn marks(&mut self) -> &mut WriteMarks {
        &mut self.marks
    }

    /// A request refused as malformed or unknown.
    pub fn protocol_error(&mut self) {
        self.counters.protocol_errors += 1;
    }

    /// A meta command (`cmd_meta`).
    pub fn count_meta(&mut self) {
        self.counters.cmd_meta += 1;
    }

    /// Bytes received from a client, counted when they are first seen, before the requests
    /// in them run (as memcached counts what it reads before executing it: right after a
    /// `stats reset`, `bytes_read` holds what arrived after the reset's own line).
    pub fn count_read(&mut self, read: usize) {
        self.counters.bytes_read += read as u64;
    }

    /// Bytes one execution wrote, the requests it completed, and whether it ended its
    /// connection's turn with work left.
    pub fn count_execution(&mut self, written: usize, requests: u64, yielded: bool) {
        self.counters.requests += requests;
        self.counters.bytes_written += written as u64;
        if yielded {
            self.counters.conn_yields += 1;
        }
    }

    /// A request (or one part of a multi-key request) sent to the worker that owns its key.
    pub fn count_forwarded(&mut self) {
        self.counters.forwarded += 1;
    }

    /// Reply bytes that reached a connection from another worker.
    pub fn count_written(&mut self, len: usize) {
        self.counters.bytes_written += len as u64;
    }

    /// The version string answered to VERSION.
    pub fn version(&self) -> &'static str {
        self.config.version
    }

    /// The configuration this core was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// This core's store shard.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// The background crawler (what memcached's LRU maintainer has its crawler do on its
    /// own): looks at up to `max_items` items from where it stopped last, wrapping at the
    /// table's end, and takes back the dead ones, counted as the crawler's
    /// (`crawler_items_checked`, `crawler_reclaimed`). Off after `lru_crawler disable`.
    /// Returns how many it took back.
    pub fn sweep_expired(&mut self, max_items: usize, now: Now) -> usize {
        // A stalled step towards a lowered budget is tried again on this schedule.
        self.house.shrink_stalled = false;
        if !self.config.control.crawler.enabled() {
            return 0;
        }
        let step = self.shard.crawl(self.house.background_at, max_items, now);
        self.house.background_at = if step.next >= self.shard.num_buckets() {
            0
        } else {
            step.next
        };
        step.reclaimed
    }

    /// Takes this worker's share of the whole memory budget when it changed
    /// (`cache_memlimit`): a higher one is usable at once, a lower one is reached by
    /// [`Core::housekeep`] in bounded steps.
    pub fn apply_memory_limit(&mut self) {
        let whole = self.config.control.memory_limit_bytes();
        if whole == 0 {
            return;
        }
        let share =
            usize::try_from(whole / self.config.threads.max(1) as u64).unwrap_or(usize::MAX);
        if share != self.shard.config().memory_limit_bytes {
            log::debug!(
                "worker {}: memory budget {} bytes",
                self.config.worker,
                share
            );
            self.shard.set_memory_limit(share);
        }
    }

    /// Background work between turns, one bounded step of each kind that is due (at most
    /// [`HOUSEKEEPING_ITEMS`] items each): taking a changed memory budget and evicting down to
    /// a lowered one, freeing this worker's share of a page `slabs reassign` moves, and a step
    /// of the crawl `lru_crawler crawl` asked for (then none for `lru_crawler sleep`
    /// microseconds); then publishes the shard's figures for other workers. `ns` is the loop's
    /// monotonic clock. Returns whether it did any work.
    pub fn housekeep(&mut self, now: Now, ns: u64) -> bool {
        self.apply_memory_limit();
        let mut worked = false;
        if self.shard.over_budget() && !self.house.shrink_stalled {
            let before = self.shard.stats().heap_bytes;
            self.shard.shrink(HOUSEKEEPING_ITEMS, now);
            self.publish_evictions(now);
            worked = self.shard.stats().heap_bytes < before;
            self.house.shrink_stalled = !worked;
        }
        worked |= self.release_step(now);
        worked |= self.crawl_step(now, ns);
        self.publish_buckets();
        let figures = self.memory_figures_here();
        if figures != self.house.published {
            self.house.published = figures;
            self.config
                .control
                .publish_shard(self.config.worker, figures);
        }
        worked
    }

    /// How long until background work is due (`Some(0)`: now), or `None` when there is none:
    /// a worker about to sleep sleeps no longer than this.
    pub fn background_wait_ns(&self, ns: u64) -> Option<u64> {
        let shrinking = self.shard.over_budget() && !self.house.shrink_stalled;
        if shrinking || self.house.release_left > 0 {
            return Some(0);
        }
        self.house.crawl.map(|run| run.due_ns.saturating_sub(ns))
    }

    /// This shard's memory figures.
    fn memory_figures_here(&self) -> MemoryFigures {
        let stats = self.shard.stats();
        MemoryFigures {
            heap_bytes: stats.heap_bytes,
            items: stats.curr_items,
            limit_bytes: self.shard.config().memory_limit_bytes as u64,
        }
    }

    /// Every shard's memory figures summed: this one's as they are, the other workers' as
    /// they last published them (at most one loop iteration old).
    pub fn memory_figures(&self) -> MemoryFigures {
        let control = &self.config.control;
        control.publish_shard(self.config.worker, self.memory_figures_here());
        control.memory_figures(self.config.threads.max(1))
    }

    /// A step of freeing this worker's share of a page `slabs reassign` moves out of the item
    /// class; the last worker done completes the move.
    fn release_step(&mut self, now: Now) -> bool {
        let requested = self.config.control.pages.requested();
        if requested != self.house.moves_seen {
            self.house.moves_seen = requested;
            self.house.release_left = PAGE_BYTES.div_ceil(self.config.threads.max(1) as u64);
        }
        if self.house.release_left == 0 {
            return false;
        }
        let left = usize::try_from(self.house.release_left).unwrap_or(usize::MAX);
        let freed = self.shard.release(left, HOUSEKEEPING_ITEMS, now) as u64;
        self.house.release_left = self.house.release_left.saturating_sub(freed);
        if freed == 0 || self.house.release_left == 0 {
            // Freed, or nothing left here to free.
            self.house.release_left = 0;
            self.config.control.pages.finished();
        }
        true
    }

    /// A step of this worker's part of a requested crawl, when one runs and its pause is
    /// over; the last worker done ends the crawl.
    fn crawl_step(&mut self, now: Now, ns: u64) -> bool {
        let crawler = &self.config.control.crawler;
        let requested = crawler.requested();
        if requested != self.house.crawls_seen {
            self.house.crawls_seen = requested;
            let tocrawl = crawler.tocrawl();
            self.house.crawl = Some(CrawlRun {
                next: 0,
                left: if tocrawl == 0 {
                    u64::MAX
                } else {
                    u64::from(tocrawl)
                },
                due_ns: 0,
            });
        }
        let Some(run) = self.house.crawl.as_mut() else {
            return false;
        };
        if ns < run.due_ns {
            return false;
        }
        let max = usize::try_from(run.left.min(HOUSEKEEPING_ITEMS as u64)).unwrap_or(0);
        let step = self.shard.crawl(run.next, max, now);
        run.next = step.next;
        run.left -= step.checked as u64;
        if run.next >= self.shard.num_buckets() || run.left == 0 {
            log::trace!("worker {}: crawl done", self.config.worker);
            self.house.crawl = None;
            crawler.finished();
        } else {
            run.due_ns = ns.saturating_add(u64::from(crawler.sleep_us()) * 1000);
        }
        true
    }

    /// The command counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Connection figures, kept current by the packet path.
    pub fn info_mut(&mut self) -> &mut ServerInfo {
        &mut self.info
    }

    /// The worker loop's figures, kept current by the loop.
    pub fn figures_mut(&mut self) -> &mut WorkerFigures {
        &mut self.figures
    }

    /// The packet path's counters, copied by the loop.
    pub fn set_raw_path(&mut self, raw: RawPath) {
        self.raw_path = raw;
    }

    /// The loop's figures with the packet counters named.
    fn named_figures(&self) -> WorkerFigures {
        WorkerFigures {
            path: self.raw_path.named(),
            ..self.figures
        }
    }

    /// `stats reset`: zeroes the counters memcached resets (commands, hits and misses,
    /// evictions, connections accepted and refused), this worker's loop figures and packet
    /// counters, the latency histograms and `stats detail`'s prefixes. What describes the
    /// cache now (items, bytes, open connections) stays.
    pub fn reset_stats(&mut self) {
        self.counters = Counters::default();
        self.shard.reset_stats();
        self.info_base = self.info;
        self.figures_base = self.named_figures();
        self.latency.reset();
        self.prefixes.clear();
        // Requests counted before the reset are not timed after it.
        self.take_samples();
        self.resets = self.resets.wrapping_add(1);
        self.config.control.reset_counters();
    }

    /// This worker's figures for a `stats` reply of `group` (summed with other workers'
    /// where there are several); groups that need more than the counters get their part here
    /// (`items`: the oldest item; `sizes`: the size classes; `detail`; `latency`; INFO's
    /// keyspace: keys per namespace). `sizes`, `items` and the keyspace walk the shard.
    pub fn snapshot(&self, group: Group, now: Now) -> Snapshot {
        // Before the figures: a move or crawl seen stopped here has done all its work in them.
        let background = Background::now(&self.config.control);
        let info = ServerInfo {
            curr_connections: self.info.curr_connections,
            total_connections: self
                .info
                .total_connections
                .saturating_sub(self.info_base.total_connections),
            rejected_connections: self
                .info
                .rejected_connections
                .saturating_sub(self.info_base.rejected_connections),
            recovery: self.info.recovery.since(&self.info_base.recovery),
        };
        let mut snapshot = Snapshot {
            shard: self.shard.stats().clone(),
            counters: self.counters,
            info,
            workers: vec![WorkerFigures {
                forwarded: self.counters.forwarded,
                ..self.named_figures().since(&self.figures_base)
            }],
            threads: self.config.threads,
            limit_maxbytes: self.shard.config().memory_limit_bytes as u64,
            item_size_max: self.config.shard.max_item_size as u64,
            conn_limit: self.config.conn_limit as u64,
            started_unix_secs: self.config.started_unix_secs,
            version: self.config.version,
            background,
            ..Snapshot::default()
        };
        match group {
            Group::Items => {
                let mut oldest = u64::MAX;
                self.shard.visit(0, usize::MAX, now, |_, item, _| {
                    oldest = oldest.min(u64::from(item.last_access));
                });
                if oldest != u64::MAX {
                    snapshot.oldest_idle_secs = now.secs().saturating_sub(oldest);
                }
            }
            Group::Sizes if self.config.control.sizes() => {
                let classes = self.config.shard.max_item_size.div_ceil(SIZES_STEP) + 1;
                let mut sizes = vec![0u64; classes];
                self.shard.visit(0, usize::MAX, now, |_, _, size| {
                    let class = size.div_ceil(SIZES_STEP).min(classes - 1);
                    sizes[class] += 1;
                });
                while sizes.last() == Some(&0) {
                    sizes.pop();
                }
                snapshot.sizes = sizes;
            }
            Group::Detail => snapshot.prefixes = Some(self.prefixes.clone()),
            Group::Latency => snapshot.latency = Some(Box::new(self.latency.clone())),
            Group::CacheDump { limit } => {
                let mut dump = CacheDump::new(limit);
                // The table in slices, so a limited dump stops walking once it is full.
                let mut start = 0;
                while !dump.is_full() && start < self.shard.num_buckets() {
                    self.shard.visit(
                        start,
                        start + CACHEDUMP_SLICE_BUCKETS,
                        now,
                        |key, item, _| {
                            dump.add(key, item.value.len(), u64::from(item.exptime));
                        },
                    );
                    start += CACHEDUMP_SLICE_BUCKETS;
                }
                snapshot.cachedump = Some(dump);
            }
            Group::Keyspace => {
                // One pass over the table: each live key counts for its namespace.
                let mut keyspace =
                    vec![NamespaceKeys::default(); usize::from(self.config.databases)];
                let now_ms = now.millis();
                self.shard.visit(0, usize::MAX, now, |stored, item, _| {
                    let Some((namespace, _)) = super::session::database_key(stored) else {
                        return;
                    };
                    let Some(counts) = keyspace.get_mut(usize::from(namespace)) else {
                        return;
                    };
                    counts.keys += 1;
                    if item.expiry_ms != 0 {
                        counts.expires += 1;
                        counts.ttl_ms_sum += u128::from(item.expiry_ms.saturating_sub(now_ms));
                    }
                });
                snapshot.keyspace = keyspace;
            }
            _ => {}
        }
        snapshot
    }
}

/// Asks the CPU to bring the first and last cache lines of `bytes` towards it (the T0 hint)
/// without waiting: the load that later needs them finds them there, or on their way.
#[inline]
fn prefetch_lines(bytes: &[u8]) {
    let first = bytes.as_ptr();
    prefetch_line(first);
    prefetch_line(first.wrapping_add(bytes.len().saturating_sub(1)));
}

/// [`prefetch_lines`] for the one cache line holding `at`.
#[inline]
#[allow(unsafe_code)]
fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults,
        // whatever the address (every caller's points into a live allocation); SSE, which it
        // needs, is part of every x86-64 CPU.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at.cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
