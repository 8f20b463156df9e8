//! A GET hit allocates nothing: the reply is written into the connection's reused output
//! buffer straight from the stored item. Checked with a counting global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use protocol::binary::{Opcode, RequestRepr, StoreExtras};
use server::engine::{Engine, EngineConfig, Session};
use store::ShardConfig;

struct Counting;

thread_local! {
    /// Allocations made by this thread: the test harness's own threads allocate at will.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the thread-local may be gone while a thread exits.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn frame(opcode: Opcode, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    RequestRepr {
        opcode,
        quiet: false,
        opaque: 0,
        cas: 0,
        vbucket: 0,
        extras,
        key,
        value,
    }
    .emit_into(&mut out);
    out
}

#[test]
fn get_hit_and_miss_allocate_nothing() {
    let mut engine = Engine::new(EngineConfig::new(
        ShardConfig {
            memory_limit_bytes: 64 << 20,
            max_item_size: 1 << 20,
        },
        server::control::Control::new(Default::default(), 0),
    ));
    let extras = StoreExtras {
        flags: 0,
        expiration: 0,
    }
    .emit();
    let set = frame(Opcode::Set, &extras, b"key:0000000001", &[b'v'; 32]);
    let get = frame(Opcode::Get, &[], b"key:0000000001", &[]);
    let miss = frame(Opcode::Get, &[], b"key:0000000002", &[]);
    let mut session = Session::default();
    let mut out = Vec::with_capacity(4096);
    engine.execute(&mut session, &set, &mut out, 1);
    out.clear();

    let before = allocations();
    for _ in 0..1000 {
        let hit = engine.execute(&mut session, &get, &mut out, 1);
        assert_eq!(hit.consumed, get.len());
        let missed = engine.execute(&mut session, &miss, &mut out, 1);
        assert_eq!(missed.consumed, miss.len());
        out.clear();
    }
    let after = allocations();
    assert_eq!(after - before, 0, "GET hit/miss allocated");
}
