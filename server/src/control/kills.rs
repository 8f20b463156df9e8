//! Connections another worker asked to close (Redis's `CLIENT KILL`).
//!
//! A connection belongs to one worker: only that worker's packet path may close it. The
//! asking worker finds it in the connection registry and leaves its token here, under its
//! worker's number; each worker looks at the top of its loop (one relaxed load while nothing
//! is asked), marks each of its own connections named here closing and gives it a turn, which
//! sends what it owes and closes it.
//!
//! ```text
//! CLIENT KILL (worker a) ─▶ Kills::request(b, token) ─▶ worker b's loop: drain(b) ─▶ close, turn
//! ```
//!
//! A token whose connection went meanwhile names nothing: the table finds no connection for
//! it and the request is dropped.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Close requests, by worker.
#[derive(Debug, Default)]
pub struct Kills {
    /// True while a request waits (a hint: the list decides).
    any: AtomicBool,
    /// `(worker, token)` of each connection to close.
    list: Mutex<Vec<(usize, u128)>>,
}

impl Kills {
    /// Asks `worker` to close its connection `token`. A connection already asked for is not
    /// listed again, so the list never holds more than the connections there are, however
    /// many `CLIENT KILL`s name one before its worker's next turn.
    pub fn request(&self, worker: usize, token: u128) {
        if let Ok(mut list) = self.list.lock() {
            if !list.contains(&(worker, token)) {
                list.push((worker, token));
            }
            self.any.store(true, Ordering::Release);
        }
    }

    /// True when some worker has a request waiting.
    #[inline]
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// Hands `close` the token of each connection `worker` was asked to close, once.
    pub fn drain(&self, worker: usize, mut close: impl FnMut(u128)) {
        if !self.any() {
            return;
        }
        let mine: Vec<u128> = {
            let Ok(mut list) = self.list.lock() else {
                return;
            };
            let mut mine = Vec::new();
            list.retain(|&(w, token)| {
                if w == worker {
                    mine.push(token);
                }
                w != worker
            });
            self.any.store(!list.is_empty(), Ordering::Release);
            mine
        };
        for token in mine {
            close(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_takes_its_own_requests_once() {
        let kills = Kills::default();
        assert!(!kills.any());
        kills.request(1, 10);
        kills.request(0, 20);
        kills.request(1, 30);
        kills.request(1, 10);
        assert!(kills.any());
        let mut taken = Vec::new();
        kills.drain(1, |token| taken.push(token));
        assert_eq!(taken, [10, 30]);
        assert!(kills.any(), "worker 0's request waits");
        kills.drain(1, |_| panic!("taken once"));
        kills.drain(0, |token| taken.push(token));
        assert_eq!(taken, [10, 30, 20]);
        assert!(!kills.any());
    }
}
