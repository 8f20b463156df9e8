//! Executing binary-protocol frames against the shard.
//!
//! Quiet commands suppress exactly what memcached suppresses: a GETQ/GETKQ/GATQ/GATKQ miss and
//! the success reply of every other quiet command. Errors are always answered.

use protocol::binary::{
    CounterExtras, ExpirationExtras, FlagsExtras, HEADER_LEN, Invalid, Opcode, ParseError,
    RequestHeader, RequestRepr, ResponseRepr, Status, StoreExtras, VerbosityExtras,
};
use store::{Arith, Delta, StoreError, StoreMode, Write};

use super::forward::{Gather, Op, StatsRender};
use super::{Engine, Protocol, Session, Step, Stop};
use crate::stats::{self, Snapshot};

/// What the caller does after one frame.
enum Flow {
    Continue,
    Close,
}

/// Executes (or refuses) the binary frame at the front of `buf`.
pub(super) fn step(
    engine: &mut Engine,
    session: &mut Session,
    buf: &[u8],
    out: &mut Vec<u8>,
    now: u64,
) -> Step {
    if let Some(frame_len) = refuse_oversize_value(engine, buf, out) {
        session.skip_bytes = frame_len as u64;
        return Step::Done(0);
    }
    match RequestRepr::parse(buf, engine.config.max_body()) {
        Ok((request, len)) => {
            if keyed(request.opcode)
                && let Some(owner) = engine.remote_owner(request.key)
            {
                return match engine.forward(session, owner, Protocol::Binary, &buf[..len], out) {
                    Ok(()) => Step::Done(len),
                    Err(stop) => Step::Stop(stop),
                };
            }
            if matches!(request.opcode, Opcode::Flush | Opcode::Stat) && !engine.may_fan_out() {
                return Step::Stop(Stop::Blocked);
            }
            if let Flow::Close = dispatch(engine, session, &request, out, now) {
                session.closing = true;
            }
            Step::Done(len)
        }
        Err(ParseError::Incomplete { needed }) => Step::Wait(needed),
        Err(ParseError::UnknownOpcode {
            opcode,
            opaque,
            frame_len,
        }) => {
            engine.counters.protocol_errors += 1;
            let (opcode, quiet) = Opcode::from_wire(opcode);
            write_error(out, opcode, quiet, opaque, Status::UnknownCommand, &[]);
            session.skip_bytes = frame_len as u64;
            Step::Done(0)
        }
        Err(ParseError::Invalid(invalid)) => {
            engine.counters.protocol_errors += 1;
            if !matches!(invalid, Invalid::BadMagic(_))
                && let Ok(header) = RequestHeader::new_checked(&buf[..HEADER_LEN.min(buf.len())])
            {
                let (opcode, quiet) = Opcode::from_wire(header.opcode());
                let opaque = header.opaque();
                write_error(out, opcode, quiet, opaque, Status::InvalidArguments, &[]);
            }
            session.closing = true;
            Step::Done(0)
        }
    }
}

/// A well-formed storage frame whose value can never fit is answered "too large" from its
/// header alone, so its body is skipped rather than buffered. Returns the frame length to skip.
fn refuse_oversize_value(engine: &mut Engine, buf: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let header = RequestRepr::parse_header(buf, engine.config.max_body()).ok()?;
    let (opcode, quiet) = Opcode::from_wire(header.opcode());
    let storage = matches!(
        opcode,
        Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend
    );
    if !storage || engine.fits(usize::from(header.key_len()), header.value_len()) {
        return None;
    }
    engine.refuse_too_large();
    write_error(
        out,
        opcode,
        quiet,
        header.opaque(),
        Status::ValueTooLarge,
        &[],
    );
    Some(header.frame_len())
}

/// Opcodes that act on one key, executed by the worker that owns it.
fn keyed(opcode: Opcode) -> bool {
    matches!(
        opcode,
        Opcode::Get
            | Opcode::GetK
            | Opcode::Set
            | Opcode::Add
            | Opcode::Replace
            | Opcode::Append
            | Opcode::Prepend
            | Opcode::Delete
            | Opcode::Increment
            | Opcode::Decrement
            | Opcode::Touch
            | Opcode::Gat
            | Opcode::GatK
    )
}

