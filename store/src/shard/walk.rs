//! Time and walks over the table: delayed and immediate `flush_all`, the expiry sweep, the LRU
//! crawler's walk, `visit` for inspection, and the counters `stats reset` clears.

use super::*;

impl Shard {
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
                self.remove_at(loc, self.hash_of(e), Removal::Reclaimed);
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
                    self.remove_at(loc, self.hash_of(e), Removal::Crawled(liveness));
                    done.reclaimed += 1;
                }
            }
        }
        self.stats.crawler_items_checked += done.checked as u64;
        done
    }

    /// Calls `f(key, item, size)` for every live item in buckets `start..end` (clamped to the
    /// table), in bucket order, without touching them (no fetched mark, no counters; dead
    /// items are skipped, not reclaimed). `size` is what the item is charged
    /// ([`item_size`](crate::item_size)). For inspection (`lru_crawler metadump`, `stats
    /// sizes`, Redis `KEYS`): walking the whole table costs time in proportion to it, so a
    /// caller walks it in slices.
    ///
    /// A walk in slices is stable while the table keeps its size: an entry stays in its
    /// bucket from insert to removal, so an item that is live for the whole walk is visited
    /// exactly once, whatever is stored or removed between slices. The table changes size
    /// only when it grows while the cache fills or halves under a budget lowered at run
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

    /// Calls `f(key, item, size)` for every live item whose key's position (the low 32 bits
    /// of its hash) is at least `from` and whose home is one of about `buckets` buckets from
    /// `from`'s, as [`Shard::visit`] does; returns the position the next window starts from,
    /// `None` once this window reached the last bucket. For Redis `SCAN`, with the position
    /// as its cursor.
    ///
    /// Positions do not depend on the table's size, so a walk by windows visits every item
    /// that is live for the whole walk, and each key at most once, also when the table grows
    /// or shrinks between windows. A window reads its buckets and the few after them that its
    /// entries spilled into (32 at most, as far as its buckets' entries reach), and hashes each key it finds there again to tell whether the key
    /// is in the window: a window of `buckets` buckets costs about `buckets` bucket reads
    /// and their items, whatever the table's size.
    pub fn visit_in_order(
        &self,
        from: u64,
        buckets: usize,
        now: impl Into<Now>,
        mut f: impl FnMut(&[u8], ItemView<'_>, usize),
    ) -> Option<u64> {
        let now = now.into();
        let total = self.num_buckets();
        if total == 0 || from >= table::POSITIONS {
            return None;
        }
        let first = self.table.home_of_position(from);
        let last = first.saturating_add(buckets.max(1)).min(total);
        let end = self.table.first_position(last);
        // Entries homed in `first..last` lie up to their homes' reach past them.
        let spilled = (first..last)
            .map(|home| home + self.table.reach(home) + 1)
            .max()
            .unwrap_or(last);
        for step in 0..(spilled - first).min(total) {
            for (_, e) in self.table.bucket(self.table.after(first, step)) {
                let item = self.item(e);
                let at = table::position(self.hasher.hash_one(item.key()));
                if (from..end).contains(&at) && self.liveness(e, now) == Liveness::Live {
                    f(item.key(), view(item), item.size());
                }
            }
        }
        (last < total).then_some(end)
    }

    /// Buckets in the table (0 before the first store): the range [`Shard::visit`] walks.
    pub fn num_buckets(&self) -> usize {
        self.table.num_buckets()
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

    /// Applies a delayed flush whose time has come. Called first by every operation, so
    /// items stored by this call (at `now >= at`) survive it.
    #[inline]
    pub(super) fn advance(&mut self, now: Now) {
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
    pub(super) fn apply_flush(&mut self) {
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
}
