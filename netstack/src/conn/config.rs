//! The table's configuration ([`TableConfig`], checked by [`TableConfig::check`]), the
//! errors it refuses one with ([`TableError`]), its counters ([`TableStats`]) and the id
//! that names a connection across calls ([`ConnId`]).
//!
//! Nothing here runs per packet: a configuration is checked once, when a table is built.

use core::fmt;

use smoltcp::time::Duration;
use smoltcp::wire::{
    EthernetAddress, IpAddress, IpCidr, Ipv4Address, Ipv4Cidr, Ipv6Address, Ipv6Cidr,
};

#[cfg(doc)]
use super::{Admission, CLOSE_TIMEOUT, ConnTable, GIVE_UP_TIMEOUT, HANDSHAKE_TIMEOUT, Io};
use super::{DEFAULT_RTO_MIN, Gateways, MAX_RTO_MIN, MIN_RTO_MIN, RecoveryStats};
use crate::neighbor::LinkAddrs;

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
/// One: at many connections every socket a packet's bucket holds besides its own costs
/// cache misses in smoltcp's socket scan, egress pass and `poll_at`, and in the state
/// refresh. To weigh another load, change this and compare
/// `cargo bench -p netstack --bench conn_table` at 10,000 connections against a saved
/// baseline.
pub const BUCKET_LOAD: usize = 1;

/// Largest accepted `conn_limit` and `syn_backlog`.
pub const MAX_CONN_LIMIT: usize = 1 << 20;

/// Smallest accepted socket buffer.
pub const MIN_BUFFER_BYTES: usize = 256;

/// Largest accepted socket buffer (smoltcp's limit for receive buffers).
pub const MAX_BUFFER_BYTES: usize = 1 << 30;

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
    /// Accept connections on `port` (and `extra_port`). `false`: a client table
    /// ([`TableConfig::client`]), which only opens connections ([`ConnTable::connect`]);
    /// `port` is then 0 and `extra_port` `None`.
    ///
    /// [`ConnTable::connect`]: super::ConnTable::connect
    pub accept: bool,
    /// The local ports [`ConnTable::connect`](super::ConnTable::connect) picks from when
    /// its caller names none; default [`PortRange::EPHEMERAL`].
    pub ephemeral_ports: PortRange,
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
            accept: true,
            ephemeral_ports: PortRange::EPHEMERAL,
        }
        .with_ip(ip)
    }

    /// A configuration for a client table: it serves `ip` and opens connections
    /// ([`ConnTable::connect`](super::ConnTable::connect)) but accepts none; the default
    /// limits otherwise (`conn_limit` is the most connections it opens at once).
    pub fn client(mac: [u8; 6], ip: impl Into<IpCidr>) -> Self {
        TableConfig {
            accept: false,
            ..TableConfig::new(mac, ip, 0)
        }
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
        if self.accept && (self.port == 0 || self.extra_port == Some(0)) {
            return Err(TableError::ZeroPort);
        }
        if !self.accept && (self.port != 0 || self.extra_port.is_some()) {
            return Err(TableError::PortWithoutAccept);
        }
        let PortRange { first, last } = self.ephemeral_ports;
        if first == 0 || first > last {
            return Err(TableError::EphemeralPorts { first, last });
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

/// A range of local ports, `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// The first port.
    pub first: u16,
    /// The last port (included).
    pub last: u16,
}

impl PortRange {
    /// The IANA dynamic range (RFC 6335), 49152..=65535.
    pub const EPHEMERAL: PortRange = PortRange {
        first: 49152,
        last: 65535,
    };
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
    /// `accept` is off, yet `port` is not 0 or `extra_port` is set.
    PortWithoutAccept,
    /// `ephemeral_ports` is empty or starts at port 0.
    EphemeralPorts {
        /// The rejected range's first port.
        first: u16,
        /// Its last port.
        last: u16,
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
            TableError::PortWithoutAccept => {
                write!(f, "a port to accept on, but accepting is off")
            }
            TableError::EphemeralPorts { first, last } => {
                write!(f, "ephemeral ports {first}..={last} empty or from port 0")
            }
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
    /// Open (established) connections now, those `serve` calls the application for.
    pub active: usize,
    /// Connections counted against `conn_limit` now in this table: open and closing, and
    /// those it is opening ([`ConnTable::connect`]).
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
    /// Connections this table opened ([`ConnTable::connect`](super::ConnTable::connect)).
    pub opened: u64,
    /// Of those, connections whose handshake completed.
    pub connected: u64,
    /// Of those opened, connections whose SYN was refused (RST) or never answered within
    /// [`HANDSHAKE_TIMEOUT`].
    pub connect_failed: u64,
    /// What loss recovery did (`recovery/`).
    pub recovery: RecoveryStats,
}

/// Identifies a connection across calls (for replies that arrive later, e.g. from
/// another core); stale once the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub(super) bucket: u32,
    pub(super) slot: u32,
    pub(super) generation: u32,
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
