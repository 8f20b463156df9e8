//! Thin wrappers over the few Linux calls the TAP device and the link setup need.

use core::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A Linux interface name: 1 to 15 bytes, no NUL, `/`, `%`, `:` or whitespace.
///
/// `Copy`, so typed errors can carry the device name without allocating.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfName {
    bytes: [u8; libc::IFNAMSIZ],
    len: u8,
}

impl IfName {
    /// Longest name the kernel accepts (`IFNAMSIZ` − 1 for the NUL).
    pub const MAX_LEN: usize = libc::IFNAMSIZ - 1;

    /// Validates `name` as an interface name.
    ///
    /// # Errors
    /// [`InvalidIfName`] if it is empty, longer than 15 bytes, or has a forbidden byte
    /// (`%` is refused too: the kernel would treat it as a name template).
    pub fn new(name: &str) -> Result<Self, InvalidIfName> {
        let raw = name.as_bytes();
        let forbidden = |b: &u8| matches!(*b, 0 | b'/' | b'%' | b':') || b.is_ascii_whitespace();
        if raw.is_empty()
            || raw.len() > Self::MAX_LEN
            || raw.iter().any(forbidden)
            || name == "."
            || name == ".."
        {
            return Err(InvalidIfName { len: raw.len() });
        }
        let mut bytes = [0u8; libc::IFNAMSIZ];
        bytes[..raw.len()].copy_from_slice(raw);
        // MAX_LEN is 15, so the length fits a u8.
        Ok(IfName {
            bytes,
            len: raw.len() as u8,
        })
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        // Built from a &str cut at its full length, so always valid UTF-8.
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }

    /// The name NUL-terminated, as `ifreq.ifr_name` and `if_nametoindex` want it.
    pub(crate) fn c_bytes(&self) -> [libc::c_char; libc::IFNAMSIZ] {
        self.bytes.map(|b| b as libc::c_char)
    }
}

impl fmt::Display for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// A string that is not a valid Linux interface name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidIfName {
    /// Length in bytes of the rejected name.
    pub len: usize,
}

impl fmt::Display for InvalidIfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid interface name ({} bytes; 1..={} bytes without NUL, '/', '%', ':' or spaces)",
            self.len,
            IfName::MAX_LEN
        )
    }
}

impl std::error::Error for InvalidIfName {}

/// The calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Most descriptors `poll_readable` watches beside its own: a worker's wake-up eventfd and
/// its sleep timer.
pub const MAX_ALSO: usize = 3;

