//! The AF_XDP half of the bypass client (`--net xdp`): one client steering program on the
//! interface and one AF_XDP socket per generator thread, set up once for all the threads of
//! a run and taken down when the last of them lets go.
//!
//! ```text
//! first Bypass::open of a run ─▶ attach the client's program (netstack's attach_client)
//!   ─▶ bind queues 0..threads (copy mode on veth) ─▶ resolve the next hops (ARP / NDP)
//!   ─▶ Attachment { program, sockets[i] for thread i, next hops, shared gateways }
//! every thread ─▶ takes its socket ─▶ its table learns the next hops before its first SYN
//! last Bypass dropped ─▶ sockets closed (with their threads), then the program detached
//! ```
//!
//! **Why resolve first.** An ARP reply or neighbour advertisement is not a flow: a NIC's RSS
//! cannot hash it, a router's kernel picks a transmit queue for it, so it reaches one queue,
//! maybe not the asking thread's. A table that never sees the answer turns every SYN into a
//! new request and waits a second each time. So the answers are taken from every queue
//! before the threads start, and every table is taught them
//! ([`netstack::ConnTable::learn_neighbor`]); a gateway's MAC goes into one
//! [`Gateways`] value the tables share, which keeps it fresh whichever queue its later
//! answers reach.
//!
//! **Cleanup.** The sockets close with the threads' [`super::Bypass`] values; the program is
//! detached when the [`Attachment`] drops, after them (each holds an `Arc`), on every way
//! out of a run: its end, SIGINT/SIGTERM (the run ends early and returns), an error at
//! start-up, a panicking thread (unwinding drops its share). A run killed with SIGKILL leaves
//! the program; the next run replaces it (it carries memspin's program name).

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant as WallInstant};

use netstack::neighbor::arp::{ARP_FRAME_LEN, ArpOut, arp_input, emit_arp};
use netstack::neighbor::gateway::Gateways;
use netstack::neighbor::{NDP_FRAME_LEN, NdpOut, emit_ndp, ndp_input};
use netstack::smoltcp::phy::{Device, RxToken, TxToken};
use netstack::smoltcp::time::Instant;
use netstack::smoltcp::wire::{IpAddress, IpCidr};
use netstack::xdp::{ClientSteer, ModeChoice, XdpConfig, XdpDevice, XdpError, XdpOp, XdpProgram};

use super::BypassLink;

/// How long the set-up waits for the next hops' answers before it gives up.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// How often a request for an unanswered next hop is sent again meanwhile.
const RESOLVE_RETRY: Duration = Duration::from_millis(200);

/// How long a bind that finds its queue busy is tried again: the kernel frees a closed
/// socket's queue from a work queue, so a run that follows another at once (a sweep's next
/// step, `--search`) may find it taken for a few milliseconds.
const BIND_BUSY_RETRY: Duration = Duration::from_secs(1);

/// The run's attachment: the program, the sockets not yet taken, what the set-up resolved.
pub(super) struct Attachment {
    /// Which link it was made for (a run with another link makes its own).
    link: BypassLink,
    /// The socket of queue i, until thread i takes it.
    devices: Mutex<Vec<Option<XdpDevice>>>,
    /// The MAC the tables use: the interface's (a NIC drops unicast frames to another).
    pub(super) mac: [u8; 6],
    /// On-link servers and their MACs, for every table's neighbour cache.
    pub(super) neighbors: Vec<(IpAddress, [u8; 6])>,
    /// The gateway (`--gateway`), resolved, shared by the tables.
    pub(super) gateways: Arc<Gateways>,
    /// Attach mode and copy/zero-copy, for the error and progress messages.
    pub(super) modes: String,
    /// Detached when the last share drops (declared last: dropped after the sockets left).
    program: XdpProgram,
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("link", &self.link)
            .field("program", &self.program)
            .field("neighbors", &self.neighbors)
            .finish_non_exhaustive()
    }
}

