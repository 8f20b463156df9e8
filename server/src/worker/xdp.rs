//! The AF_XDP path (`--net xdp --iface NAME`): the steering program on an existing
//! interface (TCP to `--ip`:`-p` and `--resp-port`, echo requests to `--ip`, ARP and
//! neighbour discovery for `--ip`, of either family, to memspin; the rest to the kernel),
//! one AF_XDP socket per worker (worker i on queue i), and the same smoltcp loop as the TAP
//! path, the workers sharing one record of the gateways (`--gateway`).
//!
//! ```text
//! interface queue i ─XDP redirect (XSKMAP[i])─▶ XdpDevice i ─▶ ConnTable i (core i's smoltcp) ─▶ engine i
//!                   └─XDP_PASS (everything else)─▶ the kernel's stack
//! ```
//!
//! The program is detached when this function returns, also on errors after the attach
//! (drop order: the socket, then the program). A SIGKILLed run leaves its program attached;
//! the next start replaces it (see `netstack::xdp::XdpProgram::attach`).
//!
//! What the sockets ended up with — copy or zero-copy, busy polling on, off or refused by the
//! kernel (then memspin serves without it), single- or multi-buffer frames — is reported in
//! the ready line ([`XdpReady::modes`]) and under `memspin_xdp_*` in `stats settings`.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use netstack::xdp::{
    AttachMode, Attached, BusyPoll, ModeChoice, Steer, XdpConfig, XdpDevice, XdpProgram,
};
use netstack::{Admission, TableConfig};

use super::Plan;
use super::smoltcp::{self, Queue};
use super::tap::table_config;
use crate::cli::LinkAddrs;
use crate::stats::RawPath;

/// Where and how the XDP worker serves.
#[derive(Debug, Clone)]
pub struct XdpWorkerConfig {
    /// The interface to attach to (it must exist and be up).
    pub iface: String,
    /// Attach modes allowed.
    pub mode: ModeChoice,
    /// The server's own addresses on the link and the gateways (`host_*` are unused).
    pub addrs: LinkAddrs,
    /// TCP port.
    pub port: u16,
    /// The RESP port (`--resp-port`), if Redis clients are served.
    pub resp_port: Option<u16>,
    /// Most concurrent connections, over all workers (one shared limit).
    pub conn_limit: usize,
    /// Close connections idle this long (`--idle-timeout`); `None`: never.
    pub idle_timeout: Option<Duration>,
    /// Loss recovery's floor (`--rto-min`); `None`: recovery off.
    pub rto_min: Option<Duration>,
    /// Preferred busy polling on every socket, if asked for.
    pub busy_poll: Option<BusyPoll>,
}

/// Whether the sockets busy-poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusyPollState {
    /// Not asked for.
    Off,
    /// On every socket.
    On(BusyPoll),
    /// Asked for and refused by the kernel (the error); every socket polls without it.
    Refused(String),
}

/// What the ready line reports about the attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpReady {
    /// Where the program runs.
    pub mode: AttachMode,
    /// True in zero-copy mode, false in copy mode.
    pub zero_copy: bool,
    /// Busy polling on the sockets.
    pub busy_poll: BusyPollState,
    /// True if the sockets take multi-buffer frames (the MTU does not fit a UMEM frame).
    pub multi_buffer: bool,
    /// The interface MTU.
    pub mtu: u32,
    /// Bytes per UMEM frame.
    pub frame_size: u32,
    /// The program's id.
    pub prog_id: u32,
    /// A stale memspin program this start replaced.
    pub replaced: Option<Attached>,
    /// The MAC address served (the interface's).
    pub mac: [u8; 6],
}

impl XdpReady {
    /// The modes in use, as the ready line says them: attach mode, copy or zero-copy,
    /// busy polling, single- or multi-buffer frames.
    pub fn modes(&self) -> String {
        let copy = if self.zero_copy { "zero-copy" } else { "copy" };
        let busy = match &self.busy_poll {
            BusyPollState::Off => "busy-poll off".to_string(),
            BusyPollState::On(b) => format!("busy-poll on (budget {})", b.budget),
            BusyPollState::Refused(e) => format!("busy-poll refused ({e}), polling without it"),
        };
        let buffers = if self.multi_buffer {
            format!(
                "multi-buffer (MTU {} over {}-byte frames)",
                self.mtu, self.frame_size
            )
        } else {
            format!(
                "single-buffer (MTU {} in {}-byte frames)",
                self.mtu, self.frame_size
            )
        };
        format!(
            "{} mode, {copy} mode, {busy}, {buffers}",
            self.mode.as_str()
        )
    }

    /// The `memspin_xdp_*` lines of `stats settings`.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
        let mut lines = vec![
            ("memspin_net", "xdp".to_string()),
            ("memspin_xdp_attach_mode", self.mode.as_str().to_string()),
            ("memspin_xdp_zero_copy", yes_no(self.zero_copy)),
        ];
        match &self.busy_poll {
            BusyPollState::Off => lines.push(("memspin_xdp_busy_poll", "off".to_string())),
            BusyPollState::On(b) => {
                lines.push(("memspin_xdp_busy_poll", "on".to_string()));
                lines.push(("memspin_xdp_busy_poll_budget", b.budget.to_string()));
            }
            BusyPollState::Refused(_) => {
                lines.push(("memspin_xdp_busy_poll", "refused".to_string()));
            }
        }
        lines.push(("memspin_xdp_multi_buffer", yes_no(self.multi_buffer)));
        lines.push(("memspin_xdp_frame_size", self.frame_size.to_string()));
        lines
    }
}

