//! The `memspin` command line: the names are a contract that scripts rely on (README.md's
//! "memspin" table); flags are added, never renamed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use clap::{ArgAction, Parser, ValueEnum};

/// memspin: a memcached-compatible cache server on a kernel-bypass packet path.
#[derive(Debug, Clone, Parser)]
#[command(name = "memspin", version = crate::engine::VERSION, about, long_about = None)]
pub struct Args {
    /// Packet path: `tap` serves through smoltcp on a TAP device (root); `xdp` serves through
    /// smoltcp on an AF_XDP socket of an existing interface (root); `kernel` serves on
    /// ordinary kernel TCP sockets (`-l`, `-p`; no root needed).
    #[arg(long, value_enum, default_value_t = Net::Tap)]
    pub net: Net,

    /// TAP device to create or attach to; with `--net xdp`, the existing interface to attach to.
    #[arg(long, default_value = "memspin0")]
    pub iface: String,

    /// With `--net xdp`: where the XDP program runs. `auto` tries the driver (native) first,
    /// then generic (skb) mode.
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    pub xdp_mode: XdpMode,

    /// With `--net xdp`: preferred busy polling on each AF_XDP socket (`SO_PREFER_BUSY_POLL`,
    /// `SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`), so the worker runs its queue's NAPI from its own
    /// loop. Only useful with `napi_defer_hard_irqs` and `gro_flush_timeout` set on the NIC
    /// (see docs/af_xdp.md, "Busy polling"); if the kernel refuses the options, memspin serves without them and
    /// says so.
    #[arg(long, value_enum, default_value_t = XdpBusyPoll::Off)]
    pub xdp_busy_poll: XdpBusyPoll,

    /// With `--xdp-busy-poll on`: packets the NAPI may process per busy poll
    /// (`SO_BUSY_POLL_BUDGET`).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub xdp_busy_poll_budget: u16,

    /// The server's own address on the link, ADDR/PREFIX, IPv4 or IPv6; give it once per
    /// family to serve both (`--ip 10.77.0.2/24 --ip fd77::2/64`).
    #[arg(long = "ip", default_value = "10.77.0.2/24", action = ArgAction::Append)]
    pub ip: Vec<Cidr>,

    /// The kernel side's address on the TAP link, ADDR/PREFIX (once per family served), or
    /// `none` to leave its addresses alone [default: 10.77.0.1/24 when memspin serves IPv4].
    #[arg(long = "host-ip", action = ArgAction::Append)]
    pub host_ip: Vec<HostIp>,

    /// With `--net tap` or `xdp`: the router clients off `--ip`'s subnet are reached
    /// through, an address on the link (once per family). Without one, only clients on the
    /// link are answered.
    #[arg(long = "gateway", value_name = "ADDR", action = ArgAction::Append)]
    pub gateway: Vec<IpAddr>,

    /// Address to listen on with `--net kernel`.
    #[arg(short = 'l', long, default_value = "127.0.0.1")]
    pub listen: std::net::IpAddr,

    /// TCP port to serve.
    #[arg(short = 'p', long, default_value_t = 11211)]
    pub port: u16,

    /// Also serve Redis clients (RESP2, RESP3 after `HELLO 3`) on this TCP port, from the same
    /// store (6379 is Redis's); off unless given. With `--net kernel`, 0 binds any free port
    /// (the ready line names it).
    #[arg(long, value_name = "PORT")]
    pub resp_port: Option<u16>,

    /// Worker cores. Each has its own queue (a TAP queue, an AF_XDP socket on queue i, or a
    /// SO_REUSEPORT listener), connections and store shard; a key lives on worker
    /// hash(key) mod N, and requests for it arriving elsewhere are forwarded there. `-m` is
    /// split evenly among the workers; `-c` is one limit they share.
    #[arg(short = 't', long = "threads", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,

    /// Redis databases served on `--resp-port` (`SELECT 0` to `SELECT N-1`), each its own
    /// keyspace in the same store and memory budget; the memcached protocols see database 0.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub databases: u16,

    /// A password Redis clients must give (`AUTH`, `HELLO ... AUTH default <password>`) before
    /// other commands on `--resp-port`; off unless given. The memcached port asks for none.
    #[arg(long, value_name = "PASSWORD")]
    pub requirepass: Option<String>,

