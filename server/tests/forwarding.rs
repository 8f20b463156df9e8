//! Cross-core forwarding without threads: a connection on worker 0 of two, whose requests for
//! worker 1's keys are forwarded, must get exactly the replies one worker alone gives, in the
//! same order, whatever arrives in which order and in which fragments.

use proptest::prelude::*;
use server::conn::{ClientConn, output_bound_bytes};
use server::engine::{Batch, Engine, EngineConfig, Replies, owner_of};

const NOW: u64 = 1_700_000_000;

fn engine(workers: usize, worker: usize) -> Engine {
    engine_sharing(
        workers,
        worker,
        server::control::Control::new(Default::default(), 0),
    )
}

/// An engine sharing `control` with the other workers' engines, as a server's do.
fn engine_sharing(
    workers: usize,
    worker: usize,
    control: std::sync::Arc<server::control::Control>,
) -> Engine {
    Engine::new(EngineConfig {
        started_unix_secs: NOW - 100,
        threads: workers,
        worker,
        ..EngineConfig::new(
            store::ShardConfig {
                memory_limit_bytes: 16 << 20,
                max_item_size: 1 << 20,
            },
            control,
        )
    })
}

/// One engine, one connection: the reference replies.
fn alone(chunks: &[&[u8]]) -> Vec<u8> {
    let mut engine = engine(1, 0);
    let mut conn = ClientConn::default();
    let mut replies = Vec::new();
    for chunk in chunks {
        conn.input.extend(chunk);
        loop {
            conn.execute_buffered(&mut engine, NOW);
            let out = conn.pending_output().to_vec();
            conn.sent(out.len());
            replies.extend_from_slice(&out);
            if out.is_empty() {
                break;
            }
        }
    }
    replies
}

/// The same connection on worker 0 of two. Forwarded batches are served by worker 1; its
/// replies come back in the order `reverse` picks (messages and replies newest first when set,
/// to exercise holes filled out of order). The client reads everything at once.
fn forwarded(chunks: &[&[u8]], reverse: bool) -> Vec<u8> {
    forwarded_read_by(chunks, reverse, usize::MAX).replies
}

/// What a connection's client got, and what the connection held at most meanwhile.
struct Run {
    replies: Vec<u8>,
    /// The most the connection's output and the owner's undelivered replies held at once.
    most_held: usize,
    /// The most entries parked on the owner, waiting for the connection's credit, at once.
    most_parked: usize,
}

/// [`forwarded`] with a client that reads at most `read_per_round` bytes per round.
fn forwarded_read_by(chunks: &[&[u8]], reverse: bool, read_per_round: usize) -> Run {
    let control = server::control::Control::new(Default::default(), 0);
    let mut home = engine_sharing(2, 0, control.clone());
    let mut owner = engine_sharing(2, 1, control);
    let mut conn = ClientConn::default();
    conn.session.set_token(7);
    let mut run = Run {
        replies: Vec::new(),
        most_held: 0,
        most_parked: 0,
    };
    for chunk in chunks {
        conn.input.extend(chunk);
        loop {
            let consumed = conn.execute_buffered(&mut home, NOW).consumed;
            let (exchanged, in_transit) = exchange(&mut home, &mut owner, &mut conn, reverse);
            run.most_held = run.most_held.max(conn.output_backlog() + in_transit);
            run.most_parked = run.most_parked.max(owner.lane_figures().1);
            let out = conn.pending_output();
            let n = out.len().min(read_per_round);
            run.replies.extend_from_slice(&out[..n]);
            conn.sent(n);
            conn.settle(&mut home);
            if consumed == 0 && !exchanged && n == 0 {
                break;
            }
        }
        assert!(
            !conn.awaiting_replies(),
            "every forwarded request was answered"
        );
    }
    assert_eq!(
        owner.lane_figures(),
        (0, 0),
        "every lane gave its credit back"
    );
    run
}

