//! Test support: start the `memspin` binary, network namespaces that clean up after
//! themselves, and a small blocking binary-protocol client.

#![allow(dead_code)]

pub mod abuse;
pub mod differential;
pub mod hostile;
pub mod ping;
pub mod redis;
pub mod routed;
pub mod verify;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use protocol::binary::{Opcode, RequestRepr, ResponseRepr, Status, StoreExtras};

pub mod veth;

/// memspin's arguments for kernel sockets on 127.0.0.1, a free port, `--idle park`.
pub const KERNEL_ARGS: &[&str] = &[
    "--net",
    "kernel",
    "-l",
    "127.0.0.1",
    "-p",
    "0",
    "--idle",
    "park",
];

/// memspin on a TAP device it creates in a test's namespace, `--idle park` (as [`KERNEL_ARGS`]
/// for kernel sockets). [`TAP`] is the usual one; a test with another link changes fields:
/// `Tap { ips: &["fd77::2/64"], host_ips: &["fd77::1/64"], ..TAP }.args()`.
#[derive(Debug, Clone, Copy)]
pub struct Tap<'a> {
    /// The device (`--iface`).
    pub iface: &'a str,
    /// memspin's own addresses (`--ip`, one each).
    pub ips: &'a [&'a str],
    /// The kernel side's addresses (`--host-ip`, one each; `none`: memspin sets none).
    pub host_ips: &'a [&'a str],
    /// The idle policy (`--idle`); `None`: the path's default.
    pub idle: Option<&'a str>,
}

/// Device `ms0`, memspin at 10.77.0.2/24 ([`TAP_SERVER`]), the kernel side at 10.77.0.1/24,
/// `--idle park`.
pub const TAP: Tap<'static> = Tap {
    iface: "ms0",
    ips: &["10.77.0.2/24"],
    host_ips: &["10.77.0.1/24"],
    idle: Some("park"),
};

/// Where clients reach memspin started with [`TAP`].
pub const TAP_SERVER: &str = "10.77.0.2:11211";

impl<'a> Tap<'a> {
    /// memspin's arguments for this device.
    pub fn args(&self) -> Vec<&'a str> {
        let mut args = vec!["--net", "tap", "--iface", self.iface];
        for ip in self.ips {
            args.extend(["--ip", ip]);
        }
        for host_ip in self.host_ips {
            args.extend(["--host-ip", host_ip]);
        }
        if let Some(idle) = self.idle {
            args.extend(["--idle", idle]);
        }
        args
    }
}

