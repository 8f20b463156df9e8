//! The `memspin-loadgen` command line (names fixed by the contract in `loadgen/README.md`'s
//! options table: added to, never renamed), turned into a [`Config`] plus the output files to
//! write.
//!
//! ```text
//! argv → Args (clap) → Config + Outputs → run / sweep / search → table (stdout), JSON, hgrm,
//!                                                               hlog, plot
//! argv → report RESULT.json... --html OUT.html → html::write_report
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::arrival::ArrivalKind;
use crate::bypass::BypassLink;
use crate::client::Protocol;
use crate::config::{Config, Idle, Net};
use crate::html;
use crate::output;
use crate::placement::Distribution;
use crate::report::Report;
use crate::run::run_with_stop;
use crate::search::{Slo, search, search_table};
use crate::sweep::{sweep, sweep_table};
use crate::tstamp::Timestamps;
use crate::workload::{KeyDist, ValueSizes};

/// A `--cpus` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// A `--sweep` list of rates.
#[derive(Debug, Clone, PartialEq)]
pub struct RateList(pub Vec<f64>);

/// Wire protocol names on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtocolArg {
    /// memcached binary protocol.
    Binary,
    /// memcached text protocol.
    Text,
    /// memcached meta commands.
    Meta,
    /// Redis's RESP (a server's `--resp-port`, or redis-server).
    Resp,
}

/// Key placements on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DistributionArg {
    /// Key index i on server i % servers.
    Modulo,
    /// libmemcached's consistent ketama, as pylibmc's behaviors={"ketama": True}.
    Ketama,
}

/// Subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Cmd {
    /// Render one or more result files (run, sweep or search JSON) as one self-contained HTML page.
    Report {
        /// Result files written by --json.
        #[arg(required = true, value_name = "RESULT.json")]
        results: Vec<PathBuf>,
        /// The page to write.
        #[arg(long, value_name = "OUT.html")]
        html: PathBuf,
    },
}

/// Arrival process names on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ArrivalArg {
    /// Exponential gaps (Poisson process).
    Poisson,
    /// Evenly spaced arrivals.
    Uniform,
}

/// Idle policies on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IdleArg {
    /// Busy-poll while requests are in flight.
    Spin,
    /// Sleep in epoll until a reply arrives.
    Sleep,
}

/// Packet paths on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NetArg {
    /// The kernel's TCP sockets.
    Kernel,
    /// netstack's TCP stack on a TAP queue per thread (needs root).
    Tap,
    /// netstack's TCP stack on an AF_XDP socket per thread, thread i on queue i of an existing interface (needs root).
    Xdp,
}

/// Timestamp sources on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimestampsArg {
    /// Kernel software transmit and receive stamps.
    Software,
    /// The NIC's stamps (software where the interface has none).
    Hardware,
    /// The generator's own clock readings.
    None,
}

