//! `--verify`: self-checking values, and the per-key version window that tells a correct GET
//! hit from a stale one.
//!
//! A verified value is laid out as
//!
//! ```text
//! 0..4   version   u32 LE   (1, 2, 3, ... per key and run)
//! 4..8   length    u32 LE   (the whole value, header included)
//! 8..16  checksum  u64 LE   over key, version, length and payload
//! 16..   payload   bytes derived from (key, version)
//! ```
//!
//! Because the checksum covers the key, a value returned for the wrong key fails; because the
//! version sits inside the value, a concurrent writer cannot cause a false alarm. Every key is
//! written by one connection only (see `placement.rs`), and a memcached connection is
//! served in order, so when a GET reply arrives the connection knows which versions the key may
//! hold: the window `[floor, ceil]` of [`KeyState`].

use std::fmt;

use serde::Serialize;

/// Bytes of the verification header at the start of every verified value.
pub const HEADER_LEN: usize = 16;

const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;

#[inline]
fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Word-at-a-time hash; every step is a bijection of the state for a fixed input word, so a
/// single changed byte always changes the result.
#[derive(Clone, Copy)]
struct Hasher(u64);

impl Hasher {
    #[inline]
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w)
            .wrapping_mul(K1)
            .rotate_left(29)
            .wrapping_add(K2);
    }

    fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().expect("8-byte chunk")));
        }
        let rest = chunks.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        self.word(u64::from_le_bytes(last));
        self.word(b.len() as u64);
    }

    fn finish(self) -> u64 {
        mix64(self.0)
    }
}

fn checksum(key: &[u8], version: u32, length: u32, payload: &[u8]) -> u64 {
    let mut h = Hasher(0x6d65_6d73_7069_6e21);
    h.bytes(key);
    h.word(u64::from(version) << 32 | u64::from(length));
    h.bytes(payload);
    h.finish()
}

/// Fills `out` (the whole value, at least [`HEADER_LEN`] bytes) with the verified value of
/// `key` at `version`.
///
/// # Panics
/// If `out` is shorter than [`HEADER_LEN`] or longer than `u32::MAX` (the CLI forbids both).
pub fn fill_value(key: &[u8], version: u32, out: &mut [u8]) {
    assert!(
        out.len() >= HEADER_LEN,
        "verified values need at least {HEADER_LEN} bytes"
    );
    let length = u32::try_from(out.len()).expect("value length fits u32");
    let (header, payload) = out.split_at_mut(HEADER_LEN);
    let mut h = Hasher(u64::from(version));
    h.bytes(key);
    let mut state = h.finish();
    let mut chunks = payload.chunks_exact_mut(8);
    for c in &mut chunks {
        state = state.wrapping_add(K1);
        c.copy_from_slice(&mix64(state).to_le_bytes());
    }
    let rest = chunks.into_remainder();
    let tail = mix64(state.wrapping_add(K2)).to_le_bytes();
    let n = rest.len();
    rest.copy_from_slice(&tail[..n]);
    header[0..4].copy_from_slice(&version.to_le_bytes());
    header[4..8].copy_from_slice(&length.to_le_bytes());
    let sum = checksum(key, version, length, payload);
    header[8..16].copy_from_slice(&sum.to_le_bytes());
}

/// Why a value failed its self-check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// Shorter than the header.
    TooShort,
    /// The length field disagrees with the value's length.
    Length,
    /// The checksum does not match key, version and payload (flipped bits, or another key's value).
    Checksum,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Corruption::TooShort => "value shorter than the verification header",
            Corruption::Length => "value length differs from the length it was written with",
            Corruption::Checksum => "checksum mismatch",
        })
    }
}

impl std::error::Error for Corruption {}

/// Checks that `value` is an intact verified value of `key`, and returns its version.
///
/// # Errors
/// [`Corruption`] when it is not.
pub fn check_value(key: &[u8], value: &[u8]) -> Result<u32, Corruption> {
    if value.len() < HEADER_LEN {
        return Err(Corruption::TooShort);
    }
    let field =
        |r: core::ops::Range<usize>| -> [u8; 4] { value[r].try_into().expect("4-byte field") };
    let version = u32::from_le_bytes(field(0..4));
    let length = u32::from_le_bytes(field(4..8));
    if length as usize != value.len() {
        return Err(Corruption::Length);
    }
    let sum = u64::from_le_bytes(value[8..16].try_into().expect("8-byte field"));
    if checksum(key, version, length, &value[HEADER_LEN..]) != sum {
        return Err(Corruption::Checksum);
    }
    Ok(version)
}