/// A network namespace created for one test and deleted when dropped (also on panic).
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates `memspin-t<pid>-<n>` with loopback up. The first call in a process deletes the
    /// namespaces of test processes that no longer exist: `Drop` covers a panic, but a test
    /// binary that was killed (a timeout, SIGKILL) leaves its namespaces behind.
    #[track_caller]
    pub fn new() -> Netns {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        static REAPED: std::sync::Once = std::sync::Once::new();
        REAPED.call_once(reap_orphaned_namespaces);
        let name = format!(
            "memspin-t{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        run("ip", &["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// Moves the calling thread (and threads it starts later) into this namespace.
    #[track_caller]
    pub fn enter(&self) {
        let path = format!("/var/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).expect("open the namespace file");
        use std::os::fd::AsRawFd;
        // SAFETY: setns(2) on a valid namespace descriptor; it affects only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }

    /// A command run inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }
}

/// Deletes every `memspin-t<pid>-<n>` namespace whose process `<pid>` is gone.
fn reap_orphaned_namespaces() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix("memspin-t")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
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
fn run(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {args:?} failed: {status}");
}

/// Raises this process's open-file limit to its hard limit (1,000 clients need the room).
pub fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// A running `memspin` process, stopped with SIGTERM when dropped.
pub struct Server {
    child: Option<Child>,
    /// The `ready` line it printed.
    pub ready_line: String,
    /// Where clients reach it.
    pub addr: SocketAddr,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    /// The RESP address the ready line names (`--resp-port` on kernel sockets, where `0`
    /// picks a free port).
    #[track_caller]
    pub fn resp_addr(&self) -> SocketAddr {
        self.ready_line
            .split("RESP on ")
            .nth(1)
            .and_then(|rest| rest.split([',', ' ']).next())
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("no RESP address in {:?}", self.ready_line))
    }

    /// memspin on kernel sockets on 127.0.0.1, a free port, `--idle park` ([`KERNEL_ARGS`]),
    /// then `extra`.
    #[track_caller]
    pub fn start_kernel(extra: &[&str]) -> Server {
        let mut args = KERNEL_ARGS.to_vec();
        args.extend_from_slice(extra);
        Server::start(None, &args, None)
    }

    /// memspin on [`TAP`] inside `ns`, then `extra`; clients reach it at [`TAP_SERVER`].
    #[track_caller]
    pub fn start_tap(ns: &Netns, extra: &[&str]) -> Server {
        let mut args = TAP.args();
        args.extend_from_slice(extra);
        Server::start(Some(ns), &args, Some(TAP_SERVER.parse().unwrap()))
    }

    /// Starts memspin with `args` (inside `netns` when given) and waits up to 30 s for `ready`.
    /// `addr` is where clients connect; with `--net kernel -p 0` it is read from the ready line.
    #[track_caller]
    pub fn start(netns: Option<&Netns>, args: &[&str], addr: Option<SocketAddr>) -> Server {
        let bin = env!("CARGO_BIN_EXE_memspin");
        let mut cmd = match netns {
            Some(ns) => ns.command(bin),
            None => Command::new(bin),
        };
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn memspin");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            text
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("ready") {
                    let _ = tx.send(line);
                }
            }
        });
        let mut server = Server {
            child: Some(child),
            ready_line: String::new(),
            addr: addr.unwrap_or_else(|| "127.0.0.1:0".parse().unwrap()),
            stderr: Some(stderr),
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => server.ready_line = line,
            Err(_) => {
                let (status, stderr) = server.stop();
                panic!("memspin did not become ready ({status:?}); stderr:\n{stderr}");
            }
        }
        if addr.is_none() {
            let listening = server
                .ready_line
                .split("listening on ")
                .nth(1)
                .and_then(|rest| rest.split([',', ' ']).next())
                .expect("the ready line names the address");
            server.addr = listening.parse().expect("a socket address");
        }
        server
    }

    /// The server's process id (inside a namespace too: `ip netns exec` execs memspin).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGTERM and waits (10 s at most, then SIGKILL); returns the exit status and stderr.
    pub fn stop(&mut self) -> (Option<std::process::ExitStatus>, String) {
        let Some(mut child) = self.child.take() else {
            return (None, String::new());
        };
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        (status, stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A blocking binary-protocol client for tests.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// An owned reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub opcode: Opcode,
    pub status: Status,
    pub opaque: u32,
    pub cas: u64,
    pub extras: Vec<u8>,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

impl Client {
    /// Connects with a 10 s I/O timeout.
    #[track_caller]
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Replaces the 10 s read timeout.
    pub fn set_read_timeout(&mut self, timeout: Duration) {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
    }

    /// Sends one request.
    pub fn send(&mut self, request: &RequestRepr<'_>) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(request.buffer_len());
        request.emit_into(&mut bytes);
        self.stream.write_all(&bytes)
    }

    /// Reads one reply.
    pub fn recv(&mut self) -> std::io::Result<Reply> {
        loop {
            match ResponseRepr::parse(&self.buf, u32::MAX) {
                Ok((r, len)) => {
                    let reply = Reply {
                        opcode: r.opcode,
                        status: r.status,
                        opaque: r.opaque,
                        cas: r.cas,
                        extras: r.extras.to_vec(),
                        key: r.key.to_vec(),
                        value: r.value.to_vec(),
                    };
                    self.buf.drain(..len);
                    return Ok(reply);
                }
                Err(protocol::binary::ParseError::Incomplete { .. }) => {
                    let mut chunk = [0u8; 64 * 1024];
                    let n = read_retrying(&mut self.stream, &mut chunk)?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        e.to_string(),
                    ));
                }
            }
        }
    }

    /// SET `key` = `value`; returns the reply.
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32) -> std::io::Result<Reply> {
        let extras = StoreExtras {
            flags,
            expiration: 0,
        }
        .emit();
        self.send(&RequestRepr {
            opcode: Opcode::Set,
            quiet: false,
            opaque: 1,
            cas: 0,
            vbucket: 0,
            extras: &extras,
            key,
            value,
        })?;
        self.recv()
    }

    /// GET `key`; returns the reply.
    pub fn get(&mut self, key: &[u8]) -> std::io::Result<Reply> {
        self.send(&RequestRepr {
            opcode: Opcode::Get,
            quiet: false,
            opaque: 2,
            cas: 0,
            vbucket: 0,
            extras: &[],
            key,
            value: &[],
        })?;
        self.recv()
    }
}

