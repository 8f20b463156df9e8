//! Request and response representations: parse a frame in place, emit one into a buffer.

use super::{
    CounterExtras, ExpirationExtras, HEADER_LEN, Invalid, MAX_KEY_LEN, Opcode, ParseError,
    REQUEST_MAGIC, RESPONSE_MAGIC, RequestHeader, ResponseHeader, Status, StoreExtras,
    VerbosityExtras,
};

/// A parsed request (spec §2 and §4), borrowing extras, key and value from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRepr<'a> {
    /// Base command; quiet opcodes are folded in, with `quiet` set.
    pub opcode: Opcode,
    /// Whether the wire opcode was the quiet variant (GETQ, SETQ, ...).
    pub quiet: bool,
    /// Client's opaque, echoed in the response.
    pub opaque: u32,
    /// Compare-and-swap value (0: none).
    pub cas: u64,
    /// Virtual bucket id (memcached ignores it).
    pub vbucket: u16,
    /// Extras bytes; see the typed extras such as [`super::StoreExtras`].
    pub extras: &'a [u8],
    /// Key bytes.
    pub key: &'a [u8],
    /// Value bytes.
    pub value: &'a [u8],
}

/// A parsed or to-be-emitted response (spec §2 and §4), borrowing extras, key and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseRepr<'a> {
    /// Base command echoed from the request; unknown opcodes are kept as `Unknown`.
    pub opcode: Opcode,
    /// Whether the wire opcode was the quiet variant.
    pub quiet: bool,
    /// Outcome of the command.
    pub status: Status,
    /// Opaque echoed from the request.
    pub opaque: u32,
    /// Compare-and-swap value of the item (0: none).
    pub cas: u64,
    /// Extras bytes; see [`super::FlagsExtras`].
    pub extras: &'a [u8],
    /// Key bytes (GETK, GATK and STAT responses).
    pub key: &'a [u8],
    /// Value bytes (or the error text of a failed command).
    pub value: &'a [u8],
}

/// The extras, key and value lengths a known command's request must have.
///
/// These follow memcached 1.6's `dispatch_bin_command`, with two differences:
/// - STAT, TOUCH, GAT and GATK must carry no value. memcached does not check, and then reads
///   those value bytes as the next frame; here they are a shape error.
/// - VERBOSITY (extras 4, nothing else) is accepted. memcached 1.6 no longer serves it in the
///   binary protocol and answers UNKNOWN_COMMAND; the server decides what to reply.
fn check_shape(
    opcode: Opcode,
    extras_len: u8,
    key_len: u16,
    value_len: u32,
) -> Result<(), Invalid> {
    let extras = usize::from(extras_len);
    let has_key = key_len > 0;
    let no_value = value_len == 0;
    let ok = match opcode {
        Opcode::Get | Opcode::GetK | Opcode::Delete => extras == 0 && has_key && no_value,
        Opcode::Set | Opcode::Add | Opcode::Replace => extras == StoreExtras::LEN && has_key,
        Opcode::Append | Opcode::Prepend => extras == 0 && has_key,
        Opcode::Increment | Opcode::Decrement => {
            extras == CounterExtras::LEN && has_key && no_value
        }
        Opcode::Touch | Opcode::Gat | Opcode::GatK => {
            extras == ExpirationExtras::LEN && has_key && no_value
        }
        Opcode::Flush => (extras == 0 || extras == ExpirationExtras::LEN) && !has_key && no_value,
        Opcode::Noop | Opcode::Version | Opcode::Quit => extras == 0 && !has_key && no_value,
        Opcode::Verbosity => extras == VerbosityExtras::LEN && !has_key && no_value,
        Opcode::Stat => extras == 0 && no_value,
        Opcode::Unknown(_) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Invalid::Shape { opcode })
    }
}

/// Lengths of a frame to emit, as header fields.
///
/// # Panics
/// If extras are longer than 255 bytes, the key longer than 65535 bytes, or the body longer
/// than `u32::MAX` bytes.
fn header_lengths(extras: &[u8], key: &[u8], value: &[u8]) -> (u8, u16, u32) {
    let extras_len = u8::try_from(extras.len()).expect("extras longer than 255 bytes");
    let key_len = u16::try_from(key.len()).expect("key longer than 65535 bytes");
    let body_len = u32::try_from(extras.len() + key.len() + value.len())
        .expect("body longer than u32::MAX bytes");
    (extras_len, key_len, body_len)
}

/// Copies extras, key and value after the header; `buf` is exactly the frame.
#[inline]
fn emit_body(buf: &mut [u8], extras: &[u8], key: &[u8], value: &[u8]) {
    let (extras_buf, rest) = buf[HEADER_LEN..].split_at_mut(extras.len());
    let (key_buf, value_buf) = rest.split_at_mut(key.len());
    extras_buf.copy_from_slice(extras);
    key_buf.copy_from_slice(key);
    value_buf.copy_from_slice(value);
}

/// The first [`HEADER_LEN`] bytes of `buf` as an array.
///
/// # Errors
/// [`ParseError::Incomplete`] with the missing header bytes.
#[inline]
fn first_header(buf: &[u8]) -> Result<&[u8; HEADER_LEN], ParseError> {
    buf.first_chunk().ok_or_else(|| ParseError::Incomplete {
        needed: HEADER_LEN - buf.len(),
    })
}

/// Splits a whole frame (header checked, `buf.len() >= frame_len`) into extras, key and value.
#[inline]
fn split_body(buf: &[u8], extras_len: u8, key_len: u16, frame_len: usize) -> (&[u8], &[u8], &[u8]) {
    let extras_end = HEADER_LEN + usize::from(extras_len);
    let key_end = extras_end + usize::from(key_len);
    (
        &buf[HEADER_LEN..extras_end],
        &buf[extras_end..key_end],
        &buf[key_end..frame_len],
    )
}

