//! The RESP adapter: Redis clients' commands (RESP2, and RESP3 after `HELLO 3`), parsed with
//! `protocol::resp`, executed through the core on the same store as memcached's protocols,
//! and answered with `protocol::resp` in Redis 7's words.
//!
//! Values are bytes: a key set here is a memcached item (flags 0) and the other way round.
//! Expiry is kept to the millisecond (`PX`, `PEXPIRE`, `PTTL`). Keys live on the worker that
//! owns them: a command on one key another worker owns is forwarded whole; `MGET`, `MSET`,
//! `DEL`, `UNLINK` and `EXISTS` send each key to its owner (their replies come back in request
//! order, `DEL`, `EXISTS` and `TOUCH` add up what each owner found); `DBSIZE`, `INFO` and `FLUSHALL` go
//! to every worker. A multi-key command checks the output backlog, the forwarding limits and
//! the turn before each key and goes on from that key on the next call, as a text `get` does.
//!
//! Numbered databases (`SELECT 0` to `--databases` - 1, 16 by default) are namespaces in the
//! one store, under one memory budget, kept by the engine ([`Cx`]'s key operations):
//!
//! ```text
//! database 0, key k       stored as k             (memcached's keys: what its protocols see)
//! database 0, key FF ..   stored as FF 00 FF ..   (escaped: no other database's key is reached)
//! database n > 0, key k   stored as FF n k
//! ```
//!
//! Database 0 costs one compare of the key's first byte per operation and nothing per item;
//! another database costs two bytes of key per item (so its keys are at most 248 bytes), and
//! copying the key into the session's buffer per operation. A key's owner is the worker of
//! its name, whatever its database (so `MOVE` stays on one worker), and a request forwarded
//! to the owner carries the connection's database before its bytes. `DBSIZE` and `FLUSHDB`
//! walk the table (O(items) on every worker; the store keeps no count per namespace);
//! `FLUSHALL` empties the whole store, as memcached's `flush_all` does.
//!
//! `SWAPDB a b` swaps which namespace `a` and `b` mean, in one table every worker reads
//! (`control::DbMap`, a seqlock: no reader sees one number swapped and not the other). The
//! keys stay where they are. A command reads its database's namespace once, when it starts
//! (the session's `stored_db`), so it never spans a swap; a request forwarded to another
//! worker carries the database number and is mapped there, and `SWAPDB` waits for the
//! connection's forwarded requests to be answered first, so its own earlier commands land
//! in the databases they were sent to. memcached's protocols always see namespace 0.
//!
//! Where memspin answers differently from Redis 7:
//! - strings are the only type (`TYPE` says `string` or `none`); commands of other types, and
//!   anything not in [`COMMANDS`], are unknown commands (the connection goes on);
//! - a key is 1 to 250 bytes (memcached's limit): others are refused
//!   (`ERR key is empty or longer than 250 bytes`) by the commands that store, and not found
//!   by those that read;
//! - an item larger than `-I` is refused (`ERR string exceeds maximum allowed size
//!   (proto-max-bulk-len)`), and so is a command with a bulk string over `-I` (or longer in
//!   all than twice `-I`): the error is answered at once and the command's bytes are skipped
//!   as they arrive, never buffered, the connection kept (Redis closes it with a protocol
//!   error); a full store evicts (CLOCK, close to `allkeys-lru`) rather than refuse;
//! - a command growing past 64 KiB as it arrives holds a share of the worker's input budget
//!   (`engine::budget`): one the budget cannot take is refused as an oversize bulk is;
//! - `MSET` is not atomic across workers (each pair is stored by its key's owner), and
//!   `MSETNX`, `BITOP`, `LCS`, `RENAME` and `COPY` with keys on several workers are refused
//!   with Redis Cluster's `CROSSSLOT` error;
//! - the item limit `-I` stands for Redis's 512 MB `proto-max-bulk-len`: `SETRANGE`, `SETBIT`
//!   and `BITFIELD` past it are refused, and `LCS`'s table may take that much;
//! - `INCRBYFLOAT` adds exactly in decimal (Redis: an 80-bit long double) and prints as
//!   Redis's `%.17Lf`: the same replies while Redis's long double holds the sum's 17
//!   decimals (magnitudes below about 100), fewer noise digits beyond;
//! - `INFO keyspace` counts each database by walking every worker's table (O(items), as
//!   `DBSIZE`; only when the section is asked for), and its `avg_ttl` is the exact mean of
//!   the keys' remaining times to live where Redis estimates it from samples;
//! - after `SWAPDB 0 n`, memcached's clients still see the store's namespace 0, which is
//!   Redis's database `n` then;
//! - there is one user, `default`, with `--requirepass`'s password (any without one);
//!   `CLIENT SETINFO` is checked and acknowledged but nothing shows it; `CLIENT LIST` reads
//!   the connection registry, where another connection's multi and last command are not
//!   kept (neutral values); `CLIENT KILL` marks a connection for its own worker to close in
//!   its next turn (`control::Kills`).
//!
//! ```text
//! mod.rs         parse (ahead, in place), dispatch, replies, and the commands too short for a
//!                family file (GET, PING, TTL, ...)
//! commands.rs    the command table: names, arity, keys, what `COMMAND` reports
//! strings.rs     SET and its options, GETEX, INCR/DECR, INCRBYFLOAT, APPEND, MSETNX,
//!                SETRANGE, GETRANGE/SUBSTR, LCS
//! bits.rs        SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD, BITFIELD_RO
//! keyspace.rs    expiry, the multi-key commands (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH),
//!                SCAN and KEYS, RENAME, COPY, OBJECT, MEMORY
//! databases.rs   SELECT, SWAPDB, MOVE, DBSIZE, FLUSHDB, and commands run on every worker
//! transactions.rs MULTI, EXEC, DISCARD, WATCH, UNWATCH, RESET (and how a transaction runs
//!                with several workers)
//! connection.rs  HELLO, CLIENT
//! server.rs      CONFIG, COMMAND, INFO
//! ```
//!
//! Each family file calls the core through [`Cx`]'s operations only.

