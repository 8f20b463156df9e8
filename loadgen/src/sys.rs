//! Thin wrappers over the Linux calls the event loop needs: epoll with a nanosecond timeout,
//! non-blocking TCP connect, timer slack, and kernel timestamps (`SO_TIMESTAMPING`, `recvmsg`
//! with control messages, the error queue, the interface's hardware stamping).
//!
//! Every `unsafe` block is a single libc call on values this module owns.

use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Readiness for reading (or a hang-up / error to notice on read).
pub const READABLE: u32 = libc::EPOLLIN as u32;
/// Readiness for writing (and completion of a non-blocking connect).
pub const WRITABLE: u32 = libc::EPOLLOUT as u32;
/// Hang-up or error condition.
pub const HANGUP: u32 = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;
/// The error part of [`HANGUP`]: a socket error, or (with `SO_TIMESTAMPING`) transmit stamps
/// waiting on the error queue.
pub const ERROR: u32 = libc::EPOLLERR as u32;
/// Added to an interest: edge-triggered, reported once per change (new bytes, new room, hang-up)
/// instead of on every wait while the condition holds. The reader must then read until a read
/// comes back short (or `WouldBlock`), or it is not told about the bytes it left.
pub const EDGE: u32 = libc::EPOLLET as u32;

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

/// Cleared on the first `ENOSYS` from `epoll_pwait2` (kernels before 5.11).
static HAVE_PWAIT2: AtomicBool = AtomicBool::new(true);

impl Epoll {
    /// A new epoll instance returning up to `capacity` events per wait.
    ///
    /// # Errors
    /// The `epoll_create1` error.
    pub fn new(capacity: usize) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; the result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest,
            u64: token,
        };
        // SAFETY: `ev` lives across the call; the kernel copies it.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Watches `fd` for `interest`, reporting `token`.
    ///
    /// # Errors
    /// The `epoll_ctl` error.
    pub fn add(&self, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, interest, token)
    }

    /// Changes the interest of a watched `fd`.
    ///
    /// # Errors
    /// The `epoll_ctl` error.
    pub fn modify(&self, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, interest, token)
    }

    /// Stops watching `fd` (closing it does too).
    ///
    /// # Errors
    /// The `epoll_ctl` error.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout` (None: forever) and returns the ready `(token, events)` pairs.
    ///
    /// Uses `epoll_pwait2` for a nanosecond timeout; on kernels without it, waits whole
    /// milliseconds rounded down (the caller's loop spins the rest).
    ///
    /// # Errors
    /// The wait's error; `EINTR` is returned as an empty set.
    pub fn wait(
        &mut self,
        timeout: Option<Duration>,
    ) -> io::Result<impl Iterator<Item = (u64, u32)> + '_> {
        let max = self.events.len() as libc::c_int;
        let ptr = self.events.as_mut_ptr();
        let mut n = -1;
        if HAVE_PWAIT2.load(Ordering::Relaxed) {
            let ts = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            });
            let ts_ptr = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: `ptr` points at `max` writable events owned by self; `ts_ptr` is null or
            // points at `ts`, alive for the call; a null sigmask leaves the mask unchanged.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd.as_raw_fd(),
                    ptr,
                    max,
                    ts_ptr,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                HAVE_PWAIT2.store(false, Ordering::Relaxed);
            } else {
                n = rc as libc::c_int;
            }
        }
        if !HAVE_PWAIT2.load(Ordering::Relaxed) {
            let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int);
            // SAFETY: as above.
            n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), ptr, max, ms) };
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            n = 0;
        }
        Ok(self.events[..n as usize].iter().map(|e| (e.u64, e.events)))
    }
}

