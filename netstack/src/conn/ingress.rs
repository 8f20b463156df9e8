//! Ingress: frames from the device to the connection they belong to.
//!
//! ```text
//! frame ─▶ Ethernet: to our MAC, broadcast or our solicited-node group?
//!          ├▶ ARP, IPv6 neighbour discovery ─▶ neighbor/ (answer, learn, confirm the gateway)
//!          └▶ demux::TcpFrame ──TCP to our address and port(s)─▶ bucket hash(src ip, src port) ─┐
//!                            └─anything else (ICMP, other ports)─▶ control set ─────────────┤
//!                      Interface::poll_ingress_single(the IP packet, that set) [Medium::Ip] ┘
//! ```
//!
//! A SYN arms a listening socket in its bucket first (`accept.rs`); any other segment is
//! shown to its connection's loss recovery before smoltcp sees it (`recovery/`). While
//! the table has connections it opened (`client.rs`), a segment to another port of ours
//! goes to the bucket of hash(src ip, dst port) if a connection there matches its peer and
//! both ports ([`ConnTable::client_ingress`]); only then does it cost more than the
//! port check. smoltcp
//! runs with `Medium::Ip`: the table answers ARP and neighbour solicitations for its own
//! addresses itself, and its neighbour cache learns only from validated ARP and NDP and
//! from completed handshakes (`neighbor/`).
//!
//! **Look-ahead.** At many connections a segment's connection is out of cache when its
//! frame comes, and its processing would wait on miss after miss: the bucket, the slot,
//! smoltcp's socket. Devices that read frames in batches show the frames they hold but
//! have not handed out yet ([`RxPeek`]: TAP, AF_XDP, the in-memory link), so before each
//! frame [`ConnTable::poll_ingress`] reads the 4-tuple of the frames after it and
//! prefetches one level deeper per frame, each level's address read from the level that
//! the frame before brought into cache: the bucket of the frame three ahead, the slots of
//! the one two ahead (the lines the lookup and the ACK read), the socket of the next one
//! (and the line before it, the set's entry). A frame that is not a segment to us costs a
//! header read; nothing is prefetched for it. `conn::tests::ingress_with_look_ahead_does_what_it_does_without`
//! shows that looking ahead changes nothing but the timing.

