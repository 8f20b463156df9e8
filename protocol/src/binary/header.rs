//! Zero-copy views of the 24-byte request and response headers (spec §2).

use super::error::Invalid;
use super::{HEADER_LEN, ParseError, REQUEST_MAGIC, RESPONSE_MAGIC};

/// Byte offsets of the header fields (spec §2), shared by requests and responses.
pub(super) mod field {
    use core::ops::Range;

    pub const MAGIC: usize = 0;
    pub const OPCODE: usize = 1;
    pub const KEY_LEN: Range<usize> = 2..4;
    pub const EXTRAS_LEN: usize = 4;
    pub const DATA_TYPE: usize = 5;
    /// `vbucket` in a request, `status` in a response.
    pub const VBUCKET_OR_STATUS: Range<usize> = 6..8;
    pub const BODY_LEN: Range<usize> = 8..12;
    pub const OPAQUE: Range<usize> = 12..16;
    pub const CAS: Range<usize> = 16..24;
}

#[inline]
fn read_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

#[inline]
fn read_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
fn read_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Checks what every header must satisfy: 24 bytes present, the given magic, and
/// `key_len + extras_len <= body_len`.
#[inline]
fn check_header(buf: &[u8], magic: u8) -> Result<(), ParseError> {
    if buf.len() < HEADER_LEN {
        return Err(ParseError::Incomplete {
            needed: HEADER_LEN - buf.len(),
        });
    }
    if buf[field::MAGIC] != magic {
        return Err(ParseError::Invalid(Invalid::BadMagic(buf[field::MAGIC])));
    }
    let key_len = u32::from(read_u16(&buf[field::KEY_LEN]));
    let extras_len = u32::from(buf[field::EXTRAS_LEN]);
    if key_len + extras_len > read_u32(&buf[field::BODY_LEN]) {
        return Err(ParseError::Invalid(Invalid::LengthMismatch));
    }
    Ok(())
}

