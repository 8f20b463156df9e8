//! The prefill over a connection cut with SETs in flight. A fake memcached (binary protocol,
//! 127.0.0.1) reads some SETs on the generator's first connection, stores and answers none of
//! them, and closes it; then it either serves the reconnection, and every key must be stored
//! with no prefill error, or it is gone, and the prefill must give that connection's keys up
//! (counted) and the run still end on time. Needs no memcached.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use loadgen::config::Idle;
use loadgen::histogram::OpKind;
use loadgen::{Config, Report, run_with_stop};
use protocol::binary::{Opcode, ParseError, RequestRepr, ResponseRepr, Status};

/// No fake server thread outlives this, whatever the generator does.
const SERVER_LIFETIME: Duration = Duration::from_secs(30);
/// How often a server thread looks at its stop flag while it waits.
const POLL: Duration = Duration::from_millis(5);
/// SETs the first connection reads before it is cut (fewer than the prefill's 32 in flight).
const CUT_AFTER_SETS: usize = 10;
/// A run still going after this is stopped: a prefill that waits for ever fails its test
/// instead of hanging it.
const RUN_LIMIT: Duration = Duration::from_secs(10);

/// What the fake server does once it has cut the first connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterCut {
    /// Accepts the reconnection and answers as memcached would.
    Serve,
    /// Stops listening: every reconnection is refused (connections already open are served).
    Vanish,
}

/// State shared by the server's threads.
struct State {
    /// What a SET stored: key to value.
    items: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    /// Taken (`None`) when the server vanishes.
    listener: Mutex<Option<TcpListener>>,
    /// Whether the first binary connection was picked to be cut.
    cut_taken: AtomicBool,
    /// Connections that sent binary requests.
    binary_conns: AtomicUsize,
    after: AfterCut,
    stop: AtomicBool,
    started: Instant,
}

impl State {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed) && self.started.elapsed() < SERVER_LIFETIME
    }
}

/// A memcached that answers binary SET and GET from a map, on 127.0.0.1, stopped on drop.
struct FakeMemcached {
    addr: SocketAddr,
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

impl FakeMemcached {
    fn start(after: AfterCut) -> FakeMemcached {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            items: Mutex::new(HashMap::new()),
            listener: Mutex::new(Some(listener)),
            cut_taken: AtomicBool::new(false),
            binary_conns: AtomicUsize::new(0),
            after,
            stop: AtomicBool::new(false),
            started: Instant::now(),
        });
        let thread = {
            let state = state.clone();
            thread::spawn(move || accept_loop(&state))
        };
        FakeMemcached {
            addr,
            state,
            thread: Some(thread),
        }
    }

    fn stored(&self) -> usize {
        lock(&self.state.items).len()
    }
}

impl Drop for FakeMemcached {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Accepts connections, one thread each, while the listener lasts; joins them all.
fn accept_loop(state: &Arc<State>) {
    let mut conns = Vec::new();
    while state.running() {
        let accepted = lock(&state.listener).as_ref().map(TcpListener::accept);
        match accepted {
            Some(Ok((stream, _))) => {
                let state = state.clone();
                conns.push(thread::spawn(move || serve(stream, &state)));
            }
            Some(Err(e)) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
            Some(Err(e)) => panic!("accept: {e}"),
            None => thread::sleep(POLL),
        }
    }
    for c in conns {
        let _ = c.join();
    }
}

/// Serves one connection until the client closes it, the server stops, or it is the one to
/// cut. A connection that does not speak the binary protocol (the generator's text
/// `version`/`stats settings` question) is closed at once.
fn serve(mut stream: TcpStream, state: &State) {
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(POLL)).unwrap();
    stream.set_write_timeout(Some(SERVER_LIFETIME)).unwrap();
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut out = Vec::new();
    let mut binary = false;
    // On the connection to cut: the SETs it still reads before the cut.
    let mut cut_in: Option<usize> = None;
    while state.running() {
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => return,
        }
        if !binary {
            if buf[0] != 0x80 {
                return;
            }
            binary = true;
            state.binary_conns.fetch_add(1, Ordering::Relaxed);
            if !state.cut_taken.swap(true, Ordering::Relaxed) {
                cut_in = Some(CUT_AFTER_SETS);
            }
        }
        let mut used = 0;
        loop {
            let (request, len) = match RequestRepr::parse(&buf[used..], 1 << 20) {
                Ok(ok) => ok,
                Err(ParseError::Incomplete { .. }) => break,
                Err(e) => panic!("the generator sent a bad frame: {e}"),
            };
            used += len;
            if let Some(left) = cut_in.as_mut() {
                // Neither stored nor answered: the generator loses every SET in flight.
                *left -= usize::from(request.opcode == Opcode::Set);
                if *left == 0 {
                    if state.after == AfterCut::Vanish {
                        drop(lock(&state.listener).take());
                    }
                    return;
                }
                continue;
            }
            answer(&request, state, &mut out);
        }
        buf.drain(..used);
        if stream.write_all(&out).is_err() {
            return;
        }
        out.clear();
    }
}

