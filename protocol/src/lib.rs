//! memcached wire formats, parsed in place.
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
//!
//! The text and meta protocols will sit beside it as `protocol::text` and `protocol::meta`; a
//! connection picks one by its first byte ([`binary::REQUEST_MAGIC`] means binary).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod binary;
