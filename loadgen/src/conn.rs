//! One client connection: its socket, write and read buffers, the requests in flight (oldest
//! first, since memcached answers in order), its share of the prefill ([`PrefillQueue`]) and,
//! under `--verify`, the versions of the keys it owns.
//!
//! ```text
//! encode → out ─write()─▶ socket ─read()/recvmsg()─▶ inb → decode against inflight.front()
//!                           └─ error queue: transmit stamps ─▶ inflight (by stream offset)
//! ```
//!
//! With kernel timestamps on (see [`crate::tstamp`]), every request remembers where it ends in
//! the byte stream; a transmit stamp names the offset of the last byte of one `write()`, and
//! stamps every request that ends at or before it and has none yet: first the answered ones
//! waiting for their stamp (`awaiting`), then those in flight. The error queue is read in
//! batches rather than once per stamp (about five stamps per system call at 32 connections with
//! one request in flight each), so a reply may be decoded before its request's stamp is read;
//! it then waits in `awaiting`, in order, until the worker settles it.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;

use crate::histogram::OpKind;
use crate::placement::KeySet;
use crate::sys;
use crate::tstamp::{self, Stamps};
use crate::verify::KeyState;
use crate::workload::{Command, Picker};

/// Initial read buffer size; it grows for replies larger than this.
const READ_CHUNK: usize = 64 * 1024;

/// A request sent and not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// GET or SET.
    pub command: Command,
    /// Key index (a multi-get's keys wait in `Conn::multi`).
    pub key: u64,
    /// Keys of a multi-get (0 otherwise).
    pub nkeys: u32,
    /// Version written by a verified SET (0 otherwise).
    pub version: u32,
    /// Binary-protocol opaque.
    pub opaque: u32,
    /// When the request was due (open loop) or sent (closed loop), run-clock ns.
    pub intended_ns: u64,
    /// When it was encoded for the socket (the generator's clock), run-clock ns.
    pub sent_ns: u64,
    /// Whether it belongs to the measurement window.
    pub measured: bool,
    /// Stream offset just past its last byte (bytes since the socket's first).
    pub end_offset: u64,
    /// Software transmit stamp, run-clock ns.
    pub tx_kernel_ns: Option<u64>,
    /// Hardware transmit stamp, the NIC's clock in ns.
    pub tx_hw_ns: Option<u64>,
}

/// When a reply arrived and was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxTime {
    /// When the generator read it, run-clock ns.
    pub handled_ns: u64,
    /// Kernel software receive stamp, run-clock ns.
    pub kernel_ns: Option<u64>,
    /// Hardware receive stamp, the NIC's clock in ns.
    pub hw_ns: Option<u64>,
}

/// A reply decoded before its request's transmit stamp was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// What the reply was.
    pub kind: OpKind,
    /// The request, stamped once its transmit stamp is read.
    pub request: InFlight,
    /// When the reply came.
    pub rx: RxTime,
}

/// A prefill SET that was in flight when its connection closed: it may or may not have been
/// stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostSet {
    /// Key index.
    pub key: u64,
    /// The version it carried under `--verify` (0 otherwise).
    pub version: u32,
}

/// The next SET of a connection's prefill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefillSet {
    /// An owned key's first write: it takes the key's next version.
    New(u64),
    /// A lost SET, written again with the version it had: whether the lost one was applied
    /// (the server read it before the close) or not, the key ends up holding that version, so
    /// the verifier's window stays exact whichever write lands last.
    Again(LostSet),
}

/// What the prefill gave up when a connection's server stopped answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GivenUp {
    /// Lost SETs that were waiting to go again (counted among the keys when first sent).
    pub lost: u64,
    /// Owned keys never sent.
    pub unsent: u64,
}

