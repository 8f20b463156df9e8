//! Cross-core forwarding: requests for keys another worker's shard owns, the replies that come
//! back, and the flow control that bounds both in bytes.
//!
//! ```text
//! home worker H (holds the connection)                owner worker W (holds the key)
//!   adapter: key k owned by W ─▶ batch for W ──Batch──▶ Forwarder::serve: the connection's lane
//!   hole in the output where the reply belongs           credit left? execute : park, in order
//!   Holes::deliver fills the hole ◀──Replies──────── replies, charged to the lane's credit
//!   reply bytes sent to the socket ──Credit(bytes)──▶ lane credit back: parked entries resume
//! ```
//!
//! **Owners.** A key's owner is `hash(key) mod workers`, with a fixed, seeded hash
//! ([`owner_of`], from the `owner` crate that clients share, described in `docs/steering.md`),
//! so every worker and a client that steers its requests compute the same owner. Every
//! request (or part of one) sent to its owner is counted (`memspin_forwarded` in `stats`). A
//! forwarded request carries its raw bytes and a [`Form`] (its protocol, and the adapter's own
//! code for what the bytes are: a whole request, or one key of a multi-key one), and is
//! executed on the owner by the same adapter that would have executed it locally, so nothing
//! of a protocol is duplicated, and nothing here knows one. `flush_all` and `stats`
//! go to every other worker ([`Forwarder::fan_out`]): the flush is answered once all have
//! flushed. A request answered by several workers gathers their answers in one hole
//! ([`Gather`], written by the adapter): `stats` sums every worker's figures, a multi-key
//! command adds up what each owner found.
//!
//! **Order.** Each connection's output is one buffer with holes ([`Holes`]): bytes before the
//! first hole may be sent, a reply is spliced into its hole when it arrives (in any order across
//! workers), and later local replies wait behind the hole, so replies leave in request order.
//! Entries for one owner travel in one FIFO queue and the owner executes one connection's
//! entries in the order they were sent, parked or not, so a later request never executes on
//! its owner before an earlier one of the same connection.
//!
//! **Bytes, both ways.** The home counts each connection's forwarded request bytes until their
//! replies arrive and stops executing the connection above
//! [`FORWARD_REQUEST_HIGH_WATER_BYTES`] (or [`MAX_FORWARDS_IN_FLIGHT`] open holes), as it stops
//! above the output high-water mark. Replies are bounded by credit: for every (connection,
//! owner) pair the owner keeps a lane ([`Lanes`]) that starts with
//! [`FORWARD_REPLY_CREDIT_BYTES`] of credit; each reply it produces is charged to it (at least
//! [`MIN_REPLY_CHARGE_BYTES`], so the bookkeeping per reply stays a fraction of the credit), and
//! once the credit is spent the connection's later entries are parked on the owner, in order,
//! bytes and all. The home hands credit back ([`Op::Credit`]) only when the reply's bytes have
//! left for the socket, so a client that never reads holds at most one credit plus one reply
//! per owner, wherever those bytes are (owner, queue, or the connection's output). Credit
//! becomes due byte-exact, per reply, as the bytes before the first hole are sent, and goes back
//! with the connection's next request to that owner, or on its own once a quarter of the credit
//! is due or the connection is idle. The owner of the first hole, if it parked the entry that
//! hole waits for, spent all its credit on replies that come before it: once the client reads
//! them, all of it is due and goes back, so holes cannot wait on each other. A connection that
//! goes away (dropped by its table, however it ended) tells every owner it forwarded to
//! ([`Op::Release`]), which drops its lane and whatever is parked. Charging each forward its
//! worst case instead (a reply of `-I` for every GET) would bound the same bytes but allow one
//! forwarded GET in flight per connection, and pipelined small values would crawl; credit
//! charges what replies really are, and only a connection whose client stops reading waits.
//!
//! **Queues.** The queues between workers are bounded (`worker/mesh.rs`); no worker ever waits
//! on another. A batch a full queue refused stays in the sender's [`Forwarder`] (marked held),
//! and every connection that would forward to that worker stops ([`Blocked`], the engine's
//! `Stop::Blocked`) and is served again on a later loop; only control entries (credit, release)
//! are still added to a held batch. Replies a full queue refused stay in the owner, which takes no new requests until
//! they are handed back; replies are always taken, so the two directions cannot wait on each
//! other.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use store::Now;

use crate::stats::{Group, Snapshot};

pub use owner::{OWNER_HASH_SEED, owner_hash, owner_of};

mod holes;

pub(crate) use self::holes::*;

/// Open holes (forwarded requests awaiting replies) a connection may have before it stops
/// executing until replies arrive.
pub const MAX_FORWARDS_IN_FLIGHT: usize = 1024;

/// Forwarded request bytes a connection may have awaiting replies before it stops executing
/// (one more request, up to `-I` plus its header, may go over).
pub const FORWARD_REQUEST_HIGH_WATER_BYTES: usize = 256 * 1024;

