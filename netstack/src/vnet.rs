//! The virtio-net header a TAP queue opened with `IFF_VNET_HDR` puts before every frame, and
//! the TCP checksum offload it carries.
//!
//! ```text
//! read(2)  ─▶ [virtio_net_hdr, 10 bytes][Ethernet frame]  flags NEEDS_CSUM: from this host's stack, taken as is
//!                                                          flags DATA_VALID: verified by the kernel or a NIC
//!                                                          no flag (TCP): verified here, dropped if wrong
//! write(2) ◀─ [virtio_net_hdr, 10 bytes][Ethernet frame]  TCP: NEEDS_CSUM, the pseudo-header sum in the field
//!                                                          anything else: no flag, checksums complete
//! ```
//!
//! Without the header, every request and reply between the kernel's stack and smoltcp was
//! checksummed twice over on one host, where no byte crosses a wire: the client's kernel summed
//! each request and smoltcp verified it; smoltcp summed each reply and the kernel verified it,
//! inside memspin's `write(2)`, on memspin's core. Loopback and veth skip all four. With the
//! header, the TAP path does too:
//!
//! - The device offers checksum offload (`TUNSETOFFLOAD` with `TUN_F_CSUM`), so the kernel
//!   hands its TCP segments over with the checksum left to the device (`NEEDS_CSUM`, only the
//!   pseudo-header sum in the field, the kernel's `CHECKSUM_PARTIAL`). Such a frame was built by
//!   this host's own stack and never left memory: it is taken as it is, as the kernel takes
//!   its own on loopback. `DATA_VALID` means the kernel, or the NIC it came through, verified
//!   it. A TCP segment with neither flag (forwarded from another link, or written by a raw
//!   socket) has its checksum verified here ([`rx_check`]) and is dropped if it is wrong.
//! - Every TCP segment memspin sends carries the pseudo-header sum and `NEEDS_CSUM`
//!   ([`tx_prepare`]): delivered locally, the kernel does not verify it; forwarded out of a
//!   NIC, the kernel or the NIC completes it.
//!
//! So smoltcp neither computes nor verifies TCP checksums on the TAP device; it still does the
//! IPv4 header's, ICMP's and UDP's. No segmentation offload is asked for (`TUN_F_TSO*`): every
//! frame still fits the MTU, and a frame announcing segmentation is dropped.
//!
//! The header's 16-bit fields are in the host's byte order (legacy virtio, which a TAP uses
//! unless told otherwise).

use smoltcp::wire::{EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet, TcpPacket, checksum};

/// Bytes of `struct virtio_net_hdr` before every frame.
pub const VNET_HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the L4 checksum is partial (from `csum_start`, stored at
/// `csum_start + csum_offset`).
pub const NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksums were verified.
pub const DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;

const ETHERNET_HEADER_LEN: usize = 14;
/// Offset of the checksum field in a TCP header.
const TCP_CHECKSUM_OFFSET: u16 = 16;

mod field {
    use core::ops::Range;
    pub const FLAGS: usize = 0;
    pub const GSO_TYPE: usize = 1;
    pub const HDR_LEN: Range<usize> = 2..4;
    pub const GSO_SIZE: Range<usize> = 4..6;
    pub const CSUM_START: Range<usize> = 6..8;
    pub const CSUM_OFFSET: Range<usize> = 8..10;
}

/// What to do with a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxCheck {
    /// Hand it to the stack; its TCP checksum is partial (this host's own segment).
    Partial,
    /// Hand it to the stack: the kernel vouched for it, or it is not TCP (smoltcp checks the
    /// others' checksums), or its TCP checksum verified here.
    Valid,
    /// A TCP segment whose checksum is wrong: drop it.
    BadChecksum,
    /// Shorter than the header, or announces segmentation offload: drop it.
    Invalid,
}

/// Checks a frame as `read(2)` returned it (header and frame).
pub fn rx_check(buf: &[u8]) -> RxCheck {
    if buf.len() < VNET_HDR_LEN {
        return RxCheck::Invalid;
    }
    let (header, frame) = buf.split_at(VNET_HDR_LEN);
    if header[field::GSO_TYPE] != GSO_NONE {
        return RxCheck::Invalid;
    }
    let flags = header[field::FLAGS];
    if flags & NEEDS_CSUM != 0 {
        return RxCheck::Partial;
    }
    if flags & DATA_VALID != 0 {
        return RxCheck::Valid;
    }
    match tcp_segment(frame) {
        Some((src, dst, segment)) => {
            let tcp = TcpPacket::new_unchecked(segment);
            if tcp.verify_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst)) {
                RxCheck::Valid
            } else {
                RxCheck::BadChecksum
            }
        }
        // Not an IPv4 TCP segment, or malformed: smoltcp checks it (and drops what is broken).
        None => RxCheck::Valid,
    }
}

