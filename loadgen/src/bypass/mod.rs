//! The kernel-bypass client (`--net tap`, `--net xdp`): each worker thread runs its
//! connections through a netstack connection table of its own in client mode, on its own
//! queue of a TAP device or its own AF_XDP socket on an interface queue, busy-polled by the
//! thread's loop; the kernel's TCP stack is not on the generator's side.
//!
//! ```text
//! worker: issue → Conn.out ─write─▶ ConnTable (smoltcp socket) ─poll_egress─▶ queue i ─▶ link
//! link ─▶ queue i ─poll_ingress─▶ ConnTable ─serve: copy─▶ Conn.inb ─decode─▶ worker (as for kernel sockets)
//! queue i: TAP queue i (--net tap), or the AF_XDP socket on interface queue i (--net xdp, [`xdp`])
//! ```
//!
//! Only the transport differs from the kernel path: the requests, the replies, their decoding,
//! verification, pacing and the histograms are the worker's, shared by both.
//!
//! **Stamps.** A request's send time is the run clock read as the table's egress poll returns,
//! for the poll that handed the device the first frame carrying new data of its connection
//! after the request was written (netstack's [`Stamps::sent`] names the poll); by then the
//! frame has been written to the device (for AF_XDP: put on the tx ring and the kernel
//! kicked when it asks for it), and it was written no earlier than the poll began.
//! A reply's receive time is the run clock read just before the ingress poll that read the
//! frame that brought it ([`Stamps::received`]); the poll reads the device first. So the
//! service time runs from device to device and leaves out the generator's own TCP
//! processing, to within one poll's duration. The table keeps its poll clocks as
//! microseconds: a receive stamp of an earlier poll than the latest is read back at
//! microsecond precision. Replies read in one ingress poll share its stamp. A request written
//! into a full send buffer is stamped when its connection's next new data goes out, which
//! may be before its own last byte does.
//!
//! **Queues and addresses.** Every thread's table has the same address (`--ip`) and MAC
//! (over TAP one derived from the address, over AF_XDP the interface's); a thread with
//! more than one opens its connections from a slice of the ephemeral ports of its own, so
//! no two threads use the same 4-tuple. The kernel delivers a TAP flow's frames to the
//! queue that last sent the flow's frames, and a veth delivers a frame to the receive
//! queue of the sender's transmit queue: an AF_XDP socket on queue i sends on queue i, so
//! memspin's worker on the other end's queue i gets the connection and answers on it, and
//! replies come back to the thread that sent the requests (with the same number of queues
//! on every veth of the path, routers included). On a NIC, RSS or flow rules decide (see
//! docs/af_xdp.md). An ARP reply is not a flow: over TAP with several threads, give the
//! generator a `--gateway`; over AF_XDP the next hops are resolved once before the threads
//! start and taught to every table ([`xdp`]).

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use netstack::conn::{PortRange, RecoveryStats};
use netstack::smoltcp::time::Instant;
use netstack::smoltcp::wire::{IpAddress, IpCidr, IpEndpoint, Ipv4Cidr, Ipv6Cidr};
use netstack::xdp::XdpDevice;
use netstack::{Admission, ConnEvent, ConnId, ConnTable, ConnectError, Stamps, TableConfig};
use netstack::{TapDevice, TapError};

mod xdp;

/// The first and last ephemeral ports the threads share out.
const PORTS: PortRange = PortRange::EPHEMERAL;

/// Receive buffer per connection: a server's window of replies in flight. Four times the
/// table's default, so a large value (tens of KiB) arrives in one round trip rather than
/// several.
const RX_BUFFER_BYTES: usize = 64 * 1024;

/// Frames one ingress poll reads at most.
const INGRESS_BUDGET: usize = 64;

/// Which device the bypass client runs on (`--net tap` or `--net xdp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BypassPath {
    /// A TAP device, one queue per thread.
    Tap,
    /// AF_XDP sockets on an existing interface, thread i on queue i.
    Xdp,
}

