//! Neighbours on the Ethernet link: ARP answered and learned here, and a bounded cache of
//! IPv4 → MAC that only validated frames teach.
//!
//! The connection table runs smoltcp with `Medium::Ip`: smoltcp sees IP packets only, and
//! the Ethernet header is added by our device adaptor (`view.rs`), which picks the
//! destination MAC of every frame it sends:
//!
//! ```text
//! IP packet from smoltcp ─▶ TCP from a connection with a slot? ─yes─▶ the MAC its SYN came from
//!                          │ no
//!                          ├▶ a reply to a received frame (RST, ICMP)? ─▶ that frame's source MAC
//!                          ├▶ NeighborCache::lookup(dst) ─hit─▶ that MAC
//!                          └▶ miss: the frame becomes an ARP request for dst (IP packet dropped)
//! ```
//!
//! Why not smoltcp's own ARP cache (what the table used before):
//! - It holds 8 hosts with our features, and its larger sizes are linear maps scanned on
//!   every frame sent; with more client hosts than entries, a reply could find its client
//!   evicted between the request and the reply, and then smoltcp silences the socket for up
//!   to a second waiting for an ARP answer that, with several queues, the kernel may deliver
//!   to another worker's queue.
//! - It has to be taught clients' MACs from their TCP frames before smoltcp has validated
//!   them (it answers a SYN from its cache), so one forged frame could redirect replies.
//!
//! Here a connection's frames go to the MAC of the SYN that opened it (that SYN passed
//! smoltcp's checks, and its MAC serves that connection only), so replies never wait for a
//! resolution and no frame can redirect another connection. The cache covers the frames
//! that belong to no connection and answer no frame (none on the TCP path today; a gateway
//! or IPv6 neighbours would use it). It learns only from frames that prove the mapping:
//! - an ARP request for our address, or an ARP reply to our address and MAC, whose sender
//!   is a unicast address of our subnet (not ours), sent from the MAC it claims;
//! - a completed handshake: the peer acknowledged the SYN-ACK we sent to that MAC
//!   ([`crate::conn`] calls [`NeighborCache::learn`] then).
//!
//! A SYN, a data segment or a frame with a bad checksum teaches nothing.
//!
//! **Bounds and eviction.** At most [`NEIGHBOR_CAPACITY`] hosts (a rack's worth), in a
//! hashbrown map from address to entry plus a fixed array of entries. A full cache evicts
//! by CLOCK (second chance): the hand sweeps the entries, clearing the "used" bit of each
//! entry looked up or learned since the hand last passed and evicting the first entry
//! whose bit is clear, so hosts in use stay and the one idle longest in the hand's order
//! goes. Learning and lookups are O(1), eviction amortised O(1). Entries do not expire by
//! time; a later validated frame replaces a changed MAC.

use hashbrown::HashMap;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    Ipv4Address, Ipv4Cidr,
};

/// Most hosts a [`NeighborCache`] holds.
pub const NEIGHBOR_CAPACITY: usize = 1024;

/// Length of an Ethernet header.
pub const ETHERNET_HEADER_LEN: usize = 14;

/// Length of an Ethernet frame carrying an IPv4-over-Ethernet ARP packet.
pub const ARP_FRAME_LEN: usize = 42;

/// The broadcast MAC.
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];

/// A bounded IPv4 → MAC cache with CLOCK eviction.
#[derive(Debug)]
pub struct NeighborCache {
    /// Address → index into `entries`.
    index: HashMap<Ipv4Address, u32>,
    entries: Vec<Entry>,
    /// Next entry the CLOCK hand looks at.
    hand: usize,
    capacity: usize,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    ip: Ipv4Address,
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
    Evicted(Ipv4Address),
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
    pub fn lookup(&mut self, ip: Ipv4Address) -> Option<[u8; 6]> {
        let &at = self.index.get(&ip)?;
        let entry = &mut self.entries[at as usize];
        entry.used = true;
        Some(entry.mac)
    }

    /// The MAC of `ip`, if known, without marking the entry (for reports and tests).
    pub fn peek(&self, ip: Ipv4Address) -> Option<[u8; 6]> {
        self.index.get(&ip).map(|&at| self.entries[at as usize].mac)
    }

    /// Records that `ip` is at `mac`. Call only for a validated mapping (see the module
    /// header); a full cache evicts by CLOCK.
    pub fn learn(&mut self, ip: Ipv4Address, mac: [u8; 6]) -> Learned {
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

/// Why an ARP frame was ignored (not an error: other hosts' ARP traffic lands here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpIgnored {
    /// Not a well-formed Ethernet/IPv4 ARP packet.
    Malformed,
    /// A request for another address, or a reply not to us.
    NotForUs,
    /// The sender's MAC is not unicast, or differs from the frame's source.
    BadSenderMac,
    /// The sender's address is not a unicast host of our subnet, or is ours.
    BadSenderIp,
}

/// What an ARP frame addressed to us asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpInput {
    /// The validated sender: learn it.
    pub sender_ip: Ipv4Address,
    /// Its MAC.
    pub sender_mac: [u8; 6],
    /// A request for our address: answer it.
    pub is_request: bool,
}