/// Writes the header for `frame` (which follows it) into `header`, and for an IPv4 TCP segment
/// puts the pseudo-header sum into its checksum field and asks for the rest to be done by the
/// device (`NEEDS_CSUM`). Returns true in that case.
pub fn tx_prepare(header: &mut [u8; VNET_HDR_LEN], frame: &mut [u8]) -> bool {
    *header = [0; VNET_HDR_LEN];
    let Some((src, dst, segment)) = tcp_segment(frame) else {
        return false;
    };
    let tcp_len = segment.len();
    let partial = checksum::pseudo_header_v4(&src, &dst, IpProtocol::Tcp, tcp_len as u32);
    let header_len = usize::from(TcpPacket::new_unchecked(segment).header_len());
    // The TCP header starts where the frame's length minus the segment's does (the IPv4
    // total length may leave Ethernet padding after it).
    let ip_header_len = Ipv4Packet::new_unchecked(&frame[ETHERNET_HEADER_LEN..]).header_len();
    let csum_start = ETHERNET_HEADER_LEN + usize::from(ip_header_len);
    let field_at = csum_start + usize::from(TCP_CHECKSUM_OFFSET);
    frame[field_at..field_at + 2].copy_from_slice(&partial.to_be_bytes());
    // Both fit 16 bits: the frame is at most an MTU of 9000 long.
    let to_u16 = |v: usize| u16::try_from(v).unwrap_or(u16::MAX);
    header[field::FLAGS] = NEEDS_CSUM;
    header[field::GSO_TYPE] = GSO_NONE;
    header[field::HDR_LEN].copy_from_slice(&to_u16(csum_start + header_len).to_ne_bytes());
    header[field::GSO_SIZE].copy_from_slice(&0u16.to_ne_bytes());
    header[field::CSUM_START].copy_from_slice(&to_u16(csum_start).to_ne_bytes());
    header[field::CSUM_OFFSET].copy_from_slice(&TCP_CHECKSUM_OFFSET.to_ne_bytes());
    true
}

