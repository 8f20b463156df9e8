//! Loss recovery over the in-memory link: chosen frames are dropped, and the data must
//! arrive byte for byte within the configured time.
//!
//! Each loss the table repairs is a scenario run twice: with recovery on it must be repaired
//! within one probe timeout (or, for a SACK re-send, within a few round trips), and with
//! recovery off (`rto_min: None`) the same loss must cost smoltcp's one-second timer, so no
//! scenario passes without the mechanism it tests.

use super::super::recovery::refresh_ack;
use super::*;
use crate::demux::flags;
use core::cell::{Cell, RefCell};

/// The segment in a frame, if it is TCP.
fn seg_of(frame: &[u8]) -> Option<SegmentRepr> {
    TcpFrame::new_checked(frame)
        .ok()
        .and_then(|tcp| SegmentRepr::parse(&tcp).ok())
}

fn has_data(frame: &[u8]) -> bool {
    seg_of(frame).is_some_and(|s| s.payload_len > 0)
}

fn has_flag(frame: &[u8], flag: u8) -> bool {
    seg_of(frame).is_some_and(|s| s.flags & flag != 0)
}

fn pure_ack(frame: &[u8]) -> bool {
    seg_of(frame).is_some_and(|s| s.segment_len() == 0 && s.flags & flags::RST == 0)
}

/// `frame` (Ethernet, IPv4, TCP) emitted again after `edit` changed its TCP header, with
/// good checksums: the options a Linux peer would send and smoltcp does not.
fn rewrite(frame: &[u8], edit: impl FnOnce(&mut TcpRepr<'_>)) -> Vec<u8> {
    let caps = ChecksumCapabilities::default();
    let eth = EthernetFrame::new_checked(frame).unwrap();
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    let ip_repr = Ipv4Repr::parse(&ip, &caps).unwrap();
    let (src, dst) = (
        IpAddress::Ipv4(ip_repr.src_addr),
        IpAddress::Ipv4(ip_repr.dst_addr),
    );
    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
    let mut tcp_repr = TcpRepr::parse(&tcp, &src, &dst, &caps).unwrap();
    edit(&mut tcp_repr);
    let ip_repr = Ipv4Repr {
        payload_len: tcp_repr.buffer_len(),
        ..ip_repr
    };
    let mut out = vec![0u8; 14 + ip_repr.buffer_len() + tcp_repr.buffer_len()];
    out[..14].copy_from_slice(&frame[..14]);
    ip_repr.emit(&mut Ipv4Packet::new_unchecked(&mut out[14..34]), &caps);
    tcp_repr.emit(
        &mut TcpPacket::new_unchecked(&mut out[34..]),
        &src,
        &dst,
        &caps,
    );
    out
}

/// What crosses the link in one step may be lost: `down` decides for each frame the server
/// sent, `up` for each frame the client sent.
struct Loss<D, U> {
    down: D,
    up: U,
}

fn no_loss() -> Loss<impl FnMut(&[u8]) -> bool, impl FnMut(&[u8]) -> bool> {
    Loss {
        down: |_: &[u8]| false,
        up: |_: &[u8]| false,
    }
}

/// Loses the first frame in one direction for which `pick` is true; `lost` counts.
fn first<'a>(lost: &'a Cell<usize>, pick: fn(&[u8]) -> bool) -> impl FnMut(&[u8]) -> bool + 'a {
    move |frame: &[u8]| {
        let drop = lost.get() == 0 && pick(frame);
        lost.set(lost.get() + usize::from(drop));
        drop
    }
}

/// Loses the `n`-th (from 1) frame with data in one direction.
fn nth_data(n: usize) -> impl FnMut(&[u8]) -> bool {
    let mut seen = 0;
    move |frame: &[u8]| {
        if !has_data(frame) {
            return false;
        }
        seen += 1;
        seen == n
    }
}

fn never(_: &[u8]) -> bool {
    false
}

impl Net {
    /// 4 KiB buffers, loss recovery with floor `rto_min`.
    fn with_rto_min(rto_min: Option<Duration>) -> Net {
        Net::with(1, |config| {
            config.conn_limit = 8;
            config.rto_min = rto_min;
        })
    }

    /// One step of `STEP`: frames from the client reach the server (unless lost), the
    /// server runs (echoing; closing first after echoing "quit\n"), its frames reach the
    /// client (unless lost), the client runs.
    fn lossy_step<D, U>(&mut self, loss: &mut Loss<D, U>)
    where
        D: FnMut(&[u8]) -> bool,
        U: FnMut(&[u8]) -> bool,
    {
        self.now += STEP;
        self.server.drop_pending(&mut loss.up);
        self.server_step(echo_then_quit);
        self.client.drop_pending(&mut loss.down);
        self.swarm.poll(self.now, &mut self.client);
    }

    /// Steps with `loss` until `done`, for at most `limit`; returns the time it took.
    #[track_caller]
    fn lossy_until<D, U>(
        &mut self,
        what: &str,
        limit: Duration,
        loss: &mut Loss<D, U>,
        mut done: impl FnMut(&mut Net) -> bool,
    ) -> Duration
    where
        D: FnMut(&[u8]) -> bool,
        U: FnMut(&[u8]) -> bool,
    {
        let start = self.now;
        while !done(self) {
            assert!(
                self.now - start <= limit,
                "not within {limit}: {what}; stats {:?}",
                self.table.stats()
            );
            self.lossy_step(loss);
        }
        self.now - start
    }

