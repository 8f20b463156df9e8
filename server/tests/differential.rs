//! Differential tests: seeded sequences of requests sent to memspin (`--net kernel` on
//! 127.0.0.1) and to the reference server — stock memcached 1.6 for the text, meta and binary
//! protocols, `redis-server` 7 for RESP — with the replies compared byte for byte, once what
//! legitimately differs is normalised (`support::differential`: CAS values as symbols, clock
//! readings within the time between the two answers, version and server-specific text).
//!
//! The generators cover what clients and conformance suites send: every command with its
//! options, noreply and quiet modes, expiry in the past (negative, and absolute times before
//! now: both servers treat them as already expired) and far in the future (compared through
//! `mg ... t` and `TTL` within the tolerance), arithmetic at the edges, malformed lines and
//! frames. Nothing waits on a clock.
//!
//! `MEMSPIN_DIFF_SEED=N` (and `MEMSPIN_DIFF_STEPS=N`, default 1,500) runs one other seed
//! instead of the fixed ones; a failure prints the seed and the steps before each difference.
//! Where memspin deliberately answers otherwise than memcached or Redis (see docs/protocols.md), the
//! difference is listed in [`accepted`] with its reason, and the generators avoid requests
//! whose accepted difference would leave the two stores apart.

mod support;

use support::differential::{
    CasIds, CasRef, End, Mask, Normal, Peer, Proto, Rng, Step, agree, binary_marker, have,
    normalise_binary, normalise_resp, normalise_text, seeds,
};
use support::redis::RedisServer;
use support::{Memcached, Server};

/// The seeds CI runs, per protocol, 1,500 steps each. The text seeds are the first twelve
/// (seeds 1 to 30 agree over 5,000 steps too). Binary seeds 1 to 70 agree at 5,000 steps,
/// run after run; CI runs those that once met a counter the two servers read apart (see
/// [`Counter`]). RESP seeds 1 to 30 agree over 5,000 steps.
const TEXT_SEEDS: &[u64] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
const BINARY_SEEDS: &[u64] = &[2, 8, 11, 17];
const RESP_SEEDS: &[u64] = &[1, 2, 3, 4, 5, 6];
const STEPS: usize = 1500;

/// The limits both servers run with (memspin's defaults, memcached's too).
const LIMITS: &[&str] = &["-m", "64", "-I", "1m", "-c", "1024"];

fn start_memspin(extra: &[&str]) -> Server {
    Server::start_kernel(&[LIMITS, extra].concat())
}

fn start_memcached() -> Memcached {
    let mut args = vec!["-t", "1"];
    args.extend_from_slice(LIMITS);
    Memcached::start_with("memcached".as_ref(), &args)
}

/// A difference memspin keeps on purpose, recognised by the request and both replies.
/// Returns why it is accepted.
fn accepted(
    proto: Proto,
    request: &[u8],
    reference: &Normal,
    memspin: &Normal,
) -> Option<&'static str> {
    let opcode = request.get(1).copied();
    let request = String::from_utf8_lossy(request);
    let (theirs, ours) = (reference.text.as_str(), memspin.text.as_str());
    match proto {
        Proto::Text => {
            // docs/limits.md: a command line over 2,048 bytes is
            // answered with `CLIENT_ERROR line too long`, then the connection is closed.
            // memcached reads such a line when it fits its read buffer (16 KiB), and closes
            // silently only when no newline comes within it.
            if request.len() > 2048 && ours == "CLIENT_ERROR line too long\\r\\n" {
                return Some("a line over 2,048 bytes: memspin refuses it and closes");
            }
            // memcached 1.6.18 answers `HD` to a quiet `ma` that creates its item with `N`;
            // later releases suppress it, as `q` asks and as memspin does.
            if request.starts_with("ma ")
                && request.contains(" q")
                && request.contains(" N")
                && (theirs.starts_with("HD") || theirs.starts_with("VA "))
                && ours.is_empty()
            {
                return Some("1.6.18 answers a quiet ma that vivifies (fixed in later releases)");
            }
            // protocol.txt: with `b` "the response key will also be base64 encoded"; memcached
            // encodes it only when the item was stored with a base64 key, and then whether the
            // request says `b` or not (also in `me`).
            if request.starts_with('m') && without_keys(theirs) == without_keys(ours) {
                return Some("meta keys in replies are base64 when the request says b");
            }
            // docs/protocols.md (the meta paragraph): memspin has one item class, and `me` says
            // `cls=1` whatever the item's size (memcached: its slab class).
            if request.starts_with("me ")
                && without_class(&without_keys(theirs)) == without_class(&without_keys(ours))
            {
                return Some("me reports memspin's one item class");
            }
            if text_padding_carried(theirs, ours) || size_padded(&request, theirs, ours) {
                return Some(PADDING);
            }
            None
        }
        Proto::Resp => {
            // docs/protocols.md "Redis clients (RESP)": commands memspin does not serve are unknown
            // commands, whatever Redis would have said about their arguments.
            let name = resp_command_name(request.as_bytes());
            if !SERVED.iter().any(|c| c.eq_ignore_ascii_case(&name))
                && ours.starts_with("-ERR unknown command")
            {
                return Some("a command memspin does not serve is an unknown command");
            }
            // `CONFIG GET maxclients` reports each server's own limit (memspin's `-c`), and
            // `databases` each server's own count (memspin's `--databases`).
            if (request.contains("maxclients") || request.contains("databases"))
                && theirs.starts_with("*2")
                && ours.starts_with("*2")
            {
                return Some("CONFIG GET maxclients and databases report memspin's own");
            }
            // docs/protocols.md: `DBSIZE` counts items that expired and were not reclaimed yet, and so
            // does Redis, each by its own reclaiming: memspin reclaims when its clock hand or
            // a read passes, Redis when a read or its active expiry cycle does (a `SET ...
            // PXAT` in the past leaves Redis 7.0 a key that `DBSIZE` counts).
            if request.contains("DBSIZE") && memspin.clock.is_empty() {
                let count = |t: &str| {
                    t.strip_prefix(':')
                        .and_then(|t| t.strip_suffix("\\r\\n"))
                        .and_then(|t| t.parse::<i64>().ok())
                };
                if let (Some(a), Some(b)) = (count(theirs), count(ours))
                    && b != a
                {
                    return Some("DBSIZE counts expired items not reclaimed yet");
                }
            }
            // docs/protocols.md: memspin keeps expiry times up to 2106 (unsigned 32-bit seconds); a
            // later one is that moment.
            if matches!(reference.clock.first(), Some(&t) if t > 2_000_000_000)
                && matches!(memspin.clock.first(), Some(&t) if t > 2_000_000_000)
            {
                return Some("expiry times after 2106 are 2106");
            }
            // The same: a GT or LT condition with a time after 2106 compares 2106 (memspin)
            // or the time itself (Redis) with the key's expiry, which may itself be 2106 on
            // memspin and later on Redis. A time up to 2106 compares alike on both.
            if expiry_condition_after_2106(&request)
                && matches!(
                    (theirs, ours),
                    (":0\\r\\n", ":1\\r\\n") | (":1\\r\\n", ":0\\r\\n")
                )
            {
                return Some("a GT or LT expiry condition with a time after 2106");
            }
            None
        }
        Proto::Binary => {
            // memcached 1.6.18 does not serve verbosity (0x1b) and, for an unknown command,
            // skips as many bytes after the frame as its body had (here: the client's close
            // ends it first, with no reply); memspin answers 0x81 "Unknown command" and skips
            // just the body, as the binary protocol's spec says.
            if theirs.is_empty() && (opcode == Some(0x1b) || ours.contains("status 0081")) {
                return Some("binary verbosity and unknown commands (memcached skips too much)");
            }
            // memcached's padding of a shortened counter never reaches an append or prepend:
            // see `counters_both_read_alike`.
            None
        }
    }
}

const PADDING: &str = "memcached's incr/decr padding carried into a later append or prepend";

/// Whether two text replies differ only as memcached's space-padded incr/decr results leave
/// a value that is then appended to (memspin does not pad; see `support::differential::unpad`),
/// line by line: a `VALUE` or `VA` line may differ in its numbers (the length), a data line
/// by spaces after digits (one is enough: `7 ` is memcached's `decr 10 3`), where memcached's
/// is the longer; every other line is equal.
fn text_padding_carried(theirs: &str, ours: &str) -> bool {
    fn squeeze(line: &str) -> String {
        let mut out = String::new();
        let mut after_digit = false;
        for c in line.chars() {
            if c == ' ' && after_digit {
                continue;
            }
            after_digit = c.is_ascii_digit();
            out.push(c);
        }
        out
    }
    let header = |line: &str| line.starts_with("VALUE ") || line.starts_with("VA ");
    let digitless = |line: &str| line.replace(|c: char| c.is_ascii_digit(), "");
    let a: Vec<&str> = theirs.split("\\r\\n").collect();
    let b: Vec<&str> = ours.split("\\r\\n").collect();
    a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| {
            x == y
                || (header(x) && header(y) && digitless(x) == digitless(y))
                || (!header(x) && x.len() > y.len() && squeeze(x) == squeeze(y))
        })
}

