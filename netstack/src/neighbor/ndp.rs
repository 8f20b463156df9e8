//! IPv6 neighbour discovery (RFC 4861) for our address: the neighbour solicitations memspin
//! answers and the advertisements it learns from, and the frames it sends (advertisements,
//! and solicitations for a neighbour or the gateway). Router discovery, redirects and
//! duplicate address detection are not memspin's: the addresses and the gateway are given
//! on the command line.
//!
//! A message is read only after the checks of RFC 4861 §7.1 that apply (hop limit 255, a
//! valid ICMPv6 checksum, code 0, lengths and options well formed: smoltcp's `Icmpv6Repr`
//! parses it), and teaches the cache only when it proves its mapping:
//!
//! - a solicitation whose target is our address, sent to our address or our solicited-node
//!   group, from a unicast address of our prefix or a link-local one (not ours; a
//!   solicitation from `::`, duplicate address detection by another host, is ignored): it
//!   is answered (solicited, override, with our MAC) to the frame's source MAC, and its
//!   sender is learned when its source link-layer address option equals that MAC;
//! - an advertisement sent to our address, for a unicast target of our prefix or a
//!   link-local one (not ours), whose target link-layer address option equals the frame's
//!   source MAC: the target is learned. Unsolicited advertisements to all nodes are ignored.
//!
//! Solicitations memspin sends go to the target's solicited-node group, or to a known MAC
//! and address when refreshing one, and always carry our link-layer address, so the answer
//! (RFC 4861 §7.2.4: an advertisement to a multicast solicitation includes the target's
//! link-layer address) teaches us the target's.

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, IpProtocol,
    Ipv6Address, Ipv6Cidr, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr, RawHardwareAddress,
};

use super::{
    ETHERNET_HEADER_LEN, ETHERTYPE_IPV6, emit_ethernet, ipv6_multicast_mac, is_link_local,
    solicited_node,
};

/// Length of the IPv6 header.
const IPV6_HEADER_LEN: usize = 40;

/// Length of a solicitation or advertisement with one link-layer address option: 24 bytes
/// of message and 8 of option.
const NDP_MESSAGE_LEN: usize = 32;

/// Length of an Ethernet frame carrying one of our solicitations or advertisements.
pub const NDP_FRAME_LEN: usize = ETHERNET_HEADER_LEN + IPV6_HEADER_LEN + NDP_MESSAGE_LEN;

/// Why an IPv6 frame was not taken as neighbour discovery for us (not an error: other
/// hosts' neighbour discovery lands here, and other ICMPv6 goes on to smoltcp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdpIgnored {
    /// Not IPv6 carrying a neighbour solicitation or advertisement (echo requests and the
    /// rest of ICMPv6, TCP, ...): the caller hands it on.
    NotNdp,
    /// A solicitation or advertisement that fails RFC 4861's checks (hop limit, checksum,
    /// code, lengths, options).
    Malformed,
    /// A solicitation for another target or not sent to us, or an advertisement not sent
    /// to our address and MAC.
    NotForUs,
    /// The link-layer address option differs from the frame's source, or a MAC is not
    /// unicast.
    BadSenderMac,
    /// The sender (or an advertisement's target) is not a unicast host of our prefix or a
    /// link-local one, or is our own address; or the sender is `::`.
    BadSenderIp,
}

/// What a validated neighbour discovery frame asks of us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdpInput {
    /// A neighbour the frame proved: learn it.
    pub learn: Option<(Ipv6Address, [u8; 6])>,
    /// A solicitation for our address: answer this address at this MAC.
    pub answer: Option<(Ipv6Address, [u8; 6])>,
}