    /// An established connection (number 0) with a few round trips behind it, so it has
    /// an RTT sample; loss recovery with the default floor.
    fn warm() -> Net {
        Net::warm_with(Some(DEFAULT_RTO_MIN), true)
    }

    /// An established connection (number 0) after a few round trips, with floor `rto_min`;
    /// without `sack`, the client's SYN loses its SACK-permitted option on the way, so the
    /// connection runs without SACK (as with a peer that does not offer it).
    fn warm_with(rto_min: Option<Duration>, sack: bool) -> Net {
        let mut net = Net::with_rto_min(rto_min);
        net.connect();
        if !sack {
            // The client's SYN (after its ARP exchange) without the option.
            let mut rewritten = false;
            while !rewritten {
                net.now += STEP;
                let syns = RefCell::new(Vec::new());
                net.server.drop_pending(|frame| {
                    let syn = has_flag(frame, flags::SYN);
                    if syn {
                        let frame = rewrite(frame, |tcp| tcp.sack_permitted = false);
                        syns.borrow_mut().push(frame);
                    }
                    syn
                });
                for syn in syns.into_inner() {
                    net.inject(&syn);
                    rewritten = true;
                }
                net.server_step(echo);
                net.swarm.poll(net.now, &mut net.client);
            }
        }
        net.run_until("established", |net| net.table.stats().active == 1);
        for _ in 0..4 {
            net.echo_round(b"warm-up");
        }
        net
    }

    /// Sends `data` on connection 0 and reads back its echo, without loss.
    #[track_caller]
    fn echo_round(&mut self, data: &[u8]) {
        self.swarm.socket(0).send_slice(data).unwrap();
        self.lossy_until("echoed", Duration::from_millis(10), &mut no_loss(), |net| {
            net.swarm.socket_ref(0).recv_queue() == data.len()
        });
        assert_eq!(self.received(0), data);
        self.lossy_until(
            "acknowledged",
            Duration::from_millis(10),
            &mut no_loss(),
            |net| net.server_copies() == 0,
        );
    }

    /// Everything connection `conn` has received so far.
    fn received(&mut self, conn: usize) -> Vec<u8> {
        let mut data = vec![0u8; self.swarm.socket_ref(conn).recv_queue()];
        let n = self.swarm.socket(conn).recv_slice(&mut data).unwrap();
        data.truncate(n);
        data
    }

    fn recovery(&self) -> RecoveryStats {
        self.table.stats().recovery
    }

    /// The server's connection 0 still waits for acknowledgments.
    fn server_copies(&self) -> usize {
        self.table
            .buckets
            .iter()
            .flat_map(|b| &b.slots)
            .map(|s| s.flight.copies())
            .sum()
    }

    /// Bytes the server's sockets sent and still wait to see acknowledged (smoltcp's view).
    fn server_unacked(&self) -> usize {
        self.table
            .buckets
            .iter()
            .flat_map(|b| {
                b.slots
                    .iter()
                    .filter_map(|s| s.handle)
                    .map(|h| b.sockets.get::<tcp::Socket>(h).send_queue())
            })
            .sum()
    }

    /// The server's connections negotiated SACK.
    fn server_sack(&self) -> Vec<bool> {
        self.table
            .buckets
            .iter()
            .flat_map(|b| &b.slots)
            .filter(|s| s.phase == Phase::Open)
            .map(|s| s.flight.sack_ok())
            .collect()
    }

    /// Connection 0's next sequence number (all the server sent).
    fn server_snd_max(&self) -> u32 {
        self.table
            .buckets
            .iter()
            .flat_map(|b| &b.slots)
            .find(|s| s.phase == Phase::Open)
            .map(|s| s.flight.snd_max())
            .unwrap()
    }

    fn server_min_rtt(&self) -> Duration {
        let rtt = self
            .table
            .buckets
            .iter()
            .flat_map(|b| &b.slots)
            .map(|s| s.flight.min_rtt_us())
            .max()
            .unwrap_or(0);
        Duration::from_micros(u64::from(rtt))
    }
}

/// The link's step: one 50 µs poll of each side (a round trip is one or two steps).
const STEP: Duration = Duration::from_micros(50);

/// `data` of `len` bytes that shows any misplaced byte.
fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

/// A loss repaired: the link after it, and how long the repair took from the moment the
/// data (or the connection) was asked for.
struct Repaired {
    net: Net,
    took: Duration,
    /// The server's minimum RTT when the frame was lost (zero in a handshake): the probe
    /// timeout is `rto_min` + 2·`min_rtt`.
    min_rtt: Duration,
}

/// The only reply of an idle connection is lost.
fn lose_the_only_reply(rto_min: Option<Duration>) -> Repaired {
    let mut net = Net::warm_with(rto_min, true);
    let min_rtt = net.server_min_rtt();
    net.swarm.socket(0).send_slice(b"ping").unwrap();
    let lost = Cell::new(0);
    let mut loss = Loss {
        down: first(&lost, has_data),
        up: never,
    };
    let took = net.lossy_until("the reply", Duration::from_secs(2), &mut loss, |net| {
        net.swarm.socket_ref(0).recv_queue() == 4
    });
    assert_eq!(lost.get(), 1);
    assert_eq!(net.received(0), b"ping");
    Repaired { net, took, min_rtt }
}

