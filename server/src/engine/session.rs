//! One connection's engine state ([`Session`]), and what a protocol adapter is given to execute
//! one request ([`Cx`]): the core, the session, the clock and forwarding behind a narrow
//! interface.
//!
//! ```text
//! adapter step(cx, input, out) ─▶ cx.get / store / delete / ... (the core's counted operations)
//!                              ─▶ cx.session (skip, close, turn, where a stopped request resumes)
//!                              ─▶ cx.forward / fan_out / gather (other workers, forward/)
//! ```
//!
//! Nothing here knows a protocol's wire format: a session names the protocol it speaks, and
//! keeps the few figures adapters need between calls in protocol-free form (how far a line was
//! scanned, where a multi-part request resumes).

use std::sync::Arc;

use store::{Arith, ItemView, NewCas, Now, StoreError, Ttl, Write};

use super::config::{EngineConfig, OUT_HIGH_WATER_BYTES};
use super::core::Core;
use super::forward::{self, Form, Forwarder, Gather, Holes, Op, Part, Stamp};
use super::transaction::{Charge, HoldGuard, Queued, Watched};
use crate::control::{ConnRecord, Control, MemoryFigures};
use crate::stats::{Group, Kind, Snapshot};

/// A forwarded request's form has this bit when its bytes start with the database it runs in.
const IN_DATABASE: u16 = 0x8000;

/// The first byte of a key stored in a namespace (see [`stored_key`]).
pub(crate) const NAMESPACE_MARK: u8 = 0xFF;

/// Bytes a namespace adds to a key.
pub(crate) const NAMESPACE_BYTES: usize = 2;

/// The key under which the store holds `key` of database `db`: `key` itself in database 0
/// (what the memcached protocols and RESP's default database share), unless it starts with
/// [`NAMESPACE_MARK`]; otherwise the mark, the database's number (one byte) and `key`, written
/// into `buf`. So database 0 costs nothing but a compare, no two databases' keys meet, and a
/// key another database holds is never reached from database 0 (its first byte would be the
/// mark, which database 0 escapes as `[mark, 0]`).
#[inline]
pub(crate) fn stored_key<'k>(db: u8, key: &'k [u8], buf: &'k mut Vec<u8>) -> &'k [u8] {
    if db == 0 && key.first() != Some(&NAMESPACE_MARK) {
        return key;
    }
    buf.clear();
    buf.extend_from_slice(&[NAMESPACE_MARK, db]);
    buf.extend_from_slice(key);
    buf
}

/// [`stored_key`] for the namespace of `session`'s database, into its buffer.
#[inline]
fn stored<'k>(session: &'k mut Session, key: &'k [u8]) -> &'k [u8] {
    stored_key(session.stored_db, key, &mut session.key_buf)
}

/// The database and key a stored key stands for ([`stored_key`] undone); `None` for a key
/// starting with the mark but too short to hold a database.
#[inline]
pub(crate) fn database_key(stored: &[u8]) -> Option<(u8, &[u8])> {
    match stored {
        [NAMESPACE_MARK, db, key @ ..] => Some((*db, key)),
        [NAMESPACE_MARK] => None,
        key => Some((0, key)),
    }
}

/// Hands the client's key and `item` to `f` when the stored key `stored` is in namespace `db`:
/// the walks over one database.
fn in_database(db: u8, stored: &[u8], item: ItemView<'_>, f: &mut impl FnMut(&[u8], ItemView<'_>)) {
    if let Some((of, key)) = database_key(stored)
        && of == db
    {
        f(key, item);
    }
}

/// The protocols a connection may speak: the engine runs each with its own adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// memcached's binary protocol (first byte 0x80).
    Binary,
    /// memcached's text protocol, meta commands included (any other first byte).
    Text,
    /// Redis's RESP, in this version (RESP2 until the client says `HELLO 3`).
    Resp(protocol::resp::Version),
}

impl Protocol {
    /// The memcached protocol a connection whose first byte is `first` speaks.
    pub fn detect(first: u8) -> Protocol {
        if first == protocol::binary::REQUEST_MAGIC {
            Protocol::Binary
        } else {
            Protocol::Text
        }
    }

    /// The form a request of this protocol is forwarded in; `part` is the adapter's own code.
    pub(crate) fn form(self, part: u8, in_database: bool) -> Form {
        let code: u16 = match self {
            Protocol::Binary => 0,
            Protocol::Text => 1,
            Protocol::Resp(protocol::resp::Version::Resp2) => 2,
            Protocol::Resp(protocol::resp::Version::Resp3) => 3,
        };
        let flag = if in_database { IN_DATABASE } else { 0 };
        Form(flag | code << 8 | u16::from(part))
    }

