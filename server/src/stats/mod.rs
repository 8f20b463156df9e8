//! Server statistics under memcached's names, and memspin's own under `memspin_`.
//!
//! Each worker keeps its own [`Counters`], its shard keeps `store::ShardStats`, and its packet
//! path keeps [`WorkerFigures`]; a `stats` request sums them into a [`Snapshot`] (across every
//! worker once there are several) and writes the lines of the [`Group`] asked for, so the
//! binary and text protocols share one list per group.
//!
//! ```text
//! stats [group] ─▶ every worker: Core::snapshot(group) ─▶ Snapshot::merge ─▶ render(group) ─▶ lines
//! ```
//!
//! What memspin has no equivalent for is left out rather than invented. memspin has no slab
//! classes: an item is one heap block of its own size, so `stats items` and `stats slabs`
//! describe a single class, 1, that holds every item, with the lines memcached prints when
//! its LRU maintainer is off (no hot, warm and cold segments). Pages are counted as memcached
//! sizes them, 1 MiB of the memory items and the table hold, and a chunk as the mean item.
//! `stats sizes` walks the shards when asked (memcached tracks it on every store once
//! `stats sizes_enable` turned it on); `stats detail` counts per key prefix (up to the first
//! `:`) while on.
//!
//! This module holds the figure model (what workers count and how snapshots merge); `path`
//! turns a packet path's device and table counters into named figures, `render` writes the
//! lines of each group, and `latency` is the latency instrument (`stats latency`).

mod latency;
mod path;
mod render;

use std::collections::HashMap;

use store::ShardStats;

use crate::control::Control;
pub use latency::{Histogram, KINDS, Kind, Latency, MAX_NS, QUANTILES};
pub use path::{MAX_PATH_COUNTERS, PathCounters, RawPath};
pub use render::{
    ITEM_CLASS, conns, general, items, render, settings, sizes, slabs, worker, workers,
};

/// Command counters one worker keeps (memcached's `cmd_*` and friends).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// GET-family requests, one per key.
    pub cmd_get: u64,
    /// Storage requests (set, add, replace, append, prepend, cas).
    pub cmd_set: u64,
    /// Flush requests.
    pub cmd_flush: u64,
    /// TOUCH and GAT-family requests.
    pub cmd_touch: u64,
    /// Meta commands (`mg`, `ms`, `md`, `ma`, `mn`, `me`).
    pub cmd_meta: u64,
    /// Frames that were refused as malformed or unknown.
    pub protocol_errors: u64,
    /// Stores refused because the item could never fit (`-I`).
    pub store_too_large: u64,
    /// Stores refused because no room could be made (eviction off, `-M`, or an item larger
    /// than the memory budget allows).
    pub store_no_memory: u64,
    /// Requests executed, of every protocol (Redis's `total_commands_processed`).
    pub requests: u64,
    /// Bytes the engine consumed from clients.
    pub bytes_read: u64,
    /// Bytes the engine produced for clients.
    pub bytes_written: u64,
    /// Times a connection used up its turn with work left and was served again after the
    /// others (memcached's `conn_yields`, for its `-R` limit).
    pub conn_yields: u64,
    /// Requests (and parts of multi-key requests) sent to the worker that owns their key.
    pub forwarded: u64,
}

impl Counters {
    /// Adds another worker's counters to these.
    pub fn add(&mut self, other: &Counters) {
        self.cmd_get += other.cmd_get;
        self.cmd_set += other.cmd_set;
        self.cmd_flush += other.cmd_flush;
        self.cmd_touch += other.cmd_touch;
        self.cmd_meta += other.cmd_meta;
        self.protocol_errors += other.protocol_errors;
        self.store_too_large += other.store_too_large;
        self.store_no_memory += other.store_no_memory;
        self.requests += other.requests;
        self.forwarded += other.forwarded;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.conn_yields += other.conn_yields;
    }
}

/// Connection figures the packet path keeps current.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ServerInfo {
    /// Open client connections.
    pub curr_connections: u64,
    /// Connections accepted since start (or `stats reset`).
    pub total_connections: u64,
    /// Connections refused because the limit was reached.
    pub rejected_connections: u64,
    /// What loss recovery did (smoltcp paths; zero on kernel sockets).
    pub recovery: Recovery,
}

