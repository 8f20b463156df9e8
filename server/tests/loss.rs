//! Loss recovery on the bypass paths (docs/loss-recovery.md): nftables drops frames at
//! random in both directions of the link, inside the test's own namespaces, while
//! `memspin-loadgen --verify` runs against memspin over TAP and over AF_XDP. Every value
//! must come back intact, no request may fail or wait anywhere near smoltcp's one-second
//! retransmission timer, and memspin's counters must show that it repaired losses.
//!
//! The link (namespaces made here and removed on drop, also on failure):
//!
//! ```text
//! client ns                 middle ns                                xdp ns
//! lc 10.79.0.1 ──veth── lm ─ br0 ─ ms0 (TAP) memspin --net tap 10.79.0.2
//! [drop at ingress]  [drop at ingress]   └─ xm ──veth── xs memspin --net xdp 10.79.0.4
//! ```
//!
//! Frames are dropped where they arrive (ingress of lc, server to client; ingress of lm,
//! client to server), after the sending device took them: the sender sees a loss on the
//! wire. (A drop at a sender's own egress is reported back to its TCP as a local drop.)
//! The client's route has `rto_min 1ms`, as a datacenter host's would, so the client's own
//! recovery of lost requests is quick too. Needs root, nftables and ethtool, as CI has.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use support::abuse::nft;
use support::{Netns, Server, TAP, Tap, text_stat};

/// Frames dropped in 10,000, in each direction: 1 %, so a few seconds of traffic lose
/// dozens of replies, requests, ACKs and handshake frames.
const LOSS_IN_10000: u32 = 100;

/// The slowest request allowed: far below smoltcp's one-second timer (which a reply lost
/// without loss recovery waits for), far above a probe timeout and its backoff (1, 2, 4 ms
/// ...), with room for a shared, virtual machine.
const SLOWEST: Duration = Duration::from_millis(400);

#[track_caller]
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip: {e}"));
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The three namespaces of the module docs, with loss on.
struct LossyLink {
    client: Netns,
    middle: Netns,
    xdp: Netns,
}