/// Open-loop memcached load generator with HDR latency histograms. Without --rate it runs a
/// closed loop (each connection keeps --pipeline requests in flight) and reports service time;
/// with --rate it sends on a Poisson schedule and reports latency from the intended send time
/// (corrected) as well as from the actual send (service time).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "memspin-loadgen",
    version,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// `report`: turn result files into an HTML page.
    #[command(subcommand)]
    pub command: Option<Cmd>,
    /// Server to load (repeatable: connection i talks to server i % servers, and picks keys
    /// that live there by --distribution).
    #[arg(
        short = 's',
        long = "server",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:11211"
    )]
    pub servers: Vec<String>,
    /// Wire protocol.
    #[arg(long, value_enum, default_value_t = ProtocolArg::Binary)]
    pub protocol: ProtocolArg,
    /// How keys are spread over several servers: key index modulo servers, or libmemcached's ketama.
    #[arg(long, value_enum, default_value_t = DistributionArg::Modulo)]
    pub distribution: DistributionArg,
    /// Total connections (spread over the threads).
    #[arg(short = 'c', long, default_value_t = 4)]
    pub connections: usize,
    /// Worker threads, each pinned to a core.
    #[arg(short = 't', long, default_value_t = 1)]
    pub threads: usize,
    /// Cores to pin the threads to, e.g. `1` or `2-3,6` (default: the cores this process may use).
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<CpuList>,
    /// Do not pin threads.
    #[arg(long)]
    pub no_pin: bool,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Open loop at this many requests per second in total (suffixes k, M); without it, closed loop.
    #[arg(long, value_name = "OPS", value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Open-loop arrival process.
    #[arg(long, value_enum, default_value_t = ArrivalArg::Poisson)]
    pub arrival: ArrivalArg,
    /// Series of open-loop rates, e.g. `10k,20k,40k`: one run each, then a latency-vs-throughput table;
    /// stops after the first point past saturation.
    #[arg(long, value_name = "R1,R2,...", value_parser = parse_sweep, conflicts_with = "rate")]
    pub sweep: Option<RateList>,
    /// Find the highest open-loop rate whose corrected P-th percentile stays under US µs, e.g. 99:500.
    #[arg(long, value_name = "P:US", value_parser = Slo::parse, conflicts_with_all = ["rate", "sweep"])]
    pub search: Option<Slo>,
    /// Measurement window, seconds.
    #[arg(short = 'd', long, value_name = "SECS", default_value_t = 10.0)]
    pub duration: f64,
    /// Warm-up before the window (not recorded), seconds.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub warmup: f64,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Bytes per key.
    #[arg(long, value_name = "BYTES", default_value_t = 16)]
    pub key_size: usize,
    /// Value size in bytes, a uniform range MIN-MAX, or a weighted list SIZE:WEIGHT,... (e.g. 100:4,1000:1).
    #[arg(long, value_name = "BYTES|MIN-MAX|S:W,...", default_value = "32", value_parser = parse_value_sizes)]
    pub value_size: ValueSizes,
    /// Fraction of requests that are GETs (the rest are DELETEs, --delete-ratio, and SETs).
    #[arg(long, value_name = "F", default_value_t = 0.9)]
    pub get_ratio: f64,
    /// Fraction of requests that are DELETEs.
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub delete_ratio: f64,
    /// Keys per GET: every GET asks for N keys in one request (1: plain GETs).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub multiget: usize,
    /// Time to live of every SET, seconds (0: none).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub ttl: u32,
    /// Key popularity: `uniform`, `zipf:S`, `gaussian[:SD]` (SD in keys, default keys/6) or `sequential`.
    #[arg(long, value_name = "DIST", default_value = "uniform", value_parser = parse_key_dist)]
    pub key_dist: KeyDist,
    /// Write every key once before the run.
    #[arg(long)]
    pub prefill: bool,
    /// Self-checking values: every GET hit is checked against key and version.
    #[arg(long)]
    pub verify: bool,
    /// Send each key only on a connection that memspin's worker owning it serves (no
    /// forwarding between its cores); kernel sockets, one server.
    #[arg(long)]
    pub steer: bool,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A request unanswered this long counts as a timeout and its connection is reopened.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub timeout_ms: u64,
    /// Open loop: a request sent more than this after its intended time counts as late.
    #[arg(long, value_name = "US", default_value_t = 1000)]
    pub late_us: u64,
    /// Open loop: busy-poll this many µs before each arrival instead of sleeping, when nothing is in flight (0: sleep up to the arrival).
    #[arg(long, value_name = "US", default_value_t = 50)]
    pub spin_us: u64,
    /// While requests are in flight: `spin` busy-polls (replies are read as they arrive), `sleep` sleeps in epoll (saves a core; each reply waits for the thread's wake-up).
    #[arg(long, value_enum, default_value_t = IdleArg::Spin)]
    pub idle: IdleArg,
    /// Send and reply times: kernel `software` timestamps, the NIC's `hardware` ones (software where the interface has none), or `none` (the generator's own clock).
    #[arg(long, value_enum, default_value_t = TimestampsArg::Software)]
    pub timestamps: TimestampsArg,
    /// How connections reach the servers: `kernel` sockets, or the kernel-bypass client (with --iface and --ip; needs root) on a TAP device (`tap`) or on AF_XDP sockets on an existing interface (`xdp`, thread i on queue i).
    #[arg(long, value_enum, default_value_t = NetArg::Kernel)]
    pub net: NetArg,
    /// --net tap: the TAP device, which must exist and be up (one queue per thread: multi-queue when --threads > 1); --net xdp: the interface to attach to (at least one receive queue per thread).
    #[arg(long, value_name = "NAME")]
    pub iface: Option<String>,
    /// --net tap|xdp: the generator's own address on the link, ADDR/PREFIX (over xdp an address the kernel does not also use).
    #[arg(long, value_name = "ADDR/PREFIX")]
    pub ip: Option<String>,
    /// --net tap|xdp: the default route's gateway, for servers that are not on the link.
    #[arg(long, value_name = "ADDR")]
    pub gateway: Option<std::net::IpAddr>,
    /// Write the JSON summary here (schema in loadgen/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write HdrHistogram percentile-distribution files PATH-{corrected,service}-{all,get_hit,...}.hgrm (values in ms).
    #[arg(long, value_name = "PATH")]
    pub hgrm_prefix: Option<String>,
    /// Write the time series as an HdrHistogram interval log (the format HdrHistogram's log tools read).
    #[arg(long, value_name = "FILE.hlog")]
    pub hlog: Option<PathBuf>,
    /// Length of the time series' intervals (JSON, .hlog, progress lines), ms.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub interval: u64,
    /// A name for the run in the JSON and in reports.
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// Plot the percentile distribution (or, with --sweep, latency vs throughput): .svg or .png.
    #[arg(long, value_name = "FILE.svg|png")]
    pub plot: Option<PathBuf>,
    /// No progress lines.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

