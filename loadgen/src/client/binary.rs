//! memcached binary protocol, client side, on the workspace `protocol` crate's Reprs.
//!
//! ```text
//! GET    key                  → NoError + flags extras + value | KeyNotFound
//! SET    key + value (+ ttl)  → NoError | KeyExists / ItemNotStored / NotFound | error status
//! DELETE key                  → NoError | KeyNotFound
//! multi-get: GETKQ k1 .. GETKQ kN, NOOP → a GETK reply (key echoed) per key found, then NOOP
//! ```
//!
//! Every request carries an opaque (the connection's request counter); the reply must echo it,
//! so a reply out of order is a protocol error rather than a wrong latency. A multi-get's
//! frames all carry the request's opaque.

use protocol::binary::{Opcode, ParseError, RequestRepr, ResponseRepr, Status, StoreExtras};

use super::{DecodeError, Expect, InvalidReply, MultiHit, Reply, Request};
use crate::workload::Command;

/// Bytes a reply body may carry beyond the value (flags extras, an echoed key, slack).
const BODY_SLACK: usize = 512;

/// Appends the request.
pub fn encode(r: &Request<'_>, out: &mut Vec<u8>) {
    match r.command {
        Command::Get => encode_get(r.key, r.opaque, out),
        Command::Set => encode_set(r.key, r.value, r.ttl, r.opaque, out),
        Command::Delete => plain(Opcode::Delete, false, r.key, r.opaque, out),
        Command::MultiGet => {
            for i in 0..r.multi.len() {
                plain(Opcode::GetK, true, r.multi.key(i), r.opaque, out);
            }
            plain(Opcode::Noop, false, b"", r.opaque, out);
        }
    }
}

fn plain(opcode: Opcode, quiet: bool, key: &[u8], opaque: u32, out: &mut Vec<u8>) {
    RequestRepr {
        opcode,
        quiet,
        opaque,
        cas: 0,
        vbucket: 0,
        extras: &[],
        key,
        value: &[],
    }
    .emit_into(out);
}

/// Appends a GET of `key`.
pub fn encode_get(key: &[u8], opaque: u32, out: &mut Vec<u8>) {
    plain(Opcode::Get, false, key, opaque, out);
}

/// Appends a SET of `key` to `value` with flags 0 and expiration `ttl`.
pub fn encode_set(key: &[u8], value: &[u8], ttl: u32, opaque: u32, out: &mut Vec<u8>) {
    let extras = StoreExtras {
        flags: 0,
        expiration: ttl,
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

fn frame(buf: &[u8], max_value: usize) -> Result<(ResponseRepr<'_>, usize), DecodeError> {
    let max_body = u32::try_from(max_value.saturating_add(BODY_SLACK)).unwrap_or(u32::MAX);
    match ResponseRepr::parse(buf, max_body) {
        Ok(ok) => Ok(ok),
        Err(ParseError::Incomplete { .. }) => Err(DecodeError::Incomplete),
        Err(ParseError::Invalid(_) | ParseError::UnknownOpcode { .. }) => {
            Err(DecodeError::Invalid(InvalidReply::Frame))
        }
    }
}

/// Decodes the reply to `expect` at the start of `buf`.
///
/// # Errors
/// [`DecodeError::Incomplete`] until the whole reply is in `buf`; [`DecodeError::Invalid`] for
/// a malformed frame, a body above `max_value` plus slack, or a reply to another request.
pub fn decode<'a>(
    buf: &'a [u8],
    expect: &Expect<'_>,
    max_value: usize,
    hits: &mut Vec<MultiHit>,
) -> Result<(Reply<'a>, usize), DecodeError> {
    if expect.command == Command::MultiGet {
        return decode_multi(buf, expect, max_value, hits);
    }
    let (repr, used) = frame(buf, max_value)?;
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
        (Command::Delete, Opcode::Delete, Status::NoError) => Reply::Deleted,
        (Command::Delete, Opcode::Delete, Status::KeyNotFound) => Reply::NotFound,
        (Command::Get, Opcode::Get, _)
        | (Command::Set, Opcode::Set, _)
        | (Command::Delete, Opcode::Delete, _) => Reply::ServerError,
        // A server that does not know the command echoes its opcode with an error status.
        (_, _, Status::UnknownCommand) => Reply::ServerError,
        _ => return Err(DecodeError::Invalid(InvalidReply::Opcode)),
    };
    Ok((reply, used))
}