/// Whether an `mg ... s` reply differs only in the size it reports, memcached's the larger:
/// its space-padded incr/decr result (see [`text_padding_carried`]).
fn size_padded(request: &str, theirs: &str, ours: &str) -> bool {
    let size = |text: &str| {
        text.split("\\r\\n").next().and_then(|line| {
            line.split(' ')
                .skip(1)
                .find_map(|t| t.strip_prefix('s').and_then(|n| n.parse::<u64>().ok()))
        })
    };
    let without = |text: &str| {
        let mut lines: Vec<String> = text.split("\\r\\n").map(str::to_string).collect();
        if let Some(first) = lines.first_mut() {
            *first = first
                .split(' ')
                .filter(|t| !(t.starts_with('s') && t[1..].parse::<u64>().is_ok()))
                .collect::<Vec<_>>()
                .join(" ");
        }
        lines.join("\\r\\n")
    };
    request.starts_with("mg ")
        && matches!((size(theirs), size(ours)), (Some(a), Some(b)) if a > b)
        && without(theirs) == without(ours)
}

/// A text reply without `me`'s `cls=` field.
fn without_class(text: &str) -> String {
    text.split(' ')
        .filter(|token| !token.starts_with("cls="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A text reply without the keys in it (meta `k` tokens, the `b` flag, `me`'s key).
fn without_keys(text: &str) -> String {
    text.split("\\r\\n")
        .map(|line| {
            line.split(' ')
                .enumerate()
                .filter(|&(i, token)| {
                    !(token == "b"
                        || (i > 0 && token.starts_with('k'))
                        || (i == 1 && line.starts_with("ME ")))
                })
                .map(|(_, token)| token)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\\r\\n")
}

/// With `MEMSPIN_DIFF_PROBE` set, a request read after every step that shows which keys
/// exist (digits dropped), to find the step where the two stores part.
fn probe(proto: Proto) -> Option<Step> {
    std::env::var_os("MEMSPIN_DIFF_PROBE")?;
    match proto {
        Proto::Text => {
            let mut line = String::new();
            for k in KEYS {
                line.push_str(&format!("mg {k} k u\r\n"));
            }
            Some(Step::new(line))
        }
        Proto::Binary => {
            let mut bytes = Vec::new();
            for k in KEYS {
                bytes.extend(frame(0x0d, 0, &[], k.as_bytes(), &[]));
            }
            Some(Step::new(bytes))
        }
        Proto::Resp => None,
    }
}

struct Difference {
    seed: u64,
    index: usize,
    context: Vec<String>,
    request: String,
    reference: String,
    memspin: String,
}

/// Runs `steps` on both servers, one connection each, and returns the differences not
/// accepted (at most `limit`; later steps may only repeat an earlier one's consequences).
fn compare(
    proto: Proto,
    seed: u64,
    steps: &[Step],
    reference: std::net::SocketAddr,
    memspin: std::net::SocketAddr,
    limit: usize,
) -> (Vec<Difference>, Vec<String>) {
    let mut theirs = Peer::connect(reference, proto);
    let mut ours = Peer::connect(memspin, proto);
    let mut differences = Vec::new();
    let mut accepted_seen = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let a = theirs.run(step);
        let b = ours.run(step);
        let gap = b.sent.saturating_duration_since(a.sent);
        let normalise = |answer: &support::differential::Answer, cas: &mut CasIds| match proto {
            Proto::Text => normalise_text(&answer.bytes, cas),
            Proto::Binary => normalise_binary(&answer.bytes, cas),
            Proto::Resp => normalise_resp(&answer.bytes, step.mask),
        };
        let mut na = normalise(&a, &mut theirs.cas);
        let mut nb = normalise(&b, &mut ours.cas);
        for (answer, normal) in [(&a, &mut na), (&b, &mut nb)] {
            if answer.timed_out {
                normal.text.push_str(" <no reply within 5 s>");
            } else if answer.closed && step.end == End::Marker {
                normal.text.push_str(" <closed>");
            }
        }
        if std::env::var_os("MEMSPIN_DIFF_TRACE").is_some() {
            eprintln!("{index} {:?} {:?} {}", gap, b.sent.elapsed(), step.show());
            eprintln!("  = {}\n  = {}", na.text, nb.text);
        }
        let tolerance = match (proto, step.mask) {
            (Proto::Resp, Mask::Millis) => 1000 + gap.as_millis() as i64,
            _ => 1 + gap.as_secs() as i64,
        };
        if let Some(probe) = probe(proto) {
            let (pa, pb) = (theirs.run(&probe), ours.run(&probe));
            let shown = |bytes: &[u8]| {
                let text = match proto {
                    Proto::Binary => normalise_binary(bytes, &mut CasIds::default()).text,
                    _ => String::from_utf8_lossy(bytes).into_owned(),
                };
                text.replace(|c: char| c.is_ascii_digit(), "")
            };
            let (pa, pb) = (shown(&pa.bytes), shown(&pb.bytes));
            if pa != pb {
                eprintln!(
                    "PROBE after step {index} {}:\n  {pa:?}\n  {pb:?}",
                    step.show()
                );
            }
        }
        if agree(&na, &nb, tolerance) {
            continue;
        }
        if let Some(reason) = accepted(proto, &step.bytes, &na, &nb) {
            if !accepted_seen.contains(&reason.to_string()) {
                accepted_seen.push(reason.to_string());
            }
            continue;
        }
        if differences.len() < limit {
            differences.push(Difference {
                seed,
                index,
                context: steps[index.saturating_sub(6)..index]
                    .iter()
                    .map(Step::show)
                    .collect(),
                request: step.show(),
                reference: format!("{} {:?}", na.text, na.clock),
                memspin: format!("{} {:?}", nb.text, nb.clock),
            });
        }
    }
    (differences, accepted_seen)
}

#[track_caller]
fn report(name: &str, differences: Vec<Difference>) {
    let mut text = String::new();
    for d in &differences {
        text.push_str(&format!(
            "\nseed {} step {}:\n  after: {:?}\n  request: {}\n  reference: {}\n  memspin:   {}\n",
            d.seed, d.index, d.context, d.request, d.reference, d.memspin
        ));
    }
    assert!(
        differences.is_empty(),
        "{name}: {} differences (rerun one with MEMSPIN_DIFF_SEED=<seed>):{text}",
        differences.len()
    );
}

fn run_seeds(proto: Proto, fixed: &[u64], generate: fn(&mut Rng, usize) -> Vec<Step>) {
    let (reference_bin, package) = match proto {
        Proto::Resp => ("redis-server", "redis-server"),
        _ => ("memcached", "memcached"),
    };
    if !have(reference_bin, package) {
        return;
    }
    let mut all = Vec::new();
    for (seed, count) in seeds(fixed, STEPS) {
        // Fresh servers per seed: CAS numbering and stores start over.
        let memspin = start_memspin(&["--resp-port", "0"]);
        let steps = generate(&mut Rng::new(seed), count);
        let (differences, accepted_seen) = match proto {
            Proto::Resp => {
                let redis = RedisServer::start();
                compare(proto, seed, &steps, redis.addr, memspin.resp_addr(), 10)
            }
            _ => {
                let memcached = start_memcached();
                compare(proto, seed, &steps, memcached.addr, memspin.addr, 10)
            }
        };
        for reason in accepted_seen {
            eprintln!("seed {seed}: accepted difference: {reason}");
        }
        all.extend(differences);
    }
    report(&format!("{proto:?}"), all);
}

// ---------------------------------------------------------------------------------------
// Text and meta.

/// Keys the sequences share, so commands meet each other's items.
const KEYS: &[&str] = &["a", "b", "c", "n", "k:1", "long-key-0123456789"];

/// Values: numbers for arithmetic (at the 64-bit edge too), text, empty, binary-safe bytes.
/// None contains "MN" or "diffmark", the markers' replies.
const VALUES: &[&[u8]] = &[
    b"",
    b"0",
    b"1",
    b"10",
    b"99",
    b"18446744073709551615",
    b"18446744073709551614",
    b"18446744073709551616",
    b"-5",
    b" 7",
    b"7 ",
    b"12ab",
    b"hello",
    b"hello world",
    b"a\r\nb",
    b"\x00\x01\xff",
    b"0000000000000000000000000000042",
];

fn exptime(rng: &mut Rng) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    match rng.below(8) {
        0..=2 => "0".into(),
        3 => "-1".into(),
        // Absolute (over 30 days) and in the past: already expired.
        4 => "1000000000".into(),
        5 => "1000".into(),
        6 => "2592000".into(),
        _ => (now + 5000).to_string(),
    }
}

fn key(rng: &mut Rng) -> String {
    (*rng.pick(KEYS)).to_string()
}

fn value(rng: &mut Rng) -> Vec<u8> {
    rng.pick(VALUES).to_vec()
}

/// A value for the text and meta sequences: [`VALUES`], with numbers of 2^63 and more
/// brought down to 32-bit ones. memcached 1.6.18's `safe_strtoull` looks for a `-` in such
/// a number with `strchr`, which reads on past the value (item data is not NUL-terminated)
/// through whatever memory follows: incr/decr on it says "non-numeric" or not by what was
/// stored there before (memspin reads the value alone). The deltas stay small enough that
/// no sequence reaches 2^63.
fn text_value(rng: &mut Rng) -> Vec<u8> {
    match value(rng).as_slice() {
        b"18446744073709551615" => b"4294967295".to_vec(),
        b"18446744073709551614" => b"4294967294".to_vec(),
        other => other.to_vec(),
    }
}

fn noreply(rng: &mut Rng) -> &'static str {
    if rng.chance(15) { " noreply" } else { "" }
}

fn storage(rng: &mut Rng) -> Step {
    let command = *rng.pick(&["set", "add", "replace", "append", "prepend", "cas"]);
    let flags = *rng.pick(&["0", "1", "42", "4294967295"]);
    let data = text_value(rng);
    let cas = if command == "cas" {
        if rng.chance(70) { " {CAS}" } else { " {CASX}" }
    } else {
        ""
    };
    let mut bytes = format!(
        "{command} {} {flags} {} {}{cas}{}\r\n",
        key(rng),
        exptime(rng),
        data.len(),
        noreply(rng)
    )
    .into_bytes();
    bytes.extend_from_slice(&data);
    bytes.extend_from_slice(b"\r\n");
    Step::new(bytes)
}

fn retrieval(rng: &mut Rng) -> Step {
    let command = *rng.pick(&["get", "gets", "gat", "gats"]);
    let mut line = command.to_string();
    if command.starts_with("gat") {
        line.push(' ');
        line.push_str(&exptime(rng));
    }
    for _ in 0..1 + rng.below(4) {
        line.push(' ');
        line.push_str(&key(rng));
    }
    line.push_str("\r\n");
    Step::new(line)
}

fn arithmetic(rng: &mut Rng) -> Step {
    let command = *rng.pick(&["incr", "decr"]);
    let delta = *rng.pick(&[
        "0",
        "1",
        "5",
        "1000",
        "4294967295",
        "18446744073709551616",
        "9999999999",
        "-1",
        "x",
        "1x",
    ]);
    Step::new(format!(
        "{command} {} {delta}{}\r\n",
        key(rng),
        noreply(rng)
    ))
}

fn malformed(rng: &mut Rng) -> Step {
    let k = key(rng);
    let long = "k".repeat(251);
    let max = "m".repeat(250);
    let choices: Vec<Step> = vec![
        Step::new(format!("set {k} 0 0 x\r\n")),
        Step::new(format!("set {k} 0 0 -1\r\n")),
        Step::new(format!("set {k} x 0 1\r\nx\r\n")),
        Step::new(format!("set {k} 0 x 1\r\nx\r\n")),
        Step::new(format!("set {k} 0 0 1 2 3 4\r\nx\r\n")),
        Step::new(format!("set {k} 0 0\r\n")),
        Step::new(format!("set {long} 0 0 1\r\nx\r\n")),
        Step::new(format!("set {max} 0 0 1\r\nx\r\n")),
        Step::new(format!("get {max}\r\n")),
        Step::new(format!("get {long}\r\n")),
        // A key never stored before the over-long one: memcached fetches (and marks) the
        // keys before it, then refuses the line; memspin refuses it without looking.
        Step::new(format!("get nope {long}\r\n")),
        Step::new(format!("delete {long}\r\n")),
        Step::new(format!("incr {long} 1\r\n")),
        Step::new(format!("touch {long} 1\r\n")),
        // The data block longer, or shorter, than announced.
        Step::new(format!("set {k} 0 0 1\r\nab\r\n")),
        Step::new(format!("set {k} 0 0 3\r\nabcdef\r\n")),
        Step::new(format!("set {k} 0 0 5\r\nab\r\nxy")).closing(),
        Step::new(format!("set {k} 0 0 2\r\nab\r\r\n")),
        // Lines ended by a bare newline.
        Step::new(format!("get {k}\n")),
        Step::new(format!("set {k} 0 0 1\nz\r\n")),
        Step::new(format!("delete {k}\n")),
        Step::new("\r\n"),
        Step::new("bogus\r\n"),
        Step::new("GET a\r\n"),
        Step::new("get\r\n"),
        Step::new("gets\r\n"),
        Step::new("gat 10\r\n"),
        Step::new(format!("gat x {k}\r\n")),
        Step::new(format!("touch {k}\r\n")),
        Step::new(format!("touch {k} x\r\n")),
        Step::new(format!("incr {k}\r\n")),
        Step::new(format!("cas {k} 0 0 1\r\n")),
        Step::new(format!("cas {k} 0 0 1 x\r\nx\r\n")),
        Step::new(format!("delete {k} 5\r\n")),
        Step::new(format!("delete {k} 0 noreply\r\n")),
        Step::new(format!("delete {k} x y z\r\n")),
        Step::new("delete\r\n"),
        Step::new("verbosity\r\n"),
        Step::new("verbosity x\r\n"),
        Step::new("verbosity 1 2 3\r\n"),
        Step::new("flush_all x\r\n"),
        Step::new("flush_all 1 2 3\r\n"),
        Step::new("version x\r\n"),
        Step::new(format!("get {k}{}\r\n", " x".repeat(30))),
        // A line over 2,048 bytes that is not a get: memcached and memspin close.
        Step::new(format!("set {} 0 0 1\r\nx\r\n", "k".repeat(3000))).closing(),
        // Missing data: the connection ends while the server waits for it.
        Step::new(format!("set {k} 0 0 5\r\nab")).closing(),
        Step::new(format!("set {k} 0 0 5\r\n")).closing(),
        Step::new(format!("get {k}")).closing(),
    ];
    choices[rng.below(choices.len())].clone()
}

fn admin(rng: &mut Rng) -> Step {
    match rng.below(10) {
        0 => Step::new("flush_all\r\n"),
        1 => Step::new("flush_all 0\r\n"),
        2 => Step::new("flush_all noreply\r\n"),
        3 => Step::new("flush_all 1000\r\n"),
        4 => Step::new("flush_all -1\r\n"),
        5 => Step::new(format!("verbosity {}{}\r\n", rng.below(3), noreply(rng))),
        6 => Step::new("version\r\n"),
        7 => Step::new(format!(
            "touch {} {}{}\r\n",
            key(rng),
            exptime(rng),
            noreply(rng)
        )),
        _ => Step::new(format!("delete {}{}\r\n", key(rng), noreply(rng))),
    }
}

/// Base64 of `bytes` (for meta `b` keys).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A meta key: plain, or base64 with `b` among the flags.
fn meta_key(rng: &mut Rng, flags: &mut Vec<String>) -> String {
    let k = key(rng);
    if rng.chance(15) {
        flags.push("b".into());
        base64(k.as_bytes())
    } else {
        k
    }
}

fn some_flags(rng: &mut Rng, pool: &[&str], flags: &mut Vec<String>) {
    if pool.is_empty() {
        return;
    }
    for _ in 0..rng.below(5) {
        let flag = rng.pick(pool).to_string();
        if !flags.contains(&flag) {
            flags.push(flag);
        }
    }
}

fn ttl_flag(rng: &mut Rng) -> String {
    format!("T{}", rng.pick(&["0", "-1", "1000", "3000", "1000000000"]))
}

fn meta(rng: &mut Rng) -> Step {
    let mut flags = Vec::new();
    let command = *rng.pick(&["mg", "mg", "ms", "ms", "md", "ma", "mn", "me"]);
    let k = meta_key(rng, &mut flags);
    let pool: &[&str] = match command {
        "mg" => &[
            "c", "f", "h", "k", "l", "O123", "q", "s", "t", "v", "v", "u", "N1000", "T1000", "R30",
            "Oabc",
        ],
        "ms" => &[
            "c",
            "C{CAS}",
            "C{CASX}",
            "F7",
            "F4294967295",
            "I",
            "k",
            "O9",
            "q",
            "T1000",
            "T-1",
            "MA",
            "MP",
            "MR",
            "ME",
            "MS",
            "N1000",
            "MA",
        ],
        "md" => &["C{CAS}", "C{CASX}", "I", "k", "O5", "q", "T1000"],
        "ma" => &[
            "C{CAS}",
            "N0",
            "N1000",
            "J13",
            "J4294967295",
            "D7",
            "D4294967295",
            "MI",
            "M+",
            "MD",
            "M-",
            "q",
            "t",
            "c",
            "v",
            "k",
            "O42",
        ],
        _ => &[],
    };
    some_flags(rng, pool, &mut flags);
    // memcached applies `mg`'s (and `ma`'s) `T` and `N` in the order of the tokens, and `t` reports the
    // TTL as of its place among them (an `N` after `T` on a miss keeps N's TTL, a `t` before
    // `T` the old one, a `t` before `N` on a miss -1); memspin applies both first. A client
    // sends `T` and `N` before `t` (memcached's own tests do), and not both: the generator too.
    if command == "mg" || command == "ma" {
        if flags.iter().any(|f| f.starts_with('N')) {
            flags.retain(|f| !f.starts_with('T'));
        }
        if let Some(at) = flags
            .iter()
            .position(|f| f.starts_with('T') || f.starts_with('N'))
        {
            let ttl = flags.remove(at);
            flags.insert(0, ttl);
        }
    }
    // memcached 1.6.18 has no `N` on append and prepend (later releases create the item,
    // as memspin does): the two stores would part.
    if flags.iter().any(|f| f == "MA" || f == "MP") {
        flags.retain(|f| !f.starts_with('N'));
    }
    // memcached 1.6.18 answers a quiet `ma` that creates its item (an accepted difference):
    // with `c`, its CAS would take a symbol memspin's replies never show, and every later CAS
    // would compare one symbol apart.
    if command == "ma" && flags.iter().any(|f| f == "q") && flags.iter().any(|f| f.starts_with('N'))
    {
        flags.retain(|f| f != "c");
    }
    // No `T` on `ma`: memcached 1.6.18 sets it on the item it had before the arithmetic, and
    // loses it when the result does not fit there (a longer number: a new item keeps the old
    // TTL), where memspin sets it on the result, as protocol.txt says.
    if rng.chance(10) && command != "mg" && command != "ma" {
        flags.push(ttl_flag(rng));
    }
    let mut line = match command {
        "mn" => "mn".to_string(),
        "me" => format!("me {}", key(rng)),
        "ms" => {
            let data = text_value(rng);
            let mut line = format!("ms {k} {}", data.len());
            for f in &flags {
                line.push(' ');
                line.push_str(f);
            }
            let mut bytes = line.into_bytes();
            bytes.extend_from_slice(b"\r\n");
            bytes.extend_from_slice(&data);
            bytes.extend_from_slice(b"\r\n");
            return Step::new(bytes);
        }
        _ => {
            let mut line = format!("{command} {k}");
            for f in &flags {
                line.push(' ');
                line.push_str(f);
            }
            line
        }
    };
    line.push_str("\r\n");
    Step::new(line)
}

fn meta_malformed(rng: &mut Rng) -> Step {
    let k = key(rng);
    let choices = [
        "mg\r\n".to_string(),
        "ms\r\n".to_string(),
        format!("ms {k}\r\n"),
        format!("ms {k} x\r\nab\r\n"),
        format!("ms {k} -1\r\n"),
        format!("ms {k} 2\r\nabc\r\n"),
        format!("ms {k} 2 MX\r\nab\r\n"),
        format!("ms {k} 2 Tx\r\nab\r\n"),
        format!("ms {k} 2 Fx\r\nab\r\n"),
        format!("ms {k} 2 C\r\nab\r\n"),
        format!("mg {k} z\r\n"),
        format!("mg {k} Tx v\r\n"),
        format!("mg {k} N v\r\n"),
        format!("mg {k} v v\r\n"),
        // A key never stored: memcached fetches the item (marking it fetched) before it
        // finds the opaque too long; memspin refuses the line without looking.
        "mg nope O123456789012345678901234567890123\r\n".to_string(),
        format!("mg {} v\r\n", "k".repeat(251)),
        format!("mg {} b v\r\n", base64(&[b'k'; 200])),
        "mg !!!! b v\r\n".to_string(),
        "mg YQ b v\r\n".to_string(),
        format!("md {k} z\r\n"),
        format!("ma {k} Dx\r\n"),
        format!("ma {k} D-1\r\n"),
        format!("ma {k} MX\r\n"),
        format!("ma {k} J-1 N0\r\n"),
        "mz a\r\n".to_string(),
        "me\r\n".to_string(),
        format!("mn {k}\r\n"),
        format!("mg {k} {}\r\n", "v ".repeat(30)),
    ];
    Step::new(choices[rng.below(choices.len())].clone())
}

fn generate_text(rng: &mut Rng, count: usize) -> Vec<Step> {
    let mut steps = Vec::with_capacity(count + 1);
    for _ in 0..count {
        let step = match rng.below(100) {
            0..=19 => storage(rng),
            20..=34 => retrieval(rng),
            35..=44 => arithmetic(rng),
            45..=51 => admin(rng),
            52..=59 => malformed(rng),
            60..=92 => meta(rng),
            _ => meta_malformed(rng),
        };
        // `gets` before a `cas` so the CAS refers to the item just read, often.
        if String::from_utf8_lossy(&step.bytes).contains("{CAS}") && rng.chance(60) {
            let line = String::from_utf8_lossy(&step.bytes).into_owned();
            let k = line.split(' ').nth(1).unwrap_or("a").to_string();
            if !k.contains('\r') {
                steps.push(Step::new(format!("gets {k}\r\n")));
            }
        }
        steps.push(step);
    }
    steps.push(Step::new("get a b\r\nquit\r\nget a\r\n").closing());
    let mut steps = settle_after_arithmetic(steps);
    no_delay_after_flush(&mut steps, |step| {
        let delayed = step.bytes.starts_with(b"flush_all 1000");
        if delayed {
            step.bytes = b"flush_all 0\r\n".to_vec();
        }
        (delayed, step.bytes.starts_with(b"flush_all") && !delayed)
    });
    steps
}

/// After an incr/decr, the two servers' items may differ in ways no request decides:
/// - memcached pads a result shorter than the old value with spaces, memspin does not (an
///   accepted difference): appended to, the two values then read as different numbers
///   (`6 ` and `0` make `6 0`, 6, and `60`);
/// - memcached rewrites such a result in place, keeping the item's fetched, stale and
///   recache-token marks, only while no one else holds a reference to the item, and
///   otherwise makes a new item without them: which one depends on timing (the same seed
///   says `fetch=yes` in one run and `no` in the next). memspin always keeps them.
///
/// So before an append or prepend (text, or `ms` with `MA`/`MP`), an `mg` or an `me` on a
/// key some arithmetic may have changed since it was last set, a `set` gives the key a
/// plain, unmarked value on both servers.
fn settle_after_arithmetic(steps: Vec<Step>) -> Vec<Step> {
    let mut touched: Vec<&str> = Vec::new();
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        let line = String::from_utf8_lossy(&step.bytes).into_owned();
        let line = line.split("\r\n").next().unwrap_or("");
        let mut tokens = line.split([' ', '\n']);
        let command = tokens.next().unwrap_or("");
        let named = tokens.next().unwrap_or("");
        let key = KEYS
            .iter()
            .copied()
            .find(|&k| k == named || base64(k.as_bytes()) == named);
        if let Some(k) = key {
            let reads_marks = matches!(command, "append" | "prepend" | "mg" | "me")
                || (command == "ms" && line.split(' ').any(|t| t == "MA" || t == "MP"));
            if reads_marks && touched.contains(&k) {
                out.push(Step::new(format!("set {k} 0 0 2\r\n10\r\n")));
                touched.retain(|&p| p != k);
            }
            match command {
                "incr" | "decr" | "ma" if !touched.contains(&k) => touched.push(k),
                "set" if whole_set(&step.bytes) => touched.retain(|&p| p != k),
                _ => {}
            }
        }
        out.push(step);
    }
    out
}

/// Whether `bytes` are one well-formed `set` that replaces its key's item: a line of five
/// or six tokens (`noreply`) whose length is that of the data block after it (a malformed
/// set, or one cut short, stores nothing).
fn whole_set(bytes: &[u8]) -> bool {
    let Some(end) = bytes.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    let line = String::from_utf8_lossy(&bytes[..end]);
    let tokens: Vec<&str> = line.split(' ').collect();
    let numbers =
        tokens.len() >= 5 && tokens[2].parse::<u32>().is_ok() && tokens[3].parse::<i64>().is_ok();
    let length = tokens.get(4).and_then(|n| n.parse::<usize>().ok());
    let tail = tokens.get(5).is_none_or(|&t| t == "noreply") && tokens.len() <= 6;
    numbers
        && tail
        && length.is_some_and(|n| bytes.len() == end + 2 + n + 2 && bytes.ends_with(b"\r\n"))
}

/// memcached 1.6.18 marks a flush by a time and a CAS, and removes flushed items only when it
/// meets them: a `flush_all` with a delay after an immediate one moves that time ahead, and
/// items flushed but not reclaimed yet (how many depends on its background crawler, so on
/// timing) come back. memspin keeps them flushed, as protocol.txt says. Once a sequence has
/// flushed at once, `change` turns its later delayed flushes into immediate ones (it returns
/// whether the step was a delayed flush, and whether it flushes at once).
fn no_delay_after_flush(steps: &mut [Step], change: fn(&mut Step) -> (bool, bool)) {
    let mut flushed = false;
    for step in steps {
        let original = step.clone();
        let (delayed, now) = change(step);
        if delayed && !flushed {
            *step = original;
        }
        flushed |= now || (delayed && flushed);
    }
}

#[test]
fn text_and_meta_replies_match_memcached() {
    run_seeds(Proto::Text, TEXT_SEEDS, generate_text);
}

// ---------------------------------------------------------------------------------------
// Binary.

#[allow(clippy::too_many_arguments)]
fn frame(opcode: u8, opaque: u32, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 24];
    f[0] = 0x80;
    f[1] = opcode;
    f[2..4].copy_from_slice(&(key.len() as u16).to_be_bytes());
    f[4] = extras.len() as u8;
    let body = (extras.len() + key.len() + value.len()) as u32;
    f[8..12].copy_from_slice(&body.to_be_bytes());
    f[12..16].copy_from_slice(&opaque.to_be_bytes());
    f.extend_from_slice(extras);
    f.extend_from_slice(key);
    f.extend_from_slice(value);
    f
}

fn binary_exptime(rng: &mut Rng) -> u32 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    *rng.pick(&[0, 0, 0, 1000, 2592000, 1_000_000_000, now + 5000])
}

