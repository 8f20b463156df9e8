//! The gateway of each address family (`--gateway`): its MAC, shared by every worker,
//! resolved by memspin itself and kept fresh with a bounded retry.
//!
//! Frames to hosts off the link go to the gateway's MAC (`view.rs`). No worker can rely on
//! its own neighbour cache for it: the gateway answers our ARP request or solicitation
//! once, on whichever queue the NIC's hash (or the TAP device's) picks, and may never
//! otherwise send anything that teaches a worker its MAC. So one [`Gateways`] value is
//! shared by all the workers of a process (like the connection limit), every worker's
//! validated ARP and NDP from a gateway address confirms it there ([`Gateways::confirm`]),
//! and the workers take turns sending the probes it asks for ([`Gateways::poll`]).
//!
//! Each family's gateway goes through these states (Linux's neighbour states, simplified):
//!
//! ```text
//!            start ─▶ UNRESOLVED: a request every GATEWAY_PROBE_INTERVAL (broadcast ARP, or a
//!                     │ solicitation to the gateway's solicited-node group), GATEWAY_PROBES
//!                     │ of them, then a GATEWAY_RETRY_PAUSE of silence, and again
//!   validated answer ─┤
//!                     ▼
//!            REACHABLE: no probe for GATEWAY_REACHABLE after the last confirmation
//!                     │ (any validated ARP or NDP from the gateway address confirms)
//!                     ▼
//!            STALE: the MAC is still used; GATEWAY_PROBES probes, GATEWAY_PROBE_INTERVAL apart
//!                   (IPv4: a unicast ARP request to the known MAC; IPv6: to the group, so the
//!                   answer carries the gateway's link-layer address). An answer makes it
//!                   REACHABLE again; none, and the MAC is forgotten: UNRESOLVED at once.
//! ```
//!
//! **Handshakes** ([`Gateways::handshake_via`]). Every connection from a host off the link
//! says which MAC its SYN came through. The gateway's own MAC confirms it (so a gateway in
//! use is not probed); a MAC the gateway does not have, seen for the first time, makes the
//! gateway SUSPECT: it is probed at once with a broadcast request (IPv4) or a solicitation
//! to its group, as a round of STALE. A replaced router (a new MAC behind the same address)
//! is thus followed as soon as its first connection completes, and the connections still
//! open go with it; a second router in front of memspin (traffic arriving through another
//! MAC than the gateway's, as with asymmetric routing) costs one probe, not one per
//! connection: a MAC is suspected once until another one is seen.
//!
//! So a live gateway costs one probe per [`GATEWAY_REACHABLE`] without new connections
//! through it, a dead one at most [`GATEWAY_PROBES`] frames per `GATEWAY_PROBES ×
//! GATEWAY_PROBE_INTERVAL + GATEWAY_RETRY_PAUSE` (3 per 8 s), and a gateway that changed its
//! MAC is followed at its next connection, or within one refresh (or at once, if it
//! announces itself with ARP or NDP to us).
//!
//! **Cost on the data path.** A frame to an off-link host reads the MAC with one relaxed
//! atomic load (the line is written only when a confirmation arrives); an egress pass
//! reads each gateway's due time the same way and takes the lock only when a probe or a
//! state change is due, with `try_lock`, so two workers never wait for each other and one
//! probe goes out per due time.
//!
//! **Time.** Each worker passes its own `now`. Workers' clocks may differ by the moments
//! their loops started; the schedule only compares times a second or more apart, so a
//! worker slightly ahead sends a probe slightly early, nothing worse.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, Ipv4Address, Ipv6Address};

/// How long a confirmed gateway MAC is used without a probe (Linux's `base_reachable_time`).
pub const GATEWAY_REACHABLE: Duration = Duration::from_secs(30);

/// Probes per round before a stale MAC is forgotten or an unresolved gateway pauses
/// (Linux's `ucast_solicit` and `mcast_solicit`).
pub const GATEWAY_PROBES: u32 = 3;

