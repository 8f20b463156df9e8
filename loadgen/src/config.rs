//! What a run does: the validated form of the command line, usable directly from tests.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use crate::arrival::ArrivalKind;
use crate::bypass::{BypassLink, BypassPath};
use crate::client::Protocol;
use crate::placement::Distribution;
use crate::tstamp::Timestamps;
use crate::verify;
use crate::workload::{KeyDist, Keyspace, KeyspaceError, Mix, MixError, ValueSizes};

/// Largest value the generator will write (memcached's `-I` maximum is 1 GiB; its default 1 MiB).
pub const MAX_VALUE_SIZE: usize = 128 * 1024 * 1024;

/// One run's parameters. `Config::default()` is a 10 s closed-loop run against 127.0.0.1:11211.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Servers; connection `i` goes to `servers[i % servers.len()]`.
    pub servers: Vec<SocketAddr>,
    /// The servers' names as given (`host:port`), which ketama hashes; empty: the addresses.
    pub server_names: Vec<String>,
    /// How keys are spread over several servers.
    pub distribution: Distribution,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Total connections; connection `i` belongs to thread `i % threads`.
    pub connections: usize,
    /// Worker threads, one event loop each.
    pub threads: usize,
    /// Cores to pin thread `t` to (`cpus[t % len]`); `None`: the cores this process may use.
    pub cpus: Option<Vec<usize>>,
    /// Pin threads at all.
    pub pin: bool,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Open loop at this many requests per second in total; `None`: closed loop.
    pub rate: Option<f64>,
    /// Spacing of open-loop arrivals.
    pub arrival: ArrivalKind,
    /// Measurement window.
    pub duration: Duration,
    /// Unrecorded run time before the window.
    pub warmup: Duration,
    /// Number of keys.
    pub keys: u64,
    /// Bytes per key.
    pub key_size: usize,
    /// Smallest value, bytes.
    pub value_min: usize,
    /// Largest value, bytes.
    pub value_max: usize,
    /// `(size, weight)` list of value sizes; empty: uniform in `value_min..=value_max`. When
    /// set, `value_min` and `value_max` must be its smallest and largest size.
    pub value_weights: Vec<(usize, u32)>,
    /// Fraction of GETs.
    pub get_ratio: f64,
    /// Fraction of DELETEs (the rest of the requests are SETs).
    pub delete_ratio: f64,
    /// Keys per GET: 1 for plain GETs, more for multi-key GETs.
    pub multiget: usize,
    /// Time to live of every SET, seconds (0: none).
    pub ttl: u32,
    /// Key popularity.
    pub key_dist: KeyDist,
    /// Write every key once before the run.
    pub prefill: bool,
    /// Self-checking values; every GET hit is checked.
    pub verify: bool,
    /// Send each key only on a connection served by the worker that owns it (memspin,
    /// [`crate::client::steer`]).
    pub steer: bool,
    /// Seed of every generator.
    pub seed: u64,
    /// A request unanswered this long is a timeout and its connection is reopened.
    pub timeout: Duration,
    /// Open loop: a request sent later than this after its intended time counts as late.
    pub late_threshold: Duration,
    /// Busy-poll this long before each arrival instead of sleeping, for send times accurate to
    /// a microsecond (timed sleeps wake tens of µs late), when nothing else keeps the thread
    /// polling; zero sleeps up to the arrival.
    pub spin: Duration,
    /// What a thread does while it waits for replies.
    pub idle: Idle,
    /// Kernel timestamps for send and reply times (kernel sockets only).
    pub timestamps: Timestamps,
    /// How the connections reach the servers.
    pub net: Net,
    /// Length of the time series' intervals (and of the progress lines).
    pub interval: Duration,
    /// A name for the run in reports (`--label`).
    pub label: Option<String>,
    /// Print a progress line every interval (to stderr).
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            servers: vec![SocketAddr::from(([127, 0, 0, 1], 11211))],
            server_names: Vec::new(),
            distribution: Distribution::Modulo,
            protocol: Protocol::Binary,
            connections: 4,
            threads: 1,
            cpus: None,
            pin: true,
            pipeline: 1,
            rate: None,
            arrival: ArrivalKind::Poisson,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            keys: 100_000,
            key_size: 16,
            value_min: 32,
            value_max: 32,
            value_weights: Vec::new(),
            get_ratio: 0.9,
            delete_ratio: 0.0,
            multiget: 1,
            ttl: 0,
            key_dist: KeyDist::Uniform,
            prefill: false,
            verify: false,
            steer: false,
            seed: 1,
            timeout: Duration::from_secs(1),
            late_threshold: Duration::from_millis(1),
            spin: Duration::from_micros(50),
            idle: Idle::Spin,
            timestamps: Timestamps::Software,
            net: Net::Kernel,
            interval: Duration::from_secs(1),
            label: None,
            progress: true,
        }
    }
}

