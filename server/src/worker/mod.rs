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
//! [`spawn`] starts the workers of any packet path, waits until all are ready, and sums their
//! figures when they stop.

pub mod kernel;
pub mod mesh;
pub mod tap;
pub mod xdp;

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use netstack::smoltcp::phy::Device;
use netstack::{Conn, ConnId, ConnTable, Poll};

use crate::cli::Idle;
use crate::conn::ClientConn;
use crate::engine::{Engine, EngineConfig, Replies, Stop, TURN_REQUESTS};
use crate::stats::{self, Snapshot};
use mesh::Mesh;

/// How long a parking worker spins without progress before it waits on its queue.
pub const SPIN_BUDGET: Duration = Duration::from_micros(200);
/// The longest a parked worker sleeps before it looks at the stop flag again.
pub const PARK_MAX: Duration = Duration::from_millis(100);
/// Frames read per ingress step before the worker serves connections.
const INGRESS_BUDGET: usize = 64;
/// Expired items examined per idle sweep.
const SWEEP_ITEMS: usize = 256;
/// Time between expiry sweeps.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Unix time in whole seconds: the engine's clock.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Pins the calling thread to `cpu` (or to the first CPU it may use). Returns the CPU chosen.
///
/// # Errors
/// When the CPU does not exist or pinning fails.
pub fn pin(cpu: Option<usize>) -> Result<usize, String> {
    let cores = core_affinity::get_core_ids().ok_or("cannot list the CPUs this process may use")?;
    let core = match cpu {
        Some(id) => cores
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| format!("CPU {id} is not available to this process"))?,
        None => *cores.first().ok_or("no CPU available")?,
    };
    if core_affinity::set_for_current(core) {
        Ok(core.id)
    } else {
        Err(format!("pinning to CPU {} failed", core.id))
    }
}

/// A worker's clock, read once per loop iteration: a clock read costs as much as a small
/// request, so the engine's seconds, smoltcp's timestamps and the idle policy share one read.
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
    /// Unix seconds (the start's wall-clock time plus monotonic time since), for the engine.
    pub unix_secs: u64,
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
            unix_secs: micros / 1_000_000,
            net: netstack::smoltcp::time::Instant::from_micros(micros as i64),
        }
    }
}

impl Default for LoopClock {
    fn default() -> Self {
        LoopClock::new()
    }
}

/// The idle policy's state: when a parking worker may block, and for how long.
pub struct IdleState {
    policy: Idle,
    last_progress: Instant,
    last_sweep: Instant,
}

impl IdleState {
    /// A fresh state for `policy`.
    pub fn new(policy: Idle) -> Self {
        let now = Instant::now();
        IdleState {
            policy,
            last_progress: now,
            last_sweep: now,
        }
    }

    /// Records one loop iteration that ended at `now`; returns how long the worker may block
    /// on its queue now (`None`: do not block).
    pub fn after_iteration(&mut self, progress: bool, now: Instant) -> Option<Duration> {
        if progress {
            self.last_progress = now;
            return None;
        }
        match self.policy {
            Idle::Spin => None,
            Idle::Park if now.duration_since(self.last_progress) >= SPIN_BUDGET => Some(PARK_MAX),
            Idle::Park => None,
        }
    }

    /// Runs a bounded expiry sweep when one is due.
    pub fn maybe_sweep(&mut self, engine: &mut Engine, tick: Tick) {
        if tick.at.duration_since(self.last_sweep) >= SWEEP_EVERY {
            self.last_sweep = tick.at;
            engine.sweep_expired(SWEEP_ITEMS, tick.unix_secs);
        }
    }
}

/// A stop flag set by SIGINT and SIGTERM.
///
/// # Errors
/// When the handlers cannot be installed.
pub fn stop_on_signals() -> std::io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// True once a stop was requested.
pub fn stopping(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed)
}

/// Writes the final statistics (summed over workers) to stderr, one `STAT name value` line each.
pub fn report_final(snapshot: &Snapshot) {
    let mut text = String::from("memspin stopped; final stats:\n");
    stats::general(snapshot, unix_now(), |name, value| {
        text.push_str(&format!("STAT {name} {value}\n"));
    });
    eprint!("{text}");
}

/// The CPU of each of `workers` workers: the first `workers` of `listed` (`--cpus`), or of
/// the CPUs this process may run on, in order (round robin when there are fewer).
///
/// # Errors
/// When `--cpus` lists fewer CPUs than workers, or no CPU is available.
pub fn cpus_for(workers: usize, listed: Option<&[usize]>) -> Result<Vec<usize>, String> {
    match listed {
        Some(list) if list.len() < workers => Err(format!(
            "--cpus lists {} CPU(s) for {workers} workers; list one per worker",
            list.len()
        )),
        Some(list) => Ok(list[..workers].to_vec()),
        None => {
            let cores =
                core_affinity::get_core_ids().ok_or("cannot list the CPUs this process may use")?;
            if cores.is_empty() {
                return Err("no CPU available".to_string());
            }
            Ok((0..workers).map(|i| cores[i % cores.len()].id).collect())
        }
    }
}

