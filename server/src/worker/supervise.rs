//! Supervision: [`spawn`] starts the workers of any packet path, each on its own thread pinned
//! to its CPU, waits until all are ready, and sums their figures when they stop. A worker that
//! panics or fails stops all the others (the stop flag is process-wide), and a stop that is not
//! complete within [`STOP_GRACE`] ends the process without the workers still running.
//!
//! ```text
//! SIGINT/SIGTERM ─┐
//! worker fails ───┴▶ stop flag ─▶ every worker: next loop iteration sees it, returns
//!                      supervisor: all done ─▶ reports, spawn returns (drops release TAP/XDP)
//!                                  STOP_GRACE and not all done ─▶ detach XDP, exit(1)
//! ```
//!
//! The supervisor sleeps until something happens: a worker rings its doorbell after each
//! event it sends (ready, done), and the signal handlers write to a socket it also waits on,
//! after setting the flag. It does not wake on a timer while the workers serve. Process-wide
//! set-up lives here too: the signal handlers, CPU pinning and the open-file limit.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

#[cfg(debug_assertions)]
use super::failpoint;
use super::mesh::{self, Mesh};
use super::unix_now;
use crate::cli::Idle;
use crate::engine::{Engine, EngineConfig};
use crate::stats::{self, Snapshot};
use crate::sys;

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

/// A stop flag set by SIGINT and SIGTERM. In a debug build, also arms the failpoint named
/// in `MEMSPIN_FAILPOINT` (see `failpoint`).
///
/// # Errors
/// When the handlers cannot be installed, or the failpoint is malformed.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let failed = |e: std::io::Error| format!("installing signal handlers: {e}");
    // The flag first: a handler's actions run in the order they were registered, so the
    // supervisor, woken by the byte, finds the flag set.
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(failed)?;
    }
    if SIGNAL_WAKE.get().is_none() {
        let (wake, ring) = UnixStream::pair().map_err(failed)?;
        wake.set_nonblocking(true).map_err(failed)?;
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let ring = ring.try_clone().map_err(failed)?;
            signal_hook::low_level::pipe::register(signal, ring).map_err(failed)?;
        }
        let _ = SIGNAL_WAKE.set(wake);
    }
    #[cfg(debug_assertions)]
    failpoint::install()?;
    Ok(stop)
}

/// True once a stop was requested. Every worker calls it once per loop iteration (in a debug
/// build, the failpoints fire here).
pub fn stopping(stop: &AtomicBool) -> bool {
    #[cfg(debug_assertions)]
    failpoint::check();
    stop.load(Ordering::Relaxed)
}