use protocol::resp::{
    Command, Frame, Limits, ParseError, Parsed, Progress, Reply, Version, argument_len,
    parse_integer, write_command,
};
use store::{Now, StoreError, StoreMode, Ttl, Write};

mod bits;
mod commands;
mod connection;
mod databases;
mod keyspace;
mod server;
mod strings;
mod transactions;

use self::bits::*;
use self::commands::*;
use self::connection::*;
use self::databases::*;
use self::keyspace::*;
use self::server::*;
use self::strings::*;
use self::transactions::*;

use super::budget::LARGE_COMMAND_BYTES;
use super::forward::{Gather, Part};
use super::session::{Cx, FanOut, Protocol, Resume, Scan, Step, Stop};
use crate::stats::{Group, Kind, Snapshot};

/// The version of Redis whose commands and replies memspin follows, as `HELLO` and `INFO`
/// report it (clients read it to decide what they may send).
pub const REDIS_VERSION: &str = "7.0.0";

/// The form a RESP request is forwarded in: always a whole command (a single-key command, or
/// one key of a multi-key one), whose reply takes its place or goes to its gather.
const WHOLE: u8 = 0;

const SYNTAX: &str = "ERR syntax error";
const OUT_OF_RANGE_DB: &str = "ERR DB index is out of range";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const OVERFLOW: &str = "ERR increment or decrement would overflow";
const TOO_LARGE: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
const OUT_OF_MEMORY: &str = "OOM command not allowed when used memory > 'maxmemory'.";
const BAD_KEY: &str = "ERR key is empty or longer than 250 bytes";
const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";
const BUSY_INPUT: &str =
    "ERR large commands in flight on this worker exceed its input budget, try again later";
const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";

/// Executes (or refuses) the command at the front of `buf`. `ahead` holds the commands an
/// earlier step of the same engine call parsed ahead ([`Ahead`]); `None` where nothing is
/// parsed ahead (a command another worker forwarded).
pub(super) fn step(
    cx: &mut Cx<'_>,
    ahead: Option<&mut Ahead>,
    buf: &[u8],
    out: &mut Vec<u8>,
) -> Step {
    // The namespace the connection's database means for this command (`SWAPDB`).
    let db = cx.session.db;
    enter_db(cx, db);
    if let Some(resume) = cx.session.resume {
        return resume_step(cx, resume, buf, out);
    }
    if cx.session.skip_args > 0 {
        return skip_argument(cx, buf, out);
    }
    if let Some(ahead) = ahead {
        let kept = match ahead.take(buf) {
            Some(kept) => Some(kept),
            None => {
                ahead.parse(cx, buf);
                ahead.take(buf)
            }
        };
        if let Some((parsed, spec)) = kept
            && let Some((command, len)) = Command::from_parsed(buf, &parsed)
        {
            // What an earlier parse of an incomplete command left is done with, and so is
            // the share of the input budget it held.
            cx.session.scan = Scan::default();
            cx.release_input();
            if command.is_empty() {
                return Step::Done(len);
            }
            return execute(cx, spec, &command, &buf[..len], out);
        }
    }
    let limits = limits(cx.config());
    let mut progress = Progress {
        at: cx.session.scan.bytes,
        args: cx.session.scan.items,
    };
    match Command::parse(buf, &limits, &mut progress) {
        Ok((command, len)) => {
            cx.session.scan = Scan::default();
            cx.release_input();
            if command.is_empty() {
                return Step::Done(len);
            }
            let spec = lookup(command.arg(0).unwrap_or_default());
            execute(cx, spec, &command, &buf[..len], out)
        }
        Err(ParseError::Incomplete { needed }) => {
            // The command has at least this many bytes: past the threshold, they are held
            // from the worker's input budget before more of them is read.
            let total = buf.len().saturating_add(needed);
            if total > LARGE_COMMAND_BYTES && !cx.hold_input(total) {
                return refuse_large(cx, buf, total, out);
            }
            cx.session.scan = Scan {
                bytes: progress.at,
                items: progress.args,
            };
            Step::Wait(needed)
        }
        Err(ParseError::TooLarge { end, args_left }) => {
            cx.session.scan = Scan::default();
            cx.release_input();
            fail_queue(cx);
            error(out, version(cx), TOO_LARGE);
            cx.session.skip_args = args_left;
            skip_through(cx, buf, end)
        }
        Err(ParseError::Protocol(error)) => {
            cx.session.scan = Scan::default();
            cx.release_input();
            cx.protocol_error();
            error.emit_into(out);
            cx.session.close();
            Step::Done(0)
        }
    }
}

