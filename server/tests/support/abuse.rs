//! Helpers for the tests of connection lifetimes, admission and neighbours under abuse:
//! memspin on TAP and on AF_XDP (veth) in test namespaces, hand-made TCP segments from a
//! raw socket, packet loss from nftables netdev hooks, connections from chosen source
//! addresses, and the checks several packet paths share.
//!
//! Everything here acts inside namespaces the tests create: raw segments carry source
//! addresses of the test namespace's own subnet and go to memspin's address in it.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netstack::smoltcp::phy::ChecksumCapabilities;
use netstack::smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

use super::{Client, Netns, Server};

/// The kernel side's address on the TAP link.
pub const TAP_HOST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Where memspin serves over AF_XDP (veth) in these tests.
pub const XDP_SERVER: &str = "10.78.0.2:11211";
/// The TAP device memspin creates in the namespace.
pub const TAP_IFACE: &str = super::TAP.iface;

/// memspin over TAP in `ns` ([`super::TAP`]).
#[track_caller]
pub fn start_tap(ns: &Netns, extra: &[&str]) -> Server {
    Server::start_tap(ns, extra)
}

/// memspin on kernel sockets on 127.0.0.1 inside `ns` (its own loopback), any free port.
#[track_caller]
pub fn start_kernel_in(ns: &Netns, extra: &[&str]) -> Server {
    let mut args = vec![
        "--net",
        "kernel",
        "-l",
        "127.0.0.1",
        "-p",
        "11211",
        "--idle",
        "park",
    ];
    args.extend_from_slice(extra);
    Server::start(Some(ns), &args, Some("127.0.0.1:11211".parse().unwrap()))
}

#[track_caller]
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Loads an nftables `script` inside `ns` (`nft -f -`; the Debian package nftables).
#[track_caller]
pub fn nft(ns: &Netns, script: &str) {
    let mut child = ns
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft (Debian package nftables) must be installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft:\n{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Which frames of a TCP port [`drop_tcp`] drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toward {
    /// Frames to the port (`tcp dport`).
    Port,
    /// Frames from the port (`tcp sport`).
    FromPort,
}

/// Where [`drop_tcp`] drops: frames `device` receives (netdev ingress: as if lost on the
/// wire before them) or sends (egress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Ingress,
    Egress,
}

/// Drops, from now on, every frame to (or from) TCP port `port` at `hook` of `device` in
/// `ns`. Use ingress for what memspin sends: an egress drop on the sender's own device
/// is a local drop its TCP sees (and handles otherwise than loss).
#[track_caller]
pub fn drop_tcp(ns: &Netns, device: &str, port: u16, toward: Toward, hook: Hook) {
    let (name, field) = match toward {
        Toward::Port => ("to", "dport"),
        Toward::FromPort => ("from", "sport"),
    };
    let hook = match hook {
        Hook::Ingress => "ingress",
        Hook::Egress => "egress",
    };
    nft(
        ns,
        &format!(
            "table netdev memspin_drop_{name}_{port} {{
                chain c {{ type filter hook {hook} device \"{device}\" priority 0; tcp {field} {port} drop; }}
            }}"
        ),
    );
}

/// A raw IPv4 socket (`IPPROTO_RAW`, so we write the IP header) for hand-made TCP
/// segments; it acts in the network namespace of the thread that made it.
pub struct RawTcp {
    fd: OwnedFd,
}

impl RawTcp {
    /// Opens the socket (needs root).
    #[track_caller]
    pub fn new() -> RawTcp {
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        assert!(fd >= 0, "raw socket: {}", io::Error::last_os_error());
        // SAFETY: a fresh descriptor we own from here on.
        RawTcp {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        }
    }

    /// Sends one TCP segment without payload from `src` to `dst` (a SYN carries an MSS
    /// option), with correct checksums.
    pub fn send(
        &self,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        control: TcpControl,
        seq: u32,
    ) -> io::Result<()> {
        let tcp = TcpRepr {
            src_port: src.port(),
            dst_port: dst.port(),
            control,
            seq_number: TcpSeqNumber(seq as i32),
            ack_number: None,
            window_len: 64_240,
            window_scale: None,
            max_seg_size: (control == TcpControl::Syn).then_some(1460),
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        let ip = Ipv4Repr {
            src_addr: *src.ip(),
            dst_addr: *dst.ip(),
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let mut packet = vec![0u8; ip.buffer_len() + tcp.buffer_len()];
        let caps = ChecksumCapabilities::default();
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut packet[..20]), &caps);
        tcp.emit(
            &mut TcpPacket::new_unchecked(&mut packet[20..]),
            &IpAddress::Ipv4(*src.ip()),
            &IpAddress::Ipv4(*dst.ip()),
            &caps,
        );
        let to = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(dst.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: `packet` and `to` outlive the call, and their lengths are passed.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&to as *const libc::sockaddr_in).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Connects from `src` (an address of the calling thread's namespace) to `dst`, waiting at
/// most `timeout`; the stream has 10 s read and write timeouts.
pub fn connect_from(src: Ipv4Addr, dst: SocketAddrV4, timeout: Duration) -> io::Result<TcpStream> {
    let sockaddr = |addr: SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(addr.ip().octets()),
        },
        sin_zero: [0; 8],
    };
    let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: socket(2) with constant arguments; checked below.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own; the stream closes it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    let local = sockaddr(SocketAddrV4::new(src, 0));
    // SAFETY: `local` is a valid sockaddr_in of `len` bytes.
    if unsafe { libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let remote = sockaddr(dst);
    // SAFETY: as above.
    if unsafe { libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) } != 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(error);
        }
    }
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as libc::c_int) };
    if ready == 0 {
        return Err(io::ErrorKind::TimedOut.into());
    }
    if let Some(error) = stream.take_error()? {
        return Err(error);
    }
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(stream)
}

