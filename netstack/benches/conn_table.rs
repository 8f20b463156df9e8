//! Request/response round trips through the connection table over the in-memory link,
//! with 32, 1,000 and 10,000 established connections, to show that the per-packet cost of
//! the table does not grow with the number of connections.
//!
//! Each iteration is one round trip on the next connection (round robin over all of them):
//! the client swarm sends a 32-byte request; the server table ingests it (and the client's
//! ACK of the previous reply), the echo application answers, egress sends the reply with
//! the ACK piggybacked; the client reads it. `server/N` times only the table's three calls
//! (`poll_ingress`, `serve`, `poll_egress`): two frames in, one frame out. `round_trip/N`
//! times the whole iteration, client side included.
//!
//! `server_batch16/N` sends one request on each of 16 consecutive connections before the
//! table's three calls run once, as a busy worker finds its receive ring: the table's
//! look-ahead then has frames to peek at and prefetches each one's connection state while
//! it processes the frames before it (see "Look-ahead" in `netstack/src/conn/mod.rs`); with
//! one frame per call, as in `server/N`, it never has. Its time is per batch of 16 requests.
//!
//! `naive_one_set/N` is the baseline the table exists to beat: the same round trip against
//! plain smoltcp as its examples use it, one `SocketSet` holding every socket, one
//! `Interface::poll` per step and the application scanning all sockets for data.
//!
//! Run: `cargo bench -p netstack --bench conn_table`

use std::hint::black_box;
use std::time::{Duration, Instant as WallClock};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use netstack::conn::{ConnTable, TableConfig};
use netstack::memlink::{self, ClientSwarm, Echo, MemPort, echo};
use netstack::smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use netstack::smoltcp::socket::tcp;
use netstack::smoltcp::time::{Duration as NetDuration, Instant};
use netstack::smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr};
use netstack::smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address, Ipv4Cidr};

const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x02];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0x4d, 0, 0x01];
const PORT: u16 = 11211;
const REQUEST: [u8; 32] = [b'r'; 32];
/// Requests per server pass in `server_batch16`.
const BATCH: usize = 16;

/// A server table and a client swarm with `conns` established connections.
struct Rig {
    table: ConnTable<Echo>,
    server: MemPort,
    swarm: ClientSwarm,
    client: MemPort,
    now: Instant,
    next: usize,
}

impl Rig {
    fn new(conns: usize) -> Rig {
        let (mut client, mut server) = memlink::pair(4096, 1500);
        let mut now = Instant::from_secs(1);
        let server_ip = Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 2), 24);
        let mut config = TableConfig::new(SERVER_MAC, server_ip, PORT);
        config.conn_limit = conns;
        let mut table = ConnTable::new(config, &mut server, now).expect("table");
        let client_ip = Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 1), 24);
        let mut swarm = ClientSwarm::new(CLIENT_MAC, client_ip, &mut client, now, conns);
        let remote = IpEndpoint::new(IpAddress::Ipv4(server_ip.address()), PORT);
        for _ in 0..conns {
            swarm.connect(remote, 2048, 2048).expect("client port");
        }
        for _ in 0..100_000 {
            if table.stats().active == conns {
                break;
            }
            now += NetDuration::from_micros(10);
            table.poll_ingress(now, &mut server, 256);
            table.serve(echo);
            table.poll_egress(now, &mut server);
            swarm.poll(now, &mut client);
        }
        assert_eq!(table.stats().active, conns, "all connections established");
        Rig {
            table,
            server,
            swarm,
            client,
            now,
            next: 0,
        }
    }

    /// One round trip; returns the time spent in the table's calls.
    fn round_trip(&mut self) -> Duration {
        self.requests(1)
    }

    /// One request on each of the next [`BATCH`] connections, then one pass of the table;
    /// returns the time spent in the table's calls.
    fn batch(&mut self) -> Duration {
        self.requests(BATCH)
    }

    /// One request on each of the next `count` connections, one pass of the table, every
    /// reply read; returns the time spent in the table's calls.
    fn requests(&mut self, count: usize) -> Duration {
        let first = self.next;
        self.now += NetDuration::from_micros(10);
        for _ in 0..count {
            let conn = self.next;
            self.next = (self.next + 1) % self.swarm.len();
            self.swarm
                .socket(conn)
                .send_slice(&REQUEST)
                .expect("send request");
        }
        self.swarm.poll(self.now, &mut self.client);

        let start = WallClock::now();
        self.table
            .poll_ingress(self.now, &mut self.server, (4 * count).max(64));
        self.table.serve(echo);
        self.table.poll_egress(self.now, &mut self.server);
        let spent = start.elapsed();

        self.swarm.poll(self.now, &mut self.client);
        let mut reply = [0u8; 64];
        for k in 0..count {
            let conn = (first + k) % self.swarm.len();
            let n = self
                .swarm
                .socket(conn)
                .recv_slice(&mut reply)
                .expect("recv reply");
            assert_eq!(n, REQUEST.len(), "every reply arrived within the pass");
        }
        black_box(&reply);
        spent
    }
}

