//! The kernel-bypass client end to end, over TAP (`--net tap`) and over AF_XDP (`--net xdp`,
//! the tests named `xdp_*`, topology below). Over TAP: memspin (its built binary, `cargo build
//! -p server`, or `$MEMSPIN`) serves on a TAP device in one network namespace, the generator
//! runs on a TAP device of its own in another, and a veth pair joins the two namespaces, whose
//! kernels forward between their TAP device and veth end (as `scripts/veth-pair.sh` sets up):
//!
//! ```text
//! memspin 10.77.0.2 ─ ms0 (10.77.0.1) ─ vs0 10.79.0.1 ═veth═ vg0 10.79.0.2 ─ lg0 (10.78.0.1) ─ generator 10.78.0.2
//! ```
//!
//! Over AF_XDP, memspin serves on AF_XDP on one end of a veth pair and the generator runs on
//! AF_XDP on the other (copy mode: veth has no zero-copy), directly or through a router
//! namespace whose kernel forwards between two veth pairs (and drops frames, for the loss
//! test: XDP takes frames before netfilter on the ends, so the drops are the router's):
//!
//! ```text
//! direct: generator 10.78.0.2 ─ xg0 ═veth═ xs0 ─ memspin 10.78.0.200
//! routed: generator 10.78.0.2 ─ xg0 ═veth═ rg0 10.78.0.1 ─ router ─ 10.77.0.1 rs0 ═veth═ xs0 ─ memspin 10.77.0.2
//! ```
//!
//! Every namespace is deleted when its test ends, also on panic; traffic stays inside them.
//! Needs root (the tests fail, they do not skip, without it).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

const LOADGEN: &str = env!("CARGO_BIN_EXE_memspin-loadgen");

/// The memspin binary: `$MEMSPIN`, or `memspin` in this test binary's target directory.
fn memspin_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MEMSPIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/bypass-<hash> → target/<profile>/memspin
    let exe = std::env::current_exe().expect("the test binary's path");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("memspin");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p server) or set MEMSPIN",
        bin.display()
    );
    bin
}

/// A network namespace deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    #[track_caller]
    fn new(role: &str) -> Netns {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "mslg-t{}-{}-{role}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    #[track_caller]
    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all);
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[track_caller]
fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("ip");
    assert!(status.success(), "ip {args:?}: {status}");
}

/// One test at a time holds it while it runs memspin and the generator. Each run is two
/// processes that busy-poll; several tests at once on a small machine starve each other's
/// handshakes past the generator's 1 s timeout (1,000 connections' handshakes and prefill
/// in debug builds beside another test's took over a second), which then counts refused
/// connections and lost prefill keys that are the machine's, not the path's.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// memspin, killed on drop; its stderr (the exit report) goes to `log`, removed on drop.
struct Memspin {
    child: Child,
    log: PathBuf,
}

