//! A smoltcp [`Device`] over one queue of a Linux TAP device (`/dev/net/tun`).
//!
//! ```text
//! kernel TAP queue ──read(2) × up to RX_BATCH──▶ rx ring (fixed slots) ──▶ RxToken (&[u8] into a slot)
//! TxToken::consume ──fills the fixed tx frame──▶ write(2), one frame per call ──▶ kernel TAP queue
//! ```
//!
//! - The fd is opened `O_NONBLOCK` with `IFF_TAP | IFF_NO_PI` (plus `IFF_MULTI_QUEUE` when
//!   asked), so a frame is exactly an Ethernet frame and reads never block.
//! - Nothing is allocated per packet: the receive ring and the transmit frame are
//!   allocated once in [`TapDevice::open`] and reused.
//! - TAP has no batched syscall (`recvmmsg` does not apply to a character device), so the
//!   ring is filled with one `read(2)` per frame, up to [`RX_BATCH`] frames per refill, and
//!   a refill ends at the first `EAGAIN`. Transmit is one `write(2)` per frame.
//! - A refill that found the queue empty is not repeated for the same timestamp: smoltcp's
//!   callers poll a device once per timestamp, and when the ring runs dry in that poll the
//!   read that just found the queue empty stands (another would find it empty too, a system
//!   call for nothing; a frame that came in meanwhile is read at the next timestamp). So a
//!   worker that wakes for one frame pays one empty read, not two.
//! - The first refill after a [`TapDevice::wait`] that found the queue readable reads one
//!   frame and stops there, without the read that would find the queue empty: a sleeper
//!   woken at a low rate is woken for one frame, and the worker, once it has answered,
//!   sleeps again with `poll(2)`, which returns at once if more came in (the next refill then
//!   reads on until the queue is empty). So a wake-up for one frame costs `poll`, `read`,
//!   the replies' `write`s, and no empty `read`; a wake-up that finds several frames queued
//!   costs one `poll` more than reading on would. [`TapDevice::drained`] says true after
//!   such a refill (no frame buffered, none known to be waiting), and, as after an empty
//!   read, the same timestamp does not refill again.
//! - I/O errors never panic and are never silent: they land in [`TapStats`].
//!
//! Checksums: the TAP is opened without `IFF_VNET_HDR` and no `TUNSETOFFLOAD`, so the
//! kernel computes full checksums on frames it hands us, and verifies every checksum on
//! frames we write (it treats them like frames from a wire). We report
//! `ChecksumCapabilities::default()`, i.e. `Checksum::Both` for IPv4, TCP, UDP and ICMP:
//! smoltcp must compute them on transmit, and it also verifies them on receive, because a
//! TAP can carry frames the kernel forwarded without checking their L4 checksum.

use core::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

use crate::sys::{self, IfName, InvalidIfName};

/// Frames read per ring refill (one `read(2)` each).
pub const RX_BATCH: usize = 32;

/// Largest IP MTU the device buffers are sized for (jumbo frames).
pub const MAX_MTU: usize = 9000;

/// Ethernet header length (no FCS: TAP frames carry none).
pub const ETHERNET_HEADER_LEN: usize = 14;

/// Size of one receive slot and of the transmit frame: the largest frame
/// ([`MAX_MTU`] + Ethernet header + one 802.1Q tag) plus room to detect truncation.
const SLOT_BYTES: usize = 9216;
const MAX_FRAME_BYTES: usize = MAX_MTU + ETHERNET_HEADER_LEN + 4;
const _: () = assert!(SLOT_BYTES > MAX_FRAME_BYTES);

