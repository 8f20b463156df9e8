//! An in-memory Ethernet link, a bucketed smoltcp client and an echo application, for
//! tests and benchmarks that exercise the TCP path without a kernel device.
//!
//! ```text
//! ClientSwarm ─ MemPort(a) ─▶ queue a→b ─▶ MemPort(b) ─ ConnTable
//!             ◀─────────────── queue b→a ◀─────────────
//! ```
//!
//! Single-threaded (`Rc`): both ends are polled from one thread. Frame buffers are
//! allocated once; a full queue makes `transmit` return `None` (smoltcp retries later),
//! so nothing is lost on egress. A reply to a received frame that finds the peer's queue
//! full is dropped and counted.

use core::cell::RefCell;
use std::rc::Rc;

use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr, IpEndpoint};

use crate::conn::Conn;
use crate::demux::TcpFrame;
use crate::view::{Egress, OneFrame};

/// Ethernet header length.
const ETHERNET_HEADER_LEN: usize = 14;

/// A bounded FIFO of frames with preallocated storage.
struct FrameQueue {
    storage: Box<[u8]>,
    lens: Box<[usize]>,
    frame_bytes: usize,
    head: usize,
    len: usize,
    scratch: Box<[u8]>,
    dropped: u64,
}

impl FrameQueue {
    fn new(capacity: usize, frame_bytes: usize) -> Self {
        FrameQueue {
            storage: vec![0u8; capacity * frame_bytes].into_boxed_slice(),
            lens: vec![0usize; capacity].into_boxed_slice(),
            frame_bytes,
            head: 0,
            len: 0,
            scratch: vec![0u8; frame_bytes].into_boxed_slice(),
            dropped: 0,
        }
    }

    fn is_full(&self) -> bool {
        self.len == self.lens.len()
    }
}

/// One end of an in-memory link; a smoltcp [`Device`] with medium Ethernet.
pub struct MemPort {
    queues: Rc<[RefCell<FrameQueue>; 2]>,
    /// Index of the queue this end receives from; it sends to the other.
    rx: usize,
    mtu: usize,
}

/// Creates a link: two ends, each direction holding up to `capacity` frames of an IP MTU
/// of `mtu` bytes.
pub fn pair(capacity: usize, mtu: usize) -> (MemPort, MemPort) {
    let frame_bytes = mtu + ETHERNET_HEADER_LEN;
    let queues = Rc::new([
        RefCell::new(FrameQueue::new(capacity.max(1), frame_bytes)),
        RefCell::new(FrameQueue::new(capacity.max(1), frame_bytes)),
    ]);
    (
        MemPort {
            queues: queues.clone(),
            rx: 0,
            mtu,
        },
        MemPort { queues, rx: 1, mtu },
    )
}

impl MemPort {
    /// Frames waiting to be received by this end.
    pub fn pending(&self) -> usize {
        self.queues[self.rx].borrow().len
    }

    /// Frames this end tried to send as a reply while the peer's queue was full.
    pub fn dropped(&self) -> u64 {
        self.queues[1 - self.rx].borrow().dropped
    }

    /// Throws away every frame waiting for this end (to simulate loss); returns how many.
    pub fn discard_pending(&mut self) -> usize {
        self.drop_pending(|_| true)
    }

    /// Throws away the frames waiting for this end for which `lost` returns true (to
    /// simulate the loss of chosen frames), keeping the others in order; returns how many.
    pub fn drop_pending(&mut self, mut lost: impl FnMut(&[u8]) -> bool) -> usize {
        let mut queue = self.queues[self.rx].borrow_mut();
        let queue = &mut *queue;
        let capacity = queue.lens.len();
        let mut kept = 0;
        for i in 0..queue.len {
            let from = (queue.head + i) % capacity;
            let len = queue.lens[from];
            let start = from * queue.frame_bytes;
            if lost(&queue.storage[start..start + len]) {
                continue;
            }
            let to = (queue.head + kept) % capacity;
            if to != from {
                let dst = to * queue.frame_bytes;
                queue.storage.copy_within(start..start + len, dst);
                queue.lens[to] = len;
            }
            kept += 1;
        }
        let dropped = queue.len - kept;
        queue.len = kept;
        dropped
    }
}

