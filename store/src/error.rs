//! Why a store operation did not happen.

use core::fmt;

/// Why a mutating [`Shard`](crate::Shard) operation did not take effect.
///
/// Small and `Copy`; the engine maps each variant to a protocol status
/// (binary `0x0001`..`0x0006`, text `NOT_FOUND`/`EXISTS`/`NOT_STORED`/`SERVER_ERROR ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreError {
    /// The key is not present (or a CAS was given for a missing key).
    NotFound,
    /// The item's CAS differs from the one supplied.
    Exists,
    /// The store mode's precondition failed (`Add` on a live key,
    /// `Replace`/`Append`/`Prepend` on a missing one).
    NotStored,
    /// [`item_size`](crate::item_size) of the resulting item exceeds `max_item_size`.
    TooLarge,
    /// The item cannot fit in the memory budget even with every other item evicted.
    OutOfMemory,
    /// `incr`/`decr` on a value that is not 1..=20 ASCII digits fitting in a `u64`.
    NonNumeric,
    /// The key is empty or longer than [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes.
    KeyTooLong,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreError::NotFound => "not found",
            StoreError::Exists => "exists: CAS mismatch",
            StoreError::NotStored => "not stored",
            StoreError::TooLarge => "object too large for cache",
            StoreError::OutOfMemory => "out of memory storing object",
            StoreError::NonNumeric => "cannot increment or decrement non-numeric value",
            StoreError::KeyTooLong => "key empty or longer than 250 bytes",
        })
    }
}

impl std::error::Error for StoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_distinct_and_nonempty() {
        let all = [
            StoreError::NotFound,
            StoreError::Exists,
            StoreError::NotStored,
            StoreError::TooLarge,
            StoreError::OutOfMemory,
            StoreError::NonNumeric,
            StoreError::KeyTooLong,
        ];
        let texts: Vec<String> = all.iter().map(|e| e.to_string()).collect();
        for (i, a) in texts.iter().enumerate() {
            assert!(!a.is_empty());
            for b in &texts[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(core::mem::size_of::<StoreError>(), 1);
    }
}
