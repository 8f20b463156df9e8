//! Active opens: connections the table opens itself ([`ConnTable::connect`]), for a load
//! generator that runs its connections over this stack, one table per generator thread.
//!
//! A client connection lives in the same buckets, slots, timers and loss recovery as an
//! accepted one; what differs is how it starts and how it is found:
//!
//! | | accepted (`accept.rs`) | opened (here) |
//! |---|---|---|
//! | starts | a SYN arms a listener | `connect`: SYN-SENT, phase `Connecting` |
//! | local port | [`TableConfig::port`] (or `extra_port`) | the caller's, or one of [`TableConfig::ephemeral_ports`] |
//! | bucket | hash(peer address, peer port) | hash(peer address, local port) |
//! | state `S` | `S::default()` once established | the caller's, from `connect` on |
//! | admission | when the handshake completes | at `connect` ([`ConnectError::Limit`]) |
//! | next hop | the MAC its SYN came from | the neighbour cache or gateway, then the MAC its SYN-ACK came from |
//!
//! **Demultiplexing.** A segment to one of our addresses whose destination port is not a
//! port the table accepts on is looked up as a client connection's (only while the table
//! has one: a server table's path is unchanged); in its bucket, a slot matches on the
//! peer's address and both ports, so many connections to one server port share nothing
//! but their peer. No slot: smoltcp's control set answers it (an RST). A local port is in
//! use by at most one connection of the table, whatever the peer ([`ConnectError::PortInUse`]).
//!
//! **Events.** Each client connection reports, in order, [`ConnEvent::Established`] (if it
//! got there) and exactly one end: [`ConnEvent::Refused`] (an RST answered its SYN),
//! [`ConnEvent::TimedOut`] (no handshake in [`HANDSHAKE_TIMEOUT`], or data unacknowledged
//! for [`GIVE_UP_TIMEOUT`]), [`ConnEvent::Reset`] (the peer reset it) or
//! [`ConnEvent::Closed`] (the application closed it, or the idle timeout did). The caller
//! drains them with [`ConnTable::events`]; `tests::client` shows each.
//!
//! **Loss recovery** is the server's (`recovery/`): the SYN and every request are kept
//! and probed at round-trip scale, and a connection with no data sample yet waits for the
//! table's handshake round trip, since a server acknowledges a request at once.
//! [`TableStats::recovery`] counts the probes, those that repaired a loss and the spurious
//! ones.
//!
//! **Stamps.** For latency measured at the wire, each client connection keeps the poll
//! clock (`now` of [`ConnTable::poll_egress`]) when a frame carrying new data of it went to
//! the device, and the poll clock (`now` of [`ConnTable::poll_ingress`]) when a frame that
//! brought it new data was read: [`Conn::stamps`](super::Conn::stamps) inside
//! [`ConnTable::serve`], where the reply is parsed, and [`ConnTable::stamps`] outside it.
//! Both are writes to the slot the frame touches anyway.
//!
//! **First SYN to an unknown next hop.** As smoltcp's own Ethernet path does, a frame whose
//! next hop's MAC is unknown goes out as an ARP request or neighbour solicitation in its
//! place. The table lists the connections whose SYN went that way, and when an answer
//! teaches it the MAC, closes each one's socket (still SYN-SENT, nothing of it sent) and
//! connects it again, so the SYN goes out at the next egress rather than at smoltcp's
//! first retransmission a second later
//! (`tests::client::the_first_syn_to_an_unresolved_server_follows_its_arp_reply`). A lost
//! request or answer leaves it to that retransmission, which asks again.
//!
//! [`TableConfig::port`]: super::TableConfig::port
//! [`TableConfig::ephemeral_ports`]: super::TableConfig::ephemeral_ports
//! [`TableStats::recovery`]: super::TableStats::recovery
//! [`HANDSHAKE_TIMEOUT`]: super::HANDSHAKE_TIMEOUT
//! [`GIVE_UP_TIMEOUT`]: super::GIVE_UP_TIMEOUT

use core::fmt;