/// Waits with poll(2) until `fd` or one of `also` (e.g. a worker's wake-up eventfd and its
/// sleep timer, at most [`MAX_ALSO`]; more are ignored) is readable or `timeout` passes
/// (`None`: no limit). Returns whether `fd` is readable; an interrupted wait (`EINTR`) counts
/// as not readable, so the caller re-checks its own state. Timeouts are rounded up to whole
/// milliseconds, so a 100 µs deadline does not turn into a busy 0 ms poll.
///
/// # Errors
/// poll(2)'s errno.
pub(crate) fn poll_readable(
    fd: std::os::fd::BorrowedFd<'_>,
    also: &[std::os::fd::BorrowedFd<'_>],
    timeout: Option<std::time::Duration>,
) -> Result<bool, i32> {
    use std::os::fd::AsRawFd;
    let timeout_ms: libc::c_int = match timeout {
        None => -1,
        Some(t) => t.as_micros().div_ceil(1000).min(libc::c_int::MAX as u128) as libc::c_int,
    };
    let entry = |fd: libc::c_int| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut pfds = [entry(-1); 1 + MAX_ALSO];
    pfds[0] = entry(fd.as_raw_fd());
    let watched = also.len().min(MAX_ALSO);
    for (pfd, also) in pfds[1..].iter_mut().zip(&also[..watched]) {
        *pfd = entry(also.as_raw_fd());
    }
    let nfds = (1 + watched) as libc::nfds_t;
    // SAFETY: `pfds` holds at least `nfds` valid pollfds, exclusively borrowed for the call.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), nfds, timeout_ms) };
    match rc {
        0 => Ok(false),
        n if n > 0 => Ok(pfds[0].revents != 0),
        _ => match errno() {
            libc::EINTR => Ok(false),
            errno => Err(errno),
        },
    }
}

/// A timer a worker sleeps on beside its queue (a `timerfd`), kept armed across sleeps.
///
/// A sleep with a timeout arms a kernel timer on the way in and cancels it on the way out; when
/// it is the CPU's earliest (a loss probe due in a millisecond or two usually is), both
/// reprogram the CPU's timer device, which on a virtual machine is a trap to the hypervisor
/// each, and costs more of the thread's CPU per wake-up than a sleep without a timeout or
/// with a timerfd left armed (compare `perf stat` of a worker at a fixed request rate). So
/// the sleep itself has no timeout, and this timer is armed only when it would fire later than the
/// next sleep must end ([`SleepTimer::cover`]); a timer armed for earlier is left as it is (the
/// worker wakes early, finds nothing due and sleeps again), and an expiry is consumed after
/// the wake-up ([`SleepTimer::expired`]).
#[derive(Debug)]
pub struct SleepTimer {
    fd: OwnedFd,
    /// When the timer fires, if armed and not yet consumed.
    armed: Option<std::time::Instant>,
    /// Times the timer was set.
    arms: u64,
    /// Expiries consumed.
    fired: u64,
}

impl SleepTimer {
    /// A disarmed timer on the monotonic clock (`Instant`'s clock).
    ///
    /// # Errors
    /// timerfd_create(2)'s errno.
    pub fn new() -> Result<SleepTimer, i32> {
        // SAFETY: plain timerfd_create(2) call with constant arguments; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(errno());
        }
        Ok(SleepTimer {
            // SAFETY: `fd` was just returned by timerfd_create(2) and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            armed: None,
            arms: 0,
            fired: 0,
        })
    }

    /// The descriptor to sleep on: readable once the timer fired, until
    /// [`SleepTimer::expired`] consumes it.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Makes sure the timer fires by `due` (`now` is the time of the call): leaves it alone when
    /// it is armed for `due` or earlier, including an expiry not yet consumed; else arms it for
    /// `due`.
    ///
    /// # Errors
    /// timerfd_settime(2)'s errno; the timer is then taken as disarmed.
    pub fn cover(&mut self, now: std::time::Instant, due: std::time::Instant) -> Result<(), i32> {
        if !needs_arming(self.armed, due) {
            return Ok(());
        }
        // A zero value would disarm the timer: at least a nanosecond.
        let wait = due
            .saturating_duration_since(now)
            .max(std::time::Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: wait.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
                // Below 10^9: fits.
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            },
        };
        self.arms += 1;
        // SAFETY: timerfd_settime(2) on our own timerfd with a valid itimerspec; the old
        // value is not asked for (null).
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, core::ptr::null_mut()) };
        if rc != 0 {
            self.armed = None;
            return Err(errno());
        }
        self.armed = Some(due);
        Ok(())
    }

    /// After a wake-up at `now`: if the armed time has passed, consumes the expiry (the
    /// descriptor stays readable until it is read, and every sleep would end at once) and
    /// returns true; the timer is then disarmed. An expiry the kernel has not delivered yet
    /// (the clock read before it fired) is left for the next call.
    pub fn expired(&mut self, now: std::time::Instant) -> bool {
        match self.armed {
            Some(at) if at <= now => {}
            _ => return false,
        }
        let mut count = 0u64;
        // SAFETY: read(2) of 8 bytes into a u64 we own, from our own non-blocking timerfd.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&raw mut count).cast(),
                core::mem::size_of::<u64>(),
            )
        };
        if n == core::mem::size_of::<u64>() as isize {
            self.armed = None;
            self.fired += 1;
            true
        } else {
            false
        }
    }

    /// Times the timer was set, and expiries consumed.
    pub fn counts(&self) -> (u64, u64) {
        (self.arms, self.fired)
    }
}

/// Whether a timer armed for `armed` (`None`: disarmed) must be set again so that it fires by
/// `due`: only when it is disarmed or fires later.
fn needs_arming(armed: Option<std::time::Instant>, due: std::time::Instant) -> bool {
    armed.is_none_or(|at| at > due)
}

/// Interface index of `name` in the calling thread's network namespace, `None` if absent.
pub(crate) fn if_index(name: &IfName) -> Option<u32> {
    let c_name = name.c_bytes();
    // SAFETY: `c_name` is a NUL-terminated array (IfName keeps at least one trailing zero
    // byte) that lives across the call; if_nametoindex only reads it.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    (index != 0).then_some(index)
}

/// A zeroed `ifreq` with the name filled in.
pub(crate) fn ifreq(name: &IfName) -> libc::ifreq {
    // SAFETY: ifreq is a plain C struct/union of integers, arrays and raw pointers, for
    // which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { core::mem::zeroed() };
    req.ifr_name = name.c_bytes();
    req
}

