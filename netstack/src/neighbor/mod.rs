//! Neighbours on the Ethernet link: ARP and IPv6 neighbour discovery answered and learned
//! here, a bounded cache of address → MAC that only validated frames teach, and the gateway
//! (`--gateway`), whose MAC every worker shares and keeps fresh.
//!
//! The connection table runs smoltcp with `Medium::Ip`: smoltcp sees IP packets only, and
//! the Ethernet header is added by our device adaptor (`view.rs`), which picks the
//! destination MAC of every frame it sends. The next hop is the packet's destination when
//! that is on the link (inside `--ip`'s prefix of its family, or an IPv6 link-local
//! address), else the gateway of its family:
//!
//! ```text
//! IP packet from smoltcp ─▶ destination on the link?
//!   yes: TCP from a connection with a slot? ─yes─▶ the MAC its SYN came from
//!        ├▶ a reply to a received frame (RST, ICMP)? ─▶ that frame's source MAC
//!        ├▶ NeighborCache::lookup(dst) ─hit─▶ that MAC
//!        └▶ miss: the frame becomes a request for dst (ARP, or an NDP solicitation)
//!   no:  TCP from a connection still in its handshake? ─yes─▶ the MAC its SYN came from
//!        ├▶ the gateway's MAC, if resolved (Gateways, shared by the workers) ─▶ that MAC
//!        ├▶ else a connection's SYN MAC, or the received frame's source MAC
//!        └▶ else the frame becomes a request for the gateway
//! ```
//!
//! (A request made in place of a packet drops the packet, as smoltcp's own Ethernet path
//! does; TCP sends it again. An IPv6 packet shorter than a solicitation, 86 bytes, cannot
//! be turned into one: its frame goes out addressed to our own MAC, which every receiver
//! drops, and is counted as unresolved all the same.)
//!
//! Why not smoltcp's own neighbour cache (what the table used before):
//! - It holds 8 hosts with our features, and its larger sizes are linear maps scanned on
//!   every frame sent; with more client hosts than entries, a reply could find its client
//!   evicted between the request and the reply, and then smoltcp silences the socket for up
//!   to a second waiting for an answer that, with several queues, the kernel may deliver
//!   to another worker's queue.
//! - It has to be taught clients' MACs from their TCP frames before smoltcp has validated
//!   them (it answers a SYN from its cache), so one forged frame could redirect replies.
//!
//! Here a connection's frames go to the MAC of the SYN that opened it (that SYN passed
//! smoltcp's checks, and its MAC serves that connection only), so replies never wait for a
//! resolution and no frame can redirect another connection. Off the link, an open
//! connection's frames go to the gateway's MAC, as the host's own routing would send them
//! (with one router that is the MAC the SYN came from anyway), so they follow a router that
//! is replaced or fails over to another MAC; a handshake's go back the way its SYN came, so
//! a connection through a new router completes, and its completion tells the gateway
//! resolver (`gateway.rs`) to look again. The cache covers the frames that belong to no connection
//! and answer no frame. It learns only from frames that prove the mapping:
//! - ARP ([`arp`]): a request for our address, or a reply to our address and MAC, whose
//!   sender is a unicast address of our subnet (not ours), sent from the MAC it claims;
//! - NDP ([`ndp`]): a neighbour solicitation for our address, or an advertisement to our
//!   address, with a valid checksum and hop limit 255 (RFC 4861 §7.1), whose sender (the
//!   advertised target) is a unicast address of our prefix or link-local (not ours), with a
//!   link-layer address option equal to the frame's source MAC;
//! - a completed handshake from a host on the link: the peer acknowledged the SYN-ACK we
//!   sent to that MAC ([`crate::conn`] calls [`NeighborCache::learn`] then).
//!
//! A SYN, a data segment or a frame with a bad checksum teaches nothing.
//!
//! **Bounds and eviction.** At most [`NEIGHBOR_CAPACITY`] hosts (a rack's worth), in a
//! hashbrown map from address to entry plus a fixed array of entries. A full cache evicts
//! by CLOCK (second chance): the hand sweeps the entries, clearing the "used" bit of each
//! entry looked up or learned since the hand last passed and evicting the first entry
//! whose bit is clear, so hosts in use stay and the one idle longest in the hand's order
//! goes. Learning and lookups are O(1), eviction amortised O(1). Entries do not expire by
//! time; a later validated frame replaces a changed MAC. The cache is per worker, about 60
//! bytes per host (a 24-byte entry, and its address and index in the map).
//!
//! **The gateway** ([`gateway`]). A host one router away never sends ARP or NDP that
//! reaches us, and the router's own ARP may be delivered to any worker's queue; so the
//! gateway's MAC is not left to each worker's cache. One [`Gateways`] value, shared by the
//! workers like the connection limit, holds each family's gateway MAC. memspin resolves it
//! itself at start (an ARP request, or a solicitation to the gateway's solicited-node
//! group), whichever worker's queue the answer arrives on, and refreshes it every
//! [`GATEWAY_REACHABLE`] with a bounded retry: see `gateway.rs`.

