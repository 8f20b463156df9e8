//! Text-protocol replies (protocol.txt): status lines, `VALUE` lines, `STAT` lines.

use super::ErrorReply;
use super::line::push_u64;

/// One reply line (and, for [`Response::Value`], its data block), ready to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response<'a> {
    /// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`, one per hit of a retrieval.
    Value {
        /// The key.
        key: &'a [u8],
        /// The item's client flags.
        flags: u32,
        /// The value.
        value: &'a [u8],
        /// The CAS, for `gets`/`gats`.
        cas: Option<u64>,
    },
    /// `END`: the end of a retrieval or `stats` reply.
    End,
    /// `STORED`.
    Stored,
    /// `NOT_STORED`: the command's condition failed.
    NotStored,
    /// `EXISTS`: the CAS did not match.
    Exists,
    /// `NOT_FOUND`.
    NotFound,
    /// `DELETED`.
    Deleted,
    /// `TOUCHED`.
    Touched,
    /// `OK` (`flush_all`, `verbosity`).
    Ok,
    /// `RESET` (`stats reset`).
    Reset,
    /// The new value of `incr`/`decr`.
    Number(u64),
    /// `VERSION <version>`.
    Version(&'a str),
    /// `STAT <name> <value>`.
    Stat {
        /// The statistic's name.
        name: &'a str,
        /// Its value, as text.
        value: &'a str,
    },
    /// An error line.
    Error(ErrorReply),
}

impl Response<'_> {
    /// Bytes [`emit_into`](Self::emit_into) appends.
    pub fn buffer_len(&self) -> usize {
        match *self {
            Response::Value {
                key,
                flags,
                value,
                cas,
            } => {
                "VALUE ".len()
                    + key.len()
                    + 1
                    + decimal_len(u64::from(flags))
                    + 1
                    + decimal_len(value.len() as u64)
                    + cas.map_or(0, |cas| 1 + decimal_len(cas))
                    + 2
                    + value.len()
                    + 2
            }
            Response::Number(n) => decimal_len(n) + 2,
            Response::Version(version) => "VERSION ".len() + version.len() + 2,
            Response::Stat { name, value } => "STAT ".len() + name.len() + 1 + value.len() + 2,
            Response::Error(error) => error.line().len() + 2,
            fixed => fixed.fixed_line().len() + 2,
        }
    }

    /// The line of a reply that has no fields.
    fn fixed_line(&self) -> &'static str {
        match self {
            Response::End => "END",
            Response::Stored => "STORED",
            Response::NotStored => "NOT_STORED",
            Response::Exists => "EXISTS",
            Response::NotFound => "NOT_FOUND",
            Response::Deleted => "DELETED",
            Response::Touched => "TOUCHED",
            Response::Ok => "OK",
            Response::Reset => "RESET",
            _ => "",
        }
    }

    /// Appends the reply to `out`.
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        match *self {
            Response::Value {
                key,
                flags,
                value,
                cas,
            } => {
                out.reserve(self.buffer_len());
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, u64::from(flags));
                out.push(b' ');
                push_u64(out, value.len() as u64);
                if let Some(cas) = cas {
                    out.push(b' ');
                    push_u64(out, cas);
                }
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
            }
            Response::Number(n) => push_u64(out, n),
            Response::Version(version) => {
                out.extend_from_slice(b"VERSION ");
                out.extend_from_slice(version.as_bytes());
            }
            Response::Stat { name, value } => {
                out.extend_from_slice(b"STAT ");
                out.extend_from_slice(name.as_bytes());
                out.push(b' ');
                out.extend_from_slice(value.as_bytes());
            }
            Response::Error(error) => out.extend_from_slice(error.line().as_bytes()),
            fixed => out.extend_from_slice(fixed.fixed_line().as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Digits of `n` in decimal.
fn decimal_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}