/// Reply bytes an owner may produce for one connection before the connection has sent them
/// (one more reply, up to `-I` plus its header, may go over); past it the connection's entries
/// wait on the owner.
pub const FORWARD_REPLY_CREDIT_BYTES: usize = 256 * 1024;

/// The least a reply with any bytes is charged against the credit.
pub const MIN_REPLY_CHARGE_BYTES: usize = 64;

/// Credit due to an owner that the home hands back on its own, without waiting for the
/// connection's next request to that owner (a quarter of the credit: one control entry per
/// 64 KiB of replies at most).
pub const CREDIT_RETURN_BYTES: usize = FORWARD_REPLY_CREDIT_BYTES / 4;

/// Batches and reply messages kept for reuse per engine, so steady forwarding does not allocate.
const SPARE_BATCHES: usize = 32;

/// Buffers larger than this are not kept for reuse: a batch that once carried a 1 MiB value
/// does not hold the megabyte.
const SPARE_KEEP_BYTES: usize = 64 * 1024;

/// A connection as the packet path identifies it (its table's packed connection id).
pub type Token = u128;

/// How the owner runs a forwarded request: chosen by the adapter that forwards it (its
/// protocol, and its own code for what the bytes are) and read by the same adapter on the
/// owner. Forwarding carries it as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Form(pub u16);

/// What the owner does with one forwarded entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Execute the bytes, one complete request (or part of one) in this form.
    Execute(Form),
    /// Reply with this worker's statistics for this `stats` group.
    Snapshot(Group),
    /// Reset this worker's statistics (`stats reset`). No bytes in the reply.
    Reset,
    /// Flush this worker's shard (`flush_all` with this delay, as of `now`).
    Flush { delay: i64, now: Now },
    /// Empty this worker's shard: flush it and reclaim every item, as of `now`.
    Clear { now: Now },
    /// Control: this many bytes of the connection's replies were sent; its lane gets the
    /// credit back. No reply.
    Credit(usize),
    /// Control: the connection is gone; its lane and what is parked in it are dropped. No reply.
    Release,
    /// Hold for the cross-worker transaction of this epoch (`control::holds`): an empty
    /// reply, then nothing else runs on the owner until the transaction releases it.
    Hold(u64),
}

impl Op {
    /// Control entries carry no request and get no reply.
    fn is_control(self) -> bool {
        matches!(self, Op::Credit(_) | Op::Release)
    }
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
    /// Entries in the batch (requests and control entries).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the batch holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Requests in the batch (entries that get a reply).
    pub fn requests(&self) -> usize {
        self.entries.iter().filter(|e| !e.op.is_control()).count()
    }