/// Time between the probes of a round (Linux's `retrans_time`).
pub const GATEWAY_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Silence after a round an unresolved gateway did not answer.
pub const GATEWAY_RETRY_PAUSE: Duration = Duration::from_secs(5);

/// Bit of a packed MAC that says it is known.
const KNOWN: u64 = 1 << 48;

/// A probe a worker is asked to send: a request for `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The gateway's address.
    pub target: IpAddress,
    /// A unicast refresh to this MAC (IPv4), or `None`: broadcast ARP, or a solicitation
    /// to the target's solicited-node group.
    pub to_mac: Option<[u8; 6]>,
}

/// The gateways of a process, at most one per address family; shared by its workers.
#[derive(Debug, Default)]
pub struct Gateways {
    ipv4: Option<Gateway>,
    ipv6: Option<Gateway>,
}

#[derive(Debug)]
struct Gateway {
    ip: IpAddress,
    /// The MAC in the low 48 bits, with [`KNOWN`] set once resolved.
    mac: AtomicU64,
    /// When the next probe or state change is due, in microseconds of `now`.
    due: AtomicI64,
    state: Mutex<Resolve>,
    probes_sent: AtomicU64,
}

#[derive(Debug, Default)]
struct Resolve {
    /// When a validated frame last confirmed the MAC (`None` while unresolved).
    confirmed: Option<Instant>,
    /// Probes sent in the current round.
    probes: u32,
    /// A handshake came through another MAC: the next round asks everyone.
    suspect: bool,
    /// The last MAC other than the gateway's that a handshake came through.
    other_mac: Option<[u8; 6]>,
}

impl Gateways {
    /// Gateways for the families given; the first [`poll`](Self::poll) asks for a probe.
    pub fn new(ipv4: Option<Ipv4Address>, ipv6: Option<Ipv6Address>) -> Gateways {
        Gateways {
            ipv4: ipv4.map(|ip| Gateway::new(ip.into())),
            ipv6: ipv6.map(|ip| Gateway::new(ip.into())),
        }
    }

    /// The IPv4 gateway's address.
    pub fn ipv4(&self) -> Option<Ipv4Address> {
        match self.ipv4.as_ref()?.ip {
            IpAddress::Ipv4(ip) => Some(ip),
            IpAddress::Ipv6(_) => None,
        }
    }

    /// The IPv6 gateway's address.
    pub fn ipv6(&self) -> Option<Ipv6Address> {
        match self.ipv6.as_ref()?.ip {
            IpAddress::Ipv6(ip) => Some(ip),
            IpAddress::Ipv4(_) => None,
        }
    }

    fn of(&self, addr: IpAddress) -> Option<&Gateway> {
        match addr {
            IpAddress::Ipv4(_) => self.ipv4.as_ref(),
            IpAddress::Ipv6(_) => self.ipv6.as_ref(),
        }
    }

    fn all(&self) -> impl Iterator<Item = &Gateway> {
        self.ipv4.iter().chain(self.ipv6.iter())
    }

    /// The next hop towards off-link `dst`: the gateway of its family and its MAC if
    /// resolved; `None` without a gateway of that family.
    pub fn route(&self, dst: IpAddress) -> Option<(IpAddress, Option<[u8; 6]>)> {
        self.of(dst).map(|gateway| (gateway.ip, gateway.mac()))
    }

    /// The MAC of the gateway at `ip`, if `ip` is a gateway and it is resolved.
    pub fn mac(&self, ip: IpAddress) -> Option<[u8; 6]> {
        self.of(ip).filter(|g| g.ip == ip)?.mac()
    }

    /// A validated frame showed `ip` at `mac` (see the parent module for what validates):
    /// if `ip` is a gateway, it is REACHABLE at `mac` from `now`. Returns whether it was.
    pub fn confirm(&self, ip: IpAddress, mac: [u8; 6], now: Instant) -> bool {
        let Some(gateway) = self.of(ip).filter(|g| g.ip == ip) else {
            return false;
        };
        gateway.mac.store(pack(mac), Ordering::Relaxed);
        let mut state = lock(&gateway.state);
        state.confirmed = Some(now);
        state.probes = 0;
        state.suspect = false;
        gateway
            .due
            .store((now + GATEWAY_REACHABLE).total_micros(), Ordering::Relaxed);
        true
    }

