//! AF_XDP for real, on veth pairs whose two ends live in two network namespaces each test
//! creates and always deletes: the client end (10.78.0.1/24, transmit checksum offload
//! off) in one, the end the program and sockets attach to in the other. Kernel `TcpStream`s
//! in the client namespace talk to a smoltcp echo server over the device. Needs root; the
//! tests say so and return without it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use smoltcp::time::Instant;
use smoltcp::wire::{Ipv4Address, Ipv4Cidr};

use super::*;
use crate::conn::{ConnTable, TableConfig, TableStats};
use crate::memlink::{Echo, echo};
use crate::{Poll, Wait};

const SERVER_IFACE: &str = "msx1";
const CLIENT_IFACE: &str = "msx0";
const PORT: u16 = 11211;
/// What the programs in these tests steer: the server end's address and port.
const STEER: Steer = Steer {
    ipv4: Some(std::net::Ipv4Addr::new(10, 78, 0, 2)),
    ipv6: Some(std::net::Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 2)),
    tcp_port: PORT,
    extra_tcp_port: None,
};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[track_caller]
fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces and a veth pair between them, deleted on drop (also on panic).
struct VethPair {
    client_ns: String,
    server_ns: String,
}

impl VethPair {
    /// `queues` rx and tx queues on both ends.
    fn new(queues: u32) -> VethPair {
        VethPair::with_mtu(queues, 1500)
    }

    /// `queues` rx and tx queues and an MTU of `mtu` on both ends.
    fn with_mtu(queues: u32, mtu: u32) -> VethPair {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let pair = VethPair {
            client_ns: format!("memspin-xc-{id}"),
            server_ns: format!("memspin-xs-{id}"),
        };
        run(&["ip", "netns", "add", &pair.client_ns]);
        run(&["ip", "netns", "add", &pair.server_ns]);
        let q = queues.to_string();
        #[rustfmt::skip]
        run(&[
            "ip", "-n", &pair.client_ns, "link", "add", CLIENT_IFACE,
            "numtxqueues", &q, "numrxqueues", &q, "type", "veth", "peer", "name", SERVER_IFACE,
            "numtxqueues", &q, "numrxqueues", &q, "netns", &pair.server_ns,
        ]);
        let (c, s) = (pair.client_ns.as_str(), pair.server_ns.as_str());
        run(&[
            "ip",
            "-n",
            c,
            "addr",
            "add",
            "10.78.0.1/24",
            "dev",
            CLIENT_IFACE,
        ]);
        let mtu = mtu.to_string();
        run(&["ip", "-n", c, "link", "set", CLIENT_IFACE, "mtu", &mtu]);
        run(&["ip", "-n", s, "link", "set", SERVER_IFACE, "mtu", &mtu]);
        run(&["ip", "-n", c, "link", "set", "lo", "up"]);
        run(&["ip", "-n", c, "link", "set", CLIENT_IFACE, "up"]);
        run(&["ip", "-n", s, "link", "set", SERVER_IFACE, "up"]);
        // The client kernel would leave TCP checksums to "hardware" (CHECKSUM_PARTIAL),
        // which smoltcp, verifying every checksum, would drop.
        #[rustfmt::skip]
        run(&["ip", "netns", "exec", c, "ethtool", "-K", CLIENT_IFACE, "tx", "off"]);
        pair
    }

