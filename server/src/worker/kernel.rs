//! The kernel-socket path (`--net kernel`): the same engine on ordinary TCP sockets.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

use netstack::kernel::{KernelConn, KernelTable};

use super::{IdleState, LoopClock, report_final, stopping};
use crate::cli::Idle;
use crate::conn::ClientConn;
use crate::engine::Engine;

/// Serves `addr` on kernel sockets until `stop` is set. Prints the `ready` line once listening.
///
/// # Errors
/// When the address cannot be bound, or epoll fails.
pub fn run(
    addr: SocketAddr,
    conn_limit: usize,
    idle: Idle,
    mut engine: Engine,
    stop: &AtomicBool,
    on_ready: impl FnOnce(SocketAddr),
) -> io::Result<()> {
    let mut table = KernelTable::<ClientConn>::bind(addr, conn_limit)?;
    on_ready(table.local_addr()?);
    let mut idle_state = IdleState::new(idle);
    let clock = LoopClock::new();
    let mut block = None;
    while !stopping(stop) {
        let timeout = if table.has_ready() { None } else { block };
        let polled = table.poll(timeout)?;
        let tick = clock.tick();
        let now = tick.unix_secs;
        let mut progress = matches!(polled, netstack::Poll::Progress) || table.has_ready();
        table.serve(|conn| {
            progress = true;
            drive(conn, &mut engine, now);
        });
        let stats = table.stats();
        let info = engine.info_mut();
        info.curr_connections = stats.active;
        info.total_connections = stats.accepted;
        info.rejected_connections = stats.refused;
        idle_state.maybe_sweep(&mut engine, tick);
        block = idle_state.after_iteration(progress, tick.at);
    }
    report_final(&engine);
    Ok(())
}

/// Reads, executes and writes for one ready connection until the socket would block.
fn drive(conn: &mut KernelConn<'_, ClientConn>, engine: &mut Engine, now: u64) {
    let (client, stream) = conn.parts();
    let result = (|| -> io::Result<Drive> {
        use std::io::{Read, Write};
        loop {
            while !client.pending_output().is_empty() {
                match stream.write(client.pending_output()) {
                    Ok(n) => client.sent(n),
                    // The writable edge serves this connection again.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if client.finished() {
                return Ok(Drive::Close);
            }
            if !client.may_execute() {
                return Ok(Drive::Wait);
            }
            if !client.input.is_empty() {
                let before = client.input.len();
                let outcome = client.execute_buffered(engine, now);
                if outcome.consumed > 0 || client.input.len() != before || outcome.close {
                    continue;
                }
            }
            let spare = client.input.spare(client.needed.max(1));
            match stream.read(spare) {
                Ok(0) => return Ok(Drive::Close),
                Ok(n) => client.input.filled(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Drive::Wait),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    })();
    // `Wait` always follows a read or a write that would block, so epoll's next edge (readable
    // or writable) serves this connection again.
    match result {
        Ok(Drive::Wait) => {}
        Ok(Drive::Close) | Err(_) => conn.close(),
    }
}

enum Drive {
    Wait,
    Close,
}
