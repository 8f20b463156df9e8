//! The RESP adapter: Redis clients' commands (RESP2, and RESP3 after `HELLO 3`), parsed with
//! `protocol::resp`, executed through the core on the same store as memcached's protocols,
//! and answered with `protocol::resp` in Redis 7's words.
//!
//! Values are bytes: a key set here is a memcached item (flags 0) and the other way round.
//! Expiry is kept to the millisecond (`PX`, `PEXPIRE`, `PTTL`). Keys live on the worker that
//! owns them: a command on one key another worker owns is forwarded whole; `MGET`, `MSET`,
//! `DEL`, `UNLINK` and `EXISTS` send each key to its owner (their replies come back in request
//! order, `DEL` and `EXISTS` add up what each owner found); `DBSIZE`, `INFO` and `FLUSHALL` go
//! to every worker. A multi-key command checks the output backlog, the forwarding limits and
//! the turn before each key and goes on from that key on the next call, as a text `get` does.
//!
//! Where memspin answers differently from Redis 7:
//! - strings are the only type (`TYPE` says `string` or `none`); commands of other types, and
//!   anything not in [`COMMANDS`], are unknown commands (the connection goes on);
//! - a key is 1 to 250 bytes (memcached's limit): others are refused
//!   (`ERR key is empty or longer than 250 bytes`) by the commands that store, and not found
//!   by those that read;
//! - an item larger than `-I` is refused (`ERR string exceeds maximum allowed size
//!   (proto-max-bulk-len)`), a bulk string over `-I` closes the connection with Redis's
//!   protocol error, and a full store evicts (CLOCK, close to `allkeys-lru`) rather than refuse;
//! - `MSET` is not atomic across workers (each pair is stored by its key's owner), and
//!   `MSETNX` with keys on several workers is refused with Redis Cluster's `CROSSSLOT` error;
//! - there is one database (`SELECT 0`), no authentication (`HELLO ... AUTH default <any>` is
//!   accepted, as Redis does without `requirepass`), and `CLIENT SETINFO` is checked and
//!   acknowledged but nothing shows it (there is no `CLIENT LIST`).

use protocol::resp::{
    Command, Frame, Limits, ParseError, Parsed, Progress, Reply, Version, parse_integer,
    write_command,
};
use store::{Now, StoreError, StoreMode, Ttl, Write};

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
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const OVERFLOW: &str = "ERR increment or decrement would overflow";
const TOO_LARGE: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
const OUT_OF_MEMORY: &str = "OOM command not allowed when used memory > 'maxmemory'.";
const BAD_KEY: &str = "ERR key is empty or longer than 250 bytes";
const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";
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
    if let Some(resume) = cx.session.resume {
        return resume_step(cx, resume, buf, out);
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
            // What an earlier parse of an incomplete command left is done with.
            cx.session.scan = Scan::default();
            if command.is_empty() {
                return Step::Done(len);
            }
            return execute(cx, spec, &command, &buf[..len], out);
        }
    }
    let limits = limits(cx.core.config());
    let mut progress = Progress {
        at: cx.session.scan.bytes,
        args: cx.session.scan.items,
    };
    match Command::parse(buf, &limits, &mut progress) {
        Ok((command, len)) => {
            cx.session.scan = Scan::default();
            if command.is_empty() {
                return Step::Done(len);
            }
            let spec = lookup(command.arg(0).unwrap_or_default());
            execute(cx, spec, &command, &buf[..len], out)
        }
        Err(ParseError::Incomplete { needed }) => {
            cx.session.scan = Scan {
                bytes: progress.at,
                items: progress.args,
            };
            Step::Wait(needed)
        }
        Err(ParseError::Protocol(error)) => {
            cx.session.scan = Scan::default();
            cx.core.protocol_error();
            error.emit_into(out);
            cx.session.close();
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
    let limits = limits(cx.core.config());
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
const AHEAD: usize = super::core::PREFETCH_MAX;

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
        let limits = limits(cx.core.config());
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
            cx.core.prefetch(&keys[..found]);
        }
    }
}

/// Executes a command another worker forwarded here (complete: the sender parsed it; `_part`
/// is always [`WHOLE`]).
pub(super) fn run_forwarded(cx: &mut Cx<'_>, _part: u8, request: &[u8], out: &mut Vec<u8>) {
    let _ = step(cx, None, request, out);
}

/// The command limits: a bulk string up to the item limit, a command up to twice it.
fn limits(config: &super::EngineConfig) -> Limits {
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

/// What a command does; its name, arity and documentation are in [`COMMANDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Get,
    Set,
    Ping,
    Echo,
    SetNx,
    SetEx,
    PSetEx,
    GetSet,
    GetDel,
    GetEx,
    MGet,
    MSet,
    MSetNx,
    Del,
    Unlink,
    Exists,
    Incr,
    Decr,
    IncrBy,
    DecrBy,
    Append,
    StrLen,
    Expire,
    PExpire,
    ExpireAt,
    PExpireAt,
    Ttl,
    PTtl,
    Persist,
    Type,
    DbSize,
    FlushAll,
    FlushDb,
    Select,
    Quit,
    Hello,
    Client,
    Info,
    Config,
    Command,
}

/// What `COMMAND` reports about a command, and what the adapter checks before running it.
#[derive(Debug)]
struct Spec {
    cmd: Cmd,
    /// Lower case, as Redis names it in errors and in `COMMAND`.
    name: &'static str,
    /// Redis's arity: `n` arguments exactly (the name included), or `-n`: at least `n`.
    arity: i64,
    flags: &'static [&'static str],
    /// First key, last key (-1: the last argument), step between keys; all 0 without keys.
    keys: (i64, i64, i64),
    acl: &'static [&'static str],
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    subcommands: &'static [Sub],
}

/// A subcommand of `CLIENT`, `CONFIG` or `COMMAND`.
#[derive(Debug)]
struct Sub {
    /// Lower case, as `client|setname` names it in errors.
    name: &'static str,
    arity: i64,
    summary: &'static str,
}

macro_rules! spec {
    ($cmd:ident, $name:literal, $arity:literal, [$($flag:literal),*], ($f:literal, $l:literal, $s:literal),
     [$($acl:literal),*], $group:literal, $since:literal, $complexity:literal, $summary:literal) => {
        Spec {
            cmd: Cmd::$cmd,
            name: $name,
            arity: $arity,
            flags: &[$($flag),*],
            keys: ($f, $l, $s),
            acl: &[$($acl),*],
            group: $group,
            since: $since,
            summary: $summary,
            complexity: $complexity,
            subcommands: &[],
        }
    };
}