    /// Runs `f` on a thread inside namespace `ns`.
    fn in_ns<R: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> thread::JoinHandle<R> {
        let ns = ns.to_string();
        thread::spawn(move || {
            let file =
                std::fs::File::open(format!("/var/run/netns/{ns}")).expect("open netns file");
            // SAFETY: `file` is an open namespace fd for the whole call; setns changes only
            // the calling thread's network namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }

    fn server<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> thread::JoinHandle<R> {
        Self::in_ns(&self.server_ns, f)
    }

    fn client<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> thread::JoinHandle<R> {
        Self::in_ns(&self.client_ns, f)
    }

    /// `ip link show` of the server end, as text.
    fn server_link(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.server_ns, "link", "show", SERVER_IFACE])
            .output()
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in [&self.client_ns, &self.server_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

struct Served {
    mode: AttachMode,
    zero_copy: bool,
    multi_buffer: bool,
    frags: Frags,
    busy: Option<BusyPollOptions>,
    napi_id: Option<u32>,
    table: TableStats,
    device: XdpStats,
    attached_after: Option<Attached>,
}

/// How an echo test sets up its link and socket.
#[derive(Debug, Clone, Copy)]
struct Setup {
    choice: ModeChoice,
    /// MTU of both veth ends.
    mtu: u32,
    config: XdpConfig,
    busy_poll: Option<BusyPoll>,
}

impl Setup {
    fn plain(choice: ModeChoice) -> Setup {
        Setup {
            choice,
            mtu: 1500,
            config: XdpConfig::default(),
            busy_poll: None,
        }
    }
}

/// Attaches as `setup` says, binds queue 0 and serves echo until `stop` (30 s at most).
fn serve_echo(setup: Setup, stop: Arc<AtomicBool>, ready: Arc<AtomicBool>) -> Served {
    let program = XdpProgram::attach(SERVER_IFACE, setup.choice, STEER).expect("attach");
    let mut device = XdpDevice::bind(&program, 0, &setup.config).expect("bind");
    if let Some(busy) = setup.busy_poll {
        device.set_busy_poll(busy).expect("busy-poll options");
    }
    let start = std::time::Instant::now();
    let now = || Instant::from_micros(start.elapsed().as_micros() as i64);
    let config = TableConfig::new(
        program.mac(),
        Ipv4Cidr::new(Ipv4Address::new(10, 78, 0, 2), 24),
        PORT,
    );
    let mut table = ConnTable::<Echo>::new(config, &mut device, now()).expect("table");
    ready.store(true, Ordering::Release);
    while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
        let ingress = table.poll_ingress(now(), &mut device, 64);
        table.serve(echo);
        let egress = table.poll_egress(now(), &mut device);
        device.flush();
        if ingress == Poll::Idle && egress == Poll::Idle {
            let delay = table
                .poll_delay(now())
                .map(Duration::from)
                .unwrap_or(Duration::from_millis(5));
            let _: Wait = device
                .wait(Some(delay.min(Duration::from_millis(5))), &[])
                .expect("poll");
        }
    }
    device.read_kernel_stats().expect("XDP_STATISTICS");
    let served = Served {
        mode: program.mode(),
        zero_copy: device.zero_copy(),
        multi_buffer: device.multi_buffer(),
        frags: program.frags(),
        busy: device.busy_poll_options().ok(),
        napi_id: device.napi_id(),
        table: *table.stats(),
        device: *device.stats(),
        attached_after: None,
    };
    drop(device);
    program.detach().expect("detach");
    Served {
        attached_after: attached(SERVER_IFACE).expect("query"),
        ..served
    }
}

/// Echoes `bytes` bytes over each of `connections` kernel connections from the client side.
fn echo_round_trips(pair: &VethPair, connections: usize, bytes: usize) {
    pair.client(move || {
        let addr: SocketAddr = "10.78.0.2:11211".parse().unwrap();
        for c in 0..connections {
            let mut stream =
                TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let data: Vec<u8> = (0..bytes).map(|i| (i * 31 + c) as u8).collect();
            let writer = {
                let mut stream = stream.try_clone().unwrap();
                let data = data.clone();
                thread::spawn(move || stream.write_all(&data).expect("write"))
            };
            let mut back = vec![0u8; bytes];
            stream.read_exact(&mut back).expect("read the echo");
            writer.join().unwrap();
            assert!(back == data, "connection {c}: echo differs");
        }
    })
    .join()
    .expect("client");
}

fn wait_until(flag: &AtomicBool) {
    let start = std::time::Instant::now();
    while !flag.load(Ordering::Acquire) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "server not ready"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

fn echo_test(setup: Setup) -> Served {
    let pair = VethPair::with_mtu(1, setup.mtu);
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let server = pair.server({
        let (stop, ready) = (Arc::clone(&stop), Arc::clone(&ready));
        move || serve_echo(setup, stop, ready)
    });
    wait_until(&ready);
    let shown = pair.server_link();
    assert!(
        shown.contains(" xdp"),
        "ip link shows the program:\n{shown}"
    );
    echo_round_trips(&pair, 5, 200_000);
    stop.store(true, Ordering::Relaxed);
    let served = server.join().expect("server");
    assert_eq!(served.attached_after, None, "detached on exit");
    assert!(
        !pair.server_link().contains(" xdp"),
        "{}",
        pair.server_link()
    );
    assert!(served.table.accepted >= 5, "{:?}", served.table);
    let d = served.device;
    eprintln!("{:?} mode, device counters: {d:?}", served.mode);
    assert!(d.rx_frames > 100 && d.tx_frames > 100, "{d:?}");
    assert_eq!(d.rx_invalid, 0, "{d:?}");
    assert_eq!(d.tx_dropped + d.tx_oversize, 0, "{d:?}");
    assert_eq!(d.kernel.rx_dropped + d.kernel.tx_invalid_descs, 0, "{d:?}");
    served
}

#[test]
fn echo_over_veth_native_copy_mode() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let served = echo_test(Setup::plain(ModeChoice::Auto));
    assert_eq!(served.mode, AttachMode::Native, "veth has native XDP");
    assert!(!served.zero_copy, "veth has no zero-copy");
    assert!(!served.multi_buffer);
    assert_eq!(served.frags, Frags::No);
    assert_eq!((served.device.rx_chained, served.device.tx_chained), (0, 0));
    assert_eq!(served.busy.map(|b| b.prefer), Some(false));
    assert_eq!(served.device.busy_polls, 0);
}

#[test]
fn echo_over_veth_generic_mode() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let served = echo_test(Setup::plain(ModeChoice::Generic));
    assert_eq!(served.mode, AttachMode::Generic);
}

/// Frames of MTU 9000 in 2048-byte UMEM frames: every full-sized segment arrives as a chain
/// of six buffers and leaves as a chain of five, in both directions of the echo.
fn jumbo_echo(choice: ModeChoice) -> Served {
    let served = echo_test(Setup {
        mtu: 9000,
        config: XdpConfig {
            frame_size: 2048,
            frame_count: 4096,
            ring_size: 2048,
            zero_copy: ZeroCopy::Auto,
        },
        ..Setup::plain(choice)
    });
    let d = served.device;
    assert!(served.multi_buffer, "bound with XDP_USE_SG");
    assert_eq!(served.frags, Frags::Yes);
    assert!(d.rx_chained > 20 && d.tx_chained > 20, "{d:?}");
    served
}

#[test]
fn jumbo_frames_are_chained_both_ways_native() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let served = jumbo_echo(ModeChoice::Auto);
    assert_eq!(
        served.mode,
        AttachMode::Native,
        "a frags program is taken at MTU 9000"
    );
}

#[test]
fn jumbo_frames_are_chained_both_ways_generic() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let served = jumbo_echo(ModeChoice::Generic);
    assert_eq!(served.mode, AttachMode::Generic);
}

