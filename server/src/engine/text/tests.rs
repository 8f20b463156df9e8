//! Text-protocol engine tests: every command's replies as memcached documents and sends them,
//! noreply, errors, limits, pipelines, fragment sweeps and truncations.

use super::super::tests::{PIECES, engine, feed_in_pieces};
use super::super::*;
use protocol::binary::{Opcode, RequestRepr};
use store::ShardConfig;

const NOW: u64 = 1_700_000_000;

/// Runs `input` through a fresh session in one call; returns the output as text and the outcome.
#[track_caller]
fn run(e: &mut Engine, input: &str) -> (String, Outcome) {
    let mut session = Session::default();
    run_bytes(e, &mut session, input.as_bytes())
}

#[track_caller]
fn run_bytes(e: &mut Engine, session: &mut Session, input: &[u8]) -> (String, Outcome) {
    let mut out = Vec::new();
    let outcome = e.execute(session, input, &mut out, NOW);
    (String::from_utf8_lossy(&out).into_owned(), outcome)
}

/// Runs `input`, which must be consumed whole without closing, and returns the replies.
#[track_caller]
fn ok(e: &mut Engine, input: &str) -> String {
    let (out, outcome) = run(e, input);
    assert_eq!(outcome.consumed, input.len(), "{input:?} -> {out:?}");
    assert!(!outcome.close, "{input:?}");
    out
}

#[test]
fn first_byte_picks_the_protocol() {
    let mut e = engine();
    let mut session = Session::default();
    assert_eq!(session.protocol(), None);
    // No input decides nothing.
    run_bytes(&mut e, &mut session, b"");
    assert_eq!(session.protocol(), None);
    run_bytes(&mut e, &mut session, b"ver");
    assert_eq!(session.protocol(), Some(Protocol::Text));
    let (out, _) = run_bytes(&mut e, &mut session, b"version\r\n");
    assert!(out.starts_with("VERSION 1.6.18-memspin-"), "{out}");

    let mut binary = Session::default();
    let mut frame = Vec::new();
    RequestRepr {
        opcode: Opcode::Noop,
        quiet: false,
        opaque: 7,
        cas: 0,
        vbucket: 0,
        extras: &[],
        key: &[],
        value: &[],
    }
    .emit_into(&mut frame);
    let (_, outcome) = run_bytes(&mut e, &mut binary, &frame);
    assert_eq!(binary.protocol(), Some(Protocol::Binary));
    assert_eq!(outcome.consumed, 24);
    // A text line on a binary connection is a bad frame, and the other way round is junk text.
    let (_, outcome) = run_bytes(&mut e, &mut binary, "get k\r\n".repeat(4).as_bytes());
    assert!(outcome.close);
    let (out, _) = run_bytes(&mut e, &mut session, &frame[..1]);
    assert_eq!(out, "", "0x80 alone is an incomplete text line");
    assert_eq!(session.protocol(), Some(Protocol::Text));
}

#[test]
fn set_get_gets_and_multi_get() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "set a 5 0 5\r\nhello\r\n"), "STORED\r\n");
    assert_eq!(ok(&mut e, "get a\r\n"), "VALUE a 5 5\r\nhello\r\nEND\r\n");
    assert_eq!(ok(&mut e, "get nope\r\n"), "END\r\n");
    assert_eq!(ok(&mut e, "set b 0 0 0\r\n\r\n"), "STORED\r\n");
    assert_eq!(
        ok(&mut e, "get a x b a\r\n"),
        "VALUE a 5 5\r\nhello\r\nVALUE b 0 0\r\n\r\nVALUE a 5 5\r\nhello\r\nEND\r\n"
    );
    let gets = ok(&mut e, "gets a\r\n");
    let cas: u64 = gets
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(cas > 0);
    assert_eq!(gets, format!("VALUE a 5 5 {cas}\r\nhello\r\nEND\r\n"));
    // Binary-safe values: CR, LF and NUL inside the data.
    let (out, _) = run(&mut e, "set bin 0 0 6\r\n\r\n\0\r\n\n\r\n");
    assert_eq!(out, "STORED\r\n");
    assert_eq!(
        ok(&mut e, "get bin\r\n"),
        "VALUE bin 0 6\r\n\r\n\0\r\n\n\r\nEND\r\n"
    );
    // Flags are 32 bits.
    ok(&mut e, "set f 4294967295 0 1\r\nx\r\n");
    assert_eq!(
        ok(&mut e, "get f\r\n"),
        "VALUE f 4294967295 1\r\nx\r\nEND\r\n"
    );
    assert_eq!(e.counters().cmd_get, 9);
}

#[test]
fn add_replace_append_prepend_cas() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "add k 0 0 1\r\na\r\n"), "STORED\r\n");
    assert_eq!(ok(&mut e, "add k 0 0 1\r\nb\r\n"), "NOT_STORED\r\n");
    assert_eq!(ok(&mut e, "replace nope 0 0 1\r\nb\r\n"), "NOT_STORED\r\n");
    assert_eq!(ok(&mut e, "replace k 3 0 1\r\nb\r\n"), "STORED\r\n");
    assert_eq!(ok(&mut e, "append k 9 0 2\r\ncd\r\n"), "STORED\r\n");
    assert_eq!(ok(&mut e, "prepend k 9 0 2\r\nxy\r\n"), "STORED\r\n");
    assert_eq!(ok(&mut e, "append nope 0 0 1\r\nb\r\n"), "NOT_STORED\r\n");
    assert_eq!(ok(&mut e, "prepend nope 0 0 1\r\nb\r\n"), "NOT_STORED\r\n");
    // append/prepend keep the flags.
    assert_eq!(ok(&mut e, "get k\r\n"), "VALUE k 3 5\r\nxybcd\r\nEND\r\n");

    let gets = ok(&mut e, "gets k\r\n");
    let cas: u64 = gets.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert_eq!(
        ok(&mut e, &format!("cas k 0 0 2 {}\r\nzz\r\n", cas + 1)),
        "EXISTS\r\n"
    );
    assert_eq!(
        ok(&mut e, &format!("cas k 0 0 2 {cas}\r\nzz\r\n")),
        "STORED\r\n"
    );
    assert_eq!(
        ok(&mut e, &format!("cas k 0 0 2 {cas}\r\nzz\r\n")),
        "EXISTS\r\n"
    );
    assert_eq!(ok(&mut e, "cas nope 0 0 2 1\r\nzz\r\n"), "NOT_FOUND\r\n");
    // CAS 0 is compared like any other value: no item has it.
    assert_eq!(ok(&mut e, "cas k 0 0 2 0\r\nzz\r\n"), "EXISTS\r\n");
    assert_eq!(ok(&mut e, "cas nope 0 0 2 0\r\nzz\r\n"), "NOT_FOUND\r\n");
    assert_eq!(e.counters().cmd_set, 14);
    let stats = e.shard().stats();
    assert_eq!(
        (stats.cas_hits, stats.cas_badval, stats.cas_misses),
        (1, 3, 2)
    );
}

