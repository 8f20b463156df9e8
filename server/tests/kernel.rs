//! The kernel-socket path (`--net kernel`) on 127.0.0.1: conformance, limits, many clients,
//! shutdown. No root needed.

mod support;

use support::{
    Server, check_binary_safe_values_and_limit, check_many_connections,
    check_two_workers_under_load, memccapable,
};

#[test]
fn memccapable_binary_passes_all_27() {
    let server = Server::start_kernel(&[]);
    memccapable(None, server.addr, "-b");
}

#[test]
fn binary_safe_values_and_the_item_limit() {
    let server = Server::start_kernel(&[]);
    check_binary_safe_values_and_limit(server.addr);
}

#[test]
fn thousand_concurrent_connections_set_and_get() {
    let server = Server::start_kernel(&["-c", "1100"]);
    check_many_connections(server.addr, 1000);
}

#[test]
fn sigterm_exits_cleanly_with_final_stats() {
    let mut server = Server::start_kernel(&[]);
    let mut client = support::Client::connect(server.addr);
    client.set(b"k", b"v", 0).unwrap();
    let (status, stderr) = server.stop();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "stderr:\n{stderr}");
    assert!(stderr.contains("STAT curr_items 1"), "stderr:\n{stderr}");
}

#[test]
fn two_workers_forward_and_verify_under_load() {
    let mut server = Server::start_kernel(&["-t", "2", "-c", "256"]);
    assert!(
        server.ready_line.contains("2 workers"),
        "{}",
        server.ready_line
    );
    memccapable(None, server.addr, "-b");
    memccapable(None, server.addr, "-a");
    check_two_workers_under_load(&mut server);
}

// Regression: `--gateway` with `--net kernel` was silently ignored (the kernel routes by the
// host's routing table): memspin now refuses to start, saying why.
#[test]
fn a_gateway_with_kernel_sockets_is_refused_at_start() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_memspin"))
        .args(["--net", "kernel", "-l", "127.0.0.1", "-p", "0"])
        .args(["--gateway", "10.77.0.254"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run memspin");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("memspin started with --gateway on kernel sockets");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "never ready");
    assert!(
        stderr.contains("memspin: --gateway 10.77.0.254 is for --net tap and xdp")
            && stderr.contains("host's routes"),
        "{stderr}"
    );
}
