//! The eviction hand: it walks the oldest segment, takes back dead items, gives a second
//! chance to the items read since they were written (copying them to open segments) and
//! evicts the others; with eviction off it only compacts. The order of segments is the FIFO
//! of `segment`; the policy is described in the crate docs.

use super::*;

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

/// Live items are evicted only while dead bytes are at most 1/`DEAD_SHARE` of the segment
/// memory; above it the eviction hand keeps every live item, taking back only dead bytes.
const DEAD_SHARE: usize = 4;

impl Shard {
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

    /// Evicts until an item of `size` bytes fits in the budget beside what is in use (the
    /// heap, see `heap_now`; over a lowered budget, beside the heap as it is), so that a store
    /// over a lowered budget makes room for itself; `append` keeps the segments within it.
    pub(super) fn make_room(&mut self, size: usize, now: Now) -> Result<(), StoreError> {
        // `heap_bytes` is kept current by every change to what `heap_now` counts.
        debug_assert_eq!(self.stats.heap_bytes, self.heap_now());
        let limit = (self.config.memory_limit_bytes as u64).max(self.stats.heap_bytes);
        let table_growth = if self.table.num_buckets() == 0 {
            Table::bytes_for(1)
        } else {
            0
        };
        while self.stats.heap_bytes + (table_growth + size) as u64 > limit {
            if !self.evict_one(now, Victim::Store) {
                return Err(StoreError::OutOfMemory);
            }
        }
        Ok(())
    }

    /// Records the eviction of the live item of entry `e`: `evicted_nonzero`, `evicted_time`
    /// and the eviction log.
    pub(super) fn log_eviction(&mut self, e: u64, now: Now) {
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
    pub(super) fn reclaim_dead_segment(&mut self, now: Now, why: Removal) -> bool {
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
    pub(super) fn reclaim_segment(&mut self, id: usize, why: Removal) {
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
                    Some(loc) => self.remove_at(loc, hash, why),
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
    ///
    /// `heap_bytes` follows each step as it is taken: the hand's advance takes the bytes it
    /// passes off the heap, a kept item adds its bytes where it lands, and a segment sealed,
    /// taken back or passed over recounts the heap ([`Shard::refresh_heap`]).
    pub(super) fn evict_one(&mut self, now: Now, victim: Victim) -> bool {
        let done = self.evict_step(now, victim);
        debug_assert_eq!(self.stats.heap_bytes, self.heap_now());
        done
    }

    /// [`Shard::evict_one`] but for its check of `heap_bytes`.
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
            let hash = match self.segs.hand_hash.take() {
                _ if deleted => 0,
                Some((at, hashed_at, hash)) if (at, hashed_at) == (id, offset) => {
                    debug_assert_eq!(hash, self.hasher.hash_one(item.key()));
                    hash
                }
                _ => self.hasher.hash_one(item.key()),
            };
            self.segs.segs[id].hand = offset + size;
            // Passed by the hand and not yet kept: off the heap (`heap_now`'s `passed`).
            self.stats.heap_bytes -= size as u64;
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
            self.remove_at(loc, hash, why);
            self.look_ahead(id);
            return true;
        }
    }

    /// Hashes the key of the live item the hand now points at in segment `id`, if any, and
    /// prefetches its bucket: the next eviction, a store later, then finds the bucket in the
    /// cache instead of waiting for it (17 % of an eviction's samples did).
    fn look_ahead(&mut self, id: usize) {
        let seg = &self.segs.segs[id];
        if seg.state != State::Sealed || seg.hand >= seg.write {
            return;
        }
        let item = seg.item(seg.hand);
        if item.deleted() {
            return;
        }
        let hash = self.hasher.hash_one(item.key());
        self.table.prefetch(hash);
        self.segs.hand_hash = Some((id, seg.hand, hash));
    }

    /// Whether the eviction hand, making room for a store, keeps the live item of entry `e`:
    /// if it was read since it was written or last kept (clock counter above 0), or while
    /// more than [`DEAD_SHARE`] of the segment memory is dead bytes (deleted or overwritten
    /// items), which a pass over segments takes back without evicting anything.
    pub(super) fn keeps(&self, e: u64) -> bool {
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
    pub(super) fn keep_item(&mut self, id: usize, loc: Loc, offset: usize, size: usize) -> bool {
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
            // Written into the open segment's room: on the heap again.
            self.stats.heap_bytes += size as u64;
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
        // Kept: no longer among the bytes the hand passed.
        self.stats.heap_bytes += size as u64;
        ItemMut::new(&mut seg.data[to..]).age();
        self.table.set(loc, table::moved(e, id, to));
        false
    }

    /// With eviction off, whether the hand may compact: pass over the oldest segments keeping
    /// every live item, which turns their dead bytes into room. Only while more than a
    /// segment's worth of bytes is dead: each pass drops the dead bytes of the segment it
    /// passed, so the hand stops within one turn of the FIFO.
    pub(super) fn compacts(&self) -> bool {
        self.segs.dead_bytes > self.segment_size
    }

    /// Ends the eviction hand's pass over the oldest segment `id`: without kept items it is
    /// taken back; with some, its kept part becomes its content and it goes to the FIFO's
    /// tail. Of it and its class's open segment, the one with more unwritten room stays (or
    /// becomes) the open one and the other is sealed, so what a seal leaves unwritten is
    /// less than an item the open segment could not take.
    pub(super) fn end_pass(&mut self, id: usize) {
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
    pub(super) fn reclaim_one_dead(&mut self, now: Now, victim: Victim) -> bool {
        let buckets = self.table.num_buckets();
        if buckets > 0 {
            for _ in 0..buckets.min(NO_EVICT_SCAN) {
                let index = self.scan_hand % buckets;
                let dead = self
                    .table
                    .bucket(index)
                    .find(|&(_, e)| self.liveness(e, now) != Liveness::Live);
                if let Some((loc, e)) = dead {
                    self.remove_at(loc, self.hash_of(e), Removal::Reclaimed);
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
}
