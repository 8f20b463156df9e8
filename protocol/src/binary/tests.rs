//! Stream-level tests: pipelines of mixed frames, fragment sweeps, and property tests.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

const MAX_BODY: u32 = 1 << 20;

/// What a reader does with one frame, owned so it outlives the buffer it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Request {
        opcode: Opcode,
        quiet: bool,
        opaque: u32,
        cas: u64,
        extras: Vec<u8>,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Unknown {
        opcode: u8,
        opaque: u32,
    },
}

impl Event {
    fn of(repr: &RequestRepr<'_>) -> Event {
        Event::Request {
            opcode: repr.opcode,
            quiet: repr.quiet,
            opaque: repr.opaque,
            cas: repr.cas,
            extras: repr.extras.to_vec(),
            key: repr.key.to_vec(),
            value: repr.value.to_vec(),
        }
    }
}

fn request<'a>(
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    extras: &'a [u8],
    key: &'a [u8],
    value: &'a [u8],
) -> RequestRepr<'a> {
    RequestRepr {
        opcode,
        quiet,
        opaque,
        cas: u64::from(opaque) << 32,
        vbucket: 0,
        extras,
        key,
        value,
    }
}

/// A pipeline of mixed frames (with an unknown opcode in the middle), each frame's end offset,
/// and the events a reader must see.
fn pipeline() -> (Vec<u8>, Vec<usize>, Vec<Event>) {
    let store = StoreExtras {
        flags: 1,
        expiration: 0,
    }
    .emit();
    let counter = CounterExtras {
        delta: 5,
        initial: 1,
        expiration: 0,
    }
    .emit();
    let touch = ExpirationExtras { expiration: 30 }.emit();
    let verbosity = VerbosityExtras { level: 1 }.emit();
    let big_value = vec![b'v'; 700];
    let reprs = [
        request(Opcode::Set, true, 1, &store, b"alpha", &big_value),
        request(Opcode::Get, true, 2, &[], b"alpha", &[]),
        request(Opcode::GetK, true, 3, &[], b"beta", &[]),
        request(Opcode::Increment, false, 4, &counter, b"n", &[]),
        request(Opcode::Append, false, 5, &[], b"alpha", b"tail"),
        request(Opcode::Gat, false, 6, &touch, b"alpha", &[]),
        request(Opcode::Delete, true, 7, &[], b"beta", &[]),
        request(Opcode::Verbosity, false, 8, &verbosity, &[], &[]),
        request(Opcode::Stat, false, 9, &[], b"items", &[]),
        request(Opcode::Flush, true, 10, &[], &[], &[]),
        request(Opcode::Noop, false, 11, &[], &[], &[]),
    ];
    let mut stream = Vec::new();
    let mut ends = Vec::new();
    let mut events = Vec::new();
    for (i, repr) in reprs.iter().enumerate() {
        if i == 4 {
            // Opcode 0x42 with a 40-byte body: must be skipped, not parsed.
            let mut header = [0u8; HEADER_LEN];
            let mut h = RequestHeader::new_unchecked(&mut header[..]);
            h.set_magic(REQUEST_MAGIC);
            h.set_opcode(0x42);
            h.set_key_len(3);
            h.set_body_len(40);
            h.set_opaque(0x4242);
            stream.extend_from_slice(&header);
            stream.extend_from_slice(&[0x80; 40]); // body bytes that look like a header
            ends.push(stream.len());
            events.push(Event::Unknown {
                opcode: 0x42,
                opaque: 0x4242,
            });
        }
        repr.emit_into(&mut stream);
        ends.push(stream.len());
        events.push(Event::of(repr));
    }
    (stream, ends, events)
}

