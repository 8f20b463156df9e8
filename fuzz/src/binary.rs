//! The `binary` target: `protocol::binary` request and response frames from arbitrary bytes.
//!
//! Input: one byte choosing the body limit, then the frame bytes. Beyond "no panic":
//! - a parsed frame has the lengths its header gives, a key of at most 250 bytes, extras its
//!   command can read, and emits back to the same bytes (`data_type`, which is not kept,
//!   aside); bytes after it are not looked at;
//! - [`RequestRepr::parse_header`] agrees with [`RequestRepr::parse`];
//! - every prefix of the input says what the whole does: `Incomplete { needed }` with exactly
//!   the missing bytes while the frame is short, and once the 24-byte header is in, the same
//!   verdict as the whole (every rejection is decided from the header alone);
//! - the same holds for response frames, and every opcode byte survives a round trip.

use protocol::binary::{
    CounterExtras, ExpirationExtras, HEADER_LEN, MAX_KEY_LEN, Opcode, ParseError, RequestHeader,
    RequestRepr, ResponseHeader, ResponseRepr, Status, StoreExtras, VerbosityExtras,
};

/// Body limits the parser is called with: tiny, the server's default (2 x 1 MiB) and none.
const MAX_BODIES: [u32; 4] = [0, 64, 2 << 20, u32::MAX];

/// Runs every check on one input. Panics on a violation.
pub fn check(data: &[u8]) {
    let Some((&choice, frame)) = data.split_first() else {
        return;
    };
    let max_body = MAX_BODIES[usize::from(choice) % MAX_BODIES.len()];
    check_request(frame, max_body);
    check_response(frame, max_body);
    for byte in [choice, frame.get(1).copied().unwrap_or(0)] {
        let (opcode, quiet) = Opcode::from_wire(byte);
        assert_eq!(opcode.to_wire(quiet), byte, "opcode {byte:#04x} round trip");
        let _ = Status::from_wire(u16::from(byte)).message();
    }
}

/// What a whole buffer parses to, with the frame length when it parsed.
type Parsed<'a> = Result<(RequestRepr<'a>, usize), ParseError>;

fn check_request(buf: &[u8], max_body: u32) {
    let whole: Parsed<'_> = RequestRepr::parse(buf, max_body);
    let header = RequestRepr::parse_header(buf, max_body);
    match (&whole, &header) {
        (Ok((repr, len)), Ok(header)) => {
            assert_eq!(header.frame_len(), *len);
            check_parsed_request(buf, repr, *len, max_body);
        }
        (Err(ParseError::Incomplete { needed }), Ok(header)) => {
            assert!(buf.len() >= HEADER_LEN);
            assert_eq!(buf.len() + needed, header.frame_len(), "needed is exact");
        }
        (Err(ParseError::Incomplete { needed }), Err(ParseError::Incomplete { needed: h })) => {
            assert_eq!(needed, h);
            assert_eq!(buf.len() + needed, HEADER_LEN);
        }
        (Err(whole), Err(header)) => assert_eq!(whole, header, "header alone decides"),
        (whole, header) => panic!("parse {whole:?} but parse_header {header:?}"),
    }
    if let Err(ParseError::UnknownOpcode { frame_len, .. }) = whole {
        let header = RequestHeader::new_checked(buf).expect("an unknown opcode has a header");
        assert_eq!(frame_len, HEADER_LEN + header.body_len() as usize);
    }
    check_request_prefixes(buf, max_body, &whole);
}

