//! Behaviour of [`Shard`](crate::Shard) through its public API, with an injected `now`.

use crate::item::GENERATION_MASK;
use crate::*;

const NOW: u64 = 1_700_000_000;
const DAY: i64 = 24 * 60 * 60;

fn shard() -> Shard {
    shard_with(64 << 20, 1 << 20)
}

fn shard_with(memory_limit_bytes: usize, max_item_size: usize) -> Shard {
    Shard::new(ShardConfig {
        memory_limit_bytes,
        max_item_size,
    })
}

#[track_caller]
fn set(s: &mut Shard, key: &[u8], value: &[u8], exptime: i64, now: u64) -> u64 {
    let cas = s
        .store(
            Write {
                ttl: Ttl::Exptime(exptime),
                ..Write::new(StoreMode::Set, key, value)
            },
            now,
        )
        .unwrap();
    s.check_invariants();
    cas
}

/// `(value, flags, cas)` of a live key, or `None`.
#[track_caller]
fn get(s: &mut Shard, key: &[u8], now: u64) -> Option<(Vec<u8>, u32, u64)> {
    let found = s.get(key, now).map(|v| (v.value.to_vec(), v.flags, v.cas));
    s.check_invariants();
    found
}

#[track_caller]
fn value(s: &mut Shard, key: &[u8], now: u64) -> Option<Vec<u8>> {
    get(s, key, now).map(|(v, _, _)| v)
}

// ---- basic operations ----

#[test]
fn shard_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<Shard>();
}

#[test]
fn new_shard_is_empty() {
    let s = shard();
    assert!(s.is_empty());
    assert_eq!(s.len(), 0);
    assert_eq!(s.stats().limit_maxbytes, 64 << 20);
    assert_eq!(s.stats().heap_bytes, 0);
    assert_eq!(s.config().max_item_size, 1 << 20);
    s.check_invariants();
}

#[test]
fn set_then_get() {
    let mut s = shard();
    let cas = s
        .store(
            Write {
                flags: 5,
                ..Write::new(StoreMode::Set, b"k", b"v")
            },
            NOW,
        )
        .unwrap();
    assert_ne!(cas, 0);
    assert_eq!(get(&mut s, b"k", NOW), Some((b"v".to_vec(), 5, cas)));
    assert_eq!(s.len(), 1);
    let st = s.stats();
    assert_eq!((st.get_hits, st.get_misses), (1, 0));
    assert_eq!((st.curr_items, st.total_items), (1, 1));
    assert_eq!(st.bytes, item_size(1, 1) as u64);
    assert!(st.heap_bytes > st.bytes);
}

#[test]
fn get_miss_counts() {
    let mut s = shard();
    assert_eq!(get(&mut s, b"nope", NOW), None);
    assert_eq!(s.stats().get_misses, 1);
    assert_eq!(s.stats().get_hits, 0);
}

#[test]
fn set_overwrites_value_flags_and_expiry() {
    let mut s = shard();
    let c1 = s
        .store(
            Write {
                flags: 1,
                ttl: Ttl::Exptime(10),
                ..Write::new(StoreMode::Set, b"k", b"one")
            },
            NOW,
        )
        .unwrap();
    let c2 = s
        .store(
            Write {
                flags: 2,
                ..Write::new(StoreMode::Set, b"k", b"two!")
            },
            NOW,
        )
        .unwrap();
    assert!(c2 > c1);
    assert_eq!(
        get(&mut s, b"k", NOW + 100),
        Some((b"two!".to_vec(), 2, c2))
    );
    assert_eq!(s.len(), 1);
    assert_eq!(s.stats().bytes, item_size(1, 4) as u64);
    assert_eq!(s.stats().total_items, 2);
}

#[test]
fn empty_value_is_a_value() {
    let mut s = shard();
    set(&mut s, b"k", b"", 0, NOW);
    assert_eq!(value(&mut s, b"k", NOW), Some(Vec::new()));
}

#[test]
fn binary_keys_and_values() {
    let mut s = shard();
    let key = [0u8, 255, 10, 13, 32];
    let val: Vec<u8> = (0..=255).collect();
    set(&mut s, &key, &val, 0, NOW);
    assert_eq!(value(&mut s, &key, NOW), Some(val));
}

#[test]
fn key_length_limits() {
    let mut s = shard();
    let max = [b'k'; MAX_KEY_LEN];
    let over = [b'k'; MAX_KEY_LEN + 1];
    set(&mut s, &max, b"v", 0, NOW);
    assert_eq!(value(&mut s, &max, NOW), Some(b"v".to_vec()));
    for bad in [&over[..], b""] {
        for mode in [
            StoreMode::Set,
            StoreMode::Add,
            StoreMode::Replace,
            StoreMode::Append,
            StoreMode::Prepend,
        ] {
            assert_eq!(
                s.store(Write::new(mode, bad, b"v"), NOW),
                Err(StoreError::KeyTooLong)
            );
        }
        assert_eq!(s.delete(bad, 0, NOW), Err(StoreError::KeyTooLong));
        assert_eq!(
            s.incr_decr(
                Arith {
                    create: Some((0, 0)),
                    ..Arith::new(bad, Delta::Incr, 1)
                },
                NOW
            ),
            Err(StoreError::KeyTooLong)
        );
        assert!(s.get(bad, NOW).is_none());
        assert!(s.touch(bad, Ttl::Exptime(0), NOW).is_none());
    }
    assert_eq!(s.stats().get_misses, 2);
    assert_eq!(s.stats().touch_misses, 2);
    assert_eq!(s.len(), 1);
    s.check_invariants();
}

// ---- store modes ----

#[test]
fn add_only_when_missing() {
    let mut s = shard();
    let c = s
        .store(Write::new(StoreMode::Add, b"k", b"a"), NOW)
        .unwrap();
    assert_eq!(
        s.store(Write::new(StoreMode::Add, b"k", b"b"), NOW),
        Err(StoreError::NotStored)
    );
    assert_eq!(get(&mut s, b"k", NOW), Some((b"a".to_vec(), 0, c)));
}

#[test]
fn add_over_an_expired_item_stores() {
    let mut s = shard();
    set(&mut s, b"k", b"old", 1, NOW);
    let c = s
        .store(Write::new(StoreMode::Add, b"k", b"new"), NOW + 1)
        .unwrap();
    assert_eq!(get(&mut s, b"k", NOW + 1), Some((b"new".to_vec(), 0, c)));
    assert_eq!(s.stats().reclaimed, 1);
}

#[test]
fn replace_only_when_live() {
    let mut s = shard();
    assert_eq!(
        s.store(Write::new(StoreMode::Replace, b"k", b"x"), NOW),
        Err(StoreError::NotStored)
    );
    assert!(s.is_empty());
    set(&mut s, b"k", b"a", 0, NOW);
    let c = s
        .store(
            Write {
                flags: 9,
                ..Write::new(StoreMode::Replace, b"k", b"b")
            },
            NOW,
        )
        .unwrap();
    assert_eq!(get(&mut s, b"k", NOW), Some((b"b".to_vec(), 9, c)));
}

#[test]
fn append_prepend_keep_flags_and_expiry() {
    let mut s = shard();
    let c0 = s
        .store(
            Write {
                flags: 42,
                ttl: Ttl::Exptime(100),
                ..Write::new(StoreMode::Set, b"k", b"mid")
            },
            NOW,
        )
        .unwrap();
    let c1 = s
        .store(
            Write {
                flags: 7,
                ..Write::new(StoreMode::Append, b"k", b"-end")
            },
            NOW,
        )
        .unwrap();
    let c2 = s
        .store(
            Write {
                flags: 8,
                ttl: Ttl::Exptime(5000),
                ..Write::new(StoreMode::Prepend, b"k", b"start-")
            },
            NOW,
        )
        .unwrap();
    assert!(c0 < c1 && c1 < c2);
    assert_eq!(
        get(&mut s, b"k", NOW + 99),
        Some((b"start-mid-end".to_vec(), 42, c2))
    );
    // The original 100-second expiry still holds.
    assert_eq!(get(&mut s, b"k", NOW + 100), None);
    assert_eq!(s.stats().bytes, 0);
}

#[test]
fn append_prepend_need_a_live_item() {
    let mut s = shard();
    for mode in [StoreMode::Append, StoreMode::Prepend] {
        assert_eq!(
            s.store(Write::new(mode, b"k", b"x"), NOW),
            Err(StoreError::NotStored)
        );
    }
    set(&mut s, b"k", b"v", 1, NOW);
    assert_eq!(
        s.store(Write::new(StoreMode::Append, b"k", b"x"), NOW + 1),
        Err(StoreError::NotStored)
    );
    assert!(s.is_empty());
}

#[test]
fn store_with_expired_exptime_removes_the_old_item() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    let c = s
        .store(
            Write {
                ttl: Ttl::Exptime(-1),
                ..Write::new(StoreMode::Set, b"k", b"w")
            },
            NOW,
        )
        .unwrap();
    assert!(c > 0);
    assert_eq!(get(&mut s, b"k", NOW), None);
    assert!(s.is_empty());
    assert_eq!(s.stats().bytes, 0);
    // Add with an expired time succeeds too and keeps nothing.
    s.store(
        Write {
            ttl: Ttl::Exptime(NOW as i64),
            ..Write::new(StoreMode::Add, b"k", b"w")
        },
        NOW,
    )
    .unwrap();
    assert!(s.is_empty());
}

// ---- delete ----

#[test]
fn delete_hits_and_misses() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    assert_eq!(s.delete(b"k", 0, NOW), Ok(()));
    assert_eq!(s.delete(b"k", 0, NOW), Err(StoreError::NotFound));
    assert_eq!(get(&mut s, b"k", NOW), None);
    assert_eq!((s.stats().delete_hits, s.stats().delete_misses), (1, 1));
    assert_eq!(s.stats().bytes, 0);
    s.check_invariants();
}

#[test]
fn delete_of_expired_is_a_miss() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 10, NOW);
    assert_eq!(s.delete(b"k", 0, NOW + 10), Err(StoreError::NotFound));
    assert_eq!(s.stats().delete_misses, 1);
    assert_eq!(s.stats().reclaimed, 1);
}

#[test]
fn delete_with_cas() {
    let mut s = shard();
    let c = set(&mut s, b"k", b"v", 0, NOW);
    assert_eq!(s.delete(b"k", c + 1, NOW), Err(StoreError::Exists));
    assert!(get(&mut s, b"k", NOW).is_some());
    assert_eq!(s.delete(b"k", c, NOW), Ok(()));
    assert_eq!(s.delete(b"k", c, NOW), Err(StoreError::NotFound));
}

#[test]
fn unlink_removes_without_counting_a_delete() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    assert!(s.unlink(b"k", NOW));
    assert!(!s.unlink(b"k", NOW));
    assert!(!s.unlink(b"", NOW), "an invalid key holds nothing");
    assert_eq!(get(&mut s, b"k", NOW), None);
    assert_eq!((s.stats().delete_hits, s.stats().delete_misses), (0, 0));
    assert_eq!((s.stats().curr_items, s.stats().bytes), (0, 0));
    // A dead item is reclaimed, not unlinked.
    set(&mut s, b"e", b"v", 10, NOW);
    assert!(!s.unlink(b"e", NOW + 10));
    assert_eq!(s.stats().reclaimed, 1);
    s.check_invariants();
}

// ---- CAS ----

