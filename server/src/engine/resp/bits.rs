//! The bitmap commands: `SETBIT`, `GETBIT`, `BITCOUNT`, `BITPOS`, `BITOP`, `BITFIELD` and
//! `BITFIELD_RO`, on string values as Redis keeps them (bit 0 is the most significant bit of
//! the first byte; bytes past the end read as zeros).
//!
//! A write reads the value, changes a copy and stores it with the key's flags and expiry
//! ([`rewrite`]); a value that keeps its length is rewritten in place by the store. A bit
//! offset is refused past the item limit (`-I`, which memspin reports as
//! `proto-max-bulk-len`), as Redis refuses one past 512 MB.

use super::*;

const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BAD_TYPE: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

/// A bit offset as Redis reads it: an integer (`#n`: `n` fields of `bits` bits, when `hash`)
/// whose byte is below the item limit.
fn bit_offset(cx: &Cx<'_>, text: &[u8], hash: bool, bits: u32) -> Result<u64, &'static str> {
    let (digits, times) = match text.first() {
        Some(b'#') if hash => (&text[1..], i64::from(bits)),
        _ => (text, 1),
    };
    let offset = parse_integer(digits).ok_or(BAD_OFFSET)?.wrapping_mul(times);
    if offset < 0 || (offset >> 3) as u64 >= cx.config().shard.max_item_size as u64 {
        return Err(BAD_OFFSET);
    }
    Ok(offset as u64)
}

/// The bit at `offset` (0 past the end).
fn bit_at(value: &[u8], offset: u64) -> u8 {
    let byte = (offset >> 3) as usize;
    value.get(byte).map_or(0, |b| (b >> (7 - (offset & 7))) & 1)
}

/// `GETBIT key offset`.
pub(super) fn getbit(cx: &mut Cx<'_>, key: &[u8], offset: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let offset = match bit_offset(cx, offset, false, 0) {
        Ok(offset) => offset,
        Err(message) => return error(out, v, message),
    };
    let value = cx.get_value(key, cx.now).unwrap_or_default();
    let bit = bit_at(value, offset);
    integer(out, v, i64::from(bit));
}

/// `SETBIT key offset 0|1`: the bit's old value; the value grows with zero bytes to reach it.
pub(super) fn setbit(cx: &mut Cx<'_>, key: &[u8], offset: &[u8], bit: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let offset = match bit_offset(cx, offset, false, 0) {
        Ok(offset) => offset,
        Err(message) => return error(out, v, message),
    };
    let on = match parse_integer(bit) {
        Some(on @ (0 | 1)) => on as u8,
        _ => return error(out, v, "ERR bit is not an integer or out of range"),
    };
    let byte = (offset >> 3) as usize;
    let (mut value, flags) = value_of(cx, key).unwrap_or_default();
    if value.len() <= byte {
        value.resize(byte + 1, 0);
    }
    let shift = 7 - (offset & 7);
    let old = (value[byte] >> shift) & 1;
    value[byte] = (value[byte] & !(1 << shift)) | (on << shift);
    match rewrite(cx, key, flags, &value) {
        Ok(_) => integer(out, v, i64::from(old)),
        Err(e) => store_error(out, v, e),
    }
}

/// A range option of `BITCOUNT` and `BITPOS`: `BYTE` (the default) or `BIT`.
fn is_bit_unit(unit: &[u8]) -> Option<bool> {
    if unit.eq_ignore_ascii_case(b"bit") {
        Some(true)
    } else if unit.eq_ignore_ascii_case(b"byte") {
        Some(false)
    } else {
        None
    }
}

