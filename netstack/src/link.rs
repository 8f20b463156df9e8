//! Host-side setup of the kernel end of a TAP link, with ioctls (no `ip` binary needed).
//!
//! Order of a start-up, for `--net tap`:
//!
//! ```text
//! TapDevice::open(name, mq) × workers   creates the device if absent (TUNSETIFF)
//! link::configure(name, &LinkConfig)    IPv6 off, MTU, host address, link up
//! TapDevice::set_mtu(mtu)               if the MTU changed, before building the interface
//! ```
//!
//! The device must exist when [`configure`] runs, because a TAP device only lives while a
//! queue fd is open (unless someone made it persistent with `ip tuntap add`): whoever
//! creates it must hold the fd. [`crate::tap::TapDevice::created`] says whether we did; a
//! device we created disappears with our last fd, addresses and all, so there is nothing
//! to undo on exit. On a pre-existing device, the host address we set stays after we exit.
//!
//! Without a kernel-side IPv6 address, IPv6 is disabled on the device
//! (`/proc/sys/net/ipv6/conf/<dev>/disable_ipv6`) before it goes up, so the kernel sends no
//! router or neighbour solicitations into the loop. With one (`--host-ip` given an IPv6
//! prefix), IPv6 stays on, duplicate address detection and router solicitations are turned
//! off for the device (memspin answers neither, and an address under detection could not be
//! used for a second), and the address is added with `SIOCSIFADDR` on an `AF_INET6` socket.
//! All calls act in the calling thread's network namespace.

use core::fmt;
use std::io::Write;

use smoltcp::wire::{Ipv4Cidr, Ipv6Cidr};

use crate::sys::{self, IfName, InvalidIfName};

/// What to set on the kernel side of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkConfig {
    /// Kernel-side IPv4 address and prefix (`--host-ip ADDR/PREFIX`); `None` leaves IPv4
    /// addresses alone.
    pub host_ip: Option<Ipv4Cidr>,
    /// Kernel-side IPv6 address and prefix (`--host-ip` with an IPv6 prefix); `None`
    /// disables IPv6 on the device.
    pub host_ipv6: Option<Ipv6Cidr>,
    /// IP MTU to set; `None` keeps the device's MTU (1500 for a new TAP).
    pub mtu: Option<u32>,
    /// Frames the kernel queues for us before it drops (`txqueuelen`); `None` keeps the
    /// device's (1000 for a new TAP). A burst from thousands of clients overflows 1000 frames,
    /// and each dropped segment then waits for the client's retransmission timer.
    pub tx_queue_len: Option<u32>,
}

/// The step of [`configure`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkOp {
    /// Finding the device (`if_nametoindex`).
    Lookup,
    /// Opening the `AF_INET` socket the ioctls go through.
    Socket,
    /// Writing `disable_ipv6`.
    DisableIpv6,
    /// Writing `disable_ipv6`, `accept_dad` or `router_solicitations` to keep IPv6 on.
    EnableIpv6,
    /// `RTM_NEWADDR` of the IPv6 address (without duplicate address detection).
    SetIpv6Address,
    /// `SIOCSIFMTU`.
    SetMtu,
    /// `SIOCGIFMTU`.
    GetMtu,
    /// `SIOCSIFADDR`.
    SetAddress,
    /// `SIOCSIFNETMASK`.
    SetNetmask,
    /// `SIOCGIFFLAGS`.
    GetFlags,
    /// `SIOCSIFFLAGS` (bringing the link up).
    SetFlags,
    /// `SIOCSIFTXQLEN`.
    SetTxQueueLen,
}

/// A link setup error; carries the device name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkError {
    /// The name is not a valid interface name.
    InvalidName(InvalidIfName),
    /// No device of that name in this network namespace.
    NotFound {
        /// Device name.
        name: IfName,
    },
    /// A system call failed.
    Sys {
        /// Device name.
        name: IfName,
        /// Step that failed.
        op: LinkOp,
        /// `errno` it returned.
        errno: i32,
    },
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LinkError::InvalidName(e) => e.fmt(f),
            LinkError::NotFound { name } => write!(f, "link {name}: no such device"),
            LinkError::Sys { name, op, errno } => {
                let what = match op {
                    LinkOp::Lookup => "if_nametoindex",
                    LinkOp::Socket => "socket(AF_INET)",
                    LinkOp::DisableIpv6 => "write disable_ipv6",
                    LinkOp::EnableIpv6 => "write the device's IPv6 settings",
                    LinkOp::SetIpv6Address => "RTM_NEWADDR (IPv6, nodad)",
                    LinkOp::SetMtu => "SIOCSIFMTU",
                    LinkOp::GetMtu => "SIOCGIFMTU",
                    LinkOp::SetAddress => "SIOCSIFADDR",
                    LinkOp::SetNetmask => "SIOCSIFNETMASK",
                    LinkOp::GetFlags => "SIOCGIFFLAGS",
                    LinkOp::SetFlags => "SIOCSIFFLAGS",
                    LinkOp::SetTxQueueLen => "SIOCSIFTXQLEN",
                };
                write!(
                    f,
                    "link {name}: {what}: {}",
                    std::io::Error::from_raw_os_error(errno)
                )
            }
        }
    }
}