fn binary_step(rng: &mut Rng) -> Step {
    let k = key(rng).into_bytes();
    let opaque = rng.next() as u32 & 0xffff;
    let quiet = rng.chance(30);
    let q = |base: u8, quiet_op: u8| if quiet { quiet_op } else { base };
    match rng.below(22) {
        0..=3 => {
            let (base, quiet_op) = *rng.pick(&[(0x01u8, 0x11u8), (0x02, 0x12), (0x03, 0x13)]);
            let mut extras = Vec::new();
            extras.extend_from_slice(&rng.pick(&[0u32, 1, 42, u32::MAX]).to_be_bytes());
            extras.extend_from_slice(&binary_exptime(rng).to_be_bytes());
            let step = Step::new(frame(q(base, quiet_op), opaque, &extras, &k, &value(rng)));
            match rng.below(4) {
                0 => step.cas(CasRef::Last),
                1 => step.cas(CasRef::Never),
                _ => step,
            }
        }
        4 | 5 => {
            let (base, quiet_op) = *rng.pick(&[(0x0eu8, 0x19u8), (0x0f, 0x1a)]);
            let step = Step::new(frame(q(base, quiet_op), opaque, &[], &k, &value(rng)));
            if rng.chance(20) {
                step.cas(CasRef::Last)
            } else {
                step
            }
        }
        6..=9 => {
            let (base, quiet_op) = *rng.pick(&[(0x00u8, 0x09u8), (0x0c, 0x0d)]);
            Step::new(frame(q(base, quiet_op), opaque, &[], &k, &[]))
        }
        10 => {
            let (base, quiet_op) = *rng.pick(&[(0x1du8, 0x1eu8), (0x23, 0x24)]);
            let extras = binary_exptime(rng).to_be_bytes();
            Step::new(frame(q(base, quiet_op), opaque, &extras, &k, &[]))
        }
        11 => Step::new(frame(
            0x1c,
            opaque,
            &binary_exptime(rng).to_be_bytes(),
            &k,
            &[],
        )),
        12 | 13 => {
            let (base, quiet_op) = *rng.pick(&[(0x05u8, 0x15u8), (0x06, 0x16)]);
            let mut extras = Vec::new();
            extras.extend_from_slice(&rng.pick(&[0u64, 1, 5, u64::MAX, 1 << 63]).to_be_bytes());
            extras.extend_from_slice(&rng.pick(&[0u64, 7, u64::MAX]).to_be_bytes());
            let exp = *rng.pick(&[0u32, 0, 1000, 0xffff_ffff, 1_000_000_000]);
            extras.extend_from_slice(&exp.to_be_bytes());
            let step = Step::new(frame(q(base, quiet_op), opaque, &extras, &k, &[]));
            if rng.chance(15) {
                step.cas(CasRef::Last)
            } else {
                step
            }
        }
        14 => {
            let step = Step::new(frame(q(0x04, 0x14), opaque, &[], &k, &[]));
            match rng.below(4) {
                0 => step.cas(CasRef::Last),
                1 => step.cas(CasRef::Never),
                _ => step,
            }
        }
        15 => {
            let extras: Vec<u8> = match rng.below(3) {
                0 => Vec::new(),
                1 => 0u32.to_be_bytes().to_vec(),
                _ => 1000u32.to_be_bytes().to_vec(),
            };
            Step::new(frame(q(0x08, 0x18), opaque, &extras, &[], &[]))
        }
        16 => Step::new(frame(*rng.pick(&[0x0au8, 0x0b]), opaque, &[], &[], &[])),
        // memcached 1.6.18 answers verbosity "unknown command" and, as for any unknown
        // command, then skips as many bytes of the next frame as the body had: end the
        // connection after it.
        17 => Step::new(frame(0x1b, opaque, &1u32.to_be_bytes(), &[], &[])).closing(),
        18 => {
            // Quiet commands between two NOOPs: their order and silences.
            let mut bytes = frame(0x0d, 1, &[], &k, &[]);
            bytes.extend(frame(0x09, 2, &[], b"nope", &[]));
            bytes.extend(frame(0x0a, 3, &[], &[], &[]));
            bytes.extend(frame(0x11, 4, &[0; 8], &k, b"q"));
            bytes.extend(frame(0x0d, 5, &[], &k, &[]));
            Step::new(bytes)
        }
        19 => binary_malformed(rng, &k, opaque),
        20 => Step::new(frame(*rng.pick(&[0x07u8, 0x17]), opaque, &[], &[], &[])).closing(),
        _ => {
            // Not 0x20..0x22 (SASL): memspin has none, memcached's is not built in.
            let unknown = *rng.pick(&[0x25u8, 0x30, 0x41, 0xfe]);
            Step::new(frame(unknown, opaque, &[], &k, b"xy")).closing()
        }
    }
}

