//! One AF_XDP socket on one (interface, queue), as a smoltcp [`Device`].
//!
//! ```text
//! UMEM: frame_count frames of frame_size bytes, aligned mode, one mapping
//!   frames [0, n/2)  receive: in the fill ring, in the kernel, in the rx ring, or in our batch
//!   frames [n/2, n)  transmit: on our free stack, or in flight (tx ring → kernel → completion)
//! receive(): batch empty? → give the last batch's frames back to the fill ring (wake the
//!            kernel if it asks), push pending tx, take up to RX_BATCH descriptors → tokens
//! TxToken::consume: pop a free tx frame, smoltcp writes the frame in place, publish it on the
//!            tx ring, kick with sendto() every TX_KICK_BATCH frames and in flush()
//! completion ring: a frame goes back on the free stack only if we had it in flight
//! ```
//!
//! - Receive frames come back to the fill ring after every batch, all of them, so the fill
//!   ring only runs dry when the kernel holds every receive frame (we are a whole ring
//!   behind). Each refill that finds the fill ring empty counts `fill_empty`.
//! - Copy mode, as on veth, has the kernel copy frames in and out; the descriptors still
//!   say where in the UMEM, and the receive offset (`XDP_PACKET_HEADROOM`, 256 bytes in
//!   this kernel) is taken from each descriptor, never assumed.
//! - `XDP_USE_NEED_WAKEUP` is always asked for: transmit kicks (`sendto`) happen only when
//!   the tx ring's flag asks for one (copy mode always does: the copy is done inside
//!   `sendto`), and the fill ring is woken with `recvfrom` only when its flag is set.
//! - In-flight tracking: a bitmap over transmit frames. A completion entry for a frame not
//!   in flight (outside the transmit range, unaligned, or already completed) is ignored and
//!   counted as `bogus_completions`: in copy mode on veth, this kernel has been seen
//!   returning such entries, and trusting them would hand one frame out twice.
//! - Nothing is allocated per packet: the batch, the free stack, the bitmap and a scratch
//!   frame are allocated in [`XdpDevice::bind`].

use core::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

use super::ring::{self, Consumer, Layout, Mmap, Producer};
use super::{XdpError, XdpOp, XdpProgram, bpf};
use crate::sys::{self, IfName};
use crate::tap::{ETHERNET_HEADER_LEN, Wait};

/// Receive descriptors taken per batch (the fill ring is topped up after each).
pub const RX_BATCH: usize = 64;

/// Transmit frames published before a `sendto` kick without waiting for `flush`
/// (the kernel's copy-mode transmit also works in batches of 32).
pub const TX_KICK_BATCH: u32 = 32;

/// `XDP_PACKET_HEADROOM`: where the kernel puts received data in a frame (checked against
/// each descriptor; used only to size the MTU check).
const PACKET_HEADROOM: u32 = 256;

/// One 802.1Q tag a frame may carry beyond the Ethernet header.
const VLAN_TAG_LEN: u32 = 4;

/// Whether to bind in zero-copy mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopy {
    /// Zero-copy if the driver supports it on this queue, else copy mode.
    #[default]
    Auto,
    /// Copy mode only.
    Off,
    /// Zero-copy or fail.
    Required,
}

/// Sizes of one device's UMEM and rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpConfig {
    /// Bytes per UMEM frame: 2048 or 4096 (aligned mode needs a power of two; a frame
    /// must hold `XDP_PACKET_HEADROOM` plus the largest frame).
    pub frame_size: u32,
    /// Frames in the UMEM, a power of two; half receive, half transmit.
    pub frame_count: u32,
    /// Entries per ring (fill, completion, rx, tx), a power of two of at least
    /// `frame_count / 2` so every frame of a kind fits its ring at once.
    pub ring_size: u32,
    /// Zero-copy or copy mode.
    pub zero_copy: ZeroCopy,
}

impl Default for XdpConfig {
    /// 4096-byte frames (MTU up to 3818), 4096 of them (16 MiB), 2048-entry rings.
    fn default() -> Self {
        XdpConfig {
            frame_size: 4096,
            frame_count: 4096,
            ring_size: 2048,
            zero_copy: ZeroCopy::Auto,
        }
    }
}