/// Appends a header and body to `out` without an intermediate frame buffer.
#[inline]
fn append_frame(
    out: &mut Vec<u8>,
    header: &[u8; HEADER_LEN],
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    out.reserve(HEADER_LEN + extras.len() + key.len() + value.len());
    out.extend_from_slice(header);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

impl<'a> RequestRepr<'a> {
    /// Runs every check of [`parse`](Self::parse) that needs only the 24-byte header, in the
    /// same order, and returns the checked header view.
    ///
    /// `Ok` means the frame is well formed: `parse` will succeed once
    /// [`frame_len`](RequestHeader::frame_len) bytes are in the buffer. Use it to decide about a
    /// frame before its body has arrived (for example, to refuse a value too large to store
    /// without buffering it).
    ///
    /// # Errors
    /// As [`parse`](Self::parse), except that a missing body is not an error.
    #[inline]
    pub fn parse_header(
        buf: &[u8],
        max_body: u32,
    ) -> Result<RequestHeader<&[u8; HEADER_LEN]>, ParseError> {
        // A view over a fixed-size array: field reads need no bounds checks.
        let header = RequestHeader::new_checked(first_header(buf)?)?;
        let key_len = header.key_len();
        if usize::from(key_len) > MAX_KEY_LEN {
            return Err(Invalid::KeyTooLong { key_len }.into());
        }
        let (opcode, _) = Opcode::from_wire(header.opcode());
        if let Opcode::Unknown(byte) = opcode {
            return Err(ParseError::UnknownOpcode {
                opcode: byte,
                opaque: header.opaque(),
                frame_len: header.frame_len(),
            });
        }
        let extras_len = header.extras_len();
        let body_len = header.body_len();
        // check_len guarantees key_len + extras_len <= body_len.
        let value_len = body_len - u32::from(key_len) - u32::from(extras_len);
        check_shape(opcode, extras_len, key_len, value_len)?;
        if body_len > max_body {
            return Err(Invalid::BodyTooLarge { body_len }.into());
        }
        Ok(header)
    }

    /// Parses the first request frame of `buf`; returns it and its length in bytes (spec §2, §4).
    ///
    /// Checks, in this order: a whole header, the magic, `key_len + extras_len <= body_len`,
    /// `key_len <= MAX_KEY_LEN`, a known opcode, the command's extras/key/value shape,
    /// `body_len <= max_body`, and finally that the whole body is in `buf`. Every error but the
    /// last is decided from the header alone ([`parse_header`](Self::parse_header)), so a bad
    /// frame is never waited for. Bytes after the frame are not looked at.
    ///
    /// # Errors
    /// - [`ParseError::Incomplete`] with the bytes missing after `buf` (header, then frame);
    /// - [`ParseError::UnknownOpcode`] for an opcode memcached does not serve;
    /// - [`ParseError::Invalid`] with [`Invalid::BadMagic`], [`Invalid::LengthMismatch`],
    ///   [`Invalid::KeyTooLong`], [`Invalid::Shape`] or [`Invalid::BodyTooLarge`].
    #[inline]
    pub fn parse(buf: &'a [u8], max_body: u32) -> Result<(RequestRepr<'a>, usize), ParseError> {
        let header = Self::parse_header(buf, max_body)?;
        let frame_len = header.frame_len();
        if buf.len() < frame_len {
            return Err(ParseError::Incomplete {
                needed: frame_len - buf.len(),
            });
        }
        let (opcode, quiet) = Opcode::from_wire(header.opcode());
        let (extras, key, value) =
            split_body(buf, header.extras_len(), header.key_len(), frame_len);
        let repr = RequestRepr {
            opcode,
            quiet,
            opaque: header.opaque(),
            cas: header.cas(),
            vbucket: header.vbucket(),
            extras,
            key,
            value,
        };
        Ok((repr, frame_len))
    }

    /// Length of the emitted frame: header, extras, key and value.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.extras.len() + self.key.len() + self.value.len()
    }

    /// Writes the 24-byte header into `header`.
    fn emit_header(&self, header: &mut [u8]) {
        let (extras_len, key_len, body_len) = header_lengths(self.extras, self.key, self.value);
        let mut header = RequestHeader::new_unchecked(header);
        header.set_magic(REQUEST_MAGIC);
        header.set_opcode(self.opcode.to_wire(self.quiet));
        header.set_key_len(key_len);
        header.set_extras_len(extras_len);
        header.set_data_type(0);
        header.set_vbucket(self.vbucket);
        header.set_body_len(body_len);
        header.set_opaque(self.opaque);
        header.set_cas(self.cas);
    }

    /// Writes exactly [`buffer_len`](Self::buffer_len) bytes at the start of `buf` (spec §2).
    ///
    /// # Panics
    /// If `buf` is shorter than `buffer_len()`, or extras, key or body are too long for their
    /// header fields (255, 65535 and `u32::MAX` bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        let frame = &mut buf[..self.buffer_len()];
        self.emit_header(&mut frame[..HEADER_LEN]);
        emit_body(frame, self.extras, self.key, self.value);
    }

    /// Appends the frame to `out` (no temporary buffer).
    ///
    /// # Panics
    /// If extras, key or body are too long for their header fields, as [`emit`](Self::emit).
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        let mut header = [0u8; HEADER_LEN];
        self.emit_header(&mut header);
        append_frame(out, &header, self.extras, self.key, self.value);
    }
}

