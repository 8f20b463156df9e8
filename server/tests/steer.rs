//! Steering on the kernel path: memspin `-t 2` tells each connection its worker (`stats
//! worker`, binary STAT "worker", `worker=` in RESP's CLIENT INFO), and `memspin-loadgen
//! --steer` keeps connections on both workers and sends each key only on a connection of its
//! owner: with `--verify` over binary, text, meta and RESP every value checks and memspin's
//! `memspin_forwarded` counter does not move; the same run without `--steer` moves it. A RESP
//! connection on database 3 is forwarded nothing for the keys its worker owns by the key as
//! sent (the database prefix is not hashed).

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use loadgen::client::Protocol;
use support::{Server, TextClient, text_stat};

/// A short `--verify` run against `addr` with `connections` connections over 2 threads; fails
/// on any error, mismatch or lost value. Returns the report.
#[track_caller]
fn verified_run(
    addr: SocketAddr,
    protocol: Protocol,
    connections: usize,
    steer: bool,
) -> loadgen::Report {
    let config = loadgen::Config {
        servers: vec![addr],
        protocol,
        connections,
        threads: 2,
        pipeline: 4,
        duration: Duration::from_secs(1),
        warmup: Duration::from_millis(100),
        // Patient, as support::verify explains: a debug server sharing two vCPUs.
        timeout: Duration::from_secs(5),
        keys: 4_000,
        key_size: 16,
        value_min: 32,
        value_max: 400,
        get_ratio: 0.5,
        verify: true,
        steer,
        progress: false,
        idle: loadgen::config::Idle::Sleep,
        ..loadgen::Config::default()
    };
    let report = loadgen::run(&config).expect("loadgen run");
    let table = report.table();
    assert_eq!(report.errors.total(), 0, "{protocol:?}:\n{table}");
    assert_eq!(report.verify.mismatches, 0, "{protocol:?}:\n{table}");
    assert_eq!(report.verify.lost, 0, "{protocol:?}:\n{table}");
    assert!(report.verify.checked > 0, "{protocol:?}:\n{table}");
    report
}

fn forwarded(addr: SocketAddr) -> u64 {
    text_stat(addr, "memspin_forwarded").expect("STAT memspin_forwarded")
}

#[test]
fn steered_runs_verify_every_value_and_are_never_forwarded() {
    let mut server = Server::start_kernel(&["-t", "2", "--resp-port", "0"]);
    let (addr, resp) = (server.addr, server.resp_addr());
    let reply = TextClient::connect(addr).call(b"stats worker\r\n").unwrap();
    let reply = String::from_utf8(reply).unwrap();
    assert!(reply.contains("STAT workers 2\r\n"), "{reply}");
    assert!(
        reply.contains(&format!("STAT owner_hash {}\r\n", owner::OWNER_HASH_NAME)),
        "{reply}"
    );
    for (protocol, to) in [
        (Protocol::Binary, addr),
        (Protocol::Text, addr),
        (Protocol::Meta, addr),
        (Protocol::Resp, resp),
    ] {
        let before = forwarded(addr);
        let report = verified_run(to, protocol, 8, true);
        assert_eq!(
            report.steer_connections,
            Some(vec![4, 4]),
            "{protocol:?}: connections per worker"
        );
        assert_eq!(
            forwarded(addr),
            before,
            "{protocol:?}: steered, yet forwarded"
        );
    }
    // The same workload unsteered: about half the keys are the other worker's.
    let before = forwarded(addr);
    let report = verified_run(addr, Protocol::Binary, 8, false);
    assert_eq!(report.steer_connections, None);
    assert!(
        forwarded(addr) > before,
        "an unsteered run was never forwarded"
    );
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
}

#[test]
fn each_connection_learns_its_worker_in_every_protocol() {
    use loadgen::client::steer::probe;
    let mut server = Server::start_kernel(&["-t", "2", "--resp-port", "0"]);
    let (addr, resp) = (server.addr, server.resp_addr());
    let mut seen = [false; 2];
    // SO_REUSEPORT spreads connections by a hash of their addresses: 64 tries find both
    // workers unless the hash is broken (a chance of 2^-63 otherwise).
    for i in 0..64 {
        let (to, protocol) = match i % 3 {
            0 => (addr, Protocol::Binary),
            1 => (addr, Protocol::Text),
            _ => (resp, Protocol::Resp),
        };
        let mut stream = std::net::TcpStream::connect(to).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let info = probe(&mut stream, protocol).unwrap();
        assert!(info.worker < 2, "{info:?}");
        if protocol != Protocol::Resp {
            assert_eq!(info.workers, Some(2));
        }
        seen[info.worker] = true;
    }
    assert_eq!(seen, [true, true]);
    // Per worker, the counter is in `stats workers` too.
    let reply = TextClient::connect(addr)
        .call(b"stats workers\r\n")
        .unwrap();
    let reply = String::from_utf8(reply).unwrap();
    assert!(reply.contains("STAT worker:0:forwarded "), "{reply}");
    assert!(reply.contains("STAT worker:1:forwarded "), "{reply}");
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
}

#[test]
fn a_numbered_resp_database_hashes_the_key_as_sent() {
    use std::io::{BufRead, BufReader, Write};
    let mut server = Server::start_kernel(&["-t", "2", "--resp-port", "0"]);
    let (addr, resp) = (server.addr, server.resp_addr());
    let mut stream = std::net::TcpStream::connect(resp).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let worker = loadgen::client::steer::probe(&mut stream, Protocol::Resp)
        .unwrap()
        .worker;
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut call = |args: &[&[u8]]| -> String {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            request.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            request.extend_from_slice(a);
            request.extend_from_slice(b"\r\n");
        }
        stream.write_all(&request).unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        line
    };
    assert_eq!(call(&[b"SELECT", b"3"]), "+OK\r\n");
    let keys: Vec<String> = (0..200).map(|i| format!("db3:{i}")).collect();
    let (mine, theirs): (Vec<&String>, Vec<&String>) = keys
        .iter()
        .partition(|k| owner::owner_of(k.as_bytes(), 2) == worker);
    let before = forwarded(addr);
    for key in &mine {
        assert_eq!(call(&[b"SET", key.as_bytes(), b"v"]), "+OK\r\n");
    }
    // The owner of the key as sent is this connection's worker: nothing was forwarded.
    assert_eq!(
        forwarded(addr),
        before,
        "keys of worker {worker} on database 3"
    );
    for key in &theirs[..10] {
        assert_eq!(call(&[b"SET", key.as_bytes(), b"v"]), "+OK\r\n");
    }
    assert_eq!(forwarded(addr), before + 10, "the other worker's keys");
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
}