/// A connection's share of the prefill: the keys it owns, in order, after the SETs that a
/// close lost, which go again first.
///
/// A key leaves the queue when it is sent and comes back only if its connection closes
/// before the reply; a reply (stored or not) settles it for good. So every reply shortens
/// the work, and the failures since the last reply ([`PrefillQueue::failed`]) are what tell a
/// server that is gone from one that loses a request now and then.
#[derive(Debug, Clone, Default)]
pub struct PrefillQueue {
    /// Owned keys sent or given up on, in the set's order.
    sent: u64,
    /// Lost SETs to send again, oldest first.
    lost: VecDeque<LostSet>,
    /// Connection failures since its last prefill reply.
    failures: u32,
}

impl PrefillQueue {
    /// Keys of `own` waiting to be sent: lost SETs and keys not sent yet.
    pub fn left(&self, own: &KeySet) -> u64 {
        self.lost.len() as u64 + own.len().saturating_sub(self.sent)
    }

    /// Takes the next SET to send, lost ones first; `None` when nothing is left.
    pub fn next(&mut self, own: &KeySet) -> Option<PrefillSet> {
        if let Some(set) = self.lost.pop_front() {
            return Some(PrefillSet::Again(set));
        }
        if self.sent >= own.len() {
            return None;
        }
        let key = own.nth(self.sent);
        self.sent += 1;
        Some(PrefillSet::New(key))
    }

    /// Puts back a SET its connection lost in flight, to be sent again.
    pub fn lost(&mut self, set: LostSet) {
        self.lost.push_back(set);
    }

    /// A reply came: the server is there.
    pub fn answered(&mut self) {
        self.failures = 0;
    }

    /// The connection failed (closed, refused, timed out); returns the failures since the
    /// last reply.
    pub fn failed(&mut self) -> u32 {
        self.failures = self.failures.saturating_add(1);
        self.failures
    }

    /// Gives up every key left (see [`PrefillQueue::left`]): none is sent again.
    pub fn give_up(&mut self, own: &KeySet) -> GivenUp {
        let given = GivenUp {
            lost: self.lost.len() as u64,
            unsent: own.len().saturating_sub(self.sent),
        };
        self.lost.clear();
        self.sent = self.sent.max(own.len());
        given
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// A non-blocking connect is under way.
    Connecting,
    /// `--steer` over the bypass client: connected, asked which worker serves it (the
    /// probe written, its reply read from `inb`); no request is sent until it is kept.
    Probing,
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
    /// This many new bytes are in the buffer, with the kernel's receive stamps of the read.
    Data(usize, Stamps),
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
    /// The socket, when there is one (kernel sockets).
    pub stream: Option<TcpStream>,
    /// `--steer`: the connection opened and probed before the run, taken by the first open.
    pub steered: Option<TcpStream>,
    /// `--steer`: the server's worker this connection must be served by (its keys' owner);
    /// a reopened connection is probed until it lands there again.
    pub worker: Option<usize>,
    /// The bypass client's connection, when there is one ([`crate::bypass`]).
    pub link: Option<netstack::ConnId>,
    /// `--steer` over the bypass client: connections opened and probed since it was last
    /// kept (those that landed on another worker were aborted).
    pub steer_attempts: u32,
    /// Bypass client: requests written since its last send stamp (it is on its worker's
    /// list of connections to stamp after the next egress poll).
    pub tx_pending: bool,
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
    /// The keys it owns: it alone writes them in prefill and, under `--verify`, ever.
    pub own: KeySet,
    /// Versions of the keys it owns (by position in `own`), under `--verify`.
    pub key_states: Vec<KeyState>,
    /// The keys of the multi-gets in flight, oldest first.
    pub multi: VecDeque<u64>,
    /// Whether EPOLLOUT is armed.
    pub write_interest: bool,
    /// Whether the connection is on its worker's list of connections to flush.
    pub dirty: bool,
    /// Whether the connection is on its worker's list of connections that are not ready.
    pub unready_listed: bool,
    /// Prefill: the owned keys still to write, and the SETs a close lost.
    pub prefill: PrefillQueue,
    /// Whether the socket has `SO_TIMESTAMPING` on.
    pub stamped: bool,
    /// Bytes handed to the socket since it opened.
    pub bytes_written: u64,
    /// Replies waiting for their request's transmit stamp, oldest first.
    pub awaiting: VecDeque<Answered>,
    /// Whether the connection is on its worker's list of connections with replies awaiting.
    pub unsettled: bool,
    /// Error-queue notifications since the queue was last read.
    pub errqueue_events: u32,
}

impl Conn {
    /// A connection that has not connected yet.
    pub fn new(
        index: usize,
        server: SocketAddr,
        picker: Picker,
        own: KeySet,
        verify: bool,
    ) -> Conn {
        let owned_keys = if verify { own.len() as usize } else { 0 };
        Conn {
            index,
            server,
            stream: None,
            steered: None,
            worker: None,
            link: None,
            steer_attempts: 0,
            tx_pending: false,
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
            own,
            key_states: vec![KeyState::default(); owned_keys],
            multi: VecDeque::new(),
            write_interest: false,
            dirty: false,
            unready_listed: false,
            prefill: PrefillQueue::default(),
            stamped: false,
            bytes_written: 0,
            awaiting: VecDeque::new(),
            unsettled: false,
            errqueue_events: 0,
        }
    }

