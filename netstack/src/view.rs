//! Device adaptors that let one smoltcp `Interface` serve many small socket sets.
//!
//! The connection table runs its interface with `Medium::Ip` over an Ethernet device:
//! - [`IpFrame`] hands smoltcp a single, already received and demultiplexed IP packet
//!   (the frame minus its Ethernet header) plus the transmit token that came with it, so
//!   `poll_ingress_single` processes exactly that packet against the socket set we chose.
//! - [`IpEgress`] forwards `transmit` to the real device.
//! - Both wrap every transmit token in a [`FramedTx`], which asks the device for 14 more
//!   bytes, lets smoltcp write the IP packet behind them, and then writes the Ethernet
//!   header whose destination [`Framing`] picks (see `neighbor/mod.rs`): on the link, the
//!   connection's own MAC, the MAC of the frame being answered, the neighbour cache; off
//!   the link, the gateway's MAC (the SYN's during a handshake; then those of the
//!   connection and of the frame being answered); or else the frame becomes an ARP request
//!   or a neighbour solicitation for the next hop and the packet is dropped (as smoltcp's
//!   own Ethernet path does; TCP sends it again). A frame of a connection is then shown to
//!   it ([`Peers::sent`]): loss recovery (`conn/recovery/`) keeps a copy of each one that
//!   takes sequence space.
//!
//! Per frame that costs a read of the IP header (version, protocol, destination, port)
//! and a short scan of one bucket's slots, in place of smoltcp's scan of its neighbour
//! map; `cargo bench -p netstack --bench conn_table` measures a round trip through it.
//!
//! [`OneFrame`] and [`Egress`] are the plain Ethernet versions, for the test client swarm
//! (`memlink.rs`), whose smoltcp keeps its own ARP.

use smoltcp::phy::{Device, DeviceCapabilities, PacketMeta, RxToken, TxToken};
use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, Ipv4Address, Ipv6Address};

use crate::neighbor::{
    ARP_FRAME_LEN, ArpOut, ETHERNET_HEADER_LEN, ETHERTYPE_IPV4, ETHERTYPE_IPV6, Gateways,
    LinkAddrs, NDP_FRAME_LEN, NdpOut, NeighborCache, emit_arp, emit_ethernet, emit_ethernet_ipv4,
    emit_ndp,
};

/// The connections with a slot in the polled bucket.
pub(crate) trait Peers {
    /// The connection to the peer `addr` with the peer's port in the high half of `ports`
    /// and ours in the low half, if it has a slot here.
    fn peer(&self, addr: IpAddress, ports: u32) -> Option<PeerMac>;

    /// Connection `slot` sends `frame` (a TCP segment, its Ethernet header written).
    fn sent(&mut self, slot: usize, frame: &[u8]);

    /// A frame of connection `slot` went out as a request for its next hop's MAC in its
    /// place (the packet is lost).
    fn unresolved(&mut self, slot: usize) {
        let _ = slot;
    }
}

/// What framing needs of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerMac {
    /// Its slot in the bucket.
    pub(crate) slot: usize,
    /// The MAC its SYN came from (for a connection the table opened, its next hop's once
    /// known).
    pub(crate) mac: Option<[u8; 6]>,
    /// Its handshake is in progress (the SYN-ACK goes back the way the SYN came).
    pub(crate) handshake: bool,
}

/// No connection (the control set).
pub(crate) struct NoPeers;

impl Peers for NoPeers {
    fn peer(&self, _: IpAddress, _: u32) -> Option<PeerMac> {
        None
    }

    fn sent(&mut self, _: usize, _: &[u8]) {}
}

/// Picks each sent frame's destination MAC and writes its Ethernet header; shows each
/// connection its own frames (loss recovery keeps copies); counts frames.
pub(crate) struct Framing<'a, P: Peers + ?Sized> {
    /// Our MAC and addresses.
    pub(crate) own: &'a LinkAddrs,
    /// The next hop for destinations off the link.
    pub(crate) gateways: &'a Gateways,
    /// The connections of the bucket being polled.
    pub(crate) peers: &'a mut P,
    /// While answering a received frame: its source MAC.
    pub(crate) reply_to: Option<[u8; 6]>,
    pub(crate) neighbors: &'a mut NeighborCache,
    /// Frames sent.
    pub(crate) sent: u64,
    /// Frames whose next hop's MAC was unknown (sent as a request, or addressed to us).
    pub(crate) unresolved: u64,
}

