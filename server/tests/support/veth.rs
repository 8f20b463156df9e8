//! A veth pair between two network namespaces for the AF_XDP tests: the client end
//! (10.78.0.1/24, transmit checksum offload off) in one, the end memspin attaches its XDP
//! program and AF_XDP sockets to in the other; both namespaces (and so the pair) are removed
//! when the value drops, also on failure.

use std::process::Command;

use super::{Netns, Server};

/// Where memspin serves on the pair.
pub const SERVER: &str = "10.78.0.2:11211";
/// The client's end.
pub const CLIENT_IFACE: &str = "msx0";
/// memspin's end.
pub const SERVER_IFACE: &str = "msx1";

/// Two namespaces and the veth pair between them.
pub struct Veth {
    /// The client's namespace.
    pub client: Netns,
    /// memspin's namespace.
    pub server: Netns,
}

/// Runs `program` and fails the test unless it succeeds.
#[track_caller]
pub fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Veth {
    #[track_caller]
    pub fn new() -> Veth {
        Veth::with_queues(1)
    }

    /// The pair with `queues` receive and transmit queues on each end.
    #[track_caller]
    pub fn with_queues(queues: usize) -> Veth {
        Veth::with_mtu(queues, 1500)
    }

    /// The pair with `queues` queues and an MTU of `mtu` on each end.
    #[track_caller]
    pub fn with_mtu(queues: usize, mtu: u32) -> Veth {
        let queues = queues.to_string();
        let mtu = mtu.to_string();
        let veth = Veth {
            client: Netns::new(),
            server: Netns::new(),
        };
        let (c, s) = (veth.client.name.as_str(), veth.server.name.as_str());
        #[rustfmt::skip]
        run("ip", &[
            "-n", c, "link", "add", CLIENT_IFACE, "numtxqueues", &queues, "numrxqueues", &queues,
            "type", "veth", "peer", "name", SERVER_IFACE, "numtxqueues", &queues, "numrxqueues",
            &queues, "netns", s,
        ]);
        run("ip", &["-n", c, "link", "set", CLIENT_IFACE, "mtu", &mtu]);
        run("ip", &["-n", s, "link", "set", SERVER_IFACE, "mtu", &mtu]);
        run(
            "ip",
            &["-n", c, "addr", "add", "10.78.0.1/24", "dev", CLIENT_IFACE],
        );
        run("ip", &["-n", c, "link", "set", CLIENT_IFACE, "up"]);
        run("ip", &["-n", s, "link", "set", SERVER_IFACE, "up"]);
        // The client kernel would otherwise leave TCP checksums to "hardware"
        // (CHECKSUM_PARTIAL); memspin verifies every checksum and would drop those frames.
        #[rustfmt::skip]
        run("ip", &["netns", "exec", c, "ethtool", "-K", CLIENT_IFACE, "tx", "off"]);
        // A veth hands a frame to the peer's receive queue of the sender's transmit queue,
        // which the client kernel picks anew for a flow after a retransmission timeout
        // (`net.core.txrehash`): with several queues a connection would move to another
        // worker mid-stream and be reset there. A NIC's RSS hashes the 4-tuple and keeps it.
        #[rustfmt::skip]
        run("ip", &["netns", "exec", c, "sysctl", "-q", "-w", "net.core.txrehash=0"]);
        veth
    }

    pub fn server_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--net",
            "xdp",
            "--iface",
            SERVER_IFACE,
            "--ip",
            "10.78.0.2/24",
            "--idle",
            "park",
        ];
        args.extend_from_slice(extra);
        args
    }

    #[track_caller]
    pub fn start(&self, extra: &[&str]) -> Server {
        Server::start(
            Some(&self.server),
            &Self::server_args(extra),
            Some(SERVER.parse().unwrap()),
        )
    }

    /// `ip link show` of memspin's end.
    pub fn server_link(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.server.name, "link", "show", SERVER_IFACE])
            .output()
            .expect("ip link show");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn has_xdp(&self) -> bool {
        // `ip link` prints `xdp` (native) or `xdpgeneric` with the program id.
        self.server_link().contains(" xdp")
    }
}