/// Plain smoltcp: one socket set with `conns` sockets, each listening for one connection.
struct Naive {
    iface: Interface,
    sockets: SocketSet<'static>,
    handles: Vec<SocketHandle>,
    server: MemPort,
    swarm: ClientSwarm,
    client: MemPort,
    now: Instant,
    next: usize,
}

impl Naive {
    fn new(conns: usize) -> Naive {
        let (mut client, mut server) = memlink::pair(4096, 1500);
        let now = Instant::from_secs(1);
        let server_ip = Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 2), 24);
        let config = Config::new(HardwareAddress::Ethernet(EthernetAddress(SERVER_MAC)));
        let mut iface = Interface::new(config, &mut server, now);
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(IpCidr::Ipv4(server_ip));
        });
        let mut sockets = SocketSet::new(Vec::new());
        let handles = (0..conns)
            .map(|_| {
                let mut socket = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0u8; 16 * 1024]),
                    tcp::SocketBuffer::new(vec![0u8; 16 * 1024]),
                );
                socket.set_nagle_enabled(false);
                socket.set_ack_delay(None);
                socket.listen(PORT).expect("listen");
                sockets.add(socket)
            })
            .collect();
        let client_ip = Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 1), 24);
        let mut swarm = ClientSwarm::new(CLIENT_MAC, client_ip, &mut client, now, conns);
        let remote = IpEndpoint::new(IpAddress::Ipv4(server_ip.address()), PORT);
        for _ in 0..conns {
            swarm.connect(remote, 2048, 2048).expect("client port");
        }
        let mut naive = Naive {
            iface,
            sockets,
            handles,
            server,
            swarm,
            client,
            now,
            next: 0,
        };
        for _ in 0..100_000 {
            let established = naive
                .handles
                .iter()
                .filter(|&&h| {
                    naive.sockets.get::<tcp::Socket>(h).state() == tcp::State::Established
                })
                .count();
            if established == conns {
                break;
            }
            naive.now += NetDuration::from_micros(10);
            naive.server_step();
            naive.swarm.poll(naive.now, &mut naive.client);
        }
        naive
    }

    fn server_step(&mut self) {
        self.iface
            .poll(self.now, &mut self.server, &mut self.sockets);
        let mut chunk = [0u8; 256];
        for &handle in &self.handles {
            let socket = self.sockets.get_mut::<tcp::Socket>(handle);
            if socket.can_recv() {
                let n = socket.recv_slice(&mut chunk).unwrap_or(0);
                let _ = socket.send_slice(&chunk[..n]);
            }
        }
        self.iface
            .poll(self.now, &mut self.server, &mut self.sockets);
    }

    fn round_trip(&mut self) -> Duration {
        let conn = self.next;
        self.next = (self.next + 1) % self.swarm.len();
        self.now += NetDuration::from_micros(10);
        self.swarm
            .socket(conn)
            .send_slice(&REQUEST)
            .expect("send request");
        self.swarm.poll(self.now, &mut self.client);
        let start = WallClock::now();
        self.server_step();
        let spent = start.elapsed();
        self.swarm.poll(self.now, &mut self.client);
        let mut reply = [0u8; 64];
        let n = self
            .swarm
            .socket(conn)
            .recv_slice(&mut reply)
            .expect("recv reply");
        assert_eq!(n, REQUEST.len(), "reply arrived within the iteration");
        spent
    }
}

fn conn_table(c: &mut Criterion) {
    let mut group = c.benchmark_group("conn_table");
    group.throughput(Throughput::Elements(1));
    group.sample_size(30);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for conns in [32usize, 1_000, 10_000] {
        let mut rig = Rig::new(conns);
        group.bench_with_input(BenchmarkId::new("server", conns), &conns, |b, _| {
            b.iter_custom(|iters| (0..iters).map(|_| rig.round_trip()).sum())
        });
        group.bench_with_input(BenchmarkId::new("round_trip", conns), &conns, |b, _| {
            b.iter(|| rig.round_trip())
        });
        group.throughput(Throughput::Elements(BATCH as u64));
        group.bench_with_input(BenchmarkId::new("server_batch16", conns), &conns, |b, _| {
            b.iter_custom(|iters| (0..iters).map(|_| rig.batch()).sum())
        });
        group.throughput(Throughput::Elements(1));
        let stats = rig.table.stats();
        assert_eq!(stats.active, conns);
        assert_eq!(stats.refused, 0);
        eprintln!(
            "conns {conns}: buckets {}, frames in {} out {}, sockets {}",
            rig.table.bucket_count(),
            stats.frames_in,
            stats.frames_out,
            stats.sockets
        );
    }
    group.finish();
}

fn naive(c: &mut Criterion) {
    let mut group = c.benchmark_group("naive_one_set");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for conns in [32usize, 1_000] {
        let mut naive = Naive::new(conns);
        group.bench_with_input(BenchmarkId::new("server", conns), &conns, |b, _| {
            b.iter_custom(|iters| (0..iters).map(|_| naive.round_trip()).sum())
        });
    }
    group.finish();
}

criterion_group!(benches, conn_table, naive);
criterion_main!(benches);
