//! The text protocol's adapter: request lines parsed with `protocol::text`, executed through
//! the core, replies emitted with `protocol::text`; meta lines go on to `text/meta/`, part of
//! this adapter (they share the line format and parser).
//!
//! Replies are memcached 1.6's, word for word; `noreply` silences every reply of its command,
//! errors included, as memcached's `out_string` does. A storage command whose value can never
//! fit is answered `SERVER_ERROR object too large for cache` from its line alone and its data
//! block is skipped as it arrives, never buffered.
//!
//! A multi-key retrieval checks the output backlog, the forwarding limits and the turn before
//! every key, and stops part-way when one says so: the session keeps where the line's next key
//! starts ([`Resume`]), the line stays unconsumed at the front of the input (so it may sit in
//! a socket's receive buffer, move, or arrive in pieces meanwhile), and the next call continues
//! with that key; the line is consumed with its last key and `END`. Its output is byte for byte
//! what one uninterrupted execution writes.

use protocol::text::{
    ArithmeticCommand, Close, DataError, ErrorReply, GetCommand, Keys, Line, ParseError, Request,
    Response, Store, StoreCommand, data_block,
};
use store::{Arith, Delta, StoreError, StoreMode, Ttl, Write};

use super::session::{Cx, FanOut, Resume, Step, Stop};
use crate::stats::Kind;

mod admin;
mod meta;

/// Forms a text request is forwarded in (see [`run_forwarded`]).
mod part {
    /// The whole request: its line and data block.
    pub const WHOLE: u8 = 0;
    /// One key of a `get`/`gets`/`gat`/`gats` line, as a line of its own: the owner leaves off
    /// the `END`, which the home writes after the line's last key.
    pub const GET_KEY: u8 = 1;
    /// A slice of buckets of the owner's table for `lru_crawler metadump` (two little-endian
    /// u64s: first and end bucket); the owner writes the slice's lines.
    pub const METADUMP_SLICE: u8 = 2;
}

/// Executes (or refuses) the request line at the front of `buf`, with its data block.
pub(super) fn step(cx: &mut Cx<'_>, buf: &[u8], out: &mut Vec<u8>) -> Step {
    if let Some(resume) = cx.session.resume {
        if resume.code == admin::METADUMP {
            return admin::resume_metadump(cx, resume, buf, out);
        }
        return resume_get(cx, resume, buf, out);
    }
    match Request::parse(buf, cx.session.scan.bytes) {
        Ok((request, line_len)) => {
            cx.session.scan.bytes = 0;
            dispatch(cx, request, buf, line_len, out)
        }
        Err(ParseError::Incomplete { needed, scanned }) => {
            cx.session.scan.bytes = scanned;
            Step::Wait(needed)
        }
        Err(ParseError::Invalid {
            reply,
            noreply,
            line_len,
            swallow,
        }) => {
            cx.session.scan.bytes = 0;
            cx.protocol_error();
            if !noreply {
                reply.emit_into(out);
            }
            cx.session.skip(swallow as u64);
            Step::Done(line_len)
        }
        Err(ParseError::Close(close)) => {
            cx.protocol_error();
            if close == Close::LineTooLong {
                ErrorReply::LineTooLong.emit_into(out);
            }
            cx.session.close();
            Step::Done(0)
        }
    }
}

/// The first line of `bytes` as the log shows it: at most 200 bytes, escaped (`None`: no
/// bytes).
pub(super) fn first_line(bytes: &[u8]) -> Option<String> {
    if bytes.is_empty() {
        return None;
    }
    let end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(bytes.len())
        .min(200);
    let line = &bytes[..end];
    Some(
        line.strip_suffix(b"\r")
            .unwrap_or(line)
            .escape_ascii()
            .to_string(),
    )
}

/// Executes a request another worker forwarded here (complete: the sender parsed it); one key
/// of a retrieval is answered without its `END`.
pub(super) fn run_forwarded(cx: &mut Cx<'_>, part: u8, request: &[u8], out: &mut Vec<u8>) {
    if part == part::METADUMP_SLICE {
        admin::run_metadump_slice(cx, request, out);
        return;
    }
    let start = out.len();
    let _ = step(cx, request, out);
    if part == part::GET_KEY && out[start..].ends_with(b"END\r\n") {
        out.truncate(out.len() - 5);
    }
}

