//! Asking a connection which worker serves it: the request in each protocol and a parser
//! of its reply that does no I/O (`Ok(None)` while the reply is incomplete), so any transport
//! can send the probe and read the answer from its own buffers; [`probe`] does both over a
//! blocking stream.
//!
//! ```text
//! text, meta: stats worker          ─▶ STAT worker N, STAT workers T, STAT owner_hash H, END
//! binary:     STAT (0x10) "worker"  ─▶ the same as key/value packets, then an empty key
//! RESP:       CLIENT INFO           ─▶ ... worker=N ...; CONFIG GET io-threads ─▶ T
//! ```

use std::fmt;
use std::io::{self, Read, Write};

use crate::client::Protocol;

/// What a connection says about the worker that serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The worker serving the connection.
    pub worker: usize,
    /// Workers serving, when the reply says (`stats worker`; RESP asks `CONFIG GET`).
    pub workers: Option<usize>,
    /// The owner hash's name, when the reply says.
    pub owner_hash: Option<String>,
}

/// The most bytes a probe's reply may take (a `stats worker` reply is under 100).
const MAX_PROBE_REPLY: usize = 64 * 1024;

/// Why a probe's reply names no worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeError {
    /// The server refused the request (`ERROR`, an error status, `-ERR`): not memspin.
    Refused,
    /// The reply is not of the protocol spoken.
    Malformed,
    /// The reply has no worker (or, for `CONFIG GET`, no worker count) in it.
    NoWorker,
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeError::Refused => "the server refused the request",
            ProbeError::Malformed => "the reply is malformed",
            ProbeError::NoWorker => "the reply names no worker",
        })
    }
}

impl std::error::Error for ProbeError {}

/// Binary STAT (opcode 0x10) with key `worker`: a 24-byte header, key length 6, body 6.
const BINARY_STAT_WORKER: [u8; 30] = [
    0x80, 0x10, 0, 6, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'w', b'o', b'r',
    b'k', b'e', b'r',
];

/// The request that asks a connection which worker serves it, in `protocol`; its reply is
/// read with [`parse_probe`]. Any transport can send it (it is a whole request of the
/// protocol, answered before anything sent after it).
pub fn probe_request(protocol: Protocol) -> &'static [u8] {
    match protocol {
        Protocol::Binary => &BINARY_STAT_WORKER,
        Protocol::Text | Protocol::Meta => b"stats worker\r\n",
        Protocol::Resp => b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n",
    }
}

/// RESP: the request for the number of workers (`CONFIG GET io-threads`), read with
/// [`parse_resp_workers`].
pub const RESP_WORKERS_REQUEST: &[u8] = b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$10\r\nio-threads\r\n";

/// RESP: [`probe_request`] and [`RESP_WORKERS_REQUEST`] pipelined.
const RESP_PROBE_AND_WORKERS: &[u8] =
    b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$10\r\nio-threads\r\n";

/// The request that asks a connection its worker and the number of workers in one exchange:
/// [`probe_request`], with RESP's [`RESP_WORKERS_REQUEST`] pipelined after it (`CLIENT INFO`
/// does not give the count). Its reply is read with [`parse_probe_with_workers`].
pub fn probe_with_workers_request(protocol: Protocol) -> &'static [u8] {
    match protocol {
        Protocol::Resp => RESP_PROBE_AND_WORKERS,
        _ => probe_request(protocol),
    }
}

/// Reads the reply to [`probe_with_workers_request`] at the start of `buf`, as
/// [`parse_probe`]; `workers` is then known in every protocol (a reply without it is
/// complete only with it).
///
/// # Errors
/// [`ProbeError`] when the reply names no worker or no worker count.
pub fn parse_probe_with_workers(
    protocol: Protocol,
    buf: &[u8],
) -> Result<Option<(WorkerInfo, usize)>, ProbeError> {
    let Some((mut info, used)) = parse_probe(protocol, buf)? else {
        return Ok(None);
    };
    if protocol == Protocol::Resp {
        let Some((workers, more)) = parse_resp_workers(&buf[used..])? else {
            return Ok(None);
        };
        info.workers = Some(workers);
        return Ok(Some((info, used + more)));
    }
    if info.workers.is_none() {
        return Err(ProbeError::NoWorker);
    }
    Ok(Some((info, used)))
}

