//! Meta parser tests: every command, every flag, every error; replies.

use super::*;
use crate::text::{self, ErrorReply, MAX_LINE_LEN, ParseError};

#[track_caller]
fn meta(line: &str) -> Request<'_> {
    match text::Request::parse(line.as_bytes(), 0) {
        Ok((text::Request::Meta(request), len)) => {
            assert_eq!(len, line.len());
            request
        }
        other => panic!("{line:?}: {other:?}"),
    }
}

/// The error a meta line is refused with, and the bytes swallowed after it.
#[track_caller]
fn refused(line: &str) -> (ErrorReply, usize) {
    match text::Request::parse(line.as_bytes(), 0) {
        Err(ParseError::Invalid {
            reply,
            noreply,
            line_len,
            swallow,
        }) => {
            assert!(!noreply, "meta errors are always answered: {line:?}");
            assert_eq!(line_len, line.len());
            (reply, swallow)
        }
        other => panic!("{line:?}: {other:?}"),
    }
}

#[test]
fn commands() {
    let get = meta("mg key\r\n");
    assert_eq!(get.command, Command::Get);
    assert_eq!(get.key, b"key");
    assert_eq!(get.datalen, 0);
    assert_eq!(get.flags, Flags::default());

    let set = meta("ms key 5 T30 F7\r\n");
    assert_eq!(
        (set.command, set.key, set.datalen),
        (Command::Set, &b"key"[..], 5)
    );
    assert_eq!((set.flags.ttl, set.flags.client_flags), (Some(30), Some(7)));
    assert_eq!(set.flags.set_mode(), Some(SetMode::Set));
    assert_eq!(meta("ms k 0\r\n").datalen, 0);

    assert_eq!(meta("md key q\r\n").command, Command::Delete);
    let arith = meta("ma key\r\n");
    assert_eq!(arith.command, Command::Arithmetic);
    assert_eq!(arith.flags.arithmetic_mode(), Some(ArithmeticMode::Incr));
    assert_eq!((arith.flags.delta, arith.flags.initial), (None, None));

    // mn takes no arguments and ignores any.
    assert_eq!(meta("mn\r\n").command, Command::Noop);
    assert_eq!(meta("mn x y\r\n").command, Command::Noop);

    let debug = meta("me key\r\n");
    assert_eq!((debug.command, debug.key), (Command::Debug, &b"key"[..]));
    assert!(!debug.flags.base64_key);
    let debug = meta("me Zm9v b\r\n");
    assert!(debug.flags.base64_key);
    let mut scratch = [0u8; text::MAX_KEY_LEN];
    assert_eq!(debug.decode_key(&mut scratch), b"foo");
}

#[test]
fn every_flag() {
    let request = meta("mg Zm9v b c f h k l s t v u q I x Oop C1 E2 F3\r\n");
    let f = request.flags;
    assert!(f.base64_key && f.return_cas && f.return_flags && f.return_hit && f.return_key);
    assert!(f.return_last_access && f.return_size && f.return_ttl && f.return_value);
    assert!(f.no_bump && f.quiet && f.invalidate && f.remove_value);
    assert_eq!(f.opaque, Some(&b"Oop"[..]));
    assert_eq!(
        (f.compare_cas, f.new_cas, f.client_flags),
        (Some(1), Some(2), Some(3))
    );
    let mut scratch = [0u8; text::MAX_KEY_LEN];
    assert_eq!(request.decode_key(&mut scratch), b"foo");
    // Flags come back in request order.
    let order: Vec<u8> = f.tokens().map(|t| t[0]).collect();
    assert_eq!(order, b"bcfhklstvuqIxOCEF");
    let f = meta("ma k N4 R5 T-6 MD D7 J8 Pproxy Lpath\r\n").flags;
    assert_eq!(
        (f.vivify_ttl, f.recache_ttl, f.ttl),
        (Some(4), Some(5), Some(-6))
    );
    assert_eq!((f.mode, f.delta, f.initial), (Some(b'D'), Some(7), Some(8)));
    assert_eq!(f.tokens().map(|t| t[0]).collect::<Vec<u8>>(), b"NRTMDJPL");
    assert_eq!(meta("mg k\r\n").flags.tokens().next(), None);
    let plain = meta("mg k v\r\n");
    assert_eq!(plain.decode_key(&mut scratch), b"k");
}