#[test]
fn the_single_buffer_path_takes_no_chains() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    // MTU 3000 in the default 4096-byte frames: one buffer per frame, as before.
    let served = echo_test(Setup {
        mtu: 3000,
        ..Setup::plain(ModeChoice::Auto)
    });
    assert!(!served.multi_buffer);
    assert_eq!(
        served.frags,
        Frags::Yes,
        "the program is ready for any frame size"
    );
    assert_eq!((served.device.rx_chained, served.device.tx_chained), (0, 0));
}

/// Preferred busy polling on veth: the kernel takes the three options, reads them back as
/// set, and the device serves with them, calling recvfrom on every empty rx ring.
#[test]
fn busy_poll_options_are_set_and_serve_on_veth() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let served = echo_test(Setup {
        busy_poll: Some(BusyPoll { budget: 32 }),
        ..Setup::plain(ModeChoice::Auto)
    });
    let busy = served.busy.expect("options read back");
    assert!(busy.prefer, "{busy:?}");
    assert_eq!(busy.usecs, BusyPoll::USECS);
    // This kernel takes SO_BUSY_POLL_BUDGET but cannot report it; where it can, it says 32.
    assert!(matches!(busy.budget, None | Some(32)), "{busy:?}");
    let d = served.device;
    assert!(d.busy_polls > 0, "{d:?}");
    eprintln!("busy polling on veth: NAPI id {:?}", served.napi_id);
}

/// Gives up (or takes back) `CAP_NET_ADMIN` in the calling thread's effective set.
fn set_net_admin(on: bool) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_NET_ADMIN: u32 = 12;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget(2) with a valid header and room for the two data words of version 3.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    assert_eq!(rc, 0, "capget: {}", std::io::Error::last_os_error());
    if on {
        data[0].effective |= 1 << CAP_NET_ADMIN;
    } else {
        data[0].effective &= !(1 << CAP_NET_ADMIN);
    }
    // SAFETY: capset(2) on the calling thread (pid 0) with the data just read, one bit changed.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
}

/// The fallback: a kernel that refuses busy polling (here: the thread gave up CAP_NET_ADMIN,
/// which preferred busy polling needs) leaves the socket as it was, options off, and the
/// device serving without it.
#[test]
fn refused_busy_poll_options_are_undone() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let pair = VethPair::new(1);
    pair.server(|| {
        let program = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, STEER).unwrap();
        let mut device = XdpDevice::bind(&program, 0, &XdpConfig::default()).unwrap();
        let off = BusyPollOptions {
            prefer: false,
            usecs: 0,
            budget: device.busy_poll_options().unwrap().budget,
        };
        assert_eq!(device.busy_poll_options().unwrap(), off);
        set_net_admin(false);
        let refused = device.set_busy_poll(BusyPoll::default());
        set_net_admin(true);
        let e = refused.expect_err("refused without CAP_NET_ADMIN");
        assert!(
            matches!(
                e,
                XdpError::Sys {
                    op: XdpOp::BusyPoll | XdpOp::PreferBusyPoll,
                    errno: libc::EPERM,
                    ..
                }
            ),
            "{e}"
        );
        eprintln!("refused: {e}");
        assert!(e.to_string().contains("BUSY_POLL"), "{e}");
        assert_eq!(device.busy_poll(), None);
        assert_eq!(device.busy_poll_options().unwrap(), off, "undone");
        // A budget of 0 is refused before the kernel is asked.
        assert!(matches!(
            device.set_busy_poll(BusyPoll { budget: 0 }),
            Err(XdpError::Sys {
                op: XdpOp::BusyPollBudget,
                errno: libc::EINVAL,
                ..
            })
        ));
        assert_eq!(device.busy_poll_options().unwrap(), off);
        device
            .set_busy_poll(BusyPoll::default())
            .expect("allowed again");
        assert_eq!(device.busy_poll(), Some(BusyPoll::default()));
    })
    .join()
    .expect("server thread");
}

