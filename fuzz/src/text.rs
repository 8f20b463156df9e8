//! The `text` target: `protocol::text` request lines (meta lines included) and data blocks from
//! arbitrary bytes.
//!
//! Input: one byte seeding where the buffer is cut as it "arrives", then the buffer. Beyond
//! "no panic":
//! - a parsed line ends at the buffer's first newline, and what it holds is what the request
//!   says (keys valid, lengths in range, the data block found exactly `bytes + 2` further on);
//! - feeding the buffer in pieces, passing back the `scanned` of each `Incomplete`, reaches the
//!   same verdict as parsing it whole: the line limits do not depend on how the bytes arrive;
//! - the number parsers agree with the standard library's, within their digit limits, and
//!   replies are as long as they say.

use protocol::text::{
    Close, DataError, ErrorReply, MAX_LINE_LEN, MAX_MULTIGET_LINE_LEN, ParseError, Request,
    Response, Tokens, data_block, is_valid_key, parse_i32, parse_u32, parse_u64, push_i64,
    push_u64,
};

use crate::input::Rng;

/// Largest read hint a line still waiting for its newline may give.
const LINE_READ_HINT: usize = 16 * 1024;

/// Runs every check on one input. Panics on a violation.
pub fn check(data: &[u8]) {
    let Some((&seed, buf)) = data.split_first() else {
        return;
    };
    let whole = Request::parse(buf, 0);
    check_verdict(buf, &whole);
    check_arrival(buf, &whole, u64::from(seed));
    for token in Tokens::new(buf).take(32) {
        check_numbers(token);
    }
}

