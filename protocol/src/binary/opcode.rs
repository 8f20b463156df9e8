//! Command opcodes (spec §3.3) and response status codes (spec §3.2).

/// A command, with quiet wire opcodes folded into their base command (spec §3.3).
///
/// [`Opcode::from_wire`] returns the quiet flag beside the opcode, so GETQ (0x09) is
/// `(Opcode::Get, true)`. Bytes that name no command memcached serves become
/// `Unknown(byte)` and survive a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// GET 0x00, GETQ 0x09.
    Get,
    /// SET 0x01, SETQ 0x11.
    Set,
    /// ADD 0x02, ADDQ 0x12.
    Add,
    /// REPLACE 0x03, REPLACEQ 0x13.
    Replace,
    /// DELETE 0x04, DELETEQ 0x14.
    Delete,
    /// INCREMENT 0x05, INCREMENTQ 0x15.
    Increment,
    /// DECREMENT 0x06, DECREMENTQ 0x16.
    Decrement,
    /// QUIT 0x07, QUITQ 0x17.
    Quit,
    /// FLUSH 0x08, FLUSHQ 0x18.
    Flush,
    /// NOOP 0x0a.
    Noop,
    /// VERSION 0x0b.
    Version,
    /// GETK 0x0c, GETKQ 0x0d.
    GetK,
    /// APPEND 0x0e, APPENDQ 0x19.
    Append,
    /// PREPEND 0x0f, PREPENDQ 0x1a.
    Prepend,
    /// STAT 0x10.
    Stat,
    /// VERBOSITY 0x1b.
    Verbosity,
    /// TOUCH 0x1c.
    Touch,
    /// GAT 0x1d, GATQ 0x1e.
    Gat,
    /// GATK 0x23, GATKQ 0x24.
    GatK,
    /// Any other byte (SASL 0x20-0x22, range ops, unassigned), kept as sent.
    Unknown(u8),
}

impl Opcode {
    /// Every known opcode, in wire order of its plain byte (for tests and tables).
    pub const KNOWN: [Opcode; 19] = [
        Opcode::Get,
        Opcode::Set,
        Opcode::Add,
        Opcode::Replace,
        Opcode::Delete,
        Opcode::Increment,
        Opcode::Decrement,
        Opcode::Quit,
        Opcode::Flush,
        Opcode::Noop,
        Opcode::Version,
        Opcode::GetK,
        Opcode::Append,
        Opcode::Prepend,
        Opcode::Stat,
        Opcode::Verbosity,
        Opcode::Touch,
        Opcode::Gat,
        Opcode::GatK,
    ];

    /// Decodes a wire opcode byte into its base command and quiet flag (spec §3.3).
    pub const fn from_wire(byte: u8) -> (Opcode, bool) {
        match byte {
            0x00 => (Opcode::Get, false),
            0x01 => (Opcode::Set, false),
            0x02 => (Opcode::Add, false),
            0x03 => (Opcode::Replace, false),
            0x04 => (Opcode::Delete, false),
            0x05 => (Opcode::Increment, false),
            0x06 => (Opcode::Decrement, false),
            0x07 => (Opcode::Quit, false),
            0x08 => (Opcode::Flush, false),
            0x09 => (Opcode::Get, true),
            0x0a => (Opcode::Noop, false),
            0x0b => (Opcode::Version, false),
            0x0c => (Opcode::GetK, false),
            0x0d => (Opcode::GetK, true),
            0x0e => (Opcode::Append, false),
            0x0f => (Opcode::Prepend, false),
            0x10 => (Opcode::Stat, false),
            0x11 => (Opcode::Set, true),
            0x12 => (Opcode::Add, true),
            0x13 => (Opcode::Replace, true),
            0x14 => (Opcode::Delete, true),
            0x15 => (Opcode::Increment, true),
            0x16 => (Opcode::Decrement, true),
            0x17 => (Opcode::Quit, true),
            0x18 => (Opcode::Flush, true),
            0x19 => (Opcode::Append, true),
            0x1a => (Opcode::Prepend, true),
            0x1b => (Opcode::Verbosity, false),
            0x1c => (Opcode::Touch, false),
            0x1d => (Opcode::Gat, false),
            0x1e => (Opcode::Gat, true),
            0x23 => (Opcode::GatK, false),
            0x24 => (Opcode::GatK, true),
            other => (Opcode::Unknown(other), false),
        }
    }

