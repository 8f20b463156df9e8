//! The memcached text protocol (protocol.txt, "Commands"), parsed in place.
//!
//! A request is a line of space-separated tokens ending in `\r\n` (a bare `\n` is accepted,
//! as memcached does); storage commands are followed by a data block of the length the line
//! gives, and `\r\n`.
//!
//! ```text
//! rx buffer: "set k 0 0 5\r\nhello\r\nget k\r\n"
//!             └── Request::parse ──┘└ data_block ┘└ Request::parse ┘
//! ```
//!
//! Nothing is copied: [`Request::parse`] borrows keys from the buffer and returns the line's
//! length; a storage command's data is taken with [`data_block`] once `<bytes>` + 2 bytes have
//! arrived, so the caller can first refuse a value that can never fit, without buffering it.
//! Meta commands (`mg`, `ms`, `md`, `ma`, `mn`, `me`) share the line format and are returned as
//! [`Request::Meta`] (see [`crate::meta`]).
//!
//! Errors follow memcached 1.6's proto_text.c: a wrong token count is `ERROR`, a bad argument
//! is `CLIENT_ERROR <reason>` (see [`ErrorReply`]), and `noreply` silences errors too. Where
//! memspin differs it is stricter:
//! - keys with control characters are refused (`CLIENT_ERROR bad command line format`), as
//!   protocol.txt asks; memcached only checks the length;
//! - numbers must fit their field (flags in 32 bits, exptime and lengths in a signed 32-bit);
//!   memcached truncates larger ones;
//! - a line that outgrows the limit is answered `CLIENT_ERROR line too long` before the
//!   connection closes; memcached closes without a word;
//! - the limit holds for every line, however its bytes arrive; memcached checks it only while
//!   the newline is missing, so there a long line read in one piece is served.

mod error;
mod line;
mod request;
mod response;
#[cfg(test)]
mod tests;

pub(crate) use error::Rejected;
pub use error::{Close, ErrorReply, ParseError};
pub use line::{
    DataError, Line, Tokens, data_block, is_valid_key, parse_i32, parse_u32, parse_u64, push_i64,
    push_u64,
};
pub use request::{
    ArithmeticCommand, Classes, CrawlerCommand, Detail, Get, GetCommand, Keys,
    MAX_CRAWLER_SLEEP_US, MAX_MEMLIMIT_MB, MIN_MEMLIMIT_MB, Request, ShutdownMode, SlabsCommand,
    StatsGroup, Store, StoreCommand, WatchEvents,
};
pub use response::Response;

/// Longest key, in bytes (protocol.txt: "the key must not include control characters or
/// whitespace, and can be up to 250 characters in size").
pub const MAX_KEY_LEN: usize = 250;

/// A connection that sends a line longer than this, newline excluded, is closed (memcached's
/// `try_read_command_ascii` limit), unless the line is a `get`/`gets`.
pub const MAX_LINE_LEN: usize = 2048;

/// Longest `get`/`gets` line. memcached lets multi-key reads grow without bound (it moves the
/// line into a growing buffer); memspin buffers the line whole before its first key runs, so it
/// keeps a limit: 1 MiB, about 4,000 keys of 250 bytes or 24,000 of 40, more than client
/// libraries put on one line, and no more than a value of the default `-I` already takes. What
/// the line asks for does not matter: a server answers it key by key as the client reads, so
/// its output stays bounded however many keys (or copies of one key) the line names. Beyond
/// the limit the connection is answered `CLIENT_ERROR line too long` and closed.
pub const MAX_MULTIGET_LINE_LEN: usize = 1 << 20;
