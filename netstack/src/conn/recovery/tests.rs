use std::collections::VecDeque;

use super::flight::{Resend, ResendKind};
use super::*;
use crate::demux::TcpFrame;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr,
    TcpSeqNumber,
};

const SERVER: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
const CLIENT: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
/// The server's initial sequence number in most tests.
const ISS: u32 = 1000;

/// A segment as a frame, and what `SegmentRepr` reads of it.
struct Frame {
    bytes: Vec<u8>,
    seg: SegmentRepr,
}

/// A TCP segment from `src` to `dst` in an Ethernet frame, with good checksums.
#[allow(clippy::too_many_arguments)]
fn frame(
    src: Ipv4Address,
    dst: Ipv4Address,
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
    window: u16,
    payload: &[u8],
    sack: &[(u32, u32)],
) -> Frame {
    let mut sack_ranges = [None; 3];
    for (range, &block) in sack_ranges.iter_mut().zip(sack) {
        *range = Some(block);
    }
    let tcp = TcpRepr {
        src_port: if src == SERVER { 11211 } else { 40000 },
        dst_port: if src == SERVER { 40000 } else { 11211 },
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: window,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: control == TcpControl::Syn,
        sack_ranges,
        timestamp: None,
        payload,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let mut bytes = vec![0u8; 14 + ip.buffer_len() + tcp.buffer_len()];
    bytes[12..14].copy_from_slice(&[0x08, 0x00]);
    let caps = ChecksumCapabilities::default();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut bytes[14..34]), &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut bytes[34..]),
        &IpAddress::Ipv4(src),
        &IpAddress::Ipv4(dst),
        &caps,
    );
    let seg = SegmentRepr::parse(&TcpFrame::new_checked(&bytes[..]).unwrap()).unwrap();
    Frame { bytes, seg }
}

/// The server's segment `seq..seq + len` (with `ack`, window 500).
fn data(seq: u32, len: usize, ack: u32) -> Frame {
    let payload: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8).collect();
    frame(
        SERVER,
        CLIENT,
        TcpControl::Psh,
        seq,
        Some(ack),
        500,
        &payload,
        &[],
    )
}

/// The client's acknowledgment of `ack` with `sack` blocks.
fn ack(ack: u32, sack: &[(u32, u32)]) -> SegmentRepr {
    frame(
        CLIENT,
        SERVER,
        TcpControl::None,
        7,
        Some(ack),
        1000,
        &[],
        sack,
    )
    .seg
}

fn at(us: i64) -> Instant {
    Instant::from_micros(us)
}

/// A flight whose SYN-ACK (`iss`, SACK permitted or not) is acknowledged at 100 µs,
/// with a first RTT sample of 100 µs.
fn synced(iss: u32, sack_ok: bool) -> (Recovery, RecoveryStats, Flight) {
    let mut recovery = Recovery::new(Some(DEFAULT_RTO_MIN), 1514);
    let mut stats = RecoveryStats::default();
    let mut flight = Flight::default();
    let mut syn_ack = frame(
        SERVER,
        CLIENT,
        TcpControl::Syn,
        iss,
        Some(7),
        4096,
        &[],
        &[],
    );
    if !sack_ok {
        syn_ack.seg.sack_permitted = false;
    }
    flight.on_send(&recovery, &mut stats, &syn_ack.bytes, &syn_ack.seg, at(0));
    assert_eq!(flight.copies(), 1);
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &ack(iss.wrapping_add(1), &[]),
        at(100),
    );
    assert_eq!(
        (flight.copies(), flight.min_rtt_us()),
        (0, 0),
        "a SYN-ACK gives no sample"
    );
    // As the ACK of a first reply, at once, would.
    flight.sample_rtt(&mut recovery, Duration::from_micros(100), false, at(100));
    assert_eq!(flight.min_rtt_us(), 100);
    (recovery, stats, flight)
}

fn send(
    flight: &mut Flight,
    recovery: &Recovery,
    stats: &mut RecoveryStats,
    f: &Frame,
    now: Instant,
) {
    flight.on_send(recovery, stats, &f.bytes, &f.seg, now);
}

/// Sends what `next_resend` asks for at `now`; returns the frames.
fn resend_due(
    flight: &mut Flight,
    recovery: &mut Recovery,
    stats: &mut RecoveryStats,
    now: Instant,
) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    while let Some(resend) = flight.next_resend(recovery, stats, now) {
        let mut bytes = vec![0xa5; flight.copy_len(resend)];
        flight.write_copy(resend, &mut bytes);
        flight.resent(recovery, stats, resend, now);
        sent.push(bytes);
        assert!(sent.len() < 100, "runaway");
    }
    assert!(!flight.due(now), "nothing left due");
    sent
}

fn seq_of(bytes: &[u8]) -> SegmentRepr {
    SegmentRepr::parse(&TcpFrame::new_checked(bytes).unwrap()).unwrap()
}

fn checksum_ok(bytes: &[u8]) -> bool {
    let ip = Ipv4Packet::new_checked(&bytes[14..]).unwrap();
    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
    tcp.verify_checksum(
        &IpAddress::Ipv4(ip.src_addr()),
        &IpAddress::Ipv4(ip.dst_addr()),
    )
}

