//! The `engine` target: `Engine::execute` fed a client's pipeline as a packet path would, in
//! random fragments, with its replies read at random moments and, with two workers, requests
//! forwarded to the other engine and answered late and out of order.
//!
//! Input (see [`Options`]): two option bytes, an 8-byte schedule seed, then the pipeline: raw
//! bytes, or a program for [`crate::pipeline::generate`] (near-valid requests of all three
//! protocols). The same pipeline runs twice: once whole (every byte at once, every reply read
//! at once, forwarded requests answered at once) and once as the schedule says: the client
//! sends pieces (no more than a socket ring of the chosen size holds), the worker parses them
//! in place or assembles them in the connection's buffer as the smoltcp path does, or reads
//! them as the kernel path does, the client reads its replies now and then, and forwarded
//! batches are served and their replies delivered whenever the schedule says.
//!
//! Checked, beyond "no panic":
//! - the replies are byte for byte those of the whole run (the `bytes_read`/`bytes_written`
//!   statistics, which count bytes as they arrive, aside), and as much input is consumed;
//! - every call consumes at most what it was given, and never produces output while the
//!   connection's backlog is above the high-water mark, or while it is closing;
//! - a call never writes more than the room left below the high-water mark plus one reply (the
//!   largest item, its header and some flags): a multi-key `get` stops inside the request;
//! - `needed` is consistent: a call that stops short with nothing needed is blocked by its
//!   backlog; an exact `needed` (binary frames, data blocks, skipped bodies; a text line's is
//!   only a read hint) is a true lower bound: fewer bytes leave the engine waiting for exactly
//!   the rest, and produce nothing;
//! - every forwarded request is answered, and no reply is left in a hole;
//! - the heap never grows with a length a client only announced: its peak stays within what
//!   the stores hold plus a small multiple of the bytes that arrived and of the replies written
//!   (counted by [`crate::alloc::CountingAlloc`]).
//!
//! Set `MEMSPIN_FUZZ_TRACE=1` to print the pipeline and every step of the schedule to stderr
//! (to describe a reproducer).

use std::collections::VecDeque;

use protocol::binary::{Opcode, REQUEST_MAGIC, ResponseRepr};
use server::conn::ClientConn;
use server::engine::{
    Batch, Engine, EngineConfig, OUT_HIGH_WATER_BYTES, Outcome, Protocol, Replies,
};
use store::ShardConfig;

use crate::alloc;
use crate::input::{Reader, Rng};
use crate::pipeline;

/// The clock every run reads (unix seconds).
const NOW: u64 = 1_700_000_000;
/// The connection's name for replies from the other worker.
const TOKEN: u128 = 7;
/// Heap the engines may use beyond the stores, the bytes that arrived and the replies written:
/// room for what a connection may hold whatever it sends (its output up to the high-water mark,
/// its forwarded requests and their replies), but not for a length it only announces.
const HEAP_SLACK_BYTES: isize = 1 << 20;
/// Socket ring sizes (in-place reader) or read sizes (buffered reader) to choose from.
const WINDOWS: [usize; 8] = [1, 7, 24, 64, 512, 1500, 16 * 1024, 64 * 1024];
/// Rounds without which a schedule must end (it always does; this turns a bug into a panic).
const MAX_ROUNDS: usize = 50_000_000;
/// Reply bytes beyond the item itself: a `VALUE` line with a 250-byte key, or a meta line
/// echoing its flags, or a whole `stats` reply.
const REPLY_OVERHEAD_BYTES: usize = 4096;

/// How the worker takes the client's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReaderKind {
    /// The smoltcp path: parse in place from a socket ring of this size, assemble what wraps
    /// or does not fit in the connection's buffer, topping it up by `needed`.
    InPlace { ring: usize },
    /// The kernel path: read up to this many bytes at a time into the connection's buffer.
    Buffered { read: usize },
}