pub mod arp;
pub mod gateway;
pub mod ndp;

use hashbrown::HashMap;
use smoltcp::wire::{IpAddress, Ipv4Cidr, Ipv6Address, Ipv6Cidr};

pub use arp::{ARP_FRAME_LEN, ArpIgnored, ArpInput, ArpOut, arp_input, emit_arp};
pub use gateway::{
    GATEWAY_PROBE_INTERVAL, GATEWAY_PROBES, GATEWAY_REACHABLE, GATEWAY_RETRY_PAUSE, Gateways, Probe,
};
pub use ndp::{NDP_FRAME_LEN, NdpIgnored, NdpInput, NdpOut, emit_ndp, ndp_input};

/// Most hosts a [`NeighborCache`] holds.
pub const NEIGHBOR_CAPACITY: usize = 1024;

/// Length of an Ethernet header.
pub const ETHERNET_HEADER_LEN: usize = 14;

/// The broadcast MAC.
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;

/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// The server's own addresses on the link: its MAC, and an IPv4 and/or an IPv6 address
/// with their prefixes (`--ip`, at most one of each family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkAddrs {
    /// The server's MAC.
    pub mac: [u8; 6],
    /// Its IPv4 address and prefix, if it serves IPv4.
    pub ipv4: Option<Ipv4Cidr>,
    /// Its IPv6 address and prefix, if it serves IPv6.
    pub ipv6: Option<Ipv6Cidr>,
}

impl LinkAddrs {
    /// True if `addr` is one of our addresses.
    pub fn is_ours(&self, addr: IpAddress) -> bool {
        match addr {
            IpAddress::Ipv4(a) => self.ipv4.is_some_and(|c| c.address() == a),
            IpAddress::Ipv6(a) => self.ipv6.is_some_and(|c| c.address() == a),
        }
    }

    /// True if `addr` is reached directly on the link: inside our prefix of its family, or
    /// an IPv6 link-local address (when we serve IPv6).
    pub fn on_link(&self, addr: IpAddress) -> bool {
        match addr {
            IpAddress::Ipv4(a) => self.ipv4.is_some_and(|c| c.contains_addr(&a)),
            IpAddress::Ipv6(a) => self
                .ipv6
                .is_some_and(|c| c.contains_addr(&a) || is_link_local(a)),
        }
    }

    /// True for a frame addressed to us: our MAC, broadcast, or (serving IPv6) the
    /// multicast MAC of our solicited-node group, where neighbour solicitations arrive.
    pub fn takes_frames_to(&self, mac: [u8; 6]) -> bool {
        mac == self.mac
            || mac == BROADCAST_MAC
            || self
                .ipv6
                .is_some_and(|c| mac == ipv6_multicast_mac(solicited_node(c.address())))
    }
}

/// True for an IPv6 link-local unicast address (fe80::/10).
pub fn is_link_local(addr: Ipv6Address) -> bool {
    addr.is_unicast_link_local()
}

/// The solicited-node multicast group of `addr` (RFC 4291 §2.7.1): ff02::1:ff00:0/104
/// with the address's low 24 bits.
pub fn solicited_node(addr: Ipv6Address) -> Ipv6Address {
    let o = addr.octets();
    Ipv6Address::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15],
    ])
}

/// The Ethernet MAC of IPv6 multicast group `group` (RFC 2464 §7): 33:33 and its low 32 bits.
pub fn ipv6_multicast_mac(group: Ipv6Address) -> [u8; 6] {
    let o = group.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// A bounded IP address → MAC cache with CLOCK eviction.
#[derive(Debug)]
pub struct NeighborCache {
    /// Address → index into `entries`.
    index: HashMap<IpAddress, u32>,
    entries: Vec<Entry>,
    /// Next entry the CLOCK hand looks at.
    hand: usize,
    capacity: usize,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    ip: IpAddress,
    mac: [u8; 6],
    /// Looked up or learned since the hand last passed.
    used: bool,
}

/// What [`NeighborCache::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// A new host, in a free entry.
    Inserted,
    /// A known host: its MAC (possibly the same) was written again.
    Updated,
    /// A new host, in the entry of this evicted one.
    Evicted(IpAddress),
}

