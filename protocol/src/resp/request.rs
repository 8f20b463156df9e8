//! Commands a client sends: a multibulk array of bulk strings, or an inline line.

use core::fmt;

/// Most arguments a multibulk command may announce (Redis 2.x's limit; later versions accept
/// more, bounded by their 512 MiB query buffer, and memspin's command limit bounds them anyway).
pub const MAX_ARGS: usize = 1024 * 1024;

/// Longest inline command line before the connection is closed with a protocol error (Redis's
/// `PROTO_INLINE_MAX_SIZE`).
pub const MAX_INLINE_LEN: usize = 64 * 1024;

/// Longest `*` or `$` header line, without its `\r\n`: the type byte and an `i64` with its
/// sign take 21 bytes, so a longer line is refused without waiting for more.
pub const MAX_HEADER_LEN: usize = 32;

/// How much a command may hold: what the caller's buffer must be ready to assemble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string (an argument); a longer announced one is a protocol error.
    pub max_bulk: usize,
    /// Longest whole command in bytes (headers and arguments); a bulk that would take the
    /// command past it is a protocol error.
    pub max_command: usize,
}

impl Default for Limits {
    /// Redis's own: 512 MiB per bulk string and per command.
    fn default() -> Limits {
        Limits {
            max_bulk: 512 << 20,
            max_command: 512 << 20,
        }
    }
}

/// How far an earlier call got into a command that was not complete, so a long command
/// arriving in pieces is parsed once, not again from its start with every piece.
///
/// Keep it per connection, pass it back with the same buffer (more bytes appended, its front
/// unchanged), and start over with `Progress::default()` once a command was parsed or the
/// buffer's front moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes checked: for a multibulk command, where the next argument's header starts (0:
    /// not even the first header); for an inline line, bytes known to hold no newline.
    pub at: usize,
    /// Arguments checked (multibulk).
    pub args: usize,
}

/// Why a command could not be taken from the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Read at least `needed` more bytes (exact once a bulk string's length is known; else a
    /// hint of at least 1); not a wire error.
    Incomplete {
        /// Bytes still missing.
        needed: usize,
    },
    /// Reply `-ERR Protocol error: ...` and close the connection (Redis's words).
    Protocol(ProtocolError),
    /// An argument over [`Limits::max_bulk`], or one taking the command past
    /// [`Limits::max_command`]: refuse the command with an error reply and keep the
    /// connection, skipping its bytes as they arrive (nothing of them is buffered): up to
    /// `end` (where the argument ends, counted from the command's first byte, with the two
    /// bytes after it), then `args_left` more arguments, each [`argument_len`] long.
    TooLarge {
        /// Where the refused argument ends, from the command's first byte.
        end: u64,
        /// Arguments after it, still to skip.
        args_left: usize,
    },
}

/// The protocol errors Redis answers before it closes a connection (networking.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    /// An inline line longer than [`MAX_INLINE_LEN`].
    TooBigInlineRequest,
    /// An inline line with a quote that is not closed, or closed and followed by a non-space.
    UnbalancedQuotes,
    /// A `*` header longer than [`MAX_HEADER_LEN`].
    TooBigMbulkCount,
    /// A `*` count that is not an integer, or over [`MAX_ARGS`].
    InvalidMultibulkLength,
    /// A `$` header longer than [`MAX_HEADER_LEN`].
    TooBigBulkCount,
    /// An argument that does not start with `$` (the byte found).
    ExpectedDollar(u8),
    /// A `$` length that is not an integer, negative, over [`Limits::max_bulk`], or would take
    /// the command past [`Limits::max_command`].
    InvalidBulkLength,
}

impl ProtocolError {
    /// Appends the error reply, `-ERR Protocol error: ...\r\n`.
    pub fn emit_into(self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        // Writing into a Vec cannot fail.
        let _ = write!(out, "-ERR {self}\r\n");
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Protocol error: ")?;
        match *self {
            ProtocolError::TooBigInlineRequest => f.write_str("too big inline request"),
            ProtocolError::UnbalancedQuotes => f.write_str("unbalanced quotes in request"),
            ProtocolError::TooBigMbulkCount => f.write_str("too big mbulk count string"),
            ProtocolError::InvalidMultibulkLength => f.write_str("invalid multibulk length"),
            ProtocolError::TooBigBulkCount => f.write_str("too big bulk count string"),
            ProtocolError::ExpectedDollar(got) => {
                write!(f, "expected '$', got '{}'", char::from(got))
            }
            ProtocolError::InvalidBulkLength => f.write_str("invalid bulk length"),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Incomplete { needed } => write!(f, "incomplete: {needed} more bytes"),
            ParseError::Protocol(error) => error.fmt(f),
            ParseError::TooLarge { end, .. } => write!(f, "argument too large (ends at {end})"),
        }
    }
}

