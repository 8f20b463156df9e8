//! Integration tests against stock memcached on 127.0.0.1.
//!
//! Each test starts its own `memcached -U 0 -t 1 -p PORT` on a free port and kills it when the
//! test ends, panics included. The binary is `/usr/bin/memcached` (or `$MEMCACHED`); when it is
//! missing the tests fail, they do not skip. Tests take a lock so they never overlap: they
//! measure time on a 2-core machine that other work shares. The tests of what the generator
//! measures at one request in flight pin memcached and the busy-polling generator (the default)
//! to different cores, as the benchmark scripts do; the others check behaviour (errors,
//! verification, rates, stalls) and let the generator sleep while it waits (`--idle sleep`, the
//! advice of docs/loadgen.md for two CPUs), so that other busy processes on the machine do not starve
//! it of its core.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use loadgen::arrival::ArrivalKind;
use loadgen::client::Protocol;
use loadgen::config::Idle;
use loadgen::histogram::{OpKind, Percentiles};
use loadgen::tstamp::Timestamps;
use loadgen::workload::KeyDist;
use loadgen::{Config, Report, RunError, run};

mod support;

use support::{Memcached, send_signal};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One generator thread that sleeps while it waits.
fn config(mc: &Memcached) -> Config {
    Config {
        servers: vec![mc.addr],
        idle: Idle::Sleep,
        connections: 4,
        threads: 1,
        duration: Duration::from_secs(2),
        warmup: Duration::from_millis(300),
        keys: 2_000,
        key_size: 12,
        progress: false,
        ..Config::default()
    }
}

#[test]
fn closed_loop_with_verify_has_no_mismatches_or_errors() {
    let _g = serial();
    let mc = Memcached::start();
    for (protocol, threads) in [
        (Protocol::Binary, 2),
        (Protocol::Text, 1),
        (Protocol::Meta, 1),
    ] {
        let cfg = Config {
            protocol,
            threads,
            pipeline: 4,
            verify: true,
            prefill: true,
            value_min: 16,
            value_max: 3_000,
            get_ratio: 0.7,
            key_dist: KeyDist::Zipf(0.99),
            duration: Duration::from_millis(1_500),
            ..config(&mc)
        };
        let r = run(&cfg).unwrap();
        assert!(
            r.completed() > 1_000,
            "{protocol:?}: only {} replies\n{}",
            r.completed(),
            r.table()
        );
        assert_eq!(r.errors.total(), 0, "{protocol:?}\n{}", r.table());
        assert_eq!(r.verify.mismatches, 0, "{protocol:?}\n{}", r.table());
        assert_eq!(r.verify.lost, 0, "{protocol:?}\n{}", r.table());
        assert!(
            r.verify.checked >= r.count(OpKind::GetHit),
            "{protocol:?}\n{}",
            r.table()
        );
        // Prefilled: every GET hits.
        assert_eq!(r.count(OpKind::GetMiss), 0, "{protocol:?}\n{}", r.table());
        assert_eq!(r.prefill.map(|p| (p.keys, p.errors)), Some((2_000, 0)));
        assert!(
            r.corrected.is_none(),
            "closed loop reports service time only"
        );
        // The generator delay holds the wake-up of a sleeping generator, so its check fires
        // here (it has tests of its own); nothing else may.
        let suspect: Vec<&String> = r
            .warnings
            .iter()
            .filter(|w| !w.starts_with("GENERATOR DELAY"))
            .collect();
        assert!(suspect.is_empty(), "{protocol:?}: {suspect:?}");
    }
}

/// The arrivals due in `r`'s window went out at `target`/s within 2 %, and the window sent at
/// least that many requests. It may send more: arrivals that waited at its start (a warm-up the
/// machine starved the generator in) go out in it too, and count (`Report::sent`).
#[track_caller]
fn assert_rate_reached(r: &Report, target: f64) {
    let window_s = r.window.as_secs_f64();
    let due_and_sent = (r.scheduled - r.never_sent) as f64 / window_s;
    assert!(
        (due_and_sent / target - 1.0).abs() <= 0.02,
        "due in the window and sent: {due_and_sent:.0}/s\n{}",
        r.table()
    );
    assert!(
        r.achieved_rate() >= target * 0.98,
        "sent {:.0}/s\n{}",
        r.achieved_rate(),
        r.table()
    );
}

