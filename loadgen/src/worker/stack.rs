//! The bypass client's round (`--net tap`, `--net xdp`): the thread's own TCP stack is
//! polled instead of epoll (ingress, connection events, replies copied into `Conn.inb`,
//! output, egress, send stamps), and the same `issue`, `decode_replies`, `refill` and `fail`
//! serve it.
//!
//! **Steering** (`--steer`). A connection established is asked which worker serves it
//! before it is ready:
//!
//! ```text
//! Established ─write probe─▶ Probing ─reply in inb (parse_probe_with_workers)─┐
//!   kept: start-up, its worker's share short (Shares); later, its own worker  ─▶ Ready
//!   else: abort (RST), connect again from another source port ─▶ Connecting
//! ```
//!
//! At start-up the thread's connections share [`MAX_ATTEMPTS_PER_CONNECTION`] attempts
//! each, within [`STEER_DEADLINE`](crate::client::steer::STEER_DEADLINE); a connection reopened later (its worker known) gets
//! [`MAX_ATTEMPTS_PER_CONNECTION`] of its own, then counts as refused and backs off.

use std::time::Duration;

use netstack::ConnEvent;

use super::*;
use crate::client::steer::{
    MAX_ATTEMPTS_PER_CONNECTION, Offer, WorkerInfo, parse_probe_with_workers,
    probe_with_workers_request,
};

impl Worker {
    /// Bypass client: queues every dirty connection's output in its socket; what its send
    /// buffer does not take is tried again in the next round.
    pub(super) fn flush_dirty_bypass(&mut self, now: u64) {
        let mut blocked = std::mem::take(&mut self.blocked);
        while let Some(i) = self.dirty.pop() {
            let c = &mut self.conns[i];
            c.dirty = false;
            let (ConnState::Ready, Some(id), true) = (c.state, c.link, c.has_output()) else {
                continue;
            };
            let net = self.bypass.as_mut().expect("a bypass worker");
            match net.write(id, &c.out[c.out_pos..]) {
                Some(n) => {
                    c.out_pos += n;
                    c.bytes_written += n as u64;
                    if n > 0 && !c.tx_pending {
                        c.tx_pending = true;
                        self.to_stamp.push(i);
                    }
                    if c.out_pos == c.out.len() {
                        c.out.clear();
                        c.out_pos = 0;
                    } else {
                        blocked.push(i);
                    }
                }
                None => self.fail(i, Failure::Reset, now),
            }
        }
        for &i in &blocked {
            if !self.conns[i].dirty && self.conns[i].state == ConnState::Ready {
                self.conns[i].dirty = true;
                self.dirty.push(i);
            }
        }
        blocked.clear();
        self.blocked = blocked;
    }

    /// Steering: asks established connection `i` which worker serves it.
    fn send_probe(&mut self, i: usize, now: u64) {
        let request = probe_with_workers_request(self.shared.config.protocol);
        let net = self.bypass.as_mut().expect("a bypass worker");
        let c = &mut self.conns[i];
        // A new connection's send buffer takes the few dozen bytes whole.
        match c.link.and_then(|id| net.write(id, request)) {
            Some(n) if n == request.len() => {
                c.bytes_written += n as u64;
                c.state = ConnState::Probing;
            }
            _ => self.fail(i, Failure::Reset, now),
        }
    }

    /// Steering: reads connection `i`'s probe reply from its buffer, if it is all there.
    fn read_probe(&mut self, i: usize, closed: bool, now: u64) {
        let protocol = self.shared.config.protocol;
        let c = &mut self.conns[i];
        let received = &c.inb[c.in_start..c.in_end];
        match parse_probe_with_workers(protocol, received) {
            Ok(None) if closed => self.fail(i, Failure::Reset, now),
            Ok(None) => {}
            // Nothing is asked after the probe, so nothing may follow its reply.
            Ok(Some((info, used))) if used == received.len() => {
                c.in_start += used;
                self.probed(i, &info, now);
            }
            Ok(Some(_)) => self.not_answered(i, "bytes after the reply".into(), now),
            Err(e) => self.not_answered(i, e.to_string(), now),
        }
    }

    /// Steering: connection `i`'s reply names no worker (`why`); at start-up that ends the
    /// run's steering.
    fn not_answered(&mut self, i: usize, why: String, now: u64) {
        if self.phase == Phase::Connect {
            self.steer_failure
                .get_or_insert(SteerError::NotAnswered(why));
        }
        self.fail(i, Failure::Protocol, now);
    }

    /// Steering: connection `i` is served by `info.worker`: kept (ready) if it is where it
    /// is wanted, else aborted and opened again, within the bounds.
    fn probed(&mut self, i: usize, info: &WorkerInfo, now: u64) {
        let keep = match self.conns[i].worker {
            Some(worker) => info.worker == worker,
            None => {
                let shares = self.shared.shares.as_ref().expect("steering shares");
                let offer = shares
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .offer(self.conns[i].index, info);
                match offer {
                    Ok(offer) => offer == Offer::Keep,
                    Err(e) => {
                        self.steer_failure.get_or_insert(e);
                        self.fail(i, Failure::Protocol, now);
                        return;
                    }
                }
            }
        };
        let thread_conns = self.conns.len();
        let c = &mut self.conns[i];
        if keep {
            c.worker = Some(info.worker);
            c.steer_attempts = 0;
            self.became_ready(i, now);
            return;
        }
        c.steer_attempts += 1;
        if self.phase == Phase::Connect {
            self.steer_tries += 1;
            if self.steer_tries >= MAX_ATTEMPTS_PER_CONNECTION * thread_conns {
                let shares = self.shared.shares.as_ref().expect("steering shares");
                let unspread = shares
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .unspread();
                self.steer_failure.get_or_insert(unspread);
                self.fail(i, Failure::Refused, now);
                return;
            }
        } else if c.steer_attempts as usize >= MAX_ATTEMPTS_PER_CONNECTION {
            // Counted as a refused connection; it is opened again after the back-off.
            c.steer_attempts = 0;
            self.fail(i, Failure::Refused, now);
            return;
        }
        // Another worker's: reset it and connect from another source port.
        let net = self.bypass.as_mut().expect("a bypass worker");
        if let Some(id) = c.link {
            net.abort(id);
        }
        c.close();
        if self.open(i, now).is_err() {
            self.fail(i, Failure::Refused, now);
        }
    }