impl std::error::Error for ParseError {}

/// How a command's arguments are laid out in its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per argument, from `first` on.
    Multibulk { first: usize },
    /// An inline line without quotes: arguments separated by spaces.
    Words,
}

/// Arguments of a multibulk command whose places [`Command::parse`] keeps as it checks them
/// (the name and the first few after it: every argument of the usual commands), so reading
/// them walks no header a second time.
const SPANS: usize = 6;

/// Where one argument's bytes are in the command's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// The argument at `start..start + len`, if both fit in a `u32` (a command under 4 GiB).
    fn new(start: usize, len: usize) -> Option<Span> {
        let end = start.checked_add(len)?;
        u32::try_from(end).ok()?;
        Some(Span {
            start: start as u32,
            len: len as u32,
        })
    }

    fn range(self) -> core::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// One command, borrowed from the buffer it was parsed from (or, for an inline line with
/// quotes, from its decoded arguments): its arguments, in order, with
/// [`Command::args`].
///
/// A command of no arguments (`*0`, an empty line) is valid and means nothing: skip it.
#[derive(Debug, Clone)]
pub struct Command<'a> {
    bytes: Bytes<'a>,
    layout: Layout,
    argc: usize,
    /// The places of the first `known` arguments (none for an inline line, or for a command
    /// whose parse resumed part-way: its earlier arguments were checked by another call).
    spans: [Span; SPANS],
    known: u8,
}

/// Two commands are equal when they hold the same arguments in the same layout, whatever
/// their parse kept of their places.
impl PartialEq for Command<'_> {
    fn eq(&self, other: &Command<'_>) -> bool {
        self.bytes == other.bytes && self.layout == other.layout && self.argc == other.argc
    }
}

impl Eq for Command<'_> {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Bytes<'a> {
    Borrowed(&'a [u8]),
    /// An inline line with quotes or escapes, decoded into multibulk form.
    Decoded(Vec<u8>),
}

impl<'a> Command<'a> {
    /// Takes the command at the front of `buf`; returns it and its length in bytes.
    ///
    /// A buffer starting with `*` holds a multibulk command, anything else an inline line
    /// (ending in `\n`, an `\r` before it dropped; arguments split as Redis's `sdssplitargs`
    /// splits them, with `"..."` and `'...'` quoting). Nothing of an announced length is
    /// allocated: bytes are only looked at once they are there. `progress` is updated when
    /// the command is incomplete (see [`Progress`]).
    ///
    /// # Errors
    /// [`ParseError::Incomplete`] until the whole command is there; [`ParseError::Protocol`]
    /// for what Redis answers with a protocol error and a close.
    pub fn parse(
        buf: &'a [u8],
        limits: &Limits,
        progress: &mut Progress,
    ) -> Result<(Command<'a>, usize), ParseError> {
        match buf.first() {
            None => Err(ParseError::Incomplete { needed: 1 }),
            Some(b'*') => parse_multibulk(buf, limits, progress),
            Some(_) => parse_inline(buf, progress),
        }
    }

    /// Arguments, the command name first.
    pub fn argc(&self) -> usize {
        self.argc
    }

    /// True for a command of no arguments (to be skipped).
    pub fn is_empty(&self) -> bool {
        self.argc == 0
    }

    /// The arguments, in order, the command name first.
    pub fn args(&self) -> Args<'_> {
        let bytes = match &self.bytes {
            Bytes::Borrowed(bytes) => bytes,
            Bytes::Decoded(bytes) => &bytes[..],
        };
        let at = match self.layout {
            Layout::Multibulk { first } => first,
            Layout::Words => 0,
        };
        Args {
            bytes,
            at,
            left: self.argc,
            words: self.layout == Layout::Words,
            spans: &self.spans[..usize::from(self.known)],
        }
    }

    /// The argument at `index`, if there is one (walks the arguments before it, unless the
    /// parse kept its place).
    pub fn arg(&self, index: usize) -> Option<&[u8]> {
        match (
            &self.bytes,
            self.spans[..usize::from(self.known)].get(index),
        ) {
            (Bytes::Borrowed(bytes), Some(span)) => bytes.get(span.range()),
            _ => self.args().nth(index),
        }
    }