    /// Gives the connection its keys: `picker` picks from them, and it owns `own` (with a
    /// version window per key under `verify`). Steering over the bypass client places keys
    /// only once every connection knows its worker.
    pub fn assign_keys(&mut self, picker: Picker, own: KeySet, verify: bool) {
        let owned_keys = if verify { own.len() as usize } else { 0 };
        self.picker = picker;
        self.own = own;
        self.key_states = vec![KeyState::default(); owned_keys];
    }

    /// Prefill: keys waiting to be sent on this connection (see [`PrefillQueue::left`]).
    #[inline]
    pub fn prefill_left(&self) -> u64 {
        self.prefill.left(&self.own)
    }

    /// Stream offset just past the last encoded byte: where a request encoded now ends.
    #[inline]
    pub fn encoded_end(&self) -> u64 {
        self.bytes_written + (self.out.len() - self.out_pos) as u64
    }

    /// Turns kernel timestamps on (`flags` from [`tstamp::Timestamps::socket_flags`]); call
    /// once connected, before the first byte is written, so stream offsets count from 0.
    ///
    /// # Errors
    /// The `setsockopt` error; the connection then runs without stamps.
    pub fn enable_stamps(&mut self, flags: u32) -> io::Result<()> {
        let Some(stream) = self.stream.as_ref() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        debug_assert_eq!(
            self.bytes_written, 0,
            "stamps enabled after the first write"
        );
        sys::set_timestamping(stream.as_raw_fd(), flags)?;
        self.stamped = true;
        Ok(())
    }

    /// Applies a transmit stamp with `OPT_ID` key `key` (software stamp already on the run
    /// clock, hardware stamp raw) to the requests it covers, answered or in flight; returns how
    /// many.
    pub fn apply_tx_stamp(
        &mut self,
        key: u32,
        software_ns: Option<u64>,
        hw_ns: Option<u64>,
    ) -> usize {
        let Some(last) = tstamp::unwrap_key(key, self.bytes_written) else {
            return 0;
        };
        let mut applied = 0;
        let requests = self.awaiting.iter_mut().map(|a| &mut a.request);
        for r in requests.chain(self.inflight.iter_mut()) {
            if r.end_offset > last + 1 {
                break;
            }
            if r.tx_kernel_ns.is_none() && r.tx_hw_ns.is_none() {
                r.tx_kernel_ns = software_ns;
                r.tx_hw_ns = hw_ns;
                applied += 1;
            }
        }
        applied
    }

