//! A connection's transaction state, kept in its [`Session`](super::Session): the queued
//! commands of an open `MULTI` and their charge on the worker's pool, the keys it `WATCH`es,
//! and its claim on the cross-worker transaction token while a transaction spanning workers
//! runs. The protocol's side (what is queued, how it runs) is `resp/transactions.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::control::Control;

/// Requests a connection holds to run later, back to back (Redis's `MULTI` ... `EXEC`).
#[derive(Debug, Default)]
pub(crate) struct Queued {
    /// What `bytes` takes of the worker's pool for open transactions.
    pub charge: Charge,
    /// The requests' bytes, one after another.
    pub bytes: Vec<u8>,
    /// Where each request ends in `bytes`.
    pub ends: Vec<usize>,
    /// Set once a request could not be queued: the run is refused.
    pub failed: bool,
    /// The workers the queued keys belong to (each once, in the order first named).
    pub owners: Vec<usize>,
}

/// Bytes a connection's open transaction holds of its worker's pool (shared by the worker's
/// connections, bounded by [`EngineConfig::queued_max_bytes`]), given back when dropped: at
/// `EXEC`, `DISCARD`, `RESET`, or when the connection goes away.
#[derive(Debug, Default)]
pub(crate) struct Charge {
    pool: Option<Arc<AtomicUsize>>,
    bytes: usize,
}

impl Charge {
    /// A charge on `pool`, of nothing yet.
    pub fn on(pool: &Arc<AtomicUsize>) -> Charge {
        Charge {
            pool: Some(Arc::clone(pool)),
            bytes: 0,
        }
    }

    /// Takes `n` bytes more, unless the pool would then hold more than `max`.
    pub fn take(&mut self, n: usize, max: usize) -> bool {
        if let Some(pool) = &self.pool {
            // Only the worker's own thread charges its pool: no other update comes between.
            let held = pool.load(Ordering::Relaxed);
            if held.saturating_add(n) > max {
                return false;
            }
            pool.store(held + n, Ordering::Relaxed);
        }
        self.bytes += n;
        true
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.fetch_sub(self.bytes, Ordering::Relaxed);
        }
    }
}

/// A connection's claim on the cross-worker transaction token (`control::holds`), from the
/// hold requests to the end of its run: dropping it (the run is over, or the connection went
/// away) releases every participant and the token.
#[derive(Debug)]
pub(crate) struct HoldGuard {
    pub control: Arc<Control>,
    /// The coordinating worker (this one).
    pub me: usize,
    pub epoch: u64,
    /// The workers asked to hold.
    pub participants: Vec<usize>,
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        self.control
            .holds
            .release(self.me, self.epoch, &self.participants);
    }
}

/// A key a connection watches, and what it was when watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Watched {
    /// Its database.
    pub db: u8,
    /// The client's key.
    pub key: Box<[u8]>,
    /// The item's CAS and expiry then (`None`: not held).
    pub state: Option<(u64, u64)>,
    /// The namespace its database meant when watched, where its write marks are.
    pub stored_db: u8,
    /// The write sequence when watched (see [`super::marks::WriteMarks`]).
    pub since: u64,
    /// The worker that owns the key, where its write marks are.
    pub owner: usize,
}
