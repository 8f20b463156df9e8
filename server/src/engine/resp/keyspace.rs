//! Keys as such: expiry (`EXPIRE` and its kin, and the deadlines `SET`, `GETEX` and `SETEX`
//! share), the commands on several keys (`MGET`, `MSET`, `DEL`, `UNLINK`, `EXISTS`, `TOUCH`),
//! which send each key to its owner and stop part-way when they must, `SCAN` and `KEYS`, and
//! the commands from one key to another (`RENAME`, `COPY`) or about one (`OBJECT`, `MEMORY`).

use super::*;

// ---- expiry ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    Seconds,
    Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Base {
    /// From now (`EX`, `PX`, `EXPIRE`).
    Relative,
    /// A unix time (`EXAT`, `PXAT`, `EXPIREAT`).
    Absolute,
}

/// Why an expiry argument was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExpireError {
    /// Not an integer.
    NotInteger,
    /// Out of range, or (where a positive one is needed) not positive.
    Invalid,
}

pub(super) fn expire_error(out: &mut Vec<u8>, v: Version, e: ExpireError, name: &str) {
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
pub(super) fn deadline(text: &[u8], unit: Unit, base: Base, now: Now) -> Result<u64, ExpireError> {
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
pub(super) fn at_millis(n: i64, unit: Unit, base: Base, now: Now) -> Option<i64> {
    let ms = match unit {
        Unit::Seconds => n.checked_mul(1000)?,
        Unit::Millis => n,
    };
    match base {
        Base::Absolute => Some(ms),
        Base::Relative => ms.checked_add(i64::try_from(now.millis()).ok()?),
    }
}

/// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT key time [NX|XX|GT|LT]`: 1 when the expiry was
/// set (a time not in the future deletes the key), 0 when the key is missing or a condition
/// says no.
#[allow(clippy::too_many_arguments)]
pub(super) fn expire(
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
    let Some(item) = cx.peek(key, now) else {
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
        let _ = cx.delete(key, 0, now);
    } else {
        cx.touch(key, Ttl::AtMillis(at as u64), now);
    }
    integer(out, v, 1);
}

// ---- several keys ----

/// The code a stopped multi-key command keeps.
pub(super) fn multi_code(cmd: Cmd) -> u8 {
    match cmd {
        Cmd::MGet => 1,
        Cmd::Del => 2,
        Cmd::Unlink => 3,
        Cmd::Exists => 4,
        Cmd::Touch => 6,
        _ => 5,
    }
}

/// The kind `stats latency` times a command as when it goes to another worker (one executed
/// here counts the store operations it makes).
pub(super) fn kind_of(cmd: Cmd) -> Kind {
    match cmd {
        Cmd::Get
        | Cmd::MGet
        | Cmd::GetEx
        | Cmd::StrLen
        | Cmd::GetRange
        | Cmd::Substr
        | Cmd::GetBit
        | Cmd::BitCount
        | Cmd::BitPos
        | Cmd::BitFieldRo
        | Cmd::Lcs => Kind::Get,
        Cmd::Set
        | Cmd::SetNx
        | Cmd::SetEx
        | Cmd::PSetEx
        | Cmd::GetSet
        | Cmd::MSet
        | Cmd::MSetNx
        | Cmd::Append
        | Cmd::SetRange
        | Cmd::SetBit
        | Cmd::BitOp
        | Cmd::BitField => Kind::Set,
        Cmd::GetDel | Cmd::Del | Cmd::Unlink => Kind::Delete,
        Cmd::Incr | Cmd::Decr | Cmd::IncrBy | Cmd::DecrBy | Cmd::IncrByFloat => Kind::Arith,
        Cmd::Expire | Cmd::PExpire | Cmd::ExpireAt | Cmd::PExpireAt | Cmd::Persist => Kind::Touch,
        Cmd::FlushAll | Cmd::FlushDb => Kind::Flush,
        _ => Kind::Other,
    }
}

pub(super) fn multi_cmd(code: u8) -> Cmd {
    match code {
        1 => Cmd::MGet,
        2 => Cmd::Del,
        3 => Cmd::Unlink,
        4 => Cmd::Exists,
        6 => Cmd::Touch,
        _ => Cmd::MSet,
    }
}

/// `MGET`, `MSET`, `DEL`, `UNLINK`, `EXISTS`, `TOUCH`, key by key: each key (or pair) another worker
/// owns goes to it. Before each key but the first of this call the output backlog, the
/// forwarding limits and the turn are checked, and the command stops there when one says so
/// (its place kept in the session), to go on with that key on a later call.
pub(super) fn multi_key(
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
    cx.classify(kind_of(cmd));
    let name: &[u8] = match cmd {
        Cmd::Exists => b"EXISTS",
        Cmd::Touch => b"TOUCH",
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
                Cmd::MGet => match cx.get(key, now) {
                    Some(item) => bulk(out, v, item.value),
                    None => null(out, v),
                },
                Cmd::MSet => {
                    if let Err(e) = cx.store(Write::new(StoreMode::Set, key, value), now) {
                        // Reported once the command is done, in place of `+OK`.
                        state.arg = store_error_code(e);
                    }
                }
                Cmd::Exists => state.arg += i64::from(cx.peek(key, now).is_some()),
                // A read marks the item accessed, which is what `TOUCH` is for.
                Cmd::Touch => state.arg += i64::from(cx.get(key, now).is_some()),
                _ => state.arg += i64::from(cx.delete(key, 0, now).is_ok()),
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
pub(super) fn pause(
    cx: &mut Cx<'_>,
    mut state: Resume,
    argc: usize,
    at: usize,
    stop: Stop,
) -> Step {
    state.at = at;
    cx.session.resume = Some(state);
    cx.session.scan = Scan {
        bytes: state.len,
        items: argc,
    };
    Step::Stop(stop)
}

/// An `MSET` store error kept until the command is done (0: none).
pub(super) fn store_error_code(e: StoreError) -> i64 {
    match e {
        StoreError::TooLarge => 1,
        StoreError::OutOfMemory => 2,
        _ => 3,
    }
}

pub(super) fn store_error_of(code: i64) -> Option<StoreError> {
    match code {
        0 => None,
        1 => Some(StoreError::TooLarge),
        2 => Some(StoreError::OutOfMemory),
        _ => Some(StoreError::KeyTooLong),
    }
}

/// `MSET` over several workers: `+OK` once every worker stored its pairs, or the first error
/// one of them gave.
#[derive(Debug)]
pub(super) struct Status {
    error: Option<Vec<u8>>,
    version: Version,
}

impl Status {
    /// No reply yet.
    pub(super) fn new(version: Version) -> Status {
        Status {
            error: None,
            version,
        }
    }
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

/// Adds up the integer replies of several workers (`DEL`, `UNLINK`, `EXISTS`, `TOUCH`).
#[derive(Debug)]
pub(super) struct Sum {
    total: i64,
    version: Version,
}

impl Sum {
    /// Nothing added yet.
    pub(super) fn new(version: Version) -> Sum {
        Sum { total: 0, version }
    }
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

// ---- walking the keyspace ----

/// Bits of a `SCAN` cursor that hold the position in the worker's key order; the bits above
/// them name the worker.
const CURSOR_POSITION_BITS: u32 = 56;

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`.
///
/// The cursor is a worker (top 8 bits) and a position in that worker's key order (the low 32
/// bits of each key's hash in its store, which the table's buckets follow): a call returns the
/// keys of the connection's database on that worker whose positions lie in one window from
/// the cursor's, a window of as many buckets as hold about `COUNT` of the worker's items, and
/// the next cursor is the window's end. Positions do not depend on the table's size or
/// layout, so growth, eviction and expiry move no key across the cursor: a full iteration
/// returns every key held for its whole duration at least once, and no key twice unless it
/// is written again meanwhile. A call costs its window (about `COUNT` items, as in Redis,
/// however many the worker holds). A worker's keys done, the cursor moves to the next
/// worker's start; after the last, 0.
pub(super) fn scan(cx: &mut Cx<'_>, args: &[&[u8]], raw: &[u8], out: &mut Vec<u8>) -> Option<Stop> {
    let v = version(cx);
    let Some(cursor) = std::str::from_utf8(args[0])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        error(out, v, "ERR invalid cursor");
        return None;
    };
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut strings = true;
    let mut options = args[1..].chunks(2);
    for option in &mut options {
        let [name, value] = option else {
            error(out, v, SYNTAX);
            return None;
        };
        if name.eq_ignore_ascii_case(b"match") {
            pattern = Some(value);
        } else if name.eq_ignore_ascii_case(b"count") {
            match parse_integer(value) {
                None => {
                    error(out, v, NOT_INTEGER);
                    return None;
                }
                Some(n) if n < 1 => {
                    error(out, v, SYNTAX);
                    return None;
                }
                Some(n) => count = usize::try_from(n).unwrap_or(usize::MAX),
            }
        } else if name.eq_ignore_ascii_case(b"type") {
            strings = value.eq_ignore_ascii_case(b"string");
        } else {
            error(out, v, SYNTAX);
            return None;
        }
    }
    let worker = (cursor >> CURSOR_POSITION_BITS) as usize;
    let from = cursor & ((1 << CURSOR_POSITION_BITS) - 1);
    if worker >= cx.workers() {
        write_scan(out, v, 0, &[]);
        return None;
    }
    if worker != cx.config().worker && !cx.forwarded() {
        return cx.forward(worker, WHOLE, raw, out).err();
    }
    // As many buckets as hold about `count` of this worker's items, every database's (as in
    // Redis, `COUNT` is work done, not keys returned).
    let buckets = cx.num_buckets();
    let window = count
        .saturating_mul(buckets)
        .div_ceil(cx.items().max(1))
        .clamp(1, buckets.max(1));
    let mut found: Vec<Vec<u8>> = Vec::new();
    let resume = cx.visit_database_in_order(from, window, cx.now, |key, _| {
        if strings && pattern.is_none_or(|p| glob(p, key)) {
            found.push(key.to_vec());
        }
    });
    let next = match resume {
        Some(at) => (worker as u64) << CURSOR_POSITION_BITS | at,
        // This worker's keys are done: the next worker's start, or the end.
        None if worker + 1 < cx.workers() => ((worker + 1) as u64) << CURSOR_POSITION_BITS,
        None => 0,
    };
    let keys: Vec<&[u8]> = found.iter().map(Vec::as_slice).collect();
    write_scan(out, v, next, &keys);
    None
}

/// A `SCAN` reply: the next cursor, then the keys.
fn write_scan(out: &mut Vec<u8>, v: Version, next: u64, keys: &[&[u8]]) {
    Reply::Array(2).emit_into(v, out);
    bulk(out, v, next.to_string().as_bytes());
    Reply::Array(keys.len()).emit_into(v, out);
    for key in keys {
        bulk(out, v, key);
    }
}

/// `KEYS pattern`: this worker's keys of the connection's database that match, as an array.
pub(super) fn keys_local(cx: &Cx<'_>, pattern: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let mut found: Vec<Vec<u8>> = Vec::new();
    cx.visit_database(0, cx.num_buckets(), cx.now, |key, _| {
        if glob(pattern, key) {
            found.push(key.to_vec());
        }
    });
    Reply::Array(found.len()).emit_into(v, out);
    for key in &found {
        bulk(out, v, key);
    }
}

/// Arrays from every worker, joined into one (`KEYS`).
#[derive(Debug)]
pub(super) struct Joined {
    len: usize,
    items: Vec<u8>,
    version: Version,
}

impl Joined {
    /// Nothing joined yet.
    pub(super) fn new(version: Version) -> Joined {
        Joined {
            len: 0,
            items: Vec::new(),
            version,
        }
    }
}

impl Gather for Joined {
    fn add(&mut self, part: Part<'_>) {
        if let Part::Bytes(bytes) = part
            && let Ok((Frame::Array(n), header)) = Frame::parse(bytes)
        {
            self.len += n;
            self.items.extend_from_slice(&bytes[header..]);
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        Reply::Array(self.len).emit_into(self.version, out);
        out.extend_from_slice(&self.items);
    }
}

// ---- one key to another ----

/// `EXPIRETIME key` (seconds) or `PEXPIRETIME key` (milliseconds): when the key dies, -1 for
/// a key that never does, -2 for one not held.
pub(super) fn expire_time(cx: &mut Cx<'_>, key: &[u8], millis: bool, out: &mut Vec<u8>) {
    let v = version(cx);
    let at = match cx.peek(key, cx.now) {
        None => -2,
        Some(item) if item.expiry_ms == 0 => -1,
        Some(item) if millis => item.expiry_ms as i64,
        Some(item) => (item.expiry_ms / 1000) as i64,
    };
    integer(out, v, at);
}

/// What `RENAME` and `COPY` carry from one key to another: value, flags, expiry.
fn item_of(cx: &mut Cx<'_>, key: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    cx.peek(key, cx.now)
        .map(|item| (item.value.to_vec(), item.flags, item.expiry_ms))
}

/// Stores `item` under `key` in the connection's database (`mode`: `Set`, or `Add` to keep
/// a held key).
fn put(
    cx: &mut Cx<'_>,
    key: &[u8],
    (value, flags, expiry_ms): &(Vec<u8>, u32, u64),
    mode: StoreMode,
) -> Result<u64, StoreError> {
    let ttl = if *expiry_ms == 0 {
        Ttl::Exptime(0)
    } else {
        Ttl::AtMillis(*expiry_ms)
    };
    let write = Write {
        flags: *flags,
        ttl,
        ..Write::new(mode, key, value)
    };
    cx.store(write, cx.now)
}

/// `RENAME key newkey` (`nx`: `RENAMENX`).
pub(super) fn rename(cx: &mut Cx<'_>, from: &[u8], to: &[u8], nx: bool, out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let Some(item) = item_of(cx, from) else {
        return error(out, v, "ERR no such key");
    };
    if from == to {
        return if nx { integer(out, v, 0) } else { ok(out, v) };
    }
    if nx && cx.peek(to, now).is_some() {
        return integer(out, v, 0);
    }
    match put(cx, to, &item, StoreMode::Set) {
        Ok(_) => {
            cx.unlink(from, now);
            if nx { integer(out, v, 1) } else { ok(out, v) }
        }
        Err(e) => store_error(out, v, e),
    }
}

/// `COPY source destination [DB destination-db] [REPLACE]`.
pub(super) fn copy(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let (from, to) = (args[0], args[1]);
    let source = cx.session.db;
    let mut target = source;
    let mut replace = false;
    let mut options = args[2..].iter();
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if option.eq_ignore_ascii_case(b"db")
            && let Some(db) = options.next()
        {
            match parse_integer(db) {
                None => return error(out, v, NOT_INTEGER),
                Some(n) if n >= 0 && n < i64::from(cx.config().databases) => target = n as u8,
                Some(_) => return error(out, v, OUT_OF_RANGE_DB),
            }
        } else {
            return error(out, v, SYNTAX);
        }
    }
    if source == target && from == to {
        return error(out, v, "ERR source and destination objects are the same");
    }
    let Some(item) = item_of(cx, from) else {
        return integer(out, v, 0);
    };
    let saved = current_db(cx);
    enter_db(cx, target);
    let mode = if replace {
        StoreMode::Set
    } else {
        StoreMode::Add
    };
    let copied = put(cx, to, &item, mode);
    restore_db(cx, saved);
    match copied {
        Ok(_) => integer(out, v, 1),
        Err(StoreError::NotStored) => integer(out, v, 0),
        Err(e) => store_error(out, v, e),
    }
}

/// `RANDOMKEY`: a key of the connection's database on this worker, from a bucket picked by
/// the clock, or null.
pub(super) fn random_key_local(cx: &Cx<'_>, out: &mut Vec<u8>) {
    let v = version(cx);
    let buckets = cx.num_buckets();
    let start = if buckets == 0 {
        0
    } else {
        (crate::engine::owner_hash(&cx.now.millis().to_le_bytes()) % buckets as u64) as usize
    };
    let mut found: Option<Vec<u8>> = None;
    for (from, to) in [(start, buckets), (0, start)] {
        let mut at = from;
        while found.is_none() && at < to {
            let end = (at + WALK_SLICE_BUCKETS).min(to);
            cx.visit_database(at, end, cx.now, |key, _| {
                if found.is_none() {
                    found = Some(key.to_vec());
                }
            });
            at = end;
        }
    }
    match found {
        Some(key) => bulk(out, v, &key),
        None => null(out, v),
    }
}

/// The first non-null reply of several workers' (`RANDOMKEY`), or null.
#[derive(Debug)]
pub(super) struct FirstFound {
    found: Option<Vec<u8>>,
    version: Version,
}

impl FirstFound {
    /// Nothing found yet.
    pub(super) fn new(version: Version) -> FirstFound {
        FirstFound {
            found: None,
            version,
        }
    }
}

impl Gather for FirstFound {
    fn add(&mut self, part: Part<'_>) {
        if let Part::Bytes(bytes) = part
            && self.found.is_none()
            && let Ok((Frame::Bulk(key), _)) = Frame::parse(bytes)
        {
            self.found = Some(key.to_vec());
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        match &self.found {
            Some(key) => bulk(out, self.version, key),
            None => null(out, self.version),
        }
    }
}

/// `OBJECT ENCODING | IDLETIME | FREQ | REFCOUNT key`: Redis's encoding of a string (`int`,
/// `embstr` up to 44 bytes, `raw`), seconds since the last access, and an error for `FREQ`
/// (memspin's eviction is not LFU); null for a key not held.
pub(super) fn object(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let sub = args[0];
    let known = [&b"encoding"[..], b"idletime", b"freq", b"refcount"];
    if !known.iter().any(|k| sub.eq_ignore_ascii_case(k)) || args.len() != 2 {
        if args.len() == 2 || !known.iter().any(|k| sub.eq_ignore_ascii_case(k)) {
            let message = format!(
                "ERR unknown subcommand '{}'. Try OBJECT HELP.",
                String::from_utf8_lossy(c_string(sub, 128))
            );
            return error(out, v, &message);
        }
        let message = format!(
            "ERR wrong number of arguments for 'object|{}' command",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        );
        return error(out, v, &message);
    }
    let Some(item) = cx.peek(args[1], now) else {
        return null(out, v);
    };
    if sub.eq_ignore_ascii_case(b"encoding") {
        let encoding = if item.value.len() <= 20 && parse_integer(item.value).is_some() {
            "int"
        } else if item.value.len() <= 44 {
            "embstr"
        } else {
            "raw"
        };
        bulk(out, v, encoding.as_bytes());
    } else if sub.eq_ignore_ascii_case(b"idletime") {
        let idle = item.idle_secs(now);
        integer(out, v, i64::try_from(idle).unwrap_or(i64::MAX));
    } else if sub.eq_ignore_ascii_case(b"refcount") {
        integer(out, v, 1);
    } else {
        error(
            out,
            v,
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. \
             Please note that when switching between policies at runtime LRU and LFU data \
             will take some time to adjust.",
        );
    }
}

/// `MEMORY USAGE key [SAMPLES count]`: the bytes the key's item is charged (key, value and
/// header), or null.
pub(super) fn memory(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    if !args[0].eq_ignore_ascii_case(b"usage") {
        let message = format!(
            "ERR unknown subcommand '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(c_string(args[0], 128))
        );
        return error(out, v, &message);
    }
    match args.len() {
        2 => {}
        4 if args[2].eq_ignore_ascii_case(b"samples") => {
            if parse_integer(args[3]).is_none() {
                return error(out, v, NOT_INTEGER);
            }
        }
        1 => {
            return error(
                out,
                v,
                "ERR wrong number of arguments for 'memory|usage' command",
            );
        }
        _ => return error(out, v, SYNTAX),
    }
    let key = args[1];
    match cx.peek(key, cx.now).map(|item| item.value.len()) {
        Some(value_len) => integer(out, v, store::item_size(key.len(), value_len) as i64),
        None => null(out, v),
    }
}