/// Runs `memccapable` (inside `netns` when given) against `addr`; returns its output, and
/// fails the test unless it reports all tests passed.
#[track_caller]
pub fn memccapable(netns: Option<&Netns>, addr: SocketAddr, flag: &str) -> String {
    let mut cmd = match netns {
        Some(ns) => ns.command("memccapable"),
        None => Command::new("memccapable"),
    };
    let output = cmd
        .args([
            "-h",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
            "-t",
            "10",
            flag,
        ])
        .output()
        .expect("memccapable (Debian package libmemcached-tools) must be installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let passed = text.matches("[pass]").count();
    assert!(
        text.contains("All tests passed") && passed == 27 && output.status.success(),
        "memccapable {flag}: {passed} passed\n{text}"
    );
    text
}

/// Values with every byte value, a value of 1 MiB − 512 bytes, and one just over the 1 MiB
/// item limit that is refused with 0x0003 while the connection stays usable.
#[track_caller]
pub fn check_binary_safe_values_and_limit(addr: SocketAddr) {
    let mut client = Client::connect(addr);
    let all_bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    assert_eq!(
        client.set(b"bytes", &all_bytes, 7).unwrap().status,
        Status::NoError
    );
    let reply = client.get(b"bytes").unwrap();
    assert_eq!(reply.status, Status::NoError);
    assert_eq!(reply.value, all_bytes);
    assert_eq!(reply.extras, 7u32.to_be_bytes());

    let large: Vec<u8> = (0..(1usize << 20) - 512)
        .map(|i| (i * 7 % 256) as u8)
        .collect();
    assert_eq!(
        client.set(b"large", &large, 0).unwrap().status,
        Status::NoError
    );
    assert_eq!(
        client.get(b"large").unwrap().value,
        large,
        "1 MiB - 512 round trip"
    );

    let too_large = vec![0x42u8; (1 << 20) + 1];
    let reply = client.set(b"too-large", &too_large, 0).unwrap();
    assert_eq!(reply.status, Status::ValueTooLarge);
    assert_eq!(
        client.get(b"too-large").unwrap().status,
        Status::KeyNotFound
    );
    // The same connection goes on working.
    assert_eq!(
        client.set(b"after", b"ok", 0).unwrap().status,
        Status::NoError
    );
    assert_eq!(client.get(b"after").unwrap().value, b"ok");
    assert_eq!(client.get(b"large").unwrap().value, large);
}

/// `connections` concurrent clients, each connected at once, each setting and reading back
/// its own keys; every value is checked.
#[track_caller]
pub fn check_many_connections(addr: SocketAddr, connections: usize) {
    raise_fd_limit();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut clients: Vec<Client> = (0..connections).map(|_| Client::connect(addr)).collect();
    for round in 0..2 {
        for (i, client) in clients.iter_mut().enumerate() {
            let key = format!("conn:{i}:{round}");
            let value = format!("value-{i}-{round}-{}", "x".repeat(i % 97));
            let extras = StoreExtras {
                flags: i as u32,
                expiration: 0,
            }
            .emit();
            client
                .send(&RequestRepr {
                    opcode: Opcode::Set,
                    quiet: false,
                    opaque: i as u32,
                    cas: 0,
                    vbucket: 0,
                    extras: &extras,
                    key: key.as_bytes(),
                    value: value.as_bytes(),
                })
                .unwrap();
        }
        // All requests are in flight at once before any reply is read.
        for (i, client) in clients.iter_mut().enumerate() {
            let reply = client.recv().unwrap_or_else(|e| panic!("conn {i}: {e}"));
            assert_eq!((reply.status, reply.opaque), (Status::NoError, i as u32));
        }
        for (i, client) in clients.iter_mut().enumerate() {
            let key = format!("conn:{i}:{round}");
            let value = format!("value-{i}-{round}-{}", "x".repeat(i % 97));
            let reply = client.get(key.as_bytes()).unwrap();
            assert_eq!(reply.status, Status::NoError, "conn {i}");
            assert_eq!(reply.value, value.as_bytes(), "conn {i}");
            assert_eq!(reply.extras, (i as u32).to_be_bytes());
        }
        assert!(Instant::now() < deadline, "took too long");
    }
}

/// A blocking text-protocol client for tests.
pub struct TextClient {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl TextClient {
    /// Connects with a 10 s I/O timeout.
    #[track_caller]
    pub fn connect(addr: SocketAddr) -> TextClient {
        let Client { stream, .. } = Client::connect(addr);
        TextClient {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends raw bytes.
    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends `request`, then `version\r\n` as a marker, and returns every byte answered before
    /// the `VERSION` line (which is dropped). `request` must not close the connection.
    pub fn call(&mut self, request: &[u8]) -> std::io::Result<Vec<u8>> {
        self.send(request)?;
        self.send(b"version\r\n")?;
        loop {
            let at = if self.buf.starts_with(b"VERSION ") {
                Some(0)
            } else {
                find(&self.buf, b"\r\nVERSION ").map(|i| i + 2)
            };
            if let Some(at) = at
                && let Some(end) = find(&self.buf[at..], b"\r\n")
            {
                let reply = self.buf[..at].to_vec();
                self.buf.drain(..at + end + 2);
                return Ok(reply);
            }
            self.fill()?;
        }
    }

    /// Reads one `\r\n`-terminated line (without it).
    pub fn line(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let line = self.buf[..end].to_vec();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            self.fill()?;
        }
    }

    /// Reads exactly `n` bytes.
    pub fn exact(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        while self.buf.len() < n {
            self.fill()?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Reads until the server closes the connection; returns what it sent before.
    pub fn read_to_close(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            match self.fill() {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Ok(std::mem::take(&mut self.buf));
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Ok(std::mem::take(&mut self.buf));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn fill(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 64 * 1024];
        let n = read_retrying(&mut self.stream, &mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// `stream.read`, again when interrupted: a read with a timeout (`SO_RCVTIMEO`) fails with
/// `EINTR` on any signal that wakes the thread, whatever `SA_RESTART` says (signal(7)); a
/// test's client read failed so once in a run of the AF_XDP tests on a shared machine.
fn read_retrying(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Values with every byte value, a value of 1 MiB − 512 bytes, one just over the 1 MiB item
/// limit that is refused with `SERVER_ERROR object too large for cache` while the connection
/// stays usable (the text-protocol twin of [`check_binary_safe_values_and_limit`]), and a
/// 4,000-key `get` line.
#[track_caller]
pub fn check_text_values_and_limit(addr: SocketAddr) {
    let mut client = TextClient::connect(addr);
    let all_bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let mut request = b"set bytes 7 0 4096\r\n".to_vec();
    request.extend_from_slice(&all_bytes);
    request.extend_from_slice(b"\r\n");
    assert_eq!(client.call(&request).unwrap(), b"STORED\r\n");
    client.send(b"get bytes\r\n").unwrap();
    assert_eq!(client.line().unwrap(), b"VALUE bytes 7 4096");
    assert_eq!(client.exact(4096 + 2).unwrap()[..4096], all_bytes[..]);
    assert_eq!(client.line().unwrap(), b"END");

    let large: Vec<u8> = (0..(1usize << 20) - 512)
        .map(|i| (i * 7 % 256) as u8)
        .collect();
    let mut request = format!("set large 0 0 {}\r\n", large.len()).into_bytes();
    request.extend_from_slice(&large);
    request.extend_from_slice(b"\r\n");
    assert_eq!(client.call(&request).unwrap(), b"STORED\r\n");
    client.send(b"get large\r\n").unwrap();
    assert_eq!(
        client.line().unwrap(),
        format!("VALUE large 0 {}", large.len()).as_bytes()
    );
    assert_eq!(
        client.exact(large.len() + 2).unwrap()[..large.len()],
        large[..],
        "1 MiB - 512 round trip"
    );
    assert_eq!(client.line().unwrap(), b"END");

    let too_large = (1usize << 20) + 1;
    let mut request = format!("set too-large 0 0 {too_large}\r\n").into_bytes();
    request.extend(vec![0x42u8; too_large]);
    request.extend_from_slice(b"\r\n");
    assert_eq!(
        client.call(&request).unwrap(),
        b"SERVER_ERROR object too large for cache\r\n"
    );
    // The same connection goes on working.
    assert_eq!(client.call(b"get too-large\r\n").unwrap(), b"END\r\n");
    assert_eq!(
        client.call(b"set after 0 0 2\r\nok\r\n").unwrap(),
        b"STORED\r\n"
    );
    assert_eq!(
        client.call(b"get after\r\n").unwrap(),
        b"VALUE after 0 2\r\nok\r\nEND\r\n"
    );

    // A multi-key get line of ~200 KiB (past memcached's 2048-byte line limit, and larger than
    // a socket buffer), every fifth key held.
    let keys: Vec<String> = (0..4000)
        .map(|i| format!("multi:{i:05}:{}", "k".repeat(40)))
        .collect();
    let mut sets = Vec::new();
    for key in keys.iter().step_by(5) {
        sets.extend_from_slice(format!("set {key} 0 0 {}\r\n{key}\r\n", key.len()).as_bytes());
    }
    let stored = client.call(&sets).unwrap();
    assert_eq!(stored, b"STORED\r\n".repeat(keys.len() / 5));
    let line = format!("get {}\r\n", keys.join(" "));
    assert!(line.len() > 200_000);
    let reply = client.call(line.as_bytes()).unwrap();
    let mut expected = String::new();
    for key in keys.iter().step_by(5) {
        expected.push_str(&format!("VALUE {key} 0 {}\r\n{key}\r\n", key.len()));
    }
    expected.push_str("END\r\n");
    assert_eq!(String::from_utf8_lossy(&reply), expected);
}

/// The first Python 3 that can import pymemcache: `/usr/bin/python3` (where the Debian package
/// installs it), then `python3` on the PATH. Fails the test with what to install otherwise.
#[track_caller]
pub fn python_with_pymemcache() -> String {
    for python in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(python)
            .args(["-c", "import pymemcache"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return python.to_string();
        }
    }
    panic!(
        "python3 with pymemcache is required for this test: install the Debian package \
         python3-pymemcache (scripts/test.sh installs it)"
    );
}

/// A pymemcache session against `addr`: every text command through a real client library.
const PYMEMCACHE_SCRIPT: &str = r#"
import sys
from pymemcache.client.base import Client

host, port = sys.argv[1], int(sys.argv[2])
c = Client((host, port), connect_timeout=5, timeout=5)

def check(what, got, want):
    if got != want:
        print("FAIL %s: got %r, want %r" % (what, got, want))
        sys.exit(1)

check("version", c.version().split(b"-")[0], b"1.6.18")
c.flush_all(noreply=False)
check("set", c.set("k", b"v1", noreply=False), True)
check("get", c.get("k"), b"v1")
check("get miss", c.get("missing"), None)
check("add existing", c.add("k", b"x", noreply=False), False)
check("add new", c.add("k2", b"x", noreply=False), True)
check("replace", c.replace("k2", b"y", noreply=False), True)
check("replace missing", c.replace("k3", b"y", noreply=False), False)
check("append", c.append("k", b"+a", noreply=False), True)
check("prepend", c.prepend("k", b"p+", noreply=False), True)
check("after append/prepend", c.get("k"), b"p+v1+a")
value, cas = c.gets("k")
check("gets", value, b"p+v1+a")
check("cas ok", c.cas("k", b"new", cas, noreply=False), True)
check("cas stale", c.cas("k", b"newer", cas, noreply=False), False)
check("cas missing", c.cas("nope", b"x", 1, noreply=False), None)
check("set many", c.set_many({"m1": b"1", "m2": b"2", "m3": b"3"}, noreply=False), [])
check("get many", c.get_many(["m1", "m2", "m3", "m4"]), {"m1": b"1", "m2": b"2", "m3": b"3"})
check("incr", c.incr("m1", 41, noreply=False), 42)
check("decr", c.decr("m1", 50, noreply=False), 0)
check("incr missing", c.incr("nope", 1, noreply=False), None)
check("touch", c.touch("m2", 100, noreply=False), True)
check("touch missing", c.touch("nope", 100, noreply=False), False)
check("gets many", {k: v[0] for k, v in c.gets_many(["m2", "nope"]).items()}, {"m2": b"2"})
check("delete", c.delete("m3", noreply=False), True)
check("delete missing", c.delete("m3", noreply=False), False)
check("delete many", c.delete_many(["m1", "m2"], noreply=False), True)
c.set("quiet", b"noreply", noreply=True)
check("after noreply set", c.get("quiet"), b"noreply")
binary = bytes(range(256)) * 64
check("binary set", c.set("bin", binary, noreply=False), True)
check("binary get", c.get("bin"), binary)
big = b"x" * (1024 * 1024 - 512)
check("large set", c.set("big", big, noreply=False), True)
check("large get", c.get("big"), big)
try:
    c.set("huge", b"x" * (1024 * 1024 + 1), noreply=False)
    print("FAIL huge: stored")
    sys.exit(1)
except Exception as e:
    check("huge refused", "object too large" in str(e), True)
check("after huge", c.get("k"), b"new")
stats = c.stats()
check("stats curr_items", stats[b"curr_items"] > 0, True)
check("stats cmd_get", stats[b"cmd_get"] > 0, True)
check("stats items", c.stats("items")[b"items:1:number"] > 0, True)
check("stats slabs", c.stats("slabs")[b"active_slabs"], 1)
check("stats settings", c.stats("settings")[b"item_size_max"], 1024 * 1024)
keys = ["many:%d" % i for i in range(500)]
c.set_many({k: k.encode() for k in keys}, noreply=False)
got = c.get_many(keys)
check("500-key get_many", got, {k: k.encode() for k in keys})
check("flush_all", c.flush_all(noreply=False), True)
check("after flush", c.get("k"), None)
c.quit()
print("OK")
"#;

/// Runs the pymemcache session (inside `netns` when given) against `addr`; fails the test with
/// the script's output unless it prints `OK`.
#[track_caller]
pub fn pymemcache_round_trip(netns: Option<&Netns>, addr: SocketAddr) {
    let python = python_with_pymemcache();
    let mut cmd = match netns {
        Some(ns) => ns.command(&python),
        None => Command::new(&python),
    };
    let output = cmd
        .args([
            "-c",
            PYMEMCACHE_SCRIPT,
            &addr.ip().to_string(),
            &addr.port().to_string(),
        ])
        .output()
        .expect("run python3");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && text.trim_end().ends_with("OK"),
        "pymemcache session failed:\n{text}"
    );
}

/// A server process of another project on 127.0.0.1 and a free port (memcached,
/// redis-server), killed when dropped.
pub struct Loopback {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Loopback {
    /// Runs `command` with `port_flag` and a free loopback port appended, and waits (10 s at
    /// most) until it accepts; `what` names it in the messages.
    #[track_caller]
    pub fn spawn(mut command: Command, port_flag: &str, what: &str) -> Loopback {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = command
            .args([port_flag, &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} (its Debian package) must be installed: {e}"));
        let server = Loopback {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(server.addr).is_err() {
            assert!(Instant::now() < deadline, "{what} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A stock memcached on 127.0.0.1 and a free port, killed when dropped.
pub struct Memcached {
    _process: Loopback,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Memcached {
    /// Starts `memcached -U 0` (no UDP) on a free loopback port and waits until it accepts.
    #[track_caller]
    pub fn start() -> Memcached {
        Memcached::start_bin("memcached".as_ref())
    }

    /// [`Memcached::start`] with the memcached binary at `bin` (a name looked up in `PATH`,
    /// or a path).
    #[track_caller]
    pub fn start_bin(bin: &std::ffi::OsStr) -> Memcached {
        Memcached::start_with(bin, &[])
    }

    /// [`Memcached::start_bin`] with more command-line arguments (`-o no_lru_maintainer`).
    #[track_caller]
    pub fn start_with(bin: &std::ffi::OsStr, extra: &[&str]) -> Memcached {
        let mut command = Command::new(bin);
        command
            .args(["-U", "0", "-l", "127.0.0.1", "-u", "root"])
            .args(extra);
        let process = Loopback::spawn(command, "-p", "memcached");
        Memcached {
            addr: process.addr,
            _process: process,
        }
    }
}

/// Meta commands through a real connection: a quiet pipeline closed by `mn`, a 1 MiB − 512
/// value set with `ms` and read back with `mg`, an oversize `ms` refused with the connection
/// kept, and base64 keys.
#[track_caller]
pub fn check_meta_round_trip(addr: SocketAddr) {
    let mut client = TextClient::connect(addr);
    let mut batch = Vec::new();
    for i in 0..100 {
        batch.extend_from_slice(format!("ms meta:{i} 4 q T0 F{i}\r\nv{i:03}\r\n").as_bytes());
    }
    for i in 0..100 {
        batch.extend_from_slice(format!("mg meta:{i} v f q k\r\n").as_bytes());
    }
    batch.extend_from_slice(b"mg meta:missing v q\r\nmn\r\n");
    let reply = client.call(&batch).unwrap();
    let mut expected = String::new();
    for i in 0..100 {
        expected.push_str(&format!("VA 4 f{i} kmeta:{i}\r\nv{i:03}\r\n"));
    }
    expected.push_str("MN\r\n");
    assert_eq!(String::from_utf8_lossy(&reply), expected);

    let large: Vec<u8> = (0..(1usize << 20) - 512)
        .map(|i| (i * 13 % 256) as u8)
        .collect();
    let mut request = format!("ms large {} T0\r\n", large.len()).into_bytes();
    request.extend_from_slice(&large);
    request.extend_from_slice(b"\r\n");
    assert_eq!(client.call(&request).unwrap(), b"HD\r\n");
    client.send(b"mg large s v\r\n").unwrap();
    assert_eq!(
        client.line().unwrap(),
        format!("VA {0} s{0}", large.len()).as_bytes()
    );
    assert_eq!(
        client.exact(large.len() + 2).unwrap()[..large.len()],
        large[..]
    );

    let too_large = (1usize << 20) + 1;
    let mut request = format!("ms huge {too_large} q\r\n").into_bytes();
    request.extend(vec![b'x'; too_large]);
    request.extend_from_slice(b"\r\n");
    assert_eq!(
        client.call(&request).unwrap(),
        b"SERVER_ERROR object too large for cache\r\n"
    );
    assert_eq!(client.call(b"mg huge v\r\n").unwrap(), b"EN\r\n");
    // A binary key (base64 of "\r\n\x00 k") the text commands could not name.
    assert_eq!(
        client.call(b"ms DQoAIGs= 2 b\r\nok\r\n").unwrap(),
        b"HD\r\n"
    );
    assert_eq!(
        client.call(b"mg DQoAIGs= b v k\r\n").unwrap(),
        b"VA 2 kDQoAIGs= b\r\nok\r\n"
    );
}

/// The value of `name` in a text `stats` reply from `addr`.
pub fn text_stat(addr: SocketAddr, name: &str) -> Option<u64> {
    let mut client = TextClient::connect(addr);
    let reply = client.call(b"stats\r\n").ok()?;
    let reply = String::from_utf8_lossy(&reply).into_owned();
    reply.lines().find_map(|line| {
        let mut words = line.split(' ');
        (words.next() == Some("STAT") && words.next() == Some(name))
            .then(|| words.next()?.trim().parse().ok())
            .flatten()
    })
}

/// Fails unless a text `stats settings` reply from `addr` has each of `lines`
/// (`"STAT memspin_ipv6 fd77::2/64"`) as a whole line.
#[track_caller]
pub fn assert_settings(addr: SocketAddr, lines: &[&str]) {
    let reply = TextClient::connect(addr)
        .call(b"stats settings\r\n")
        .expect("stats settings");
    let reply = String::from_utf8_lossy(&reply).into_owned();
    for line in lines {
        assert!(
            reply.lines().any(|l| l.trim_end() == *line),
            "{line:?} in\n{reply}"
        );
    }
}

/// From a stopped server's stderr: every worker's line `worker i: mesh MeshStats { .. }` shows
/// requests forwarded to it and from it (`requests_in`, `requests_out` above zero), and
/// `workers` such lines exist.
#[track_caller]
pub fn assert_forwarded_both_ways(stderr: &str, workers: usize) {
    let field = |line: &str, name: &str| -> u64 {
        line.split(&format!("{name}: "))
            .nth(1)
            .and_then(|rest| rest.split([',', ' ']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(": mesh MeshStats"))
        .collect();
    assert_eq!(lines.len(), workers, "mesh lines in:\n{stderr}");
    for line in lines {
        assert!(field(line, "requests_in") > 0, "{line}");
        assert!(field(line, "requests_out") > 0, "{line}");
    }
}

/// The common part of the two-worker tests of every packet path, run from where the server is
/// reachable: loadgen `--verify` runs (with the patient timeout of
/// [`verify::check_verify_patiently`]) until at least 100,000 binary operations (64
/// connections), a text run, `threads` is 2; then SIGTERM: a clean exit, forwarding in both
/// directions and connections accepted by both workers. Returns the server's stderr.
#[track_caller]
pub fn check_two_workers_under_load(server: &mut Server) -> String {
    use loadgen::client::Protocol;
    let ops = verify::check_verify_patiently(server.addr, Protocol::Binary, 64, 100_000);
    assert!(ops >= 100_000);
    verify::check_verify_patiently(server.addr, Protocol::Text, 16, 10_000);
    assert_eq!(text_stat(server.addr, "threads"), Some(2));
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
    assert_forwarded_both_ways(&stderr, 2);
    assert_every_worker_accepted(&stderr, 2);
    stderr
}

/// From a stopped server's stderr: every worker's connection table accepted connections (the
/// packet path spread the flows over its queues).
#[track_caller]
pub fn assert_every_worker_accepted(stderr: &str, workers: usize) {
    for worker in 0..workers {
        let prefix = format!("worker {worker}: ");
        let accepted = stderr
            .lines()
            .filter(|l| l.contains(&prefix))
            .find_map(|l| l.split("accepted: ").nth(1))
            .and_then(|rest| rest.split([',', ' ']).next())
            .and_then(|n| n.parse::<u64>().ok());
        assert!(
            accepted.is_some_and(|n| n > 0),
            "worker {worker} accepted no connection:\n{stderr}"
        );
    }
}
