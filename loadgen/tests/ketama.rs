//! `--distribution ketama` against pylibmc: 10,000 keys written through pylibmc with
//! `behaviors={"ketama": True}` to three memcached servers on 127.0.0.1 are found, server by
//! server, exactly where this generator's ketama places them; then a loadgen run with
//! `--distribution ketama` and `--prefill` over the same servers puts every key where pylibmc
//! finds it.
//!
//! Needs Debian's `python3-pylibmc` (for `/usr/bin/python3`; `$PYTHON` to use another) and
//! memcached (`/usr/bin/memcached` or `$MEMCACHED`); the test fails, it does not skip, when
//! either is missing.

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use loadgen::placement::{Continuum, Distribution};
use loadgen::workload::Keyspace;
use loadgen::{Config, run};

mod support;

use support::Memcached;

/// Writes `keys` through pylibmc (ketama) to `servers`, then asks each server alone which of
/// them it holds; returns the server index of every key (-1: nowhere).
const PYLIBMC_PLACEMENT: &str = r#"
import json, sys
import pylibmc
servers, keys, mode = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
if mode == "write":
    mc = pylibmc.Client(servers, behaviors={"ketama": True})
    b = mc.behaviors
    assert b["ketama"] == 1 and b["ketama_weighted"] == 0 and b["hash"] == "default", b
    for k in keys:
        mc.set(k, "x")
place = {}
for i, s in enumerate(servers):
    for k in pylibmc.Client([s]).get_multi(keys):
        place[k] = i
print(json.dumps([place.get(k, -1) for k in keys]))
"#;

fn pylibmc(servers: &[String], keys: &[String], mode: &str) -> Vec<i64> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "/usr/bin/python3".to_string());
    let out = Command::new(&python)
        .args([
            "-c",
            PYLIBMC_PLACEMENT,
            &serde_json::to_string(servers).unwrap(),
            &serde_json::to_string(keys).unwrap(),
            mode,
        ])
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(
        out.status.success(),
        "{python} with pylibmc failed (apt-get install python3-pylibmc):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON list")
}

fn flush(addr: SocketAddr) {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"flush_all\r\n").unwrap();
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"OK\r\n");
}

#[test]
fn ketama_places_10000_keys_over_3_servers_where_pylibmc_does() {
    let servers: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let names: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    let keyspace = Keyspace::new(10_000, 10).unwrap();
    let keys: Vec<String> = (0..10_000)
        .map(|i| String::from_utf8(keyspace.key(i).to_vec()).unwrap())
        .collect();

    // pylibmc writes; every key is on exactly the server the continuum names.
    let theirs = pylibmc(&names, &keys, "write");
    let continuum = Continuum::ketama(&names);
    let ours: Vec<i64> = keys
        .iter()
        .map(|k| continuum.server_of(k.as_bytes()) as i64)
        .collect();
    let differ = theirs.iter().zip(&ours).filter(|(a, b)| a != b).count();
    assert_eq!(differ, 0, "{differ} of 10,000 keys placed differently");
    let per_server: Vec<usize> = (0..3)
        .map(|s| ours.iter().filter(|&&x| x == s).count())
        .collect();
    assert!(per_server.iter().all(|&n| n > 1_000), "{per_server:?}");

    // The generator writes (prefill, ketama) into emptied servers; pylibmc finds every key
    // where it would have put it.
    for s in &servers {
        flush(s.addr);
    }
    let cfg = Config {
        servers: servers.iter().map(|s| s.addr).collect(),
        server_names: names.clone(),
        distribution: Distribution::Ketama,
        connections: 6,
        keys: 10_000,
        key_size: 10,
        prefill: true,
        get_ratio: 1.0,
        duration: Duration::from_millis(300),
        warmup: Duration::ZERO,
        idle: loadgen::config::Idle::Sleep,
        progress: false,
        ..Config::default()
    };
    let r = run(&cfg).unwrap();
    assert_eq!(r.prefill.map(|p| (p.keys, p.errors)), Some((10_000, 0)));
    // Every GET of the run found its key on the server its connection talks to.
    assert_eq!(r.misses(), 0, "{}", r.table());
    assert!(r.hits() > 100, "{}", r.table());
    let found = pylibmc(&names, &keys, "read");
    assert_eq!(
        found, theirs,
        "keys written by the generator are where pylibmc looks"
    );
}
