//! One client connection's buffers, shared by every packet path.
//!
//! ```text
//! socket bytes ─▶ (in place, or InputBuf when a frame is split) ─▶ Engine::execute ─▶ out ─▶ socket
//! ```
//!
//! The smoltcp paths parse straight out of the socket's receive buffer and only copy into
//! [`InputBuf`] when a frame is incomplete there (it wraps around the ring, or is larger than the
//! ring); the kernel path reads into [`InputBuf`]. Replies are appended to `out` and sent as the
//! socket takes them; at [`OUT_HIGH_WATER_BYTES`] no more requests (or keys of a multi-key
//! `get`) run until the client reads.
//!
//! What a connection holds is bounded, whatever its client sends or announces:
//! - input: the buffered part of one request that is still arriving, at most a value of `-I`
//!   with its header or line, a `get` line of `MAX_MULTIGET_LINE_LEN`, or a RESP command of
//!   at most twice `-I` (its bulk strings at most `-I` each); a read asks for at
//!   most [`READ_AT_ONCE_BYTES`] of room, so the buffer stays within what arrived plus that,
//!   and a refused body is skipped as it streams through, never buffered;
//! - output: [`OUT_HIGH_WATER_BYTES`] plus one reply, plus for each other worker
//!   [`FORWARD_REPLY_CREDIT_BYTES`] of replies and one more (`engine/forward.rs`).
//!
//! With several workers, a request for a key another worker owns leaves a hole in `out` where
//! its reply belongs: only the bytes before the first hole are sent, and
//! [`ClientConn::deliver`] splices a reply into its hole when it comes back, so replies leave
//! in request order whichever worker produced them. As those bytes are sent, their credit goes
//! back to the worker that produced them ([`ClientConn::settle`]).

use store::Now;

use crate::engine::{
    Delivery, Engine, FORWARD_REPLY_CREDIT_BYTES, OUT_HIGH_WATER_BYTES, Outcome, Protocol, Session,
    Stop,
};

/// Smallest free space offered to a socket read, and how much an empty buffer may grow at once.
const READ_CHUNK_BYTES: usize = 16 * 1024;
/// The most room one read asks for ([`InputBuf::read_space`]).
pub const READ_AT_ONCE_BYTES: usize = 64 * 1024;
/// Buffers grown past this are given back once drained, so an idle connection that once moved
/// a 1 MiB value does not keep holding it.
const KEEP_CAPACITY_BYTES: usize = 64 * 1024;

