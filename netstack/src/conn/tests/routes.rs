//! IPv6 and routes through the table: clients of either family on the link (neighbour
//! discovery answered), echo requests answered, and clients one router away served through
//! the gateway, whose MAC the table resolves and refreshes itself.

use super::*;
use crate::demux::SegmentRepr;
use crate::neighbor::{ArpOut, GATEWAY_REACHABLE, NdpOut, emit_arp, emit_ndp};
use smoltcp::wire::{
    Icmpv4Packet, Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, Ipv6Packet, Ipv6Repr, TcpPacket,
};

const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0xfe];
const GATEWAY_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0xfd];

fn v6(text: &str) -> Ipv6Address {
    text.parse().unwrap()
}

fn server6() -> Ipv6Cidr {
    Ipv6Cidr::new(v6("fd77::2"), 64)
}

/// Both families, with a gateway for each.
fn routed() -> TableConfig {
    let mut config = TableConfig::new(SERVER_MAC, server_ip(), PORT)
        .with_ip(server6())
        .with_gateway(Ipv4Address::new(10, 77, 0, 1))
        .with_gateway(v6("fd77::1"));
    config.rx_buffer_bytes = 4096;
    config.tx_buffer_bytes = 4096;
    config
}

/// A table on one end of an in-memory link; the test writes and reads the other end.
struct Wire {
    table: ConnTable<Echo>,
    server: MemPort,
    peer: MemPort,
    now: Instant,
}

impl Wire {
    fn new(config: TableConfig) -> Wire {
        let (peer, mut server) = memlink::pair(256, 1500);
        let now = Instant::from_secs(1);
        let table = ConnTable::new(config, &mut server, now).unwrap();
        Wire {
            table,
            server,
            peer,
            now,
        }
    }

    /// One server loop at `now` + `advance`; returns the frames it sent.
    fn step(&mut self, advance: Duration) -> Vec<Vec<u8>> {
        self.now += advance;
        self.table.poll_ingress(self.now, &mut self.server, 64);
        self.table.serve(echo);
        self.table.poll_egress(self.now, &mut self.server);
        let mut frames = Vec::new();
        while let Some((rx, _)) = self.peer.receive(self.now) {
            rx.consume(|frame| frames.push(frame.to_vec()));
        }
        frames
    }

    fn inject(&mut self, frame: &[u8]) {
        let tx = self.peer.transmit(self.now).expect("room on the link");
        tx.consume(frame.len(), |buf| buf.copy_from_slice(frame));
    }
}

/// A TCP segment from `src`:40000 (sent by `mac`) to our address of its family.
fn tcp_segment(
    mac: [u8; 6],
    src: IpAddress,
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
    payload: &[u8],
) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: 40000,
        dst_port: PORT,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 64_000,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1400),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let caps = ChecksumCapabilities::default();
    let mut frame = SERVER_MAC.to_vec();
    frame.extend_from_slice(&mac);
    match src {
        IpAddress::Ipv4(src) => {
            let dst = server_ip().address();
            let ip = Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::Tcp,
                payload_len: tcp.buffer_len(),
                hop_limit: 63,
            };
            frame.extend_from_slice(&[0x08, 0x00]);
            frame.resize(14 + ip.buffer_len() + tcp.buffer_len(), 0);
            ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..34]), &caps);
            tcp.emit(
                &mut TcpPacket::new_unchecked(&mut frame[34..]),
                &src.into(),
                &dst.into(),
                &caps,
            );
        }
        IpAddress::Ipv6(src) => {
            let dst = server6().address();
            let ip = Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::Tcp,
                payload_len: tcp.buffer_len(),
                hop_limit: 63,
            };
            frame.extend_from_slice(&[0x86, 0xdd]);
            frame.resize(14 + ip.buffer_len() + tcp.buffer_len(), 0);
            ip.emit(&mut Ipv6Packet::new_unchecked(&mut frame[14..54]));
            tcp.emit(
                &mut TcpPacket::new_unchecked(&mut frame[54..]),
                &src.into(),
                &dst.into(),
                &caps,
            );
        }
    }
    frame
}

/// What a test reads of a TCP frame the server sent: destination MAC, sequence number,
/// acknowledgment and payload.
type Sent = ([u8; 6], u32, Option<u32>, Vec<u8>);

