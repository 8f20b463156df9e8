//! The kernel-socket path (`--net kernel`): the same engine on ordinary TCP sockets, one
//! SO_REUSEPORT listener (and one more for `--resp-port`) and epoll set per worker (the kernel
//! spreads connections over them), and the same cross-core forwarding as the other paths.
//! Each ready connection takes the same turn as on the smoltcp paths ([`turn::turn`] over a
//! [`KernelSocket`]); epoll's edges and `serve_again` bring it back.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use netstack::Admission;
use netstack::kernel::{KernelConn, KernelConnId, KernelTable};

use super::mesh::Mesh;
use super::turn::{self, End, KernelSocket};
use super::{IdleState, LoopClock, LoopMeter, Plan, Time, spawn, stopping};
use crate::conn::ClientConn;
use crate::engine::{Engine, Replies};
use crate::stats::RawPath;

/// Where and how the kernel-socket workers serve.
#[derive(Debug, Clone, Copy)]
pub struct KernelConfig {
    /// The memcached listener's address (port 0: any free port).
    pub addr: SocketAddr,
    /// The RESP listener's address, if Redis clients are served (port 0: any free port).
    pub resp_addr: Option<SocketAddr>,
    /// Most concurrent connections, over all workers and both listeners.
    pub conn_limit: usize,
    /// Close connections idle this long (`--idle-timeout`); `None`: never.
    pub idle_timeout: Option<Duration>,
}

/// Serves on kernel sockets until the plan's stop flag is set, one listener (two with a RESP
/// address) per worker, at most `conn_limit` connections over all of them, closing
/// connections idle for `idle_timeout`; calls `on_ready` with the bound addresses (memcached's,
/// RESP's) once every worker serves.
///
/// # Errors
/// When an address cannot be bound, or a worker fails (epoll).
pub fn run(
    config: &KernelConfig,
    plan: &Plan<'_>,
    on_ready: impl FnOnce(SocketAddr, Option<SocketAddr>),
) -> Result<(), String> {
    let KernelConfig {
        addr,
        resp_addr,
        conn_limit,
        idle_timeout,
    } = *config;
    let workers = plan.workers();
    let admission = Arc::new(Admission::new(conn_limit));
    let bind = |addr| {
        let mut table = KernelTable::<ClientConn>::bind(addr, Arc::clone(&admission))
            .map_err(|e| e.to_string())?;
        table.set_idle_timeout(idle_timeout);
        Ok::<_, String>(table)
    };
    let mut first = bind(addr)?;
    // With port 0 the first bind picks the port; the others share it.
    let bound = first.local_addr().map_err(|e| e.to_string())?;
    let resp_bound = match resp_addr {
        Some(resp_addr) => Some(
            first
                .listen_also(resp_addr)
                .map_err(|e| format!("RESP on {resp_addr}: {e}"))?,
        ),
        None => None,
    };
    let mut tables = vec![first];
    for _ in 1..workers {
        let mut table = bind(bound)?;
        if let Some(resp_bound) = resp_bound {
            table
                .listen_also(resp_bound)
                .map_err(|e| format!("RESP on {resp_bound}: {e}"))?;
        }
        tables.push(table);
    }
    let resp_port = resp_bound.map(|addr| addr.port());
    plan.engine.control.set_bound_ports(bound.port(), resp_port);
    spawn(
        plan,
        tables,
        |mut table, engine, mesh, ready| {
            if let Some(wake) = mesh.wake_fd() {
                use std::os::fd::AsRawFd;
                table
                    .watch(wake.as_raw_fd())
                    .map_err(|e| format!("epoll: {e}"))?;
            }
            ready();
            serve(&mut table, engine, mesh, plan, resp_port).map_err(|e| format!("epoll: {e}"))?;
            Ok(vec![format!("kernel sockets: {:?}", table.stats())])
        },
        || on_ready(bound, resp_bound),
    )
}