/// One round between the two workers: the home's batches to the owner, the owner's replies
/// delivered. Returns whether anything moved, and the reply bytes that were in transit.
fn exchange(
    home: &mut Engine,
    owner: &mut Engine,
    conn: &mut ClientConn,
    reverse: bool,
) -> (bool, usize) {
    let mut batches: Vec<Batch> = Vec::new();
    home.take_forwards(|dest, batch| {
        assert_eq!(dest, 1);
        batches.push(batch);
        Ok(())
    });
    let moved = !batches.is_empty();
    for batch in batches {
        owner.serve_forwarded(0, batch, NOW);
    }
    let mut messages: Vec<Replies> = Vec::new();
    owner.take_replies(|dest, replies| {
        assert_eq!(dest, 0);
        messages.push(replies);
        Ok(())
    });
    let in_transit = messages.iter().map(Replies::bytes_len).sum();
    if reverse {
        messages.reverse();
    }
    let moved = moved || !messages.is_empty();
    for answers in messages {
        let order: Vec<usize> = if reverse {
            (0..answers.len()).rev().collect()
        } else {
            (0..answers.len()).collect()
        };
        for index in order {
            assert_eq!(answers.token(index), Some(7));
            conn.deliver(home, answers.get(index).unwrap());
        }
        home.recycle(answers);
    }
    (moved, in_transit)
}

/// Keys of both owners.
fn keys() -> (Vec<String>, Vec<String>) {
    let mut local = Vec::new();
    let mut remote = Vec::new();
    for i in 0.. {
        let key = format!("key:{i}");
        if owner_of(key.as_bytes(), 2) == 0 {
            local.push(key);
        } else {
            remote.push(key);
        }
        if local.len() >= 4 && remote.len() >= 4 {
            break;
        }
    }
    (local, remote)
}

/// Text and meta requests over keys of both workers; no reply carries a CAS (CAS counters are
/// per shard).
fn text_script() -> Vec<u8> {
    let (l, r) = keys();
    let mut s = String::new();
    for (i, k) in l.iter().chain(r.iter()).enumerate() {
        s += &format!(
            "set {k} {i} 0 {}\r\nvalue-{i}\r\n",
            format!("value-{i}").len()
        );
    }
    s += &format!("get {} {} {} nosuchkey {}\r\n", l[0], r[0], r[1], l[1]);
    s += &format!(
        "add {} 0 0 1 noreply\r\nx\r\nadd {} 0 0 1\r\nx\r\n",
        r[0], r[2]
    );
    s += &format!(
        "append {} 0 0 3\r\n+ap\r\nprepend {} 0 0 3\r\npr+\r\n",
        r[0], l[0]
    );
    s += &format!("get {} {}\r\n", r[0], l[0]);
    s += &format!("set n{} 0 0 2\r\n10\r\n", r[3]);
    s += &format!(
        "incr n{} 5\r\ndecr n{} 100\r\nincr {} 1\r\n",
        r[3], r[3], r[1]
    );
    s += &format!(
        "touch {} 100\r\ntouch nosuch 1\r\ndelete {}\r\ndelete {} noreply\r\n",
        r[1], r[2], l[2]
    );
    s += &format!("gat 100 {} {} {}\r\n", r[1], l[1], r[2]);
    s += &format!(
        "mg {} v f t k\r\nmg {} v s q\r\nmg missing v\r\nmn\r\n",
        r[0], l[0]
    );
    s += &format!(
        "ms {} 2 T0 F5\r\nhi\r\nms {} 2 q\r\nyo\r\nmg {} v f\r\n",
        r[3], l[3], r[3]
    );
    s += &format!(
        "ma n{} D7\r\nma n{} v\r\nmd {} q\r\nmd {}\r\n",
        r[3], r[3], r[3], r[3]
    );
    s += "version\r\nverbosity 1\r\n";
    s += &format!("flush_all\r\nget {} {}\r\n", r[0], l[0]);
    s += "bogus command\r\n";
    s += &format!("set {} 0 0 3\r\nabcd\r\nget {}\r\n", r[0], r[0]);
    s += &format!("set {} 0 0 2\r\nok\r\nquit\r\nget {}\r\n", r[0], r[0]);
    s.into_bytes()
}