/// How the connections reach the servers (`--net`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Net {
    /// The kernel's TCP sockets.
    Kernel,
    /// netstack's client-mode connection table on a TAP queue per thread
    /// ([`crate::bypass`]).
    Tap(BypassLink),
    /// The same on an AF_XDP socket per thread on an existing interface
    /// ([`crate::bypass`]).
    Xdp(BypassLink),
}

impl Net {
    /// The name used on the command line and in the JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Net::Kernel => "kernel",
            Net::Tap(_) => "tap",
            Net::Xdp(_) => "xdp",
        }
    }

    /// The bypass client's device and link, if the connections bypass the kernel.
    pub fn bypass(&self) -> Option<(BypassPath, &BypassLink)> {
        match self {
            Net::Kernel => None,
            Net::Tap(link) => Some((BypassPath::Tap, link)),
            Net::Xdp(link) => Some((BypassPath::Xdp, link)),
        }
    }
}

/// What a worker thread does while requests are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Idle {
    /// Busy-poll while any request is in flight (a reply is read the moment it arrives); sleep
    /// only with nothing in flight, until `spin` before the next arrival, or for a while when
    /// the thread's core turns out to be shared.
    Spin,
    /// Sleep in epoll until a reply or the `spin` window before the next arrival: saves a
    /// core, and every reply waits for the thread's wake-up.
    Sleep,
}

impl Idle {
    /// The name used on the command line and in the JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Idle::Spin => "spin",
            Idle::Sleep => "sleep",
        }
    }
}

