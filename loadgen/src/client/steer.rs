//! Steering (`--steer`): every key is sent only on a connection that the worker owning it
//! serves, so memspin never forwards a request between its cores.
//!
//! ```text
//! connect ─▶ ask the connection its worker (stats worker | STAT "worker" | CLIENT INFO)
//!   worker w still short of its share? keep : close, connect again (bounded)
//! every worker has connections / workers ─▶ key k to the connections of owner_of(k, workers)
//! ```
//!
//! **Shares.** Worker `w` gets `connections / workers` connections, one more for the first
//! `connections % workers` workers ([`Spread`]). How a new connection lands on a worker is the
//! server's packet path's choice (a flow hash, see `docs/steering.md`), so connections are
//! opened until every share is full, and one that lands on a worker whose share is full is
//! closed. [`MAX_ATTEMPTS_PER_CONNECTION`] and [`STEER_DEADLINE`] bound the attempts; a
//! server that puts every connection on the same worker is an error that says so.
//!
//! **Keys.** The keys of worker `w` (`owner_of(key, workers)`, the `owner` crate the server
//! uses) are split among `w`'s connections as the keys of a server are split among its
//! connections ([`place_by_owner`]): a connection picks, and under `--verify` owns, only keys
//! of its worker. The open loop hands a due arrival to a connection with a free slot, which
//! then picks one of its worker's keys; the closed loop refills each connection with its own.
//! Either way no key goes to a connection of another worker. The load of each worker follows
//! its connections (an equal share), not the popularity of its keys, as the load of each
//! server does with several `--server`.
//!
//! The probing, the shares and the placement know nothing of sockets ([`Spread`] and
//! [`place_by_owner`] take worker numbers), so a transport that learns its connections'
//! workers can use them as the kernel-socket path does ([`connect_steered`]).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Protocol;
use crate::placement::{KeySet, Placement};

/// Connection attempts allowed per connection kept before steering gives up.
pub const MAX_ATTEMPTS_PER_CONNECTION: usize = 32;

/// How long steering may take to give every worker its share.
pub const STEER_DEADLINE: Duration = Duration::from_secs(20);

/// How long reopening one steered connection may take (it blocks its thread).
pub const REOPEN_DEADLINE: Duration = Duration::from_millis(500);

/// How long one probe may wait for its reply.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Why steering could not set up its connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SteerError {
    /// A connection could not be opened or probed.
    Io {
        /// The server.
        server: SocketAddr,
        /// What went wrong.
        kind: io::ErrorKind,
    },
    /// The server's reply does not name a worker: it is not memspin, or too old.
    NotAnswered(String),
    /// The server's owner hash is not the one this generator computes.
    OwnerHash(String),
    /// The server does not spread connections over its workers.
    Unspread {
        /// Connections opened.
        attempts: usize,
        /// Connections each worker got.
        got: Vec<usize>,
        /// Connections each worker needed.
        wanted: Vec<usize>,
    },
    /// Some connection's worker owns fewer keys than it has connections.
    FewKeys {
        /// The worker.
        worker: usize,
    },
    /// Steering needs one server, over kernel sockets.
    Unsupported(&'static str),
}

impl fmt::Display for SteerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SteerError::Io { server, kind } => write!(f, "--steer: {server}: {kind}"),
            SteerError::NotAnswered(why) => write!(
                f,
                "--steer: the server does not say which worker serves a connection ({why}); \
                 it needs memspin"
            ),
            SteerError::OwnerHash(name) => write!(
                f,
                "--steer: the server's owner hash is {name:?}, this generator computes {:?}",
                owner::OWNER_HASH_NAME
            ),
            SteerError::Unspread {
                attempts,
                got,
                wanted,
            } => write!(
                f,
                "--steer: after {attempts} connections the workers had {got:?} of the {wanted:?} \
                 connections wanted: the server does not spread connections over its workers"
            ),
            SteerError::FewKeys { worker } => write!(
                f,
                "--steer: worker {worker} owns fewer keys than it has connections: use more --keys"
            ),
            SteerError::Unsupported(why) => write!(f, "--steer {why}"),
        }
    }
}

impl std::error::Error for SteerError {}

/// Whether a connection is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Its worker's share was short: keep it.
    Keep,
    /// Its worker has its share: close it and open another.
    Close,
}

