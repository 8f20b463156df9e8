//! The smoltcp worker loop, shared by the TAP and AF_XDP paths: [`run`] builds each worker's
//! connection table on its queue and serves it with [`serve_smoltcp`], whose connections take
//! their turns through [`super::turn`].
//!
//! ```text
//! loop {
//!     ingress (≤ INGRESS_BUDGET frames) → turns of connections with news, then of the again list
//!     → mesh: forwards out, other workers' requests and replies in (replies: send_delivered)
//!     → log watchers → egress → flush, or sleep (idle policy) on queue, mesh and timer
//! } until stop
//! ```

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use netstack::smoltcp::phy::Device;
use netstack::{Admission, Conn, ConnId, ConnTable, Poll, SleepTimer, TableConfig};

use super::mesh::Mesh;
use super::turn::{self, End};
use super::{Activity, IdleState, LoopClock, LoopMeter, Plan, Time, spawn, stopping};
use crate::cli::Idle;
use crate::conn::ClientConn;
use crate::engine::{Engine, Replies};
use crate::stats::RawPath;

/// Frames read per ingress step before the worker serves connections.
const INGRESS_BUDGET: usize = 64;
/// How often a packet path reads counters it must ask the kernel for (AF_XDP's
/// `XDP_STATISTICS`), for `stats`.
const COUNTER_REFRESH: Duration = Duration::from_millis(100);

/// A packet queue the smoltcp worker loop drives: a smoltcp [`Device`] that can also wait
/// for frames (the park policy) and push out frames it queued.
pub trait Queue: Device + netstack::RxPeek {
    /// Sends frames that transmit tokens queued but the device has not pushed yet; called
    /// after every egress step unless the worker goes to sleep: [`Queue::wait`] sends them
    /// then. Devices that write each frame at once do nothing.
    fn flush(&mut self) {}

    /// True if the last receive found the queue empty (the device looked and nothing was
    /// there, nor is anything buffered), so a worker with nothing else to do may sleep without
    /// polling once more. Devices that cannot tell say false.
    fn drained(&self) -> bool {
        false
    }

