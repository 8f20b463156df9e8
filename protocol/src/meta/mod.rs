//! The memcached meta commands (protocol.txt, "Meta Commands"), parsed in place.
//!
//! ```text
//! <cm> <key> <datalen*> <flag1> <flag2> ...\r\n      request (datalen: ms only)
//! <RC> <datalen*> <flag1> <flag2> ...\r\n            reply   (datalen: VA only)
//! ```
//!
//! A meta line is a text-protocol line whose command is two bytes starting with `m`; it is
//! parsed by [`crate::text::Request::parse`] and returned as
//! [`crate::text::Request::Meta`]. Flags are single characters, some with a token argument
//! (`T30`, `Oopaque`); [`Flags`] holds them decoded, and [`Flags::tokens`] gives them back in
//! request order, which is the order the reply's flags follow. `ms` is followed by a data block
//! of `<datalen>` bytes and `\r\n` ([`crate::text::data_block`]).
//!
//! Every flag of memcached 1.6's protocol.txt is parsed (the set its `_meta_flag_preparse`
//! accepts, plus `E` and `x` from later 1.6 releases); which of them change what the server
//! does is up to the server. Errors follow proto_text.c: a duplicate or unknown flag, a bad
//! flag argument, an opaque over 32 bytes or 20 tokens or more are `CLIENT_ERROR`s, always
//! answered (`q` only silences nominal replies). A refused `ms` has its data block swallowed.

pub mod base64;
mod response;
#[cfg(test)]
mod tests;

pub use response::{DebugLine, ReplyLine, Status};

use crate::text::{
    ErrorReply, MAX_KEY_LEN, Rejected, Tokens, is_valid_key, parse_i32, parse_u32, parse_u64,
};

/// Longest opaque token (`O` and its argument), in bytes.
pub const MAX_OPAQUE_LEN: usize = 32;
/// memcached refuses a meta line of this many tokens or more (its terminal token included).
const MAX_META_TOKENS: usize = 20;

/// The meta commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `mg <key> <flags>*`: meta get.
    Get,
    /// `ms <key> <datalen> <flags>*`: meta set.
    Set,
    /// `md <key> <flags>*`: meta delete.
    Delete,
    /// `ma <key> <flags>*`: meta arithmetic.
    Arithmetic,
    /// `mn`: meta no-op, answered `MN`.
    Noop,
    /// `me <key> [b]`: meta debug.
    Debug,
}

/// How `ms` stores (its `M` flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetMode {
    /// `MS` (default): set.
    Set,
    /// `ME`: add.
    Add,
    /// `MR`: replace.
    Replace,
    /// `MA`: append.
    Append,
    /// `MP`: prepend.
    Prepend,
}

/// How `ma` changes the number (its `M` flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithmeticMode {
    /// `MI` or `M+` (default): increment.
    Incr,
    /// `MD` or `M-`: decrement.
    Decr,
}

/// A meta request line, borrowing its key and flags from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Which meta command.
    pub command: Command,
    /// The key as sent: base64 text when [`Flags::base64_key`] is set (decode it with
    /// [`Request::decode_key`]); empty for `mn`.
    pub key: &'a [u8],
    /// Length of the data block that follows an `ms` line (0 for the others).
    pub datalen: usize,
    /// The flags.
    pub flags: Flags<'a>,
}

/// The flags of a meta request, decoded; absent ones are `false`/`None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags<'a> {
    /// The flag tokens as sent, for replies in request order.
    tokens: &'a [u8],
    /// `b`: the key is base64-encoded binary.
    pub base64_key: bool,
    /// `c`: return the CAS.
    pub return_cas: bool,
    /// `f`: return the client flags.
    pub return_flags: bool,
    /// `h`: return whether the item had been fetched before (0 or 1).
    pub return_hit: bool,
    /// `k`: return the key.
    pub return_key: bool,
    /// `l`: return the seconds since the last access.
    pub return_last_access: bool,
    /// `s`: return the value's size.
    pub return_size: bool,
    /// `t`: return the remaining TTL in seconds (-1: none).
    pub return_ttl: bool,
    /// `v`: return the value.
    pub return_value: bool,
    /// `u`: do not bump the item (no LRU bump, no fetched mark).
    pub no_bump: bool,
    /// `q`: noreply semantics for nominal replies.
    pub quiet: bool,
    /// `I`: invalidate (mark stale) instead of deleting; with `ms` and `C`, allow an older CAS.
    pub invalidate: bool,
    /// `x`: `md` removes the value but keeps the item.
    pub remove_value: bool,
    /// `O<opaque>`: the whole token, echoed in the reply.
    pub opaque: Option<&'a [u8]>,
    /// `C<cas>`: compare this CAS.
    pub compare_cas: Option<u64>,
    /// `E<cas>`: use this as the item's new CAS.
    pub new_cas: Option<u64>,
    /// `F<flags>`: client flags to store.
    pub client_flags: Option<u32>,
    /// `N<ttl>`: vivify on miss with this TTL.
    pub vivify_ttl: Option<i64>,
    /// `R<ttl>`: win the recache token if the remaining TTL is below this.
    pub recache_ttl: Option<i64>,
    /// `T<ttl>`: the new TTL.
    pub ttl: Option<i64>,
    /// `M<mode>`: the mode character (see [`SetMode`] and [`ArithmeticMode`]).
    pub mode: Option<u8>,
    /// `D<delta>`: `ma`'s delta (default 1).
    pub delta: Option<u64>,
    /// `J<initial>`: `ma`'s initial value on vivify (default 0).
    pub initial: Option<u64>,
}