/// Executes one parsed request line; `buf` starts with the line (`line_len` bytes), followed by
/// whatever has arrived after it.
fn dispatch(
    cx: &mut Cx<'_>,
    request: Request<'_>,
    buf: &[u8],
    line_len: usize,
    out: &mut Vec<u8>,
) -> Step {
    let now = cx.now;
    let reply = |out: &mut Vec<u8>, noreply: bool, response: Response<'_>| {
        if !noreply {
            response.emit_into(out);
        }
    };
    cx.classify(kind_of(&request));
    if let Some(key) = single_key(&request)
        && let Some(owner) = cx.owner_elsewhere(key)
    {
        return match cx.forward(owner, part::WHOLE, &buf[..line_len], out) {
            Ok(()) => Step::Done(line_len),
            Err(stop) => Step::Stop(stop),
        };
    }
    if matches!(request, Request::FlushAll { .. } | Request::Stats(_)) && !cx.may_fan_out() {
        return Step::Stop(Stop::Blocked);
    }
    match request {
        Request::Get(get) => {
            // The line's text (without its newline), to say where in it a key starts.
            let text_len = match Line::parse(&buf[..line_len], line_len - 1) {
                Ok(line) => line.text.len(),
                Err(_) => line_len,
            };
            let resume = Resume {
                len: line_len,
                at: text_len - get.keys.remainder().len(),
                code: get_code(get.command),
                arg: get.exptime,
                index: 0,
                gather: None,
            };
            return execute_get(cx, resume, get.keys, text_len, out);
        }
        Request::Store(store) => {
            return execute_store(cx, store, buf, line_len, out);
        }
        Request::Delete { key, noreply } => {
            let response = match cx.delete(key, 0, now) {
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
            let response = match cx.arith(Arith::new(key, direction, delta), now) {
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
            let response = match cx.touch(key, Ttl::Exptime(exptime), now) {
                Some(_) => Response::Touched,
                None => Response::NotFound,
            };
            reply(out, noreply, response);
        }
        Request::FlushAll { delay, noreply } => {
            cx.flush_all(delay, now);
            cx.fan_out(FanOut::Flush { delay }, None, None, out);
            reply(out, noreply, Response::Ok);
        }
        Request::Version => Response::Version(cx.version()).emit_into(out),
        Request::Verbosity { level, noreply } => admin::verbosity(cx, level, noreply, out),
        Request::Stats(group) => admin::stats(cx, group, out),
        Request::Slabs(command) => admin::slabs(cx, command, out),
        Request::Metadump(classes) => return admin::metadump(cx, classes, line_len, out),
        Request::LruCrawler(command) => admin::lru_crawler(cx, command, out),
        Request::CacheMemlimit { megabytes, noreply } => {
            admin::cache_memlimit(cx, megabytes, noreply, out);
        }
        Request::Watch(events) => admin::watch(cx, events, out),
        Request::Shutdown(mode) => admin::shutdown(cx, mode, out),
        Request::Quit => cx.session.close(),
        Request::Meta(request) => {
            return meta::execute(cx, request, buf, line_len, out);
        }
    }
    Step::Done(line_len)
}

/// The latency instrument's kind of a request line (for one forwarded to another worker).
fn kind_of(request: &Request<'_>) -> Kind {
    match request {
        Request::Get(get) if get.command.touches() => Kind::Touch,
        Request::Get(_) => Kind::Get,
        Request::Store(_) => Kind::Set,
        Request::Delete { .. } => Kind::Delete,
        Request::Arithmetic { .. } => Kind::Arith,
        Request::Touch { .. } => Kind::Touch,
        Request::FlushAll { .. } => Kind::Flush,
        Request::Meta(meta) => match meta.command {
            protocol::meta::Command::Get => Kind::Get,
            protocol::meta::Command::Set => Kind::Set,
            protocol::meta::Command::Delete => Kind::Delete,
            protocol::meta::Command::Arithmetic => Kind::Arith,
            _ => Kind::Other,
        },
        _ => Kind::Other,
    }
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
fn resume_get(cx: &mut Cx<'_>, resume: Resume, buf: &[u8], out: &mut Vec<u8>) -> Step {
    if buf.len() < resume.len {
        // The line is there but not contiguous yet (a receive ring wrapped): read it whole.
        return Step::Wait(resume.len - buf.len());
    }
    // The newline is the line's last byte, so this finds it at once.
    let Ok(line) = Line::parse(&buf[..resume.len], resume.len - 1) else {
        // Not the line that stopped (cannot happen: input is only ever consumed from the
        // front); start over with whatever is there.
        cx.session.resume = None;
        return Step::Wait(0);
    };
    let rest = line.text.get(resume.at..).unwrap_or_default();
    let keys = Keys::new_unchecked(rest);
    execute_get(cx, resume, keys, line.text.len(), out)
}

/// The code a stopped retrieval keeps for its command.
fn get_code(command: GetCommand) -> u8 {
    match command {
        GetCommand::Get => 0,
        GetCommand::Gets => 1,
        GetCommand::Gat => 2,
        GetCommand::Gats => 3,
    }
}

/// The command of a stopped retrieval's code.
fn get_command(code: u8) -> GetCommand {
    match code {
        1 => GetCommand::Gets,
        2 => GetCommand::Gat,
        3 => GetCommand::Gats,
        _ => GetCommand::Get,
    }
}

/// get/gets/gat/gats: a `VALUE` block per hit, then `END`. Keys other workers own are
/// forwarded one by one; their blocks take their place in the reply. `keys` are the keys from
/// `resume.at` on, in a line whose text is `text_len` bytes; `resume.arg` is the exptime of
/// `gat`/`gats`. Before each key but the first of this call (the caller checked before
/// calling) the output backlog, the forwarding limits and the turn are checked, and the
/// retrieval stops there (its place kept in `resume`) when one says so; so every call makes
/// progress unless a queue to another worker is full.
fn execute_get(
    cx: &mut Cx<'_>,
    mut resume: Resume,
    mut keys: Keys<'_>,
    text_len: usize,
    out: &mut Vec<u8>,
) -> Step {
    let command = get_command(resume.code);
    let exptime = resume.arg;
    let with_cas = command.returns_cas();
    let mut first = true;
    loop {
        let at = text_len - keys.remainder().len();
        let stop = if first { None } else { cx.pause(out) };
        let key = match (stop, keys.next()) {
            (_, None) => break,
            (Some(stop), Some(_)) => return pause_get(cx, &mut resume, at, stop),
            (None, Some(key)) => key,
        };
        first = false;
        if let Some(owner) = cx.owner_elsewhere(key) {
            // The line is about as long as the key and its command.
            let len = key.len() + 16;
            let forwarded = cx.forward_written(owner, part::GET_KEY, len, out, |bytes| {
                write_get_line(bytes, command, exptime, key);
            });
            if let Err(stop) = forwarded {
                return pause_get(cx, &mut resume, at, stop);
            }
            cx.session.spend_turn();
            continue;
        }
        cx.session.spend_turn();
        let item = if command.touches() {
            cx.touch(key, Ttl::Exptime(exptime), cx.now)
        } else {
            cx.get(key, cx.now)
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
    cx.session.resume = None;
    cx.session.scan.bytes = 0;
    Step::Done(resume.len)
}

/// Stops a retrieval before the key at `at` in its line's text; nothing of the line is
/// consumed.
fn pause_get(cx: &mut Cx<'_>, resume: &mut Resume, at: usize, stop: Stop) -> Step {
    resume.at = at;
    cx.session.resume = Some(*resume);
    Step::Stop(stop)
}

/// The request line a text retrieval of one key is forwarded as.
fn write_get_line(out: &mut Vec<u8>, command: GetCommand, exptime: i64, key: &[u8]) {
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

/// set/add/replace/append/prepend/cas: waits for the data block, unless the value can never
/// fit, in which case it is refused now and skipped as it arrives.
fn execute_store(
    cx: &mut Cx<'_>,
    store: Store<'_>,
    buf: &[u8],
    line_len: usize,
    out: &mut Vec<u8>,
) -> Step {
    let now = cx.now;
    if !cx.fits(store.key.len(), store.bytes) {
        // The item a refused SET unlinks lives with the key's owner: the line goes there
        // (the owner refuses it in turn), and the data block is skipped here.
        if let Some(owner) = cx.owner_elsewhere(store.key) {
            if let Err(stop) = cx.forward(owner, part::WHOLE, &buf[..line_len], out) {
                return Step::Stop(stop);
            }
        } else {
            let unlink = store.command == StoreCommand::Set;
            cx.refuse_too_large(store.key, unlink, now);
            if !store.noreply {
                ErrorReply::TooLarge.emit_into(out);
            }
        }
        cx.session.skip(store.bytes as u64 + 2);
        return Step::Done(line_len);
    }
    let data = match data_block(&buf[line_len..], store.bytes) {
        Ok(data) => data,
        Err(DataError::Incomplete { needed }) => return Step::Wait(needed),
        Err(DataError::BadChunk) => {
            cx.protocol_error();
            if !store.noreply {
                ErrorReply::BadDataChunk.emit_into(out);
            }
            return Step::Done(line_len + store.bytes + 2);
        }
    };
    let consumed = line_len + store.bytes + 2;
    if let Some(owner) = cx.owner_elsewhere(store.key) {
        return match cx.forward(owner, part::WHOLE, &buf[..consumed], out) {
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
            (StoreMode::Set, cx.cas_matching_nothing(store.key, now))
        }
        StoreCommand::Cas => (StoreMode::Set, store.cas),
    };
    let extends = matches!(mode, StoreMode::Append | StoreMode::Prepend);
    let response = match cx.store(
        Write {
            flags: store.flags,
            ttl: Ttl::Exptime(store.exptime),
            cas,
            ..Write::new(mode, store.key, data)
        },
        now,
    ) {
        Ok(_) => Response::Stored,
        // memcached answers NOT_STORED when an append or prepend would outgrow the item limit.
        Err(StoreError::TooLarge) if extends => Response::NotStored,
        Err(error) => {
            // No stale value survives a SET refused for memory (memcached unlinks it).
            if error == StoreError::OutOfMemory && store.command == StoreCommand::Set {
                cx.unlink(store.key, now);
            }
            store_error(error)
        }
    };
    if !store.noreply {
        response.emit_into(out);
    }
    Step::Done(consumed)
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

#[cfg(test)]
mod tests;
