//! Request and response representations: parse a frame in place, emit one into a buffer.

use super::{
    HEADER_LEN, Invalid, MAX_KEY_LEN, Opcode, ParseError, REQUEST_MAGIC, RESPONSE_MAGIC,
    RequestHeader, ResponseHeader, Status,
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

/// The extras, key and value lengths a known command's request must have (memcached 1.6
/// `dispatch_bin_command`; stricter where memcached would read a value as the next frame).
fn check_shape(
    opcode: Opcode,
    extras_len: u8,
    key_len: u16,
    value_len: u32,
) -> Result<(), Invalid> {
    let has_key = key_len > 0;
    let ok = match opcode {
        Opcode::Get | Opcode::GetK | Opcode::Delete => extras_len == 0 && has_key && value_len == 0,
        Opcode::Set | Opcode::Add | Opcode::Replace => extras_len == 8 && has_key,
        Opcode::Append | Opcode::Prepend => extras_len == 0 && has_key,
        Opcode::Increment | Opcode::Decrement => extras_len == 20 && has_key && value_len == 0,
        Opcode::Touch | Opcode::Gat | Opcode::GatK => extras_len == 4 && has_key && value_len == 0,
        Opcode::Flush => (extras_len == 0 || extras_len == 4) && !has_key && value_len == 0,
        Opcode::Noop | Opcode::Version | Opcode::Quit => {
            extras_len == 0 && !has_key && value_len == 0
        }
        Opcode::Verbosity => extras_len == 4 && !has_key && value_len == 0,
        Opcode::Stat => extras_len == 0 && value_len == 0,
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
    /// Parses the first request frame of `buf`; returns it and its length in bytes (spec §2, §4).
    ///
    /// Checks, in this order: a whole header, the magic, `key_len + extras_len <= body_len`,
    /// `key_len <= MAX_KEY_LEN`, a known opcode, the command's extras/key/value shape,
    /// `body_len <= max_body`, and finally that the whole body is in `buf`. Every error but the
    /// last is decided from the header alone, so a bad frame is never waited for. Bytes after
    /// the frame are not looked at.
    ///
    /// # Errors
    /// - [`ParseError::Incomplete`] with the bytes missing after `buf` (header, then frame);
    /// - [`ParseError::UnknownOpcode`] for an opcode memcached does not serve;
    /// - [`ParseError::Invalid`] with [`Invalid::BadMagic`], [`Invalid::LengthMismatch`],
    ///   [`Invalid::KeyTooLong`], [`Invalid::Shape`] or [`Invalid::BodyTooLarge`].
    #[inline]
    pub fn parse(buf: &'a [u8], max_body: u32) -> Result<(RequestRepr<'a>, usize), ParseError> {
        let header = RequestHeader::new_checked(buf)?;
        let key_len = header.key_len();
        if usize::from(key_len) > MAX_KEY_LEN {
            return Err(Invalid::KeyTooLong { key_len }.into());
        }
        let (opcode, quiet) = Opcode::from_wire(header.opcode());
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
        let frame_len = header.frame_len();
        if buf.len() < frame_len {
            return Err(ParseError::Incomplete {
                needed: frame_len - buf.len(),
            });
        }
        let (extras, key, value) = split_body(buf, extras_len, key_len, frame_len);
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
        let header = ResponseHeader::new_checked(buf)?;
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