/// The `n`-th of three segments of one reply (4,000 bytes) is lost, with or without SACK.
fn lose_one_of_three_segments(rto_min: Option<Duration>, n: usize, sack: bool) -> Repaired {
    let mut net = Net::warm_with(rto_min, sack);
    let min_rtt = net.server_min_rtt();
    assert_eq!(net.server_sack(), [sack]);
    let request = pattern(4000, n as u8);
    net.swarm.socket(0).send_slice(&request).unwrap();
    let mut loss = Loss {
        down: nth_data(n),
        up: never,
    };
    let took = net.lossy_until(
        "all of the echo",
        Duration::from_secs(2),
        &mut loss,
        |net| net.swarm.socket_ref(0).recv_queue() == request.len(),
    );
    assert_eq!(net.received(0), request, "byte for byte");
    Repaired { net, took, min_rtt }
}

fn lose_the_second_segment(rto_min: Option<Duration>) -> Repaired {
    lose_one_of_three_segments(rto_min, 2, true)
}

fn lose_the_last_segment(rto_min: Option<Duration>) -> Repaired {
    lose_one_of_three_segments(rto_min, 3, true)
}

fn lose_the_second_segment_without_sack(rto_min: Option<Duration>) -> Repaired {
    lose_one_of_three_segments(rto_min, 2, false)
}

/// The client's ACK of a reply is lost; the client answers the duplicate the server then
/// sends with a D-SACK block, as Linux does (smoltcp does not send D-SACK, so the test adds
/// it to the client's duplicate ACK).
fn lose_the_clients_ack(rto_min: Option<Duration>) -> Repaired {
    let mut net = Net::warm_with(rto_min, true);
    let min_rtt = net.server_min_rtt();
    let echoed = net.server_snd_max().wrapping_add(4);
    net.swarm.socket(0).send_slice(b"ping").unwrap();
    let start = net.now;
    let mut acks = 0;
    while net.swarm.socket_ref(0).recv_queue() < 4 || net.server_unacked() > 0 {
        assert!(
            net.now - start <= Duration::from_secs(2),
            "not acknowledged"
        );
        net.now += STEP;
        let duplicate = RefCell::new(None);
        net.server.drop_pending(|frame| {
            if !pure_ack(frame) {
                return false;
            }
            if seg_of(frame).unwrap().ack_number != Some(echoed) {
                return false;
            }
            acks += 1;
            match acks {
                // The ACK of the reply: lost.
                1 => true,
                // The ACK of its duplicate: replaced by one with a D-SACK block.
                2 => {
                    let dsack = (echoed.wrapping_sub(4), echoed);
                    *duplicate.borrow_mut() = Some(rewrite(frame, |tcp| {
                        tcp.sack_ranges = [Some(dsack), None, None];
                    }));
                    true
                }
                _ => false,
            }
        });
        if let Some(frame) = duplicate.into_inner() {
            net.inject(&frame);
        }
        net.server_step(echo_then_quit);
        net.swarm.poll(net.now, &mut net.client);
    }
    assert_eq!(acks, 2, "the ACK, and the ACK of the duplicate");
    assert_eq!(net.received(0), b"ping", "the duplicate was dropped");
    Repaired {
        took: net.now - start,
        net,
        min_rtt,
    }
}

/// The server's SYN-ACK is lost.
fn lose_the_syn_ack(rto_min: Option<Duration>) -> Repaired {
    let mut net = Net::with_rto_min(rto_min);
    net.connect();
    let min_rtt = Duration::ZERO;
    let lost = Cell::new(0);
    let mut loss = Loss {
        down: first(&lost, |frame| has_flag(frame, flags::SYN)),
        up: never,
    };
    let took = net.lossy_until("established", Duration::from_secs(2), &mut loss, |net| {
        net.table.stats().active == 1
    });
    assert_eq!(lost.get(), 1);
    net.echo_round(b"hello");
    Repaired { net, took, min_rtt }
}

/// The client's ACK that completes the handshake is lost, and the client says nothing more
/// (it waits for the server to speak first).
fn lose_the_handshake_ack(rto_min: Option<Duration>) -> Repaired {
    let mut net = Net::with_rto_min(rto_min);
    net.connect();
    let min_rtt = Duration::ZERO;
    let lost = Cell::new(0);
    let mut loss = Loss {
        down: never,
        up: first(&lost, pure_ack),
    };
    let took = net.lossy_until("established", Duration::from_secs(2), &mut loss, |net| {
        net.table.stats().active == 1
    });
    assert_eq!(lost.get(), 1);
    assert_eq!(net.state(0), tcp::State::Established);
    net.echo_round(b"hello");
    Repaired { net, took, min_rtt }
}

/// The server's FIN is lost: it closes first (its FIN follows the echo of "quit\n"), or
/// the client closed first and the server's FIN is the one of LAST-ACK.
fn lose_the_servers_fin(rto_min: Option<Duration>, server_first: bool) -> Repaired {
    let mut net = Net::warm_with(rto_min, true);
    let min_rtt = net.server_min_rtt();
    if server_first {
        net.swarm.socket(0).send_slice(b"quit\n").unwrap();
    } else {
        net.swarm.socket(0).close();
    }
    let lost = Cell::new(0);
    let mut loss = Loss {
        down: first(&lost, |frame| has_flag(frame, flags::FIN)),
        up: never,
    };
    let took = net.lossy_until(
        "the client has the server's FIN",
        Duration::from_secs(2),
        &mut loss,
        |net| {
            matches!(
                net.state(0),
                tcp::State::CloseWait | tcp::State::TimeWait | tcp::State::Closed
            )
        },
    );
    assert_eq!(lost.get(), 1);
    if server_first {
        assert_eq!(net.received(0), b"quit\n");
        net.swarm.socket(0).close();
    }
    net.lossy_until("closed", Duration::from_millis(10), &mut loss, |net| {
        net.table.stats().in_use == 0
    });
    Repaired { net, took, min_rtt }
}

