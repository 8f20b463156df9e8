//! The transmit half of an AF_XDP socket: the tx and completion rings, and the transmit
//! frames, handed out in slots of adjacent frames so a frame larger than one UMEM frame is
//! written in place and sent as a chain.
//!
//! ```text
//! transmit frames [first, first + frames), in slots of `span` adjacent frames
//! send(len): pop a free slot ─▶ smoltcp writes len bytes at the slot's start (contiguous)
//!            ─▶ ceil(len / frame_size) descriptors, XDP_PKT_CONTD on all but the last,
//!               published together ─▶ sendto() kick every TX_KICK_BATCH descriptors
//! completion ring: one entry per descriptor ─▶ the slot is free once all of its are back
//! ```
//!
//! - `span` is 1 when the MTU fits a frame: a slot is a frame and nothing changes from the
//!   single-buffer path. With a larger MTU, a slot spans the frames the largest frame needs
//!   (3 × 4096 bytes at MTU 9000), small frames included: the UMEM is sized in slots.
//! - A descriptor covers one frame from its start (in aligned mode a descriptor may not
//!   cross a frame), so the frame smoltcp wrote is cut at frame boundaries, never copied.
//! - A chain is published whole or not at all: the tx ring holds every transmit frame
//!   (`ring_size >= frame_count / 2`), so there is always room, and if there is not, the slot
//!   goes back and the frame counts as dropped.
//! - In-flight tracking per frame: a completion entry for a frame not in flight (outside the
//!   transmit frames, not at a frame's start, or already completed) is ignored and counted as
//!   `bogus_completions` (this kernel has been seen returning such entries in copy mode).

use std::os::fd::RawFd;

use super::TX_KICK_BATCH;
use super::device::XdpStats;
use super::ring::{Consumer, Producer};
use crate::sys;

/// When [`TxPath::kick`] calls `sendto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kick {
    /// The tx ring holds descriptors and the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`;
    /// copy mode always asks).
    IfAsked,
    /// The tx ring holds descriptors (busy polling: the call runs the NAPI that sends them).
    IfPending,
    /// Always (busy polling, to run the NAPI that completes frames).
    Always,
}

/// Where the transmit frames are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TxGeometry {
    /// Bytes per UMEM frame.
    pub frame_size: u32,
    /// Index of the first transmit frame in the UMEM.
    pub first: u32,
    /// Transmit frames.
    pub frames: u32,
    /// Adjacent frames per slot (1 for single-buffer frames).
    pub span: u32,
}

/// The transmit half: everything a transmit token needs, apart from the receive state.
pub(crate) struct TxPath {
    ring: Producer<libc::xdp_desc>,
    completion: Consumer<u64>,
    fd: RawFd,
    /// Base of the UMEM mapping (owned by the device, which outlives this).
    umem: *mut u8,
    geometry: TxGeometry,
    /// Free slots (popped from the end: low slots first).
    free: Vec<u32>,
    /// Per transmit frame: published and not yet completed.
    in_flight: Vec<bool>,
    /// Per slot: its frames still in flight.
    outstanding: Vec<u8>,
    /// Descriptors published since the last kick.
    pub(crate) unkicked: u32,
    need_wakeup: bool,
    /// Kick whenever descriptors wait, also when the kernel did not ask (preferred busy
    /// polling: the `sendto` runs the NAPI that sends them).
    pub(crate) busy_poll: bool,
    /// Written when no slot is free, so smoltcp's closure still runs.
    scratch: Box<[u8]>,
}

impl TxPath {
    /// The transmit half over `ring` and `completion`, writing frames into the UMEM at `umem`,
    /// kicking the socket `fd`.
    pub(crate) fn new(
        ring: Producer<libc::xdp_desc>,
        completion: Consumer<u64>,
        fd: RawFd,
        umem: *mut u8,
        geometry: TxGeometry,
    ) -> TxPath {
        let slots = geometry.frames / geometry.span;
        TxPath {
            ring,
            completion,
            fd,
            umem,
            geometry,
            free: (0..slots).rev().collect(),
            in_flight: vec![false; geometry.frames as usize],
            outstanding: vec![0; slots as usize],
            unkicked: 0,
            need_wakeup: true,
            busy_poll: false,
            scratch: vec![0u8; (geometry.frame_size * geometry.span) as usize].into_boxed_slice(),
        }
    }

    /// True if no slot is free.
    pub(crate) fn exhausted(&self) -> bool {
        self.free.is_empty()
    }

