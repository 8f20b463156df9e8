//! IPv6 on every packet path, for real, inside namespaces each test creates and removes
//! (also on failure): over TAP (memspin answers neighbour discovery for fd77::2 itself, the
//! kernel side has fd77::1), over a veth pair with AF_XDP (fd78::2, the client fd78::1), both
//! families at once, and kernel sockets with `-l ::1`. Clients: memccapable (binary and
//! text), pymemcache (Debian's python3-pymemcache), ping, memspin-loadgen `--verify`.
//! Needs root, as CI has.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use loadgen::client::Protocol;
use support::verify::check_verify_patiently;
use support::veth::{CLIENT_IFACE, SERVER_IFACE, Veth, run};
use support::{Netns, Server, TAP, Tap, assert_settings, memccapable, ping, pymemcache_round_trip};

const TAP6: &str = "[fd77::2]:11211";

/// memspin over TAP with no address: each test gives its own (`--ip`, `--host-ip`).
fn start_tap(ns: &Netns, extra: &[&str]) -> Server {
    let mut args = Tap {
        ips: &[],
        host_ips: &[],
        ..TAP
    }
    .args();
    args.extend_from_slice(extra);
    Server::start(Some(ns), &args, None)
}

#[track_caller]
fn ping(addr: SocketAddr) {
    let rtt = ping::echo(addr.ip(), 1, Duration::from_secs(3))
        .unwrap_or_else(|e| panic!("ping {}: {e}", addr.ip()));
    eprintln!("ping {}: {rtt:?}", addr.ip());
}

/// memspin over TAP with only an IPv6 address: memccapable's binary and text suites and a
/// pymemcache session over IPv6, ping6 answered by memspin.
#[test]
fn ipv6_over_tap() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["--ip", "fd77::2/64", "--host-ip", "fd77::1/64"]);
    assert_eq!(server.addr, TAP6.parse().unwrap(), "{}", server.ready_line);
    memccapable(Some(&ns), server.addr, "-b");
    memccapable(Some(&ns), server.addr, "-a");
    pymemcache_round_trip(Some(&ns), server.addr);
    ns.enter();
    ping(server.addr);
    assert_settings(
        server.addr,
        &[
            "STAT memspin_net tap",
            "STAT memspin_ipv4 none",
            "STAT memspin_ipv6 fd77::2/64",
            "STAT memspin_gateway_ipv4 none",
            "STAT memspin_gateway_ipv6 none",
        ],
    );
}

/// Both families on one TAP device and one table: each served, loadgen `--verify` over IPv6,
/// and the text suite over IPv4 on the same server.
#[test]
fn both_families_over_tap() {
    let ns = Netns::new();
    #[rustfmt::skip]
    let server = start_tap(&ns, &[
        "--ip", "10.77.0.2/24", "--ip", "fd77::2/64",
        "--host-ip", "10.77.0.1/24", "--host-ip", "fd77::1/64",
    ]);
    assert!(
        server
            .ready_line
            .contains("listening on 10.77.0.2:11211 and [fd77::2]:11211"),
        "{}",
        server.ready_line
    );
    let v6: SocketAddr = TAP6.parse().unwrap();
    memccapable(Some(&ns), v6, "-b");
    memccapable(Some(&ns), server.addr, "-a");
    ns.enter();
    for addr in [server.addr, v6] {
        ping(addr);
    }
    check_verify_patiently(v6, Protocol::Binary, 16, 20_000);
    check_verify_patiently(server.addr, Protocol::Text, 8, 5_000);
}

/// memspin over AF_XDP on a veth end serving fd78::2 (and 10.78.0.2): memccapable and
/// pymemcache over IPv6 from the client's namespace, ping6 answered by memspin. The kernel's
/// own IPv6 address on the same interface (fd78::3) keeps answering ping and neighbour
/// discovery: the program takes only memspin's.
#[test]
fn ipv6_over_veth_with_xdp() {
    let veth = Veth::new();
    let (c, s) = (veth.client.name.as_str(), veth.server.name.as_str());
    #[rustfmt::skip]
    run("ip", &["-n", c, "addr", "add", "fd78::1/64", "dev", CLIENT_IFACE, "nodad"]);
    #[rustfmt::skip]
    run("ip", &["-n", s, "addr", "add", "fd78::3/64", "dev", SERVER_IFACE, "nodad"]);
    let mut server = veth.start(&["--ip", "fd78::2/64"]);
    let v6: SocketAddr = "[fd78::2]:11211".parse().unwrap();
    assert!(
        server.ready_line.contains("[fd78::2]:11211"),
        "{}",
        server.ready_line
    );
    memccapable(Some(&veth.client), v6, "-b");
    memccapable(Some(&veth.client), v6, "-a");
    pymemcache_round_trip(Some(&veth.client), v6);
    veth.client.enter();
    ping(v6);
    let host: IpAddr = "fd78::3".parse().unwrap();
    let rtt = ping::echo(host, 2, Duration::from_secs(3))
        .unwrap_or_else(|e| panic!("ping the kernel's own fd78::3: {e}"));
    eprintln!("ping fd78::3 (the kernel): {rtt:?}");
    check_verify_patiently(v6, Protocol::Binary, 16, 20_000);
    assert_settings(
        v6,
        &[
            "STAT memspin_net xdp",
            "STAT memspin_ipv4 10.78.0.2/24",
            "STAT memspin_ipv6 fd78::2/64",
            "STAT memspin_gateway_ipv4 none",
            "STAT memspin_gateway_ipv6 none",
        ],
    );
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
}

/// Kernel sockets with `-l ::1`: memspin listens on IPv6, and memccapable and pymemcache
/// pass against it.
#[test]
fn kernel_sockets_listen_on_ipv6() {
    let ns = Netns::new();
    let server = Server::start(
        Some(&ns),
        &["--net", "kernel", "-l", "::1", "-p", "0", "--idle", "park"],
        None,
    );
    assert!(server.addr.is_ipv6(), "{}", server.ready_line);
    memccapable(Some(&ns), server.addr, "-b");
    memccapable(Some(&ns), server.addr, "-a");
    pymemcache_round_trip(Some(&ns), server.addr);
}
