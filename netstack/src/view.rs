//! Device adaptors that let one smoltcp `Interface` serve many small socket sets.
//!
//! The connection table runs its interface with `Medium::Ip` over an Ethernet device:
//! - [`IpFrame`] hands smoltcp a single, already received and demultiplexed IP packet
//!   (the frame minus its Ethernet header) plus the transmit token that came with it, so
//!   `poll_ingress_single` processes exactly that packet against the socket set we chose.
//! - [`IpEgress`] forwards `transmit` to the real device.
//! - Both wrap every transmit token in a [`FramedTx`], which asks the device for 14 more
//!   bytes, lets smoltcp write the IP packet behind them, and then writes the Ethernet
//!   header whose destination [`Framing`] picks (see `neighbor.rs`): the connection's own
//!   MAC, the MAC of the frame being answered, the neighbour cache, or else the frame
//!   becomes an ARP request for the packet's destination and the packet is dropped (as
//!   smoltcp's own Ethernet path does; TCP sends it again). A frame of a connection is then
//!   shown to it ([`Peers::sent`]): loss recovery (`conn/recovery.rs`) keeps a copy of
//!   each one that takes sequence space.
//!
//! Per frame that costs a read of the IP header (version, protocol, destination, port)
//! and a short scan of one bucket's slots, against smoltcp's scan of its neighbour map:
//! about 100 instructions per frame sent (callgrind on `benches/conn_table.rs`, 1,000
//! connections). With the connection clocks (`conn/lifetime.rs`, about 80 per request) and
//! the Ethernet checks on receive, the table runs about 6,930 instructions per request
//! where it ran 6,480 with smoltcp's Ethernet medium and ARP cache (+7%).
//!
//! [`OneFrame`] and [`Egress`] are the plain Ethernet versions, for the test client swarm
//! (`memlink.rs`), whose smoltcp keeps its own ARP.

use smoltcp::phy::{Device, DeviceCapabilities, PacketMeta, RxToken, TxToken};
use smoltcp::time::Instant;
use smoltcp::wire::Ipv4Address;

use crate::neighbor::{
    ARP_FRAME_LEN, BROADCAST_MAC, ETHERNET_HEADER_LEN, NeighborCache, emit_arp, emit_ethernet_ipv4,
};

/// The connections with a slot in the polled bucket.
pub(crate) trait Peers {
    /// The slot and MAC of the connection to `addr:port`, if it has a slot here.
    fn peer(&self, addr: Ipv4Address, port: u16) -> Option<(usize, [u8; 6])>;

    /// Connection `slot` sends `frame` (an IPv4 TCP segment, its Ethernet header written).
    fn sent(&mut self, slot: usize, frame: &[u8]);
}

/// No connection (the control set).
pub(crate) struct NoPeers;

impl Peers for NoPeers {
    fn peer(&self, _: Ipv4Address, _: u16) -> Option<(usize, [u8; 6])> {
        None
    }

    fn sent(&mut self, _: usize, _: &[u8]) {}
}

/// Picks each sent frame's destination MAC and writes its Ethernet header; shows each
/// connection its own frames (loss recovery keeps copies); counts frames.
pub(crate) struct Framing<'a, P: Peers + ?Sized> {
    pub(crate) own_mac: [u8; 6],
    pub(crate) own_ip: Ipv4Address,
    /// The connections of the bucket being polled.
    pub(crate) peers: &'a mut P,
    /// While answering a received frame: its source MAC.
    pub(crate) reply_to: Option<[u8; 6]>,
    pub(crate) neighbors: &'a mut NeighborCache,
    /// Frames sent.
    pub(crate) sent: u64,
    /// Frames that became ARP requests because their destination was unknown.
    pub(crate) unresolved: u64,
}

impl<P: Peers + ?Sized> Framing<'_, P> {
    /// Writes the Ethernet header of `frame`, whose IP packet starts at byte 14, and shows
    /// a connection's frame to the connection.
    fn frame(&mut self, frame: &mut [u8]) {
        let packet = &frame[ETHERNET_HEADER_LEN..];
        let Some(dst) = ipv4_dst(packet) else {
            // smoltcp sends only IPv4 here; anything else is addressed to ourselves, which
            // every receiver drops.
            emit_ethernet_ipv4(frame, self.own_mac, self.own_mac);
            return;
        };
        let conn = tcp_dst_port(packet).and_then(|port| self.peers.peer(dst, port));
        if let Some((slot, mac)) = conn {
            emit_ethernet_ipv4(frame, self.own_mac, mac);
            self.peers.sent(slot, frame);
            return;
        }
        let mac = self.reply_to.or_else(|| self.neighbors.lookup(dst));
        match mac {
            Some(mac) => emit_ethernet_ipv4(frame, self.own_mac, mac),
            None => {
                self.unresolved += 1;
                if frame.len() >= ARP_FRAME_LEN {
                    // Zeroes the packet too: its bytes must not go out as broadcast padding.
                    emit_arp(frame, self.own_mac, self.own_ip, BROADCAST_MAC, dst);
                } else {
                    emit_ethernet_ipv4(frame, self.own_mac, self.own_mac);
                }
            }
        }
    }
}

/// The destination of an IPv4 packet.
fn ipv4_dst(packet: &[u8]) -> Option<Ipv4Address> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    Some(Ipv4Address::new(
        packet[16], packet[17], packet[18], packet[19],
    ))
}