fn lose_the_fin_of_a_server_close(rto_min: Option<Duration>) -> Repaired {
    lose_the_servers_fin(rto_min, true)
}

fn lose_the_fin_of_last_ack(rto_min: Option<Duration>) -> Repaired {
    lose_the_servers_fin(rto_min, false)
}

/// A scenario: loses a chosen frame on a table with floor `rto_min` (`None`: recovery off).
type Scenario = fn(rto_min: Option<Duration>) -> Repaired;

/// Every scenario, by name.
const SCENARIOS: [(&str, Scenario); 9] = [
    ("the only reply", lose_the_only_reply),
    ("the second of three segments", lose_the_second_segment),
    ("the last of three segments", lose_the_last_segment),
    (
        "the second of three segments, without SACK",
        lose_the_second_segment_without_sack,
    ),
    ("the client's ACK", lose_the_clients_ack),
    ("the SYN-ACK", lose_the_syn_ack),
    ("the client's handshake ACK", lose_the_handshake_ack),
    ("the FIN of a server close", lose_the_fin_of_a_server_close),
    ("the FIN of LAST-ACK", lose_the_fin_of_last_ack),
];

#[test]
fn with_recovery_off_every_scenario_waits_for_smoltcps_second() {
    for (name, scenario) in SCENARIOS {
        let Repaired { net, took, .. } = scenario(None);
        assert!(
            took >= Duration::from_millis(999),
            "{name}: repaired in {took} without loss recovery; the scenario tests nothing"
        );
        let stats = net.recovery();
        assert_eq!(
            (
                stats.probes,
                stats.sack_resends,
                stats.recovered,
                stats.spurious
            ),
            (0, 0, 0, 0),
            "{name}: {stats:?}"
        );
        assert!(stats.smoltcp_retransmits >= 1, "{name}: {stats:?}");
        assert_eq!(net.server_copies(), 0, "{name}: no copies are kept");
    }
}

#[test]
fn the_only_reply_of_an_idle_connection_is_probed_after_one_pto() {
    for rto_min in [DEFAULT_RTO_MIN, Duration::from_millis(5)] {
        let Repaired {
            mut net,
            took,
            min_rtt,
        } = lose_the_only_reply(Some(rto_min));
        let timeout = rto_min + min_rtt * 2;
        // The request takes a step to arrive, the probe one more to come back.
        assert!(took >= rto_min, "{took} is faster than the floor {rto_min}");
        assert!(
            took <= timeout + STEP * 3,
            "{took}, the PTO is {timeout} (rto_min {rto_min})"
        );
        let stats = net.recovery();
        assert_eq!(
            (stats.probes, stats.sack_resends, stats.smoltcp_retransmits),
            (1, 0, 0),
            "{stats:?}"
        );
        // The probe's outcome is settled by the next acknowledgment.
        net.echo_round(b"after");
        let stats = net.recovery();
        assert_eq!((stats.recovered, stats.spurious), (1, 0), "{stats:?}");
        assert_eq!(net.server_copies(), 0);
    }
}

#[test]
fn one_of_several_segments_is_resent_when_sack_shows_it_missing() {
    let Repaired { mut net, took, .. } = lose_the_second_segment(Some(DEFAULT_RTO_MIN));
    let stats = net.recovery();
    assert_eq!(
        (stats.sack_resends, stats.probes, stats.smoltcp_retransmits),
        (1, 0, 0),
        "{stats:?}"
    );
    assert!(
        took < DEFAULT_RTO_MIN,
        "{took}: a SACK re-send needs no timer"
    );
    net.echo_round(b"after");
    assert_eq!(net.recovery().recovered, 1);
}

#[test]
fn the_last_of_several_segments_is_probed_after_one_pto() {
    let Repaired { net, took, min_rtt } = lose_the_last_segment(Some(DEFAULT_RTO_MIN));
    let timeout = DEFAULT_RTO_MIN + min_rtt * 2;
    assert!(took <= timeout + STEP * 3, "{took}, the PTO is {timeout}");
    let stats = net.recovery();
    assert_eq!(
        (stats.probes, stats.sack_resends, stats.smoltcp_retransmits),
        (1, 0, 0),
        "{stats:?}"
    );
}

#[test]
fn without_sack_a_lost_segment_is_repaired_by_a_probe_of_the_oldest_copy() {
    let Repaired {
        mut net,
        took,
        min_rtt,
    } = lose_the_second_segment_without_sack(Some(DEFAULT_RTO_MIN));
    let timeout = DEFAULT_RTO_MIN + min_rtt * 2;
    // The client's duplicate ACK (no SACK block) shows nothing: the probe repairs the
    // hole, and the ACK it brings acknowledges everything.
    assert!(took <= timeout + STEP * 3, "{took}, the PTO is {timeout}");
    net.echo_round(b"after");
    let stats = net.recovery();
    assert_eq!(
        (stats.probes, stats.sack_resends, stats.smoltcp_retransmits),
        (1, 0, 0),
        "{stats:?}"
    );
    // Without SACK there is no D-SACK either: the outcome is not known.
    assert_eq!((stats.recovered, stats.spurious), (0, 0), "{stats:?}");
}

#[test]
fn a_lost_ack_from_the_client_costs_one_spurious_probe_and_no_duplicate_data() {
    let Repaired {
        mut net,
        took,
        min_rtt,
    } = lose_the_clients_ack(Some(DEFAULT_RTO_MIN));
    let timeout = DEFAULT_RTO_MIN + min_rtt * 2;
    assert!(took <= timeout + STEP * 3, "{took}, the PTO is {timeout}");
    net.echo_round(b"after");
    let stats = net.recovery();
    assert_eq!(
        (
            stats.probes,
            stats.spurious,
            stats.recovered,
            stats.smoltcp_retransmits
        ),
        (1, 1, 0, 0),
        "{stats:?}"
    );
}

