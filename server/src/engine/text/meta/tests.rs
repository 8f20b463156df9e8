//! Meta-command engine tests: every command and flag, with the replies protocol.txt documents
//! (and memcached 1.6 sends), quiet mode, errors, pipelines and fragment sweeps.

use crate::engine::tests::{PIECES, engine, feed_in_pieces};
use crate::engine::*;

const NOW: u64 = 1_700_000_000;

/// Runs `input` (consumed whole, connection kept) at `now`; returns the replies as text.
#[track_caller]
fn at(e: &mut Engine, input: &str, now: u64) -> String {
    let mut session = Session::default();
    let mut out = Vec::new();
    let outcome = e.execute(&mut session, input.as_bytes(), &mut out, now);
    assert_eq!(outcome.consumed, input.len(), "{input:?}");
    assert!(!outcome.close);
    String::from_utf8(out).unwrap()
}

#[track_caller]
fn ok(e: &mut Engine, input: &str) -> String {
    at(e, input, NOW)
}

/// The CAS of `key`, read with `me` (which changes nothing).
#[track_caller]
fn cas(e: &mut Engine, key: &str) -> u64 {
    let reply = ok(e, &format!("me {key}\r\n"));
    let field = reply.split(' ').find_map(|f| f.strip_prefix("cas="));
    field.unwrap().parse().unwrap()
}

#[test]
fn noop() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "mn\r\n"), "MN\r\n");
}

#[test]
fn get_flags_in_request_order() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "ms k 2 T0 F5\r\nhi\r\n"), "HD\r\n");
    let c = cas(&mut e, "k");
    assert_eq!(
        ok(&mut e, "mg k v f t s c k h l O123\r\n"),
        format!("VA 2 f5 t-1 s2 c{c} kk h0 l0 O123\r\nhi\r\n")
    );
    assert_eq!(ok(&mut e, "mg k s v\r\n"), "VA 2 s2\r\nhi\r\n");
    assert_eq!(ok(&mut e, "mg k\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg k O9 k\r\n"), "HD O9 kk\r\n");
    // Proxy hints are ignored.
    assert_eq!(ok(&mut e, "mg k Pfoo Lbar v\r\n"), "VA 2\r\nhi\r\n");
    assert_eq!(e.counters().cmd_get, 5);
}

#[test]
fn get_miss_and_quiet() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "mg nope v\r\n"), "EN\r\n");
    // A miss carries the opaque and key; `q` hides it, and `mn` closes the batch.
    assert_eq!(ok(&mut e, "mg nope v k O1\r\n"), "EN knope O1\r\n");
    assert_eq!(ok(&mut e, "mg nope v q\r\nmg nope q k\r\nmn\r\n"), "MN\r\n");
    // Hits are answered even with `q`.
    ok(&mut e, "ms k 1\r\nx\r\n");
    assert_eq!(ok(&mut e, "mg k v q\r\nmn\r\n"), "VA 1\r\nx\r\nMN\r\n");
}

#[test]
fn hit_before_and_no_bump() {
    let mut e = engine();
    ok(&mut e, "ms k 1\r\nx\r\n");
    // `u` looks without marking the item fetched.
    assert_eq!(ok(&mut e, "mg k h u\r\n"), "HD h0\r\n");
    assert_eq!(
        ok(&mut e, "mg k h\r\n"),
        "HD h0\r\n",
        "h reports before this request"
    );
    assert_eq!(ok(&mut e, "mg k h\r\n"), "HD h1\r\n");
    let before = e.shard().stats().get_hits;
    ok(&mut e, "mg k u\r\n");
    assert_eq!(e.shard().stats().get_hits, before, "u is not a store get");
}

#[test]
fn touch_with_no_bump_leaves_the_item_unfetched() {
    let mut e = engine();
    at(&mut e, "ms k 1\r\nx\r\n", NOW);
    // `u` with `T`: the TTL changes, the item is neither marked fetched nor accessed.
    assert_eq!(
        at(&mut e, "mg k T30 u h l t\r\n", NOW + 5),
        "HD h0 l5 t30\r\n"
    );
    assert_eq!(at(&mut e, "mg k h l t\r\n", NOW + 6), "HD h0 l6 t29\r\n");
    assert_eq!(at(&mut e, "mg k h\r\n", NOW + 7), "HD h1\r\n");
    assert_eq!(e.counters().cmd_touch, 1);
}

#[test]
fn ttl_and_touch() {
    let mut e = engine();
    ok(&mut e, "ms k 1 T100\r\nx\r\n");
    assert_eq!(at(&mut e, "mg k t\r\n", NOW + 40), "HD t60\r\n");
    // `T` updates the TTL (a touch), `t` reports the new one.
    assert_eq!(
        at(&mut e, "mg k T30 t v\r\n", NOW + 40),
        "VA 1 t30\r\nx\r\n"
    );
    assert_eq!(at(&mut e, "mg k t\r\n", NOW + 69), "HD t1\r\n");
    assert_eq!(at(&mut e, "mg k t\r\n", NOW + 70), "EN\r\n");
    assert_eq!(e.counters().cmd_touch, 1);
    ok(&mut e, "ms forever 1 T0\r\nx\r\n");
    assert_eq!(ok(&mut e, "mg forever t\r\n"), "HD t-1\r\n");
    assert_eq!(ok(&mut e, "mg nope T30 t\r\n"), "EN\r\n");
}

