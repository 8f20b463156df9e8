//! Transactions: `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`.
//!
//! Between `MULTI` and `EXEC` a command is checked (known, its arity, where its keys live) and
//! queued in the session with `+QUEUED`; one that fails the check is answered with its error
//! and makes `EXEC` refuse the whole (`EXECABORT`). `EXEC` runs the queue with no other
//! command executing on any worker its keys live on between its first command and its last,
//! so the transaction is atomic with respect to every other client, memcached's included.
//!
//! Where a transaction runs (with one worker, always the first row):
//!
//! ```text
//! every key on this connection's worker   runs here, back to back (a worker is single-threaded)
//! every key on worker w, none watched     EXEC sends the queue to w as one request; w runs it
//!                                         whole and answers the EXEC array
//! anything else (keys on several workers, this worker coordinates a run over them all:
//!   or a key watched elsewhere)           hold, check, run, release (below)
//! ```
//!
//! A run over several workers (`control::holds` has the protocol and its bounds):
//!
//! ```text
//! EXEC, 1st time   the connection's forwarded requests answered? else wait for them (they
//!                  take effect before the transaction: queues are FIFO per connection)
//!                  take the token (else try again on a later pass), send Hold to each
//!                  participant behind them, wait for the answers (EXEC stays unconsumed)
//! EXEC, 2nd time   begin (every participant still holds; one that let go: ask again)
//!                  watched keys checked on their owners; changed: null array
//!                  else each run of consecutive commands for one worker: here, or one job
//!                  on that worker; replies in queue order, one array
//!                  release (dropping the session's claim, HoldGuard, does it too)
//! ```
//!
//! Why holds and not something lighter: a transaction must see no other command between
//! its own on every worker it touches, and a worker's store is its thread's alone, so each
//! such worker has to stop and run the transaction's commands itself. Holding them all at once
//! (rather than one after another, as a chain of forwarded requests would) is what keeps a
//! client from reading one worker's key after the transaction and another's before it. The
//! token makes holds never wait on each other: at most one run holds anyone, a worker waiting
//! for the token holds nothing and keeps serving, and a worker answers a hold between any two
//! messages of its queue, so every hold is answered. The participants spin only while the
//! coordinator runs; the coordinator does not spin while it waits for them to answer.
//!
//! A command whose own keys live on several workers, the commands that go to every worker
//! (`DBSIZE`, `FLUSHDB`, `FLUSHALL`, `INFO`, `KEYS`, `SCAN`, `RANDOMKEY`) and `SELECT` are
//! refused inside a transaction when there are several workers; with one worker every
//! command runs.
//!
//! `WATCH` records each key's CAS and expiry, and asks the core of the key's worker to note
//! writes to it (`engine::marks`); a key of another worker is watched there during a short
//! hold of that worker, as above. `EXEC` fails (a null array) when a watched key was written
//! since, by any connection or protocol (a key absent at `WATCH` and at `EXEC` that was
//! created and deleted between included, as Redis has it), or when its CAS or expiry differs
//! (an expiry or an eviction made it absent); each is checked on its own worker while held.
//! `UNWATCH`, `DISCARD` and `RESET` stop this worker's notes at once, and another's with a
//! request to it; a connection that closes while watching leaves its notes until they
//! overflow.

use super::*;
use crate::engine::marks::MARKS_MAX;
use crate::engine::transaction::{Queued, Watched};

/// Bytes of queued commands a transaction may hold: more makes `EXEC` refuse it.
pub(super) const QUEUE_MAX_BYTES: usize = 64 << 20;

/// The part code of a transaction sent whole to the worker that owns its keys.
pub(super) const TRANSACTION: u8 = 1;

