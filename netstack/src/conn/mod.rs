//! A TCP connection table over smoltcp whose per-packet cost does not grow with the
//! number of connections, and whose connections cannot outlive their use.
//!
//! smoltcp looks a segment's socket up by scanning every socket of the `SocketSet` it is
//! given, and walks every socket again on egress and for `poll_at`. So the table keeps
//! connections in many small sets ("buckets", at most [`BUCKET_LOAD`] connections each on
//! average, a power of two of them) behind ONE `Interface` (one MAC; an IPv4 address, an
//! IPv6 address or both, each with an optional default route via a gateway), and
//! demultiplexes frames itself. A bucket holds only sockets in use, so a segment, an egress
//! pass and a state refresh touch its own connection and rarely another:
//!
//! ```text
//! frame ─▶ Ethernet: to our MAC, broadcast or our solicited-node group?
//!          ├▶ ARP, IPv6 neighbour discovery ─▶ neighbor/ (answer, learn, confirm the gateway)
//!          └▶ demux::TcpFrame ──TCP to our address and port(s)─▶ bucket hash(src ip, src port) ─┐
//!                            └─anything else (ICMP, other ports)─▶ control set ─────────────┤
//!                      Interface::poll_ingress_single(the IP packet, that set) [Medium::Ip] ┘
//! app: serve() ─ called per connection with new data / freed send space / peer close
//! poll_egress() ─ Interface::poll_egress for dirty buckets + buckets whose timer is due;
//!                 view.rs puts each IP packet in an Ethernet frame to its connection's MAC
//!                 (off the link: the gateway's); then the gateway probes due, if any
//! ```
//!
//! The mechanisms, each in its own module where it is more than a few lines:
//!
//! - **Dirty buckets and timers.** A bucket is dirty when a frame went into it or the
//!   application wrote, read, closed or aborted one of its connections. Only dirty buckets
//!   and buckets whose deadline passed get `poll_egress`. After egress the bucket's deadline
//!   is the earliest of `Interface::poll_at` over its sockets and its connections' own
//!   clocks (below), kept in a lazily updated min-heap (`timer.rs`): a deadline that moves
//!   later, as a busy connection's retransmission timer does on every reply, costs a write
//!   to the bucket; an earlier one O(log buckets).
//! - **Listening.** smoltcp has no backlog. Because every SYN passes the demultiplexer
//!   first, the table arms a listening socket in the SYN's bucket just before smoltcp sees
//!   the SYN, and closes it again if the SYN did not take it (a bad checksum, say). So no
//!   listener ever sits idle, and a retransmitted SYN can never open a second
//!   half-connection (the connection's own socket takes it). An RST that sends the
//!   handshake's socket back to LISTEN (as smoltcp does, RFC 9293) ends the handshake there
//!   and then.
//! - **SYN backlog** (`backlog.rs`). Handshakes do not count against `conn_limit`: they
//!   have their own budget, the places no connection holds plus
//!   [`TableConfig::syn_backlog`], and when a validated SYN finds it spent the oldest
//!   handshake gives way. A SYN flood from forged addresses therefore never takes an
//!   established connection's place nor locks real clients out.
//! - **Admission** (`admission.rs`). `conn_limit` counts open and closing connections of
//!   every table sharing one [`Admission`] (all workers of a process): a connection is
//!   admitted when its handshake completes, and refused (SYN answered with RST) while the
//!   limit is reached.
//! - **Lifetimes** (`lifetime.rs`). Each connection has its own clocks: a handshake ends
//!   after [`HANDSHAKE_TIMEOUT`]; data unacknowledged for [`GIVE_UP_TIMEOUT`] aborts the
//!   connection (the retransmission give-up smoltcp lacks); with
//!   [`TableConfig::idle_timeout`] a connection without data either way that long is
//!   closed; a connection the server closed is reset if still closing after
//!   [`CLOSE_TIMEOUT`].
//! - **TIME-WAIT.** When the server closed first (`quit`, errors), its socket reaches
//!   TIME-WAIT once the peer's FIN is in; as soon as the ACK of that FIN has gone out, the
//!   socket is released, and no longer counts against `conn_limit` (like the kernel's
//!   TIME-WAIT minisockets, which hold no buffers and do not count against memcached's
//!   `-c`). So clients that connect, `quit` and reconnect are never refused for ten
//!   seconds per connection. The cost: should that last ACK be lost on the link, nothing
//!   is left to repeat it, and the peer's LAST-ACK may last until its retransmissions of
//!   the FIN give up.
//! - **Recycling.** A socket that closes leaves its bucket for the table's spare pool with
//!   its buffers, and the next SYN in any bucket takes it from there; after warm-up,
//!   accepting a connection allocates nothing (except what `S::default()` allocates).
//!   Sockets are created on demand, so at most `conn_limit + syn_backlog + 1` exist.
//! - **Neighbours** (`neighbor/`, `view.rs`). smoltcp runs with `Medium::Ip`; the table
//!   answers ARP and neighbour solicitations itself, and every frame of a connection on
//!   the link goes to the MAC its SYN came from, so a reply never waits for address
//!   resolution, however many client hosts there are. The neighbour cache for other
//!   frames learns only from validated ARP and NDP and from completed handshakes.
//! - **Routes.** With a gateway ([`TableConfig::gateway4`], [`TableConfig::gateway6`]),
//!   smoltcp's interface has a default route for that family, and frames to hosts off the
//!   link (but a handshake's) go to the gateway's MAC, which one [`Gateways`] shared by
//!   every table of the process resolves and refreshes: [`ConnTable::poll_egress`] sends
//!   the probes it asks for, and completed handshakes tell it which MAC they came through
//!   (`neighbor/gateway.rs`). Without one, a host off the link is answered through the MAC
//!   its frames came from.
//! - **Loss recovery** (`recovery.rs`). smoltcp never retransmits sooner than a second
//!   and ignores SACK, so each connection keeps a copy of every frame that takes sequence
//!   space until it is acknowledged, and the table sends copies again itself: a tail-loss
//!   probe when nothing was acknowledged for [`TableConfig::rto_min`] + 2·RTT (RTT: the
//!   quickest the client acknowledged data lately; a lone segment waits for its client's
//!   measured ACK delay instead, at least `rto_min`), paid for by the clients'
//!   acknowledgments, and at once any copy the peer's SACK blocks show lost. The bucket's
//!   deadline includes each connection's probe time. Both families alike; a copy goes out
//!   again with the Ethernet header it first had (to the gateway's MAC of that moment).
//! - **Look-ahead.** At many connections a segment's connection is out of cache when its
//!   frame comes, and its processing waited on miss after miss: the bucket, the slot,
//!   smoltcp's socket. Devices that read frames in batches show the frames they hold but
//!   have not handed out yet ([`RxPeek`]: TAP, AF_XDP, the in-memory link), so before each
//!   frame [`ConnTable::poll_ingress`] reads the 4-tuple of the frames after it and
//!   prefetches one level deeper per frame, each level's address read from the level that
//!   the frame before brought into cache: the bucket of the frame three ahead, the slots
//!   of the one two ahead (the lines the lookup and the ACK read), the socket of the next
//!   one (and the line before it, the set's entry). A frame that is not a segment to us
//!   costs a header read; nothing is prefetched for it.
//! - **Sockets.** Nagle off, delayed ACK off, keep-alive off, smoltcp's own `timeout` off
//!   (the table's clocks replace it).
//!
//! Memory is about `(conn_limit + syn_backlog) × (rx_buffer_bytes + tx_buffer_bytes)` at
//! peak, plus about 100 bytes per bucket, 60 per neighbour (`neighbor/mod.rs`) and 1 KiB
//! per slot (its state, loss recovery's included, with room for one small reply's copy),
//! plus the copies loss recovery keeps on the heap (a connection's unacknowledged frames
//! beyond one small reply: at most its send buffer again).

mod backlog;
mod lifetime;
mod recovery;

use core::fmt;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::{Socket, tcp};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint, IpListenEndpoint, Ipv4Address,
    Ipv4Cidr, Ipv6Address, Ipv6Cidr,
};

pub use crate::admission::Admission;
pub use crate::neighbor::Gateways;
pub use lifetime::{CLOSE_TIMEOUT, GIVE_UP_TIMEOUT, HANDSHAKE_TIMEOUT};
pub use recovery::{
    ACK_DELAY_SAMPLES, DEFAULT_RTO_MIN, MAX_ACK_DELAY, MAX_HANDSHAKE_PROBES, MAX_PROBES,
    MAX_RTO_MIN, MIN_RTO_MIN, RecoveryStats,
};

use crate::demux::{self, SegmentRepr, TcpFrame};
use crate::neighbor::{
    self, ARP_FRAME_LEN, ArpOut, ETHERNET_HEADER_LEN, LinkAddrs, NDP_FRAME_LEN, NEIGHBOR_CAPACITY,
    NdpIgnored, NdpOut, NeighborCache,
};
use crate::timer::{DeadlineHeap, TimerSlot, TimerSlots};
use crate::view::{CapsOnly, Framing, IpEgress, IpFrame, NoPeers, PeerMac, Peers};
use crate::{Poll, RxPeek};
use backlog::{Backlog, BacklogSlots, Links, SlotAddr, slot_addr, split_addr};
use lifetime::{Expiry, Lifetime, Stage};
use recovery::{Flight, Recovery};