/// Every command memspin serves over RESP, the most frequent first (they are looked up in
/// order).
#[rustfmt::skip]
static COMMANDS: &[Spec] = &[
    spec!(Get, "get", 2, ["readonly", "fast"], (1, 1, 1), ["@read", "@string", "@fast"], "string", "1.0.0", "O(1)", "The value held under a key, or null"),
    spec!(Set, "set", -3, ["write", "denyoom"], (1, 1, 1), ["@write", "@string", "@slow"], "string", "1.0.0", "O(1)", "Stores a value under a key, with conditions and an expiry if asked"),
    spec!(Ping, "ping", -1, ["fast"], (0, 0, 0), ["@fast", "@connection"], "connection", "1.0.0", "O(1)", "PONG, or the argument given"),
    spec!(MGet, "mget", -2, ["readonly", "fast"], (1, -1, 1), ["@read", "@string", "@fast"], "string", "1.0.0", "O(N) in the keys", "The values held under several keys"),
    spec!(MSet, "mset", -3, ["write", "denyoom"], (1, -1, 2), ["@write", "@string", "@slow"], "string", "1.0.1", "O(N) in the keys", "Stores several keys and values"),
    spec!(Incr, "incr", 2, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Adds one to an integer value"),
    spec!(Del, "del", -2, ["write"], (1, -1, 1), ["@keyspace", "@write", "@slow"], "generic", "1.0.0", "O(N) in the keys", "Removes keys; says how many were there"),
    spec!(Echo, "echo", 2, ["fast"], (0, 0, 0), ["@fast", "@connection"], "connection", "1.0.0", "O(1)", "The argument, back"),
    spec!(SetNx, "setnx", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Stores a value under a key that is not held"),
    spec!(SetEx, "setex", 4, ["write", "denyoom"], (1, 1, 1), ["@write", "@string", "@slow"], "string", "2.0.0", "O(1)", "Stores a value that expires in so many seconds"),
    spec!(PSetEx, "psetex", 4, ["write", "denyoom"], (1, 1, 1), ["@write", "@string", "@slow"], "string", "2.6.0", "O(1)", "Stores a value that expires in so many milliseconds"),
    spec!(GetSet, "getset", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Stores a value and returns the one it replaced"),
    spec!(GetDel, "getdel", 2, ["write", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "6.2.0", "O(1)", "Returns a value and removes its key"),
    spec!(GetEx, "getex", -2, ["write", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "6.2.0", "O(1)", "Returns a value, and sets or removes its expiry"),
    spec!(MSetNx, "msetnx", -3, ["write", "denyoom"], (1, -1, 2), ["@write", "@string", "@slow"], "string", "1.0.1", "O(N) in the keys", "Stores several keys and values if none of the keys is held"),
    spec!(Unlink, "unlink", -2, ["write", "fast"], (1, -1, 1), ["@keyspace", "@write", "@fast"], "generic", "4.0.0", "O(N) in the keys", "Removes keys, as DEL does"),
    spec!(Exists, "exists", -2, ["readonly", "fast"], (1, -1, 1), ["@keyspace", "@read", "@fast"], "generic", "1.0.0", "O(N) in the keys", "How many of the keys are held"),
    spec!(Decr, "decr", 2, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Subtracts one from an integer value"),
    spec!(IncrBy, "incrby", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Adds an amount to an integer value"),
    spec!(DecrBy, "decrby", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Subtracts an amount from an integer value"),
    spec!(Append, "append", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "2.0.0", "O(1)", "Adds bytes to the end of a value"),
    spec!(StrLen, "strlen", 2, ["readonly", "fast"], (1, 1, 1), ["@read", "@string", "@fast"], "string", "2.2.0", "O(1)", "The length of a value"),
    spec!(Expire, "expire", -3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "1.0.0", "O(1)", "Sets an expiry so many seconds from now"),
    spec!(PExpire, "pexpire", -3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "2.6.0", "O(1)", "Sets an expiry so many milliseconds from now"),
    spec!(ExpireAt, "expireat", -3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "1.2.0", "O(1)", "Sets an expiry at a unix time in seconds"),
    spec!(PExpireAt, "pexpireat", -3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "2.6.0", "O(1)", "Sets an expiry at a unix time in milliseconds"),
    spec!(Ttl, "ttl", 2, ["readonly", "fast"], (1, 1, 1), ["@keyspace", "@read", "@fast"], "generic", "1.0.0", "O(1)", "Seconds until a key expires"),
    spec!(PTtl, "pttl", 2, ["readonly", "fast"], (1, 1, 1), ["@keyspace", "@read", "@fast"], "generic", "2.6.0", "O(1)", "Milliseconds until a key expires"),
    spec!(Persist, "persist", 2, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "2.2.0", "O(1)", "Removes a key's expiry"),
    spec!(Type, "type", 2, ["readonly", "fast"], (1, 1, 1), ["@keyspace", "@read", "@fast"], "generic", "1.0.0", "O(1)", "The type of a key's value: string, or none"),
    spec!(DbSize, "dbsize", 1, ["readonly", "fast"], (0, 0, 0), ["@keyspace", "@read", "@fast"], "server", "1.0.0", "O(W) in the workers", "How many keys are held"),
    spec!(FlushAll, "flushall", -1, ["write"], (0, 0, 0), ["@keyspace", "@write", "@slow", "@dangerous"], "server", "1.0.0", "O(W) in the workers", "Removes every key"),
    spec!(FlushDb, "flushdb", -1, ["write"], (0, 0, 0), ["@keyspace", "@write", "@slow", "@dangerous"], "server", "1.0.0", "O(W) in the workers", "Removes every key (there is one database)"),
    spec!(Select, "select", 2, ["loading", "stale", "fast"], (0, 0, 0), ["@fast", "@connection"], "connection", "1.0.0", "O(1)", "Picks database 0, the only one"),
    spec!(Quit, "quit", -1, ["allow_busy", "fast"], (0, 0, 0), ["@fast", "@connection"], "connection", "1.0.0", "O(1)", "Closes the connection"),
    spec!(Hello, "hello", -1, ["noscript", "loading", "stale", "fast"], (0, 0, 0), ["@fast", "@connection"], "connection", "6.0.0", "O(1)", "Picks RESP2 or RESP3, and describes the server"),
    Spec {
        subcommands: &[
            Sub { name: "setname", arity: 3, summary: "Names the connection" },
            Sub { name: "getname", arity: 2, summary: "The connection's name" },
            Sub { name: "id", arity: 2, summary: "The connection's number" },
            Sub { name: "setinfo", arity: 4, summary: "Records the client library's name or version" },
        ],
        ..spec!(Client, "client", -2, [], (0, 0, 0), ["@slow"], "connection", "2.4.0", "O(1)", "The connection's name, number and library")
    },
    spec!(Info, "info", -1, ["loading", "stale"], (0, 0, 0), ["@slow", "@dangerous"], "server", "1.0.0", "O(W) in the workers", "Figures about the server, by section"),
    Spec {
        subcommands: &[Sub { name: "get", arity: -3, summary: "The parameters whose names match the patterns" }],
        ..spec!(Config, "config", -2, [], (0, 0, 0), ["@slow"], "server", "2.0.0", "O(1)", "Configuration parameters")
    },
    Spec {
        subcommands: &[
            Sub { name: "count", arity: 2, summary: "How many commands there are" },
            Sub { name: "docs", arity: -2, summary: "What the commands do" },
            Sub { name: "info", arity: -2, summary: "What the commands are: arity, flags, keys" },
        ],
        ..spec!(Command, "command", -1, ["loading", "stale"], (0, 0, 0), ["@slow", "@connection"], "server", "2.8.13", "O(N) in the commands", "What the server knows of its commands")
    },
];

/// The command named `name` (any case). Every name is lower-case letters, so a byte is the
/// name's letter in either case exactly when it is that letter with the case bit (0x20) set.
fn lookup(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS.iter().find(|spec| {
        spec.name.len() == name.len()
            && spec
                .name
                .bytes()
                .zip(name)
                .all(|(letter, &b)| b | 0x20 == letter)
    })
}

/// Whether `argc` arguments (the name included) fit `arity`.
fn arity_fits(arity: i64, argc: usize) -> bool {
    let argc = argc as i64;
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
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
        cx.core.protocol_error();
        unknown_command(out, v, command);
        return Step::Done(len);
    };
    if !arity_fits(spec.arity, command.argc()) {
        error(
            out,
            v,
            &format!("ERR wrong number of arguments for '{}' command", spec.name),
        );
        return Step::Done(len);
    }
    let now = cx.now;
    cx.core.classify(kind_of(spec.cmd));
    match spec.cmd {
        Cmd::MGet | Cmd::MSet | Cmd::Del | Cmd::Unlink | Cmd::Exists => {
            if spec.cmd == Cmd::MSet && command.argc() % 2 == 0 {
                error(out, v, "ERR wrong number of arguments for 'mset' command");
                return Step::Done(len);
            }
            return multi_key(cx, command, len, None, out);
        }
        Cmd::DbSize | Cmd::Info | Cmd::FlushAll | Cmd::FlushDb if !cx.may_fan_out() => {
            return Step::Stop(Stop::Blocked);
        }
        _ => {}
    }
    if spec.keys.0 == 1
        && spec.keys.1 == 1
        && let Some(key) = command.arg(1)
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
        Cmd::Get => match cx.core.get_value(arg(1), now) {
            Some(value) => bulk(out, v, value),
            None => null(out, v),
        },
        Cmd::Set if command.argc() == 3 => set(cx, arg(1), arg(2), &[], out),
        Cmd::Set => set(cx, arg(1), arg(2), Tail::of(command, 3).as_slice(), out),
        Cmd::SetNx => {
            let write = Write::new(StoreMode::Add, arg(1), arg(2));
            match cx.core.store(write, now) {
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
                    match cx.core.store(write, now) {
                        Ok(_) => ok(out, v),
                        Err(e) => store_error(out, v, e),
                    }
                }
            }
        }
        Cmd::GetSet => set(cx, arg(1), arg(2), &[&b"GET"[..]], out),
        Cmd::GetDel => {
            let found = match cx.core.get(arg(1), now) {
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
                let _ = cx.core.delete(arg(1), 0, now);
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
        Cmd::StrLen => {
            let len = cx.core.peek(arg(1), now).map_or(0, |item| item.value.len());
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
            let ttl = match cx.core.peek(arg(1), now) {
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
            let timed = cx
                .core
                .peek(arg(1), now)
                .is_some_and(|item| item.expiry_ms != 0);
            if timed {
                cx.core.touch(arg(1), Ttl::Exptime(0), now);
            }
            integer(out, v, i64::from(timed));
        }
        Cmd::Type => {
            let held = cx.core.peek(arg(1), now).is_some();
            simple(out, v, if held { "string" } else { "none" });
        }
        Cmd::DbSize => {
            let own = cx.core.snapshot(Group::General, now);
            let mut count = DbSize {
                keys: 0,
                version: v,
            };
            if cx.workers() > 1 {
                cx.fan_out(
                    FanOut::Snapshot(Group::General),
                    Some(Box::new(count)),
                    Some(Part::Snapshot(&own)),
                    out,
                );
            } else {
                count.add(Part::Snapshot(&own));
                count.finish(out);
            }
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
            cx.core.clear(now);
            cx.fan_out(FanOut::Clear, None, None, out);
            ok(out, v);
        }
        Cmd::Select => match parse_integer(arg(1)) {
            None => error(out, v, NOT_INTEGER),
            Some(0) => ok(out, v),
            Some(_) => error(out, v, "ERR DB index is out of range"),
        },
        Cmd::Quit => {
            ok(out, v);
            cx.session.close();
        }
        Cmd::Hello => hello(cx, Tail::of(command, 1).as_slice(), out),
        Cmd::Client => client(cx, spec, Tail::of(command, 1).as_slice(), out),
        Cmd::Info => {
            let own = cx.core.snapshot(Group::General, now);
            let mut info = InfoGather {
                snapshot: None,
                sections: Sections::of(Tail::of(command, 1).as_slice()),
                version: v,
                now,
            };
            if cx.workers() > 1 {
                cx.fan_out(
                    FanOut::Snapshot(Group::General),
                    Some(Box::new(info)),
                    Some(Part::Snapshot(&own)),
                    out,
                );
            } else {
                info.add(Part::Snapshot(&own));
                info.finish(out);
            }
        }
        Cmd::Config => config(cx, spec, Tail::of(command, 1).as_slice(), out),
        Cmd::Command => command_info(spec, Tail::of(command, 1).as_slice(), v, out),
        Cmd::MGet | Cmd::MSet | Cmd::Del | Cmd::Unlink | Cmd::Exists => {}
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

// ---- expiry ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    /// From now (`EX`, `PX`, `EXPIRE`).
    Relative,
    /// A unix time (`EXAT`, `PXAT`, `EXPIREAT`).
    Absolute,
}

/// Why an expiry argument was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpireError {
    /// Not an integer.
    NotInteger,
    /// Out of range, or (where a positive one is needed) not positive.
    Invalid,
}

fn expire_error(out: &mut Vec<u8>, v: Version, e: ExpireError, name: &str) {
    match e {
        ExpireError::NotInteger => error(out, v, NOT_INTEGER),
        ExpireError::Invalid => error(
            out,
            v,
            &format!("ERR invalid expire time in '{name}' command"),
        ),
    }
}

/// The unix millisecond an expiry argument gives, as `SET ... EX` and friends read it: a
/// positive integer whose milliseconds, from now where relative, fit in an `i64`.
fn deadline(text: &[u8], unit: Unit, base: Base, now: Now) -> Result<u64, ExpireError> {
    let n = parse_integer(text).ok_or(ExpireError::NotInteger)?;
    if n <= 0 {
        return Err(ExpireError::Invalid);
    }
    at_millis(n, unit, base, now)
        .filter(|&at| at > 0)
        .map(|at| at as u64)
        .ok_or(ExpireError::Invalid)
}

/// `n` in `unit` from `base` as a unix millisecond, `None` when it does not fit in an `i64`
/// (Redis's `invalid expire time`); may be negative or past.
fn at_millis(n: i64, unit: Unit, base: Base, now: Now) -> Option<i64> {
    let ms = match unit {
        Unit::Seconds => n.checked_mul(1000)?,
        Unit::Millis => n,
    };
    match base {
        Base::Absolute => Some(ms),
        Base::Relative => ms.checked_add(i64::try_from(now.millis()).ok()?),
    }
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]` (and `GETSET`, which is
/// `SET ... GET`): options are checked first (syntax), then the expiry's value.
fn set(cx: &mut Cx<'_>, key: &[u8], value: &[u8], options: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    #[derive(PartialEq)]
    enum Cond {
        Any,
        Nx,
        Xx,
    }
    let mut cond = Cond::Any;
    let mut get = false;
    let mut keep_ttl = false;
    // The expiry's unit, base, value and option name.
    let mut expiry: Option<(Unit, Base, &[u8], &[u8])> = None;
    let mut i = 0;
    while i < options.len() {
        let option = options[i];
        let next = options.get(i + 1);
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        if is("nx") && cond != Cond::Xx {
            cond = Cond::Nx;
        } else if is("xx") && cond != Cond::Nx {
            cond = Cond::Xx;
        } else if is("get") {
            get = true;
        } else if is("keepttl") && expiry.is_none() {
            keep_ttl = true;
        } else if (is("ex") || is("px") || is("exat") || is("pxat"))
            // Redis takes the same expiry option again (the last one counts), not another.
            && expiry.is_none_or(|(_, _, _, name)| option.eq_ignore_ascii_case(name))
            && !keep_ttl
            && let Some(&next) = next
        {
            let (unit, base) = if is("ex") {
                (Unit::Seconds, Base::Relative)
            } else if is("px") {
                (Unit::Millis, Base::Relative)
            } else if is("exat") {
                (Unit::Seconds, Base::Absolute)
            } else {
                (Unit::Millis, Base::Absolute)
            };
            expiry = Some((unit, base, next, option));
            i += 1;
        } else {
            error(out, v, SYNTAX);
            return;
        }
        i += 1;
    }
    let ttl = match expiry {
        Some((unit, base, text, _)) => match deadline(text, unit, base, now) {
            Ok(at) => Ttl::AtMillis(at),
            Err(e) => return expire_error(out, v, e, "set"),
        },
        None if keep_ttl => Ttl::Keep,
        None => Ttl::Exptime(0),
    };
    // `GET`: the old value is the reply, whatever the condition says.
    let start = out.len();
    let mut found = None;
    if get {
        match cx.core.get(key, now) {
            Some(item) => {
                bulk(out, v, item.value);
                found = Some(true);
            }
            None => {
                null(out, v);
                found = Some(false);
            }
        }
    }
    let mode = match cond {
        Cond::Any => StoreMode::Set,
        Cond::Nx => StoreMode::Add,
        Cond::Xx => StoreMode::Replace,
    };
    match cx.core.store(
        Write {
            ttl,
            ..Write::new(mode, key, value)
        },
        now,
    ) {
        Ok(_) if found.is_none() => ok(out, v),
        Ok(_) => {}
        Err(StoreError::NotStored) => {
            if found.is_none() {
                null(out, v);
            }
        }
        Err(e) => {
            out.truncate(start);
            store_error(out, v, e);
        }
    }
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`.
fn getex(cx: &mut Cx<'_>, key: &[u8], options: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let mut persist = false;
    // The expiry's unit, base, value and option name.
    let mut expiry: Option<(Unit, Base, &[u8], &[u8])> = None;
    let mut i = 0;
    while i < options.len() {
        let option = options[i];
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        // As for `SET`, an option may come again (the last one counts), another may not.
        if is("persist") && expiry.is_none() {
            persist = true;
        } else if (is("ex") || is("px") || is("exat") || is("pxat"))
            && expiry.is_none_or(|(_, _, _, name)| option.eq_ignore_ascii_case(name))
            && !persist
            && let Some(&next) = options.get(i + 1)
        {
            let unit = if is("ex") || is("exat") {
                Unit::Seconds
            } else {
                Unit::Millis
            };
            let base = if is("ex") || is("px") {
                Base::Relative
            } else {
                Base::Absolute
            };
            expiry = Some((unit, base, next, option));
            i += 1;
        } else {
            return error(out, v, SYNTAX);
        }
        i += 1;
    }
    let ttl = match expiry {
        Some((unit, base, text, _)) => match deadline(text, unit, base, now) {
            Ok(at) => Some(Ttl::AtMillis(at)),
            // Redis looks the key up before it reads the expiry: a missing key is nil.
            Err(_) if cx.core.peek(key, now).is_none() => return null(out, v),
            Err(e) => return expire_error(out, v, e, "getex"),
        },
        None if persist => Some(Ttl::Exptime(0)),
        None => None,
    };
    let item = match ttl {
        // A past time returns the value this once, and the key is gone.
        Some(ttl) => cx.core.touch(key, ttl, now),
        None => cx.core.get(key, now),
    };
    match item {
        Some(item) => bulk(out, v, item.value),
        None => null(out, v),
    }
}

/// `INCR`, `DECR`, `INCRBY`, `DECRBY`: the value (0 when missing) read as Redis reads an
/// integer, plus `delta`; the key keeps its flags and expiry.
fn arith(cx: &mut Cx<'_>, key: &[u8], delta: Result<i64, &str>, out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let delta = match delta {
        Ok(delta) => delta,
        Err(message) => return error(out, v, message),
    };
    let (current, flags) = match cx.core.peek(key, now) {
        None => (0, 0),
        Some(item) => match parse_integer(item.value) {
            Some(n) => (n, item.flags),
            None => return error(out, v, NOT_INTEGER),
        },
    };
    let Some(next) = current.checked_add(delta) else {
        return error(out, v, OVERFLOW);
    };
    let mut digits = Vec::with_capacity(20);
    protocol::text::push_i64(&mut digits, next);
    let write = Write {
        flags,
        ttl: Ttl::Keep,
        ..Write::new(StoreMode::Set, key, &digits)
    };
    match cx.core.store(write, now) {
        Ok(_) => integer(out, v, next),
        Err(e) => store_error(out, v, e),
    }
}

/// `APPEND key value`: appends, or stores the value when the key is missing; replies the new
/// length.
fn append(cx: &mut Cx<'_>, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let mut result = cx
        .core
        .store(Write::new(StoreMode::Append, key, value), now);
    if result == Err(StoreError::NotStored) {
        result = cx.core.vivify(Write::new(StoreMode::Set, key, value), now);
    }
    match result {
        Ok(_) => {
            let len = cx
                .core
                .peek(key, now)
                .map_or(value.len(), |item| item.value.len());
            integer(out, v, len as i64);
        }
        Err(e) => store_error(out, v, e),
    }
}

/// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT key time [NX|XX|GT|LT]`: 1 when the expiry was
/// set (a time not in the future deletes the key), 0 when the key is missing or a condition
/// says no.
#[allow(clippy::too_many_arguments)]
fn expire(
    cx: &mut Cx<'_>,
    name: &str,
    key: &[u8],
    time: &[u8],
    options: &[&[u8]],
    unit: Unit,
    base: Base,
    out: &mut Vec<u8>,
) {
    let v = version(cx);
    let now = cx.now;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in options {
        match option.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                let mut message = b"ERR Unsupported option ".to_vec();
                message.extend_from_slice(option);
                return error_bytes(out, v, &message);
            }
        }
    }
    if nx && (xx || gt || lt) {
        return error(
            out,
            v,
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        );
    }
    if gt && lt {
        return error(
            out,
            v,
            "ERR GT and LT options at the same time are not compatible",
        );
    }
    let Some(n) = parse_integer(time) else {
        return error(out, v, NOT_INTEGER);
    };
    let Some(at) = at_millis(n, unit, base, now) else {
        return expire_error(out, v, ExpireError::Invalid, name);
    };
    let Some(item) = cx.core.peek(key, now) else {
        return integer(out, v, 0);
    };
    // No expiry counts as forever.
    let current = if item.expiry_ms == 0 {
        None
    } else {
        Some(item.expiry_ms as i64)
    };
    let allowed = (!nx || current.is_none())
        && (!xx || current.is_some())
        && (!gt || current.is_some_and(|c| at > c))
        && (!lt || current.is_none_or(|c| at < c));
    if !allowed {
        return integer(out, v, 0);
    }
    if at <= now.millis() as i64 {
        let _ = cx.core.delete(key, 0, now);
    } else {
        cx.core.touch(key, Ttl::AtMillis(at as u64), now);
    }
    integer(out, v, 1);
}

// ---- several keys ----

/// The code a stopped multi-key command keeps.
fn multi_code(cmd: Cmd) -> u8 {
    match cmd {
        Cmd::MGet => 1,
        Cmd::Del => 2,
        Cmd::Unlink => 3,
        Cmd::Exists => 4,
        _ => 5,
    }
}

/// The kind `stats latency` times a command as when it goes to another worker (one executed
/// here counts the store operations it makes).
fn kind_of(cmd: Cmd) -> Kind {
    match cmd {
        Cmd::Get | Cmd::MGet | Cmd::GetEx | Cmd::StrLen => Kind::Get,
        Cmd::Set
        | Cmd::SetNx
        | Cmd::SetEx
        | Cmd::PSetEx
        | Cmd::GetSet
        | Cmd::MSet
        | Cmd::MSetNx
        | Cmd::Append => Kind::Set,
        Cmd::GetDel | Cmd::Del | Cmd::Unlink => Kind::Delete,
        Cmd::Incr | Cmd::Decr | Cmd::IncrBy | Cmd::DecrBy => Kind::Arith,
        Cmd::Expire | Cmd::PExpire | Cmd::ExpireAt | Cmd::PExpireAt | Cmd::Persist => Kind::Touch,
        Cmd::FlushAll | Cmd::FlushDb => Kind::Flush,
        _ => Kind::Other,
    }
}

fn multi_cmd(code: u8) -> Cmd {
    match code {
        1 => Cmd::MGet,
        2 => Cmd::Del,
        3 => Cmd::Unlink,
        4 => Cmd::Exists,
        _ => Cmd::MSet,
    }
}

/// `MGET`, `MSET`, `DEL`, `UNLINK`, `EXISTS`, key by key: each key (or pair) another worker
/// owns goes to it. Before each key but the first of this call the output backlog, the
/// forwarding limits and the turn are checked, and the command stops there when one says so
/// (its place kept in the session), to go on with that key on a later call.
fn multi_key(
    cx: &mut Cx<'_>,
    command: &Command<'_>,
    len: usize,
    resume: Option<Resume>,
    out: &mut Vec<u8>,
) -> Step {
    let v = version(cx);
    let now = cx.now;
    let mut state = match resume {
        Some(resume) => resume,
        None => {
            let name = command.arg(0).unwrap_or_default();
            let cmd = lookup(name).map_or(Cmd::MGet, |spec| spec.cmd);
            let mut args = command.args();
            args.next();
            if cmd == Cmd::MGet {
                Reply::Array(command.argc() - 1).emit_into(v, out);
            }
            Resume {
                len,
                at: args.offset(),
                code: multi_code(cmd),
                arg: 0,
                index: 1,
                gather: None,
            }
        }
    };
    let cmd = multi_cmd(state.code);
    cx.core.classify(kind_of(cmd));
    let name: &[u8] = match cmd {
        Cmd::Exists => b"EXISTS",
        Cmd::Unlink => b"UNLINK",
        _ => b"DEL",
    };
    let mut args = command.args_from(state.at, state.index);
    let mut first = true;
    loop {
        let at = args.offset();
        if !first && let Some(stop) = cx.pause(out) {
            return pause(cx, state, command.argc(), at, stop);
        }
        let Some(key) = args.next() else {
            break;
        };
        let value = if cmd == Cmd::MSet {
            args.next().unwrap_or_default()
        } else {
            &[][..]
        };
        first = false;
        if let Some(owner) = cx.owner_elsewhere(key) {
            let sent = match cmd {
                Cmd::MGet => {
                    let request = [&b"GET"[..], key];
                    let len = protocol::resp::command_len(&request);
                    cx.forward_written(owner, WHOLE, len, out, |bytes| {
                        write_command(bytes, &request)
                    })
                }
                _ => {
                    let seq = match state.gather {
                        Some(seq) => Some(seq),
                        None if cmd == Cmd::MSet => cx.gather(
                            Box::new(Status {
                                error: None,
                                version: v,
                            }),
                            out,
                        ),
                        None => cx.gather(
                            Box::new(Sum {
                                total: 0,
                                version: v,
                            }),
                            out,
                        ),
                    };
                    state.gather = seq;
                    let set = [&b"SET"[..], key, value];
                    let one = [name, key];
                    let request: &[&[u8]] = if cmd == Cmd::MSet { &set } else { &one };
                    let len = protocol::resp::command_len(request);
                    match seq {
                        Some(seq) => cx.forward_part(seq, owner, WHOLE, len, |bytes| {
                            write_command(bytes, request)
                        }),
                        None => Err(Stop::Blocked),
                    }
                }
            };
            if let Err(stop) = sent {
                return pause(cx, state, command.argc(), at, stop);
            }
        } else {
            match cmd {
                Cmd::MGet => match cx.core.get(key, now) {
                    Some(item) => bulk(out, v, item.value),
                    None => null(out, v),
                },
                Cmd::MSet => {
                    if let Err(e) = cx.core.store(Write::new(StoreMode::Set, key, value), now) {
                        // Reported once the command is done, in place of `+OK`.
                        state.arg = store_error_code(e);
                    }
                }
                Cmd::Exists => state.arg += i64::from(cx.core.peek(key, now).is_some()),
                _ => state.arg += i64::from(cx.core.delete(key, 0, now).is_ok()),
            }
        }
        state.index += if cmd == Cmd::MSet { 2 } else { 1 };
        cx.session.spend_turn();
    }
    if cmd != Cmd::MGet {
        let mut own = Vec::with_capacity(24);
        match (cmd, store_error_of(state.arg)) {
            (Cmd::MSet, Some(e)) => store_error(&mut own, v, e),
            (Cmd::MSet, None) => ok(&mut own, v),
            _ => integer(&mut own, v, state.arg),
        }
        match state.gather {
            Some(seq) => cx.seal(seq, Part::Bytes(&own), out),
            None => out.extend_from_slice(&own),
        }
    }
    cx.session.resume = None;
    cx.session.scan = Scan::default();
    Step::Done(state.len)
}

/// Stops a multi-key command (of `argc` arguments) before the argument at `at`; nothing of it
/// is consumed. The parser's progress is left at the command's end, for its next call.
fn pause(cx: &mut Cx<'_>, mut state: Resume, argc: usize, at: usize, stop: Stop) -> Step {
    state.at = at;
    cx.session.resume = Some(state);
    cx.session.scan = Scan {
        bytes: state.len,
        items: argc,
    };
    Step::Stop(stop)
}

/// An `MSET` store error kept until the command is done (0: none).
fn store_error_code(e: StoreError) -> i64 {
    match e {
        StoreError::TooLarge => 1,
        StoreError::OutOfMemory => 2,
        _ => 3,
    }
}

fn store_error_of(code: i64) -> Option<StoreError> {
    match code {
        0 => None,
        1 => Some(StoreError::TooLarge),
        2 => Some(StoreError::OutOfMemory),
        _ => Some(StoreError::KeyTooLong),
    }
}

/// `MSETNX key value ...`: all stored, or none when any key is held. Atomic only on one
/// worker: keys of one other worker go there whole, keys of several are refused (`CROSSSLOT`).
fn msetnx(cx: &mut Cx<'_>, command: &Command<'_>, raw: &[u8], out: &mut Vec<u8>) -> Step {
    let v = version(cx);
    let now = cx.now;
    let len = raw.len();
    if command.argc() % 2 == 0 {
        error(out, v, "ERR wrong number of arguments for 'msetnx' command");
        return Step::Done(len);
    }
    let pairs: Vec<&[u8]> = command.args().skip(1).collect();
    let owners: Vec<Option<usize>> = pairs
        .chunks(2)
        .map(|pair| cx.owner_elsewhere(pair[0]))
        .collect();
    match owners.first().copied().flatten() {
        _ if owners.windows(2).any(|w| w[0] != w[1]) => {
            error(out, v, CROSSSLOT);
            return Step::Done(len);
        }
        Some(owner) => {
            return match cx.forward(owner, WHOLE, raw, out) {
                Ok(()) => Step::Done(len),
                Err(stop) => Step::Stop(stop),
            };
        }
        None => {}
    }
    if pairs
        .chunks(2)
        .any(|pair| cx.core.peek(pair[0], now).is_some())
    {
        integer(out, v, 0);
        return Step::Done(len);
    }
    for pair in pairs.chunks(2) {
        if let Err(e) = cx
            .core
            .store(Write::new(StoreMode::Set, pair[0], pair[1]), now)
        {
            store_error(out, v, e);
            return Step::Done(len);
        }
    }
    integer(out, v, 1);
    Step::Done(len)
}

/// `MSET` over several workers: `+OK` once every worker stored its pairs, or the first error
/// one of them gave.
#[derive(Debug)]
struct Status {
    error: Option<Vec<u8>>,
    version: Version,
}

impl Gather for Status {
    fn add(&mut self, part: Part<'_>) {
        if let Part::Bytes(bytes) = part
            && self.error.is_none()
            && bytes.first() == Some(&b'-')
        {
            self.error = Some(bytes.to_vec());
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        match &self.error {
            Some(error) => out.extend_from_slice(error),
            None => ok(out, self.version),
        }
    }
}

/// Adds up the integer replies of several workers (`DEL`, `UNLINK`, `EXISTS`).
#[derive(Debug)]
struct Sum {
    total: i64,
    version: Version,
}

impl Gather for Sum {
    fn add(&mut self, part: Part<'_>) {
        if let Part::Bytes(bytes) = part
            && let Ok((Frame::Integer(n), _)) = Frame::parse(bytes)
        {
            self.total = self.total.saturating_add(n);
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        integer(out, self.version, self.total);
    }
}

/// `DBSIZE`: every worker's item count.
#[derive(Debug)]
struct DbSize {
    keys: u64,
    version: Version,
}

impl Gather for DbSize {
    fn add(&mut self, part: Part<'_>) {
        if let Part::Snapshot(snapshot) = part {
            self.keys += snapshot.shard.curr_items;
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        integer(out, self.version, self.keys as i64);
    }
}

// ---- the connection ----

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`: switches the connection
/// to RESP2 or RESP3 and describes the server, in the new version.
fn hello(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let mut wanted = v;
    if let Some(&proto) = args.first() {
        wanted = match parse_integer(proto) {
            None => {
                return error(
                    out,
                    v,
                    "ERR Protocol version is not an integer or out of range",
                );
            }
            Some(2) => Version::Resp2,
            Some(3) => Version::Resp3,
            Some(_) => return error(out, v, "NOPROTO unsupported protocol version"),
        };
    }
    let mut name = None;
    let mut user_ok = true;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = args[i];
        if option.eq_ignore_ascii_case(b"auth") && more >= 2 {
            // No users or passwords: Redis's `default` user without `requirepass`.
            user_ok = args[i + 1] == b"default";
            i += 2;
        } else if option.eq_ignore_ascii_case(b"setname") && more >= 1 {
            name = Some(args[i + 1]);
            i += 1;
        } else {
            let mut message = b"ERR Syntax error in HELLO option '".to_vec();
            message.extend_from_slice(option);
            message.push(b'\'');
            return error_bytes(out, v, &message);
        }
        i += 1;
    }
    if !user_ok {
        return error(
            out,
            v,
            "WRONGPASS invalid username-password pair or user is disabled.",
        );
    }
    if let Some(name) = name
        && !set_name(cx, name)
    {
        return error(out, v, BAD_NAME);
    }
    cx.session.switch(Protocol::Resp(wanted));
    let id = connection_id(cx);
    let v = wanted;
    Reply::Map(7).emit_into(v, out);
    for (key, value) in [("server", "redis"), ("version", REDIS_VERSION)] {
        bulk(out, v, key.as_bytes());
        bulk(out, v, value.as_bytes());
    }
    bulk(out, v, b"proto");
    integer(out, v, if v == Version::Resp3 { 3 } else { 2 });
    bulk(out, v, b"id");
    integer(out, v, id as i64);
    for (key, value) in [("mode", "standalone"), ("role", "master")] {
        bulk(out, v, key.as_bytes());
        bulk(out, v, value.as_bytes());
    }
    bulk(out, v, b"modules");
    Reply::Array(0).emit_into(v, out);
}

/// The connection's number, as `stats conns` shows it.
fn connection_id(cx: &mut Cx<'_>) -> u64 {
    cx.session.number(cx.core.control())
}

/// Whether `value` may be a client name or attribute: printable ASCII without spaces.
fn printable(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// Names the connection (an empty name removes it); false for a name Redis refuses.
fn set_name(cx: &mut Cx<'_>, name: &[u8]) -> bool {
    if !printable(name) {
        return false;
    }
    cx.session.name = if name.is_empty() {
        None
    } else {
        Some(name.into())
    };
    true
}

/// The subcommand of `spec` named `name`, with its arity checked: `Err` holds the error reply.
fn subcommand(spec: &'static Spec, args: &[&[u8]]) -> Result<&'static Sub, String> {
    let name = args.first().copied().unwrap_or_default();
    let Some(sub) = spec
        .subcommands
        .iter()
        .find(|sub| sub.name.as_bytes().eq_ignore_ascii_case(name))
    else {
        return Err(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            String::from_utf8_lossy(c_string(name, 128)),
            spec.name.to_ascii_uppercase()
        ));
    };
    if !arity_fits(sub.arity, args.len() + 1) {
        return Err(format!(
            "ERR wrong number of arguments for '{}|{}' command",
            spec.name, sub.name
        ));
    }
    Ok(sub)
}

/// `CLIENT SETNAME | GETNAME | ID | SETINFO`.
fn client(cx: &mut Cx<'_>, spec: &'static Spec, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let sub = match subcommand(spec, args) {
        Ok(sub) => sub,
        Err(message) => return error(out, v, &message),
    };
    match sub.name {
        "setname" => {
            if set_name(cx, args[1]) {
                ok(out, v);
            } else {
                error(out, v, BAD_NAME);
            }
        }
        "getname" => match cx.session.name.as_deref() {
            Some(name) => bulk(out, v, name),
            None => null(out, v),
        },
        "id" => {
            let id = connection_id(cx);
            integer(out, v, id as i64);
        }
        _ => {
            // SETINFO LIB-NAME | LIB-VER <value>: checked and acknowledged.
            let attribute = args[1];
            if !attribute.eq_ignore_ascii_case(b"lib-name")
                && !attribute.eq_ignore_ascii_case(b"lib-ver")
            {
                let mut message = b"ERR Unrecognized option '".to_vec();
                message.extend_from_slice(attribute);
                message.push(b'\'');
                return error_bytes(out, v, &message);
            }
            if !printable(args[2]) {
                let mut message = b"ERR ".to_vec();
                message.extend_from_slice(attribute);
                message
                    .extend_from_slice(b" cannot contain spaces, newlines or special characters.");
                return error_bytes(out, v, &message);
            }
            ok(out, v);
        }
    }
}

// ---- the server ----

/// `CONFIG GET pattern ...`: the parameters memspin has a value for, matched as Redis matches
/// them (glob-style, any case).
fn config(cx: &mut Cx<'_>, spec: &'static Spec, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    if let Err(message) = subcommand(spec, args) {
        return error(out, v, &message);
    }
    let config = cx.core.config();
    // The whole budget, as `cache_memlimit` last set it.
    let memory = match cx.core.control().memory_limit_bytes() {
        0 => (config.shard.memory_limit_bytes * config.threads.max(1)) as u64,
        whole => whole,
    }
    .to_string();
    let params: [(&str, String); 8] = [
        ("appendonly", "no".into()),
        ("databases", "1".into()),
        ("io-threads", config.threads.to_string()),
        ("maxclients", config.conn_limit.to_string()),
        ("maxmemory", memory),
        ("maxmemory-policy", "allkeys-lru".into()),
        ("proto-max-bulk-len", config.shard.max_item_size.to_string()),
        ("save", String::new()),
    ];
    let patterns = &args[1..];
    let matched: Vec<&(&str, String)> = params
        .iter()
        .filter(|(name, _)| patterns.iter().any(|p| glob(p, name.as_bytes())))
        .collect();
    Reply::Map(matched.len()).emit_into(v, out);
    for (name, value) in matched {
        bulk(out, v, name.as_bytes());
        bulk(out, v, value.as_bytes());
    }
}

/// Whether `text` matches the glob `pattern` (`*`, `?`, `[...]` with ranges and `^`, `\`
/// escapes), ignoring case, as Redis's `stringmatchlen` with `nocase`.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let lower = |b: u8| b.to_ascii_lowercase();
    let (mut p, mut t) = (0, 0);
    // Where to go on from after the last `*`.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let mut advanced = false;
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    advanced = true;
                }
                b'[' => {
                    let mut q = p + 1;
                    let negate = pattern.get(q) == Some(&b'^');
                    if negate {
                        q += 1;
                    }
                    let mut hit = false;
                    while q < pattern.len() && pattern[q] != b']' {
                        if pattern[q] == b'\\' && q + 1 < pattern.len() {
                            q += 1;
                            hit |= lower(pattern[q]) == lower(text[t]);
                        } else if q + 2 < pattern.len()
                            && pattern[q + 1] == b'-'
                            && pattern[q + 2] != b']'
                        {
                            let (a, b) = (lower(pattern[q]), lower(pattern[q + 2]));
                            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                            hit |= (lo..=hi).contains(&lower(text[t]));
                            q += 2;
                        } else {
                            hit |= lower(pattern[q]) == lower(text[t]);
                        }
                        q += 1;
                    }
                    if hit != negate {
                        p = (q + 1).min(pattern.len());
                        t += 1;
                        advanced = true;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if lower(pattern[p + 1]) == lower(text[t]) {
                        p += 2;
                        t += 1;
                        advanced = true;
                    }
                }
                c => {
                    if lower(c) == lower(text[t]) {
                        p += 1;
                        t += 1;
                        advanced = true;
                    }
                }
            }
        }
        if !advanced {
            match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            }
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO [name ...]`, `COMMAND DOCS [name ...]`.
fn command_info(spec: &'static Spec, args: &[&[u8]], v: Version, out: &mut Vec<u8>) {
    if args.is_empty() {
        Reply::Array(COMMANDS.len()).emit_into(v, out);
        for spec in COMMANDS {
            write_info(spec, v, out);
        }
        return;
    }
    let sub = match subcommand(spec, args) {
        Ok(sub) => sub,
        Err(message) => return error(out, v, &message),
    };
    let names = &args[1..];
    match sub.name {
        "count" => integer(out, v, COMMANDS.len() as i64),
        "info" if names.is_empty() => {
            Reply::Array(COMMANDS.len()).emit_into(v, out);
            for spec in COMMANDS {
                write_info(spec, v, out);
            }
        }
        "info" => {
            Reply::Array(names.len()).emit_into(v, out);
            for name in names {
                match lookup(name) {
                    Some(spec) => write_info(spec, v, out),
                    None => null(out, v),
                }
            }
        }
        _ => {
            let specs: Vec<&Spec> = if names.is_empty() {
                COMMANDS.iter().collect()
            } else {
                names.iter().filter_map(|name| lookup(name)).collect()
            };
            Reply::Map(specs.len()).emit_into(v, out);
            for spec in specs {
                bulk(out, v, spec.name.as_bytes());
                write_docs(spec, v, out);
            }
        }
    }
}

/// One command's `COMMAND INFO` entry: name, arity, flags, first key, last key, step, ACL
/// categories, tips, key specifications (none given) and subcommands.
fn write_info(spec: &Spec, v: Version, out: &mut Vec<u8>) {
    Reply::Array(10).emit_into(v, out);
    bulk(out, v, spec.name.as_bytes());
    integer(out, v, spec.arity);
    Reply::Set(spec.flags.len()).emit_into(v, out);
    for flag in spec.flags {
        simple(out, v, flag);
    }
    integer(out, v, spec.keys.0);
    integer(out, v, spec.keys.1);
    integer(out, v, spec.keys.2);
    Reply::Set(spec.acl.len()).emit_into(v, out);
    for category in spec.acl {
        simple(out, v, category);
    }
    Reply::Set(0).emit_into(v, out);
    Reply::Array(0).emit_into(v, out);
    Reply::Array(spec.subcommands.len()).emit_into(v, out);
    for sub in spec.subcommands {
        Reply::Array(10).emit_into(v, out);
        bulk(out, v, format!("{}|{}", spec.name, sub.name).as_bytes());
        integer(out, v, sub.arity);
        Reply::Set(0).emit_into(v, out);
        for _ in 0..3 {
            integer(out, v, 0);
        }
        Reply::Set(0).emit_into(v, out);
        Reply::Set(0).emit_into(v, out);
        Reply::Array(0).emit_into(v, out);
        Reply::Array(0).emit_into(v, out);
    }
}

/// One command's `COMMAND DOCS` entry: summary, since, group, complexity, and its
/// subcommands' entries.
fn write_docs(spec: &Spec, v: Version, out: &mut Vec<u8>) {
    let fields = [
        ("summary", spec.summary),
        ("since", spec.since),
        ("group", spec.group),
        ("complexity", spec.complexity),
    ];
    let with_subs = !spec.subcommands.is_empty();
    Reply::Map(fields.len() + usize::from(with_subs)).emit_into(v, out);
    for (key, value) in fields {
        bulk(out, v, key.as_bytes());
        bulk(out, v, value.as_bytes());
    }
    if with_subs {
        bulk(out, v, b"subcommands");
        Reply::Map(spec.subcommands.len()).emit_into(v, out);
        for sub in spec.subcommands {
            bulk(out, v, format!("{}|{}", spec.name, sub.name).as_bytes());
            Reply::Map(3).emit_into(v, out);
            for (key, value) in [
                ("summary", sub.summary),
                ("since", spec.since),
                ("group", spec.group),
            ] {
                bulk(out, v, key.as_bytes());
                bulk(out, v, value.as_bytes());
            }
        }
    }
}

/// The `INFO` sections asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sections(u8);

impl Sections {
    const SERVER: u8 = 1;
    const CLIENTS: u8 = 2;
    const MEMORY: u8 = 4;
    const STATS: u8 = 8;
    const KEYSPACE: u8 = 16;
    const ALL: u8 = 31;

    /// The sections `INFO` names (none: the default ones, which are all memspin has).
    fn of(names: &[&[u8]]) -> Sections {
        if names.is_empty() {
            return Sections(Sections::ALL);
        }
        let mut bits = 0;
        for name in names {
            bits |= match name.to_ascii_lowercase().as_slice() {
                b"server" => Sections::SERVER,
                b"clients" => Sections::CLIENTS,
                b"memory" => Sections::MEMORY,
                b"stats" => Sections::STATS,
                b"keyspace" => Sections::KEYSPACE,
                b"all" | b"default" | b"everything" => Sections::ALL,
                _ => 0,
            };
        }
        Sections(bits)
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// `INFO`: every worker's figures, summed, under Redis's names.
#[derive(Debug)]
struct InfoGather {
    snapshot: Option<Snapshot>,
    sections: Sections,
    version: Version,
    now: Now,
}

impl Gather for InfoGather {
    fn add(&mut self, part: Part<'_>) {
        if let Part::Snapshot(snapshot) = part {
            match self.snapshot.as_mut() {
                Some(sum) => sum.merge(snapshot),
                None => self.snapshot = Some(snapshot.clone()),
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let text = match &self.snapshot {
            Some(snapshot) => info_text(self.sections, snapshot, self.now),
            None => Vec::new(),
        };
        Reply::Verbatim {
            format: b"txt",
            text: &text,
        }
        .emit_into(self.version, out);
    }
}

/// The `INFO` text: `# Section` headers, `name:value` lines, an empty line between sections.
fn info_text(sections: Sections, s: &Snapshot, now: Now) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut text = String::new();
    let mut section = |name: &str, lines: &[(&str, String)]| {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let _ = write!(text, "# {name}\r\n");
        for (key, value) in lines {
            let _ = write!(text, "{key}:{value}\r\n");
        }
    };
    let uptime = now.secs().saturating_sub(s.started_unix_secs);
    if sections.has(Sections::SERVER) {
        section(
            "Server",
            &[
                ("redis_version", REDIS_VERSION.into()),
                ("redis_mode", "standalone".into()),
                ("memspin_version", s.version.into()),
                ("arch_bits", usize::BITS.to_string()),
                ("process_id", std::process::id().to_string()),
                ("uptime_in_seconds", uptime.to_string()),
                ("uptime_in_days", (uptime / 86_400).to_string()),
                ("io_threads_active", "0".into()),
                ("server_threads", s.threads.to_string()),
            ],
        );
    }
    if sections.has(Sections::CLIENTS) {
        section(
            "Clients",
            &[
                ("connected_clients", s.info.curr_connections.to_string()),
                ("maxclients", s.conn_limit.to_string()),
                ("blocked_clients", "0".into()),
            ],
        );
    }
    if sections.has(Sections::MEMORY) {
        let used = s.shard.heap_bytes;
        section(
            "Memory",
            &[
                ("used_memory", used.to_string()),
                ("used_memory_human", human(used)),
                ("used_memory_dataset", s.shard.bytes.to_string()),
                ("maxmemory", s.limit_maxbytes.to_string()),
                ("maxmemory_human", human(s.limit_maxbytes)),
                ("maxmemory_policy", "allkeys-lru".into()),
            ],
        );
    }
    if sections.has(Sections::STATS) {
        let c = &s.counters;
        section(
            "Stats",
            &[
                (
                    "total_connections_received",
                    s.info.total_connections.to_string(),
                ),
                ("total_commands_processed", c.requests.to_string()),
                ("total_net_input_bytes", c.bytes_read.to_string()),
                ("total_net_output_bytes", c.bytes_written.to_string()),
                (
                    "rejected_connections",
                    s.info.rejected_connections.to_string(),
                ),
                ("evicted_keys", s.shard.evictions.to_string()),
                ("keyspace_hits", s.shard.get_hits.to_string()),
                ("keyspace_misses", s.shard.get_misses.to_string()),
            ],
        );
    }
    if sections.has(Sections::KEYSPACE) {
        let keys = s.shard.curr_items;
        let db0 = format!("keys={keys},expires={},avg_ttl=0", s.shard.curr_expiring);
        if keys > 0 {
            section("Keyspace", &[("db0", db0)]);
        } else {
            section("Keyspace", &[]);
        }
    }
    text.into_bytes()
}

/// Bytes as Redis's `bytesToHuman` writes them: `512B`, `1.50K`, `64.00M`, ...
fn human(bytes: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "P"),
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size {
            return format!("{:.2}{unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests;
