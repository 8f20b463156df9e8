//! Server statistics under memcached's names.
//!
//! Each worker keeps its own [`Counters`] and its shard keeps `store::ShardStats`; a `stats`
//! request sums them into a [`Snapshot`] (across every worker once there are several) and writes
//! the lines in memcached's order, so the binary and text protocols share one list.
//!
//! memspin has no slab classes: an item is one heap block of its own size. `stats items` and
//! `stats slabs` therefore describe a single class, 1, that holds every item, and report only
//! the figures memspin really has; memcached's per-page, chunk-size and LRU-segment lines
//! (`chunk_size`, `total_pages`, `number_hot`, `age`, ...) are left out rather than invented.

use std::fmt::Display;
use std::sync::OnceLock;

use store::ShardStats;

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
    /// Frames that were refused as malformed or unknown.
    pub protocol_errors: u64,
    /// Stores refused because the item could never fit (`-I`).
    pub store_too_large: u64,
    /// Stores refused because no room could be made (eviction off, `-M`, or an item larger
    /// than the memory budget allows).
    pub store_no_memory: u64,
    /// Bytes the engine consumed from clients.
    pub bytes_read: u64,
    /// Bytes the engine produced for clients.
    pub bytes_written: u64,
    /// Times a connection used up its turn with work left and was served again after the
    /// others (memcached's `conn_yields`, for its `-R` limit).
    pub conn_yields: u64,
}

