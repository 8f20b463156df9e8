//! Cross-core forwarding: requests for keys another worker's shard owns, and the replies that
//! come back.
//!
//! ```text
//! worker A: engine finds key k owned by B ─▶ Outbox[B] (one Batch per destination per loop)
//!           hole in the connection's output at the request's place
//! worker B: Engine::serve_forwarded(Batch) ─▶ the same protocol step, on B's shard ─▶ Replies
//! worker A: ClientConn::deliver(reply) fills the hole; output leaves in request order
//! ```
//!
//! A key's owner is `hash(key) mod workers`, with a fixed, seeded hash ([`owner_of`]), so every
//! worker (and a client that wants to steer its connections) computes the same owner. A
//! forwarded request carries its raw bytes and is executed on the owner by the very protocol
//! step that would have executed it locally, so nothing of the protocol is duplicated: a text
//! multi-key `get` is split into one single-key request per remote key, whose `END` the owner
//! leaves off. `flush_all` and `stats` go to every other worker: the flush is answered once all
//! have flushed, and `stats` sums every worker's figures.
//!
//! Each connection's output is one buffer with holes: bytes before the first hole may be sent,
//! a reply is spliced into its hole when it arrives (in any order across workers), and later
//! local replies wait behind the hole. At most [`MAX_FORWARDS_IN_FLIGHT`] holes per connection
//! are open; above that the connection stops executing until replies arrive.

use std::collections::VecDeque;

use protocol::text::{GetCommand, StatsGroup};

use super::Protocol;
use crate::stats::Snapshot;

/// Forwarded requests a connection may have waiting for replies before it stops executing.
pub const MAX_FORWARDS_IN_FLIGHT: usize = 1024;

/// Batches kept for reuse per engine, so steady forwarding does not allocate.
const SPARE_BATCHES: usize = 32;

/// The seed of the owner hash; fixed so that every worker and every client agree.
pub const OWNER_HASH_SEED: u64 = 0x6d65_6d73_7069_6e21;

/// The worker that owns `key` among `workers`: `hash(key) mod workers`, with a fixed, seeded
/// 64-bit multiply-xor hash over 8-byte words (any key length; stable across runs, machines
/// and versions of Rust).
pub fn owner_of(key: &[u8], workers: usize) -> usize {
    if workers <= 1 {
        return 0;
    }
    (owner_hash(key) % workers as u64) as usize
}

/// The hash [`owner_of`] reduces.
pub fn owner_hash(key: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = OWNER_HASH_SEED ^ (key.len() as u64).wrapping_mul(K);
    let mut words = key.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    // The finalizer of MurmurHash3's 64-bit variant: every input bit reaches the low bits.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A connection as the packet path identifies it (its table's packed connection id).
pub type Token = u128;

/// What the owner does with one forwarded entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Execute the bytes, one complete request of this protocol.
    Execute(Protocol),
    /// A text `get`/`gets`/`gat`/`gats` of one key (the bytes): reply without the `END`.
    TextGetKey,
    /// Reply with this worker's statistics.
    Snapshot,
    /// Flush this worker's shard (`flush_all` with this delay, as of `now`).
    Flush { delay: i64, now: u64 },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub token: Token,
    pub seq: u64,
    pub op: Op,
    pub start: usize,
    pub len: usize,
}

/// Requests one worker sends another in one message.
#[derive(Debug, Default)]
pub struct Batch {
    pub(crate) entries: Vec<Entry>,
    pub(crate) bytes: Vec<u8>,
}

impl Batch {
    /// Requests in the batch.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the batch holds no request.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.bytes.clear();
    }
}

/// What came back for one forwarded entry.
#[derive(Debug)]
pub(crate) enum Payload {
    /// Reply bytes (`Replies::bytes[start..start + len]`).
    Bytes { start: usize, len: usize },
    /// The owner's statistics.
    Snapshot(Box<Snapshot>),
}

#[derive(Debug)]
pub(crate) struct ReplyEntry {
    pub token: Token,
    pub seq: u64,
    /// The request closed its (temporary) session on the owner: close the connection after it.
    pub close: bool,
    pub payload: Payload,
}

