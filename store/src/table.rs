//! The hash table: 64-byte buckets of seven 8-byte entries, probed linearly bucket by bucket.
//!
//! An entry is `tag: 16 | segment + 1: 24 | offset: 24` (0 = empty): the top 16 bits of the
//! key's hash (1 where they are 0, so that no tag is 0 and an empty slot matches none), and
//! where the item lies. A key's position is the low 32 bits of its hash, and its home bucket
//! is its position scaled to the number of buckets (`position * buckets >> 32`: one
//! multiplication, any number of buckets, so the table can grow by less than a doubling when
//! the budget is nearly all items). An entry that finds its home full goes to the first
//! bucket after it with a free slot, at most [`MAX_PROBE`] buckets on, and the home bucket's
//! eighth word counts, per distance, the entries homed there that lie that far on (`reach` is
//! the farthest distance counted), so a lookup reads the home bucket and, only while entries
//! homed there lie past it, the few after it. A miss thus usually costs one cache line; a hit
//! one line and the item's. The counts go down as those entries are removed, so a table with
//! steady churn (a full cache, every store evicting) does not drift towards lookups that read
//! [`MAX_PROBE`] lines: a count is two bits, exact until it reaches three, where it stays
//! until a rebuild starts the counts anew (the reach is then an upper bound, never short).
//!
//! Entries never move while the table keeps its size: an insert fills a free slot, a removal
//! clears one. A walk over bucket indexes in slices therefore sees every entry that stays in
//! the table for the whole walk, whatever is inserted or removed between the slices; only a
//! resize (a rebuild at another size) moves entries. Homes grow with positions, so a walk
//! can also go by ranges of positions ([`Table::first_position`]), which no resize changes.

/// Entries per bucket.
pub(crate) const SLOTS: usize = 7;
/// How many buckets past its home an entry may lie.
pub(crate) const MAX_PROBE: usize = 32;

const SEGMENT_SHIFT: u32 = 24;
const TAG_SHIFT: u32 = 48;
const FIELD_MASK: u64 = (1 << 24) - 1;
/// Largest segment id an entry can name.
pub(crate) const MAX_SEGMENTS: usize = (1 << 24) - 2;
/// Largest offset in a segment an entry can name.
pub(crate) const MAX_OFFSET: usize = (1 << 24) - 1;

/// One cache line: seven entries and, for each distance `d` from 1 to [`MAX_PROBE`], how many
/// entries homed here lie `d` buckets on (two bits at bit `2 * (d - 1)`, saturating at 3).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Bucket {
    entries: [u64; SLOTS],
    displaced: u64,
}

// Two bits of `displaced` per distance.
const _: () = assert!(2 * MAX_PROBE <= u64::BITS as usize);

/// The count for distance `step` (1 to [`MAX_PROBE`]) in a `displaced` word: its lowest bit.
#[inline(always)]
const fn count_bit(step: usize) -> u64 {
    1 << (2 * (step - 1))
}

/// The farthest distance with a count in a `displaced` word (0: none).
#[inline(always)]
const fn farthest(displaced: u64) -> usize {
    (u64::BITS - displaced.leading_zeros()).div_ceil(2) as usize
}

/// An entry's place: its bucket and slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc {
    pub bucket: usize,
    pub slot: usize,
}

/// The entry for the item of `hash` at `offset` in segment `segment`.
#[inline]
pub(crate) fn entry(hash: u64, segment: usize, offset: usize) -> u64 {
    debug_assert!(segment <= MAX_SEGMENTS && offset <= MAX_OFFSET);
    tag(hash) << TAG_SHIFT | ((segment as u64 + 1) << SEGMENT_SHIFT) | offset as u64
}

/// Positions run from 0 to this, exclusive.
pub(crate) const POSITIONS: u64 = 1 << 32;

/// Where `hash` lies in the table's order: its low 32 bits (the tag is the top 16).
#[inline(always)]
pub(crate) fn position(hash: u64) -> u64 {
    hash & (POSITIONS - 1)
}