#[test]
fn a_lost_syn_ack_is_sent_again_after_one_pto() {
    let Repaired { net, took, .. } = lose_the_syn_ack(Some(DEFAULT_RTO_MIN));
    // No RTT is known yet: the PTO is the floor. The SYN takes a step, and the client's
    // ACK one more.
    assert!(
        took >= DEFAULT_RTO_MIN && took <= DEFAULT_RTO_MIN + STEP * 4,
        "{took}"
    );
    assert_eq!(net.recovery().probes, 1);
}

#[test]
fn the_client_ack_that_completes_the_handshake_may_be_lost() {
    // Only a probe of the SYN-ACK brings another ACK.
    let Repaired { net, took, .. } = lose_the_handshake_ack(Some(DEFAULT_RTO_MIN));
    assert!(took <= DEFAULT_RTO_MIN + STEP * 4, "{took}");
    assert_eq!(net.recovery().probes, 1);
}

#[test]
fn a_lost_fin_from_the_server_is_sent_again_after_one_pto() {
    for scenario in [lose_the_fin_of_a_server_close, lose_the_fin_of_last_ack] {
        let Repaired { net, took, min_rtt } = scenario(Some(DEFAULT_RTO_MIN));
        let timeout = DEFAULT_RTO_MIN + min_rtt * 2;
        assert!(
            took <= timeout + STEP * 3,
            "{} µs, the PTO is {} µs",
            took.total_micros(),
            timeout.total_micros()
        );
        assert_eq!(net.recovery().probes, 1);
    }
}

#[test]
fn a_syn_ack_is_probed_twice_at_most() {
    let mut net = Net::with_rto_min(Some(DEFAULT_RTO_MIN));
    net.connect();
    let syn_acks = Cell::new(0);
    let mut loss = Loss {
        down: |frame: &[u8]| {
            let syn_ack = has_flag(frame, flags::SYN);
            syn_acks.set(syn_acks.get() + usize::from(syn_ack));
            syn_ack
        },
        up: |_: &[u8]| false,
    };
    let start = net.now;
    net.lossy_until("0.9 s", Duration::from_secs(1), &mut loss, |net| {
        net.now - start >= Duration::from_millis(900)
    });
    assert_eq!(
        net.recovery().probes,
        u64::from(MAX_HANDSHAKE_PROBES),
        "then smoltcp's own timer, at one second"
    );
    assert_eq!(syn_acks.get(), 1 + usize::from(MAX_HANDSHAKE_PROBES));
}

#[test]
fn a_lost_fin_from_the_client_is_answered_at_once_when_it_comes_again() {
    let mut net = Net::warm();
    net.swarm.socket(0).close();
    let lost = Cell::new(0);
    let mut loss = Loss {
        down: |_: &[u8]| false,
        up: |frame: &[u8]| {
            let drop = lost.get() == 0 && has_flag(frame, flags::FIN);
            lost.set(lost.get() + usize::from(drop));
            drop
        },
    };
    net.lossy_step(&mut loss);
    net.lossy_step(&mut loss);
    assert_eq!(lost.get(), 1);
    assert_eq!(net.state(0), tcp::State::FinWait1);
    // Repairing its FIN is the client's business (here smoltcp's one-second timer);
    // the server answers the FIN, and closes, as soon as it comes.
    net.now += Duration::from_millis(1100);
    net.swarm.poll_all(net.now, &mut net.client);
    net.lossy_step(&mut loss);
    net.lossy_step(&mut loss);
    assert!(
        matches!(net.state(0), tcp::State::TimeWait | tcp::State::Closed),
        "{}",
        net.state(0)
    );
    net.lossy_until("closed", Duration::from_millis(10), &mut loss, |net| {
        net.table.stats().in_use == 0
    });
    assert_eq!(net.recovery().probes, 0, "nothing of the server's was lost");
}

#[test]
fn out_of_order_and_duplicate_data_from_the_client_get_an_ack_at_once() {
    let mut net = Net::warm();
    let request = pattern(4000, 3);
    net.swarm.socket(0).send_slice(&request).unwrap();
    // The client's three segments: the first is lost, the second kept for later.
    net.swarm.poll(net.now, &mut net.client);
    let mut frames = Vec::new();
    net.server.drop_pending(|frame| {
        if has_data(frame) {
            frames.push(frame.to_vec());
        }
        frames.len() == 1 && has_data(frame)
    });
    assert_eq!(frames.len(), 3);
    let first = seg_of(&frames[0]).unwrap();
    net.now += STEP;
    net.server_step(echo);
    let acks: Vec<SegmentRepr> = net
        .take_server_frames()
        .iter()
        .filter_map(|f| seg_of(f))
        .collect();
    assert_eq!(acks.len(), 2, "one ACK per segment out of order: {acks:?}");
    for ack in &acks {
        assert_eq!(ack.ack_number, Some(first.seq_number), "a duplicate ACK");
        assert_eq!(ack.payload_len, 0);
        assert_eq!(ack.sack_len, 1, "with a SACK block");
        assert_eq!(ack.sack[0].0, first.seq_number + first.payload_len as u32);
    }
    // The first segment arrives at last; the whole request is echoed.
    net.inject(&frames[0]);
    net.lossy_until("echoed", Duration::from_millis(10), &mut no_loss(), |net| {
        net.swarm.socket_ref(0).recv_queue() == request.len()
    });
    assert_eq!(net.received(0), request);
    // A duplicate of data the server already has, as a client sends it again (with its
    // newest acknowledgment; smoltcp drops a segment whose ACK is older than what it
    // already has): acknowledged at once.
    let mut duplicate = frames[1].clone();
    let window = seg_of(&duplicate).unwrap().window_len;
    refresh_ack(&mut duplicate, net.server_snd_max(), window);
    net.inject(&duplicate);
    net.now += STEP;
    net.server_step(echo);
    let acks: Vec<SegmentRepr> = net
        .take_server_frames()
        .iter()
        .filter_map(|f| seg_of(f))
        .collect();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(
        acks[0].ack_number,
        Some(first.seq_number.wrapping_add(request.len() as u32))
    );
}

