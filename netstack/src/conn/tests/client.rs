//! Client mode: a client table and a server table over the in-memory link, the client's
//! connections opened with `connect`, its requests echoed by the server.

use super::*;

const CLIENT_PORT_FIRST: u16 = 40_000;

/// A client connection's script: requests of `size` bytes each, sent one at a time, each
/// once the echo of the one before is in; the connection closes once every byte is back.
#[derive(Debug, Default)]
struct Requests {
    /// Every request byte, in order (a pattern unique to the connection).
    script: Vec<u8>,
    /// Bytes of each request.
    size: usize,
    /// Bytes of `script` written so far.
    sent: usize,
    /// Bytes echoed so far.
    got: Vec<u8>,
    /// The receive stamp the connection showed when its latest echo was read.
    read_at: Option<Instant>,
}

impl Requests {
    fn new(conn: usize, requests: usize, size: usize) -> Requests {
        let script = (0..requests * size)
            .map(|i| (conn.wrapping_mul(31) + i * 7 + i / 251) as u8)
            .collect();
        Requests {
            script,
            size,
            sent: 0,
            got: Vec::new(),
            read_at: None,
        }
    }
}

/// How a finished connection ended, as the client application saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Finished {
    id: ConnId,
    /// Every byte came back in order.
    intact: bool,
}

/// The client application: reads what came back, sends the next request when the last
/// one is echoed, closes when everything is back (recording it in `finished`).
fn run_requests(conn: &mut Conn<'_, Requests>, finished: &mut Vec<Finished>) {
    let mut buf = [0u8; 512];
    while let Ok(n) = conn.io.recv_slice(&mut buf) {
        if n == 0 {
            break;
        }
        conn.state.got.extend_from_slice(&buf[..n]);
        conn.state.read_at = conn.stamps().received;
    }
    let state = &mut *conn.state;
    if state.got.len() == state.sent && state.sent < state.script.len() {
        let end = state.sent + state.size;
        let put = conn.io.send_slice(&state.script[state.sent..end]).unwrap();
        assert_eq!(put, state.size, "a request fits the send buffer");
        state.sent = end;
    }
    if conn.state.got.len() == conn.state.script.len() {
        finished.push(Finished {
            id: conn.id(),
            intact: conn.state.got == conn.state.script,
        });
        conn.io.close();
    }
}

/// A client table and a server table on the two ends of an in-memory link.
struct Pair {
    client: ConnTable<Requests>,
    client_link: MemPort,
    server: ConnTable<Echo>,
    server_link: MemPort,
    now: Instant,
    finished: Vec<Finished>,
    events: Vec<(ConnId, ConnEvent)>,
}

/// Largest step of the clock while frames are on the link.
const STEP: Duration = Duration::from_micros(20);

/// The server's and the client's IPv6 addresses in [`Pair::dual`].
fn server_ip6() -> Ipv6Cidr {
    Ipv6Cidr::new("fd77::2".parse().unwrap(), 64)
}

fn client_ip6() -> Ipv6Cidr {
    Ipv6Cidr::new("fd77::1".parse().unwrap(), 64)
}

impl Pair {
    fn new(conn_limit: usize) -> Pair {
        Pair::with(conn_limit, |config| config)
    }

    /// Both tables with an IPv6 address beside the IPv4 one.
    fn dual(conn_limit: usize) -> Pair {
        Pair::with(conn_limit, |config| {
            let ip6 = if config.accept {
                server_ip6()
            } else {
                client_ip6()
            };
            config.with_ip(ip6)
        })
    }

    fn with(conn_limit: usize, configure: impl Fn(TableConfig) -> TableConfig) -> Pair {
        let (mut client_link, mut server_link) = memlink::pair(4096, 1500);
        let now = Instant::from_secs(1);
        let mut server_config = configure(TableConfig::new(SERVER_MAC, server_ip(), PORT));
        server_config.conn_limit = conn_limit;
        server_config.rx_buffer_bytes = 4096;
        server_config.tx_buffer_bytes = 4096;
        let server = ConnTable::new(server_config, &mut server_link, now).unwrap();
        let mut client_config = configure(TableConfig::client(CLIENT_MAC, client_ip()));
        client_config.conn_limit = conn_limit;
        client_config.rx_buffer_bytes = 4096;
        client_config.tx_buffer_bytes = 4096;
        let client = ConnTable::new(client_config, &mut client_link, now).unwrap();
        Pair {
            client,
            client_link,
            server,
            server_link,
            now,
            finished: Vec::new(),
            events: Vec::new(),
        }
    }

