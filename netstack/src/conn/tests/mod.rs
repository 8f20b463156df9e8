use super::*;
use crate::RxPeek;
use crate::demux::{self, SegmentRepr, TcpFrame};
use crate::neighbor::NDP_FRAME_LEN;
use smoltcp::phy::{RxToken, TxToken};
use smoltcp::time::Duration;
use smoltcp::wire::{IpEndpoint, Ipv4Address, Ipv4Cidr, Ipv6Address, Ipv6Cidr};

mod client;
mod recovery;
mod routes;

#[test]
fn conn_ids_pack_and_unpack() {
    let id = ConnId {
        bucket: 0xdead_beef,
        slot: 7,
        generation: u32::MAX,
    };
    assert_eq!(ConnId::unpack(id.pack()), id);
    assert_ne!(ConnId::unpack(id.pack() + 1), id);
}
use crate::demux::tests::SYN_FRAME;
use crate::memlink::{self, ClientSwarm, Echo, MemPort, echo};
use core::cell::Cell;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetFrame, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x02];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x01];
const PORT: u16 = 11211;

fn server_ip() -> Ipv4Cidr {
    Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 2), 24)
}

fn client_ip() -> Ipv4Cidr {
    Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 1), 24)
}

/// Echo, but the server closes first once it has echoed a line ending in "quit".
fn echo_then_quit(conn: &mut Conn<'_, Echo>) {
    let mut tail = [0u8; 5];
    let n = conn.io.peek_slice(&mut tail).unwrap_or(0);
    let quit = conn.io.recv_queue() == 5 && &tail[..n] == b"quit\n";
    echo(conn);
    if quit {
        conn.io.close();
    }
}

struct Net {
    table: ConnTable<Echo>,
    server: MemPort,
    swarm: ClientSwarm,
    client: MemPort,
    now: Instant,
    /// False: the server's device shows no frame ahead (ingress without look-ahead).
    peek: bool,
    /// Peeks at the server's device that found a frame.
    peeks: Cell<usize>,
}

/// The server's device as ingress sees it: showing the frames ahead or not, counting the
/// peeks that found one.
struct Shown<'d> {
    device: &'d mut MemPort,
    peek: bool,
    peeks: &'d Cell<usize>,
}

impl Device for Shown<'_> {
    type RxToken<'a>
        = <MemPort as Device>::RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = <MemPort as Device>::TxToken<'a>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.device.receive(now)
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        self.device.transmit(now)
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.device.capabilities()
    }
}

impl RxPeek for Shown<'_> {
    fn peek_rx<R>(&self, ahead: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if !self.peek {
            return None;
        }
        let shown = self.device.peek_rx(ahead, f);
        self.peeks
            .set(self.peeks.get() + usize::from(shown.is_some()));
        shown
    }
}

impl Net {
    fn new(conn_limit: usize, clients: usize) -> Net {
        Net::with(clients, |config| config.conn_limit = conn_limit)
    }

    /// 4 KiB buffers and whatever `configure` sets.
    fn with(clients: usize, configure: impl FnOnce(&mut TableConfig)) -> Net {
        let mut config = TableConfig::new(SERVER_MAC, server_ip(), PORT);
        config.rx_buffer_bytes = 4096;
        config.tx_buffer_bytes = 4096;
        configure(&mut config);
        let admission = Arc::new(Admission::new(config.conn_limit));
        Net::shared(clients, config, admission)
    }

    /// A table under `admission`, which other tables may share.
    fn shared(clients: usize, config: TableConfig, admission: Arc<Admission>) -> Net {
        let (mut client, mut server) = memlink::pair(8192, 1500);
        let now = Instant::from_secs(1);
        let table = ConnTable::with_admission(config, admission, &mut server, now).unwrap();
        let swarm = ClientSwarm::new(CLIENT_MAC, client_ip(), &mut client, now, clients);
        Net {
            table,
            server,
            swarm,
            client,
            now,
            peek: true,
            peeks: Cell::new(0),
        }
    }

    fn connect(&mut self) -> usize {
        self.swarm.connect(Net::remote(), 4096, 4096).unwrap()
    }

    fn step(&mut self) {
        self.step_with(echo);
    }

