//! The results of a run: per-thread statistics merged bucket-wise, the self-checks, the
//! warnings, the human table and the machine-readable summary (schema in `loadgen/README.md`).
//!
//! ```text
//! ThreadStats × threads ──merge──▶ Report ─▶ table (stdout) / Summary (JSON) / hgrm / plot
//! ```

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use netstack::conn::RecoveryStats;
use serde::Serialize;

use crate::arrival::{ArrivalKind, GapCheck};
use crate::client::Protocol;
use crate::config::Idle;
use crate::config::{Config, ConfigEcho};
use crate::environment::Environment;
use crate::histogram::{LatencySet, OpKind, Percentiles, new_histogram};
use crate::tstamp::Timestamps;
use crate::verify::VerifyCounts;
use crate::worker::IntervalStats;
use crate::worker::{ErrorCounts, ThreadStats};

/// Version tag of the JSON summary; bumped when a documented field changes meaning (2: send
/// and reply times are kernel timestamps where the socket gives them; 3: `hits` and `misses`
/// count the keys of multi-gets too, and the op kinds `delete` and `multiget` exist).
pub const SCHEMA: &str = "memspin-loadgen/3";

/// Achieved/target rate below which the open-loop rate check fails.
pub const RATE_TOLERANCE: f64 = 0.02;

/// Share of the window's requests that waited for a free connection slot above which a run
/// that fell short of its schedule is past saturation (see [`Report::saturated`]).
pub const SATURATED_WAITED: f64 = 0.01;

/// Generator delay p50 above this share of the service time p50 is reported as suspect.
pub const GENERATOR_DELAY_SHARE: f64 = 0.10;

/// Share of replies with kernel stamps below which the report says the rest fell back.
pub const STAMP_COVERAGE: f64 = 0.99;

/// The kernel timestamps a run used, as decided before it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StampSummary {
    /// What the sockets were set up for.
    pub source: Timestamps,
    /// Why that differs from what was asked for, or `None`.
    pub note: Option<String>,
}

impl StampSummary {
    /// Exactly what `config` asked for, with no note.
    pub fn as_asked(config: &Config) -> StampSummary {
        StampSummary {
            source: config.timestamps,
            note: None,
        }
    }
}

/// Everything a run measured, merged over threads.
#[derive(Debug, Clone)]
pub struct Report {
    /// The configuration that ran.
    pub config: Config,
    /// Service time (from the actual send), per op, ns.
    pub service: LatencySet,
    /// Corrected latency (from the intended send), per op, ns; open loop only.
    pub corrected: Option<LatencySet>,
    /// Open loop: send lag (actual − intended), ns.
    pub send_lag: Histogram<u64>,
    /// Open loop: the generator's own share of the send lag, ns.
    pub generator_lag: Histogram<u64>,
    /// From a reply's kernel receive stamp to the generator handling it, ns.
    pub generator_delay: Histogram<u64>,
    /// The kernel timestamps used.
    pub timestamps: StampSummary,
    /// Measured replies whose send time was a kernel transmit stamp.
    pub tx_kernel: u64,
    /// Measured replies whose reply time was a kernel receive stamp.
    pub rx_kernel: u64,
    /// Connections on which `SO_TIMESTAMPING` could not be set.
    pub stamp_failures: u64,
    /// Thread time in the window the worker threads were runnable but waited for a CPU.
    pub cpu_wait: Duration,
    /// CPU time the worker threads used in the window.
    pub cpu: Duration,
    /// `--idle spin`: thread time in the window spent sleeping instead of spinning because the
    /// thread's core was shared.
    pub spin_paused: Duration,
    /// Replies per op kind, in `OpKind::ALL` order.
    pub counts: [u64; 6],
    /// Keys found by multi-gets.
    pub keys_hit: u64,
    /// Keys multi-gets found nothing for.
    pub keys_missed: u64,
    /// The time series: one entry per interval of the window, in order.
    pub intervals: Vec<Interval>,
    /// Where and how the run took place (`None` for a report not made by [`crate::run`]).
    pub environment: Option<Environment>,
    /// The window's start on the wall clock (for the interval log's time stamps).
    pub window_start: Option<SystemTime>,
    /// Error counters.
    pub errors: ErrorCounts,
    /// Verification counters (zero unless `--verify`).
    pub verify: VerifyCounts,
    /// Length of the measurement window.
    pub window: Duration,
    /// Open loop: arrivals due in the window.
    pub scheduled: u64,
    /// Requests sent in the window.
    pub sent: u64,
    /// Open loop: requests sent later than the late threshold.
    pub late: u64,
    /// Open loop: requests due in the window and never sent.
    pub never_sent: u64,
    /// Open loop: requests sent in the window after waiting for a free connection slot.
    pub backpressured: u64,
    /// Open loop: arrivals due before the window and still waiting at its start.
    pub backlog_start: u64,
    /// Open loop: arrivals due before the window's end and never sent.
    pub backlog_end: u64,
    /// Open loop: the longest any arrival of `backlog_end` had waited at the end.
    pub backlog_end_wait: Duration,
    /// Open loop: check of the intended inter-arrival gaps.
    pub schedule_check: Option<GapCheck>,
    /// Open loop: check of the gaps between actual sends.
    pub sent_check: Option<GapCheck>,
    /// Prefill: keys written and seconds taken.
    pub prefill: Option<PrefillStats>,
    /// Bypass client: its tables' loss-recovery counters over the window and the drain.
    pub recovery: Option<RecoveryStats>,
    /// `--steer`: the connections each of the server's workers serves.
    pub steer_connections: Option<Vec<usize>>,
    /// Loud messages about anything that makes the numbers suspect.
    pub warnings: Vec<String>,
}

/// One interval of the time series, merged over threads.
#[derive(Debug, Clone)]
pub struct Interval {
    /// Start, seconds after the window's start.
    pub start_s: f64,
    /// End, seconds after the window's start (the last one ends with the window).
    pub end_s: f64,
    /// What was recorded in it.
    pub stats: IntervalStats,
}

/// The prefill phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PrefillStats {
    /// Keys written, and keys given up on before they were sent (each key once).
    pub keys: u64,
    /// Keys not confirmed stored: error replies, and keys given up on with their server.
    pub errors: u64,
    /// Wall time, s.
    pub seconds: f64,
}