/// What the first bytes of an input choose.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The pipeline is a generator program, not raw bytes.
    structured: bool,
    /// Workers: 1, or 2 (the connection on worker 0, keys of worker 1 forwarded).
    workers: usize,
    /// `-I` 1 KiB instead of 1 MiB (values around the limit are cheap to send).
    small_items: bool,
    /// Forwarded replies are delivered in random order rather than in order.
    reorder: bool,
    reader: ReaderKind,
    /// Arrival sizes: 0 one byte, 1 up to 16, 2 up to 2 KiB, 3 any (up to all).
    arrival: u8,
    /// Reading replies: 0 only when stuck, 1 a little, 2 all, 3 a mix.
    drain: u8,
    /// One in this many rounds serves a forwarded batch and delivers a reply.
    forward_every: usize,
    /// Call the engine even when the connection may not execute (it must do nothing).
    execute_blocked: bool,
    seed: u64,
}

impl Options {
    fn decode(r: &mut Reader<'_>) -> Options {
        let (a, b) = (r.u8(), r.u8());
        let window = WINDOWS[usize::from(a >> 5)];
        Options {
            structured: a & 1 != 0,
            workers: if a & 2 != 0 { 2 } else { 1 },
            small_items: a & 4 != 0,
            reorder: a & 8 != 0,
            reader: if a & 16 != 0 {
                ReaderKind::InPlace {
                    ring: window.max(24),
                }
            } else {
                ReaderKind::Buffered { read: window }
            },
            arrival: b & 3,
            drain: (b >> 2) & 3,
            forward_every: [1, 2, 5, 20][usize::from((b >> 4) & 3)],
            execute_blocked: b & 64 != 0,
            seed: r.u64(),
        }
    }

    /// The run everything else is compared with: all bytes at once, all replies read at once.
    fn whole(&self) -> Options {
        Options {
            reorder: false,
            reader: ReaderKind::Buffered { read: usize::MAX },
            arrival: 3,
            drain: 2,
            forward_every: 1,
            execute_blocked: false,
            ..*self
        }
    }

    fn engine(&self, worker: usize) -> Engine {
        Engine::new(EngineConfig {
            started_unix_secs: NOW - 1000,
            threads: self.workers,
            worker,
            ..EngineConfig::new(
                ShardConfig {
                    // Never full: eviction picks victims by a per-process random hash, and the
                    // two runs must see the same store.
                    memory_limit_bytes: 64 << 20,
                    max_item_size: if self.small_items { 1024 } else { 1 << 20 },
                },
                server::control::Control::new(Default::default(), 0),
            )
        })
    }
}

/// Runs every check on one input. Panics on a violation.
///
/// # Panics
/// Also when [`crate::alloc::CountingAlloc`] is not the global allocator.
pub fn check(data: &[u8]) {
    assert!(
        alloc::installed(),
        "the engine target needs fuzz::alloc::CountingAlloc as the global allocator"
    );
    let mut r = Reader::new(data);
    let options = Options::decode(&mut r);
    let pipeline = if options.structured {
        pipeline::generate(r.rest())
    } else {
        r.rest().to_vec()
    };
    let trace = std::env::var_os("MEMSPIN_FUZZ_TRACE").is_some();
    if trace {
        eprintln!("options {options:?}");
        eprintln!("pipeline ({} bytes): {}", pipeline.len(), escape(&pipeline));
    }
    let whole = Sim::new(options.whole(), &pipeline, false).run();
    let mut sim = Sim::new(options, &pipeline, trace);
    // The client's copy of the replies is the harness's, not the server's: room for them is
    // made before the heap is measured.
    sim.received.reserve_exact(whole.received.len());
    let base = alloc::live_bytes();
    alloc::reset_peak();
    let pieces = sim.run();
    let heap_growth = alloc::peak_bytes() - base;

    let (expected, got) = (
        normalize(&pipeline, &whole.received),
        normalize(&pipeline, &pieces.received),
    );
    if expected != got {
        let at = expected
            .iter()
            .zip(&got)
            .take_while(|(a, b)| a == b)
            .count();
        panic!(
            "replies differ from the whole run's at byte {at}:\n whole: {}\npieces: {}",
            escape(&expected[at.saturating_sub(40)..(at + 80).min(expected.len())]),
            escape(&got[at.saturating_sub(40)..(at + 80).min(got.len())]),
        );
    }
    assert_eq!(
        pieces.consumed, whole.consumed,
        "consumed input differs from the whole run's"
    );
    // The stores are sampled after each step; within one, each of the (at most two) stores may
    // take a whole segment and give it back (an item stored, then deleted), unseen by a sample.
    let allowed = HEAP_SLACK_BYTES
        + 2 * to_isize(store::MAX_SEGMENT_BYTES as u64)
        + 2 * pieces.max_store_bytes
        + 4 * to_isize(pieces.sent)
        + 4 * to_isize(pieces.written);
    assert!(
        heap_growth <= allowed,
        "heap grew by {heap_growth} bytes; allowed {allowed} (stores {} B, {} B arrived, {} B \
         written)",
        pieces.max_store_bytes,
        pieces.sent,
        pieces.written
    );
}