/// Refuses the command at the front of `buf`, whose current argument takes it to `total`
/// bytes, for want of input budget: answered at once, its bytes skipped as they arrive, as a
/// bulk over `-I` is (the parse again with a command limit just under `total` finds where the
/// argument ends and how many follow it).
fn refuse_large(cx: &mut Cx<'_>, buf: &[u8], total: usize, out: &mut Vec<u8>) -> Step {
    cx.session.scan = Scan::default();
    cx.release_input();
    let limits = Limits {
        max_command: total - 1,
        ..limits(cx.config())
    };
    let Err(ParseError::TooLarge { end, args_left }) =
        Command::parse(buf, &limits, &mut Progress::default())
    else {
        // An inline command (its line is at most 64 KiB and never refused for its size):
        // it waits for its bytes, holding nothing.
        return Step::Wait(total - buf.len());
    };
    fail_queue(cx);
    error(out, version(cx), BUSY_INPUT);
    cx.session.skip_args = args_left;
    skip_through(cx, buf, end)
}

/// Consumes the first `end` bytes of a refused command: those in `buf` now, the rest skipped
/// as they arrive.
fn skip_through(cx: &mut Cx<'_>, buf: &[u8], end: u64) -> Step {
    let here = end.min(buf.len() as u64);
    if end > here {
        cx.session.skip(end - here);
    }
    Step::Done(here as usize)
}

/// Skips the next argument of a refused command (see [`ParseError::TooLarge`]).
fn skip_argument(cx: &mut Cx<'_>, buf: &[u8], out: &mut Vec<u8>) -> Step {
    match argument_len(buf) {
        Ok(len) => {
            cx.session.skip_args -= 1;
            skip_through(cx, buf, len)
        }
        Err(ParseError::Incomplete { needed }) => Step::Wait(needed),
        Err(ParseError::Protocol(error)) => {
            cx.session.skip_args = 0;
            cx.protocol_error();
            error.emit_into(out);
            cx.session.close();
            Step::Done(0)
        }
        Err(ParseError::TooLarge { .. }) => {
            cx.session.skip_args = 0;
            Step::Done(0)
        }
    }
}

/// Goes on with the multi-key command at the front of `buf` that stopped part-way.
fn resume_step(cx: &mut Cx<'_>, resume: Resume, buf: &[u8], out: &mut Vec<u8>) -> Step {
    if buf.len() < resume.len {
        // The command is there but not contiguous yet (a receive ring wrapped).
        return Step::Wait(resume.len - buf.len());
    }
    let limits = limits(cx.config());
    // A multibulk command was checked whole before it stopped: `pause` left the parser's
    // progress at its end, so it is taken again without walking its arguments (a command
    // of many keys stops every turn; walking it each time would cost its length per turn).
    let mut progress = match buf.first() {
        Some(b'*') => Progress {
            at: cx.session.scan.bytes,
            args: cx.session.scan.items,
        },
        _ => Progress::default(),
    };
    match Command::parse(&buf[..resume.len], &limits, &mut progress) {
        Ok((command, len)) if len == resume.len => multi_key(cx, &command, len, Some(resume), out),
        // Not the command that stopped (cannot happen: input is only ever consumed from
        // the front); start over with whatever is there.
        _ => {
            cx.session.resume = None;
            cx.session.scan = Scan::default();
            Step::Wait(0)
        }
    }
}

/// Commands [`Ahead::parse`] parses at once.
const AHEAD: usize = super::config::PREFETCH_MAX;

