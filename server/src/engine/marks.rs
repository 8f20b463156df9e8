//! Write marks: which watched keys were written since a connection watched them (RESP's
//! `WATCH`), whatever wrote them (any protocol, any connection, a forwarded request).
//!
//! A key's item cannot say it was written and deleted again (it is gone), so the core notes
//! every write to a key someone watches, when the write changed something (a store that
//! stored, a delete that deleted, a new expiry of a held key), as Redis signals a key
//! modified:
//!
//! ```text
//! WATCH k      watch(k) -> s     the write sequence now; k gets a mark (the floor) if it had none
//! a write      note(k)           k marked: seq += 1, mark = seq   (one empty check when no
//!                                                                   key is watched)
//! FLUSHALL     note_held(held)   each marked key still held is marked (Redis 7 touches
//!                                the watched keys a flush removes, not absent ones)
//! EXEC         written_since(k, s)   mark > s, or (no mark) floor > s
//! ```
//!
//! Invariant: a key written after a connection watched it at `s` has a mark above `s`, or no
//! mark and a floor above `s`. Marks are bounded ([`MARKS_MAX`]): watching one more key when
//! the table is full forgets every mark and raises the floor, so an `EXEC` of a connection
//! that watched before then fails (a false positive a client retries, never a missed write).
//! A mark leaves when its last watcher lets go ([`WriteMarks::release`]); a connection that
//! closes while watching leaves its marks until the next overflow.

use std::collections::HashMap;

/// Keys that may carry a mark at once.
pub(crate) const MARKS_MAX: usize = 4096;

/// One worker's write marks (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct WriteMarks {
    /// Stored key -> (mark, watchers).
    keys: HashMap<Box<[u8]>, (u64, u32)>,
    /// Writes to marked keys so far.
    seq: u64,
    /// The sequence when marks were last forgotten.
    floor: u64,
}

impl WriteMarks {
    /// Starts watching `key`; returns the sequence to compare against at `EXEC`.
    pub(crate) fn watch(&mut self, key: &[u8]) -> u64 {
        if !self.keys.contains_key(key) {
            if self.keys.len() >= MARKS_MAX {
                self.forget_all();
            }
            self.keys.insert(key.into(), (self.floor, 0));
        }
        if let Some((_, watchers)) = self.keys.get_mut(key) {
            *watchers = watchers.saturating_add(1);
        }
        self.seq
    }

    /// One watcher of `key` lets go; its mark leaves with the last.
    pub(crate) fn release(&mut self, key: &[u8]) {
        if let Some((_, watchers)) = self.keys.get_mut(key) {
            *watchers = watchers.saturating_sub(1);
            if *watchers == 0 {
                self.keys.remove(key);
            }
        }
    }

    /// Notes a write to `key`.
    #[inline]
    pub(crate) fn note(&mut self, key: &[u8]) {
        if self.keys.is_empty() {
            return;
        }
        if let Some((mark, _)) = self.keys.get_mut(key) {
            self.seq += 1;
            *mark = self.seq;
        }
    }

    /// Notes a write to every marked key `held` says is held (a flush, before it empties
    /// the store).
    pub(crate) fn note_held(&mut self, mut held: impl FnMut(&[u8]) -> bool) {
        for (key, (mark, _)) in self.keys.iter_mut() {
            if held(key) {
                self.seq += 1;
                *mark = self.seq;
            }
        }
    }

    /// Whether `key`, watched at `since`, was written after.
    pub(crate) fn written_since(&self, key: &[u8], since: u64) -> bool {
        match self.keys.get(key) {
            Some(&(mark, _)) => mark > since,
            None => self.floor > since,
        }
    }

    /// Keys with a mark now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    fn forget_all(&mut self) {
        self.keys.clear();
        self.seq += 1;
        self.floor = self.seq;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_after_the_watch_is_seen_and_one_before_is_not() {
        let mut marks = WriteMarks::default();
        marks.note(b"k");
        let s = marks.watch(b"k");
        assert!(!marks.written_since(b"k", s));
        marks.note(b"other");
        assert!(!marks.written_since(b"k", s));
        marks.note(b"k");
        assert!(marks.written_since(b"k", s));
        // A second watcher from now on sees no write yet.
        let t = marks.watch(b"k");
        assert!(!marks.written_since(b"k", t));
        assert!(marks.written_since(b"k", s));
    }

    #[test]
    fn a_flush_counts_as_a_write_to_the_watched_keys_it_removes() {
        let mut marks = WriteMarks::default();
        let s = marks.watch(b"held");
        marks.watch(b"absent");
        marks.note_held(|key| key == b"held");
        assert!(marks.written_since(b"held", s));
        assert!(!marks.written_since(b"absent", s));
        let t = marks.watch(b"held");
        assert!(!marks.written_since(b"held", t));
    }

    #[test]
    fn the_last_release_drops_the_mark_and_writes_cost_nothing_after() {
        let mut marks = WriteMarks::default();
        marks.watch(b"k");
        marks.watch(b"k");
        marks.release(b"k");
        assert_eq!(marks.keys.len(), 1);
        marks.release(b"k");
        assert!(marks.keys.is_empty());
        marks.note(b"k");
        assert_eq!(marks.seq, 0);
    }

    /// An overflow forgets every mark: a watch from before it counts as written (never a
    /// missed write), one after it does not.
    #[test]
    fn an_overflow_fails_earlier_watches_and_not_later_ones() {
        let mut marks = WriteMarks::default();
        let early = marks.watch(b"k");
        for i in 0..MARKS_MAX {
            marks.watch(format!("key:{i}").as_bytes());
        }
        assert!(marks.keys.len() <= MARKS_MAX);
        assert!(marks.written_since(b"k", early));
        let late = marks.watch(b"k");
        assert!(marks.written_since(b"k", early));
        assert!(!marks.written_since(b"k", late));
    }
}