    /// CPUs to pin workers to, worker i on the i-th listed (comma-separated list or ranges,
    /// e.g. `0` or `2-3`; at least one per worker); default: the CPUs this process may run
    /// on, in order.
    #[arg(long, value_parser = parse_cpu_list)]
    pub cpus: Option<CpuList>,

    /// Memory budget for items in megabytes.
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64)]
    pub memory_limit_mb: usize,

    /// Largest item (key + value + overhead), with an optional k/m suffix.
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    pub max_item_size: usize,

    /// Most concurrent client connections, over all workers (open or closing; handshakes
    /// have their own budget); more are refused with a reset.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    pub conn_limit: usize,

    /// Close connections that have sent nothing, and have nothing left to send or read, for
    /// this many seconds (memcached's `-o idle_timeout`); 0: never.
    #[arg(long = "idle-timeout", value_name = "SECS", default_value_t = 0)]
    pub idle_timeout_secs: u32,

    /// What a worker does with no work: `spin` keeps polling (dedicated cores); `park` waits on
    /// the queue's file descriptor after 200 µs without work; `adaptive` sleeps whenever the
    /// wait for the next frame is expected to cost more CPU than a wake-up, learned from the
    /// recent gaps between arrivals (shared machines, laptops). Default: `adaptive` over TAP,
    /// `spin` on AF_XDP and kernel sockets.
    #[arg(long, value_enum)]
    pub idle: Option<Idle>,

    /// Log more to stderr, one event per line: `-v` start-up choices and operator commands,
    /// `-vv` also every connection and request, `-vvv` also the engine's own decisions. The
    /// `verbosity` command changes it at run time.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Refuse stores with an out-of-memory error when memory is full, instead of evicting
    /// items (memcached's `-M`).
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,

    /// Let the `shutdown` command stop the server (memcached's `-A`).
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,

    /// With `--net tap|xdp`: the floor of loss recovery's probe timer, a duration such as
    /// `1ms`, `500us` or `0.2s` (10us..=1s): an unacknowledged reply, FIN or SYN-ACK is sent
    /// again after 2 x RTT + this, or after the client's usual acknowledgment delay if that
    /// is longer (doubling while nothing is acknowledged), where smoltcp alone waits a
    /// second. `off`: smoltcp's own timer only.
    #[arg(long = "rto-min", value_name = "DURATION|off", default_value = "1ms")]
    pub rto_min: RtoMin,
}

impl Args {
    /// What `--ip`, `--host-ip` and `--gateway` ask for, checked: at most one address of
    /// each family per flag, kernel-side addresses and gateways only for a family memspin
    /// serves, and `none` alone. (Whether a gateway is on the link is the connection
    /// table's check.)
    ///
    /// # Errors
    /// A message naming the flag.
    pub fn link_addrs(&self) -> Result<LinkAddrs, String> {
        let mut addrs = LinkAddrs::default();
        for &cidr in &self.ip {
            let slot = match cidr.addr {
                IpAddr::V4(_) => &mut addrs.ipv4,
                IpAddr::V6(_) => &mut addrs.ipv6,
            };
            if let Some(first) = slot.replace(cidr) {
                return Err(format!(
                    "--ip {first} and --ip {cidr}: one address per family"
                ));
            }
        }
        let serves = |addr: IpAddr| match addr {
            IpAddr::V4(_) => addrs.ipv4.is_some(),
            IpAddr::V6(_) => addrs.ipv6.is_some(),
        };
        let none = self.host_ip.contains(&HostIp::None);
        if none && self.host_ip.len() > 1 {
            return Err(
                "--host-ip none leaves the kernel side alone: give no address with it".to_string(),
            );
        }
        if self.host_ip.is_empty() && addrs.ipv4.is_some() {
            addrs.host_ipv4 = Some(DEFAULT_HOST_IP);
        }
        for host in &self.host_ip {
            let HostIp::Addr(cidr) = *host else { continue };
            if !serves(cidr.addr) {
                return Err(format!(
                    "--host-ip {cidr}: memspin serves no address of its family (--ip)"
                ));
            }
            let slot = match cidr.addr {
                IpAddr::V4(_) => &mut addrs.host_ipv4,
                IpAddr::V6(_) => &mut addrs.host_ipv6,
            };
            if let Some(first) = slot.replace(cidr) {
                return Err(format!(
                    "--host-ip {first} and --host-ip {cidr}: one address per family"
                ));
            }
        }
        for &gateway in &self.gateway {
            if !serves(gateway) {
                return Err(format!(
                    "--gateway {gateway}: memspin serves no address of its family (--ip)"
                ));
            }
            let first = match gateway {
                IpAddr::V4(ip) => addrs.gateway4.replace(ip).map(IpAddr::V4),
                IpAddr::V6(ip) => addrs.gateway6.replace(ip).map(IpAddr::V6),
            };
            if let Some(first) = first {
                return Err(format!(
                    "--gateway {first} and --gateway {gateway}: one gateway per family"
                ));
            }
        }
        Ok(addrs)
    }

