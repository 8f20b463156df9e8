//! The AF_XDP packet path: an XDP program that steers memspin's frames (TCP to its address
//! and port, echo requests to it, ARP and neighbour discovery for it) from an interface
//! queue to an AF_XDP socket and leaves the rest to the kernel, and a smoltcp [`Device`](smoltcp::phy::Device) per (interface, queue)
//! over that socket's rings.
//!
//! ```text
//! NIC / veth queue i ─▶ XDP program: ours? ── no ──▶ XDP_PASS (the kernel's stack)
//!                          └─ yes ─▶ bpf_redirect_map(xskmap, rx_queue_index, XDP_PASS)
//!     xskmap[i] = socket of XdpDevice(queue i) ─▶ rx ring ─▶ RxToken (&[u8] in the UMEM,
//!                                                 or a multi-buffer chain, assembled)
//!     fill ring ◀─ frames returned after every rx batch
//! TxToken::consume ─▶ free UMEM slot ─▶ tx ring (one descriptor per frame it spans)
//!     ─▶ sendto() kick ─▶ queue i
//!     completion ring ─▶ slot free again (only once everything it sent came back)
//! ```
//!
//! - [`XdpProgram::attach`] loads the steering program ([`bpf`], hand-assembled with the
//!   small assembler in `asm`) for a [`Steer`] (addresses and ports) with an XSKMAP of one
//!   slot per receive queue, and attaches it over rtnetlink, natively
//!   (driver mode) where the driver supports it, else in generic (skb) mode. A program of
//!   our name left behind by a killed run is replaced; anyone else's is refused. Dropping
//!   the value detaches it, and only if it is still ours (`XDP_FLAGS_REPLACE`). On a link
//!   whose MTU does not fit a 2048-byte frame the program is loaded for multi-buffer frames
//!   ([`frags_for`]).
//! - [`XdpDevice::bind`] creates one AF_XDP socket on (interface, queue) with its own UMEM
//!   and four rings (the `ring` module; the `rx` and `tx` modules are its two halves),
//!   zero-copy if the driver allows it, else copy mode (veth has no zero-copy), always with
//!   `XDP_USE_NEED_WAKEUP`, and with `XDP_USE_SG` when the MTU does not fit one UMEM frame,
//!   and puts the socket in the map. One device per queue, so one worker per queue can own
//!   one each. [`XdpDevice::set_busy_poll`] turns on preferred busy polling for it.
//! - [`detach_all`] detaches every program this process attached and still holds, for an
//!   exit that cannot wait for the values to drop (a worker that does not stop): an
//!   attached program outlives the process, unlike its sockets and a TAP device.
//!
//! Checksums: nothing in AF_XDP says whether a frame's checksum was checked or left for
//! offload, so the device reports smoltcp's default capabilities (`Checksum::Both`):
//! smoltcp computes every checksum it sends and verifies every one it receives. A veth peer
//! whose kernel leaves TCP checksums to "hardware" (`CHECKSUM_PARTIAL`, on by default)
//! sends frames that fail that check: turn transmit checksum offload off on the peer
//! (`ethtool -K PEER tx off`), as the tests and `veth_pair_create` in `scripts/lib.sh` do.

mod asm;
pub mod bpf;
mod device;
use crate::netlink;
pub(crate) mod ring;
mod rx;
mod tx;

use core::fmt;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Mutex;

use crate::sys::{self, IfName, InvalidIfName};

pub use bpf::{ClientSteer, Frags, Steer, Steering};
pub use device::{
    BusyPoll, BusyPollOptions, KernelStats, MAX_TX_SPAN, RX_BATCH, TX_KICK_BATCH, XdpConfig,
    XdpDevice, XdpRxToken, XdpStats, XdpTxToken, ZeroCopy,
};
pub use netlink::{AttachMode, Attached};
pub use rx::MAX_CHAIN;

/// Which attach modes [`XdpProgram::attach`] may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModeChoice {
    /// Native if the driver takes it, else generic.
    #[default]
    Auto,
    /// Native only.
    Native,
    /// Generic only.
    Generic,
}

