//! ARP (RFC 826) for IPv4 over Ethernet: which requests and replies memspin answers and
//! learns from, and the frames it sends (replies, and requests for a neighbour or the gateway).
//!
//! A frame teaches the neighbour cache only when it proves its mapping (see the module
//! header of [`super`]): an ARP request for our address, or a reply to our address and MAC,
//! whose sender is a unicast host of our subnet (not ours) and was sent from the MAC it claims.

use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    Ipv4Address, Ipv4Cidr,
};

use super::BROADCAST_MAC;

/// Length of an Ethernet frame carrying an IPv4-over-Ethernet ARP packet.
pub const ARP_FRAME_LEN: usize = 42;

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

/// An ARP frame memspin sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOut {
    /// A reply telling `to_ip` at `to_mac` where our address is.
    Reply {
        /// The asking host.
        to_ip: Ipv4Address,
        /// Its MAC.
        to_mac: [u8; 6],
    },
    /// A request asking who has `target`: broadcast (`to_mac` `None`), or unicast to a
    /// known MAC (a refresh).
    Request {
        /// The address to resolve.
        target: Ipv4Address,
        /// Where to send it, if already known.
        to_mac: Option<[u8; 6]>,
    },
}

/// Writes `message` from `own_mac`/`own_ip` into the first [`ARP_FRAME_LEN`] bytes of
/// `frame`; zeroes the rest of `frame`.
///
/// # Panics
/// If `frame` is shorter than [`ARP_FRAME_LEN`].
pub fn emit_arp(frame: &mut [u8], own_mac: [u8; 6], own_ip: Ipv4Address, message: ArpOut) {
    let (operation, to_mac, target_mac, target) = match message {
        ArpOut::Reply { to_ip, to_mac } => (ArpOperation::Reply, to_mac, to_mac, to_ip),
        ArpOut::Request { target, to_mac } => (
            ArpOperation::Request,
            to_mac.unwrap_or(BROADCAST_MAC),
            [0; 6],
            target,
        ),
    };
    let (head, tail) = frame.split_at_mut(ARP_FRAME_LEN);
    tail.fill(0);
    let mut eth = EthernetFrame::new_unchecked(head);
    eth.set_dst_addr(EthernetAddress(to_mac));
    eth.set_src_addr(EthernetAddress(own_mac));
    eth.set_ethertype(EthernetProtocol::Arp);
    let repr = ArpRepr::EthernetIpv4 {
        operation,
        source_hardware_addr: EthernetAddress(own_mac),
        source_protocol_addr: own_ip,
        target_hardware_addr: EthernetAddress(target_mac),
        target_protocol_addr: target,
    };
    repr.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
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
        emit_arp(
            &mut reply,
            OWN_MAC,
            own().address(),
            ArpOut::Reply {
                to_ip: ip(1),
                to_mac: PEER_MAC,
            },
        );
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
        emit_arp(
            &mut frame,
            sender_mac,
            sender_ip,
            ArpOut::Reply {
                to_ip: own().address(),
                to_mac: OWN_MAC,
            },
        );
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
    fn requests_are_broadcast_or_sent_to_a_known_mac() {
        let mut frame = [0xa5u8; 60];
        let request = |to_mac| ArpOut::Request {
            target: ip(1),
            to_mac,
        };
        emit_arp(&mut frame, OWN_MAC, own().address(), request(None));
        assert_eq!(&frame[0..6], &BROADCAST_MAC);
        assert_eq!(
            frame[..ARP_FRAME_LEN],
            request_from(own().address(), OWN_MAC)[..ARP_FRAME_LEN]
                .iter()
                .enumerate()
                .map(|(i, &b)| match i {
                    38..42 => ip(1).octets()[i - 38],
                    _ => b,
                })
                .collect::<Vec<u8>>()[..],
            "the captured request's shape, from us, for 10.77.0.1"
        );
        assert!(frame[ARP_FRAME_LEN..].iter().all(|&b| b == 0));
        emit_arp(
            &mut frame,
            OWN_MAC,
            own().address(),
            request(Some(PEER_MAC)),
        );
        assert_eq!(&frame[0..6], &PEER_MAC, "a unicast refresh");
        assert_eq!(&frame[20..22], &[0, 1], "still a request");
        assert_eq!(&frame[32..38], &[0; 6]);
        // The host asked takes it as a request for its address from us.
        let host = Ipv4Cidr::new(ip(1), 24);
        assert_eq!(
            arp_input(&frame, PEER_MAC, host),
            Ok(ArpInput {
                sender_ip: own().address(),
                sender_mac: OWN_MAC,
                is_request: true,
            })
        );
    }
}
