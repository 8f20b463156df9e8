//! Ethernet II / IPv4 or IPv6 / TCP header view, deep enough to pick a connection bucket
//! and to follow a connection's sequence space.
//!
//! The connection table reads the 4-tuple and the TCP flags of every received frame
//! before smoltcp sees it. Nothing here verifies checksums: smoltcp does that once the
//! frame reaches the right bucket. Frames we cannot read as an unfragmented TCP segment
//! (ARP, ICMP, neighbour discovery, VLAN-tagged, IPv4 fragments, IPv6 with any extension
//! header, truncated headers) are not errors, they are "not TCP" and go to the control
//! bucket. (Nobody sends memspin TCP behind an IPv6 extension header; smoltcp would answer
//! such a segment from the control set, with a reset.)
//!
//! [`SegmentRepr`] reads what loss recovery (`conn/recovery/`) follows in every segment
//! a connection sends and receives: sequence and acknowledgment numbers, flags, window,
//! payload length and the SACK options (RFC 2018, RFC 2883).

use core::fmt;

use smoltcp::wire::{IpAddress, Ipv4Address, Ipv6Address};

mod field {
    use core::ops::Range;

    // Ethernet II (no 802.1Q tag: TAP and AF_XDP deliver untagged frames to us).
    pub const ETH_SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const ETH_HEADER_LEN: usize = 14;

    // IPv4, relative to the frame.
    pub const IP_VER_IHL: usize = 14;
    pub const IP_TOTAL_LEN: Range<usize> = 16..18;
    pub const IP_FLAGS_FRAG: Range<usize> = 20..22;
    pub const IP_PROTOCOL: usize = 23;
    pub const IP_SRC: Range<usize> = 26..30;
    pub const IP_DST: Range<usize> = 30..34;

    // IPv6, relative to the frame.
    pub const IP6_VERSION: usize = 14;
    pub const IP6_PAYLOAD_LEN: Range<usize> = 18..20;
    pub const IP6_NEXT_HEADER: usize = 20;
    pub const IP6_SRC: Range<usize> = 22..38;
    pub const IP6_DST: Range<usize> = 38..54;

    // TCP, relative to the start of the TCP header.
    pub const TCP_SRC_PORT: Range<usize> = 0..2;
    pub const TCP_DST_PORT: Range<usize> = 2..4;
    pub const TCP_SEQ: Range<usize> = 4..8;
    pub const TCP_ACK: Range<usize> = 8..12;
    pub const TCP_DATA_OFFSET: usize = 12;
    pub const TCP_FLAGS: usize = 13;
    pub const TCP_WINDOW: Range<usize> = 14..16;
    pub const TCP_CHECKSUM: Range<usize> = 16..18;
    pub const TCP_MIN_HEADER_LEN: usize = 20;

    // TCP option kinds (RFC 9293 §3.2, RFC 2018).
    pub const OPT_END: u8 = 0;
    pub const OPT_NOP: u8 = 1;
    pub const OPT_SACK_PERMITTED: u8 = 4;
    pub const OPT_SACK: u8 = 5;
}

/// Offsets, within a TCP header, of the fields a re-sent copy of a segment gets anew
/// (`conn/recovery/`).
pub(crate) mod tcp_field {
    pub use super::field::{TCP_ACK as ACK, TCP_CHECKSUM as CHECKSUM, TCP_WINDOW as WINDOW};
}

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// IP protocol number of TCP.
pub const IP_PROTOCOL_TCP: u8 = 6;

/// TCP flag bits (RFC 9293 §3.1).
pub mod flags {
    /// FIN: no more data from sender.
    pub const FIN: u8 = 0x01;
    /// SYN: synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// RST: reset the connection.
    pub const RST: u8 = 0x04;
    /// PSH: push.
    pub const PSH: u8 = 0x08;
    /// ACK: the acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
}

