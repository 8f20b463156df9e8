//! The `meta` target: meta command lines (`mg`, `ms`, `md`, `ma`, `mn`, `me`) with their flags,
//! parsed by `protocol::text` and decoded by `protocol::meta`.
//!
//! Input: a command byte, a mode byte, then either raw bytes for the rest of the line (and
//! whatever follows it) or choices of flag tokens from a table of valid and broken ones. The
//! line goes through every check of the `text` target, and a parsed meta request must also:
//! - have a valid key, or with `b` a base64 key that decodes to at most 250 bytes and back;
//! - decode each flag token into the field it names, with the value the token spells;
//! - keep `ms`'s data block exactly `datalen + 2` bytes on;
//! - give reply lines that are one line each, whatever flags are echoed.

use protocol::meta::{self, Command, DebugLine, ReplyLine, Status, base64};
use protocol::text::{MAX_KEY_LEN, Tokens, is_valid_key, parse_i32, parse_u32, parse_u64};

use crate::input::Reader;

const COMMANDS: [&[u8]; 8] = [b"mg", b"ms", b"md", b"ma", b"mn", b"me", b"mz", b"m"];

const KEYS: [&[u8]; 8] = [
    b"key",
    b"a2V5",     // base64 "key"
    b"AAEC/w==", // base64 of binary bytes
    b"a2V5=",    // broken base64
    b"k\x01y",   // control character
    b"",
    &[b'k'; 250],
    &[b'Q'; 252], // too long either way
];

/// Flag tokens, valid and not: the generator picks from these, then may append raw bytes.
pub(crate) const FLAGS: [&[u8]; 48] = [
    b"v",
    b"k",
    b"c",
    b"f",
    b"h",
    b"l",
    b"s",
    b"t",
    b"u",
    b"q",
    b"I",
    b"x",
    b"b",
    b"P",
    b"L",
    b"Oabc",
    b"O",
    b"O0123456789012345678901234567890",
    b"O01234567890123456789012345678901",
    b"T0",
    b"T-1",
    b"T30",
    b"T2147483648",
    b"Tx",
    b"N30",
    b"R10",
    b"C0",
    b"C18446744073709551615",
    b"C18446744073709551616",
    b"E5",
    b"F0",
    b"F4294967295",
    b"F4294967296",
    b"MS",
    b"ME",
    b"MA",
    b"MP",
    b"MR",
    b"MI",
    b"MD",
    b"M+",
    b"M-",
    b"MZ",
    b"MSS",
    b"D5",
    b"J10",
    b"z",
    b"vv",
];

/// Runs every check on one input. Panics on a violation.
pub fn check(data: &[u8]) {
    let mut r = Reader::new(data);
    let command = r.pick(&COMMANDS);
    let mode = r.u8();
    let mut buf = command.to_vec();
    if mode & 1 == 0 {
        buf.push(b' ');
        buf.extend_from_slice(r.rest());
    } else {
        buf.push(b' ');
        buf.extend_from_slice(r.pick(&KEYS));
        if command == b"ms" {
            buf.push(b' ');
            buf.extend_from_slice(r.pick(&[&b"2"[..], b"0", b"-1", b"2147483645", b"x"]));
        }
        let flags = r.below(24);
        for _ in 0..flags {
            buf.push(b' ');
            buf.extend_from_slice(r.pick(&FLAGS));
            if r.chance(16) {
                buf.extend_from_slice(r.bytes(4));
            }
        }
        buf.extend_from_slice(b"\r\n");
        buf.extend_from_slice(r.rest());
    }
    let mut input = vec![mode >> 1];
    input.extend_from_slice(&buf);
    crate::text::check(&input);
}

/// Checks a parsed meta request; `rest` is what follows its line.
pub(crate) fn check_request(request: meta::Request<'_>, rest: &[u8]) {
    let flags = request.flags;
    match request.command {
        Command::Noop => assert!(request.key.is_empty()),
        _ if flags.base64_key => {
            assert!(request.key.len() <= MAX_KEY_LEN);
            let len = base64::decoded_len(request.key).expect("a b key is base64");
            let mut scratch = [0u8; MAX_KEY_LEN];
            let decoded = request.decode_key(&mut scratch);
            assert_eq!(decoded.len(), len);
            let mut encoded = Vec::new();
            base64::encode_into(decoded, &mut encoded);
            let mut again = [0u8; MAX_KEY_LEN];
            assert_eq!(base64::decode(&encoded, &mut again), Some(len));
            assert_eq!(&again[..len], decoded, "base64 round trip");
        }
        _ => assert!(is_valid_key(request.key), "key {:?}", request.key),
    }
    match request.command {
        Command::Set => {
            assert!(request.datalen <= i32::MAX as usize - 2);
            assert!(flags.set_mode().is_some());
            crate::text::check_data_block(rest, request.datalen);
        }
        Command::Arithmetic => {
            assert_eq!(request.datalen, 0);
            assert!(flags.arithmetic_mode().is_some());
        }
        _ => assert_eq!(request.datalen, 0),
    }
    if request.command != Command::Debug {
        check_flags(&flags);
    }
    check_replies(request);
}