#[test]
fn compare_cas_on_get_drops_an_unchanged_value() {
    let mut e = engine();
    ok(&mut e, "ms k 2\r\nhi\r\n");
    let c = cas(&mut e, "k");
    assert_eq!(ok(&mut e, &format!("mg k v C{c}\r\n")), "HD\r\n");
    assert_eq!(
        ok(&mut e, &format!("mg k v C{}\r\n", c + 1)),
        "VA 2\r\nhi\r\n"
    );
}

#[test]
fn vivify_hands_out_one_win() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "mg k N30 v t s\r\n"), "VA 0 t30 s0 W\r\n\r\n");
    // The next readers see the empty item and that someone else is recaching.
    assert_eq!(ok(&mut e, "mg k N30 v\r\n"), "VA 0 Z\r\n\r\n");
    assert_eq!(ok(&mut e, "mg k v\r\n"), "VA 0 Z\r\n\r\n");
    // The winner stores the real value; the token goes with the old item.
    assert_eq!(ok(&mut e, "ms k 5 T30\r\nvalue\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg k v\r\n"), "VA 5\r\nvalue\r\n");
}

#[test]
fn vivified_item_is_fetched_once_the_reply_is_written() {
    let mut e = engine();
    let hits = e.shard().stats().get_hits;
    // The creating `mg` reports the item as it was made; memcached then marks it fetched.
    assert_eq!(
        at(&mut e, "mg k N30 h l t v\r\n", NOW),
        "VA 0 h0 l0 t30 W\r\n\r\n"
    );
    assert!(at(&mut e, "me k\r\n", NOW + 2).contains(" fetch=yes "));
    assert_eq!(at(&mut e, "mg k h l\r\n", NOW + 2), "HD h1 l2 Z\r\n");
    assert_eq!(e.counters().cmd_get, 2, "the mark is not another get");
    assert_eq!(e.shard().stats().get_hits, hits + 1);
    // With `u` the item stays unfetched, as any `u` read leaves it.
    assert_eq!(ok(&mut e, "mg u N30 u h\r\n"), "HD h0 W\r\n");
    assert!(ok(&mut e, "me u\r\n").contains(" fetch=no "));
    assert_eq!(ok(&mut e, "mg u h\r\n"), "HD h0 Z\r\n");
}

#[test]
fn recache_wins_once_when_the_ttl_runs_low() {
    let mut e = engine();
    ok(&mut e, "ms k 1 T100\r\nx\r\n");
    assert_eq!(at(&mut e, "mg k R30 v\r\n", NOW), "VA 1\r\nx\r\n");
    assert_eq!(at(&mut e, "mg k R30 v\r\n", NOW + 71), "VA 1 W\r\nx\r\n");
    assert_eq!(at(&mut e, "mg k R30 v\r\n", NOW + 72), "VA 1 Z\r\nx\r\n");
    // No TTL, no recache.
    ok(&mut e, "ms forever 1\r\nx\r\n");
    assert_eq!(ok(&mut e, "mg forever R30\r\n"), "HD\r\n");
}

#[test]
fn invalidate_serves_stale_and_hands_out_one_win() {
    let mut e = engine();
    ok(&mut e, "ms k 2 T100\r\nhi\r\n");
    let c = cas(&mut e, "k");
    assert_eq!(ok(&mut e, &format!("md k I C{}\r\n", c + 1)), "EX\r\n");
    assert_eq!(ok(&mut e, "md k I T30\r\n"), "HD\r\n");
    assert!(cas(&mut e, "k") > c, "invalidation bumps the CAS");
    assert_eq!(ok(&mut e, "mg k t v\r\n"), "VA 2 t30 X W\r\nhi\r\n");
    assert_eq!(ok(&mut e, "mg k v\r\n"), "VA 2 Z X\r\nhi\r\n");
    // A fresh value clears the stale mark.
    ok(&mut e, "ms k 3\r\nnew\r\n");
    assert_eq!(ok(&mut e, "mg k v\r\n"), "VA 3\r\nnew\r\n");
    assert_eq!(ok(&mut e, "md nope I\r\n"), "NF\r\n");
}

