//! Which stored namespace each Redis database number means (`SWAPDB`), one table for every
//! worker.
//!
//! A database is a key prefix in the shared store (`engine::session::stored_key`); `SWAPDB a
//! b` swaps what `a` and `b` mean rather than moving keys. Every worker reads the one table,
//! so a swap is one step for all of them: a seqlock makes the two entries change together
//! (a reader that overlaps a swap reads again), and no command ever sees both numbers mean
//! the same namespace. A RESP command reads its database's entry once, when it starts.
//!
//! ```text
//! reader   v1 = version (even)  entry  v2 = version   v1 == v2: done, else again
//! writer   lock; version += 1 (odd); swap the two entries; version += 1 (even); unlock
//! ```
//!
//! Until the first swap, a database is its own namespace, read with one load.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering, fence};

/// Database numbers: one byte.
const DATABASES: usize = 256;

/// The namespace of each database number.
#[derive(Debug)]
pub struct DbMap {
    /// Even when no swap is under way; 0 until the first.
    version: AtomicU64,
    namespace: [AtomicU8; DATABASES],
    writer: Mutex<()>,
}

impl Default for DbMap {
    fn default() -> DbMap {
        DbMap {
            version: AtomicU64::new(0),
            namespace: std::array::from_fn(|db| AtomicU8::new(db as u8)),
            writer: Mutex::new(()),
        }
    }
}

impl DbMap {
    /// The namespace database `db` means now.
    #[inline]
    pub fn namespace(&self, db: u8) -> u8 {
        let entry = &self.namespace[usize::from(db)];
        loop {
            let before = self.version.load(Ordering::Acquire);
            if before == 0 {
                return db;
            }
            let namespace = entry.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let after = self.version.load(Ordering::Relaxed);
            if before == after && before.is_multiple_of(2) {
                return namespace;
            }
            std::hint::spin_loop();
        }
    }

    /// Swaps what databases `a` and `b` mean.
    pub fn swap(&self, a: u8, b: u8) {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let version = self.version.load(Ordering::Relaxed);
        self.version.store(version + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let (ea, eb) = (
            &self.namespace[usize::from(a)],
            &self.namespace[usize::from(b)],
        );
        let (na, nb) = (ea.load(Ordering::Relaxed), eb.load(Ordering::Relaxed));
        ea.store(nb, Ordering::Relaxed);
        eb.store(na, Ordering::Relaxed);
        self.version.store(version + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_swap_exchanges_two_namespaces_and_twice_undoes_it() {
        let map = DbMap::default();
        assert_eq!(map.namespace(3), 3);
        map.swap(0, 3);
        assert_eq!(
            (map.namespace(0), map.namespace(3), map.namespace(1)),
            (3, 0, 1)
        );
        map.swap(3, 1);
        assert_eq!(
            (map.namespace(0), map.namespace(1), map.namespace(3)),
            (3, 0, 1)
        );
        map.swap(2, 2);
        assert_eq!(map.namespace(2), 2);
    }

    /// Readers on other threads never see two databases mean one namespace while swaps run
    /// (each reads both entries inside one version, as a command reads its one entry).
    #[test]
    fn readers_never_see_half_a_swap() {
        let map = Arc::new(DbMap::default());
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (map, stop) = (Arc::clone(&map), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) && reads < 5_000_000 {
                    let before = map.version.load(Ordering::Acquire);
                    let (a, b) = (map.namespace(0), map.namespace(1));
                    let after = map.version.load(Ordering::Acquire);
                    if before == after && before.is_multiple_of(2) {
                        assert_ne!(a, b, "half a swap seen");
                    }
                    reads += 1;
                }
            })
        };
        for _ in 0..100_000 {
            map.swap(0, 1);
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        assert_eq!((map.namespace(0), map.namespace(1)), (0, 1));
    }
}