/// Receive token of a [`MemPort`].
pub struct MemRx<'a> {
    queue: &'a RefCell<FrameQueue>,
}

impl RxToken for MemRx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let mut queue = self.queue.borrow_mut();
        let head = queue.head;
        let start = head * queue.frame_bytes;
        let len = queue.lens[head];
        let result = f(&queue.storage[start..start + len]);
        queue.head = (head + 1) % queue.lens.len();
        queue.len -= 1;
        result
    }
}

/// Transmit token of a [`MemPort`].
pub struct MemTx<'a> {
    queue: &'a RefCell<FrameQueue>,
}

impl TxToken for MemTx<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut queue = self.queue.borrow_mut();
        if len > queue.frame_bytes {
            queue.dropped += 1;
            let mut oversize = vec![0u8; len];
            return f(&mut oversize);
        }
        if queue.is_full() {
            queue.dropped += 1;
            return f(&mut queue.scratch[..len]);
        }
        let tail = (queue.head + queue.len) % queue.lens.len();
        let start = tail * queue.frame_bytes;
        let result = f(&mut queue.storage[start..start + len]);
        queue.lens[tail] = len;
        queue.len += 1;
        result
    }
}

impl crate::RxPeek for MemPort {
    fn peek_rx<R>(&self, ahead: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let queue = self.queues[self.rx].borrow();
        if ahead >= queue.len {
            return None;
        }
        let index = (queue.head + ahead) % queue.lens.len();
        let start = index * queue.frame_bytes;
        Some(f(&queue.storage[start..start + queue.lens[index]]))
    }
}

impl Device for MemPort {
    type RxToken<'a> = MemRx<'a>;
    type TxToken<'a> = MemTx<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let (rx, tx) = (&self.queues[self.rx], &self.queues[1 - self.rx]);
        if rx.borrow().len == 0 {
            return None;
        }
        Some((MemRx { queue: rx }, MemTx { queue: tx }))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        let tx = &self.queues[1 - self.rx];
        if tx.borrow().is_full() {
            return None;
        }
        Some(MemTx { queue: tx })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu + ETHERNET_HEADER_LEN;
        caps
    }
}

/// Many smoltcp client connections behind one interface, demultiplexed by local port into
/// small socket sets (the client-side twin of [`crate::conn::ConnTable`]), so driving
/// thousands of connections does not cost O(connections) per frame.
pub struct ClientSwarm {
    iface: Interface,
    caps: DeviceCapabilities,
    sets: Vec<SocketSet<'static>>,
    control: SocketSet<'static>,
    dirty: Vec<bool>,
    dirty_list: Vec<u32>,
    conns: Vec<(u32, SocketHandle)>,
    mask: usize,
}

/// First local port of a [`ClientSwarm`]; connection `i` uses `FIRST_CLIENT_PORT + i`.
pub const FIRST_CLIENT_PORT: u16 = 10_000;

