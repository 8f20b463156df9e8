//! Worker cores: each owns a packet path's queue, its connections and an engine (with its
//! store shard), and busy-polls them.
//!
//! ```text
//! worker i (pinned core): loop {
//!     poll queue i → serve ready connections → engine (keys of shard i here; others forwarded)
//!     → mesh: send forwarded batches, execute other workers' requests, deliver their replies
//!     → send
//! } until stop
//! ```
//!
//! Starting the workers, signals, the doorbell, the stop grace, pinning and the open-file
//! limit live in `supervise` ([`spawn`]).

#[cfg(debug_assertions)]
pub mod failpoint;
pub mod idle;
pub mod kernel;
pub mod mesh;
mod supervise;
pub mod tap;
pub mod xdp;

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use netstack::smoltcp::phy::Device;
use netstack::{Conn, ConnId, ConnTable, Poll, SleepTimer};

use store::Now;

use crate::cli::Idle;
use crate::conn::ClientConn;
use crate::control::CloseReason;
use crate::engine::{Engine, Replies, Stop, TURN_REQUESTS};
use crate::stats::{RawPath, WorkerFigures};
pub use idle::{Activity, IdleState, PARK_MAX, SPIN_BUDGET};
use mesh::Mesh;
pub use supervise::{
    Plan, STOP_GRACE, WorkerResult, cpus_for, pin, raise_fd_limit, report_final, spawn,
    stop_on_signals, stopping,
};

/// Frames read per ingress step before the worker serves connections.
const INGRESS_BUDGET: usize = 64;
/// How often a packet path reads counters it must ask the kernel for (AF_XDP's
/// `XDP_STATISTICS`), for `stats`.
const COUNTER_REFRESH: Duration = Duration::from_millis(100);

/// Unix time in whole seconds: the engine's clock.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A worker's clock, read once per loop iteration: a clock read costs as much as a small
/// request, so the engine's time, smoltcp's timestamps and the idle policy share one read.
#[derive(Debug, Clone, Copy)]
pub struct LoopClock {
    start: Instant,
    start_unix_micros: u64,
}

/// One reading of a [`LoopClock`].
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    /// Monotonic time.
    pub at: Instant,
    /// Unix time to the millisecond (the start's wall-clock time plus monotonic time since),
    /// for the engine.
    pub now: Now,
    /// The same instant as smoltcp counts it (microseconds since the unix epoch).
    pub net: netstack::smoltcp::time::Instant,
}

impl LoopClock {
    /// A clock anchored to the wall clock now.
    pub fn new() -> LoopClock {
        let start_unix_micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        LoopClock {
            start: Instant::now(),
            start_unix_micros,
        }
    }

    /// Reads the clock once.
    pub fn tick(&self) -> Tick {
        let at = Instant::now();
        let micros = self.start_unix_micros + at.duration_since(self.start).as_micros() as u64;
        Tick {
            at,
            now: Now::from_millis(micros / 1000),
            net: netstack::smoltcp::time::Instant::from_micros(micros as i64),
        }
    }
}

impl Default for LoopClock {
    fn default() -> Self {
        LoopClock::new()
    }
}

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
    /// every [`COUNTER_REFRESH`].
    fn refresh_counters(&mut self) {}
}

/// What a worker's loop counts for `stats workers`: each iteration's time goes to busy or idle
/// by whether it found work (a parked wait counts as idle).
#[derive(Debug)]
pub struct LoopMeter {
    last: Instant,
    progress: bool,
}

impl LoopMeter {
    /// A meter whose first iteration starts at `at`.
    pub fn new(at: Instant) -> LoopMeter {
        LoopMeter {
            last: at,
            progress: false,
        }
    }

    /// An iteration starts at `at`: the previous one (from the last call) is counted.
    pub fn tick(&mut self, at: Instant, figures: &mut WorkerFigures) {
        let ns = at.saturating_duration_since(self.last).as_nanos() as u64;
        self.last = at;
        figures.polls += 1;
        if self.progress {
            figures.busy_ns += ns;
            figures.polls_with_work += 1;
        } else {
            figures.idle_ns += ns;
        }
    }

    /// Whether the iteration that started at the last tick found work.
    pub fn done(&mut self, progress: bool) {
        self.progress = progress;
    }
}

/// Where a connection of this worker connected to: the served address and port.
fn local_addr(control: &crate::control::Control, port: u16) -> Option<std::net::SocketAddr> {
    let ip: std::net::IpAddr = control.settings.interface.parse().ok()?;
    Some(std::net::SocketAddr::new(ip, port))
}

/// Serves connections over a smoltcp `device` until `stop` is set: ingress, serve every
/// connection with work through the engine (one turn each, [`TURN_REQUESTS`] requests at most;
/// a connection with work left is served again on the next loop, after the others), exchange
/// forwarded requests and replies with the other workers, egress, flush; then, when the idle
/// policy allows it (see [`idle`]), sleeps on the device, the mesh's wake-up descriptor and a
/// [`SleepTimer`] kept armed across sleeps (no timeout on the sleep itself), never past the
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
        info.recovery = stats.recovery.into();
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
                // Whole milliseconds, as poll(2)'s timeout had them: a loss probe's deadline
                // that the client's ACK cancels meanwhile wakes no one (to the microsecond,
                // 1.17 sleeps per request instead of 0.96 at 10,000 requests/s).
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