/// Why a frame is not an unfragmented TCP segment; the frame then goes to the control
/// bucket. Not a wire error: ARP and ICMP land here by design.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotTcp {
    /// Shorter than the headers it announces.
    Truncated,
    /// Ethertype is neither IPv4 nor IPv6 (ARP, a VLAN tag, ...).
    NotIp {
        /// The frame's ethertype.
        ethertype: u16,
    },
    /// IP version field does not match the ethertype, or an IPv4 header length is below
    /// 20 bytes.
    BadIpHeader,
    /// IP carrying another protocol (ICMP, UDP, ...), or IPv6 with an extension header
    /// first (the next header number).
    NotTcp {
        /// The IP protocol number.
        protocol: u8,
    },
    /// A fragment: a non-first fragment has no TCP header, and a first one is incomplete.
    Fragment,
    /// The TCP data offset or the IP total length do not fit the frame (only
    /// [`SegmentRepr::parse`] checks these).
    BadTcpHeader,
}

impl fmt::Display for NotTcp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NotTcp::Truncated => write!(f, "frame shorter than its headers"),
            NotTcp::NotIp { ethertype } => {
                write!(f, "ethertype {ethertype:#06x} is neither IPv4 nor IPv6")
            }
            NotTcp::BadIpHeader => write!(f, "bad IP version or IPv4 header length"),
            NotTcp::NotTcp { protocol } => write!(f, "IP protocol {protocol} is not TCP"),
            NotTcp::Fragment => write!(f, "IPv4 fragment"),
            NotTcp::BadTcpHeader => write!(f, "TCP header or IP length inconsistent"),
        }
    }
}

impl std::error::Error for NotTcp {}

/// Read-only view of an Ethernet frame carrying a TCP segment over IPv4 or IPv6.
///
/// Once [`TcpFrame::new_checked`] succeeds no accessor can panic: the Ethernet header,
/// the whole IP header (IPv4 with options, or IPv6's 40 bytes) and the first 20 bytes of
/// TCP are in the buffer.
#[derive(Debug, Clone, Copy)]
pub struct TcpFrame<T: AsRef<[u8]>> {
    buffer: T,
    /// Offset of the TCP header in the frame (14 + IPv4 header length, or 54).
    tcp_offset: usize,
    /// The segment travels over IPv6.
    ipv6: bool,
}

impl<T: AsRef<[u8]>> TcpFrame<T> {
    /// Checks the headers' lengths and kinds; use for bytes from the network.
    ///
    /// # Errors
    /// [`NotTcp`] tells why the frame is not an unfragmented IPv4 TCP segment.
    pub fn new_checked(buffer: T) -> Result<Self, NotTcp> {
        let (tcp_offset, ipv6) = Self::check_len(buffer.as_ref())?;
        Ok(TcpFrame {
            buffer,
            tcp_offset,
            ipv6,
        })
    }

    /// Returns the TCP header offset and whether it is IPv6, after checking every length
    /// this view reads.
    fn check_len(frame: &[u8]) -> Result<(usize, bool), NotTcp> {
        if frame.len() < field::ETH_HEADER_LEN {
            return Err(NotTcp::Truncated);
        }
        let ethertype = read_u16(&frame[field::ETHERTYPE]);
        match ethertype {
            ETHERTYPE_IPV4 => Self::check_ipv4(frame).map(|offset| (offset, false)),
            ETHERTYPE_IPV6 => Self::check_ipv6(frame).map(|offset| (offset, true)),
            _ => Err(NotTcp::NotIp { ethertype }),
        }
    }

    fn check_ipv6(frame: &[u8]) -> Result<usize, NotTcp> {
        if frame.len() < field::IP6_DST.end {
            return Err(NotTcp::Truncated);
        }
        if frame[field::IP6_VERSION] >> 4 != 6 {
            return Err(NotTcp::BadIpHeader);
        }
        let next_header = frame[field::IP6_NEXT_HEADER];
        if next_header != IP_PROTOCOL_TCP {
            return Err(NotTcp::NotTcp {
                protocol: next_header,
            });
        }
        let tcp_offset = field::IP6_DST.end;
        if frame.len() < tcp_offset + field::TCP_MIN_HEADER_LEN {
            return Err(NotTcp::Truncated);
        }
        Ok(tcp_offset)
    }

