//! Kernel timestamps as send and reply times (`--timestamps software|hardware|none`): the
//! socket options to ask for them, the control messages they arrive in, which request a
//! transmit stamp belongs to, and the mapping of the kernel's clock onto the run clock.
//!
//! ```text
//! write() ─▶ TCP ─▶ driver: TX stamp ─▶ error queue (MSG_ERRQUEUE): key = stream offset of the
//!                                      write's last byte ─▶ every request ending at or before it
//! server ─▶ driver/netif_rx: RX stamp ─▶ TCP ─▶ recvmsg(): SCM_TIMESTAMPING control message
//! service time = RX stamp − TX stamp      generator delay = reply handled (run clock) − RX stamp
//! ```
//!
//! What each stamp marks (Linux `Documentation/networking/timestamping.rst`):
//! - **software transmit** (`SOF_TIMESTAMPING_TX_SOFTWARE`): the segment holding the last byte
//!   of a `write()` is handed to the device driver (`skb_tx_timestamp` in its transmit routine;
//!   loopback and veth call it). With `SOF_TIMESTAMPING_OPT_ID` the stamp carries that byte's
//!   offset in the stream (counted from 0 when the option was set, here before the first byte),
//!   so a stamp applies to every request that ended at or before it. With
//!   `SOF_TIMESTAMPING_OPT_TSONLY` the error queue holds the stamp without a copy of the packet.
//! - **software receive** (`SOF_TIMESTAMPING_RX_SOFTWARE`): the packet enters the kernel's stack
//!   from the driver (`netif_receive_skb`, or `netif_rx` for loopback), before IP and TCP. TCP
//!   reports, per `recvmsg()`, the stamp of the last segment it read: replies that arrived in
//!   earlier segments of the same read get that later time.
//! - **hardware** (`SOF_TIMESTAMPING_RAW_HARDWARE`): the NIC's own clock when the packet left or
//!   reached it; enabled on the interface with `SIOCSHWTSTAMP`. Its clock is the NIC's, so only
//!   a hardware pair makes a service time; the generator delay still uses the software receive
//!   stamp, which is requested too.
//!
//! Software stamps read `CLOCK_REALTIME`; the run clock is `CLOCK_MONOTONIC`. Both are slewed
//! alike by NTP, so their difference moves only when the wall clock is set; [`StampClock`]
//! re-reads it every housekeeping pass.
//!
//! Parsing takes the control bytes as they came from the kernel and never panics on short or
//! inconsistent buffers: it reads what is whole and stops.

use std::fmt;

use serde::Serialize;

use crate::sys;

/// Which kernel timestamps a run asks for, and which it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timestamps {
    /// Software transmit and receive stamps.
    Software,
    /// The NIC's transmit and receive stamps (plus software receive stamps).
    Hardware,
    /// No kernel stamps: send and reply times are the generator's own clock readings.
    None,
    /// The bypass client's device stamps (`--net tap`, [`crate::bypass`]): the run clock when
    /// the request's frame went to the device and when the reply's frame was read from it.
    Device,
}

impl Timestamps {
    /// The name used on the command line and in the JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Timestamps::Software => "software",
            Timestamps::Hardware => "hardware",
            Timestamps::None => "none",
            Timestamps::Device => "device",
        }
    }

    /// The `SO_TIMESTAMPING` flags a connected TCP socket gets; `None` asks for nothing.
    pub const fn socket_flags(self) -> Option<u32> {
        const ALWAYS: u32 = libc::SOF_TIMESTAMPING_RX_SOFTWARE
            | libc::SOF_TIMESTAMPING_SOFTWARE
            | libc::SOF_TIMESTAMPING_OPT_ID
            | libc::SOF_TIMESTAMPING_OPT_TSONLY;
        match self {
            Timestamps::Software => Some(ALWAYS | libc::SOF_TIMESTAMPING_TX_SOFTWARE),
            // Without TX_SOFTWARE: a device that stamps in hardware suppresses the software
            // transmit stamp anyway, and the hardware one is the one used.
            Timestamps::Hardware => Some(
                ALWAYS
                    | libc::SOF_TIMESTAMPING_TX_HARDWARE
                    | libc::SOF_TIMESTAMPING_RX_HARDWARE
                    | libc::SOF_TIMESTAMPING_RAW_HARDWARE,
            ),
            Timestamps::None | Timestamps::Device => None,
        }
    }
}

