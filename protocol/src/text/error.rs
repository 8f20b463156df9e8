//! What a text-protocol request line can be refused with, and what the connection does next.

use core::fmt;

/// An error line the server answers, with memcached's exact wording (proto_text.c).
///
/// Every variant is a whole line without its `\r\n`; [`ErrorReply::line`] gives the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorReply {
    /// `ERROR`: an unknown command, or a known one with the wrong number of tokens.
    Error,
    /// `CLIENT_ERROR bad command line format`: a bad key (over 250 bytes, or with control
    /// characters), a number that does not parse, a negative length.
    BadFormat,
    /// `CLIENT_ERROR bad data chunk`: the data block is not followed by `\r\n`.
    BadDataChunk,
    /// `CLIENT_ERROR invalid exptime argument` (`touch`, `gat`, `flush_all`).
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument` (`incr`, `decr`).
    InvalidDelta,
    /// `CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]`.
    DeleteUsage,
    /// `CLIENT_ERROR cannot increment or decrement non-numeric value`.
    NonNumeric,
    /// `CLIENT_ERROR line too long`: memspin's last word before closing a connection whose
    /// request line outgrew the limit (memcached closes without a word).
    LineTooLong,
    /// `SERVER_ERROR object too large for cache`.
    TooLarge,
    /// `SERVER_ERROR out of memory storing object`.
    OutOfMemory,
    /// `SERVER_ERROR out of memory` (`incr`/`decr`, `ma` could not store the new value).
    NoMemory,
    /// `CLIENT_ERROR invalid flag` (meta: an unknown flag).
    InvalidFlag,
    /// `CLIENT_ERROR duplicate flag` (meta: a flag given twice).
    DuplicateFlag,
    /// `CLIENT_ERROR invalid or duplicate flag` (`md`, `ma`: any flag error).
    InvalidOrDuplicateFlag,
    /// `CLIENT_ERROR bad token in command line format` (meta: a bad `N`, `T`, `R`, `C`, `E`).
    BadToken,
    /// `CLIENT_ERROR error decoding key` (meta: `b` with a key that is not base64).
    KeyDecoding,
    /// `CLIENT_ERROR incorrect length for M token`.
    ModeTokenLength,
    /// `CLIENT_ERROR invalid numeric initial value` (meta `J`).
    InvalidInitial,
    /// `CLIENT_ERROR invalid numeric delta value` (meta `D`).
    InvalidDeltaValue,
    /// `CLIENT_ERROR opaque token too long` (meta `O` over 32 bytes).
    OpaqueTooLong,
    /// `CLIENT_ERROR options flags are too long` (`mg` with 20 tokens or more).
    GetFlagsTooLong,
    /// `CLIENT_ERROR options flags too long` (`ms`, `md`, `ma` with 20 tokens or more).
    FlagsTooLong,
    /// `CLIENT_ERROR invalid mode for ms M token`.
    InvalidSetMode,
    /// `CLIENT_ERROR invalid mode for ma M token`.
    InvalidArithmeticMode,
    /// `CLIENT_ERROR usage: stats detail on|off|dump`.
    DetailUsage,
    /// `ERROR: shutdown not enabled` (`shutdown` without `-A`).
    ShutdownDisabled,
    /// `CLIENT_ERROR invalid shutdown mode`.
    ShutdownMode,
    /// `CLIENT_ERROR slab reassignment disabled`.
    SlabReassignDisabled,
    /// `BADCLASS invalid class id` (`lru_crawler metadump` of a class that does not exist).
    BadClass,
    /// `WATCHER_TOO_MANY log watcher limit reached`.
    WatcherTooMany,
    /// `SAME src and dst class are identical` (`slabs reassign`).
    SameClass,
    /// `BADCLASS invalid src or dst class id` (`slabs reassign`).
    BadReassignClass,
    /// `CLIENT_ERROR bad command line` (`stats cachedump` without its class and limit).
    BadCommandLine,
    /// `CLIENT_ERROR Illegal slab id` (`stats cachedump` of a class number past memcached's).
    IllegalSlabId,
    /// `BUSY currently processing reassign request` (`slabs reassign` while a page moves).
    ReassignBusy,
    /// `NOSPARE source class has no spare pages` (`slabs reassign` from a class of fewer than
    /// two pages).
    NoSpare,
    /// `CLIENT_ERROR lru crawler disabled` (`lru_crawler crawl|metadump` after `lru_crawler
    /// disable`).
    CrawlerDisabled,
    /// `BUSY currently processing crawler request` (`lru_crawler crawl|metadump` while a
    /// crawl runs).
    CrawlerBusy,
    /// `NOTSTARTED no items to crawl` (`lru_crawler crawl` of an empty class list).
    CrawlerNotStarted,
    /// `ERROR an unknown error happened` (`lru_crawler crawl hash`: only a metadump walks the
    /// hash table).
    CrawlerError,
    /// `ERROR failed to start lru crawler thread` (`lru_crawler enable` while it is enabled).
    CrawlerStartFailed,
    /// `CLIENT_ERROR sleep must be one second or less` (`lru_crawler sleep` over 1000000).
    CrawlerSleepTooLong,
    /// `MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m` (`cache_memlimit`).
    MemlimitTooSmall,
    /// `MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes` (`cache_memlimit` over
    /// 1000000000).
    MemlimitNotMegabytes,
}