/// What an AF_XDP operation was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpOp {
    /// `RTM_GETLINK`.
    GetLink,
    /// `BPF_MAP_CREATE` of the XSKMAP.
    MapCreate,
    /// `BPF_PROG_LOAD`.
    ProgLoad,
    /// Inspecting an attached program (`BPF_PROG_GET_FD_BY_ID`, `BPF_OBJ_GET_INFO_BY_FD`).
    ProgInfo,
    /// Attaching the program (`RTM_SETLINK` with `IFLA_XDP`).
    Attach,
    /// Detaching a program.
    Detach,
    /// `socket(AF_XDP)`.
    Socket,
    /// Mapping the UMEM.
    UmemMap,
    /// `XDP_UMEM_REG`.
    UmemReg,
    /// Setting a ring size.
    RingSize,
    /// `XDP_MMAP_OFFSETS`.
    MmapOffsets,
    /// Mapping a ring.
    RingMap,
    /// `bind(2)` to (interface, queue).
    Bind,
    /// `BPF_MAP_UPDATE_ELEM` of the socket into the XSKMAP.
    MapUpdate,
    /// `XDP_STATISTICS`.
    Statistics,
    /// `XDP_OPTIONS`.
    Options,
    /// `poll(2)` in [`XdpDevice::wait`].
    Poll,
    /// `SO_BUSY_POLL`.
    BusyPoll,
    /// `SO_PREFER_BUSY_POLL`.
    PreferBusyPoll,
    /// `SO_BUSY_POLL_BUDGET`.
    BusyPollBudget,
}

impl XdpOp {
    fn as_str(self) -> &'static str {
        match self {
            XdpOp::GetLink => "RTM_GETLINK",
            XdpOp::MapCreate => "create XSKMAP",
            XdpOp::ProgLoad => "load XDP program",
            XdpOp::ProgInfo => "inspect the attached XDP program",
            XdpOp::Attach => "attach XDP program",
            XdpOp::Detach => "detach XDP program",
            XdpOp::Socket => "socket(AF_XDP)",
            XdpOp::UmemMap => "mmap UMEM",
            XdpOp::UmemReg => "XDP_UMEM_REG",
            XdpOp::RingSize => "set ring size",
            XdpOp::MmapOffsets => "XDP_MMAP_OFFSETS",
            XdpOp::RingMap => "mmap ring",
            XdpOp::Bind => "bind AF_XDP socket",
            XdpOp::MapUpdate => "put socket in XSKMAP",
            XdpOp::Statistics => "XDP_STATISTICS",
            XdpOp::Options => "XDP_OPTIONS",
            XdpOp::Poll => "poll",
            XdpOp::BusyPoll => "SO_BUSY_POLL",
            XdpOp::PreferBusyPoll => "SO_PREFER_BUSY_POLL",
            XdpOp::BusyPollBudget => "SO_BUSY_POLL_BUDGET",
        }
    }
}

/// An AF_XDP error; carries the interface name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpError {
    /// The name is not a valid interface name.
    InvalidName(InvalidIfName),
    /// No interface of that name in this network namespace.
    NotFound {
        /// Interface name.
        name: IfName,
    },
    /// A system call failed.
    Sys {
        /// Interface name.
        name: IfName,
        /// Operation that failed.
        op: XdpOp,
        /// `errno` it returned.
        errno: i32,
    },
    /// Another tool's XDP program is attached; memspin does not remove it.
    ForeignProgram {
        /// Interface name.
        name: IfName,
        /// The program's id (`bpftool prog show id N`).
        prog_id: u32,
        /// Where it runs.
        mode: AttachMode,
    },
    /// The interface MTU is below 576 or larger than multi-buffer frames of this frame size
    /// hold.
    UnsupportedMtu {
        /// Interface name.
        name: IfName,
        /// The interface MTU.
        mtu: u32,
        /// The largest MTU the frame size allows.
        max: u32,
    },
    /// The MTU needs multi-buffer frames and binding with `XDP_USE_SG` failed (a kernel
    /// before 6.6, or a zero-copy driver without it).
    MultiBufferRefused {
        /// Interface name.
        name: IfName,
        /// The interface MTU.
        mtu: u32,
        /// `errno` of the bind.
        errno: i32,
    },
    /// The queue is not below the interface's receive queue count.
    NoSuchQueue {
        /// Interface name.
        name: IfName,
        /// The queue asked for.
        queue: u32,
        /// Receive queues the interface has.
        queues: u32,
    },
    /// An [`XdpConfig`] value the device cannot use.
    BadConfig {
        /// Which rule it breaks.
        what: &'static str,
    },
}

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            XdpError::InvalidName(e) => e.fmt(f),
            XdpError::NotFound { name } => write!(f, "xdp {name}: no such interface"),
            XdpError::Sys { name, op, errno } => write!(
                f,
                "xdp {name}: {}: {}",
                op.as_str(),
                std::io::Error::from_raw_os_error(errno)
            ),
            XdpError::ForeignProgram {
                name,
                prog_id,
                mode,
            } => write!(
                f,
                "xdp {name}: another XDP program (id {prog_id}, {} mode) is attached; \
                 remove it with `ip link set dev {name} xdp off` if it may go",
                mode.as_str()
            ),
            XdpError::UnsupportedMtu { name, mtu, max } => write!(
                f,
                "xdp {name}: MTU {mtu} is not supported (576 to {max} with this frame size)"
            ),
            XdpError::MultiBufferRefused { name, mtu, errno } => write!(
                f,
                "xdp {name}: MTU {mtu} needs frames larger than a UMEM frame, and the socket \
                 could not be bound for multi-buffer frames (XDP_USE_SG, Linux 6.6 or later): \
                 {}; lower the MTU or use a kernel and driver with AF_XDP multi-buffer support",
                std::io::Error::from_raw_os_error(errno)
            ),
            XdpError::NoSuchQueue {
                name,
                queue,
                queues,
            } => write!(
                f,
                "xdp {name}: queue {queue} does not exist ({queues} receive queues)"
            ),
            XdpError::BadConfig { what } => write!(f, "xdp: bad configuration: {what}"),
        }
    }
}

