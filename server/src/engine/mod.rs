//! The request engine: one connection's received bytes in, its replies out.
//!
//! ```text
//! received bytes ─▶ Engine::execute ─▶ protocol parse ─▶ Shard (this core's store) ─▶ replies appended to `out`
//! ```
//!
//! The engine knows nothing of sockets or packets: the TAP, AF_XDP and kernel-socket paths all
//! hand it a connection's bytes and its [`Session`], and send what it appends to `out`. It
//! executes every complete frame, in order, and reports how many input bytes it consumed, so a
//! caller can parse straight out of a receive buffer and keep the unconsumed tail.

mod binary;

use store::{Shard, ShardConfig};

use crate::stats::{Counters, ServerInfo, Snapshot};

/// Output backlog above which the engine stops executing frames until the caller has sent some
/// of it: a pipeline of GETs for large values must not grow one connection's buffer without end.
pub const OUT_HIGH_WATER_BYTES: usize = 256 * 1024;

/// Limits and identity fixed at start-up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The store shard this engine serves (memory budget, `-I`).
    pub shard: ShardConfig,
    /// Version string answered to VERSION, memcached-style leading digits.
    pub version: &'static str,
    /// Unix seconds when the server started, for `uptime`.
    pub started_unix_secs: u64,
    /// Worker threads serving, for `threads`.
    pub threads: usize,
    /// Connection limit (`-c`), for `stats settings`.
    pub conn_limit: usize,
}

impl EngineConfig {
    /// A frame whose body exceeds this is malformed and closes the connection; a value between
    /// the item limit and this is refused with "too large" and skipped without being buffered.
    pub fn max_body(&self) -> u32 {
        let limit = self.shard.max_item_size.saturating_mul(2).max(1 << 20);
        u32::try_from(limit).unwrap_or(u32::MAX)
    }
}

/// The version memspin reports: memcached-compatible leading digits, then our own.
pub const VERSION: &str = concat!("1.6.18-memspin-", env!("CARGO_PKG_VERSION"));

/// One connection's protocol state, kept by the packet path next to its socket.
#[derive(Debug, Default, Clone)]
pub struct Session {
    /// Bytes of a refused frame still to be skipped (an oversize value, an unknown opcode's body).
    skip_bytes: u64,
    /// Set once a frame asked to close (QUIT, a malformed frame): nothing more is executed.
    closing: bool,
}

impl Session {
    /// True once the connection must be closed after its pending output is sent.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Stops executing frames on this connection (the peer closed, or the server is leaving).
    pub fn close(&mut self) {
        self.closing = true;
    }
}

/// What one call to [`Engine::execute`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Input bytes consumed; the caller drops them and keeps the rest.
    pub consumed: usize,
    /// Bytes still needed to make progress past the consumed prefix (0 when execution stopped
    /// for another reason: no input left, output backlog, or closing).
    pub needed: usize,
    /// Close the connection once `out` has been sent.
    pub close: bool,
}

/// Per-core request executor: this core's store shard plus its command counters.
pub struct Engine {
    shard: Shard,
    counters: Counters,
    config: EngineConfig,
    info: ServerInfo,
}

impl Engine {
    /// An engine with an empty shard.
    pub fn new(config: EngineConfig) -> Engine {
        Engine {
            shard: Shard::new(config.shard),
            counters: Counters::default(),
            config,
            info: ServerInfo::default(),
        }
    }

    /// Executes every complete frame at the start of `input`, appending replies to `out`.
    ///
    /// `now` is the unix time in seconds read by the caller's clock. Execution stops at an
    /// incomplete frame, when `out` holds more than [`OUT_HIGH_WATER_BYTES`], or when the
    /// connection must close.
    pub fn execute(
        &mut self,
        session: &mut Session,
        input: &[u8],
        out: &mut Vec<u8>,
        now: u64,
    ) -> Outcome {
        binary::execute(self, session, input, out, now)
    }

    /// This core's store shard.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// Reclaims up to `max_items` expired items; for the worker's idle moments.
    pub fn sweep_expired(&mut self, max_items: usize, now: u64) -> usize {
        self.shard.sweep_expired(max_items, now)
    }

    /// The command counters of this engine.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Connection figures, kept current by the packet path for `stats`.
    pub fn info_mut(&mut self) -> &mut ServerInfo {
        &mut self.info
    }

    /// This worker's figures for a `stats` reply (summed with other workers' where there are several).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            shard: self.shard.stats().clone(),
            counters: self.counters,
            info: self.info,
            threads: self.config.threads,
            limit_maxbytes: self.config.shard.memory_limit_bytes as u64,
            item_size_max: self.config.shard.max_item_size as u64,
            conn_limit: self.config.conn_limit as u64,
            started_unix_secs: self.config.started_unix_secs,
            version: self.config.version,
        }
    }

    /// The configuration this engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }
}

#[cfg(test)]
pub(crate) mod tests;