impl<'a, P: Peers + ?Sized> Framing<'a, P> {
    /// Framing for one poll of the table: nothing sent yet. `reply_to` is the source MAC of
    /// the frame being answered, if any.
    pub(crate) fn new(
        own: &'a LinkAddrs,
        gateways: &'a Gateways,
        neighbors: &'a mut NeighborCache,
        peers: &'a mut P,
        reply_to: Option<[u8; 6]>,
    ) -> Self {
        Framing {
            own,
            gateways,
            peers,
            reply_to,
            neighbors,
            sent: 0,
            unresolved: 0,
        }
    }

    /// Writes the Ethernet header of `frame`, whose IP packet starts at byte 14, and shows
    /// a connection's frame to the connection.
    fn frame(&mut self, frame: &mut [u8]) {
        let packet = &frame[ETHERNET_HEADER_LEN..];
        let Some(dst) = ip_dst(packet) else {
            // smoltcp sends only IP here; anything else is addressed to ourselves, which
            // every receiver drops.
            emit_ethernet_ipv4(frame, self.own.mac, self.own.mac);
            return;
        };
        let ethertype = match dst {
            IpAddress::Ipv4(_) => ETHERTYPE_IPV4,
            IpAddress::Ipv6(_) => ETHERTYPE_IPV6,
        };
        let connection = tcp_ports(packet).and_then(|ports| self.peers.peer(dst, ports));
        let (next_hop, mac) = if self.own.on_link(dst) {
            let mac = connection
                .and_then(|c| c.mac)
                .or(self.reply_to)
                .or_else(|| self.neighbors.lookup(dst));
            (Some(dst), mac)
        } else {
            // A handshake's frames go back the way the SYN came (through a router that
            // replaced the gateway's MAC, the handshake can complete and tell the gateways);
            // an open connection's go to the gateway.
            let handshake = connection.filter(|c| c.handshake).and_then(|c| c.mac);
            let connection = connection.and_then(|c| c.mac);
            match self.gateways.route(dst) {
                Some((gateway, mac)) => (
                    Some(gateway),
                    handshake.or(mac).or(connection).or(self.reply_to),
                ),
                // No route: the MAC the connection's SYN, or the frame answered, came from.
                None => (None, connection.or(self.reply_to)),
            }
        };
        match (mac, next_hop) {
            (Some(mac), _) => {
                emit_ethernet(frame, self.own.mac, mac, ethertype);
                if let Some(connection) = connection {
                    self.peers.sent(connection.slot, frame);
                }
            }
            (None, next_hop) => {
                self.unresolved += 1;
                self.request(frame, next_hop, ethertype);
                if let Some(connection) = connection {
                    self.peers.unresolved(connection.slot);
                }
            }
        }
    }

    /// Turns `frame` into a request for `next_hop` (ARP, or a solicitation to its
    /// solicited-node group) if it is long enough, else into a frame addressed to
    /// ourselves; either way no byte of the packet leaves.
    fn request(&self, frame: &mut [u8], next_hop: Option<IpAddress>, ethertype: u16) {
        match (next_hop, self.own.ipv4, self.own.ipv6) {
            (Some(IpAddress::Ipv4(target)), Some(own), _) if frame.len() >= ARP_FRAME_LEN => {
                // Zeroes the packet too: its bytes must not go out as broadcast padding.
                emit_arp(
                    frame,
                    self.own.mac,
                    own.address(),
                    ArpOut::Request {
                        target,
                        to_mac: None,
                    },
                );
            }
            (Some(IpAddress::Ipv6(target)), _, Some(own)) if frame.len() >= NDP_FRAME_LEN => {
                emit_ndp(
                    frame,
                    self.own.mac,
                    own.address(),
                    NdpOut::Solicit {
                        target,
                        to_mac: None,
                    },
                );
            }
            _ => {
                frame[ETHERNET_HEADER_LEN..].fill(0);
                emit_ethernet(frame, self.own.mac, self.own.mac, ethertype);
            }
        }
    }
}

/// Length of the IPv6 header.
const IPV6_HEADER_LEN: usize = 40;

