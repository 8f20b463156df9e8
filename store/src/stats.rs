//! Per-shard counters, named as memcached's `stats` names them.

/// Counters of one shard, with memcached's `stats` names.
///
/// Read with [`Shard::stats`](crate::Shard::stats); sum shards with [`ShardStats::add`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Items held now (including dead ones not yet reclaimed).
    pub curr_items: u64,
    /// Of those, items with an expiry (Redis's `expires` in `INFO keyspace`).
    pub curr_expiring: u64,
    /// Items stored since start (every successful store, incr/decr-create included).
    pub total_items: u64,
    /// Sum of [`item_size`](crate::item_size) over the items held.
    pub bytes: u64,
    /// The part of the budget in use: segment bytes written (live items, dead ones not yet
    /// taken back, unwritten tails of sealed segments) plus the hash table; never above
    /// `limit_maxbytes` (but for a budget lowered at run time, until the shard shrinks).
    pub heap_bytes: u64,
    /// Live items removed to make room.
    pub evictions: u64,
    /// Evicted items that were never fetched (get/touch).
    pub evicted_unfetched: u64,
    /// Evicted items that had an expiry time (memcached's `evicted_nonzero`).
    pub evicted_nonzero: u64,
    /// Seconds between the last access of the most recently evicted item and its eviction
    /// (memcached's `evicted_time`); summed shards keep the largest.
    pub evicted_time: u64,
    /// Stores that found no room: eviction is off (`-M`) and no dead item was near the clock
    /// hand (memcached's `outofmemory`).
    pub outofmemory: u64,
    /// Reclaimed items (expired or flushed) that were never fetched.
    pub expired_unfetched: u64,
    /// Dead items (expired or flushed) whose memory the store took back: on access, by the sweep, by the eviction hand, or a segment at a time.
    pub reclaimed: u64,
    /// Dead items the LRU crawler ([`Shard::crawl`](crate::Shard::crawl)) took back.
    pub crawler_reclaimed: u64,
    /// Items the LRU crawler looked at.
    pub crawler_items_checked: u64,
    /// Live items removed to free a page of memory for `slabs reassign`
    /// ([`Shard::release`](crate::Shard::release)), not counted in `evictions`.
    pub slab_reassign_evictions_nomem: u64,
    /// `get` calls that returned an item.
    pub get_hits: u64,
    /// `get` calls that returned nothing (includes `get_expired` and `get_flushed`).
    pub get_misses: u64,
    /// `get` calls that found the key expired.
    pub get_expired: u64,
    /// `get` calls that found the key invalidated by `flush_all`.
    pub get_flushed: u64,
    /// `delete` calls that removed an item.
    pub delete_hits: u64,
    /// `delete` calls on a missing key.
    pub delete_misses: u64,
    /// Successful `incr` on an existing item.
    pub incr_hits: u64,
    /// `incr` on a missing key (whether or not it was then created).
    pub incr_misses: u64,
    /// Successful `decr` on an existing item.
    pub decr_hits: u64,
    /// `decr` on a missing key (whether or not it was then created).
    pub decr_misses: u64,
    /// CAS stores that matched and stored.
    pub cas_hits: u64,
    /// CAS stores on a missing key.
    pub cas_misses: u64,
    /// CAS stores whose CAS did not match.
    pub cas_badval: u64,
    /// `touch` calls that found the key.
    pub touch_hits: u64,
    /// `touch` calls on a missing key.
    pub touch_misses: u64,
    /// The memory budget (`memory_limit_bytes`).
    pub limit_maxbytes: u64,
}

