//! The SYN backlog: half-open connections (SYN-RECEIVED) in arrival order, with their own
//! budget, apart from `conn_limit`.
//!
//! A SYN flood from forged addresses creates connections that never complete. Counted
//! against `conn_limit` they would lock every real client out for the handshake timeout;
//! here they never touch it. A table holds at most `conn_limit + syn_backlog` sockets
//! (open, closing and handshaking): handshakes may use the places no connection holds plus
//! `syn_backlog` more, and when a validated SYN finds that budget spent, the OLDEST
//! handshake gives way (its socket is dropped without a word, as the kernel drops a request
//! socket). So a burst of real clients as large as the connection limit is never cut short,
//! and under a flood a real client's handshake, which completes one round trip after its
//! SYN, is lost only if more than the budget of forged SYNs (at least `syn_backlog`, 1,024
//! by default) reach this worker within that round trip: ten million SYNs a second at a
//! 100 µs round trip.
//!
//! Why not SYN cookies: a cookie is the initial sequence number of the SYN-ACK, and
//! smoltcp chooses that number itself and offers no way to create a connection in
//! ESTABLISHED with numbers we chose, so cookies would mean writing the handshake beside
//! smoltcp's. The backlog costs memory instead: a half-open connection holds a socket with
//! its buffers, within the same `conn_limit + syn_backlog` sockets per table, recycled.
//!
//! The order is an intrusive doubly linked list through the slots (`Links` in each slot,
//! addressed by bucket and slot index, which stay put while the slot is in use): joining,
//! leaving when the handshake completes or fails, and finding the oldest are O(1), and
//! nothing allocates.

/// A slot's address: bucket index in the high 32 bits, slot index in the low.
pub(crate) type SlotAddr = u64;

/// No slot.
const NIL: SlotAddr = SlotAddr::MAX;

/// Packs a bucket and slot index into a [`SlotAddr`].
pub(crate) fn slot_addr(bucket: usize, slot: usize) -> SlotAddr {
    ((bucket as u64) << 32) | slot as u64
}

/// Unpacks a [`SlotAddr`] into (bucket, slot).
pub(crate) fn split_addr(at: SlotAddr) -> (usize, usize) {
    ((at >> 32) as usize, (at & 0xffff_ffff) as usize)
}

/// A slot's place in the backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Links {
    prev: SlotAddr,
    next: SlotAddr,
}

impl Default for Links {
    fn default() -> Self {
        Links {
            prev: NIL,
            next: NIL,
        }
    }
}

/// Where the backlog finds each slot's [`Links`].
pub(crate) trait BacklogSlots {
    /// The links of the slot at `at`.
    fn links(&mut self, at: SlotAddr) -> &mut Links;
}

/// Handshakes in arrival order (the budget is the table's to enforce).
#[derive(Debug)]
pub(crate) struct Backlog {
    head: SlotAddr,
    tail: SlotAddr,
    len: usize,
}

impl Backlog {
    /// An empty backlog.
    pub(crate) fn new() -> Backlog {
        Backlog {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Handshakes in the backlog.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The oldest handshake.
    pub(crate) fn oldest(&self) -> Option<SlotAddr> {
        (self.head != NIL).then_some(self.head)
    }

    /// Appends the slot at `at` (not in the backlog) as the newest.
    pub(crate) fn push(&mut self, at: SlotAddr, slots: &mut impl BacklogSlots) {
        *slots.links(at) = Links {
            prev: self.tail,
            next: NIL,
        };
        if self.tail == NIL {
            self.head = at;
        } else {
            slots.links(self.tail).next = at;
        }
        self.tail = at;
        self.len += 1;
    }

    /// The handshakes, oldest first.
    #[cfg(test)]
    pub(crate) fn order(&self, slots: &mut impl BacklogSlots) -> Vec<SlotAddr> {
        let mut out = Vec::new();
        let mut at = self.head;
        while at != NIL {
            out.push(at);
            at = slots.links(at).next;
        }
        assert_eq!(out.len(), self.len);
        out
    }

    /// Removes the slot at `at`, which must be in the backlog.
    pub(crate) fn remove(&mut self, at: SlotAddr, slots: &mut impl BacklogSlots) {
        let Links { prev, next } = std::mem::take(slots.links(at));
        if prev == NIL {
            self.head = next;
        } else {
            slots.links(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            slots.links(next).prev = prev;
        }
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl BacklogSlots for Vec<Links> {
        fn links(&mut self, at: SlotAddr) -> &mut Links {
            let (bucket, slot) = split_addr(at);
            &mut self[bucket * 4 + slot]
        }
    }

    fn order(backlog: &Backlog, slots: &mut Vec<Links>) -> Vec<SlotAddr> {
        backlog.order(slots)
    }

    #[test]
    fn addresses_round_trip() {
        assert_eq!(split_addr(slot_addr(7, 3)), (7, 3));
        assert_eq!(
            split_addr(slot_addr(u32::MAX as usize, 0)),
            (u32::MAX as usize, 0)
        );
    }

    /// Arrival order is kept through removals from the front, the middle and the back, and
    /// the oldest is the one that gives way.
    #[test]
    fn the_oldest_gives_way_and_completed_ones_leave_from_anywhere() {
        let mut slots = vec![Links::default(); 16];
        let mut backlog = Backlog::new();
        let [a, b, c, d, e] = [
            slot_addr(0, 0),
            slot_addr(1, 2),
            slot_addr(2, 1),
            slot_addr(3, 3),
            slot_addr(0, 1),
        ];
        for at in [a, b, c, d] {
            backlog.push(at, &mut slots);
        }
        assert_eq!(backlog.len(), 4);
        assert_eq!(backlog.oldest(), Some(a), "the first SYN gives way");
        backlog.remove(a, &mut slots);
        assert_eq!(order(&backlog, &mut slots), [b, c, d]);
        // b completes its handshake (middle of nothing: front), c fails (middle).
        backlog.push(e, &mut slots);
        backlog.remove(c, &mut slots);
        assert_eq!(order(&backlog, &mut slots), [b, d, e]);
        backlog.remove(e, &mut slots);
        assert_eq!(order(&backlog, &mut slots), [b, d]);
        backlog.remove(b, &mut slots);
        backlog.remove(d, &mut slots);
        assert_eq!(backlog.oldest(), None);
        assert_eq!(backlog.len(), 0);
        assert!(slots.iter().all(|l| *l == Links::default()));
        // Usable again from empty.
        backlog.push(c, &mut slots);
        assert_eq!(order(&backlog, &mut slots), [c]);
    }
}
