//! RESP and the heap: a `GET` hit or miss, a `PING` and an `MGET` allocate nothing (replies are
//! written into the connection's reused output buffer straight from the stored items), and a
//! bulk string a client only announces is never allocated, however large: a 2 GiB header gets
//! the protocol error, and one of 1 MB arriving a piece at a time costs what arrived. Checked
//! with a counting global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use protocol::resp::{Version, write_command};
use server::engine::{Engine, EngineConfig, Protocol, Session, Stop};
use store::ShardConfig;

struct Counting;

thread_local! {
    /// Allocations and bytes asked for by this thread: the harness's threads allocate at will.
    static ALLOCATED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn count(bytes: usize) {
    // `try_with`: the thread-local may be gone while a thread exits.
    let _ = ALLOCATED.try_with(|a| {
        let (n, total) = a.get();
        a.set((n + 1, total + bytes as u64));
    });
}

fn allocated() -> (u64, u64) {
    ALLOCATED.with(Cell::get)
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn engine() -> Engine {
    Engine::new(EngineConfig::new(
        ShardConfig {
            memory_limit_bytes: 64 << 20,
            max_item_size: 1 << 20,
        },
        server::control::Control::new(Default::default(), 0),
    ))
}

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    write_command(&mut out, args);
    out
}

#[test]
fn get_mget_and_ping_allocate_nothing() {
    let mut engine = engine();
    let mut session = Session::speaking(Protocol::Resp(Version::Resp2));
    let mut out = Vec::with_capacity(4096);
    let set = command(&[b"SET", b"key:0000000001", &[b'v'; 32]]);
    engine.execute(&mut session, &set, &mut out, 1);
    let mut input = command(&[b"GET", b"key:0000000001"]);
    input.extend_from_slice(&command(&[b"GET", b"key:0000000002"]));
    input.extend_from_slice(b"PING\r\n");
    input.extend_from_slice(&command(&[
        b"MGET",
        b"key:0000000001",
        b"key:0000000002",
        b"key:0000000001",
    ]));
    out.clear();
    let before = allocated();
    for _ in 0..1000 {
        let outcome = engine.execute(&mut session, &input, &mut out, 1);
        assert_eq!(outcome.consumed, input.len());
        out.clear();
    }
    assert_eq!(allocated().0 - before.0, 0, "GET, PING and MGET allocated");
}

#[test]
fn an_announced_bulk_string_is_never_allocated() {
    let mut engine = engine();
    // 2 GiB: refused from its header, its bytes to be skipped as they arrive.
    let mut session = Session::speaking(Protocol::Resp(Version::Resp2));
    let mut out = Vec::with_capacity(4096);
    let before = allocated();
    let outcome = engine.execute(&mut session, b"*1\r\n$2147483648\r\n", &mut out, 1);
    assert!(!outcome.close);
    assert_eq!(
        out,
        b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n"
    );
    assert!(allocated().1 - before.1 < 4096, "{:?}", allocated());
    // Just under the item limit, arriving 1,000 bytes at a time: nothing is allocated for
    // it until it is all there (the caller holds what arrived), and then only the item.
    let mut session = Session::speaking(Protocol::Resp(Version::Resp2));
    let header = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048000\r\n";
    let mut input = Vec::with_capacity(header.len() + 1_048_002);
    input.extend_from_slice(header);
    out.clear();
    let before = allocated();
    while input.len() < header.len() + 1_048_000 {
        let outcome = engine.execute(&mut session, &input, &mut out, 1);
        assert_eq!((outcome.consumed, outcome.stop), (0, Stop::Input));
        input.extend_from_slice(&[b'v'; 1000][..1000.min(header.len() + 1_048_000 - input.len())]);
    }
    assert!(
        allocated().1 - before.1 < 4096,
        "while arriving: {:?}",
        allocated()
    );
    input.extend_from_slice(b"\r\n");
    let outcome = engine.execute(&mut session, &input, &mut out, 1);
    assert_eq!(outcome.consumed, input.len());
    assert_eq!(out, b"+OK\r\n");
}
