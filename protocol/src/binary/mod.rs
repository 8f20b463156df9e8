//! The memcached binary protocol (the "Binary Protocol Revamped" spec, as served by memcached 1.6).
//!
//! Every frame is a 24-byte big-endian header (spec §2) followed by a body of `body_len` bytes:
//! `extras_len` bytes of extras, then `key_len` bytes of key, then the value.
//!
//! ```text
//!  0        1        2        3        4        5        6        7
//! +--------+--------+--------+--------+--------+--------+--------+--------+
//! | magic  | opcode |     key_len     | extras | dtype  | vbucket/status  |
//! +--------+--------+--------+--------+--------+--------+--------+--------+
//! |             body_len              |              opaque               |
//! +--------+--------+--------+--------+--------+--------+--------+--------+
//! |                                  cas                                  |
//! +--------+--------+--------+--------+--------+--------+--------+--------+
//! | extras (extras_len) | key (key_len) | value (body_len - key_len - extras_len)
//! ```
//!
//! Two levels, as for every wire format in this crate:
//! - views ([`RequestHeader`], [`ResponseHeader`]) wrap a buffer and read or write one field per
//!   accessor; `new_checked` makes them safe to use on bytes from the network;
//! - `Repr`s ([`RequestRepr`], [`ResponseRepr`]) are plain `Copy` values that borrow extras, key
//!   and value from the buffer they were parsed from; they `parse`, report `buffer_len` and `emit`.
//!
//! [`RequestRepr::parse`] reads the first frame of a stream and says what to do when it cannot:
//! read more ([`ParseError::Incomplete`]), answer UNKNOWN_COMMAND and skip the frame
//! ([`ParseError::UnknownOpcode`]), or answer EINVAL and close ([`ParseError::Invalid`]).
//! Every rejection is decided from the 24-byte header alone, so a bad frame is never waited for.

mod error;
mod extras;
mod header;
mod opcode;
mod repr;
#[cfg(test)]
mod tests;

pub use error::{Invalid, ParseError};
pub use extras::{CounterExtras, ExpirationExtras, FlagsExtras, StoreExtras, VerbosityExtras};
pub use header::{RequestHeader, ResponseHeader};
pub use opcode::{Opcode, Status};
pub use repr::{RequestRepr, ResponseRepr};

/// Length of the fixed frame header, requests and responses alike (spec §2).
pub const HEADER_LEN: usize = header::field::CAS.end;
/// Magic byte of a request, client to server (spec §3.1).
pub const REQUEST_MAGIC: u8 = 0x80;
/// Magic byte of a response, server to client (spec §3.1).
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Longest key memcached accepts; longer keys are rejected as [`Invalid::KeyTooLong`].
pub const MAX_KEY_LEN: usize = 250;