    /// The protocol and part of a forwarded request's form, and whether the request's bytes
    /// start with the database it runs in (4 bytes, little-endian).
    pub(crate) fn of_form(form: Form) -> Option<(Protocol, u8, bool)> {
        let protocol = match (form.0 & !IN_DATABASE) >> 8 {
            0 => Protocol::Binary,
            1 => Protocol::Text,
            2 => Protocol::Resp(protocol::resp::Version::Resp2),
            3 => Protocol::Resp(protocol::resp::Version::Resp3),
            _ => return None,
        };
        Some((protocol, form.0 as u8, form.0 & IN_DATABASE != 0))
    }
}

/// What a protocol did with the request at the front of its input.
///
/// `Done(0)` is only returned together with a change of session state (a body to skip, or
/// the connection closing), so the shared loop always moves on.
pub(crate) enum Step {
    /// Executed, or refused and answered: drop this many bytes.
    Done(usize),
    /// Not all here yet: read this many more bytes, consume nothing.
    Wait(usize),
    /// Stopped before the request was done (a multi-key request part-way, its place kept in
    /// the session) or before it started: consume nothing, try again once `Stop` is over.
    Stop(Stop),
}

/// Why [`Engine::execute`](super::Engine::execute) returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The input ran out, or holds only part of a request ([`Outcome::needed`] says how much
    /// more helps): read more.
    Input,
    /// The output backlog reached [`OUT_HIGH_WATER_BYTES`]: send some of it first.
    Output,
    /// Too many forwarded requests, or request bytes, await replies from other workers
    /// ([`MAX_FORWARDS_IN_FLIGHT`](super::MAX_FORWARDS_IN_FLIGHT),
    /// [`FORWARD_REQUEST_HIGH_WATER_BYTES`](super::FORWARD_REQUEST_HIGH_WATER_BYTES)): their
    /// delivery continues.
    Forwards,
    /// The queue to another worker this connection must forward to is full: serve the
    /// connection again on a later loop.
    Blocked,
    /// The connection's turn is used up ([`TURN_REQUESTS`](super::TURN_REQUESTS)): serve it
    /// again on a later loop, after the others.
    Turn,
    /// The connection is closing: nothing more is executed.
    Closing,
}

/// What one call to [`Engine::execute`](super::Engine::execute) did.
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

/// Where a request that stopped part-way (a multi-key read) goes on: the adapter's own figures,
/// kept while the request stays unconsumed at the front of the input (where it may sit in a
/// socket's receive buffer, move, or arrive in pieces meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resume {
    /// The request's length in bytes.
    pub len: usize,
    /// Where in the request its next part starts.
    pub at: usize,
    /// The adapter's code for the request (its command).
    pub code: u8,
    /// The adapter's argument for the request (text `gat`: the exptime; a count so far).
    pub arg: i64,
    /// Parts of the request done (arguments taken).
    pub index: usize,
    /// The gathering hole the request opened, if its parts went to several workers.
    pub gather: Option<u64>,
}

/// How far an adapter's parser got in the request at the front of the pending input, so a
/// long request arriving in pieces is looked at once (the adapter's to keep).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Bytes looked at (a text line: known to hold no newline).
    pub bytes: usize,
    /// Items checked in them (a RESP command: its arguments).
    pub items: usize,
}

/// One connection's protocol state, kept by the packet path next to its socket.
#[derive(Debug)]
pub struct Session {
    /// The connection's protocol, once decided.
    pub(super) protocol: Option<Protocol>,
    /// Bytes of a refused frame still to be skipped (an oversize value, an unknown opcode's body).
    pub(super) skip_bytes: u64,
    /// Arguments of a refused command still to be skipped after `skip_bytes` (each as it
    /// arrives; the adapter reads their lengths).
    pub(crate) skip_args: usize,
    /// Set once a frame asked to close (QUIT, a malformed frame): nothing more is executed.
    pub(super) closing: bool,
    /// How far the parser got in the pending request.
    pub(crate) scan: Scan,
    /// A request stopped part-way; it stays at the front of the input until its last part is
    /// done (the adapter's to keep).
    pub(crate) resume: Option<Resume>,
    /// Requests (and keys) this connection may still execute in its current turn.
    pub(super) turn_left: usize,
    /// Requests forwarded to other workers whose replies are still to come.
    pub(crate) holes: Holes,
    /// When the bytes being served first arrived (monotonic nanoseconds, the packet path's
    /// loop clock), for the latency instrument (`stats latency`).
    pub(crate) arrived_ns: u64,
    /// The connection as `stats conns` and the logs name it, once the packet path gave it one.
    pub(crate) record: Option<Arc<ConnRecord>>,
    /// Set once the connection became a log watcher (`watch`): nothing more is executed.
    pub(crate) watching: bool,
    /// The name the client gave its connection (Redis's `CLIENT SETNAME`).
    pub(crate) name: Option<Box<[u8]>>,
    /// Bytes at the front of the unconsumed input already counted in `bytes_read` (the caller
    /// hands the engine what it left unconsumed again, with what arrived since).
    pub(super) input_counted: usize,
    /// The connection's number, for a connection without a record that asked for one
    /// (Redis's `CLIENT ID` of an engine driven directly); 0 before.
    pub(crate) id: u64,
    /// The database the connection's keys are in (RESP's `SELECT`; 0 for memcached).
    pub(crate) db: u8,
    /// The namespace `db` means for the command being executed (what `SWAPDB` made of it,
    /// read by the RESP adapter when a command starts; 0 for memcached): the prefix of the
    /// keys it stores and reads ([`stored_key`]).
    pub(crate) stored_db: u8,
    /// Requests held to run later as one (Redis's `MULTI`), the adapter's to keep.
    pub(crate) queued: Option<Box<Queued>>,
    /// Keys whose change makes the next queued run fail (Redis's `WATCH`).
    pub(crate) watched: Vec<Watched>,
    /// The connection asked to watch more keys than a worker keeps notes for: its next queued
    /// run fails whatever changed (the list above is dropped, so it stays bounded).
    pub(crate) watch_overflow: bool,
    /// Set while queued requests run as one: nothing pauses them part-way.
    pub(crate) atomic: bool,
    /// The cross-worker transaction this connection coordinates, from its hold requests on.
    pub(crate) hold: Option<HoldGuard>,
    /// Set once the client gave the password (`--requirepass`, Redis's `AUTH`).
    pub(crate) authenticated: bool,
    /// Where a key of another database than 0 is namespaced ([`stored_key`]).
    key_buf: Vec<u8>,
    /// The share of the worker's input budget a large command being assembled holds.
    pub(crate) input_hold: Option<super::budget::Hold>,
}