impl<'a> Flags<'a> {
    /// The flag tokens in request order (`v`, `T30`, `Oabc`, ...).
    pub fn tokens(&self) -> Tokens<'a> {
        Tokens::new(self.tokens)
    }

    /// `ms`'s mode, if the `M` flag names a valid one (default [`SetMode::Set`]).
    pub fn set_mode(&self) -> Option<SetMode> {
        match self.mode {
            None | Some(b'S') => Some(SetMode::Set),
            Some(b'E') => Some(SetMode::Add),
            Some(b'R') => Some(SetMode::Replace),
            Some(b'A') => Some(SetMode::Append),
            Some(b'P') => Some(SetMode::Prepend),
            Some(_) => None,
        }
    }

    /// `ma`'s mode, if the `M` flag names a valid one (default [`ArithmeticMode::Incr`]).
    pub fn arithmetic_mode(&self) -> Option<ArithmeticMode> {
        match self.mode {
            None | Some(b'I' | b'+') => Some(ArithmeticMode::Incr),
            Some(b'D' | b'-') => Some(ArithmeticMode::Decr),
            Some(_) => None,
        }
    }

    /// Decodes flag tokens as memcached's `_meta_flag_preparse` does: the first duplicate or
    /// unknown flag is refused at once; argument errors are collected and the last one's
    /// message is answered.
    fn parse(tokens: Tokens<'a>, key: &[u8]) -> Result<Flags<'a>, ErrorReply> {
        let mut flags = Flags {
            tokens: tokens.remainder(),
            ..Flags::default()
        };
        let mut seen = [false; 128];
        let mut failed: Option<ErrorReply> = None;
        for token in tokens {
            let flag = token[0];
            if flag >= 127 || seen[usize::from(flag)] {
                return Err(ErrorReply::DuplicateFlag);
            }
            seen[usize::from(flag)] = true;
            let arg = &token[1..];
            let error = match flag {
                b'b' => {
                    flags.base64_key = true;
                    base64::decoded_len(key)
                        .is_none()
                        .then_some(ErrorReply::KeyDecoding)
                }
                b'N' => parse_i32(arg)
                    .map(|ttl| flags.vivify_ttl = Some(ttl))
                    .err_as(ErrorReply::BadToken),
                b'T' => parse_i32(arg)
                    .map(|ttl| flags.ttl = Some(ttl))
                    .err_as(ErrorReply::BadToken),
                b'R' => parse_i32(arg)
                    .map(|ttl| flags.recache_ttl = Some(ttl))
                    .err_as(ErrorReply::BadToken),
                b'C' => parse_u64(arg)
                    .map(|cas| flags.compare_cas = Some(cas))
                    .err_as(ErrorReply::BadToken),
                b'E' => parse_u64(arg)
                    .map(|cas| flags.new_cas = Some(cas))
                    .err_as(ErrorReply::BadToken),
                // memcached keeps its previous message for a bad `F`.
                b'F' => parse_u32(arg)
                    .map(|value| flags.client_flags = Some(value))
                    .err_as(failed.unwrap_or(ErrorReply::BadFormat)),
                b'M' if token.len() == 2 => {
                    flags.mode = Some(token[1]);
                    None
                }
                b'M' => Some(ErrorReply::ModeTokenLength),
                b'J' => parse_u64(arg)
                    .map(|initial| flags.initial = Some(initial))
                    .err_as(ErrorReply::InvalidInitial),
                b'D' => parse_u64(arg)
                    .map(|delta| flags.delta = Some(delta))
                    .err_as(ErrorReply::InvalidDeltaValue),
                _ => {
                    let switch = match flag {
                        b'O' => {
                            flags.opaque = Some(token);
                            None
                        }
                        b'c' => Some(&mut flags.return_cas),
                        b'f' => Some(&mut flags.return_flags),
                        b'h' => Some(&mut flags.return_hit),
                        b'k' => Some(&mut flags.return_key),
                        b'l' => Some(&mut flags.return_last_access),
                        b's' => Some(&mut flags.return_size),
                        b't' => Some(&mut flags.return_ttl),
                        b'v' => Some(&mut flags.return_value),
                        b'u' => Some(&mut flags.no_bump),
                        b'q' => Some(&mut flags.quiet),
                        b'I' => Some(&mut flags.invalidate),
                        b'x' => Some(&mut flags.remove_value),
                        // Proxy hints, ignored by the server.
                        b'P' | b'L' => None,
                        _ => return Err(ErrorReply::InvalidFlag),
                    };
                    if let Some(switch) = switch {
                        *switch = true;
                    }
                    None
                }
            };
            if error.is_some() {
                failed = error;
            }
        }
        match failed {
            Some(reply) => Err(reply),
            None => Ok(flags),
        }
    }
}