/// The owner's replies to one [`Batch`].
#[derive(Debug, Default)]
pub struct Replies {
    pub(crate) entries: Vec<ReplyEntry>,
    pub(crate) bytes: Vec<u8>,
}

impl Replies {
    /// Replies in the message.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the message holds no reply.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The connection the reply at `index` is for, for the packet path to look up.
    pub fn token(&self, index: usize) -> Option<Token> {
        self.entries.get(index).map(|e| e.token)
    }

    /// The reply at `index`, to hand to [`ClientConn::deliver`](crate::conn::ClientConn::deliver).
    pub fn get(&self, index: usize) -> Option<Delivery<'_>> {
        let entry = self.entries.get(index)?;
        Some(Delivery {
            seq: entry.seq,
            close: entry.close,
            payload: match &entry.payload {
                Payload::Bytes { start, len } => {
                    DeliveryPayload::Bytes(&self.bytes[*start..*start + *len])
                }
                Payload::Snapshot(snapshot) => DeliveryPayload::Snapshot(snapshot),
            },
        })
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.bytes.clear();
    }
}

/// One reply, borrowed from its [`Replies`].
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    pub(crate) seq: u64,
    pub(crate) close: bool,
    pub(crate) payload: DeliveryPayload<'a>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum DeliveryPayload<'a> {
    Bytes(&'a [u8]),
    Snapshot(&'a Snapshot),
}

/// How a gathered `stats` reply is written once every worker's figures are in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StatsRender {
    /// Text `stats [group]`.
    Text { group: StatsGroup, now: u64 },
    /// Binary STAT: the request's header fields, and general (true) or settings figures.
    Binary {
        opcode: protocol::binary::Opcode,
        quiet: bool,
        opaque: u32,
        general: bool,
        now: u64,
    },
}

/// Figures summed so far for a `stats` that went to every worker.
#[derive(Debug, Clone)]
pub(crate) struct Gather {
    pub snapshot: Snapshot,
    pub render: StatsRender,
}

/// A hole in a connection's output: replies still to come for one request.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub seq: u64,
    /// Where the reply goes in the connection's output buffer.
    pub at: usize,
    /// Replies still expected (1, or one per other worker for a fan-out).
    pub awaiting: usize,
    /// For `stats`: the figures gathered so far.
    pub gather: Option<Box<Gather>>,
}

/// The forwarding state of one connection, kept in its [`Session`](super::Session).
#[derive(Debug, Default, Clone)]
pub(crate) struct Holes {
    pub token: Token,
    pub next_seq: u64,
    pub pending: VecDeque<Pending>,
}

impl Holes {
    /// Opens a hole at `at` expecting `awaiting` replies; returns its sequence number.
    pub fn open(&mut self, at: usize, awaiting: usize, gather: Option<Box<Gather>>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.push_back(Pending {
            seq,
            at,
            awaiting,
            gather,
        });
        seq
    }

    /// The end of the sendable output: the first hole, or `len`.
    pub fn sendable_end(&self, len: usize) -> usize {
        self.pending.front().map_or(len, |p| p.at)
    }

    /// Output bytes before every hole were dropped from the front of the buffer.
    pub fn shift_back(&mut self, dropped: usize) {
        for hole in &mut self.pending {
            hole.at -= dropped;
        }
    }

    /// `len` bytes were inserted for the hole at `index`: every later hole moves.
    pub fn shift_after(&mut self, index: usize, len: usize) {
        for hole in self.pending.iter_mut().skip(index + 1) {
            hole.at += len;
        }
    }

    /// The index of the hole `seq`.
    pub fn find(&self, seq: u64) -> Option<usize> {
        // Holes are opened in sequence order and replies mostly arrive in it.
        self.pending.iter().position(|p| p.seq == seq)
    }
}

/// Per-destination batches of one engine, and spare batches for reuse.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub batches: Vec<Batch>,
    pub spare_batches: Vec<Batch>,
    pub spare_replies: Vec<Replies>,
}

impl Outbox {
    pub fn new(workers: usize) -> Outbox {
        Outbox {
            batches: (0..workers).map(|_| Batch::default()).collect(),
            spare_batches: Vec::new(),
            spare_replies: Vec::new(),
        }
    }