fn tcp_of(frame: &[u8]) -> Option<Sent> {
    let view = TcpFrame::new_checked(frame).ok()?;
    let at = if view.is_ipv6() { 54 } else { 34 };
    let tcp = TcpPacket::new_checked(&frame[at..]).ok()?;
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&frame[0..6]);
    Some((
        mac,
        tcp.seq_number().0 as u32,
        tcp.ack().then(|| tcp.ack_number().0 as u32),
        tcp.payload().to_vec(),
    ))
}

/// The gateway (`gateway`, at `mac`) answers our probe.
fn gateway_answer(gateway: IpAddress, mac: [u8; 6]) -> Vec<u8> {
    match gateway {
        IpAddress::Ipv4(gateway) => {
            let mut frame = vec![0u8; 60];
            emit_arp(
                &mut frame,
                mac,
                gateway,
                ArpOut::Reply {
                    to_ip: server_ip().address(),
                    to_mac: SERVER_MAC,
                },
            );
            frame
        }
        IpAddress::Ipv6(gateway) => {
            let mut frame = vec![0u8; NDP_FRAME_LEN];
            emit_ndp(
                &mut frame,
                mac,
                gateway,
                NdpOut::Advert {
                    to_ip: server6().address(),
                    to_mac: SERVER_MAC,
                },
            );
            frame
        }
    }
}

/// A client one router away, over each family: the SYN-ACK leaves before the gateway is
/// resolved (to the MAC the SYN came from), the gateway's answer is learned, and from then
/// on replies go to the gateway's MAC. Without the route there was no SYN-ACK at all.
#[test]
fn a_client_behind_the_gateway_is_served() {
    for (client, gateway) in [
        (IpAddress::v4(10, 79, 0, 2), IpAddress::v4(10, 77, 0, 1)),
        (
            IpAddress::Ipv6(v6("fd79::2")),
            IpAddress::Ipv6(v6("fd77::1")),
        ),
    ] {
        let mut wire = Wire::new(routed());
        // At start, one probe per gateway: a broadcast ARP request and a solicitation to
        // the gateway's group.
        let probes = wire.step(Duration::ZERO);
        assert_eq!(probes.len(), 2, "{probes:02x?}");
        assert!(probes.iter().any(|f| f[0..6] == BROADCAST_MAC_BYTES
            && f[12..14] == [0x08, 0x06]
            && f[38..42] == [10, 77, 0, 1]));
        assert!(
            probes
                .iter()
                .any(|f| f[0..6] == [0x33, 0x33, 0xff, 0, 0, 1]
                    && f[62..78] == v6("fd77::1").octets())
        );
        assert_eq!(wire.table.stats().gateway_probes, 2);
        assert_eq!(wire.table.gateways().mac(gateway), None);

        wire.inject(&tcp_segment(
            ROUTER_MAC,
            client,
            TcpControl::Syn,
            1000,
            None,
            &[],
        ));
        let frames = wire.step(Duration::from_micros(50));
        let (mac, server_seq, ack, _) = frames
            .iter()
            .find_map(|f| tcp_of(f))
            .unwrap_or_else(|| panic!("no SYN-ACK to {client}: {frames:02x?}"));
        assert_eq!((mac, ack), (ROUTER_MAC, Some(1001)), "{client}");

        wire.inject(&gateway_answer(gateway, GATEWAY_MAC));
        wire.inject(&tcp_segment(
            ROUTER_MAC,
            client,
            TcpControl::Psh,
            1001,
            Some(server_seq.wrapping_add(1)),
            b"hello",
        ));
        let frames = wire.step(Duration::from_micros(50));
        assert_eq!(wire.table.gateways().mac(gateway), Some(GATEWAY_MAC));
        let echoed: Vec<_> = frames
            .iter()
            .filter_map(|f| tcp_of(f))
            .filter(|(_, _, _, payload)| payload == b"hello")
            .collect();
        assert_eq!(echoed.len(), 1, "{frames:02x?}");
        assert_eq!(
            echoed[0].0, GATEWAY_MAC,
            "{client}: the reply goes to the gateway"
        );
        let stats = wire.table.stats();
        assert_eq!((stats.accepted, stats.unresolved), (1, 0), "{stats:?}");
        // The off-link client never enters the neighbour cache.
        assert_eq!(wire.table.neighbors().peek(client), None);
    }
}

