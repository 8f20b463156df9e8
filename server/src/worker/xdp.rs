//! The AF_XDP path (`--net xdp --iface NAME`): the steering program on an existing
//! interface (TCP to `--ip`:`-p` and ARP for `--ip` to memspin, the rest to the kernel), one
//! AF_XDP socket per worker (worker i on queue i), and the same smoltcp loop as the TAP path.
//!
//! ```text
//! interface queue i ─XDP redirect (XSKMAP[i])─▶ XdpDevice i ─▶ ConnTable i (core i's smoltcp) ─▶ engine i
//!                   └─XDP_PASS (everything else)─▶ the kernel's stack
//! ```
//!
//! The program is detached when this function returns, also on errors after the attach
//! (drop order: the socket, then the program). A SIGKILLed run leaves its program attached;
//! the next start replaces it (see `netstack::xdp::XdpProgram::attach`).

use std::os::fd::BorrowedFd;
use std::time::Duration;

use netstack::smoltcp::time::Instant;
use netstack::xdp::{AttachMode, Attached, ModeChoice, Steer, XdpConfig, XdpDevice, XdpProgram};
use netstack::{ConnTable, TableConfig};

use super::tap::cidr;
use super::{Plan, Queue, serve_smoltcp, spawn};
use crate::cli::Cidr;
use crate::conn::ClientConn;

/// Where and how the XDP worker serves.
#[derive(Debug, Clone)]
pub struct XdpWorkerConfig {
    /// The interface to attach to (it must exist and be up).
    pub iface: String,
    /// Attach modes allowed.
    pub mode: ModeChoice,
    /// The server's own address on the link.
    pub ip: Cidr,
    /// TCP port.
    pub port: u16,
    /// Most concurrent connections, over all workers (each takes an even share).
    pub conn_limit: usize,
}

/// What the ready line reports about the attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpReady {
    /// Where the program runs.
    pub mode: AttachMode,
    /// True in zero-copy mode, false in copy mode.
    pub zero_copy: bool,
    /// The program's id.
    pub prog_id: u32,
    /// A stale memspin program this start replaced.
    pub replaced: Option<Attached>,
    /// The MAC address served (the interface's).
    pub mac: [u8; 6],
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
    let steer = Steer {
        ipv4: config.ip.addr,
        tcp_port: config.port,
    };
    let program =
        XdpProgram::attach(&config.iface, config.mode, steer).map_err(|e| e.to_string())?;
    let workers = plan.workers();
    let conn_limit = config.conn_limit.div_ceil(workers);
    let devices = (0..workers as u32)
        .map(|queue| {
            XdpDevice::bind(
                &program,
                queue,
                &XdpConfig::for_link(conn_limit, program.mtu()),
            )
            .map_err(|e| format!("queue {queue}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>();
    let devices = match devices {
        Ok(devices) => devices,
        Err(e) => {
            let _ = program.detach();
            return Err(e);
        }
    };
    let ready = XdpReady {
        mode: program.mode(),
        zero_copy: devices.iter().all(XdpDevice::zero_copy),
        prog_id: program.prog_id(),
        replaced: program.replaced(),
        mac: program.mac(),
    };
    let served = spawn(
        plan,
        devices,
        |mut device, engine, mesh, ready| {
            let mut table_config = TableConfig::new(program.mac(), cidr(config.ip), config.port);
            table_config.conn_limit = conn_limit;
            let mut table = ConnTable::<ClientConn>::new(table_config, &mut device, Instant::now())
                .map_err(|e| e.to_string())?;
            ready();
            let served = serve_smoltcp(&mut device, &mut table, engine, mesh, plan.stop, plan.idle);
            let lines = vec![
                format!(
                    "xdp {} queue {} device counters: {}",
                    config.iface,
                    device.queue(),
                    device.report()
                ),
                format!("connection table: {:?}", table.stats()),
            ];
            served.map(|()| lines)
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

    fn wait(&mut self, timeout: Duration, wake: Option<BorrowedFd<'_>>) -> Result<(), String> {
        XdpDevice::wait(self, Some(timeout), wake)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn report(&mut self) -> String {
        match self.read_kernel_stats() {
            Ok(_) => format!("{:?}", self.stats()),
            Err(e) => format!("{:?} (kernel counters unavailable: {e})", self.stats()),
        }
    }
}