#[test]
fn delete_incr_decr_touch_gat() {
    let mut e = engine();
    ok(&mut e, "set n 0 0 2\r\n10\r\n");
    assert_eq!(ok(&mut e, "incr n 5\r\n"), "15\r\n");
    assert_eq!(ok(&mut e, "decr n 100\r\n"), "0\r\n");
    assert_eq!(
        ok(&mut e, "incr n 18446744073709551615\r\n"),
        "18446744073709551615\r\n"
    );
    assert_eq!(ok(&mut e, "incr n 2\r\n"), "1\r\n", "incr wraps at 2^64");
    assert_eq!(ok(&mut e, "incr nope 1\r\n"), "NOT_FOUND\r\n");
    assert_eq!(ok(&mut e, "decr nope 1\r\n"), "NOT_FOUND\r\n");
    ok(&mut e, "set s 0 0 3\r\nabc\r\n");
    assert_eq!(
        ok(&mut e, "incr s 1\r\n"),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(ok(&mut e, "touch s 100\r\n"), "TOUCHED\r\n");
    assert_eq!(ok(&mut e, "touch nope 100\r\n"), "NOT_FOUND\r\n");
    assert_eq!(
        ok(&mut e, "gat 100 s nope\r\n"),
        "VALUE s 0 3\r\nabc\r\nEND\r\n"
    );
    let gats = ok(&mut e, "gats 0 s\r\n");
    assert!(gats.starts_with("VALUE s 0 3 ") && gats.ends_with("\r\nabc\r\nEND\r\n"));
    assert_eq!(ok(&mut e, "gat 10\r\n"), "END\r\n");
    // gat with an expired time hands the item out once, then it is gone.
    assert_eq!(ok(&mut e, "gat -1 s\r\n"), "VALUE s 0 3\r\nabc\r\nEND\r\n");
    assert_eq!(ok(&mut e, "get s\r\n"), "END\r\n");
    assert_eq!(ok(&mut e, "delete n\r\n"), "DELETED\r\n");
    assert_eq!(ok(&mut e, "delete n\r\n"), "NOT_FOUND\r\n");
    ok(&mut e, "set n 0 0 1\r\n1\r\n");
    assert_eq!(ok(&mut e, "delete n 0\r\n"), "DELETED\r\n");
    // touch and gat count cmd_touch (per key), get counts cmd_get.
    assert_eq!(e.counters().cmd_touch, 6);
    assert_eq!(e.counters().cmd_get, 1);
}

#[test]
fn expiry_follows_memcached_rules() {
    let mut e = engine();
    let mut session = Session::default();
    let mut at = |e: &mut Engine, input: &str, now: u64| {
        let mut out = Vec::new();
        e.execute(&mut session, input.as_bytes(), &mut out, now);
        String::from_utf8(out).unwrap()
    };
    at(&mut e, "set rel 0 10 1\r\nr\r\n", NOW);
    at(&mut e, &format!("set abs 0 {} 1\r\na\r\n", NOW + 5), NOW);
    at(&mut e, "set neg 0 -1 1\r\nn\r\n", NOW);
    assert_eq!(
        at(&mut e, "get rel abs neg\r\n", NOW + 4),
        "VALUE rel 0 1\r\nr\r\nVALUE abs 0 1\r\na\r\nEND\r\n"
    );
    assert_eq!(
        at(&mut e, "get rel abs\r\n", NOW + 5),
        "VALUE rel 0 1\r\nr\r\nEND\r\n"
    );
    assert_eq!(at(&mut e, "get rel\r\n", NOW + 10), "END\r\n");
}

#[test]
fn flush_all_now_and_delayed() {
    let mut e = engine();
    let mut session = Session::default();
    let mut at = |e: &mut Engine, input: &str, now: u64| {
        let mut out = Vec::new();
        e.execute(&mut session, input.as_bytes(), &mut out, now);
        String::from_utf8(out).unwrap()
    };
    at(&mut e, "set a 0 0 1\r\na\r\n", NOW);
    assert_eq!(at(&mut e, "flush_all\r\n", NOW), "OK\r\n");
    assert_eq!(at(&mut e, "get a\r\n", NOW), "END\r\n");
    at(&mut e, "set a 0 0 1\r\na\r\n", NOW);
    assert_eq!(at(&mut e, "flush_all 10\r\n", NOW), "OK\r\n");
    assert_eq!(
        at(&mut e, "get a\r\n", NOW + 9),
        "VALUE a 0 1\r\na\r\nEND\r\n"
    );
    assert_eq!(at(&mut e, "get a\r\n", NOW + 10), "END\r\n");
    assert_eq!(at(&mut e, "flush_all noreply\r\n", NOW + 10), "");
    assert_eq!(at(&mut e, "flush_all 0 noreply\r\n", NOW + 10), "");
    assert_eq!(at(&mut e, "flush_all -1\r\n", NOW + 10), "OK\r\n");
    assert_eq!(e.counters().cmd_flush, 5);
}

#[test]
fn noreply_silences_every_reply_of_its_command() {
    let mut e = engine();
    let quiet = concat!(
        "set a 0 0 1 noreply\r\na\r\n",
        "add a 0 0 1 noreply\r\nb\r\n",
        "replace a 0 0 1 noreply\r\nc\r\n",
        "append a 0 0 1 noreply\r\nd\r\n",
        "prepend a 0 0 1 noreply\r\ne\r\n",
        "cas a 0 0 1 1 noreply\r\nf\r\n",
        "set n 0 0 1 noreply\r\n5\r\n",
        "incr n 1 noreply\r\n",
        "decr n 1 noreply\r\n",
        "incr a 1 noreply\r\n",
        "touch a 0 noreply\r\n",
        "delete nope noreply\r\n",
        "delete n 0 noreply\r\n",
        "verbosity 1 noreply\r\n",
        // Errors after noreply was seen are silent too, as in memcached.
        "set k 0 0 abc noreply\r\n",
        "verbosity noreply\r\n",
        "delete k x noreply\r\n",
        "set big 0 0 2000000 noreply\r\n",
    );
    let mut input = quiet.as_bytes().to_vec();
    input.extend(vec![b'x'; 2_000_002]);
    input.extend_from_slice(b"get a\r\n");
    let mut session = Session::default();
    let (out, outcome) = run_bytes(&mut e, &mut session, &input);
    assert_eq!(out, "VALUE a 0 3\r\necd\r\nEND\r\n");
    assert_eq!(outcome.consumed, input.len());
}

#[test]
fn version_verbosity_quit() {
    let mut e = engine();
    assert_eq!(
        ok(&mut e, "version\r\n"),
        format!("VERSION {}\r\n", super::super::VERSION)
    );
    assert_eq!(ok(&mut e, "verbosity 1\r\n"), "OK\r\n");
    let (out, outcome) = run(&mut e, "quit\r\nget a\r\n");
    assert_eq!(out, "", "quit answers nothing and runs nothing after it");
    assert!(outcome.close);
    assert_eq!(outcome.consumed, 6);
}

#[test]
fn every_error_is_answered_as_memcached_does() {
    let mut e = engine();
    ok(&mut e, "set s 0 0 3\r\nabc\r\n");
    let long_key = "k".repeat(251);
    let cases: Vec<(String, &str)> = vec![
        ("\r\n".into(), "ERROR\r\n"),
        ("bogus\r\n".into(), "ERROR\r\n"),
        ("get\r\n".into(), "ERROR\r\n"),
        ("set k 0 0\r\n".into(), "ERROR\r\n"),
        ("delete a b c d e\r\n".into(), "ERROR\r\n"),
        ("stats bogus\r\n".into(), "ERROR\r\n"),
        (
            "stats detail\r\n".into(),
            "CLIENT_ERROR usage: stats detail on|off|dump\r\n",
        ),
        (
            "slabs automove bad\r\n".into(),
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            format!("get {long_key}\r\n"),
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            format!("get s {long_key}\r\n"),
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "get a\x01b\r\n".into(),
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "set k 0 0 -1\r\n".into(),
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "set k x 0 1\r\n".into(),
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "incr s x\r\n".into(),
            "CLIENT_ERROR invalid numeric delta argument\r\n",
        ),
        (
            "touch s x\r\n".into(),
            "CLIENT_ERROR invalid exptime argument\r\n",
        ),
        (
            "gat x s\r\n".into(),
            "CLIENT_ERROR invalid exptime argument\r\n",
        ),
        (
            "flush_all x\r\n".into(),
            "CLIENT_ERROR invalid exptime argument\r\n",
        ),
        (
            "verbosity x\r\n".into(),
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "delete s 1\r\n".into(),
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
        ),
        // A data block of the wrong length: memcached takes <bytes> + 2 bytes, then reads on.
        (
            "set k 0 0 3\r\nabcdef\r\n".into(),
            "CLIENT_ERROR bad data chunk\r\nERROR\r\n",
        ),
        // `ab\r` is taken as the block; the `\n` left is an empty line.
        (
            "set k 0 0 1\r\nab\r\n".into(),
            "CLIENT_ERROR bad data chunk\r\nERROR\r\n",
        ),
        (
            "set k 0 0 -1\r\nabc\r\n".into(),
            "CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
    ];
    for (input, expected) in &cases {
        assert_eq!(ok(&mut e, input), *expected, "{input:?}");
    }
    assert_eq!(ok(&mut e, "get s k\r\n"), "VALUE s 0 3\r\nabc\r\nEND\r\n");
    assert!(e.counters().protocol_errors >= cases.len() as u64);
}

#[test]
fn http_request_closes_without_a_reply() {
    let mut e = engine();
    let (out, outcome) = run(&mut e, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(out, "");
    assert!(outcome.close);
}

#[test]
fn a_line_past_the_limit_closes_with_an_error() {
    let mut e = engine();
    let mut session = Session::default();
    let junk = vec![b'x'; 2048];
    let (out, outcome) = run_bytes(&mut e, &mut session, &junk);
    assert_eq!(
        (out.as_str(), outcome.close, outcome.consumed),
        ("", false, 0)
    );
    let mut more = junk.clone();
    more.push(b'x');
    let (out, outcome) = run_bytes(&mut e, &mut session, &more);
    assert_eq!(out, "CLIENT_ERROR line too long\r\n");
    assert!(outcome.close);
    assert!(session.is_closing());
}

#[test]
fn long_multi_get_lines_are_served() {
    let mut e = engine();
    ok(&mut e, "set key:000007 0 0 1\r\n7\r\n");
    let mut line = String::from("get");
    for i in 0..1000 {
        line.push_str(&format!(" key:{i:06}"));
    }
    line.push_str("\r\n");
    assert!(line.len() > 10_000);
    // Fed in 1 KiB pieces with the consumed prefix dropped, as a receive buffer would.
    let mut session = Session::default();
    let mut pending = Vec::new();
    let mut out = Vec::new();
    for piece in line.as_bytes().chunks(1024) {
        pending.extend_from_slice(piece);
        let outcome = e.execute(&mut session, &pending, &mut out, NOW);
        pending.drain(..outcome.consumed);
        assert!(!outcome.close);
        if !pending.is_empty() {
            assert!(outcome.needed >= 1);
            assert_eq!(session.scan.bytes, pending.len(), "searched once");
        }
    }
    assert!(pending.is_empty());
    assert_eq!(out, b"VALUE key:000007 0 1\r\n7\r\nEND\r\n");
}

#[test]
fn oversize_value_is_refused_and_skipped_unbuffered() {
    let mut e = engine();
    ok(&mut e, "set big 0 0 1\r\nx\r\n");
    let size = (1 << 20) + 1;
    let mut input = format!("set big 0 0 {size}\r\n").into_bytes();
    input.extend(vec![b'v'; size]);
    input.extend_from_slice(b"\r\nget big\r\n");
    let mut session = Session::default();
    let mut out = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for chunk in input.chunks(64 * 1024) {
        pending.extend_from_slice(chunk);
        let o = e.execute(&mut session, &pending, &mut out, NOW);
        pending.drain(..o.consumed);
        assert!(!o.close);
        assert!(
            pending.len() < 64 * 1024,
            "the value is skipped, not buffered"
        );
    }
    assert!(pending.is_empty());
    // The old item is gone: memcached unlinks it, so no stale value survives a refused SET.
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "SERVER_ERROR object too large for cache\r\nEND\r\n"
    );
    // The largest value that fits is stored.
    let fits = (1 << 20) - 512;
    let mut input = format!("set fits 0 0 {fits}\r\n").into_bytes();
    input.extend(vec![b'v'; fits]);
    input.extend_from_slice(b"\r\n");
    let mut session = Session::default();
    let (out, outcome) = run_bytes(&mut e, &mut session, &input);
    assert_eq!(
        (out.as_str(), outcome.consumed),
        ("STORED\r\n", input.len())
    );
}

// Regression: a SET refused for size left the old value in place, where memcached unlinks it
// (so clients that retry a smaller value, or fall back to the database, read no stale value).
// Other storage commands keep the item, as memcached's do; the refusal counts
// `store_too_large`, not `cmd_set`.
#[test]
fn only_a_set_refused_for_size_unlinks_the_old_item() {
    let big = (1 << 20) + 1;
    let body = "v".repeat(big);
    for (command, kept) in [
        ("set", false),
        ("add", true),
        ("replace", true),
        ("append", true),
        ("prepend", true),
        ("cas", true),
    ] {
        let mut e = engine();
        ok(&mut e, "set k 0 0 3\r\nold\r\n");
        let cas = if command == "cas" { " 1" } else { "" };
        let line = format!("{command} k 0 0 {big}{cas}\r\n{body}\r\n");
        assert_eq!(
            ok(&mut e, &line),
            "SERVER_ERROR object too large for cache\r\n",
            "{command}"
        );
        let expected = if kept {
            "VALUE k 0 3\r\nold\r\nEND\r\n"
        } else {
            "END\r\n"
        };
        assert_eq!(ok(&mut e, "get k\r\n"), expected, "{command}");
        let snapshot = e.snapshot();
        assert_eq!(snapshot.counters.store_too_large, 1, "{command}");
        assert_eq!(
            snapshot.counters.cmd_set, 1,
            "{command}: the first set only"
        );
    }
    // noreply: no answer, same effect.
    let mut e = engine();
    ok(&mut e, "set k 0 0 3\r\nold\r\n");
    let line = format!("set k 0 0 {big} noreply\r\n{body}\r\nget k\r\n");
    assert_eq!(ok(&mut e, &line), "END\r\n");
}

// The same for a SET refused for memory: a value that fits `-I` but not the budget.
#[test]
fn a_set_refused_for_memory_unlinks_the_old_item() {
    let mut e = super::super::tests::engine_with(ShardConfig {
        memory_limit_bytes: 64 * 1024,
        max_item_size: 1 << 20,
    });
    ok(&mut e, "set k 0 0 3\r\nold\r\n");
    let body = "v".repeat(100_000);
    let line = format!("set k 0 0 {}\r\n{body}\r\nget k\r\n", body.len());
    assert_eq!(
        ok(&mut e, &line),
        "SERVER_ERROR out of memory storing object\r\nEND\r\n"
    );
    assert_eq!(e.snapshot().counters.store_no_memory, 1);
}

#[test]
fn append_past_the_item_limit_is_not_stored() {
    let mut e = engine();
    let half = 600_000;
    let mut input = format!("set k 0 0 {half}\r\n").into_bytes();
    input.extend(vec![b'a'; half]);
    input.extend_from_slice(format!("\r\nappend k 0 0 {half}\r\n").as_bytes());
    input.extend(vec![b'b'; half]);
    input.extend_from_slice(b"\r\n");
    let mut session = Session::default();
    let (out, _) = run_bytes(&mut e, &mut session, &input);
    assert_eq!(out, "STORED\r\nNOT_STORED\r\n");
}

#[test]
fn out_of_memory_is_a_server_error() {
    let mut e = Engine::new(EngineConfig {
        started_unix_secs: NOW,
        conn_limit: 16,
        ..EngineConfig::new(
            ShardConfig {
                memory_limit_bytes: 4096,
                max_item_size: 1 << 20,
            },
            crate::control::Control::new(Default::default(), 0),
        )
    });
    let mut input = b"set k 0 0 5000\r\n".to_vec();
    input.extend(vec![b'x'; 5000]);
    input.extend_from_slice(b"\r\n");
    let mut session = Session::default();
    let (out, _) = run_bytes(&mut e, &mut session, &input);
    assert_eq!(out, "SERVER_ERROR out of memory storing object\r\n");
}

#[test]
fn stats_groups() {
    let mut e = engine();
    ok(&mut e, "set a 0 0 1\r\na\r\nget a b\r\n");
    let general = ok(&mut e, "stats\r\n");
    assert!(general.starts_with("STAT pid "), "{general}");
    assert!(general.ends_with("END\r\n"));
    for line in [
        "STAT cmd_get 2\r\n",
        "STAT get_hits 1\r\n",
        "STAT curr_items 1\r\n",
    ] {
        assert!(general.contains(line), "{line} in {general}");
    }
    for line in general.lines().filter(|l| *l != "END") {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!((parts.len(), parts[0]), (3, "STAT"), "{line}");
    }
    let settings = ok(&mut e, "stats settings\r\n");
    assert!(
        settings.contains("STAT item_size_max 1048576\r\n"),
        "{settings}"
    );
    assert!(settings.ends_with("END\r\n"));
    let items = ok(&mut e, "stats items\r\n");
    assert!(items.starts_with("STAT items:1:number 1\r\n"), "{items}");
    assert!(items.contains("STAT items:1:evicted 0\r\n"));
    assert!(items.ends_with("END\r\n"));
    let slabs = ok(&mut e, "stats slabs\r\n");
    assert!(slabs.contains("STAT 1:used_chunks 1\r\n"), "{slabs}");
    assert!(slabs.contains("STAT 1:get_hits 1\r\n"));
    assert!(slabs.contains("STAT 1:cmd_set 1\r\n"));
    assert!(slabs.contains("STAT active_slabs 1\r\n"));
    let malloced = e.shard().stats().heap_bytes;
    assert!(malloced > 0);
    assert!(slabs.contains(&format!("STAT total_malloced {malloced}\r\n")));
    assert!(slabs.ends_with("END\r\n"));
}

#[test]
fn text_and_binary_count_the_same_commands() {
    // The same operations over each protocol move the same counters.
    let mut text = engine();
    ok(
        &mut text,
        "set a 0 0 1\r\na\r\nget a\r\ntouch a 0\r\nflush_all\r\n",
    );
    let mut binary = engine();
    let mut input = Vec::new();
    for (opcode, extras, key, value) in [
        (Opcode::Set, &[0u8; 8][..], &b"a"[..], &b"a"[..]),
        (Opcode::Get, &[], b"a", b""),
        (Opcode::Touch, &[0u8; 4][..], b"a", b""),
        (Opcode::Flush, &[], b"", b""),
    ] {
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
        .emit_into(&mut input);
    }
    let mut session = Session::default();
    run_bytes(&mut binary, &mut session, &input);
    let (t, b) = (text.counters(), binary.counters());
    assert_eq!(
        (t.cmd_get, t.cmd_set, t.cmd_touch, t.cmd_flush),
        (b.cmd_get, b.cmd_set, b.cmd_touch, b.cmd_flush)
    );
    assert_eq!(
        (t.cmd_get, t.cmd_set, t.cmd_touch, t.cmd_flush),
        (1, 1, 1, 1)
    );
    assert_eq!(text.shard().stats(), binary.shard().stats());
}

/// A pipeline of every command, and the replies memcached sends for it.
fn pipeline() -> (&'static str, &'static str) {
    (
        concat!(
            "set a 1 0 5\r\nhello\r\n",
            "get a b\r\n",
            "append a 0 0 1 noreply\r\n!\r\n",
            "add a 0 0 1\r\nx\r\n",
            "replace b 0 0 1\r\nx\r\n",
            "set n 0 0 1\r\n7\r\n",
            "incr n 3\r\n",
            "decr n 20\r\n",
            "touch a 0\r\n",
            "gat 0 a\r\n",
            "delete n\r\n",
            "set c 0 0 2\r\nabcd\r\n",
            "bogus\r\n",
            "cas a 0 0 1 999\r\nz\r\n",
            "flush_all\r\n",
            "get a\r\n",
            "verbosity 0\r\n",
        ),
        concat!(
            "STORED\r\n",
            "VALUE a 1 5\r\nhello\r\nEND\r\n",
            "NOT_STORED\r\n",
            "NOT_STORED\r\n",
            "STORED\r\n",
            "10\r\n",
            "0\r\n",
            "TOUCHED\r\n",
            "VALUE a 1 6\r\nhello!\r\nEND\r\n",
            "DELETED\r\n",
            "CLIENT_ERROR bad data chunk\r\n",
            "ERROR\r\n",
            "ERROR\r\n",
            "EXISTS\r\n",
            "OK\r\n",
            "END\r\n",
            "OK\r\n",
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
        "get hello\r\n",
        "set k 0 0 5\r\nhello\r\n",
        "gats 0 a b c\r\n",
        "delete k noreply\r\n",
    ] {
        let bytes = request.as_bytes();
        for n in 1..bytes.len() {
            let mut session = Session::default();
            let (out, outcome) = run_bytes(&mut e, &mut session, &bytes[..n]);
            assert_eq!(out, "", "{request:?}[..{n}]");
            assert_eq!(outcome.consumed, 0, "{request:?}[..{n}]");
            assert!(outcome.needed >= 1 && !outcome.close, "{request:?}[..{n}]");
        }
    }
    // A data block's missing bytes are counted exactly.
    let mut session = Session::default();
    let (_, outcome) = run_bytes(&mut e, &mut session, b"set k 0 0 5\r\nhel");
    assert_eq!((outcome.consumed, outcome.needed), (0, 4));
}

#[test]
fn output_backlog_stops_execution_until_sent() {
    let mut e = engine();
    let value = "v".repeat(100_000);
    ok(&mut e, &format!("set big 0 0 100000\r\n{value}\r\n"));
    let input = "get big\r\n".repeat(5);
    let mut session = Session::default();
    let mut out = Vec::new();
    let outcome = e.execute(&mut session, input.as_bytes(), &mut out, NOW);
    assert!(out.len() >= OUT_HIGH_WATER_BYTES);
    assert!(outcome.consumed < input.len());
    assert_eq!(outcome.consumed % 9, 0, "whole requests only");
    out.clear();
    let rest = e.execute(
        &mut session,
        &input.as_bytes()[outcome.consumed..],
        &mut out,
        NOW,
    );
    assert_eq!(outcome.consumed + rest.consumed, input.len());
}

/// Feeds `input` in `piece`-byte pieces as a receive buffer would (the consumed prefix dropped),
/// and after every call sends the output away as a reading client would, at most `read` bytes
/// per call; returns everything sent. Asserts the output never holds more than the high water
/// plus one reply of `largest` bytes, and that the input is consumed whole.
#[track_caller]
fn feed_and_read(
    e: &mut Engine,
    input: &[u8],
    piece: usize,
    read: usize,
    largest: usize,
) -> Vec<u8> {
    let mut session = Session::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut sent = Vec::new();
    let mut chunks = input.chunks(piece);
    loop {
        let outcome = e.execute(&mut session, &pending, &mut out, NOW);
        pending.drain(..outcome.consumed);
        assert!(!outcome.close);
        assert!(
            out.len() <= OUT_HIGH_WATER_BYTES + largest + 100,
            "output grew to {} bytes",
            out.len()
        );
        let n = out.len().min(read);
        sent.extend(out.drain(..n));
        if outcome.stop == Stop::Input {
            match chunks.next() {
                Some(chunk) => pending.extend_from_slice(chunk),
                None if out.is_empty() => break,
                None => {}
            }
        }
    }
    assert!(pending.is_empty(), "piece {piece}");
    assert!(!session.mid_request());
    sent
}

/// Stores `count` values of `len` bytes (`big:0`, `big:1`, ...); returns them.
fn big_values(e: &mut Engine, count: usize, len: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let value: String = (0..len)
                .map(|j| (b'a' + ((i + j) % 26) as u8) as char)
                .collect();
            ok(e, &format!("set big:{i} {i} 0 {len}\r\n{value}\r\n"));
            value
        })
        .collect()
}

#[test]
fn a_multi_get_stops_at_the_high_water_and_resumes_byte_exact() {
    // Each value is over a third of the high water: the line cannot be answered in one call.
    let len = OUT_HIGH_WATER_BYTES / 3 + 1000;
    let order = [0usize, 1, 9, 2, 0, 2, 9, 1, 1, 0];
    let mut line = String::from("get");
    let mut expected = String::new();
    let mut e = engine();
    let values = big_values(&mut e, 3, len);
    ok(&mut e, "set small 5 0 2\r\nhi\r\n");
    for &i in &order {
        if i == 9 {
            line.push_str(" small missing");
            expected.push_str("VALUE small 5 2\r\nhi\r\n");
        } else {
            line.push_str(&format!(" big:{i}"));
            expected.push_str(&format!("VALUE big:{i} {i} {len}\r\n{}\r\n", values[i]));
        }
    }
    line.push_str("\r\n");
    expected.push_str("END\r\n");
    // A request after the line runs once the line is done.
    let input = format!("{line}mn\r\n");
    expected.push_str("MN\r\n");
    let pieces = PIECES.iter().copied().chain([7, 4096, input.len()]);
    for piece in pieces {
        for read in [1000, 64 * 1024, usize::MAX] {
            let sent = feed_and_read(&mut e, input.as_bytes(), piece, read, len);
            assert!(sent == expected.as_bytes(), "piece {piece}, read {read}");
        }
    }
}

#[test]
fn a_stopped_multi_get_keeps_its_line_and_continues_with_its_next_key() {
    // One value fills the output to the high water: one key per call.
    let len = OUT_HIGH_WATER_BYTES;
    let mut e = engine();
    let values = big_values(&mut e, 2, len);
    let line = b"gats 100 big:0 big:1 big:0 big:1\r\n";
    let mut session = Session::default();
    let mut out = Vec::new();
    let first = e.execute(&mut session, line, &mut out, NOW);
    assert_eq!((first.consumed, first.stop), (0, Stop::Output));
    assert!(session.mid_request());
    let header = |i: usize| format!("VALUE big:{i} {i} {len} ");
    assert!(out.starts_with(header(0).as_bytes()));
    let done = out.len();
    // The ring wrapped: only part of the line is contiguous. Nothing runs, the rest is asked for.
    let mut more = Vec::new();
    let partial = e.execute(&mut session, &line[..10], &mut more, NOW);
    assert_eq!((partial.consumed, partial.needed), (0, line.len() - 10));
    assert_eq!(partial.stop, Stop::Input);
    assert!(more.is_empty());
    out.clear();
    let second = e.execute(&mut session, line, &mut out, NOW);
    assert_eq!(second.consumed, 0, "still part-way");
    assert!(out.starts_with(header(1).as_bytes()));
    out.clear();
    let mut rounds = 0;
    loop {
        let outcome = e.execute(&mut session, line, &mut out, NOW);
        out.clear();
        rounds += 1;
        if outcome.consumed == line.len() {
            break;
        }
        assert!(rounds < 10);
    }
    assert_eq!(rounds, 2, "one key per call, the last with END");
    assert!(!session.mid_request());
    assert!(done > 0 && values.len() == 2);
    // Every key was touched once, whatever the stops: four touches.
    assert_eq!(e.counters().cmd_touch, 4);
}

#[test]
fn a_multi_get_shares_the_turn_key_by_key() {
    let mut e = engine();
    for i in 0..10 {
        ok(&mut e, &format!("set k{i} 0 0 1\r\n{i}\r\n"));
    }
    let line = "get k0 k1 k2 k3 k4 k5 k6 k7 k8 k9\r\nversion\r\n";
    let mut session = Session::default();
    let mut out = Vec::new();
    let mut turns = 0;
    let mut consumed = 0;
    while consumed < line.len() {
        session.begin_turn(3);
        let outcome = e.execute(&mut session, &line.as_bytes()[consumed..], &mut out, NOW);
        consumed += outcome.consumed;
        turns += 1;
        if consumed < line.len() {
            assert_eq!(outcome.stop, Stop::Turn, "turn {turns}");
        }
        assert!(turns <= 5);
    }
    assert_eq!(turns, 4, "ten keys and a line, three at a time");
    let expected: String = (0..10)
        .map(|i| format!("VALUE k{i} 0 1\r\n{i}\r\n"))
        .collect();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.starts_with(&format!("{expected}END\r\nVERSION ")),
        "{out}"
    );
}