fn dispatch(
    engine: &mut Engine,
    session: &mut Session,
    request: &RequestRepr<'_>,
    out: &mut Vec<u8>,
    now: u64,
) -> Flow {
    match request.opcode {
        Opcode::Get | Opcode::GetK => {
            let with_key = request.opcode == Opcode::GetK;
            match engine.get(request.key, now) {
                Some(item) => write_item(out, request, with_key, item.flags, item.value, item.cas),
                None => write_miss(out, request, with_key),
            }
        }
        Opcode::Touch | Opcode::Gat | Opcode::GatK => {
            let Some(extras) = ExpirationExtras::parse(request.extras) else {
                return invalid(engine, request, out);
            };
            let exptime = i64::from(extras.expiration);
            let with_key = request.opcode == Opcode::GatK;
            match engine.touch(request.key, exptime, now) {
                Some(item) if request.opcode == Opcode::Touch => {
                    write_item(out, request, false, item.flags, &[], item.cas)
                }
                Some(item) => write_item(out, request, with_key, item.flags, item.value, item.cas),
                None => write_miss(out, request, with_key),
            }
        }
        Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend => {
            let (mode, flags, exptime) = match request.opcode {
                Opcode::Append => (StoreMode::Append, 0, 0),
                Opcode::Prepend => (StoreMode::Prepend, 0, 0),
                opcode => {
                    let Some(extras) = StoreExtras::parse(request.extras) else {
                        return invalid(engine, request, out);
                    };
                    let mode = match opcode {
                        Opcode::Add => StoreMode::Add,
                        Opcode::Replace => StoreMode::Replace,
                        _ => StoreMode::Set,
                    };
                    (mode, extras.flags, i64::from(extras.expiration))
                }
            };
            let result = engine.store(
                Write {
                    flags,
                    exptime,
                    cas: request.cas,
                    ..Write::new(mode, request.key, request.value)
                },
                now,
            );
            match result {
                Ok(cas) => write_success(out, request, cas, &[], &[]),
                Err(error) => {
                    let status = match (error, mode) {
                        // memcached's binary protocol: ADD on a live key is "exists", REPLACE on a
                        // missing key is "not found"; APPEND/PREPEND say "not stored".
                        (StoreError::NotStored, StoreMode::Add) => Status::KeyExists,
                        (StoreError::NotStored, StoreMode::Replace) => Status::KeyNotFound,
                        (error, _) => store_status(error),
                    };
                    write_request_error(out, request, status);
                }
            }
        }
        Opcode::Delete => match engine.shard.delete(request.key, request.cas, now) {
            Ok(()) => write_success(out, request, 0, &[], &[]),
            Err(error) => write_request_error(out, request, store_status(error)),
        },
        Opcode::Increment | Opcode::Decrement => {
            let Some(extras) = CounterExtras::parse(request.extras) else {
                return invalid(engine, request, out);
            };
            let direction = if request.opcode == Opcode::Increment {
                Delta::Incr
            } else {
                Delta::Decr
            };
            // Expiration 0xffffffff: fail if missing; anything else creates with `initial`.
            let create = (extras.expiration != u32::MAX)
                .then_some((extras.initial, i64::from(extras.expiration)));
            let result = engine.shard.incr_decr(
                Arith {
                    create,
                    cas: request.cas,
                    ..Arith::new(request.key, direction, extras.delta)
                },
                now,
            );
            match result {
                Ok((value, cas)) => write_success(out, request, cas, &[], &value.to_be_bytes()),
                Err(error) => write_request_error(out, request, store_status(error)),
            }
        }
        Opcode::Flush => {
            let delay = match request.extras.len() {
                0 => 0,
                _ => match ExpirationExtras::parse(request.extras) {
                    Some(extras) => i64::from(extras.expiration),
                    None => return invalid(engine, request, out),
                },
            };
            engine.flush_all(delay, now);
            engine.fan_out(session, Op::Flush { delay, now }, None, out);
            write_success(out, request, 0, &[], &[]);
        }
        Opcode::Noop => write_success(out, request, 0, &[], &[]),
        Opcode::Version => write_success(out, request, 0, &[], engine.config.version.as_bytes()),
        Opcode::Verbosity => {
            if VerbosityExtras::parse(request.extras).is_none() {
                return invalid(engine, request, out);
            }
            write_success(out, request, 0, &[], &[]);
        }
        Opcode::Quit => {
            write_success(out, request, 0, &[], &[]);
            return Flow::Close;
        }
        Opcode::Stat => return write_stats(engine, session, request, out, now),
        Opcode::Unknown(_) => {
            engine.counters.protocol_errors += 1;
            write_request_error(out, request, Status::UnknownCommand);
        }
    }
    Flow::Continue
}

/// A frame whose extras did not decode: answered like memcached's protocol error, then closed.
fn invalid(engine: &mut Engine, request: &RequestRepr<'_>, out: &mut Vec<u8>) -> Flow {
    engine.counters.protocol_errors += 1;
    write_request_error(out, request, Status::InvalidArguments);
    Flow::Close
}