/// The commands at the front of the input parsed ahead, so that each is parsed once: a step
/// that finds none kept for its command parses the next [`AHEAD`] complete ones (multibulk
/// commands of at most 9 arguments: their headers, not their bytes), warms the store for
/// their keys, and executes from what it kept ([`Parsed`]); the steps after it take theirs
/// without a parse.
///
/// A kept command is found by the address of its first byte in the input, so it is valid for
/// one engine call only (the input does not change during a call; the next call's may be other
/// bytes at the same address): [`Ahead::clear`] at the start of each call.
pub(super) struct Ahead {
    kept: [(Parsed, Option<&'static Spec>); AHEAD],
    /// Kept commands, and the next one to take.
    len: usize,
    next: usize,
    /// Where the next one to take starts (an address in the caller's input).
    at: usize,
}

impl Default for Ahead {
    fn default() -> Ahead {
        Ahead {
            kept: [(Parsed::default(), None); AHEAD],
            len: 0,
            next: 0,
            at: 0,
        }
    }
}

impl Ahead {
    /// Forgets what was kept (a new input).
    pub(super) fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
    }

    /// The next kept command, if it is the one at the front of `buf`, and its command's spec.
    #[inline]
    fn take(&mut self, buf: &[u8]) -> Option<(Parsed, Option<&'static Spec>)> {
        if self.next == self.len || buf.as_ptr().addr() != self.at {
            return None;
        }
        let kept = self.kept[self.next];
        self.next += 1;
        self.at += kept.0.len();
        Some(kept)
    }

    /// Parses the complete commands at the front of `buf`, up to [`AHEAD`] of them, keeping
    /// what each parse learnt; when there are several, warms the store for the key of each
    /// that names one first (`GET`, `SET`, `INCR`, ...; the first key of `MGET`, `DEL`, ...)
    /// and that this worker owns, before any of them runs, as the binary adapter does for its
    /// frames: their cache misses (a `GET` hit misses on the table's bucket and on the item's
    /// block) then overlap instead of following one another. The walk ends at the first
    /// other, incomplete or malformed command, which `step` then parses as it comes.
    fn parse(&mut self, cx: &Cx<'_>, buf: &[u8]) {
        self.clear();
        self.at = buf.as_ptr().addr();
        let limits = limits(cx.config());
        let mut keys: [&[u8]; AHEAD] = [&[]; AHEAD];
        let mut found = 0;
        let mut pos = 0;
        while self.len < AHEAD {
            let rest = &buf[pos..];
            // `*1\r\n` to `*9\r\n`: a command that takes a few headers to walk (and, if it is
            // not complete yet, as few to walk again once it is).
            if !matches!(rest, [b'*', b'1'..=b'9', b'\r', b'\n', ..]) {
                break;
            }
            let Ok((command, len)) = Command::parse(rest, &limits, &mut Progress::default()) else {
                break;
            };
            let Some(parsed) = command.parsed(len) else {
                break;
            };
            let spec = command.kept_arg(0).and_then(lookup);
            if let Some(key) = command.kept_arg(1)
                && !key.is_empty()
                && spec.is_some_and(|spec| spec.keys.0 == 1)
                && cx.owner_elsewhere(key).is_none()
            {
                keys[found] = key;
                found += 1;
            }
            self.kept[self.len] = (parsed, spec);
            self.len += 1;
            pos += len;
        }
        if self.len > 1 {
            cx.prefetch(&keys[..found]);
        }
    }
}

/// A command as the log shows it: its words, not its framing (`*3`, `$3`, ...), at most about
/// 200 bytes of them, escaped (`request` is one complete command).
pub(super) fn describe(request: &[u8]) -> String {
    let limits = Limits {
        max_bulk: request.len(),
        max_command: request.len(),
    };
    let mut words = String::new();
    let mut progress = Progress::default();
    if let Ok((command, _)) = Command::parse(request, &limits, &mut progress) {
        for arg in command.args() {
            if words.len() >= 200 {
                break;
            }
            if !words.is_empty() {
                words.push(' ');
            }
            words.push_str(&arg[..arg.len().min(200)].escape_ascii().to_string());
        }
    }
    words
}

/// Executes a command another worker forwarded here (complete: the sender parsed it; `part`
/// is [`WHOLE`], [`TRANSACTION`] for a transaction's queued commands, run as one, or
/// [`UNWATCH`] for watched keys to forget).
pub(super) fn run_forwarded(cx: &mut Cx<'_>, part: u8, request: &[u8], out: &mut Vec<u8>) {
    if part == TRANSACTION {
        let db = cx.session.db;
        enter_db(cx, db);
        run_queue(cx, request, out);
        return;
    }
    if part == UNWATCH {
        release_watched(cx, request);
        return;
    }
    let _ = step(cx, None, request, out);
}

/// The command limits: a bulk string up to the item limit, a command up to twice it.
fn limits(config: &super::config::EngineConfig) -> Limits {
    Limits {
        max_bulk: config.shard.max_item_size,
        max_command: config.max_body() as usize,
    }
}

/// The version the connection speaks.
fn version(cx: &Cx<'_>) -> Version {
    match cx.session.protocol() {
        Some(Protocol::Resp(version)) => version,
        _ => Version::Resp2,
    }
}

/// Arguments a command's dispatch keeps on the stack; longer commands take a `Vec`.
const FEW_ARGS: usize = 16;

/// A command's arguments from one on, as a slice (for the commands that take a variable
/// number of them): on the stack for all but long commands.
struct Tail<'c> {
    few: [&'c [u8]; FEW_ARGS],
    len: usize,
    many: Vec<&'c [u8]>,
}

impl<'c> Tail<'c> {
    /// The arguments of `command` from index `from` on.
    fn of(command: &'c Command<'_>, from: usize) -> Tail<'c> {
        let mut tail = Tail {
            few: [&[]; FEW_ARGS],
            len: 0,
            many: Vec::new(),
        };
        let args = command.args().skip(from);
        if command.argc().saturating_sub(from) <= FEW_ARGS {
            for (slot, arg) in tail.few.iter_mut().zip(args) {
                *slot = arg;
                tail.len += 1;
            }
        } else {
            tail.many = args.collect();
        }
        tail
    }

