//! An indexed min-heap of per-bucket deadlines.
//!
//! Each bucket has at most one entry. Setting, moving or clearing a bucket's deadline is
//! O(log buckets), finding the earliest is O(1), and nothing allocates after `new`.

use smoltcp::time::Instant;

const ABSENT: u32 = u32::MAX;

/// Deadlines keyed by bucket index.
pub(crate) struct DeadlineHeap {
    /// (deadline in µs, bucket), heap-ordered by deadline.
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

    /// Sets (or with `None` clears) the deadline of `bucket`.
    pub(crate) fn set(&mut self, bucket: usize, deadline: Option<Instant>) {
        let at = self.position[bucket];
        match (at, deadline) {
            (ABSENT, None) => {}
            (ABSENT, Some(when)) => {
                let index = self.heap.len();
                self.heap.push((when.total_micros(), bucket as u32));
                self.position[bucket] = index as u32;
                self.sift_up(index);
            }
            (at, None) => self.remove_at(at as usize),
            (at, Some(when)) => {
                let at = at as usize;
                let old = self.heap[at].0;
                self.heap[at].0 = when.total_micros();
                if when.total_micros() < old {
                    self.sift_up(at);
                } else {
                    self.sift_down(at);
                }
            }
        }
    }

    /// The earliest deadline and its bucket.
    pub(crate) fn peek(&self) -> Option<(Instant, usize)> {
        self.heap
            .first()
            .map(|&(when, bucket)| (Instant::from_micros(when), bucket as usize))
    }

    /// Removes and returns the bucket of the earliest deadline if it is at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<usize> {
        match self.peek() {
            Some((when, bucket)) if when <= now => {
                self.remove_at(0);
                Some(bucket)
            }
            _ => None,
        }
    }

    /// Buckets that currently have a deadline, in no particular order.
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

    #[test]
    fn orders_moves_and_clears() {
        let mut heap = DeadlineHeap::new(8);
        heap.set(3, Some(ms(30)));
        heap.set(1, Some(ms(10)));
        heap.set(5, Some(ms(50)));
        heap.set(2, None);
        assert_eq!(heap.peek(), Some((ms(10), 1)));
        heap.set(1, Some(ms(60))); // later
        assert_eq!(heap.peek(), Some((ms(30), 3)));
        heap.set(5, Some(ms(5))); // earlier
        assert_eq!(heap.peek(), Some((ms(5), 5)));
        heap.set(5, None);
        assert_eq!(heap.len(), 2);
        assert_eq!(heap.pop_due(ms(29)), None);
        assert_eq!(heap.pop_due(ms(30)), Some(3));
        assert_eq!(heap.pop_due(ms(100)), Some(1));
        assert_eq!(heap.pop_due(ms(100)), None);
        assert_eq!(heap.peek(), None);
    }

    #[test]
    fn matches_a_naive_model() {
        // Pseudo-random operations against a plain array of deadlines.
        let n = 64;
        let mut heap = DeadlineHeap::new(n);
        let mut model: Vec<Option<i64>> = vec![None; n];
        let mut x: u64 = 12345;
        for step in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bucket = (x >> 33) as usize % n;
            let value = ((x >> 13) % 1000) as i64;
            if step % 3 == 0 {
                heap.set(bucket, None);
                model[bucket] = None;
            } else {
                heap.set(bucket, Some(ms(value)));
                model[bucket] = Some(value);
            }
            let min = model.iter().flatten().min().copied();
            assert_eq!(heap.peek().map(|(t, _)| t), min.map(ms));
            if let Some((t, b)) = heap.peek() {
                assert_eq!(model[b].map(ms), Some(t));
            }
            assert_eq!(heap.len(), model.iter().flatten().count());
        }
        let mut last = i64::MIN;
        while let Some(b) = heap.pop_due(ms(i64::MAX / 2000)) {
            let t = model[b].take().unwrap();
            assert!(t >= last);
            last = t;
        }
        assert!(model.iter().all(Option::is_none));
    }
}