/// Default `-c, --conn-limit`.
pub const DEFAULT_CONN_LIMIT: usize = 1024;

/// Default SYN backlog per table: half-open connections held beyond the places no
/// connection holds (memcached's default listen backlog).
pub const DEFAULT_SYN_BACKLOG: usize = 1024;

/// Default receive buffer per connection: 16 KiB.
///
/// Holds a large multi-get (100 keys of 150 bytes) or the first 16 KiB of a big `set`;
/// bigger values stream through it at one window per round trip, which on a TAP or veth
/// link is microseconds. No window scaling is needed below 64 KiB.
pub const DEFAULT_RX_BUFFER_BYTES: usize = 16 * 1024;

/// Default transmit buffer per connection: 16 KiB.
///
/// Holds a typical reply (values up to ~16 KiB) in one write; larger replies are streamed
/// by the application with [`Io::want_write`]. With the receive buffer, 32 KiB per
/// connection: 32 MiB at the default limit of 1,024 connections, 320 MiB at 10,000.
pub const DEFAULT_TX_BUFFER_BYTES: usize = 16 * 1024;

/// Connections per bucket at `conn_limit` the bucket count is sized for (rounded down to
/// a power of two of buckets, so the load at the limit is between half this and this).
///
/// One: at 10,000 connections every socket a packet's bucket holds besides its own costs
/// cache misses in smoltcp's socket scan, egress pass and `poll_at`, and in the state
/// refresh; with eight per bucket that was a third of the table's time per request.
pub const BUCKET_LOAD: usize = 1;

/// Largest accepted `conn_limit` and `syn_backlog`.
pub const MAX_CONN_LIMIT: usize = 1 << 20;

/// Smallest accepted socket buffer.
pub const MIN_BUFFER_BYTES: usize = 256;

/// Largest accepted socket buffer (smoltcp's limit for receive buffers).
pub const MAX_BUFFER_BYTES: usize = 1 << 30;

/// `poll_egress` rounds per bucket per call (each round sends at most one segment per socket).
const EGRESS_ROUNDS: usize = 64;

/// Configuration of a [`ConnTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableConfig {
    /// The server's MAC address (unicast).
    pub mac: [u8; 6],
    /// The server's own IPv4 address and prefix on the link (`--ip ADDR/PREFIX`), if it
    /// serves IPv4.
    pub ipv4: Option<Ipv4Cidr>,
    /// Its own IPv6 address and prefix (`--ip` with an IPv6 prefix), if it serves IPv6.
    pub ipv6: Option<Ipv6Cidr>,
    /// The IPv4 default route's gateway (`--gateway`): a host inside `ipv4`'s prefix.
    pub gateway4: Option<Ipv4Address>,
    /// The IPv6 default route's gateway: a host inside `ipv6`'s prefix, or link-local.
    pub gateway6: Option<Ipv6Address>,
    /// TCP port to accept connections on (`-p, --port`).
    pub port: u16,
    /// A second TCP port to accept connections on, served alike (memspin's `--resp-port`);
    /// the application tells the two apart with [`Io::local_port`]. `None` (default): one port.
    pub extra_port: Option<u16>,
    /// Most open (and closing) connections; with a shared [`Admission`], its limit (every
    /// table may take them all). Sizes the buckets.
    pub conn_limit: usize,
    /// Handshakes in progress at once beyond the places no connection holds (at most
    /// `conn_limit + syn_backlog` sockets in all); past that the oldest gives way.
    pub syn_backlog: usize,
    /// Receive buffer per connection, bytes.
    pub rx_buffer_bytes: usize,
    /// Transmit buffer per connection, bytes.
    pub tx_buffer_bytes: usize,
    /// Close an open connection that has received nothing, and has nothing to send or
    /// read, for this long (`--idle-timeout`); `None` (default): never.
    pub idle_timeout: Option<Duration>,
    /// Loss recovery's floor (`--rto-min`): no frame is sent again by a timer sooner than
    /// this after it went out; `None`: loss recovery off (smoltcp's own one-second timer
    /// alone). Between [`MIN_RTO_MIN`] and [`MAX_RTO_MIN`]; default [`DEFAULT_RTO_MIN`].
    pub rto_min: Option<Duration>,
}

impl TableConfig {
    /// A configuration serving `ip` (either family), without a gateway, with the default
    /// limits, buffer sizes and no idle timeout.
    pub fn new(mac: [u8; 6], ip: impl Into<IpCidr>, port: u16) -> Self {
        TableConfig {
            mac,
            ipv4: None,
            ipv6: None,
            gateway4: None,
            gateway6: None,
            port,
            extra_port: None,
            conn_limit: DEFAULT_CONN_LIMIT,
            syn_backlog: DEFAULT_SYN_BACKLOG,
            rx_buffer_bytes: DEFAULT_RX_BUFFER_BYTES,
            tx_buffer_bytes: DEFAULT_TX_BUFFER_BYTES,
            idle_timeout: None,
            rto_min: Some(DEFAULT_RTO_MIN),
        }
        .with_ip(ip)
    }

    /// The same configuration serving `ip` too: the address of its family is replaced.
    pub fn with_ip(mut self, ip: impl Into<IpCidr>) -> Self {
        match ip.into() {
            IpCidr::Ipv4(cidr) => self.ipv4 = Some(cidr),
            IpCidr::Ipv6(cidr) => self.ipv6 = Some(cidr),
        }
        self
    }

    /// The same configuration with a default route via `gateway` for its family.
    pub fn with_gateway(mut self, gateway: impl Into<IpAddress>) -> Self {
        match gateway.into() {
            IpAddress::Ipv4(ip) => self.gateway4 = Some(ip),
            IpAddress::Ipv6(ip) => self.gateway6 = Some(ip),
        }
        self
    }

    /// The gateways' shared state for this configuration, to hand every table of a
    /// process ([`ConnTable::with_shared`]).
    pub fn gateways(&self) -> Gateways {
        Gateways::new(self.gateway4, self.gateway6)
    }

    /// The MAC and the addresses served.
    pub fn addrs(&self) -> LinkAddrs {
        LinkAddrs {
            mac: self.mac,
            ipv4: self.ipv4,
            ipv6: self.ipv6,
        }
    }

    /// Number of buckets the table uses for this `conn_limit`.
    pub fn bucket_count(&self) -> usize {
        self.conn_limit
            .div_ceil(BUCKET_LOAD)
            .max(1)
            .next_power_of_two()
    }

    /// Checks that a table can run with this configuration (what [`ConnTable::new`]
    /// checks first).
    ///
    /// # Errors
    /// The [`TableError`] the table would refuse it with.
    pub fn check(&self) -> Result<(), TableError> {
        if self.port == 0 || self.extra_port == Some(0) {
            return Err(TableError::ZeroPort);
        }
        if self.conn_limit == 0 || self.conn_limit > MAX_CONN_LIMIT {
            return Err(TableError::ConnLimit {
                conn_limit: self.conn_limit,
            });
        }
        if self.syn_backlog == 0 || self.syn_backlog > MAX_CONN_LIMIT {
            return Err(TableError::SynBacklog {
                syn_backlog: self.syn_backlog,
            });
        }
        for bytes in [self.rx_buffer_bytes, self.tx_buffer_bytes] {
            if !(MIN_BUFFER_BYTES..=MAX_BUFFER_BYTES).contains(&bytes) {
                return Err(TableError::BufferSize { bytes });
            }
        }
        if let Some(rto_min) = self.rto_min
            && !(MIN_RTO_MIN..=MAX_RTO_MIN).contains(&rto_min)
        {
            return Err(TableError::RtoMin { rto_min });
        }
        let mac = EthernetAddress(self.mac);
        if !mac.is_unicast() || self.mac == [0; 6] {
            return Err(TableError::MacNotUnicast);
        }
        if self.ipv4.is_none() && self.ipv6.is_none() {
            return Err(TableError::NoAddress);
        }
        if let Some(cidr) = self.ipv4 {
            let ip = cidr.address();
            if ip.is_unspecified()
                || ip.is_multicast()
                || ip.is_broadcast()
                || ip.is_loopback()
                || cidr.broadcast() == Some(ip)
            {
                return Err(TableError::IpNotUnicast);
            }
        }
        if let Some(cidr) = self.ipv6 {
            let ip = cidr.address();
            if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
                return Err(TableError::IpNotUnicast);
            }
        }
        let addrs = self.addrs();
        if let Some(gateway) = self.gateway4 {
            let on_link = self.ipv4.is_some_and(|cidr| {
                cidr.contains_addr(&gateway)
                    && cidr.broadcast() != Some(gateway)
                    && (cidr.network().address() != gateway || cidr.prefix_len() >= 31)
            });
            if !on_link || addrs.is_ours(gateway.into()) {
                return Err(TableError::Gateway {
                    gateway: gateway.into(),
                });
            }
        }
        if let Some(gateway) = self.gateway6 {
            let unicast = !gateway.is_multicast() && !gateway.is_unspecified();
            if !unicast || !addrs.on_link(gateway.into()) || addrs.is_ours(gateway.into()) {
                return Err(TableError::Gateway {
                    gateway: gateway.into(),
                });
            }
        }
        Ok(())
    }
}