/// Checks one verdict on `buf` (which may be a prefix of the stream).
pub(crate) fn check_verdict(buf: &[u8], verdict: &Result<(Request<'_>, usize), ParseError>) {
    let newline = buf.iter().position(|&b| b == b'\n');
    match *verdict {
        Ok((request, line_len)) => {
            assert_eq!(
                Some(line_len - 1),
                newline,
                "a line ends at the first newline"
            );
            check_line_limit(buf, line_len);
            check_request(buf, request, line_len);
        }
        Err(ParseError::Incomplete { needed, scanned }) => {
            assert_eq!(newline, None, "incomplete with a newline in the buffer");
            assert_eq!(scanned, buf.len());
            assert!((1..=LINE_READ_HINT).contains(&needed), "read hint {needed}");
            assert!(buf.len() <= MAX_MULTIGET_LINE_LEN);
        }
        Err(ParseError::Invalid {
            reply,
            line_len,
            swallow,
            ..
        }) => {
            assert_eq!(
                Some(line_len - 1),
                newline,
                "a line ends at the first newline"
            );
            check_line_limit(buf, line_len);
            check_error_reply(reply);
            assert!(reply != ErrorReply::LineTooLong);
            if swallow > 0 {
                assert!(buf.starts_with(b"ms ") || Tokens::new(buf).next() == Some(b"ms"));
                assert!(swallow <= i32::MAX as usize, "swallow {swallow}");
            }
        }
        Err(ParseError::Close(Close::LineTooLong)) => {
            let limit = line_limit(buf);
            match newline {
                Some(at) => assert!(at > limit, "newline at {at} within the limit {limit}"),
                None => assert!(buf.len() > limit),
            }
        }
        Err(ParseError::Close(Close::Http)) => assert!(newline.is_some()),
    }
}

/// The longest line `buf`'s command may have, newline excluded.
fn line_limit(buf: &[u8]) -> usize {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    if spaces <= 100 && (rest.starts_with(b"get ") || rest.starts_with(b"gets ")) {
        MAX_MULTIGET_LINE_LEN
    } else {
        MAX_LINE_LEN
    }
}

/// A line that was answered fits the limit a line arriving byte by byte is held to.
fn check_line_limit(buf: &[u8], line_len: usize) {
    let limit = line_limit(buf);
    assert!(
        line_len - 1 <= limit,
        "a {line_len}-byte line was parsed, over the {limit}-byte limit"
    );
}

fn check_request(buf: &[u8], request: Request<'_>, line_len: usize) {
    let line = &buf[..line_len];
    let rest = &buf[line_len..];
    let in_line = |s: &[u8]| {
        let (start, end) = (s.as_ptr() as usize, s.as_ptr() as usize + s.len());
        let (ls, le) = (line.as_ptr() as usize, line.as_ptr() as usize + line.len());
        s.is_empty() || (ls <= start && end <= le)
    };
    match request {
        Request::Get(get) => {
            for key in get.keys {
                assert!(is_valid_key(key) && in_line(key), "get key {key:?}");
            }
        }
        Request::Store(store) => {
            assert!(is_valid_key(store.key) && in_line(store.key));
            assert!(store.bytes <= i32::MAX as usize - 2);
            check_data_block(rest, store.bytes);
            let value = &rest[..store.bytes.min(rest.len())];
            let reply = Response::Value {
                key: store.key,
                flags: store.flags,
                value,
                cas: Some(store.cas),
            };
            check_response(reply);
        }
        Request::Delete { key, .. }
        | Request::Arithmetic { key, .. }
        | Request::Touch { key, .. } => assert!(is_valid_key(key) && in_line(key)),
        Request::Meta(meta) => crate::meta::check_request(meta, rest),
        Request::FlushAll { .. }
        | Request::Version
        | Request::Verbosity { .. }
        | Request::Stats(_)
        | Request::Slabs(_)
        | Request::Watch(_)
        | Request::Shutdown(_)
        | Request::Quit => {}
        Request::Metadump(classes)
        | Request::LruCrawler(protocol::text::CrawlerCommand::Crawl(classes)) => {
            if let protocol::text::Classes::List(list) = classes {
                assert!(in_line(list));
            }
        }
        Request::LruCrawler(protocol::text::CrawlerCommand::Sleep(us)) => {
            assert!(us <= protocol::text::MAX_CRAWLER_SLEEP_US);
        }
        Request::LruCrawler(_) => {}
        Request::CacheMemlimit { megabytes, .. } => assert!(
            (protocol::text::MIN_MEMLIMIT_MB..=protocol::text::MAX_MEMLIMIT_MB)
                .contains(&megabytes)
        ),
    }
}

/// The data block after a storage line is taken whole, exactly `bytes + 2` bytes on.
pub(crate) fn check_data_block(rest: &[u8], bytes: usize) {
    match data_block(rest, bytes) {
        Ok(data) => {
            assert_eq!(data.len(), bytes);
            assert_eq!(&rest[bytes..bytes + 2], b"\r\n");
        }
        Err(DataError::Incomplete { needed }) => assert_eq!(rest.len() + needed, bytes + 2),
        Err(DataError::BadChunk) => {
            assert!(rest.len() >= bytes + 2 && &rest[bytes..bytes + 2] != b"\r\n")
        }
    }
}

/// The buffer arrives in pieces cut at `seed`'s points; each piece is parsed with the
/// `scanned` the previous one returned. The first verdict that is not `Incomplete` must be
/// the whole buffer's (a line is decided by its first newline and the limit, whatever the
/// pieces), and `scanned` must not change a verdict.
fn check_arrival(buf: &[u8], whole: &Result<(Request<'_>, usize), ParseError>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut end = 0;
    let mut scanned = 0;
    while end < buf.len() {
        end += match rng.below(4) {
            0 => 1,
            1 => rng.up_to(16),
            2 => rng.up_to(MAX_LINE_LEN + 64),
            _ => rng.up_to(buf.len()),
        };
        end = end.min(buf.len());
        let prefix = &buf[..end];
        let got = Request::parse(prefix, scanned);
        assert_eq!(
            got,
            Request::parse(prefix, 0),
            "scanned {scanned} changed the verdict"
        );
        check_verdict(prefix, &got);
        match got {
            Err(ParseError::Incomplete { scanned: s, .. }) => scanned = s,
            verdict => {
                assert_eq!(&verdict, whole, "arrival cut at {end} decided otherwise");
                return;
            }
        }
    }
}

/// The number parsers against the standard library's, and the formatters round trip.
pub(crate) fn check_numbers(token: &[u8]) {
    let text = std::str::from_utf8(token).ok();
    let digits = token.strip_prefix(b"+").unwrap_or(token);
    let std_u64 = text.and_then(|t| t.parse::<u64>().ok());
    let plain = !digits.is_empty() && digits.iter().all(u8::is_ascii_digit);
    let expected = if plain && digits.len() <= 20 {
        std_u64
    } else {
        None
    };
    assert_eq!(parse_u64(token), expected, "parse_u64 {token:?}");
    assert_eq!(
        parse_u32(token),
        expected.and_then(|n| u32::try_from(n).ok())
    );
    let unsigned = token.strip_prefix(b"-").unwrap_or(token);
    let unsigned = unsigned.strip_prefix(b"+").unwrap_or(unsigned);
    let std_i32 = text.and_then(|t| t.parse::<i32>().ok());
    let i32_expected = if !unsigned.is_empty()
        && unsigned.iter().all(u8::is_ascii_digit)
        && unsigned.len() <= 20
    {
        std_i32
    } else {
        None
    };
    assert_eq!(
        parse_i32(token),
        i32_expected.map(i64::from),
        "parse_i32 {token:?}"
    );
    if let Some(n) = parse_u64(token) {
        let mut out = Vec::new();
        push_u64(&mut out, n);
        assert_eq!(parse_u64(&out), Some(n));
        check_response(Response::Number(n));
    }
    if let Some(n) = parse_i32(token) {
        let mut out = Vec::new();
        push_i64(&mut out, n);
        assert_eq!(parse_i32(&out), Some(n));
    }
}

/// A reply is one line of [`Response::buffer_len`] bytes (a value block aside).
pub(crate) fn check_response(response: Response<'_>) {
    let mut out = Vec::new();
    response.emit_into(&mut out);
    assert_eq!(out.len(), response.buffer_len(), "{response:?}");
    assert!(out.ends_with(b"\r\n"));
}

/// Every error line is one line.
pub(crate) fn check_error_reply(reply: ErrorReply) {
    check_response(Response::Error(reply));
    let mut out = Vec::new();
    reply.emit_into(&mut out);
    assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelines_pass_every_check() {
        for buf in [
            &b"\x05set k 0 0 5\r\nhello\r\nget k\r\n"[..],
            b"\x01get a b c\r\n",
            b"\x02ms k 2 T0 F5\r\nhi\r\n",
            b"\x03bogus\r\n",
            b"\x04GET / HTTP/1.1\r\n",
            b"\x09incr k +12\r\n",
        ] {
            check(buf);
            for n in 0..buf.len() {
                check(&buf[..n]);
            }
        }
    }
}