impl Memspin {
    /// Stops memspin with SIGTERM (it prints its exit report) and returns its stderr.
    fn stop_and_report(&mut self) -> String {
        // SAFETY: kill(2) on our own child's pid, which has not been waited for.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Starts memspin in `ns` with `args`; returns once it printed its ready line.
#[track_caller]
fn start_memspin(ns: &Netns, args: &[&str]) -> Memspin {
    let log = std::env::temp_dir().join(format!("mslg-memspin-{}.log", ns.name));
    let mut child = ns
        .command(memspin_bin().to_str().expect("a UTF-8 path"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("memspin's log"))
        .spawn()
        .expect("start memspin");
    let stdout = child.stdout.take().expect("piped stdout");
    let memspin = Memspin { child, log };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("ready") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("memspin printed its ready line within 30 s");
    memspin
}

impl Drop for Memspin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `frames_control` of worker `worker`'s connection table in memspin's exit report: ARP,
/// neighbour discovery and echo frames that reached that worker's queue.
#[track_caller]
fn control_frames(report: &str, worker: usize) -> u64 {
    let line = report
        .lines()
        .find(|l| l.contains(&format!("worker {worker}: connection table")))
        .unwrap_or_else(|| panic!("no table of worker {worker} in:\n{report}"));
    let at = line.find("frames_control: ").expect("frames_control") + "frames_control: ".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count")
}

/// The two namespaces, the veth pair, the generator's TAP device and memspin serving.
/// Field order is drop order: memspin first, then the namespaces.
struct Topology {
    memspin: Memspin,
    gen_ns: Netns,
    srv_ns: Netns,
    /// The generator's `-s`.
    server: &'static str,
}

impl Topology {
    #[track_caller]
    fn new() -> Topology {
        Topology::with_queues(1)
    }

    /// With a generator TAP device of `queues` queues (multi-queue when more than one).
    #[track_caller]
    fn with_queues(queues: usize) -> Topology {
        Topology::start(queues, &["-t", "1"])
    }

    /// As [`with_queues`](Self::with_queues), memspin with `memspin_args` added (`-t N`
    /// gives it N workers, a TAP queue each).
    #[track_caller]
    fn start(queues: usize, memspin_args: &[&str]) -> Topology {
        let srv = Netns::new("srv");
        let gen_ns = Netns::new("gen");
        srv.ip(&[
            "link",
            "add",
            "vs0",
            "type",
            "veth",
            "peer",
            "name",
            "vg0",
            "netns",
            &gen_ns.name,
        ]);
        srv.ip(&["addr", "add", "10.79.0.1/24", "dev", "vs0"]);
        gen_ns.ip(&["addr", "add", "10.79.0.2/24", "dev", "vg0"]);
        srv.ip(&["link", "set", "vs0", "up"]);
        gen_ns.ip(&["link", "set", "vg0", "up"]);
        for ns in [&srv, &gen_ns] {
            let ok = ns
                .command("sysctl")
                .args(["-qw", "net.ipv4.ip_forward=1"])
                .status()
                .expect("sysctl");
            assert!(ok.success());
        }
        let multi_queue: &[&str] = if queues > 1 { &["multi_queue"] } else { &[] };
        gen_ns.ip(&[&["tuntap", "add", "dev", "lg0", "mode", "tap"], multi_queue].concat());
        gen_ns.ip(&["addr", "add", "10.78.0.1/24", "dev", "lg0"]);
        gen_ns.ip(&["link", "set", "lg0", "up"]);
        gen_ns.ip(&["route", "add", "10.77.0.0/24", "via", "10.79.0.1"]);
        srv.ip(&["route", "add", "10.78.0.0/24", "via", "10.79.0.2"]);
        let memspin = start_memspin(
            &srv,
            &[
                &[
                    "--net",
                    "tap",
                    "--iface",
                    "ms0",
                    "--ip",
                    "10.77.0.2/24",
                    "--host-ip",
                    "10.77.0.1/24",
                    "--gateway",
                    "10.77.0.1",
                    "-p",
                    "11211",
                    "--idle",
                    "park",
                ],
                memspin_args,
            ]
            .concat(),
        );
        Topology {
            memspin,
            gen_ns,
            srv_ns: srv,
            server: "10.77.0.2:11211",
        }
    }

    /// Runs the bypass generator against memspin with `args` added; its JSON summary.
    #[track_caller]
    fn loadgen(&mut self, args: &[&str]) -> Value {
        self.loadgen_while(&[&["-q"], args].concat(), |_, _| {})
    }

    /// As [`loadgen`](Self::loadgen) without `-q`, calling `meanwhile` with the running
    /// generator (its stderr piped).
    #[track_caller]
    fn loadgen_while(
        &mut self,
        args: &[&str],
        meanwhile: impl FnOnce(&mut Self, &mut Child),
    ) -> Value {
        let json = std::env::temp_dir().join(format!(
            "mslg-bypass-{}-{}.json",
            std::process::id(),
            self.gen_ns.name
        ));
        let link = [
            "--iface",
            "lg0",
            "--ip",
            "10.78.0.2/24",
            "--gateway",
            "10.78.0.1",
        ];
        let mut child = self
            .gen_ns
            .command("timeout")
            .args(["60", LOADGEN, "-s", self.server, "--net", "tap"])
            .args(link)
            .args(["--json", json.to_str().expect("a UTF-8 path")])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run memspin-loadgen");
        meanwhile(self, &mut child);
        let out = child.wait_with_output().expect("memspin-loadgen's exit");
        assert!(
            out.status.success(),
            "memspin-loadgen {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&json).expect("the JSON summary");
        let _ = std::fs::remove_file(&json);
        serde_json::from_str(&text).expect("JSON")
    }
}

/// What every bypass run must show: it ran over TAP with device stamps on every reply, the
/// generator's loss recovery is reported, and nothing failed or mismatched.
#[track_caller]
fn assert_clean_bypass_run(v: &Value) {
    assert_eq!(v["config"]["net"], "tap", "{v}");
    assert_eq!(v["timestamps"]["source"], "device");
    let replies = v["timestamps"]["replies"].as_u64().unwrap();
    assert!(replies > 100, "only {replies} replies");
    assert_eq!(v["timestamps"]["tx_kernel"], replies, "every send stamped");
    assert_eq!(v["timestamps"]["rx_kernel"], replies, "every reply stamped");
    assert!(v["recovery"]["probes"].is_u64(), "{}", v["recovery"]);
    assert_eq!(v["errors"]["total"], 0, "{}", v["errors"]);
    assert_eq!(v["verify"]["mismatches"], 0, "{}", v["verify"]);
    assert!(v["verify"]["checked"].as_u64().unwrap() > 0);
    assert_eq!(v["prefill"]["errors"], 0);
    // The generator delay is measured from the device's receive stamp, so every reply has one.
    assert_eq!(v["latency_us"]["generator_delay"]["count"], replies);
}

#[test]
fn closed_and_open_loops_over_tap_verify_every_value() {
    let _serial = one_at_a_time();
    let mut topo = Topology::new();
    let common = [
        "-c",
        "4",
        "--keys",
        "1000",
        "--prefill",
        "--verify",
        "--get-ratio",
        "0.8",
    ];
    let closed = topo.loadgen(
        &[
            &common[..],
            &["--pipeline", "4", "-d", "1", "--warmup", "0.2"],
        ]
        .concat(),
    );
    assert_eq!(closed["mode"], "closed");
    assert_clean_bypass_run(&closed);
    // A second process starts afresh: the first reset its connections when it ended.
    // 300/s is far below what the closed loop just carried over these 4 connections.
    let open = topo.loadgen(
        &[
            &common[..],
            &["--rate", "300", "-d", "1.5", "--warmup", "0.2"],
        ]
        .concat(),
    );
    assert_eq!(open["mode"], "open");
    assert_clean_bypass_run(&open);
    let sent = open["open_loop"]["sent"].as_u64().unwrap();
    assert!(sent > 300, "sent {sent}");
    assert_eq!(
        open["open_loop"]["saturated"], false,
        "{}",
        open["open_loop"]
    );
}

#[test]
fn a_killed_server_is_counted_as_errors_and_the_run_still_ends() {
    let _serial = one_at_a_time();
    let mut topo = Topology::new();
    let started = std::time::Instant::now();
    let args = [
        "-c",
        "4",
        "--rate",
        "500",
        "-d",
        "3",
        "--warmup",
        "0.2",
        "--keys",
        "1000",
        "--interval",
        "200",
    ];
    let v = topo.loadgen_while(&args, |topo, child| {
        // memspin dies once the window is open: after the first progress line of the run
        // (0.2 s into it), not at a fixed time after start-up, which a busy machine stretches.
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        let in_window = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line.contains("] run"));
        assert!(in_window, "the generator ended before its window");
        let _ = topo.memspin.child.kill();
        let _ = topo.memspin.child.wait();
        // Keep reading, so the generator never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
    });
    // Requests sent after the kill (at least 2.6 s of the window remain) are unanswered
    // for --timeout-ms (1 s) and count as timeouts; what was answered before counts too.
    assert!(
        v["errors"]["timeout"].as_u64().unwrap() >= 1,
        "{}",
        v["errors"]
    );
    assert!(v["ops"].as_u64().unwrap() > 50, "{}", v["ops"]);
    // The window (3.2 s with the warm-up) and a drain of at most the timeout, with room for
    // start-up on a shared machine: nowhere near the 60 s bound.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn two_threads_on_two_queues_of_one_device_verify_every_value() {
    let _serial = one_at_a_time();
    let mut topo = Topology::with_queues(2);
    let v = topo.loadgen(&[
        "-t",
        "2",
        "-c",
        "8",
        "--pipeline",
        "2",
        "-d",
        "1",
        "--warmup",
        "0.2",
        "--keys",
        "1000",
        "--prefill",
        "--verify",
        "--get-ratio",
        "0.8",
    ]);
    assert_eq!(v["config"]["threads"], 2);
    assert_clean_bypass_run(&v);
}

/// memspin's `stats` counter `name`, asked over a kernel TCP connection to `server` made
/// from inside `ns` (a thread that enters the namespace: the test process stays outside).
#[track_caller]
fn memspin_stat(ns: &Netns, server: &str, name: &str) -> u64 {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let netns = format!("/run/netns/{}", ns.name);
    let server: std::net::SocketAddr = server.parse().expect("an address");
    let reply = std::thread::spawn(move || {
        let f = std::fs::File::open(&netns).expect("the namespace's file");
        // SAFETY: setns(2) on an open namespace file; it moves only this thread.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {netns}");
        let mut s = std::net::TcpStream::connect_timeout(&server, Duration::from_secs(5))
            .expect("connect for stats");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"stats\r\n").unwrap();
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        while !reply.ends_with(b"END\r\n") {
            let n = s.read(&mut chunk).expect("the stats reply");
            assert!(n > 0, "closed before END");
            reply.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8(reply).expect("text")
    })
    .join()
    .expect("the stats thread");
    let prefix = format!("STAT {name} ");
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{reply}"))
}

// memspin -t 2 on a multi-queue TAP device: the kernel's flow hash picks each connection's
// queue, so its worker. --steer asks every connection, keeps 4 on each worker, and sends each
// key only on its owner's connections: nothing is forwarded, every value checks, in binary
// and in RESP (whose probe pipelines CONFIG GET for the worker count). The same run
// unsteered is forwarded (about half its keys are the other worker's), which shows the
// counter is read from the server under test.
#[test]
fn steered_over_tap_keeps_each_workers_share_and_is_never_forwarded() {
    let _serial = one_at_a_time();
    let mut topo = Topology::start(1, &["-t", "2", "--resp-port", "6379"]);
    let server = "10.77.0.2:11211";
    let args = [
        "-c",
        "8",
        "--pipeline",
        "2",
        "-d",
        "1",
        "--warmup",
        "0.2",
        "--keys",
        "2000",
        "--prefill",
        "--verify",
        "--get-ratio",
        "0.8",
    ];
    let before = memspin_stat(&topo.srv_ns, server, "memspin_forwarded");
    let v = topo.loadgen(&[&args[..], &["--steer"]].concat());
    assert_clean_bypass_run(&v);
    assert_eq!(v["config"]["steer"], true);
    assert_eq!(v["steer_connections"], serde_json::json!([4, 4]), "{v}");
    let after = memspin_stat(&topo.srv_ns, server, "memspin_forwarded");
    assert_eq!(after, before, "steered, yet forwarded");
    topo.server = "10.77.0.2:6379";
    let v = topo.loadgen(&[&args[..], &["--steer", "--protocol", "resp"]].concat());
    assert_clean_bypass_run(&v);
    assert_eq!(v["steer_connections"], serde_json::json!([4, 4]), "{v}");
    let after = memspin_stat(&topo.srv_ns, server, "memspin_forwarded");
    assert_eq!(after, before, "RESP steered, yet forwarded");
    topo.server = "10.77.0.2:11211";
    let v = topo.loadgen(&args);
    assert_clean_bypass_run(&v);
    assert!(
        memspin_stat(&topo.srv_ns, server, "memspin_forwarded") > after,
        "an unsteered run was never forwarded"
    );
}

// memspin stopped for 500 ms in a steered window: requests time out (200 ms), their
// connections are reset and reopened, and each reopened connection is asked again and kept
// only on its own worker (the flow hash may put it on the other), so once memspin resumes
// the keys still go to their owners: nothing forwarded, no value wrong.
#[test]
fn steered_connections_reopened_over_tap_land_on_their_workers() {
    let _serial = one_at_a_time();
    let mut topo = Topology::start(1, &["-t", "2"]);
    let server = "10.77.0.2:11211";
    let before = memspin_stat(&topo.srv_ns, server, "memspin_forwarded");
    let v = topo.loadgen_while(&STEERED_STALL, |topo, child| {
        wait_for_window(child);
        stall(&topo.memspin);
    });
    assert_steered_run_outlived_the_stall(&v);
    assert_eq!(
        memspin_stat(&topo.srv_ns, server, "memspin_forwarded"),
        before,
        "a reopened connection was forwarded"
    );
}

/// A steered open loop (two workers' shares of 4) with 200 ms timeouts, for a 500 ms
/// [`stall`] of memspin in its window.
const STEERED_STALL: [&str; 17] = [
    "--steer",
    "-c",
    "8",
    "--rate",
    "1000",
    "-d",
    "3",
    "--warmup",
    "0.2",
    "--keys",
    "2000",
    "--prefill",
    "--verify",
    "--timeout-ms",
    "200",
    "--interval",
    "200",
];

/// Stops memspin for 500 ms (SIGSTOP, then SIGCONT).
fn stall(memspin: &Memspin) {
    let pid = memspin.child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child's pid, which has not been waited for.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
}

/// A [`STEERED_STALL`] run: the stall timed requests out, the reopened connections kept their
/// workers' shares and carried the rest of the window, and no value was wrong.
#[track_caller]
fn assert_steered_run_outlived_the_stall(v: &Value) {
    assert_eq!(v["steer_connections"], serde_json::json!([4, 4]), "{v}");
    assert!(
        v["errors"]["timeout"].as_u64().unwrap() > 0,
        "the stall timed nothing out: {}",
        v["errors"]
    );
    // 1,000/s for 3 s; the stall and the reopening take well under a second of it, so
    // more than 1,500 answered means the reopened connections carried the rest.
    let ops = v["ops"].as_u64().unwrap();
    assert!(ops > 1500, "{ops} ops: {}", v["errors"]);
    assert_eq!(v["verify"]["mismatches"], 0, "{}", v["verify"]);
}

/// Runs the generator in `ns` (optionally as `nobody`) with `args`; its output.
fn loadgen_in(ns: &Netns, nobody: bool, args: &[&str]) -> Output {
    let mut cmd = ns.command("timeout");
    cmd.arg("20");
    if nobody {
        cmd.args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]);
    }
    cmd.arg(LOADGEN)
        .args(["-s", "10.77.0.2:11211", "-d", "1", "-q"])
        .args(args)
        .output()
        .expect("run memspin-loadgen")
}

#[track_caller]
fn assert_refused(out: &Output, says: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "succeeded: {stderr}");
    assert!(stderr.contains(says), "expected {says:?} in: {stderr}");
}