const BROADCAST_MAC_BYTES: [u8; 6] = [0xff; 6];

/// A router replaced by one with another MAC (same address): the first connection through
/// the new MAC completes (its SYN-ACK goes back the way the SYN came) and makes memspin ask
/// at once, and the connections already open follow the answer. (Before the gateway, each
/// connection's replies went to the MAC its SYN came from, so an open connection kept
/// sending to a router that was gone.)
#[test]
fn a_replaced_router_is_followed_at_its_next_connection() {
    const NEW_ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0xfc];
    let gateway = IpAddress::v4(10, 77, 0, 1);
    let mut wire = Wire::new(routed());
    wire.step(Duration::ZERO);
    wire.inject(&gateway_answer(gateway, GATEWAY_MAC));
    // An open connection through the gateway.
    let old = IpAddress::v4(10, 79, 0, 2);
    wire.inject(&tcp_segment(
        GATEWAY_MAC,
        old,
        TcpControl::Syn,
        1000,
        None,
        &[],
    ));
    let (_, old_seq, _, _) = wire
        .step(Duration::from_micros(50))
        .iter()
        .find_map(|f| tcp_of(f))
        .expect("SYN-ACK");
    let old_ack = old_seq.wrapping_add(1);
    wire.inject(&tcp_segment(
        GATEWAY_MAC,
        old,
        TcpControl::None,
        1001,
        Some(old_ack),
        &[],
    ));
    wire.step(Duration::from_micros(50));
    assert_eq!(wire.table.stats().accepted, 1);
    // The router is replaced; a new client's connection arrives through the new MAC.
    let new = IpAddress::v4(10, 79, 0, 3);
    wire.inject(&tcp_segment(
        NEW_ROUTER_MAC,
        new,
        TcpControl::Syn,
        5000,
        None,
        &[],
    ));
    let (mac, new_seq, _, _) = wire
        .step(Duration::from_micros(50))
        .iter()
        .find_map(|f| tcp_of(f))
        .expect("SYN-ACK");
    assert_eq!(
        mac, NEW_ROUTER_MAC,
        "a SYN-ACK goes back the way the SYN came"
    );
    wire.inject(&tcp_segment(
        NEW_ROUTER_MAC,
        new,
        TcpControl::None,
        5001,
        Some(new_seq.wrapping_add(1)),
        &[],
    ));
    let frames = wire.step(Duration::from_micros(50));
    let asked: Vec<_> = frames
        .iter()
        .filter(|f| f[12..14] == [0x08, 0x06])
        .collect();
    assert_eq!(asked.len(), 1, "{frames:02x?}");
    assert_eq!(&asked[0][0..6], &BROADCAST_MAC_BYTES, "asked everyone");
    assert_eq!(&asked[0][38..42], &[10, 77, 0, 1]);
    wire.inject(&gateway_answer(gateway, NEW_ROUTER_MAC));
    // The old connection's next reply goes to the new router.
    wire.inject(&tcp_segment(
        NEW_ROUTER_MAC,
        old,
        TcpControl::Psh,
        1001,
        Some(old_ack),
        b"still here",
    ));
    let frames = wire.step(Duration::from_micros(50));
    let reply = frames
        .iter()
        .filter_map(|f| tcp_of(f))
        .find(|(_, _, _, payload)| payload == b"still here")
        .unwrap_or_else(|| panic!("no echo: {frames:02x?}"));
    assert_eq!(reply.0, NEW_ROUTER_MAC);
    assert_eq!(
        reply.1, old_ack,
        "the reply's sequence: the first byte after the SYN"
    );
    assert_eq!(wire.table.gateways().mac(gateway), Some(NEW_ROUTER_MAC));
}