impl XdpConfig {
    /// Sizes for `connections` connections on a link of `mtu`: 2048-byte frames when the MTU
    /// fits them (1500 does), else 4096; and a receive half of two frames per connection
    /// plus a batch (a request and an ACK or FIN each), at least the default 2048 frames and
    /// at most 2^16. A client with something in flight on every connection sends that many
    /// frames at once, and a frame the kernel finds no fill-ring entry for is dropped and
    /// retransmitted: 2,048 receive frames under 10,000 connections dropped 178,000 frames,
    /// and 3,000 connections closing at once still dropped 1,960 of 4,096. The TAP path sizes
    /// its queue for the same reason. Transmit frames match (the rings stay one size).
    pub fn for_link(connections: usize, mtu: u32) -> Self {
        let default = XdpConfig::default();
        let small = XdpConfig {
            frame_size: 2048,
            ..default
        };
        let frame_size = if mtu <= small.max_mtu() {
            small.frame_size
        } else {
            default.frame_size
        };
        let receive = connections
            .saturating_mul(2)
            .saturating_add(RX_BATCH)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX)
            .clamp(default.frame_count as usize / 2, 1 << 16) as u32;
        XdpConfig {
            frame_size,
            frame_count: 2 * receive,
            ring_size: receive,
            ..default
        }
    }

    /// Checks the rules on each field.
    ///
    /// # Errors
    /// [`XdpError::BadConfig`] naming the rule broken.
    pub fn check(&self) -> Result<(), XdpError> {
        let bad = |what| Err(XdpError::BadConfig { what });
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return bad("frame_size must be 2048 or 4096");
        }
        if !self.frame_count.is_power_of_two() || self.frame_count < 2 * RX_BATCH as u32 {
            return bad("frame_count must be a power of two of at least 128");
        }
        if u64::from(self.frame_size) * u64::from(self.frame_count) > 1 << 32 {
            return bad("the UMEM must stay under 4 GiB");
        }
        if !self.ring_size.is_power_of_two() || self.ring_size < self.frame_count / 2 {
            return bad("ring_size must be a power of two of at least frame_count / 2");
        }
        Ok(())
    }

    /// The largest IP MTU a frame of this size holds.
    pub fn max_mtu(&self) -> u32 {
        self.frame_size - PACKET_HEADROOM - ETHERNET_HEADER_LEN as u32 - VLAN_TAG_LEN
    }
}

/// The kernel's counters of one socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames dropped for other reasons than the two below (e.g. too large for a frame).
    pub rx_dropped: u64,
    /// Invalid descriptors we put on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors we put on the tx ring.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Frames dropped because the fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the tx ring empty when woken.
    pub tx_ring_empty_descs: u64,
}

/// Counters of one AF_XDP device. Every odd event lands in exactly one counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames received and handed to the stack.
    pub rx_frames: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Non-empty receive batches.
    pub rx_batches: u64,
    /// Receive descriptors outside the receive frames or overrunning their frame; dropped.
    pub rx_invalid: u64,
    /// Refills that found the fill ring empty (the kernel had used every frame given).
    pub fill_empty: u64,
    /// `recvfrom` calls made because the fill ring asked for a wakeup.
    pub fill_wakeups: u64,
    /// Frames published on the tx ring.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// `sendto` kicks.
    pub tx_kicks: u64,
    /// Kicks answered `EAGAIN`/`EBUSY`/`ENOBUFS` (retried after reaping completions).
    pub tx_kick_busy: u64,
    /// Kicks failed otherwise (e.g. `ENETDOWN`); the frames stay queued.
    pub tx_errors: u64,
    /// `transmit` calls refused because every transmit frame was in flight.
    pub tx_exhausted: u64,
    /// Frames smoltcp wrote after the last free frame went; dropped.
    pub tx_dropped: u64,
    /// Frames larger than a UMEM frame that smoltcp asked for; dropped.
    pub tx_oversize: u64,
    /// Completion entries that freed an in-flight frame.
    pub completions: u64,
    /// Completion entries for frames that were not in flight; ignored.
    pub bogus_completions: u64,
    /// Transmit frames in flight at the last reap.
    pub tx_in_flight: u64,
    /// `errno` of the most recent failed kick, 0 if none.
    pub last_errno: i32,
    /// The kernel's counters as of the last [`XdpDevice::read_kernel_stats`].
    pub kernel: KernelStats,
}