/// The destination port of an unfragmented IPv4 TCP segment.
fn tcp_dst_port(packet: &[u8]) -> Option<u16> {
    if packet.len() < 20 {
        return None;
    }
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    let fragment = u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff != 0;
    if packet[9] != 6 || fragment || packet.len() < ihl + 4 {
        return None;
    }
    Some(u16::from_be_bytes([packet[ihl + 2], packet[ihl + 3]]))
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
    use smoltcp::wire::{EthernetFrame, EthernetProtocol};

    const OWN_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x02];
    const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x01];
    const CACHED_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x07];
    const REPLY_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x09];

    /// One connection, 10.77.0.1:40000 in slot 3; records the frames shown to it.
    #[derive(Default)]
    struct OnePeer {
        sent: Vec<(usize, Vec<u8>)>,
    }

    impl Peers for OnePeer {
        fn peer(&self, addr: Ipv4Address, port: u16) -> Option<(usize, [u8; 6])> {
            (addr == Ipv4Address::new(10, 77, 0, 1) && port == 40000).then_some((3, PEER_MAC))
        }

        fn sent(&mut self, slot: usize, frame: &[u8]) {
            self.sent.push((slot, frame.to_vec()));
        }
    }

    /// The IP packet of the captured SYN (see `demux`), with its destination and ports
    /// swapped to look like our reply to 10.77.0.`last`:`port`.
    fn reply_packet(last: u8, port: u16) -> Vec<u8> {
        let mut packet = crate::demux::tests::SYN_FRAME[14..].to_vec();
        packet[12..16].copy_from_slice(&[10, 77, 0, 2]);
        packet[16..20].copy_from_slice(&[10, 77, 0, last]);
        packet[20..22].copy_from_slice(&11211u16.to_be_bytes());
        packet[22..24].copy_from_slice(&port.to_be_bytes());
        packet
    }

    fn frame_for(packet: &[u8], reply_to: Option<[u8; 6]>, cache: &mut NeighborCache) -> Vec<u8> {
        frame_shown(packet, reply_to, cache, &mut OnePeer::default())
    }

    fn frame_shown(
        packet: &[u8],
        reply_to: Option<[u8; 6]>,
        cache: &mut NeighborCache,
        peers: &mut OnePeer,
    ) -> Vec<u8> {
        let mut framing = Framing {
            own_mac: OWN_MAC,
            own_ip: Ipv4Address::new(10, 77, 0, 2),
            peers,
            reply_to,
            neighbors: cache,
            sent: 0,
            unresolved: 0,
        };
        let mut frame = vec![0xa5u8; packet.len() + ETHERNET_HEADER_LEN];
        frame[ETHERNET_HEADER_LEN..].copy_from_slice(packet);
        framing.frame(&mut frame);
        frame
    }

    #[test]
    fn the_connection_mac_comes_first_then_the_reply_then_the_cache() {
        let mut cache = NeighborCache::new(4);
        cache.learn(Ipv4Address::new(10, 77, 0, 1), CACHED_MAC);
        cache.learn(Ipv4Address::new(10, 77, 0, 3), CACHED_MAC);
        let conn = reply_packet(1, 40000);
        for reply_to in [None, Some(REPLY_MAC)] {
            let frame = frame_for(&conn, reply_to, &mut cache);
            assert_eq!(&frame[0..6], &PEER_MAC, "the connection's own MAC");
            assert_eq!(&frame[6..12], &OWN_MAC);
            assert_eq!(&frame[12..14], &[0x08, 0x00]);
            assert_eq!(&frame[14..], &conn[..], "the packet is untouched");
        }
        // Another port of the same host: no slot.
        let other = reply_packet(1, 40001);
        assert_eq!(
            &frame_for(&other, Some(REPLY_MAC), &mut cache)[0..6],
            &REPLY_MAC
        );
        assert_eq!(&frame_for(&other, None, &mut cache)[0..6], &CACHED_MAC);
        assert_eq!(
            &frame_for(&reply_packet(3, 1), None, &mut cache)[0..6],
            &CACHED_MAC
        );
    }

    #[test]
    fn a_connection_is_shown_its_own_frames_and_only_those() {
        let mut cache = NeighborCache::new(4);
        cache.learn(Ipv4Address::new(10, 77, 0, 3), CACHED_MAC);
        let mut peers = OnePeer::default();
        let conn = reply_packet(1, 40000);
        let frame = frame_shown(&conn, None, &mut cache, &mut peers);
        assert_eq!(
            peers.sent,
            vec![(3, frame)],
            "the whole frame, header written"
        );
        frame_shown(&reply_packet(1, 40001), None, &mut cache, &mut peers);
        frame_shown(&reply_packet(3, 40000), None, &mut cache, &mut peers);
        assert_eq!(
            peers.sent.len(),
            1,
            "other connections' frames are not shown"
        );
    }

    #[test]
    fn an_unknown_destination_gets_an_arp_request_and_the_data_never_leaves() {
        let mut cache = NeighborCache::new(4);
        let packet = reply_packet(5, 40000);
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
    fn ports_are_read_only_from_unfragmented_tcp() {
        let packet = reply_packet(1, 40000);
        assert_eq!(tcp_dst_port(&packet), Some(40000));
        let mut udp = packet.clone();
        udp[9] = 17;
        assert_eq!(tcp_dst_port(&udp), None);
        let mut fragment = packet.clone();
        fragment[6] = 0x20;
        assert_eq!(tcp_dst_port(&fragment), None);
        assert_eq!(tcp_dst_port(&packet[..23]), None);
        assert_eq!(ipv4_dst(&packet[..19]), None);
        let mut v6 = packet;
        v6[0] = 0x60;
        assert_eq!(ipv4_dst(&v6), None);
    }
}