impl ShardStats {
    /// Adds every counter of `other` into `self` (for the server-wide `stats`).
    pub fn add(&mut self, other: &ShardStats) {
        self.curr_items += other.curr_items;
        self.curr_expiring += other.curr_expiring;
        self.total_items += other.total_items;
        self.bytes += other.bytes;
        self.heap_bytes += other.heap_bytes;
        self.evictions += other.evictions;
        self.evicted_unfetched += other.evicted_unfetched;
        self.evicted_nonzero += other.evicted_nonzero;
        self.evicted_time = self.evicted_time.max(other.evicted_time);
        self.outofmemory += other.outofmemory;
        self.expired_unfetched += other.expired_unfetched;
        self.reclaimed += other.reclaimed;
        self.crawler_reclaimed += other.crawler_reclaimed;
        self.crawler_items_checked += other.crawler_items_checked;
        self.slab_reassign_evictions_nomem += other.slab_reassign_evictions_nomem;
        self.get_hits += other.get_hits;
        self.get_misses += other.get_misses;
        self.get_expired += other.get_expired;
        self.get_flushed += other.get_flushed;
        self.delete_hits += other.delete_hits;
        self.delete_misses += other.delete_misses;
        self.incr_hits += other.incr_hits;
        self.incr_misses += other.incr_misses;
        self.decr_hits += other.decr_hits;
        self.decr_misses += other.decr_misses;
        self.cas_hits += other.cas_hits;
        self.cas_misses += other.cas_misses;
        self.cas_badval += other.cas_badval;
        self.touch_hits += other.touch_hits;
        self.touch_misses += other.touch_misses;
        self.limit_maxbytes += other.limit_maxbytes;
    }

    /// The counters as `(memcached name, value)` pairs, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("curr_items", self.curr_items),
            ("curr_expiring", self.curr_expiring),
            ("total_items", self.total_items),
            ("bytes", self.bytes),
            ("heap_bytes", self.heap_bytes),
            ("evictions", self.evictions),
            ("evicted_unfetched", self.evicted_unfetched),
            ("evicted_nonzero", self.evicted_nonzero),
            ("evicted_time", self.evicted_time),
            ("outofmemory", self.outofmemory),
            ("expired_unfetched", self.expired_unfetched),
            ("reclaimed", self.reclaimed),
            ("crawler_reclaimed", self.crawler_reclaimed),
            ("crawler_items_checked", self.crawler_items_checked),
            (
                "slab_reassign_evictions_nomem",
                self.slab_reassign_evictions_nomem,
            ),
            ("get_hits", self.get_hits),
            ("get_misses", self.get_misses),
            ("get_expired", self.get_expired),
            ("get_flushed", self.get_flushed),
            ("delete_hits", self.delete_hits),
            ("delete_misses", self.delete_misses),
            ("incr_hits", self.incr_hits),
            ("incr_misses", self.incr_misses),
            ("decr_hits", self.decr_hits),
            ("decr_misses", self.decr_misses),
            ("cas_hits", self.cas_hits),
            ("cas_misses", self.cas_misses),
            ("cas_badval", self.cas_badval),
            ("touch_hits", self.touch_hits),
            ("touch_misses", self.touch_misses),
            ("limit_maxbytes", self.limit_maxbytes),
        ]
        .into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_sums_every_field() {
        let mut a = ShardStats::default();
        let mut b = ShardStats::default();
        // Give every field a distinct value through the name list.
        let names: Vec<&str> = b.iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), 31);
        b = ShardStats {
            curr_items: 1,
            curr_expiring: 27,
            total_items: 2,
            bytes: 3,
            heap_bytes: 4,
            evictions: 5,
            evicted_unfetched: 6,
            evicted_nonzero: 25,
            evicted_time: 0,
            outofmemory: 26,
            expired_unfetched: 7,
            reclaimed: 8,
            crawler_reclaimed: 28,
            crawler_items_checked: 29,
            slab_reassign_evictions_nomem: 30,
            get_hits: 9,
            get_misses: 10,
            get_expired: 11,
            get_flushed: 12,
            delete_hits: 13,
            delete_misses: 14,
            incr_hits: 15,
            incr_misses: 16,
            decr_hits: 17,
            decr_misses: 18,
            cas_hits: 19,
            cas_misses: 20,
            cas_badval: 21,
            touch_hits: 22,
            touch_misses: 23,
            limit_maxbytes: 24,
        };
        a.add(&b);
        a.add(&b);
        for ((name, va), (_, vb)) in a.iter().zip(b.iter()) {
            if name == "evicted_time" {
                continue;
            }
            assert_eq!(va, 2 * vb, "{name}");
            assert_ne!(vb, 0, "{name}");
        }
        // A time, not a count: the largest is kept.
        let (mut x, y) = (ShardStats::default(), ShardStats::default());
        x.evicted_time = 7;
        x.add(&ShardStats {
            evicted_time: 3,
            ..y.clone()
        });
        assert_eq!(x.evicted_time, 7);
        x.add(&ShardStats {
            evicted_time: 9,
            ..y
        });
        assert_eq!(x.evicted_time, 9);
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
    }
}
