//! Request lines and data blocks in a receive buffer: framing, tokens, numbers, keys.

use super::{Close, MAX_KEY_LEN, MAX_LINE_LEN, MAX_MULTIGET_LINE_LEN, ParseError};

/// Largest read hint [`ParseError::Incomplete`] gives for a line whose end has not arrived.
const LINE_READ_HINT: usize = 16 * 1024;
/// memcached looks this far past leading spaces for a `get`/`gets` that may outgrow the limit.
const MAX_LEADING_SPACES: usize = 100;

/// One request line at the front of a receive buffer (protocol.txt, "Commands").
///
/// A line ends at the first `\n`; a `\r` just before it is not part of the line (as in
/// memcached, a bare `\n` also ends a line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// The line without its `\r\n`.
    pub text: &'a [u8],
    /// Bytes the line takes in the buffer, newline included.
    pub len: usize,
}

impl<'a> Line<'a> {
    /// Finds the line at the front of `buf`; `scanned` bytes are known to hold no newline (0 if
    /// unsure, or the `scanned` of a previous [`ParseError::Incomplete`] for this buffer).
    ///
    /// # Errors
    ///
    /// - [`ParseError::Incomplete`] when there is no newline yet;
    /// - [`ParseError::Close`] with [`Close::LineTooLong`] when more than [`MAX_LINE_LEN`] bytes
    ///   come before the newline (or hold none yet), unless the line is a `get`/`gets` (then up
    ///   to [`MAX_MULTIGET_LINE_LEN`]), as memcached's `try_read_command_ascii` decides. The
    ///   limit holds whether the newline has arrived or not, so a line is refused however its
    ///   bytes are split on the way in.
    pub fn parse(buf: &'a [u8], scanned: usize) -> Result<Line<'a>, ParseError> {
        let from = scanned.min(buf.len());
        match buf[from..].iter().position(|&b| b == b'\n') {
            Some(at) => {
                let end = from + at;
                if end > line_limit(buf, end) {
                    return Err(ParseError::Close(Close::LineTooLong));
                }
                // memcached strips the `\r` only from a line of two bytes or more.
                let text = if end > 1 && buf[end - 1] == b'\r' {
                    &buf[..end - 1]
                } else {
                    &buf[..end]
                };
                Ok(Line { text, len: end + 1 })
            }
            None => {
                let limit = line_limit(buf, buf.len());
                if buf.len() > limit {
                    return Err(ParseError::Close(Close::LineTooLong));
                }
                Err(ParseError::Incomplete {
                    needed: (limit + 1 - buf.len()).min(LINE_READ_HINT),
                    scanned: buf.len(),
                })
            }
        }
    }

    /// The line's space-separated tokens.
    pub fn tokens(&self) -> Tokens<'a> {
        Tokens::new(self.text)
    }
}

/// The most bytes a line starting `buf` may hold before its newline, given that `len` of them
/// have no newline: [`MAX_LINE_LEN`] while that is enough, then [`MAX_MULTIGET_LINE_LEN`] for a
/// multi-key read.
fn line_limit(buf: &[u8], len: usize) -> usize {
    if len <= MAX_LINE_LEN || !is_multiget(buf) {
        MAX_LINE_LEN
    } else {
        MAX_MULTIGET_LINE_LEN
    }
}

/// Whether a line may be a long multi-key read: `get ` or `gets ` after at most 100 leading
/// spaces.
fn is_multiget(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    spaces <= MAX_LEADING_SPACES && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
}

/// The tokens of a line: runs of bytes between spaces. As in memcached, only the space
/// separates tokens, and runs of spaces make no empty tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    /// The tokens of `text`.
    pub const fn new(text: &'a [u8]) -> Tokens<'a> {
        Tokens { rest: text }
    }

    /// What has not been tokenized yet (possibly starting with spaces).
    pub const fn remainder(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let len = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        let (token, rest) = rest.split_at(len);
        self.rest = rest;
        Some(token)
    }
}

/// Why a data block cannot be taken yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataError {
    /// Read `needed` more bytes (exact).
    Incomplete {
        /// Bytes missing after the end of the given buffer.
        needed: usize,
    },
    /// The `bytes` of data are not followed by `\r\n`: answer
    /// [`ErrorReply::BadDataChunk`](super::ErrorReply::BadDataChunk) and drop `bytes + 2`
    /// bytes, as memcached does.
    BadChunk,
}

/// The data block of a storage command (protocol.txt: `<data block>\r\n`), at the front of
/// `buf` (the bytes after the command line). Takes `bytes + 2` bytes of the buffer.
///
/// # Errors
///
/// [`DataError::Incomplete`] until `bytes + 2` bytes have arrived, then
/// [`DataError::BadChunk`] if they do not end with `\r\n`.
pub fn data_block(buf: &[u8], bytes: usize) -> Result<&[u8], DataError> {
    let total = bytes.saturating_add(2);
    if buf.len() < total {
        return Err(DataError::Incomplete {
            needed: total - buf.len(),
        });
    }
    if &buf[bytes..total] != b"\r\n" {
        return Err(DataError::BadChunk);
    }
    Ok(&buf[..bytes])
}

/// Whether `key` is a valid text-protocol key: 1 to 250 bytes, no control characters (bytes
/// below 0x21, which include the space, or 0x7f). memcached itself only checks the length.
pub fn is_valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// An unsigned decimal: an optional `+` and 1 to 20 digits that fit a `u64`.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let digits = token.strip_prefix(b"+").unwrap_or(token);
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// An unsigned decimal that fits a `u32` (client flags, verbosity). memcached would truncate a
/// larger one; memspin refuses it.
pub fn parse_u32(token: &[u8]) -> Option<u32> {
    parse_u64(token).and_then(|n| u32::try_from(n).ok())
}

/// A signed decimal that fits an `i32` (exptime, lengths), widened to `i64`.
pub fn parse_i32(token: &[u8]) -> Option<i64> {
    let (negative, digits) = match token.first() {
        Some(b'-') => (true, &token[1..]),
        Some(b'+') => (false, &token[1..]),
        _ => (false, token),
    };
    if digits.first() == Some(&b'+') {
        return None;
    }
    let n = i64::try_from(parse_u64(digits)?).ok()?;
    let n = if negative { -n } else { n };
    i32::try_from(n).ok().map(i64::from)
}

/// Appends `n` in decimal.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends `n` in decimal, with a `-` when negative.
pub fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}