impl Args {
    /// The run configuration these arguments describe.
    ///
    /// # Errors
    /// A message for a server name that does not resolve or a duration that is not a number of
    /// seconds. The rest is checked by [`Config::check`].
    pub fn config(&self) -> Result<Config, String> {
        let mut servers = Vec::new();
        for s in &self.servers {
            use std::net::ToSocketAddrs;
            let addr = s
                .to_socket_addrs()
                .map_err(|e| format!("--server {s}: {e}"))?
                .next()
                .ok_or_else(|| format!("--server {s}: no address"))?;
            servers.push(addr);
        }
        let server_names = self.servers.clone();
        let net = self.net()?;
        let secs = |name: &str, v: f64| {
            Duration::try_from_secs_f64(v)
                .map_err(|_| format!("--{name} {v}: not a number of seconds"))
        };
        Ok(Config {
            servers,
            server_names,
            distribution: match self.distribution {
                DistributionArg::Modulo => Distribution::Modulo,
                DistributionArg::Ketama => Distribution::Ketama,
            },
            protocol: match self.protocol {
                ProtocolArg::Binary => Protocol::Binary,
                ProtocolArg::Text => Protocol::Text,
                ProtocolArg::Meta => Protocol::Meta,
                ProtocolArg::Resp => Protocol::Resp,
            },
            connections: self.connections,
            threads: self.threads,
            cpus: self.cpus.as_ref().map(|c| c.0.clone()),
            pin: !self.no_pin,
            pipeline: self.pipeline,
            rate: self.rate,
            arrival: match self.arrival {
                ArrivalArg::Poisson => ArrivalKind::Poisson,
                ArrivalArg::Uniform => ArrivalKind::Uniform,
            },
            duration: secs("duration", self.duration)?,
            warmup: secs("warmup", self.warmup)?,
            keys: self.keys,
            key_size: self.key_size,
            value_min: self.value_size.min(),
            value_max: self.value_size.max(),
            value_weights: match &self.value_size {
                ValueSizes::Weighted(l) => l.clone(),
                _ => Vec::new(),
            },
            get_ratio: self.get_ratio,
            delete_ratio: self.delete_ratio,
            multiget: self.multiget,
            ttl: self.ttl,
            key_dist: self.key_dist,
            prefill: self.prefill,
            verify: self.verify,
            steer: self.steer,
            seed: self.seed,
            timeout: Duration::from_millis(self.timeout_ms),
            late_threshold: Duration::from_micros(self.late_us),
            spin: Duration::from_micros(self.spin_us),
            idle: match self.idle {
                IdleArg::Spin => Idle::Spin,
                IdleArg::Sleep => Idle::Sleep,
            },
            timestamps: match self.timestamps {
                TimestampsArg::Software => Timestamps::Software,
                TimestampsArg::Hardware => Timestamps::Hardware,
                TimestampsArg::None => Timestamps::None,
            },
            net,
            interval: Duration::from_millis(self.interval),
            label: self.label.clone(),
            progress: !self.quiet,
        })
    }
}

