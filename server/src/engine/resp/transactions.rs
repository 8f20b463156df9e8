//! Transactions: `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`.
//!
//! Between `MULTI` and `EXEC` a command is checked (known, its arity, where its keys live) and
//! queued in the session with `+QUEUED`; one that fails the check is answered with its error
//! and makes `EXEC` refuse the whole (`EXECABORT`). `EXEC` runs the queue back to back on one
//! worker, which executes nothing else meanwhile (a worker is single-threaded), so the
//! transaction is atomic with respect to every other client, memcached's included.
//!
//! With several workers, a transaction runs on the worker that owns its keys:
//!
//! ```text
//! every key on this connection's worker   runs here
//! every key on worker w                   EXEC sends the queue to w as one request; w runs it
//!                                         whole and answers the EXEC array
//! keys on several workers                 the command that adds the second worker is refused
//!                                         (CROSSSLOT, as Redis Cluster does), EXEC aborts
//! ```
//!
//! Commands that go to every worker (`DBSIZE`, `FLUSHDB`, `FLUSHALL`, `INFO`, `KEYS`, `SCAN`,
//! `RANDOMKEY`)
//! and `SELECT`
//! are refused inside a transaction when there are several workers; with one worker every
//! command runs. `WATCH` records each key's CAS and expiry, and asks the core to note writes
//! to it (`engine::marks`); `EXEC` fails (a null array) when a watched key was written since,
//! by any connection or protocol (a key absent at `WATCH` and at `EXEC` that was created and
//! deleted between included, as Redis has it), or when its CAS or expiry differs (an expiry
//! or an eviction made it absent). With several workers, `WATCH` takes keys of this
//! connection's worker only, and a watching transaction must run here.

use super::*;
use crate::engine::session::{Queued, Watched};

/// Bytes of queued commands a transaction may hold: more makes `EXEC` refuse it.
pub(super) const QUEUE_MAX_BYTES: usize = 64 << 20;

/// The part code of a transaction sent whole to the worker that owns its keys.
pub(super) const TRANSACTION: u8 = 1;

const NESTED: &str = "ERR MULTI calls can not be nested";
const EXEC_ABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// Whether `cmd` is executed at once inside a transaction rather than queued.
pub(super) fn runs_inside_multi(cmd: Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Exec | Cmd::Discard | Cmd::Multi | Cmd::Watch | Cmd::Quit | Cmd::Reset
    )
}

/// Marks the open transaction failed (a command could not be queued).
pub(super) fn fail_queue(cx: &mut Cx<'_>) {
    if let Some(queued) = cx.session.queued.as_mut() {
        queued.failed = true;
    }
}

/// `MULTI`.
pub(super) fn multi(cx: &mut Cx<'_>, out: &mut Vec<u8>) {
    let v = version(cx);
    if cx.session.queued.is_some() {
        return error(out, v, NESTED);
    }
    cx.session.queued = Some(Box::default());
    ok(out, v);
}

/// Queues `raw` (a command checked known and of the right arity) in the open transaction, or
/// refuses it.
pub(super) fn queue(
    cx: &mut Cx<'_>,
    spec: &'static Spec,
    command: &Command<'_>,
    raw: &[u8],
    out: &mut Vec<u8>,
) {
    let v = version(cx);
    if cx.workers() > 1 {
        let spans = matches!(
            spec.cmd,
            Cmd::DbSize
                | Cmd::FlushAll
                | Cmd::FlushDb
                | Cmd::Info
                | Cmd::Select
                | Cmd::Scan
                | Cmd::Keys
                | Cmd::RandomKey
        );
        if spans {
            fail_queue(cx);
            let message = format!(
                "ERR '{}' inside MULTI needs a server of one worker (memspin -t 1)",
                spec.name
            );
            return error(out, v, &message);
        }
        let me = cx.config().worker;
        let mut owner = cx.session.queued.as_ref().and_then(|q| q.owner);
        for key in keys_of(spec, command) {
            let of = cx.owner_elsewhere(key).unwrap_or(me);
            match owner {
                Some(o) if o != of => {
                    fail_queue(cx);
                    return error(out, v, CROSSSLOT);
                }
                _ => owner = Some(of),
            }
        }
        if let Some(queued) = cx.session.queued.as_mut() {
            queued.owner = owner;
        }
    }
    let Some(queued) = cx.session.queued.as_mut() else {
        return;
    };
    if queued.bytes.len() + raw.len() > QUEUE_MAX_BYTES {
        queued.failed = true;
        return error(
            out,
            v,
            "ERR transaction too long: its commands exceed 64 MiB",
        );
    }
    queued.bytes.extend_from_slice(raw);
    queued.ends.push(queued.bytes.len());
    simple(out, v, "QUEUED");
}

/// The keys `command` names, by its spec's first key, last key and step.
fn keys_of<'c>(spec: &Spec, command: &'c Command<'_>) -> impl Iterator<Item = &'c [u8]> {
    let (first, last, step) = spec.keys;
    let argc = command.argc() as i64;
    let last = if last < 0 {
        argc + last
    } else {
        last.min(argc - 1)
    };
    let step = step.max(1);
    let count = if first == 0 || last < first {
        0
    } else {
        ((last - first) / step + 1) as usize
    };
    (0..count).filter_map(move |i| command.arg((first + i as i64 * step) as usize))
}