impl ErrorReply {
    /// The reply line, without `\r\n`.
    pub const fn line(self) -> &'static str {
        match self {
            ErrorReply::Error => "ERROR",
            ErrorReply::BadFormat => "CLIENT_ERROR bad command line format",
            ErrorReply::BadDataChunk => "CLIENT_ERROR bad data chunk",
            ErrorReply::InvalidExptime => "CLIENT_ERROR invalid exptime argument",
            ErrorReply::InvalidDelta => "CLIENT_ERROR invalid numeric delta argument",
            ErrorReply::DeleteUsage => {
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
            }
            ErrorReply::NonNumeric => {
                "CLIENT_ERROR cannot increment or decrement non-numeric value"
            }
            ErrorReply::LineTooLong => "CLIENT_ERROR line too long",
            ErrorReply::TooLarge => "SERVER_ERROR object too large for cache",
            ErrorReply::OutOfMemory => "SERVER_ERROR out of memory storing object",
            ErrorReply::NoMemory => "SERVER_ERROR out of memory",
            ErrorReply::InvalidFlag => "CLIENT_ERROR invalid flag",
            ErrorReply::DuplicateFlag => "CLIENT_ERROR duplicate flag",
            ErrorReply::InvalidOrDuplicateFlag => "CLIENT_ERROR invalid or duplicate flag",
            ErrorReply::BadToken => "CLIENT_ERROR bad token in command line format",
            ErrorReply::KeyDecoding => "CLIENT_ERROR error decoding key",
            ErrorReply::ModeTokenLength => "CLIENT_ERROR incorrect length for M token",
            ErrorReply::InvalidInitial => "CLIENT_ERROR invalid numeric initial value",
            ErrorReply::InvalidDeltaValue => "CLIENT_ERROR invalid numeric delta value",
            ErrorReply::OpaqueTooLong => "CLIENT_ERROR opaque token too long",
            ErrorReply::GetFlagsTooLong => "CLIENT_ERROR options flags are too long",
            ErrorReply::FlagsTooLong => "CLIENT_ERROR options flags too long",
            ErrorReply::InvalidSetMode => "CLIENT_ERROR invalid mode for ms M token",
            ErrorReply::InvalidArithmeticMode => "CLIENT_ERROR invalid mode for ma M token",
            ErrorReply::DetailUsage => "CLIENT_ERROR usage: stats detail on|off|dump",
            ErrorReply::ShutdownDisabled => "ERROR: shutdown not enabled",
            ErrorReply::ShutdownMode => "CLIENT_ERROR invalid shutdown mode",
            ErrorReply::SlabReassignDisabled => "CLIENT_ERROR slab reassignment disabled",
            ErrorReply::BadClass => "BADCLASS invalid class id",
            ErrorReply::WatcherTooMany => "WATCHER_TOO_MANY log watcher limit reached",
            ErrorReply::SameClass => "SAME src and dst class are identical",
            ErrorReply::BadReassignClass => "BADCLASS invalid src or dst class id",
            ErrorReply::BadCommandLine => "CLIENT_ERROR bad command line",
            ErrorReply::IllegalSlabId => "CLIENT_ERROR Illegal slab id",
            ErrorReply::ReassignBusy => "BUSY currently processing reassign request",
            ErrorReply::NoSpare => "NOSPARE source class has no spare pages",
            ErrorReply::CrawlerDisabled => "CLIENT_ERROR lru crawler disabled",
            ErrorReply::CrawlerBusy => "BUSY currently processing crawler request",
            ErrorReply::CrawlerNotStarted => "NOTSTARTED no items to crawl",
            ErrorReply::CrawlerError => "ERROR an unknown error happened",
            ErrorReply::CrawlerStartFailed => "ERROR failed to start lru crawler thread",
            ErrorReply::CrawlerSleepTooLong => "CLIENT_ERROR sleep must be one second or less",
            ErrorReply::MemlimitTooSmall => {
                "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m"
            }
            ErrorReply::MemlimitNotMegabytes => {
                "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes"
            }
        }
    }

    /// Appends the reply line and its `\r\n` to `out`.
    pub fn emit_into(self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.line().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// Why a connection is closed instead of answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// More than [`MAX_LINE_LEN`](super::MAX_LINE_LEN) bytes before the newline, or without
    /// one yet (for a `get`/`gets` line, more than
    /// [`MAX_MULTIGET_LINE_LEN`](super::MAX_MULTIGET_LINE_LEN)): the peer is not speaking this
    /// protocol. Answered [`ErrorReply::LineTooLong`], then closed.
    LineTooLong,
    /// An unknown command whose last token starts with `HTTP/`: a web client. Closed without a
    /// reply, as memcached does.
    Http,
}

