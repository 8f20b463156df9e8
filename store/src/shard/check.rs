//! The accounting invariants the tests check after every operation, and test-only access to
//! the shard's insides.

use super::*;

impl Shard {
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
        self.table.check_displaced(|e| self.hash_of(e));
        if let Some((id, offset, hash)) = self.segs.hand_hash {
            let seg = &self.segs.segs[id];
            assert_ne!(seg.state, State::Free, "the hand's hash in a free segment");
            assert!(
                offset < seg.write,
                "the hand's hash past the segment's items"
            );
            let item = seg.item(offset);
            assert!(
                item.deleted() || self.hasher.hash_one(item.key()) == hash,
                "the hand's hash is its item's"
            );
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

    /// How many times the table's load called for growing and the table kept its size, the
    /// bigger one not being worth its memory beside the items (tests only).
    #[cfg(test)]
    pub(crate) fn rebuilds(&self) -> usize {
        self.capped
    }

    /// How many buckets past its home a lookup reads, on average over the table's buckets
    /// (tests only).
    #[cfg(test)]
    pub(crate) fn mean_reach(&self) -> f64 {
        let buckets = self.table.num_buckets();
        let sum: usize = (0..buckets).map(|b| self.table.reach(b)).sum();
        sum as f64 / buckets.max(1) as f64
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