/// The addresses and the TCP segment (header and payload, as long as the IPv4 total length
/// says) of an unfragmented IPv4 TCP frame whose headers are whole; `None` for anything else.
fn tcp_segment(
    frame: &[u8],
) -> Option<(
    smoltcp::wire::Ipv4Address,
    smoltcp::wire::Ipv4Address,
    &[u8],
)> {
    if frame.len() < ETHERNET_HEADER_LEN {
        return None;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    if EthernetProtocol::from(ethertype) != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(&frame[ETHERNET_HEADER_LEN..]).ok()?;
    if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
        return None;
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let start = ETHERNET_HEADER_LEN + usize::from(ip.header_len());
    let end = ETHERNET_HEADER_LEN + usize::from(ip.total_len());
    let segment = frame.get(start..end)?;
    TcpPacket::new_checked(segment).ok()?;
    Some((src, dst, segment))
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Address, Ipv4Repr, TcpControl, TcpRepr,
        TcpSeqNumber,
    };

    const SRC: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
    const DST: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);

    /// An Ethernet/IPv4/TCP frame carrying `payload`, with full checksums, and `padding`
    /// bytes after the IP packet (as short Ethernet frames have).
    fn tcp_frame(payload: &[u8], padding: usize) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 40000,
            dst_port: 11211,
            control: TcpControl::Psh,
            seq_number: TcpSeqNumber(1000),
            ack_number: Some(TcpSeqNumber(2000)),
            window_len: 4096,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload,
        };
        let ip = Ipv4Repr {
            src_addr: SRC,
            dst_addr: DST,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EthernetProtocol::Ipv4,
        };
        let len = eth.buffer_len() + ip.buffer_len() + tcp.buffer_len();
        let mut frame = vec![0xa5; len + padding];
        let caps = ChecksumCapabilities::default();
        let mut e = EthernetFrame::new_unchecked(&mut frame[..]);
        eth.emit(&mut e);
        let mut p = Ipv4Packet::new_unchecked(e.payload_mut());
        ip.emit(&mut p, &caps);
        let mut t = TcpPacket::new_unchecked(p.payload_mut());
        tcp.emit(&mut t, &IpAddress::Ipv4(SRC), &IpAddress::Ipv4(DST), &caps);
        frame
    }

    fn with_header(flags: u8, gso: u8, frame: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; VNET_HDR_LEN];
        buf[field::FLAGS] = flags;
        buf[field::GSO_TYPE] = gso;
        buf.extend_from_slice(frame);
        buf
    }

    #[test]
    fn flags_decide_what_is_trusted() {
        let frame = tcp_frame(b"get k\r\n", 0);
        assert_eq!(
            rx_check(&with_header(NEEDS_CSUM, 0, &frame)),
            RxCheck::Partial
        );
        assert_eq!(
            rx_check(&with_header(DATA_VALID, 0, &frame)),
            RxCheck::Valid
        );
        assert_eq!(rx_check(&with_header(0, 0, &frame)), RxCheck::Valid);
        // A segmentation-offload frame is never taken.
        assert_eq!(
            rx_check(&with_header(NEEDS_CSUM, 1, &frame)),
            RxCheck::Invalid
        );
    }

    #[test]
    fn unflagged_tcp_with_a_wrong_checksum_is_dropped() {
        let mut frame = tcp_frame(b"get k\r\n", 0);
        let last = frame.len() - 1;
        frame[last] ^= 0x01;
        assert_eq!(rx_check(&with_header(0, 0, &frame)), RxCheck::BadChecksum);
        // The same frame from this host's stack (partial) or vouched for is taken.
        assert_eq!(
            rx_check(&with_header(NEEDS_CSUM, 0, &frame)),
            RxCheck::Partial
        );
        assert_eq!(
            rx_check(&with_header(DATA_VALID, 0, &frame)),
            RxCheck::Valid
        );
    }

    #[test]
    fn padding_after_the_packet_is_not_summed() {
        let frame = tcp_frame(b"x", 20);
        assert_eq!(rx_check(&with_header(0, 0, &frame)), RxCheck::Valid);
    }

    #[test]
    fn every_truncation_is_handled_without_panic() {
        let full = with_header(0, 0, &tcp_frame(b"get key\r\n", 0));
        for n in 0..full.len() {
            let verdict = rx_check(&full[..n]);
            if n < VNET_HDR_LEN {
                assert_eq!(verdict, RxCheck::Invalid, "{n}");
            } else {
                // A cut IPv4 packet is not a TCP segment here; smoltcp drops it.
                assert_eq!(verdict, RxCheck::Valid, "{n}");
            }
            let mut header = [0u8; VNET_HDR_LEN];
            let mut frame = full[VNET_HDR_LEN.min(n)..n].to_vec();
            tx_prepare(&mut header, &mut frame);
        }
    }

    #[test]
    fn non_tcp_frames_are_left_alone() {
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(rx_check(&with_header(0, 0, &arp)), RxCheck::Valid);
        let before = arp.clone();
        let mut header = [0xffu8; VNET_HDR_LEN];
        assert!(!tx_prepare(&mut header, &mut arp));
        assert_eq!(header, [0; VNET_HDR_LEN]);
        assert_eq!(arp, before);
    }

    #[test]
    fn a_prepared_segment_completes_to_the_full_checksum() {
        let full = tcp_frame(b"VALUE k 0 5\r\nhello\r\nEND\r\n", 0);
        // As smoltcp emits it with TCP checksums off: the field is zero.
        let mut frame = full.clone();
        let start = ETHERNET_HEADER_LEN + 20;
        frame[start + 16..start + 18].copy_from_slice(&[0, 0]);
        let mut header = [0u8; VNET_HDR_LEN];
        assert!(tx_prepare(&mut header, &mut frame));
        assert_eq!(header[field::FLAGS], NEEDS_CSUM);
        assert_eq!(header[field::GSO_TYPE], GSO_NONE);
        let ne =
            |r: core::ops::Range<usize>| u16::from_ne_bytes([header[r.start], header[r.start + 1]]);
        assert_eq!(usize::from(ne(field::CSUM_START)), start);
        assert_eq!(ne(field::CSUM_OFFSET), 16);
        assert_eq!(usize::from(ne(field::HDR_LEN)), start + 20);
        assert_eq!(ne(field::GSO_SIZE), 0);
        // What the kernel (or a NIC) does with CHECKSUM_PARTIAL: sum from csum_start, the
        // partial sum in the field included, and store the complement there.
        let sum = !checksum::data(&frame[start..]);
        frame[start + 16..start + 18].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(
            frame, full,
            "completed, the segment is the fully checksummed one"
        );
        // And it verifies as any segment does.
        assert_eq!(rx_check(&with_header(0, 0, &frame)), RxCheck::Valid);
    }
}