    fn remote(&self, port: u16) -> IpEndpoint {
        IpEndpoint::new(server_ip().address().into(), port)
    }

    /// One round of both tables; frames waiting for an end first pass `lost` (true: the
    /// frame is lost on the link). Then the clock moves on: a step while frames are on
    /// the link, else to the earlier table's next deadline. False once nothing is left to
    /// happen.
    fn step(&mut self, lost: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        let now = self.now;
        self.server_link.drop_pending(&mut *lost);
        self.server.poll_ingress(now, &mut self.server_link, 256);
        self.server.serve(echo);
        self.server.poll_egress(now, &mut self.server_link);
        self.client_link.drop_pending(&mut *lost);
        self.client.poll_ingress(now, &mut self.client_link, 256);
        let finished = &mut self.finished;
        self.client.serve(|conn| run_requests(conn, finished));
        self.client.poll_egress(now, &mut self.client_link);
        self.events.extend(self.client.events());
        if self.client_link.pending() + self.server_link.pending() > 0 {
            self.now += STEP;
            return true;
        }
        let next = match (self.client.poll_delay(now), self.server.poll_delay(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match next {
            Some(delay) => {
                self.now += delay.max(STEP);
                true
            }
            None => false,
        }
    }

    /// Steps until `done` holds (or nothing is left to happen, or `rounds` run out);
    /// returns whether it holds.
    fn run_until(
        &mut self,
        rounds: usize,
        lost: &mut dyn FnMut(&[u8]) -> bool,
        mut done: impl FnMut(&Pair) -> bool,
    ) -> bool {
        for _ in 0..rounds {
            if done(self) {
                return true;
            }
            if !self.step(lost) {
                break;
            }
        }
        done(self)
    }

    fn events_of(&self, id: ConnId) -> Vec<ConnEvent> {
        self.events
            .iter()
            .filter(|(of, _)| *of == id)
            .map(|&(_, event)| event)
            .collect()
    }
}

fn no_loss() -> impl FnMut(&[u8]) -> bool {
    |_: &[u8]| false
}

/// Loses each TCP frame with probability `per_mille`/1000 (xorshift, seeded: the same
/// frames every run), and nothing else.
fn tcp_loss(per_mille: u64, seed: u64) -> impl FnMut(&[u8]) -> bool {
    let mut x = seed | 1;
    move |frame: &[u8]| {
        if TcpFrame::new_checked(frame).is_err() {
            return false;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % 1000 < per_mille
    }
}

/// A data segment from the client (TCP with payload, from one of the client's ports).
fn client_data(frame: &[u8]) -> bool {
    TcpFrame::new_checked(frame).is_ok_and(|tcp| {
        tcp.dst_port() == PORT && SegmentRepr::parse(&tcp).is_ok_and(|seg| seg.payload_len > 0)
    })
}

#[test]
fn a_client_table_exchanges_requests_with_a_server_table() {
    let mut pair = Pair::new(16);
    let conns = 10;
    let ids: Vec<ConnId> = (0..conns)
        .map(|i| {
            let remote = pair.remote(PORT);
            let port = CLIENT_PORT_FIRST + i as u16;
            pair.client
                .connect(remote, Some(port), Requests::new(i, 5, 100))
                .unwrap()
        })
        .collect();
    assert_eq!(pair.client.client_conns(), conns);
    let done = pair.run_until(200_000, &mut no_loss(), |p| {
        p.finished.len() == conns && p.client.client_conns() == 0
    });
    assert!(done, "finished {:?}", pair.finished);
    assert!(
        pair.finished.iter().all(|f| f.intact),
        "{:?}",
        pair.finished
    );
    for &id in &ids {
        assert_eq!(
            pair.events_of(id),
            [ConnEvent::Established, ConnEvent::Closed]
        );
        assert_eq!(pair.client.stamps(id), None, "released: no longer its slot");
    }
    let stats = pair.client.stats();
    assert_eq!(
        (stats.opened, stats.connected, stats.connect_failed),
        (10, 10, 0)
    );
    assert_eq!((stats.closed, stats.active, stats.in_use), (10, 0, 0));
    assert_eq!(pair.server.stats().accepted, 10);
    assert_eq!(stats.recovery.probes, 0, "nothing was lost: {stats:?}");
}

#[test]
fn the_stamps_are_the_poll_clocks_of_the_request_and_reply_frames() {
    let mut pair = Pair::new(4);
    let id = pair
        .client
        .connect(pair.remote(PORT), None, Requests::new(0, 3, 50))
        .unwrap();
    assert_eq!(
        pair.client.stamps(id),
        Some(Stamps::default()),
        "nothing crossed yet"
    );
    // Step by hand, reading the stamps after every round.
    let mut sent_at = None;
    for _ in 0..200_000 {
        let before = pair.client.stamps(id).unwrap();
        let now = pair.now;
        assert!(pair.step(&mut no_loss()));
        let after = pair.client.stamps(id).unwrap();
        if after.received != before.received {
            assert_eq!(after.received, Some(now), "the ingress poll's clock");
            let sent = sent_at.expect("a reply follows its request");
            assert!(sent < now, "{sent} then {now}");
            // The reply was read, the next request sent, in this one round.
            assert_eq!(after.sent, Some(now), "the next request's egress poll");
            let read_at = pair.client.with_conn(id, |c| c.state.read_at);
            assert_eq!(read_at, Some(Some(now)), "the application saw the stamp");
            return;
        }
        if after.sent != before.sent {
            assert_eq!(after.sent, Some(now), "the egress poll's clock");
            sent_at = Some(now);
        }
    }
    panic!("no reply: {:?}", pair.client.stats());
}

#[test]
fn a_thousand_connections_deliver_every_byte_in_order_with_loss_both_ways() {
    let conns = 1000;
    let mut pair = Pair::new(1024);
    for i in 0..conns {
        let remote = pair.remote(PORT);
        pair.client
            .connect(remote, None, Requests::new(i, 4, 200))
            .unwrap();
    }
    let mut lost = tcp_loss(20, 0x9e37_79b9);
    let done = pair.run_until(2_000_000, &mut lost, |p| {
        p.finished.len() == conns && p.client.client_conns() == 0
    });
    let client = *pair.client.stats();
    let server = *pair.server.stats();
    assert!(
        done,
        "{} of {conns} finished; client {client:?}; server {server:?}",
        pair.finished.len()
    );
    assert!(pair.finished.iter().all(|f| f.intact));
    assert_eq!((client.opened, client.connected), (1000, 1000));
    assert_eq!(server.accepted, 1000);
    // With 2 % of the TCP frames lost each way, both ends repaired losses themselves, the
    // client's lost SYNs and requests at round-trip scale (the floor is 1 ms; smoltcp
    // alone waits a second).
    let repaired = client.recovery;
    assert!(repaired.probes_recovered > 0, "{repaired:?}");
    let wait = Duration::from_micros(repaired.probes_recovered_us / repaired.probes_recovered);
    assert!(
        wait < Duration::from_millis(10),
        "{wait} on average: {repaired:?}"
    );
    assert!(server.recovery.recovered > 0, "{:?}", server.recovery);
    let established = pair
        .events
        .iter()
        .filter(|(_, e)| *e == ConnEvent::Established)
        .count();
    let closed = pair
        .events
        .iter()
        .filter(|(_, e)| *e == ConnEvent::Closed)
        .count();
    assert_eq!((established, closed, pair.events.len()), (1000, 1000, 2000));
}

/// Warms one connection up (its first requests echoed, so it has round-trip samples),
/// then loses its next request once: the client's own probe repairs it within a few
/// milliseconds, where smoltcp alone waits a second.
#[test]
fn a_lost_request_is_repaired_at_round_trip_scale() {
    let mut pair = Pair::new(4);
    let id = pair
        .client
        .connect(pair.remote(PORT), None, Requests::new(0, 8, 64))
        .unwrap();
    for _ in 0..200_000 {
        let echoed = pair.client.with_conn(id, |c| c.state.got.len());
        if echoed.is_some_and(|n| n >= 2 * 64) {
            break;
        }
        assert!(pair.step(&mut no_loss()));
    }
    assert_eq!(pair.client.stats().recovery.probes, 0);
    let mut dropped = 0;
    let mut lose_one = |frame: &[u8]| {
        let lose = dropped == 0 && client_data(frame);
        dropped += usize::from(lose);
        lose
    };
    let done = pair.run_until(200_000, &mut lose_one, |p| p.finished.len() == 1);
    assert!(done, "{:?}", pair.client.stats());
    assert_eq!(dropped, 1);
    assert_eq!(pair.finished, [Finished { id, intact: true }]);
    let recovery = pair.client.stats().recovery;
    assert_eq!(
        (recovery.probes_recovered, recovery.smoltcp_retransmits),
        (1, 0),
        "{recovery:?}"
    );
    let waited = Duration::from_micros(recovery.probes_recovered_us);
    assert!(
        waited < Duration::from_millis(10),
        "the lost request waited {waited} for its probe"
    );
}

#[test]
fn a_port_nothing_listens_on_is_refused_and_its_local_port_freed() {
    let mut pair = Pair::new(4);
    let id = pair
        .client
        .connect(
            pair.remote(PORT + 1),
            Some(CLIENT_PORT_FIRST),
            Requests::default(),
        )
        .unwrap();
    let done = pair.run_until(200_000, &mut no_loss(), |p| p.client.client_conns() == 0);
    assert!(done, "{:?}", pair.client.stats());
    assert_eq!(pair.events_of(id), [ConnEvent::Refused]);
    let stats = pair.client.stats();
    assert_eq!(
        (stats.opened, stats.connected, stats.connect_failed),
        (1, 0, 1)
    );
    assert_eq!((stats.in_use, stats.active), (0, 0));
    // The port is free again, and the connection to the right port works from it.
    let again = pair
        .client
        .connect(
            pair.remote(PORT),
            Some(CLIENT_PORT_FIRST),
            Requests::new(1, 1, 10),
        )
        .unwrap();
    let done = pair.run_until(200_000, &mut no_loss(), |p| p.finished.len() == 1);
    assert!(done, "{:?}", pair.client.stats());
    assert_eq!(pair.events_of(again)[0], ConnEvent::Established);
}

#[test]
fn local_ports_in_use_limits_and_addresses_are_refused_with_typed_errors() {
    let (mut link, _) = memlink::pair(4, 1500);
    let mut config = TableConfig::client(CLIENT_MAC, client_ip());
    config.conn_limit = 3;
    config.ephemeral_ports = PortRange {
        first: 50_000,
        last: 50_001,
    };
    let mut table = ConnTable::<Requests>::new(config, &mut link, Instant::ZERO).unwrap();
    let server = IpEndpoint::new(server_ip().address().into(), PORT);
    let connect = |table: &mut ConnTable<Requests>, port| {
        table.connect(server, port, Requests::default()).map(|_| ())
    };
    assert_eq!(
        connect(&mut table, Some(0)),
        Err(ConnectError::PortInUse { port: 0 })
    );
    connect(&mut table, Some(50_001)).unwrap();
    assert_eq!(
        connect(&mut table, Some(50_001)),
        Err(ConnectError::PortInUse { port: 50_001 }),
        "one connection per local port, whatever the peer"
    );
    connect(&mut table, None).unwrap();
    assert_eq!(connect(&mut table, None), Err(ConnectError::PortsExhausted));
    connect(&mut table, Some(7)).unwrap();
    assert_eq!(connect(&mut table, Some(8)), Err(ConnectError::Limit));
    let v6 = IpEndpoint::new(Ipv6Address::new(0xfd77, 0, 0, 0, 0, 0, 0, 2).into(), PORT);
    assert_eq!(
        table.connect(v6, None, Requests::default()).map(|_| ()),
        Err(ConnectError::NoAddress)
    );
    let ours = IpEndpoint::new(client_ip().address().into(), PORT);
    assert_eq!(
        table.connect(ours, None, Requests::default()).map(|_| ()),
        Err(ConnectError::Unaddressable)
    );
    assert_eq!(table.client_conns(), 3);
    assert_eq!(table.stats().in_use, 3);
    // A server table refuses its own ports as local ports.
    let (mut link, _) = memlink::pair(4, 1500);
    let config = TableConfig::new(SERVER_MAC, server_ip(), PORT);
    let mut table = ConnTable::<Requests>::new(config, &mut link, Instant::ZERO).unwrap();
    let client = IpEndpoint::new(client_ip().address().into(), 9999);
    assert_eq!(
        table
            .connect(client, Some(PORT), Requests::default())
            .map(|_| ()),
        Err(ConnectError::PortInUse { port: PORT })
    );
}

#[test]
fn client_configs_are_checked() {
    let client = TableConfig::client(CLIENT_MAC, client_ip());
    assert_eq!(client.check(), Ok(()));
    assert_eq!(
        TableConfig { port: 1, ..client }.check(),
        Err(TableError::PortWithoutAccept)
    );
    let empty = PortRange {
        first: 2000,
        last: 1999,
    };
    assert_eq!(
        TableConfig {
            ephemeral_ports: empty,
            ..client
        }
        .check(),
        Err(TableError::EphemeralPorts {
            first: 2000,
            last: 1999
        })
    );
    let from_zero = PortRange { first: 0, last: 9 };
    assert_eq!(
        TableConfig {
            ephemeral_ports: from_zero,
            ..client
        }
        .check(),
        Err(TableError::EphemeralPorts { first: 0, last: 9 })
    );
}

/// The server's application resets every connection once a request is in.
fn abort_at_once(conn: &mut Conn<'_, Echo>) {
    if conn.io.recv_queue() > 0 {
        conn.io.abort();
    }
}

#[test]
fn a_connection_the_server_resets_reports_reset() {
    let mut pair = Pair::new(4);
    let id = pair
        .client
        .connect(pair.remote(PORT), None, Requests::new(0, 2, 10))
        .unwrap();
    for _ in 0..200_000 {
        if pair.client.client_conns() == 0 {
            break;
        }
        let now = pair.now;
        pair.server.poll_ingress(now, &mut pair.server_link, 64);
        pair.server.serve(abort_at_once);
        pair.server.poll_egress(now, &mut pair.server_link);
        pair.client.poll_ingress(now, &mut pair.client_link, 64);
        let finished = &mut pair.finished;
        pair.client.serve(|conn| run_requests(conn, finished));
        pair.client.poll_egress(now, &mut pair.client_link);
        pair.events.extend(pair.client.events());
        pair.now += STEP;
    }
    assert_eq!(
        pair.events_of(id),
        [ConnEvent::Established, ConnEvent::Reset]
    );
    assert!(pair.finished.is_empty());
    let stats = pair.client.stats();
    assert_eq!((stats.closed, stats.active, stats.in_use), (1, 0, 0));
}

#[test]
fn a_syn_nobody_answers_times_out_after_the_handshake_timeout() {
    let mut pair = Pair::new(4);
    let id = pair
        .client
        .connect(pair.remote(PORT), None, Requests::default())
        .unwrap();
    let start = pair.now;
    let mut all = |_: &[u8]| true;
    let done = pair.run_until(200_000, &mut all, |p| p.client.client_conns() == 0);
    assert!(done, "{:?}", pair.client.stats());
    assert_eq!(pair.events_of(id), [ConnEvent::TimedOut]);
    let took = pair.now - start;
    assert!(
        took >= HANDSHAKE_TIMEOUT && took < HANDSHAKE_TIMEOUT + Duration::from_secs(1),
        "{took}"
    );
    assert_eq!(pair.client.stats().connect_failed, 1);
}

/// With the server's MAC known, a lost SYN is probed after the floor (no handshake round
/// trip is known yet), not after smoltcp's one second.
#[test]
fn a_lost_syn_is_probed_after_the_floor() {
    let mut pair = Pair::new(4);
    pair.client
        .neighbors
        .learn(IpAddress::from(server_ip().address()), SERVER_MAC);
    let id = pair
        .client
        .connect(pair.remote(PORT), None, Requests::new(0, 1, 10))
        .unwrap();
    let start = pair.now;
    let mut dropped = 0;
    let mut lose_syn = |frame: &[u8]| {
        let syn =
            TcpFrame::new_checked(frame).is_ok_and(|tcp| tcp.is_syn() && tcp.dst_port() == PORT);
        let lose = dropped == 0 && syn;
        dropped += usize::from(lose);
        lose
    };
    let done = pair.run_until(200_000, &mut lose_syn, |p| !p.events_of(id).is_empty());
    assert!(done && dropped == 1, "{:?}", pair.client.stats());
    assert_eq!(pair.events_of(id), [ConnEvent::Established]);
    let took = pair.now - start;
    assert!(took < Duration::from_millis(5), "established after {took}");
    assert_eq!(pair.client.stats().recovery.probes, 1);
}

/// The client table does not know the server's MAC: its SYN goes out as an ARP request,
/// and the SYN follows the server's answer at once, not a second later.
#[test]
fn the_first_syn_to_an_unresolved_server_follows_its_arp_reply() {
    let mut pair = Pair::new(4);
    let ids: Vec<ConnId> = (0..3)
        .map(|i| {
            let remote = pair.remote(PORT);
            pair.client
                .connect(remote, None, Requests::new(i, 1, 10))
                .unwrap()
        })
        .collect();
    let start = pair.now;
    let done = pair.run_until(200_000, &mut no_loss(), |p| {
        ids.iter().all(|&id| !p.events_of(id).is_empty())
    });
    assert!(done, "{:?}", pair.client.stats());
    for &id in &ids {
        assert_eq!(pair.events_of(id), [ConnEvent::Established]);
    }
    let took = pair.now - start;
    assert!(took < Duration::from_millis(5), "established after {took}");
    let stats = pair.client.stats();
    assert!(stats.unresolved >= 1, "the MAC was unknown: {stats:?}");
    assert!(pair.client.unresolved.is_empty());
}

/// Over IPv6 alike: the SYN goes out as a neighbour solicitation, follows the server's
/// advertisement at once, and the requests come back intact.
#[test]
fn over_ipv6_the_first_syn_follows_the_neighbour_advertisement() {
    let mut pair = Pair::dual(4);
    let remote = IpEndpoint::new(server_ip6().address().into(), PORT);
    let id = pair
        .client
        .connect(remote, None, Requests::new(0, 3, 100))
        .unwrap();
    let start = pair.now;
    let done = pair.run_until(200_000, &mut no_loss(), |p| !p.events_of(id).is_empty());
    assert!(done, "{:?}", pair.client.stats());
    assert_eq!(pair.events_of(id), [ConnEvent::Established]);
    let took = pair.now - start;
    assert!(took < Duration::from_millis(5), "established after {took}");
    let done = pair.run_until(200_000, &mut no_loss(), |p| p.finished.len() == 1);
    assert!(done, "{:?}", pair.client.stats());
    assert_eq!(pair.finished, [Finished { id, intact: true }]);
    assert_eq!(
        pair.events_of(id),
        [ConnEvent::Established, ConnEvent::Closed]
    );
}

/// The EtherTypes of the frames waiting at the server's end of the link.
fn ethertypes_to_server(pair: &mut Pair) -> Vec<u16> {
    let mut seen = Vec::new();
    pair.server_link.drop_pending(|frame| {
        seen.push(u16::from_be_bytes([frame[12], frame[13]]));
        false
    });
    seen
}

// A client whose tables share one address on several queues hands the server's MAC from
// the table that resolved it to the others: a table taught it sends its first SYN at once,
// where one that was not asks with ARP first.
#[test]
fn a_taught_neighbour_lets_the_first_syn_go_out_without_arp() {
    let mut pair = Pair::new(4);
    pair.client
        .connect(pair.remote(PORT), None, Requests::new(0, 1, 10))
        .unwrap();
    pair.client.poll_egress(pair.now, &mut pair.client_link);
    assert_eq!(ethertypes_to_server(&mut pair), [0x0806], "an ARP request");

    let mut pair = Pair::new(4);
    let server = IpAddress::from(server_ip().address());
    pair.client.learn_neighbor(server, SERVER_MAC);
    assert_eq!(pair.client.neighbors().peek(server), Some(SERVER_MAC));
    pair.client
        .connect(pair.remote(PORT), None, Requests::new(0, 1, 10))
        .unwrap();
    pair.client.poll_egress(pair.now, &mut pair.client_link);
    assert_eq!(ethertypes_to_server(&mut pair), [0x0800], "the SYN itself");
    let done = pair.run_until(20_000, &mut no_loss(), |p| p.finished.len() == 1);
    assert!(done && pair.finished[0].intact, "{:?}", pair.finished);

    // Our own address and one off the link are not taught.
    pair.client
        .learn_neighbor(IpAddress::from(client_ip().address()), [2, 0, 0, 0, 0, 9]);
    let far = IpAddress::v4(192, 0, 2, 1);
    pair.client.learn_neighbor(far, [2, 0, 0, 0, 0, 9]);
    assert_eq!(pair.client.neighbors().peek(client_ip().address()), None);
    assert_eq!(pair.client.neighbors().peek(far), None);
}
