//! memcached text protocol, client side (protocol.txt "Storage commands", "Retrieval command",
//! "Deletion").
//!
//! ```text
//! get <key>\r\n                          → VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\nEND\r\n | END\r\n
//! get <k1> <k2> ...\r\n                  → a VALUE block per key found, in order, then END\r\n
//! set <key> 0 <ttl> <bytes>\r\n<data>\r\n → STORED\r\n | NOT_STORED\r\n | EXISTS\r\n | NOT_FOUND\r\n
//! delete <key>\r\n                       → DELETED\r\n | NOT_FOUND\r\n
//! any                                    → ERROR\r\n | CLIENT_ERROR <msg>\r\n | SERVER_ERROR <msg>\r\n
//! ```

use std::io::Write as _;

use super::{DecodeError, Expect, InvalidReply, MultiHit, Reply, Request};
use crate::workload::Command;

/// Longest reply line accepted before the data block (a VALUE line with a 250-byte key is ~310).
pub const MAX_LINE: usize = 1024;

/// Appends the request.
pub fn encode(r: &Request<'_>, out: &mut Vec<u8>) {
    match r.command {
        Command::Get => encode_get(r.key, out),
        Command::Set => encode_set(r.key, r.value, r.ttl, out),
        Command::Delete => {
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(r.key);
            out.extend_from_slice(b"\r\n");
        }
        Command::MultiGet => {
            out.extend_from_slice(b"get");
            for i in 0..r.multi.len() {
                out.push(b' ');
                out.extend_from_slice(r.multi.key(i));
            }
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Appends `get <key>\r\n`.
pub fn encode_get(key: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"get ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

/// Appends `set <key> 0 <ttl> <len>\r\n<value>\r\n`.
pub fn encode_set(key: &[u8], value: &[u8], ttl: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    let _ = write!(out, " 0 {ttl} {}\r\n", value.len());
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Finds the first line of `buf`: returns it without `\r\n`, and the length with it.
fn line(buf: &[u8]) -> Result<(&[u8], usize), DecodeError> {
    let window = &buf[..buf.len().min(MAX_LINE)];
    match window.iter().position(|&b| b == b'\n') {
        Some(nl) if nl > 0 && buf[nl - 1] == b'\r' => Ok((&buf[..nl - 1], nl + 1)),
        Some(_) => Err(DecodeError::Invalid(InvalidReply::Line)),
        None if buf.len() >= MAX_LINE => Err(DecodeError::Invalid(InvalidReply::Line)),
        None => Err(DecodeError::Incomplete),
    }
}

fn is_error_line(l: &[u8]) -> bool {
    l == b"ERROR" || l.starts_with(b"CLIENT_ERROR") || l.starts_with(b"SERVER_ERROR")
}

/// Parses a decimal field.
pub(crate) fn parse_u64(field: &[u8]) -> Option<u64> {
    if field.is_empty() || field.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in field {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// Parses `VALUE <key> <flags> <bytes> [<cas>]` (without `\r\n`): the key and the length.
fn value_line(l: &[u8], max_value: usize) -> Result<(&[u8], usize), DecodeError> {
    let Some(rest) = l.strip_prefix(b"VALUE ") else {
        return Err(DecodeError::Invalid(InvalidReply::Line));
    };
    let mut fields = rest.split(|&b| b == b' ');
    let key = fields.next().unwrap_or_default();
    let flags = fields.next().and_then(parse_u64);
    let bytes = fields.next().and_then(parse_u64);
    let cas = fields.next();
    if flags.is_none_or(|f| f > u64::from(u32::MAX))
        || cas.is_some_and(|c| parse_u64(c).is_none())
        || fields.next().is_some()
    {
        return Err(DecodeError::Invalid(InvalidReply::Line));
    }
    let Some(bytes) = bytes
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b <= max_value)
    else {
        return Err(DecodeError::Invalid(InvalidReply::Length));
    };
    Ok((key, bytes))
}

/// Decodes the reply to `expect` at the start of `buf`.
///
/// # Errors
/// [`DecodeError::Incomplete`] until the whole reply (for a GET: through `END\r\n`) is in
/// `buf`; [`DecodeError::Invalid`] for anything that is not a reply to `expect`.
pub fn decode<'a>(
    buf: &'a [u8],
    expect: &Expect<'_>,
    max_value: usize,
    hits: &mut Vec<MultiHit>,
) -> Result<(Reply<'a>, usize), DecodeError> {
    let (l, used) = line(buf)?;
    if is_error_line(l) {
        return Ok((Reply::ServerError, used));
    }
    match expect.command {
        Command::Set => match l {
            b"STORED" => Ok((Reply::Stored, used)),
            b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => Ok((Reply::NotStored, used)),
            _ => Err(DecodeError::Invalid(InvalidReply::Line)),
        },
        Command::Delete => match l {
            b"DELETED" => Ok((Reply::Deleted, used)),
            b"NOT_FOUND" => Ok((Reply::NotFound, used)),
            _ => Err(DecodeError::Invalid(InvalidReply::Line)),
        },
        Command::Get => {
            if l == b"END" {
                return Ok((Reply::Miss, used));
            }
            let (key, bytes) = value_line(l, max_value)?;
            if key != expect.key {
                return Err(DecodeError::Invalid(InvalidReply::Key));
            }
            let data_end = used + bytes;
            let total = data_end + 2 + b"END\r\n".len();
            if buf.len() < total {
                return Err(DecodeError::Incomplete);
            }
            if &buf[data_end..total] != b"\r\nEND\r\n" {
                return Err(DecodeError::Invalid(InvalidReply::Line));
            }
            Ok((
                Reply::Hit {
                    value: &buf[used..data_end],
                },
                total,
            ))
        }
        Command::MultiGet => {
            let (mut l, mut at) = (l, used);
            let mut next = 0;
            loop {
                if l == b"END" {
                    return Ok((Reply::Multi { hits: hits.len() }, at));
                }
                let (key, bytes) = value_line(l, max_value)?;
                // Values come in request order, found keys only.
                let Some(index) = expect.multi.find(key, next) else {
                    return Err(DecodeError::Invalid(InvalidReply::Key));
                };
                next = index + 1;
                let data_end = at + bytes;
                if buf.len() < data_end + 2 {
                    return Err(DecodeError::Incomplete);
                }
                if &buf[data_end..data_end + 2] != b"\r\n" {
                    return Err(DecodeError::Invalid(InvalidReply::Line));
                }
                hits.push(MultiHit {
                    index,
                    value: at..data_end,
                });
                at = data_end + 2;
                let (nl, n) = line(&buf[at..])?;
                l = nl;
                at += n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Codec, MultiKeys, OwnedReply, Protocol, decode_fragmented};
    use crate::workload::Keyspace;

    const MAX: usize = 1 << 20;

    fn get(key: &[u8]) -> Expect<'_> {
        expect(Command::Get, key)
    }

    fn set(key: &[u8]) -> Expect<'_> {
        expect(Command::Set, key)
    }

    fn expect(command: Command, key: &[u8]) -> Expect<'_> {
        Expect {
            command,
            key,
            multi: MultiKeys::default(),
            opaque: 0,
        }
    }

    fn decode<'a>(
        buf: &'a [u8],
        expect: &Expect<'_>,
        max: usize,
    ) -> Result<(Reply<'a>, usize), DecodeError> {
        super::decode(buf, expect, max, &mut Vec::new())
    }

    #[test]
    fn requests_are_encoded_as_protocol_txt_says() {
        let mut out = Vec::new();
        encode_get(b"k01", &mut out);
        encode_set(b"k02", b"hello", 0, &mut out);
        encode_set(b"k03", b"", 60, &mut out);
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [2, 0];
        encode(
            &Request {
                command: Command::MultiGet,
                key: b"",
                multi: MultiKeys::new(&ks, &keys),
                value: b"",
                ttl: 0,
                opaque: 0,
            },
            &mut out,
        );
        encode(
            &Request {
                command: Command::Delete,
                key: b"k04",
                multi: MultiKeys::default(),
                value: b"",
                ttl: 0,
                opaque: 0,
            },
            &mut out,
        );
        assert_eq!(
            out,
            b"get k01\r\nset k02 0 0 5\r\nhello\r\nset k03 0 60 0\r\n\r\nget k2 k0\r\ndelete k04\r\n"
        );
    }

    #[test]
    fn hit_miss_and_store_replies_decode() {
        let hit = b"VALUE k01 0 5\r\nhello\r\nEND\r\n";
        assert_eq!(
            decode(hit, &get(b"k01"), MAX),
            Ok((Reply::Hit { value: b"hello" }, hit.len()))
        );
        let hit_cas = b"VALUE k01 7 2 99\r\nhi\r\nEND\r\n";
        assert_eq!(
            decode(hit_cas, &get(b"k01"), MAX),
            Ok((Reply::Hit { value: b"hi" }, hit_cas.len()))
        );
        assert_eq!(decode(b"END\r\n", &get(b"k01"), MAX), Ok((Reply::Miss, 5)));
        assert_eq!(
            decode(b"STORED\r\n", &set(b"k"), MAX),
            Ok((Reply::Stored, 8))
        );
        assert_eq!(
            decode(b"NOT_STORED\r\n", &set(b"k"), MAX),
            Ok((Reply::NotStored, 12))
        );
        let err = b"SERVER_ERROR out of memory storing object\r\n";
        assert_eq!(
            decode(err, &set(b"k"), MAX),
            Ok((Reply::ServerError, err.len()))
        );
        assert_eq!(
            decode(b"ERROR\r\n", &get(b"k"), MAX),
            Ok((Reply::ServerError, 7))
        );
    }

    #[test]
    fn value_data_may_contain_crlf_and_end() {
        let hit = b"VALUE k 0 7\r\nEND\r\n\r\n\r\nEND\r\n";
        assert_eq!(
            decode(hit, &get(b"k"), MAX),
            Ok((
                Reply::Hit {
                    value: b"END\r\n\r\n"
                },
                hit.len()
            ))
        );
    }

    #[test]
    fn every_truncation_is_incomplete() {
        let hit = b"VALUE k01 0 5\r\nhello\r\nEND\r\n";
        for n in 0..hit.len() {
            assert_eq!(
                decode(&hit[..n], &get(b"k01"), MAX),
                Err(DecodeError::Incomplete),
                "n={n}"
            );
        }
        for n in 0..b"STORED\r\n".len() {
            assert_eq!(
                decode(&b"STORED\r\n"[..n], &set(b"k"), MAX),
                Err(DecodeError::Incomplete)
            );
        }
    }

    #[test]
    fn wrong_replies_are_invalid_not_panics() {
        let inv = |b: &[u8], e: Expect<'_>| decode(b, &e, MAX).unwrap_err();
        assert_eq!(
            inv(b"VALUE k02 0 5\r\nhello\r\nEND\r\n", get(b"k01")),
            DecodeError::Invalid(InvalidReply::Key)
        );
        assert_eq!(
            inv(b"STORED\r\n", get(b"k")),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(b"END\r\n", set(b"k")),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(b"VALUE k 0 5\r\nhelloXXEND\r\n", get(b"k")),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(b"VALUE k 0 99999999\r\n", get(b"k")),
            DecodeError::Invalid(InvalidReply::Length)
        );
        assert_eq!(
            inv(b"VALUE k 0 -1\r\n", get(b"k")),
            DecodeError::Invalid(InvalidReply::Length)
        );
        assert_eq!(
            inv(b"VALUE k x 1\r\n", get(b"k")),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(b"VALUE k 0 1 2 3\r\n", get(b"k")),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(b"STORED\n", set(b"k")),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(&[b'x'; MAX_LINE], set(b"k")),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            decode(b"VALUE k 0 5\r\nhello\r\nEND\r\n", &get(b"k"), 4).unwrap_err(),
            DecodeError::Invalid(InvalidReply::Length)
        );
        // A multi-get reply with a key not asked for, or out of order.
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [0, 1];
        let multi = Expect {
            multi: MultiKeys::new(&ks, &keys),
            ..expect(Command::MultiGet, b"")
        };
        assert_eq!(
            inv(b"VALUE k2 0 1\r\na\r\nEND\r\n", multi),
            DecodeError::Invalid(InvalidReply::Key)
        );
        assert_eq!(
            inv(b"VALUE k1 0 1\r\na\r\nVALUE k0 0 1\r\na\r\nEND\r\n", multi),
            DecodeError::Invalid(InvalidReply::Key)
        );
        assert_eq!(
            inv(b"DELETED\r\n", expect(Command::Get, b"k")),
            DecodeError::Invalid(InvalidReply::Line)
        );
    }

    #[test]
    fn pipelined_replies_decode_from_any_fragmentation() {
        let codec = Codec::new(Protocol::Text, MAX);
        let mut stream = Vec::new();
        stream.extend_from_slice(b"STORED\r\n");
        stream.extend_from_slice(b"VALUE key-a 0 11\r\nhello world\r\nEND\r\n");
        stream.extend_from_slice(b"END\r\n");
        let big: Vec<u8> = (0..3_000).map(|i| b'a' + (i % 26) as u8).collect();
        stream.extend_from_slice(format!("VALUE key-b 3 {} 17\r\n", big.len()).as_bytes());
        stream.extend_from_slice(&big);
        stream.extend_from_slice(b"\r\nEND\r\n");
        stream.extend_from_slice(b"SERVER_ERROR busy\r\n");
        stream.extend_from_slice(b"DELETED\r\nNOT_FOUND\r\n");
        // A multi-get of k0 k1 k2 k1: k1 found twice, k0 and k2 missing.
        stream.extend_from_slice(b"VALUE k1 0 2\r\nab\r\nVALUE k1 0 2\r\nab\r\nEND\r\n");
        stream.extend_from_slice(b"END\r\n");
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [0, 1, 2, 1];
        let multi = Expect {
            multi: MultiKeys::new(&ks, &keys),
            ..expect(Command::MultiGet, b"")
        };
        let expects = [
            set(b"key-a"),
            get(b"key-a"),
            get(b"key-x"),
            get(b"key-b"),
            set(b"key-c"),
            expect(Command::Delete, b"key-a"),
            expect(Command::Delete, b"key-a"),
            multi,
            multi,
        ];
        let want = vec![
            OwnedReply::Stored,
            OwnedReply::Hit(b"hello world".to_vec()),
            OwnedReply::Miss,
            OwnedReply::Hit(big.clone()),
            OwnedReply::ServerError,
            OwnedReply::Deleted,
            OwnedReply::NotFound,
            OwnedReply::Multi(vec![(1, b"ab".to_vec()), (3, b"ab".to_vec())]),
            OwnedReply::Multi(vec![]),
        ];
        for step in [1, 2, 5, 10, 100, stream.len()] {
            assert_eq!(
                decode_fragmented(codec, &stream, step, &expects).unwrap(),
                want,
                "step {step}"
            );
        }
    }
}