#[test]
fn cas_flow() {
    let mut s = shard();
    let c1 = set(&mut s, b"k", b"v1", 0, NOW);
    let (_, _, seen) = get(&mut s, b"k", NOW).unwrap();
    assert_eq!(seen, c1);
    // Someone else writes in between.
    let c2 = set(&mut s, b"k", b"other", 0, NOW);
    assert_eq!(
        s.store(
            Write {
                cas: seen,
                ..Write::new(StoreMode::Set, b"k", b"v2")
            },
            NOW
        ),
        Err(StoreError::Exists)
    );
    assert_eq!(value(&mut s, b"k", NOW), Some(b"other".to_vec()));
    let c3 = s
        .store(
            Write {
                flags: 3,
                cas: c2,
                ..Write::new(StoreMode::Set, b"k", b"v2")
            },
            NOW,
        )
        .unwrap();
    assert!(c3 > c2);
    assert_eq!(get(&mut s, b"k", NOW), Some((b"v2".to_vec(), 3, c3)));
    assert_eq!(
        s.store(
            Write {
                cas: c3,
                ..Write::new(StoreMode::Set, b"missing", b"x")
            },
            NOW
        ),
        Err(StoreError::NotFound)
    );
    let st = s.stats();
    assert_eq!((st.cas_hits, st.cas_badval, st.cas_misses), (1, 1, 1));
}

#[test]
fn cas_on_expired_item_is_not_found() {
    let mut s = shard();
    let c = set(&mut s, b"k", b"v", 5, NOW);
    assert_eq!(
        s.store(
            Write {
                cas: c,
                ..Write::new(StoreMode::Set, b"k", b"w")
            },
            NOW + 5
        ),
        Err(StoreError::NotFound)
    );
    assert_eq!(s.stats().cas_misses, 1);
}

#[test]
fn cas_applies_to_every_mode() {
    let mut s = shard();
    let c = set(&mut s, b"k", b"v", 0, NOW);
    for mode in [StoreMode::Replace, StoreMode::Append, StoreMode::Prepend] {
        assert_eq!(
            s.store(
                Write {
                    cas: c + 100,
                    ..Write::new(mode, b"k", b"x")
                },
                NOW
            ),
            Err(StoreError::Exists),
            "{mode:?}"
        );
        // Regression: append and prepend with a CAS on a missing key said "not found" (meta
        // `NF`, binary 0x0001); memcached says "not stored" (`NS`, 0x0005), as without a CAS,
        // and counts no CAS miss. Replace with a CAS is memcached's `cas`: not found.
        let missing = if mode == StoreMode::Replace {
            StoreError::NotFound
        } else {
            StoreError::NotStored
        };
        let misses = s.stats().cas_misses;
        assert_eq!(
            s.store(
                Write {
                    cas: c,
                    ..Write::new(mode, b"nope", b"x")
                },
                NOW
            ),
            Err(missing),
            "{mode:?}"
        );
        let counted = u64::from(mode == StoreMode::Replace);
        assert_eq!(s.stats().cas_misses, misses + counted, "{mode:?}");
    }
    // Add on a live key is NotStored whatever the CAS.
    assert_eq!(
        s.store(
            Write {
                cas: c,
                ..Write::new(StoreMode::Add, b"k", b"x")
            },
            NOW
        ),
        Err(StoreError::NotStored)
    );
    assert_eq!(value(&mut s, b"k", NOW), Some(b"v".to_vec()));
    let c2 = s
        .store(
            Write {
                cas: c,
                ..Write::new(StoreMode::Append, b"k", b"+")
            },
            NOW,
        )
        .unwrap();
    assert_eq!(get(&mut s, b"k", NOW), Some((b"v+".to_vec(), 0, c2)));
}

#[test]
fn every_modification_gets_a_new_increasing_cas() {
    let mut s = shard();
    let mut last = 0;
    let mut check = |c: u64| {
        assert!(c > last, "{c} after {last}");
        last = c;
    };
    check(set(&mut s, b"a", b"1", 0, NOW));
    check(set(&mut s, b"b", b"1", 0, NOW));
    check(set(&mut s, b"a", b"2", 0, NOW));
    check(
        s.store(Write::new(StoreMode::Append, b"a", b"0"), NOW)
            .unwrap(),
    );
    check(
        s.store(Write::new(StoreMode::Prepend, b"a", b"0"), NOW)
            .unwrap(),
    );
    check(
        s.store(Write::new(StoreMode::Replace, b"a", b"9"), NOW)
            .unwrap(),
    );
    check(
        s.incr_decr(Arith::new(b"a", Delta::Incr, 1), NOW)
            .unwrap()
            .1,
    );
    check(
        s.incr_decr(Arith::new(b"a", Delta::Incr, 5), NOW)
            .unwrap()
            .1,
    );
    check(
        s.incr_decr(
            Arith {
                create: Some((3, 0)),
                ..Arith::new(b"z", Delta::Incr, 1)
            },
            NOW,
        )
        .unwrap()
        .1,
    );
    check(
        s.incr_decr(Arith::new(b"a", Delta::Decr, 0), NOW)
            .unwrap()
            .1,
    );
    check(
        s.store(
            Write {
                ttl: Ttl::Exptime(-1),
                ..Write::new(StoreMode::Set, b"gone", b"1")
            },
            NOW,
        )
        .unwrap(),
    );
    // A touch changes only the expiry and keeps the CAS, as memcached does.
    let (_, _, ca) = get(&mut s, b"a", NOW).unwrap();
    assert_eq!(s.touch(b"a", Ttl::Exptime(100), NOW).unwrap().cas, ca);
    // A failed store does not change the item's CAS.
    let _ = s.store(Write::new(StoreMode::Add, b"a", b"x"), NOW);
    assert_eq!(get(&mut s, b"a", NOW).unwrap().2, ca);
}

// ---- expiry boundaries ----

#[test]
fn exptime_zero_never_expires() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    assert!(get(&mut s, b"k", NOW + 100 * 365 * DAY as u64).is_some());
}

#[test]
fn exptime_one_second() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 1, NOW);
    assert!(get(&mut s, b"k", NOW).is_some());
    assert_eq!(get(&mut s, b"k", NOW + 1), None);
    let st = s.stats();
    assert_eq!((st.get_hits, st.get_misses, st.get_expired), (1, 1, 1));
    // It was fetched once before expiring.
    assert_eq!((st.reclaimed, st.expired_unfetched), (1, 0));
    assert!(s.is_empty());
}

#[test]
fn exptime_thirty_days_exactly_is_relative() {
    let mut s = shard();
    let d30 = REALTIME_MAXDELTA as u64;
    set(&mut s, b"k", b"v", REALTIME_MAXDELTA, NOW);
    assert!(get(&mut s, b"k", NOW + d30 - 1).is_some());
    assert_eq!(get(&mut s, b"k", NOW + d30), None);
}

#[test]
fn exptime_thirty_days_plus_one_is_absolute() {
    let mut s = shard();
    // 2592001 as a unix time is in January 1970: already past.
    let c = s
        .store(
            Write {
                ttl: Ttl::Exptime(REALTIME_MAXDELTA + 1),
                ..Write::new(StoreMode::Set, b"k", b"v")
            },
            NOW,
        )
        .unwrap();
    assert!(c > 0);
    assert_eq!(get(&mut s, b"k", NOW), None);
    assert!(s.is_empty());
}

#[test]
fn exptime_absolute_future_and_past() {
    let mut s = shard();
    set(&mut s, b"future", b"v", NOW as i64 + 60, NOW);
    set(&mut s, b"now", b"v", NOW as i64, NOW);
    set(&mut s, b"past", b"v", NOW as i64 - 60, NOW);
    assert!(get(&mut s, b"future", NOW + 59).is_some());
    assert_eq!(get(&mut s, b"future", NOW + 60), None);
    assert_eq!(get(&mut s, b"now", NOW), None);
    assert_eq!(get(&mut s, b"past", NOW), None);
}

#[test]
fn exptime_negative_is_expired() {
    let mut s = shard();
    set(&mut s, b"k", b"v", -1, NOW);
    assert_eq!(get(&mut s, b"k", NOW), None);
    set(&mut s, b"k", b"v", i64::MIN, NOW);
    assert_eq!(get(&mut s, b"k", NOW), None);
}

#[test]
fn expired_unfetched_counts_items_never_read() {
    let mut s = shard();
    set(&mut s, b"read", b"v", 10, NOW);
    set(&mut s, b"unread", b"v", 10, NOW);
    assert!(get(&mut s, b"read", NOW).is_some());
    assert_eq!(s.sweep_expired(100, NOW + 10), 2);
    let st = s.stats();
    assert_eq!((st.reclaimed, st.expired_unfetched), (2, 1));
    assert_eq!(st.get_expired, 0);
    s.check_invariants();
}

// ---- touch ----

#[test]
fn touch_unbumped_sets_the_expiry_and_leaves_the_marks() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    let seen = s.touch_unbumped(b"k", Ttl::Exptime(30), NOW + 5).unwrap();
    assert_eq!(seen.exptime, (NOW + 35) as u32);
    let item = s.peek(b"k", NOW + 6).unwrap();
    assert_eq!((item.fetched, item.idle_secs(NOW + 6)), (false, 6));
    assert_eq!(item.exptime, (NOW + 35) as u32);
    assert!(
        s.touch_unbumped(b"missing", Ttl::Exptime(30), NOW)
            .is_none()
    );
    assert_eq!((s.stats().touch_hits, s.stats().touch_misses), (1, 1));
    s.check_invariants();
}

#[test]
fn touch_moves_expiry_later() {
    let mut s = shard();
    let c = set(&mut s, b"k", b"v", 10, NOW);
    let t = s.touch(b"k", Ttl::Exptime(100), NOW + 5).unwrap();
    assert_eq!((t.value, t.cas), (&b"v"[..], c), "touch keeps the CAS");
    assert!(get(&mut s, b"k", NOW + 104).is_some());
    assert_eq!(get(&mut s, b"k", NOW + 105), None);
}

#[test]
fn touch_moves_expiry_earlier_and_to_never() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    assert!(s.touch(b"k", Ttl::Exptime(2), NOW).is_some());
    assert!(get(&mut s, b"k", NOW + 1).is_some());
    assert_eq!(get(&mut s, b"k", NOW + 2), None);

    set(&mut s, b"k", b"v", 2, NOW);
    assert!(s.touch(b"k", Ttl::Exptime(0), NOW).is_some());
    assert!(get(&mut s, b"k", NOW + 10 * DAY as u64).is_some());
}

#[test]
fn touch_with_expired_time_returns_once_then_hides() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    assert_eq!(
        s.touch(b"k", Ttl::Exptime(-1), NOW)
            .map(|v| v.value.to_vec()),
        Some(b"v".to_vec())
    );
    assert_eq!(get(&mut s, b"k", NOW), None);
    assert_eq!(s.stats().get_expired, 1);
}

#[test]
fn touch_misses() {
    let mut s = shard();
    assert!(s.touch(b"k", Ttl::Exptime(10), NOW).is_none());
    set(&mut s, b"k", b"v", 1, NOW);
    assert!(
        s.touch(b"k", Ttl::Exptime(10), NOW + 1).is_none(),
        "expired is a miss"
    );
    assert_eq!((s.stats().touch_hits, s.stats().touch_misses), (0, 2));
    set(&mut s, b"k", b"v", 0, NOW);
    assert!(s.touch(b"k", Ttl::Exptime(10), NOW).is_some());
    assert_eq!(s.stats().touch_hits, 1);
}

// ---- incr / decr ----

#[test]
fn incr_and_decr() {
    let mut s = shard();
    let c0 = s
        .store(
            Write {
                flags: 77,
                ttl: Ttl::Exptime(100),
                ..Write::new(StoreMode::Set, b"n", b"10")
            },
            NOW,
        )
        .unwrap();
    let (v, c1) = s.incr_decr(Arith::new(b"n", Delta::Incr, 5), NOW).unwrap();
    assert_eq!(v, 15);
    assert!(c1 > c0);
    assert_eq!(get(&mut s, b"n", NOW), Some((b"15".to_vec(), 77, c1)));
    let (v, c2) = s.incr_decr(Arith::new(b"n", Delta::Decr, 6), NOW).unwrap();
    assert_eq!(v, 9);
    // No memcached-style space padding: the value is exactly the digits.
    assert_eq!(get(&mut s, b"n", NOW), Some((b"9".to_vec(), 77, c2)));
    let (v, _) = s
        .incr_decr(Arith::new(b"n", Delta::Incr, 991), NOW)
        .unwrap();
    assert_eq!(v, 1000);
    assert_eq!(value(&mut s, b"n", NOW), Some(b"1000".to_vec()));
    // Expiry is kept.
    assert_eq!(get(&mut s, b"n", NOW + 100), None);
    let st = s.stats();
    assert_eq!((st.incr_hits, st.decr_hits), (2, 1));
}

