//! The TAP path (`--net tap`): frames from a TAP queue through this core's smoltcp interface
//! and connection table into the engine, parsed in place from each socket's receive buffer.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use netstack::link::{self, LinkConfig};
use netstack::smoltcp::time::{Duration as NetDuration, Instant};
use netstack::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use netstack::{Admission, ConnTable, TableConfig, TapDevice};

use super::{Plan, Queue, serve_smoltcp, spawn};
use crate::cli::Cidr;
use crate::conn::ClientConn;
use crate::stats::RawPath;

/// Where and how the TAP worker serves.
#[derive(Debug, Clone)]
pub struct TapConfig {
    /// The TAP device to create or attach to.
    pub iface: String,
    /// The server's own address on the link.
    pub ip: Cidr,
    /// The kernel side's address, if memspin sets it.
    pub host_ip: Option<Cidr>,
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
}

/// The TAP queue length for `conn_limit` clients: a few frames each (a request and an ACK in
/// flight per connection), at least the kernel's default of 1000.
pub fn tx_queue_len(conn_limit: usize) -> u32 {
    u32::try_from(conn_limit.saturating_mul(4))
        .unwrap_or(u32::MAX)
        .clamp(1000, 1 << 16)
}

/// A locally administered unicast MAC derived from the server's address, so a restart keeps
/// the same MAC and the kernel's neighbour entry stays valid.
pub fn mac_for(ip: Cidr) -> [u8; 6] {
    let [a, b, c, d] = ip.addr.octets();
    [0x02, 0x6d, a, b, c, d]
}

/// A worker's table settings: room for the whole shared `conn_limit` (the kernel may send
/// every connection to one worker), the idle timeout and loss recovery's floor.
pub fn table_config(
    mut table: TableConfig,
    conn_limit: usize,
    idle_timeout: Option<Duration>,
    rto_min: Option<Duration>,
) -> TableConfig {
    let net = |d: Duration| NetDuration::from_micros(d.as_micros().min(u64::MAX.into()) as u64);
    table.conn_limit = conn_limit;
    table.idle_timeout = idle_timeout.map(net);
    table.rto_min = rto_min.map(net);
    table
}

/// The server's address as smoltcp's type.
pub fn cidr(c: Cidr) -> Ipv4Cidr {
    let [a, b, c4, d] = c.addr.octets();
    Ipv4Cidr::new(Ipv4Address::new(a, b, c4, d), c.prefix_len)
}

/// Serves over the TAP device until the plan's stop flag is set, one queue per worker (a
/// multi-queue device when there are several); calls `on_ready` once every worker serves.
///
/// # Errors
/// When the device cannot be opened or configured, or a worker fails.
pub fn run(config: &TapConfig, plan: &Plan<'_>, on_ready: impl FnOnce()) -> Result<(), String> {
    let workers = plan.workers();
    let devices = (0..workers)
        .map(|queue| {
            TapDevice::open(&config.iface, workers > 1).map_err(|e| format!("queue {queue}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    link::configure(
        &config.iface,
        &LinkConfig {
            host_ip: config.host_ip.map(cidr),
            mtu: None,
            tx_queue_len: Some(tx_queue_len(config.conn_limit)),
        },
    )
    .map_err(|e| e.to_string())?;
    let admission = Arc::new(Admission::new(config.conn_limit));
    let table_config = TableConfig {
        extra_port: config.resp_port,
        ..table_config(
            TableConfig::new(mac_for(config.ip), cidr(config.ip), config.port),
            config.conn_limit,
            config.idle_timeout,
            config.rto_min,
        )
    };
    spawn(
        plan,
        devices,
        |mut device, engine, mesh, ready| {
            let mut table = ConnTable::<ClientConn>::with_admission(
                table_config,
                Arc::clone(&admission),
                &mut device,
                Instant::now(),
            )
            .map_err(|e| e.to_string())?;
            ready();
            let idle = serve_smoltcp(
                &mut device,
                &mut table,
                engine,
                mesh,
                plan.stop,
                plan.idle,
                config.resp_port,
            )?;
            let mut lines = vec![
                format!("tap {} queue counters: {}", config.iface, device.report()),
                format!("connection table: {:?}", table.stats()),
            ];
            lines.extend(idle);
            Ok(lines)
        },
        on_ready,
    )
}

impl Queue for TapDevice {
    fn drained(&self) -> bool {
        TapDevice::drained(self)
    }

    fn wait(&mut self, timeout: Duration, wake: Option<BorrowedFd<'_>>) -> Result<(), String> {
        TapDevice::wait(self, Some(timeout), wake)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn report(&mut self) -> String {
        format!("{:?}", self.stats())
    }

    fn raw_path(&self, table: &netstack::TableStats) -> RawPath {
        RawPath::Tap(*self.stats(), *table)
    }
}