#[test]
fn a_probe_is_the_newest_copy_with_the_newest_ack_and_a_good_checksum() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    let d1 = data(ISS + 1, 100, 7);
    let d2 = data(ISS + 101, 50, 7);
    send(&mut flight, &recovery, &mut stats, &d1, at(1000));
    send(&mut flight, &recovery, &mut stats, &d2, at(1000));
    // A pure ACK of new data from the client, with a new window.
    let pure = frame(
        SERVER,
        CLIENT,
        TcpControl::None,
        ISS + 151,
        Some(60),
        333,
        &[],
        &[],
    );
    send(&mut flight, &recovery, &mut stats, &pure, at(1100));
    let pto = DEFAULT_RTO_MIN + Duration::from_micros(200);
    assert_eq!(flight.deadline(), Some(at(1000) + pto));
    assert!(
        resend_due(
            &mut flight,
            &mut recovery,
            &mut stats,
            at(1000) + pto - Duration::from_micros(1)
        )
        .is_empty()
    );
    let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(1000) + pto);
    assert_eq!(sent.len(), 1);
    let probe = seq_of(&sent[0]);
    assert_eq!((probe.seq_number, probe.payload_len), (ISS + 101, 50));
    assert_eq!((probe.ack_number, probe.window_len), (Some(60), 333));
    assert!(checksum_ok(&sent[0]));
    assert_eq!(&sent[0][54..], &d2.bytes[54..], "the same payload");
    assert_eq!(stats.probes, 1);
    // The next probe after twice the PTO.
    assert_eq!(flight.deadline(), Some(at(1000) + pto + pto * 2));
}

#[test]
fn the_probe_timeout_follows_the_smallest_round_trip_of_the_last_second() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    let floor = |rtt_us: u64| DEFAULT_RTO_MIN + Duration::from_micros(2 * rtt_us);
    let mut seq = ISS + 1;
    let mut now = at(1000);
    // A reply of two segments, acknowledged `ack_us` later; returns the PTO it was sent
    // with. (A lone segment waits for its client's ACK delay instead.)
    let mut round = |ack_us: u64, flight: &mut Flight| {
        now += Duration::from_micros(10);
        send(flight, &recovery, &mut stats, &data(seq, 10, 7), now);
        send(flight, &recovery, &mut stats, &data(seq + 10, 10, 7), now);
        seq += 20;
        let pto = flight.deadline().unwrap() - now;
        now += Duration::from_micros(ack_us);
        flight.on_ack(&mut recovery, &mut stats, &ack(seq, &[]), now);
        pto
    };
    // A client that acknowledges at once: the floor plus the 100 µs round trip twice.
    assert_eq!(round(100, &mut flight), floor(100));
    // A request/response client acknowledges a reply with its next request, here 3 ms
    // later, and now and then at once: the quick ones keep the PTO at the network's
    // round trip, so a lost reply costs about a millisecond, not a think time.
    for k in 0..1000 {
        let ack_us = if k % 50 == 0 { 100 } else { 3000 };
        assert_eq!(round(ack_us, &mut flight), floor(100), "reply {k}");
    }
    // A client that takes 3 ms for every acknowledgment (saturated) for over a second:
    // the PTO grows with it, so probes do not add to a client already slow.
    for _ in 0..400 {
        round(3000, &mut flight);
    }
    assert_eq!(round(3000, &mut flight), floor(3000));
    assert_eq!(flight.min_rtt_us(), 3000);
    // Quick acknowledgments again: back to the floor at once.
    round(40, &mut flight);
    assert_eq!(round(40, &mut flight), floor(40));
    assert_eq!(stats, RecoveryStats::default(), "no probe was due");
}

#[test]
fn probes_are_paid_for_by_acknowledgments_of_new_data() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    let pto = DEFAULT_RTO_MIN + Duration::from_micros(200);
    // The table's clients acknowledged little lately: one probe left.
    recovery.credit = 1;
    let sent_at = at(1000);
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 1, 100, 7),
        sent_at,
    );
    let first = sent_at + pto;
    assert_eq!(
        resend_due(&mut flight, &mut recovery, &mut stats, first).len(),
        1
    );
    // The second is due but unpaid: withheld, and the episode left to smoltcp.
    let second = first + pto * 2;
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, second).is_empty());
    assert_eq!((stats.probes, stats.probes_withheld), (1, 1));
    assert_eq!(flight.deadline(), None);
    // Another connection's client acknowledges new data (here, its SYN-ACK): one more,
    // for the next episode, which this connection's next reply starts once its client
    // acknowledged the first.
    let mut other = Flight::default();
    let syn_ack = frame(
        SERVER,
        CLIENT,
        TcpControl::Syn,
        5000,
        Some(9),
        4096,
        &[],
        &[],
    );
    send(&mut other, &recovery, &mut stats, &syn_ack, at(5000));
    other.on_ack(&mut recovery, &mut stats, &ack(5001, &[]), at(5100));
    assert_eq!(recovery.credit, 1);
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(6000));
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 101, 100, 7),
        at(7000),
    );
    assert_eq!(
        resend_due(&mut flight, &mut recovery, &mut stats, at(7000) + pto).len(),
        1
    );
    assert_eq!((stats.probes, stats.probes_withheld), (2, 1));
    // Acknowledgments refill the credit up to its limit, no further.
    for k in 0..2 * PROBE_CREDIT {
        let seq = 5001 + k;
        let f = data(seq, 1, 9);
        send(&mut other, &recovery, &mut stats, &f, at(6000));
        other.on_ack(&mut recovery, &mut stats, &ack(seq + 1, &[]), at(6100));
    }
    assert_eq!(recovery.credit, PROBE_CREDIT);
}

