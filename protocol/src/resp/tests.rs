//! RESP tests: captured commands field by field, every truncation and fragment size, inline
//! quoting, Redis's protocol errors, replies in both versions, reading replies back, and
//! property tests (random bytes never panic; commands and replies round-trip).

use proptest::prelude::*;

use super::*;

/// `GET k` as redis-cli sends it.
static GET_K: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";

/// `SET key value` with an empty argument after it, in one buffer with a `PING` behind.
static SET_THEN_PING: &[u8] =
    b"*4\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n";

const LIMITS: Limits = Limits {
    max_bulk: 1 << 20,
    max_command: 2 << 20,
};

#[track_caller]
fn parse(buf: &[u8]) -> Result<(Vec<Vec<u8>>, usize), ParseError> {
    let mut progress = Progress::default();
    Command::parse(buf, &LIMITS, &mut progress)
        .map(|(command, len)| (command.args().map(<[u8]>::to_vec).collect(), len))
}

#[track_caller]
fn args_of(buf: &[u8]) -> Vec<Vec<u8>> {
    let (args, len) = parse(buf).expect("a whole command");
    assert_eq!(len, buf.len(), "consumed whole");
    args
}

fn strings(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

#[track_caller]
fn protocol_error(buf: &[u8]) -> ProtocolError {
    match parse(buf) {
        Err(ParseError::Protocol(error)) => error,
        other => panic!(
            "{:?}: expected a protocol error, got {other:?}",
            String::from_utf8_lossy(buf)
        ),
    }
}

#[test]
fn a_captured_get_field_by_field() {
    let mut progress = Progress::default();
    let (command, len) = Command::parse(GET_K, &LIMITS, &mut progress).unwrap();
    assert_eq!(len, GET_K.len());
    assert_eq!(command.argc(), 2);
    assert!(!command.is_empty());
    assert_eq!(command.arg(0), Some(&b"GET"[..]));
    assert_eq!(command.arg(1), Some(&b"k"[..]));
    assert_eq!(command.arg(2), None);
    assert_eq!(progress, Progress::default());
}

#[test]
fn kept_arguments_outlive_the_command() {
    let key = {
        let (command, _) = Command::parse(GET_K, &LIMITS, &mut Progress::default()).unwrap();
        assert_eq!(command.kept_arg(0), Some(&b"GET"[..]));
        assert_eq!(command.kept_arg(2), None);
        command.kept_arg(1)
    };
    assert_eq!(key, Some(&b"k"[..]));
    // Past the first few arguments, and for inline commands, the parse keeps no places.
    let many = write_command_vec(&[&b"MGET"[..], b"1", b"2", b"3", b"4", b"5", b"6", b"7"]);
    let (command, _) = Command::parse(&many, &LIMITS, &mut Progress::default()).unwrap();
    assert_eq!(command.kept_arg(1), Some(&b"1"[..]));
    assert_eq!(command.kept_arg(7), None);
    assert_eq!(command.arg(7), Some(&b"7"[..]));
    let (command, _) = Command::parse(b"GET k\r\n", &LIMITS, &mut Progress::default()).unwrap();
    assert_eq!(
        (command.arg(1), command.kept_arg(1)),
        (Some(&b"k"[..]), None)
    );
}

fn write_command_vec(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    write_command(&mut out, args);
    out
}

#[test]
fn arguments_go_on_from_where_they_stopped() {
    let inline = b"MGET a \"b c\" d\r\n";
    for buf in [SET_THEN_PING, &inline[..], b"MGET  a  b\td\r\n"] {
        let mut progress = Progress::default();
        let (command, _) = Command::parse(buf, &LIMITS, &mut progress).unwrap();
        let all: Vec<&[u8]> = command.args().collect();
        for index in 0..=all.len() {
            let mut args = command.args();
            for _ in 0..index {
                args.next();
            }
            let offset = args.offset();
            let rest: Vec<&[u8]> = command.args_from(offset, index).collect();
            assert_eq!(rest, all[index..], "{buf:?} from {index}");
        }
    }
}

#[test]
fn a_parsed_command_is_taken_again_without_a_walk() {
    let many = write_command_vec(&[&b"MSET"[..], b"a", b"1", b"b", b"2", b"c", b"3", b"d"]);
    let mut buf = many.clone();
    buf.extend_from_slice(SET_THEN_PING);
    for (front, expected) in [
        (&buf[..], &many[..]),
        (SET_THEN_PING, &SET_THEN_PING[..39]),
        (GET_K, GET_K),
        (b"*0\r\n", b"*0\r\n"),
    ] {
        let (command, len) = Command::parse(front, &LIMITS, &mut Progress::default()).unwrap();
        assert_eq!(len, expected.len());
        let parsed = command
            .parsed(len)
            .expect("a multibulk command parsed whole");
        assert_eq!((parsed.len(), parsed.is_empty()), (len, command.is_empty()));
        let (again, again_len) = Command::from_parsed(front, &parsed).unwrap();
        assert_eq!(again_len, len);
        assert_eq!(again, command);
        let args: Vec<&[u8]> = command.args().collect();
        assert_eq!(again.args().collect::<Vec<_>>(), args);
        for index in 0..=args.len() {
            assert_eq!(again.arg(index), command.arg(index));
            assert_eq!(again.kept_arg(index), command.kept_arg(index));
        }
        // Not there whole: nothing.
        assert!(Command::from_parsed(&front[..len - 1], &parsed).is_none());
    }
    // Inline lines and commands parsed in pieces keep no places: nothing to take again.
    let (command, len) = Command::parse(b"GET k\r\n", &LIMITS, &mut Progress::default()).unwrap();
    assert_eq!(command.parsed(len), None);
    let mut progress = Progress::default();
    assert!(Command::parse(&GET_K[..15], &LIMITS, &mut progress).is_err());
    let (command, len) = Command::parse(GET_K, &LIMITS, &mut progress).unwrap();
    assert_eq!(command.parsed(len), None);
    // Other bytes at the places kept: arguments read from them, or none, never a panic.
    let (command, len) = Command::parse(&many, &LIMITS, &mut Progress::default()).unwrap();
    let parsed = command.parsed(len).unwrap();
    let other = vec![b'x'; len];
    let (wrong, _) = Command::from_parsed(&other, &parsed).unwrap();
    let _ = wrong.args().count();
}

#[test]
fn pipelined_commands_leave_what_follows_untouched() {
    let (args, len) = parse(SET_THEN_PING).unwrap();
    assert_eq!(args, strings(&["SET", "key", "value", ""]));
    assert_eq!(&SET_THEN_PING[len..], b"*1\r\n$4\r\nPING\r\n");
    assert_eq!(args_of(&SET_THEN_PING[len..]), strings(&["PING"]));
}

#[test]
fn every_truncation_is_incomplete() {
    for buf in [GET_K, SET_THEN_PING, b"PING\r\n", b"SET a \"b c\"\r\n"] {
        let whole = parse(buf).unwrap().1;
        for n in 0..whole {
            let result = parse(&buf[..n]);
            assert!(
                matches!(result, Err(ParseError::Incomplete { needed }) if needed >= 1),
                "{n}: {result:?}"
            );
        }
    }
}

#[test]
fn needed_is_exact_once_a_bulk_length_is_known() {
    assert_eq!(
        parse(b"*1\r\n$5\r\nhel"),
        Err(ParseError::Incomplete { needed: 4 })
    );
    assert_eq!(
        parse(b"*2\r\n$3\r\nGET\r\n$100\r\n"),
        Err(ParseError::Incomplete { needed: 102 })
    );
}

#[test]
fn fragment_sweeps_parse_once_with_progress() {
    for piece in [1, 2, 5, 10, 100] {
        let mut progress = Progress::default();
        let mut fed = 0;
        let mut most_args = 0;
        let len = loop {
            fed = (fed + piece).min(SET_THEN_PING.len());
            match Command::parse(&SET_THEN_PING[..fed], &LIMITS, &mut progress) {
                Ok((command, len)) => {
                    assert_eq!(command.argc(), 4);
                    break len;
                }
                Err(ParseError::Incomplete { .. }) => {
                    // Progress only moves forward.
                    assert!(progress.args >= most_args, "piece {piece}");
                    most_args = progress.args;
                }
                Err(e) => panic!("piece {piece}: {e}"),
            }
        };
        assert_eq!(len, SET_THEN_PING.len() - 14, "piece {piece}");
        if piece <= 5 {
            assert_eq!(
                most_args, 3,
                "piece {piece}: arguments checked as they came"
            );
        }
    }
}

#[test]
fn progress_from_another_buffer_is_not_trusted_past_its_count() {
    // Progress beyond the command's own count (a stale value) is ignored.
    let mut progress = Progress {
        at: 10_000,
        args: 9,
    };
    let (command, len) = Command::parse(GET_K, &LIMITS, &mut progress).unwrap();
    assert_eq!((command.argc(), len), (2, GET_K.len()));
}

#[test]
fn a_token_whose_type_byte_is_a_carriage_return_is_not_resp() {
    // The type byte is not searched for the line's end: "\r\n" after an array's header
    // once sliced the line as buf[1..0].
    assert_eq!(value_len(b"*1\r\n\r\n"), Err(FrameError::Invalid));
    assert_eq!(
        Frame::parse(b"\r\n").map(|(_, n)| n),
        Err(FrameError::Invalid)
    );
    assert_eq!(
        Frame::parse(b"\r").map(|(_, n)| n),
        Err(FrameError::Invalid)
    );
    assert_eq!(
        Frame::parse(b"+\r").map(|(_, n)| n),
        Err(FrameError::Incomplete { needed: 1 })
    );
}

#[test]
fn empty_commands_mean_nothing() {
    for buf in [&b"*0\r\n"[..], b"*-1\r\n", b"*-5\r\n", b"\r\n", b"   \t \n"] {
        let (args, len) = parse(buf).unwrap();
        assert!(args.is_empty(), "{buf:?}");
        assert_eq!(len, buf.len());
    }
}

#[test]
fn inline_lines_split_like_redis() {
    assert_eq!(args_of(b"PING\r\n"), strings(&["PING"]));
    assert_eq!(args_of(b"PING\n"), strings(&["PING"]));
    assert_eq!(args_of(b"  set \t k   v \r\n"), strings(&["set", "k", "v"]));
    assert_eq!(
        args_of(b"SET k \"a b\\r\\n\\x41\\\"\"\r\n"),
        vec![b"SET".to_vec(), b"k".to_vec(), b"a b\r\nA\"".to_vec()]
    );
    assert_eq!(
        args_of(b"SET 'it\\'s' ''\r\n"),
        strings(&["SET", "it's", ""])
    );
    // A quote inside a word starts a quoted part of the same argument.
    assert_eq!(
        args_of(b"ECHO foo\"bar\"\r\n"),
        strings(&["ECHO", "foobar"])
    );
    // Unknown escapes stand for themselves; `\x` without two hex digits is `x`.
    assert_eq!(
        args_of(b"ECHO \"\\q\\xZ1\"\r\n"),
        strings(&["ECHO", "qxZ1"])
    );
    // A `\r` inside the line stays a separator, as `isspace` says.
    assert_eq!(args_of(b"A\rB\r\n"), strings(&["A", "B"]));
}

#[test]
fn unbalanced_quotes_are_a_protocol_error() {
    for line in [
        &b"SET k \"v\r\n"[..],
        b"SET k 'v\r\n",
        b"SET k \"v\"x\r\n",
        b"SET k 'v'x\r\n",
        b"\"\r\n",
    ] {
        assert_eq!(
            protocol_error(line),
            ProtocolError::UnbalancedQuotes,
            "{line:?}"
        );
    }
}

#[test]
fn redis_protocol_errors() {
    assert_eq!(
        protocol_error(b"*a\r\n"),
        ProtocolError::InvalidMultibulkLength
    );
    assert_eq!(
        protocol_error(b"*01\r\n"),
        ProtocolError::InvalidMultibulkLength
    );
    assert_eq!(
        protocol_error(b"*3000000\r\n"),
        ProtocolError::InvalidMultibulkLength
    );
    assert_eq!(
        protocol_error(b"*1\r\n+3\r\n"),
        ProtocolError::ExpectedDollar(b'+')
    );
    assert_eq!(
        protocol_error(b"*1\r\n$-1\r\n"),
        ProtocolError::InvalidBulkLength
    );
    assert_eq!(
        protocol_error(b"*1\r\n$x\r\n"),
        ProtocolError::InvalidBulkLength
    );
    // Headers that cannot hold a number.
    let long = format!("*{}", "1".repeat(MAX_HEADER_LEN + 1));
    assert_eq!(
        protocol_error(long.as_bytes()),
        ProtocolError::TooBigMbulkCount
    );
    let long = format!("*1\r\n${}", "1".repeat(MAX_HEADER_LEN + 1));
    assert_eq!(
        protocol_error(long.as_bytes()),
        ProtocolError::TooBigBulkCount
    );
    // An inline line that never ends.
    let endless = vec![b'a'; MAX_INLINE_LEN + 1];
    assert_eq!(protocol_error(&endless), ProtocolError::TooBigInlineRequest);
    let mut late = vec![b'a'; MAX_INLINE_LEN + 1];
    late.push(b'\n');
    assert_eq!(protocol_error(&late), ProtocolError::TooBigInlineRequest);
}

#[test]
fn a_2_gib_bulk_header_is_refused_without_waiting() {
    // Not `Incomplete { needed: 2 GiB }`: nothing of the announced size is ever asked for; the
    // command is refused and its bytes are for the caller to skip.
    assert_eq!(
        parse(b"*1\r\n$2147483648\r\n"),
        Err(ParseError::TooLarge {
            end: 17 + 2147483648 + 2,
            args_left: 0
        })
    );
    assert_eq!(
        parse(b"*2\r\n$3\r\nSET\r\n$99999999999999999999\r\n"),
        Err(ParseError::Protocol(ProtocolError::InvalidBulkLength))
    );
}

#[test]
fn an_argument_over_a_limit_refuses_the_command_with_what_to_skip() {
    // Over the item limit: the argument's end, and the arguments after it.
    let over = format!("*4\r\n$3\r\nSET\r\n${}\r\n", LIMITS.max_bulk + 1);
    let header_end = over.len() as u64;
    assert_eq!(
        parse(over.as_bytes()),
        Err(ParseError::TooLarge {
            end: header_end + LIMITS.max_bulk as u64 + 1 + 2,
            args_left: 2
        })
    );
    // Taking the command past its limit (twice the item limit): the second of two arguments
    // of the item limit's size does.
    let mut big = b"*3\r\n".to_vec();
    for _ in 0..2 {
        big.extend_from_slice(format!("${}\r\n", LIMITS.max_bulk).as_bytes());
        big.extend(std::iter::repeat_n(b'x', LIMITS.max_bulk));
        big.extend_from_slice(b"\r\n");
    }
    let second_end = big.len() as u64;
    assert!(second_end > LIMITS.max_command as u64);
    big.extend_from_slice(b"$1\r\n");
    assert_eq!(
        parse(&big),
        Err(ParseError::TooLarge {
            end: second_end,
            args_left: 1
        })
    );
    // The arguments after it, one at a time.
    assert_eq!(argument_len(b"$2\r\nEX\r\n$2\r\n10"), Ok(8));
    assert_eq!(argument_len(b"$1048577\r\n"), Ok(10 + 1048577 + 2));
    assert_eq!(
        argument_len(b"$10"),
        Err(ParseError::Incomplete { needed: 1 })
    );
    assert_eq!(argument_len(b""), Err(ParseError::Incomplete { needed: 1 }));
    assert_eq!(
        argument_len(b"+x\r\n"),
        Err(ParseError::Protocol(ProtocolError::ExpectedDollar(b'+')))
    );
}

#[test]
fn protocol_errors_are_worded_as_redis_words_them() {
    let mut out = Vec::new();
    ProtocolError::ExpectedDollar(b'+').emit_into(&mut out);
    ProtocolError::InvalidBulkLength.emit_into(&mut out);
    ProtocolError::InvalidMultibulkLength.emit_into(&mut out);
    ProtocolError::UnbalancedQuotes.emit_into(&mut out);
    ProtocolError::TooBigInlineRequest.emit_into(&mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "-ERR Protocol error: expected '$', got '+'\r\n\
         -ERR Protocol error: invalid bulk length\r\n\
         -ERR Protocol error: invalid multibulk length\r\n\
         -ERR Protocol error: unbalanced quotes in request\r\n\
         -ERR Protocol error: too big inline request\r\n"
    );
}

#[test]
fn the_two_bytes_after_a_bulk_are_skipped_as_redis_skips_them() {
    assert_eq!(args_of(b"*1\r\n$4\r\nPINGxx"), strings(&["PING"]));
}

#[test]
fn integers_as_string2ll_reads_them() {
    for (text, want) in [
        (&b"0"[..], Some(0)),
        (b"7", Some(7)),
        (b"-7", Some(-7)),
        (b"9223372036854775807", Some(i64::MAX)),
        (b"-9223372036854775808", Some(i64::MIN)),
        (b"9223372036854775808", None),
        (b"-9223372036854775809", None),
        (b"99999999999999999999999", None),
        (b"-0", None),
        (b"01", None),
        (b"+1", None),
        (b" 1", None),
        (b"1 ", None),
        (b"", None),
        (b"-", None),
        (b"1.5", None),
    ] {
        assert_eq!(
            parse_integer(text),
            want,
            "{:?}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn commands_are_written_as_clients_write_them() {
    let mut out = vec![0xa5];
    write_command(&mut out, &["SET", "k", ""]);
    assert_eq!(&out[1..], b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    assert_eq!(command_len(&["SET", "k", ""]), out.len() - 1);
    let empty: [&[u8]; 0] = [];
    assert_eq!(command_len(&empty), 4);
}

/// `(reply, RESP2 bytes, RESP3 bytes)`.
fn reply_table() -> Vec<(Reply<'static>, &'static [u8], &'static [u8])> {
    vec![
        (Reply::Simple(b"OK"), b"+OK\r\n", b"+OK\r\n"),
        (Reply::Error(b"ERR no"), b"-ERR no\r\n", b"-ERR no\r\n"),
        (Reply::Integer(-12), b":-12\r\n", b":-12\r\n"),
        (
            Reply::Integer(i64::MIN),
            b":-9223372036854775808\r\n",
            b":-9223372036854775808\r\n",
        ),
        (
            Reply::Bulk(b"v\r\n"),
            b"$3\r\nv\r\n\r\n",
            b"$3\r\nv\r\n\r\n",
        ),
        (Reply::Bulk(b""), b"$0\r\n\r\n", b"$0\r\n\r\n"),
        (Reply::Null, b"$-1\r\n", b"_\r\n"),
        (Reply::NullArray, b"*-1\r\n", b"_\r\n"),
        (Reply::Array(3), b"*3\r\n", b"*3\r\n"),
        (Reply::Map(2), b"*4\r\n", b"%2\r\n"),
        (Reply::Set(1), b"*1\r\n", b"~1\r\n"),
        (Reply::Push(2), b"*2\r\n", b">2\r\n"),
        (Reply::Double(1.5), b"$3\r\n1.5\r\n", b",1.5\r\n"),
        (Reply::Double(f64::INFINITY), b"$3\r\ninf\r\n", b",inf\r\n"),
        (
            Reply::Double(f64::NEG_INFINITY),
            b"$4\r\n-inf\r\n",
            b",-inf\r\n",
        ),
        (Reply::Boolean(true), b":1\r\n", b"#t\r\n"),
        (Reply::Boolean(false), b":0\r\n", b"#f\r\n"),
        (Reply::BigNumber(b"123"), b"$3\r\n123\r\n", b"(123\r\n"),
        (
            Reply::Verbatim {
                format: b"txt",
                text: b"a\r\nb",
            },
            b"$4\r\na\r\nb\r\n",
            b"=8\r\ntxt:a\r\nb\r\n",
        ),
    ]
}

#[test]
fn replies_in_both_versions() {
    for (reply, v2, v3) in reply_table() {
        for (version, want) in [(Version::Resp2, v2), (Version::Resp3, v3)] {
            let mut out = vec![0xa5];
            reply.emit_into(version, &mut out);
            assert_eq!(&out[1..], want, "{reply:?} {version:?}");
            assert_eq!(
                reply.buffer_len(version),
                want.len(),
                "{reply:?} {version:?}"
            );
            // And a client reads back one token of exactly that length.
            let (_, len) = Frame::parse(want).unwrap();
            assert_eq!(len, want.len(), "{reply:?} {version:?}");
        }
    }
    let mut nan = Vec::new();
    Reply::Double(f64::NAN).emit_into(Version::Resp3, &mut nan);
    assert_eq!(nan, b",nan\r\n");
}

#[test]
fn frames_read_every_type() {
    let cases: Vec<(&[u8], Frame<'_>)> = vec![
        (b"+OK\r\n", Frame::Simple(b"OK")),
        (b"-ERR x\r\n", Frame::Error(b"ERR x")),
        (b":-3\r\n", Frame::Integer(-3)),
        (b"$2\r\nab\r\n", Frame::Bulk(b"ab")),
        (b"$-1\r\n", Frame::Null),
        (b"*-1\r\n", Frame::Null),
        (b"_\r\n", Frame::Null),
        (b"*2\r\n", Frame::Array(2)),
        (b"%1\r\n", Frame::Map(1)),
        (b"~0\r\n", Frame::Set(0)),
        (b">3\r\n", Frame::Push(3)),
        (b"|1\r\n", Frame::Attribute(1)),
        (b",1e300\r\n", Frame::Double(b"1e300")),
        (b"#t\r\n", Frame::Boolean(true)),
        (
            b"(12345678901234567890\r\n",
            Frame::BigNumber(b"12345678901234567890"),
        ),
        (b"!5\r\nERR x\r\n", Frame::BulkError(b"ERR x")),
        (
            b"=7\r\nmkd:a b\r\n",
            Frame::Verbatim {
                format: b"mkd",
                text: b"a b",
            },
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(Frame::parse(bytes), Ok((want, bytes.len())), "{bytes:?}");
        for n in 0..bytes.len() {
            assert!(
                matches!(
                    Frame::parse(&bytes[..n]),
                    Err(FrameError::Incomplete { .. })
                ),
                "{bytes:?} cut at {n}"
            );
        }
    }
    for bad in [
        &b"?x\r\n"[..],
        b"+a\rb\r\n",
        b":x\r\n",
        b"$2\r\nabc\r\n",
        b"$-2\r\n",
        b"*-2\r\n",
        b"#x\r\n",
        b"_x\r\n",
        b"=2\r\nab\r\n",
    ] {
        assert_eq!(Frame::parse(bad), Err(FrameError::Invalid), "{bad:?}");
    }
}

#[test]
fn value_len_takes_whole_nested_values() {
    let value = b"*3\r\n$1\r\na\r\n*2\r\n:1\r\n_\r\n%1\r\n+k\r\n|1\r\n+meta\r\n+m\r\n$1\r\nv\r\n";
    let mut buf = value.to_vec();
    buf.extend_from_slice(b"+NEXT\r\n");
    assert_eq!(value_len(&buf), Ok(value.len()));
    for n in 0..value.len() {
        assert!(
            matches!(value_len(&buf[..n]), Err(FrameError::Incomplete { .. })),
            "cut at {n}"
        );
    }
    // A huge count asks for more, never allocates.
    assert_eq!(
        value_len(b"*9223372036854775807\r\n:1\r\n"),
        Err(FrameError::Incomplete { needed: 1 })
    );
}

fn any_reply() -> impl Strategy<Value = (u8, i64, Vec<u8>, bool)> {
    (
        0u8..10,
        any::<i64>(),
        proptest::collection::vec(any::<u8>(), 0..64),
        any::<bool>(),
    )
}

proptest! {
    #[test]
    fn random_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        max_bulk in 0usize..64,
        max_command in 0usize..256,
        at in 0usize..600,
        args in 0usize..10,
    ) {
        let limits = Limits { max_bulk, max_command };
        let mut progress = Progress { at, args };
        if let Ok((command, len)) = Command::parse(&bytes, &limits, &mut progress) {
            prop_assert!(len <= bytes.len());
            prop_assert!(command.args().count() <= command.argc());
        }
        let _ = Frame::parse(&bytes);
        if let Ok(len) = value_len(&bytes) {
            prop_assert!(len <= bytes.len());
        }
    }

    #[test]
    fn random_bytes_after_a_star_never_panic(bytes in proptest::collection::vec(
        prop_oneof![Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), Just(b'-'), Just(b'1'), Just(b'0'), any::<u8>()],
        0..256,
    )) {
        let mut buf = b"*".to_vec();
        buf.extend_from_slice(&bytes);
        let mut progress = Progress::default();
        let _ = Command::parse(&buf, &LIMITS, &mut progress);
        let _ = value_len(&buf);
    }

    #[test]
    fn commands_round_trip_whole_and_in_pieces(
        args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..12),
        cuts in proptest::collection::vec(1usize..20, 1..40),
    ) {
        let mut buf = Vec::new();
        write_command(&mut buf, &args);
        prop_assert_eq!(buf.len(), command_len(&args));
        let (got, len) = parse(&buf).unwrap();
        prop_assert_eq!(len, buf.len());
        prop_assert_eq!(&got, &args);
        // Each argument alone, and all of them walked from the first header (the places the
        // parse kept are not used then): the same bytes.
        let (command, _) = Command::parse(&buf, &LIMITS, &mut Progress::default()).unwrap();
        for (index, arg) in args.iter().enumerate() {
            prop_assert_eq!(command.arg(index), Some(&arg[..]));
        }
        prop_assert_eq!(command.arg(args.len()), None);
        let walked: Vec<Vec<u8>> = command
            .args_from(command.args().offset(), 0)
            .map(<[u8]>::to_vec)
            .collect();
        prop_assert_eq!(&walked, &args);
        // Taken again from what the parse learnt: the same arguments.
        let parsed = command.parsed(len).unwrap();
        let (again, again_len) = Command::from_parsed(&buf, &parsed).unwrap();
        prop_assert_eq!(again_len, len);
        let again: Vec<Vec<u8>> = again.args().map(<[u8]>::to_vec).collect();
        prop_assert_eq!(&again, &args);
        // Fed in pieces with progress carried: the same command, once complete.
        let mut progress = Progress::default();
        let mut fed = 0;
        let mut cuts = cuts.into_iter().cycle();
        loop {
            fed = (fed + cuts.next().unwrap()).min(buf.len());
            match Command::parse(&buf[..fed], &LIMITS, &mut progress) {
                Ok((command, len)) => {
                    prop_assert_eq!(len, buf.len());
                    let got: Vec<Vec<u8>> = command.args().map(<[u8]>::to_vec).collect();
                    prop_assert_eq!(&got, &args);
                    for (index, arg) in args.iter().enumerate() {
                        prop_assert_eq!(command.arg(index), Some(&arg[..]));
                    }
                    break;
                }
                Err(ParseError::Incomplete { needed }) => {
                    prop_assert!(fed < buf.len() && needed >= 1 && needed <= buf.len() - fed);
                }
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            }
        }
    }

    #[test]
    fn replies_round_trip_through_frames((kind, n, bytes, flag) in any_reply()) {
        let text: Vec<u8> = bytes.iter().map(|&b| if b == b'\r' || b == b'\n' { b'.' } else { b }).collect();
        let count = (n as usize) % 1000;
        let reply = match kind {
            0 => Reply::Simple(&text),
            1 => Reply::Error(&text),
            2 => Reply::Integer(n),
            3 => Reply::Bulk(&bytes),
            4 => Reply::Null,
            5 => Reply::Array(count),
            6 => Reply::Map(count),
            7 => Reply::Set(count),
            8 => Reply::Boolean(flag),
            _ => Reply::Verbatim { format: b"txt", text: &bytes },
        };
        for version in [Version::Resp2, Version::Resp3] {
            let mut out = Vec::new();
            reply.emit_into(version, &mut out);
            prop_assert_eq!(out.len(), reply.buffer_len(version));
            let (frame, len) = Frame::parse(&out).unwrap();
            prop_assert_eq!(len, out.len());
            let v3 = version == Version::Resp3;
            let want = match reply {
                Reply::Simple(t) => Frame::Simple(t),
                Reply::Error(t) => Frame::Error(t),
                Reply::Integer(n) => Frame::Integer(n),
                Reply::Bulk(b) => Frame::Bulk(b),
                Reply::Null => Frame::Null,
                Reply::Array(n) => Frame::Array(n),
                Reply::Map(n) if v3 => Frame::Map(n),
                Reply::Map(n) => Frame::Array(2 * n),
                Reply::Set(n) if v3 => Frame::Set(n),
                Reply::Set(n) => Frame::Array(n),
                Reply::Boolean(b) if v3 => Frame::Boolean(b),
                Reply::Boolean(b) => Frame::Integer(i64::from(b)),
                Reply::Verbatim { format, text } if v3 => Frame::Verbatim { format, text },
                Reply::Verbatim { text, .. } => Frame::Bulk(text),
                _ => unreachable!(),
            };
            prop_assert_eq!(frame, want);
        }
    }
}
