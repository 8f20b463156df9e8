//! RESP (Redis's protocol), client side: commands as arrays of bulk strings, as Redis clients
//! send them, and RESP2 replies (the connection never says `HELLO 3`), read with
//! `protocol::resp`.
//!
//! ```text
//! *2\r\n$3\r\nGET\r\n$<n>\r\n<key>\r\n                     → $<len>\r\n<data>\r\n | $-1\r\n
//! *3\r\n$3\r\nSET\r\n$<n>\r\n<key>\r\n$<m>\r\n<value>\r\n  → +OK\r\n | $-1\r\n (not stored)
//! any                                                    → -<error>\r\n
//! ```

use protocol::resp::{Frame, FrameError, MAX_HEADER_LEN, parse_integer, write_command};

use super::{DecodeError, Expect, InvalidReply, Reply};
use crate::workload::Command;

/// Appends `GET <key>`.
pub fn encode_get(key: &[u8], out: &mut Vec<u8>) {
    write_command(out, &[&b"GET"[..], key]);
}

/// Appends `SET <key> <value>`.
pub fn encode_set(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    write_command(out, &[&b"SET"[..], key, value]);
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
) -> Result<(Reply<'a>, usize), DecodeError> {
    if buf.first() == Some(&b'$') {
        check_bulk_len(buf, max_value)?;
    }
    let (frame, used) = Frame::parse(buf).map_err(|e| match e {
        FrameError::Incomplete { .. } => DecodeError::Incomplete,
        FrameError::Invalid => DecodeError::Invalid(InvalidReply::Line),
    })?;
    let reply = match (expect.command, frame) {
        (_, Frame::Error(_)) => Reply::ServerError,
        (Command::Get, Frame::Bulk(value)) => Reply::Hit { value },
        (Command::Get, Frame::Null) => Reply::Miss,
        (Command::Set, Frame::Simple(b"OK")) => Reply::Stored,
        (Command::Set, Frame::Null) => Reply::NotStored,
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
    fn requests_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_get(b"k01", &mut out);
        encode_set(b"k02", b"hello", &mut out);
        encode_set(b"k03", b"", &mut out);
        assert_eq!(
            out,
            &b"*2\r\n$3\r\nGET\r\n$3\r\nk01\r\n\
               *3\r\n$3\r\nSET\r\n$3\r\nk02\r\n$5\r\nhello\r\n\
               *3\r\n$3\r\nSET\r\n$3\r\nk03\r\n$0\r\n\r\n"[..]
        );
    }

    #[test]
    fn hit_miss_store_and_error_replies_decode() {
        let hit = b"$5\r\nhello\r\n";
        assert_eq!(
            decode(hit, &get(b"k"), MAX),
            Ok((Reply::Hit { value: b"hello" }, hit.len()))
        );
        assert_eq!(
            decode(b"$0\r\n\r\n", &get(b"k"), MAX),
            Ok((Reply::Hit { value: b"" }, 6))
        );
        assert_eq!(decode(b"$-1\r\n", &get(b"k"), MAX), Ok((Reply::Miss, 5)));
        assert_eq!(decode(b"_\r\n", &get(b"k"), MAX), Ok((Reply::Miss, 3)));
        assert_eq!(decode(b"+OK\r\n", &set(b"k"), MAX), Ok((Reply::Stored, 5)));
        assert_eq!(
            decode(b"$-1\r\n", &set(b"k"), MAX),
            Ok((Reply::NotStored, 5))
        );
        let oom = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";
        assert_eq!(
            decode(oom, &set(b"k"), MAX),
            Ok((Reply::ServerError, oom.len()))
        );
        assert_eq!(
            decode(b"-ERR x\r\n", &get(b"k"), MAX),
            Ok((Reply::ServerError, 8))
        );
    }

    #[test]
    fn every_truncation_is_incomplete() {
        for reply in [
            &b"$5\r\nhe\r\nl\r\n"[..],
            b"$-1\r\n",
            b"+OK\r\n",
            b"-ERR no\r\n",
        ] {
            let expect = if reply == b"+OK\r\n" {
                set(b"k")
            } else {
                get(b"k")
            };
            for n in 0..reply.len() {
                assert_eq!(
                    decode(&reply[..n], &expect, MAX),
                    Err(DecodeError::Incomplete),
                    "{reply:?} cut at {n}"
                );
            }
            assert!(decode(reply, &expect, MAX).is_ok());
        }
    }

    #[test]
    fn wrong_replies_are_invalid_not_panics() {
        let inv = |b: &[u8], e: Expect<'_>| decode(b, &e, MAX).unwrap_err();
        let line = DecodeError::Invalid(InvalidReply::Line);
        let length = DecodeError::Invalid(InvalidReply::Length);
        assert_eq!(inv(b"+OK\r\n", get(b"k")), line);
        assert_eq!(inv(b"$1\r\nv\r\n", set(b"k")), line);
        assert_eq!(inv(b":1\r\n", get(b"k")), line);
        assert_eq!(inv(b"*1\r\n$1\r\nv\r\n", get(b"k")), line);
        assert_eq!(inv(b"$1\r\nvXX", get(b"k")), line);
        assert_eq!(inv(b"?\r\n", get(b"k")), line);
        // Lengths that cannot be right are refused before any of their bytes arrive.
        assert_eq!(inv(b"$2147483648\r\n", get(b"k")), length);
        assert_eq!(inv(b"$-2\r\n", get(b"k")), length);
        assert_eq!(inv(b"$x\r\n", get(b"k")), length);
        assert_eq!(inv(&[b'$'; 64], get(b"k")), length);
        assert_eq!(
            decode(b"$5\r\nhello\r\n", &get(b"k"), 4).unwrap_err(),
            length
        );
    }

    #[test]
    fn pipelined_replies_decode_from_any_fragmentation() {
        let codec = Codec::new(Protocol::Resp, MAX);
        let big: Vec<u8> = (0..3_000).map(|i| b'a' + (i % 26) as u8).collect();
        let mut stream = Vec::new();
        stream.extend_from_slice(b"+OK\r\n$11\r\nhello world\r\n$-1\r\n");
        stream.extend_from_slice(format!("${}\r\n", big.len()).as_bytes());
        stream.extend_from_slice(&big);
        stream.extend_from_slice(b"\r\n-ERR busy\r\n");
        let expects = [set(b"a"), get(b"a"), get(b"x"), get(b"b"), set(b"c")];
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
