//! Open-loop pacing: which arrival a free connection slot sends next, when a waiting thread must
//! wake, and how the arrivals of a run are accounted for.
//!
//! The schedule is the queue. The arrivals due by now and not yet sent are the backlog; a free
//! slot takes the oldest of them, which keeps its intended send time. Nothing is done for an
//! arrival while every slot is busy: [`Pacer::wake_at`] then names no time, the thread waits for
//! a reply as it does in closed loop, and the slot that reply frees takes the oldest due arrival
//! at once. So a request costs the same whether one arrival waits or millions (the tests below
//! run a simulated server of fixed capacity at 4× its capacity and count the work per request).
//!
//! ```text
//! Schedule ─peek ≤ now, a slot free─▶ take ─▶ Arrival { intended_ns, measured, waited }
//!     every slot busy: wake_at = None ─▶ wait for a reply ─▶ its slot takes the oldest due one
//! ```
//!
//! **What a window counts.** A request is measured when it is sent in the window `[t0, t_end)`
//! (or at its end, for the arrivals due before `t_end` that the loop had not reached), whatever
//! its intended time. Past saturation the requests a window sends were due long before it, in
//! the warm-up too, and their waits are what the corrected latency has to show; the window's
//! send rate is the server's capacity. Arrivals due before `t0` and still waiting when it comes
//! are `backlog_start`; arrivals due before `t_end` and never sent are `backlog_end`, of which
//! `never_sent` were due in the window. Every arrival due before `t_end` is sent before the
//! window, in it, or never, so `scheduled + backlog_start = sent + backlog_end` exactly
//! ([`PacerCounts`]).

use crate::arrival::Schedule;

/// Most inter-arrival gaps a thread keeps for the self-check.
pub const MAX_GAP_SAMPLES: usize = 200_000;

/// One arrival taken for sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// When it was due, run-clock ns.
    pub intended_ns: u64,
    /// It goes out in the window (see the module documentation).
    pub measured: bool,
    /// It fell due before the last moment a slot freed after every slot had been busy: it waited
    /// for a connection slot, not (only) for the generator.
    pub waited: bool,
}

/// What the pacer counted; valid once [`Pacer::close`] ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacerCounts {
    /// Arrivals due in the window.
    pub scheduled: u64,
    /// Arrivals taken while the window was open (the requests sent in it).
    pub sent: u64,
    /// Arrivals due before the window and still waiting at its start.
    pub backlog_start: u64,
    /// Arrivals due before the window's end and never sent.
    pub backlog_end: u64,
    /// Of `backlog_end`, those due in the window.
    pub never_sent: u64,
    /// How long the oldest arrival of `backlog_end` had waited at the end, ns (0 when none).
    pub backlog_end_wait_ns: u64,
}

/// One thread's open-loop pacing over its schedule (see the module documentation).
#[derive(Debug, Clone)]
pub struct Pacer {
    schedule: Schedule,
    t0: u64,
    t_end: u64,
    open: bool,
    closed: bool,
    /// The last time a slot freed while every slot had been busy.
    freed_ns: u64,
    counts: PacerCounts,
    last_intended_ns: Option<u64>,
    intended_gaps: Vec<f64>,
}

impl Pacer {
    /// Paces `schedule` for a window `[t0, t_end)` of the run clock.
    pub fn new(schedule: Schedule, t0: u64, t_end: u64) -> Pacer {
        Pacer {
            schedule,
            t0,
            t_end,
            open: false,
            closed: false,
            freed_ns: 0,
            counts: PacerCounts::default(),
            last_intended_ns: None,
            intended_gaps: Vec::new(),
        }
    }

    /// The oldest arrival due by `now` and before the window's end, for a free slot; `None` when
    /// none is due (or after [`Pacer::close`]). Call it only with a slot to send it on.
    #[inline]
    pub fn take(&mut self, now: u64) -> Option<Arrival> {
        if self.closed {
            return None;
        }
        if !self.open && now >= self.t0 {
            self.open_window();
        }
        if !self.is_due(now) {
            return None;
        }
        let t = self.schedule.advance();
        if t >= self.t0 {
            self.count_scheduled(t);
        }
        if self.open {
            self.counts.sent += 1;
        }
        Some(Arrival {
            intended_ns: t,
            measured: self.open,
            waited: t < self.freed_ns,
        })
    }