/// The transmit half: everything a [`XdpTxToken`] needs, apart from the receive state.
struct TxPath {
    ring: Producer<libc::xdp_desc>,
    completion: Consumer<u64>,
    fd: RawFd,
    /// Base of the UMEM mapping (owned by the device, which outlives this).
    umem: *mut u8,
    frame_size: u32,
    /// Index of the first transmit frame.
    first: u32,
    /// Free transmit frames, as offsets from `first`.
    free: Vec<u32>,
    /// Per transmit frame: published and not yet completed.
    in_flight: Vec<bool>,
    /// Frames published since the last kick.
    unkicked: u32,
    need_wakeup: bool,
    /// Written when no frame is free, so smoltcp's closure still runs.
    scratch: Box<[u8]>,
}

impl TxPath {
    /// Takes completed frames back; ignores (and counts) entries for frames not in flight.
    fn reap(&mut self, stats: &mut XdpStats) {
        let ready = self.completion.available(self.completion.size());
        for i in 0..ready {
            let addr = self.completion.read(i);
            match self.frame_of(addr) {
                Some(frame) if self.in_flight[frame as usize] => {
                    self.in_flight[frame as usize] = false;
                    self.free.push(frame);
                    stats.completions += 1;
                }
                _ => stats.bogus_completions += 1,
            }
        }
        if ready > 0 {
            self.completion.release(ready);
        }
        stats.tx_in_flight = (self.in_flight.len() - self.free.len()) as u64;
    }

    /// The transmit frame (offset from `first`) that starts at UMEM address `addr`.
    fn frame_of(&self, addr: u64) -> Option<u32> {
        let size = u64::from(self.frame_size);
        if !addr.is_multiple_of(size) {
            return None;
        }
        let index = (addr / size).checked_sub(u64::from(self.first))?;
        (index < self.in_flight.len() as u64).then_some(index as u32)
    }