/// The versions one key may hold, as seen by the connection that owns it.
///
/// `floor..=ceil` is the window of acceptable versions, where 0 means "absent". A key nobody
/// has written in this run is `unknown`: any intact value (or a miss) is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyState {
    known: bool,
    floor: u32,
    ceil: u32,
    last_sent: u32,
}

/// What a GET reply means for a verified key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The reply is consistent with what was written.
    Ok,
    /// An intact value, but a version the key cannot hold now (older, or never confirmed).
    Stale,
    /// A miss on a key that had a confirmed store (eviction or loss).
    Lost,
}

impl KeyState {
    /// The version for the next SET of this key.
    pub fn next_version(&mut self) -> u32 {
        self.last_sent = self.last_sent.wrapping_add(1).max(1);
        self.last_sent
    }

    /// The server replied that SET `version` was stored: the key now holds exactly it.
    pub fn stored(&mut self, version: u32) {
        self.known = true;
        self.floor = version;
        self.ceil = version;
    }

    /// A SET of `version` may or may not have been applied (its connection failed while it was
    /// in flight).
    pub fn maybe_stored(&mut self, version: u32) {
        if self.known {
            self.ceil = self.ceil.max(version);
        }
    }

    /// The server replied that a DELETE was done (or found nothing): the key is absent now.
    pub fn deleted(&mut self) {
        self.known = true;
        self.floor = 0;
        self.ceil = 0;
    }

    /// A DELETE may or may not have been applied (its connection failed while it was in
    /// flight): absent becomes possible.
    pub fn maybe_deleted(&mut self) {
        if self.known {
            self.floor = 0;
        }
    }

    /// Judges a GET hit whose intact value carries `version`.
    pub fn hit(&mut self, version: u32) -> Verdict {
        if !self.known {
            return Verdict::Ok;
        }
        if version == 0 || version < self.floor || version > self.ceil {
            return Verdict::Stale;
        }
        self.floor = version;
        Verdict::Ok
    }

    /// Judges a GET miss.
    pub fn miss(&mut self) -> Verdict {
        if !self.known || self.floor == 0 {
            return Verdict::Ok;
        }
        // The key is gone now; only versions sent later (or in doubt) may reappear.
        self.floor = 0;
        self.ceil = 0;
        Verdict::Lost
    }
}

/// Verification counters for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct VerifyCounts {
    /// GET hits whose value was checked.
    pub checked: u64,
    /// Values that failed the self-check or carried an impossible version (`corrupt + stale`).
    pub mismatches: u64,
    /// Values whose checksum, length or key did not match.
    pub corrupt: u64,
    /// Intact values with a version the key could not hold (an old write came back).
    pub stale: u64,
    /// Misses on keys that had a confirmed store: expected only when the server evicts.
    pub lost: u64,
}

impl VerifyCounts {
    /// Adds `other`.
    pub fn merge(&mut self, other: &VerifyCounts) {
        self.checked += other.checked;
        self.mismatches += other.mismatches;
        self.corrupt += other.corrupt;
        self.stale += other.stale;
        self.lost += other.lost;
    }

    /// Checks a GET hit of `key` against `state` and counts the outcome.
    pub fn check_hit(&mut self, state: &mut KeyState, key: &[u8], value: &[u8]) {
        self.checked += 1;
        match check_value(key, value) {
            Err(_) => {
                self.corrupt += 1;
                self.mismatches += 1;
            }
            Ok(version) => {
                if state.hit(version) == Verdict::Stale {
                    self.stale += 1;
                    self.mismatches += 1;
                }
            }
        }
    }

