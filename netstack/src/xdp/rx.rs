//! The receive half of an AF_XDP socket: the rx and fill rings, the batch of packets taken
//! from the rx ring, and multi-buffer packets (a frame spread over several UMEM frames).
//!
//! ```text
//! rx ring ─▶ take(): whole packets only, at most RX_BATCH descriptors
//!   one descriptor (options 0)             ─▶ packet read in place (&[u8] in the UMEM)
//!   a chain: XDP_PKT_CONTD on all but last  ─▶ packet copied into the assembly buffer
//!   a chain cut by the end of the window    ─▶ left in the ring for the next take
//! give_back(): every frame of the last batch ─▶ fill ring (what does not fit waits in `owed`)
//! ```
//!
//! - A packet is handed to smoltcp as one `&[u8]`. A single-descriptor packet, the only kind
//!   when the MTU fits a frame, is borrowed from the UMEM as before. A chain cannot be: in
//!   aligned mode every buffer starts `XDP_PACKET_HEADROOM` into its own frame, so the pieces
//!   are never adjacent, and it is copied, once, into a buffer of the largest frame the MTU
//!   allows (allocated with the device, only when the MTU needs chains).
//! - The kernel publishes a packet's descriptors together, but a batch takes at most
//!   `RX_BATCH` of them, so the last packet of a window may be cut: its descriptors stay in
//!   the ring (not released) and start the next window. A window that is full and still holds
//!   no end of packet is a broken chain: its frames go back to the fill ring and the
//!   descriptors up to the next end of packet are dropped too (`skipping`), counted once.
//! - Every descriptor that names one of our receive frames hands that frame back to the fill
//!   ring after the batch, whether its packet was kept or refused. The fill ring has room for
//!   every receive frame, so `owed` stays empty; if it ever fills, frames wait there and go
//!   first at the next refill, so none is lost.

use super::RX_BATCH;
use super::device::XdpStats;
use super::ring::{Consumer, Producer};
use crate::tap::ETHERNET_HEADER_LEN;

/// Most descriptors one packet may span; a longer chain is dropped. The kernel's own limit
/// is `MAX_SKB_FRAGS + 1` (18 by default), and a window of `RX_BATCH` must hold a whole chain.
pub const MAX_CHAIN: usize = 32;

/// Where the receive frames are and how large a packet may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RxGeometry {
    /// Bytes per UMEM frame.
    pub frame_size: u32,
    /// Receive frames: UMEM frames `0..rx_frames`.
    pub rx_frames: u32,
    /// Largest packet accepted, in bytes (Ethernet header included).
    pub max_len: u32,
    /// True if the socket may receive chains (bound with `XDP_USE_SG`).
    pub chains: bool,
}

/// One packet of the batch: descriptors `first..first + count` of the batch.
#[derive(Debug, Clone, Copy, Default)]
struct Packet {
    first: u8,
    count: u8,
    len: u32,
}

/// The receive half: rings, the current batch, frames owed to the fill ring.
pub(crate) struct RxPath {
    ring: Consumer<libc::xdp_desc>,
    fill: Producer<u64>,
    /// Base of the UMEM mapping (owned by the device, which outlives this).
    umem: *const u8,
    geometry: RxGeometry,
    /// Addresses and lengths of the descriptors taken, in ring order; their frames go back
    /// to the fill ring at the next refill.
    addr: [u64; RX_BATCH],
    len: [u32; RX_BATCH],
    descs: usize,
    /// The packets of the batch that are handed out, in order.
    packets: [Packet; RX_BATCH],
    head: usize,
    filled: usize,
    /// Dropping descriptors up to the next end of packet (the rest of a broken chain).
    skipping: bool,
    /// Frames the fill ring had no room for yet.
    owed: Vec<u64>,
    /// Where chains are assembled; empty when the socket takes no chains.
    assembly: Box<[u8]>,
}