#[test]
fn set_with_an_older_cas_and_invalidate_stores_it_stale() {
    let mut e = engine();
    ok(&mut e, "ms k 3 T100\r\nold\r\n");
    let old = cas(&mut e, "k");
    ok(&mut e, "ms k 3 T100\r\nnew\r\n");
    // Without I an older CAS is refused; with I it is stored, stale, with the TTL kept.
    assert_eq!(ok(&mut e, &format!("ms k 5 C{old}\r\nolder\r\n")), "EX\r\n");
    assert_eq!(
        ok(&mut e, &format!("ms k 5 C{old} I T0\r\nolder\r\n")),
        "HD\r\n"
    );
    assert_eq!(ok(&mut e, "mg k v t\r\n"), "VA 5 t100 X W\r\nolder\r\n");
}

#[test]
fn set_modes_and_flags() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "ms k 1 ME\r\na\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "ms k 1 ME\r\nb\r\n"), "NS\r\n");
    assert_eq!(ok(&mut e, "ms nope 1 MR\r\nb\r\n"), "NS\r\n");
    assert_eq!(ok(&mut e, "ms k 1 MR F3\r\nb\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "ms k 2 MA s\r\ncd\r\n"), "HD s3\r\n");
    assert_eq!(ok(&mut e, "ms k 2 MP\r\nxy\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg k v f\r\n"), "VA 5 f3\r\nxybcd\r\n");
    assert_eq!(ok(&mut e, "ms nope 1 MA\r\nz\r\n"), "NS\r\n");
    assert_eq!(ok(&mut e, "ms nope 1 MP\r\nz\r\n"), "NS\r\n");
    // Append with N creates a missing item from the data.
    assert_eq!(ok(&mut e, "ms viv 3 MA N30 F7\r\nabc\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg viv v t f\r\n"), "VA 3 t30 f7\r\nabc\r\n");
    assert_eq!(ok(&mut e, "ms k 1 MS\r\nz\r\n"), "HD\r\n");
    // `q` hides HD only; `O`, `k`, `c` and `s` come back.
    assert_eq!(ok(&mut e, "ms k 1 q\r\nz\r\nmn\r\n"), "MN\r\n");
    assert_eq!(ok(&mut e, "ms k 1 ME q\r\nz\r\n"), "NS\r\n");
    let reply = ok(&mut e, "ms k 2 O7 k c s\r\nzz\r\n");
    let c = cas(&mut e, "k");
    assert_eq!(reply, format!("HD O7 kk c{c} s2\r\n"));
    assert_eq!(ok(&mut e, "ms k 1 ME c k\r\nz\r\n"), "NS c0 kk\r\n");
    assert_eq!(e.counters().cmd_set, 14);
}

#[test]
fn set_compares_cas() {
    let mut e = engine();
    ok(&mut e, "ms k 1\r\na\r\n");
    let c = cas(&mut e, "k");
    assert_eq!(ok(&mut e, &format!("ms k 1 C{}\r\nb\r\n", c + 1)), "EX\r\n");
    assert_eq!(ok(&mut e, &format!("ms k 1 C{c}\r\nb\r\n")), "HD\r\n");
    assert_eq!(ok(&mut e, "ms nope 1 C5\r\nb\r\n"), "NF\r\n");
    assert_eq!(
        ok(&mut e, "ms k 1 C0\r\nb\r\n"),
        "EX\r\n",
        "C0 is compared too"
    );
    let c = cas(&mut e, "k");
    assert_eq!(
        ok(&mut e, &format!("ms k 1 MA C{}\r\nb\r\n", c + 1)),
        "EX\r\n"
    );
    assert_eq!(ok(&mut e, &format!("ms k 1 MA C{c}\r\nc\r\n")), "HD\r\n");
    // Add ignores the CAS, as memcached does.
    assert_eq!(ok(&mut e, "ms new 1 ME C5\r\nb\r\n"), "HD\r\n");
}

#[test]
fn set_data_block_errors_and_limits() {
    let mut e = engine();
    assert_eq!(
        ok(&mut e, "ms k 2\r\nabc\r\n"),
        "CLIENT_ERROR bad data chunk\r\nERROR\r\n"
    );
    // A refused line swallows its data block.
    assert_eq!(
        ok(&mut e, "ms k 5 z\r\nhello\r\nmn\r\n"),
        "CLIENT_ERROR invalid flag\r\nMN\r\n"
    );
    assert_eq!(
        ok(&mut e, "ms k 5 MX\r\nhello\r\nmn\r\n"),
        "CLIENT_ERROR invalid mode for ms M token\r\nMN\r\n"
    );
    // Too large: refused now, even with q, and skipped as it arrives.
    let size = (1 << 20) + 1;
    let mut input = format!("ms big {size} q\r\n").into_bytes();
    input.extend(vec![b'v'; size]);
    input.extend_from_slice(b"\r\nmg big v\r\n");
    let mut session = Session::default();
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for chunk in input.chunks(64 * 1024) {
        pending.extend_from_slice(chunk);
        let o = e.execute(&mut session, &pending, &mut out, NOW);
        pending.drain(..o.consumed);
        assert!(pending.len() < 64 * 1024, "skipped, not buffered");
    }
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "SERVER_ERROR object too large for cache\r\nEN\r\n"
    );
}