#[test]
fn a_stale_program_is_replaced_and_a_foreign_one_refused() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let pair = VethPair::new(1);
    pair.server(|| {
        // A run killed in native mode: its program stays attached.
        let killed = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, STEER).unwrap();
        let stale_id = killed.prog_id();
        std::mem::forget(killed);
        assert_eq!(
            attached(SERVER_IFACE).unwrap().map(|a| a.prog_id),
            Some(stale_id)
        );
        let next = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, STEER).unwrap();
        assert_eq!(
            next.replaced(),
            Some(Attached {
                mode: AttachMode::Native,
                prog_id: stale_id
            })
        );
        assert_ne!(next.prog_id(), stale_id);
        assert_eq!(
            attached(SERVER_IFACE).unwrap().map(|a| a.prog_id),
            Some(next.prog_id())
        );
        // Killed in generic mode, restarted in auto: detached, then attached natively.
        drop(next);
        let killed = XdpProgram::attach(SERVER_IFACE, ModeChoice::Generic, STEER).unwrap();
        let stale_id = killed.prog_id();
        std::mem::forget(killed);
        let next = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, STEER).unwrap();
        assert_eq!(
            next.replaced(),
            Some(Attached {
                mode: AttachMode::Generic,
                prog_id: stale_id
            })
        );
        assert_eq!(next.mode(), AttachMode::Native);
        drop(next);
        assert_eq!(attached(SERVER_IFACE).unwrap(), None);

        // Someone else's program is left alone.
        let map = bpf::create_xskmap(1).unwrap();
        let other = bpf::load_named(
            &bpf::steering_program(map.as_raw_fd(), &STEER),
            "other_prog",
            bpf::Frags::No,
        )
        .unwrap();
        let ifindex = crate::sys::if_index(&IfName::new(SERVER_IFACE).unwrap()).unwrap();
        netlink::set_xdp(
            ifindex,
            other.as_raw_fd(),
            netlink::FLAGS_SKB_MODE | netlink::FLAGS_UPDATE_IF_NOEXIST,
            None,
        )
        .unwrap();
        let refused = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, STEER).unwrap_err();
        assert!(
            matches!(
                refused,
                XdpError::ForeignProgram {
                    mode: AttachMode::Generic,
                    ..
                }
            ),
            "{refused}"
        );
        assert!(refused.to_string().contains("xdp off"), "{refused}");
        netlink::set_xdp(
            ifindex,
            -1,
            netlink::FLAGS_SKB_MODE,
            Some(other.as_raw_fd()),
        )
        .unwrap();
        assert_eq!(attached(SERVER_IFACE).unwrap(), None);
    })
    .join()
    .expect("server thread");
}

/// The exit that cannot wait for destructors: detach_all removes what this process attached,
/// and the value's own detach then has nothing left to do.
#[test]
fn detach_all_removes_what_this_process_attached() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let pair = VethPair::new(1);
    pair.server(|| {
        let program = XdpProgram::attach(SERVER_IFACE, ModeChoice::Generic, STEER).unwrap();
        assert!(attached(SERVER_IFACE).unwrap().is_some());
        // Only this namespace's programs: the tests running beside this one keep theirs.
        assert_eq!(detach_all(), 1);
        assert_eq!(attached(SERVER_IFACE).unwrap(), None);
        // Attached again by someone else meanwhile: the stale value must not remove it.
        let next = XdpProgram::attach(SERVER_IFACE, ModeChoice::Generic, STEER).unwrap();
        program.detach().expect("nothing left to detach");
        assert_eq!(
            attached(SERVER_IFACE).unwrap().map(|a| a.prog_id),
            Some(next.prog_id())
        );
        drop(next);
        assert_eq!(attached(SERVER_IFACE).unwrap(), None);
    })
    .join()
    .expect("server thread");
}

#[test]
fn two_queues_bind_two_sockets() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let pair = VethPair::new(2);
    pair.server(|| {
        let program = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, STEER).unwrap();
        assert_eq!(program.rx_queues(), 2);
        let config = XdpConfig {
            frame_size: 2048,
            frame_count: 256,
            ring_size: 128,
            zero_copy: ZeroCopy::Auto,
        };
        let q0 = XdpDevice::bind(&program, 0, &config).expect("queue 0");
        let q1 = XdpDevice::bind(&program, 1, &config).expect("queue 1");
        assert_eq!((q0.queue(), q1.queue()), (0, 1));
        assert_ne!(q0.fd().as_raw_fd(), q1.fd().as_raw_fd());
        assert!(matches!(
            XdpDevice::bind(&program, 2, &config),
            Err(XdpError::NoSuchQueue {
                queue: 2,
                queues: 2,
                ..
            })
        ));
        assert!(matches!(
            XdpDevice::bind(&program, 0, &config),
            Err(XdpError::Sys {
                op: XdpOp::Bind,
                errno: libc::EBUSY,
                ..
            })
        ));
        assert!(matches!(
            XdpDevice::bind(
                &program,
                0,
                &XdpConfig {
                    zero_copy: ZeroCopy::Required,
                    ..config
                }
            ),
            Err(XdpError::Sys {
                op: XdpOp::Bind,
                ..
            })
        ));
        drop((q0, q1));
        // Both queues are free again once the sockets close; the kernel releases a queue
        // from a work queue, so a bind right after a close may still see EBUSY (~20 ms here).
        let t = std::time::Instant::now();
        let again = loop {
            match XdpDevice::bind(&program, 1, &config) {
                Err(XdpError::Sys {
                    errno: libc::EBUSY, ..
                }) if t.elapsed() < Duration::from_secs(5) => {
                    thread::sleep(Duration::from_millis(1))
                }
                other => break other.expect("queue 1 again"),
            }
        };
        let _ = again.fd().as_fd();
    })
    .join()
    .expect("server thread");
}