macro_rules! header_view {
    (
        $(#[$doc:meta])*
        $name:ident, $magic:expr, $magic_doc:literal,
        $(#[$word_doc:meta])* $word:ident, $set_word:ident
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking it; use for emission and for bytes already checked.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps a buffer after [`check_len`](Self::check_len); use for bytes from the network.
            ///
            /// # Errors
            /// As [`check_len`](Self::check_len).
            pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
                let header = Self::new_unchecked(buffer);
                header.check_len()?;
                Ok(header)
            }

            #[doc = concat!(
                "Checks that the buffer holds a whole header, that its magic is ", $magic_doc,
                " and that `key_len + extras_len <= body_len`.\n\n",
                "Once it passes, no accessor of this view panics. It does not check that the ",
                "body is present.\n\n",
                "# Errors\n",
                "[`ParseError::Incomplete`] with the missing header bytes if the buffer is ",
                "shorter than [`HEADER_LEN`]; [`Invalid::BadMagic`] for another magic; ",
                "[`Invalid::LengthMismatch`] if the key and extras do not fit in the body."
            )]
            pub fn check_len(&self) -> Result<(), ParseError> {
                check_header(self.buffer.as_ref(), $magic)
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// Magic byte (spec §3.1).
            #[inline]
            pub fn magic(&self) -> u8 {
                self.buffer.as_ref()[field::MAGIC]
            }

            /// Opcode byte as on the wire, quiet variants included; see [`Opcode::from_wire`](super::Opcode::from_wire).
            #[inline]
            pub fn opcode(&self) -> u8 {
                self.buffer.as_ref()[field::OPCODE]
            }

            /// Length of the key in bytes.
            #[inline]
            pub fn key_len(&self) -> u16 {
                read_u16(&self.buffer.as_ref()[field::KEY_LEN])
            }

            /// Length of the extras in bytes.
            #[inline]
            pub fn extras_len(&self) -> u8 {
                self.buffer.as_ref()[field::EXTRAS_LEN]
            }

            /// Data type byte (spec §3.4); memcached only defines 0x00, raw bytes.
            #[inline]
            pub fn data_type(&self) -> u8 {
                self.buffer.as_ref()[field::DATA_TYPE]
            }

            $(#[$word_doc])*
            #[inline]
            pub fn $word(&self) -> u16 {
                read_u16(&self.buffer.as_ref()[field::VBUCKET_OR_STATUS])
            }

            /// Length of extras, key and value together.
            #[inline]
            pub fn body_len(&self) -> u32 {
                read_u32(&self.buffer.as_ref()[field::BODY_LEN])
            }

            /// Opaque value chosen by the client and echoed in the response.
            #[inline]
            pub fn opaque(&self) -> u32 {
                read_u32(&self.buffer.as_ref()[field::OPAQUE])
            }

            /// Compare-and-swap value (0: none).
            #[inline]
            pub fn cas(&self) -> u64 {
                read_u64(&self.buffer.as_ref()[field::CAS])
            }

            /// Length of the whole frame: [`HEADER_LEN`] + `body_len`.
            #[inline]
            pub fn frame_len(&self) -> usize {
                HEADER_LEN.saturating_add(self.body_len() as usize)
            }

            /// Length of the value: `body_len - key_len - extras_len` (0 if the lengths are inconsistent).
            #[inline]
            pub fn value_len(&self) -> usize {
                (self.body_len() as usize)
                    .saturating_sub(usize::from(self.key_len()) + usize::from(self.extras_len()))
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// Sets the magic byte.
            #[inline]
            pub fn set_magic(&mut self, value: u8) {
                self.buffer.as_mut()[field::MAGIC] = value;
            }

            /// Sets the opcode byte (a wire byte; see [`Opcode::to_wire`](super::Opcode::to_wire)).
            #[inline]
            pub fn set_opcode(&mut self, value: u8) {
                self.buffer.as_mut()[field::OPCODE] = value;
            }

            /// Sets the key length.
            #[inline]
            pub fn set_key_len(&mut self, value: u16) {
                self.buffer.as_mut()[field::KEY_LEN].copy_from_slice(&value.to_be_bytes());
            }

            /// Sets the extras length.
            #[inline]
            pub fn set_extras_len(&mut self, value: u8) {
                self.buffer.as_mut()[field::EXTRAS_LEN] = value;
            }

            /// Sets the data type byte.
            #[inline]
            pub fn set_data_type(&mut self, value: u8) {
                self.buffer.as_mut()[field::DATA_TYPE] = value;
            }

            $(#[$word_doc])*
            #[inline]
            pub fn $set_word(&mut self, value: u16) {
                self.buffer.as_mut()[field::VBUCKET_OR_STATUS].copy_from_slice(&value.to_be_bytes());
            }

            /// Sets the body length.
            #[inline]
            pub fn set_body_len(&mut self, value: u32) {
                self.buffer.as_mut()[field::BODY_LEN].copy_from_slice(&value.to_be_bytes());
            }

            /// Sets the opaque value.
            #[inline]
            pub fn set_opaque(&mut self, value: u32) {
                self.buffer.as_mut()[field::OPAQUE].copy_from_slice(&value.to_be_bytes());
            }

            /// Sets the compare-and-swap value.
            #[inline]
            pub fn set_cas(&mut self, value: u64) {
                self.buffer.as_mut()[field::CAS].copy_from_slice(&value.to_be_bytes());
            }
        }
    };
}

header_view!(
    /// Request header view (spec §2, request header): 24 big-endian bytes at the start of `buffer`.
    ///
    /// Field offsets are in a private `field` module; after [`check_len`](Self::check_len)
    /// succeeds no accessor panics. Accessors return raw wire values; [`super::RequestRepr`]
    /// is the typed form.
    RequestHeader, REQUEST_MAGIC, "[`REQUEST_MAGIC`]",
    /// Virtual bucket id (the spec's "reserved" field; memcached ignores it).
    vbucket, set_vbucket
);

header_view!(
    /// Response header view (spec §2, response header): 24 big-endian bytes at the start of `buffer`.
    ///
    /// Field offsets are in a private `field` module; after [`check_len`](Self::check_len)
    /// succeeds no accessor panics. Accessors return raw wire values; [`super::ResponseRepr`]
    /// is the typed form.
    ResponseHeader, RESPONSE_MAGIC, "[`RESPONSE_MAGIC`]",
    /// Status code as on the wire (spec §3.2); see [`Status::from_wire`](super::Status::from_wire).
    status, set_status
);

#[cfg(test)]
mod tests {
    use super::*;

    /// GET "hello", opaque 0xdeadbeef, vbucket 7, cas 1.
    static GET_HELLO: [u8; 29] = [
        0x80, 0x00, 0x00, 0x05, // magic, opcode, key_len
        0x00, 0x00, 0x00, 0x07, // extras_len, data_type, vbucket
        0x00, 0x00, 0x00, 0x05, // body_len
        0xde, 0xad, 0xbe, 0xef, // opaque
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // cas
        b'h', b'e', b'l', b'l', b'o',
    ];

    #[test]
    fn request_fields() {
        let h = RequestHeader::new_checked(&GET_HELLO[..]).unwrap();
        assert_eq!(h.magic(), REQUEST_MAGIC);
        assert_eq!(h.opcode(), 0x00);
        assert_eq!(h.key_len(), 5);
        assert_eq!(h.extras_len(), 0);
        assert_eq!(h.data_type(), 0);
        assert_eq!(h.vbucket(), 7);
        assert_eq!(h.body_len(), 5);
        assert_eq!(h.opaque(), 0xdead_beef);
        assert_eq!(h.cas(), 1);
        assert_eq!(h.frame_len(), 29);
        assert_eq!(h.value_len(), 0);
    }

    #[test]
    fn setters_write_every_field() {
        let mut buf = [0xa5; HEADER_LEN];
        let mut h = RequestHeader::new_unchecked(&mut buf[..]);
        h.set_magic(REQUEST_MAGIC);
        h.set_opcode(0x00);
        h.set_key_len(5);
        h.set_extras_len(0);
        h.set_data_type(0);
        h.set_vbucket(7);
        h.set_body_len(5);
        h.set_opaque(0xdead_beef);
        h.set_cas(1);
        assert_eq!(buf[..], GET_HELLO[..HEADER_LEN]);
    }

    #[test]
    fn response_fields_and_setters() {
        // GET miss: status 1, body "Not found".
        let mut buf = [0xa5; HEADER_LEN];
        let mut h = ResponseHeader::new_unchecked(&mut buf[..]);
        h.set_magic(RESPONSE_MAGIC);
        h.set_opcode(0x00);
        h.set_key_len(0);
        h.set_extras_len(0);
        h.set_data_type(0);
        h.set_status(0x0001);
        h.set_body_len(9);
        h.set_opaque(3);
        h.set_cas(0);
        let h = ResponseHeader::new_checked(&buf[..]).unwrap();
        assert_eq!(h.status(), 1);
        assert_eq!(h.body_len(), 9);
        assert_eq!(h.value_len(), 9);
        assert_eq!(h.frame_len(), 33);
        assert_eq!(h.opaque(), 3);
    }

    #[test]
    fn check_len_short_header() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                RequestHeader::new_checked(&GET_HELLO[..n]).unwrap_err(),
                ParseError::Incomplete {
                    needed: HEADER_LEN - n
                }
            );
        }
        // The body is not the view's business.
        assert!(RequestHeader::new_checked(&GET_HELLO[..HEADER_LEN]).is_ok());
    }

    #[test]
    fn check_len_magic() {
        assert_eq!(
            ResponseHeader::new_checked(&GET_HELLO[..]).unwrap_err(),
            ParseError::Invalid(Invalid::BadMagic(REQUEST_MAGIC))
        );
    }

    #[test]
    fn check_len_lengths() {
        let mut buf = GET_HELLO;
        // key_len 5 + extras_len 1 > body_len 5
        buf[field::EXTRAS_LEN] = 1;
        assert_eq!(
            RequestHeader::new_checked(&buf[..]).unwrap_err(),
            ParseError::Invalid(Invalid::LengthMismatch)
        );
        // Largest lengths do not overflow.
        let mut h = RequestHeader::new_unchecked(&mut buf[..]);
        h.set_key_len(u16::MAX);
        h.set_extras_len(u8::MAX);
        h.set_body_len(u32::MAX);
        assert!(h.check_len().is_ok());
        assert_eq!(h.value_len(), u32::MAX as usize - 65535 - 255);
    }
}