#[test]
fn gets_are_forwarded_as_single_key_lines() {
    let mut out = Vec::new();
    super::write_get_line(&mut out, protocol::text::GetCommand::Gats, -1, b"k1");
    super::write_get_line(&mut out, protocol::text::GetCommand::Get, 0, b"k2");
    assert_eq!(out, b"gats -1 k1\r\nget k2\r\n");
}

#[test]
fn exptimes_stay_whole_seconds_with_a_millisecond_clock() {
    // memcached's clock counts whole seconds: `1` set 0.9 s into a second ends 0.1 s later.
    let mut e = engine();
    let mut session = Session::default();
    let mut out = Vec::new();
    let at = |ms: u64| store::Now::from_millis(NOW * 1000 + ms);
    e.execute(&mut session, b"set k 0 1 1\r\nv\r\n", &mut out, at(900));
    out.clear();
    e.execute(&mut session, b"get k\r\n", &mut out, at(999));
    assert_eq!(out, b"VALUE k 0 1\r\nv\r\nEND\r\n");
    out.clear();
    e.execute(&mut session, b"get k\r\n", &mut out, at(1000));
    assert_eq!(out, b"END\r\n");
}

/// An engine whose latency clock reads [`FAKE_NS`].
fn engine_with_control(settings: crate::control::Settings) -> Engine {
    Engine::new(EngineConfig {
        control: crate::control::Control::with_clock(settings, || {
            FAKE_NS.load(std::sync::atomic::Ordering::Relaxed)
        }),
        ..super::super::tests::engine_config()
    })
}

