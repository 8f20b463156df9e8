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
//! poll_ingress ─ frame ─▶ ARP/NDP answered here, or TCP to us ─▶ its bucket ─▶ smoltcp
//! serve        ─ the application, per connection with new data, freed space or a close
//! poll_egress  ─ dirty and due buckets ─▶ smoltcp ─▶ Ethernet frames; copies sent again
//! ```
//!
//! The table is split by stage, as smoltcp splits its interface; one mechanism each:
//!
//! - `config.rs`: [`TableConfig`] and its checks, [`TableError`], [`TableStats`], [`ConnId`].
//! - `ingress.rs`: demultiplexing (Ethernet, ARP, NDP, the 4-tuple's bucket), look-ahead.
//! - `accept.rs`: passive opens: arming a listener per SYN, the SYN backlog, admission.
//! - `client.rs`: active opens ([`ConnTable::connect`]): client mode, local ports, events
//!   ([`ConnEvent`]) and wire stamps ([`Stamps`]).
//! - `io.rs`: the application's turn ([`ConnTable::serve`]), [`Conn`] and [`Io`].
//! - `egress.rs`: dirty buckets, bucket timers, framing, gateway probes.
//! - `recovery/`: loss recovery at round-trip scale (policy, ingress hook, resend loop).
//! - `lifetime.rs`: each connection's clocks (handshake, give-up, idle, close).
//! - `backlog.rs`: the SYN backlog's order (oldest first, unlinked in O(1)).
//! - this file: the buckets and their slots, construction, the state refresh after
//!   ingress and egress, expiry, and releasing a slot.
//!
//! **Client mode.** A table built with [`TableConfig::client`] accepts nothing and opens
//! connections itself, one table per load-generator thread on its own queue; any table
//! may also open connections beside those it accepts. An opened connection lives in the
//! same buckets, with the same demultiplexing (keyed by the peer's address and our port),
//! clocks and loss recovery as an accepted one. A server table that opens none does no
//! more per segment than test one flag of the slot each sent frame already touches
//! (`client.rs`).
//!
//! What this file keeps:
//!
//! - **Slots and phases.** A slot is a connection's place in its bucket: its socket, its
//!   peer (address, both ports, MAC), its `Phase` (free, handshake, connecting, open,
//!   done), its clocks, its application state `S` while open (or opening), and its loss
//!   recovery. The refresh
//!   (`ConnTable::refresh_bucket`) follows socket states into phases after every ingress
//!   into the bucket and every egress pass, and queues connections with work for `serve`.
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
//!   accepting a connection allocates nothing (except what `S::default()` allocates;
//!   `tests/alloc_free.rs` shows it). Sockets are created on demand, so at most
//!   `conn_limit + syn_backlog + 1` exist.
//! - **Neighbours** (`neighbor/`, `view.rs`). Every frame of a connection on the link goes
//!   to the MAC its SYN came from, so a reply never waits for address resolution, however
//!   many client hosts there are.
//! - **Sockets.** Nagle off, delayed ACK off, keep-alive off, smoltcp's own `timeout` off
//!   (the table's clocks replace it).
//!
//! Memory is about `(conn_limit + syn_backlog) × (rx_buffer_bytes + tx_buffer_bytes)` at
//! peak, plus about 100 bytes per bucket, 60 per neighbour (`neighbor/mod.rs`) and 1 KiB
//! per slot (its state, loss recovery's included, with room for one small reply's copy),
//! plus the copies loss recovery keeps on the heap (a connection's unacknowledged frames
//! beyond one small reply: at most its send buffer again).

mod accept;
mod backlog;
mod client;
mod config;
mod egress;
mod ingress;
mod io;
mod lifetime;
mod recovery;

use core::fmt;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium};
use smoltcp::socket::{Socket, tcp};
use smoltcp::time::Instant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr};