/// The home of `position` (below [`POSITIONS`]) among `buckets` buckets (below 2^32): exact
/// in 64 bits, as both factors are below 2^32.
#[inline(always)]
fn home_in(position: u64, buckets: usize) -> usize {
    ((position * buckets as u64) >> 32) as usize
}

/// The smallest position whose home among `buckets` buckets is `bucket` or after it.
fn first_in(bucket: usize, buckets: usize) -> u64 {
    ((bucket as u64) << 32).div_ceil(buckets as u64)
}

/// The tag of `hash`'s entries: its top 16 bits, 1 in place of 0.
#[inline(always)]
fn tag(hash: u64) -> u64 {
    (hash >> TAG_SHIFT).max(1)
}

/// The segment an entry names.
#[inline]
pub(crate) fn segment_of(entry: u64) -> usize {
    (((entry >> SEGMENT_SHIFT) & FIELD_MASK) - 1) as usize
}

/// The offset in its segment an entry names.
#[inline]
pub(crate) fn offset_of(entry: u64) -> usize {
    (entry & FIELD_MASK) as usize
}

/// The same entry, pointing at another place.
#[inline]
pub(crate) fn moved(entry: u64, segment: usize, offset: usize) -> u64 {
    (entry >> TAG_SHIFT) << TAG_SHIFT | ((segment as u64 + 1) << SEGMENT_SHIFT) | offset as u64
}

/// Whether `entry` is one of `hash`'s (false for an empty slot: no tag is 0).
#[cfg(test)]
fn same_tag(entry: u64, hash: u64) -> bool {
    entry >> TAG_SHIFT == tag(hash)
}

/// Slot `i`'s bit in [`Bucket::matches`]'s answer is bit `4 * i + 3`: shift the bit's index
/// right by this to get the slot.
const MATCH_SLOT_SHIFT: u32 = 2;

impl Bucket {
    /// The slots holding an entry with `hash`'s tag, as bits (slot `i` is bit `4 * i + 3`):
    /// computed for all seven without a branch, so that a lookup branches only on the slots
    /// that match (nearly always one for a hit, none for a miss), not on where the match
    /// lies.
    #[inline(always)]
    fn matches(&self, hash: u64) -> u32 {
        self.with_tag(tag(hash))
    }

    /// The empty slots, as [`Bucket::matches`] gives its slots: those whose tag is 0, which
    /// no entry's is.
    #[inline(always)]
    fn free(&self) -> u32 {
        self.with_tag(0)
    }

    /// The slots whose top 16 bits are `tag`, as bits (slot `i` is bit `4 * i + 3`). With
    /// SSE2 (every x86-64 processor), four compares of eight 16-bit lanes, two entries each,
    /// packed into one mask.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[inline(always)]
    #[allow(unsafe_code)]
    fn with_tag(&self, tag: u64) -> u32 {
        use core::arch::x86_64::{
            __m128i, _mm_cmpeq_epi16, _mm_movemask_epi8, _mm_packs_epi16, _mm_set_epi64x,
            _mm_set1_epi16,
        };
        let e = &self.entries;
        // SAFETY: these intrinsics only need SSE2, which this build enables for all of its
        // code (the `target_feature = "sse2"` above; x86-64 always has it). They take no
        // pointers: the entries are passed by value.
        let lanes = unsafe {
            let tag = _mm_set1_epi16(tag as u16 as i16);
            // 16 set bits for each 16-bit lane equal to the tag; the tag is the fourth lane
            // of each entry.
            let pair = |high: u64, low: u64| -> __m128i {
                _mm_cmpeq_epi16(_mm_set_epi64x(high as i64, low as i64), tag)
            };
            // A byte per lane: slots 0-3, then 4-6 and an eighth of zeros, which the mask
            // below drops (it would match tag 0).
            let first = _mm_packs_epi16(pair(e[1], e[0]), pair(e[3], e[2]));
            let rest = _mm_packs_epi16(pair(e[5], e[4]), pair(0, e[6]));
            _mm_movemask_epi8(first) as u32 | (_mm_movemask_epi8(rest) as u32) << 16
        };
        lanes & 0x0888_8888
    }

