//! A min-heap of per-bucket deadlines, updated lazily.
//!
//! Each bucket has at most one heap entry, whose key may be EARLIER than the bucket's
//! deadline (never later): moving a deadline later only writes the bucket's slot, and the
//! entry is fixed when its old key comes due. An earlier deadline sifts at once, and a
//! cleared one leaves at once. A busy connection's timer almost always moves later: each
//! reply re-arms its probe deadline (loss recovery's PTO, a millisecond or more out) in the
//! same pass that takes the ACK of the previous one. So a request costs no heap work, and
//! an entry is re-sifted about once per PTO instead of once or twice per request.
//! [`peek`](DeadlineHeap::peek) is therefore a lower bound: a caller that sleeps until it
//! may wake early, never late. Nothing allocates after `new`.

use smoltcp::time::Instant;

const ABSENT: u32 = u32::MAX;
/// No deadline.
const NEVER: i64 = i64::MAX;

/// One bucket's timer, kept with the bucket: the common case (a deadline moved later)
/// touches only this, which the caller has in cache anyway.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimerSlot {
    /// The deadline in µs, or `NEVER`.
    deadline: i64,
    /// The key of the bucket's heap entry (<= `deadline`), or `NEVER` if it has none.
    key: i64,
}

impl Default for TimerSlot {
    fn default() -> Self {
        TimerSlot {
            deadline: NEVER,
            key: NEVER,
        }
    }
}

/// Where the heap finds each bucket's [`TimerSlot`].
pub(crate) trait TimerSlots {
    /// The timer of `bucket`.
    fn timer(&mut self, bucket: usize) -> &mut TimerSlot;
}

/// Deadlines keyed by bucket index.
pub(crate) struct DeadlineHeap {
    /// (key in µs, bucket), heap-ordered by key; key <= the bucket's deadline.
    heap: Vec<(i64, u32)>,
    /// Position of each bucket in `heap`, or `ABSENT`.
    position: Vec<u32>,
}

impl DeadlineHeap {
    /// A heap for buckets `0..buckets`.
    pub(crate) fn new(buckets: usize) -> Self {
        DeadlineHeap {
            heap: Vec::with_capacity(buckets),
            position: vec![ABSENT; buckets],
        }
    }

    /// Sets (or with `None` clears) the deadline of `bucket`, whose timer is `slot`.
    pub(crate) fn set(&mut self, bucket: usize, slot: &mut TimerSlot, deadline: Option<Instant>) {
        let when = deadline.map_or(NEVER, |when| when.total_micros());
        slot.deadline = when;
        if when >= slot.key {
            // Later (or still none): the entry keeps its earlier key until it comes due.
            if when == NEVER && slot.key != NEVER {
                self.remove_at(self.position[bucket] as usize);
                slot.key = NEVER;
            }
            return;
        }
        if slot.key == NEVER {
            let index = self.heap.len();
            self.heap.push((when, bucket as u32));
            self.position[bucket] = index as u32;
            self.sift_up(index);
        } else {
            let at = self.position[bucket] as usize;
            self.heap[at].0 = when;
            self.sift_up(at);
        }
        slot.key = when;
    }

    /// No deadline is earlier than this (`None`: no bucket has one). It may be earlier than
    /// every deadline: a postponed entry keeps its key until it comes due.
    pub(crate) fn peek(&self) -> Option<Instant> {
        self.heap
            .first()
            .map(|&(when, _)| Instant::from_micros(when))
    }

    /// Removes and returns a bucket whose deadline is at or before `now` (its deadline is
    /// cleared: set it again after serving the bucket); fixes the entries it passes.
    pub(crate) fn pop_due(&mut self, now: Instant, slots: &mut impl TimerSlots) -> Option<usize> {
        let now = now.total_micros();
        while let Some(&(key, bucket)) = self.heap.first() {
            if key > now {
                return None;
            }
            let slot = slots.timer(bucket as usize);
            if slot.deadline <= now {
                *slot = TimerSlot::default();
                self.remove_at(0);
                return Some(bucket as usize);
            }
            // Postponed: take the real deadline and sink.
            slot.key = slot.deadline;
            self.heap[0].0 = slot.deadline;
            self.sift_down(0);
        }
        None
    }