#[test]
fn bad_arguments_and_missing_rights_are_clear_errors() {
    let _serial = one_at_a_time();
    let ns = Netns::new("args");
    let tap = ["--net", "tap", "--ip", "10.78.0.2/24"];
    let out = loadgen_in(&ns, false, &[&tap[..], &["--iface", "nosuch0"]].concat());
    assert_refused(&out, "--iface nosuch0: no such interface");
    let out = loadgen_in(&ns, false, &tap);
    assert_refused(&out, "--net tap needs --iface");
    let out = loadgen_in(&ns, false, &["--net", "tap", "--iface", "lg0"]);
    assert_refused(&out, "--net tap needs --ip");
    let out = loadgen_in(&ns, false, &["--net", "xdp", "--ip", "10.78.0.2/24"]);
    assert_refused(&out, "--net xdp needs --iface");
    let out = loadgen_in(&ns, false, &["--iface", "lg0"]);
    assert_refused(&out, "are for --net tap and --net xdp");
    // A TAP device owned by root: without CAP_NET_ADMIN no one else may attach to it (one
    // with no owner would take anyone).
    ns.ip(&["tuntap", "add", "dev", "lg0", "mode", "tap", "user", "0"]);
    ns.ip(&["link", "set", "lg0", "up"]);
    let out = loadgen_in(&ns, true, &[&tap[..], &["--iface", "lg0"]].concat());
    assert_refused(&out, "needs root");
}

