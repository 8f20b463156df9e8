//! Connection records: one per client connection, held by its session, listed by `stats
//! conns` (number, addresses, state, last command) and logged to `watch connevents` when it
//! goes.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use store::Now;

use super::{Control, EventKind};

/// Why a connection ended, as `watch connevents` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CloseReason {
    /// The client closed it, or asked to (`quit`), or the server closed it otherwise.
    Normal = 0,
    /// A malformed request, or a socket error.
    Error = 1,
    /// The server is stopping (`shutdown`).
    Shutdown = 2,
}

impl CloseReason {
    fn as_str(self) -> &'static str {
        match self {
            CloseReason::Normal => "normal",
            CloseReason::Error => "error",
            CloseReason::Shutdown => "shutdown",
        }
    }

    fn from_u8(byte: u8) -> CloseReason {
        match byte {
            1 => CloseReason::Error,
            2 => CloseReason::Shutdown,
            _ => CloseReason::Normal,
        }
    }
}

/// What a connection is doing, as `stats conns` names it (memcached's connection states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    /// Waiting for, or reading, a request.
    ParseCmd = 0,
    /// A refused value or frame is being read and dropped.
    Nread = 1,
    /// A watcher: log lines are sent to it.
    Watch = 2,
}

impl ConnState {
    fn as_str(self) -> &'static str {
        match self {
            ConnState::ParseCmd => "conn_parse_cmd",
            ConnState::Nread => "conn_nread",
            ConnState::Watch => "conn_watch",
        }
    }

    fn from_u8(byte: u8) -> ConnState {
        match byte {
            1 => ConnState::Nread,
            2 => ConnState::Watch,
            _ => ConnState::ParseCmd,
        }
    }
}

/// One client connection as the operator sees it: its number, addresses and last command.
/// Held by the connection's session; when the connection goes, so does the record, which logs
/// the close (and tells `watch connevents`).
#[derive(Debug)]
pub struct ConnRecord {
    /// The connection's number, unique in this process (memcached shows its socket's fd).
    pub number: u64,
    /// The worker serving it.
    pub worker: usize,
    /// The client's address and port.
    pub peer: Option<SocketAddr>,
    /// The address and port it connected to.
    pub local: Option<SocketAddr>,
    /// How its worker finds it again (its table's packed id), once its first turn set it.
    pub(super) token: OnceLock<u128>,
    /// Unix milliseconds of its opening.
    pub opened_ms: u64,
    /// Unix milliseconds of its last request (its opening until one arrives).
    pub(super) last_cmd_ms: AtomicU64,
    /// What a Redis client's connection shows other connections' `CLIENT LIST`.
    pub(super) client: ClientView,
    pub(super) state: AtomicU8,
    pub(super) close_reason: AtomicU8,
    pub(super) control: Arc<Control>,
}

/// A Redis client connection's name, database and RESP version as its session last noted
/// them (on `HELLO`, `CLIENT SETNAME`, `SELECT`, `RESET`: never per command), for `CLIENT
/// LIST` on any worker.
#[derive(Debug, Default)]
pub(super) struct ClientView {
    /// 2 or 3 once the connection speaks RESP; 0 before (a memcached connection).
    resp: AtomicU8,
    db: AtomicU8,
    name: Mutex<Option<Box<[u8]>>>,
}

/// A Redis client as [`ConnRecord::client`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFields {
    /// The RESP version it speaks, 2 or 3.
    pub resp: u8,
    /// Its database.
    pub db: u8,
    /// Its name (empty: none).
    pub name: Box<[u8]>,
}

impl ConnRecord {
    /// Notes what the connection's Redis session is now: RESP `resp`, database `db`, `name`.
    pub fn note_client(&self, resp: u8, db: u8, name: Option<&[u8]>) {
        self.client.resp.store(resp, Ordering::Relaxed);
        self.client.db.store(db, Ordering::Relaxed);
        if let Ok(mut held) = self.client.name.lock()
            && held.as_deref() != name
        {
            *held = name.map(Into::into);
        }
    }