    /// Flags that the packet path chosen (`--net`) would not use, refused rather than
    /// ignored: `--gateway` with `--net kernel`, where the kernel routes replies by the
    /// host's routing table.
    ///
    /// # Errors
    /// A message naming the flag and what to do instead.
    pub fn check_net_flags(&self) -> Result<(), String> {
        if self.net == Net::Kernel
            && let Some(gateway) = self.gateway.first()
        {
            return Err(format!(
                "--gateway {gateway} is for --net tap and xdp (smoltcp's default route); with \
                 --net kernel replies follow the host's routes: give the router with `ip route` \
                 instead"
            ));
        }
        Ok(())
    }

    /// The idle policy: `--idle`, or the packet path's default (`adaptive` over TAP, where
    /// people develop on laptops and shared machines; `spin` on AF_XDP, which serves from
    /// dedicated cores, and on kernel sockets, the baseline it is compared with).
    pub fn idle_policy(&self) -> Idle {
        self.idle.unwrap_or(match self.net {
            Net::Tap => Idle::Adaptive,
            Net::Xdp | Net::Kernel => Idle::Spin,
        })
    }

    /// `--idle-timeout` as a duration; `None` when 0 (off).
    pub fn idle_timeout(&self) -> Option<std::time::Duration> {
        (self.idle_timeout_secs > 0)
            .then(|| std::time::Duration::from_secs(u64::from(self.idle_timeout_secs)))
    }
}

/// `--rto-min`: loss recovery's floor, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtoMin(pub Option<std::time::Duration>);

impl FromStr for RtoMin {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "off" {
            return Ok(RtoMin(None));
        }
        let bad = || format!("`{s}`: expected a duration such as 1ms, 500us or 0.2s, or off");
        let (number, unit_us) = if let Some(n) = s.strip_suffix("us") {
            (n, 1.0)
        } else if let Some(n) = s.strip_suffix("µs") {
            (n, 1.0)
        } else if let Some(n) = s.strip_suffix("ms") {
            (n, 1e3)
        } else if let Some(n) = s.strip_suffix('s') {
            (n, 1e6)
        } else {
            return Err(bad());
        };
        let value: f64 = number.trim().parse().map_err(|_| bad())?;
        let micros = value * unit_us;
        let (min, max) = (
            netstack::conn::MIN_RTO_MIN.total_micros(),
            netstack::conn::MAX_RTO_MIN.total_micros(),
        );
        if !micros.is_finite() || micros < min as f64 || micros > max as f64 {
            return Err(format!("`{s}`: outside {min}us..={max}us"));
        }
        Ok(RtoMin(Some(std::time::Duration::from_micros(
            micros.round() as u64,
        ))))
    }
}

impl std::fmt::Display for RtoMin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => write!(f, "off"),
            Some(d) if d.as_micros() % 1000 == 0 => write!(f, "{}ms", d.as_millis()),
            Some(d) => write!(f, "{}us", d.as_micros()),
        }
    }
}

/// The packet path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Net {
    /// smoltcp over a TAP device.
    Tap,
    /// smoltcp over an AF_XDP socket on an existing interface.
    Xdp,
    /// Kernel TCP sockets, for A/B measurements and users without root.
    Kernel,
}

/// `--xdp-mode`: the XDP attach modes allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum XdpMode {
    /// Native if the driver supports it, else generic.
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode only.
    Generic,
}