// Regression: an `ms` refused for size left the old value; memcached unlinks it whatever the
// mode (proto_text.c: "avoid stale data persisting in cache because we failed alloc").
#[test]
fn a_set_refused_for_size_unlinks_the_old_item_in_every_mode() {
    let size = (1 << 20) + 1;
    let body = "v".repeat(size);
    for mode in ["", " MS", " ME", " MA", " MP", " MR"] {
        let mut e = engine();
        ok(&mut e, "ms k 3\r\nold\r\n");
        assert_eq!(
            ok(
                &mut e,
                &format!("ms k {size}{mode}\r\n{body}\r\nmg k v\r\n")
            ),
            "SERVER_ERROR object too large for cache\r\nEN\r\n",
            "{mode:?}"
        );
        assert_eq!(e.snapshot().counters.store_too_large, 1);
    }
}

// Regression (found by the engine fuzz target): an `ms` whose data block arrived in pieces was
// counted in `cmd_meta` once per piece.
#[test]
fn cmd_meta_counts_a_request_once_however_it_arrives() {
    let input = b"ms k 10\r\n0123456789\r\nmg k v\r\nmn\r\n";
    let mut e = engine();
    let mut session = Session::default();
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for &byte in input {
        pending.push(byte);
        let o = e.execute(&mut session, &pending, &mut out, NOW);
        pending.drain(..o.consumed);
    }
    assert_eq!(out, b"HD\r\nVA 10\r\n0123456789\r\nMN\r\n");
    assert_eq!(e.counters().cmd_meta, 3);
}

#[test]
fn delete() {
    let mut e = engine();
    ok(&mut e, "ms k 1\r\nx\r\n");
    assert_eq!(ok(&mut e, "md k O5 k\r\n"), "HD O5 kk\r\n");
    assert_eq!(ok(&mut e, "md k O5 k\r\n"), "NF O5 kk\r\n");
    ok(&mut e, "ms k 1\r\nx\r\n");
    let c = cas(&mut e, "k");
    assert_eq!(ok(&mut e, &format!("md k C{}\r\n", c + 1)), "EX\r\n");
    assert_eq!(ok(&mut e, "md k C0\r\n"), "EX\r\n");
    assert_eq!(ok(&mut e, &format!("md k q C{c}\r\nmn\r\n")), "MN\r\n");
    assert_eq!(ok(&mut e, "md k q\r\n"), "NF\r\n", "q hides HD only");
    assert_eq!(
        ok(&mut e, "md k z\r\n"),
        "CLIENT_ERROR invalid or duplicate flag\r\n"
    );
}

#[test]
fn arithmetic() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "ma n\r\n"), "NF\r\n");
    assert_eq!(ok(&mut e, "ma n O1 k\r\n"), "NF O1 kn\r\n");
    assert_eq!(ok(&mut e, "ma n N0 J10 v\r\n"), "VA 2\r\n10\r\n");
    assert_eq!(ok(&mut e, "ma n v\r\n"), "VA 2\r\n11\r\n");
    assert_eq!(ok(&mut e, "ma n v MD D3 t\r\n"), "VA 1 t-1\r\n8\r\n");
    assert_eq!(
        ok(&mut e, "ma n M- D100 v\r\n"),
        "VA 1\r\n0\r\n",
        "decr stops at 0"
    );
    assert_eq!(ok(&mut e, "ma n M+ D5\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "ma n MI q\r\nmn\r\n"), "MN\r\n");
    let c = cas(&mut e, "n");
    assert_eq!(ok(&mut e, &format!("ma n C{}\r\n", c + 1)), "EX\r\n");
    let reply = ok(&mut e, &format!("ma n C{c} c v T60 t\r\n"));
    let new = cas(&mut e, "n");
    assert_eq!(reply, format!("VA 1 c{new} t60\r\n7\r\n"));
    ok(&mut e, "ms s 3\r\nabc\r\n");
    assert_eq!(
        ok(&mut e, "ma s\r\n"),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(
        ok(&mut e, "ma n MX\r\n"),
        "CLIENT_ERROR invalid mode for ma M token\r\n"
    );
    assert_eq!(
        ok(&mut e, "ma n Dx\r\n"),
        "CLIENT_ERROR invalid or duplicate flag\r\n"
    );
}

#[test]
fn debug() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "me nope\r\n"), "EN\r\n");
    ok(&mut e, "ms k 5 T100\r\nhello\r\n");
    let c = cas(&mut e, "k");
    // The size is the item's charge in the store: an item that expires holds its expiry.
    let size = store::item_size_expiring(1, 5);
    assert_eq!(
        at(&mut e, "me k\r\n", NOW + 10),
        format!("ME k exp=90 la=10 cas={c} fetch=no cls=1 size={size}\r\n")
    );
    at(&mut e, "mg k\r\n", NOW + 12);
    assert_eq!(
        at(&mut e, "me k\r\n", NOW + 15),
        format!("ME k exp=85 la=3 cas={c} fetch=yes cls=1 size={size}\r\n")
    );
    // `me` neither counts nor marks.
    let before = e.shard().stats().clone();
    ok(&mut e, "me k\r\n");
    assert_eq!(*e.shard().stats(), before);
    // An item that never expires is charged no expiry.
    ok(&mut e, "ms n 5\r\nhello\r\n");
    let size = store::item_size(1, 5);
    assert!(
        ok(&mut e, "me n\r\n").ends_with(&format!(" size={size}\r\n")),
        "{}",
        ok(&mut e, "me n\r\n")
    );
}

