//! The request engine: one connection's received bytes in, its replies out.
//!
//! ```text
//! received bytes ─▶ Engine::execute ─▶ protocol parse ─▶ Shard (this core's store) ─▶ replies appended to `out`
//! ```
//!
//! The engine knows nothing of sockets or packets: the TAP, AF_XDP and kernel-socket paths all
//! hand it a connection's bytes and its [`Session`], and send what it appends to `out`. It
//! executes every complete request, in order, and reports how many input bytes it consumed, so
//! a caller can parse straight out of a receive buffer and keep the unconsumed tail.
//!
//! Nothing a client sends makes a connection hold more than a bounded amount: execution stops
//! ([`Stop`]) when the output backlog reaches [`OUT_HIGH_WATER_BYTES`] (checked before every
//! request and every key of a multi-key `get`, which then continues from that key on the next
//! call), when too much waits on other workers (`forward.rs`), when the connection's turn of
//! [`TURN_REQUESTS`] is used up (so one client cannot delay the others), and a refused body is
//! skipped as it arrives rather than buffered.
//!
//! A connection's protocol is decided by its first byte and kept in its [`Session`]: 0x80 (the
//! binary request magic) is the binary protocol (`binary.rs`), anything else the text protocol,
//! whose lines may also be meta commands (`text.rs`, `meta.rs`). All three call the same store
//! operations through the same counting helpers on [`Engine`], so `cmd_get`, `cmd_set`,
//! `cmd_touch` and `cmd_flush` mean the same whichever protocol a client speaks.

mod binary;
mod forward;
mod meta;
mod text;

pub(crate) use forward::DeliveryPayload;
pub use forward::{
    Batch, CREDIT_RETURN_BYTES, Delivery, FORWARD_REPLY_CREDIT_BYTES,
    FORWARD_REQUEST_HIGH_WATER_BYTES, MAX_FORWARDS_IN_FLIGHT, MIN_REPLY_CHARGE_BYTES,
    OWNER_HASH_SEED, Replies, Token, owner_hash, owner_of,
};

use store::{ItemView, Shard, ShardConfig, StoreError, Write};

use crate::stats::{Counters, ServerInfo, Snapshot};

/// Output backlog above which the engine stops executing until the caller has sent some of it:
/// checked before every request and before every key of a multi-key `get`, so one connection's
/// output holds at most this plus one reply (of up to `-I` and its header), plus what other
/// workers may still send it ([`FORWARD_REPLY_CREDIT_BYTES`] and one reply each).
pub const OUT_HIGH_WATER_BYTES: usize = 256 * 1024;

/// Requests (and keys of a multi-key `get`) one connection may execute per turn, so that a
/// client pipelining as fast as it can does not delay the others: the packet path gives each
/// connection with work one turn per loop ([`Session::begin_turn`]).
pub const TURN_REQUESTS: usize = 64;

/// The read hint while a refused body is skipped: any bytes make progress, and the caller's
/// buffer never grows for a body it will not keep.
const SKIP_READ_HINT_BYTES: usize = 64 * 1024;

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
    /// [`owner_of`] gives this index.
    pub worker: usize,
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

/// What a protocol did with the request at the front of its input.
///
/// `Done(0)` is only returned together with a change of session state (a body to skip, or
/// the connection closing), so the shared loop always moves on.
pub(crate) enum Step {
    /// Executed, or refused and answered: drop this many bytes.
    Done(usize),
    /// Not all here yet: read this many more bytes, consume nothing.
    Wait(usize),
    /// Stopped before the request was done (a multi-key `get` part-way, its place kept in the
    /// session) or before it started: consume nothing, try again once `Stop` is over.
    Stop(Stop),
}

/// Why [`Engine::execute`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The input ran out, or holds only part of a request ([`Outcome::needed`] says how much
    /// more helps): read more.
    Input,
    /// The output backlog reached [`OUT_HIGH_WATER_BYTES`]: send some of it first.
    Output,
    /// Too many forwarded requests, or request bytes, await replies from other workers
    /// ([`MAX_FORWARDS_IN_FLIGHT`], [`FORWARD_REQUEST_HIGH_WATER_BYTES`]): their delivery
    /// continues.
    Forwards,
    /// The queue to another worker this connection must forward to is full: serve the
    /// connection again on a later loop.
    Blocked,
    /// The connection's turn is used up ([`TURN_REQUESTS`]): serve it again on a later loop,
    /// after the others.
    Turn,
    /// The connection is closing: nothing more is executed.
    Closing,
}