impl Report {
    /// Merges the threads' statistics.
    pub(crate) fn from_threads(
        config: &Config,
        threads: Vec<ThreadStats>,
        prefill_seconds: Option<f64>,
        timestamps: StampSummary,
    ) -> Report {
        let open = config.is_open_loop();
        let mut r = Report {
            config: config.clone(),
            service: LatencySet::new(),
            corrected: open.then(LatencySet::new),
            send_lag: new_histogram(),
            generator_lag: new_histogram(),
            generator_delay: new_histogram(),
            timestamps,
            tx_kernel: 0,
            rx_kernel: 0,
            stamp_failures: 0,
            cpu_wait: Duration::ZERO,
            cpu: Duration::ZERO,
            spin_paused: Duration::ZERO,
            counts: [0; 6],
            keys_hit: 0,
            keys_missed: 0,
            intervals: Vec::new(),
            environment: None,
            window_start: None,
            errors: ErrorCounts::default(),
            verify: VerifyCounts::default(),
            window: Duration::ZERO,
            scheduled: 0,
            sent: 0,
            late: 0,
            never_sent: 0,
            backpressured: 0,
            backlog_start: 0,
            backlog_end: 0,
            backlog_end_wait: Duration::ZERO,
            schedule_check: None,
            sent_check: None,
            prefill: None,
            recovery: None,
            steer_connections: None,
            warnings: Vec::new(),
        };
        let mut intended_gaps = Vec::new();
        let mut sent_gaps = Vec::new();
        let mut window_ns = 0u64;
        let mut prefill_keys = 0;
        let mut prefill_errors = 0;
        let mut thread_rate = 0.0;
        let mut unpinned = Vec::new();
        for t in threads {
            unpinned.extend(t.pin_failed);
            r.service.merge(&t.service);
            if let Some(c) = r.corrected.as_mut() {
                c.merge(&t.corrected);
            }
            r.send_lag.add(&t.send_lag).expect("same bounds");
            r.generator_lag.add(&t.generator_lag).expect("same bounds");
            r.generator_delay
                .add(&t.generator_delay)
                .expect("same bounds");
            r.tx_kernel += t.tx_kernel;
            r.rx_kernel += t.rx_kernel;
            r.stamp_failures += t.stamp_failures;
            r.cpu_wait += Duration::from_nanos(t.cpu_wait_ns);
            r.cpu += Duration::from_nanos(t.cpu_ns);
            r.spin_paused += Duration::from_nanos(t.spin_paused_ns);
            for (a, b) in r.counts.iter_mut().zip(t.counts) {
                *a += b;
            }
            r.keys_hit += t.keys_hit;
            r.keys_missed += t.keys_missed;
            r.errors.merge(&t.errors);
            r.verify.merge(&t.verify);
            r.scheduled += t.scheduled;
            r.sent += t.sent;
            r.late += t.late;
            r.never_sent += t.never_sent;
            r.backpressured += t.backpressured;
            r.backlog_start += t.backlog_start;
            r.backlog_end += t.backlog_end;
            if let Some(rec) = &t.recovery {
                r.recovery.get_or_insert_default().add(rec);
            }
            r.backlog_end_wait = r
                .backlog_end_wait
                .max(Duration::from_nanos(t.backlog_end_wait_ns));
            intended_gaps.extend(t.intended_gaps);
            sent_gaps.extend(t.sent_gaps);
            window_ns = window_ns.max(t.window_end_ns.saturating_sub(t.window_start_ns));
            prefill_keys += t.prefill_keys;
            prefill_errors += t.prefill_errors;
            thread_rate = t.thread_rate;
        }
        r.window = Duration::from_nanos(window_ns);
        if open && thread_rate > 0.0 {
            let mean_ns = 1e9 / thread_rate;
            r.schedule_check = Some(GapCheck::of(&mut intended_gaps, mean_ns, 0.0));
            // Bunching is judged above the sender's own timing jitter, its send lag p99.
            let jitter_ns = r.send_lag.value_at_quantile(0.99) as f64;
            r.sent_check = Some(GapCheck::of(&mut sent_gaps, mean_ns, jitter_ns));
        }
        if let Some(seconds) = prefill_seconds {
            r.prefill = Some(PrefillStats {
                keys: prefill_keys,
                errors: prefill_errors,
                seconds,
            });
        }
        r.warnings = r.find_warnings();
        if !unpinned.is_empty() {
            r.warnings.push(format!(
                "threads could not be pinned to cores {unpinned:?} (not in this process's CPU set?)"
            ));
        }
        r
    }

    /// Takes the merged intervals `(index, stats)` of the window: interval `index` covers
    /// `[index × I, (index + 1) × I)` of the window, the last one cut at its end.
    pub fn set_intervals(&mut self, intervals: Vec<(i64, IntervalStats)>) {
        let step = self.config.interval.as_secs_f64();
        let window = self.window.as_secs_f64();
        self.intervals = intervals
            .into_iter()
            .map(|(index, stats)| {
                let start_s = index as f64 * step;
                Interval {
                    start_s,
                    end_s: ((index + 1) as f64 * step).min(window).max(start_s),
                    stats,
                }
            })
            .collect();
    }

    /// Keys GETs found: single-key hits plus the keys multi-gets found.
    pub fn hits(&self) -> u64 {
        self.count(OpKind::GetHit) + self.keys_hit
    }

    /// Keys GETs found nothing for.
    pub fn misses(&self) -> u64 {
        self.count(OpKind::GetMiss) + self.keys_missed
    }

    /// Replies in the window.
    pub fn completed(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Replies per second over the window.
    pub fn ops_per_sec(&self) -> f64 {
        per_sec(self.completed(), self.window)
    }

    /// Open loop: requests sent per second over the window.
    pub fn achieved_rate(&self) -> f64 {
        per_sec(self.sent, self.window)
    }

    /// Open loop past saturation: fewer requests went out than the schedule produced (by more
    /// than [`RATE_TOLERANCE`]) and more than [`SATURATED_WAITED`] of them waited for a free
    /// connection slot, so the server (or `--connections` × `--pipeline`) was the limit, not
    /// the generator. The backlog then grows for as long as the run lasts
    /// (`backlog_end − backlog_start = scheduled − sent`).
    pub fn saturated(&self) -> bool {
        self.config.rate.is_some()
            && (self.sent as f64) < self.scheduled as f64 * (1.0 - RATE_TOLERANCE)
            && self.backpressured as f64 > SATURATED_WAITED * self.sent as f64
    }

    /// The generator's CPU time per request sent in the window, µs (0 when none was sent).
    pub fn cpu_per_request_us(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.cpu.as_secs_f64() * 1e6 / self.sent as f64
        }
    }

    /// Replies of one kind.
    pub fn count(&self, kind: OpKind) -> u64 {
        self.counts[kind.index()]
    }