    /// Whether another thread's steering failed at start-up (this one stops waiting).
    pub(super) fn steer_failed_elsewhere(&self) -> bool {
        self.shared
            .steer_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// Bypass client: one round of the stack (ingress, connection events, replies, output,
    /// egress, send stamps); then, if nothing happened and `deadline_ns` is ahead, waits for
    /// a frame until then (or the table's next timer).
    pub(super) fn poll_bypass(&mut self, now: u64, deadline_ns: u64) {
        let clock = self.shared.clock;
        let mut progress = self
            .bypass
            .as_mut()
            .expect("a bypass worker")
            .ingress(clock.now_ns());
        let mut events = std::mem::take(&mut self.net_events);
        self.bypass
            .as_mut()
            .expect("a bypass worker")
            .events(&mut events);
        for &(id, event) in &events {
            progress = true;
            let now = clock.now_ns();
            let Some(i) = self.conns.iter().position(|c| c.link == Some(id)) else {
                // A connection given up on while it was opening: it has no use now.
                if event == ConnEvent::Established {
                    self.bypass.as_mut().expect("a bypass worker").abort(id);
                }
                continue;
            };
            match (event, self.conns[i].state) {
                (ConnEvent::Established, ConnState::Connecting) => {
                    if self.shared.config.steer {
                        self.send_probe(i, now);
                    } else {
                        self.became_ready(i, now);
                    }
                }
                (ConnEvent::Refused, _) => self.fail(i, Failure::Refused, now),
                (ConnEvent::TimedOut, ConnState::Connecting | ConnState::Probing) => {
                    self.fail(i, Failure::Refused, now);
                }
                (ConnEvent::TimedOut, _) => self.fail(i, Failure::Timeout, now),
                (ConnEvent::Reset | ConnEvent::Closed, _) => self.fail(i, Failure::Reset, now),
                (ConnEvent::Established, _) => {}
            }
        }
        self.net_events = events;
        let mut arrived = std::mem::take(&mut self.arrived);
        {
            let Worker { bypass, conns, .. } = &mut *self;
            let net = bypass.as_mut().expect("a bypass worker");
            net.serve(|i, io, stamps| {
                let c = &mut conns[i];
                let mut closed = false;
                loop {
                    c.make_room();
                    match io.recv_slice(c.free_space()) {
                        Ok(0) => break,
                        Ok(n) => c.received(n),
                        Err(_) => {
                            closed = true;
                            break;
                        }
                    }
                }
                arrived.push((i, stamps, closed));
            });
        }
        for &(i, stamps, closed) in &arrived {
            progress = true;
            let rx_ns = self.bypass.as_ref().and_then(|b| b.received_ns(stamps));
            let handled_ns = clock.now_ns();
            if self.conns[i].state == ConnState::Probing {
                self.read_probe(i, closed, handled_ns);
                continue;
            }
            if self.conns[i].state != ConnState::Ready {
                continue;
            }
            let rx = RxTime {
                handled_ns,
                kernel_ns: rx_ns,
                hw_ns: None,
            };
            if let Err(()) = self.decode_replies(i, rx) {
                self.fail(i, Failure::Protocol, handled_ns);
                continue;
            }
            if closed {
                self.fail(i, Failure::Reset, handled_ns);
                continue;
            }
            self.refill(i, handled_ns);
        }
        arrived.clear();
        self.arrived = arrived;
        self.flush_dirty_bypass(now);
        let net = self.bypass.as_mut().expect("a bypass worker");
        progress |= net.egress(clock.now_ns(), || clock.now_ns());
        // Requests written before this egress are stamped with it once their connection's
        // new data went out in it.
        let mut k = 0;
        while k < self.to_stamp.len() {
            let i = self.to_stamp[k];
            let c = &mut self.conns[i];
            let sent = c.link.and_then(|id| net.sent_in_latest_egress(id));
            if c.link.is_some() && sent.is_none() {
                k += 1;
                continue;
            }
            if let Some(ns) = sent {
                for r in c.inflight.iter_mut().filter(|r| r.tx_kernel_ns.is_none()) {
                    r.tx_kernel_ns = Some(ns);
                }
            }
            c.tx_pending = false;
            self.to_stamp.swap_remove(k);
        }
        let now = clock.now_ns();
        if progress || !self.dirty.is_empty() || deadline_ns <= now {
            return;
        }
        let mut wait_ns = deadline_ns - now;
        if let Some(timer_ns) = net.poll_delay_ns(now) {
            wait_ns = wait_ns.min(timer_ns);
        }
        if wait_ns > 0 {
            let _ = self.epoll.wait(Some(Duration::from_nanos(wait_ns)));
        }
    }
}