/// Starts a non-blocking TCP connection to `addr` with `TCP_NODELAY` set.
///
/// Returns the stream and whether it is already connected; otherwise wait for [`WRITABLE`]
/// and call [`connect_result`].
///
/// # Errors
/// The `socket` or `connect` error (`ECONNREFUSED` may come here on loopback).
pub fn connect_nonblocking(addr: &SocketAddr) -> io::Result<(TcpStream, bool)> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket takes no pointers; the result is checked.
    let fd = unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket that nothing else owns; TcpStream closes it on drop.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    stream.set_nodelay(true)?;
    let rc = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sin` is a valid sockaddr_in, alive for the call, with its exact size.
            unsafe {
                libc::connect(
                    fd,
                    (&sin as *const libc::sockaddr_in).cast(),
                    size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: `sin6` is a valid sockaddr_in6, alive for the call, with its exact size.
            unsafe {
                libc::connect(
                    fd,
                    (&sin6 as *const libc::sockaddr_in6).cast(),
                    size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            }
        }
    };
    if rc == 0 {
        return Ok((stream, true));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINPROGRESS) {
        Ok((stream, false))
    } else {
        Err(e)
    }
}

/// The outcome of a non-blocking connect once the socket reported writable.
///
/// # Errors
/// The connect error (`SO_ERROR`), e.g. connection refused.
pub fn connect_result(stream: &TcpStream) -> io::Result<()> {
    match stream.take_error()? {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The calling thread's scheduler statistics (`/proc/thread-self/schedstat`), kept open and
/// re-read in place.
#[derive(Debug)]
pub struct SchedStat {
    file: std::fs::File,
}

impl SchedStat {
    /// Opens the calling thread's statistics; `None` where the kernel keeps none
    /// (`CONFIG_SCHED_INFO`).
    pub fn open() -> Option<SchedStat> {
        let s = SchedStat {
            file: std::fs::File::open("/proc/thread-self/schedstat").ok()?,
        };
        s.run_delay_ns().map(|_| s)
    }

    /// Nanoseconds the thread has spent runnable but waiting for a CPU, so far.
    pub fn run_delay_ns(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        parse_run_delay(std::str::from_utf8(&buf[..n]).ok()?)
    }
}

/// The second field of a `schedstat` line (`run_ns run_delay_ns timeslices`).
pub fn parse_run_delay(line: &str) -> Option<u64> {
    let mut fields = line.split_ascii_whitespace();
    fields.next()?.parse::<u64>().ok()?;
    let delay = fields.next()?.parse().ok()?;
    fields.next()?.parse::<u64>().ok()?;
    Some(delay)
}

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`), ns; 0 where the
/// clock cannot be read.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sets this thread's timer slack to 1 ns so timed waits wake when asked (the default slack is
/// 50 µs). Best effort.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

// ---- kernel timestamps ------------------------------------------------------------------

fn setsockopt_u32(fd: RawFd, level: libc::c_int, name: libc::c_int, v: u32) -> io::Result<()> {
    // SAFETY: `v` lives across the call and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const u32).cast(),
            size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sets `SO_TIMESTAMPING` to `flags` on a connected socket (`SOF_TIMESTAMPING_OPT_ID` is
/// refused before the connection exists).
///
/// # Errors
/// The `setsockopt` error.
pub fn set_timestamping(fd: RawFd, flags: u32) -> io::Result<()> {
    setsockopt_u32(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, flags)
}

/// Whether this kernel takes `SO_TIMESTAMPING` for `mode` (tried on a UDP socket, without the
/// flags that need a connection).
///
/// # Errors
/// The `socket` or `setsockopt` error.
pub fn probe_timestamping(mode: crate::tstamp::Timestamps) -> io::Result<()> {
    let Some(flags) = mode.socket_flags() else {
        return Ok(());
    };
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    set_timestamping(socket.as_raw_fd(), flags & !libc::SOF_TIMESTAMPING_OPT_ID)
}

/// `msg_controllen` as a length (`size_t` with glibc, `socklen_t` with musl).
fn controllen<T: TryInto<usize>>(v: T) -> usize {
    v.try_into().unwrap_or(0)
}

/// `recvmsg` into `buf` with the control messages into `control`; returns the bytes read and
/// the length of the control area the kernel filled (0 when it had none).
///
/// # Errors
/// The `recvmsg` error (`WouldBlock` on a non-blocking socket with nothing to read).
pub fn recv_with_control(
    fd: RawFd,
    buf: &mut [u8],
    control: &mut [u8],
) -> io::Result<(usize, usize)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: `msg` points at `iov` and `control`, which outlive the call and have the lengths
    // given; the kernel writes within them.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((
        n as usize,
        controllen(msg.msg_controllen).min(control.len()),
    ))
}

