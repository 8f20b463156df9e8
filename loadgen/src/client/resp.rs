//! RESP (Redis's protocol), client side: commands as arrays of bulk strings, as Redis clients
//! send them, and RESP2 replies (the connection never says `HELLO 3`), read with
//! `protocol::resp`.
//!
//! ```text
//! GET <key>                        → $<len>\r\n<data>\r\n | $-1\r\n
//! SET <key> <value> [EX|EXAT <ttl>] → +OK\r\n | $-1\r\n (not stored)
//! DEL <key>                        → :1\r\n | :0\r\n
//! MGET <k1> <k2> ...               → *<n>\r\n and per key $<len>\r\n<data>\r\n or $-1\r\n
//! any                              → -<error>\r\n
//! ```
//!
//! A TTL follows memcached's rules, as every protocol of the generator does: up to 30 days it
//! is relative (`EX`), beyond it a unix time (`EXAT`).

use protocol::resp::{Frame, FrameError, MAX_HEADER_LEN, parse_integer, write_bulk, write_header};

use super::{DecodeError, Expect, InvalidReply, MultiHit, Reply, Request};
use crate::workload::Command;

/// memcached's largest relative TTL: larger ones are unix times.
const MAX_RELATIVE_TTL: u32 = 60 * 60 * 24 * 30;

/// Appends the request: the command's header and name as constants, each argument with
/// `write_bulk` (nothing allocated, no argument list built).
pub fn encode(r: &Request<'_>, out: &mut Vec<u8>) {
    match r.command {
        Command::Get => {
            out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
            write_bulk(out, r.key);
        }
        Command::Set if r.ttl == 0 => {
            out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
            write_bulk(out, r.key);
            write_bulk(out, r.value);
        }
        Command::Set => {
            out.extend_from_slice(b"*5\r\n$3\r\nSET\r\n");
            write_bulk(out, r.key);
            write_bulk(out, r.value);
            if r.ttl <= MAX_RELATIVE_TTL {
                out.extend_from_slice(b"$2\r\nEX\r\n");
            } else {
                out.extend_from_slice(b"$4\r\nEXAT\r\n");
            }
            let mut digits = [0u8; 10];
            write_bulk(out, decimal(r.ttl, &mut digits));
        }
        Command::Delete => {
            out.extend_from_slice(b"*2\r\n$3\r\nDEL\r\n");
            write_bulk(out, r.key);
        }
        Command::MultiGet => {
            write_header(out, r.multi.len() + 1);
            out.extend_from_slice(b"$4\r\nMGET\r\n");
            for i in 0..r.multi.len() {
                write_bulk(out, r.multi.key(i));
            }
        }
    }
}

/// `n` in decimal, written into the end of `digits`.
fn decimal(mut n: u32, digits: &mut [u8; 10]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[at..];
        }
    }
}

/// One token at `buf`, a bulk string's announced length checked against `max_value` first.
fn token(buf: &[u8], max_value: usize) -> Result<(Frame<'_>, usize), DecodeError> {
    if buf.first() == Some(&b'$') {
        check_bulk_len(buf, max_value)?;
    }
    Frame::parse(buf).map_err(|e| match e {
        FrameError::Incomplete { .. } => DecodeError::Incomplete,
        FrameError::Invalid => DecodeError::Invalid(InvalidReply::Line),
    })
}

/// Decodes the reply to `expect` at the start of `buf`. A bulk string longer than
/// `max_value` is refused as soon as its header is in, before its bytes arrive.
///
/// # Errors
/// [`DecodeError::Incomplete`] until the whole reply is in `buf`; [`DecodeError::Invalid`]
/// for anything that is not a reply to `expect`.
pub fn decode<'a>(
    buf: &'a [u8],
    expect: &Expect<'_>,
    max_value: usize,
    hits: &mut Vec<MultiHit>,
) -> Result<(Reply<'a>, usize), DecodeError> {
    let (frame, used) = token(buf, max_value)?;
    let reply = match (expect.command, frame) {
        (_, Frame::Error(_)) => Reply::ServerError,
        (Command::Get, Frame::Bulk(value)) => Reply::Hit { value },
        (Command::Get, Frame::Null) => Reply::Miss,
        (Command::Set, Frame::Simple(b"OK")) => Reply::Stored,
        (Command::Set, Frame::Null) => Reply::NotStored,
        (Command::Delete, Frame::Integer(1)) => Reply::Deleted,
        (Command::Delete, Frame::Integer(0)) => Reply::NotFound,
        (Command::MultiGet, Frame::Array(n)) if n == expect.multi.len() => {
            let mut at = used;
            for index in 0..n {
                let (frame, len) = token(&buf[at..], max_value)?;
                match frame {
                    Frame::Bulk(value) => hits.push(MultiHit {
                        index,
                        value: at + len - 2 - value.len()..at + len - 2,
                    }),
                    Frame::Null => {}
                    _ => return Err(DecodeError::Invalid(InvalidReply::Line)),
                }
                at += len;
            }
            return Ok((Reply::Multi { hits: hits.len() }, at));
        }
        _ => return Err(DecodeError::Invalid(InvalidReply::Line)),
    };
    Ok((reply, used))
}

