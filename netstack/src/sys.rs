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

/// Interface index of `name` in the calling thread's network namespace, `None` if absent.
/// Waits with poll(2) until `fd` (or `also`, e.g. a worker's wake-up eventfd) is readable or
/// `timeout` passes (`None`: no limit). Returns whether `fd` is readable; an interrupted wait
/// (`EINTR`) counts as not readable, so the caller re-checks its own state. Timeouts are rounded
/// up to whole milliseconds, so a 100 µs deadline does not turn into a busy 0 ms poll.
///
/// # Errors
/// poll(2)'s errno.
pub(crate) fn poll_readable(
    fd: std::os::fd::BorrowedFd<'_>,
    also: Option<std::os::fd::BorrowedFd<'_>>,
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
    let mut pfds = [
        entry(fd.as_raw_fd()),
        entry(also.map_or(-1, |a| a.as_raw_fd())),
    ];
    let nfds: libc::nfds_t = if also.is_some() { 2 } else { 1 };
    // SAFETY: `pfds` holds `nfds` valid pollfds (a negative fd is ignored by poll), exclusively
    // borrowed for the call.
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