pub use crate::admission::Admission;
pub use crate::neighbor::Gateways;
pub use client::{ConnEvent, ConnectError, Stamps};
pub use config::{
    BUCKET_LOAD, ConnId, DEFAULT_CONN_LIMIT, DEFAULT_RX_BUFFER_BYTES, DEFAULT_SYN_BACKLOG,
    DEFAULT_TX_BUFFER_BYTES, MAX_BUFFER_BYTES, MAX_CONN_LIMIT, MIN_BUFFER_BYTES, PortRange,
    TableConfig, TableError, TableStats,
};
pub use io::{Conn, Io};
pub use lifetime::{CLOSE_TIMEOUT, GIVE_UP_TIMEOUT, HANDSHAKE_TIMEOUT};
pub use recovery::{
    ACK_DELAY_SAMPLES, DEFAULT_RTO_MIN, MAX_ACK_DELAY, MAX_HANDSHAKE_PROBES, MAX_PROBES,
    MAX_RTO_MIN, MIN_RTO_MIN, RecoveryCounter, RecoveryStats,
};

use crate::neighbor::{ETHERNET_HEADER_LEN, LinkAddrs, NEIGHBOR_CAPACITY, NeighborCache};
use crate::timer::{DeadlineHeap, TimerSlot, TimerSlots};
use crate::view::{CapsOnly, PeerMac};
use accept::HandshakeEnd;
use backlog::{Backlog, BacklogSlots, Links, SlotAddr, split_addr};
use client::ClientPorts;
use lifetime::{Expiry, Lifetime, Stage};
use recovery::{Flight, Recovery};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Socket (if any) is closed, or armed for a SYN being processed.
    Free,
    /// SYN-RECEIVED: in the SYN backlog, no application state yet.
    Handshake,
    /// SYN-SENT: a connection this table opened (`client.rs`), with its application
    /// state, counted against the limit.
    Connecting,
    /// Established (or later, until it closes): has an application state.
    Open,
    /// The application (or a timeout) closed it and the close is in progress (FIN-WAIT,
    /// CLOSING, LAST-ACK), or the peer reset it: still counts against the limit.
    Done,
}

/// The peer of a connection, from its SYN (or from [`ConnTable::connect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Peer {
    addr: IpAddress,
    /// The peer's port and ours, as one key ([`ports`]).
    ports: u32,
    /// Where every frame of this connection goes: the MAC its SYN came from; for a
    /// connection this table opened, the next hop's once known.
    mac: Option<[u8; 6]>,
}

/// The key of a connection's two ports: the peer's in the high half, ours in the low. A
/// received segment's source and destination ports read as one big-endian word are this
/// key; a sent one's are it with the halves swapped.
#[inline]
fn ports(remote: u16, local: u16) -> u32 {
    (u32::from(remote) << 16) | u32::from(local)
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
    /// A connection this table opened ([`ConnTable::connect`]): it reports its events and
    /// keeps its stamps.
    client: bool,
    /// A connection this table opened whose SYN went out as a request for its next hop's
    /// MAC: it sends the SYN again once the MAC is learned (`client.rs`).
    waiting: bool,
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
    /// When its latest new data went to the device and came from it (client slots).
    stamps: Stamps,
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
            client: false,
            waiting: false,
            stamps: Stamps::default(),
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
            Phase::Free | Phase::Handshake | Phase::Connecting => Stage::Handshake,
            Phase::Open => Stage::Open,
            Phase::Done => Stage::Closing,
        }
    }
}