fn binary_request(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
    let mut frame = vec![0u8; 24];
    frame[0] = 0x80;
    frame[1] = opcode;
    frame[2..4].copy_from_slice(&(key.len() as u16).to_be_bytes());
    frame[4] = extras.len() as u8;
    let body = (extras.len() + key.len() + value.len()) as u32;
    frame[8..12].copy_from_slice(&body.to_be_bytes());
    frame[12..16].copy_from_slice(&opaque.to_be_bytes());
    frame.extend_from_slice(extras);
    frame.extend_from_slice(key);
    frame.extend_from_slice(value);
    frame
}

/// Binary requests over keys of both workers, quiet ones included.
fn binary_script() -> Vec<u8> {
    let (l, r) = keys();
    let set_extras = [0u8, 0, 0, 9, 0, 0, 0, 0];
    let mut s = Vec::new();
    let mut opaque = 0;
    let mut push = |s: &mut Vec<u8>, op: u8, key: &str, extras: &[u8], value: &[u8]| {
        opaque += 1;
        s.extend(binary_request(op, key.as_bytes(), extras, value, opaque));
    };
    for k in l.iter().chain(r.iter()) {
        push(&mut s, 0x11, k, &set_extras, k.as_bytes()); // SETQ
    }
    push(&mut s, 0x0d, &r[0], &[], &[]); // GETKQ hit
    push(&mut s, 0x0d, "missing", &[], &[]); // GETKQ miss: silent
    push(&mut s, 0x09, &l[0], &[], &[]); // GETQ hit
    push(&mut s, 0x0a, "", &[], &[]); // NOOP
    push(&mut s, 0x0c, &r[1], &[], &[]); // GETK
    push(&mut s, 0x02, &r[1], &set_extras, b"dup"); // ADD exists
    push(&mut s, 0x04, &r[2], &[], &[]); // DELETE
    push(&mut s, 0x04, &r[2], &[], &[]); // DELETE miss
    let counter = [0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0];
    push(&mut s, 0x05, &format!("c{}", r[3]), &counter, &[]); // INCR creates
    push(&mut s, 0x05, &format!("c{}", r[3]), &counter, &[]);
    push(&mut s, 0x1d, &r[0], &[0, 0, 0, 50], &[]); // GAT
    push(&mut s, 0x1c, &l[1], &[0, 0, 0, 50], &[]); // TOUCH
    push(&mut s, 0x0b, "", &[], &[]); // VERSION
    push(&mut s, 0x08, "", &[], &[]); // FLUSH
    push(&mut s, 0x00, &r[0], &[], &[]); // GET after flush: miss
    push(&mut s, 0x00, &l[0], &[], &[]);
    push(&mut s, 0x07, "", &[], &[]); // QUIT
    push(&mut s, 0x00, &l[0], &[], &[]); // never executed
    s
}

/// Binary replies with their CAS field zeroed (CAS counters are per shard).
fn mask_cas(mut replies: Vec<u8>) -> Vec<u8> {
    let mut pos = 0;
    while pos + 24 <= replies.len() {
        let body = u32::from_be_bytes(replies[pos + 8..pos + 12].try_into().unwrap()) as usize;
        replies[pos + 16..pos + 24].fill(0);
        pos += 24 + body;
    }
    replies
}

#[test]
fn text_and_meta_replies_match_one_worker() {
    let script = text_script();
    let expected = alone(&[&script]);
    assert!(
        expected.windows(5).any(|w| w == b"VALUE"),
        "the script reads values"
    );
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    assert_eq!(text(forwarded(&[&script], false)), text(expected.clone()));
    assert_eq!(text(forwarded(&[&script], true)), text(expected));
}

#[test]
fn binary_replies_match_one_worker() {
    let script = binary_script();
    let expected = mask_cas(alone(&[&script]));
    assert_eq!(mask_cas(forwarded(&[&script], false)), expected);
    assert_eq!(mask_cas(forwarded(&[&script], true)), expected);
}

