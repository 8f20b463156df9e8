//! The commands memspin serves over RESP: what each does ([`Cmd`]), and what `COMMAND` reports
//! and the dispatch checks about it ([`Spec`]: name, arity, keys, flags, documentation).

/// What a command does; its name, arity and documentation are in [`COMMANDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cmd {
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
    Touch,
    Incr,
    Decr,
    IncrBy,
    DecrBy,
    Append,
    StrLen,
    IncrByFloat,
    SetRange,
    GetRange,
    Substr,
    Lcs,
    SetBit,
    GetBit,
    BitCount,
    BitPos,
    BitOp,
    BitField,
    BitFieldRo,
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
    SwapDb,
    Move,
    Scan,
    Keys,
    ExpireTime,
    PExpireTime,
    Rename,
    RenameNx,
    Copy,
    RandomKey,
    Wait,
    Function,
    Object,
    Memory,
    Auth,
    Time,
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    Reset,
    Quit,
    Hello,
    Client,
    Info,
    Config,
    Command,
}

/// What `COMMAND` reports about a command, and what the adapter checks before running it.
#[derive(Debug)]
pub(super) struct Spec {
    pub(super) cmd: Cmd,
    /// Lower case, as Redis names it in errors and in `COMMAND`.
    pub(super) name: &'static str,
    /// Redis's arity: `n` arguments exactly (the name included), or `-n`: at least `n`.
    pub(super) arity: i64,
    pub(super) flags: &'static [&'static str],
    /// First key, last key (-1: the last argument), step between keys; all 0 without keys.
    pub(super) keys: (i64, i64, i64),
    pub(super) acl: &'static [&'static str],
    pub(super) group: &'static str,
    pub(super) since: &'static str,
    pub(super) summary: &'static str,
    pub(super) complexity: &'static str,
    pub(super) subcommands: &'static [Sub],
}