impl std::error::Error for XdpError {}

impl From<InvalidIfName> for XdpError {
    fn from(e: InvalidIfName) -> Self {
        XdpError::InvalidName(e)
    }
}

/// The steering program and its XSKMAP, attached to one interface; detached on drop.
pub struct XdpProgram {
    name: IfName,
    steering: Steering,
    ifindex: u32,
    mode: AttachMode,
    prog_id: u32,
    replaced: Option<Attached>,
    mtu: u32,
    frags: bpf::Frags,
    mac: [u8; 6],
    rx_queues: u32,
    attached: bool,
    /// Recorded for [`detach_all`] (a duplicate fd could be made).
    held: bool,
    map: OwnedFd,
    prog: OwnedFd,
}

impl fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpProgram")
            .field("name", &self.name)
            .field("ifindex", &self.ifindex)
            .field("steering", &self.steering)
            .field("mode", &self.mode)
            .field("prog_id", &self.prog_id)
            .field("replaced", &self.replaced)
            .field("rx_queues", &self.rx_queues)
            .finish_non_exhaustive()
    }
}

/// A program attached by this process and not detached yet: what [`detach_all`] needs.
#[derive(Debug)]
struct Held {
    /// The network namespace it was attached in ([`netns_id`]): an ifindex means nothing
    /// elsewhere.
    netns: Option<u64>,
    ifindex: u32,
    mode: AttachMode,
    prog_id: u32,
    /// A duplicate of the program's fd, the expected program of the detach.
    prog: OwnedFd,
}

/// Every program this process holds attached.
static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<Held>> {
    // A panic while the list was held leaves it consistent (push and retain).
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The calling thread's network namespace, as the inode of its `ns/net` file.
fn netns_id() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .ok()
        .map(|m| m.ino())
}

/// Detaches every program this process attached in the calling thread's network namespace
/// and has not detached, each only if it is still the one attached (`XDP_FLAGS_REPLACE`).
/// For an exit that skips destructors (a worker that would not stop): the [`XdpProgram`]
/// values are left to the exit, and their own detach then finds nothing to do. Returns how
/// many were detached.
pub fn detach_all() -> usize {
    let here = netns_id();
    let mut held = held();
    let mut detached = 0;
    held.retain(|program| {
        if program.netns != here {
            return true;
        }
        let result = netlink::set_xdp(
            program.ifindex,
            -1,
            program.mode.flag(),
            Some(program.prog.as_raw_fd()),
        );
        detached += usize::from(result.is_ok());
        false
    });
    detached
}

/// How the program is loaded for a link of `mtu`: for multi-buffer frames
/// (`BPF_F_XDP_HAS_FRAGS`) when a frame of that MTU does not fit the smallest UMEM frame
/// (2048 bytes, MTU 1774), so whatever frame size the sockets choose, a driver may hand the
/// program a frame in pieces (as it must, zero-copy, when the MTU is larger than a frame);
/// else as a single-buffer program, the form every XDP driver takes.
pub fn frags_for(mtu: u32) -> bpf::Frags {
    let smallest = XdpConfig {
        frame_size: 2048,
        ..XdpConfig::default()
    };
    if smallest.multi_buffer(mtu) {
        bpf::Frags::Yes
    } else {
        bpf::Frags::No
    }
}

/// Resolves `iface` in the calling thread's network namespace.
fn lookup(iface: &str) -> Result<(IfName, u32), XdpError> {
    let name = IfName::new(iface)?;
    let ifindex = sys::if_index(&name).ok_or(XdpError::NotFound { name })?;
    Ok((name, ifindex))
}