/// Received bytes not yet consumed by the engine: `buf[start..end]`.
#[derive(Debug, Default)]
pub struct InputBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl InputBuf {
    /// The unconsumed bytes.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// True when nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Bytes buffered.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Drops `n` consumed bytes from the front.
    pub fn consume(&mut self, n: usize) {
        self.start += n.min(self.len());
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > KEEP_CAPACITY_BYTES {
                self.buf = Vec::new();
            }
        }
    }

    /// Free space for a read of up to `hint` more bytes (at least one), growing the buffer by
    /// at most [`READ_AT_ONCE_BYTES`], and by no more than it already holds once that is past a
    /// 16 KiB read chunk: the buffer stays within what arrived plus 64 KiB (and within twice
    /// what arrived plus a chunk), whatever a frame announced. Fill it, then call
    /// [`filled`](Self::filled).
    pub fn read_space(&mut self, hint: usize) -> &mut [u8] {
        let most = self.len().clamp(READ_CHUNK_BYTES, READ_AT_ONCE_BYTES);
        self.spare(hint.clamp(1, most))
    }

    /// Free space at the end with room for at least `min` more bytes (the buffered bytes are
    /// moved to the front first when that makes room). Fill it, then call [`filled`](Self::filled).
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.buf.len() - self.end < min && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < min {
            self.buf.resize(self.end + min.max(READ_CHUNK_BYTES), 0);
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` bytes of the last [`spare`](Self::spare) as received.
    pub fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Appends `bytes`.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
    }
}

/// A client connection's protocol state and buffers.
#[derive(Debug)]
pub struct ClientConn {
    /// The engine's per-connection state.
    pub session: Session,
    /// Received bytes the engine has not consumed yet.
    pub input: InputBuf,
    /// Replies not yet sent: `out[out_sent..]`.
    out: Vec<u8>,
    out_sent: usize,
    /// Bytes the engine needs before the buffered input can make progress (0: unknown).
    pub needed: usize,
    /// Why the engine stopped last time.
    pub stop: Stop,
    /// Listed by the packet path to be served again on its next loop.
    pub again: bool,
    /// When the bytes not yet served arrived (the loop clock's reading, monotonic
    /// nanoseconds), for `stats latency`; `None` once everything received was served.
    arrived_ns: Option<u64>,
}

impl Default for ClientConn {
    fn default() -> ClientConn {
        ClientConn {
            session: Session::default(),
            input: InputBuf::default(),
            out: Vec::new(),
            out_sent: 0,
            needed: 0,
            stop: Stop::Input,
            again: false,
            arrived_ns: None,
        }
    }
}

impl ClientConn {
    /// Before the connection's first byte is executed: a connection accepted on `resp_port`
    /// (`--resp-port`) speaks RESP (RESP2 until `HELLO 3`); any other decides by its first
    /// byte (memcached's binary or text protocol).
    pub fn accepted_on(&mut self, local_port: u16, resp_port: Option<u16>) {
        if resp_port == Some(local_port) && self.session.protocol().is_none() {
            self.session
                .switch(Protocol::Resp(protocol::resp::Version::Resp2));
            if let Some(record) = self.session.record() {
                record.note_client(2, 0, None);
            }
        }
    }

    /// Reply bytes that may be sent now: those before the first reply still expected from
    /// another worker.
    pub fn pending_output(&self) -> &[u8] {
        let end = self.session.holes.sendable_end(self.out.len());
        &self.out[self.out_sent..end]
    }

    /// Reply bytes held, sent or not, before compaction (for bounds checks and tests).
    pub fn output_backlog(&self) -> usize {
        self.out.len() - self.out_sent
    }

    /// Marks `n` reply bytes as sent; the credit of other workers' replies among them becomes
    /// due (hand it back with [`settle`](Self::settle)).
    pub fn sent(&mut self, n: usize) {
        self.out_sent += n;
        self.session.holes.sent_through(self.out_sent);
        if self.out_sent >= self.out.len() && self.session.forwards_in_flight() == 0 {
            self.out.clear();
            self.out_sent = 0;
            if self.out.capacity() > KEEP_CAPACITY_BYTES {
                self.out = Vec::new();
            }
        }
    }

    /// Hands back to other workers the credit of their replies that were sent.
    pub fn settle(&mut self, engine: &mut Engine) {
        engine.return_credit(&mut self.session);
    }

    /// True when the engine may run more requests: the output backlog is below the high water,
    /// other workers can take more of this connection's requests, and it is not closing. (Its
    /// turn and full queues to other workers are the engine's to say, in [`Outcome::stop`].)
    pub fn may_execute(&self) -> bool {
        self.output_backlog() < OUT_HIGH_WATER_BYTES
            && !self.session.forwards_full()
            && !self.session.is_closing()
    }

    /// True when the last execution stopped for want of input: read before executing again.
    pub fn wants_input(&self) -> bool {
        self.stop == Stop::Input
    }

    /// True once the connection should be closed: it is closing, no reply is still expected
    /// from another worker, and everything was sent.
    pub fn finished(&self) -> bool {
        self.session.is_closing()
            && self.session.forwards_in_flight() == 0
            && self.out_sent == self.out.len()
    }

    /// True while replies from other workers are still expected.
    pub fn awaiting_replies(&self) -> bool {
        self.session.forwards_in_flight() > 0
    }

    /// Puts a reply from another worker in its place in the output (a `stats` or `flush_all`
    /// that went to every worker completes with its last reply). A reply whose request is not
    /// pending here is ignored.
    pub fn deliver(&mut self, engine: &mut Engine, delivery: Delivery<'_>) {
        engine.deliver(&mut self.session, &mut self.out, delivery);
    }

    /// Notes that bytes arrived at `ns` (the loop clock's reading): the requests in them are
    /// timed from then, unless earlier bytes still wait to be served.
    pub fn arrived(&mut self, ns: u64) {
        self.arrived_ns.get_or_insert(ns);
    }

    /// Appends `bytes` (log lines for a watcher) to the output while it is below the
    /// high-water mark; returns how many it took.
    pub fn push_output(&mut self, bytes: &[u8]) -> usize {
        let room = OUT_HIGH_WATER_BYTES.saturating_sub(self.output_backlog());
        let n = room.min(bytes.len());
        self.out.extend_from_slice(&bytes[..n]);
        n
    }

    /// Records why the server ends this connection (for its close event).
    pub fn closing(&mut self, reason: crate::control::CloseReason) {
        if let Some(record) = self.session.record() {
            record.closing(reason);
        }
    }

    /// Runs the engine over `bytes` (a slice of the socket's receive buffer, parsed in place)
    /// and returns how many it consumed.
    pub fn execute_in_place(
        &mut self,
        engine: &mut Engine,
        bytes: &[u8],
        now: impl Into<Now>,
    ) -> Outcome {
        self.compact_output();
        self.session
            .set_arrival(self.arrived_ns.unwrap_or_default());
        let outcome = engine.execute(&mut self.session, bytes, &mut self.out, now);
        self.needed = outcome.needed;
        self.stop = outcome.stop;
        if outcome.stop == Stop::Input && outcome.consumed == bytes.len() && self.input.is_empty() {
            self.arrived_ns = None;
        }
        outcome
    }

    /// Runs the engine over the buffered input and drops what it consumed.
    pub fn execute_buffered(&mut self, engine: &mut Engine, now: impl Into<Now>) -> Outcome {
        self.compact_output();
        self.session
            .set_arrival(self.arrived_ns.unwrap_or_default());
        let outcome = engine.execute(&mut self.session, self.input.data(), &mut self.out, now);
        self.input.consume(outcome.consumed);
        self.needed = outcome.needed;
        self.stop = outcome.stop;
        if outcome.stop == Stop::Input && self.input.is_empty() {
            self.arrived_ns = None;
        }
        outcome
    }

    /// Drops sent bytes from the front of `out` before appending more, so it does not grow
    /// while a client reads slowly.
    fn compact_output(&mut self) {
        if self.out_sent > 0 {
            self.out.drain(..self.out_sent);
            self.session.holes.shift_back(self.out_sent);
            self.out_sent = 0;
        }
    }
}

/// The most output one connection may hold with `workers` workers and items of up to
/// `max_item_size` bytes: the high-water mark and one reply, and for every other worker its
/// reply credit and one reply. (A reply is at most the item and a header or line of 512 bytes.)
pub const fn output_bound_bytes(workers: usize, max_item_size: usize) -> usize {
    let reply = max_item_size + 512;
    OUT_HIGH_WATER_BYTES + reply + workers.saturating_sub(1) * (FORWARD_REPLY_CREDIT_BYTES + reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_buf_compacts_and_grows() {
        let mut input = InputBuf::default();
        input.extend(b"hello world");
        input.consume(6);
        assert_eq!(input.data(), b"world");
        let spare = input.spare(READ_CHUNK_BYTES * 2);
        assert!(spare.len() >= READ_CHUNK_BYTES * 2);
        spare[..3].copy_from_slice(b"!!!");
        input.filled(3);
        assert_eq!(input.data(), b"world!!!");
        input.consume(8);
        assert!(input.is_empty());
    }

    #[test]
    fn reads_grow_the_buffer_with_what_arrived_not_with_what_was_announced() {
        let mut input = InputBuf::default();
        // A frame announcing 4 GiB: the first read is one chunk.
        assert_eq!(input.read_space(u32::MAX as usize).len(), READ_CHUNK_BYTES);
        let mut arrived = 0;
        // Each read at most doubles the buffer, and adds at most 64 KiB.
        for _ in 0..20 {
            let n = input.read_space(1 << 30).len();
            assert!(n <= READ_AT_ONCE_BYTES);
            arrived += n;
            input.filled(n);
            assert!(
                input.buf.len()
                    <= (2 * arrived + READ_CHUNK_BYTES).min(arrived + READ_AT_ONCE_BYTES),
                "{} bytes for {arrived} arrived",
                input.buf.len()
            );
        }
        // A small hint is a small read, but never an empty one.
        let mut small = InputBuf::default();
        assert!(!small.read_space(0).is_empty());
    }

    #[test]
    fn refused_bodies_stream_through_a_chunk_sized_buffer() {
        use crate::engine::{Engine, EngineConfig};
        let mut engine = Engine::new(EngineConfig {
            conn_limit: 1,
            ..EngineConfig::new(
                store::ShardConfig {
                    memory_limit_bytes: 1 << 20,
                    max_item_size: 1 << 20,
                },
                crate::control::Control::new(Default::default(), 0),
            )
        });
        let mut conn = ClientConn::default();
        // An unknown opcode with a 4 GiB body, read as the kernel path reads.
        let mut header = [0u8; 24];
        header[0] = 0x80;
        header[1] = 0xfe;
        header[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        conn.input.extend(&header);
        conn.execute_buffered(&mut engine, 0);
        for _ in 0..100 {
            let spare = conn.input.read_space(conn.needed);
            spare.fill(0x55);
            let n = spare.len();
            conn.input.filled(n);
            conn.execute_buffered(&mut engine, 0);
            assert!(conn.input.is_empty(), "skipped as it arrives");
            assert!(conn.input.buf.len() <= KEEP_CAPACITY_BYTES);
        }
        assert_eq!(conn.stop, Stop::Input);
    }

    #[test]
    fn large_buffers_are_given_back_once_drained() {
        let mut input = InputBuf::default();
        input.extend(&vec![1u8; 1 << 20]);
        input.consume(1 << 20);
        assert_eq!(input.buf.capacity(), 0);
    }
}