impl ClientSwarm {
    /// A client with address `ip` (IPv4 or IPv6) and MAC `mac`, sized for about
    /// `expected_conns` connections.
    ///
    /// # Panics
    /// If `mac` or `ip` is not unicast, or `device` is not Ethernet (test support only).
    pub fn new<D: Device>(
        mac: [u8; 6],
        ip: impl Into<IpCidr>,
        device: &mut D,
        now: Instant,
        expected_conns: usize,
    ) -> Self {
        let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        config.random_seed = 0x5eed;
        let mut iface = Interface::new(config, device, now);
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(ip.into());
        });
        let set_count = expected_conns.div_ceil(8).max(1).next_power_of_two();
        ClientSwarm {
            iface,
            caps: device.capabilities(),
            sets: (0..set_count).map(|_| SocketSet::new(Vec::new())).collect(),
            control: SocketSet::new(Vec::new()),
            dirty: vec![false; set_count],
            dirty_list: Vec::with_capacity(set_count),
            conns: Vec::with_capacity(expected_conns),
            mask: set_count - 1,
        }
    }

    /// Opens connection number `len()` to `remote` (Nagle and delayed ACK off); returns its
    /// index, or `None` when the local ports are used up.
    pub fn connect(
        &mut self,
        remote: IpEndpoint,
        rx_bytes: usize,
        tx_bytes: usize,
    ) -> Option<usize> {
        let index = self.conns.len();
        let port = u16::try_from(usize::from(FIRST_CLIENT_PORT) + index).ok()?;
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0u8; rx_bytes]),
            tcp::SocketBuffer::new(vec![0u8; tx_bytes]),
        );
        socket.set_nagle_enabled(false);
        socket.set_ack_delay(None);
        socket.connect(self.iface.context(), remote, port).ok()?;
        let set = usize::from(port) & self.mask;
        let handle = self.sets[set].add(socket);
        self.conns.push((set as u32, handle));
        self.mark_dirty(set);
        Some(index)
    }

    /// Opens connection `index` again from the same local port (its socket must be closed),
    /// e.g. to exercise a server's TIME-WAIT handling; false if the socket is not closed.
    ///
    /// # Panics
    /// If `index >= len()`.
    pub fn reconnect(&mut self, index: usize, remote: IpEndpoint) -> bool {
        let (set, handle) = self.conns[index];
        let Ok(port) = u16::try_from(usize::from(FIRST_CLIENT_PORT) + index) else {
            return false;
        };
        let socket = self.sets[set as usize].get_mut::<tcp::Socket>(handle);
        let ok = socket.connect(self.iface.context(), remote, port).is_ok();
        self.mark_dirty(set as usize);
        ok
    }

    /// Number of connections opened.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// True if no connection was opened.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// The socket of connection `index`, to send or receive; marks it for egress.
    ///
    /// # Panics
    /// If `index >= len()`.
    pub fn socket(&mut self, index: usize) -> &mut tcp::Socket<'static> {
        let (set, handle) = self.conns[index];
        self.mark_dirty(set as usize);
        self.sets[set as usize].get_mut::<tcp::Socket>(handle)
    }

    /// Read-only view of the socket of connection `index`.
    ///
    /// # Panics
    /// If `index >= len()`.
    pub fn socket_ref(&self, index: usize) -> &tcp::Socket<'static> {
        let (set, handle) = self.conns[index];
        self.sets[set as usize].get::<tcp::Socket>(handle)
    }

    /// Processes every received frame, then sends for every set that received or was
    /// written to. Returns the number of frames received.
    pub fn poll<D: Device>(&mut self, now: Instant, device: &mut D) -> usize {
        let mut frames = 0;
        while let Some((rx, tx)) = device.receive(now) {
            frames += 1;
            rx.consume(|frame| self.ingress_frame(now, frame, tx));
        }
        let mut list = std::mem::take(&mut self.dirty_list);
        for &set in &list {
            self.dirty[set as usize] = false;
            self.egress(now, device, set as usize);
        }
        list.clear();
        list.append(&mut self.dirty_list);
        self.dirty_list = list;
        frames
    }

    /// Runs egress on every set, for timers (retransmissions); O(connections).
    pub fn poll_all<D: Device>(&mut self, now: Instant, device: &mut D) {
        for set in 0..self.sets.len() {
            self.egress(now, device, set);
        }
    }

    fn egress<D: Device>(&mut self, now: Instant, device: &mut D, set: usize) {
        let mut frames_out = 0;
        let mut egress = Egress {
            device,
            caps: &self.caps,
            frames_out: &mut frames_out,
            exhausted: false,
        };
        for _ in 0..64 {
            if self
                .iface
                .poll_egress(now, &mut egress, &mut self.sets[set])
                == PollResult::None
                || egress.exhausted
            {
                break;
            }
        }
        if egress.exhausted {
            self.mark_dirty(set);
        }
    }

    fn ingress_frame<T: TxToken>(&mut self, now: Instant, frame: &[u8], tx: T) {
        let mut frames_out = 0;
        let mut view = OneFrame {
            frame: Some(frame),
            tx: Some(tx),
            caps: &self.caps,
            frames_out: &mut frames_out,
        };
        let set = match TcpFrame::new_checked(frame) {
            Ok(tcp) => Some(usize::from(tcp.dst_port()) & self.mask),
            Err(_) => None,
        };
        match set {
            Some(set) => {
                self.iface
                    .poll_ingress_single(now, &mut view, &mut self.sets[set]);
                self.mark_dirty(set);
            }
            None => {
                self.iface
                    .poll_ingress_single(now, &mut view, &mut self.control);
                // ARP replies unblock sockets waiting for the server's MAC.
                for set in 0..self.sets.len() {
                    self.mark_dirty(set);
                }
            }
        }
    }

    fn mark_dirty(&mut self, set: usize) {
        if !self.dirty[set] {
            self.dirty[set] = true;
            self.dirty_list.push(set as u32);
        }
    }
}

