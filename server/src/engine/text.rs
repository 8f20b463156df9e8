//! Executing text-protocol requests against the shard; meta lines go on to `meta.rs`.
//!
//! Replies are memcached 1.6's, word for word; `noreply` silences every reply of its command,
//! errors included, as memcached's `out_string` does. A storage command whose value can never
//! fit is answered `SERVER_ERROR object too large for cache` from its line alone and its data
//! block is skipped as it arrives, never buffered.

use protocol::text::{
    ArithmeticCommand, Close, DataError, ErrorReply, Get, ParseError, Request, Response,
    StatsGroup, Store, StoreCommand, data_block,
};
use store::{Delta, StoreError, StoreMode};

use super::forward::{Gather, Op, StatsRender};
use super::{Engine, Protocol, Session, Step};
use crate::stats::{self, Snapshot};

/// Executes (or refuses) the request line at the front of `buf`, with its data block.
pub(super) fn step(
    engine: &mut Engine,
    session: &mut Session,
    buf: &[u8],
    out: &mut Vec<u8>,
    now: u64,
) -> Step {
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
        engine.forward(session, owner, Protocol::Text, &buf[..line_len], out);
        return Step::Done(line_len);
    }
    match request {
        Request::Get(get) => execute_get(engine, session, get, out, now),
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
            let response = match engine.shard.incr_decr(key, delta, direction, None, 0, now) {
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

/// get/gets/gat/gats: a `VALUE` block per hit, then `END`. Keys other workers own are
/// forwarded one by one; their blocks take their place in the reply.
fn execute_get(
    engine: &mut Engine,
    session: &mut Session,
    get: Get<'_>,
    out: &mut Vec<u8>,
    now: u64,
) {
    let with_cas = get.command.returns_cas();
    for key in get.keys {
        if let Some(owner) = engine.remote_owner(key) {
            engine.forward_text_get(session, owner, (get.command, get.exptime), key, out);
            continue;
        }
        let item = if get.command.touches() {
            engine.touch(key, get.exptime, now)
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
        engine.forward(session, owner, Protocol::Text, &buf[..consumed], out);
        return Step::Done(consumed);
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
    let response = match engine.store(mode, store.key, data, store.flags, store.exptime, cas, now) {
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