/// Why a configuration cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// No server given.
    NoServers,
    /// Zero threads.
    Threads,
    /// Fewer connections than threads (every thread needs one).
    Connections,
    /// Several servers, and connections not a multiple of their number (keys are spread over
    /// servers by `key % servers`, connections by `connection % servers`).
    ConnectionsPerServer,
    /// Zero pipeline depth.
    Pipeline,
    /// A rate that is not a positive finite number.
    Rate,
    /// A zero measurement window.
    Duration,
    /// A zero timeout.
    Timeout,
    /// A time-series interval under 1 ms.
    Interval,
    /// `value_min`/`value_max` that are not the weighted list's smallest and largest sizes.
    ValueWeights,
    /// A server name list whose length differs from the address list.
    ServerNames,
    /// Values larger than [`MAX_VALUE_SIZE`].
    ValueTooLarge,
    /// `--verify` with values shorter than the verification header.
    VerifyValueTooSmall,
    /// `--verify` or `--prefill` with fewer keys than connections (each connection owns keys).
    FewerKeysThanConnections,
    /// An empty `--cpus` list.
    Cpus,
    /// A bypass client whose address or gateway is of another family than a server's.
    NetFamily,
    /// `--steer` with several servers.
    Steer,
    /// The keyspace cannot be built.
    Keyspace(KeyspaceError),
    /// The workload mix is invalid.
    Mix(MixError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoServers => f.write_str("at least one --server is needed"),
            ConfigError::Threads => f.write_str("--threads must be at least 1"),
            ConfigError::Connections => f.write_str("--connections must be at least --threads"),
            ConfigError::ConnectionsPerServer => {
                f.write_str("with several --server, --connections must be a multiple of their number")
            }
            ConfigError::Pipeline => f.write_str("--pipeline must be at least 1"),
            ConfigError::Rate => f.write_str("--rate must be a positive number"),
            ConfigError::Duration => f.write_str("--duration must be positive"),
            ConfigError::Timeout => f.write_str("--timeout-ms must be positive"),
            ConfigError::Interval => f.write_str("--interval must be at least 1 ms"),
            ConfigError::ValueWeights => {
                f.write_str("value_min and value_max must be the weighted list's extremes")
            }
            ConfigError::ServerNames => f.write_str("one server name per server address"),
            ConfigError::ValueTooLarge => {
                write!(f, "--value-size is limited to {MAX_VALUE_SIZE} bytes")
            }
            ConfigError::VerifyValueTooSmall => {
                write!(
                    f,
                    "--verify needs values of at least {} bytes",
                    verify::HEADER_LEN
                )
            }
            ConfigError::FewerKeysThanConnections => {
                f.write_str("--verify, --prefill and several --server need at least as many --keys as --connections")
            }
            ConfigError::Cpus => f.write_str("--cpus needs at least one core"),
            ConfigError::NetFamily => f.write_str(
                "--ip, --gateway and every --server must be of one address family",
            ),
            ConfigError::Steer => f.write_str(
                "--steer needs exactly one --server: it spreads connections over one server's \
                 workers",
            ),
            ConfigError::Keyspace(e) => e.fmt(f),
            ConfigError::Mix(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {}

impl From<KeyspaceError> for ConfigError {
    fn from(e: KeyspaceError) -> Self {
        ConfigError::Keyspace(e)
    }
}

impl From<MixError> for ConfigError {
    fn from(e: MixError) -> Self {
        ConfigError::Mix(e)
    }
}

impl Config {
    /// Whether this is an open-loop run.
    pub fn is_open_loop(&self) -> bool {
        self.rate.is_some()
    }

    /// The workload mix.
    pub fn mix(&self) -> Mix {
        Mix {
            keys: self.keys,
            key_dist: self.key_dist,
            get_ratio: self.get_ratio,
            delete_ratio: self.delete_ratio,
            multiget: self.multiget,
            value_sizes: self.value_sizes(),
        }
    }

    /// The value sizes of SETs.
    pub fn value_sizes(&self) -> ValueSizes {
        if self.value_weights.is_empty() {
            ValueSizes::range(self.value_min, self.value_max)
        } else {
            ValueSizes::Weighted(self.value_weights.clone())
        }
    }

    /// The servers' names as given, or their addresses.
    pub fn names(&self) -> Vec<String> {
        if self.server_names.is_empty() {
            self.servers.iter().map(ToString::to_string).collect()
        } else {
            self.server_names.clone()
        }
    }

    /// Checks everything that can be checked before connecting.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.servers.is_empty() {
            return Err(ConfigError::NoServers);
        }
        if self.threads == 0 {
            return Err(ConfigError::Threads);
        }
        if self.connections < self.threads {
            return Err(ConfigError::Connections);
        }
        if !self.connections.is_multiple_of(self.servers.len()) {
            return Err(ConfigError::ConnectionsPerServer);
        }
        if self.pipeline == 0 {
            return Err(ConfigError::Pipeline);
        }
        if let Some(r) = self.rate
            && !(r.is_finite() && r > 0.0)
        {
            return Err(ConfigError::Rate);
        }
        if self.duration.is_zero() {
            return Err(ConfigError::Duration);
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::Timeout);
        }
        if self.interval < Duration::from_millis(1) {
            return Err(ConfigError::Interval);
        }
        if !self.value_weights.is_empty() {
            let sizes = self.value_sizes();
            if (sizes.min(), sizes.max()) != (self.value_min, self.value_max) {
                return Err(ConfigError::ValueWeights);
            }
        }
        if !self.server_names.is_empty() && self.server_names.len() != self.servers.len() {
            return Err(ConfigError::ServerNames);
        }
        if self.cpus.as_ref().is_some_and(Vec::is_empty) {
            return Err(ConfigError::Cpus);
        }
        self.mix().check()?;
        if self.value_max > MAX_VALUE_SIZE {
            return Err(ConfigError::ValueTooLarge);
        }
        if self.verify && self.value_min < verify::HEADER_LEN {
            return Err(ConfigError::VerifyValueTooSmall);
        }
        if (self.verify || self.prefill || self.servers.len() > 1)
            && self.keys < self.connections as u64
        {
            return Err(ConfigError::FewerKeysThanConnections);
        }
        if let Some((_, link)) = self.net.bypass() {
            let family = link.ip.is_ipv4();
            if self.servers.iter().any(|s| s.is_ipv4() != family)
                || link.gateway.is_some_and(|g| g.is_ipv4() != family)
            {
                return Err(ConfigError::NetFamily);
            }
        }
        if self.steer && self.servers.len() != 1 {
            return Err(ConfigError::Steer);
        }
        Keyspace::check(self.keys, self.key_size)?;
        Ok(())
    }
}