/// The attachment of the run in progress, if any.
static CURRENT: Mutex<Weak<Attachment>> = Mutex::new(Weak::new());

impl Attachment {
    /// Takes queue `thread`'s socket (each once).
    pub(super) fn take_device(&self, thread: usize) -> Option<XdpDevice> {
        self.devices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(thread)
            .and_then(Option::take)
    }
}

/// The run's attachment for `link`: made by the first thread that asks (attach, bind one
/// socket per thread, resolve the next hops of `servers`), shared by the others.
///
/// # Errors
/// A message saying what failed: no such interface, not root, another tool's program,
/// fewer queues than threads, a server off the link without `--gateway`, no answer from a
/// next hop.
pub(super) fn join(
    link: &BypassLink,
    servers: &[std::net::SocketAddr],
    threads: usize,
    conns: usize,
    now: Instant,
) -> Result<Arc<Attachment>, String> {
    let mut current = CURRENT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(attachment) = current.upgrade()
        && attachment.link == *link
    {
        return Ok(attachment);
    }
    let attachment = Arc::new(attach(link, servers, threads, conns, now)?);
    *current = Arc::downgrade(&attachment);
    Ok(attachment)
}

/// Says what an AF_XDP error means for `--net xdp`.
fn explain(link: &BypassLink, threads: usize, e: XdpError) -> String {
    let iface = &link.iface;
    match e {
        XdpError::NotFound { .. } => format!(
            "--iface {iface}: no such interface (the AF_XDP client attaches to an existing one, \
             e.g. a veth end made by scripts/veth-pair.sh)"
        ),
        XdpError::Sys {
            errno: libc::EPERM, ..
        } => format!(
            "--iface {iface}: permission denied ({e}): the AF_XDP client needs root \
             (CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW)"
        ),
        XdpError::NoSuchQueue { queues, .. } => format!(
            "--iface {iface} has {queues} receive queue(s) and --threads {threads} needs one \
             per thread (thread i uses queue i): give it more (a veth made with numrxqueues \
             {threads} numtxqueues {threads}, `ethtool -L {iface} combined {threads}`) or use \
             fewer threads"
        ),
        XdpError::Sys {
            op: XdpOp::Bind,
            errno: libc::EBUSY,
            ..
        } => format!("--iface {iface}: {e} (another AF_XDP socket holds the queue)"),
        e => format!("--iface {iface}: {e}"),
    }
}

/// Attaches, binds and resolves (see [`join`]).
fn attach(
    link: &BypassLink,
    servers: &[std::net::SocketAddr],
    threads: usize,
    conns: usize,
    now: Instant,
) -> Result<Attachment, String> {
    let steer = match link.ip {
        IpAddr::V4(ip) => ClientSteer {
            ipv4: Some(ip),
            ipv6: None,
        },
        IpAddr::V6(ip) => ClientSteer {
            ipv4: None,
            ipv6: Some(ip),
        },
    };
    let hops = next_hops(link, servers)?;
    // The program takes every TCP segment to --ip: an address the kernel serves too would
    // lose its connections, and the kernel would answer ARP for it beside the generator.
    if let Ok(Some(holder)) = crate::sys::interface_holding(link.ip) {
        return Err(format!(
            "--ip {}: the address is already in use by the kernel on {holder}; give the \
             generator an address of its own on the link (the kernel keeps its own beside it)",
            link.ip
        ));
    }
    let program = XdpProgram::attach_client(&link.iface, ModeChoice::Auto, steer)
        .map_err(|e| explain(link, threads, e))?;
    let config = XdpConfig::for_link(conns, program.mtu());
    let mut devices = Vec::with_capacity(threads);
    for queue in 0..threads as u32 {
        devices.push(bind(&program, queue, &config).map_err(|e| explain(link, threads, e))?);
    }
    let modes = format!(
        "{} mode, {}",
        program.mode().as_str(),
        if devices.iter().all(XdpDevice::zero_copy) {
            "zero-copy"
        } else {
            "copy mode"
        }
    );
    let mac = program.mac();
    let resolved = resolve(link, mac, &hops, &mut devices)?;
    let gateways = Arc::new(Gateways::new(
        match link.gateway {
            Some(IpAddr::V4(g)) => Some(g),
            _ => None,
        },
        match link.gateway {
            Some(IpAddr::V6(g)) => Some(g),
            _ => None,
        },
    ));
    let mut neighbors = Vec::new();
    for (ip, mac) in resolved {
        if link.gateway.map(IpAddress::from) == Some(ip) {
            gateways.confirm(ip, mac, now);
        } else {
            neighbors.push((ip, mac));
        }
    }
    Ok(Attachment {
        link: link.clone(),
        devices: Mutex::new(devices.into_iter().map(Some).collect()),
        mac,
        neighbors,
        gateways,
        modes,
        program,
    })
}