#[test]
fn without_a_sample_of_its_own_a_connection_waits_for_what_clients_usually_take() {
    let mut recovery = Recovery::new(Some(DEFAULT_RTO_MIN), 1514);
    let mut stats = RecoveryStats::default();
    let syn_ack = |iss: u32| {
        frame(
            SERVER,
            CLIENT,
            TcpControl::Syn,
            iss,
            Some(7),
            4096,
            &[],
            &[],
        )
    };
    // A table that just started: a SYN-ACK is probed at the floor, data not at all
    // (nothing is known of how soon clients acknowledge it: smoltcp's timer).
    let mut first = Flight::default();
    send(&mut first, &recovery, &mut stats, &syn_ack(ISS), at(0));
    assert_eq!(first.deadline(), Some(at(0) + DEFAULT_RTO_MIN));
    first.on_ack(&mut recovery, &mut stats, &ack(ISS + 1, &[]), at(100));
    send(
        &mut first,
        &recovery,
        &mut stats,
        &data(ISS + 1, 10, 7),
        at(200),
    );
    assert_eq!(first.deadline(), None);
    // Its client acknowledges 3 ms later (with its next request, say).
    first.on_ack(&mut recovery, &mut stats, &ack(ISS + 11, &[]), at(3200));
    assert_eq!(first.min_rtt_us(), 3000, "a sample of its own");
    // A new connection's SYN-ACK waits for the handshakes' round trip (100 µs, and
    // four times its variation, 50 µs), its first reply for the clients' usual
    // acknowledgment (3 ms, plus four times 1.5 ms).
    let mut second = Flight::default();
    send(
        &mut second,
        &recovery,
        &mut stats,
        &syn_ack(9000),
        at(10_000),
    );
    let handshake = Duration::from_micros(100 + 4 * 50);
    assert_eq!(
        second.deadline(),
        Some(at(10_000) + DEFAULT_RTO_MIN + handshake * 2)
    );
    second.on_ack(&mut recovery, &mut stats, &ack(9001, &[]), at(10_100));
    send(
        &mut second,
        &recovery,
        &mut stats,
        &data(9001, 10, 7),
        at(10_200),
    );
    // Its first reply, a lone one, waits for what the table's clients took to
    // acknowledge a lone segment (3 ms, no variation yet) and a quarter of the floor.
    assert_eq!(
        second.deadline(),
        Some(at(10_200) + Duration::from_micros(3000 + 250))
    );
    // The first connection, with an ACK delay of its own, is probed just after it: 3
    // ms and a quarter of the floor.
    send(
        &mut first,
        &recovery,
        &mut stats,
        &data(ISS + 11, 10, 7),
        at(20_000),
    );
    assert_eq!(
        first.deadline(),
        Some(at(20_000) + Duration::from_micros(3000 + 250))
    );
}

#[test]
fn without_sack_the_probe_is_the_oldest_copy() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, false);
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 1, 100, 7),
        at(0),
    );
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 101, 100, 7),
        at(0),
    );
    let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(10_000));
    assert_eq!(seq_of(&sent[0]).seq_number, ISS + 1);
}

#[test]
fn a_dsack_makes_a_probe_spurious_and_no_dsack_makes_it_recovered() {
    for (dsack_in_next_ack, spurious) in [
        (None, false),
        (Some(0), true),
        (Some(1), true),
        (Some(3), true),
    ] {
        let (mut recovery, mut stats, mut flight) = synced(ISS, true);
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1, 100, 7),
            at(0),
        );
        assert_eq!(
            resend_due(&mut flight, &mut recovery, &mut stats, at(5_000)).len(),
            1
        );
        let end = ISS + 101;
        let dsack = [(ISS + 1, end)];
        match dsack_in_next_ack {
            // The probe's own ACK carries the D-SACK.
            Some(0) => flight.on_ack(&mut recovery, &mut stats, &ack(end, &dsack), at(5_100)),
            // The original's ACKs (its delayed ACK, or a pipelining client's next
            // requests) crossed the probe; the D-SACK follows them.
            Some(crossed) => {
                for k in 0..crossed {
                    let t = at(5_120 + 10 * k);
                    flight.on_ack(&mut recovery, &mut stats, &ack(end, &[]), t);
                }
                assert_eq!((stats.recovered, stats.spurious), (0, 0), "not settled yet");
                flight.on_ack(&mut recovery, &mut stats, &ack(end, &dsack), at(5_150));
            }
            None => flight.on_ack(&mut recovery, &mut stats, &ack(end, &[]), at(5_100)),
        }
        // The next reply, sent after the probe, is acknowledged without a D-SACK: the
        // client had the probe before it, and reported no duplicate.
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(end, 10, 7),
            at(6_000),
        );
        flight.on_ack(&mut recovery, &mut stats, &ack(end + 10, &[]), at(6_100));
        assert_eq!(
            (stats.recovered, stats.spurious),
            (u64::from(!spurious), u64::from(spurious)),
            "{dsack_in_next_ack:?}"
        );
        assert_eq!((flight.copies(), flight.deadline()), (0, None));
    }
}

#[test]
fn an_ack_sooner_than_a_round_trip_after_the_probe_crossed_it_and_makes_it_spurious() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 1, 100, 7),
        at(0),
    );
    assert_eq!(
        resend_due(&mut flight, &mut recovery, &mut stats, at(5_000)).len(),
        1
    );
    // The client's ACK of the original (with its next request) comes 60 µs after the
    // probe left, less than the 100 µs round trip: it was sent before the probe came.
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(5_060));
    assert_eq!((stats.recovered, stats.spurious), (0, 1));
    // The client's D-SACK for the probe follows: counted once.
    let dsack = [(ISS + 1, ISS + 101)];
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &ack(ISS + 101, &dsack),
        at(5_110),
    );
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(9_000));
    assert_eq!((stats.recovered, stats.spurious), (0, 1));
}

#[test]
fn a_lost_segment_is_resent_once_a_later_one_is_sacked_and_the_reordering_window_passed() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    for k in 0..3 {
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &data(ISS + 1 + k * 100, 100, 7),
            at(1000),
        );
    }
    // The first and third arrive after 100 µs; the second does not.
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &ack(ISS + 101, &[(ISS + 201, ISS + 301)]),
        at(1100),
    );
    // RACK: the second is lost 100 µs (that RTT) + SRTT/4 after it was sent.
    assert_eq!(flight.deadline(), Some(at(1125)));
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1124)).is_empty());
    let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(1125));
    assert_eq!(sent.len(), 1);
    assert_eq!(seq_of(&sent[0]).seq_number, ISS + 101);
    assert_eq!(stats.sack_resends, 1);
    // Sent again at 1125, it is newer than anything delivered: not lost again until
    // something sent after it arrives; only the probe timer remains.
    let deadline = flight.deadline().unwrap();
    assert!(deadline > at(1125) + DEFAULT_RTO_MIN, "{deadline}");
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 301, &[]), at(1230));
    assert_eq!((flight.copies(), flight.deadline()), (0, None));
    // Settled once data sent after the re-send is acknowledged without a D-SACK.
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 301, 10, 7),
        at(1500),
    );
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 311, &[]), at(2000));
    assert_eq!((stats.recovered, stats.spurious), (1, 0));
}

