//! What every worker shares at run time: the settings fixed at start-up, the switches admin
//! commands flip (`verbosity`, `stats detail on|off`, `stats sizes_enable`, `slabs automove`,
//! `lru_crawler enable|disable|sleep|tocrawl`, `cache_memlimit`), the background work they
//! ask every worker for (a crawl, a page freed for `slabs reassign`), the stop flag
//! `shutdown` sets, connection numbers and records, and the log watchers (`watch`).
//!
//! ```text
//! main ─▶ Settings ─▶ Control (one Arc, in every EngineConfig)
//!   admin commands (any worker) ─▶ atomics: verbosity, detail, sizes, automove, crawler,
//!                                  memory budget; stop flag
//!   lru_crawler crawl, slabs reassign ─▶ a request count ─▶ each worker's loop sees it, does
//!                                  its share in bounded steps, says when it is done
//!   each worker's loop ─▶ its shard's heap, items and budget ─▶ `slabs reassign`'s page count
//!   connections ─▶ ConnRecord (number, peer, last command) ─▶ `stats conns`, connevents,
//!                  Redis's `CLIENT LIST`; `CLIENT KILL` ─▶ Kills ─▶ the owner's loop closes it
//!   events (any worker) ─▶ Watchers: one buffer per watcher ─▶ the watcher's worker sends it
//!   a Redis transaction over several workers ─▶ Holds: one token, each worker's slot
//! ```
//!
//! Nothing here is on a request's path unless an operator asked for it: a worker looks at the
//! watchers' event mask (one relaxed load) before it formats an event, and takes the hub's
//! lock only when some watcher wants that event.
//!
//! [`Control`] and its switches live here; each shared mechanism has its own module:
//! `settings` (fixed at start-up), `records` (connection records and their close events),
//! `kills` (close requests for another worker's connections), `holds` (cross-worker
//! transactions), `watch` (log watchers and the key encoding of their lines), `background` (the crawler and
//! page moves, rounds every worker does its share of) and `clock` (the monotonic time base).

mod background;
mod clock;
mod databases;
pub mod holds;
mod kills;
mod records;
mod settings;
mod watch;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use store::Now;

pub use background::{CRAWLER_SLEEP_DEFAULT_US, Crawler, PageMoves};
pub use clock::{monotonic_ns, monotonic_ns_at};
pub use databases::DbMap;
pub use holds::Holds;
pub use kills::Kills;
use records::split_addr;
pub use records::{ClientFields, CloseReason, ConnRecord, ConnState, conn_addr};
pub use settings::Settings;
use watch::DETAIL_BIT;
pub use watch::{
    EventKind, MAX_WATCHERS, WATCHER_BUFFER_BYTES, WatchRefused, Watchers, uri_encode,
};

/// The highest `verbosity` (and `-vvv`): every event memspin logs.
pub const MAX_VERBOSITY: u8 = 3;

/// What a worker last published about its shard, for the commands another worker answers
/// (`slabs reassign` counts pages over every shard). Each worker's on cache lines of its own:
/// workers write theirs from their loops, and must not take each other's lines away.
#[derive(Debug, Default)]
#[repr(align(128))]
struct ShardFigures {
    heap_bytes: AtomicU64,
    items: AtomicU64,
    limit_bytes: AtomicU64,
}

/// Every shard's published figures summed: `(heap bytes, items, budget bytes)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryFigures {
    /// Bytes items and tables take.
    pub heap_bytes: u64,
    /// Items held.
    pub items: u64,
    /// The budgets.
    pub limit_bytes: u64,
}