impl RxPath {
    /// The receive half over `ring` and `fill`, reading frames from the UMEM at `umem`.
    pub(crate) fn new(
        ring: Consumer<libc::xdp_desc>,
        fill: Producer<u64>,
        umem: *const u8,
        geometry: RxGeometry,
    ) -> RxPath {
        let assembly = if geometry.chains {
            vec![0u8; geometry.max_len as usize]
        } else {
            Vec::new()
        };
        RxPath {
            ring,
            fill,
            umem,
            geometry,
            addr: [0; RX_BATCH],
            len: [0; RX_BATCH],
            descs: 0,
            packets: [Packet::default(); RX_BATCH],
            head: 0,
            filled: 0,
            skipping: false,
            owed: Vec::with_capacity(geometry.rx_frames as usize),
            assembly: assembly.into_boxed_slice(),
        }
    }

    /// Puts every receive frame on the fill ring (at bind).
    pub(crate) fn give_all(&mut self) {
        let size = u64::from(self.geometry.frame_size);
        self.owed.extend(
            (0..u64::from(self.geometry.rx_frames))
                .rev()
                .map(|i| i * size),
        );
        self.pay_owed();
    }

    /// The fill ring: for its entry count and wakeup flag.
    pub(crate) fn fill(&mut self) -> &mut Producer<u64> {
        &mut self.fill
    }

    /// Packets taken and not yet handed out.
    pub(crate) fn buffered(&self) -> usize {
        self.filled - self.head
    }

    /// Frames waiting for room in the fill ring.
    #[cfg(test)]
    pub(crate) fn owed(&self) -> usize {
        self.owed.len()
    }

    /// Ends the batch: every frame its descriptors named goes back to the fill ring (older
    /// debts first); what does not fit waits for the next call.
    pub(crate) fn give_back(&mut self) {
        let taken = self.descs;
        self.descs = 0;
        self.head = 0;
        self.filled = 0;
        let size = u64::from(self.geometry.frame_size);
        if self.owed.is_empty() {
            if taken == 0 {
                // Nothing to publish: leave the shared producer index (and its cache line)
                // alone.
                return;
            }
            let n = self.fill.free(taken as u32);
            for i in 0..n {
                self.fill.write(i, self.addr[i as usize] / size * size);
            }
            self.fill.submit(n);
            self.owed
                .extend(self.addr[n as usize..taken].iter().map(|a| a / size * size));
        } else {
            self.owed
                .extend(self.addr[..taken].iter().map(|a| a / size * size));
            self.pay_owed();
        }
    }

    fn pay_owed(&mut self) {
        let n = self.fill.free(self.owed.len() as u32);
        if n == 0 {
            return;
        }
        for i in 0..n {
            // `n` <= owed.len(), so there is always one to pop.
            let frame = self.owed.pop().unwrap_or_default();
            self.fill.write(i, frame);
        }
        self.fill.submit(n);
    }

    /// Takes the whole packets among the next `RX_BATCH` descriptors of the rx ring into the
    /// batch (which must have been given back). Returns the number of packets taken.
    pub(crate) fn take(&mut self, stats: &mut XdpStats) -> usize {
        debug_assert_eq!(self.descs, 0, "give_back before take");
        // The batch's room (all of it after give_back), so its arrays cannot overflow.
        let room = RX_BATCH - self.descs;
        let ready = self.ring.available(room as u32) as usize;
        if ready == 0 {
            return 0;
        }
        let g = self.geometry;
        let size = u64::from(g.frame_size);
        let mut at = 0;
        let mut consumed = 0;
        while at < ready {
            let first_desc = self.descs;
            let mut len = 0u32;
            let mut valid = true;
            let mut ended = false;
            let mut next = at;
            while next < ready {
                let desc = self.ring.read(next as u32);
                next += 1;
                let frame = desc.addr / size;
                if frame < u64::from(g.rx_frames) {
                    // Ours: the frame goes back to the fill ring whatever becomes of the packet.
                    self.addr[self.descs] = desc.addr;
                    self.len[self.descs] = desc.len;
                    self.descs += 1;
                    valid &= desc.addr % size + u64::from(desc.len) <= size;
                } else {
                    // Not one of our receive frames: nothing to read or give back.
                    valid = false;
                }
                len = len.saturating_add(desc.len);
                if desc.options & libc::XDP_PKT_CONTD == 0 {
                    ended = true;
                    break;
                }
            }
            let count = next - at;
            if !ended {
                if at > 0 || ready < RX_BATCH || room < RX_BATCH {
                    // Cut by the window: leave it in the ring, whole, for the next take.
                    self.descs = first_desc;
                    break;
                }
                // A full window and no end of packet: a broken chain. Drop what we have and
                // the descriptors up to its end.
                if !self.skipping {
                    stats.rx_invalid += 1;
                }
                self.skipping = true;
                consumed = next;
                break;
            }
            consumed = next;
            at = next;
            if self.skipping {
                // The end of a broken chain, already counted.
                self.skipping = false;
                continue;
            }
            let chain_ok = count == 1 || (g.chains && count <= MAX_CHAIN);
            if valid && chain_ok && len as usize >= ETHERNET_HEADER_LEN && len <= g.max_len {
                self.packets[self.filled] = Packet {
                    first: first_desc as u8,
                    count: count as u8,
                    len,
                };
                self.filled += 1;
                stats.rx_frames += 1;
                stats.rx_bytes += u64::from(len);
                stats.rx_chained += u64::from(count > 1);
            } else {
                stats.rx_invalid += 1;
            }
        }
        if consumed > 0 {
            self.ring.release(consumed as u32);
            stats.rx_batches += 1;
        }
        self.filled
    }