impl NeighborCache {
    /// An empty cache of at most `capacity` hosts (at least one).
    pub fn new(capacity: usize) -> NeighborCache {
        let capacity = capacity.max(1);
        NeighborCache {
            index: HashMap::with_capacity(capacity),
            entries: Vec::with_capacity(capacity),
            hand: 0,
            capacity,
        }
    }

    /// Hosts held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no host is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The MAC of `ip`, if known; marks the entry used.
    pub fn lookup(&mut self, ip: impl Into<IpAddress>) -> Option<[u8; 6]> {
        let &at = self.index.get(&ip.into())?;
        let entry = &mut self.entries[at as usize];
        entry.used = true;
        Some(entry.mac)
    }

    /// The MAC of `ip`, if known, without marking the entry (for reports and tests).
    pub fn peek(&self, ip: impl Into<IpAddress>) -> Option<[u8; 6]> {
        self.index
            .get(&ip.into())
            .map(|&at| self.entries[at as usize].mac)
    }

    /// Records that `ip` is at `mac`. Call only for a validated mapping (see the module
    /// header); a full cache evicts by CLOCK.
    pub fn learn(&mut self, ip: impl Into<IpAddress>, mac: [u8; 6]) -> Learned {
        let ip = ip.into();
        if let Some(&at) = self.index.get(&ip) {
            let entry = &mut self.entries[at as usize];
            entry.mac = mac;
            entry.used = true;
            return Learned::Updated;
        }
        let fresh = Entry {
            ip,
            mac,
            used: true,
        };
        if self.entries.len() < self.capacity {
            self.index.insert(ip, self.entries.len() as u32);
            self.entries.push(fresh);
            return Learned::Inserted;
        }
        // Every entry is examined at most twice: the first pass clears the bits it finds set.
        loop {
            let at = self.hand;
            self.hand = (self.hand + 1) % self.capacity;
            let entry = &mut self.entries[at];
            if entry.used {
                entry.used = false;
                continue;
            }
            let evicted = entry.ip;
            *entry = fresh;
            self.index.remove(&evicted);
            self.index.insert(ip, at as u32);
            return Learned::Evicted(evicted);
        }
    }
}

