//! memcached meta commands, client side (protocol.txt "Meta Debug" ff.: `mg`, `ms`, `md`,
//! `mn`).
//!
//! ```text
//! mg <key> v O<n>\r\n                 → VA <len> O<n>\r\n<data>\r\n | EN [O<n>]\r\n
//! ms <key> <len> [T<ttl>] O<n>\r\n<data>\r\n → HD O<n>\r\n | NS | EX | NF
//! md <key> O<n>\r\n                   → HD O<n>\r\n | NF O<n>\r\n
//! multi-get: mg <k> v k O<n> q\r\n per key, then mn\r\n
//!                                     → VA <len> k<key> O<n>\r\n<data>\r\n per key found, MN\r\n
//! any                                 → ERROR | CLIENT_ERROR <msg> | SERVER_ERROR <msg>
//! ```
//!
//! Every command carries the connection's request number as its opaque (`O`); a reply whose
//! `O` flag names another request is a protocol error (servers that leave flags off a miss
//! are accepted).

use std::io::Write as _;

use super::text::parse_u64;
use super::{DecodeError, Expect, InvalidReply, MultiHit, Reply, Request};
use crate::workload::Command;

/// Longest reply line accepted before the data block.
pub const MAX_LINE: usize = 1024;

/// Appends the request.
pub fn encode(r: &Request<'_>, out: &mut Vec<u8>) {
    match r.command {
        Command::Get => {
            out.extend_from_slice(b"mg ");
            out.extend_from_slice(r.key);
            let _ = write!(out, " v O{}\r\n", r.opaque);
        }
        Command::Set => {
            out.extend_from_slice(b"ms ");
            out.extend_from_slice(r.key);
            let _ = write!(out, " {}", r.value.len());
            if r.ttl > 0 {
                let _ = write!(out, " T{}", r.ttl);
            }
            let _ = write!(out, " O{}\r\n", r.opaque);
            out.extend_from_slice(r.value);
            out.extend_from_slice(b"\r\n");
        }
        Command::Delete => {
            out.extend_from_slice(b"md ");
            out.extend_from_slice(r.key);
            let _ = write!(out, " O{}\r\n", r.opaque);
        }
        Command::MultiGet => {
            for i in 0..r.multi.len() {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(r.multi.key(i));
                let _ = write!(out, " v k O{} q\r\n", r.opaque);
            }
            out.extend_from_slice(b"mn\r\n");
        }
    }
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

/// A reply line split into its code, its numeric argument (`VA <len>`) and its flags.
struct Line<'a> {
    code: &'a [u8],
    len: Option<usize>,
    key: Option<&'a [u8]>,
    opaque: Option<&'a [u8]>,
}

fn split(l: &[u8], max_value: usize) -> Result<Line<'_>, DecodeError> {
    let mut tokens = l.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let code = tokens.next().unwrap_or_default();
    let len = if code == b"VA" {
        let n = tokens
            .next()
            .and_then(parse_u64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= max_value);
        Some(n.ok_or(DecodeError::Invalid(InvalidReply::Length))?)
    } else {
        None
    };
    let (mut key, mut opaque) = (None, None);
    for t in tokens {
        match t[0] {
            b'k' => key = Some(&t[1..]),
            b'O' => opaque = Some(&t[1..]),
            _ => {}
        }
    }
    Ok(Line {
        code,
        len,
        key,
        opaque,
    })
}

fn check_opaque(l: &Line<'_>, opaque: u32) -> Result<(), DecodeError> {
    match l.opaque {
        Some(o) if parse_u64(o) != Some(u64::from(opaque)) => {
            Err(DecodeError::Invalid(InvalidReply::Opaque))
        }
        _ => Ok(()),
    }
}

/// The data block of `len` bytes at `at`, followed by `\r\n`: its end (past the `\r\n`).
fn data(buf: &[u8], at: usize, len: usize) -> Result<usize, DecodeError> {
    let end = at + len;
    if buf.len() < end + 2 {
        return Err(DecodeError::Incomplete);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(DecodeError::Invalid(InvalidReply::Line));
    }
    Ok(end + 2)
}

