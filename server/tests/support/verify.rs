//! `memspin-loadgen --verify` with a patient request timeout, for the tests that check values
//! under load (forwarding between workers, both families, routed paths). Every value read back
//! is verified, and every error, mismatch or lost value fails the run.
//!
//! Why 5 s and not loadgen's default second: a run keeps `connections × 8` requests in flight
//! (512 for the two-worker tests), so each waits for the server to answer those queued before
//! it (Little's law: wait = in flight / rate). A debug build sharing two vCPUs with the
//! generator, the kernel's network work and the other tests of the suite can drop to a few
//! hundred requests a second, and the generator itself can go unscheduled for more than a
//! second; a request that waits a second then is the machine, not the server. How long the
//! server makes a client wait when a CPU is free is checked where it is the question: the
//! fairness of a connection's turn (`worker::turn`'s unit tests), a flooding client beside a
//! victim (`abuse_memory.rs`), a frame arriving while a worker sleeps (`idle.rs`). A server
//! that stalls a request for 5 s still fails here.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Loadgen `--verify` runs (3 s each, `connections` connections, 8 in flight each, a 5 s
/// request timeout) against `addr` until at least `min_ops` operations completed, bounded at
/// 60 s: every run must report zero mismatches, lost values and errors. Returns the
/// operations completed.
#[track_caller]
pub fn check_verify_patiently(
    addr: SocketAddr,
    protocol: loadgen::client::Protocol,
    connections: usize,
    min_ops: u64,
) -> u64 {
    let started = Instant::now();
    let mut total = 0;
    let mut round = 0;
    while total < min_ops && started.elapsed() < Duration::from_secs(60) {
        round += 1;
        let config = loadgen::Config {
            servers: vec![addr],
            protocol,
            connections,
            threads: 1,
            pipeline: 8,
            duration: Duration::from_secs(3),
            warmup: Duration::from_millis(200),
            timeout: Duration::from_secs(5),
            keys: 20_000,
            key_size: 16,
            value_min: 32,
            value_max: 2_000,
            get_ratio: 0.5,
            verify: true,
            progress: false,
            seed: round,
            idle: loadgen::config::Idle::Sleep,
            ..loadgen::Config::default()
        };
        let report = loadgen::run(&config).expect("loadgen run");
        let table = report.table();
        assert_eq!(report.errors.total(), 0, "round {round}:\n{table}");
        assert_eq!(report.verify.mismatches, 0, "round {round}:\n{table}");
        assert_eq!(report.verify.lost, 0, "round {round}:\n{table}");
        assert!(report.verify.checked > 0, "round {round}:\n{table}");
        total += report.completed();
    }
    assert!(
        total >= min_ops,
        "only {total} operations in {round} rounds ({:?})",
        started.elapsed()
    );
    total
}
