//! Typed extras (spec §4): the fixed fields between the header and the key.

macro_rules! read_be {
    ($ty:ty, $bytes:expr, $at:expr) => {{
        let mut word = [0u8; size_of::<$ty>()];
        word.copy_from_slice(&$bytes[$at..$at + size_of::<$ty>()]);
        <$ty>::from_be_bytes(word)
    }};
}

/// Extras of SET, ADD and REPLACE requests (spec §4.3): flags, then expiration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreExtras {
    /// Opaque client flags stored with the item.
    pub flags: u32,
    /// Expiration time (memcached TTL rules).
    pub expiration: u32,
}

impl StoreExtras {
    /// Length on the wire.
    pub const LEN: usize = 8;

    /// Reads extras of exactly [`Self::LEN`] bytes; `None` for any other length.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::LEN {
            return None;
        }
        Some(StoreExtras {
            flags: read_be!(u32, bytes, 0),
            expiration: read_be!(u32, bytes, 4),
        })
    }

    /// Encodes the extras.
    pub fn emit(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..4].copy_from_slice(&self.flags.to_be_bytes());
        out[4..8].copy_from_slice(&self.expiration.to_be_bytes());
        out
    }
}

/// Extras of INCREMENT and DECREMENT requests (spec §4.6): delta, initial, expiration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterExtras {
    /// Amount to add or subtract.
    pub delta: u64,
    /// Value to create the item with when it is missing.
    pub initial: u64,
    /// Expiration of a created item; 0xffffffff means "do not create, answer not found".
    pub expiration: u32,
}

impl CounterExtras {
    /// Length on the wire.
    pub const LEN: usize = 20;

    /// Reads extras of exactly [`Self::LEN`] bytes; `None` for any other length.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::LEN {
            return None;
        }
        Some(CounterExtras {
            delta: read_be!(u64, bytes, 0),
            initial: read_be!(u64, bytes, 8),
            expiration: read_be!(u32, bytes, 16),
        })
    }

    /// Encodes the extras.
    pub fn emit(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..8].copy_from_slice(&self.delta.to_be_bytes());
        out[8..16].copy_from_slice(&self.initial.to_be_bytes());
        out[16..20].copy_from_slice(&self.expiration.to_be_bytes());
        out
    }
}

macro_rules! one_word_extras {
    ($(#[$doc:meta])* $name:ident, $(#[$field_doc:meta])* $field:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            $(#[$field_doc])*
            pub $field: u32,
        }

        impl $name {
            /// Length on the wire.
            pub const LEN: usize = 4;

            /// Reads extras of exactly [`Self::LEN`] bytes; `None` for any other length.
            pub fn parse(bytes: &[u8]) -> Option<Self> {
                if bytes.len() != Self::LEN {
                    return None;
                }
                Some($name { $field: read_be!(u32, bytes, 0) })
            }

            /// Encodes the extras.
            pub fn emit(&self) -> [u8; Self::LEN] {
                self.$field.to_be_bytes()
            }
        }
    };
}

one_word_extras!(
    /// Extras of TOUCH, GAT and GATK requests, and the optional extras of FLUSH (spec §4.8, §4.4).
    ExpirationExtras,
    /// New expiration time (FLUSH: delay before the flush).
    expiration
);

one_word_extras!(
    /// Extras of a VERBOSITY request (spec §4.9).
    VerbosityExtras,
    /// Requested verbosity level.
    level
);

one_word_extras!(
    /// Extras of GET, GETK, GAT, GATK and TOUCH responses that found the item (spec §4.1).
    FlagsExtras,
    /// The item's client flags.
    flags
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_extras() {
        let bytes = [0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x0e, 0x10];
        let extras = StoreExtras::parse(&bytes).unwrap();
        assert_eq!(
            extras,
            StoreExtras {
                flags: 0xdead_beef,
                expiration: 3600
            }
        );
        assert_eq!(extras.emit(), bytes);
        assert_eq!(StoreExtras::parse(&bytes[..7]), None);
        assert_eq!(StoreExtras::parse(&[0; 9]), None);
    }

    #[test]
    fn counter_extras() {
        let mut bytes = [0u8; 20];
        bytes[7] = 1; // delta 1
        bytes[8] = 0x80; // initial 1 << 63
        bytes[16..20].copy_from_slice(&[0xff; 4]); // expiration 0xffffffff
        let extras = CounterExtras::parse(&bytes).unwrap();
        assert_eq!(
            extras,
            CounterExtras {
                delta: 1,
                initial: 1 << 63,
                expiration: u32::MAX
            }
        );
        assert_eq!(extras.emit(), bytes);
        assert_eq!(CounterExtras::parse(&bytes[..19]), None);
        assert_eq!(CounterExtras::parse(&[]), None);
    }

    #[test]
    fn one_word_extras() {
        let bytes = [0x00, 0x01, 0x02, 0x03];
        assert_eq!(
            ExpirationExtras::parse(&bytes),
            Some(ExpirationExtras {
                expiration: 0x0001_0203
            })
        );
        assert_eq!(
            VerbosityExtras::parse(&bytes),
            Some(VerbosityExtras { level: 0x0001_0203 })
        );
        assert_eq!(
            FlagsExtras::parse(&bytes),
            Some(FlagsExtras { flags: 0x0001_0203 })
        );
        assert_eq!(
            ExpirationExtras {
                expiration: 0x0001_0203
            }
            .emit(),
            bytes
        );
        assert_eq!(VerbosityExtras { level: 0x0001_0203 }.emit(), bytes);
        assert_eq!(FlagsExtras { flags: 0x0001_0203 }.emit(), bytes);
        assert_eq!(ExpirationExtras::parse(&bytes[..3]), None);
        assert_eq!(FlagsExtras::parse(&[0; 8]), None);
        assert_eq!(VerbosityExtras::parse(&[0; 5]), None);
    }
}
