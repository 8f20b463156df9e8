//! Hostile clients for the abuse tests, and the server-side figures they are judged by: the
//! server's resident memory (`VmRSS`), and the round-trip latency another client sees
//! meanwhile. Every loop here is bounded in count and time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The resident set of process `pid` in bytes (`VmRSS` in /proc/PID/status).
#[track_caller]
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// The highest resident set of `pid` sampled every 20 ms for `period`.
pub fn peak_rss_bytes(pid: u32, period: Duration) -> u64 {
    let end = Instant::now() + period;
    let mut peak = rss_bytes(pid);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        peak = peak.max(rss_bytes(pid));
    }
    peak
}

/// A connection that writes what it is told and never reads: whatever the server answers
/// stays in the server (and in the kernel's socket buffers, which are not the server's RSS).
pub struct Silent {
    stream: TcpStream,
}

impl Silent {
    /// Connects, with writes that give up after `timeout` (the server may stop reading).
    #[track_caller]
    pub fn connect(addr: SocketAddr) -> Silent {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_nodelay(true).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        Silent { stream }
    }

    /// Writes `bytes` as far as the server takes them within the write timeout; returns how
    /// many were written (a server that stops reading leaves the rest unwritten).
    pub fn send(&mut self, bytes: &[u8]) -> usize {
        let mut written = 0;
        while written < bytes.len() {
            match self.stream.write(&bytes[written..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => written += n,
            }
        }
        written
    }
}

/// A binary request header: `opcode`, key, extras and total body lengths, opaque 0.
pub fn binary_header(opcode: u8, key_len: u16, extras_len: u8, body_len: u32) -> [u8; 24] {
    let mut header = [0u8; 24];
    header[0] = 0x80;
    header[1] = opcode;
    header[2..4].copy_from_slice(&key_len.to_be_bytes());
    header[4] = extras_len;
    header[8..12].copy_from_slice(&body_len.to_be_bytes());
    header
}

/// A binary GET (quiet with `quiet`) of `key`.
pub fn binary_get(key: &[u8], quiet: bool) -> Vec<u8> {
    let opcode = if quiet { 0x09 } else { 0x00 };
    let mut frame = binary_header(opcode, key.len() as u16, 0, key.len() as u32).to_vec();
    frame.extend_from_slice(key);
    frame
}

/// Round trips of `version` from a fresh connection, one every `interval` for `period` (each
/// bounded by the client's 10 s timeout), measured from another thread while hostile
/// clients run. Join the handle for the latencies; a failed round trip counts as 10 s.
pub fn version_latencies(
    addr: SocketAddr,
    period: Duration,
    interval: Duration,
) -> JoinHandle<Vec<Duration>> {
    version_latencies_at_least(addr, period, interval, 0, period)
}

/// [`version_latencies`] that goes on past `period` until it has `samples` round trips, and
/// stops at `limit` whatever it has.
pub fn version_latencies_at_least(
    addr: SocketAddr,
    period: Duration,
    interval: Duration,
    samples: usize,
    limit: Duration,
) -> JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let started = Instant::now();
        let (end, limit) = (started + period, started + limit.max(period));
        let mut latencies = Vec::new();
        let mut buf = [0u8; 256];
        while (Instant::now() < end || latencies.len() < samples) && Instant::now() < limit {
            let start = Instant::now();
            let mut ok = stream.write_all(b"version\r\n").is_ok();
            let mut got = Vec::new();
            while ok && !got.ends_with(b"\r\n") {
                match stream.read(&mut buf) {
                    Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                    _ => ok = false,
                }
            }
            latencies.push(if ok {
                start.elapsed()
            } else {
                Duration::from_secs(10)
            });
            if !ok {
                break;
            }
            std::thread::sleep(interval);
        }
        latencies
    })
}

/// The largest of `latencies`, and how many there were.
pub fn worst(latencies: &[Duration]) -> (Duration, usize) {
    (
        latencies.iter().copied().max().unwrap_or_default(),
        latencies.len(),
    )
}

/// A client pipelining `block` (complete requests) as fast as the server takes it, and
/// reading every reply as fast as they come, on two threads, until stopped or `limit` passes.
pub struct Flooder {
    stop: Arc<AtomicBool>,
    /// Reply bytes read so far.
    pub received: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Flooder {
    /// Starts flooding `addr` with copies of `block`.
    #[track_caller]
    pub fn start(addr: SocketAddr, block: Vec<u8>, limit: Duration) -> Flooder {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        stream
            .set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let end = Instant::now() + limit;
        let mut writer = stream.try_clone().unwrap();
        let mut reader = stream;
        let writer_stop = Arc::clone(&stop);
        let reader_stop = Arc::clone(&stop);
        let reader_received = Arc::clone(&received);
        let threads = vec![
            std::thread::spawn(move || {
                while !writer_stop.load(Ordering::Relaxed) && Instant::now() < end {
                    if writer.write_all(&block).is_err() && Instant::now() >= end {
                        break;
                    }
                }
            }),
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 256 * 1024];
                while !reader_stop.load(Ordering::Relaxed) && Instant::now() < end {
                    match reader.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            reader_received.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(_) => {}
                    }
                }
            }),
        ];
        Flooder {
            stop,
            received,
            threads,
        }
    }

    /// Stops both threads and waits for them.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        self.received.load(Ordering::Relaxed)
    }
}
