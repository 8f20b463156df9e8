//! The steady-state packet path allocates nothing: request/response round trips through
//! the connection table, counted with a global allocator that tallies this thread's
//! allocations while the table runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use netstack::conn::{ConnTable, TableConfig};
use netstack::memlink::{self, ClientSwarm, Echo, echo};
use netstack::smoltcp::time::{Duration, Instant};
use netstack::smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address, Ipv4Cidr};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // try_with: thread-locals may be gone while a thread shuts down.
    let counting = COUNTING.try_with(Cell::get).unwrap_or(false);
    if counting {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: every call forwards to the system allocator unchanged; the counter only reads
// and writes thread-locals of plain integers.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns how many allocations it made on this thread.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn round_trips_allocate_nothing() {
    let conns = 300;
    let (mut client, mut server) = memlink::pair(1024, 1500);
    let mut now = Instant::from_secs(1);
    let server_ip = Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 2), 24);
    let mut config = TableConfig::new([0x02, 0, 0, 0, 0, 2], server_ip, 11211);
    config.conn_limit = conns;
    let mut table = ConnTable::<Echo>::new(config, &mut server, now).unwrap();
    let client_ip = Ipv4Cidr::new(Ipv4Address::new(10, 77, 0, 1), 24);
    let mut swarm = ClientSwarm::new([0x02, 0, 0, 0, 0, 1], client_ip, &mut client, now, conns);
    let remote = IpEndpoint::new(IpAddress::Ipv4(server_ip.address()), 11211);
    for _ in 0..conns {
        swarm.connect(remote, 2048, 2048).unwrap();
    }
    let mut step = |now: Instant, swarm: &mut ClientSwarm| {
        let table_allocations = allocations_in(|| {
            table.poll_ingress(now, &mut server, 64);
            table.serve(echo);
            table.poll_egress(now, &mut server);
        });
        swarm.poll(now, &mut client);
        table_allocations
    };
    for _ in 0..10_000 {
        now += Duration::from_micros(10);
        step(now, &mut swarm);
    }
    let mut total = 0;
    let mut replies = 0;
    for round in 0..3 {
        for c in 0..conns {
            swarm.socket(c).send_slice(&[round; 40]).unwrap();
        }
        for _ in 0..200 {
            now += Duration::from_micros(10);
            total += step(now, &mut swarm);
        }
        for c in 0..conns {
            let mut reply = [0u8; 64];
            let n = swarm.socket(c).recv_slice(&mut reply).unwrap();
            assert_eq!(&reply[..n], &[round; 40][..]);
            replies += 1;
        }
    }
    assert_eq!(replies, 3 * conns);
    assert_eq!(table.stats().active, conns);
    assert_eq!(total, 0, "the table allocated on the packet path");
}
