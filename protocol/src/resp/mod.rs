//! RESP, the Redis serialization protocol: RESP2, and RESP3 once a client asks for it with
//! `HELLO 3` (redis.io, "Redis serialization protocol specification").
//!
//! A client sends commands: an array of bulk strings, or an inline line (what a person types,
//! and what `redis-benchmark`'s inline tests send). A server answers each with one value.
//!
//! ```text
//! rx buffer: "*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n"
//!             └──── Command::parse ─────┘└ parse ┘   (inline)
//! tx buffer: Reply::Bulk(b"v").emit_into(version, out) → "$1\r\nv\r\n"
//! client:    Frame::parse / value_len read what a server wrote, token by token
//! ```
//!
//! Nothing is copied while parsing: a [`Command`] borrows its arguments from the buffer (only
//! an inline line with quotes is decoded into a buffer of its own), and a long command that
//! arrives in pieces is parsed once ([`Progress`]). Nothing is allocated for a length a client
//! only announces.
//!
//! Malformed input is answered as Redis 7 answers it (networking.c): `-ERR Protocol error:
//! ...` ([`ProtocolError`]), then the connection closes. Where memspin differs:
//! - a bulk string over [`Limits::max_bulk`] (the server's item limit, not Redis's 512 MiB), or
//!   one that would take the command past [`Limits::max_command`], refuses the command, not
//!   the connection ([`ParseError::TooLarge`]: the server answers an error and skips the
//!   command's bytes as they arrive);
//! - a `*` or `$` header longer than [`MAX_HEADER_LEN`] is refused at once (Redis waits for
//!   64 KiB without a `\r` and gives the same error);
//! - as in Redis, the two bytes after a bulk string are skipped without being looked at.

mod frame;
mod reply;
mod request;
#[cfg(test)]
mod tests;

pub use frame::{Frame, FrameError, MAX_LINE_LEN, value_len};
pub use reply::{Reply, Version};
pub use request::{
    Args, Command, Limits, MAX_ARGS, MAX_HEADER_LEN, MAX_INLINE_LEN, ParseError, Parsed, Progress,
    ProtocolError, argument_len, command_len, parse_integer, write_bulk, write_command,
    write_header,
};
