//! rtnetlink: read a link's MAC, MTU, receive queues and attached XDP program
//! (`RTM_GETLINK`), attach or detach an XDP program (`RTM_SETLINK` with `IFLA_XDP`, the same
//! request `ip link set dev X xdp ...` sends), and give a link an IPv6 address without
//! duplicate address detection (`RTM_NEWADDR` with `IFA_F_NODAD`, as `ip addr add ...
//! nodad`). Start-up and shutdown only; a fresh socket per request.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::sys;

const IFLA_ADDRESS: u16 = 1;
const IFLA_MTU: u16 = 4;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_XDP: u16 = 43;

const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;
const IFLA_XDP_EXPECTED_FD: u16 = 8;

const XDP_ATTACHED_DRV: u8 = 1;
const XDP_ATTACHED_SKB: u8 = 2;
const XDP_ATTACHED_HW: u8 = 3;

/// `XDP_FLAGS_UPDATE_IF_NOEXIST`: fail with `EBUSY` if a program is attached.
pub(crate) const FLAGS_UPDATE_IF_NOEXIST: u32 = 1 << 0;
/// `XDP_FLAGS_SKB_MODE`: generic XDP.
pub(crate) const FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native (driver) XDP.
pub(crate) const FLAGS_DRV_MODE: u32 = 1 << 2;
/// `XDP_FLAGS_HW_MODE`: offloaded to the NIC.
pub(crate) const FLAGS_HW_MODE: u32 = 1 << 3;
/// `XDP_FLAGS_REPLACE`: act only if the attached program is `IFLA_XDP_EXPECTED_FD`'s.
pub(crate) const FLAGS_REPLACE: u32 = 1 << 4;

const IFA_ADDRESS: u16 = 1;
const IFA_FLAGS: u16 = 8;
/// `IFA_F_NODAD`: no duplicate address detection, so the address is never tentative.
const IFA_F_NODAD: u32 = 0x02;
/// `IFA_F_PERMANENT`: configured, not learned from a router.
const IFA_F_PERMANENT: u32 = 0x80;

const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | (1 << 14));
const NLMSG_HDR_LEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;

/// Where an attached XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver, before an skb exists (`XDP_FLAGS_DRV_MODE`, "xdpdrv").
    Native,
    /// In the core receive path on an skb, for any driver (`XDP_FLAGS_SKB_MODE`, "xdpgeneric").
    Generic,
    /// On the NIC itself ("xdpoffload"); memspin never attaches this way.
    Offload,
}

impl AttachMode {
    /// The `XDP_FLAGS_*_MODE` bit.
    pub(crate) fn flag(self) -> u32 {
        match self {
            AttachMode::Native => FLAGS_DRV_MODE,
            AttachMode::Generic => FLAGS_SKB_MODE,
            AttachMode::Offload => FLAGS_HW_MODE,
        }
    }

    /// The name `ip link` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
            AttachMode::Offload => "offload",
        }
    }
}

/// An XDP program found on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attached {
    /// Where it runs.
    pub mode: AttachMode,
    /// Its program id.
    pub prog_id: u32,
}

/// What `RTM_GETLINK` says about a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkInfo {
    pub mtu: u32,
    pub mac: Option<[u8; 6]>,
    pub rx_queues: u32,
    pub xdp: Option<Attached>,
}

/// A netlink request failure: `errno` of the socket call, or the kernel's negative error.
pub(crate) type Errno = i32;

