//! The thread's phases and its loop: prefill, the run (window, drain, open-loop pacing
//! glue, how long to wait), the time series ticks, and one epoll wait.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::*;

impl Worker {
    /// Hands the current interval to the starting thread and begins the next.
    pub(super) fn send_tick(&mut self) {
        let tick = Tick {
            index: self.tick_index,
            stats: std::mem::take(&mut self.interval),
        };
        let _ = self.ticks.send(tick);
        self.tick_index += 1;
        self.next_tick_ns += self.interval_ns;
    }

    /// Waits for events until `deadline_ns` and handles them.
    pub(super) fn poll(&mut self, now: u64, deadline_ns: u64) {
        if self.bypass.is_some() {
            return self.poll_bypass(now, deadline_ns);
        }
        let timeout = Duration::from_nanos(deadline_ns.saturating_sub(now));
        let mut ready = std::mem::take(&mut self.ready_events);
        ready.clear();
        if let Ok(events) = self.epoll.wait(Some(timeout)) {
            ready.extend(events);
        }
        for &(token, events) in &ready {
            self.on_event(token as usize, events);
            // Write what this reply freed at once, not after the whole batch: with thousands of
            // connections a batch takes milliseconds, and a request encoded at the start of it
            // would carry a send time (taken when its slot freed) long before its write, and
            // the server would wait on the client (and see its delayed ACKs) meanwhile.
            // Each connection is still written once per flush, so this adds no writes.
            if !self.dirty.is_empty() {
                self.flush_dirty(now);
            }
        }
        self.ready_events = ready;
    }