/// Per-connection state of [`echo`], the test application every netstack test and
/// benchmark serves: bytes echoed so far.
#[derive(Debug, Default)]
pub struct Echo {
    /// Bytes echoed on this connection.
    pub echoed: usize,
}

/// Echoes what fits in the send buffer, asks for a write call while received bytes wait
/// for room ([`Io::want_write`](crate::Io::want_write)), and closes once the peer's FIN
/// is read. Works through a 256-byte chunk on the stack, so a call allocates nothing.
///
/// # Panics
/// If the send buffer takes fewer bytes than it had room for (smoltcp's contract).
pub fn echo(conn: &mut Conn<'_, Echo>) {
    let mut chunk = [0u8; 256];
    loop {
        let n = conn
            .io
            .recv_queue()
            .min(conn.io.send_space())
            .min(chunk.len());
        if n == 0 {
            break;
        }
        let Ok(got) = conn.io.recv_slice(&mut chunk[..n]) else {
            break;
        };
        let put = conn.io.send_slice(&chunk[..got]).unwrap_or(0);
        assert_eq!(put, got, "the send buffer had room for {got} bytes");
        conn.state.echoed += put;
    }
    if conn.io.recv_queue() > 0 {
        conn.io.want_write();
    }
    if !conn.io.may_recv() && conn.io.recv_queue() == 0 {
        conn.io.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(port: &mut MemPort, byte: u8) {
        let tx = port.transmit(Instant::ZERO).expect("room");
        tx.consume(20 + usize::from(byte), |buf| buf.fill(byte));
    }

    fn take(port: &mut MemPort) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some((rx, _)) = port.receive(Instant::ZERO) {
            rx.consume(|frame| got.push(frame[0]));
        }
        got
    }

    #[test]
    fn a_peek_shows_the_frames_receive_then_hands_out_in_order() {
        use crate::RxPeek;
        let (mut a, mut b) = pair(4, 1500);
        assert_eq!(b.peek_rx(0, |frame| frame.len()), None);
        // Wrap the ring, so that peeks cross its end.
        for byte in [9, 9, 9] {
            put(&mut a, byte);
        }
        assert_eq!(take(&mut b), [9, 9, 9]);
        for byte in 1..=4 {
            put(&mut a, byte);
        }
        for round in 0..4u8 {
            let peeked: Vec<Vec<u8>> = (0..5)
                .map_while(|ahead| b.peek_rx(ahead, <[u8]>::to_vec))
                .collect();
            assert_eq!(
                peeked.len(),
                usize::from(4 - round),
                "nothing peeked is consumed"
            );
            let (rx, _) = b.receive(Instant::ZERO).unwrap();
            assert_eq!(rx.consume(<[u8]>::to_vec), peeked[0]);
            for (ahead, frame) in peeked[1..].iter().enumerate() {
                assert_eq!(b.peek_rx(ahead, <[u8]>::to_vec).as_ref(), Some(frame));
                assert_eq!(
                    frame,
                    &vec![round + 2 + ahead as u8; 22 + usize::from(round) + ahead]
                );
            }
        }
        assert_eq!(b.peek_rx(0, |frame| frame.len()), None);
    }

    #[test]
    fn chosen_frames_are_dropped_and_the_rest_keep_their_order() {
        let (mut a, mut b) = pair(4, 1500);
        // Wrap the ring: two frames in and out first.
        for byte in [9, 9] {
            put(&mut a, byte);
        }
        assert_eq!(take(&mut b), [9, 9]);
        for byte in 1..=4 {
            put(&mut a, byte);
        }
        assert_eq!(b.drop_pending(|frame| frame[0] % 2 == 0), 2);
        assert_eq!(b.pending(), 2);
        put(&mut a, 5);
        assert_eq!(take(&mut b), [1, 3, 5]);
        put(&mut a, 6);
        assert_eq!(b.discard_pending(), 1);
        assert_eq!(take(&mut b), Vec::<u8>::new());
    }
}