fn store_status(error: StoreError) -> Status {
    match error {
        StoreError::NotFound => Status::KeyNotFound,
        StoreError::Exists => Status::KeyExists,
        StoreError::NotStored => Status::ItemNotStored,
        StoreError::TooLarge => Status::ValueTooLarge,
        StoreError::OutOfMemory => Status::OutOfMemory,
        StoreError::NonNumeric => Status::NonNumeric,
        StoreError::KeyTooLong => Status::InvalidArguments,
    }
}

fn write_item(
    out: &mut Vec<u8>,
    request: &RequestRepr<'_>,
    with_key: bool,
    flags: u32,
    value: &[u8],
    cas: u64,
) {
    let extras = FlagsExtras { flags }.emit();
    ResponseRepr {
        opcode: request.opcode,
        quiet: request.quiet,
        status: Status::NoError,
        opaque: request.opaque,
        cas,
        extras: &extras,
        key: if with_key { request.key } else { &[] },
        value,
    }
    .emit_into(out);
}

fn write_miss(out: &mut Vec<u8>, request: &RequestRepr<'_>, with_key: bool) {
    if request.quiet {
        return;
    }
    if with_key {
        // GETK/GATK misses carry the key instead of the message, as memcached sends them.
        ResponseRepr {
            opcode: request.opcode,
            quiet: false,
            status: Status::KeyNotFound,
            opaque: request.opaque,
            cas: 0,
            extras: &[],
            key: request.key,
            value: &[],
        }
        .emit_into(out);
    } else {
        write_request_error(out, request, Status::KeyNotFound);
    }
}

fn write_success(out: &mut Vec<u8>, request: &RequestRepr<'_>, cas: u64, key: &[u8], value: &[u8]) {
    if request.quiet {
        return;
    }
    ResponseRepr {
        opcode: request.opcode,
        quiet: false,
        status: Status::NoError,
        opaque: request.opaque,
        cas,
        extras: &[],
        key,
        value,
    }
    .emit_into(out);
}

fn write_request_error(out: &mut Vec<u8>, request: &RequestRepr<'_>, status: Status) {
    write_error(
        out,
        request.opcode,
        request.quiet,
        request.opaque,
        status,
        &[],
    );
}

/// An error reply: always sent, quiet or not, with memcached's message as its value.
fn write_error(
    out: &mut Vec<u8>,
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    status: Status,
    key: &[u8],
) {
    ResponseRepr {
        opcode,
        quiet,
        status,
        opaque,
        cas: 0,
        extras: &[],
        key,
        value: status.message().as_bytes(),
    }
    .emit_into(out);
}

fn write_stats(
    engine: &mut Engine,
    session: &mut Session,
    request: &RequestRepr<'_>,
    out: &mut Vec<u8>,
    now: u64,
) -> Flow {
    let general = match request.key {
        b"" => true,
        b"settings" => false,
        _ => {
            write_request_error(out, request, Status::KeyNotFound);
            return Flow::Continue;
        }
    };
    let render = StatsRender::Binary {
        opcode: request.opcode,
        quiet: request.quiet,
        opaque: request.opaque,
        general,
        now,
    };
    let snapshot = engine.snapshot();
    if engine.config.threads > 1 {
        let gather = Box::new(Gather { snapshot, render });
        engine.fan_out(session, Op::Snapshot, Some(gather), out);
    } else {
        let (opcode, quiet, opaque) = (request.opcode, request.quiet, request.opaque);
        render_stats(out, opcode, quiet, opaque, general, now, &snapshot);
    }
    Flow::Continue
}

/// The STAT replies for `snapshot`: one frame per figure, then the terminating empty one.
/// `general`: the general figures, else the settings.
pub(super) fn render_stats(
    out: &mut Vec<u8>,
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    general: bool,
    now: u64,
    snapshot: &Snapshot,
) {
    let mut value = String::new();
    let mut line = |name: &str, v: &dyn std::fmt::Display| {
        use std::fmt::Write as _;
        value.clear();
        let _ = write!(value, "{v}");
        write_success_always(
            out,
            opcode,
            quiet,
            opaque,
            name.as_bytes(),
            value.as_bytes(),
        );
    };
    if general {
        stats::general(snapshot, now, &mut line);
    } else {
        stats::settings(snapshot, &mut line);
    }
    write_success_always(out, opcode, quiet, opaque, &[], &[]);
}

fn write_success_always(
    out: &mut Vec<u8>,
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    key: &[u8],
    value: &[u8],
) {
    ResponseRepr {
        opcode,
        quiet,
        status: Status::NoError,
        opaque,
        cas: 0,
        extras: &[],
        key,
        value,
    }
    .emit_into(out);
}