    fn step_with(&mut self, app: fn(&mut Conn<'_, Echo>)) {
        self.now += Duration::from_micros(50);
        self.server_step(app);
        self.swarm.poll(self.now, &mut self.client);
    }

    /// The server's half of a step only (the client is not polled).
    fn server_step(&mut self, app: fn(&mut Conn<'_, Echo>)) {
        let mut shown = Shown {
            device: &mut self.server,
            peek: self.peek,
            peeks: &self.peeks,
        };
        self.table.poll_ingress(self.now, &mut shown, 64);
        self.table.serve(app);
        self.table.poll_egress(self.now, &mut self.server);
    }

    fn remote() -> IpEndpoint {
        IpEndpoint::new(IpAddress::Ipv4(server_ip().address()), PORT)
    }

    #[track_caller]
    fn run_until(&mut self, what: &str, mut done: impl FnMut(&mut Net) -> bool) {
        for _ in 0..200_000 {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!("not reached: {what}; stats {:?}", self.table.stats());
    }

    fn state(&self, conn: usize) -> tcp::State {
        self.swarm.socket_ref(conn).state()
    }

    /// Puts a hand-made frame on the wire to the server.
    fn inject(&mut self, frame: &[u8]) {
        let tx = self.client.transmit(self.now).expect("room on the link");
        tx.consume(frame.len(), |buf| buf.copy_from_slice(frame));
    }

    /// Takes every frame the server sent, before the client swarm sees them.
    fn take_server_frames(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        while let Some((rx, _)) = self.client.receive(self.now) {
            rx.consume(|frame| frames.push(frame.to_vec()));
        }
        frames
    }

    /// Advances the clock by `step` at a time for `total`, stepping server and client
    /// (`client` decides what the client does each step).
    fn run_for(&mut self, total: Duration, step: Duration, mut client: impl FnMut(&mut Net)) {
        let end = self.now + total;
        while self.now < end {
            self.now += step;
            self.server_step(echo);
            client(self);
        }
    }

    /// The peers of the handshakes in progress, oldest first.
    fn backlog_peers(&mut self) -> Vec<(IpAddress, u16)> {
        let table = &mut self.table;
        table
            .backlog
            .order(&mut table.buckets)
            .into_iter()
            .map(|at| {
                let (bucket, slot) = split_addr(at);
                let peer = table.buckets[bucket].slots[slot].peer.unwrap();
                (peer.addr, (peer.ports >> 16) as u16)
            })
            .collect()
    }

    /// Sockets in the buckets' sets (in use or armed).
    fn sockets_in_sets(&self) -> usize {
        self.table
            .buckets
            .iter()
            .map(|b| b.slots.iter().filter(|s| s.handle.is_some()).count())
            .sum()
    }
}

/// A client host on the server's subnet.
fn host(last: u8) -> Ipv4Address {
    Ipv4Address::new(10, 77, 0, last)
}

/// A host that is not the memlink client, for forged frames.
const OTHER_MAC: [u8; 6] = [0x02, 0, 0, 0x66, 0, 0x66];

/// An Ethernet/IPv4/TCP frame from `mac`/`src`:`port` to the server, with good checksums.
fn segment(
    mac: [u8; 6],
    src: Ipv4Address,
    port: u16,
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
) -> Vec<u8> {
    segment_to(PORT, mac, src, port, control, seq, ack)
}

/// [`segment`] to the server's port `dst_port`.
fn segment_to(
    dst_port: u16,
    mac: [u8; 6],
    src: Ipv4Address,
    port: u16,
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: port,
        dst_port,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 64_000,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    };
    let dst = server_ip().address();
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let mut frame = vec![0u8; 14 + ip.buffer_len() + tcp.buffer_len()];
    frame[0..6].copy_from_slice(&SERVER_MAC);
    frame[6..12].copy_from_slice(&mac);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    let caps = ChecksumCapabilities::default();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..34]), &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut frame[34..]),
        &IpAddress::Ipv4(src),
        &IpAddress::Ipv4(dst),
        &caps,
    );
    frame
}

/// The destination MAC, flags and sequence number of a TCP frame the server sent.
fn sent(frame: &[u8]) -> ([u8; 6], u8, u32) {
    let eth = EthernetFrame::new_checked(frame).unwrap();
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
    let view = TcpFrame::new_checked(frame).unwrap();
    (eth.dst_addr().0, view.flags(), tcp.seq_number().0 as u32)
}

#[test]
fn bucket_count_follows_the_limit() {
    let config = |limit| TableConfig {
        conn_limit: limit,
        ..TableConfig::new(SERVER_MAC, server_ip(), PORT)
    };
    assert_eq!(config(1).bucket_count(), 1);
    assert_eq!(config(8).bucket_count(), 8);
    assert_eq!(config(1024).bucket_count(), 1024);
    assert_eq!(config(10_000).bucket_count(), 16_384);
}

#[test]
fn bad_configs_are_typed_errors() {
    let (_, mut server) = memlink::pair(4, 1500);
    let base = TableConfig::new(SERVER_MAC, server_ip(), PORT);
    let now = Instant::ZERO;
    let cases = [
        (TableConfig { port: 0, ..base }, TableError::ZeroPort),
        (
            TableConfig {
                conn_limit: 0,
                ..base
            },
            TableError::ConnLimit { conn_limit: 0 },
        ),
        (
            TableConfig {
                rx_buffer_bytes: 10,
                ..base
            },
            TableError::BufferSize { bytes: 10 },
        ),
        (
            TableConfig {
                mac: [0x01, 0, 0, 0, 0, 1],
                ..base
            },
            TableError::MacNotUnicast,
        ),
        (
            TableConfig {
                ipv4: Some(Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 255), 24)),
                ..base
            },
            TableError::IpNotUnicast,
        ),
        (
            TableConfig {
                ipv4: Some(Ipv4Cidr::new(Ipv4Address::new(224, 0, 0, 1), 24)),
                ..base
            },
            TableError::IpNotUnicast,
        ),
        (
            base.with_ip(Ipv6Cidr::new("ff02::2".parse().unwrap(), 64)),
            TableError::IpNotUnicast,
        ),
        (TableConfig { ipv4: None, ..base }, TableError::NoAddress),
    ];
    let gateway = |ip: IpAddress| TableError::Gateway { gateway: ip };
    let off_link = IpAddress::v4(10, 79, 0, 1);
    let v6_gateway = IpAddress::v6(0xfd77, 0, 0, 0, 0, 0, 0, 1);
    let gateway_cases = [
        (base.with_gateway(off_link), gateway(off_link)),
        (
            base.with_gateway(server_ip().address()),
            gateway(server_ip().address().into()),
        ),
        (
            base.with_gateway(Ipv4Address::new(10, 77, 0, 255)),
            gateway(IpAddress::v4(10, 77, 0, 255)),
        ),
        (
            base.with_gateway(Ipv4Address::new(10, 77, 0, 0)),
            gateway(IpAddress::v4(10, 77, 0, 0)),
        ),
        (base.with_gateway(v6_gateway), gateway(v6_gateway)),
        (
            base.with_ip(Ipv6Cidr::new("fd77::2".parse().unwrap(), 64))
                .with_gateway(IpAddress::v6(0xfd79, 0, 0, 0, 0, 0, 0, 1)),
            gateway(IpAddress::v6(0xfd79, 0, 0, 0, 0, 0, 0, 1)),
        ),
    ];
    let cases = cases.into_iter().chain(gateway_cases);
    for (config, expected) in cases {
        assert_eq!(
            ConnTable::<Echo>::new(config, &mut server, now).unwrap_err(),
            expected
        );
    }
    // A gateway on the link, or IPv6 link-local, is fine.
    let dual = base
        .with_ip(Ipv6Cidr::new("fd77::2".parse().unwrap(), 64))
        .with_gateway(Ipv4Address::new(10, 77, 0, 1))
        .with_gateway("fe80::1".parse::<Ipv6Address>().unwrap());
    assert!(ConnTable::<Echo>::new(dual, &mut server, now).is_ok());
}