    /// The connection as a Redis client, `None` for a connection that does not speak RESP.
    pub fn client(&self) -> Option<ClientFields> {
        let resp = self.client.resp.load(Ordering::Relaxed);
        if resp == 0 {
            return None;
        }
        let name = self
            .client
            .name
            .lock()
            .ok()
            .and_then(|held| held.clone())
            .unwrap_or_default();
        Some(ClientFields {
            resp,
            db: self.client.db.load(Ordering::Relaxed),
            name,
        })
    }

    /// Notes how the connection's worker finds it (its first turn does, once).
    pub fn set_token(&self, token: u128) {
        let _ = self.token.set(token);
    }

    /// Asks the connection's worker to close it in its next turn (`CLIENT KILL`); false when
    /// it has not had a turn yet (and so has no token to be found by).
    pub fn request_close(&self) -> bool {
        match self.token.get() {
            Some(&token) => {
                self.control.kills.request(self.worker, token);
                true
            }
            None => false,
        }
    }

    /// Unix milliseconds of its last request.
    pub fn last_cmd_ms(&self) -> u64 {
        self.last_cmd_ms.load(Ordering::Relaxed)
    }

    /// Notes that requests were executed at `now`, leaving the connection in `state`.
    pub fn touch(&self, now: Now, state: ConnState) {
        self.last_cmd_ms.store(now.millis(), Ordering::Relaxed);
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// Notes the connection's state.
    pub fn set_state(&self, state: ConnState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// The connection's state.
    pub fn state(&self) -> ConnState {
        ConnState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Records why the server closes this connection (the close is logged when it goes).
    pub fn closing(&self, reason: CloseReason) {
        self.close_reason.store(reason as u8, Ordering::Relaxed);
    }

    /// The `stats conns` lines of this connection, as of `now`.
    pub fn stats_lines(&self, now: Now, mut emit: impl FnMut(&str, &dyn std::fmt::Display)) {
        let n = self.number;
        if let Some(peer) = self.peer {
            emit(&format!("{n}:addr"), &conn_addr(peer));
        }
        if let Some(local) = self.local {
            emit(&format!("{n}:listen_addr"), &conn_addr(local));
        }
        emit(&format!("{n}:state"), &self.state().as_str());
        let last = self.last_cmd_ms.load(Ordering::Relaxed);
        emit(
            &format!("{n}:secs_since_last_cmd"),
            &(now.millis().saturating_sub(last) / 1000),
        );
    }
}

impl Drop for ConnRecord {
    fn drop(&mut self) {
        let reason = CloseReason::from_u8(self.close_reason.load(Ordering::Relaxed));
        log::debug!(
            "<{} connection closed ({}, {})",
            self.number,
            self.peer.map_or("-".to_string(), |p| p.to_string()),
            reason.as_str()
        );
        let watchers = &self.control.watchers;
        if watchers.wants(EventKind::ConnEvents) {
            let now = Now::from_millis(unix_millis());
            watchers.publish(EventKind::ConnEvents, now, |line| {
                let (ip, port) = split_addr(self.peer);
                let _ = write!(
                    line,
                    "type=conn_close rip={ip} rport={port} transport=tcp reason={} cfd={}",
                    reason.as_str(),
                    self.number
                );
            });
        }
        watchers.forget(self.number);
    }
}

/// A socket address as memcached's `stats conns` writes it: `tcp:<ip>:<port>`, or for IPv6
/// `tcp6:[<ip>]:<port>`.
pub fn conn_addr(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("tcp:{a}"),
        SocketAddr::V6(a) => format!("tcp6:[{}]:{}", a.ip(), a.port()),
    }
}

/// The wall clock in unix milliseconds, for events that happen outside a request (a
/// connection's close); requests use the worker's clock.
fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(super) fn split_addr(addr: Option<SocketAddr>) -> (String, u16) {
    addr.map_or(("unknown".to_string(), 0), |a| {
        (a.ip().to_string(), a.port())
    })
}
