//! How memspin ends, on every packet path (TAP and AF_XDP inside namespaces the tests create
//! and remove, kernel sockets on 127.0.0.1), with two workers:
//!
//! - a worker that panics while serving ends the process within a second: status 1, the
//!   cause on stderr, the TAP device gone or the XDP program detached. The panic comes from
//!   the debug build's failpoint (`MEMSPIN_FAILPOINT=panic:1`, fired by SIGUSR1; see
//!   `server/src/worker/failpoint.rs`); a worker that stops looking at the stop flag
//!   (`hang:1`) does not keep the process alive either.
//! - SIGTERM under hostile load (a flood of pipelined requests, clients that never read, huge
//!   announced bodies trickled a byte at a time, hundreds of connections holding half a
//!   request) ends the process within a second with status 0 and its final statistics.
//!
//! Needs root for the TAP and AF_XDP paths, as CI has. Times are measured from the signal to
//! the process's exit and printed. The tests take turns (`one_at_a_time`): each measures a
//! time, and nine servers with hostile clients on a small machine would measure each other.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use support::veth::Veth;
use support::{Client, Netns, TextClient, raise_fd_limit};

/// The promise: from the signal (or the failure) to the process's exit.
const EXIT_WITHIN: Duration = Duration::from_secs(1);

/// Held for the length of a test, so the timing tests of this file run one at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Tap,
    Xdp,
    Kernel,
}

/// Where memspin runs for one test: its namespaces (removed on drop) and arguments.
struct Setup {
    path: Path,
    ns: Option<Netns>,
    veth: Option<Veth>,
}

impl Setup {
    #[track_caller]
    fn new(path: Path) -> Setup {
        match path {
            Path::Tap => Setup {
                path,
                ns: Some(Netns::new()),
                veth: None,
            },
            Path::Xdp => Setup {
                path,
                ns: None,
                veth: Some(Veth::with_queues(2)),
            },
            Path::Kernel => Setup {
                path,
                ns: None,
                veth: None,
            },
        }
    }

    /// Starts memspin with two workers, `extra` arguments and `env`.
    #[track_caller]
    fn start(&self, extra: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut args: Vec<&str> = match self.path {
            Path::Tap => support::TAP.args(),
            Path::Xdp => Veth::server_args(&[]),
            Path::Kernel => support::KERNEL_ARGS.to_vec(),
        };
        args.extend_from_slice(&["-t", "2"]);
        args.extend_from_slice(extra);
        let (netns, addr) = match self.path {
            Path::Tap => (self.ns.as_ref(), Some(support::TAP_SERVER)),
            Path::Xdp => (
                self.veth.as_ref().map(|v| &v.server),
                Some(support::veth::SERVER),
            ),
            Path::Kernel => (None, None),
        };
        Proc::start(netns, &args, env, addr.map(|a| a.parse().unwrap()))
    }

    /// Moves the calling thread (and threads it starts later) to where clients run.
    fn enter_client(&self) {
        match self.path {
            Path::Tap => self.ns.as_ref().unwrap().enter(),
            Path::Xdp => self.veth.as_ref().unwrap().client.enter(),
            Path::Kernel => {}
        }
    }