    /// Bytes of forwarded requests the batch carries.
    pub fn request_bytes(&self) -> usize {
        self.bytes.len()
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

/// Replies an owner sends back to one worker in one message.
#[derive(Debug, Default)]
pub struct Replies {
    /// The worker that produced them.
    pub(crate) from: usize,
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

    /// Reply bytes the message carries.
    pub fn bytes_len(&self) -> usize {
        self.bytes.len()
    }

    /// The connection the reply at `index` is for, for the packet path to look up.
    pub fn token(&self, index: usize) -> Option<Token> {
        self.entries.get(index).map(|e| e.token)
    }

    /// The reply at `index`, to hand to [`ClientConn::deliver`](crate::conn::ClientConn::deliver).
    pub fn get(&self, index: usize) -> Option<Delivery<'_>> {
        let entry = self.entries.get(index)?;
        Some(Delivery {
            from: self.from,
            seq: entry.seq,
            close: entry.close,
            payload: match &entry.payload {
                Payload::Bytes { start, len } => Part::Bytes(&self.bytes[*start..*start + *len]),
                Payload::Snapshot(snapshot) => Part::Snapshot(snapshot),
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
    pub(crate) from: usize,
    pub(crate) seq: u64,
    pub(crate) close: bool,
    pub(crate) payload: Part<'a>,
}

/// One worker's answer to a request, as a [`Gather`] receives it (the home worker's own share
/// included).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part<'a> {
    /// Reply bytes the owner's adapter wrote.
    Bytes(&'a [u8]),
    /// The worker's statistics.
    Snapshot(&'a Snapshot),
}

/// A request answered by several workers (`stats` sums their figures, a multi-key command
/// counts what each found): the adapter that opened the hole combines what each part brings
/// and writes the reply once the last is in. Forwarding never looks inside.
pub(crate) trait Gather: fmt::Debug + Send {
    /// One part arrived (in any order).
    fn add(&mut self, part: Part<'_>);
    /// Every part is in: writes the reply.
    fn finish(&mut self, out: &mut Vec<u8>);
}

/// What `len` reply bytes cost against a lane's credit: nothing for an empty reply, else at
/// least [`MIN_REPLY_CHARGE_BYTES`]. Owner and home compute it alike.
pub(crate) fn reply_charge(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        len.max(MIN_REPLY_CHARGE_BYTES)
    }
}

/// A forwarded entry waiting on its owner for credit.
#[derive(Debug)]
struct Parked {
    seq: u64,
    op: Op,
    bytes: Vec<u8>,
}

/// On an owner, one connection's flow control: the reply credit left, and its entries parked
/// (in order) while there is none.
#[derive(Debug)]
struct Lane {
    credit: isize,
    parked: VecDeque<Parked>,
}

/// An owner's lanes, by (home worker, connection). A lane exists only while some of its
/// credit is out or entries are parked.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    map: HashMap<(usize, Token), Lane, BuildHasherDefault<LaneHasher>>,
}

/// A multiply-xor hash for lane keys (worker index, packed connection id): they come from
/// this process, not from clients, so they need no defence against chosen collisions.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LaneHasher(u64);

impl Hasher for LaneHasher {
    fn finish(&self) -> u64 {
        let h = self.0;
        (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(23) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64);
        self.write_u64((n >> 64) as u64);
    }
}

impl Lanes {
    /// Whether an entry for this connection must be parked behind earlier ones, or for credit.
    fn must_park(&self, home: usize, token: Token) -> bool {
        self.map
            .get(&(home, token))
            .is_some_and(|lane| lane.credit <= 0 || !lane.parked.is_empty())
    }

    fn park(&mut self, home: usize, token: Token, parked: Parked) {
        self.map
            .entry((home, token))
            .or_insert_with(Lane::fresh)
            .parked
            .push_back(parked);
    }

    /// Charges `charge` bytes of reply to the connection's lane.
    fn charge(&mut self, home: usize, token: Token, charge: usize) {
        if charge > 0 {
            self.map
                .entry((home, token))
                .or_insert_with(Lane::fresh)
                .credit -= charge as isize;
        }
    }

    /// Gives `bytes` of credit back to the connection's lane, and forgets the lane if that
    /// leaves it holding nothing. Returns whether parked entries may run now.
    fn credit(&mut self, home: usize, token: Token, bytes: usize) -> bool {
        let Some(lane) = self.map.get_mut(&(home, token)) else {
            return false;
        };
        lane.credit += bytes as isize;
        if lane.parked.is_empty() {
            if lane.is_idle() {
                self.map.remove(&(home, token));
            }
            return false;
        }
        lane.credit > 0
    }

    /// The next parked entry that may run now (the lane has credit), if any.
    fn next_runnable(&mut self, home: usize, token: Token) -> Option<Parked> {
        let lane = self.map.get_mut(&(home, token))?;
        if lane.credit <= 0 {
            return None;
        }
        lane.parked.pop_front()
    }

    /// Forgets the lane once it holds nothing: all credit back, nothing parked.
    fn tidy(&mut self, home: usize, token: Token) {
        if self.map.get(&(home, token)).is_some_and(Lane::is_idle) {
            self.map.remove(&(home, token));
        }
    }

    fn release(&mut self, home: usize, token: Token) {
        self.map.remove(&(home, token));
    }

    /// Lanes held now and entries parked in them.
    pub fn figures(&self) -> (usize, usize) {
        (
            self.map.len(),
            self.map.values().map(|lane| lane.parked.len()).sum(),
        )
    }
}

impl Lane {
    fn fresh() -> Lane {
        Lane {
            credit: FORWARD_REPLY_CREDIT_BYTES as isize,
            parked: VecDeque::new(),
        }
    }

    /// All credit back and nothing parked: the lane can go.
    fn is_idle(&self) -> bool {
        self.credit >= FORWARD_REPLY_CREDIT_BYTES as isize && self.parked.is_empty()
    }
}

/// A queue to another worker refused the last batch: nothing is sent to it until it takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocked;

/// What the owner's executor made of one forwarded entry.
#[derive(Debug)]
pub(crate) enum Answer {
    /// It wrote reply bytes (possibly none); `close`: the request closed its session.
    Bytes { close: bool },
    /// This worker's statistics.
    Snapshot(Box<Snapshot>),
}

/// Everything one engine does with other workers: the home side (batches per destination,
/// holes, credit, departures) and the owner side (lanes, replies per destination), with spare
/// buffers for reuse.
#[derive(Debug, Default)]
pub(crate) struct Forwarder {
    /// Workers serving.
    workers: usize,
    /// This worker's index.
    worker: usize,
    batches: Vec<Batch>,
    /// Per destination: its queue refused the batch, which waits here.
    held: Vec<bool>,
    replies: Vec<Replies>,
    replies_held: Vec<bool>,
    spare_batches: Vec<Batch>,
    spare_replies: Vec<Replies>,
    departures: Departures,
    lanes: Lanes,
}

impl Forwarder {
    /// The forwarding state of worker `worker` among `workers`.
    pub fn new(workers: usize, worker: usize) -> Forwarder {
        let workers = workers.max(1);
        Forwarder {
            workers,
            worker,
            batches: (0..workers).map(|_| Batch::default()).collect(),
            held: vec![false; workers],
            replies: (0..workers).map(|_| Replies::default()).collect(),
            replies_held: vec![false; workers],
            ..Forwarder::default()
        }
    }

    /// The worker that owns `key` when it is not this one.
    #[inline]
    pub fn owner_elsewhere(&self, key: &[u8]) -> Option<usize> {
        if self.workers <= 1 {
            return None;
        }
        let owner = owner_of(key, self.workers);
        (owner != self.worker).then_some(owner)
    }

    /// Whether requests may be forwarded to `owner` now (its queue took the last batch).
    fn may_forward_to(&self, owner: usize) -> bool {
        !self.held[owner]
    }

    /// Whether requests may be forwarded to each of `owners` now.
    pub fn may_forward_to_all(&self, owners: &[usize]) -> bool {
        owners.iter().all(|&owner| self.may_forward_to(owner))
    }

    /// Whether a request may go to every other worker now (no queue holds a batch back).
    pub fn may_fan_out(&self) -> bool {
        self.workers <= 1 || !self.held.iter().any(|&held| held)
    }

    /// Appends one entry for `dest`, its bytes written by `write`.
    fn push(
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

    /// Sends one request (`op`, its bytes written by `write`, about `request_len` of them) to
    /// `owner` and leaves a hole for its reply at `at` in the connection's output.
    ///
    /// # Errors
    /// [`Blocked`] (nothing sent) while `owner`'s queue refuses batches.
    pub fn forward(
        &mut self,
        holes: &mut Holes,
        owner: usize,
        op: Op,
        request_len: usize,
        at: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), Blocked> {
        if !self.may_forward_to(owner) {
            return Err(Blocked);
        }
        holes.attach(&self.departures);
        self.send_credit_to(holes, owner);
        let seq = holes.open(at, 1, None, Some(owner), request_len);
        self.push(owner, holes.token, seq, op, write);
        Ok(())
    }

    /// Credit this connection owes `owner` travels with the request, ahead of it.
    fn send_credit_to(&mut self, holes: &mut Holes, owner: usize) {
        let token = holes.token;
        holes.take_credit_due_if(
            |to, _| to == owner,
            |to, bytes| self.push(to, token, 0, Op::Credit(bytes), |_| ()),
        );
    }

    /// Opens a gathering hole at `at` whose parts are sent with [`Forwarder::part`], and which
    /// [`Forwarder::seal`] closes; returns its sequence number. Without a `gather`, the hole
    /// stays empty and only holds back what follows it until every part is answered.
    pub fn gather(&mut self, holes: &mut Holes, gather: Option<Box<dyn Gather>>, at: usize) -> u64 {
        holes.attach(&self.departures);
        let seq = holes.open(at, 0, gather, None, 0);
        if let Some(hole) = holes.pending.back_mut() {
            hole.sealed = false;
        }
        seq
    }

    /// Sends one part of the gathering hole `seq`: `op` (its bytes written by `write`, about
    /// `request_len` of them), executed by `owner`, whose answer goes to the hole's gather.
    ///
    /// # Errors
    /// [`Blocked`] (nothing sent) while `owner`'s queue refuses batches.
    pub fn part(
        &mut self,
        holes: &mut Holes,
        seq: u64,
        owner: usize,
        op: Op,
        request_len: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), Blocked> {
        if !self.may_forward_to(owner) {
            return Err(Blocked);
        }
        let Some(index) = holes.find(seq) else {
            return Ok(());
        };
        self.send_credit_to(holes, owner);
        holes.note_owner(owner);
        holes.request_bytes += request_len;
        let hole = &mut holes.pending[index];
        hole.awaiting += 1;
        hole.request_len += request_len;
        self.push(owner, holes.token, seq, op, write);
        Ok(())
    }

    /// No more parts for the gathering hole `seq`: `own` (this worker's share, if it has one)
    /// goes to its gather, and the hole fills (into `out`) once its last answer is in, now if
    /// all are; then its stamp is returned (nothing will deliver it).
    pub fn seal(
        holes: &mut Holes,
        seq: u64,
        own: Option<Part<'_>>,
        out: &mut Vec<u8>,
    ) -> Option<Stamp> {
        let index = holes.find(seq)?;
        let hole = &mut holes.pending[index];
        if let (Some(gather), Some(own)) = (hole.gather.as_mut(), own) {
            gather.add(own);
        }
        hole.sealed = true;
        if hole.awaiting == 0 {
            let stamp = hole.stamp;
            holes.fill_at(index, out, &[]);
            return stamp;
        }
        None
    }

    /// Sends `op` to every other worker and leaves one hole at the end of `out` that fills
    /// once all have answered: `gather` (given `own`, this worker's share) writes the reply,
    /// or the hole stays empty. False (and nothing sent) when this is the only worker. Check
    /// [`Forwarder::may_fan_out`] first.
    pub fn fan_out(
        &mut self,
        holes: &mut Holes,
        op: Op,
        gather: Option<Box<dyn Gather>>,
        own: Option<Part<'_>>,
        out: &mut Vec<u8>,
    ) -> bool {
        if self.workers <= 1 {
            return false;
        }
        let seq = self.gather(holes, gather, out.len());
        let me = self.worker;
        for dest in (0..self.workers).filter(|&w| w != me) {
            // The caller checked that no queue holds a batch back.
            let _ = self.part(holes, seq, dest, op, 0, |_| ());
        }
        // Some other worker is always waited for: nothing fills now.
        let _ = Forwarder::seal(holes, seq, own, out);
        true
    }

    /// Hands back the credit of the connection's replies that were sent (entries for their
    /// owners, sent with the next batches, held or not): an owner's share once it reaches
    /// [`CREDIT_RETURN_BYTES`], everything once the connection has nothing out or unsent (so
    /// owners forget its lanes); smaller amounts otherwise travel with the connection's next
    /// request to that owner. An owner that parked this connection's entries spent its whole
    /// credit on replies that precede them, so once those are sent what is due is past the
    /// threshold and goes back.
    pub fn return_credit(&mut self, holes: &mut Holes) {
        if !holes.credit_is_due() {
            return;
        }
        let token = holes.token;
        let idle = holes.idle();
        holes.take_credit_due_if(
            |_, bytes| idle || bytes >= CREDIT_RETURN_BYTES,
            |owner, bytes| self.push(owner, token, 0, Op::Credit(bytes), |_| ()),
        );
    }

    /// Offers every non-empty outgoing batch to `send(destination worker, batch)`, after adding
    /// a release for every connection that went away. A batch `send` gives back (its queue is
    /// full) stays here, and connections stop forwarding to that worker until it is taken.
    /// Returns whether any batch was taken.
    pub fn take_forwards(
        &mut self,
        mut send: impl FnMut(usize, Batch) -> Result<(), Batch>,
    ) -> bool {
        let departures = self.departures.clone();
        departures.take(|token, owner| self.push(owner, token, 0, Op::Release, |_| ()));
        let mut taken = false;
        for dest in 0..self.batches.len() {
            if self.batches[dest].is_empty() {
                continue;
            }
            let fresh = self.spare_batches.pop().unwrap_or_default();
            let batch = std::mem::replace(&mut self.batches[dest], fresh);
            match send(dest, batch) {
                Ok(()) => {
                    self.held[dest] = false;
                    taken = true;
                }
                Err(batch) => {
                    let fresh = std::mem::replace(&mut self.batches[dest], batch);
                    self.spare_batches.push(fresh);
                    self.held[dest] = true;
                }
            }
        }
        taken
    }

    /// True when forwarded requests or control entries wait to be handed out.
    pub fn has_forwards(&self) -> bool {
        self.batches.iter().any(|b| !b.is_empty()) || self.departures.waiting()
    }

    /// Offers the replies produced for each worker to `send(worker, replies)`; replies `send`
    /// gives back (a full queue) stay here. Returns whether any were taken.
    pub fn take_replies(
        &mut self,
        mut send: impl FnMut(usize, Replies) -> Result<(), Replies>,
    ) -> bool {
        let mut taken = false;
        for dest in 0..self.replies.len() {
            if self.replies[dest].is_empty() {
                self.replies_held[dest] = false;
                continue;
            }
            let fresh = self.spare_replies.pop().unwrap_or_default();
            let replies = std::mem::replace(&mut self.replies[dest], fresh);
            match send(dest, replies) {
                Ok(()) => {
                    self.replies_held[dest] = false;
                    taken = true;
                }
                Err(replies) => {
                    let fresh = std::mem::replace(&mut self.replies[dest], replies);
                    self.spare_replies.push(fresh);
                    self.replies_held[dest] = true;
                }
            }
        }
        taken
    }

    /// True when replies for other workers wait here (produced, or refused by a full queue).
    pub fn has_replies(&self) -> bool {
        self.replies.iter().any(|r| !r.is_empty())
    }

    /// True while a full queue refused a batch or replies that wait here to be offered again.
    pub fn holds_refused(&self) -> bool {
        self.held.iter().chain(&self.replies_held).any(|&held| held)
    }

    /// True while replies a full queue refused wait here: take no new requests meanwhile.
    pub fn replies_held(&self) -> bool {
        self.replies_held.iter().any(|&held| held)
    }

    /// Executes the entries worker `from` forwarded here, each connection's in order while its
    /// lane has credit, parking the rest; applies credit and releases. `run(op, request, out)`
    /// executes one entry, writing its reply bytes to `out`. Replies accumulate for
    /// [`Forwarder::take_replies`].
    pub fn serve(
        &mut self,
        from: usize,
        batch: Batch,
        mut run: impl FnMut(Op, &[u8], &mut Vec<u8>) -> Answer,
    ) {
        for entry in &batch.entries {
            let (token, seq, op) = (entry.token, entry.seq, entry.op);
            match op {
                Op::Credit(bytes) => {
                    if self.lanes.credit(from, token, bytes) {
                        self.resume_lane(from, token, &mut run);
                    }
                }
                Op::Release => self.lanes.release(from, token),
                _ => {
                    let request = &batch.bytes[entry.start..entry.start + entry.len];
                    // A hold is asked with nothing of its connection out (so nothing parked
                    // before it) and its answer is empty: it never waits for credit, which a
                    // client that does not read would never give back.
                    if self.lanes.must_park(from, token) && !matches!(op, Op::Hold(_)) {
                        let parked = Parked {
                            seq,
                            op,
                            bytes: request.to_vec(),
                        };
                        self.lanes.park(from, token, parked);
                    } else {
                        self.run_entry(from, token, seq, op, request, &mut run);
                    }
                }
            }
        }
        self.recycle_batch(batch);
    }

    /// Runs a connection's parked entries while its lane has credit, then forgets the lane if
    /// it holds nothing.
    fn resume_lane(
        &mut self,
        from: usize,
        token: Token,
        run: &mut impl FnMut(Op, &[u8], &mut Vec<u8>) -> Answer,
    ) {
        while let Some(parked) = self.lanes.next_runnable(from, token) {
            self.run_entry(from, token, parked.seq, parked.op, &parked.bytes, run);
        }
        self.lanes.tidy(from, token);
    }

    /// Executes one entry for worker `from`, appends the reply to its replies and charges the
    /// connection's lane.
    fn run_entry(
        &mut self,
        from: usize,
        token: Token,
        seq: u64,
        op: Op,
        request: &[u8],
        run: &mut impl FnMut(Op, &[u8], &mut Vec<u8>) -> Answer,
    ) {
        let replies = &mut self.replies[from];
        replies.from = self.worker;
        let start = replies.bytes.len();
        let (close, payload) = match run(op, request, &mut replies.bytes) {
            Answer::Bytes { close } => (
                close,
                Payload::Bytes {
                    start,
                    len: replies.bytes.len() - start,
                },
            ),
            Answer::Snapshot(snapshot) => {
                replies.bytes.truncate(start);
                (false, Payload::Snapshot(snapshot))
            }
        };
        replies.entries.push(ReplyEntry {
            token,
            seq,
            close,
            payload,
        });
        let len = replies.bytes.len() - start;
        self.lanes.charge(from, token, reply_charge(len));
    }

    fn recycle_batch(&mut self, mut batch: Batch) {
        if self.spare_batches.len() < SPARE_BATCHES && batch.bytes.capacity() <= SPARE_KEEP_BYTES {
            batch.clear();
            self.spare_batches.push(batch);
        }
    }

    /// Takes back a [`Replies`] message once its replies are delivered, for reuse.
    pub fn recycle(&mut self, mut replies: Replies) {
        if self.spare_replies.len() < SPARE_BATCHES && replies.bytes.capacity() <= SPARE_KEEP_BYTES
        {
            replies.clear();
            self.spare_replies.push(replies);
        }
    }

    /// Lanes this worker keeps for other workers' connections, and entries parked in them.
    pub fn lane_figures(&self) -> (usize, usize) {
        self.lanes.figures()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills hole `seq` of `holes` with `len` bytes in an output `out`, as a delivery does.
    #[track_caller]
    fn fill(holes: &mut Holes, out: &mut Vec<u8>, seq: u64, byte: u8, len: usize) {
        let index = holes.find(seq).expect("an open hole");
        let hole = holes.fill(index, len).unwrap();
        out.splice(hole.at..hole.at, std::iter::repeat_n(byte, len));
    }

    #[test]
    fn holes_fill_in_any_order_and_keep_request_order() {
        let mut holes = Holes::default();
        let mut out = b"L0".to_vec();
        let a = holes.open(out.len(), 1, None, Some(1), 10);
        let b = holes.open(out.len(), 1, None, Some(2), 20);
        out.extend_from_slice(b"L1");
        let c = holes.open(out.len(), 1, None, Some(1), 30);
        assert_eq!(holes.request_bytes, 60);
        assert_eq!(holes.sendable_end(out.len()), 2);
        // Out of order: c, then b, then a.
        fill(&mut holes, &mut out, c, b'c', 3);
        fill(&mut holes, &mut out, b, b'b', 2);
        assert_eq!(holes.sendable_end(out.len()), 2, "a still blocks");
        assert_eq!(holes.request_bytes, 10);
        fill(&mut holes, &mut out, a, b'a', 1);
        assert_eq!(out, b"L0abbL1ccc");
        assert_eq!(holes.sendable_end(out.len()), out.len());
        // Unsent replies in output order, each ending where its bytes end.
        let ends: Vec<(usize, usize)> = holes.unsent.iter().map(|u| (u.end, u.owner)).collect();
        assert_eq!(ends, [(3, 1), (5, 2), (10, 1)]);
    }

    #[test]
    fn credit_is_due_only_once_the_bytes_are_sent() {
        let mut holes = Holes::default();
        let mut out = Vec::new();
        let a = holes.open(0, 1, None, Some(1), 10);
        let b = holes.open(0, 1, None, Some(2), 10);
        let empty = holes.open(0, 1, None, Some(2), 10);
        fill(&mut holes, &mut out, a, b'a', 100);
        fill(&mut holes, &mut out, b, b'b', 10);
        fill(&mut holes, &mut out, empty, b'e', 0);
        let due = |holes: &mut Holes| {
            let mut due = Vec::new();
            holes.take_credit_due(|owner, bytes| due.push((owner, bytes)));
            due
        };
        holes.sent_through(99);
        assert!(!holes.credit_is_due(), "part of a reply sent: nothing due");
        holes.sent_through(100);
        assert_eq!(due(&mut holes), [(1, 100)]);
        assert!(due(&mut holes).is_empty(), "taken once");
        // A short reply is charged the minimum; an empty one nothing.
        holes.sent_through(110);
        assert_eq!(due(&mut holes), [(2, MIN_REPLY_CHARGE_BYTES)]);
        assert!(holes.unsent.is_empty());
    }

    #[test]
    fn compaction_moves_holes_and_unsent_replies_alike() {
        let mut holes = Holes::default();
        let mut out = b"0123456789".to_vec();
        let a = holes.open(10, 1, None, Some(1), 1);
        let b = holes.open(10, 1, None, Some(1), 1);
        fill(&mut holes, &mut out, a, b'a', 5);
        // 12 bytes sent and dropped from the front (part of a's reply among them).
        holes.sent_through(12);
        holes.shift_back(12);
        out.drain(..12);
        assert_eq!(holes.pending[0].at, 3);
        assert_eq!(holes.unsent[0].end, 3);
        fill(&mut holes, &mut out, b, b'b', 2);
        assert_eq!(out, b"aaabb");
        holes.sent_through(5);
        let mut due = 0;
        holes.take_credit_due(|_, bytes| due += bytes);
        assert_eq!(due, 2 * MIN_REPLY_CHARGE_BYTES);
    }

    #[test]
    fn limits_count_holes_and_request_bytes() {
        let mut holes = Holes::default();
        let big = holes.open(0, 1, None, Some(1), FORWARD_REQUEST_HIGH_WATER_BYTES - 1);
        assert!(!holes.full());
        let one = holes.open(0, 1, None, Some(1), 1);
        assert!(holes.full(), "request bytes at the high water");
        holes.fill(holes.find(big).unwrap(), 0);
        holes.fill(holes.find(one).unwrap(), 0);
        assert!(!holes.full());
        for _ in 0..MAX_FORWARDS_IN_FLIGHT {
            assert!(!holes.full());
            holes.open(0, 1, None, Some(1), 0);
        }
        assert!(holes.full(), "holes at the limit");
    }

    #[test]
    fn a_connection_that_forwarded_reports_its_end_to_every_owner() {
        let departures = Departures::default();
        let mut holes = Holes::default();
        holes.token = 42;
        holes.attach(&departures);
        holes.open(0, 1, None, Some(3), 1);
        holes.open(0, 1, None, Some(1), 1);
        holes.open(0, 1, None, Some(3), 1);
        drop(holes);
        let mut gone = Vec::new();
        departures.take(|token, owner| gone.push((token, owner)));
        assert_eq!(gone, [(42, 3), (42, 1)]);
        // A session that never forwarded reports nothing.
        let mut quiet = Holes::default();
        quiet.attach(&departures);
        drop(quiet);
        departures.take(|_, _| panic!("nothing to report"));
    }

    #[test]
    fn lanes_park_in_order_without_credit_and_resume_with_it() {
        let mut lanes = Lanes::default();
        assert!(!lanes.must_park(0, 7), "no lane: run");
        lanes.charge(0, 7, FORWARD_REPLY_CREDIT_BYTES - 1);
        assert!(!lanes.must_park(0, 7), "one byte of credit left");
        lanes.charge(0, 7, 1000);
        assert!(lanes.must_park(0, 7), "credit spent");
        assert!(!lanes.must_park(1, 7), "lanes are per home worker");
        for seq in 0..3 {
            let parked = Parked {
                seq,
                op: Op::Snapshot(Group::General),
                bytes: vec![],
            };
            lanes.park(0, 7, parked);
        }
        assert_eq!(lanes.figures(), (1, 3));
        assert!(lanes.next_runnable(0, 7).is_none(), "no credit yet");
        lanes.credit(0, 7, 999);
        assert!(
            lanes.next_runnable(0, 7).is_none(),
            "back to zero: still none"
        );
        lanes.credit(0, 7, 1);
        assert_eq!(lanes.next_runnable(0, 7).map(|p| p.seq), Some(0));
        assert!(
            lanes.must_park(0, 7),
            "later entries wait behind parked ones"
        );
        assert_eq!(lanes.next_runnable(0, 7).map(|p| p.seq), Some(1));
        lanes.charge(0, 7, 500);
        assert!(
            lanes.next_runnable(0, 7).is_none(),
            "the charge spent the credit"
        );
        lanes.tidy(0, 7);
        assert_eq!(lanes.figures(), (1, 1), "kept while anything is out");
        lanes.credit(0, 7, FORWARD_REPLY_CREDIT_BYTES + 499);
        assert_eq!(lanes.next_runnable(0, 7).map(|p| p.seq), Some(2));
        lanes.tidy(0, 7);
        assert_eq!(
            lanes.figures(),
            (0, 0),
            "all credit back, nothing parked: gone"
        );
        lanes.charge(0, 9, 10);
        lanes.release(0, 9);
        assert_eq!(lanes.figures(), (0, 0));
    }

    /// A gather for tests: concatenates what it gets, in arrival order, between brackets.
    #[derive(Debug, Default)]
    struct Concat(Vec<u8>);

    impl Gather for Concat {
        fn add(&mut self, part: Part<'_>) {
            if let Part::Bytes(bytes) = part {
                self.0.extend_from_slice(bytes);
            }
        }

        fn finish(&mut self, out: &mut Vec<u8>) {
            out.push(b'[');
            out.extend_from_slice(&self.0);
            out.push(b']');
        }
    }

    /// A reply from `from` for hole `seq`.
    fn reply(from: usize, seq: u64, bytes: &[u8]) -> Delivery<'_> {
        Delivery {
            from,
            seq,
            close: false,
            payload: Part::Bytes(bytes),
        }
    }

    #[test]
    fn a_gather_fills_once_sealed_and_every_part_is_in() {
        let mut forwarder = Forwarder::new(3, 0);
        let mut holes = Holes::default();
        let mut out = b"A".to_vec();
        let seq = forwarder.gather(&mut holes, Some(Box::new(Concat::default())), out.len());
        out.extend_from_slice(b"B");
        for (owner, len) in [(1, 10), (2, 20), (1, 5)] {
            forwarder
                .part(
                    &mut holes,
                    seq,
                    owner,
                    Op::Snapshot(Group::General),
                    len,
                    |_| (),
                )
                .unwrap();
        }
        assert_eq!(holes.request_bytes, 35);
        assert_eq!(holes.sendable_end(out.len()), 1, "the hole holds B back");
        // Every part in, but not sealed: the request may still add parts.
        for (from, bytes) in [(2, &b"x"[..]), (1, b"y"), (1, b"z")] {
            let delivered = holes.deliver(&mut out, reply(from, seq, bytes));
            assert_eq!(delivered.spliced, 0);
        }
        assert_eq!(holes.pending_len(), 1);
        Forwarder::seal(&mut holes, seq, Some(Part::Bytes(b"h")), &mut out);
        assert_eq!(out, b"A[xyzh]B");
        assert_eq!(holes.pending_len(), 0);
        assert_eq!(holes.request_bytes, 0);
        // Gathered bytes never sit in the output: their credit is due on arrival.
        let mut due = Vec::new();
        holes.take_credit_due(|owner, bytes| due.push((owner, bytes)));
        due.sort_unstable();
        assert_eq!(
            due,
            [(1, 2 * MIN_REPLY_CHARGE_BYTES), (2, MIN_REPLY_CHARGE_BYTES)]
        );
    }

    #[test]
    fn a_gather_sealed_early_fills_with_its_last_part() {
        let mut forwarder = Forwarder::new(2, 0);
        let mut holes = Holes::default();
        let mut out = Vec::new();
        let seq = forwarder.gather(&mut holes, Some(Box::new(Concat::default())), 0);
        forwarder
            .part(&mut holes, seq, 1, Op::Snapshot(Group::General), 1, |_| ())
            .unwrap();
        Forwarder::seal(&mut holes, seq, None, &mut out);
        assert!(out.is_empty(), "a part is still out");
        holes.deliver(&mut out, reply(1, seq, b"late"));
        assert_eq!(out, b"[late]");
        // Sealed with nothing out: filled at once.
        let seq = forwarder.gather(&mut holes, Some(Box::new(Concat::default())), out.len());
        Forwarder::seal(&mut holes, seq, Some(Part::Bytes(b"own")), &mut out);
        assert_eq!(out, b"[late][own]");
    }

    #[test]
    fn a_part_for_a_held_queue_is_refused_and_sends_nothing() {
        let mut forwarder = Forwarder::new(2, 0);
        let mut holes = Holes::default();
        forwarder
            .forward(&mut holes, 1, Op::Snapshot(Group::General), 1, 0, |_| ())
            .unwrap();
        forwarder.take_forwards(|_, batch| Err(batch));
        let seq = forwarder.gather(&mut holes, None, 0);
        assert_eq!(
            forwarder.part(&mut holes, seq, 1, Op::Snapshot(Group::General), 1, |_| ()),
            Err(Blocked)
        );
        assert!(!forwarder.may_fan_out());
        assert_eq!(
            forwarder.batches[1].len(),
            1,
            "only the first request waits"
        );
    }
}