/// Each token decodes into the field it names, with the value it spells.
fn check_flags(flags: &meta::Flags<'_>) {
    let tokens: Vec<&[u8]> = flags.tokens().collect();
    assert!(tokens.len() < 20, "{} flag tokens", tokens.len());
    if let Some(opaque) = flags.opaque {
        assert!(opaque.len() <= meta::MAX_OPAQUE_LEN);
    }
    let mut seen = [false; 256];
    for token in tokens {
        let (flag, arg) = (token[0], &token[1..]);
        assert!(!seen[usize::from(flag)], "flag {} twice", flag as char);
        seen[usize::from(flag)] = true;
        let decoded = match flag {
            b'b' => flags.base64_key,
            b'c' => flags.return_cas,
            b'f' => flags.return_flags,
            b'h' => flags.return_hit,
            b'k' => flags.return_key,
            b'l' => flags.return_last_access,
            b's' => flags.return_size,
            b't' => flags.return_ttl,
            b'v' => flags.return_value,
            b'u' => flags.no_bump,
            b'q' => flags.quiet,
            b'I' => flags.invalidate,
            b'x' => flags.remove_value,
            b'P' | b'L' => true,
            b'O' => flags.opaque == Some(token),
            b'N' => flags.vivify_ttl.is_some() && flags.vivify_ttl == parse_i32(arg),
            b'T' => flags.ttl.is_some() && flags.ttl == parse_i32(arg),
            b'R' => flags.recache_ttl.is_some() && flags.recache_ttl == parse_i32(arg),
            b'C' => flags.compare_cas.is_some() && flags.compare_cas == parse_u64(arg),
            b'E' => flags.new_cas.is_some() && flags.new_cas == parse_u64(arg),
            b'F' => flags.client_flags.is_some() && flags.client_flags == parse_u32(arg),
            b'M' => arg.len() == 1 && flags.mode == Some(arg[0]),
            b'D' => flags.delta.is_some() && flags.delta == parse_u64(arg),
            b'J' => flags.initial.is_some() && flags.initial == parse_u64(arg),
            _ => false,
        };
        assert!(decoded, "flag token {token:?} decoded as {flags:?}");
    }
}

/// Reply lines echoing the request's flags stay one line each.
fn check_replies(request: meta::Request<'_>) {
    let mut scratch = [0u8; MAX_KEY_LEN];
    let key = request.decode_key(&mut scratch);
    for status in [
        Status::Hd,
        Status::Va(request.datalen),
        Status::En,
        Status::Mn,
    ] {
        let mut out = Vec::new();
        let mut line = ReplyLine::start(&mut out, status);
        for token in request.flags.tokens() {
            match token[0] {
                b'O' => line.token(token),
                b'k' => line.key(key, request.flags.base64_key),
                b'c' => line.number(b'c', u64::MAX),
                b't' => line.signed(b't', -1),
                flag => line.flag(flag),
            };
        }
        line.finish();
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1, "{out:?}");
        assert!(out.ends_with(b"\r\n"));
        // Every token of the reply line is one the line itself holds.
        assert!(Tokens::new(&out[..out.len() - 2]).all(|t| !t.is_empty()));
    }
    let mut out = Vec::new();
    DebugLine {
        key,
        base64_key: request.flags.base64_key,
        exp: -1,
        last_access: 0,
        cas: 1,
        fetched: false,
        class: 1,
        size: 64,
    }
    .emit_into(&mut out);
    assert!(out.starts_with(b"ME ") && out.ends_with(b"\r\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_lines_pass_every_check() {
        for data in [
            &b"\x00\x00key v k c O123 T30\r\n"[..],
            b"\x01\x01\x00\x00\x05\x00\x01\x02\x03\x04\x05hi\r\n",
            b"\x01\x00key 2 T0 F5 MA\r\nhi\r\n",
            b"\x02\x01\x01\x03\x1c\x1d\x30",
            b"\x05\x00a2V5 b\r\n",
        ] {
            check(data);
        }
    }
}
