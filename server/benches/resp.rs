//! RESP engine benchmarks: pipelines of 16 commands through one `Engine::execute` call, as a
//! pipelining client's frame arrives (RESP `GET` hits, `SET`s, and 90 % `GET` with 10 % `SET`
//! as `memspin-loadgen --protocol resp` sends them), beside the same pipelines in memcached's
//! binary protocol. Keys of 16 bytes, values of 32; throughput is per command.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use protocol::binary::{Opcode, RequestRepr, StoreExtras};
use protocol::resp::{Version, write_command};
use server::engine::{Engine, EngineConfig, Protocol, Session};
use std::hint::black_box;
use store::ShardConfig;

/// Commands per pipeline (one engine call).
const DEPTH: usize = 16;

fn engine() -> Engine {
    Engine::new(EngineConfig::new(
        ShardConfig {
            memory_limit_bytes: 64 << 20,
            max_item_size: 1 << 20,
        },
        server::control::Control::new(Default::default(), 0),
    ))
}

fn binary(out: &mut Vec<u8>, set: bool, key: &[u8], value: &[u8]) {
    let extras = StoreExtras {
        flags: 0,
        expiration: 0,
    }
    .emit();
    RequestRepr {
        opcode: if set { Opcode::Set } else { Opcode::Get },
        quiet: false,
        opaque: 0xfeed,
        cas: 0,
        vbucket: 0,
        extras: if set { &extras[..] } else { &[] },
        key,
        value: if set { value } else { &[] },
    }
    .emit_into(out);
}

fn resp(out: &mut Vec<u8>, set: bool, key: &[u8], value: &[u8]) {
    if set {
        write_command(out, &[&b"SET"[..], key, value]);
    } else {
        write_command(out, &[&b"GET"[..], key]);
    }
}

/// Pipelines of `DEPTH` commands over `keys`; command `i` is a `SET` where `set(i)` says.
fn pipelines(
    keys: &[Vec<u8>],
    value: &[u8],
    encode: fn(&mut Vec<u8>, bool, &[u8], &[u8]),
    set: impl Fn(usize) -> bool,
) -> Vec<Vec<u8>> {
    keys.chunks_exact(DEPTH)
        .enumerate()
        .map(|(p, chunk)| {
            let mut buf = Vec::new();
            for (i, key) in chunk.iter().enumerate() {
                encode(&mut buf, set(p * DEPTH + i), key, value);
            }
            buf
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_pipelined");
    group.throughput(Throughput::Elements(DEPTH as u64));
    let keys: Vec<Vec<u8>> = (0..10_000)
        .map(|i| format!("key:{i:012}").into_bytes())
        .collect();
    let value = [b'v'; 32];
    let mut out = Vec::with_capacity(64 * 1024);
    type Encode = fn(&mut Vec<u8>, bool, &[u8], &[u8]);
    let protocols: [(&str, Encode, Protocol); 2] = [
        ("resp", resp, Protocol::Resp(Version::Resp2)),
        ("binary", binary, Protocol::Binary),
    ];
    for (name, encode, protocol) in protocols {
        let mut e = engine();
        let mut session = Session::speaking(protocol);
        for buf in pipelines(&keys, &value, encode, |_| true) {
            let outcome = e.execute(&mut session, &buf, &mut out, 1);
            assert_eq!(outcome.consumed, buf.len());
            out.clear();
        }
        for (workload, set) in [
            ("get_hit", (|_| false) as fn(usize) -> bool),
            ("set", |_| true),
            ("get90_set10", |i| i % 10 == 9),
        ] {
            let frames = pipelines(&keys, &value, encode, set);
            let mut i = 0;
            group.bench_function(BenchmarkId::new(name, workload), |b| {
                b.iter(|| {
                    let buf = &frames[i % frames.len()];
                    i += 1;
                    // A turn per frame, as the packet path gives a connection with work.
                    session.begin_turn(server::engine::TURN_REQUESTS);
                    let outcome = e.execute(&mut session, black_box(buf), &mut out, 1);
                    debug_assert_eq!(outcome.consumed, buf.len());
                    out.clear();
                    black_box(outcome)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