/// Each worker's share of the connections and how many it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spread {
    wanted: Vec<usize>,
    got: Vec<usize>,
}

impl Spread {
    /// `connections` over `workers` (at least one): `connections / workers` each, one more
    /// for the first `connections % workers`.
    pub fn new(connections: usize, workers: usize) -> Spread {
        let workers = workers.max(1);
        let wanted = (0..workers)
            .map(|w| connections / workers + usize::from(w < connections % workers))
            .collect();
        Spread {
            wanted,
            got: vec![0; workers],
        }
    }

    /// A new connection served by `worker`: kept while its share is short.
    pub fn offer(&mut self, worker: usize) -> Offer {
        match (self.got.get(worker), self.wanted.get(worker)) {
            (Some(&got), Some(&wanted)) if got < wanted => {
                self.got[worker] += 1;
                Offer::Keep
            }
            _ => Offer::Close,
        }
    }

    /// Whether every worker has its share.
    pub fn is_full(&self) -> bool {
        self.got == self.wanted
    }

    /// Connections each worker has.
    pub fn got(&self) -> &[usize] {
        &self.got
    }

    /// Connections each worker is to get.
    pub fn wanted(&self) -> &[usize] {
        &self.wanted
    }
}

/// Places `keys` keys (`key(i)` gives the bytes of key `i`) on connections by owner: connection
/// `c`, served by `conn_workers[c]` among `workers`, picks the keys that worker owns, and owns
/// every `n`-th of them (`n` the worker's connections, starting at the connection's rank among
/// them). With `verify` it picks only the keys it owns.
///
/// # Errors
/// [`SteerError::FewKeys`] when a worker with connections owns fewer keys than it has
/// connections.
pub fn place_by_owner<'k>(
    keys: u64,
    key: impl Fn(u64) -> &'k [u8],
    workers: usize,
    conn_workers: &[usize],
    verify: bool,
) -> Result<Placement, SteerError> {
    let workers = workers.max(1);
    let mut lists: Vec<Vec<u64>> = vec![Vec::new(); workers];
    for k in 0..keys {
        lists[owner::owner_of(key(k), workers)].push(k);
    }
    let lists: Vec<Arc<[u64]>> = lists.into_iter().map(Arc::from).collect();
    let mut per_worker = vec![0u64; workers];
    for &w in conn_workers {
        per_worker[w] += 1;
    }
    for (w, &n) in per_worker.iter().enumerate() {
        if n > lists[w].len() as u64 {
            return Err(SteerError::FewKeys { worker: w });
        }
    }
    let mut rank = vec![0u64; workers];
    let (pick, own) = conn_workers
        .iter()
        .map(|&w| {
            let own = KeySet::List {
                list: lists[w].clone(),
                first: rank[w],
                step: per_worker[w],
            };
            rank[w] += 1;
            let pick = if verify {
                own.clone()
            } else {
                KeySet::List {
                    list: lists[w].clone(),
                    first: 0,
                    step: 1,
                }
            };
            (pick, own)
        })
        .unzip();
    Ok(Placement { pick, own })
}

/// Connections to `server`, each served by the worker given with it, every worker with its
/// share of `connections` ([`Spread`]), in the order of their connection indices.
#[derive(Debug)]
pub struct Steered {
    /// The connections and their workers.
    pub conns: Vec<(TcpStream, usize)>,
    /// Workers serving.
    pub workers: usize,
}

