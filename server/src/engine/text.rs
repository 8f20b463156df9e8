//! Executing text-protocol requests against the shard; meta lines go on to `meta.rs`.
//!
//! Replies are memcached 1.6's, word for word; `noreply` silences every reply of its command,
//! errors included, as memcached's `out_string` does. A storage command whose value can never
//! fit is answered `SERVER_ERROR object too large for cache` from its line alone and its data
//! block is skipped as it arrives, never buffered.
//!
//! A multi-key retrieval checks the output backlog, the forwarding limits and the turn before
//! every key, and stops part-way when one says so: the session keeps where the line's next key
//! starts ([`GetResume`]), the line stays unconsumed at the front of the input (so it may sit in
//! a socket's receive buffer, move, or arrive in pieces meanwhile), and the next call continues
//! with that key; the line is consumed with its last key and `END`. Its output is byte for byte
//! what one uninterrupted execution writes.

use protocol::text::{
    ArithmeticCommand, Close, DataError, ErrorReply, Keys, Line, ParseError, Request, Response,
    StatsGroup, Store, StoreCommand, data_block,
};
use store::{Arith, Delta, StoreError, StoreMode, Write};

use super::forward::{Gather, Op, StatsRender};
use super::{Engine, GetResume, OUT_HIGH_WATER_BYTES, Protocol, Session, Step, Stop};
use crate::stats::{self, Snapshot};

/// Executes (or refuses) the request line at the front of `buf`, with its data block.
pub(super) fn step(
    engine: &mut Engine,
    session: &mut Session,
    buf: &[u8],
    out: &mut Vec<u8>,
    now: u64,
) -> Step {
    if let Some(resume) = session.get_resume {
        return resume_get(engine, session, resume, buf, out, now);
    }
    match Request::parse(buf, session.line_scanned) {
        Ok((request, line_len)) => {
            session.line_scanned = 0;
            dispatch(engine, session, request, buf, line_len, out, now)
        }
        Err(ParseError::Incomplete { needed, scanned }) => {
            session.line_scanned = scanned;
            Step::Wait(needed)
        }
        Err(ParseError::Invalid {
            reply,
            noreply,
            line_len,
            swallow,
        }) => {
            session.line_scanned = 0;
            engine.counters.protocol_errors += 1;
            if !noreply {
                reply.emit_into(out);
            }
            session.skip_bytes = swallow as u64;
            Step::Done(line_len)
        }
        Err(ParseError::Close(close)) => {
            engine.counters.protocol_errors += 1;
            if close == Close::LineTooLong {
                ErrorReply::LineTooLong.emit_into(out);
            }
            session.closing = true;
            Step::Done(0)
        }
    }
}

/// Executes one parsed request line; `buf` starts with the line (`line_len` bytes), followed by
/// whatever has arrived after it.
fn dispatch(
    engine: &mut Engine,
    session: &mut Session,
    request: Request<'_>,
    buf: &[u8],
    line_len: usize,
    out: &mut Vec<u8>,
    now: u64,
) -> Step {
    let reply = |out: &mut Vec<u8>, noreply: bool, response: Response<'_>| {
        if !noreply {
            response.emit_into(out);
        }
    };
    if let Some(key) = single_key(&request)
        && let Some(owner) = engine.remote_owner(key)
    {
        return match engine.forward(session, owner, Protocol::Text, &buf[..line_len], out) {
            Ok(()) => Step::Done(line_len),
            Err(stop) => Step::Stop(stop),
        };
    }
    if matches!(request, Request::FlushAll { .. } | Request::Stats(_)) && !engine.may_fan_out() {
        return Step::Stop(Stop::Blocked);
    }
    match request {
        Request::Get(get) => {
            // The line's text (without its newline), to say where in it a key starts.
            let text_len = match Line::parse(&buf[..line_len], line_len - 1) {
                Ok(line) => line.text.len(),
                Err(_) => line_len,
            };
            let resume = GetResume {
                command: get.command,
                exptime: get.exptime,
                line_len,
                next_key_at: text_len - get.keys.remainder().len(),
            };
            return execute_get(engine, session, resume, get.keys, text_len, out, now);
        }
        Request::Store(store) => {
            return execute_store(engine, session, store, buf, line_len, out, now);
        }
        Request::Delete { key, noreply } => {
            let response = match engine.shard.delete(key, 0, now) {
                Ok(()) => Response::Deleted,
                Err(error) => store_error(error),
            };
            reply(out, noreply, response);
        }
        Request::Arithmetic {
            command,
            key,
            delta,
            noreply,
        } => {
            let direction = match command {
                ArithmeticCommand::Incr => Delta::Incr,
                ArithmeticCommand::Decr => Delta::Decr,
            };
            let response = match engine
                .shard
                .incr_decr(Arith::new(key, direction, delta), now)
            {
                Ok((value, _cas)) => Response::Number(value),
                Err(StoreError::NotFound) => Response::NotFound,
                Err(StoreError::NonNumeric) => Response::Error(ErrorReply::NonNumeric),
                Err(StoreError::KeyTooLong) => Response::Error(ErrorReply::BadFormat),
                Err(_) => Response::Error(ErrorReply::NoMemory),
            };
            reply(out, noreply, response);
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            let response = match engine.touch(key, exptime, now) {
                Some(_) => Response::Touched,
                None => Response::NotFound,
            };
            reply(out, noreply, response);
        }
        Request::FlushAll { delay, noreply } => {
            engine.flush_all(delay, now);
            engine.fan_out(session, Op::Flush { delay, now }, None, out);
            reply(out, noreply, Response::Ok);
        }
        Request::Version => Response::Version(engine.config.version).emit_into(out),
        Request::Verbosity { noreply, .. } => reply(out, noreply, Response::Ok),
        Request::Stats(group) => write_stats(engine, session, group, out, now),
        Request::Quit => session.closing = true,
        Request::Meta(request) => {
            return super::meta::execute(engine, session, request, buf, line_len, out, now);
        }
    }
    Step::Done(line_len)
}

