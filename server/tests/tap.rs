//! The TAP path over smoltcp, for real: each test makes its own network namespace, starts
//! memspin inside it on a TAP device, runs clients inside the same namespace, and removes
//! everything afterwards (also on failure). Needs root, as CI has.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::{
    Client, Netns, Server, TextClient, check_binary_safe_values_and_limit, check_many_connections,
    check_two_workers_under_load, memccapable, text_stat,
};

const SERVER: &str = support::TAP_SERVER;

fn start(ns: &Netns, extra: &[&str]) -> Server {
    Server::start_tap(ns, extra)
}

#[test]
fn memccapable_binary_passes_all_27() {
    let ns = Netns::new();
    let server = start(&ns, &[]);
    memccapable(Some(&ns), server.addr, "-b");
}

#[test]
fn binary_safe_values_and_the_item_limit() {
    let ns = Netns::new();
    let server = start(&ns, &[]);
    ns.enter();
    check_binary_safe_values_and_limit(server.addr);
}

#[test]
fn thousand_concurrent_connections_set_and_get() {
    let ns = Netns::new();
    let server = start(&ns, &[]);
    ns.enter();
    check_many_connections(server.addr, 1000);
}

#[test]
fn connection_over_the_limit_is_refused_and_the_others_kept() {
    let ns = Netns::new();
    let server = start(&ns, &["-c", "4"]);
    ns.enter();
    let mut kept: Vec<Client> = (0..4).map(|_| Client::connect(server.addr)).collect();
    for (i, client) in kept.iter_mut().enumerate() {
        let key = format!("k{i}");
        assert_eq!(
            client.set(key.as_bytes(), b"v", 0).unwrap().status,
            protocol::binary::Status::NoError
        );
    }
    let refused = std::net::TcpStream::connect_timeout(&server.addr, Duration::from_secs(5));
    assert!(refused.is_err(), "the fifth connection is refused");
    for (i, client) in kept.iter_mut().enumerate() {
        let key = format!("k{i}");
        assert_eq!(client.get(key.as_bytes()).unwrap().value, b"v");
    }
}

/// Clients that `quit` leave the server's side of each connection in TIME-WAIT: that must not
/// hold a slot, or with `-c 4` the fifth connection in ten seconds would be refused.
#[test]
fn connections_closed_by_quit_do_not_hold_slots() {
    let ns = Netns::new();
    let server = start(&ns, &["-c", "4"]);
    ns.enter();
    for i in 0..40 {
        let mut client = TextClient::connect(server.addr);
        let set = format!("set churn{i} 0 0 1\r\nx\r\n");
        assert_eq!(
            client.call(set.as_bytes()).unwrap(),
            b"STORED\r\n",
            "connection {i}"
        );
        client.send(b"quit\r\n").unwrap();
        assert_eq!(client.read_to_close().unwrap(), b"", "connection {i}");
    }
    let mut client = TextClient::connect(server.addr);
    assert_eq!(
        client.call(b"get churn0 churn39\r\n").unwrap(),
        b"VALUE churn0 0 1\r\nx\r\nVALUE churn39 0 1\r\nx\r\nEND\r\n"
    );
    assert_eq!(text_stat(server.addr, "rejected_connections"), Some(0));
}

#[test]
fn sigterm_exits_zero_and_removes_the_device() {
    let ns = Netns::new();
    let mut server = start(&ns, &[]);
    let link_exists = |ns: &Netns| {
        std::process::Command::new("ip")
            .args(["-n", &ns.name, "link", "show", "ms0"])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(link_exists(&ns));
    let (status, stderr) = server.stop();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "stderr:\n{stderr}");
    assert!(
        stderr.contains("STAT curr_connections"),
        "final stats:\n{stderr}"
    );
    assert!(!link_exists(&ns), "the TAP device memspin created is gone");
}

#[test]
fn the_ready_line_names_the_path() {
    let ns = Netns::new();
    let server = start(&ns, &[]);
    let addr: SocketAddr = SERVER.parse().unwrap();
    assert!(
        server.ready_line.contains("net tap"),
        "{}",
        server.ready_line
    );
    assert!(
        server.ready_line.contains(&addr.to_string()),
        "{}",
        server.ready_line
    );
}

#[test]
fn ten_thousand_concurrent_connections_on_one_worker() {
    let ns = Netns::new();
    let server = start(&ns, &["-c", "10100", "-m", "256"]);
    ns.enter();
    check_many_connections(server.addr, 10_000);
}

#[test]
fn two_workers_on_a_multi_queue_tap_verify_under_load() {
    let ns = Netns::new();
    let mut server = start(&ns, &["-t", "2"]);
    assert!(
        server.ready_line.contains("(2 queues)") && server.ready_line.contains("2 workers"),
        "{}",
        server.ready_line
    );
    memccapable(Some(&ns), server.addr, "-b");
    ns.enter();
    check_two_workers_under_load(&mut server);
}