/// The protocol a connection speaks, decided by its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The binary protocol (first byte 0x80).
    Binary,
    /// The text protocol, meta commands included (any other first byte).
    Text,
}

impl Protocol {
    /// The protocol a connection whose first byte is `first` speaks.
    pub fn detect(first: u8) -> Protocol {
        if first == protocol::binary::REQUEST_MAGIC {
            Protocol::Binary
        } else {
            Protocol::Text
        }
    }
}

/// One connection's protocol state, kept by the packet path next to its socket.
#[derive(Debug)]
pub struct Session {
    /// The connection's protocol, once its first byte has arrived.
    protocol: Option<Protocol>,
    /// Bytes of a refused frame still to be skipped (an oversize value, an unknown opcode's body).
    skip_bytes: u64,
    /// Set once a frame asked to close (QUIT, a malformed frame): nothing more is executed.
    closing: bool,
    /// Text protocol: bytes at the start of the pending input known to hold no newline, so a
    /// long line arriving in pieces is searched once.
    line_scanned: usize,
    /// Text protocol: a multi-key retrieval stopped part-way; its line stays at the front of
    /// the input until its last key is done.
    get_resume: Option<GetResume>,
    /// Requests (and keys) this connection may still execute in its current turn.
    turn_left: usize,
    /// Requests forwarded to other workers whose replies are still to come.
    pub(crate) holes: forward::Holes,
}

/// Where a multi-key retrieval stopped: its line's length, and where in the line's text its
/// next key starts (the keys were checked when the line was first parsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GetResume {
    pub command: protocol::text::GetCommand,
    pub exptime: i64,
    pub line_len: usize,
    pub next_key_at: usize,
}

impl Default for Session {
    fn default() -> Session {
        Session {
            protocol: None,
            skip_bytes: 0,
            closing: false,
            line_scanned: 0,
            get_resume: None,
            turn_left: usize::MAX,
            holes: forward::Holes::default(),
        }
    }
}

impl Session {
    /// The connection's protocol, `None` until its first byte has been executed.
    pub fn protocol(&self) -> Option<Protocol> {
        self.protocol
    }

    /// True once the connection must be closed after its pending output is sent.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Stops executing frames on this connection (the peer closed, or the server is leaving).
    pub fn close(&mut self) {
        self.closing = true;
    }

    /// Names the connection for replies from other workers (its table's packed id).
    pub fn set_token(&mut self, token: Token) {
        self.holes.token = token;
    }

    /// Starts a turn: at most `requests` requests (and keys of multi-key reads) execute until
    /// the next turn. A session starts with no limit.
    pub fn begin_turn(&mut self, requests: usize) {
        self.turn_left = requests;
    }

    /// Forwarded requests still waiting for their replies.
    pub fn forwards_in_flight(&self) -> usize {
        self.holes.pending.len()
    }

    /// True when no more may be forwarded until replies arrive.
    pub fn forwards_full(&self) -> bool {
        self.holes.full()
    }

    /// True while a multi-key retrieval is stopped part-way.
    pub fn mid_request(&self) -> bool {
        self.get_resume.is_some()
    }

    /// A session of `protocol` for one forwarded request.
    fn for_protocol(protocol: Protocol) -> Session {
        Session {
            protocol: Some(protocol),
            ..Session::default()
        }
    }

    /// Counts one request (or key) against the turn.
    fn spend_turn(&mut self) {
        self.turn_left = self.turn_left.saturating_sub(1);
    }
}

/// What one call to [`Engine::execute`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Input bytes consumed; the caller drops them and keeps the rest.
    pub consumed: usize,
    /// Bytes still needed to make progress past the consumed prefix (0 when execution stopped
    /// for another reason than [`Stop::Input`], or no request has started). Exact for a binary
    /// frame and a text data block; for a text line whose newline has not arrived it is the
    /// room left before the line limit (at most 16 KiB), and while a refused body is skipped at
    /// most 64 KiB, so a caller reads whatever has arrived. A caller's buffer should grow with
    /// what arrives, not with this figure (a frame may announce 4 GiB and never send it).
    pub needed: usize,
    /// Close the connection once `out` has been sent.
    pub close: bool,
    /// Why execution stopped.
    pub stop: Stop,
}