#[test]
fn failed_probes_back_off_and_never_come_faster_than_the_floor() {
    let mut net = Net::warm();
    // The client acknowledged the warm-up's replies at once: a lone reply waits for the
    // floor alone.
    assert!(net.server_ack_delay() + DEFAULT_RTO_MIN / 4 < DEFAULT_RTO_MIN);
    net.swarm.socket(0).send_slice(b"ping").unwrap();
    let mut dead = Loss {
        down: |_: &[u8]| true,
        up: |_: &[u8]| false,
    };
    let start = net.now;
    let mut times = Vec::new();
    net.lossy_until("0.9 s", Duration::from_secs(1), &mut dead, |net| {
        if net.recovery().probes as usize > times.len() {
            times.push(net.now - start);
        }
        net.now - start >= Duration::from_millis(900)
    });
    assert_eq!(times.len(), usize::from(MAX_PROBES), "{times:?}");
    // Probe k goes out 2^k PTOs after the one before it (give or take a step; the
    // request itself takes one).
    let pto = DEFAULT_RTO_MIN;
    let mut previous = Duration::ZERO;
    for (k, &at) in times.iter().enumerate() {
        let gap = at - previous;
        assert!(gap >= DEFAULT_RTO_MIN, "probe {k} after {gap}");
        let expected = pto * (1 << k);
        assert!(
            gap + STEP * 3 >= expected && gap <= expected + STEP * 3,
            "probe {k} after {gap}, expected {expected}: {times:?}"
        );
        previous = at;
    }
    assert_eq!(net.recovery().smoltcp_retransmits, 0);
    // Then smoltcp's own timer, at one second, once the link works again.
    net.lossy_until(
        "delivered by smoltcp",
        Duration::from_millis(400),
        &mut no_loss(),
        |net| net.swarm.socket_ref(0).recv_queue() == 4,
    );
    assert_eq!(net.received(0), b"ping");
    assert_eq!(net.recovery().smoltcp_retransmits, 1);
    // An acknowledgment ends the episode.
    net.echo_round(b"again");
    assert_eq!(net.server_copies(), 0);
}

#[test]
fn steady_request_response_without_loss_sends_no_probe() {
    let mut net = Net::warm();
    for round in 0..500 {
        let request = pattern(1 + round % 3000, round as u8);
        net.echo_round(&request);
        assert_eq!(net.recovery().probes, 0, "round {round} at {}", net.now);
        if round % 50 == 0 {
            // Idle for longer than a PTO: the client acknowledged, nothing is probed.
            let until = net.now + Duration::from_millis(5);
            net.lossy_until("idle", Duration::from_millis(6), &mut no_loss(), |net| {
                net.now >= until
            });
        }
    }
    let stats = net.recovery();
    assert_eq!(stats, RecoveryStats::default(), "{stats:?}");
    assert_eq!(net.server_copies(), 0);
    assert_eq!(net.table.poll_delay(net.now), None, "no timer left running");
}

/// Regression: with the floor alone, a client that acknowledges every reply late (its
/// delayed ACK, or its next request from a thread serving thousands of connections) got a
/// copy of nearly every reply. Here 32 clients each send a request every 50 ms and delay
/// their ACKs by 40 ms: the probe timeout follows how late they acknowledge, so nothing is
/// probed, and every reply is echoed.
#[test]
fn clients_that_always_acknowledge_late_are_not_probed() {
    let conns = 32;
    let mut net = Net::with(conns, |config| {
        config.conn_limit = 64;
        config.rto_min = Some(DEFAULT_RTO_MIN);
    });
    for _ in 0..conns {
        net.connect();
    }
    net.run_until("established", |net| net.table.stats().active == conns);
    for c in 0..conns {
        net.swarm
            .socket(c)
            .set_ack_delay(Some(Duration::from_millis(40)));
    }
    let think = Duration::from_millis(50);
    let start = net.now;
    let mut next: Vec<Instant> = (0..conns)
        .map(|c| start + think * c as u32 / conns as u32)
        .collect();
    let mut echoed = 0;
    while net.now - start < Duration::from_secs(1) {
        net.now += STEP;
        for (c, at) in next.iter_mut().enumerate() {
            let socket = net.swarm.socket(c);
            let mut reply = [0u8; 16];
            if let Ok(n) = socket.recv_slice(&mut reply) {
                echoed += n;
            }
            if net.now >= *at {
                socket.send_slice(b"get k1\r\n").unwrap();
                *at += think;
            }
        }
        net.server_step(echo);
        // Every socket, for the clients' delayed-ACK timers.
        net.swarm.poll(net.now, &mut net.client);
        net.swarm.poll_all(net.now, &mut net.client);
    }
    let requests = conns * 20;
    assert!(echoed >= (requests - conns) * 8, "{echoed} bytes echoed");
    let stats = net.recovery();
    assert_eq!(
        (stats.probes, stats.spurious, stats.smoltcp_retransmits),
        (0, 0, 0),
        "{stats:?}"
    );
}