/// Outcome of a failed parse: read more, answer an error and go on, or close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// No complete request line yet; not a wire error.
    Incomplete {
        /// Read at least this many more bytes. A line's length is unknown until its newline,
        /// so this is the room left before the line limit (at most 16 KiB): a hint to read
        /// everything that has arrived, not an exact count.
        needed: usize,
        /// Bytes at the start of the buffer known to hold no newline: pass it back on the next
        /// call so they are not searched again.
        scanned: usize,
    },
    /// A complete line that is not a valid request: answer `reply` unless `noreply`, drop
    /// `line_len` bytes, then skip `swallow` more (the data block of a refused `ms`), and keep
    /// the connection.
    Invalid {
        /// The error line to answer.
        reply: ErrorReply,
        /// The line asked for no reply (memcached suppresses even errors then).
        noreply: bool,
        /// Bytes of the request line, newline included.
        line_len: usize,
        /// Bytes after the line to discard unread (`<datalen>` + 2, or 0).
        swallow: usize,
    },
    /// Close the connection.
    Close(Close),
}

impl fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.line())
    }
}

impl fmt::Display for Close {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Close::LineTooLong => f.write_str("request line too long"),
            Close::Http => f.write_str("HTTP request on the memcached port"),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseError::Incomplete { needed, .. } => {
                write!(f, "incomplete request line: at least {needed} more bytes")
            }
            ParseError::Invalid { reply, .. } => write!(f, "invalid request: {reply}"),
            ParseError::Close(close) => write!(f, "closing: {close}"),
        }
    }
}

impl std::error::Error for ErrorReply {}
impl std::error::Error for Close {}
impl std::error::Error for ParseError {}