    /// Reads the socket's error queue (transmit stamps) into `q`; returns how many messages.
    ///
    /// # Errors
    /// The read error; a missing socket is `NotConnected`.
    pub fn read_errqueue(&mut self, q: &mut sys::ErrQueue) -> io::Result<usize> {
        let Some(stream) = self.stream.as_ref() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        q.recv(stream.as_raw_fd())
    }

    /// The version window of owned key `key`.
    ///
    /// # Panics
    /// If verification is off (no states) or the key is not owned by this connection.
    #[inline]
    pub fn key_state(&mut self, key: u64) -> &mut KeyState {
        let slot = self.own.position(key).expect("a verified key is owned");
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
                Ok(n) => {
                    self.out_pos += n;
                    self.bytes_written += n as u64;
                }
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

    /// Makes room in the buffer for more bytes: forgets decoded bytes, compacts, or grows
    /// when one reply fills it.
    pub fn make_room(&mut self) {
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
    }

    /// Moves `n` bytes written into the buffer's free space (after [`Conn::make_room`]) into
    /// the received bytes.
    #[inline]
    pub fn received(&mut self, n: usize) {
        self.in_end += n;
    }

    /// The buffer's free space, after [`Conn::make_room`].
    #[inline]
    pub fn free_space(&mut self) -> &mut [u8] {
        &mut self.inb[self.in_end..]
    }

    /// Reads once into the buffer, making room first (compacting, or growing when one reply
    /// fills it). With stamps on, reads with `recvmsg` and returns the receive stamps found in
    /// `control` (at least [`tstamp::CONTROL_LEN`] bytes).
    ///
    /// # Errors
    /// The read error (reset); a missing socket is `NotConnected`.
    pub fn read_some(&mut self, control: &mut [u8]) -> io::Result<ReadOutcome> {
        self.make_room();
        let Some(stream) = self.stream.as_ref() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let mut stream = stream;
        loop {
            let res = if self.stamped {
                sys::recv_with_control(stream.as_raw_fd(), &mut self.inb[self.in_end..], control)
                    .map(|(n, clen)| (n, tstamp::parse_control(&control[..clen]).stamps))
            } else {
                stream
                    .read(&mut self.inb[self.in_end..])
                    .map(|n| (n, Stamps::default()))
            };
            match res {
                Ok((0, _)) => return Ok(ReadOutcome::Closed),
                Ok((n, stamps)) => {
                    self.in_end += n;
                    return Ok(ReadOutcome::Data(n, stamps));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(ReadOutcome::WouldBlock);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Drops the socket and every buffered byte; returns the requests that were in flight
    /// (a multi-get's keys are dropped: verification learns nothing from a lost read).
    /// Replies still awaiting their stamps must have been settled first.
    pub fn close(&mut self) -> VecDeque<InFlight> {
        debug_assert!(self.awaiting.is_empty(), "replies closed unrecorded");
        self.awaiting.clear();
        self.errqueue_events = 0;
        self.stream = None;
        self.link = None;
        self.tx_pending = false;
        self.out.clear();
        self.out_pos = 0;
        self.in_start = 0;
        self.in_end = 0;
        self.write_interest = false;
        self.stamped = false;
        self.bytes_written = 0;
        self.multi.clear();
        std::mem::take(&mut self.inflight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{KeyDist, Mix, ValueSizes};
    use std::net::TcpListener;

    fn conn(addr: SocketAddr) -> Conn {
        let mix = Mix {
            keys: 10,
            key_dist: KeyDist::Uniform,
            get_ratio: 1.0,
            delete_ratio: 0.0,
            multiget: 1,
            value_sizes: ValueSizes::Fixed(1),
        };
        Conn::new(
            0,
            addr,
            Picker::new(mix, KeySet::all(10), 1),
            KeySet::all(10),
            false,
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
        let mut control = [0u8; tstamp::CONTROL_LEN];
        assert_eq!(c.read_some(&mut control).unwrap(), ReadOutcome::WouldBlock);
        let big = vec![7u8; READ_CHUNK * 3];
        server.write_all(&big).unwrap();
        let mut got = 0;
        while got < big.len() {
            match c.read_some(&mut control).unwrap() {
                ReadOutcome::Data(n, _) => got += n,
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
            match c.read_some(&mut control).unwrap() {
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

    fn request(end_offset: u64) -> InFlight {
        InFlight {
            command: Command::Get,
            key: 0,
            nkeys: 0,
            version: 0,
            opaque: end_offset as u32,
            intended_ns: 0,
            sent_ns: 0,
            measured: true,
            end_offset,
            tx_kernel_ns: None,
            tx_hw_ns: None,
        }
    }

    #[test]
    fn a_transmit_stamp_covers_every_unstamped_request_up_to_its_byte() {
        let mut c = conn("127.0.0.1:1".parse().unwrap());
        // Requests of 24 bytes; the first two went out in one write (key 47), the third in the
        // next (key 71), the fourth is still being written.
        for end in [24, 48, 72, 96] {
            c.inflight.push_back(request(end));
        }
        c.bytes_written = 80;
        assert_eq!(c.apply_tx_stamp(47, Some(1_000), None), 2);
        assert_eq!(c.apply_tx_stamp(71, Some(2_000), None), 1);
        let tx: Vec<_> = c.inflight.iter().map(|r| r.tx_kernel_ns).collect();
        assert_eq!(tx, [Some(1_000), Some(1_000), Some(2_000), None]);
        // A stamp repeated (a retransmission) changes nothing.
        assert_eq!(c.apply_tx_stamp(47, Some(9_000), None), 0);
        assert_eq!(c.inflight[0].tx_kernel_ns, Some(1_000));
        // A lost stamp: the later one stamps the earlier request too.
        c.bytes_written = 96;
        c.inflight.pop_front();
        c.inflight.push_back(request(120));
        c.bytes_written = 120;
        assert_eq!(c.apply_tx_stamp(119, None, Some(77)), 2);
        assert_eq!(c.inflight[2].tx_hw_ns, Some(77));
        assert_eq!(c.inflight[3].tx_hw_ns, Some(77));
        // Answered requests awaiting their stamp come first in the stream and are stamped too.
        let answered = c.inflight.pop_front().unwrap();
        c.awaiting.push_back(Answered {
            kind: OpKind::GetHit,
            request: InFlight {
                tx_kernel_ns: None,
                ..answered
            },
            rx: RxTime {
                handled_ns: 0,
                kernel_ns: None,
                hw_ns: None,
            },
        });
        c.inflight.push_back(request(144));
        c.bytes_written = 144;
        assert_eq!(c.apply_tx_stamp(143, Some(5_000), None), 2);
        assert_eq!(c.awaiting[0].request.tx_kernel_ns, Some(5_000));
        assert_eq!(c.inflight.back().unwrap().tx_kernel_ns, Some(5_000));
        // Nothing written: no offset to match.
        let mut fresh = conn("127.0.0.1:1".parse().unwrap());
        fresh.inflight.push_back(request(24));
        assert_eq!(fresh.apply_tx_stamp(23, Some(1), None), 0);
    }

    /// The kernel's part: on loopback a write produces a software transmit stamp keyed by its
    /// last byte, and a read carries a software receive stamp.
    #[test]
    fn loopback_gives_transmit_and_receive_stamps() {
        use crate::tstamp::Timestamps;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut c = conn(addr);
        let client = TcpStream::connect(addr).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.set_nonblocking(true).unwrap();
        c.stream = Some(client);
        c.enable_stamps(Timestamps::Software.socket_flags().unwrap())
            .unwrap();
        assert!(c.stamped);
        for end in [10, 30] {
            c.inflight.push_back(request(end));
        }
        c.out.extend_from_slice(&[b'a'; 10]);
        assert_eq!(c.encoded_end(), 10);
        assert_eq!(c.flush().unwrap(), FlushOutcome::Done);
        c.out.extend_from_slice(&[b'b'; 20]);
        assert_eq!(c.encoded_end(), 30);
        assert_eq!(c.flush().unwrap(), FlushOutcome::Done);
        assert_eq!(c.bytes_written, 30);
        let mut q = sys::ErrQueue::new();
        let mut keys = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while keys.len() < 2 && std::time::Instant::now() < deadline {
            let n = c.read_errqueue(&mut q).unwrap();
            for k in 0..n {
                let ctl = tstamp::parse_control(q.control(k));
                assert!(ctl.stamps.software_ns.is_some(), "{ctl:?}");
                keys.push(ctl.tx_key.unwrap());
                c.apply_tx_stamp(ctl.tx_key.unwrap(), ctl.stamps.software_ns, None);
            }
        }
        assert_eq!(keys, [9, 29]);
        assert!(c.inflight.iter().all(|r| r.tx_kernel_ns.is_some()));
        let mut got = [0u8; 30];
        server.read_exact(&mut got).unwrap();
        // The kernel turns receive stamping on for the whole stack from a work queue after
        // the first socket asks for it, so the first packets may come unstamped.
        let mut control = [0u8; tstamp::CONTROL_LEN];
        let mut stamps = Stamps::default();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while stamps.software_ns.is_none() && std::time::Instant::now() < deadline {
            server.write_all(b"reply").unwrap();
            stamps = loop {
                match c.read_some(&mut control).unwrap() {
                    ReadOutcome::Data(_, stamps) => break stamps,
                    ReadOutcome::WouldBlock => std::thread::yield_now(),
                    ReadOutcome::Closed => panic!("closed"),
                }
            };
        }
        let rx = stamps.software_ns.expect("software receive stamp");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(rx <= now && now - rx < 10_000_000_000, "{rx} vs {now}");
        // Closing forgets the stream.
        c.close();
        assert!(!c.stamped && c.bytes_written == 0);
    }

    /// Keys 1, 4, 7, 10: one connection's share of 12 keys over three connections.
    fn owned() -> KeySet {
        KeySet::Stride {
            first: 1,
            step: 3,
            keys: 12,
        }
    }

    #[test]
    fn lost_prefill_sets_go_again_first_with_their_version() {
        let own = owned();
        let mut q = PrefillQueue::default();
        assert_eq!(q.left(&own), 4);
        assert_eq!(q.next(&own), Some(PrefillSet::New(1)));
        assert_eq!(q.next(&own), Some(PrefillSet::New(4)));
        let lost = [
            LostSet { key: 1, version: 1 },
            LostSet { key: 4, version: 1 },
        ];
        for set in lost {
            q.lost(set);
        }
        assert_eq!(q.left(&own), 4, "lost sets are left to send again");
        assert_eq!(q.next(&own), Some(PrefillSet::Again(lost[0])));
        assert_eq!(q.next(&own), Some(PrefillSet::Again(lost[1])));
        assert_eq!(q.next(&own), Some(PrefillSet::New(7)));
        assert_eq!(q.next(&own), Some(PrefillSet::New(10)));
        assert_eq!((q.left(&own), q.next(&own)), (0, None));
    }

    #[test]
    fn failures_count_from_the_last_reply() {
        let mut q = PrefillQueue::default();
        assert_eq!((q.failed(), q.failed()), (1, 2));
        q.answered();
        assert_eq!(q.failed(), 1);
    }

    #[test]
    fn giving_up_counts_lost_and_unsent_keys_once_and_leaves_nothing() {
        let own = owned();
        let mut q = PrefillQueue::default();
        assert_eq!(q.next(&own), Some(PrefillSet::New(1)));
        q.lost(LostSet { key: 1, version: 3 });
        assert_eq!(q.give_up(&own), GivenUp { lost: 1, unsent: 3 });
        assert_eq!((q.left(&own), q.next(&own)), (0, None));
        assert_eq!(q.give_up(&own), GivenUp::default());
    }
}