/// Where the bypass client runs: `--iface`, `--ip`, `--gateway`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BypassLink {
    /// The TAP device (it must exist, be up, and have the kernel side's address), or the
    /// interface to attach to (`--net xdp`).
    pub iface: String,
    /// The generator's own address on the link.
    pub ip: IpAddr,
    /// Its prefix length.
    pub prefix_len: u8,
    /// The default route's gateway, if the servers are not on the link.
    pub gateway: Option<IpAddr>,
}

impl BypassLink {
    /// Parses `ADDR/PREFIX` (`--ip`).
    ///
    /// # Errors
    /// A message when it is not an address and a prefix length of its family.
    pub fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: expected ADDR/PREFIX, e.g. 10.78.0.2/24"))?;
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an IP address"))?;
        let prefix_len: u8 = prefix
            .parse()
            .map_err(|_| format!("{s:?}: {prefix:?} is not a prefix length"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        if prefix_len > max {
            return Err(format!("{s:?}: the prefix length is at most {max}"));
        }
        Ok((ip, prefix_len))
    }

    /// The table's address as smoltcp's type.
    pub(crate) fn cidr(&self) -> IpCidr {
        match self.ip {
            IpAddr::V4(ip) => IpCidr::Ipv4(Ipv4Cidr::new(ip, self.prefix_len)),
            IpAddr::V6(ip) => IpCidr::Ipv6(Ipv6Cidr::new(ip, self.prefix_len)),
        }
    }

    /// A locally administered unicast MAC derived from the address, the same in every thread.
    pub fn mac(&self) -> [u8; 6] {
        let [a, b, c, d] = match self.ip {
            IpAddr::V4(ip) => ip.octets(),
            IpAddr::V6(ip) => {
                let o = ip.octets();
                [o[12], o[13], o[14], o[15]]
            }
        };
        [0x02, 0x6c, a, b, c, d]
    }
}

/// Thread `thread`'s share of the ephemeral ports, of `threads`.
fn port_slice(thread: usize, threads: usize) -> PortRange {
    let span = usize::from(PORTS.last - PORTS.first) + 1;
    let each = span / threads.max(1);
    let first = usize::from(PORTS.first) + thread * each;
    PortRange {
        first: first as u16,
        last: (first + each - 1) as u16,
    }
}

/// A part of `slice` at least `len` ports long (all of it if shorter) starting at `pick`
/// modulo the room left: a run does not begin on the ports the previous run began on, so a
/// connection the server still holds from it (its RST lost) does not meet a new SYN with
/// the same 4-tuple.
fn port_window(slice: PortRange, len: usize, pick: u64) -> PortRange {
    let span = usize::from(slice.last - slice.first) + 1;
    if len >= span {
        return slice;
    }
    let first = usize::from(slice.first) + (pick % (span - len + 1) as u64) as usize;
    PortRange {
        first: first as u16,
        last: (first + len - 1) as u16,
    }
}

/// A thread's queue.
#[allow(
    clippy::large_enum_variant,
    reason = "one per thread, inside the worker's boxed Bypass"
)]
enum Queue {
    Tap(TapDevice),
    Xdp(XdpDevice),
}

/// One thread's stack: its queue and its connection table, whose connections carry the
/// index of their [`crate::conn::Conn`].
pub struct Bypass {
    device: Queue,
    table: ConnTable<usize>,
    /// The latest ingress poll: its clock as the table keeps it, and as the run clock in ns.
    ingress: (Instant, u64),
    /// The latest egress poll: its clock as the table keeps it, and the run clock in ns when
    /// it returned.
    egress: (Instant, u64),
    /// `--net xdp`: the run's program and what its set-up resolved, held until the socket
    /// (`device`, dropped first) is closed.
    attachment: Option<Arc<xdp::Attachment>>,
}

impl std::fmt::Debug for Bypass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let device = match &self.device {
            Queue::Tap(d) => format!("tap {}", d.name()),
            Queue::Xdp(d) => format!("xdp {} queue {}", d.name(), d.queue()),
        };
        f.debug_struct("Bypass")
            .field("device", &device)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// A run-clock reading as the table's clock (microseconds).
fn instant(ns: u64) -> Instant {
    Instant::from_micros((ns / 1_000) as i64)
}