/// Writes an Ethernet II header from `own_mac` to `to_mac` with `ethertype`.
///
/// # Panics
/// If `frame` is shorter than [`ETHERNET_HEADER_LEN`].
pub fn emit_ethernet(frame: &mut [u8], own_mac: [u8; 6], to_mac: [u8; 6], ethertype: u16) {
    frame[0..6].copy_from_slice(&to_mac);
    frame[6..12].copy_from_slice(&own_mac);
    frame[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

/// Writes an Ethernet II header for an IPv4 packet from `own_mac` to `to_mac`.
///
/// # Panics
/// If `frame` is shorter than [`ETHERNET_HEADER_LEN`].
pub fn emit_ethernet_ipv4(frame: &mut [u8], own_mac: [u8; 6], to_mac: [u8; 6]) {
    emit_ethernet(frame, own_mac, to_mac, ETHERTYPE_IPV4);
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::Ipv4Address;

    const PEER_MAC: [u8; 6] = [0x26, 0x22, 0x9e, 0x82, 0xff, 0xda];

    fn ip(last: u8) -> Ipv4Address {
        Ipv4Address::new(10, 77, 0, last)
    }

    fn v6(text: &str) -> Ipv6Address {
        text.parse().unwrap()
    }

    #[test]
    fn link_addresses_and_multicast_groups() {
        let addrs = LinkAddrs {
            mac: [0x02, 0, 0, 0, 0, 2],
            ipv4: Some(Ipv4Cidr::new(ip(2), 24)),
            ipv6: Some(Ipv6Cidr::new(v6("fd77::2"), 64)),
        };
        assert!(addrs.is_ours(ip(2).into()));
        assert!(addrs.is_ours(v6("fd77::2").into()));
        assert!(!addrs.is_ours(ip(3).into()));
        assert!(addrs.on_link(ip(9).into()));
        assert!(!addrs.on_link(Ipv4Address::new(10, 79, 0, 2).into()));
        assert!(addrs.on_link(v6("fd77::ab:cd").into()));
        assert!(addrs.on_link(v6("fe80::1").into()), "link-local");
        assert!(!addrs.on_link(v6("fd79::2").into()));
        // RFC 4291 §2.7.1's example shape: the low 24 bits after ff02::1:ff.
        assert_eq!(
            solicited_node(v6("fd77::12:3456:789a")),
            v6("ff02::1:ff56:789a")
        );
        assert_eq!(
            ipv6_multicast_mac(v6("ff02::1:ff56:789a")),
            [0x33, 0x33, 0xff, 0x56, 0x78, 0x9a]
        );
        assert!(addrs.takes_frames_to([0x02, 0, 0, 0, 0, 2]));
        assert!(addrs.takes_frames_to(BROADCAST_MAC));
        assert!(addrs.takes_frames_to([0x33, 0x33, 0xff, 0, 0, 2]));
        assert!(!addrs.takes_frames_to([0x33, 0x33, 0xff, 0, 0, 3]));
        assert!(
            !addrs.takes_frames_to([0x33, 0x33, 0, 0, 0, 1]),
            "all-nodes"
        );
        let v4_only = LinkAddrs {
            ipv6: None,
            ..addrs
        };
        assert!(!v4_only.takes_frames_to([0x33, 0x33, 0xff, 0, 0, 2]));
        assert!(!v4_only.on_link(v6("fe80::1").into()));
        assert!(!v4_only.is_ours(v6("fd77::2").into()));
    }

    #[test]
    fn an_entry_is_24_bytes() {
        assert_eq!(size_of::<Entry>(), 24);
        assert_eq!(size_of::<(IpAddress, u32)>(), 24);
    }

    #[test]
    fn both_families_share_the_cache() {
        let mut cache = NeighborCache::new(4);
        assert_eq!(cache.learn(ip(1), PEER_MAC), Learned::Inserted);
        assert_eq!(cache.learn(v6("fd77::1"), [2; 6]), Learned::Inserted);
        assert_eq!(cache.lookup(ip(1)), Some(PEER_MAC));
        assert_eq!(cache.lookup(v6("fd77::1")), Some([2; 6]));
        assert_eq!(cache.peek(v6("::ffff:10.77.0.1")), None, "no family mixing");
    }

    #[test]
    fn a_rack_of_hosts_fits_and_lookups_hit() {
        let mut cache = NeighborCache::new(NEIGHBOR_CAPACITY);
        let hosts: Vec<Ipv4Address> = (0..500u32)
            .map(|i| Ipv4Address::from_bits(0x0a4d_0000 + i + 10))
            .collect();
        for (i, &host) in hosts.iter().enumerate() {
            assert_eq!(
                cache.learn(host, [2, 0, 0, 0, (i >> 8) as u8, i as u8]),
                Learned::Inserted
            );
        }
        for (i, &host) in hosts.iter().enumerate() {
            assert_eq!(
                cache.lookup(host),
                Some([2, 0, 0, 0, (i >> 8) as u8, i as u8])
            );
        }
        assert_eq!(cache.len(), 500);
        assert_eq!(cache.learn(hosts[3], PEER_MAC), Learned::Updated);
        assert_eq!(cache.peek(hosts[3]), Some(PEER_MAC));
        assert_eq!(cache.lookup(Ipv4Address::new(10, 77, 9, 9)), None);
    }

    /// CLOCK order: with the cache full and every entry used, the hand clears every bit
    /// and evicts the entry it started from; entries used since it passed survive.
    #[test]
    fn a_full_cache_evicts_by_clock() {
        let mut cache = NeighborCache::new(4);
        for last in 1..=4 {
            cache.learn(ip(last), [2, 0, 0, 0, 0, last]);
        }
        // All four were just learned (used): the hand clears them all and evicts .1.
        assert_eq!(cache.learn(ip(5), PEER_MAC), Learned::Evicted(ip(1).into()));
        // Hand at .2 (bit now clear): .2 goes next unless used first.
        assert!(cache.lookup(ip(2)).is_some());
        assert_eq!(cache.learn(ip(6), PEER_MAC), Learned::Evicted(ip(3).into()));
        // .2 survived with its bit cleared on the way; .4 is next and unused.
        assert_eq!(cache.learn(ip(7), PEER_MAC), Learned::Evicted(ip(4).into()));
        assert_eq!(cache.len(), 4);
        for gone in [1, 3, 4] {
            assert_eq!(cache.peek(ip(gone)), None);
        }
        for kept in [2, 5, 6, 7] {
            assert!(cache.peek(ip(kept)).is_some(), "{kept}");
        }
        // A host in constant use survives any number of newcomers.
        for newcomer in 100..200 {
            assert!(cache.lookup(ip(2)).is_some());
            cache.learn(ip(newcomer), PEER_MAC);
            assert!(cache.peek(ip(2)).is_some(), "evicted by {newcomer}");
        }
        assert_eq!(cache.len(), 4);
    }
}
