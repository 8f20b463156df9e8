//! Thin wrappers over the Linux calls the event loop needs: epoll with a nanosecond timeout,
//! non-blocking TCP connect, and timer slack.
//!
//! Every `unsafe` block is a single libc call on values this module owns.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Readiness for reading (or a hang-up / error to notice on read).
pub const READABLE: u32 = libc::EPOLLIN as u32;
/// Readiness for writing (and completion of a non-blocking connect).
pub const WRITABLE: u32 = libc::EPOLLOUT as u32;
/// Hang-up or error condition.
pub const HANGUP: u32 = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;
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

/// Sets this thread's timer slack to 1 ns so timed waits wake when asked (the default slack is
/// 50 µs). Best effort.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
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
}
