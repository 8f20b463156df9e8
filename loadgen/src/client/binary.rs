//! memcached binary protocol, client side, on the workspace `protocol` crate's Reprs.
//!
//! ```text
//! GET  key          → NoError + flags extras + value | KeyNotFound
//! SET  key + value  → NoError | KeyExists / ItemNotStored / NotFound | error status
//! ```
//!
//! Every request carries an opaque (the connection's request counter); the reply must echo it,
//! so a reply out of order is a protocol error rather than a wrong latency.

use protocol::binary::{Opcode, ParseError, RequestRepr, ResponseRepr, Status, StoreExtras};

use super::{DecodeError, Expect, InvalidReply, Reply};
use crate::workload::Command;

/// Bytes a reply body may carry beyond the value (flags extras, an echoed key, slack).
const BODY_SLACK: usize = 512;

/// Appends a GET of `key`.
pub fn encode_get(key: &[u8], opaque: u32, out: &mut Vec<u8>) {
    RequestRepr {
        opcode: Opcode::Get,
        quiet: false,
        opaque,
        cas: 0,
        vbucket: 0,
        extras: &[],
        key,
        value: &[],
    }
    .emit_into(out);
}

/// Appends a SET of `key` to `value` with flags 0 and no expiry.
pub fn encode_set(key: &[u8], value: &[u8], opaque: u32, out: &mut Vec<u8>) {
    let extras = StoreExtras {
        flags: 0,
        expiration: 0,
    }
    .emit();
    RequestRepr {
        opcode: Opcode::Set,
        quiet: false,
        opaque,
        cas: 0,
        vbucket: 0,
        extras: &extras,
        key,
        value,
    }
    .emit_into(out);
}

