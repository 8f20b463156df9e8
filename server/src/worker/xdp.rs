//! The AF_XDP path (`--net xdp --iface NAME`): the redirect program on an existing
//! interface, one AF_XDP socket on its queue 0, and the same smoltcp loop as the TAP path.
//!
//! ```text
//! interface queue 0 ─XDP redirect─▶ XdpDevice ─▶ ConnTable (this core's smoltcp) ─▶ engine
//! ```
//!
//! The program is detached when this function returns, also on errors after the attach
//! (drop order: the socket, then the program). A SIGKILLed run leaves its program attached;
//! the next start replaces it (see `netstack::xdp::XdpProgram::attach`).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use netstack::smoltcp::time::Instant;
use netstack::xdp::{AttachMode, Attached, ModeChoice, XdpConfig, XdpDevice, XdpProgram};
use netstack::{ConnTable, TableConfig};

use super::tap::cidr;
use super::{Queue, report_final, serve_smoltcp};
use crate::cli::{Cidr, Idle};
use crate::conn::ClientConn;
use crate::engine::Engine;

/// Where and how the XDP worker serves.
#[derive(Debug, Clone)]
pub struct XdpWorkerConfig {
    /// The interface to attach to (it must exist and be up).
    pub iface: String,
    /// The queue to bind (one worker per queue).
    pub queue: u32,
    /// Attach modes allowed.
    pub mode: ModeChoice,
    /// The server's own address on the link.
    pub ip: Cidr,
    /// TCP port.
    pub port: u16,
    /// Most concurrent connections.
    pub conn_limit: usize,
    /// Idle policy.
    pub idle: Idle,
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

/// Serves over AF_XDP until `stop` is set; calls `on_ready` once the socket is bound.
///
/// # Errors
/// When the program cannot be attached, the socket bound, or the table built.
pub fn run(
    config: &XdpWorkerConfig,
    mut engine: Engine,
    stop: &AtomicBool,
    on_ready: impl FnOnce(&XdpReady),
) -> Result<(), String> {
    let program = XdpProgram::attach(&config.iface, config.mode).map_err(|e| e.to_string())?;
    let mut device = XdpDevice::bind(&program, config.queue, &XdpConfig::default())
        .map_err(|e| e.to_string())?;
    let mut table_config = TableConfig::new(program.mac(), cidr(config.ip), config.port);
    table_config.conn_limit = config.conn_limit;
    let mut table = ConnTable::<ClientConn>::new(table_config, &mut device, Instant::now())
        .map_err(|e| e.to_string())?;
    on_ready(&XdpReady {
        mode: program.mode(),
        zero_copy: device.zero_copy(),
        prog_id: program.prog_id(),
        replaced: program.replaced(),
        mac: program.mac(),
    });

    let served = serve_smoltcp(&mut device, &mut table, &mut engine, stop, config.idle);
    eprintln!(
        "memspin: xdp {} queue {} device counters: {}",
        config.iface,
        config.queue,
        device.report()
    );
    eprintln!("memspin: connection table: {:?}", table.stats());
    drop(device);
    let detached = program.detach().map_err(|e| e.to_string());
    report_final(&engine);
    served?;
    detached
}

impl Queue for XdpDevice {
    fn flush(&mut self) {
        XdpDevice::flush(self);
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), String> {
        XdpDevice::wait(self, Some(timeout), None)
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
