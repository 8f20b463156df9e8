//! TAP end to end, inside a network namespace this test creates and always deletes:
//! a kernel `TcpStream` connects to the smoltcp side, data is echoed, and the device we
//! created disappears when its fd closes. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and
//! `ip` from iproute2; without root the test says so and returns.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use netstack::conn::{ConnTable, TableConfig, TableStats};
use netstack::link::{self, LinkConfig};
use netstack::memlink::{Echo, echo};
use netstack::smoltcp::time::Instant;
use netstack::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use netstack::tap::{TapDevice, TapStats};
use netstack::{Poll, Wait};

const PORT: u16 = 11211;
const SERVER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x4d, 0x00, 0x02];

/// A network namespace that exists from `new` until drop, also when the test panics.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Netns {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "memspin-netstack-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let status = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("run ip netns add");
        assert!(status.success(), "ip netns add {name}: {status}");
        Netns { name }
    }
}

/// Moves the calling thread into namespace `name` (setns affects only this thread).
fn enter_netns(name: &str) {
    let file = std::fs::File::open(format!("/var/run/netns/{name}")).expect("open netns file");
    // SAFETY: `file` is an open namespace fd for the whole call; setns only changes the
    // calling thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Serves echo on `tap` until `stop` (bounded to 30 s), parking on the fd when idle.
fn serve(mut tap: TapDevice, stop: Arc<AtomicBool>) -> (TableStats, TapStats) {
    let start = std::time::Instant::now();
    let now = || Instant::from_micros(start.elapsed().as_micros() as i64);
    let config = TableConfig::new(
        SERVER_MAC,
        Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 2), 24),
        PORT,
    );
    let mut table = ConnTable::<Echo>::new(config, &mut tap, now()).expect("table");
    while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
        let ingress = table.poll_ingress(now(), &mut tap, 64);
        table.serve(echo);
        let egress = table.poll_egress(now(), &mut tap);
        if ingress == Poll::Idle && egress == Poll::Idle {
            let delay = table
                .poll_delay(now())
                .map(Duration::from)
                .unwrap_or(Duration::from_millis(5));
            let _: Wait = tap
                .wait(Some(delay.min(Duration::from_millis(5))), &[])
                .expect("poll tap");
        }
    }
    (*table.stats(), *tap.stats())
}

#[test]
fn kernel_client_echoes_through_tap_in_a_namespace() {
    if !is_root() {
        eprintln!("skipped: needs root for ip netns, setns and /dev/net/tun");
        return;
    }
    let netns = Netns::new();
    let ns_name = netns.name.clone();
    // Everything that touches the namespace runs on a thread that entered it.
    let result = thread::spawn(move || {
        enter_netns(&ns_name);

        let name = "mstap0";
        assert!(!link::device_exists(name).unwrap());
        let tap = TapDevice::open(name, false).expect("open tap");
        assert!(tap.created());
        assert_eq!(tap.mtu(), 1500);
        let host_ip = Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 1), 24);
        link::configure(
            name,
            &LinkConfig {
                host_ip: Some(host_ip),
                host_ipv6: None,
                mtu: None,
                tx_queue_len: None,
            },
        )
        .expect("configure");
        let ipv6 = std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"));
        if let Ok(value) = ipv6 {
            assert_eq!(value.trim(), "1");
        }

        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = stop.clone();
            thread::spawn(move || serve(tap, stop))
        };

        let server_addr = SocketAddr::from((Ipv4Addr::new(10, 77, 0, 2), PORT));
        let mut streams = Vec::new();
        for i in 0..3 {
            let mut stream =
                TcpStream::connect_timeout(&server_addr, Duration::from_secs(5)).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            stream.set_nodelay(true).unwrap();
            let message = format!("hello through tap {i}\n");
            stream.write_all(message.as_bytes()).unwrap();
            let mut back = vec![0u8; message.len()];
            stream.read_exact(&mut back).expect("echo");
            assert_eq!(back, message.as_bytes());
            streams.push(stream);
        }
        // A bulk transfer through the 16 KiB buffers.
        let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut writer = streams[0].try_clone().unwrap();
        let to_send = payload.clone();
        let sender = thread::spawn(move || writer.write_all(&to_send).unwrap());
        let mut back = vec![0u8; payload.len()];
        streams[0].read_exact(&mut back).expect("bulk echo");
        sender.join().unwrap();
        assert!(back == payload, "bulk echo differs");
        // Closing: the server closes after our FIN; read returns EOF.
        for mut stream in streams {
            stream.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            stream.read_to_end(&mut rest).expect("read to EOF");
            assert!(rest.is_empty());
        }
        // Nothing listens on another port: the kernel gets a RST from smoltcp.
        let refused = TcpStream::connect_timeout(
            &SocketAddr::from((Ipv4Addr::new(10, 77, 0, 2), 9)),
            Duration::from_secs(5),
        );
        assert_eq!(
            refused.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionRefused
        );

        stop.store(true, Ordering::Relaxed);
        let (table_stats, tap_stats) = server.join().expect("server thread");
        // The TapDevice was dropped with the server thread: the device we created is gone.
        let mut gone = false;
        for _ in 0..100 {
            if !link::device_exists(name).unwrap() {
                gone = true;
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        (table_stats, tap_stats, gone)
    })
    .join();
    drop(netns);
    let (table_stats, tap_stats, gone) = result.expect("namespace thread panicked");
    assert!(
        gone,
        "a TAP device we created must disappear with its last fd"
    );
    assert_eq!(table_stats.accepted, 3, "{table_stats:?}");
    assert_eq!(table_stats.closed, 3, "{table_stats:?}");
    assert_eq!(table_stats.refused, 0);
    assert!(
        tap_stats.rx_frames > 100 && tap_stats.tx_frames > 100,
        "{tap_stats:?}"
    );
    assert_eq!(
        (
            tap_stats.tx_errors,
            tap_stats.tx_eagain,
            tap_stats.tx_nobufs,
            tap_stats.tx_short
        ),
        (0, 0, 0, 0),
        "{tap_stats:?}"
    );
    eprintln!("table {table_stats:?}\ntap {tap_stats:?}");
}

