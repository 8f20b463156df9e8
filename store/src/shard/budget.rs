//! The memory budget: where a new item is written (open segments, new segments within the
//! budget), what `heap_bytes` counts, the table's growth beside the segments, and a budget
//! lowered at run time or a page released for `slabs reassign`.

use super::*;

/// Smallest segment: a budget below 32 of these still gets segments of this size.
const MIN_SEGMENT_BYTES: usize = 4096;

/// Largest segment (items larger than a segment get one of their own, of their size).
pub const MAX_SEGMENT_BYTES: usize = 1 << 20;

/// Entries per bucket at which the table considers growing (4 of 7 slots).
const GROW_LOAD: usize = 4;

/// Entries per bucket past which the table is worth growing when the budget would hold more
/// items (4/5 of 7). Entries never move, so under a full cache's churn a fuller table
/// drifts: at 6.3 a bucket (9/10) a lookup came to read 10 buckets past its home on average,
/// at 5.9 five, at 5.2 to 5.4 one and a half to two
/// (`segment_tests::a_full_cache_under_churn_keeps_lookups_short`).
const FULL_LOAD_TENTHS: usize = 56;

/// Entries per bucket a table grown by less than a doubling may be planned for (4/5 of 7),
/// so that the entries of items dead but not yet taken back, and buckets fuller than the
/// mean, rarely make an insert evict from its home bucket.
const STEP_LOAD_TENTHS: usize = 56;

/// The segment size for a budget: 1/32 of it as a power of two, from 4 KiB to 1 MiB.
pub(super) fn segment_size_for(limit: usize) -> usize {
    let target = (limit / 32).clamp(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES);
    1 << (usize::BITS - 1 - target.leading_zeros())
}