/// `BITCOUNT key [start end [BYTE|BIT]]`: the set bits in the range (inclusive, negative
/// from the end); 0 for a missing key, whatever the arguments.
pub(super) fn bitcount(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let Some(value) = cx.get_value(args[0], cx.now) else {
        return integer(out, v, 0);
    };
    let len = value.len() as i64;
    let (start, end, bits) = match args.len() {
        1 => (0, len - 1, false),
        3 | 4 => {
            let (Some(start), Some(end)) = (parse_integer(args[1]), parse_integer(args[2])) else {
                return error(out, v, NOT_INTEGER);
            };
            let bits = match args.get(3) {
                None => false,
                Some(unit) => match is_bit_unit(unit) {
                    Some(bits) => bits,
                    None => return error(out, v, SYNTAX),
                },
            };
            (start, end, bits)
        }
        _ => return error(out, v, SYNTAX),
    };
    let total = if bits { len * 8 } else { len };
    let Some((start, end)) = clamp_range(start, end, total) else {
        return integer(out, v, 0);
    };
    let count: u64 = if bits {
        // Whole bytes by their popcount, the edge bytes masked.
        let (first, last) = (start / 8, end / 8);
        let head = 0xffu8 >> (start % 8);
        let tail = 0xffu8 << (7 - end % 8);
        if first == last {
            u64::from((value[first] & head & tail).count_ones())
        } else {
            u64::from((value[first] & head).count_ones())
                + value[first + 1..last]
                    .iter()
                    .map(|b| u64::from(b.count_ones()))
                    .sum::<u64>()
                + u64::from((value[last] & tail).count_ones())
        }
    } else {
        value[start..=end]
            .iter()
            .map(|b| u64::from(b.count_ones()))
            .sum()
    };
    integer(out, v, count as i64);
}

/// `BITPOS key 0|1 [start [end [BYTE|BIT]]]`: the first bit of that value in the range, or
/// -1; looking for a 0 with no end given, the first bit past the value counts (it is 0).
pub(super) fn bitpos(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let bit = match parse_integer(args[1]) {
        Some(bit @ (0 | 1)) => bit as u8,
        _ => return error(out, v, "ERR The bit argument must be 1 or 0."),
    };
    let Some(value) = cx.get_value(args[0], cx.now) else {
        return integer(out, v, if bit == 1 { -1 } else { 0 });
    };
    let len = value.len() as i64;
    if args.len() > 5 {
        return error(out, v, SYNTAX);
    }
    let mut start = 0;
    let mut end_given = false;
    let mut bits = false;
    if let Some(text) = args.get(2) {
        let Some(n) = parse_integer(text) else {
            return error(out, v, NOT_INTEGER);
        };
        start = n;
    }
    if let Some(unit) = args.get(4) {
        match is_bit_unit(unit) {
            Some(unit) => bits = unit,
            None => return error(out, v, SYNTAX),
        }
    }
    let total = if bits { len * 8 } else { len };
    let mut end = total - 1;
    if let Some(text) = args.get(3) {
        let Some(n) = parse_integer(text) else {
            return error(out, v, NOT_INTEGER);
        };
        end = n;
        end_given = true;
    }
    let start = if start < 0 {
        start.saturating_add(total)
    } else {
        start
    }
    .max(0);
    let end = if end < 0 {
        end.saturating_add(total)
    } else {
        end
    }
    .max(0)
    .min(total - 1);
    if start > end {
        return integer(out, v, -1);
    }
    // Bit offsets to look at.
    let (first, last) = if bits {
        (start as u64, end as u64)
    } else {
        (start as u64 * 8, end as u64 * 8 + 7)
    };
    // A whole byte of the other bit is passed over at once.
    let other = if bit == 1 { 0x00 } else { 0xff };
    let mut offset = first;
    while offset <= last {
        if offset % 8 == 0 && offset + 7 <= last && value[(offset / 8) as usize] == other {
            offset += 8;
            continue;
        }
        if bit_at(value, offset) == bit {
            return integer(out, v, offset as i64);
        }
        offset += 1;
    }
    if bit == 0 && !end_given {
        // Past the value, every bit is 0.
        return integer(out, v, len * 8);
    }
    integer(out, v, -1)
}