/// The configuration as written into the JSON summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigEcho {
    /// Servers, as `host:port` (as given).
    pub servers: Vec<String>,
    /// `modulo` or `ketama`.
    pub distribution: Distribution,
    /// `binary` or `text`.
    pub protocol: Protocol,
    /// Total connections.
    pub connections: usize,
    /// Worker threads.
    pub threads: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Target rate (open loop) or null (closed loop).
    pub rate: Option<f64>,
    /// `poisson` or `uniform`.
    pub arrival: ArrivalKind,
    /// Measurement window, s.
    pub duration_s: f64,
    /// Warm-up, s.
    pub warmup_s: f64,
    /// Number of keys.
    pub keys: u64,
    /// Bytes per key.
    pub key_size: usize,
    /// Smallest value, bytes.
    pub value_size_min: usize,
    /// Largest value, bytes.
    pub value_size_max: usize,
    /// The sizes as on the command line: `32`, `16-1024` or `100:4,1000:1`.
    pub value_sizes: String,
    /// Fraction of GETs.
    pub get_ratio: f64,
    /// Fraction of DELETEs.
    pub delete_ratio: f64,
    /// Keys per GET.
    pub multiget: usize,
    /// TTL of SETs, s (0: none).
    pub ttl_s: u32,
    /// `uniform` or `zipf:S`.
    pub key_dist: String,
    /// Whether keys were written before the run.
    pub prefill: bool,
    /// Whether values were verified.
    pub verify: bool,
    /// Whether keys were steered to their owners' connections (`--steer`).
    pub steer: bool,
    /// Seed.
    pub seed: u64,
    /// Request timeout, ms.
    pub timeout_ms: f64,
    /// Late threshold, µs.
    pub late_threshold_us: f64,
    /// Busy-poll window before each arrival, µs.
    pub spin_us: f64,
    /// `spin` or `sleep`.
    pub idle: Idle,
    /// Kernel timestamps asked for: `software`, `hardware` or `none`.
    pub timestamps: Timestamps,
    /// `kernel`, `tap` or `xdp` (`--net`).
    pub net: &'static str,
    /// Time-series interval, ms.
    pub interval_ms: f64,
}