/// The latency tests' clock.
static FAKE_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The value of `STAT <name>` in a stats reply.
#[track_caller]
fn stat(reply: &str, name: &str) -> Option<String> {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .map(str::to_string)
}

#[test]
fn stats_detail_counts_per_prefix_while_on() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "stats detail dump\r\n"), "END\r\n");
    assert_eq!(ok(&mut e, "stats detail on\r\n"), "OK\r\n");
    ok(
        &mut e,
        "get foo:bar\r\nset foo:x 0 0 1\r\nx\r\ndelete foo:q\r\nget foo:x\r\nget nocolon\r\n",
    );
    ok(&mut e, "mg foo:x v\r\nms bar:y 1\r\ny\r\nmd bar:y\r\n");
    assert_eq!(
        ok(&mut e, "stats detail dump\r\n"),
        "PREFIX bar get 0 hit 0 set 1 del 1\r\nPREFIX foo get 3 hit 2 set 1 del 1\r\nEND\r\n"
    );
    assert!(ok(&mut e, "stats settings\r\n").contains("STAT detail_enabled yes\r\n"));
    // Off stops counting; the counts stay for dump, as in memcached.
    assert_eq!(ok(&mut e, "stats detail off\r\n"), "OK\r\n");
    ok(&mut e, "get foo:bar\r\n");
    assert!(ok(&mut e, "stats detail dump\r\n").contains("PREFIX foo get 3 "));
    // stats reset clears them.
    assert_eq!(ok(&mut e, "stats reset\r\n"), "RESET\r\n");
    assert_eq!(ok(&mut e, "stats detail dump\r\n"), "END\r\n");
}

