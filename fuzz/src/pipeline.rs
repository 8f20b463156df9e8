//! Near-valid request pipelines from fuzzer bytes: real requests of all three protocols, built
//! from templates whose fields (keys, numbers, lengths, flags, opcodes) the bytes choose from
//! tables of ordinary and boundary values, now and then mutated after they are written (a byte
//! changed, a length that lies, a missing `\r\n`).
//!
//! A connection speaks binary or text (meta included) by its first byte; the first program
//! byte picks text and meta, binary, or a mix (binary frames on a text connection and the
//! reverse are garbage the engine must survive).

use protocol::binary::{Opcode, RequestRepr};

use crate::input::Reader;
use crate::meta::FLAGS;

/// Pipelines stop growing past this many bytes.
pub const MAX_PIPELINE_BYTES: usize = 256 * 1024;

/// Keys: ordinary ones of both workers, the longest valid key, one too long, invalid ones,
/// a base64 key and a key with a space (two tokens).
const KEYS: [&[u8]; 16] = [
    b"k0",
    b"k1",
    b"k2",
    b"k3",
    b"key:4",
    b"key:5",
    b"counter",
    b"a2V5",
    &[b'K'; 250],
    &[b'L'; 251],
    b"bad\x01key",
    b"",
    b"with space",
    b"k\x7f",
    b"AAEC/w==",
    b"k0k0k0k0k0k0k0k0",
];

/// Number tokens: small, boundary, overflowing, signed, malformed; relative and absolute times.
const NUMBERS: [&[u8]; 24] = [
    b"0",
    b"1",
    b"5",
    b"100",
    b"-1",
    b"+7",
    b"30",
    b"2592000",
    b"2592001",
    b"1700000100",
    b"2147483645",
    b"2147483647",
    b"2147483648",
    b"-2147483648",
    b"-2147483649",
    b"4294967295",
    b"4294967296",
    b"18446744073709551615",
    b"18446744073709551616",
    b"000000000000000000001",
    b"abc",
    b"",
    b"1e3",
    b"0x10",
];

/// Value lengths: empty, small, around the small `-I` limit and the default one.
const VALUE_LENS: [usize; 12] = [0, 1, 2, 5, 10, 100, 900, 1000, 1024, 4000, 70_000, 1 << 20];

/// Binary opcodes: every known one with its quiet variant, and unknown ones.
const OPCODES: [u8; 32] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x23, 0x42,
];

/// Builds the pipeline the program describes.
pub fn generate(program: &[u8]) -> Vec<u8> {
    let mut r = Reader::new(program);
    let family = r.u8() % 4;
    let mut out = Vec::new();
    while !r.is_empty() && out.len() < MAX_PIPELINE_BYTES {
        let start = out.len();
        let binary = match family {
            0 | 1 => false,
            2 => true,
            _ => r.chance(64),
        };
        if binary {
            binary_request(&mut r, &mut out);
        } else {
            text_request(&mut r, &mut out);
        }
        if r.chance(12) {
            mutate(&mut r, &mut out, start);
        }
    }
    out.truncate(MAX_PIPELINE_BYTES);
    out
}

fn key<'a>(r: &mut Reader<'a>) -> &'a [u8] {
    if r.chance(8) {
        r.bytes(12)
    } else {
        r.pick(&KEYS)
    }
}

fn number<'a>(r: &mut Reader<'a>) -> &'a [u8] {
    r.pick(&NUMBERS)
}

/// A value of a chosen length: a repeated byte, or a number (for incr/decr).
fn value(r: &mut Reader<'_>) -> Vec<u8> {
    match r.below(4) {
        0 => number(r).to_vec(),
        1 => r.bytes(16).to_vec(),
        _ => {
            let len = r.pick(&VALUE_LENS);
            let len = if r.chance(64) {
                (len + usize::from(r.u8() % 3)).saturating_sub(1)
            } else {
                len
            };
            vec![b'a' + r.u8() % 26; len]
        }
    }
}

fn space_then(out: &mut Vec<u8>, token: &[u8]) {
    out.push(b' ');
    out.extend_from_slice(token);
}

fn maybe_noreply(r: &mut Reader<'_>, out: &mut Vec<u8>) {
    if r.chance(48) {
        space_then(out, b"noreply");
    }
}

/// A data block announced as `announced` bytes: usually the truth, sometimes not.
fn data_block(r: &mut Reader<'_>, out: &mut Vec<u8>, value: &[u8]) {
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    if r.chance(8) {
        out.extend_from_slice(b"xx");
    } else {
        out.extend_from_slice(b"\r\n");
    }
}

