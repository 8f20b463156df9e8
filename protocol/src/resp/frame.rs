//! Reading replies, as a client does: one RESP2 or RESP3 token at a time ([`Frame`]), and the
//! length of a whole value ([`value_len`]).

use core::fmt;

use super::request::parse_integer;

/// One token of a reply: a whole scalar, or the header of an aggregate whose elements follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `+<text>`.
    Simple(&'a [u8]),
    /// `-<text>`.
    Error(&'a [u8]),
    /// `:<n>`.
    Integer(i64),
    /// `$<len>` and the bytes.
    Bulk(&'a [u8]),
    /// RESP3 `_`, RESP2 `$-1` or `*-1`.
    Null,
    /// `*<n>`.
    Array(usize),
    /// `%<n>`: `n` keys and values follow.
    Map(usize),
    /// `~<n>`.
    Set(usize),
    /// `><n>`.
    Push(usize),
    /// `|<n>`: `n` keys and values about the value that follows them.
    Attribute(usize),
    /// `,<number>`, as written.
    Double(&'a [u8]),
    /// `#t` or `#f`.
    Boolean(bool),
    /// `(<digits>`.
    BigNumber(&'a [u8]),
    /// `!<len>` and the error's bytes.
    BulkError(&'a [u8]),
    /// `=<len>`, a three-letter format, `:` and the text.
    Verbatim {
        /// `txt` or `mkd`.
        format: &'a [u8],
        /// The text.
        text: &'a [u8],
    },
}

/// Why no token could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Read at least `needed` more bytes.
    Incomplete {
        /// Bytes still missing (at least 1).
        needed: usize,
    },
    /// Not RESP: an unknown type byte, a bad number, a missing `\r\n`.
    Invalid,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Incomplete { needed } => write!(f, "incomplete: {needed} more bytes"),
            FrameError::Invalid => f.write_str("not a RESP reply"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Longest line a token may take before it is refused (a simple string, an error, a number).
pub const MAX_LINE_LEN: usize = 64 * 1024;

impl<'a> Frame<'a> {
    /// Reads the token at the front of `buf`; returns it and its length in bytes.
    ///
    /// # Errors
    /// [`FrameError::Incomplete`] until the token is whole, [`FrameError::Invalid`] when it is
    /// not RESP.
    pub fn parse(buf: &'a [u8]) -> Result<(Frame<'a>, usize), FrameError> {
        let Some(&kind) = buf.first() else {
            return Err(FrameError::Incomplete { needed: 1 });
        };
        if !b"+-:_,#($!=*%~>|".contains(&kind) {
            return Err(FrameError::Invalid);
        }
        let (text, line_len) = line(buf)?;
        let frame = match kind {
            b'+' => Frame::Simple(text),
            b'-' => Frame::Error(text),
            b':' => Frame::Integer(parse_integer(text).ok_or(FrameError::Invalid)?),
            b'_' if text.is_empty() => Frame::Null,
            b',' => Frame::Double(text),
            b'#' => match text {
                b"t" => Frame::Boolean(true),
                b"f" => Frame::Boolean(false),
                _ => return Err(FrameError::Invalid),
            },
            b'(' => Frame::BigNumber(text),
            b'$' | b'!' | b'=' => {
                let len = parse_integer(text).ok_or(FrameError::Invalid)?;
                if len == -1 && kind == b'$' {
                    return Ok((Frame::Null, line_len));
                }
                let len = usize::try_from(len).map_err(|_| FrameError::Invalid)?;
                let end = line_len.checked_add(len).ok_or(FrameError::Invalid)?;
                let total = end.checked_add(2).ok_or(FrameError::Invalid)?;
                if buf.len() < total {
                    return Err(FrameError::Incomplete {
                        needed: total - buf.len(),
                    });
                }
                if &buf[end..total] != b"\r\n" {
                    return Err(FrameError::Invalid);
                }
                let bytes = &buf[line_len..end];
                let frame = match kind {
                    b'$' => Frame::Bulk(bytes),
                    b'!' => Frame::BulkError(bytes),
                    _ if bytes.get(3) == Some(&b':') => Frame::Verbatim {
                        format: &bytes[..3],
                        text: &bytes[4..],
                    },
                    _ => return Err(FrameError::Invalid),
                };
                return Ok((frame, total));
            }
            b'*' | b'%' | b'~' | b'>' | b'|' => {
                let n = parse_integer(text).ok_or(FrameError::Invalid)?;
                if n == -1 && kind == b'*' {
                    return Ok((Frame::Null, line_len));
                }
                let n = usize::try_from(n).map_err(|_| FrameError::Invalid)?;
                match kind {
                    b'*' => Frame::Array(n),
                    b'%' => Frame::Map(n),
                    b'~' => Frame::Set(n),
                    b'>' => Frame::Push(n),
                    _ => Frame::Attribute(n),
                }
            }
            _ => return Err(FrameError::Invalid),
        };
        Ok((frame, line_len))
    }

    /// Values that follow this token as its elements (a map's keys and values count two).
    pub fn children(&self) -> usize {
        match *self {
            Frame::Array(n) | Frame::Set(n) | Frame::Push(n) => n,
            Frame::Map(n) | Frame::Attribute(n) => n.saturating_mul(2),
            _ => 0,
        }
    }
}

/// The line at the front of `buf` after its type byte, and the line's length with `\r\n`.
fn line(buf: &[u8]) -> Result<(&[u8], usize), FrameError> {
    // The type byte is not part of the line, whatever it is (a `\r` there is not its end).
    let window = &buf[..buf.len().min(MAX_LINE_LEN + 2)];
    let Some(cr) = window
        .iter()
        .skip(1)
        .position(|&b| b == b'\r')
        .map(|i| i + 1)
    else {
        return if buf.len() >= MAX_LINE_LEN + 2 {
            Err(FrameError::Invalid)
        } else {
            Err(FrameError::Incomplete { needed: 1 })
        };
    };
    match buf.get(cr + 1) {
        None => Err(FrameError::Incomplete { needed: 1 }),
        Some(b'\n') => Ok((&buf[1..cr], cr + 2)),
        Some(_) => Err(FrameError::Invalid),
    }
}

/// The length of the whole value at the front of `buf`: a scalar, or an aggregate with all
/// its elements (and any attribute before it).
///
/// # Errors
/// As [`Frame::parse`], for the first token that is not whole or not RESP.
pub fn value_len(buf: &[u8]) -> Result<usize, FrameError> {
    let mut at = 0;
    // Values still to read; an attribute adds its pairs without being a value itself.
    let mut left: usize = 1;
    while left > 0 {
        let (frame, len) = Frame::parse(&buf[at..])?;
        at += len;
        if !matches!(frame, Frame::Attribute(_)) {
            left -= 1;
        }
        left = left.saturating_add(frame.children());
    }
    Ok(at)
}