#[test]
fn smoltcp_retransmissions_are_counted_and_replace_the_copies_they_cover() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 1, 100, 7),
        at(0),
    );
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 101, 100, 7),
        at(0),
    );
    // smoltcp's timer: old data again.
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 1, 100, 7),
        at(1_000_000),
    );
    assert_eq!((stats.smoltcp_retransmits, flight.copies()), (1, 2));
    // Old and new data together: one copy now holds them.
    let both = data(ISS + 1, 300, 7);
    send(&mut flight, &recovery, &mut stats, &both, at(2_000_000));
    assert_eq!((stats.smoltcp_retransmits, flight.copies()), (2, 1));
    let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(3_000_000));
    assert_eq!(&sent[0][54..], &both.bytes[54..]);
    assert_eq!(flight.snd_max(), ISS + 301);
}

#[test]
fn a_retransmitted_syn_ack_is_smoltcps_and_a_new_one_starts_over() {
    let mut recovery = Recovery::new(Some(DEFAULT_RTO_MIN), 1514);
    let mut stats = RecoveryStats::default();
    let mut flight = Flight::default();
    let syn_ack = frame(
        SERVER,
        CLIENT,
        TcpControl::Syn,
        ISS,
        Some(7),
        4096,
        &[],
        &[],
    );
    send(&mut flight, &recovery, &mut stats, &syn_ack, at(0));
    send(&mut flight, &recovery, &mut stats, &syn_ack, at(1_000_000));
    assert_eq!((stats.smoltcp_retransmits, flight.copies()), (1, 1));
    // Probes of a SYN-ACK stop early.
    let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(1_001_000));
    assert_eq!(sent.len(), 1);
    assert_eq!(
        &sent[0][..],
        &syn_ack.bytes[..],
        "a SYN-ACK is sent as it was"
    );
    resend_due(&mut flight, &mut recovery, &mut stats, at(1_003_000));
    assert_eq!(stats.probes, u64::from(MAX_HANDSHAKE_PROBES));
    assert_eq!(flight.deadline(), None);
    // The slot's next connection.
    let other = frame(
        SERVER,
        CLIENT,
        TcpControl::Syn,
        5000,
        Some(9),
        4096,
        &[],
        &[],
    );
    send(&mut flight, &recovery, &mut stats, &other, at(2_000_000));
    assert_eq!(flight.copies(), 1);
    flight.on_ack(&mut recovery, &mut stats, &ack(5001, &[]), at(2_000_040));
    assert_eq!(flight.copies(), 0);
}

#[test]
fn sequence_numbers_wrap() {
    let iss = u32::MAX - 150;
    let (mut recovery, mut stats, mut flight) = synced(iss, true);
    let d1 = data(iss.wrapping_add(1), 100, 7);
    let d2 = data(iss.wrapping_add(101), 100, 7);
    send(&mut flight, &recovery, &mut stats, &d1, at(1000));
    send(&mut flight, &recovery, &mut stats, &d2, at(1000));
    assert_eq!(flight.snd_max(), iss.wrapping_add(201));
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &ack(iss.wrapping_add(101), &[]),
        at(1100),
    );
    assert_eq!(flight.copies(), 1);
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &ack(iss.wrapping_add(201), &[]),
        at(1200),
    );
    assert_eq!(flight.copies(), 0);
    assert_eq!(stats, RecoveryStats::default());
}

/// Copy `index` as a re-send would write it.
fn copy_bytes(flight: &Flight, index: usize) -> Vec<u8> {
    let resend = Resend {
        index,
        kind: ResendKind::Probe,
    };
    let mut bytes = vec![0xa5; flight.copy_len(resend)];
    flight.write_copy(resend, &mut bytes);
    bytes
}

#[test]
fn small_lone_copies_stay_inline_and_others_go_to_the_heap_in_order() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    // Request/response with small replies: no heap storage at all.
    let mut seq = ISS + 1;
    for i in 0..20i64 {
        let reply = data(seq, 100, 7);
        seq += 100;
        send(
            &mut flight,
            &recovery,
            &mut stats,
            &reply,
            at(1000 + 100 * i),
        );
        assert_eq!(copy_bytes(&flight, 0), reply.bytes);
        flight.on_ack(
            &mut recovery,
            &mut stats,
            &ack(seq, &[]),
            at(1050 + 100 * i),
        );
        assert_eq!(flight.copies(), 0);
    }
    assert_eq!(
        (
            flight.copies.more.capacity(),
            flight.copies.bytes.capacity()
        ),
        (0, 0)
    );
    // Small, large, small: the first inline, the others behind it on the heap.
    let d1 = data(seq, 100, 7);
    let d2 = data(seq + 100, 600, 7);
    let d3 = data(seq + 700, 50, 7);
    for f in [&d1, &d2, &d3] {
        send(&mut flight, &recovery, &mut stats, f, at(5000));
    }
    assert!(flight.copies.first.is_some());
    assert_eq!(flight.copies.more.len(), 2);
    for (index, f) in [&d1, &d2, &d3].into_iter().enumerate() {
        assert_eq!(copy_bytes(&flight, index), f.bytes, "copy {index}");
    }
    flight.on_ack(&mut recovery, &mut stats, &ack(seq + 100, &[]), at(5100));
    assert!(flight.copies.first.is_none());
    assert_eq!(copy_bytes(&flight, 0), d2.bytes);
    assert_eq!(copy_bytes(&flight, 1), d3.bytes);
    // A small copy sent while others are kept goes behind them, not inline.
    let d4 = data(seq + 750, 20, 7);
    send(&mut flight, &recovery, &mut stats, &d4, at(5200));
    assert!(flight.copies.first.is_none());
    assert_eq!(copy_bytes(&flight, 2), d4.bytes);
    // smoltcp goes back and sends d3 and d4's data again with more: that copy replaces
    // both.
    let d34 = data(seq + 700, 200, 7);
    send(&mut flight, &recovery, &mut stats, &d34, at(5300));
    assert_eq!(flight.copies(), 2);
    assert_eq!(copy_bytes(&flight, 1), d34.bytes);
    flight.on_ack(&mut recovery, &mut stats, &ack(seq + 900, &[]), at(5400));
    assert_eq!(flight.copies(), 0);
    // A frame too large to keep inline goes to the heap even alone.
    let d5 = data(seq + 900, 400, 7);
    send(&mut flight, &recovery, &mut stats, &d5, at(6000));
    assert!(flight.copies.first.is_none());
    assert_eq!(copy_bytes(&flight, 0), d5.bytes);
}