#[test]
fn multi_queue_device_has_one_fd_per_queue_and_goes_away() {
    if !is_root() {
        eprintln!("skipped: needs root for ip netns, setns and /dev/net/tun");
        return;
    }
    let netns = Netns::new();
    let ns_name = netns.name.clone();
    let result = thread::spawn(move || {
        enter_netns(&ns_name);
        let name = "mstapmq0";
        let q0 = TapDevice::open(name, true).expect("queue 0");
        let q1 = TapDevice::open(name, true).expect("queue 1");
        assert!(q0.created() && !q1.created());
        assert!(q0.multi_queue() && q1.multi_queue());
        assert_ne!(q0.fd().as_raw_fd(), q1.fd().as_raw_fd());
        // A single-queue open of a multi-queue device is refused with a typed error.
        let err = TapDevice::open(name, false).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
        link::configure(
            name,
            &LinkConfig {
                host_ip: None,
                host_ipv6: None,
                mtu: Some(9000),
                tx_queue_len: None,
            },
        )
        .expect("configure");
        assert_eq!(link::mtu(name).unwrap(), 9000);
        drop(q0);
        assert!(link::device_exists(name).unwrap(), "one queue still open");
        drop(q1);
        let mut gone = false;
        for _ in 0..100 {
            if !link::device_exists(name).unwrap() {
                gone = true;
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        gone
    })
    .join();
    drop(netns);
    assert!(
        result.expect("namespace thread panicked"),
        "device must go away with its last queue"
    );
}

// Before: a poll whose ring ran dry read the queue again at once, a second `EAGAIN` for every
// wake-up (two empty reads per frame at 10,000 requests/s).
#[test]
fn a_drained_queue_is_read_once_per_timestamp() {
    use netstack::smoltcp::phy::{Device, RxToken};
    if !is_root() {
        eprintln!("skipped: needs root for ip netns, setns and /dev/net/tun");
        return;
    }
    let netns = Netns::new();
    let ns_name = netns.name.clone();
    let result = thread::spawn(move || {
        enter_netns(&ns_name);
        let name = "mstapr0";
        let mut tap = TapDevice::open(name, false).expect("open tap");
        link::configure(
            name,
            &LinkConfig {
                host_ip: Some(Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 1), 24)),
                host_ipv6: None,
                mtu: None,
                tx_queue_len: None,
            },
        )
        .expect("configure");
        // Whatever the kernel sent when the link came up (IPv6 is off; nothing, usually).
        let mut t = 0;
        let mut at = || {
            t += 1;
            Instant::from_micros(t)
        };
        while tap.receive(at()).is_some() {}
        let empty = |tap: &TapDevice| tap.stats().rx_empty_reads;
        let before = empty(&tap);

        let now = at();
        assert!(tap.receive(now).is_none());
        assert_eq!(empty(&tap), before + 1, "the first poll reads");
        assert!(tap.receive(now).is_none());
        assert_eq!(empty(&tap), before + 1, "the same poll does not read again");

        // A frame arrives (the kernel asks for 10.77.0.2's MAC): the next poll reads it, and
        // the empty read that ended its refill stands for the rest of that poll.
        let udp = std::net::UdpSocket::bind("10.77.0.1:0").expect("bind");
        udp.send_to(b"x", "10.77.0.2:9").expect("send");
        assert_eq!(
            tap.wait(Some(Duration::from_secs(5)), &[]).expect("wait"),
            Wait::Readable
        );
        assert!(tap.receive(now).is_none(), "same poll, frame left queued");
        let later = at();
        let (rx, _tx) = tap.receive(later).expect("the frame, at the next poll");
        let len = rx.consume(|frame| frame.len());
        assert!(len >= 42, "an ARP request: {len} bytes");
        while tap.receive(later).is_some() {}
        let after_frame = empty(&tap);
        // Before: the refill after the wake-up read on until the queue was empty, a read
        // for nothing per wake-up; the wait's poll is what finds the queue empty now.
        assert_eq!(
            after_frame,
            before + 1,
            "the wake-up's refill reads the frame only"
        );
        assert_eq!(tap.stats().rx_wake_reads, 1);
        assert!(tap.receive(later).is_none());
        assert_eq!(empty(&tap), after_frame, "drained in this poll already");
        assert!(tap.drained());
        assert!(tap.receive(at()).is_none());
        assert_eq!(empty(&tap), after_frame + 1, "a new poll reads again");
    })
    .join();
    drop(netns);
    result.expect("namespace thread panicked");
}
