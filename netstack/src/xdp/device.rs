//! One AF_XDP socket on one (interface, queue), as a smoltcp [`Device`].
//!
//! ```text
//! UMEM: frame_count frames of frame_size bytes, aligned mode, one mapping
//!   frames [0, n/2)  receive: in the fill ring, in the kernel, in the rx ring, or in our batch
//!   frames [n/2, n)  transmit: in slots of `span` adjacent frames, free or in flight
//! receive(): batch empty? → give the last batch's frames back to the fill ring (wake the
//!            kernel if it asks), push pending tx, take whole packets from the rx ring
//!            (busy polling: nothing there → recvfrom() runs the NAPI, take again) → tokens
//! TxToken::consume: pop a free slot, smoltcp writes the frame in place, publish it on the
//!            tx ring (one descriptor per UMEM frame it covers), kick with sendto()
//!            every TX_KICK_BATCH descriptors and in flush()
//! completion ring: a slot is free again once every frame it sent came back
//! ```
//!
//! - Receive frames come back to the fill ring after every batch, all of them, so the fill
//!   ring only runs dry when the kernel holds every receive frame (we are a whole ring
//!   behind). Each refill that finds the fill ring empty counts `fill_empty`.
//! - Copy mode, as on veth, has the kernel copy frames in and out; the descriptors still
//!   say where in the UMEM, and the receive offset (`XDP_PACKET_HEADROOM`, 256 bytes in
//!   this kernel) is taken from each descriptor, never assumed.
//! - Multi-buffer: when the interface MTU does not fit one frame, the socket is bound with
//!   `XDP_USE_SG` and a frame may span several UMEM frames, chained with `XDP_PKT_CONTD`:
//!   the `rx` module assembles received chains (single frames are still read in place) and
//!   the `tx` module writes a large frame into adjacent frames and sends it as a chain.
//! - `XDP_USE_NEED_WAKEUP` is always asked for: transmit kicks (`sendto`) happen only when
//!   the tx ring's flag asks for one (copy mode always does: the copy is done inside
//!   `sendto`), and the fill ring is woken with `recvfrom` only when its flag is set.
//! - A sleep leaves the transmit kick to `poll(2)`: with `XDP_USE_NEED_WAKEUP`, the kernel's
//!   poll of the socket drives transmission itself (copy mode sends the tx ring from inside
//!   it, zero copy wakes the driver), so a worker that answers and then sleeps pays one
//!   system call, not a `sendto` and a `poll`. Copy mode sends at most 32 descriptors per
//!   call, so a longer tx ring is kicked with `sendto` first, as is every ring when busy
//!   polling. [`XdpDevice::drained`] tells a worker when the rx ring was found empty, so it
//!   may sleep without polling once more.
//! - Preferred busy polling ([`XdpDevice::set_busy_poll`]): the socket asks the kernel to
//!   leave the queue's NAPI to this thread. Then a refill that finds the rx ring empty calls
//!   `recvfrom`, which runs the NAPI once (receive and transmit completions) before we look
//!   again, and every flush with descriptors on the tx ring calls `sendto`, whatever the
//!   wakeup flags say. The NAPI must also be told to wait for us (`napi_defer_hard_irqs`,
//!   `gro_flush_timeout` on the interface, set by the administrator); without a NAPI id
//!   (before the first frame, or on a device without one) the calls only wake the kernel.
//! - Nothing is allocated per packet: the batch, the slots, the bitmaps, the assembly buffer
//!   and a scratch frame are allocated in [`XdpDevice::bind`].

use core::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

use super::ring::{self, Consumer, Layout, Mmap, Producer};
use super::rx::{MAX_CHAIN, RxGeometry, RxPath};
use super::tx::{Kick, TxGeometry, TxPath};
use super::{XdpError, XdpOp, XdpProgram, bpf};
use crate::sys::{self, IfName};
use crate::tap::{ETHERNET_HEADER_LEN, Wait};

/// Receive descriptors taken per batch (the fill ring is topped up after each).
pub const RX_BATCH: usize = 64;

/// Most pending transmit descriptors a sleep leaves to `poll(2)` to send (the kernel's copy
/// mode sends 32 per call); more are kicked with `sendto` first.
const POLL_SENDS: u32 = 32;