    /// Takes completed frames back; ignores (and counts) entries for frames not in flight.
    pub(crate) fn reap(&mut self, stats: &mut XdpStats) {
        let ready = self.completion.available(self.completion.size());
        for i in 0..ready {
            let addr = self.completion.read(i);
            match self.frame_of(addr) {
                Some(frame) if self.in_flight[frame as usize] => {
                    self.in_flight[frame as usize] = false;
                    let slot = (frame / self.geometry.span) as usize;
                    self.outstanding[slot] -= 1;
                    if self.outstanding[slot] == 0 {
                        self.free.push(slot as u32);
                    }
                    stats.completions += 1;
                }
                _ => stats.bogus_completions += 1,
            }
        }
        if ready > 0 {
            self.completion.release(ready);
        }
        stats.tx_in_flight = (self.outstanding.len() - self.free.len()) as u64;
    }

    /// The transmit frame (offset from `first`) that starts at UMEM address `addr`.
    fn frame_of(&self, addr: u64) -> Option<u32> {
        let size = u64::from(self.geometry.frame_size);
        if !addr.is_multiple_of(size) {
            return None;
        }
        let index = (addr / size).checked_sub(u64::from(self.geometry.first))?;
        (index < self.in_flight.len() as u64).then_some(index as u32)
    }

    /// Descriptors on the tx ring the kernel has not taken yet.
    pub(crate) fn pending(&mut self) -> u32 {
        self.ring.pending()
    }

    /// Makes the kernel send what the tx ring holds, as `when` says.
    pub(crate) fn kick(&mut self, stats: &mut XdpStats, when: Kick) {
        self.unkicked = 0;
        // Copy mode sends at most 32 frames per call and answers EAGAIN while more wait;
        // bounded so a stuck queue cannot hold the worker.
        let tries = self.in_flight.len() as u32 / 32 + 4;
        for _ in 0..tries {
            let go = match when {
                Kick::IfAsked => {
                    self.ring.pending() > 0 && (!self.need_wakeup || self.ring.needs_wakeup())
                }
                Kick::IfPending => self.ring.pending() > 0,
                Kick::Always => true,
            };
            if !go {
                return;
            }
            stats.tx_kicks += 1;
            // SAFETY: sendto(2) with no buffer and no address on our own AF_XDP socket; the
            // kernel only reads the tx ring, which it shares with us.
            let rc = unsafe {
                libc::sendto(
                    self.fd,
                    core::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    core::ptr::null(),
                    0,
                )
            };
            if rc >= 0 {
                return;
            }
            match sys::errno() {
                libc::EINTR => {}
                errno @ (libc::EAGAIN | libc::EBUSY | libc::ENOBUFS) => {
                    stats.tx_kick_busy += 1;
                    stats.last_errno = errno;
                    self.reap(stats);
                }
                errno => {
                    stats.tx_errors += 1;
                    stats.last_errno = errno;
                    return;
                }
            }
        }
    }