/// Loss recovery's counters: netstack's own, summed over workers with its `add` and taken
/// since `stats reset` with its `since`; `stats` lists them as `memspin_loss_*`
/// (`render.rs`) and per path (`path.rs`).
pub type Recovery = netstack::conn::RecoveryStats;

impl ServerInfo {
    /// Adds another worker's figures to these.
    pub fn add(&mut self, other: &ServerInfo) {
        self.curr_connections += other.curr_connections;
        self.total_connections += other.total_connections;
        self.rejected_connections += other.rejected_connections;
        self.recovery.add(&other.recovery);
    }
}

/// What one worker's loop did, for CPU per request on a spinning server: time with and
/// without work, polls, and its packet path's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WorkerFigures {
    /// The worker's index.
    pub worker: usize,
    /// Nanoseconds of loop iterations that found work.
    pub busy_ns: u64,
    /// Nanoseconds of loop iterations that found none (parked time included).
    pub idle_ns: u64,
    /// Loop iterations (each polls the queue once).
    pub polls: u64,
    /// Of those, the ones that found work.
    pub polls_with_work: u64,
    /// Times the worker waited on its queue (`--idle park`).
    pub parks: u64,
    /// Requests the worker sent to the worker that owns their key (its `forwarded` counter).
    pub forwarded: u64,
    /// The packet path's counters.
    pub path: PathCounters,
}

impl WorkerFigures {
    /// Adds another worker's figures (for the sums in `stats`).
    pub fn add(&mut self, other: &WorkerFigures) {
        self.busy_ns += other.busy_ns;
        self.idle_ns += other.idle_ns;
        self.polls += other.polls;
        self.polls_with_work += other.polls_with_work;
        self.parks += other.parks;
        self.forwarded += other.forwarded;
        self.path.add(&other.path);
    }

    /// These figures less `base` (counted since `base` was taken).
    pub fn since(&self, base: &WorkerFigures) -> WorkerFigures {
        WorkerFigures {
            worker: self.worker,
            busy_ns: self.busy_ns.saturating_sub(base.busy_ns),
            idle_ns: self.idle_ns.saturating_sub(base.idle_ns),
            polls: self.polls.saturating_sub(base.polls),
            polls_with_work: self.polls_with_work.saturating_sub(base.polls_with_work),
            parks: self.parks.saturating_sub(base.parks),
            forwarded: self.forwarded.saturating_sub(base.forwarded),
            path: self.path.since(&base.path),
        }
    }
}

/// Per key prefix counts for `stats detail dump` (memcached's `PREFIX <p> get <n> hit <n> set
/// <n> del <n>`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrefixCounts {
    /// Reads of keys with the prefix.
    pub get: u64,
    /// Of those, hits.
    pub hit: u64,
    /// Stores.
    pub set: u64,
    /// Deletes.
    pub del: u64,
}

/// Prefixes one worker counts while `stats detail` is on; a prefix past this is not counted.
pub const MAX_PREFIXES: usize = 10_000;

/// The character that ends a key's prefix for `stats detail` (memcached's default `-D`).
pub const PREFIX_DELIMITER: u8 = b':';

/// One worker's `stats detail` counts.
#[derive(Debug, Default, Clone)]
pub struct Prefixes {
    map: HashMap<Box<[u8]>, PrefixCounts>,
}

impl Prefixes {
    /// Counts one operation on `key` (nothing for a key without [`PREFIX_DELIMITER`]).
    pub fn record(&mut self, key: &[u8], f: impl FnOnce(&mut PrefixCounts)) {
        let Some(end) = key.iter().position(|&b| b == PREFIX_DELIMITER) else {
            return;
        };
        let prefix = &key[..end];
        if let Some(counts) = self.map.get_mut(prefix) {
            f(counts);
        } else if self.map.len() < MAX_PREFIXES {
            f(self.map.entry(prefix.into()).or_default());
        }
    }

    /// Adds another worker's counts.
    pub fn add(&mut self, other: &Prefixes) {
        for (prefix, theirs) in &other.map {
            let mine = self.map.entry(prefix.clone()).or_default();
            mine.get += theirs.get;
            mine.hit += theirs.hit;
            mine.set += theirs.set;
            mine.del += theirs.del;
        }
    }