fn binary_malformed(rng: &mut Rng, k: &[u8], opaque: u32) -> Step {
    match rng.below(10) {
        // Bad magic: both close.
        0 => {
            let mut f = frame(0x00, opaque, &[], k, &[]);
            f[0] = 0x81;
            Step::new(f).closing()
        }
        // Extras on a get, none on a set, a key on a noop, no key on a get.
        1 => Step::new(frame(0x00, opaque, &[0, 0, 0, 1], k, &[])),
        2 => Step::new(frame(0x01, opaque, &[], k, b"v")),
        3 => Step::new(frame(0x0a, opaque, &[], k, &[])),
        4 => Step::new(frame(0x00, opaque, &[], &[], &[])),
        5 => Step::new(frame(0x05, opaque, &[0; 4], k, &[])),
        // key_len + extras_len over body_len: both close.
        6 => {
            let mut f = frame(0x00, opaque, &[], k, &[]);
            f[8..12].copy_from_slice(&0u32.to_be_bytes());
            f.truncate(24);
            Step::new(f).closing()
        }
        7 => Step::new(frame(0x01, opaque, &[0; 8], &[b'k'; 251], b"v")),
        8 => Step::new(frame(0x00, opaque, &[], &[b'k'; 251], &[])),
        _ => Step::new(frame(0x1c, opaque, &[], k, &[])),
    }
}