    /// [`Bucket::with_tag`], one slot at a time.
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    #[inline(always)]
    fn with_tag(&self, tag: u64) -> u32 {
        self.with_tag_one_by_one(tag)
    }

    /// [`Bucket::with_tag`], one slot at a time.
    #[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse2"))))]
    #[inline(always)]
    fn with_tag_one_by_one(&self, tag: u64) -> u32 {
        let mut bits = 0;
        for (slot, &e) in self.entries.iter().enumerate() {
            bits |= u32::from(e >> TAG_SHIFT == tag) << (4 * slot + 3);
        }
        bits
    }
}

/// The table: any number of buckets below 2^32 (0 before the first insert).
#[derive(Debug, Default)]
pub(crate) struct Table {
    buckets: Box<[Bucket]>,
    len: usize,
}

impl Table {
    /// A table of `buckets` buckets (below 2^32, or 0).
    pub(crate) fn with_buckets(buckets: usize) -> Table {
        debug_assert!(buckets < 1 << 32);
        Table {
            buckets: vec![Bucket::default(); buckets].into_boxed_slice(),
            len: 0,
        }
    }

    /// Bytes a table of `buckets` buckets allocates.
    pub(crate) const fn bytes_for(buckets: usize) -> usize {
        buckets * size_of::<Bucket>()
    }

    /// Bytes this table allocates.
    pub(crate) fn bytes(&self) -> usize {
        Self::bytes_for(self.buckets.len())
    }

    pub(crate) fn num_buckets(&self) -> usize {
        self.buckets.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The home bucket of `hash`: its position scaled to the buckets (Lemire's "fast
    /// range"), so that homes never fall as positions grow.
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        self.home_of_position(position(hash))
    }

    /// The bucket that is home to `position` (below [`POSITIONS`]).
    #[inline(always)]
    pub(crate) fn home_of_position(&self, position: u64) -> usize {
        home_in(position, self.buckets.len())
    }

    /// The smallest position homed in `bucket` or after it ([`POSITIONS`] for `bucket` equal
    /// to the number of buckets).
    pub(crate) fn first_position(&self, bucket: usize) -> u64 {
        first_in(bucket, self.buckets.len())
    }

    /// How far past `bucket` the entries homed there may lie, in buckets.
    pub(crate) fn reach(&self, bucket: usize) -> usize {
        farthest(self.buckets[bucket].displaced)
    }

    /// The bucket `step` after `home` (`step` below the number of buckets), wrapping around.
    #[inline]
    pub(crate) fn after(&self, home: usize, step: usize) -> usize {
        let bucket = home + step;
        if bucket >= self.buckets.len() {
            bucket - self.buckets.len()
        } else {
            bucket
        }
    }

    /// The first entry with `hash`'s tag for which `eq` holds.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(u64) -> bool) -> Option<Loc> {
        self.find_entry(hash, eq).map(|(loc, _)| loc)
    }

    /// Asks the CPU to bring `hash`'s home bucket into its cache without waiting for it, for
    /// a lookup that comes later.
    #[inline]
    #[allow(unsafe_code)]
    pub(crate) fn prefetch(&self, hash: u64) {
        let Some(bucket) = self.buckets.get(self.home(hash)) else {
            return;
        };
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: a prefetch is a hint: it reads nothing the program sees and never
            // faults; its address is a live bucket's. SSE, which it needs, is part of every
            // x86-64 processor.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>((bucket as *const Bucket).cast());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = bucket;
    }