#[test]
fn stats_reset_restarts_counters_and_keeps_the_cache() {
    let mut e = engine();
    ok(&mut e, "set a 0 0 1\r\na\r\nget a\r\nget b\r\nincr a 1\r\n");
    let before = ok(&mut e, "stats\r\n");
    assert_eq!(stat(&before, "cmd_get").as_deref(), Some("2"));
    assert_eq!(ok(&mut e, "stats reset\r\n"), "RESET\r\n");
    let after = ok(&mut e, "stats\r\n");
    for name in [
        "cmd_get",
        "cmd_set",
        "get_hits",
        "get_misses",
        "total_items",
        "incr_misses",
    ] {
        assert_eq!(stat(&after, name).as_deref(), Some("0"), "{name}");
    }
    assert_eq!(stat(&after, "curr_items").as_deref(), Some("1"));
    assert_eq!(stat(&after, "bytes"), stat(&before, "bytes"));
    // Counting goes on from zero.
    ok(&mut e, "get a\r\n");
    assert_eq!(
        stat(&ok(&mut e, "stats\r\n"), "cmd_get").as_deref(),
        Some("1")
    );
}

#[test]
fn stats_sizes_lists_32_byte_classes_and_can_be_turned_off() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "stats sizes\r\n"), "END\r\n");
    ok(&mut e, "set a 0 0 1\r\na\r\nset b 0 0 1\r\nb\r\n");
    ok(
        &mut e,
        &format!("set c 0 0 1000\r\n{}\r\n", "c".repeat(1000)),
    );
    let small = store::item_size(1, 1).div_ceil(32) * 32;
    let large = store::item_size(1, 1000).div_ceil(32) * 32;
    assert_eq!(
        ok(&mut e, "stats sizes\r\n"),
        format!("STAT {small} 2\r\nSTAT {large} 1\r\nEND\r\n")
    );
    // memcached ends these two replies without END.
    assert_eq!(
        ok(&mut e, "stats sizes_disable\r\n"),
        "STAT sizes_status disabled\r\n"
    );
    assert_eq!(
        ok(&mut e, "stats sizes\r\n"),
        "STAT sizes_status disabled\r\nEND\r\n"
    );
    assert_eq!(
        ok(&mut e, "stats sizes_enable\r\n"),
        "STAT sizes_status enabled\r\n"
    );
    assert!(ok(&mut e, "stats settings\r\n").contains("STAT track_sizes yes\r\n"));
}