impl fmt::Display for Timestamps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `SCM_TIMESTAMPING` with the 64-bit `struct __kernel_timespec` (`SO_TIMESTAMPING_NEW`); the
/// kernel sends this type only to sockets that set the option under that number.
const SCM_TIMESTAMPING_NEW: libc::c_int = 65;
/// `ee_info` of a stamp taken when the packet went to the driver (`SCM_TSTAMP_SND`).
const SCM_TSTAMP_SND: u32 = 0;
/// Longest control message area this module is asked to parse (a stamp plus an error record).
pub const CONTROL_LEN: usize = 256;

/// Stamps from one control message area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamps {
    /// Software stamp: `CLOCK_REALTIME`, ns since the Unix epoch.
    pub software_ns: Option<u64>,
    /// Raw hardware stamp: the NIC's clock, ns.
    pub hardware_ns: Option<u64>,
}

/// What the control messages of one `recvmsg()` carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Control {
    /// The timestamps (`SCM_TIMESTAMPING`).
    pub stamps: Stamps,
    /// Error-queue messages only: the stamps mark a transmission, and this is the `OPT_ID` key
    /// (stream offset of the last byte of the `write()`, modulo 2^32).
    pub tx_key: Option<u32>,
}

/// `CMSG_ALIGN`: control messages and their data start at multiples of `size_t`.
const fn cmsg_align(len: usize) -> usize {
    let a = size_of::<usize>();
    (len + a - 1) & !(a - 1)
}

/// Bytes before a control message's data (`CMSG_LEN(0)`).
const CMSG_HEADER: usize = cmsg_align(size_of::<libc::cmsghdr>());

/// Reads a native-endian integer of 4 or 8 bytes as i64; `None` for any other width or when
/// `data` is short.
fn read_int(data: &[u8], at: usize, width: usize) -> Option<i64> {
    let bytes = data.get(at..at.checked_add(width)?)?;
    match width {
        4 => Some(i64::from(i32::from_ne_bytes(bytes.try_into().ok()?))),
        8 => Some(i64::from_ne_bytes(bytes.try_into().ok()?)),
        _ => None,
    }
}

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

/// `struct scm_timestamping{,64}`: three timespecs, [0] software, [1] unused, [2] hardware.
/// A zero or invalid timespec is absent.
fn parse_scm_timestamping(data: &[u8], new_layout: bool) -> Stamps {
    let (sec_len, nsec_len) = if new_layout {
        (8, 8)
    } else {
        (size_of::<libc::time_t>(), size_of::<libc::c_long>())
    };
    let ts_len = sec_len + nsec_len;
    let ts = |k: usize| -> Option<u64> {
        let sec = read_int(data, k * ts_len, sec_len)?;
        let nsec = read_int(data, k * ts_len + sec_len, nsec_len)?;
        if sec < 0 || !(0..1_000_000_000).contains(&nsec) || (sec == 0 && nsec == 0) {
            return None;
        }
        (sec as u64)
            .checked_mul(1_000_000_000)?
            .checked_add(nsec as u64)
    };
    Stamps {
        software_ns: ts(0),
        hardware_ns: ts(2),
    }
}

/// `struct sock_extended_err` of a transmit stamp: `ENOMSG`, origin `SO_EE_ORIGIN_TIMESTAMPING`,
/// info `SCM_TSTAMP_SND`; returns its key (`ee_data`). Anything else (an ICMP error, a
/// scheduler or ACK stamp) is `None`.
fn parse_tx_record(data: &[u8]) -> Option<u32> {
    let errno = read_u32(data, 0)?;
    let origin = *data.get(4)?;
    let info = read_u32(data, 8)?;
    let key = read_u32(data, 12)?;
    (errno == libc::ENOMSG as u32
        && origin == libc::SO_EE_ORIGIN_TIMESTAMPING
        && info == SCM_TSTAMP_SND)
        .then_some(key)
}