/// Error-queue messages read per system call.
pub const ERRQUEUE_BATCH: usize = 16;

/// Control buffers for reading a socket's error queue in batches.
#[derive(Debug)]
pub struct ErrQueue {
    control: Vec<u8>,
    lens: [usize; ERRQUEUE_BATCH],
}

impl Default for ErrQueue {
    fn default() -> Self {
        ErrQueue::new()
    }
}

impl ErrQueue {
    /// Buffers for [`ERRQUEUE_BATCH`] messages.
    pub fn new() -> ErrQueue {
        ErrQueue {
            control: vec![0; ERRQUEUE_BATCH * crate::tstamp::CONTROL_LEN],
            lens: [0; ERRQUEUE_BATCH],
        }
    }

    /// Reads up to [`ERRQUEUE_BATCH`] messages from `fd`'s error queue without waiting
    /// (`recvmmsg` with `MSG_ERRQUEUE`); returns how many. Their control areas are
    /// [`ErrQueue::control`]`(0..n)`.
    ///
    /// # Errors
    /// The `recvmmsg` error; an empty queue is `Ok(0)`.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        const LEN: usize = crate::tstamp::CONTROL_LEN;
        // SAFETY: an all-zero mmsghdr is valid (no iovecs, no name, no control).
        let mut hdrs: [libc::mmsghdr; ERRQUEUE_BATCH] = unsafe { std::mem::zeroed() };
        for (k, h) in hdrs.iter_mut().enumerate() {
            h.msg_hdr.msg_control = self.control[k * LEN..].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = LEN as _;
        }
        // SAFETY: every header points at its own LEN bytes of `self.control`, alive and not
        // otherwise borrowed during the call; no iovecs (the stamps come without payload).
        let n = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                ERRQUEUE_BATCH as libc::c_uint,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        for (len, h) in self.lens.iter_mut().zip(&hdrs).take(n) {
            *len = controllen(h.msg_hdr.msg_controllen).min(LEN);
        }
        Ok(n)
    }

    /// The control area of message `k` of the last [`ErrQueue::recv`].
    pub fn control(&self, k: usize) -> &[u8] {
        const LEN: usize = crate::tstamp::CONTROL_LEN;
        &self.control[k * LEN..k * LEN + self.lens[k]]
    }
}

/// The name of the interface a connection to `server` leaves through: the interface holding
/// the local address the kernel picks for it (found with a connected UDP socket, which sends
/// nothing).
///
/// # Errors
/// No route, or no interface with that address.
pub fn route_interface(server: &SocketAddr) -> io::Result<String> {
    let bind = match server {
        SocketAddr::V4(_) => "0.0.0.0:0",
        SocketAddr::V6(_) => "[::]:0",
    };
    let probe = UdpSocket::bind(bind)?;
    probe.connect(server)?;
    let local = probe.local_addr()?.ip();
    interface_holding(local)?.ok_or_else(|| io::Error::other(format!("no interface holds {local}")))
}

/// The name of the interface in this network namespace that holds the address `local`, if
/// one does.
///
/// # Errors
/// `getifaddrs` failed.
pub fn interface_holding(local: std::net::IpAddr) -> io::Result<Option<String>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that is freed below.
    if unsafe { libc::getifaddrs(&mut head) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points at a sockaddr whose family says its layout.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let ip: Option<std::net::IpAddr> = match family {
            libc::AF_INET => {
                // SAFETY: AF_INET addresses are sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                Some(std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()).into())
            }
            libc::AF_INET6 => {
                // SAFETY: AF_INET6 addresses are sockaddr_in6.
                let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                Some(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr).into())
            }
            _ => None,
        };
        if ip == Some(local) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference into it remains.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