/// Reads the reply to [`probe_request`] at the start of `buf`: `Ok(None)` while it is
/// incomplete, else the worker and the bytes the reply took (bytes after it are left alone).
///
/// # Errors
/// [`ProbeError`] when the reply is complete enough to tell it names no worker.
pub fn parse_probe(
    protocol: Protocol,
    buf: &[u8],
) -> Result<Option<(WorkerInfo, usize)>, ProbeError> {
    match protocol {
        Protocol::Binary => parse_binary(buf),
        Protocol::Text | Protocol::Meta => parse_text(buf),
        Protocol::Resp => parse_resp_info(buf),
    }
}

/// Reads the reply to [`RESP_WORKERS_REQUEST`] at the start of `buf`, as [`parse_probe`].
///
/// # Errors
/// [`ProbeError`] when the reply holds no positive `io-threads`.
pub fn parse_resp_workers(buf: &[u8]) -> Result<Option<(usize, usize)>, ProbeError> {
    let mut strings = Vec::new();
    let Some(used) = resp_strings(buf, 0, &mut strings)? else {
        return Ok(None);
    };
    let workers = strings
        .iter()
        .position(|s| s == "io-threads")
        .and_then(|at| strings.get(at + 1)?.parse().ok())
        .filter(|&n: &usize| n > 0)
        .ok_or(ProbeError::NoWorker)?;
    Ok(Some((workers, used)))
}

/// Asks the connection on `stream` which worker serves it, in `protocol`, and reads the whole
/// reply (nothing of it is left for the run to read).
///
/// # Errors
/// I/O errors; [`io::ErrorKind::InvalidData`] when the reply names no worker.
pub fn probe<S: Read + Write>(stream: &mut S, protocol: Protocol) -> io::Result<WorkerInfo> {
    exchange(stream, probe_request(protocol), |buf| {
        parse_probe(protocol, buf)
    })
}

/// RESP: the number of workers, asked on `stream` (`CONFIG GET io-threads`).
pub(super) fn resp_workers<S: Read + Write>(stream: &mut S) -> io::Result<usize> {
    exchange(stream, RESP_WORKERS_REQUEST, parse_resp_workers)
}