/// Counters of one TAP queue. Every failed or odd I/O lands in exactly one counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapStats {
    /// Frames read and handed to the stack.
    pub rx_frames: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// `read(2)` calls that found the queue empty (`EAGAIN`), one per refill that ended early.
    pub rx_empty_reads: u64,
    /// Refills after a wake-up that read one frame and stopped without an empty read.
    pub rx_wake_reads: u64,
    /// Frames larger than [`MAX_MTU`] allows, dropped.
    pub rx_truncated: u64,
    /// `read(2)` failures other than `EAGAIN`/`EINTR` (e.g. `EBADFD` after the device was deleted).
    pub rx_errors: u64,
    /// Frames written whole.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames dropped because `write(2)` returned `EAGAIN`.
    pub tx_eagain: u64,
    /// Frames dropped because `write(2)` returned `ENOBUFS`.
    pub tx_nobufs: u64,
    /// Frames dropped on any other `write(2)` error (e.g. `EIO` while the link is down).
    pub tx_errors: u64,
    /// Frames the kernel accepted only in part.
    pub tx_short: u64,
    /// Frames smoltcp asked for that exceed the transmit frame; dropped, never written.
    pub tx_oversize: u64,
    /// `errno` of the most recent read or write failure, 0 if none.
    pub last_errno: i32,
}

/// What a [`TapDevice`] operation was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapOp {
    /// `open("/dev/net/tun")`.
    OpenTun,
    /// `ioctl(TUNSETIFF)`: create or attach to the device.
    SetIff,
    /// `ioctl(SIOCGIFMTU)`.
    GetMtu,
    /// `poll(2)` in [`TapDevice::wait`].
    Poll,
}

/// A TAP device error; carries the device name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapError {
    /// The name is not a valid interface name.
    InvalidName(InvalidIfName),
    /// A system call failed.
    Sys {
        /// Device name.
        name: IfName,
        /// Operation that failed.
        op: TapOp,
        /// `errno` it returned.
        errno: i32,
    },
    /// The MTU is above [`MAX_MTU`], or below 576 (the IPv4 minimum).
    UnsupportedMtu {
        /// Device name.
        name: IfName,
        /// The MTU asked for or found on the device.
        mtu: u32,
    },
}

impl fmt::Display for TapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TapError::InvalidName(e) => e.fmt(f),
            TapError::Sys { name, op, errno } => {
                let what = match op {
                    TapOp::OpenTun => "open /dev/net/tun",
                    TapOp::SetIff => "TUNSETIFF (create or attach)",
                    TapOp::GetMtu => "SIOCGIFMTU",
                    TapOp::Poll => "poll",
                };
                write!(
                    f,
                    "tap {name}: {what}: {}",
                    std::io::Error::from_raw_os_error(errno)
                )
            }
            TapError::UnsupportedMtu { name, mtu } => {
                write!(f, "tap {name}: MTU {mtu} outside 576..={MAX_MTU}")
            }
        }
    }
}

impl std::error::Error for TapError {}

impl From<InvalidIfName> for TapError {
    fn from(e: InvalidIfName) -> Self {
        TapError::InvalidName(e)
    }
}

/// Result of [`TapDevice::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Frames are waiting (in the ring or in the kernel queue).
    Readable,
    /// The timeout passed with nothing to read.
    TimedOut,
}

/// Fixed ring of receive slots, filled by one refill and drained by `receive`.
struct RxRing {
    slots: Box<[u8]>,
    lens: [usize; RX_BATCH],
    /// Next slot to hand out.
    head: usize,
    /// Slots filled by the last refill.
    filled: usize,
    /// True if the last refill ended because the kernel queue was empty (`EAGAIN`).
    found_empty: bool,
    /// The timestamp `receive` was called with when the last refill ran.
    refilled_at: Option<Instant>,
    /// True from a wait that found the queue readable until the next refill, which then
    /// reads one frame only (see the module docs).
    woken: bool,
    /// True if the last refill was such a one-frame refill after a wake-up.
    stopped_after_wake: bool,
}

/// One queue (one fd) of a TAP device, usable as a smoltcp [`Device`].
pub struct TapDevice {
    fd: OwnedFd,
    name: IfName,
    created: bool,
    multi_queue: bool,
    mtu: usize,
    rx: RxRing,
    tx_frame: Box<[u8]>,
    stats: TapStats,
}

