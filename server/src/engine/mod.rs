//! The request engine: one connection's received bytes in, its replies out.
//!
//! ```text
//! received bytes ─▶ Engine::execute ─▶ the connection's adapter (binary.rs, text/, resp/)
//!                                          parses with protocol/, calls the core through Cx,
//!                                          emits with protocol/
//!                  session.rs the connection's state, and what an adapter is given (Cx: the
//!                             core's operations, forwarding, one snapshot gather)
//!                  transaction.rs  a session's MULTI queue, its charge, WATCHed keys, holds
//!                  core.rs    counted store operations on this worker's Shard, statistics
//!                  forward/   other workers: owners, batches, holes in the output, credit
//!                  config.rs  EngineConfig and the limits every layer shares (imports none)
//! ```
//!
//! The engine knows nothing of sockets or packets: the TAP, AF_XDP and kernel-socket paths all
//! hand it a connection's bytes and its [`Session`], and send what it appends to `out`. It
//! executes every complete request, in order, and reports how many input bytes it consumed, so
//! a caller can parse straight out of a receive buffer and keep the unconsumed tail.
//!
//! Layers point down. An adapter (one per protocol) parses a request, calls the core's counted
//! store operations (`core.rs`) and forwarding's narrow interface, both through [`Cx`], and
//! writes the reply; no adapter imports another, and the core and forwarding know no protocol.
//! Each adapter also describes its own requests for the `-vv` log. This
//! module picks the adapter for a connection ([`Protocol`]) and runs the loop they share.
//!
//! Nothing a client sends makes a connection hold more than a bounded amount: execution stops
//! ([`Stop`]) when the output backlog reaches [`OUT_HIGH_WATER_BYTES`] (checked before every
//! request and every key of a multi-key request, which then continues from that key on the
//! next call), when too much waits on other workers (`forward/`), when the connection's turn
//! of [`TURN_REQUESTS`] is used up (so one client cannot delay the others), and a refused body
//! is skipped as it arrives rather than buffered.
//!
//! A memcached connection's protocol is decided by its first byte ([`Protocol::detect`]): 0x80
//! (the binary request magic) is the binary protocol (`binary.rs`), anything else the text
//! protocol, whose lines may also be meta commands (`text/`, with `text/meta/`). A
//! connection accepted on the RESP port (`--resp-port`) speaks Redis's RESP from its first byte
//! (`resp/`; [`Session::speaking`]), on the same store.

mod binary;
mod budget;
pub mod config;
mod core;
mod forward;
mod marks;
mod resp;
mod session;
mod text;
mod transaction;

use std::sync::Arc;

use store::Now;

use self::core::Core;
use self::forward::{Answer, Forwarder, Op};
use self::session::{Cx, Step};
use crate::control::{ConnState, Control};
use crate::stats::{Counters, Group, Kind, RawPath, ServerInfo, Snapshot, WorkerFigures};

pub use self::config::{
    EngineConfig, HOUSEKEEPING_ITEMS, OUT_HIGH_WATER_BYTES, PAGE_BYTES, Secret, TURN_REQUESTS,
    VERSION,
};
pub use forward::{
    Batch, CREDIT_RETURN_BYTES, Delivery, FORWARD_REPLY_CREDIT_BYTES,
    FORWARD_REQUEST_HIGH_WATER_BYTES, MAX_FORWARDS_IN_FLIGHT, MIN_REPLY_CHARGE_BYTES,
    OWNER_HASH_SEED, Replies, Token, owner_hash, owner_of,
};
pub use session::{Outcome, Protocol, Session, Stop};