/// How the workers are laid out: how many, where, with what engine and stop flag.
#[derive(Debug)]
pub struct Plan<'a> {
    /// CPUs, one per worker (worker i on `cpus[i]`).
    pub cpus: Vec<usize>,
    /// Every worker's engine configuration; `threads` is the number of workers, `worker` is
    /// set per worker, the memory budget is one shard's.
    pub engine: EngineConfig,
    /// Set by SIGINT/SIGTERM, or when a worker fails.
    pub stop: &'a AtomicBool,
    /// The idle policy.
    pub idle: Idle,
}

impl Plan<'_> {
    /// Workers to start.
    pub fn workers(&self) -> usize {
        self.engine.threads
    }
}

/// What [`spawn`] hands each worker: its queue, its engine, its end of the mesh, and a
/// function to call once it serves. It returns lines for the exit report.
pub type WorkerResult = Result<Vec<String>, String>;

/// Runs one worker per queue of `queues`, each pinned to its CPU with its own engine and mesh
/// endpoint, until the stop flag is set; calls `on_ready` once every worker is ready. A
/// worker that fails stops the others. Writes each worker's report and the summed final
/// statistics to stderr.
///
/// # Errors
/// The first worker's failure, prefixed with its index.
pub fn spawn<Q: Send>(
    plan: &Plan<'_>,
    queues: Vec<Q>,
    work: impl Fn(Q, &mut Engine, &mut Mesh, &dyn Fn()) -> WorkerResult + Sync,
    on_ready: impl FnOnce(),
) -> Result<(), String> {
    let workers = plan.workers();
    if queues.len() != workers || plan.cpus.len() < workers {
        return Err(format!(
            "{workers} workers need {workers} queues and CPUs (have {} and {})",
            queues.len(),
            plan.cpus.len()
        ));
    }
    let meshes = mesh::build(workers)?;
    let (events, ready_events) = crossbeam_channel::unbounded::<Result<usize, String>>();
    let results = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(workers);
        for (index, (queue, mut mesh)) in queues.into_iter().zip(meshes).enumerate() {
            let worker_events = events.clone();
            let work = &work;
            let cpu = plan.cpus[index];
            let config = EngineConfig {
                worker: index,
                ..plan.engine.clone()
            };
            let stop = plan.stop;
            let handle = std::thread::Builder::new()
                .name(format!("memspin-w{index}"))
                .spawn_scoped(scope, move || {
                    let result = pin(Some(cpu)).and_then(|_| {
                        let mut engine = Engine::new(config);
                        let ready = || {
                            let _ = worker_events.send(Ok(index));
                        };
                        let lines = work(queue, &mut engine, &mut mesh, &ready)?;
                        Ok((lines, engine.snapshot(), *mesh.stats()))
                    });
                    if let Err(e) = &result {
                        stop.store(true, Ordering::SeqCst);
                        let _ = worker_events.send(Err(format!("worker {index}: {e}")));
                    }
                    result
                })
                .map_err(|e| format!("starting worker {index}: {e}"));
            match handle {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    plan.stop.store(true, Ordering::SeqCst);
                    let _ = events.send(Err(e));
                    break;
                }
            }
        }
        drop(events);
        let mut ready = 0;
        let mut failure = None;
        while ready < workers {
            match ready_events.recv() {
                Ok(Ok(_)) => ready += 1,
                Ok(Err(e)) => {
                    failure = Some(e);
                    break;
                }
                Err(_) => break,
            }
        }
        if failure.is_none() && ready == workers {
            on_ready();
        } else {
            plan.stop.store(true, Ordering::SeqCst);
        }
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("worker panicked".to_string()))
            })
            .collect();
        (failure, results)
    });
    let (failure, results) = results;
    let mut total: Option<Snapshot> = None;
    let mut first_error = failure;
    for (index, result) in results.into_iter().enumerate() {
        match result {
            Ok((lines, snapshot, mesh_stats)) => {
                for line in lines {
                    eprintln!("memspin: worker {index}: {line}");
                }
                if workers > 1 {
                    eprintln!("memspin: worker {index}: mesh {mesh_stats:?}");
                }
                match total.as_mut() {
                    Some(total) => total.merge(&snapshot),
                    None => total = Some(snapshot),
                }
            }
            Err(e) => {
                first_error.get_or_insert_with(|| format!("worker {index}: {e}"));
            }
        }
    }
    if let Some(total) = total {
        report_final(&total);
    }
    first_error.map_or(Ok(()), Err)
}