/// A [`TableConfig`] the table cannot run with, or a device it cannot use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableError {
    /// Port 0.
    ZeroPort,
    /// `conn_limit` is 0 or above [`MAX_CONN_LIMIT`].
    ConnLimit {
        /// The rejected limit.
        conn_limit: usize,
    },
    /// `syn_backlog` is 0 or above [`MAX_CONN_LIMIT`].
    SynBacklog {
        /// The rejected backlog.
        syn_backlog: usize,
    },
    /// A buffer size outside [`MIN_BUFFER_BYTES`]..=[`MAX_BUFFER_BYTES`].
    BufferSize {
        /// The rejected size.
        bytes: usize,
    },
    /// The MAC address is multicast, broadcast or all zeros.
    MacNotUnicast,
    /// An IP address is unspecified, multicast, loopback or a broadcast address.
    IpNotUnicast,
    /// Neither an IPv4 nor an IPv6 address.
    NoAddress,
    /// A gateway without an address of its family, or not a unicast host on that
    /// address's link (inside its prefix, or IPv6 link-local), or one of our addresses.
    Gateway {
        /// The rejected gateway.
        gateway: IpAddress,
    },
    /// The device is not an Ethernet device.
    NotEthernet,
    /// `rto_min` outside [`MIN_RTO_MIN`]..=[`MAX_RTO_MIN`].
    RtoMin {
        /// The rejected floor.
        rto_min: Duration,
    },
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TableError::ZeroPort => write!(f, "port 0"),
            TableError::ConnLimit { conn_limit } => {
                write!(
                    f,
                    "connection limit {conn_limit} outside 1..={MAX_CONN_LIMIT}"
                )
            }
            TableError::SynBacklog { syn_backlog } => {
                write!(f, "SYN backlog {syn_backlog} outside 1..={MAX_CONN_LIMIT}")
            }
            TableError::BufferSize { bytes } => {
                write!(
                    f,
                    "socket buffer of {bytes} bytes outside {MIN_BUFFER_BYTES}..={MAX_BUFFER_BYTES}"
                )
            }
            TableError::MacNotUnicast => write!(f, "MAC address is not unicast"),
            TableError::IpNotUnicast => write!(f, "IP address is not a unicast host address"),
            TableError::NoAddress => write!(f, "no IPv4 or IPv6 address to serve"),
            TableError::Gateway { gateway } => write!(
                f,
                "gateway {gateway} is not another host on the link of an address of its family"
            ),
            TableError::NotEthernet => write!(f, "device medium is not Ethernet"),
            TableError::RtoMin { rto_min } => write!(
                f,
                "loss recovery floor {rto_min} outside {MIN_RTO_MIN}..={MAX_RTO_MIN}"
            ),
        }
    }
}

impl std::error::Error for TableError {}

/// Counters of a [`ConnTable`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Connections that completed the handshake and were admitted.
    pub accepted: u64,
    /// Connections refused because `conn_limit` was reached (SYN answered with RST, or a
    /// completed handshake reset).
    pub refused: u64,
    /// Open connections that ended (peer reset or close, give-up, idle timeout, or the
    /// application closed them).
    pub closed: u64,
    /// Handshakes that never completed (peer reset, [`HANDSHAKE_TIMEOUT`], or evicted).
    pub handshakes_failed: u64,
    /// Of those, handshakes evicted by a newer SYN with the backlog full.
    pub syn_evicted: u64,
    /// Connections reset because data went unacknowledged for [`GIVE_UP_TIMEOUT`], or
    /// closing ones still not closed after [`CLOSE_TIMEOUT`].
    pub timed_out: u64,
    /// Connections closed by the idle timeout.
    pub idle_closed: u64,
    /// Open connections now (those with an application state `S`).
    pub active: usize,
    /// Connections counted against `conn_limit` now in this table: open and closing.
    pub in_use: usize,
    /// Handshakes in progress now (the SYN backlog).
    pub handshaking: usize,
    /// Sockets allocated now (in use, handshaking, and closed ones kept for reuse).
    pub sockets: usize,
    /// Frames received.
    pub frames_in: u64,
    /// Of those, TCP segments to our address and port (went to a bucket).
    pub frames_tcp: u64,
    /// Of those, ARP, neighbour discovery and other IP (ARP and neighbour discovery
    /// handled here, the rest went to the control set).
    pub frames_control: u64,
    /// Of those, frames for another MAC, of another ethertype, or too short: dropped.
    pub frames_dropped: u64,
    /// Frames sent.
    pub frames_out: u64,
    /// Of those, frames whose next hop's MAC was unknown: sent as an ARP request or a
    /// neighbour solicitation in place of the packet (or, too short for a solicitation,
    /// addressed to ourselves).
    pub unresolved: u64,
    /// Of those, ARP requests and solicitations this table sent for a gateway (the
    /// [`Gateways`] shared by the tables hands each probe to one of them).
    pub gateway_probes: u64,
    /// Times egress stopped because the device had no transmit token left.
    pub tx_exhausted: u64,
    /// What loss recovery did (`recovery.rs`).
    pub recovery: RecoveryStats,
}

/// Identifies a connection across calls (for replies that arrive later, e.g. from
/// another core); stale once the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    bucket: u32,
    slot: u32,
    generation: u32,
}

impl ConnId {
    /// The id as one number, for state that must not know the table's types (a reply
    /// travelling between cores). [`ConnId::unpack`] turns it back.
    pub fn pack(self) -> u128 {
        (u128::from(self.bucket) << 64)
            | (u128::from(self.slot) << 32)
            | u128::from(self.generation)
    }

    /// The id [`ConnId::pack`] made. Any number is safe: [`ConnTable::with_conn`] checks the
    /// bucket, the slot and the generation.
    pub fn unpack(packed: u128) -> ConnId {
        ConnId {
            bucket: (packed >> 64) as u32,
            slot: (packed >> 32) as u32,
            generation: packed as u32,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Socket (if any) is closed, or armed for a SYN being processed.
    Free,
    /// SYN-RECEIVED: in the SYN backlog, no application state yet.
    Handshake,
    /// Established (or later, until it closes): has an application state.
    Open,
    /// The application (or a timeout) closed it and the close is in progress (FIN-WAIT,
    /// CLOSING, LAST-ACK), or the peer reset it: still counts against the limit.
    Done,
}

/// The peer of a connection, from its SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Peer {
    addr: IpAddress,
    port: u16,
    /// Where every frame of this connection goes.
    mac: [u8; 6],
}

/// One connection's place in its bucket. In declaration order (`repr(C)`): what a segment's
/// lookup and the refresh read of every connection (its peer, phase, queues and clocks)
/// first, then the application's state, then loss recovery's, whose hot part starts at a
/// cache line of its own (see [`Flight`]).
#[repr(C)]
struct Slot<S> {
    /// Set from the SYN that armed the slot; `None` while free.
    peer: Option<Peer>,
    handle: Option<SocketHandle>,
    /// Where the socket of `handle` lies in its bucket's socket set, for the look-ahead's
    /// prefetch (an address, never read through; set again whenever the set may move).
    socket_at: usize,
    phase: Phase,
    /// The application has output pending and wants a call when send space frees up.
    want_write: bool,
    /// Present in the ready list.
    queued: bool,
    /// TCP state when last examined.
    seen_state: tcp::State,
    generation: u32,
    /// `recv_queue()` when the application last returned.
    seen_recv: usize,
    /// The connection's clocks.
    life: Lifetime,
    /// Place in the SYN backlog (handshakes only).
    links: Links,
    session: Option<S>,
    /// Unacknowledged frames and loss recovery state.
    flight: Flight,
}

impl<S> Slot<S> {
    fn empty() -> Self {
        Slot {
            handle: None,
            socket_at: 0,
            phase: Phase::Free,
            generation: 0,
            session: None,
            want_write: false,
            queued: false,
            seen_recv: 0,
            seen_state: tcp::State::Closed,
            peer: None,
            life: Lifetime::start(Instant::ZERO),
            links: Links::default(),
            flight: Flight::default(),
        }
    }

    fn stage(&self) -> Stage {
        match self.phase {
            Phase::Free | Phase::Handshake => Stage::Handshake,
            Phase::Open => Stage::Open,
            Phase::Done => Stage::Closing,
        }
    }
}

/// The connection with `addr:port` among `slots`: its slot, MAC and whether its handshake
/// is in progress.
fn find_peer<S>(slots: &[Slot<S>], addr: IpAddress, port: u16) -> Option<PeerMac> {
    slots.iter().enumerate().find_map(|(index, slot)| {
        slot.peer
            .filter(|peer| peer.addr == addr && peer.port == port)
            .map(|peer| PeerMac {
                slot: index,
                mac: peer.mac,
                // Armed for the SYN, or in the SYN backlog.
                handshake: matches!(slot.phase, Phase::Free | Phase::Handshake),
            })
    })
}

/// Asks the CPU to bring the cache line holding `at` into its caches (a hint: nothing
/// happens elsewhere than on x86-64).
#[inline]
pub(crate) fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults,
        // whatever the address (callers' point into a live value or the line before one);
        // SSE, which it needs, is part of every x86-64 CPU.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at.cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Prefetches the socket at `at` (a [`Slot::socket_at`]) and the line before it, where its
/// set keeps the entry's tag and metadata: smoltcp's ingress reads them to find the socket
/// that accepts a segment, then the socket's state throughout.
#[inline]
fn prefetch_socket(at: usize) {
    let start = (at as *const u8).wrapping_sub(64);
    for offset in (0..size_of::<tcp::Socket>() + 64).step_by(64) {
        prefetch_line(start.wrapping_add(offset));
    }
}

/// The connections of one bucket as `view.rs` sees them while it frames their segments:
/// where each goes, and a copy of each for loss recovery.
struct BucketPeers<'a, S> {
    slots: &'a mut [Slot<S>],
    recovery: &'a Recovery,
    stats: &'a mut RecoveryStats,
    now: Instant,
}

