//! Receiving over kernel sockets: epoll events, edge-triggered reads, transmit stamps from
//! the error queue, and the decoding of replies in request order (verify, counters, freed
//! slots), shared with the bypass client.

use std::os::fd::AsRawFd;

use super::*;

impl Worker {
    pub(super) fn on_event(&mut self, i: usize, events: u32) {
        match self.conns[i].state {
            // Kernel sockets are never probed by the worker (steered ones come probed).
            ConnState::Down { .. } | ConnState::Probing => {}
            ConnState::Connecting => {
                let res =
                    sys::connect_result(self.conns[i].stream.as_ref().expect("connecting socket"));
                let now = self.shared.clock.now_ns();
                match res {
                    Ok(()) if events & WRITABLE != 0 => self.became_ready(i, now),
                    Ok(()) => {}
                    Err(_) => self.fail(i, Failure::Refused, now),
                }
            }
            ConnState::Ready => {
                let mut events = events;
                if events & ERROR != 0 && self.conns[i].stamped {
                    // Transmit stamps on the error queue, read in batches. (A reset or a
                    // failed connection also reports a hang-up, which is read below.)
                    events &= !ERROR;
                    let c = &mut self.conns[i];
                    c.errqueue_events = c.errqueue_events.saturating_add(1);
                    if c.errqueue_events as usize >= SETTLE_BATCH
                        || c.awaiting.len() >= SETTLE_BATCH
                    {
                        let now = self.shared.clock.now_ns();
                        self.settle(i, now, false);
                    }
                }
                if events & WRITABLE != 0 && self.conns[i].write_interest {
                    let c = &mut self.conns[i];
                    match c.flush() {
                        Ok(FlushOutcome::Done) => {
                            c.write_interest = false;
                            if let Some(s) = c.stream.as_ref() {
                                let _ = self.epoll.modify(s.as_raw_fd(), WATCH, i as u64);
                            }
                        }
                        Ok(FlushOutcome::Blocked) => {}
                        Err(_) => {
                            let now = self.shared.clock.now_ns();
                            return self.fail(i, Failure::Reset, now);
                        }
                    }
                }
                if events & (READABLE | HANGUP) != 0 {
                    self.on_readable(i, events & HANGUP != 0);
                }
            }
        }
    }

    /// Reads and handles the replies on connection `i` until the socket is drained.
    ///
    /// The socket is edge-triggered, so it is not reported again for bytes already there: read
    /// again while a read filled the buffer (more may wait) or the peer hung up (read up to
    /// the end). A shorter read took everything there was; what arrives later is a new event.
    pub(super) fn on_readable(&mut self, i: usize, hangup: bool) {
        loop {
            let outcome = self.conns[i].read_some(&mut self.control);
            let rx_ns = self.shared.clock.now_ns();
            let stamps = match outcome {
                Ok(ReadOutcome::Data(_, stamps)) => stamps,
                Ok(ReadOutcome::WouldBlock) => return,
                Ok(ReadOutcome::Closed) | Err(_) => return self.fail(i, Failure::Reset, rx_ns),
            };
            let rx = RxTime {
                handled_ns: rx_ns,
                kernel_ns: stamps
                    .software_ns
                    .and_then(|t| self.stamp_clock.to_run_ns(t)),
                hw_ns: stamps.hardware_ns,
            };
            let more = hangup || self.conns[i].buffer_full();
            if let Err(()) = self.decode_replies(i, rx) {
                return self.fail(i, Failure::Protocol, rx_ns);
            }
            self.refill(i, rx_ns);
            if !more {
                return;
            }
        }
    }

    /// Reads connection `i`'s error queue, then records the replies now stamped, oldest first,
    /// and those that waited [`STAMP_WAIT_NS`] (all of them when `force`) with the generator's
    /// own send time.
    pub(super) fn settle(&mut self, i: usize, now: u64, force: bool) {
        if self.conns[i].stamped {
            self.drain_tx_stamps(i);
        }
        self.conns[i].errqueue_events = 0;
        let (open_loop, hardware) = (self.open_loop, self.shared.stamps == Timestamps::Hardware);
        while let Some(a) = self.conns[i].awaiting.front() {
            let stamped = a.request.tx_kernel_ns.is_some() || a.request.tx_hw_ns.is_some();
            if !(stamped || force || now.saturating_sub(a.rx.handled_ns) >= STAMP_WAIT_NS) {
                break;
            }
            let a = self.conns[i].awaiting.pop_front().expect("front checked");
            record_reply(
                &mut self.stats,
                (&mut self.interval, self.tick_index < 0),
                (open_loop, hardware),
                a.kind,
                &a.request,
                &a.rx,
            );
        }
    }

    /// Settles every connection whose oldest reply has waited [`STAMP_WAIT_NS`] for its stamp
    /// (all of them when `force`).
    pub(super) fn settle_waiting(&mut self, now: u64, force: bool) {
        let mut k = 0;
        while k < self.unsettled.len() {
            let i = self.unsettled[k];
            if force
                || self.conns[i]
                    .awaiting
                    .front()
                    .is_some_and(|a| now.saturating_sub(a.rx.handled_ns) >= STAMP_WAIT_NS)
            {
                self.settle(i, now, force);
            }
            if self.conns[i].awaiting.is_empty() {
                self.conns[i].unsettled = false;
                self.unsettled.swap_remove(k);
            } else {
                k += 1;
            }
        }
    }