#[test]
fn incr_wraps_at_2_pow_64() {
    let mut s = shard();
    set(&mut s, b"n", b"18446744073709551615", 0, NOW);
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Incr, 1), NOW)
            .unwrap()
            .0,
        0
    );
    assert_eq!(value(&mut s, b"n", NOW), Some(b"0".to_vec()));
    set(&mut s, b"n", b"18446744073709551610", 0, NOW);
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Incr, 10), NOW)
            .unwrap()
            .0,
        4
    );
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Incr, u64::MAX), NOW)
            .unwrap()
            .0,
        3
    );
}

#[test]
fn decr_stops_at_zero() {
    let mut s = shard();
    set(&mut s, b"n", b"5", 0, NOW);
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Decr, 6), NOW)
            .unwrap()
            .0,
        0
    );
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Decr, u64::MAX), NOW)
            .unwrap()
            .0,
        0
    );
    assert_eq!(value(&mut s, b"n", NOW), Some(b"0".to_vec()));
}

#[test]
fn incr_twenty_digits_max() {
    let mut s = shard();
    set(&mut s, b"n", b"00000000000000000001", 0, NOW);
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Incr, 1), NOW)
            .unwrap()
            .0,
        2
    );
    set(&mut s, b"n", b"18446744073709551614", 0, NOW);
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Incr, 1), NOW)
            .unwrap()
            .0,
        u64::MAX
    );
    assert_eq!(
        value(&mut s, b"n", NOW),
        Some(b"18446744073709551615".to_vec())
    );
    // Regression: a value longer than 20 digits whose number fits (leading zeros) was refused
    // as non-numeric; memcached's strtoull reads it.
    set(&mut s, b"n", b"010000000000000000000", 0, NOW);
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Decr, 0), NOW)
            .unwrap()
            .0,
        10_000_000_000_000_000_000
    );
}

// Regression: a number with white space around it (memcached's own padding of a shorter
// result, a value stored with a newline) was refused as non-numeric; memcached's strtoull
// reads it, and so does memspin now. The result replaces the whole value.
#[test]
fn incr_reads_numbers_as_memcached_does() {
    let mut s = shard();
    for (text, number) in [
        (&b" 7"[..], 7),
        (b"7 ", 7),
        (b"7   ", 7),
        (b"\t7\n", 7),
        (b"+7", 7),
        (b"7 a\r\nb", 7),
        (b"-0", 0),
        (b"0000000000000000000000000000042", 42),
    ] {
        set(&mut s, b"n", text, 0, NOW);
        assert_eq!(
            s.incr_decr(Arith::new(b"n", Delta::Incr, 1), NOW)
                .unwrap()
                .0,
            number + 1,
            "{:?}",
            String::from_utf8_lossy(text)
        );
        assert_eq!(
            value(&mut s, b"n", NOW),
            Some((number + 1).to_string().into_bytes())
        );
    }
}

// Regression: incr with a wrong CAS on an empty value said "exists"; memcached finds an empty
// value non-numeric first (and any other value's CAS before its digits).
#[test]
fn incr_on_an_empty_value_is_non_numeric_before_the_cas() {
    let mut s = shard();
    let c = set(&mut s, b"e", b"", 0, NOW);
    let wrong = |s: &mut Shard, key: &[u8]| {
        s.incr_decr(
            Arith {
                cas: c + 100,
                ..Arith::new(key, Delta::Incr, 1)
            },
            NOW,
        )
    };
    assert_eq!(wrong(&mut s, b"e"), Err(StoreError::NonNumeric));
    set(&mut s, b"x", b"abc", 0, NOW);
    assert_eq!(wrong(&mut s, b"x"), Err(StoreError::Exists));
}

#[test]
fn incr_non_numeric() {
    let mut s = shard();
    for bad in [
        &b"abc"[..],
        b"",
        b"12a",
        b" ",
        b"-1",
        b"- 1",
        b"1.5",
        b"1a 2",
        b"18446744073709551616",
        b"99999999999999999999",
    ] {
        set(&mut s, b"n", bad, 0, NOW);
        for d in [Delta::Incr, Delta::Decr] {
            assert_eq!(
                s.incr_decr(
                    Arith {
                        create: Some((7, 0)),
                        ..Arith::new(b"n", d, 1)
                    },
                    NOW
                ),
                Err(StoreError::NonNumeric),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(value(&mut s, b"n", NOW), Some(bad.to_vec()));
    }
    assert_eq!((s.stats().incr_hits, s.stats().incr_misses), (0, 0));
}

#[test]
fn incr_missing_key() {
    let mut s = shard();
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Incr, 1), NOW),
        Err(StoreError::NotFound)
    );
    assert_eq!(
        s.incr_decr(Arith::new(b"n", Delta::Decr, 1), NOW),
        Err(StoreError::NotFound)
    );
    assert_eq!((s.stats().incr_misses, s.stats().decr_misses), (1, 1));
    assert!(s.is_empty());
}

#[test]
fn incr_create_with_initial() {
    let mut s = shard();
    let (v, c) = s
        .incr_decr(
            Arith {
                create: Some((42, 100)),
                ..Arith::new(b"n", Delta::Incr, 5)
            },
            NOW,
        )
        .unwrap();
    assert_eq!(v, 42, "the initial value is stored as is, not incremented");
    assert_eq!(get(&mut s, b"n", NOW), Some((b"42".to_vec(), 0, c)));
    assert_eq!(get(&mut s, b"n", NOW + 100), None, "with the given expiry");
    let (v, _) = s
        .incr_decr(
            Arith {
                create: Some((u64::MAX, 0)),
                ..Arith::new(b"d", Delta::Decr, 5)
            },
            NOW,
        )
        .unwrap();
    assert_eq!(v, u64::MAX);
    assert_eq!(
        value(&mut s, b"d", NOW),
        Some(b"18446744073709551615".to_vec())
    );
    let (v, _) = s
        .incr_decr(
            Arith {
                create: Some((0, 0)),
                ..Arith::new(b"d", Delta::Decr, 5)
            },
            NOW,
        )
        .unwrap();
    assert_eq!(
        v,
        u64::MAX - 5,
        "existing key: the initial value is ignored"
    );
    assert_eq!((s.stats().incr_misses, s.stats().decr_misses), (1, 1));
    assert_eq!(s.stats().decr_hits, 1);
}

#[test]
fn incr_with_cas() {
    let mut s = shard();
    let c = set(&mut s, b"n", b"1", 0, NOW);
    assert_eq!(
        s.incr_decr(
            Arith {
                cas: c + 1,
                ..Arith::new(b"n", Delta::Incr, 1)
            },
            NOW
        ),
        Err(StoreError::Exists)
    );
    let (v, c2) = s
        .incr_decr(
            Arith {
                cas: c,
                ..Arith::new(b"n", Delta::Incr, 1)
            },
            NOW,
        )
        .unwrap();
    assert_eq!(v, 2);
    assert_eq!(
        s.incr_decr(
            Arith {
                cas: c,
                ..Arith::new(b"n", Delta::Incr, 1)
            },
            NOW
        ),
        Err(StoreError::Exists)
    );
    assert_eq!(
        s.incr_decr(
            Arith {
                cas: c2,
                ..Arith::new(b"n", Delta::Incr, 1)
            },
            NOW
        )
        .unwrap()
        .0,
        3
    );
}

// ---- flush_all ----

#[test]
fn flush_all_now() {
    let mut s = shard();
    set(&mut s, b"a", b"1", 0, NOW);
    set(&mut s, b"b", b"2", 0, NOW);
    s.flush_all(0, NOW);
    assert_eq!(get(&mut s, b"a", NOW), None);
    assert_eq!(s.stats().get_flushed, 1);
    // Stored after the flush, in the same second: visible.
    set(&mut s, b"c", b"3", 0, NOW);
    assert!(get(&mut s, b"c", NOW).is_some());
    // Add over a flushed key works; replace does not.
    assert_eq!(
        s.store(Write::new(StoreMode::Replace, b"b", b"x"), NOW),
        Err(StoreError::NotStored)
    );
    assert!(s.store(Write::new(StoreMode::Add, b"b", b"x"), NOW).is_ok());
    assert_eq!(s.stats().reclaimed, 2);
    s.check_invariants();
}

#[test]
fn flush_all_delayed() {
    let mut s = shard();
    set(&mut s, b"early", b"1", 0, NOW);
    s.flush_all(10, NOW);
    set(&mut s, b"mid", b"2", 0, NOW + 5);
    assert!(get(&mut s, b"early", NOW + 9).is_some());
    assert!(get(&mut s, b"mid", NOW + 9).is_some());
    set(&mut s, b"late", b"3", 0, NOW + 10);
    assert_eq!(get(&mut s, b"early", NOW + 10), None);
    assert_eq!(get(&mut s, b"mid", NOW + 10), None);
    assert!(get(&mut s, b"late", NOW + 10).is_some());
    assert_eq!(s.stats().get_flushed, 2);
}

#[test]
fn flush_all_delayed_applies_even_if_first_seen_late() {
    let mut s = shard();
    set(&mut s, b"a", b"1", 0, NOW);
    s.flush_all(10, NOW);
    // Nothing happens until long after; the first call sees it flushed.
    assert_eq!(get(&mut s, b"a", NOW + 1000), None);
}

#[test]
fn flush_all_absolute_and_negative() {
    let mut s = shard();
    set(&mut s, b"a", b"1", 0, NOW);
    s.flush_all(NOW as i64 + 30, NOW);
    assert!(get(&mut s, b"a", NOW + 29).is_some());
    assert_eq!(get(&mut s, b"a", NOW + 30), None);
    set(&mut s, b"b", b"1", 0, NOW + 30);
    s.flush_all(-5, NOW + 30);
    assert_eq!(get(&mut s, b"b", NOW + 30), None);
    set(&mut s, b"c", b"1", 0, NOW + 30);
    s.flush_all(NOW as i64, NOW + 30); // absolute past: now
    assert_eq!(get(&mut s, b"c", NOW + 30), None);
}

#[test]
fn later_flush_replaces_a_pending_one() {
    let mut s = shard();
    set(&mut s, b"a", b"1", 0, NOW);
    s.flush_all(10, NOW);
    s.flush_all(100, NOW + 1);
    assert!(get(&mut s, b"a", NOW + 50).is_some());
    assert_eq!(get(&mut s, b"a", NOW + 101), None);
    set(&mut s, b"b", b"1", 0, NOW + 200);
    s.flush_all(10, NOW + 200);
    s.flush_all(0, NOW + 201);
    assert_eq!(get(&mut s, b"b", NOW + 201), None);
    set(&mut s, b"c", b"1", 0, NOW + 202);
    assert!(
        get(&mut s, b"c", NOW + 300).is_some(),
        "the delayed one was cancelled"
    );
}

#[test]
fn flushed_items_are_swept() {
    let mut s = shard();
    for i in 0..100u32 {
        set(&mut s, format!("k{i}").as_bytes(), b"v", 0, NOW);
    }
    s.flush_all(0, NOW);
    assert_eq!(s.len(), 100, "flush is lazy");
    assert_eq!(s.sweep_expired(usize::MAX, NOW), 100);
    assert!(s.is_empty());
    assert_eq!(s.stats().expired_unfetched, 100);
    assert_eq!(s.stats().bytes, 0);
    s.check_invariants();
}

// ---- sweep ----