#[test]
fn slabs_commands_are_answered_as_memcached_answers_them() {
    let mut e = engine();
    for (line, reply) in [
        (
            "slabs automove bad\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        ("slabs automove 1\r\n", "OK\r\n"),
        ("slabs automove 3\r\n", "ERROR\r\n"),
        ("slabs automove 0 noreply\r\n", ""),
        ("slabs automove ratio 0.5\r\n", "OK\r\n"),
        (
            "slabs reassign 1 1\r\n",
            "SAME src and dst class are identical\r\n",
        ),
        (
            "slabs reassign 1 99\r\n",
            "BADCLASS invalid src or dst class id\r\n",
        ),
        (
            "slabs reassign x 1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        ("slabs\r\n", "ERROR\r\n"),
    ] {
        assert_eq!(ok(&mut e, line), reply, "{line:?}");
    }
    let settings = ok(&mut e, "stats settings\r\n");
    assert_eq!(stat(&settings, "slab_automove").as_deref(), Some("0"));
    assert_eq!(
        stat(&settings, "slab_automove_ratio").as_deref(),
        Some("0.50")
    );
}

/// Runs `e`'s background work as its loop would, a step per call from `from_ns` on with
/// `step_ns` between calls, until a call does none; returns how many did some.
#[track_caller]
fn housekeep_until_idle(e: &mut Engine, now: u64, from_ns: u64, step_ns: u64) -> usize {
    let mut ns = from_ns;
    let mut steps = 0;
    while e.housekeep(now, ns) {
        steps += 1;
        ns += step_ns;
        assert!(steps < 100_000, "background work ends");
    }
    steps
}

/// Stores `count` items `<prefix><i>` of `len` bytes, expiring after `exptime`.
#[track_caller]
fn fill(e: &mut Engine, prefix: &str, count: usize, len: usize, exptime: i64) {
    let value = "v".repeat(len);
    let mut session = Session::default();
    for i in 0..count {
        let line = format!("set {prefix}{i} 0 {exptime} {len} noreply\r\n{value}\r\n");
        let (out, outcome) = run_bytes(e, &mut session, line.as_bytes());
        assert_eq!((out.as_str(), outcome.consumed), ("", line.len()));
    }
}

// Regression: `slabs reassign` answered BADCLASS where memcached answers NOSPARE, and no
// page could ever move.
#[test]
fn slabs_reassign_moves_a_page_as_memcached_answers_it() {
    let mut e = engine();
    let nospare = "NOSPARE source class has no spare pages\r\n";
    let badclass = "BADCLASS invalid src or dst class id\r\n";
    // No item yet: class 1 has no page, a class 2 to 63 never has one.
    for (line, reply) in [
        ("slabs reassign 1 2\r\n", nospare),
        ("slabs reassign 1 0\r\n", nospare),
        ("slabs reassign 2 1\r\n", nospare),
        ("slabs reassign 63 0\r\n", nospare),
        ("slabs reassign 64 1\r\n", badclass),
        ("slabs reassign 1 64\r\n", badclass),
        ("slabs reassign -2 1\r\n", badclass),
        ("slabs reassign 1 -1\r\n", badclass),
        // "Any class": none has a page to spare.
        ("slabs reassign -1 2\r\n", badclass),
        (
            "slabs reassign -1 -1\r\n",
            "SAME src and dst class are identical\r\n",
        ),
        // The pool (the 64 MiB no item holds) gives a page at once.
        ("slabs reassign 0 1\r\n", "OK\r\n"),
    ] {
        assert_eq!(ok(&mut e, line), reply, "{line:?}");
    }
    let stats = ok(&mut e, "stats\r\n");
    assert_eq!(stat(&stats, "slabs_moved").as_deref(), Some("1"));
    assert_eq!(stat(&stats, "slab_reassign_running").as_deref(), Some("0"));
    assert_eq!(stat(&stats, "slab_global_page_pool").as_deref(), Some("64"));
    fill(&mut e, "k", 3000, 1000, 0);
    let slabs = ok(&mut e, "stats slabs\r\n");
    let pages: u64 = stat(&slabs, "1:total_pages").unwrap().parse().unwrap();
    assert!(pages >= 3, "{slabs}");
    // The store's memory in use (items, their segments' dead bytes and unwritten tails).
    let bytes_before: u64 = stat(&ok(&mut e, "stats slabs\r\n"), "total_malloced")
        .unwrap()
        .parse()
        .unwrap();
    // A page of items goes back to the pool, over several turns; another move waits.
    assert_eq!(ok(&mut e, "slabs reassign 1 0\r\n"), "OK\r\n");
    assert_eq!(
        ok(&mut e, "slabs reassign 1 5\r\n"),
        "BUSY currently processing reassign request\r\n"
    );
    let stats = ok(&mut e, "stats\r\n");
    assert_eq!(stat(&stats, "slab_reassign_running").as_deref(), Some("1"));
    let steps = housekeep_until_idle(&mut e, NOW, 1, 1000);
    assert!(steps >= 2, "bounded steps: {steps}");
    let stats = ok(&mut e, "stats\r\n");
    let number = |name: &str| -> u64 { stat(&stats, name).unwrap().parse().unwrap() };
    assert_eq!(number("slab_reassign_running"), 0);
    assert_eq!(number("slabs_moved"), 2);
    let malloced: u64 = stat(&ok(&mut e, "stats slabs\r\n"), "total_malloced")
        .unwrap()
        .parse()
        .unwrap();
    let freed = bytes_before - malloced;
    assert!(
        (PAGE_BYTES..PAGE_BYTES + 2000).contains(&freed),
        "{freed} bytes of memory freed"
    );
    let evicted = number("slab_reassign_evictions_nomem");
    assert_eq!(3000 - number("curr_items"), evicted);
    assert_eq!(number("evictions"), 0, "a page move is not an eviction");
    // "Any class" picks the item class.
    assert_eq!(ok(&mut e, "slabs reassign -1 7\r\n"), "OK\r\n");
    housekeep_until_idle(&mut e, NOW, 1, 1000);
    let stats = ok(&mut e, "stats\r\n");
    assert_eq!(stat(&stats, "slabs_moved").as_deref(), Some("3"));
    assert!(ok(&mut e, "stats settings\r\n").contains("STAT slab_reassign yes\r\n"));
    // `stats reset` starts the count over.
    ok(&mut e, "stats reset\r\n");
    assert_eq!(
        stat(&ok(&mut e, "stats\r\n"), "slabs_moved").as_deref(),
        Some("0")
    );
}

// Regression: `lru_crawler crawl`, `tocrawl`, `sleep`, `enable` and `disable` answered ERROR;
// memcached crawls.
#[test]
fn lru_crawler_crawl_reclaims_expired_items_a_step_per_turn() {
    let mut e = engine();
    let settings = ok(&mut e, "stats settings\r\n");
    for (name, value) in [
        ("lru_crawler", "yes"),
        ("lru_crawler_sleep", "100"),
        ("lru_crawler_tocrawl", "0"),
    ] {
        assert_eq!(stat(&settings, name).as_deref(), Some(value), "{name}");
    }
    fill(&mut e, "live", 200, 10, 0);
    fill(&mut e, "short", 400, 10, 1);
    let later = NOW + 2;
    assert_eq!(ok(&mut e, "lru_crawler crawl 1\r\n"), "OK\r\n");
    let busy = "BUSY currently processing crawler request\r\n";
    assert_eq!(ok(&mut e, "lru_crawler crawl all\r\n"), busy);
    assert_eq!(ok(&mut e, "lru_crawler metadump all\r\n"), busy);
    let stats = ok(&mut e, "stats\r\n");
    assert_eq!(stat(&stats, "lru_crawler_running").as_deref(), Some("1"));
    assert_eq!(stat(&stats, "lru_crawler_starts").as_deref(), Some("1"));
    // A step, then nothing until `lru_crawler sleep` (100 us) has passed.
    assert!(e.housekeep(later, 1_000));
    assert!(!e.housekeep(later, 50_000), "paused");
    assert!(e.housekeep(later, 101_000));
    let steps = 2 + housekeep_until_idle(&mut e, later, 201_000, 100_000);
    assert!(steps >= 600 / HOUSEKEEPING_ITEMS, "{steps} steps");
    let stats = ok(&mut e, "stats\r\n");
    let number = |name: &str| -> u64 { stat(&stats, name).unwrap().parse().unwrap() };
    assert_eq!(number("lru_crawler_running"), 0);
    assert_eq!(number("crawler_reclaimed"), 400);
    assert_eq!(number("crawler_items_checked"), 600);
    assert_eq!(number("curr_items"), 200);
    assert_eq!(number("reclaimed"), 0, "the crawler's are counted apart");
    let items = ok(&mut e, "stats items\r\n");
    assert_eq!(
        stat(&items, "items:1:crawler_reclaimed").as_deref(),
        Some("400")
    );
    // `tocrawl` bounds a crawl; a class without items is crawled at once.
    assert_eq!(ok(&mut e, "lru_crawler tocrawl 10\r\n"), "OK\r\n");
    assert_eq!(ok(&mut e, "lru_crawler crawl 1,2\r\n"), "OK\r\n");
    housekeep_until_idle(&mut e, later, 1_000_000, 100_000);
    assert_eq!(ok(&mut e, "lru_crawler crawl 2,3\r\n"), "OK\r\n");
    let stats = ok(&mut e, "stats\r\n");
    assert_eq!(
        stat(&stats, "crawler_items_checked").as_deref(),
        Some("610")
    );
    assert_eq!(stat(&stats, "lru_crawler_running").as_deref(), Some("0"));
    assert_eq!(stat(&stats, "lru_crawler_starts").as_deref(), Some("3"));
    for (line, reply) in [
        (
            "lru_crawler crawl ,\r\n",
            "NOTSTARTED no items to crawl\r\n",
        ),
        ("lru_crawler crawl 0\r\n", "BADCLASS invalid class id\r\n"),
        ("lru_crawler crawl 64\r\n", "BADCLASS invalid class id\r\n"),
        ("lru_crawler crawl 1,x\r\n", "BADCLASS invalid class id\r\n"),
        (
            "lru_crawler crawl hash\r\n",
            "ERROR an unknown error happened\r\n",
        ),
        (
            "lru_crawler sleep 1000001\r\n",
            "CLIENT_ERROR sleep must be one second or less\r\n",
        ),
        ("lru_crawler sleep 0\r\n", "OK\r\n"),
        (
            "lru_crawler enable\r\n",
            "ERROR failed to start lru crawler thread\r\n",
        ),
        ("lru_crawler disable\r\n", "OK\r\n"),
        ("lru_crawler disable\r\n", "OK\r\n"),
        (
            "lru_crawler crawl 1\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
        (
            "lru_crawler metadump all\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
    ] {
        assert_eq!(ok(&mut e, line), reply, "{line:?}");
    }
    let settings = ok(&mut e, "stats settings\r\n");
    assert_eq!(stat(&settings, "lru_crawler").as_deref(), Some("no"));
    assert_eq!(stat(&settings, "lru_crawler_sleep").as_deref(), Some("0"));
    assert_eq!(
        stat(&settings, "lru_crawler_tocrawl").as_deref(),
        Some("10")
    );
    // Disabled, the background crawler takes nothing back either.
    fill(&mut e, "again", 100, 10, 1);
    assert_eq!(e.sweep_expired(usize::MAX, later), 0);
    assert_eq!(ok(&mut e, "lru_crawler enable\r\n"), "OK\r\n");
    assert_eq!(e.sweep_expired(usize::MAX, later), 100);
    assert_eq!(ok(&mut e, "lru_crawler crawl 1\r\n"), "OK\r\n");
}

// Regression: `cache_memlimit` answered ERROR; memcached changes its budget at run time.
#[test]
fn cache_memlimit_changes_the_budget_and_a_lower_one_is_reached_in_steps() {
    let mut e = engine_with_control(crate::control::Settings {
        memory_limit_bytes: 64 << 20,
        ..Default::default()
    });
    for (line, reply) in [
        (
            "cache_memlimit 7\r\n",
            "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
        ),
        (
            "cache_memlimit 1000000001\r\n",
            "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n",
        ),
        ("cache_memlimit x\r\n", "ERROR\r\n"),
        ("cache_memlimit 5 noreply\r\n", ""),
    ] {
        assert_eq!(ok(&mut e, line), reply, "{line:?}");
    }
    fill(&mut e, "k", 20_000, 1000, 0);
    let number = |reply: &str, name: &str| -> u64 { stat(reply, name).unwrap().parse().unwrap() };
    let stats = ok(&mut e, "stats\r\n");
    assert!(number(&stats, "bytes") > 16 << 20);
    assert_eq!(number(&stats, "evictions"), 0);
    assert_eq!(ok(&mut e, "cache_memlimit 8\r\n"), "OK\r\n");
    let settings = ok(&mut e, "stats settings\r\n");
    assert_eq!(number(&settings, "maxbytes"), 8 << 20);
    assert_eq!(number(&ok(&mut e, "stats\r\n"), "limit_maxbytes"), 8 << 20);
    // Evicted down to the new budget a bounded step per turn.
    let steps = housekeep_until_idle(&mut e, NOW, 1, 1000);
    assert!(steps > 10_000 / HOUSEKEEPING_ITEMS, "{steps} steps");
    let stats = ok(&mut e, "stats\r\n");
    assert!(number(&stats, "bytes") <= 8 << 20);
    let evictions = number(&stats, "evictions");
    assert!(evictions > 10_000, "{evictions}");
    // A higher budget is room at once.
    assert_eq!(ok(&mut e, "cache_memlimit 16 noreply\r\n"), "");
    fill(&mut e, "more", 5000, 1000, 0);
    let stats = ok(&mut e, "stats\r\n");
    assert_eq!(number(&stats, "evictions"), evictions);
    assert!(number(&stats, "bytes") > 8 << 20);
    assert_eq!(
        number(&ok(&mut e, "stats settings\r\n"), "maxbytes"),
        16 << 20
    );
}

#[test]
fn metadump_lists_every_item_as_memcached_formats_it() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "lru_crawler metadump all\r\n"), "END\r\n");
    ok(
        &mut e,
        "set a:b 0 0 1\r\nx\r\nset sp%ce 0 100 1\r\nx\r\nget a:b\r\n",
    );
    let dump = ok(&mut e, "lru_crawler metadump all\r\n");
    let mut lines: Vec<&str> = dump.split('\n').collect();
    assert_eq!(lines.pop(), Some(""));
    assert_eq!(lines.pop(), Some("END\r"));
    lines.sort_unstable();
    let size = store::item_size(3, 1);
    assert_eq!(
        lines[0],
        format!("key=a%3Ab exp=-1 la={NOW} cas=1 fetch=yes cls=1 size={size}")
    );
    let size = store::item_size_expiring(5, 1);
    assert_eq!(
        lines[1],
        format!(
            "key=sp%25ce exp={} la={NOW} cas=2 fetch=no cls=1 size={size}",
            NOW + 100
        )
    );
    assert_eq!(ok(&mut e, "lru_crawler metadump hash\r\n"), dump);
    assert_eq!(ok(&mut e, "lru_crawler metadump 1,2\r\n"), dump);
    assert_eq!(ok(&mut e, "lru_crawler metadump 2\r\n"), "END\r\n");
    // Empty items of the list are skipped, as memcached's list reading skips them.
    assert_eq!(ok(&mut e, "lru_crawler metadump ,1,,\r\n"), dump);
    for bad in ["0", "64", "1,x"] {
        assert_eq!(
            ok(&mut e, &format!("lru_crawler metadump {bad}\r\n")),
            "BADCLASS invalid class id\r\n"
        );
    }
}

// A dump is written a slice of buckets at a time, stopping at the output high-water mark as
// a multi-key get does, and goes on where it stopped.
#[test]
fn a_large_metadump_stops_at_the_high_water_mark_and_resumes() {
    let mut e = engine();
    let mut input = String::new();
    for i in 0..20_000 {
        input += &format!("set key:{i:06}:{} 0 0 1\r\nx\r\n", "k".repeat(60));
    }
    ok(&mut e, &input);
    let line = "lru_crawler metadump all\r\n";
    let mut session = Session::default();
    let mut all = Vec::new();
    let mut calls = 0;
    loop {
        let mut out = Vec::new();
        let outcome = e.execute(&mut session, line.as_bytes(), &mut out, NOW);
        assert!(
            out.len() < OUT_HIGH_WATER_BYTES + 128 * 200,
            "{}",
            out.len()
        );
        all.extend_from_slice(&out);
        calls += 1;
        if outcome.consumed == line.len() {
            break;
        }
        assert_eq!((outcome.consumed, outcome.stop), (0, Stop::Output));
    }
    assert!(calls > 3, "{calls}");
    let text = String::from_utf8(all).unwrap();
    assert!(text.ends_with("\nEND\r\n"));
    let mut keys: Vec<&str> = text.lines().filter(|l| l.starts_with("key=")).collect();
    assert_eq!(keys.len(), 20_000);
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 20_000, "each item once");
}