impl Args {
    /// The packet path `--net`, `--iface`, `--ip` and `--gateway` describe.
    fn net(&self) -> Result<Net, String> {
        let bypass_only = || {
            if self.iface.is_some() || self.ip.is_some() || self.gateway.is_some() {
                Err("--iface, --ip and --gateway are for --net tap and --net xdp".to_string())
            } else {
                Ok(())
            }
        };
        match self.net {
            NetArg::Kernel => bypass_only().map(|()| Net::Kernel),
            NetArg::Tap | NetArg::Xdp => {
                let name = if self.net == NetArg::Tap {
                    "tap"
                } else {
                    "xdp"
                };
                let iface = self
                    .iface
                    .clone()
                    .ok_or_else(|| format!("--net {name} needs --iface"))?;
                let ip = self
                    .ip
                    .as_deref()
                    .ok_or_else(|| format!("--net {name} needs --ip ADDR/PREFIX"))?;
                let (ip, prefix_len) =
                    BypassLink::parse_cidr(ip).map_err(|e| format!("--ip {e}"))?;
                let link = BypassLink {
                    iface,
                    ip,
                    prefix_len,
                    gateway: self.gateway,
                };
                Ok(if self.net == NetArg::Tap {
                    Net::Tap(link)
                } else {
                    Net::Xdp(link)
                })
            }
        }
    }
}

/// `50000`, `50k`, `1.5M` → requests per second.
///
/// # Errors
/// A message when it is not a positive number.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let (num, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1e3),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a rate (e.g. 50000, 50k, 1.5M)"))?;
    let v = v * mult;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{s:?}: the rate must be positive"))
    }
}

/// `R1,R2,...` → rates.
///
/// # Errors
/// A message naming the bad rate.
pub fn parse_sweep(s: &str) -> Result<RateList, String> {
    let rates = s
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(parse_rate)
        .collect::<Result<Vec<_>, _>>()?;
    if rates.is_empty() {
        Err("--sweep needs at least one rate".to_string())
    } else {
        Ok(RateList(rates))
    }
}

/// `32`, `16-1024` or `100:4,1000:1` → value sizes.
///
/// # Errors
/// A message when it is none of these.
pub fn parse_value_sizes(s: &str) -> Result<ValueSizes, String> {
    if !s.contains(':') {
        let (lo, hi) = parse_value_size(s)?;
        return Ok(ValueSizes::range(lo, hi));
    }
    let bad = || format!("{s:?} is not a list SIZE:WEIGHT,... (e.g. 100:4,1000:1)");
    let mut list = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (size, weight) = part.split_once(':').ok_or_else(bad)?;
        let size: usize = size.trim().parse().map_err(|_| bad())?;
        let weight: u32 = weight.trim().parse().map_err(|_| bad())?;
        list.push((size, weight));
    }
    if list.is_empty() || list.iter().all(|p| p.1 == 0) {
        return Err(bad());
    }
    Ok(ValueSizes::Weighted(list))
}

/// `32` or `16-1024` → (min, max).
///
/// # Errors
/// A message when it is not a size or a range with MIN <= MAX.
pub fn parse_value_size(s: &str) -> Result<(usize, usize), String> {
    let num = |t: &str| {
        t.trim()
            .parse::<usize>()
            .map_err(|_| format!("{s:?} is not BYTES or MIN-MAX"))
    };
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let v = num(s)?;
            (v, v)
        }
    };
    if lo > hi {
        Err(format!("{s:?}: MIN must not exceed MAX"))
    } else {
        Ok((lo, hi))
    }
}

/// `uniform`, `zipf:S`, `gaussian`, `gaussian:SD` or `sequential`.
///
/// # Errors
/// A message for anything else.
pub fn parse_key_dist(s: &str) -> Result<KeyDist, String> {
    match s {
        "uniform" => return Ok(KeyDist::Uniform),
        "gaussian" => return Ok(KeyDist::Gaussian(None)),
        "sequential" => return Ok(KeyDist::Sequential),
        _ => {}
    }
    if let Some(sd) = s.strip_prefix("gaussian:") {
        return match sd.parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(KeyDist::Gaussian(Some(v))),
            _ => Err(format!(
                "{s:?}: gaussian:SD needs a deviation in keys above 0"
            )),
        };
    }
    if let Some(exp) = s.strip_prefix("zipf:") {
        let v: f64 = exp
            .parse()
            .map_err(|_| format!("{s:?}: zipf needs an exponent, e.g. zipf:0.99"))?;
        if v.is_finite() && v >= 0.0 {
            return Ok(KeyDist::Zipf(v));
        }
    }
    Err(format!(
        "{s:?}: expected uniform, zipf:S (S >= 0), gaussian[:SD] or sequential"
    ))
}