#[test]
fn sweep_is_bounded_and_resumes() {
    let mut s = shard();
    for i in 0..1000u32 {
        let exptime = if i % 2 == 0 { 10 } else { 0 };
        set(&mut s, format!("k{i}").as_bytes(), b"v", exptime, NOW);
    }
    assert_eq!(s.sweep_expired(1000, NOW + 9), 0, "nothing expired yet");
    let mut total = 0;
    let mut calls = 0;
    while total < 500 {
        let n = s.sweep_expired(50, NOW + 10);
        assert!(n <= 50);
        total += n;
        calls += 1;
        assert!(calls <= 20, "20 calls of 50 cover 1000 items");
        s.check_invariants();
    }
    assert_eq!(total, 500);
    assert_eq!(s.len(), 500);
    assert_eq!(s.sweep_expired(0, NOW + 10), 0);
    assert_eq!(s.stats().reclaimed, 500);
    for i in (1..1000u32).step_by(2) {
        assert!(get(&mut s, format!("k{i}").as_bytes(), NOW + 10).is_some());
    }
}

#[test]
fn sweep_on_empty_shard() {
    let mut s = shard();
    assert_eq!(s.sweep_expired(10, NOW), 0);
}

// ---- size limits ----

#[test]
fn too_large_stores_nothing_and_keeps_the_old_value() {
    let max = 1024;
    let mut s = shard_with(1 << 20, max);
    // The largest value that fits: item_size(1, v) <= 1024.
    let fits = (0..max).rev().find(|&v| item_size(1, v) <= max).unwrap();
    set(&mut s, b"k", &vec![b'a'; fits], 0, NOW);
    assert_eq!(
        s.store(Write::new(StoreMode::Set, b"k", &vec![b'b'; fits + 1]), NOW),
        Err(StoreError::TooLarge)
    );
    assert_eq!(value(&mut s, b"k", NOW), Some(vec![b'a'; fits]));
    assert_eq!(
        s.store(Write::new(StoreMode::Append, b"k", b"x"), NOW),
        Err(StoreError::TooLarge)
    );
    assert_eq!(
        s.store(Write::new(StoreMode::Prepend, b"k", b"x"), NOW),
        Err(StoreError::TooLarge)
    );
    assert_eq!(value(&mut s, b"k", NOW), Some(vec![b'a'; fits]));
    assert_eq!(
        s.store(Write::new(StoreMode::Add, b"new", &vec![b'b'; max]), NOW),
        Err(StoreError::TooLarge)
    );
    assert_eq!(get(&mut s, b"new", NOW), None);
    assert_eq!(s.len(), 1);
    assert_eq!(s.stats().total_items, 1);
}

#[test]
fn too_large_wins_over_mode_errors() {
    let mut s = shard_with(1 << 20, 100);
    assert_eq!(
        s.store(Write::new(StoreMode::Replace, b"k", &[0; 200]), NOW),
        Err(StoreError::TooLarge)
    );
}

#[test]
fn item_bigger_than_the_budget_is_out_of_memory_and_evicts_nothing() {
    let mut s = shard_with(64 * 1024, 1 << 20);
    for i in 0..10u32 {
        set(&mut s, format!("k{i}").as_bytes(), &[b'v'; 1000], 0, NOW);
    }
    let before = s.stats().clone();
    assert_eq!(
        s.store(Write::new(StoreMode::Set, b"big", &[0; 64 * 1024]), NOW),
        Err(StoreError::OutOfMemory)
    );
    assert_eq!(
        s.store(Write::new(StoreMode::Set, b"k0", &[0; 64 * 1024]), NOW),
        Err(StoreError::OutOfMemory)
    );
    assert_eq!(s.stats(), &before);
    assert_eq!(value(&mut s, b"k0", NOW), Some(vec![b'v'; 1000]));
    assert_eq!(s.len(), 10);
}

#[test]
fn zero_budget_stores_nothing() {
    let mut s = shard_with(0, 1 << 20);
    assert_eq!(
        s.store(Write::new(StoreMode::Set, b"k", b"v"), NOW),
        Err(StoreError::OutOfMemory)
    );
    assert_eq!(
        s.incr_decr(
            Arith {
                create: Some((1, 0)),
                ..Arith::new(b"k", Delta::Incr, 1)
            },
            NOW
        ),
        Err(StoreError::OutOfMemory)
    );
    assert!(s.is_empty());
    assert_eq!(s.stats().heap_bytes, 0);
}

// ---- memory budget and eviction ----

#[test]
fn writing_twice_the_budget_stays_within_it() {
    const BUDGET: usize = 1 << 20;
    let mut s = shard_with(BUDGET, 1 << 20);
    let value = [b'x'; 1024];
    let per_item = item_size(12, 1024);
    let writes = 2 * BUDGET / 1024;
    for i in 0..writes {
        let key = format!("key:{i:08}");
        s.store(Write::new(StoreMode::Set, key.as_bytes(), &value), NOW)
            .unwrap();
        assert!(s.stats().heap_bytes <= BUDGET as u64);
        assert!(s.stats().bytes <= BUDGET as u64);
    }
    s.check_invariants();
    let st = s.stats().clone();
    assert_eq!(st.total_items, writes as u64);
    assert_eq!(st.evictions, writes as u64 - st.curr_items);
    assert_eq!(st.evicted_unfetched, st.evictions, "nothing was read");
    assert!(st.evictions >= (writes - BUDGET / per_item) as u64);
    // The budget is well used: items fill at least 90 % of what the table leaves.
    assert!(
        st.heap_bytes > (BUDGET as u64) * 9 / 10,
        "heap_bytes {}",
        st.heap_bytes
    );
    // The newest writes are present (CLOCK gives every new item one full revolution).
    let present_newest = (writes - 100..writes)
        .filter(|i| get(&mut s, format!("key:{i:08}").as_bytes(), NOW).is_some())
        .count();
    assert_eq!(present_newest, 100);
    // Most of what is held is from the second half.
    let held_first_half = (0..writes / 2)
        .filter(|i| get(&mut s, format!("key:{i:08}").as_bytes(), NOW).is_some())
        .count();
    assert!(
        held_first_half < st.curr_items as usize / 4,
        "{held_first_half} of {} from the first half",
        st.curr_items
    );
}

#[test]
fn hot_items_survive_a_scan() {
    const BUDGET: usize = 512 * 1024;
    let mut s = shard_with(BUDGET, 1 << 20);
    let value = [b'x'; 1000];
    for i in 0..50u32 {
        set(&mut s, format!("hot{i}").as_bytes(), &value, 0, NOW);
    }
    for round in 0..20u32 {
        for i in 0..50u32 {
            // Reads keep the hot set referenced ...
            assert!(
                s.get(format!("hot{i}").as_bytes(), NOW).is_some(),
                "hot{i} lost in round {round}: {:?} buckets {} rebuilds {}",
                s.stats(),
                s.num_buckets(),
                s.rebuilds()
            );
        }
        // ... while a scan of one-off writes streams past them.
        for j in 0..100u32 {
            set(
                &mut s,
                format!("cold{round}:{j}").as_bytes(),
                &value,
                0,
                NOW,
            );
        }
    }
    assert!(s.stats().evictions > 1000);
    assert_eq!(s.stats().evicted_unfetched, s.stats().evictions);
}

#[test]
fn eviction_reclaims_expired_before_counting_evictions() {
    const BUDGET: usize = 256 * 1024;
    let mut s = shard_with(BUDGET, 1 << 20);
    let value = [b'x'; 1000];
    let mut i = 0u32;
    // Fill with items that expire at NOW + 10.
    while s.stats().heap_bytes + 2 * item_size(10, 1000) as u64 <= BUDGET as u64 {
        set(&mut s, format!("old{i}").as_bytes(), &value, 10, NOW);
        i += 1;
    }
    let old = s.len() as u64;
    // After they expire, writing the same amount again evicts nothing live.
    for j in 0..old {
        set(&mut s, format!("new{j}").as_bytes(), &value, 0, NOW + 10);
    }
    let st = s.stats();
    assert_eq!(st.evictions, 0);
    assert!(st.reclaimed > 0);
    assert_eq!(st.expired_unfetched, st.reclaimed);
}

#[test]
fn without_eviction_a_full_shard_refuses_stores_and_keeps_its_items() {
    const BUDGET: usize = 256 * 1024;
    let mut s = shard_with(BUDGET, 1 << 20);
    s.set_eviction(false);
    assert!(!s.evicts());
    let value = [b'x'; 1000];
    let mut stored = Vec::new();
    let mut refused = 0;
    for i in 0..1000u32 {
        let key = format!("k{i}");
        match s.store(Write::new(StoreMode::Set, key.as_bytes(), &value), NOW) {
            Ok(_) => stored.push(key),
            Err(StoreError::OutOfMemory) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        s.check_invariants();
    }
    assert!(refused > 0 && !stored.is_empty());
    assert_eq!(s.stats().evictions, 0);
    assert_eq!(s.stats().outofmemory, refused);
    for key in &stored {
        assert!(get(&mut s, key.as_bytes(), NOW).is_some(), "{key} kept");
    }
    // Dead items still make room: once the first ones expire... (here: a flush) stores work.
    s.flush_all(0, NOW);
    set(&mut s, b"after-flush", &value, 0, NOW);
    assert_eq!(s.stats().evictions, 0);
}

#[test]
fn evictions_record_nonzero_ttls_and_the_idle_time_of_the_last_victim() {
    const BUDGET: usize = 128 * 1024;
    let mut s = shard_with(BUDGET, 1 << 20);
    let value = [b'x'; 1000];
    for i in 0..400u32 {
        let exptime = if i % 2 == 0 { 0 } else { 1000 };
        set(
            &mut s,
            format!("k{i}").as_bytes(),
            &value,
            exptime,
            NOW + u64::from(i),
        );
    }
    let st = s.stats();
    assert!(st.evictions > 0);
    assert!(st.evicted_nonzero > 0 && st.evicted_nonzero < st.evictions);
    // Each victim was stored some writes (seconds, here) before it went.
    assert!(
        st.evicted_time > 0 && st.evicted_time < 400,
        "{}",
        st.evicted_time
    );
}

#[test]
fn the_eviction_log_records_victims_while_on() {
    const BUDGET: usize = 128 * 1024;
    let mut s = shard_with(BUDGET, 1 << 20);
    let value = [b'x'; 1000];
    for i in 0..200u32 {
        set(&mut s, format!("a{i}").as_bytes(), &value, 0, NOW);
    }
    let mut seen = 0;
    s.take_evictions(|_| seen += 1);
    assert_eq!(seen, 0, "off by default");
    s.set_eviction_log(true);
    let before = s.stats().evictions;
    for i in 0..50u32 {
        set(&mut s, format!("b{i}").as_bytes(), &value, 0, NOW + 5);
    }
    let mut victims = Vec::new();
    s.take_evictions(|e| victims.push(e.clone()));
    assert_eq!(victims.len() as u64, s.stats().evictions - before);
    assert!(
        victims
            .iter()
            .all(|e| e.key.starts_with(b"a") && e.value_len == 1000)
    );
    assert!(
        victims
            .iter()
            .all(|e| !e.fetched && e.last_access == NOW as u32)
    );
    s.take_evictions(|_| panic!("taken once"));
    s.set_eviction_log(false);
    set(&mut s, b"c", &value, 0, NOW);
    s.take_evictions(|_| panic!("off again"));
}

#[test]
fn visit_walks_live_items_in_slices_without_touching_them() {
    let mut s = shard();
    assert_eq!(s.num_buckets(), 0);
    for i in 0..100u32 {
        set(&mut s, format!("k{i}").as_bytes(), b"v", 0, NOW);
    }
    set(&mut s, b"dies", b"v", 5, NOW);
    let buckets = s.num_buckets();
    let mut keys = Vec::new();
    let mut at = 0;
    while at < buckets {
        s.visit(at, at + 7, NOW + 5, |key, item, size| {
            assert_eq!(item.value, b"v");
            assert_eq!(size, item_size(key.len(), 1));
            keys.push(key.to_vec());
        });
        at += 7;
    }
    keys.sort();
    let mut want: Vec<Vec<u8>> = (0..100u32).map(|i| format!("k{i}").into_bytes()).collect();
    want.sort();
    assert_eq!(keys, want, "every live item once, the dead one left out");
    let st = s.stats();
    assert_eq!((st.get_hits, st.reclaimed, st.curr_items), (0, 0, 101));
    s.visit(0, usize::MAX, NOW, |_, item, _| assert!(!item.fetched));
}

#[test]
fn a_walk_in_order_visits_each_key_once_while_the_table_shrinks_and_grows() {
    let mut s = shard();
    fill(&mut s, "kept", 0..1_000, b"v", 0);
    fill(&mut s, "filler", 0..20_000, b"v", 0);
    let mut seen: std::collections::HashMap<Vec<u8>, usize> = Default::default();
    let (mut shrunk, mut grown) = (None, None);
    let mut from = Some(0);
    let mut windows = 0;
    while let Some(at) = from {
        from = s.visit_in_order(at, 5, NOW, |key, _, _| {
            *seen.entry(key.to_vec()).or_default() += 1;
        });
        windows += 1;
        assert!(windows < 100_000, "the walk ends");
        if windows == 10 {
            // Most items go and the budget falls: the table is rebuilt at half its size (a
            // step that may take no item evicts none).
            let before = s.num_buckets();
            for i in 0..20_000u32 {
                s.unlink(format!("filler{i}").as_bytes(), NOW);
            }
            s.set_memory_limit(1 << 20);
            s.shrink(0, NOW);
            s.set_memory_limit(64 << 20);
            shrunk = Some((before, s.num_buckets()));
        }
        if windows == 30 {
            let before = s.num_buckets();
            fill(&mut s, "new", 0..60_000, b"v", 0);
            grown = Some((before, s.num_buckets()));
        }
    }
    let (before, after) = shrunk.unwrap();
    assert!(after < before, "shrunk: {before} -> {after} buckets");
    let (before, after) = grown.unwrap();
    assert!(after > before, "grew: {before} -> {after} buckets");
    let mut live = Vec::new();
    s.visit(0, usize::MAX, NOW, |key, _, _| live.push(key.to_vec()));
    let held: Vec<&Vec<u8>> = live.iter().filter(|k| k.starts_with(b"kept")).collect();
    assert_eq!(held.len(), 1_000, "nothing evicted");
    for key in held {
        assert_eq!(seen.get(key), Some(&1), "{}", String::from_utf8_lossy(key));
    }
    assert!(seen.values().all(|&n| n == 1), "no key twice");
}

#[test]
fn a_window_in_order_costs_its_buckets_not_the_table() {
    let mut s = shard();
    fill(&mut s, "k", 0..50_000, b"v", 0);
    let per_bucket = s.len() as f64 / s.num_buckets() as f64;
    let mut sizes = Vec::new();
    let mut from = Some(0);
    let mut total = 0;
    while let Some(at) = from {
        let mut n = 0;
        from = s.visit_in_order(at, 4, NOW, |_, _, _| n += 1);
        sizes.push(n);
        total += n;
    }
    assert_eq!(total, 50_000, "every key once");
    assert_eq!(
        sizes.len(),
        s.num_buckets().div_ceil(4),
        "one window per 4 buckets"
    );
    let largest = *sizes.iter().max().unwrap();
    assert!(
        (largest as f64) < 4.0 * per_bucket * 3.0,
        "a window holds about its buckets' items: {largest}, {per_bucket:.1} a bucket"
    );
    assert_eq!(s.visit_in_order(1 << 32, 4, NOW, |_, _, _| panic!()), None);
    assert_eq!(shard().visit_in_order(0, 4, NOW, |_, _, _| panic!()), None);
}

#[test]
fn reset_stats_keeps_what_describes_the_cache() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    get(&mut s, b"k", NOW);
    get(&mut s, b"nope", NOW);
    let before = s.stats().clone();
    s.reset_stats();
    let after = s.stats();
    assert_eq!(
        (after.get_hits, after.get_misses, after.total_items),
        (0, 0, 0)
    );
    assert_eq!(
        (
            after.curr_items,
            after.bytes,
            after.heap_bytes,
            after.limit_maxbytes
        ),
        (
            before.curr_items,
            before.bytes,
            before.heap_bytes,
            before.limit_maxbytes
        )
    );
    s.check_invariants();
}

