//! Tests of the input budget for large commands (`engine::budget`) over RESP: with a large
//! item limit, commands still arriving hold at most the worker's budget; one past it is
//! refused at once and skipped, its connection kept; a hold returns when its command
//! completes or its connection goes.

use super::tests::{command, now, resp2};
use crate::engine::*;

/// An engine whose item limit is 64 MiB: commands up to 128 MiB, a budget of 128 MiB.
fn large_items() -> Engine {
    Engine::new(EngineConfig::new(
        store::ShardConfig {
            memory_limit_bytes: 256 << 20,
            max_item_size: 64 << 20,
        },
        crate::control::Control::new(Default::default(), 0),
    ))
}

/// The header of a `SET k <value>` whose value is `len` bytes, announced and not sent.
fn announce(len: usize) -> Vec<u8> {
    format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${len}\r\n").into_bytes()
}

#[test]
fn large_commands_in_flight_are_bounded_per_worker() {
    let mut e = large_items();
    assert_eq!(e.core.budget().limit(), 128 << 20);
    let big = 60 << 20;
    let (mut a, mut b, mut c) = (resp2(), resp2(), resp2());
    for session in [&mut a, &mut b] {
        let mut out = Vec::new();
        let header = announce(big);
        let outcome = e.execute(session, &header, &mut out, now());
        assert_eq!((outcome.consumed, outcome.needed), (0, big + 2));
        assert!(out.is_empty());
    }
    assert_eq!(e.core.budget().held(), 2 * (announce(big).len() + big + 2));
    // A third would pass the budget: refused at once, its header consumed and the value to
    // come skipped as it arrives; the connection goes on.
    let header = announce(big);
    let mut out = Vec::new();
    let outcome = e.execute(&mut c, &header, &mut out, now());
    assert_eq!(
        String::from_utf8_lossy(&out),
        "-ERR large commands in flight on this worker exceed its input budget, try again \
         later\r\n"
    );
    assert_eq!(outcome.consumed, header.len());
    assert!(!outcome.close);
    assert_eq!(e.core.budget().held(), 2 * (header.len() + big + 2));
    let mut out = Vec::new();
    e.execute(&mut c, &vec![b'x'; 1000], &mut out, now());
    assert!(out.is_empty(), "skipped");
    // A connection that goes gives its share back; another command may then take it.
    drop(a);
    assert_eq!(e.core.budget().held(), header.len() + big + 2);
    let mut d = resp2();
    let outcome = e.execute(&mut d, &header, &mut Vec::new(), now());
    assert_eq!(outcome.needed, big + 2);
    assert_eq!(e.core.budget().held(), 2 * (header.len() + big + 2));
    drop((b, c, d));
    assert_eq!(e.core.budget().held(), 0);
}

#[test]
fn a_hold_returns_when_its_command_completes_and_small_commands_hold_nothing() {
    let mut e = large_items();
    let mut s = resp2();
    let value = vec![b'v'; 100_000];
    let whole = command(&[b"SET", b"k", &value]);
    // In two pieces: held while it arrives, given back once it ran.
    let mut out = Vec::new();
    let outcome = e.execute(&mut s, &whole[..50_000], &mut out, now());
    assert_eq!(outcome.consumed, 0);
    assert_eq!(e.core.budget().held(), whole.len());
    let outcome = e.execute(&mut s, &whole, &mut out, now());
    assert_eq!(outcome.consumed, whole.len());
    assert_eq!(String::from_utf8_lossy(&out), "+OK\r\n");
    assert_eq!(e.core.budget().held(), 0);
    // Under the threshold nothing is held.
    let small = command(&[b"SET", b"k", &value[..60_000]]);
    let outcome = e.execute(&mut s, &small[..30_000], &mut Vec::new(), now());
    assert_eq!(outcome.consumed, 0);
    assert_eq!(e.core.budget().held(), 0);
}