    /// Encodes the command as a wire byte, the quiet form if `quiet` and one exists (spec §3.3).
    ///
    /// `Unknown(b)` encodes as `b`; `quiet` on a command without a quiet form is ignored.
    pub const fn to_wire(self, quiet: bool) -> u8 {
        match (self, quiet) {
            (Opcode::Get, false) => 0x00,
            (Opcode::Get, true) => 0x09,
            (Opcode::Set, false) => 0x01,
            (Opcode::Set, true) => 0x11,
            (Opcode::Add, false) => 0x02,
            (Opcode::Add, true) => 0x12,
            (Opcode::Replace, false) => 0x03,
            (Opcode::Replace, true) => 0x13,
            (Opcode::Delete, false) => 0x04,
            (Opcode::Delete, true) => 0x14,
            (Opcode::Increment, false) => 0x05,
            (Opcode::Increment, true) => 0x15,
            (Opcode::Decrement, false) => 0x06,
            (Opcode::Decrement, true) => 0x16,
            (Opcode::Quit, false) => 0x07,
            (Opcode::Quit, true) => 0x17,
            (Opcode::Flush, false) => 0x08,
            (Opcode::Flush, true) => 0x18,
            (Opcode::Noop, _) => 0x0a,
            (Opcode::Version, _) => 0x0b,
            (Opcode::GetK, false) => 0x0c,
            (Opcode::GetK, true) => 0x0d,
            (Opcode::Append, false) => 0x0e,
            (Opcode::Append, true) => 0x19,
            (Opcode::Prepend, false) => 0x0f,
            (Opcode::Prepend, true) => 0x1a,
            (Opcode::Stat, _) => 0x10,
            (Opcode::Verbosity, _) => 0x1b,
            (Opcode::Touch, _) => 0x1c,
            (Opcode::Gat, false) => 0x1d,
            (Opcode::Gat, true) => 0x1e,
            (Opcode::GatK, false) => 0x23,
            (Opcode::GatK, true) => 0x24,
            (Opcode::Unknown(byte), _) => byte,
        }
    }

    /// Whether the command has a quiet wire opcode (GETQ, SETQ, ...).
    pub const fn has_quiet_form(self) -> bool {
        !matches!(
            self,
            Opcode::Noop
                | Opcode::Version
                | Opcode::Stat
                | Opcode::Verbosity
                | Opcode::Touch
                | Opcode::Unknown(_)
        )
    }
}

/// Response status (spec §3.2), with codes memcached does not send here kept as `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// 0x0000: no error.
    NoError,
    /// 0x0001: key not found.
    KeyNotFound,
    /// 0x0002: key exists (or CAS mismatch).
    KeyExists,
    /// 0x0003: value too large.
    ValueTooLarge,
    /// 0x0004: invalid arguments.
    InvalidArguments,
    /// 0x0005: item not stored.
    ItemNotStored,
    /// 0x0006: incr/decr on a non-numeric value.
    NonNumeric,
    /// 0x0081: unknown command.
    UnknownCommand,
    /// 0x0082: out of memory.
    OutOfMemory,
    /// Any other code (SASL 0x20/0x21, vbucket 0x07, ...), kept as sent.
    Unknown(u16),
}

impl Status {
    /// Decodes a wire status code (spec §3.2).
    pub const fn from_wire(v: u16) -> Status {
        match v {
            0x0000 => Status::NoError,
            0x0001 => Status::KeyNotFound,
            0x0002 => Status::KeyExists,
            0x0003 => Status::ValueTooLarge,
            0x0004 => Status::InvalidArguments,
            0x0005 => Status::ItemNotStored,
            0x0006 => Status::NonNumeric,
            0x0081 => Status::UnknownCommand,
            0x0082 => Status::OutOfMemory,
            other => Status::Unknown(other),
        }
    }

    /// Encodes the status as a wire code (spec §3.2).
    pub const fn to_wire(self) -> u16 {
        match self {
            Status::NoError => 0x0000,
            Status::KeyNotFound => 0x0001,
            Status::KeyExists => 0x0002,
            Status::ValueTooLarge => 0x0003,
            Status::InvalidArguments => 0x0004,
            Status::ItemNotStored => 0x0005,
            Status::NonNumeric => 0x0006,
            Status::UnknownCommand => 0x0081,
            Status::OutOfMemory => 0x0082,
            Status::Unknown(v) => v,
        }
    }

