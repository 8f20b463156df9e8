//! Passive opens: the handshake of a connection a client starts, and the SYN backlog.
//!
//! **Listening.** smoltcp has no backlog. Because every SYN passes the demultiplexer
//! first (`ingress.rs`), the table arms a listening socket in the SYN's bucket just before
//! smoltcp sees the SYN ([`ConnTable::arm_for_syn`]), and closes it again if the SYN did
//! not take it (a bad checksum, say). So no listener ever sits idle, and a retransmitted
//! SYN can never open a second half-connection (the connection's own socket takes it). An
//! RST that sends the handshake's socket back to LISTEN (as smoltcp does, RFC 9293) ends
//! the handshake there and then.
//!
//! **SYN backlog** (`backlog.rs`). Handshakes do not count against `conn_limit`: they
//! have their own budget, the places no connection holds plus
//! [`TableConfig::syn_backlog`], and when a validated SYN finds it spent the oldest
//! handshake gives way. A SYN flood from forged addresses therefore never takes an
//! established connection's place nor locks real clients out.
//!
//! **Admission** (`admission.rs`). `conn_limit` counts open and closing connections of
//! every table sharing one [`Admission`] (all workers of a process): a connection is
//! admitted when its handshake completes, and refused (SYN answered with RST) while the
//! limit is reached.
//!
//! **TIME-WAIT.** A SYN from the 4-tuple of a connection in TIME-WAIT takes its place and
//! its count (see "TIME-WAIT" in the module docs of `conn`).
//!
//! [`TableConfig::syn_backlog`]: super::TableConfig::syn_backlog
//! [`Admission`]: crate::Admission

use smoltcp::socket::tcp;
use smoltcp::wire::{IpAddress, IpEndpoint, IpListenEndpoint};

use super::backlog::{slot_addr, split_addr};
use super::lifetime::Lifetime;
use super::{ConnTable, Peer, Phase, ports, release};

/// What to do with a handshake that ended without becoming a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HandshakeEnd {
    /// Reset by the peer, timed out, or refused.
    Failed,
    /// Evicted by a newer SYN.
    Evicted,
}

impl<S: Default> ConnTable<S> {
    /// A SYN for a new connection from `addr:port` (at `mac`) to our address `local` and
    /// our `local_port` is about to enter `bucket`: arm a listening socket on that address
    /// and port for it, unless the 4-tuple already has a live socket or the connection limit
    /// is reached (then smoltcp answers the SYN with RST).
    pub(super) fn arm_for_syn(
        &mut self,
        bucket_index: usize,
        addr: IpAddress,
        port: u16,
        mac: [u8; 6],
        local: IpAddress,
        local_port: u16,
    ) -> Option<usize> {
        let remote = IpEndpoint::new(addr, port);
        let bucket = &mut self.buckets[bucket_index];
        let mut reuse = None;
        for (index, slot) in bucket.slots.iter().enumerate() {
            let (Phase::Handshake | Phase::Open | Phase::Done, Some(handle)) =
                (slot.phase, slot.handle)
            else {
                continue;
            };
            let socket = bucket.sockets.get::<tcp::Socket>(handle);
            // One peer may use one source port towards both of our ports.
            if socket.remote_endpoint() == Some(remote)
                && socket.local_endpoint().map(|local| local.port) == Some(local_port)
            {
                if matches!(socket.state(), tcp::State::TimeWait | tcp::State::Closed)
                    && slot.phase == Phase::Done
                {
                    reuse = Some(index);
                    break;
                }
                // The connection's own socket answers a duplicate SYN.
                return None;
            }
        }
        if let Some(index) = reuse {
            // The TIME-WAIT connection gives its place and its count to the new one.
            bucket.slots[index].phase = Phase::Free;
            self.stats.in_use -= 1;
            self.admission.release(1);
        }
        if self.admission.is_full() {
            self.stats.refused += 1;
            if let Some(index) = reuse {
                release(&mut self.buckets[bucket_index], index, &mut self.spare);
            }
            return None;
        }
        let index = match reuse {
            Some(index) => index,
            None => self.free_slot(bucket_index),
        };
        let bucket = &mut self.buckets[bucket_index];
        let handle = bucket.slots[index].handle?;
        let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
        let endpoint = IpListenEndpoint {
            addr: Some(local),
            port: local_port,
        };
        // A closed or TIME-WAIT socket can always listen; on failure the SYN gets a RST.
        if socket.listen(endpoint).is_err() {
            release(bucket, index, &mut self.spare);
            return None;
        }
        socket.set_timeout(None);
        let slot = &mut bucket.slots[index];
        slot.peer = Some(Peer {
            addr,
            ports: ports(port, local_port),
            mac: Some(mac),
        });
        slot.flight.reset();
        Some(index)
    }