    /// Whether [`Pacer::take`] at `now` would return an arrival.
    #[inline]
    pub fn is_due(&self, now: u64) -> bool {
        let t = self.schedule.peek_ns();
        !self.closed && t <= now && t < self.t_end
    }

    /// When a thread with `free_slots` free slots must be up to send the next arrival: its due
    /// time, or `None` when every slot is busy (only a reply can change anything then) or
    /// nothing more is due before the window's end.
    #[inline]
    pub fn wake_at(&self, free_slots: usize) -> Option<u64> {
        let t = self.schedule.peek_ns();
        (free_slots > 0 && !self.closed && t < self.t_end).then_some(t)
    }

    /// A slot freed at `now` after every slot had been busy: arrivals due before `now` that are
    /// still waiting waited for it.
    #[inline]
    pub fn slot_freed_after_all_busy(&mut self, now: u64) {
        self.freed_ns = self.freed_ns.max(now);
    }

    /// Ends the window at `end_ns` if that is earlier than planned (a stop request); arrivals
    /// due from then on are never taken.
    pub fn end_at(&mut self, end_ns: u64) {
        self.t_end = self.t_end.min(end_ns);
    }

    /// Counts what is still waiting at the end as never sent; nothing is taken afterwards.
    ///
    /// Walks the arrivals still waiting, once: its cost is that of drawing them.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        if !self.open {
            self.open_window();
        }
        self.closed = true;
        let first = self.schedule.peek_ns();
        if first < self.t_end {
            self.counts.backlog_end_wait_ns = self.t_end - first;
        }
        while self.schedule.peek_ns() < self.t_end {
            let t = self.schedule.advance();
            self.counts.backlog_end += 1;
            if t >= self.t0 {
                self.counts.never_sent += 1;
                self.count_scheduled(t);
            }
        }
    }

    /// What was counted so far (all of it after [`Pacer::close`]).
    pub fn counts(&self) -> PacerCounts {
        self.counts
    }

    /// Gaps between the intended times of consecutive arrivals due in the window (a sample of
    /// at most [`MAX_GAP_SAMPLES`]), ns.
    pub fn take_intended_gaps(&mut self) -> Vec<f64> {
        std::mem::take(&mut self.intended_gaps)
    }

    /// The window opens: counts the arrivals due before it that still wait (walking a copy of
    /// the schedule over them, once).
    fn open_window(&mut self) {
        self.open = true;
        let mut ahead = self.schedule.clone();
        while ahead.peek_ns() < self.t0.min(self.t_end) {
            ahead.advance();
            self.counts.backlog_start += 1;
        }
    }

    fn count_scheduled(&mut self, t: u64) {
        self.counts.scheduled += 1;
        if let Some(prev) = self.last_intended_ns
            && self.intended_gaps.len() < MAX_GAP_SAMPLES
        {
            self.intended_gaps.push(t.saturating_sub(prev) as f64);
        }
        self.last_intended_ns = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::arrival::ArrivalKind;

    const MS: u64 = 1_000_000;

    /// What a simulated run measured.
    #[derive(Debug)]
    struct SimRun {
        counts: PacerCounts,
        /// Requests sent in the window per second.
        achieved: f64,
        /// Corrected latencies (reply − intended) of the measured requests, ns, sorted.
        corrected: Vec<u64>,
        /// Requests that waited for a slot.
        waited: u64,
        /// Times the generator's loop ran (each wake-up), over the whole run.
        wakeups: u64,
        /// Calls to `take`, over the whole run.
        takes: u64,
        /// Requests sent, over the whole run.
        sends: u64,
    }

    /// A generator with `slots` connection slots against a server that answers every request
    /// `service_ns` after it was sent (so its capacity is `slots / service_ns`), driven as the
    /// worker drives its pacer: at a wake-up it takes due arrivals while a slot is free; a reply
    /// frees its slot and takes the oldest due arrival on it at once; it sleeps until the next
    /// reply or until `wake_at` (whichever is first). Poisson arrivals at `rate`, a warm-up of
    /// `warmup_ns` from 0, then the window.
    fn simulate(
        rate: f64,
        slots: usize,
        service_ns: u64,
        warmup_ns: u64,
        window_ns: u64,
    ) -> SimRun {
        let schedule = Schedule::new(ArrivalKind::Poisson, rate, 0, 0.0, 7);
        let (t0, t_end) = (warmup_ns, warmup_ns + window_ns);
        let mut p = Pacer::new(schedule, t0, t_end);
        // Replies due, in send order (every request takes the same time, so also reply order):
        // (reply time, intended time, measured).
        let mut in_flight: VecDeque<(u64, u64, bool)> = VecDeque::new();
        let mut run = SimRun {
            counts: PacerCounts::default(),
            achieved: 0.0,
            corrected: Vec::new(),
            waited: 0,
            wakeups: 0,
            takes: 0,
            sends: 0,
        };
        let send = |p: &mut Pacer,
                    in_flight: &mut VecDeque<(u64, u64, bool)>,
                    run: &mut SimRun,
                    now: u64| {
            run.takes += 1;
            let Some(a) = p.take(now) else {
                return false;
            };
            assert!(a.intended_ns <= now, "{a:?} taken at {now}");
            run.sends += 1;
            run.waited += u64::from(a.waited && a.measured);
            in_flight.push_back((now + service_ns, a.intended_ns, a.measured));
            true
        };
        let mut now = 0;
        let mut ended = false;
        loop {
            run.wakeups += 1;
            if !ended && now >= t_end {
                ended = true;
                p.end_at(now);
                while in_flight.len() < slots && send(&mut p, &mut in_flight, &mut run, now) {}
                p.close();
            }
            // Replies due by now: each frees a slot that takes the oldest due arrival at once.
            while in_flight.front().is_some_and(|r| r.0 <= now) {
                let (reply_ns, intended_ns, measured) = in_flight.pop_front().unwrap();
                if in_flight.len() + 1 == slots {
                    p.slot_freed_after_all_busy(reply_ns);
                }
                if measured {
                    run.corrected.push(reply_ns - intended_ns);
                }
                if !ended {
                    send(&mut p, &mut in_flight, &mut run, reply_ns);
                }
            }
            if !ended {
                while in_flight.len() < slots && send(&mut p, &mut in_flight, &mut run, now) {}
            }
            if ended && in_flight.is_empty() {
                break;
            }
            // Sleep until the next reply, the next arrival a free slot can take, or the end.
            let mut next = in_flight.front().map_or(u64::MAX, |r| r.0);
            if let Some(t) = p.wake_at(slots - in_flight.len()) {
                next = next.min(t);
            }
            if !ended {
                next = next.min(t_end);
            }
            assert!(next >= now && next < u64::MAX, "stuck at {now}");
            now = next;
        }
        run.counts = p.counts();
        run.achieved = run.counts.sent as f64 / (window_ns as f64 / 1e9);
        run.corrected.sort_unstable();
        run
    }

    fn p99(sorted: &[u64]) -> u64 {
        sorted[(sorted.len() * 99).div_ceil(100) - 1]
    }

    /// 32 slots, 400 µs each: 80,000 requests/s.
    const SLOTS: usize = 32;
    const SERVICE_NS: u64 = 400_000;
    const CAPACITY: f64 = 80_000.0;

    #[test]
    fn past_saturation_the_window_sends_at_the_servers_capacity() {
        // A fixed-capacity server is held at its capacity at 2× and 4× the offered load, after
        // a warm-up long enough that the window's first requests were due in it.
        for factor in [2.0, 4.0] {
            let r = simulate(factor * CAPACITY, SLOTS, SERVICE_NS, 500 * MS, 1_000 * MS);
            assert!(
                (r.achieved / CAPACITY - 1.0).abs() < 0.001,
                "{factor}×: {:.0}/s\n{r:?}",
                r.achieved
            );
            let c = r.counts;
            assert_eq!(
                c.scheduled + c.backlog_start,
                c.sent + c.backlog_end,
                "{c:?}"
            );
            // The backlog grew by what the server could not take: offered − capacity per s.
            let grew = (c.backlog_end - c.backlog_start) as f64;
            let want = (factor - 1.0) * CAPACITY;
            assert!((grew / want - 1.0).abs() < 0.02, "{factor}×: {c:?}");
            // Every request in the window waited for a slot, and the last ones waited as long
            // as the schedule had run ahead of the server: the window's end (1.5 s after the
            // schedule started) × (1 − capacity/offered).
            assert_eq!(r.waited, c.sent, "{factor}×");
            let behind = 1.5e9 * (1.0 - 1.0 / factor);
            let p99 = p99(&r.corrected) as f64;
            assert!(
                p99 > 0.97 * behind && p99 < 1.01 * behind + SERVICE_NS as f64,
                "{factor}×: p99 {p99} against {behind}"
            );
            assert!(c.backlog_end_wait_ns as f64 > 0.99 * behind, "{c:?}");
        }
    }

    #[test]
    fn a_request_costs_the_same_however_long_the_backlog() {
        // Work per request sent, in wake-ups and calls to `take`. Past saturation it is the
        // closed-loop cost, one wake-up per reply and one take per freed slot, at 2× as at 64×
        // (where the backlog grows 32 times as fast): nothing is done per waiting arrival.
        for factor in [2.0, 4.0, 64.0] {
            let r = simulate(factor * CAPACITY, SLOTS, SERVICE_NS, 100 * MS, 400 * MS);
            let wakeups = r.wakeups as f64 / r.sends as f64;
            let takes = r.takes as f64 / r.sends as f64;
            assert!(wakeups <= 1.001 && takes <= 1.001, "{factor}×: {r:?}");
        }
        // At capacity slots are sometimes free: then each arrival and each reply wakes the
        // loop, and each wake-up ends with one take that finds nothing due.
        let r = simulate(CAPACITY, SLOTS, SERVICE_NS, 100 * MS, 400 * MS);
        let (wakeups, takes) = (
            r.wakeups as f64 / r.sends as f64,
            r.takes as f64 / r.sends as f64,
        );
        assert!(wakeups <= 2.001 && takes <= 3.001, "1×: {r:?}");
    }

    #[test]
    fn below_saturation_every_arrival_goes_out_when_due() {
        let r = simulate(0.5 * CAPACITY, SLOTS, SERVICE_NS, 100 * MS, 1_000 * MS);
        let c = r.counts;
        assert_eq!((c.backlog_start, c.backlog_end, c.never_sent), (0, 0, 0));
        assert_eq!(c.scheduled, c.sent);
        assert!((r.achieved / (0.5 * CAPACITY) - 1.0).abs() < 0.02, "{r:?}");
        // 16 of 32 slots busy on average: an arrival rarely finds them all busy (Erlang-C
        // with 32 servers at 50 % load: well under 1 %), and then waits less than a service.
        assert!(r.waited * 100 < c.sent, "{r:?}");
        assert!(p99(&r.corrected) <= SERVICE_NS + SERVICE_NS / 4, "{r:?}");
    }

    #[test]
    fn the_window_counts_what_it_sends_and_what_is_left() {
        // By hand: uniform arrivals every 10 µs from 10 µs, window [100 µs, 200 µs).
        const US: u64 = 1_000;
        let s = Schedule::new(ArrivalKind::Uniform, 100_000.0, 0, 1.0, 1);
        let mut p = Pacer::new(s, 100 * US, 200 * US);
        // Before the window: 10 µs and 20 µs go out, unmeasured.
        assert_eq!(p.take(25 * US).map(|a| a.measured), Some(false));
        assert_eq!(p.take(25 * US).map(|a| a.intended_ns), Some(20 * US));
        assert_eq!(p.take(25 * US), None);
        assert_eq!(p.wake_at(1), Some(30 * US));
        assert_eq!(p.wake_at(0), None, "no free slot: only a reply can help");
        // Every slot busy from 25 µs until 150 µs; 30 .. 90 µs (7 arrivals) wait at the start.
        p.slot_freed_after_all_busy(150 * US);
        let a = p.take(150 * US).unwrap();
        assert_eq!((a.intended_ns, a.measured, a.waited), (30 * US, true, true));
        assert_eq!(p.counts().backlog_start, 7);
        // The window ends at 170 µs (a stop request): 40 .. 160 µs still wait (13 arrivals),
        // of which 100 .. 160 µs (7) were due in the window.
        p.end_at(170 * US);
        p.close();
        assert_eq!(p.take(300 * US), None);
        let c = p.counts();
        assert_eq!(
            c,
            PacerCounts {
                scheduled: 7,
                sent: 1,
                backlog_start: 7,
                backlog_end: 13,
                never_sent: 7,
                backlog_end_wait_ns: 130 * US,
            }
        );
        assert_eq!(c.scheduled + c.backlog_start, c.sent + c.backlog_end);
        assert_eq!(p.take_intended_gaps(), vec![10_000.0; 6]);
    }
}