impl Counters {
    /// Adds another worker's counters to these.
    pub fn add(&mut self, other: &Counters) {
        self.cmd_get += other.cmd_get;
        self.cmd_set += other.cmd_set;
        self.cmd_flush += other.cmd_flush;
        self.cmd_touch += other.cmd_touch;
        self.protocol_errors += other.protocol_errors;
        self.store_too_large += other.store_too_large;
        self.store_no_memory += other.store_no_memory;
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
    /// Connections accepted since start.
    pub total_connections: u64,
    /// Connections refused because the limit was reached.
    pub rejected_connections: u64,
}

impl ServerInfo {
    /// Adds another worker's figures to these.
    pub fn add(&mut self, other: &ServerInfo) {
        self.curr_connections += other.curr_connections;
        self.total_connections += other.total_connections;
        self.rejected_connections += other.rejected_connections;
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
}

impl Snapshot {
    /// Adds another worker's figures: its shard, counters, connections and memory budget.
    /// Settings (threads, limits, version) are the same on every worker and stay.
    pub fn merge(&mut self, other: &Snapshot) {
        self.shard.add(&other.shard);
        self.counters.add(&other.counters);
        self.info.add(&other.info);
        self.limit_maxbytes += other.limit_maxbytes;
    }
}

/// Calls `emit(name, value)` for every general statistic, in memcached's order.
pub fn general(snapshot: &Snapshot, now_unix_secs: u64, mut emit: impl FnMut(&str, &dyn Display)) {
    let s = &snapshot.shard;
    let c = &snapshot.counters;
    let i = &snapshot.info;
    emit("pid", &std::process::id());
    emit(
        "uptime",
        &now_unix_secs.saturating_sub(snapshot.started_unix_secs),
    );
    emit("time", &now_unix_secs);
    emit("version", &snapshot.version);
    emit("pointer_size", &(usize::BITS));
    emit("curr_connections", &i.curr_connections);
    emit("total_connections", &i.total_connections);
    emit("rejected_connections", &i.rejected_connections);
    emit("cmd_get", &c.cmd_get);
    emit("cmd_set", &c.cmd_set);
    emit("cmd_flush", &c.cmd_flush);
    emit("cmd_touch", &c.cmd_touch);
    emit("get_hits", &s.get_hits);
    emit("get_misses", &s.get_misses);
    emit("get_expired", &s.get_expired);
    emit("get_flushed", &s.get_flushed);
    emit("delete_misses", &s.delete_misses);
    emit("delete_hits", &s.delete_hits);
    emit("incr_misses", &s.incr_misses);
    emit("incr_hits", &s.incr_hits);
    emit("decr_misses", &s.decr_misses);
    emit("decr_hits", &s.decr_hits);
    emit("cas_misses", &s.cas_misses);
    emit("cas_hits", &s.cas_hits);
    emit("cas_badval", &s.cas_badval);
    emit("touch_hits", &s.touch_hits);
    emit("touch_misses", &s.touch_misses);
    emit("store_too_large", &c.store_too_large);
    emit("store_no_memory", &c.store_no_memory);
    emit("protocol_errors", &c.protocol_errors);
    emit("bytes_read", &c.bytes_read);
    emit("bytes_written", &c.bytes_written);
    emit("limit_maxbytes", &snapshot.limit_maxbytes);
    emit("threads", &snapshot.threads);
    emit("conn_yields", &c.conn_yields);
    emit("bytes", &s.bytes);
    emit("curr_items", &s.curr_items);
    emit("total_items", &s.total_items);
    emit("expired_unfetched", &s.expired_unfetched);
    emit("evicted_unfetched", &s.evicted_unfetched);
    emit("evictions", &s.evictions);
    emit("reclaimed", &s.reclaimed);
}

/// The packet path's own settings (`memspin_*` lines), recorded once when it starts serving.
static PATH_SETTINGS: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();

/// Records the packet path's settings for `stats settings`; the first call in a process wins.
pub fn set_path_settings(lines: Vec<(&'static str, String)>) {
    let _ = PATH_SETTINGS.set(lines);
}

/// Calls `emit(name, value)` for every `stats settings` line memspin has a value for, then
/// the packet path's `memspin_*` lines.
pub fn settings(snapshot: &Snapshot, mut emit: impl FnMut(&str, &dyn Display)) {
    emit("maxbytes", &snapshot.limit_maxbytes);
    emit("maxconns", &snapshot.conn_limit);
    emit("num_threads", &snapshot.threads);
    emit("reqs_per_event", &crate::engine::TURN_REQUESTS);
    emit("item_size_max", &snapshot.item_size_max);
    emit("evictions", &"on");
    emit("cas_enabled", &"yes");
    emit("binding_protocol", &"auto-negotiate");
    for (name, value) in PATH_SETTINGS.get().into_iter().flatten() {
        emit(name, value);
    }
}

/// The one class memspin reports under `stats items` and `stats slabs`.
const ITEM_CLASS: u32 = 1;

/// Calls `emit(name, value)` for every `stats items` line memspin has a value for: one class
/// (see the module docs), named `items:1:<stat>` as memcached names them.
pub fn items(snapshot: &Snapshot, mut emit: impl FnMut(&str, &dyn Display)) {
    let s = &snapshot.shard;
    let mut line = |stat: &str, value: &dyn Display| {
        emit(&format!("items:{ITEM_CLASS}:{stat}"), value);
    };
    line("number", &s.curr_items);
    line("mem_requested", &s.bytes);
    line("evicted", &s.evictions);
    line("reclaimed", &s.reclaimed);
    line("expired_unfetched", &s.expired_unfetched);
    line("evicted_unfetched", &s.evicted_unfetched);
}

/// Calls `emit(name, value)` for every `stats slabs` line memspin has a value for: the one
/// class's item count and per-class command figures (`1:<stat>`), then `active_slabs` and
/// `total_malloced` (the heap the store is charged for: items and hash table).
pub fn slabs(snapshot: &Snapshot, mut emit: impl FnMut(&str, &dyn Display)) {
    let s = &snapshot.shard;
    let c = &snapshot.counters;
    {
        let mut line = |stat: &str, value: &dyn Display| {
            emit(&format!("{ITEM_CLASS}:{stat}"), value);
        };
        line("used_chunks", &s.curr_items);
        line("get_hits", &s.get_hits);
        line("cmd_set", &c.cmd_set);
        line("delete_hits", &s.delete_hits);
        line("incr_hits", &s.incr_hits);
        line("decr_hits", &s.decr_hits);
        line("cas_hits", &s.cas_hits);
        line("cas_badval", &s.cas_badval);
        line("touch_hits", &s.touch_hits);
    }
    emit("active_slabs", &1);
    emit("total_malloced", &s.heap_bytes);
}
