//! memcached text protocol, client side (protocol.txt "Storage commands", "Retrieval command").
//!
//! ```text
//! get <key>\r\n                        → VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\nEND\r\n | END\r\n
//! set <key> 0 0 <bytes>\r\n<data>\r\n  → STORED\r\n | NOT_STORED\r\n | EXISTS\r\n | NOT_FOUND\r\n
//! any                                  → ERROR\r\n | CLIENT_ERROR <msg>\r\n | SERVER_ERROR <msg>\r\n
//! ```

use std::io::Write as _;

use super::{DecodeError, Expect, InvalidReply, Reply};
use crate::workload::Command;

/// Longest reply line accepted before the data block (a VALUE line with a 250-byte key is ~310).
pub const MAX_LINE: usize = 1024;

/// Appends `get <key>\r\n`.
pub fn encode_get(key: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"get ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

/// Appends `set <key> 0 0 <len>\r\n<value>\r\n`.
pub fn encode_set(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    let _ = write!(out, " 0 0 {}\r\n", value.len());
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

fn parse_u64(field: &[u8]) -> Option<u64> {
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

/// Decodes the reply to `expect` at the start of `buf`.
///
/// # Errors
/// [`DecodeError::Incomplete`] until the whole reply (for a hit: through `END\r\n`) is in
/// `buf`; [`DecodeError::Invalid`] for anything that is not a reply to `expect`.
pub fn decode<'a>(
    buf: &'a [u8],
    expect: &Expect<'_>,
    max_value: usize,
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
        Command::Get => {
            if l == b"END" {
                return Ok((Reply::Miss, used));
            }
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Codec, OwnedReply, Protocol, decode_fragmented};

    const MAX: usize = 1 << 20;

    fn get(key: &[u8]) -> Expect<'_> {
        Expect {
            command: Command::Get,
            key,
            opaque: 0,
        }
    }

    fn set(key: &[u8]) -> Expect<'_> {
        Expect {
            command: Command::Set,
            key,
            opaque: 0,
        }
    }

    #[test]
    fn requests_are_encoded_as_protocol_txt_says() {
        let mut out = Vec::new();
        encode_get(b"k01", &mut out);
        encode_set(b"k02", b"hello", &mut out);
        encode_set(b"k03", b"", &mut out);
        assert_eq!(
            out,
            b"get k01\r\nset k02 0 0 5\r\nhello\r\nset k03 0 0 0\r\n\r\n"
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
        let expects = [
            set(b"key-a"),
            get(b"key-a"),
            get(b"key-x"),
            get(b"key-b"),
            set(b"key-c"),
        ];
        let want = vec![
            OwnedReply::Stored,
            OwnedReply::Hit(b"hello world".to_vec()),
            OwnedReply::Miss,
            OwnedReply::Hit(big.clone()),
            OwnedReply::ServerError,
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