    /// [`Table::find`], with the entry found.
    #[inline(always)]
    pub(crate) fn find_entry(
        &self,
        hash: u64,
        mut eq: impl FnMut(u64) -> bool,
    ) -> Option<(Loc, u64)> {
        // An empty table has no bucket, not even the home 0 it computes: `get` gives `None`.
        let home = self.home(hash);
        let first = self.buckets.get(home)?;
        if let Some(loc) = Self::find_in(first, home, hash, &mut eq) {
            return Some(loc);
        }
        for step in 1..=farthest(first.displaced) {
            let bucket = self.after(home, step);
            if let Some(loc) = Self::find_in(&self.buckets[bucket], bucket, hash, &mut eq) {
                return Some(loc);
            }
        }
        None
    }

    /// The first entry of bucket `bucket` (`b`) with `hash`'s tag for which `eq` holds.
    #[inline(always)]
    fn find_in(
        b: &Bucket,
        bucket: usize,
        hash: u64,
        eq: &mut impl FnMut(u64) -> bool,
    ) -> Option<(Loc, u64)> {
        let mut bits = b.matches(hash);
        while bits != 0 {
            let slot = (bits.trailing_zeros() >> MATCH_SLOT_SHIFT) as usize;
            let e = b.entries[slot];
            if eq(e) {
                return Some((Loc { bucket, slot }, e));
            }
            bits &= bits - 1;
        }
        None
    }

    #[inline]
    pub(crate) fn get(&self, loc: Loc) -> u64 {
        self.buckets[loc.bucket].entries[loc.slot]
    }

    /// The entry's own word, for a prefetch of its cache line.
    #[inline]
    pub(crate) fn entry_ref(&self, loc: Loc) -> &u64 {
        &self.buckets[loc.bucket].entries[loc.slot]
    }

    #[inline]
    pub(crate) fn set(&mut self, loc: Loc, entry: u64) {
        debug_assert!(entry != 0 && self.get(loc) != 0);
        self.buckets[loc.bucket].entries[loc.slot] = entry;
    }

    /// Puts `entry` (of `hash`) in the first free slot from its home bucket on; `None` when
    /// the [`MAX_PROBE`] buckets from its home are full (or the table has no bucket).
    pub(crate) fn insert(&mut self, hash: u64, entry: u64) -> Option<Loc> {
        if self.buckets.is_empty() {
            return None;
        }
        let home = self.home(hash);
        for step in 0..MAX_PROBE.min(self.buckets.len()) {
            let bucket = self.after(home, step);
            let free = self.buckets[bucket].free();
            if free != 0 {
                let slot = (free.trailing_zeros() >> MATCH_SLOT_SHIFT) as usize;
                self.buckets[bucket].entries[slot] = entry;
                if step > 0 {
                    let displaced = &mut self.buckets[home].displaced;
                    let bit = count_bit(step);
                    if (*displaced >> (2 * (step - 1))) & 3 < 3 {
                        *displaced += bit;
                    }
                }
                self.len += 1;
                return Some(Loc { bucket, slot });
            }
        }
        None
    }

    /// Clears a slot, whose entry is of `hash` (its home's count for the entry's distance
    /// goes down, unless saturated).
    pub(crate) fn remove(&mut self, loc: Loc, hash: u64) -> u64 {
        let e = core::mem::take(&mut self.buckets[loc.bucket].entries[loc.slot]);
        debug_assert!(e != 0);
        debug_assert_eq!(e >> TAG_SHIFT, tag(hash), "the entry is of this hash");
        self.len -= 1;
        let home = self.home(hash);
        let step = if loc.bucket >= home {
            loc.bucket - home
        } else {
            loc.bucket + self.buckets.len() - home
        };
        if step > 0 {
            debug_assert!(step < MAX_PROBE);
            let displaced = &mut self.buckets[home].displaced;
            let count = (*displaced >> (2 * (step - 1))) & 3;
            debug_assert!(
                count > 0,
                "an entry lies {step} buckets past its home uncounted"
            );
            if count == 1 || count == 2 {
                *displaced -= count_bit(step);
            }
        }
        e
    }

