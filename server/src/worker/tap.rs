//! The TAP path (`--net tap`): frames from a TAP queue through this core's smoltcp interface
//! and connection table into the engine, parsed in place from each socket's receive buffer.

use std::sync::atomic::AtomicBool;

use netstack::link::{self, LinkConfig};
use netstack::smoltcp::time::Instant;
use netstack::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use netstack::{Conn, ConnTable, Poll, TableConfig, TapDevice};

use super::{IdleState, report_final, stopping, unix_now};
use crate::cli::{Cidr, Idle};
use crate::conn::ClientConn;
use crate::engine::Engine;

/// Frames read per ingress step before the worker serves connections.
const INGRESS_BUDGET: usize = 64;

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
    /// Most concurrent connections.
    pub conn_limit: usize,
    /// Idle policy.
    pub idle: Idle,
}

/// A locally administered unicast MAC derived from the server's address, so a restart keeps
/// the same MAC and the kernel's neighbour entry stays valid.
pub fn mac_for(ip: Cidr) -> [u8; 6] {
    let [a, b, c, d] = ip.addr.octets();
    [0x02, 0x6d, a, b, c, d]
}

fn cidr(c: Cidr) -> Ipv4Cidr {
    let [a, b, c4, d] = c.addr.octets();
    Ipv4Cidr::new(Ipv4Address::new(a, b, c4, d), c.prefix_len)
}

/// Serves over the TAP device until `stop` is set; calls `on_ready` once the link is up.
///
/// # Errors
/// When the device cannot be opened or configured, or the table cannot be built.
pub fn run(
    config: &TapConfig,
    mut engine: Engine,
    stop: &AtomicBool,
    on_ready: impl FnOnce(),
) -> Result<(), String> {
    let mut device = TapDevice::open(&config.iface, false).map_err(|e| e.to_string())?;
    link::configure(
        &config.iface,
        &LinkConfig {
            host_ip: config.host_ip.map(cidr),
            mtu: None,
        },
    )
    .map_err(|e| e.to_string())?;
    let mut table_config = TableConfig::new(mac_for(config.ip), cidr(config.ip), config.port);
    table_config.conn_limit = config.conn_limit;
    let mut table = ConnTable::<ClientConn>::new(table_config, &mut device, Instant::now())
        .map_err(|e| e.to_string())?;
    on_ready();

    let mut idle_state = IdleState::new(config.idle);
    while !stopping(stop) {
        let now = Instant::now();
        let unix = unix_now();
        let ingress = table.poll_ingress(now, &mut device, INGRESS_BUDGET);
        let served = table.serve(|conn| drive(conn, &mut engine, unix));
        let egress = table.poll_egress(now, &mut device);
        let progress = ingress == Poll::Progress || served > 0 || egress == Poll::Progress;

        let stats = table.stats();
        let info = engine.info_mut();
        info.curr_connections = stats.active as u64;
        info.total_connections = stats.accepted;
        info.rejected_connections = stats.refused;
        idle_state.maybe_sweep(&mut engine, unix);

        if let Some(park) = idle_state.after_iteration(progress) {
            let delay = table.poll_delay(Instant::now()).map_or(park, |d| {
                std::time::Duration::from_micros(d.total_micros()).min(park)
            });
            if !delay.is_zero() {
                device.wait(Some(delay)).map_err(|e| e.to_string())?;
            }
        }
    }
    let tx = device.stats();
    eprintln!("memspin: tap {} device counters: {tx:?}", config.iface);
    eprintln!("memspin: connection table: {:?}", table.stats());
    report_final(&engine);
    Ok(())
}

/// Moves one connection's bytes: replies out first, then frames in — parsed in place from the
/// socket's receive buffer, or assembled in the connection's input buffer when a frame is split
/// across the ring's end or larger than the ring.
fn drive(conn: &mut Conn<'_, ClientConn>, engine: &mut Engine, now: u64) {
    let client = &mut *conn.state;
    let io = &mut conn.io;
    loop {
        while !client.pending_output().is_empty() {
            match io.send_slice(client.pending_output()) {
                Ok(0) => break,
                Ok(n) => client.sent(n),
                Err(_) => {
                    io.abort();
                    return;
                }
            }
        }
        if client.finished() {
            io.close();
            return;
        }
        if !client.may_execute() {
            // Backlog or closing with replies still queued: wait for send space.
            io.want_write();
            return;
        }
        let queued = io.recv_queue();
        if queued == 0 {
            if !io.may_recv() {
                // The peer closed its side and everything it sent was executed.
                client.session.close();
                continue;
            }
            if !client.pending_output().is_empty() {
                io.want_write();
            }
            return;
        }
        if client.input.is_empty() {
            let moved = io.recv(|buf| {
                let outcome = client.execute_in_place(engine, buf, now);
                if outcome.consumed < buf.len() && !outcome.close && client.may_execute() {
                    // The next frame is incomplete in this contiguous slice: assemble it.
                    client.input.extend(&buf[outcome.consumed..]);
                    (buf.len(), ())
                } else {
                    (outcome.consumed, ())
                }
            });
            if moved.is_err() {
                io.abort();
                return;
            }
        } else {
            // Top up exactly what the pending frame needs, so the connection returns to
            // in-place parsing as soon as the frame is complete.
            let want = client.needed.max(1).min(queued);
            let spare = client.input.spare(want);
            match io.recv_slice(&mut spare[..want]) {
                Ok(n) => client.input.filled(n),
                Err(_) => {
                    io.abort();
                    return;
                }
            }
            client.execute_buffered(engine, now);
        }
    }
}