    /// Forgets every count.
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// The `PREFIX` lines (with `\r\n`), sorted by prefix.
    pub fn dump(&self) -> String {
        let mut prefixes: Vec<_> = self.map.iter().collect();
        prefixes.sort_by(|a, b| a.0.cmp(b.0));
        let mut text = String::new();
        for (prefix, c) in prefixes {
            text.push_str(&format!(
                "PREFIX {} get {} hit {} set {} del {}\r\n",
                String::from_utf8_lossy(prefix),
                c.get,
                c.hit,
                c.set,
                c.del
            ));
        }
        text
    }
}

/// Size classes of `stats sizes`: items by their size rounded up to a multiple of this.
pub const SIZES_STEP: usize = 32;

/// The `stats` groups memspin answers (memcached's, and its own `latency`, `workers` and
/// `worker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// `stats`: the general list.
    General,
    /// `stats settings`.
    Settings,
    /// `stats items`.
    Items,
    /// `stats slabs`.
    Slabs,
    /// `stats sizes`: items per 32-byte size class.
    Sizes,
    /// `stats conns`: every open connection.
    Conns,
    /// `stats detail dump`: per key prefix counts.
    Detail,
    /// `stats latency`: time inside memspin per command kind.
    Latency,
    /// `stats workers`: each worker's loop and packet-path figures.
    Workers,
    /// `stats worker`: the worker serving this connection, how many there are, and the owner
    /// hash (what a client needs to steer its requests).
    Worker,
    /// `stats cachedump 1 <limit>`: up to `limit` items (0: no count limit), at most
    /// [`CACHEDUMP_MAX_BYTES`] of lines.
    CacheDump {
        /// Items at most; 0 for no count limit.
        limit: u32,
    },
    /// Redis's `INFO` with its keyspace section: the general figures and each namespace's
    /// keys ([`Snapshot::keyspace`]), which walks every shard; no `stats` group asks for it.
    Keyspace,
}

/// One stored namespace's keys (a Redis database's, `INFO keyspace`), counted by walking the
/// shard.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceKeys {
    /// Live keys.
    pub keys: u64,
    /// Of those, keys with an expiry.
    pub expires: u64,
    /// Their remaining times to live, in milliseconds, summed.
    pub ttl_ms_sum: u128,
}

impl NamespaceKeys {
    /// Adds another worker's count of the same namespace.
    pub fn add(&mut self, other: &NamespaceKeys) {
        self.keys += other.keys;
        self.expires += other.expires;
        self.ttl_ms_sum += other.ttl_ms_sum;
    }

    /// The mean remaining time to live of the keys with an expiry, in milliseconds (0 when
    /// there are none): Redis's `avg_ttl`.
    pub fn avg_ttl_ms(&self) -> u64 {
        match self.expires {
            0 => 0,
            n => (self.ttl_ms_sum / u128::from(n)) as u64,
        }
    }
}

/// The most `stats cachedump` writes before its `END`, as memcached caps it (2 MiB).
pub const CACHEDUMP_MAX_BYTES: usize = 2 << 20;

/// `stats cachedump` lines, `ITEM <key> [<bytes> b; <expiry> s]` as memcached writes them
/// (the value's length, the expiry in unix seconds or 0), up to a count and
/// [`CACHEDUMP_MAX_BYTES`].
#[derive(Debug, Clone, Default)]
pub struct CacheDump {
    /// Items at most; 0 for no count limit.
    limit: u32,
    /// The lines, one after another.
    text: Vec<u8>,
    /// Where each line ends in `text`.
    ends: Vec<usize>,
    full: bool,
}

impl CacheDump {
    /// An empty dump of at most `limit` items (0: as many as fit).
    pub fn new(limit: u32) -> CacheDump {
        CacheDump {
            limit,
            ..CacheDump::default()
        }
    }

    /// True once no more lines fit.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Adds one item's line, unless the dump is full.
    pub fn add(&mut self, key: &[u8], bytes: usize, expiry: u64) {
        use std::io::Write as _;
        let mut line = Vec::with_capacity(key.len() + 32);
        line.extend_from_slice(b"ITEM ");
        line.extend_from_slice(key);
        let _ = write!(line, " [{bytes} b; {expiry} s]\r\n");
        self.add_line(&line);
    }

    fn add_line(&mut self, line: &[u8]) {
        if self.full {
            return;
        }
        if self.text.len() + line.len() > CACHEDUMP_MAX_BYTES {
            self.full = true;
            return;
        }
        self.text.extend_from_slice(line);
        self.ends.push(self.text.len());
        if self.limit != 0 && self.ends.len() >= self.limit as usize {
            self.full = true;
        }
    }