    /// Publishes smoltcp's frame of `len` bytes, written by `f` into a free slot.
    pub(crate) fn send<R>(
        &mut self,
        stats: &mut XdpStats,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        let g = self.geometry;
        let frame_size = g.frame_size as usize;
        if len > frame_size * g.span as usize {
            // smoltcp sizes frames from our MTU, so this is a bug elsewhere; the closure
            // must still run (cold path, allocates).
            stats.tx_oversize += 1;
            return f(&mut vec![0u8; len]);
        }
        if self.free.is_empty() {
            self.reap(stats);
        }
        let Some(slot) = self.free.pop() else {
            stats.tx_dropped += 1;
            return f(&mut self.scratch[..len]);
        };
        let first_frame = slot * g.span;
        let addr = u64::from(g.first + first_frame) * u64::from(g.frame_size);
        // SAFETY: the slot's `span` frames are adjacent and inside the UMEM (slot < frames /
        // span), and `len` <= span × frame_size; the slot was free, so neither the kernel nor
        // another token uses its frames, and the mapping outlives `self`.
        let buf = unsafe { core::slice::from_raw_parts_mut(self.umem.add(addr as usize), len) };
        let result = f(buf);
        let descs = len.div_ceil(frame_size) as u32;
        if descs == 0 || self.ring.free(descs) < descs {
            // Nothing to send, or (cannot happen while the ring holds every transmit frame)
            // no room for the whole chain: keep the slot.
            self.free.push(slot);
            stats.tx_dropped += u64::from(descs > 0);
            return result;
        }
        for i in 0..descs {
            let offset = i as usize * frame_size;
            self.ring.write(
                i,
                libc::xdp_desc {
                    addr: addr + offset as u64,
                    len: (len - offset).min(frame_size) as u32,
                    options: if i + 1 < descs {
                        libc::XDP_PKT_CONTD
                    } else {
                        0
                    },
                },
            );
            self.in_flight[(first_frame + i) as usize] = true;
        }
        self.ring.submit(descs);
        self.outstanding[slot as usize] = descs as u8;
        stats.tx_frames += 1;
        stats.tx_bytes += len as u64;
        stats.tx_chained += u64::from(descs > 1);
        self.unkicked += descs;
        if self.unkicked >= TX_KICK_BATCH {
            let when = if self.busy_poll {
                Kick::IfPending
            } else {
                Kick::IfAsked
            };
            self.kick(stats, when);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdp::ring::{Mmap, test_pair};

    const FRAME: u32 = 2048;
    /// Transmit frames start here in the UMEM.
    const FIRST: u32 = 8;

    /// A tx path over rings whose other ends the test plays as the kernel.
    struct Rig {
        umem: Mmap,
        kernel_tx: Consumer<libc::xdp_desc>,
        tx: TxPath,
        kernel_completion: Producer<u64>,
        stats: XdpStats,
    }

    impl Rig {
        fn new(frames: u32, span: u32, ring_size: u32) -> Rig {
            let umem = Mmap::anonymous(((FIRST + frames) * FRAME) as usize).unwrap();
            let (ours_tx, kernel_tx) = test_pair::<libc::xdp_desc>(ring_size);
            let (kernel_completion, ours_completion) = test_pair::<u64>(ring_size);
            let geometry = TxGeometry {
                frame_size: FRAME,
                first: FIRST,
                frames,
                span,
            };
            // fd -1: a kick would fail with EBADF; the rings' wakeup flag is never set here,
            // so no kick is made.
            let tx = TxPath::new(ours_tx, ours_completion, -1, umem.ptr(), geometry);
            Rig {
                umem,
                kernel_tx,
                tx,
                kernel_completion,
                stats: XdpStats::default(),
            }
        }

        fn send(&mut self, data: &[u8]) {
            self.tx
                .send(&mut self.stats, data.len(), |buf| buf.copy_from_slice(data));
        }

        /// What the kernel finds on the tx ring: each packet's descriptors and bytes.
        fn kernel_sends(&mut self) -> Vec<(Vec<libc::xdp_desc>, Vec<u8>)> {
            let ready = self.kernel_tx.available(u32::MAX);
            let mut packets = Vec::new();
            let mut descs = Vec::new();
            let mut bytes = Vec::new();
            for i in 0..ready {
                let d = self.kernel_tx.read(i);
                // SAFETY: the test checks below that descriptors stay inside the UMEM.
                assert!(d.addr + u64::from(d.len) <= self.umem.len() as u64);
                let piece = unsafe {
                    core::slice::from_raw_parts(
                        self.umem.ptr().add(d.addr as usize),
                        d.len as usize,
                    )
                };
                bytes.extend_from_slice(piece);
                descs.push(d);
                if d.options & libc::XDP_PKT_CONTD == 0 {
                    packets.push((std::mem::take(&mut descs), std::mem::take(&mut bytes)));
                }
            }
            assert!(descs.is_empty(), "a chain published in part");
            self.kernel_tx.release(ready);
            packets
        }

        fn complete(&mut self, addrs: &[u64]) {
            assert_eq!(
                self.kernel_completion.free(addrs.len() as u32) as usize,
                addrs.len()
            );
            for (i, &a) in addrs.iter().enumerate() {
                self.kernel_completion.write(i as u32, a);
            }
            self.kernel_completion.submit(addrs.len() as u32);
        }
    }

    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13) ^ seed)
            .collect()
    }

    #[test]
    fn a_small_frame_is_one_descriptor() {
        let mut rig = Rig::new(64, 1, 64);
        let data = payload(1514, 1);
        rig.send(&data);
        let sent = rig.kernel_sends();
        assert_eq!(sent.len(), 1);
        let (descs, bytes) = &sent[0];
        assert_eq!(descs.len(), 1);
        assert_eq!(
            descs[0].addr,
            u64::from(FIRST * FRAME),
            "the lowest frame first"
        );
        assert_eq!(descs[0].options, 0);
        assert!(*bytes == data);
        assert_eq!((rig.stats.tx_frames, rig.stats.tx_chained), (1, 0));
    }

    #[test]
    fn a_large_frame_is_split_at_frame_boundaries() {
        // Slots of 5 frames: up to 10,240 bytes.
        let mut rig = Rig::new(64, 5, 64);
        let jumbo = payload(9014, 2);
        rig.send(&jumbo);
        let small = payload(60, 3);
        rig.send(&small);
        let exact = payload(2 * FRAME as usize, 4);
        rig.send(&exact);
        let sent = rig.kernel_sends();
        assert_eq!(sent.len(), 3);
        let (descs, bytes) = &sent[0];
        assert_eq!(descs.len(), 5);
        let base = u64::from(FIRST * FRAME);
        for (i, d) in descs.iter().enumerate() {
            assert_eq!(
                d.addr,
                base + i as u64 * u64::from(FRAME),
                "adjacent frames"
            );
            let last = i == 4;
            assert_eq!(d.len, if last { 9014 - 4 * FRAME } else { FRAME });
            assert_eq!(d.options, if last { 0 } else { libc::XDP_PKT_CONTD });
        }
        assert!(*bytes == jumbo, "written in place, cut, not copied");
        // The small frame takes the next slot, one descriptor.
        assert_eq!(sent[1].0.len(), 1);
        assert_eq!(sent[1].0[0].addr, base + 5 * u64::from(FRAME));
        assert_eq!(sent[1].1, small);
        // Exactly two frames: two descriptors, no empty third.
        assert_eq!(sent[2].0.len(), 2);
        assert_eq!(sent[2].0[1].len, FRAME);
        assert!(sent[2].1 == exact);
        assert_eq!((rig.stats.tx_frames, rig.stats.tx_chained), (3, 2));
        assert_eq!(rig.tx.unkicked, 8);
    }

    #[test]
    fn a_slot_is_free_once_every_frame_of_its_chain_completed() {
        // Two slots of three frames.
        let mut rig = Rig::new(6, 3, 8);
        rig.send(&payload(5000, 1));
        rig.send(&payload(100, 2));
        assert!(rig.tx.exhausted());
        let sent = rig.kernel_sends();
        let chain: Vec<u64> = sent[0].0.iter().map(|d| d.addr).collect();
        assert_eq!(chain.len(), 3);
        // Two of the chain's three frames complete: the slot stays busy.
        rig.complete(&chain[..2]);
        rig.tx.reap(&mut rig.stats);
        assert!(rig.tx.exhausted());
        assert_eq!(rig.stats.tx_in_flight, 2);
        // A frame completed twice, one in the middle of a slot never sent, and an address
        // outside the transmit frames: all ignored.
        rig.complete(&[chain[0], sent[1].0[0].addr + u64::from(FRAME), 0]);
        rig.tx.reap(&mut rig.stats);
        assert_eq!(rig.stats.bogus_completions, 3);
        assert!(rig.tx.exhausted());
        rig.complete(&chain[2..]);
        rig.tx.reap(&mut rig.stats);
        assert!(!rig.tx.exhausted());
        assert_eq!(rig.stats.completions, 3);
        assert_eq!(rig.stats.tx_in_flight, 1);
        // The freed slot is reused, from its first frame.
        rig.send(&payload(3000, 3));
        let again = rig.kernel_sends();
        assert_eq!(again[0].0[0].addr, chain[0]);
    }

    #[test]
    fn with_no_free_slot_the_frame_is_dropped_and_the_closure_still_runs() {
        let mut rig = Rig::new(2, 1, 4);
        rig.send(&payload(100, 1));
        rig.send(&payload(100, 2));
        let mut ran = false;
        rig.tx.send(&mut rig.stats, 100, |buf| {
            ran = true;
            buf.fill(0xee)
        });
        assert!(ran);
        assert_eq!(rig.stats.tx_dropped, 1);
        assert_eq!(rig.kernel_sends().len(), 2);
        // Too large for a slot: counted, never published.
        rig.tx.send(&mut rig.stats, 3000, |buf| buf.len());
        assert_eq!(rig.stats.tx_oversize, 1);
        assert_eq!(rig.kernel_sends().len(), 0);
    }

    #[test]
    fn a_chain_the_ring_cannot_hold_whole_is_not_published_in_part() {
        // A tx ring of 4 entries and slots of 3 frames (a configuration `check` refuses):
        // after one chain, the next needs 3 entries and finds 1.
        let mut rig = Rig::new(9, 3, 4);
        rig.send(&payload(5000, 1));
        rig.send(&payload(5000, 2));
        assert_eq!(rig.stats.tx_dropped, 1);
        assert_eq!(rig.stats.tx_frames, 1);
        // The slot was kept: two slots are still free.
        let sent = rig.kernel_sends();
        assert_eq!(sent.len(), 1);
        rig.send(&payload(5000, 3));
        assert_eq!(rig.kernel_sends().len(), 1);
    }
}
