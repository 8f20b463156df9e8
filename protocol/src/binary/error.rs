//! Why a frame could not be parsed, and what the connection should do about it.

use core::fmt;

use super::Opcode;

/// Outcome of a failed parse: read more, skip an unknown command, or give up on the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Read `needed` more bytes (counted from the end of the given buffer); not a wire error.
    Incomplete {
        /// Bytes missing after the end of the buffer before the header or frame is whole.
        needed: usize,
    },
    /// Reply UnknownCommand (echo opcode byte + opaque), skip `frame_len` bytes, keep the connection.
    UnknownOpcode {
        /// The opcode byte as sent.
        opcode: u8,
        /// The request's opaque, to echo.
        opaque: u32,
        /// Header plus body: the bytes to skip, some of which may not have arrived yet.
        frame_len: usize,
    },
    /// Reply InvalidArguments where a header exists (not for BadMagic), then close.
    Invalid(Invalid),
}

/// A malformed frame; the connection cannot be trusted to stay in sync after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// The first byte is not the expected magic (spec §3.1).
    BadMagic(u8),
    /// `key_len + extras_len > body_len`.
    LengthMismatch,
    /// `key_len` is above [`MAX_KEY_LEN`](super::MAX_KEY_LEN).
    KeyTooLong {
        /// The key length the header declares.
        key_len: u16,
    },
    /// The extras, key or value lengths are not what this command takes (spec §4).
    Shape {
        /// The base command whose rules the frame broke.
        opcode: Opcode,
    },
    /// `body_len` is above the caller's limit.
    BodyTooLarge {
        /// The body length the header declares.
        body_len: u32,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseError::Incomplete { needed } => {
                write!(f, "incomplete frame: {needed} more bytes needed")
            }
            ParseError::UnknownOpcode {
                opcode, frame_len, ..
            } => {
                write!(
                    f,
                    "unknown opcode {opcode:#04x} in a {frame_len}-byte frame"
                )
            }
            ParseError::Invalid(invalid) => write!(f, "invalid frame: {invalid}"),
        }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Invalid::BadMagic(magic) => write!(f, "bad magic byte {magic:#04x}"),
            Invalid::LengthMismatch => f.write_str("key and extras longer than the body"),
            Invalid::KeyTooLong { key_len } => write!(f, "key of {key_len} bytes is too long"),
            Invalid::Shape { opcode } => {
                write!(f, "wrong extras, key or value length for {opcode:?}")
            }
            Invalid::BodyTooLarge { body_len } => {
                write!(f, "body of {body_len} bytes is too large")
            }
        }
    }
}

impl std::error::Error for ParseError {}
impl std::error::Error for Invalid {}

impl From<Invalid> for ParseError {
    fn from(invalid: Invalid) -> Self {
        ParseError::Invalid(invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display() {
        assert_eq!(
            ParseError::Incomplete { needed: 3 }.to_string(),
            "incomplete frame: 3 more bytes needed"
        );
        assert_eq!(
            ParseError::UnknownOpcode {
                opcode: 0x42,
                opaque: 1,
                frame_len: 24
            }
            .to_string(),
            "unknown opcode 0x42 in a 24-byte frame"
        );
        assert_eq!(
            ParseError::from(Invalid::BadMagic(0x47)).to_string(),
            "invalid frame: bad magic byte 0x47"
        );
        assert_eq!(
            Invalid::Shape {
                opcode: Opcode::Get
            }
            .to_string(),
            "wrong extras, key or value length for Get"
        );
        assert_eq!(
            Invalid::KeyTooLong { key_len: 251 }.to_string(),
            "key of 251 bytes is too long"
        );
        assert_eq!(
            Invalid::BodyTooLarge { body_len: 9 }.to_string(),
            "body of 9 bytes is too large"
        );
        assert_eq!(
            Invalid::LengthMismatch.to_string(),
            "key and extras longer than the body"
        );
    }

    #[test]
    fn errors_are_small_and_copy() {
        fn is_error<E: std::error::Error + Copy + Send + Sync + 'static>() {}
        is_error::<ParseError>();
        is_error::<Invalid>();
        assert!(size_of::<ParseError>() <= 24);
    }
}