/// Per-core request executor: this core's store shard plus its command counters.
pub struct Engine {
    shard: Shard,
    counters: Counters,
    config: EngineConfig,
    info: ServerInfo,
    outbox: forward::Outbox,
}

impl Engine {
    /// An engine with an empty shard.
    pub fn new(config: EngineConfig) -> Engine {
        Engine {
            shard: Shard::new(config.shard),
            counters: Counters::default(),
            outbox: forward::Outbox::new(config.threads.max(1)),
            config,
            info: ServerInfo::default(),
        }
    }

    /// Executes every complete frame at the start of `input`, appending replies to `out`.
    ///
    /// `now` is the unix time in seconds read by the caller's clock. Execution stops at an
    /// incomplete frame, when `out` holds [`OUT_HIGH_WATER_BYTES`] or more, when too much waits
    /// on other workers, when the session's turn is used up, or when the connection must close;
    /// [`Outcome::stop`] says which. A multi-key `get` may stop part-way: its line is then not
    /// consumed, and the next call with the same input continues with its next key.
    pub fn execute(
        &mut self,
        session: &mut Session,
        input: &[u8],
        out: &mut Vec<u8>,
        now: u64,
    ) -> Outcome {
        let protocol = match session.protocol {
            Some(protocol) => protocol,
            None => match input.first() {
                Some(&first) => *session.protocol.insert(Protocol::detect(first)),
                None => {
                    return Outcome {
                        consumed: 0,
                        needed: 0,
                        close: session.closing,
                        stop: if session.closing {
                            Stop::Closing
                        } else {
                            Stop::Input
                        },
                    };
                }
            },
        };
        match protocol {
            Protocol::Binary => self.run_requests(session, input, out, |e, s, buf, out| {
                binary::step(e, s, buf, out, now)
            }),
            Protocol::Text => self.run_requests(session, input, out, |e, s, buf, out| {
                text::step(e, s, buf, out, now)
            }),
        }
    }

    /// The loop every protocol shares: skips the body of a refused request as it arrives,
    /// stops once the connection is closing, when the output backlog reaches
    /// [`OUT_HIGH_WATER_BYTES`], when forwarding must wait, when the turn is used up or when the
    /// input runs out, and counts bytes in and out. `step` handles the one request at the front
    /// of the input.
    fn run_requests(
        &mut self,
        session: &mut Session,
        input: &[u8],
        out: &mut Vec<u8>,
        mut step: impl FnMut(&mut Engine, &mut Session, &[u8], &mut Vec<u8>) -> Step,
    ) -> Outcome {
        let out_start = out.len();
        let mut pos = 0;
        let stopped = |pos: usize, stop: Stop| Outcome {
            consumed: pos,
            needed: 0,
            close: stop == Stop::Closing,
            stop,
        };
        let outcome = loop {
            if session.closing {
                break stopped(pos, Stop::Closing);
            }
            if session.skip_bytes > 0 {
                let available = (input.len() - pos) as u64;
                let n = available.min(session.skip_bytes);
                pos += n as usize;
                session.skip_bytes -= n;
                if session.skip_bytes > 0 {
                    let needed = session.skip_bytes.min(SKIP_READ_HINT_BYTES as u64) as usize;
                    break Outcome {
                        needed,
                        ..stopped(pos, Stop::Input)
                    };
                }
                // The end of a refused body counts as a request against the turn.
                session.spend_turn();
            }
            if pos == input.len() {
                break stopped(pos, Stop::Input);
            }
            if out.len() >= OUT_HIGH_WATER_BYTES {
                break stopped(pos, Stop::Output);
            }
            if session.holes.full() {
                break stopped(pos, Stop::Forwards);
            }
            if session.turn_left == 0 {
                break stopped(pos, Stop::Turn);
            }
            match step(self, session, &input[pos..], out) {
                Step::Done(len) => {
                    pos += len;
                    session.spend_turn();
                }
                Step::Wait(needed) => {
                    break Outcome {
                        needed,
                        ..stopped(pos, Stop::Input)
                    };
                }
                Step::Stop(stop) => break stopped(pos, stop),
            }
        };
        if outcome.stop == Stop::Turn {
            self.counters.conn_yields += 1;
        }
        self.counters.bytes_read += outcome.consumed as u64;
        self.counters.bytes_written += (out.len() - out_start) as u64;
        outcome
    }