/// `DISCARD`.
pub(super) fn discard(cx: &mut Cx<'_>, out: &mut Vec<u8>) {
    let v = version(cx);
    if cx.session.queued.take().is_none() {
        return error(out, v, "ERR DISCARD without MULTI");
    }
    forget_watched(cx);
    ok(out, v);
}

/// `WATCH key [key ...]`.
pub(super) fn watch(cx: &mut Cx<'_>, keys: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    if cx.session.queued.is_some() {
        return error(out, v, "ERR WATCH inside MULTI is not allowed");
    }
    if keys.iter().any(|key| cx.owner_elsewhere(key).is_some()) {
        return error(
            out,
            v,
            "ERR WATCH takes keys of this connection's worker only (memspin -t 1 takes any)",
        );
    }
    let now = cx.now;
    for &key in keys {
        let db = cx.session.db;
        if cx
            .session
            .watched
            .iter()
            .any(|w| w.db == db && *w.key == *key)
        {
            continue;
        }
        let state = cx.peek(key, now).map(|item| (item.cas, item.expiry_ms));
        let stored_db = cx.session.stored_db;
        let since = cx.watch_writes(stored_db, key);
        cx.session.watched.push(Watched {
            db,
            key: key.into(),
            state,
            stored_db,
            since,
        });
    }
    ok(out, v);
}

/// `UNWATCH`.
pub(super) fn unwatch(cx: &mut Cx<'_>, out: &mut Vec<u8>) {
    forget_watched(cx);
    ok(out, version(cx));
}

/// Forgets the watched keys (and stops the core noting writes to them for this connection).
pub(super) fn forget_watched(cx: &mut Cx<'_>) {
    for w in std::mem::take(&mut cx.session.watched) {
        cx.unwatch_writes(w.stored_db, &w.key);
    }
}

/// Whether a watched key was written, or its item differs, since it was watched (and forgets
/// them all).
fn watched_changed(cx: &mut Cx<'_>) -> bool {
    let now = cx.now;
    let watched = std::mem::take(&mut cx.session.watched);
    let mut changed = false;
    for w in &watched {
        let written = cx.written_since(w.stored_db, &w.key, w.since);
        // The key of that database as it is now (after a `SWAPDB`, another namespace's).
        let saved = current_db(cx);
        enter_db(cx, w.db);
        let state = cx.peek(&w.key, now).map(|item| (item.cas, item.expiry_ms));
        restore_db(cx, saved);
        changed |= written || state != w.state;
        cx.unwatch_writes(w.stored_db, &w.key);
    }
    changed
}

/// `EXEC`: `Some` when it must wait (the owner's queue is full), with nothing done.
pub(super) fn exec(cx: &mut Cx<'_>, out: &mut Vec<u8>) -> Option<Stop> {
    let v = version(cx);
    let Some(queued) = cx.session.queued.take() else {
        error(out, v, "ERR EXEC without MULTI");
        return None;
    };
    if queued.failed {
        forget_watched(cx);
        error(out, v, EXEC_ABORT);
        return None;
    }
    let me = cx.config().worker;
    match queued.owner {
        Some(owner) if owner != me && !cx.forwarded() => {
            if !cx.session.watched.is_empty() {
                forget_watched(cx);
                error(out, v, CROSSSLOT);
                return None;
            }
            let Queued { bytes, .. } = &*queued;
            match cx.forward_written(owner, TRANSACTION, bytes.len(), out, |b| {
                b.extend_from_slice(bytes)
            }) {
                Ok(()) => None,
                Err(stop) => {
                    // Nothing was sent: the connection tries again later.
                    cx.session.queued = Some(queued);
                    Some(stop)
                }
            }
        }
        _ => {
            if watched_changed(cx) {
                Reply::NullArray.emit_into(v, out);
            } else {
                run_queue(cx, &queued.bytes, out);
            }
            None
        }
    }
}

/// Runs the commands one after another in `bytes` (each complete and checked when queued),
/// answering an array of their replies; nothing pauses them.
pub(super) fn run_queue(cx: &mut Cx<'_>, bytes: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let limits = Limits {
        max_bulk: bytes.len(),
        max_command: bytes.len(),
    };
    let mut replies = Vec::new();
    let mut count = 0;
    let mut at = 0;
    cx.session.atomic = true;
    while at < bytes.len() {
        let mut progress = Progress::default();
        let Ok((command, len)) = Command::parse(&bytes[at..], &limits, &mut progress) else {
            break;
        };
        let spec = lookup(command.arg(0).unwrap_or_default());
        let _ = execute(cx, spec, &command, &bytes[at..at + len], &mut replies);
        count += 1;
        at += len;
    }
    cx.session.atomic = false;
    Reply::Array(count).emit_into(v, out);
    out.extend_from_slice(&replies);
}

/// `RESET`: the connection as it was when it connected (no transaction, no watched key,
/// database 0, RESP2, no name, and not authenticated when a password is asked for).
pub(super) fn reset(cx: &mut Cx<'_>, out: &mut Vec<u8>) {
    cx.session.queued = None;
    forget_watched(cx);
    enter_db(cx, 0);
    cx.session.name = None;
    cx.session.authenticated = false;
    cx.session.switch(Protocol::Resp(Version::Resp2));
    note_client(cx);
    simple(out, Version::Resp2, "RESET");
}