use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpEndpoint};

use super::lifetime::Lifetime;
use super::{ConnId, ConnTable, Peer, Phase, ports};

/// Why [`ConnTable::connect`] opened nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectError {
    /// The table has no address of the remote address's family.
    NoAddress,
    /// The remote is not a unicast address, or its port is 0.
    Unaddressable,
    /// The local port is 0, a port the table accepts on, or used by another connection
    /// this table opened.
    PortInUse {
        /// The refused port.
        port: u16,
    },
    /// Every port of [`TableConfig::ephemeral_ports`](super::TableConfig::ephemeral_ports)
    /// is in use.
    PortsExhausted,
    /// The connection limit is reached (the table's [`Admission`](crate::Admission)).
    Limit,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConnectError::NoAddress => write!(f, "no local address of the remote's family"),
            ConnectError::Unaddressable => write!(f, "remote is not a unicast address and port"),
            ConnectError::PortInUse { port } => write!(f, "local port {port} is in use"),
            ConnectError::PortsExhausted => write!(f, "every ephemeral port is in use"),
            ConnectError::Limit => write!(f, "connection limit reached"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// What happened to a connection the table opened (see "Events" in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEvent {
    /// The handshake completed: [`ConnTable::serve`] calls the application for it from now.
    Established,
    /// The peer answered the SYN with an RST (nothing listens there, or it is full).
    Refused,
    /// No handshake within [`HANDSHAKE_TIMEOUT`](super::HANDSHAKE_TIMEOUT), or data
    /// unacknowledged for [`GIVE_UP_TIMEOUT`](super::GIVE_UP_TIMEOUT): the table reset it.
    TimedOut,
    /// The peer reset the open connection.
    Reset,
    /// The application closed it ([`Io::close`](super::Io::close) or
    /// [`Io::abort`](super::Io::abort)), or the idle timeout did.
    Closed,
}

/// When a client connection's latest new data crossed the device, as poll clocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamps {
    /// `now` of the [`ConnTable::poll_egress`] that handed the device the latest frame with
    /// new data of this connection (not a re-sent copy); `None` before the first.
    pub sent: Option<Instant>,
    /// `now` of the [`ConnTable::poll_ingress`] that read the latest frame bringing this
    /// connection new data (not a duplicate); `None` before the first.
    pub received: Option<Instant>,
}

/// The local ports of a table's client connections: one bit per port, allocated at the
/// first `connect` (a server table never pays for it).
#[derive(Debug, Default)]
pub(super) struct ClientPorts {
    bits: Vec<u64>,
    /// Ports in use: client connections from `connect` until their slot is released.
    pub(super) in_use: usize,
    /// Where the next search for a free ephemeral port starts.
    next: u16,
}

impl ClientPorts {
    fn contains(&self, port: u16) -> bool {
        self.bits
            .get(usize::from(port / 64))
            .is_some_and(|word| word & (1 << (port % 64)) != 0)
    }

    fn insert(&mut self, port: u16) {
        if self.bits.is_empty() {
            self.bits = vec![0; 1024];
        }
        self.bits[usize::from(port / 64)] |= 1 << (port % 64);
        self.in_use += 1;
    }

    /// Frees `port` (a client connection's slot was released).
    pub(super) fn remove(&mut self, port: u16) {
        if self.contains(port) {
            self.bits[usize::from(port / 64)] &= !(1 << (port % 64));
            self.in_use -= 1;
        }
    }

    /// A free port of `first..=last` not refused by `taken`, searching on from where the
    /// last search ended (so a port just released is the last to come back).
    fn pick(&mut self, first: u16, last: u16, taken: impl Fn(u16) -> bool) -> Option<u16> {
        let span = u32::from(last - first) + 1;
        let start = if (first..=last).contains(&self.next) {
            self.next
        } else {
            first
        };
        (0..span)
            .map(|step| first + ((u32::from(start - first) + step) % span) as u16)
            .find(|&port| !self.contains(port) && !taken(port))
            .inspect(|&port| self.next = if port == last { first } else { port + 1 })
    }
}