/// Transmit descriptors published before a `sendto` kick without waiting for `flush`
/// (the kernel's copy-mode transmit also works in batches of 32).
pub const TX_KICK_BATCH: u32 = 32;

/// `XDP_PACKET_HEADROOM`: where the kernel puts received data in a frame (checked against
/// each descriptor; used only to size the MTU check).
const PACKET_HEADROOM: u32 = 256;

/// One 802.1Q tag a frame may carry beyond the Ethernet header.
const VLAN_TAG_LEN: u32 = 4;

/// Most UMEM frames one transmitted frame may span: copy mode takes up to `MAX_SKB_FRAGS`
/// (17) descriptors per packet, and zero-copy drivers advertise their own limit, commonly
/// at least 5 (an MTU of 9000 takes 3 frames of 4096 bytes).
pub const MAX_TX_SPAN: u32 = 16;

/// Socket options of preferred busy polling, from the kernel's `asm-generic/socket.h` (the
/// numbers x86, arm, riscv, powerpc, mips and alpha use; the libc crate does not export
/// them for Linux).
const SO_BUSY_POLL: libc::c_int = 46;
const SO_INCOMING_NAPI_ID: libc::c_int = 56;
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

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
    /// Bytes per UMEM frame: 2048 or 4096 (aligned mode needs a power of two; a frame holds
    /// `XDP_PACKET_HEADROOM` plus the received data, or a chain's piece of it).
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
    /// 4096-byte frames (MTU up to 3822 in one frame), 4096 of them (16 MiB), 2048-entry rings.
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
    /// fits them (1500 does), else 4096; and a receive half of two packets per connection
    /// plus a batch (a request and an ACK or FIN each), in frames (a packet of a multi-buffer
    /// MTU takes several), at least the default 2048 frames and at most 2^16. A client with
    /// something in flight on every connection sends that many frames at once, and a frame the
    /// kernel finds no fill-ring entry for is dropped and retransmitted: 2,048 receive frames
    /// under 10,000 connections dropped 178,000 frames, and 3,000 connections closing at once
    /// still dropped 1,960 of 4,096. The TAP path sizes its queue for the same reason.
    /// Transmit frames match (the rings stay one size).
    pub fn for_link(connections: usize, mtu: u32) -> Self {
        let default = XdpConfig::default();
        let small = XdpConfig {
            frame_size: 2048,
            ..default
        };
        let sized = if mtu <= small.max_mtu() {
            small
        } else {
            default
        };
        let receive = connections
            .saturating_mul(2)
            .saturating_add(RX_BATCH)
            .saturating_mul(sized.rx_span(mtu) as usize)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX)
            .clamp(default.frame_count as usize / 2, 1 << 16) as u32;
        XdpConfig {
            frame_count: 2 * receive,
            ring_size: receive,
            ..sized
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

    /// The largest IP MTU one frame holds (larger ones take multi-buffer frames).
    pub fn max_mtu(&self) -> u32 {
        self.frame_size - PACKET_HEADROOM - ETHERNET_HEADER_LEN as u32 - VLAN_TAG_LEN
    }

    /// The largest IP MTU with multi-buffer frames: what [`MAX_TX_SPAN`] frames hold.
    pub fn max_mtu_multi_buffer(&self) -> u32 {
        MAX_TX_SPAN * self.frame_size - ETHERNET_HEADER_LEN as u32 - VLAN_TAG_LEN
    }

    /// True if frames of an `mtu` link do not fit one UMEM frame.
    pub fn multi_buffer(&self, mtu: u32) -> bool {
        mtu > self.max_mtu()
    }

    /// UMEM frames a received frame of an `mtu` link takes at most (each holds
    /// `frame_size - XDP_PACKET_HEADROOM` bytes of it).
    pub fn rx_span(&self, mtu: u32) -> u32 {
        max_frame_len(mtu).div_ceil(self.frame_size - PACKET_HEADROOM)
    }

    /// Adjacent UMEM frames a transmitted frame of an `mtu` link takes at most.
    pub fn tx_span(&self, mtu: u32) -> u32 {
        if self.multi_buffer(mtu) {
            max_frame_len(mtu).div_ceil(self.frame_size)
        } else {
            1
        }
    }
}