#[test]
fn copies_survive_the_ring_wrapping() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    // Every copy is probed (to read it back), none is paid for by an acknowledgment.
    recovery.credit = 1000;
    let mut seq = ISS + 1;
    let mut now = at(1000);
    let mut unacked: VecDeque<Frame> = VecDeque::new();
    let mut wrapped = 0;
    for round in 0..300usize {
        let f = data(seq, 37 * (round % 7) + round % 5 + 1, 7);
        seq += f.seg.payload_len as u32;
        send(&mut flight, &recovery, &mut stats, &f, now);
        unacked.push_back(f);
        // The peer acknowledges all but the newest three.
        if unacked.len() > 3 {
            let oldest = unacked.pop_front().unwrap();
            let end = oldest.seg.seq_number + oldest.seg.payload_len as u32;
            now += Duration::from_micros(100);
            flight.on_ack(&mut recovery, &mut stats, &ack(end, &[]), now);
        }
        wrapped += usize::from(!flight.copies.bytes.as_slices().1.is_empty());
        // The newest comes out of a probe byte for byte.
        now = flight.deadline().unwrap();
        let sent = resend_due(&mut flight, &mut recovery, &mut stats, now);
        assert_eq!(sent.len(), 1, "round {round}");
        assert_eq!(
            &sent[0][..],
            &unacked.back().unwrap().bytes[..],
            "round {round}"
        );
        assert_eq!(flight.copies(), unacked.len());
    }
    assert!(
        wrapped > 10,
        "the copies wrapped around the ring {wrapped} times"
    );
}

#[test]
fn recovery_off_keeps_no_copy_and_counts_smoltcps_retransmissions() {
    let recovery = Recovery::new(None, 1514);
    let mut stats = RecoveryStats::default();
    let mut flight = Flight::default();
    let syn_ack = frame(
        SERVER,
        CLIENT,
        TcpControl::Syn,
        ISS,
        Some(7),
        4096,
        &[],
        &[],
    );
    send(&mut flight, &recovery, &mut stats, &syn_ack, at(0));
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 1, 100, 7),
        at(0),
    );
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 1, 100, 7),
        at(1_000_000),
    );
    assert_eq!((flight.copies(), flight.deadline()), (0, None));
    assert_eq!(stats.smoltcp_retransmits, 1);
}

/// The client's segment `seq..seq + len` (with `ack`): a request.
fn request(seq: u32, len: usize, ack: u32) -> SegmentRepr {
    let payload = vec![b'r'; len];
    frame(
        CLIENT,
        SERVER,
        TcpControl::Psh,
        seq,
        Some(ack),
        1000,
        &payload,
        &[],
    )
    .seg
}

/// A synced connection with its table's recovery state, its next sequence number and
/// the clock, for a run of lone segments.
struct Lone {
    recovery: Recovery,
    stats: RecoveryStats,
    flight: Flight,
    seq: u32,
    now: Instant,
}

impl Lone {
    fn new() -> Self {
        let (recovery, stats, flight) = synced(ISS, true);
        Lone {
            recovery,
            stats,
            flight,
            seq: ISS + 1,
            now: at(1000),
        }
    }

    /// Sends a lone segment, has it acknowledged `ack_us` later, and returns the probe
    /// timeout it had.
    fn round(&mut self, ack_us: u64) -> Duration {
        let Lone {
            recovery,
            stats,
            flight,
            seq,
            now,
        } = self;
        send(flight, recovery, stats, &data(*seq, 10, 7), *now);
        *seq += 10;
        let pto = flight.deadline().unwrap() - *now;
        *now += Duration::from_micros(ack_us);
        flight.on_ack(recovery, stats, &ack(*seq, &[]), *now);
        *now += Duration::from_micros(100);
        pto
    }
}

#[test]
fn a_lone_segments_timeout_follows_its_clients_ack_delay() {
    let mut c = Lone::new();
    let base = DEFAULT_RTO_MIN + Duration::from_micros(200);
    let us = Duration::from_micros;
    // Before any ACK delay of its own: the floor and twice the 100 µs round trip.
    let first = c.round(3000);
    assert_eq!(first, base);
    // A client that acknowledges each reply with its next request, 3.0 to 3.4 ms later
    // (in steps of 104 µs: whole units of 8 µs): the largest delay so far, or until 32
    // are its own what the table's clients take if longer (smoothed, plus four
    // deviations), and a quarter of the floor.
    for k in 1..ACK_DELAY_SAMPLES as u64 {
        let prior = c.recovery.lone_delay.timeout_us();
        let pto = c.round(3000 + 104 * (k % 5));
        let largest = 3000 + 104 * (k - 1).min(4);
        assert_eq!(pto, us(largest.max(prior) + 250), "reply {k}");
    }
    // All 32 kept: the second largest. One outlier (a client descheduled for 30 ms)
    // does not count; a second one does.
    c.round(30_000);
    let pto = c.round(3000);
    assert_eq!(pto, us(3416 + 250));
    c.round(30_000);
    let pto = c.round(3000);
    assert_eq!(
        pto,
        us(30_000 + 30_000 / 4 - 1000),
        "a quarter of the delay less the floor, more than 250 µs and a sixteenth"
    );
    // Two segments in c.flight are acknowledged at once by any client: the floor and the
    // round trip.
    send(
        &mut c.flight,
        &c.recovery,
        &mut c.stats,
        &data(c.seq, 10, 7),
        c.now,
    );
    send(
        &mut c.flight,
        &c.recovery,
        &mut c.stats,
        &data(c.seq + 10, 10, 7),
        c.now,
    );
    assert_eq!(c.flight.deadline(), Some(c.now + base));
    // Once the first is acknowledged, the second waits alone.
    c.now += us(100);
    c.flight
        .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 10, &[]), c.now);
    assert_eq!(
        c.flight.deadline(),
        Some(c.now + us(30_000 + 30_000 / 4 - 1000))
    );
    c.now += us(100);
    c.flight
        .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 20, &[]), c.now);
    c.seq += 20;
    // A client that acknowledges at once: within 32 replies, the floor alone.
    for _ in 0..ACK_DELAY_SAMPLES {
        c.round(100);
    }
    let pto = c.round(100);
    assert_eq!(pto, DEFAULT_RTO_MIN);
    assert_eq!(c.stats, RecoveryStats::default(), "no probe was due");
    // A new connection in the slot starts with none.
    c.flight.reset();
    assert_eq!(c.flight.ack_delay_us(), 0);
}