impl Bypass {
    /// Opens thread `thread`'s queue of `link` (one of `threads`; over AF_XDP the first
    /// thread of a run attaches the program, binds every thread's socket and resolves the
    /// next hops of `servers`) and builds its table for `conns` connections, at run-clock
    /// time `now_ns`.
    ///
    /// # Errors
    /// A message saying what is wrong: no such interface, no permission (root or
    /// `CAP_NET_ADMIN` is needed), a device that cannot be attached, too few queues, an
    /// unusable address, a next hop that does not answer.
    pub fn open(
        path: BypassPath,
        link: &BypassLink,
        servers: &[SocketAddr],
        (thread, threads): (usize, usize),
        conns: usize,
        now_ns: u64,
    ) -> Result<Bypass, String> {
        match path {
            BypassPath::Tap => Self::open_tap(link, thread, threads, conns, now_ns),
            BypassPath::Xdp => Self::open_xdp(link, servers, (thread, threads), conns, now_ns),
        }
    }

    /// The table's configuration for thread `thread` of `threads` with `conns` connections.
    fn table_config(
        link: &BypassLink,
        mac: [u8; 6],
        (thread, threads): (usize, usize),
        conns: usize,
    ) -> TableConfig {
        let mut config = TableConfig::client(mac, link.cidr());
        if let Some(gateway) = link.gateway {
            config = config.with_gateway(IpAddress::from(gateway));
        }
        // Room for every connection while a failed one of it still closes.
        config.conn_limit = (2 * conns + 16).min(netstack::conn::MAX_CONN_LIMIT);
        config.rx_buffer_bytes = RX_BUFFER_BYTES;
        let pick = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64 / 1_000);
        config.ephemeral_ports =
            port_window(port_slice(thread, threads), (8 * conns).max(1024), pick);
        config
    }

    fn open_xdp(
        link: &BypassLink,
        servers: &[SocketAddr],
        (thread, threads): (usize, usize),
        conns: usize,
        now_ns: u64,
    ) -> Result<Bypass, String> {
        let attachment = xdp::join(link, servers, threads, conns + 1, instant(now_ns))?;
        let mut device = attachment
            .take_device(thread)
            .ok_or_else(|| format!("--net xdp: queue {thread} has no socket left"))?;
        let config = Self::table_config(link, attachment.mac, (thread, threads), conns);
        let admission = Arc::new(Admission::new(config.conn_limit));
        let mut table = ConnTable::with_shared(
            config,
            admission,
            attachment.gateways.clone(),
            &mut device,
            instant(now_ns),
        )
        .map_err(|e| format!("--ip {}/{}: {e}", link.ip, link.prefix_len))?;
        for &(ip, mac) in &attachment.neighbors {
            table.learn_neighbor(ip, mac);
        }
        Ok(Bypass {
            device: Queue::Xdp(device),
            table,
            ingress: (instant(now_ns), now_ns),
            egress: (instant(now_ns), now_ns),
            attachment: Some(attachment),
        })
    }

    /// The attach mode and copy or zero-copy mode (`--net xdp`), for the progress output.
    pub fn modes(&self) -> Option<&str> {
        self.attachment.as_deref().map(|a| a.modes.as_str())
    }

    fn open_tap(
        link: &BypassLink,
        thread: usize,
        threads: usize,
        conns: usize,
        now_ns: u64,
    ) -> Result<Bypass, String> {
        let name = std::ffi::CString::new(link.iface.as_str())
            .map_err(|_| format!("--iface {:?}: not an interface name", link.iface))?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call.
        if unsafe { libc::if_nametoindex(name.as_ptr()) } == 0 {
            return Err(format!(
                "--iface {}: no such interface (create the TAP device first, e.g. with scripts/veth-pair.sh or `ip tuntap add dev {} mode tap`)",
                link.iface, link.iface
            ));
        }
        let mut device = TapDevice::open(&link.iface, threads > 1).map_err(|e| match e {
            TapError::Sys {
                errno: libc::EPERM, ..
            } => format!(
                "--iface {}: permission denied: the bypass client needs root (CAP_NET_ADMIN) to attach to a TAP device",
                link.iface
            ),
            TapError::Sys {
                errno: libc::EINVAL,
                ..
            } => format!(
                "--iface {}: {e} (is it a TAP device, and multi-queue exactly when --threads > 1?)",
                link.iface
            ),
            e => format!("--iface {}: {e}", link.iface),
        })?;
        let config = Self::table_config(link, link.mac(), (thread, threads), conns);
        let admission = Arc::new(Admission::new(config.conn_limit));
        let table = ConnTable::with_admission(config, admission, &mut device, instant(now_ns))
            .map_err(|e| format!("--ip {}/{}: {e}", link.ip, link.prefix_len))?;
        Ok(Bypass {
            device: Queue::Tap(device),
            table,
            ingress: (instant(now_ns), now_ns),
            egress: (instant(now_ns), now_ns),
            attachment: None,
        })
    }

    /// The queue's file descriptor, to wait on.
    pub fn fd(&self) -> RawFd {
        match &self.device {
            Queue::Tap(d) => d.fd().as_raw_fd(),
            Queue::Xdp(d) => d.fd().as_raw_fd(),
        }
    }

    /// Opens a connection to `server` for connection `index`; its SYN goes out at the next
    /// egress poll.
    ///
    /// # Errors
    /// The reason as an I/O error kind (no address of the server's family, no port free,
    /// the table full).
    pub fn connect(
        &mut self,
        server: SocketAddr,
        index: usize,
    ) -> Result<ConnId, std::io::ErrorKind> {
        let remote = IpEndpoint::new(IpAddress::from(server.ip()), server.port());
        self.table
            .connect(remote, None, index)
            .map_err(|e| match e {
                ConnectError::NoAddress | ConnectError::Unaddressable => {
                    std::io::ErrorKind::AddrNotAvailable
                }
                ConnectError::PortInUse { .. } | ConnectError::PortsExhausted => {
                    std::io::ErrorKind::AddrInUse
                }
                ConnectError::Limit => std::io::ErrorKind::OutOfMemory,
            })
    }

    /// Resets every connection of `ids` that is open and sends the RSTs at once (run-clock
    /// time `now_ns`), so the server does not keep them.
    pub fn abort_all(&mut self, ids: impl Iterator<Item = ConnId>, now_ns: u64) {
        for id in ids {
            self.abort(id);
        }
        self.egress(now_ns, || now_ns);
    }

    /// Resets connection `id` if it is open (one RST at the next egress).
    pub fn abort(&mut self, id: ConnId) {
        self.table.with_conn(id, |c| c.io.abort());
    }

    /// Queues as much of `data` as connection `id`'s send buffer takes; returns how much, or
    /// `None` when the connection is no longer open or cannot send.
    pub fn write(&mut self, id: ConnId, data: &[u8]) -> Option<usize> {
        self.table
            .with_conn(id, |c| c.io.send_slice(data))
            .and_then(Result::ok)
    }

    /// Reads what the queue holds into the table at run-clock time `now_ns`; true if a frame
    /// came.
    pub fn ingress(&mut self, now_ns: u64) -> bool {
        let now = instant(now_ns);
        self.ingress = (now, now_ns);
        let polled = match &mut self.device {
            Queue::Tap(d) => self.table.poll_ingress(now, d, INGRESS_BUDGET),
            Queue::Xdp(d) => self.table.poll_ingress(now, d, INGRESS_BUDGET),
        };
        polled == netstack::Poll::Progress
    }

    /// Sends what the table has for the device at run-clock time `now_ns`, then reads the run
    /// clock with `done_ns` (the send stamp of what went out); true if anything went out or
    /// changed.
    pub fn egress(&mut self, now_ns: u64, done_ns: impl FnOnce() -> u64) -> bool {
        let now = instant(now_ns);
        let polled = match &mut self.device {
            Queue::Tap(d) => self.table.poll_egress(now, d),
            Queue::Xdp(d) => {
                let polled = self.table.poll_egress(now, d);
                // The frames are on the tx ring: kick the kernel if it asks for it.
                d.flush();
                polled
            }
        };
        let progress = polled == netstack::Poll::Progress;
        self.egress = (now, done_ns());
        progress
    }

    /// The events of the connections since the last call, oldest first, into `out`.
    pub fn events(&mut self, out: &mut Vec<(ConnId, ConnEvent)>) {
        out.clear();
        out.extend(self.table.events());
    }

    /// Calls `f` for every connection with new data or a state change, with its
    /// connection's index, its socket and its stamps.
    pub fn serve(&mut self, mut f: impl FnMut(usize, &mut netstack::Io<'_>, Stamps)) {
        self.table.serve(|conn| {
            let stamps = conn.stamps();
            f(*conn.state, &mut conn.io, stamps)
        });
    }

    /// A receive stamp as the run clock, ns.
    pub fn received_ns(&self, stamps: Stamps) -> Option<u64> {
        stamps.received.map(|at| {
            if at == self.ingress.0 {
                self.ingress.1
            } else {
                at.total_micros() as u64 * 1_000
            }
        })
    }

    /// The run-clock time connection `id`'s new data went to the device in the latest
    /// egress poll, or `None` if none of it did.
    pub fn sent_in_latest_egress(&self, id: ConnId) -> Option<u64> {
        let stamps = self.table.stamps(id)?;
        (stamps.sent == Some(self.egress.0)).then_some(self.egress.1)
    }

    /// How long until the table needs a poll without new frames, ns (`None`: no timer).
    pub fn poll_delay_ns(&self, now_ns: u64) -> Option<u64> {
        self.table
            .poll_delay(instant(now_ns))
            .map(|d| d.total_micros() * 1_000)
    }

    /// The table's loss-recovery counters so far.
    pub fn recovery(&self) -> RecoveryStats {
        self.table.stats().recovery
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_disjoint_port_slices_inside_the_ephemeral_range() {
        for threads in [1, 2, 3, 7, 64] {
            let slices: Vec<PortRange> = (0..threads).map(|t| port_slice(t, threads)).collect();
            assert_eq!(slices[0].first, PORTS.first);
            for pair in slices.windows(2) {
                assert!(pair[0].last < pair[1].first, "{threads}: {pair:?}");
            }
            for s in &slices {
                assert!(
                    s.first <= s.last && u32::from(s.last) <= u32::from(PORTS.last),
                    "{threads}: {s:?}"
                );
            }
        }
        assert_eq!(port_slice(0, 1).last, PORTS.last);
    }

    #[test]
    fn port_windows_stay_in_their_slice_and_move_with_the_pick() {
        let slice = port_slice(1, 4);
        for pick in [0, 1, 977, u64::MAX] {
            let w = port_window(slice, 1024, pick);
            assert!(slice.first <= w.first && w.last <= slice.last, "{w:?}");
            assert_eq!(usize::from(w.last - w.first) + 1, 1024);
        }
        assert_ne!(port_window(slice, 1024, 0), port_window(slice, 1024, 977));
        assert_eq!(port_window(slice, 1 << 20, 5), slice);
    }

    #[test]
    fn an_address_and_prefix_parse_and_name_a_mac() {
        let (ip, len) = BypassLink::parse_cidr("10.78.0.2/24").unwrap();
        assert_eq!((ip, len), ("10.78.0.2".parse().unwrap(), 24));
        assert!(BypassLink::parse_cidr("10.78.0.2").is_err());
        assert!(BypassLink::parse_cidr("10.78.0.2/33").is_err());
        assert!(BypassLink::parse_cidr("fd00::2/64").is_ok());
        assert!(BypassLink::parse_cidr("x/24").is_err());
        let link = BypassLink {
            iface: "lg0".into(),
            ip,
            prefix_len: len,
            gateway: None,
        };
        assert_eq!(link.mac(), [0x02, 0x6c, 10, 78, 0, 2]);
    }

    #[test]
    fn a_missing_interface_is_named_in_the_error() {
        let link = BypassLink {
            iface: "nosuchlg9".into(),
            ip: "10.78.0.2".parse().unwrap(),
            prefix_len: 24,
            gateway: None,
        };
        let err = Bypass::open(BypassPath::Tap, &link, &[], (0, 1), 4, 0).unwrap_err();
        assert!(err.contains("no such interface"), "{err}");
    }
}
