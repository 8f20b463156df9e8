//! The AF_XDP path for real: each test makes two network namespaces joined by a veth pair —
//! the client end (10.78.0.1/24, transmit checksum offload off) in one, the end memspin
//! attaches its XDP program and AF_XDP socket to in the other — runs memspin serving
//! 10.78.0.2 in the second and clients in the first, and removes both namespaces (and so
//! the pair) afterwards, also on failure. Needs root, as CI has.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use protocol::binary::Status;
use support::{
    Client, Netns, Server, check_binary_safe_values_and_limit, check_many_connections,
    check_two_workers_under_load, memccapable, raise_fd_limit,
};

const SERVER: &str = "10.78.0.2:11211";
const CLIENT_IFACE: &str = "msx0";
const SERVER_IFACE: &str = "msx1";

/// Two namespaces and the veth pair between them.
struct Veth {
    client: Netns,
    server: Netns,
}

#[track_caller]
fn run(program: &str, args: &[&str]) {
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
    fn new() -> Veth {
        Veth::with_queues(1)
    }

    /// The pair with `queues` receive and transmit queues on each end.
    #[track_caller]
    fn with_queues(queues: usize) -> Veth {
        let queues = queues.to_string();
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
        veth
    }

    fn server_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
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
    fn start(&self, extra: &[&str]) -> Server {
        Server::start(
            Some(&self.server),
            &Self::server_args(extra),
            Some(SERVER.parse().unwrap()),
        )
    }

    /// `ip link show` of memspin's end.
    fn server_link(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.server.name, "link", "show", SERVER_IFACE])
            .output()
            .expect("ip link show");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn has_xdp(&self) -> bool {
        // `ip link` prints `xdp` (native) or `xdpgeneric` with the program id.
        self.server_link().contains(" xdp")
    }
}

#[test]
fn memccapable_binary_passes_all_27() {
    let veth = Veth::new();
    let server = veth.start(&[]);
    memccapable(Some(&veth.client), server.addr, "-b");
}

#[test]
fn binary_safe_values_and_the_item_limit() {
    let veth = Veth::new();
    let server = veth.start(&[]);
    veth.client.enter();
    check_binary_safe_values_and_limit(server.addr);
}

#[test]
fn thousand_concurrent_connections_set_and_get() {
    let veth = Veth::new();
    let server = veth.start(&[]);
    veth.client.enter();
    check_many_connections(server.addr, 1000);
}

#[test]
fn sigterm_exits_zero_and_detaches_the_program() {
    let veth = Veth::new();
    assert!(!veth.has_xdp());
    let mut server = veth.start(&[]);
    let line = &server.ready_line;
    for part in ["net xdp", "native mode", "copy mode", SERVER] {
        assert!(line.contains(part), "{part:?} in {line}");
    }
    assert!(veth.has_xdp(), "{}", veth.server_link());
    {
        veth.client.enter();
        let mut client = Client::connect(server.addr);
        assert_eq!(client.set(b"k", b"v", 0).unwrap().status, Status::NoError);
        assert_eq!(client.get(b"k").unwrap().value, b"v");
    }
    let (status, stderr) = server.stop();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "stderr:\n{stderr}");
    assert!(stderr.contains("STAT curr_connections"), "{stderr}");
    assert!(stderr.contains("bogus_completions"), "{stderr}");
    assert!(!veth.has_xdp(), "detached:\n{}", veth.server_link());
}

#[test]
fn generic_mode_serves_and_detaches() {
    let veth = Veth::new();
    let mut server = veth.start(&["--xdp-mode", "generic"]);
    assert!(
        server.ready_line.contains("generic mode"),
        "{}",
        server.ready_line
    );
    assert!(veth.server_link().contains("xdpgeneric"));
    {
        veth.client.enter();
        let mut client = Client::connect(server.addr);
        assert_eq!(client.set(b"g", b"1", 0).unwrap().status, Status::NoError);
        assert_eq!(client.get(b"g").unwrap().value, b"1");
    }
    let (status, stderr) = server.stop();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "stderr:\n{stderr}");
    assert!(!veth.has_xdp());
}

/// The program id in a ready line (`program id N`).
fn program_id(ready_line: &str) -> u32 {
    ready_line
        .split("program id ")
        .nth(1)
        .and_then(|rest| rest.split([',', ' ']).next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no program id in {ready_line}"))
}

#[test]
fn a_restart_after_sigkill_replaces_the_stale_program() {
    let veth = Veth::new();
    // Started by hand, so it can be killed with SIGKILL (no chance to detach).
    let mut child = veth
        .server
        .command(env!("CARGO_BIN_EXE_memspin"))
        .args(Veth::server_args(&[]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn memspin");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("ready") {
                let _ = tx.send(line);
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30));
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let first = first.expect("the first run became ready");
    let stale_id = program_id(&first);
    let link = veth.server_link();
    assert!(
        link.contains(&format!("prog/xdp id {stale_id}")),
        "the killed run's program stays:\n{link}"
    );

    let mut server = veth.start(&[]);
    let line = server.ready_line.clone();
    assert!(
        line.contains(&format!(
            "replaced a stale memspin program (id {stale_id}, native mode)"
        )),
        "{line}"
    );
    let new_id = program_id(&line);
    assert_ne!(new_id, stale_id);
    assert!(
        veth.server_link()
            .contains(&format!("prog/xdp id {new_id}"))
    );
    {
        veth.client.enter();
        let mut client = Client::connect(server.addr);
        assert_eq!(client.set(b"k", b"v", 0).unwrap().status, Status::NoError);
        assert_eq!(client.get(b"k").unwrap().value, b"v");
    }
    let (status, stderr) = server.stop();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "stderr:\n{stderr}");
    assert!(!veth.has_xdp(), "{}", veth.server_link());
}

/// 3,000 connections, each with requests in flight, send more frames at once than the
/// smallest UMEM holds (2,048 receive frames): the receive half grows with `-c`, so the kernel
/// never finds the fill ring empty and drops nothing.
#[test]
fn three_thousand_busy_connections_drop_no_frame() {
    let veth = Veth::with_queues(1);
    let mut server = veth.start(&["-c", "3100"]);
    veth.client.enter();
    raise_fd_limit();
    let config = loadgen::Config {
        servers: vec![server.addr],
        connections: 3000,
        threads: 1,
        pipeline: 1,
        duration: Duration::from_secs(3),
        warmup: Duration::from_millis(500),
        keys: 5_000,
        verify: true,
        progress: false,
        ..loadgen::Config::default()
    };
    let report = loadgen::run(&config).expect("loadgen run");
    assert_eq!(report.errors.total(), 0, "{}", report.table());
    assert_eq!(report.verify.mismatches, 0, "{}", report.table());
    assert!(report.completed() >= 3000, "{}", report.table());
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
    assert!(
        stderr.contains("rx_fill_ring_empty_descs: 0,"),
        "the kernel found the fill ring empty:\n{stderr}"
    );
}

#[test]
fn two_workers_on_two_queues_verify_under_load() {
    let veth = Veth::with_queues(2);
    let mut server = veth.start(&["-t", "2"]);
    assert!(
        server.ready_line.contains("queues 0-1") && server.ready_line.contains("2 workers"),
        "{}",
        server.ready_line
    );
    memccapable(Some(&veth.client), server.addr, "-b");
    veth.client.enter();
    check_two_workers_under_load(&mut server);
    assert!(!veth.has_xdp(), "the program is detached");
}