    /// After smoltcp processed the SYN: either the armed socket took it (a handshake joins
    /// the backlog, evicting the oldest if the backlog is over budget), or disarm it.
    pub(super) fn after_syn(&mut self, bucket_index: usize, index: usize) {
        let now = self.now;
        let bucket = &mut self.buckets[bucket_index];
        let slot = &mut bucket.slots[index];
        let Some(handle) = slot.handle else { return };
        let socket = bucket.sockets.get_mut::<tcp::Socket>(handle);
        if socket.state() == tcp::State::Listen {
            // LISTEN -> CLOSED sends nothing.
            socket.close();
            release(bucket, index, &mut self.spare);
            return;
        }
        slot.phase = Phase::Handshake;
        slot.seen_state = socket.state();
        slot.life = Lifetime::start(now);
        bucket.handshakes += 1;
        self.stats.handshaking += 1;
        self.backlog
            .push(slot_addr(bucket_index, index), &mut self.buckets);
        // Handshakes may use the places no connection holds, plus `syn_backlog` more.
        let budget = self.config.conn_limit + self.config.syn_backlog;
        while self.stats.handshaking + self.stats.in_use > budget
            && let Some(oldest) = self.backlog.oldest()
        {
            let (bucket, slot) = split_addr(oldest);
            self.end_handshake(bucket, slot, HandshakeEnd::Evicted);
        }
        debug_assert_eq!(self.backlog.len(), self.stats.handshaking);
    }

    /// Takes a handshake out of the backlog and frees its socket (without a word: the peer
    /// may not exist).
    pub(super) fn end_handshake(&mut self, bucket_index: usize, index: usize, end: HandshakeEnd) {
        self.backlog
            .remove(slot_addr(bucket_index, index), &mut self.buckets);
        self.buckets[bucket_index].handshakes -= 1;
        self.stats.handshaking -= 1;
        self.stats.handshakes_failed += 1;
        if end == HandshakeEnd::Evicted {
            self.stats.syn_evicted += 1;
        }
        let bucket = &mut self.buckets[bucket_index];
        if let Some(handle) = bucket.slots[index].handle {
            // The RST `abort` leaves owed is never sent (the socket leaves the set first,
            // and its next `listen` forgets it): the peer may not exist.
            bucket.sockets.get_mut::<tcp::Socket>(handle).abort();
        }
        release(bucket, index, &mut self.spare);
    }

    /// A handshake completed: admit the connection under `conn_limit` (or reset it) and
    /// teach the neighbour cache the peer's MAC, which the handshake proved (or, for a peer
    /// off the link, tell the gateways which MAC it came through).
    fn establish(&mut self, bucket_index: usize, index: usize) {
        let now = self.now;
        self.backlog
            .remove(slot_addr(bucket_index, index), &mut self.buckets);
        self.buckets[bucket_index].handshakes -= 1;
        self.stats.handshaking -= 1;
        if !self.admission.try_acquire() {
            // Another table took the last place meanwhile.
            self.stats.refused += 1;
            let bucket = &mut self.buckets[bucket_index];
            if let Some(handle) = bucket.slots[index].handle {
                bucket.sockets.get_mut::<tcp::Socket>(handle).abort();
            }
            release(bucket, index, &mut self.spare);
            return;
        }
        let slot = &mut self.buckets[bucket_index].slots[index];
        slot.phase = Phase::Open;
        slot.session = Some(S::default());
        slot.generation = slot.generation.wrapping_add(1);
        slot.seen_recv = 0;
        slot.want_write = false;
        slot.life = Lifetime::start(now);
        if let Some(Peer {
            addr,
            mac: Some(mac),
            ..
        }) = slot.peer
        {
            if self.addrs.on_link(addr) {
                self.neighbors.learn(addr, mac);
            } else {
                self.gateways.handshake_via(addr, mac, now);
            }
        }
        self.stats.in_use += 1;
        self.stats.accepted += 1;
        self.stats.active += 1;
    }

    /// The handshakes of one bucket that completed (admitted or refused) or failed (an RST
    /// sends smoltcp's socket back to LISTEN; or closed).
    pub(super) fn refresh_handshakes(&mut self, bucket_index: usize) {
        for index in 0..self.buckets[bucket_index].slots.len() {
            let bucket = &self.buckets[bucket_index];
            let slot = &bucket.slots[index];
            let (Phase::Handshake, Some(handle)) = (slot.phase, slot.handle) else {
                continue;
            };
            match bucket.sockets.get::<tcp::Socket>(handle).state() {
                tcp::State::SynReceived => {}
                tcp::State::Listen | tcp::State::Closed | tcp::State::TimeWait => {
                    self.end_handshake(bucket_index, index, HandshakeEnd::Failed);
                }
                _ => {
                    self.establish(bucket_index, index);
                }
            }
        }
    }
}