/// The destination of an IPv4 or IPv6 packet.
fn ip_dst(packet: &[u8]) -> Option<IpAddress> {
    match packet.first()? >> 4 {
        4 if packet.len() >= 20 => Some(IpAddress::Ipv4(Ipv4Address::new(
            packet[16], packet[17], packet[18], packet[19],
        ))),
        6 if packet.len() >= IPV6_HEADER_LEN => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&packet[24..40]);
            Some(IpAddress::Ipv6(Ipv6Address::from(octets)))
        }
        _ => None,
    }
}

/// The ports of a TCP segment we send (unfragmented IPv4, or IPv6 without extension
/// headers: smoltcp sends none), as the peers' key: the destination (the peer's) port in
/// the high half, the source (ours) in the low half.
fn tcp_ports(packet: &[u8]) -> Option<u32> {
    let port_at = |offset: usize| {
        let bytes = packet.get(offset..offset + 4)?;
        Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]).rotate_left(16))
    };
    match packet.first()? >> 4 {
        4 if packet.len() >= 20 => {
            let ihl = usize::from(packet[0] & 0x0f) * 4;
            let fragment = u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff != 0;
            if packet[9] != 6 || fragment {
                return None;
            }
            port_at(ihl)
        }
        6 if packet.len() >= IPV6_HEADER_LEN && packet[6] == 6 => port_at(IPV6_HEADER_LEN),
        _ => None,
    }
}

/// A transmit token that puts an Ethernet header in front of smoltcp's IP packet.
pub(crate) struct FramedTx<'f, 'a, T: TxToken, P: Peers + ?Sized> {
    inner: T,
    framing: &'f mut Framing<'a, P>,
}

impl<T: TxToken, P: Peers + ?Sized> TxToken for FramedTx<'_, '_, T, P> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let framing = self.framing;
        framing.sent += 1;
        self.inner.consume(len + ETHERNET_HEADER_LEN, |frame| {
            let result = f(&mut frame[ETHERNET_HEADER_LEN..]);
            framing.frame(frame);
            result
        })
    }

    fn set_meta(&mut self, meta: PacketMeta) {
        self.inner.set_meta(meta);
    }
}

/// A `Medium::Ip` device whose receive queue holds one borrowed IP packet.
pub(crate) struct IpFrame<'f, 'a, T: TxToken, P: Peers + ?Sized> {
    pub(crate) packet: Option<&'f [u8]>,
    pub(crate) tx: Option<T>,
    /// The interface's (`Medium::Ip`) capabilities.
    pub(crate) caps: &'a DeviceCapabilities,
    pub(crate) framing: Framing<'a, P>,
}

impl<'f, 'a, T: TxToken, P: Peers + ?Sized> Device for IpFrame<'f, 'a, T, P> {
    type RxToken<'t>
        = SliceRx<'f>
    where
        Self: 't;
    type TxToken<'t>
        = FramedTx<'t, 'a, T, P>
    where
        Self: 't;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let packet = self.packet.take()?;
        let inner = self.tx.take()?;
        Some((
            SliceRx(packet),
            FramedTx {
                inner,
                framing: &mut self.framing,
            },
        ))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        let inner = self.tx.take()?;
        Some(FramedTx {
            inner,
            framing: &mut self.framing,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

/// The real device for egress as a `Medium::Ip` device, remembering whether it ran out of
/// transmit tokens.
pub(crate) struct IpEgress<'d, 'a, D: Device, P: Peers + ?Sized> {
    pub(crate) device: &'d mut D,
    /// The interface's (`Medium::Ip`) capabilities.
    pub(crate) caps: &'a DeviceCapabilities,
    pub(crate) framing: Framing<'a, P>,
    pub(crate) exhausted: bool,
}

impl<'a, D: Device, P: Peers + ?Sized> Device for IpEgress<'_, 'a, D, P> {
    type RxToken<'t>
        = D::RxToken<'t>
    where
        Self: 't;
    type TxToken<'t>
        = FramedTx<'t, 'a, D::TxToken<'t>, P>
    where
        Self: 't;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        // Egress never receives: frames are only taken by the demultiplexer.
        None
    }

    fn transmit(&mut self, timestamp: Instant) -> Option<Self::TxToken<'_>> {
        match self.device.transmit(timestamp) {
            Some(inner) => Some(FramedTx {
                inner,
                framing: &mut self.framing,
            }),
            None => {
                self.exhausted = true;
                None
            }
        }
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

/// A device with these capabilities and nothing to send or receive: what
/// `Interface::new` reads the medium and MTU from.
pub(crate) struct CapsOnly(pub(crate) DeviceCapabilities);

impl Device for CapsOnly {
    type RxToken<'a> = SliceRx<'static>;
    type TxToken<'a> = NoTx;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        None
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        None
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.0.clone()
    }
}

/// The transmit token [`CapsOnly`] never hands out.
pub(crate) struct NoTx;

impl TxToken for NoTx {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        f(&mut vec![0u8; len])
    }
}