/// Writes the final statistics (summed over workers) to stderr, one `STAT name value` line each.
pub fn report_final(snapshot: &Snapshot, control: &crate::control::Control) {
    let mut text = String::from("memspin stopped; final stats:\n");
    stats::general(snapshot, control, unix_now(), |name, value| {
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

/// How long the workers have to stop once a stop is requested (a signal, or a worker that
/// failed) before the process exits without them (see [`spawn`]). A worker looks at the stop
/// flag once per loop iteration and a parked one sleeps at most [`PARK_MAX`](super::PARK_MAX).
pub const STOP_GRACE: Duration = Duration::from_millis(500);
/// How often the supervising thread looks at the stop flag while the workers serve when no
/// signal handler can wake it ([`stop_on_signals`] was not called: tests); with one it sleeps
/// until an event or a signal.
const SUPERVISE_EVERY: Duration = Duration::from_millis(10);

/// The read end of the socket pair that SIGINT and SIGTERM write a byte into once they have set
/// the stop flag ([`stop_on_signals`]): it wakes the supervising thread.
static SIGNAL_WAKE: OnceLock<UnixStream> = OnceLock::new();

/// How workers wake the supervising thread: a byte on a socket pair after each event they send
/// it. A ring after the send cannot be lost: the supervisor takes the events and only then
/// waits, and a byte written meanwhile ends that wait at once.
struct Doorbell {
    /// The supervisor's end.
    wake: UnixStream,
    /// The workers' end.
    ring: UnixStream,
}

impl Doorbell {
    fn new() -> Result<Doorbell, String> {
        let failed = |e: std::io::Error| format!("supervisor's socket pair: {e}");
        let (wake, ring) = UnixStream::pair().map_err(failed)?;
        wake.set_nonblocking(true).map_err(failed)?;
        ring.set_nonblocking(true).map_err(failed)?;
        Ok(Doorbell { wake, ring })
    }

    /// Wakes the supervisor (a full socket is already readable, so a failed write loses
    /// nothing).
    fn ring(&self) {
        let _ = (&self.ring).write(&[1]);
    }

    /// Sleeps until a ring, a byte on `signals`, or `timeout` (`None`: no limit), then takes
    /// every byte waiting on both.
    fn wait(&self, signals: Option<&UnixStream>, timeout: Option<Duration>) {
        #[cfg(test)]
        tests::WAITS.with(|waits| waits.set(waits.get() + 1));
        // An interrupted or failed poll only ends the wait early; the caller looks at its
        // events and the flag again.
        let _ =
            crate::sys::poll_readable([Some(self.wake.as_fd()), signals.map(AsFd::as_fd)], timeout);
        let mut bytes = [0u8; 64];
        for mut socket in std::iter::once(&self.wake).chain(signals) {
            while matches!(socket.read(&mut bytes), Ok(n) if n > 0) {}
        }
    }
}

/// What a worker thread tells the supervising thread.
enum Event {
    /// Worker i serves.
    Ready,
    /// Worker i's thread is about to end (returned, failed or panicked).
    Done(usize),
}

/// What a worker that stopped cleanly hands back: its report lines and figures.
type Stopped = (Vec<String>, Snapshot, mesh::MeshStats);

/// What the supervisor saw.
enum Supervised {
    /// Every worker thread ended.
    AllDone,
    /// These workers were still running [`STOP_GRACE`] after the stop request.
    Stuck(Vec<usize>),
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs one worker per queue of `queues`, each pinned to its CPU with its own engine and mesh
/// endpoint, until the stop flag is set; calls `on_ready` once every worker is ready. Writes
/// each worker's report and the summed final statistics to stderr.
///
/// A worker that fails — returns an error or panics (the panic is caught at the thread's top
/// and its message kept) — sets the stop flag, so every other worker stops at its next loop
/// iteration, and `spawn` returns that failure once all have stopped; the caller's resources
/// (the TAP queues, the XDP program) are then released as usual by their drops.
///
/// A stop must complete within [`STOP_GRACE`]: a worker still running then (stuck in one
/// long operation) is not waited for. The workers that stopped are reported, every XDP program
/// this process attached is detached ([`netstack::xdp::detach_all`]; TAP devices and sockets
/// go with the process), and the process exits with status 1 naming the stuck workers.
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
    let (events, inbox) = crossbeam_channel::unbounded::<Event>();
    let doorbell = Doorbell::new()?;
    let mut results = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(workers);
        let mut start_error = None;
        for (index, (queue, mut mesh)) in queues.into_iter().zip(meshes).enumerate() {
            let worker_events = events.clone();
            let doorbell = &doorbell;
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
                    #[cfg(debug_assertions)]
                    failpoint::set_worker(index);
                    let run = std::panic::AssertUnwindSafe(|| {
                        pin(Some(cpu)).and_then(|_| {
                            let mut engine = Engine::new(config);
                            let ready = || {
                                let _ = worker_events.send(Event::Ready);
                                doorbell.ring();
                            };
                            let lines = work(queue, &mut engine, &mut mesh, &ready)?;
                            Ok((lines, engine.snapshot(), *mesh.stats()))
                        })
                    });
                    // The panic hook has printed the message and where; keep it for the
                    // exit status too.
                    let result = std::panic::catch_unwind(run).unwrap_or_else(|payload| {
                        Err(format!("panicked: {}", panic_message(payload.as_ref())))
                    });
                    if result.is_err() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    let _ = worker_events.send(Event::Done(index));
                    doorbell.ring();
                    result
                })
                .map_err(|e| format!("starting worker {index}: {e}"));
            match handle {
                Ok(handle) => handles.push(Some(handle)),
                Err(e) => {
                    plan.stop.store(true, Ordering::SeqCst);
                    start_error = Some(e);
                    break;
                }
            }
        }
        drop(events);
        let started = handles.len();
        let supervised = supervise(
            plan.stop,
            started,
            workers,
            &inbox,
            &doorbell,
            SIGNAL_WAKE.get(),
            on_ready,
        );
        let mut results: Vec<Option<Result<Stopped, String>>> = handles
            .iter_mut()
            .map(|slot| {
                let handle = slot.take_if(|h| h.is_finished())?;
                Some(
                    handle
                        .join()
                        .unwrap_or_else(|_| Err("worker panicked".to_string())),
                )
            })
            .collect();
        if let Supervised::Stuck(stuck) = supervised {
            abandon(plan, &results, &stuck);
        }
        // Every thread said it is done; join the ones that were not finished a moment ago.
        for (slot, result) in handles.iter_mut().zip(results.iter_mut()) {
            if let Some(handle) = slot.take() {
                *result = Some(
                    handle
                        .join()
                        .unwrap_or_else(|_| Err("worker panicked".to_string())),
                );
            }
        }
        if let Some(e) = start_error {
            results.push(Some(Err(e)));
        }
        results
    });
    let mut total: Option<Snapshot> = None;
    let mut first_error = None;
    for (index, result) in results.iter_mut().enumerate() {
        match result.take() {
            Some(Ok((lines, snapshot, mesh_stats))) => {
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
            Some(Err(e)) if index < workers => {
                first_error.get_or_insert_with(|| format!("worker {index}: {e}"));
            }
            Some(Err(e)) => {
                first_error.get_or_insert(e);
            }
            None => {}
        }
    }
    if let Some(total) = total {
        report_final(&total, &plan.engine.control);
    }
    first_error.map_or(Ok(()), Err)
}