/// Writes `request` and reads until `parse` has its whole reply, which must be all there is.
fn exchange<S: Read + Write, T>(
    stream: &mut S,
    request: &[u8],
    parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, ProbeError>,
) -> io::Result<T> {
    stream.write_all(request)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let parsed = parse(&buf).map_err(|e| invalid(e.to_string()))?;
        if let Some((value, used)) = parsed {
            if used != buf.len() {
                return Err(invalid("bytes after the reply"));
            }
            return Ok(value);
        }
        if buf.len() > MAX_PROBE_REPLY {
            return Err(invalid("a reply too long to be one"));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// The `stats worker` lines (`name`, `value`) as a [`WorkerInfo`].
fn from_stats(stats: &[(&[u8], &[u8])]) -> Result<WorkerInfo, ProbeError> {
    let find = |name: &[u8]| {
        stats
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    let worker = find(b"worker")
        .and_then(|v| v.parse().ok())
        .ok_or(ProbeError::NoWorker)?;
    Ok(WorkerInfo {
        worker,
        workers: find(b"workers").and_then(|v| v.parse().ok()),
        owner_hash: find(b"owner_hash"),
    })
}

/// The line at `buf[at..]` without its CRLF, and where the next one starts; `None` without
/// a CRLF yet.
fn line_at(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let end = buf[at..].windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[at..at + end], at + end + 2))
}

fn parse_text(buf: &[u8]) -> Result<Option<(WorkerInfo, usize)>, ProbeError> {
    let mut stats = Vec::new();
    let mut at = 0;
    while let Some((line, next)) = line_at(buf, at) {
        if line == b"END" {
            return from_stats(&stats).map(|info| Some((info, next)));
        }
        let mut words = line.splitn(3, |&b| b == b' ');
        match (words.next(), words.next(), words.next()) {
            (Some(b"STAT"), Some(name), Some(value)) => stats.push((name, value)),
            _ if line.ends_with(b"ERROR") || line.starts_with(b"CLIENT_ERROR") => {
                return Err(ProbeError::Refused);
            }
            _ => return Err(ProbeError::Malformed),
        }
        at = next;
    }
    Ok(None)
}

fn parse_binary(buf: &[u8]) -> Result<Option<(WorkerInfo, usize)>, ProbeError> {
    let mut stats = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + 24) else {
            return Ok(None);
        };
        let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let extras_len = usize::from(header[4]);
        let status = u16::from_be_bytes([header[6], header[7]]);
        let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        if header[0] != 0x81 || body_len > MAX_PROBE_REPLY || key_len + extras_len > body_len {
            return Err(ProbeError::Malformed);
        }
        let Some(body) = buf.get(at + 24..at + 24 + body_len) else {
            return Ok(None);
        };
        if status != 0 {
            return Err(ProbeError::Refused);
        }
        at += 24 + body_len;
        if key_len == 0 {
            return from_stats(&stats).map(|info| Some((info, at)));
        }
        stats.push((
            &body[extras_len..extras_len + key_len],
            &body[extras_len + key_len..],
        ));
    }
}