/// Walks the control messages in `buf` (the first `msg_controllen` bytes after `recvmsg()`)
/// and returns the timestamps and, for error-queue messages, the transmit key.
pub fn parse_control(buf: &[u8]) -> Control {
    let mut out = Control::default();
    let mut pos = 0;
    while let Some(header) = buf.get(pos..pos + CMSG_HEADER) {
        let Some(len) = read_int(header, 0, size_of::<usize>()) else {
            break;
        };
        let level = read_int(header, size_of::<usize>(), 4).unwrap_or(-1) as libc::c_int;
        let kind = read_int(header, size_of::<usize>() + 4, 4).unwrap_or(-1) as libc::c_int;
        let len = len as usize;
        if len < CMSG_HEADER || len > buf.len() - pos {
            break;
        }
        let data = &buf[pos + CMSG_HEADER..pos + len];
        match (level, kind) {
            (libc::SOL_SOCKET, libc::SO_TIMESTAMPING) => {
                out.stamps = parse_scm_timestamping(data, false);
            }
            (libc::SOL_SOCKET, SCM_TIMESTAMPING_NEW) => {
                out.stamps = parse_scm_timestamping(data, true);
            }
            (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR) => {
                if let Some(key) = parse_tx_record(data) {
                    out.tx_key = Some(key);
                }
            }
            _ => {}
        }
        pos += cmsg_align(len);
    }
    out
}

/// The stream offset (bytes since the socket's first, from 0) of the byte a transmit stamp's
/// key names, given the bytes written so far; `None` when nothing was written. Keys are the
/// offset modulo 2^32, and a stamp is never 4 GiB behind the writes, so the newest offset with
/// those low bits is the one.
pub fn unwrap_key(key: u32, written: u64) -> Option<u64> {
    let last = written.checked_sub(1)?;
    let back = u64::from((last as u32).wrapping_sub(key));
    last.checked_sub(back)
}

/// Maps `CLOCK_REALTIME` nanoseconds (software stamps) onto the run clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StampClock {
    /// Realtime minus run clock, ns; `None` before the first reading.
    offset_ns: Option<i128>,
}

/// A reading that took longer than this (the thread was preempted between the clock reads)
/// does not replace a good one.
const MAX_READING_NS: u64 = 20_000;

impl StampClock {
    /// A clock with no reading yet.
    pub const fn new() -> StampClock {
        StampClock { offset_ns: None }
    }

    /// Takes a reading: the run clock before and after reading the realtime clock.
    pub fn update(&mut self, run_before_ns: u64, realtime_ns: u64, run_after_ns: u64) {
        let width = run_after_ns.saturating_sub(run_before_ns);
        if width > MAX_READING_NS && self.offset_ns.is_some() {
            return;
        }
        let mid = i128::from(run_before_ns) + i128::from(width / 2);
        self.offset_ns = Some(i128::from(realtime_ns) - mid);
    }

    /// `realtime_ns` on the run clock; `None` before the first reading or before the run
    /// clock's epoch.
    pub fn to_run_ns(&self, realtime_ns: u64) -> Option<u64> {
        let run = i128::from(realtime_ns) - self.offset_ns?;
        u64::try_from(run).ok()
    }
}