#[test]
fn clients_connect_exchange_and_close() {
    let clients = 50;
    let mut net = Net::new(64, clients);
    for _ in 0..clients {
        net.connect();
    }
    net.run_until("all established", |net| net.table.stats().active == clients);
    assert!((0..clients).all(|c| net.state(c) == tcp::State::Established));
    assert_eq!(net.table.stats().accepted, clients as u64);
    for c in 0..clients {
        let message = format!("hello from client {c}");
        assert_eq!(
            net.swarm.socket(c).send_slice(message.as_bytes()).unwrap(),
            message.len()
        );
    }
    net.run_until("all echoed", |net| {
        (0..clients).all(|c| net.swarm.socket_ref(c).recv_queue() == 18 + c.to_string().len())
    });
    for c in 0..clients {
        let mut buf = [0u8; 64];
        let n = net.swarm.socket(c).recv_slice(&mut buf).unwrap();
        assert_eq!(&buf[..n], format!("hello from client {c}").as_bytes());
    }
    for c in 0..clients {
        net.swarm.socket(c).close();
    }
    net.run_until("all closed", |net| net.table.stats().in_use == 0);
    let stats = *net.table.stats();
    assert_eq!(
        (stats.accepted, stats.closed, stats.active, stats.refused),
        (50, 50, 0, 0)
    );
    // Per connection in: SYN, ACK, data, ACK of the echo, FIN, ACK of our FIN; out:
    // SYN-ACK, echo (carrying the ACK), FIN (carrying the ACK of theirs). Plus the
    // client's ARP request (control) and our reply. No extra segments.
    assert_eq!(
        (stats.frames_tcp, stats.frames_control, stats.frames_out),
        (300, 1, 151),
        "{stats:?}"
    );
    assert_eq!(
        net.table.poll_delay(net.now),
        None,
        "no timers once everything is closed"
    );
    for c in 0..clients {
        assert!(matches!(
            net.state(c),
            tcp::State::TimeWait | tcp::State::Closed
        ));
    }
}

#[test]
fn over_the_limit_the_syn_gets_a_reset_and_the_others_keep_working() {
    let mut net = Net::new(4, 8);
    for _ in 0..4 {
        net.connect();
    }
    net.run_until("4 established", |net| net.table.stats().active == 4);
    let extra = net.connect();
    net.run_until("extra refused", |net| {
        net.state(extra) == tcp::State::Closed
    });
    assert_eq!(net.table.stats().refused, 1);
    assert_eq!(net.table.stats().in_use, 4);
    for c in 0..4 {
        net.swarm.socket(c).send_slice(b"still here").unwrap();
    }
    net.run_until("echoes", |net| {
        (0..4).all(|c| net.swarm.socket_ref(c).recv_queue() == 10)
    });
    // Free one slot: the next connection is accepted.
    net.swarm.socket(0).close();
    net.run_until("one closed", |net| net.table.stats().in_use == 3);
    let again = net.connect();
    net.run_until("accepted after a close", |net| {
        net.table.stats().accepted == 5
    });
    assert_eq!(net.state(again), tcp::State::Established);
}

#[test]
fn a_thousand_connections_are_all_served() {
    let clients = 1000;
    let mut net = Net::new(1024, clients);
    for _ in 0..clients {
        net.connect();
    }
    net.run_until("all established", |net| net.table.stats().active == clients);
    for round in 0..3u8 {
        for c in 0..clients {
            let payload = [round; 100];
            net.swarm.socket(c).send_slice(&payload).unwrap();
        }
        net.run_until("all echoed", |net| {
            (0..clients).all(|c| net.swarm.socket_ref(c).recv_queue() == 100)
        });
        for c in 0..clients {
            let mut buf = [0u8; 200];
            assert_eq!(net.swarm.socket(c).recv_slice(&mut buf).unwrap(), 100);
            assert!(buf[..100].iter().all(|&b| b == round));
        }
    }
    let stats = *net.table.stats();
    assert_eq!(stats.accepted, 1000);
    assert_eq!(stats.refused, 0);
    assert_eq!(stats.sockets, 1000, "{stats:?}");
    // No bucket holds more than a small multiple of the average (1,000 connections in
    // 1,024 buckets: the fullest bucket of a uniform spread holds about 5).
    let largest = net
        .table
        .buckets
        .iter()
        .map(|b| b.slots.len())
        .max()
        .unwrap();
    assert!(
        largest <= 8 * BUCKET_LOAD,
        "largest bucket has {largest} slots"
    );
}