// Regression: a store refused for size is refused where the connection is, before its value
// arrives; the item a SET (or any meta `ms`) must unlink is on the key's owner, so the
// refusal goes there. Before, the old value survived whichever worker held it.
#[test]
fn stores_refused_for_size_unlink_on_the_owner() {
    let (l, r) = keys();
    let big = (1 << 20) + 1;
    let body = vec![b'v'; big];
    let mut text = Vec::new();
    for k in l.iter().take(3).chain(r.iter().take(3)) {
        text.extend(format!("set {k} 0 0 3\r\nold\r\n").as_bytes());
    }
    for (command, k) in [("set", &l[0]), ("set", &r[0]), ("add", &r[1])] {
        text.extend(format!("{command} {k} 0 0 {big}\r\n").as_bytes());
        text.extend(&body);
        text.extend(b"\r\n");
    }
    text.extend(format!("ms {} {big} MA\r\n", r[2]).as_bytes());
    text.extend(&body);
    text.extend(b"\r\n");
    text.extend(format!("get {} {} {} {} {}\r\n", l[0], r[0], r[1], r[2], l[1]).as_bytes());
    let expected = alone(&[&text]);
    let reply = String::from_utf8_lossy(&expected).into_owned();
    assert!(
        reply.ends_with(&format!(
            "VALUE {} 0 3\r\nold\r\nVALUE {} 0 3\r\nold\r\nEND\r\n",
            r[1], l[1]
        )),
        "{reply}"
    );
    for chunks in [vec![&text[..]], text.chunks(64 * 1024).collect()] {
        let got = String::from_utf8_lossy(&forwarded(&chunks, false)).into_owned();
        assert_eq!(got, reply);
    }

    let set_extras = [0u8, 0, 0, 0, 0, 0, 0, 0];
    let mut binary = Vec::new();
    for k in [&l[0], &r[0], &r[1]] {
        binary.extend(binary_request(0x01, k.as_bytes(), &set_extras, b"old", 1));
    }
    binary.extend(binary_request(0x11, r[0].as_bytes(), &set_extras, &body, 2)); // SETQ
    binary.extend(binary_request(0x03, r[1].as_bytes(), &set_extras, &body, 3)); // REPLACE
    binary.extend(binary_request(0x01, l[0].as_bytes(), &set_extras, &body, 4)); // SET
    for k in [&r[0], &r[1], &l[0]] {
        binary.extend(binary_request(0x0c, k.as_bytes(), &[], &[], 5)); // GETK
    }
    let expected = mask_cas(alone(&[&binary]));
    for chunks in [vec![&binary[..]], binary.chunks(1000).collect()] {
        assert_eq!(mask_cas(forwarded(&chunks, true)), expected);
    }
    // Status of the three GETKs: the SETs unlinked, the REPLACE did not.
    let statuses: Vec<u16> = {
        let mut pos = 0;
        let mut all = Vec::new();
        while pos + 24 <= expected.len() {
            all.push(u16::from_be_bytes([expected[pos + 6], expected[pos + 7]]));
            pos +=
                24 + u32::from_be_bytes(expected[pos + 8..pos + 12].try_into().unwrap()) as usize;
        }
        all
    };
    assert_eq!(&statuses[statuses.len() - 3..], [1, 0, 1], "{statuses:?}");
}

/// The `key=` fields of a metadump, sorted.
fn dumped_keys(reply: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(reply);
    let mut keys: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("key="))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    keys.sort();
    keys
}

// A metadump walks every worker's table: its own slices here, the others' forwarded, each
// item once, and waits for the connection's earlier forwarded stores.
#[test]
fn metadump_lists_every_workers_items() {
    let mut script = String::new();
    for i in 0..3000 {
        script += &format!("set key:{i} 0 0 1\r\nx\r\n");
    }
    script += "lru_crawler metadump all\r\n";
    let expected = alone(&[script.as_bytes()]);
    let keys = dumped_keys(&expected);
    assert_eq!(keys.len(), 3000);
    for reverse in [false, true] {
        let got = forwarded(&[script.as_bytes()], reverse);
        assert!(got.ends_with(b"\nEND\r\n"));
        let got = dumped_keys(&got);
        assert!(got == keys, "{} keys of {}", got.len(), keys.len());
    }
}