/// Opens `connections` kernel connections to `server` speaking `protocol` and keeps those that
/// fill each worker's share, closing the others, within [`MAX_ATTEMPTS_PER_CONNECTION`]
/// attempts per connection and [`STEER_DEADLINE`].
///
/// # Errors
/// [`SteerError`]: a connection failed, the server does not name workers or hashes keys
/// another way, or it did not spread the connections in time.
pub fn connect_steered(
    server: SocketAddr,
    protocol: Protocol,
    connections: usize,
) -> Result<Steered, SteerError> {
    let io_err = |e: io::Error| SteerError::Io {
        server,
        kind: e.kind(),
    };
    let started = Instant::now();
    let max_attempts = connections.max(1) * MAX_ATTEMPTS_PER_CONNECTION;
    let mut spread: Option<Spread> = None;
    let mut kept: Vec<(TcpStream, usize)> = Vec::with_capacity(connections);
    let mut attempts = 0;
    while spread.as_ref().is_none_or(|s| !s.is_full()) {
        if attempts >= max_attempts || started.elapsed() >= STEER_DEADLINE {
            let s = spread.unwrap_or_else(|| Spread::new(connections, 1));
            return Err(SteerError::Unspread {
                attempts,
                got: s.got().to_vec(),
                wanted: s.wanted().to_vec(),
            });
        }
        attempts += 1;
        let mut stream = TcpStream::connect_timeout(&server, PROBE_TIMEOUT).map_err(io_err)?;
        stream.set_nodelay(true).map_err(io_err)?;
        stream
            .set_read_timeout(Some(PROBE_TIMEOUT))
            .map_err(io_err)?;
        let info = probe(&mut stream, protocol).map_err(|e| match e.kind() {
            io::ErrorKind::InvalidData => SteerError::NotAnswered(e.to_string()),
            kind => SteerError::Io { server, kind },
        })?;
        if let Some(name) = &info.owner_hash
            && name != owner::OWNER_HASH_NAME
        {
            return Err(SteerError::OwnerHash(name.clone()));
        }
        let spread = match &mut spread {
            Some(s) => s,
            None => {
                let workers = match info.workers {
                    Some(n) => n,
                    None => resp_workers(&mut stream).map_err(|e| match e.kind() {
                        io::ErrorKind::InvalidData => SteerError::NotAnswered(e.to_string()),
                        kind => SteerError::Io { server, kind },
                    })?,
                };
                spread.insert(Spread::new(connections, workers))
            }
        };
        if spread.offer(info.worker) == Offer::Keep {
            stream.set_read_timeout(None).map_err(io_err)?;
            kept.push((stream, info.worker));
        }
    }
    let workers = spread.map_or(1, |s| s.wanted().len());
    Ok(Steered {
        conns: kept,
        workers,
    })
}