impl Default for Session {
    fn default() -> Session {
        Session {
            protocol: None,
            skip_bytes: 0,
            skip_args: 0,
            closing: false,
            scan: Scan::default(),
            resume: None,
            turn_left: usize::MAX,
            holes: Holes::default(),
            arrived_ns: 0,
            record: None,
            watching: false,
            name: None,
            input_counted: 0,
            id: 0,
            db: 0,
            stored_db: 0,
            queued: None,
            watched: Vec::new(),
            watch_overflow: false,
            atomic: false,
            hold: None,
            authenticated: false,
            key_buf: Vec::new(),
            input_hold: None,
        }
    }
}

impl Session {
    /// A session that speaks `protocol` from its first byte on (a listener for one protocol;
    /// a request forwarded from another worker).
    pub fn speaking(protocol: Protocol) -> Session {
        Session {
            protocol: Some(protocol),
            ..Session::default()
        }
    }

    /// The connection's protocol, `None` until its first byte has been executed.
    pub fn protocol(&self) -> Option<Protocol> {
        self.protocol
    }

    /// Goes on in another version of its protocol (RESP's `HELLO 3`).
    pub(crate) fn switch(&mut self, protocol: Protocol) {
        self.protocol = Some(protocol);
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
    pub fn set_token(&mut self, token: forward::Token) {
        self.holes.token = token;
    }

    /// Stamps the bytes now being served with when they arrived (monotonic nanoseconds, the
    /// clock of `Control::now_ns`), for `stats latency`.
    pub fn set_arrival(&mut self, arrived_ns: u64) {
        self.arrived_ns = arrived_ns;
    }

    /// Gives the connection its record (number, peers) for `stats conns` and the logs.
    pub fn set_record(&mut self, record: Arc<ConnRecord>) {
        self.record = Some(record);
    }

    /// The connection's record, once it has one.
    pub fn record(&self) -> Option<&Arc<ConnRecord>> {
        self.record.as_ref()
    }

    /// The connection's number: its record's (what `stats conns`, `watch` and the logs show),
    /// or, without a record, one taken from the same numbering on first use.
    pub(crate) fn number(&mut self, control: &crate::control::Control) -> u64 {
        if let Some(record) = &self.record {
            return record.number;
        }
        if self.id == 0 {
            self.id = control.allocate_number();
        }
        self.id
    }

    /// True once the connection is a log watcher: the packet path hands it log lines.
    pub fn is_watching(&self) -> bool {
        self.watching
    }

    /// Starts a turn: at most `requests` requests (and keys of multi-key reads) execute until
    /// the next turn. A session starts with no limit.
    pub fn begin_turn(&mut self, requests: usize) {
        self.turn_left = requests;
    }

    /// Forwarded requests still waiting for their replies.
    pub fn forwards_in_flight(&self) -> usize {
        self.holes.pending_len()
    }

    /// True when no more may be forwarded until replies arrive.
    pub fn forwards_full(&self) -> bool {
        self.holes.full()
    }

    /// True while a multi-key request is stopped part-way.
    pub fn mid_request(&self) -> bool {
        self.resume.is_some()
    }

    /// Skips the next `bytes` bytes of input as they arrive (a refused body), without buffering.
    pub(crate) fn skip(&mut self, bytes: u64) {
        self.skip_bytes = bytes;
    }

    /// Counts one request (or key) against the turn.
    pub(crate) fn spend_turn(&mut self) {
        self.turn_left = self.turn_left.saturating_sub(1);
    }
}

/// What an adapter is given to execute one request: the core, the connection's session, the
/// clock, and forwarding to other workers (absent on a worker executing a request another
/// forwarded to it: there every key is its own).
pub(crate) struct Cx<'a> {
    /// The counted store operations, limits and statistics.
    core: &'a mut Core,
    /// The connection's state.
    pub session: &'a mut Session,
    /// The caller's clock.
    pub now: Now,
    forward: Option<&'a mut Forwarder>,
}