/// The key of a one-line request that acts on one key (delete, incr/decr, touch); storage
/// commands are routed once their data block is here, retrievals key by key, meta commands
/// once their key is decoded.
fn single_key<'a>(request: &Request<'a>) -> Option<&'a [u8]> {
    match *request {
        Request::Delete { key, .. }
        | Request::Arithmetic { key, .. }
        | Request::Touch { key, .. } => Some(key),
        _ => None,
    }
}

/// Continues a multi-key retrieval stopped part-way, whose line is at the front of `buf`.
fn resume_get(
    engine: &mut Engine,
    session: &mut Session,
    resume: GetResume,
    buf: &[u8],
    out: &mut Vec<u8>,
    now: u64,
) -> Step {
    if buf.len() < resume.line_len {
        // The line is there but not contiguous yet (a receive ring wrapped): read it whole.
        return Step::Wait(resume.line_len - buf.len());
    }
    // The newline is the line's last byte, so this finds it at once.
    let Ok(line) = Line::parse(&buf[..resume.line_len], resume.line_len - 1) else {
        // Not the line that stopped (cannot happen: input is only ever consumed from the
        // front); start over with whatever is there.
        session.get_resume = None;
        return Step::Wait(0);
    };
    let rest = line.text.get(resume.next_key_at..).unwrap_or_default();
    let keys = Keys::new_unchecked(rest);
    execute_get(engine, session, resume, keys, line.text.len(), out, now)
}

/// get/gets/gat/gats: a `VALUE` block per hit, then `END`. Keys other workers own are
/// forwarded one by one; their blocks take their place in the reply. `keys` are the keys from
/// `resume.next_key_at` on, in a line whose text is `text_len` bytes. Before each key but the first
/// of this call (the caller checked before calling) the output backlog, the forwarding limits
/// and the turn are checked, and the retrieval stops there (its place kept in `resume`) when
/// one says so; so every call makes progress unless a queue to another worker is full.
fn execute_get(
    engine: &mut Engine,
    session: &mut Session,
    mut resume: GetResume,
    mut keys: Keys<'_>,
    text_len: usize,
    out: &mut Vec<u8>,
    now: u64,
) -> Step {
    let command = resume.command;
    let with_cas = command.returns_cas();
    let mut first = true;
    loop {
        let at = text_len - keys.remainder().len();
        let stop = if first {
            None
        } else if out.len() >= OUT_HIGH_WATER_BYTES {
            Some(Stop::Output)
        } else if session.holes.full() {
            Some(Stop::Forwards)
        } else if session.turn_left == 0 {
            Some(Stop::Turn)
        } else {
            None
        };
        let key = match (stop, keys.next()) {
            (_, None) => break,
            (Some(stop), Some(_)) => return pause_get(session, &mut resume, at, stop),
            (None, Some(key)) => key,
        };
        first = false;
        if let Some(owner) = engine.remote_owner(key) {
            if let Err(stop) =
                engine.forward_text_get(session, owner, (command, resume.exptime), key, out)
            {
                return pause_get(session, &mut resume, at, stop);
            }
            session.spend_turn();
            continue;
        }
        session.spend_turn();
        let item = if command.touches() {
            engine.touch(key, resume.exptime, now)
        } else {
            engine.get(key, now)
        };
        if let Some(item) = item {
            Response::Value {
                key,
                flags: item.flags,
                value: item.value,
                cas: with_cas.then_some(item.cas),
            }
            .emit_into(out);
        }
    }
    Response::End.emit_into(out);
    session.get_resume = None;
    session.line_scanned = 0;
    Step::Done(resume.line_len)
}

/// Stops a retrieval before the key at `at` in its line's text; nothing of the line is
/// consumed.
fn pause_get(session: &mut Session, resume: &mut GetResume, at: usize, stop: Stop) -> Step {
    resume.next_key_at = at;
    session.get_resume = Some(*resume);
    Step::Stop(stop)
}