    /// Makes the kernel send what the tx ring holds (when it asks to be woken).
    fn kick(&mut self, stats: &mut XdpStats) {
        self.unkicked = 0;
        // Copy mode sends at most 32 frames per call and answers EAGAIN while more wait;
        // bounded so a stuck queue cannot hold the worker.
        let tries = self.in_flight.len() as u32 / 32 + 4;
        for _ in 0..tries {
            if self.ring.pending() == 0 || (self.need_wakeup && !self.ring.needs_wakeup()) {
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

    /// Publishes smoltcp's frame of `len` bytes written by `f` into a free frame.
    fn send<R>(&mut self, stats: &mut XdpStats, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        if len > self.frame_size as usize {
            // smoltcp sizes frames from our MTU, so this is a bug elsewhere; the closure
            // must still run (cold path, allocates).
            stats.tx_oversize += 1;
            return f(&mut vec![0u8; len]);
        }
        if self.free.is_empty() {
            self.reap(stats);
        }
        let Some(frame) = self.free.pop() else {
            stats.tx_dropped += 1;
            return f(&mut self.scratch[..len]);
        };
        let addr = u64::from(self.first + frame) * u64::from(self.frame_size);
        // SAFETY: `addr + len` lies inside the UMEM (frame index < frame_count, len <=
        // frame_size); the frame was on the free stack, so neither the kernel nor another
        // token uses it, and the mapping outlives `self`.
        let buf = unsafe { core::slice::from_raw_parts_mut(self.umem.add(addr as usize), len) };
        let result = f(buf);
        if self.ring.free(1) == 0 {
            // Cannot happen while ring_size >= transmit frames; keep the frame if it does.
            self.free.push(frame);
            stats.tx_dropped += 1;
            return result;
        }
        self.ring.write(
            0,
            libc::xdp_desc {
                addr,
                len: len as u32,
                options: 0,
            },
        );
        self.ring.submit(1);
        self.in_flight[frame as usize] = true;
        stats.tx_frames += 1;
        stats.tx_bytes += len as u64;
        self.unkicked += 1;
        if self.unkicked >= TX_KICK_BATCH {
            self.kick(stats);
        }
        result
    }
}

/// Descriptors taken from the rx ring, handed out one per `receive`.
struct RxBatch {
    addr: [u64; RX_BATCH],
    /// 0 for a descriptor that was refused (its frame still goes back to the fill ring).
    len: [u32; RX_BATCH],
    head: usize,
    filled: usize,
}

/// An AF_XDP socket on one (interface, queue) with its UMEM and rings.
pub struct XdpDevice {
    // Field order is drop order: rings, then the socket, then the UMEM.
    rx: Consumer<libc::xdp_desc>,
    fill: Producer<u64>,
    tx: TxPath,
    fd: OwnedFd,
    umem: Mmap,
    name: IfName,
    queue: u32,
    mtu: u32,
    zero_copy: bool,
    need_wakeup: bool,
    frame_size: u32,
    rx_frames: u32,
    batch: RxBatch,
    stats: XdpStats,
}

// SAFETY: the raw pointers inside point into mappings this value owns exclusively (the
// UMEM and the rings); nothing is shared with another thread, so moving the whole device to
// another thread is sound.
unsafe impl Send for XdpDevice {}

impl fmt::Debug for XdpDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpDevice")
            .field("name", &self.name)
            .field("queue", &self.queue)
            .field("fd", &self.fd.as_raw_fd())
            .field("zero_copy", &self.zero_copy)
            .field("mtu", &self.mtu)
            .finish_non_exhaustive()
    }
}

fn setsockopt<T>(fd: BorrowedFd<'_>, name: libc::c_int, value: &T) -> Result<(), i32> {
    // SAFETY: `value` is a valid T for the duration of the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (value as *const T).cast(),
            core::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 { Err(sys::errno()) } else { Ok(()) }
}

/// Reads a `T` option; fails with `EINVAL` if the kernel returns a shorter value.
fn getsockopt<T: Copy>(fd: BorrowedFd<'_>, name: libc::c_int, mut value: T) -> Result<T, i32> {
    let mut len = core::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a valid, exclusively borrowed T and `len` its size; the kernel
    // writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(sys::errno());
    }
    if len as usize != core::mem::size_of::<T>() {
        return Err(libc::EINVAL);
    }
    Ok(value)
}

impl XdpDevice {
    /// Binds an AF_XDP socket to `queue` of the interface `program` is attached to, with
    /// its own UMEM and rings sized by `config`, and puts it in the program's XSKMAP.
    ///
    /// Zero-copy is tried first unless `config.zero_copy` is [`ZeroCopy::Off`]; when the
    /// driver refuses it (`EOPNOTSUPP`, `EINVAL`, as veth does) and zero-copy is not
    /// required, the socket is rebuilt in copy mode.
    ///
    /// # Errors
    /// [`XdpError::BadConfig`], [`XdpError::NoSuchQueue`], [`XdpError::UnsupportedMtu`],
    /// or [`XdpError::Sys`] naming the failed step (`EBUSY` if another socket has the queue;
    /// the kernel frees a queue from a work queue, so a bind right after the previous
    /// socket closed may see `EBUSY` for a few milliseconds).
    pub fn bind(
        program: &XdpProgram,
        queue: u32,
        config: &XdpConfig,
    ) -> Result<XdpDevice, XdpError> {
        config.check()?;
        let name = program.name();
        if queue >= program.rx_queues() {
            return Err(XdpError::NoSuchQueue {
                name,
                queue,
                queues: program.rx_queues(),
            });
        }
        let mtu = program.mtu();
        if mtu > config.max_mtu() || mtu < 576 {
            return Err(XdpError::UnsupportedMtu {
                name,
                mtu,
                max: config.max_mtu(),
            });
        }
        let mut device = match config.zero_copy {
            ZeroCopy::Off => Self::open(program, queue, config, libc::XDP_COPY)?,
            ZeroCopy::Required => Self::open(program, queue, config, libc::XDP_ZEROCOPY)?,
            ZeroCopy::Auto => match Self::open(program, queue, config, libc::XDP_ZEROCOPY) {
                Err(XdpError::Sys {
                    op: XdpOp::Bind,
                    errno: libc::EOPNOTSUPP | libc::EINVAL | 524, // 524: ENOTSUPP
                    ..
                }) => Self::open(program, queue, config, libc::XDP_COPY)?,
                other => other?,
            },
        };
        bpf::map_update(program.map(), queue, device.fd.as_raw_fd() as u32).map_err(|errno| {
            XdpError::Sys {
                name,
                op: XdpOp::MapUpdate,
                errno,
            }
        })?;
        device.give_all_rx_frames();
        Ok(device)
    }

