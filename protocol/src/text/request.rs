//! Text-protocol requests: one command line, parsed in place (protocol.txt, "Commands").

use super::error::Rejected;
use super::line::{Line, Tokens, is_valid_key, parse_i32, parse_u32, parse_u64};
use super::{ErrorReply, ParseError};
use crate::meta;

/// Most tokens memcached looks at on one line (`MAX_TOKENS` less its terminal token); `get`
/// keys beyond it are read from the rest of the line.
const MAX_TOKENS: usize = 23;

/// A text-protocol request line, borrowing its key(s) from the receive buffer.
///
/// Storage commands carry the length of their data block; the block itself follows the line
/// and is taken with [`data_block`](super::data_block) once it has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get`/`gets`/`gat`/`gats <keys>*`.
    Get(Get<'a>),
    /// `set`/`add`/`replace`/`append`/`prepend`/`cas`.
    Store(Store<'a>),
    /// `delete <key> [0] [noreply]`.
    Delete {
        /// The key.
        key: &'a [u8],
        /// No reply wanted.
        noreply: bool,
    },
    /// `incr`/`decr <key> <value> [noreply]`.
    Arithmetic {
        /// Increment or decrement.
        command: ArithmeticCommand,
        /// The key.
        key: &'a [u8],
        /// The amount, a 64-bit unsigned decimal.
        delta: u64,
        /// No reply wanted.
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        /// The key.
        key: &'a [u8],
        /// The new expiration time, as the client sent it.
        exptime: i64,
        /// No reply wanted.
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`.
    FlushAll {
        /// Seconds (or a unix time) until the flush takes effect; 0 is now.
        delay: i64,
        /// No reply wanted.
        noreply: bool,
    },
    /// `version`.
    Version,
    /// `verbosity <level> [noreply]`.
    Verbosity {
        /// The requested level.
        level: u32,
        /// No reply wanted.
        noreply: bool,
    },
    /// `stats [group]`.
    Stats(StatsGroup),
    /// `quit`: close the connection.
    Quit,
    /// A meta command (`mg`, `ms`, `md`, `ma`, `mn`, `me`).
    Meta(meta::Request<'a>),
}

/// A retrieval request (protocol.txt, "Retrieval command").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Get<'a> {
    /// Which retrieval command.
    pub command: GetCommand,
    /// The new expiration time for `gat`/`gats` (0 for `get`/`gets`).
    pub exptime: i64,
    /// The keys, each already checked with [`is_valid_key`](super::is_valid_key); possibly
    /// none for `gat <exptime>`, which memcached answers with a bare `END`.
    pub keys: Keys<'a>,
}

/// The retrieval commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetCommand {
    /// `get`: values.
    Get,
    /// `gets`: values with their CAS.
    Gets,
    /// `gat`: values, after updating their expiration time.
    Gat,
    /// `gats`: `gat` with CAS.
    Gats,
}

impl GetCommand {
    /// Whether `VALUE` lines carry the CAS.
    pub const fn returns_cas(self) -> bool {
        matches!(self, GetCommand::Gets | GetCommand::Gats)
    }

    /// Whether the command updates the expiration time (`gat`, `gats`).
    pub const fn touches(self) -> bool {
        matches!(self, GetCommand::Gat | GetCommand::Gats)
    }
}

/// The keys of a retrieval request, read from the line as they are iterated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys<'a> {
    tokens: Tokens<'a>,
}

impl<'a> Keys<'a> {
    /// The keys in `text` (space-separated, as on a retrieval line after its command and
    /// exptime), trusted to be valid: for resuming a line whose keys [`Request::parse`] has
    /// already checked.
    pub const fn new_unchecked(text: &'a [u8]) -> Keys<'a> {
        Keys {
            tokens: Tokens::new(text),
        }
    }

    /// The part of the line not iterated yet (possibly starting with spaces); its length tells
    /// where in the line the next key starts.
    pub const fn remainder(&self) -> &'a [u8] {
        self.tokens.remainder()
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        self.tokens.next()
    }
}

/// A storage request line (protocol.txt, "Storage commands").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store<'a> {
    /// Which storage command.
    pub command: StoreCommand,
    /// The key.
    pub key: &'a [u8],
    /// The client's opaque flags (ignored by `append`/`prepend`).
    pub flags: u32,
    /// The expiration time as the client sent it (ignored by `append`/`prepend`).
    pub exptime: i64,
    /// Length of the data block that follows the line, `\r\n` not included.
    pub bytes: usize,
    /// The CAS to compare with (`cas` only; 0 otherwise).
    pub cas: u64,
    /// No reply wanted.
    pub noreply: bool,
}

/// The storage commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCommand {
    /// Store unconditionally.
    Set,
    /// Store if the key is not held.
    Add,
    /// Store if the key is held.
    Replace,
    /// Add the data after the held value.
    Append,
    /// Add the data before the held value.
    Prepend,
    /// Store if the item's CAS is still the one given.
    Cas,
}

/// `incr` or `decr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithmeticCommand {
    /// `incr`: add, wrapping at 2^64.
    Incr,
    /// `decr`: subtract, stopping at 0.
    Decr,
}

/// The `stats` groups memspin answers; any other group is answered `ERROR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsGroup {
    /// `stats`: the general list.
    General,
    /// `stats settings`.
    Settings,
    /// `stats items`.
    Items,
    /// `stats slabs`.
    Slabs,
}

impl<'a> Request<'a> {
    /// Parses the request line at the front of `buf` (see [`Line::parse`] for `scanned`).
    /// Returns the request and the line's length; a storage command's data block follows.
    ///
    /// # Errors
    ///
    /// [`ParseError::Incomplete`] before the newline, [`ParseError::Invalid`] for a line that
    /// is answered with an error, [`ParseError::Close`] for a line too long or an HTTP request.
    pub fn parse(buf: &'a [u8], scanned: usize) -> Result<(Request<'a>, usize), ParseError> {
        let line = Line::parse(buf, scanned)?;
        match Request::parse_line(line.text) {
            Ok(request) => Ok((request, line.len)),
            Err(Rejected::Reply {
                reply,
                noreply,
                swallow,
            }) => Err(ParseError::Invalid {
                reply,
                noreply,
                line_len: line.len,
                swallow,
            }),
            Err(Rejected::Close(close)) => Err(ParseError::Close(close)),
        }
    }

    /// Parses one line's text (without its newline), following memcached's
    /// `process_command_ascii`.
    fn parse_line(text: &'a [u8]) -> Result<Request<'a>, Rejected> {
        let mut all = Tokens::new(text);
        let mut tokens: [&[u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
        let mut n = 0;
        for token in all.by_ref().take(MAX_TOKENS) {
            tokens[n] = token;
            n += 1;
        }
        let overflow = all.next().is_some();
        let t = &tokens[..n];
        let error = Rejected::reply(ErrorReply::Error);
        let Some(&command) = t.first() else {
            return Err(error);
        };
        if command.len() < 2 {
            return Err(error);
        }
        if command[0] == b'm' && command.len() == 2 {
            return meta::Request::parse_tokens(command[1], t, text, overflow).map(Request::Meta);
        }
        // Token counts below include the command, as memcached's WANT_TOKENS less one.
        let count = if overflow { MAX_TOKENS + 1 } else { n };
        let noreply = t.last() == Some(&&b"noreply"[..]);
        match command {
            b"get" | b"gets" | b"gat" | b"gats" => parse_get(command, text),
            b"set" | b"add" | b"replace" | b"append" | b"prepend" => {
                want(count, 5, 6)?;
                parse_store(command, t, noreply)
            }
            b"cas" => {
                want(count, 6, 7)?;
                parse_store(command, t, noreply)
            }
            b"delete" => {
                if !(2..=4).contains(&count) {
                    return Err(error);
                }
                if count > 2 {
                    let hold_is_zero = t[2] == b"0";
                    let valid = (count == 3 && (hold_is_zero || noreply))
                        || (count == 4 && hold_is_zero && noreply);
                    if !valid {
                        return Err(Rejected::unless_noreply(ErrorReply::DeleteUsage, noreply));
                    }
                }
                let key = key(t[1], noreply)?;
                Ok(Request::Delete { key, noreply })
            }
            b"incr" | b"decr" => {
                want(count, 3, 4)?;
                let key = key(t[1], noreply)?;
                let delta = parse_u64(t[2])
                    .ok_or(Rejected::unless_noreply(ErrorReply::InvalidDelta, noreply))?;
                let command = if command == b"incr" {
                    ArithmeticCommand::Incr
                } else {
                    ArithmeticCommand::Decr
                };
                Ok(Request::Arithmetic {
                    command,
                    key,
                    delta,
                    noreply,
                })
            }
            b"touch" => {
                want(count, 3, 4)?;
                let key = key(t[1], noreply)?;
                let exptime = parse_i32(t[2]).ok_or(Rejected::unless_noreply(
                    ErrorReply::InvalidExptime,
                    noreply,
                ))?;
                Ok(Request::Touch {
                    key,
                    exptime,
                    noreply,
                })
            }
            b"flush_all" => {
                if !(1..=3).contains(&count) {
                    return Err(error);
                }
                let delay = if count != if noreply { 2 } else { 1 } {
                    parse_i32(t[1]).ok_or(Rejected::unless_noreply(
                        ErrorReply::InvalidExptime,
                        noreply,
                    ))?
                } else {
                    0
                };
                Ok(Request::FlushAll { delay, noreply })
            }
            b"version" => Ok(Request::Version),
            b"quit" => Ok(Request::Quit),
            b"verbosity" => {
                want(count, 2, 3)?;
                let level = parse_u32(t[1])
                    .ok_or(Rejected::unless_noreply(ErrorReply::BadFormat, noreply))?;
                Ok(Request::Verbosity { level, noreply })
            }
            b"stats" => match t.get(1).copied() {
                None => Ok(Request::Stats(StatsGroup::General)),
                Some(b"settings") => Ok(Request::Stats(StatsGroup::Settings)),
                Some(b"items") => Ok(Request::Stats(StatsGroup::Items)),
                Some(b"slabs") => Ok(Request::Stats(StatsGroup::Slabs)),
                Some(_) => Err(error),
            },
            // memcached's first-letter branches answer ERROR without looking further.
            _ if b"gsacidt".contains(&command[0]) => Err(error),
            _ if t.last().is_some_and(|last| last.starts_with(b"HTTP/")) => {
                Err(Rejected::Close(super::Close::Http))
            }
            _ => Err(error),
        }
    }
}

/// memcached's `WANT_TOKENS_OR`: exactly `a` or `b` tokens, else `ERROR`.
fn want(count: usize, a: usize, b: usize) -> Result<(), Rejected> {
    if count == a || count == b {
        Ok(())
    } else {
        Err(Rejected::reply(ErrorReply::Error))
    }
}

/// A key token, or `CLIENT_ERROR bad command line format`.
fn key(token: &[u8], noreply: bool) -> Result<&[u8], Rejected> {
    if is_valid_key(token) {
        Ok(token)
    } else {
        Err(Rejected::unless_noreply(ErrorReply::BadFormat, noreply))
    }
}

fn parse_get<'a>(command: &[u8], text: &'a [u8]) -> Result<Request<'a>, Rejected> {
    let command = match command {
        b"get" => GetCommand::Get,
        b"gets" => GetCommand::Gets,
        b"gat" => GetCommand::Gat,
        _ => GetCommand::Gats,
    };
    let mut tokens = Tokens::new(text);
    tokens.next();
    if tokens.clone().next().is_none() {
        return Err(Rejected::reply(ErrorReply::Error));
    }
    let mut exptime = 0;
    if command.touches() {
        let token = tokens.next().unwrap_or_default();
        exptime = parse_i32(token).ok_or(Rejected::reply(ErrorReply::InvalidExptime))?;
    }
    let keys = Keys { tokens };
    // memcached drops the hits already found and answers only the error when a later key is
    // bad; checking every key first gives the same reply without undoing anything.
    if !keys.clone().all(is_valid_key) {
        return Err(Rejected::reply(ErrorReply::BadFormat));
    }
    Ok(Request::Get(Get {
        command,
        exptime,
        keys,
    }))
}

fn parse_store<'a>(command: &[u8], t: &[&'a [u8]], noreply: bool) -> Result<Request<'a>, Rejected> {
    let command = match command {
        b"set" => StoreCommand::Set,
        b"add" => StoreCommand::Add,
        b"replace" => StoreCommand::Replace,
        b"append" => StoreCommand::Append,
        b"prepend" => StoreCommand::Prepend,
        _ => StoreCommand::Cas,
    };
    let bad = Rejected::unless_noreply(ErrorReply::BadFormat, noreply);
    let key = key(t[1], noreply)?;
    let flags = parse_u32(t[2]).ok_or(bad)?;
    let exptime = parse_i32(t[3]).ok_or(bad)?;
    let bytes = parse_i32(t[4]).ok_or(bad)?;
    let cas = if command == StoreCommand::Cas {
        parse_u64(t[5]).ok_or(bad)?
    } else {
        0
    };
    // memcached refuses a negative length, and one that leaves no room for the `\r\n`.
    if !(0..=i64::from(i32::MAX) - 2).contains(&bytes) {
        return Err(bad);
    }
    let bytes = usize::try_from(bytes).map_err(|_| bad)?;
    Ok(Request::Store(Store {
        command,
        key,
        flags,
        exptime,
        bytes,
        cas,
        noreply,
    }))
}