/// `0,2-3` → [0, 2, 3].
///
/// # Errors
/// A message for anything that is not a list of cores and ranges.
pub fn parse_cpus(s: &str) -> Result<CpuList, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("{s:?} is not a core list like 0,2-3"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("{s:?}: range {a}-{b} runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    if out.is_empty() {
        Err("--cpus needs at least one core".to_string())
    } else {
        Ok(CpuList(out))
    }
}

/// Entry point of the `memspin-loadgen` binary.
pub fn main() -> ExitCode {
    let args = Args::parse();
    match main_with(&args) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("memspin-loadgen: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Runs what `args` asks for; the exit code is 1 when verification found mismatches.
///
/// # Errors
/// A message for invalid arguments, a failed start-up or an output file that cannot be written.
pub fn main_with(args: &Args) -> Result<ExitCode, String> {
    if let Some(Cmd::Report { results, html }) = &args.command {
        html::write_report(results, html).map_err(|e| format!("report: {e}"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let config = args.config()?;
    config.check().map_err(|e| e.to_string())?;
    if let Some(p) = &args.plot {
        output::PlotFormat::of(p)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal ends the process the usual way.
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())
            .map_err(|e| e.to_string())?;
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| e.to_string())?;
    }
    let mut searched = None;
    let reports: Vec<Report> = match (&args.sweep, args.search) {
        (Some(rates), _) => sweep(&config, &rates.0, stop).map_err(|e| e.to_string())?,
        (None, Some(slo)) => {
            let s = search(&config, slo, stop).map_err(|e| e.to_string())?;
            let reports = s.reports.clone();
            searched = Some(s);
            reports
        }
        (None, None) => vec![run_with_stop(&config, stop).map_err(|e| e.to_string())?],
    };
    let series = args.sweep.is_some() || args.search.is_some();
    for r in &reports {
        print!("{}", r.table());
        if series {
            println!();
        }
    }
    if series && !reports.is_empty() {
        println!("latency vs throughput (corrected latency, µs):");
        print!("{}", sweep_table(&reports));
    }
    if let Some(s) = &searched {
        print!("{}", search_table(s));
    }
    if let Some(path) = &args.json {
        let res = match &searched {
            Some(s) => output::write_search_json(path, s),
            None if series => output::write_sweep_json(path, &reports),
            None => output::write_json(path, &reports[0]),
        };
        res.map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    if let Some(prefix) = &args.hgrm_prefix {
        for r in &reports {
            let p = match (series, r.config.rate) {
                (true, Some(rate)) => format!("{prefix}-rate{rate:.0}"),
                _ => prefix.clone(),
            };
            output::write_hgrm(&p, r).map_err(|e| format!("--hgrm-prefix {prefix}: {e}"))?;
        }
    }
    if let Some(path) = &args.hlog {
        for r in &reports {
            let p = match (series, r.config.rate) {
                (true, Some(rate)) => {
                    let stem = path.with_extension("");
                    PathBuf::from(format!("{}-rate{rate:.0}.hlog", stem.display()))
                }
                _ => path.clone(),
            };
            output::write_hlog(&p, r).map_err(|e| format!("--hlog {}: {e}", p.display()))?;
        }
    }
    if let Some(path) = &args.plot
        && !reports.is_empty()
    {
        let res = if series {
            output::plot_sweep(path, &reports)
        } else {
            let r = &reports[0];
            let mut curves = Vec::new();
            let corrected_all = r.corrected.as_ref().map(|c| c.all());
            let service_all = r.service.all();
            if let Some(c) = &corrected_all {
                curves.push(("corrected (from intended send)", c));
            }
            curves.push(("service (from actual send)", &service_all));
            let title = match r.config.rate {
                Some(rate) => format!("latency by percentile, open loop at {rate:.0}/s"),
                None => "latency by percentile, closed loop".to_string(),
            };
            output::plot_percentiles(path, &title, &curves)
        };
        res.map_err(|e| format!("--plot {}: {e}", path.display()))?;
    }
    let mismatches: u64 = reports.iter().map(|r| r.verify.mismatches).sum();
    Ok(if mismatches > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn documented_flag_names_exist() {
        let cmd = Args::command();
        let longs: Vec<&str> = cmd.get_arguments().filter_map(|a| a.get_long()).collect();
        for name in [
            "server",
            "protocol",
            "distribution",
            "connections",
            "threads",
            "pipeline",
            "rate",
            "duration",
            "warmup",
            "keys",
            "key-size",
            "value-size",
            "get-ratio",
            "key-dist",
            "prefill",
            "verify",
            "seed",
            "json",
            "hgrm-prefix",
            "plot",
            "sweep",
        ] {
            assert!(longs.contains(&name), "--{name} missing");
        }
        let shorts: Vec<char> = cmd.get_arguments().filter_map(|a| a.get_short()).collect();
        for c in ['s', 'c', 't', 'd'] {
            assert!(shorts.contains(&c), "-{c} missing");
        }
        cmd.debug_assert();
    }

    /// Every long flag is in the README's options table, and the table names no flag that does
    /// not exist.
    #[test]
    fn readme_options_table_matches_the_flags() {
        const README: &str = include_str!("../README.md");
        let start = README.find("## Options").expect("an Options section");
        let table = &README[start..];
        let table = &table[..table[3..].find("\n## ").map_or(table.len(), |e| e + 3)];
        let mut documented = std::collections::BTreeSet::new();
        for line in table.lines().filter(|l| l.starts_with("| `")) {
            let first = line.split('|').nth(1).unwrap_or_default();
            for word in first.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                if let Some(name) = word.strip_prefix("--") {
                    documented.insert(name.to_string());
                }
            }
        }
        let cmd = Args::command();
        let flags: std::collections::BTreeSet<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !matches!(*l, "help" | "version"))
            .map(str::to_string)
            .collect();
        assert!(flags.contains("idle") && flags.contains("timestamps"));
        let undocumented: Vec<_> = flags.difference(&documented).collect();
        let unknown: Vec<_> = documented.difference(&flags).collect();
        assert!(undocumented.is_empty(), "not in README: {undocumented:?}");
        assert!(unknown.is_empty(), "in README, not a flag: {unknown:?}");
    }

    #[test]
    fn arguments_become_a_config() {
        let args = Args::try_parse_from([
            "memspin-loadgen",
            "-s",
            "127.0.0.1:9999",
            "-s",
            "127.0.0.1:9998",
            "--protocol",
            "text",
            "-c",
            "8",
            "-t",
            "2",
            "--pipeline",
            "4",
            "--rate",
            "20k",
            "-d",
            "3",
            "--warmup",
            "0.5",
            "--keys",
            "1000",
            "--key-size",
            "10",
            "--value-size",
            "16-64",
            "--get-ratio",
            "0.5",
            "--key-dist",
            "zipf:0.99",
            "--prefill",
            "--verify",
            "--seed",
            "7",
            "--cpus",
            "0-1",
            "--idle",
            "sleep",
            "--timestamps",
            "hardware",
        ])
        .unwrap();
        let c = args.config().unwrap();
        assert_eq!(c.servers.len(), 2);
        assert_eq!(c.protocol, Protocol::Text);
        assert_eq!((c.connections, c.threads, c.pipeline), (8, 2, 4));
        assert_eq!(c.rate, Some(20_000.0));
        assert_eq!(c.duration, Duration::from_secs(3));
        assert_eq!(c.warmup, Duration::from_millis(500));
        assert_eq!(
            (c.keys, c.key_size, c.value_min, c.value_max),
            (1_000, 10, 16, 64)
        );
        assert_eq!(c.key_dist, KeyDist::Zipf(0.99));
        assert!(c.prefill && c.verify);
        assert_eq!(c.seed, 7);
        assert_eq!(c.cpus, Some(vec![0, 1]));
        assert_eq!((c.idle, c.timestamps), (Idle::Sleep, Timestamps::Hardware));
        assert_eq!(c.check(), Ok(()));
        // Defaults: busy-poll while requests are in flight, software timestamps.
        let d = Args::try_parse_from(["memspin-loadgen"])
            .unwrap()
            .config()
            .unwrap();
        assert_eq!((d.idle, d.timestamps), (Idle::Spin, Timestamps::Software));
        assert_eq!(
            d,
            Config {
                servers: d.servers.clone(),
                server_names: vec!["127.0.0.1:11211".into()],
                ..Config::default()
            }
        );
        let m = Args::try_parse_from([
            "memspin-loadgen",
            "--protocol",
            "meta",
            "--value-size",
            "100:4,1000:1",
            "--key-dist",
            "gaussian",
            "--multiget",
            "8",
            "--ttl",
            "30",
            "--delete-ratio",
            "0.05",
            "--get-ratio",
            "0.8",
            "--distribution",
            "ketama",
            "--interval",
            "250",
            "--label",
            "memspin",
        ])
        .unwrap()
        .config()
        .unwrap();
        assert_eq!(m.protocol, Protocol::Meta);
        assert_eq!((m.value_min, m.value_max), (100, 1_000));
        assert_eq!(m.value_weights, [(100, 4), (1_000, 1)]);
        assert_eq!(m.key_dist, KeyDist::Gaussian(None));
        assert_eq!((m.multiget, m.ttl, m.delete_ratio), (8, 30, 0.05));
        assert_eq!(m.distribution, Distribution::Ketama);
        assert_eq!(m.interval, Duration::from_millis(250));
        assert_eq!(m.label.as_deref(), Some("memspin"));
        assert_eq!(m.check(), Ok(()));
        let resp = Args::try_parse_from(["memspin-loadgen", "--protocol", "resp"]).unwrap();
        assert_eq!(resp.config().unwrap().protocol, Protocol::Resp);
        assert!(
            Args::try_parse_from(["memspin-loadgen", "--rate", "1k", "--search", "99:500"])
                .is_err()
        );
        let s = Args::try_parse_from(["memspin-loadgen", "--search", "p99.9:800"]).unwrap();
        assert_eq!(
            s.search.map(|s| (s.percentile, s.limit_us)),
            Some((99.9, 800.0))
        );
        let r = Args::try_parse_from([
            "memspin-loadgen",
            "report",
            "a.json",
            "b.json",
            "--html",
            "o.html",
        ])
        .unwrap();
        assert!(matches!(r.command, Some(Cmd::Report { ref results, .. }) if results.len() == 2));
        assert!(Args::try_parse_from(["memspin-loadgen", "report", "a.json"]).is_err());
        assert!(
            Args::try_parse_from(["memspin-loadgen", "--rate", "1k", "--sweep", "1k,2k"]).is_err()
        );
    }

    #[test]
    fn value_parsers() {
        assert_eq!(parse_rate("1.5M"), Ok(1_500_000.0));
        assert_eq!(parse_rate("250"), Ok(250.0));
        assert!(parse_rate("0").is_err() && parse_rate("fast").is_err());
        assert_eq!(
            parse_sweep("1k, 2k,5000"),
            Ok(RateList(vec![1_000.0, 2_000.0, 5_000.0]))
        );
        assert!(parse_sweep(",").is_err());
        assert_eq!(parse_value_size("32"), Ok((32, 32)));
        assert_eq!(parse_value_size("16-1024"), Ok((16, 1024)));
        assert!(parse_value_size("9-3").is_err() && parse_value_size("x").is_err());
        assert_eq!(parse_key_dist("uniform"), Ok(KeyDist::Uniform));
        assert_eq!(parse_key_dist("sequential"), Ok(KeyDist::Sequential));
        assert_eq!(
            parse_key_dist("gaussian:5000"),
            Ok(KeyDist::Gaussian(Some(5_000.0)))
        );
        assert!(parse_key_dist("gaussian:0").is_err() && parse_key_dist("normal").is_err());
        assert_eq!(parse_value_sizes("16-64"), Ok(ValueSizes::Range(16, 64)));
        assert_eq!(parse_value_sizes("8"), Ok(ValueSizes::Fixed(8)));
        assert!(parse_value_sizes("8:0").is_err() && parse_value_sizes("8:x").is_err());
        assert!(parse_key_dist("zipf:-1").is_err() && parse_key_dist("zipf").is_err());
        assert_eq!(parse_cpus("0,2-3"), Ok(CpuList(vec![0, 2, 3])));
        assert!(parse_cpus("3-1").is_err());
    }
}
