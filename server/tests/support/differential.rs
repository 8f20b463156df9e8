//! Differential testing: the same requests sent to memspin and to a reference server (stock
//! memcached, or `redis-server` for RESP) over kernel sockets on 127.0.0.1, and the replies
//! compared byte for byte once what the two may legitimately answer differently is normalised
//! (see [`normalise_text`], [`normalise_binary`], [`Mask`]).
//!
//! Each request is followed by a marker whose reply ends the request's replies (`mn`, a binary
//! NOOP with its own opaque, or `ECHO diffmark`), so quiet commands and errors that answer nothing are
//! compared too; a request that must end the connection is followed by a half-close instead,
//! and its replies are whatever came before the server closed.

use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A small seeded generator (SplitMix64): the same seed gives the same sequences everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The seeds to run: `MEMSPIN_DIFF_SEED` (one seed) and `MEMSPIN_DIFF_STEPS` (steps per seed)
/// when set, else `fixed` with `steps` each.
pub fn seeds(fixed: &[u64], steps: usize) -> Vec<(u64, usize)> {
    let steps = std::env::var("MEMSPIN_DIFF_STEPS")
        .ok()
        .map(|s| s.parse().expect("MEMSPIN_DIFF_STEPS is a number"))
        .unwrap_or(steps);
    match std::env::var("MEMSPIN_DIFF_SEED") {
        Ok(seed) => vec![(seed.parse().expect("MEMSPIN_DIFF_SEED is a number"), steps)],
        Err(_) => fixed.iter().map(|&seed| (seed, steps)).collect(),
    }
}

/// Whether `program` can be run (found in `PATH`); prints why the test is skipped if not.
pub fn have(program: &str, package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    if !found {
        eprintln!(
            "SKIPPED: `{program}` is not installed (Debian package {package}; \
             scripts/test.sh installs it), so there is nothing to compare memspin with"
        );
    }
    found
}

/// Which protocol a peer speaks: it picks the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Text,
    Binary,
    Resp,
}

/// The binary marker's opaque ("MARK"): no generated request uses it.
pub const MARK_OPAQUE: u32 = 0x4d41_524b;

/// The binary NOOP frame that marks the end of a request's replies.
pub fn binary_marker() -> [u8; 24] {
    let mut frame = [0u8; 24];
    frame[0] = 0x80;
    frame[1] = 0x0a;
    frame[12..16].copy_from_slice(&MARK_OPAQUE.to_be_bytes());
    frame
}

fn binary_marker_reply() -> [u8; 24] {
    let mut frame = binary_marker();
    frame[0] = 0x81;
    frame
}

impl Proto {
    fn marker(self) -> Vec<u8> {
        match self {
            Proto::Text => b"mn\r\n".to_vec(),
            Proto::Binary => binary_marker().to_vec(),
            Proto::Resp => b"ECHO diffmark\r\n".to_vec(),
        }
    }

    fn marker_reply(self) -> Vec<u8> {
        match self {
            Proto::Text => b"MN\r\n".to_vec(),
            Proto::Binary => binary_marker_reply().to_vec(),
            Proto::Resp => b"$8\r\ndiffmark\r\n".to_vec(),
        }
    }
}

/// Which CAS value a request carries; each server gets its own value for the same symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasRef {
    /// The CAS value of the last reply that showed one (the item a `gets` just read).
    Last,
    /// A value neither server has handed out.
    Never,
}

/// How a request ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Follow it with the marker and read up to the marker's reply.
    Marker,
    /// The request closes the connection, or leaves it waiting for bytes that never come:
    /// half-close, read until the server closes, then connect again.
    Close,
}

/// What of a RESP reply differs legitimately, named by the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mask {
    Nothing,
    /// An integer reply counting seconds (`TTL`): equal within the time between the two
    /// servers' answers plus one second; negative values (no key, no expiry) exactly.
    Seconds,
    /// An integer reply counting milliseconds (`PTTL`), the same way.
    Millis,
    /// Server-specific text (`INFO`, `HELLO`, `CLIENT ID`): only the reply's type is compared.
    Kind,
    /// An array whose last nested array's elements (bulk strings without line breaks) may come
    /// in any order (`KEYS`, a `SCAN` that returns everything at once): compared sorted.
    Unordered,
}

/// One request of a sequence.
#[derive(Debug, Clone)]
pub struct Step {
    /// Bytes to send; text may hold `{CAS}` and `{CASX}` (see [`CasRef`]).
    pub bytes: Vec<u8>,
    /// Binary: the CAS field (bytes 16..24 of the first frame) to fill in per server.
    pub binary_cas: Option<CasRef>,
    pub end: End,
    pub mask: Mask,
}