/// The AF_XDP set-up (see the module docs): memspin on `xs0`, the generator on `xg0`.
/// Field order is drop order: memspin first, then the namespaces.
struct XdpTopology {
    memspin: Memspin,
    gen_ns: Netns,
    router: Option<Netns>,
    _srv_ns: Netns,
    /// The generator's server and link arguments.
    link: Vec<String>,
}

/// A veth pair `a` in `ns_a` and `b` in `ns_b`, `queues` queues each way on both ends, up.
#[track_caller]
fn veth(ns_a: &Netns, a: &str, ns_b: &Netns, b: &str, queues: usize) {
    let q = queues.to_string();
    ns_a.ip(&[
        "link",
        "add",
        a,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
        "type",
        "veth",
        "peer",
        "name",
        b,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
        "netns",
        &ns_b.name,
    ]);
    ns_a.ip(&["link", "set", a, "up"]);
    ns_b.ip(&["link", "set", b, "up"]);
}

impl XdpTopology {
    /// Generator and memspin on one veth pair with `queues` queues (memspin with a worker
    /// per queue).
    #[track_caller]
    fn direct(queues: usize) -> XdpTopology {
        let srv = Netns::new("xsrv");
        let gen_ns = Netns::new("xgen");
        veth(&gen_ns, "xg0", &srv, "xs0", queues);
        let workers = queues.to_string();
        let memspin = start_memspin(
            &srv,
            &[
                "--net",
                "xdp",
                "--iface",
                "xs0",
                "--ip",
                "10.78.0.200/24",
                "-p",
                "11211",
                "-t",
                &workers,
                "-c",
                "4096",
                "--idle",
                "park",
            ],
        );
        XdpTopology {
            memspin,
            gen_ns,
            router: None,
            _srv_ns: srv,
            link: ["-s", "10.78.0.200:11211", "--net", "xdp", "--iface", "xg0"]
                .into_iter()
                .chain(["--ip", "10.78.0.2/24"])
                .map(String::from)
                .collect(),
        }
    }