#[test]
fn overwrite_under_a_full_budget() {
    const BUDGET: usize = 128 * 1024;
    let mut s = shard_with(BUDGET, 1 << 20);
    for i in 0..1000u32 {
        set(
            &mut s,
            format!("k{}", i % 7).as_bytes(),
            &vec![b'v'; 100 + (i as usize * 37) % 30_000],
            0,
            NOW,
        );
    }
    s.check_invariants();
    // Appending past the budget evicts others, never the item being grown.
    for _ in 0..10 {
        s.store(Write::new(StoreMode::Append, b"k1", &[b'a'; 5000]), NOW)
            .unwrap();
        s.check_invariants();
        assert!(get(&mut s, b"k1", NOW).is_some());
    }
}

#[test]
fn table_growth_is_charged_exactly() {
    let mut s = shard_with(256 << 20, 1 << 20);
    let mut last_buckets = 0;
    let mut growths = 0;
    for i in 0..100_000u32 {
        s.store(Write::new(StoreMode::Set, &i.to_le_bytes(), b"v"), NOW)
            .unwrap();
        if s.num_buckets() != last_buckets {
            // check_invariants compares the charged table bytes to the allocation.
            s.check_invariants();
            last_buckets = s.num_buckets();
            growths += 1;
        }
    }
    assert!(growths >= 15, "{growths}");
    s.check_invariants();
}

#[test]
fn small_items_when_the_table_cannot_grow() {
    // Tiny items: the table, not the items, decides how many fit. Pick a budget where
    // doubling the table would not fit, so the table is capped and rebuilt in place.
    for budget in [40_000usize, 100_000, 300_000, 1 << 20] {
        let mut s = shard_with(budget, 1 << 20);
        for i in 0..60_000u32 {
            s.store(Write::new(StoreMode::Set, &i.to_le_bytes(), b"v"), NOW)
                .unwrap();
            if i % 1999 == 0 {
                s.check_invariants();
            }
        }
        s.check_invariants();
        assert!(s.stats().evictions > 30_000, "budget {budget}");
        assert!(s.rebuilds() > 0, "budget {budget}: the capped path ran");
        // The newest keys are there.
        for i in 59_990..60_000u32 {
            assert!(
                s.get(&i.to_le_bytes(), NOW).is_some(),
                "budget {budget}: {i}"
            );
        }
    }
}

#[test]
fn churn_with_deletes_keeps_accounting() {
    let mut s = shard_with(200_000, 1 << 20);
    for i in 0..50_000u32 {
        let key = (i % 3000).to_le_bytes();
        match i % 5 {
            0 => {
                let _ = s.delete(&key, 0, NOW);
            }
            1 => {
                let _ = s.store(Write::new(StoreMode::Append, &key, b"++"), NOW);
            }
            _ => {
                s.store(
                    Write::new(StoreMode::Set, &key, &vec![b'v'; (i % 200) as usize]),
                    NOW,
                )
                .unwrap();
            }
        }
        if i % 101 == 0 {
            s.check_invariants();
        }
    }
    s.check_invariants();
}

// ---- item metadata for the meta protocol ----

#[test]
fn views_report_expiry_and_whether_fetched_before() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 100, NOW);
    set(&mut s, b"forever", b"v", 0, NOW);
    let first = s.get(b"k", NOW).unwrap();
    assert_eq!(first.exptime, (NOW + 100) as u32);
    assert!(!first.fetched, "not fetched before this get");
    assert!(s.get(b"k", NOW).unwrap().fetched);
    assert_eq!(s.get(b"forever", NOW).unwrap().exptime, 0);
    let touched = s.touch(b"forever", Ttl::Exptime(30), NOW).unwrap();
    assert_eq!(touched.exptime, (NOW + 30) as u32);
    assert!(touched.fetched, "the get before counts");
    let fresh = s.touch(b"k", Ttl::Exptime(0), NOW).unwrap();
    assert_eq!(fresh.exptime, 0);
    assert!(!fresh.stale && !fresh.win_sent);
}

#[test]
fn peek_neither_marks_nor_counts() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    let before = s.stats().clone();
    let seen = s.peek(b"k", NOW).unwrap();
    assert_eq!((seen.value, seen.fetched), (&b"v"[..], false));
    assert!(s.peek(b"missing", NOW).is_none());
    assert!(s.peek(b"", NOW).is_none());
    assert_eq!(*s.stats(), before);
    assert!(!s.get(b"k", NOW).unwrap().fetched, "peek did not mark it");
    // A dead item is reclaimed by a peek too.
    set(&mut s, b"short", b"v", 10, NOW);
    assert!(s.peek(b"short", NOW + 10).is_none());
    assert_eq!(s.stats().reclaimed, 1);
    s.check_invariants();
}

#[test]
fn mark_fetched_marks_and_records_the_access_without_counting() {
    let mut s = shard();
    set(&mut s, b"k", b"v", 0, NOW);
    let before = s.stats().clone();
    assert!(s.mark_fetched(b"k", NOW + 3));
    assert_eq!(*s.stats(), before, "no get is counted");
    let seen = s.peek(b"k", NOW + 5).unwrap();
    assert!(seen.fetched);
    assert_eq!(seen.idle_secs(NOW + 5), 2);
    assert!(!s.mark_fetched(b"missing", NOW));
    assert!(!s.mark_fetched(b"", NOW));
    set(&mut s, b"short", b"v", 10, NOW);
    assert!(
        !s.mark_fetched(b"short", NOW + 10),
        "a dead item is not there"
    );
    s.check_invariants();
}

#[test]
fn invalidate_marks_stale_with_a_new_cas_and_optional_expiry() {
    let mut s = shard();
    let cas = set(&mut s, b"k", b"v", 0, NOW);
    assert!(s.claim_win(b"k", NOW));
    assert!(s.peek(b"k", NOW).unwrap().win_sent);
    assert_eq!(
        s.invalidate(b"k", cas + 1, None, NOW),
        Err(StoreError::Exists)
    );
    let new_cas = s.invalidate(b"k", cas, Some(60), NOW).unwrap();
    assert!(new_cas > cas);
    let item = s.peek(b"k", NOW).unwrap();
    assert_eq!(
        (item.value, item.cas, item.exptime),
        (&b"v"[..], new_cas, (NOW + 60) as u32)
    );
    assert!(
        item.stale && !item.win_sent,
        "stale, and its token is up for grabs again"
    );
    // The next CAS handed out is still unique.
    assert!(set(&mut s, b"other", b"v", 0, NOW) > new_cas);
    // Any CAS with 0; a store replaces the stale item with a fresh one.
    assert!(s.invalidate(b"k", 0, None, NOW).is_ok());
    set(&mut s, b"k", b"fresh", 0, NOW);
    assert!(!s.peek(b"k", NOW).unwrap().stale);
    assert_eq!(
        s.invalidate(b"nope", 0, None, NOW),
        Err(StoreError::NotFound)
    );
    assert_eq!(s.stats().delete_misses, 1);
    assert!(!s.claim_win(b"nope", NOW));
    s.check_invariants();
}

#[test]
fn flags_survive_an_in_place_incr() {
    let mut s = shard();
    set(&mut s, b"n", b"10", 0, NOW);
    s.claim_win(b"n", NOW);
    s.invalidate(b"n", 0, None, NOW).unwrap();
    s.claim_win(b"n", NOW);
    s.incr_decr(Arith::new(b"n", Delta::Incr, 5), NOW).unwrap();
    let item = s.peek(b"n", NOW).unwrap();
    assert_eq!(item.value, b"15");
    assert!(item.stale && item.win_sent);
}