/// Zero-copy's fallback, the path every veth test takes: veth refuses an `XDP_ZEROCOPY` bind
/// (what a NIC without zero-copy support does), with an errno [`XdpDevice::bind`] recognises,
/// and the default `ZeroCopy::Auto` then binds the same queue in copy mode, for single-buffer
/// frames and for multi-buffer ones (MTU 9000, `XDP_USE_SG`) alike. A NIC that takes
/// zero-copy cannot be had on this machine: that path runs only on real hardware.
#[test]
fn zero_copy_refused_falls_back_to_copy_mode() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    for mtu in [1500, 9000] {
        let pair = VethPair::with_mtu(1, mtu);
        pair.server(move || {
            let program = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, STEER).unwrap();
            let auto = XdpConfig::for_link(16, program.mtu());
            assert_eq!(auto.zero_copy, ZeroCopy::Auto);
            let required = XdpConfig {
                zero_copy: ZeroCopy::Required,
                ..auto
            };
            let not_supported = [libc::EOPNOTSUPP, libc::EINVAL, 524];
            match XdpDevice::bind(&program, 0, &required) {
                Err(XdpError::Sys {
                    op: XdpOp::Bind,
                    errno,
                    ..
                }) if mtu == 1500 && not_supported.contains(&errno) => {}
                // A refused bind with XDP_USE_SG is reported as multi-buffer's refusal.
                Err(XdpError::MultiBufferRefused { errno, .. })
                    if mtu == 9000 && not_supported.contains(&errno) => {}
                Err(other) => panic!("MTU {mtu}: zero-copy refused otherwise: {other}"),
                Ok(_) => panic!("MTU {mtu}: veth took a zero-copy bind"),
            }
            let device = XdpDevice::bind(&program, 0, &auto).expect("the copy-mode fallback");
            assert!(!device.zero_copy(), "MTU {mtu}");
            assert_eq!(device.multi_buffer(), mtu == 9000, "MTU {mtu}");
        })
        .join()
        .expect("server thread");
    }
}

#[test]
fn configs_are_checked() {
    let ok = XdpConfig::default();
    assert!(ok.check().is_ok());
    assert_eq!(ok.max_mtu(), 4096 - 256 - 14 - 4);
    for bad in [
        XdpConfig {
            frame_size: 3000,
            ..ok
        },
        XdpConfig {
            frame_count: 1000,
            ..ok
        },
        XdpConfig {
            frame_count: 64,
            ..ok
        },
        XdpConfig {
            ring_size: 1024,
            ..ok
        },
        XdpConfig {
            ring_size: 3000,
            ..ok
        },
    ] {
        assert!(
            matches!(bad.check(), Err(XdpError::BadConfig { .. })),
            "{bad:?}"
        );
    }
    let small = XdpConfig {
        frame_size: 2048,
        ..ok
    };
    assert!(small.max_mtu() >= 1500);
    // Above one frame: multi-buffer, up to MAX_TX_SPAN frames per transmitted frame.
    assert!(!small.multi_buffer(1774) && small.multi_buffer(1775));
    assert_eq!((small.rx_span(1774), small.tx_span(1774)), (1, 1));
    assert_eq!((small.rx_span(9000), small.tx_span(9000)), (6, 5));
    assert_eq!(small.max_mtu_multi_buffer(), 16 * 2048 - 18);
    assert!(ok.max_mtu_multi_buffer() >= 9216);
    assert_eq!(frags_for(1500), Frags::No);
    assert_eq!(frags_for(1774), Frags::No);
    assert_eq!(frags_for(1775), Frags::Yes);
}

#[test]
fn the_receive_half_holds_two_frames_per_connection() {
    let default = XdpConfig::default();
    let jumbo = 3000;
    assert_eq!(XdpConfig::for_link(1, jumbo), default);
    assert_eq!(XdpConfig::for_link(992, jumbo), default);
    assert_eq!(XdpConfig::for_link(1024, jumbo).frame_count, 8192);
    let small = XdpConfig::for_link(1024, 1500);
    assert_eq!(
        (small.frame_size, small.frame_count, small.ring_size),
        (2048, 8192, 4096)
    );
    assert!(small.max_mtu() >= 1500);
    let many = XdpConfig::for_link(10_064, 1500);
    assert_eq!((many.frame_count, many.ring_size), (65_536, 32_768));
    assert!(many.frame_count as usize / 2 >= 2 * 10_064 + RX_BATCH);
    // MTU 9000: 4096-byte frames, and a packet takes up to three of them.
    let jumbo = XdpConfig::for_link(1024, 9000);
    assert_eq!((jumbo.rx_span(9000), jumbo.tx_span(9000)), (3, 3));
    assert_eq!(
        (jumbo.frame_size, jumbo.frame_count, jumbo.ring_size),
        (4096, 16_384, 8192)
    );
    assert!(jumbo.frame_count as usize / 2 >= 3 * (2 * 1024 + RX_BATCH));
    let most = XdpConfig::for_link(1 << 20, 9000);
    assert_eq!(
        (most.frame_size, most.frame_count, most.ring_size),
        (4096, 1 << 17, 1 << 16)
    );
    for config in [small, many, most] {
        assert!(config.check().is_ok(), "{config:?}");
    }
}

#[test]
fn missing_interfaces_and_bad_names_are_typed() {
    assert!(matches!(
        XdpProgram::attach("no-such-xdp0", ModeChoice::Auto, STEER),
        Err(XdpError::NotFound { .. })
    ));
    assert!(matches!(
        attached("bad name"),
        Err(XdpError::InvalidName(_))
    ));
}

// Frames for the steering program, built byte by byte (checksums are left zero: the program
// reads none, and nothing here reaches a stack).