/// Feeds `stream` to an accumulating reader `step` bytes at a time, parsing whenever possible,
/// as a connection does. Checks that `needed` is exact: the rest of the header, then the rest
/// of the frame, never more.
fn read_in_steps(stream: &[u8], ends: &[usize], step: usize) -> Vec<Event> {
    let mut acc = Vec::new();
    let mut start = 0; // offset in acc of the next unparsed byte
    let mut base = 0; // offset in stream of acc[start]
    let mut skip = 0; // bytes of an unknown frame still to discard
    let mut events = Vec::new();
    for chunk in stream.chunks(step) {
        let discard = skip.min(chunk.len());
        skip -= discard;
        acc.extend_from_slice(&chunk[discard..]);
        while skip == 0 {
            let here = acc.len() - start;
            match RequestRepr::parse(&acc[start..], MAX_BODY) {
                Ok((repr, len)) => {
                    events.push(Event::of(&repr));
                    start += len;
                    base += len;
                }
                Err(ParseError::Incomplete { needed }) => {
                    // Past the last frame, the reader waits for a next header.
                    let frame_end = ends.iter().copied().find(|&end| end > base);
                    let wanted = if here < HEADER_LEN {
                        base + HEADER_LEN
                    } else {
                        frame_end.unwrap()
                    };
                    assert_eq!(base + here + needed, wanted, "step {step}, frame at {base}");
                    break;
                }
                Err(ParseError::UnknownOpcode {
                    opcode,
                    opaque,
                    frame_len,
                }) => {
                    events.push(Event::Unknown { opcode, opaque });
                    if here >= frame_len {
                        start += frame_len;
                    } else {
                        skip = frame_len - here;
                        start = acc.len();
                    }
                    base += frame_len;
                }
                Err(ParseError::Invalid(invalid)) => panic!("valid stream rejected: {invalid}"),
            }
        }
    }
    assert_eq!(start, acc.len(), "bytes left over");
    assert_eq!(base, stream.len());
    events
}

#[test]
fn pipeline_in_one_buffer() {
    let (stream, ends, expected) = pipeline();
    let mut events = Vec::new();
    let mut at = 0;
    let mut frame = 0;
    while at < stream.len() {
        match RequestRepr::parse(&stream[at..], MAX_BODY) {
            Ok((repr, len)) => {
                events.push(Event::of(&repr));
                at += len;
            }
            Err(ParseError::UnknownOpcode {
                opcode,
                opaque,
                frame_len,
            }) => {
                events.push(Event::Unknown { opcode, opaque });
                at += frame_len;
            }
            Err(other) => panic!("{other}"),
        }
        assert_eq!(at, ends[frame]);
        frame += 1;
    }
    assert_eq!(events, expected);
}

#[test]
fn fragment_sweeps() {
    let (stream, ends, expected) = pipeline();
    for step in [1, 2, 5, 10, 100, 4096] {
        assert_eq!(read_in_steps(&stream, &ends, step), expected, "step {step}");
    }
}

#[test]
fn every_truncation_of_the_pipeline() {
    // Cut the stream anywhere: the frames before the cut parse, the cut one is Incomplete with
    // exactly the missing bytes (or, for the unknown frame, is already reported).
    let (stream, ends, _) = pipeline();
    for cut in 0..stream.len() {
        let mut at = 0;
        loop {
            match RequestRepr::parse(&stream[at..cut], MAX_BODY) {
                Ok((_, len)) => at += len,
                Err(ParseError::UnknownOpcode { frame_len, .. }) if at + frame_len <= cut => {
                    at += frame_len
                }
                Err(ParseError::UnknownOpcode { .. }) => break,
                Err(ParseError::Incomplete { needed }) => {
                    let frame_end = *ends.iter().find(|&&end| end > at).unwrap();
                    let wanted = if cut - at < HEADER_LEN {
                        at + HEADER_LEN
                    } else {
                        frame_end
                    };
                    assert_eq!(cut + needed, wanted, "cut {cut}");
                    break;
                }
                Err(ParseError::Invalid(invalid)) => panic!("cut {cut}: {invalid}"),
            }
        }
    }
}

