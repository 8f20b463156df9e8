//! Client side of the wire protocols: request encoders and incremental reply decoders.
//!
//! ```text
//! Pick → Request → Codec::encode → connection write buffer ─▶ server
//! server ─▶ read buffer → Codec::decode(expect oldest in-flight) → Reply + bytes consumed
//! ```
//!
//! Every protocol encodes the same [`Request`] (GET, SET with a TTL, DELETE, multi-key GET)
//! and decodes into the same [`Reply`], so the worker, the histograms and `--verify` do not
//! know which protocol runs; a protocol is a module with `encode` and `decode` and one arm in
//! [`Codec`]'s two matches.
//!
//! Decoders never panic on what the server sends: a short buffer is
//! [`DecodeError::Incomplete`], anything else unexpected is [`DecodeError::Invalid`].

pub mod binary;
pub mod meta;
pub mod resp;
pub mod steer;
pub mod text;

use std::fmt;
use std::ops::Range;

use serde::Serialize;

use crate::workload::{Command, Keyspace};

/// Which wire protocol a run speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// memcached binary protocol (magic 0x80/0x81), via the workspace `protocol` crate.
    Binary,
    /// memcached text (ASCII) protocol.
    Text,
    /// memcached meta commands (`mg`, `ms`, `md`, `mn`).
    Meta,
    /// Redis's RESP (RESP2): `GET`, `SET`, `DEL` and `MGET` as arrays of bulk strings.
    Resp,
}

impl Protocol {
    /// The CLI spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Binary => "binary",
            Protocol::Text => "text",
            Protocol::Meta => "meta",
            Protocol::Resp => "resp",
        }
    }
}

/// The keys of a multi-key GET: indices into the run's keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MultiKeys<'k> {
    keyspace: Option<&'k Keyspace>,
    keys: &'k [u64],
}

impl<'k> MultiKeys<'k> {
    /// The keys `keys` of `keyspace`.
    pub fn new(keyspace: &'k Keyspace, keys: &'k [u64]) -> MultiKeys<'k> {
        MultiKeys {
            keyspace: Some(keyspace),
            keys,
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The bytes of the `i`-th key.
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn key(&self, i: usize) -> &'k [u8] {
        self.keyspace
            .expect("keys come with their keyspace")
            .key(self.keys[i])
    }

    /// The keyspace index of the `i`-th key.
    pub fn index(&self, i: usize) -> u64 {
        self.keys[i]
    }

    /// The position of `key` among the keys from `from` on, if it is there.
    pub fn find(&self, key: &[u8], from: usize) -> Option<usize> {
        (from..self.len()).find(|&i| self.key(i) == key)
    }
}

/// One request to encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// What to do.
    pub command: Command,
    /// The key (GET, SET, DELETE).
    pub key: &'a [u8],
    /// The keys of a multi-key GET.
    pub multi: MultiKeys<'a>,
    /// A SET's value.
    pub value: &'a [u8],
    /// A SET's time to live in seconds (0: none), under memcached's rules.
    pub ttl: u32,
    /// The connection's request number (binary opaque, meta `O` flag).
    pub opaque: u32,
}

/// What the decoder needs to know about the oldest request in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect<'k> {
    /// The command sent.
    pub command: Command,
    /// The key sent (single-key commands).
    pub key: &'k [u8],
    /// The keys of a multi-key GET.
    pub multi: MultiKeys<'k>,
    /// The opaque sent (binary and meta; ignored by the text protocol).
    pub opaque: u32,
}

/// One value found by a multi-key GET: which key (position in [`MultiKeys`]) and where its
/// bytes are in the decoded buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiHit {
    /// Position of the key in the request.
    pub index: usize,
    /// The value's bytes in the buffer passed to [`Codec::decode`].
    pub value: Range<usize>,
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
    /// DELETE removed the key.
    Deleted,
    /// DELETE found no key.
    NotFound,
    /// A multi-key GET: this many keys found, listed in the `hits` given to the decoder.
    Multi {
        /// Keys found.
        hits: usize,
    },
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

    /// Appends `request` to `out`.
    #[inline]
    pub fn encode(self, request: &Request<'_>, out: &mut Vec<u8>) {
        match self.protocol {
            Protocol::Binary => binary::encode(request, out),
            Protocol::Text => text::encode(request, out),
            Protocol::Meta => meta::encode(request, out),
            Protocol::Resp => resp::encode(request, out),
        }
    }

    /// Decodes the reply to `expect` at the start of `buf`; returns it with the bytes it used.
    /// A multi-key GET's values are listed in `hits` (cleared first).
    ///
    /// # Errors
    /// [`DecodeError::Incomplete`] until the whole reply is in `buf`; [`DecodeError::Invalid`]
    /// when it is not a reply to `expect`.
    #[inline]
    pub fn decode<'a>(
        self,
        buf: &'a [u8],
        expect: &Expect<'_>,
        hits: &mut Vec<MultiHit>,
    ) -> Result<(Reply<'a>, usize), DecodeError> {
        hits.clear();
        match self.protocol {
            Protocol::Binary => binary::decode(buf, expect, self.max_value, hits),
            Protocol::Text => text::decode(buf, expect, self.max_value, hits),
            Protocol::Meta => meta::decode(buf, expect, self.max_value, hits),
            Protocol::Resp => resp::decode(buf, expect, self.max_value, hits),
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
    let mut hits = Vec::new();
    while next < expects.len() {
        match codec.decode(&buf, &expects[next], &mut hits) {
            Ok((reply, used)) => {
                out.push(OwnedReply::of(reply, &buf, &hits));
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
    Deleted,
    NotFound,
    /// (key position, value) per key found.
    Multi(Vec<(usize, Vec<u8>)>),
    ServerError,
}

#[cfg(test)]
impl OwnedReply {
    pub(crate) fn of(r: Reply<'_>, buf: &[u8], hits: &[MultiHit]) -> Self {
        match r {
            Reply::Hit { value } => OwnedReply::Hit(value.to_vec()),
            Reply::Miss => OwnedReply::Miss,
            Reply::Stored => OwnedReply::Stored,
            Reply::NotStored => OwnedReply::NotStored,
            Reply::Deleted => OwnedReply::Deleted,
            Reply::NotFound => OwnedReply::NotFound,
            Reply::Multi { hits: n } => {
                assert_eq!(n, hits.len());
                OwnedReply::Multi(
                    hits.iter()
                        .map(|h| (h.index, buf[h.value.clone()].to_vec()))
                        .collect(),
                )
            }
            Reply::ServerError => OwnedReply::ServerError,
        }
    }
}