/// A subcommand of `CLIENT`, `CONFIG` or `COMMAND`.
#[derive(Debug)]
pub(super) struct Sub {
    /// Lower case, as `client|setname` names it in errors.
    pub(super) name: &'static str,
    pub(super) arity: i64,
    pub(super) summary: &'static str,
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
pub(super) static COMMANDS: &[Spec] = &[
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
    spec!(Touch, "touch", -2, ["readonly", "fast"], (1, -1, 1), ["@keyspace", "@read", "@fast"], "generic", "3.2.1", "O(N) in the keys", "Marks keys accessed; says how many are held"),
    spec!(Decr, "decr", 2, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Subtracts one from an integer value"),
    spec!(IncrBy, "incrby", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Adds an amount to an integer value"),
    spec!(DecrBy, "decrby", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "1.0.0", "O(1)", "Subtracts an amount from an integer value"),
    spec!(Append, "append", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "2.0.0", "O(1)", "Adds bytes to the end of a value"),
    spec!(StrLen, "strlen", 2, ["readonly", "fast"], (1, 1, 1), ["@read", "@string", "@fast"], "string", "2.2.0", "O(1)", "The length of a value"),
    spec!(IncrByFloat, "incrbyfloat", 3, ["write", "denyoom", "fast"], (1, 1, 1), ["@write", "@string", "@fast"], "string", "2.6.0", "O(1)", "Adds a decimal amount to a numeric value"),
    spec!(SetRange, "setrange", 4, ["write", "denyoom"], (1, 1, 1), ["@write", "@string", "@slow"], "string", "2.2.0", "O(N) in the value", "Overwrites part of a value from an offset"),
    spec!(GetRange, "getrange", 4, ["readonly"], (1, 1, 1), ["@read", "@string", "@slow"], "string", "2.4.0", "O(N) in the range", "The bytes of a value between two offsets"),
    spec!(Substr, "substr", 4, ["readonly"], (1, 1, 1), ["@read", "@string", "@slow"], "string", "1.0.0", "O(N) in the range", "The bytes of a value between two offsets, as GETRANGE"),
    spec!(Lcs, "lcs", -3, ["readonly"], (1, 2, 1), ["@read", "@string", "@slow"], "string", "7.0.0", "O(N*M) in the two values", "The longest common subsequence of two values"),
    spec!(SetBit, "setbit", 4, ["write", "denyoom"], (1, 1, 1), ["@write", "@bitmap", "@slow"], "bitmap", "2.2.0", "O(N) in the value", "Sets or clears one bit of a value"),
    spec!(GetBit, "getbit", 3, ["readonly", "fast"], (1, 1, 1), ["@read", "@bitmap", "@fast"], "bitmap", "2.2.0", "O(1)", "One bit of a value"),
    spec!(BitCount, "bitcount", -2, ["readonly"], (1, 1, 1), ["@read", "@bitmap", "@slow"], "bitmap", "2.6.0", "O(N) in the range", "The set bits of a value, or of a byte or bit range of it"),
    spec!(BitPos, "bitpos", -3, ["readonly"], (1, 1, 1), ["@read", "@bitmap", "@slow"], "bitmap", "2.8.7", "O(N) in the range", "The first set or clear bit of a value in a range"),
    spec!(BitOp, "bitop", -4, ["write", "denyoom"], (2, -1, 1), ["@write", "@bitmap", "@slow"], "bitmap", "2.6.0", "O(N) in the values", "AND, OR, XOR or NOT of values, stored under a key"),
    spec!(BitField, "bitfield", -2, ["write", "denyoom"], (1, 1, 1), ["@write", "@bitmap", "@slow"], "bitmap", "3.2.0", "O(1) for each field", "Reads, sets and adds to integer fields of a value"),
    spec!(BitFieldRo, "bitfield_ro", -2, ["readonly", "fast"], (1, 1, 1), ["@read", "@bitmap", "@fast"], "bitmap", "6.0.0", "O(1) for each field", "Reads integer fields of a value"),
    spec!(Expire, "expire", -3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "1.0.0", "O(1)", "Sets an expiry so many seconds from now"),
    spec!(PExpire, "pexpire", -3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "2.6.0", "O(1)", "Sets an expiry so many milliseconds from now"),
    spec!(ExpireAt, "expireat", -3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "1.2.0", "O(1)", "Sets an expiry at a unix time in seconds"),
    spec!(PExpireAt, "pexpireat", -3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "2.6.0", "O(1)", "Sets an expiry at a unix time in milliseconds"),
    spec!(Ttl, "ttl", 2, ["readonly", "fast"], (1, 1, 1), ["@keyspace", "@read", "@fast"], "generic", "1.0.0", "O(1)", "Seconds until a key expires"),
    spec!(PTtl, "pttl", 2, ["readonly", "fast"], (1, 1, 1), ["@keyspace", "@read", "@fast"], "generic", "2.6.0", "O(1)", "Milliseconds until a key expires"),
    spec!(Persist, "persist", 2, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "2.2.0", "O(1)", "Removes a key's expiry"),
    spec!(Type, "type", 2, ["readonly", "fast"], (1, 1, 1), ["@keyspace", "@read", "@fast"], "generic", "1.0.0", "O(1)", "The type of a key's value: string, or none"),
    spec!(DbSize, "dbsize", 1, ["readonly", "fast"], (0, 0, 0), ["@keyspace", "@read", "@fast"], "server", "1.0.0", "O(W) in the workers", "How many keys the selected database holds"),
    spec!(FlushAll, "flushall", -1, ["write"], (0, 0, 0), ["@keyspace", "@write", "@slow", "@dangerous"], "server", "1.0.0", "O(W) in the workers", "Removes every key"),
    spec!(FlushDb, "flushdb", -1, ["write"], (0, 0, 0), ["@keyspace", "@write", "@slow", "@dangerous"], "server", "1.0.0", "O(W) in the workers", "Removes every key of the selected database"),
    spec!(Select, "select", 2, ["loading", "stale", "fast"], (0, 0, 0), ["@fast", "@connection"], "connection", "1.0.0", "O(1)", "Picks the database the connection's keys are in"),
    spec!(SwapDb, "swapdb", 3, ["write", "fast"], (0, 0, 0), ["@keyspace", "@write", "@fast", "@dangerous"], "server", "4.0.0", "O(1)", "Swaps the keys of two databases, for every connection"),
    spec!(Move, "move", 3, ["write", "fast"], (1, 1, 1), ["@keyspace", "@write", "@fast"], "generic", "1.0.0", "O(1)", "Moves a key to another database"),
    spec!(Scan, "scan", -2, ["readonly"], (0, 0, 0), ["@keyspace", "@read", "@slow"], "generic", "2.8.0", "O(N) in the worker's keys per call", "Iterates over the keys of the database"),
    spec!(Keys, "keys", 2, ["readonly"], (0, 0, 0), ["@keyspace", "@read", "@slow", "@dangerous"], "generic", "1.0.0", "O(N) in the keys", "The keys that match a pattern"),
    spec!(ExpireTime, "expiretime", 2, ["readonly", "fast"], (1, 1, 1), ["@keyspace", "@read", "@fast"], "generic", "7.0.0", "O(1)", "When a key expires, in unix seconds"),
    spec!(PExpireTime, "pexpiretime", 2, ["readonly", "fast"], (1, 1, 1), ["@keyspace", "@read", "@fast"], "generic", "7.0.0", "O(1)", "When a key expires, in unix milliseconds"),
    spec!(Rename, "rename", 3, ["write"], (1, 2, 1), ["@keyspace", "@write", "@slow"], "generic", "1.0.0", "O(1)", "Gives a key another name"),
    spec!(RenameNx, "renamenx", 3, ["write", "fast"], (1, 2, 1), ["@keyspace", "@write", "@fast"], "generic", "1.0.0", "O(1)", "Gives a key another name that is not held"),
    spec!(Copy, "copy", -3, ["write", "denyoom"], (1, 2, 1), ["@keyspace", "@write", "@slow"], "generic", "6.2.0", "O(N) in the value", "Copies a key, to another database if asked"),
    spec!(RandomKey, "randomkey", 1, ["readonly"], (0, 0, 0), ["@keyspace", "@read", "@slow"], "generic", "1.0.0", "O(N) in the worker's buckets at worst", "A key of the database"),
    spec!(Wait, "wait", 3, [], (0, 0, 0), ["@slow", "@connection"], "generic", "3.0.0", "O(1)", "Replicas that acknowledged: none, there are none"),
    spec!(Function, "function", -2, [], (0, 0, 0), ["@slow", "@scripting"], "scripting", "7.0.0", "O(1)", "FUNCTION FLUSH: there are no functions"),
    spec!(Object, "object", -2, [], (2, 2, 1), ["@keyspace", "@read", "@slow"], "generic", "2.2.3", "O(1)", "OBJECT ENCODING | IDLETIME | FREQ | REFCOUNT of a key"),
    spec!(Memory, "memory", -2, [], (2, 2, 1), ["@slow"], "server", "4.0.0", "O(1)", "MEMORY USAGE: the bytes a key's item takes"),
    spec!(Auth, "auth", -2, ["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], (0, 0, 0), ["@fast", "@connection"], "connection", "1.0.0", "O(1)", "Authenticates the connection"),
    spec!(Time, "time", 1, ["loading", "stale", "fast"], (0, 0, 0), ["@fast"], "server", "2.6.0", "O(1)", "The server's time: seconds and microseconds"),
    spec!(Multi, "multi", 1, ["noscript", "loading", "stale", "fast", "allow_busy"], (0, 0, 0), ["@fast", "@transaction"], "transactions", "1.2.0", "O(1)", "Starts a transaction"),
    spec!(Exec, "exec", 1, ["noscript", "loading", "stale", "skip_slowlog"], (0, 0, 0), ["@slow", "@transaction"], "transactions", "1.2.0", "O(N) in the queued commands", "Runs the queued commands as one"),
    spec!(Discard, "discard", 1, ["noscript", "loading", "stale", "fast", "allow_busy"], (0, 0, 0), ["@fast", "@transaction"], "transactions", "2.0.0", "O(N) in the queued commands", "Drops the queued commands"),
    spec!(Watch, "watch", -2, ["noscript", "loading", "stale", "fast", "allow_busy"], (1, -1, 1), ["@fast", "@transaction"], "transactions", "2.2.0", "O(1) for every key", "Makes the next EXEC fail if a key changes"),
    spec!(Unwatch, "unwatch", 1, ["noscript", "loading", "stale", "fast", "allow_busy"], (0, 0, 0), ["@fast", "@transaction"], "transactions", "2.2.0", "O(1)", "Forgets the watched keys"),
    spec!(Reset, "reset", 1, ["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], (0, 0, 0), ["@fast", "@connection"], "connection", "6.2.0", "O(1)", "Resets the connection"),
    spec!(Quit, "quit", -1, ["allow_busy", "fast"], (0, 0, 0), ["@fast", "@connection"], "connection", "1.0.0", "O(1)", "Closes the connection"),
    spec!(Hello, "hello", -1, ["noscript", "loading", "stale", "fast"], (0, 0, 0), ["@fast", "@connection"], "connection", "6.0.0", "O(1)", "Picks RESP2 or RESP3, and describes the server"),
    Spec {
        subcommands: &[
            Sub { name: "setname", arity: 3, summary: "Names the connection" },
            Sub { name: "getname", arity: 2, summary: "The connection's name" },
            Sub { name: "id", arity: 2, summary: "The connection's number" },
            Sub { name: "list", arity: -2, summary: "Every Redis client connection, one line each" },
            Sub { name: "kill", arity: -3, summary: "Closes the Redis client connections a filter matches" },
            Sub { name: "setinfo", arity: 4, summary: "Records the client library's name or version" },
            Sub { name: "no-evict", arity: 3, summary: "Accepted: eviction is the store's" },
            Sub { name: "no-touch", arity: 3, summary: "Accepted: access times are the store's" },
            Sub { name: "info", arity: 2, summary: "The connection: id, name, database, transaction" },
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

/// The command named `name` (any case). Every name is lower-case letters and `_`, so a byte
/// is the name's letter in either case exactly when it is that letter with the case bit
/// (0x20) set, and is `_` only when it is `_`.
pub(super) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS.iter().find(|spec| {
        spec.name.len() == name.len()
            && spec
                .name
                .bytes()
                .zip(name)
                .all(|(letter, &b)| b == letter || (letter != b'_' && b | 0x20 == letter))
    })
}

/// Whether `argc` arguments (the name included) fit `arity`.
pub(super) fn arity_fits(arity: i64, argc: usize) -> bool {
    let argc = argc as i64;
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}