    fn as_slice(&self) -> &[&'c [u8]] {
        if self.many.is_empty() {
            &self.few[..self.len]
        } else {
            &self.many
        }
    }
}

/// The connection's command at the front of the input, parsed whole: `raw` is its bytes.
/// `spec` is [`lookup`]'s for its name.
fn execute(
    cx: &mut Cx<'_>,
    spec: Option<&'static Spec>,
    command: &Command<'_>,
    raw: &[u8],
    out: &mut Vec<u8>,
) -> Step {
    let len = raw.len();
    let v = version(cx);
    let Some(spec) = spec else {
        cx.protocol_error();
        fail_queue(cx);
        unknown_command(out, v, command);
        return Step::Done(len);
    };
    if !arity_fits(spec.arity, command.argc()) {
        fail_queue(cx);
        error(
            out,
            v,
            &format!("ERR wrong number of arguments for '{}' command", spec.name),
        );
        return Step::Done(len);
    }
    if !matches!(spec.cmd, Cmd::Auth | Cmd::Hello | Cmd::Quit | Cmd::Reset) && !authenticated(cx) {
        fail_queue(cx);
        error(out, v, "NOAUTH Authentication required.");
        return Step::Done(len);
    }
    if cx.session.queued.is_some() && !runs_inside_multi(spec.cmd) {
        queue(cx, spec, command, raw, out);
        return Step::Done(len);
    }
    let now = cx.now;
    cx.classify(kind_of(spec.cmd));
    match spec.cmd {
        Cmd::MGet | Cmd::MSet | Cmd::Del | Cmd::Unlink | Cmd::Exists | Cmd::Touch => {
            if spec.cmd == Cmd::MSet && command.argc() % 2 == 0 {
                error(out, v, "ERR wrong number of arguments for 'mset' command");
                return Step::Done(len);
            }
            return multi_key(cx, command, len, None, out);
        }
        Cmd::DbSize | Cmd::Info | Cmd::FlushAll | Cmd::FlushDb | Cmd::Keys if !cx.may_fan_out() => {
            return Step::Stop(Stop::Blocked);
        }
        // The connection's commands forwarded before it run first, in the databases they
        // were sent in: the swap waits for their replies.
        Cmd::SwapDb if cx.session.forwards_in_flight() > 0 && !cx.session.atomic => {
            return Step::Stop(Stop::Forwards);
        }
        _ => {}
    }
    if spec.cmd == Cmd::BitOp && cx.workers() > 1 && !cx.forwarded() {
        // Every key on one worker, where the command runs.
        let me = cx.config().worker;
        let owners: Vec<usize> = command
            .args()
            .skip(2)
            .map(|key| cx.owner_elsewhere(key).unwrap_or(me))
            .collect();
        if owners.windows(2).any(|w| w[0] != w[1]) {
            error(out, v, CROSSSLOT);
            return Step::Done(len);
        }
        if let Some(&owner) = owners.first()
            && owner != me
        {
            return match cx.forward(owner, WHOLE, raw, out) {
                Ok(()) => Step::Done(len),
                Err(stop) => Step::Stop(stop),
            };
        }
    }
    if spec.keys == (1, 2, 1) && cx.workers() > 1 && !cx.forwarded() {
        // Two keys (RENAME, COPY): both on one worker, where the command runs.
        let me = cx.config().worker;
        let of = |cx: &Cx<'_>, i| cx.owner_elsewhere(command.arg(i).unwrap_or_default());
        let (first, second) = (of(cx, 1), of(cx, 2));
        if first.unwrap_or(me) != second.unwrap_or(me) {
            error(out, v, CROSSSLOT);
            return Step::Done(len);
        }
        if let Some(owner) = first {
            return match cx.forward(owner, WHOLE, raw, out) {
                Ok(()) => Step::Done(len),
                Err(stop) => Step::Stop(stop),
            };
        }
    }
    if spec.keys.0 == spec.keys.1
        && spec.keys.0 > 0
        && let Some(key) = command.arg(spec.keys.0 as usize)
        && let Some(owner) = cx.owner_elsewhere(key)
    {
        return match cx.forward(owner, WHOLE, raw, out) {
            Ok(()) => Step::Done(len),
            Err(stop) => Step::Stop(stop),
        };
    }
    // Arguments by index (the arity was checked; the parse kept the places of the first
    // few); the commands that take a variable number gather theirs with `Tail`.
    let arg = |index: usize| command.arg(index).unwrap_or_default();
    match spec.cmd {
        Cmd::Ping => match command.argc() {
            1 => simple(out, v, "PONG"),
            2 => bulk(out, v, arg(1)),
            _ => error(out, v, "ERR wrong number of arguments for 'ping' command"),
        },
        Cmd::Echo => bulk(out, v, arg(1)),
        Cmd::Get => match cx.get_value(arg(1), now) {
            Some(value) => bulk(out, v, value),
            None => null(out, v),
        },
        Cmd::Set if command.argc() == 3 => set(cx, arg(1), arg(2), &[], out),
        Cmd::Set => set(cx, arg(1), arg(2), Tail::of(command, 3).as_slice(), out),
        Cmd::SetNx => {
            let write = Write::new(StoreMode::Add, arg(1), arg(2));
            match cx.store(write, now) {
                Ok(_) => integer(out, v, 1),
                Err(StoreError::NotStored) => integer(out, v, 0),
                Err(e) => store_error(out, v, e),
            }
        }
        Cmd::SetEx | Cmd::PSetEx => {
            let unit = if spec.cmd == Cmd::SetEx {
                Unit::Seconds
            } else {
                Unit::Millis
            };
            match deadline(arg(2), unit, Base::Relative, now) {
                Err(e) => expire_error(out, v, e, spec.name),
                Ok(at) => {
                    let write = Write {
                        ttl: Ttl::AtMillis(at),
                        ..Write::new(StoreMode::Set, arg(1), arg(3))
                    };
                    match cx.store(write, now) {
                        Ok(_) => ok(out, v),
                        Err(e) => store_error(out, v, e),
                    }
                }
            }
        }
        Cmd::GetSet => set(cx, arg(1), arg(2), &[&b"GET"[..]], out),
        Cmd::GetDel => {
            let found = match cx.get(arg(1), now) {
                Some(item) => {
                    bulk(out, v, item.value);
                    true
                }
                None => {
                    null(out, v);
                    false
                }
            };
            if found {
                let _ = cx.delete(arg(1), 0, now);
            }
        }
        Cmd::GetEx => getex(cx, arg(1), Tail::of(command, 2).as_slice(), out),
        Cmd::MSetNx => return msetnx(cx, command, raw, out),
        Cmd::Incr => arith(cx, arg(1), Ok(1), out),
        Cmd::Decr => arith(cx, arg(1), Ok(-1), out),
        Cmd::IncrBy => arith(cx, arg(1), parse_integer(arg(2)).ok_or(NOT_INTEGER), out),
        Cmd::DecrBy => {
            let delta = match parse_integer(arg(2)) {
                None => Err(NOT_INTEGER),
                Some(i64::MIN) => Err("ERR decrement would overflow"),
                Some(n) => Ok(-n),
            };
            arith(cx, arg(1), delta, out);
        }
        Cmd::Append => append(cx, arg(1), arg(2), out),
        Cmd::IncrByFloat => incr_by_float(cx, arg(1), arg(2), out),
        Cmd::SetRange => setrange(cx, arg(1), arg(2), arg(3), out),
        Cmd::GetRange | Cmd::Substr => getrange(cx, arg(1), arg(2), arg(3), out),
        Cmd::Lcs => lcs(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::SetBit => setbit(cx, arg(1), arg(2), arg(3), out),
        Cmd::GetBit => getbit(cx, arg(1), arg(2), out),
        Cmd::BitCount => bitcount(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::BitPos => bitpos(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::BitOp => bitop(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::BitField => bitfield(cx, Tail::of(command, 1).as_slice(), false, out),
        Cmd::BitFieldRo => bitfield(cx, Tail::of(command, 1).as_slice(), true, out),
        Cmd::StrLen => {
            let len = cx.peek(arg(1), now).map_or(0, |item| item.value.len());
            integer(out, v, len as i64);
        }
        Cmd::Expire | Cmd::PExpire | Cmd::ExpireAt | Cmd::PExpireAt => {
            let (unit, base) = match spec.cmd {
                Cmd::Expire => (Unit::Seconds, Base::Relative),
                Cmd::PExpire => (Unit::Millis, Base::Relative),
                Cmd::ExpireAt => (Unit::Seconds, Base::Absolute),
                _ => (Unit::Millis, Base::Absolute),
            };
            let options = Tail::of(command, 3);
            expire(
                cx,
                spec.name,
                arg(1),
                arg(2),
                options.as_slice(),
                unit,
                base,
                out,
            );
        }
        Cmd::Ttl | Cmd::PTtl => {
            let ttl = match cx.peek(arg(1), now) {
                None => -2,
                Some(item) if item.expiry_ms == 0 => -1,
                Some(item) => {
                    let left = item.expiry_ms.saturating_sub(now.millis()) as i64;
                    if spec.cmd == Cmd::Ttl {
                        (left + 500) / 1000
                    } else {
                        left
                    }
                }
            };
            integer(out, v, ttl);
        }
        Cmd::Persist => {
            let timed = cx.peek(arg(1), now).is_some_and(|item| item.expiry_ms != 0);
            if timed {
                cx.touch(arg(1), Ttl::Exptime(0), now);
            }
            integer(out, v, i64::from(timed));
        }
        Cmd::Type => {
            let held = cx.peek(arg(1), now).is_some();
            simple(out, v, if held { "string" } else { "none" });
        }
        Cmd::DbSize => {
            let sum = Box::new(Sum::new(v));
            every_worker(cx, raw, sum, out, |cx, out| {
                integer(out, v, database_size(cx));
            });
        }
        Cmd::FlushAll | Cmd::FlushDb => {
            let mode = arg(1);
            match command.argc() {
                1 => {}
                2 if mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync") => {}
                _ => {
                    error(out, v, SYNTAX);
                    return Step::Done(len);
                }
            }
            if spec.cmd == Cmd::FlushAll {
                cx.clear(now);
                cx.fan_out(FanOut::Clear, None, None, out);
                ok(out, v);
            } else {
                every_worker(cx, raw, Box::new(Status::new(v)), out, |cx, out| {
                    flush_database(cx);
                    ok(out, v);
                });
            }
        }
        Cmd::Select => select(cx, arg(1), out),
        Cmd::SwapDb => swapdb(cx, arg(1), arg(2), out),
        Cmd::Auth => auth(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::Object => object(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::Memory => memory(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::ExpireTime => expire_time(cx, arg(1), false, out),
        Cmd::PExpireTime => expire_time(cx, arg(1), true, out),
        Cmd::Rename => rename(cx, arg(1), arg(2), false, out),
        Cmd::RenameNx => rename(cx, arg(1), arg(2), true, out),
        Cmd::Copy => copy(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::RandomKey => {
            every_worker(cx, raw, Box::new(FirstFound::new(v)), out, |cx, out| {
                random_key_local(cx, out);
            });
        }
        Cmd::Wait => match (parse_integer(arg(1)), parse_integer(arg(2))) {
            (Some(_), Some(timeout)) if timeout < 0 => error(out, v, "ERR timeout is negative"),
            (Some(_), Some(_)) => integer(out, v, 0),
            _ => error(out, v, NOT_INTEGER),
        },
        Cmd::Function => {
            let mode = arg(2);
            if !arg(1).eq_ignore_ascii_case(b"flush") {
                let message = format!(
                    "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
                    String::from_utf8_lossy(c_string(arg(1), 128))
                );
                error(out, v, &message);
            } else if command.argc() == 2
                || (command.argc() == 3
                    && (mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync")))
            {
                // There are no functions: nothing to flush.
                ok(out, v);
            } else {
                error(out, v, "ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
            }
        }
        Cmd::Scan => {
            if let Some(stop) = scan(cx, Tail::of(command, 1).as_slice(), raw, out) {
                return Step::Stop(stop);
            }
        }
        Cmd::Keys => {
            let pattern = arg(1);
            every_worker(cx, raw, Box::new(Joined::new(v)), out, |cx, out| {
                keys_local(cx, pattern, out);
            });
        }
        Cmd::Time => {
            let since = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Reply::Array(2).emit_into(v, out);
            bulk(out, v, since.as_secs().to_string().as_bytes());
            bulk(out, v, since.subsec_micros().to_string().as_bytes());
        }
        Cmd::Multi => multi(cx, out),
        Cmd::Exec => {
            if let Some(stop) = exec(cx, out) {
                return Step::Stop(stop);
            }
        }
        Cmd::Discard => discard(cx, out),
        Cmd::Watch => {
            if let Some(stop) = watch(cx, Tail::of(command, 1).as_slice(), out) {
                return Step::Stop(stop);
            }
        }
        Cmd::Unwatch => unwatch(cx, out),
        Cmd::Reset => reset(cx, out),
        Cmd::Move => move_key(cx, arg(1), arg(2), out),
        Cmd::Quit => {
            ok(out, v);
            cx.session.close();
        }
        Cmd::Hello => hello(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::Client => client(cx, spec, Tail::of(command, 1).as_slice(), out),
        Cmd::Info => {
            let sections = Sections::of(Tail::of(command, 1).as_slice());
            let control = std::sync::Arc::clone(cx.control());
            cx.gather_snapshots(sections.group(), out, move |snapshot, out| {
                let text = info_text(sections, snapshot, &control.databases, now);
                Reply::Verbatim {
                    format: b"txt",
                    text: &text,
                }
                .emit_into(v, out);
            });
        }
        Cmd::Config => config(cx, spec, Tail::of(command, 1).as_slice(), out),
        Cmd::Command => command_info(spec, Tail::of(command, 1).as_slice(), v, out),
        Cmd::MGet | Cmd::MSet | Cmd::Del | Cmd::Unlink | Cmd::Exists | Cmd::Touch => {}
    }
    Step::Done(len)
}

/// `-ERR unknown command '<name>', with args beginning with: '<arg>' ...`, as Redis 7 builds
/// it: the name and the arguments cut to 128 bytes (and at a NUL, as C strings end), the
/// arguments listed while under 128 bytes.
fn unknown_command(out: &mut Vec<u8>, v: Version, command: &Command<'_>) {
    let mut args = command.args();
    let name = c_string(args.next().unwrap_or_default(), 128);
    let mut listed: Vec<u8> = Vec::new();
    for arg in args {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push(b'\'');
        listed.extend_from_slice(c_string(arg, room));
        listed.extend_from_slice(b"' ");
    }
    let mut message = b"ERR unknown command '".to_vec();
    message.extend_from_slice(name);
    message.extend_from_slice(b"', with args beginning with: ");
    message.extend_from_slice(&listed);
    error_bytes(out, v, &message);
}

/// `bytes` as C's `%.<max>s` prints it: up to a NUL, at most `max` bytes.
fn c_string(bytes: &[u8], max: usize) -> &[u8] {
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(bytes.len())
        .min(max);
    &bytes[..end]
}

// ---- replies ----

fn ok(out: &mut Vec<u8>, v: Version) {
    Reply::Simple(b"OK").emit_into(v, out);
}

fn simple(out: &mut Vec<u8>, v: Version, text: &str) {
    Reply::Simple(text.as_bytes()).emit_into(v, out);
}

fn bulk(out: &mut Vec<u8>, v: Version, bytes: &[u8]) {
    Reply::Bulk(bytes).emit_into(v, out);
}

fn null(out: &mut Vec<u8>, v: Version) {
    Reply::Null.emit_into(v, out);
}

fn integer(out: &mut Vec<u8>, v: Version, n: i64) {
    Reply::Integer(n).emit_into(v, out);
}

fn error(out: &mut Vec<u8>, v: Version, message: &str) {
    error_bytes(out, v, message.as_bytes());
}

/// An error reply; a `\r` or `\n` in it becomes a space, as Redis makes sure of.
fn error_bytes(out: &mut Vec<u8>, v: Version, message: &[u8]) {
    if message.iter().any(|&b| b == b'\r' || b == b'\n') {
        let clean: Vec<u8> = message
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        Reply::Error(&clean).emit_into(v, out);
    } else {
        Reply::Error(message).emit_into(v, out);
    }
}

/// The reply for a store that did not happen.
fn store_error(out: &mut Vec<u8>, v: Version, error: StoreError) {
    let message = match error {
        StoreError::TooLarge => TOO_LARGE,
        StoreError::OutOfMemory => OUT_OF_MEMORY,
        StoreError::KeyTooLong => BAD_KEY,
        // Not reached: the commands that can meet these answer them themselves.
        StoreError::NotFound | StoreError::Exists | StoreError::NotStored => "ERR not stored",
        StoreError::NonNumeric => NOT_INTEGER,
    };
    self::error(out, v, message);
}

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod string_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod transaction_tests;