const OURS: [u8; 4] = [10, 78, 0, 2];
const OTHER: [u8; 4] = [10, 78, 0, 3];
const CLIENT: [u8; 4] = [10, 78, 0, 1];
const ETH_P_IP: u16 = 0x0800;
const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const ICMPV6: u8 = 58;
const OURS6: [u8; 16] = [0xfd, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const OTHER6: [u8; 16] = [0xfd, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];
const CLIENT6: [u8; 16] = [0xfd, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// ff02::1:ff00:2, the solicited-node group of fd78::2.
const GROUP6: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 2];
const ALL_NODES6: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// ARP for IPv4 over Ethernet (`oper` 1 request, 2 reply) with target address `tpa`.
fn arp(oper: u16, tpa: [u8; 4]) -> Vec<u8> {
    let mut arp = vec![0, 1, 0x08, 0x00, 6, 4];
    arp.extend_from_slice(&oper.to_be_bytes());
    arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    arp.extend_from_slice(&CLIENT);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&tpa);
    arp
}

/// An IPv4 packet with `options` (a multiple of 4 bytes) and flags/fragment offset `frag`.
fn ipv4(protocol: u8, dst: [u8; 4], options: &[u8], frag: u16, payload: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let header_len = 20 + options.len();
    let mut ip = vec![0x40 | (header_len / 4) as u8, 0];
    ip.extend_from_slice(&((header_len + payload.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0x12, 0x34]);
    ip.extend_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&[64, protocol, 0, 0]);
    ip.extend_from_slice(&CLIENT);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(options);
    ip.extend_from_slice(payload);
    ip
}

/// An IPv6 packet from the client to `dst` whose first (or only) next header is `next`.
fn ipv6(next: u8, dst: [u8; 16], payload: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[next, 255]);
    ip.extend_from_slice(&CLIENT6);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(payload);
    ip
}

/// A neighbour discovery message of ICMPv6 type `kind` for `target`, with a link-layer
/// address option.
fn ndp(kind: u8, target: [u8; 16]) -> Vec<u8> {
    let mut message = vec![kind, 0, 0, 0, 0, 0, 0, 0];
    message.extend_from_slice(&target);
    message.extend_from_slice(&[1, 1, 0x02, 0, 0, 0, 0, 1]);
    message
}