/// An interface's timestamping capabilities (`ETHTOOL_GET_TS_INFO`, as `ethtool -T` shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsInfo {
    /// `SOF_TIMESTAMPING_*` flags the interface supports.
    pub so_timestamping: u32,
    /// Its PTP hardware clock, -1 for none.
    pub phc_index: i32,
    /// Bit `1 << HWTSTAMP_TX_*` per transmit mode offered.
    pub tx_types: u32,
    /// Bit `1 << HWTSTAMP_FILTER_*` per receive filter offered.
    pub rx_filters: u32,
}

/// `struct ethtool_ts_info`.
#[repr(C)]
#[derive(Default)]
struct EthtoolTsInfo {
    cmd: u32,
    so_timestamping: u32,
    phc_index: i32,
    tx_types: u32,
    tx_reserved: [u32; 3],
    rx_filters: u32,
    rx_reserved: [u32; 3],
}

const ETHTOOL_GET_TS_INFO: u32 = 0x41;

/// An `ifreq` naming `iface`, its data pointer set to `data`.
fn ifreq(iface: &str, data: *mut libc::c_void) -> io::Result<libc::ifreq> {
    let bytes = iface.as_bytes();
    // SAFETY: an all-zero ifreq is valid (empty name, null pointer).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    if bytes.len() >= ifr.ifr_name.len() || bytes.contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, &b) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = data.cast();
    Ok(ifr)
}