/// The state every worker shares (see the module docs).
#[derive(Debug, Default)]
pub struct Control {
    /// Fixed at start-up.
    pub settings: Settings,
    /// What each Redis database number means (`SWAPDB`).
    pub databases: DbMap,
    /// The log watchers.
    pub watchers: Watchers,
    /// Connections another worker asked to close (`CLIENT KILL`).
    pub kills: Kills,
    /// Cross-worker transactions: the token and each worker's hold (`holds`).
    pub holds: Holds,
    /// The LRU crawler.
    pub crawler: Crawler,
    /// `slabs reassign`'s page moves.
    pub pages: PageMoves,
    /// The whole memory budget (`-m`, then `cache_memlimit`); 0: the workers' own.
    memory_limit_bytes: AtomicU64,
    /// Each worker's shard figures, as it last published them.
    shards: Vec<ShardFigures>,
    verbosity: AtomicU8,
    sizes_disabled: AtomicBool,
    automove: AtomicU8,
    automove_ratio_bits: AtomicU64,
    next_number: AtomicU64,
    stop: OnceLock<Arc<AtomicBool>>,
    shutdown_requested: AtomicBool,
    path: OnceLock<Vec<(&'static str, String)>>,
    /// The ports bound (memcached's, RESP's) when the packet path picked them (port 0).
    bound: OnceLock<(u16, Option<u16>)>,
    registry: Mutex<Vec<Weak<ConnRecord>>>,
    /// The latency instrument's clock; `None`: [`monotonic_ns`].
    clock: Option<fn() -> u64>,
    /// Each worker's table size in buckets, as it last published it (`lru_crawler metadump`
    /// walks other workers' tables in slices of buckets).
    table_buckets: Vec<AtomicUsize>,
}

/// Workers whose table sizes [`Control`] keeps (`-t` allows at most 256).
const MAX_WORKERS: usize = 256;

impl Control {
    /// Shared state for a server with these settings, logging at `verbosity`.
    pub fn new(settings: Settings, verbosity: u8) -> Arc<Control> {
        let control = Control {
            memory_limit_bytes: AtomicU64::new(settings.memory_limit_bytes),
            settings,
            automove_ratio_bits: AtomicU64::new(0.8f64.to_bits()),
            table_buckets: (0..MAX_WORKERS).map(|_| AtomicUsize::new(0)).collect(),
            shards: (0..MAX_WORKERS).map(|_| ShardFigures::default()).collect(),
            ..Control::default()
        };
        control.set_verbosity(u32::from(verbosity));
        Arc::new(control)
    }

    /// Publishes worker `worker`'s table size (buckets), for other workers' metadumps.
    pub fn publish_table_buckets(&self, worker: usize, buckets: usize) {
        if let Some(slot) = self.table_buckets.get(worker) {
            slot.store(buckets, Ordering::Release);
        }
    }

    /// Worker `worker`'s table size in buckets, as last published.
    pub fn table_buckets(&self, worker: usize) -> usize {
        self.table_buckets
            .get(worker)
            .map_or(0, |slot| slot.load(Ordering::Acquire))
    }

    /// Publishes worker `worker`'s shard figures (its loop does, when they changed: three
    /// relaxed stores to a cache line of its own).
    #[inline]
    pub fn publish_shard(&self, worker: usize, figures: MemoryFigures) {
        if let Some(slot) = self.shards.get(worker) {
            slot.heap_bytes.store(figures.heap_bytes, Ordering::Relaxed);
            slot.items.store(figures.items, Ordering::Relaxed);
            slot.limit_bytes
                .store(figures.limit_bytes, Ordering::Relaxed);
        }
    }

    /// The first `workers` workers' shard figures as last published, summed.
    pub fn memory_figures(&self, workers: usize) -> MemoryFigures {
        let mut sum = MemoryFigures::default();
        for slot in self.shards.iter().take(workers) {
            sum.heap_bytes += slot.heap_bytes.load(Ordering::Relaxed);
            sum.items += slot.items.load(Ordering::Relaxed);
            sum.limit_bytes += slot.limit_bytes.load(Ordering::Relaxed);
        }
        sum
    }

    /// The whole memory budget in bytes (`-m`, or the last `cache_memlimit`); 0 when the
    /// workers were given their own (an engine built without settings).
    #[inline]
    pub fn memory_limit_bytes(&self) -> u64 {
        self.memory_limit_bytes.load(Ordering::Relaxed)
    }