impl<S> Peers for BucketPeers<'_, S> {
    fn peer(&self, addr: IpAddress, port: u16) -> Option<PeerMac> {
        find_peer(self.slots, addr, port)
    }

    fn sent(&mut self, slot: usize, frame: &[u8]) {
        let Ok(tcp) = TcpFrame::new_checked(frame) else {
            return;
        };
        if let Ok(seg) = SegmentRepr::parse(&tcp) {
            self.slots[slot]
                .flight
                .on_send(self.recovery, self.stats, frame, &seg, self.now);
        }
    }
}

struct Bucket<S> {
    sockets: SocketSet<'static>,
    slots: Vec<Slot<S>>,
    /// In `ConnTable::dirty`: needs egress.
    dirty: bool,
    /// In `ConnTable::touched`: socket states may have changed since the last refresh.
    touched: bool,
    /// Slots in the handshake phase (the refresh looks for completed handshakes only
    /// when there are some).
    handshakes: u32,
    /// When smoltcp or a connection's clock next needs this bucket without new frames.
    timer: TimerSlot,
}

impl<S> TimerSlots for Vec<Bucket<S>> {
    fn timer(&mut self, bucket: usize) -> &mut TimerSlot {
        &mut self[bucket].timer
    }
}

impl<S> BacklogSlots for Vec<Bucket<S>> {
    fn links(&mut self, at: SlotAddr) -> &mut Links {
        let (bucket, slot) = split_addr(at);
        &mut self[bucket].slots[slot].links
    }
}

/// TCP connections on one port, one application state `S` per open connection.
///
/// Single-threaded: one table per worker core, fed by that core's queue. Tables of one
/// process may share an [`Admission`].
pub struct ConnTable<S> {
    config: TableConfig,
    iface: Interface,
    /// The interface's capabilities (`Medium::Ip`, the device's MTU less the Ethernet header).
    caps: DeviceCapabilities,
    buckets: Vec<Bucket<S>>,
    /// An empty set for packets that belong to no connection (smoltcp answers them).
    control: SocketSet<'static>,
    mask: usize,
    hash_keys: [u64; 2],
    timers: DeadlineHeap,
    dirty: Vec<u32>,
    touched: Vec<u32>,
    ready: Vec<(u32, u32)>,
    /// Closed sockets with their buffers, for the next SYN in any bucket.
    spare: Vec<Socket<'static>>,
    backlog: Backlog,
    admission: Arc<Admission>,
    /// The MAC and addresses served (from `config`).
    addrs: LinkAddrs,
    /// The gateways, shared by the tables of a process.
    gateways: Arc<Gateways>,
    neighbors: NeighborCache,
    /// Loss recovery settings and the RTT the table has seen.
    recovery: Recovery,
    /// The latest time passed in (`poll_ingress`, `poll_egress`).
    now: Instant,
    stats: TableStats,
}

impl<S> fmt::Debug for ConnTable<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnTable")
            .field("config", &self.config)
            .field("buckets", &self.buckets.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<S> Drop for ConnTable<S> {
    fn drop(&mut self) {
        // Connections still counted go with the table.
        self.admission.release(self.stats.in_use);
    }
}

/// What to do with a handshake that ended without becoming a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandshakeEnd {
    /// Reset by the peer, timed out, or refused.
    Failed,
    /// Evicted by a newer SYN.
    Evicted,
}

impl<S: Default> ConnTable<S> {
    /// Builds the table and its smoltcp interface (MAC and address from `config`; it
    /// answers ARP for that address) for `device`'s capabilities, with its own
    /// [`Admission`] of `config.conn_limit`.
    ///
    /// # Errors
    /// [`TableError`] for an unusable configuration or a non-Ethernet device.
    pub fn new<D: Device>(
        config: TableConfig,
        device: &mut D,
        now: Instant,
    ) -> Result<Self, TableError> {
        let admission = Arc::new(Admission::new(config.conn_limit));
        Self::with_admission(config, admission, device, now)
    }

    /// Like [`new`](Self::new), with `conn_limit` enforced by `admission`, which other
    /// tables (other workers) may share; `config.conn_limit` should be its limit. The
    /// table resolves its gateways on its own (see [`with_shared`](Self::with_shared)).
    ///
    /// # Errors
    /// [`TableError`] for an unusable configuration or a non-Ethernet device.
    pub fn with_admission<D: Device>(
        config: TableConfig,
        admission: Arc<Admission>,
        device: &mut D,
        now: Instant,
    ) -> Result<Self, TableError> {
        let gateways = Arc::new(config.gateways());
        Self::with_shared(config, admission, gateways, device, now)
    }

    /// Like [`with_admission`](Self::with_admission), with the gateways' MACs kept in
    /// `gateways`, which the other tables (workers) of the process share: each resolves
    /// them whichever table's queue the answers arrive on. `gateways` must be
    /// [`TableConfig::gateways`] of a configuration with the same gateways.
    ///
    /// # Errors
    /// [`TableError`] for an unusable configuration or a non-Ethernet device.
    pub fn with_shared<D: Device>(
        config: TableConfig,
        admission: Arc<Admission>,
        gateways: Arc<Gateways>,
        device: &mut D,
        now: Instant,
    ) -> Result<Self, TableError> {
        config.check()?;
        debug_assert_eq!(
            (gateways.ipv4(), gateways.ipv6()),
            (config.gateway4, config.gateway6)
        );
        let device_caps = device.capabilities();
        if device_caps.medium != Medium::Ethernet {
            return Err(TableError::NotEthernet);
        }
        let frame_bytes = device_caps.max_transmission_unit;
        let mut caps = device_caps;
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = caps
            .max_transmission_unit
            .saturating_sub(ETHERNET_HEADER_LEN);
        let random = RandomState::new();
        let mut iface_config = Config::new(HardwareAddress::Ip);
        iface_config.random_seed = random.hash_one(0_u64);
        let mut iface = Interface::new(iface_config, &mut CapsOnly(caps.clone()), now);
        iface.update_ip_addrs(|addrs| {
            // A new interface has no addresses, so there is room for these two.
            if let Some(cidr) = config.ipv4 {
                let _ = addrs.push(IpCidr::Ipv4(cidr));
            }
            if let Some(cidr) = config.ipv6 {
                let _ = addrs.push(IpCidr::Ipv6(cidr));
            }
        });
        // An empty route table has room for a default route per family.
        if let Some(gateway) = config.gateway4 {
            let _ = iface.routes_mut().add_default_ipv4_route(gateway);
        }
        if let Some(gateway) = config.gateway6 {
            let _ = iface.routes_mut().add_default_ipv6_route(gateway);
        }
        let bucket_count = config.bucket_count();
        let buckets = (0..bucket_count)
            .map(|_| Bucket {
                sockets: SocketSet::new(Vec::new()),
                slots: Vec::new(),
                dirty: false,
                touched: false,
                handshakes: 0,
                timer: TimerSlot::default(),
            })
            .collect();
        Ok(ConnTable {
            config,
            iface,
            caps,
            buckets,
            control: SocketSet::new(Vec::new()),
            mask: bucket_count - 1,
            hash_keys: [random.hash_one(1u64), random.hash_one(2u64) | 1],
            timers: DeadlineHeap::new(bucket_count),
            dirty: Vec::with_capacity(bucket_count),
            touched: Vec::with_capacity(bucket_count),
            ready: Vec::with_capacity(config.conn_limit),
            spare: Vec::new(),
            backlog: Backlog::new(),
            admission,
            addrs: config.addrs(),
            gateways,
            neighbors: NeighborCache::new(NEIGHBOR_CAPACITY),
            recovery: Recovery::new(config.rto_min, frame_bytes),
            now,
            stats: TableStats::default(),
        })
    }

    /// The configuration the table runs with.
    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// Number of buckets (socket sets).
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Counters.
    pub fn stats(&self) -> &TableStats {
        &self.stats
    }

    /// The neighbour cache (hosts learned from ARP, NDP and completed handshakes).
    pub fn neighbors(&self) -> &NeighborCache {
        &self.neighbors
    }

    /// The gateways (shared with the other tables given the same value).
    pub fn gateways(&self) -> &Gateways {
        &self.gateways
    }

    /// Reads and processes up to `budget` received frames, one `poll_ingress_single` each
    /// against the socket set the frame belongs to.
    pub fn poll_ingress<D: Device + RxPeek>(
        &mut self,
        now: Instant,
        device: &mut D,
        budget: usize,
    ) -> Poll {
        self.now = now;
        let mut frames = 0;
        while frames < budget {
            self.look_ahead(device);
            let Some((rx, tx)) = device.receive(now) else {
                break;
            };
            frames += 1;
            rx.consume(|frame| self.ingress_frame(now, frame, tx));
        }
        if frames == 0 {
            Poll::Idle
        } else {
            Poll::Progress
        }
    }