/// `ioctl(request)` with `ifr` on a throwaway datagram socket.
fn interface_ioctl(request: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<()> {
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    // SAFETY: `ifr` and whatever its data pointer names outlive the call; the request's
    // argument is a struct ifreq.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), request as _, ifr as *mut libc::ifreq) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The timestamping capabilities of `iface`.
///
/// # Errors
/// The `SIOCETHTOOL` error (no such interface, ...).
pub fn ts_info(iface: &str) -> io::Result<TsInfo> {
    let mut info = EthtoolTsInfo {
        cmd: ETHTOOL_GET_TS_INFO,
        ..EthtoolTsInfo::default()
    };
    let mut ifr = ifreq(iface, (&mut info as *mut EthtoolTsInfo).cast())?;
    interface_ioctl(libc::SIOCETHTOOL, &mut ifr)?;
    Ok(TsInfo {
        so_timestamping: info.so_timestamping,
        phc_index: info.phc_index,
        tx_types: info.tx_types,
        rx_filters: info.rx_filters,
    })
}

fn hwtstamp(
    iface: &str,
    request: libc::c_ulong,
    cfg: &mut libc::hwtstamp_config,
) -> io::Result<()> {
    let mut ifr = ifreq(iface, (cfg as *mut libc::hwtstamp_config).cast())?;
    interface_ioctl(request, &mut ifr)
}

/// Hardware stamping turned on for one interface (`SIOCSHWTSTAMP`: every transmitted packet,
/// every received one); the previous setting is put back on drop.
#[derive(Debug)]
pub struct HwStampGuard {
    iface: String,
    previous: Option<(i32, i32, i32)>,
}

impl HwStampGuard {
    /// Turns on transmit stamping and the all-packets receive filter on `iface`, unless they
    /// are on already. Needs `CAP_NET_ADMIN`.
    ///
    /// # Errors
    /// The `SIOCSHWTSTAMP` error, or a driver that did not take the all-packets filter.
    pub fn enable(iface: &str) -> io::Result<HwStampGuard> {
        let mut old = libc::hwtstamp_config {
            flags: 0,
            tx_type: 0,
            rx_filter: 0,
        };
        // Drivers without SIOCGHWTSTAMP: assume off.
        let known = hwtstamp(iface, libc::SIOCGHWTSTAMP, &mut old).is_ok();
        let on = |c: &libc::hwtstamp_config| {
            c.tx_type == libc::HWTSTAMP_TX_ON as i32
                && c.rx_filter == libc::HWTSTAMP_FILTER_ALL as i32
        };
        if known && on(&old) {
            return Ok(HwStampGuard {
                iface: iface.to_string(),
                previous: None,
            });
        }
        let mut cfg = libc::hwtstamp_config {
            flags: 0,
            tx_type: libc::HWTSTAMP_TX_ON as i32,
            rx_filter: libc::HWTSTAMP_FILTER_ALL as i32,
        };
        hwtstamp(iface, libc::SIOCSHWTSTAMP, &mut cfg)?;
        let guard = HwStampGuard {
            iface: iface.to_string(),
            previous: Some(if known {
                (old.flags, old.tx_type, old.rx_filter)
            } else {
                (
                    0,
                    libc::HWTSTAMP_TX_OFF as i32,
                    libc::HWTSTAMP_FILTER_NONE as i32,
                )
            }),
        };
        if !on(&cfg) {
            // The driver answers with what it set; anything narrower misses the replies.
            return Err(io::Error::other(format!(
                "the driver set tx_type {} rx_filter {}",
                cfg.tx_type, cfg.rx_filter
            )));
        }
        Ok(guard)
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.iface
    }
}

impl Drop for HwStampGuard {
    fn drop(&mut self) {
        if let Some((flags, tx_type, rx_filter)) = self.previous {
            let mut cfg = libc::hwtstamp_config {
                flags,
                tx_type,
                rx_filter,
            };
            let _ = hwtstamp(&self.iface, libc::SIOCSHWTSTAMP, &mut cfg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Instant;

    #[test]
    fn nonblocking_connect_completes_and_refusal_is_reported() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (stream, done) = connect_nonblocking(&addr).unwrap();
        let mut ep = Epoll::new(4).unwrap();
        ep.add(stream.as_raw_fd(), WRITABLE, 42).unwrap();
        if !done {
            let ready: Vec<_> = ep.wait(Some(Duration::from_secs(2))).unwrap().collect();
            assert_eq!(ready.len(), 1);
            assert_eq!(ready[0].0, 42);
        }
        connect_result(&stream).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        (&stream).write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");

        drop(listener);
        let refused = match connect_nonblocking(&addr) {
            Err(e) => e,
            Ok((s, _)) => {
                ep.add(s.as_raw_fd(), WRITABLE, 7).unwrap();
                let _ = ep.wait(Some(Duration::from_secs(2))).unwrap().count();
                connect_result(&s).unwrap_err()
            }
        };
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn edge_triggered_reports_new_bytes_once() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (stream, _) = connect_nonblocking(&addr).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let mut ep = Epoll::new(4).unwrap();
        ep.add(stream.as_raw_fd(), READABLE | EDGE, 3).unwrap();
        peer.write_all(b"abc").unwrap();
        let ready: Vec<_> = ep.wait(Some(Duration::from_secs(2))).unwrap().collect();
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].0, 3);
        assert_ne!(ready[0].1 & READABLE, 0);
        // Unread bytes are not reported again (level-triggered would report them forever).
        let again = ep.wait(Some(Duration::from_millis(20))).unwrap().count();
        assert_eq!(again, 0);
        // New bytes are, although the old ones are still unread.
        peer.write_all(b"def").unwrap();
        let ready: Vec<_> = ep.wait(Some(Duration::from_secs(2))).unwrap().collect();
        assert_eq!(ready.len(), 1);
        let mut got = [0u8; 16];
        let n = (&stream).read(&mut got).unwrap();
        assert_eq!(&got[..n], b"abcdef");
        // A hang-up is a change too.
        drop(peer);
        let ready: Vec<_> = ep.wait(Some(Duration::from_secs(2))).unwrap().collect();
        assert_eq!(ready.len(), 1);
        assert_eq!((&stream).read(&mut got).unwrap(), 0);
    }

    #[test]
    fn bytes_and_a_hang_up_together_report_the_hang_up() {
        // An edge-triggered reader that saw only READABLE would stop at its first short read
        // and never hear of the FIN behind the bytes.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (stream, _) = connect_nonblocking(&addr).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let mut ep = Epoll::new(4).unwrap();
        ep.add(stream.as_raw_fd(), READABLE | HANGUP | EDGE, 1)
            .unwrap();
        peer.write_all(b"last words").unwrap();
        drop(peer);
        let t = Instant::now();
        let mut seen = 0;
        while seen & HANGUP == 0 && t.elapsed() < Duration::from_secs(2) {
            seen |= ep
                .wait(Some(Duration::from_millis(100)))
                .unwrap()
                .fold(0, |acc, (_, ev)| acc | ev);
        }
        assert_ne!(seen & READABLE, 0);
        assert_ne!(seen & (libc::EPOLLRDHUP as u32), 0, "events {seen:#x}");
        let mut got = [0u8; 32];
        assert_eq!((&stream).read(&mut got).unwrap(), 10);
        assert_eq!((&stream).read(&mut got).unwrap(), 0);
    }

    #[test]
    fn wait_honours_sub_millisecond_timeouts() {
        tighten_timer_slack();
        let mut ep = Epoll::new(1).unwrap();
        let t = Instant::now();
        for _ in 0..10 {
            assert_eq!(
                ep.wait(Some(Duration::from_micros(200))).unwrap().count(),
                0
            );
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_micros(1_000), "{took:?}");
        // Generous bound: a loaded 2-vCPU VM still finishes 10 × 200 µs well under 1 s.
        assert!(took < Duration::from_secs(1), "{took:?}");
    }

    #[test]
    fn schedstat_gives_the_run_delay() {
        assert_eq!(parse_run_delay("123 456 7\n"), Some(456));
        assert_eq!(parse_run_delay("123 456"), None);
        assert_eq!(parse_run_delay("x 456 7"), None);
        assert_eq!(parse_run_delay(""), None);
        // This kernel keeps them; the delay never decreases.
        let s = SchedStat::open().expect("/proc/thread-self/schedstat");
        let a = s.run_delay_ns().unwrap();
        std::thread::yield_now();
        assert!(s.run_delay_ns().unwrap() >= a);
    }

    #[test]
    fn thread_cpu_time_counts_work_and_not_sleep() {
        // Busy for 20 ms of CPU time as the clock counts it, then asleep for 50 ms: the sleep
        // adds far less than itself (waking takes microseconds of CPU).
        let start = thread_cpu_ns();
        assert!(start > 0);
        while thread_cpu_ns() - start < 20_000_000 {
            std::hint::black_box(start);
        }
        let busy = thread_cpu_ns();
        std::thread::sleep(Duration::from_millis(50));
        assert!(thread_cpu_ns() - busy < 10_000_000);
    }

    #[test]
    fn loopback_routes_through_lo_which_stamps_in_software_only() {
        assert_eq!(
            route_interface(&"127.0.0.1:11211".parse().unwrap()).unwrap(),
            "lo"
        );
        let info = ts_info("lo").unwrap();
        assert_ne!(info.so_timestamping & libc::SOF_TIMESTAMPING_RX_SOFTWARE, 0);
        assert_ne!(info.so_timestamping & libc::SOF_TIMESTAMPING_TX_SOFTWARE, 0);
        assert_eq!(
            info.so_timestamping & libc::SOF_TIMESTAMPING_RAW_HARDWARE,
            0
        );
        assert!(ts_info("no-such-if0").is_err());
        assert!(ts_info("a-name-far-too-long-for-ifreq").is_err());
        // Loopback has no hardware stamping to turn on.
        assert!(HwStampGuard::enable("lo").is_err());
    }
}