fn check_parsed_request(buf: &[u8], repr: &RequestRepr<'_>, len: usize, max_body: u32) {
    assert!(len <= buf.len());
    assert_eq!(
        len,
        HEADER_LEN + repr.extras.len() + repr.key.len() + repr.value.len()
    );
    assert!(repr.key.len() <= MAX_KEY_LEN);
    assert!(len - HEADER_LEN <= max_body as usize);
    assert_eq!(repr.buffer_len(), len);
    let extras = repr.extras;
    let readable = match repr.opcode {
        Opcode::Set | Opcode::Add | Opcode::Replace => StoreExtras::parse(extras).is_some(),
        Opcode::Increment | Opcode::Decrement => CounterExtras::parse(extras).is_some(),
        Opcode::Touch | Opcode::Gat | Opcode::GatK => ExpirationExtras::parse(extras).is_some(),
        Opcode::Flush => extras.is_empty() || ExpirationExtras::parse(extras).is_some(),
        Opcode::Verbosity => VerbosityExtras::parse(extras).is_some(),
        Opcode::Unknown(byte) => panic!("unknown opcode {byte:#04x} parsed"),
        _ => extras.is_empty(),
    };
    assert!(readable, "{:?} parsed with extras {extras:?}", repr.opcode);
    let mut emitted = Vec::new();
    repr.emit_into(&mut emitted);
    let mut expected = buf[..len].to_vec();
    expected[5] = 0; // data_type is not kept
    assert_eq!(emitted, expected, "round trip");
    let mut fixed = vec![0xa5; len];
    repr.emit(&mut fixed);
    assert_eq!(fixed, emitted);
    assert_eq!(RequestRepr::parse(&emitted, max_body), Ok((*repr, len)));
}

/// Every prefix agrees with the whole: short of the header, `Incomplete` for the rest of it;
/// with the header, the whole's verdict, or `Incomplete` for exactly the missing bytes.
fn check_request_prefixes(buf: &[u8], max_body: u32, whole: &Parsed<'_>) {
    for n in prefix_lengths(buf.len()) {
        let prefix = &buf[..n];
        let got = RequestRepr::parse(prefix, max_body);
        if n < HEADER_LEN {
            assert_eq!(
                got,
                Err(ParseError::Incomplete {
                    needed: HEADER_LEN - n
                }),
                "prefix {n}"
            );
            continue;
        }
        match whole {
            Ok((repr, len)) if n >= *len => assert_eq!(got, Ok((*repr, *len)), "prefix {n}"),
            Ok((_, len)) => assert_eq!(
                got,
                Err(ParseError::Incomplete { needed: len - n }),
                "prefix {n}"
            ),
            Err(ParseError::Incomplete { needed }) => assert_eq!(
                got,
                Err(ParseError::Incomplete {
                    needed: needed + buf.len() - n
                }),
                "prefix {n}"
            ),
            Err(error) => assert_eq!(got, Err(*error), "prefix {n}"),
        }
    }
}

fn check_response(buf: &[u8], max_body: u32) {
    let whole = ResponseRepr::parse(buf, max_body);
    if let Ok(header) = ResponseHeader::new_checked(buf) {
        let _ = (header.status(), header.cas(), header.value_len());
    }
    match whole {
        Ok((repr, len)) => {
            assert!(len <= buf.len());
            assert_eq!(repr.buffer_len(), len);
            let mut emitted = Vec::new();
            repr.emit_into(&mut emitted);
            let mut expected = buf[..len].to_vec();
            expected[5] = 0;
            // Statuses memcached does not define are kept by their wire value.
            assert_eq!(emitted, expected, "response round trip");
            for n in prefix_lengths(len) {
                let needed = if n < HEADER_LEN { HEADER_LEN } else { len } - n;
                assert_eq!(
                    ResponseRepr::parse(&buf[..n], max_body),
                    Err(ParseError::Incomplete { needed }),
                    "response prefix {n}"
                );
            }
        }
        Err(ParseError::Incomplete { needed }) => assert!(needed > 0),
        Err(ParseError::UnknownOpcode { .. }) => panic!("responses keep unknown opcodes"),
        Err(ParseError::Invalid(_)) => assert!(buf.len() >= HEADER_LEN),
    }
}

/// Prefix lengths to try: all of them for short inputs, else the header's and a spread.
fn prefix_lengths(len: usize) -> impl Iterator<Item = usize> {
    let step = (len / 64).max(1);
    (0..len).filter(move |&n| n <= HEADER_LEN + 8 || n % step == 0 || n + 2 >= len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_frame_passes_every_check() {
        let extras = StoreExtras {
            flags: 7,
            expiration: 0,
        }
        .emit();
        let mut frame = vec![1]; // limit choice
        RequestRepr {
            opcode: Opcode::Set,
            quiet: true,
            opaque: 9,
            cas: 0,
            vbucket: 0,
            extras: &extras,
            key: b"key",
            value: b"value",
        }
        .emit_into(&mut frame);
        frame.extend_from_slice(b"trailing");
        check(&frame);
        for n in 0..frame.len() {
            check(&frame[..n]);
        }
    }
}