/// The gateway is probed again (unicast, IPv4) once its confirmation is 30 s old, and the
/// table's delay for a parked worker never sleeps past that.
#[test]
fn the_gateway_is_refreshed_after_thirty_seconds() {
    let mut wire = Wire::new(routed());
    wire.step(Duration::ZERO);
    let gateway = IpAddress::v4(10, 77, 0, 1);
    wire.inject(&gateway_answer(gateway, GATEWAY_MAC));
    wire.inject(&gateway_answer(IpAddress::Ipv6(v6("fd77::1")), GATEWAY_MAC));
    assert!(wire.step(Duration::from_millis(1)).is_empty());
    let delay = wire.table.poll_delay(wire.now).expect("a gateway timer");
    assert!(
        delay <= GATEWAY_REACHABLE && delay > GATEWAY_REACHABLE - Duration::from_millis(10),
        "{delay}"
    );
    assert!(wire.step(delay - Duration::from_millis(1)).is_empty());
    let frames = wire.step(Duration::from_millis(2));
    assert_eq!(frames.len(), 2, "{frames:02x?}");
    let arp = frames.iter().find(|f| f[12..14] == [0x08, 0x06]).unwrap();
    assert_eq!(&arp[0..6], &GATEWAY_MAC, "a unicast refresh");
    assert_eq!(&arp[20..22], &[0, 1], "a request");
    let ns = frames.iter().find(|f| f[12..14] == [0x86, 0xdd]).unwrap();
    assert_eq!(&ns[0..6], &[0x33, 0x33, 0xff, 0, 0, 1], "to the group");
    // The MAC stays in use while the refresh is out.
    assert_eq!(wire.table.gateways().mac(gateway), Some(GATEWAY_MAC));
}

/// A client on the link over IPv6: its solicitation for our address is answered, it
/// connects and its data is echoed; its MAC is learned from the solicitation.
#[test]
fn an_ipv6_client_on_the_link_is_served() {
    let mut config = TableConfig::new(SERVER_MAC, server6(), PORT);
    config.rx_buffer_bytes = 4096;
    config.tx_buffer_bytes = 4096;
    let (mut client, mut server) = memlink::pair(1024, 1500);
    let mut now = Instant::from_secs(1);
    let mut table = ConnTable::<Echo>::new(config, &mut server, now).unwrap();
    let client_ip = Ipv6Cidr::new(v6("fd77::1"), 64);
    let mut swarm = ClientSwarm::new(CLIENT_MAC, client_ip, &mut client, now, 4);
    let remote = IpEndpoint::new(server6().address().into(), PORT);
    let conns: Vec<usize> = (0..4)
        .map(|_| swarm.connect(remote, 4096, 4096).unwrap())
        .collect();
    let mut echoed = vec![Vec::new(); conns.len()];
    for round in 0..20_000 {
        now += Duration::from_micros(50);
        table.poll_ingress(now, &mut server, 64);
        table.serve(echo);
        table.poll_egress(now, &mut server);
        swarm.poll(now, &mut client);
        if round % 1000 == 0 {
            // smoltcp's client retries its solicitations on its own timer.
            swarm.poll_all(now, &mut client);
        }
        for (i, &conn) in conns.iter().enumerate() {
            let socket = swarm.socket(conn);
            if socket.may_send() && socket.send_queue() == 0 && echoed[i].is_empty() {
                socket.send_slice(format!("hello {i}").as_bytes()).unwrap();
                echoed[i].push(0);
            }
            if socket.can_recv() {
                let mut buf = [0u8; 64];
                let n = socket.recv_slice(&mut buf).unwrap();
                echoed[i].extend_from_slice(&buf[..n]);
            }
        }
        if echoed
            .iter()
            .enumerate()
            .all(|(i, got)| got.len() > 1 && got[1..] == *format!("hello {i}").as_bytes())
        {
            let stats = table.stats();
            assert_eq!(stats.accepted, 4, "{stats:?}");
            assert_eq!(table.neighbors().peek(v6("fd77::1")), Some(CLIENT_MAC));
            return;
        }
    }
    panic!("not echoed: {echoed:?}; stats {:?}", table.stats());
}