#[test]
fn base64_keys() {
    let mut e = engine();
    // "foo" and a key with a space, CR and LF: binary keys the text commands cannot name.
    assert_eq!(ok(&mut e, "ms Zm9v 2 b k\r\nhi\r\n"), "HD kZm9v b\r\n");
    assert_eq!(ok(&mut e, "get foo\r\n"), "VALUE foo 0 2\r\nhi\r\nEND\r\n");
    assert_eq!(ok(&mut e, "ms IA0K 1 b\r\nx\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg IA0K b v k\r\n"), "VA 1 kIA0K b\r\nx\r\n");
    assert_eq!(
        ok(&mut e, "ma IA0K b\r\n"),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    let debug = ok(&mut e, "me IA0K b\r\n");
    assert!(debug.starts_with("ME IA0K exp=-1 "), "{debug}");
    assert_eq!(ok(&mut e, "md IA0K b\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg IA0K b v\r\n"), "EN\r\n");
    assert_eq!(
        ok(&mut e, "mg !!!! b v\r\n"),
        "CLIENT_ERROR error decoding key\r\n"
    );
}

#[test]
fn unserved_flags_are_refused_as_unknown() {
    let mut e = engine();
    ok(&mut e, "ms k 1\r\nx\r\n");
    assert_eq!(
        ok(&mut e, "md k x\r\n"),
        "CLIENT_ERROR invalid or duplicate flag\r\n"
    );
    assert_eq!(
        ok(&mut e, "ms k 1 x\r\ny\r\nmn\r\n"),
        "CLIENT_ERROR invalid flag\r\nMN\r\n",
        "the data block is swallowed"
    );
    assert_eq!(ok(&mut e, "mg k v\r\n"), "VA 1\r\nx\r\n", "nothing changed");
}

// ---- `l` and `la`: seconds since the last access ----

#[test]
fn last_access_counts_seconds_before_the_request() {
    let mut e = engine();
    ok(&mut e, "ms k 2 T0\r\nhi\r\n");
    assert_eq!(at(&mut e, "mg k l h\r\n", NOW + 5), "HD l5 h0\r\n");
    assert_eq!(at(&mut e, "mg k l h\r\n", NOW + 6), "HD l1 h1\r\n");
    // `u` neither reports nor records an access of its own.
    assert_eq!(at(&mut e, "mg k u l\r\n", NOW + 9), "HD l3\r\n");
    assert_eq!(at(&mut e, "mg k l\r\n", NOW + 9), "HD l3\r\n");
    assert_eq!(at(&mut e, "mg k l v\r\n", NOW + 9), "VA 2 l0\r\nhi\r\n");
    // A touch through `T` is an access; so are the text get, gat and touch.
    assert_eq!(at(&mut e, "mg k T100 l t\r\n", NOW + 20), "HD l11 t100\r\n");
    at(&mut e, "get k\r\n", NOW + 30);
    assert_eq!(at(&mut e, "mg k l\r\n", NOW + 31), "HD l1\r\n");
    at(&mut e, "touch k 100\r\n", NOW + 40);
    assert_eq!(
        at(&mut e, "me k\r\n", NOW + 47).split(' ').nth(3),
        Some("la=7")
    );
    at(&mut e, "gat 100 k\r\n", NOW + 50);
    assert_eq!(at(&mut e, "mg k u l\r\n", NOW + 52), "HD l2\r\n");
    // Stores and arithmetic write the item: an access. Marking it stale is not.
    at(&mut e, "ms k 1\r\n5\r\n", NOW + 60);
    assert_eq!(at(&mut e, "mg k u l\r\n", NOW + 61), "HD l1\r\n");
    at(&mut e, "ma k\r\n", NOW + 70);
    assert_eq!(at(&mut e, "mg k u l\r\n", NOW + 72), "HD l2\r\n");
    at(&mut e, "md k I\r\n", NOW + 75);
    assert_eq!(
        at(&mut e, "mg k u l v\r\n", NOW + 76),
        "VA 1 l6 X W\r\n6\r\n"
    );
    // A vivified item was just created.
    assert_eq!(at(&mut e, "mg viv N30 l\r\n", NOW + 80), "HD l0 W\r\n");
    assert_eq!(at(&mut e, "mg viv l\r\n", NOW + 84), "HD l4 Z\r\n");
}

#[test]
fn last_access_is_zero_when_the_clock_goes_back() {
    let mut e = engine();
    at(&mut e, "ms k 1\r\nx\r\n", NOW + 10);
    assert_eq!(at(&mut e, "mg k l\r\n", NOW), "HD l0\r\n");
    assert!(at(&mut e, "me k\r\n", NOW).contains(" la=0 "));
}

// ---- `E`: the client chooses the new CAS ----

#[test]
fn set_with_a_given_cas() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "ms k 2 E1234 c\r\nhi\r\n"), "HD c1234\r\n");
    assert_eq!(ok(&mut e, "mg k c v\r\n"), "VA 2 c1234\r\nhi\r\n");
    assert_eq!(
        ok(&mut e, "gets k\r\n"),
        "VALUE k 0 2 1234\r\nhi\r\nEND\r\n"
    );
    // The given CAS is compared like any other, and replaced by the next one.
    assert_eq!(ok(&mut e, "ms k 2 C1233 E99 c\r\nho\r\n"), "EX c0\r\n");
    assert_eq!(ok(&mut e, "ms k 2 C1234 E99 c\r\nho\r\n"), "HD c99\r\n");
    assert_eq!(
        ok(&mut e, "ms k 2 E18446744073709551615 c\r\nhu\r\n"),
        "HD c18446744073709551615\r\n"
    );
    assert_eq!(
        ok(&mut e, "cas k 0 0 1 18446744073709551615\r\nx\r\n"),
        "STORED\r\n"
    );
    // Without E the counter goes on where it was: the given values did not advance it.
    assert_eq!(cas(&mut e, "k"), 1);
    // Every mode takes it; `E0` on `ms` means the counter's CAS, as in memcached.
    assert_eq!(ok(&mut e, "ms k 1 MA E7 c\r\ny\r\n"), "HD c7\r\n");
    assert_eq!(ok(&mut e, "ms k 1 MP E8 c\r\nw\r\n"), "HD c8\r\n");
    assert_eq!(ok(&mut e, "ms k 1 MR E9 c\r\nz\r\n"), "HD c9\r\n");
    assert_eq!(ok(&mut e, "ms new 1 ME E10 c\r\nz\r\n"), "HD c10\r\n");
    assert_eq!(ok(&mut e, "ms viv 1 MA N30 E11 c\r\nz\r\n"), "HD c11\r\n");
    assert_eq!(ok(&mut e, "ms k 1 E0 c\r\nz\r\n"), "HD c2\r\n");
    // Refusals keep the item as it was.
    assert_eq!(ok(&mut e, "ms new 1 ME E12 c\r\nq\r\n"), "NS c0\r\n");
    assert_eq!(ok(&mut e, "mg new c v\r\n"), "VA 1 c10\r\nz\r\n");
    assert_eq!(
        ok(&mut e, "ms k 1 Ex\r\nz\r\n"),
        "CLIENT_ERROR bad token in command line format\r\n"
    );
}