/// An `AF_INET` datagram socket, the handle the `SIOC*IF*` ioctls are issued on.
pub(crate) fn inet_socket() -> Result<OwnedFd, i32> {
    // SAFETY: plain socket(2) call with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Issues `request` with `req` on `fd`.
pub(crate) fn ioctl_ifreq(
    fd: &OwnedFd,
    request: libc::Ioctl,
    req: &mut libc::ifreq,
) -> Result<(), i32> {
    // SAFETY: every request passed here (TUNSETIFF, SIOC[GS]IF{FLAGS,MTU,ADDR,NETMASK,TXQLEN})
    // reads and/or writes one `struct ifreq`, and `req` is a valid, exclusively borrowed
    // ifreq for the duration of the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, req as *mut libc::ifreq) };
    if rc < 0 { Err(errno()) } else { Ok(()) }
}

/// Reads the interface MTU (`SIOCGIFMTU`).
pub(crate) fn get_mtu(name: &IfName) -> Result<u32, i32> {
    let sock = inet_socket()?;
    let mut req = ifreq(name);
    ioctl_ifreq(&sock, libc::SIOCGIFMTU as libc::Ioctl, &mut req)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the `ifru_mtu` member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| libc::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// poll(2) of `fd` alone for readability, waiting at most `ms` milliseconds.
    fn readable(fd: std::os::fd::BorrowedFd<'_>, ms: i32) -> bool {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, exclusively borrowed for the call.
        unsafe { libc::poll(&mut pfd, 1, ms) == 1 }
    }

    #[test]
    fn sleep_timer_is_armed_only_when_it_would_fire_too_late() {
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        assert!(needs_arming(None, at(100)));
        assert!(needs_arming(Some(at(200)), at(100)));
        assert!(!needs_arming(Some(at(100)), at(100)));
        assert!(!needs_arming(Some(at(50)), at(100)));
        // Passed and not consumed: it fires (or fired), the sleep ends by then.
        assert!(!needs_arming(Some(t0), at(100)));

        let mut timer = SleepTimer::new().expect("timerfd");
        let far = t0 + Duration::from_secs(3600);
        timer.cover(t0, far).expect("arm");
        timer.cover(t0, far + Duration::from_secs(1)).expect("keep");
        assert_eq!(timer.counts(), (1, 0), "a later due leaves the timer alone");
        timer
            .cover(t0, far - Duration::from_secs(1))
            .expect("earlier");
        assert_eq!(timer.counts(), (2, 0));
        assert!(!timer.expired(t0), "not due yet");
        assert!(!readable(timer.fd(), 0));
    }

    #[test]
    fn sleep_timer_expiry_is_readable_until_consumed() {
        let mut timer = SleepTimer::new().expect("timerfd");
        let now = Instant::now();
        // Due at once: the kernel fires it within microseconds.
        timer.cover(now, now).expect("arm");
        assert!(readable(timer.fd(), 5_000), "fired");
        assert!(readable(timer.fd(), 0), "stays readable until read");
        assert!(timer.expired(Instant::now()));
        assert!(!readable(timer.fd(), 0), "consumed");
        assert_eq!(timer.counts(), (1, 1));
        assert!(!timer.expired(Instant::now()), "nothing armed");
        // Disarmed: the next cover arms it again.
        timer
            .cover(Instant::now(), Instant::now() + Duration::from_secs(3600))
            .expect("arm");
        assert_eq!(timer.counts(), (2, 1));
    }

    #[test]
    fn names() {
        assert_eq!(IfName::new("memspin0").unwrap().as_str(), "memspin0");
        assert_eq!(IfName::new("a23456789012345").unwrap().as_str().len(), 15);
        for bad in [
            "",
            "a234567890123456",
            "tap%d",
            "a/b",
            "a b",
            "a:1",
            ".",
            "..",
        ] {
            assert!(IfName::new(bad).is_err(), "{bad:?}");
        }
        let name = IfName::new("ms0").unwrap();
        assert_eq!(name.c_bytes()[3], 0);
        assert_eq!(format!("{name}"), "ms0");
    }

    #[test]
    fn loopback_exists_and_has_an_mtu() {
        let lo = IfName::new("lo").unwrap();
        assert!(if_index(&lo).is_some());
        assert!(get_mtu(&lo).unwrap() >= 1500);
        assert_eq!(if_index(&IfName::new("no-such-dev0").unwrap()), None);
    }
}
