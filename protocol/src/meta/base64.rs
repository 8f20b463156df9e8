//! Standard base64 (RFC 4648 §4, with `=` padding) for meta keys given with the `b` flag.
//!
//! Decoding is strict: the length must be a multiple of four, every byte in the alphabet, and
//! `=` only as the last one or two bytes (memcached's decoder skips stray bytes instead).

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The 6-bit value of an alphabet byte.
fn sextet(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Bytes `src` decodes to, or `None` if it is not valid padded base64 of at least one byte.
pub fn decoded_len(src: &[u8]) -> Option<usize> {
    if src.is_empty() || !src.len().is_multiple_of(4) {
        return None;
    }
    let pad = src.iter().rev().take_while(|&&b| b == b'=').count();
    if pad > 2 {
        return None;
    }
    let body = &src[..src.len() - pad];
    if !body.iter().all(|&b| sextet(b).is_some()) {
        return None;
    }
    let len = src.len() / 4 * 3 - pad;
    (len > 0).then_some(len)
}

/// Decodes `src` into the front of `dst`; returns the decoded length.
///
/// Returns `None` if `src` is not valid (see [`decoded_len`]) or `dst` is too short.
pub fn decode(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let len = decoded_len(src)?;
    if dst.len() < len {
        return None;
    }
    let mut at = 0;
    for quad in src.chunks_exact(4) {
        let mut bits: u32 = 0;
        for &b in quad {
            bits = (bits << 6) | u32::from(sextet(b).unwrap_or(0));
        }
        for shift in [16, 8, 0] {
            if at < len {
                dst[at] = (bits >> shift) as u8;
                at += 1;
            }
        }
    }
    Some(len)
}

/// Appends the padded base64 encoding of `src`.
pub fn encode_into(src: &[u8], out: &mut Vec<u8>) {
    for chunk in src.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let bits = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[((bits >> shift) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn round_trip(raw: &[u8], encoded: &str) {
        let mut out = Vec::new();
        encode_into(raw, &mut out);
        assert_eq!(out, encoded.as_bytes());
        let mut dst = [0u8; 64];
        let len = decode(encoded.as_bytes(), &mut dst).unwrap();
        assert_eq!(&dst[..len], raw);
        assert_eq!(decoded_len(encoded.as_bytes()), Some(raw.len()));
    }

    #[test]
    fn rfc4648_vectors() {
        round_trip(b"f", "Zg==");
        round_trip(b"fo", "Zm8=");
        round_trip(b"foo", "Zm9v");
        round_trip(b"foob", "Zm9vYg==");
        round_trip(b"fooba", "Zm9vYmE=");
        round_trip(b"foobar", "Zm9vYmFy");
        round_trip(&[0, 0xff, 0x10, b' ', b'\r', b'\n'], "AP8QIA0K");
    }

    #[test]
    fn all_byte_values_round_trip() {
        let raw: Vec<u8> = (0..=255).collect();
        for len in 1..40 {
            let mut out = Vec::new();
            encode_into(&raw[..len], &mut out);
            let mut dst = [0u8; 64];
            let n = decode(&out, &mut dst).unwrap();
            assert_eq!(&dst[..n], &raw[..len]);
        }
    }

    #[test]
    fn invalid_input_is_refused() {
        for bad in [
            &b""[..],
            b"Zg",
            b"Zg=",
            b"Zg===",
            b"====",
            b"Z===",
            b"Zm9v!A==",
            b"Zg==Zg==",
            b"Zm 9",
        ] {
            assert_eq!(decoded_len(bad), None, "{:?}", String::from_utf8_lossy(bad));
            assert_eq!(decode(bad, &mut [0u8; 16]), None);
        }
        assert_eq!(decode(b"Zm9vYmFy", &mut [0u8; 5]), None, "short output");
    }
}