#[test]
fn modes() {
    for (mode, expected) in [
        ("MS", SetMode::Set),
        ("ME", SetMode::Add),
        ("MR", SetMode::Replace),
        ("MA", SetMode::Append),
        ("MP", SetMode::Prepend),
    ] {
        let line = format!("ms k 1 {mode}\r\n");
        assert_eq!(meta(line.leak()).flags.set_mode(), Some(expected), "{mode}");
    }
    for (mode, expected) in [
        ("MI", ArithmeticMode::Incr),
        ("M+", ArithmeticMode::Incr),
        ("MD", ArithmeticMode::Decr),
        ("M-", ArithmeticMode::Decr),
    ] {
        let line = format!("ma k {mode}\r\n");
        assert_eq!(
            meta(line.leak()).flags.arithmetic_mode(),
            Some(expected),
            "{mode}"
        );
    }
    // mg and md accept and ignore M, as memcached does.
    assert_eq!(meta("mg k MZ\r\n").flags.mode, Some(b'Z'));
    assert_eq!(meta("md k MZ\r\n").flags.mode, Some(b'Z'));
}

#[test]
fn every_error() {
    use ErrorReply::*;
    let long_key = "k".repeat(251);
    let many = " v".repeat(18);
    let cases: Vec<(String, ErrorReply, usize)> = vec![
        ("mg\r\n".into(), Error, 0),
        ("ms\r\n".into(), Error, 0),
        ("md\r\n".into(), Error, 0),
        ("ma\r\n".into(), Error, 0),
        ("mz k\r\n".into(), Error, 0),
        ("me\r\n".into(), BadFormat, 0),
        (format!("me {long_key}\r\n"), BadFormat, 0),
        ("me !!!! b\r\n".into(), BadFormat, 0),
        ("me a\x01\r\n".into(), BadFormat, 0),
        (format!("mg {long_key}\r\n"), BadFormat, 0),
        (format!("ms {long_key} 1\r\n"), BadFormat, 0),
        (format!("md {long_key}\r\n"), BadFormat, 0),
        (format!("ma {long_key}\r\n"), BadFormat, 0),
        ("mg a\x01b v\r\n".into(), BadFormat, 0),
        // ms needs a length.
        ("ms k\r\n".into(), BadFormat, 0),
        ("ms k x\r\n".into(), BadFormat, 0),
        ("ms k -1\r\n".into(), BadFormat, 0),
        // 20 tokens or more (memcached counts a terminal token).
        (format!("mg k{many}\r\n"), GetFlagsTooLong, 0),
        (format!("ms k 1{many}\r\n"), FlagsTooLong, 0),
        (format!("md k{many}\r\n"), FlagsTooLong, 0),
        (format!("ma k{many}\r\n"), FlagsTooLong, 0),
        // Flag errors.
        ("mg k v v\r\n".into(), DuplicateFlag, 0),
        ("mg k T1 T2\r\n".into(), DuplicateFlag, 0),
        ("mg k \x7f\r\n".into(), DuplicateFlag, 0),
        ("mg k é\r\n".into(), DuplicateFlag, 0),
        ("mg k z\r\n".into(), InvalidFlag, 0),
        ("mg k Tx\r\n".into(), BadToken, 0),
        ("mg k T\r\n".into(), BadToken, 0),
        ("mg k N1.5\r\n".into(), BadToken, 0),
        ("mg k R-\r\n".into(), BadToken, 0),
        ("mg k C-1\r\n".into(), BadToken, 0),
        ("mg k Ex\r\n".into(), BadToken, 0),
        ("mg k Fx\r\n".into(), BadFormat, 0),
        ("mg k Tx Fx\r\n".into(), BadToken, 0),
        ("mg k Fx Tx\r\n".into(), BadToken, 0),
        ("mg k Jx\r\n".into(), InvalidInitial, 0),
        ("mg k D-1\r\n".into(), InvalidDeltaValue, 0),
        ("mg k M\r\n".into(), ModeTokenLength, 0),
        ("mg k MSS\r\n".into(), ModeTokenLength, 0),
        ("mg !!!! b\r\n".into(), KeyDecoding, 0),
        ("mg Zg= b\r\n".into(), KeyDecoding, 0),
        // The last argument error wins; a duplicate or unknown flag stops at once.
        ("mg k Tx Dx\r\n".into(), InvalidDeltaValue, 0),
        ("mg k Tx z\r\n".into(), InvalidFlag, 0),
        ("mg k Tx v v\r\n".into(), DuplicateFlag, 0),
        (format!("mg k O{}\r\n", "o".repeat(32)), OpaqueTooLong, 0),
        // md and ma answer one message for any flag error.
        ("md k z\r\n".into(), InvalidOrDuplicateFlag, 0),
        ("md k q q\r\n".into(), InvalidOrDuplicateFlag, 0),
        ("ma k Dx\r\n".into(), InvalidOrDuplicateFlag, 0),
        ("ma k MX\r\n".into(), InvalidArithmeticMode, 0),
        (
            "md k O123456789012345678901234567890123\r\n".into(),
            OpaqueTooLong,
            0,
        ),
        // A refused ms swallows its data block.
        ("ms k 5 z\r\n".into(), InvalidFlag, 7),
        ("ms k 5 q q\r\n".into(), DuplicateFlag, 7),
        ("ms k 0 Tx\r\n".into(), BadToken, 2),
        ("ms k 3 MX\r\n".into(), InvalidSetMode, 5),
        ("ms k 3 Mx\r\n".into(), InvalidSetMode, 5),
        ("ms k 3 MI\r\n".into(), InvalidSetMode, 5),
        (format!("ms k 3 O{}\r\n", "o".repeat(32)), OpaqueTooLong, 5),
        ("ms !!!! 3 b\r\n".into(), KeyDecoding, 5),
    ];
    for (line, reply, swallow) in &cases {
        assert_eq!(refused(line), (*reply, *swallow), "{line:?}");
    }
    // 19 tokens are fine.
    let line = "mg k c f h k l s t v u q I x P L Oo T1 N1\r\n";
    assert_eq!(text::Tokens::new(line.trim_end().as_bytes()).count(), 19);
    meta(line);
}