/// `a` is at or after `b` in sequence space.
fn at_or_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// What a Linux client in its interactive ("pingpong") mode does that smoltcp does not:
/// it answers a segment it already has with an ACK carrying a D-SACK block (RFC 2883).
/// The client here is smoltcp with a delayed ACK longer than its think time, so, like
/// Linux, it acknowledges a reply with its next request and a duplicate at once; the test
/// adds the D-SACK block to that ACK.
#[derive(Default)]
struct DsackClient {
    /// End of the server's data that reached the client.
    received_end: Option<u32>,
    /// A duplicate that reached the client, to report in its next segment.
    duplicate: Option<(u32, u32)>,
}

impl Net {
    /// One step of `STEP` with a [`DsackClient`]: `down` decides which of the server's
    /// frames are lost.
    fn dsack_step(&mut self, client: &mut DsackClient, down: &mut impl FnMut(&[u8]) -> bool) {
        self.now += STEP;
        if let Some(block) = client.duplicate {
            let rewritten = RefCell::new(None);
            self.server.drop_pending(|frame| {
                let answers = rewritten.borrow().is_none()
                    && seg_of(frame)
                        .and_then(|s| s.ack_number)
                        .is_some_and(|a| at_or_after(a, block.1));
                if answers {
                    *rewritten.borrow_mut() = Some(rewrite(frame, |tcp| {
                        tcp.sack_ranges = [Some(block), None, None];
                    }));
                }
                answers
            });
            if let Some(frame) = rewritten.into_inner() {
                self.inject(&frame);
                client.duplicate = None;
            }
        }
        self.server_step(echo);
        self.client.drop_pending(|frame| {
            if down(frame) {
                return true;
            }
            if let Some(seg) = seg_of(frame).filter(|s| s.payload_len > 0) {
                let end = seg.seq_number.wrapping_add(seg.payload_len as u32);
                match client.received_end {
                    Some(have) if at_or_after(have, end) => {
                        client.duplicate = Some((seg.seq_number, end));
                    }
                    _ => client.received_end = Some(end),
                }
            }
            false
        });
        self.swarm.poll(self.now, &mut self.client);
        // Every socket, for the client's delayed-ACK timer.
        self.swarm.poll_all(self.now, &mut self.client);
    }

    /// The largest quantile of the connections' ACK delays (0 before any sample).
    fn server_ack_delay(&self) -> Duration {
        let delay = self
            .table
            .buckets
            .iter()
            .flat_map(|b| &b.slots)
            .map(|s| s.flight.ack_delay_us())
            .max()
            .unwrap_or(0);
        Duration::from_micros(u64::from(delay))
    }
}

/// Runs connection 0 of a warm table with a client that delays its ACK until its next
/// request (a [`DsackClient`], whose delayed-ACK timer, 500 ms, never fires first), which
/// it sends `think(k)` after reply `k` arrived; the reply to request `lost` is lost once.
/// Returns the recovery counters and how long that reply took from its request.
fn next_request_client(
    replies: usize,
    lost: usize,
    mut think: impl FnMut(usize) -> Duration,
) -> (RecoveryStats, Duration) {
    let mut net = Net::warm();
    net.swarm
        .socket(0)
        .set_ack_delay(Some(Duration::from_millis(500)));
    let mut client = DsackClient::default();
    let start = net.now;
    let mut next = net.now;
    let mut waiting: Option<(Vec<u8>, Instant)> = None;
    let mut done = 0;
    let mut repair = None;
    let mut took = None;
    while done < replies {
        assert!(net.now - start < Duration::from_secs(60), "{done} replies");
        if waiting.is_none() && net.now >= next {
            let request = format!("request {done:05}\n").into_bytes();
            net.swarm.socket(0).send_slice(&request).unwrap();
            waiting = Some((request, net.now));
        }
        // The reply to request `lost` (not a probe of the reply before it).
        let armed = done == lost && waiting.is_some() && repair.is_none();
        let mut lose = armed;
        net.dsack_step(&mut client, &mut |frame: &[u8]| {
            let drop = lose && has_data(frame);
            lose &= !drop;
            drop
        });
        if armed && !lose {
            repair = Some(net.now);
        }
        if let Some((request, sent)) = waiting.take() {
            if net.swarm.socket_ref(0).recv_queue() < request.len() {
                waiting = Some((request, sent));
                continue;
            }
            assert_eq!(net.received(0), request, "reply {done}");
            if done == lost {
                took = Some(net.now - sent);
            }
            next = net.now + think(done);
            done += 1;
        }
    }
    assert!(repair.is_some(), "a reply was lost");
    let stats = net.recovery();
    assert!(stats.recovered >= 1, "{stats:?}");
    assert_eq!(stats.smoltcp_retransmits, 0, "{stats:?}");
    assert!(net.server_ack_delay() > Duration::ZERO, "it learned");
    (stats, took.unwrap())
}

/// A reproducible think time in `from..from + spread`.
fn thinker(from: Duration, spread: Duration) -> impl FnMut(usize) -> Duration {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    move |_| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        from + Duration::from_micros(seed % spread.total_micros().max(1))
    }
}