    /// Sends what [`Queue::flush`] would, then blocks until a frame may be readable or one of
    /// `wake` (the mesh's eventfd, the worker's [`SleepTimer`]; at most
    /// [`netstack::MAX_ALSO`]) is readable. There is no timeout: the timer ends the sleep.
    ///
    /// # Errors
    /// When waiting fails; the message names the device.
    fn wait(&mut self, wake: &[BorrowedFd<'_>]) -> Result<(), String>;

    /// The device's counters as one line, for the exit report.
    fn report(&mut self) -> String;

    /// The device's and `table`'s counters, for `stats` (a copy of plain integers, taken
    /// every loop iteration).
    fn raw_path(&self, table: &netstack::TableStats) -> RawPath;

    /// Refreshes counters that cost a system call to read (AF_XDP's `XDP_STATISTICS`); called
    /// every `COUNTER_REFRESH`.
    fn refresh_counters(&mut self) {}
}

/// Serves over one smoltcp queue per worker until the plan's stop flag is set: each worker
/// builds its connection table on its device (`table_config`, the connection limit in
/// `admission` and the record of gateways shared by all), serves it with [`serve_smoltcp`],
/// and reports its device with `describe`, its table and its idle policy. Calls `on_ready` once
/// every worker serves.
///
/// # Errors
/// When a table cannot be built on its device, or a worker fails.
pub fn run<D: Queue + Send>(
    plan: &Plan<'_>,
    devices: Vec<D>,
    table_config: TableConfig,
    admission: &Arc<Admission>,
    describe: impl Fn(&mut D) -> String + Sync,
    on_ready: impl FnOnce(),
) -> Result<(), String> {
    let resp_port = table_config.extra_port;
    let gateways = Arc::new(table_config.gateways());
    spawn(
        plan,
        devices,
        |mut device, engine, mesh, ready| {
            let mut table = ConnTable::<ClientConn>::with_shared(
                table_config,
                Arc::clone(admission),
                Arc::clone(&gateways),
                &mut device,
                netstack::smoltcp::time::Instant::now(),
            )
            .map_err(|e| e.to_string())?;
            ready();
            let served = serve_smoltcp(
                &mut device,
                &mut table,
                engine,
                mesh,
                plan.stop,
                plan.idle,
                resp_port,
            );
            let lines = vec![
                describe(&mut device),
                format!("connection table: {:?}", table.stats()),
                format!("gateways: {}", table.gateways()),
            ];
            served.map(|idle| [lines, idle].concat())
        },
        on_ready,
    )
}

/// Serves connections over a smoltcp `device` until `stop` is set: ingress, give every
/// connection with work its turn ([`turn::turn`]; a connection with work left is served again
/// on the next loop, after the others), exchange forwarded requests and replies with the other
/// workers, egress, flush; then, when the idle policy allows it (see [`idle`](super::idle)),
/// sleeps on the device, the mesh's wake-up descriptor and a [`SleepTimer`] kept armed across
/// sleeps (no timeout on the sleep itself), never past the
/// table's next timer (rounded up to whole milliseconds). Connections the table accepted on
/// `resp_port` speak RESP. Returns the idle policy's line for the exit report.
///
/// # Errors
/// When the device cannot wait.
pub fn serve_smoltcp<D: Queue>(
    device: &mut D,
    table: &mut ConnTable<ClientConn>,
    engine: &mut Engine,
    mesh: &mut Mesh,
    stop: &AtomicBool,
    idle: Idle,
    resp_port: Option<u16>,
) -> Result<Vec<String>, String> {
    let clock = LoopClock::new();
    let mut idle_state = IdleState::new(idle, clock.tick().at);
    let mut again = Again::default();
    let control = Arc::clone(engine.control());
    let worker = engine.config().worker;
    let mut meter = LoopMeter::new(Instant::now());
    let mut last_refresh = Instant::now();
    let mut timer = SleepTimer::new().map_err(|errno| {
        format!(
            "timerfd_create: {}",
            std::io::Error::from_raw_os_error(errno)
        )
    })?;
    while !stopping(stop) {
        let tick = clock.tick();
        timer.expired(tick.at);
        meter.tick(tick.at, engine.figures_mut());
        let t = Time {
            now: tick.now,
            ns: crate::control::monotonic_ns_at(tick.at),
        };
        let ingress = table.poll_ingress(tick.net, device, INGRESS_BUDGET);
        let mut served = table.serve(|conn| drive(conn, engine, t, &mut again, resp_port));
        served += again.serve_turns(|id, again| {
            table.with_conn(id, |conn| {
                conn.state.again = false;
                drive(conn, engine, t, again, resp_port)
            })
        });
        let mut meshed = mesh.send_forwards(engine);
        meshed |= mesh.receive(engine, t.now, |engine, replies| {
            deliver(table, engine, replies, &mut again)
        }) > 0;
        meshed |= mesh.send_forwards(engine);
        let mut watched = false;
        if control.kills.any() {
            // Connections another worker's `CLIENT KILL` named: closed in their own turn.
            control.kills.drain(worker, |token| {
                watched = true;
                table.with_conn(ConnId::unpack(token), |conn| {
                    conn.state.session.close();
                    drive(conn, engine, t, &mut again, resp_port);
                });
            });
        }
        if control.watchers.any() {
            control.watchers.drain(worker, |token, bytes| {
                watched = true;
                table
                    .with_conn(ConnId::unpack(token), |conn| {
                        let taken = conn.state.push_output(bytes);
                        drive(conn, engine, t, &mut again, resp_port);
                        taken
                    })
                    // A watcher that went away drops its lines.
                    .unwrap_or(bytes.len())
            });
        }
        let egress = table.poll_egress(tick.net, device);
        let progress = ingress == Poll::Progress
            || served > 0
            || meshed
            || watched
            || egress == Poll::Progress
            || again.pending()
            || engine.holds_refused();

        let stats = table.stats();
        let info = engine.info_mut();
        info.curr_connections = stats.active as u64;
        info.total_connections = stats.accepted;
        info.rejected_connections = stats.refused;
        info.recovery = stats.recovery;
        if tick.at.duration_since(last_refresh) >= COUNTER_REFRESH {
            last_refresh = tick.at;
            device.refresh_counters();
        }
        engine.set_raw_path(device.raw_path(stats));
        let progress = idle_state.maybe_sweep(engine, tick) || progress;
        meter.done(progress);

        // Work leaves nothing behind when the queue was found empty and no connection waits
        // for another turn; the gap to the next arrival starts when the work ended (a second
        // clock read, only in iterations that did work).
        let activity = if !progress {
            Activity::Idle
        } else if device.drained() && !again.pending() && !engine.holds_refused() {
            Activity::Drained
        } else {
            Activity::Worked
        };
        let ended = match activity {
            Activity::Idle => tick.at,
            Activity::Worked | Activity::Drained => Instant::now(),
        };
        // The egress step's frames go out now, or with the sleep (one system call for both
        // where the device can: AF_XDP's poll sends them).
        let mut slept = false;
        if let Some(park) = idle_state.after(activity, tick.at, ended) {
            let delay = table
                .poll_delay(tick.net)
                .map_or(park, |d| Duration::from_micros(d.total_micros()).min(park));
            if !delay.is_zero() && mesh.park() {
                // Whole milliseconds: a loss probe's deadline that the client's ACK cancels
                // meanwhile passes without waking the worker, where a timer to the microsecond
                // would wake it for a deadline that no longer exists (`parks` per request in
                // `stats workers` shows the difference under a steady request rate).
                let due = tick.at + whole_millis(delay);
                timer.cover(Instant::now(), due).map_err(|errno| {
                    format!(
                        "timerfd_settime: {}",
                        std::io::Error::from_raw_os_error(errno)
                    )
                })?;
                engine.figures_mut().parks += 1;
                let sampled = idle_state.sample_sleep();
                if sampled {
                    // The measured sleep is the sleep alone, not the sends AF_XDP's poll
                    // would make.
                    device.flush();
                }
                idle_state.measured_sleep(sampled, crate::sys::thread_cpu_time, || {
                    match mesh.wake_fd() {
                        Some(wake) => device.wait(&[wake, timer.fd()]),
                        None => device.wait(&[timer.fd()]),
                    }
                })?;
                slept = true;
            }
            mesh.unpark();
        }
        if !slept {
            device.flush();
        }
    }
    let (arms, fired) = timer.counts();
    Ok(vec![format!(
        "{}, sleep timer set {arms} times, fired {fired}",
        idle_state.report()
    )])
}

/// `d` rounded up to whole milliseconds.
fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX))
}

