//! The TAP path (`--net tap`): frames from a TAP queue through this core's smoltcp interface
//! and connection table into the engine, parsed in place from each socket's receive buffer.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use netstack::link::{self, LinkConfig};
use netstack::smoltcp::time::Duration as NetDuration;
use netstack::smoltcp::wire::{IpAddress, IpCidr, Ipv4Cidr, Ipv6Cidr};
use netstack::{Admission, TableConfig, TapDevice};

use super::Plan;
use super::smoltcp::{self, Queue};
use crate::cli::{Cidr, LinkAddrs};
use crate::stats::RawPath;

/// Where and how the TAP worker serves.
#[derive(Debug, Clone)]
pub struct TapConfig {
    /// The TAP device to create or attach to.
    pub iface: String,
    /// The server's own addresses on the link, the kernel side's (if memspin sets them)
    /// and the gateways.
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
}

/// The TAP queue length for `conn_limit` clients: a few frames each (a request and an ACK in
/// flight per connection), at least the kernel's default of 1000.
pub fn tx_queue_len(conn_limit: usize) -> u32 {
    u32::try_from(conn_limit.saturating_mul(4))
        .unwrap_or(u32::MAX)
        .clamp(1000, 1 << 16)
}

/// A locally administered unicast MAC derived from the server's address (its IPv4 address,
/// else the low 32 bits of its IPv6 address), so a restart keeps the same MAC and the
/// kernel's neighbour entry stays valid.
pub fn mac_for(addrs: &LinkAddrs) -> [u8; 6] {
    let [a, b, c, d] = match addrs.served().next().map(|cidr| cidr.addr) {
        Some(std::net::IpAddr::V4(ip)) => ip.octets(),
        Some(std::net::IpAddr::V6(ip)) => {
            let o = ip.octets();
            [o[12], o[13], o[14], o[15]]
        }
        None => [0, 0, 0, 1],
    };
    [0x02, 0x6d, a, b, c, d]
}

/// A worker's table settings: the MAC, the addresses and gateways served on `port`, room for
/// the whole shared `conn_limit` (the kernel may send every connection to one worker), the
/// idle timeout and loss recovery's floor.
///
/// # Errors
/// When the table would refuse the addresses (a gateway not on the link, ...).
pub fn table_config(
    mac: [u8; 6],
    addrs: &LinkAddrs,
    port: u16,
    conn_limit: usize,
    idle_timeout: Option<Duration>,
    rto_min: Option<Duration>,
) -> Result<TableConfig, String> {
    let mut served = addrs.served();
    let first = served.next().ok_or("no address to serve (--ip)")?;
    let mut table = TableConfig::new(mac, cidr(first), port);
    for more in served {
        table = table.with_ip(cidr(more));
    }
    for gateway in addrs.gateways() {
        table = table.with_gateway(IpAddress::from(gateway));
    }
    let net = |d: Duration| NetDuration::from_micros(d.as_micros().min(u64::MAX.into()) as u64);
    table.conn_limit = conn_limit;
    table.idle_timeout = idle_timeout.map(net);
    table.rto_min = rto_min.map(net);
    table.check().map_err(|e| e.to_string())?;
    Ok(table)
}

/// An address and prefix as smoltcp's type.
pub fn cidr(c: Cidr) -> IpCidr {
    match c.addr {
        std::net::IpAddr::V4(ip) => IpCidr::Ipv4(Ipv4Cidr::new(ip, c.prefix_len)),
        std::net::IpAddr::V6(ip) => IpCidr::Ipv6(Ipv6Cidr::new(ip, c.prefix_len)),
    }
}

/// An IPv4 address and prefix as smoltcp's type (`None` for IPv6).
fn cidr4(c: Cidr) -> Option<Ipv4Cidr> {
    match cidr(c) {
        IpCidr::Ipv4(cidr) => Some(cidr),
        IpCidr::Ipv6(_) => None,
    }
}

/// An IPv6 address and prefix as smoltcp's type (`None` for IPv4).
fn cidr6(c: Cidr) -> Option<Ipv6Cidr> {
    match cidr(c) {
        IpCidr::Ipv6(cidr) => Some(cidr),
        IpCidr::Ipv4(_) => None,
    }
}

/// Serves over the TAP device until the plan's stop flag is set, one queue per worker (a
/// multi-queue device when there are several); calls `on_ready` once every worker serves.
///
/// # Errors
/// When the device cannot be opened or configured, or a worker fails.
pub fn run(config: &TapConfig, plan: &Plan<'_>, on_ready: impl FnOnce()) -> Result<(), String> {
    let workers = plan.workers();
    let addrs = &config.addrs;
    let table_config = TableConfig {
        extra_port: config.resp_port,
        ..table_config(
            mac_for(addrs),
            addrs,
            config.port,
            config.conn_limit,
            config.idle_timeout,
            config.rto_min,
        )?
    };
    let devices = (0..workers)
        .map(|queue| {
            TapDevice::open(&config.iface, workers > 1).map_err(|e| format!("queue {queue}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    link::configure(
        &config.iface,
        &LinkConfig {
            host_ip: addrs.host_ipv4.and_then(cidr4),
            host_ipv6: addrs.host_ipv6.and_then(cidr6),
            mtu: None,
            tx_queue_len: Some(tx_queue_len(config.conn_limit)),
        },
    )
    .map_err(|e| e.to_string())?;
    let admission = Arc::new(Admission::new(config.conn_limit));
    plan.engine.control.set_path_settings(addrs.settings());
    smoltcp::run(
        plan,
        devices,
        table_config,
        &admission,
        |device| format!("tap {} queue counters: {}", config.iface, device.report()),
        on_ready,
    )
}

impl Queue for TapDevice {
    fn drained(&self) -> bool {
        TapDevice::drained(self)
    }

    fn wait(&mut self, wake: &[BorrowedFd<'_>]) -> Result<(), String> {
        TapDevice::wait(self, None, wake)
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