impl<'a> Request<'a> {
    /// The key to look up: [`Request::key`] itself, or its base64 decoding (into `scratch`)
    /// when the `b` flag is set. Parsing checked the encoding, so this cannot fail.
    pub fn decode_key<'b>(&self, scratch: &'b mut [u8; MAX_KEY_LEN]) -> &'b [u8]
    where
        'a: 'b,
    {
        if !self.flags.base64_key {
            return self.key;
        }
        match base64::decode(self.key, scratch) {
            Some(len) => &scratch[..len],
            None => &[],
        }
    }

    /// Parses a meta line given its tokens (`t[0]` is the command, `m` + `command`) and the
    /// line's text; `overflow` says the line has more tokens than `t` holds.
    pub(crate) fn parse_tokens(
        command: u8,
        t: &[&'a [u8]],
        text: &'a [u8],
        overflow: bool,
    ) -> Result<Request<'a>, Rejected> {
        let command = match command {
            b'g' => Command::Get,
            b's' => Command::Set,
            b'd' => Command::Delete,
            b'a' => Command::Arithmetic,
            b'n' => Command::Noop,
            b'e' => Command::Debug,
            _ => return Err(Rejected::reply(ErrorReply::Error)),
        };
        let bad = Rejected::reply(ErrorReply::BadFormat);
        // memcached's count, its terminal token included.
        let ntokens = if overflow { 24 } else { t.len() + 1 };
        match command {
            Command::Noop => {
                return Ok(Request {
                    command,
                    key: &[],
                    datalen: 0,
                    flags: Flags::default(),
                });
            }
            Command::Debug => {
                let (Some(&key), true) = (t.get(1), ntokens >= 3) else {
                    return Err(bad);
                };
                let base64_key = t.get(2) == Some(&&b"b"[..]);
                let valid = if base64_key {
                    key.len() <= MAX_KEY_LEN && base64::decoded_len(key).is_some()
                } else {
                    is_valid_key(key)
                };
                if !valid {
                    return Err(bad);
                }
                return Ok(Request {
                    command,
                    key,
                    datalen: 0,
                    flags: Flags {
                        base64_key,
                        ..Flags::default()
                    },
                });
            }
            _ => {}
        }
        let Some(&key) = t.get(1) else {
            return Err(Rejected::reply(ErrorReply::Error));
        };
        // A base64 key is checked by its `b` flag; a plain one here.
        let b_flag = t.iter().skip(2).any(|token| token.starts_with(b"b"));
        if key.len() > MAX_KEY_LEN || (!b_flag && !is_valid_key(key)) {
            return Err(bad);
        }
        let mut rest = Tokens::new(text);
        rest.next();
        rest.next();
        let mut datalen = 0;
        if command == Command::Set {
            if ntokens == 3 {
                return Err(bad);
            }
            if ntokens > MAX_META_TOKENS {
                return Err(Rejected::reply(ErrorReply::FlagsTooLong));
            }
            let len = rest.next().and_then(parse_i32).ok_or(bad)?;
            if !(0..=i64::from(i32::MAX) - 2).contains(&len) {
                return Err(bad);
            }
            datalen = usize::try_from(len).map_err(|_| bad)?;
        } else if ntokens > MAX_META_TOKENS {
            let reply = if command == Command::Get {
                ErrorReply::GetFlagsTooLong
            } else {
                ErrorReply::FlagsTooLong
            };
            return Err(Rejected::reply(reply));
        }
        // From here on, a refused `ms` has its data block swallowed.
        let refuse = |reply: ErrorReply| Rejected::Reply {
            reply,
            noreply: false,
            swallow: if command == Command::Set {
                datalen + 2
            } else {
                0
            },
        };
        let flags = Flags::parse(rest, key).map_err(|reply| match command {
            Command::Delete | Command::Arithmetic => refuse(ErrorReply::InvalidOrDuplicateFlag),
            _ => refuse(reply),
        })?;
        if flags.opaque.is_some_and(|o| o.len() > MAX_OPAQUE_LEN) {
            return Err(refuse(ErrorReply::OpaqueTooLong));
        }
        match command {
            Command::Set if flags.set_mode().is_none() => {
                return Err(refuse(ErrorReply::InvalidSetMode));
            }
            Command::Arithmetic if flags.arithmetic_mode().is_none() => {
                return Err(refuse(ErrorReply::InvalidArithmeticMode));
            }
            _ => {}
        }
        Ok(Request {
            command,
            key,
            datalen,
            flags,
        })
    }
}

/// `Option<()>` from a parse, turned into the error to record when it failed.
trait ErrAs {
    fn err_as(self, reply: ErrorReply) -> Option<ErrorReply>;
}

impl ErrAs for Option<()> {
    fn err_as(self, reply: ErrorReply) -> Option<ErrorReply> {
        match self {
            Some(()) => None,
            None => Some(reply),
        }
    }
}