/// Regression: `cas <key> ... 0` and `C0` stood for "compare with u64::MAX", a CAS no item
/// could have while CAS values were 59 bits; with `E` one can.
#[test]
fn cas_zero_matches_no_item_whatever_cas_the_client_chose() {
    let mut e = engine();
    ok(&mut e, "ms k 1 E18446744073709551615\r\nx\r\n");
    assert_eq!(ok(&mut e, "cas k 0 0 1 0\r\ny\r\n"), "EXISTS\r\n");
    assert_eq!(ok(&mut e, "ms k 1 C0\r\ny\r\n"), "EX\r\n");
    assert_eq!(ok(&mut e, "md k C0\r\n"), "EX\r\n");
    for given in [1, 2] {
        ok(&mut e, &format!("ms k 1 E{given}\r\nx\r\n"));
        assert_eq!(ok(&mut e, "cas k 0 0 1 0\r\ny\r\n"), "EXISTS\r\n");
        assert_eq!(ok(&mut e, "ms k 1 C0 I\r\ny\r\n"), "EX\r\n", "not older");
    }
    assert_eq!(ok(&mut e, "cas nope 0 0 1 0\r\ny\r\n"), "NOT_FOUND\r\n");
    assert_eq!(ok(&mut e, "mg k v\r\n"), "VA 1\r\nx\r\n");
    // An item whose CAS is 0 (`ma ... E0`) is not matched by `cas`/`ms` with 0 (memcached reads
    // 0 as "no CAS" there), but `md C0` compares it plainly and deletes it, as memcached does.
    assert_eq!(ok(&mut e, "ma z N0 E0 c\r\n"), "HD c0\r\n");
    assert_eq!(ok(&mut e, "cas z 0 0 1 0\r\ny\r\n"), "EXISTS\r\n");
    assert_eq!(ok(&mut e, "ms z 1 C0\r\ny\r\n"), "EX\r\n");
    assert_eq!(ok(&mut e, "md z C0\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg z v\r\n"), "EN\r\n");
}

