//! Connection lifetimes, admission and neighbours under abuse, on the TAP, AF_XDP and kernel
//! paths: dead peers (nftables drops a client's packets inside the test namespace) give
//! their slot back within the documented give-up time; `--idle-timeout` closes idle
//! connections and leaves busy ones; a flood of spoofed SYNs does not lock a real client
//! out; RSTs during the handshake leave no slot behind; sixteen client hosts are served
//! without one-second stalls; `-c` is one limit over all workers.
//!
//! Every test makes its own namespaces and removes them (also on failure); raw segments use
//! source addresses of the test's own subnet. Needs root, nftables and ethtool, as CI has.

mod support;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use netstack::conn::GIVE_UP_TIMEOUT;
use netstack::smoltcp::wire::TcpControl;
use protocol::binary::Status;
use support::abuse::{
    Hook, RawTcp, TAP_HOST, TAP_IFACE, Toward, Veth, check_idle_timeout, check_shared_limit,
    client_on, connect_from, drop_tcp, served, start_kernel_in, start_tap, version_ok,
};
use support::{Netns, Server, TAP_SERVER};

/// The documented give-up time, in wall-clock terms.
fn give_up() -> Duration {
    Duration::from_millis(GIVE_UP_TIMEOUT.total_millis())
}

/// A peer dies with a reply in flight while `-c 2` is full (it and an observer): nothing
/// the server sends reaches it from the moment its request leaves, and a moment later
/// nothing it sends reaches the server either (`client_hook`: where the client's frames
/// are seen on `device`). A third client is refused until the dead
/// peer's slot comes back, which must happen within the documented give-up time (plus a
/// margin for a shared machine), and not long before it (it is the give-up at work).
#[track_caller]
fn check_dead_peer_slot_comes_back(
    ns: &Netns,
    device: &str,
    client_hook: Hook,
    connect: impl Fn() -> Option<TcpStream>,
) {
    use std::io::Write;
    let mut dead = connect().expect("first client served");
    let mut observer = connect().expect("second client served");
    assert!(connect().is_none(), "-c 2 is full");
    let port = dead.local_addr().unwrap().port();
    drop_tcp(ns, device, port, Toward::Port, Hook::Ingress);
    dead.write_all(b"version\r\n").unwrap();
    let died = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    drop_tcp(ns, device, port, Toward::FromPort, client_hook);
    let back = loop {
        std::thread::sleep(Duration::from_millis(500));
        if connect().is_some() {
            break died.elapsed();
        }
        assert!(
            died.elapsed() < give_up() + Duration::from_secs(15),
            "the dead peer's slot did not come back within {:?} (give-up {:?})",
            died.elapsed(),
            give_up()
        );
    };
    assert!(
        back >= give_up() - Duration::from_secs(5),
        "the slot came back after {back:?}, long before the give-up time {:?}",
        give_up()
    );
    assert!(version_ok(&mut observer), "the observer is still served");
}

#[test]
fn tap_a_dead_peer_gives_its_slot_back_within_the_give_up_time() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["-c", "2"]);
    ns.enter();
    let addr = server.addr;
    // memspin's frames arrive at ms0 (ingress); the client's leave through it (egress).
    check_dead_peer_slot_comes_back(&ns, TAP_IFACE, Hook::Egress, || {
        served(addr, Duration::from_secs(2))
    });
}

#[test]
fn kernel_a_dead_peer_gives_its_slot_back_within_the_give_up_time() {
    let ns = Netns::new();
    let server = start_kernel_in(&ns, &["-c", "2"]);
    ns.enter();
    let addr = server.addr;
    // Both directions arrive at lo (ingress).
    check_dead_peer_slot_comes_back(&ns, "lo", Hook::Ingress, || {
        served(addr, Duration::from_secs(2))
    });
}

