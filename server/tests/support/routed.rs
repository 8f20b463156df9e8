//! Clients behind a router: three network namespaces, created for one test and removed with
//! it (also on failure).
//!
//! ```text
//!  memspin's namespace            router's namespace                 client's namespace
//!  ┌──────────────────────┐      ┌─────────────────────────────┐     ┌──────────────────┐
//!  │ memspin 10.77.0.2/24 │      │ msr0 10.77.0.1/24 fd77::1/64│     │ msc1 10.79.0.2/24│
//!  │                      │      │      fe80::1                │     │                  │
//!  │         fd77::2/64   │ veth │      (forwarding on)        │veth │      fd79::2/64  │
//!  │  xdp: on msr1 ───────┼──────┼─ msr0          msc0 ────────┼─────┼─ msc1            │
//!  │  tap: ms0 ─ br0 ─ msr1│     │ msc0 10.79.0.1/24 fd79::1/64│     │ default via .1/::1│
//!  └──────────────────────┘      └─────────────────────────────┘     └──────────────────┘
//! ```
//!
//! memspin serves 10.77.0.2 and fd77::2 with `--gateway 10.77.0.1 --gateway fd77::1`; the
//! client, in another subnet of each family, reaches it only through the router's kernel
//! forwarding. Over TAP, memspin's namespace bridges its TAP device to the veth (the kernel
//! there has no address: it only switches frames), so memspin resolves the router's MAC
//! across a real Ethernet segment, as it would on a NIC.

use std::net::SocketAddr;
use std::process::Command;

use super::veth::run;
use super::{Netns, Server, TAP, Tap};

/// memspin's IPv4 service.
pub const SERVER4: &str = "10.77.0.2:11211";
/// memspin's IPv6 service.
pub const SERVER6: &str = "[fd77::2]:11211";
/// The router's addresses on memspin's link.
pub const GATEWAY4: &str = "10.77.0.1";
/// The router's IPv6 address on memspin's link.
pub const GATEWAY6: &str = "fd77::1";
/// The router's link-local address on memspin's link (also a valid `--gateway`).
pub const GATEWAY6_LINK_LOCAL: &str = "fe80::1";
/// The client's addresses.
pub const CLIENT4: &str = "10.79.0.2";
/// The client's IPv6 address.
pub const CLIENT6: &str = "fd79::2";

/// The router's interface on memspin's link.
const ROUTER_SIDE: &str = "msr0";
/// memspin's end of that link (XDP attaches here; TAP bridges to it).
const SERVER_SIDE: &str = "msr1";

/// How memspin is attached to its link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// A TAP device (`ms0`) bridged to the veth, `queues` queues (multi-queue above 1).
    Tap {
        /// TAP queues, one per worker.
        queues: usize,
    },
    /// AF_XDP on memspin's veth end, with `queues` queues.
    Xdp {
        /// veth queues, one per worker.
        queues: usize,
    },
}

/// The three namespaces.
pub struct Routed {
    /// memspin's.
    pub server: Netns,
    /// The router's.
    pub router: Netns,
    /// The client's.
    pub client: Netns,
    path: Path,
}