/// The length token for `value`: its length, or now and then another number.
fn length_token(r: &mut Reader<'_>, value: &[u8]) -> Vec<u8> {
    if r.chance(16) {
        number(r).to_vec()
    } else {
        value.len().to_string().into_bytes()
    }
}

fn text_request(r: &mut Reader<'_>, out: &mut Vec<u8>) {
    match r.below(20) {
        0..=2 => {
            let command = r.pick(&[&b"get"[..], b"gets", b"gat", b"gats"]);
            out.extend_from_slice(command);
            if command.starts_with(b"gat") {
                space_then(out, number(r));
            }
            let most = if r.chance(16) { 1000 } else { 6 };
            let keys = r.below(most);
            let repeat = r.chance(32).then(|| key(r));
            for _ in 0..keys {
                let k = repeat.unwrap_or_else(|| key(r));
                space_then(out, k);
            }
            out.extend_from_slice(b"\r\n");
        }
        3..=5 => {
            let command = r.pick(&[
                &b"set"[..],
                b"add",
                b"replace",
                b"append",
                b"prepend",
                b"cas",
            ]);
            out.extend_from_slice(command);
            space_then(out, key(r));
            space_then(out, number(r));
            space_then(out, number(r));
            let value = value(r);
            let len = length_token(r, &value);
            space_then(out, &len);
            if command == b"cas" {
                space_then(out, number(r));
            }
            maybe_noreply(r, out);
            data_block(r, out, &value);
        }
        6 => {
            out.extend_from_slice(b"delete");
            space_then(out, key(r));
            if r.chance(32) {
                space_then(out, r.pick(&[&b"0"[..], b"5"]));
            }
            maybe_noreply(r, out);
            out.extend_from_slice(b"\r\n");
        }
        7 => {
            out.extend_from_slice(r.pick(&[&b"incr"[..], b"decr"]));
            space_then(out, key(r));
            space_then(out, number(r));
            maybe_noreply(r, out);
            out.extend_from_slice(b"\r\n");
        }
        8 => {
            out.extend_from_slice(b"touch");
            space_then(out, key(r));
            space_then(out, number(r));
            maybe_noreply(r, out);
            out.extend_from_slice(b"\r\n");
        }
        9 => {
            out.extend_from_slice(b"flush_all");
            if r.chance(128) {
                space_then(out, number(r));
            }
            maybe_noreply(r, out);
            out.extend_from_slice(b"\r\n");
        }
        10 => {
            let line = r.pick(&[
                &b"version"[..],
                b"verbosity 1",
                b"verbosity 1 noreply",
                b"stats",
                b"stats settings",
                b"stats items",
                b"stats slabs",
                b"stats detail",
                b"quit",
                b"",
                b"GET / HTTP/1.1",
                b"mn",
            ]);
            // quit ends the connection: keep it rare.
            if line != b"quit" || r.chance(8) {
                out.extend_from_slice(line);
                out.extend_from_slice(b"\r\n");
            }
        }
        11 => {
            // A line near the limits: 2,048 bytes for most, 1 MiB for get/gets.
            let prefix = r.pick(&[&b"get "[..], b"set ", b"mg ", b"", b"  get "]);
            let len = r.pick(&[2040usize, 2046, 2047, 2048, 2049, 2050, 3000, 20_000]);
            out.extend_from_slice(prefix);
            let fill = r.pick(b"a ");
            while out.len() < len {
                out.push(fill);
            }
            if !r.chance(32) {
                out.extend_from_slice(b"\r\n");
            }
        }
        12 => {
            out.extend_from_slice(r.bytes(64));
            out.extend_from_slice(b"\r\n");
        }
        _ => meta_request(r, out),
    }
}

fn meta_flags(r: &mut Reader<'_>, out: &mut Vec<u8>) {
    let most = if r.chance(16) { 24 } else { 6 };
    let count = r.below(most);
    for _ in 0..count {
        space_then(out, r.pick(&FLAGS));
    }
}