    fn check_ipv4(frame: &[u8]) -> Result<usize, NotTcp> {
        if frame.len() < field::IP_DST.end {
            return Err(NotTcp::Truncated);
        }
        let ver_ihl = frame[field::IP_VER_IHL];
        let ihl_bytes = usize::from(ver_ihl & 0x0f) * 4;
        if ver_ihl >> 4 != 4 || ihl_bytes < 20 {
            return Err(NotTcp::BadIpHeader);
        }
        let protocol = frame[field::IP_PROTOCOL];
        if protocol != IP_PROTOCOL_TCP {
            return Err(NotTcp::NotTcp { protocol });
        }
        // More-fragments flag (0x2000) or a non-zero fragment offset (low 13 bits).
        if read_u16(&frame[field::IP_FLAGS_FRAG]) & 0x3fff != 0 {
            return Err(NotTcp::Fragment);
        }
        let tcp_offset = field::ETH_HEADER_LEN + ihl_bytes;
        if frame.len() < tcp_offset + field::TCP_MIN_HEADER_LEN {
            return Err(NotTcp::Truncated);
        }
        Ok(tcp_offset)
    }

    /// Ethernet source address.
    pub fn src_mac(&self) -> [u8; 6] {
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&self.buffer.as_ref()[field::ETH_SRC]);
        mac
    }

    /// True for a segment over IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.ipv6
    }

    /// IP source address.
    pub fn src_addr(&self) -> IpAddress {
        self.addr(field::IP_SRC, field::IP6_SRC)
    }

    /// IP destination address.
    pub fn dst_addr(&self) -> IpAddress {
        self.addr(field::IP_DST, field::IP6_DST)
    }

    fn addr(&self, v4: core::ops::Range<usize>, v6: core::ops::Range<usize>) -> IpAddress {
        let bytes = self.buffer.as_ref();
        if self.ipv6 {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&bytes[v6]);
            IpAddress::Ipv6(Ipv6Address::from(octets))
        } else {
            IpAddress::Ipv4(Ipv4Address::from_octets(read_4(&bytes[v4])))
        }
    }

    /// TCP source port.
    pub fn src_port(&self) -> u16 {
        read_u16(&self.tcp()[field::TCP_SRC_PORT])
    }

    /// TCP destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(&self.tcp()[field::TCP_DST_PORT])
    }

    /// Both ports as one word: the source port in the high half, the destination port in
    /// the low half (for a received segment, the peer's and ours).
    pub fn ports(&self) -> u32 {
        let tcp = self.tcp();
        u32::from_be_bytes([tcp[0], tcp[1], tcp[2], tcp[3]])
    }

    /// TCP flags byte (CWR ECE URG ACK PSH RST SYN FIN); see [`flags`].
    pub fn flags(&self) -> u8 {
        self.tcp()[field::TCP_FLAGS]
    }

    /// True for a connection request: SYN set, ACK and RST clear.
    pub fn is_syn(&self) -> bool {
        self.flags() & (flags::SYN | flags::ACK | flags::RST) == flags::SYN
    }

    /// Offset of the TCP header in the frame.
    pub fn tcp_offset(&self) -> usize {
        self.tcp_offset
    }

    fn tcp(&self) -> &[u8] {
        &self.buffer.as_ref()[self.tcp_offset..]
    }
}

/// Most SACK blocks one segment carries (40 bytes of options: 2 + 4 × 8).
pub const MAX_SACK_BLOCKS: usize = 4;

/// The fields of a TCP segment that loss recovery follows (RFC 9293 §3.1; SACK, RFC 2018).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRepr {
    /// Sequence number of the first octet (of the SYN, if set).
    pub seq_number: u32,
    /// Acknowledgment number, if the ACK flag is set.
    pub ack_number: Option<u32>,
    /// The flags byte; see [`flags`].
    pub flags: u8,
    /// The window field as sent (not scaled).
    pub window_len: u16,
    /// Payload octets (from the IP total length, so Ethernet padding is not counted).
    pub payload_len: usize,
    /// The SACK-permitted option is present (SYN segments).
    pub sack_permitted: bool,
    /// SACK blocks `(left, right)` in the order they appear; `sack_len` of them are valid.
    pub sack: [(u32, u32); MAX_SACK_BLOCKS],
    /// Number of valid entries in `sack`.
    pub sack_len: usize,
}