impl Step {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Step {
        Step {
            bytes: bytes.into(),
            binary_cas: None,
            end: End::Marker,
            mask: Mask::Nothing,
        }
    }

    pub fn closing(mut self) -> Step {
        self.end = End::Close;
        self
    }

    pub fn masked(mut self, mask: Mask) -> Step {
        self.mask = mask;
        self
    }

    pub fn cas(mut self, cas: CasRef) -> Step {
        self.binary_cas = Some(cas);
        self
    }

    /// The request as a readable line for reports.
    pub fn show(&self) -> String {
        show_bytes(&self.bytes, 300)
    }
}

/// Bytes as text with control bytes escaped, cut at `limit` characters.
pub fn show_bytes(bytes: &[u8], limit: usize) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(limit) {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    if bytes.len() > limit {
        let _ = write!(out, "...({} bytes)", bytes.len());
    }
    out
}

/// A server's CAS values mapped to symbols in the order they first appear, so two servers
/// that number differently compare equal when they hand out new values at the same moments.
#[derive(Default)]
pub struct CasIds {
    seen: Vec<u64>,
    last: Option<u64>,
}

impl CasIds {
    /// The symbol of `cas` (0 stays 0: "no CAS").
    pub fn symbol(&mut self, cas: u64) -> u64 {
        if cas == 0 {
            return 0;
        }
        self.last = Some(cas);
        match self.seen.iter().position(|&c| c == cas) {
            Some(i) => i as u64 + 1,
            None => {
                self.seen.push(cas);
                self.seen.len() as u64
            }
        }
    }

    /// The server's own value for `cas`.
    pub fn value(&self, cas: CasRef) -> u64 {
        match cas {
            CasRef::Last => self.last.unwrap_or(1),
            CasRef::Never => self.seen.iter().max().copied().unwrap_or(0) + 1_000_000_007,
        }
    }
}

/// One server's connection.
pub struct Peer {
    addr: SocketAddr,
    proto: Proto,
    stream: TcpStream,
    pub cas: CasIds,
}

/// What a server answered to one step.
pub struct Answer {
    pub bytes: Vec<u8>,
    /// The server closed the connection (or reset it).
    pub closed: bool,
    /// Neither the marker's reply nor a close came within the timeout.
    pub timed_out: bool,
    /// When the request was sent.
    pub sent: Instant,
}

const TIMEOUT: Duration = Duration::from_secs(5);

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

impl Peer {
    pub fn connect(addr: SocketAddr, proto: Proto) -> Peer {
        Peer {
            addr,
            proto,
            stream: connect(addr),
            cas: CasIds::default(),
        }
    }