    /// Appends one entry for `dest`, its bytes written by `write`.
    pub fn push(
        &mut self,
        dest: usize,
        token: Token,
        seq: u64,
        op: Op,
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        let batch = &mut self.batches[dest];
        let start = batch.bytes.len();
        write(&mut batch.bytes);
        batch.entries.push(Entry {
            token,
            seq,
            op,
            start,
            len: batch.bytes.len() - start,
        });
    }

    pub fn recycle_batch(&mut self, mut batch: Batch) {
        if self.spare_batches.len() < SPARE_BATCHES {
            batch.clear();
            self.spare_batches.push(batch);
        }
    }

    pub fn recycle_replies(&mut self, mut replies: Replies) {
        if self.spare_replies.len() < SPARE_BATCHES {
            replies.clear();
            self.spare_replies.push(replies);
        }
    }
}

/// The request line a text retrieval of one key is forwarded as.
pub(crate) fn write_text_get(out: &mut Vec<u8>, command: GetCommand, exptime: i64, key: &[u8]) {
    let name: &[u8] = match command {
        GetCommand::Get => b"get",
        GetCommand::Gets => b"gets",
        GetCommand::Gat => b"gat",
        GetCommand::Gats => b"gats",
    };
    out.extend_from_slice(name);
    if matches!(command, GetCommand::Gat | GetCommand::Gats) {
        use std::io::Write as _;
        // Writing into a Vec cannot fail.
        let _ = write!(out, " {exptime}");
    }
    out.push(b' ');
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN_EMPTY: u64 = 16_505_421_381_294_584_194;
    const PIN_KEY: u64 = 11_113_004_621_276_207_644;

    #[test]
    fn owners_are_stable_and_spread() {
        // Fixed values: a change of the hash changes where clients' keys live.
        assert_eq!(owner_hash(b""), PIN_EMPTY);
        assert_eq!(owner_hash(b"memspin:00000001"), PIN_KEY);
        assert_eq!(owner_of(b"anything", 1), 0);
        let first: Vec<usize> = (0..8)
            .map(|i| owner_of(format!("key:{i}").as_bytes(), 4))
            .collect();
        let again: Vec<usize> = (0..8)
            .map(|i| owner_of(format!("key:{i}").as_bytes(), 4))
            .collect();
        assert_eq!(first, again);
        for workers in [2usize, 3, 4, 8] {
            let mut counts = vec![0usize; workers];
            for i in 0..100_000 {
                counts[owner_of(format!("memspin:{i:08}").as_bytes(), workers)] += 1;
            }
            let expected = 100_000 / workers;
            for &count in &counts {
                assert!(
                    count.abs_diff(expected) < expected / 20,
                    "{workers} workers: {counts:?}"
                );
            }
        }
        // Every length, including multiples of 8 and the empty key, hashes without panicking,
        // and the length matters.
        let key = [7u8; 40];
        let hashes: Vec<u64> = (0..=40).map(|n| owner_hash(&key[..n])).collect();
        let mut unique = hashes.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), hashes.len());
    }

    #[test]
    fn holes_shift_in_order() {
        let mut holes = Holes::default();
        let a = holes.open(10, 1, None);
        let b = holes.open(10, 1, None);
        let c = holes.open(20, 1, None);
        assert_eq!(holes.sendable_end(30), 10);
        let ib = holes.find(b).unwrap();
        holes.shift_after(ib, 5);
        holes.pending.remove(ib);
        assert_eq!(
            holes.pending[0].at, 10,
            "a hole before the filled one stays"
        );
        assert_eq!(holes.pending[1].at, 25);
        holes.shift_back(10);
        assert_eq!(holes.pending[0].at, 0);
        assert_eq!(holes.find(a), Some(0));
        assert_eq!(holes.find(c), Some(1));
    }

    #[test]
    fn text_gets_are_forwarded_as_single_key_lines() {
        let mut out = Vec::new();
        write_text_get(&mut out, GetCommand::Gats, -1, b"k1");
        write_text_get(&mut out, GetCommand::Get, 0, b"k2");
        assert_eq!(out, b"gats -1 k1\r\nget k2\r\n");
    }
}