/// `BITOP AND|OR|XOR|NOT destkey key [key ...]`: the operation over the values (missing keys
/// and shorter values read as zeros, as long as the longest), stored without an expiry under
/// `destkey`, or `destkey` removed when every value is empty; the result's length.
pub(super) fn bitop(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    #[derive(Clone, Copy, PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let v = version(cx);
    let name = args[0];
    let op = if name.eq_ignore_ascii_case(b"and") {
        Op::And
    } else if name.eq_ignore_ascii_case(b"or") {
        Op::Or
    } else if name.eq_ignore_ascii_case(b"xor") {
        Op::Xor
    } else if name.eq_ignore_ascii_case(b"not") {
        Op::Not
    } else {
        return error(out, v, SYNTAX);
    };
    let sources = &args[2..];
    if op == Op::Not && sources.len() != 1 {
        return error(
            out,
            v,
            "ERR BITOP NOT must be called with a single source key.",
        );
    }
    let values: Vec<Vec<u8>> = sources
        .iter()
        .map(|key| {
            value_of(cx, key)
                .map(|(value, _)| value)
                .unwrap_or_default()
        })
        .collect();
    let len = values.iter().map(Vec::len).max().unwrap_or(0);
    let now = cx.now;
    if len == 0 {
        let _ = cx.delete(args[1], 0, now);
        return integer(out, v, 0);
    }
    let byte = |value: &Vec<u8>, i: usize| value.get(i).copied().unwrap_or(0);
    let result: Vec<u8> = (0..len)
        .map(|i| {
            let mut bytes = values.iter().map(|value| byte(value, i));
            let first = bytes.next().unwrap_or(0);
            match op {
                Op::And => bytes.fold(first, |acc, b| acc & b),
                Op::Or => bytes.fold(first, |acc, b| acc | b),
                Op::Xor => bytes.fold(first, |acc, b| acc ^ b),
                Op::Not => !first,
            }
        })
        .collect();
    match cx.store(Write::new(StoreMode::Set, args[1], &result), now) {
        Ok(_) => integer(out, v, len as i64),
        Err(e) => store_error(out, v, e),
    }
}

/// What a `BITFIELD` field overflowing does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set(i64),
    IncrBy(i64),
}

/// One `BITFIELD` operation, parsed.
#[derive(Debug, Clone, Copy)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

/// `i1`..`i64` or `u1`..`u63`.
fn field_type(text: &[u8]) -> Option<(bool, u32)> {
    let signed = match text.first()? {
        b'i' => true,
        b'u' => false,
        _ => return None,
    };
    let bits = parse_integer(&text[1..])?;
    let max = if signed { 64 } else { 63 };
    (1..=max).contains(&bits).then_some((signed, bits as u32))
}

/// The `bits`-bit field at `offset`, unsigned (bits past the value read as zeros).
fn get_field(value: &[u8], offset: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0u64, |acc, i| {
        acc << 1 | u64::from(bit_at(value, offset + i))
    })
}

/// The field, sign-extended when `signed`.
fn get_signed(value: &[u8], offset: u64, bits: u32, signed: bool) -> i64 {
    let raw = get_field(value, offset, bits);
    if signed && bits < 64 && raw & (1 << (bits - 1)) != 0 {
        (raw | (u64::MAX << bits)) as i64
    } else {
        raw as i64
    }
}

/// Writes the low `bits` bits of `field` at `offset` (the value is long enough).
fn set_field(value: &mut [u8], offset: u64, bits: u32, field: u64) {
    for i in 0..u64::from(bits) {
        let on = (field >> (u64::from(bits) - 1 - i)) & 1;
        let at = offset + i;
        let byte = (at >> 3) as usize;
        let shift = 7 - (at & 7);
        value[byte] = (value[byte] & !(1 << shift)) | ((on as u8) << shift);
    }
}

/// `value + incr` in an unsigned field of `bits` bits, as Redis checks it: the result, or
/// `None` on an overflow `FAIL` refuses.
fn unsigned_sum(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = value.wrapping_neg() as i64;
    let wrapped = || value.wrapping_add(incr as u64) & max;
    if value > max || (incr > 0 && incr > max_incr) {
        match overflow {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(max),
            Overflow::Fail => None,
        }
    } else if incr < 0 && incr < min_incr {
        match overflow {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(0),
            Overflow::Fail => None,
        }
    } else {
        Some(value.wrapping_add(incr as u64))
    }
}

/// `value + incr` in a signed field of `bits` bits, as Redis checks it.
fn signed_sum(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = max.wrapping_sub(value);
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let sum = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if sum & (1 << (bits - 1)) != 0 {
                (sum | mask) as i64
            } else {
                (sum & !mask) as i64
            }
        } else {
            sum as i64
        }
    };
    if value > max || (bits != 64 && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr)
    {
        match overflow {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(max),
            Overflow::Fail => None,
        }
    } else if value < min
        || (bits != 64 && incr < min_incr)
        || (value < 0 && incr < 0 && incr < min_incr)
    {
        match overflow {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(min),
            Overflow::Fail => None,
        }
    } else {
        Some(value.wrapping_add(incr))
    }
}