/// Reads an ARP frame for the host `own_mac`/`own` and validates its sender.
///
/// # Errors
/// [`ArpIgnored`]: nothing to answer or learn.
pub fn arp_input(frame: &[u8], own_mac: [u8; 6], own: Ipv4Cidr) -> Result<ArpInput, ArpIgnored> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| ArpIgnored::Malformed)?;
    if eth.ethertype() != EthernetProtocol::Arp {
        return Err(ArpIgnored::Malformed);
    }
    let packet = ArpPacket::new_checked(eth.payload()).map_err(|_| ArpIgnored::Malformed)?;
    let Ok(ArpRepr::EthernetIpv4 {
        operation,
        source_hardware_addr,
        source_protocol_addr,
        target_hardware_addr,
        target_protocol_addr,
    }) = ArpRepr::parse(&packet)
    else {
        return Err(ArpIgnored::Malformed);
    };
    let ours = own.address();
    let is_request = match operation {
        ArpOperation::Request if target_protocol_addr == ours => true,
        ArpOperation::Reply
            if target_protocol_addr == ours && target_hardware_addr.0 == own_mac =>
        {
            false
        }
        _ => return Err(ArpIgnored::NotForUs),
    };
    if !source_hardware_addr.is_unicast() || source_hardware_addr != eth.src_addr() {
        return Err(ArpIgnored::BadSenderMac);
    }
    let sender = source_protocol_addr;
    if !own.contains_addr(&sender)
        || sender == ours
        || sender.is_unspecified()
        || sender.is_multicast()
        || sender.is_broadcast()
        || own.broadcast() == Some(sender)
        || own.network().address() == sender && own.prefix_len() < 31
    {
        return Err(ArpIgnored::BadSenderIp);
    }
    Ok(ArpInput {
        sender_ip: sender,
        sender_mac: source_hardware_addr.0,
        is_request,
    })
}

/// Writes, into the first [`ARP_FRAME_LEN`] bytes of `frame`, an ARP frame from us:
/// a reply telling `to_ip` at `to_mac` that `own_ip` is at `own_mac`, or (`to_mac`
/// broadcast) a request asking who has `to_ip`. Zeroes the rest of `frame`.
///
/// # Panics
/// If `frame` is shorter than [`ARP_FRAME_LEN`].
pub fn emit_arp(
    frame: &mut [u8],
    own_mac: [u8; 6],
    own_ip: Ipv4Address,
    to_mac: [u8; 6],
    to_ip: Ipv4Address,
) {
    let request = to_mac == BROADCAST_MAC;
    let (head, tail) = frame.split_at_mut(ARP_FRAME_LEN);
    tail.fill(0);
    let mut eth = EthernetFrame::new_unchecked(head);
    eth.set_dst_addr(EthernetAddress(to_mac));
    eth.set_src_addr(EthernetAddress(own_mac));
    eth.set_ethertype(EthernetProtocol::Arp);
    let repr = ArpRepr::EthernetIpv4 {
        operation: if request {
            ArpOperation::Request
        } else {
            ArpOperation::Reply
        },
        source_hardware_addr: EthernetAddress(own_mac),
        source_protocol_addr: own_ip,
        target_hardware_addr: EthernetAddress(if request { [0; 6] } else { to_mac }),
        target_protocol_addr: to_ip,
    };
    repr.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
}