/// The loop's clock reading as the engine and the latency instrument take it.
#[derive(Debug, Clone, Copy)]
pub struct Time {
    /// Unix time to the millisecond, for the engine.
    pub now: Now,
    /// [`crate::control::monotonic_ns`] of the same instant: when bytes read now arrived.
    pub ns: u64,
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

/// Puts other workers' replies into their connections and sends them (see [`send_delivered`]).
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
                send_delivered(conn, engine, again);
            }
        });
    }
}

/// Sends a connection's replies that other workers delivered, as far as the socket takes them,
/// and lists it for a turn in the next loop to run what it held back: a client whose requests
/// other workers answer gets one turn per loop, as every other client does, however many
/// deliveries it receives (driving it after each let a pipelining client take dozens of turns
/// for another's one).
fn send_delivered(conn: &mut Conn<'_, ClientConn>, engine: &mut Engine, again: &mut Again) {
    let id = conn.id();
    let client = &mut *conn.state;
    let io = &mut conn.io;
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
    client.settle(engine);
    if !client.pending_output().is_empty() {
        io.want_write();
    }
    again.push(id, client);
}

/// Gives one connection a turn: replies out first, then requests in — parsed in place from the
/// socket's receive buffer, or assembled in the connection's input buffer when a request is
/// split across the ring's end or larger than the ring — until it needs more input, must wait
/// (output backlog, replies from other workers, send space), or its turn is used up; then it
/// is listed in `again` when it still has work. A connection accepted on `resp_port` speaks
/// RESP.
fn drive(
    conn: &mut Conn<'_, ClientConn>,
    engine: &mut Engine,
    time: Time,
    again: &mut Again,
    resp_port: Option<u16>,
) {
    let id = conn.id();
    let client = &mut *conn.state;
    if client.session.record().is_none() {
        let control = engine.control();
        let peer = conn
            .io
            .remote_endpoint()
            .map(|ep| std::net::SocketAddr::new(ep.addr.into(), ep.port));
        let record = control.open_connection(
            engine.config().worker,
            peer,
            local_addr(control, conn.io.local_port()),
            time.now,
        );
        client.session.set_record(record);
    }
    if resp_port.is_some() && client.session.protocol().is_none() {
        client.accepted_on(conn.io.local_port(), resp_port);
    }
    client.session.set_token(id.pack());
    client.session.begin_turn(TURN_REQUESTS);
    let now = time.now;
    let io = &mut conn.io;
    // Why the engine stopped in this turn (`None`: it has not run yet).
    let mut last: Option<Stop> = None;
    loop {
        while !client.pending_output().is_empty() {
            match io.send_slice(client.pending_output()) {
                Ok(0) => break,
                Ok(n) => client.sent(n),
                Err(_) => {
                    client.closing(CloseReason::Error);
                    io.abort();
                    return;
                }
            }
        }
        client.settle(engine);
        if client.finished() {
            io.close();
            return;
        }
        if !client.may_execute() {
            // Output backlog, replies awaited from other workers, or closing with replies
            // still queued: send space or a delivery brings the connection back.
            if !client.pending_output().is_empty() {
                io.want_write();
            }
            return;
        }
        if matches!(last, Some(Stop::Turn | Stop::Blocked)) {
            if !client.pending_output().is_empty() {
                io.want_write();
            }
            again.push(id, client);
            return;
        }
        // What is buffered runs first, unless the engine just said it needs more.
        if !client.input.is_empty() && last != Some(Stop::Input) {
            last = Some(client.execute_buffered(engine, now).stop);
            continue;
        }
        let queued = io.recv_queue();
        if queued == 0 {
            if !io.may_recv() {
                // The peer closed its side and everything it sent that can run has run.
                client.session.close();
                continue;
            }
            if !client.pending_output().is_empty() {
                io.want_write();
            }
            return;
        }
        client.arrived(time.ns);
        if client.input.is_empty() {
            let mut stop = Stop::Input;
            let moved = io.recv(|buf| {
                let outcome = client.execute_in_place(engine, buf, now);
                stop = outcome.stop;
                if outcome.stop == Stop::Input && outcome.consumed < buf.len() {
                    // The next request is incomplete in this contiguous slice: assemble it.
                    client.input.extend(&buf[outcome.consumed..]);
                    (buf.len(), ())
                } else {
                    (outcome.consumed, ())
                }
            });
            if moved.is_err() {
                client.closing(CloseReason::Error);
                io.abort();
                return;
            }
            last = Some(stop);
        } else {
            // Top up exactly what the pending request needs, so the connection returns to
            // in-place parsing as soon as it is complete.
            let want = client.needed.max(1).min(queued);
            let spare = client.input.spare(want);
            match io.recv_slice(&mut spare[..want]) {
                Ok(n) => client.input.filled(n),
                Err(_) => {
                    client.closing(CloseReason::Error);
                    io.abort();
                    return;
                }
            }
            last = None;
        }
    }
}
