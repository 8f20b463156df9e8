//! One client connection: its socket, write and read buffers, the requests in flight (oldest
//! first, since memcached answers in order) and, under `--verify`, the versions of the keys it
//! owns.
//!
//! ```text
//! encode → out ─write()─▶ socket ─read()─▶ inb → decode against inflight.front()
//! ```

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::verify::KeyState;
use crate::workload::{Command, Ownership, Picker};

/// Initial read buffer size; it grows for replies larger than this.
const READ_CHUNK: usize = 64 * 1024;

/// A request sent and not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// GET or SET.
    pub command: Command,
    /// Key index.
    pub key: u64,
    /// Version written by a verified SET (0 otherwise).
    pub version: u32,
    /// Binary-protocol opaque.
    pub opaque: u32,
    /// When the request was due (open loop) or sent (closed loop), run-clock ns.
    pub intended_ns: u64,
    /// When it was handed to the socket, run-clock ns.
    pub sent_ns: u64,
    /// Whether it belongs to the measurement window.
    pub measured: bool,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// A non-blocking connect is under way.
    Connecting,
    /// Connected; requests may be sent.
    Ready,
    /// Closed after an error; reconnect at `retry_at_ns`.
    Down {
        /// Run-clock time of the next connection attempt.
        retry_at_ns: u64,
    },
}

/// What a read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many new bytes are in the buffer.
    Data(usize),
    /// Nothing to read right now.
    WouldBlock,
    /// The server closed the connection.
    Closed,
}

/// What a flush achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushOutcome {
    /// Everything was written.
    Done,
    /// The socket buffer is full; wait for writability.
    Blocked,
}

/// One connection to one server.
#[derive(Debug)]
pub struct Conn {
    /// Index among all connections of the run.
    pub index: usize,
    /// The server it talks to.
    pub server: SocketAddr,
    /// The socket, when there is one.
    pub stream: Option<TcpStream>,
    /// Lifecycle state.
    pub state: ConnState,
    /// Consecutive failed connection attempts (for back-off).
    pub failures: u32,
    /// When the current connection attempt started, run-clock ns.
    pub since_ns: u64,
    /// Encoded requests not yet written.
    pub out: Vec<u8>,
    /// Bytes of `out` already written.
    pub out_pos: usize,
    /// Received bytes; `inb[in_start..in_end]` is not decoded yet.
    pub inb: Vec<u8>,
    /// Start of undecoded bytes.
    pub in_start: usize,
    /// End of received bytes.
    pub in_end: usize,
    /// Requests in flight, oldest first.
    pub inflight: VecDeque<InFlight>,
    /// Next binary-protocol opaque.
    pub next_opaque: u32,
    /// This connection's request chooser.
    pub picker: Picker,
    /// Which keys it may use.
    pub ownership: Ownership,
    /// Versions of the keys it owns (index `key / connections`), under `--verify`.
    pub key_states: Vec<KeyState>,
    /// Whether EPOLLOUT is armed.
    pub write_interest: bool,
    /// Whether the connection is on its worker's list of connections to flush.
    pub dirty: bool,
    /// Whether the connection is on its worker's list of connections that are not ready.
    pub unready_listed: bool,
    /// Prefill: how many of the owned keys have been sent.
    pub prefill_sent: u64,
}

impl Conn {
    /// A connection that has not connected yet.
    pub fn new(
        index: usize,
        server: SocketAddr,
        picker: Picker,
        ownership: Ownership,
        owned_keys: usize,
    ) -> Conn {
        Conn {
            index,
            server,
            stream: None,
            state: ConnState::Down { retry_at_ns: 0 },
            failures: 0,
            since_ns: 0,
            out: Vec::with_capacity(READ_CHUNK),
            out_pos: 0,
            inb: vec![0; READ_CHUNK],
            in_start: 0,
            in_end: 0,
            inflight: VecDeque::new(),
            next_opaque: 0,
            picker,
            ownership,
            key_states: vec![KeyState::default(); owned_keys],
            write_interest: false,
            dirty: false,
            unready_listed: false,
            prefill_sent: 0,
        }
    }

    /// The version window of owned key `key`.
    ///
    /// # Panics
    /// If verification is off (no states) or the key is not owned by this connection.
    #[inline]
    pub fn key_state(&mut self, key: u64) -> &mut KeyState {
        let slot = match self.ownership {
            Ownership::Shared => key,
            Ownership::Owned { total, .. } => key / total,
        };
        &mut self.key_states[slot as usize]
    }