    /// The packet of the batch `ahead` places after the next one (0: the next one), without
    /// handing it out, if it came in one piece (a chain is assembled only when handed out).
    pub(crate) fn peek(&self, ahead: usize) -> Option<&[u8]> {
        if ahead >= self.buffered() {
            return None;
        }
        let packet = self.packets[self.head + ahead];
        (packet.count == 1).then(|| self.single(packet))
    }

    /// A packet of the batch that came in one piece, borrowed from the UMEM.
    fn single(&self, packet: Packet) -> &[u8] {
        let first = usize::from(packet.first);
        // SAFETY: `take` checked that [addr, addr + len) lies inside one receive frame of the
        // UMEM. The kernel handed the frame to us on the rx ring and gets it back only in
        // `give_back`, which needs `&mut self` and so cannot run while this borrow (of
        // `self`) lives; transmit tokens write transmit frames only.
        unsafe {
            core::slice::from_raw_parts(
                self.umem.add(self.addr[first] as usize),
                packet.len as usize,
            )
        }
    }

    /// The next packet of the batch: borrowed from the UMEM, or assembled from its chain.
    pub(crate) fn next(&mut self) -> Option<&[u8]> {
        if self.head == self.filled {
            return None;
        }
        let packet = self.packets[self.head];
        self.head += 1;
        let first = usize::from(packet.first);
        if packet.count == 1 {
            return Some(self.single(packet));
        }
        let mut at = 0;
        for i in first..first + usize::from(packet.count) {
            let len = self.len[i] as usize;
            // SAFETY: as above, for each descriptor of the chain; `take` checked every one.
            let piece =
                unsafe { core::slice::from_raw_parts(self.umem.add(self.addr[i] as usize), len) };
            // The lengths add up to `packet.len`, at most `max_len`, the buffer's size.
            self.assembly[at..at + len].copy_from_slice(piece);
            at += len;
        }
        Some(&self.assembly[..at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdp::ring::{Mmap, test_pair};

    const FRAME: u32 = 2048;
    const HEADROOM: u64 = 256;
    const RX_FRAMES: u32 = 128;

    /// An rx path over rings whose other ends the test plays as the kernel.
    struct Rig {
        umem: Mmap,
        rx: RxPath,
        kernel_rx: Producer<libc::xdp_desc>,
        kernel_fill: Consumer<u64>,
        stats: XdpStats,
    }

    impl Rig {
        fn new(ring_size: u32, max_len: u32, chains: bool) -> Rig {
            let umem = Mmap::anonymous((FRAME * RX_FRAMES * 2) as usize).unwrap();
            let (kernel_rx, ours_rx) = test_pair::<libc::xdp_desc>(ring_size);
            let (ours_fill, kernel_fill) = test_pair::<u64>(ring_size);
            let geometry = RxGeometry {
                frame_size: FRAME,
                rx_frames: RX_FRAMES,
                max_len,
                chains,
            };
            let rx = RxPath::new(ours_rx, ours_fill, umem.ptr(), geometry);
            Rig {
                umem,
                rx,
                kernel_rx,
                kernel_fill,
                stats: XdpStats::default(),
            }
        }

        /// The kernel takes `n` frames from the fill ring.
        #[track_caller]
        fn kernel_takes(&mut self, n: u32) -> Vec<u64> {
            let ready = self.kernel_fill.available(n);
            assert_eq!(ready, n, "frames on the fill ring");
            let frames = (0..n).map(|i| self.kernel_fill.read(i)).collect();
            self.kernel_fill.release(n);
            frames
        }

        /// The kernel writes `data` into `frames` (a piece each, `piece` bytes at most)
        /// and publishes the chain.
        fn kernel_receives(&mut self, frames: &[u64], data: &[u8], piece: usize) {
            let pieces: Vec<&[u8]> = data.chunks(piece).collect();
            assert!(pieces.len() <= frames.len());
            let free = self.kernel_rx.free(pieces.len() as u32);
            assert_eq!(free as usize, pieces.len(), "room on the rx ring");
            for (i, piece) in pieces.iter().enumerate() {
                let addr = frames[i] + HEADROOM;
                // SAFETY: the frame lies inside the test's UMEM mapping.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        piece.as_ptr(),
                        self.umem.ptr().add(addr as usize),
                        piece.len(),
                    )
                };
                let last = i + 1 == pieces.len();
                self.kernel_rx.write(
                    i as u32,
                    libc::xdp_desc {
                        addr,
                        len: piece.len() as u32,
                        options: if last { 0 } else { libc::XDP_PKT_CONTD },
                    },
                );
            }
            self.kernel_rx.submit(pieces.len() as u32);
        }

        fn publish_raw(&mut self, descs: &[libc::xdp_desc]) {
            assert_eq!(
                self.kernel_rx.free(descs.len() as u32) as usize,
                descs.len()
            );
            for (i, d) in descs.iter().enumerate() {
                self.kernel_rx.write(i as u32, *d);
            }
            self.kernel_rx.submit(descs.len() as u32);
        }

        /// One refill: give the batch back, take the next.
        fn refill(&mut self) -> Vec<Vec<u8>> {
            self.rx.give_back();
            self.rx.take(&mut self.stats);
            let mut out = Vec::new();
            while let Some(frame) = self.rx.next() {
                out.push(frame.to_vec());
            }
            out
        }
    }

    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
    }