/// A binary-protocol client on a connected stream.
pub fn client_on(stream: TcpStream) -> Client {
    Client {
        stream,
        buf: Vec::new(),
    }
}

/// Sends `version` on `stream` and reads the answer line; true if it came within the
/// stream's read timeout.
pub fn version_ok(stream: &mut TcpStream) -> bool {
    if stream.write_all(b"version\r\n").is_err() {
        return false;
    }
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            _ => return false,
        }
    }
    line.starts_with(b"VERSION ")
}

/// A new connection to `addr` (from the calling thread's namespace) is accepted and served
/// a `version` within `timeout` each.
pub fn served(addr: SocketAddr, timeout: Duration) -> Option<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    version_ok(&mut stream).then_some(stream)
}

/// Two namespaces joined by a veth pair with `queues` queues: the client end msx0
/// (10.78.0.1/24, transmit checksum offload off) and msx1, which memspin attaches to.
pub struct Veth {
    pub client: Netns,
    pub server: Netns,
}

impl Veth {
    #[track_caller]
    pub fn with_queues(queues: usize) -> Veth {
        let queues = queues.to_string();
        let veth = Veth {
            client: Netns::new(),
            server: Netns::new(),
        };
        let (c, s) = (veth.client.name.as_str(), veth.server.name.as_str());
        #[rustfmt::skip]
        run("ip", &[
            "-n", c, "link", "add", "msx0", "numtxqueues", &queues, "numrxqueues", &queues,
            "type", "veth", "peer", "name", "msx1", "numtxqueues", &queues, "numrxqueues",
            &queues, "netns", s,
        ]);
        run(
            "ip",
            &["-n", c, "addr", "add", "10.78.0.1/24", "dev", "msx0"],
        );
        run("ip", &["-n", c, "link", "set", "msx0", "up"]);
        run("ip", &["-n", s, "link", "set", "msx1", "up"]);
        // memspin verifies every checksum: the client must not leave them to "hardware".
        run(
            "ip",
            &["netns", "exec", c, "ethtool", "-K", "msx0", "tx", "off"],
        );
        veth
    }

    /// memspin on msx1 serving 10.78.0.2 (park).
    #[track_caller]
    pub fn start(&self, extra: &[&str]) -> Server {
        let mut args = vec![
            "--net",
            "xdp",
            "--iface",
            "msx1",
            "--ip",
            "10.78.0.2/24",
            "--idle",
            "park",
        ];
        args.extend_from_slice(extra);
        Server::start(Some(&self.server), &args, Some(XDP_SERVER.parse().unwrap()))
    }
}

/// `--idle-timeout 2` at `addr`, from the calling thread's namespace: a connection that
/// stops sending is closed (it reads EOF) two seconds after its last request (up to six on
/// a busy machine), while a connection sending a request every 200 ms for seven seconds is
/// served throughout.
#[track_caller]
pub fn check_idle_timeout(addr: SocketAddr) {
    let mut idle = served(addr, Duration::from_secs(5)).expect("idle client connects");
    let last_request = Instant::now();
    let closed = std::thread::spawn(move || {
        idle.set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        let mut buf = [0u8; 64];
        let eof = matches!(idle.read(&mut buf), Ok(0));
        (eof, last_request.elapsed())
    });
    let mut busy = served(addr, Duration::from_secs(5)).expect("busy client connects");
    let start = Instant::now();
    let mut requests = 0;
    while start.elapsed() < Duration::from_secs(7) {
        assert!(
            version_ok(&mut busy),
            "the busy connection was served until {:?}",
            start.elapsed()
        );
        requests += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(requests >= 20, "{requests} requests");
    let (eof, after) = closed.join().unwrap();
    assert!(eof, "the idle connection was closed (EOF), after {after:?}");
    assert!(
        after >= Duration::from_millis(1900) && after <= Duration::from_secs(6),
        "the idle connection was closed {after:?} after its last request (timeout 2 s)"
    );
    assert!(version_ok(&mut busy), "the busy connection is still served");
}

/// `-c limit` shared by the workers at `addr`: `limit` connections opened one by one are all
/// served (however the kernel spreads them over the workers), one more is not, and once
/// one closes a new one is served again.
#[track_caller]
pub fn check_shared_limit(addr: SocketAddr, limit: usize) {
    let timeout = Duration::from_secs(5);
    let mut open = Vec::new();
    for i in 0..limit {
        let stream = served(addr, timeout)
            .unwrap_or_else(|| panic!("connection {i} of {limit} was not served"));
        open.push(stream);
    }
    assert!(
        served(addr, Duration::from_secs(2)).is_none(),
        "connection {limit} + 1 was served"
    );
    for stream in &mut open {
        assert!(version_ok(stream), "the admitted connections are all kept");
    }
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if served(addr, Duration::from_secs(1)).is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no room after a connection closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
