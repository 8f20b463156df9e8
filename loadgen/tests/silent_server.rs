//! A server that accepts connections and reads requests but never answers: every request the
//! loadgen sends must end as a timeout, each connection must be reopened, and the run must still
//! end on time. Needs no memcached.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use loadgen::{Config, run};

/// Accepts and drains connections on 127.0.0.1 until dropped.
struct SilentServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SilentServer {
    fn start() -> SilentServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (accepted, stop) = (accepted.clone(), stop.clone());
            thread::spawn(move || {
                let mut conns: Vec<TcpStream> = Vec::new();
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    while let Ok((s, _)) = listener.accept() {
                        s.set_nonblocking(true).unwrap();
                        conns.push(s);
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    // Read and forget, so the client's writes never block; drop closed ones.
                    conns.retain_mut(|s| !matches!(s.read(&mut buf), Ok(0)));
                    thread::sleep(Duration::from_millis(1));
                }
            })
        };
        SilentServer {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn unanswered_requests_time_out_and_their_connections_are_reopened() {
    let server = SilentServer::start();
    let cfg = Config {
        servers: vec![server.addr],
        connections: 8,
        threads: 1,
        duration: Duration::from_millis(1_000),
        warmup: Duration::ZERO,
        timeout: Duration::from_millis(200),
        progress: false,
        ..Config::default()
    };
    let started = Instant::now();
    let r = run(&cfg).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the run must end on its own"
    );
    assert_eq!(r.completed(), 0, "{}", r.table());
    // Every connection times out again and again: 200 ms, then a reconnect after 10 ms or more.
    assert!(r.errors.timeout >= 2 * 8, "{}", r.table());
    assert!(r.errors.timeout <= 5 * 8, "{}", r.table());
    assert_eq!(r.sent, r.errors.timeout + r.errors.aborted, "{}", r.table());
    assert!(
        server.accepted.load(Ordering::Relaxed) > 8,
        "timed-out connections are reopened"
    );
}