#[test]
fn verbosity_sets_the_shared_level() {
    let mut e = engine();
    assert_eq!(ok(&mut e, "verbosity 2\r\n"), "OK\r\n");
    assert_eq!(e.control().verbosity(), 2);
    assert_eq!(ok(&mut e, "verbosity 9 noreply\r\n"), "");
    assert_eq!(e.control().verbosity(), crate::control::MAX_VERBOSITY);
    assert!(ok(&mut e, "stats settings\r\n").contains("STAT verbosity 3\r\n"));
    ok(&mut e, "verbosity 0\r\n");
}

#[test]
fn shutdown_needs_dash_a() {
    let mut e = engine();
    assert_eq!(
        ok(&mut e, "shutdown\r\n"),
        "ERROR: shutdown not enabled\r\n"
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut e = engine_with_control(crate::control::Settings {
        shutdown_enabled: true,
        ..Default::default()
    });
    e.control().set_stop(stop.clone());
    assert_eq!(
        ok(&mut e, "shutdown now\r\n"),
        "CLIENT_ERROR invalid shutdown mode\r\n"
    );
    assert!(!stop.load(std::sync::atomic::Ordering::SeqCst));
    let (out, outcome) = run(&mut e, "shutdown\r\nversion\r\n");
    assert_eq!(out, "", "the connection closes without a reply");
    assert!(outcome.close);
    assert!(stop.load(std::sync::atomic::Ordering::SeqCst));
}

#[test]
fn a_watcher_gets_events_from_other_connections() {
    let mut e = engine();
    let control = e.control().clone();
    let record = control.open_connection(0, None, None, store::Now::from(NOW));
    let mut watcher = Session::default();
    watcher.set_token(99);
    watcher.set_record(record.clone());
    let (out, _) = run_bytes(&mut e, &mut watcher, b"watch fetchers mutations\r\n");
    assert_eq!(out, "OK\r\n");
    assert!(watcher.is_watching());
    // What a watcher sends is dropped.
    let (out, outcome) = run_bytes(&mut e, &mut watcher, b"get x\r\n");
    assert_eq!((out.as_str(), outcome.consumed), ("", 7));
    ok(
        &mut e,
        "set foo 0 100 3\r\nbar\r\nget foo\r\nget nope\r\nadd foo 0 0 1\r\nx\r\n",
    );
    let mut lines = Vec::new();
    control.watchers.drain(0, |token, bytes| {
        assert_eq!(token, 99);
        lines.extend_from_slice(bytes);
        bytes.len()
    });
    let text = String::from_utf8(lines).unwrap();
    let events: Vec<&str> = text
        .lines()
        .map(|l| l.split_once(" type=").unwrap().1)
        .collect();
    assert_eq!(
        events,
        [
            "item_store key=foo status=stored cmd=set ttl=100 clsid=1 cfd=0 size=3",
            "item_get key=foo status=found clsid=1 cfd=0 size=3",
            "item_get key=nope status=not_found clsid=0 cfd=0 size=0",
            "item_store key=foo status=not_stored cmd=add ttl=0 clsid=1 cfd=0 size=1",
        ],
        "{text}"
    );
    assert!(text.starts_with(&format!("ts={NOW}.0 gid=")), "{text}");
    drop(watcher);
    drop(record);
    assert!(!control.watchers.any(), "a closed watcher stops the events");
}

#[test]
fn stats_latency_counts_every_request_with_monotonic_percentiles() {
    use std::sync::atomic::Ordering;
    let mut e = engine_with_control(crate::control::Settings::default());
    let mut session = Session::default();
    // Each call's requests arrived at 1,000 ns and were done at 1,000 + 500 * call.
    for call in 1..=100u64 {
        session.set_arrival(1000);
        FAKE_NS.store(1000 + 500 * call, Ordering::Relaxed);
        run_bytes(
            &mut e,
            &mut session,
            b"set k 0 0 1\r\nx\r\nget k\r\nget k j\r\nversion\r\n",
        );
    }
    let stats = ok(&mut e, "stats\r\n");
    let latency = ok(&mut e, "stats latency\r\n");
    let count = |kind: &str| stat(&latency, &format!("latency:{kind}:count"));
    assert_eq!(count("get"), stat(&stats, "cmd_get"), "one per key");
    assert_eq!(count("get").as_deref(), Some("300"));
    assert_eq!(count("set").as_deref(), Some("100"));
    // version, and the two `stats` before this one.
    assert_eq!(count("other").as_deref(), Some("101"));
    assert_eq!(count("delete"), None);
    let quantiles: Vec<u64> = ["p50", "p90", "p99", "p99_9", "p99_99", "max"]
        .iter()
        .map(|q| {
            stat(&latency, &format!("latency:set:{q}_ns"))
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(quantiles.windows(2).all(|w| w[0] <= w[1]), "{quantiles:?}");
    assert!((24_500..=25_500).contains(&quantiles[0]), "{quantiles:?}");
    assert!((49_500..=50_500).contains(&quantiles[5]), "{quantiles:?}");
    assert_eq!(ok(&mut e, "stats reset\r\n"), "RESET\r\n");
    let latency = ok(&mut e, "stats latency\r\n");
    assert_eq!(stat(&latency, "latency:get:count"), None, "{latency}");
}

#[test]
fn stats_conns_lists_connections_and_listeners() {
    let mut e = Engine::new(EngineConfig {
        control: crate::control::Control::new(
            crate::control::Settings {
                tcp_port: 11211,
                interface: "127.0.0.1".into(),
                cpus: vec![0],
                ..Default::default()
            },
            0,
        ),
        started_unix_secs: NOW - 100,
        ..super::super::tests::engine_config()
    });
    let control = e.control().clone();
    let peer = "127.0.0.1:40000".parse().unwrap();
    let local = "127.0.0.1:11211".parse().unwrap();
    let record = control.open_connection(0, Some(peer), Some(local), store::Now::from(NOW - 3));
    let mut session = Session::default();
    session.set_record(record);
    let (conns, _) = run_bytes(&mut e, &mut session, b"stats conns\r\n");
    assert_eq!(
        conns,
        "STAT 0:addr tcp:127.0.0.1:11211\r\nSTAT 0:state conn_listening\r\n\
         STAT 0:secs_since_last_cmd 100\r\n\
         STAT 1:addr tcp:127.0.0.1:40000\r\nSTAT 1:listen_addr tcp:127.0.0.1:11211\r\n\
         STAT 1:state conn_parse_cmd\r\nSTAT 1:secs_since_last_cmd 3\r\nEND\r\n"
    );
}

// Two workers serving Redis clients too: four listeners, with the ports bound (port 0 asked for
// any), then the connection numbered after them.
#[test]
fn stats_conns_lists_every_listener_with_its_bound_port() {
    let mut e = engine_with_control(crate::control::Settings {
        tcp_port: 0,
        resp_port: Some(0),
        interface: "127.0.0.1".into(),
        cpus: vec![0, 1],
        ..Default::default()
    });
    let control = e.control().clone();
    control.set_bound_ports(11211, Some(6379));
    let record = control.open_connection(0, None, None, store::Now::from(NOW));
    assert_eq!(record.number, 4);
    let mut session = Session::default();
    session.set_record(record);
    let (conns, _) = run_bytes(&mut e, &mut session, b"stats conns\r\n");
    let listeners: Vec<&str> = conns.lines().filter(|l| l.contains(":addr")).collect();
    assert_eq!(
        listeners,
        [
            "STAT 0:addr tcp:127.0.0.1:11211",
            "STAT 1:addr tcp:127.0.0.1:11211",
            "STAT 2:addr tcp:127.0.0.1:6379",
            "STAT 3:addr tcp:127.0.0.1:6379",
        ],
        "{conns}"
    );
    assert!(conns.contains("STAT 4:state conn_parse_cmd\r\n"), "{conns}");
}

// `stats cachedump <class> <limit>` as memcached 1.6.18 answers it (memcached's own stats test
// reads a stored key back from it): the value's length and the expiry in unix seconds (0:
// none), up to `limit` items (0: all), nothing for another class.
#[test]
fn stats_cachedump_lists_items_as_memcached_does() {
    let mut e = engine();
    ok(
        &mut e,
        "set foo 0 0 6\r\nfooval\r\nset bar 0 100 2\r\nhi\r\nset c%20 0 0 1\r\nx\r\n",
    );
    let all = ok(&mut e, "stats cachedump 1 0\r\n");
    let mut lines: Vec<&str> = all.split("\r\n").collect();
    assert_eq!(lines.pop(), Some(""));
    assert_eq!(lines.pop(), Some("END"));
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            format!("ITEM bar [2 b; {} s]", NOW + 100).as_str(),
            "ITEM c%20 [1 b; 0 s]",
            "ITEM foo [6 b; 0 s]",
        ],
        "{all}"
    );
    let two = ok(&mut e, "stats cachedump 1 2\r\n");
    assert_eq!(two.matches("ITEM ").count(), 2, "{two}");
    assert!(two.ends_with("]\r\nEND\r\n"), "{two}");
    assert_eq!(ok(&mut e, "stats cachedump 2 0\r\n"), "END\r\n");
    assert_eq!(
        ok(&mut e, "stats cachedump 64 0\r\n"),
        "CLIENT_ERROR Illegal slab id\r\n"
    );
    assert_eq!(
        ok(&mut e, "stats cachedump 1\r\n"),
        "CLIENT_ERROR bad command line\r\n"
    );
}

#[test]
fn stats_cachedump_stops_at_two_mebibytes() {
    let mut e = engine();
    let key = "k".repeat(200);
    let mut script = String::new();
    for i in 0..12_000 {
        script += &format!("set {key}{i} 0 0 1 noreply\r\nx\r\n");
    }
    ok(&mut e, &script);
    let dump = ok(&mut e, "stats cachedump 1 0\r\n");
    assert!(
        dump.len() <= crate::stats::CACHEDUMP_MAX_BYTES + 5,
        "{}",
        dump.len()
    );
    assert!(dump.len() > crate::stats::CACHEDUMP_MAX_BYTES - 300);
    assert!(dump.ends_with("s]\r\nEND\r\n"));
}

// Regression: `bytes_read` counted a request's bytes once it had run, so right after `stats
// reset` it held the reset's own line. memcached counts bytes as it reads them, before it
// executes the requests in them.
#[test]
fn bytes_read_counts_bytes_as_they_arrive() {
    let mut e = engine();
    let figures = |e: &mut Engine, session: &mut Session, input: &str| {
        let (out, _) = run_bytes(e, session, input.as_bytes());
        (
            stat(&out, "bytes_read").unwrap(),
            stat(&out, "bytes_written").unwrap(),
        )
    };
    let mut session = Session::default();
    run_bytes(&mut e, &mut session, b"stats reset\r\n");
    // `stats` itself was read before it ran; `RESET\r\n` was written after the reset.
    assert_eq!(
        figures(&mut e, &mut session, "stats\r\n"),
        ("7".into(), "7".into())
    );
    // Read together with the reset: counted before it, so gone.
    assert_eq!(
        figures(&mut e, &mut session, "stats reset\r\nstats\r\n"),
        ("0".into(), "0".into())
    );
    run_bytes(&mut e, &mut session, b"stats reset\r\n");
    run_bytes(&mut e, &mut session, b"get nope\r\n");
    assert_eq!(
        figures(&mut e, &mut session, "stats\r\n"),
        ("17".into(), "12".into())
    );
    // A request arriving in pieces is counted once: the caller hands the unconsumed part
    // back with what arrived since.
    run_bytes(&mut e, &mut session, b"stats reset\r\n");
    let (_, outcome) = run_bytes(&mut e, &mut session, b"set k 0 0 5\r\nhel");
    assert_eq!(outcome.consumed, 0);
    let (out, outcome) = run_bytes(&mut e, &mut session, b"set k 0 0 5\r\nhello\r\n");
    assert_eq!((out.as_str(), outcome.consumed), ("STORED\r\n", 20));
    assert_eq!(
        figures(&mut e, &mut session, "stats\r\n"),
        ("27".into(), "15".into())
    );
}

// Regression: `stats conns` wrote IPv6 addresses without brackets (`tcp:::1:11211`); memcached
// writes `tcp6:[::1]:11211`.
#[test]
fn stats_conns_writes_ipv6_addresses_as_memcached_does() {
    let mut e = engine_with_control(crate::control::Settings {
        tcp_port: 11211,
        interface: "::1".into(),
        cpus: vec![0],
        ..Default::default()
    });
    let control = e.control().clone();
    let peer = "[::1]:40000".parse().unwrap();
    let local = "[::1]:11211".parse().unwrap();
    let record = control.open_connection(0, Some(peer), Some(local), store::Now::from(NOW));
    let mut session = Session::default();
    session.set_record(record);
    let (conns, _) = run_bytes(&mut e, &mut session, b"stats conns\r\n");
    let addrs: Vec<&str> = conns.lines().filter(|l| l.contains("addr ")).collect();
    assert_eq!(
        addrs,
        [
            "STAT 0:addr tcp6:[::1]:11211",
            "STAT 1:addr tcp6:[::1]:40000",
            "STAT 1:listen_addr tcp6:[::1]:11211",
        ],
        "{conns}"
    );
}

// Regression: Redis's `CLIENT ID` numbered connections apart from `stats conns`, `watch` and
// the logs (its own count per worker): one connection had two numbers.
#[test]
fn client_id_is_the_number_stats_conns_shows() {
    let mut e = engine_with_control(crate::control::Settings {
        tcp_port: 11211,
        resp_port: Some(6379),
        interface: "127.0.0.1".into(),
        cpus: vec![0, 1],
        ..Default::default()
    });
    let control = e.control().clone();
    let peer = "127.0.0.1:40000".parse().unwrap();
    let mut text = Session::default();
    text.set_record(control.open_connection(0, None, None, store::Now::from(NOW)));
    let mut redis = Session::speaking(Protocol::Resp(protocol::resp::Version::Resp2));
    let record = control.open_connection(0, Some(peer), None, store::Now::from(NOW));
    let number = record.number;
    redis.set_record(record);
    let (id, _) = run_bytes(&mut e, &mut redis, b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n");
    assert_eq!(id, format!(":{number}\r\n"));
    let (conns, _) = run_bytes(&mut e, &mut text, b"stats conns\r\n");
    assert!(
        conns.contains(&format!("STAT {number}:addr tcp:127.0.0.1:40000\r\n")),
        "{conns}"
    );
    // A connection without a record (an engine driven directly) takes the next number of the
    // same count.
    let mut bare = Session::speaking(Protocol::Resp(protocol::resp::Version::Resp2));
    let (id, _) = run_bytes(&mut e, &mut bare, b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n");
    assert_eq!(id, format!(":{}\r\n", number + 1));
    let next = control.open_connection(0, None, None, store::Now::from(NOW));
    assert_eq!(next.number, number + 2);
}

// With eviction off (`-M`) live items stay over a lowered budget: the worker does not spin
// trying to evict them, and tries again on the background crawler's schedule.
#[test]
fn a_lowered_budget_with_eviction_off_does_not_keep_the_worker_busy() {
    let mut e = engine_with_control(crate::control::Settings {
        memory_limit_bytes: 64 << 20,
        no_evictions: true,
        ..Default::default()
    });
    fill(&mut e, "live", 12_000, 1000, 0);
    assert_eq!(ok(&mut e, "cache_memlimit 8\r\n"), "OK\r\n");
    assert!(!e.housekeep(NOW, 1), "nothing can go");
    assert_eq!(e.background_wait_ns(2), None, "so the worker may sleep");
    assert_eq!(
        ok(&mut e, "set more 0 0 5\r\nhello\r\n"),
        "SERVER_ERROR out of memory storing object\r\n"
    );
    // Deletes make room; the next background turn goes on shrinking.
    let mut deletes = String::new();
    for i in 0..6000 {
        deletes.push_str(&format!("delete live{i} noreply\r\n"));
    }
    ok(&mut e, &deletes);
    e.sweep_expired(0, NOW);
    assert_eq!(e.background_wait_ns(3), None, "within the budget again");
    assert_eq!(ok(&mut e, "set more 0 0 5\r\nhello\r\n"), "STORED\r\n");
}