#[test]
fn marks_survive_a_shorter_incr_result_not_a_longer_one() {
    // memcached rewrites a result that fits the old value in place (the item keeps its
    // marks) and makes a new item for a longer one.
    let mut s = shard();
    set(&mut s, b"n", b"100", 0, NOW);
    s.get(b"n", NOW).unwrap();
    s.claim_win(b"n", NOW);
    s.invalidate(b"n", 0, None, NOW).unwrap();
    s.claim_win(b"n", NOW);
    s.incr_decr(Arith::new(b"n", Delta::Decr, 95), NOW).unwrap();
    let item = s.peek(b"n", NOW).unwrap();
    assert_eq!(item.value, b"5");
    assert!(item.fetched && item.stale && item.win_sent);
    s.incr_decr(Arith::new(b"n", Delta::Incr, 5), NOW).unwrap();
    let item = s.peek(b"n", NOW).unwrap();
    assert_eq!(item.value, b"10");
    assert!(!item.fetched && !item.stale && !item.win_sent);
    s.check_invariants();
}

// ---- client-chosen CAS (meta `E`) and flush generations ----

#[track_caller]
fn set_cas(s: &mut Shard, key: &[u8], value: &[u8], new_cas: u64, now: u64) -> u64 {
    let cas = s
        .store(
            Write {
                new_cas: NewCas::Given(new_cas),
                ..Write::new(StoreMode::Set, key, value)
            },
            now,
        )
        .unwrap();
    s.check_invariants();
    cas
}

#[test]
fn a_given_cas_is_stored_as_is_and_leaves_the_counter_alone() {
    let mut s = shard();
    let first = set(&mut s, b"a", b"1", 0, NOW);
    for given in [1_000_000, 0, 1, first, u64::MAX] {
        assert_eq!(set_cas(&mut s, b"b", b"2", given, NOW), given);
        assert_eq!(get(&mut s, b"b", NOW), Some((b"2".to_vec(), 0, given)));
    }
    assert_eq!(
        set(&mut s, b"c", b"3", 0, NOW),
        first + 1,
        "the counter resumes where it was"
    );
    // Every mode, and the already-expired store, answer the given CAS.
    for mode in [StoreMode::Replace, StoreMode::Append, StoreMode::Prepend] {
        assert_eq!(
            s.store(
                Write {
                    new_cas: NewCas::Given(42),
                    ..Write::new(mode, b"c", b"x")
                },
                NOW
            ),
            Ok(42)
        );
        assert_eq!(s.peek(b"c", NOW).unwrap().cas, 42);
    }
    assert_eq!(
        s.store(
            Write {
                ttl: Ttl::Exptime(-1),
                new_cas: NewCas::Given(43),
                ..Write::new(StoreMode::Set, b"c", b"x")
            },
            NOW
        ),
        Ok(43)
    );
    assert!(s.peek(b"c", NOW).is_none());
    // Errors take nothing.
    assert_eq!(
        s.store(
            Write {
                new_cas: NewCas::Given(44),
                ..Write::new(StoreMode::Add, b"a", b"x")
            },
            NOW
        ),
        Err(StoreError::NotStored)
    );
    assert_eq!(s.peek(b"a", NOW).unwrap().cas, first);
    s.check_invariants();
}

#[test]
fn compare_and_swap_against_a_given_cas() {
    let mut s = shard();
    set_cas(&mut s, b"k", b"v1", 777, NOW);
    // A mismatch in either direction is refused; the match is accepted.
    for wrong in [776, 778, 1, u64::MAX] {
        assert_eq!(
            s.store(
                Write {
                    cas: wrong,
                    ..Write::new(StoreMode::Set, b"k", b"x")
                },
                NOW
            ),
            Err(StoreError::Exists)
        );
        assert_eq!(s.delete(b"k", wrong, NOW), Err(StoreError::Exists));
        assert_eq!(
            s.incr_decr(
                Arith {
                    cas: wrong,
                    ..Arith::new(b"k", Delta::Incr, 1)
                },
                NOW
            ),
            Err(StoreError::Exists)
        );
        assert_eq!(
            s.invalidate(b"k", wrong, None, NOW),
            Err(StoreError::Exists)
        );
    }
    assert_eq!(
        s.store(
            Write {
                cas: 777,
                new_cas: NewCas::Given(5),
                ..Write::new(StoreMode::Set, b"k", b"10")
            },
            NOW
        ),
        Ok(5),
        "a lower CAS is as good as any"
    );
    assert_eq!(s.stats().cas_hits, 1);
    assert_eq!(s.stats().cas_badval, 4);
    // incr/decr in place and reallocating, and its create path.
    assert_eq!(
        s.incr_decr(
            Arith {
                cas: 5,
                new_cas: NewCas::Given(9),
                ..Arith::new(b"k", Delta::Incr, 1)
            },
            NOW
        ),
        Ok((11, 9))
    );
    assert_eq!(
        s.incr_decr(
            Arith {
                cas: 9,
                new_cas: NewCas::Given(u64::MAX),
                ..Arith::new(b"k", Delta::Incr, 100)
            },
            NOW
        ),
        Ok((111, u64::MAX))
    );
    assert_eq!(
        s.incr_decr(
            Arith {
                cas: u64::MAX,
                ..Arith::new(b"k", Delta::Decr, 1)
            },
            NOW
        ),
        Ok((110, 1)),
        "the counter had handed out nothing yet"
    );
    assert_eq!(
        s.incr_decr(
            Arith {
                create: Some((7, 0)),
                new_cas: NewCas::Given(70),
                ..Arith::new(b"n", Delta::Incr, 1)
            },
            NOW
        ),
        Ok((7, 70))
    );
    assert_eq!(s.peek(b"n", NOW).unwrap().cas, 70);
    assert_eq!(s.delete(b"n", 70, NOW), Ok(()));
    // A CAS of 0 can be given, but then never compared against (0 means "no compare").
    set_cas(&mut s, b"z", b"v", 0, NOW);
    assert_eq!(s.peek(b"z", NOW).unwrap().cas, 0);
    assert!(s.store(Write::new(StoreMode::Set, b"z", b"w"), NOW).is_ok());
    s.check_invariants();
}

#[test]
fn invalidate_with_a_given_cas_keeps_the_token_rules() {
    let mut s = shard();
    set_cas(&mut s, b"k", b"v", 100, NOW);
    assert!(s.claim_win(b"k", NOW));
    assert_eq!(
        s.invalidate_with(b"k", 100, Some(30), NewCas::Given(50), NOW),
        Ok(50)
    );
    let item = s.peek(b"k", NOW).unwrap();
    assert_eq!((item.cas, item.exptime), (50, (NOW + 30) as u32));
    assert!(item.stale && !item.win_sent);
    assert!(s.claim_win(b"k", NOW));
    assert!(s.peek(b"k", NOW).unwrap().win_sent);
    // The CAS compare uses the given CAS, not its order.
    assert_eq!(
        s.invalidate_with(b"k", 100, None, NewCas::Next, NOW),
        Err(StoreError::Exists)
    );
    assert_eq!(s.invalidate_with(b"k", 50, None, NewCas::Next, NOW), Ok(1));
    // A store replaces the stale item with a fresh one, whatever CAS it gets.
    set_cas(&mut s, b"k", b"fresh", 1, NOW);
    let item = s.peek(b"k", NOW).unwrap();
    assert!(!item.stale && !item.win_sent);
    s.check_invariants();
}

/// Regression: flush_all used to kill every item whose CAS was at or below the last one
/// issued, so an item stored after a flush with a low client-chosen CAS was dead on arrival,
/// and one stored before it with a high CAS survived it.
#[test]
fn flush_all_now_ignores_client_cas_values() {
    let mut s = shard();
    set_cas(&mut s, b"high", b"1", u64::MAX, NOW);
    set_cas(&mut s, b"zero", b"1", 0, NOW);
    set(&mut s, b"plain", b"1", 0, NOW);
    s.flush_all(0, NOW);
    for key in [&b"high"[..], b"zero", b"plain"] {
        assert_eq!(get(&mut s, key, NOW), None, "{key:?}");
    }
    assert_eq!(s.stats().get_flushed, 3);
    set_cas(&mut s, b"low", b"2", 1, NOW);
    set(&mut s, b"plain", b"2", 0, NOW);
    assert_eq!(get(&mut s, b"low", NOW), Some((b"2".to_vec(), 0, 1)));
    assert!(get(&mut s, b"plain", NOW).is_some());
    // A CAS compare with the given CAS still works after the flush.
    assert!(
        s.store(
            Write {
                cas: 1,
                ..Write::new(StoreMode::Set, b"low", b"3")
            },
            NOW
        )
        .is_ok()
    );
    s.check_invariants();
}

#[test]
fn flush_all_delayed_ignores_client_cas_values() {
    let mut s = shard();
    set_cas(&mut s, b"early", b"1", u64::MAX, NOW);
    s.flush_all(10, NOW);
    set_cas(&mut s, b"mid", b"2", 1, NOW + 5);
    set(&mut s, b"mid-plain", b"2", 0, NOW + 5);
    assert!(get(&mut s, b"early", NOW + 9).is_some());
    assert!(get(&mut s, b"mid", NOW + 9).is_some());
    // In-place changes before the due time do not save an item either.
    s.incr_decr(
        Arith {
            create: Some((1, 0)),
            new_cas: NewCas::Given(3),
            ..Arith::new(b"n", Delta::Incr, 1)
        },
        NOW + 6,
    )
    .unwrap();
    s.incr_decr(
        Arith {
            new_cas: NewCas::Given(1 << 63),
            ..Arith::new(b"n", Delta::Incr, 1)
        },
        NOW + 7,
    )
    .unwrap();
    s.touch(b"mid", Ttl::Exptime(0), NOW + 8).unwrap();
    set_cas(&mut s, b"late", b"3", 0, NOW + 10);
    for key in [&b"early"[..], b"mid", b"mid-plain", b"n"] {
        assert_eq!(get(&mut s, key, NOW + 10), None, "{key:?}");
    }
    assert_eq!(get(&mut s, b"late", NOW + 10), Some((b"3".to_vec(), 0, 0)));
    assert_eq!(s.stats().get_flushed, 4);
    s.check_invariants();
}

#[test]
fn flush_generations_wrap_without_resurrecting_anything() {
    let mut s = shard();
    set(&mut s, b"old", b"1", 0, NOW);
    s.flush_all(0, NOW);
    // `old` is dead but unclaimed, stamped with generation 0. Skip ahead to the last
    // generation before the count wraps back to 0 (as 2^17 - 2 flushes would).
    s.skip_to_generation(GENERATION_MASK);
    set_cas(&mut s, b"recent", b"2", 5, NOW);
    assert!(get(&mut s, b"recent", NOW).is_some());
    assert_eq!(s.stats().reclaimed, 0);
    s.flush_all(0, NOW);
    // The wrapping flush reclaimed everything at once; nothing comes back in generation 0.
    assert!(s.is_empty());
    assert_eq!(s.stats().reclaimed, 2);
    assert_eq!(s.stats().expired_unfetched, 1, "old was never read");
    assert_eq!(get(&mut s, b"old", NOW), None);
    assert_eq!(get(&mut s, b"recent", NOW), None);
    s.check_invariants();
    set(&mut s, b"new", b"3", 0, NOW);
    assert!(get(&mut s, b"new", NOW).is_some());
    s.flush_all(0, NOW);
    assert_eq!(get(&mut s, b"new", NOW), None);
    s.check_invariants();
}

#[test]
fn delayed_flush_can_wrap_the_generation_too() {
    let mut s = shard();
    s.skip_to_generation(GENERATION_MASK);
    set(&mut s, b"a", b"1", 0, NOW);
    s.flush_all(5, NOW);
    assert!(get(&mut s, b"a", NOW + 4).is_some());
    set(&mut s, b"b", b"1", 0, NOW + 5);
    assert_eq!(get(&mut s, b"a", NOW + 5), None);
    assert!(get(&mut s, b"b", NOW + 5).is_some());
    s.check_invariants();
}

// ---- last access ----

/// `(last_access, idle_secs(now))` as a peek sees them.
#[track_caller]
fn access(s: &mut Shard, key: &[u8], now: u64) -> (u32, u64) {
    let item = s.peek(key, now).unwrap();
    (item.last_access, item.idle_secs(now))
}