/// Turns busy polling on for every device; if the kernel refuses it on one, turns it off
/// on all and says why.
fn start_busy_poll(devices: &mut [XdpDevice], busy: Option<BusyPoll>) -> BusyPollState {
    let Some(busy) = busy else {
        return BusyPollState::Off;
    };
    for i in 0..devices.len() {
        if let Err(e) = devices[i].set_busy_poll(busy) {
            devices[..i].iter_mut().for_each(XdpDevice::clear_busy_poll);
            return BusyPollState::Refused(e.to_string());
        }
    }
    BusyPollState::On(busy)
}

/// Serves over AF_XDP until the plan's stop flag is set: one socket on queue i for worker i;
/// calls `on_ready` once every worker serves.
///
/// # Errors
/// When the program cannot be attached, a socket bound (e.g. the interface has fewer queues
/// than workers), or a worker fails.
pub fn run(
    config: &XdpWorkerConfig,
    plan: &Plan<'_>,
    on_ready: impl FnOnce(&XdpReady),
) -> Result<(), String> {
    let addrs = &config.addrs;
    let address = |cidr: Option<crate::cli::Cidr>| cidr.map(|c| c.addr);
    let steer = Steer {
        ipv4: match address(addrs.ipv4) {
            Some(std::net::IpAddr::V4(ip)) => Some(ip),
            _ => None,
        },
        ipv6: match address(addrs.ipv6) {
            Some(std::net::IpAddr::V6(ip)) => Some(ip),
            _ => None,
        },
        tcp_port: config.port,
        extra_tcp_port: config.resp_port,
    };
    // Checked before the program is attached; the MAC is the interface's, known after.
    table_config(
        [0x02, 0, 0, 0, 0, 1],
        addrs,
        config.port,
        config.conn_limit,
        config.idle_timeout,
        config.rto_min,
    )?;
    let program =
        XdpProgram::attach(&config.iface, config.mode, steer).map_err(|e| e.to_string())?;
    let workers = plan.workers();
    // The UMEM is sized for an even share of the connections: the shared limit lets one
    // worker hold more, at the risk of fill-ring drops only when all of them burst at once.
    let share = config.conn_limit.div_ceil(workers);
    let devices = (0..workers as u32)
        .map(|queue| {
            XdpDevice::bind(&program, queue, &XdpConfig::for_link(share, program.mtu()))
                .map_err(|e| format!("queue {queue}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>();
    let mut devices = match devices {
        Ok(devices) => devices,
        Err(e) => {
            let _ = program.detach();
            return Err(e);
        }
    };
    let busy_poll = start_busy_poll(&mut devices, config.busy_poll);
    if let BusyPollState::Refused(e) = &busy_poll {
        eprintln!("memspin: --xdp-busy-poll on refused by the kernel ({e}); serving without it");
    }
    let ready = XdpReady {
        mode: program.mode(),
        zero_copy: devices.iter().all(XdpDevice::zero_copy),
        busy_poll,
        multi_buffer: devices.iter().any(XdpDevice::multi_buffer),
        mtu: program.mtu(),
        frame_size: devices.first().map_or(0, XdpDevice::frame_size),
        prog_id: program.prog_id(),
        replaced: program.replaced(),
        mac: program.mac(),
    };
    let admission = Arc::new(Admission::new(config.conn_limit));
    let table_config = match table_config(
        program.mac(),
        addrs,
        config.port,
        config.conn_limit,
        config.idle_timeout,
        config.rto_min,
    ) {
        Ok(table_config) => TableConfig {
            extra_port: config.resp_port,
            ..table_config
        },
        Err(e) => {
            drop(devices);
            let _ = program.detach();
            return Err(e);
        }
    };
    let mut settings = ready.settings();
    settings.extend(addrs.settings());
    plan.engine.control.set_path_settings(settings);
    let served = smoltcp::run(
        plan,
        devices,
        table_config,
        &admission,
        |device| {
            format!(
                "xdp {} queue {} device counters: {}",
                config.iface,
                device.queue(),
                device.report()
            )
        },
        || on_ready(&ready),
    );
    // Every socket was dropped with its worker: detach now.
    let detached = program.detach().map_err(|e| e.to_string());
    served?;
    detached
}

impl Queue for XdpDevice {
    fn flush(&mut self) {
        XdpDevice::flush(self);
    }

    fn drained(&self) -> bool {
        XdpDevice::drained(self)
    }

    fn raw_path(&self, table: &netstack::TableStats) -> RawPath {
        RawPath::Xdp(*self.stats(), *table)
    }

    fn refresh_counters(&mut self) {
        // On failure the last reading stays; the exit report says why.
        let _ = self.read_kernel_stats();
    }

    fn wait(&mut self, wake: &[BorrowedFd<'_>]) -> Result<(), String> {
        XdpDevice::wait(self, None, wake)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn report(&mut self) -> String {
        let busy = match self.busy_poll() {
            None => "busy-poll off".to_string(),
            Some(b) => format!(
                "busy-poll on (budget {}, NAPI id {})",
                b.budget,
                self.napi_id()
                    .map_or("none: nothing to poll".to_string(), |id| id.to_string())
            ),
        };
        match self.read_kernel_stats() {
            Ok(_) => format!("{:?}, {busy}", self.stats()),
            Err(e) => format!(
                "{:?}, {busy} (kernel counters unavailable: {e})",
                self.stats()
            ),
        }
    }
}