    /// Adds another worker's lines while they fit.
    pub fn merge(&mut self, other: &CacheDump) {
        let mut start = 0;
        for &end in &other.ends {
            self.add_line(&other.text[start..end]);
            start = end;
        }
    }

    /// The lines, `\r\n` after each.
    pub fn text(&self) -> &[u8] {
        &self.text
    }
}

impl Group {
    /// Whether every worker's figures are needed (the others are answered by one worker, from
    /// what every worker shares).
    pub fn gathers(self) -> bool {
        !matches!(self, Group::Settings | Group::Conns | Group::Worker)
    }
}

/// Everything a `stats` reply reports, summed over workers.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Store counters of every shard.
    pub shard: ShardStats,
    /// Command counters of every worker.
    pub counters: Counters,
    /// Connection figures of every worker.
    pub info: ServerInfo,
    /// Every worker's loop figures, in worker order (one entry per worker that answered).
    pub workers: Vec<WorkerFigures>,
    /// Worker threads.
    pub threads: usize,
    /// Total memory budget in bytes (`-m`).
    pub limit_maxbytes: u64,
    /// Max item size in bytes (`-I`).
    pub item_size_max: u64,
    /// Connection limit (`-c`).
    pub conn_limit: u64,
    /// Unix seconds when the server started.
    pub started_unix_secs: u64,
    /// Version string.
    pub version: &'static str,
    /// `stats items`: seconds since the least recently accessed item's last access.
    pub oldest_idle_secs: u64,
    /// `stats sizes`: items per size class ([`SIZES_STEP`] bytes each), by class index.
    pub sizes: Vec<u64>,
    /// `stats detail dump`: per prefix counts.
    pub prefixes: Option<Prefixes>,
    /// `stats latency`: the histograms.
    pub latency: Option<Box<Latency>>,
    /// `stats cachedump`: `ITEM` lines (each worker's, one after another).
    pub cachedump: Option<CacheDump>,
    /// [`Group::Keyspace`]: keys per stored namespace, by namespace (empty for other groups).
    pub keyspace: Vec<NamespaceKeys>,
    /// The background work every worker shares, as each worker saw it before taking its
    /// figures.
    pub background: Background,
}

/// The shared background work (`slabs reassign`'s move, a requested crawl) as a worker saw
/// it just before taking its figures. Merged, a move or crawl runs if any worker saw it
/// running: a reply says it stopped only when every worker's figures were taken after it
/// stopped, and so hold everything it did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Background {
    /// `slab_reassign_running`.
    pub reassign_running: bool,
    /// `slabs_moved`.
    pub slabs_moved: u64,
    /// `lru_crawler_running`.
    pub crawler_running: bool,
}

impl Background {
    /// What `control` says now.
    pub fn now(control: &Control) -> Self {
        Background {
            reassign_running: control.pages.running(),
            slabs_moved: control.pages.moved(),
            crawler_running: control.crawler.running(),
        }
    }

    /// Adds another worker's view.
    fn add(&mut self, other: &Background) {
        self.reassign_running |= other.reassign_running;
        self.slabs_moved = self.slabs_moved.max(other.slabs_moved);
        self.crawler_running |= other.crawler_running;
    }
}

impl Snapshot {
    /// Adds another worker's figures: its shard, counters, connections, loop, memory budget,
    /// and the group's own parts. Settings (threads, limits, version) are the same on every
    /// worker and stay.
    pub fn merge(&mut self, other: &Snapshot) {
        self.shard.add(&other.shard);
        self.background.add(&other.background);
        self.counters.add(&other.counters);
        self.info.add(&other.info);
        self.workers.extend_from_slice(&other.workers);
        self.workers.sort_by_key(|w| w.worker);
        self.limit_maxbytes += other.limit_maxbytes;
        self.oldest_idle_secs = self.oldest_idle_secs.max(other.oldest_idle_secs);
        if self.sizes.len() < other.sizes.len() {
            self.sizes.resize(other.sizes.len(), 0);
        }
        for (mine, theirs) in self.sizes.iter_mut().zip(&other.sizes) {
            *mine += theirs;
        }
        if let Some(theirs) = &other.prefixes {
            self.prefixes
                .get_or_insert_with(Prefixes::default)
                .add(theirs);
        }
        if let Some(theirs) = &other.latency {
            match self.latency.as_mut() {
                Some(mine) => mine.add(theirs),
                None => self.latency = Some(theirs.clone()),
            }
        }
        if let Some(theirs) = &other.cachedump {
            match self.cachedump.as_mut() {
                Some(mine) => mine.merge(theirs),
                None => self.cachedump = Some(theirs.clone()),
            }
        }
        if self.keyspace.len() < other.keyspace.len() {
            self.keyspace
                .resize(other.keyspace.len(), NamespaceKeys::default());
        }
        for (mine, theirs) in self.keyspace.iter_mut().zip(&other.keyspace) {
            mine.add(theirs);
        }
    }