    fn find_warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let c = &self.config;
        if self.completed() == 0 {
            w.push("no request completed in the measurement window".to_string());
        }
        if let Some(target) = c.rate {
            let achieved = self.achieved_rate();
            let gen_p99_us = Percentiles::of(&self.generator_lag).p99;
            let late_us = c.late_threshold.as_secs_f64() * 1e6;
            let waited = self.backpressured as f64 / self.sent.max(1) as f64;
            if self.saturated() {
                w.push(format!(
                    "PAST SATURATION: the server (or --connections × --pipeline) carried {achieved:.0}/s of the {target:.0}/s target ({:.1} %); {} requests ({:.1} %) waited for a free connection slot, and {} arrivals were still waiting at the end (the oldest for {:.1} ms, {} at the start): the corrected latency grows with the length of the run",
                    100.0 * achieved / target,
                    self.backpressured,
                    waited * 100.0,
                    self.backlog_end,
                    self.backlog_end_wait.as_secs_f64() * 1e3,
                    self.backlog_start
                ));
            } else if achieved < target * (1.0 - RATE_TOLERANCE) {
                let why = if waited > 0.01 {
                    format!(
                        "{:.1} % of requests waited for a free connection slot: the server (or too few connections × pipeline) is the limit",
                        waited * 100.0
                    )
                } else {
                    "the generator itself fell behind: add --threads or lower the rate".to_string()
                };
                w.push(format!(
                    "RATE NOT REACHED: sent {achieved:.0}/s of the {target:.0}/s target ({:.1} %); {why}",
                    100.0 * achieved / target
                ));
            }
            if gen_p99_us > late_us {
                w.push(format!(
                    "GENERATOR COULD NOT KEEP UP: its own send lag p99 is {gen_p99_us:.0} µs (threshold {late_us:.0} µs); the corrected latency includes this delay"
                ));
            }
            if waited > SATURATED_WAITED && !self.saturated() {
                w.push(format!(
                    "{} requests ({:.1} %) waited for a free connection slot (server stalled or saturated, or too few --connections × --pipeline); the corrected latency includes the wait",
                    self.backpressured,
                    waited * 100.0
                ));
            }
            if self.never_sent > 0 && !self.saturated() {
                w.push(format!(
                    "{} requests due in the window were never sent",
                    self.never_sent
                ));
            }
            // Sends can only be later than their schedule, never earlier: a late one that
            // shortens the next gap is a burst (the one-sided test for too many short gaps).
            // Gaps that are merely never shorter than the send path's own cost are not a
            // burst; what they delay is the send lag, checked above against --late-us.
            if let (ArrivalKind::Poisson, Some(s)) = (c.arrival, self.sent_check)
                && s.samples >= 100
                && s.bunched
            {
                w.push(format!(
                    "sent requests were bunched: more short inter-arrival gaps than a Poisson stream has (one-sided KS D+ = {:.4} > {:.4} at 5 %, gaps of {:.1} µs and more); backpressure or generator delay sent them in bursts",
                    s.ks_excess_short, s.ks_critical_one_sided_5pct, s.resolution_us
                ));
            }
        }
        if let Some(note) = &self.timestamps.note {
            w.push(note.clone());
        }
        let replies = self.completed();
        if self.timestamps.source != Timestamps::None && replies >= 100 {
            let share = |n: u64| n as f64 / replies as f64;
            if share(self.tx_kernel) < STAMP_COVERAGE || share(self.rx_kernel) < STAMP_COVERAGE {
                w.push(format!(
                    "kernel {} timestamps on only {} of {replies} sends and {} of {replies} replies: the others use the generator's own clock readings (the device may not stamp every packet)",
                    self.timestamps.source, self.tx_kernel, self.rx_kernel
                ));
            }
        }
        if self.stamp_failures > 0 {
            w.push(format!(
                "SO_TIMESTAMPING could not be set on {} connection(s): their times are the generator's own clock readings",
                self.stamp_failures
            ));
        }
        if !self.spin_paused.is_zero() {
            let per_thread = |d: Duration| {
                let share = d.as_secs_f64() / c.threads.max(1) as f64;
                (100.0 * share / self.window.as_secs_f64().max(1e-9)).min(100.0)
            };
            w.push(format!(
                "the generator's threads waited for their CPU {:.0} % of the window: their cores are shared (another busy process, or the server itself), so for {:.0} % of it they slept while replies were due instead of busy-polling against it, and replies waited for their wake-up (see the generator delay); give the generator cores of its own",
                per_thread(self.cpu_wait),
                per_thread(self.spin_paused)
            ));
        }
        let delay = Percentiles::of(&self.generator_delay);
        let service_p50 = Percentiles::of(&self.service.all()).p50;
        // Closed loop, a reply read later is a next request sent later. Open loop, requests
        // go out at their scheduled times, and a slow read delays one only when it holds the
        // slot the request waits for: the delay matters once requests wait for slots.
        let delays_sends = c.rate.is_none()
            || self.backpressured as f64 > SATURATED_WAITED * self.sent.max(1) as f64;
        if delay.count > 0 && delays_sends && delay.p50 > GENERATOR_DELAY_SHARE * service_p50 {
            let why = match c.idle {
                Idle::Sleep => "it sleeps while replies are due (--idle sleep)",
                Idle::Spin => {
                    "its core is shared, or it has more replies than it reads in time (add --threads)"
                }
            };
            let (arrival, stamps) = if self.timestamps.source == Timestamps::Device {
                ("their frame's arrival from the device", "device timestamps")
            } else {
                ("their arrival in the kernel", "kernel timestamps")
            };
            w.push(format!(
                "GENERATOR DELAY: replies waited {:.1} µs (p50) between {arrival} and the generator reading them, more than {:.0} % of the service time p50 ({service_p50:.1} µs): {why}. The service times exclude it ({stamps}), but each next request goes out that much later",
                delay.p50,
                GENERATOR_DELAY_SHARE * 100.0,
            ));
        }
        if self.errors.total() > 0 {
            let e = &self.errors;
            w.push(format!(
                "errors: refused {}, reset {}, timeout {}, protocol {}, aborted {}, server {}",
                e.refused, e.reset, e.timeout, e.protocol, e.aborted, e.server
            ));
        }
        if c.verify && self.verify.mismatches > 0 {
            let v = &self.verify;
            w.push(format!(
                "VERIFY FAILED: {} of {} checked values wrong ({} corrupt, {} stale)",
                v.mismatches, v.checked, v.corrupt, v.stale
            ));
        }
        if c.verify && self.verify.lost > 0 {
            w.push(format!(
                "verify: {} keys missing after a confirmed store (evicted or lost)",
                self.verify.lost
            ));
        }
        if let Some(p) = self.prefill
            && p.errors > 0
        {
            w.push(format!(
                "prefill: {} of {} keys not confirmed stored",
                p.errors, p.keys
            ));
        }
        w
    }

    /// The machine-readable summary (see `loadgen/README.md` for the schema).
    pub fn summary(&self) -> Summary {
        let c = &self.config;
        let lat = |s: &LatencySet| OpLatencies {
            all: Percentiles::of(&s.all()),
            get_hit: Percentiles::of(s.op(OpKind::GetHit)),
            get_miss: Percentiles::of(s.op(OpKind::GetMiss)),
            set: Percentiles::of(s.op(OpKind::Set)),
            delete: Percentiles::of(s.op(OpKind::Delete)),
            multiget: Percentiles::of(s.op(OpKind::MultiGet)),
            other: Percentiles::of(s.op(OpKind::Other)),
        };
        let gets = self.hits() + self.misses();
        let open = c.rate.is_some();
        let time_series = self
            .intervals
            .iter()
            .map(|i| {
                let span = i.end_s - i.start_s;
                IntervalJson {
                    start_s: i.start_s,
                    end_s: i.end_s,
                    ops: i.stats.completed,
                    ops_per_sec: if span > 0.0 {
                        i.stats.completed as f64 / span
                    } else {
                        0.0
                    },
                    errors: i.stats.errors,
                    service: Percentiles::of(&i.stats.service),
                    corrected: open.then(|| Percentiles::of(&i.stats.corrected)),
                }
            })
            .collect();
        let open_loop = c.rate.map(|target| OpenLoop {
            target_rate: target,
            scheduled_rate: per_sec(self.scheduled, self.window),
            achieved_rate: self.achieved_rate(),
            achieved_ratio: self.achieved_rate() / target,
            rate_ok: self.achieved_rate() >= target * (1.0 - RATE_TOLERANCE),
            scheduled: self.scheduled,
            sent: self.sent,
            late: self.late,
            late_threshold_us: c.late_threshold.as_secs_f64() * 1e6,
            never_sent: self.never_sent,
            backpressured: self.backpressured,
            backlog_start: self.backlog_start,
            backlog_end: self.backlog_end,
            backlog_end_wait_us: self.backlog_end_wait.as_secs_f64() * 1e6,
            saturated: self.saturated(),
            send_lag_us: Percentiles::of(&self.send_lag),
            generator_lag_us: Percentiles::of(&self.generator_lag),
            arrivals: c.arrival,
            schedule_check: self.schedule_check,
            sent_check: self.sent_check,
        });
        Summary {
            schema: SCHEMA,
            mode: if c.rate.is_some() {
                Mode::Open
            } else {
                Mode::Closed
            },
            protocol: c.protocol,
            label: c.label.clone(),
            config: ConfigEcho::from(c),
            duration_s: self.window.as_secs_f64(),
            ops: self.completed(),
            ops_per_sec: self.ops_per_sec(),
            counts: OpCounts {
                get_hit: self.count(OpKind::GetHit),
                get_miss: self.count(OpKind::GetMiss),
                set: self.count(OpKind::Set),
                delete: self.count(OpKind::Delete),
                multiget: self.count(OpKind::MultiGet),
                other: self.count(OpKind::Other),
            },
            hits: self.hits(),
            misses: self.misses(),
            hit_ratio: if gets == 0 {
                0.0
            } else {
                self.hits() as f64 / gets as f64
            },
            errors: ErrorSummary {
                counts: self.errors,
                total: self.errors.total(),
            },
            latency_us: Latencies {
                service: lat(&self.service),
                corrected: self.corrected.as_ref().map(lat),
                generator_delay: Percentiles::of(&self.generator_delay),
            },
            generator: GeneratorJson {
                cpu_wait_s: self.cpu_wait.as_secs_f64(),
                spin_paused_s: self.spin_paused.as_secs_f64(),
                cpu_s: self.cpu.as_secs_f64(),
                cpu_per_request_us: self.cpu_per_request_us(),
            },
            timestamps: TimestampsJson {
                source: self.timestamps.source,
                note: self.timestamps.note.clone(),
                replies: self.completed(),
                tx_kernel: self.tx_kernel,
                rx_kernel: self.rx_kernel,
            },
            open_loop,
            verify: c.verify.then_some(self.verify),
            prefill: self.prefill,
            recovery: self.recovery.as_ref().map(RecoveryJson::from),
            steer_connections: self.steer_connections.clone(),
            time_series,
            histograms: HistogramsJson {
                encoding: HISTOGRAM_ENCODING,
                service: encode_histogram(&self.service.all()),
                corrected: self.corrected.as_ref().map(|s| encode_histogram(&s.all())),
                generator_delay: encode_histogram(&self.generator_delay),
            },
            environment: self.environment.clone(),
            warnings: self.warnings.clone(),
        }
    }

    /// The human-readable result table.
    pub fn table(&self) -> String {
        let c = &self.config;
        let mut out = String::new();
        let mode = match c.rate {
            Some(r) => format!("open loop at {r:.0}/s ({})", c.arrival.name()),
            None => "closed loop".to_string(),
        };
        let _ = writeln!(
            out,
            "memspin-loadgen: {mode}, {} protocol, {} thread(s), {} connection(s), pipeline {}, {:.2} s window (+{:.2} s warm-up)",
            c.protocol.name(),
            c.threads,
            c.connections,
            c.pipeline,
            self.window.as_secs_f64(),
            c.warmup.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "throughput: {:.1} ops/s  (get hit {}, get miss {}, set {}, delete {}, multi-get {}, other {})",
            self.ops_per_sec(),
            self.count(OpKind::GetHit),
            self.count(OpKind::GetMiss),
            self.count(OpKind::Set),
            self.count(OpKind::Delete),
            self.count(OpKind::MultiGet),
            self.count(OpKind::Other)
        );
        if self.count(OpKind::MultiGet) > 0 {
            let _ = writeln!(
                out,
                "multi-get keys: {} found, {} missing ({} keys per request)",
                self.keys_hit, self.keys_missed, c.multiget
            );
        }
        let _ = writeln!(
            out,
            "{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "latency (µs)", "count", "p50", "p90", "p99", "p99.9", "p99.99", "max"
        );
        let mut rows = |label: &str, set: &LatencySet| {
            row(&mut out, &format!("{label} all"), &set.all());
            for kind in OpKind::ALL {
                if !set.op(kind).is_empty() {
                    row(
                        &mut out,
                        &format!("{label}   {}", kind.name()),
                        set.op(kind),
                    );
                }
            }
        };
        if let Some(corrected) = &self.corrected {
            rows("corrected", corrected);
        }
        rows("service", &self.service);
        if !self.generator_delay.is_empty() {
            row(&mut out, "generator delay", &self.generator_delay);
        }
        if c.rate.is_some() {
            row(&mut out, "send lag", &self.send_lag);
            let _ = writeln!(
                out,
                "open loop: target {:.0}/s, scheduled {:.0}/s, sent {:.0}/s ({:.2} % of target), late (>{:.0} µs) {}, never sent {}, waited for a connection {}",
                c.rate.unwrap_or_default(),
                per_sec(self.scheduled, self.window),
                self.achieved_rate(),
                100.0 * self.achieved_rate() / c.rate.unwrap_or(1.0),
                c.late_threshold.as_secs_f64() * 1e6,
                self.late,
                self.never_sent,
                self.backpressured
            );
            let _ = writeln!(
                out,
                "backlog: {} waiting at the start, {} at the end (the oldest for {:.1} ms){}",
                self.backlog_start,
                self.backlog_end,
                self.backlog_end_wait.as_secs_f64() * 1e3,
                if self.saturated() {
                    "; past saturation"
                } else {
                    ""
                }
            );
            for (label, check) in [
                ("scheduled", self.schedule_check),
                ("sent", self.sent_check),
            ] {
                if let Some(g) = check {
                    let _ = writeln!(
                        out,
                        "arrivals {label:<9}: {} gaps, mean {:.1} µs (expected {:.1}), CV {:.3}, KS D {:.4} (5 % critical {:.4}, p {:.3}) {}",
                        g.samples,
                        g.mean_gap_us,
                        g.expected_mean_gap_us,
                        g.cv,
                        g.ks_statistic,
                        g.ks_critical_5pct,
                        g.ks_p_value,
                        if g.looks_exponential {
                            "→ exponential".to_string()
                        } else if g.bunched {
                            format!(
                                "→ not exponential, bunched (D+ {:.4} > {:.4} from {:.1} µs)",
                                g.ks_excess_short, g.ks_critical_one_sided_5pct, g.resolution_us
                            )
                        } else {
                            format!(
                                "→ not exponential, not bunched (D+ {:.4} from {:.1} µs: no more short gaps than Poisson)",
                                g.ks_excess_short, g.resolution_us
                            )
                        }
                    );
                }
            }
        }
        let stamper = if self.timestamps.source == Timestamps::Device {
            "device"
        } else {
            "kernel"
        };
        let _ = writeln!(
            out,
            "timestamps: {} ({stamper} transmit stamps on {} of {} replies, receive stamps on {}); idle {}",
            self.timestamps.source,
            self.tx_kernel,
            self.completed(),
            self.rx_kernel,
            c.idle.name()
        );
        let e = &self.errors;
        let _ = writeln!(
            out,
            "errors: refused {}, reset {}, timeout {}, protocol {}, aborted {}, server {}",
            e.refused, e.reset, e.timeout, e.protocol, e.aborted, e.server
        );
        if let Some(r) = self.recovery.as_ref().map(RecoveryJson::from) {
            let _ = writeln!(
                out,
                "loss recovery (generator): probes {}, re-sends {}, repaired {}, spurious {}, smoltcp retransmits {}",
                r.probes, r.resends, r.repaired, r.spurious, r.smoltcp_retransmits
            );
        }
        let _ = writeln!(
            out,
            "generator CPU: {:.3} s in the window, {:.2} µs per request sent",
            self.cpu.as_secs_f64(),
            self.cpu_per_request_us()
        );
        if c.verify {
            let v = &self.verify;
            let _ = writeln!(
                out,
                "verify: checked {}, mismatches {} (corrupt {}, stale {}), lost {}",
                v.checked, v.mismatches, v.corrupt, v.stale, v.lost
            );
        }
        if let Some(p) = self.prefill {
            let _ = writeln!(
                out,
                "prefill: {} keys in {:.2} s, {} not stored",
                p.keys, p.seconds, p.errors
            );
        }
        for w in &self.warnings {
            let _ = writeln!(out, "WARNING: {w}");
        }
        out
    }
}