    /// The occupied slots of bucket `bucket`, with their entries.
    pub(crate) fn bucket(&self, bucket: usize) -> impl Iterator<Item = (Loc, u64)> + '_ {
        self.buckets[bucket]
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| **e != 0)
            .map(move |(slot, &e)| (Loc { bucket, slot }, e))
    }

    /// Every entry, in bucket order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = u64> + '_ {
        self.buckets
            .iter()
            .flat_map(|b| b.entries.iter().copied())
            .filter(|&e| e != 0)
    }

    /// The home bucket of `hash`, for the capped path (an insert that found no free slot).
    pub(crate) fn home_of(&self, hash: u64) -> usize {
        self.home(hash)
    }

    /// The address of `hash`'s home bucket (one cache line), for a prefetch; reads nothing.
    /// Null for a table without buckets.
    #[inline]
    pub(crate) fn home_address(&self, hash: u64) -> *const u8 {
        if self.buckets.is_empty() {
            return core::ptr::null();
        }
        core::ptr::from_ref(&self.buckets[self.home(hash)]).cast()
    }

    /// Asserts that each bucket's counts of displaced entries are what the table holds:
    /// exact below three (a saturated count stays three whatever is left). `hash_of` gives
    /// an entry's key's hash.
    #[cfg(test)]
    #[track_caller]
    pub(crate) fn check_displaced(&self, hash_of: impl Fn(u64) -> u64) {
        let n = self.buckets.len();
        let mut counts = vec![[0usize; MAX_PROBE]; n];
        for (bucket, b) in self.buckets.iter().enumerate() {
            for &e in b.entries.iter().filter(|&&e| e != 0) {
                let home = self.home(hash_of(e));
                let step = (bucket + n - home) % n;
                assert!(step < MAX_PROBE, "an entry {step} buckets past its home");
                counts[home][step] += 1;
            }
        }
        for (home, counts) in counts.iter().enumerate() {
            for (step, &count) in counts.iter().enumerate().skip(1) {
                let kept = (self.buckets[home].displaced >> (2 * (step - 1))) & 3;
                assert!(
                    kept == count as u64 || kept == 3,
                    "bucket {home} counts {kept} entries {step} buckets on, holds {count}"
                );
            }
        }
    }

    /// The buckets an insert of `hash` may place its entry in, home first: a slot freed in
    /// any of them takes the entry.
    pub(crate) fn probe_buckets(&self, hash: u64) -> impl Iterator<Item = usize> + '_ {
        let home = self.home(hash);
        (0..MAX_PROBE.min(self.buckets.len())).map(move |step| self.after(home, step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_matches_the_same_slots_all_at_once_as_one_by_one() {
        // Buckets of entries with few distinct tags (so that several slots often match),
        // empty slots and counts in the eighth word; every tag present and some absent.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..10_000 {
            let mut b = Bucket {
                displaced: next(),
                ..Bucket::default()
            };
            for slot in 0..SLOTS {
                let r = next();
                if r % 5 != 0 {
                    let hash = (r % 3 + 1) << TAG_SHIFT | (r >> 20) & 0xff_ffff;
                    b.entries[slot] = entry(hash, (r >> 8) as usize & 0xfff, r as usize & 0xfff);
                }
            }
            for probe in [1, 2, 3, 4, 0, next() >> TAG_SHIFT] {
                let hash = probe << TAG_SHIFT;
                let bits = b.matches(hash);
                assert_eq!(
                    bits,
                    b.with_tag_one_by_one(tag(hash)),
                    "{b:?} for tag {probe}"
                );
                for slot in 0..SLOTS {
                    let e = b.entries[slot];
                    let bit = bits >> (4 * slot + 3) & 1 == 1;
                    assert_eq!(bit, e != 0 && same_tag(e, hash), "slot {slot} of {b:?}");
                }
            }
            let free = b.free();
            assert_eq!(free, b.with_tag_one_by_one(0), "{b:?}");
            for slot in 0..SLOTS {
                let bit = free >> (4 * slot + 3) & 1 == 1;
                assert_eq!(bit, b.entries[slot] == 0, "slot {slot} of {b:?}");
            }
        }
    }

    #[test]
    fn a_bucket_is_one_cache_line() {
        assert_eq!(size_of::<Bucket>(), 64);
        assert_eq!(align_of::<Bucket>(), 64);
    }

    #[test]
    fn entries_pack_tag_segment_and_offset() {
        let hash = 0xabcd_0000_0000_0005;
        let e = entry(hash, MAX_SEGMENTS, MAX_OFFSET);
        assert_eq!((segment_of(e), offset_of(e)), (MAX_SEGMENTS, MAX_OFFSET));
        assert!(same_tag(e, hash) && !same_tag(e, hash ^ (1 << 63)));
        let zero = entry(0, 0, 0);
        assert_ne!(zero, 0, "segment 0 offset 0 is not the empty entry");
        let m = moved(e, 3, 9);
        assert_eq!((segment_of(m), offset_of(m)), (3, 9));
        assert!(same_tag(m, hash), "a move keeps the tag");
    }

    #[test]
    fn a_full_home_spills_to_the_next_buckets_and_lookups_follow() {
        let mut t = Table::with_buckets(8);
        // Every hash homes in bucket 2; distinct tags tell them apart.
        let hash = |i: u64| (i << TAG_SHIFT) | (2 << 29);
        let mut locs = Vec::new();
        for i in 1..=20 {
            locs.push(t.insert(hash(i), entry(hash(i), 0, i as usize)).unwrap());
        }
        assert_eq!(t.len(), 20);
        assert_eq!(locs[0].bucket, 2);
        assert_eq!(
            locs[19].bucket, 4,
            "20 entries fill buckets 2, 3 and part of 4"
        );
        for i in 1..=20 {
            let loc = t.find(hash(i), |e| offset_of(e) == i as usize).unwrap();
            assert_eq!(loc, locs[i as usize - 1]);
        }
        // Entries stay where they are when others go.
        t.remove(locs[0], hash(1));
        assert!(t.find(hash(1), |_| true).is_none());
        assert_eq!(t.find(hash(20), |_| true), Some(locs[19]));
        assert_eq!(t.insert(hash(21), entry(hash(21), 0, 21)), Some(locs[0]));
    }

    #[test]
    fn the_reach_comes_back_as_spilled_entries_go() {
        let mut t = Table::with_buckets(64);
        // Homes by bucket; spills from 62 wrap past the last bucket.
        let hash = |home: u64, i: u64| (i << TAG_SHIFT) | (home << 26);
        // Buckets 63, 0 and 1 hold six entries of their own each: one free slot.
        for home in [63, 0, 1] {
            for i in 1..SLOTS as u64 {
                let loc = t.insert(hash(home, i), entry(hash(home, i), 0, 0)).unwrap();
                assert_eq!(loc.bucket as u64, home);
            }
        }
        let mut locs = Vec::new();
        for i in 1..=(SLOTS + 3) as u64 {
            locs.push(
                t.insert(hash(62, i), entry(hash(62, i), 0, i as usize))
                    .unwrap(),
            );
        }
        let spilled: Vec<usize> = locs[SLOTS..].iter().map(|l| l.bucket).collect();
        assert_eq!(spilled, [63, 0, 1], "one entry in each free slot, wrapping");
        assert_eq!(t.reach(62), 3);
        assert_eq!(
            t.reach(63),
            0,
            "entries homed elsewhere count for their own home"
        );
        // The farthest go first: the reach follows the farthest left, and the rest are found.
        for (step, i) in [(2, SLOTS + 3), (1, SLOTS + 2), (0, SLOTS + 1)] {
            t.remove(locs[i - 1], hash(62, i as u64));
            assert_eq!(t.reach(62), step);
            for j in 1..i {
                let loc = t.find(hash(62, j as u64), |e| offset_of(e) == j).unwrap();
                assert_eq!(loc, locs[j - 1]);
            }
        }
        // Removing one in the middle leaves the farthest counted.
        let near = t.insert(hash(62, 20), entry(hash(62, 20), 0, 20)).unwrap();
        let far = t.insert(hash(62, 21), entry(hash(62, 21), 0, 21)).unwrap();
        assert_eq!((near.bucket, far.bucket, t.reach(62)), (63, 0, 2));
        t.remove(near, hash(62, 20));
        assert_eq!(t.reach(62), 2);
        assert_eq!(t.find(hash(62, 21), |_| true), Some(far));
        let hash = |i: u64| hash(62, i);
        // A count of three or more stays: four entries of one home at one distance.
        let mut t = Table::with_buckets(64);
        let mut locs = Vec::new();
        for i in 1..=(SLOTS + 4) as u64 {
            locs.push(t.insert(hash(i), entry(hash(i), 0, i as usize)).unwrap());
        }
        for (n, loc) in locs.iter().enumerate().skip(SLOTS) {
            t.remove(*loc, hash(n as u64 + 1));
        }
        assert_eq!(t.reach(62), 1, "a saturated count is never taken down");
        for i in (SLOTS as u64 + 1)..=(SLOTS as u64 + 2) {
            t.insert(hash(i), entry(hash(i), 0, i as usize)).unwrap();
        }
        assert_eq!(t.reach(62), 1);
    }

    #[test]
    fn homes_grow_with_positions_and_first_positions_bound_them() {
        for buckets in [1usize, 2, 3, 7, 8, 81_920, 98_304, 1 << 20, (1 << 32) - 1] {
            let mut last = 0;
            for p in [
                0,
                1,
                2,
                0x8000_0000,
                0xdead_beef,
                POSITIONS - 2,
                POSITIONS - 1,
            ] {
                let h = home_in(p, buckets);
                assert_eq!(h as u128, (u128::from(p) * buckets as u128) >> 32);
                assert!(h >= last && h < buckets, "{p} in {buckets}");
                last = h;
                assert!(
                    first_in(h, buckets) <= p && p < first_in(h + 1, buckets),
                    "{p} in {buckets}"
                );
            }
            assert_eq!(first_in(0, buckets), 0);
            assert_eq!(first_in(buckets, buckets), POSITIONS);
        }
        let t = Table::with_buckets(98_304);
        for p in [0, 1, 12_345_678, 0x8000_0000, POSITIONS - 1] {
            let h = t.home_of_position(p);
            assert_eq!(
                t.home(p | 0xffff_0000_0000_0000),
                h,
                "the tag plays no part"
            );
            assert!(t.first_position(h) <= p && p < t.first_position(h + 1));
        }
        assert_eq!(t.first_position(98_304), POSITIONS);
    }

    #[test]
    fn a_full_home_wraps_past_the_last_bucket_of_a_table_of_any_size() {
        let mut t = Table::with_buckets(5);
        // Every hash homes in bucket 4, the last; 10 entries fill it and spill into bucket 0.
        let hash = |i: u64| (i << TAG_SHIFT) | (POSITIONS - 1);
        for i in 1..=10 {
            let loc = t.insert(hash(i), entry(hash(i), 0, i as usize)).unwrap();
            assert_eq!(loc.bucket, if i <= 7 { 4 } else { 0 });
        }
        for i in 1..=10 {
            assert!(t.find(hash(i), |e| offset_of(e) == i as usize).is_some());
        }
    }

    #[test]
    fn an_insert_gives_up_after_max_probe_buckets() {
        let mut t = Table::with_buckets(64);
        let hash = |i: u64| (i << TAG_SHIFT) | 5;
        for i in 1..=(MAX_PROBE * SLOTS) as u64 {
            assert!(t.insert(hash(i), entry(hash(i), 0, 0)).is_some());
        }
        assert_eq!(t.insert(hash(999), entry(hash(999), 0, 0)), None);
        assert!(
            Table::default().insert(1, 1).is_none(),
            "no bucket, no slot"
        );
    }
}