    /// Generator and memspin on two veth pairs joined by a router namespace.
    #[track_caller]
    fn routed() -> XdpTopology {
        let srv = Netns::new("xsrv");
        let gen_ns = Netns::new("xgen");
        let router = Netns::new("xrt");
        veth(&gen_ns, "xg0", &router, "rg0", 1);
        veth(&srv, "xs0", &router, "rs0", 1);
        router.ip(&["addr", "add", "10.78.0.1/24", "dev", "rg0"]);
        router.ip(&["addr", "add", "10.77.0.1/24", "dev", "rs0"]);
        let ok = router
            .command("sysctl")
            .args(["-qw", "net.ipv4.ip_forward=1"])
            .status()
            .expect("sysctl");
        assert!(ok.success());
        let memspin = start_memspin(
            &srv,
            &[
                "--net",
                "xdp",
                "--iface",
                "xs0",
                "--ip",
                "10.77.0.2/24",
                "--gateway",
                "10.77.0.1",
                "-p",
                "11211",
                "-t",
                "1",
                "--idle",
                "park",
            ],
        );
        XdpTopology {
            memspin,
            gen_ns,
            router: Some(router),
            _srv_ns: srv,
            link: ["-s", "10.77.0.2:11211", "--net", "xdp", "--iface", "xg0"]
                .into_iter()
                .chain(["--ip", "10.78.0.2/24", "--gateway", "10.78.0.1"])
                .map(String::from)
                .collect(),
        }
    }

    /// The router drops `per_10k` in 10,000 TCP frames arriving on each of its two ends.
    #[track_caller]
    fn drop_tcp_both_ways(&self, per_10k: u32) {
        let router = self.router.as_ref().expect("a routed topology");
        let rules = format!(
            "table netdev loss {{\n\
             chain to_server {{ type filter hook ingress device rg0 priority 0; meta l4proto tcp numgen random mod 10000 < {per_10k} drop; }}\n\
             chain to_client {{ type filter hook ingress device rs0 priority 0; meta l4proto tcp numgen random mod 10000 < {per_10k} drop; }}\n\
             }}\n"
        );
        let path = std::env::temp_dir().join(format!("mslg-loss-{}.nft", router.name));
        std::fs::write(&path, rules).expect("write the rules");
        let ok = router
            .command("nft")
            .arg("-f")
            .arg(&path)
            .status()
            .expect("nft");
        let _ = std::fs::remove_file(&path);
        assert!(ok.success(), "nft -f");
    }

    /// The generator in the generator's namespace with the link arguments and `args`
    /// (bounded by `timeout 60`; `--foreground`, so a signal sent to `timeout` reaches the
    /// generator once, not also through its process group, which a second time would end
    /// it the hard way), its stderr piped.
    fn spawn(&self, args: &[&str]) -> Child {
        self.gen_ns
            .command("timeout")
            .args(["--foreground", "60", LOADGEN])
            .args(&self.link)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run memspin-loadgen")
    }

    /// Runs the generator with `args` (and `-q`); its JSON summary.
    #[track_caller]
    fn loadgen(&mut self, args: &[&str]) -> Value {
        self.loadgen_while(&[&["-q"], args].concat(), |_, _| {})
    }