    /// [`Command::arg`], borrowed for as long as the buffer the command was parsed from (to
    /// keep it past the command): only for an argument whose place the parse kept (the first
    /// few of a multibulk command parsed in one call); `None` for others.
    pub fn kept_arg(&self, index: usize) -> Option<&'a [u8]> {
        match (
            &self.bytes,
            self.spans[..usize::from(self.known)].get(index),
        ) {
            (&Bytes::Borrowed(bytes), Some(span)) => bytes.get(span.range()),
            _ => None,
        }
    }

    /// What the parse of this command learnt, to take it again from the same bytes with
    /// [`Command::from_parsed`]: for a multibulk command parsed in one call (whose places the
    /// parse kept) of `len` bytes, `len` being what [`Command::parse`] returned with it; `None`
    /// for an inline line, a command parsed in pieces, or one of 4 GiB or more.
    pub fn parsed(&self, len: usize) -> Option<Parsed> {
        let Layout::Multibulk { first } = self.layout else {
            return None;
        };
        let Bytes::Borrowed(bytes) = self.bytes else {
            return None;
        };
        let all_known = usize::from(self.known) == self.argc.min(SPANS);
        if !all_known || bytes.len() != len {
            return None;
        }
        Some(Parsed {
            len: u32::try_from(len).ok()?,
            first: u32::try_from(first).ok()?,
            argc: u32::try_from(self.argc).ok()?,
            known: self.known,
            spans: self.spans,
        })
    }

    /// The command [`Command::parsed`] described, taken from `buf` without walking it again,
    /// with its length: `buf` must start with the same bytes the command was parsed from (it
    /// may go on past them). Other bytes give whatever arguments are found at the places kept
    /// (never a panic: every place is checked against `buf`); `None` when `buf` is shorter
    /// than the command.
    pub fn from_parsed(buf: &'a [u8], parsed: &Parsed) -> Option<(Command<'a>, usize)> {
        let len = parsed.len();
        let bytes = buf.get(..len)?;
        let command = Command {
            bytes: Bytes::Borrowed(bytes),
            layout: Layout::Multibulk {
                first: parsed.first as usize,
            },
            argc: parsed.argc as usize,
            spans: parsed.spans,
            known: parsed.known,
        };
        Some((command, len))
    }

    /// The arguments from `index` on, the next one starting at `offset`: where
    /// [`Args::offset`] said it does, for this command (or one parsed from the same bytes).
    /// Another offset gives whatever arguments are found there, or none.
    pub fn args_from(&self, offset: usize, index: usize) -> Args<'_> {
        let mut args = self.args();
        args.at = offset;
        args.left = self.argc.saturating_sub(index);
        // Walked from `offset`, whatever is there.
        args.spans = &[];
        args
    }
}

/// What [`Command::parse`] learnt of a complete multibulk command, small and `Copy`, to take
/// the command again from the same bytes without walking them ([`Command::from_parsed`]): a
/// server that parses a pipeline ahead (to warm its store for the keys) executes from these
/// instead of parsing every command twice. Nothing in it points anywhere: its places are
/// offsets from the command's first byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The command's length in bytes.
    len: u32,
    /// Where its first argument's header starts.
    first: u32,
    argc: u32,
    known: u8,
    spans: [Span; SPANS],
}

impl Parsed {
    /// The command's length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for a command of no arguments (`*0`).
    pub fn is_empty(&self) -> bool {
        self.argc == 0
    }
}

/// The arguments of a [`Command`], in order.
#[derive(Debug, Clone)]
pub struct Args<'c> {
    bytes: &'c [u8],
    at: usize,
    left: usize,
    words: bool,
    /// Places of the arguments still to come, from the next one on, that the parse kept.
    spans: &'c [Span],
}

impl Args<'_> {
    /// Where the next argument starts in the command's bytes, to go on from there later
    /// ([`Command::args_from`]).
    pub fn offset(&self) -> usize {
        self.at
    }
}

impl<'c> Iterator for Args<'c> {
    type Item = &'c [u8];

    fn next(&mut self) -> Option<&'c [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if let [span, rest @ ..] = self.spans {
            self.spans = rest;
            let range = span.range();
            self.at = range.end + 2;
            return self.bytes.get(range);
        }
        if self.words {
            let rest = self.bytes.get(self.at..)?;
            let start = rest.iter().position(|&b| !is_space(b))?;
            let len = rest[start..]
                .iter()
                .position(|&b| is_space(b))
                .unwrap_or(rest.len() - start);
            self.at += start + len;
            return Some(&rest[start..start + len]);
        }
        // Checked by `parse`: `$<len>\r\n<len bytes>` and two more bytes.
        let rest = self.bytes.get(self.at..)?;
        let eol = find_crlf(rest)?;
        let len = parse_length(rest.get(1..eol)?)?;
        let start = eol + 2;
        let arg = rest.get(start..start + len)?;
        self.at += start + len + 2;
        Some(arg)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