/// What a run of many connections did: the table's counters after each phase and what
/// each client received.
fn many_connections_run(peek: bool) -> (Vec<TableStats>, Vec<Vec<u8>>, usize) {
    let clients = 300;
    let mut net = Net::new(512, clients);
    net.peek = peek;
    // The same buckets in both runs.
    net.table.hash_keys = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3211];
    let mut stats = Vec::new();
    for _ in 0..clients {
        net.connect();
    }
    net.run_until("all established", |net| net.table.stats().active == clients);
    stats.push(*net.table.stats());
    let mut received = vec![Vec::new(); clients];
    for round in 0..4u8 {
        for c in 0..clients {
            let payload = vec![round ^ c as u8; 1 + (c * 7 + usize::from(round) * 13) % 300];
            net.swarm.socket(c).send_slice(&payload).unwrap();
        }
        net.run_until("all echoed", |net| {
            (0..clients).all(|c| net.swarm.socket_ref(c).recv_queue() > 0)
        });
        for _ in 0..20 {
            net.step();
        }
        for (c, got) in received.iter_mut().enumerate() {
            let mut buf = [0u8; 600];
            let n = net.swarm.socket(c).recv_slice(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        stats.push(*net.table.stats());
    }
    for c in 0..clients / 2 {
        net.swarm.socket(c).close();
    }
    net.run_until("half closed", |net| {
        net.table.stats().active == clients - clients / 2
    });
    stats.push(*net.table.stats());
    (stats, received, net.peeks.get())
}

#[test]
fn ingress_with_look_ahead_does_what_it_does_without() {
    let (blind_stats, blind_received, blind_peeks) = many_connections_run(false);
    let (stats, received, peeks) = many_connections_run(true);
    assert_eq!(blind_peeks, 0);
    // The run queues many frames at once, so the look-ahead ran.
    assert!(peeks > 1000, "{peeks} peeks found a frame");
    assert_eq!(received, blind_received);
    assert_eq!(stats, blind_stats);
}

#[test]
fn large_transfers_stream_through_small_buffers() {
    // 64 KiB through 4 KiB buffers on both sides: exercises want_write and window updates.
    let mut net = Net::new(8, 1);
    net.connect();
    net.run_until("established", |net| net.state(0) == tcp::State::Established);
    let total = 64 * 1024;
    let (mut sent, mut received) = (0usize, 0usize);
    for _ in 0..200_000 {
        if received == total {
            break;
        }
        if sent < total {
            let chunk: Vec<u8> = (sent..total.min(sent + 1000)).map(|i| i as u8).collect();
            sent += net.swarm.socket(0).send_slice(&chunk).unwrap();
        }
        let mut buf = [0u8; 4096];
        let n = net.swarm.socket(0).recv_slice(&mut buf).unwrap();
        for (k, &byte) in buf[..n].iter().enumerate() {
            assert_eq!(byte, (received + k) as u8);
        }
        received += n;
        net.step();
    }
    assert_eq!(received, total);
}

#[test]
fn server_close_and_stale_ids() {
    let mut net = Net::new(8, 2);
    net.connect();
    net.run_until("established", |net| net.table.stats().active == 1);
    net.swarm.socket(0).send_slice(b"x").unwrap();
    let mut id = None;
    for _ in 0..1000 {
        net.now += Duration::from_micros(50);
        net.table.poll_ingress(net.now, &mut net.server, 64);
        net.table.serve(|conn| id = Some(conn.id()));
        net.table.poll_egress(net.now, &mut net.server);
        net.swarm.poll(net.now, &mut net.client);
        if id.is_some() {
            break;
        }
    }
    let id = id.expect("the table called the application for the received byte");
    assert_eq!(
        net.table
            .with_conn(id, |conn| conn.io.send_slice(b"late reply").unwrap()),
        Some(10)
    );
    assert_eq!(net.table.with_conn(id, |conn| conn.io.close()), Some(()));
    assert_eq!(
        net.table.with_conn(id, |_| ()),
        None,
        "closed: no more calls"
    );
    net.run_until("client sees FIN", |net| {
        net.state(0) == tcp::State::CloseWait
    });
    let mut buf = [0u8; 32];
    let n = net.swarm.socket(0).recv_slice(&mut buf).unwrap();
    assert!(buf[..n].ends_with(b"late reply"));
    net.swarm.socket(0).close();
    net.run_until("both sides closed", |net| {
        net.state(0) == tcp::State::Closed
    });
    net.step();
    assert_eq!(
        net.table.stats().in_use,
        0,
        "TIME-WAIT does not hold a slot"
    );
    assert_eq!(net.table.stats().active, 0);
}

#[test]
fn aborted_connections_free_their_socket() {
    let mut net = Net::new(2, 3);
    net.connect();
    net.connect();
    net.run_until("established", |net| net.table.stats().active == 2);
    net.swarm.socket(1).abort();
    net.run_until("reset seen", |net| net.table.stats().in_use == 1);
    assert_eq!(net.table.stats().closed, 1);
    let third = net.connect();
    net.run_until("third accepted", |net| net.table.stats().accepted == 3);
    assert_eq!(net.state(third), tcp::State::Established);
    assert_eq!(net.table.stats().refused, 0);
}

#[test]
fn a_handshake_that_never_completes_frees_its_socket() {
    let mut net = Net::new(4, 1);
    net.connect();
    net.run_until("SYN taken", |net| net.table.stats().handshaking == 1);
    assert_eq!(net.table.stats().active, 0);
    assert_eq!(
        net.table.stats().in_use,
        0,
        "handshakes do not count against the limit"
    );
    // The client vanishes: its final ACK is lost, and so is everything we send it.
    assert_eq!(net.server.discard_pending(), 1);
    let start = net.now;
    while net.now < start + HANDSHAKE_TIMEOUT + Duration::from_secs(1) {
        net.now += Duration::from_millis(1);
        net.client.discard_pending();
        net.server_step(echo);
    }
    let stats = *net.table.stats();
    assert_eq!(
        (stats.handshaking, stats.handshakes_failed, stats.accepted),
        (0, 1, 0),
        "{stats:?}"
    );
    assert!(
        stats.frames_out >= 4,
        "SYN-ACK plus retransmissions: {stats:?}"
    );
    assert_eq!(net.table.poll_delay(net.now), None);
}

#[test]
fn a_lost_reply_is_retransmitted_from_the_bucket_timer() {
    let mut net = Net::new(8, 1);
    net.connect();
    net.run_until("established", |net| net.table.stats().active == 1);
    net.swarm.socket(0).send_slice(b"ping").unwrap();
    net.swarm.poll(net.now, &mut net.client);
    net.server_step(echo);
    assert_eq!(
        net.client.discard_pending(),
        1,
        "the echo was sent, and is now lost"
    );
    // Nothing is known yet of how soon this table's clients acknowledge data, so loss
    // recovery (`recovery/`) leaves this first reply to smoltcp's own timer: a second.
    let delay = net
        .table
        .poll_delay(net.now)
        .expect("a retransmission timer is armed");
    assert!(
        delay >= Duration::from_millis(900) && delay <= Duration::from_secs(1),
        "{delay}"
    );
    let sent = net.table.stats().frames_out;
    net.now += delay;
    net.server_step(echo);
    assert_eq!(
        net.table.stats().frames_out,
        sent + 1,
        "retransmitted when due"
    );
    net.swarm.poll(net.now, &mut net.client);
    let mut buf = [0u8; 8];
    assert_eq!(net.swarm.socket(0).recv_slice(&mut buf).unwrap(), 4);
    assert_eq!(&buf[..4], b"ping");
}

/// Waves of connections from new ports (so new buckets) at the limit: every wave is
/// accepted as soon as the previous one has closed, sockets move between buckets
/// through the spare pool instead of piling up, and the buckets keep only live ones.
#[test]
fn closed_sockets_are_reused_by_other_buckets_at_once() {
    let limit = 64;
    let waves = 4;
    let mut net = Net::new(limit, limit * waves);
    for wave in 0..waves {
        let first = wave * limit;
        for _ in 0..limit {
            net.connect();
        }
        net.run_until("wave established", |net| net.table.stats().active == limit);
        for c in first..first + limit {
            net.swarm.socket(c).send_slice(b"hi").unwrap();
        }
        net.run_until("wave echoed", |net| {
            (first..first + limit).all(|c| net.swarm.socket_ref(c).recv_queue() == 2)
        });
        for c in first..first + limit {
            net.swarm.socket(c).close();
        }
        net.run_until("wave closed", |net| net.table.stats().in_use == 0);
        let stats = *net.table.stats();
        assert_eq!(stats.sockets, limit, "wave {wave}: {stats:?}");
        assert_eq!(stats.refused, 0, "wave {wave}: {stats:?}");
        let in_sets: usize = net
            .table
            .buckets
            .iter()
            .map(|b| b.slots.iter().filter(|s| s.handle.is_some()).count())
            .sum();
        assert_eq!(in_sets, 0, "closed sockets left their buckets");
        assert_eq!(net.table.spare.sockets.len(), limit);
    }
    assert_eq!(net.table.stats().accepted, (limit * waves) as u64);
}

/// Connections the server closes (`quit`) end in TIME-WAIT on our side: that must not
/// hold a slot, or a client reconnecting after each `quit` is refused for ten seconds
/// per connection once it reaches the limit. The peer's side ends cleanly (its FIN
/// was ACKed before the socket was released), and the same port can come back at once.
#[test]
fn connections_the_server_closed_free_their_slot_at_once() {
    let limit = 2;
    let rounds = 10;
    let mut net = Net::new(limit, 1);
    net.connect();
    for round in 0..rounds {
        net.run_until("established", |net| net.state(0) == tcp::State::Established);
        net.swarm.socket(0).send_slice(b"quit\n").unwrap();
        for _ in 0..1000 {
            if net.state(0) == tcp::State::CloseWait {
                break;
            }
            net.step_with(echo_then_quit);
        }
        assert_eq!(net.state(0), tcp::State::CloseWait, "server closed first");
        net.swarm.socket(0).close();
        let start = net.now;
        net.run_until("client closed", |net| net.state(0) == tcp::State::Closed);
        assert!(
            net.now - start < Duration::from_millis(100),
            "our ACK of the client's FIN went out (no retransmitted FIN, no RST)"
        );
        net.step();
        let stats = *net.table.stats();
        assert_eq!(
            (stats.in_use, stats.sockets),
            (0, 1),
            "round {round}: {stats:?}"
        );
        // The same client port again, well within TIME-WAIT's 10 s.
        assert!(net.swarm.reconnect(0, Net::remote()));
    }
    net.run_until("accepted again", |net| {
        net.table.stats().accepted == rounds + 1
    });
    let stats = *net.table.stats();
    assert_eq!((stats.in_use, stats.refused), (1, 0), "{stats:?}");
    net.swarm.socket(0).send_slice(b"again").unwrap();
    net.run_until("echo", |net| net.swarm.socket_ref(0).recv_queue() == 5);
}

#[test]
fn the_syn_ack_goes_to_the_mac_of_the_syn_without_arp() {
    // The captured kernel SYN, with no ARP exchange before it (as when the kernel's
    // ARP traffic went to another queue): the SYN-ACK must go out directly.
    let mut net = Net::new(4, 1);
    net.inject(&SYN_FRAME);
    net.server_step(echo);
    assert_eq!(net.table.stats().handshaking, 1);
    let frames = net.take_server_frames();
    assert_eq!(frames.len(), 1, "a TCP segment, not an ARP request");
    let (mac, flags, _) = sent(&frames[0]);
    assert_eq!(
        flags & (demux::flags::SYN | demux::flags::ACK),
        demux::flags::SYN | demux::flags::ACK
    );
    assert_eq!(&mac, &SYN_FRAME[6..12], "sent to the SYN's source MAC");
    assert_eq!(
        TcpFrame::new_checked(&frames[0][..]).unwrap().dst_port(),
        40000
    );
    assert!(
        net.table.neighbors().is_empty(),
        "a SYN teaches the neighbour cache nothing"
    );
}

/// The retransmission give-up: the client keeps sending (it retransmits its request,
/// whose ACK never reaches it), so smoltcp hears from it all along, but it never
/// acknowledges the reply. The slot comes back after [`GIVE_UP_TIMEOUT`], not before.
#[test]
fn unacknowledged_data_is_given_up_after_the_documented_time() {
    let mut net = Net::new(1, 1);
    net.connect();
    net.run_until("established", |net| net.table.stats().active == 1);
    net.swarm.socket(0).send_slice(b"ping").unwrap();
    net.swarm.poll(net.now, &mut net.client);
    let start = net.now;
    let heard_before = net.table.stats().frames_tcp;
    let mut freed_after = None;
    net.run_for(
        GIVE_UP_TIMEOUT + Duration::from_secs(5),
        Duration::from_millis(10),
        |net| {
            net.client.discard_pending();
            net.swarm.poll_all(net.now, &mut net.client);
            if freed_after.is_none() && net.table.stats().in_use == 0 {
                freed_after = Some(net.now - start);
            }
        },
    );
    let freed_after = freed_after.expect("the slot came back");
    assert!(
        freed_after >= GIVE_UP_TIMEOUT
            && freed_after <= GIVE_UP_TIMEOUT + Duration::from_millis(50),
        "freed after {freed_after}"
    );
    let stats = *net.table.stats();
    assert_eq!(
        (stats.timed_out, stats.closed, stats.active, stats.sockets),
        (1, 1, 0, 1),
        "{stats:?}"
    );
    assert!(
        stats.frames_tcp >= heard_before + 3,
        "the client's retransmissions kept arriving: {stats:?}"
    );
    // The slot serves a new client (-c 1).
    assert!(net.swarm.reconnect(0, Net::remote()) || net.connect() > 0);
    net.run_until("accepted again", |net| net.table.stats().accepted == 2);
}

/// Reads what arrived and closes (no reply): the server's FIN is all it has to send.
fn close_on_input(conn: &mut Conn<'_, Echo>) {
    let mut buf = [0u8; 64];
    if conn.io.recv_slice(&mut buf).unwrap_or(0) > 0 {
        conn.io.close();
    }
}

/// A peer that vanishes while the server closes: the close is bounded too.
#[test]
fn a_close_the_peer_never_answers_ends_after_the_close_timeout() {
    let mut net = Net::new(1, 1);
    net.connect();
    net.run_until("established", |net| net.table.stats().active == 1);
    net.swarm.socket(0).send_slice(b"quit").unwrap();
    net.swarm.poll(net.now, &mut net.client);
    net.server_step(close_on_input);
    assert_eq!(net.table.stats().closed, 1);
    assert_eq!(net.table.stats().in_use, 1, "closing still counts");
    // Our FIN and its retransmissions are lost, and the client is gone.
    let start = net.now;
    let mut freed_after = None;
    while net.now < start + CLOSE_TIMEOUT + Duration::from_secs(1) {
        net.now += Duration::from_millis(20);
        net.server_step(close_on_input);
        net.client.discard_pending();
        if freed_after.is_none() && net.table.stats().in_use == 0 {
            freed_after = Some(net.now - start);
        }
    }
    let freed_after = freed_after.expect("the close ended");
    assert!(
        freed_after >= CLOSE_TIMEOUT && freed_after <= CLOSE_TIMEOUT + Duration::from_millis(50),
        "freed after {freed_after}"
    );
    assert_eq!(net.table.stats().timed_out, 1);
}

#[test]
fn the_idle_timeout_closes_idle_connections_and_leaves_busy_ones() {
    let idle = Duration::from_secs(5);
    let mut net = Net::with(2, |config| config.idle_timeout = Some(idle));
    net.connect();
    net.connect();
    net.run_until("established", |net| net.table.stats().active == 2);
    let start = net.now;
    let mut closed_after = None;
    let mut echoes = 0;
    net.run_for(Duration::from_secs(12), Duration::from_millis(5), |net| {
        // Connection 1 sends a request every 500 ms and reads the answer.
        if (net.now - start).total_millis().is_multiple_of(500) {
            net.swarm.socket(1).send_slice(b"tick").unwrap();
        }
        net.swarm.poll(net.now, &mut net.client);
        let mut buf = [0u8; 16];
        echoes += net.swarm.socket(1).recv_slice(&mut buf).unwrap_or(0) / 4;
        if closed_after.is_none() && net.state(0) == tcp::State::CloseWait {
            closed_after = Some(net.now - start);
            net.swarm.socket(0).close();
        }
    });
    let closed_after = closed_after.expect("the idle connection was closed (FIN)");
    assert!(
        closed_after <= idle + Duration::from_millis(50),
        "closed after {closed_after}"
    );
    assert_eq!(net.state(1), tcp::State::Established);
    assert!(echoes >= 20, "{echoes} echoes");
    let stats = *net.table.stats();
    assert_eq!(
        (stats.idle_closed, stats.active, stats.in_use),
        (1, 1, 1),
        "{stats:?}"
    );
}

/// A SYN flood from forged addresses (nobody answers the SYN-ACKs) fills the backlog,
/// and the oldest handshake gives way to each newer one; none of it touches the
/// connection limit, so a real client still connects.
#[test]
fn the_syn_backlog_evicts_the_oldest_and_never_takes_a_connection_slot() {
    let mut net = Net::with(2, |config| {
        config.conn_limit = 2;
        config.syn_backlog = 4;
    });
    net.connect();
    net.run_until("one established", |net| net.table.stats().active == 1);
    // Budget: the free place plus the backlog, 5 handshakes.
    for i in 0..7u16 {
        net.inject(&segment(
            OTHER_MAC,
            host(100 + i as u8),
            5000 + i,
            TcpControl::Syn,
            1,
            None,
        ));
        net.server_step(echo);
    }
    net.take_server_frames();
    let stats = *net.table.stats();
    assert_eq!(
        (stats.handshaking, stats.syn_evicted, stats.in_use),
        (5, 2, 1),
        "{stats:?}"
    );
    let kept: Vec<_> = (2..7u16)
        .map(|i| (IpAddress::Ipv4(host(100 + i as u8)), 5000 + i))
        .collect();
    assert_eq!(net.backlog_peers(), kept, "the two oldest gave way");
    // A retransmitted SYN of a kept handshake changes nothing.
    net.inject(&segment(
        OTHER_MAC,
        host(103),
        5003,
        TcpControl::Syn,
        1,
        None,
    ));
    net.server_step(echo);
    assert_eq!(net.backlog_peers(), kept);
    // A SYN with a bad checksum evicts nobody.
    let mut bad = segment(OTHER_MAC, host(120), 6000, TcpControl::Syn, 1, None);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    net.inject(&bad);
    net.server_step(echo);
    assert_eq!(net.backlog_peers(), kept);
    // The real client's second connection: accepted while the backlog is full (its SYN
    // evicts the oldest forged one).
    net.connect();
    net.run_until("second established", |net| net.table.stats().active == 2);
    let stats = *net.table.stats();
    assert_eq!(
        (stats.refused, stats.in_use, stats.syn_evicted),
        (0, 2, 3),
        "{stats:?}"
    );
    assert_eq!(net.backlog_peers(), kept[1..]);
    assert!(
        stats.sockets <= 2 + 4 + 1,
        "conn_limit + syn_backlog + 1: {stats:?}"
    );
    // The forged handshakes end with the handshake timeout.
    net.run_for(HANDSHAKE_TIMEOUT, Duration::from_millis(50), |net| {
        net.take_server_frames();
    });
    assert_eq!(net.table.stats().handshaking, 0);
    assert_eq!(net.table.stats().active, 2);
}

/// A burst of real clients as large as the connection limit, all connecting at once, is
/// never cut short by the backlog (the handshakes use the free places).
#[test]
fn a_burst_of_real_clients_up_to_the_limit_all_connect() {
    let clients = 300;
    let mut net = Net::with(clients, |config| {
        config.conn_limit = clients;
        config.syn_backlog = 16;
    });
    for _ in 0..clients {
        net.connect();
    }
    net.run_until("all established", |net| net.table.stats().active == clients);
    let stats = *net.table.stats();
    assert_eq!((stats.syn_evicted, stats.refused), (0, 0), "{stats:?}");
}

/// smoltcp turns a socket that gets an RST in SYN-RECEIVED back to LISTEN: the table must
/// end the handshake there and then, or the slot stays counted and the stray listener
/// takes some later SYN behind the table's back.
#[test]
fn an_rst_in_syn_received_frees_the_handshake_at_once() {
    let mut net = Net::new(1, 1);
    net.inject(&segment(
        OTHER_MAC,
        host(9),
        5000,
        TcpControl::Syn,
        1000,
        None,
    ));
    net.server_step(echo);
    assert_eq!(net.table.stats().handshaking, 1);
    let frames = net.take_server_frames();
    let (mac, flags, _) = sent(&frames[0]);
    assert_eq!(
        (mac, flags & 0x12),
        (OTHER_MAC, 0x12),
        "a SYN-ACK to the SYN's MAC"
    );
    // What a kernel answers to a SYN-ACK it has no socket for.
    net.inject(&segment(
        OTHER_MAC,
        host(9),
        5000,
        TcpControl::Rst,
        1001,
        None,
    ));
    net.server_step(echo);
    let stats = *net.table.stats();
    assert_eq!(
        (stats.handshaking, stats.handshakes_failed, stats.in_use),
        (0, 1, 0),
        "{stats:?}"
    );
    assert_eq!(net.sockets_in_sets(), 0, "no listener left behind");
    assert_eq!(net.table.poll_delay(net.now), None, "no clock left running");
    net.connect();
    net.run_until("a real client", |net| net.table.stats().active == 1);
}

/// The neighbour cache learns from a completed handshake and from ARP, never from a SYN
/// or from a frame smoltcp rejected; and no forged frame moves an open connection's replies.
#[test]
fn only_validated_frames_teach_the_neighbour_cache() {
    let mut net = Net::new(4, 1);
    net.connect();
    net.run_until("established", |net| net.table.stats().active == 1);
    let client = client_ip().address();
    // The client's ARP request for the server, and the handshake: both taught it.
    assert_eq!(net.table.neighbors().peek(client), Some(CLIENT_MAC));
    assert_eq!(net.table.neighbors().len(), 1);
    // A forged SYN claiming the client's address from another MAC.
    net.inject(&segment(OTHER_MAC, client, 7000, TcpControl::Syn, 1, None));
    // A forged segment of the open connection with a bad checksum.
    let port = memlink::FIRST_CLIENT_PORT;
    let mut bad = segment(OTHER_MAC, client, port, TcpControl::None, 1, Some(1));
    bad[40] ^= 0x55;
    net.inject(&bad);
    // A forged SYN from a new host.
    net.inject(&segment(
        OTHER_MAC,
        host(77),
        7001,
        TcpControl::Syn,
        1,
        None,
    ));
    net.server_step(echo);
    let frames = net.take_server_frames();
    let to: Vec<[u8; 6]> = frames.iter().map(|f| sent(f).0).collect();
    assert_eq!(
        to,
        [OTHER_MAC, OTHER_MAC],
        "two SYN-ACKs, each to its SYN's MAC"
    );
    assert_eq!(net.table.neighbors().peek(client), Some(CLIENT_MAC));
    assert_eq!(net.table.neighbors().peek(host(77)), None);
    // The open connection's replies still go to the client.
    net.swarm.socket(0).send_slice(b"hello").unwrap();
    net.swarm.poll(net.now, &mut net.client);
    net.server_step(echo);
    let frames = net.take_server_frames();
    assert!(!frames.is_empty());
    for frame in &frames {
        assert_eq!(sent(frame).0, CLIENT_MAC);
    }
}

/// Two tables (two workers) under one admission limit: the limit holds over both,
/// however the connections are spread.
#[test]
fn tables_sharing_an_admission_accept_exactly_the_limit() {
    let admission = Arc::new(Admission::new(3));
    let mut config = TableConfig::new(SERVER_MAC, server_ip(), PORT);
    config.conn_limit = 3;
    let mut a = Net::shared(4, config, Arc::clone(&admission));
    let mut b = Net::shared(4, config, Arc::clone(&admission));
    for _ in 0..2 {
        a.connect();
    }
    a.run_until("a: 2", |net| net.table.stats().active == 2);
    for _ in 0..2 {
        b.connect();
    }
    b.run_until("b: 1 accepted, 1 refused", |net| {
        net.table.stats().active == 1 && net.table.stats().refused == 1
    });
    assert_eq!(admission.in_use(), 3);
    // A close on one table makes room on the other.
    a.swarm.socket(0).close();
    a.run_until("a: closed", |net| net.table.stats().in_use == 1);
    assert_eq!(admission.in_use(), 2);
    b.connect();
    b.run_until("b: 2", |net| net.table.stats().active == 2);
    assert_eq!(admission.in_use(), 3);
    drop(b);
    assert_eq!(
        admission.in_use(),
        1,
        "a dropped table gives its connections back"
    );
}

/// The second port of a table that has one.
const EXTRA_PORT: u16 = 6379;

/// Answers any input with the port the connection was accepted on (two bytes, big-endian).
fn tell_port(conn: &mut Conn<'_, Echo>) {
    let mut buf = [0u8; 64];
    if conn.io.recv_slice(&mut buf).unwrap_or(0) > 0 {
        let port = conn.io.local_port().to_be_bytes();
        assert_eq!(conn.io.send_slice(&port).unwrap(), 2);
    }
}

#[test]
fn a_second_port_is_served_alike_and_told_apart() {
    let mut net = Net::with(2, |config| config.extra_port = Some(EXTRA_PORT));
    net.connect();
    let extra = IpEndpoint::new(IpAddress::Ipv4(server_ip().address()), EXTRA_PORT);
    net.swarm.connect(extra, 4096, 4096).unwrap();
    net.run_until("both established", |net| net.table.stats().active == 2);
    for c in 0..2 {
        net.swarm.socket(c).send_slice(b"which?").unwrap();
    }
    for _ in 0..100 {
        net.now += Duration::from_micros(50);
        net.server_step(tell_port);
        net.swarm.poll(net.now, &mut net.client);
    }
    for (c, port) in [(0, PORT), (1, EXTRA_PORT)] {
        let mut buf = [0u8; 2];
        assert_eq!(net.swarm.socket(c).recv_slice(&mut buf).unwrap(), 2);
        assert_eq!(u16::from_be_bytes(buf), port, "client {c}");
    }
    // A port the table was not given is not ours: the SYN goes to the control set (which
    // resets it) and arms nothing.
    let before = net.table.stats().frames_control;
    net.inject(&segment_to(
        11212,
        OTHER_MAC,
        host(9),
        5000,
        TcpControl::Syn,
        1,
        None,
    ));
    net.server_step(echo);
    assert_eq!(net.table.stats().frames_control, before + 1);
    assert_eq!(net.table.stats().handshaking, 0);
    let config = TableConfig {
        extra_port: Some(0),
        ..TableConfig::new(SERVER_MAC, server_ip(), PORT)
    };
    let (_, mut server) = memlink::pair(4, 1500);
    assert_eq!(
        ConnTable::<Echo>::new(config, &mut server, Instant::ZERO).unwrap_err(),
        TableError::ZeroPort
    );
}

/// Regression: a SYN to the second port from a source address and port that already had a
/// connection to the first was taken for a duplicate of that connection's SYN, and no
/// listener was armed for it (a client may use one source port towards two destination
/// ports).
#[test]
fn one_source_port_may_connect_to_both_ports() {
    let mut net = Net::with(0, |config| config.extra_port = Some(EXTRA_PORT));
    for port in [PORT, EXTRA_PORT] {
        net.inject(&segment_to(
            port,
            OTHER_MAC,
            host(9),
            5000,
            TcpControl::Syn,
            1000,
            None,
        ));
        net.server_step(echo);
    }
    assert_eq!(net.table.stats().handshaking, 2);
    let frames = net.take_server_frames();
    assert_eq!(frames.len(), 2);
    for frame in &frames {
        let (mac, flags, _) = sent(frame);
        assert_eq!((mac, flags & 0x12), (OTHER_MAC, 0x12), "a SYN-ACK for each");
    }
}