/// Regression: a client that delays its ACK until its next request (Linux's interactive
/// mode, a request/response client with a think time longer than the probe timeout) got a
/// probe of nearly every reply, and answered each with a D-SACK. Here its think time is
/// 0.5 to 3 ms (uniform), and the server measures how late it acknowledges: at most one
/// reply in ten is probed. A reply lost on the way is still repaired within the longest
/// think time, a quarter of the floor and a few steps.
#[test]
fn a_client_that_acknowledges_with_its_next_request_is_rarely_probed() {
    let replies = 1500;
    let think = thinker(Duration::from_micros(500), Duration::from_micros(2500));
    let (stats, took) = next_request_client(replies, 1200, think);
    assert!(
        stats.probes <= replies as u64 / 10,
        "{} probes for {replies} replies: {stats:?}",
        stats.probes
    );
    let bound = Duration::from_millis(3) + DEFAULT_RTO_MIN / 4 + STEP * 5;
    assert!(took <= bound, "the lost reply took {took}, bound {bound}");
    assert!(took >= DEFAULT_RTO_MIN, "{took}: it was lost");
}

/// A client like that of `scripts/bench-loss.sh`: one thread sends a Poisson stream of
/// requests round-robin over 64 connections, so each connection's next request, and its
/// ACK of the reply, comes 3.0 to 3.4 ms after the one before. The timeout follows the
/// measured delays: a lost reply is probed within 3.4 ms and a quarter of the floor, and
/// after the first few replies none is probed spuriously.
#[test]
fn a_lost_reply_of_a_client_with_a_steady_think_time_is_probed_just_after_its_usual_ack() {
    let replies = 600;
    let think = thinker(Duration::from_micros(3000), Duration::from_micros(400));
    let (stats, took) = next_request_client(replies, 500, think);
    assert!(
        stats.probes_spurious <= 4,
        "{} spurious probes for {replies} replies: {stats:?}",
        stats.probes_spurious
    );
    let bound = Duration::from_micros(3400) + DEFAULT_RTO_MIN / 4 + STEP * 5;
    assert!(took <= bound, "the lost reply took {took}, bound {bound}");
    assert!(took >= Duration::from_micros(3000), "{took}: it was lost");
}

/// A client like that of `scripts/bench-connections.sh` at 10,000 connections: one thread
/// serves them all, so a connection's next request (and its ACK of the reply) comes 100 to
/// 170 ms later, and now and then at once (a request already due). The quick ones keep the
/// connection's minimum RTT at the network's, yet its lone replies wait for its measured
/// ACK delay, and a lost one is still repaired (its client has nothing unacknowledged, so
/// only a probe can) within its longest delay and a quarter of it less the floor (212 ms).
#[test]
fn a_client_that_acknowledges_100_ms_late_is_rarely_probed_and_its_lost_reply_repaired() {
    let replies = 80;
    let mut slow = thinker(Duration::from_millis(100), Duration::from_millis(70));
    let think = move |k: usize| {
        if k.is_multiple_of(10) {
            Duration::ZERO
        } else {
            slow(k)
        }
    };
    let (stats, took) = next_request_client(replies, 70, think);
    // The warm-up's replies were acknowledged at once: the first slow ones are probed,
    // each spurious probe doubling what the connection expects (1 ms to 100 ms: 7 probes).
    assert!(
        stats.probes_spurious <= 8,
        "{} spurious probes for {replies} replies: {stats:?}",
        stats.probes_spurious
    );
    let bound = Duration::from_micros(170_000 + 170_000 / 4) - DEFAULT_RTO_MIN + STEP * 5;
    assert!(took <= bound, "the lost reply took {took}, bound {bound}");
    assert!(took >= Duration::from_millis(100), "{took}: it was lost");
}

/// When a reply is lost, its client's own retransmission timer (a Linux client's probe or
/// RTO, at least its route's `rto_min`) sends the request again; the request's ACK shows
/// the reply never arrived, and the server sends it again at once, without waiting for its
/// probe (here 50 ms away).
#[test]
fn a_lost_reply_is_sent_again_when_the_client_sends_its_request_again() {
    let mut net = Net::warm_with(Some(Duration::from_millis(50)), true);
    net.swarm.socket(0).send_slice(b"ping").unwrap();
    // The request on its way, kept to be sent again as the client's timer would
    // (smoltcp's own waits a second).
    net.now += STEP;
    net.swarm.poll(net.now, &mut net.client);
    let request = RefCell::new(None);
    net.server.drop_pending(|frame| {
        if has_data(frame) {
            *request.borrow_mut() = Some(frame.to_vec());
        }
        false
    });
    let request = request.into_inner().expect("the request");
    let lost = Cell::new(0);
    let mut loss = Loss {
        down: first(&lost, has_data),
        up: never,
    };
    let start = net.now;
    net.lossy_until("4 ms", Duration::from_millis(5), &mut loss, |net| {
        net.now - start >= Duration::from_millis(4)
    });
    assert_eq!(lost.get(), 1);
    assert_eq!(
        net.swarm.socket_ref(0).recv_queue(),
        0,
        "the reply was lost"
    );
    net.inject(&request);
    let took = net.lossy_until("the reply", Duration::from_millis(1), &mut loss, |net| {
        net.swarm.socket_ref(0).recv_queue() == 4
    });
    assert!(took <= STEP * 2, "{took}");
    assert_eq!(net.received(0), b"ping");
    let stats = net.recovery();
    assert_eq!(
        (
            stats.peer_retransmit_resends,
            stats.probes,
            stats.smoltcp_retransmits
        ),
        (1, 0, 0),
        "{stats:?}"
    );
    net.echo_round(b"after");
    assert_eq!(net.server_copies(), 0);
}