/// Redis's whitespace (`isspace` in the C locale, as `sdssplitargs` uses it).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// The index of the `\r` of the first `\r\n` in `bytes`.
fn find_crlf(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    loop {
        let cr = from + bytes.get(from..)?.iter().position(|&b| b == b'\r')?;
        if bytes.get(cr + 1) == Some(&b'\n') {
            return Some(cr);
        }
        from = cr + 1;
    }
}

/// A non-negative length as Redis's `string2ll` reads it (no sign, no leading zero, no
/// spaces), as a `usize`.
fn parse_length(digits: &[u8]) -> Option<usize> {
    let n = parse_integer(digits)?;
    usize::try_from(n).ok()
}

/// An integer as Redis's `string2ll` reads it: an optional `-`, then digits without a leading
/// zero (`0` alone is fine), fitting an `i64`; nothing else, not even spaces. This is what
/// Redis takes for counts, lengths and integer arguments (`INCRBY`, `EX`, ...).
pub fn parse_integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    match digits {
        [] => return None,
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut n: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    if negative {
        if n <= i64::MAX as u64 + 1 {
            Some((n as i64).wrapping_neg())
        } else {
            None
        }
    } else {
        i64::try_from(n).ok()
    }
}

/// The header line at the front of `buf` (`*<n>` or `$<len>`): its digits and the header's
/// length with its `\r\n`. A header longer than [`MAX_HEADER_LEN`] cannot hold a valid
/// number, so it is refused at once (Redis waits for [`MAX_INLINE_LEN`] bytes without a `\r`
/// first, then gives the same error).
fn header(buf: &[u8], too_big: ProtocolError) -> Result<(&[u8], usize), ParseError> {
    let window = &buf[..buf.len().min(MAX_HEADER_LEN + 2)];
    match find_crlf(window) {
        Some(eol) => Ok((&buf[1..eol], eol + 2)),
        None if buf.len() >= MAX_HEADER_LEN + 2 => Err(ParseError::Protocol(too_big)),
        None => Err(ParseError::Incomplete { needed: 1 }),
    }
}

fn parse_multibulk<'a>(
    buf: &'a [u8],
    limits: &Limits,
    progress: &mut Progress,
) -> Result<(Command<'a>, usize), ParseError> {
    let (count, first) = match plain_header(buf) {
        Some((n, len)) => (Some(n as i64), len),
        None => {
            let (digits, len) = header(buf, ProtocolError::TooBigMbulkCount)?;
            (parse_integer(digits), len)
        }
    };
    let argc = match count {
        Some(n) if n > MAX_ARGS as i64 => {
            return Err(ParseError::Protocol(ProtocolError::InvalidMultibulkLength));
        }
        // Redis reads `*0` and `*-1` as nothing to do.
        Some(n) if n <= 0 => {
            *progress = Progress::default();
            let command = Command {
                bytes: Bytes::Borrowed(&buf[..first]),
                layout: Layout::Multibulk { first },
                argc: 0,
                spans: [Span::default(); SPANS],
                known: 0,
            };
            return Ok((command, first));
        }
        Some(n) => n as usize,
        None => return Err(ParseError::Protocol(ProtocolError::InvalidMultibulkLength)),
    };
    // Resume after the arguments an earlier call checked (their places are not kept).
    let (mut at, mut args) = if progress.at > first && progress.args <= argc {
        (progress.at, progress.args)
    } else {
        (first, 0)
    };
    let mut spans = [Span::default(); SPANS];
    let mut known = 0;
    let keep = args == 0;
    while args < argc {
        *progress = Progress { at, args };
        let rest = &buf[at..];
        match rest.first() {
            None => return Err(ParseError::Incomplete { needed: 1 }),
            Some(b'$') => {}
            Some(&other) => {
                return Err(ParseError::Protocol(ProtocolError::ExpectedDollar(other)));
            }
        }
        let (len, header_len) = match plain_header(rest) {
            Some(plain) => plain,
            None => {
                let (digits, header_len) = header(rest, ProtocolError::TooBigBulkCount)?;
                match parse_integer(digits) {
                    Some(len) if len >= 0 => (len as u64, header_len),
                    _ => return Err(ParseError::Protocol(ProtocolError::InvalidBulkLength)),
                }
            }
        };
        // The argument and the two bytes after it (Redis skips them unread).
        let end = (at + header_len) as u64 + len + 2;
        if len > limits.max_bulk as u64 || end > limits.max_command as u64 {
            *progress = Progress::default();
            return Err(ParseError::TooLarge {
                end,
                args_left: argc - args - 1,
            });
        }
        let (len, end) = (len as usize, end as usize);
        if buf.len() < end {
            return Err(ParseError::Incomplete {
                needed: end - buf.len(),
            });
        }
        if keep
            && known < SPANS
            && known == args
            && let Some(span) = Span::new(at + header_len, len)
        {
            spans[known] = span;
            known += 1;
        }
        at = end;
        args += 1;
    }
    *progress = Progress::default();
    let command = Command {
        bytes: Bytes::Borrowed(&buf[..at]),
        layout: Layout::Multibulk { first },
        argc,
        spans,
        known: known as u8,
    };
    Ok((command, at))
}