/// `--xdp-busy-poll`: preferred busy polling on the AF_XDP sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum XdpBusyPoll {
    /// The kernel's default: interrupts and softirq processing drive the queue.
    Off,
    /// The worker drives its queue's NAPI with `recvfrom`/`sendto`.
    On,
}

/// The idle policy of a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Idle {
    /// Busy-poll forever.
    Spin,
    /// Busy-poll for a short budget, then wait on the queue's file descriptor.
    Park,
    /// Sleep whenever the expected wait costs more than a wake-up (see `worker::idle`).
    Adaptive,
}

/// An IPv4 or IPv6 address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length, 0..=32 (IPv4) or 0..=128 (IPv6).
    pub prefix_len: u8,
}

/// `--host-ip`'s default when memspin serves IPv4.
pub const DEFAULT_HOST_IP: Cidr = Cidr {
    addr: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)),
    prefix_len: 24,
};

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = s.split_once('/').ok_or_else(|| {
            format!("`{s}`: expected ADDR/PREFIX, e.g. 10.77.0.2/24 or fd77::2/64")
        })?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|e| format!("`{addr}`: not an IPv4 or IPv6 address: {e}"))?;
        let prefix_len: u8 = prefix
            .parse()
            .map_err(|e| format!("`{prefix}`: not a prefix length: {e}"))?;
        let most = if addr.is_ipv4() { 32 } else { 128 };
        if prefix_len > most {
            return Err(format!("prefix length {prefix_len} is over {most}"));
        }
        Ok(Cidr { addr, prefix_len })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// The addresses of a bypass path: memspin's own (`--ip`), the kernel side's on a TAP link
/// (`--host-ip`) and the gateways (`--gateway`), at most one of each family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkAddrs {
    /// memspin's IPv4 address.
    pub ipv4: Option<Cidr>,
    /// memspin's IPv6 address.
    pub ipv6: Option<Cidr>,
    /// The kernel side's IPv4 address (TAP).
    pub host_ipv4: Option<Cidr>,
    /// The kernel side's IPv6 address (TAP).
    pub host_ipv6: Option<Cidr>,
    /// The IPv4 gateway.
    pub gateway4: Option<Ipv4Addr>,
    /// The IPv6 gateway.
    pub gateway6: Option<Ipv6Addr>,
}

impl LinkAddrs {
    /// memspin's addresses, IPv4 first.
    pub fn served(&self) -> impl Iterator<Item = Cidr> + '_ {
        self.ipv4.iter().chain(self.ipv6.iter()).copied()
    }

    /// The gateways, IPv4 first.
    pub fn gateways(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let v4 = self.gateway4.map(IpAddr::V4);
        let v6 = self.gateway6.map(IpAddr::V6);
        v4.into_iter().chain(v6)
    }

    /// The `stats settings` lines of a bypass path's addresses: memspin's own and the
    /// gateway, per family, `none` where there is none (one word per value, as tools that
    /// split `STAT name value` on spaces expect).
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        let or_none = |value: Option<String>| value.unwrap_or_else(|| "none".to_string());
        vec![
            ("memspin_ipv4", or_none(self.ipv4.map(|c| c.to_string()))),
            ("memspin_ipv6", or_none(self.ipv6.map(|c| c.to_string()))),
            (
                "memspin_gateway_ipv4",
                or_none(self.gateway4.map(|g| g.to_string())),
            ),
            (
                "memspin_gateway_ipv6",
                or_none(self.gateway6.map(|g| g.to_string())),
            ),
        ]
    }
}

/// `--host-ip`: an address to give the kernel side, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostIp {
    /// Leave the kernel side's addresses alone.
    None,
    /// Give the kernel side this address.
    Addr(Cidr),
}

impl FromStr for HostIp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "none" {
            Ok(HostIp::None)
        } else {
            s.parse().map(HostIp::Addr)
        }
    }
}