    /// What memspin held on the system, still there? (the TAP device, the XDP program)
    fn held(&self) -> Option<String> {
        match self.path {
            Path::Tap => {
                let ns = self.ns.as_ref().unwrap();
                let out = Command::new("ip")
                    .args(["-n", &ns.name, "link", "show", "ms0"])
                    .output()
                    .unwrap();
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Path::Xdp => {
                let veth = self.veth.as_ref().unwrap();
                veth.has_xdp().then(|| veth.server_link())
            }
            Path::Kernel => None,
        }
    }
}

/// A memspin process whose stderr is collected as it comes.
struct Proc {
    child: Option<Child>,
    ready_line: String,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<JoinHandle<()>>,
}

impl Proc {
    #[track_caller]
    fn start(
        netns: Option<&Netns>,
        args: &[&str],
        env: &[(&str, &str)],
        addr: Option<SocketAddr>,
    ) -> Proc {
        let bin = env!("CARGO_BIN_EXE_memspin");
        let mut cmd = match netns {
            Some(ns) => ns.command(bin),
            None => Command::new(bin),
        };
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn memspin");
        let stdout = child.stdout.take().unwrap();
        let mut stderr_pipe = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_reader = {
            let stderr = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = stderr_pipe.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    stderr
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk[..n]));
                }
            })
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("ready") {
                    let _ = tx.send(line);
                }
            }
        });
        let mut proc = Proc {
            child: Some(child),
            ready_line: String::new(),
            addr: addr.unwrap_or_else(|| "127.0.0.1:0".parse().unwrap()),
            stderr,
            stderr_reader: Some(stderr_reader),
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => proc.ready_line = line,
            Err(_) => {
                proc.signal(libc::SIGKILL);
                panic!("memspin did not become ready; stderr:\n{}", proc.stderr());
            }
        }
        if addr.is_none() {
            proc.addr = proc
                .ready_line
                .split("listening on ")
                .nth(1)
                .and_then(|rest| rest.split([',', ' ']).next())
                .and_then(|a| a.parse().ok())
                .expect("the ready line names the address");
        }
        proc
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        }
    }

    /// Waits up to `limit` for the exit; returns its status and the time since `since`
    /// (polled every millisecond).
    fn wait_exit(&mut self, since: Instant, limit: Duration) -> (Option<ExitStatus>, Duration) {
        let child = self.child.as_mut().expect("running");
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let elapsed = since.elapsed();
                self.child = None;
                return (Some(status), elapsed);
            }
            if since.elapsed() > limit {
                return (None, since.elapsed());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Everything written to stderr (all of it once the process has exited).
    fn stderr(&mut self) -> String {
        if self.child.is_none()
            && let Some(reader) = self.stderr_reader.take()
        {
            let _ = reader.join();
        }
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Connections on both workers, each having stored and read a key (with two workers, keys
/// on either side are forwarded).
fn warm_up(addr: SocketAddr, connections: usize) -> Vec<Client> {
    (0..connections)
        .map(|i| {
            let mut client = Client::connect(addr);
            let key = format!("warm:{i}");
            client.set(key.as_bytes(), b"v", 0).unwrap();
            assert_eq!(client.get(key.as_bytes()).unwrap().value, b"v");
            client
        })
        .collect()
}

/// Clients that keep requesting until the server goes away (or 20 s pass), counting the
/// replies they get. The threads are left to end on their own (a client of a vanished
/// bypass server waits out its read timeout).
fn keep_busy(clients: Vec<Client>) -> Arc<AtomicU64> {
    let replies = Arc::new(AtomicU64::new(0));
    for (i, mut client) in clients.into_iter().enumerate() {
        let replies = Arc::clone(&replies);
        std::thread::spawn(move || {
            let start = Instant::now();
            let key = format!("busy:{i}");
            while start.elapsed() < Duration::from_secs(20) {
                if client.set(key.as_bytes(), b"x", 0).is_err() {
                    break;
                }
                replies.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    replies
}

fn worker_panic_ends_the_process(path: Path) {
    let _turn = one_at_a_time();
    let setup = Setup::new(path);
    let mut server = setup.start(&[], &[("MEMSPIN_FAILPOINT", "panic:1")]);
    assert!(setup.held().is_some() || path == Path::Kernel);
    setup.enter_client();
    let replies = keep_busy(warm_up(server.addr, 16));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        replies.load(Ordering::Relaxed) > 0,
        "serving when the failpoint fires"
    );

    let fired = Instant::now();
    server.signal(libc::SIGUSR1);
    let (status, took) = server.wait_exit(fired, Duration::from_secs(10));
    let stderr = server.stderr();
    eprintln!("{path:?}: a panic in worker 1 ended the process in {took:?} ({status:?})");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "took {took:?}; stderr:\n{stderr}"
    );
    assert!(took < EXIT_WITHIN, "took {took:?}; stderr:\n{stderr}");
    // The panic hook's report (where, and the message), and the exit's cause line.
    assert!(
        stderr.contains("'memspin-w1'") && stderr.contains("panicked at"),
        "{stderr}"
    );
    assert!(
        stderr.contains("worker 1: panicked: failpoint MEMSPIN_FAILPOINT=panic:1"),
        "{stderr}"
    );
    // The healthy worker stopped and reported.
    assert!(stderr.contains("memspin: worker 0: "), "{stderr}");
    assert_eq!(setup.held(), None, "released; stderr:\n{stderr}");
    if path == Path::Kernel {
        assert!(
            TcpStream::connect(server.addr).is_err(),
            "the port is closed"
        );
    }
}

#[test]
fn tap_a_worker_panic_ends_the_process() {
    worker_panic_ends_the_process(Path::Tap);
}

#[test]
fn xdp_a_worker_panic_ends_the_process() {
    worker_panic_ends_the_process(Path::Xdp);
}

#[test]
fn kernel_a_worker_panic_ends_the_process() {
    worker_panic_ends_the_process(Path::Kernel);
}

/// A worker that never looks at the stop flag again (stuck in one long operation) does not
/// keep the process: SIGTERM ends it within a second, status 1 naming that worker, with the
/// XDP program detached and the TAP device gone.
fn a_stuck_worker_does_not_hold_the_exit(path: Path) {
    let _turn = one_at_a_time();
    let setup = Setup::new(path);
    let mut server = setup.start(&[], &[("MEMSPIN_FAILPOINT", "hang:1")]);
    setup.enter_client();
    drop(warm_up(server.addr, 4));
    server.signal(libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(300));
    let stopped = Instant::now();
    server.signal(libc::SIGTERM);
    let (status, took) = server.wait_exit(stopped, Duration::from_secs(10));
    let stderr = server.stderr();
    eprintln!("{path:?}: SIGTERM with worker 1 stuck ended the process in {took:?}");
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{stderr}");
    assert!(took < EXIT_WITHIN, "took {took:?}; stderr:\n{stderr}");
    assert!(
        stderr.contains("worker 1 did not stop within 500 ms"),
        "{stderr}"
    );
    assert!(stderr.contains("memspin stopped; final stats"), "{stderr}");
    assert_eq!(setup.held(), None, "released; stderr:\n{stderr}");
}

#[test]
fn tap_a_stuck_worker_does_not_hold_the_exit() {
    a_stuck_worker_does_not_hold_the_exit(Path::Tap);
}

#[test]
fn xdp_a_stuck_worker_does_not_hold_the_exit() {
    a_stuck_worker_does_not_hold_the_exit(Path::Xdp);
}

#[test]
fn kernel_a_stuck_worker_does_not_hold_the_exit() {
    a_stuck_worker_does_not_hold_the_exit(Path::Kernel);
}

/// Clients doing their worst, each in its own thread, until stopped (or 30 s pass).
struct Hostile {
    stop: Arc<AtomicBool>,
    /// Bytes the flood and the non-readers managed to send.
    sent: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
    /// Connections holding half a request, kept open.
    _half: Vec<TcpStream>,
}

/// A binary request header (magic 0x80): opcode, key and extras lengths, body length.
fn binary_header(opcode: u8, key_len: u16, extras_len: u8, body_len: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0] = 0x80;
    h[1] = opcode;
    h[2..4].copy_from_slice(&key_len.to_be_bytes());
    h[4] = extras_len;
    h[8..12].copy_from_slice(&body_len.to_be_bytes());
    h
}

impl Hostile {
    fn start(addr: SocketAddr) -> Hostile {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut threads = Vec::new();
        let running = {
            let stop = Arc::clone(&stop);
            move || !stop.load(Ordering::Relaxed) && Instant::now() < deadline
        };
        let connect = move || {
            let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
            stream
                .set_write_timeout(Some(Duration::from_millis(100)))
                .ok()?;
            Some(stream)
        };

        // A value worth reading many times. (16 KiB: with two workers a connection may have
        // 1,024 forwarded GETs outstanding, and their replies are not yet bounded in bytes;
        // see docs/limits.md.)
        let mut setup = TextClient::connect(addr);
        let big = vec![b'b'; 16 * 1024];
        let mut set = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
        set.extend_from_slice(&big);
        set.extend_from_slice(b"\r\n");
        assert_eq!(setup.call(&set).unwrap(), b"STORED\r\n");

        // A flood of pipelined binary GETs, as fast as they go; replies read and dropped.
        for i in 0..4 {
            let Some(stream) = connect() else { continue };
            let mut reader = stream.try_clone().unwrap();
            let (write_running, sent) = (running.clone(), Arc::clone(&sent));
            threads.push(std::thread::spawn(move || {
                let running = write_running;
                let mut writer = stream;
                let key = format!("flood:{i}");
                let mut batch = Vec::new();
                for _ in 0..64 {
                    batch.extend_from_slice(&binary_header(
                        0x00,
                        key.len() as u16,
                        0,
                        key.len() as u32,
                    ));
                    batch.extend_from_slice(key.as_bytes());
                }
                while running() {
                    match writer.write(&batch) {
                        Ok(n) => {
                            sent.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(_) => break,
                    }
                }
            }));
            let running = running.clone();
            threads.push(std::thread::spawn(move || {
                reader
                    .set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                let mut sink = vec![0u8; 1 << 16];
                while running() {
                    match reader.read(&mut sink) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(_) => break,
                    }
                }
            }));
        }

        // Clients that ask for the big value over and over and never read a byte.
        for _ in 0..4 {
            let Some(mut stream) = connect() else {
                continue;
            };
            let (running, sent) = (running.clone(), Arc::clone(&sent));
            threads.push(std::thread::spawn(move || {
                let batch = b"get big\r\n".repeat(256);
                while running() {
                    match stream.write(&batch) {
                        Ok(n) => {
                            sent.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(_) => break,
                    }
                }
            }));
        }

        // Bodies announced at (nearly) 4 GiB, trickled a byte every 10 ms: an unknown binary
        // opcode, a binary SET, a text set.
        let mut huge: Vec<Vec<u8>> = vec![
            binary_header(0xee, 0, 0, u32::MAX).to_vec(),
            {
                let mut set = binary_header(0x01, 4, 8, u32::MAX).to_vec();
                set.extend_from_slice(&[0; 8]);
                set.extend_from_slice(b"huge");
                set
            },
            b"set huge 0 0 4294967295\r\n".to_vec(),
        ];
        for head in huge.drain(..) {
            let Some(mut stream) = connect() else {
                continue;
            };
            let running = running.clone();
            threads.push(std::thread::spawn(move || {
                if stream.write_all(&head).is_err() {
                    return;
                }
                while running() {
                    if stream.write_all(b"x").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }));
        }

        // Hundreds of connections that sent half a request and went quiet.
        let half: Vec<TcpStream> = (0..300)
            .filter_map(|_| {
                let mut stream = connect()?;
                stream.write_all(&binary_header(0x00, 8, 0, 8)[..12]).ok()?;
                Some(stream)
            })
            .collect();
        assert!(half.len() >= 250, "{} half-open connections", half.len());

        Hostile {
            stop,
            sent,
            threads,
            _half: half,
        }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

fn sigterm_under_hostile_load(path: Path) {
    let _turn = one_at_a_time();
    let setup = Setup::new(path);
    let mut server = setup.start(&["-c", "2048"], &[]);
    setup.enter_client();
    raise_fd_limit();
    let hostile = Hostile::start(server.addr);
    std::thread::sleep(Duration::from_millis(1000));
    let sent_before = hostile.sent.load(Ordering::Relaxed);
    assert!(sent_before > 0, "the flood is flowing");

    let stopped = Instant::now();
    server.signal(libc::SIGTERM);
    let (status, took) = server.wait_exit(stopped, Duration::from_secs(20));
    let stderr = server.stderr();
    let sent = hostile.sent.load(Ordering::Relaxed);
    hostile.stop();
    eprintln!(
        "{path:?}: SIGTERM under hostile load ({} MB sent) ended the process in {took:?}",
        sent >> 20
    );
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "took {took:?}; stderr:\n{stderr}"
    );
    assert!(took < EXIT_WITHIN, "took {took:?}; stderr:\n{stderr}");
    assert!(stderr.contains("memspin stopped; final stats"), "{stderr}");
    assert!(stderr.contains("STAT curr_connections"), "{stderr}");
    assert_eq!(setup.held(), None, "released; stderr:\n{stderr}");
}

#[test]
fn tap_sigterm_under_hostile_load_exits_within_a_second() {
    sigterm_under_hostile_load(Path::Tap);
}

#[test]
fn xdp_sigterm_under_hostile_load_exits_within_a_second() {
    sigterm_under_hostile_load(Path::Xdp);
}

#[test]
fn kernel_sigterm_under_hostile_load_exits_within_a_second() {
    sigterm_under_hostile_load(Path::Kernel);
}