    /// Creates, sizes and binds the socket with `mode` (`XDP_COPY` or `XDP_ZEROCOPY`).
    fn open(
        program: &XdpProgram,
        queue: u32,
        config: &XdpConfig,
        mode: u16,
    ) -> Result<XdpDevice, XdpError> {
        let name = program.name();
        let fail = |op, errno| XdpError::Sys { name, op, errno };
        // SAFETY: plain socket(2) call with constant arguments; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(fail(XdpOp::Socket, sys::errno()));
        }
        // SAFETY: `raw` was just returned by socket(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let umem_len = config.frame_size as usize * config.frame_count as usize;
        let umem = Mmap::anonymous(umem_len).map_err(|e| fail(XdpOp::UmemMap, e))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr() as u64,
            len: umem_len as u64,
            chunk_size: config.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(fd.as_fd(), libc::XDP_UMEM_REG, &reg).map_err(|e| fail(XdpOp::UmemReg, e))?;
        for ring in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(fd.as_fd(), ring, &config.ring_size)
                .map_err(|e| fail(XdpOp::RingSize, e))?;
        }
        // SAFETY: xdp_mmap_offsets is plain integers; all-zero is a valid value.
        let zeroed: libc::xdp_mmap_offsets = unsafe { core::mem::zeroed() };
        let offsets = getsockopt(fd.as_fd(), libc::XDP_MMAP_OFFSETS, zeroed)
            .map_err(|e| fail(XdpOp::MmapOffsets, e))?;

        let size = config.ring_size;
        let map = |len: usize, offset: u64| {
            Mmap::socket(fd.as_fd(), len, offset).map_err(|e| fail(XdpOp::RingMap, e))
        };
        let ring_err = |e| fail(XdpOp::RingMap, e);
        let rx_layout = Layout::from(offsets.rx);
        let rx = Consumer::new(
            map(
                ring::map_len::<libc::xdp_desc>(rx_layout, size),
                libc::XDP_PGOFF_RX_RING as u64,
            )?,
            rx_layout,
            size,
        )
        .map_err(ring_err)?;
        let tx_layout = Layout::from(offsets.tx);
        let tx_ring = Producer::new(
            map(
                ring::map_len::<libc::xdp_desc>(tx_layout, size),
                libc::XDP_PGOFF_TX_RING as u64,
            )?,
            tx_layout,
            size,
        )
        .map_err(ring_err)?;
        let fill_layout = Layout::from(offsets.fr);
        let fill = Producer::new(
            map(
                ring::map_len::<u64>(fill_layout, size),
                libc::XDP_UMEM_PGOFF_FILL_RING,
            )?,
            fill_layout,
            size,
        )
        .map_err(ring_err)?;
        let comp_layout = Layout::from(offsets.cr);
        let completion = Consumer::new(
            map(
                ring::map_len::<u64>(comp_layout, size),
                libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            )?,
            comp_layout,
            size,
        )
        .map_err(ring_err)?;

        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: mode | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: program.ifindex(),
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `addr` is a valid sockaddr_xdp and its size is passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_xdp).cast(),
                core::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(fail(XdpOp::Bind, sys::errno()));
        }
        let options = getsockopt(
            fd.as_fd(),
            libc::XDP_OPTIONS,
            libc::xdp_options { flags: 0 },
        )
        .map_err(|e| fail(XdpOp::Options, e))?;

        let rx_frames = config.frame_count / 2;
        let tx_frames = config.frame_count - rx_frames;
        let tx = TxPath {
            ring: tx_ring,
            completion,
            fd: fd.as_raw_fd(),
            umem: umem.ptr(),
            frame_size: config.frame_size,
            first: rx_frames,
            // Popped from the end: hand out low frames first.
            free: (0..tx_frames).rev().collect(),
            in_flight: vec![false; tx_frames as usize],
            unkicked: 0,
            need_wakeup: true,
            scratch: vec![0u8; config.frame_size as usize].into_boxed_slice(),
        };
        Ok(XdpDevice {
            rx,
            fill,
            tx,
            fd,
            umem,
            name,
            queue,
            mtu: program.mtu(),
            zero_copy: options.flags & libc::XDP_OPTIONS_ZEROCOPY != 0,
            need_wakeup: true,
            frame_size: config.frame_size,
            rx_frames,
            batch: RxBatch {
                addr: [0; RX_BATCH],
                len: [0; RX_BATCH],
                head: 0,
                filled: 0,
            },
            stats: XdpStats::default(),
        })
    }

    /// Puts every receive frame on the fill ring (at bind).
    fn give_all_rx_frames(&mut self) {
        let n = self.fill.free(self.rx_frames);
        for i in 0..n {
            self.fill
                .write(i, u64::from(i) * u64::from(self.frame_size));
        }
        self.fill.submit(n);
        self.wake_fill();
    }

    /// The interface name.
    pub fn name(&self) -> IfName {
        self.name
    }

    /// The queue this socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// True if the socket runs in zero-copy mode (`XDP_OPTIONS_ZEROCOPY`), false in copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The IP MTU reported to smoltcp.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The socket, for callers that multiplex it with other fds.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Counters of this socket (the kernel's part as of [`XdpDevice::read_kernel_stats`]).
    pub fn stats(&self) -> &XdpStats {
        &self.stats
    }

    /// Frames taken from the rx ring and not yet handed to the stack.
    pub fn buffered(&self) -> usize {
        let batch = &self.batch;
        batch.len[batch.head..batch.filled]
            .iter()
            .filter(|&&len| len > 0)
            .count()
    }

    /// Reads the kernel's `XDP_STATISTICS` into [`XdpStats::kernel`] and returns them.
    ///
    /// # Errors
    /// [`XdpError::Sys`] with [`XdpOp::Statistics`].
    pub fn read_kernel_stats(&mut self) -> Result<KernelStats, XdpError> {
        // SAFETY: xdp_statistics is plain integers; all-zero is a valid value.
        let zeroed: libc::xdp_statistics = unsafe { core::mem::zeroed() };
        let s = getsockopt(self.fd.as_fd(), libc::XDP_STATISTICS, zeroed).map_err(|errno| {
            XdpError::Sys {
                name: self.name,
                op: XdpOp::Statistics,
                errno,
            }
        })?;
        self.stats.kernel = KernelStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        };
        Ok(self.stats.kernel)
    }

    /// Sends what transmit tokens queued (a `sendto` kick if the kernel wants one) and takes
    /// completed frames back. Call after each egress step; `receive` also does it per batch.
    pub fn flush(&mut self) {
        self.tx.reap(&mut self.stats);
        self.tx.kick(&mut self.stats);
    }

    /// Waits until a frame can be read, `also` (a wake-up descriptor, e.g. an eventfd other
    /// cores write to) is readable, or `timeout` passes (`None`: no limit), with `poll(2)`,
    /// after flushing transmit frames; returns at once if the batch still holds frames. For the
    /// park idle policy. A wake-up through `also` is reported as [`Wait::TimedOut`].
    ///
    /// # Errors
    /// [`XdpError::Sys`] with [`XdpOp::Poll`] if poll(2) fails (not on `EINTR`, which is
    /// reported as [`Wait::TimedOut`] so the caller re-checks its own state).
    pub fn wait(
        &mut self,
        timeout: Option<Duration>,
        also: Option<BorrowedFd<'_>>,
    ) -> Result<Wait, XdpError> {
        if self.buffered() > 0 {
            return Ok(Wait::Readable);
        }
        self.flush();
        match sys::poll_readable(self.fd.as_fd(), also, timeout) {
            Ok(true) => Ok(Wait::Readable),
            Ok(false) => Ok(Wait::TimedOut),
            Err(errno) => Err(XdpError::Sys {
                name: self.name,
                op: XdpOp::Poll,
                errno,
            }),
        }
    }

    /// Wakes the kernel with `recvfrom` if the fill ring asks for it.
    fn wake_fill(&mut self) {
        if self.need_wakeup && self.fill.needs_wakeup() {
            self.stats.fill_wakeups += 1;
            // SAFETY: recvfrom(2) with no buffer and no address on our own AF_XDP socket;
            // it only makes the kernel look at the fill ring.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    core::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    core::ptr::null_mut(),
                    core::ptr::null_mut(),
                )
            };
        }
    }

    /// Returns the last batch's frames to the fill ring, pushes pending transmit frames,
    /// and takes the next batch of descriptors from the rx ring.
    fn refill(&mut self) {
        let returned = self.batch.filled as u32;
        self.batch.head = 0;
        self.batch.filled = 0;
        if self.fill.pending() == 0 {
            self.stats.fill_empty += 1;
        }
        if returned > 0 {
            // Always room: the fill ring holds every receive frame (XdpConfig::check).
            let n = self.fill.free(returned);
            let size = u64::from(self.frame_size);
            for i in 0..n {
                let frame = self.batch.addr[i as usize] / size * size;
                self.fill.write(i, frame);
            }
            self.fill.submit(n);
        }
        self.wake_fill();
        if self.tx.unkicked > 0 {
            self.flush();
        }

        let ready = self.rx.available(RX_BATCH as u32);
        let size = u64::from(self.frame_size);
        let mut kept = 0;
        for i in 0..ready {
            let desc = self.rx.read(i);
            let frame = desc.addr / size;
            if frame >= u64::from(self.rx_frames) {
                // Not one of our receive frames: nothing to read or give back.
                self.stats.rx_invalid += 1;
                continue;
            }
            let in_frame = desc.addr % size + u64::from(desc.len) <= size;
            let len = if in_frame && desc.len as usize >= ETHERNET_HEADER_LEN {
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += u64::from(desc.len);
                desc.len
            } else {
                self.stats.rx_invalid += 1;
                0
            };
            self.batch.addr[kept] = desc.addr;
            self.batch.len[kept] = len;
            kept += 1;
        }
        if ready > 0 {
            self.rx.release(ready);
            self.stats.rx_batches += 1;
        }
        self.batch.filled = kept;
    }
}