fn generate_binary(rng: &mut Rng, count: usize) -> Vec<Step> {
    let mut steps = Vec::with_capacity(count);
    for _ in 0..count {
        steps.push(binary_step(rng));
    }
    let _ = binary_marker();
    let mut steps = counters_both_read_alike(rng, steps);
    no_delay_after_flush(&mut steps, |step| {
        let flush = matches!(step.bytes[1], 0x08 | 0x18) && step.bytes[0] == 0x80;
        let delayed = flush && step.bytes.len() == 28 && step.bytes[24..] != [0; 4];
        if delayed {
            step.bytes[24..].copy_from_slice(&[0; 4]);
        }
        (delayed, flush && !delayed)
    });
    steps
}

/// What a sequence may have left in a key, as far as incr/decr and append/prepend read it;
/// both err on the side of "may".
#[derive(Debug, Default, Clone, Copy)]
struct Counter {
    /// A number of 2^63 or more: memcached 1.6.18's `safe_strtoull` then looks for a `-` in
    /// the item's data with `strchr`, and that data is not a C string (it ends in `\r\n`):
    /// the scan runs on past the item, through the slack of its slab chunk (bytes of items
    /// that held the chunk before) into the next chunk's header (pointers), until a NUL.
    /// Meeting a 0x2d there makes it answer "non-numeric" for a valid counter: which run does
    /// depends on memory layout (address randomisation, which chunk the slab allocator hands
    /// out, what its crawler reclaimed when), so the same seed parts now and then. memspin reads
    /// the value alone (protocol.txt: a decimal 64-bit unsigned integer), which no run of
    /// memcached can be compared with.
    big: bool,
    /// A result of incr/decr shorter than the old value (a decrement, a wrap, or an old
    /// value with leading zeros or white space: "007" + 1 is "8  "): memcached pads it with
    /// spaces (unless something else holds the item), memspin does not (docs/protocols.md: both are
    /// allowed).
    /// The padding is invisible to incr/decr and `unpad` hides it in replies, but an append
    /// or prepend carries it into the middle of the value: "5 " + "3" reads as 5, "5" + "3"
    /// as 53.
    padded: bool,
}