/// Logs one request and its reply (`-vv`), as memcached's `<fd command` and `>fd reply` lines,
/// each in the words of the connection's adapter.
fn log_request(session: &Session, request: &[u8], reply: &[u8]) {
    let number = session.record.as_ref().map_or(0, |r| r.number);
    let (request, reply) = match session.protocol {
        Some(Protocol::Binary) => (binary::describe(request), binary::describe_reply(reply)),
        Some(Protocol::Resp(_)) => (resp::describe(request), text::first_line(reply)),
        _ => (
            text::first_line(request).unwrap_or_default(),
            text::first_line(reply),
        ),
    };
    log::debug!("<{number} {request}");
    if let Some(reply) = reply {
        log::debug!(">{number} {reply}");
    }
}

/// The read hint while a refused body is skipped: any bytes make progress, and the caller's
/// buffer never grows for a body it will not keep.
const SKIP_READ_HINT_BYTES: usize = 64 * 1024;

/// Per-core request executor: this core's store shard and counters, and its forwarding state.
pub struct Engine {
    core: Core,
    forward: Forwarder,
    /// RESP commands parsed ahead within one [`Engine::execute`] call.
    ahead: resp::Ahead,
    /// The epoch of the cross-worker transaction this worker holds for, and since when it
    /// waits for its next job (`control::holds`).
    held: Option<(u64, std::time::Instant)>,
}

impl Engine {
    /// An engine with an empty shard.
    pub fn new(config: EngineConfig) -> Engine {
        Engine {
            forward: Forwarder::new(config.threads, config.worker),
            core: Core::new(config),
            ahead: resp::Ahead::default(),
            held: None,
        }
    }

    /// Executes every complete request at the start of `input`, appending replies to `out`.
    ///
    /// `now` is the caller's clock reading (a [`Now`], or unix seconds as a `u64`). Execution stops at an
    /// incomplete request, when `out` holds [`OUT_HIGH_WATER_BYTES`] or more, when too much
    /// waits on other workers, when the session's turn is used up, or when the connection must
    /// close; [`Outcome::stop`] says which. A multi-key request may stop part-way: it is then
    /// not consumed, and the next call with the same input continues with its next key.
    pub fn execute(
        &mut self,
        session: &mut Session,
        input: &[u8],
        out: &mut Vec<u8>,
        now: impl Into<Now>,
    ) -> Outcome {
        let now = now.into();
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
        let Engine {
            core,
            forward,
            ahead,
            ..
        } = self;
        match protocol {
            Protocol::Binary => {
                binary::prefetch(&Cx::new(core, forward, session, now), input);
                Engine::run_requests(core, forward, session, input, out, now, binary::step)
            }
            Protocol::Text => {
                Engine::run_requests(core, forward, session, input, out, now, text::step)
            }
            Protocol::Resp(_) => {
                // What was parsed ahead in an earlier call described that call's input.
                ahead.clear();
                Engine::run_requests(core, forward, session, input, out, now, |cx, buf, out| {
                    resp::step(cx, Some(&mut *ahead), buf, out)
                })
            }
        }
    }