impl<'a> ResponseRepr<'a> {
    /// Parses the first response frame of `buf`; returns it and its length in bytes (spec §2).
    ///
    /// For clients: checks a whole header, the magic, `key_len + extras_len <= body_len`,
    /// `body_len <= max_body` and that the body is all in `buf`, in that order. No per-command
    /// rules and no key limit apply, and unknown opcodes are kept as [`Opcode::Unknown`]
    /// (a server echoes the opcode of a command it did not know). Bytes after the frame are not
    /// looked at.
    ///
    /// # Errors
    /// - [`ParseError::Incomplete`] with the bytes missing after `buf`;
    /// - [`ParseError::Invalid`] with [`Invalid::BadMagic`], [`Invalid::LengthMismatch`] or
    ///   [`Invalid::BodyTooLarge`].
    #[inline]
    pub fn parse(buf: &'a [u8], max_body: u32) -> Result<(ResponseRepr<'a>, usize), ParseError> {
        let header = ResponseHeader::new_checked(first_header(buf)?)?;
        let body_len = header.body_len();
        if body_len > max_body {
            return Err(Invalid::BodyTooLarge { body_len }.into());
        }
        let frame_len = header.frame_len();
        if buf.len() < frame_len {
            return Err(ParseError::Incomplete {
                needed: frame_len - buf.len(),
            });
        }
        let (opcode, quiet) = Opcode::from_wire(header.opcode());
        let (extras, key, value) =
            split_body(buf, header.extras_len(), header.key_len(), frame_len);
        let repr = ResponseRepr {
            opcode,
            quiet,
            status: Status::from_wire(header.status()),
            opaque: header.opaque(),
            cas: header.cas(),
            extras,
            key,
            value,
        };
        Ok((repr, frame_len))
    }