/// Opens a connection to `server` served by `worker` again (a steered connection that
/// failed): connects and probes, closing connections that land elsewhere, within
/// [`MAX_ATTEMPTS_PER_CONNECTION`] attempts and [`REOPEN_DEADLINE`]. It blocks its thread
/// meanwhile, which only the failure of a connection makes it do.
///
/// # Errors
/// The last I/O error, or [`io::ErrorKind::TimedOut`] when no attempt landed on `worker`.
pub fn reconnect(server: SocketAddr, protocol: Protocol, worker: usize) -> io::Result<TcpStream> {
    let deadline = Instant::now() + REOPEN_DEADLINE;
    for _ in 0..MAX_ATTEMPTS_PER_CONNECTION {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut stream = TcpStream::connect_timeout(&server, left)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(left))?;
        if probe(&mut stream, protocol)?.worker == worker {
            stream.set_read_timeout(None)?;
            return Ok(stream);
        }
    }
    Err(io::ErrorKind::TimedOut.into())
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
fn resp_workers<S: Read + Write>(stream: &mut S) -> io::Result<usize> {
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
    fn shares_are_even_and_extra_connections_are_closed() {
        let mut s = Spread::new(5, 2);
        assert_eq!(s.wanted(), &[3, 2]);
        for _ in 0..3 {
            assert_eq!(s.offer(0), Offer::Keep);
        }
        // Worker 0 is full: more connections landing there are closed.
        assert_eq!(s.offer(0), Offer::Close);
        assert!(!s.is_full());
        assert_eq!(s.offer(1), Offer::Keep);
        assert_eq!(s.offer(1), Offer::Keep);
        assert_eq!(s.offer(1), Offer::Close);
        assert!(s.is_full());
        assert_eq!(s.got(), &[3, 2]);
        // A worker number the server should not have given is never kept.
        assert_eq!(s.offer(7), Offer::Close);
    }

    #[test]
    fn fewer_connections_than_workers_leave_some_workers_without() {
        let mut s = Spread::new(1, 3);
        assert_eq!(s.wanted(), &[1, 0, 0]);
        assert_eq!(s.offer(2), Offer::Close);
        assert_eq!(s.offer(0), Offer::Keep);
        assert!(s.is_full());
    }

    fn key(i: u64) -> Vec<u8> {
        format!("memspin:{i:08}").into_bytes()
    }

    #[test]
    fn every_key_a_connection_picks_is_owned_by_its_worker() {
        let keys: Vec<Vec<u8>> = (0..1000).map(key).collect();
        let conn_workers = [1, 0, 1, 0, 0];
        for verify in [false, true] {
            let p = place_by_owner(1000, |k| &keys[k as usize], 2, &conn_workers, verify).unwrap();
            for (c, &w) in conn_workers.iter().enumerate() {
                for set in [&p.pick[c], &p.own[c]] {
                    assert!(!set.is_empty());
                    for n in 0..set.len() {
                        let k = set.nth(n);
                        assert_eq!(owner::owner_of(&keys[k as usize], 2), w, "conn {c} key {k}");
                    }
                }
            }
            // Every key is owned by exactly one connection.
            let mut owners = vec![0u32; 1000];
            for own in &p.own {
                for n in 0..own.len() {
                    owners[own.nth(n) as usize] += 1;
                }
            }
            assert!(owners.iter().all(|&n| n == 1));
        }
    }

    #[test]
    fn a_worker_with_fewer_keys_than_connections_is_an_error() {
        let keys: Vec<Vec<u8>> = (0..3).map(key).collect();
        let err = place_by_owner(3, |k| &keys[k as usize], 2, &[0, 0, 0, 1, 1, 1], false);
        assert!(matches!(err, Err(SteerError::FewKeys { .. })));
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

    /// A server on 127.0.0.1 of 2 workers whose n-th connection says it is served by worker
    /// `worker_of(n)`; returns its address and the number of connections it took so far.
    fn fake_server(
        worker_of: fn(usize) -> usize,
    ) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let taken = Arc::new(AtomicUsize::new(0));
        let count = taken.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let n = count.fetch_add(1, Ordering::SeqCst);
                let mut line = [0u8; 14];
                if stream.read_exact(&mut line).is_ok() {
                    let reply =
                        format!("STAT worker {}\r\nSTAT workers 2\r\nEND\r\n", worker_of(n));
                    let _ = stream.write_all(reply.as_bytes());
                }
                // Kept open until the client closes it, as a server would.
                std::thread::spawn(move || {
                    let _ = stream.read(&mut [0u8; 1]);
                });
            }
        });
        (addr, taken)
    }

    #[test]
    fn a_reopened_connection_is_probed_until_it_lands_on_its_worker() {
        use std::sync::atomic::Ordering;
        let (addr, taken) = fake_server(|n| n % 2);
        // Connection 0 lands on worker 0: one for worker 1 takes a second attempt.
        reconnect(addr, Protocol::Text, 1).unwrap();
        assert_eq!(taken.load(Ordering::SeqCst), 2);
        // No connection ever lands on worker 5: bounded attempts, then an error.
        let err = reconnect(addr, Protocol::Text, 5).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(taken.load(Ordering::SeqCst) <= 2 + MAX_ATTEMPTS_PER_CONNECTION);
    }

    #[test]
    fn connect_steered_keeps_each_workers_share_and_closes_the_rest() {
        let (addr, taken) = fake_server(|n| n % 2);
        let s = connect_steered(addr, Protocol::Text, 3).unwrap();
        assert_eq!(s.workers, 2);
        let workers: Vec<usize> = s.conns.iter().map(|c| c.1).collect();
        assert_eq!(workers, [0, 1, 0]);
        // Attempts 0, 1, 2 fill the shares [2, 1].
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[test]
    fn a_server_that_never_spreads_connections_is_a_clear_error() {
        let (addr, taken) = fake_server(|_| 0);
        let err = connect_steered(addr, Protocol::Text, 2).unwrap_err();
        assert_eq!(
            err,
            SteerError::Unspread {
                attempts: 2 * MAX_ATTEMPTS_PER_CONNECTION,
                got: vec![1, 0],
                wanted: vec![1, 1]
            }
        );
        assert!(err.to_string().contains("does not spread connections"));
        assert_eq!(
            taken.load(std::sync::atomic::Ordering::SeqCst),
            2 * MAX_ATTEMPTS_PER_CONNECTION
        );
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