/// Appends memcached's reply to `request` to `out`.
fn answer(request: &RequestRepr<'_>, state: &State, out: &mut Vec<u8>) {
    let mut reply = ResponseRepr {
        opcode: request.opcode,
        quiet: false,
        status: Status::NoError,
        opaque: request.opaque,
        cas: 1,
        extras: &[],
        key: &[],
        value: &[],
    };
    match request.opcode {
        Opcode::Set => {
            lock(&state.items).insert(request.key.to_vec(), request.value.to_vec());
            reply.emit_into(out);
        }
        Opcode::Get => {
            let items = lock(&state.items);
            match items.get(request.key) {
                Some(value) => {
                    reply.extras = &[0; 4];
                    reply.value = value;
                }
                None => reply.status = Status::KeyNotFound,
            }
            reply.emit_into(out);
        }
        _ => {
            reply.status = Status::UnknownCommand;
            reply.emit_into(out);
        }
    }
}

/// Two connections on one thread that sleeps while it waits: prefill with `--verify`, then
/// a short window of GETs only, so that whatever the server holds came from the prefill.
fn config(server: &FakeMemcached) -> Config {
    Config {
        servers: vec![server.addr],
        idle: Idle::Sleep,
        connections: 2,
        threads: 1,
        keys: 400,
        key_size: 12,
        prefill: true,
        verify: true,
        get_ratio: 1.0,
        duration: Duration::from_millis(300),
        warmup: Duration::ZERO,
        timeout: Duration::from_millis(500),
        progress: false,
        ..Config::default()
    }
}

/// Runs `cfg`, stopped (as by SIGINT) if it has not ended after [`RUN_LIMIT`]; returns the
/// report and how long the run took.
fn run_bounded(cfg: &Config) -> (Report, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (stop, done) = (stop.clone(), done.clone());
        thread::spawn(move || {
            let started = Instant::now();
            while !done.load(Ordering::Relaxed) && started.elapsed() < RUN_LIMIT {
                thread::sleep(POLL);
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    let started = Instant::now();
    let r = run_with_stop(cfg, stop).unwrap();
    let took = started.elapsed();
    done.store(true, Ordering::Relaxed);
    watchdog.join().unwrap();
    (r, took)
}

fn prefill(r: &Report) -> (u64, u64) {
    let p = r.prefill.expect("a prefill ran");
    (p.keys, p.errors)
}

// Regression: a connection that closed with prefill SETs in flight counted each as a prefill
// error and never sent it again, and the prefill ended without waiting for a connection that
// was down with keys unsent: under loss, keys were never stored.
#[test]
fn sets_cut_off_in_the_prefill_are_sent_again_and_every_key_is_stored() {
    let server = FakeMemcached::start(AfterCut::Serve);
    let (r, took) = run_bounded(&config(&server));
    assert!(took < RUN_LIMIT, "stopped after {took:?}: {}", r.table());
    assert!(
        server.state.cut_taken.load(Ordering::Relaxed),
        "no connection was cut"
    );
    assert!(
        server.state.binary_conns.load(Ordering::Relaxed) >= 3,
        "the cut connection was not reopened"
    );
    assert_eq!(prefill(&r), (400, 0), "{}", r.table());
    assert_eq!(server.stored(), 400, "keys the server never got");
    // Every GET of the window finds its key with the version the verifier expects.
    assert!(r.verify.checked > 0, "{}", r.table());
    assert_eq!(r.verify.mismatches, 0, "{}", r.table());
    assert_eq!(r.verify.lost, 0, "{}", r.table());
    assert_eq!(r.count(OpKind::GetMiss), 0, "{}", r.table());
    assert_eq!(r.errors.total(), 0, "{}", r.table());
}

#[test]
fn a_server_gone_in_the_prefill_has_its_keys_given_up_and_the_run_ends() {
    let server = FakeMemcached::start(AfterCut::Vanish);
    let (r, took) = run_bounded(&config(&server));
    // Four failures (the cut, then refusals after back-offs of 10, 20 and 40 ms) end the
    // prefill; then the 300 ms window.
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: {}",
        r.table()
    );
    // The other connection, open before the server went, stores its 200 keys; the cut one's
    // 200 are all given up, the 32 sent and lost and the 168 never sent alike.
    assert_eq!(prefill(&r), (400, 200), "{}", r.table());
    assert_eq!(server.stored(), 200);
    assert_eq!(r.verify.mismatches, 0, "{}", r.table());
}