fn row(out: &mut String, label: &str, h: &Histogram<u64>) {
    let p = Percentiles::of(h);
    let _ = write!(out, "{label:<22}{:>10}", p.count);
    for v in p.columns() {
        let _ = write!(out, "{v:>10.1}");
    }
    out.push('\n');
}

fn per_sec(n: u64, window: Duration) -> f64 {
    let s = window.as_secs_f64();
    if s > 0.0 { n as f64 / s } else { 0.0 }
}

/// Closed or open loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Each connection sends its next request when a reply frees a slot.
    Closed,
    /// Requests are sent on an arrival schedule, whatever the replies do.
    Open,
}

/// The JSON summary of one run (schema `memspin-loadgen/2`, documented in `loadgen/README.md`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// `closed` or `open`.
    pub mode: Mode,
    /// `binary`, `text` or `meta`.
    pub protocol: Protocol,
    /// The run's name in reports (`--label`), or null.
    pub label: Option<String>,
    /// The run's parameters.
    pub config: ConfigEcho,
    /// Measurement window, s.
    pub duration_s: f64,
    /// Replies in the window.
    pub ops: u64,
    /// Replies per second.
    pub ops_per_sec: f64,
    /// Replies per op kind.
    pub counts: OpCounts,
    /// Keys found: GET hits plus the keys multi-gets found.
    pub hits: u64,
    /// Keys not found: GET misses plus the keys multi-gets missed.
    pub misses: u64,
    /// hits / (hits + misses), 0 without GETs.
    pub hit_ratio: f64,
    /// Error counters.
    pub errors: ErrorSummary,
    /// Latency percentiles, µs.
    pub latency_us: Latencies,
    /// How the generator's threads fared on their cores.
    pub generator: GeneratorJson,
    /// The kernel timestamps used.
    pub timestamps: TimestampsJson,
    /// Open-loop details; null in closed loop.
    pub open_loop: Option<OpenLoop>,
    /// Verification counters; null without `--verify`.
    pub verify: Option<VerifyCounts>,
    /// Prefill; null without `--prefill`.
    pub prefill: Option<PrefillStats>,
    /// The bypass client's loss recovery; null over kernel sockets.
    pub recovery: Option<RecoveryJson>,
    /// `--steer`: the connections each of the server's workers serves, by worker; null
    /// without it.
    pub steer_connections: Option<Vec<usize>>,
    /// One entry per `--interval` of the window.
    pub time_series: Vec<IntervalJson>,
    /// The whole run's histograms, lossless.
    pub histograms: HistogramsJson,
    /// Generator, machine and servers; null when not run by `memspin-loadgen`.
    pub environment: Option<Environment>,
    /// Loud messages; empty when nothing is suspect.
    pub warnings: Vec<String>,
}

