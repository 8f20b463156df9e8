//! The kernel-socket path (`--net kernel`) on 127.0.0.1: conformance, limits, many clients,
//! shutdown. No root needed.

mod support;

use support::{
    Server, check_binary_safe_values_and_limit, check_many_connections,
    check_two_workers_under_load, memccapable,
};

fn start(extra: &[&str]) -> Server {
    let mut args = vec![
        "--net",
        "kernel",
        "-l",
        "127.0.0.1",
        "-p",
        "0",
        "--idle",
        "park",
    ];
    args.extend_from_slice(extra);
    Server::start(None, &args, None)
}

#[test]
fn memccapable_binary_passes_all_27() {
    let server = start(&[]);
    memccapable(None, server.addr, "-b");
}

#[test]
fn binary_safe_values_and_the_item_limit() {
    let server = start(&[]);
    check_binary_safe_values_and_limit(server.addr);
}

#[test]
fn thousand_concurrent_connections_set_and_get() {
    let server = start(&["-c", "1100"]);
    check_many_connections(server.addr, 1000);
}

#[test]
fn sigterm_exits_cleanly_with_final_stats() {
    let mut server = start(&[]);
    let mut client = support::Client::connect(server.addr);
    client.set(b"k", b"v", 0).unwrap();
    let (status, stderr) = server.stop();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "stderr:\n{stderr}");
    assert!(stderr.contains("STAT curr_items 1"), "stderr:\n{stderr}");
}

#[test]
fn two_workers_forward_and_verify_under_load() {
    let mut server = start(&["-t", "2", "-c", "256"]);
    assert!(
        server.ready_line.contains("2 workers"),
        "{}",
        server.ready_line
    );
    memccapable(None, server.addr, "-b");
    memccapable(None, server.addr, "-a");
    check_two_workers_under_load(&mut server);
}