/// Waits for the workers: counts them ready (then calls `on_ready`, unless a stop came
/// first), and returns once every started thread is done, or [`STOP_GRACE`] after a stop
/// request with the workers still running. Between events it sleeps on the doorbell and the
/// signal socket (`signals`), never on a timer while the workers serve (unless there is no signal
/// socket to wake it).
fn supervise(
    stop: &AtomicBool,
    started: usize,
    workers: usize,
    inbox: &crossbeam_channel::Receiver<Event>,
    doorbell: &Doorbell,
    signals: Option<&UnixStream>,
    on_ready: impl FnOnce(),
) -> Supervised {
    let mut on_ready = Some(on_ready);
    let mut ready = 0;
    let mut done = vec![false; started];
    let mut stop_at: Option<Instant> = None;
    loop {
        loop {
            match inbox.try_recv() {
                Ok(Event::Ready) => {
                    ready += 1;
                    if ready == workers
                        && !stopping(stop)
                        && let Some(on_ready) = on_ready.take()
                    {
                        on_ready();
                    }
                }
                Ok(Event::Done(index)) => done[index] = true,
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                // Every worker thread has ended (their senders are gone).
                Err(crossbeam_channel::TryRecvError::Disconnected) => return Supervised::AllDone,
            }
        }
        if done.iter().all(|&d| d) {
            return Supervised::AllDone;
        }
        if stop_at.is_none() && stopping(stop) {
            stop_at = Some(Instant::now());
        }
        let timeout = match stop_at {
            Some(at) => {
                let left = STOP_GRACE.saturating_sub(at.elapsed());
                if left.is_zero() {
                    let stuck = (0..started).filter(|&i| !done[i]).collect();
                    return Supervised::Stuck(stuck);
                }
                Some(left)
            }
            None if signals.is_none() => Some(SUPERVISE_EVERY),
            None => None,
        };
        doorbell.wait(signals, timeout);
    }
}

/// The exit for workers that did not stop within [`STOP_GRACE`]: reports the workers that
/// did, detaches this process's XDP programs (TAP devices and sockets close with the
/// process) and exits with status 1. Destructors of the running threads' values do not run.
fn abandon(plan: &Plan<'_>, results: &[Option<Result<Stopped, String>>], stuck: &[usize]) -> ! {
    let mut total: Option<Snapshot> = None;
    for (index, result) in results.iter().enumerate() {
        match result {
            Some(Ok((lines, snapshot, _))) => {
                for line in lines {
                    eprintln!("memspin: worker {index}: {line}");
                }
                match total.as_mut() {
                    Some(total) => total.merge(snapshot),
                    None => total = Some(snapshot.clone()),
                }
            }
            Some(Err(e)) => eprintln!("memspin: worker {index}: {e}"),
            None => {}
        }
    }
    if let Some(total) = total {
        report_final(&total, &plan.engine.control);
    }
    netstack::xdp::detach_all();
    let list: Vec<String> = stuck.iter().map(ToString::to_string).collect();
    eprintln!(
        "memspin: worker {} did not stop within {} ms of the stop request; exiting without {} \
         (their figures are missing above{})",
        list.join(", "),
        STOP_GRACE.as_millis(),
        if stuck.len() == 1 { "it" } else { "them" },
        if stopping(plan.stop) {
            ""
        } else {
            "; no stop was requested"
        },
    );
    std::process::exit(1);
}