fn to_isize(n: u64) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

/// What one run saw.
struct Finished {
    /// Every reply byte the client read.
    received: Vec<u8>,
    /// Input bytes the engine consumed.
    consumed: u64,
    /// Bytes the client sent.
    sent: u64,
    /// Reply bytes the home engine wrote (its own and those delivered from the other worker).
    written: u64,
    /// Most bytes the stores held from the allocator at once (segments and tables).
    max_store_bytes: isize,
}

/// A wait the last call reported, to check the next call against.
#[derive(Debug, Clone, Copy)]
struct Wait {
    needed: usize,
    /// Binary frames, data blocks and skipped bodies; not a text line's read hint.
    exact: bool,
    /// Bytes given to that call and not consumed (the front of the next call's input).
    leftover: usize,
}

/// One connection, its worker (and the other worker), and the schedule that drives them.
struct Sim<'p> {
    options: Options,
    rng: Rng,
    trace: bool,
    pipeline: &'p [u8],
    /// Bytes of the pipeline the client has sent.
    sent: usize,
    /// Sent bytes the worker has not taken from the socket yet.
    socket: VecDeque<u8>,
    /// Offset of the socket's first byte in its ring (in-place reader).
    ring_offset: usize,
    /// Bytes taken from the socket (parsed in place or moved into the connection's buffer).
    taken: usize,
    home: Engine,
    owner: Option<Engine>,
    conn: ClientConn,
    /// Batches sent to the other worker, not served yet (it serves them in order).
    in_flight: VecDeque<Batch>,
    /// Served batches' replies, with the indices not delivered yet.
    answers: Vec<(Replies, VecDeque<usize>)>,
    served: usize,
    delivered: usize,
    received: Vec<u8>,
    consumed: u64,
    last_wait: Option<Wait>,
    max_store_bytes: isize,
}