#[test]
fn invalidate_and_stale_sets_with_given_versions() {
    let mut e = engine();
    // A client versions the item itself: v10, then an invalidation as v12.
    ok(&mut e, "ms k 2 T100 E10\r\nv1\r\n");
    assert_eq!(ok(&mut e, "md k I E12 C11\r\n"), "EX\r\n");
    assert_eq!(ok(&mut e, "md k I E12 C10 T30\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg k c t v\r\n"), "VA 2 c12 t30 X W\r\nv1\r\n");
    // A write of version 11 is older than 12: stored stale, keeping the TTL and the token.
    assert_eq!(ok(&mut e, "ms k 2 I C11 E11 c\r\nv2\r\n"), "HD c11\r\n");
    assert_eq!(ok(&mut e, "mg k c t v\r\n"), "VA 2 c11 t30 Z X\r\nv2\r\n");
    // The winner writes version 13: fresh again.
    assert_eq!(ok(&mut e, "ms k 2 C11 E13 T60 c\r\nv3\r\n"), "HD c13\r\n");
    assert_eq!(ok(&mut e, "mg k c t v\r\n"), "VA 2 c13 t60\r\nv3\r\n");
    // Without E, a stale write takes one CAS from the counter.
    let before = cas(&mut e, "k");
    assert_eq!(ok(&mut e, "ms k 2 I C5 c\r\nv4\r\n"), "HD c1\r\n");
    assert_eq!(ok(&mut e, "mg k c v\r\n"), "VA 2 c1 X W\r\nv4\r\n");
    assert_eq!(before, 13);
    // `md ... I E0` sets CAS 0, as memcached does.
    assert_eq!(ok(&mut e, "md k I E0\r\n"), "HD\r\n");
    assert_eq!(cas(&mut e, "k"), 0);
    // A plain `md` ignores E.
    assert_eq!(ok(&mut e, "md k E5\r\n"), "HD\r\n");
    assert_eq!(ok(&mut e, "mg k v\r\n"), "EN\r\n");
}

#[test]
fn arithmetic_and_vivify_with_a_given_cas() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "ma n N0 J5 E8 c v\r\n"), "VA 1 c8\r\n5\r\n");
    assert_eq!(ok(&mut e, "ma n E9 c v\r\n"), "VA 1 c9\r\n6\r\n");
    assert_eq!(ok(&mut e, "ma n C8 E10 c\r\n"), "EX\r\n");
    assert_eq!(
        ok(&mut e, "ma n C9 D10 E18446744073709551615 c v\r\n"),
        "VA 2 c18446744073709551615\r\n16\r\n"
    );
    assert_eq!(ok(&mut e, "ma n c\r\n"), "HD c1\r\n");
    // `mg` uses E only for the item `N` creates; a hit, touched or not, keeps its CAS.
    assert_eq!(ok(&mut e, "mg v N30 E77 c v\r\n"), "VA 0 c77 W\r\n\r\n");
    assert_eq!(ok(&mut e, "mg v E78 T60 c\r\n"), "HD c77 Z\r\n");
    assert_eq!(ok(&mut e, "mg miss E5 v\r\n"), "EN\r\n");
    assert_eq!(ok(&mut e, "mg miss v\r\n"), "EN\r\n", "nothing was created");
}

#[test]
fn flush_all_kills_items_whatever_cas_they_were_given() {
    let mut e = engine();
    ok(&mut e, "ms high 1 E18446744073709551615\r\nh\r\n");
    ok(&mut e, "ms zero 1 T0\r\nz\r\nmd zero I E0\r\n");
    assert_eq!(ok(&mut e, "flush_all\r\n"), "OK\r\n");
    assert_eq!(ok(&mut e, "mg high v\r\nmg zero v\r\n"), "EN\r\nEN\r\n");
    // After the flush, in the same second, a low given CAS is a live item.
    assert_eq!(ok(&mut e, "ms low 1 E1 c\r\nl\r\n"), "HD c1\r\n");
    assert_eq!(ok(&mut e, "mg low c v\r\n"), "VA 1 c1\r\nl\r\n");
    // Delayed: everything stored before the due time dies then, given CAS or not.
    assert_eq!(at(&mut e, "flush_all 10\r\n", NOW), "OK\r\n");
    at(&mut e, "ms mid 1 E2\r\nm\r\nma cnt N0 E3\r\n", NOW + 5);
    assert_eq!(
        at(&mut e, "mg low v\r\nmg mid v\r\nmg cnt v\r\n", NOW + 9),
        "VA 1\r\nl\r\nVA 1\r\nm\r\nVA 1\r\n0\r\n"
    );
    at(&mut e, "ms late 1 E1\r\nl\r\n", NOW + 10);
    assert_eq!(
        at(
            &mut e,
            "mg low v\r\nmg mid v\r\nmg cnt v\r\nmg late c v\r\n",
            NOW + 10
        ),
        "EN\r\nEN\r\nEN\r\nVA 1 c1\r\nl\r\n"
    );
}