    /// A handshake with `peer`, a host off the link, completed; its SYN came through
    /// `mac`. The gateway's MAC confirms the gateway of `peer`'s family; a MAC not seen
    /// before makes it suspect (see the module docs). Cheap when `mac` is the gateway's: one
    /// atomic load, then [`confirm`](Self::confirm)'s lock.
    pub fn handshake_via(&self, peer: IpAddress, mac: [u8; 6], now: Instant) {
        let Some(gateway) = self.of(peer) else {
            return;
        };
        match gateway.mac() {
            Some(known) if known == mac => {
                self.confirm(gateway.ip, mac, now);
            }
            // Unresolved: a round is running or pausing, and will find it.
            None => {}
            Some(_) => {
                let mut state = lock(&gateway.state);
                if state.other_mac == Some(mac) {
                    return;
                }
                state.other_mac = Some(mac);
                state.suspect = true;
                state.probes = 0;
                gateway.set_due(now);
            }
        }
    }

    /// Advances each gateway's schedule to `now` and calls `send` for each probe due.
    /// Cheap when nothing is due (one atomic load per gateway); when several workers call
    /// it, each probe is handed to one of them.
    pub fn poll(&self, now: Instant, mut send: impl FnMut(Probe)) {
        for gateway in self.all() {
            if let Some(probe) = gateway.poll(now) {
                send(probe);
            }
        }
    }

    /// The earliest time a gateway needs [`poll`](Self::poll); `None` without gateways.
    pub fn next_due(&self) -> Option<Instant> {
        self.all()
            .map(|g| Instant::from_micros(g.due.load(Ordering::Relaxed)))
            .min()
    }

    /// Probes handed out so far, over both families.
    pub fn probes_sent(&self) -> u64 {
        self.all()
            .map(|g| g.probes_sent.load(Ordering::Relaxed))
            .sum()
    }
}

/// One line for reports: each gateway, its MAC or `unresolved`, and the probes sent.
impl core::fmt::Display for Gateways {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut first = true;
        for gateway in self.all() {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "{} ", gateway.ip)?;
            match gateway.mac() {
                Some(mac) => {
                    let mac = mac.map(|b| format!("{b:02x}")).join(":");
                    write!(f, "at {mac}")?;
                }
                None => write!(f, "unresolved")?,
            }
        }
        if first {
            write!(f, "none")?;
        }
        write!(f, " ({} probes)", self.probes_sent())
    }
}

impl Gateway {
    fn new(ip: IpAddress) -> Gateway {
        Gateway {
            ip,
            mac: AtomicU64::new(0),
            due: AtomicI64::new(i64::MIN),
            state: Mutex::new(Resolve::default()),
            probes_sent: AtomicU64::new(0),
        }
    }

    fn mac(&self) -> Option<[u8; 6]> {
        unpack(self.mac.load(Ordering::Relaxed))
    }