impl<'p> Sim<'p> {
    fn new(options: Options, pipeline: &'p [u8], trace: bool) -> Sim<'p> {
        let mut conn = ClientConn::default();
        conn.session.set_token(TOKEN);
        Sim {
            options,
            rng: Rng::new(options.seed),
            trace,
            pipeline,
            sent: 0,
            socket: VecDeque::new(),
            ring_offset: 0,
            taken: 0,
            home: options.engine(0),
            owner: (options.workers > 1).then(|| options.engine(1)),
            conn,
            in_flight: VecDeque::new(),
            answers: Vec::new(),
            served: 0,
            delivered: 0,
            received: Vec::new(),
            consumed: 0,
            last_wait: None,
            max_store_bytes: 0,
        }
    }

    /// Counters that only grow: the schedule ends once a forced round moves none of them. The
    /// engine's own count of keys read and touched shows a multi-key request that goes on
    /// across calls without consuming or writing anything (misses).
    fn progress(&self) -> [u64; 8] {
        let counters = self.home.counters();
        [
            self.sent as u64,
            self.taken as u64,
            self.consumed,
            self.received.len() as u64,
            self.served as u64,
            self.delivered as u64,
            counters.cmd_get,
            counters.cmd_touch,
        ]
    }

    fn run(mut self) -> Finished {
        for _ in 0..MAX_ROUNDS {
            let before = self.progress();
            self.round(false);
            if self.conn.finished() {
                break;
            }
            if self.progress() == before {
                self.round(true);
                if self.progress() == before {
                    break;
                }
            }
        }
        // Everything sent to the other worker came back, and nothing waits in a hole.
        while self.serve() {}
        while self.deliver() {}
        self.drain(usize::MAX);
        assert!(
            !self.conn.awaiting_replies(),
            "forwarded requests left unanswered"
        );
        assert!(self.conn.pending_output().is_empty(), "replies left unsent");
        Finished {
            received: self.received,
            consumed: self.consumed,
            sent: self.sent as u64,
            written: self.home.counters().bytes_written,
            max_store_bytes: self.max_store_bytes,
        }
    }

    /// One step of the client, the worker, the other worker and the client again; `forced`
    /// does everything that can be done (the client sends all it may and reads everything).
    fn round(&mut self, forced: bool) {
        self.send(forced);
        self.work();
        if self.owner.is_some() && (forced || self.rng.one_in(self.options.forward_every)) {
            if forced {
                while self.serve() {}
                while self.deliver() {}
            } else {
                self.serve();
                for _ in 0..self.rng.up_to(4) {
                    self.deliver();
                }
            }
        }
        let pending = self.conn.pending_output().len();
        let drain = match (forced, self.options.drain) {
            (true, _) | (false, 2) => usize::MAX,
            (false, 0) => 0,
            (false, 1) => self.rng.up_to((pending / 8).max(64)),
            _ => match self.rng.below(3) {
                0 => 0,
                1 => self.rng.up_to((pending / 4).max(16)),
                _ => usize::MAX,
            },
        };
        self.drain(drain);
    }

    /// The client sends its next piece (as much as the socket ring has room for).
    fn send(&mut self, forced: bool) {
        let left = self.pipeline.len() - self.sent;
        let room = match self.options.reader {
            ReaderKind::InPlace { ring } => ring - self.socket.len(),
            ReaderKind::Buffered { .. } => usize::MAX,
        };
        let size = if forced {
            usize::MAX
        } else {
            match self.options.arrival {
                // Byte by byte for short pipelines; the long ones would take too long.
                0 if self.pipeline.len() <= 4096 => 1,
                0 => self.rng.up_to(16),
                1 => self.rng.up_to(16),
                2 => self.rng.up_to(2048),
                _ => match self.rng.below(4) {
                    0 => self.rng.up_to(8),
                    1 => self.rng.up_to(512),
                    2 => self.rng.up_to(64 * 1024),
                    _ => usize::MAX,
                },
            }
        };
        let n = size.min(left).min(room);
        if n == 0 {
            return;
        }
        self.socket.extend(&self.pipeline[self.sent..self.sent + n]);
        self.sent += n;
        if self.trace {
            eprintln!("send {n}");
        }
    }

    /// The worker's turn: take bytes from the socket and run the engine, as the packet path
    /// of the chosen reader does.
    fn work(&mut self) {
        self.conn.session.begin_turn(server::engine::TURN_REQUESTS);
        match self.options.reader {
            ReaderKind::Buffered { read } => {
                // A few bytes at a time for short pipelines; the long ones would take too long.
                let read = if self.pipeline.len() > 4096 {
                    read.max(64)
                } else {
                    read
                };
                let n = if read == usize::MAX {
                    self.socket.len()
                } else {
                    self.rng.up_to(read.min(self.socket.len()).max(1))
                }
                .min(self.socket.len());
                let (front, back) = self.socket.as_slices();
                let split = n.min(front.len());
                self.conn.input.extend(&front[..split]);
                self.conn.input.extend(&back[..n - split]);
                self.socket.drain(..n);
                self.taken += n;
                if self.conn.input.is_empty() {
                    return;
                }
                if self.conn.may_execute() || self.options.execute_blocked {
                    self.execute(None);
                }
            }
            ReaderKind::InPlace { ring } => {
                if self.conn.finished() {
                    return;
                }
                if !self.conn.may_execute() && !self.options.execute_blocked {
                    return;
                }
                if self.socket.is_empty() {
                    if !self.conn.input.is_empty() {
                        self.execute(None);
                    }
                    return;
                }
                if self.conn.input.is_empty() {
                    // The contiguous part of the ring, from its read offset.
                    let len = self.socket.len().min(ring - self.ring_offset);
                    let mut socket = std::mem::take(&mut self.socket);
                    let slice = &socket.make_contiguous()[..len];
                    let outcome = self.execute(Some(slice));
                    let take =
                        if outcome.consumed < len && !outcome.close && self.conn.may_execute() {
                            // The next frame is incomplete in this slice: assemble it.
                            self.conn.input.extend(&slice[outcome.consumed..]);
                            len
                        } else {
                            outcome.consumed
                        };
                    self.socket = socket;
                    self.socket.drain(..take);
                    self.taken += take;
                    self.ring_offset = (self.ring_offset + take) % ring;
                } else {
                    let want = self.conn.needed.max(1).min(self.socket.len());
                    let (front, back) = self.socket.as_slices();
                    let split = want.min(front.len());
                    self.conn.input.extend(&front[..split]);
                    self.conn.input.extend(&back[..want - split]);
                    self.socket.drain(..want);
                    self.taken += want;
                    self.ring_offset = (self.ring_offset + want) % ring;
                    self.execute(None);
                }
            }
        }
    }

    /// One call of the engine, over `in_place` bytes or the connection's buffer, with the
    /// per-call checks.
    fn execute(&mut self, in_place: Option<&[u8]>) -> Outcome {
        let closing = self.conn.session.is_closing();
        let may_execute = self.conn.may_execute();
        let written = self.home.counters().bytes_written;
        let given = in_place.map_or(self.conn.input.len(), <[u8]>::len);
        let outcome = match in_place {
            Some(bytes) => self.conn.execute_in_place(&mut self.home, bytes, NOW),
            None => self.conn.execute_buffered(&mut self.home, NOW),
        };
        let wrote = self.home.counters().bytes_written - written;
        let leftover = given.saturating_sub(outcome.consumed);
        if self.trace {
            eprintln!(
                "execute {} given {given}: consumed {} needed {} close {} wrote {wrote}",
                if in_place.is_some() {
                    "in place"
                } else {
                    "buffered"
                },
                outcome.consumed,
                outcome.needed,
                outcome.close
            );
        }
        assert!(
            outcome.consumed <= given,
            "consumed {} of {given} bytes",
            outcome.consumed
        );
        self.consumed += outcome.consumed as u64;
        if closing {
            assert!(outcome.close, "a closing connection reported open");
            assert_eq!(
                (outcome.consumed, wrote),
                (0, 0),
                "a closing connection ran on"
            );
        } else if !may_execute {
            assert_eq!(wrote, 0, "replies written above the high-water mark");
        } else {
            // Unsent bytes, those behind a hole for another worker's reply included.
            let backlog = (written - self.received.len() as u64) as usize;
            let largest = self.home.config().shard.max_item_size + REPLY_OVERHEAD_BYTES;
            let room = OUT_HIGH_WATER_BYTES.saturating_sub(backlog);
            assert!(
                wrote as usize <= room + largest,
                "one call wrote {wrote} bytes over a backlog of {backlog}: more than one reply \
                 past the high-water mark"
            );
        }
        if outcome.needed > 0 {
            assert!(!outcome.close, "needed bytes on a closing connection");
        } else if !outcome.close
            && leftover > 0
            && !matches!(
                outcome.stop,
                server::engine::Stop::Turn | server::engine::Stop::Blocked
            )
        {
            assert!(
                !self.conn.may_execute(),
                "stopped with {leftover} bytes left, nothing needed and nothing blocking"
            );
        }
        if let Some(wait) = self.last_wait.take()
            && wait.exact
            && may_execute
            && !closing
        {
            let arrived = given - wait.leftover;
            if arrived < wait.needed {
                assert_eq!(
                    (outcome.needed, wrote),
                    (wait.needed - arrived, 0),
                    "{arrived} of the {} bytes needed arrived",
                    wait.needed
                );
                assert!(
                    outcome.consumed == 0 || wait.leftover == 0,
                    "a partial frame ran"
                );
            }
        }
        if outcome.needed > 0 {
            let rest = match in_place {
                Some(bytes) => &bytes[outcome.consumed..],
                None => self.conn.input.data(),
            };
            let text_line = (self.conn.session.protocol() == Some(Protocol::Text)
                && !rest.contains(&b'\n'))
                || rest.is_empty();
            if text_line {
                let most = if rest.is_empty() {
                    64 * 1024
                } else {
                    16 * 1024
                };
                assert!(outcome.needed <= most, "read hint {}", outcome.needed);
            }
            self.last_wait = Some(Wait {
                needed: outcome.needed,
                exact: !text_line,
                leftover,
            });
        }
        self.take_forwards();
        // What the stores hold on the heap: their segments (written or not) and tables.
        let stores = self.home.shard().memory_bytes()
            + self.owner.as_ref().map_or(0, |o| o.shard().memory_bytes());
        self.max_store_bytes = self.max_store_bytes.max(to_isize(stores as u64));
        outcome
    }

    fn take_forwards(&mut self) {
        let in_flight = &mut self.in_flight;
        self.home.take_forwards(|dest, batch| {
            assert_eq!(dest, 1, "forwarded to a worker that does not exist");
            in_flight.push_back(batch);
            Ok(())
        });
    }

    /// The other worker serves the oldest batch. False when there was none.
    fn serve(&mut self) -> bool {
        self.take_forwards();
        let (Some(owner), Some(batch)) = (self.owner.as_mut(), self.in_flight.pop_front()) else {
            return false;
        };
        owner.serve_forwarded(0, batch, NOW);
        let mut messages = Vec::new();
        owner.take_replies(|dest, replies| {
            assert_eq!(dest, 0);
            messages.push(replies);
            Ok(())
        });
        for replies in messages {
            let mut order: VecDeque<usize> = (0..replies.len()).collect();
            if self.options.reorder {
                order.make_contiguous().reverse();
                order.rotate_left(self.rng.below(order.len().max(1)));
            }
            for index in 0..replies.len() {
                assert_eq!(replies.token(index), Some(TOKEN));
            }
            self.answers.push((replies, order));
        }
        self.served += 1;
        if self.trace {
            eprintln!("serve batch {}", self.served);
        }
        true
    }

    /// One forwarded reply reaches the connection. False when none was waiting.
    fn deliver(&mut self) -> bool {
        if self.answers.is_empty() {
            return false;
        }
        let which = if self.options.reorder {
            self.rng.below(self.answers.len())
        } else {
            0
        };
        let (replies, order) = &mut self.answers[which];
        if let Some(index) = order.pop_front() {
            let delivery = replies.get(index).expect("index within the replies");
            self.conn.deliver(&mut self.home, delivery);
            self.delivered += 1;
            if self.trace {
                eprintln!("deliver reply {index} of batch message {which}");
            }
        }
        if order.is_empty() {
            let (replies, _) = self.answers.remove(which);
            self.home.recycle(replies);
        }
        true
    }

    /// The client reads up to `max` reply bytes.
    fn drain(&mut self, max: usize) {
        let pending = self.conn.pending_output();
        let n = pending.len().min(max);
        if n == 0 {
            return;
        }
        self.received.extend_from_slice(&pending[..n]);
        self.conn.sent(n);
        self.conn.settle(&mut self.home);
        if self.trace {
            eprintln!("read {n}");
        }
    }
}

/// Statistics that count how the bytes arrived (per read, per turn), not what was asked, or
/// time (CPU used, the latency instrument's nanoseconds): they differ between fragmentations
/// and runs by design.
const ARRIVAL_STATS: [&[u8]; 5] = [
    b"bytes_read",
    b"bytes_written",
    b"conn_yields",
    b"rusage_user",
    b"rusage_system",
];

/// Prefixes of statistics whose values are times (`stats latency`).
const TIMED_STATS: &[u8] = b"latency:";

/// Whether a statistic's value differs between runs (see [`ARRIVAL_STATS`]).
fn varies(name: &[u8]) -> bool {
    ARRIVAL_STATS.contains(&name) || name.starts_with(TIMED_STATS)
}

/// The replies with the values of the [`ARRIVAL_STATS`] taken out.
fn normalize(pipeline: &[u8], replies: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(replies.len());
    let mut rest = replies;
    if pipeline.first() == Some(&REQUEST_MAGIC) {
        while !rest.is_empty() {
            let Ok((mut frame, len)) = ResponseRepr::parse(rest, u32::MAX) else {
                out.extend_from_slice(rest);
                break;
            };
            if frame.opcode == Opcode::Stat && varies(frame.key) {
                frame.value = b"";
            }
            frame.emit_into(&mut out);
            rest = &rest[len..];
        }
    } else {
        const STAT: &[u8] = b"STAT ";
        while let Some(at) = find(rest, STAT) {
            let name = &rest[at + STAT.len()..];
            let name_len = name.iter().take_while(|&&b| b != b' ').count();
            let counted = (name_len < name.len() && varies(&name[..name_len])).then_some(name_len);
            // Keep `STAT <name> `, drop the number after it.
            let kept = at + STAT.len() + counted.map_or(0, |len| len + 1);
            out.extend_from_slice(&rest[..kept]);
            let digits = match counted {
                Some(_) => rest[kept..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit() || **b == b'.')
                    .count(),
                None => 0,
            };
            rest = &rest[kept + digits..];
        }
        out.extend_from_slice(rest);
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Bytes as a Rust byte-string literal body (printable ASCII kept, the rest escaped),
/// shortened in the middle past 4 KiB.
pub fn escape(bytes: &[u8]) -> String {
    let shown: Vec<u8> = if bytes.len() > 4096 {
        let mut v = bytes[..2048].to_vec();
        v.extend_from_slice(format!("...[{} bytes]...", bytes.len() - 4096).as_bytes());
        v.extend_from_slice(&bytes[bytes.len() - 2048..]);
        v
    } else {
        bytes.to_vec()
    };
    shown.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::binary::Status;

    #[test]
    fn normalize_drops_only_arrival_counts() {
        let text = b"VALUE STAT 0 2\r\nhi\r\nSTAT bytes_read 120\r\nSTAT bytes 5\r\nSTAT conn_yields 3\r\nEND\r\n";
        assert_eq!(
            normalize(b"stats\r\n", text),
            b"VALUE STAT 0 2\r\nhi\r\nSTAT bytes_read \r\nSTAT bytes 5\r\nSTAT conn_yields \r\nEND\r\n"
        );
        let stat = |key: &'static [u8], value: &'static [u8]| ResponseRepr {
            opcode: Opcode::Stat,
            quiet: false,
            status: Status::NoError,
            opaque: 1,
            cas: 0,
            extras: &[],
            key,
            value,
        };
        let mut binary = Vec::new();
        stat(b"bytes_written", b"4096").emit_into(&mut binary);
        stat(b"bytes", b"5").emit_into(&mut binary);
        let mut expected = Vec::new();
        stat(b"bytes_written", b"").emit_into(&mut expected);
        stat(b"bytes", b"5").emit_into(&mut expected);
        assert_eq!(normalize(&[REQUEST_MAGIC], &binary), expected);
    }

    #[test]
    fn a_pipeline_passes_with_any_options() {
        let pipeline = b"set k0 0 0 2\r\nhi\r\nget k0 k1 k2\r\nmg k0 v\r\nstats\r\n";
        for a in [0u8, 2, 0x12, 0xf6, 0xfe] {
            for b in [0u8, 0x0b, 0x3f, 0x7f] {
                let mut data = vec![a & !1, b];
                data.extend_from_slice(&u64::from(a ^ b).to_le_bytes());
                data.extend_from_slice(pipeline);
                check(&data);
            }
        }
    }
}