    /// Calls `f` for every open connection that may have work: new data received, send
    /// space freed while the application asked for it ([`Io::want_write`]), or a state
    /// change such as the peer closing. Cost is proportional to the connections with work.
    /// Returns how many connections `f` was called for.
    pub fn serve(&mut self, mut f: impl FnMut(&mut Conn<'_, S>)) -> usize {
        self.refresh_touched();
        let mut batch = std::mem::take(&mut self.ready);
        let mut calls = 0;
        for &(bucket, slot) in &batch {
            let bucket = bucket as usize;
            let slot = slot as usize;
            self.buckets[bucket].slots[slot].queued = false;
            if self.run(bucket, slot, &mut f).is_some() {
                calls += 1;
            }
        }
        batch.clear();
        batch.append(&mut self.ready);
        self.ready = batch;
        calls
    }

    /// Runs `f` on the connection `id` if it is still open (for replies produced later,
    /// e.g. by another core); `None` if it closed meanwhile.
    pub fn with_conn<R>(&mut self, id: ConnId, f: impl FnOnce(&mut Conn<'_, S>) -> R) -> Option<R> {
        let (bucket, slot) = (id.bucket as usize, id.slot as usize);
        let current = self.buckets.get(bucket)?.slots.get(slot)?;
        if current.generation != id.generation {
            return None;
        }
        self.run(bucket, slot, f)
    }

    /// Sends what the application wrote and what smoltcp owes (ACKs, SYN-ACKs, FINs,
    /// retransmissions) for dirty buckets and buckets whose timer is due; ends the
    /// connections whose clocks ran out.
    pub fn poll_egress<D: Device>(&mut self, now: Instant, device: &mut D) -> Poll {
        self.now = now;
        while let Some(bucket) = self.timers.pop_due(now, &mut self.buckets) {
            self.expire(bucket);
            self.mark_dirty(bucket);
        }
        let mut batch = std::mem::take(&mut self.dirty);
        let mut progress = false;
        let mut exhausted_at = None;
        for (index, &bucket) in batch.iter().enumerate() {
            let bucket = bucket as usize;
            let Bucket {
                sockets,
                slots,
                dirty,
                ..
            } = &mut self.buckets[bucket];
            *dirty = false;
            let mut egress = IpEgress {
                device: &mut *device,
                caps: &self.caps,
                framing: Framing {
                    own: &self.addrs,
                    gateways: &self.gateways,
                    peers: &mut BucketPeers {
                        slots: slots.as_mut_slice(),
                        recovery: &self.recovery,
                        stats: &mut self.stats.recovery,
                        now,
                    },
                    reply_to: None,
                    neighbors: &mut self.neighbors,
                    sent: 0,
                    unresolved: 0,
                },
                exhausted: false,
            };
            for _ in 0..EGRESS_ROUNDS {
                match self.iface.poll_egress(now, &mut egress, sockets) {
                    PollResult::None => break,
                    PollResult::SocketStateChanged => progress = true,
                }
                if egress.exhausted {
                    break;
                }
            }
            let mut exhausted = egress.exhausted;
            self.stats.frames_out += egress.framing.sent;
            self.stats.unresolved += egress.framing.unresolved;
            if !exhausted {
                exhausted = self.resend(bucket, device, now) == Poll::Idle;
            }
            let clocks = self.refresh_bucket(bucket, true);
            let Bucket { sockets, timer, .. } = &mut self.buckets[bucket];
            let deadline = match (self.iface.poll_at(now, sockets), clocks) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.timers.set(bucket, timer, deadline);
            if exhausted {
                self.stats.tx_exhausted += 1;
                exhausted_at = Some(index);
                break;
            }
        }
        if let Some(index) = exhausted_at {
            // The device is full: leave the rest for the next call (their own deadlines
            // or dirty flags bring them back).
            for &bucket in &batch[index + 1..] {
                self.buckets[bucket as usize].dirty = false;
                self.mark_dirty(bucket as usize);
            }
            let retry = batch[index] as usize;
            self.mark_dirty(retry);
        }
        batch.clear();
        batch.append(&mut self.dirty);
        self.dirty = batch;
        if self.probe_gateways(now, device) {
            progress = true;
        }
        if progress { Poll::Progress } else { Poll::Idle }
    }

    /// Sends the gateway probes due now that the shared [`Gateways`] hands to this table;
    /// true if it sent any. A probe the device has no room for is not sent: the round's
    /// next one follows a probe interval later.
    fn probe_gateways<D: Device>(&mut self, now: Instant, device: &mut D) -> bool {
        let addrs = self.addrs;
        let stats = &mut self.stats;
        let before = stats.gateway_probes;
        self.gateways.poll(now, |probe| {
            let Some(tx) = device.transmit(now) else {
                return;
            };
            match (probe.target, addrs.ipv4, addrs.ipv6) {
                (IpAddress::Ipv4(target), Some(own), _) => {
                    tx.consume(ARP_FRAME_LEN, |buf| {
                        neighbor::emit_arp(
                            buf,
                            addrs.mac,
                            own.address(),
                            ArpOut::Request {
                                target,
                                to_mac: probe.to_mac,
                            },
                        );
                    });
                }
                (IpAddress::Ipv6(target), _, Some(own)) => {
                    tx.consume(NDP_FRAME_LEN, |buf| {
                        neighbor::emit_ndp(
                            buf,
                            addrs.mac,
                            own.address(),
                            NdpOut::Solicit {
                                target,
                                to_mac: probe.to_mac,
                            },
                        );
                    });
                }
                // A gateway without an address of its family is refused by `check`.
                _ => return,
            }
            stats.frames_out += 1;
            stats.gateway_probes += 1;
        });
        stats.gateway_probes > before
    }

    /// Time until the table next needs `poll_egress` without new frames (`Some(ZERO)` if
    /// work is pending now); `None` if only new frames can create work. For the park policy.
    /// It may be early (a timer moved later is noticed when its old time comes), never late.
    pub fn poll_delay(&self, now: Instant) -> Option<Duration> {
        if !self.dirty.is_empty() || !self.ready.is_empty() || !self.touched.is_empty() {
            return Some(Duration::ZERO);
        }
        let next = match (self.timers.peek(), self.gateways.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        next.map(|when| {
            if when > now {
                when - now
            } else {
                Duration::ZERO
            }
        })
    }

    /// Prefetches, for the frames after the one about to be processed, what their
    /// processing touches first, one step further each frame (see "Look-ahead" in the
    /// module docs): the bucket of the frame three ahead, the slots of the one two ahead
    /// (whose bucket is in cache by now), the sockets of the next (whose slots are).
    fn look_ahead<D: RxPeek>(&self, device: &D) {
        if let Some(Some(bucket)) = device.peek_rx(3, |frame| self.peek_bucket(frame)) {
            prefetch_line((&raw const self.buckets[bucket]).cast());
        }
        if let Some(Some(bucket)) = device.peek_rx(2, |frame| self.peek_bucket(frame)) {
            for slot in &self.buckets[bucket].slots {
                prefetch_line((&raw const slot.peer).cast());
                slot.flight.prefetch();
            }
        }
        if let Some(Some(bucket)) = device.peek_rx(1, |frame| self.peek_bucket(frame)) {
            for slot in &self.buckets[bucket].slots {
                if slot.handle.is_some() {
                    prefetch_socket(slot.socket_at);
                }
            }
        }
    }

    /// The bucket a received frame's segment goes to, if it is a TCP segment to one of our
    /// ports (any bytes: a frame that is not such a segment has none).
    fn peek_bucket(&self, frame: &[u8]) -> Option<usize> {
        let tcp = TcpFrame::new_checked(frame).ok()?;
        let port = tcp.dst_port();
        (port == self.config.port || Some(port) == self.config.extra_port)
            .then(|| self.bucket_of(tcp.src_addr(), tcp.src_port()))
    }

    fn ingress_frame<T: TxToken>(&mut self, now: Instant, frame: &[u8], tx: T) {
        self.stats.frames_in += 1;
        if frame.len() < ETHERNET_HEADER_LEN {
            self.stats.frames_dropped += 1;
            return;
        }
        let mac = |at: usize| {
            [
                frame[at],
                frame[at + 1],
                frame[at + 2],
                frame[at + 3],
                frame[at + 4],
                frame[at + 5],
            ]
        };
        if !self.addrs.takes_frames_to(mac(0)) {
            self.stats.frames_dropped += 1;
            return;
        }
        let src_mac = mac(6);
        match demux::ethertype(frame) {
            Some(demux::ETHERTYPE_ARP) if self.addrs.ipv4.is_some() => {
                self.stats.frames_control += 1;
                self.arp_ingress(frame, tx, now);
                return;
            }
            Some(demux::ETHERTYPE_IPV4) if self.addrs.ipv4.is_some() => {}
            Some(demux::ETHERTYPE_IPV6) if self.addrs.ipv6.is_some() => {
                if let Some(tx) = self.ndp_ingress(frame, tx, now) {
                    return self.ip_ingress(now, frame, src_mac, tx);
                }
                self.stats.frames_control += 1;
                return;
            }
            _ => {
                self.stats.frames_dropped += 1;
                return;
            }
        }
        self.ip_ingress(now, frame, src_mac, tx);
    }

    /// An IPv4 or IPv6 frame to us: a segment of our port to a bucket, anything else to
    /// smoltcp's control set.
    fn ip_ingress<T: TxToken>(&mut self, now: Instant, frame: &[u8], src_mac: [u8; 6], tx: T) {
        let packet = &frame[ETHERNET_HEADER_LEN..];
        let flow = match TcpFrame::new_checked(frame) {
            Ok(tcp)
                if (tcp.dst_port() == self.config.port
                    || Some(tcp.dst_port()) == self.config.extra_port)
                    && self.addrs.is_ours(tcp.dst_addr()) =>
            {
                Some(tcp)
            }
            _ => None,
        };
        let Some(tcp) = flow else {
            self.stats.frames_control += 1;
            let mut view = IpFrame {
                packet: Some(packet),
                tx: Some(tx),
                caps: &self.caps,
                framing: Framing {
                    own: &self.addrs,
                    gateways: &self.gateways,
                    peers: &mut NoPeers,
                    reply_to: Some(src_mac),
                    neighbors: &mut self.neighbors,
                    sent: 0,
                    unresolved: 0,
                },
            };
            self.iface
                .poll_ingress_single(now, &mut view, &mut self.control);
            self.stats.frames_out += view.framing.sent;
            self.stats.unresolved += view.framing.unresolved;
            return;
        };
        self.stats.frames_tcp += 1;
        let (src_addr, src_port) = (tcp.src_addr(), tcp.src_port());
        let bucket = self.bucket_of(src_addr, src_port);
        let armed = if tcp.is_syn() {
            self.arm_for_syn(
                bucket,
                src_addr,
                src_port,
                src_mac,
                tcp.dst_addr(),
                tcp.dst_port(),
            )
        } else {
            self.recovery_ingress(bucket, &tcp, now);
            None
        };
        let Bucket { sockets, slots, .. } = &mut self.buckets[bucket];
        let mut view = IpFrame {
            packet: Some(packet),
            tx: Some(tx),
            caps: &self.caps,
            framing: Framing {
                own: &self.addrs,
                gateways: &self.gateways,
                peers: &mut BucketPeers {
                    slots: slots.as_mut_slice(),
                    recovery: &self.recovery,
                    stats: &mut self.stats.recovery,
                    now,
                },
                reply_to: Some(src_mac),
                neighbors: &mut self.neighbors,
                sent: 0,
                unresolved: 0,
            },
        };
        self.iface.poll_ingress_single(now, &mut view, sockets);
        self.stats.frames_out += view.framing.sent;
        self.stats.unresolved += view.framing.unresolved;
        if let Some(slot) = armed {
            self.after_syn(bucket, slot);
        }
        self.mark_dirty(bucket);
        self.mark_touched(bucket);
    }

    /// Answers an ARP request for our address and learns its validated sender (or the
    /// sender of an ARP reply to us), confirming a gateway; ignores every other ARP frame.
    fn arp_ingress<T: TxToken>(&mut self, frame: &[u8], tx: T, now: Instant) {
        let Some(own) = self.addrs.ipv4 else { return };
        let Ok(input) = neighbor::arp_input(frame, self.addrs.mac, own) else {
            return;
        };
        self.neighbors.learn(input.sender_ip, input.sender_mac);
        self.gateways
            .confirm(input.sender_ip.into(), input.sender_mac, now);
        if input.is_request {
            let own_mac = self.addrs.mac;
            tx.consume(ARP_FRAME_LEN, |buf| {
                neighbor::emit_arp(
                    buf,
                    own_mac,
                    own.address(),
                    ArpOut::Reply {
                        to_ip: input.sender_ip,
                        to_mac: input.sender_mac,
                    },
                );
            });
            self.stats.frames_out += 1;
        }
    }

    /// Answers a neighbour solicitation for our address and learns what a validated one,
    /// or an advertisement to us, shows (confirming a gateway); ignores other neighbour
    /// discovery. Returns the transmit token for a frame that is not neighbour discovery.
    fn ndp_ingress<T: TxToken>(&mut self, frame: &[u8], tx: T, now: Instant) -> Option<T> {
        let own = self.addrs.ipv6?;
        let input = match neighbor::ndp_input(frame, self.addrs.mac, own) {
            Ok(input) => input,
            Err(NdpIgnored::NotNdp) => return Some(tx),
            Err(_) => return None,
        };
        if let Some((ip, mac)) = input.learn {
            self.neighbors.learn(ip, mac);
            self.gateways.confirm(ip.into(), mac, now);
        }
        if let Some((to_ip, to_mac)) = input.answer {
            let own_mac = self.addrs.mac;
            tx.consume(NDP_FRAME_LEN, |buf| {
                neighbor::emit_ndp(
                    buf,
                    own_mac,
                    own.address(),
                    NdpOut::Advert { to_ip, to_mac },
                );
            });
            self.stats.frames_out += 1;
        }
        None
    }

    /// Shows a segment from a peer to its connection's loss recovery (its ACK and SACK
    /// blocks), before smoltcp processes it.
    fn recovery_ingress(&mut self, bucket: usize, tcp: &TcpFrame<&[u8]>, now: Instant) {
        if !self.recovery.enabled() {
            return;
        }
        let slots = &mut self.buckets[bucket].slots;
        // Usually the first touch of this connection's state since its last segment, and at
        // many connections out of cache: ask for every line the lookup and the ACK read (and
        // the reply's copy will write) at once, rather than miss on one after the other.
        for slot in slots.iter() {
            prefetch_line((&raw const slot.peer).cast());
            slot.flight.prefetch();
        }
        let Some(peer) = find_peer(slots, tcp.src_addr(), tcp.src_port()) else {
            return;
        };
        if let Ok(seg) = SegmentRepr::parse(tcp) {
            slots[peer.slot]
                .flight
                .on_ack(&mut self.recovery, &mut self.stats.recovery, &seg, now);
        }
    }

    /// Sends the copies loss recovery owes in `bucket` (lost ones, then probes);
    /// `Poll::Idle` if the device ran out of transmit tokens first.
    fn resend<D: Device>(&mut self, bucket_index: usize, device: &mut D, now: Instant) -> Poll {
        let Self {
            buckets,
            recovery,
            stats,
            ..
        } = self;
        let Bucket { sockets, slots, .. } = &mut buckets[bucket_index];
        for slot in slots.iter_mut() {
            let Some(handle) = slot.handle else { continue };
            if slot.phase == Phase::Free || !slot.flight.due(now) {
                continue;
            }
            let state = sockets.get::<tcp::Socket>(handle).state();
            if !matches!(
                state,
                tcp::State::SynReceived
                    | tcp::State::Established
                    | tcp::State::FinWait1
                    | tcp::State::Closing
                    | tcp::State::CloseWait
                    | tcp::State::LastAck
            ) {
                // Nothing of ours can be waiting for an acknowledgment.
                slot.flight.reset();
                continue;
            }
            while let Some(resend) = slot.flight.next_resend(recovery, &mut stats.recovery, now) {
                let Some(tx) = device.transmit(now) else {
                    return Poll::Idle;
                };
                let flight = &slot.flight;
                tx.consume(flight.copy_len(resend), |frame| {
                    flight.write_copy(resend, frame)
                });
                slot.flight
                    .resent(recovery, &mut stats.recovery, resend, now);
                stats.frames_out += 1;
            }
        }
        Poll::Progress
    }

    fn bucket_of(&self, addr: IpAddress, port: u16) -> usize {
        let addr = match addr {
            IpAddress::Ipv4(a) => u64::from(a.to_bits()),
            IpAddress::Ipv6(a) => {
                let bits = a.to_bits();
                (bits as u64) ^ ((bits >> 64) as u64)
            }
        };
        // An IPv4 address and port: (addr << 16) | port.
        let key = addr.rotate_left(16) ^ u64::from(port);
        let mut h = (key ^ self.hash_keys[0]).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
        h = h.wrapping_mul(self.hash_keys[1]);
        (h >> 32) as usize & self.mask
    }

    /// A SYN for a new connection from `addr:port` (at `mac`) to our address `local` and
    /// our `local_port` is about to enter `bucket`: arm a listening socket on that address
    /// and port for it, unless the 4-tuple already has a live socket or the connection limit
    /// is reached (then smoltcp answers the SYN with RST).
    fn arm_for_syn(
        &mut self,
        bucket_index: usize,
        addr: IpAddress,
        port: u16,
        mac: [u8; 6],
        local: IpAddress,
        local_port: u16,
    ) -> Option<usize> {
        let remote = IpEndpoint::new(addr, port);
        let bucket = &mut self.buckets[bucket_index];
        let mut reuse = None;
        for (index, slot) in bucket.slots.iter().enumerate() {
            let (Phase::Handshake | Phase::Open | Phase::Done, Some(handle)) =
                (slot.phase, slot.handle)
            else {
                continue;
            };
            let socket = bucket.sockets.get::<tcp::Socket>(handle);
            // One peer may use one source port towards both of our ports.
            if socket.remote_endpoint() == Some(remote)
                && socket.local_endpoint().map(|local| local.port) == Some(local_port)
            {
                if matches!(socket.state(), tcp::State::TimeWait | tcp::State::Closed)
                    && slot.phase == Phase::Done
                {
                    reuse = Some(index);
                    break;
                }
                // The connection's own socket answers a duplicate SYN.
                return None;
            }
        }
        if let Some(index) = reuse {
            // The TIME-WAIT connection gives its place and its count to the new one.
            bucket.slots[index].phase = Phase::Free;
            self.stats.in_use -= 1;
            self.admission.release(1);
        }
        if self.admission.is_full() {
            self.stats.refused += 1;
            if let Some(index) = reuse {
                release(&mut self.buckets[bucket_index], index, &mut self.spare);
            }
            return None;
        }
        let index = match reuse {
            Some(index) => index,
            None => self.free_slot(bucket_index),
        };
        let bucket = &mut self.buckets[bucket_index];
        let handle = bucket.slots[index].handle?;
        let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
        let endpoint = IpListenEndpoint {
            addr: Some(local),
            port: local_port,
        };
        // A closed or TIME-WAIT socket can always listen; on failure the SYN gets a RST.
        if socket.listen(endpoint).is_err() {
            release(bucket, index, &mut self.spare);
            return None;
        }
        socket.set_timeout(None);
        let slot = &mut bucket.slots[index];
        slot.peer = Some(Peer { addr, port, mac });
        slot.flight.reset();
        Some(index)
    }

    /// A free slot in `bucket` holding a closed socket: one from the spare pool, or a new one.
    fn free_slot(&mut self, bucket_index: usize) -> usize {
        let socket = match self.spare.pop() {
            Some(socket) => socket,
            None => {
                let mut socket = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0u8; self.config.rx_buffer_bytes]),
                    tcp::SocketBuffer::new(vec![0u8; self.config.tx_buffer_bytes]),
                );
                socket.set_nagle_enabled(false);
                socket.set_ack_delay(None);
                socket.set_keep_alive(None);
                self.stats.sockets += 1;
                Socket::Tcp(socket)
            }
        };
        let bucket = &mut self.buckets[bucket_index];
        let handle = bucket.sockets.add(socket);
        let index = match bucket.slots.iter().position(|s| s.handle.is_none()) {
            Some(index) => index,
            None => {
                bucket.slots.push(Slot::empty());
                bucket.slots.len() - 1
            }
        };
        bucket.slots[index].handle = Some(handle);
        // Adding may have moved the set's sockets.
        for slot in &mut bucket.slots {
            if let Some(handle) = slot.handle {
                let socket: *const tcp::Socket = bucket.sockets.get::<tcp::Socket>(handle);
                slot.socket_at = socket as usize;
            }
        }
        index
    }

