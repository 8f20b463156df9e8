//! One client connection's buffers, shared by every packet path.
//!
//! ```text
//! socket bytes ─▶ (in place, or InputBuf when a frame is split) ─▶ Engine::execute ─▶ out ─▶ socket
//! ```
//!
//! The smoltcp paths parse straight out of the socket's receive buffer and only copy into
//! [`InputBuf`] when a frame is incomplete there (it wraps around the ring, or is larger than the
//! ring); the kernel path reads into [`InputBuf`]. Replies are appended to `out` and sent as the
//! socket takes them; above [`OUT_HIGH_WATER_BYTES`] no more frames run until the client reads.
//!
//! With several workers, a request for a key another worker owns leaves a hole in `out` where
//! its reply belongs: only the bytes before the first hole are sent, and
//! [`ClientConn::deliver`] splices a reply into its hole when it comes back, so replies leave
//! in request order whichever worker produced them.

use crate::engine::{
    self, Delivery, Engine, MAX_FORWARDS_IN_FLIGHT, OUT_HIGH_WATER_BYTES, Outcome, Session,
};

/// Smallest free space offered to a socket read.
const READ_CHUNK_BYTES: usize = 16 * 1024;
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
#[derive(Debug, Default)]
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
}

impl ClientConn {
    /// Reply bytes that may be sent now: those before the first reply still expected from
    /// another worker.
    pub fn pending_output(&self) -> &[u8] {
        let end = self.session.holes.sendable_end(self.out.len());
        &self.out[self.out_sent..end]
    }

    /// Marks `n` reply bytes as sent.
    pub fn sent(&mut self, n: usize) {
        self.out_sent += n;
        if self.out_sent >= self.out.len() && self.session.forwards_in_flight() == 0 {
            self.out.clear();
            self.out_sent = 0;
            if self.out.capacity() > KEEP_CAPACITY_BYTES {
                self.out = Vec::new();
            }
        }
    }

    /// True when the engine may run more frames (the output backlog is below the high water,
    /// and not too many requests wait on other workers).
    pub fn may_execute(&self) -> bool {
        self.out.len() - self.out_sent < OUT_HIGH_WATER_BYTES
            && self.session.forwards_in_flight() < MAX_FORWARDS_IN_FLIGHT
            && !self.session.is_closing()
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
        let holes = &mut self.session.holes;
        let Some(index) = holes.find(delivery.seq) else {
            return;
        };
        let hole = &mut holes.pending[index];
        hole.awaiting = hole.awaiting.saturating_sub(1);
        let mut bytes: &[u8] = &[];
        let mut rendered = Vec::new();
        match delivery.payload {
            engine::DeliveryPayload::Bytes(reply) if hole.gather.is_none() => bytes = reply,
            engine::DeliveryPayload::Bytes(_) => {}
            engine::DeliveryPayload::Snapshot(snapshot) => {
                if let Some(gather) = hole.gather.as_mut() {
                    gather.snapshot.merge(snapshot);
                }
            }
        }
        if hole.awaiting > 0 {
            return;
        }
        if let Some(gather) = hole.gather.take() {
            engine::render_gathered(&mut rendered, &gather);
            bytes = &rendered;
        }
        let at = hole.at;
        self.out.splice(at..at, bytes.iter().copied());
        engine.count_written(bytes.len());
        holes.shift_after(index, bytes.len());
        holes.pending.remove(index);
        if delivery.close {
            self.session.close();
        }
    }

    /// Runs the engine over `bytes` (a slice of the socket's receive buffer, parsed in place)
    /// and returns how many it consumed.
    pub fn execute_in_place(&mut self, engine: &mut Engine, bytes: &[u8], now: u64) -> Outcome {
        self.compact_output();
        let outcome = engine.execute(&mut self.session, bytes, &mut self.out, now);
        self.needed = outcome.needed;
        outcome
    }

    /// Runs the engine over the buffered input and drops what it consumed.
    pub fn execute_buffered(&mut self, engine: &mut Engine, now: u64) -> Outcome {
        self.compact_output();
        let outcome = engine.execute(&mut self.session, self.input.data(), &mut self.out, now);
        self.input.consume(outcome.consumed);
        self.needed = outcome.needed;
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
    fn large_buffers_are_given_back_once_drained() {
        let mut input = InputBuf::default();
        input.extend(&vec![1u8; 1 << 20]);
        input.consume(1 << 20);
        assert_eq!(input.buf.capacity(), 0);
    }
}