    /// Every worker's loop figures summed.
    pub fn loop_totals(&self) -> WorkerFigures {
        let mut total = WorkerFigures::default();
        for w in &self.workers {
            total.add(w);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Settings;
    use std::fmt::Display;

    fn lines(f: impl FnOnce(&mut dyn FnMut(&str, &dyn Display))) -> Vec<(String, String)> {
        let mut out = Vec::new();
        f(&mut |name, value| out.push((name.to_string(), value.to_string())));
        out
    }

    fn value<'a>(lines: &'a [(String, String)], name: &str) -> Option<&'a str> {
        lines
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn path_counters_add_by_name_and_subtract_a_base() {
        let mut a = PathCounters::default();
        a.push("rx_frames", 10);
        a.push("tx_frames", 20);
        let mut b = PathCounters::default();
        b.push("rx_frames", 1);
        b.push("tx_eagain", 2);
        a.add(&b);
        let all: Vec<_> = a.iter().collect();
        assert_eq!(
            all,
            [("rx_frames", 11), ("tx_frames", 20), ("tx_eagain", 2)]
        );
        let since = a.since(&b);
        assert_eq!(
            since.iter().collect::<Vec<_>>(),
            [("rx_frames", 10), ("tx_frames", 20), ("tx_eagain", 0)]
        );
        let mut full = PathCounters::default();
        for _ in 0..MAX_PATH_COUNTERS + 5 {
            full.push("x", 1);
        }
        assert_eq!(full.iter().count(), MAX_PATH_COUNTERS);
    }

    #[test]
    fn general_lists_memcached_names_then_memspins() {
        let control = Control::new(Settings::default(), 0);
        let mut snapshot = Snapshot {
            conn_limit: 1024,
            workers: vec![WorkerFigures {
                worker: 0,
                busy_ns: 3_000,
                polls: 7,
                ..WorkerFigures::default()
            }],
            ..Snapshot::default()
        };
        snapshot.workers[0].path.push("tx_eagain", 4);
        snapshot.counters.store_too_large = 2;
        let got = lines(|emit| general(&snapshot, &control, 100, emit));
        for name in [
            "rusage_user",
            "rusage_system",
            "max_connections",
            "accepting_conns",
            "listen_disabled_num",
            "conn_yields",
            "store_too_large",
            "store_no_memory",
            "cmd_meta",
            "log_watchers",
        ] {
            assert!(value(&got, name).is_some(), "{name}");
        }
        assert_eq!(value(&got, "max_connections"), Some("1024"));
        assert_eq!(value(&got, "store_too_large"), Some("2"));
        assert_eq!(value(&got, "memspin_busy_us"), Some("3"));
        assert_eq!(value(&got, "memspin_polls"), Some("7"));
        assert_eq!(value(&got, "memspin_tx_eagain"), Some("4"));
        let user = value(&got, "rusage_user").unwrap();
        assert!(
            user.split_once('.').is_some_and(|(_, f)| f.len() == 6),
            "{user}"
        );
        let first_memspin = got
            .iter()
            .position(|(n, _)| n.starts_with("memspin_"))
            .unwrap();
        assert!(
            got[first_memspin..]
                .iter()
                .all(|(n, _)| n.starts_with("memspin_"))
        );
    }

    #[test]
    fn settings_has_the_keys_tools_read() {
        let control = Control::new(
            Settings {
                memory_limit_bytes: 128 << 20,
                tcp_port: 11311,
                resp_port: Some(6380),
                interface: "10.0.0.2".into(),
                no_evictions: true,
                shutdown_enabled: true,
                idle_timeout_secs: 30,
                net: "tap",
                idle: "spin",
                cpus: vec![2, 3],
                rto_min: Some("1ms".into()),
            },
            2,
        );
        control.set_path_settings(vec![
            ("memspin_net", "xdp".into()),
            ("memspin_xdp_zero_copy", "no".into()),
        ]);
        let snapshot = Snapshot {
            conn_limit: 10,
            item_size_max: 1 << 20,
            threads: 2,
            ..Snapshot::default()
        };
        let got = lines(|emit| settings(&snapshot, &control, emit));
        for (name, want) in [
            ("maxbytes", "134217728"),
            ("domain_socket", "NULL"),
            ("flush_enabled", "yes"),
            ("tcpport", "11311"),
            ("maxconns", "10"),
            ("item_size_max", "1048576"),
            ("verbosity", "2"),
            ("idle_timeout", "30"),
            ("evictions", "off"),
            ("shutdown_command", "yes"),
            ("num_threads", "2"),
            ("memspin_cpus", "2,3"),
            ("memspin_resp_port", "6380"),
            ("memspin_rto_min", "1ms"),
            ("memspin_xdp_zero_copy", "no"),
        ] {
            assert_eq!(value(&got, name), Some(want), "{name}");
        }
        // Ports the packet path picked (port 0 on kernel sockets) are the ones reported.
        control.set_bound_ports(40001, Some(40002));
        let got = lines(|emit| settings(&snapshot, &control, emit));
        assert_eq!(value(&got, "tcpport"), Some("40001"));
        assert_eq!(value(&got, "memspin_resp_port"), Some("40002"));
        let off = Control::new(Settings::default(), 0);
        let got = lines(|emit| settings(&snapshot, &off, emit));
        assert_eq!(value(&got, "memspin_resp_port"), Some("off"));
        assert_eq!(
            got.iter().filter(|(n, _)| n == "memspin_net").count(),
            1,
            "the path's net line is not repeated"
        );
    }

    #[test]
    fn items_and_slabs_describe_one_class_with_memcacheds_names() {
        let mut snapshot = Snapshot::default();
        assert!(
            lines(|emit| items(&snapshot, emit)).is_empty(),
            "no class when empty"
        );
        let empty_slabs = lines(|emit| slabs(&snapshot, emit));
        assert_eq!(value(&empty_slabs, "active_slabs"), Some("0"));
        snapshot.shard.curr_items = 1000;
        snapshot.shard.bytes = 100_000;
        snapshot.shard.heap_bytes = 3 * (1 << 20) / 2;
        let got = lines(|emit| items(&snapshot, emit));
        for stat in [
            "number",
            "age",
            "mem_requested",
            "evicted",
            "evicted_nonzero",
            "evicted_time",
            "outofmemory",
            "tailrepairs",
            "reclaimed",
            "expired_unfetched",
            "evicted_unfetched",
            "crawler_reclaimed",
            "crawler_items_checked",
            "lrutail_reflocked",
        ] {
            assert!(value(&got, &format!("items:1:{stat}")).is_some(), "{stat}");
        }
        let got = lines(|emit| slabs(&snapshot, emit));
        assert_eq!(value(&got, "1:chunk_size"), Some("100"));
        assert_eq!(value(&got, "1:total_pages"), Some("2"));
        assert_eq!(value(&got, "1:used_chunks"), Some("1000"));
        assert_eq!(value(&got, "active_slabs"), Some("1"));
    }

    #[test]
    fn sizes_list_classes_with_items_or_say_disabled() {
        let control = Control::new(Settings::default(), 0);
        let snapshot = Snapshot {
            sizes: vec![0, 0, 5, 0, 1],
            ..Snapshot::default()
        };
        let got = lines(|emit| sizes(&snapshot, &control, emit));
        assert_eq!(got, [("64".into(), "5".into()), ("128".into(), "1".into())]);
        control.set_sizes(false);
        let got = lines(|emit| sizes(&snapshot, &control, emit));
        assert_eq!(got, [("sizes_status".into(), "disabled".into())]);
    }

    #[test]
    fn prefixes_count_keys_with_a_delimiter_and_dump_as_memcached() {
        let mut p = Prefixes::default();
        p.record(b"foo:1", |c| c.get += 1);
        p.record(b"foo:2", |c| {
            c.get += 1;
            c.hit += 1;
        });
        p.record(b"bar:x", |c| c.set += 1);
        p.record(b"nodelimiter", |c| c.del += 1);
        let mut q = Prefixes::default();
        q.record(b"foo:3", |c| c.del += 1);
        p.add(&q);
        assert_eq!(
            p.dump(),
            "PREFIX bar get 0 hit 0 set 1 del 0\r\nPREFIX foo get 2 hit 1 set 0 del 1\r\n"
        );
        p.clear();
        assert_eq!(p.dump(), "");
    }

    #[test]
    fn prefixes_are_bounded() {
        let mut p = Prefixes::default();
        for i in 0..MAX_PREFIXES + 10 {
            p.record(format!("p{i}:k").as_bytes(), |c| c.get += 1);
        }
        assert_eq!(p.map.len(), MAX_PREFIXES);
    }

    #[test]
    fn snapshots_merge_workers_and_their_parts() {
        let worker = |i: usize| Snapshot {
            workers: vec![WorkerFigures {
                worker: i,
                busy_ns: 1000 * (i as u64 + 1),
                ..WorkerFigures::default()
            }],
            sizes: vec![1; i + 1],
            oldest_idle_secs: 10 * i as u64,
            ..Snapshot::default()
        };
        let mut sum = worker(1);
        sum.merge(&worker(0));
        assert_eq!(
            sum.workers.iter().map(|w| w.worker).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(sum.loop_totals().busy_ns, 3000);
        assert_eq!(sum.sizes, [2, 1]);
        assert_eq!(sum.oldest_idle_secs, 10);
        let got = lines(|emit| workers(&sum, emit));
        assert_eq!(value(&got, "worker:1:busy_us"), Some("2"));
    }

    // Regression: a `stats` reply read `slab_reassign_running` after gathering the workers'
    // figures, so it could say the move had stopped beside a worker's figures taken before
    // that worker's last step (CI saw 768 KiB of a 1 MiB page freed).
    #[test]
    fn background_work_seen_running_by_any_worker_is_reported_running() {
        let control = Control::new(Settings::default(), 0);
        let worker = |running: bool, moved: u64| Snapshot {
            background: Background {
                reassign_running: running,
                slabs_moved: moved,
                crawler_running: running,
            },
            ..Snapshot::default()
        };
        let mut sum = worker(false, 1);
        sum.merge(&worker(true, 0));
        let got = lines(|emit| general(&sum, &control, 100, emit));
        assert_eq!(value(&got, "slab_reassign_running"), Some("1"));
        assert_eq!(value(&got, "lru_crawler_running"), Some("1"));
        assert_eq!(value(&got, "slabs_moved"), Some("1"));
        let mut sum = worker(false, 1);
        sum.merge(&worker(false, 1));
        let got = lines(|emit| general(&sum, &control, 100, emit));
        assert_eq!(value(&got, "slab_reassign_running"), Some("0"));
        assert_eq!(value(&got, "lru_crawler_running"), Some("0"));
    }

    #[test]
    fn loss_recovery_counters_are_summed_over_workers_and_reported() {
        let worker = |k: u64| Snapshot {
            info: ServerInfo {
                recovery: Recovery {
                    probes: k,
                    sack_resends: 2 * k,
                    recovered: 3 * k,
                    spurious: 4 * k,
                    smoltcp_retransmits: 5 * k,
                    probes_withheld: 6 * k,
                    probes_spurious: 7 * k,
                    probes_stretched: 8 * k,
                    peer_retransmit_resends: 9 * k,
                    probes_recovered: 10 * k,
                    probes_recovered_us: 11 * k,
                },
                ..ServerInfo::default()
            },
            ..Snapshot::default()
        };
        let mut sum = worker(1);
        sum.merge(&worker(10));
        let mut lines = Vec::new();
        general(
            &sum,
            &Control::new(Settings::default(), 0),
            0,
            |name, value| {
                if name.starts_with("memspin_loss") || name.starts_with("memspin_smoltcp") {
                    lines.push(format!("{name} {value}"));
                }
            },
        );
        assert_eq!(
            lines,
            [
                "memspin_loss_probes 11",
                "memspin_loss_sack_resends 22",
                "memspin_loss_recovered 33",
                "memspin_loss_spurious 44",
                "memspin_smoltcp_retransmits 55",
                "memspin_loss_probes_withheld 66",
                "memspin_loss_probes_spurious 77",
                "memspin_loss_probes_stretched 88",
                "memspin_loss_peer_retransmit_resends 99",
                "memspin_loss_probes_recovered 110",
                "memspin_loss_probes_recovered_us 121",
            ]
        );
    }
}
