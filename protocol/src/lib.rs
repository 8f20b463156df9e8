//! memcached's wire formats, and Redis's RESP, parsed in place.
//!
//! This crate owns the bytes on the wire and nothing else: it imports no workspace crate, does no
//! I/O and never allocates while parsing. It turns a slice of a connection's receive buffer into
//! borrowed values and writes replies into a caller's buffer.
//!
//! ```text
//! NIC queue → netstack (core n) → socket rx buffer
//!   → protocol::binary::RequestRepr::parse(&rx[..])  (borrows key/value from rx, no copy)
//!   → server: match on opcode → store shard (copies key + value once, on insert)
//!   → protocol::binary::ResponseRepr::emit(&mut tx[..])  → socket tx buffer → netstack
//! ```
//!
//! Modules:
//! - [`binary`]: the memcached binary protocol: a zero-copy header view per direction
//!   ([`binary::RequestHeader`], [`binary::ResponseHeader`]), the request/response `Repr`s with
//!   per-opcode shape checks, [`binary::Opcode`]/[`binary::Status`] and typed extras.
//! - [`text`]: the text protocol: request lines parsed in place ([`text::Request`]), data
//!   blocks, error lines as memcached words them, replies ([`text::Response`]).
//! - [`meta`]: the meta commands (`mg`, `ms`, `md`, `ma`, `mn`, `me`), which share the text
//!   line format: decoded flags ([`meta::Flags`]) and reply lines ([`meta::ReplyLine`]).
//! - [`resp`]: Redis's RESP2 and RESP3: commands (multibulk and inline,
//!   [`resp::Command`]), replies in either version ([`resp::Reply`]), and reading replies back
//!   as a client does ([`resp::Frame`]).
//!
//! A memcached connection picks binary or text (meta included) by its first byte
//! ([`binary::REQUEST_MAGIC`] means binary); RESP is served on a port of its own.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod binary;
pub mod meta;
pub mod resp;
pub mod text;