/// `BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset increment]
/// [OVERFLOW WRAP|SAT|FAIL] ...` (`read_only`: `BITFIELD_RO`, `GET` only). Every operation is
/// checked before any runs; one reply per `GET`, `SET` (the old value) and `INCRBY` (the new
/// value, or null where `OVERFLOW FAIL` refused it).
pub(super) fn bitfield(cx: &mut Cx<'_>, args: &[&[u8]], read_only: bool, out: &mut Vec<u8>) {
    let v = version(cx);
    let mut fields: Vec<Field> = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut highest: Option<u64> = None;
    let mut j = 1;
    while j < args.len() {
        let sub = args[j];
        let left = args.len() - j - 1;
        let is = |name: &[u8]| sub.eq_ignore_ascii_case(name);
        let writes = if is(b"get") && left >= 2 {
            false
        } else if (is(b"set") || is(b"incrby")) && left >= 3 {
            true
        } else if is(b"overflow") && left >= 1 {
            let kind = args[j + 1];
            overflow = if kind.eq_ignore_ascii_case(b"wrap") {
                Overflow::Wrap
            } else if kind.eq_ignore_ascii_case(b"sat") {
                Overflow::Sat
            } else if kind.eq_ignore_ascii_case(b"fail") {
                Overflow::Fail
            } else {
                return error(out, v, "ERR Invalid OVERFLOW type specified");
            };
            j += 2;
            continue;
        } else {
            return error(out, v, SYNTAX);
        };
        let Some((signed, bits)) = field_type(args[j + 1]) else {
            return error(out, v, BAD_TYPE);
        };
        let offset = match bit_offset(cx, args[j + 2], true, bits) {
            Ok(offset) => offset,
            Err(message) => return error(out, v, message),
        };
        let op = if writes {
            let Some(n) = parse_integer(args[j + 3]) else {
                return error(out, v, NOT_INTEGER);
            };
            let last = offset + u64::from(bits) - 1;
            highest = Some(highest.map_or(last, |h| h.max(last)));
            if is(b"set") {
                FieldOp::Set(n)
            } else {
                FieldOp::IncrBy(n)
            }
        } else {
            FieldOp::Get
        };
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            overflow,
        });
        j += if writes { 4 } else { 3 };
    }
    if read_only && highest.is_some() {
        return error(out, v, "ERR BITFIELD_RO only supports the GET subcommand");
    }
    let (mut value, flags) = value_of(cx, args[0]).unwrap_or_default();
    if let Some(last) = highest {
        let len = (last >> 3) as usize + 1;
        if !cx.fits(args[0].len(), len) {
            return error(out, v, TOO_LARGE);
        }
        if value.len() < len {
            value.resize(len, 0);
        }
    }
    let mut replies = Vec::new();
    for field in &fields {
        let Field {
            signed,
            bits,
            offset,
            ..
        } = *field;
        let old = get_signed(&value, offset, bits, signed);
        let (new, reply) = match field.op {
            FieldOp::Get => {
                integer(&mut replies, v, old);
                continue;
            }
            FieldOp::Set(n) if signed => (signed_sum(n, 0, bits, field.overflow), Some(old)),
            FieldOp::Set(n) => (
                unsigned_sum(n as u64, 0, bits, field.overflow).map(|n| n as i64),
                Some(old),
            ),
            FieldOp::IncrBy(n) if signed => (signed_sum(old, n, bits, field.overflow), None),
            FieldOp::IncrBy(n) => (
                unsigned_sum(old as u64, n, bits, field.overflow).map(|n| n as i64),
                None,
            ),
        };
        match new {
            Some(new) => {
                integer(&mut replies, v, reply.unwrap_or(new));
                set_field(&mut value, offset, bits, new as u64);
            }
            None => null(&mut replies, v),
        }
    }
    if highest.is_some()
        && let Err(e) = rewrite(cx, args[0], flags, &value)
    {
        return store_error(out, v, e);
    }
    Reply::Array(fields.len()).emit_into(v, out);
    out.extend_from_slice(&replies);
}