#[test]
fn open_loop_rate_is_within_two_percent_of_the_target() {
    let _g = serial();
    let mc = Memcached::start();
    // Prefill without --verify: regression test for every connection writing every key.
    let cfg = Config {
        rate: Some(5_000.0),
        duration: Duration::from_secs(3),
        warmup: Duration::from_millis(500),
        prefill: true,
        ..config(&mc)
    };
    let r = run(&cfg).unwrap();
    assert_eq!(
        r.prefill.map(|p| (p.keys, p.errors)),
        Some((2_000, 0)),
        "each key written once"
    );
    assert_eq!(r.count(OpKind::GetMiss), 0, "{}", r.table());
    assert_rate_reached(&r, 5_000.0);
    // Every arrival due before the window's end went out before the window, in it, or never.
    assert_eq!(
        r.scheduled + r.backlog_start,
        r.sent + r.backlog_end,
        "{}",
        r.table()
    );
    assert!(r.never_sent * 1_000 <= r.scheduled, "{}", r.table());
    assert!(!r.saturated(), "{}", r.table());
    assert_eq!(r.errors.total(), 0, "{}", r.table());
    assert_eq!(r.completed(), r.sent, "{}", r.table());
    let check = r.schedule_check.expect("open loop checks its schedule");
    assert!(check.looks_exponential, "{check:?}");
    assert!(r.summary().open_loop.unwrap().rate_ok);

    // Evenly spaced arrivals reach the rate too, and the check says they are not exponential.
    let cfg = Config {
        arrival: ArrivalKind::Uniform,
        duration: Duration::from_secs(1),
        prefill: false,
        ..cfg
    };
    let r = run(&cfg).unwrap();
    assert_rate_reached(&r, 5_000.0);
    let check = r.schedule_check.unwrap();
    assert!(!check.looks_exponential && check.cv < 0.01, "{check:?}");
}

#[test]
fn a_200ms_server_stall_shows_in_corrected_latency_not_in_service_time() {
    let _g = serial();
    let mc = Memcached::start();
    let cfg = Config {
        rate: Some(2_000.0),
        duration: Duration::from_secs(3),
        warmup: Duration::from_millis(500),
        ..config(&mc)
    };
    let stopper = {
        let pid = mc.pid();
        thread::spawn(move || {
            // Well inside the window [0.5 s, 3.5 s] after the run starts.
            thread::sleep(Duration::from_millis(1_500));
            assert!(send_signal(pid, libc::SIGSTOP));
            thread::sleep(Duration::from_millis(200));
            assert!(send_signal(pid, libc::SIGCONT));
        })
    };
    let r = run(&cfg).unwrap();
    stopper.join().unwrap();
    let corrected = Percentiles::of(&r.corrected.as_ref().unwrap().all());
    let service = Percentiles::of(&r.service.all());
    assert!(
        corrected.p99_9 >= 100_000.0,
        "corrected p99.9 {} µs\n{}",
        corrected.p99_9,
        r.table()
    );
    assert!(
        service.p50 < 5_000.0,
        "service p50 {} µs\n{}",
        service.p50,
        r.table()
    );
    // The stall is visible as send lag of requests that waited for a connection, and nothing
    // was dropped or retried.
    assert!(r.backpressured > 0, "{}", r.table());
    assert!(
        Percentiles::of(&r.send_lag).max >= 100_000.0,
        "{}",
        r.table()
    );
    assert_eq!(r.errors.total(), 0, "{}", r.table());
    assert_eq!(
        r.scheduled + r.backlog_start,
        r.sent + r.backlog_end,
        "{}",
        r.table()
    );
    assert_eq!(r.completed(), r.sent, "{}", r.table());
}