#[test]
fn last_access_follows_stores_fetches_and_touches() {
    let mut s = shard();
    let t = |secs: u64| (NOW + secs) as u32;
    set(&mut s, b"k", b"10", 0, NOW);
    assert_eq!(access(&mut s, b"k", NOW + 3), (t(0), 3));
    // A peek records nothing.
    assert_eq!(access(&mut s, b"k", NOW + 4), (t(0), 4));
    // A get reports the access before it, then records its own.
    let seen = s.get(b"k", NOW + 5).unwrap();
    assert_eq!((seen.last_access, seen.idle_secs(NOW + 5)), (t(0), 5));
    assert_eq!(access(&mut s, b"k", NOW + 5), (t(5), 0));
    let seen = s.touch(b"k", Ttl::Exptime(100), NOW + 7).unwrap();
    assert_eq!(seen.last_access, t(5));
    assert_eq!(access(&mut s, b"k", NOW + 8), (t(7), 1));
    // Modifications count as an access: in-place incr, reallocating incr, append, set.
    s.incr_decr(Arith::new(b"k", Delta::Incr, 1), NOW + 9)
        .unwrap();
    assert_eq!(access(&mut s, b"k", NOW + 9).0, t(9));
    s.incr_decr(Arith::new(b"k", Delta::Incr, 100), NOW + 10)
        .unwrap();
    assert_eq!(access(&mut s, b"k", NOW + 10).0, t(10));
    s.store(Write::new(StoreMode::Append, b"k", b"0"), NOW + 11)
        .unwrap();
    assert_eq!(access(&mut s, b"k", NOW + 11).0, t(11));
    // Metadata changes do not: invalidate, claim_win, a failed add.
    s.invalidate_with(b"k", 0, Some(60), NewCas::Next, NOW + 12)
        .unwrap();
    s.claim_win(b"k", NOW + 13);
    assert_eq!(
        s.store(Write::new(StoreMode::Add, b"k", b"x"), NOW + 14),
        Err(StoreError::NotStored)
    );
    assert_eq!(access(&mut s, b"k", NOW + 14), (t(11), 3));
    set_cas(&mut s, b"k", b"v", 9, NOW + 20);
    assert_eq!(access(&mut s, b"k", NOW + 20), (t(20), 0));
    // A clock that went back reports 0 seconds, not a wrapped number.
    assert_eq!(access(&mut s, b"k", NOW + 19), (t(20), 0));
    // The fetched mark is unaffected.
    assert!(!s.peek(b"k", NOW + 20).unwrap().fetched);
    assert!(!s.get(b"k", NOW + 21).unwrap().fetched);
    assert!(s.get(b"k", NOW + 22).unwrap().fetched);
    s.check_invariants();
}

#[test]
fn last_access_of_created_and_touched_counters() {
    let mut s = shard();
    s.incr_decr(
        Arith {
            create: Some((5, 0)),
            ..Arith::new(b"n", Delta::Incr, 1)
        },
        NOW + 2,
    )
    .unwrap();
    assert_eq!(access(&mut s, b"n", NOW + 2).0, (NOW + 2) as u32);
    // A touch that expires the item still reports it once, with the access before.
    let seen = s.touch(b"n", Ttl::Exptime(-1), NOW + 4).unwrap();
    assert_eq!(seen.idle_secs(NOW + 4), 2);
    assert!(s.peek(b"n", NOW + 4).is_none());
}

// ---- milliseconds (Redis expiry) ----

const NOW_MS: u64 = NOW * 1000;

#[track_caller]
fn set_at_ms(s: &mut Shard, key: &[u8], value: &[u8], ttl: Ttl, now: Now) -> u64 {
    let cas = s
        .store(
            Write {
                ttl,
                ..Write::new(StoreMode::Set, key, value)
            },
            now,
        )
        .unwrap();
    s.check_invariants();
    cas
}

#[test]
fn millisecond_expiry_is_honoured_to_the_millisecond() {
    let mut s = shard();
    let start = Now::from_millis(NOW_MS + 250);
    let at = start.millis() + 100;
    set_at_ms(&mut s, b"k", b"v", Ttl::AtMillis(at), start);
    let view = s.get(b"k", Now::from_millis(at - 1)).unwrap();
    assert_eq!(view.expiry_ms, at);
    assert_eq!(
        u64::from(view.exptime),
        at / 1000,
        "the second, rounded down"
    );
    assert!(s.get(b"k", Now::from_millis(at)).is_none());
    assert_eq!(s.stats().get_expired, 1);
    assert!(s.is_empty(), "reclaimed on access");
    s.check_invariants();
}

#[test]
fn a_millisecond_not_after_now_stores_nothing_and_removes_the_old_item() {
    let mut s = shard();
    let now = Now::from_millis(NOW_MS + 10);
    set(&mut s, b"k", b"old", 0, NOW);
    set_at_ms(&mut s, b"k", b"new", Ttl::AtMillis(now.millis()), now);
    assert!(s.get(b"k", now).is_none());
    assert!(s.is_empty());
    set_at_ms(&mut s, b"k", b"new", Ttl::AtMillis(0), now);
    assert!(s.is_empty());
}

#[test]
fn keep_keeps_a_live_items_expiry_and_gives_a_new_one_none() {
    let mut s = shard();
    let now = Now::from_millis(NOW_MS);
    let at = NOW_MS + 5_432;
    set_at_ms(&mut s, b"k", b"v", Ttl::AtMillis(at), now);
    set_at_ms(&mut s, b"k", b"w", Ttl::Keep, now);
    let view = s.get(b"k", now).unwrap();
    assert_eq!((view.value, view.expiry_ms), (&b"w"[..], at));
    assert!(s.get(b"k", Now::from_millis(at)).is_none());
    set_at_ms(&mut s, b"fresh", b"v", Ttl::Keep, now);
    assert_eq!(s.get(b"fresh", now).unwrap().expiry_ms, 0, "never");
    // A touch with Keep changes nothing but the access.
    set_at_ms(&mut s, b"t", b"v", Ttl::AtMillis(at), now);
    assert_eq!(s.touch(b"t", Ttl::Keep, now).unwrap().expiry_ms, at);
    assert_eq!(s.peek(b"t", now).unwrap().expiry_ms, at);
}

#[test]
fn touch_sets_and_clears_millisecond_expiry() {
    let mut s = shard();
    let now = Now::from_millis(NOW_MS + 999);
    set(&mut s, b"k", b"v", 0, NOW);
    let at = now.millis() + 1;
    s.touch(b"k", Ttl::AtMillis(at), now).unwrap();
    assert_eq!(s.peek(b"k", now).unwrap().expiry_ms, at);
    s.touch(b"k", Ttl::Exptime(0), now).unwrap();
    assert_eq!(s.peek(b"k", now).unwrap().expiry_ms, 0);
    assert!(s.get(b"k", Now::from_millis(at + 100_000)).is_some());
    s.touch(b"k", Ttl::AtMillis(at), now).unwrap();
    assert!(s.get(b"k", Now::from_millis(at)).is_none());
    s.check_invariants();
}

#[test]
fn memcached_seconds_stay_whole_seconds_with_a_millisecond_clock() {
    let mut s = shard();
    let now = Now::from_millis(NOW_MS + 900);
    set_at_ms(&mut s, b"k", b"v", Ttl::Exptime(1), now);
    assert_eq!(s.peek(b"k", now).unwrap().expiry_ms, (NOW + 1) * 1000);
    assert!(s.get(b"k", Now::from_millis(NOW_MS + 1999)).is_none());
    set_at_ms(&mut s, b"k", b"v", Ttl::Exptime(1), now);
    assert!(s.get(b"k", Now::from_millis(NOW_MS + 999)).is_some());
    assert!(s.get(b"k", Now::from_secs(NOW + 1)).is_none());
}

#[test]
fn delayed_flush_with_a_millisecond_clock_comes_at_its_second() {
    let mut s = shard();
    let now = Now::from_millis(NOW_MS + 500);
    set(&mut s, b"a", b"1", 0, NOW);
    s.flush_all(2, now);
    assert!(s.get(b"a", Now::from_millis(NOW_MS + 1999)).is_some());
    assert!(s.get(b"a", Now::from_secs(NOW + 2)).is_none());
}

#[test]
fn expiry_milliseconds_and_the_flush_generation_stay_apart() {
    let mut s = shard();
    let now = Now::from_millis(NOW_MS);
    let at = NOW_MS + 10_999;
    s.skip_to_generation(GENERATION_MASK);
    set_at_ms(&mut s, b"k", b"v", Ttl::AtMillis(at), now);
    assert_eq!(s.peek(b"k", now).unwrap().expiry_ms, at);
    // The wrap of the count reclaims it; a new item after it keeps its milliseconds.
    s.flush_all(0, now);
    assert!(s.is_empty());
    set_at_ms(&mut s, b"k", b"v", Ttl::AtMillis(at), now);
    assert_eq!(s.peek(b"k", now).unwrap().expiry_ms, at);
    assert!(s.get(b"k", Now::from_millis(at - 1)).is_some());
    s.check_invariants();
}

#[test]
fn items_with_an_expiry_are_counted() {
    let mut s = shard();
    let now = Now::from_secs(NOW);
    set(&mut s, b"never", b"v", 0, NOW);
    set(&mut s, b"soon", b"v", 10, NOW);
    set_at_ms(&mut s, b"ms", b"v", Ttl::AtMillis(NOW_MS + 10), now);
    assert_eq!(s.stats().curr_expiring, 2);
    // Overwritten without one, touched to one, persisted, deleted, expired, flushed.
    set(&mut s, b"soon", b"v", 0, NOW);
    assert_eq!(s.stats().curr_expiring, 1);
    s.touch(b"never", Ttl::Exptime(5), now).unwrap();
    assert_eq!(s.stats().curr_expiring, 2);
    s.touch(b"ms", Ttl::Exptime(0), now).unwrap();
    assert_eq!(s.stats().curr_expiring, 1);
    s.delete(b"never", 0, NOW).unwrap();
    assert_eq!(s.stats().curr_expiring, 0);
    set(&mut s, b"gone", b"v", 1, NOW);
    assert_eq!(s.stats().curr_expiring, 1);
    assert!(s.get(b"gone", NOW + 1).is_none());
    assert_eq!(s.stats().curr_expiring, 0);
    set(&mut s, b"flushed", b"v", 100, NOW);
    s.flush_all(0, NOW);
    s.sweep_expired(100, NOW);
    s.check_invariants();
    assert_eq!(s.stats().curr_expiring, 0);
}

// ---- the LRU crawler ----

/// Stores `key{i}` for every `i` in `range` with `value` (no invariant check per store: the
/// check walks the table).
#[track_caller]
fn fill(s: &mut Shard, prefix: &str, range: std::ops::Range<u32>, value: &[u8], exptime: i64) {
    for i in range {
        let key = format!("{prefix}{i}");
        s.store(
            Write {
                ttl: Ttl::Exptime(exptime),
                ..Write::new(StoreMode::Set, key.as_bytes(), value)
            },
            NOW,
        )
        .unwrap();
    }
    s.check_invariants();
}

#[test]
fn crawl_takes_back_dead_items_in_bounded_steps_and_counts_them() {
    let mut s = shard();
    for i in 0..300u32 {
        // A third never expire, a third expire at NOW + 10, a third are fetched and expire.
        let exptime = if i % 3 == 0 { 0 } else { 10 };
        set(&mut s, format!("k{i}").as_bytes(), b"v", exptime, NOW);
        if i % 3 == 2 {
            get(&mut s, format!("k{i}").as_bytes(), NOW);
        }
    }
    let mut cursor = 0;
    let mut checked = 0;
    let mut reclaimed = 0;
    let mut calls = 0;
    while cursor < s.num_buckets() {
        let step = s.crawl(cursor, 16, NOW + 10);
        assert!(step.checked <= 16 && step.next > cursor, "{step:?}");
        s.check_invariants();
        cursor = step.next;
        checked += step.checked;
        reclaimed += step.reclaimed;
        calls += 1;
    }
    assert!(calls >= 300 / 16, "{calls} calls");
    assert_eq!((checked, reclaimed, s.len()), (300, 200, 100));
    let st = s.stats();
    assert_eq!((st.crawler_items_checked, st.crawler_reclaimed), (300, 200));
    // Only the crawler's counters: not `reclaimed`, which counts what stores and reads take
    // back. memcached's crawler counts the unfetched expired items in `expired_unfetched`.
    assert_eq!((st.reclaimed, st.expired_unfetched), (0, 100));
    // Past the end, nothing more.
    let end = s.crawl(cursor, 16, NOW + 10);
    assert_eq!((end.checked, end.next), (0, s.num_buckets()));
}

