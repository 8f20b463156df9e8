//! The engine's core: this worker's store shard and every figure `stats` reports, behind the
//! operations every protocol adapter calls.
//!
//! ```text
//! adapter (binary, text, ...) ─▶ Core::get / store / touch / delete / arith / flush_all ─▶ store::Shard
//!                                   └─ counts cmd_get, cmd_set, cmd_touch, cmd_flush, ... as it goes
//! ```
//!
//! It knows no protocol: adapters translate requests into these calls and results back into
//! replies, and every counter is kept here, so `cmd_get` or `cmd_set` mean the same whichever
//! protocol a client speaks, and a new statistic is added in one place. The store's own
//! counters (hits, misses, evictions) are counted by the store.

use store::{Arith, ItemView, NewCas, Now, Shard, StoreError, Ttl, Write};

use super::EngineConfig;
use crate::stats::{Counters, ServerInfo, Snapshot};

/// One worker's store shard, counters and configuration.
pub(crate) struct Core {
    shard: Shard,
    counters: Counters,
    config: EngineConfig,
    info: ServerInfo,
}

impl Core {
    /// A core with an empty shard.
    pub fn new(config: EngineConfig) -> Core {
        Core {
            shard: Shard::new(config.shard),
            counters: Counters::default(),
            config,
            info: ServerInfo::default(),
        }
    }

    /// A read: looks `key` up (a hit is marked fetched), counting `cmd_get`.
    pub fn get(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        self.counters.cmd_get += 1;
        self.shard.get(key, now)
    }

    /// A read that leaves the item as it is (no fetched mark, no clock bump; meta `u`):
    /// counts `cmd_get`, not the store's hits and misses.
    pub fn get_unbumped(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        self.counters.cmd_get += 1;
        self.shard.peek(key, now)
    }

    /// Looks at an item for the engine's own decisions (compare rules, sizes, metadata):
    /// nothing is counted or marked.
    pub fn peek(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        self.shard.peek(key, now)
    }

    /// A touch (or get-and-touch): new expiry for a held key, counting `cmd_touch`.
    pub fn touch(&mut self, key: &[u8], ttl: Ttl, now: Now) -> Option<ItemView<'_>> {
        self.counters.cmd_touch += 1;
        self.shard.touch(key, ttl, now)
    }

    /// A new expiry set as part of another command (meta `ma` with `T`): the store counts it
    /// as a touch, `cmd_touch` does not.
    pub fn retouch(&mut self, key: &[u8], ttl: Ttl, now: Now) {
        self.shard.touch(key, ttl, now);
    }

    /// A store in any mode, counting `cmd_set` (and `store_no_memory` when no room could be
    /// made for it).
    ///
    /// # Errors
    /// As [`Shard::store`].
    pub fn store(&mut self, write: Write<'_>, now: Now) -> Result<u64, StoreError> {
        self.counters.cmd_set += 1;
        let result = self.shard.store(write, now);
        if result == Err(StoreError::OutOfMemory) {
            self.counters.store_no_memory += 1;
        }
        result
    }

    /// A store the client did not ask for as such (meta `N`: an item created on a miss, or an
    /// append retried as an add), not counted in `cmd_set`.
    ///
    /// # Errors
    /// As [`Shard::store`].
    pub fn vivify(&mut self, write: Write<'_>, now: Now) -> Result<u64, StoreError> {
        self.shard.store(write, now)
    }

    /// A store refused before its value was read because it can never fit (`-I`): counted in
    /// `store_too_large` (not `cmd_set`, as memcached counts it), whichever protocol it came
    /// in. With `unlink`, the item held under `key` goes too, so no stale value survives the
    /// refused store (memcached does so for a SET, and for any meta `ms`).
    pub fn refuse_too_large(&mut self, key: &[u8], unlink: bool, now: Now) {
        self.counters.store_too_large += 1;
        if unlink {
            self.shard.unlink(key, now);
        }
    }

    /// Removes the item under `key` without counting a delete: after a store refused for
    /// memory, as memcached does (see [`Core::refuse_too_large`]).
    pub fn unlink(&mut self, key: &[u8], now: Now) {
        self.shard.unlink(key, now);
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
        self.shard.delete(key, cas, now)
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
        self.shard.invalidate_with(key, cas, exptime, new_cas, now)
    }

    /// Records that a client holds the item's recache token (meta `W`).
    pub fn claim_win(&mut self, key: &[u8], now: Now) {
        self.shard.claim_win(key, now);
    }

    /// incr/decr.
    ///
    /// # Errors
    /// As [`Shard::incr_decr`].
    pub fn arith(&mut self, arith: Arith<'_>, now: Now) -> Result<(u64, u64), StoreError> {
        self.shard.incr_decr(arith, now)
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
        self.shard.flush_all(delay, now);
    }

    /// This worker's share of a flush_all another worker received (counted there).
    pub fn flush_for_another(&mut self, delay: i64, now: Now) {
        self.shard.flush_all(delay, now);
    }

    /// A request refused as malformed or unknown.
    pub fn protocol_error(&mut self) {
        self.counters.protocol_errors += 1;
    }

    /// Bytes one execution consumed and wrote, and whether it ended its connection's turn with
    /// work left.
    pub fn count_execution(&mut self, read: usize, written: usize, yielded: bool) {
        self.counters.bytes_read += read as u64;
        self.counters.bytes_written += written as u64;
        if yielded {
            self.counters.conn_yields += 1;
        }
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

    /// Reclaims up to `max_items` expired items.
    pub fn sweep_expired(&mut self, max_items: usize, now: Now) -> usize {
        self.shard.sweep_expired(max_items, now)
    }

    /// The command counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Connection figures, kept current by the packet path.
    pub fn info_mut(&mut self) -> &mut ServerInfo {
        &mut self.info
    }

    /// This worker's figures for a `stats` reply (summed with other workers' where there are
    /// several).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            shard: self.shard.stats().clone(),
            counters: self.counters,
            info: self.info,
            threads: self.config.threads,
            limit_maxbytes: self.config.shard.memory_limit_bytes as u64,
            item_size_max: self.config.shard.max_item_size as u64,
            conn_limit: self.config.conn_limit as u64,
            started_unix_secs: self.config.started_unix_secs,
            version: self.config.version,
        }
    }
}
