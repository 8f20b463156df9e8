//! Which memspin worker owns a key: the owner hash that the server's workers and a client that
//! steers its requests compute alike.
//!
//! ```text
//! key bytes ─ owner_hash (seeded 64-bit multiply-xor over 8-byte words) ─ mod workers ─▶ owner
//! ```
//!
//! A key's owner is `owner_hash(key) mod workers` ([`owner_of`]); with one worker it is 0.
//! The hash is fixed (seed [`OWNER_HASH_SEED`], constants below) and named
//! ([`OWNER_HASH_NAME`]) so that a client can check it computes the same owners as the server
//! it talks to: a change to the algorithm gets a new name. It reads the key as little-endian
//! 64-bit words, so it gives the same value on every machine and Rust version.
//!
//! The algorithm, for a client library to implement (all arithmetic wrapping, mod 2^64):
//!
//! 1. `h = SEED ^ (len × K)`, with `K = 0x9e3779b97f4a7c15` and `len` the key's length.
//! 2. For each whole 8-byte word `w` of the key (little-endian), in order:
//!    `h = rotl((h ^ w) × K, 29)`.
//! 3. The 0 to 7 bytes left, padded with zeros to 8 and read little-endian as `t` (0 when none
//!    are left): `h = (h ^ t) × K`.
//! 4. MurmurHash3's 64-bit finalizer: `h ^= h >> 33; h ×= 0xff51afd7ed558ccd; h ^= h >> 33;
//!    h ×= 0xc4ceb9fe1a85ec53; h ^= h >> 33`.
//!
//! The key hashed is the key as the client sends it: a RESP database number is not part of it,
//! so a key has the same owner in every database.
#![forbid(unsafe_code)]

/// The seed of the owner hash; fixed so that every worker and every client agree.
pub const OWNER_HASH_SEED: u64 = 0x6d65_6d73_7069_6e21;

/// The multiplier of the word rounds (2^64 divided by the golden ratio).
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The hash's name and version, as the server reports it (`STAT owner_hash`): clients that
/// implement the algorithm above compare it before they steer.
pub const OWNER_HASH_NAME: &str = "mulxor64-v1";

/// The worker that owns `key` among `workers`: `owner_hash(key) mod workers`, 0 for one
/// worker or none.
#[inline]
pub fn owner_of(key: &[u8], workers: usize) -> usize {
    if workers <= 1 {
        return 0;
    }
    (owner_hash(key) % workers as u64) as usize
}

/// The hash [`owner_of`] reduces: a seeded 64-bit multiply-xor over 8-byte little-endian words
/// with MurmurHash3's finalizer (any key length; stable across runs, machines and versions of
/// Rust).
pub fn owner_hash(key: &[u8]) -> u64 {
    let mut h = OWNER_HASH_SEED ^ (key.len() as u64).wrapping_mul(K);
    let mut words = key.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    // The finalizer of MurmurHash3's 64-bit variant: every input bit reaches the low bits.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash written out a second time, byte by byte, from the steps in the crate's
    /// documentation: the code and the description a client implements say the same.
    fn documented(key: &[u8]) -> u64 {
        let mut h = OWNER_HASH_SEED ^ (key.len() as u64).wrapping_mul(K);
        let whole = key.len() / 8 * 8;
        for start in (0..whole).step_by(8) {
            let mut w = 0u64;
            for (i, &b) in key[start..start + 8].iter().enumerate() {
                w |= u64::from(b) << (8 * i);
            }
            h = (h ^ w).wrapping_mul(K).rotate_left(29);
        }
        let mut t = 0u64;
        for (i, &b) in key[whole..].iter().enumerate() {
            t |= u64::from(b) << (8 * i);
        }
        h = (h ^ t).wrapping_mul(K);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51afd7ed558ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ceb9fe1a85ec53);
        h ^ (h >> 33)
    }

    #[test]
    fn the_hash_is_the_documented_algorithm_for_every_length_up_to_40() {
        let bytes: Vec<u8> = (0u8..40)
            .map(|i| i.wrapping_mul(37).wrapping_add(11))
            .collect();
        for len in 0..=bytes.len() {
            assert_eq!(
                owner_hash(&bytes[..len]),
                documented(&bytes[..len]),
                "{len}"
            );
        }
    }

    #[test]
    fn known_keys_keep_their_hashes_and_owners() {
        // Pinned values: servers and clients built at different times agree on them. A change
        // here changes which worker owns every key and needs a new OWNER_HASH_NAME.
        for &(key, hash, owners) in &VECTORS {
            assert_eq!(owner_hash(key), hash, "{}", String::from_utf8_lossy(key));
            for &(workers, owner) in owners {
                assert_eq!(owner_of(key, workers), owner, "{workers}");
            }
        }
    }

    #[test]
    fn one_worker_or_none_owns_everything() {
        assert_eq!(owner_of(b"anything", 1), 0);
        assert_eq!(owner_of(b"anything", 0), 0);
    }

    #[test]
    fn keys_spread_evenly_over_workers() {
        for workers in [2usize, 3, 4, 8] {
            let mut counts = vec![0u32; workers];
            for i in 0..8000 {
                counts[owner_of(format!("memspin:{i:08}").as_bytes(), workers)] += 1;
            }
            let even = 8000 / workers as u32;
            for c in counts {
                assert!(c > even * 9 / 10 && c < even * 11 / 10, "{workers}: {c}");
            }
        }
    }

    #[test]
    fn trailing_zero_bytes_change_the_hash() {
        // The length is mixed in first, so a key and its zero-padded tail differ.
        assert_ne!(owner_hash(b"k"), owner_hash(b"k\0"));
        assert_ne!(owner_hash(b""), owner_hash(b"\0\0\0\0\0\0\0\0"));
    }

    /// A key, its hash, and its owner among so many workers.
    type Vector = (&'static [u8], u64, &'static [(usize, usize)]);

    static VECTORS: [Vector; 8] = [
        (b"", 0xe50f094bfc337182, &[(2, 0), (3, 1), (4, 2), (8, 2)]),
        (b"a", 0x11b4648718d56473, &[(2, 1), (3, 2), (4, 3), (8, 3)]),
        (
            b"foo",
            0x5807c3891aa44494,
            &[(2, 0), (3, 2), (4, 0), (8, 4)],
        ),
        (
            b"key:1",
            0xa9e42dd32819a5e0,
            &[(2, 0), (3, 0), (4, 0), (8, 0)],
        ),
        (
            b"memspin:00000001",
            0x9a3952d2e6715a1c,
            &[(2, 0), (3, 1), (4, 0), (8, 4)],
        ),
        (
            b"memspin:00000042",
            0x4f28c33e5cd94f1b,
            &[(2, 1), (3, 2), (4, 3), (8, 3)],
        ),
        (
            b"user:1000:profile:settings",
            0x6988cc2870dafb91,
            &[(2, 1), (3, 2), (4, 1), (8, 1)],
        ),
        (
            b"0123456789abcdef0123456789abcdef",
            0x0bffbd6c6c4eeaf1,
            &[(2, 1), (3, 0), (4, 1), (8, 1)],
        ),
    ];
}