#[test]
fn a_lone_segments_timeout_is_at_most_max_ack_delay() {
    let mut c = Lone::new();
    // A client that acknowledges 300 ms late c.now and then, and at once otherwise: its
    // lone replies wait 500 ms at most.
    for k in 0..10 {
        let ack_us = if k % 2 == 0 { 520_000 } else { 100 };
        c.round(ack_us);
    }
    let pto = c.round(100);
    assert_eq!(pto, MAX_ACK_DELAY);
    // One whose every acknowledgment took 300 ms for over a second: its round trip is
    // that long, and so is its timeout (the floor and twice the round trip, or less).
    for _ in 0..10 {
        c.round(520_000);
    }
    assert_eq!(c.flight.min_rtt_us(), 520_000);
    // Once 32 are its own (the table's smoothed delays, of both kinds, no longer
    // count).
    for _ in 0..ACK_DELAY_SAMPLES {
        c.round(520_000);
    }
    let pto = c.round(520_000);
    assert_eq!(pto, Duration::from_micros(520_000 + 520_000 / 4 - 1000));
    assert_eq!(c.stats, RecoveryStats::default(), "no probe was due");
}

#[test]
fn a_lone_segments_margin_is_a_sixteenth_of_a_few_floors_and_a_quarter_of_long_delays() {
    let mut c = Lone::new();
    let us = Duration::from_micros;
    for _ in 0..ACK_DELAY_SAMPLES {
        c.round(4000);
    }
    // Up to four floors: a quarter of the floor, or a sixteenth of the delay if more.
    assert_eq!(c.round(4000), us(4000 + 250));
    for _ in 0..ACK_DELAY_SAMPLES {
        c.round(8000);
    }
    assert_eq!(c.round(8000), us(8000 + 1000));
    // Longer: a quarter of the delay less the floor.
    for _ in 0..ACK_DELAY_SAMPLES {
        c.round(100_000);
    }
    assert_eq!(c.round(100_000), us(100_000 + 24_000));
}

/// One thread serving 10,000 connections acknowledges each reply with its next request,
/// one pass over all of them later (about 100 ms), and that pass takes every connection
/// as long as the others: when the thread slows down by a tenth (it gets less CPU for a
/// while), every connection's delay grows by a tenth at once. With a sixteenth as the
/// margin, every lone reply was then probed for nothing, thousands at a time, until each
/// connection had learned the new delay from its own spurious probes.
#[test]
fn a_client_whose_pace_slows_by_a_tenth_is_not_probed() {
    let mut c = Lone::new();
    for k in 0..4 * ACK_DELAY_SAMPLES as u64 {
        c.round(98_000 + 1000 * (k % 5));
    }
    for _ in 0..ACK_DELAY_SAMPLES {
        let pto = c.round(112_000);
        assert!(pto > Duration::from_millis(112), "{pto}");
    }
}

#[test]
fn spurious_probes_of_a_lone_segment_lengthen_its_timeout_fast() {
    let mut c = Lone::new();
    // A client that acknowledged at once, then delays every ACK until its next request,
    // 50 ms later (a D-SACK answers a probe at once, as Linux does).
    for _ in 0..ACK_DELAY_SAMPLES {
        c.round(100);
    }
    let mut probes = Vec::new();
    for _ in 0..20 {
        send(
            &mut c.flight,
            &c.recovery,
            &mut c.stats,
            &data(c.seq, 10, 7),
            c.now,
        );
        let sent = c.now;
        let probe_at = c.flight.deadline().unwrap();
        if probe_at - sent < Duration::from_millis(50) {
            resend_due(&mut c.flight, &mut c.recovery, &mut c.stats, probe_at);
            probes.push(probe_at - sent);
            // The D-SACK acknowledges the original too, a round trip after the probe.
            c.now = probe_at + Duration::from_micros(100);
            let dsack = [(c.seq, c.seq + 10)];
            c.flight.on_ack(
                &mut c.recovery,
                &mut c.stats,
                &ack(c.seq + 10, &dsack),
                c.now,
            );
        }
        if c.flight.copies() == 1 {
            c.now = sent + Duration::from_millis(50);
            c.flight
                .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 10, &[]), c.now);
        }
        c.seq += 10;
        c.now += Duration::from_micros(100);
    }
    // Each spurious probe counts as twice its wait, and once two are kept the timeout
    // follows: after a dozen, the client's 50 ms delay is its timeout.
    assert!(probes.len() <= 12, "{probes:?}");
    assert_eq!(
        c.stats.probes_spurious,
        probes.len() as u64,
        "{:?}",
        c.stats
    );
    assert_eq!(c.stats.probes_recovered, 0);
    let pto = c.round(50_000);
    assert!(pto > Duration::from_millis(50), "{pto}");
}

