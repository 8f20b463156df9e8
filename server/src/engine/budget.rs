//! The input budget: bytes a worker's connections may hold in large commands still arriving.
//!
//! A command is assembled in its connection's input buffer as its bytes arrive (an announced
//! length allocates nothing), up to twice the item limit. With a large `-I` (`-I 512m`), that
//! alone would let each connection hold a gigabyte: so a command that grows past
//! [`LARGE_COMMAND_BYTES`] must hold a share of its worker's budget, as large as the bytes it
//! will have once its current argument is in, before more of it is read:
//!
//! ```text
//! command of n > LARGE_COMMAND_BYTES bytes so far  → Hold grows to n from the worker's budget
//! budget short                                     → the command is refused (an error reply,
//!                                                    its bytes skipped as they arrive, the
//!                                                    connection kept)
//! command complete, refused, or connection closed  → the Hold is dropped, its bytes return
//! ```
//!
//! Invariant: the holds of a worker's connections sum to at most its budget, and a command
//! under the threshold holds at most [`LARGE_COMMAND_BYTES`]; so a worker's input is bounded
//! by its budget plus the threshold per connection (`-c`). The budget is the larger of
//! [`MIN_BUDGET_BYTES`] and one command of the largest size (twice `-I`): a lone command of
//! any allowed size always fits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Size from which a command being assembled must hold a share of the budget.
pub(crate) const LARGE_COMMAND_BYTES: usize = 64 * 1024;

/// The smallest per-worker budget.
pub(crate) const MIN_BUDGET_BYTES: usize = 64 << 20;

/// A worker's budget for large commands (shared with its connections' holds, which may be
/// dropped wherever their session is).
#[derive(Debug)]
pub(crate) struct InputBudget {
    limit: usize,
    held: Arc<AtomicUsize>,
}

impl InputBudget {
    /// A budget for commands of at most `max_command` bytes.
    pub(crate) fn new(max_command: usize) -> InputBudget {
        InputBudget {
            limit: max_command.max(MIN_BUDGET_BYTES),
            held: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The budget in bytes.
    #[cfg(test)]
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Grows `hold` (a new one when `None`) to `bytes`; false, with nothing changed, when the
    /// budget is short.
    pub(crate) fn grow(&self, hold: &mut Option<Hold>, bytes: usize) -> bool {
        let have = hold.as_ref().map_or(0, |h| h.bytes);
        if bytes <= have {
            return true;
        }
        let more = bytes - have;
        let granted = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(more).filter(|&sum| sum <= self.limit)
            })
            .is_ok();
        if granted {
            match hold {
                Some(h) => h.bytes = bytes,
                None => {
                    *hold = Some(Hold {
                        bytes,
                        held: Arc::clone(&self.held),
                    });
                }
            }
        }
        granted
    }
}

/// A connection's share of its worker's budget; given back when dropped.
#[derive(Debug)]
pub(crate) struct Hold {
    bytes: usize,
    held: Arc<AtomicUsize>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_sum_to_at_most_the_budget_and_return_when_dropped() {
        let budget = InputBudget::new(100 << 20);
        assert_eq!(budget.limit(), 100 << 20);
        let (mut a, mut b) = (None, None);
        assert!(budget.grow(&mut a, 60 << 20));
        assert!(budget.grow(&mut a, 70 << 20));
        assert!(budget.grow(&mut a, 10), "a hold never shrinks by growing");
        assert_eq!(budget.held(), 70 << 20);
        assert!(!budget.grow(&mut b, 40 << 20));
        assert!(b.is_none());
        assert!(budget.grow(&mut b, 30 << 20));
        assert_eq!(budget.held(), 100 << 20);
        drop(a);
        assert_eq!(budget.held(), 30 << 20);
        assert!(budget.grow(&mut b, 100 << 20));
        b = None;
        assert_eq!(budget.held(), 0);
        assert!(b.is_none());
    }

    #[test]
    fn a_small_item_limit_still_gets_the_minimum_budget() {
        assert_eq!(InputBudget::new(2 << 20).limit(), MIN_BUDGET_BYTES);
    }
}