#[test]
fn base64_key_may_hold_control_bytes() {
    // "\r\n\x00 k" in base64.
    let request = meta("mg DQoAIGs= b v\r\n");
    let mut scratch = [0u8; text::MAX_KEY_LEN];
    assert_eq!(request.decode_key(&mut scratch), b"\r\n\x00 k");
    // The longest encoded key memcached accepts decodes to 186 bytes.
    let encoded = "A".repeat(248);
    let line = format!("mg {encoded} b\r\n");
    let request = meta(line.leak());
    assert_eq!(request.decode_key(&mut scratch).len(), 186);
}

#[test]
fn truncated_meta_lines_are_incomplete() {
    for line in [
        "mg key v t c\r\n",
        "ms key 10 T0 F1 c\r\n",
        "ma k N0 J5 v\r\n",
    ] {
        for n in 0..line.len() {
            assert!(
                matches!(
                    text::Request::parse(&line.as_bytes()[..n], 0),
                    Err(ParseError::Incomplete { scanned, .. }) if scanned == n
                ),
                "{line:?}[..{n}]"
            );
        }
    }
    // A meta line is held to the 2048-byte line limit.
    let mut long = b"mg ".to_vec();
    long.resize(MAX_LINE_LEN + 1, b'k');
    assert_eq!(
        text::Request::parse(&long, 0),
        Err(ParseError::Close(text::Close::LineTooLong))
    );
}

#[test]
fn reply_lines() {
    let mut out = Vec::new();
    let mut line = ReplyLine::start(&mut out, Status::Va(2));
    line.number(b's', 2)
        .signed(b't', -1)
        .number(b'c', 42)
        .token(b"Oabc")
        .key(b"k", false)
        .flag(b'W');
    line.finish();
    assert_eq!(out, b"VA 2 s2 t-1 c42 Oabc kk W\r\n");

    for (status, text) in [
        (Status::Hd, "HD"),
        (Status::En, "EN"),
        (Status::Nf, "NF"),
        (Status::Ns, "NS"),
        (Status::Ex, "EX"),
        (Status::Mn, "MN"),
        (Status::Va(0), "VA 0"),
    ] {
        let mut out = Vec::new();
        ReplyLine::start(&mut out, status).finish();
        assert_eq!(out, format!("{text}\r\n").as_bytes());
    }

    let mut out = Vec::new();
    let mut line = ReplyLine::start(&mut out, Status::Hd);
    line.key(b"\x00\xff", true);
    line.finish();
    assert_eq!(out, b"HD kAP8= b\r\n");
}

#[test]
fn debug_lines() {
    let mut out = Vec::new();
    DebugLine {
        key: b"k",
        base64_key: false,
        exp: -1,
        last_access: 3,
        cas: 79,
        fetched: true,
        class: 1,
        size: 66,
    }
    .emit_into(&mut out);
    assert_eq!(out, b"ME k exp=-1 la=3 cas=79 fetch=yes cls=1 size=66\r\n");
    out.clear();
    DebugLine {
        key: b"foo",
        base64_key: true,
        exp: 30,
        last_access: 0,
        cas: 1,
        fetched: false,
        class: 1,
        size: 48,
    }
    .emit_into(&mut out);
    assert_eq!(out, b"ME Zm9v exp=30 la=0 cas=1 fetch=no cls=1 size=48\r\n");
}