/// The XDP program attached to `iface` now, if any (what `ip link show` prints as
/// `xdp`/`xdpgeneric`).
///
/// # Errors
/// [`XdpError::NotFound`], or [`XdpError::Sys`] with [`XdpOp::GetLink`].
pub fn attached(iface: &str) -> Result<Option<Attached>, XdpError> {
    let (name, ifindex) = lookup(iface)?;
    netlink::get_link(ifindex)
        .map(|link| link.xdp)
        .map_err(|errno| XdpError::Sys {
            name,
            op: XdpOp::GetLink,
            errno,
        })
}

impl XdpProgram {
    /// Loads the steering program for `steer` with an XSKMAP of one slot per receive queue
    /// of `iface` and attaches it, trying the modes `choice` allows (native first).
    ///
    /// A program already on the interface is inspected: if it is memspin's (by its name,
    /// [`bpf::PROG_NAME`]), left by a run that was killed before it could detach, it is
    /// replaced — atomically with `XDP_FLAGS_REPLACE` when it sits in the mode being
    /// attached, else detached (also with `XDP_FLAGS_REPLACE`, so only that program goes)
    /// and then the new one attached. [`XdpProgram::replaced`] reports it.
    ///
    /// # Errors
    /// [`XdpError::ForeignProgram`] if someone else's program is attached;
    /// [`XdpError::Sys`] naming the failed step (`EPERM` without `CAP_NET_ADMIN` and
    /// `CAP_BPF`, the native mode's error when only native was allowed).
    pub fn attach(iface: &str, choice: ModeChoice, steer: Steer) -> Result<XdpProgram, XdpError> {
        Self::attach_steering(iface, choice, Steering::Server(steer))
    }

    /// Like [`attach`](Self::attach), with a client's program ([`bpf::client_program`]):
    /// for a client that opens connections from its own address (`memspin-loadgen --net
    /// xdp`). It carries a name of its own ([`bpf::CLIENT_PROG_NAME`]): a client's program
    /// left by a killed run is replaced the same way, and a server's program is refused
    /// as another tool's would be (and the server refuses a client's).
    ///
    /// # Errors
    /// As [`attach`](Self::attach).
    pub fn attach_client(
        iface: &str,
        choice: ModeChoice,
        steer: ClientSteer,
    ) -> Result<XdpProgram, XdpError> {
        Self::attach_steering(iface, choice, Steering::Client(steer))
    }

    fn attach_steering(
        iface: &str,
        choice: ModeChoice,
        steering: Steering,
    ) -> Result<XdpProgram, XdpError> {
        let (name, ifindex) = lookup(iface)?;
        let fail = |op, errno| XdpError::Sys { name, op, errno };
        let link = netlink::get_link(ifindex).map_err(|e| fail(XdpOp::GetLink, e))?;
        let rx_queues = link.rx_queues.max(1);
        let map = bpf::create_xskmap(rx_queues).map_err(|e| fail(XdpOp::MapCreate, e))?;
        let frags = frags_for(link.mtu);
        let prog = bpf::load_named(
            &steering.program(map.as_raw_fd()),
            steering.prog_name(),
            frags,
        )
        .map_err(|e| fail(XdpOp::ProgLoad, e))?;
        let prog_id = bpf::prog_info(prog.as_fd())
            .map_err(|e| fail(XdpOp::ProgInfo, e))?
            .id;

        let mut stale = match link.xdp {
            None => None,
            Some(found) => match bpf::prog_fd_by_id(found.prog_id) {
                // Detached since we looked: nothing to replace.
                Err(libc::ENOENT) => None,
                Err(e) => return Err(fail(XdpOp::ProgInfo, e)),
                Ok(fd) => {
                    let info = bpf::prog_info(fd.as_fd()).map_err(|e| fail(XdpOp::ProgInfo, e))?;
                    if !info.is_xdp_named(steering.prog_name()) {
                        return Err(XdpError::ForeignProgram {
                            name,
                            prog_id: found.prog_id,
                            mode: found.mode,
                        });
                    }
                    Some((found, fd))
                }
            },
        };

        let modes: &[AttachMode] = match choice {
            ModeChoice::Auto => &[AttachMode::Native, AttachMode::Generic],
            ModeChoice::Native => &[AttachMode::Native],
            ModeChoice::Generic => &[AttachMode::Generic],
        };
        let mut replaced = None;
        let mut last_errno = libc::EOPNOTSUPP;
        for (i, &mode) in modes.iter().enumerate() {
            let result = match &stale {
                Some((found, old)) if found.mode == mode => netlink::set_xdp(
                    ifindex,
                    prog.as_raw_fd(),
                    mode.flag(),
                    Some(old.as_raw_fd()),
                )
                .map(|()| replaced = Some(*found)),
                Some((found, old)) => {
                    netlink::set_xdp(ifindex, -1, found.mode.flag(), Some(old.as_raw_fd()))
                        .map_err(|e| fail(XdpOp::Detach, e))?;
                    replaced = Some(*found);
                    stale = None;
                    netlink::set_xdp(
                        ifindex,
                        prog.as_raw_fd(),
                        mode.flag() | netlink::FLAGS_UPDATE_IF_NOEXIST,
                        None,
                    )
                }
                None => netlink::set_xdp(
                    ifindex,
                    prog.as_raw_fd(),
                    mode.flag() | netlink::FLAGS_UPDATE_IF_NOEXIST,
                    None,
                ),
            };
            match result {
                Ok(()) => {
                    let held_dup = prog.try_clone().ok();
                    let is_held = held_dup.is_some();
                    if let Some(dup) = held_dup {
                        held().push(Held {
                            netns: netns_id(),
                            ifindex,
                            mode,
                            prog_id,
                            prog: dup,
                        });
                    }
                    return Ok(XdpProgram {
                        name,
                        steering,
                        ifindex,
                        mode,
                        prog_id,
                        replaced,
                        mtu: link.mtu,
                        frags,
                        mac: link.mac.unwrap_or([0; 6]),
                        rx_queues,
                        attached: true,
                        held: is_held,
                        map,
                        prog,
                    });
                }
                // Someone attached a program meanwhile, or we may not: no point in
                // trying another mode.
                Err(e @ (libc::EBUSY | libc::EEXIST | libc::EPERM)) => {
                    return Err(fail(XdpOp::Attach, e));
                }
                Err(e) if i + 1 < modes.len() => last_errno = e,
                Err(e) => return Err(fail(XdpOp::Attach, e)),
            }
        }
        Err(fail(XdpOp::Attach, last_errno))
    }

