//! Behaviour of [`Shard`](crate::Shard) through its public API, with an injected `now`.

use crate::*;

const NOW: u64 = 1_700_000_000;

fn shard() -> Shard {
    Shard::new(ShardConfig {
        memory_limit_bytes: 64 << 20,
        max_item_size: 1 << 20,
    })
}

#[test]
fn set_then_get() {
    let mut s = shard();
    let cas = s.store(StoreMode::Set, b"k", b"v", 5, 0, 0, NOW).unwrap();
    let v = s.get(b"k", NOW).unwrap();
    assert_eq!((v.value, v.flags, v.cas), (&b"v"[..], 5, cas));
    assert_eq!(s.stats().get_hits, 1);
}
