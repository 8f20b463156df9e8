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
//! [`place_by_owner`] take worker numbers): the kernel-socket path opens and probes its
//! connections here ([`connect_steered`]); the bypass client's threads probe their own
//! connections without blocking (`worker/stack.rs`) and fill one [`Shares`] together. The
//! probe itself (what each protocol asks, and a parser of the reply that does no I/O) is in
//! `probe.rs`.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Protocol;
use crate::placement::{KeySet, Placement};

mod probe;

use probe::resp_workers;
pub use probe::{
    ProbeError, RESP_WORKERS_REQUEST, WorkerInfo, parse_probe, parse_probe_with_workers,
    parse_resp_workers, probe, probe_request, probe_with_workers_request,
};

/// Connection attempts allowed per connection kept before steering gives up.
pub const MAX_ATTEMPTS_PER_CONNECTION: usize = 32;

/// How long steering may take to give every worker its share.
pub const STEER_DEADLINE: Duration = Duration::from_secs(20);

/// How long reopening one steered connection may take (it blocks its thread).
pub const REOPEN_DEADLINE: Duration = Duration::from_millis(500);

/// How long one probe may wait for its reply.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// Steering cannot run as configured (the message says why).
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

/// The shares of connections probed on several threads at once (the bypass client's, each
/// thread opening its own connections): one [`Spread`] behind the threads' lock, the worker
/// each kept connection landed on, and the attempts made. The first answer fixes the number
/// of workers; a connection kept here is placed by [`place_by_owner`] once all are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shares {
    connections: usize,
    spread: Option<Spread>,
    conn_workers: Vec<Option<usize>>,
    attempts: usize,
}

impl Shares {
    /// No connection kept yet, of `connections`.
    pub fn new(connections: usize) -> Shares {
        Shares {
            connections,
            spread: None,
            conn_workers: vec![None; connections],
            attempts: 0,
        }
    }

    /// Connection `index` answered `info` (from [`parse_probe_with_workers`]): kept while
    /// its worker's share is short.
    ///
    /// # Errors
    /// [`SteerError::OwnerHash`] for another owner hash; [`SteerError::NotAnswered`] when
    /// the reply has no worker count or another count than the first reply's.
    pub fn offer(&mut self, index: usize, info: &WorkerInfo) -> Result<Offer, SteerError> {
        self.attempts += 1;
        if let Some(name) = &info.owner_hash
            && name != owner::OWNER_HASH_NAME
        {
            return Err(SteerError::OwnerHash(name.clone()));
        }
        let workers = info.workers.ok_or_else(|| {
            SteerError::NotAnswered("the reply does not say how many workers serve".into())
        })?;
        let connections = self.connections;
        let spread = self
            .spread
            .get_or_insert_with(|| Spread::new(connections, workers));
        if spread.wanted().len() != workers.max(1) {
            return Err(SteerError::NotAnswered(format!(
                "connections were told of {} and of {workers} workers",
                spread.wanted().len()
            )));
        }
        let offer = spread.offer(info.worker);
        if offer == Offer::Keep
            && let Some(slot) = self.conn_workers.get_mut(index)
        {
            *slot = Some(info.worker);
        }
        Ok(offer)
    }

    /// Whether every worker has its share.
    pub fn is_full(&self) -> bool {
        self.spread.as_ref().is_some_and(Spread::is_full)
    }

    /// The number of workers, once a connection said.
    pub fn workers(&self) -> Option<usize> {
        self.spread.as_ref().map(|s| s.wanted().len())
    }

    /// The worker of each connection, by index, once all are kept.
    pub fn conn_workers(&self) -> Option<Vec<usize>> {
        self.conn_workers.iter().copied().collect()
    }

    /// The error of a spread that did not fill: the attempts so far and the counts.
    pub fn unspread(&self) -> SteerError {
        let s = self
            .spread
            .clone()
            .unwrap_or_else(|| Spread::new(self.connections, 1));
        SteerError::Unspread {
            attempts: self.attempts,
            got: s.got().to_vec(),
            wanted: s.wanted().to_vec(),
        }
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

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

    fn info(worker: usize, workers: usize) -> WorkerInfo {
        WorkerInfo {
            worker,
            workers: Some(workers),
            owner_hash: Some(owner::OWNER_HASH_NAME.into()),
        }
    }

    #[test]
    fn shares_of_several_threads_record_each_kept_connections_worker() {
        let mut s = Shares::new(3);
        assert_eq!(s.workers(), None);
        assert_eq!(s.offer(2, &info(1, 2)), Ok(Offer::Keep));
        assert_eq!(s.offer(1, &info(1, 2)), Ok(Offer::Close));
        assert_eq!(s.conn_workers(), None);
        assert_eq!(s.offer(0, &info(0, 2)), Ok(Offer::Keep));
        assert!(!s.is_full());
        assert_eq!(s.offer(1, &info(0, 2)), Ok(Offer::Keep));
        assert!(s.is_full());
        assert_eq!(s.workers(), Some(2));
        assert_eq!(s.conn_workers(), Some(vec![0, 0, 1]));
        assert_eq!(
            s.unspread(),
            SteerError::Unspread {
                attempts: 4,
                got: vec![2, 1],
                wanted: vec![2, 1]
            }
        );
    }

    #[test]
    fn shares_refuse_another_hash_and_disagreeing_counts() {
        let mut s = Shares::new(2);
        let mut other = info(0, 2);
        other.owner_hash = Some("crc32".into());
        assert_eq!(
            s.offer(0, &other),
            Err(SteerError::OwnerHash("crc32".into()))
        );
        assert_eq!(s.offer(0, &info(0, 2)), Ok(Offer::Keep));
        assert!(matches!(
            s.offer(1, &info(0, 3)),
            Err(SteerError::NotAnswered(_))
        ));
        let mut none = info(1, 2);
        none.workers = None;
        assert!(matches!(s.offer(1, &none), Err(SteerError::NotAnswered(_))));
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
}