/// One worker's loop until the stop flag: epoll (blocking only when the idle policy allows
/// it), idle expiry, a turn for each ready connection, the mesh, log watchers, figures.
fn serve(
    table: &mut KernelTable<ClientConn>,
    engine: &mut Engine,
    mesh: &mut Mesh,
    plan: &Plan<'_>,
    resp_port: Option<u16>,
) -> io::Result<()> {
    let clock = LoopClock::new();
    let mut idle_state = IdleState::new(plan.idle, clock.tick().at);
    let mut block = None;
    let control = Arc::clone(engine.control());
    let worker = engine.config().worker;
    let mut meter = LoopMeter::new(std::time::Instant::now());
    while !stopping(plan.stop) {
        // Block only when the idle policy allows it, nothing is queued, and no other worker
        // sent work while this one was deciding to sleep.
        let timeout = match block {
            Some(wait) if !table.has_ready() && mesh.park() => Some(wait),
            _ => None,
        };
        if timeout.is_some() {
            engine.figures_mut().parks += 1;
        }
        let polled = table.poll(timeout)?;
        mesh.unpark();
        let tick = clock.tick();
        meter.tick(tick.at, engine.figures_mut());
        table.expire_idle(tick.at);
        let t = Time {
            now: tick.now,
            ns: crate::control::monotonic_ns_at(tick.at),
        };
        let mut progress = matches!(polled, netstack::Poll::Progress) || table.has_ready();
        table.serve(|conn| {
            progress = true;
            drive(conn, engine, t, resp_port);
        });
        progress |= mesh.send_forwards(engine);
        progress |= mesh.receive(engine, t.now, |engine, replies| {
            deliver(table, engine, replies)
        }) > 0;
        progress |= mesh.send_forwards(engine);
        progress |= engine.holds_refused();
        if control.kills.any() {
            // Connections another worker's `CLIENT KILL` named: closed in their own turn.
            control.kills.drain(worker, |token| {
                progress = true;
                table.with_conn(KernelConnId::unpack(token), |conn| {
                    conn.state.session.close();
                    drive(conn, engine, t, resp_port);
                });
            });
        }
        if control.watchers.any() {
            control.watchers.drain(worker, |token, bytes| {
                progress = true;
                table
                    .with_conn(KernelConnId::unpack(token), |conn| {
                        let taken = conn.state.push_output(bytes);
                        drive(conn, engine, t, resp_port);
                        taken
                    })
                    // A watcher that went away drops its lines.
                    .unwrap_or(bytes.len())
            });
        }
        let stats = *table.stats();
        let info = engine.info_mut();
        info.curr_connections = stats.active;
        info.total_connections = stats.accepted;
        info.rejected_connections = stats.refused;
        engine.set_raw_path(RawPath::Kernel(stats));
        progress |= idle_state.maybe_sweep(engine, tick);
        meter.done(progress);
        // The gap to the next arrival starts when the work ended (a second clock read, only
        // in iterations that did work).
        let ended = if progress {
            std::time::Instant::now()
        } else {
            tick.at
        };
        block = idle_state.after_iteration(progress, tick.at, ended);
    }
    Ok(())
}

/// Puts other workers' replies into their connections and sends them
/// ([`turn::send_delivered`]); what a connection held back meanwhile runs in its next turn in
/// [`KernelTable::serve`].
fn deliver(table: &mut KernelTable<ClientConn>, engine: &mut Engine, replies: &Replies) {
    for index in 0..replies.len() {
        let Some(token) = replies.token(index) else {
            continue;
        };
        let last_for_conn = replies.token(index + 1) != Some(token);
        table.with_conn(KernelConnId::unpack(token), |conn| {
            if let Some(delivery) = replies.get(index) {
                conn.state.deliver(engine, delivery);
            }
            if last_for_conn {
                let local_port = conn.local_port();
                let (client, stream) = conn.parts();
                let mut socket = KernelSocket { stream, local_port };
                let end = turn::send_delivered(&mut socket, client, engine);
                finish(conn, end);
            }
        });
    }
}

/// Gives one ready connection its turn ([`turn::turn`]) and acts on how it ended.
fn drive(
    conn: &mut KernelConn<'_, ClientConn>,
    engine: &mut Engine,
    time: Time,
    resp_port: Option<u16>,
) {
    let token = conn.id().pack();
    let local_port = conn.local_port();
    let (client, stream) = conn.parts();
    let mut socket = KernelSocket { stream, local_port };
    let end = turn::turn(&mut socket, client, engine, token, time, resp_port);
    finish(conn, end);
}

/// What a kernel connection does after its turn: `Wait` follows a read or a write that would
/// block, so epoll's next edge (readable or writable) serves it again, or it waits on replies
/// from other workers, whose delivery serves it again; work left has the table serve it again
/// on its next pass, after the others.
fn finish(conn: &mut KernelConn<'_, ClientConn>, end: End) {
    match end {
        End::Wait => {}
        End::Again => conn.serve_again(),
        End::Close | End::Failed => conn.close(),
    }
}