#[test]
fn trailing_bytes_are_left_alone() {
    let (mut stream, ends, _) = pipeline();
    let frames_end = stream.len();
    stream.extend_from_slice(&[REQUEST_MAGIC, 0x00, 0x00]); // start of a next frame
    let mut at = 0;
    for &end in &ends {
        let len = match RequestRepr::parse(&stream[at..], MAX_BODY) {
            Ok((_, len)) => len,
            Err(ParseError::UnknownOpcode { frame_len, .. }) => frame_len,
            Err(other) => panic!("{other}"),
        };
        // The answer depends on the frame only, not on what follows it.
        let alone = RequestRepr::parse(&stream[at..end], MAX_BODY);
        let followed = RequestRepr::parse(&stream[at..], MAX_BODY);
        assert_eq!(alone, followed);
        at += len;
        assert_eq!(at, end);
    }
    assert_eq!(at, frames_end);
    assert_eq!(
        RequestRepr::parse(&stream[at..], MAX_BODY),
        Err(ParseError::Incomplete { needed: 21 })
    );
}

#[test]
fn response_pipeline_in_steps() {
    let flags = FlagsExtras { flags: 7 }.emit();
    let responses = [
        ResponseRepr {
            opcode: Opcode::GetK,
            quiet: true,
            status: Status::NoError,
            opaque: 1,
            cas: 9,
            extras: &flags,
            key: b"alpha",
            value: &[b'v'; 300],
        },
        ResponseRepr::error(0x00, 2, Status::KeyNotFound),
        ResponseRepr::error(0x42, 3, Status::UnknownCommand),
        ResponseRepr {
            opcode: Opcode::Noop,
            quiet: false,
            status: Status::NoError,
            opaque: 4,
            cas: 0,
            extras: &[],
            key: &[],
            value: &[],
        },
    ];
    let mut stream = Vec::new();
    for r in &responses {
        r.emit_into(&mut stream);
    }
    for step in [1, 2, 5, 10, 100] {
        let mut acc = Vec::new();
        let mut start = 0;
        let mut seen = 0;
        for chunk in stream.chunks(step) {
            acc.extend_from_slice(chunk);
            while let Ok((repr, len)) = ResponseRepr::parse(&acc[start..], MAX_BODY) {
                assert_eq!(repr, responses[seen]);
                seen += 1;
                start += len;
            }
        }
        assert_eq!(seen, responses.len(), "step {step}");
        assert_eq!(start, stream.len());
    }
}

/// Per-opcode lengths that pass the shape rules, built from random material.
fn valid_request(
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    cas: u64,
    vbucket: u16,
    material: &(Vec<u8>, Vec<u8>, Vec<u8>, bool),
) -> RequestRepr<'_> {
    let (extras_pool, key, value) = (&material.0, &material.1, &material.2);
    let extras_len = match opcode {
        Opcode::Set | Opcode::Add | Opcode::Replace => 8,
        Opcode::Increment | Opcode::Decrement => 20,
        Opcode::Touch | Opcode::Gat | Opcode::GatK | Opcode::Verbosity => 4,
        Opcode::Flush if material.3 => 4,
        _ => 0,
    };
    let key: &[u8] = match opcode {
        Opcode::Flush | Opcode::Noop | Opcode::Version | Opcode::Quit | Opcode::Verbosity => &[],
        Opcode::Stat => key,
        _ if key.is_empty() => b"k",
        _ => key,
    };
    let value: &[u8] = match opcode {
        Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend => value,
        _ => &[],
    };
    RequestRepr {
        opcode,
        quiet: quiet && opcode.has_quiet_form(),
        opaque,
        cas,
        vbucket,
        extras: &extras_pool[..extras_len],
        key,
        value,
    }
}

/// A header with small random lengths, so random frames reach past the first checks.
fn framed_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![Just(REQUEST_MAGIC), Just(RESPONSE_MAGIC), any::<u8>()],
        prop_oneof![0u8..0x26, any::<u8>()],
        0u16..300,
        prop_oneof![Just(0u8), Just(4), Just(8), Just(20), any::<u8>()],
        any::<u16>(),
        prop_oneof![0u32..600, any::<u32>()],
        any::<u32>(),
        vec(any::<u8>(), 0..400),
    )
        .prop_map(
            |(magic, opcode, key_len, extras_len, word, body_len, opaque, body)| {
                let mut buf = vec![0u8; HEADER_LEN];
                let mut h = RequestHeader::new_unchecked(&mut buf[..]);
                h.set_magic(magic);
                h.set_opcode(opcode);
                h.set_key_len(key_len);
                h.set_extras_len(extras_len);
                h.set_vbucket(word);
                h.set_body_len(body_len);
                h.set_opaque(opaque);
                buf.extend_from_slice(&body);
                buf
            },
        )
}