impl<S: Default> ConnTable<S> {
    /// Opens a connection to `remote` from this table's address of its family, from
    /// `local_port` or (`None`) a free port of
    /// [`TableConfig::ephemeral_ports`](super::TableConfig::ephemeral_ports), with the
    /// application state `state`. The SYN goes out at the next
    /// [`poll_egress`](Self::poll_egress); [`events`](Self::events) reports the outcome, and
    /// once established [`serve`](Self::serve) calls the application for it as for any
    /// connection.
    ///
    /// # Errors
    /// [`ConnectError`]: no address of that family, a remote that cannot be connected to,
    /// a port in use or none free, or the connection limit.
    pub fn connect(
        &mut self,
        remote: IpEndpoint,
        local_port: Option<u16>,
        state: S,
    ) -> Result<ConnId, ConnectError> {
        let local_addr: IpAddress = match remote.addr {
            IpAddress::Ipv4(_) => self.config.ipv4.map(|cidr| cidr.address().into()),
            IpAddress::Ipv6(_) => self.config.ipv6.map(|cidr| cidr.address().into()),
        }
        .ok_or(ConnectError::NoAddress)?;
        let unicast = match remote.addr {
            IpAddress::Ipv4(ip) => !(ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast()),
            IpAddress::Ipv6(ip) => !(ip.is_unspecified() || ip.is_multicast()),
        };
        if remote.port == 0 || !unicast || self.addrs.is_ours(remote.addr) {
            return Err(ConnectError::Unaddressable);
        }
        let config = self.config;
        let accepts =
            |port: u16| config.accept && (port == config.port || Some(port) == config.extra_port);
        let port = match local_port {
            Some(port) if port == 0 || accepts(port) || self.spare.ports.contains(port) => {
                return Err(ConnectError::PortInUse { port });
            }
            Some(port) => port,
            None => {
                let range = config.ephemeral_ports;
                self.spare
                    .ports
                    .pick(range.first, range.last, accepts)
                    .ok_or(ConnectError::PortsExhausted)?
            }
        };
        if !self.admission.try_acquire() {
            return Err(ConnectError::Limit);
        }
        let bucket_index = self.bucket_of(remote.addr, port);
        let index = self.free_slot(bucket_index);
        let bucket = &mut self.buckets[bucket_index];
        let slot = &mut bucket.slots[index];
        let handle = slot.handle.expect("free_slot gives a slot a socket");
        let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
        // A closed socket, a unicast remote and a local address and port of its family:
        // smoltcp refuses none of these.
        if socket
            .connect(
                self.iface.context(),
                remote,
                IpEndpoint::new(local_addr, port),
            )
            .is_err()
        {
            self.admission.release(1);
            super::release(bucket, index, &mut self.spare);
            return Err(ConnectError::Unaddressable);
        }
        socket.set_timeout(None);
        let mac = if self.addrs.on_link(remote.addr) {
            self.neighbors.lookup(remote.addr)
        } else {
            self.gateways.route(remote.addr).and_then(|(_, mac)| mac)
        };
        let slot = &mut bucket.slots[index];
        slot.peer = Some(Peer {
            addr: remote.addr,
            ports: ports(remote.port, port),
            mac,
        });
        slot.phase = Phase::Connecting;
        slot.client = true;
        slot.session = Some(state);
        slot.generation = slot.generation.wrapping_add(1);
        slot.seen_state = tcp::State::SynSent;
        slot.seen_recv = 0;
        slot.want_write = false;
        slot.stamps = Stamps::default();
        slot.life = Lifetime::start(self.now);
        slot.flight.reset();
        let id = ConnId {
            bucket: bucket_index as u32,
            slot: index as u32,
            generation: slot.generation,
        };
        self.spare.ports.insert(port);
        self.stats.in_use += 1;
        self.stats.opened += 1;
        self.mark_dirty(bucket_index);
        Ok(id)
    }