#[test]
fn errors_are_answered_even_when_quiet() {
    let mut e = engine();
    let cases = [
        ("mg\r\n", "ERROR\r\n"),
        ("mz k\r\n", "ERROR\r\n"),
        ("me\r\n", "CLIENT_ERROR bad command line format\r\n"),
        ("mg k q v v\r\n", "CLIENT_ERROR duplicate flag\r\n"),
        (
            "mg k q Tx\r\n",
            "CLIENT_ERROR bad token in command line format\r\n",
        ),
        ("ms k q\r\n", "CLIENT_ERROR bad command line format\r\n"),
        (
            "mg k q O123456789012345678901234567890123\r\n",
            "CLIENT_ERROR opaque token too long\r\n",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(ok(&mut e, input), expected, "{input:?}");
    }
}

/// A pipeline of meta commands, quiet ones closed by `mn`, and the replies.
fn pipeline() -> (&'static str, &'static str) {
    (
        concat!(
            "ms a 5 T0 F1\r\nhello\r\n",
            "ms b 3 q\r\nbee\r\n",
            "mg a v f O1\r\n",
            "mg b v q O2\r\n",
            "mg c v q O3\r\n",
            "mn\r\n",
            "ma n N0 J5 v\r\n",
            "md b q\r\n",
            "md b\r\n",
            "mg a s k\r\n",
            "ms c 2 z\r\nxx\r\n",
            "get a\r\n",
            "ms e 1 E42 c\r\nx\r\n",
            "mg e l c h v\r\n",
            "mn\r\n",
        ),
        concat!(
            "HD\r\n",
            "VA 5 f1 O1\r\nhello\r\n",
            "VA 3 O2\r\nbee\r\n",
            "MN\r\n",
            "VA 1\r\n5\r\n",
            "NF\r\n",
            "HD s5 ka\r\n",
            "CLIENT_ERROR invalid flag\r\n",
            "VALUE a 1 5\r\nhello\r\nEND\r\n",
            "HD c42\r\n",
            "VA 1 l0 c42 h0\r\nx\r\n",
            "MN\r\n",
        ),
    )
}

#[test]
fn pipeline_replies_in_order() {
    let (input, expected) = pipeline();
    let mut e = engine();
    assert_eq!(ok(&mut e, input), expected);
}

#[test]
fn fragment_sweeps_give_the_same_replies() {
    let (input, expected) = pipeline();
    for piece in PIECES {
        let out = feed_in_pieces(input.as_bytes(), piece);
        assert_eq!(String::from_utf8(out).unwrap(), expected, "piece {piece}");
    }
}

#[test]
fn every_truncation_consumes_nothing_and_asks_for_more() {
    let mut e = engine();
    for request in [
        "mg key v t c\r\n",
        "ms key 5 T0\r\nhello\r\n",
        "ma n N0 v\r\n",
        "mn\r\n",
    ] {
        let bytes = request.as_bytes();
        for n in 1..bytes.len() {
            let mut session = Session::default();
            let mut out = Vec::new();
            let outcome = e.execute(&mut session, &bytes[..n], &mut out, NOW);
            assert!(out.is_empty(), "{request:?}[..{n}]");
            assert_eq!(outcome.consumed, 0, "{request:?}[..{n}]");
            assert!(outcome.needed >= 1 && !outcome.close, "{request:?}[..{n}]");
        }
    }
}

#[test]
fn a_meta_pipeline_stops_between_requests_and_resumes() {
    let mut e = engine();
    let value = "m".repeat(100 * 1024);
    ok(&mut e, &format!("ms big {} T0\r\n{value}\r\n", value.len()));
    let mut input = String::new();
    let mut expected = String::new();
    for i in 0..10 {
        if i % 4 == 3 {
            input.push_str("mg missing v q\r\n");
        } else {
            input.push_str(&format!("mg big v O{i}\r\n"));
            expected.push_str(&format!("VA {} O{i}\r\n{value}\r\n", value.len()));
        }
    }
    input.push_str("mn\r\n");
    expected.push_str("MN\r\n");
    let mut session = Session::default();
    let (mut out, mut sent, mut calls) = (Vec::new(), Vec::new(), 0);
    let mut pos = 0;
    while pos < input.len() {
        let outcome = e.execute(&mut session, &input.as_bytes()[pos..], &mut out, NOW);
        if outcome.consumed < input.len() - pos {
            assert_eq!(outcome.stop, Stop::Output);
        }
        assert!(out.len() < OUT_HIGH_WATER_BYTES + value.len() + 64);
        pos += outcome.consumed;
        calls += 1;
        sent.append(&mut out);
    }
    assert!(calls >= 3, "stopped at the high water ({calls} calls)");
    assert!(String::from_utf8(sent).unwrap() == expected);
}