/// Raises the open-file limit so `conn_limit` clients fit (as memcached does for `-c`).
///
/// # Errors
/// When the hard limit is too low; the message says which limit to raise.
pub fn raise_fd_limit(conn_limit: usize) -> Result<(), String> {
    let wanted = conn_limit as u64 + 64;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid struct to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    if limit.rlim_cur >= wanted {
        return Ok(());
    }
    limit.rlim_cur = wanted.min(limit.rlim_max);
    // SAFETY: setrlimit with a valid struct, soft limit within the hard limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
    }
    if limit.rlim_cur < wanted {
        return Err(format!(
            "-c {conn_limit} needs {wanted} open files but the hard limit is {} (raise `ulimit -Hn`)",
            limit.rlim_max
        ));
    }
    Ok(())
}

/// A packet queue the smoltcp worker loop drives: a smoltcp [`Device`] that can also wait
/// for frames (the park policy) and push out frames it queued.
pub trait Queue: Device {
    /// Sends frames that transmit tokens queued but the device has not pushed yet; called
    /// after every egress step. Devices that write each frame at once do nothing.
    fn flush(&mut self) {}

    /// Blocks until a frame may be readable, `wake` is readable, or `timeout` passes.
    ///
    /// # Errors
    /// When waiting fails; the message names the device.
    fn wait(&mut self, timeout: Duration, wake: Option<BorrowedFd<'_>>) -> Result<(), String>;

    /// The device's counters as one line, for the exit report.
    fn report(&mut self) -> String;
}

/// Serves connections over a smoltcp `device` until `stop` is set: ingress, serve every
/// connection with work through the engine (one turn each, [`TURN_REQUESTS`] requests at most;
/// a connection with work left is served again on the next loop, after the others), exchange
/// forwarded requests and replies with the other workers, egress, flush; with `Idle::Park`,
/// waits on the device and the mesh's wake-up descriptor (never past the table's next timer)
/// after the spin budget.
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
) -> Result<(), String> {
    let mut idle_state = IdleState::new(idle);
    let clock = LoopClock::new();
    let mut again = Again::default();
    while !stopping(stop) {
        let tick = clock.tick();
        let now = tick.unix_secs;
        let ingress = table.poll_ingress(tick.net, device, INGRESS_BUDGET);
        let mut served = table.serve(|conn| drive(conn, engine, now, &mut again));
        served += again.serve_turns(|id, again| {
            table.with_conn(id, |conn| {
                conn.state.again = false;
                drive(conn, engine, now, again)
            })
        });
        let mut meshed = mesh.send_forwards(engine);
        meshed |= mesh.receive(engine, now, |engine, replies| {
            deliver(table, engine, replies, now, &mut again)
        }) > 0;
        meshed |= mesh.send_forwards(engine);
        let egress = table.poll_egress(tick.net, device);
        device.flush();
        let progress = ingress == Poll::Progress
            || served > 0
            || meshed
            || egress == Poll::Progress
            || again.pending()
            || engine.holds_refused();

        let stats = table.stats();
        let info = engine.info_mut();
        info.curr_connections = stats.active as u64;
        info.total_connections = stats.accepted;
        info.rejected_connections = stats.refused;
        idle_state.maybe_sweep(engine, tick);

        if let Some(park) = idle_state.after_iteration(progress, tick.at) {
            let delay = table
                .poll_delay(tick.net)
                .map_or(park, |d| Duration::from_micros(d.total_micros()).min(park));
            if !delay.is_zero() && mesh.park() {
                device.wait(delay, mesh.wake_fd())?;
            }
            mesh.unpark();
        }
    }
    Ok(())
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

/// Puts other workers' replies into their connections and drives each connection once after
/// its last reply in the message (sending what is now in order, and executing what it held
/// back while too much was out).
fn deliver(
    table: &mut ConnTable<ClientConn>,
    engine: &mut Engine,
    replies: &Replies,
    now: u64,
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
                drive(conn, engine, now, again);
            }
        });
    }
}

/// Gives one connection a turn: replies out first, then requests in — parsed in place from the
/// socket's receive buffer, or assembled in the connection's input buffer when a request is
/// split across the ring's end or larger than the ring — until it needs more input, must wait
/// (output backlog, replies from other workers, send space), or its turn is used up; then it
/// is listed in `again` when it still has work.
fn drive(conn: &mut Conn<'_, ClientConn>, engine: &mut Engine, now: u64, again: &mut Again) {
    let id = conn.id();
    let client = &mut *conn.state;
    client.session.set_token(id.pack());
    client.session.begin_turn(TURN_REQUESTS);
    let io = &mut conn.io;
    // Why the engine stopped in this turn (`None`: it has not run yet).
    let mut last: Option<Stop> = None;
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
                    io.abort();
                    return;
                }
            }
            last = None;
        }
    }
}
