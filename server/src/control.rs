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
//!   connections ─▶ ConnRecord (number, peer, last command) ─▶ `stats conns`, connevents
//!   events (any worker) ─▶ Watchers: one buffer per watcher ─▶ the watcher's worker sends it
//! ```
//!
//! Nothing here is on a request's path unless an operator asked for it: a worker looks at the
//! watchers' event mask (one relaxed load) before it formats an event, and takes the hub's
//! lock only when some watcher wants that event.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use store::Now;

/// The highest `verbosity` (and `-vvv`): every event memspin logs.
pub const MAX_VERBOSITY: u8 = 3;

/// Bytes of log lines one watcher may have waiting; lines past it are skipped (counted in
/// `log_watcher_skipped`), as memcached's `watcher_logbuf_size` does.
pub const WATCHER_BUFFER_BYTES: usize = 256 * 1024;

/// Watchers at once, over all workers (memcached allows 20).
pub const MAX_WATCHERS: usize = 20;

/// Settings fixed at start-up, for `stats settings` and the admin commands that depend on
/// them.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The whole memory budget in bytes (`-m`; every shard has its share); 0: take the
    /// workers' own figures.
    pub memory_limit_bytes: u64,
    /// The TCP port served (`-p`).
    pub tcp_port: u16,
    /// The RESP port served (`--resp-port`), if Redis clients are.
    pub resp_port: Option<u16>,
    /// The address served: `-l` on kernel sockets, `--ip` on the bypass paths.
    pub interface: String,
    /// `-M`: refuse stores instead of evicting when memory is full.
    pub no_evictions: bool,
    /// `-A`: the `shutdown` command may stop the server.
    pub shutdown_enabled: bool,
    /// `--idle-timeout` in seconds (0: off).
    pub idle_timeout_secs: u32,
    /// The packet path (`--net`): `tap`, `xdp` or `kernel`.
    pub net: &'static str,
    /// The idle policy (`--idle`, or its default for the path): `spin`, `park` or `adaptive`.
    pub idle: &'static str,
    /// The CPU of each worker.
    pub cpus: Vec<usize>,
    /// Loss recovery's floor (`--rto-min`, e.g. `1ms` or `off`) on the smoltcp paths; `None`
    /// on kernel sockets, where the kernel's TCP recovers.
    pub rto_min: Option<String>,
}

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

/// Why a connection ended, as `watch connevents` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CloseReason {
    /// The client closed it, or asked to (`quit`), or the server closed it otherwise.
    Normal = 0,
    /// A malformed request, or a socket error.
    Error = 1,
    /// The server is stopping (`shutdown`).
    Shutdown = 2,
}

impl CloseReason {
    fn as_str(self) -> &'static str {
        match self {
            CloseReason::Normal => "normal",
            CloseReason::Error => "error",
            CloseReason::Shutdown => "shutdown",
        }
    }

    fn from_u8(byte: u8) -> CloseReason {
        match byte {
            1 => CloseReason::Error,
            2 => CloseReason::Shutdown,
            _ => CloseReason::Normal,
        }
    }
}

/// What a connection is doing, as `stats conns` names it (memcached's connection states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    /// Waiting for, or reading, a request.
    ParseCmd = 0,
    /// A refused value or frame is being read and dropped.
    Nread = 1,
    /// A watcher: log lines are sent to it.
    Watch = 2,
}

impl ConnState {
    fn as_str(self) -> &'static str {
        match self {
            ConnState::ParseCmd => "conn_parse_cmd",
            ConnState::Nread => "conn_nread",
            ConnState::Watch => "conn_watch",
        }
    }

    fn from_u8(byte: u8) -> ConnState {
        match byte {
            1 => ConnState::Nread,
            2 => ConnState::Watch,
            _ => ConnState::ParseCmd,
        }
    }
}

/// One client connection as the operator sees it: its number, addresses and last command.
/// Held by the connection's session; when the connection goes, so does the record, which logs
/// the close (and tells `watch connevents`).
#[derive(Debug)]
pub struct ConnRecord {
    /// The connection's number, unique in this process (memcached shows its socket's fd).
    pub number: u64,
    /// The worker serving it.
    pub worker: usize,
    /// The client's address and port.
    pub peer: Option<SocketAddr>,
    /// The address and port it connected to.
    pub local: Option<SocketAddr>,
    /// Unix milliseconds of its last request (its opening until one arrives).
    last_cmd_ms: AtomicU64,
    state: AtomicU8,
    close_reason: AtomicU8,
    control: Arc<Control>,
}