// stats reset, detail and latency over two workers: every worker's counters, summed.
#[test]
fn admin_stats_cover_every_worker() {
    let (l, r) = keys();
    let script = format!(
        "stats detail on\r\nset p:{} 0 0 1\r\na\r\nset p:{} 0 0 1\r\nb\r\nget p:{} p:{}\r\n\
         stats detail dump\r\nstats reset\r\nget {} {} {}\r\n",
        l[0], r[0], l[0], r[0], l[1], r[1], r[2]
    );
    // The forwarded gets' time is recorded when their replies are back: ask after that.
    let stats = "stats\r\nstats latency\r\n";
    let text = String::from_utf8(forwarded(&[script.as_bytes(), stats.as_bytes()], false)).unwrap();
    assert!(
        text.contains("PREFIX p get 2 hit 2 set 2 del 0\r\n"),
        "{text}"
    );
    let stat = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .to_string()
    };
    assert_eq!(
        stat("cmd_get"),
        "3",
        "counted since the reset, on both workers"
    );
    assert_eq!(stat("latency:get:count"), "3");
}

#[test]
fn stats_sum_every_worker() {
    let (l, r) = keys();
    let script = format!(
        "set {} 0 0 1\r\na\r\nset {} 0 0 1\r\nb\r\nget {} {}\r\nstats\r\n",
        l[0], r[0], l[0], r[0]
    );
    let reply = String::from_utf8(forwarded(&[script.as_bytes()], false)).unwrap();
    for line in [
        "STAT cmd_get 2\r\n",
        "STAT cmd_set 2\r\n",
        "STAT curr_items 2\r\n",
        "STAT get_hits 2\r\n",
        "STAT threads 2\r\n",
    ] {
        assert!(reply.contains(line), "{line:?} missing from\n{reply}");
    }
    assert!(reply.ends_with("END\r\n"));
}

/// A value of `len` bytes that says which key and size it is.
fn value_for(key: &str, len: usize) -> Vec<u8> {
    key.bytes()
        .chain(b"=".iter().copied())
        .cycle()
        .take(len)
        .collect()
}

/// Text and meta reads of large values on both workers: a multi-key `get` mixing owners, single
/// gets, `mg`s, then `mn`.
fn big_text_script(len: usize) -> Vec<u8> {
    let (l, r) = keys();
    let mut s = Vec::new();
    for k in l.iter().chain(r.iter()) {
        s.extend_from_slice(format!("set {k} 3 0 {len}\r\n").as_bytes());
        s.extend(value_for(k, len));
        s.extend_from_slice(b"\r\n");
    }
    for _ in 0..2 {
        let line = format!(
            "get {} {} {} {} {} missing {} {}\r\n",
            l[0], r[0], r[1], l[1], r[2], r[3], l[2]
        );
        s.extend_from_slice(line.as_bytes());
        for k in [&r[0], &l[0], &r[1], &r[1]] {
            s.extend_from_slice(format!("mg {k} v s\r\nget {k}\r\n").as_bytes());
        }
    }
    s.extend_from_slice(b"mn\r\n");
    s
}

/// Binary reads of large values on both workers: runs of GETKQ (hits answer, misses are
/// silent), GETs, a NOOP at the end of each run.
fn big_binary_script(len: usize) -> Vec<u8> {
    let (l, r) = keys();
    let set_extras = [0u8, 0, 0, 9, 0, 0, 0, 0];
    let mut s = Vec::new();
    for k in l.iter().chain(r.iter()) {
        s.extend(binary_request(
            0x11,
            k.as_bytes(),
            &set_extras,
            &value_for(k, len),
            1,
        ));
    }
    for run in 0..3u32 {
        for (i, k) in r
            .iter()
            .chain(["missing".to_string()].iter())
            .chain(l.iter())
            .enumerate()
        {
            s.extend(binary_request(
                0x0d,
                k.as_bytes(),
                &[],
                &[],
                run * 100 + i as u32,
            ));
        }
        s.extend(binary_request(0x00, r[0].as_bytes(), &[], &[], run));
        s.extend(binary_request(0x0a, b"", &[], &[], run));
    }
    s
}