    /// A fresh opaque for the next request.
    #[inline]
    pub fn take_opaque(&mut self) -> u32 {
        let o = self.next_opaque;
        self.next_opaque = self.next_opaque.wrapping_add(1);
        o
    }

    /// Whether encoded bytes wait to be written.
    #[inline]
    pub fn has_output(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// Writes as much of `out` as the socket takes.
    ///
    /// # Errors
    /// The write error (reset, broken pipe); a missing socket is `NotConnected`.
    pub fn flush(&mut self) -> io::Result<FlushOutcome> {
        let Some(stream) = self.stream.as_ref() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let mut stream = stream;
        while self.out_pos < self.out.len() {
            match stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(FlushOutcome::Blocked);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(FlushOutcome::Done)
    }

    /// Whether the received bytes reach the end of the buffer: after a read, it took all the
    /// room it was offered, so the socket may hold more.
    #[inline]
    pub fn buffer_full(&self) -> bool {
        self.in_end == self.inb.len()
    }

    /// Reads once into the buffer, making room first (compacting, or growing when one reply
    /// fills it).
    ///
    /// # Errors
    /// The read error (reset); a missing socket is `NotConnected`.
    pub fn read_some(&mut self) -> io::Result<ReadOutcome> {
        if self.in_start == self.in_end {
            self.in_start = 0;
            self.in_end = 0;
        }
        if self.in_end == self.inb.len() {
            if self.in_start > 0 {
                self.inb.copy_within(self.in_start..self.in_end, 0);
                self.in_end -= self.in_start;
                self.in_start = 0;
            } else {
                let len = self.inb.len() * 2;
                self.inb.resize(len, 0);
            }
        }
        let Some(stream) = self.stream.as_ref() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let mut stream = stream;
        loop {
            match stream.read(&mut self.inb[self.in_end..]) {
                Ok(0) => return Ok(ReadOutcome::Closed),
                Ok(n) => {
                    self.in_end += n;
                    return Ok(ReadOutcome::Data(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(ReadOutcome::WouldBlock);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Drops the socket and every buffered byte; returns the requests that were in flight.
    pub fn close(&mut self) -> VecDeque<InFlight> {
        self.stream = None;
        self.out.clear();
        self.out_pos = 0;
        self.in_start = 0;
        self.in_end = 0;
        self.write_interest = false;
        std::mem::take(&mut self.inflight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{KeyDist, Mix};
    use std::net::TcpListener;

    fn conn(addr: SocketAddr) -> Conn {
        let mix = Mix {
            keys: 10,
            key_dist: KeyDist::Uniform,
            get_ratio: 1.0,
            value_min: 1,
            value_max: 1,
        };
        Conn::new(
            0,
            addr,
            Picker::new(mix, Ownership::Shared, 1),
            Ownership::Shared,
            0,
        )
    }

    #[test]
    fn read_buffer_compacts_and_grows_for_big_replies() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut c = conn(addr);
        let client = TcpStream::connect(addr).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.set_nonblocking(true).unwrap();
        c.stream = Some(client);
        assert_eq!(c.read_some().unwrap(), ReadOutcome::WouldBlock);
        let big = vec![7u8; READ_CHUNK * 3];
        server.write_all(&big).unwrap();
        let mut got = 0;
        while got < big.len() {
            match c.read_some().unwrap() {
                ReadOutcome::Data(n) => got += n,
                ReadOutcome::WouldBlock => std::thread::yield_now(),
                ReadOutcome::Closed => panic!("closed"),
            }
        }
        // Nothing was consumed, so the buffer had to grow to hold all of it.
        assert_eq!(c.in_end - c.in_start, big.len());
        assert!(c.inb.len() >= big.len());
        // After consuming most of it, a read compacts instead of growing.
        let len_before = c.inb.len();
        c.in_start = c.in_end - 10;
        server.write_all(&vec![9u8; len_before / 2]).unwrap();
        drop(server);
        loop {
            match c.read_some().unwrap() {
                ReadOutcome::Closed => break,
                _ => std::thread::yield_now(),
            }
        }
        assert_eq!(c.in_start, 0);
        assert_eq!(c.in_end, 10 + len_before / 2);
        assert_eq!(c.inb.len(), len_before);
        assert!(c.close().is_empty());
        assert!(c.stream.is_none());
    }
}
