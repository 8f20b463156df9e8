//! Real Redis clients and frameworks against memspin's RESP port (`--resp-port`), over kernel
//! sockets (127.0.0.1) and TAP (a namespace of its own), each program in
//! `server/tests/clients/` checked first against a `redis-server` (Debian `redis-server`, a
//! free loopback port, persistence off), so its expectations are Redis's:
//!
//! - redis-py 8.2.0 (`redis_py.py`): `pipeline()` with its default MULTI/EXEC transaction,
//!   `scan_iter`, `from_url("redis://…/3")`, WATCH-based optimistic locking;
//! - Django 5.2.20 with django-redis 7.0.0 (`django_cache.py`): the cache API, its `incr`,
//!   `delete_pattern` and its lock, each a part of its own;
//! - ioredis 6.1.0 on Node (`ioredis.js`): a pipeline, `multi()`, WATCH, `scanStream` and
//!   database 2.
//!
//! The libraries are pinned in `clients/requirements.txt` and `clients/package.json` (with its
//! lock) and installed by `scripts/test.sh` under `target/clients/`. memspin runs one worker
//! here, and two in the `_with_two_workers` tests, where the clients' transactions and
//! `WATCH`es take keys of both workers. Needs root for TAP, as CI has.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::redis::RedisServer;
use support::{Netns, Server};

/// A client program: what it runs, and which arguments come after the server's host and port.
#[derive(Clone, Copy)]
enum Client {
    RedisPy,
    /// One part of `django_cache.py`.
    Django(&'static str),
    Ioredis,
}

/// Where `scripts/test.sh` installs the pinned libraries.
fn installed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/clients")
}

/// The client programs.
fn programs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The command line of `client` against `addr`, inside `netns` when given.
#[track_caller]
fn client_command(client: Client, netns: Option<&Netns>, addr: SocketAddr) -> Command {
    let (interpreter, script, part) = match client {
        Client::RedisPy => ("venv/bin/python", "redis_py.py", None),
        Client::Django(part) => ("venv/bin/python", "django_cache.py", Some(part)),
        Client::Ioredis => ("node", "ioredis.js", None),
    };
    let interpreter = if interpreter == "node" {
        let modules = installed().join("node/node_modules/ioredis");
        assert!(
            modules.exists(),
            "{} is missing: scripts/test.sh installs ioredis there",
            modules.display()
        );
        "node".to_string()
    } else {
        let python = installed().join(interpreter);
        assert!(
            python.exists(),
            "{} is missing: scripts/test.sh makes that venv",
            python.display()
        );
        python.display().to_string()
    };
    let mut cmd = match netns {
        Some(ns) => ns.command(&interpreter),
        None => Command::new(&interpreter),
    };
    cmd.env("NODE_PATH", installed().join("node/node_modules"))
        .arg(programs().join(script))
        .args([addr.ip().to_string(), addr.port().to_string()])
        .args(part);
    cmd
}

/// Runs `client` against `addr` (60 s at most): it must print `OK` last. Returns its output.
#[track_caller]
fn run(client: Client, netns: Option<&Netns>, addr: SocketAddr) -> String {
    let mut cmd = client_command(client, netns, addr);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait for the client").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("the client's output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && text.trim_end().ends_with("OK"),
        "{cmd:?} failed ({}):\n{text}",
        output.status
    );
    text
}

/// `client` against a `redis-server`.
fn against_redis(client: Client) {
    let redis = RedisServer::start();
    run(client, None, redis.addr);
}

/// `client` against memspin with `workers` on kernel sockets; memspin then stops cleanly.
fn against_kernel(client: Client, workers: &str) {
    let mut server = Server::start_kernel(&["--resp-port", "0", "-t", workers]);
    run(client, None, server.resp_addr());
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
}

/// `client` against memspin with one worker on TAP, in a namespace of its own; memspin then
/// stops cleanly.
fn against_tap(client: Client) {
    let ns = Netns::new();
    #[rustfmt::skip]
    let mut server = Server::start(
        Some(&ns),
        &[
            "--net", "tap", "--iface", "ms0", "--ip", "10.77.0.2/24", "--host-ip", "10.77.0.1/24",
            "--resp-port", "6379", "--idle", "park", "-t", "1",
        ],
        Some("10.77.0.2:11211".parse().unwrap()),
    );
    run(client, Some(&ns), "10.77.0.2:6379".parse().unwrap());
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
}

// ---- redis-py 8.2.0 ----

#[test]
fn redis_py_transactions_scan_url_db_and_watch_against_redis_server() {
    against_redis(Client::RedisPy);
}

#[test]
fn redis_py_transactions_scan_url_db_and_watch_over_kernel_sockets() {
    against_kernel(Client::RedisPy, "1");
}

#[test]
fn redis_py_transactions_scan_url_db_and_watch_over_tap() {
    against_tap(Client::RedisPy);
}

#[test]
fn redis_py_transactions_with_two_workers() {
    against_kernel(Client::RedisPy, "2");
}

// ---- Django 5.2.20 with django-redis 7.0.0 ----

#[test]
fn django_cache_api_against_redis_server() {
    against_redis(Client::Django("cache"));
}

#[test]
fn django_cache_api_over_kernel_sockets() {
    against_kernel(Client::Django("cache"), "1");
}

#[test]
fn django_cache_api_over_tap() {
    against_tap(Client::Django("cache"));
}

#[test]
fn django_cache_api_with_two_workers() {
    against_kernel(Client::Django("cache"), "2");
}

#[test]
fn django_incr_against_redis_server() {
    against_redis(Client::Django("incr"));
}

#[test]
#[ignore = "needs EVAL: django-redis runs incr/decr as a Lua script; on memspin's unknown \
            command error it falls back to TTL, GET and SET (not atomic), and incr of a \
            missing key raises TypeError, not ValueError"]
fn django_incr_over_kernel_sockets() {
    against_kernel(Client::Django("incr"), "1");
}

#[test]
fn django_delete_pattern_against_redis_server() {
    against_redis(Client::Django("delete_pattern"));
}

#[test]
fn django_delete_pattern_over_kernel_sockets() {
    against_kernel(Client::Django("delete_pattern"), "1");
}

#[test]
fn django_lock_against_redis_server() {
    against_redis(Client::Django("lock"));
}

#[test]
#[ignore = "needs EVALSHA: redis-py's Lock (django-redis's cache.lock) releases through a \
            Lua script, and memspin answers unknown command 'EVALSHA'"]
fn django_lock_over_kernel_sockets() {
    against_kernel(Client::Django("lock"), "1");
}

// ---- ioredis 6.1.0 ----

#[test]
fn ioredis_pipeline_multi_watch_scan_stream_and_db_against_redis_server() {
    against_redis(Client::Ioredis);
}

#[test]
fn ioredis_pipeline_multi_watch_scan_stream_and_db_over_kernel_sockets() {
    against_kernel(Client::Ioredis, "1");
}

#[test]
fn ioredis_pipeline_multi_watch_scan_stream_and_db_over_tap() {
    against_tap(Client::Ioredis);
}

#[test]
fn ioredis_multi_and_watch_with_two_workers() {
    against_kernel(Client::Ioredis, "2");
}