impl Shard {
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
        // What a bigger table is worth depends on the budget: a size refused under the old
        // one is weighed again.
        self.refused_buckets = 0;
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
    pub(super) fn shrink_table(&mut self) -> bool {
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

    /// Bytes of the budget in use: the segments held, less what is free in them (the open
    /// segments' unwritten room, the spare segment, the part of the oldest segment the
    /// eviction hand has passed and not kept), plus the table. Live items, dead items not yet
    /// taken back and the unwritten tails of sealed segments all count.
    pub(super) fn heap_now(&self) -> u64 {
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

    /// Brings `heap_bytes` up to date ([`Shard::heap_now`]). The frequent changes keep the
    /// figure themselves, by the bytes they move: an item written (`append`), the eviction
    /// hand's step and an item it keeps (`evict_one`); the rarer ones recount it here: a
    /// segment sealed, taken back or passed over by the hand, the table created or rebuilt.
    /// Debug builds check the figure against a recount after every store and every step of
    /// the hand.
    pub(super) fn refresh_heap(&mut self) {
        self.stats.heap_bytes = self.heap_now();
    }

    /// Whether an item of `size` bytes in `class` can be written without evicting anything.
    pub(super) fn has_room(&self, size: usize, class: usize) -> bool {
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

    /// Room for `size` bytes in `class` without evicting: in its open segment, else in a new
    /// one (the spare, or a new buffer within the budget). Returns the segment and offset.
    pub(super) fn space(&mut self, size: usize, class: usize) -> Option<(usize, usize)> {
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

    /// Writes a new item to the open segment of its expiry class (or to a segment of its own
    /// when it is larger than a segment), evicting to make room for a segment when the budget
    /// is reached; returns its table entry (not yet in the table).
    pub(super) fn append(
        &mut self,
        hash: u64,
        fields: &Fields<'_>,
        now: Now,
    ) -> Result<u64, StoreError> {
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
        // `space` left the heap figure current but for these bytes: written into an open
        // segment's room, or into a segment of their own taken for them.
        self.stats.heap_bytes += size as u64;
        debug_assert_eq!(self.stats.heap_bytes, self.heap_now());
        Ok(table::entry(hash, id, offset))
    }

    /// Puts entry `e` (of `hash`) in the table, growing the table when its load calls for it
    /// and the bigger table is worth its memory; when the entry finds no free slot near its
    /// home bucket, a dead item of any bucket it may go to is taken back for it, or else a
    /// live one of its home bucket is evicted (only with eviction on). Returns whether the
    /// entry was placed.
    pub(super) fn table_insert(&mut self, hash: u64, e: u64, now: Now) -> bool {
        let buckets = self.table.num_buckets();
        if buckets == 0 {
            self.table = Table::with_buckets(1);
            self.refresh_heap();
        } else if self.table.len() >= GROW_LOAD * buckets {
            self.maybe_grow();
        }
        if self.table.insert(hash, e).is_some() {
            return true;
        }
        // The capped path: a dead item (expired, flushed) in any bucket the entry may go to,
        // else a live one of the home bucket, the one nearest the eviction hand, which would
        // go soonest anyway (its dead bytes then lie where the hand takes segments back
        // next); the entry takes its slot.
        let dead = self.table.probe_buckets(hash).find_map(|bucket| {
            self.table
                .bucket(bucket)
                .find(|&(_, other)| self.liveness(other, now) != Liveness::Live)
        });
        let mut victim = dead.map(|(loc, _)| (loc, Removal::Reclaimed));
        if victim.is_none() {
            let mut oldest = u64::MAX;
            for (loc, other) in self.table.bucket(self.table.home_of(hash)) {
                let queued = self.segs.segs[segment_of(other)].queued;
                if queued < oldest {
                    oldest = queued;
                    victim = Some((loc, Removal::Evicted));
                }
            }
        }
        if victim.is_some_and(|(_, why)| why == Removal::Evicted) && !self.evict {
            return false;
        }
        if let Some((loc, why)) = victim {
            if why == Removal::Evicted {
                self.log_eviction(self.table.get(loc), now);
            }
            self.remove_at(loc, self.hash_of(self.table.get(loc)), why);
        }
        let placed = self.table.insert(hash, e);
        debug_assert!(placed.is_some(), "a slot of the home bucket was freed");
        true
    }

    /// Before a new key is stored: when the table is due to grow ([`Shard::maybe_grow`]),
    /// the bigger table is worth its memory and it does not fit beside the segments with room
    /// for one more, the eviction hand takes segments back until it does (compacting first
    /// while many bytes are dead, as for a store). Without this, segments that filled the
    /// budget, even with dead bytes only, would keep the table at its size for good, and a
    /// full table evicts live items from full buckets however little of the budget they take
    /// (`segment_tests::a_table_grows_after_churn_filled_the_budget_with_dead_bytes`).
    pub(super) fn make_room_for_table(&mut self, now: Now) {
        let buckets = self.table.num_buckets();
        if buckets == 0
            || self.table.len() < GROW_LOAD * buckets
            || self.refused_buckets == buckets
            || !self.growth_worth_it()
        {
            return;
        }
        // With eviction off, a hand that finds nothing to take is no store's failure.
        let victim = if self.evict {
            Victim::Store
        } else {
            Victim::Shrink
        };
        let need = Table::bytes_for(self.grown_buckets()) + self.segment_size;
        while self.segs.bytes + need > self.config.memory_limit_bytes {
            if self.segs.drop_spares(0) == 0 && !self.evict_one(now, victim) {
                return;
            }
        }
    }

    /// Items a table of `buckets` buckets lets the budget hold at the items' current mean
    /// size: what fits beside the table, less one segment (the spare, or the one the eviction
    /// hand is emptying, holds no items that count), and at most [`FULL_LOAD_TENTHS`] per bucket.
    fn items_held_with(&self, buckets: usize, load_tenths: usize) -> usize {
        let limit = self.config.memory_limit_bytes;
        let mean = (self.stats.bytes / self.table.len().max(1) as u64).max(1) as usize;
        let fit = limit.saturating_sub(Table::bytes_for(buckets) + self.segment_size) / mean;
        fit.min(buckets * load_tenths / 10)
    }

    /// The size the table grows to: of 5/4, 3/2 and twice its buckets, the one that lets the
    /// budget hold the most items ([`Shard::items_held_with`]), the smallest of equals. While
    /// the budget is far from full that is a doubling; near the end of a fill, a smaller step
    /// leaves more of the budget to items: with 64 MiB of 133-byte items, 81,920 buckets
    /// (5 MiB, 5.6 items a bucket) rather than 131,072 (8 MiB).
    fn grown_buckets(&self) -> usize {
        let buckets = self.table.num_buckets();
        let doubled = buckets * 2;
        if !self.evict {
            return doubled;
        }
        let held = self.items_held_with(doubled, FULL_LOAD_TENTHS);
        [buckets * 5 / 4, buckets * 3 / 2]
            .into_iter()
            .find(|&step| step > buckets && self.items_held_with(step, STEP_LOAD_TENTHS) >= held)
            .unwrap_or(doubled)
    }

    /// Whether growing the table ([`Shard::grown_buckets`]) lets the budget hold more items
    /// than the current one does.
    fn growth_worth_it(&self) -> bool {
        let buckets = self.table.num_buckets();
        self.items_held_with(self.grown_buckets(), FULL_LOAD_TENTHS)
            > self.items_held_with(buckets, FULL_LOAD_TENTHS)
    }

    /// Grows the table if that is worth its memory ([`Shard::growth_worth_it`]) and the
    /// bigger table fits beside the segments now ([`Shard::make_room_for_table`] made room
    /// before the store).
    pub(super) fn maybe_grow(&mut self) {
        let buckets = self.table.num_buckets();
        if self.refused_buckets == buckets || self.stats.bytes == 0 {
            return;
        }
        let grown = self.grown_buckets();
        let fits = self.segs.bytes + Table::bytes_for(grown) <= self.config.memory_limit_bytes;
        if fits && self.growth_worth_it() {
            self.rebuild_table(grown);
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
    pub(super) fn rebuild_table(&mut self, buckets: usize) {
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
}