/// Decodes the reply to `expect` at the start of `buf`.
///
/// # Errors
/// [`DecodeError::Incomplete`] until the whole frame is in `buf`; [`DecodeError::Invalid`] for
/// a malformed frame, a body above `max_value` plus slack, or a reply to another request.
pub fn decode<'a>(
    buf: &'a [u8],
    expect: &Expect<'_>,
    max_value: usize,
) -> Result<(Reply<'a>, usize), DecodeError> {
    let max_body = u32::try_from(max_value.saturating_add(BODY_SLACK)).unwrap_or(u32::MAX);
    let (repr, used) = match ResponseRepr::parse(buf, max_body) {
        Ok(ok) => ok,
        Err(ParseError::Incomplete { .. }) => return Err(DecodeError::Incomplete),
        Err(ParseError::Invalid(_) | ParseError::UnknownOpcode { .. }) => {
            return Err(DecodeError::Invalid(InvalidReply::Frame));
        }
    };
    if repr.opaque != expect.opaque {
        return Err(DecodeError::Invalid(InvalidReply::Opaque));
    }
    let reply = match (expect.command, repr.opcode, repr.status) {
        (Command::Get, Opcode::Get, Status::NoError) => Reply::Hit { value: repr.value },
        (Command::Get, Opcode::Get, Status::KeyNotFound) => Reply::Miss,
        (Command::Set, Opcode::Set, Status::NoError) => Reply::Stored,
        (
            Command::Set,
            Opcode::Set,
            Status::KeyExists | Status::ItemNotStored | Status::KeyNotFound,
        ) => Reply::NotStored,
        (Command::Get, Opcode::Get, _) | (Command::Set, Opcode::Set, _) => Reply::ServerError,
        // A server that does not know the command echoes its opcode with an error status.
        (_, _, Status::UnknownCommand) => Reply::ServerError,
        _ => return Err(DecodeError::Invalid(InvalidReply::Opcode)),
    };
    Ok((reply, used))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Codec, OwnedReply, Protocol, decode_fragmented};

    const MAX: usize = 1 << 20;

    /// What memcached 1.6 sends for a GET hit of a 5-byte value with flags 0 (opaque 7).
    static GET_HIT_HELLO: [u8; 33] = [
        0x81, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00,
        0x00, // magic, opcode, key_len, extras_len, type, status
        0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x07, // body_len 9, opaque 7
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // cas 1
        0x00, 0x00, 0x00, 0x00, b'h', b'e', b'l', b'l', b'o',
    ];

    fn response(
        opcode: Opcode,
        status: Status,
        opaque: u32,
        extras: &[u8],
        value: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let r = ResponseRepr {
            opcode,
            quiet: false,
            status,
            opaque,
            cas: 0,
            extras,
            key: &[],
            value,
        };
        let mut buf = vec![0xa5; r.buffer_len()];
        r.emit(&mut buf);
        out.extend_from_slice(&buf);
        out
    }

    fn get(key: &[u8], opaque: u32) -> Expect<'_> {
        Expect {
            command: Command::Get,
            key,
            opaque,
        }
    }

    fn set(key: &[u8], opaque: u32) -> Expect<'_> {
        Expect {
            command: Command::Set,
            key,
            opaque,
        }
    }

    #[test]
    fn requests_parse_back_as_what_was_meant() {
        let mut out = Vec::new();
        encode_get(b"k01", 3, &mut out);
        let get_len = out.len();
        encode_set(b"k02", b"hello", 4, &mut out);
        let (g, used) = RequestRepr::parse(&out, 1 << 20).unwrap();
        assert_eq!(
            (g.opcode, g.quiet, g.opaque, g.key, g.value, used),
            (Opcode::Get, false, 3, &b"k01"[..], &b""[..], get_len)
        );
        let (s, used) = RequestRepr::parse(&out[get_len..], 1 << 20).unwrap();
        assert_eq!(
            (s.opcode, s.opaque, s.key, s.value),
            (Opcode::Set, 4, &b"k02"[..], &b"hello"[..])
        );
        assert_eq!(
            StoreExtras::parse(s.extras),
            Some(StoreExtras {
                flags: 0,
                expiration: 0
            })
        );
        assert_eq!(get_len + used, out.len());
    }

    #[test]
    fn captured_hit_decodes_field_by_field() {
        assert_eq!(
            decode(&GET_HIT_HELLO, &get(b"k", 7), MAX),
            Ok((Reply::Hit { value: b"hello" }, GET_HIT_HELLO.len()))
        );
        for n in 0..GET_HIT_HELLO.len() {
            assert_eq!(
                decode(&GET_HIT_HELLO[..n], &get(b"k", 7), MAX),
                Err(DecodeError::Incomplete),
                "n={n}"
            );
        }
    }

    #[test]
    fn statuses_map_to_replies() {
        let miss = response(Opcode::Get, Status::KeyNotFound, 1, &[], b"Not found");
        assert_eq!(
            decode(&miss, &get(b"k", 1), MAX),
            Ok((Reply::Miss, miss.len()))
        );
        let stored = response(Opcode::Set, Status::NoError, 2, &[], &[]);
        assert_eq!(decode(&stored, &set(b"k", 2), MAX), Ok((Reply::Stored, 24)));
        let exists = response(
            Opcode::Set,
            Status::KeyExists,
            2,
            &[],
            b"Data exists for key.",
        );
        assert_eq!(
            decode(&exists, &set(b"k", 2), MAX).unwrap().0,
            Reply::NotStored
        );
        let oom = response(Opcode::Set, Status::OutOfMemory, 2, &[], b"Out of memory");
        assert_eq!(
            decode(&oom, &set(b"k", 2), MAX).unwrap().0,
            Reply::ServerError
        );
        let too_large = response(Opcode::Get, Status::ValueTooLarge, 3, &[], b"Too large.");
        assert_eq!(
            decode(&too_large, &get(b"k", 3), MAX).unwrap().0,
            Reply::ServerError
        );
    }

    #[test]
    fn replies_to_another_request_are_protocol_errors() {
        let stored = response(Opcode::Set, Status::NoError, 2, &[], &[]);
        assert_eq!(
            decode(&stored, &set(b"k", 3), MAX),
            Err(DecodeError::Invalid(InvalidReply::Opaque))
        );
        assert_eq!(
            decode(&stored, &get(b"k", 2), MAX),
            Err(DecodeError::Invalid(InvalidReply::Opcode))
        );
        let mut bad = GET_HIT_HELLO;
        bad[0] = 0x80; // a request magic
        assert_eq!(
            decode(&bad, &get(b"k", 7), MAX),
            Err(DecodeError::Invalid(InvalidReply::Frame))
        );
        // A body far above the largest value is refused from the header alone.
        let mut huge = GET_HIT_HELLO;
        huge[8..12].copy_from_slice(&(64u32 << 20).to_be_bytes());
        assert_eq!(
            decode(&huge[..24], &get(b"k", 7), MAX),
            Err(DecodeError::Invalid(InvalidReply::Frame))
        );
    }

    #[test]
    fn pipelined_replies_decode_from_any_fragmentation() {
        let codec = Codec::new(Protocol::Binary, MAX);
        let big: Vec<u8> = (0..5_000u32).map(|i| (i * 7) as u8).collect();
        let mut stream = Vec::new();
        stream.extend(response(Opcode::Set, Status::NoError, 1, &[], &[]));
        stream.extend_from_slice(&GET_HIT_HELLO);
        stream.extend(response(
            Opcode::Get,
            Status::KeyNotFound,
            8,
            &[],
            b"Not found",
        ));
        stream.extend(response(
            Opcode::Get,
            Status::NoError,
            9,
            &[0, 0, 0, 5],
            &big,
        ));
        stream.extend(response(
            Opcode::Set,
            Status::OutOfMemory,
            10,
            &[],
            b"Out of memory",
        ));
        let expects = [
            set(b"a", 1),
            get(b"a", 7),
            get(b"b", 8),
            get(b"c", 9),
            set(b"d", 10),
        ];
        let want = vec![
            OwnedReply::Stored,
            OwnedReply::Hit(b"hello".to_vec()),
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