    /// After smoltcp processed the SYN: either the armed socket took it (a handshake joins
    /// the backlog, evicting the oldest if the backlog is over budget), or disarm it.
    fn after_syn(&mut self, bucket_index: usize, index: usize) {
        let now = self.now;
        let bucket = &mut self.buckets[bucket_index];
        let slot = &mut bucket.slots[index];
        let Some(handle) = slot.handle else { return };
        let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
        if socket.state() == tcp::State::Listen {
            // LISTEN -> CLOSED sends nothing.
            socket.close();
            release(bucket, index, &mut self.spare);
            return;
        }
        slot.phase = Phase::Handshake;
        slot.seen_state = socket.state();
        slot.life = Lifetime::start(now);
        bucket.handshakes += 1;
        self.stats.handshaking += 1;
        self.backlog
            .push(slot_addr(bucket_index, index), &mut self.buckets);
        // Handshakes may use the places no connection holds, plus `syn_backlog` more.
        let budget = self.config.conn_limit + self.config.syn_backlog;
        while self.stats.handshaking + self.stats.in_use > budget
            && let Some(oldest) = self.backlog.oldest()
        {
            let (bucket, slot) = split_addr(oldest);
            self.end_handshake(bucket, slot, HandshakeEnd::Evicted);
        }
        debug_assert_eq!(self.backlog.len(), self.stats.handshaking);
    }