use smoltcp::phy::{Device, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;

use super::recovery::BucketPeers;
use super::{Bucket, ConnTable, find_peer};
use crate::demux::{self, SegmentRepr, TcpFrame};
use crate::neighbor::{
    self, ARP_FRAME_LEN, ArpOut, ETHERNET_HEADER_LEN, NDP_FRAME_LEN, NdpIgnored, NdpOut,
};
use smoltcp::iface::SocketSet;

use crate::view::{Framing, IpFrame, NoPeers, PeerMac};
use crate::{Poll, RxPeek};

/// Asks the CPU to bring the cache line holding `at` into its caches (a hint: nothing
/// happens elsewhere than on x86-64).
#[inline]
pub(super) fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults,
        // whatever the address (callers' point into a live value or the line before one);
        // SSE, which it needs, is part of every x86-64 CPU.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at.cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Prefetches the socket at `at` (a [`Slot::socket_at`]) and the line before it, where its
/// set keeps the entry's tag and metadata: smoltcp's ingress reads them to find the socket
/// that accepts a segment, then the socket's state throughout.
#[inline]
pub(super) fn prefetch_socket(at: usize) {
    let start = (at as *const u8).wrapping_sub(64);
    for offset in (0..size_of::<tcp::Socket>() + 64).step_by(64) {
        prefetch_line(start.wrapping_add(offset));
    }
}

impl<S: Default> ConnTable<S> {
    /// Reads and processes up to `budget` received frames, one `poll_ingress_single` each
    /// against the socket set the frame belongs to.
    pub fn poll_ingress<D: Device + RxPeek>(
        &mut self,
        now: Instant,
        device: &mut D,
        budget: usize,
    ) -> Poll {
        self.now = now;
        let mut frames = 0;
        while frames < budget {
            self.look_ahead(device);
            let Some((rx, tx)) = device.receive(now) else {
                break;
            };
            frames += 1;
            rx.consume(|frame| self.ingress_frame(now, frame, tx));
        }
        if frames == 0 {
            Poll::Idle
        } else {
            Poll::Progress
        }
    }

    /// Prefetches, for the frames after the one about to be processed, what their
    /// processing touches first, one step further each frame (see "Look-ahead" in the
    /// module docs): the bucket of the frame three ahead, the slots of the one two ahead
    /// (whose bucket is in cache by now), the sockets of the next (whose slots are).
    fn look_ahead<D: RxPeek>(&self, device: &D) {
        if let Some(Some(bucket)) = device.peek_rx(3, |frame| self.peek_bucket(frame)) {
            prefetch_line((&raw const self.buckets[bucket]).cast());
        }
        if let Some(Some(bucket)) = device.peek_rx(2, |frame| self.peek_bucket(frame)) {
            for slot in &self.buckets[bucket].slots {
                prefetch_line((&raw const slot.peer).cast());
                slot.flight.prefetch();
            }
        }
        if let Some(Some(bucket)) = device.peek_rx(1, |frame| self.peek_bucket(frame)) {
            for slot in &self.buckets[bucket].slots {
                if slot.handle.is_some() {
                    prefetch_socket(slot.socket_at);
                }
            }
        }
    }

    /// The bucket a received frame's segment goes to, if it is a TCP segment to one of our
    /// ports (any bytes: a frame that is not such a segment has none).
    fn peek_bucket(&self, frame: &[u8]) -> Option<usize> {
        let tcp = TcpFrame::new_checked(frame).ok()?;
        let port = tcp.dst_port();
        if port == self.config.port || Some(port) == self.config.extra_port {
            Some(self.bucket_of(tcp.src_addr(), tcp.src_port()))
        } else if self.spare.ports.in_use > 0 {
            // Perhaps a segment of a connection this table opened (`client.rs`).
            Some(self.bucket_of(tcp.src_addr(), port))
        } else {
            None
        }
    }

    fn ingress_frame<T: TxToken>(&mut self, now: Instant, frame: &[u8], tx: T) {
        self.stats.frames_in += 1;
        if frame.len() < ETHERNET_HEADER_LEN {
            self.stats.frames_dropped += 1;
            return;
        }
        let mac = |at: usize| {
            [
                frame[at],
                frame[at + 1],
                frame[at + 2],
                frame[at + 3],
                frame[at + 4],
                frame[at + 5],
            ]
        };
        if !self.addrs.takes_frames_to(mac(0)) {
            self.stats.frames_dropped += 1;
            return;
        }
        let src_mac = mac(6);
        match demux::ethertype(frame) {
            Some(demux::ETHERTYPE_ARP) if self.addrs.ipv4.is_some() => {
                self.stats.frames_control += 1;
                self.arp_ingress(frame, tx, now);
                return;
            }
            Some(demux::ETHERTYPE_IPV4) if self.addrs.ipv4.is_some() => {}
            Some(demux::ETHERTYPE_IPV6) if self.addrs.ipv6.is_some() => {
                if let Some(tx) = self.ndp_ingress(frame, tx, now) {
                    return self.ip_ingress(now, frame, src_mac, tx);
                }
                self.stats.frames_control += 1;
                return;
            }
            _ => {
                self.stats.frames_dropped += 1;
                return;
            }
        }
        self.ip_ingress(now, frame, src_mac, tx);
    }

    /// An IPv4 or IPv6 frame to us: a segment of our port to a bucket, anything else to
    /// smoltcp's control set.
    fn ip_ingress<T: TxToken>(&mut self, now: Instant, frame: &[u8], src_mac: [u8; 6], tx: T) {
        let packet = &frame[ETHERNET_HEADER_LEN..];
        let tcp = match TcpFrame::new_checked(frame) {
            Ok(tcp)
                if (tcp.dst_port() == self.config.port
                    || Some(tcp.dst_port()) == self.config.extra_port)
                    && self.addrs.is_ours(tcp.dst_addr()) =>
            {
                tcp
            }
            Ok(tcp) if self.spare.ports.in_use > 0 && self.addrs.is_ours(tcp.dst_addr()) => {
                return self.client_ingress(now, frame, &tcp, src_mac, tx);
            }
            _ => return self.control_ingress(now, packet, src_mac, tx),
        };
        self.stats.frames_tcp += 1;
        let (src_addr, src_port) = (tcp.src_addr(), tcp.src_port());
        let bucket = self.bucket_of(src_addr, src_port);
        let armed = if tcp.is_syn() {
            self.arm_for_syn(
                bucket,
                src_addr,
                src_port,
                src_mac,
                tcp.dst_addr(),
                tcp.dst_port(),
            )
        } else {
            self.recovery_ingress(bucket, &tcp, now);
            None
        };
        let Bucket { sockets, slots, .. } = &mut self.buckets[bucket];
        let mut peers = BucketPeers {
            slots: slots.as_mut_slice(),
            recovery: &self.recovery,
            stats: &mut self.stats.recovery,
            now,
        };
        let mut view = IpFrame {
            packet: Some(packet),
            tx: Some(tx),
            caps: &self.caps,
            framing: Framing::new(
                &self.addrs,
                &self.gateways,
                &mut self.neighbors,
                &mut peers,
                Some(src_mac),
            ),
        };
        self.iface.poll_ingress_single(now, &mut view, sockets);
        self.stats.frames_out += view.framing.sent;
        self.stats.unresolved += view.framing.unresolved;
        if let Some(slot) = armed {
            self.after_syn(bucket, slot);
        }
        self.mark_dirty(bucket);
        self.mark_touched(bucket);
    }

    /// A packet that belongs to no connection: smoltcp answers it from the control set
    /// (ICMP echo, an RST to a closed port).
    fn control_ingress<T: TxToken>(
        &mut self,
        now: Instant,
        packet: &[u8],
        src_mac: [u8; 6],
        tx: T,
    ) {
        self.stats.frames_control += 1;
        let mut peers = NoPeers;
        let mut view = IpFrame {
            packet: Some(packet),
            tx: Some(tx),
            caps: &self.caps,
            framing: Framing::new(
                &self.addrs,
                &self.gateways,
                &mut self.neighbors,
                &mut peers,
                Some(src_mac),
            ),
        };
        self.iface
            .poll_ingress_single(now, &mut view, &mut self.control);
        self.stats.frames_out += view.framing.sent;
        self.stats.unresolved += view.framing.unresolved;
    }

    /// A TCP segment to one of our addresses and a port we do not accept on: to the
    /// connection this table opened from that port, if the peer matches (`client.rs`);
    /// else to the control set. Records the receive stamp when it brought new data.
    fn client_ingress<T: TxToken>(
        &mut self,
        now: Instant,
        frame: &[u8],
        tcp: &TcpFrame<&[u8]>,
        src_mac: [u8; 6],
        tx: T,
    ) {
        let src_addr = tcp.src_addr();
        let bucket = self.bucket_of(src_addr, tcp.dst_port());
        let found = find_peer(&self.buckets[bucket].slots, src_addr, tcp.ports())
            .filter(|peer| self.buckets[bucket].slots[peer.slot].client);
        let packet = &frame[ETHERNET_HEADER_LEN..];
        let Some(PeerMac { slot: index, .. }) = found else {
            return self.control_ingress(now, packet, src_mac, tx);
        };
        self.stats.frames_tcp += 1;
        self.recovery_ingress(bucket, tcp, now);
        let Bucket { sockets, slots, .. } = &mut self.buckets[bucket];
        let slot = &mut slots[index];
        if tcp.is_syn()
            && let Ok(seg) = SegmentRepr::parse(tcp)
        {
            slot.flight.on_syn_ack(seg.sack_permitted);
        }
        if let Some(peer) = slot.peer.as_mut()
            && peer.mac.is_none()
        {
            // The next hop the server's segments come through.
            peer.mac = Some(src_mac);
        }
        let queued = |sockets: &SocketSet<'static>, slot: &super::Slot<S>| {
            slot.handle
                .map_or(0, |handle| sockets.get::<tcp::Socket>(handle).recv_queue())
        };
        let before = queued(sockets, slot);
        let mut peers = BucketPeers {
            slots: slots.as_mut_slice(),
            recovery: &self.recovery,
            stats: &mut self.stats.recovery,
            now,
        };
        let mut view = IpFrame {
            packet: Some(packet),
            tx: Some(tx),
            caps: &self.caps,
            framing: Framing::new(
                &self.addrs,
                &self.gateways,
                &mut self.neighbors,
                &mut peers,
                Some(src_mac),
            ),
        };
        self.iface.poll_ingress_single(now, &mut view, sockets);
        self.stats.frames_out += view.framing.sent;
        self.stats.unresolved += view.framing.unresolved;
        let slot = &mut slots[index];
        if queued(sockets, slot) > before {
            slot.stamps.received = Some(now);
        }
        self.mark_dirty(bucket);
        self.mark_touched(bucket);
    }

    /// Answers an ARP request for our address and learns its validated sender (or the
    /// sender of an ARP reply to us), confirming a gateway; ignores every other ARP frame.
    fn arp_ingress<T: TxToken>(&mut self, frame: &[u8], tx: T, now: Instant) {
        let Some(own) = self.addrs.ipv4 else { return };
        let Ok(input) = neighbor::arp_input(frame, self.addrs.mac, own) else {
            return;
        };
        self.neighbors.learn(input.sender_ip, input.sender_mac);
        self.gateways
            .confirm(input.sender_ip.into(), input.sender_mac, now);
        if !self.unresolved.is_empty() {
            self.retry_unresolved();
        }
        if input.is_request {
            let own_mac = self.addrs.mac;
            tx.consume(ARP_FRAME_LEN, |buf| {
                neighbor::emit_arp(
                    buf,
                    own_mac,
                    own.address(),
                    ArpOut::Reply {
                        to_ip: input.sender_ip,
                        to_mac: input.sender_mac,
                    },
                );
            });
            self.stats.frames_out += 1;
        }
    }

    /// Answers a neighbour solicitation for our address and learns what a validated one,
    /// or an advertisement to us, shows (confirming a gateway); ignores other neighbour
    /// discovery. Returns the transmit token for a frame that is not neighbour discovery.
    fn ndp_ingress<T: TxToken>(&mut self, frame: &[u8], tx: T, now: Instant) -> Option<T> {
        let own = self.addrs.ipv6?;
        let input = match neighbor::ndp_input(frame, self.addrs.mac, own) {
            Ok(input) => input,
            Err(NdpIgnored::NotNdp) => return Some(tx),
            Err(_) => return None,
        };
        if let Some((ip, mac)) = input.learn {
            self.neighbors.learn(ip, mac);
            self.gateways.confirm(ip.into(), mac, now);
            if !self.unresolved.is_empty() {
                self.retry_unresolved();
            }
        }
        if let Some((to_ip, to_mac)) = input.answer {
            let own_mac = self.addrs.mac;
            tx.consume(NDP_FRAME_LEN, |buf| {
                neighbor::emit_ndp(
                    buf,
                    own_mac,
                    own.address(),
                    NdpOut::Advert { to_ip, to_mac },
                );
            });
            self.stats.frames_out += 1;
        }
        None
    }
}
