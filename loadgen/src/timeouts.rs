//! The deadlines of a worker's requests in flight, so that finding timed-out requests costs
//! time per request sent rather than per connection per check.
//!
//! Every request pushes `(sent_ns + timeout, connection, opaque)` when it is sent. All requests
//! share one timeout and are sent in time order, so the queue is ordered by deadline and only
//! its front is ever looked at. An answered request is not looked for: its entry stays until it
//! reaches the front, where the connection says it is no longer in flight and the entry is
//! dropped.
//!
//! ```text
//! issue ─push─▶ [deadline, conn, opaque] … ─front─▶ answered or lost? drop : due? time out : stop
//! ```
//!
//! A connection answers in order, and its requests enter the queue in the order they were sent,
//! so an entry that reaches the front while still in flight is the oldest request in flight on
//! its connection: the one a timeout is measured on.

use std::collections::VecDeque;

/// Deadlines of requests in flight, oldest first; see the module docs.
#[derive(Debug, Default)]
pub struct TimeoutQueue {
    entries: VecDeque<Entry>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    deadline_ns: u64,
    conn: u32,
    opaque: u32,
}

impl TimeoutQueue {
    /// An empty queue.
    pub fn new() -> TimeoutQueue {
        TimeoutQueue::default()
    }

    /// Watches the request `opaque` sent on connection `conn`, due for an answer by
    /// `deadline_ns`. Deadlines must not decrease from one push to the next (an earlier one
    /// is only noticed once those before it are gone).
    ///
    /// # Panics
    /// If `conn` does not fit in a `u32`.
    pub fn push(&mut self, deadline_ns: u64, conn: usize, opaque: u32) {
        let conn = u32::try_from(conn).expect("connection index fits in u32");
        self.entries.push_back(Entry {
            deadline_ns,
            conn,
            opaque,
        });
    }

    /// The next connection whose oldest request in flight is due by `now_ns`, or `None`.
    ///
    /// `in_flight(conn, opaque)` tells whether that request still waits for its answer;
    /// entries of requests that do not are dropped on the way. The caller is expected to end
    /// the returned connection's requests (it fails the connection).
    pub fn pop_due(
        &mut self,
        now_ns: u64,
        mut in_flight: impl FnMut(usize, u32) -> bool,
    ) -> Option<usize> {
        while let Some(e) = self.entries.front().copied() {
            if !in_flight(e.conn as usize, e.opaque) {
                self.entries.pop_front();
            } else if e.deadline_ns <= now_ns {
                self.entries.pop_front();
                return Some(e.conn as usize);
            } else {
                return None;
            }
        }
        None
    }

    /// Entries held, answered ones not yet dropped included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Requests in flight as `(conn, opaque)`.
    type Pending = BTreeSet<(usize, u32)>;

    #[track_caller]
    fn due(q: &mut TimeoutQueue, now_ns: u64, pending: &mut Pending) -> Vec<usize> {
        let mut out = Vec::new();
        while let Some(c) = q.pop_due(now_ns, |c, o| pending.contains(&(c, o))) {
            // Failing a connection loses everything it had in flight.
            pending.retain(|&(pc, _)| pc != c);
            out.push(c);
        }
        out
    }

    #[test]
    fn nothing_is_due_before_its_deadline() {
        let mut q = TimeoutQueue::new();
        let mut pending = Pending::from([(3, 0)]);
        q.push(100, 3, 0);
        assert_eq!(due(&mut q, 99, &mut pending), Vec::<usize>::new());
        assert_eq!(q.len(), 1);
        assert_eq!(due(&mut q, 100, &mut pending), vec![3]);
        assert!(q.is_empty());
    }

    #[test]
    fn answered_requests_are_dropped_at_the_front_and_never_time_out() {
        let mut q = TimeoutQueue::new();
        let mut pending = Pending::new();
        for (i, conn) in [0, 1, 2, 0, 1].into_iter().enumerate() {
            q.push(10 + i as u64, conn, i as u32);
            pending.insert((conn, i as u32));
        }
        // Everything but connection 1's second request (opaque 4) is answered.
        pending.retain(|&r| r == (1, 4));
        assert_eq!(due(&mut q, 13, &mut pending), Vec::<usize>::new());
        assert_eq!(
            q.len(),
            1,
            "the answered entries before the waiting one are gone"
        );
        assert_eq!(due(&mut q, 1_000, &mut pending), vec![1]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_waiting_request_holds_back_later_deadlines() {
        let mut q = TimeoutQueue::new();
        let mut pending = Pending::from([(0, 7), (1, 9)]);
        q.push(50, 0, 7);
        q.push(60, 1, 9);
        assert_eq!(due(&mut q, 55, &mut pending), vec![0]);
        assert_eq!(due(&mut q, 59, &mut pending), Vec::<usize>::new());
        assert_eq!(due(&mut q, 60, &mut pending), vec![1]);
    }

    #[test]
    fn a_connection_times_out_once_for_all_its_requests() {
        // Pipelined: three requests on connection 5, one on 6; failing 5 loses all three.
        let mut q = TimeoutQueue::new();
        let mut pending = Pending::new();
        for (t, conn, opaque) in [(1, 5, 0), (2, 5, 1), (3, 6, 0), (4, 5, 2)] {
            q.push(t, conn, opaque);
            pending.insert((conn, opaque));
        }
        assert_eq!(due(&mut q, 10, &mut pending), vec![5, 6]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_reopened_connection_is_judged_by_its_new_requests() {
        // Connection 2 timed out, was reopened and sent opaque 1 (opaques go on counting).
        let mut q = TimeoutQueue::new();
        let mut pending = Pending::from([(2, 0)]);
        q.push(10, 2, 0);
        assert_eq!(due(&mut q, 10, &mut pending), vec![2]);
        q.push(30, 2, 1);
        pending.insert((2, 1));
        assert_eq!(due(&mut q, 29, &mut pending), Vec::<usize>::new());
        assert_eq!(due(&mut q, 30, &mut pending), vec![2]);
    }
}