    /// Takes a handshake out of the backlog and frees its socket (without a word: the peer
    /// may not exist).
    fn end_handshake(&mut self, bucket_index: usize, index: usize, end: HandshakeEnd) {
        self.backlog
            .remove(slot_addr(bucket_index, index), &mut self.buckets);
        self.buckets[bucket_index].handshakes -= 1;
        self.stats.handshaking -= 1;
        self.stats.handshakes_failed += 1;
        if end == HandshakeEnd::Evicted {
            self.stats.syn_evicted += 1;
        }
        let bucket = &mut self.buckets[bucket_index];
        if let Some(handle) = bucket.slots[index].handle {
            // The RST `abort` leaves owed is never sent (the socket leaves the set first,
            // and its next `listen` forgets it): the peer may not exist.
            bucket.sockets.get_mut::<tcp::Socket>(handle).abort();
        }
        release(bucket, index, &mut self.spare);
    }

    /// A handshake completed: admit the connection under `conn_limit` (or reset it) and
    /// teach the neighbour cache the peer's MAC, which the handshake proved (or, for a peer
    /// off the link, tell the gateways which MAC it came through).
    fn establish(&mut self, bucket_index: usize, index: usize) {
        let now = self.now;
        self.backlog
            .remove(slot_addr(bucket_index, index), &mut self.buckets);
        self.buckets[bucket_index].handshakes -= 1;
        self.stats.handshaking -= 1;
        if !self.admission.try_acquire() {
            // Another table took the last place meanwhile.
            self.stats.refused += 1;
            let bucket = &mut self.buckets[bucket_index];
            if let Some(handle) = bucket.slots[index].handle {
                bucket.sockets.get_mut::<tcp::Socket>(handle).abort();
            }
            release(bucket, index, &mut self.spare);
            return;
        }
        let slot = &mut self.buckets[bucket_index].slots[index];
        slot.phase = Phase::Open;
        slot.session = Some(S::default());
        slot.generation = slot.generation.wrapping_add(1);
        slot.seen_recv = 0;
        slot.want_write = false;
        slot.life = Lifetime::start(now);
        if let Some(peer) = slot.peer {
            if self.addrs.on_link(peer.addr) {
                self.neighbors.learn(peer.addr, peer.mac);
            } else {
                self.gateways.handshake_via(peer.addr, peer.mac, now);
            }
        }
        self.stats.in_use += 1;
        self.stats.accepted += 1;
        self.stats.active += 1;
    }