impl Routed {
    /// Builds the topology for `path` (see the module docs).
    #[track_caller]
    pub fn new(path: Path) -> Routed {
        let routed = Routed {
            server: Netns::new(),
            router: Netns::new(),
            client: Netns::new(),
            path,
        };
        let (s, r, c) = (
            routed.server.name.as_str(),
            routed.router.name.as_str(),
            routed.client.name.as_str(),
        );
        let queues = match path {
            Path::Tap { .. } => 1,
            Path::Xdp { queues } => queues,
        }
        .to_string();
        // memspin's link: router end, memspin's end.
        #[rustfmt::skip]
        run("ip", &[
            "-n", r, "link", "add", ROUTER_SIDE, "numtxqueues", &queues, "numrxqueues", &queues,
            "type", "veth", "peer", "name", SERVER_SIDE, "numtxqueues", &queues, "numrxqueues",
            &queues, "netns", s,
        ]);
        // The client's link.
        #[rustfmt::skip]
        run("ip", &[
            "-n", r, "link", "add", "msc0", "type", "veth", "peer", "name", "msc1", "netns", c,
        ]);
        for (ns, sysctl) in [
            (r, "net.ipv4.ip_forward=1"),
            (r, "net.ipv6.conf.all.forwarding=1"),
        ] {
            run("ip", &["netns", "exec", ns, "sysctl", "-qw", sysctl]);
        }
        for (ns, dev, addr) in [
            (r, ROUTER_SIDE, "10.77.0.1/24"),
            (r, ROUTER_SIDE, "fd77::1/64"),
            (r, ROUTER_SIDE, "fe80::1/64"),
            (r, "msc0", "10.79.0.1/24"),
            (r, "msc0", "fd79::1/64"),
            (c, "msc1", "10.79.0.2/24"),
            (c, "msc1", "fd79::2/64"),
        ] {
            let mut args = vec!["-n", ns, "addr", "add", addr, "dev", dev];
            if addr.contains(':') {
                // Usable at once: no duplicate address detection on a link we made.
                args.push("nodad");
            }
            run("ip", &args);
        }
        for (ns, dev) in [(r, ROUTER_SIDE), (r, "msc0"), (c, "msc1"), (s, SERVER_SIDE)] {
            run("ip", &["-n", ns, "link", "set", dev, "up"]);
        }
        run(
            "ip",
            &["-n", c, "route", "add", "default", "via", "10.79.0.1"],
        );
        run(
            "ip",
            &["-n", c, "-6", "route", "add", "default", "via", "fd79::1"],
        );
        // The kernels would leave TCP checksums to "hardware" (CHECKSUM_PARTIAL) on veth;
        // memspin verifies every checksum and would drop those frames.
        for (ns, dev) in [(c, "msc1"), (r, "msc0"), (r, ROUTER_SIDE)] {
            run(
                "ip",
                &["netns", "exec", ns, "ethtool", "-K", dev, "tx", "off"],
            );
        }
        if let Path::Tap { queues } = path {
            // A TAP device memspin attaches to, bridged with its veth end.
            let mut tap = vec!["-n", s, "tuntap", "add", "ms0", "mode", "tap"];
            if queues > 1 {
                tap.push("multi_queue");
            }
            run("ip", &tap);
            #[rustfmt::skip]
            run("ip", &["-n", s, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"]);
            for dev in ["ms0", SERVER_SIDE] {
                run("ip", &["-n", s, "link", "set", dev, "master", "br0"]);
            }
            run("ip", &["-n", s, "link", "set", "br0", "up"]);
        }
        routed
    }

    /// memspin's arguments for this topology, both families, both gateways, then `extra`.
    pub fn server_args<'a>(&self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = match self.path {
            Path::Tap { .. } => Tap {
                ips: &[],
                host_ips: &["none"],
                idle: None,
                ..TAP
            }
            .args(),
            Path::Xdp { .. } => vec!["--net", "xdp", "--iface", SERVER_SIDE],
        };
        #[rustfmt::skip]
        args.extend_from_slice(&[
            "--ip", "10.77.0.2/24", "--ip", "fd77::2/64",
            "--gateway", GATEWAY4, "--gateway", GATEWAY6, "--idle", "park",
        ]);
        args.extend_from_slice(extra);
        args
    }

    /// Starts memspin in its namespace with [`server_args`](Self::server_args).
    #[track_caller]
    pub fn start(&self, extra: &[&str]) -> Server {
        Server::start(
            Some(&self.server),
            &self.server_args(extra),
            Some(SERVER4.parse().unwrap()),
        )
    }

    /// The router's MAC on memspin's link: what memspin must resolve the gateway to.
    pub fn router_mac(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.router.name, "-br", "link", "show", ROUTER_SIDE])
            .output()
            .expect("ip link show");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("no MAC in {text:?}"))
            .to_string()
    }
}

/// memspin's IPv6 service as a socket address.
pub fn server6() -> SocketAddr {
    SERVER6.parse().unwrap()
}

/// memspin's IPv4 service as a socket address.
pub fn server4() -> SocketAddr {
    SERVER4.parse().unwrap()
}