/// One interval of the time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IntervalJson {
    /// Start, s after the window's start.
    pub start_s: f64,
    /// End, s after the window's start.
    pub end_s: f64,
    /// Replies recorded in it.
    pub ops: u64,
    /// `ops` per second of the interval.
    pub ops_per_sec: f64,
    /// Errors in it.
    pub errors: u64,
    /// Service time of its replies.
    pub service: Percentiles,
    /// Corrected latency of its replies; null in closed loop.
    pub corrected: Option<Percentiles>,
}

/// How the histograms in the JSON are encoded.
pub const HISTOGRAM_ENCODING: &str = "hdrhistogram-v2-deflate-base64-ns";

/// The whole run's histograms (all ops), each HdrHistogram's compressed V2 encoding in base64
/// (what a `.hlog` line carries), values in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistogramsJson {
    /// Always [`HISTOGRAM_ENCODING`].
    pub encoding: &'static str,
    /// Service time.
    pub service: String,
    /// Corrected latency; null in closed loop.
    pub corrected: Option<String>,
    /// Generator delay.
    pub generator_delay: String,
}

/// A histogram in [`HISTOGRAM_ENCODING`].
pub fn encode_histogram(h: &Histogram<u64>) -> String {
    use base64::Engine as _;
    use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("serializing into memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Reads a histogram written by [`encode_histogram`].
///
/// # Errors
/// A message when the text is not base64 or not a serialized histogram.
pub fn decode_histogram(text: &str) -> Result<Histogram<u64>, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| e.to_string())?;
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("{e:?}"))
}

/// Replies per op kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    /// GETs that found a value.
    pub get_hit: u64,
    /// GETs that found nothing.
    pub get_miss: u64,
    /// SETs stored.
    pub set: u64,
    /// DELETEs answered (deleted or not found).
    pub delete: u64,
    /// Multi-gets answered.
    pub multiget: u64,
    /// Error replies and refused stores.
    pub other: u64,
}

/// Error counters plus their total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ErrorSummary {
    /// The counters.
    #[serde(flatten)]
    pub counts: ErrorCounts,
    /// Their sum.
    pub total: u64,
}

/// Percentiles for all ops and per op kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpLatencies {
    /// Every reply.
    pub all: Percentiles,
    /// GET hits.
    pub get_hit: Percentiles,
    /// GET misses.
    pub get_miss: Percentiles,
    /// SETs.
    pub set: Percentiles,
    /// DELETEs.
    pub delete: Percentiles,
    /// Multi-gets.
    pub multiget: Percentiles,
    /// Other replies.
    pub other: Percentiles,
}