/// Reads one RESP2 reply at `buf[at..]` and appends its bulk and simple strings, in order
/// (arrays flattened); returns where it ends, `None` while incomplete.
fn resp_strings(buf: &[u8], at: usize, out: &mut Vec<String>) -> Result<Option<usize>, ProbeError> {
    let Some((line, next)) = line_at(buf, at) else {
        return Ok(None);
    };
    let number = || -> Result<i64, ProbeError> {
        std::str::from_utf8(&line[1..])
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or(ProbeError::Malformed)
    };
    match line.first() {
        Some(b'+' | b':') => {
            out.push(String::from_utf8_lossy(&line[1..]).into_owned());
            Ok(Some(next))
        }
        Some(b'-') => Err(ProbeError::Refused),
        Some(b'$') => {
            let len = number()?;
            if len < 0 {
                return Ok(Some(next));
            }
            let len = usize::try_from(len).map_err(|_| ProbeError::Malformed)?;
            if len > MAX_PROBE_REPLY {
                return Err(ProbeError::Malformed);
            }
            let Some(bulk) = buf.get(next..next + len + 2) else {
                return Ok(None);
            };
            if &bulk[len..] != b"\r\n" {
                return Err(ProbeError::Malformed);
            }
            out.push(String::from_utf8_lossy(&bulk[..len]).into_owned());
            Ok(Some(next + len + 2))
        }
        Some(b'*') => {
            let mut at = next;
            for _ in 0..number()?.max(0) {
                match resp_strings(buf, at, out)? {
                    Some(end) => at = end,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        _ => Err(ProbeError::Malformed),
    }
}

fn parse_resp_info(buf: &[u8]) -> Result<Option<(WorkerInfo, usize)>, ProbeError> {
    let mut strings = Vec::new();
    let Some(used) = resp_strings(buf, 0, &mut strings)? else {
        return Ok(None);
    };
    let worker = strings
        .iter()
        .flat_map(|s| s.split_whitespace())
        .find_map(|field| field.strip_prefix("worker="))
        .and_then(|n| n.parse().ok())
        .ok_or(ProbeError::NoWorker)?;
    let info = WorkerInfo {
        worker,
        workers: None,
        owner_hash: None,
    };
    Ok(Some((info, used)))
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that answers with `reply` and records what was written.
    struct Canned {
        reply: io::Cursor<Vec<u8>>,
        written: Vec<u8>,
    }

    impl Canned {
        fn new(reply: &[u8]) -> Canned {
            Canned {
                reply: io::Cursor::new(reply.to_vec()),
                written: Vec::new(),
            }
        }
    }

    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reply.read(buf)
        }
    }

    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn text_probe_reads_the_worker_group_to_its_end() {
        let mut s = Canned::new(
            b"STAT worker 1\r\nSTAT workers 2\r\nSTAT owner_hash mulxor64-v1\r\nEND\r\n",
        );
        let info = probe(&mut s, Protocol::Text).unwrap();
        assert_eq!(s.written, b"stats worker\r\n");
        assert_eq!(
            info,
            WorkerInfo {
                worker: 1,
                workers: Some(2),
                owner_hash: Some("mulxor64-v1".into())
            }
        );
        // memcached has no such group.
        let mut s = Canned::new(b"ERROR\r\n");
        let err = probe(&mut s, Protocol::Meta).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    fn stat_packet(key: &[u8], value: &[u8], status: u16) -> Vec<u8> {
        let mut p = vec![0u8; 24];
        p[0] = 0x81;
        p[1] = 0x10;
        p[2..4].copy_from_slice(&(key.len() as u16).to_be_bytes());
        p[6..8].copy_from_slice(&status.to_be_bytes());
        p[8..12].copy_from_slice(&((key.len() + value.len()) as u32).to_be_bytes());
        p.extend_from_slice(key);
        p.extend_from_slice(value);
        p
    }

    #[test]
    fn binary_probe_sends_stat_worker_and_reads_to_the_empty_key() {
        let mut reply = stat_packet(b"worker", b"0", 0);
        reply.extend(stat_packet(b"workers", b"4", 0));
        reply.extend(stat_packet(b"", b"", 0));
        let mut s = Canned::new(&reply);
        let info = probe(&mut s, Protocol::Binary).unwrap();
        assert_eq!(&s.written[..2], &[0x80, 0x10]);
        assert_eq!(&s.written[24..], b"worker");
        assert_eq!((info.worker, info.workers), (0, Some(4)));
        let mut s = Canned::new(&stat_packet(b"", b"Not found", 0x0001));
        let err = probe(&mut s, Protocol::Binary).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn every_truncation_of_a_reply_asks_for_more_and_trailing_bytes_stay() {
        let text = b"STAT worker 1\r\nSTAT workers 2\r\nEND\r\n".to_vec();
        let mut binary = stat_packet(b"worker", b"1", 0);
        binary.extend(stat_packet(b"", b"", 0));
        let line = b"id=7 db=0 worker=1\n";
        let mut resp = format!("${}\r\n", line.len()).into_bytes();
        resp.extend_from_slice(line);
        resp.extend_from_slice(b"\r\n");
        for (protocol, reply) in [
            (Protocol::Text, text),
            (Protocol::Binary, binary),
            (Protocol::Resp, resp),
        ] {
            for n in 0..reply.len() {
                assert_eq!(
                    parse_probe(protocol, &reply[..n]),
                    Ok(None),
                    "{protocol:?} {n}"
                );
            }
            // A pipelined request's reply after it is not the probe's.
            let mut more = reply.clone();
            more.extend_from_slice(b"NEXT");
            let (info, used) = parse_probe(protocol, &more).unwrap().unwrap();
            assert_eq!((info.worker, used), (1, reply.len()), "{protocol:?}");
        }
        let workers = b"*2\r\n$10\r\nio-threads\r\n$1\r\n4\r\n";
        for n in 0..workers.len() {
            assert_eq!(parse_resp_workers(&workers[..n]), Ok(None), "{n}");
        }
        assert_eq!(parse_resp_workers(workers), Ok(Some((4, workers.len()))));
    }

    #[test]
    fn one_exchange_gives_worker_and_count_in_every_protocol() {
        let line = b"id=7 db=0 worker=1\n";
        let mut resp = format!("${}\r\n", line.len()).into_bytes();
        resp.extend_from_slice(line);
        resp.extend_from_slice(b"\r\n*2\r\n$10\r\nio-threads\r\n$1\r\n2\r\n");
        let text = b"STAT worker 1\r\nSTAT workers 2\r\nEND\r\n".to_vec();
        let mut binary = stat_packet(b"worker", b"1", 0);
        binary.extend(stat_packet(b"workers", b"2", 0));
        binary.extend(stat_packet(b"", b"", 0));
        for (protocol, reply) in [
            (Protocol::Resp, resp),
            (Protocol::Text, text),
            (Protocol::Binary, binary),
        ] {
            // The CONFIG GET of RESP's probe rides on the same write.
            let request = probe_with_workers_request(protocol);
            assert!(request.starts_with(probe_request(protocol)), "{protocol:?}");
            assert_eq!(
                request.ends_with(RESP_WORKERS_REQUEST),
                protocol == Protocol::Resp
            );
            // The CLIENT INFO reply alone is not the whole answer.
            for n in 0..reply.len() {
                assert_eq!(
                    parse_probe_with_workers(protocol, &reply[..n]),
                    Ok(None),
                    "{protocol:?} {n}"
                );
            }
            let mut more = reply.clone();
            more.extend_from_slice(b"NEXT");
            let (info, used) = parse_probe_with_workers(protocol, &more).unwrap().unwrap();
            assert_eq!(
                (info.worker, info.workers, used),
                (1, Some(2), reply.len()),
                "{protocol:?}"
            );
        }
        // A stats group without the count cannot be steered on.
        assert_eq!(
            parse_probe_with_workers(Protocol::Meta, b"STAT worker 0\r\nEND\r\n"),
            Err(ProbeError::NoWorker)
        );
    }

    #[test]
    fn replies_that_name_no_worker_are_errors() {
        assert_eq!(
            parse_probe(Protocol::Text, b"ERROR\r\n"),
            Err(ProbeError::Refused)
        );
        assert_eq!(
            parse_probe(Protocol::Text, b"STAT pid 1\r\nEND\r\n"),
            Err(ProbeError::NoWorker)
        );
        assert_eq!(
            parse_probe(Protocol::Meta, b"HELLO\r\n"),
            Err(ProbeError::Malformed)
        );
        assert_eq!(
            parse_probe(Protocol::Resp, b"-ERR no\r\n"),
            Err(ProbeError::Refused)
        );
        assert_eq!(
            parse_probe(Protocol::Resp, b"+OK\r\n"),
            Err(ProbeError::NoWorker)
        );
        let mut wrong_magic = stat_packet(b"", b"", 0);
        wrong_magic[0] = 0x80;
        assert_eq!(
            parse_probe(Protocol::Binary, &wrong_magic),
            Err(ProbeError::Malformed)
        );
        assert_eq!(parse_resp_workers(b"*0\r\n"), Err(ProbeError::NoWorker));
    }

    #[test]
    fn resp_probe_finds_the_worker_field_and_config_gives_the_count() {
        let line = b"id=7 addr=? laddr=? fd=? name= db=0 multi=-1 watch=0 resp=2 lib-name= lib-ver= worker=3\n";
        let mut reply = format!("${}\r\n", line.len()).into_bytes();
        reply.extend_from_slice(line);
        reply.extend_from_slice(b"\r\n");
        let mut s = Canned::new(&reply);
        assert_eq!(probe(&mut s, Protocol::Resp).unwrap().worker, 3);
        let mut s = Canned::new(b"*2\r\n$10\r\nio-threads\r\n$1\r\n4\r\n");
        assert_eq!(resp_workers(&mut s).unwrap(), 4);
        let mut s = Canned::new(b"-ERR unknown command\r\n");
        assert_eq!(
            probe(&mut s, Protocol::Resp).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