/// Keeps the two servers reading every counter alike: before an incr/decr on a key that may
/// hold a number of 2^63 or more, and before an append/prepend on a key an incr/decr may have
/// padded, a plain SET gives the key a small number, or a DELETE removes it (see [`Counter`]
/// for why those answers depend on memcached's memory and on its padding). Counters at the
/// 64-bit edge are still made, wrapped and saturated (creation with a huge initial value,
/// huge deltas), and values over 2^64 - 1 are still non-numeric; only reading one of 2^63 to
/// 2^64 - 1 is left to memspin's own tests.
fn counters_both_read_alike(rng: &mut Rng, steps: Vec<Step>) -> Vec<Step> {
    const GUARD: u32 = 0x6a7d;
    let mut keys: std::collections::HashMap<Vec<u8>, Counter> = Default::default();
    let mut out = Vec::with_capacity(steps.len() + steps.len() / 10);
    for step in steps {
        let mut at = 0;
        let mut first = true;
        while let Some((opcode, extras, key, value, cas, len)) = binary_frame(&step.bytes[at..]) {
            let conditional = cas != 0 || (first && step.binary_cas.is_some());
            at += len;
            first = false;
            if key.is_empty() || key.len() > 250 {
                continue;
            }
            let counter = keys.entry(key.to_vec()).or_default();
            let (arith, concat) = (
                matches!(opcode, 0x05 | 0x06 | 0x15 | 0x16) && extras.len() == 20,
                matches!(opcode, 0x0e | 0x0f | 0x19 | 0x1a) && extras.is_empty(),
            );
            if (arith && counter.big) || (concat && counter.padded) {
                let guard = match rng.below(6) {
                    0..=1 => frame(0x04, GUARD, &[], key, &[]),
                    n => frame(
                        0x01,
                        GUARD,
                        &[0; 8],
                        key,
                        [&b"0"[..], b"7", b"10", b"99"][n - 2],
                    ),
                };
                out.push(Step::new(guard));
                *counter = Counter::default();
            }
            match opcode {
                0x01..=0x03 | 0x11..=0x13 if extras.len() == 8 => {
                    let set = matches!(opcode, 0x01 | 0x11) && !conditional;
                    let big = maybe_big(value);
                    *counter = Counter {
                        big: big || (!set && counter.big),
                        padded: !set && counter.padded,
                    };
                }
                0x05 | 0x06 | 0x15 | 0x16 if arith => {
                    let delta = u64::from_be_bytes(extras[..8].try_into().unwrap());
                    let initial = u64::from_be_bytes(extras[8..16].try_into().unwrap());
                    let incr = matches!(opcode, 0x05 | 0x15);
                    counter.big |= (incr && delta >= 1 << 63) || initial >= 1 << 63;
                    counter.padded = true;
                }
                0x0e | 0x19 if concat => {
                    counter.big |=
                        maybe_big(value) || value.first().is_some_and(u8::is_ascii_digit);
                }
                0x0f | 0x1a if concat => {
                    counter.big |= maybe_big(value) || value.last().is_some_and(u8::is_ascii_digit);
                }
                _ => {}
            }
        }
        out.push(step);
    }
    out
}

/// The binary request at the front of `bytes`, if whole and with the right magic: opcode,
/// extras, key, value, the header's CAS and the frame's length.
#[allow(clippy::type_complexity)]
fn binary_frame(bytes: &[u8]) -> Option<(u8, &[u8], &[u8], &[u8], u64, usize)> {
    let header = bytes.get(..24)?;
    let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let extras_len = usize::from(header[4]);
    let body_len = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
    let body = bytes.get(24..24 + body_len)?;
    if header[0] != 0x80 || key_len + extras_len > body_len {
        return None;
    }
    let cas = u64::from_be_bytes(header[16..24].try_into().unwrap());
    let (extras, rest) = body.split_at(extras_len);
    let (key, value) = rest.split_at(key_len);
    Some((header[1], extras, key, value, cas, 24 + body_len))
}

