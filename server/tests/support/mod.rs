//! Test support: start the `memspin` binary, network namespaces that clean up after
//! themselves, and a small blocking binary-protocol client.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use protocol::binary::{Opcode, RequestRepr, ResponseRepr, Status, StoreExtras};

/// A network namespace created for one test and deleted when dropped (also on panic).
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates `memspin-t<pid>-<n>` with loopback up.
    #[track_caller]
    pub fn new() -> Netns {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
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
                    let n = self.stream.read(&mut chunk)?;
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