    fn poll(&self, now: Instant) -> Option<Probe> {
        let now_us = now.total_micros();
        if now_us < self.due.load(Ordering::Relaxed) {
            return None;
        }
        let mut state = match self.state.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            // Another worker is at it.
            Err(TryLockError::WouldBlock) => return None,
        };
        if now_us < self.due.load(Ordering::Relaxed) {
            return None;
        }
        let mac = self.mac();
        if let (Some(_), Some(confirmed), false) = (mac, state.confirmed, state.suspect)
            && now < confirmed + GATEWAY_REACHABLE
        {
            // REACHABLE: nothing to do until the confirmation ages.
            self.set_due(confirmed + GATEWAY_REACHABLE);
            return None;
        }
        if state.probes < GATEWAY_PROBES {
            state.probes += 1;
            self.set_due(now + GATEWAY_PROBE_INTERVAL);
            self.probes_sent.fetch_add(1, Ordering::Relaxed);
            let to_mac = match self.ip {
                IpAddress::Ipv4(_) if !state.suspect => mac,
                // Suspect: the gateway may have another MAC now; ask everyone.
                IpAddress::Ipv4(_) => None,
                // An advertisement answering a unicast solicitation need not carry the
                // gateway's link-layer address (Linux leaves it out): ask the group.
                IpAddress::Ipv6(_) => None,
            };
            return Some(Probe {
                target: self.ip,
                to_mac,
            });
        }
        // A round went unanswered.
        state.probes = 0;
        state.suspect = false;
        if mac.is_some() {
            // STALE and silent: forget the MAC and ask everyone at once.
            self.mac.store(0, Ordering::Relaxed);
            state.confirmed = None;
            self.set_due(now);
            drop(state);
            return self.poll(now);
        }
        self.set_due(now + GATEWAY_RETRY_PAUSE);
        None
    }

    fn set_due(&self, when: Instant) {
        self.due.store(when.total_micros(), Ordering::Relaxed);
    }
}

fn lock(state: &Mutex<Resolve>) -> MutexGuard<'_, Resolve> {
    // Nothing panics while the lock is held; a poisoned one holds a consistent state.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn pack(mac: [u8; 6]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[2..].copy_from_slice(&mac);
    u64::from_be_bytes(bytes) | KNOWN
}