fn socket() -> Result<OwnedFd, Errno> {
    // SAFETY: plain socket(2) call with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(sys::errno());
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Appends one attribute (4-byte aligned).
fn put_attr(msg: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    msg.extend_from_slice(&(len as u16).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(payload);
    msg.resize(msg.len().next_multiple_of(4), 0);
}

/// A request header plus an `ifinfomsg` for `ifindex`; the length is patched by `send`.
fn request(kind: u16, flags: u16, ifindex: u32) -> Vec<u8> {
    let mut msg = Vec::with_capacity(128);
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // ifinfomsg: family AF_UNSPEC, pad, type, index, flags, change.
    msg.extend_from_slice(&[0, 0, 0, 0]);
    msg.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    msg.extend_from_slice(&[0; 8]);
    msg
}

/// Sends `msg` and returns the first reply message (header included), or the kernel's
/// error from an `NLMSG_ERROR` reply. An ack (`NLMSG_ERROR` with 0) is `Ok` with that message.
fn transact(mut msg: Vec<u8>) -> Result<Vec<u8>, Errno> {
    let len = msg.len() as u32;
    msg[..4].copy_from_slice(&len.to_ne_bytes());
    let fd = socket()?;
    // SAFETY: an all-zero sockaddr_nl with the family set addresses the kernel (pid 0).
    let mut addr: libc::sockaddr_nl = unsafe { core::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: `msg` and `addr` are valid for the given lengths during the call.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&addr as *const libc::sockaddr_nl).cast(),
            core::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(sys::errno());
    }
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: `buf` is a valid, exclusively borrowed buffer of its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            match sys::errno() {
                libc::EINTR => continue,
                errno => return Err(errno),
            }
        }
        let n = n as usize;
        if n < NLMSG_HDR_LEN {
            return Err(libc::EIO);
        }
        let msg_len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if msg_len < NLMSG_HDR_LEN || msg_len > n {
            return Err(libc::EIO);
        }
        if kind == libc::NLMSG_ERROR as u16 {
            if msg_len < NLMSG_HDR_LEN + 4 {
                return Err(libc::EIO);
            }
            let error = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
            if error != 0 {
                return Err(-error);
            }
        }
        buf.truncate(msg_len);
        return Ok(buf);
    }
}

/// Iterates `(type, payload)` over attributes in `bytes`.
fn attrs(mut bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    core::iter::from_fn(move || {
        if bytes.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > bytes.len() {
            return None;
        }
        let payload = &bytes[4..len];
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
        Some((kind, payload))
    })
}

fn u32_of(payload: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(payload.get(..4)?.try_into().ok()?))
}

/// Parses an `RTM_NEWLINK` message.
fn parse_link(msg: &[u8]) -> Result<LinkInfo, Errno> {
    let body = msg.get(NLMSG_HDR_LEN + IFINFOMSG_LEN..).ok_or(libc::EIO)?;
    let mut info = LinkInfo {
        mtu: 0,
        mac: None,
        rx_queues: 1,
        xdp: None,
    };
    for (kind, payload) in attrs(body) {
        match kind {
            IFLA_MTU => info.mtu = u32_of(payload).ok_or(libc::EIO)?,
            IFLA_ADDRESS if payload.len() == 6 => {
                let mut mac = [0u8; 6];
                mac.copy_from_slice(payload);
                info.mac = Some(mac);
            }
            IFLA_NUM_RX_QUEUES => info.rx_queues = u32_of(payload).ok_or(libc::EIO)?,
            IFLA_XDP => info.xdp = parse_xdp(payload),
            _ => {}
        }
    }
    Ok(info)
}

fn parse_xdp(nested: &[u8]) -> Option<Attached> {
    let (mut attached, mut prog, mut drv, mut skb, mut hw) = (0u8, None, None, None, None);
    for (kind, payload) in attrs(nested) {
        match kind {
            IFLA_XDP_ATTACHED => attached = payload.first().copied().unwrap_or(0),
            IFLA_XDP_PROG_ID => prog = u32_of(payload),
            IFLA_XDP_DRV_PROG_ID => drv = u32_of(payload),
            IFLA_XDP_SKB_PROG_ID => skb = u32_of(payload),
            IFLA_XDP_HW_PROG_ID => hw = u32_of(payload),
            _ => {}
        }
    }
    let of = |mode, id: Option<u32>| id.map(|prog_id| Attached { mode, prog_id });
    match attached {
        XDP_ATTACHED_DRV => of(AttachMode::Native, prog.or(drv)),
        XDP_ATTACHED_SKB => of(AttachMode::Generic, prog.or(skb)),
        XDP_ATTACHED_HW => of(AttachMode::Offload, prog.or(hw)),
        // XDP_ATTACHED_MULTI (several modes at once), or none.
        _ => of(AttachMode::Native, drv)
            .or(of(AttachMode::Generic, skb))
            .or(of(AttachMode::Offload, hw)),
    }
}