    /// Takes the events of the connections this table opened, oldest first (see "Events"
    /// in the `client` module docs). They accumulate until taken: a table that opens
    /// connections drains them every round.
    pub fn events(&mut self) -> std::vec::Drain<'_, (ConnId, ConnEvent)> {
        self.events.drain(..)
    }

    /// The stamps of connection `id`, one this table opened, while its slot is still its
    /// own (until the slot is released after its close); `None` otherwise.
    pub fn stamps(&self, id: ConnId) -> Option<Stamps> {
        let slot = self
            .buckets
            .get(id.bucket as usize)?
            .slots
            .get(id.slot as usize)?;
        (slot.client && slot.generation == id.generation && slot.phase != Phase::Free)
            .then_some(slot.stamps)
    }

    /// Lists the connections of `bucket` whose SYN just went out as a request for their
    /// next hop's MAC.
    pub(super) fn note_unresolved(&mut self, bucket_index: usize) {
        for (index, slot) in self.buckets[bucket_index].slots.iter_mut().enumerate() {
            if slot.waiting {
                slot.waiting = false;
                let id = ConnId {
                    bucket: bucket_index as u32,
                    slot: index as u32,
                    generation: slot.generation,
                };
                if !self.unresolved.contains(&id) {
                    self.unresolved.push(id);
                }
            }
        }
    }

    /// A neighbour or gateway was learned: each listed connection whose next hop's MAC is
    /// now known sends its SYN at the next egress, rather than at smoltcp's first
    /// retransmission a second later. smoltcp cannot be told to retransmit, so the socket,
    /// still in SYN-SENT (nothing of it reached the peer), is closed and connected again
    /// to the same endpoints (a new initial sequence number, the same ports).
    pub(super) fn retry_unresolved(&mut self) {
        let mut waiting = std::mem::take(&mut self.unresolved);
        let mut kept = 0;
        for at in 0..waiting.len() {
            let id = waiting[at];
            let (bucket_index, index) = (id.bucket as usize, id.slot as usize);
            let bucket = &mut self.buckets[bucket_index];
            let slot = &mut bucket.slots[index];
            let (Some(handle), Some(peer)) = (slot.handle, slot.peer) else {
                continue;
            };
            if slot.generation != id.generation || slot.phase != Phase::Connecting {
                continue;
            }
            let mac = if self.addrs.on_link(peer.addr) {
                self.neighbors.lookup(peer.addr)
            } else {
                self.gateways.route(peer.addr).and_then(|(_, mac)| mac)
            };
            let Some(mac) = mac else {
                waiting[kept] = id;
                kept += 1;
                continue;
            };
            let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
            let endpoints = (socket.remote_endpoint(), socket.local_endpoint());
            let (tcp::State::SynSent, (Some(remote), Some(local))) = (socket.state(), endpoints)
            else {
                continue;
            };
            socket.close();
            // Closed, with the endpoints it had: smoltcp accepts them again.
            if socket.connect(self.iface.context(), remote, local).is_err() {
                continue;
            }
            slot.flight.reset();
            if let Some(peer) = slot.peer.as_mut() {
                peer.mac = Some(mac);
            }
            self.mark_dirty(bucket_index);
        }
        waiting.truncate(kept);
        waiting.append(&mut self.unresolved);
        self.unresolved = waiting;
    }

    /// Client connections now: from `connect` until their slot is released.
    pub fn client_conns(&self) -> usize {
        self.spare.ports.in_use
    }

    /// Records that the on-link host `ip` is at `mac`, a mapping another table of the
    /// process validated (an ARP or NDP answer that reached that table's queue). For a
    /// client whose tables share one address on several queues: an answer reaches one
    /// queue, and every table needs it before its first SYN, or the SYN turns into a
    /// request whose answer may again go elsewhere. Ignored for an address that is ours
    /// or not on the link.
    pub fn learn_neighbor(&mut self, ip: IpAddress, mac: [u8; 6]) {
        if self.addrs.on_link(ip) && !self.addrs.is_ours(ip) {
            self.neighbors.learn(ip, mac);
        }
    }
}