/// Checks what must hold for any input: no panic, a consumed length within the buffer that
/// re-emits to the same bytes (the data type byte aside), and an exact `needed`.
fn check_any_input(buf: &[u8]) {
    match RequestRepr::parse(buf, MAX_BODY) {
        Ok((repr, len)) => {
            assert!(len <= buf.len());
            assert_eq!(repr.buffer_len(), len);
            let mut out = vec![0xa5; len];
            repr.emit(&mut out);
            out[5] = buf[5];
            assert_eq!(out, &buf[..len]);
        }
        Err(ParseError::Incomplete { needed }) => {
            assert!(needed > 0);
            if buf.len() >= HEADER_LEN {
                let mut longer = buf.to_vec();
                longer.resize(buf.len() + needed, 0);
                assert!(RequestRepr::parse(&longer, MAX_BODY).is_ok());
            } else {
                assert_eq!(buf.len() + needed, HEADER_LEN);
            }
        }
        Err(ParseError::UnknownOpcode { frame_len, .. }) => assert!(frame_len >= HEADER_LEN),
        Err(ParseError::Invalid(_)) => {}
    }
    match ResponseRepr::parse(buf, MAX_BODY) {
        Ok((repr, len)) => {
            assert_eq!(repr.buffer_len(), len);
            let mut out = vec![0xa5; len];
            repr.emit(&mut out);
            out[5] = buf[5];
            assert_eq!(out, &buf[..len]);
        }
        Err(ParseError::Incomplete { needed }) => assert!(needed > 0),
        Err(ParseError::UnknownOpcode { .. }) => panic!("responses keep unknown opcodes"),
        Err(ParseError::Invalid(_)) => {}
    }
}

proptest! {
    #[test]
    fn request_round_trip(
        opcode in proptest::sample::select(Opcode::KNOWN.to_vec()),
        quiet in any::<bool>(),
        opaque in any::<u32>(),
        cas in any::<u64>(),
        vbucket in any::<u16>(),
        material in (vec(any::<u8>(), 20), vec(any::<u8>(), 0..=MAX_KEY_LEN), vec(any::<u8>(), 0..2000), any::<bool>()),
        trailing in vec(any::<u8>(), 0..30),
    ) {
        let repr = valid_request(opcode, quiet, opaque, cas, vbucket, &material);
        let mut buf = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut buf);
        let mut appended = Vec::new();
        repr.emit_into(&mut appended);
        prop_assert_eq!(&appended, &buf);
        buf.extend_from_slice(&trailing);
        prop_assert_eq!(RequestRepr::parse(&buf, MAX_BODY), Ok((repr, repr.buffer_len())));
    }

    #[test]
    fn response_round_trip(
        opcode in any::<u8>(),
        status in any::<u16>(),
        opaque in any::<u32>(),
        cas in any::<u64>(),
        extras in vec(any::<u8>(), 0..=255),
        key in vec(any::<u8>(), 0..300),
        value in vec(any::<u8>(), 0..2000),
    ) {
        let (opcode, quiet) = Opcode::from_wire(opcode);
        let repr = ResponseRepr { opcode, quiet, status: Status::from_wire(status), opaque, cas, extras: &extras, key: &key, value: &value };
        let mut buf = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut buf);
        let mut appended = vec![1, 2, 3];
        repr.emit_into(&mut appended);
        prop_assert_eq!(&appended[3..], &buf[..]);
        prop_assert_eq!(ResponseRepr::parse(&buf, MAX_BODY), Ok((repr, repr.buffer_len())));
    }

    #[test]
    fn random_bytes_never_panic(buf in vec(any::<u8>(), 0..128)) {
        check_any_input(&buf);
    }

    #[test]
    fn random_frames_never_panic(buf in framed_bytes()) {
        check_any_input(&buf);
        for n in [0, 1, HEADER_LEN - 1, HEADER_LEN, buf.len() / 2] {
            check_any_input(&buf[..n.min(buf.len())]);
        }
    }
}