/// Parses a byte size: plain bytes, or with a `k`, `m` or `g` suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let lower = s.trim().to_ascii_lowercase();
    let (digits, shift) = match lower.strip_suffix(['k', 'm', 'g']) {
        Some(d) if lower.ends_with('k') => (d, 10),
        Some(d) if lower.ends_with('m') => (d, 20),
        Some(d) => (d, 30),
        None => (lower.as_str(), 0),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("`{s}`: expected a size such as 1048576, 512k or 1m"))?;
    n.checked_mul(1 << shift)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{s}`: size out of range"))
}

/// CPUs to pin workers to, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parses a CPU list such as `0`, `0,2` or `1-3`.
pub fn parse_cpu_list(s: &str) -> Result<CpuList, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("`{part}`: expected a CPU number or range like 2-3");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    if cpus.is_empty() {
        return Err("empty CPU list".into());
    }
    Ok(CpuList(cpus))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: `--gateway` with `--net kernel` was silently ignored.
    #[test]
    fn a_gateway_is_refused_on_kernel_sockets() {
        let parse = |args: &[&str]| Args::try_parse_from([&["memspin"], args].concat()).unwrap();
        let kernel = parse(&["--net", "kernel", "--gateway", "10.77.0.254"]);
        let message = kernel.check_net_flags().unwrap_err();
        assert!(
            message.contains("--gateway 10.77.0.254") && message.contains("host's routes"),
            "{message}"
        );
        assert_eq!(parse(&["--net", "kernel"]).check_net_flags(), Ok(()));
        for net in ["tap", "xdp"] {
            let bypass = parse(&["--net", net, "--gateway", "10.77.0.254"]);
            assert_eq!(bypass.check_net_flags(), Ok(()), "{net}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0"), Ok(CpuList(vec![0])));
        assert_eq!(parse_cpu_list("0,2-3"), Ok(CpuList(vec![0, 2, 3])));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    #[test]
    fn addresses() {
        let c: Cidr = "10.77.0.2/24".parse().unwrap();
        assert_eq!(c.addr, Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(c.prefix_len, 24);
        assert!("10.77.0.2".parse::<Cidr>().is_err());
        assert!("10.77.0.2/33".parse::<Cidr>().is_err());
        assert_eq!("none".parse::<HostIp>(), Ok(HostIp::None));
        let c: Cidr = "fd77::2/64".parse().unwrap();
        assert_eq!(c.addr, "fd77::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!((c.prefix_len, c.to_string().as_str()), (64, "fd77::2/64"));
        assert!("fd77::2/129".parse::<Cidr>().is_err());
        assert!("fd77::2".parse::<Cidr>().is_err());
    }

    #[track_caller]
    fn addrs(args: &[&str]) -> Result<LinkAddrs, String> {
        let mut all = vec!["memspin"];
        all.extend_from_slice(args);
        Args::parse_from(all).link_addrs()
    }

    #[test]
    fn one_address_of_each_family_with_kernel_sides_and_gateways() {
        // The defaults: 10.77.0.2/24, the kernel side 10.77.0.1/24, no gateway.
        let plain = addrs(&[]).unwrap();
        assert_eq!(plain.ipv4, Some("10.77.0.2/24".parse().unwrap()));
        assert_eq!(plain.host_ipv4, Some(DEFAULT_HOST_IP));
        assert_eq!(
            (plain.ipv6, plain.host_ipv6, plain.gateway4),
            (None, None, None)
        );
        let dual = addrs(&[
            "--ip",
            "10.77.0.2/24",
            "--ip",
            "fd77::2/64",
            "--host-ip",
            "fd77::1/64",
            "--host-ip",
            "10.77.0.1/24",
            "--gateway",
            "fe80::1",
            "--gateway",
            "10.77.0.254",
        ])
        .unwrap();
        assert_eq!(dual.ipv6, Some("fd77::2/64".parse().unwrap()));
        assert_eq!(dual.host_ipv6, Some("fd77::1/64".parse().unwrap()));
        assert_eq!(dual.host_ipv4, Some(DEFAULT_HOST_IP));
        assert_eq!(dual.gateway4, Some(Ipv4Addr::new(10, 77, 0, 254)));
        assert_eq!(dual.gateway6, Some("fe80::1".parse().unwrap()));
        assert_eq!(dual.served().count(), 2);
        assert_eq!(dual.gateways().count(), 2);
        let line = |(name, value): &(&str, String)| format!("{name} {value}");
        assert_eq!(
            dual.settings().iter().map(line).collect::<Vec<_>>(),
            [
                "memspin_ipv4 10.77.0.2/24",
                "memspin_ipv6 fd77::2/64",
                "memspin_gateway_ipv4 10.77.0.254",
                "memspin_gateway_ipv6 fe80::1",
            ]
        );
        // IPv6 only: no IPv4 kernel side by default.
        let v6 = addrs(&["--ip", "fd77::2/64"]).unwrap();
        assert_eq!((v6.ipv4, v6.host_ipv4), (None, None));
        assert_eq!(
            v6.settings().iter().map(line).collect::<Vec<_>>(),
            [
                "memspin_ipv4 none",
                "memspin_ipv6 fd77::2/64",
                "memspin_gateway_ipv4 none",
                "memspin_gateway_ipv6 none",
            ]
        );
        assert_eq!(addrs(&["--host-ip", "none"]).unwrap().host_ipv4, None);
        for (bad, why) in [
            (
                &["--ip", "10.0.0.2/24", "--ip", "10.1.0.2/24"][..],
                "one address per family",
            ),
            (
                &["--ip", "fd77::2/64", "--ip", "fd78::2/64"],
                "one address per family",
            ),
            (
                &["--host-ip", "fd77::1/64"],
                "serves no address of its family",
            ),
            (
                &["--host-ip", "none", "--host-ip", "10.77.0.1/24"],
                "give no address",
            ),
            (
                &["--host-ip", "10.77.0.1/24", "--host-ip", "10.77.0.3/24"],
                "one address per family",
            ),
            (&["--gateway", "fd77::1"], "serves no address of its family"),
            (
                &["--gateway", "10.77.0.1", "--gateway", "10.77.0.3"],
                "one gateway per family",
            ),
        ] {
            let err = addrs(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        assert!(Args::try_parse_from(["memspin", "--gateway", "10.77.0.1/24"]).is_err());
    }

    #[test]
    fn defaults_follow_the_contract() {
        let args = Args::parse_from(["memspin"]);
        assert_eq!(args.net, Net::Tap);
        assert_eq!(args.iface, "memspin0");
        assert_eq!(args.port, 11211);
        assert_eq!(args.memory_limit_mb, 64);
        assert_eq!(args.max_item_size, 1 << 20);
        assert_eq!(args.conn_limit, 1024);
        assert_eq!(args.idle, None);
        assert_eq!(args.idle_policy(), Idle::Adaptive, "adaptive over TAP");
        for (net, idle) in [("xdp", Idle::Spin), ("kernel", Idle::Spin)] {
            let args = Args::parse_from(["memspin", "--net", net]);
            assert_eq!(args.idle_policy(), idle, "--net {net}");
        }
        let args = Args::parse_from(["memspin", "--idle", "spin"]);
        assert_eq!(args.idle_policy(), Idle::Spin, "--idle wins");
        let args = Args::parse_from(["memspin", "--net", "kernel", "--idle", "adaptive"]);
        assert_eq!(args.idle_policy(), Idle::Adaptive);
        let args = Args::parse_from(["memspin"]);
        assert_eq!(args.cpus, None);
        assert_eq!(args.xdp_mode, XdpMode::Auto);
        assert_eq!(args.resp_port, None, "RESP off unless asked for");
        assert_eq!(
            Args::parse_from(["memspin", "--resp-port", "6379"]).resp_port,
            Some(6379)
        );
        assert!(Args::try_parse_from(["memspin", "--resp-port", "65536"]).is_err());
        assert_eq!(
            args.idle_timeout(),
            None,
            "idle timeout off, as memcached's"
        );
        assert_eq!(
            args.rto_min,
            RtoMin(Some(std::time::Duration::from_millis(1)))
        );
    }

    #[test]
    fn rto_min() {
        let floor = |s: &str| Args::try_parse_from(["memspin", "--rto-min", s]).map(|a| a.rto_min);
        let us = |n| RtoMin(Some(std::time::Duration::from_micros(n)));
        assert_eq!(floor("1ms").unwrap(), us(1000));
        assert_eq!(floor("500us").unwrap(), us(500));
        assert_eq!(floor("250µs").unwrap(), us(250));
        assert_eq!(floor("0.2s").unwrap(), us(200_000));
        assert_eq!(floor("1s").unwrap(), us(1_000_000));
        assert_eq!(floor("10us").unwrap(), us(10));
        assert_eq!(floor("off").unwrap(), RtoMin(None));
        for bad in [
            "1", "0ms", "5us", "2s", "-1ms", "fast", "ms", "NaNms", "infs",
        ] {
            assert!(floor(bad).is_err(), "{bad}");
        }
        assert_eq!(us(1500).to_string(), "1500us");
        assert_eq!(us(2000).to_string(), "2ms");
        assert_eq!(RtoMin(None).to_string(), "off");
        assert_eq!("1500us".parse::<RtoMin>().unwrap(), us(1500));
    }

    #[test]
    fn idle_timeout() {
        let args = Args::parse_from(["memspin", "--idle-timeout", "30"]);
        assert_eq!(
            args.idle_timeout(),
            Some(std::time::Duration::from_secs(30))
        );
        let args = Args::parse_from(["memspin", "--idle-timeout", "0"]);
        assert_eq!(args.idle_timeout(), None);
        assert!(Args::try_parse_from(["memspin", "--idle-timeout", "-1"]).is_err());
        assert!(Args::try_parse_from(["memspin", "--idle-timeout", "soon"]).is_err());
    }

    #[test]
    fn xdp_flags() {
        let args = Args::parse_from(["memspin", "--net", "xdp", "--iface", "eth1"]);
        assert_eq!((args.net, args.iface.as_str()), (Net::Xdp, "eth1"));
        let args = Args::parse_from(["memspin", "--net", "xdp", "--xdp-mode", "generic"]);
        assert_eq!(args.xdp_mode, XdpMode::Generic);
        assert!(Args::try_parse_from(["memspin", "--xdp-mode", "offload"]).is_err());
        let args = Args::parse_from(["memspin", "--net", "xdp"]);
        assert_eq!(
            (args.xdp_busy_poll, args.xdp_busy_poll_budget),
            (XdpBusyPoll::Off, 64)
        );
        let args = Args::parse_from([
            "memspin",
            "--xdp-busy-poll",
            "on",
            "--xdp-busy-poll-budget",
            "16",
        ]);
        assert_eq!(
            (args.xdp_busy_poll, args.xdp_busy_poll_budget),
            (XdpBusyPoll::On, 16)
        );
        for bad in ["0", "65536", "-1"] {
            assert!(
                Args::try_parse_from(["memspin", "--xdp-busy-poll-budget", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(Args::try_parse_from(["memspin", "--xdp-busy-poll", "maybe"]).is_err());
    }

    // Regression: `--cpus` once parsed into a Vec that clap took for a multi-value argument
    // and panicked on access.
    #[test]
    fn every_flag_parses() {
        let args = Args::parse_from([
            "memspin",
            "--net",
            "kernel",
            "--iface",
            "ms1",
            "--ip",
            "10.1.0.2/24",
            "--host-ip",
            "none",
            "-l",
            "127.0.0.1",
            "-p",
            "0",
            "--cpus",
            "1",
            "-m",
            "8",
            "-I",
            "512k",
            "-c",
            "10",
            "--idle",
            "park",
            "--idle-timeout",
            "600",
            "--rto-min",
            "2ms",
        ]);
        assert_eq!(args.cpus, Some(CpuList(vec![1])));
        assert_eq!(args.idle_timeout_secs, 600);
        assert_eq!(args.host_ip, vec![HostIp::None]);
        assert_eq!(args.max_item_size, 512 << 10);
        assert_eq!(args.idle, Some(Idle::Park));
        assert_eq!(
            args.rto_min,
            RtoMin(Some(std::time::Duration::from_millis(2)))
        );
    }

    #[test]
    fn operator_flags() {
        let args = Args::parse_from(["memspin"]);
        assert_eq!(
            (args.verbose, args.disable_evictions, args.enable_shutdown),
            (0, false, false)
        );
        let args = Args::parse_from(["memspin", "-vv", "-M", "-A"]);
        assert_eq!(
            (args.verbose, args.disable_evictions, args.enable_shutdown),
            (2, true, true)
        );
        let args = Args::parse_from(["memspin", "-v", "-v", "-v", "--disable-evictions"]);
        assert_eq!((args.verbose, args.disable_evictions), (3, true));
        let args = Args::parse_from(["memspin", "--enable-shutdown"]);
        assert!(args.enable_shutdown);
    }
}