impl ConnRecord {
    /// Notes that requests were executed at `now`, leaving the connection in `state`.
    pub fn touch(&self, now: Now, state: ConnState) {
        self.last_cmd_ms.store(now.millis(), Ordering::Relaxed);
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// Notes the connection's state.
    pub fn set_state(&self, state: ConnState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// The connection's state.
    pub fn state(&self) -> ConnState {
        ConnState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Records why the server closes this connection (the close is logged when it goes).
    pub fn closing(&self, reason: CloseReason) {
        self.close_reason.store(reason as u8, Ordering::Relaxed);
    }

    /// The `stats conns` lines of this connection, as of `now`.
    pub fn stats_lines(&self, now: Now, mut emit: impl FnMut(&str, &dyn std::fmt::Display)) {
        let n = self.number;
        if let Some(peer) = self.peer {
            emit(&format!("{n}:addr"), &conn_addr(peer));
        }
        if let Some(local) = self.local {
            emit(&format!("{n}:listen_addr"), &conn_addr(local));
        }
        emit(&format!("{n}:state"), &self.state().as_str());
        let last = self.last_cmd_ms.load(Ordering::Relaxed);
        emit(
            &format!("{n}:secs_since_last_cmd"),
            &(now.millis().saturating_sub(last) / 1000),
        );
    }
}

impl Drop for ConnRecord {
    fn drop(&mut self) {
        let reason = CloseReason::from_u8(self.close_reason.load(Ordering::Relaxed));
        log::debug!(
            "<{} connection closed ({}, {})",
            self.number,
            self.peer.map_or("-".to_string(), |p| p.to_string()),
            reason.as_str()
        );
        let watchers = &self.control.watchers;
        if watchers.wants(EventKind::ConnEvents) {
            let now = Now::from_millis(unix_millis());
            watchers.publish(EventKind::ConnEvents, now, |line| {
                let (ip, port) = split_addr(self.peer);
                let _ = write!(
                    line,
                    "type=conn_close rip={ip} rport={port} transport=tcp reason={} cfd={}",
                    reason.as_str(),
                    self.number
                );
            });
        }
        watchers.forget(self.number);
    }
}

/// A socket address as memcached's `stats conns` writes it: `tcp:<ip>:<port>`, or for IPv6
/// `tcp6:[<ip>]:<port>`.
pub fn conn_addr(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("tcp:{a}"),
        SocketAddr::V6(a) => format!("tcp6:[{}]:{}", a.ip(), a.port()),
    }
}

/// The wall clock in unix milliseconds, for events that happen outside a request (a
/// connection's close); requests use the worker's clock.
fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn split_addr(addr: Option<SocketAddr>) -> (String, u16) {
    addr.map_or(("unknown".to_string(), 0), |a| {
        (a.ip().to_string(), a.port())
    })
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
const DETAIL_BIT: u32 = 1 << 16;

/// The bits of [`Watchers`]' mask that watchers set.
const WATCH_BITS: u32 = 0xffff;

/// The log watchers of every worker, and the counters `stats` reports for them.
#[derive(Debug, Default)]
pub struct Watchers {
    /// The union of the kinds watchers asked for (0 when none watches), and [`DETAIL_BIT`].
    mask: AtomicU32,
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
    starts: AtomicU64,
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
    moved: AtomicU64,
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
    /// The log watchers.
    pub watchers: Watchers,
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

/// The time base of [`monotonic_ns`]: the first reading of the clock in this process.
static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

/// Nanoseconds since the first call in this process, from the monotonic clock: the time base
/// of the latency instrument (`stats latency`) and of the packet paths' arrival stamps.
pub fn monotonic_ns() -> u64 {
    monotonic_ns_at(std::time::Instant::now())
}

/// [`monotonic_ns`] of an instant read earlier (a loop's tick), without reading the clock.
pub fn monotonic_ns_at(at: std::time::Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(|| at);
    at.saturating_duration_since(epoch).as_nanos() as u64
}

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
            last_cmd_ms: AtomicU64::new(now.millis()),
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
    fn keys_are_uri_encoded_as_memcached_writes_them() {
        let mut s = String::new();
        uri_encode(&mut s, b"foo:bar baz-1.2_3~/%\x01");
        assert_eq!(s, "foo%3Abar%20baz-1.2_3~%2F%25%01");
    }

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