impl From<&Config> for ConfigEcho {
    fn from(c: &Config) -> Self {
        ConfigEcho {
            servers: c.names(),
            distribution: c.distribution,
            protocol: c.protocol,
            connections: c.connections,
            threads: c.threads,
            pipeline: c.pipeline,
            rate: c.rate,
            arrival: c.arrival,
            duration_s: c.duration.as_secs_f64(),
            warmup_s: c.warmup.as_secs_f64(),
            keys: c.keys,
            key_size: c.key_size,
            value_size_min: c.value_min,
            value_size_max: c.value_max,
            value_sizes: c.value_sizes().to_string(),
            get_ratio: c.get_ratio,
            delete_ratio: c.delete_ratio,
            multiget: c.multiget,
            ttl_s: c.ttl,
            key_dist: c.key_dist.to_string(),
            prefill: c.prefill,
            verify: c.verify,
            steer: c.steer,
            seed: c.seed,
            timeout_ms: c.timeout.as_secs_f64() * 1e3,
            late_threshold_us: c.late_threshold.as_secs_f64() * 1e6,
            spin_us: c.spin.as_secs_f64() * 1e6,
            idle: c.idle,
            timestamps: c.timestamps,
            net: c.net.name(),
            interval_ms: c.interval.as_secs_f64() * 1e3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_errors_are_caught() {
        let ok = Config::default();
        assert_eq!(ok.check(), Ok(()));
        let bad = |f: fn(&mut Config)| {
            let mut c = Config::default();
            f(&mut c);
            c.check().unwrap_err()
        };
        assert_eq!(bad(|c| c.servers.clear()), ConfigError::NoServers);
        assert_eq!(bad(|c| c.threads = 8), ConfigError::Connections);
        assert_eq!(bad(|c| c.pipeline = 0), ConfigError::Pipeline);
        assert_eq!(bad(|c| c.rate = Some(0.0)), ConfigError::Rate);
        assert_eq!(bad(|c| c.rate = Some(f64::NAN)), ConfigError::Rate);
        assert_eq!(bad(|c| c.duration = Duration::ZERO), ConfigError::Duration);
        assert_eq!(
            bad(|c| {
                c.verify = true;
                c.value_min = 8
            }),
            ConfigError::VerifyValueTooSmall
        );
        assert_eq!(
            bad(|c| {
                c.prefill = true;
                c.keys = 2
            }),
            ConfigError::FewerKeysThanConnections
        );
        assert_eq!(
            bad(|c| c.key_size = 3),
            ConfigError::Keyspace(KeyspaceError::KeysTooShort { needed: 6 })
        );
        assert_eq!(
            bad(|c| c.get_ratio = 2.0),
            ConfigError::Mix(MixError::GetRatio)
        );
        assert_eq!(bad(|c| c.cpus = Some(vec![])), ConfigError::Cpus);
        assert_eq!(
            bad(|c| c.interval = Duration::from_micros(10)),
            ConfigError::Interval
        );
        assert_eq!(
            bad(|c| c.value_weights = vec![(10, 1), (64, 1)]),
            ConfigError::ValueWeights
        );
        assert_eq!(
            bad(|c| c.server_names = vec!["a:1".into(), "b:2".into()]),
            ConfigError::ServerNames
        );
        assert_eq!(
            bad(|c| c.delete_ratio = 0.2),
            ConfigError::Mix(MixError::DeleteRatio)
        );
        fn two(c: &mut Config) {
            c.servers.push(SocketAddr::from(([127, 0, 0, 1], 11212)));
        }
        assert_eq!(
            bad(|c| {
                two(c);
                c.connections = 3
            }),
            ConfigError::ConnectionsPerServer
        );
        let mut ok = Config::default();
        two(&mut ok);
        assert_eq!(ok.check(), Ok(()));
    }

    #[test]
    fn steering_needs_one_server_on_any_transport() {
        let link = BypassLink {
            iface: "lg0".into(),
            ip: "127.0.0.2".parse().unwrap(),
            prefix_len: 8,
            gateway: None,
        };
        for net in [Net::Kernel, Net::Tap(link.clone()), Net::Xdp(link)] {
            let mut c = Config {
                steer: true,
                net,
                ..Config::default()
            };
            assert_eq!(c.check(), Ok(()), "{:?}", c.net);
            c.servers.push(SocketAddr::from(([127, 0, 0, 1], 11212)));
            assert_eq!(c.check(), Err(ConfigError::Steer), "{:?}", c.net);
        }
    }
}