/// The largest frame of an `mtu` link: Ethernet header, one VLAN tag, the IP packet.
fn max_frame_len(mtu: u32) -> u32 {
    mtu + ETHERNET_HEADER_LEN as u32 + VLAN_TAG_LEN
}

/// Preferred busy polling on a socket: `SO_PREFER_BUSY_POLL` on, `SO_BUSY_POLL` at
/// [`BusyPoll::USECS`], and `SO_BUSY_POLL_BUDGET`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// Packets the NAPI may process per busy poll (`SO_BUSY_POLL_BUDGET`, 1 to 65535).
    pub budget: u16,
}

impl BusyPoll {
    /// The default budget: one receive batch, and the usual NAPI weight.
    pub const DEFAULT_BUDGET: u16 = 64;

    /// `SO_BUSY_POLL` in microseconds. Our `recvfrom`/`sendto` calls are non-blocking, so
    /// the kernel polls once per call whatever the value; it must only be non-zero (busy
    /// polling is off at 0). 20 µs is the value the kernel's AF_XDP example uses.
    pub const USECS: u32 = 20;
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll {
            budget: BusyPoll::DEFAULT_BUDGET,
        }
    }
}

/// The busy-poll options of a socket as the kernel reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPollOptions {
    /// `SO_PREFER_BUSY_POLL`.
    pub prefer: bool,
    /// `SO_BUSY_POLL`, microseconds.
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET` (0: the kernel's default, 8); `None` where the kernel cannot
    /// report it (Linux 6.18 sets it but answers `ENOPROTOOPT` to `getsockopt`).
    pub budget: Option<u32>,
}

/// The kernel's counters of one socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames dropped for other reasons than the two below (e.g. too large for a frame, or
    /// too few fill-ring entries for a multi-buffer frame).
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
    /// Of those frames, the multi-buffer ones (several descriptors, assembled).
    pub rx_chained: u64,
    /// Non-empty receive batches.
    pub rx_batches: u64,
    /// Received frames refused: a descriptor outside the receive frames or overrunning its
    /// frame, shorter than an Ethernet header, longer than the MTU allows, a chain where
    /// none was asked for or longer than `MAX_CHAIN` descriptors; dropped.
    pub rx_invalid: u64,
    /// Refills that found the fill ring empty (the kernel had used every frame given).
    pub fill_empty: u64,
    /// `recvfrom` calls made because the fill ring asked for a wakeup.
    pub fill_wakeups: u64,
    /// `recvfrom` calls made to busy-poll (the rx ring was empty).
    pub busy_polls: u64,
    /// Frames published on the tx ring.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Of those frames, the multi-buffer ones (several descriptors).
    pub tx_chained: u64,
    /// `sendto` kicks.
    pub tx_kicks: u64,
    /// Sleeps that left pending transmit descriptors to `poll(2)` to send.
    pub tx_poll_kicks: u64,
    /// Kicks answered `EAGAIN`/`EBUSY`/`ENOBUFS` (retried after reaping completions).
    pub tx_kick_busy: u64,
    /// Kicks failed otherwise (e.g. `ENETDOWN`); the frames stay queued.
    pub tx_errors: u64,
    /// `transmit` calls refused because every transmit slot was in flight.
    pub tx_exhausted: u64,
    /// Frames smoltcp wrote after the last free slot went; dropped.
    pub tx_dropped: u64,
    /// Frames larger than a transmit slot that smoltcp asked for; dropped.
    pub tx_oversize: u64,
    /// Completion entries that freed an in-flight frame.
    pub completions: u64,
    /// Completion entries for frames that were not in flight; ignored.
    pub bogus_completions: u64,
    /// Transmit slots (frames sent, single or multi-buffer) in flight at the last reap.
    pub tx_in_flight: u64,
    /// `errno` of the most recent failed kick, 0 if none.
    pub last_errno: i32,
    /// The kernel's counters as of the last [`XdpDevice::read_kernel_stats`].
    pub kernel: KernelStats,
}

/// An AF_XDP socket on one (interface, queue) with its UMEM and rings.
pub struct XdpDevice {
    // Field order is drop order: rings, then the socket, then the UMEM.
    rx: RxPath,
    tx: TxPath,
    fd: OwnedFd,
    /// The UMEM, kept mapped while the rings point into it.
    _umem: Mmap,
    name: IfName,
    queue: u32,
    mtu: u32,
    zero_copy: bool,
    multi_buffer: bool,
    frame_size: u32,
    busy_poll: Option<BusyPoll>,
    need_wakeup: bool,
    /// True if the last refill found the rx ring empty.
    found_empty: bool,
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
            .field("multi_buffer", &self.multi_buffer)
            .field("busy_poll", &self.busy_poll)
            .field("mtu", &self.mtu)
            .finish_non_exhaustive()
    }
}

fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> Result<(), i32> {
    // SAFETY: `value` is a valid T for the duration of the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            core::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 { Err(sys::errno()) } else { Ok(()) }
}

/// Reads a `T` option; fails with `EINVAL` if the kernel returns a shorter value.
fn getsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    mut value: T,
) -> Result<T, i32> {
    let mut len = core::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a valid, exclusively borrowed T and `len` its size; the kernel
    // writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
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
    /// required, the socket is rebuilt in copy mode. When the interface MTU does not fit a
    /// frame, the socket is bound with `XDP_USE_SG` (multi-buffer frames; Linux 6.6 or later
    /// in copy mode, and a driver that supports it in zero-copy mode).
    ///
    /// # Errors
    /// [`XdpError::BadConfig`], [`XdpError::NoSuchQueue`], [`XdpError::UnsupportedMtu`],
    /// [`XdpError::MultiBufferRefused`], or [`XdpError::Sys`] naming the failed step
    /// (`EBUSY` if another socket has the queue; the kernel frees a queue from a work queue,
    /// so a bind right after the previous socket closed may see `EBUSY` for a few
    /// milliseconds).
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
        if mtu > config.max_mtu_multi_buffer() || mtu < 576 {
            return Err(XdpError::UnsupportedMtu {
                name,
                mtu,
                max: config.max_mtu_multi_buffer(),
            });
        }
        let sg = if config.multi_buffer(mtu) {
            libc::XDP_USE_SG
        } else {
            0
        };
        let refused = |e: XdpError| match e {
            XdpError::Sys {
                op: XdpOp::Bind,
                errno,
                ..
            } if sg != 0 && errno != libc::EBUSY => {
                XdpError::MultiBufferRefused { name, mtu, errno }
            }
            other => other,
        };
        let open = |mode| Self::open(program, queue, config, mode | sg);
        let mut device = match config.zero_copy {
            ZeroCopy::Off => open(libc::XDP_COPY).map_err(refused)?,
            ZeroCopy::Required => open(libc::XDP_ZEROCOPY).map_err(refused)?,
            ZeroCopy::Auto => match open(libc::XDP_ZEROCOPY) {
                Err(XdpError::Sys {
                    op: XdpOp::Bind,
                    errno: libc::EOPNOTSUPP | libc::EINVAL | 524, // 524: ENOTSUPP
                    ..
                }) => open(libc::XDP_COPY).map_err(refused)?,
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
        device.rx.give_all();
        device.wake_fill();
        Ok(device)
    }

    /// Creates, sizes and binds the socket with `flags` (`XDP_COPY` or `XDP_ZEROCOPY`, and
    /// `XDP_USE_SG` for multi-buffer frames).
    fn open(
        program: &XdpProgram,
        queue: u32,
        config: &XdpConfig,
        flags: u16,
    ) -> Result<XdpDevice, XdpError> {
        let name = program.name();
        let fail = |op, errno| XdpError::Sys { name, op, errno };
        let xdp_opt = |fd, opt, value: &u32| setsockopt(fd, libc::SOL_XDP, opt, value);
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
        setsockopt(fd.as_fd(), libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
            .map_err(|e| fail(XdpOp::UmemReg, e))?;
        for ring in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            xdp_opt(fd.as_fd(), ring, &config.ring_size).map_err(|e| fail(XdpOp::RingSize, e))?;
        }
        // SAFETY: xdp_mmap_offsets is plain integers; all-zero is a valid value.
        let zeroed: libc::xdp_mmap_offsets = unsafe { core::mem::zeroed() };
        let offsets = getsockopt(fd.as_fd(), libc::SOL_XDP, libc::XDP_MMAP_OFFSETS, zeroed)
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
            sxdp_flags: flags | libc::XDP_USE_NEED_WAKEUP,
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
            libc::SOL_XDP,
            libc::XDP_OPTIONS,
            libc::xdp_options { flags: 0 },
        )
        .map_err(|e| fail(XdpOp::Options, e))?;

        let mtu = program.mtu();
        let multi_buffer = flags & libc::XDP_USE_SG != 0;
        let rx_frames = config.frame_count / 2;
        let rx = RxPath::new(
            rx,
            fill,
            umem.ptr(),
            RxGeometry {
                frame_size: config.frame_size,
                rx_frames,
                // One frame bounds a single-buffer packet (as the in-frame check does).
                max_len: if multi_buffer {
                    max_frame_len(mtu)
                } else {
                    config.frame_size
                },
                chains: multi_buffer,
            },
        );
        let tx = TxPath::new(
            tx_ring,
            completion,
            fd.as_raw_fd(),
            umem.ptr(),
            TxGeometry {
                frame_size: config.frame_size,
                first: rx_frames,
                frames: config.frame_count - rx_frames,
                span: config.tx_span(mtu),
            },
        );
        debug_assert!(config.rx_span(mtu) as usize <= MAX_CHAIN || !multi_buffer);
        Ok(XdpDevice {
            rx,
            tx,
            fd,
            _umem: umem,
            name,
            queue,
            mtu,
            zero_copy: options.flags & libc::XDP_OPTIONS_ZEROCOPY != 0,
            multi_buffer,
            frame_size: config.frame_size,
            busy_poll: None,
            need_wakeup: true,
            found_empty: false,
            stats: XdpStats::default(),
        })
    }

    /// Turns on preferred busy polling for this socket (`SO_BUSY_POLL` at
    /// [`BusyPoll::USECS`], `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`); from then on the
    /// device runs the queue's NAPI from its own `recvfrom`/`sendto` calls (see the module
    /// docs). If the kernel refuses an option, the ones already set are turned off again and
    /// the device polls as before.
    ///
    /// # Errors
    /// [`XdpError::Sys`] with [`XdpOp::BusyPoll`], [`XdpOp::PreferBusyPoll`] or
    /// [`XdpOp::BusyPollBudget`]: `EPERM` without `CAP_NET_ADMIN`, `ENOPROTOOPT` on a kernel
    /// built without `CONFIG_NET_RX_BUSY_POLL`, `EINVAL` for a budget of 0.
    pub fn set_busy_poll(&mut self, busy: BusyPoll) -> Result<(), XdpError> {
        let fd = self.fd.as_fd();
        let set = |opt, value: libc::c_int| setsockopt(fd, libc::SOL_SOCKET, opt, &value);
        let result = if busy.budget == 0 {
            Err((XdpOp::BusyPollBudget, libc::EINVAL))
        } else {
            set(SO_BUSY_POLL, BusyPoll::USECS as libc::c_int)
                .map_err(|e| (XdpOp::BusyPoll, e))
                .and_then(|()| set(SO_PREFER_BUSY_POLL, 1).map_err(|e| (XdpOp::PreferBusyPoll, e)))
                .and_then(|()| {
                    set(SO_BUSY_POLL_BUDGET, libc::c_int::from(busy.budget))
                        .map_err(|e| (XdpOp::BusyPollBudget, e))
                })
        };
        match result {
            Ok(()) => {
                self.busy_poll = Some(busy);
                self.tx.busy_poll = true;
                Ok(())
            }
            Err((op, errno)) => {
                self.clear_busy_poll();
                Err(XdpError::Sys {
                    name: self.name,
                    op,
                    errno,
                })
            }
        }
    }

    /// Turns preferred busy polling off again (`SO_PREFER_BUSY_POLL` and `SO_BUSY_POLL` to 0,
    /// which needs no privilege); the device polls as without it.
    pub fn clear_busy_poll(&mut self) {
        let fd = self.fd.as_fd();
        let set = |opt, value: libc::c_int| setsockopt(fd, libc::SOL_SOCKET, opt, &value);
        let _ = set(SO_PREFER_BUSY_POLL, 0);
        let _ = set(SO_BUSY_POLL, 0);
        self.busy_poll = None;
        self.tx.busy_poll = false;
    }

    /// The busy polling this device does, if [`XdpDevice::set_busy_poll`] succeeded.
    pub fn busy_poll(&self) -> Option<BusyPoll> {
        self.busy_poll
    }

    /// The busy-poll options the kernel holds for the socket.
    ///
    /// # Errors
    /// [`XdpError::Sys`] naming the option that could not be read.
    pub fn busy_poll_options(&self) -> Result<BusyPollOptions, XdpError> {
        let get = |op, opt| {
            getsockopt(self.fd.as_fd(), libc::SOL_SOCKET, opt, 0 as libc::c_int).map_err(|errno| {
                XdpError::Sys {
                    name: self.name,
                    op,
                    errno,
                }
            })
        };
        let budget = match get(XdpOp::BusyPollBudget, SO_BUSY_POLL_BUDGET) {
            Ok(budget) => Some(budget as u32),
            Err(XdpError::Sys {
                errno: libc::ENOPROTOOPT,
                ..
            }) => None,
            Err(e) => return Err(e),
        };
        Ok(BusyPollOptions {
            prefer: get(XdpOp::PreferBusyPoll, SO_PREFER_BUSY_POLL)? != 0,
            usecs: get(XdpOp::BusyPoll, SO_BUSY_POLL)? as u32,
            budget,
        })
    }

    /// The id of the NAPI that delivers this socket's frames (`SO_INCOMING_NAPI_ID`), which
    /// busy polling runs; `None` until the kernel has recorded one (it does with the first
    /// frame received from a driver NAPI; generic mode and some devices have none).
    pub fn napi_id(&self) -> Option<u32> {
        getsockopt(
            self.fd.as_fd(),
            libc::SOL_SOCKET,
            SO_INCOMING_NAPI_ID,
            0 as libc::c_uint,
        )
        .ok()
        .filter(|&id| id != 0)
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

    /// True if the socket takes multi-buffer frames (bound with `XDP_USE_SG`: the MTU does
    /// not fit one UMEM frame).
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// Bytes per UMEM frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
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
        self.rx.buffered()
    }

    /// True if every packet taken has been handed to the stack and the last refill found the
    /// rx ring empty: nothing was waiting as of that look, so a caller with nothing else to
    /// do may [`wait`](XdpDevice::wait) at once (the wait returns at once if a frame came
    /// in since).
    pub fn drained(&self) -> bool {
        self.buffered() == 0 && self.found_empty
    }

    /// Reads the kernel's `XDP_STATISTICS` into [`XdpStats::kernel`] and returns them.
    ///
    /// # Errors
    /// [`XdpError::Sys`] with [`XdpOp::Statistics`].
    pub fn read_kernel_stats(&mut self) -> Result<KernelStats, XdpError> {
        // SAFETY: xdp_statistics is plain integers; all-zero is a valid value.
        let zeroed: libc::xdp_statistics = unsafe { core::mem::zeroed() };
        let s = getsockopt(self.fd.as_fd(), libc::SOL_XDP, libc::XDP_STATISTICS, zeroed).map_err(
            |errno| XdpError::Sys {
                name: self.name,
                op: XdpOp::Statistics,
                errno,
            },
        )?;
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

    /// How transmit kicks are decided: the kernel's wakeup flag, or (busy polling) whenever
    /// the tx ring holds something.
    fn kick_when(&self) -> Kick {
        if self.busy_poll.is_some() {
            Kick::IfPending
        } else {
            Kick::IfAsked
        }
    }

    /// Sends what transmit tokens queued (a `sendto` kick if the kernel wants one, or, when
    /// busy polling, whenever descriptors wait) and takes completed frames back. Call after
    /// each egress step; `receive` also does it per batch.
    pub fn flush(&mut self) {
        self.tx.reap(&mut self.stats);
        let when = self.kick_when();
        self.tx.kick(&mut self.stats, when);
    }

    /// Waits until a frame can be read, one of `also` (wake-up descriptors: an eventfd other
    /// cores write to, a sleep timer; at most [`MAX_ALSO`](crate::MAX_ALSO)) is readable, or
    /// `timeout` passes (`None`: no limit), with `poll(2)`, which also sends the frames transmit tokens queued (see the module docs); returns at
    /// once if the batch still holds frames. For the park idle policy. A wake-up through
    /// `also` is reported as [`Wait::TimedOut`].
    ///
    /// # Errors
    /// [`XdpError::Sys`] with [`XdpOp::Poll`] if poll(2) fails (not on `EINTR`, which is
    /// reported as [`Wait::TimedOut`] so the caller re-checks its own state).
    pub fn wait(
        &mut self,
        timeout: Option<Duration>,
        also: &[BorrowedFd<'_>],
    ) -> Result<Wait, XdpError> {
        if self.buffered() > 0 {
            return Ok(Wait::Readable);
        }
        self.tx.reap(&mut self.stats);
        let pending = self.tx.pending();
        if pending > 0 {
            if self.need_wakeup && self.busy_poll.is_none() && pending <= POLL_SENDS {
                // poll(2) sends them (see the module docs); the next refill kicks whatever
                // it left.
                self.stats.tx_poll_kicks += 1;
            } else {
                let when = self.kick_when();
                self.tx.kick(&mut self.stats, when);
            }
        }
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

    /// `recvfrom(MSG_DONTWAIT)` with no buffer on our socket: wakes the kernel for the fill
    /// ring, or, busy polling, runs the queue's NAPI once.
    fn recv_kick(&self) {
        // SAFETY: recvfrom(2) with no buffer and no address on our own AF_XDP socket; it
        // only makes the kernel look at the fill ring (and poll the NAPI when busy polling).
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

    /// Wakes the kernel with `recvfrom` if the fill ring asks for it.
    fn wake_fill(&mut self) {
        if self.need_wakeup && self.rx.fill().needs_wakeup() {
            self.stats.fill_wakeups += 1;
            self.recv_kick();
        }
    }

    /// Returns the last batch's frames to the fill ring, pushes pending transmit frames,
    /// and takes the next batch of packets from the rx ring (busy polling: if there were
    /// none, runs the NAPI once and looks again).
    fn refill(&mut self) {
        if self.rx.fill().pending() == 0 {
            self.stats.fill_empty += 1;
        }
        self.rx.give_back();
        if self.busy_poll.is_none() {
            self.wake_fill();
        }
        if self.tx.unkicked > 0 {
            self.flush();
        }
        let mut taken = self.rx.take(&mut self.stats);
        if taken == 0 && self.busy_poll.is_some() {
            // The take may have dropped a broken chain's descriptors: their frames go back
            // before the next take starts a batch.
            self.rx.give_back();
            self.stats.busy_polls += 1;
            self.recv_kick();
            taken = self.rx.take(&mut self.stats);
        }
        self.found_empty = taken == 0;
    }
}

/// A received frame: borrowed from the UMEM (or, multi-buffer, from the assembly buffer)
/// until the next batch.
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

impl crate::RxPeek for XdpDevice {
    /// The packets of the current batch not yet handed out, except those received in pieces
    /// (a peek never takes from the rx ring).
    fn peek_rx<R>(&self, ahead: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.rx.peek(ahead).map(f)
    }
}

impl Device for XdpDevice {
    type RxToken<'a> = XdpRxToken<'a>;
    type TxToken<'a> = XdpTxToken<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if self.rx.buffered() == 0 {
            self.refill();
        }
        let frame = self.rx.next()?;
        let tx = XdpTxToken {
            tx: &mut self.tx,
            stats: &mut self.stats,
        };
        Some((XdpRxToken { frame }, tx))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        if self.tx.exhausted() {
            self.tx.reap(&mut self.stats);
            if self.tx.exhausted() {
                // Busy polling: the sendto runs the NAPI that completes frames, even with
                // nothing new on the tx ring.
                let when = if self.busy_poll.is_some() {
                    Kick::Always
                } else {
                    Kick::IfAsked
                };
                self.tx.kick(&mut self.stats, when);
                self.tx.reap(&mut self.stats);
            }
            if self.tx.exhausted() {
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