    /// An error reply to the request whose wire opcode byte and opaque are given, with
    /// memcached's text for `status` as the body (spec §3.2).
    ///
    /// Use it for [`ParseError::UnknownOpcode`] (with [`Status::UnknownCommand`]) and for
    /// [`ParseError::Invalid`] after a whole header (with [`Status::InvalidArguments`]); the
    /// header view gives the opcode byte and opaque.
    pub const fn error(opcode: u8, opaque: u32, status: Status) -> ResponseRepr<'static> {
        let (opcode, quiet) = Opcode::from_wire(opcode);
        ResponseRepr {
            opcode,
            quiet,
            status,
            opaque,
            cas: 0,
            extras: &[],
            key: &[],
            value: status.message().as_bytes(),
        }
    }

    /// Length of the emitted frame: header, extras, key and value.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.extras.len() + self.key.len() + self.value.len()
    }

    /// Writes the 24-byte header into `header`.
    fn emit_header(&self, header: &mut [u8]) {
        let (extras_len, key_len, body_len) = header_lengths(self.extras, self.key, self.value);
        let mut header = ResponseHeader::new_unchecked(header);
        header.set_magic(RESPONSE_MAGIC);
        header.set_opcode(self.opcode.to_wire(self.quiet));
        header.set_key_len(key_len);
        header.set_extras_len(extras_len);
        header.set_data_type(0);
        header.set_status(self.status.to_wire());
        header.set_body_len(body_len);
        header.set_opaque(self.opaque);
        header.set_cas(self.cas);
    }

    /// Writes exactly [`buffer_len`](Self::buffer_len) bytes at the start of `buf` (spec §2).
    ///
    /// # Panics
    /// If `buf` is shorter than `buffer_len()`, or extras, key or body are too long for their
    /// header fields (255, 65535 and `u32::MAX` bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        let frame = &mut buf[..self.buffer_len()];
        self.emit_header(&mut frame[..HEADER_LEN]);
        emit_body(frame, self.extras, self.key, self.value);
    }

    /// Appends the frame to `out` (no temporary buffer).
    ///
    /// # Panics
    /// If extras, key or body are too long for their header fields, as [`emit`](Self::emit).
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        let mut header = [0u8; HEADER_LEN];
        self.emit_header(&mut header);
        append_frame(out, &header, self.extras, self.key, self.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::{CounterExtras, ExpirationExtras, FlagsExtras, StoreExtras};

    const MAX_BODY: u32 = 1 << 20;

    // Request frames, built by hand from the spec (§2 header, §4 commands).

    /// GET "hello", opaque 0xdeadbeef, vbucket 7, cas 0.
    static GET_HELLO: [u8; 29] = [
        0x80, 0x00, 0x00, 0x05, // magic, GET, key_len 5
        0x00, 0x00, 0x00, 0x07, // extras_len 0, data_type 0, vbucket 7
        0x00, 0x00, 0x00, 0x05, // body_len 5
        0xde, 0xad, 0xbe, 0xef, // opaque
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // cas
        b'h', b'e', b'l', b'l', b'o', // key
    ];

    /// SETQ "Hello" = "World", flags 0xdeadbeef, expiration 3600, cas 0x0102030405060708.
    static SETQ_HELLO_WORLD: [u8; 42] = [
        0x80, 0x11, 0x00, 0x05, // magic, SETQ, key_len 5
        0x08, 0x00, 0x00, 0x00, // extras_len 8
        0x00, 0x00, 0x00, 0x12, // body_len 18
        0x00, 0x00, 0x00, 0x02, // opaque 2
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // cas
        0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x0e, 0x10, // flags, expiration
        b'H', b'e', b'l', b'l', b'o', // key
        b'W', b'o', b'r', b'l', b'd', // value
    ];

    /// INCREMENT "counter" by 1, initial 0, expiration 0xffffffff.
    static INCR_COUNTER: [u8; 51] = [
        0x80, 0x05, 0x00, 0x07, // magic, INCREMENT, key_len 7
        0x14, 0x00, 0x00, 0x00, // extras_len 20
        0x00, 0x00, 0x00, 0x1b, // body_len 27
        0x00, 0x00, 0x00, 0x03, // opaque 3
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // cas
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // delta 1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // initial 0
        0xff, 0xff, 0xff, 0xff, // expiration
        b'c', b'o', b'u', b'n', b't', b'e', b'r', // key
    ];

    /// GATKQ "k", expiration 10.
    static GATKQ_K: [u8; 29] = [
        0x80, 0x24, 0x00, 0x01, // magic, GATKQ, key_len 1
        0x04, 0x00, 0x00, 0x00, // extras_len 4
        0x00, 0x00, 0x00, 0x05, // body_len 5
        0x00, 0x00, 0x00, 0x04, // opaque 4
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // cas
        0x00, 0x00, 0x00, 0x0a, // expiration 10
        b'k',
    ];

    /// FLUSHQ with a 60 s delay.
    static FLUSHQ_60: [u8; 28] = [
        0x80, 0x18, 0x00, 0x00, // magic, FLUSHQ, key_len 0
        0x04, 0x00, 0x00, 0x00, // extras_len 4
        0x00, 0x00, 0x00, 0x04, // body_len 4
        0x00, 0x00, 0x00, 0x05, // opaque 5
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // cas
        0x00, 0x00, 0x00, 0x3c, // expiration 60
    ];

    /// NOOP, opaque 6.
    static NOOP: [u8; 24] = [
        0x80, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    /// STAT "items".
    static STAT_ITEMS: [u8; 29] = [
        0x80, 0x10, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x07, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        b'i', b't', b'e', b'm', b's',
    ];

    // Response frames.

    /// GET hit: flags 0xdeadbeef, value "World", cas 1, opaque 0xdeadbeef.
    static GET_HIT_WORLD: [u8; 33] = [
        0x81, 0x00, 0x00, 0x00, // magic, GET, key_len 0
        0x04, 0x00, 0x00, 0x00, // extras_len 4, status 0
        0x00, 0x00, 0x00, 0x09, // body_len 9
        0xde, 0xad, 0xbe, 0xef, // opaque
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // cas
        0xde, 0xad, 0xbe, 0xef, // flags
        b'W', b'o', b'r', b'l', b'd',
    ];

    /// GETKQ hit: flags 0, key "Hello", value "World", cas 2.
    static GETKQ_HIT: [u8; 38] = [
        0x81, 0x0d, 0x00, 0x05, // magic, GETKQ, key_len 5
        0x04, 0x00, 0x00, 0x00, // extras_len 4, status 0
        0x00, 0x00, 0x00, 0x0e, // body_len 14
        0x00, 0x00, 0x00, 0x09, // opaque 9
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, // cas
        0x00, 0x00, 0x00, 0x00, // flags
        b'H', b'e', b'l', b'l', b'o', //
        b'W', b'o', b'r', b'l', b'd',
    ];

    /// GET miss: status KEY_ENOENT, body "Not found".
    static GET_MISS: [u8; 33] = [
        0x81, 0x00, 0x00, 0x00, // magic, GET, key_len 0
        0x00, 0x00, 0x00, 0x01, // extras_len 0, status 1
        0x00, 0x00, 0x00, 0x09, // body_len 9
        0x00, 0x00, 0x00, 0x01, // opaque 1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // cas
        b'N', b'o', b't', b' ', b'f', b'o', b'u', b'n', b'd',
    ];

    /// INCREMENT result 42, cas 5.
    static INCR_42: [u8; 32] = [
        0x81, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x03, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    ];

    /// UNKNOWN_COMMAND reply to opcode 0x42, opaque 0x0a0b0c0d.
    static UNKNOWN_42: [u8; 39] = [
        0x81, 0x42, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, //
        0x00, 0x00, 0x00, 0x0f, 0x0a, 0x0b, 0x0c, 0x0d, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        b'U', b'n', b'k', b'n', b'o', b'w', b'n', b' ', b'c', b'o', b'm', b'm', b'a', b'n', b'd',
    ];

    /// Every request frame above, with its parsed form.
    fn request_frames() -> [(&'static [u8], RequestRepr<'static>); 7] {
        let base = RequestRepr {
            opcode: Opcode::Get,
            quiet: false,
            opaque: 0,
            cas: 0,
            vbucket: 0,
            extras: &[],
            key: &[],
            value: &[],
        };
        [
            (
                &GET_HELLO,
                RequestRepr {
                    opaque: 0xdead_beef,
                    vbucket: 7,
                    key: b"hello",
                    ..base
                },
            ),
            (
                &SETQ_HELLO_WORLD,
                RequestRepr {
                    opcode: Opcode::Set,
                    quiet: true,
                    opaque: 2,
                    cas: 0x0102_0304_0506_0708,
                    extras: &SETQ_HELLO_WORLD[24..32],
                    key: b"Hello",
                    value: b"World",
                    ..base
                },
            ),
            (
                &INCR_COUNTER,
                RequestRepr {
                    opcode: Opcode::Increment,
                    opaque: 3,
                    extras: &INCR_COUNTER[24..44],
                    key: b"counter",
                    ..base
                },
            ),
            (
                &GATKQ_K,
                RequestRepr {
                    opcode: Opcode::GatK,
                    quiet: true,
                    opaque: 4,
                    extras: &[0, 0, 0, 10],
                    key: b"k",
                    ..base
                },
            ),
            (
                &FLUSHQ_60,
                RequestRepr {
                    opcode: Opcode::Flush,
                    quiet: true,
                    opaque: 5,
                    extras: &[0, 0, 0, 60],
                    ..base
                },
            ),
            (
                &NOOP,
                RequestRepr {
                    opcode: Opcode::Noop,
                    opaque: 6,
                    ..base
                },
            ),
            (
                &STAT_ITEMS,
                RequestRepr {
                    opcode: Opcode::Stat,
                    opaque: 7,
                    key: b"items",
                    ..base
                },
            ),
        ]
    }

    /// Every response frame above, with its parsed form.
    fn response_frames() -> [(&'static [u8], ResponseRepr<'static>); 5] {
        let base = ResponseRepr {
            opcode: Opcode::Get,
            quiet: false,
            status: Status::NoError,
            opaque: 0,
            cas: 0,
            extras: &[],
            key: &[],
            value: &[],
        };
        [
            (
                &GET_HIT_WORLD,
                ResponseRepr {
                    opaque: 0xdead_beef,
                    cas: 1,
                    extras: &[0xde, 0xad, 0xbe, 0xef],
                    value: b"World",
                    ..base
                },
            ),
            (
                &GETKQ_HIT,
                ResponseRepr {
                    opcode: Opcode::GetK,
                    quiet: true,
                    opaque: 9,
                    cas: 2,
                    extras: &[0; 4],
                    key: b"Hello",
                    value: b"World",
                    ..base
                },
            ),
            (
                &GET_MISS,
                ResponseRepr {
                    status: Status::KeyNotFound,
                    opaque: 1,
                    value: b"Not found",
                    ..base
                },
            ),
            (
                &INCR_42,
                ResponseRepr {
                    opcode: Opcode::Increment,
                    opaque: 3,
                    cas: 5,
                    value: &[0, 0, 0, 0, 0, 0, 0, 42],
                    ..base
                },
            ),
            (
                &UNKNOWN_42,
                ResponseRepr::error(0x42, 0x0a0b_0c0d, Status::UnknownCommand),
            ),
        ]
    }

    #[track_caller]
    fn parse_request(buf: &[u8]) -> Result<(RequestRepr<'_>, usize), ParseError> {
        RequestRepr::parse(buf, MAX_BODY)
    }

    #[test]
    fn get_hello_field_by_field() {
        let (repr, len) = parse_request(&GET_HELLO).unwrap();
        assert_eq!(len, 29);
        assert_eq!(repr.opcode, Opcode::Get);
        assert!(!repr.quiet);
        assert_eq!(repr.opaque, 0xdead_beef);
        assert_eq!(repr.cas, 0);
        assert_eq!(repr.vbucket, 7);
        assert_eq!(repr.extras, b"");
        assert_eq!(repr.key, b"hello");
        assert_eq!(repr.value, b"");
        // Borrowed in place, not copied.
        assert_eq!(repr.key.as_ptr(), GET_HELLO[24..].as_ptr());
    }

    #[test]
    fn setq_field_by_field() {
        let (repr, len) = parse_request(&SETQ_HELLO_WORLD).unwrap();
        assert_eq!(len, 42);
        assert_eq!((repr.opcode, repr.quiet), (Opcode::Set, true));
        assert_eq!(repr.opaque, 2);
        assert_eq!(repr.cas, 0x0102_0304_0506_0708);
        assert_eq!(
            StoreExtras::parse(repr.extras),
            Some(StoreExtras {
                flags: 0xdead_beef,
                expiration: 3600
            })
        );
        assert_eq!(repr.key, b"Hello");
        assert_eq!(repr.value, b"World");
    }

    #[test]
    fn incr_gatkq_flush_field_by_field() {
        let (repr, _) = parse_request(&INCR_COUNTER).unwrap();
        assert_eq!((repr.opcode, repr.quiet), (Opcode::Increment, false));
        assert_eq!(
            CounterExtras::parse(repr.extras),
            Some(CounterExtras {
                delta: 1,
                initial: 0,
                expiration: u32::MAX
            })
        );
        assert_eq!(repr.key, b"counter");
        assert_eq!(repr.value, b"");

        let (repr, _) = parse_request(&GATKQ_K).unwrap();
        assert_eq!((repr.opcode, repr.quiet), (Opcode::GatK, true));
        assert_eq!(
            ExpirationExtras::parse(repr.extras),
            Some(ExpirationExtras { expiration: 10 })
        );
        assert_eq!(repr.key, b"k");

        let (repr, _) = parse_request(&FLUSHQ_60).unwrap();
        assert_eq!((repr.opcode, repr.quiet), (Opcode::Flush, true));
        assert_eq!(
            ExpirationExtras::parse(repr.extras),
            Some(ExpirationExtras { expiration: 60 })
        );
        assert_eq!(repr.key, b"");
    }

    #[test]
    fn get_hit_response_field_by_field() {
        let (repr, len) = ResponseRepr::parse(&GET_HIT_WORLD, MAX_BODY).unwrap();
        assert_eq!(len, 33);
        assert_eq!((repr.opcode, repr.quiet), (Opcode::Get, false));
        assert_eq!(repr.status, Status::NoError);
        assert_eq!(repr.opaque, 0xdead_beef);
        assert_eq!(repr.cas, 1);
        assert_eq!(
            FlagsExtras::parse(repr.extras),
            Some(FlagsExtras { flags: 0xdead_beef })
        );
        assert_eq!(repr.key, b"");
        assert_eq!(repr.value, b"World");
    }

    #[test]
    fn getkq_miss_incr_unknown_responses_field_by_field() {
        let (repr, _) = ResponseRepr::parse(&GETKQ_HIT, MAX_BODY).unwrap();
        assert_eq!((repr.opcode, repr.quiet), (Opcode::GetK, true));
        assert_eq!((repr.key, repr.value), (&b"Hello"[..], &b"World"[..]));
        assert_eq!(repr.cas, 2);

        let (repr, _) = ResponseRepr::parse(&GET_MISS, MAX_BODY).unwrap();
        assert_eq!(repr.status, Status::KeyNotFound);
        assert_eq!(repr.value, Status::KeyNotFound.message().as_bytes());

        let (repr, _) = ResponseRepr::parse(&INCR_42, MAX_BODY).unwrap();
        assert_eq!(repr.opcode, Opcode::Increment);
        assert_eq!(u64::from_be_bytes(repr.value.try_into().unwrap()), 42);

        let (repr, _) = ResponseRepr::parse(&UNKNOWN_42, MAX_BODY).unwrap();
        assert_eq!((repr.opcode, repr.quiet), (Opcode::Unknown(0x42), false));
        assert_eq!(repr.status, Status::UnknownCommand);
        assert_eq!(repr.opaque, 0x0a0b_0c0d);
        assert_eq!(repr.value, b"Unknown command");
    }

    #[test]
    fn captured_frames_parse_and_emit() {
        for (bytes, expected) in request_frames() {
            assert_eq!(parse_request(bytes), Ok((expected, bytes.len())));
            assert_eq!(expected.buffer_len(), bytes.len());
            let mut buf = vec![0xa5; expected.buffer_len()];
            expected.emit(&mut buf);
            assert_eq!(buf, bytes, "{expected:?}");
            let mut out = vec![0x11, 0x22];
            expected.emit_into(&mut out);
            assert_eq!(out[..2], [0x11, 0x22]);
            assert_eq!(out[2..], *bytes);
        }
        for (bytes, expected) in response_frames() {
            assert_eq!(
                ResponseRepr::parse(bytes, MAX_BODY),
                Ok((expected, bytes.len()))
            );
            assert_eq!(expected.buffer_len(), bytes.len());
            let mut buf = vec![0xa5; expected.buffer_len()];
            expected.emit(&mut buf);
            assert_eq!(buf, bytes, "{expected:?}");
            let mut out = vec![0x33];
            expected.emit_into(&mut out);
            assert_eq!(out[..1], [0x33]);
            assert_eq!(out[1..], *bytes);
        }
    }

    #[test]
    fn emit_leaves_bytes_after_the_frame_alone() {
        let (repr, len) = parse_request(&SETQ_HELLO_WORLD).unwrap();
        let mut buf = vec![0xa5; len + 8];
        repr.emit(&mut buf);
        assert_eq!(buf[..len], SETQ_HELLO_WORLD);
        assert_eq!(buf[len..], [0xa5; 8]);
    }

    #[test]
    #[should_panic]
    fn emit_into_short_buffer_panics() {
        let (repr, len) = parse_request(&GET_HELLO).unwrap();
        repr.emit(&mut vec![0; len - 1]);
    }

    #[test]
    fn every_truncation_is_incomplete() {
        for (bytes, _) in request_frames() {
            for n in 0..bytes.len() {
                let needed = if n < HEADER_LEN {
                    HEADER_LEN - n
                } else {
                    bytes.len() - n
                };
                assert_eq!(
                    parse_request(&bytes[..n]),
                    Err(ParseError::Incomplete { needed }),
                    "{n} bytes of {bytes:02x?}"
                );
            }
        }
        for (bytes, _) in response_frames() {
            for n in 0..bytes.len() {
                let needed = if n < HEADER_LEN {
                    HEADER_LEN - n
                } else {
                    bytes.len() - n
                };
                assert_eq!(
                    ResponseRepr::parse(&bytes[..n], MAX_BODY),
                    Err(ParseError::Incomplete { needed }),
                    "{n} bytes of {bytes:02x?}"
                );
            }
        }
    }

    #[test]
    fn bad_magic() {
        let mut frame = GET_HELLO;
        frame[0] = b'g'; // a text "get" on a binary connection
        assert_eq!(
            parse_request(&frame),
            Err(ParseError::Invalid(Invalid::BadMagic(b'g')))
        );
        // A response is not a request, nor the other way round.
        assert_eq!(
            parse_request(&GET_HIT_WORLD),
            Err(ParseError::Invalid(Invalid::BadMagic(RESPONSE_MAGIC)))
        );
        assert_eq!(
            ResponseRepr::parse(&GET_HELLO, MAX_BODY),
            Err(ParseError::Invalid(Invalid::BadMagic(REQUEST_MAGIC)))
        );
        // Decided from the header alone.
        assert_eq!(
            parse_request(&frame[..HEADER_LEN]),
            Err(ParseError::Invalid(Invalid::BadMagic(b'g')))
        );
    }

    #[test]
    fn length_mismatch() {
        let mut frame = SETQ_HELLO_WORLD;
        RequestHeader::new_unchecked(&mut frame[..]).set_body_len(12); // < 8 + 5
        assert_eq!(
            parse_request(&frame),
            Err(ParseError::Invalid(Invalid::LengthMismatch))
        );
        let mut frame = GETKQ_HIT;
        ResponseHeader::new_unchecked(&mut frame[..]).set_key_len(11); // 4 + 11 > 14
        assert_eq!(
            ResponseRepr::parse(&frame, MAX_BODY),
            Err(ParseError::Invalid(Invalid::LengthMismatch))
        );
    }

    #[test]
    fn key_too_long() {
        let key = [b'k'; MAX_KEY_LEN + 1];
        let long = RequestRepr {
            opcode: Opcode::Get,
            quiet: false,
            opaque: 0,
            cas: 0,
            vbucket: 0,
            extras: &[],
            key: &key,
            value: &[],
        };
        let mut frame = Vec::new();
        long.emit_into(&mut frame);
        assert_eq!(
            parse_request(&frame),
            Err(ParseError::Invalid(Invalid::KeyTooLong { key_len: 251 }))
        );
        // Header alone is enough, and the limit wins over an unknown opcode.
        frame[1] = 0x42;
        assert_eq!(
            parse_request(&frame[..HEADER_LEN]),
            Err(ParseError::Invalid(Invalid::KeyTooLong { key_len: 251 }))
        );
        // 250 is fine.
        let ok = RequestRepr {
            key: &key[..MAX_KEY_LEN],
            ..long
        };
        frame.clear();
        ok.emit_into(&mut frame);
        assert_eq!(parse_request(&frame), Ok((ok, frame.len())));
        // Responses carry no key limit.
        let response = ResponseRepr {
            opcode: Opcode::GetK,
            quiet: false,
            status: Status::NoError,
            opaque: 0,
            cas: 0,
            extras: &[],
            key: &key,
            value: &[],
        };
        frame.clear();
        response.emit_into(&mut frame);
        assert_eq!(
            ResponseRepr::parse(&frame, MAX_BODY),
            Ok((response, frame.len()))
        );
    }

    #[test]
    fn unknown_opcode_is_skippable() {
        // SASL_LIST_MECHS (0x20) with a 3-byte body, then a NOOP.
        let mut stream = vec![
            0x80, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
            0x00, 0x00, 0x00, 0x03, 0x0a, 0x0b, 0x0c, 0x0d, //
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
            1, 2, 3,
        ];
        stream.extend_from_slice(&NOOP);
        let unknown = ParseError::UnknownOpcode {
            opcode: 0x20,
            opaque: 0x0a0b_0c0d,
            frame_len: 27,
        };
        assert_eq!(parse_request(&stream), Err(unknown));
        // Known from the header alone, body not yet here.
        assert_eq!(parse_request(&stream[..HEADER_LEN]), Err(unknown));
        let ParseError::UnknownOpcode { frame_len, .. } = unknown else {
            unreachable!()
        };
        assert_eq!(
            parse_request(&stream[frame_len..]),
            Ok((request_frames()[5].1, NOOP.len()))
        );
        // The reply echoes the byte and the opaque.
        let reply = ResponseRepr::error(0x20, 0x0a0b_0c0d, Status::UnknownCommand);
        assert_eq!((reply.opcode, reply.quiet), (Opcode::Unknown(0x20), false));
        assert_eq!(reply.value, b"Unknown command");
        // An unknown opcode is reported even when its body is over the limit, so it can be skipped.
        RequestHeader::new_unchecked(&mut stream[..]).set_body_len(u32::MAX);
        assert_eq!(
            parse_request(&stream),
            Err(ParseError::UnknownOpcode {
                opcode: 0x20,
                opaque: 0x0a0b_0c0d,
                frame_len: HEADER_LEN + u32::MAX as usize,
            })
        );
    }

    #[test]
    fn body_too_large_is_immediate() {
        // SET header declaring a 2 GiB body: rejected from 24 bytes, nothing waited for.
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&SETQ_HELLO_WORLD[..HEADER_LEN]);
        RequestHeader::new_unchecked(&mut header[..]).set_body_len(1 << 31);
        assert_eq!(
            parse_request(&header),
            Err(ParseError::Invalid(Invalid::BodyTooLarge {
                body_len: 1 << 31
            }))
        );
        // Limit is inclusive: body_len == max_body is accepted.
        assert_eq!(
            RequestRepr::parse(&SETQ_HELLO_WORLD, 18),
            Ok(parse_request(&SETQ_HELLO_WORLD).unwrap())
        );
        assert_eq!(
            RequestRepr::parse(&SETQ_HELLO_WORLD, 17),
            Err(ParseError::Invalid(Invalid::BodyTooLarge { body_len: 18 }))
        );
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&GET_HIT_WORLD[..HEADER_LEN]);
        ResponseHeader::new_unchecked(&mut header[..]).set_body_len(1 << 31);
        assert_eq!(
            ResponseRepr::parse(&header, MAX_BODY),
            Err(ParseError::Invalid(Invalid::BodyTooLarge {
                body_len: 1 << 31
            }))
        );
    }

    /// Header of a request with the given wire opcode and lengths; the body need not follow.
    fn header(opcode: u8, extras_len: u8, key_len: u16, value_len: u32) -> [u8; HEADER_LEN] {
        let mut buf = [0u8; HEADER_LEN];
        let mut h = RequestHeader::new_unchecked(&mut buf[..]);
        h.set_magic(REQUEST_MAGIC);
        h.set_opcode(opcode);
        h.set_extras_len(extras_len);
        h.set_key_len(key_len);
        h.set_body_len(u32::from(extras_len) + u32::from(key_len) + value_len);
        buf
    }

    #[test]
    fn shape_rules() {
        // (opcode, extras_len, key_len, value_len) that memcached accepts.
        let accepted: &[(Opcode, u8, u16, u32)] = &[
            (Opcode::Get, 0, 1, 0),
            (Opcode::GetK, 0, 250, 0),
            (Opcode::Set, 8, 1, 0),
            (Opcode::Add, 8, 5, 100),
            (Opcode::Replace, 8, 5, 1),
            (Opcode::Append, 0, 1, 0),
            (Opcode::Prepend, 0, 1, 9),
            (Opcode::Delete, 0, 3, 0),
            (Opcode::Increment, 20, 3, 0),
            (Opcode::Decrement, 20, 3, 0),
            (Opcode::Touch, 4, 3, 0),
            (Opcode::Gat, 4, 3, 0),
            (Opcode::GatK, 4, 3, 0),
            (Opcode::Flush, 0, 0, 0),
            (Opcode::Flush, 4, 0, 0),
            (Opcode::Noop, 0, 0, 0),
            (Opcode::Version, 0, 0, 0),
            (Opcode::Quit, 0, 0, 0),
            (Opcode::Verbosity, 4, 0, 0),
            (Opcode::Stat, 0, 0, 0),
            (Opcode::Stat, 0, 5, 0),
        ];
        let rejected: &[(Opcode, u8, u16, u32)] = &[
            (Opcode::Get, 0, 0, 0),
            (Opcode::Get, 4, 1, 0),
            (Opcode::Get, 0, 1, 1),
            (Opcode::GetK, 0, 0, 0),
            (Opcode::Set, 0, 1, 5),
            (Opcode::Set, 8, 0, 5),
            (Opcode::Add, 4, 1, 0),
            (Opcode::Replace, 12, 1, 0),
            (Opcode::Append, 8, 1, 5),
            (Opcode::Prepend, 0, 0, 5),
            (Opcode::Delete, 0, 0, 0),
            (Opcode::Delete, 0, 1, 1),
            (Opcode::Delete, 4, 1, 0),
            (Opcode::Increment, 8, 1, 0),
            (Opcode::Increment, 20, 0, 0),
            (Opcode::Decrement, 20, 1, 8),
            (Opcode::Touch, 0, 1, 0),
            (Opcode::Touch, 4, 0, 0),
            (Opcode::Gat, 4, 1, 1),
            (Opcode::GatK, 8, 1, 0),
            (Opcode::Flush, 8, 0, 0),
            (Opcode::Flush, 0, 1, 0),
            (Opcode::Flush, 4, 0, 4),
            (Opcode::Noop, 0, 0, 1),
            (Opcode::Version, 0, 1, 0),
            (Opcode::Quit, 4, 0, 0),
            (Opcode::Verbosity, 0, 0, 0),
            (Opcode::Verbosity, 4, 1, 0),
            (Opcode::Verbosity, 4, 0, 4),
            (Opcode::Stat, 4, 0, 0),
            (Opcode::Stat, 0, 5, 3),
        ];
        for &(opcode, extras_len, key_len, value_len) in accepted {
            for quiet in [false, true] {
                let h = header(opcode.to_wire(quiet), extras_len, key_len, value_len);
                let body_len = (u32::from(extras_len) + u32::from(key_len) + value_len) as usize;
                let mut frame = h.to_vec();
                // The header alone passes every check; only the body is missing.
                if body_len > 0 {
                    assert_eq!(
                        parse_request(&frame),
                        Err(ParseError::Incomplete { needed: body_len }),
                        "{opcode:?} {extras_len} {key_len} {value_len}"
                    );
                }
                frame.resize(HEADER_LEN + body_len, b'x');
                let (repr, len) = parse_request(&frame).unwrap();
                assert_eq!(len, frame.len());
                assert_eq!(
                    (repr.opcode, repr.quiet),
                    (opcode, quiet && opcode.has_quiet_form())
                );
                assert_eq!(repr.extras.len(), usize::from(extras_len));
                assert_eq!(repr.key.len(), usize::from(key_len));
                assert_eq!(repr.value.len(), value_len as usize);
            }
        }
        for &(opcode, extras_len, key_len, value_len) in rejected {
            for quiet in [false, true] {
                let h = header(opcode.to_wire(quiet), extras_len, key_len, value_len);
                assert_eq!(
                    parse_request(&h),
                    Err(ParseError::Invalid(Invalid::Shape { opcode })),
                    "{opcode:?} quiet={quiet} {extras_len} {key_len} {value_len}"
                );
            }
        }
        // Every known opcode has at least one accepted shape in the table.
        for opcode in Opcode::KNOWN {
            assert!(accepted.iter().any(|&(o, ..)| o == opcode), "{opcode:?}");
        }
    }

    #[test]
    fn parse_header_decides_without_the_body() {
        for (bytes, repr) in request_frames() {
            let header = RequestRepr::parse_header(&bytes[..HEADER_LEN], MAX_BODY).unwrap();
            assert_eq!(header.frame_len(), bytes.len());
            assert_eq!(
                Opcode::from_wire(header.opcode()),
                (repr.opcode, repr.quiet)
            );
        }
        // Same errors as parse, from the header alone.
        let unknown = header(0x42, 0, 0, 10);
        assert_eq!(
            RequestRepr::parse_header(&unknown, MAX_BODY),
            Err(ParseError::UnknownOpcode {
                opcode: 0x42,
                opaque: 0,
                frame_len: 34
            })
        );
        let huge = header(0x01, 8, 3, 1 << 31);
        assert_eq!(
            RequestRepr::parse_header(&huge, MAX_BODY).unwrap_err(),
            ParseError::Invalid(Invalid::BodyTooLarge {
                body_len: (1 << 31) + 11
            })
        );
        assert_eq!(
            RequestRepr::parse_header(&huge, u32::MAX)
                .unwrap()
                .value_len(),
            1 << 31
        );
        assert_eq!(
            RequestRepr::parse_header(&huge[..10], MAX_BODY),
            Err(ParseError::Incomplete { needed: 14 })
        );
    }

    #[test]
    fn shape_is_checked_before_body_size() {
        // A GET with a huge value is a shape error, not "too large" and not "incomplete".
        let h = header(0x00, 0, 3, 1 << 31);
        assert_eq!(
            parse_request(&h),
            Err(ParseError::Invalid(Invalid::Shape {
                opcode: Opcode::Get
            }))
        );
    }

    #[test]
    fn error_reply() {
        let reply = ResponseRepr::error(0x11, 9, Status::InvalidArguments);
        assert_eq!((reply.opcode, reply.quiet), (Opcode::Set, true));
        let mut out = Vec::new();
        reply.emit_into(&mut out);
        let h = ResponseHeader::new_checked(&out[..]).unwrap();
        assert_eq!(h.opcode(), 0x11);
        assert_eq!(h.status(), 0x0004);
        assert_eq!(h.opaque(), 9);
        assert_eq!(&out[HEADER_LEN..], b"Invalid arguments");
    }
}