    fn desc(addr: u64, len: u32, more: bool) -> libc::xdp_desc {
        libc::xdp_desc {
            addr,
            len,
            options: if more { libc::XDP_PKT_CONTD } else { 0 },
        }
    }

    #[test]
    fn a_single_frame_is_read_in_place() {
        let mut rig = Rig::new(256, 1514, false);
        rig.rx.give_all();
        let frames = rig.kernel_takes(1);
        let data = payload(1514, 1);
        rig.kernel_receives(&frames, &data, 1792);
        assert_eq!(rig.rx.take(&mut rig.stats), 1);
        let frame = rig.rx.next().unwrap();
        assert_eq!(frame, &data[..]);
        // In place: the slice points into the UMEM, at the descriptor's address.
        assert_eq!(
            frame.as_ptr() as usize - rig.umem.ptr() as usize,
            (frames[0] + HEADROOM) as usize
        );
        assert_eq!(rig.rx.next(), None);
        assert_eq!((rig.stats.rx_frames, rig.stats.rx_chained), (1, 0));
    }

    #[test]
    fn a_peek_shows_the_packets_next_then_hands_out_except_chains() {
        let mut rig = Rig::new(256, 9018, true);
        rig.rx.give_all();
        let mut sent = Vec::new();
        for seed in 0..3 {
            let frames = rig.kernel_takes(1);
            sent.push(payload(100 + usize::from(seed), seed));
            rig.kernel_receives(&frames, &sent[usize::from(seed)], 1792);
        }
        let chain = rig.kernel_takes(3);
        rig.kernel_receives(&chain, &payload(4000, 7), 1792);
        let last = rig.kernel_takes(1);
        let tail = payload(60, 8);
        rig.kernel_receives(&last, &tail, 1792);
        assert_eq!(rig.rx.peek(0), None, "nothing taken yet");
        rig.rx.give_back();
        assert_eq!(rig.rx.take(&mut rig.stats), 5);
        let peeked: Vec<Option<Vec<u8>>> =
            (0..6).map(|i| rig.rx.peek(i).map(<[u8]>::to_vec)).collect();
        assert_eq!(
            peeked[..3],
            sent.iter().cloned().map(Some).collect::<Vec<_>>()[..]
        );
        assert_eq!(peeked[3], None, "a chain is not peeked");
        assert_eq!(peeked[4].as_deref(), Some(&tail[..]));
        assert_eq!(peeked[5], None, "beyond the batch");
        for (i, peek) in peeked.iter().take(5).enumerate() {
            assert_eq!(rig.rx.peek(0).map(<[u8]>::to_vec), *peek, "packet {i}");
            let next = rig.rx.next().unwrap().to_vec();
            if let Some(peek) = peek {
                assert_eq!(&next, peek, "packet {i}");
            }
        }
        assert_eq!(rig.rx.peek(0), None);
    }