/// Decodes the reply to `expect` at the start of `buf`.
///
/// # Errors
/// [`DecodeError::Incomplete`] until the whole reply is in `buf`; [`DecodeError::Invalid`] for
/// anything that is not a reply to `expect`.
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
    let parsed = split(l, max_value)?;
    if expect.command == Command::MultiGet {
        return decode_multi(buf, expect, max_value, hits, parsed, used);
    }
    check_opaque(&parsed, expect.opaque)?;
    let invalid = Err(DecodeError::Invalid(InvalidReply::Line));
    match (expect.command, parsed.code) {
        (Command::Get, b"EN") => Ok((Reply::Miss, used)),
        (Command::Get, b"VA") => {
            let len = parsed.len.unwrap_or_default();
            let end = data(buf, used, len)?;
            Ok((
                Reply::Hit {
                    value: &buf[used..used + len],
                },
                end,
            ))
        }
        (Command::Set, b"HD") => Ok((Reply::Stored, used)),
        (Command::Set, b"NS" | b"EX" | b"NF") => Ok((Reply::NotStored, used)),
        (Command::Delete, b"HD") => Ok((Reply::Deleted, used)),
        (Command::Delete, b"NF") => Ok((Reply::NotFound, used)),
        _ => invalid,
    }
}

fn decode_multi<'a>(
    buf: &'a [u8],
    expect: &Expect<'_>,
    max_value: usize,
    hits: &mut Vec<MultiHit>,
    first: Line<'_>,
    first_used: usize,
) -> Result<(Reply<'a>, usize), DecodeError> {
    let (mut parsed, mut at) = (first, first_used);
    let mut next = 0;
    let mut failed = false;
    loop {
        match parsed.code {
            b"MN" => {
                let reply = if failed {
                    Reply::ServerError
                } else {
                    Reply::Multi { hits: hits.len() }
                };
                return Ok((reply, at));
            }
            b"VA" => {
                check_opaque(&parsed, expect.opaque)?;
                let Some(index) = parsed.key.and_then(|k| expect.multi.find(k, next)) else {
                    return Err(DecodeError::Invalid(InvalidReply::Key));
                };
                next = index + 1;
                let len = parsed.len.unwrap_or_default();
                let end = data(buf, at, len)?;
                hits.push(MultiHit {
                    index,
                    value: at..at + len,
                });
                at = end;
            }
            b"EN" => check_opaque(&parsed, expect.opaque)?,
            _ if failed => {}
            _ => return Err(DecodeError::Invalid(InvalidReply::Line)),
        }
        let (l, used) = line(&buf[at..])?;
        if is_error_line(l) {
            failed = true;
            parsed = Line {
                code: b"",
                len: None,
                key: None,
                opaque: None,
            };
        } else {
            parsed = split(l, max_value)?;
        }
        at += used;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Codec, MultiKeys, OwnedReply, Protocol, decode_fragmented};
    use crate::workload::Keyspace;

    const MAX: usize = 1 << 20;

    fn expect(command: Command, key: &[u8], opaque: u32) -> Expect<'_> {
        Expect {
            command,
            key,
            multi: MultiKeys::default(),
            opaque,
        }
    }

    fn request<'a>(command: Command, key: &'a [u8], multi: MultiKeys<'a>, ttl: u32) -> Request<'a> {
        Request {
            command,
            key,
            multi,
            value: b"hello",
            ttl,
            opaque: 7,
        }
    }

    #[test]
    fn requests_are_encoded_as_protocol_txt_says() {
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [2, 0];
        let mut out = Vec::new();
        for r in [
            request(Command::Get, b"k1", MultiKeys::default(), 0),
            request(Command::Set, b"k1", MultiKeys::default(), 0),
            request(Command::Set, b"k1", MultiKeys::default(), 60),
            request(Command::Delete, b"k1", MultiKeys::default(), 0),
            request(Command::MultiGet, b"", MultiKeys::new(&ks, &keys), 0),
        ] {
            encode(&r, &mut out);
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "mg k1 v O7\r\nms k1 5 O7\r\nhello\r\nms k1 5 T60 O7\r\nhello\r\nmd k1 O7\r\n\
             mg k2 v k O7 q\r\nmg k0 v k O7 q\r\nmn\r\n"
        );
    }

    /// Replies as memcached 1.6.18 sends them (flags echoed in the order asked, on misses too).
    #[test]
    fn replies_decode_from_any_fragmentation() {
        let codec = Codec::new(Protocol::Meta, MAX);
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [0, 1, 2];
        let multi = Expect {
            multi: MultiKeys::new(&ks, &keys),
            ..expect(Command::MultiGet, b"", 6)
        };
        let stream = b"VA 5 O1\r\nhello\r\nEN O2\r\nEN\r\nHD O3\r\nNS O4\r\nHD O5\r\nNF O5\r\n\
VA 3 kk0 O6\r\nabc\r\nVA 0 kk2 O6\r\n\r\nMN\r\nMN\r\nSERVER_ERROR out of memory\r\n";
        let expects = [
            expect(Command::Get, b"k0", 1),
            expect(Command::Get, b"k0", 2),
            expect(Command::Get, b"k0", 9),
            expect(Command::Set, b"k0", 3),
            expect(Command::Set, b"k0", 4),
            expect(Command::Delete, b"k0", 5),
            expect(Command::Delete, b"k0", 5),
            multi,
            multi,
            expect(Command::Set, b"k0", 8),
        ];
        let want = vec![
            OwnedReply::Hit(b"hello".to_vec()),
            OwnedReply::Miss,
            OwnedReply::Miss,
            OwnedReply::Stored,
            OwnedReply::NotStored,
            OwnedReply::Deleted,
            OwnedReply::NotFound,
            OwnedReply::Multi(vec![(0, b"abc".to_vec()), (2, Vec::new())]),
            OwnedReply::Multi(vec![]),
            OwnedReply::ServerError,
        ];
        for step in [1, 2, 5, 10, 100, stream.len()] {
            assert_eq!(
                decode_fragmented(codec, stream, step, &expects).unwrap(),
                want,
                "step {step}"
            );
        }
    }

    #[test]
    fn every_truncation_is_incomplete_and_wrong_replies_are_invalid() {
        let hit = b"VA 5 O1\r\nhello\r\n";
        let get = expect(Command::Get, b"k", 1);
        for n in 0..hit.len() {
            assert_eq!(
                decode(&hit[..n], &get, MAX, &mut Vec::new()),
                Err(DecodeError::Incomplete),
                "n={n}"
            );
        }
        let inv = |b: &[u8], e: &Expect<'_>| decode(b, e, MAX, &mut Vec::new()).unwrap_err();
        assert_eq!(
            inv(b"VA 5 O2\r\nhello\r\n", &get),
            DecodeError::Invalid(InvalidReply::Opaque)
        );
        assert_eq!(
            inv(b"VA 5 O1\r\nhelloXX", &get),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(b"VA x O1\r\n", &get),
            DecodeError::Invalid(InvalidReply::Length)
        );
        assert_eq!(
            decode(b"VA 5 O1\r\nhello\r\n", &get, 4, &mut Vec::new()).unwrap_err(),
            DecodeError::Invalid(InvalidReply::Length)
        );
        assert_eq!(
            inv(b"HD O1\r\n", &get),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(b"EN O1\r\n", &expect(Command::Set, b"k", 1)),
            DecodeError::Invalid(InvalidReply::Line)
        );
        assert_eq!(
            inv(&[b'x'; MAX_LINE], &get),
            DecodeError::Invalid(InvalidReply::Line)
        );
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [0, 1];
        let multi = Expect {
            multi: MultiKeys::new(&ks, &keys),
            ..expect(Command::MultiGet, b"", 1)
        };
        assert_eq!(
            inv(b"VA 1 kk2 O1\r\na\r\nMN\r\n", &multi),
            DecodeError::Invalid(InvalidReply::Key)
        );
        assert_eq!(
            inv(b"VA 1 O1\r\na\r\nMN\r\n", &multi),
            DecodeError::Invalid(InvalidReply::Key)
        );
    }
}