impl fmt::Debug for TapDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TapDevice")
            .field("name", &self.name)
            .field("fd", &self.fd.as_raw_fd())
            .field("created", &self.created)
            .field("multi_queue", &self.multi_queue)
            .field("mtu", &self.mtu)
            .finish_non_exhaustive()
    }
}

impl TapDevice {
    /// Opens one queue of TAP device `name`, creating the device if it does not exist.
    ///
    /// With `multi_queue`, the device is a multi-queue TAP and every call with the same
    /// name attaches one more queue (one fd each, up to the kernel's 256/1024 limit);
    /// all queues of a device must agree on `multi_queue`. A device this call creates is
    /// not persistent: it disappears when its last queue fd is closed.
    ///
    /// The stack's MTU is read from the device; call [`TapDevice::set_mtu`] if you change
    /// it afterwards.
    ///
    /// # Errors
    /// [`TapError`] with the failing step and `errno` (`EPERM` without `CAP_NET_ADMIN`,
    /// `EINVAL` when `multi_queue` disagrees with an existing device, `EBUSY` when a
    /// single-queue device is already attached).
    pub fn open(name: &str, multi_queue: bool) -> Result<TapDevice, TapError> {
        let name = IfName::new(name)?;
        let sys_err = |op, errno| TapError::Sys { name, op, errno };
        let existed = sys::if_index(&name).is_some();

        // SAFETY: the path is a NUL-terminated literal; flags are constants; the result is checked.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(sys_err(TapOp::OpenTun, sys::errno()));
        }
        // SAFETY: `raw` was just returned by open(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let mut req = sys::ifreq(&name);
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI;
        if multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        // The flag constants all fit in the 16-bit `ifru_flags`.
        req.ifr_ifru.ifru_flags = flags as libc::c_short;
        sys::ioctl_ifreq(&fd, libc::TUNSETIFF, &mut req).map_err(|e| sys_err(TapOp::SetIff, e))?;