/// The connection with the peer `addr` and the two ports `ports` ([`ports`]) among
/// `slots`: its slot, MAC and whether its passive handshake is in progress.
fn find_peer<S>(slots: &[Slot<S>], addr: IpAddress, ports: u32) -> Option<PeerMac> {
    slots.iter().enumerate().find_map(|(index, slot)| {
        slot.peer
            .filter(|peer| peer.addr == addr && peer.ports == ports)
            .map(|peer| PeerMac {
                slot: index,
                mac: peer.mac,
                // Armed for the SYN, or in the SYN backlog.
                handshake: matches!(slot.phase, Phase::Free | Phase::Handshake),
            })
    })
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

/// TCP connections accepted on one or two ports or opened by the table itself
/// ([`ConnTable::connect`]), one application state `S` per open connection.
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
    /// Closed sockets for the next connection in any bucket, and client ports in use.
    spare: Spare,
    /// Events of the connections this table opened, until [`ConnTable::events`] takes them.
    events: Vec<(ConnId, ConnEvent)>,
    /// Connections this table opened whose SYN waits for its next hop's MAC.
    unresolved: Vec<ConnId>,
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
            spare: Spare::default(),
            events: Vec::new(),
            unresolved: Vec::new(),
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

    /// A free slot in `bucket` holding a closed socket: one from the spare pool, or a new one.
    fn free_slot(&mut self, bucket_index: usize) -> usize {
        let socket = match self.spare.sockets.pop() {
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
            events,
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
            let id = |slot: &Slot<S>| ConnId {
                bucket: bucket_index as u32,
                slot: index as u32,
                generation: slot.generation,
            };
            match slot.phase {
                Phase::Free => continue,
                Phase::Handshake => {}
                Phase::Connecting => match sockets.get::<tcp::Socket>(handle).state() {
                    tcp::State::SynSent | tcp::State::SynReceived => {}
                    tcp::State::Closed | tcp::State::TimeWait | tcp::State::Listen => {
                        // An RST answered the SYN.
                        slot.session = None;
                        slot.phase = Phase::Done;
                        slot.life.next_stage(now);
                        stats.connect_failed += 1;
                        events.push((id(slot), ConnEvent::Refused));
                    }
                    state => {
                        slot.phase = Phase::Open;
                        slot.seen_state = state;
                        slot.life = Lifetime::start(now);
                        stats.connected += 1;
                        stats.active += 1;
                        events.push((id(slot), ConnEvent::Established));
                        // The application's first call: it may send at once.
                        if !slot.queued {
                            slot.queued = true;
                            ready.push((bucket_index as u32, index as u32));
                        }
                    }
                },
                Phase::Open => {
                    let socket = sockets.get_mut::<tcp::Socket>(handle);
                    let state = socket.state();
                    if matches!(state, tcp::State::Closed | tcp::State::TimeWait) {
                        slot.session = None;
                        slot.phase = Phase::Done;
                        slot.life.next_stage(now);
                        stats.closed += 1;
                        stats.active -= 1;
                        if slot.client {
                            // Only our FIN leads to TIME-WAIT, and the application's close
                            // leaves the open phase itself: closed here is the peer's RST.
                            events.push((id(slot), ConnEvent::Reset));
                        }
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
            let connecting = slot.phase == Phase::Connecting;
            if why == Expiry::Handshake && !connecting {
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
                if connecting {
                    self.stats.connect_failed += 1;
                } else {
                    self.stats.timed_out += 1;
                }
            }
            let slot = &mut bucket.slots[index];
            if matches!(slot.phase, Phase::Open | Phase::Connecting) {
                if slot.phase == Phase::Open {
                    self.stats.closed += 1;
                    self.stats.active -= 1;
                }
                if slot.client {
                    let id = ConnId {
                        bucket: bucket_index as u32,
                        slot: index as u32,
                        generation: slot.generation,
                    };
                    let event = if why == Expiry::Idle {
                        ConnEvent::Closed
                    } else {
                        ConnEvent::TimedOut
                    };
                    self.events.push((id, event));
                }
                slot.session = None;
                slot.phase = Phase::Done;
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

/// What released slots leave behind for the next connections.
#[derive(Default)]
struct Spare {
    /// Closed sockets with their buffers.
    sockets: Vec<Socket<'static>>,
    /// The local ports of the connections this table opened (`client.rs`).
    ports: ClientPorts,
}

/// Frees slot `index` of `bucket`, moves its (closed) socket to the spare pool and, for a
/// connection the table opened, frees its local port.
fn release<S>(bucket: &mut Bucket<S>, index: usize, spare: &mut Spare) {
    let slot = &mut bucket.slots[index];
    if slot.client {
        if let Some(peer) = slot.peer {
            spare.ports.remove(peer.ports as u16);
        }
        slot.client = false;
        slot.waiting = false;
    }
    slot.phase = Phase::Free;
    slot.session = None;
    slot.peer = None;
    slot.links = Links::default();
    slot.flight.reset();
    if let Some(handle) = slot.handle.take() {
        spare.sockets.push(bucket.sockets.remove(handle));
    }
}

#[cfg(test)]
mod tests;