    /// Buckets that currently have a deadline, in no particular order.
    #[cfg(test)]
    pub(crate) fn buckets(&self) -> impl Iterator<Item = usize> + '_ {
        self.heap.iter().map(|&(_, bucket)| bucket as usize)
    }

    /// Number of buckets with a deadline.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    fn remove_at(&mut self, at: usize) {
        let last = self.heap.len() - 1;
        self.swap(at, last);
        if let Some((_, bucket)) = self.heap.pop() {
            self.position[bucket as usize] = ABSENT;
        }
        if at < self.heap.len() {
            self.sift_down(at);
            self.sift_up(at);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.position[self.heap[a].1 as usize] = a as u32;
        self.position[self.heap[b].1 as usize] = b as u32;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent].0 <= self.heap[at].0 {
                break;
            }
            self.swap(parent, at);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let left = 2 * at + 1;
            let right = left + 1;
            let mut smallest = at;
            if left < self.heap.len() && self.heap[left].0 < self.heap[smallest].0 {
                smallest = left;
            }
            if right < self.heap.len() && self.heap[right].0 < self.heap[smallest].0 {
                smallest = right;
            }
            if smallest == at {
                break;
            }
            self.swap(at, smallest);
            at = smallest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: i64) -> Instant {
        Instant::from_millis(n)
    }

    impl TimerSlots for Vec<TimerSlot> {
        fn timer(&mut self, bucket: usize) -> &mut TimerSlot {
            &mut self[bucket]
        }
    }

    /// The heap with its buckets' slots, as a table holds them.
    struct Timers {
        heap: DeadlineHeap,
        slots: Vec<TimerSlot>,
    }

    impl Timers {
        fn new(buckets: usize) -> Timers {
            Timers {
                heap: DeadlineHeap::new(buckets),
                slots: vec![TimerSlot::default(); buckets],
            }
        }
        fn set(&mut self, bucket: usize, deadline: Option<Instant>) {
            self.heap.set(bucket, &mut self.slots[bucket], deadline);
        }
        fn pop_due(&mut self, now: Instant) -> Option<usize> {
            self.heap.pop_due(now, &mut self.slots)
        }
        fn peek(&self) -> Option<Instant> {
            self.heap.peek()
        }
        fn len(&self) -> usize {
            self.heap.len()
        }
        fn buckets(&self) -> impl Iterator<Item = usize> + '_ {
            self.heap.buckets()
        }
    }

    #[test]
    fn orders_moves_and_clears() {
        let mut heap = Timers::new(8);
        heap.set(3, Some(ms(30)));
        heap.set(1, Some(ms(10)));
        heap.set(5, Some(ms(50)));
        heap.set(2, None);
        assert_eq!(heap.peek(), Some(ms(10)));
        heap.set(1, Some(ms(60))); // later: the entry keeps its key for now
        assert_eq!(heap.peek(), Some(ms(10)));
        heap.set(5, Some(ms(5))); // earlier: at once
        assert_eq!(heap.peek(), Some(ms(5)));
        heap.set(5, None);
        assert_eq!(heap.len(), 2, "a cleared deadline leaves at once");
        assert_eq!(heap.pop_due(ms(29)), None, "nothing is due before 30");
        // Passing the stale key fixed it.
        assert_eq!(heap.peek(), Some(ms(30)));
        assert_eq!(heap.pop_due(ms(30)), Some(3));
        assert_eq!(heap.pop_due(ms(59)), None);
        assert_eq!(heap.pop_due(ms(100)), Some(1));
        assert_eq!(heap.pop_due(ms(100)), None);
        assert_eq!(heap.peek(), None);
        assert_eq!(heap.len(), 0);
    }

    #[test]
    fn matches_a_naive_model() {
        // Pseudo-random operations against a plain array of deadlines, with the clock
        // advancing and due buckets popped (and served: cleared, often re-armed) as a
        // table would.
        let n = 64;
        let mut heap = Timers::new(n);
        let mut model: Vec<Option<i64>> = vec![None; n];
        let mut x: u64 = 12345;
        let mut now = 0i64;
        for step in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bucket = (x >> 33) as usize % n;
            let value = now + ((x >> 13) % 1000) as i64;
            if step % 3 == 0 {
                heap.set(bucket, None);
                model[bucket] = None;
            } else {
                heap.set(bucket, Some(ms(value)));
                model[bucket] = Some(value);
            }
            let min = model.iter().flatten().min().copied();
            match (heap.peek(), min) {
                (Some(bound), Some(min)) => assert!(bound <= ms(min)),
                (None, Some(min)) => panic!("deadline {min} lost"),
                _ => {}
            }
            if step % 7 == 0 {
                now += 25;
                let mut popped = Vec::new();
                while let Some(b) = heap.pop_due(ms(now)) {
                    let due = model[b].take().expect("popped a bucket without a deadline");
                    assert!(due <= now, "popped {b} due at {due} at {now}");
                    popped.push(b);
                }
                assert!(
                    model.iter().flatten().all(|&due| due > now),
                    "a due bucket was not popped at {now}"
                );
                if let Some(bound) = heap.peek() {
                    assert!(bound > ms(now));
                }
            }
            let mut live: Vec<usize> = heap.buckets().collect();
            live.sort_unstable();
            let want: Vec<usize> = (0..n).filter(|&b| model[b].is_some()).collect();
            assert_eq!(live, want);
        }
        while let Some(b) = heap.pop_due(ms(i64::MAX / 2000)) {
            assert!(model[b].take().is_some());
        }
        assert!(model.iter().all(Option::is_none));
        assert_eq!(heap.len(), 0);
    }

    #[test]
    fn postponing_costs_no_heap_work_until_the_old_key_comes_due() {
        let mut heap = Timers::new(4);
        heap.set(0, Some(ms(1000)));
        heap.set(1, Some(ms(1010)));
        let before = heap.heap.heap.clone();
        // A retransmission timer re-armed by every reply.
        for round in 1..100 {
            heap.set(0, Some(ms(1000 + round * 10)));
        }
        assert_eq!(heap.heap.heap, before, "the heap was not touched");
        assert_eq!(heap.pop_due(ms(1500)), Some(1));
        assert_eq!(
            heap.peek(),
            Some(ms(1990)),
            "bucket 0's entry was fixed on the way"
        );
        assert_eq!(heap.pop_due(ms(1989)), None);
        assert_eq!(heap.pop_due(ms(1990)), Some(0));
    }
}