#[test]
fn a_probe_that_repaired_a_loss_is_counted_with_its_wait_and_no_delay_sample() {
    let mut c = Lone::new();
    for _ in 0..4 {
        c.round(3000);
    }
    assert_eq!(c.flight.ack_delay_us(), 3000);
    let sent = c.now;
    send(
        &mut c.flight,
        &c.recovery,
        &mut c.stats,
        &data(c.seq, 10, 7),
        sent,
    );
    let probe_at = c.flight.deadline().unwrap();
    assert_eq!(probe_at - sent, Duration::from_micros(3250));
    assert_eq!(
        resend_due(&mut c.flight, &mut c.recovery, &mut c.stats, probe_at).len(),
        1
    );
    // The probe is acknowledged (with the client's next request) 3 ms later, without a
    // D-SACK, and so is the next reply: the original was lost.
    let answer = probe_at + Duration::from_millis(3);
    c.flight
        .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 10, &[]), answer);
    send(
        &mut c.flight,
        &c.recovery,
        &mut c.stats,
        &data(c.seq + 10, 10, 7),
        answer,
    );
    let later = answer + Duration::from_micros(100);
    c.flight
        .on_ack(&mut c.recovery, &mut c.stats, &ack(c.seq + 20, &[]), later);
    assert_eq!((c.stats.recovered, c.stats.probes_spurious), (1, 0));
    assert_eq!(
        (c.stats.probes_recovered, c.stats.probes_recovered_us),
        (1, 3250)
    );
    // A loss is no delay of the client's: the timeout stays.
    assert_eq!(c.flight.ack_delay_us(), 3000);
}

#[test]
fn a_peer_retransmitting_data_a_copy_acknowledged_shows_that_copy_lost() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    // The client's request 7..17 came; the reply acknowledges it.
    let reply = data(ISS + 1, 100, 17);
    send(&mut flight, &recovery, &mut stats, &reply, at(1000));
    let probe_at = flight.deadline().unwrap();
    // A new request (a pipelining client), and a pure ACK, whose acknowledgment does
    // not cover the reply: no evidence, the reply may be on its way.
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &request(17, 10, ISS + 1),
        at(1100),
    );
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 1, &[]), at(1150));
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1150)).is_empty());
    // smoltcp acknowledges the new request (a pure ACK); the reply did not carry that.
    let pure = frame(
        SERVER,
        CLIENT,
        TcpControl::None,
        ISS + 101,
        Some(27),
        500,
        &[],
        &[],
    );
    send(&mut flight, &recovery, &mut stats, &pure, at(1160));
    // The client sends 17..27 again: only our ACK of it (the pure ACK) is known lost.
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &request(17, 10, ISS + 1),
        at(1200),
    );
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1200)).is_empty());
    // The client sends 7..17 again, long before the probe: it never got the reply.
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &request(7, 10, ISS + 1),
        at(1300),
    );
    assert!(at(1300) < probe_at);
    let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(1300));
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0][54..], &reply.bytes[54..]);
    assert_eq!(
        (
            stats.peer_retransmit_resends,
            stats.probes,
            stats.sack_resends
        ),
        (1, 0, 0)
    );
    // Sent again, it waits for the next evidence: nothing more is due.
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1400)).is_empty());
    // An old retransmission, whose acknowledgment is below what the client has since
    // acknowledged, is stale evidence.
    send(
        &mut flight,
        &recovery,
        &mut stats,
        &data(ISS + 101, 10, 27),
        at(1500),
    );
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(1600));
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &request(7, 10, ISS + 1),
        at(1700),
    );
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1700)).is_empty());
    assert_eq!(stats.peer_retransmit_resends, 1);
}

/// Regression: when the peer sent again data it had acknowledged, every copy that
/// acknowledged it went out again at once, even those that had left less than a round
/// trip before and were still on their way. Under loss both ways, with both ends running
/// this code, one end's spurious copies were the other's evidence (directly, and through
/// the duplicate ACKs that make smoltcp retransmit) and its copies the first's again: the
/// two ends traded copies of everything in flight, hundreds of thousands a run for a few
/// hundred frames dropped.
#[test]
fn a_peers_retransmission_crossing_our_reply_sends_nothing_again() {
    let (mut recovery, mut stats, mut flight) = synced(ISS, true);
    // The request 7..17 came; the reply, acknowledging it, goes out at 1000.
    let reply = data(ISS + 1, 100, 17);
    send(&mut flight, &recovery, &mut stats, &reply, at(1000));
    // 50 µs later (the round trip is 100 µs) the peer sends 7..17 again: it left before
    // the reply could have arrived, so it says nothing of the reply.
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &request(7, 10, ISS + 1),
        at(1050),
    );
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1050)).is_empty());
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(1100)).is_empty());
    // The reply's ACK comes a round trip after it left: nothing was sent again.
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 101, &[]), at(1100));
    assert_eq!(flight.copies(), 0);
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(5000)).is_empty());
    assert_eq!(
        (stats.peer_retransmit_resends, stats.probes, stats.spurious),
        (0, 0, 0)
    );

    // Both ends: a second reply in flight, a crossing retransmission of its request, and
    // the peer's ACK of the reply lost. The copy goes out once the round trip and the
    // reordering window (100 + 25 µs) have passed since it was sent, not before.
    let second = data(ISS + 101, 100, 27);
    send(&mut flight, &recovery, &mut stats, &second, at(6000));
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &request(17, 10, ISS + 101),
        at(6040),
    );
    assert_eq!(flight.deadline(), Some(at(6125)));
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(6124)).is_empty());
    let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(6125));
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0][54..], &second.bytes[54..]);
    assert_eq!(stats.peer_retransmit_resends, 1);
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 201, &[]), at(6300));
    assert_eq!(flight.copies(), 0);

    // Two replies acknowledging the same request, long unacknowledged when the request
    // comes again: only the first is sent again (its ACK shows whether the second is
    // missing too). Each copy sent on a guess draws an ACK at once from the peer, and
    // three duplicate ACKs make the peer's smoltcp retransmit, more evidence for us.
    let third = data(ISS + 201, 100, 37);
    let fourth = data(ISS + 301, 100, 37);
    send(&mut flight, &recovery, &mut stats, &third, at(7000));
    send(&mut flight, &recovery, &mut stats, &fourth, at(7000));
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &request(27, 10, ISS + 201),
        at(7500),
    );
    let sent = resend_due(&mut flight, &mut recovery, &mut stats, at(7500));
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0][54..], &third.bytes[54..]);
    assert_eq!(stats.peer_retransmit_resends, 2);
    // The peer sends the request again: until it acknowledges all we had sent when the
    // copy went out, that may be its answer to our copy, and shows nothing lost (a round
    // trip after the copy, before the probe at 8200 µs, nothing is due).
    flight.on_ack(
        &mut recovery,
        &mut stats,
        &request(27, 10, ISS + 201),
        at(7600),
    );
    assert!(resend_due(&mut flight, &mut recovery, &mut stats, at(7700)).is_empty());
    flight.on_ack(&mut recovery, &mut stats, &ack(ISS + 401, &[]), at(7800));
    assert_eq!(flight.copies(), 0);
    assert_eq!(stats.peer_retransmit_resends, 2);
}