/// Refuses a `$<len>` header announcing more than `max_value` bytes (or not a length).
fn check_bulk_len(buf: &[u8], max_value: usize) -> Result<(), DecodeError> {
    let window = &buf[..buf.len().min(MAX_HEADER_LEN + 2)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        return if window.len() >= MAX_HEADER_LEN + 2 {
            Err(DecodeError::Invalid(InvalidReply::Length))
        } else {
            Err(DecodeError::Incomplete)
        };
    };
    match parse_integer(&buf[1..cr]) {
        Some(-1) => Ok(()),
        Some(len) if len >= 0 && len as u64 <= max_value as u64 => Ok(()),
        _ => Err(DecodeError::Invalid(InvalidReply::Length)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Codec, MultiKeys, OwnedReply, Protocol, decode_fragmented};
    use crate::workload::Keyspace;

    const MAX: usize = 1 << 20;

    fn expect(command: Command, key: &[u8]) -> Expect<'_> {
        Expect {
            command,
            key,
            multi: MultiKeys::default(),
            opaque: 0,
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
    fn requests_are_arrays_of_bulk_strings() {
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [2, 0];
        let mut out = Vec::new();
        for r in [
            request(Command::Get, b"k1", MultiKeys::default(), 0),
            request(Command::Set, b"k1", MultiKeys::default(), 0),
            request(Command::Set, b"k1", MultiKeys::default(), 60),
            request(Command::Set, b"k1", MultiKeys::default(), 2_000_000_000),
            request(Command::Delete, b"k1", MultiKeys::default(), 0),
            request(Command::MultiGet, b"", MultiKeys::new(&ks, &keys), 0),
        ] {
            encode(&r, &mut out);
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n\
             *3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$5\r\nhello\r\n\
             *5\r\n$3\r\nSET\r\n$2\r\nk1\r\n$5\r\nhello\r\n$2\r\nEX\r\n$2\r\n60\r\n\
             *5\r\n$3\r\nSET\r\n$2\r\nk1\r\n$5\r\nhello\r\n$4\r\nEXAT\r\n$10\r\n2000000000\r\n\
             *2\r\n$3\r\nDEL\r\n$2\r\nk1\r\n\
             *3\r\n$4\r\nMGET\r\n$2\r\nk2\r\n$2\r\nk0\r\n"
        );
    }

    /// Each request is what `write_command` writes for its words (the general encoder).
    #[test]
    fn requests_are_what_write_command_writes() {
        use protocol::resp::write_command;
        let ks = Keyspace::new(40, 16).unwrap();
        let keys: Vec<u64> = (0..40).collect();
        for ttl in [
            0,
            1,
            9,
            10,
            99,
            MAX_RELATIVE_TTL,
            MAX_RELATIVE_TTL + 1,
            u32::MAX,
        ] {
            for (command, key) in [
                (Command::Get, &b"k"[..]),
                (Command::Get, &[b'x'; 250][..]),
                (Command::Set, b"key:0000000001"),
                (Command::Delete, b"k2"),
            ] {
                let mut got = Vec::new();
                encode(&request(command, key, MultiKeys::default(), ttl), &mut got);
                let ttl_text = ttl.to_string();
                let option: &[u8] = if ttl <= MAX_RELATIVE_TTL {
                    b"EX"
                } else {
                    b"EXAT"
                };
                let words: Vec<&[u8]> = match command {
                    Command::Get => vec![b"GET", key],
                    Command::Set if ttl == 0 => vec![b"SET", key, b"hello"],
                    Command::Set => vec![b"SET", key, b"hello", option, ttl_text.as_bytes()],
                    _ => vec![b"DEL", key],
                };
                let mut want = Vec::new();
                write_command(&mut want, &words);
                assert_eq!(got, want, "{command:?} ttl {ttl}");
            }
        }
        for n in [1, 2, 9, 10, 11, 40] {
            let mut got = Vec::new();
            let multi = MultiKeys::new(&ks, &keys[..n]);
            encode(&request(Command::MultiGet, b"", multi, 0), &mut got);
            let mut words: Vec<&[u8]> = vec![b"MGET"];
            words.extend((0..n).map(|i| multi.key(i)));
            let mut want = Vec::new();
            write_command(&mut want, &words);
            assert_eq!(got, want, "mget of {n}");
        }
    }

    /// Replies as redis-server 7 sends them, fed in pieces of every size.
    #[test]
    fn replies_decode_from_any_fragmentation() {
        let codec = Codec::new(Protocol::Resp, MAX);
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [0, 1, 2];
        let multi = Expect {
            multi: MultiKeys::new(&ks, &keys),
            ..expect(Command::MultiGet, b"")
        };
        let big: Vec<u8> = (0..3_000).map(|i| b'a' + (i % 26) as u8).collect();
        let mut stream = Vec::new();
        stream.extend_from_slice(b"+OK\r\n$11\r\nhello world\r\n$-1\r\n$-1\r\n:1\r\n:0\r\n");
        stream.extend_from_slice(format!("${}\r\n", big.len()).as_bytes());
        stream.extend_from_slice(&big);
        stream.extend_from_slice(
            b"\r\n*3\r\n$3\r\nabc\r\n$-1\r\n$0\r\n\r\n*3\r\n$-1\r\n$-1\r\n$-1\r\n",
        );
        stream.extend_from_slice(b"-OOM command not allowed when used memory > 'maxmemory'.\r\n");
        let expects = [
            expect(Command::Set, b"a"),
            expect(Command::Get, b"a"),
            expect(Command::Get, b"x"),
            expect(Command::Set, b"a"),
            expect(Command::Delete, b"a"),
            expect(Command::Delete, b"a"),
            expect(Command::Get, b"b"),
            multi,
            multi,
            expect(Command::Set, b"c"),
        ];
        let want = vec![
            OwnedReply::Stored,
            OwnedReply::Hit(b"hello world".to_vec()),
            OwnedReply::Miss,
            OwnedReply::NotStored,
            OwnedReply::Deleted,
            OwnedReply::NotFound,
            OwnedReply::Hit(big.clone()),
            OwnedReply::Multi(vec![(0, b"abc".to_vec()), (2, Vec::new())]),
            OwnedReply::Multi(vec![]),
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

    #[test]
    fn every_truncation_is_incomplete() {
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [0, 1];
        let multi = Expect {
            multi: MultiKeys::new(&ks, &keys),
            ..expect(Command::MultiGet, b"")
        };
        for (reply, expect) in [
            (&b"$5\r\nhe\r\nl\r\n"[..], expect(Command::Get, b"k")),
            (b"$-1\r\n", expect(Command::Get, b"k")),
            (b"+OK\r\n", expect(Command::Set, b"k")),
            (b":1\r\n", expect(Command::Delete, b"k")),
            (b"-ERR no\r\n", expect(Command::Get, b"k")),
            (b"*2\r\n$1\r\na\r\n$-1\r\n", multi),
        ] {
            for n in 0..reply.len() {
                assert_eq!(
                    decode(&reply[..n], &expect, MAX, &mut Vec::new()),
                    Err(DecodeError::Incomplete),
                    "{reply:?} cut at {n}"
                );
            }
            assert!(decode(reply, &expect, MAX, &mut Vec::new()).is_ok());
        }
    }

    #[test]
    fn wrong_replies_are_invalid_not_panics() {
        let inv = |b: &[u8], e: Expect<'_>| decode(b, &e, MAX, &mut Vec::new()).unwrap_err();
        let line = DecodeError::Invalid(InvalidReply::Line);
        let length = DecodeError::Invalid(InvalidReply::Length);
        let get = expect(Command::Get, b"k");
        assert_eq!(inv(b"+OK\r\n", get), line);
        assert_eq!(inv(b"$1\r\nv\r\n", expect(Command::Set, b"k")), line);
        assert_eq!(inv(b":2\r\n", expect(Command::Delete, b"k")), line);
        assert_eq!(inv(b":1\r\n", get), line);
        assert_eq!(inv(b"*1\r\n$1\r\nv\r\n", get), line);
        assert_eq!(inv(b"$1\r\nvXX", get), line);
        assert_eq!(inv(b"?\r\n", get), line);
        // Lengths that cannot be right are refused before any of their bytes arrive.
        assert_eq!(inv(b"$2147483648\r\n", get), length);
        assert_eq!(inv(b"$-2\r\n", get), length);
        assert_eq!(inv(b"$x\r\n", get), length);
        assert_eq!(inv(&[b'$'; 64], get), length);
        assert_eq!(
            decode(b"$5\r\nhello\r\n", &get, 4, &mut Vec::new()).unwrap_err(),
            length
        );
        // A multi-get's reply has one element per key, each a bulk string or a null.
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [0, 1];
        let multi = Expect {
            multi: MultiKeys::new(&ks, &keys),
            ..expect(Command::MultiGet, b"")
        };
        assert_eq!(inv(b"*3\r\n", multi), line);
        assert_eq!(inv(b"*2\r\n:1\r\n", multi), line);
        assert_eq!(inv(b"*2\r\n$9999999\r\n", multi), length);
    }
}