    /// The interface name.
    pub fn name(&self) -> IfName {
        self.name
    }

    /// What the program steers to the sockets.
    pub fn steering(&self) -> Steering {
        self.steering
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Where the program runs.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The kernel's id of the program.
    pub fn prog_id(&self) -> u32 {
        self.prog_id
    }

    /// The stale memspin program this attach replaced, if there was one.
    pub fn replaced(&self) -> Option<Attached> {
        self.replaced
    }

    /// The interface MTU when the program was attached.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Whether the program was loaded for multi-buffer frames (see [`frags_for`]).
    pub fn frags(&self) -> bpf::Frags {
        self.frags
    }

    /// The interface's MAC address (the server must answer with it: a NIC drops unicast
    /// frames for other addresses).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Receive queues of the interface, the XSKMAP's slot count.
    pub fn rx_queues(&self) -> u32 {
        self.rx_queues
    }

    /// The XSKMAP.
    pub(crate) fn map(&self) -> std::os::fd::BorrowedFd<'_> {
        self.map.as_fd()
    }

    /// The loaded program.
    #[cfg(test)]
    pub(crate) fn prog(&self) -> std::os::fd::BorrowedFd<'_> {
        self.prog.as_fd()
    }

    /// Detaches the program now (also done on drop, where errors are ignored).
    ///
    /// Only this program is removed (`XDP_FLAGS_REPLACE` with it as the expected one);
    /// if the interface is gone, there is nothing to detach.
    ///
    /// # Errors
    /// [`XdpError::Sys`] with [`XdpOp::Detach`].
    pub fn detach(mut self) -> Result<(), XdpError> {
        self.detach_inner()
    }

    fn detach_inner(&mut self) -> Result<(), XdpError> {
        if !self.attached {
            return Ok(());
        }
        self.attached = false;
        if self.held {
            let mut held = held();
            let len = held.len();
            held.retain(|p| p.prog_id != self.prog_id);
            if held.len() == len {
                // detach_all() took it already.
                return Ok(());
            }
        }
        match netlink::set_xdp(
            self.ifindex,
            -1,
            self.mode.flag(),
            Some(self.prog.as_raw_fd()),
        ) {
            Ok(()) | Err(libc::ENODEV) => Ok(()),
            Err(errno) => Err(XdpError::Sys {
                name: self.name,
                op: XdpOp::Detach,
                errno,
            }),
        }
    }
}

impl Drop for XdpProgram {
    fn drop(&mut self) {
        let _ = self.detach_inner();
    }
}

#[cfg(test)]
mod tests;