/// Reads the link `ifindex`.
pub(crate) fn get_link(ifindex: u32) -> Result<LinkInfo, Errno> {
    let reply = transact(request(libc::RTM_GETLINK, 0, ifindex))?;
    parse_link(&reply)
}

/// Attaches program `prog_fd` to `ifindex` (or detaches with `prog_fd` = -1) with `flags`;
/// with `expected_fd`, only if that program is the one attached now (`XDP_FLAGS_REPLACE`).
pub(crate) fn set_xdp(
    ifindex: u32,
    prog_fd: i32,
    flags: u32,
    expected_fd: Option<i32>,
) -> Result<(), Errno> {
    let mut nested = Vec::with_capacity(32);
    put_attr(&mut nested, IFLA_XDP_FD, &prog_fd.to_ne_bytes());
    let flags = flags | expected_fd.map_or(0, |_| FLAGS_REPLACE);
    put_attr(&mut nested, IFLA_XDP_FLAGS, &flags.to_ne_bytes());
    if let Some(fd) = expected_fd {
        put_attr(&mut nested, IFLA_XDP_EXPECTED_FD, &fd.to_ne_bytes());
    }
    let mut msg = request(libc::RTM_SETLINK, libc::NLM_F_ACK as u16, ifindex);
    put_attr(&mut msg, IFLA_XDP | NLA_F_NESTED, &nested);
    transact(msg).map(drop)
}

/// Gives link `ifindex` the IPv6 address `addr/prefix_len`, usable at once: without
/// `IFA_F_NODAD` the kernel marks a new address tentative and clears the mark only later,
/// on a workqueue, even with `accept_dad` at 0, and until then nothing can bind to it.
/// Giving an address the link already has is not an error (`NLM_F_REPLACE`).
pub(crate) fn add_ipv6_address(ifindex: u32, addr: [u8; 16], prefix_len: u8) -> Result<(), Errno> {
    let mut msg = Vec::with_capacity(64);
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&libc::RTM_NEWADDR.to_ne_bytes());
    let flags = libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_REPLACE;
    msg.extend_from_slice(&(flags as u16).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // ifaddrmsg: family, prefix length, flags (the 8-bit copy), scope (universe), index.
    msg.extend_from_slice(&[libc::AF_INET6 as u8, prefix_len, IFA_F_NODAD as u8, 0]);
    msg.extend_from_slice(&ifindex.to_ne_bytes());
    put_attr(&mut msg, IFA_ADDRESS, &addr);
    put_attr(
        &mut msg,
        IFA_FLAGS,
        &(IFA_F_NODAD | IFA_F_PERMANENT).to_ne_bytes(),
    );
    transact(msg).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip() {
        let mut nested = Vec::new();
        put_attr(&mut nested, IFLA_XDP_ATTACHED, &[XDP_ATTACHED_SKB]);
        put_attr(&mut nested, IFLA_XDP_PROG_ID, &42u32.to_ne_bytes());
        assert_eq!(nested.len(), 8 + 8, "a 1-byte attribute is padded to 8");
        assert_eq!(
            parse_xdp(&nested),
            Some(Attached {
                mode: AttachMode::Generic,
                prog_id: 42
            })
        );
        let mut multi = Vec::new();
        put_attr(&mut multi, IFLA_XDP_ATTACHED, &[4]);
        put_attr(&mut multi, IFLA_XDP_DRV_PROG_ID, &7u32.to_ne_bytes());
        assert_eq!(parse_xdp(&multi).unwrap().mode, AttachMode::Native);
        assert_eq!(parse_xdp(&[]), None);
        // Truncated or lying lengths end the walk instead of panicking.
        for cut in 0..nested.len() {
            let _ = parse_xdp(&nested[..cut]);
        }
        let bogus = [200u8, 0, 2, 0, 1, 0, 0, 0];
        assert_eq!(attrs(&bogus).count(), 0);
    }

    #[test]
    fn loopback_link() {
        let info = get_link(1).expect("RTM_GETLINK lo");
        assert!(info.mtu >= 1500);
        assert!(info.rx_queues >= 1);
        assert_eq!(info.mac, Some([0; 6]));
        assert_eq!(get_link(0x7fff_fff0), Err(libc::ENODEV));
    }
}