    /// As [`loadgen`](Self::loadgen) without `-q`, calling `meanwhile` with the running
    /// generator.
    #[track_caller]
    fn loadgen_while(
        &mut self,
        args: &[&str],
        meanwhile: impl FnOnce(&mut Self, &mut Child),
    ) -> Value {
        let json = std::env::temp_dir().join(format!(
            "mslg-xdp-{}-{}.json",
            std::process::id(),
            self.gen_ns.name
        ));
        let json_arg = json.to_str().expect("a UTF-8 path");
        let mut child = self.spawn(&[&["--json", json_arg], args].concat());
        meanwhile(self, &mut child);
        let out = child.wait_with_output().expect("memspin-loadgen's exit");
        assert!(
            out.status.success(),
            "memspin-loadgen {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&json).expect("the JSON summary");
        let _ = std::fs::remove_file(&json);
        serde_json::from_str(&text).expect("JSON")
    }

    /// memspin's `memspin_forwarded` (direct topology), asked by the generator namespace's
    /// kernel: it takes the address 10.78.0.3 on `xg0` for the question only, since a run
    /// refuses an interface where the kernel has an address of the link. The kernel's
    /// frames need whole checksums: memspin drops those left to offload (docs/af_xdp.md).
    #[track_caller]
    fn forwarded(&self) -> u64 {
        let ok = self
            .gen_ns
            .command("ethtool")
            .args(["-K", "xg0", "tx", "off"])
            .status()
            .expect("ethtool (Debian package ethtool) must be installed");
        assert!(ok.success(), "ethtool -K xg0 tx off");
        self.gen_ns
            .ip(&["addr", "add", "10.78.0.3/24", "dev", "xg0"]);
        let n = memspin_stat(&self.gen_ns, "10.78.0.200:11211", "memspin_forwarded");
        self.gen_ns
            .ip(&["addr", "del", "10.78.0.3/24", "dev", "xg0"]);
        n
    }

    /// What `ip link show xg0` says in the generator's namespace.
    fn client_link(&self) -> String {
        let out = self
            .gen_ns
            .command("ip")
            .args(["-d", "link", "show", "xg0"])
            .output()
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Whether `ip -d link show` output shows an XDP program attached.
fn has_xdp(link: &str) -> bool {
    link.contains("prog/xdp")
}

/// Reads the running generator's stderr until the first progress line of its window, then
/// keeps passing it on to the test's stderr from a thread (so it never blocks on a full
/// pipe, and a failure shows what it said).
#[track_caller]
fn wait_for_window(child: &mut Child) {
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = BufReader::new(stderr).lines();
    let in_window = lines.by_ref().map_while(Result::ok).any(|line| {
        eprintln!("{line}");
        line.contains("] run")
    });
    assert!(in_window, "the generator ended before its window");
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
}

/// What every AF_XDP run must show (as [`assert_clean_bypass_run`] for TAP).
#[track_caller]
fn assert_clean_xdp_run(v: &Value) {
    assert_eq!(v["config"]["net"], "xdp", "{v}");
    assert_eq!(v["timestamps"]["source"], "device");
    let replies = v["timestamps"]["replies"].as_u64().unwrap();
    assert!(replies > 100, "only {replies} replies");
    assert_eq!(v["timestamps"]["tx_kernel"], replies, "every send stamped");
    assert_eq!(v["timestamps"]["rx_kernel"], replies, "every reply stamped");
    assert!(v["recovery"]["probes"].is_u64(), "{}", v["recovery"]);
    assert_eq!(v["errors"]["total"], 0, "{}", v["errors"]);
    assert_eq!(v["verify"]["mismatches"], 0, "{}", v["verify"]);
    assert_eq!(v["verify"]["lost"], 0, "{}", v["verify"]);
    assert!(v["verify"]["checked"].as_u64().unwrap() > 0);
    assert_eq!(
        v["prefill"]["errors"], 0,
        "prefill {}, recovery {}, warnings {}",
        v["prefill"], v["recovery"], v["warnings"]
    );
    assert_eq!(v["latency_us"]["generator_delay"]["count"], replies);
}

const XDP_VERIFY: [&str; 8] = [
    "--keys",
    "2000",
    "--prefill",
    "--verify",
    "--get-ratio",
    "0.8",
    "--warmup",
    "0.2",
];

#[test]
fn xdp_closed_and_open_loops_verify_every_value() {
    let _serial = one_at_a_time();
    let mut topo = XdpTopology::direct(1);
    let closed =
        topo.loadgen(&[&XDP_VERIFY[..], &["-c", "4", "--pipeline", "4", "-d", "1"]].concat());
    assert_eq!(closed["mode"], "closed");
    assert_clean_xdp_run(&closed);
    // Far below what the closed loop just carried over these connections.
    let open =
        topo.loadgen(&[&XDP_VERIFY[..], &["-c", "4", "--rate", "300", "-d", "1.5"]].concat());
    assert_eq!(open["mode"], "open");
    assert_clean_xdp_run(&open);
    assert_eq!(
        open["open_loop"]["saturated"], false,
        "{}",
        open["open_loop"]
    );
    // Each run detached its program as it ended (and closed its socket: the second run
    // bound the queue the first had, which a live socket would hold, EBUSY).
    assert!(!has_xdp(&topo.client_link()), "{}", topo.client_link());
}

// Thread i on queue i: a veth hands a frame to the peer's receive queue of the sender's
// transmit queue, so memspin's worker i gets thread i's connections and answers on queue
// i. Thread 1 never asks for the server's MAC: the set-up resolved it from queue 0 and
// taught its table, so memspin's worker 1 sees no ARP at all (a thread that had to ask
// would send its request on its own queue, to worker 1).
#[test]
fn xdp_two_threads_on_two_queues_verify_every_value() {
    let _serial = one_at_a_time();
    let mut topo = XdpTopology::direct(2);
    let v = topo.loadgen(
        &[
            &XDP_VERIFY[..],
            &["-t", "2", "-c", "8", "--pipeline", "2", "-d", "1"],
        ]
        .concat(),
    );
    assert_eq!(v["config"]["threads"], 2);
    assert_clean_xdp_run(&v);
    let report = topo.memspin.stop_and_report();
    assert!(
        control_frames(&report, 0) >= 1,
        "the set-up's ARP:\n{report}"
    );
    assert_eq!(control_frames(&report, 1), 0, "{report}");
}

// Over a veth thread i's frames reach memspin's queue i, so worker i: each thread's
// connections all land on one worker, and --steer keeps them (the probe says so, nothing is
// assumed). Each key then goes only to its owner's connections: nothing is forwarded. The
// same run unsteered is forwarded (a connection's keys are anyone's).
#[test]
fn xdp_steered_two_threads_are_never_forwarded() {
    let _serial = one_at_a_time();
    let mut topo = XdpTopology::direct(2);
    let args = [
        &XDP_VERIFY[..],
        &["-t", "2", "-c", "8", "--pipeline", "2", "-d", "1"],
    ]
    .concat();
    let before = topo.forwarded();
    let v = topo.loadgen(&[&args[..], &["--steer"]].concat());
    assert_clean_xdp_run(&v);
    assert_eq!(v["config"]["steer"], true);
    assert_eq!(v["steer_connections"], serde_json::json!([4, 4]), "{v}");
    let after = topo.forwarded();
    assert_eq!(after, before, "steered, yet forwarded");
    let v = topo.loadgen(&args);
    assert_clean_xdp_run(&v);
    assert!(
        topo.forwarded() > after,
        "an unsteered run was never forwarded"
    );
}

// memspin stopped for 500 ms in a steered window over AF_XDP: requests time out (200 ms),
// their connections are reset and reopened, and each reopened connection is asked again
// before it carries keys (a thread's frames reach one queue, so one worker, but the probe
// says so rather than assuming it). Once memspin resumes the keys still go only to their
// owners: nothing forwarded, no value wrong.
#[test]
fn xdp_steered_connections_reopened_after_a_stall_land_on_their_workers() {
    let _serial = one_at_a_time();
    let mut topo = XdpTopology::direct(2);
    let before = topo.forwarded();
    let args = [&["-t", "2"][..], &STEERED_STALL[..]].concat();
    let v = topo.loadgen_while(&args, |topo, child| {
        wait_for_window(child);
        stall(&topo.memspin);
    });
    assert_steered_run_outlived_the_stall(&v);
    assert_eq!(
        topo.forwarded(),
        before,
        "a reopened connection was forwarded"
    );
}

// One thread on a veth reaches only memspin's worker 0 (its queue 0): worker 1's share never
// fills, and the generator stops after its attempts with an error that says why, not a hang
// or a run that forwards.
#[test]
fn xdp_steered_one_thread_against_two_workers_is_a_clear_error() {
    let _serial = one_at_a_time();
    let topo = XdpTopology::direct(2);
    let started = std::time::Instant::now();
    let out = topo
        .spawn(&["-q", "--steer", "-c", "2", "-d", "1", "--keys", "1000"])
        .wait_with_output()
        .expect("memspin-loadgen's exit");
    assert_refused(&out, "does not spread connections");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("had [1, 0] of the [1, 1]"), "{stderr}");
    // 2 × 32 attempts of a handshake and a probe each, far inside the 20 s bound.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn xdp_a_thousand_connections_verify_every_value() {
    let _serial = one_at_a_time();
    let mut topo = XdpTopology::direct(1);
    let v = topo.loadgen(&[
        "-c",
        "1000",
        "--rate",
        "2000",
        "-d",
        "1.5",
        "--warmup",
        "0.5",
        "--keys",
        "5000",
        "--prefill",
        "--verify",
        "--get-ratio",
        "0.8",
    ]);
    assert_eq!(v["config"]["connections"], 1000);
    assert_clean_xdp_run(&v);
}

// A server stopped for 300 ms in the window: the requests due meanwhile wait, and the
// corrected latency (from their intended send times) shows the stall; replies are still
// all there once it resumes.
#[test]
fn xdp_a_stopped_server_shows_in_the_corrected_tail() {
    let _serial = one_at_a_time();
    let mut topo = XdpTopology::direct(1);
    let stall = Duration::from_millis(300);
    let v = topo.loadgen_while(
        &[
            "-c",
            "4",
            "--rate",
            "1000",
            "-d",
            "2",
            "--warmup",
            "0.2",
            "--keys",
            "1000",
            "--interval",
            "200",
        ],
        |topo, child| {
            wait_for_window(child);
            let pid = topo.memspin.child.id() as libc::pid_t;
            // SAFETY: kill(2) on our own child's pid, which has not been waited for.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            std::thread::sleep(stall);
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        },
    );
    let max_us = v["latency_us"]["corrected"]["all"]["max"].as_f64().unwrap();
    // A request due as the stall began waits all of it (less one inter-arrival gap).
    assert!(
        max_us >= 0.8 * stall.as_micros() as f64,
        "corrected max {max_us} µs for a {stall:?} stall"
    );
    assert_eq!(v["errors"]["total"], 0, "{}", v["errors"]);
}

// 1 in 100 TCP frames dropped each way by the router (netfilter there; XDP on the ends
// takes frames before netfilter): loss recovery on both sides brings every value through.
#[test]
fn xdp_loss_both_ways_loses_no_value() {
    let _serial = one_at_a_time();
    let mut topo = XdpTopology::routed();
    topo.drop_tcp_both_ways(100);
    let v = topo.loadgen(&[&XDP_VERIFY[..], &["-c", "16", "--rate", "2000", "-d", "2"]].concat());
    assert_clean_xdp_run(&v);
    let recovery = &v["recovery"];
    let acted = recovery["probes"].as_u64().unwrap() + recovery["resends"].as_u64().unwrap();
    // About 4,000 requests and as many replies, 1 % of each lost: dozens to repair.
    assert!(acted > 0, "the generator recovered nothing: {recovery}");
}

#[test]
fn xdp_program_is_removed_on_sigint_and_a_killed_runs_program_is_replaced() {
    let _serial = one_at_a_time();
    let mut topo = XdpTopology::direct(1);
    // SIGINT in the window: the run ends early, reports, and detaches.
    let v = topo.loadgen_while(
        &[
            "-c",
            "4",
            "--rate",
            "500",
            "-d",
            "30",
            "--keys",
            "1000",
            "--interval",
            "200",
        ],
        |topo, child| {
            wait_for_window(child);
            assert!(has_xdp(&topo.client_link()), "attached while running");
            // `timeout` passes the signal on to the generator.
            // SAFETY: kill(2) on our own child's pid, which has not been waited for.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        },
    );
    assert!(v["ops"].as_u64().unwrap() > 0);
    assert!(
        v["duration_s"].as_f64().unwrap() < 20.0,
        "{}",
        v["duration_s"]
    );
    assert!(!has_xdp(&topo.client_link()), "{}", topo.client_link());

    // SIGKILL leaves the program; the next run replaces it and detaches its own.
    let mut child = topo
        .gen_ns
        .command(LOADGEN)
        .args(&topo.link)
        .args([
            "-c",
            "2",
            "--rate",
            "200",
            "-d",
            "30",
            "--keys",
            "1000",
            "--interval",
            "200",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run memspin-loadgen");
    wait_for_window(&mut child);
    let _ = child.kill();
    let _ = child.wait();
    let left = topo.client_link();
    assert!(has_xdp(&left) && left.contains("memspin_xskc"), "{left}");
    // The next run binds queue 0 again (the killed run's socket closed with its process).
    let v = topo.loadgen(&["-c", "2", "--rate", "200", "-d", "0.5", "--keys", "1000"]);
    assert_eq!(v["errors"]["total"], 0, "{}", v["errors"]);
    assert!(!has_xdp(&topo.client_link()), "{}", topo.client_link());
}

#[test]
fn xdp_bad_arguments_and_missing_rights_are_clear_errors() {
    let _serial = one_at_a_time();
    let gen_ns = Netns::new("xargs");
    let peer = Netns::new("xpeer");
    veth(&gen_ns, "xg0", &peer, "xp0", 1);
    let xdp = ["--net", "xdp", "--ip", "10.78.0.2/24"];
    let run = |nobody: bool, args: &[&str]| {
        let mut cmd = gen_ns.command("timeout");
        cmd.arg("20");
        if nobody {
            cmd.args([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]);
        }
        cmd.arg(LOADGEN)
            .args(["-s", "10.78.0.200:11211", "-d", "1", "-q"])
            .args(args)
            .output()
            .expect("run memspin-loadgen")
    };
    assert_refused(
        &run(false, &[&xdp[..], &["--iface", "nosuch0"]].concat()),
        "--iface nosuch0: no such interface",
    );
    assert_refused(
        &run(true, &[&xdp[..], &["--iface", "xg0"]].concat()),
        "needs root",
    );
    assert_refused(
        &run(
            false,
            &[&xdp[..], &["--iface", "xg0", "-t", "2", "-c", "2"]].concat(),
        ),
        "has 1 receive queue(s) and --threads 2 needs one per thread",
    );
    // Nobody answers for the server: the set-up says so instead of hanging.
    assert_refused(
        &run(false, &[&xdp[..], &["--iface", "xg0"]].concat()),
        "no answer to ARP",
    );
    gen_ns.ip(&["addr", "add", "10.78.0.2/24", "dev", "xg0"]);
    assert_refused(
        &run(false, &[&xdp[..], &["--iface", "xg0"]].concat()),
        "already in use by the kernel on xg0",
    );
    // None of these left a program behind.
    let out = gen_ns
        .command("ip")
        .args(["-d", "link", "show", "xg0"])
        .output()
        .unwrap();
    let link = String::from_utf8_lossy(&out.stdout);
    assert!(!has_xdp(&link), "{link}");
    // A memspin server serving on the interface: its program is not the generator's to
    // replace, and it stays.
    let mut memspin = start_memspin(
        &gen_ns,
        &[
            "--net",
            "xdp",
            "--iface",
            "xg0",
            "--ip",
            "10.78.0.9/24",
            "--idle",
            "park",
        ],
    );
    let out = run(
        false,
        &["--net", "xdp", "--ip", "10.78.0.3/24", "--iface", "xg0"],
    );
    assert_refused(&out, "another XDP program");
    let out = gen_ns
        .command("ip")
        .args(["-d", "link", "show", "xg0"])
        .output()
        .unwrap();
    let link = String::from_utf8_lossy(&out.stdout);
    assert!(
        has_xdp(&link) && link.contains("name memspin_xsk "),
        "the server's program stays: {link}"
    );
    assert!(!link.contains("memspin_xskc"), "{link}");
    memspin.stop_and_report();
}
