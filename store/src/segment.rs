//! Segments: fixed-size buffers that items are appended to, and the FIFO they are evicted in.
//!
//! A segment is written from its start to its end and never rewritten in the middle, except
//! in place by an operation that keeps an item's length (an overwrite of the same length,
//! `incr`, `touch`, the marks). An item that is deleted, overwritten by a value of another
//! length, or moved by the eviction hand is marked deleted where it lies: its bytes are dead
//! until the segment is taken back as a whole.

use std::collections::VecDeque;

use crate::expiry::{Deadline, Now};
use crate::item::{ItemRef, MIN_HEADER_LEN};

/// Expiry classes: items are appended to the open segment of their class, so that a segment
/// holds items that die at about the same time and is taken back at once when they have.
/// Class 0 never expires; class `c > 0` holds items with at most `CLASS_LIMIT_SECS[c - 1]`
/// seconds left (the last one, any longer time).
pub(crate) const CLASSES: usize = 7;
const CLASS_LIMIT_SECS: [u64; CLASSES - 2] = [10, 60, 600, 3600, 86_400];

/// The expiry class of an item with `deadline`, stored at `now`.
pub(crate) fn class_of(deadline: Deadline, now: Now) -> usize {
    if deadline == Deadline::NEVER {
        return 0;
    }
    let left_secs = deadline.millis().saturating_sub(now.millis()) / 1000;
    1 + CLASS_LIMIT_SECS
        .iter()
        .position(|&limit| left_secs <= limit)
        .unwrap_or(CLASSES - 2)
}

/// What a segment is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Holds no item; its buffer, if any, waits to be reused.
    Free,
    /// Its class's open segment: stores append to it.
    Open,
    /// Written to the end (or closed by a flush); only read, updated in place, and evicted.
    Sealed,
}

/// One segment.
#[derive(Debug)]
pub(crate) struct Segment {
    /// The bytes; empty while the segment is free and holds no buffer.
    pub data: Box<[u8]>,
    /// Bytes written (the next item goes here).
    pub write: usize,
    /// Items written here that are neither deleted nor moved.
    pub live_items: usize,
    /// Their bytes.
    pub live_bytes: usize,
    /// The flush generation the segment was opened in: all its items belong to it.
    pub generation: u32,
    /// The latest deadline of its items, in unix milliseconds: `u64::MAX` once an item
    /// that never expires was written, 0 while empty.
    pub last_deadline_ms: u64,
    /// The eviction hand's place in this segment: items before it were looked at.
    pub hand: usize,
    /// The end of the items the hand kept (moved down to the segment's start) in its pass.
    pub keep: usize,
    pub state: State,
    /// The expiry class it was opened for.
    pub class: usize,
    /// When it last joined the FIFO's tail, counted in joins: a lower number is nearer the
    /// eviction hand.
    pub queued: u64,
}

impl Segment {
    fn empty() -> Segment {
        Segment {
            data: Box::default(),
            write: 0,
            live_items: 0,
            live_bytes: 0,
            generation: 0,
            last_deadline_ms: 0,
            hand: 0,
            keep: 0,
            state: State::Free,
            class: 0,
            queued: 0,
        }
    }

    /// Bytes still free at the end.
    pub(crate) fn room(&self) -> usize {
        self.data.len() - self.write
    }

    /// The item at `offset`.
    #[inline]
    pub(crate) fn item(&self, offset: usize) -> ItemRef<'_> {
        ItemRef::new(&self.data[offset..])
    }

    /// Records a deadline of an item written or changed here.
    pub(crate) fn note_deadline(&mut self, deadline: Deadline) {
        let ms = if deadline == Deadline::NEVER {
            u64::MAX
        } else {
            deadline.millis()
        };
        self.last_deadline_ms = self.last_deadline_ms.max(ms);
    }

    /// Whether every item written here has expired by `now` (nothing written yet counts as
    /// not expired).
    pub(crate) fn expired(&self, now: Now) -> bool {
        self.last_deadline_ms != 0
            && self.last_deadline_ms != u64::MAX
            && now.millis() >= self.last_deadline_ms
    }

    /// The offset after the item at `offset` (the header must lie within the written part).
    pub(crate) fn next(&self, offset: usize) -> usize {
        debug_assert!(offset + MIN_HEADER_LEN <= self.write);
        offset + self.item(offset).size()
    }
}

/// All segments, the free ones and the FIFO of those in use.
#[derive(Debug, Default)]
pub(crate) struct Segments {
    pub segs: Vec<Segment>,
    /// Segments in use (open or sealed), oldest first: the order the eviction hand takes them.
    pub fifo: VecDeque<usize>,
    /// Each class's open segment.
    pub open: [Option<usize>; CLASSES],
    /// Free segments that keep a buffer of `segment_size` bytes, for reuse.
    pub spare: Vec<usize>,
    /// Free segment ids without a buffer.
    pub unused: Vec<usize>,
    /// Bytes of all buffers held (in use and spare).
    pub bytes: usize,
    /// Bytes of the segments' dead items (deleted or moved, not yet taken back).
    pub dead_bytes: usize,
    /// Segments that joined the FIFO's tail so far.
    pub queued: u64,
    /// Where the eviction hand stopped after its last eviction and the key hash of the live
    /// item it stopped at: `(segment, offset, hash)`, hashed then so that the item's bucket
    /// could be prefetched for the next eviction. The hand's next step there takes it. Until
    /// then the item stays put (the hand alone moves items of a sealed segment, and its pass
    /// ends only past that offset); the segment may be taken back meanwhile, which drops it.
    pub hand_hash: Option<(usize, usize, u64)>,
}