    /// Sends `step` (with this server's CAS values) and reads its replies.
    pub fn run(&mut self, step: &Step) -> Answer {
        let mut bytes = step.bytes.clone();
        if self.proto == Proto::Text {
            for (token, cas) in [("{CASX}", CasRef::Never), ("{CAS}", CasRef::Last)] {
                let value = self.cas.value(cas).to_string();
                bytes = replace(&bytes, token.as_bytes(), value.as_bytes());
            }
        }
        if let Some(cas) = step.binary_cas {
            bytes[16..24].copy_from_slice(&self.cas.value(cas).to_be_bytes());
        }
        let sent = Instant::now();
        let mut answer = Answer {
            bytes: Vec::new(),
            closed: false,
            timed_out: false,
            sent,
        };
        // A server may close before reading everything (a bad frame): a failed write is
        // then not an error, what it answered before closing is.
        let wrote = self.stream.write_all(&bytes);
        let marker = self.proto.marker_reply();
        // A text request may itself hold `mn`, whose `MN` must not be taken for the marker's.
        let mut markers = 1 + match self.proto {
            Proto::Text => bytes
                .split(|&b| b == b'\n')
                .filter(|line| line.starts_with(b"mn\r") || line.starts_with(b"mn "))
                .count(),
            _ => 0,
        };
        let mut scanned = 0;
        match step.end {
            End::Marker => {
                if wrote.is_ok() {
                    let _ = self.stream.write_all(&self.proto.marker());
                }
            }
            End::Close => {
                let _ = self.stream.shutdown(Shutdown::Write);
            }
        }
        let deadline = Instant::now() + TIMEOUT;
        let mut buf = [0u8; 65536];
        let mut read_late = false;
        loop {
            if step.end == End::Marker {
                while let Some(at) = find(&answer.bytes[scanned..], &marker) {
                    scanned += at + marker.len();
                    markers -= 1;
                    if markers == 0 {
                        break;
                    }
                }
                if markers == 0 && answer.bytes.len() == scanned {
                    answer.bytes.truncate(answer.bytes.len() - marker.len());
                    break;
                }
            }
            // Checked after a read only: a process stopped for a while (a benchmark holding
            // the machine) finds the reply waiting when it runs again.
            if read_late {
                answer.timed_out = true;
                break;
            }
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    answer.closed = true;
                    break;
                }
                Ok(n) => {
                    answer.bytes.extend_from_slice(&buf[..n]);
                    read_late = Instant::now() > deadline;
                }
                // A read with a timeout fails so after the process was stopped and continued
                // (signal(7)), as a benchmark holding the machine does: read on.
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    answer.timed_out = true;
                    break;
                }
                Err(_) => {
                    answer.closed = true;
                    break;
                }
            }
        }
        if answer.closed || answer.timed_out || step.end == End::Close {
            self.stream = connect(self.addr);
        }
        answer
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn replace(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// A reply made comparable: `text` with server-specific parts replaced by symbols, and the
/// clock readings (seconds) taken out of it, compared within a tolerance.
#[derive(Debug, PartialEq, Eq)]
pub struct Normal {
    pub text: String,
    pub clock: Vec<i64>,
}

/// Text and meta replies: CAS values (`VALUE` lines of `gets`/`gats`, meta `c` flags, `me`'s
/// `cas=`) become their symbols; seconds left and since the last access (meta `t` and `l`,
/// `me`'s `exp=` and `la=`) move to `clock`, as the two clocks tick apart (`exp=` by size:
/// memcached 1.6.18 prints it negated); `me`'s `size=`
/// is masked (memspin charges its own item layout) and `VERSION`'s text too. Data blocks are
/// kept as they are, but [`unpad`]ded (with the length before them).
pub fn normalise_text(bytes: &[u8], cas: &mut CasIds) -> Normal {
    let mut text = String::new();
    let mut clock = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(end) = bytes[at..].windows(2).position(|w| w == b"\r\n") else {
            text.push_str(&show_bytes(&bytes[at..], usize::MAX));
            break;
        };
        let line = &bytes[at..at + end];
        at += end + 2;
        let line_text = String::from_utf8_lossy(line);
        let fields: Vec<&str> = line_text.split(' ').collect();
        let mut data = None;
        let out: Vec<String> = match fields[0] {
            "VALUE" if fields.len() >= 4 => {
                data = fields[3].parse::<usize>().ok();
                fields
                    .iter()
                    .enumerate()
                    .map(|(i, f)| match (i, f.parse::<u64>()) {
                        (4, Ok(v)) => format!("#{}", cas.symbol(v)),
                        _ => f.to_string(),
                    })
                    .collect()
            }
            "VERSION" => vec!["VERSION".into(), "<version>".into()],
            "ME" => fields
                .iter()
                .map(|f| {
                    let number = |p: &str| f.strip_prefix(p).and_then(|n| n.parse::<i64>().ok());
                    if let Some(v) = number("cas=") {
                        format!("cas=#{}", cas.symbol(v as u64))
                    } else if let Some(v) = number("exp=").filter(|&v| v != -1) {
                        // memcached 1.6.18 prints the seconds left negated (later releases
                        // do not): compared by size.
                        clock.push(v.abs());
                        "exp=<t>".into()
                    } else if let Some(v) = number("la=") {
                        clock.push(v);
                        "la=<t>".into()
                    } else if number("size=").is_some() {
                        "size=<bytes>".into()
                    } else {
                        f.to_string()
                    }
                })
                .collect(),
            "HD" | "VA" | "EN" | "NF" | "NS" | "EX" => {
                if fields[0] == "VA" {
                    data = fields.get(1).and_then(|n| n.parse::<usize>().ok());
                }
                let first_flag = if fields[0] == "VA" { 2 } else { 1 };
                fields
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        if i < first_flag {
                            return f.to_string();
                        }
                        let number =
                            |p: &str| f.strip_prefix(p).and_then(|n| n.parse::<u64>().ok());
                        if let Some(v) = number("c") {
                            format!("c#{}", cas.symbol(v))
                        } else if let Some(v) = number("t") {
                            clock.push(v as i64);
                            "t<t>".into()
                        } else if let Some(v) = number("l") {
                            clock.push(v as i64);
                            "l<t>".into()
                        } else {
                            f.to_string()
                        }
                    })
                    .collect()
            }
            _ => vec![line_text.to_string()],
        };
        let mut out = out;
        if let Some(n) = data {
            let block = &bytes[at..(at + n + 2).min(bytes.len())];
            at += block.len();
            let value = unpad(&block[..n.min(block.len())]);
            // The length field follows the value as compared.
            let length = if out[0] == "VALUE" { 3 } else { 1 };
            if value.len() != n
                && let Some(field) = out.get_mut(length)
            {
                *field = value.len().to_string();
            }
            text.push_str(&out.join(" "));
            text.push_str("\\r\\n");
            text.push_str(&show_bytes(value, usize::MAX));
            text.push_str(&show_bytes(&block[n.min(block.len())..], usize::MAX));
            continue;
        }
        text.push_str(&out.join(" "));
        text.push_str("\\r\\n");
    }
    Normal { text, clock }
}