impl std::error::Error for LinkError {}

impl From<InvalidIfName> for LinkError {
    fn from(e: InvalidIfName) -> Self {
        LinkError::InvalidName(e)
    }
}

/// True if a device called `name` exists in the calling thread's network namespace.
///
/// # Errors
/// [`LinkError::InvalidName`].
pub fn device_exists(name: &str) -> Result<bool, LinkError> {
    Ok(sys::if_index(&IfName::new(name)?).is_some())
}

/// The device's IP MTU.
///
/// # Errors
/// [`LinkError::NotFound`] or [`LinkError::Sys`] with [`LinkOp::GetMtu`].
pub fn mtu(name: &str) -> Result<u32, LinkError> {
    let name = IfName::new(name)?;
    sys::if_index(&name).ok_or(LinkError::NotFound { name })?;
    sys::get_mtu(&name).map_err(|errno| LinkError::Sys {
        name,
        op: LinkOp::GetMtu,
        errno,
    })
}

/// Configures the kernel side of device `name`: disables IPv6 (or, with an IPv6 host
/// address, keeps it on without duplicate address detection), sets the MTU and the host
/// addresses if given, and brings the link up. Idempotent.
///
/// # Errors
/// [`LinkError`] naming the device and the failed step; `EPERM` without `CAP_NET_ADMIN`.
/// A kernel built without IPv6 (no `disable_ipv6` file) is not an error unless an IPv6
/// host address is asked for.
pub fn configure(name: &str, config: &LinkConfig) -> Result<(), LinkError> {
    let name = IfName::new(name)?;
    let fail = |op, errno| LinkError::Sys { name, op, errno };
    let index = sys::if_index(&name).ok_or(LinkError::NotFound { name })?;

    match config.host_ipv6 {
        None => disable_ipv6(&name).map_err(|e| fail(LinkOp::DisableIpv6, e))?,
        Some(_) => {
            for (key, value) in [
                ("accept_dad", "0"),
                ("router_solicitations", "0"),
                ("disable_ipv6", "0"),
            ] {
                ipv6_conf(&name, key, value).map_err(|e| fail(LinkOp::EnableIpv6, e))?;
            }
        }
    }

    let sock = sys::inet_socket().map_err(|e| fail(LinkOp::Socket, e))?;
    if let Some(mtu) = config.mtu {
        let mut req = sys::ifreq(&name);
        req.ifr_ifru.ifru_mtu =
            libc::c_int::try_from(mtu).map_err(|_| fail(LinkOp::SetMtu, libc::EINVAL))?;
        sys::ioctl_ifreq(&sock, libc::SIOCSIFMTU as libc::Ioctl, &mut req)
            .map_err(|e| fail(LinkOp::SetMtu, e))?;
    }
    if let Some(len) = config.tx_queue_len {
        let mut req = sys::ifreq(&name);
        // `ifr_qlen` is the union's int member, which libc names `ifru_ifindex`.
        req.ifr_ifru.ifru_ifindex =
            libc::c_int::try_from(len).map_err(|_| fail(LinkOp::SetTxQueueLen, libc::EINVAL))?;
        sys::ioctl_ifreq(&sock, libc::SIOCSIFTXQLEN as libc::Ioctl, &mut req)
            .map_err(|e| fail(LinkOp::SetTxQueueLen, e))?;
    }
    if let Some(cidr) = config.host_ip {
        let mut req = sys::ifreq(&name);
        req.ifr_ifru.ifru_addr = sockaddr_in(cidr.address().octets());
        sys::ioctl_ifreq(&sock, libc::SIOCSIFADDR as libc::Ioctl, &mut req)
            .map_err(|e| fail(LinkOp::SetAddress, e))?;
        let mut req = sys::ifreq(&name);
        req.ifr_ifru.ifru_netmask = sockaddr_in(cidr.netmask().octets());
        sys::ioctl_ifreq(&sock, libc::SIOCSIFNETMASK as libc::Ioctl, &mut req)
            .map_err(|e| fail(LinkOp::SetNetmask, e))?;
    }

    if let Some(cidr) = config.host_ipv6 {
        crate::netlink::add_ipv6_address(index, cidr.address().octets(), cidr.prefix_len())
            .map_err(|e| fail(LinkOp::SetIpv6Address, e))?;
    }

    let mut req = sys::ifreq(&name);
    sys::ioctl_ifreq(&sock, libc::SIOCGIFFLAGS as libc::Ioctl, &mut req)
        .map_err(|e| fail(LinkOp::GetFlags, e))?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote the `ifru_flags` member.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    // IFF_UP is 1; it fits the 16-bit field.
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    sys::ioctl_ifreq(&sock, libc::SIOCSIFFLAGS as libc::Ioctl, &mut req)
        .map_err(|e| fail(LinkOp::SetFlags, e))?;
    Ok(())
}