impl LossyLink {
    #[track_caller]
    fn new() -> LossyLink {
        let link = LossyLink {
            client: Netns::new(),
            middle: Netns::new(),
            xdp: Netns::new(),
        };
        let (c, m, x) = (
            link.client.name.as_str(),
            link.middle.name.as_str(),
            link.xdp.name.as_str(),
        );
        #[rustfmt::skip]
        let steps: &[&[&str]] = &[
            &["-n", c, "link", "add", "lc", "type", "veth", "peer", "name", "lm", "netns", m],
            &["-n", c, "addr", "add", "10.79.0.1/24", "dev", "lc"],
            &["-n", c, "link", "set", "lc", "up"],
            &["-n", c, "route", "replace", "10.79.0.0/24", "dev", "lc", "proto", "kernel",
              "scope", "link", "src", "10.79.0.1", "rto_min", "1ms"],
            &["-n", m, "link", "add", "br0", "type", "bridge"],
            &["-n", m, "link", "set", "lm", "master", "br0"],
            &["-n", m, "link", "add", "xm", "type", "veth", "peer", "name", "xs", "netns", x],
            &["-n", m, "link", "set", "xm", "master", "br0"],
            &["-n", m, "link", "set", "lm", "up"],
            &["-n", m, "link", "set", "xm", "up"],
            &["-n", m, "link", "set", "br0", "up"],
            &["-n", x, "link", "set", "xs", "up"],
        ];
        for step in steps {
            ip(step);
        }
        // memspin verifies every checksum: the client must not leave them to "hardware".
        let status = link
            .client
            .command("ethtool")
            .args(["-K", "lc", "tx", "off"])
            .output()
            .expect("ethtool (Debian package ethtool) must be installed");
        assert!(status.status.success(), "ethtool -K lc tx off");
        for (ns, dev) in [(&link.client, "lc"), (&link.middle, "lm")] {
            nft(
                ns,
                &format!(
                    "table netdev memspin_loss {{
                        chain c {{
                            type filter hook ingress device \"{dev}\" priority 0;
                            numgen random mod 10000 < {LOSS_IN_10000} counter drop;
                        }}
                    }}"
                ),
            );
        }
        link
    }

    /// memspin over TAP in the middle namespace, its device on the bridge.
    #[track_caller]
    fn start_tap(&self, extra: &[&str]) -> Server {
        let mut args = Tap {
            ips: &["10.79.0.2/24"],
            host_ips: &["none"],
            ..TAP
        }
        .args();
        args.extend_from_slice(extra);
        let server = Server::start(
            Some(&self.middle),
            &args,
            Some("10.79.0.2:11211".parse().unwrap()),
        );
        let middle = self.middle.name.as_str();
        ip(&["-n", middle, "link", "set", "ms0", "master", "br0"]);
        server
    }

    /// memspin over AF_XDP on xs.
    #[track_caller]
    fn start_xdp(&self, extra: &[&str]) -> Server {
        let mut args = vec![
            "--net",
            "xdp",
            "--iface",
            "xs",
            "--ip",
            "10.79.0.4/24",
            "--idle",
            "park",
        ];
        args.extend_from_slice(extra);
        Server::start(
            Some(&self.xdp),
            &args,
            Some("10.79.0.4:11211".parse().unwrap()),
        )
    }

    /// Frames the loss rules dropped so far, in both directions.
    fn dropped(&self) -> u64 {
        [&self.client, &self.middle]
            .into_iter()
            .map(|ns| {
                let out = ns
                    .command("nft")
                    .args(["list", "table", "netdev", "memspin_loss"])
                    .output()
                    .expect("nft");
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                text.split("packets ")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }
}

/// Runs `memspin-loadgen --verify` from the client namespace against `addr` under loss and
/// checks every value, every request's time, and memspin's recovery counters.
#[track_caller]
fn verify_under_loss(link: &LossyLink, mut server: Server) {
    let addr: SocketAddr = server.addr;
    link.client.enter();
    let dropped_before = link.dropped();
    // Open loop at a modest rate, one request in flight per connection (each lost reply
    // then waits for a probe, as in the loss benchmark of docs/benchmarks.md), values of up to three
    // segments so SACK re-sends are exercised too. Bounded: 4 s of load.
    let report = loadgen::run(&loadgen::Config {
        servers: vec![addr],
        connections: 16,
        threads: 1,
        pipeline: 1,
        rate: Some(2_000.0),
        duration: Duration::from_secs(4),
        warmup: Duration::from_millis(300),
        keys: 2_000,
        value_min: 32,
        value_max: 4_000,
        get_ratio: 0.5,
        prefill: true,
        verify: true,
        progress: false,
        idle: loadgen::config::Idle::Sleep,
        ..loadgen::Config::default()
    })
    .expect("loadgen run");
    let dropped = link.dropped() - dropped_before;
    let table = report.table();
    assert_eq!(report.errors.total(), 0, "{table}");
    assert_eq!(report.verify.mismatches, 0, "{table}");
    assert_eq!(report.verify.lost, 0, "{table}");
    assert!(report.verify.checked > 1_000, "{table}");
    let slowest = Duration::from_nanos(report.service.all().max());
    assert!(
        slowest < SLOWEST,
        "a request took {slowest:?} ({dropped} frames dropped):\n{table}"
    );
    assert!(dropped > 50, "only {dropped} frames dropped");
    let stat = |name| text_stat(addr, name).unwrap_or_else(|| panic!("no {name}"));
    let (probes, resends, peer, recovered) = (
        stat("memspin_loss_probes"),
        stat("memspin_loss_sack_resends"),
        stat("memspin_loss_peer_retransmit_resends"),
        stat("memspin_loss_recovered"),
    );
    assert!(
        probes + resends + peer > 0 && recovered > 0,
        "probes {probes}, SACK re-sends {resends}, after the client's retransmission \
         {peer}, recovered {recovered}"
    );
    // Spurious probes are among the probes, and stretched ones too.
    let spurious = stat("memspin_loss_probes_spurious");
    let stretched = stat("memspin_loss_probes_stretched");
    assert!(
        spurious <= probes && stretched <= probes,
        "probes {probes}: spurious {spurious}, stretched {stretched}"
    );
    let (status, stderr) = server.stop();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "stderr:\n{stderr}");
    assert!(
        stderr.contains("STAT memspin_loss_probes "),
        "the exit statistics report recovery:\n{stderr}"
    );
}

#[test]
fn tap_repairs_random_loss_both_ways_without_a_second_of_delay() {
    let link = LossyLink::new();
    let server = link.start_tap(&[]);
    verify_under_loss(&link, server);
}

#[test]
fn xdp_repairs_random_loss_both_ways_without_a_second_of_delay() {
    let link = LossyLink::new();
    let server = link.start_xdp(&[]);
    verify_under_loss(&link, server);
}