/// Echo requests to our address are answered over both families, to the MAC they came
/// from; an echo request to another address is not.
#[test]
fn echo_requests_are_answered_over_both_families() {
    let mut wire = Wire::new(TableConfig::new(SERVER_MAC, server_ip(), PORT).with_ip(server6()));
    let caps = ChecksumCapabilities::default();
    let data = b"memspin!";
    // IPv4 from 10.77.0.1.
    let echo4 = Icmpv4Repr::EchoRequest {
        ident: 7,
        seq_no: 1,
        data,
    };
    let client4 = client_ip().address();
    let ip4 = Ipv4Repr {
        src_addr: client4,
        dst_addr: server_ip().address(),
        next_header: IpProtocol::Icmp,
        payload_len: echo4.buffer_len(),
        hop_limit: 64,
    };
    let mut frame = SERVER_MAC.to_vec();
    frame.extend_from_slice(&CLIENT_MAC);
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.resize(14 + 20 + echo4.buffer_len(), 0);
    ip4.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..34]), &caps);
    echo4.emit(&mut Icmpv4Packet::new_unchecked(&mut frame[34..]), &caps);
    wire.inject(&frame);
    // The same to another address of the subnet: not ours.
    let mut other = frame.clone();
    other[33] = 9;
    Ipv4Packet::new_unchecked(&mut other[14..34]).fill_checksum();
    wire.inject(&other);
    // IPv6 from fd77::1.
    let echo6 = Icmpv6Repr::EchoRequest {
        ident: 7,
        seq_no: 2,
        data,
    };
    let client6 = v6("fd77::1");
    let ip6 = Ipv6Repr {
        src_addr: client6,
        dst_addr: server6().address(),
        next_header: IpProtocol::Icmpv6,
        payload_len: echo6.buffer_len(),
        hop_limit: 64,
    };
    let mut frame = SERVER_MAC.to_vec();
    frame.extend_from_slice(&CLIENT_MAC);
    frame.extend_from_slice(&[0x86, 0xdd]);
    frame.resize(14 + 40 + echo6.buffer_len(), 0);
    ip6.emit(&mut Ipv6Packet::new_unchecked(&mut frame[14..54]));
    echo6.emit(
        &client6,
        &server6().address(),
        &mut Icmpv6Packet::new_unchecked(&mut frame[54..]),
        &caps,
    );
    wire.inject(&frame);

    let frames = wire.step(Duration::from_micros(50));
    assert_eq!(frames.len(), 2, "{frames:02x?}");
    let reply4 = frames.iter().find(|f| f[12..14] == [0x08, 0x00]).unwrap();
    assert_eq!(&reply4[0..6], &CLIENT_MAC);
    let ip = Ipv4Packet::new_checked(&reply4[14..]).unwrap();
    assert_eq!(ip.dst_addr(), client4);
    let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(
        Icmpv4Repr::parse(&icmp, &caps).unwrap(),
        Icmpv4Repr::EchoReply {
            ident: 7,
            seq_no: 1,
            data
        }
    );
    let reply6 = frames.iter().find(|f| f[12..14] == [0x86, 0xdd]).unwrap();
    assert_eq!(&reply6[0..6], &CLIENT_MAC);
    let ip = Ipv6Packet::new_checked(&reply6[14..]).unwrap();
    assert_eq!(ip.dst_addr(), client6);
    let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(
        Icmpv6Repr::parse(&ip.src_addr(), &ip.dst_addr(), &icmp, &caps).unwrap(),
        Icmpv6Repr::EchoReply {
            ident: 7,
            seq_no: 2,
            data
        }
    );
}

/// Frames of a family the table does not serve are dropped, neighbour discovery included.
#[test]
fn a_family_without_an_address_is_not_served() {
    let mut wire = Wire::new(TableConfig::new(SERVER_MAC, server_ip(), PORT));
    wire.inject(&tcp_segment(
        CLIENT_MAC,
        IpAddress::Ipv6(v6("fd77::1")),
        TcpControl::Syn,
        1,
        None,
        &[],
    ));
    let mut ns = vec![0u8; NDP_FRAME_LEN];
    emit_ndp(
        &mut ns,
        CLIENT_MAC,
        v6("fd77::1"),
        NdpOut::Solicit {
            target: server6().address(),
            to_mac: Some(SERVER_MAC),
        },
    );
    wire.inject(&ns);
    assert!(wire.step(Duration::from_micros(50)).is_empty());
    assert_eq!(wire.table.stats().frames_dropped, 2);
    // And the other way round: an IPv6-only table ignores ARP.
    let mut wire = Wire::new(TableConfig::new(SERVER_MAC, server6(), PORT));
    wire.inject(&crate::demux::tests::ARP_REQUEST);
    assert!(wire.step(Duration::from_micros(50)).is_empty());
    assert_eq!(wire.table.stats().frames_dropped, 1);
}