    /// The worker that owns `key` when it is not this one.
    #[inline]
    fn remote_owner(&self, key: &[u8]) -> Option<usize> {
        if self.config.threads <= 1 {
            return None;
        }
        let owner = owner_of(key, self.config.threads);
        (owner != self.config.worker).then_some(owner)
    }

    /// Executes one entry another worker forwarded here, appending its reply (for `token`'s
    /// request `seq`) to `replies`; returns the reply's length in bytes.
    fn execute_forwarded(
        &mut self,
        token: Token,
        seq: u64,
        op: forward::Op,
        request: &[u8],
        replies: &mut Replies,
        now: u64,
    ) -> usize {
        let start = replies.bytes.len();
        let mut close = false;
        let payload = match op {
            forward::Op::Execute(_) | forward::Op::TextGetKey => {
                let protocol = protocol_of(op);
                let mut session = Session::for_protocol(protocol);
                let out = &mut replies.bytes;
                // A forwarded request is complete (the sender parsed it), so the step
                // executes all of it.
                let _ = match protocol {
                    Protocol::Binary => binary::step(self, &mut session, request, out, now),
                    Protocol::Text => text::step(self, &mut session, request, out, now),
                };
                if op == forward::Op::TextGetKey && out[start..].ends_with(b"END\r\n") {
                    out.truncate(out.len() - 5);
                }
                close = session.closing;
                forward::Payload::Bytes {
                    start,
                    len: replies.bytes.len() - start,
                }
            }
            forward::Op::Snapshot => forward::Payload::Snapshot(Box::new(self.snapshot())),
            forward::Op::Flush { delay, now } => {
                self.shard.flush_all(delay, now);
                forward::Payload::Bytes { start, len: 0 }
            }
            forward::Op::Credit(_) | forward::Op::Release => return 0,
        };
        replies.entries.push(forward::ReplyEntry {
            token,
            seq,
            close,
            payload,
        });
        replies.bytes.len() - start
    }

    /// Counts reply bytes that reached a connection from another worker.
    pub(crate) fn count_written(&mut self, len: usize) {
        self.counters.bytes_written += len as u64;
    }

    /// A read: looks `key` up, counting `cmd_get`.
    fn get(&mut self, key: &[u8], now: u64) -> Option<ItemView<'_>> {
        self.counters.cmd_get += 1;
        self.shard.get(key, now)
    }

    /// A touch (or get-and-touch): new expiry for a held key, counting `cmd_touch`.
    fn touch(&mut self, key: &[u8], exptime: i64, now: u64) -> Option<ItemView<'_>> {
        self.counters.cmd_touch += 1;
        self.shard.touch(key, exptime, now)
    }

    /// A store in any mode, counting `cmd_set`.
    fn store(&mut self, write: Write<'_>, now: u64) -> Result<u64, StoreError> {
        self.counters.cmd_set += 1;
        self.shard.store(write, now)
    }

    /// A store refused before its value was read because it can never fit: counted in
    /// `cmd_set` like any other store, whichever protocol it came in.
    fn refuse_too_large(&mut self) {
        self.counters.cmd_set += 1;
    }

    /// Whether an item of this key and value length can ever be stored (`-I`).
    fn fits(&self, key_len: usize, value_len: usize) -> bool {
        store::item_size(key_len, value_len) <= self.config.shard.max_item_size
    }

    /// flush_all with a delay, counting `cmd_flush`.
    fn flush_all(&mut self, delay: i64, now: u64) {
        self.counters.cmd_flush += 1;
        self.shard.flush_all(delay, now);
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

/// Writes a `stats` reply whose figures every worker has sent.
pub(crate) fn render_gathered(out: &mut Vec<u8>, gather: &forward::Gather) {
    let snapshot = &gather.snapshot;
    match gather.render {
        forward::StatsRender::Text { group, now } => text::render_stats(out, group, now, snapshot),
        forward::StatsRender::Binary {
            opcode,
            quiet,
            opaque,
            general,
            now,
        } => binary::render_stats(out, opcode, quiet, opaque, general, now, snapshot),
    }
}

/// The protocol whose step executes a forwarded entry.
fn protocol_of(op: forward::Op) -> Protocol {
    match op {
        forward::Op::Execute(protocol) => protocol,
        _ => Protocol::Text,
    }
}

#[cfg(test)]
pub(crate) mod tests;