#[test]
fn a_killed_server_is_counted_as_errors_and_the_run_still_ends() {
    let _g = serial();
    let mut mc = Memcached::start();
    let cfg = Config {
        rate: Some(2_000.0),
        duration: Duration::from_millis(1_500),
        warmup: Duration::from_millis(200),
        timeout: Duration::from_millis(300),
        ..config(&mc)
    };
    let killer = {
        let pid = mc.pid();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(800));
            assert!(send_signal(pid, libc::SIGKILL));
        })
    };
    let started = Instant::now();
    let r = run(&cfg).unwrap();
    killer.join().unwrap();
    let _ = mc.child.wait();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the run must end on its own"
    );
    let e = r.errors;
    assert!(e.reset >= 1, "{}", r.table());
    assert!(
        e.refused >= 1,
        "reconnects to a dead server are refused\n{}",
        r.table()
    );
    // Requests due while no connection was up were never sent, not silently dropped.
    assert!(r.never_sent + e.aborted + e.timeout > 0, "{}", r.table());
    assert!(r.completed() < r.scheduled, "{}", r.table());
    assert_eq!(
        r.scheduled + r.backlog_start,
        r.sent + r.backlog_end,
        "{}",
        r.table()
    );
    assert_eq!(
        r.sent,
        r.completed() + e.aborted + e.timeout,
        "{}",
        r.table()
    );
    assert!(!r.warnings.is_empty());
}

#[test]
fn no_server_is_a_start_up_error() {
    let _g = serial();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = Config {
        servers: vec![SocketAddr::from(([127, 0, 0, 1], port))],
        duration: Duration::from_millis(100),
        progress: false,
        ..Config::default()
    };
    match run(&cfg) {
        Err(RunError::Connect { kind, .. }) => {
            assert_eq!(kind, std::io::ErrorKind::ConnectionRefused)
        }
        other => panic!(
            "expected a connect error, got {:?}",
            other.map(|r| r.table())
        ),
    }
}

/// `curr_items` from memcached's `stats`.
fn curr_items(addr: SocketAddr) -> u64 {
    use std::io::{BufRead, BufReader, Write};
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"stats\r\n").unwrap();
    let reader = BufReader::new(s);
    for line in reader.lines() {
        let line = line.unwrap();
        if let Some(v) = line.strip_prefix("STAT curr_items ") {
            return v.trim().parse().unwrap();
        }
        assert_ne!(line, "END", "no curr_items in stats");
    }
    panic!("stats ended early");
}

#[test]
fn two_servers_split_the_keys_and_every_get_finds_its_key() {
    let _g = serial();
    let (a, b) = (Memcached::start(), Memcached::start());
    let cfg = Config {
        servers: vec![a.addr, b.addr],
        prefill: true,
        get_ratio: 1.0,
        duration: Duration::from_secs(1),
        ..config(&a)
    };
    let r = run(&cfg).unwrap();
    assert!(r.count(OpKind::GetHit) > 1_000, "{}", r.table());
    assert_eq!(r.count(OpKind::GetMiss), 0, "{}", r.table());
    assert_eq!(r.errors.total(), 0, "{}", r.table());
    assert_eq!((curr_items(a.addr), curr_items(b.addr)), (1_000, 1_000));
}

/// Sockets are edge-triggered: a read that fills the buffer must be followed by another, or the
/// bytes left in the socket are never reported and the connection waits for its timeout.
#[test]
fn pipelined_replies_larger_than_the_read_buffer_all_arrive() {
    let _g = serial();
    let mc = Memcached::start();
    let cfg = Config {
        // 32 replies of up to 8 KB in flight: up to 256 KiB, four times the 64 KiB read buffer.
        pipeline: 32,
        verify: true,
        prefill: true,
        value_min: 4_000,
        value_max: 8_000,
        get_ratio: 0.9,
        duration: Duration::from_millis(1_500),
        timeout: Duration::from_millis(500),
        ..config(&mc)
    };
    let r = run(&cfg).unwrap();
    assert!(r.completed() > 1_000, "{}", r.table());
    assert_eq!(r.errors.total(), 0, "{}", r.table());
    assert_eq!(r.verify.mismatches, 0, "{}", r.table());
    assert_eq!(r.completed(), r.sent, "{}", r.table());
}

