//! Engine benchmarks: one binary GET hit and one SET through `Engine::execute`, with the
//! request in a realistic receive buffer and the reply into a reused output buffer; and the
//! GET hit again with the latency instrument's clock read replaced by a constant, so the
//! difference is what reading the clock costs per engine call (the rest of the instrument,
//! counting and recording, is in both); and that recording alone: one time into the latency
//! histograms, as an engine call records its requests.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use protocol::binary::{Opcode, RequestRepr, StoreExtras};
use server::engine::{Engine, EngineConfig, Session};
use std::hint::black_box;
use store::ShardConfig;

fn engine() -> Engine {
    engine_with(server::control::Control::new(Default::default(), 0))
}

/// The engine with the latency instrument reading a clock that never moves.
fn engine_without_clock() -> Engine {
    engine_with(server::control::Control::with_clock(
        Default::default(),
        || 0,
    ))
}

fn engine_with(control: std::sync::Arc<server::control::Control>) -> Engine {
    Engine::new(EngineConfig::new(
        ShardConfig {
            memory_limit_bytes: 64 << 20,
            max_item_size: 1 << 20,
        },
        control,
    ))
}

/// The frame at the start of an 8 KiB buffer, as it would sit in a socket's receive buffer.
fn in_buffer(opcode: Opcode, extras: &[u8], key: &[u8], value: &[u8]) -> (Vec<u8>, usize) {
    let mut buf = Vec::with_capacity(8192);
    RequestRepr {
        opcode,
        quiet: false,
        opaque: 0xfeed,
        cas: 0,
        vbucket: 0,
        extras,
        key,
        value,
    }
    .emit_into(&mut buf);
    let len = buf.len();
    buf.resize(8192, 0);
    (buf, len)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    let extras = StoreExtras {
        flags: 0,
        expiration: 0,
    }
    .emit();
    let keys: Vec<String> = (0..10_000).map(|i| format!("key:{i:012}")).collect();
    let value = [b'v'; 32];

    let gets: Vec<_> = keys
        .iter()
        .map(|k| in_buffer(Opcode::Get, &[], k.as_bytes(), &[]))
        .collect();
    let mut i = 0;
    let mut session = Session::default();
    let mut out = Vec::with_capacity(64 * 1024);
    for (name, mut e) in [
        ("get_hit_no_clock", engine_without_clock()),
        ("get_hit", engine()),
    ] {
        for key in &keys {
            let (buf, len) = in_buffer(Opcode::Set, &extras, key.as_bytes(), &value);
            e.execute(&mut session, &buf[..len], &mut out, 1);
            out.clear();
        }
        group.bench_function(BenchmarkId::new(name, "key16/value32"), |b| {
            b.iter(|| {
                let (buf, len) = &gets[i % gets.len()];
                i += 1;
                let outcome = e.execute(&mut session, black_box(&buf[..*len]), &mut out, 1);
                out.clear();
                black_box(outcome)
            })
        });
    }
    let mut e = engine();
    let sets: Vec<_> = keys
        .iter()
        .map(|k| in_buffer(Opcode::Set, &extras, k.as_bytes(), &value))
        .collect();
    group.bench_function(BenchmarkId::new("set", "key16/value32"), |b| {
        b.iter(|| {
            let (buf, len) = &sets[i % sets.len()];
            i += 1;
            let outcome = e.execute(&mut session, black_box(&buf[..*len]), &mut out, 1);
            out.clear();
            black_box(outcome)
        })
    });
    // The instrument's recording, alone: times spread over the histogram's range, as
    // requests' are.
    let mut latency = server::stats::Latency::new();
    let times: Vec<u64> = (0..1024u64).map(|i| 200 + i * i * 37).collect();
    group.bench_function(BenchmarkId::new("latency_record", "one sample"), |b| {
        b.iter(|| {
            let ns = times[i % times.len()];
            i += 1;
            latency.record(server::stats::Kind::Get, black_box(ns), 1);
        })
    });
    black_box(&latency);
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