fn meta_request(r: &mut Reader<'_>, out: &mut Vec<u8>) {
    let command = r.pick(&[&b"mg"[..], b"ms", b"md", b"ma", b"mn", b"me", b"mg", b"ms"]);
    out.extend_from_slice(command);
    if command == b"mn" {
        out.extend_from_slice(b"\r\n");
        return;
    }
    space_then(out, key(r));
    match command {
        b"ms" => {
            let value = value(r);
            let len = length_token(r, &value);
            space_then(out, &len);
            meta_flags(r, out);
            data_block(r, out, &value);
        }
        b"me" => {
            if r.chance(64) {
                space_then(out, b"b");
            }
            out.extend_from_slice(b"\r\n");
        }
        _ => {
            meta_flags(r, out);
            out.extend_from_slice(b"\r\n");
        }
    }
}

fn binary_request(r: &mut Reader<'_>, out: &mut Vec<u8>) {
    let byte = r.pick(&OPCODES);
    let (opcode, _) = Opcode::from_wire(byte);
    let extras_len = match opcode {
        Opcode::Set | Opcode::Add | Opcode::Replace => 8,
        Opcode::Increment | Opcode::Decrement => 20,
        Opcode::Touch | Opcode::Gat | Opcode::GatK | Opcode::Verbosity => 4,
        Opcode::Flush if r.chance(128) => 4,
        _ => 0,
    };
    let extras_len = if r.chance(8) { r.below(24) } else { extras_len };
    let mut extras = vec![0u8; extras_len];
    for (i, b) in extras.iter_mut().enumerate() {
        // Mostly zero, some set: expirations, deltas, initial values, flags.
        if r.chance(48) {
            *b = r.u8();
        } else if i % 4 == 3 && r.chance(64) {
            *b = 1;
        }
    }
    let keyed = !matches!(
        opcode,
        Opcode::Noop | Opcode::Version | Opcode::Quit | Opcode::Flush | Opcode::Verbosity
    );
    let key: &[u8] = if keyed || r.chance(8) { key(r) } else { b"" };
    let with_value = matches!(
        opcode,
        Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend
    );
    let value = if with_value || r.chance(8) {
        value(r)
    } else {
        Vec::new()
    };
    if opcode == Opcode::Quit && !r.chance(8) {
        return;
    }
    let start = out.len();
    RequestRepr {
        opcode,
        quiet: false,
        opaque: r.u32(),
        cas: if r.chance(32) { u64::from(r.u8()) } else { 0 },
        vbucket: 0,
        extras: &extras,
        key,
        value: &value,
    }
    .emit_into(out);
    out[start + 1] = byte;
    if r.chance(8) {
        // A body length that lies: too short, too long, or huge.
        let body = u32::from_be_bytes([
            out[start + 8],
            out[start + 9],
            out[start + 10],
            out[start + 11],
        ]);
        let lie = match r.below(4) {
            0 => body.wrapping_sub(1),
            1 => body.wrapping_add(u32::from(r.u8())),
            2 => u32::MAX,
            _ => (2 << 20) + 1,
        };
        out[start + 8..start + 12].copy_from_slice(&lie.to_be_bytes());
    }
}

/// Changes the request written from `start` on: one byte, a cut, or an inserted line end.
fn mutate(r: &mut Reader<'_>, out: &mut Vec<u8>, start: usize) {
    let len = out.len() - start;
    if len == 0 {
        return;
    }
    let at = start + r.below(len);
    match r.below(4) {
        0 => out[at] = r.u8(),
        1 => out.truncate(at),
        2 => {
            out.insert(at, b'\n');
            out.insert(at, b'\r');
        }
        _ => out.insert(at, r.pick(&[b' ', b'0', 0x80, 0])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random programs of the given family.
    fn programs(family: u8) -> impl Iterator<Item = Vec<u8>> {
        let mut rng = crate::input::Rng::new(u64::from(family));
        (0..500).map(move |_| {
            let mut program = vec![family];
            program.extend((0..48).map(|_| rng.next_u64() as u8));
            program
        })
    }

    #[test]
    fn programs_make_requests_of_every_protocol() {
        let text: Vec<u8> = programs(0).flat_map(|p| generate(&p)).collect();
        for command in [
            "set ", "get", "cas ", "delete ", "incr ", "touch ", "mg ", "ms ", "ma ",
        ] {
            let found = text.windows(command.len()).any(|w| w == command.as_bytes());
            assert!(found, "no {command:?} in the text family's pipelines");
        }
        let binary: Vec<Vec<u8>> = programs(2).map(|p| generate(&p)).collect();
        let framed = binary.iter().filter(|p| p.first() == Some(&0x80)).count();
        assert!(
            framed > 400,
            "{framed} of 500 binary pipelines start with a frame"
        );
        assert!(programs(3).all(|p| generate(&p).len() <= MAX_PIPELINE_BYTES));
    }
}