    /// Reads connection `i`'s error queue and stamps the requests its transmit stamps cover;
    /// returns the messages read.
    pub(super) fn drain_tx_stamps(&mut self, i: usize) -> usize {
        let mut total = 0;
        loop {
            let Ok(n) = self.conns[i].read_errqueue(&mut self.errqueue) else {
                return total;
            };
            for k in 0..n {
                let ctl = tstamp::parse_control(self.errqueue.control(k));
                let software = ctl
                    .stamps
                    .software_ns
                    .and_then(|t| self.stamp_clock.to_run_ns(t));
                let hardware = ctl.stamps.hardware_ns;
                if let Some(key) = ctl.tx_key
                    && (software.is_some() || hardware.is_some())
                {
                    self.conns[i].apply_tx_stamp(key, software, hardware);
                }
            }
            total += n;
            if n < ERRQUEUE_BATCH {
                return total;
            }
        }
    }

    /// Decodes every complete reply on connection `i`, received at `rx`.
    pub(super) fn decode_replies(&mut self, i: usize, rx: RxTime) -> Result<(), ()> {
        let sh = &*self.shared;
        let verify = sh.config.verify;
        let open_loop = self.open_loop;
        let prefill = self.phase == Phase::Prefill;
        let warmup = self.tick_index < 0;
        let ready = self.conns[i].state == ConnState::Ready;
        let hardware = sh.stamps == Timestamps::Hardware;
        let hits = &mut self.multi_hits;
        let Conn {
            inb,
            in_start,
            in_end,
            inflight,
            key_states,
            own,
            prefill: prefill_queue,
            multi,
            stamped,
            awaiting,
            ..
        } = &mut self.conns[i];
        while let Some(front) = inflight.front().copied() {
            let key = sh.keyspace.key(front.key);
            let nkeys = front.nkeys as usize;
            let keys: &[u64] = if nkeys > 0 {
                &multi.make_contiguous()[..nkeys]
            } else {
                &[]
            };
            let expect = Expect {
                command: front.command,
                key,
                multi: MultiKeys::new(&sh.keyspace, keys),
                opaque: front.opaque,
            };
            let buf = &inb[*in_start..*in_end];
            let (reply, used) = match sh.codec.decode(buf, &expect, hits) {
                Ok(ok) => ok,
                Err(DecodeError::Incomplete) => break,
                Err(DecodeError::Invalid(_)) => return Err(()),
            };
            let kind = match reply {
                Reply::Hit { .. } => OpKind::GetHit,
                Reply::Miss => OpKind::GetMiss,
                Reply::Stored => OpKind::Set,
                Reply::Deleted | Reply::NotFound => OpKind::Delete,
                Reply::Multi { .. } => OpKind::MultiGet,
                Reply::NotStored | Reply::ServerError => OpKind::Other,
            };
            let slot = |k: u64| own.position(k).expect("a verified key is owned") as usize;
            if verify {
                match reply {
                    Reply::Hit { value } => {
                        let state = &mut key_states[slot(front.key)];
                        self.stats.verify.check_hit(state, key, value);
                    }
                    Reply::Miss => self
                        .stats
                        .verify
                        .check_miss(&mut key_states[slot(front.key)]),
                    Reply::Stored => key_states[slot(front.key)].stored(front.version),
                    Reply::Deleted | Reply::NotFound => key_states[slot(front.key)].deleted(),
                    Reply::Multi { .. } => {
                        let mut found = hits.iter().peekable();
                        for (n, &k) in keys.iter().enumerate() {
                            let state = &mut key_states[slot(k)];
                            match found.next_if(|h| h.index == n) {
                                Some(h) => self.stats.verify.check_hit(
                                    state,
                                    sh.keyspace.key(k),
                                    &buf[h.value.clone()],
                                ),
                                None => self.stats.verify.check_miss(state),
                            }
                        }
                    }
                    Reply::NotStored | Reply::ServerError => {}
                }
            }
            if prefill {
                prefill_queue.answered();
                if kind != OpKind::Set {
                    self.stats.prefill_errors += 1;
                }
            } else {
                if front.measured {
                    self.stats.counts[kind.index()] += 1;
                    if let Reply::Multi { hits: found } = reply {
                        self.stats.keys_hit += found as u64;
                        self.stats.keys_missed += (nkeys - found) as u64;
                    }
                    if reply == Reply::ServerError {
                        self.stats.errors.server += 1;
                    }
                }
                if reply == Reply::ServerError && (front.measured || warmup) {
                    self.interval.errors += 1;
                }
                if *stamped && front.tx_kernel_ns.is_none() && front.tx_hw_ns.is_none() {
                    // Its transmit stamp has not been read yet: record it once it has.
                    awaiting.push_back(Answered {
                        kind,
                        request: front,
                        rx,
                    });
                } else {
                    record_reply(
                        &mut self.stats,
                        (&mut self.interval, warmup),
                        (open_loop, hardware),
                        kind,
                        &front,
                        &rx,
                    );
                }
            }
            multi.drain(..nkeys);
            *in_start += used;
            inflight.pop_front();
            self.in_flight -= 1;
            if ready {
                if self.ready_free == 0
                    && let Some(p) = self.pacer.as_mut()
                {
                    p.slot_freed_after_all_busy(rx.handled_ns);
                }
                self.ready_free += 1;
            }
        }
        let bytes_left = inflight.is_empty() && *in_start < *in_end;
        let c = &mut self.conns[i];
        if !c.awaiting.is_empty() && !c.unsettled {
            c.unsettled = true;
            self.unsettled.push(i);
        }
        if bytes_left {
            // Bytes nobody asked for.
            return Err(());
        }
        Ok(())
    }
}