/// The usual header at the front of `buf`: its type byte, 1 to 18 digits without a leading
/// zero (or `0` alone), `\r\n`; its number and its length. `None` for anything else (a sign,
/// more digits, another byte, too few bytes), which [`header`] and [`parse_integer`] then read
/// as before: a plain header reads the same both ways, only faster.
#[inline]
fn plain_header(buf: &[u8]) -> Option<(u64, usize)> {
    let digits = buf.get(1..)?;
    let mut n: u64 = 0;
    let mut i = 0;
    while let Some(&b) = digits.get(i) {
        if !b.is_ascii_digit() || i == 18 {
            break;
        }
        n = n * 10 + u64::from(b - b'0');
        i += 1;
    }
    let plain = i > 0 && (i == 1 || digits[0] != b'0') && digits.get(i..i + 2) == Some(b"\r\n");
    plain.then_some((n, 1 + i + 2))
}

fn parse_inline<'a>(
    buf: &'a [u8],
    progress: &mut Progress,
) -> Result<(Command<'a>, usize), ParseError> {
    let from = progress.at.min(buf.len());
    let Some(newline) = buf[from..].iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_INLINE_LEN {
            return Err(ParseError::Protocol(ProtocolError::TooBigInlineRequest));
        }
        *progress = Progress {
            at: buf.len(),
            args: 0,
        };
        return Err(ParseError::Incomplete { needed: 1 });
    };
    let newline = from + newline;
    if newline > MAX_INLINE_LEN {
        return Err(ParseError::Protocol(ProtocolError::TooBigInlineRequest));
    }
    *progress = Progress::default();
    let mut line = &buf[..newline];
    if let [rest @ .., b'\r'] = line {
        line = rest;
    }
    let len = newline + 1;
    if !line.iter().any(|&b| b == b'"' || b == b'\'') {
        let argc = line
            .split(|&b| is_space(b))
            .filter(|word| !word.is_empty())
            .count();
        let command = Command {
            bytes: Bytes::Borrowed(line),
            layout: Layout::Words,
            argc,
            spans: [Span::default(); SPANS],
            known: 0,
        };
        return Ok((command, len));
    }
    let (decoded, argc) =
        split_quoted(line).ok_or(ParseError::Protocol(ProtocolError::UnbalancedQuotes))?;
    let command = Command {
        bytes: Bytes::Decoded(decoded),
        layout: Layout::Multibulk { first: 0 },
        argc,
        spans: [Span::default(); SPANS],
        known: 0,
    };
    Ok((command, len))
}

/// Splits an inline line with quotes as Redis's `sdssplitargs` does, into the arguments'
/// multibulk form (no `*` header); `None` for unbalanced quotes.
fn split_quoted(line: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::with_capacity(line.len() + 16);
    let mut argc = 0;
    let mut arg = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        if i == line.len() {
            return Some((out, argc));
        }
        arg.clear();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            let c = line.get(i).copied();
            if in_double {
                match c {
                    // Unterminated quotes.
                    None => return None,
                    Some(b'\\')
                        if line.get(i + 1) == Some(&b'x')
                            && line.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
                            && line.get(i + 3).is_some_and(u8::is_ascii_hexdigit) =>
                    {
                        arg.push(hex(line[i + 2]) * 16 + hex(line[i + 3]));
                        i += 3;
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        i += 1;
                        arg.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        // A closing quote must be followed by a space or the end.
                        if line.get(i + 1).is_some_and(|&b| !is_space(b)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => arg.push(other),
                }
            } else if in_single {
                match c {
                    None => return None,
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        arg.push(b'\'');
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|&b| !is_space(b)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => arg.push(other),
                }
            } else {
                match c {
                    None => break,
                    Some(b) if is_space(b) => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(other) => arg.push(other),
                }
            }
            i += 1;
        }
        write_bulk(&mut out, &arg);
        argc += 1;
    }
}