impl SegmentRepr {
    /// Reads the segment in `frame`: checks the TCP data offset and the IP total length
    /// against the frame, and walks the options (a malformed option ends the walk; what was
    /// read stays). Use for bytes from the network.
    ///
    /// # Errors
    /// [`NotTcp::BadTcpHeader`] when the header lengths do not fit the frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &TcpFrame<T>) -> Result<Self, NotTcp> {
        let bytes = frame.buffer.as_ref();
        let tcp_offset = frame.tcp_offset;
        let ip_header_len = tcp_offset - field::ETH_HEADER_LEN;
        // IPv4's total length, or IPv6's payload length and its fixed header.
        let ip_len = if frame.ipv6 {
            usize::from(read_u16(&bytes[field::IP6_PAYLOAD_LEN])) + ip_header_len
        } else {
            usize::from(read_u16(&bytes[field::IP_TOTAL_LEN]))
        };
        let tcp = &bytes[tcp_offset..];
        let header_len = usize::from(tcp[field::TCP_DATA_OFFSET] >> 4) * 4;
        if header_len < field::TCP_MIN_HEADER_LEN
            || header_len > tcp.len()
            || ip_len > bytes.len() - field::ETH_HEADER_LEN
            || ip_len < ip_header_len + header_len
        {
            return Err(NotTcp::BadTcpHeader);
        }
        let flags = tcp[field::TCP_FLAGS];
        let mut repr = SegmentRepr {
            seq_number: read_u32(&tcp[field::TCP_SEQ]),
            ack_number: (flags & flags::ACK != 0).then(|| read_u32(&tcp[field::TCP_ACK])),
            flags,
            window_len: read_u16(&tcp[field::TCP_WINDOW]),
            payload_len: ip_len - ip_header_len - header_len,
            sack_permitted: false,
            sack: [(0, 0); MAX_SACK_BLOCKS],
            sack_len: 0,
        };
        repr.read_options(&tcp[field::TCP_MIN_HEADER_LEN..header_len]);
        Ok(repr)
    }

    fn read_options(&mut self, mut options: &[u8]) {
        while let Some(&kind) = options.first() {
            match kind {
                field::OPT_END => return,
                field::OPT_NOP => {
                    options = &options[1..];
                    continue;
                }
                _ => {}
            }
            let Some(&len) = options.get(1) else { return };
            let len = usize::from(len);
            if len < 2 || len > options.len() {
                return;
            }
            let body = &options[2..len];
            match kind {
                field::OPT_SACK_PERMITTED => self.sack_permitted = true,
                field::OPT_SACK => {
                    // 40 bytes of options hold four blocks at most, however many SACK
                    // options carry them; more are not read.
                    let room = MAX_SACK_BLOCKS - self.sack_len;
                    for block in body.chunks_exact(8).take(room) {
                        self.sack[self.sack_len] = (read_u32(&block[..4]), read_u32(&block[4..]));
                        self.sack_len += 1;
                    }
                }
                _ => {}
            }
            options = &options[len..];
        }
    }

    /// Sequence space the segment takes: payload, plus one each for SYN and FIN.
    pub fn segment_len(&self) -> u32 {
        self.payload_len as u32
            + u32::from(self.flags & flags::SYN != 0)
            + u32::from(self.flags & flags::FIN != 0)
    }

    /// The SACK blocks received.
    pub fn sack_blocks(&self) -> &[(u32, u32)] {
        &self.sack[..self.sack_len]
    }
}

/// The ethertype of a frame, or `None` if it is shorter than an Ethernet header.
pub fn ethertype(frame: &[u8]) -> Option<u16> {
    frame.get(field::ETHERTYPE).map(read_u16)
}

#[inline]
fn read_u16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

#[inline]
fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(read_4(bytes))
}