/// Reads a frame for the host `own_mac`/`own` as neighbour discovery and validates it.
///
/// # Errors
/// [`NdpIgnored`]: nothing to answer or learn ([`NdpIgnored::NotNdp`]: not neighbour
/// discovery at all).
pub fn ndp_input(frame: &[u8], own_mac: [u8; 6], own: Ipv6Cidr) -> Result<NdpInput, NdpIgnored> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| NdpIgnored::NotNdp)?;
    if eth.ethertype() != EthernetProtocol::Ipv6 {
        return Err(NdpIgnored::NotNdp);
    }
    let ip = Ipv6Packet::new_checked(eth.payload()).map_err(|_| NdpIgnored::NotNdp)?;
    if ip.next_header() != IpProtocol::Icmpv6 {
        return Err(NdpIgnored::NotNdp);
    }
    let icmp = Icmpv6Packet::new_checked(ip.payload()).map_err(|_| NdpIgnored::NotNdp)?;
    if !matches!(
        icmp.msg_type(),
        Icmpv6Message::NeighborSolicit | Icmpv6Message::NeighborAdvert
    ) {
        return Err(NdpIgnored::NotNdp);
    }
    if ip.hop_limit() != 255 {
        return Err(NdpIgnored::Malformed);
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let repr = Icmpv6Repr::parse(&src, &dst, &icmp, &ChecksumCapabilities::default())
        .map_err(|_| NdpIgnored::Malformed)?;
    let ours = own.address();
    let on_link_host = |addr: Ipv6Address| {
        addr != ours
            && !addr.is_multicast()
            && !addr.is_unspecified()
            && (own.contains_addr(&addr) || is_link_local(addr))
    };
    let frame_src = eth.src_addr();
    let option_mac = |lladdr: Option<RawHardwareAddress>| -> Result<Option<[u8; 6]>, NdpIgnored> {
        let Some(lladdr) = lladdr else {
            return Ok(None);
        };
        let bytes = lladdr.as_bytes();
        if bytes.len() != 6 || bytes != frame_src.as_bytes() {
            return Err(NdpIgnored::BadSenderMac);
        }
        Ok(Some(frame_src.0))
    };
    if !frame_src.is_unicast() {
        return Err(NdpIgnored::BadSenderMac);
    }
    match repr {
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr,
            lladdr,
        }) => {
            if target_addr != ours || (dst != ours && dst != solicited_node(ours)) {
                return Err(NdpIgnored::NotForUs);
            }
            if !on_link_host(src) {
                return Err(NdpIgnored::BadSenderIp);
            }
            let learned = option_mac(lladdr)?;
            Ok(NdpInput {
                learn: learned.map(|mac| (src, mac)),
                answer: Some((src, frame_src.0)),
            })
        }
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            target_addr,
            lladdr,
            ..
        }) => {
            if dst != ours || eth.dst_addr().0 != own_mac {
                return Err(NdpIgnored::NotForUs);
            }
            if !on_link_host(target_addr) {
                return Err(NdpIgnored::BadSenderIp);
            }
            let learned = option_mac(lladdr)?;
            Ok(NdpInput {
                learn: learned.map(|mac| (target_addr, mac)),
                answer: None,
            })
        }
        _ => Err(NdpIgnored::NotNdp),
    }
}

/// A neighbour discovery message memspin sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdpOut {
    /// A solicited advertisement of our address to `to_ip` at `to_mac`.
    Advert {
        /// The soliciting host.
        to_ip: Ipv6Address,
        /// Its MAC.
        to_mac: [u8; 6],
    },
    /// A solicitation for `target`: to its solicited-node group (`to_mac` `None`), or to
    /// `target` itself at a known MAC (a refresh).
    Solicit {
        /// The address to resolve.
        target: Ipv6Address,
        /// Where to send it, if already known.
        to_mac: Option<[u8; 6]>,
    },
}

