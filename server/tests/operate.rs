//! Operating memspin like memcached, end to end over TAP (inside a network namespace) and
//! kernel sockets (127.0.0.1): memcached's own `memcached-tool` (`display`, `stats`,
//! `settings`, `sizes`, `dump`) completes and reads what memcached's would; real clients
//! (pymemcache, pylibmc text and binary) see no stale value after an oversized set; `watch`
//! streams another connection's set and get in memcached's line format; `stats latency`
//! counts every request with monotonic percentiles; `stats reset` restarts the counters;
//! `-vv` logs one event per line; `-M` refuses stores when memory is full; `shutdown` needs
//! `-A`; the packet path's counters are in `stats`.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::abuse::start_tap;
use support::veth::Veth;
use support::{Memcached, Netns, Server, TextClient};

/// Where Debian's `memcached` package installs memcached-tool.
const MEMCACHED_TOOL: &str = "/usr/share/memcached/scripts/memcached-tool";

/// Runs `program args` (inside `ns` when given) with a deadline; returns its stdout.
#[track_caller]
fn run_within(ns: Option<&Netns>, program: &str, args: &[&str], limit: Duration) -> String {
    let mut cmd = match ns {
        Some(ns) => ns.command(program),
        None => Command::new(program),
    };
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut out = String::new();
            let mut err = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(
                status.success(),
                "{program} {args:?}: {status}\n{out}\n{err}"
            );
            return out;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{program} {args:?} did not complete within {limit:?} (hung waiting for END?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stores a few items as the tools will see them: a prefixed key, one needing URI encoding, one
/// with flags, one binary value.
fn populate(addr: SocketAddr) {
    let mut c = TextClient::connect(addr);
    let reply = c
        .call(
            b"set user:1 5 0 3\r\nabc\r\nset plain 0 0 2\r\nhi\r\nset sp%ce 7 0 4\r\nab\x01z\r\n\
              set n:2 0 0 5\r\nhello\r\n",
        )
        .unwrap();
    assert_eq!(reply, b"STORED\r\n".repeat(4));
}

/// The `add` records memcached-tool `dump` printed, sorted.
fn dump_records(dump: &str) -> BTreeSet<String> {
    let mut records = BTreeSet::new();
    let mut lines = dump.split("\r\n");
    while let Some(header) = lines.next() {
        if header.starts_with("add ") {
            let value = lines.next().unwrap_or_default();
            records.insert(format!("{header} / {}", value.escape_default()));
        }
    }
    records
}

/// Every memcached-tool mode completes against `addr` and reports the items `populate` stored
/// (`stats sizes` too with `sizes`: stock memcached leaves it off).
#[track_caller]
fn check_memcached_tool(ns: Option<&Netns>, addr: SocketAddr, sizes: bool) -> BTreeSet<String> {
    let target = addr.to_string();
    let limit = Duration::from_secs(30);
    let tool = |mode: &str| run_within(ns, "perl", &[MEMCACHED_TOOL, &target, mode], limit);
    let display = tool("display");
    let counted: u64 = display
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(4)?.parse::<u64>().ok())
        .sum();
    assert_eq!(counted, 4, "the Count column:\n{display}");
    let stats = tool("stats");
    for name in [
        "curr_items",
        "cmd_set",
        "rusage_user",
        "max_connections",
        "store_too_large",
    ] {
        assert!(stats.contains(name), "{name} in stats:\n{stats}");
    }
    let settings = tool("settings");
    for name in [
        "item_size_max",
        "tcpport",
        "maxconns",
        "domain_socket",
        "flush_enabled",
    ] {
        assert!(settings.contains(name), "{name} in settings:\n{settings}");
    }
    let listed = tool("sizes");
    if sizes {
        let counted: u64 = listed
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        assert_eq!(counted, 4, "sizes:\n{listed}");
    }
    let records = dump_records(&tool("dump"));
    assert_eq!(records.len(), 4, "{records:?}");
    records
}

#[test]
fn kernel_memcached_tool_reads_memspin_as_it_reads_memcached() {
    let server = Server::start_kernel(&["-t", "2"]);
    populate(server.addr);
    let ours = check_memcached_tool(None, server.addr, true);
    // The same items in a stock memcached dump to the same records.
    let memcached = Memcached::start();
    populate(memcached.addr);
    let theirs = check_memcached_tool(None, memcached.addr, false);
    assert_eq!(ours, theirs);
}

#[test]
fn tap_memcached_tool_completes() {
    let ns = Netns::new();
    let server = start_tap(&ns, &[]);
    ns.enter();
    populate(server.addr);
    check_memcached_tool(Some(&ns), server.addr, true);
}

/// A store of 1.5 MiB and one of 2 MiB (past twice `-I`) over an old value: through
/// pymemcache, and pylibmc's text and binary protocols; the old value must be gone.
const STALE_SCRIPT: &str = r#"
import sys
host, port = sys.argv[1], int(sys.argv[2])
from pymemcache.client.base import Client
import pylibmc
failures = []
for size in (3 * 512 * 1024, 2 * 1024 * 1024):
    big = b"x" * size
    c = Client((host, port), connect_timeout=5, timeout=5)
    c.set("pm%d" % size, b"old", noreply=False)
    try:
        c.set("pm%d" % size, big, noreply=False)
        failures.append("pymemcache stored %d bytes" % size)
    except Exception as e:
        if "too large" not in str(e):
            failures.append("pymemcache %d: %r" % (size, e))
    got = c.get("pm%d" % size)
    if got is not None:
        failures.append("pymemcache %d: stale %r" % (size, got))
    for binary in (False, True):
        m = pylibmc.Client(["%s:%d" % (host, port)], binary=binary)
        key = "lm%d-%d" % (binary, size)
        m.set(key, b"old")
        try:
            m.set(key, big)
            failures.append("pylibmc binary=%s stored %d bytes" % (binary, size))
        except pylibmc.TooBig:
            pass
        except Exception as e:
            failures.append("pylibmc binary=%s %d: %r" % (binary, size, e))
        got = m.get(key)
        if got is not None:
            failures.append("pylibmc binary=%s %d: stale %r" % (binary, size, got))
print("\n".join(failures) if failures else "OK")
"#;

#[track_caller]
fn check_no_stale_values(ns: Option<&Netns>, addr: SocketAddr) {
    let out = run_within(
        ns,
        "/usr/bin/python3",
        &[
            "-c",
            STALE_SCRIPT,
            &addr.ip().to_string(),
            &addr.port().to_string(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(
        out.trim_end(),
        "OK",
        "python3-pymemcache and python3-pylibmc needed:\n{out}"
    );
}

// Regression: a store refused for size kept the old value (memcached unlinks it), and a binary
// SET of more than twice `-I` closed the connection first.
#[test]
fn kernel_clients_see_no_stale_value_after_an_oversized_set() {
    for workers in ["1", "2"] {
        let server = Server::start_kernel(&["-t", workers]);
        check_no_stale_values(None, server.addr);
    }
}

#[test]
fn tap_clients_see_no_stale_value_after_an_oversized_set() {
    let ns = Netns::new();
    let server = start_tap(&ns, &[]);
    check_no_stale_values(Some(&ns), server.addr);
}

/// Reads lines from `stream` until `done` says the lines read so far are enough, or 10 s.
fn read_lines_until(stream: &mut TcpStream, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = String::new();
    let mut chunk = [0u8; 4096];
    loop {
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if done(&lines) || Instant::now() > deadline {
            return lines;
        }
        if let Ok(n) = stream.read(&mut chunk) {
            text.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    }
}

/// A watcher sees another connection's set and get, and its own connection events, in
/// memcached's line format.
#[track_caller]
fn check_watch(addr: SocketAddr) {
    let mut watcher = TcpStream::connect(addr).unwrap();
    watcher
        .write_all(b"watch fetchers mutations connevents\r\n")
        .unwrap();
    let ok = read_lines_until(&mut watcher, |l| !l.is_empty());
    assert_eq!(ok, ["OK"]);
    let mut client = TextClient::connect(addr);
    let reply = client
        .call(b"set watched 0 0 3\r\nabc\r\nget watched\r\n")
        .unwrap();
    assert_eq!(reply, b"STORED\r\nVALUE watched 0 3\r\nabc\r\nEND\r\n");
    drop(client);
    let lines = read_lines_until(&mut watcher, |l| {
        l.iter().any(|l| l.contains("type=conn_close"))
    });
    let event = |kind: &str| {
        lines
            .iter()
            .find(|l| l.contains(kind))
            .unwrap_or_else(|| panic!("{kind} in {lines:#?}"))
    };
    let store = event("type=item_store");
    let get = event("type=item_get");
    for line in [store, get, event("type=conn_new"), event("type=conn_close")] {
        let mut fields = line.split(' ');
        let ts = fields.next().unwrap();
        let gid = fields.next().unwrap();
        assert!(
            ts.starts_with("ts=") && ts[3..].split_once('.').is_some(),
            "{line}"
        );
        assert!(
            gid.starts_with("gid=") && gid[4..].parse::<u64>().is_ok(),
            "{line}"
        );
    }
    assert!(
        store.contains("type=item_store key=watched status=stored cmd=set ttl=0 clsid=1 cfd="),
        "{store}"
    );
    assert!(store.ends_with(" size=3"), "{store}");
    assert!(
        get.contains("type=item_get key=watched status=found clsid=1 cfd="),
        "{get}"
    );
    assert!(event("type=conn_new").contains(" transport=tcp cfd="));
    assert!(event("type=conn_close").contains(" transport=tcp reason=normal cfd="));
}

#[test]
fn kernel_watch_streams_another_connections_events() {
    let server = Server::start_kernel(&["-t", "2"]);
    check_watch(server.addr);
}

#[test]
fn tap_watch_streams_another_connections_events() {
    let ns = Netns::new();
    let server = start_tap(&ns, &[]);
    ns.enter();
    check_watch(server.addr);
}

/// The value of `STAT <name>` in a reply.
fn stat(reply: &str, name: &str) -> Option<u64> {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .and_then(|v| v.parse().ok())
}

/// `stats latency` counts every request served (one per key, as `cmd_get`), its percentiles
/// rise, and `stats reset` starts the counters over.
#[track_caller]
fn check_latency_and_reset(addr: SocketAddr) {
    let mut c = TextClient::connect(addr);
    assert_eq!(c.call(b"stats reset\r\n").unwrap(), b"RESET\r\n");
    for i in 0..200 {
        let reply = c
            .call(format!("set k{i} 0 0 1\r\nx\r\nget k{i} nope{i}\r\n").as_bytes())
            .unwrap();
        assert_eq!(
            reply,
            format!("STORED\r\nVALUE k{i} 0 1\r\nx\r\nEND\r\n").as_bytes()
        );
    }
    let stats = String::from_utf8(c.call(b"stats\r\n").unwrap()).unwrap();
    let latency = String::from_utf8(c.call(b"stats latency\r\n").unwrap()).unwrap();
    assert_eq!(stat(&stats, "cmd_get"), Some(400), "{stats}");
    assert_eq!(stat(&latency, "latency:get:count"), Some(400), "{latency}");
    assert_eq!(stat(&latency, "latency:set:count"), Some(200), "{latency}");
    // The reset, the `stats` before this one and the 202 `version` markers.
    assert_eq!(
        stat(&latency, "latency:other:count"),
        Some(204),
        "{latency}"
    );
    for kind in ["get", "set"] {
        let values: Vec<u64> = ["p50", "p90", "p99", "p99_9", "p99_99", "max"]
            .iter()
            .map(|q| stat(&latency, &format!("latency:{kind}:{q}_ns")).unwrap())
            .collect();
        assert!(
            values.windows(2).all(|w| w[0] <= w[1]),
            "{kind}: {values:?}"
        );
        assert!(values[0] > 0, "{kind}: {values:?}");
    }
    assert_eq!(c.call(b"stats reset\r\n").unwrap(), b"RESET\r\n");
    let stats = String::from_utf8(c.call(b"stats\r\n").unwrap()).unwrap();
    assert_eq!(stat(&stats, "cmd_get"), Some(0), "{stats}");
    assert_eq!(stat(&stats, "get_hits"), Some(0));
    assert_eq!(stat(&stats, "curr_items"), Some(200), "items stay");
    c.call(b"get k1\r\n").unwrap();
    let latency = String::from_utf8(c.call(b"stats latency\r\n").unwrap()).unwrap();
    assert_eq!(stat(&latency, "latency:get:count"), Some(1), "{latency}");
}

#[test]
fn kernel_stats_latency_counts_requests_and_reset_restarts() {
    for workers in ["1", "2"] {
        let server = Server::start_kernel(&["-t", workers]);
        check_latency_and_reset(server.addr);
    }
}

#[test]
fn tap_stats_latency_counts_requests_and_reset_restarts() {
    let ns = Netns::new();
    let server = start_tap(&ns, &[]);
    ns.enter();
    check_latency_and_reset(server.addr);
}

#[test]
fn tap_packet_counters_are_in_stats_and_stats_workers() {
    let ns = Netns::new();
    let server = start_tap(&ns, &[]);
    ns.enter();
    check_packet_counters(
        server.addr,
        &[
            "tap_rx_frames",
            "tap_tx_frames",
            "table_frames_in",
            "table_frames_out",
        ],
        &[
            "tap_tx_eagain",
            "table_frames_dropped",
            "loss_probes",
            "smoltcp_retransmits",
        ],
    );
}

#[test]
fn xdp_packet_counters_are_in_stats_and_stats_workers() {
    let veth = Veth::new();
    let server = veth.start(&[]);
    veth.client.enter();
    check_packet_counters(
        server.addr,
        &[
            "xdp_rx_frames",
            "xdp_tx_frames",
            "xdp_completions",
            "table_frames_in",
            "table_frames_out",
        ],
        &[
            "xdp_fill_empty",
            "xdp_tx_kick_busy",
            "xdp_tx_dropped",
            "xdp_kernel_rx_dropped",
            "xdp_kernel_rx_ring_full",
            "xdp_kernel_rx_fill_ring_empty_descs",
            "table_frames_dropped",
            "loss_probes",
            "smoltcp_retransmits",
        ],
    );
}

#[test]
fn kernel_packet_counters_are_in_stats_and_stats_workers() {
    let server = Server::start_kernel(&["-t", "2"]);
    check_packet_counters(
        server.addr,
        &["kernel_accepted"],
        &["kernel_refused", "kernel_closed", "kernel_errors"],
    );
}

/// After 50 sets, the packet path's counters `counting` have counted something and those in
/// `present` are there, in `stats` (`memspin_<name>`, summed) and `stats workers`
/// (`worker:<i>:<name>`, summed here), beside the loop's figures.
#[track_caller]
fn check_packet_counters(addr: SocketAddr, counting: &[&str], present: &[&str]) {
    let mut c = TextClient::connect(addr);
    for i in 0..50 {
        c.call(format!("set k{i} 0 0 1\r\nx\r\n").as_bytes())
            .unwrap();
    }
    let stats = String::from_utf8(c.call(b"stats\r\n").unwrap()).unwrap();
    let workers = String::from_utf8(c.call(b"stats workers\r\n").unwrap()).unwrap();
    let per_worker = |name: &str| -> Option<u64> {
        let values: Vec<u64> = workers
            .lines()
            .filter_map(|l| {
                let (key, value) = l.strip_prefix("STAT worker:")?.split_once(' ')?;
                (key.split_once(':')?.1 == name).then(|| value.parse().ok())?
            })
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    for name in counting {
        let total = stat(&stats, &format!("memspin_{name}"));
        assert!(total.is_some_and(|v| v > 0), "{name}:\n{stats}");
        assert!(
            per_worker(name).is_some_and(|v| v > 0),
            "{name}:\n{workers}"
        );
    }
    for name in present {
        assert!(
            stat(&stats, &format!("memspin_{name}")).is_some(),
            "{name}:\n{stats}"
        );
        assert!(per_worker(name).is_some(), "{name}:\n{workers}");
    }
    for name in ["memspin_polls", "memspin_polls_with_work"] {
        assert!(
            stat(&stats, name).is_some_and(|v| v > 0),
            "{name}:\n{stats}"
        );
    }
    let busy = stat(&stats, "memspin_busy_us").unwrap();
    let idle = stat(&stats, "memspin_idle_us").unwrap();
    assert!(busy + idle > 0);
    for name in ["busy_us", "idle_us", "polls", "polls_with_work", "parks"] {
        assert!(per_worker(name).is_some(), "{name}:\n{workers}");
    }
}

#[test]
fn kernel_verbosity_logs_one_event_per_line() {
    check_verbosity(Server::start_kernel(&["-vv"]), "127.0.0.1");
}

#[test]
fn tap_verbosity_logs_one_event_per_line() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["-vv"]);
    ns.enter();
    check_verbosity(server, "10.77.0.1");
}

// A Redis client's commands are logged by their words, not their framing.
#[test]
fn kernel_verbosity_logs_resp_commands_by_their_words() {
    let mut server = Server::start_kernel(&["-vv", "--resp-port", "0"]);
    let resp = server.resp_addr();
    let mut redis = TcpStream::connect(resp).unwrap();
    redis
        .write_all(b"*3\r\n$3\r\nSET\r\n$6\r\nlogged\r\n$1\r\nv\r\n")
        .unwrap();
    let reply = read_lines_until(&mut redis, |l| !l.is_empty());
    assert_eq!(reply, ["+OK"]);
    drop(redis);
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.ends_with(" SET logged v")),
        "{stderr}"
    );
    assert!(stderr.lines().any(|l| l.ends_with(" +OK")), "{stderr}");
}

/// With `-vv` a connection and its requests are logged, until `verbosity 0`; every line is
/// whole. `peer`: the client's address as memspin sees it.
#[track_caller]
fn check_verbosity(mut server: Server, peer: &str) {
    let mut c = TextClient::connect(server.addr);
    c.call(b"set logged 0 0 1\r\nx\r\n").unwrap();
    c.call(b"verbosity 0\r\n").unwrap();
    c.call(b"get unlogged\r\n").unwrap();
    drop(c);
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let line_with = |text: &str| lines.iter().find(|l| l.contains(text)).copied();
    let new = line_with(&format!("new client connection from {peer}:")).expect("connection logged");
    assert!(new.contains(" DEBUG memspin-w0: <"), "{new}");
    assert!(line_with("set logged 0 0 1").is_some(), "{stderr}");
    assert!(
        line_with(">").is_some_and(|l| l.ends_with(" STORED")),
        "{stderr}"
    );
    assert!(line_with("verbosity 0").is_some(), "{stderr}");
    assert!(
        line_with("unlogged").is_none(),
        "verbosity 0 stops them:\n{stderr}"
    );
    // Every log line is whole: `<seconds.millis> <LEVEL> <thread>: <message>`.
    for line in lines
        .iter()
        .filter(|l| l.contains(" DEBUG ") || l.contains(" INFO "))
    {
        let mut parts = line.splitn(3, ' ');
        let time = parts.next().unwrap();
        assert!(
            time.split_once('.')
                .is_some_and(|(s, ms)| s.parse::<u64>().is_ok() && ms.len() == 3),
            "{line}"
        );
    }
}

#[test]
fn kernel_dash_m_refuses_stores_when_memory_is_full() {
    let server = Server::start_kernel(&["-M", "-m", "2"]);
    check_dash_m(server.addr);
}

#[test]
fn tap_dash_m_refuses_stores_when_memory_is_full() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["-M", "-m", "2"]);
    ns.enter();
    check_dash_m(server.addr);
}