    /// The body text memcached sends with this status as an error ("" for `NoError` and `Unknown`).
    pub const fn message(self) -> &'static str {
        match self {
            Status::NoError | Status::Unknown(_) => "",
            Status::KeyNotFound => "Not found",
            Status::KeyExists => "Data exists for key.",
            Status::ValueTooLarge => "Too large.",
            Status::InvalidArguments => "Invalid arguments",
            Status::ItemNotStored => "Not stored.",
            Status::NonNumeric => "Non-numeric server-side value for incr or decr",
            Status::UnknownCommand => "Unknown command",
            Status::OutOfMemory => "Out of memory",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (wire byte, opcode, quiet) for every byte memcached's protocol_binary.h names and we serve.
    const WIRE: [(u8, Opcode, bool); 33] = [
        (0x00, Opcode::Get, false),
        (0x01, Opcode::Set, false),
        (0x02, Opcode::Add, false),
        (0x03, Opcode::Replace, false),
        (0x04, Opcode::Delete, false),
        (0x05, Opcode::Increment, false),
        (0x06, Opcode::Decrement, false),
        (0x07, Opcode::Quit, false),
        (0x08, Opcode::Flush, false),
        (0x09, Opcode::Get, true),
        (0x0a, Opcode::Noop, false),
        (0x0b, Opcode::Version, false),
        (0x0c, Opcode::GetK, false),
        (0x0d, Opcode::GetK, true),
        (0x0e, Opcode::Append, false),
        (0x0f, Opcode::Prepend, false),
        (0x10, Opcode::Stat, false),
        (0x11, Opcode::Set, true),
        (0x12, Opcode::Add, true),
        (0x13, Opcode::Replace, true),
        (0x14, Opcode::Delete, true),
        (0x15, Opcode::Increment, true),
        (0x16, Opcode::Decrement, true),
        (0x17, Opcode::Quit, true),
        (0x18, Opcode::Flush, true),
        (0x19, Opcode::Append, true),
        (0x1a, Opcode::Prepend, true),
        (0x1b, Opcode::Verbosity, false),
        (0x1c, Opcode::Touch, false),
        (0x1d, Opcode::Gat, false),
        (0x1e, Opcode::Gat, true),
        (0x23, Opcode::GatK, false),
        (0x24, Opcode::GatK, true),
    ];

    #[test]
    fn every_wire_byte_round_trips() {
        for (byte, opcode, quiet) in WIRE {
            assert_eq!(Opcode::from_wire(byte), (opcode, quiet), "byte {byte:#04x}");
            assert_eq!(opcode.to_wire(quiet), byte, "{opcode:?} quiet={quiet}");
        }
        for byte in 0..=u8::MAX {
            let (opcode, quiet) = Opcode::from_wire(byte);
            assert_eq!(opcode.to_wire(quiet), byte);
            let named = WIRE.iter().any(|&(b, _, _)| b == byte);
            assert_eq!(
                matches!(opcode, Opcode::Unknown(_)),
                !named,
                "byte {byte:#04x}"
            );
        }
    }

    #[test]
    fn sasl_and_range_bytes_are_unknown() {
        for byte in [0x20, 0x21, 0x22, 0x1f, 0x25, 0x30, 0x3c, 0xff] {
            assert_eq!(Opcode::from_wire(byte), (Opcode::Unknown(byte), false));
        }
    }

    #[test]
    fn quiet_forms() {
        for opcode in Opcode::KNOWN {
            let quiet_byte = opcode.to_wire(true);
            assert_eq!(
                opcode.has_quiet_form(),
                quiet_byte != opcode.to_wire(false),
                "{opcode:?}"
            );
            if !opcode.has_quiet_form() {
                assert_eq!(Opcode::from_wire(quiet_byte), (opcode, false));
            }
        }
        assert!(!Opcode::Unknown(0x42).has_quiet_form());
        assert_eq!(Opcode::Unknown(0x42).to_wire(true), 0x42);
        assert_eq!(
            Opcode::KNOWN.len() + 1,
            20,
            "every non-Unknown variant is listed"
        );
    }

    #[test]
    fn status_round_trip() {
        let known = [
            (0x0000, Status::NoError),
            (0x0001, Status::KeyNotFound),
            (0x0002, Status::KeyExists),
            (0x0003, Status::ValueTooLarge),
            (0x0004, Status::InvalidArguments),
            (0x0005, Status::ItemNotStored),
            (0x0006, Status::NonNumeric),
            (0x0081, Status::UnknownCommand),
            (0x0082, Status::OutOfMemory),
        ];
        for (code, status) in known {
            assert_eq!(Status::from_wire(code), status);
            assert_eq!(status.to_wire(), code);
        }
        for code in [0x0007, 0x0020, 0x0021, 0x0080, 0x0083, 0xffff] {
            assert_eq!(Status::from_wire(code), Status::Unknown(code));
            assert_eq!(Status::Unknown(code).to_wire(), code);
        }
    }

    #[test]
    fn status_messages_match_memcached() {
        assert_eq!(Status::NoError.message(), "");
        assert_eq!(Status::KeyNotFound.message(), "Not found");
        assert_eq!(Status::KeyExists.message(), "Data exists for key.");
        assert_eq!(Status::ValueTooLarge.message(), "Too large.");
        assert_eq!(Status::InvalidArguments.message(), "Invalid arguments");
        assert_eq!(Status::ItemNotStored.message(), "Not stored.");
        assert_eq!(
            Status::NonNumeric.message(),
            "Non-numeric server-side value for incr or decr"
        );
        assert_eq!(Status::UnknownCommand.message(), "Unknown command");
        assert_eq!(Status::OutOfMemory.message(), "Out of memory");
        assert_eq!(Status::Unknown(0x20).message(), "");
    }
}