        let mtu = sys::get_mtu(&name).map_err(|e| sys_err(TapOp::GetMtu, e))?;
        let mut device = TapDevice {
            fd,
            name,
            created: !existed,
            multi_queue,
            mtu: 1500,
            rx: RxRing {
                slots: vec![0u8; RX_BATCH * SLOT_BYTES].into_boxed_slice(),
                lens: [0; RX_BATCH],
                head: 0,
                filled: 0,
                found_empty: false,
                refilled_at: None,
                woken: false,
                stopped_after_wake: false,
            },
            tx_frame: vec![0u8; SLOT_BYTES].into_boxed_slice(),
            stats: TapStats::default(),
        };
        device.set_mtu(mtu)?;
        Ok(device)
    }

    /// The device name.
    pub fn name(&self) -> IfName {
        self.name
    }

    /// True if this `open` created the device (it did not exist before). Such a device is
    /// not persistent and the kernel deletes it when its last queue fd closes.
    pub fn created(&self) -> bool {
        self.created
    }

    /// True if the queue was opened with `IFF_MULTI_QUEUE`.
    pub fn multi_queue(&self) -> bool {
        self.multi_queue
    }

    /// The IP MTU the stack is told about.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Sets the IP MTU reported to smoltcp (call after changing the link's MTU, before
    /// building the interface: smoltcp reads capabilities once).
    ///
    /// # Errors
    /// [`TapError::UnsupportedMtu`] outside 576..=[`MAX_MTU`].
    pub fn set_mtu(&mut self, mtu: u32) -> Result<(), TapError> {
        let Ok(mtu_usize) = usize::try_from(mtu) else {
            return Err(TapError::UnsupportedMtu {
                name: self.name,
                mtu,
            });
        };
        if !(576..=MAX_MTU).contains(&mtu_usize) {
            return Err(TapError::UnsupportedMtu {
                name: self.name,
                mtu,
            });
        }
        self.mtu = mtu_usize;
        Ok(())
    }

    /// The queue's fd, for callers that multiplex it with other fds (epoll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Counters of this queue.
    pub fn stats(&self) -> &TapStats {
        &self.stats
    }

    /// Frames already read into the ring and not yet handed to the stack.
    pub fn buffered(&self) -> usize {
        self.rx.filled - self.rx.head
    }

    /// True if every frame read has been handed to the stack and the last refill found the
    /// kernel queue empty, or was the one-frame refill after a wake-up: no frame is known to
    /// be waiting, so a caller with nothing else to do may [`wait`](TapDevice::wait) at once
    /// (the wait returns at once if a frame is queued).
    pub fn drained(&self) -> bool {
        self.buffered() == 0 && (self.rx.found_empty || self.rx.stopped_after_wake)
    }

    /// Waits until a frame can be read, one of `also` (wake-up descriptors: an eventfd other
    /// cores write to, a sleep timer; at most [`MAX_ALSO`](crate::MAX_ALSO)) is readable, or
    /// `timeout` passes (`None`: no limit), with `poll(2)`; returns at once if the ring still
    /// holds frames. For the park idle policy. A wake-up
    /// through `also` is reported as [`Wait::TimedOut`]. After [`Wait::Readable`], the next
    /// refill reads one frame (see the module docs).
    ///
    /// # Errors
    /// [`TapError::Sys`] with [`TapOp::Poll`] if poll(2) fails (not on `EINTR`, which is
    /// reported as [`Wait::TimedOut`] so the caller re-checks its own state).
    pub fn wait(
        &mut self,
        timeout: Option<Duration>,
        also: &[BorrowedFd<'_>],
    ) -> Result<Wait, TapError> {
        if self.buffered() > 0 {
            return Ok(Wait::Readable);
        }
        match sys::poll_readable(self.fd.as_fd(), also, timeout) {
            Ok(true) => {
                self.rx.woken = true;
                Ok(Wait::Readable)
            }
            Ok(false) => Ok(Wait::TimedOut),
            Err(errno) => Err(TapError::Sys {
                name: self.name,
                op: TapOp::Poll,
                errno,
            }),
        }
    }

    /// Reads up to [`RX_BATCH`] frames into the ring (one, right after a wake-up); called when
    /// the ring is empty.
    fn refill(&mut self) {
        self.rx.head = 0;
        self.rx.filled = 0;
        self.rx.found_empty = false;
        self.rx.stopped_after_wake = false;
        let limit = if core::mem::take(&mut self.rx.woken) {
            1
        } else {
            RX_BATCH
        };
        let fd = self.fd.as_raw_fd();
        while self.rx.filled < limit {
            let index = self.rx.filled;
            let slot = &mut self.rx.slots[index * SLOT_BYTES..(index + 1) * SLOT_BYTES];
            // SAFETY: `slot` is a valid, exclusively borrowed buffer of SLOT_BYTES bytes and
            // read(2) writes at most that many bytes into it.
            let n = unsafe { libc::read(fd, slot.as_mut_ptr().cast(), slot.len()) };
            if n < 0 {
                match sys::errno() {
                    libc::EAGAIN => {
                        self.stats.rx_empty_reads += 1;
                        self.rx.found_empty = true;
                    }
                    libc::EINTR => continue,
                    errno => {
                        self.stats.rx_errors += 1;
                        self.stats.last_errno = errno;
                    }
                }
                return;
            }
            // n >= 0 here, so the cast is lossless.
            let len = n as usize;
            if len == 0 {
                return;
            }
            if len > MAX_FRAME_BYTES {
                self.stats.rx_truncated += 1;
                continue;
            }
            self.rx.lens[index] = len;
            self.rx.filled += 1;
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += len as u64;
        }
        if limit == 1 && self.rx.filled == 1 {
            self.rx.stopped_after_wake = true;
            self.stats.rx_wake_reads += 1;
        }
    }
}

/// A received frame: a borrowed slot of the receive ring.
pub struct TapRxToken<'a> {
    frame: &'a [u8],
}

