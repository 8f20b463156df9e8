//! `memspin`: parses the command line, starts the worker and reports how it ended.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;

use netstack::xdp::ModeChoice;
use server::cli::{Args, HostIp, Net, XdpMode};
use server::engine::{Engine, EngineConfig, VERSION};
use server::worker;
use server::worker::tap::TapConfig;
use server::worker::xdp::XdpWorkerConfig;

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
    let stop = worker::stop_on_signals().map_err(|e| format!("installing signal handlers: {e}"))?;
    let cpu = worker::pin(args.cpus.as_ref().and_then(|c| c.0.first().copied()))?;
    let engine = Engine::new(EngineConfig {
        shard: store::ShardConfig {
            memory_limit_bytes: args.memory_limit_mb.saturating_mul(1 << 20),
            max_item_size: args.max_item_size,
        },
        version: VERSION,
        started_unix_secs: worker::unix_now(),
        threads: 1,
        conn_limit: args.conn_limit,
    });
    match args.net {
        Net::Kernel => {
            worker::raise_fd_limit(args.conn_limit)?;
            let addr = SocketAddr::new(args.listen, args.port);
            worker::kernel::run(addr, args.conn_limit, args.idle, engine, &stop, |bound| {
                println!(
                    "memspin ready: net kernel, listening on {bound}, 1 worker on CPU {cpu}, idle {:?}",
                    args.idle
                );
            })
            .map_err(|e| format!("kernel sockets on {addr}: {e}"))
        }
        Net::Tap => {
            let config = TapConfig {
                iface: args.iface.clone(),
                ip: args.ip,
                host_ip: match args.host_ip {
                    HostIp::None => None,
                    HostIp::Addr(cidr) => Some(cidr),
                },
                port: args.port,
                conn_limit: args.conn_limit,
                idle: args.idle,
            };
            worker::tap::run(&config, engine, &stop, || {
                println!(
                    "memspin ready: net tap, device {}, listening on {}:{}, 1 worker on CPU {cpu}, idle {:?}",
                    args.iface, args.ip.addr, args.port, args.idle
                );
            })
            .map_err(|e| format!("tap {}: {e}", args.iface))
        }
        Net::Xdp => {
            let config = XdpWorkerConfig {
                iface: args.iface.clone(),
                queue: 0,
                mode: match args.xdp_mode {
                    XdpMode::Auto => ModeChoice::Auto,
                    XdpMode::Native => ModeChoice::Native,
                    XdpMode::Generic => ModeChoice::Generic,
                },
                ip: args.ip,
                port: args.port,
                conn_limit: args.conn_limit,
                idle: args.idle,
            };
            worker::xdp::run(&config, engine, &stop, |ready| {
                let replaced = ready.replaced.map_or(String::new(), |stale| {
                    format!(
                        ", replaced a stale memspin program (id {}, {} mode)",
                        stale.prog_id,
                        stale.mode.as_str()
                    )
                });
                let mac = ready.mac.map(|b| format!("{b:02x}")).join(":");
                println!(
                    "memspin ready: net xdp, interface {} queue 0, {} mode, {} mode, program id {}{replaced}, \
                     listening on {}:{} (MAC {mac}), 1 worker on CPU {cpu}, idle {:?}",
                    args.iface,
                    ready.mode.as_str(),
                    if ready.zero_copy { "zero-copy" } else { "copy" },
                    ready.prog_id,
                    args.ip.addr,
                    args.port,
                    args.idle
                );
            })
            .map_err(|e| format!("xdp {}: {e}", args.iface))
        }
    }
}