fn unpack(packed: u64) -> Option<[u8; 6]> {
    if packed & KNOWN == 0 {
        return None;
    }
    let bytes = packed.to_be_bytes();
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&bytes[2..]);
    Some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GW4: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
    const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const NEW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x09];

    fn v6(text: &str) -> Ipv6Address {
        text.parse().unwrap()
    }

    fn at(ms: i64) -> Instant {
        Instant::from_millis(1_000_000 + ms)
    }

    /// The probes `gateways` hands out at `ms`.
    fn probes(gateways: &Gateways, ms: i64) -> Vec<Probe> {
        let mut out = Vec::new();
        gateways.poll(at(ms), |p| out.push(p));
        out
    }

    fn broadcast4() -> Probe {
        Probe {
            target: GW4.into(),
            to_mac: None,
        }
    }

    #[test]
    fn macs_pack_and_unpack() {
        assert_eq!(unpack(0), None);
        assert_eq!(unpack(pack(MAC)), Some(MAC));
        assert_eq!(unpack(pack([0xff; 6])), Some([0xff; 6]));
        assert_eq!(unpack(pack([0; 6])), Some([0; 6]));
    }

    #[test]
    fn an_unresolved_gateway_is_asked_three_times_then_after_a_pause() {
        let gateways = Gateways::new(Some(GW4), None);
        assert_eq!(
            gateways.route(Ipv4Address::new(10, 79, 0, 2).into()),
            Some((GW4.into(), None))
        );
        assert_eq!(
            gateways.route(v6("fd79::2").into()),
            None,
            "no IPv6 gateway"
        );
        // Start: a broadcast request at once, then one a second, three in all.
        assert_eq!(probes(&gateways, 0), vec![broadcast4()]);
        assert_eq!(probes(&gateways, 0), vec![], "one probe per due time");
        assert_eq!(probes(&gateways, 999), vec![]);
        assert_eq!(probes(&gateways, 1000), vec![broadcast4()]);
        assert_eq!(probes(&gateways, 2000), vec![broadcast4()]);
        // No answer: silence for the pause, then a new round.
        assert_eq!(probes(&gateways, 3000), vec![]);
        assert_eq!(probes(&gateways, 7999), vec![]);
        assert_eq!(probes(&gateways, 8000), vec![broadcast4()]);
        assert_eq!(gateways.probes_sent(), 4);
        // Over a minute of a dead gateway: 3 frames per 8 s.
        let sent: usize = (8001..68_000)
            .step_by(250)
            .map(|ms| probes(&gateways, ms).len())
            .sum();
        assert_eq!(sent, 2 + 3 * 7, "the rest of this round and seven more");
    }

    #[test]
    fn an_answer_resolves_and_a_refresh_keeps_it() {
        let gateways = Gateways::new(Some(GW4), None);
        assert_eq!(probes(&gateways, 0).len(), 1);
        // Another worker received the reply.
        assert!(gateways.confirm(GW4.into(), MAC, at(3)));
        assert_eq!(
            gateways.route(Ipv4Address::new(10, 79, 0, 2).into()),
            Some((GW4.into(), Some(MAC)))
        );
        assert_eq!(gateways.mac(GW4.into()), Some(MAC));
        assert_eq!(gateways.next_due(), Some(at(3) + GATEWAY_REACHABLE));
        // Nothing for 30 s.
        for ms in (4..30_003).step_by(500) {
            assert_eq!(probes(&gateways, ms), vec![], "{ms}");
        }
        // Then a unicast refresh to the known MAC, the MAC still in use meanwhile.
        let refresh = Probe {
            target: GW4.into(),
            to_mac: Some(MAC),
        };
        assert_eq!(probes(&gateways, 30_003), vec![refresh]);
        assert_eq!(gateways.mac(GW4.into()), Some(MAC));
        assert!(gateways.confirm(GW4.into(), MAC, at(30_010)));
        assert_eq!(
            probes(&gateways, 31_003),
            vec![],
            "answered: reachable again"
        );
        assert_eq!(probes(&gateways, 60_010), vec![refresh]);
    }

    #[test]
    fn a_silent_stale_gateway_is_forgotten_and_a_new_mac_followed() {
        let gateways = Gateways::new(Some(GW4), None);
        gateways.confirm(GW4.into(), MAC, at(0));
        let refresh = Probe {
            target: GW4.into(),
            to_mac: Some(MAC),
        };
        assert_eq!(probes(&gateways, 30_000), vec![refresh]);
        assert_eq!(probes(&gateways, 31_000), vec![refresh]);
        assert_eq!(probes(&gateways, 32_000), vec![refresh]);
        // Three unanswered: the MAC goes, and a broadcast request goes out at once.
        assert_eq!(probes(&gateways, 33_000), vec![broadcast4()]);
        assert_eq!(gateways.mac(GW4.into()), None);
        // A replaced router answers from its new MAC.
        assert!(gateways.confirm(GW4.into(), NEW_MAC, at(33_001)));
        assert_eq!(gateways.mac(GW4.into()), Some(NEW_MAC));
        // Only the gateway's own address confirms.
        assert!(!gateways.confirm(Ipv4Address::new(10, 77, 0, 9).into(), MAC, at(33_002)));
        assert!(!gateways.confirm(v6("fd77::1").into(), MAC, at(33_002)));
        assert_eq!(gateways.mac(GW4.into()), Some(NEW_MAC));
    }

    #[test]
    fn ipv6_probes_always_ask_the_group() {
        let gw6 = v6("fd77::1");
        let gateways = Gateways::new(Some(GW4), Some(gw6));
        assert_eq!(gateways.ipv6(), Some(gw6));
        let first = probes(&gateways, 0);
        assert_eq!(first.len(), 2, "one per family");
        assert!(first.contains(&Probe {
            target: gw6.into(),
            to_mac: None
        }));
        gateways.confirm(gw6.into(), MAC, at(1));
        assert_eq!(
            gateways.route(v6("fd79::2").into()),
            Some((gw6.into(), Some(MAC)))
        );
        let stale: Vec<Probe> = probes(&gateways, 30_001)
            .into_iter()
            .filter(|p| p.target == gw6.into())
            .collect();
        assert_eq!(
            stale,
            vec![Probe {
                target: gw6.into(),
                to_mac: None
            }]
        );
    }

    #[test]
    fn workers_racing_send_each_probe_once() {
        let gateways = std::sync::Arc::new(Gateways::new(Some(GW4), None));
        let sent: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let gateways = std::sync::Arc::clone(&gateways);
                    scope.spawn(move || {
                        (0..1000)
                            .map(|i| probes(&gateways, i % 3))
                            .map(|p| p.len())
                            .sum::<usize>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(sent, 1, "every worker saw the same due time");
    }

    #[test]
    fn handshakes_confirm_the_gateway_or_make_it_suspect_once() {
        let gateways = Gateways::new(Some(GW4), None);
        let client = Ipv4Address::new(10, 79, 0, 2).into();
        assert_eq!(probes(&gateways, 0).len(), 1);
        // Unresolved: a handshake through any MAC changes nothing.
        gateways.handshake_via(client, MAC, at(10));
        assert_eq!(gateways.mac(GW4.into()), None);
        gateways.confirm(GW4.into(), MAC, at(20));
        // Through the gateway's MAC: confirmed, no refresh at 30 s.
        gateways.handshake_via(client, MAC, at(25_000));
        assert_eq!(probes(&gateways, 30_020), vec![]);
        assert_eq!(gateways.next_due(), Some(at(25_000) + GATEWAY_REACHABLE));
        // Through a new MAC (a replaced router): a broadcast request at once, the old MAC
        // in use until the answer.
        gateways.handshake_via(client, NEW_MAC, at(40_000));
        assert_eq!(probes(&gateways, 40_000), vec![broadcast4()]);
        assert_eq!(gateways.mac(GW4.into()), Some(MAC));
        gateways.confirm(GW4.into(), NEW_MAC, at(40_001));
        assert_eq!(gateways.mac(GW4.into()), Some(NEW_MAC));
        // A second router (the old MAC, still forwarding to us): suspected once...
        gateways.handshake_via(client, MAC, at(41_000));
        assert_eq!(probes(&gateways, 41_000), vec![broadcast4()]);
        gateways.confirm(GW4.into(), NEW_MAC, at(41_001));
        // ...not again for every connection through it.
        for ms in (42_000..60_000).step_by(100) {
            gateways.handshake_via(client, MAC, at(ms));
            assert_eq!(probes(&gateways, ms), vec![], "{ms}");
        }
        // A suspect gateway that does not answer is forgotten like a stale one.
        let gateways = Gateways::new(Some(GW4), None);
        gateways.confirm(GW4.into(), MAC, at(0));
        gateways.handshake_via(client, NEW_MAC, at(1000));
        for ms in [1000, 2000, 3000] {
            assert_eq!(probes(&gateways, ms), vec![broadcast4()], "{ms}");
        }
        assert_eq!(probes(&gateways, 4000), vec![broadcast4()]);
        assert_eq!(gateways.mac(GW4.into()), None);
        // Another family's gateway is not involved.
        gateways.handshake_via(v6("fd79::2").into(), NEW_MAC, at(5000));
    }

    #[test]
    fn the_report_line() {
        let gateways = Gateways::new(Some(GW4), Some(v6("fd77::1")));
        assert_eq!(
            gateways.to_string(),
            "10.77.0.1 unresolved, fd77::1 unresolved (0 probes)"
        );
        probes(&gateways, 0);
        gateways.confirm(GW4.into(), MAC, at(1));
        assert_eq!(
            gateways.to_string(),
            "10.77.0.1 at 02:00:00:00:00:01, fd77::1 unresolved (2 probes)"
        );
        assert_eq!(Gateways::default().to_string(), "none (0 probes)");
    }

    #[test]
    fn a_worker_whose_clock_is_behind_changes_nothing() {
        let gateways = Gateways::new(Some(GW4), None);
        gateways.confirm(GW4.into(), MAC, at(10_000));
        // A worker 5 ms behind polls and confirms: still reachable, no probe.
        assert_eq!(probes(&gateways, 9_995), vec![]);
        gateways.confirm(GW4.into(), MAC, at(9_995));
        assert_eq!(probes(&gateways, 20_000), vec![]);
        assert_eq!(gateways.mac(GW4.into()), Some(MAC));
    }
}
