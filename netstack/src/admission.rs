//! `-c, --conn-limit`: one admission limit shared by every worker's connection table.
//!
//! The kernel (RSS, a multi-queue TAP device, `SO_REUSEPORT`) spreads connections over the
//! workers by a hash of their 4-tuple, not evenly: splitting the limit into per-worker
//! shares makes one worker refuse while another has room. So every table of a process
//! consults one [`Admission`], an atomic count of the connections admitted and not yet
//! released:
//!
//! ```text
//! worker 0: ConnTable ─┐                      ┌─ handshake done / accept(2): try_acquire
//! worker 1: ConnTable ─┼─▶ Arc<Admission> ◀──┤
//! worker 2: KernelTable┘   (limit, in_use)    └─ connection released: release
//! ```
//!
//! It is touched once when a connection is admitted and once when it is released, never
//! per request, so the shared cache line costs nothing on the data path. What counts is
//! the table's business: the smoltcp table counts open and closing connections (not
//! handshakes, which have their own budget, nor TIME-WAIT), the kernel table accepted
//! sockets.

use core::sync::atomic::{AtomicUsize, Ordering};

/// A connection limit shared by several tables (threads).
#[derive(Debug)]
pub struct Admission {
    limit: usize,
    in_use: AtomicUsize,
}

impl Admission {
    /// A limit of `limit` connections, none admitted yet.
    pub fn new(limit: usize) -> Admission {
        Admission {
            limit,
            in_use: AtomicUsize::new(0),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Connections admitted and not released, over every table.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// True when no connection can be admitted now (another table may release one at any
    /// time: a hint for refusing early, [`try_acquire`](Self::try_acquire) decides).
    pub fn is_full(&self) -> bool {
        self.in_use() >= self.limit
    }

    /// Admits one connection if the limit allows; false if it does not.
    pub fn try_acquire(&self) -> bool {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back `n` admitted connections.
    pub fn release(&self, n: usize) {
        if n > 0 {
            let before = self.in_use.fetch_sub(n, Ordering::AcqRel);
            debug_assert!(before >= n, "released more connections than admitted");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn admits_up_to_the_limit_and_again_after_a_release() {
        let admission = Admission::new(2);
        assert!(admission.try_acquire());
        assert!(admission.try_acquire());
        assert!(admission.is_full());
        assert!(!admission.try_acquire());
        admission.release(1);
        assert_eq!(admission.in_use(), 1);
        assert!(admission.try_acquire());
        admission.release(2);
        assert_eq!(admission.in_use(), 0);
    }

    #[test]
    fn threads_racing_for_the_last_slots_never_exceed_the_limit() {
        let admission = Arc::new(Admission::new(100));
        let admitted: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let admission = Arc::clone(&admission);
                    scope.spawn(move || (0..1000).filter(|_| admission.try_acquire()).count())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 100);
        assert_eq!(admission.in_use(), 100);
    }
}