#[test]
fn crawl_counts_flushed_items_reclaimed_not_unfetched() {
    let mut s = shard();
    for i in 0..10u32 {
        set(&mut s, format!("k{i}").as_bytes(), b"v", 0, NOW);
    }
    s.flush_all(0, NOW);
    let step = s.crawl(0, usize::MAX, NOW);
    assert_eq!((step.checked, step.reclaimed), (10, 10));
    assert_eq!(s.stats().expired_unfetched, 0, "flushed, not expired");
    assert!(s.is_empty());
}

#[test]
fn crawl_of_an_empty_shard_is_done_at_once() {
    let mut s = shard();
    assert_eq!(s.crawl(0, 10, NOW), Crawled::default());
}

// ---- slabs reassign: a page's worth of items released ----

#[test]
fn release_frees_about_a_page_and_counts_it_apart_from_evictions() {
    for evict in [true, false] {
        let mut s = shard();
        s.set_eviction(evict);
        fill(&mut s, "k", 0..3000, &[b'x'; 1000], 0);
        let before = s.stats().heap_bytes;
        let items = s.len();
        // A few items per call: the page is freed over several calls.
        let mut freed = 0;
        let mut calls = 0;
        while freed < 1 << 20 {
            let step = s.release((1 << 20) - freed, 64, NOW);
            assert!(step > 0, "eviction {evict}: made progress");
            freed += step;
            calls += 1;
            s.check_invariants();
        }
        assert!(calls > 1, "bounded per call");
        assert_eq!(before - s.stats().heap_bytes, freed as u64);
        let gone = (items - s.len()) as u64;
        assert!(freed <= (1 << 20) + 1100, "about one page: {freed}");
        let st = s.stats();
        assert_eq!(st.slab_reassign_evictions_nomem, gone, "eviction {evict}");
        assert_eq!(st.evictions, 0);
    }
}

#[test]
fn release_of_an_empty_shard_frees_nothing() {
    let mut s = shard();
    assert_eq!(s.release(1 << 20, 100, NOW), 0);
}

// ---- cache_memlimit: the budget changed at run time ----

#[test]
fn a_raised_budget_is_usable_at_once() {
    let mut s = shard_with(1 << 20, 1 << 20);
    let value = vec![b'x'; 10_000];
    fill(&mut s, "k", 0..200, &value, 0);
    let evictions = s.stats().evictions;
    assert!(evictions > 0);
    s.set_memory_limit(4 << 20);
    assert_eq!(s.stats().limit_maxbytes, 4 << 20);
    fill(&mut s, "k", 200..300, &value, 0);
    assert_eq!(s.stats().evictions, evictions, "room enough now");
    assert!(s.stats().heap_bytes > 1 << 20);
}

#[test]
fn a_lowered_budget_is_reached_in_bounded_steps_with_the_table_shrunk() {
    let mut s = shard_with(64 << 20, 1 << 20);
    fill(&mut s, "key:", 0..100_000, b"value", 0);
    let buckets = s.num_buckets();
    let heap = s.stats().heap_bytes;
    assert!(heap > 4 << 20, "{heap}");
    s.set_memory_limit(1 << 20);
    assert!(s.over_budget());
    // A store over the budget makes room for itself only: the heap does not grow, and one
    // store does not pay for the whole difference.
    let evictions = s.stats().evictions;
    set(&mut s, b"new", b"value", 0, NOW);
    assert!(s.stats().heap_bytes <= heap);
    assert!(s.stats().evictions - evictions <= 2);
    let mut steps = 0;
    while s.shrink(256, NOW) {
        steps += 1;
        s.check_invariants();
        assert!(steps < 10_000, "converges");
    }
    assert!(steps > 10, "{steps} steps of at most 256 evictions");
    assert!(!s.over_budget());
    assert!(s.stats().heap_bytes <= 1 << 20);
    assert!(
        s.num_buckets() <= buckets / 8,
        "the table shrank too: {} of {buckets} buckets",
        s.num_buckets()
    );
    s.check_invariants();
    // The cache works on, under its new budget.
    fill(&mut s, "again:", 0..1000, b"value", 0);
    assert!(get(&mut s, b"again:999", NOW).is_some());
    assert!(s.stats().heap_bytes <= 1 << 20);
}

#[test]
fn a_lowered_budget_with_eviction_off_keeps_live_items_and_refuses_stores() {
    let mut s = shard_with(4 << 20, 1 << 20);
    s.set_eviction(false);
    let value = vec![b'x'; 1000];
    fill(&mut s, "k", 0..1000, &value, 10);
    fill(&mut s, "k", 1000..2000, &value, 0);
    s.set_memory_limit(1 << 20);
    // Only the expired half may go; the live half stays over the budget.
    while s.shrink(100, NOW + 10) {
        if s.len() <= 1000 {
            break;
        }
    }
    assert!(s.over_budget());
    assert_eq!(s.len(), 1000);
    assert_eq!(s.stats().evictions, 0);
    assert_eq!(
        s.store(Write::new(StoreMode::Set, b"more", &value), NOW + 10),
        Err(StoreError::OutOfMemory)
    );
    s.check_invariants();
}

#[test]
fn an_emptied_shard_under_a_tiny_budget_gives_its_table_back() {
    let mut s = shard();
    fill(&mut s, "k", 0..10_000, b"v", 1);
    s.set_memory_limit(4096);
    while s.shrink(1000, NOW + 10) {}
    assert!(s.stats().heap_bytes <= 4096);
    assert_eq!(s.num_buckets(), 0, "{} buckets", s.num_buckets());
    set(&mut s, b"k", b"v", 0, NOW + 10);
    assert!(get(&mut s, b"k", NOW + 10).is_some());
}

#[test]
fn hint_is_the_items_bucket_and_block_and_changes_nothing() {
    let mut s = shard();
    assert!(s.hint(b"k").is_none(), "an empty table has no item");
    set(&mut s, b"some-key", b"its value", 0, NOW);
    set(&mut s, b"other-key", b"other value", 0, NOW);
    let stats = s.stats().clone();
    let hint = s.hint(b"some-key").expect("a stored key's item");
    let text = String::from_utf8_lossy(hint.block());
    assert!(
        text.contains("some-key") && text.ends_with("its value"),
        "{text:?}"
    );
    let other = s.hint(b"other-key").expect("a stored key's item");
    assert_ne!(hint.bucket(), other.bucket(), "one bucket per item");
    assert_eq!(hint.bucket(), s.hint(b"some-key").unwrap().bucket());
    assert_eq!(s.stats(), &stats, "a hint counts nothing");
    assert_eq!(
        value(&mut s, b"some-key", NOW).as_deref(),
        Some(&b"its value"[..])
    );
}

#[test]
fn bucket_and_item_hints_point_at_the_lookups_lines_and_change_nothing() {
    let mut s = shard();
    let empty = s.bucket_hint(b"k");
    assert!(empty.bucket().is_null(), "no table yet");
    assert!(s.item_hint(empty).is_none());
    set(&mut s, b"some-key", b"its value", 0, NOW);
    for i in 0..200 {
        set(&mut s, format!("key-{i}").as_bytes(), &[b'v'; 300], 0, NOW);
    }
    let stats = s.stats().clone();
    let bucket = s.bucket_hint(b"some-key");
    assert_eq!(bucket.bucket().addr() % 64, 0, "a bucket is one cache line");
    let item = s.item_hint(bucket).expect("a stored key's item");
    assert_eq!(item.as_ptr(), s.hint(b"some-key").unwrap().block().as_ptr());
    assert!(item.len() <= ITEM_HINT_BYTES);
    let text = String::from_utf8_lossy(item);
    assert!(text.contains("some-key"), "{text:?}");
    // A long item's hint is its first lines only.
    let long = s.item_hint(s.bucket_hint(b"key-7")).unwrap();
    assert_eq!(long.len(), ITEM_HINT_BYTES);
    assert!(
        s.item_hint(s.bucket_hint(b"never-stored"))
            .is_none_or(|i| i.len() <= 128)
    );
    assert_eq!(s.stats(), &stats, "a hint counts nothing");
}

// Regression: the table started 16 bytes past a cache line, so half the buckets straddled
// two lines and a GET prefetched for one still missed on the other.
#[test]
fn every_bucket_lies_within_one_cache_line() {
    // A small table, and one over 128 KiB, which the allocator maps (its chunk header then
    // puts the start 16 bytes past a page).
    for count in [10usize, 5_000] {
        let mut s = shard();
        for i in 0..count {
            set(&mut s, format!("key-{i}").as_bytes(), b"v", 0, NOW);
        }
        for i in (0..count).step_by(97) {
            let at = s
                .hint(format!("key-{i}").as_bytes())
                .unwrap()
                .bucket()
                .addr();
            assert_eq!(at / 64, (at + 31) / 64, "bucket of key-{i} at {at:#x}");
        }
    }
}

#[test]
fn a_same_length_store_rewrites_the_block_in_place_as_a_new_item() {
    let mut s = shard();
    let first = s
        .store(
            Write {
                flags: 7,
                ttl: Ttl::Exptime(60),
                ..Write::new(StoreMode::Set, b"k", b"one")
            },
            NOW,
        )
        .unwrap();
    assert!(s.get(b"k", NOW).is_some());
    s.claim_win(b"k", NOW);
    s.invalidate(b"k", 0, None, NOW).unwrap();
    let block = s.hint(b"k").unwrap().block().as_ptr();
    let stats = s.stats().clone();
    // Flags, expiry, CAS and the item's state all come from the new store.
    let cas = s
        .store(
            Write {
                flags: 9,
                ..Write::new(StoreMode::Replace, b"k", b"two")
            },
            NOW + 5,
        )
        .unwrap();
    s.check_invariants();
    assert!(cas > first);
    assert_eq!(
        s.hint(b"k").unwrap().block().as_ptr(),
        block,
        "no new block"
    );
    let item = s.peek(b"k", NOW + 100).unwrap();
    assert_eq!(
        (item.value, item.flags, item.cas, item.exptime),
        (&b"two"[..], 9, cas, 0)
    );
    assert!(!item.fetched && !item.stale && !item.win_sent);
    assert_eq!(item.last_access, (NOW + 5) as u32);
    assert_eq!(s.stats().bytes, stats.bytes);
    assert_eq!(s.stats().curr_items, 1);
    assert_eq!(s.stats().curr_expiring, 0);
    assert_eq!(s.stats().total_items, stats.total_items + 1);
    // And back to an expiring item, through a CAS store.
    let again = s
        .store(
            Write {
                ttl: Ttl::Exptime(10),
                cas,
                ..Write::new(StoreMode::Set, b"k", b"three"[..3].as_ref())
            },
            NOW + 5,
        )
        .unwrap();
    assert_eq!(s.stats().curr_expiring, 1);
    assert_eq!(s.stats().cas_hits, 1);
    assert_eq!(
        get(&mut s, b"k", NOW + 14),
        Some((b"thr".to_vec(), 0, again))
    );
    assert_eq!(get(&mut s, b"k", NOW + 15), None, "expired");
    // A value of another length takes a new block.
    set(&mut s, b"k", b"abc", 0, NOW + 20);
    let block = s.hint(b"k").unwrap().block().as_ptr();
    set(&mut s, b"k", b"longer", 0, NOW + 20);
    assert_ne!(s.hint(b"k").unwrap().block().as_ptr(), block);
    assert_eq!(s.stats().bytes, item_size(1, 6) as u64);
}