fn hex(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit
            .to_ascii_lowercase()
            .wrapping_sub(b'a')
            .wrapping_add(10),
    }
}

/// Appends one argument as [`write_command`] writes each, `$<len>\r\n<bytes>\r\n`: for a
/// client that writes a command's header ([`write_header`]) and arguments itself.
pub fn write_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 26);
    super::reply::number_line(out, b'$', bytes.len() as u64);
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends a command's header, `*<argc>\r\n`; its `argc` arguments follow ([`write_bulk`]).
pub fn write_header(out: &mut Vec<u8>, argc: usize) {
    super::reply::number_line(out, b'*', argc as u64);
}

/// Appends a command in multibulk form, as clients send it: `*<n>\r\n` and one bulk string
/// per argument.
pub fn write_command<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    write_header(out, args.len());
    for arg in args {
        write_bulk(out, arg.as_ref());
    }
}

/// Bytes [`write_command`] appends for `args`.
pub fn command_len<A: AsRef<[u8]>>(args: &[A]) -> usize {
    let mut len = 1 + decimal_len(args.len()) + 2;
    for arg in args {
        let n = arg.as_ref().len();
        len += 1 + decimal_len(n) + 2 + n + 2;
    }
    len
}

fn decimal_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

/// The length of the argument at the front of `buf` (a `$` header, its bytes and the two after
/// them): how a refused command's remaining arguments are skipped ([`ParseError::TooLarge`]).
///
/// # Errors
/// [`ParseError::Incomplete`] until the header is all there; [`ParseError::Protocol`] for a
/// header that is not a bulk string's.
pub fn argument_len(buf: &[u8]) -> Result<u64, ParseError> {
    match buf.first() {
        None => return Err(ParseError::Incomplete { needed: 1 }),
        Some(b'$') => {}
        Some(&other) => return Err(ParseError::Protocol(ProtocolError::ExpectedDollar(other))),
    }
    let (len, header_len) = match plain_header(buf) {
        Some(plain) => plain,
        None => {
            let (digits, header_len) = header(buf, ProtocolError::TooBigBulkCount)?;
            match parse_integer(digits) {
                Some(len) if len >= 0 => (len as u64, header_len),
                _ => return Err(ParseError::Protocol(ProtocolError::InvalidBulkLength)),
            }
        }
    };
    Ok(header_len as u64 + len + 2)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn plain_headers_and_the_rest() {
        assert_eq!(plain_header(b"$0\r\n"), Some((0, 4)));
        assert_eq!(plain_header(b"*16\r\nx"), Some((16, 5)));
        assert_eq!(
            plain_header(b"$999999999999999999\r\n"),
            Some((999_999_999_999_999_999, 21))
        );
        // Left to `header` and `parse_integer`: a leading zero, a sign, 19 digits or more, a
        // line not ended yet or ended otherwise, no digits.
        for buf in [
            &b"$01\r\n"[..],
            b"$-1\r\n",
            b"*-0\r\n",
            b"$1000000000000000000\r\n",
            b"$12",
            b"$12\r",
            b"$12\rx\r\n",
            b"$1 \r\n",
            b"$\r\n",
            b"$",
        ] {
            assert_eq!(plain_header(buf), None, "{buf:?}");
        }
    }

    proptest! {
        /// What the fast path reads is what the general path reads.
        #[test]
        fn a_plain_header_reads_as_header_and_parse_integer_read_it(bytes in proptest::collection::vec(
            prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'-'), Just(b'0'), Just(b'9'), 0x30u8..0x3a, any::<u8>()],
            0..40,
        )) {
            let mut buf = b"$".to_vec();
            buf.extend_from_slice(&bytes);
            if let Some((n, len)) = plain_header(&buf) {
                let (digits, header_len) = header(&buf, ProtocolError::TooBigBulkCount).unwrap();
                prop_assert_eq!(header_len, len);
                prop_assert_eq!(parse_integer(digits), Some(n as i64));
            }
        }
    }
}