/// A TCP SYN to `dst_port`.
fn tcp(dst_port: u16) -> Vec<u8> {
    let mut tcp = 40000u16.to_be_bytes().to_vec();
    tcp.extend_from_slice(&dst_port.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    tcp
}

fn tcp_to(dst: [u8; 4], port: u16, options: &[u8]) -> Vec<u8> {
    ethernet(ETH_P_IP, &ipv4(TCP, dst, options, 0, &tcp(port)))
}

const REDIRECT: u32 = bpf::XDP_REDIRECT as u32;
const PASS: u32 = bpf::XDP_PASS as u32;

/// The loaded program, run by the kernel (`BPF_PROG_TEST_RUN`) with a socket bound in its
/// map's slot 0, so a steered frame returns `XDP_REDIRECT` and any other `XDP_PASS`.
#[test]
fn the_program_steers_only_our_frames() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    let pair = VethPair::new(1);
    pair.server(|| {
        let program = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, STEER).unwrap();
        assert_eq!(program.steering(), Steering::Server(STEER));
        let config = XdpConfig {
            frame_size: 2048,
            frame_count: 256,
            ring_size: 128,
            zero_copy: ZeroCopy::Auto,
        };
        let _socket = XdpDevice::bind(&program, 0, &config).expect("queue 0");
        let run = |frame: &[u8]| bpf::test_run(program.prog(), frame).expect("BPF_PROG_TEST_RUN");

        let options_4 = [1, 1, 1, 0]; // NOP, NOP, NOP, end of options
        let options_40 = [1u8; 40]; // IHL 15
        // Options whose bytes 2..4 read 11211: a program that took the port at the fixed
        // offset of a 20-byte header would see "our port" in a packet to port 22.
        let decoy = [0, 0, 0x2b, 0xcb];
        let cases: Vec<(&str, Vec<u8>, u32)> = vec![
            (
                "ARP request for our address",
                ethernet(ETH_P_ARP, &arp(1, OURS)),
                REDIRECT,
            ),
            (
                "ARP reply to us",
                ethernet(ETH_P_ARP, &arp(2, OURS)),
                REDIRECT,
            ),
            (
                "ARP request for another address",
                ethernet(ETH_P_ARP, &arp(1, OTHER)),
                PASS,
            ),
            (
                "ARP for a 16-byte protocol address",
                {
                    let mut a = arp(1, OURS);
                    a[5] = 16;
                    ethernet(ETH_P_ARP, &a)
                },
                PASS,
            ),
            (
                "ARP over another hardware type",
                {
                    let mut a = arp(1, OURS);
                    a[1] = 6;
                    ethernet(ETH_P_ARP, &a)
                },
                PASS,
            ),
            (
                "TCP to our address and port",
                tcp_to(OURS, PORT, &[]),
                REDIRECT,
            ),
            (
                "TCP with 4 bytes of IPv4 options",
                tcp_to(OURS, PORT, &options_4),
                REDIRECT,
            ),
            (
                "TCP with 40 bytes of IPv4 options",
                tcp_to(OURS, PORT, &options_40),
                REDIRECT,
            ),
            (
                "TCP to port 22 behind options that read 11211",
                tcp_to(OURS, 22, &decoy),
                PASS,
            ),
            ("TCP to another port", tcp_to(OURS, 22, &[]), PASS),
            ("TCP to another address", tcp_to(OTHER, PORT, &[]), PASS),
            (
                "a first fragment (more fragments set)",
                ethernet(ETH_P_IP, &ipv4(TCP, OURS, &[], 0x2000, &tcp(PORT))),
                REDIRECT,
            ),
            (
                "a later fragment",
                ethernet(ETH_P_IP, &ipv4(TCP, OURS, &[], 0x0001, &tcp(PORT))),
                PASS,
            ),
            (
                "UDP to our address and port",
                ethernet(
                    ETH_P_IP,
                    &ipv4(UDP, OURS, &[], 0, &[0x9c, 0x40, 0x2b, 0xcb, 0, 8, 0, 0]),
                ),
                PASS,
            ),
            (
                "ICMP echo to our address",
                ethernet(
                    ETH_P_IP,
                    &ipv4(ICMP, OURS, &[], 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
                ),
                REDIRECT,
            ),
            (
                "ICMP echo behind 4 bytes of IPv4 options",
                ethernet(
                    ETH_P_IP,
                    &ipv4(ICMP, OURS, &options_4, 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
                ),
                REDIRECT,
            ),
            (
                "ICMP echo to another address",
                ethernet(
                    ETH_P_IP,
                    &ipv4(ICMP, OTHER, &[], 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
                ),
                PASS,
            ),
            (
                "ICMP echo reply to our address",
                ethernet(
                    ETH_P_IP,
                    &ipv4(ICMP, OURS, &[], 0, &[0, 0, 0, 0, 0, 1, 0, 1]),
                ),
                PASS,
            ),
            (
                "ICMP destination unreachable to our address",
                ethernet(
                    ETH_P_IP,
                    &ipv4(ICMP, OURS, &[], 0, &[3, 3, 0, 0, 0, 0, 0, 0]),
                ),
                PASS,
            ),
            (
                "IPv6 TCP to our address and port",
                ethernet(ETH_P_IPV6, &ipv6(TCP, OURS6, &tcp(PORT))),
                REDIRECT,
            ),
            (
                "IPv6 TCP to another port",
                ethernet(ETH_P_IPV6, &ipv6(TCP, OURS6, &tcp(22))),
                PASS,
            ),
            (
                "IPv6 TCP to another address",
                ethernet(ETH_P_IPV6, &ipv6(TCP, OTHER6, &tcp(PORT))),
                PASS,
            ),
            (
                "IPv6 TCP behind a hop-by-hop header",
                {
                    let mut payload = vec![TCP, 0, 1, 4, 0, 0, 0, 0];
                    payload.extend_from_slice(&tcp(PORT));
                    ethernet(ETH_P_IPV6, &ipv6(0, OURS6, &payload))
                },
                PASS,
            ),
            (
                "IPv6 UDP to our address and port",
                ethernet(
                    ETH_P_IPV6,
                    &ipv6(UDP, OURS6, &[0x9c, 0x40, 0x2b, 0xcb, 0, 8, 0, 0]),
                ),
                PASS,
            ),
            (
                "ICMPv6 echo to our address",
                ethernet(
                    ETH_P_IPV6,
                    &ipv6(ICMPV6, OURS6, &[128, 0, 0, 0, 0, 1, 0, 1]),
                ),
                REDIRECT,
            ),
            (
                "ICMPv6 echo to another address",
                ethernet(
                    ETH_P_IPV6,
                    &ipv6(ICMPV6, OTHER6, &[128, 0, 0, 0, 0, 1, 0, 1]),
                ),
                PASS,
            ),
            (
                "ICMPv6 echo reply to our address",
                ethernet(
                    ETH_P_IPV6,
                    &ipv6(ICMPV6, OURS6, &[129, 0, 0, 0, 0, 1, 0, 1]),
                ),
                PASS,
            ),
            (
                "a neighbour solicitation for our address, to its group",
                ethernet(ETH_P_IPV6, &ipv6(ICMPV6, GROUP6, &ndp(135, OURS6))),
                REDIRECT,
            ),
            (
                "a neighbour solicitation for our address, to it",
                ethernet(ETH_P_IPV6, &ipv6(ICMPV6, OURS6, &ndp(135, OURS6))),
                REDIRECT,
            ),
            (
                "a neighbour solicitation for another address",
                ethernet(ETH_P_IPV6, &ipv6(ICMPV6, GROUP6, &ndp(135, OTHER6))),
                PASS,
            ),
            (
                "a neighbour advertisement to our address",
                ethernet(ETH_P_IPV6, &ipv6(ICMPV6, OURS6, &ndp(136, CLIENT6))),
                REDIRECT,
            ),
            (
                "a neighbour advertisement to all nodes",
                ethernet(ETH_P_IPV6, &ipv6(ICMPV6, ALL_NODES6, &ndp(136, CLIENT6))),
                PASS,
            ),
            (
                "a router solicitation",
                ethernet(ETH_P_IPV6, &ipv6(ICMPV6, ALL_NODES6, &ndp(133, OURS6))),
                PASS,
            ),
            (
                "IPv6 EtherType, version 4",
                {
                    let mut f = ethernet(ETH_P_IPV6, &ipv6(TCP, OURS6, &tcp(PORT)));
                    f[14] = 0x45;
                    f
                },
                PASS,
            ),
            (
                "IPv4 EtherType, version 6",
                {
                    let mut f = tcp_to(OURS, PORT, &[]);
                    f[14] = 0x65;
                    f
                },
                PASS,
            ),
            (
                "IHL below 5",
                {
                    let mut f = tcp_to(OURS, PORT, &[]);
                    f[14] = 0x44;
                    f
                },
                PASS,
            ),
            ("IPv6", ethernet(ETH_P_IPV6, &[0x60; 60]), PASS),
            (
                "802.1Q-tagged TCP to us",
                {
                    let mut tagged = vec![0, 1];
                    tagged.extend_from_slice(&ETH_P_IP.to_be_bytes());
                    tagged.extend_from_slice(&ipv4(TCP, OURS, &[], 0, &tcp(PORT)));
                    ethernet(ETH_P_8021Q, &tagged)
                },
                PASS,
            ),
        ];
        for (what, frame, want) in &cases {
            assert_eq!(run(frame), *want, "{what}");
        }

        // Truncated: a frame is steered only once it holds every byte the program reads
        // (through the ARP target address; through the TCP destination port or the ICMP
        // type; through the solicitation's target), never before.
        for (what, frame, needed) in [
            ("ARP", ethernet(ETH_P_ARP, &arp(1, OURS)), 14 + 28),
            ("TCP", tcp_to(OURS, PORT, &[]), 14 + 20 + 4),
            ("TCP, IHL 6", tcp_to(OURS, PORT, &options_4), 14 + 24 + 4),
            ("TCP, IHL 15", tcp_to(OURS, PORT, &options_40), 14 + 60 + 4),
            (
                "ICMP echo",
                ethernet(
                    ETH_P_IP,
                    &ipv4(ICMP, OURS, &[], 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
                ),
                14 + 20 + 4,
            ),
            (
                "IPv6 TCP",
                ethernet(ETH_P_IPV6, &ipv6(TCP, OURS6, &tcp(PORT))),
                14 + 40 + 4,
            ),
            (
                "ICMPv6 echo",
                ethernet(
                    ETH_P_IPV6,
                    &ipv6(ICMPV6, OURS6, &[128, 0, 0, 0, 0, 1, 0, 1]),
                ),
                14 + 40 + 4,
            ),
            (
                "neighbour solicitation",
                ethernet(ETH_P_IPV6, &ipv6(ICMPV6, GROUP6, &ndp(135, OURS6))),
                14 + 40 + 24,
            ),
        ] {
            for len in 14..=frame.len() {
                let want = if len >= needed { REDIRECT } else { PASS };
                assert_eq!(run(&frame[..len]), want, "{what} cut to {len} bytes");
            }
        }
        // The kernel refuses to run a program on less than an Ethernet header.
        assert_eq!(bpf::test_run(program.prog(), &[0; 13]), Err(libc::EINVAL));
    })
    .join()
    .expect("server thread");
}

/// With a second port, TCP to either port of our address is steered, through any header
/// length and over both families, and other ports still pass.
#[test]
fn the_program_steers_a_second_port_too() {
    if !is_root() {
        eprintln!("skipped: needs root for namespaces, bpf() and AF_XDP");
        return;
    }
    const EXTRA: u16 = 6379;
    let steer = Steer {
        extra_tcp_port: Some(EXTRA),
        ..STEER
    };
    let pair = VethPair::new(1);
    pair.server(move || {
        let program = XdpProgram::attach(SERVER_IFACE, ModeChoice::Auto, steer).unwrap();
        assert_eq!(program.steering(), Steering::Server(steer));
        let config = XdpConfig {
            frame_size: 2048,
            frame_count: 256,
            ring_size: 128,
            zero_copy: ZeroCopy::Auto,
        };
        let _socket = XdpDevice::bind(&program, 0, &config).expect("queue 0");
        let run = |frame: &[u8]| bpf::test_run(program.prog(), frame).expect("BPF_PROG_TEST_RUN");
        let options_40 = [1u8; 40];
        for (what, frame, want) in [
            ("the first port", tcp_to(OURS, PORT, &[]), REDIRECT),
            ("the second port", tcp_to(OURS, EXTRA, &[]), REDIRECT),
            (
                "the second port, IHL 15",
                tcp_to(OURS, EXTRA, &options_40),
                REDIRECT,
            ),
            ("another port", tcp_to(OURS, EXTRA + 1, &[]), PASS),
            ("port 22", tcp_to(OURS, 22, &[]), PASS),
            (
                "the second port of another address",
                tcp_to(OTHER, EXTRA, &[]),
                PASS,
            ),
            (
                "ARP for our address",
                ethernet(ETH_P_ARP, &arp(1, OURS)),
                REDIRECT,
            ),
            (
                "the first port over IPv6",
                ethernet(ETH_P_IPV6, &ipv6(TCP, OURS6, &tcp(PORT))),
                REDIRECT,
            ),
            (
                "the second port over IPv6",
                ethernet(ETH_P_IPV6, &ipv6(TCP, OURS6, &tcp(EXTRA))),
                REDIRECT,
            ),
            (
                "another port over IPv6",
                ethernet(ETH_P_IPV6, &ipv6(TCP, OURS6, &tcp(EXTRA + 1))),
                PASS,
            ),
            (
                "the second port of another IPv6 address",
                ethernet(ETH_P_IPV6, &ipv6(TCP, OTHER6, &tcp(EXTRA))),
                PASS,
            ),
        ] {
            assert_eq!(run(&frame), want, "{what}");
        }
    })
    .join()
    .expect("server thread");
}
