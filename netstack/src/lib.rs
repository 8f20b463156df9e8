//! Packet I/O and TCP for memspin: a TAP `smoltcp::phy::Device`, host-side link setup,
//! and a TCP connection table whose per-packet cost does not grow with connections.
//!
//! This crate imports no workspace crate; `server` joins it with `protocol` and `store`.
//!
//! ```text
//!            ┌──────────────── one worker core ────────────────────────────────────┐
//! TAP queue ─┤ tap::TapDevice ─ read(2) × batch ─▶ rx ring                          │
//!  (fd)      │   conn::ConnTable::poll_ingress                                       │
//!            │     ARP, NDP ─▶ neighbor (answer, learn, confirm the gateway)         │
//!            │     demux::TcpFrame (4-tuple) ─▶ bucket = hash(src ip, src port)      │
//!            │                               └▶ control set (ICMP, other ports)      │
//!            │     smoltcp Interface::poll_ingress_single(IP packet, that bucket)    │
//!            │   conn::ConnTable::serve ─▶ server: Conn { state: &mut S, io }        │
//!            │       parse from io.recv, reply with io.send                          │
//!            │   conn::ConnTable::poll_egress (dirty buckets + due timers)           │
//! TAP queue ◀┤     smoltcp Interface::poll_egress ─▶ + Ethernet header ─ write(2)    │
//!            └────────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! - [`tap`]: [`tap::TapDevice`], one queue fd of a (multi-queue) TAP device.
//! - [`xdp`]: [`xdp::XdpProgram`], the steering program on an interface, and
//!   [`xdp::XdpDevice`], one AF_XDP socket per (interface, queue).
//! - [`link`]: [`link::configure`] the kernel side (addresses, MTU, IPv6 off unless it has
//!   an IPv6 address, up).
//! - [`conn`]: [`conn::ConnTable`], buckets of smoltcp sockets behind one interface, with
//!   a SYN backlog, per-connection clocks (give-up, idle, close) and loss recovery at
//!   round-trip scale (probes and SACK re-sends of kept copies; smoltcp alone waits 1 s);
//!   in client mode it opens connections itself ([`conn::ConnTable::connect`]), for a load
//!   generator running over this stack.
//! - [`admission`]: [`Admission`], the connection limit every worker's table shares.
//! - [`neighbor`]: ARP, IPv6 neighbour discovery, the neighbour cache and the gateways
//!   (shared by the workers); the table frames smoltcp's IP packets.
//! - [`demux`]: the Ethernet/IP/TCP header view (IPv4 and IPv6) used to pick a bucket.
//! - [`memlink`]: an in-memory Ethernet link, a bucketed smoltcp client and the echo
//!   application every netstack test serves, for tests and benchmarks without a kernel
//!   device.
//! - [`kernel`]: the same server loop shape over ordinary kernel sockets (`--net kernel`),
//!   with the same shared admission, give-up time (`TCP_USER_TIMEOUT`) and idle timeout.
//!
//! Time is never read here: callers pass `smoltcp::time::Instant`.

pub mod admission;
pub mod conn;
pub mod demux;
pub mod kernel;
pub mod link;
pub mod memlink;
pub mod neighbor;
mod netlink;
mod sys;
pub mod tap;
mod timer;
mod view;
pub mod xdp;

pub use admission::Admission;
pub use conn::{
    Conn, ConnEvent, ConnId, ConnTable, ConnectError, Io, Stamps, TableConfig, TableError,
    TableStats,
};
pub use link::{LinkConfig, LinkError};
pub use sys::{IfName, InvalidIfName, MAX_ALSO, SleepTimer};
pub use tap::{TapDevice, TapError, TapStats, Wait};

/// What one bounded poll step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// Nothing happened.
    Idle,
    /// Something was received, sent or changed state.
    Progress,
}

/// A receiving device that can show the frames it already holds before it hands them out,
/// so that [`ConnTable::poll_ingress`] can look ahead while it processes the current one
/// (see "Look-ahead" in the `conn` module docs).
///
/// A peek does no I/O and consumes nothing: `peek_rx(k, f)` calls `f` with the frame the
/// `k + 1`-th next [`receive`](smoltcp::phy::Device::receive) will hand out (0: the next
/// one), if the device holds it in memory already, and returns what `f` returned; `None`
/// if it does not. The default holds none, so a device that cannot peek implements this
/// trait with an empty body and works as before.
pub trait RxPeek {
    /// The frame the next `receive` hands out (`ahead` 0), or the one `ahead` frames after
    /// it, if the device holds it already.
    fn peek_rx<R>(&self, ahead: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let _ = (ahead, f);
        None
    }
}

/// The smoltcp version this crate is built against, re-exported so users name the same
/// `Instant`, `Ipv4Cidr` and socket types.
pub use smoltcp;