impl phy::RxToken for TapRxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.frame)
    }
}

/// Permission to write one frame: the fixed transmit frame plus the fd and counters.
pub struct TapTxToken<'a> {
    fd: RawFd,
    frame: &'a mut [u8],
    stats: &'a mut TapStats,
}

impl phy::TxToken for TapTxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if len > MAX_FRAME_BYTES {
            // smoltcp sizes frames from our capabilities, so this is a bug elsewhere; the
            // closure must still run, on a scratch buffer (cold path, allocates).
            self.stats.tx_oversize += 1;
            let mut scratch = vec![0u8; len];
            return f(&mut scratch);
        }
        let frame = &mut self.frame[..len];
        let result = f(frame);
        // SAFETY: `frame` is a valid initialised buffer of `len` bytes that outlives the
        // call; write(2) only reads it. `fd` is the open TAP queue owned by the device that
        // this token borrows.
        let n = unsafe { libc::write(self.fd, frame.as_ptr().cast(), len) };
        if n < 0 {
            let errno = sys::errno();
            self.stats.last_errno = errno;
            match errno {
                libc::EAGAIN => self.stats.tx_eagain += 1,
                libc::ENOBUFS => self.stats.tx_nobufs += 1,
                _ => self.stats.tx_errors += 1,
            }
        } else if n as usize != len {
            self.stats.tx_short += 1;
        } else {
            self.stats.tx_frames += 1;
            self.stats.tx_bytes += len as u64;
        }
        result
    }
}

impl crate::RxPeek for TapDevice {
    /// The frames of the ring not yet handed out (a peek never reads the kernel queue).
    fn peek_rx<R>(&self, ahead: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if ahead >= self.buffered() {
            return None;
        }
        let index = self.rx.head + ahead;
        let start = index * SLOT_BYTES;
        Some(f(&self.rx.slots[start..start + self.rx.lens[index]]))
    }
}

impl Device for TapDevice {
    type RxToken<'a> = TapRxToken<'a>;
    type TxToken<'a> = TapTxToken<'a>;

    fn receive(&mut self, timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if self.rx.head == self.rx.filled {
            if (self.rx.found_empty || self.rx.stopped_after_wake)
                && self.rx.refilled_at == Some(timestamp)
            {
                // This poll's read found the queue empty already, or this poll's refill was
                // the one frame after a wake-up (see the module docs).
                return None;
            }
            self.rx.refilled_at = Some(timestamp);
            self.refill();
            if self.rx.filled == 0 {
                return None;
            }
        }
        let index = self.rx.head;
        self.rx.head += 1;
        let start = index * SLOT_BYTES;
        let frame = &self.rx.slots[start..start + self.rx.lens[index]];
        let tx = TapTxToken {
            fd: self.fd.as_raw_fd(),
            frame: &mut self.tx_frame,
            stats: &mut self.stats,
        };
        Some((TapRxToken { frame }, tx))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        Some(TapTxToken {
            fd: self.fd.as_raw_fd(),
            frame: &mut self.tx_frame,
            stats: &mut self.stats,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu + ETHERNET_HEADER_LEN;
        // checksum: default (Checksum::Both everywhere); see the module docs.
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_name_is_typed() {
        assert!(matches!(
            TapDevice::open("bad/name", false),
            Err(TapError::InvalidName(_))
        ));
        assert!(matches!(
            TapDevice::open("", false),
            Err(TapError::InvalidName(_))
        ));
    }

    #[test]
    fn errors_name_the_device() {
        let name = IfName::new("ms-test0").unwrap();
        let e = TapError::Sys {
            name,
            op: TapOp::SetIff,
            errno: libc::EPERM,
        };
        let text = e.to_string();
        assert!(
            text.contains("ms-test0") && text.contains("TUNSETIFF"),
            "{text}"
        );
        let e = TapError::UnsupportedMtu { name, mtu: 65000 };
        assert!(e.to_string().contains("65000"));
    }
}