impl Segments {
    /// A free segment id holding a buffer of `capacity` bytes, taking a spare one when
    /// `capacity` is the spare size; `None` when no id is left.
    pub(crate) fn take(&mut self, capacity: usize, spare_size: usize) -> Option<usize> {
        if capacity == spare_size
            && let Some(id) = self.spare.pop()
        {
            return Some(id);
        }
        let id = match self.unused.pop() {
            Some(id) => id,
            None if self.segs.len() <= crate::table::MAX_SEGMENTS => {
                self.segs.push(Segment::empty());
                self.segs.len() - 1
            }
            None => return None,
        };
        self.segs[id].data = vec![0; capacity].into_boxed_slice();
        self.bytes += capacity;
        Some(id)
    }

    /// Puts a segment in use for `class`: at the FIFO's tail, empty, in `generation`.
    pub(crate) fn open(&mut self, id: usize, class: usize, generation: u32, state: State) {
        let seg = &mut self.segs[id];
        debug_assert_eq!(seg.state, State::Free);
        seg.write = 0;
        seg.live_items = 0;
        seg.live_bytes = 0;
        seg.generation = generation;
        seg.last_deadline_ms = 0;
        seg.hand = 0;
        seg.keep = 0;
        seg.state = state;
        seg.class = class;
        self.enqueue(id);
        if state == State::Open {
            self.open[class] = Some(id);
        }
    }

    /// Puts `id` at the FIFO's tail.
    pub(crate) fn enqueue(&mut self, id: usize) {
        self.queued += 1;
        self.segs[id].queued = self.queued;
        self.fifo.push_back(id);
    }

    /// Closes `id` to stores: its class gets a new open segment next time.
    pub(crate) fn seal(&mut self, id: usize) {
        let seg = &mut self.segs[id];
        if seg.state == State::Open {
            seg.state = State::Sealed;
            if self.open[seg.class] == Some(id) {
                self.open[seg.class] = None;
            }
        }
    }

    /// Takes back a segment none of whose items is live any more: out of the FIFO, its dead
    /// bytes forgotten, its buffer kept as a spare if `keep` (and of `spare_size` bytes), else
    /// freed.
    pub(crate) fn release(&mut self, id: usize, keep: bool, spare_size: usize) {
        self.seal(id);
        let seg = &mut self.segs[id];
        debug_assert_eq!(seg.live_items, 0);
        debug_assert_ne!(seg.state, State::Free);
        self.dead_bytes -= seg.write - seg.live_bytes;
        if matches!(self.hand_hash, Some((at, ..)) if at == id) {
            self.hand_hash = None;
        }
        seg.state = State::Free;
        seg.write = 0;
        seg.hand = 0;
        seg.keep = 0;
        seg.live_bytes = 0;
        if self.fifo.front() == Some(&id) {
            self.fifo.pop_front();
        } else if let Some(at) = self.fifo.iter().position(|&s| s == id) {
            self.fifo.remove(at);
        }
        if keep && seg.data.len() == spare_size {
            self.spare.push(id);
        } else {
            self.bytes -= seg.data.len();
            seg.data = Box::default();
            self.unused.push(id);
        }
    }

    /// Frees the buffers of spare segments until at most `keep` remain; returns the bytes freed.
    pub(crate) fn drop_spares(&mut self, keep: usize) -> usize {
        let mut freed = 0;
        while self.spare.len() > keep {
            let Some(id) = self.spare.pop() else { break };
            let seg = &mut self.segs[id];
            freed += seg.data.len();
            self.bytes -= seg.data.len();
            seg.data = Box::default();
            self.unused.push(id);
        }
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_classes_group_by_time_left() {
        let now = Now::from_secs(1_000);
        let at = |secs: u64| Deadline::of_millis((1_000 + secs) * 1000);
        assert_eq!(class_of(Deadline::NEVER, now), 0);
        assert_eq!(class_of(at(1), now), 1);
        assert_eq!(class_of(at(10), now), 1);
        assert_eq!(class_of(at(11), now), 2);
        assert_eq!(class_of(at(3600), now), 4);
        assert_eq!(class_of(at(86_400), now), 5);
        assert_eq!(class_of(at(86_401), now), 6);
        assert_eq!(class_of(Deadline::of_millis(u64::MAX), now), CLASSES - 1);
    }

    #[test]
    fn segments_are_reused_and_freed_with_their_bytes_counted() {
        let mut s = Segments::default();
        let a = s.take(4096, 4096).unwrap();
        s.open(a, 0, 0, State::Open);
        let b = s.take(100, 4096).unwrap();
        s.open(b, 3, 0, State::Sealed);
        assert_eq!(s.bytes, 4196);
        assert_eq!(s.open[0], Some(a));
        assert_eq!(s.fifo, [a, b]);
        s.release(b, true, 4096);
        assert_eq!(s.bytes, 4096, "a buffer of another size is freed");
        s.release(a, true, 4096);
        assert_eq!(
            (s.bytes, s.open[0]),
            (4096, None),
            "a spare keeps its buffer"
        );
        assert_eq!(s.take(4096, 4096), Some(a), "and is reused");
        assert_eq!(s.take(50, 4096), Some(b), "an id without a buffer gets one");
        assert_eq!(s.bytes, 4146);
        s.open(a, 0, 0, State::Open);
        s.release(a, true, 4096);
        assert_eq!(s.drop_spares(0), 4096);
        assert_eq!(s.bytes, 50);
    }
}
