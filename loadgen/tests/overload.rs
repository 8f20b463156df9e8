//! Past saturation the generator holds a server at its capacity: an open loop offered 3.5× the
//! most its connections were seen to carry sends as fast as a closed loop over as many
//! connections beside it, and the requests it sends show how long they waited.
//!
//! Against its own `memcached -U 0 -t 1` on a free loopback port (see `support`), with
//! generator threads that sleep while they wait (`--idle sleep`), so that on a 2-core machine
//! shared with other work they take no core from memcached while replies are due.

use std::thread;
use std::time::Duration;

use loadgen::config::Idle;
use loadgen::histogram::Percentiles;
use loadgen::{Config, Report, run};

mod support;

use support::Memcached;

/// Offered load, as a multiple of the most the open loop's connections were seen to carry.
const OVERLOAD: f64 = 3.5;
/// Connections of each of the two generators.
const CONNECTIONS: usize = 8;
/// Rounds whose ratio counts ...
const ROUNDS: usize = 3;
/// ... out of at most this many (see `a_round_counts`).
const MAX_ROUNDS: usize = 6;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `a` and `b` at the same time, each with its own generator thread and connections.
fn side_by_side(a: &Config, b: &Config) -> (Report, Report) {
    thread::scope(|s| {
        let a = s.spawn(|| run(a).unwrap());
        let b = s.spawn(|| run(b).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    })
}

#[test]
fn past_saturation_the_achieved_rate_stays_at_the_closed_loop_capacity() {
    let mc = Memcached::start();
    let closed = Config {
        servers: vec![mc.addr],
        idle: Idle::Sleep,
        connections: CONNECTIONS,
        threads: 1,
        duration: Duration::from_secs(1),
        warmup: Duration::from_millis(300),
        keys: 2_000,
        key_size: 12,
        // Far beyond any reply time here, so that a generator thread the machine does not run
        // for a while (it happens on a loaded 2-core machine) loses no request to a timeout.
        timeout: Duration::from_secs(10),
        progress: false,
        ..Config::default()
    };
    let (warmup_s, window_s) = (closed.warmup.as_secs_f64(), closed.duration.as_secs_f64());
    // The closed loop runs beside the open loop, over as many connections of its own, rather
    // than before it: on a machine shared with other work what memcached and the generators
    // get of the CPUs changes from one second to the next (closed loops a few seconds apart
    // differ by 2× here), and whatever it is, the two get the same share of memcached (it
    // serves its busy connections in turn) and of the CPUs (their threads do the same work per
    // request). So the open loop, once it holds all its connections busy, sends at the closed
    // loop's rate, whatever that is. The median of the rounds' ratios leaves out a round
    // where one of them was starved more than the other. The generator that let the warm-up's
    // backlog eat the window sent 0.25× the closed loop's rate here (the window's requests
    // were due after 1.05 s of 1.3 s).
    let mut ratios = Vec::new();
    let mut tables = String::new();
    // The most a closed loop over these connections carried beside as many others, so far: the
    // open loop is offered 3.5× it, so a closed loop measured while the machine ran slowly
    // cannot leave the open loop short of saturation.
    let mut highest = 0.0f64;
    for _ in 0..MAX_ROUNDS {
        if ratios.len() == ROUNDS {
            break;
        }
        let (a, b) = side_by_side(&closed, &closed);
        assert_eq!(
            a.errors.total() + b.errors.total(),
            0,
            "{}{}",
            a.table(),
            b.table()
        );
        highest = highest.max(a.ops_per_sec()).max(b.ops_per_sec());
        if highest == 0.0 {
            // Neither closed loop ran in its window: nothing to offer 3.5× of yet.
            continue;
        }
        let offered = OVERLOAD * highest;
        let open = Config {
            rate: Some(offered),
            ..closed.clone()
        };
        let (c, o) = side_by_side(&closed, &open);
        assert_eq!(c.errors.total(), 0, "{}", c.table());
        let capacity = c.ops_per_sec();
        highest = highest.max(capacity);
        let table = o.table();
        let achieved = o.achieved_rate();
        tables += &format!("closed {capacity:.0}/s beside open at {offered:.0}/s:\n{table}\n");
        // A round counts when the machine let both generators send in their windows: a thread
        // it did not run for the whole second (seen here with a load of 10 on 2 cores) says
        // nothing about how the generator paces.
        let a_round_counts = c.sent > 0 && o.sent > 0;
        if !a_round_counts {
            continue;
        }
        ratios.push(achieved / capacity);

        assert_eq!(o.errors.total(), 0, "{table}");
        assert!(o.saturated(), "{table}");
        assert!(
            o.warnings.iter().any(|w| w.starts_with("PAST SATURATION")),
            "{table}"
        );
        // Every request of the window waited for a slot, behind the warm-up's backlog.
        assert!(o.backpressured * 100 >= o.sent * 99, "{table}");
        assert!(
            o.backlog_start > 0 && o.backlog_end > o.backlog_start,
            "{table}"
        );
        assert_eq!(
            o.scheduled + o.backlog_start,
            o.sent + o.backlog_end,
            "{table}"
        );
        // The requests sent last waited longest. The one sent at `s` seconds after the schedule
        // started was due when the schedule had produced as many arrivals as the generator had
        // sent by then, at about s × A/λ (A the rate sent, λ the rate offered), so it waited
        // about s × (1 − A/λ); at the window's end s = warm-up + window. The corrected p99
        // must be at least half that: the half leaves room for A varying over the run (the
        // warm-up may have sent faster than the window) and for the p99 request having gone
        // out up to 1 % of the window before the end. Without the wait (latency from the
        // actual send) it would be the service time, a few milliseconds at most.
        let corrected = Percentiles::of(&o.corrected.as_ref().unwrap().all());
        let behind_us = (warmup_s + window_s) * (1.0 - achieved / offered) * 1e6;
        assert!(
            corrected.p99 >= 0.5 * behind_us,
            "corrected p99 {:.0} µs, expected about {behind_us:.0} µs\n{table}",
            corrected.p99
        );
    }
    assert_eq!(
        ratios.len(),
        ROUNDS,
        "too few rounds in which the machine ran both generators\n{tables}"
    );
    let ratio = median(ratios.clone());
    assert!(
        (0.9..=1.1).contains(&ratio),
        "open loop's rate / closed loop's beside it: median {ratio:.3} of {ratios:?}\n{tables}"
    );
}
