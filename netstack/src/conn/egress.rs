//! Egress: what the application wrote and what smoltcp and the connections' clocks owe,
//! framed for the link.
//!
//! ```text
//! poll_egress ─ due bucket timers ─▶ expire (lifetime.rs) ─▶ bucket dirty
//!             ─ each dirty bucket ─▶ Interface::poll_egress (≤ EGRESS_ROUNDS rounds)
//!                                    view.rs: IP packet ─▶ Ethernet frame to its MAC
//!                                  ─▶ loss recovery's re-sends (recovery/)
//!                                  ─▶ refresh; the bucket's timer = min(poll_at, clocks)
//!             ─ then the gateway probes due, if any
//! ```
//!
//! **Dirty buckets and timers.** A bucket is dirty when a frame went into it or the
//! application wrote, read, closed or aborted one of its connections. Only dirty buckets
//! and buckets whose deadline passed get `poll_egress`. After egress the bucket's deadline
//! is the earliest of `Interface::poll_at` over its sockets and its connections' own
//! clocks, kept in a lazily updated min-heap (`timer.rs`): a deadline that moves later, as
//! a busy connection's retransmission timer does on every reply, costs a write to the
//! bucket; an earlier one O(log buckets). A device out of transmit tokens stops the pass;
//! the buckets not reached stay dirty for the next call.
//!
//! **Routes.** With a gateway ([`TableConfig::gateway4`], [`TableConfig::gateway6`]),
//! smoltcp's interface has a default route for that family, and frames to hosts off the
//! link (but a handshake's) go to the gateway's MAC, which one [`Gateways`] shared by
//! every table of the process resolves and refreshes: [`ConnTable::poll_egress`] sends
//! the probes it asks for, and completed handshakes tell it which MAC they came through
//! (`neighbor/gateway.rs`). Without one, a host off the link is answered through the MAC
//! its frames came from. `conn::tests::routes` shows both.
//!
//! [`TableConfig::gateway4`]: super::TableConfig::gateway4
//! [`TableConfig::gateway6`]: super::TableConfig::gateway6

use smoltcp::iface::PollResult;
use smoltcp::phy::{Device, TxToken};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpAddress;

use super::recovery::BucketPeers;
use super::{Bucket, ConnTable};
use crate::Poll;
use crate::neighbor::{self, ARP_FRAME_LEN, ArpOut, NDP_FRAME_LEN, NdpOut};
use crate::view::{Framing, IpEgress};

/// `poll_egress` rounds per bucket per call (each round sends at most one segment per socket).
const EGRESS_ROUNDS: usize = 64;

impl<S: Default> ConnTable<S> {
    /// Sends what the application wrote and what smoltcp owes (ACKs, SYN-ACKs, FINs,
    /// retransmissions) for dirty buckets and buckets whose timer is due; ends the
    /// connections whose clocks ran out.
    pub fn poll_egress<D: Device>(&mut self, now: Instant, device: &mut D) -> Poll {
        self.now = now;
        while let Some(bucket) = self.timers.pop_due(now, &mut self.buckets) {
            self.expire(bucket);
            self.mark_dirty(bucket);
        }
        let mut batch = std::mem::take(&mut self.dirty);
        let mut progress = false;
        let mut exhausted_at = None;
        for (index, &bucket) in batch.iter().enumerate() {
            let bucket = bucket as usize;
            let Bucket {
                sockets,
                slots,
                dirty,
                ..
            } = &mut self.buckets[bucket];
            *dirty = false;
            let mut peers = BucketPeers {
                slots: slots.as_mut_slice(),
                recovery: &self.recovery,
                stats: &mut self.stats.recovery,
                now,
            };
            let mut egress = IpEgress {
                device: &mut *device,
                caps: &self.caps,
                framing: Framing::new(
                    &self.addrs,
                    &self.gateways,
                    &mut self.neighbors,
                    &mut peers,
                    None,
                ),
                exhausted: false,
            };
            for _ in 0..EGRESS_ROUNDS {
                match self.iface.poll_egress(now, &mut egress, sockets) {
                    PollResult::None => break,
                    PollResult::SocketStateChanged => progress = true,
                }
                if egress.exhausted {
                    break;
                }
            }
            let mut exhausted = egress.exhausted;
            self.stats.frames_out += egress.framing.sent;
            self.stats.unresolved += egress.framing.unresolved;
            if egress.framing.unresolved > 0 && self.spare.ports.in_use > 0 {
                self.note_unresolved(bucket);
            }
            if !exhausted {
                exhausted = self.resend(bucket, device, now) == Poll::Idle;
            }
            let clocks = self.refresh_bucket(bucket, true);
            let Bucket { sockets, timer, .. } = &mut self.buckets[bucket];
            let deadline = match (self.iface.poll_at(now, sockets), clocks) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.timers.set(bucket, timer, deadline);
            if exhausted {
                self.stats.tx_exhausted += 1;
                exhausted_at = Some(index);
                break;
            }
        }
        if let Some(index) = exhausted_at {
            // The device is full: leave the rest for the next call (their own deadlines
            // or dirty flags bring them back).
            for &bucket in &batch[index + 1..] {
                self.buckets[bucket as usize].dirty = false;
                self.mark_dirty(bucket as usize);
            }
            let retry = batch[index] as usize;
            self.mark_dirty(retry);
        }
        batch.clear();
        batch.append(&mut self.dirty);
        self.dirty = batch;
        if self.probe_gateways(now, device) {
            progress = true;
        }
        if progress { Poll::Progress } else { Poll::Idle }
    }

    /// Sends the gateway probes due now that the shared [`Gateways`] hands to this table;
    /// true if it sent any. A probe the device has no room for is not sent: the round's
    /// next one follows a probe interval later.
    fn probe_gateways<D: Device>(&mut self, now: Instant, device: &mut D) -> bool {
        let addrs = self.addrs;
        let stats = &mut self.stats;
        let before = stats.gateway_probes;
        self.gateways.poll(now, |probe| {
            let Some(tx) = device.transmit(now) else {
                return;
            };
            match (probe.target, addrs.ipv4, addrs.ipv6) {
                (IpAddress::Ipv4(target), Some(own), _) => {
                    tx.consume(ARP_FRAME_LEN, |buf| {
                        neighbor::emit_arp(
                            buf,
                            addrs.mac,
                            own.address(),
                            ArpOut::Request {
                                target,
                                to_mac: probe.to_mac,
                            },
                        );
                    });
                }
                (IpAddress::Ipv6(target), _, Some(own)) => {
                    tx.consume(NDP_FRAME_LEN, |buf| {
                        neighbor::emit_ndp(
                            buf,
                            addrs.mac,
                            own.address(),
                            NdpOut::Solicit {
                                target,
                                to_mac: probe.to_mac,
                            },
                        );
                    });
                }
                // A gateway without an address of its family is refused by `check`.
                _ => return,
            }
            stats.frames_out += 1;
            stats.gateway_probes += 1;
        });
        stats.gateway_probes > before
    }

    /// Time until the table next needs `poll_egress` without new frames (`Some(ZERO)` if
    /// work is pending now); `None` if only new frames can create work. For the park policy.
    /// It may be early (a timer moved later is noticed when its old time comes), never late.
    pub fn poll_delay(&self, now: Instant) -> Option<Duration> {
        if !self.dirty.is_empty() || !self.ready.is_empty() || !self.touched.is_empty() {
            return Some(Duration::ZERO);
        }
        let next = match (self.timers.peek(), self.gateways.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        next.map(|when| {
            if when > now {
                when - now
            } else {
                Duration::ZERO
            }
        })
    }
}