/// Whether memcached may read `value` as a number from 2^63 to 2^64 - 1 (after white space,
/// a sign and leading zeros). A larger one it refuses before it looks for a `-`.
fn maybe_big(value: &[u8]) -> bool {
    let start = value
        .iter()
        .position(|b| !b" \t\n\r\x0b\x0c+-0".contains(b))
        .unwrap_or(value.len());
    let digits = value[start..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let number = std::str::from_utf8(&value[start..start + digits.min(21)]).unwrap();
    number
        .parse::<u128>()
        .is_ok_and(|n| (1 << 63..=u128::from(u64::MAX)).contains(&n))
}

#[test]
fn binary_replies_match_memcached() {
    run_seeds(Proto::Binary, BINARY_SEEDS, generate_binary);
}

// ---------------------------------------------------------------------------------------
// RESP.

/// The commands memspin serves (docs/protocols.md, "Redis clients (RESP)").
const SERVED: &[&str] = &[
    "GET",
    "SET",
    "SETNX",
    "SETEX",
    "PSETEX",
    "GETSET",
    "GETDEL",
    "GETEX",
    "MGET",
    "MSET",
    "MSETNX",
    "INCR",
    "DECR",
    "INCRBY",
    "DECRBY",
    "APPEND",
    "STRLEN",
    "DEL",
    "UNLINK",
    "EXISTS",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "TTL",
    "PTTL",
    "PERSIST",
    "TYPE",
    "DBSIZE",
    "FLUSHALL",
    "FLUSHDB",
    "INFO",
    "CONFIG",
    "COMMAND",
    "PING",
    "ECHO",
    "SELECT",
    "QUIT",
    "HELLO",
    "CLIENT",
];

/// The command name of a multibulk or inline request.
fn resp_command_name(request: &[u8]) -> String {
    let text = String::from_utf8_lossy(request);
    let word = if text.starts_with('*') {
        text.split("\r\n").nth(2).unwrap_or("")
    } else {
        text.split_whitespace().next().unwrap_or("")
    };
    word.to_string()
}

/// Whether `request` is `EXPIRE`, `PEXPIRE`, `EXPIREAT` or `PEXPIREAT` with `GT` or `LT`
/// and a time after February 2106 (2^32 unix seconds), where memspin's expiry stops.
fn expiry_condition_after_2106(request: &str) -> bool {
    let words: Vec<&str> = if request.starts_with('*') {
        // `*N`, then `$len` and the argument, per argument.
        request.split("\r\n").skip(2).step_by(2).collect()
    } else {
        request.split_whitespace().collect()
    };
    let [name, _key, time, options @ ..] = words.as_slice() else {
        return false;
    };
    if !options
        .iter()
        .any(|o| o.eq_ignore_ascii_case("gt") || o.eq_ignore_ascii_case("lt"))
    {
        return false;
    }
    let Ok(time) = time.parse::<i64>() else {
        return false;
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let at_ms = match name.to_ascii_uppercase().as_str() {
        "EXPIRE" => now_ms.saturating_add(time.saturating_mul(1000)),
        "PEXPIRE" => now_ms.saturating_add(time),
        "EXPIREAT" => time.saturating_mul(1000),
        "PEXPIREAT" => time,
        _ => return false,
    };
    at_ms > (1i64 << 32) * 1000
}

fn multibulk(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

const RESP_VALUES: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "10",
    "v",
    "hello world",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "12ab",
    " 1",
    "1.5",
];

fn resp_step(rng: &mut Rng) -> Step {
    let k = *rng.pick(&["a", "b", "c", "n"]);
    let k2 = *rng.pick(&["a", "b", "c", "n"]);
    let v = *rng.pick(RESP_VALUES);
    let int = *rng.pick(&[
        "0",
        "1",
        "-1",
        "5",
        "100",
        "1000",
        "x",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "1.5",
        "",
    ]);
    let secs = *rng.pick(&[
        "1000",
        "100000",
        "-1",
        "0",
        "x",
        "1000000000",
        "9999999999999",
    ]);
    let mut args: Vec<String> = match rng.below(40) {
        0..=3 => {
            let mut a = vec!["SET".to_string(), k.into(), v.into()];
            for _ in 0..rng.below(3) {
                match rng.below(9) {
                    0 => a.extend(["EX".into(), secs.into()]),
                    1 => a.extend(["PX".into(), secs.into()]),
                    2 => a.extend(["EXAT".into(), secs.into()]),
                    3 => a.extend(["PXAT".into(), secs.into()]),
                    4 => a.push("NX".into()),
                    5 => a.push("XX".into()),
                    6 => a.push("KEEPTTL".into()),
                    7 => a.push("GET".into()),
                    _ => a.push("BOGUS".into()),
                }
            }
            a
        }
        4 | 5 => vec!["GET".into(), k.into()],
        6 => vec![
            rng.pick(&["SETNX", "GETSET", "APPEND"]).to_string(),
            k.into(),
            v.into(),
        ],
        7 => vec![
            rng.pick(&["SETEX", "PSETEX"]).to_string(),
            k.into(),
            secs.into(),
            v.into(),
        ],
        8 => vec![
            rng.pick(&["GETDEL", "STRLEN", "TYPE", "TTL", "PTTL", "PERSIST"])
                .to_string(),
            k.into(),
        ],
        9 => {
            let mut a = vec!["GETEX".to_string(), k.into()];
            match rng.below(7) {
                0 => a.extend(["EX".into(), secs.into()]),
                1 => a.extend(["PX".into(), secs.into()]),
                2 => a.extend(["EXAT".into(), secs.into()]),
                3 => a.extend(["PXAT".into(), secs.into()]),
                4 => a.push("PERSIST".into()),
                5 => a.extend(["PERSIST".into(), "EX".into(), "5".into()]),
                _ => {}
            }
            a
        }
        10 | 11 => {
            let mut a = vec![rng.pick(&["MGET", "DEL", "UNLINK", "EXISTS"]).to_string()];
            for _ in 0..rng.below(5) {
                a.push(rng.pick(&["a", "b", "c", "n", "a"]).to_string());
            }
            a
        }
        12 | 13 => {
            let mut a = vec![rng.pick(&["MSET", "MSETNX"]).to_string()];
            for _ in 0..rng.below(4) {
                a.push(rng.pick(&["a", "b", "c", "n", "a"]).to_string());
                a.push(rng.pick(RESP_VALUES).to_string());
            }
            if rng.chance(10) {
                a.push("odd".into());
            }
            a
        }
        14..=17 => {
            let command = *rng.pick(&["INCR", "DECR", "INCRBY", "DECRBY"]);
            let mut a = vec![command.to_string(), k.into()];
            if command.ends_with("BY") {
                a.push(int.into());
            }
            a
        }
        18 | 19 => {
            let command = *rng.pick(&["EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"]);
            let mut a = vec![command.to_string(), k.into(), secs.into()];
            for _ in 0..rng.below(3) {
                a.push(rng.pick(&["NX", "XX", "GT", "LT", "nx", "BAD"]).to_string());
            }
            a
        }
        20 => vec![rng.pick(&["TTL", "PTTL"]).to_string(), k.into()],
        21 => vec![
            rng.pick(&["DBSIZE", "PING", "FLUSHALL", "FLUSHDB"])
                .to_string(),
        ],
        22 => vec![
            rng.pick(&["FLUSHALL", "FLUSHDB"]).to_string(),
            rng.pick(&["ASYNC", "SYNC", "bad"]).to_string(),
        ],
        23 => vec!["ECHO".into(), v.into()],
        // Not another valid index: Redis would move to that database, memspin has one.
        24 => vec![
            "SELECT".into(),
            rng.pick(&["0", "x", "-1", "16"]).to_string(),
        ],
        25 => vec!["PING".into(), v.into()],
        26 => vec![
            "CLIENT".into(),
            rng.pick(&["GETNAME", "SETNAME", "ID", "bogus"]).to_string(),
        ],
        27 => vec![
            "CLIENT".into(),
            "SETNAME".into(),
            rng.pick(&["me", "a b", ""]).to_string(),
        ],
        28 => vec![
            "CONFIG".into(),
            "GET".into(),
            rng.pick(&["appendonly", "databases", "maxclients", "nothing*", "save"])
                .to_string(),
        ],
        29 => vec![
            rng.pick(&["INFO", "HELLO", "COMMAND"]).to_string(),
            rng.pick(&["", "keyspace", "2", "COUNT"]).to_string(),
        ],
        // Arity errors and unknown commands.
        30 => vec![
            rng.pick(&[
                "GET", "SET", "INCRBY", "EXPIRE", "MSET", "APPEND", "ECHO", "STRLEN", "GETEX",
                "SETEX", "DEL", "EXISTS", "MGET", "TTL", "TYPE", "PERSIST", "GETDEL",
            ])
            .to_string(),
        ],
        31 => vec![
            rng.pick(&["GET", "INCR", "TTL", "STRLEN", "DBSIZE", "ECHO", "TYPE"])
                .to_string(),
            k.into(),
            k2.into(),
            "x".into(),
        ],
        // Commands memspin does not serve, none that would make another type in Redis.
        32 => vec![
            rng.pick(&["LPUSH", "HSET", "SCAN", "bogus", "MULTI"])
                .to_string(),
            k.into(),
        ],
        33 => vec!["set".into(), k.into(), v.into(), "ex".into(), "1000".into()],
        _ => {
            // Inline commands, with quoting.
            let line = rng
                .pick(&[
                    "SET a \"x y\"\r\n",
                    "GET a\r\n",
                    "set b 'q\\'s'\r\n",
                    "GET \"a\r\n",
                    "   \r\n",
                    "EXISTS a a b\r\n",
                    "INCR n\r\n",
                    "SET c \"\\x41\\n\"\r\n",
                    "ECHO \"a\"b\r\n",
                    "GET a\n",
                ])
                .to_string();
            return inline_or_close(line);
        }
    };
    if args.is_empty() {
        args.push("PING".into());
    }
    let masked = match args[0].as_str() {
        "TTL" => Mask::Seconds,
        "PTTL" => Mask::Millis,
        "INFO" | "HELLO" | "COMMAND" => Mask::Kind,
        "CLIENT" if args.get(1).is_some_and(|a| a == "ID") => Mask::Kind,
        _ => Mask::Nothing,
    };
    let refs: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    Step::new(multibulk(&refs)).masked(masked)
}

fn inline_or_close(line: String) -> Step {
    if line.contains("\"a\r") || line.contains("\"b") {
        // Unbalanced quotes: an error, then Redis closes.
        Step::new(line).closing()
    } else {
        Step::new(line)
    }
}

fn resp_bad(rng: &mut Rng) -> Step {
    let choices: &[&[u8]] = &[
        b"*1\r\n$x\r\n",
        b"*1\r\n$-5\r\n",
        b"*x\r\n",
        b"*1\r\n:5\r\n",
        b"*2\r\n$3\r\nGET\r\n+a\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*1\r\n$4\r\nPING\r\n",
        b"*1\r\n$4\r\nPINGxx",
    ];
    let bytes = choices[rng.below(choices.len())];
    let step = Step::new(bytes.to_vec());
    if bytes.starts_with(b"*-1") || bytes.starts_with(b"*0") || bytes == b"*1\r\n$4\r\nPING\r\n" {
        step
    } else {
        step.closing()
    }
}

fn generate_resp(rng: &mut Rng, count: usize) -> Vec<Step> {
    let mut steps = Vec::with_capacity(count + 1);
    for _ in 0..count {
        steps.push(if rng.chance(3) {
            resp_bad(rng)
        } else {
            resp_step(rng)
        });
    }
    steps.push(Step::new(multibulk(&[b"QUIT"])).closing());
    steps
}

#[test]
fn resp_replies_match_redis() {
    run_seeds(Proto::Resp, RESP_SEEDS, generate_resp);
}

/// One request of a sequence over several databases, with `SCAN`; a transaction is one step
/// (`MULTI`, its commands, then `EXEC` or `DISCARD`), so no marker is ever queued.
fn resp_keyspace_step(rng: &mut Rng) -> Step {
    match rng.below(10) {
        0 | 1 => {
            let mut bytes = multibulk(&[b"MULTI"]);
            for _ in 0..rng.below(5) {
                let inner = if rng.chance(10) {
                    let args: &[&str] = match rng.below(4) {
                        0 => &["MULTI"],
                        1 => &["WATCH", "a"],
                        2 => &["NOPE"],
                        _ => &["GET"],
                    };
                    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
                    multibulk(&args)
                } else {
                    // An unordered reply inside the EXEC array could not be compared.
                    let step = resp_keyspace_command(rng);
                    if step.mask == Mask::Nothing {
                        step.bytes
                    } else {
                        multibulk(&[b"PING"])
                    }
                };
                bytes.extend(inner);
            }
            let end: &[u8] = if rng.chance(80) { b"EXEC" } else { b"DISCARD" };
            bytes.extend(multibulk(&[end]));
            Step::new(bytes)
        }
        _ => resp_keyspace_command(rng),
    }
}

/// One command of [`resp_keyspace_step`] outside a transaction's frame.
fn resp_keyspace_command(rng: &mut Rng) -> Step {
    let k = *rng.pick(&["a", "b", "c"]);
    let db = *rng.pick(&["0", "1", "2", "3", "15", "16", "-1", "x"]);
    let v = *rng.pick(&["1", "10", "x", ""]);
    let args: Vec<&str> = match rng.below(26) {
        0..=2 => vec!["SELECT", db],
        3..=5 => vec!["SET", k, v],
        6 | 7 => vec!["GET", k],
        8 => vec!["INCR", k],
        9 => vec!["APPEND", k, v],
        10 => vec!["DEL", k],
        11 => vec!["EXISTS", k, "a", "b"],
        12 => vec!["DBSIZE"],
        13 => vec!["MOVE", k, db],
        14 if rng.chance(4) => vec!["FLUSHDB"],
        14 if rng.chance(4) => vec!["FLUSHALL"],
        14 => vec!["MGET", "a", "b", "c"],
        15 | 16 => vec!["WATCH", k],
        17 => vec!["UNWATCH"],
        18 => vec![*rng.pick(&["EXEC", "DISCARD"])],
        19 => vec!["RESET"],
        20 | 21 => {
            let step = if rng.chance(50) {
                multibulk(&[b"SCAN", b"0", b"COUNT", b"1000"])
            } else {
                multibulk(&[b"SCAN", b"0", b"MATCH", b"[ab]*", b"COUNT", b"1000"])
            };
            return Step::new(step).masked(Mask::Unordered);
        }
        22 => return Step::new(multibulk(&[b"KEYS", b"*"])).masked(Mask::Unordered),
        23 => vec!["SETNX", k, v],
        24 => vec!["GETDEL", k],
        _ => vec!["PING"],
    };
    let refs: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    Step::new(multibulk(&refs))
}

fn generate_resp_keyspace(rng: &mut Rng, count: usize) -> Vec<Step> {
    let mut steps = Vec::with_capacity(count + 2);
    steps.push(Step::new(multibulk(&[b"FLUSHALL"])));
    for _ in 0..count {
        steps.push(resp_keyspace_step(rng));
    }
    steps.push(Step::new(multibulk(&[b"QUIT"])).closing());
    steps
}

/// Random sequences over several databases, with transactions (`MULTI`, `EXEC`, `DISCARD`,
/// `WATCH` of keys the same connection then changes or not), `SCAN` and `KEYS`, compared
/// reply by reply with redis-server's.
#[test]
fn resp_databases_transactions_and_scan_match_redis() {
    run_seeds(Proto::Resp, RESP_SEEDS, generate_resp_keyspace);
}

// ---------------------------------------------------------------------------------------
// Sequences that once found a difference, kept as they are.

fn run_fixed(proto: Proto, steps: &[Step]) {
    let (reference_bin, package) = match proto {
        Proto::Resp => ("redis-server", "redis-server"),
        _ => ("memcached", "memcached"),
    };
    if !have(reference_bin, package) {
        return;
    }
    let memspin = start_memspin(&["--resp-port", "0"]);
    let differences = match proto {
        Proto::Resp => {
            let redis = RedisServer::start();
            compare(proto, 0, steps, redis.addr, memspin.resp_addr(), 10).0
        }
        _ => {
            let memcached = start_memcached();
            compare(proto, 0, steps, memcached.addr, memspin.addr, 10).0
        }
    };
    report(&format!("{proto:?} regressions"), differences);
}

#[test]
fn text_regressions_match_memcached() {
    let steps: Vec<Step> = [
        // Append and prepend with a CAS on a missing key: NS, not NF.
        "ms nope 1 MA C{CASX}\r\nx\r\n",
        "ms nope 1 MP C{CASX} k\r\nx\r\n",
        // incr and decr read numbers with white space around them.
        "set n 0 0 2\r\n7 \r\n",
        "incr n 1\r\n",
        "set n 0 0 3\r\n 7\n\r\n",
        "decr n 1\r\n",
        "set n 0 0 5\r\n7 a b\r\n",
        "ma n v\r\n",
        "set n 0 0 2\r\n-0\r\n",
        "incr n 1\r\n",
        "set n 0 0 2\r\n-1\r\n",
        "incr n 1\r\n",
    ]
    .iter()
    .map(|s| Step::new(*s))
    .collect();
    run_fixed(Proto::Text, &steps);
}

#[test]
fn binary_regressions_match_memcached() {
    let extras = [0u8; 8];
    let mut by_one = [0u8; 20];
    by_one[7] = 1;
    let steps = vec![
        Step::new(frame(0x01, 1, &extras, b"k", b"v")),
        // ADD with the item's CAS replaces it; with another, "exists"; missing, "not found".
        Step::new(frame(0x02, 2, &extras, b"k", b"w")).cas(CasRef::Last),
        Step::new(frame(0x00, 3, &[], b"k", &[])),
        Step::new(frame(0x02, 4, &extras, b"k", b"x")).cas(CasRef::Never),
        Step::new(frame(0x02, 5, &extras, b"nope", b"x")).cas(CasRef::Never),
        Step::new(frame(0x12, 6, &extras, b"k", b"y")).cas(CasRef::Last),
        // Append and prepend with a CAS on a missing key: "not stored".
        Step::new(frame(0x0e, 7, &[], b"nope", b"x")).cas(CasRef::Never),
        Step::new(frame(0x1a, 8, &[], b"nope", b"x")).cas(CasRef::Never),
        Step::new(frame(0x00, 9, &[], b"k", &[])),
        // An empty value is non-numeric before a wrong CAS is "exists".
        Step::new(frame(0x01, 10, &extras, b"e", b"")),
        Step::new(frame(0x05, 11, &[0; 20], b"e", &[])).cas(CasRef::Never),
        Step::new(frame(0x01, 12, &extras, b"e", b"x")),
        Step::new(frame(0x05, 13, &[0; 20], b"e", &[])).cas(CasRef::Never),
        // A NUL ends a counter's number: memcached's strtoull reads the value as a C string.
        Step::new(frame(0x01, 14, &extras, b"z", b"7\x00\x01\xff")),
        Step::new(frame(0x05, 15, &by_one, b"z", &[])),
        Step::new(frame(0x00, 16, &[], b"z", &[])),
    ];
    run_fixed(Proto::Binary, &steps);
}

#[test]
fn resp_regressions_match_redis() {
    let steps: Vec<Step> = [
        &[&b"SET"[..], b"k", b"v", b"EX", b"5", b"EX", b"100"][..],
        &[b"TTL", b"k"],
        &[b"SET", b"k", b"v", b"PXAT", b"x", b"PXAT", b"x"],
        &[b"SET", b"k", b"v", b"KEEPTTL", b"KEEPTTL", b"XX", b"XX"],
        &[b"TTL", b"k"],
        &[b"GETEX", b"nope", b"EX", b"0"],
        &[b"GETEX", b"nope", b"PX", b"x"],
        &[b"GETEX", b"k", b"EX", b"0"],
        &[b"GETEX", b"k", b"PERSIST", b"PERSIST"],
        &[b"TTL", b"k"],
    ]
    .iter()
    .map(|args| {
        let mask = if args[0] == b"TTL" {
            Mask::Seconds
        } else {
            Mask::Nothing
        };
        Step::new(multibulk(args)).masked(mask)
    })
    .collect();
    run_fixed(Proto::Resp, &steps);
}