impl<'a> Cx<'a> {
    /// A context that may forward to other workers.
    pub fn new(
        core: &'a mut Core,
        forward: &'a mut Forwarder,
        session: &'a mut Session,
        now: Now,
    ) -> Cx<'a> {
        Cx {
            core,
            session,
            now,
            forward: Some(forward),
        }
    }

    /// A context for a request another worker forwarded: everything runs here.
    pub fn local(core: &'a mut Core, session: &'a mut Session, now: Now) -> Cx<'a> {
        Cx {
            core,
            session,
            now,
            forward: None,
        }
    }

    /// The worker that owns `key` when it is not this one.
    #[inline]
    pub fn owner_elsewhere(&self, key: &[u8]) -> Option<usize> {
        self.forward.as_ref()?.owner_elsewhere(key)
    }

    /// True for a request another worker forwarded here: it runs on this worker's shard alone.
    pub fn forwarded(&self) -> bool {
        self.forward.is_none()
    }

    /// Workers serving (keys are spread over this many shards).
    pub fn workers(&self) -> usize {
        self.core.config().threads.max(1)
    }

    /// Sends `request` (one complete request) to `owner` and leaves a hole for its reply at the
    /// end of `out`; `part` is the adapter's own code for what the bytes are, handed back to it
    /// on the owner.
    ///
    /// # Errors
    /// [`Stop::Blocked`] (nothing sent) while `owner`'s queue refuses batches.
    pub fn forward(
        &mut self,
        owner: usize,
        part: u8,
        request: &[u8],
        out: &[u8],
    ) -> Result<(), Stop> {
        self.forward_written(owner, part, request.len(), out, |bytes| {
            bytes.extend_from_slice(request);
        })
    }

    /// [`Cx::forward`] with the request's bytes written by `write` (about `request_len` of
    /// them, counted against the connection's forwarding limit).
    ///
    /// # Errors
    /// [`Stop::Blocked`] (nothing sent) while `owner`'s queue refuses batches.
    pub fn forward_written(
        &mut self,
        owner: usize,
        part: u8,
        request_len: usize,
        out: &[u8],
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), Stop> {
        self.send_forward(owner, part, request_len, out, write)
            .map_err(|forward::Blocked| Stop::Blocked)?;
        self.core.count_forwarded();
        self.session.holes.stamp_last(Stamp {
            arrived_ns: self.session.arrived_ns,
            kind: self.core.kind() as u8,
            count: 1,
            resets: self.core.resets(),
        });
        Ok(())
    }

    /// Asks each of `participants` (other workers) to hold for a cross-worker transaction
    /// this connection coordinates (`control::holds`), behind its earlier forwarded requests;
    /// an empty hole at the end of `out` waits for each answer, and the session keeps the
    /// claim ([`Session::hold`]).
    ///
    /// # Errors
    /// [`Stop::Blocked`] (nothing sent) while a queue to one of them refuses batches or another
    /// worker's transaction holds the token.
    pub fn ask_holds(&mut self, participants: &[usize], out: &[u8]) -> Result<(), Stop> {
        let Some(forward) = self.forward.as_deref_mut() else {
            return Err(Stop::Blocked);
        };
        if !forward.may_forward_to_all(participants) {
            return Err(Stop::Blocked);
        }
        let me = self.core.config().worker;
        let control = Arc::clone(self.core.control());
        let Some(epoch) = control.holds.try_take(me) else {
            return Err(Stop::Blocked);
        };
        for &owner in participants {
            // Checked above: every queue takes it.
            let _ = forward.forward(
                &mut self.session.holes,
                owner,
                Op::Hold(epoch),
                0,
                out.len(),
                |_| (),
            );
        }
        self.session.hold = Some(HoldGuard {
            control,
            me,
            epoch,
            participants: participants.to_vec(),
        });
        Ok(())
    }

    /// Sends `request` (its bytes written by `write`, about `request_len` of them; `part` is the
    /// adapter's code for them) to `owner` as housekeeping: neither counted as forwarded nor
    /// timed, its (empty) reply fills a hole at the end of `out`. False, and nothing sent,
    /// while `owner`'s queue refuses batches.
    pub fn forward_quietly(
        &mut self,
        owner: usize,
        part: u8,
        request_len: usize,
        out: &[u8],
        write: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        self.send_forward(owner, part, request_len, out, write)
            .is_ok()
    }

    /// The send both of the above make: the request (after the connection's database number
    /// when it is not 0) to `owner`, its reply's hole at the end of `out`. Blocked (nothing
    /// sent) while `owner`'s queue refuses batches, or with no other worker.
    fn send_forward(
        &mut self,
        owner: usize,
        part: u8,
        request_len: usize,
        out: &[u8],
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), forward::Blocked> {
        let form = self.form(part);
        let db = self.session.db;
        let Some(forward) = self.forward.as_deref_mut() else {
            return Err(forward::Blocked);
        };
        forward.forward(
            &mut self.session.holes,
            owner,
            Op::Execute(form),
            request_len,
            out.len(),
            |bytes| {
                if db != 0 {
                    bytes.extend_from_slice(&u32::from(db).to_le_bytes());
                }
                write(bytes)
            },
        )
    }

    /// Whether a request may go to every other worker now (no queue holds a batch back).
    pub fn may_fan_out(&self) -> bool {
        self.forward.as_ref().is_none_or(|f| f.may_fan_out())
    }

    /// Sends `op` (a statistics snapshot, or a flush) to every other worker and leaves one hole
    /// at the end of `out` that fills once all have answered: `gather` combines their answers
    /// and this worker's own share (`own`) and writes the reply; without one, the hole stays
    /// empty, so what the adapter writes after it leaves once all have answered. False (and
    /// nothing sent) when this is the only worker. Check [`Cx::may_fan_out`] first.
    pub fn fan_out(
        &mut self,
        op: FanOut,
        gather: Option<Box<dyn Gather>>,
        own: Option<Part<'_>>,
        out: &mut Vec<u8>,
    ) -> bool {
        let op = match op {
            FanOut::Snapshot(group) => Op::Snapshot(group),
            FanOut::Flush { delay } => Op::Flush {
                delay,
                now: self.now,
            },
            FanOut::Reset => Op::Reset,
            FanOut::Clear => Op::Clear { now: self.now },
        };
        let Some(forward) = self.forward.as_deref_mut() else {
            return false;
        };
        let sent = forward.fan_out(&mut self.session.holes, op, gather, own, out);
        // A request that made no store operation here (stats) is timed when every worker
        // answered; a flush was counted by its own flush here.
        if sent && self.core.kind() == Kind::Other {
            self.session.holes.stamp_last(Stamp {
                arrived_ns: self.session.arrived_ns,
                kind: Kind::Other as u8,
                count: 1,
                resets: self.core.resets(),
            });
        }
        sent
    }

    /// Writes the reply `render` makes of every worker's figures of `group`, summed: now, from
    /// this worker's alone, when it is the only one or `group` does not gather; otherwise once
    /// every other worker has answered (check [`Cx::may_fan_out`] first).
    pub fn gather_snapshots(
        &mut self,
        group: Group,
        out: &mut Vec<u8>,
        mut render: impl FnMut(&Snapshot, &mut Vec<u8>) + Send + 'static,
    ) {
        let own = self.core.snapshot(group, self.now);
        if self.workers() > 1 && group.gathers() && self.forward.is_some() {
            let merged = Merged { sum: None, render };
            let own = Some(Part::Snapshot(&own));
            self.fan_out(FanOut::Snapshot(group), Some(Box::new(merged)), own, out);
        } else {
            render(&own, out);
        }
    }

    /// Opens a hole at the end of `out` whose reply `gather` writes once every part sent with
    /// [`Cx::forward_part`] is answered and [`Cx::seal`] has said no more are coming (a
    /// multi-key request whose keys live on several workers); returns its sequence number.
    ///
    /// For `stats latency` the hole stands for the parts other workers answer, each one
    /// request of the kind named last with `Core::classify` (the parts executed here count
    /// themselves); a request of kind `other` is one request however many parts it has.
    pub fn gather(&mut self, gather: Box<dyn Gather>, out: &[u8]) -> Option<u64> {
        let forward = self.forward.as_deref_mut()?;
        let seq = forward.gather(&mut self.session.holes, Some(gather), out.len());
        let kind = self.core.kind();
        self.session.holes.stamp_last(Stamp {
            arrived_ns: self.session.arrived_ns,
            kind: kind as u8,
            count: u32::from(kind == Kind::Other),
            resets: self.core.resets(),
        });
        Some(seq)
    }

    /// Sends one part of the gathering hole `seq` to `owner` (its bytes written by `write`,
    /// about `request_len` of them; `part` is the adapter's own code for them).
    ///
    /// # Errors
    /// [`Stop::Blocked`] (nothing sent) while `owner`'s queue refuses batches.
    pub fn forward_part(
        &mut self,
        seq: u64,
        owner: usize,
        part: u8,
        request_len: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), Stop> {
        let form = self.form(part);
        let Some(forward) = self.forward.as_deref_mut() else {
            return Err(Stop::Blocked);
        };
        let db = self.session.db;
        forward
            .part(
                &mut self.session.holes,
                seq,
                owner,
                Op::Execute(form),
                request_len,
                |bytes| {
                    if db != 0 {
                        bytes.extend_from_slice(&u32::from(db).to_le_bytes());
                    }
                    write(bytes)
                },
            )
            .map_err(|forward::Blocked| Stop::Blocked)?;
        self.core.count_forwarded();
        if self.core.kind() != Kind::Other {
            self.session.holes.count_part(seq);
        }
        Ok(())
    }

    /// No more parts for the gathering hole `seq`; `own` is this worker's share. The reply is
    /// written into its place in `out` once every part is answered (now, if all are).
    pub fn seal(&mut self, seq: u64, own: Part<'_>, out: &mut Vec<u8>) {
        // Filled now (its parts were answered while it was stopped): they are timed with this
        // engine call's requests.
        if let Some(stamp) = Forwarder::seal(&mut self.session.holes, seq, Some(own), out)
            && stamp.resets == self.core.resets()
        {
            self.core
                .sample_parts(Kind::from_index(stamp.kind), u64::from(stamp.count));
        }
    }

    /// Why a multi-key request should stop before its next key, if it should: the output
    /// backlog reached the high-water mark, too much waits on other workers, or the turn is
    /// used up.
    pub fn pause(&self, out: &[u8]) -> Option<Stop> {
        if self.session.atomic {
            None
        } else if out.len() >= OUT_HIGH_WATER_BYTES {
            Some(Stop::Output)
        } else if self.session.holes.full() {
            Some(Stop::Forwards)
        } else if self.session.turn_left == 0 {
            Some(Stop::Turn)
        } else {
            None
        }
    }

    /// The form a request forwarded from this session travels in.
    fn form(&self, part: u8) -> Form {
        let protocol = self.session.protocol.unwrap_or(Protocol::Text);
        protocol.form(part, self.session.db != 0)
    }
}