    #[test]
    fn a_chain_is_assembled_whole() {
        let mut rig = Rig::new(256, 9018, true);
        rig.rx.give_all();
        let frames = rig.kernel_takes(6);
        let data = payload(9014, 2);
        rig.kernel_receives(&frames, &data, 1792);
        let small = payload(60, 3);
        let next = rig.kernel_takes(1);
        rig.kernel_receives(&next, &small, 1792);
        let got = rig.refill();
        assert_eq!(got.len(), 2);
        assert!(got[0] == data, "the chain, in order");
        assert_eq!(got[1], small);
        assert_eq!(
            (
                rig.stats.rx_frames,
                rig.stats.rx_chained,
                rig.stats.rx_invalid
            ),
            (2, 1, 0)
        );
        assert_eq!(rig.stats.rx_bytes, 9014 + 60);
        // All seven frames go back to the fill ring at the next refill: every receive frame
        // is there again.
        assert_eq!(rig.refill().len(), 0);
        assert_eq!(rig.kernel_takes(RX_FRAMES).len(), RX_FRAMES as usize);
    }

    // Regression-style check of the window: a chain cut by RX_BATCH stays in the ring until
    // the next take, and is then handed out whole.
    #[test]
    fn a_chain_cut_by_the_window_waits_for_the_next_take() {
        let mut rig = Rig::new(256, 9018, true);
        rig.rx.give_all();
        // 62 single frames, then a 3-frame chain: the window of 64 ends inside the chain.
        for i in 0..62u8 {
            let f = rig.kernel_takes(1);
            rig.kernel_receives(&f, &payload(64, i), 1792);
        }
        let f = rig.kernel_takes(3);
        let chain = payload(5000, 99);
        rig.kernel_receives(&f, &chain, 1792);
        let got = rig.refill();
        assert_eq!(got.len(), 62, "the chain is not handed out in pieces");
        assert_eq!(rig.stats.rx_chained, 0);
        let got = rig.refill();
        assert_eq!(got.len(), 1);
        assert!(got[0] == chain);
        assert_eq!(rig.stats.rx_chained, 1);
        assert_eq!(rig.stats.rx_invalid, 0);
    }

    #[test]
    fn a_partly_published_chain_is_not_consumed() {
        let mut rig = Rig::new(256, 9018, true);
        rig.rx.give_all();
        let f = rig.kernel_takes(2);
        let data = payload(3000, 5);
        // Only the first piece is on the ring (not something the kernel does, but a window
        // may end there): nothing is taken or released.
        rig.publish_raw(&[desc(f[0] + HEADROOM, 1792, true)]);
        assert_eq!(rig.refill().len(), 0);
        assert_eq!(rig.stats.rx_batches, 0);
        // SAFETY: the frames lie inside the test's UMEM mapping.
        unsafe {
            let base = rig.umem.ptr();
            core::ptr::copy_nonoverlapping(
                data.as_ptr(),
                base.add((f[0] + HEADROOM) as usize),
                1792,
            );
            core::ptr::copy_nonoverlapping(
                data[1792..].as_ptr(),
                base.add((f[1] + HEADROOM) as usize),
                3000 - 1792,
            );
        }
        rig.publish_raw(&[desc(f[1] + HEADROOM, 3000 - 1792, false)]);
        let got = rig.refill();
        assert_eq!(got.len(), 1);
        assert!(got[0] == data);
    }

