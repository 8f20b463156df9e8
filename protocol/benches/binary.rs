//! Binary protocol parse and emit, on frames sitting in a realistic 16 KiB receive buffer.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use protocol::binary::{FlagsExtras, Opcode, RequestRepr, ResponseRepr, Status, StoreExtras};

/// Size of the receive/send buffer the frames sit in.
const BUFFER_BYTES: usize = 16 * 1024;
/// Offset of the frame inside the buffer, as if earlier frames had been consumed.
const FRAME_AT: usize = 4000;
/// The item limit a server would pass as `max_body` (1 MiB, memcached's default `-I`).
const MAX_BODY: u32 = 1 << 20;

/// A buffer holding one request frame at `FRAME_AT`, followed by unrelated bytes.
fn request_buffer(repr: &RequestRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0x5a; BUFFER_BYTES];
    repr.emit(&mut buf[FRAME_AT..]);
    buf
}

fn parse(c: &mut Criterion) {
    let key = [b'k'; 16];
    let value = [b'v'; 32];
    let store = StoreExtras {
        flags: 0xdead_beef,
        expiration: 3600,
    }
    .emit();

    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Elements(1));

    let get = RequestRepr {
        opcode: Opcode::Get,
        quiet: false,
        opaque: 7,
        cas: 0,
        vbucket: 0,
        extras: &[],
        key: &key,
        value: &[],
    };
    let buf = request_buffer(&get);
    group.bench_function("get/key16", |b| {
        b.iter(|| RequestRepr::parse(black_box(&buf[FRAME_AT..]), black_box(MAX_BODY)))
    });

    let set = RequestRepr {
        opcode: Opcode::Set,
        extras: &store,
        value: &value,
        ..get
    };
    let buf = request_buffer(&set);
    group.bench_function("set/key16/value32", |b| {
        b.iter(|| RequestRepr::parse(black_box(&buf[FRAME_AT..]), black_box(MAX_BODY)))
    });
    group.finish();
}

fn emit(c: &mut Criterion) {
    let value = [b'v'; 32];
    let flags = FlagsExtras { flags: 0xdead_beef }.emit();
    let mut buf = vec![0u8; BUFFER_BYTES];

    let mut group = c.benchmark_group("emit");
    group.throughput(Throughput::Elements(1));
    let hit = ResponseRepr {
        opcode: Opcode::Get,
        quiet: false,
        status: Status::NoError,
        opaque: 7,
        cas: 42,
        extras: &flags,
        key: &[],
        value: &value,
    };
    group.bench_function("response/get_hit/value32", |b| {
        b.iter(|| {
            let repr = black_box(&hit);
            repr.emit(&mut buf[FRAME_AT..]);
            black_box(&buf[FRAME_AT..FRAME_AT + repr.buffer_len()]);
        })
    });
    group.finish();
}

criterion_group!(benches, parse, emit);
criterion_main!(benches);
