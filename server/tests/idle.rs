//! The adaptive idle policy for real: memspin over TAP (its default there), over AF_XDP and
//! with two workers (a forwarded request wakes its owner through the mesh's eventfd) serves
//! correctly, gives its core back while idle or lightly loaded, and a frame that arrives while
//! it sleeps wakes it at once rather than at the end of its longest sleep (100 ms). Each test
//! makes its own namespaces and removes them (needs root, as CI has).

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::veth::{SERVER_IFACE, Veth};
use support::{Client, Netns, Server};

use support::{TAP, TAP_SERVER, Tap};

/// memspin over TAP without `--idle`: the default policy.
fn start_tap(ns: &Netns, extra: &[&str]) -> Server {
    let mut args = Tap { idle: None, ..TAP }.args();
    args.extend_from_slice(extra);
    Server::start(Some(ns), &args, Some(TAP_SERVER.parse().unwrap()))
}

/// Nanoseconds all of `pid`'s threads have run on a CPU.
fn cpu_ns(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|task| {
            let path = task.ok()?.path().join("schedstat");
            let text = std::fs::read_to_string(path).ok()?;
            text.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// The share of one CPU `pid` used while `f` ran.
fn cpu_share_during(pid: u32, f: impl FnOnce()) -> f64 {
    let (cpu0, wall0) = (cpu_ns(pid), Instant::now());
    f();
    let (cpu1, wall) = (cpu_ns(pid), wall0.elapsed());
    (cpu1 - cpu0) as f64 / wall.as_nanos() as f64
}

/// Round trips of GETs, each after `pause` (long enough for the worker to be asleep): the
/// median, and every value checked.
#[track_caller]
fn round_trips_after_pauses(client: &mut Client, keys: &[Vec<u8>], pause: Duration) -> Duration {
    let mut times = Vec::new();
    for round in 0..15 {
        for key in keys {
            std::thread::sleep(pause);
            let start = Instant::now();
            let reply = client.get(key).unwrap();
            times.push(start.elapsed());
            assert_eq!(reply.value, value_for(key), "round {round}");
        }
    }
    times.sort();
    times[times.len() / 2]
}

fn value_for(key: &[u8]) -> Vec<u8> {
    [b"value-of-".as_slice(), key].concat()
}

/// Sets `keys`, checks a burst of requests is served, and that the worker sleeps when idle and
/// wakes promptly for a frame.
#[track_caller]
fn serves_sleeps_and_wakes(server: &Server, keys: &[Vec<u8>]) {
    let mut client = Client::connect(server.addr);
    for key in keys {
        assert_eq!(
            client.set(key, &value_for(key), 0).unwrap().status,
            protocol::binary::Status::NoError
        );
    }
    // A busy stretch: every reply right.
    for i in 0..2_000 {
        let key = &keys[i % keys.len()];
        assert_eq!(client.get(key).unwrap().value, value_for(key));
    }
    let pid = server.pid().expect("running");
    // Idle: the worker sleeps (a spinning worker would use most of a CPU, however shared).
    let idle = cpu_share_during(pid, || std::thread::sleep(Duration::from_millis(1_000)));
    assert!(idle < 0.10, "idle memspin used {idle:.2} of a CPU");
    // Asleep, a frame wakes it at once: a worker that woke only at the end of its longest
    // sleep (100 ms) would answer in 50 ms on average after a 150 ms pause.
    let median = round_trips_after_pauses(&mut client, keys, Duration::from_millis(150));
    assert!(
        median < Duration::from_millis(15),
        "median round trip after a pause: {median:?}"
    );
    // Lightly loaded (a request every millisecond or so), it sleeps between requests.
    let light = cpu_share_during(pid, || {
        for i in 0..1_000 {
            std::thread::sleep(Duration::from_micros(1_000));
            let key = &keys[i % keys.len()];
            assert_eq!(client.get(key).unwrap().value, value_for(key));
        }
    });
    assert!(
        light < 0.30,
        "lightly loaded memspin used {light:.2} of a CPU"
    );
}

fn keys(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("idle-key-{i}").into_bytes())
        .collect()
}

#[test]
fn tap_defaults_to_adaptive_and_sleeps_between_requests() {
    let ns = Netns::new();
    let mut server = start_tap(&ns, &["--cpus", "0"]);
    assert!(
        server.ready_line.contains("idle Adaptive"),
        "{}",
        server.ready_line
    );
    ns.enter();
    serves_sleeps_and_wakes(&server, &keys(4));
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
    assert!(
        stderr.contains("idle Adaptive:"),
        "the exit report: {stderr}"
    );
}

#[test]
fn two_workers_wake_each_other_for_forwarded_requests() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["-t", "2", "--idle", "adaptive"]);
    ns.enter();
    // Enough keys that both workers own some: every connection forwards about half of its
    // requests, so a sleeping owner must be woken through its eventfd.
    serves_sleeps_and_wakes(&server, &keys(8));
}

#[test]
fn xdp_with_adaptive_sleeps_and_wakes_on_the_ring() {
    let veth = Veth::new();
    let server = Server::start(
        Some(&veth.server),
        &[
            "--net",
            "xdp",
            "--iface",
            SERVER_IFACE,
            "--ip",
            "10.78.0.2/24",
            "--idle",
            "adaptive",
        ],
        Some(support::veth::SERVER.parse::<SocketAddr>().unwrap()),
    );
    assert!(server.ready_line.contains("idle Adaptive"));
    veth.client.enter();
    serves_sleeps_and_wakes(&server, &keys(4));
}
