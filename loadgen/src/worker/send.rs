//! Sending: encoding one request into a connection's output, refilling a connection up to
//! its depth (prefill keys, closed loop), the open loop's dispatch of due arrivals to free
//! slots, and writing the output of dirty connections to their kernel sockets.

use std::os::fd::AsRawFd;

use super::*;

impl Worker {
    /// Encodes one request on connection `i`; `measured` when it goes out in the window.
    pub(super) fn issue(&mut self, i: usize, intended_ns: u64, measured: bool, now: u64) {
        let sh = &*self.shared;
        let verify = sh.config.verify;
        let timeout_ns = sh.config.timeout.as_nanos() as u64;
        let c = &mut self.conns[i];
        // A lost prefill SET goes again with the version it had (see `PrefillSet::Again`).
        let (command, key, value_len, again) = if self.phase == Phase::Prefill {
            let next = c
                .prefill
                .next(&c.own)
                .expect("refill checks that a key is left");
            let (key, again) = match next {
                PrefillSet::Again(lost) => (lost.key, Some(lost.version)),
                PrefillSet::New(key) => {
                    self.stats.prefill_keys += 1;
                    (key, None)
                }
            };
            (Command::Set, key, c.picker.value_len(), again)
        } else {
            let p = c.picker.pick(&mut c.multi);
            (p.command, p.key, p.value_len, None)
        };
        let key_bytes = sh.keyspace.key(key);
        let opaque = c.take_opaque();
        let mut version = 0;
        let nkeys = if command == Command::MultiGet {
            sh.config.multiget
        } else {
            0
        };
        let value: &[u8] = match command {
            Command::Set if verify => {
                version = again.unwrap_or_else(|| c.key_state(key).next_version());
                self.scratch.resize(value_len, 0);
                verify::fill_value(key_bytes, version, &mut self.scratch);
                &self.scratch
            }
            Command::Set => &sh.pattern[..value_len],
            _ => &[],
        };
        let multi_start = c.multi.len() - nkeys;
        let multi_keys = c.multi.make_contiguous();
        let request = Request {
            command,
            key: key_bytes,
            multi: MultiKeys::new(&sh.keyspace, &multi_keys[multi_start..]),
            value,
            ttl: sh.config.ttl,
            opaque,
        };
        sh.codec.encode(&request, &mut c.out);
        let end_offset = c.encoded_end();
        c.inflight.push_back(InFlight {
            command,
            key,
            nkeys: nkeys as u32,
            version,
            opaque,
            intended_ns,
            sent_ns: now,
            measured,
            end_offset,
            tx_kernel_ns: None,
            tx_hw_ns: None,
        });
        self.timeouts
            .push(now.saturating_add(timeout_ns), i, opaque);
        self.ready_free -= 1;
        self.in_flight += 1;
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(i);
        }
        if measured {
            self.stats.sent += 1;
        }
    }

    /// Fills connection `i` up to the depth: with the prefill's keys (the SETs a close lost
    /// first), with new requests in closed loop, and with the oldest due arrivals in open loop
    /// (a slot that a reply freed takes the next waiting arrival at once).
    pub(super) fn refill(&mut self, i: usize, now: u64) {
        if self.conns[i].state != ConnState::Ready {
            return;
        }
        let depth = self.depth();
        match self.phase {
            Phase::Connect => {}
            Phase::Prefill => {
                while self.conns[i].inflight.len() < depth && self.conns[i].prefill_left() > 0 {
                    self.issue(i, now, false, now);
                }
            }
            Phase::Run if self.open_loop => {
                while self.conns[i].inflight.len() < depth {
                    let Some(a) = self.pacer.as_mut().and_then(|p| p.take(now)) else {
                        break;
                    };
                    self.send_arrival(i, a, now);
                }
            }
            Phase::Run => {
                if self.ended || now >= self.t_end {
                    return;
                }
                let measured = now >= self.t0;
                while self.conns[i].inflight.len() < depth {
                    self.issue(i, now, measured, now);
                }
            }
        }
    }

    /// Open loop: sends due arrivals on free connections, oldest first, round robin.
    pub(super) fn dispatch(&mut self, now: u64) {
        while self.ready_free > 0 && self.pacer.as_ref().is_some_and(|p| p.is_due(now)) {
            let n = self.conns.len();
            let Some(i) = (0..n).map(|k| (self.rr + k) % n).find(|&i| {
                self.conns[i].state == ConnState::Ready
                    && self.conns[i].inflight.len() < self.pipeline
            }) else {
                debug_assert!(false, "ready_free {} with no free slot", self.ready_free);
                self.ready_free = 0;
                break;
            };
            let Some(a) = self.pacer.as_mut().and_then(|p| p.take(now)) else {
                break;
            };
            self.rr = (i + 1) % n;
            self.send_arrival(i, a, now);
        }
    }

    /// Open loop: sends arrival `a` on connection `i` (which has a free slot) and records its
    /// send lag.
    pub(super) fn send_arrival(&mut self, i: usize, a: Arrival, now: u64) {
        self.issue(i, a.intended_ns, a.measured, now);
        if !a.measured {
            return;
        }
        let lag = now.saturating_sub(a.intended_ns);
        self.stats.send_lag.saturating_record(lag.max(1));
        if lag > self.shared.config.late_threshold.as_nanos() as u64 {
            self.stats.late += 1;
        }
        if a.waited {
            self.stats.backpressured += 1;
        } else {
            self.stats.generator_lag.saturating_record(lag.max(1));
        }
        if let Some(prev) = self.last_sent_ns
            && self.stats.sent_gaps.len() < MAX_GAP_SAMPLES
        {
            self.stats.sent_gaps.push(now.saturating_sub(prev) as f64);
        }
        self.last_sent_ns = Some(now);
    }

    pub(super) fn flush_dirty(&mut self, now: u64) {
        if self.bypass.is_some() {
            return self.flush_dirty_bypass(now);
        }
        while let Some(i) = self.dirty.pop() {
            let c = &mut self.conns[i];
            c.dirty = false;
            if c.state != ConnState::Ready || !c.has_output() {
                continue;
            }
            match c.flush() {
                Ok(FlushOutcome::Done) => {}
                Ok(FlushOutcome::Blocked) => {
                    if !c.write_interest {
                        c.write_interest = true;
                        if let Some(s) = c.stream.as_ref() {
                            let _ = self.epoll.modify(s.as_raw_fd(), WATCH | WRITABLE, i as u64);
                        }
                    }
                }
                Err(_) => self.fail(i, Failure::Reset, now),
            }
        }
    }
}