    /// Writes every owned key once (closed loop, deep pipeline, unrecorded).
    ///
    /// A SET lost with its connection goes again once the connection is back, so the prefill
    /// waits for connections that are down with keys left. It ends when every connection has
    /// sent all its keys and has nothing in flight (a connection whose server is gone gives
    /// its keys up, see [`Worker::fail`]), or on `stop`.
    pub(super) fn prefill(&mut self) {
        self.phase = Phase::Prefill;
        self.ready_free = self
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Ready)
            .count()
            * self.depth();
        let now = self.shared.clock.now_ns();
        for i in 0..self.conns.len() {
            self.refill(i, now);
        }
        loop {
            let now = self.shared.clock.now_ns();
            self.flush_dirty(now);
            let pending = self
                .conns
                .iter()
                .any(|c| !c.inflight.is_empty() || c.prefill_left() > 0);
            if !pending || self.shared.stop.load(Ordering::Relaxed) {
                break;
            }
            if now >= self.next_housekeeping_ns {
                self.housekeeping(now);
            }
            self.poll(now, self.next_housekeeping_ns);
        }
        // SETs lost or in flight when the prefill ends are not confirmed stored; only a stopped
        // prefill has any. Keys it never sent are not counted at all.
        for c in &mut self.conns {
            let given = c.prefill.give_up(&c.own);
            self.stats.prefill_errors += given.lost + c.inflight.len() as u64;
        }
    }

    pub(super) fn run(&mut self, start_ns: u64) {
        let cfg = &self.shared.config;
        let threads = cfg.threads;
        self.phase = Phase::Run;
        self.t0 = start_ns + cfg.warmup.as_nanos() as u64;
        self.t_end = self.t0 + cfg.duration.as_nanos() as u64;
        self.drain_deadline = u64::MAX;
        self.stats.window_start_ns = self.t0;
        // Intervals are aligned on the window's start; the first one may begin before the run.
        let warmup_intervals = cfg.warmup.as_nanos().div_ceil(u128::from(self.interval_ns)) as u64;
        self.tick_index = -(warmup_intervals as i64);
        self.next_tick_ns = self.t0 - (warmup_intervals.saturating_sub(1)) * self.interval_ns;
        if warmup_intervals == 0 {
            self.next_tick_ns = self.t0 + self.interval_ns;
        }
        let id = self.conns.first().map_or(0, |c| c.index % threads);
        if let Some(rate) = cfg.rate {
            let phase = id as f64 / threads as f64;
            let seed = derive_seed(cfg.seed, SEED_SCHEDULE, id as u64);
            let schedule = Schedule::new(cfg.arrival, rate / threads as f64, start_ns, phase, seed);
            self.pacer = Some(Pacer::new(schedule, self.t0, self.t_end));
        }
        let timeout_ns = cfg.timeout.as_nanos() as u64;
        let spin_ns = cfg.spin.as_nanos() as u64;
        // Slots are depth-dependent; recount them for the run's depth.
        self.ready_free = self
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Ready)
            .map(|c| self.pipeline - c.inflight.len().min(self.pipeline))
            .sum();
        // Wait for the start.
        while self.shared.clock.now_ns() < start_ns {
            std::hint::spin_loop();
        }
        // Opened here: thread-self names the thread that opens it.
        self.sched = sys::SchedStat::open();
        self.last_delay_ns = self
            .sched
            .as_ref()
            .and_then(sys::SchedStat::run_delay_ns)
            .unwrap_or(0);
        self.last_housekeeping_ns = self.shared.clock.now_ns();
        self.spin_guard = SpinGuard::new(self.last_housekeeping_ns, self.last_delay_ns);
        let now = self.shared.clock.now_ns();
        for i in 0..self.conns.len() {
            self.refill(i, now);
        }
        loop {
            let now = self.shared.clock.now_ns();
            if self.cpu_start_ns.is_none() && now >= self.t0 {
                self.cpu_start_ns = Some(sys::thread_cpu_ns());
                self.recovery_start = self.bypass.as_ref().map(|b| b.recovery());
            }
            if !self.ended && (now >= self.t_end || self.shared.stop.load(Ordering::Relaxed)) {
                self.ended = true;
                self.t_end = self.t_end.min(now);
                self.drain_deadline = now + timeout_ns;
                if let Some(start) = self.cpu_start_ns {
                    self.stats.cpu_ns = sys::thread_cpu_ns().saturating_sub(start);
                }
                // Arrivals due before the end that this loop had not reached yet go out now if a
                // slot is free (late, and counted so); whatever still waits is never sent.
                if let Some(p) = self.pacer.as_mut() {
                    p.end_at(self.t_end);
                    self.dispatch(now);
                    self.close_pacer();
                }
            } else if !self.ended && self.open_loop {
                self.dispatch(now);
            }
            self.flush_dirty(now);
            if now >= self.next_housekeeping_ns {
                self.housekeeping(now);
            }
            // An interval is handed on once it has passed, except the one the window ends in,
            // which also takes the replies of the drain after the window (sent below).
            while now >= self.next_tick_ns && self.next_tick_ns < self.t_end {
                self.send_tick();
            }
            if self.ended && (self.in_flight == 0 || now >= self.drain_deadline) {
                break;
            }
            // A thread whose core turned out to be shared does not spin at all for a while.
            let paused = self.idle == Idle::Spin && !self.spin_guard.may_spin(now);
            let mut deadline = self.next_tick_ns.min(self.next_housekeeping_ns);
            if !self.ended {
                deadline = deadline.min(self.t_end);
                // Sleep until shortly before the next arrival, then busy-poll up to it; with
                // every slot busy there is nothing to send before a reply frees one.
                if let Some(due) = self.pacer.as_ref().and_then(|p| p.wake_at(self.ready_free)) {
                    let window = if paused { 0 } else { spin_ns };
                    deadline = deadline.min(due.saturating_sub(window));
                }
            } else {
                deadline = deadline.min(self.drain_deadline);
            }
            if self.idle == Idle::Spin && self.in_flight > 0 && !paused {
                // A reply is due: poll without sleeping, so that no wake-up delays it.
                deadline = now;
            }
            self.poll(now, deadline);
        }
        let now = self.shared.clock.now_ns();
        self.settle_waiting(now, true);
        // Whatever is still in flight after the drain has timed out.
        for i in 0..self.conns.len() {
            if !self.conns[i].inflight.is_empty() {
                self.fail(i, Failure::Timeout, now);
            }
        }
        self.send_tick();
        self.stats.window_end_ns = self.t_end;
        if let Some(b) = self.bypass.as_ref() {
            let start = self.recovery_start.unwrap_or_default();
            self.stats.recovery = Some(b.recovery().since(&start));
        }
    }

    /// Open loop, at the window's end: arrivals still waiting are never sent; takes the
    /// pacer's counts.
    pub(super) fn close_pacer(&mut self) {
        let Some(p) = self.pacer.as_mut() else {
            return;
        };
        p.close();
        let c = p.counts();
        let s = &mut self.stats;
        s.scheduled = c.scheduled;
        s.never_sent = c.never_sent;
        s.backlog_start = c.backlog_start;
        s.backlog_end = c.backlog_end;
        s.backlog_end_wait_ns = c.backlog_end_wait_ns;
        s.intended_gaps = p.take_intended_gaps();
        debug_assert_eq!(
            c.sent, s.sent,
            "the pacer and the worker count the same sends"
        );
    }
}