    /// The loop every protocol shares: skips the body of a refused request as it arrives,
    /// stops once the connection is closing, when the output backlog reaches
    /// [`OUT_HIGH_WATER_BYTES`], when forwarding must wait, when the turn is used up or when the
    /// input runs out, and counts bytes in and out. `step` handles the one request at the front
    /// of the input.
    fn run_requests(
        core: &mut Core,
        forward: &mut Forwarder,
        session: &mut Session,
        input: &[u8],
        out: &mut Vec<u8>,
        now: Now,
        mut step: impl FnMut(&mut Cx<'_>, &[u8], &mut Vec<u8>) -> Step,
    ) -> Outcome {
        let out_start = out.len();
        let mut pos = 0;
        // Bytes are counted as they first arrive, before the requests in them run; the input
        // starts with what earlier calls left unconsumed (and counted).
        core.count_read(input.len().saturating_sub(session.input_counted));
        session.input_counted = session.input_counted.max(input.len());
        if session.watching {
            // A watcher only receives log lines; what it sends is read and dropped.
            session.input_counted = 0;
            return Outcome {
                consumed: input.len(),
                needed: 0,
                close: session.closing,
                stop: if session.closing {
                    Stop::Closing
                } else {
                    Stop::Input
                },
            };
        }
        core.set_cfd(session.record.as_ref().map_or(0, |r| r.number));
        let mut requests = 0;
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
            let before = (core.samples_pending(), session.holes.pending_len());
            let reply_start = out.len();
            let mut cx = Cx::new(core, forward, session, now);
            match step(&mut cx, &input[pos..], out) {
                Step::Done(len) => {
                    if log::log_enabled!(log::Level::Debug) && len > 0 {
                        log_request(session, &input[pos..pos + len], &out[reply_start..]);
                    }
                    pos += len;
                    requests += 1;
                    session.spend_turn();
                    // A request that made no store operation and went to no other worker
                    // (version, stats, an error) is timed as `other`.
                    let after = (core.samples_pending(), session.holes.pending_len());
                    if after == before && len > 0 {
                        core.record_pending_other();
                    }
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
        session.input_counted -= outcome.consumed;
        core.count_execution(out.len() - out_start, requests, outcome.stop == Stop::Turn);
        Engine::record_latency(core, session, now);
        if outcome.stop != Stop::Input && log::log_enabled!(log::Level::Trace) {
            let number = session.record.as_ref().map_or(0, |r| r.number);
            log::trace!(
                "<{number} stopped ({:?}) after {} bytes, {} bytes out, {} forwarded",
                outcome.stop,
                outcome.consumed,
                out.len() - out_start,
                session.holes.pending_len()
            );
        }
        outcome
    }

    /// Records the latency of every request this engine call executed (one clock read for
    /// all of them: their replies are in the output now), and notes the connection's last
    /// command for `stats conns`.
    fn record_latency(core: &mut Core, session: &Session, now: Now) {
        if core.samples_pending() == 0 {
            return;
        }
        let elapsed = core.control().now_ns().saturating_sub(session.arrived_ns);
        core.record_samples(elapsed);
        if let Some(record) = &session.record {
            let state = if session.skip_bytes > 0 {
                ConnState::Nread
            } else {
                ConnState::ParseCmd
            };
            record.touch(now, state);
        }
    }

    /// Executes one entry another worker forwarded here, writing its reply bytes to `out`.
    fn run_forwarded(
        core: &mut Core,
        held: &mut Option<(u64, std::time::Instant)>,
        op: Op,
        request: &[u8],
        out: &mut Vec<u8>,
        now: Now,
    ) -> Answer {
        match op {
            Op::Execute(form) => {
                let Some((protocol, part, in_database)) = Protocol::of_form(form) else {
                    return Answer::Bytes { close: false };
                };
                let mut session = Session::speaking(protocol);
                let request = match request.split_first_chunk::<4>() {
                    Some((db, rest)) if in_database => {
                        session.db = u8::try_from(u32::from_le_bytes(*db)).unwrap_or(u8::MAX);
                        rest
                    }
                    _ => request,
                };
                core.set_cfd(0);
                let mut cx = Cx::local(core, &mut session, now);
                match protocol {
                    Protocol::Binary => binary::run_forwarded(&mut cx, part, request, out),
                    Protocol::Text => text::run_forwarded(&mut cx, part, request, out),
                    Protocol::Resp(_) => resp::run_forwarded(&mut cx, part, request, out),
                }
                // The request's time is recorded where it arrived, once its reply is back.
                core.take_samples();
                core.set_cfd(0);
                Answer::Bytes {
                    close: session.closing,
                }
            }
            Op::Snapshot(group) => Answer::Snapshot(Box::new(core.snapshot(group, now))),
            Op::Flush { delay, now } => {
                core.flush_for_another(delay, now);
                Answer::Bytes { close: false }
            }
            Op::Reset => {
                core.reset_stats();
                Answer::Bytes { close: false }
            }
            Op::Clear { now } => {
                core.clear_for_another(now);
                Answer::Bytes { close: false }
            }
            Op::Hold(epoch) => {
                // Held from here on: the (empty) answer leaves with this batch's, and the loop
                // then runs nothing but the coordinator's jobs ([`Engine::hold_step`]).
                let worker = core.config().worker;
                if core.control().holds.enter(worker, epoch) {
                    *held = Some((epoch, std::time::Instant::now()));
                }
                Answer::Bytes { close: false }
            }
            Op::Credit(_) | Op::Release => Answer::Bytes { close: false },
        }
    }

    /// Executes the entries worker `from` forwarded here (keys this shard owns), each
    /// connection's in order while its lane has credit, parking the rest; applies credit and
    /// releases. Replies accumulate for [`Engine::take_replies`]. Byte counters stay with the
    /// worker that holds the connection.
    pub fn serve_forwarded(&mut self, from: usize, batch: Batch, now: impl Into<Now>) {
        let now = now.into();
        let core = &mut self.core;
        let held = &mut self.held;
        self.forward.serve(from, batch, |op, request, out| {
            Engine::run_forwarded(core, held, op, request, out, now)
        });
    }

    /// True while this worker holds for another's cross-worker transaction: its loop must
    /// call [`Engine::hold_step`] until it is released, and run nothing else.
    pub fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// One step of a hold: runs the coordinator's next job if there is one. Returns whether
    /// the worker still holds.
    pub fn hold_step(&mut self) -> bool {
        let Some((epoch, since)) = self.held else {
            return false;
        };
        let control = Arc::clone(self.core.control());
        let worker = self.core.config().worker;
        match control.holds.next(worker, epoch, since) {
            crate::control::holds::Next::Job(job) => {
                let answer = job(self);
                control.holds.done(worker, epoch, answer);
                self.held = Some((epoch, std::time::Instant::now()));
                true
            }
            crate::control::holds::Next::Wait => true,
            crate::control::holds::Next::Released => {
                self.held = None;
                false
            }
        }
    }

    /// Puts a reply from another worker in its place in the connection's output `out` (a
    /// request that went to every worker, or to several, completes with its last reply). A
    /// reply whose request is not pending here is ignored.
    pub fn deliver(&mut self, session: &mut Session, out: &mut Vec<u8>, delivery: Delivery<'_>) {
        let delivered = session.holes.deliver(out, delivery);
        self.core.count_written(delivered.spliced);
        if let Some(stamp) = delivered.stamp
            && stamp.resets == self.core.resets()
            && stamp.count > 0
        {
            let elapsed = self
                .core
                .control()
                .now_ns()
                .saturating_sub(stamp.arrived_ns);
            self.core.record_latency(
                Kind::from_index(stamp.kind),
                elapsed,
                u64::from(stamp.count),
            );
        }
        if delivered.close {
            session.close();
        }
    }

    /// Hands back the credit of the connection's replies that were sent (see `forward/`).
    pub fn return_credit(&mut self, session: &mut Session) {
        self.forward.return_credit(&mut session.holes);
    }

    /// Offers every non-empty outgoing batch to `send(destination worker, batch)`, after adding
    /// a release for every connection that went away. A batch `send` gives back (its queue is
    /// full) stays here, and connections stop forwarding to that worker until it is taken.
    /// Returns whether any batch was taken.
    pub fn take_forwards(&mut self, send: impl FnMut(usize, Batch) -> Result<(), Batch>) -> bool {
        self.forward.take_forwards(send)
    }

    /// True when forwarded requests or control entries wait to be handed out by
    /// [`Engine::take_forwards`].
    pub fn has_forwards(&self) -> bool {
        self.forward.has_forwards()
    }

    /// Offers the replies produced for each worker to `send(worker, replies)`; replies `send`
    /// gives back (a full queue) stay here, and [`Engine::replies_held`] says so. Returns
    /// whether any were taken.
    pub fn take_replies(
        &mut self,
        send: impl FnMut(usize, Replies) -> Result<(), Replies>,
    ) -> bool {
        self.forward.take_replies(send)
    }

    /// True when replies for other workers wait here (produced, or refused by a full queue).
    pub fn has_replies(&self) -> bool {
        self.forward.has_replies()
    }

    /// True while a full queue refused a batch or replies that wait here to be offered again
    /// (the worker should not sleep meanwhile: nothing would wake it when the queue drains).
    pub fn holds_refused(&self) -> bool {
        self.forward.holds_refused()
    }

    /// True while replies a full queue refused wait here: take no new requests meanwhile.
    pub fn replies_held(&self) -> bool {
        self.forward.replies_held()
    }

    /// Takes back a [`Replies`] message once its replies are delivered, for reuse.
    pub fn recycle(&mut self, replies: Replies) {
        self.forward.recycle(replies);
    }

    /// Lanes this engine keeps for other workers' connections, and entries parked in them.
    pub fn lane_figures(&self) -> (usize, usize) {
        self.forward.lane_figures()
    }

    /// This core's store shard.
    pub fn shard(&self) -> &store::Shard {
        self.core.shard()
    }

    /// The background crawler: looks at up to `max_items` items from where it stopped and
    /// takes back the dead ones (off after `lru_crawler disable`); for the worker's idle
    /// moments. Returns how many it took back.
    pub fn sweep_expired(&mut self, max_items: usize, now: impl Into<Now>) -> usize {
        self.core.sweep_expired(max_items, now.into())
    }

    /// Background work between turns, a bounded step of each kind that is due: a changed
    /// memory budget (`cache_memlimit`), a page `slabs reassign` frees, a crawl `lru_crawler
    /// crawl` asked for. The worker loop calls it every iteration; `ns` is the loop's
    /// monotonic clock (`control::monotonic_ns_at`). Returns whether it did any work (the
    /// loop should not sleep right after).
    pub fn housekeep(&mut self, now: impl Into<Now>, ns: u64) -> bool {
        self.core.housekeep(now.into(), ns)
    }

    /// Nanoseconds until [`Engine::housekeep`] has work due again (0: now), or `None` when it
    /// has none: a worker about to sleep sleeps no longer (a crawl paused by `lru_crawler
    /// sleep` goes on in time on an idle worker).
    pub fn background_wait_ns(&self, ns: u64) -> Option<u64> {
        self.core.background_wait_ns(ns)
    }

    /// The command counters of this engine.
    pub fn counters(&self) -> &Counters {
        self.core.counters()
    }

    /// Connection figures, kept current by the packet path for `stats`.
    pub fn info_mut(&mut self) -> &mut ServerInfo {
        self.core.info_mut()
    }

    /// The worker loop's figures (busy and idle time, polls, packet counters), kept current
    /// by the loop for `stats`.
    pub fn figures_mut(&mut self) -> &mut WorkerFigures {
        self.core.figures_mut()
    }

    /// The packet path's counters, copied by the loop for `stats`.
    pub fn set_raw_path(&mut self, raw: RawPath) {
        self.core.set_raw_path(raw);
    }

    /// What every worker shares.
    pub fn control(&self) -> &Arc<Control> {
        self.core.control()
    }

    /// This worker's general figures (summed with other workers' where there are several),
    /// as of `now`.
    pub fn snapshot(&self) -> Snapshot {
        self.core.snapshot(Group::General, Now::from(0u64))
    }

    /// This worker's figures for a `stats` reply of `group`, as of `now`.
    pub fn snapshot_of(&self, group: Group, now: impl Into<Now>) -> Snapshot {
        self.core.snapshot(group, now.into())
    }

    /// The configuration this engine was built with.
    pub fn config(&self) -> &EngineConfig {
        self.core.config()
    }
}

#[cfg(test)]
pub(crate) mod tests;