#[test]
fn an_incremental_checksum_matches_a_full_one() {
    for (ack, window) in [
        (0, 0),
        (u32::MAX, u16::MAX),
        (0x1234_5678, 0x9abc),
        (7, 500),
    ] {
        let mut f = data(ISS, 33, 0xdead_beef).bytes;
        refresh_ack(&mut f, ack, window);
        let seg = seq_of(&f);
        assert_eq!((seg.ack_number, seg.window_len), (Some(ack), window));
        assert!(checksum_ok(&f), "{ack:#x} {window:#x}");
    }
}

#[test]
fn an_incremental_checksum_holds_over_ipv6() {
    use smoltcp::wire::Ipv6Packet;
    for (ack, window) in [(0, 0), (u32::MAX, u16::MAX), (0x1234_5678, 0x9abc)] {
        let mut f = crate::demux::tests::SYN6_FRAME.to_vec();
        refresh_ack(&mut f, ack, window);
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((tcp.ack_number().0 as u32, tcp.window_len()), (ack, window));
        assert!(
            tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into()),
            "{ack:#x} {window:#x}"
        );
    }
}

#[test]
fn the_counters_list_themselves_and_add_and_subtract_field_by_field() {
    let base = RecoveryStats {
        probes: 3,
        probes_recovered_us: 7,
        ..RecoveryStats::default()
    };
    let fields = base.fields();
    assert_eq!(fields.len(), RecoveryStats::COUNT);
    assert_eq!(
        (fields[0].name, fields[0].value),
        ("probes", 3),
        "declaration order"
    );
    let mut names: Vec<_> = fields.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), RecoveryStats::COUNT, "names are distinct");
    assert!(fields.iter().all(|c| !c.description.is_empty()));
    assert_eq!(fields.iter().map(|c| c.value).sum::<u64>(), 10);
    let mut total = base;
    total.add(&base);
    total.spurious += 1;
    let delta = total.since(&base);
    assert_eq!(delta.fields().iter().map(|c| c.value).sum::<u64>(), 11);
    assert_eq!((delta.probes, delta.spurious), (3, 1));
    assert_eq!(
        base.since(&total),
        RecoveryStats::default(),
        "never below 0"
    );
}

/// A connection this end opened (its first copy a SYN, no ACK) probes its first request
/// after the floor and twice the handshake's round trip, and SACKs only if the peer's
/// SYN-ACK says so; an accepted one leaves its first reply to smoltcp's timer.
#[test]
fn a_connection_we_opened_probes_its_first_request_after_the_handshake_round_trip() {
    let mut recovery = Recovery::new(Some(DEFAULT_RTO_MIN), 1514);
    let mut stats = RecoveryStats::default();
    let mut opened = Flight::default();
    let syn = frame(SERVER, CLIENT, TcpControl::Syn, ISS, None, 4096, &[], &[]);
    opened.on_send(&recovery, &mut stats, &syn.bytes, &syn.seg, at(0));
    assert!(opened.sack_ok(), "our SYN offers SACK");
    let mut syn_ack = frame(
        CLIENT,
        SERVER,
        TcpControl::Syn,
        7,
        Some(ISS + 1),
        4096,
        &[],
        &[],
    );
    syn_ack.seg.sack_permitted = false;
    opened.on_ack(&mut recovery, &mut stats, &syn_ack.seg, at(100));
    opened.on_syn_ack(syn_ack.seg.sack_permitted);
    assert!(!opened.sack_ok(), "the peer does not SACK");
    let request = data(ISS + 1, 64, 8);
    let new = opened.on_send(&recovery, &mut stats, &request.bytes, &request.seg, at(200));
    assert!(new, "new sequence space");
    // One handshake sample of 100 µs: SRTT 100, RTTVAR 50, so the floor and 2 · 300 µs.
    assert_eq!(opened.deadline(), Some(at(200 + 1000 + 600)));
    let again = opened.on_send(&recovery, &mut stats, &request.bytes, &request.seg, at(300));
    assert!(!again, "smoltcp's retransmission is not new");

    let mut accepted = Flight::default();
    let syn_ack = frame(
        SERVER,
        CLIENT,
        TcpControl::Syn,
        ISS,
        Some(7),
        4096,
        &[],
        &[],
    );
    accepted.on_send(&recovery, &mut stats, &syn_ack.bytes, &syn_ack.seg, at(0));
    accepted.on_ack(&mut recovery, &mut stats, &ack(ISS + 1, &[]), at(100));
    accepted.on_syn_ack(false);
    assert!(
        accepted.sack_ok(),
        "an accepted connection's SACK is the SYN's"
    );
    let reply = data(ISS + 1, 64, 8);
    accepted.on_send(&recovery, &mut stats, &reply.bytes, &reply.seg, at(200));
    assert_eq!(accepted.deadline(), None, "smoltcp's timer");
}
