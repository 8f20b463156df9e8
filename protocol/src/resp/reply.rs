//! Replies a server writes, in the version the connection speaks.

use crate::text::{push_i64, push_u64};

/// The protocol version a connection speaks: RESP2 until it says `HELLO 3`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Version {
    /// RESP2: simple strings, errors, integers, bulk strings, arrays.
    #[default]
    Resp2,
    /// RESP3: RESP2's types, plus null, maps, sets, doubles, booleans, verbatim strings, big
    /// numbers and pushes.
    Resp3,
}

/// One reply value, or the header of an aggregate whose elements are emitted after it.
///
/// RESP3's types are written in their RESP2 form to a RESP2 connection, as Redis writes them:
/// a null as a null bulk string (`$-1`), a map as an array of keys and values, a set or a push
/// as an array, a double, a big number or a verbatim string as a bulk string, a boolean as the
/// integer 1 or 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reply<'a> {
    /// `+<text>`: a short status (`OK`, `PONG`); no `\r` or `\n` in it.
    Simple(&'a [u8]),
    /// `-<text>`: an error, its code first (`ERR ...`); no `\r` or `\n` in it.
    Error(&'a [u8]),
    /// `:<n>`.
    Integer(i64),
    /// `$<len>` and the bytes.
    Bulk(&'a [u8]),
    /// A missing value: RESP3 `_`, RESP2 `$-1`.
    Null,
    /// A missing array: RESP3 `_`, RESP2 `*-1`.
    NullArray,
    /// `*<n>`: an array of `n` elements.
    Array(usize),
    /// `%<n>`: a map of `n` keys and values (RESP2: an array of `2n` elements).
    Map(usize),
    /// `~<n>`: a set of `n` elements (RESP2: an array).
    Set(usize),
    /// `><n>`: an out-of-band push of `n` elements (RESP2: an array).
    Push(usize),
    /// `,<number>` (RESP2: a bulk string of the number).
    Double(f64),
    /// `#t` or `#f` (RESP2: `:1` or `:0`).
    Boolean(bool),
    /// `(<digits>`: an integer of any size (RESP2: a bulk string of the digits).
    BigNumber(&'a [u8]),
    /// `=<len>` then `<format>:<text>`: text to show as it is, `format` being `txt` or `mkd`
    /// (RESP2: a bulk string of the text alone).
    Verbatim {
        /// Three letters: `txt` or `mkd`.
        format: &'a [u8; 3],
        /// The text.
        text: &'a [u8],
    },
}

impl Reply<'_> {
    /// Appends the reply (or the aggregate's header) as `version` writes it.
    pub fn emit_into(&self, version: Version, out: &mut Vec<u8>) {
        let v3 = version == Version::Resp3;
        match *self {
            Reply::Simple(text) => line(out, b'+', text),
            Reply::Error(text) => line(out, b'-', text),
            Reply::Integer(n) => {
                out.push(b':');
                push_i64(out, n);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Bulk(bytes) => bulk(out, b'$', bytes),
            Reply::Null if v3 => out.extend_from_slice(b"_\r\n"),
            Reply::Null => out.extend_from_slice(b"$-1\r\n"),
            Reply::NullArray if v3 => out.extend_from_slice(b"_\r\n"),
            Reply::NullArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(n) => count(out, b'*', n),
            Reply::Map(n) if v3 => count(out, b'%', n),
            Reply::Map(n) => count(out, b'*', n.saturating_mul(2)),
            Reply::Set(n) => count(out, if v3 { b'~' } else { b'*' }, n),
            Reply::Push(n) => count(out, if v3 { b'>' } else { b'*' }, n),
            Reply::Double(x) => {
                let mut text = Vec::with_capacity(24);
                push_double(&mut text, x);
                if v3 {
                    line(out, b',', &text);
                } else {
                    bulk(out, b'$', &text);
                }
            }
            Reply::Boolean(b) if v3 => out.extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" }),
            Reply::Boolean(b) => out.extend_from_slice(if b { b":1\r\n" } else { b":0\r\n" }),
            Reply::BigNumber(digits) if v3 => line(out, b'(', digits),
            Reply::BigNumber(digits) => bulk(out, b'$', digits),
            Reply::Verbatim { format, text } if v3 => {
                out.push(b'=');
                push_u64(out, text.len() as u64 + 4);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(format);
                out.push(b':');
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Verbatim { text, .. } => bulk(out, b'$', text),
        }
    }

    /// Bytes [`Reply::emit_into`] appends.
    pub fn buffer_len(&self, version: Version) -> usize {
        let mut out = Vec::new();
        match *self {
            // The bytes dominate; do not copy them to count them.
            Reply::Bulk(bytes) => 1 + decimal_len(bytes.len() as u64) + 2 + bytes.len() + 2,
            Reply::Verbatim { text, .. } if version == Version::Resp3 => {
                1 + decimal_len(text.len() as u64 + 4) + 2 + 4 + text.len() + 2
            }
            Reply::Verbatim { text, .. } => 1 + decimal_len(text.len() as u64) + 2 + text.len() + 2,
            _ => {
                self.emit_into(version, &mut out);
                out.len()
            }
        }
    }
}

/// `<kind><text>\r\n`.
fn line(out: &mut Vec<u8>, kind: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.push(kind);
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

/// `<kind><len>\r\n<bytes>\r\n`.
fn bulk(out: &mut Vec<u8>, kind: u8, bytes: &[u8]) {
    out.reserve(bytes.len() + 26);
    number_line(out, kind, bytes.len() as u64);
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// `<kind><n>\r\n`.
fn count(out: &mut Vec<u8>, kind: u8, n: usize) {
    number_line(out, kind, n as u64);
}

/// `<kind><n>\r\n`, assembled on the stack and appended at once (a header of a reply or of a
/// command).
pub(super) fn number_line(out: &mut Vec<u8>, kind: u8, mut n: u64) {
    // The kind, at most 20 digits, `\r\n`: written from the end.
    let mut line = [0u8; 23];
    let mut at = line.len() - 2;
    line[at..].copy_from_slice(b"\r\n");
    loop {
        at -= 1;
        line[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    at -= 1;
    line[at] = kind;
    out.extend_from_slice(&line[at..]);
}

/// A double as RESP3 writes it: `inf`, `-inf`, `nan`, or the shortest decimal that reads back
/// as the same number (with an exponent where that is shorter).
fn push_double(out: &mut Vec<u8>, x: f64) {
    use std::io::Write as _;
    // Writing into a Vec cannot fail.
    let _ = if x.is_nan() {
        write!(out, "nan")
    } else if x.is_infinite() {
        write!(out, "{}", if x > 0.0 { "inf" } else { "-inf" })
    } else {
        write!(out, "{x:?}")
    };
}

fn decimal_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}