/// Service time and (open loop) corrected latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latencies {
    /// From the actual send to the reply.
    pub service: OpLatencies,
    /// From the intended send time to the reply; null in closed loop.
    pub corrected: Option<OpLatencies>,
    /// From a reply's kernel receive stamp to the generator handling it.
    pub generator_delay: Percentiles,
}

/// The bypass client's loss recovery at round-trip scale (netstack's counters).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RecoveryJson {
    /// Tail-loss probes sent.
    pub probes: u64,
    /// Copies sent again at once, not by a timer: the server acknowledged later data, or
    /// sent again data that they acknowledged.
    pub resends: u64,
    /// Copies sent again (probes and re-sends) that repaired a loss.
    pub repaired: u64,
    /// Copies sent again that the server already had.
    pub spurious: u64,
    /// Segments smoltcp sent again itself (its one-second timer, fast retransmit).
    pub smoltcp_retransmits: u64,
}

impl From<&RecoveryStats> for RecoveryJson {
    fn from(r: &RecoveryStats) -> Self {
        RecoveryJson {
            probes: r.probes,
            resends: r.sack_resends + r.peer_retransmit_resends,
            repaired: r.recovered,
            spurious: r.spurious,
            smoltcp_retransmits: r.smoltcp_retransmits,
        }
    }
}

/// How the generator's threads fared on their cores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GeneratorJson {
    /// Thread seconds in the window the threads were runnable but waited for a CPU.
    pub cpu_wait_s: f64,
    /// Thread seconds in the window spent sleeping instead of busy-polling because a thread's
    /// core was shared (`--idle spin`).
    pub spin_paused_s: f64,
    /// CPU seconds the threads used in the window.
    pub cpu_s: f64,
    /// `cpu_s` per request sent in the window, µs.
    pub cpu_per_request_us: f64,
}

/// Which kernel timestamps the times came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimestampsJson {
    /// `software`, `hardware` or `none`.
    pub source: Timestamps,
    /// Why the source differs from `config.timestamps`, or null.
    pub note: Option<String>,
    /// Measured replies.
    pub replies: u64,
    /// Of those, sent at a kernel transmit stamp.
    pub tx_kernel: u64,
    /// Of those, received at a kernel receive stamp.
    pub rx_kernel: u64,
}