/// Binds queue `queue`, trying again for [`BIND_BUSY_RETRY`] while the kernel still holds it
/// for a socket that just closed.
fn bind(program: &XdpProgram, queue: u32, config: &XdpConfig) -> Result<XdpDevice, XdpError> {
    let started = WallInstant::now();
    loop {
        match XdpDevice::bind(program, queue, config) {
            Err(XdpError::Sys {
                op: XdpOp::Bind,
                errno: libc::EBUSY,
                ..
            }) if started.elapsed() < BIND_BUSY_RETRY => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// The addresses whose MACs the tables need: each server on the link, and the gateway if a
/// server is not.
///
/// # Errors
/// A server off the link without `--gateway`.
fn next_hops(
    link: &BypassLink,
    servers: &[std::net::SocketAddr],
) -> Result<Vec<IpAddress>, String> {
    let cidr = link.cidr();
    let mut hops: Vec<IpAddress> = Vec::new();
    for server in servers {
        let ip = IpAddress::from(server.ip());
        let hop = if cidr.contains_addr(&ip) {
            ip
        } else {
            match link.gateway {
                Some(g) => IpAddress::from(g),
                None => {
                    return Err(format!(
                        "server {server} is not on the link of --ip {}/{}: give --gateway",
                        link.ip, link.prefix_len
                    ));
                }
            }
        };
        if !hops.contains(&hop) {
            hops.push(hop);
        }
    }
    if let Some(g) = link.gateway
        && !hops.contains(&IpAddress::from(g))
    {
        hops.push(IpAddress::from(g));
    }
    Ok(hops)
}

/// Asks for every hop's MAC from queue 0 (again every [`RESOLVE_RETRY`] while unanswered)
/// and reads the answers from every queue, for up to [`RESOLVE_TIMEOUT`].
///
/// # Errors
/// A hop that did not answer.
fn resolve(
    link: &BypassLink,
    mac: [u8; 6],
    hops: &[IpAddress],
    devices: &mut [XdpDevice],
) -> Result<Vec<(IpAddress, [u8; 6])>, String> {
    let cidr = link.cidr();
    let mut found: Vec<(IpAddress, [u8; 6])> = Vec::new();
    let started = WallInstant::now();
    let mut asked: Option<WallInstant> = None;
    let zero = Instant::from_micros(0);
    loop {
        let missing: Vec<IpAddress> = hops
            .iter()
            .copied()
            .filter(|h| !found.iter().any(|(ip, _)| ip == h))
            .collect();
        if missing.is_empty() {
            return Ok(found);
        }
        if started.elapsed() > RESOLVE_TIMEOUT {
            let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
            return Err(format!(
                "--iface {}: no answer to ARP/neighbour solicitation for {} in {} s (is the \
                 server up on that link, and is --ip {}/{} in its subnet?)",
                link.iface,
                names.join(", "),
                RESOLVE_TIMEOUT.as_secs(),
                link.ip,
                link.prefix_len
            ));
        }
        if asked.is_none_or(|at| at.elapsed() >= RESOLVE_RETRY) {
            asked = Some(WallInstant::now());
            let device = &mut devices[0];
            for &hop in &missing {
                if let Some(tx) = device.transmit(zero) {
                    request(tx, mac, cidr, hop);
                }
            }
            device.flush();
        }
        for device in devices.iter_mut() {
            while let Some((rx, _)) = device.receive(zero) {
                if let Some((ip, hop_mac)) = rx.consume(|frame| answer(frame, mac, cidr))
                    && hops.contains(&ip)
                    && !found.iter().any(|(known, _)| *known == ip)
                {
                    found.push((ip, hop_mac));
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Writes a request for `hop`'s MAC (ARP, or a solicitation to its solicited-node group).
fn request(tx: impl TxToken, mac: [u8; 6], cidr: IpCidr, hop: IpAddress) {
    match (cidr, hop) {
        (IpCidr::Ipv4(own), IpAddress::Ipv4(target)) => {
            tx.consume(ARP_FRAME_LEN, |frame| {
                emit_arp(
                    frame,
                    mac,
                    own.address(),
                    ArpOut::Request {
                        target,
                        to_mac: None,
                    },
                );
            });
        }
        (IpCidr::Ipv6(own), IpAddress::Ipv6(target)) => {
            tx.consume(NDP_FRAME_LEN, |frame| {
                emit_ndp(
                    frame,
                    mac,
                    own.address(),
                    NdpOut::Solicit {
                        target,
                        to_mac: None,
                    },
                );
            });
        }
        // The configuration check keeps servers and gateway in --ip's family.
        _ => {}
    }
}

/// The validated (address, MAC) an ARP or NDP frame to us shows, if any.
fn answer(frame: &[u8], mac: [u8; 6], cidr: IpCidr) -> Option<(IpAddress, [u8; 6])> {
    match cidr {
        IpCidr::Ipv4(own) => arp_input(frame, mac, own)
            .ok()
            .map(|a| (IpAddress::Ipv4(a.sender_ip), a.sender_mac)),
        IpCidr::Ipv6(own) => ndp_input(frame, mac, own)
            .ok()
            .and_then(|n| n.learn)
            .map(|(ip, mac)| (IpAddress::Ipv6(ip), mac)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(gateway: Option<&str>) -> BypassLink {
        BypassLink {
            iface: "lgx0".into(),
            ip: "10.78.0.2".parse().unwrap(),
            prefix_len: 24,
            gateway: gateway.map(|g| g.parse().unwrap()),
        }
    }

    #[test]
    fn next_hops_are_on_link_servers_and_the_gateway() {
        let servers = [
            "10.78.0.200:11211".parse().unwrap(),
            "10.78.0.200:11212".parse().unwrap(),
            "10.78.0.201:11211".parse().unwrap(),
        ];
        let hops = next_hops(&link(None), &servers).unwrap();
        assert_eq!(
            hops,
            [IpAddress::v4(10, 78, 0, 200), IpAddress::v4(10, 78, 0, 201)]
        );
        let far = ["10.77.0.2:11211".parse().unwrap()];
        let err = next_hops(&link(None), &far).unwrap_err();
        assert!(err.contains("give --gateway"), "{err}");
        let hops = next_hops(&link(Some("10.78.0.1")), &far).unwrap();
        assert_eq!(hops, [IpAddress::v4(10, 78, 0, 1)]);
        let both = [servers[0], far[0]];
        let hops = next_hops(&link(Some("10.78.0.1")), &both).unwrap();
        assert_eq!(
            hops,
            [IpAddress::v4(10, 78, 0, 200), IpAddress::v4(10, 78, 0, 1)]
        );
    }

    #[test]
    fn a_missing_interface_is_named_in_the_error() {
        let servers = ["10.78.0.200:11211".parse().unwrap()];
        let err = join(&link(None), &servers, 1, 4, Instant::from_micros(0)).unwrap_err();
        assert!(err.contains("no such interface"), "{err}");
    }
}
