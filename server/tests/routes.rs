//! Clients behind a router, for real: three network namespaces (memspin's, a router with
//! kernel forwarding, a client in another subnet of each family; see
//! `support/routed.rs`), memspin given `--gateway 10.77.0.1 --gateway fd77::1`, over TAP
//! and over AF_XDP. From the client: `memccapable`, ping and `memspin-loadgen --verify`, over
//! IPv4 and IPv6; memspin must have resolved the router's MAC itself. Everything is removed
//! afterwards, also on failure. Needs root, as CI has.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use loadgen::client::Protocol;
use protocol::binary::Status;
use support::routed::{GATEWAY4, GATEWAY6, GATEWAY6_LINK_LOCAL, Path, Routed, server4, server6};
use support::verify::check_verify_patiently;
use support::{
    Client, Server, assert_every_worker_accepted, assert_forwarded_both_ways, assert_settings,
    memccapable, ping, text_stat,
};

/// One test of this file at a time: each runs a server, a router and load at once, and the
/// two-worker one needs the machine's CPUs to itself more than the others need to overlap.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The `gateways: ...` lines of a stopped server's report: every worker's must show the
/// gateways (IPv4's and `gateway6`) resolved to `mac`.
#[track_caller]
fn assert_gateways_resolved(stderr: &str, mac: &str, gateway6: &str, workers: usize) {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("gateways: "))
        .collect();
    assert_eq!(lines.len(), workers, "{stderr}");
    for line in lines {
        for gateway in [GATEWAY4, gateway6] {
            assert!(line.contains(&format!("{gateway} at {mac}")), "{line}");
        }
    }
}

/// Both families from the client's subnet: memccapable (binary), one ping each, and loadgen
/// runs with `--verify`; then a clean exit with the router's MAC resolved.
fn clients_behind_a_router(path: Path) {
    let routed = Routed::new(path);
    let mut server = routed.start(&[]);
    for part in [
        "listening on 10.77.0.2:11211 and [fd77::2]:11211",
        "gateways 10.77.0.1 and fd77::1",
    ] {
        assert!(server.ready_line.contains(part), "{}", server.ready_line);
    }
    for addr in [server4(), server6()] {
        memccapable(Some(&routed.client), addr, "-b");
    }
    memccapable(Some(&routed.client), server6(), "-a");
    routed.client.enter();
    let net = match path {
        Path::Tap { .. } => "STAT memspin_net tap",
        Path::Xdp { .. } => "STAT memspin_net xdp",
    };
    assert_settings(
        server6(),
        &[
            net,
            "STAT memspin_ipv4 10.77.0.2/24",
            "STAT memspin_ipv6 fd77::2/64",
            "STAT memspin_gateway_ipv4 10.77.0.1",
            "STAT memspin_gateway_ipv6 fd77::1",
        ],
    );
    for (seq, addr) in [server4(), server6()].into_iter().enumerate() {
        let rtt = ping::echo(addr.ip(), seq as u16, Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("ping {}: {e}", addr.ip()));
        eprintln!("ping {} through the router: {rtt:?}", addr.ip());
    }
    for addr in [server4(), server6()] {
        let ops = check_verify_patiently(addr, Protocol::Binary, 16, 20_000);
        eprintln!("{addr}: {ops} verified operations");
    }
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
    assert_gateways_resolved(&stderr, &routed.router_mac(), GATEWAY6, 1);
}

#[test]
fn clients_behind_a_router_over_tap() {
    let _serial = serial();
    clients_behind_a_router(Path::Tap { queues: 1 });
}

#[test]
fn clients_behind_a_router_over_xdp() {
    let _serial = serial();
    clients_behind_a_router(Path::Xdp { queues: 1 });
}

/// Two workers on a multi-queue TAP device behind the router, its IPv6 gateway given as the
/// router's link-local address: whichever queue the router's answers to memspin's probes
/// arrive on, both workers send to its MAC (they share it), and the usual two-worker load
/// with `--verify` passes from the client's subnet.
#[test]
fn two_workers_serve_clients_behind_a_router() {
    let _serial = serial();
    let routed = Routed::new(Path::Tap { queues: 2 });
    let args: Vec<&str> = routed
        .server_args(&["-t", "2"])
        .into_iter()
        .map(|a| {
            if a == GATEWAY6 {
                GATEWAY6_LINK_LOCAL
            } else {
                a
            }
        })
        .collect();
    let mut server = Server::start(Some(&routed.server), &args, Some(server4()));
    memccapable(Some(&routed.client), server6(), "-b");
    routed.client.enter();
    check_verify_patiently(server6(), Protocol::Binary, 16, 10_000);
    // The two-worker load of the other paths' tests (support's
    // `check_two_workers_under_load`).
    check_verify_patiently(server4(), Protocol::Binary, 64, 100_000);
    check_verify_patiently(server4(), Protocol::Text, 16, 10_000);
    assert_eq!(text_stat(server4(), "threads"), Some(2));
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
    assert_forwarded_both_ways(&stderr, 2);
    assert_every_worker_accepted(&stderr, 2);
    assert_gateways_resolved(&stderr, &routed.router_mac(), GATEWAY6_LINK_LOCAL, 2);
}

