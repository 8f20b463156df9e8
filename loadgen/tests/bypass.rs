//! The kernel-bypass client (`--net tap`) end to end: memspin (its built binary, `cargo build
//! -p server`, or `$MEMSPIN`) serves on a TAP device in one network namespace, the generator
//! runs on a TAP device of its own in another, and a veth pair joins the two namespaces, whose
//! kernels forward between their TAP device and veth end (as `scripts/veth-pair.sh` sets up):
//!
//! ```text
//! memspin 10.77.0.2 ─ ms0 (10.77.0.1) ─ vs0 10.79.0.1 ═veth═ vg0 10.79.0.2 ─ lg0 (10.78.0.1) ─ generator 10.78.0.2
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

/// memspin, killed on drop.
struct Memspin(Child);

impl Drop for Memspin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The two namespaces, the veth pair, the generator's TAP device and memspin serving.
/// Field order is drop order: memspin first, then the namespaces.
struct Topology {
    memspin: Memspin,
    gen_ns: Netns,
    _srv_ns: Netns,
}

impl Topology {
    #[track_caller]
    fn new() -> Topology {
        Topology::with_queues(1)
    }

    /// With a generator TAP device of `queues` queues (multi-queue when more than one).
    #[track_caller]
    fn with_queues(queues: usize) -> Topology {
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
        let mut child = srv
            .command(memspin_bin().to_str().expect("a UTF-8 path"))
            .args(["--net", "tap", "--iface", "ms0", "--ip", "10.77.0.2/24"])
            .args(["--host-ip", "10.77.0.1/24", "--gateway", "10.77.0.1"])
            .args(["-p", "11211", "-t", "1", "--idle", "park"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start memspin");
        let stdout = child.stdout.take().expect("piped stdout");
        let memspin = Memspin(child);
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
        Topology {
            memspin,
            gen_ns,
            _srv_ns: srv,
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
            .args(["60", LOADGEN, "-s", "10.77.0.2:11211", "--net", "tap"])
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
        let _ = topo.memspin.0.kill();
        let _ = topo.memspin.0.wait();
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
