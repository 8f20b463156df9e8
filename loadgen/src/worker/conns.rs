//! A thread's connections as slots: opening them all at start-up, a connection that became
//! ready and the request slots it brings, failing one (the run's requests are lost, never
//! retried; the prefill's SETs go again once it is ready, until it gives up) with a growing
//! back-off, and the housekeeping that times requests out and reopens connections that are
//! due.

use std::os::fd::AsRawFd;
use std::time::Instant;

use super::*;
use crate::client::steer::{STEER_DEADLINE, reconnect};

impl Worker {
    /// Opens every connection and waits until all are up (steered over the bypass client:
    /// probed and kept, or [`Worker::steer_failure`] says why not).
    pub(super) fn connect_all(&mut self) -> Result<(), (SocketAddr, std::io::ErrorKind)> {
        for i in 0..self.conns.len() {
            let server = self.conns[i].server;
            self.open(i, 0).map_err(|k| (server, k))?;
        }
        if self.bypass.is_some() {
            let steering = self.shared.shares.is_some();
            let deadline = Instant::now()
                + if steering {
                    STEER_DEADLINE
                } else {
                    CONNECT_DEADLINE
                };
            // Busy-polls the stack until every handshake (and probe) is done or one failed.
            while let Some(c) = self
                .conns
                .iter()
                .find(|c| matches!(c.state, ConnState::Connecting | ConnState::Probing))
            {
                if let Some(failure) = self.connect_failure {
                    return Err(failure);
                }
                if steering && (self.steer_failure.is_some() || self.steer_failed_elsewhere()) {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    if let Some(shares) = &self.shared.shares {
                        let shares = shares
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        self.steer_failure = Some(shares.unspread());
                        return Ok(());
                    }
                    return Err((c.server, std::io::ErrorKind::TimedOut));
                }
                let now = self.shared.clock.now_ns();
                self.poll_bypass(now, now);
            }
            return self.connect_failure.map_or(Ok(()), Err);
        }
        let deadline = Instant::now() + CONNECT_DEADLINE;
        while let Some(c) = self.conns.iter().find(|c| c.state == ConnState::Connecting) {
            let server = c.server;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err((server, std::io::ErrorKind::TimedOut));
            }
            let ready: Vec<(u64, u32)> = self
                .epoll
                .wait(Some(left))
                .map_err(|e| (server, e.kind()))?
                .collect();
            for (token, _) in ready {
                let i = token as usize;
                if self.conns[i].state == ConnState::Connecting {
                    let c = &mut self.conns[i];
                    let res = sys::connect_result(c.stream.as_ref().expect("connecting socket"));
                    if let Err(e) = res {
                        return Err((c.server, e.kind()));
                    }
                    self.became_ready(i, 0);
                }
            }
        }
        Ok(())
    }

    /// Starts connection `i`; `Err` only when the attempt failed at once.
    pub(super) fn open(&mut self, i: usize, now: u64) -> Result<(), std::io::ErrorKind> {
        if let Some(net) = self.bypass.as_mut() {
            let id = net.connect(self.conns[i].server, i)?;
            let c = &mut self.conns[i];
            c.link = Some(id);
            c.state = ConnState::Connecting;
            c.since_ns = now;
            return Ok(());
        }
        let (stream, connected) = match (self.conns[i].steered.take(), self.conns[i].worker) {
            // Steered: connected already, to the worker its keys belong to.
            (Some(stream), _) => {
                stream.set_nonblocking(true).map_err(|e| e.kind())?;
                (stream, true)
            }
            // Steered, reopened: connected again (blocking) until it is its worker's.
            (None, Some(worker)) => {
                let server = self.conns[i].server;
                let stream =
                    reconnect(server, self.shared.config.protocol, worker).map_err(|e| e.kind())?;
                stream.set_nonblocking(true).map_err(|e| e.kind())?;
                (stream, true)
            }
            (None, None) => {
                sys::connect_nonblocking(&self.conns[i].server).map_err(|e| e.kind())?
            }
        };
        let interest = if connected { WATCH } else { WATCH | WRITABLE };
        self.epoll
            .add(stream.as_raw_fd(), interest, i as u64)
            .map_err(|e| e.kind())?;
        let c = &mut self.conns[i];
        c.stream = Some(stream);
        c.state = ConnState::Connecting;
        c.since_ns = now;
        c.write_interest = !connected;
        if connected {
            self.became_ready(i, now);
        }
        Ok(())
    }

    pub(super) fn became_ready(&mut self, i: usize, now: u64) {
        if let Some(flags) = self.shared.stamps.socket_flags()
            && self.conns[i].enable_stamps(flags).is_err()
        {
            self.stats.stamp_failures += 1;
        }
        let c = &mut self.conns[i];
        c.state = ConnState::Ready;
        c.failures = 0;
        if c.write_interest {
            c.write_interest = false;
            if let Some(s) = c.stream.as_ref() {
                let _ = self.epoll.modify(s.as_raw_fd(), WATCH, i as u64);
            }
        }
        if self.ready_free == 0
            && let Some(p) = self.pacer.as_mut()
        {
            p.slot_freed_after_all_busy(now);
        }
        self.ready_free += self.depth();
        if self.phase != Phase::Connect {
            self.refill(i, now);
        }
    }

    /// Closes connection `i` after `why`. Its in-flight requests are lost, never retried, except
    /// in the prefill: there its SETs wait on the connection to be sent again, and after
    /// [`PREFILL_GIVE_UP`] failures with no reply between them the connection gives up its keys
    /// (counted as prefill errors), so a server that is gone cannot hold the prefill.
    pub(super) fn fail(&mut self, i: usize, why: Failure, now: u64) {
        if self.phase == Phase::Connect
            && matches!(
                self.conns[i].state,
                ConnState::Connecting | ConnState::Probing
            )
        {
            let kind = match why {
                Failure::Timeout => std::io::ErrorKind::TimedOut,
                _ => std::io::ErrorKind::ConnectionRefused,
            };
            self.connect_failure
                .get_or_insert((self.conns[i].server, kind));
        }
        if let (Some(id), Some(net)) = (self.conns[i].link, self.bypass.as_mut()) {
            net.abort(id);
        }
        self.settle(i, now, true);
        let counting = self.counting(now);
        let depth = self.depth();
        let verify = self.shared.config.verify;
        let timeout_ns = self.shared.config.timeout.as_nanos() as u64;
        let c = &mut self.conns[i];
        if c.state == ConnState::Ready {
            self.ready_free -= depth - c.inflight.len();
        }
        if !c.unready_listed {
            c.unready_listed = true;
            self.unready.push(i);
        }
        let lost = c.close();
        self.in_flight -= lost.len();
        let warmup = self.tick_index < 0;
        for r in &lost {
            if verify {
                match r.command {
                    Command::Set => c.key_state(r.key).maybe_stored(r.version),
                    Command::Delete => c.key_state(r.key).maybe_deleted(),
                    Command::Get | Command::MultiGet => {}
                }
            }
            if self.phase == Phase::Prefill {
                c.prefill.lost(LostSet {
                    key: r.key,
                    version: r.version,
                });
            } else if r.measured {
                if now.saturating_sub(r.sent_ns) >= timeout_ns {
                    self.stats.errors.timeout += 1;
                } else {
                    self.stats.errors.aborted += 1;
                }
                self.interval.errors += 1;
            }
        }
        if counting {
            match why {
                Failure::Reset => self.stats.errors.reset += 1,
                Failure::Protocol => self.stats.errors.protocol += 1,
                Failure::Refused => self.stats.errors.refused += 1,
                Failure::Timeout => {}
            }
            if why != Failure::Timeout && !warmup {
                self.interval.errors += 1;
            }
        }
        if self.phase == Phase::Prefill && c.prefill.failed() >= PREFILL_GIVE_UP {
            let given = c.prefill.give_up(&c.own);
            self.stats.prefill_keys += given.unsent;
            self.stats.prefill_errors += given.lost + given.unsent;
        }
        c.failures = c.failures.saturating_add(1);
        let backoff = (BACKOFF_NS << (c.failures - 1).min(10)).min(MAX_BACKOFF_NS);
        c.state = ConnState::Down {
            retry_at_ns: now + backoff,
        };
    }

    /// Times out stuck requests and reopens connections that are due.
    ///
    /// Looks at the deadlines that passed and at the connections that are not ready, never at
    /// every connection.
    pub(super) fn housekeeping(&mut self, now: u64) {
        if let Some(delay) = self.sched.as_ref().and_then(sys::SchedStat::run_delay_ns) {
            if self.counting(now) && !self.ended {
                self.stats.cpu_wait_ns += delay.saturating_sub(self.last_delay_ns);
                if self.idle == Idle::Spin && !self.spin_guard.may_spin(now) {
                    self.stats.spin_paused_ns += now.saturating_sub(self.last_housekeeping_ns);
                }
            }
            self.spin_guard.observe(now, delay);
            (self.last_delay_ns, self.last_housekeeping_ns) = (delay, now);
        }
        if self.shared.stamps.socket_flags().is_some() {
            self.read_stamp_clock();
            self.settle_waiting(now, false);
        }
        let timeout_ns = self.shared.config.timeout.as_nanos() as u64;
        while let Some(i) = {
            let conns = &self.conns;
            // A connection answers in order, so a request still waiting is the front one.
            self.timeouts.pop_due(now, |i, opaque| {
                conns[i]
                    .inflight
                    .front()
                    .is_some_and(|f| f.opaque == opaque)
            })
        } {
            self.fail(i, Failure::Timeout, now);
        }
        let mut k = 0;
        while k < self.unready.len() {
            let i = self.unready[k];
            match self.conns[i].state {
                ConnState::Ready => {}
                ConnState::Connecting | ConnState::Probing => {
                    // A connect (or a probe) that hangs (SYN dropped) is a failed attempt
                    // after the timeout.
                    if now.saturating_sub(self.conns[i].since_ns) >= timeout_ns {
                        self.fail(i, Failure::Refused, now);
                    }
                }
                ConnState::Down { retry_at_ns } => {
                    if retry_at_ns <= now && !self.ended && self.open(i, now).is_err() {
                        self.fail(i, Failure::Refused, now);
                    }
                }
            }
            if self.conns[i].state == ConnState::Ready {
                self.conns[i].unready_listed = false;
                self.unready.swap_remove(k);
            } else {
                k += 1;
            }
        }
        self.next_housekeeping_ns = now + HOUSEKEEPING_NS;
    }
}