/// Writes `message` from `own_mac`/`own_ip` into the first [`NDP_FRAME_LEN`] bytes of
/// `frame`, checksum included, with our link-layer address option; zeroes the rest.
///
/// # Panics
/// If `frame` is shorter than [`NDP_FRAME_LEN`].
pub fn emit_ndp(frame: &mut [u8], own_mac: [u8; 6], own_ip: Ipv6Address, message: NdpOut) {
    let (head, tail) = frame.split_at_mut(NDP_FRAME_LEN);
    tail.fill(0);
    let own_ll = RawHardwareAddress::from_bytes(&own_mac);
    let (to_mac, dst_ip, repr) = match message {
        NdpOut::Advert { to_ip, to_mac } => (
            to_mac,
            to_ip,
            NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                target_addr: own_ip,
                lladdr: Some(own_ll),
            },
        ),
        NdpOut::Solicit { target, to_mac } => {
            let (mac, dst) = match to_mac {
                Some(mac) => (mac, target),
                None => {
                    let group = solicited_node(target);
                    (ipv6_multicast_mac(group), group)
                }
            };
            (
                mac,
                dst,
                NdiscRepr::NeighborSolicit {
                    target_addr: target,
                    lladdr: Some(own_ll),
                },
            )
        }
    };
    emit_ethernet(head, own_mac, to_mac, ETHERTYPE_IPV6);
    let ip = Ipv6Repr {
        src_addr: own_ip,
        dst_addr: dst_ip,
        next_header: IpProtocol::Icmpv6,
        payload_len: NDP_MESSAGE_LEN,
        hop_limit: 255,
    };
    let (ip_bytes, icmp_bytes) = head[ETHERNET_HEADER_LEN..].split_at_mut(IPV6_HEADER_LEN);
    ip.emit(&mut Ipv6Packet::new_unchecked(ip_bytes));
    Icmpv6Repr::Ndisc(repr).emit(
        &own_ip,
        &dst_ip,
        &mut Icmpv6Packet::new_unchecked(icmp_bytes),
        &ChecksumCapabilities::default(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN_MAC: [u8; 6] = [0x02, 0x6d, 0, 0, 0, 0x02];
    const PEER_MAC: [u8; 6] = [0x26, 0x22, 0x9e, 0x82, 0xff, 0xda];

    fn v6(text: &str) -> Ipv6Address {
        text.parse().unwrap()
    }

    fn own() -> Ipv6Cidr {
        Ipv6Cidr::new(v6("fd77::2"), 64)
    }

    /// A neighbour solicitation for fd77::2 from fd77::1, captured from a Linux 6.18 kernel
    /// on a veth in a test namespace as it first connected to fd77::2 (multicast to
    /// ff02::1:ff00:2, with its source link-layer address option).
    static SOLICITATION: [u8; 86] = [
        0x33, 0x33, 0xff, 0x00, 0x00, 0x02, 0x26, 0x22, 0x9e, 0x82, 0xff, 0xda, 0x86, 0xdd, //
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, //
        0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x00, 0x00, 0x02, //
        0x87, 0x00, 0xba, 0x2a, 0x00, 0x00, 0x00, 0x00, //
        0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, //
        0x01, 0x01, 0x26, 0x22, 0x9e, 0x82, 0xff, 0xda,
    ];

    fn solicitation_from(src: Ipv6Address, mac: [u8; 6], target: Ipv6Address) -> Vec<u8> {
        let mut frame = vec![0u8; NDP_FRAME_LEN];
        emit_ndp(
            &mut frame,
            mac,
            src,
            NdpOut::Solicit {
                target,
                to_mac: None,
            },
        );
        frame
    }

    fn advert_from(src: Ipv6Address, mac: [u8; 6], to: Ipv6Address) -> Vec<u8> {
        let mut frame = vec![0u8; NDP_FRAME_LEN];
        emit_ndp(
            &mut frame,
            mac,
            src,
            NdpOut::Advert {
                to_ip: to,
                to_mac: OWN_MAC,
            },
        );
        frame
    }

    #[test]
    fn the_captured_solicitation_is_answered_and_its_sender_learned() {
        // Our own solicitation, sent from the peer's side, is the captured frame byte for
        // byte (checksum included).
        let ours = solicitation_from(v6("fd77::1"), PEER_MAC, v6("fd77::2"));
        assert_eq!(ours[..], SOLICITATION[..]);
        let input = ndp_input(&SOLICITATION, OWN_MAC, own()).unwrap();
        assert_eq!(
            input,
            NdpInput {
                learn: Some((v6("fd77::1"), PEER_MAC)),
                answer: Some((v6("fd77::1"), PEER_MAC)),
            }
        );
        // Our answer, read back as the peer reads it.
        let mut reply = [0xa5u8; 100];
        emit_ndp(
            &mut reply,
            OWN_MAC,
            own().address(),
            NdpOut::Advert {
                to_ip: v6("fd77::1"),
                to_mac: PEER_MAC,
            },
        );
        assert!(
            reply[NDP_FRAME_LEN..].iter().all(|&b| b == 0),
            "padding zeroed"
        );
        let eth = EthernetFrame::new_checked(&reply[..NDP_FRAME_LEN]).unwrap();
        assert_eq!(eth.dst_addr().0, PEER_MAC);
        assert_eq!(eth.src_addr().0, OWN_MAC);
        let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
        assert_eq!(
            (ip.src_addr(), ip.dst_addr()),
            (v6("fd77::2"), v6("fd77::1"))
        );
        assert_eq!(ip.hop_limit(), 255);
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        let repr = Icmpv6Repr::parse(
            &ip.src_addr(),
            &ip.dst_addr(),
            &icmp,
            &ChecksumCapabilities::default(),
        )
        .expect("a valid checksum");
        assert_eq!(
            repr,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                target_addr: v6("fd77::2"),
                lladdr: Some(RawHardwareAddress::from_bytes(&OWN_MAC)),
            })
        );
        // The peer's advertisement in answer to ours teaches us its MAC.
        let advert = advert_from(v6("fd77::1"), PEER_MAC, v6("fd77::2"));
        assert_eq!(
            ndp_input(&advert, OWN_MAC, own()),
            Ok(NdpInput {
                learn: Some((v6("fd77::1"), PEER_MAC)),
                answer: None,
            })
        );
    }

    #[test]
    fn a_unicast_solicitation_without_an_option_is_answered_but_teaches_nothing() {
        // A kernel refreshing its entry for us sends to our address, without the option.
        let mut frame = solicitation_from(v6("fd77::1"), PEER_MAC, v6("fd77::2"));
        frame[0..6].copy_from_slice(&OWN_MAC);
        frame[38..54].copy_from_slice(&v6("fd77::2").octets());
        // Payload 24 bytes: the message without its option.
        frame[18..20].copy_from_slice(&24u16.to_be_bytes());
        frame.truncate(ETHERNET_HEADER_LEN + IPV6_HEADER_LEN + 24);
        fix_checksum(&mut frame);
        assert_eq!(
            ndp_input(&frame, OWN_MAC, own()),
            Ok(NdpInput {
                learn: None,
                answer: Some((v6("fd77::1"), PEER_MAC)),
            })
        );
    }

    /// Recomputes the ICMPv6 checksum of an edited frame.
    fn fix_checksum(frame: &mut [u8]) {
        let ip = Ipv6Packet::new_checked(&frame[ETHERNET_HEADER_LEN..]).unwrap();
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let at = ETHERNET_HEADER_LEN + IPV6_HEADER_LEN;
        let mut icmp = Icmpv6Packet::new_unchecked(&mut frame[at..]);
        icmp.fill_checksum(&src, &dst);
    }

    #[test]
    fn neighbour_discovery_that_proves_nothing_teaches_nothing() {
        let peer = v6("fd77::1");
        let us = v6("fd77::2");
        let edited = |edit: &dyn Fn(&mut Vec<u8>), checksum: bool| {
            let mut f = solicitation_from(peer, PEER_MAC, us);
            edit(&mut f);
            if checksum {
                fix_checksum(&mut f);
            }
            f
        };
        let cases: Vec<(&str, Vec<u8>, NdpIgnored)> = vec![
            (
                "another target",
                solicitation_from(peer, PEER_MAC, v6("fd77::3")),
                NdpIgnored::NotForUs,
            ),
            (
                "hop limit 254 (from beyond a router)",
                edited(&|f| f[21] = 254, false),
                NdpIgnored::Malformed,
            ),
            (
                "a bad checksum",
                edited(&|f| f[57] ^= 1, false),
                NdpIgnored::Malformed,
            ),
            (
                "code 1",
                edited(&|f| f[55] = 1, true),
                NdpIgnored::Malformed,
            ),
            (
                "an option of length 0",
                edited(&|f| f[79] = 0, true),
                NdpIgnored::Malformed,
            ),
            (
                "the option's MAC differs from the frame's",
                edited(&|f| f[6] = 0x0a, false),
                NdpIgnored::BadSenderMac,
            ),
            (
                "a multicast source MAC",
                solicitation_from(peer, [0x33, 0x33, 0, 0, 0, 1], us),
                NdpIgnored::BadSenderMac,
            ),
            (
                "from off our prefix",
                solicitation_from(v6("fd79::1"), PEER_MAC, us),
                NdpIgnored::BadSenderIp,
            ),
            (
                "from our own address",
                solicitation_from(us, PEER_MAC, us),
                NdpIgnored::BadSenderIp,
            ),
            (
                "duplicate address detection (from ::)",
                solicitation_from(Ipv6Address::UNSPECIFIED, PEER_MAC, us),
                NdpIgnored::BadSenderIp,
            ),
            (
                "an advertisement to another address",
                advert_from(peer, PEER_MAC, v6("fd77::3")),
                NdpIgnored::NotForUs,
            ),
            (
                "an advertisement to our address at another MAC",
                {
                    let mut f = advert_from(peer, PEER_MAC, us);
                    f[5] ^= 1;
                    f
                },
                NdpIgnored::NotForUs,
            ),
            (
                "an advertisement of our own address",
                advert_from(us, PEER_MAC, us),
                NdpIgnored::BadSenderIp,
            ),
        ];
        for (what, frame, why) in cases {
            assert_eq!(ndp_input(&frame, OWN_MAC, own()), Err(why), "{what}");
        }
        // A link-local sender is on the link.
        let link_local = solicitation_from(v6("fe80::2422:9eff:fe82:ffda"), PEER_MAC, us);
        assert!(ndp_input(&link_local, OWN_MAC, own()).is_ok());
        // Not neighbour discovery: handed on.
        let mut echo = SOLICITATION;
        echo[54] = 128;
        assert_eq!(ndp_input(&echo, OWN_MAC, own()), Err(NdpIgnored::NotNdp));
        let mut tcp = SOLICITATION;
        tcp[20] = 6;
        assert_eq!(ndp_input(&tcp, OWN_MAC, own()), Err(NdpIgnored::NotNdp));
        assert_eq!(
            ndp_input(&crate::demux::tests::ARP_REQUEST, OWN_MAC, own()),
            Err(NdpIgnored::NotNdp)
        );
        // Every truncation: ignored, never a panic.
        for n in 0..SOLICITATION.len() {
            assert!(
                ndp_input(&SOLICITATION[..n], OWN_MAC, own()).is_err(),
                "{n}"
            );
        }
    }

    #[test]
    fn solicitations_go_to_the_group_or_to_a_known_mac() {
        let mut frame = [0u8; NDP_FRAME_LEN];
        let gateway = v6("fd77::1");
        emit_ndp(
            &mut frame,
            OWN_MAC,
            own().address(),
            NdpOut::Solicit {
                target: gateway,
                to_mac: None,
            },
        );
        assert_eq!(&frame[0..6], &[0x33, 0x33, 0xff, 0, 0, 1]);
        assert_eq!(&frame[38..54], &v6("ff02::1:ff00:1").octets());
        emit_ndp(
            &mut frame,
            OWN_MAC,
            own().address(),
            NdpOut::Solicit {
                target: gateway,
                to_mac: Some(PEER_MAC),
            },
        );
        assert_eq!(&frame[0..6], &PEER_MAC);
        assert_eq!(&frame[38..54], &gateway.octets());
        // The gateway (a host of our prefix) accepts it as a solicitation from us.
        let as_peer = Ipv6Cidr::new(gateway, 64);
        assert_eq!(
            ndp_input(&frame, PEER_MAC, as_peer),
            Ok(NdpInput {
                learn: Some((own().address(), OWN_MAC)),
                answer: Some((own().address(), OWN_MAC)),
            })
        );
    }
}