/// A multi-get: GETK replies for the keys found, in request order, up to the NOOP's reply. An
/// error status for one of the keys makes the whole request a [`Reply::ServerError`].
fn decode_multi<'a>(
    buf: &'a [u8],
    expect: &Expect<'_>,
    max_value: usize,
    hits: &mut Vec<MultiHit>,
) -> Result<(Reply<'a>, usize), DecodeError> {
    let mut at = 0;
    let mut next = 0;
    let mut failed = false;
    loop {
        let (repr, used) = frame(&buf[at..], max_value)?;
        if repr.opaque != expect.opaque {
            return Err(DecodeError::Invalid(InvalidReply::Opaque));
        }
        match (repr.opcode, repr.status) {
            (Opcode::Noop, _) => {
                let reply = if failed {
                    Reply::ServerError
                } else {
                    Reply::Multi { hits: hits.len() }
                };
                return Ok((reply, at + used));
            }
            (Opcode::GetK, Status::NoError) => {
                let Some(index) = expect.multi.find(repr.key, next) else {
                    return Err(DecodeError::Invalid(InvalidReply::Key));
                };
                next = index + 1;
                // The value is the frame's tail: its offset in `buf` from the end of the frame.
                let end = at + used;
                hits.push(MultiHit {
                    index,
                    value: end - repr.value.len()..end,
                });
            }
            (Opcode::GetK, Status::KeyNotFound) => {}
            (Opcode::GetK, _) => failed = true,
            _ => return Err(DecodeError::Invalid(InvalidReply::Opcode)),
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
        expect(Command::Get, key, opaque)
    }

    fn set(key: &[u8], opaque: u32) -> Expect<'_> {
        expect(Command::Set, key, opaque)
    }

    fn expect(command: Command, key: &[u8], opaque: u32) -> Expect<'_> {
        Expect {
            command,
            key,
            multi: MultiKeys::default(),
            opaque,
        }
    }

    fn decode<'a>(
        buf: &'a [u8],
        expect: &Expect<'_>,
        max: usize,
    ) -> Result<(Reply<'a>, usize), DecodeError> {
        super::decode(buf, expect, max, &mut Vec::new())
    }

    fn keyed(opcode: Opcode, status: Status, opaque: u32, key: &[u8], value: &[u8]) -> Vec<u8> {
        let r = ResponseRepr {
            opcode,
            quiet: false,
            status,
            opaque,
            cas: 0,
            extras: if status == Status::NoError {
                &[0, 0, 0, 0]
            } else {
                &[]
            },
            key,
            value,
        };
        let mut buf = vec![0xa5; r.buffer_len()];
        r.emit(&mut buf);
        buf
    }

    #[test]
    fn ttl_delete_and_multi_get_are_encoded_as_the_spec_says() {
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [1, 2];
        let mut out = Vec::new();
        for (command, key) in [
            (Command::Set, &b"k0"[..]),
            (Command::Delete, b"k1"),
            (Command::MultiGet, b""),
        ] {
            encode(
                &Request {
                    command,
                    key,
                    multi: MultiKeys::new(&ks, &keys),
                    value: b"v",
                    ttl: 300,
                    opaque: 9,
                },
                &mut out,
            );
        }
        let mut frames = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let (r, used) = RequestRepr::parse(&out[at..], 1 << 20).unwrap();
            frames.push((
                r.opcode,
                r.quiet,
                r.opaque,
                r.key.to_vec(),
                r.extras.to_vec(),
            ));
            at += used;
        }
        let set_extras = StoreExtras {
            flags: 0,
            expiration: 300,
        }
        .emit()
        .to_vec();
        assert_eq!(
            frames,
            vec![
                (Opcode::Set, false, 9, b"k0".to_vec(), set_extras),
                (Opcode::Delete, false, 9, b"k1".to_vec(), vec![]),
                (Opcode::GetK, true, 9, b"k1".to_vec(), vec![]),
                (Opcode::GetK, true, 9, b"k2".to_vec(), vec![]),
                (Opcode::Noop, false, 9, vec![], vec![]),
            ]
        );
    }

    #[test]
    fn multi_get_and_delete_replies_decode_from_any_fragmentation() {
        let codec = Codec::new(Protocol::Binary, MAX);
        let ks = Keyspace::new(3, 2).unwrap();
        let keys = [0, 1, 2];
        let multi = Expect {
            multi: MultiKeys::new(&ks, &keys),
            ..expect(Command::MultiGet, b"", 5)
        };
        let mut stream = Vec::new();
        stream.extend(response(Opcode::Delete, Status::NoError, 4, &[], &[]));
        stream.extend(keyed(Opcode::GetK, Status::NoError, 5, b"k0", b"zero"));
        stream.extend(keyed(Opcode::GetK, Status::NoError, 5, b"k2", b"two"));
        stream.extend(response(Opcode::Noop, Status::NoError, 5, &[], &[]));
        stream.extend(response(
            Opcode::Delete,
            Status::KeyNotFound,
            6,
            &[],
            b"Not found",
        ));
        let expects = [
            expect(Command::Delete, b"k0", 4),
            multi,
            expect(Command::Delete, b"k0", 6),
        ];
        let want = vec![
            OwnedReply::Deleted,
            OwnedReply::Multi(vec![(0, b"zero".to_vec()), (2, b"two".to_vec())]),
            OwnedReply::NotFound,
        ];
        for step in [1, 2, 5, 10, 100, stream.len()] {
            assert_eq!(
                decode_fragmented(codec, &stream, step, &expects).unwrap(),
                want,
                "step {step}"
            );
        }
        // A key not asked for, or a frame of another request, is a protocol error.
        let other = keyed(Opcode::GetK, Status::NoError, 5, b"kx", b"?");
        assert_eq!(
            codec.decode(&other, &multi, &mut Vec::new()),
            Err(DecodeError::Invalid(InvalidReply::Key))
        );
        let late = keyed(Opcode::GetK, Status::NoError, 4, b"k0", b"?");
        assert_eq!(
            codec.decode(&late, &multi, &mut Vec::new()),
            Err(DecodeError::Invalid(InvalidReply::Opaque))
        );
    }

    #[test]
    fn requests_parse_back_as_what_was_meant() {
        let mut out = Vec::new();
        encode_get(b"k01", 3, &mut out);
        let get_len = out.len();
        encode_set(b"k02", b"hello", 0, 4, &mut out);
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