    #[test]
    fn a_broken_chain_is_dropped_to_its_end_and_its_frames_returned() {
        let mut rig = Rig::new(256, 9018, true);
        rig.rx.give_all();
        let f = rig.kernel_takes(70);
        // 70 descriptors that all say "more": the window of 64 holds no end of packet.
        let broken: Vec<_> = f
            .iter()
            .take(69)
            .map(|&a| desc(a + HEADROOM, 100, true))
            .collect();
        rig.publish_raw(&broken);
        rig.publish_raw(&[desc(f[69] + HEADROOM, 100, false)]);
        assert_eq!(rig.refill().len(), 0);
        assert_eq!(rig.stats.rx_invalid, 1);
        // The next take drops the rest, up to and including the end, counted once.
        let g = rig.kernel_takes(1);
        rig.kernel_receives(&g, &payload(80, 1), 1792);
        let got = rig.refill();
        assert_eq!(got, vec![payload(80, 1)]);
        assert_eq!(rig.stats.rx_invalid, 1);
        assert_eq!(rig.stats.rx_frames, 1);
        // Every one of the 71 frames went back to the fill ring.
        rig.refill();
        assert_eq!(rig.kernel_takes(RX_FRAMES).len(), RX_FRAMES as usize);
    }

    #[test]
    fn bad_descriptors_refuse_their_packet_but_return_their_frames() {
        let mut rig = Rig::new(256, 9018, true);
        rig.rx.give_all();
        let f = rig.kernel_takes(4);
        let outside = u64::from(RX_FRAMES) * u64::from(FRAME); // a transmit frame
        rig.publish_raw(&[
            // A chain with a piece outside the receive frames.
            desc(f[0] + HEADROOM, 1000, true),
            desc(outside, 1000, false),
            // A piece overrunning its frame.
            desc(f[1] + HEADROOM, FRAME, false),
            // Shorter than an Ethernet header.
            desc(f[2] + HEADROOM, 10, false),
            // Longer than the largest frame the MTU allows.
            desc(f[3] + HEADROOM, 1792, true),
        ]);
        let g = rig.kernel_takes(5);
        rig.publish_raw(&[
            desc(g[0] + HEADROOM, 1792, true),
            desc(g[1] + HEADROOM, 1792, true),
            desc(g[2] + HEADROOM, 1792, true),
            desc(g[3] + HEADROOM, 1792, true),
            desc(g[4] + HEADROOM, 1792, false),
        ]);
        assert_eq!(rig.refill().len(), 0);
        assert_eq!(rig.stats.rx_invalid, 4);
        assert_eq!(rig.stats.rx_frames, 0);
        rig.refill();
        // Nine of our frames were named and all came back; the transmit frame did not.
        let back = rig.kernel_takes(RX_FRAMES);
        assert!(!back.contains(&outside));
    }

    #[test]
    fn chains_are_refused_without_sg() {
        let mut rig = Rig::new(256, 1514, false);
        rig.rx.give_all();
        let f = rig.kernel_takes(2);
        rig.kernel_receives(&f, &payload(1000, 0), 600);
        assert_eq!(rig.refill().len(), 0);
        assert_eq!(rig.stats.rx_invalid, 1);
    }

    #[test]
    fn frames_the_fill_ring_cannot_take_wait_and_are_not_lost() {
        // A fill ring of 64 entries for 128 receive frames: at bind, half wait.
        let mut rig = Rig::new(64, 9018, true);
        rig.rx.give_all();
        assert_eq!(rig.rx.owed(), 64);
        let f = rig.kernel_takes(64);
        // The kernel fills 20 frames with 10 chains of two; the fill ring has room again.
        for pair in f.chunks(2).take(10) {
            rig.kernel_receives(pair, &payload(2000, 1), 1792);
        }
        // The owed frames go first (64 fit now that the kernel took 64).
        assert_eq!(rig.refill().len(), 10);
        assert_eq!(rig.rx.owed(), 0);
        // The batch's 20 frames find the ring full (the kernel has not taken the 64 yet):
        // they wait, and go at the refill after the kernel made room.
        rig.refill();
        assert_eq!(rig.rx.owed(), 20);
        let first = rig.kernel_takes(64);
        rig.refill();
        assert_eq!(rig.rx.owed(), 0);
        let second = rig.kernel_takes(20);
        let mut all: Vec<u64> = f[20..]
            .iter()
            .chain(&first)
            .chain(&second)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), RX_FRAMES as usize, "every frame exactly once");
    }
}
