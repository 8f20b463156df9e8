//! Meta replies: a two-letter code, flags in request order, and for `VA` a data block.

use super::base64;
use crate::text::{push_i64, push_u64};

/// The return code of a meta reply line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `HD`: success, no value.
    Hd,
    /// `VA <size>`: success, a data block of `size` bytes follows the line.
    Va(usize),
    /// `EN`: miss (`mg`, `me`).
    En,
    /// `NF`: not found.
    Nf,
    /// `NS`: not stored.
    Ns,
    /// `EX`: the CAS did not match.
    Ex,
    /// `MN`: the reply to `mn`.
    Mn,
}

/// Writes one meta reply line into `out`: [`ReplyLine::start`] with the code, one call per
/// returned flag, then [`ReplyLine::finish`]. For `VA`, the caller appends the data block and
/// its `\r\n` after `finish`.
#[derive(Debug)]
pub struct ReplyLine<'o> {
    out: &'o mut Vec<u8>,
}

impl<'o> ReplyLine<'o> {
    /// Starts a reply line with its return code.
    pub fn start(out: &'o mut Vec<u8>, status: Status) -> ReplyLine<'o> {
        out.extend_from_slice(match status {
            Status::Hd => b"HD",
            Status::Va(_) => b"VA",
            Status::En => b"EN",
            Status::Nf => b"NF",
            Status::Ns => b"NS",
            Status::Ex => b"EX",
            Status::Mn => b"MN",
        });
        if let Status::Va(size) = status {
            out.push(b' ');
            push_u64(out, size as u64);
        }
        ReplyLine { out }
    }

    /// ` <flag><n>`, e.g. ` c42`.
    pub fn number(&mut self, flag: u8, n: u64) -> &mut Self {
        self.out.extend_from_slice(&[b' ', flag]);
        push_u64(self.out, n);
        self
    }

    /// ` <flag><n>` for a signed number, e.g. ` t-1`.
    pub fn signed(&mut self, flag: u8, n: i64) -> &mut Self {
        self.out.extend_from_slice(&[b' ', flag]);
        push_i64(self.out, n);
        self
    }

    /// ` <flag>` alone, e.g. ` W`.
    pub fn flag(&mut self, flag: u8) -> &mut Self {
        self.out.extend_from_slice(&[b' ', flag]);
        self
    }

    /// ` <token>`: a request token echoed whole (the opaque, `Oabc`).
    pub fn token(&mut self, token: &[u8]) -> &mut Self {
        self.out.push(b' ');
        self.out.extend_from_slice(token);
        self
    }

    /// ` k<key>`; a binary key is written in base64 and followed by ` b`.
    pub fn key(&mut self, key: &[u8], base64_key: bool) -> &mut Self {
        self.out.extend_from_slice(b" k");
        if base64_key {
            base64::encode_into(key, self.out);
            self.out.extend_from_slice(b" b");
        } else {
            self.out.extend_from_slice(key);
        }
        self
    }

    /// Ends the line with `\r\n`.
    pub fn finish(self) {
        self.out.extend_from_slice(b"\r\n");
    }
}

/// The `me` reply for a hit: `ME <key> exp=.. la=.. cas=.. fetch=.. cls=.. size=..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugLine<'a> {
    /// The key (written in base64 when `base64_key`).
    pub key: &'a [u8],
    /// Whether the key is binary (the request's `b` flag).
    pub base64_key: bool,
    /// Seconds until expiry, -1 for none (memcached's `exp`).
    pub exp: i64,
    /// Seconds since the last access (`la`).
    pub last_access: u64,
    /// The CAS.
    pub cas: u64,
    /// Whether the item has been fetched (`fetch=yes|no`).
    pub fetched: bool,
    /// The slab class (`cls`).
    pub class: u32,
    /// Bytes the item takes (`size`).
    pub size: u64,
}

impl DebugLine<'_> {
    /// Appends the line and its `\r\n`.
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"ME ");
        if self.base64_key {
            base64::encode_into(self.key, out);
        } else {
            out.extend_from_slice(self.key);
        }
        out.extend_from_slice(b" exp=");
        push_i64(out, self.exp);
        out.extend_from_slice(b" la=");
        push_u64(out, self.last_access);
        out.extend_from_slice(b" cas=");
        push_u64(out, self.cas);
        out.extend_from_slice(if self.fetched {
            b" fetch=yes"
        } else {
            b" fetch=no"
        });
        out.extend_from_slice(b" cls=");
        push_u64(out, u64::from(self.class));
        out.extend_from_slice(b" size=");
        push_u64(out, self.size);
        out.extend_from_slice(b"\r\n");
    }
}