/// Replaces the router's MAC on memspin's link: a router swapped for another with the same
/// address. Linux then flushes its neighbour entries on that link and asks for memspin's
/// address again from the new MAC, which confirms the gateway there; with `quiet`, the new
/// router is given memspin's MAC statically instead (as a router with a pre-filled or long
/// lived entry would have it) and sends memspin nothing of its own.
fn replace_router_mac(routed: &Routed, server: &Server, quiet: bool) {
    let r = routed.router.name.as_str();
    #[rustfmt::skip]
    support::veth::run("ip", &["-n", r, "link", "set", "msr0", "address", "02:77:00:00:00:99"]);
    if quiet {
        let mac = server
            .ready_line
            .split("(MAC ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .expect("the ready line's MAC");
        for addr in ["10.77.0.2", "fd77::2"] {
            #[rustfmt::skip]
            support::veth::run("ip", &[
                "-n", r, "neigh", "replace", addr, "lladdr", mac, "dev", "msr0", "nud", "permanent",
            ]);
        }
    }
}

/// A connection open while the router is replaced: its replies go to the new router, found
/// by the new router's ARP request for memspin or, when it sends none, by the first
/// connection through it (its SYN-ACK goes back the way the SYN came, and its completion
/// makes memspin ask for the gateway again).
#[test]
fn open_connections_follow_a_replaced_router() {
    let _serial = serial();
    for quiet in [false, true] {
        let routed = Routed::new(Path::Xdp { queues: 1 });
        let server = routed.start(&[]);
        let client = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    routed.client.enter();
                    let mut open = Client::connect(server.addr);
                    assert_eq!(open.set(b"k", b"v", 0).unwrap().status, Status::NoError);
                    replace_router_mac(&routed, &server, quiet);
                    let mut new = Client::connect(server.addr);
                    assert_eq!(new.set(b"k2", b"v2", 0).unwrap().status, Status::NoError);
                    open.get(b"k").map(|reply| reply.value)
                })
                .join()
        });
        let value = client
            .expect("the client thread")
            .unwrap_or_else(|e| panic!("quiet {quiet}: the open connection: {e}"));
        assert_eq!(value, b"v");
    }
}

/// Without `--gateway` a client behind the router is served too, each connection through
/// the MAC its SYN came from, and echo requests are answered to the frame's source; but a
/// connection open while the router is replaced is answered into the void.
#[test]
fn without_a_gateway_connections_stay_with_the_router_they_came_through() {
    let _serial = serial();
    let routed = Routed::new(Path::Xdp { queues: 1 });
    let args: Vec<&str> = routed
        .server_args(&[])
        .into_iter()
        .filter(|&a| a != "--gateway" && a != GATEWAY4 && a != GATEWAY6)
        .collect();
    let server = Server::start(Some(&routed.server), &args, Some(server4()));
    assert!(
        !server.ready_line.contains("gateway"),
        "{}",
        server.ready_line
    );
    routed.client.enter();
    for (seq, addr) in [server4(), server6()].into_iter().enumerate() {
        let mut client = Client::connect(addr);
        assert_eq!(client.set(b"k", b"v", 0).unwrap().status, Status::NoError);
        let ip: IpAddr = addr.ip();
        assert!(
            ping::echo(ip, seq as u16, Duration::from_secs(3)).is_ok(),
            "{ip}"
        );
    }
    let mut open = Client::connect(server.addr);
    assert_eq!(open.set(b"k", b"v", 0).unwrap().status, Status::NoError);
    replace_router_mac(&routed, &server, false);
    let mut new = Client::connect(server.addr);
    assert_eq!(new.set(b"k2", b"v2", 0).unwrap().status, Status::NoError);
    open.set_read_timeout(Duration::from_secs(3));
    assert!(
        open.get(b"k").is_err(),
        "answered through a router that is gone"
    );
}