/// Writes an Ethernet II header for an IPv4 packet from `own_mac` to `to_mac`.
///
/// # Panics
/// If `frame` is shorter than [`ETHERNET_HEADER_LEN`].
pub fn emit_ethernet_ipv4(frame: &mut [u8], own_mac: [u8; 6], to_mac: [u8; 6]) {
    frame[0..6].copy_from_slice(&to_mac);
    frame[6..12].copy_from_slice(&own_mac);
    frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x02];
    const PEER_MAC: [u8; 6] = [0x26, 0x22, 0x9e, 0x82, 0xff, 0xda];

    fn own() -> Ipv4Cidr {
        Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 2), 24)
    }

    fn ip(last: u8) -> Ipv4Address {
        Ipv4Address::new(10, 77, 0, last)
    }

    /// The captured request "who has 10.77.0.2, tell 10.77.0.1" (see `demux`).
    fn request_from(sender_ip: Ipv4Address, sender_mac: [u8; 6]) -> Vec<u8> {
        let mut frame = vec![0u8; ARP_FRAME_LEN];
        frame[0..6].copy_from_slice(&BROADCAST_MAC);
        frame[6..12].copy_from_slice(&sender_mac);
        frame[12..14].copy_from_slice(&[0x08, 0x06]);
        frame[14..22].copy_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
        frame[22..28].copy_from_slice(&sender_mac);
        frame[28..32].copy_from_slice(&sender_ip.octets());
        frame[38..42].copy_from_slice(&own().address().octets());
        frame
    }

    #[test]
    fn the_captured_request_is_answered_and_its_sender_learned() {
        let frame = request_from(ip(1), PEER_MAC);
        assert_eq!(frame[..], crate::demux::tests::ARP_REQUEST[..]);
        let input = arp_input(&frame, OWN_MAC, own()).unwrap();
        assert_eq!(
            input,
            ArpInput {
                sender_ip: ip(1),
                sender_mac: PEER_MAC,
                is_request: true
            }
        );
        let mut reply = [0xa5u8; 60];
        emit_arp(&mut reply, OWN_MAC, own().address(), PEER_MAC, ip(1));
        assert!(
            reply[ARP_FRAME_LEN..].iter().all(|&b| b == 0),
            "padding zeroed"
        );
        // Our reply, read back as the peer would.
        let eth = EthernetFrame::new_checked(&reply[..]).unwrap();
        assert_eq!(eth.dst_addr().0, PEER_MAC);
        let repr = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(
            repr,
            ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: EthernetAddress(OWN_MAC),
                source_protocol_addr: own().address(),
                target_hardware_addr: EthernetAddress(PEER_MAC),
                target_protocol_addr: ip(1),
            }
        );
        // A reply to us from that host validates the same way.
        let as_reply = arp_input(&reply_to_us(ip(1), PEER_MAC), OWN_MAC, own()).unwrap();
        assert!(!as_reply.is_request);
    }

    fn reply_to_us(sender_ip: Ipv4Address, sender_mac: [u8; 6]) -> Vec<u8> {
        let mut frame = vec![0u8; 60];
        emit_arp(&mut frame, sender_mac, sender_ip, OWN_MAC, own().address());
        frame
    }

    #[test]
    fn arp_that_proves_nothing_teaches_nothing() {
        let cases: [(Vec<u8>, ArpIgnored); 7] = [
            // A request for another host.
            (
                {
                    let mut f = request_from(ip(1), PEER_MAC);
                    f[41] = 9;
                    f
                },
                ArpIgnored::NotForUs,
            ),
            // A reply to another MAC.
            (
                {
                    let mut f = reply_to_us(ip(1), PEER_MAC);
                    f[32] ^= 1;
                    f
                },
                ArpIgnored::NotForUs,
            ),
            // The ARP sender MAC differs from the frame's source.
            (
                {
                    let mut f = request_from(ip(1), PEER_MAC);
                    f[6] = 0x0a;
                    f
                },
                ArpIgnored::BadSenderMac,
            ),
            // A multicast sender MAC.
            (
                request_from(ip(1), [0x01, 0, 0x5e, 0, 0, 1]),
                ArpIgnored::BadSenderMac,
            ),
            // Off our subnet, our own address, the broadcast address.
            (
                request_from(Ipv4Address::new(192, 0, 2, 1), PEER_MAC),
                ArpIgnored::BadSenderIp,
            ),
            (request_from(ip(2), PEER_MAC), ArpIgnored::BadSenderIp),
            (request_from(ip(255), PEER_MAC), ArpIgnored::BadSenderIp),
        ];
        for (frame, why) in cases {
            assert_eq!(arp_input(&frame, OWN_MAC, own()), Err(why), "{frame:02x?}");
        }
        let captured = crate::demux::tests::ARP_REQUEST;
        for n in 0..captured.len() {
            assert_eq!(
                arp_input(&captured[..n], OWN_MAC, own()),
                Err(ArpIgnored::Malformed)
            );
        }
        let mut garbage = captured;
        garbage[15] = 6; // hardware type 6
        assert_eq!(
            arp_input(&garbage, OWN_MAC, own()),
            Err(ArpIgnored::Malformed)
        );
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
        assert_eq!(cache.learn(ip(5), PEER_MAC), Learned::Evicted(ip(1)));
        // Hand at .2 (bit now clear): .2 goes next unless used first.
        assert!(cache.lookup(ip(2)).is_some());
        assert_eq!(cache.learn(ip(6), PEER_MAC), Learned::Evicted(ip(3)));
        // .2 survived with its bit cleared on the way; .4 is next and unused.
        assert_eq!(cache.learn(ip(7), PEER_MAC), Learned::Evicted(ip(4)));
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