/// Connections to serve again on the next loop: their turn ended with work left (more
/// requests, or a full queue to another worker). Each is listed once (`ClientConn::again`).
#[derive(Debug, Default)]
struct Again {
    next: Vec<ConnId>,
    spare: Vec<ConnId>,
}

impl Again {
    /// Lists the connection of `client` for another turn, unless it is listed already.
    fn push(&mut self, id: ConnId, client: &mut ClientConn) {
        if !client.again {
            client.again = true;
            self.next.push(id);
        }
    }

    /// Gives each listed connection its turn through `serve` (which clears its flag; it may list
    /// it again); returns how many were still open.
    fn serve_turns(&mut self, mut serve: impl FnMut(ConnId, &mut Again) -> Option<()>) -> usize {
        let mut list = std::mem::replace(&mut self.next, std::mem::take(&mut self.spare));
        let mut served = 0;
        for &id in &list {
            served += usize::from(serve(id, self).is_some());
        }
        list.clear();
        self.spare = list;
        served
    }

    /// True when connections wait for another turn (do not park).
    fn pending(&self) -> bool {
        !self.next.is_empty()
    }
}

/// Puts other workers' replies into their connections and sends them
/// ([`turn::send_delivered`]); each connection is then listed for its next turn.
fn deliver(
    table: &mut ConnTable<ClientConn>,
    engine: &mut Engine,
    replies: &Replies,
    again: &mut Again,
) {
    for index in 0..replies.len() {
        let Some(token) = replies.token(index) else {
            continue;
        };
        let last_for_conn = replies.token(index + 1) != Some(token);
        table.with_conn(ConnId::unpack(token), |conn| {
            if let Some(delivery) = replies.get(index) {
                conn.state.deliver(engine, delivery);
            }
            if last_for_conn {
                let end = turn::send_delivered(&mut conn.io, conn.state, engine);
                finish(conn, end, again);
            }
        });
    }
}

/// Gives one connection its turn ([`turn::turn`]) and acts on how it ended.
fn drive(
    conn: &mut Conn<'_, ClientConn>,
    engine: &mut Engine,
    time: Time,
    again: &mut Again,
    resp_port: Option<u16>,
) {
    let token = conn.id().pack();
    let end = turn::turn(&mut conn.io, conn.state, engine, token, time, resp_port);
    finish(conn, end, again);
}

/// What a smoltcp connection does after its turn: pending output asks the table to tell it
/// when send space opens; work left lists it in `again`; a finished one closes, a failed one
/// is aborted.
fn finish(conn: &mut Conn<'_, ClientConn>, end: End, again: &mut Again) {
    match end {
        End::Wait | End::Again => {
            if !conn.state.pending_output().is_empty() {
                conn.io.want_write();
            }
            if end == End::Again {
                again.push(conn.id(), conn.state);
            }
        }
        End::Close => conn.io.close(),
        End::Failed => conn.io.abort(),
    }
}
