//! What an engine is built with, and the limits every layer of it shares: the bottom of the
//! engine, importing nothing from it, so no arrow climbs (the core, the session, forwarding
//! and every adapter take their figures from here).

use std::sync::Arc;

use store::ShardConfig;

use crate::control::Control;

/// The version memspin reports: memcached-compatible leading digits, then our own.
pub const VERSION: &str = concat!("1.6.18-memspin-", env!("CARGO_PKG_VERSION"));

/// Output backlog above which the engine stops executing until the caller has sent some of it:
/// checked before every request and before every key of a multi-key request, so one
/// connection's output holds at most this plus one reply (of up to `-I` and its header), plus
/// what other workers may still send it
/// ([`FORWARD_REPLY_CREDIT_BYTES`](super::FORWARD_REPLY_CREDIT_BYTES) and one reply each).
pub const OUT_HIGH_WATER_BYTES: usize = 256 * 1024;

/// Requests (and keys of a multi-key request) one connection may execute per turn, so that a
/// client pipelining as fast as it can does not delay the others: the packet path gives each
/// connection with work one turn per loop ([`Session::begin_turn`](super::Session::begin_turn)).
pub const TURN_REQUESTS: usize = 64;

/// Items one step of background work looks at, evicts or frees at most, each loop iteration:
/// a requested crawl's step, shrinking to a lowered budget, freeing a page for `slabs
/// reassign`. A few microseconds, between two turns of the connections.
pub const HOUSEKEEPING_ITEMS: usize = 256;

/// Bytes of a memcached slab page: what `slabs reassign` moves, what `stats slabs` counts in.
pub const PAGE_BYTES: u64 = 1 << 20;

/// Keys one prefetch of the core warms at most (a pipelined frame's worth).
pub const PREFETCH_MAX: usize = 16;

/// Limits and identity fixed at start-up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The store shard this engine serves (memory budget, `-I`).
    pub shard: ShardConfig,
    /// Version string answered to VERSION, memcached-style leading digits.
    pub version: &'static str,
    /// Unix seconds when the server started, for `uptime`.
    pub started_unix_secs: u64,
    /// Worker threads serving, for `threads`; keys are spread over this many shards.
    pub threads: usize,
    /// This engine's worker (0-based, below `threads`): it owns the keys
    /// [`owner_of`](super::owner_of) gives this index.
    pub worker: usize,
    /// Connection limit (`-c`), for `stats settings`.
    pub conn_limit: usize,
    /// What every worker shares: settings, admin switches, watchers, connection records.
    pub control: Arc<Control>,
    /// Redis databases (`--databases`, 1 to 256): `SELECT` takes 0 to one less.
    pub databases: u16,
    /// The password RESP clients must give (`--requirepass`) before any command but `AUTH`,
    /// `HELLO`, `QUIT` and `RESET`; `None`: none is asked for.
    pub requirepass: Option<Secret>,
    /// Bytes of queued commands the open transactions (`MULTI`) of all this worker's
    /// connections may hold together ([`QUEUED_MAX_BYTES`]).
    pub queued_max_bytes: usize,
}

/// Bytes of queued commands one worker's open transactions may hold together, by default: four
/// transactions of the most one may hold (64 MiB), so that many connections in `MULTI`
/// cannot hold a connection's share each.
pub const QUEUED_MAX_BYTES: usize = 256 << 20;

/// A password: compared, never shown (`Debug` hides it).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Arc<[u8]>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl EngineConfig {
    /// The only worker of one, serving `shard` and sharing `control`: [`VERSION`], started at
    /// unix time 0, 1,024 connections, 16 Redis databases, no password, [`QUEUED_MAX_BYTES`] of
    /// transactions. Change the rest with struct update syntax
    /// (`EngineConfig { threads: 4, ..EngineConfig::new(shard, control) }`).
    pub fn new(shard: ShardConfig, control: Arc<Control>) -> EngineConfig {
        EngineConfig {
            shard,
            version: VERSION,
            started_unix_secs: 0,
            threads: 1,
            worker: 0,
            conn_limit: 1024,
            control,
            databases: 16,
            requirepass: None,
            queued_max_bytes: QUEUED_MAX_BYTES,
        }
    }

    /// A frame whose body exceeds this is malformed and closes the connection; a value between
    /// the item limit and this is refused with "too large" and skipped without being buffered.
    pub fn max_body(&self) -> u32 {
        let limit = self.shard.max_item_size.saturating_mul(2).max(1 << 20);
        u32::try_from(limit).unwrap_or(u32::MAX)
    }
}