    /// Counts a GET miss of a key in `state`.
    pub fn check_miss(&mut self, state: &mut KeyState) {
        if state.miss() == Verdict::Lost {
            self.lost += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(key: &[u8], version: u32, len: usize) -> Vec<u8> {
        let mut v = vec![0xa5; len];
        fill_value(key, version, &mut v);
        v
    }

    #[test]
    fn intact_values_check_out_with_their_version() {
        for len in [16, 17, 23, 24, 100, 4_096] {
            let v = value(b"k0001", 7, len);
            assert_eq!(check_value(b"k0001", &v), Ok(7), "len {len}");
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_is_detected() {
        let v = value(b"k0001", 3, 61);
        for i in 0..v.len() {
            for bit in [0x01, 0x80] {
                let mut bad = v.clone();
                bad[i] ^= bit;
                assert!(
                    check_value(b"k0001", &bad).is_err(),
                    "byte {i} bit {bit:#x}"
                );
            }
        }
    }

    #[test]
    fn a_wrong_key_is_detected() {
        let v = value(b"k0001", 3, 40);
        assert_eq!(check_value(b"k0002", &v), Err(Corruption::Checksum));
        assert_eq!(check_value(b"k000", &v), Err(Corruption::Checksum));
    }

    #[test]
    fn truncation_and_extension_are_detected() {
        let v = value(b"key", 1, 40);
        assert_eq!(check_value(b"key", &v[..39]), Err(Corruption::Length));
        assert_eq!(check_value(b"key", &v[..15]), Err(Corruption::TooShort));
        let mut longer = v.clone();
        longer.push(0);
        assert_eq!(check_value(b"key", &longer), Err(Corruption::Length));
    }

    #[test]
    fn an_old_version_is_stale_once_a_newer_one_was_stored() {
        let mut counts = VerifyCounts::default();
        let mut state = KeyState::default();
        let v1 = state.next_version();
        state.stored(v1);
        let v2 = state.next_version();
        state.stored(v2);
        counts.check_hit(&mut state, b"k", &value(b"k", v2, 20));
        assert_eq!(counts.mismatches, 0);
        counts.check_hit(&mut state, b"k", &value(b"k", v1, 20));
        assert_eq!((counts.checked, counts.stale, counts.mismatches), (2, 1, 1));
        // A version never written is stale as well.
        counts.check_hit(&mut state, b"k", &value(b"k", v2 + 1, 20));
        assert_eq!(counts.stale, 2);
        let mut bad = value(b"k", v2, 20);
        bad[19] ^= 1;
        counts.check_hit(&mut state, b"k", &bad);
        assert_eq!((counts.corrupt, counts.mismatches), (1, 3));
    }

    #[test]
    fn in_doubt_writes_widen_the_window_until_a_read_settles_it() {
        let mut state = KeyState::default();
        let v1 = state.next_version();
        state.stored(v1);
        let v2 = state.next_version();
        state.maybe_stored(v2); // connection reset with the SET in flight
        assert_eq!(state.hit(v1), Verdict::Ok);
        assert_eq!(state.hit(v2), Verdict::Ok);
        // v2 was seen: v1 can no longer come back.
        assert_eq!(state.hit(v1), Verdict::Stale);
    }

    #[test]
    fn a_delete_makes_misses_right_and_old_values_stale() {
        let mut counts = VerifyCounts::default();
        let mut state = KeyState::default();
        let v1 = state.next_version();
        state.stored(v1);
        state.deleted();
        counts.check_miss(&mut state);
        assert_eq!(counts.lost, 0);
        counts.check_hit(&mut state, b"k", &value(b"k", v1, 16));
        assert_eq!(counts.stale, 1);
        // A delete in doubt: the value and its absence are both right.
        let v2 = state.next_version();
        state.stored(v2);
        state.maybe_deleted();
        counts.check_miss(&mut state);
        counts.check_hit(&mut state, b"k", &value(b"k", v2, 16));
        assert_eq!((counts.stale, counts.lost), (1, 0));
        // Read back after the failed connection, v2 proves the delete was not applied: a miss
        // now is a loss.
        counts.check_miss(&mut state);
        assert_eq!(counts.lost, 1);
    }

    #[test]
    fn unknown_keys_accept_anything_intact_and_misses_count_as_lost_only_after_a_store() {
        let mut counts = VerifyCounts::default();
        let mut state = KeyState::default();
        counts.check_miss(&mut state);
        counts.check_hit(&mut state, b"k", &value(b"k", 99, 16));
        assert_eq!(counts.mismatches + counts.lost, 0);
        let v = state.next_version();
        state.stored(v);
        counts.check_miss(&mut state);
        assert_eq!(counts.lost, 1);
        // Gone is gone: the old version reappearing is stale, another miss is fine.
        counts.check_miss(&mut state);
        assert_eq!(counts.lost, 1);
        counts.check_hit(&mut state, b"k", &value(b"k", v, 16));
        assert_eq!(counts.stale, 1);
    }
}