/// Raises the open-file limit so `conn_limit` clients fit (as memcached does for `-c`).
///
/// # Errors
/// When the hard limit is too low; the message says which limit to raise.
pub fn raise_fd_limit(conn_limit: usize) -> Result<(), String> {
    let wanted = conn_limit as u64 + 64;
    let (soft, hard) = sys::open_files_limit().map_err(|e| format!("getrlimit: {e}"))?;
    if soft >= wanted {
        return Ok(());
    }
    let soft = wanted.min(hard);
    sys::set_open_files_limit(soft, hard).map_err(|e| format!("setrlimit: {e}"))?;
    if soft < wanted {
        return Err(format!(
            "-c {conn_limit} needs {wanted} open files but the hard limit is {hard} (raise `ulimit -Hn`)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(stop: &AtomicBool, workers: usize) -> Plan<'_> {
        Plan {
            cpus: cpus_for(workers, None).unwrap(),
            engine: EngineConfig {
                threads: workers,
                conn_limit: 16,
                ..EngineConfig::new(
                    store::ShardConfig {
                        memory_limit_bytes: 1 << 20,
                        max_item_size: 1 << 16,
                    },
                    crate::control::Control::new(Default::default(), 0),
                )
            },
            stop,
            idle: Idle::Park,
        }
    }

    /// Serves (here: yields) until the stop flag is set, as a worker loop does.
    fn serve_until_stop(stop: &AtomicBool) -> WorkerResult {
        while !stopping(stop) {
            std::thread::yield_now();
        }
        Ok(vec!["stopped".to_string()])
    }

    // Before: a panicking worker was noticed only when joined; the other served on and
    // `spawn` never returned.
    #[test]
    fn a_worker_that_panics_while_serving_stops_the_others() {
        let stop = AtomicBool::new(false);
        let plan = plan(&stop, 2);
        let ready_called = AtomicBool::new(false);
        let result = spawn(
            &plan,
            vec![0, 1],
            |queue, _engine, _mesh, ready| {
                ready();
                if queue == 1 {
                    // Wait until both served, so this is a failure while serving.
                    while !ready_called.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    panic!("boom {}", queue);
                }
                serve_until_stop(plan.stop)
            },
            || ready_called.store(true, Ordering::SeqCst),
        );
        assert_eq!(result, Err("worker 1: panicked: boom 1".to_string()));
        assert!(stopping(&stop));
    }

    // Before: the supervisor waited for every worker's ready message, which a worker that
    // panicked while starting never sent.
    #[test]
    fn a_worker_that_panics_before_it_serves_ends_the_start() {
        let stop = AtomicBool::new(false);
        let plan = plan(&stop, 2);
        let ready_called = AtomicBool::new(false);
        let result = spawn(
            &plan,
            vec![0, 1],
            |queue, _engine, _mesh, ready| {
                if queue == 0 {
                    panic!("cannot start");
                }
                ready();
                serve_until_stop(plan.stop)
            },
            || ready_called.store(true, Ordering::SeqCst),
        );
        assert_eq!(result, Err("worker 0: panicked: cannot start".to_string()));
        assert!(!ready_called.load(Ordering::SeqCst), "never ready");
    }

    #[test]
    fn a_worker_error_stops_the_others_and_is_returned() {
        let stop = AtomicBool::new(false);
        let plan = plan(&stop, 2);
        let result = spawn(
            &plan,
            vec![0, 1],
            |queue, _engine, _mesh, ready| {
                ready();
                if queue == 0 {
                    return Err("device gone".to_string());
                }
                serve_until_stop(plan.stop)
            },
            || {},
        );
        assert_eq!(result, Err("worker 0: device gone".to_string()));
    }

    #[test]
    fn a_requested_stop_ends_every_worker_cleanly() {
        let stop = AtomicBool::new(false);
        let plan = plan(&stop, 2);
        let result = spawn(
            &plan,
            vec![0, 1],
            |_queue, _engine, _mesh, ready| {
                ready();
                serve_until_stop(plan.stop)
            },
            || plan.stop.store(true, Ordering::SeqCst),
        );
        assert_eq!(result, Ok(()));
    }

    thread_local! {
        /// The doorbell waits this thread began.
        pub(super) static WAITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// The doorbell waits this thread began so far. Counted at the wait itself: the thread's
    /// voluntary context switches would also count a page fault that blocked on the address
    /// space's lock while another test thread mapped or unmapped memory.
    fn sleeps_so_far() -> u64 {
        WAITS.with(std::cell::Cell::get)
    }

    /// Runs `supervise` for one worker on its own thread, with a signal socket; `drive` plays
    /// the worker and the signal handler. Returns what it saw, how long it took and how many
    /// times it slept, or panics after 5 s.
    fn supervise_one(
        drive: impl FnOnce(crossbeam_channel::Sender<Event>, &Doorbell, &AtomicBool, UnixStream)
        + Send
        + 'static,
    ) -> (Supervised, Duration, u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let doorbell = Arc::new(Doorbell::new().unwrap());
        let (signals, signal_ring) = UnixStream::pair().unwrap();
        signals.set_nonblocking(true).unwrap();
        let (events, inbox) = crossbeam_channel::unbounded();
        let (done, result) = crossbeam_channel::bounded(1);
        {
            let (stop, doorbell) = (Arc::clone(&stop), Arc::clone(&doorbell));
            std::thread::spawn(move || {
                let (before, started) = (sleeps_so_far(), Instant::now());
                let seen = supervise(&stop, 1, 1, &inbox, &doorbell, Some(&signals), || {});
                let _ = done.send((seen, started.elapsed(), sleeps_so_far() - before));
            });
        }
        std::thread::spawn(move || drive(events, &doorbell, &stop, signal_ring));
        result
            .recv_timeout(Duration::from_secs(5))
            .expect("the supervisor returns")
    }

    /// What a worker does: the event, then the doorbell.
    fn report(events: &crossbeam_channel::Sender<Event>, doorbell: &Doorbell, event: Event) {
        events.send(event).unwrap();
        doorbell.ring();
    }

    /// What SIGTERM's handlers do: the flag, then a byte.
    fn terminate(stop: &AtomicBool, signal_ring: &UnixStream) {
        stop.store(true, Ordering::SeqCst);
        let mut ring = signal_ring;
        ring.write_all(&[1]).unwrap();
    }

    // The supervising thread must not wake on a timer while the workers serve: in 10 ms
    // steps that is 100 wake-ups a second on whatever CPU it runs on (a worker's or a load
    // generator's).
    #[test]
    fn the_supervisor_sleeps_until_a_worker_or_a_signal_wakes_it() {
        let (seen, took, sleeps) = supervise_one(|events, doorbell, stop, signal_ring| {
            report(&events, doorbell, Event::Ready);
            std::thread::sleep(Duration::from_millis(300));
            terminate(stop, &signal_ring);
            std::thread::sleep(Duration::from_millis(50));
            report(&events, doorbell, Event::Done(0));
        });
        assert!(matches!(seen, Supervised::AllDone));
        assert!(took >= Duration::from_millis(350), "{took:?}");
        // Ready, the signal, done: three events, each of which can end two waits (one when
        // its event is read before the ring, one when the ring comes), and the first wait.
        // A 10 ms timer would have made 35.
        assert!(sleeps <= 7, "{sleeps} waits in {took:?}");
    }

    #[test]
    fn a_signal_starts_the_grace_and_a_stuck_worker_is_named() {
        let (seen, took, _) = supervise_one(|events, doorbell, stop, signal_ring| {
            report(&events, doorbell, Event::Ready);
            std::thread::sleep(Duration::from_millis(50));
            terminate(stop, &signal_ring);
            // The worker never says it is done.
            std::thread::sleep(Duration::from_secs(10));
            drop(events);
        });
        assert!(matches!(seen, Supervised::Stuck(ref stuck) if stuck == &[0]));
        assert!(
            took >= STOP_GRACE && took < STOP_GRACE * 3,
            "{took:?} for a grace of {STOP_GRACE:?}"
        );
    }

    #[test]
    fn panic_messages_are_kept() {
        let caught = std::panic::catch_unwind(|| panic!("static text")).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "static text");
        let caught = std::panic::catch_unwind(|| panic!("formatted {}", 7)).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "formatted 7");
        let caught = std::panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "(no message)");
    }
}
