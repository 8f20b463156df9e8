//! Work every worker does its share of in the background: the LRU crawler (`lru_crawler`) and
//! `slabs reassign`'s page moves, each a [`WorkerRound`] that any worker starts and the last
//! worker to finish its share ends.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The LRU crawler's switches (`lru_crawler enable|disable|sleep|tocrawl`) and the state of
/// a requested crawl (`lru_crawler crawl`), shared by every worker.
///
/// A crawl is requested by bumping [`Crawler::requested`]; each worker's loop sees the new
/// count, walks its own table a bounded step per turn, and says when it is done
/// ([`Crawler::finished`]). The crawl runs while any worker has not finished.
#[derive(Debug)]
pub struct Crawler {
    enabled: AtomicBool,
    sleep_us: AtomicU32,
    tocrawl: AtomicU32,
    round: WorkerRound,
    pub(super) starts: AtomicU64,
}

/// `lru_crawler sleep`'s default, in microseconds (memcached's).
pub const CRAWLER_SLEEP_DEFAULT_US: u32 = 100;

impl Default for Crawler {
    fn default() -> Crawler {
        Crawler {
            enabled: AtomicBool::new(true),
            sleep_us: AtomicU32::new(CRAWLER_SLEEP_DEFAULT_US),
            tocrawl: AtomicU32::new(0),
            round: WorkerRound::default(),
            starts: AtomicU64::new(0),
        }
    }
}

impl Crawler {
    /// Whether the crawler is on (`lru_crawler enable`, the default): the background crawl
    /// runs and `lru_crawler crawl` and `metadump` are served.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// `lru_crawler enable|disable`; returns the previous state.
    pub fn set_enabled(&self, on: bool) -> bool {
        self.enabled.swap(on, Ordering::Relaxed)
    }

    /// Microseconds a worker waits between two steps of a requested crawl.
    pub fn sleep_us(&self) -> u32 {
        self.sleep_us.load(Ordering::Relaxed)
    }

    /// `lru_crawler sleep <us>`.
    pub fn set_sleep_us(&self, us: u32) {
        self.sleep_us.store(us, Ordering::Relaxed);
    }

    /// Items a requested crawl looks at per worker at most (0: all).
    pub fn tocrawl(&self) -> u32 {
        self.tocrawl.load(Ordering::Relaxed)
    }

    /// `lru_crawler tocrawl <n>`.
    pub fn set_tocrawl(&self, n: u32) {
        self.tocrawl.store(n, Ordering::Relaxed);
    }

    /// Crawls requested since start: a worker that has seen fewer starts the last one.
    #[inline]
    pub fn requested(&self) -> u64 {
        self.round.requested()
    }

    /// True while a requested crawl runs on some worker (`lru_crawler_running`).
    pub fn running(&self) -> bool {
        self.round.running()
    }

    /// Crawls started since start or `stats reset` (`lru_crawler_starts`).
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// Starts a crawl on `workers` workers, each of its own table; false (nothing started)
    /// while one runs. With `workers` 0 (classes that hold no item) the crawl is counted and
    /// done at once.
    pub fn start(&self, workers: usize) -> bool {
        if !self.round.start(workers) {
            return false;
        }
        self.starts.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// A worker walked its whole share of the running crawl.
    pub fn finished(&self) {
        self.round.finished(|| {});
    }
}

/// `slabs reassign`'s page moves, shared by every worker: a move out of the item class is
/// requested by bumping [`PageMoves::requested`]; each worker frees its share of the page a
/// bounded step per turn and says when it is done ([`PageMoves::finished`]).
#[derive(Debug, Default)]
pub struct PageMoves {
    round: WorkerRound,
    pub(super) moved: AtomicU64,
}

impl PageMoves {
    /// Moves requested since start: a worker that has seen fewer frees its share of the last.
    #[inline]
    pub fn requested(&self) -> u64 {
        self.round.requested()
    }

    /// True while a page is being freed (`slab_reassign_running`).
    pub fn running(&self) -> bool {
        self.round.running()
    }

    /// Pages moved since start or `stats reset` (`slabs_moved`).
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// Starts freeing a page over `workers` workers; false (nothing started) while a move
    /// runs. With `workers` 0 (a free page given to a class: nothing to free) the move is
    /// done at once.
    pub fn start(&self, workers: usize) -> bool {
        if !self.round.start(workers) {
            return false;
        }
        if workers == 0 {
            self.moved.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// A worker freed its share of the page being moved; the last one completes the move
    /// (counted before the move stops running, so whoever sees it stopped sees it counted).
    pub fn finished(&self) {
        self.round.finished(|| {
            self.moved.fetch_add(1, Ordering::Relaxed);
        });
    }
}

/// One piece of work every worker does its share of, at most one at a time (a requested
/// crawl, a page move): started by bumping [`WorkerRound::requested`], which each worker's
/// loop compares with the last round it saw; done when the last worker says it finished.
#[derive(Debug, Default)]
struct WorkerRound {
    requested: AtomicU64,
    running: AtomicUsize,
}

impl WorkerRound {
    /// Rounds requested since start.
    #[inline]
    fn requested(&self) -> u64 {
        self.requested.load(Ordering::Acquire)
    }

    /// True while some worker has not finished its share of the round.
    fn running(&self) -> bool {
        self.running.load(Ordering::Acquire) > 0
    }

    /// Starts a round over `workers` workers; false (nothing started) while one runs. With
    /// `workers` 0 nothing is requested: the round is done as it starts.
    fn start(&self, workers: usize) -> bool {
        if self
            .running
            .compare_exchange(0, workers, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        if workers > 0 {
            self.requested.fetch_add(1, Ordering::AcqRel);
        }
        true
    }

    /// A worker finished its share. The last one runs `done` before the round stops
    /// running: what `done` writes is seen by whoever sees [`WorkerRound::running`] false.
    fn finished(&self, done: impl FnOnce()) {
        let not_last = self
            .running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 1).then(|| n - 1)
            });
        if not_last == Err(1) {
            // Every other worker has finished its share, and no round starts while this one
            // runs: nothing else writes the count until it is 0.
            done();
            self.running.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: the last worker of a page move counted it after the move stopped running,
    // so a `stats` reply could say it had stopped with `slabs_moved` still 0.
    #[test]
    fn the_last_worker_of_a_round_finishes_it_while_it_still_runs() {
        let round = WorkerRound::default();
        assert!(round.start(2));
        assert!(!round.start(1), "one round at a time");
        let mut last = Vec::new();
        round.finished(|| last.push(round.running()));
        assert!(round.running() && last.is_empty());
        round.finished(|| last.push(round.running()));
        assert_eq!(last, [true]);
        assert!(!round.running());
        let moves = PageMoves::default();
        assert!(moves.start(2));
        moves.finished();
        assert_eq!((moves.running(), moves.moved()), (true, 0));
        moves.finished();
        assert_eq!((moves.running(), moves.moved()), (false, 1));
        assert!(moves.start(0), "a page the pool gives: nothing to free");
        assert_eq!((moves.running(), moves.moved()), (false, 2));
    }
}