/// Values large enough that the connection's credit with its owner and its output high water
/// both bind, read by clients of every speed: every reply arrives, in order, as one worker
/// gives them; replies wait on their owner while the client is slow; and the connection never
/// holds more than its documented bound.
#[test]
fn slow_readers_get_every_reply_in_order_within_the_bound() {
    let bound = output_bound_bytes(2, 1 << 20);
    for (script, binary) in [
        (big_text_script(150_000), false),
        (big_binary_script(150_000), true),
    ] {
        let mask = |b: Vec<u8>| if binary { mask_cas(b) } else { b };
        let expected = mask(alone(&[&script]));
        for read in [1500, 64 * 1024, usize::MAX] {
            for reverse in [false, true] {
                let run = forwarded_read_by(&[&script], reverse, read);
                assert!(
                    mask(run.replies) == expected,
                    "binary {binary}, read {read}, reverse {reverse}"
                );
                assert!(
                    run.most_held <= bound,
                    "held {} > bound {bound} (binary {binary}, read {read})",
                    run.most_held
                );
                if read == 1500 {
                    assert!(run.most_parked > 0, "the credit bound (binary {binary})");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random pipelines of stores and reads over both workers' keys, values up to 300 KB, any
    /// fragmentation, any reader speed, replies in any order across messages: the replies are
    /// exactly one worker's, and the connection holds no more than its bound.
    #[test]
    fn random_pipelines_with_large_values_match_one_worker(
        ops in proptest::collection::vec((0u8..6, 0usize..8, 0usize..4), 1..40),
        cut in 1usize..5000,
        read in prop_oneof![Just(usize::MAX), 1000usize..100_000],
        reverse in any::<bool>(),
    ) {
        let (l, r) = keys();
        let all: Vec<&String> = l.iter().chain(r.iter()).collect();
        let sizes = [10usize, 1000, 100_000, 300_000];
        let mut script = Vec::new();
        for &(kind, key, size) in &ops {
            let k = all[key];
            match kind {
                0 => {
                    let value = value_for(k, sizes[size]);
                    let line = format!("set {k} {size} 0 {}\r\n", value.len());
                    script.extend_from_slice(line.as_bytes());
                    script.extend(value);
                    script.extend_from_slice(b"\r\n");
                }
                1 => script.extend_from_slice(format!("get {k}\r\n").as_bytes()),
                2 => {
                    let line = format!("gets {k} {} {k}\r\n", all[(key + 3) % 8]);
                    script.extend_from_slice(line.as_bytes());
                }
                3 => script.extend_from_slice(format!("mg {k} v f k\r\n").as_bytes()),
                4 => script.extend_from_slice(format!("delete {k} noreply\r\n").as_bytes()),
                _ => script.extend_from_slice(b"mn\r\n"),
            }
        }
        let chunks: Vec<&[u8]> = script.chunks(cut).collect();
        // `gets` shows CAS values, which are per shard: compare with them blanked.
        let blank_cas = |bytes: Vec<u8>| -> String {
            String::from_utf8_lossy(&bytes)
                .split("\r\n")
                .map(|line| match line.strip_prefix("VALUE ") {
                    Some(rest) if rest.split(' ').count() == 4 => {
                        let mut words: Vec<&str> = line.split(' ').collect();
                        words.pop();
                        words.join(" ")
                    }
                    _ => line.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\r\n")
        };
        let expected = blank_cas(alone(&[&script]));
        let run = forwarded_read_by(&chunks, reverse, read);
        prop_assert!(run.most_held <= output_bound_bytes(2, 1 << 20));
        prop_assert_eq!(blank_cas(run.replies), expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any fragmentation of the scripts gives the same replies.
    #[test]
    fn fragments_do_not_matter(cuts in proptest::collection::vec(1usize..64, 1..200)) {
        for (script, binary) in [(text_script(), false), (binary_script(), true)] {
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut pos = 0;
            for cut in cuts.iter().cycle() {
                if pos >= script.len() {
                    break;
                }
                let end = (pos + cut).min(script.len());
                chunks.push(&script[pos..end]);
                pos = end;
            }
            let (mut expected, mut got) = (alone(&[&script]), forwarded(&chunks, cuts[0] % 2 == 0));
            if binary {
                expected = mask_cas(expected);
                got = mask_cas(got);
            }
            prop_assert_eq!(got, expected);
        }
    }
}

/// Credit for forwarded replies goes back once their bytes are sent: with the connection's next
/// request to that owner, on its own once a quarter of the credit is due, and all of it once the
/// connection is idle (the owner then forgets the lane).
#[test]
fn credit_goes_back_with_the_next_request_at_a_quarter_or_when_idle() {
    let (_, r) = keys();
    let control = server::control::Control::new(Default::default(), 0);
    let mut home = engine_sharing(2, 0, control.clone());
    let mut owner = engine_sharing(2, 1, control);
    let mut setup = ClientConn::default();
    for (k, len) in [(&r[0], 10_000), (&r[1], 10_000), (&r[2], 70_000)] {
        let mut set = format!("set {k} 0 0 {len}\r\n").into_bytes();
        set.extend(value_for(k, len));
        set.extend_from_slice(b"\r\n");
        setup.input.extend(&set);
        setup.execute_buffered(&mut owner, NOW);
    }
    let mut conn = ClientConn::default();
    conn.session.set_token(9);
    // Runs what the connection holds; forwards it; the owner answers; returns the answers.
    let round = |home: &mut Engine, owner: &mut Engine, conn: &mut ClientConn| {
        conn.execute_buffered(home, NOW);
        let mut batches = Vec::new();
        home.take_forwards(|_, batch| {
            batches.push(batch);
            Ok(())
        });
        for batch in batches {
            owner.serve_forwarded(0, batch, NOW);
        }
        let mut answers = Vec::new();
        owner.take_replies(|_, replies| {
            answers.push(replies);
            Ok(())
        });
        answers
    };
    let send_all = |conn: &mut ClientConn, home: &mut Engine| {
        let n = conn.pending_output().len();
        conn.sent(n);
        conn.settle(home);
        n
    };
    conn.input
        .extend(format!("get {}\r\nget {}\r\n", r[0], r[1]).as_bytes());
    let answers = round(&mut home, &mut owner, &mut conn);
    assert_eq!((answers.len(), answers[0].len()), (1, 2));
    // The first reply is delivered and sent; the second is still out.
    conn.deliver(&mut home, answers[0].get(0).unwrap());
    assert!(send_all(&mut conn, &mut home) > 10_000);
    assert!(!home.has_forwards(), "10 KB due, a hole open: kept for now");
    // The next request to that owner carries it.
    conn.input.extend(format!("get {}\r\n", r[0]).as_bytes());
    conn.execute_buffered(&mut home, NOW);
    let mut entries = Vec::new();
    home.take_forwards(|_, batch| {
        entries.push((batch.len(), batch.requests()));
        owner.serve_forwarded(0, batch, NOW);
        Ok(())
    });
    assert_eq!(entries, [(2, 1)], "one credit entry ahead of one request");
    let mut later = Vec::new();
    owner.take_replies(|_, replies| {
        later.push(replies);
        Ok(())
    });
    conn.deliver(&mut home, answers[0].get(1).unwrap());
    for answer in &later {
        for i in 0..answer.len() {
            conn.deliver(&mut home, answer.get(i).unwrap());
        }
    }
    // Idle: everything goes back, and the owner forgets the connection.
    send_all(&mut conn, &mut home);
    assert!(home.has_forwards());
    round(&mut home, &mut owner, &mut conn);
    assert_eq!(owner.lane_figures(), (0, 0));
    // A quarter of the credit due goes back at once, holes open or not.
    conn.input
        .extend(format!("get {}\r\nget {}\r\n", r[2], r[1]).as_bytes());
    let answers = round(&mut home, &mut owner, &mut conn);
    conn.deliver(&mut home, answers[0].get(0).unwrap());
    assert!(send_all(&mut conn, &mut home) > 70_000);
    assert!(
        home.has_forwards(),
        "70 KB due: handed back without waiting"
    );
}

/// Runs `input` on a connection of `home` (worker 0 of two) until nothing moves; returns what
/// its client got.
fn run_conn(home: &mut Engine, owner: &mut Engine, conn: &mut ClientConn, input: &[u8]) -> Vec<u8> {
    conn.session.set_token(7);
    conn.input.extend(input);
    let mut got = Vec::new();
    loop {
        let consumed = conn.execute_buffered(home, NOW).consumed;
        let (exchanged, _) = exchange(home, owner, conn, false);
        let out = conn.pending_output().to_vec();
        conn.sent(out.len());
        got.extend_from_slice(&out);
        conn.settle(home);
        if consumed == 0 && !exchanged && out.is_empty() {
            break;
        }
    }
    got
}

// RESP commands over two workers are timed like memcached's: one sample per key, whichever
// worker stored it; a command that makes no store operation (EXISTS, INFO) is one `other`.
#[test]
fn resp_commands_are_timed_per_key_across_workers() {
    use protocol::resp::write_command;
    let (l, r) = keys();
    let control = server::control::Control::new(Default::default(), 0);
    let mut home = engine_sharing(2, 0, control.clone());
    let mut owner = engine_sharing(2, 1, control);
    let mut redis = ClientConn::default();
    redis.accepted_on(6379, Some(6379));
    let mut script = Vec::new();
    let (l0, l1, r0, r1, r2) = (
        l[0].as_bytes(),
        l[1].as_bytes(),
        r[0].as_bytes(),
        r[1].as_bytes(),
        r[2].as_bytes(),
    );
    for command in [
        &[&b"SET"[..], l0, b"a"][..],
        &[b"SET", r0, b"b"],
        &[b"MSET", l1, b"x", r1, b"y", r2, b"z"],
        &[b"MGET", l0, r0, r1],
        &[b"DEL", l1, r1],
        &[b"EXISTS", l0, r0],
        &[b"INFO", b"stats"],
    ] {
        write_command(&mut script, command);
    }
    let got = run_conn(&mut home, &mut owner, &mut redis, &script);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("+OK\r\n+OK\r\n+OK\r\n*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\ny\r\n:2\r\n:2\r\n"),
        "{got}"
    );
    assert!(got.contains("total_commands_processed:"), "{got}");
    let mut text = ClientConn::default();
    let stats = run_conn(&mut home, &mut owner, &mut text, b"stats latency\r\n");
    let stats = String::from_utf8(stats).unwrap();
    let count = |kind: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("STAT latency:{kind}:count ")))
            .unwrap_or_else(|| panic!("{kind} in {stats}"))
            .to_string()
    };
    assert_eq!(count("set"), "5", "{stats}");
    assert_eq!(count("get"), "3", "{stats}");
    assert_eq!(count("delete"), "2", "{stats}");
    assert_eq!(count("other"), "2", "{stats}");
}

// `stats cachedump` over two workers: every worker's items, and the limit holds over all.
#[test]
fn stats_cachedump_covers_every_worker() {
    let (l, r) = keys();
    let mut script = String::new();
    for k in l.iter().chain(r.iter()) {
        script += &format!("set {k} 0 0 1\r\nx\r\n");
    }
    script += "stats cachedump 1 0\r\nstats cachedump 1 3\r\n";
    let text = String::from_utf8(forwarded(&[script.as_bytes()], false)).unwrap();
    let dumps: Vec<&str> = text.split("END\r\n").collect();
    assert_eq!(dumps.len(), 3, "{text}");
    for k in l.iter().chain(r.iter()) {
        assert!(
            dumps[0].contains(&format!("ITEM {k} [1 b; 0 s]\r\n")),
            "{k} in {text}"
        );
    }
    assert_eq!(dumps[1].matches("ITEM ").count(), 3, "{text}");
}
