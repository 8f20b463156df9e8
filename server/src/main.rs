//! `memspin`: parses the command line, starts the workers and reports how they ended.

#![deny(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use netstack::xdp::{BusyPoll, ModeChoice};
use server::cli::{Args, Idle, LinkAddrs, Net, XdpBusyPoll, XdpMode};
use server::control::{Control, Settings};
use server::engine::EngineConfig;
use server::logging;
use server::worker::kernel::KernelConfig;
use server::worker::tap::TapConfig;
use server::worker::xdp::XdpWorkerConfig;
use server::worker::{self, Plan};

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("memspin: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    args.check_net_flags()?;
    logging::init(args.verbose);
    let stop = worker::stop_on_signals()?;
    let workers = usize::from(args.threads);
    let cpus = worker::cpus_for(workers, args.cpus.as_ref().map(|c| c.0.as_slice()))?;
    let memory = args.memory_limit_mb.saturating_mul(1 << 20);
    let control = Control::new(
        Settings {
            memory_limit_bytes: memory as u64,
            tcp_port: args.port,
            resp_port: args.resp_port,
            // memcached's `inter`: one address, the IPv4 one when memspin serves both
            // (`stats settings` lists each family's under memspin_ipv4 and memspin_ipv6).
            interface: match args.net {
                Net::Kernel => args.listen.to_string(),
                Net::Tap | Net::Xdp => args
                    .link_addrs()?
                    .served()
                    .next()
                    .map_or_else(String::new, |cidr| cidr.addr.to_string()),
            },
            no_evictions: args.disable_evictions,
            shutdown_enabled: args.enable_shutdown,
            idle_timeout_secs: args.idle_timeout_secs,
            net: match args.net {
                Net::Tap => "tap",
                Net::Xdp => "xdp",
                Net::Kernel => "kernel",
            },
            idle: match args.idle_policy() {
                Idle::Spin => "spin",
                Idle::Park => "park",
                Idle::Adaptive => "adaptive",
            },
            cpus: cpus.clone(),
            rto_min: match args.net {
                Net::Kernel => None,
                Net::Tap | Net::Xdp => Some(args.rto_min.to_string()),
            },
        },
        args.verbose,
    );
    control.set_stop(Arc::clone(&stop));
    log::info!(
        "starting: net {}, {workers} worker(s) on CPUs {cpus:?}, -m {} MB, -I {}, -c {}, evictions {}, shutdown command {}",
        control.settings.net,
        args.memory_limit_mb,
        args.max_item_size,
        args.conn_limit,
        if args.disable_evictions { "off" } else { "on" },
        if args.enable_shutdown { "on" } else { "off" },
    );
    let plan = Plan {
        engine: EngineConfig {
            started_unix_secs: worker::unix_now(),
            threads: workers,
            conn_limit: args.conn_limit,
            databases: args.databases,
            requirepass: args
                .requirepass
                .as_ref()
                .map(|p| server::engine::Secret(p.as_bytes().into())),
            ..EngineConfig::new(
                store::ShardConfig {
                    memory_limit_bytes: memory / workers,
                    max_item_size: args.max_item_size,
                },
                control,
            )
        },
        cpus,
        stop: &stop,
        idle: args.idle_policy(),
    };
    if let Some(resp_port) = args.resp_port {
        if resp_port == args.port && resp_port != 0 {
            return Err(format!(
                "--resp-port {resp_port} is the memcached port (-p); give it another"
            ));
        }
        if resp_port == 0 && args.net != Net::Kernel {
            return Err("--resp-port 0 (any free port) needs --net kernel".to_string());
        }
    }
    let resp_on = |addr: &dyn std::fmt::Display| match args.resp_port {
        Some(_) => format!(", RESP on {addr}"),
        None => String::new(),
    };
    let placement = {
        let list: Vec<String> = plan.cpus.iter().map(ToString::to_string).collect();
        let noun = if workers == 1 { "worker" } else { "workers" };
        let cpu_noun = if workers == 1 { "CPU" } else { "CPUs" };
        format!("{workers} {noun} on {cpu_noun} {}", list.join(","))
    };
    match args.net {
        Net::Kernel => {
            worker::raise_fd_limit(args.conn_limit + 16 * workers)?;
            let addr = SocketAddr::new(args.listen, args.port);
            let config = KernelConfig {
                addr,
                resp_addr: args
                    .resp_port
                    .map(|port| SocketAddr::new(args.listen, port)),
                conn_limit: args.conn_limit,
                idle_timeout: args.idle_timeout(),
            };
            worker::kernel::run(&config, &plan, |bound, resp_bound| {
                let resp = resp_bound.map_or(String::new(), |a| resp_on(&a));
                println!(
                    "memspin ready: net kernel, listening on {bound}{resp}, {placement}, idle {:?}",
                    args.idle_policy()
                );
            })
            .map_err(|e| format!("kernel sockets on {addr}: {e}"))
        }
        Net::Tap => {
            let addrs = args.link_addrs()?;
            let config = TapConfig {
                iface: args.iface.clone(),
                addrs,
                port: args.port,
                resp_port: args.resp_port,
                conn_limit: args.conn_limit,
                idle_timeout: args.idle_timeout(),
                rto_min: args.rto_min.0,
            };
            worker::tap::run(&config, &plan, || {
                let queues = if workers == 1 {
                    "1 queue".to_string()
                } else {
                    format!("{workers} queues")
                };
                let resp = resp_on(&listening(&addrs, args.resp_port.unwrap_or(0)));
                println!(
                    "memspin ready: net tap, device {} ({queues}), listening on {}{resp}{}, {placement}, idle {:?}, rto-min {}",
                    args.iface,
                    listening(&addrs, args.port),
                    routes(&addrs),
                    args.idle_policy(),
                    args.rto_min
                );
            })
            .map_err(|e| format!("tap {}: {e}", args.iface))
        }
        Net::Xdp => {
            let addrs = args.link_addrs()?;
            let config = XdpWorkerConfig {
                iface: args.iface.clone(),
                mode: match args.xdp_mode {
                    XdpMode::Auto => ModeChoice::Auto,
                    XdpMode::Native => ModeChoice::Native,
                    XdpMode::Generic => ModeChoice::Generic,
                },
                addrs,
                port: args.port,
                resp_port: args.resp_port,
                conn_limit: args.conn_limit,
                idle_timeout: args.idle_timeout(),
                rto_min: args.rto_min.0,
                busy_poll: match args.xdp_busy_poll {
                    XdpBusyPoll::Off => None,
                    XdpBusyPoll::On => Some(BusyPoll {
                        budget: args.xdp_busy_poll_budget,
                    }),
                },
            };
            worker::xdp::run(&config, &plan, |ready| {
                let replaced = ready.replaced.map_or(String::new(), |stale| {
                    format!(
                        ", replaced a stale memspin program (id {}, {} mode)",
                        stale.prog_id,
                        stale.mode.as_str()
                    )
                });
                let mac = ready.mac.map(|b| format!("{b:02x}")).join(":");
                let queues = if workers == 1 {
                    "queue 0".to_string()
                } else {
                    format!("queues 0-{}", workers - 1)
                };
                let resp = resp_on(&listening(&addrs, args.resp_port.unwrap_or(0)));
                println!(
                    "memspin ready: net xdp, interface {} {queues}, {}, program id {}{replaced}, \
                     listening on {} (MAC {mac}){resp}{}, {placement}, idle {:?}, rto-min {}",
                    args.iface,
                    ready.modes(),
                    ready.prog_id,
                    listening(&addrs, args.port),
                    routes(&addrs),
                    args.idle_policy(),
                    args.rto_min
                );
            })
            .map_err(|e| format!("xdp {}: {e}", args.iface))
        }
    }
}

/// Where a bypass path listens, for the ready line: `10.77.0.2:11211 and [fd77::2]:11211`.
fn listening(addrs: &LinkAddrs, port: u16) -> String {
    let served: Vec<String> = addrs
        .served()
        .map(|cidr| SocketAddr::new(cidr.addr, port).to_string())
        .collect();
    served.join(" and ")
}

/// The gateways, for the ready line: `, gateway 10.77.0.1` (nothing without one).
fn routes(addrs: &LinkAddrs) -> String {
    let gateways: Vec<String> = addrs.gateways().map(|g| g.to_string()).collect();
    match gateways.len() {
        0 => String::new(),
        1 => format!(", gateway {}", gateways[0]),
        _ => format!(", gateways {}", gateways.join(" and ")),
    }
}