/// Writes "1" to the device's `disable_ipv6`; a missing file (no IPv6 in the kernel) is fine.
fn disable_ipv6(name: &IfName) -> Result<(), i32> {
    match ipv6_conf(name, "disable_ipv6", "1") {
        Err(libc::ENOENT) => Ok(()),
        done => done,
    }
}

/// Writes `value` to `/proc/sys/net/ipv6/conf/<name>/<key>`.
fn ipv6_conf(name: &IfName, key: &str, value: &str) -> Result<(), i32> {
    let path = format!("/proc/sys/net/ipv6/conf/{name}/{key}");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    file.write_all(format!("{value}\n").as_bytes())
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// An `AF_INET` `sockaddr` holding `octets`, port 0, as the address ioctls want.
fn sockaddr_in(octets: [u8; 4]) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(octets),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr are both 16-byte plain C structs; the kernel reads
    // a sockaddr_in through the generic sockaddr member, which is exactly this reinterpretation.
    unsafe { core::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_device_is_typed() {
        assert_eq!(device_exists("no-such-dev0"), Ok(false));
        let e = configure("no-such-dev0", &LinkConfig::default()).unwrap_err();
        assert!(matches!(e, LinkError::NotFound { .. }));
        assert!(e.to_string().contains("no-such-dev0"));
        assert!(matches!(
            configure("bad name", &LinkConfig::default()),
            Err(LinkError::InvalidName(_))
        ));
    }

    #[test]
    fn sockaddr_layout() {
        let sa = sockaddr_in([10, 77, 0, 1]);
        assert_eq!(sa.sa_family, libc::AF_INET as libc::sa_family_t);
        // sa_data: 2 bytes of port, then the address in network order.
        assert_eq!(
            &sa.sa_data[2..6],
            &[10, 77, 0, 1].map(|b: u8| b as libc::c_char)
        );
    }

    #[test]
    fn loopback_mtu() {
        assert!(mtu("lo").unwrap() >= 1500);
    }

    /// In a network namespace of its own (this thread's, gone when it ends): a TAP device
    /// given an IPv6 host address has it at once (not tentative: no duplicate address
    /// detection), configuring again is fine, and without one IPv6 is off.
    #[test]
    fn an_ipv6_host_address_is_usable_at_once() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root for a namespace and a TAP device");
            return;
        }
        std::thread::spawn(|| {
            // SAFETY: unshare(2) moves only this thread into a new network namespace.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0);
            let show = |dev: &str| {
                let out = std::process::Command::new("ip")
                    .args(["-6", "addr", "show", "dev", dev])
                    .output()
                    .expect("ip");
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            let _tap = crate::TapDevice::open("ms6", false).expect("a TAP device");
            let config = LinkConfig {
                host_ipv6: Some(Ipv6Cidr::new("fd77::1".parse().unwrap(), 64)),
                ..LinkConfig::default()
            };
            configure("ms6", &config).expect("configure");
            configure("ms6", &config).expect("configure again");
            let addrs = show("ms6");
            // The host address's own line: the kernel also gives the device a link-local
            // address once it is up, and completes that one (without detection, as
            // `accept_dad` is 0) on a workqueue, so on a loaded machine it may still show
            // `tentative` for a moment. Nothing uses it; the host address is what must be
            // usable at once.
            let host = addrs
                .lines()
                .find(|line| line.contains("inet6 fd77::1/64"))
                .unwrap_or_else(|| panic!("no host address: {addrs}"));
            assert!(!host.contains("tentative"), "{addrs}");
            let _plain = crate::TapDevice::open("ms4", false).expect("a TAP device");
            configure("ms4", &LinkConfig::default()).expect("configure");
            assert!(!show("ms4").contains("inet6"), "IPv6 off: {}", show("ms4"));
        })
        .join()
        .expect("the namespace thread");
    }
}