/// Open-loop schedule keeping.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpenLoop {
    /// Requests per second asked for.
    pub target_rate: f64,
    /// Arrivals the schedule produced in the window, per second.
    pub scheduled_rate: f64,
    /// Requests actually sent in the window, per second.
    pub achieved_rate: f64,
    /// achieved_rate / target_rate.
    pub achieved_ratio: f64,
    /// achieved_rate within 2 % of the target (or above).
    pub rate_ok: bool,
    /// Arrivals due in the window.
    pub scheduled: u64,
    /// Requests sent in the window (whenever they were due): `scheduled + backlog_start −
    /// backlog_end`.
    pub sent: u64,
    /// Sent later than the threshold after their intended time.
    pub late: u64,
    /// The late threshold, µs.
    pub late_threshold_us: f64,
    /// Due in the window, never sent (still waiting at its end).
    pub never_sent: u64,
    /// Sent in the window after waiting for a free connection slot.
    pub backpressured: u64,
    /// Due before the window, still waiting at its start.
    pub backlog_start: u64,
    /// Due before the window's end, never sent.
    pub backlog_end: u64,
    /// How long the oldest of `backlog_end` had waited at the end, µs.
    pub backlog_end_wait_us: f64,
    /// Past saturation (see [`Report::saturated`]).
    pub saturated: bool,
    /// Send lag (actual − intended send time), µs.
    pub send_lag_us: Percentiles,
    /// Send lag of requests that found a free slot: the generator's own delay, µs.
    pub generator_lag_us: Percentiles,
    /// `poisson` or `uniform`.
    pub arrivals: ArrivalKind,
    /// Check of the scheduled gaps.
    pub schedule_check: Option<GapCheck>,
    /// Check of the gaps between actual sends.
    pub sent_check: Option<GapCheck>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;

    const README: &str = include_str!("../README.md");
    const OPS: [&str; 7] = [
        "all", "get_hit", "get_miss", "set", "delete", "multiget", "other",
    ];
    const P: [&str; 8] = [
        "count", "mean", "p50", "p90", "p99", "p99_9", "p99_99", "max",
    ];
    const G: [&str; 12] = [
        "samples",
        "mean_gap_us",
        "expected_mean_gap_us",
        "cv",
        "ks_statistic",
        "ks_critical_5pct",
        "ks_p_value",
        "looks_exponential",
        "ks_excess_short",
        "resolution_us",
        "ks_critical_one_sided_5pct",
        "bunched",
    ];

    /// Two threads' worth of plausible open-loop statistics.
    fn threads(open: bool) -> Vec<ThreadStats> {
        (0..2u64)
            .map(|t| {
                let mut s = ThreadStats::new();
                for i in 1..=1_000u64 {
                    let kind = OpKind::ALL[(i % 3) as usize];
                    s.service.record(kind, 20_000 + i * 10 + t);
                    if open {
                        s.corrected.record(kind, 25_000 + i * 10);
                        s.send_lag.record(1_000 + i).unwrap();
                        s.generator_lag.record(500 + i).unwrap();
                    }
                    s.counts[kind.index()] += 1;
                    // 0.5-1.5 µs: well under 10 % of the ~25 µs service time.
                    s.generator_delay.record(500 + i).unwrap();
                }
                s.tx_kernel = 1_000;
                s.rx_kernel = 1_000;
                s.cpu_wait_ns = 1_000_000;
                s.errors.timeout = if open { t } else { 0 };
                s.verify.checked = 600;
                s.scheduled = 1_000;
                s.sent = 1_000;
                s.late = 3;
                s.intended_gaps = (1..=999)
                    .map(|i| -(1.0 - f64::from(i) / 1000.0).ln() * 2e6)
                    .collect();
                s.sent_gaps = s.intended_gaps.clone();
                s.thread_rate = 500.0;
                s.window_start_ns = 0;
                s.window_end_ns = 2_000_000_000;
                s.prefill_keys = 50;
                if open {
                    s.recovery = Some(RecoveryStats {
                        probes: 2,
                        recovered: 1,
                        spurious: 1,
                        ..RecoveryStats::default()
                    });
                }
                s
            })
            .collect()
    }

    fn stamps() -> StampSummary {
        StampSummary {
            source: Timestamps::Software,
            note: None,
        }
    }

    fn config(open: bool) -> Config {
        Config {
            rate: open.then_some(1_000.0),
            verify: open,
            prefill: open,
            threads: 2,
            duration: Duration::from_secs(2),
            ..Config::default()
        }
    }

    /// Documented paths from the README table, with `{op}`, `P` and `G` expanded.
    fn documented() -> BTreeSet<String> {
        let begin = README
            .find("<!-- json-schema:begin -->")
            .expect("schema begin marker");
        let end = README
            .find("<!-- json-schema:end -->")
            .expect("schema end marker");
        let mut out = BTreeSet::new();
        for line in README[begin..end].lines().filter(|l| l.starts_with("| `")) {
            let path = line.split('`').nth(1).unwrap();
            let desc = line.splitn(3, '|').nth(2).unwrap_or_default();
            let ops: Vec<String> = if path.contains("{op}") {
                OPS.iter().map(|o| path.replace("{op}", o)).collect()
            } else {
                vec![path.to_string()]
            };
            for p in ops {
                let sub: &[&str] = if desc.contains("`P`") {
                    &P
                } else if desc.contains("`G`") {
                    &G
                } else {
                    &[]
                };
                out.insert(p.clone());
                out.extend(sub.iter().map(|s| format!("{p}.{s}")));
            }
        }
        out
    }

    /// Leaves and inner paths of `v`; arrays of objects are entered as `name[]` (a server's
    /// settings, names chosen by the server, are a leaf).
    fn paths(v: &Value, prefix: &str, leaves: &mut BTreeSet<String>, all: &mut BTreeSet<String>) {
        match v {
            Value::Object(map) if prefix != "environment.servers[].settings" => {
                for (k, v) in map {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    all.insert(p.clone());
                    paths(v, &p, leaves, all);
                }
            }
            Value::Array(items) if items.iter().any(Value::is_object) => {
                leaves.insert(prefix.to_string());
                let p = format!("{prefix}[]");
                for item in items {
                    paths(item, &p, leaves, all);
                }
            }
            _ => {
                leaves.insert(prefix.to_string());
            }
        }
    }

    fn json(open: bool) -> Value {
        let mut r = Report::from_threads(
            &config(open),
            threads(open),
            open.then_some(0.25),
            StampSummary::as_asked(&config(open)),
        );
        let mut interval = IntervalStats::new();
        interval.service.record(20_000).unwrap();
        interval.corrected.record(25_000).unwrap();
        interval.completed = 1;
        r.set_intervals(vec![(0, interval.clone()), (1, interval)]);
        // A server that is not there: its entry carries the error.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        r.environment = Some(Environment::capture(
            &["127.0.0.1:1".to_string()],
            &[closed],
            vec![0],
            Protocol::Binary,
            SystemTime::now(),
        ));
        let text = serde_json::to_string_pretty(&r.summary()).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn json_matches_the_readme() {
        let doc = documented();
        assert!(doc.len() > 100, "{}", doc.len());
        let v = json(true);
        let (mut leaves, mut all) = (BTreeSet::new(), BTreeSet::new());
        paths(&v, "", &mut leaves, &mut all);
        let undocumented: Vec<&String> = leaves.iter().filter(|p| !doc.contains(*p)).collect();
        assert!(
            undocumented.is_empty(),
            "emitted but not in README: {undocumented:?}"
        );
        let missing: Vec<&String> = doc.iter().filter(|p| !all.contains(*p)).collect();
        assert!(missing.is_empty(), "in README but not emitted: {missing:?}");
    }

    #[test]
    fn json_values_are_consistent() {
        let v = json(true);
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["mode"], "open");
        assert_eq!(v["protocol"], "binary");
        assert_eq!(v["ops"], 2_000);
        assert_eq!(v["duration_s"], 2.0);
        assert_eq!(v["ops_per_sec"], 1_000.0);
        assert_eq!(v["hits"], v["counts"]["get_hit"]);
        assert_eq!(v["misses"], v["counts"]["get_miss"]);
        let counts = &v["counts"];
        let sum: u64 = ["get_hit", "get_miss", "set", "other"]
            .iter()
            .map(|k| counts[k].as_u64().unwrap())
            .sum();
        assert_eq!(sum, 2_000);
        assert_eq!(v["errors"]["timeout"], 1);
        assert_eq!(v["errors"]["total"], 1);
        let svc = &v["latency_us"]["service"]["all"];
        assert_eq!(svc["count"], 2_000);
        assert!((svc["p50"].as_f64().unwrap() - 25.0).abs() < 0.1, "{svc}");
        assert!((svc["max"].as_f64().unwrap() - 30.0).abs() < 0.1, "{svc}");
        let cor = &v["latency_us"]["corrected"]["all"];
        assert!(cor["p99"].as_f64().unwrap() > svc["p99"].as_f64().unwrap());
        let ol = &v["open_loop"];
        assert_eq!(ol["target_rate"], 1_000.0);
        assert_eq!(ol["achieved_rate"], 1_000.0);
        assert_eq!(ol["rate_ok"], true);
        assert_eq!(ol["late"], 6);
        assert_eq!(ol["schedule_check"]["samples"], 1_998);
        assert_eq!(ol["schedule_check"]["looks_exponential"], true);
        assert_eq!(v["verify"]["checked"], 1_200);
        assert_eq!(v["prefill"]["keys"], 100);
        assert_eq!(v["config"]["rate"], 1_000.0);
        assert_eq!(v["config"]["servers"][0], "127.0.0.1:11211");
        // One timeout: a warning says so.
        assert!(
            v["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w.as_str().unwrap().contains("timeout 1"))
        );
    }

    #[test]
    fn closed_loop_json_has_nulls_where_the_readme_says() {
        let v = json(false);
        assert_eq!(v["mode"], "closed");
        for k in ["open_loop", "verify", "prefill"] {
            assert!(v[k].is_null(), "{k}");
        }
        assert!(v["latency_us"]["corrected"].is_null());
        assert!(v["config"]["rate"].is_null());
        assert_eq!(v["latency_us"]["service"]["all"]["count"], 2_000);
        assert_eq!(v["warnings"], serde_json::json!([]));
    }

    #[test]
    fn table_lists_both_latencies_and_the_warnings() {
        let r = Report::from_threads(&config(true), threads(true), None, stamps());
        let t = r.table();
        assert!(t.contains("open loop at 1000/s (poisson)"), "{t}");
        assert!(t.contains("corrected all"), "{t}");
        assert!(t.contains("service   get_hit"), "{t}");
        assert!(t.contains("send lag"), "{t}");
        assert!(t.contains("arrivals scheduled"), "{t}");
        assert!(
            t.contains("WARNING: errors: refused 0, reset 0, timeout 1"),
            "{t}"
        );
        let header = t.lines().find(|l| l.starts_with("latency (µs)")).unwrap();
        for col in ["p50", "p90", "p99", "p99.9", "p99.99", "max"] {
            assert!(header.contains(col), "{header}");
        }
        let closed = Report::from_threads(&config(false), threads(false), None, stamps()).table();
        assert!(
            !closed.contains("corrected") && !closed.contains("WARNING: RATE"),
            "{closed}"
        );
    }

    #[test]
    fn falling_behind_is_loud() {
        // The generator itself fell behind: no request waited for a slot.
        let mut t = threads(true);
        for s in &mut t {
            s.sent = 900; // 10 % short of the target
            s.generator_lag = new_histogram();
            s.generator_lag.record(5_000_000).unwrap();
        }
        let r = Report::from_threads(&config(true), t, None, stamps());
        assert!(!r.saturated());
        let starts = |p: &str| r.warnings.iter().any(|w| w.starts_with(p));
        assert!(starts("RATE NOT REACHED"), "{:?}", r.warnings);
        assert!(starts("GENERATOR COULD NOT KEEP UP"), "{:?}", r.warnings);
        assert!(!starts("PAST SATURATION"), "{:?}", r.warnings);
        assert!(!r.summary().open_loop.unwrap().rate_ok);
    }

    #[test]
    fn past_saturation_is_one_loud_warning_with_the_backlog() {
        // The server was the limit: a tenth of the requests waited for a slot, and the backlog
        // grew by what was not sent (1,000 + 10 = 900 + 110 per thread).
        let mut t = threads(true);
        for s in &mut t {
            (s.sent, s.backpressured) = (900, 90);
            (s.backlog_start, s.backlog_end) = (10, 110);
            s.backlog_end_wait_ns = 40_000_000;
        }
        let r = Report::from_threads(&config(true), t, None, stamps());
        assert!(r.saturated());
        let past: Vec<&String> = r
            .warnings
            .iter()
            .filter(|w| w.starts_with("PAST SATURATION"))
            .collect();
        assert_eq!(past.len(), 1, "{:?}", r.warnings);
        for part in [
            "carried 900/s of the 1000/s target",
            "180 requests (10.0 %) waited for a free connection slot",
            "220 arrivals were still waiting at the end (the oldest for 40.0 ms, 20 at the start)",
        ] {
            assert!(past[0].contains(part), "{part}: {}", past[0]);
        }
        // It replaces the shortfall's and the waiting's own warnings.
        assert!(
            !r.warnings
                .iter()
                .any(|w| w.starts_with("RATE NOT REACHED") || w.contains("never sent")),
            "{:?}",
            r.warnings
        );
        let ol = r.summary().open_loop.unwrap();
        assert!(ol.saturated && !ol.rate_ok);
        assert_eq!((ol.backlog_start, ol.backlog_end), (20, 220));
        assert_eq!(ol.backlog_end_wait_us, 40_000.0);
        assert!(r.table().contains("backlog: 20 waiting at the start, 220 at the end (the oldest for 40.0 ms); past saturation"), "{}", r.table());
    }

    #[test]
    fn in_open_loop_generator_delay_is_loud_only_once_requests_wait_for_slots() {
        let slow_reads = |waited: u64| {
            let mut t = threads(true);
            for s in &mut t {
                s.generator_delay = new_histogram();
                for _ in 0..1_000 {
                    s.generator_delay.record(3_000).unwrap();
                }
                s.backpressured = waited;
            }
            Report::from_threads(&config(true), t, None, stamps())
        };
        let delay = |r: &Report| {
            r.warnings
                .iter()
                .filter(|w| w.starts_with("GENERATOR DELAY"))
                .count()
        };
        // Every request went out at its time: a late read delayed none.
        assert_eq!(delay(&slow_reads(0)), 0, "{:?}", slow_reads(0).warnings);
        assert_eq!(delay(&slow_reads(10)), 0, "1 % is within the threshold");
        // 2 % waited for a slot, which a late read may have held.
        let loud = slow_reads(20);
        assert_eq!(delay(&loud), 1, "{:?}", loud.warnings);
    }

    #[test]
    fn generator_delay_over_a_tenth_of_the_service_time_is_loud() {
        // threads(): service p50 about 25 µs, generator delay about 1 µs: quiet.
        let quiet = Report::from_threads(&config(false), threads(false), None, stamps());
        assert!(quiet.warnings.is_empty(), "{:?}", quiet.warnings);
        assert!(
            quiet.table().contains("generator delay"),
            "{}",
            quiet.table()
        );
        // 3 µs: above 10 % of 25 µs.
        let mut t = threads(false);
        for s in &mut t {
            s.generator_delay = new_histogram();
            for _ in 0..1_000 {
                s.generator_delay.record(3_000).unwrap();
            }
        }
        let loud = Report::from_threads(&config(false), t, None, stamps());
        assert_eq!(loud.warnings.len(), 1, "{:?}", loud.warnings);
        assert!(
            loud.warnings[0].starts_with("GENERATOR DELAY: replies waited 3.0 µs (p50)")
                && loud.warnings[0].contains("(25.0 µs)"),
            "{:?}",
            loud.warnings
        );
        let v = serde_json::to_value(loud.summary()).unwrap();
        assert_eq!(v["latency_us"]["generator_delay"]["count"], 2_000);
        let p50 = v["latency_us"]["generator_delay"]["p50"].as_f64().unwrap();
        assert!((p50 - 3.0).abs() < 0.01, "{p50}");
    }

    #[test]
    fn timestamps_source_note_and_coverage_are_reported() {
        let fallback = StampSummary {
            source: Timestamps::Software,
            note: Some("hardware timestamps unavailable: lo has no hardware stamping".into()),
        };
        let mut t = threads(false);
        // Two sends in a hundred without their transmit stamp.
        t[0].tx_kernel = 960;
        let r = Report::from_threads(&config(false), t, None, fallback);
        let v = serde_json::to_value(r.summary()).unwrap();
        assert_eq!(v["config"]["timestamps"], "software");
        assert_eq!(v["config"]["idle"], "spin");
        assert_eq!(v["timestamps"]["source"], "software");
        assert_eq!(
            v["timestamps"]["note"],
            "hardware timestamps unavailable: lo has no hardware stamping"
        );
        assert_eq!(v["timestamps"]["replies"], 2_000);
        assert_eq!(v["timestamps"]["tx_kernel"], 1_960);
        assert_eq!(v["timestamps"]["rx_kernel"], 2_000);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("lo has no hardware stamping"));
        assert!(
            r.warnings[1].contains("on only 1960 of 2000 sends"),
            "{:?}",
            r.warnings
        );
        assert!(
            r.table().contains(
                "timestamps: software (kernel transmit stamps on 1960 of 2000 replies, receive stamps on 2000); idle spin"
            ),
            "{}",
            r.table()
        );
        // Without kernel stamps nothing is expected of them.
        let mut t = threads(false);
        for s in &mut t {
            (s.tx_kernel, s.rx_kernel) = (0, 0);
            s.generator_delay = new_histogram();
        }
        let none = StampSummary {
            source: Timestamps::None,
            note: None,
        };
        let r = Report::from_threads(&config(false), t, None, none);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert!(!r.table().contains("generator delay"), "{}", r.table());
        let v = serde_json::to_value(r.summary()).unwrap();
        assert_eq!(v["timestamps"]["source"], "none");
        assert!(v["timestamps"]["note"].is_null());
        assert_eq!(v["latency_us"]["generator_delay"]["count"], 0);
    }

    #[test]
    fn a_shared_core_is_reported() {
        let mut t = threads(false);
        t[0].spin_paused_ns = 500_000_000;
        t[0].cpu_wait_ns = 799_000_000;
        let r = Report::from_threads(&config(false), t, None, stamps());
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        // 0.8 s and 0.5 s of a 2 s window, over two threads.
        assert!(
            r.warnings[0].starts_with("the generator's threads waited for their CPU 20 %")
                && r.warnings[0].contains("for 12 % of it"),
            "{:?}",
            r.warnings
        );
        let v = serde_json::to_value(r.summary()).unwrap();
        assert_eq!(v["generator"]["cpu_wait_s"], 0.8);
        assert_eq!(v["generator"]["spin_paused_s"], 0.5);
    }
}