/// Many connections with one request each: no reply is missed (a missed edge would be a
/// timeout) and every request sent is answered.
#[test]
fn five_hundred_connections_get_every_reply() {
    let _g = serial();
    let mc = Memcached::start();
    let cfg = Config {
        connections: 500,
        prefill: true,
        duration: Duration::from_millis(1_500),
        timeout: Duration::from_millis(500),
        ..config(&mc)
    };
    let r = run(&cfg).unwrap();
    assert!(r.completed() > 5_000, "{}", r.table());
    assert_eq!(r.errors.total(), 0, "{}", r.table());
    assert_eq!(r.completed(), r.sent, "{}", r.table());
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Two different cores for memcached and the generator (the first and the last this process
/// may use, as the benchmark scripts do): a busy-polling generator must not share its core with
/// the server, or each waits for the other's time slice. `None` on a single core.
fn two_cores() -> Option<(usize, usize)> {
    let cores = core_affinity::get_core_ids()?;
    let (first, last) = (cores.first()?.id, cores.last()?.id);
    (first != last).then_some((first, last))
}

/// The regression of issue "memspin-loadgen must not add its own wake-up to the latency it
/// reports": at one request in flight the generator used to sleep in epoll while the reply was
/// on its way, and its wake-up (25–30 µs on the development VM) landed in every sample: an open
/// loop at 5,000/s reported a service p50 of 63–66 µs where busy-polling before every arrival
/// (`--spin-us` larger than the gaps) gave 35–36 µs, and the closed loop 57 µs.
///
/// Here, against the same memcached: the default open loop's service p50 is within 15 % of
/// that busy-polling reference, and the default closed loop no more than 15 % above it (a
/// closed loop keeps memcached busy, so it may well be faster). `--idle sleep`, which still
/// sleeps while the reply is on its way, stays within 25 % above it because its times are
/// kernel timestamps (its wake-up alone is about as long as the whole service time, so without
/// them it would be near 100 % above; its idle core makes it noisier, hence the looser bound);
/// the wake-up is in its generator delay instead (printed, not compared: on a shared machine
/// the default mode sleeps too, see `SpinGuard`). Every reply has a generator delay.
///
/// The machine is shared: runs alternate, medians over five rounds are compared, a run in
/// which the generator got too little CPU to send 1,000 requests in its second is repeated
/// (the comparison needs its samples, not its throughput), and the whole comparison is tried
/// up to three times within three minutes.
#[test]
fn default_mode_service_time_matches_the_busy_polling_reference() {
    let _g = serial();
    let cores = two_cores();
    let mc = Memcached::start_on(cores.map(|c| c.0));
    let base = Config {
        cpus: cores.map(|c| vec![c.1]),
        idle: Idle::Spin,
        connections: 1,
        pipeline: 1,
        duration: Duration::from_millis(1_000),
        warmup: Duration::from_millis(300),
        ..config(&mc)
    };
    let open = Config {
        rate: Some(5_000.0),
        ..base.clone()
    };
    let reference = Config {
        spin: Duration::from_millis(20),
        ..open.clone()
    };
    let sleep = Config {
        idle: Idle::Sleep,
        ..open.clone()
    };
    assert_eq!(
        (open.idle, open.timestamps),
        (Config::default().idle, Config::default().timestamps)
    );
    let runs: [(&str, &Config); 4] = [
        ("reference", &reference),
        ("default open", &open),
        ("default closed", &base),
        ("sleep", &sleep),
    ];
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut tries = Vec::new();
    for attempt in 1..=3 {
        let mut p50 = vec![Vec::new(); runs.len()];
        let mut delay_p50 = vec![Vec::new(); runs.len()];
        let mut repeated = 0;
        for round in 0..5 {
            for k in 0..runs.len() {
                // Rotate the order so drift in the machine's load favours no one.
                let k = (k + round) % runs.len();
                let (name, cfg) = runs[k];
                let r: Report = loop {
                    let r = run(cfg).unwrap();
                    if r.completed() >= 1_000 || Instant::now() > deadline {
                        break r;
                    }
                    repeated += 1;
                };
                let service = Percentiles::of(&r.service.all());
                let delay = Percentiles::of(&r.generator_delay);
                assert!(service.count > 0, "{name}\n{}", r.table());
                assert_eq!(delay.count, service.count, "{name}\n{}", r.table());
                p50[k].push(service.p50);
                delay_p50[k].push(delay.p50);
            }
        }
        let p50: Vec<f64> = p50.into_iter().map(median).collect();
        let delay: Vec<f64> = delay_p50.into_iter().map(median).collect();
        let ratio = |k: usize| p50[k] / p50[0];
        let show = |v: &[f64]| -> String {
            let parts: Vec<String> = runs
                .iter()
                .zip(v)
                .map(|((n, _), x)| format!("{n} {x:.1}"))
                .collect();
            parts.join(", ")
        };
        let summary = format!(
            "attempt {attempt}: service p50 medians (µs): {}; generator delay p50 medians (µs): {}; {repeated} runs repeated",
            show(&p50),
            show(&delay)
        );
        eprintln!("{summary}");
        if (ratio(1) - 1.0).abs() <= 0.15 && ratio(2) <= 1.15 && ratio(3) <= 1.25 {
            return;
        }
        tries.push(summary);
        if Instant::now() > deadline {
            break;
        }
    }
    panic!(
        "the default mode is not within 15 % of the busy-polling reference:\n{}",
        tries.join("\n")
    );
}

#[test]
fn the_timestamp_source_is_in_the_json() {
    let _g = serial();
    let cores = two_cores();
    let mc = Memcached::start_on(cores.map(|c| c.0));
    let dir = std::env::temp_dir().join(format!("loadgen-stamps-{}", std::process::id()));
    let json = |cfg: &Config, name: &str| -> (Report, serde_json::Value) {
        let r = run(cfg).unwrap();
        let path = dir.join(format!("{name}.json"));
        loadgen::output::write_json(&path, &r).unwrap();
        let v = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        (r, v)
    };
    // The defaults (busy-polling, software stamps), the generator away from memcached.
    let base = Config {
        cpus: cores.map(|c| vec![c.1]),
        idle: Idle::Spin,
        duration: Duration::from_millis(500),
        warmup: Duration::from_millis(200),
        ..config(&mc)
    };
    assert_eq!(base.timestamps, Config::default().timestamps);

    // Software (the default): every send and every reply stamped by the kernel.
    let (r, v) = json(&base, "software");
    assert_eq!(v["config"]["timestamps"], "software");
    assert_eq!(v["timestamps"]["source"], "software");
    assert!(v["timestamps"]["note"].is_null());
    let replies = v["timestamps"]["replies"].as_u64().unwrap();
    assert!(replies > 100 && replies == r.completed(), "{}", r.table());
    assert_eq!(v["timestamps"]["tx_kernel"], replies, "{}", r.table());
    assert_eq!(v["timestamps"]["rx_kernel"], replies, "{}", r.table());
    assert_eq!(
        v["latency_us"]["generator_delay"]["count"],
        replies,
        "{}",
        r.table()
    );

    // Hardware on loopback: there is none; the run says so and uses software stamps.
    let (r, v) = json(
        &Config {
            timestamps: Timestamps::Hardware,
            ..base.clone()
        },
        "hardware",
    );
    assert_eq!(v["config"]["timestamps"], "hardware");
    assert_eq!(v["timestamps"]["source"], "software");
    let note = v["timestamps"]["note"].as_str().unwrap();
    assert!(
        note.contains("lo has no hardware stamping") && note.contains("software-receive"),
        "{note}"
    );
    assert!(r.warnings.iter().any(|w| w == note), "{:?}", r.warnings);
    assert_eq!(v["timestamps"]["tx_kernel"], v["timestamps"]["replies"]);

    // None: the generator's own clock, no generator delay to show.
    let (r, v) = json(
        &Config {
            timestamps: Timestamps::None,
            ..base.clone()
        },
        "none",
    );
    assert_eq!(v["timestamps"]["source"], "none");
    assert_eq!(v["timestamps"]["tx_kernel"], 0);
    assert_eq!(v["timestamps"]["rx_kernel"], 0);
    assert_eq!(v["latency_us"]["generator_delay"]["count"], 0);
    assert!(r.completed() > 100, "{}", r.table());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The meta protocol (`mg`, `ms`, `md`, `mn`), with every other request shape: multi-key GETs,
/// DELETEs, TTLs, weighted value sizes and gaussian keys, all with `--verify`, against
/// memcached; then the same shapes over the binary and text protocols.
#[test]
fn every_protocol_runs_multi_gets_deletes_and_ttls_with_verify() {
    let _g = serial();
    let mc = Memcached::start();
    for (protocol, multiget) in [
        (Protocol::Meta, 1),
        (Protocol::Meta, 4),
        (Protocol::Binary, 4),
        (Protocol::Text, 4),
    ] {
        let cfg = Config {
            protocol,
            pipeline: 4,
            verify: true,
            prefill: true,
            multiget,
            get_ratio: 0.6,
            delete_ratio: 0.1,
            ttl: 3_600,
            value_min: 16,
            value_max: 4_000,
            value_weights: vec![(16, 5), (500, 3), (4_000, 1)],
            key_dist: KeyDist::Gaussian(None),
            duration: Duration::from_millis(1_200),
            ..config(&mc)
        };
        let r = run(&cfg).unwrap();
        let what = format!("{protocol:?} multiget {multiget}");
        assert!(r.completed() > 500, "{what}\n{}", r.table());
        assert_eq!(r.errors.total(), 0, "{what}\n{}", r.table());
        assert_eq!(r.verify.mismatches, 0, "{what}\n{}", r.table());
        // Deleted keys miss, and a miss after a confirmed delete is no loss.
        assert_eq!(r.verify.lost, 0, "{what}\n{}", r.table());
        assert!(r.count(OpKind::Delete) > 20, "{what}\n{}", r.table());
        assert!(r.count(OpKind::Set) > 20, "{what}\n{}", r.table());
        if multiget > 1 {
            assert!(r.count(OpKind::MultiGet) > 100, "{what}\n{}", r.table());
            assert_eq!(r.count(OpKind::GetHit) + r.count(OpKind::GetMiss), 0);
            assert!(r.hits() > 0 && r.misses() > 0, "{what}\n{}", r.table());
            assert!(r.verify.checked >= r.hits(), "{what}\n{}", r.table());
        } else {
            assert!(r.count(OpKind::GetHit) > 100, "{what}\n{}", r.table());
        }
    }
    // The TTL reaches the server: a key written with a 1 s TTL is gone 2 s later.
    let cfg = Config {
        protocol: Protocol::Meta,
        prefill: true,
        ttl: 1,
        get_ratio: 1.0,
        keys: 200,
        duration: Duration::from_millis(300),
        warmup: Duration::ZERO,
        ..config(&mc)
    };
    let r = run(&cfg).unwrap();
    assert!(r.count(OpKind::GetHit) > 0, "{}", r.table());
    thread::sleep(Duration::from_millis(2_100));
    let r = run(&Config {
        prefill: false,
        ..cfg
    })
    .unwrap();
    assert_eq!(r.count(OpKind::GetHit), 0, "{}", r.table());
    assert!(r.count(OpKind::GetMiss) > 0, "{}", r.table());
}

/// The time series: its intervals' histograms add up to the whole run's, bucket by bucket,
/// and the interval log written from them reads back, through the hdrhistogram crate's log
/// reader, as the same histograms at the same times.
#[test]
fn interval_histograms_sum_to_the_whole_and_the_hlog_reads_back() {
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    let _g = serial();
    let mc = Memcached::start();
    let dir = std::env::temp_dir().join(format!("loadgen-hlog-{}", std::process::id()));
    for rate in [None, Some(3_000.0)] {
        let cfg = Config {
            rate,
            interval: Duration::from_millis(250),
            duration: Duration::from_millis(1_600),
            warmup: Duration::from_millis(300),
            ..config(&mc)
        };
        let r = run(&cfg).unwrap();
        // 1.6 s in 250 ms intervals: seven, the last one 100 ms long.
        assert_eq!(r.intervals.len(), 7, "{rate:?}");
        let last = r.intervals.last().unwrap();
        assert!((last.start_s - 1.5).abs() < 1e-9 && (last.end_s - 1.6).abs() < 1e-6);
        let mut service = loadgen::histogram::new_histogram();
        let mut corrected = loadgen::histogram::new_histogram();
        let mut ops = 0;
        for i in &r.intervals {
            service.add(&i.stats.service).unwrap();
            corrected.add(&i.stats.corrected).unwrap();
            ops += i.stats.completed;
            assert!(
                i.stats.completed > 0,
                "{rate:?}: an empty interval\n{}",
                r.table()
            );
        }
        assert_eq!(ops, r.completed());
        let same = |a: &hdrhistogram::Histogram<u64>, b: &hdrhistogram::Histogram<u64>| {
            a.len() == b.len()
                && a.iter_recorded().zip(b.iter_recorded()).all(|(x, y)| {
                    x.value_iterated_to() == y.value_iterated_to()
                        && x.count_at_value() == y.count_at_value()
                })
                && a.iter_recorded().count() == b.iter_recorded().count()
        };
        let whole = r.service.all();
        assert!(
            same(&service, &whole),
            "{rate:?}: intervals {} values, max {}; whole {} values, max {}",
            service.len(),
            service.max(),
            whole.len(),
            whole.max()
        );
        if let Some(c) = &r.corrected {
            assert!(same(&corrected, &c.all()), "{rate:?}");
        } else {
            assert!(corrected.is_empty());
        }
        let v = serde_json::to_value(r.summary()).unwrap();
        assert_eq!(v["time_series"].as_array().unwrap().len(), 7);
        assert_eq!(v["environment"]["servers"][0]["version"], "1.6.18", "{v:#}");
        assert_eq!(
            v["environment"]["servers"][0]["settings"]["maxconns"],
            "1024"
        );
        // The interval log.
        let path = dir.join(format!("run-{}.hlog", rate.is_some()));
        loadgen::output::write_hlog(&path, &r).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut read = Vec::new();
        let mut start_time = None;
        for entry in IntervalLogIterator::new(&bytes) {
            match entry.unwrap() {
                LogEntry::StartTime(t) => start_time = Some(t),
                LogEntry::BaseTime(_) => {}
                LogEntry::Interval(h) => {
                    let decoded: hdrhistogram::Histogram<u64> = Deserializer::new()
                        .deserialize(&mut base64_decode(h.encoded_histogram()).as_slice())
                        .unwrap();
                    read.push((
                        h.tag().map(|t| t.as_str().to_string()),
                        h.start_timestamp(),
                        decoded,
                    ));
                }
            }
        }
        let window_start = r.window_start.unwrap();
        let since_epoch = window_start.duration_since(std::time::UNIX_EPOCH).unwrap();
        let start_time = start_time.expect("a StartTime line");
        assert!(
            start_time.abs_diff(since_epoch) < Duration::from_millis(1),
            "{start_time:?} vs {since_epoch:?}"
        );
        let per_interval = if rate.is_some() { 2 } else { 1 };
        assert_eq!(read.len(), 7 * per_interval);
        for (k, i) in r.intervals.iter().enumerate() {
            let (tag, at, h) = &read[k * per_interval];
            assert_eq!(*tag, None);
            assert!((at.as_secs_f64() - i.start_s).abs() < 1e-3);
            let want = if rate.is_some() {
                &i.stats.corrected
            } else {
                &i.stats.service
            };
            assert!(same(h, want) && !h.is_empty(), "interval {k}");
            if rate.is_some() {
                let (tag, _, h) = &read[k * per_interval + 1];
                assert_eq!(tag.as_deref(), Some("service"));
                assert!(same(h, &i.stats.service), "interval {k}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}