#[test]
fn tap_idle_timeout_closes_idle_connections_and_leaves_busy_ones() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["--idle-timeout", "2"]);
    ns.enter();
    check_idle_timeout(server.addr);
}

#[test]
fn xdp_idle_timeout_closes_idle_connections_and_leaves_busy_ones() {
    let veth = Veth::with_queues(1);
    let server = veth.start(&["--idle-timeout", "2"]);
    veth.client.enter();
    check_idle_timeout(server.addr);
}

#[test]
fn kernel_idle_timeout_closes_idle_connections_and_leaves_busy_ones() {
    let ns = Netns::new();
    let server = start_kernel_in(&ns, &["--idle-timeout", "2", "-t", "2"]);
    ns.enter();
    check_idle_timeout(server.addr);
}

/// 2,000 SYNs from forged addresses of the namespace's subnet `a.b.c.0/24` (nobody
/// answers the SYN-ACKs: no host owns them), spread over about a second, while a real
/// client connects, sets and reads a value, and closes, again and again: every one of its
/// connections is served. memspin runs with `-c 64`: with one worker the handshake budget
/// (64 + 1,024) is spent halfway and the oldest forged handshakes give way from then on
/// (`expect_eviction`). With handshakes counted against `-c`, the flood used to lock the
/// client out for the ten-second handshake timeout.
#[track_caller]
fn check_syn_flood(server: &mut Server, subnet: [u8; 3], expect_eviction: bool) {
    let addr = server.addr;
    let SocketAddr::V4(dst) = addr else {
        panic!("IPv4 only")
    };
    let flood = std::thread::spawn(move || {
        let raw = RawTcp::new();
        let mut sent = 0u32;
        for round in 0..100u32 {
            for i in 0..20u32 {
                let n = round * 20 + i;
                // .10 ..= .249: addresses of the test's subnet that no host uses.
                let [a, b, c] = subnet;
                let src = Ipv4Addr::new(a, b, c, 10 + (n % 240) as u8);
                let port = 20_000 + (n / 240) as u16 * 7 + (n % 7) as u16 * 1000;
                raw.send(SocketAddrV4::new(src, port), dst, TcpControl::Syn, n * 7919)
                    .expect("send a SYN");
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        sent
    });
    let start = Instant::now();
    let mut connections = 0;
    while !flood.is_finished() || start.elapsed() < Duration::from_millis(300) {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("connection {connections} refused during the flood: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut client = client_on(stream);
        let key = format!("real{connections}");
        assert_eq!(
            client.set(key.as_bytes(), b"served", 0).unwrap().status,
            Status::NoError
        );
        assert_eq!(client.get(key.as_bytes()).unwrap().value, b"served");
        connections += 1;
    }
    assert_eq!(flood.join().unwrap(), 2000);
    assert!(
        connections >= 10,
        "only {connections} connections in the flood"
    );
    let (_, stderr) = server.stop();
    let evicted: u64 = stderr
        .split("syn_evicted: ")
        .skip(1)
        .filter_map(|rest| rest.split([',', ' ']).next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(
        evicted > 0,
        expect_eviction,
        "handshakes evicted:\n{stderr}"
    );
}

#[test]
fn tap_a_syn_flood_does_not_lock_a_real_client_out() {
    let ns = Netns::new();
    let mut server = start_tap(&ns, &["-c", "64"]);
    ns.enter();
    check_syn_flood(&mut server, [10, 77, 0], true);
}

#[test]
fn xdp_a_syn_flood_does_not_lock_a_real_client_out_of_two_workers() {
    let veth = Veth::with_queues(2);
    let mut server = veth.start(&["-t", "2", "-c", "64"]);
    veth.client.enter();
    // About 1,000 SYNs per worker: within each worker's budget, so no eviction is expected.
    check_syn_flood(&mut server, [10, 78, 0], false);
}

/// `-c 4`: four handshakes reset by the peer (the kernel answers memspin's SYN-ACK to a SYN
/// it never sent with RST), then four real connections: all four are served, a fifth is not.
#[test]
fn tap_handshakes_reset_by_the_peer_leave_no_slot_behind() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["-c", "4"]);
    ns.enter();
    let raw = RawTcp::new();
    let dst: SocketAddrV4 = TAP_SERVER.parse().unwrap();
    for i in 0..4u16 {
        raw.send(
            SocketAddrV4::new(TAP_HOST, 30_000 + i),
            dst,
            TcpControl::Syn,
            1000,
        )
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut open: Vec<TcpStream> = (0..4)
        .map(|i| {
            served(server.addr, Duration::from_secs(3))
                .unwrap_or_else(|| panic!("real connection {i} was not served"))
        })
        .collect();
    assert!(served(server.addr, Duration::from_secs(2)).is_none());
    for stream in &mut open {
        assert!(version_ok(stream));
    }
}

/// Sixteen client hosts (sixteen addresses on the kernel side of the TAP link), each with
/// its own connection, request after request at once: no request waits anything like a
/// second (an ARP exchange or smoltcp's one-second neighbour back-off).
#[test]
fn tap_sixteen_client_hosts_see_no_one_second_stalls() {
    let ns = Netns::new();
    let server = start_tap(&ns, &[]);
    let hosts: Vec<Ipv4Addr> = (0..16).map(|i| Ipv4Addr::new(10, 77, 0, 101 + i)).collect();
    for host in &hosts {
        let cidr = format!("{host}/24");
        let status = std::process::Command::new("ip")
            .args(["-n", &ns.name, "addr", "add", &cidr, "dev", TAP_IFACE])
            .status()
            .unwrap();
        assert!(status.success());
    }
    ns.enter();
    let dst: SocketAddrV4 = TAP_SERVER.parse().unwrap();
    let workers: Vec<_> = hosts
        .iter()
        .map(|&host| {
            let ns_path = format!("/var/run/netns/{}", ns.name);
            std::thread::spawn(move || {
                let file = std::fs::File::open(ns_path).unwrap();
                use std::os::fd::AsRawFd;
                // SAFETY: setns(2) on a valid namespace descriptor; only this thread moves.
                assert_eq!(
                    unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
                    0
                );
                let stream = connect_from(host, dst, Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("connect from {host}: {e}"));
                let mut client = client_on(stream);
                let key = format!("host-{host}");
                let mut worst = Duration::ZERO;
                let start = Instant::now();
                let mut requests = 0;
                while start.elapsed() < Duration::from_secs(4) {
                    let sent = Instant::now();
                    assert_eq!(
                        client.set(key.as_bytes(), b"v", 0).unwrap().status,
                        Status::NoError
                    );
                    assert_eq!(client.get(key.as_bytes()).unwrap().value, b"v");
                    worst = worst.max(sent.elapsed());
                    requests += 2;
                }
                (host, worst, requests)
            })
        })
        .collect();
    for worker in workers {
        let (host, worst, requests) = worker.join().unwrap();
        assert!(
            worst < Duration::from_millis(500),
            "{host}: a set/get pair took {worst:?} ({requests} requests)"
        );
        assert!(requests >= 20, "{host}: {requests} requests");
    }
    drop(server);
}

#[test]
fn tap_conn_limit_is_shared_by_two_workers() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["-t", "2", "-c", "32"]);
    ns.enter();
    check_shared_limit(server.addr, 32);
}

#[test]
fn xdp_conn_limit_is_shared_by_two_workers() {
    let veth = Veth::with_queues(2);
    let server = veth.start(&["-t", "2", "-c", "32"]);
    veth.client.enter();
    check_shared_limit(server.addr, 32);
}

#[test]
fn kernel_conn_limit_is_shared_by_two_workers() {
    let server = Server::start_kernel(&["-t", "2", "-c", "32"]);
    check_shared_limit(server.addr, 32);
}