/// set/add/replace/append/prepend/cas: waits for the data block, unless the value can never
/// fit, in which case it is refused now and skipped as it arrives.
fn execute_store(
    engine: &mut Engine,
    session: &mut Session,
    store: Store<'_>,
    buf: &[u8],
    line_len: usize,
    out: &mut Vec<u8>,
    now: u64,
) -> Step {
    if !engine.fits(store.key.len(), store.bytes) {
        engine.refuse_too_large();
        if !store.noreply {
            ErrorReply::TooLarge.emit_into(out);
        }
        session.skip_bytes = store.bytes as u64 + 2;
        return Step::Done(line_len);
    }
    let data = match data_block(&buf[line_len..], store.bytes) {
        Ok(data) => data,
        Err(DataError::Incomplete { needed }) => return Step::Wait(needed),
        Err(DataError::BadChunk) => {
            engine.counters.protocol_errors += 1;
            if !store.noreply {
                ErrorReply::BadDataChunk.emit_into(out);
            }
            return Step::Done(line_len + store.bytes + 2);
        }
    };
    let consumed = line_len + store.bytes + 2;
    if let Some(owner) = engine.remote_owner(store.key) {
        return match engine.forward(session, owner, Protocol::Text, &buf[..consumed], out) {
            Ok(()) => Step::Done(consumed),
            Err(stop) => Step::Stop(stop),
        };
    }
    let (mode, cas) = match store.command {
        StoreCommand::Set => (StoreMode::Set, 0),
        StoreCommand::Add => (StoreMode::Add, 0),
        StoreCommand::Replace => (StoreMode::Replace, 0),
        StoreCommand::Append => (StoreMode::Append, 0),
        StoreCommand::Prepend => (StoreMode::Prepend, 0),
        // The store reads CAS 0 as "no compare"; to memcached it is a value no item matches.
        StoreCommand::Cas if store.cas == 0 => {
            (StoreMode::Set, cas_matching_nothing(engine, store.key, now))
        }
        StoreCommand::Cas => (StoreMode::Set, store.cas),
    };
    let extends = matches!(mode, StoreMode::Append | StoreMode::Prepend);
    let response = match engine.store(
        Write {
            flags: store.flags,
            exptime: store.exptime,
            cas,
            ..Write::new(mode, store.key, data)
        },
        now,
    ) {
        Ok(_) => Response::Stored,
        // memcached answers NOT_STORED when an append or prepend would outgrow the item limit.
        Err(StoreError::TooLarge) if extends => Response::NotStored,
        Err(error) => store_error(error),
    };
    if !store.noreply {
        response.emit_into(out);
    }
    Step::Done(consumed)
}

/// A compare value no item under `key` matches, for a `cas` (or meta `C`) of 0: memcached
/// reads CAS 0 as "none" and never matches it, where the store reads it as "no compare". So
/// the answers are memcached's (NOT_FOUND when missing, EXISTS when held), any non-zero value
/// but the held item's CAS is taken; clients may give items any CAS (meta `E`), so no fixed
/// value would do.
pub(super) fn cas_matching_nothing(engine: &mut Engine, key: &[u8], now: u64) -> u64 {
    match engine.shard.peek(key, now) {
        Some(item) if item.cas == 1 => 2,
        _ => 1,
    }
}

/// The text reply for a store error.
fn store_error(error: StoreError) -> Response<'static> {
    match error {
        StoreError::NotFound => Response::NotFound,
        StoreError::Exists => Response::Exists,
        StoreError::NotStored => Response::NotStored,
        StoreError::TooLarge => Response::Error(ErrorReply::TooLarge),
        StoreError::OutOfMemory => Response::Error(ErrorReply::OutOfMemory),
        StoreError::NonNumeric => Response::Error(ErrorReply::NonNumeric),
        StoreError::KeyTooLong => Response::Error(ErrorReply::BadFormat),
    }
}

/// `STAT <name> <value>` lines, then `END`; with several workers, once all have sent theirs.
fn write_stats(
    engine: &mut Engine,
    session: &mut Session,
    group: StatsGroup,
    out: &mut Vec<u8>,
    now: u64,
) {
    let render = StatsRender::Text { group, now };
    let snapshot = engine.snapshot();
    if engine.config.threads > 1 {
        let gather = Box::new(Gather { snapshot, render });
        engine.fan_out(session, Op::Snapshot, Some(gather), out);
    } else {
        render_stats(out, group, now, &snapshot);
    }
}

/// The text `stats` reply for `snapshot`.
pub(super) fn render_stats(out: &mut Vec<u8>, group: StatsGroup, now: u64, snapshot: &Snapshot) {
    let mut value = String::new();
    let mut line = |name: &str, v: &dyn std::fmt::Display| {
        use std::fmt::Write as _;
        value.clear();
        let _ = write!(value, "{v}");
        Response::Stat {
            name,
            value: &value,
        }
        .emit_into(out);
    };
    match group {
        StatsGroup::General => stats::general(snapshot, now, &mut line),
        StatsGroup::Settings => stats::settings(snapshot, &mut line),
        StatsGroup::Items => stats::items(snapshot, &mut line),
        StatsGroup::Slabs => stats::slabs(snapshot, &mut line),
    }
    Response::End.emit_into(out);
}

#[cfg(test)]
mod tests;