    /// `cache_memlimit`: the whole budget from now on; each worker takes its share on its
    /// next loop iteration.
    pub fn set_memory_limit_bytes(&self, bytes: u64) {
        self.memory_limit_bytes.store(bytes, Ordering::Relaxed);
    }

    /// `stats reset` of the counters kept here: crawls started and pages moved.
    pub fn reset_counters(&self) {
        self.crawler.starts.store(0, Ordering::Relaxed);
        self.pages.moved.store(0, Ordering::Relaxed);
    }

    /// The same, with the latency instrument reading `clock` (tests: a clock they drive).
    pub fn with_clock(settings: Settings, clock: fn() -> u64) -> Arc<Control> {
        let control = Control {
            memory_limit_bytes: AtomicU64::new(settings.memory_limit_bytes),
            settings,
            automove_ratio_bits: AtomicU64::new(0.8f64.to_bits()),
            clock: Some(clock),
            table_buckets: (0..MAX_WORKERS).map(|_| AtomicUsize::new(0)).collect(),
            shards: (0..MAX_WORKERS).map(|_| ShardFigures::default()).collect(),
            ..Control::default()
        };
        Arc::new(control)
    }

    /// The latency instrument's clock reading, in [`monotonic_ns`]'s time base.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self.clock {
            Some(clock) => clock(),
            None => monotonic_ns(),
        }
    }

    /// The logging level (`-v` count, `verbosity`): 0 to [`MAX_VERBOSITY`].
    pub fn verbosity(&self) -> u8 {
        self.verbosity.load(Ordering::Relaxed)
    }

    /// Sets the logging level (clamped to [`MAX_VERBOSITY`]), for every worker.
    pub fn set_verbosity(&self, level: u32) {
        let level = level.min(u32::from(MAX_VERBOSITY)) as u8;
        self.verbosity.store(level, Ordering::Relaxed);
        crate::logging::set_verbosity(level);
    }

    /// The `verbosity` command: sets the level and logs the change at the more verbose of the
    /// two levels (so `verbosity 0` is seen by whoever logged at 2).
    pub fn change_verbosity(&self, level: u32) {
        if level < u32::from(self.verbosity()) {
            log::info!("verbosity {level}");
            self.set_verbosity(level);
        } else {
            self.set_verbosity(level);
            log::info!("verbosity {level}");
        }
    }

    /// Whether `stats detail` counts per key prefix.
    #[inline]
    pub fn detail(&self) -> bool {
        self.watchers.mask.load(Ordering::Relaxed) & DETAIL_BIT != 0
    }

    /// Whether reads are observed: `stats detail` is on or a watcher wants `fetchers` (one
    /// relaxed load, on every read).
    #[inline]
    pub fn observes_reads(&self) -> bool {
        self.watchers.mask.load(Ordering::Relaxed) & (DETAIL_BIT | EventKind::Fetchers as u32) != 0
    }

    /// `stats detail on|off`.
    pub fn set_detail(&self, on: bool) {
        if on {
            self.watchers.mask.fetch_or(DETAIL_BIT, Ordering::Relaxed);
        } else {
            self.watchers.mask.fetch_and(!DETAIL_BIT, Ordering::Relaxed);
        }
    }

    /// Whether `stats sizes` answers with the histogram (the default; `stats sizes_disable`
    /// turns it off).
    pub fn sizes(&self) -> bool {
        !self.sizes_disabled.load(Ordering::Relaxed)
    }

    /// `stats sizes_enable` / `stats sizes_disable`.
    pub fn set_sizes(&self, on: bool) {
        self.sizes_disabled.store(!on, Ordering::Relaxed);
    }

    /// `slabs automove`'s level and ratio, as `stats settings` reports them.
    pub fn automove(&self) -> (u8, f64) {
        (
            self.automove.load(Ordering::Relaxed),
            f64::from_bits(self.automove_ratio_bits.load(Ordering::Relaxed)),
        )
    }

    /// `slabs automove <level>`.
    pub fn set_automove(&self, level: u8) {
        self.automove.store(level, Ordering::Relaxed);
    }

    /// `slabs automove ratio <ratio>`.
    pub fn set_automove_ratio(&self, ratio: f64) {
        self.automove_ratio_bits
            .store(ratio.to_bits(), Ordering::Relaxed);
    }

    /// Gives `shutdown` the process's stop flag (the one SIGINT and SIGTERM set).
    pub fn set_stop(&self, stop: Arc<AtomicBool>) {
        let _ = self.stop.set(stop);
    }

    /// `shutdown`: asks every worker to stop, as SIGINT does. False if there is no stop flag.
    pub fn request_shutdown(&self) -> bool {
        self.shutdown_requested.store(true, Ordering::SeqCst);
        match self.stop.get() {
            Some(stop) => {
                stop.store(true, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// True once `shutdown` was accepted.
    pub fn shutdown_requested(&self) -> bool {
        self.shutdown_requested.load(Ordering::SeqCst)
    }

    /// Records the packet path's own settings (`memspin_*` lines of `stats settings`); the
    /// first call wins.
    pub fn set_path_settings(&self, lines: Vec<(&'static str, String)>) {
        let _ = self.path.set(lines);
    }

    /// Records the ports the packet path bound (memcached's, RESP's), when it was asked for any
    /// free one (port 0); the first call wins.
    pub fn set_bound_ports(&self, tcp: u16, resp: Option<u16>) {
        let _ = self.bound.set((tcp, resp));
    }

    /// The memcached port served: the one bound, else `-p`.
    pub fn tcp_port(&self) -> u16 {
        self.bound.get().map_or(self.settings.tcp_port, |b| b.0)
    }

    /// The RESP port served, if any: the one bound, else `--resp-port`.
    pub fn resp_port(&self) -> Option<u16> {
        self.bound.get().map_or(self.settings.resp_port, |b| b.1)
    }

    /// The packet path's own settings.
    pub fn path_settings(&self) -> &[(&'static str, String)] {
        self.path.get().map_or(&[], Vec::as_slice)
    }

    /// The listeners `stats conns` lists: one per worker, and one more per worker when Redis
    /// clients are served.
    pub fn listeners(&self) -> u64 {
        let workers = self.settings.cpus.len().max(1) as u64;
        workers * (1 + u64::from(self.settings.resp_port.is_some()))
    }

    /// A record for a new connection on `worker`, numbered after the listeners (numbers
    /// `0..listeners` name the workers' listeners in `stats conns`), and kept in the registry
    /// `stats conns` lists; logs it and tells `watch connevents`.
    pub fn open_connection(
        self: &Arc<Self>,
        worker: usize,
        peer: Option<SocketAddr>,
        local: Option<SocketAddr>,
        now: Now,
    ) -> Arc<ConnRecord> {
        let number = self.allocate_number();
        let record = Arc::new(ConnRecord {
            number,
            worker,
            peer,
            local,
            token: OnceLock::new(),
            opened_ms: now.millis(),
            last_cmd_ms: AtomicU64::new(now.millis()),
            client: Default::default(),
            state: AtomicU8::new(ConnState::ParseCmd as u8),
            close_reason: AtomicU8::new(CloseReason::Normal as u8),
            control: Arc::clone(self),
        });
        if let Ok(mut registry) = self.registry.lock() {
            // Drop the records of closed connections now and then, so the list stays near
            // the number of open ones.
            if registry.len() >= 64 && registry.len().is_power_of_two() {
                registry.retain(|weak| weak.strong_count() > 0);
            }
            registry.push(Arc::downgrade(&record));
        }
        log::debug!(
            "<{number} new client connection from {} (worker {worker})",
            peer.map_or("-".to_string(), |p| p.to_string())
        );
        if self.watchers.wants(EventKind::ConnEvents) {
            self.watchers.publish(EventKind::ConnEvents, now, |line| {
                let (ip, port) = split_addr(peer);
                let _ = write!(
                    line,
                    "type=conn_new rip={ip} rport={port} transport=tcp cfd={number}"
                );
            });
        }
        record
    }

    /// A connection number unique in this process, after the listeners' (the numbers
    /// `stats conns`, `watch` lines, the logs and Redis's `CLIENT ID` give connections: one
    /// space for all).
    pub fn allocate_number(&self) -> u64 {
        self.listeners() + self.next_number.fetch_add(1, Ordering::Relaxed)
    }

    /// Every open connection's record, in the order they opened.
    pub fn connections(&self) -> Vec<Arc<ConnRecord>> {
        let Ok(mut registry) = self.registry.lock() else {
            return Vec::new();
        };
        registry.retain(|weak| weak.strong_count() > 0);
        registry.iter().filter_map(Weak::upgrade).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;

    #[test]
    fn records_list_open_connections_and_log_their_close_to_watchers() {
        let control = Control::new(Settings::default(), 0);
        let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let a = control.open_connection(0, Some(peer), None, Now::from(NOW));
        control
            .watchers
            .add(a.number, 0, 7, EventKind::ConnEvents as u32)
            .unwrap();
        let b = control.open_connection(1, Some(peer), None, Now::from(NOW));
        assert_eq!(b.number, a.number + 1);
        assert_eq!(control.connections().len(), 2);
        b.closing(CloseReason::Error);
        drop(b);
        assert_eq!(control.connections().len(), 1);
        let mut got = Vec::new();
        control.watchers.drain(0, |token, bytes| {
            assert_eq!(token, 7);
            got.extend_from_slice(bytes);
            bytes.len()
        });
        let text = String::from_utf8(got).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].ends_with(&format!(
                "type=conn_new rip=10.0.0.1 rport=4000 transport=tcp cfd={}",
                a.number + 1
            )),
            "{text}"
        );
        assert!(
            lines[1].contains("type=conn_close rip=10.0.0.1 rport=4000 transport=tcp reason=error")
        );
        // A watcher that goes stops the events.
        drop(a);
        assert!(!control.watchers.any());
    }

    #[test]
    fn a_full_watcher_skips_lines_and_is_told_how_many() {
        let control = Control::new(Settings::default(), 0);
        control
            .watchers
            .add(1, 0, 1, EventKind::Fetchers as u32)
            .unwrap();
        let now = Now::from(NOW);
        let body = "x".repeat(1000);
        let mut published = 0;
        while control.watchers.figures().1 < 3 {
            control
                .watchers
                .publish(EventKind::Fetchers, now, |l| l.push_str(&body));
            published += 1;
        }
        // Mutations are not wanted: nothing is published.
        control
            .watchers
            .publish(EventKind::Mutations, now, |l| l.push_str("no"));
        let (sent, skipped, watchers) = control.watchers.figures();
        assert_eq!((sent + skipped, watchers), (published, 1));
        let mut total = 0;
        control.watchers.drain(0, |_, bytes| {
            total += bytes.len();
            bytes.len()
        });
        assert!(total <= WATCHER_BUFFER_BYTES);
        control
            .watchers
            .publish(EventKind::Fetchers, now, |l| l.push_str("after"));
        let mut text = Vec::new();
        control.watchers.drain(0, |_, bytes| {
            text.extend_from_slice(bytes);
            bytes.len()
        });
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.starts_with("skipped=3\nts=1700000000.0 gid="),
            "{text}"
        );
        assert!(text.ends_with(" after\n"));
    }

    #[test]
    fn watchers_are_bounded() {
        let control = Control::new(Settings::default(), 0);
        for n in 0..MAX_WATCHERS as u64 {
            control.watchers.add(n, 0, 0, 1).unwrap();
        }
        assert_eq!(
            control.watchers.add(99, 0, 0, 1),
            Err(WatchRefused::TooMany)
        );
    }

    #[test]
    fn shutdown_sets_the_stop_flag() {
        let control = Control::new(Settings::default(), 0);
        assert!(!control.request_shutdown(), "no flag yet");
        let stop = Arc::new(AtomicBool::new(false));
        control.set_stop(Arc::clone(&stop));
        assert!(control.request_shutdown());
        assert!(stop.load(Ordering::SeqCst) && control.shutdown_requested());
    }
}