/// Capability names as `ethtool -T` prints them, for the flags in `so_timestamping`.
pub fn describe_capabilities(so_timestamping: u32) -> String {
    const NAMES: [(u32, &str); 6] = [
        (libc::SOF_TIMESTAMPING_TX_HARDWARE, "hardware-transmit"),
        (libc::SOF_TIMESTAMPING_TX_SOFTWARE, "software-transmit"),
        (libc::SOF_TIMESTAMPING_RX_HARDWARE, "hardware-receive"),
        (libc::SOF_TIMESTAMPING_RX_SOFTWARE, "software-receive"),
        (libc::SOF_TIMESTAMPING_SOFTWARE, "software-system-clock"),
        (libc::SOF_TIMESTAMPING_RAW_HARDWARE, "hardware-raw-clock"),
    ];
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(bit, _)| so_timestamping & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Whether an interface's `ETHTOOL_GET_TS_INFO` answer offers what hardware mode needs: raw
/// hardware stamps both ways, transmit stamping (`HWTSTAMP_TX_ON`) and stamping of every
/// received packet (`HWTSTAMP_FILTER_ALL`).
pub fn offers_hardware(info: &sys::TsInfo) -> bool {
    let needed = libc::SOF_TIMESTAMPING_TX_HARDWARE
        | libc::SOF_TIMESTAMPING_RX_HARDWARE
        | libc::SOF_TIMESTAMPING_RAW_HARDWARE;
    info.so_timestamping & needed == needed
        && info.tx_types & (1 << libc::HWTSTAMP_TX_ON) != 0
        && info.rx_filters & (1 << libc::HWTSTAMP_FILTER_ALL) != 0
}

/// The timestamps a run uses, decided before it connects.
#[derive(Debug)]
pub struct StampPlan {
    /// What the sockets are set up for.
    pub source: Timestamps,
    /// Why `source` is not what was asked for; `None` when it is.
    pub note: Option<String>,
    /// Interfaces whose hardware stamping this run turned on; restored on drop.
    restore: Vec<sys::HwStampGuard>,
}

impl StampPlan {
    /// Decides the source for `asked` and the servers in `servers`: hardware needs every
    /// server's route to go out through an interface that stamps in hardware (enabled here,
    /// restored when the plan is dropped); anything short of that falls back to software, with
    /// the reason in `note`. Software needs the socket option (always there on Linux).
    pub fn new(asked: Timestamps, servers: &[std::net::SocketAddr]) -> StampPlan {
        let mut plan = StampPlan {
            source: asked,
            note: None,
            restore: Vec::new(),
        };
        if asked == Timestamps::None {
            return plan;
        }
        if asked == Timestamps::Hardware {
            match enable_hardware(servers) {
                Ok(guards) => plan.restore = guards,
                Err(why) => {
                    plan.source = Timestamps::Software;
                    plan.note = Some(format!(
                        "hardware timestamps unavailable: {why}; using software timestamps"
                    ));
                }
            }
        }
        if plan.source == Timestamps::Software
            && let Err(e) = sys::probe_timestamping(Timestamps::Software)
        {
            plan.source = Timestamps::None;
            plan.note = Some(format!(
                "SO_TIMESTAMPING refused ({e}): send and reply times are the generator's own clock readings"
            ));
        }
        plan
    }

    /// The bypass client's plan: its device stamps, no socket is stamped.
    pub fn device() -> StampPlan {
        StampPlan {
            source: Timestamps::Device,
            note: None,
            restore: Vec::new(),
        }
    }

    /// Interfaces with hardware stamping enabled by this plan.
    pub fn enabled_interfaces(&self) -> Vec<&str> {
        self.restore
            .iter()
            .map(sys::HwStampGuard::interface)
            .collect()
    }
}

/// Turns hardware stamping on for the interface of every server's route; the error says which
/// interface has none, and what it offers.
fn enable_hardware(servers: &[std::net::SocketAddr]) -> Result<Vec<sys::HwStampGuard>, String> {
    let mut ifaces: Vec<String> = Vec::new();
    for server in servers {
        let iface =
            sys::route_interface(server).map_err(|e| format!("no route to {server}: {e}"))?;
        if !ifaces.contains(&iface) {
            ifaces.push(iface);
        }
    }
    let mut guards = Vec::new();
    for iface in ifaces {
        let info = sys::ts_info(&iface)
            .map_err(|e| format!("{iface}: cannot ask for its stamping: {e}"))?;
        if !offers_hardware(&info) {
            return Err(format!(
                "{iface} has no hardware stamping (it offers: {})",
                describe_capabilities(info.so_timestamping)
            ));
        }
        guards.push(
            sys::HwStampGuard::enable(&iface)
                .map_err(|e| format!("{iface}: SIOCSHWTSTAMP failed: {e}"))?,
        );
    }
    Ok(guards)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One control message as the kernel lays it out: header, data, padding to `size_t`.
    fn cmsg(level: libc::c_int, kind: libc::c_int, data: &[u8]) -> Vec<u8> {
        let len = CMSG_HEADER + data.len();
        let mut out = Vec::new();
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&level.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.resize(CMSG_HEADER, 0);
        out.extend_from_slice(data);
        out.resize(cmsg_align(len), 0);
        out
    }

    /// `struct scm_timestamping` with the platform's `struct timespec`.
    fn scm_timestamping(ts: [(i64, i64); 3]) -> Vec<u8> {
        let mut out = Vec::new();
        for (sec, nsec) in ts {
            let t = libc::timespec {
                tv_sec: sec as libc::time_t,
                tv_nsec: nsec as libc::c_long,
            };
            // SAFETY: `t` is a plain C struct with no padding on Linux targets; its bytes are
            // read for exactly its size while it lives.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    (&t as *const libc::timespec).cast::<u8>(),
                    size_of::<libc::timespec>(),
                )
            };
            out.extend_from_slice(bytes);
        }
        out
    }

    /// `struct sock_extended_err` followed by an offender address, as `ip_recv_error` sends.
    fn recverr(errno: i32, origin: u8, info: u32, data: u32) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(errno as u32).to_ne_bytes());
        out.extend_from_slice(&[origin, 0, 0, 0]);
        out.extend_from_slice(&info.to_ne_bytes());
        out.extend_from_slice(&data.to_ne_bytes());
        out.extend_from_slice(&[0u8; 16]); // struct sockaddr_in offender
        out
    }

    const T0: (i64, i64) = (1_700_000_000, 123_456_789);
    const T0_NS: u64 = 1_700_000_000_123_456_789;

    #[test]
    fn receive_stamp_software_only() {
        let buf = cmsg(
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            &scm_timestamping([T0, (0, 0), (0, 0)]),
        );
        let c = parse_control(&buf);
        assert_eq!(c.stamps.software_ns, Some(T0_NS));
        assert_eq!(c.stamps.hardware_ns, None);
        assert_eq!(c.tx_key, None);
    }

    #[test]
    fn receive_stamp_with_hardware() {
        let buf = cmsg(
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            &scm_timestamping([T0, (0, 0), (42, 7)]),
        );
        let c = parse_control(&buf);
        assert_eq!(c.stamps.software_ns, Some(T0_NS));
        assert_eq!(c.stamps.hardware_ns, Some(42_000_000_007));
    }

    #[test]
    fn new_layout_is_always_64_bit() {
        let mut data = Vec::new();
        for (sec, nsec) in [T0, (0, 0), (0, 0)] {
            data.extend_from_slice(&sec.to_ne_bytes());
            data.extend_from_slice(&nsec.to_ne_bytes());
        }
        let c = parse_control(&cmsg(libc::SOL_SOCKET, SCM_TIMESTAMPING_NEW, &data));
        assert_eq!(c.stamps.software_ns, Some(T0_NS));
    }

    #[test]
    fn error_queue_transmit_stamp_ipv4_and_ipv6() {
        for (level, kind) in [
            (libc::SOL_IP, libc::IP_RECVERR),
            (libc::SOL_IPV6, libc::IPV6_RECVERR),
        ] {
            let mut buf = cmsg(
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPING,
                &scm_timestamping([T0, (0, 0), (0, 0)]),
            );
            buf.extend(cmsg(
                level,
                kind,
                &recverr(
                    libc::ENOMSG,
                    libc::SO_EE_ORIGIN_TIMESTAMPING,
                    SCM_TSTAMP_SND,
                    4_095,
                ),
            ));
            let c = parse_control(&buf);
            assert_eq!(c.stamps.software_ns, Some(T0_NS), "level {level}");
            assert_eq!(c.tx_key, Some(4_095), "level {level}");
        }
    }

    #[test]
    fn other_error_records_are_not_transmit_stamps() {
        for (errno, origin, info) in [
            // An ICMP error (e.g. port unreachable).
            (libc::ECONNREFUSED, libc::SO_EE_ORIGIN_ICMP, 3),
            // A stamp taken when the packet entered the qdisc, and one for the ACK.
            (libc::ENOMSG, libc::SO_EE_ORIGIN_TIMESTAMPING, 1),
            (libc::ENOMSG, libc::SO_EE_ORIGIN_TIMESTAMPING, 2),
        ] {
            let buf = cmsg(
                libc::SOL_IP,
                libc::IP_RECVERR,
                &recverr(errno, origin, info, 9),
            );
            assert_eq!(parse_control(&buf).tx_key, None, "{errno} {origin} {info}");
        }
    }

    #[test]
    fn unknown_messages_are_skipped() {
        // IP_TOS (one byte, padded) before the stamp.
        let mut buf = cmsg(libc::SOL_IP, libc::IP_TOS, &[0x10]);
        buf.extend(cmsg(
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            &scm_timestamping([T0, (0, 0), (0, 0)]),
        ));
        assert_eq!(parse_control(&buf).stamps.software_ns, Some(T0_NS));
    }

    #[test]
    fn every_truncation_is_safe_and_yields_no_partial_stamp() {
        let mut buf = cmsg(
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            &scm_timestamping([T0, (0, 0), (0, 0)]),
        );
        let stamp_end = buf.len();
        buf.extend(cmsg(
            libc::SOL_IP,
            libc::IP_RECVERR,
            &recverr(libc::ENOMSG, libc::SO_EE_ORIGIN_TIMESTAMPING, 0, 77),
        ));
        for n in 0..buf.len() {
            let c = parse_control(&buf[..n]);
            // A message is used only once it is whole.
            assert_eq!(c.stamps.software_ns.is_some(), n >= stamp_end, "n {n}");
            assert_eq!(c.tx_key, None, "n {n}");
        }
        assert_eq!(parse_control(&buf).tx_key, Some(77));
    }

    #[test]
    fn inconsistent_lengths_stop_the_walk() {
        let mut buf = cmsg(
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            &scm_timestamping([T0, (0, 0), (0, 0)]),
        );
        // cmsg_len larger than the buffer, then smaller than a header.
        for bad in [buf.len() + 1, CMSG_HEADER - 1, 0, usize::MAX] {
            buf[..size_of::<usize>()].copy_from_slice(&bad.to_ne_bytes());
            assert_eq!(parse_control(&buf), Control::default(), "len {bad}");
        }
        // A stamp message too short for three timespecs yields no stamp.
        let short = cmsg(libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &[1u8; 8]);
        assert_eq!(parse_control(&short).stamps, Stamps::default());
    }

    #[test]
    fn zero_negative_and_invalid_timespecs_are_absent() {
        for ts in [(0, 0), (-1, 5), (5, -1), (5, 1_000_000_000)] {
            let buf = cmsg(
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPING,
                &scm_timestamping([ts, (0, 0), ts]),
            );
            assert_eq!(parse_control(&buf).stamps, Stamps::default(), "{ts:?}");
        }
        // Zero seconds with nanoseconds is a valid (if odd) time.
        let buf = cmsg(
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            &scm_timestamping([(0, 5), (0, 0), (0, 0)]),
        );
        assert_eq!(parse_control(&buf).stamps.software_ns, Some(5));
    }

    #[test]
    fn keys_unwrap_to_the_newest_matching_offset() {
        assert_eq!(unwrap_key(0, 0), None);
        assert_eq!(unwrap_key(99, 100), Some(99));
        assert_eq!(unwrap_key(40, 100), Some(40));
        // Past 4 GiB the key wraps.
        let four_g = 1u64 << 32;
        assert_eq!(unwrap_key(10, four_g + 20), Some(four_g + 10));
        assert_eq!(unwrap_key(u32::MAX, four_g + 20), Some(four_g - 1));
        // A key "ahead" of the writes aliases one 4 GiB back (never happens; no panic).
        assert_eq!(unwrap_key(200, 100), None);
        assert_eq!(unwrap_key(200, four_g + 100), Some(200));
    }

    #[test]
    fn stamp_clock_maps_realtime_onto_the_run_clock() {
        let mut c = StampClock::new();
        assert_eq!(c.to_run_ns(T0_NS), None);
        // Run clock 1,000..1,100 while realtime read T0: T0 is run time 1,050.
        c.update(1_000, T0_NS, 1_100);
        assert_eq!(c.to_run_ns(T0_NS), Some(1_050));
        assert_eq!(c.to_run_ns(T0_NS + 500), Some(1_550));
        // Before the run's epoch: none.
        assert_eq!(c.to_run_ns(T0_NS - 2_000), None);
        // A slow reading does not replace a good one ...
        c.update(10_000, T0_NS + 9_000, 10_000 + MAX_READING_NS + 1);
        assert_eq!(c.to_run_ns(T0_NS), Some(1_050));
        // ... a good one does (the wall clock was set back 1 ms).
        c.update(10_000, T0_NS + 9_000 - 1_000_000, 10_010);
        assert_eq!(c.to_run_ns(T0_NS + 9_000 - 1_000_000), Some(10_005));
    }

    #[test]
    fn hardware_needs_raw_stamps_both_ways_and_the_all_filter() {
        let full = sys::TsInfo {
            so_timestamping: libc::SOF_TIMESTAMPING_TX_HARDWARE
                | libc::SOF_TIMESTAMPING_RX_HARDWARE
                | libc::SOF_TIMESTAMPING_RAW_HARDWARE
                | libc::SOF_TIMESTAMPING_TX_SOFTWARE,
            phc_index: 0,
            tx_types: 1 << libc::HWTSTAMP_TX_ON | 1 << libc::HWTSTAMP_TX_OFF,
            rx_filters: 1 << libc::HWTSTAMP_FILTER_ALL | 1 << libc::HWTSTAMP_FILTER_NONE,
        };
        assert!(offers_hardware(&full));
        // Loopback: software only.
        let lo = sys::TsInfo {
            so_timestamping: libc::SOF_TIMESTAMPING_TX_SOFTWARE
                | libc::SOF_TIMESTAMPING_RX_SOFTWARE
                | libc::SOF_TIMESTAMPING_SOFTWARE,
            phc_index: -1,
            tx_types: 0,
            rx_filters: 0,
        };
        assert!(!offers_hardware(&lo));
        assert_eq!(
            describe_capabilities(lo.so_timestamping),
            "software-transmit, software-receive, software-system-clock"
        );
        assert_eq!(describe_capabilities(0), "none");
        // PTP-only receive filters are not enough: replies are not PTP packets.
        let ptp_only = sys::TsInfo {
            rx_filters: 1 << libc::HWTSTAMP_FILTER_PTP_V2_EVENT,
            ..full
        };
        assert!(!offers_hardware(&ptp_only));
        let no_tx = sys::TsInfo {
            tx_types: 1 << libc::HWTSTAMP_TX_OFF,
            ..full
        };
        assert!(!offers_hardware(&no_tx));
    }

    #[test]
    fn socket_flags_by_mode() {
        let sw = Timestamps::Software.socket_flags().unwrap();
        assert_ne!(sw & libc::SOF_TIMESTAMPING_TX_SOFTWARE, 0);
        assert_ne!(sw & libc::SOF_TIMESTAMPING_OPT_ID, 0);
        assert_eq!(sw & libc::SOF_TIMESTAMPING_RAW_HARDWARE, 0);
        let hw = Timestamps::Hardware.socket_flags().unwrap();
        assert_ne!(hw & libc::SOF_TIMESTAMPING_RAW_HARDWARE, 0);
        assert_ne!(hw & libc::SOF_TIMESTAMPING_RX_SOFTWARE, 0);
        assert_eq!(Timestamps::None.socket_flags(), None);
    }

    #[test]
    fn hardware_on_loopback_falls_back_to_software_and_says_why() {
        let servers = ["127.0.0.1:11211".parse().unwrap()];
        let plan = StampPlan::new(Timestamps::Hardware, &servers);
        assert_eq!(plan.source, Timestamps::Software);
        assert_eq!(
            plan.note.as_deref(),
            Some(
                "hardware timestamps unavailable: lo has no hardware stamping (it offers: \
                 software-transmit, software-receive, software-system-clock); using software \
                 timestamps"
            )
        );
        assert!(plan.enabled_interfaces().is_empty());
        for mode in [Timestamps::Software, Timestamps::None] {
            let plan = StampPlan::new(mode, &servers);
            assert_eq!((plan.source, plan.note), (mode, None));
        }
    }
}
