//! One ICMP or ICMPv6 echo over a raw socket (what `ping -c 1` sends), for the tests that
//! check memspin answers ping on its own addresses (or that the kernel still answers on its
//! own). Run from a thread inside the sender's namespace.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Sends one echo request to `dst` (identifier: this process, sequence `seq`) and waits up
/// to `timeout` for its reply; returns the round trip.
///
/// # Errors
/// The socket's error, or `TimedOut`.
pub fn echo(dst: IpAddr, seq: u16, timeout: Duration) -> std::io::Result<Duration> {
    let (family, protocol, request) = match dst {
        IpAddr::V4(_) => (libc::AF_INET, libc::IPPROTO_ICMP, 8u8),
        IpAddr::V6(_) => (libc::AF_INET6, libc::IPPROTO_ICMPV6, 128u8),
    };
    // SAFETY: socket(2) with constant arguments; checked before use.
    let fd = unsafe { libc::socket(family, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: `tv` outlives the call and its size is passed.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    let id = std::process::id() as u16;
    let mut message = [0u8; 16];
    message[0] = request;
    message[4..6].copy_from_slice(&id.to_be_bytes());
    message[6..8].copy_from_slice(&seq.to_be_bytes());
    message[8..].copy_from_slice(b"memspin!");
    if dst.is_ipv4() {
        // The kernel fills in ICMPv6 checksums of raw sockets; ICMP's is ours.
        let sum = message
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let sum = (sum & 0xffff) + (sum >> 16);
        message[2..4].copy_from_slice(&(!((sum & 0xffff) + (sum >> 16)) as u16).to_be_bytes());
    }
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut to: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match dst {
        IpAddr::V4(ip) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(ip.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut to as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        IpAddr::V6(ip) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut to as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    let start = Instant::now();
    // SAFETY: `message` and `to` outlive the call; their sizes are passed.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            message.as_ptr().cast(),
            message.len(),
            0,
            (&to as *const libc::sockaddr_storage).cast(),
            len as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let reply_type = if dst.is_ipv4() { 0 } else { 129 };
    let mut buf = [0u8; 1500];
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    while start.elapsed() < timeout {
        let mut from_len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `buf` and `from` are writable for the lengths passed.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut from as *mut libc::sockaddr_storage).cast(),
                &mut from_len,
            )
        };
        if n <= 0 {
            continue;
        }
        // An ICMP raw socket sees the IPv4 header too; an ICMPv6 one does not. Every ICMP
        // message of the namespace arrives: keep the reply from `dst` to this request.
        let (icmp, from_dst) = match dst {
            IpAddr::V4(ip) => (
                &buf[usize::from(buf[0] & 0x0f) * 4..n as usize],
                buf[12..16] == ip.octets(),
            ),
            IpAddr::V6(ip) => {
                // SAFETY: an AF_INET6 socket's recvfrom wrote a sockaddr_in6 into `from`.
                let sin6 = unsafe {
                    &*(&from as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
                };
                (&buf[..n as usize], sin6.sin6_addr.s6_addr == ip.octets())
            }
        };
        if from_dst && icmp.len() >= 8 && icmp[0] == reply_type && icmp[4..8] == message[4..8] {
            return Ok(start.elapsed());
        }
    }
    Err(std::io::ErrorKind::TimedOut.into())
}