/// A received frame: borrowed from the UMEM until the next batch.
pub struct XdpRxToken<'a> {
    frame: &'a [u8],
}

impl phy::RxToken for XdpRxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.frame)
    }
}

/// Permission to send one frame through the device's transmit half.
pub struct XdpTxToken<'a> {
    tx: &'a mut TxPath,
    stats: &'a mut XdpStats,
}

impl phy::TxToken for XdpTxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        self.tx.send(self.stats, len, f)
    }
}

impl Device for XdpDevice {
    type RxToken<'a> = XdpRxToken<'a>;
    type TxToken<'a> = XdpTxToken<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        loop {
            if self.batch.head == self.batch.filled {
                self.refill();
                if self.batch.filled == 0 {
                    return None;
                }
            }
            let index = self.batch.head;
            self.batch.head += 1;
            let len = self.batch.len[index] as usize;
            if len == 0 {
                continue;
            }
            let addr = self.batch.addr[index] as usize;
            // SAFETY: `refill` checked that [addr, addr + len) lies inside one receive frame
            // of the UMEM. The kernel handed the frame to us on the rx ring and gets it back
            // only in the next `refill`, which needs `&mut self` and so cannot run while
            // this borrow lives; transmit tokens write transmit frames only.
            let frame = unsafe { core::slice::from_raw_parts(self.umem.ptr().add(addr), len) };
            let tx = XdpTxToken {
                tx: &mut self.tx,
                stats: &mut self.stats,
            };
            return Some((XdpRxToken { frame }, tx));
        }
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        if self.tx.free.is_empty() {
            self.tx.reap(&mut self.stats);
            if self.tx.free.is_empty() {
                self.tx.kick(&mut self.stats);
                self.tx.reap(&mut self.stats);
            }
            if self.tx.free.is_empty() {
                self.stats.tx_exhausted += 1;
                return None;
            }
        }
        Some(XdpTxToken {
            tx: &mut self.tx,
            stats: &mut self.stats,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu as usize + ETHERNET_HEADER_LEN;
        // checksum: default (Checksum::Both everywhere); see the module docs of `xdp`.
        caps
    }
}