/// A number followed by spaces as the number alone: memcached pads an incr/decr result
/// shorter than the old value with spaces (protocol.txt allows it, "purely an implementation
/// optimization"); memspin does not. Values the client stored so are read the same way, on
/// both sides.
pub fn unpad(value: &[u8]) -> &[u8] {
    let digits = value.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits > 0 && digits < value.len() && value[digits..].iter().all(|&b| b == b' ') {
        &value[..digits]
    } else {
        value
    }
}

/// Binary replies, frame by frame: the CAS field becomes its symbol and `VERSION`'s value is
/// masked; everything else is kept, shown field by field.
pub fn normalise_binary(bytes: &[u8], cas: &mut CasIds) -> Normal {
    let mut text = String::new();
    let mut at = 0;
    while bytes.len() - at >= 24 {
        let h = &bytes[at..at + 24];
        let key_len = u16::from_be_bytes([h[2], h[3]]) as usize;
        let extras_len = h[4] as usize;
        let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if h[0] != 0x81 || bytes.len() - at - 24 < body_len {
            break;
        }
        let cas_value = u64::from_be_bytes(h[16..24].try_into().unwrap());
        let body = &bytes[at + 24..at + 24 + body_len];
        let _ = write!(
            text,
            "[op {:02x} status {:02x}{:02x} dtype {:02x} opaque {:08x} cas #{} extras {} key {} ",
            h[1],
            h[6],
            h[7],
            h[5],
            u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas.symbol(cas_value),
            show_bytes(&body[..extras_len.min(body.len())], usize::MAX),
            show_bytes(
                &body[extras_len.min(body.len())..(extras_len + key_len).min(body.len())],
                usize::MAX
            ),
        );
        let value = unpad(&body[(extras_len + key_len).min(body.len())..]);
        if h[1] == 0x0b && h[6..8] == [0, 0] {
            text.push_str("value <version>]");
        } else {
            let _ = write!(text, "value {}]", show_bytes(value, 400));
        }
        at += 24 + body_len;
    }
    if at < bytes.len() {
        let _ = write!(text, "[raw {}]", show_bytes(&bytes[at..], 400));
    }
    Normal {
        text,
        clock: Vec::new(),
    }
}

/// RESP replies as they are, except what `mask` names.
pub fn normalise_resp(bytes: &[u8], mask: Mask) -> Normal {
    let text = show_bytes(bytes, usize::MAX);
    let integer = || {
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.strip_prefix(':'))
            .and_then(|s| s.strip_suffix("\r\n"))
            .and_then(|s| s.parse::<i64>().ok())
    };
    match mask {
        Mask::Nothing => Normal {
            text,
            clock: Vec::new(),
        },
        Mask::Seconds | Mask::Millis => match integer() {
            Some(v) if v >= 0 => Normal {
                text: ":<t>\\r\\n".into(),
                clock: vec![v],
            },
            _ => Normal {
                text,
                clock: Vec::new(),
            },
        },
        Mask::Kind => Normal {
            text: format!("{}<masked>", bytes.first().map_or('-', |&b| b as char)),
            clock: Vec::new(),
        },
        Mask::Unordered => Normal {
            text: sorted_last_array(bytes).unwrap_or(text),
            clock: Vec::new(),
        },
    }
}

/// The reply with its last array's bulk strings sorted (see [`Mask::Unordered`]); `None`
/// when it is not an array of such strings.
fn sorted_last_array(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let lines: Vec<&str> = text.split_terminator("\r\n").collect();
    let header = lines.iter().rposition(|l| l.starts_with('*'))?;
    let mut items: Vec<(&str, &str)> = lines[header + 1..]
        .chunks(2)
        .map(|pair| match pair {
            [len, data] if len.starts_with('$') => Some((*len, *data)),
            _ => None,
        })
        .collect::<Option<_>>()?;
    items.sort_by_key(|&(_, data)| data);
    let mut out: Vec<&str> = lines[..=header].to_vec();
    for (len, data) in items {
        out.push(len);
        out.push(data);
    }
    Some(format!("{}\\r\\n", out.join("\\r\\n")))
}

/// Whether two normalised replies agree: the same text, and clock readings that differ by
/// at most `tolerance`.
pub fn agree(a: &Normal, b: &Normal, tolerance: i64) -> bool {
    a.text == b.text
        && a.clock.len() == b.clock.len()
        && a.clock
            .iter()
            .zip(&b.clock)
            .all(|(x, y)| (x - y).abs() <= tolerance)
}
