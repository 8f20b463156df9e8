//! Client side of the memcached protocols (and Redis's RESP): request encoders and incremental
//! reply decoders.
//!
//! ```text
//! Pick → Codec::encode_* → connection write buffer ─▶ server
//! server ─▶ read buffer → Codec::decode(expect oldest in-flight) → Reply + bytes consumed
//! ```
//!
//! Decoders never panic on what the server sends: a short buffer is
//! [`DecodeError::Incomplete`], anything else unexpected is [`DecodeError::Invalid`].

pub mod binary;
pub mod resp;
pub mod text;

use std::fmt;

use serde::Serialize;

use crate::workload::Command;

/// Which wire protocol a run speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// memcached binary protocol (magic 0x80/0x81), via the workspace `protocol` crate.
    Binary,
    /// memcached text (ASCII) protocol.
    Text,
    /// Redis's RESP (RESP2): `GET` and `SET` as arrays of bulk strings.
    Resp,
}

impl Protocol {
    /// The CLI spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Binary => "binary",
            Protocol::Text => "text",
            Protocol::Resp => "resp",
        }
    }
}

/// What the decoder needs to know about the oldest request in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect<'k> {
    /// The command sent.
    pub command: Command,
    /// The key sent.
    pub key: &'k [u8],
    /// The binary protocol's opaque (ignored by the text protocol).
    pub opaque: u32,
}

/// A decoded reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// GET found a value.
    Hit {
        /// The value bytes, borrowed from the read buffer.
        value: &'a [u8],
    },
    /// GET found nothing.
    Miss,
    /// SET stored the value.
    Stored,
    /// SET was refused without an error (NOT_STORED, EXISTS, NOT_FOUND).
    NotStored,
    /// The server answered with an error (ERROR, CLIENT_ERROR, SERVER_ERROR, error statuses).
    ServerError,
}

/// Why a reply could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Not all of the reply is here yet; read more. Not a wire error.
    Incomplete,
    /// The bytes are not a valid reply to the request in flight: close the connection.
    Invalid(InvalidReply),
}

/// The ways a reply can be wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidReply {
    /// A text line that is not a reply to the command sent, or too long.
    Line,
    /// A length field that cannot be right.
    Length,
    /// A value for a different key than the one asked for.
    Key,
    /// A binary frame that fails the header checks (magic, lengths).
    Frame,
    /// A binary reply to a different opcode than the one sent.
    Opcode,
    /// A binary reply whose opaque is not the one sent (replies out of order).
    Opaque,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Incomplete => f.write_str("incomplete reply"),
            DecodeError::Invalid(why) => write!(
                f,
                "invalid reply: {}",
                match why {
                    InvalidReply::Line => "unexpected line",
                    InvalidReply::Length => "bad length",
                    InvalidReply::Key => "value for another key",
                    InvalidReply::Frame => "malformed binary frame",
                    InvalidReply::Opcode => "wrong opcode",
                    InvalidReply::Opaque => "wrong opaque",
                }
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Encoder and decoder for one protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codec {
    protocol: Protocol,
    max_value: usize,
}

impl Codec {
    /// A codec accepting values up to `max_value` bytes in replies.
    pub fn new(protocol: Protocol, max_value: usize) -> Codec {
        Codec {
            protocol,
            max_value,
        }
    }

    /// The protocol spoken.
    pub fn protocol(self) -> Protocol {
        self.protocol
    }

    /// Appends a GET of `key` to `out`.
    #[inline]
    pub fn encode_get(self, key: &[u8], opaque: u32, out: &mut Vec<u8>) {
        match self.protocol {
            Protocol::Binary => binary::encode_get(key, opaque, out),
            Protocol::Text => text::encode_get(key, out),
            Protocol::Resp => resp::encode_get(key, out),
        }
    }

    /// Appends a SET of `key` to `value` (flags 0, no expiry) to `out`.
    #[inline]
    pub fn encode_set(self, key: &[u8], value: &[u8], opaque: u32, out: &mut Vec<u8>) {
        match self.protocol {
            Protocol::Binary => binary::encode_set(key, value, opaque, out),
            Protocol::Text => text::encode_set(key, value, out),
            Protocol::Resp => resp::encode_set(key, value, out),
        }
    }

    /// Decodes the reply to `expect` at the start of `buf`; returns it with the bytes it used.
    ///
    /// # Errors
    /// [`DecodeError::Incomplete`] until the whole reply is in `buf`; [`DecodeError::Invalid`]
    /// when it is not a reply to `expect`.
    #[inline]
    pub fn decode<'a>(
        self,
        buf: &'a [u8],
        expect: &Expect<'_>,
    ) -> Result<(Reply<'a>, usize), DecodeError> {
        match self.protocol {
            Protocol::Binary => binary::decode(buf, expect, self.max_value),
            Protocol::Text => text::decode(buf, expect, self.max_value),
            Protocol::Resp => resp::decode(buf, expect, self.max_value),
        }
    }
}

/// Test helper: feeds `stream` to `codec` `step` bytes at a time, as a socket would deliver it,
/// and decodes one reply per entry of `expects` in order.
#[cfg(test)]
pub(crate) fn decode_fragmented(
    codec: Codec,
    stream: &[u8],
    step: usize,
    expects: &[Expect<'_>],
) -> Result<Vec<OwnedReply>, DecodeError> {
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut out = Vec::new();
    let mut next = 0;
    while next < expects.len() {
        match codec.decode(&buf, &expects[next]) {
            Ok((reply, used)) => {
                out.push(OwnedReply::from(reply));
                buf.drain(..used);
                next += 1;
            }
            Err(DecodeError::Incomplete) => {
                assert!(
                    fed < stream.len(),
                    "stream ended with replies still expected"
                );
                let end = (fed + step).min(stream.len());
                buf.extend_from_slice(&stream[fed..end]);
                fed = end;
            }
            Err(e) => return Err(e),
        }
    }
    assert!(
        buf.is_empty() && fed == stream.len(),
        "trailing bytes left undecoded"
    );
    Ok(out)
}

/// Test helper: a [`Reply`] that owns its value.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnedReply {
    Hit(Vec<u8>),
    Miss,
    Stored,
    NotStored,
    ServerError,
}

#[cfg(test)]
impl From<Reply<'_>> for OwnedReply {
    fn from(r: Reply<'_>) -> Self {
        match r {
            Reply::Hit { value } => OwnedReply::Hit(value.to_vec()),
            Reply::Miss => OwnedReply::Miss,
            Reply::Stored => OwnedReply::Stored,
            Reply::NotStored => OwnedReply::NotStored,
            Reply::ServerError => OwnedReply::ServerError,
        }
    }
}
