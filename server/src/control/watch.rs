//! Log watchers (`watch`): each watcher has a buffer of lines waiting for its own worker to
//! send them, bounded at [`WATCHER_BUFFER_BYTES`]; one word (the event mask) tells every worker
//! whether anyone wants an event before it formats one.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use store::Now;

/// Bytes of log lines one watcher may have waiting; lines past it are skipped (counted in
/// `log_watcher_skipped`), as memcached's `watcher_logbuf_size` does.
pub const WATCHER_BUFFER_BYTES: usize = 256 * 1024;

/// Watchers at once, over all workers (memcached allows 20).
pub const MAX_WATCHERS: usize = 20;

/// Event kinds a watcher asks for (`watch fetchers mutations evictions connevents`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum EventKind {
    /// Items looked up: `type=item_get`.
    Fetchers = 1,
    /// Items stored, or refused: `type=item_store`.
    Mutations = 2,
    /// Live items evicted: `type=eviction`.
    Evictions = 4,
    /// Connections opened and closed: `type=conn_new`, `type=conn_close`.
    ConnEvents = 8,
}

impl EventKind {
    /// The kind a `watch` argument names.
    pub fn from_arg(arg: &[u8]) -> Option<EventKind> {
        Some(match arg {
            b"fetchers" => EventKind::Fetchers,
            b"mutations" => EventKind::Mutations,
            b"evictions" => EventKind::Evictions,
            b"connevents" => EventKind::ConnEvents,
            _ => return None,
        })
    }
}

/// One watcher: the connection it is, what it asked for, and its lines waiting to be sent.
#[derive(Debug)]
struct Watcher {
    number: u64,
    worker: usize,
    token: u128,
    kinds: u32,
    pending: VecDeque<u8>,
    skipped: u64,
}

/// The bit of [`Watchers`]' mask that says `stats detail` is on: reads check one word for
/// both.
pub(super) const DETAIL_BIT: u32 = 1 << 16;

/// The bits of [`Watchers`]' mask that watchers set.
const WATCH_BITS: u32 = 0xffff;

/// The log watchers of every worker, and the counters `stats` reports for them.
#[derive(Debug, Default)]
pub struct Watchers {
    /// The union of the kinds watchers asked for (0 when none watches), and [`DETAIL_BIT`].
    pub(super) mask: AtomicU32,
    /// Every watcher.
    list: Mutex<Vec<Watcher>>,
    /// The last log line's global id.
    gid: AtomicU64,
    /// Lines written into watchers' buffers.
    sent: AtomicU64,
    /// Lines dropped because a watcher's buffer was full.
    skipped: AtomicU64,
}

/// Why a connection could not become a watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchRefused {
    /// [`MAX_WATCHERS`] watch already.
    TooMany,
}

impl Watchers {
    /// True when some watcher wants events of `kind` (a relaxed load: the hot path's check).
    #[inline]
    pub fn wants(&self, kind: EventKind) -> bool {
        self.mask.load(Ordering::Relaxed) & kind as u32 != 0
    }

    /// True when any watcher is registered.
    #[inline]
    pub fn any(&self) -> bool {
        self.mask.load(Ordering::Relaxed) & WATCH_BITS != 0
    }

    /// Makes connection `number` (packet token `token`, on `worker`) a watcher of `kinds`.
    ///
    /// # Errors
    /// [`WatchRefused::TooMany`] when [`MAX_WATCHERS`] watch already.
    pub fn add(
        &self,
        number: u64,
        worker: usize,
        token: u128,
        kinds: u32,
    ) -> Result<(), WatchRefused> {
        let Ok(mut list) = self.list.lock() else {
            return Err(WatchRefused::TooMany);
        };
        if list.len() >= MAX_WATCHERS {
            return Err(WatchRefused::TooMany);
        }
        list.retain(|w| w.number != number);
        list.push(Watcher {
            number,
            worker,
            token,
            kinds,
            pending: VecDeque::new(),
            skipped: 0,
        });
        self.update_mask(&list);
        Ok(())
    }

    /// Removes connection `number`'s watch, if it had one.
    pub fn forget(&self, number: u64) {
        if !self.any() {
            return;
        }
        if let Ok(mut list) = self.list.lock() {
            let before = list.len();
            list.retain(|w| w.number != number);
            if list.len() != before {
                self.update_mask(&list);
            }
        }
    }

    fn update_mask(&self, list: &[Watcher]) {
        let kinds = list.iter().fold(0, |m, w| m | w.kinds) & WATCH_BITS;
        // Keep the detail bit as it is (the list's lock is held: no watcher changes meanwhile).
        let _ = self
            .mask
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                Some((m & !WATCH_BITS) | kinds)
            });
    }

    /// Writes one event line (`ts=... gid=... ` and what `body` writes) to every watcher of
    /// `kind`; a watcher whose buffer is full skips it.
    pub fn publish(&self, kind: EventKind, now: Now, body: impl FnOnce(&mut String)) {
        let gid = self.gid.fetch_add(1, Ordering::Relaxed) + 1;
        let millis = now.millis();
        // memcached prints the microseconds without padding (`%d`).
        let mut line = format!("ts={}.{} gid={gid} ", millis / 1000, (millis % 1000) * 1000);
        body(&mut line);
        line.push('\n');
        let Ok(mut list) = self.list.lock() else {
            return;
        };
        for watcher in list.iter_mut().filter(|w| w.kinds & kind as u32 != 0) {
            if watcher.pending.len() + line.len() > WATCHER_BUFFER_BYTES {
                watcher.skipped += 1;
                self.skipped.fetch_add(1, Ordering::Relaxed);
            } else {
                if watcher.skipped > 0 {
                    // memcached tells a watcher how many lines it missed.
                    let note = format!("skipped={}\n", watcher.skipped);
                    watcher.pending.extend(note.as_bytes());
                    watcher.skipped = 0;
                }
                watcher.pending.extend(line.as_bytes());
                self.sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Hands each watcher of `worker` the bytes waiting for it through `take(token, bytes)`,
    /// which returns how many it took (it may take fewer while the connection's output is
    /// backed up).
    pub fn drain(&self, worker: usize, mut take: impl FnMut(u128, &[u8]) -> usize) {
        if !self.any() {
            return;
        }
        let Ok(mut list) = self.list.lock() else {
            return;
        };
        for watcher in list.iter_mut().filter(|w| w.worker == worker) {
            while !watcher.pending.is_empty() {
                let (front, _) = watcher.pending.as_slices();
                let offered = front.len();
                let taken = take(watcher.token, front).min(offered);
                watcher.pending.drain(..taken);
                if taken < offered || taken == 0 {
                    break;
                }
            }
        }
    }

    /// `(lines sent, lines skipped, watchers)` for `stats`.
    pub fn figures(&self) -> (u64, u64, u64) {
        let watchers = self.list.lock().map_or(0, |l| l.len() as u64);
        (
            self.sent.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed),
            watchers,
        )
    }
}

/// Appends `key` URI-encoded, as memcached writes keys in log lines and `lru_crawler
/// metadump`: letters, digits and `-._~` as they are, every other byte as `%XX`.
pub fn uri_encode(out: &mut String, key: &[u8]) {
    for &byte in key {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_uri_encoded_as_memcached_writes_them() {
        let mut s = String::new();
        uri_encode(&mut s, b"foo:bar baz-1.2_3~/%\x01");
        assert_eq!(s, "foo%3Abar%20baz-1.2_3~%2F%25%01");
    }
}