    /// Runs the application on one open connection and applies what it did.
    fn run<R>(
        &mut self,
        bucket_index: usize,
        index: usize,
        f: impl FnOnce(&mut Conn<'_, S>) -> R,
    ) -> Option<R> {
        let now = self.now;
        let bucket = &mut self.buckets[bucket_index];
        let slot = &mut bucket.slots[index];
        if slot.phase != Phase::Open {
            return None;
        }
        let (Some(handle), Some(session)) = (slot.handle, slot.session.as_mut()) else {
            return None;
        };
        let id = ConnId {
            bucket: bucket_index as u32,
            slot: index as u32,
            generation: slot.generation,
        };
        let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
        let queued_before = socket.send_queue();
        let mut conn = Conn {
            state: session,
            io: Io {
                socket,
                dirty: false,
                closed: false,
                want_write: false,
            },
            id,
        };
        let result = f(&mut conn);
        let Io {
            socket,
            dirty,
            closed,
            want_write,
        } = conn.io;
        slot.want_write = want_write;
        slot.seen_recv = socket.recv_queue();
        slot.life
            .wrote(socket.send_queue().saturating_sub(queued_before));
        if closed {
            slot.session = None;
            slot.phase = Phase::Done;
            slot.life.next_stage(now);
            self.stats.closed += 1;
            self.stats.active -= 1;
        }
        if dirty || closed {
            self.mark_dirty(bucket_index);
        }
        Some(result)
    }

    fn refresh_touched(&mut self) {
        let mut batch = std::mem::take(&mut self.touched);
        for &bucket in &batch {
            if self.buckets[bucket as usize].touched {
                self.refresh_bucket(bucket as usize, false);
            }
        }
        batch.clear();
        batch.append(&mut self.touched);
        self.touched = batch;
    }

    /// Follows socket state changes in one bucket: handshakes completing or failing,
    /// connections ending, sockets becoming free; reads the connections' queues into
    /// their clocks; queues connections with work. With `clocks` (after egress, when the
    /// bucket's timer is set), returns the earliest clock deadline.
    fn refresh_bucket(&mut self, bucket_index: usize, clocks: bool) -> Option<Instant> {
        self.buckets[bucket_index].touched = false;
        if self.buckets[bucket_index].handshakes > 0 {
            self.refresh_handshakes(bucket_index);
        }
        let now = self.now;
        let idle_timeout = self.config.idle_timeout;
        let Self {
            buckets,
            stats,
            ready,
            spare,
            admission,
            ..
        } = self;
        let bucket = &mut buckets[bucket_index];
        // A closed or TIME-WAIT socket is released only once egress has sent what it owes
        // (an RST, the ACK of the peer's FIN): not while the bucket still waits for its
        // egress pass.
        let egress_done = !bucket.dirty;
        let mut earliest: Option<Instant> = None;
        for index in 0..bucket.slots.len() {
            let Bucket { sockets, slots, .. } = &mut *bucket;
            let slot = &mut slots[index];
            let Some(handle) = slot.handle else { continue };
            match slot.phase {
                Phase::Free => continue,
                Phase::Handshake => {}
                Phase::Open => {
                    let socket = sockets.get_mut::<tcp::Socket>(handle);
                    let state = socket.state();
                    if matches!(state, tcp::State::Closed | tcp::State::TimeWait) {
                        slot.session = None;
                        slot.phase = Phase::Done;
                        slot.life.next_stage(now);
                        stats.closed += 1;
                        stats.active -= 1;
                    } else {
                        let recv_queue = socket.recv_queue();
                        let arrived = recv_queue > slot.seen_recv;
                        slot.life
                            .observe(now, socket.send_queue(), recv_queue, arrived);
                        let work = arrived
                            || state != slot.seen_state
                            || (slot.want_write && socket.can_send());
                        slot.seen_state = state;
                        if work && !slot.queued {
                            slot.queued = true;
                            ready.push((bucket_index as u32, index as u32));
                        }
                    }
                }
                Phase::Done => {}
            }
            if slot.phase == Phase::Done {
                let socket = sockets.get_mut::<tcp::Socket>(handle);
                let finished = match socket.state() {
                    tcp::State::Closed | tcp::State::TimeWait => egress_done,
                    _ => false,
                };
                if finished {
                    stats.in_use -= 1;
                    admission.release(1);
                    release(bucket, index, spare);
                    continue;
                }
                slot.life
                    .observe(now, socket.send_queue(), socket.recv_queue(), false);
            }
            if clocks {
                let life = slot
                    .life
                    .deadline(slot.stage(), idle_timeout)
                    .map(|(at, _)| at);
                for when in [life, slot.flight.deadline()].into_iter().flatten() {
                    earliest = Some(earliest.map_or(when, |e| e.min(when)));
                }
            }
        }
        earliest
    }

    /// The handshakes of one bucket that completed (admitted or refused) or failed (an RST
    /// sends smoltcp's socket back to LISTEN; or closed).
    fn refresh_handshakes(&mut self, bucket_index: usize) {
        for index in 0..self.buckets[bucket_index].slots.len() {
            let bucket = &self.buckets[bucket_index];
            let slot = &bucket.slots[index];
            let (Phase::Handshake, Some(handle)) = (slot.phase, slot.handle) else {
                continue;
            };
            match bucket.sockets.get::<tcp::Socket>(handle).state() {
                tcp::State::SynReceived => {}
                tcp::State::Listen | tcp::State::Closed | tcp::State::TimeWait => {
                    self.end_handshake(bucket_index, index, HandshakeEnd::Failed);
                }
                _ => {
                    self.establish(bucket_index, index);
                }
            }
        }
    }

    /// Ends the connections of `bucket` whose clocks ran out (its timer is due).
    fn expire(&mut self, bucket_index: usize) {
        let now = self.now;
        let idle_timeout = self.config.idle_timeout;
        for index in 0..self.buckets[bucket_index].slots.len() {
            let slot = &self.buckets[bucket_index].slots[index];
            let (Some(handle), false) = (slot.handle, slot.phase == Phase::Free) else {
                continue;
            };
            let Some(why) = slot.life.expired(now, slot.stage(), idle_timeout) else {
                continue;
            };
            if why == Expiry::Handshake {
                self.end_handshake(bucket_index, index, HandshakeEnd::Failed);
                continue;
            }
            let bucket = &mut self.buckets[bucket_index];
            let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
            if why == Expiry::Idle {
                // As memcached: the connection is closed (FIN after anything queued).
                socket.close();
                self.stats.idle_closed += 1;
            } else {
                socket.abort();
                self.stats.timed_out += 1;
            }
            let slot = &mut bucket.slots[index];
            if slot.phase == Phase::Open {
                slot.session = None;
                slot.phase = Phase::Done;
                self.stats.closed += 1;
                self.stats.active -= 1;
            }
            slot.life.next_stage(now);
        }
        self.mark_touched(bucket_index);
    }

    #[inline]
    fn mark_dirty(&mut self, bucket: usize) {
        let entry = &mut self.buckets[bucket];
        if !entry.dirty {
            entry.dirty = true;
            self.dirty.push(bucket as u32);
        }
    }

    #[inline]
    fn mark_touched(&mut self, bucket: usize) {
        let entry = &mut self.buckets[bucket];
        if !entry.touched {
            entry.touched = true;
            self.touched.push(bucket as u32);
        }
    }
}

/// Frees slot `index` of `bucket` and moves its (closed) socket to the spare pool.
fn release<S>(bucket: &mut Bucket<S>, index: usize, spare: &mut Vec<Socket<'static>>) {
    let slot = &mut bucket.slots[index];
    slot.phase = Phase::Free;
    slot.session = None;
    slot.peer = None;
    slot.links = Links::default();
    slot.flight.reset();
    if let Some(handle) = slot.handle.take() {
        spare.push(bucket.sockets.remove(handle));
    }
}

/// One open connection, as the application sees it inside [`ConnTable::serve`].
///
/// The two public fields borrow separately, so `conn.io.recv(|buf| ...)` can update
/// `conn.state` from inside the closure.
pub struct Conn<'a, S> {
    /// The application's state for this connection.
    pub state: &'a mut S,
    /// The connection's socket.
    pub io: Io<'a>,
    id: ConnId,
}

impl<S> Conn<'_, S> {
    /// This connection's id, for [`ConnTable::with_conn`].
    pub fn id(&self) -> ConnId {
        self.id
    }
}

/// The socket of a [`Conn`]: smoltcp's TCP socket calls, with the table told about writes.
pub struct Io<'a> {
    socket: &'a mut tcp::Socket<'static>,
    dirty: bool,
    closed: bool,
    want_write: bool,
}

impl Io<'_> {
    /// Calls `f` with the largest contiguous slice of received bytes and dequeues the
    /// count it returns (the receive buffer is a ring: data can be split across two calls).
    ///
    /// # Errors
    /// `RecvError::Finished` after the peer's FIN once all data is read;
    /// `RecvError::InvalidState` if the connection cannot receive.
    pub fn recv<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, tcp::RecvError> {
        let mut taken = 0;
        let result = self.socket.recv(|buf| {
            let (n, r) = f(buf);
            taken = n;
            (n, r)
        })?;
        if taken > 0 {
            self.dirty = true;
        }
        Ok(result)
    }

    /// Dequeues received bytes into `data`; returns how many.
    ///
    /// # Errors
    /// As [`Io::recv`].
    pub fn recv_slice(&mut self, data: &mut [u8]) -> Result<usize, tcp::RecvError> {
        let n = self.socket.recv_slice(data)?;
        if n > 0 {
            self.dirty = true;
        }
        Ok(n)
    }

    /// Copies received bytes into `data` without dequeuing them (across the ring's wrap).
    ///
    /// # Errors
    /// As [`Io::recv`].
    pub fn peek_slice(&mut self, data: &mut [u8]) -> Result<usize, tcp::RecvError> {
        self.socket.peek_slice(data)
    }

    /// Calls `f` with the largest contiguous free slice of the send buffer and enqueues the
    /// count it returns.
    ///
    /// # Errors
    /// `SendError::InvalidState` if the connection cannot send.
    pub fn send<R>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, tcp::SendError> {
        let mut put = 0;
        let result = self.socket.send(|buf| {
            let (n, r) = f(buf);
            put = n;
            (n, r)
        })?;
        if put > 0 {
            self.dirty = true;
        }
        Ok(result)
    }

    /// Enqueues as much of `data` as fits; returns how many bytes.
    ///
    /// # Errors
    /// As [`Io::send`].
    pub fn send_slice(&mut self, data: &[u8]) -> Result<usize, tcp::SendError> {
        let n = self.socket.send_slice(data)?;
        if n > 0 {
            self.dirty = true;
        }
        Ok(n)
    }

    /// Bytes waiting in the receive buffer.
    pub fn recv_queue(&self) -> usize {
        self.socket.recv_queue()
    }

    /// Bytes in the send buffer (not yet sent or not yet acknowledged).
    pub fn send_queue(&self) -> usize {
        self.socket.send_queue()
    }

    /// Size of the send buffer.
    pub fn send_capacity(&self) -> usize {
        self.socket.send_capacity()
    }

    /// Size of the receive buffer.
    pub fn recv_capacity(&self) -> usize {
        self.socket.recv_capacity()
    }

    /// Free bytes in the send buffer.
    pub fn send_space(&self) -> usize {
        self.socket.send_capacity() - self.socket.send_queue()
    }

    /// True while data may still arrive or is buffered (false once the peer's FIN was read).
    pub fn may_recv(&self) -> bool {
        self.socket.may_recv()
    }

    /// True while the send half is open (ESTABLISHED or CLOSE-WAIT).
    pub fn may_send(&self) -> bool {
        self.socket.may_send()
    }

    /// The TCP state.
    pub fn tcp_state(&self) -> tcp::State {
        self.socket.state()
    }

    /// The peer's address and port.
    pub fn remote_endpoint(&self) -> Option<IpEndpoint> {
        self.socket.remote_endpoint()
    }

    /// The port the connection was accepted on ([`TableConfig::port`] or
    /// [`TableConfig::extra_port`]); 0 once the socket is closed.
    pub fn local_port(&self) -> u16 {
        self.socket.local_endpoint().map_or(0, |local| local.port)
    }

    /// Asks for a call when send space frees up: use when output is pending because the
    /// send buffer is full. Holds until the next call for this connection.
    pub fn want_write(&mut self) {
        self.want_write = true;
    }

    /// Sends what is queued, then FIN. The table drops the application state after this
    /// call returns and makes no more calls for the connection.
    pub fn close(&mut self) {
        self.socket.close();
        self.closed = true;
    }

    /// Resets the connection (one RST) and drops the application state, like `close`.
    pub fn abort(&mut self) {
        self.socket.abort();
        self.closed = true;
    }
}

#[cfg(test)]
mod tests;