/// A table serving fd77::2 and a smoltcp client at fd77::1 on an in-memory link.
struct Link6 {
    table: ConnTable<Echo>,
    server: MemPort,
    swarm: ClientSwarm,
    client: MemPort,
    now: Instant,
}

impl Link6 {
    fn new(rto_min: Option<Duration>) -> Link6 {
        let mut config = TableConfig::new(SERVER_MAC, server6(), PORT);
        config.rx_buffer_bytes = 4096;
        config.tx_buffer_bytes = 4096;
        config.rto_min = rto_min;
        let (mut client, mut server) = memlink::pair(1024, 1500);
        let now = Instant::from_secs(1);
        let table = ConnTable::<Echo>::new(config, &mut server, now).unwrap();
        let client_ip = Ipv6Cidr::new(v6("fd77::1"), 64);
        let swarm = ClientSwarm::new(CLIENT_MAC, client_ip, &mut client, now, 1);
        Link6 {
            table,
            server,
            swarm,
            client,
            now,
        }
    }

    /// One 50 µs step; the server's frames for which `lose` is true are lost.
    fn step(&mut self, lose: &mut dyn FnMut(&[u8]) -> bool) {
        self.now += Duration::from_micros(50);
        self.table.poll_ingress(self.now, &mut self.server, 64);
        self.table.serve(echo);
        self.table.poll_egress(self.now, &mut self.server);
        self.client.drop_pending(&mut *lose);
        self.swarm.poll(self.now, &mut self.client);
    }
}

/// Loss recovery over IPv6: the server's only reply on an idle connection is lost, and the
/// table's probe (a copy whose ACK and window it rewrote, checksum over IPv6's
/// pseudo-header) repairs it within milliseconds, where smoltcp alone waits a second.
#[test]
fn a_lost_reply_is_repaired_over_ipv6() {
    for rto_min in [Some(DEFAULT_RTO_MIN), None] {
        let mut link = Link6::new(rto_min);
        let remote = IpEndpoint::new(server6().address().into(), PORT);
        let conn = link.swarm.connect(remote, 4096, 4096).unwrap();
        for round in 0..200_000 {
            link.step(&mut |_| false);
            if round % 1000 == 0 {
                link.swarm.poll_all(link.now, &mut link.client);
            }
            if link.swarm.socket_ref(conn).may_send() {
                break;
            }
        }
        // A few echoes for an RTT sample.
        for _ in 0..3 {
            link.swarm.socket(conn).send_slice(b"warm-up").unwrap();
            while link.swarm.socket_ref(conn).recv_queue() < 7 {
                link.step(&mut |_| false);
            }
            link.swarm.socket(conn).recv_slice(&mut [0u8; 16]).unwrap();
        }
        for _ in 0..100 {
            link.step(&mut |_| false);
        }
        // The reply to "ping" is lost once.
        link.swarm.socket(conn).send_slice(b"ping").unwrap();
        let start = link.now;
        let mut lost = 0;
        let mut lose = |frame: &[u8]| {
            let data = TcpFrame::new_checked(frame)
                .ok()
                .and_then(|tcp| SegmentRepr::parse(&tcp).ok())
                .is_some_and(|seg| seg.payload_len > 0);
            let drop = data && lost == 0;
            lost += usize::from(drop);
            drop
        };
        while link.swarm.socket_ref(conn).recv_queue() < 4 {
            assert!(link.now - start < Duration::from_secs(2), "{rto_min:?}");
            link.step(&mut lose);
        }
        let took = link.now - start;
        let stats = link.table.stats().recovery;
        match rto_min {
            Some(_) => {
                assert!(took < Duration::from_millis(20), "{took}; {stats:?}");
                assert_eq!(stats.probes, 1, "{stats:?}");
            }
            None => assert!(took >= Duration::from_millis(900), "{took}; {stats:?}"),
        }
    }
}