/// A request line refused while parsing its tokens (the caller knows the line's length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// Answer (unless `noreply`), then skip `swallow` bytes after the line.
    Reply {
        reply: ErrorReply,
        noreply: bool,
        swallow: usize,
    },
    /// Close the connection.
    Close(Close),
}

impl Rejected {
    /// An error that is always answered, with nothing to swallow.
    pub(crate) const fn reply(reply: ErrorReply) -> Rejected {
        Rejected::Reply {
            reply,
            noreply: false,
            swallow: 0,
        }
    }

    /// An error answered unless the line said `noreply`.
    pub(crate) const fn unless_noreply(reply: ErrorReply, noreply: bool) -> Rejected {
        Rejected::Reply {
            reply,
            noreply,
            swallow: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_memcached_wording() {
        assert_eq!(ErrorReply::Error.line(), "ERROR");
        assert_eq!(
            ErrorReply::BadFormat.to_string(),
            "CLIENT_ERROR bad command line format"
        );
        assert_eq!(
            ErrorReply::TooLarge.line(),
            "SERVER_ERROR object too large for cache"
        );
        let mut out = Vec::new();
        ErrorReply::BadDataChunk.emit_into(&mut out);
        assert_eq!(out, b"CLIENT_ERROR bad data chunk\r\n");
    }

    #[test]
    fn every_line_is_an_error_line() {
        use ErrorReply::*;
        let all = [
            Error,
            BadFormat,
            BadDataChunk,
            InvalidExptime,
            InvalidDelta,
            DeleteUsage,
            NonNumeric,
            LineTooLong,
            TooLarge,
            OutOfMemory,
            NoMemory,
            InvalidFlag,
            DuplicateFlag,
            InvalidOrDuplicateFlag,
            BadToken,
            KeyDecoding,
            ModeTokenLength,
            InvalidInitial,
            InvalidDeltaValue,
            OpaqueTooLong,
            GetFlagsTooLong,
            FlagsTooLong,
            InvalidSetMode,
            InvalidArithmeticMode,
            DetailUsage,
            ShutdownDisabled,
            ShutdownMode,
            SlabReassignDisabled,
            BadClass,
            WatcherTooMany,
            SameClass,
            BadReassignClass,
            BadCommandLine,
            IllegalSlabId,
            ReassignBusy,
            NoSpare,
            CrawlerDisabled,
            CrawlerBusy,
            CrawlerNotStarted,
            CrawlerError,
            CrawlerStartFailed,
            CrawlerSleepTooLong,
            MemlimitTooSmall,
            MemlimitNotMegabytes,
        ];
        for (i, a) in all.iter().enumerate() {
            let line = a.line();
            // memcached's admin commands answer with their own words.
            let admin = [
                "ERROR: ",
                "ERROR ",
                "BADCLASS ",
                "SAME ",
                "WATCHER_TOO_MANY ",
                "BUSY ",
                "NOSPARE ",
                "NOTSTARTED ",
                "MEMLIMIT_",
            ];
            assert!(
                line == "ERROR"
                    || line.starts_with("CLIENT_ERROR ")
                    || line.starts_with("SERVER_ERROR ")
                    || admin.iter().any(|p| line.starts_with(p)),
                "{line}"
            );
            assert!(!line.contains('\r') && !line.contains('\n'));
            for b in &all[i + 1..] {
                assert_ne!(line, b.line());
            }
        }
    }

    #[test]
    fn errors_are_small_and_copy() {
        fn is_error<E: std::error::Error + Copy + Send + Sync + 'static>() {}
        is_error::<ParseError>();
        is_error::<ErrorReply>();
        is_error::<Close>();
        assert_eq!(size_of::<ErrorReply>(), 1);
        assert!(size_of::<ParseError>() <= 24);
        assert_eq!(
            ParseError::Close(Close::Http).to_string(),
            "closing: HTTP request on the memcached port"
        );
    }
}