/// A device whose receive queue holds one borrowed Ethernet frame.
pub(crate) struct OneFrame<'f, 'c, T: TxToken> {
    pub(crate) frame: Option<&'f [u8]>,
    pub(crate) tx: Option<T>,
    pub(crate) caps: &'c DeviceCapabilities,
    pub(crate) frames_out: &'c mut u64,
}

/// A borrowed frame or packet as an `RxToken`.
pub(crate) struct SliceRx<'f>(&'f [u8]);

impl RxToken for SliceRx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0)
    }
}

/// A transmit token that counts the frames it sends.
pub(crate) struct CountedTx<'c, T: TxToken> {
    inner: T,
    frames_out: &'c mut u64,
}

impl<T: TxToken> TxToken for CountedTx<'_, T> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        *self.frames_out += 1;
        self.inner.consume(len, f)
    }

    fn set_meta(&mut self, meta: PacketMeta) {
        self.inner.set_meta(meta);
    }
}

impl<'f, T: TxToken> Device for OneFrame<'f, '_, T> {
    type RxToken<'a>
        = SliceRx<'f>
    where
        Self: 'a;
    type TxToken<'a>
        = CountedTx<'a, T>
    where
        Self: 'a;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let frame = self.frame.take()?;
        let tx = self.tx.take()?;
        Some((
            SliceRx(frame),
            CountedTx {
                inner: tx,
                frames_out: self.frames_out,
            },
        ))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        let tx = self.tx.take()?;
        Some(CountedTx {
            inner: tx,
            frames_out: self.frames_out,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

/// The real device for egress, counting frames and remembering whether it ran out of
/// transmit tokens.
pub(crate) struct Egress<'d, 'c, D: Device> {
    pub(crate) device: &'d mut D,
    pub(crate) caps: &'c DeviceCapabilities,
    pub(crate) frames_out: &'c mut u64,
    pub(crate) exhausted: bool,
}

impl<D: Device> Device for Egress<'_, '_, D> {
    type RxToken<'a>
        = D::RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = CountedTx<'a, D::TxToken<'a>>
    where
        Self: 'a;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        // Egress never receives: frames are only taken by the demultiplexer.
        None
    }

    fn transmit(&mut self, timestamp: Instant) -> Option<Self::TxToken<'_>> {
        match self.device.transmit(timestamp) {
            Some(inner) => Some(CountedTx {
                inner,
                frames_out: self.frames_out,
            }),
            None => {
                self.exhausted = true;
                None
            }
        }
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neighbor::{BROADCAST_MAC, ndp_input};
    use smoltcp::time::Instant;
    use smoltcp::wire::{EthernetFrame, EthernetProtocol, Ipv4Cidr, Ipv6Cidr};

    const OWN_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x02];
    const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x01];
    const CACHED_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x07];
    const REPLY_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x09];
    const GATEWAY_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0xfe];

    fn v6(text: &str) -> Ipv6Address {
        text.parse().unwrap()
    }

    fn own() -> LinkAddrs {
        LinkAddrs {
            mac: OWN_MAC,
            ipv4: Some(Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 2), 24)),
            ipv6: Some(Ipv6Cidr::new(v6("fd77::2"), 64)),
        }
    }

    /// The connections from 10.77.0.1:40000 (slot 3), from [fd77::1]:40000 (slot 4) and
    /// from the off-link 10.79.0.2:40000 (slot 5), all in their handshake if `handshake`;
    /// records the frames shown to them.
    #[derive(Default)]
    struct TestPeers {
        handshake: bool,
        sent: Vec<(usize, Vec<u8>)>,
    }

    impl Peers for TestPeers {
        fn peer(&self, addr: IpAddress, ports: u32) -> Option<PeerMac> {
            let ours = [
                IpAddress::v4(10, 77, 0, 1),
                IpAddress::Ipv6(v6("fd77::1")),
                IpAddress::v4(10, 79, 0, 2),
            ];
            let slot = ours.iter().position(|&a| a == addr)?;
            (ports >> 16 == 40000).then_some(PeerMac {
                slot: 3 + slot,
                mac: Some(PEER_MAC),
                handshake: self.handshake,
            })
        }

        fn sent(&mut self, slot: usize, frame: &[u8]) {
            self.sent.push((slot, frame.to_vec()));
        }
    }

    /// The IP packet of the captured SYN (see `demux`), with its destination and ports
    /// swapped to look like our reply to `dst`:`port`.
    fn reply_packet(dst: [u8; 4], port: u16) -> Vec<u8> {
        let mut packet = crate::demux::tests::SYN_FRAME[14..].to_vec();
        packet[12..16].copy_from_slice(&[10, 77, 0, 2]);
        packet[16..20].copy_from_slice(&dst);
        packet[20..22].copy_from_slice(&11211u16.to_be_bytes());
        packet[22..24].copy_from_slice(&port.to_be_bytes());
        packet
    }

    /// The same over IPv6, from the captured IPv6 SYN.
    fn reply6_packet(dst: &str, port: u16) -> Vec<u8> {
        let mut packet = crate::demux::tests::SYN6_FRAME[14..].to_vec();
        packet[8..24].copy_from_slice(&v6("fd77::2").octets());
        packet[24..40].copy_from_slice(&v6(dst).octets());
        packet[40..42].copy_from_slice(&11211u16.to_be_bytes());
        packet[42..44].copy_from_slice(&port.to_be_bytes());
        packet
    }

    fn frame_with(
        packet: &[u8],
        reply_to: Option<[u8; 6]>,
        cache: &mut NeighborCache,
        gateways: &Gateways,
    ) -> (Vec<u8>, u64) {
        frame_shown(packet, reply_to, cache, gateways, &mut TestPeers::default())
    }

    fn frame_shown(
        packet: &[u8],
        reply_to: Option<[u8; 6]>,
        cache: &mut NeighborCache,
        gateways: &Gateways,
        peers: &mut TestPeers,
    ) -> (Vec<u8>, u64) {
        let own = own();
        let mut framing = Framing::new(&own, gateways, cache, peers, reply_to);
        let mut frame = vec![0xa5u8; packet.len() + ETHERNET_HEADER_LEN];
        frame[ETHERNET_HEADER_LEN..].copy_from_slice(packet);
        framing.frame(&mut frame);
        (frame, framing.unresolved)
    }

    fn frame_for(packet: &[u8], reply_to: Option<[u8; 6]>, cache: &mut NeighborCache) -> Vec<u8> {
        frame_with(packet, reply_to, cache, &Gateways::default()).0
    }

    #[test]
    fn the_connection_mac_comes_first_then_the_reply_then_the_cache() {
        let mut cache = NeighborCache::new(4);
        cache.learn(Ipv4Address::new(10, 77, 0, 1), CACHED_MAC);
        cache.learn(Ipv4Address::new(10, 77, 0, 3), CACHED_MAC);
        cache.learn(v6("fd77::1"), CACHED_MAC);
        for (conn, ethertype) in [
            (reply_packet([10, 77, 0, 1], 40000), [0x08, 0x00]),
            (reply6_packet("fd77::1", 40000), [0x86, 0xdd]),
        ] {
            for reply_to in [None, Some(REPLY_MAC)] {
                let frame = frame_for(&conn, reply_to, &mut cache);
                assert_eq!(&frame[0..6], &PEER_MAC, "the connection's own MAC");
                assert_eq!(&frame[6..12], &OWN_MAC);
                assert_eq!(&frame[12..14], &ethertype);
                assert_eq!(&frame[14..], &conn[..], "the packet is untouched");
            }
        }
        // Another port of the same host: no slot.
        for other in [
            reply_packet([10, 77, 0, 1], 40001),
            reply6_packet("fd77::1", 40001),
        ] {
            assert_eq!(
                &frame_for(&other, Some(REPLY_MAC), &mut cache)[0..6],
                &REPLY_MAC
            );
            assert_eq!(&frame_for(&other, None, &mut cache)[0..6], &CACHED_MAC);
        }
        assert_eq!(
            &frame_for(&reply_packet([10, 77, 0, 3], 1), None, &mut cache)[0..6],
            &CACHED_MAC
        );
    }

    #[test]
    fn a_connection_is_shown_its_own_frames_and_only_those() {
        let mut cache = NeighborCache::new(4);
        cache.learn(Ipv4Address::new(10, 77, 0, 3), CACHED_MAC);
        let mut peers = TestPeers::default();
        let none = Gateways::default();
        let conn = reply_packet([10, 77, 0, 1], 40000);
        let (frame, _) = frame_shown(&conn, None, &mut cache, &none, &mut peers);
        assert_eq!(
            peers.sent,
            vec![(3, frame)],
            "the whole frame, header written"
        );
        let conn6 = reply6_packet("fd77::1", 40000);
        let (frame6, _) = frame_shown(&conn6, None, &mut cache, &none, &mut peers);
        assert_eq!(peers.sent[1], (4, frame6), "over IPv6 too");
        frame_shown(
            &reply_packet([10, 77, 0, 1], 40001),
            None,
            &mut cache,
            &none,
            &mut peers,
        );
        frame_shown(
            &reply_packet([10, 77, 0, 3], 40000),
            None,
            &mut cache,
            &none,
            &mut peers,
        );
        assert_eq!(
            peers.sent.len(),
            2,
            "other connections' frames are not shown"
        );
    }

    #[test]
    fn an_unknown_destination_gets_an_arp_request_and_the_data_never_leaves() {
        let mut cache = NeighborCache::new(4);
        let packet = reply_packet([10, 77, 0, 5], 40000);
        let frame = frame_for(&packet, None, &mut cache);
        let eth = EthernetFrame::new_checked(&frame[..]).unwrap();
        assert_eq!(eth.dst_addr().0, BROADCAST_MAC);
        assert_eq!(eth.ethertype(), EthernetProtocol::Arp);
        // Who has 10.77.0.5? Tell 10.77.0.2.
        assert_eq!(&frame[20..22], &[0, 1]);
        assert_eq!(&frame[28..32], &[10, 77, 0, 2]);
        assert_eq!(&frame[38..42], &[10, 77, 0, 5]);
        assert!(
            frame[ARP_FRAME_LEN..].iter().all(|&b| b == 0),
            "no byte of the packet is broadcast"
        );
    }

    #[test]
    fn an_unknown_ipv6_neighbour_gets_a_solicitation_or_nothing() {
        let mut cache = NeighborCache::new(4);
        // A SYN-ACK-sized packet (94 bytes of frame) has room for a solicitation.
        let packet = reply6_packet("fd77::5", 40000);
        let (frame, unresolved) = frame_with(&packet, None, &mut cache, &Gateways::default());
        assert_eq!(unresolved, 1);
        assert_eq!(
            &frame[0..6],
            &[0x33, 0x33, 0xff, 0, 0, 5],
            "fd77::5's group"
        );
        // fd77::5 reads it as a solicitation for it from us.
        let target = Ipv6Cidr::new(v6("fd77::5"), 64);
        let input = ndp_input(&frame[..NDP_FRAME_LEN], PEER_MAC, target).unwrap();
        assert_eq!(input.learn, Some((v6("fd77::2"), OWN_MAC)));
        assert!(frame[NDP_FRAME_LEN..].iter().all(|&b| b == 0));
        // A bare ACK (74 bytes) has not: it goes to our own MAC, zeroed.
        let mut ack = packet[..60].to_vec();
        ack[4..6].copy_from_slice(&20u16.to_be_bytes());
        let (frame, unresolved) = frame_with(&ack, None, &mut cache, &Gateways::default());
        assert_eq!(unresolved, 1);
        assert_eq!(&frame[0..6], &OWN_MAC);
        assert!(frame[ETHERNET_HEADER_LEN..].iter().all(|&b| b == 0));
    }

    #[test]
    fn off_the_link_frames_go_to_the_gateway() {
        let mut cache = NeighborCache::new(4);
        let gateway4 = Ipv4Address::new(10, 77, 0, 1);
        let gateway6 = v6("fe80::1");
        let gateways = Gateways::new(Some(gateway4), Some(gateway6));
        // A cached MAC for the off-link host itself is never used.
        cache.learn(Ipv4Address::new(10, 79, 0, 9), CACHED_MAC);
        let off4 = reply_packet([10, 79, 0, 9], 5);
        let conn4 = reply_packet([10, 79, 0, 2], 40000);
        let off6 = reply6_packet("fd79::9", 5);
        // Unresolved: the connection's or the answered frame's MAC...
        for (packet, reply_to, want) in [
            (&conn4, None, PEER_MAC),
            (&conn4, Some(REPLY_MAC), PEER_MAC),
            (&off4, Some(REPLY_MAC), REPLY_MAC),
            (&off6, Some(REPLY_MAC), REPLY_MAC),
        ] {
            let (frame, unresolved) = frame_with(packet, reply_to, &mut cache, &gateways);
            assert_eq!((&frame[0..6], unresolved), (&want[..], 0));
        }
        // ...else a request for the gateway, not for the destination.
        let (frame, _) = frame_with(&off4, None, &mut cache, &gateways);
        assert_eq!(&frame[0..6], &BROADCAST_MAC);
        assert_eq!(&frame[38..42], &gateway4.octets(), "who has the gateway");
        let (frame, _) = frame_with(&off6, None, &mut cache, &gateways);
        assert_eq!(
            &frame[0..6],
            &[0x33, 0x33, 0xff, 0, 0, 1],
            "fe80::1's group"
        );
        assert_eq!(
            &frame[62..78],
            &gateway6.octets(),
            "the solicitation's target"
        );
        // Resolved: the gateway's MAC first, for every off-link packet.
        gateways.confirm(gateway4.into(), GATEWAY_MAC, Instant::ZERO);
        gateways.confirm(gateway6.into(), GATEWAY_MAC, Instant::ZERO);
        for packet in [&off4, &conn4, &off6] {
            for reply_to in [None, Some(REPLY_MAC)] {
                let (frame, unresolved) = frame_with(packet, reply_to, &mut cache, &gateways);
                assert_eq!((&frame[0..6], unresolved), (&GATEWAY_MAC[..], 0));
                assert_eq!(&frame[14..], &packet[..]);
            }
        }
        // A handshake's frames go back the way its SYN came, resolved gateway or not.
        let mut handshaking = TestPeers {
            handshake: true,
            ..TestPeers::default()
        };
        let (frame, _) = frame_shown(
            &conn4,
            Some(REPLY_MAC),
            &mut cache,
            &gateways,
            &mut handshaking,
        );
        assert_eq!(&frame[0..6], &PEER_MAC);
        assert_eq!(
            handshaking.sent,
            vec![(5, frame)],
            "shown to its connection"
        );
        // On the link, the gateway is not involved.
        let on_link = reply_packet([10, 77, 0, 1], 40000);
        assert_eq!(
            &frame_with(&on_link, None, &mut cache, &gateways).0[0..6],
            &PEER_MAC
        );
    }

    #[test]
    fn without_a_route_only_answers_leave() {
        let mut cache = NeighborCache::new(4);
        let off = reply_packet([10, 79, 0, 9], 5);
        assert_eq!(
            &frame_for(&off, Some(REPLY_MAC), &mut cache)[0..6],
            &REPLY_MAC
        );
        let (frame, unresolved) = frame_with(&off, None, &mut cache, &Gateways::default());
        assert_eq!(unresolved, 1);
        assert_eq!(&frame[0..6], &OWN_MAC, "no ARP for a host off the link");
        assert!(frame[14..].iter().all(|&b| b == 0));
    }

    #[test]
    fn ports_are_read_only_from_unfragmented_tcp() {
        let packet = reply_packet([10, 77, 0, 1], 40000);
        assert_eq!(tcp_ports(&packet), Some((40000 << 16) | 11211));
        let mut udp = packet.clone();
        udp[9] = 17;
        assert_eq!(tcp_ports(&udp), None);
        let mut fragment = packet.clone();
        fragment[6] = 0x20;
        assert_eq!(tcp_ports(&fragment), None);
        assert_eq!(tcp_ports(&packet[..23]), None);
        assert_eq!(ip_dst(&packet[..19]), None);
        let mut v6_version = packet;
        v6_version[0] = 0x60;
        assert_eq!(ip_dst(&v6_version[..39]), None);
        let packet6 = reply6_packet("fd77::1", 40000);
        assert_eq!(tcp_ports(&packet6).map(|p| p >> 16), Some(40000));
        assert_eq!(ip_dst(&packet6), Some(IpAddress::Ipv6(v6("fd77::1"))));
        assert_eq!(tcp_ports(&packet6[..43]), None);
        let mut icmp6 = packet6;
        icmp6[6] = 58;
        assert_eq!(tcp_ports(&icmp6), None);
        assert_eq!(ip_dst(&[]), None);
    }
}