/// Stores past `-m 2` are refused with memcached's error, counted, and nothing is evicted.
#[track_caller]
fn check_dash_m(addr: SocketAddr) {
    let mut c = TextClient::connect(addr);
    let value = "v".repeat(100_000);
    let mut stored = 0;
    let mut refused = 0;
    for i in 0..60 {
        let reply = c
            .call(format!("set big{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes())
            .unwrap();
        match reply.as_slice() {
            b"STORED\r\n" => stored += 1,
            b"SERVER_ERROR out of memory storing object\r\n" => refused += 1,
            other => panic!("{}", String::from_utf8_lossy(other)),
        }
    }
    assert!(
        stored > 0 && refused > 0,
        "{stored} stored, {refused} refused"
    );
    let stats = String::from_utf8(c.call(b"stats\r\n").unwrap()).unwrap();
    assert_eq!(stat(&stats, "evictions"), Some(0));
    assert_eq!(stat(&stats, "store_no_memory"), Some(refused));
    assert_eq!(stat(&stats, "curr_items"), Some(stored));
    let reply = c.call(b"get big0\r\n").unwrap();
    assert!(reply.starts_with(b"VALUE big0 "), "the first items stay");
    let settings = String::from_utf8(c.call(b"stats settings\r\n").unwrap()).unwrap();
    assert!(settings.contains("STAT evictions off\r\n"));
}

#[test]
fn kernel_shutdown_needs_dash_a() {
    check_shutdown(Server::start_kernel(&[]), Server::start_kernel(&["-A"]));
}

#[test]
fn tap_shutdown_needs_dash_a() {
    let ns = Netns::new();
    let without = start_tap(&ns, &[]);
    ns.enter();
    let mut c = TextClient::connect(without.addr);
    assert_eq!(
        c.call(b"shutdown\r\n").unwrap(),
        b"ERROR: shutdown not enabled\r\n"
    );
    drop(c);
    drop(without);
    // One TAP device per namespace: the second server once the first is gone.
    let ns = Netns::new();
    let with = start_tap(&ns, &["-A"]);
    ns.enter();
    check_shutdown_stops(with);
}

/// `shutdown` is refused by `without` (no `-A`) and stops `with` (`-A`).
#[track_caller]
fn check_shutdown(without: Server, with: Server) {
    let mut c = TextClient::connect(without.addr);
    assert_eq!(
        c.call(b"shutdown\r\n").unwrap(),
        b"ERROR: shutdown not enabled\r\n"
    );
    check_shutdown_stops(with);
}

/// `shutdown` closes the connection without a reply and the server exits with success.
#[track_caller]
fn check_shutdown_stops(mut server: Server) {
    let mut c = TextClient::connect(server.addr);
    c.send(b"shutdown\r\n").unwrap();
    assert_eq!(c.read_to_close().unwrap(), b"", "closed without a reply");
    let pid = server.pid().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    // SAFETY: kill(2) with signal 0 only asks whether our child still exists.
    while unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    {
        assert!(
            Instant::now() < deadline,
            "memspin still runs after shutdown"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{stderr}");
}

#[test]
fn kernel_operator_commands_answer_as_memcached_answers_them() {
    // The same admin lines to memspin and to memcached 1.6 on this machine, answered alike
    // where their state agrees. (A metadump that starts memcached's crawler is left out: the
    // crawler answers asynchronously and may drop what is pipelined behind it.)
    let server = Server::start_kernel(&[]);
    let memcached = Memcached::start();
    let theirs = TextClient::connect(memcached.addr);
    check_operator_commands(TextClient::connect(server.addr), theirs);
}

#[test]
fn tap_operator_commands_answer_as_memcached_answers_them() {
    // memcached listens on this namespace's loopback: connect before entering the test's.
    let memcached = Memcached::start();
    let theirs = TextClient::connect(memcached.addr);
    let ns = Netns::new();
    let server = start_tap(&ns, &[]);
    ns.enter();
    check_operator_commands(TextClient::connect(server.addr), theirs);
}

/// The same admin lines to memspin (`ours`) and to memcached 1.6 on this machine (`theirs`),
/// answered alike where their state agrees.
#[track_caller]
fn check_operator_commands(mut ours: TextClient, mut theirs: TextClient) {
    let script: &[&[u8]] = &[
        b"stats detail on\r\n",
        b"get foo:bar\r\nset foo:x 0 0 1\r\nx\r\ndelete foo:q\r\nget foo:x\r\nget nocolon\r\n",
        b"stats detail dump\r\n",
        b"stats detail\r\n",
        b"stats detail off\r\n",
        b"stats reset\r\n",
        b"stats bogus\r\n",
        b"slabs automove bad\r\n",
        b"slabs automove 1\r\n",
        b"slabs reassign 1 1\r\n",
        b"slabs\r\n",
        b"verbosity x\r\n",
        b"verbosity 1\r\n",
        b"lru_crawler metadump 0\r\n",
        b"lru_crawler bogus\r\n",
        b"lru_crawler metadump x\r\n",
        b"shutdown\r\n",
        b"shutdown bogus\r\n",
        b"stats sizes_disable\r\n",
        b"stats sizes_enable\r\n",
        b"slabs automove ratio x\r\n",
        b"slabs automove 3\r\n",
        b"slabs reassign x y\r\n",
        b"watch bogus\r\n",
        b"verbosity 1 2 3\r\n",
        b"stats detail bogus\r\n",
        b"stats reset extra\r\n",
        b"stats cachedump 2 0\r\n",
        b"stats cachedump 64 0\r\n",
        b"stats cachedump 1\r\n",
        b"stats cachedump x y\r\n",
    ];
    for &line in script {
        let a = ours.call(line).unwrap();
        let b = theirs.call(line).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    // memcached's own stats test reads a stored key back from `stats cachedump`, in the line
    // memcached writes. (memcached itself lists only its class's hot segment, which its LRU
    // maintainer drains as items age, so its dump of an item stored a while ago is not
    // compared.)
    let dump = ours.call(b"stats cachedump 1 100\r\n").unwrap();
    let dump = String::from_utf8_lossy(&dump);
    assert!(
        dump.contains("ITEM foo:x [1 b; 0 s]\r\n") && dump.ends_with("END\r\n"),
        "{dump}"
    );
}

// Regression: with several workers `stats settings` (answered by one worker) reported that
// worker's share of `-m` as `maxbytes`; and it said port 0 when asked for any.
#[test]
fn kernel_settings_report_the_whole_memory_budget() {
    let server =
        Server::start_kernel(&["-t", "2", "-m", "64", "-c", "100", "-A", "--resp-port", "0"]);
    let mut c = TextClient::connect(server.addr);
    let settings = String::from_utf8(c.call(b"stats settings\r\n").unwrap()).unwrap();
    assert_eq!(stat(&settings, "maxbytes"), Some(64 << 20), "{settings}");
    assert_eq!(stat(&settings, "maxconns"), Some(100));
    assert_eq!(stat(&settings, "num_threads"), Some(2));
    assert!(settings.contains("STAT shutdown_command yes\r\n"));
    assert!(settings.contains("STAT memspin_net kernel\r\n"));
    assert_eq!(
        stat(&settings, "tcpport"),
        Some(u64::from(server.addr.port()))
    );
    let resp_port = stat(&settings, "memspin_resp_port").expect("memspin_resp_port");
    assert!(
        server
            .ready_line
            .contains(&format!("RESP on 127.0.0.1:{resp_port}")),
        "{settings}\n{}",
        server.ready_line
    );
    let conns = String::from_utf8(c.call(b"stats conns\r\n").unwrap()).unwrap();
    assert!(
        conns.contains(&format!("STAT 3:addr tcp:127.0.0.1:{resp_port}\r\n")),
        "two listeners per worker: {conns}"
    );
    let stats = String::from_utf8(c.call(b"stats\r\n").unwrap()).unwrap();
    assert_eq!(stat(&stats, "limit_maxbytes"), Some(64 << 20), "{stats}");
}

/// Sends `line` to `client` until `stat` of the reply satisfies `done`, for up to 10 s;
/// returns the last reply.
#[track_caller]
fn poll_stats(client: &mut TextClient, line: &[u8], done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = String::from_utf8(client.call(line).unwrap()).unwrap();
        if done(&reply) {
            return reply;
        }
        assert!(Instant::now() < deadline, "not reached in 10 s:\n{reply}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The same lines to memspin (`ours`) and memcached (`theirs`): the replies must match.
#[track_caller]
fn compare_lines(ours: &mut TextClient, theirs: &mut TextClient, script: &[&[u8]]) {
    for &line in script {
        let a = ours.call(line).unwrap();
        let b = theirs.call(line).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

/// The `stats settings` lines named `names`, as they are written.
fn settings_lines(client: &mut TextClient, names: &[&str]) -> Vec<String> {
    let reply = String::from_utf8(client.call(b"stats settings\r\n").unwrap()).unwrap();
    names
        .iter()
        .map(|name| {
            reply
                .lines()
                .find(|l| l.starts_with(&format!("STAT {name} ")))
                .unwrap_or_else(|| panic!("{name} in {reply}"))
                .to_string()
        })
        .collect()
}

// Regression: `slabs reassign` answered BADCLASS where memcached answers NOSPARE, and
// `lru_crawler crawl|tocrawl|sleep|enable|disable` and `cache_memlimit` answered ERROR.
#[test]
fn kernel_crawler_reassign_and_memlimit_answer_as_memcached_answers_them() {
    let server = Server::start_kernel(&["-t", "2"]);
    let memcached = Memcached::start();
    let mut ours = TextClient::connect(server.addr);
    let mut theirs = TextClient::connect(memcached.addr);
    // Both empty: no class has a page to spare. (memcached's global pool starts empty, where
    // memspin's holds the free budget, so `slabs reassign 0 <n>` is not compared.)
    compare_lines(
        &mut ours,
        &mut theirs,
        &[
            b"slabs reassign 1 2\r\n",
            b"slabs reassign 1 0\r\n",
            b"slabs reassign 2 1\r\n",
            b"slabs reassign 5 0\r\n",
            b"slabs reassign 64 1\r\n",
            b"slabs reassign 1 -1\r\n",
            b"slabs reassign -2 1\r\n",
            b"slabs reassign -1 2\r\n",
            b"slabs reassign -1 -1\r\n",
            b"slabs reassign 1 x\r\n",
            b"slabs reassign 1 2 3\r\n",
            b"lru_crawler tocrawl 5\r\n",
            b"lru_crawler tocrawl 4294967297\r\n",
            b"lru_crawler tocrawl -1\r\n",
            b"lru_crawler tocrawl x\r\n",
            b"lru_crawler tocrawl\r\n",
            b"lru_crawler sleep 1000001\r\n",
            b"lru_crawler sleep x\r\n",
            b"lru_crawler sleep 250\r\n",
            b"lru_crawler crawl 0\r\n",
            b"lru_crawler crawl 64\r\n",
            b"lru_crawler crawl 1,x\r\n",
            b"lru_crawler crawl ,\r\n",
            b"lru_crawler crawl hash\r\n",
            b"lru_crawler crawl 1 noreply\r\n",
            b"lru_crawler enable\r\n",
            b"lru_crawler bogus\r\n",
            b"cache_memlimit 7\r\n",
            b"cache_memlimit 4294967296\r\n",
            b"cache_memlimit 1000000001\r\n",
            b"cache_memlimit x\r\n",
            b"cache_memlimit 1 2 3\r\n",
            b"cache_memlimit 5 noreply\r\n",
            b"cache_memlimit 100\r\n",
        ],
    );
    let names = [
        "maxbytes",
        "slab_reassign",
        "lru_crawler",
        "lru_crawler_sleep",
        "lru_crawler_tocrawl",
    ];
    assert_eq!(
        settings_lines(&mut ours, &names),
        settings_lines(&mut theirs, &names)
    );
    // Disabled: memcached's crawler thread stops on its own time, so wait for its settings
    // to say so before comparing.
    compare_lines(&mut ours, &mut theirs, &[b"lru_crawler disable\r\n"]);
    for client in [&mut ours, &mut theirs] {
        poll_stats(client, b"stats settings\r\n", |r| {
            r.contains("STAT lru_crawler no\r\n")
        });
    }
    compare_lines(
        &mut ours,
        &mut theirs,
        &[
            b"lru_crawler crawl 1\r\n",
            b"lru_crawler crawl all\r\n",
            b"lru_crawler metadump all\r\n",
            b"lru_crawler disable\r\n",
            b"lru_crawler enable\r\n",
            b"lru_crawler crawl 2\r\n",
        ],
    );
}

/// Items of `len` bytes under `count` keys `<prefix><i>`, set with `noreply` over one
/// connection, expiring after `exptime`.
fn store_items(client: &mut TextClient, prefix: &str, count: usize, len: usize, exptime: u32) {
    let value = "v".repeat(len);
    let mut batch = Vec::new();
    for i in 0..count {
        batch.extend_from_slice(
            format!("set {prefix}{i} 0 {exptime} {len} noreply\r\n{value}\r\n").as_bytes(),
        );
        if batch.len() > 64 * 1024 {
            client.call(&batch).unwrap();
            batch.clear();
        }
    }
    client.call(&batch).unwrap();
}

#[test]
fn kernel_lru_crawler_crawl_reclaims_expired_items_as_memcached_does() {
    let server = Server::start_kernel(&["-t", "2"]);
    // memcached's LRU maintainer would take the expired items back first (as `reclaimed`);
    // memspin's background crawler takes them back as the crawler's.
    let memcached = Memcached::start_with("memcached".as_ref(), &["-o", "no_lru_maintainer"]);
    let mut ours = TextClient::connect(server.addr);
    let mut theirs = TextClient::connect(memcached.addr);
    // Small items, in memcached's class 1 too.
    for client in [&mut ours, &mut theirs] {
        store_items(client, "short", 30, 2, 1);
        store_items(client, "long", 10, 2, 0);
    }
    std::thread::sleep(Duration::from_millis(2200));
    for client in [&mut ours, &mut theirs] {
        assert_eq!(client.call(b"lru_crawler crawl 1\r\n").unwrap(), b"OK\r\n");
        poll_stats(client, b"stats\r\n", |r| {
            r.contains("STAT lru_crawler_running 0\r\n")
        });
        let items = String::from_utf8(client.call(b"stats items\r\n").unwrap()).unwrap();
        assert_eq!(stat(&items, "items:1:number"), Some(10), "{items}");
        assert_eq!(
            stat(&items, "items:1:crawler_reclaimed"),
            Some(30),
            "{items}"
        );
        let stats = String::from_utf8(client.call(b"stats\r\n").unwrap()).unwrap();
        assert_eq!(stat(&stats, "crawler_reclaimed"), Some(30), "{stats}");
        assert!(stat(&stats, "lru_crawler_starts").is_some_and(|n| n >= 1));
    }
}

#[test]
fn kernel_slabs_reassign_frees_a_page_and_cache_memlimit_evicts_to_the_new_budget() {
    let server = Server::start_kernel(&["-t", "2", "-m", "64"]);
    check_reassign_memlimit_and_crawl(server.addr);
}

#[test]
fn tap_slabs_reassign_frees_a_page_and_cache_memlimit_evicts_to_the_new_budget() {
    let ns = Netns::new();
    let server = start_tap(&ns, &["-t", "2", "-m", "64"]);
    ns.enter();
    check_reassign_memlimit_and_crawl(server.addr);
}

/// The worker loops do the background work: a page freed for `slabs reassign 1 0`, a
/// requested crawl, and evicting down to a lowered `cache_memlimit`.
#[track_caller]
fn check_reassign_memlimit_and_crawl(addr: SocketAddr) {
    let mut c = TextClient::connect(addr);
    store_items(&mut c, "k", 4000, 1000, 0);
    let before = String::from_utf8(c.call(b"stats\r\n").unwrap()).unwrap();
    assert_eq!(stat(&before, "curr_items"), Some(4000));
    assert_eq!(c.call(b"slabs reassign 1 0\r\n").unwrap(), b"OK\r\n");
    let after = poll_stats(&mut c, b"stats\r\n", |r| {
        r.contains("STAT slab_reassign_running 0\r\n")
    });
    assert_eq!(stat(&after, "slabs_moved"), Some(1), "{after}");
    let freed = stat(&before, "bytes").unwrap() - stat(&after, "bytes").unwrap();
    assert!(
        (1 << 20..(1 << 20) + 4096).contains(&freed),
        "{freed} bytes freed"
    );
    let evicted = stat(&after, "slab_reassign_evictions_nomem").unwrap();
    assert_eq!(4000 - stat(&after, "curr_items").unwrap(), evicted);
    assert_eq!(stat(&after, "evictions"), Some(0));
    // A crawl with a long pause between steps runs for a while, then ends.
    store_items(&mut c, "short", 2000, 10, 1);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(c.call(b"lru_crawler sleep 20000\r\n").unwrap(), b"OK\r\n");
    // Both requests in one write: the second finds the first running however late this
    // client is scheduled (a crawl of a few thousand items takes a dozen 20 ms pauses).
    assert_eq!(
        c.call(b"lru_crawler crawl all\r\nlru_crawler crawl all\r\n")
            .unwrap(),
        b"OK\r\nBUSY currently processing crawler request\r\n"
    );
    let crawled = poll_stats(&mut c, b"stats\r\n", |r| {
        r.contains("STAT lru_crawler_running 0\r\n")
    });
    assert_eq!(stat(&crawled, "curr_items"), stat(&after, "curr_items"));
    assert!(stat(&crawled, "crawler_items_checked").is_some_and(|n| n >= 2000));
    // 20 MB of items, then a budget of 8: each worker evicts its share down to 4 MiB.
    store_items(&mut c, "m", 20_000, 1000, 0);
    assert_eq!(c.call(b"cache_memlimit 8\r\n").unwrap(), b"OK\r\n");
    let settings = String::from_utf8(c.call(b"stats settings\r\n").unwrap()).unwrap();
    assert_eq!(stat(&settings, "maxbytes"), Some(8 << 20));
    // Done when the memory held is under the budget: the items' `bytes` get there first (a
    // worker still evicting towards its share can hold more than its items).
    let slabs = poll_stats(&mut c, b"stats slabs\r\n", |r| {
        stat(r, "total_malloced").is_some_and(|b| b <= 8 << 20)
    });
    let stats = String::from_utf8(c.call(b"stats\r\n").unwrap()).unwrap();
    assert!(
        stat(&stats, "bytes").is_some_and(|b| b <= 8 << 20),
        "{stats}\n{slabs}"
    );
    assert!(
        stat(&stats, "evictions").is_some_and(|n| n > 10_000),
        "{stats}"
    );
    assert_eq!(stat(&stats, "limit_maxbytes"), Some(8 << 20));
    // The cache goes on under its budget.
    store_items(&mut c, "n", 1000, 1000, 0);
    let reply = c.call(b"get n999\r\n").unwrap();
    assert!(reply.starts_with(b"VALUE n999 0 1000\r\n"));
}

/// Sends `request` in one write and reads until the reply ends with `end`.
#[track_caller]
fn exchange(stream: &mut TcpStream, request: &[u8], end: &str) -> String {
    stream.write_all(request).unwrap();
    let lines = read_lines_until(stream, |l| l.last().is_some_and(|l| l == end));
    assert_eq!(lines.last().map(String::as_str), Some(end), "{lines:?}");
    lines.join("\n")
}

/// `(bytes_read, bytes_written)` of `stats` replies over one connection, after `stats reset`
/// in the ways memcached's counting shows: the reset alone, the reset read together with the
/// `stats`, and a request between them.
fn bytes_after_reset(addr: SocketAddr) -> Vec<(Option<u64>, Option<u64>)> {
    let mut s = TcpStream::connect(addr).unwrap();
    let figures = |reply: &str| (stat(reply, "bytes_read"), stat(reply, "bytes_written"));
    let mut all = Vec::new();
    exchange(&mut s, b"stats reset\r\n", "RESET");
    all.push(figures(&exchange(&mut s, b"stats\r\n", "END")));
    all.push(figures(&exchange(
        &mut s,
        b"stats reset\r\nstats\r\n",
        "END",
    )));
    exchange(&mut s, b"stats reset\r\n", "RESET");
    exchange(&mut s, b"get nope\r\n", "END");
    all.push(figures(&exchange(&mut s, b"stats\r\n", "END")));
    all
}

// Regression: right after `stats reset`, `bytes_read` held the reset's own line (memspin
// counted a request's bytes once it had run; memcached counts them as it reads them).
#[test]
fn kernel_bytes_read_after_a_reset_counts_as_memcached_counts() {
    let server = Server::start_kernel(&["-t", "2"]);
    let memcached = Memcached::start();
    let ours = bytes_after_reset(server.addr);
    let theirs = bytes_after_reset(memcached.addr);
    assert_eq!(ours, theirs);
    assert_eq!(theirs[0], (Some(7), Some(7)), "memcached 1.6.18's figures");
}

// Regression: Redis's `CLIENT ID` numbered connections apart from `stats conns`.
#[test]
fn kernel_client_id_is_the_number_stats_conns_shows() {
    let server = Server::start_kernel(&["-t", "2", "--resp-port", "0"]);
    let resp = server.resp_addr();
    let mut text = TextClient::connect(server.addr);
    let mut redis = TcpStream::connect(resp).unwrap();
    let client = redis.local_addr().unwrap();
    redis.write_all(b"CLIENT ID\r\n").unwrap();
    let id = read_lines_until(&mut redis, |l| !l.is_empty());
    let id: u64 = id[0]
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{id:?}"));
    let conns = String::from_utf8(text.call(b"stats conns\r\n").unwrap()).unwrap();
    assert!(
        conns.contains(&format!("STAT {id}:addr tcp:{client}\r\n")),
        "CLIENT ID {id}:\n{conns}"
    );
}

/// The `stats conns` lines of the connection from `client`, its number and ports replaced by
/// names.
fn own_conn_lines(conns: &str, client: SocketAddr, server_port: u16) -> Vec<String> {
    let addr_line = conns
        .lines()
        .find(|l| l.ends_with(&format!("[{}]:{}", client.ip(), client.port())))
        .unwrap_or_else(|| panic!("{client} in {conns}"));
    let number = addr_line
        .strip_prefix("STAT ")
        .and_then(|l| l.split(':').next())
        .unwrap();
    conns
        .lines()
        .filter(|l| l.starts_with(&format!("STAT {number}:")))
        .filter(|l| !l.contains("secs_since_last_cmd"))
        .map(|l| {
            l.replacen(&format!("STAT {number}:"), "STAT N:", 1)
                .replace(&format!(":{}", client.port()), ":CLIENT")
                .replace(&format!(":{server_port}"), ":SERVER")
        })
        .collect()
}

// Regression: `stats conns` wrote IPv6 addresses as `tcp:::1:11211`; memcached writes
// `tcp6:[::1]:11211`.
#[test]
fn kernel_stats_conns_writes_ipv6_addresses_as_memcached_does() {
    let server = Server::start(
        None,
        &["--net", "kernel", "-l", "::1", "-p", "0", "--idle", "park"],
        None,
    );
    let memcached = Memcached::start_with("memcached".as_ref(), &["-l", "::1"]);
    let port = memcached.addr.port();
    let mut lines = Vec::new();
    for addr in [server.addr, SocketAddr::new("::1".parse().unwrap(), port)] {
        let mut c = TcpStream::connect(addr).unwrap();
        let client = c.local_addr().unwrap();
        let conns = exchange(&mut c, b"stats conns\r\n", "END");
        lines.push(own_conn_lines(&conns, client, addr.port()));
        if addr == server.addr {
            assert!(
                conns.contains(&format!("STAT 0:addr tcp6:[::1]:{}", addr.port())),
                "the listener:\n{conns}"
            );
        }
    }
    assert_eq!(lines[0], lines[1]);
    assert!(lines[0].contains(&"STAT N:addr tcp6:[::1]:CLIENT".to_string()));
}

// Regression: a RESP SET too large for `-I` was counted in `cmd_set`, not `store_too_large`,
// where memcached counts an oversize set (as memspin's text protocol does).
#[test]
fn kernel_an_oversize_resp_set_counts_in_store_too_large() {
    let server = Server::start_kernel(&["-I", "1k", "--resp-port", "0"]);
    let resp = server.resp_addr();
    let mut redis = TcpStream::connect(resp).unwrap();
    let value = "x".repeat(1020);
    redis
        .write_all(format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1020\r\n{value}\r\n").as_bytes())
        .unwrap();
    let reply = read_lines_until(&mut redis, |l| !l.is_empty());
    assert!(reply[0].starts_with('-'), "{reply:?}");
    let mut text = TextClient::connect(server.addr);
    let stats = String::from_utf8(text.call(b"stats\r\n").unwrap()).unwrap();
    assert_eq!(stat(&stats, "store_too_large"), Some(1), "{stats}");
    assert_eq!(stat(&stats, "cmd_set"), Some(0));
}