/// The core's operations, as adapters call them: the counted store operations, the limits and
/// statistics a request reads or changes. The core itself stays private to the context. A key
/// is the client's: each operation finds it in the connection's database ([`stored_key`]).
impl Cx<'_> {
    /// Names the kind of the request being executed (see `Core::classify`).
    #[inline]
    pub fn classify(&mut self, kind: Kind) {
        self.core.classify(kind);
    }

    /// A read that marks a hit fetched, counting `cmd_get`.
    #[inline]
    pub fn get(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        let key = stored(self.session, key);
        self.core.get(key, now)
    }

    /// A read of the value alone, counting `cmd_get`.
    #[inline]
    pub fn get_value(&mut self, key: &[u8], now: Now) -> Option<&[u8]> {
        let key = stored(self.session, key);
        self.core.get_value(key, now)
    }

    /// A read that leaves the item's access marks alone, counting `cmd_get`.
    #[inline]
    pub fn get_unbumped(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        let key = stored(self.session, key);
        self.core.get_unbumped(key, now)
    }

    /// A look at a live item: nothing counted or marked.
    #[inline]
    pub fn peek(&mut self, key: &[u8], now: Now) -> Option<ItemView<'_>> {
        let key = stored(self.session, key);
        self.core.peek(key, now)
    }

    /// A new expiry for a held key, counting `cmd_touch`.
    #[inline]
    pub fn touch(&mut self, key: &[u8], ttl: Ttl, now: Now) -> Option<ItemView<'_>> {
        let key = stored(self.session, key);
        self.core.touch(key, ttl, now)
    }

    /// [`Cx::touch`] without marking the access.
    #[inline]
    pub fn touch_unbumped(&mut self, key: &[u8], ttl: Ttl, now: Now) -> Option<ItemView<'_>> {
        let key = stored(self.session, key);
        self.core.touch_unbumped(key, ttl, now)
    }

    /// A new expiry as part of another command (not counted as a touch).
    #[inline]
    pub fn retouch(&mut self, key: &[u8], ttl: Ttl, now: Now) {
        let key = stored(self.session, key);
        self.core.retouch(key, ttl, now);
    }

    /// A store, counting `cmd_set`.
    ///
    /// # Errors
    /// As [`store::Shard::store`].
    #[inline]
    pub fn store(&mut self, write: Write<'_>, now: Now) -> Result<u64, StoreError> {
        let key = stored(self.session, write.key);
        self.core.store(Write { key, ..write }, now)
    }

    /// A store made by a read (meta `mg N`), counted as the core counts it.
    ///
    /// # Errors
    /// As [`store::Shard::store`].
    #[inline]
    pub fn vivify(&mut self, write: Write<'_>, now: Now) -> Result<u64, StoreError> {
        let key = stored(self.session, write.key);
        self.core.vivify(Write { key, ..write }, now)
    }

    /// Counts a store refused for its size (and unlinks the old item when `unlink`).
    #[inline]
    pub fn refuse_too_large(&mut self, key: &[u8], unlink: bool, now: Now) {
        let key = stored(self.session, key);
        self.core.refuse_too_large(key, unlink, now);
    }

    /// Removes `key` without counting a delete.
    #[inline]
    pub fn unlink(&mut self, key: &[u8], now: Now) {
        let key = stored(self.session, key);
        self.core.unlink(key, now);
    }

    /// Whether an item of this key and value length can ever be stored (`-I`).
    #[inline]
    pub fn fits(&self, key_len: usize, value_len: usize) -> bool {
        let namespace = if self.session.stored_db == 0 {
            0
        } else {
            NAMESPACE_BYTES
        };
        self.core.fits(key_len + namespace, value_len)
    }

    /// A delete, counted.
    ///
    /// # Errors
    /// As [`store::Shard::delete`].
    #[inline]
    pub fn delete(&mut self, key: &[u8], cas: u64, now: Now) -> Result<(), StoreError> {
        let key = stored(self.session, key);
        self.core.delete(key, cas, now)
    }

    /// Marks `key` stale (meta `md I`, `ms I`).
    ///
    /// # Errors
    /// As [`store::Shard::invalidate_with`].
    #[inline]
    pub fn invalidate(
        &mut self,
        key: &[u8],
        cas: u64,
        exptime: Option<i64>,
        new_cas: NewCas,
        now: Now,
    ) -> Result<u64, StoreError> {
        let key = stored(self.session, key);
        self.core.invalidate(key, cas, exptime, new_cas, now)
    }

    /// Records that a client holds the item's recache token (meta `W`).
    #[inline]
    pub fn claim_win(&mut self, key: &[u8], now: Now) {
        let key = stored(self.session, key);
        self.core.claim_win(key, now);
    }

    /// Marks the item fetched (meta `mg` after its reply is written).
    #[inline]
    pub fn mark_fetched(&mut self, key: &[u8], now: Now) {
        let key = stored(self.session, key);
        self.core.mark_fetched(key, now);
    }

    /// An increment or decrement, counted.
    ///
    /// # Errors
    /// As [`store::Shard::incr_decr`].
    #[inline]
    pub fn arith(&mut self, arith: Arith<'_>, now: Now) -> Result<(u64, u64), StoreError> {
        let key = stored(self.session, arith.key);
        self.core.arith(Arith { key, ..arith }, now)
    }

    /// Starts noting writes to `key` of namespace `namespace` (`WATCH`): the sequence to
    /// compare at `EXEC`.
    #[inline]
    pub fn watch_writes(&mut self, namespace: u8, key: &[u8]) -> u64 {
        let mut buf = Vec::new();
        let key = stored_key(namespace, key, &mut buf);
        self.core.marks().watch(key)
    }

    /// Whether `key` of namespace `namespace`, watched at `since`, was written after.
    #[inline]
    pub fn written_since(&mut self, namespace: u8, key: &[u8], since: u64) -> bool {
        let mut buf = Vec::new();
        let key = stored_key(namespace, key, &mut buf);
        self.core.marks().written_since(key, since)
    }

    /// Stops noting writes to `key` of namespace `namespace` for one watcher.
    #[inline]
    pub fn unwatch_writes(&mut self, namespace: u8, key: &[u8]) {
        let mut buf = Vec::new();
        let key = stored_key(namespace, key, &mut buf);
        self.core.marks().release(key);
    }

    /// Holds `bytes` of the worker's input budget for the command being assembled (a
    /// command holds once it passes [`super::budget::LARGE_COMMAND_BYTES`]); false when the
    /// budget is short.
    #[inline]
    pub fn hold_input(&mut self, bytes: usize) -> bool {
        self.core.budget().grow(&mut self.session.input_hold, bytes)
    }

    /// Gives the command's share of the input budget back.
    #[inline]
    pub fn release_input(&mut self) {
        self.session.input_hold = None;
    }

    /// A CAS value no live item of `key` holds.
    #[inline]
    pub fn cas_matching_nothing(&mut self, key: &[u8], now: Now) -> u64 {
        let key = stored(self.session, key);
        self.core.cas_matching_nothing(key, now)
    }

    /// `flush_all` on this worker's shard, counted.
    #[inline]
    pub fn flush_all(&mut self, delay: i64, now: Now) {
        self.core.flush_all(delay, now);
    }

    /// Empties this worker's shard now, counted as a flush.
    #[inline]
    pub fn clear(&mut self, now: Now) {
        self.core.clear(now);
    }

    /// Counts a request refused as malformed or unknown.
    #[inline]
    pub fn protocol_error(&mut self) {
        self.core.protocol_error();
    }

    /// Counts a meta command.
    #[inline]
    pub fn count_meta(&mut self) {
        self.core.count_meta();
    }

    /// Warms the store for `keys` (see `Core::prefetch`); database 0's only (a hint: the
    /// keys of another database are not worth namespacing for it).
    #[inline]
    pub fn prefetch(&self, keys: &[&[u8]]) {
        if self.session.stored_db == 0 {
            self.core.prefetch(keys);
        }
    }

    /// Records the samples counted so far as taking `ns` (`stats latency`).
    pub fn record_samples(&mut self, ns: u64) {
        self.core.record_samples(ns);
    }

    /// Zeroes this worker's statistics (`stats reset`).
    pub fn reset_stats(&mut self) {
        self.core.reset_stats();
    }

    /// This worker's figures for `group`.
    pub fn snapshot(&self, group: Group, now: Now) -> Snapshot {
        self.core.snapshot(group, now)
    }

    /// This worker's memory figures.
    pub fn memory_figures(&self) -> MemoryFigures {
        self.core.memory_figures()
    }

    /// Takes a changed memory budget (`cache_memlimit`), in steps.
    pub fn apply_memory_limit(&mut self) {
        self.core.apply_memory_limit();
    }

    /// Hands the client's key and the item of every live key of the connection's database in
    /// this worker's buckets `start..end` to `f`, touching none (see [`Cx::visit`]).
    pub fn visit_database(
        &self,
        start: usize,
        end: usize,
        now: Now,
        mut f: impl FnMut(&[u8], ItemView<'_>),
    ) {
        let db = self.session.stored_db;
        self.core.shard().visit(start, end, now, |stored, item, _| {
            in_database(db, stored, item, &mut f)
        });
    }

    /// Hands the client's key and the item of every live key of the connection's database in
    /// one window of this worker's table in key-hash order, from position `from`, about
    /// `buckets` buckets wide; returns where the next window starts, `None` after the last
    /// (see [`store::Shard::visit_in_order`]).
    pub fn visit_database_in_order(
        &self,
        from: u64,
        buckets: usize,
        now: Now,
        mut f: impl FnMut(&[u8], ItemView<'_>),
    ) -> Option<u64> {
        let db = self.session.stored_db;
        self.core
            .shard()
            .visit_in_order(from, buckets, now, |stored, item, _| {
                in_database(db, stored, item, &mut f)
            })
    }

    /// A new open transaction's charge on this worker's pool.
    pub(crate) fn queue_charge(&self) -> Charge {
        Charge::on(self.core.queued_pool())
    }

    /// Items this worker's shard holds, every database's.
    pub fn items(&self) -> usize {
        self.core.shard().len()
    }

    /// The buckets of this worker's table.
    pub fn num_buckets(&self) -> usize {
        self.core.shard().num_buckets()
    }

    /// Hands every live item of this worker's buckets `start..end` to `f` (key, item, charged
    /// size), touching none (see [`store::Shard::visit`]).
    pub fn visit(
        &self,
        start: usize,
        end: usize,
        now: Now,
        f: impl FnMut(&[u8], ItemView<'_>, usize),
    ) {
        self.core.shard().visit(start, end, now, f);
    }

    /// The version string answered to VERSION.
    pub fn version(&self) -> &'static str {
        self.core.version()
    }

    /// The configuration this engine was built with.
    pub fn config(&self) -> &EngineConfig {
        self.core.config()
    }

    /// What every worker shares.
    pub fn control(&self) -> &Arc<Control> {
        self.core.control()
    }

    /// The connection's number (see [`Session::number`]).
    pub fn connection_number(&mut self) -> u64 {
        self.session.number(self.core.control())
    }
}

/// Every worker's figures, summed as they arrive; `render` writes the reply from the sum.
struct Merged<F> {
    sum: Option<Snapshot>,
    render: F,
}

impl<F> std::fmt::Debug for Merged<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merged").field("sum", &self.sum).finish()
    }
}

impl<F: FnMut(&Snapshot, &mut Vec<u8>) + Send> Gather for Merged<F> {
    fn add(&mut self, part: Part<'_>) {
        if let Part::Snapshot(snapshot) = part {
            match self.sum.as_mut() {
                Some(sum) => sum.merge(snapshot),
                None => self.sum = Some(snapshot.clone()),
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(sum) = &self.sum {
            (self.render)(sum, out);
        }
    }
}

/// What a request may ask of every other worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FanOut {
    /// Send back your statistics for this `stats` group.
    Snapshot(Group),
    /// Flush your shard (flush_all with this delay).
    Flush {
        /// The delay, memcached's exptime rules.
        delay: i64,
    },
    /// Reset your statistics (`stats reset`).
    Reset,
    /// Empty your shard now: flush it and reclaim every item at once (Redis's `FLUSHALL`,
    /// after which the keyspace is empty and counts no key).
    Clear,
}
