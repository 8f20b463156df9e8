//! The string commands that store or change a value: `SET` with its options, `GETEX`,
//! `INCR`/`DECR` and their kin, `APPEND`, `MSETNX`.

use super::*;

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]` (and `GETSET`, which is
/// `SET ... GET`): options are checked first (syntax), then the expiry's value.
pub(super) fn set(cx: &mut Cx<'_>, key: &[u8], value: &[u8], options: &[&[u8]], out: &mut Vec<u8>) {
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
        match cx.get(key, now) {
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
    match cx.store(
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
pub(super) fn getex(cx: &mut Cx<'_>, key: &[u8], options: &[&[u8]], out: &mut Vec<u8>) {
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
            Err(_) if cx.peek(key, now).is_none() => return null(out, v),
            Err(e) => return expire_error(out, v, e, "getex"),
        },
        // Only a key with an expiry changes (and counts as written, for `WATCH`).
        None if persist && cx.peek(key, now).is_some_and(|item| item.expiry_ms != 0) => {
            Some(Ttl::Exptime(0))
        }
        None => None,
    };
    let item = match ttl {
        // A past time returns the value this once, and the key is gone.
        Some(ttl) => cx.touch(key, ttl, now),
        None => cx.get(key, now),
    };
    match item {
        Some(item) => bulk(out, v, item.value),
        None => null(out, v),
    }
}

/// `INCR`, `DECR`, `INCRBY`, `DECRBY`: the value (0 when missing) read as Redis reads an
/// integer, plus `delta`; the key keeps its flags and expiry.
pub(super) fn arith(cx: &mut Cx<'_>, key: &[u8], delta: Result<i64, &str>, out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let delta = match delta {
        Ok(delta) => delta,
        Err(message) => return error(out, v, message),
    };
    let (current, flags) = match cx.peek(key, now) {
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
    match cx.store(write, now) {
        Ok(_) => integer(out, v, next),
        Err(e) => store_error(out, v, e),
    }
}

/// `APPEND key value`: appends, or stores the value when the key is missing; replies the new
/// length.
pub(super) fn append(cx: &mut Cx<'_>, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let mut result = cx.store(Write::new(StoreMode::Append, key, value), now);
    if result == Err(StoreError::NotStored) {
        result = cx.vivify(Write::new(StoreMode::Set, key, value), now);
    }
    match result {
        Ok(_) => {
            let len = cx
                .peek(key, now)
                .map_or(value.len(), |item| item.value.len());
            integer(out, v, len as i64);
        }
        Err(e) => store_error(out, v, e),
    }
}

/// `MSETNX key value ...`: all stored, or none when any key is held. Atomic only on one
/// worker: keys of one other worker go there whole, keys of several are refused (`CROSSSLOT`).
pub(super) fn msetnx(
    cx: &mut Cx<'_>,
    command: &Command<'_>,
    raw: &[u8],
    out: &mut Vec<u8>,
) -> Step {
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
    if pairs.chunks(2).any(|pair| cx.peek(pair[0], now).is_some()) {
        integer(out, v, 0);
        return Step::Done(len);
    }
    for pair in pairs.chunks(2) {
        if let Err(e) = cx.store(Write::new(StoreMode::Set, pair[0], pair[1]), now) {
            store_error(out, v, e);
            return Step::Done(len);
        }
    }
    integer(out, v, 1);
    Step::Done(len)
}

/// A held value's bytes and flags, copied out (the read half of a read-modify-write).
pub(super) fn value_of(cx: &mut Cx<'_>, key: &[u8]) -> Option<(Vec<u8>, u32)> {
    cx.peek(key, cx.now)
        .map(|item| (item.value.to_vec(), item.flags))
}

/// Stores `value` under `key` with `flags`, keeping the key's expiry (a new key gets none):
/// the write half of a read-modify-write (`SETRANGE`, `SETBIT`, `INCRBYFLOAT`, ...), which
/// Redis does in place on the key's value.
pub(super) fn rewrite(
    cx: &mut Cx<'_>,
    key: &[u8],
    flags: u32,
    value: &[u8],
) -> Result<u64, StoreError> {
    let write = Write {
        flags,
        ttl: Ttl::Keep,
        ..Write::new(StoreMode::Set, key, value)
    };
    cx.store(write, cx.now)
}

/// `start` and `end` (inclusive, negative from the end) over `len` items, as Redis clamps
/// them for `GETRANGE` and `BITCOUNT`; `None` when the range is empty.
pub(super) fn clamp_range(start: i64, end: i64, len: i64) -> Option<(usize, usize)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let start = if start < 0 {
        start.saturating_add(len)
    } else {
        start
    }
    .max(0);
    let end = if end < 0 {
        end.saturating_add(len)
    } else {
        end
    }
    .max(0);
    let end = end.min(len - 1);
    if start > end || len == 0 {
        return None;
    }
    Some((start as usize, end as usize))
}

/// `GETRANGE key start end` (and `SUBSTR`): the bytes from `start` to `end`, inclusive.
pub(super) fn getrange(cx: &mut Cx<'_>, key: &[u8], start: &[u8], end: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let (Some(start), Some(end)) = (parse_integer(start), parse_integer(end)) else {
        return error(out, v, NOT_INTEGER);
    };
    let value = cx.get_value(key, cx.now).unwrap_or_default();
    match clamp_range(start, end, value.len() as i64) {
        Some((from, to)) => Reply::Bulk(&value[from..=to]).emit_into(v, out),
        None => Reply::Bulk(b"").emit_into(v, out),
    }
}

/// `SETRANGE key offset value`: writes `value` at `offset`, zero bytes filling any gap; the
/// new length. The value may not outgrow the item limit (`-I`, memspin's
/// `proto-max-bulk-len`).
pub(super) fn setrange(
    cx: &mut Cx<'_>,
    key: &[u8],
    offset: &[u8],
    bytes: &[u8],
    out: &mut Vec<u8>,
) {
    let v = version(cx);
    let Some(offset) = parse_integer(offset) else {
        return error(out, v, NOT_INTEGER);
    };
    let Ok(offset) = usize::try_from(offset) else {
        return error(out, v, "ERR offset is out of range");
    };
    let held = value_of(cx, key);
    if bytes.is_empty() {
        let len = held.map_or(0, |(value, _)| value.len());
        return integer(out, v, len as i64);
    }
    let Some(end) = offset.checked_add(bytes.len()) else {
        return error(out, v, TOO_LARGE);
    };
    if end > cx.config().shard.max_item_size || !cx.fits(key.len(), end) {
        return error(out, v, TOO_LARGE);
    }
    let (mut value, flags) = held.unwrap_or_default();
    if value.len() < end {
        value.resize(end, 0);
    }
    value[offset..end].copy_from_slice(bytes);
    match rewrite(cx, key, flags, &value) {
        Ok(_) => integer(out, v, value.len() as i64),
        Err(e) => store_error(out, v, e),
    }
}

/// A number as `INCRBYFLOAT` reads it: decimal digits with a point and an exponent, kept
/// exact (`digits` / 10^`scale`) when they fit, and as an `f64` always.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Number {
    exact: Option<(i128, u32)>,
    float: f64,
}

/// Decimal places `INCRBYFLOAT` prints, as Redis's `%.17Lf`.
const FLOAT_DECIMALS: u32 = 17;

/// Largest decimal scale kept exact.
const MAX_SCALE: u32 = 36;

impl Number {
    /// Reads `text` as Redis's `strtold` check does (no spaces, not NaN); `None` if it is not
    /// a number.
    pub(super) fn parse(text: &[u8]) -> Option<Number> {
        let s = std::str::from_utf8(text).ok()?;
        if s.is_empty() || s.len() > 5 * 1024 || s.starts_with(|c: char| c.is_whitespace()) {
            return None;
        }
        let float: f64 = s.parse().ok()?;
        if float.is_nan() {
            return None;
        }
        Some(Number {
            exact: Number::decimal(s),
            float,
        })
    }

    /// `[+-]digits[.digits][e[+-]digits]` as digits and a scale, if they fit.
    fn decimal(s: &str) -> Option<(i128, u32)> {
        let (negative, rest) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], rest[at + 1..].parse::<i32>().ok()?),
            None => (rest, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let mut digits: i128 = 0;
        for b in whole.bytes().chain(fraction.bytes()) {
            if !b.is_ascii_digit() {
                return None;
            }
            digits = digits.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
        }
        let mut scale = fraction.len() as i64 - i64::from(exponent);
        while scale < 0 {
            digits = digits.checked_mul(10)?;
            scale += 1;
        }
        let scale = u32::try_from(scale).ok().filter(|&s| s <= MAX_SCALE)?;
        Some((if negative { -digits } else { digits }, scale))
    }

    /// The sum, exact where both are and it fits; `None` when it is not finite.
    pub(super) fn add(self, other: Number) -> Option<Number> {
        let float = self.float + other.float;
        if !float.is_finite() {
            return None;
        }
        let exact = match (self.exact, other.exact) {
            (Some((a, sa)), Some((b, sb))) => {
                let scale = sa.max(sb);
                let a = a.checked_mul(10i128.checked_pow(scale - sa)?);
                let b = b.checked_mul(10i128.checked_pow(scale - sb)?);
                a.zip(b)
                    .and_then(|(a, b)| a.checked_add(b))
                    .map(|sum| (sum, scale))
            }
            _ => None,
        };
        Some(Number { exact, float })
    }

    /// As Redis prints a long double (`%.17Lf`, trailing zeros and point removed): 17
    /// decimals at most, rounded half away from zero.
    pub(super) fn format(self) -> String {
        let Some((mut digits, mut scale)) = self.exact else {
            let mut text = format!("{:.*}", FLOAT_DECIMALS as usize, self.float);
            trim_decimals(&mut text);
            return text;
        };
        if scale > FLOAT_DECIMALS {
            let unit = 10i128.pow(scale - FLOAT_DECIMALS);
            let (q, r) = (digits / unit, digits % unit);
            digits = q + if r.abs() * 2 >= unit { r.signum() } else { 0 };
            scale = FLOAT_DECIMALS;
        }
        let negative = digits < 0;
        let magnitude = digits.unsigned_abs().to_string();
        let scale = scale as usize;
        let padded = format!("{magnitude:0>width$}", width = scale + 1);
        let (whole, fraction) = padded.split_at(padded.len() - scale);
        let mut text = String::with_capacity(padded.len() + 2);
        if negative {
            text.push('-');
        }
        text.push_str(whole);
        if !fraction.is_empty() {
            text.push('.');
            text.push_str(fraction);
        }
        trim_decimals(&mut text);
        text
    }
}

/// Drops trailing zeros after a point, then the point; `-0` becomes `0`.
fn trim_decimals(text: &mut String) {
    if text.contains('.') {
        while text.ends_with('0') {
            text.pop();
        }
        if text.ends_with('.') {
            text.pop();
        }
    }
    if text == "-0" {
        *text = "0".to_string();
    }
}

/// `INCRBYFLOAT key increment`: the value (0 when missing) plus `increment`, stored and
/// answered as Redis prints it; the key keeps its flags and expiry.
pub(super) fn incr_by_float(cx: &mut Cx<'_>, key: &[u8], increment: &[u8], out: &mut Vec<u8>) {
    const NOT_FLOAT: &str = "ERR value is not a valid float";
    let v = version(cx);
    let (current, flags) = match cx.peek(key, cx.now) {
        None => (Number::parse(b"0"), 0),
        Some(item) => (Number::parse(item.value), item.flags),
    };
    let Some(current) = current else {
        return error(out, v, NOT_FLOAT);
    };
    let Some(increment) = Number::parse(increment) else {
        return error(out, v, NOT_FLOAT);
    };
    let Some(sum) = current.add(increment) else {
        return error(out, v, "ERR increment would produce NaN or Infinity");
    };
    let text = sum.format();
    match rewrite(cx, key, flags, text.as_bytes()) {
        Ok(_) => bulk(out, v, text.as_bytes()),
        Err(e) => store_error(out, v, e),
    }
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]`: the longest common
/// subsequence of two values (missing keys are empty), its length, or its matching ranges,
/// walked back from the strings' ends as Redis walks them. The dynamic-programming table
/// (4 bytes per pair of positions) may take at most the item limit (`-I`), as Redis bounds it
/// by `proto-max-bulk-len`.
pub(super) fn lcs(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let a = value_of(cx, args[0])
        .map(|(value, _)| value)
        .unwrap_or_default();
    let b = value_of(cx, args[1])
        .map(|(value, _)| value)
        .unwrap_or_default();
    let (mut idx, mut len, mut with_len) = (false, false, false);
    let mut min_len: u64 = 0;
    let mut options = args[2..].iter();
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"idx") {
            idx = true;
        } else if option.eq_ignore_ascii_case(b"len") {
            len = true;
        } else if option.eq_ignore_ascii_case(b"withmatchlen") {
            with_len = true;
        } else if option.eq_ignore_ascii_case(b"minmatchlen")
            && let Some(value) = options.next()
        {
            match parse_integer(value) {
                Some(n) => min_len = n.max(0) as u64,
                None => return error(out, v, NOT_INTEGER),
            }
        } else {
            return error(out, v, SYNTAX);
        }
    }
    if idx && len {
        return error(
            out,
            v,
            "ERR If you want both the length and indexes, please just use IDX.",
        );
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen + 1).saturating_mul(blen + 1);
    if cells.saturating_mul(4) > cx.config().shard.max_item_size {
        return error(
            out,
            v,
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    let mut table = vec![0u32; cells];
    let at = |i: usize, j: usize| j + i * (blen + 1);
    for i in 1..=alen {
        for j in 1..=blen {
            table[at(i, j)] = if a[i - 1] == b[j - 1] {
                table[at(i - 1, j - 1)] + 1
            } else {
                table[at(i - 1, j)].max(table[at(i, j - 1)])
            };
        }
    }
    let total = table[at(alen, blen)];
    if len {
        return integer(out, v, i64::from(total));
    }
    let mut common = vec![0u8; total as usize];
    let mut ranges: Vec<[u64; 5]> = Vec::new();
    let (mut i, mut j, mut k) = (alen, blen, total as usize);
    // The match being extended backwards: `a_start == alen` means none.
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (alen, 0, 0, 0);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            common[k - 1] = a[i - 1];
            if a_start == alen {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            k -= 1;
            i -= 1;
            j -= 1;
        } else {
            if table[at(i - 1, j)] > table[at(i, j - 1)] {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != alen {
                emit = true;
            }
        }
        if emit {
            let match_len = (a_end - a_start + 1) as u64;
            if min_len == 0 || match_len >= min_len {
                ranges.push([
                    a_start as u64,
                    a_end as u64,
                    b_start as u64,
                    b_end as u64,
                    match_len,
                ]);
            }
            a_start = alen;
        }
    }
    if !idx {
        return bulk(out, v, &common);
    }
    match v {
        Version::Resp2 => Reply::Array(4).emit_into(v, out),
        _ => Reply::Map(2).emit_into(v, out),
    }
    bulk(out, v, b"matches");
    Reply::Array(ranges.len()).emit_into(v, out);
    for [a0, a1, b0, b1, match_len] in ranges {
        Reply::Array(2 + usize::from(with_len)).emit_into(v, out);
        for pair in [[a0, a1], [b0, b1]] {
            Reply::Array(2).emit_into(v, out);
            integer(out, v, pair[0] as i64);
            integer(out, v, pair[1] as i64);
        }
        if with_len {
            integer(out, v, match_len as i64);
        }
    }
    bulk(out, v, b"len");
    integer(out, v, i64::from(total));
}
