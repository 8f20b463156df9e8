//! The keys of the shard benches (`benches/shard.rs`) and of `examples/get_loop.rs`, which
//! measures the same GET hits outside criterion: 16 bytes, `key:` and 12 hex digits of a
//! cheap 64-bit mix of the key's number, so that they spread like real keys, not sequential.

/// The first `n` keys.
pub fn keys(n: usize) -> Vec<[u8; 16]> {
    (0..n as u64)
        .map(|i| {
            let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut k = [0u8; 16];
            k[..4].copy_from_slice(b"key:");
            k[4..].copy_from_slice(format!("{:012x}", x >> 16).as_bytes());
            k
        })
        .collect()
}