#[inline]
fn read_4(bytes: &[u8]) -> [u8; 4] {
    [bytes[0], bytes[1], bytes[2], bytes[3]]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A SYN from 10.77.0.1:40000 to 10.77.0.2:11211, captured from a Linux 6.x kernel
    /// through a TAP device in a test namespace (MSS 1460, SACK-permitted, timestamps,
    /// window scale 10).
    pub(crate) static SYN_FRAME: [u8; 74] = [
        0x02, 0x00, 0x00, 0x4d, 0x00, 0x02, 0x3e, 0xef, 0x83, 0x9e, 0xc7, 0xf3, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x3c, 0x89, 0xf7, 0x40, 0x00, 0x40, 0x06, 0x9c, 0x28, 0x0a, 0x4d, 0x00,
        0x01, 0x0a, 0x4d, 0x00, 0x02, //
        0x9c, 0x40, 0x2b, 0xcb, 0xfe, 0xb2, 0x5b, 0xce, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0xd7, 0x32, 0x00, 0x00, //
        0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x8f, 0x83, 0xaf, 0x2c, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x03, 0x03, 0x0a,
    ];

    /// An ARP request "who has 10.77.0.2, tell 10.77.0.1", captured the same way.
    pub(crate) static ARP_REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x26, 0x22, 0x9e, 0x82, 0xff, 0xda, 0x08, 0x06, //
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x26, 0x22, 0x9e, 0x82, 0xff, 0xda, 0x0a,
        0x4d, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x4d, 0x00, 0x02,
    ];

    /// An ICMP echo request 10.77.0.1 -> 10.77.0.2 (8 bytes of payload).
    static ICMP_ECHO: [u8; 50] = [
        0x02, 0x00, 0x00, 0x4d, 0x00, 0x02, 0x5a, 0x1c, 0x33, 0x90, 0x2e, 0x11, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x24, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, //
        10, 77, 0, 1, 10, 77, 0, 2, //
        0x08, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 1, 2, 3, 4, 5, 6, 7, 8,
    ];

    /// A SYN from [fd77::1]:40000 to [fd77::2]:11211, captured from a Linux 6.18 kernel on
    /// a veth in a test namespace (MSS 1440, SACK-permitted, timestamps, window scale 10).
    pub(crate) static SYN6_FRAME: [u8; 94] = [
        0x02, 0x6d, 0x00, 0x00, 0x00, 0x02, 0x26, 0x22, 0x9e, 0x82, 0xff, 0xda, 0x86, 0xdd, //
        0x60, 0x00, 0x69, 0xf7, 0x00, 0x28, 0x06, 0x40, //
        0xfd, 0x77, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, //
        0xfd, 0x77, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, //
        0x9c, 0x40, 0x2b, 0xcb, 0xc4, 0xef, 0x6d, 0xd8, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfd,
        0x20, 0x07, 0x54, 0x00, 0x00, //
        0x02, 0x04, 0x05, 0xa0, 0x04, 0x02, 0x08, 0x0a, 0xed, 0x43, 0x60, 0x92, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x03, 0x03, 0x0a,
    ];

    #[test]
    fn captured_frames_are_what_smoltcp_reads() {
        use smoltcp::wire::{ArpPacket, EthernetFrame, IpAddress, Ipv4Packet, TcpPacket};
        let eth = EthernetFrame::new_checked(&SYN_FRAME[..]).unwrap();
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        let (src, dst) = (
            IpAddress::Ipv4(ip.src_addr()),
            IpAddress::Ipv4(ip.dst_addr()),
        );
        assert!(tcp.verify_checksum(&src, &dst));
        let view = TcpFrame::new_checked(&SYN_FRAME[..]).unwrap();
        assert_eq!(
            (view.src_port(), view.dst_port()),
            (tcp.src_port(), tcp.dst_port())
        );
        assert_eq!(view.is_syn(), tcp.syn() && !tcp.ack());
        let arp = EthernetFrame::new_checked(&ARP_REQUEST[..]).unwrap();
        assert!(ArpPacket::new_checked(arp.payload()).is_ok());
        let eth = EthernetFrame::new_checked(&SYN6_FRAME[..]).unwrap();
        let ip = smoltcp::wire::Ipv6Packet::new_checked(eth.payload()).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        let (src, dst) = (
            IpAddress::Ipv6(ip.src_addr()),
            IpAddress::Ipv6(ip.dst_addr()),
        );
        assert!(tcp.verify_checksum(&src, &dst));
        let view = TcpFrame::new_checked(&SYN6_FRAME[..]).unwrap();
        assert_eq!((view.src_addr(), view.dst_addr()), (src, dst));
        assert_eq!(view.dst_port(), tcp.dst_port());
    }

    #[test]
    fn syn_fields() {
        let frame = TcpFrame::new_checked(&SYN_FRAME[..]).unwrap();
        assert_eq!(frame.src_addr(), IpAddress::v4(10, 77, 0, 1));
        assert_eq!(frame.dst_addr(), IpAddress::v4(10, 77, 0, 2));
        assert!(!frame.is_ipv6());
        assert_eq!(frame.src_port(), 40000);
        assert_eq!(frame.dst_port(), 11211);
        assert_eq!(frame.src_mac(), [0x3e, 0xef, 0x83, 0x9e, 0xc7, 0xf3]);
        assert_eq!(frame.flags(), flags::SYN);
        assert!(frame.is_syn());
    }

    #[test]
    fn ipv6_syn_fields() {
        let frame = TcpFrame::new_checked(&SYN6_FRAME[..]).unwrap();
        assert!(frame.is_ipv6());
        assert_eq!(frame.src_addr(), IpAddress::v6(0xfd77, 0, 0, 0, 0, 0, 0, 1));
        assert_eq!(frame.dst_addr(), IpAddress::v6(0xfd77, 0, 0, 0, 0, 0, 0, 2));
        assert_eq!((frame.src_port(), frame.dst_port()), (40000, 11211));
        assert_eq!(frame.src_mac(), [0x26, 0x22, 0x9e, 0x82, 0xff, 0xda]);
        assert!(frame.is_syn());
        // Every truncation before the 20 bytes of TCP is refused.
        for n in 0..54 + 20 {
            assert_eq!(
                TcpFrame::new_checked(&SYN6_FRAME[..n]).unwrap_err(),
                NotTcp::Truncated,
                "len {n}"
            );
        }
        // An extension header first (hop-by-hop), ICMPv6, or a version that is not 6.
        let mut hop_by_hop = SYN6_FRAME;
        hop_by_hop[20] = 0;
        assert_eq!(
            TcpFrame::new_checked(&hop_by_hop[..]).unwrap_err(),
            NotTcp::NotTcp { protocol: 0 }
        );
        let mut icmp = SYN6_FRAME;
        icmp[20] = 58;
        assert_eq!(
            TcpFrame::new_checked(&icmp[..]).unwrap_err(),
            NotTcp::NotTcp { protocol: 58 }
        );
        let mut v4 = SYN6_FRAME;
        v4[14] = 0x45;
        assert_eq!(
            TcpFrame::new_checked(&v4[..]).unwrap_err(),
            NotTcp::BadIpHeader
        );
    }

    #[test]
    fn syn_ack_and_rst_are_not_connection_requests() {
        for extra in [flags::ACK, flags::RST] {
            let mut bytes = SYN_FRAME;
            bytes[14 + 20 + 13] |= extra;
            let frame = TcpFrame::new_checked(&bytes[..]).unwrap();
            assert!(!frame.is_syn(), "flags {:#04x}", frame.flags());
        }
    }

    #[test]
    fn ip_options_move_the_tcp_header() {
        // Same SYN with a 4-byte IP option (NOP NOP NOP EOL): IHL 6.
        let mut bytes = Vec::from(&SYN_FRAME[..34]);
        bytes[14] = 0x46;
        bytes.extend_from_slice(&[1, 1, 1, 0]);
        bytes.extend_from_slice(&SYN_FRAME[34..]);
        let frame = TcpFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!(frame.src_port(), 40000);
        assert_eq!(frame.dst_port(), 11211);
        assert!(frame.is_syn());
    }

    #[test]
    fn arp_and_icmp_are_control() {
        assert_eq!(
            TcpFrame::new_checked(&ARP_REQUEST[..]).unwrap_err(),
            NotTcp::NotIp {
                ethertype: ETHERTYPE_ARP
            }
        );
        assert_eq!(ethertype(&ARP_REQUEST), Some(ETHERTYPE_ARP));
        assert_eq!(
            TcpFrame::new_checked(&ICMP_ECHO[..]).unwrap_err(),
            NotTcp::NotTcp { protocol: 1 }
        );
    }

    #[test]
    fn fragments_are_control() {
        let mut more = SYN_FRAME;
        more[20] = 0x20; // MF
        assert_eq!(
            TcpFrame::new_checked(&more[..]).unwrap_err(),
            NotTcp::Fragment
        );
        let mut later = SYN_FRAME;
        later[20] = 0x00;
        later[21] = 0x10; // offset 16 * 8 bytes
        assert_eq!(
            TcpFrame::new_checked(&later[..]).unwrap_err(),
            NotTcp::Fragment
        );
    }

    #[test]
    fn bad_ip_header() {
        let mut v6 = SYN_FRAME;
        v6[14] = 0x65;
        assert_eq!(
            TcpFrame::new_checked(&v6[..]).unwrap_err(),
            NotTcp::BadIpHeader
        );
        let mut short_ihl = SYN_FRAME;
        short_ihl[14] = 0x44;
        assert_eq!(
            TcpFrame::new_checked(&short_ihl[..]).unwrap_err(),
            NotTcp::BadIpHeader
        );
    }

    #[test]
    fn every_truncation_is_rejected_without_panic() {
        // The view needs 14 + 20 + 20 bytes; TCP options are smoltcp's business.
        for n in 0..54 {
            assert_eq!(
                TcpFrame::new_checked(&SYN_FRAME[..n]).unwrap_err(),
                NotTcp::Truncated,
                "len {n}"
            );
        }
        for n in 54..=SYN_FRAME.len() {
            assert!(TcpFrame::new_checked(&SYN_FRAME[..n]).is_ok(), "len {n}");
        }
        for n in 0..ARP_REQUEST.len() {
            assert!(TcpFrame::new_checked(&ARP_REQUEST[..n]).is_err());
        }
        for n in 0..ICMP_ECHO.len() {
            assert!(TcpFrame::new_checked(&ICMP_ECHO[..n]).is_err());
        }
        assert_eq!(ethertype(&SYN_FRAME[..13]), None);
    }

    #[test]
    fn segment_fields_of_a_captured_syn() {
        let frame = TcpFrame::new_checked(&SYN_FRAME[..]).unwrap();
        let seg = SegmentRepr::parse(&frame).unwrap();
        assert_eq!(seg.seq_number, 0xfeb2_5bce);
        assert_eq!(seg.ack_number, None);
        assert_eq!(seg.flags, flags::SYN);
        assert_eq!(seg.window_len, 0xfaf0);
        assert_eq!(seg.payload_len, 0);
        assert!(seg.sack_permitted);
        assert_eq!(seg.sack_blocks(), &[]);
        assert_eq!(seg.segment_len(), 1);
    }

    #[test]
    fn segment_fields_of_a_captured_ipv6_syn() {
        let frame = TcpFrame::new_checked(&SYN6_FRAME[..]).unwrap();
        let seg = SegmentRepr::parse(&frame).unwrap();
        assert_eq!(seg.seq_number, 0xc4ef_6dd8);
        assert_eq!((seg.ack_number, seg.flags), (None, flags::SYN));
        assert_eq!((seg.payload_len, seg.segment_len()), (0, 1));
        assert!(seg.sack_permitted);
        // IPv6's payload length, not IPv4's total length, bounds the segment.
        let mut data = SYN6_FRAME.to_vec();
        data.extend_from_slice(b"hello");
        data[18..20].copy_from_slice(&(40u16 + 5).to_be_bytes());
        let seg = SegmentRepr::parse(&TcpFrame::new_checked(&data[..]).unwrap()).unwrap();
        assert_eq!(seg.payload_len, 5);
        data[18..20].copy_from_slice(&(40u16 + 6).to_be_bytes());
        assert_eq!(
            SegmentRepr::parse(&TcpFrame::new_checked(&data[..]).unwrap()),
            Err(NotTcp::BadTcpHeader)
        );
    }

    /// An ACK from the client with `options` and `payload`, in a frame padded to `pad_to`.
    fn ack_frame(options: &[u8], payload: &[u8], pad_to: usize) -> Vec<u8> {
        let mut frame = SYN_FRAME[..34].to_vec();
        let tcp_len = 20 + options.len();
        let ip_len = 20 + tcp_len + payload.len();
        frame[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
        frame.extend_from_slice(&SYN_FRAME[34..46]); // ports, seq, ack
        frame[42..46].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        frame.push(((tcp_len / 4) as u8) << 4);
        frame.push(flags::ACK | flags::PSH);
        frame.extend_from_slice(&[0x01, 0xf5, 0, 0, 0, 0]); // window, checksum, urgent
        frame.extend_from_slice(options);
        frame.extend_from_slice(payload);
        frame.resize(frame.len().max(pad_to), 0);
        frame
    }

    #[test]
    fn sack_blocks_and_payload_length() {
        let mut options = vec![1, 1, 5, 2 + 8 * 3];
        for (l, r) in [(10u32, 20u32), (30, 40), (u32::MAX - 5, 3)] {
            options.extend_from_slice(&l.to_be_bytes());
            options.extend_from_slice(&r.to_be_bytes());
        }
        let bytes = ack_frame(&options, b"get k\r\n", 0);
        let seg = SegmentRepr::parse(&TcpFrame::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(seg.ack_number, Some(0x0102_0304));
        assert_eq!(seg.window_len, 0x01f5);
        assert_eq!(seg.payload_len, 7);
        assert_eq!(seg.segment_len(), 7);
        assert_eq!(seg.sack_blocks(), &[(10, 20), (30, 40), (u32::MAX - 5, 3)]);
        // Ethernet padding after a short segment is not payload.
        let padded = ack_frame(&[], &[], 60);
        assert_eq!(padded.len(), 60);
        let seg = SegmentRepr::parse(&TcpFrame::new_checked(&padded[..]).unwrap()).unwrap();
        assert_eq!((seg.payload_len, seg.sack_len), (0, 0));
    }

    #[test]
    fn blocks_of_several_sack_options_are_all_read() {
        let mut options = Vec::new();
        for (l, r) in [(10u32, 20u32), (30, 40), (50, 60), (70, 80)] {
            options.extend_from_slice(&[5, 10]);
            options.extend_from_slice(&l.to_be_bytes());
            options.extend_from_slice(&r.to_be_bytes());
        }
        let bytes = ack_frame(&options, &[], 0);
        let seg = SegmentRepr::parse(&TcpFrame::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(seg.sack_blocks(), &[(10, 20), (30, 40), (50, 60), (70, 80)]);
    }

    #[test]
    fn malformed_options_end_the_walk_and_bad_lengths_are_refused() {
        // A SACK option whose length runs past the header: nothing read.
        let bytes = ack_frame(&[5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0], &[], 0);
        let seg = SegmentRepr::parse(&TcpFrame::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(seg.sack_len, 0);
        // A zero-length option ends the walk too.
        let bytes = ack_frame(&[8, 0, 1, 1], &[], 0);
        assert!(SegmentRepr::parse(&TcpFrame::new_checked(&bytes[..]).unwrap()).is_ok());
        // Data offset below 5, beyond the frame, or an IP length beyond the frame or
        // below the headers.
        let good = ack_frame(&[1, 1, 1, 1], b"x", 0);
        let mut cases = Vec::new();
        for offset in [0u8, 4, 15] {
            let mut bad = good.clone();
            bad[46] = offset << 4;
            cases.push(bad);
        }
        for ip_len in [good.len() as u16 - 13, 39] {
            let mut bad = good.clone();
            bad[16..18].copy_from_slice(&ip_len.to_be_bytes());
            cases.push(bad);
        }
        for bad in cases {
            let frame = TcpFrame::new_checked(&bad[..]).unwrap();
            assert_eq!(SegmentRepr::parse(&frame), Err(NotTcp::BadTcpHeader));
        }
        // Every truncation of a good frame: refused or read, never a panic.
        for n in 0..good.len() {
            if let Ok(frame) = TcpFrame::new_checked(&good[..n]) {
                assert!(SegmentRepr::parse(&frame).is_err(), "len {n}");
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic sweep over random-looking frames of every short length.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut buf = [0u8; 80];
        for round in 0..20_000 {
            for byte in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x as u8;
            }
            // Steer half the rounds into the IPv4/TCP path.
            if round % 2 == 0 {
                buf[12] = 0x08;
                buf[13] = 0x00;
                buf[23] = IP_PROTOCOL_TCP;
            }
            let len = round % buf.len();
            if let Ok(frame) = TcpFrame::new_checked(&buf[..len]) {
                let _ = (
                    frame.src_addr(),
                    frame.src_port(),
                    frame.dst_port(),
                    frame.flags(),
                    SegmentRepr::parse(&frame),
                );
            }
        }
    }
}