/// The part code of watched keys whose worker is to stop noting writes to them.
pub(super) const UNWATCH: u8 = 2;

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
    cx.session.queued = Some(Box::new(Queued {
        charge: cx.queue_charge(),
        ..Queued::default()
    }));
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
        let mut owner = None;
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
        if let (Some(of), Some(queued)) = (owner, cx.session.queued.as_mut())
            && !queued.owners.contains(&of)
        {
            queued.owners.push(of);
        }
    }
    let room = cx.config().queued_max_bytes;
    let Some(queued) = cx.session.queued.as_mut() else {
        return;
    };
    // A command costs its bytes and its end's place in `ends`: an inline `GET a` is smaller
    // than the word that records where it ends.
    let cost = raw.len() + size_of::<usize>();
    if queued.bytes.len() + queued.ends.len() * size_of::<usize>() + cost > QUEUE_MAX_BYTES {
        queued.failed = true;
        return error(
            out,
            v,
            "ERR transaction too long: its commands exceed 64 MiB",
        );
    }
    if !queued.charge.take(cost, room) {
        queued.failed = true;
        return error(
            out,
            v,
            "ERR transactions too long: this worker's open transactions hold all the room they may",
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
    cx.session.hold = None;
    if cx.session.queued.take().is_none() {
        return error(out, v, "ERR DISCARD without MULTI");
    }
    forget_watched(cx, out);
    ok(out, v);
}

/// `WATCH key [key ...]`: `Some` when it must wait (for the connection's forwarded requests,
/// or for the workers that own its keys to hold), with nothing done.
pub(super) fn watch(cx: &mut Cx<'_>, keys: &[&[u8]], out: &mut Vec<u8>) -> Option<Stop> {
    let v = version(cx);
    if cx.session.queued.is_some() {
        cx.session.hold = None;
        error(out, v, "ERR WATCH inside MULTI is not allowed");
        return None;
    }
    if cx.session.watch_overflow {
        ok(out, v);
        return None;
    }
    // More keys than a worker keeps notes for could never all be checked: the next EXEC
    // fails (a retry, as when the worker's notes overflow), and the list stays bounded, as
    // does the work of comparing each new key with it.
    if cx.session.watched.len() + keys.len() > MARKS_MAX {
        forget_watched(cx, out);
        cx.session.watch_overflow = true;
        ok(out, v);
        return None;
    }
    let me = cx.config().worker;
    let db = cx.session.db;
    // Each key once, and none watched already.
    let mut fresh: Vec<&[u8]> = Vec::new();
    for &key in keys {
        let watched = cx
            .session
            .watched
            .iter()
            .any(|w| w.db == db && *w.key == *key);
        if !watched && !fresh.contains(&key) {
            fresh.push(key);
        }
    }
    let mut owners: Vec<usize> = Vec::new();
    for &key in &fresh {
        if let Some(owner) = cx.owner_elsewhere(key)
            && !owners.contains(&owner)
        {
            owners.push(owner);
        }
    }
    if !owners.is_empty()
        && let Held::Wait(stop) = hold(cx, &owners, out)
    {
        return Some(stop);
    }
    let now = cx.now;
    let stored_db = cx.session.stored_db;
    for &owner in &owners {
        let mine: Vec<Box<[u8]>> = fresh
            .iter()
            .filter(|key| cx.owner_elsewhere(key) == Some(owner))
            .map(|&key| key.into())
            .collect();
        let run = run_on(cx, owner, move |cx| {
            mine.into_iter()
                .map(|key| {
                    let state = cx.peek(&key, now).map(|item| (item.cas, item.expiry_ms));
                    let since = cx.watch_writes(stored_db, &key);
                    Watched {
                        db,
                        key,
                        state,
                        stored_db,
                        since,
                        owner,
                    }
                })
                .collect::<Vec<Watched>>()
        });
        match run {
            Some(watched) => cx.session.watched.extend(watched),
            None => {
                cx.session.hold = None;
                error(out, v, LET_GO);
                return None;
            }
        }
    }
    // Released before this worker's own keys are watched: they need no hold.
    cx.session.hold = None;
    for &key in &fresh {
        if cx.owner_elsewhere(key).is_some() {
            continue;
        }
        let state = cx.peek(key, now).map(|item| (item.cas, item.expiry_ms));
        let since = cx.watch_writes(stored_db, key);
        cx.session.watched.push(Watched {
            db,
            key: key.into(),
            state,
            stored_db,
            since,
            owner: me,
        });
    }
    ok(out, v);
    None
}

/// `UNWATCH`.
pub(super) fn unwatch(cx: &mut Cx<'_>, out: &mut Vec<u8>) {
    forget_watched(cx, out);
    ok(out, version(cx));
}

/// Forgets the watched keys, and stops each key's worker noting writes to it for this
/// connection: this worker's at once, another's by a request to it (an empty reply in `out`;
/// when its queue is full, its marks stay until its table of marks overflows, as a closed
/// connection's do).
pub(super) fn forget_watched(cx: &mut Cx<'_>, out: &[u8]) {
    cx.session.watch_overflow = false;
    let me = cx.config().worker;
    let watched = std::mem::take(&mut cx.session.watched);
    let mut owners: Vec<usize> = Vec::new();
    for w in &watched {
        if w.owner == me {
            cx.unwatch_writes(w.stored_db, &w.key);
        } else if !owners.contains(&w.owner) {
            owners.push(w.owner);
        }
    }
    for owner in owners {
        let theirs = || watched.iter().filter(|w| w.owner == owner);
        let len = theirs().map(|w| w.key.len() + 5).sum();
        cx.forward_quietly(owner, UNWATCH, len, out, |bytes| {
            for w in theirs() {
                bytes.push(w.stored_db);
                bytes.extend_from_slice(&(w.key.len() as u32).to_le_bytes());
                bytes.extend_from_slice(&w.key);
            }
        });
    }
}

/// Another worker's [`forget_watched`]: stops noting writes to the keys in `request` (each
/// its namespace, its length as 4 bytes little-endian, and its bytes) for one watcher.
pub(super) fn release_watched(cx: &mut Cx<'_>, mut request: &[u8]) {
    while let [stored_db, rest @ ..] = request
        && let Some((len, rest)) = rest.split_first_chunk::<4>()
        && let Some((key, rest)) = rest.split_at_checked(u32::from_le_bytes(*len) as usize)
    {
        cx.unwatch_writes(*stored_db, key);
        request = rest;
    }
}

/// Whether one of `watched` (keys of this worker) was written, or its item differs, since it
/// was watched; stops noting writes to them for this connection.
fn changed_here(cx: &mut Cx<'_>, watched: &[Watched]) -> bool {
    let now = cx.now;
    let mut changed = false;
    for w in watched {
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

/// Whether a watched key was written, or its item differs, since it was watched, on whichever
/// worker owns it (every other owner holds); forgets them all.
fn watched_changed(cx: &mut Cx<'_>) -> bool {
    let me = cx.config().worker;
    let watched = std::mem::take(&mut cx.session.watched);
    let (mine, theirs): (Vec<Watched>, Vec<Watched>) =
        watched.into_iter().partition(|w| w.owner == me);
    let mut changed = changed_here(cx, &mine);
    let mut owners: Vec<usize> = theirs.iter().map(|w| w.owner).collect();
    owners.sort_unstable();
    owners.dedup();
    for owner in owners {
        let keys: Vec<Watched> = theirs
            .iter()
            .filter(|w| w.owner == owner)
            .cloned()
            .collect();
        // A worker that let go answers nothing: the transaction does not run.
        changed |= run_on(cx, owner, move |cx| changed_here(cx, &keys)).unwrap_or(true);
    }
    changed
}

/// What asking for holds came to.
enum Held {
    /// Not yet: the command waits (for forwarded requests, the token, or the answers).
    Wait(Stop),
    /// Every participant holds and waits for jobs ([`run_on`]).
    Running,
}

/// Has `participants` (other workers) hold for this connection's command, which stays at the
/// front of the input until they do (see `control::holds`): first the connection's earlier
/// forwarded requests are answered (so they took effect), then the hold requests go out
/// behind them, and once each is answered the run begins.
fn hold(cx: &mut Cx<'_>, participants: &[usize], out: &[u8]) -> Held {
    if cx.session.forwards_in_flight() > 0 {
        return Held::Wait(Stop::Forwards);
    }
    let Some(guard) = cx.session.hold.as_ref() else {
        return match cx.ask_holds(participants, out) {
            Ok(()) => Held::Wait(Stop::Forwards),
            Err(stop) => Held::Wait(stop),
        };
    };
    if guard.control.holds.begin(guard.epoch, &guard.participants) {
        Held::Running
    } else {
        // One let go before the run began (it waited too long for the others): nothing ran,
        // and the command asks again on a later pass.
        cx.session.hold = None;
        Held::Wait(Stop::Blocked)
    }
}

/// Runs `job` on held worker `owner`, in a context of this connection's protocol and
/// database there, and returns what it made; `None` when that worker let go.
fn run_on<T: Send + 'static>(
    cx: &mut Cx<'_>,
    owner: usize,
    job: impl FnOnce(&mut Cx<'_>) -> T + Send + 'static,
) -> Option<T> {
    let guard = cx.session.hold.as_ref()?;
    let protocol = cx
        .session
        .protocol()
        .unwrap_or(Protocol::Resp(Version::Resp2));
    let db = cx.session.db;
    let now = cx.now;
    let answer = guard.control.holds.run(
        owner,
        guard.epoch,
        Box::new(move |engine: &mut crate::engine::Engine| {
            let mut session = crate::engine::Session::speaking(protocol);
            let core = &mut engine.core;
            core.set_cfd(0);
            let mut cx = Cx::local(core, &mut session, now);
            enter_db(&mut cx, db);
            let made = job(&mut cx);
            // Timed where the transaction arrived.
            core.take_samples();
            Box::new(made) as Box<dyn std::any::Any + Send>
        }),
    )?;
    answer.downcast::<T>().ok().map(|made| *made)
}

/// `EXEC`: `Some` when it must wait (the owner's queue is full, or the workers of its keys
/// must hold first), with nothing done.
pub(super) fn exec(cx: &mut Cx<'_>, out: &mut Vec<u8>) -> Option<Stop> {
    let v = version(cx);
    let Some(queued) = cx.session.queued.take() else {
        cx.session.hold = None;
        error(out, v, "ERR EXEC without MULTI");
        return None;
    };
    if queued.failed {
        cx.session.hold = None;
        forget_watched(cx, out);
        error(out, v, EXEC_ABORT);
        return None;
    }
    if cx.session.watch_overflow {
        cx.session.hold = None;
        forget_watched(cx, out);
        Reply::NullArray.emit_into(v, out);
        return None;
    }
    let me = cx.config().worker;
    let mut participants: Vec<usize> = queued.owners.clone();
    for w in &cx.session.watched {
        if !participants.contains(&w.owner) {
            participants.push(w.owner);
        }
    }
    participants.retain(|&w| w != me);
    if cx.forwarded() {
        participants.clear();
    }
    match participants[..] {
        [] => {
            if watched_changed(cx) {
                Reply::NullArray.emit_into(v, out);
            } else {
                run_queue(cx, &queued.bytes, out);
            }
            None
        }
        // Every key on one other worker, none watched: the queue goes there, to run whole.
        [owner] if cx.session.watched.is_empty() && queued.owners == [owner] => {
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
            if let Held::Wait(stop) = hold(cx, &participants, out) {
                cx.session.queued = Some(queued);
                return Some(stop);
            }
            if watched_changed(cx) {
                Reply::NullArray.emit_into(v, out);
            } else {
                run_spread(cx, &queued.bytes, out);
            }
            cx.session.hold = None;
            None
        }
    }
}

/// The error a transaction gets when a worker it needed let go of its hold.
const LET_GO: &str = "ERR a worker did not hold for this transaction in time; try again";

/// Runs the commands in `bytes` (each complete and checked when queued) in order, each on
/// the worker that owns its keys (those of this worker here, a run of commands for another
/// held worker there, as one job), answering an array of their replies.
fn run_spread(cx: &mut Cx<'_>, bytes: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let me = cx.config().worker;
    let limits = Limits {
        max_bulk: bytes.len(),
        max_command: bytes.len(),
    };
    // Consecutive commands for one worker: (worker, start, end, commands).
    let mut runs: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let mut progress = Progress::default();
        let Ok((command, len)) = Command::parse(&bytes[at..], &limits, &mut progress) else {
            break;
        };
        let owner = lookup(command.arg(0).unwrap_or_default())
            .and_then(|spec| keys_of(spec, &command).next())
            .and_then(|key| cx.owner_elsewhere(key))
            .unwrap_or(me);
        match runs.last_mut() {
            Some(run) if run.0 == owner => {
                run.2 = at + len;
                run.3 += 1;
            }
            _ => runs.push((owner, at, at + len, 1)),
        }
        at += len;
    }
    let mut replies = Vec::new();
    let count: usize = runs.iter().map(|run| run.3).sum();
    for (owner, start, end, commands) in runs {
        let run = &bytes[start..end];
        if owner == me {
            run_commands(cx, run, &mut replies);
            continue;
        }
        let run = run.to_vec();
        let made = run_on(cx, owner, move |cx| {
            let mut replies = Vec::new();
            run_commands(cx, &run, &mut replies);
            replies
        });
        match made {
            Some(made) => replies.extend_from_slice(&made),
            None => {
                for _ in 0..commands {
                    error(&mut replies, v, LET_GO);
                }
            }
        }
    }
    Reply::Array(count).emit_into(v, out);
    out.extend_from_slice(&replies);
}

/// Runs the commands one after another in `bytes` (each complete and checked when queued),
/// answering an array of their replies; nothing pauses them.
pub(super) fn run_queue(cx: &mut Cx<'_>, bytes: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let mut replies = Vec::new();
    let count = run_commands(cx, bytes, &mut replies);
    Reply::Array(count).emit_into(v, out);
    out.extend_from_slice(&replies);
}

/// Runs the commands one after another in `bytes`, appending their replies to `replies`;
/// nothing pauses them. Returns how many ran.
fn run_commands(cx: &mut Cx<'_>, bytes: &[u8], replies: &mut Vec<u8>) -> usize {
    let limits = Limits {
        max_bulk: bytes.len(),
        max_command: bytes.len(),
    };
    let mut count = 0;
    let mut at = 0;
    let atomic = cx.session.atomic;
    cx.session.atomic = true;
    while at < bytes.len() {
        let mut progress = Progress::default();
        let Ok((command, len)) = Command::parse(&bytes[at..], &limits, &mut progress) else {
            break;
        };
        let spec = lookup(command.arg(0).unwrap_or_default());
        let _ = execute(cx, spec, &command, &bytes[at..at + len], replies);
        count += 1;
        at += len;
    }
    cx.session.atomic = atomic;
    count
}

/// `RESET`: the connection as it was when it connected (no transaction, no watched key,
/// database 0, RESP2, no name, and not authenticated when a password is asked for).
pub(super) fn reset(cx: &mut Cx<'_>, out: &mut Vec<u8>) {
    cx.session.queued = None;
    cx.session.hold = None;
    forget_watched(cx, out);
    enter_db(cx, 0);
    cx.session.name = None;
    cx.session.authenticated = false;
    cx.session.switch(Protocol::Resp(Version::Resp2));
    note_client(cx);
    simple(out, Version::Resp2, "RESET");
}
