//! Engine tests: every binary opcode and error status, quiet pipelines, fragment sweeps.

use protocol::binary::{
    CounterExtras, ExpirationExtras, FlagsExtras, Opcode, RequestRepr, ResponseRepr, Status,
    StoreExtras, VerbosityExtras,
};
use store::ShardConfig;

use super::*;

const NOW: u64 = 1_700_000_000;

pub(crate) fn engine() -> Engine {
    engine_with(ShardConfig {
        memory_limit_bytes: 64 << 20,
        max_item_size: 1 << 20,
    })
}

/// Feeds `input` to a fresh engine and session `piece` bytes at a time, as a socket would
/// deliver it, dropping what each call consumes; returns everything written. Asserts the
/// connection stays open and the input is consumed whole.
#[track_caller]
pub(crate) fn feed_in_pieces(input: &[u8], piece: usize) -> Vec<u8> {
    let mut e = engine();
    let mut session = Session::default();
    let mut out = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for chunk in input.chunks(piece) {
        pending.extend_from_slice(chunk);
        let outcome = e.execute(&mut session, &pending, &mut out, NOW);
        pending.drain(..outcome.consumed);
        assert!(!outcome.close, "piece {piece}");
    }
    assert!(pending.is_empty(), "piece {piece}");
    out
}

/// The piece sizes every fragment sweep uses.
pub(crate) const PIECES: [usize; 5] = [1, 2, 5, 10, 100];

pub(crate) fn engine_with(shard: ShardConfig) -> Engine {
    Engine::new(EngineConfig {
        shard,
        ..engine_config()
    })
}

/// The configuration of [`engine`]: one worker, 64 MiB, 1 MiB items.
pub(crate) fn engine_config() -> EngineConfig {
    EngineConfig {
        started_unix_secs: NOW - 10,
        ..EngineConfig::new(
            ShardConfig {
                memory_limit_bytes: 64 << 20,
                max_item_size: 1 << 20,
            },
            crate::control::Control::new(Default::default(), 0),
        )
    }
}

/// An owned reply, for comparing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reply {
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

#[derive(Clone, Copy)]
struct Req<'a> {
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    cas: u64,
    extras: &'a [u8],
    key: &'a [u8],
    value: &'a [u8],
}

const REQ: Req<'static> = Req {
    opcode: Opcode::Noop,
    quiet: false,
    opaque: 0,
    cas: 0,
    extras: &[],
    key: &[],
    value: &[],
};

impl Req<'_> {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        RequestRepr {
            opcode: self.opcode,
            quiet: self.quiet,
            opaque: self.opaque,
            cas: self.cas,
            vbucket: 0,
            extras: self.extras,
            key: self.key,
            value: self.value,
        }
        .emit_into(&mut out);
        out
    }
}

#[track_caller]
fn parse_replies(mut bytes: &[u8]) -> Vec<Reply> {
    let mut replies = Vec::new();
    while !bytes.is_empty() {
        let (r, len) = ResponseRepr::parse(bytes, u32::MAX).expect("well-formed reply");
        replies.push(Reply {
            opcode: r.opcode.to_wire(r.quiet),
            status: r.status,
            opaque: r.opaque,
            cas: r.cas,
            extras: r.extras.to_vec(),
            key: r.key.to_vec(),
            value: r.value.to_vec(),
        });
        bytes = &bytes[len..];
    }
    replies
}

/// Executes `input` on a fresh session in one call; returns the replies and the outcome.
#[track_caller]
fn exec(engine: &mut Engine, session: &mut Session, input: &[u8]) -> (Vec<Reply>, Outcome) {
    let mut out = Vec::new();
    let outcome = engine.execute(session, input, &mut out, NOW);
    (parse_replies(&out), outcome)
}

#[track_caller]
fn one(engine: &mut Engine, req: Req<'_>) -> Reply {
    let mut session = Session::default();
    let (replies, outcome) = exec(engine, &mut session, &req.bytes());
    assert_eq!(outcome.consumed, req.bytes().len());
    assert_eq!(replies.len(), 1, "{replies:?}");
    replies.into_iter().next().unwrap()
}

#[track_caller]
fn none(engine: &mut Engine, req: Req<'_>) {
    let mut session = Session::default();
    let (replies, _) = exec(engine, &mut session, &req.bytes());
    assert!(replies.is_empty(), "{replies:?}");
}

fn set_extras(flags: u32, expiration: u32) -> [u8; 8] {
    StoreExtras { flags, expiration }.emit()
}

fn set<'a>(key: &'a [u8], value: &'a [u8], extras: &'a [u8; 8]) -> Req<'a> {
    Req {
        opcode: Opcode::Set,
        key,
        value,
        extras,
        ..REQ
    }
}

fn get(key: &[u8]) -> Req<'_> {
    Req {
        opcode: Opcode::Get,
        key,
        ..REQ
    }
}

#[test]
fn set_then_get_returns_value_flags_and_cas() {
    let mut e = engine();
    let extras = set_extras(0xdead_beef, 0);
    let stored = one(
        &mut e,
        Req {
            opaque: 7,
            ..set(b"k", b"hello", &extras)
        },
    );
    assert_eq!(stored.status, Status::NoError);
    assert_eq!(stored.opcode, 0x01);
    assert_eq!(stored.opaque, 7);
    assert_ne!(stored.cas, 0);
    let hit = one(
        &mut e,
        Req {
            opaque: 9,
            ..get(b"k")
        },
    );
    assert_eq!(hit.status, Status::NoError);
    assert_eq!(hit.opaque, 9);
    assert_eq!(hit.cas, stored.cas);
    assert_eq!(hit.extras, FlagsExtras { flags: 0xdead_beef }.emit());
    assert!(hit.key.is_empty());
    assert_eq!(hit.value, b"hello");
}

#[test]
fn get_miss_is_not_found_with_message_and_getk_miss_carries_key() {
    let mut e = engine();
    let miss = one(&mut e, get(b"nope"));
    assert_eq!(miss.status, Status::KeyNotFound);
    assert_eq!(miss.value, b"Not found");
    let missk = one(
        &mut e,
        Req {
            opcode: Opcode::GetK,
            ..get(b"nope")
        },
    );
    assert_eq!(missk.status, Status::KeyNotFound);
    assert_eq!(missk.key, b"nope");
    assert!(missk.value.is_empty());
}

#[test]
fn getk_hit_carries_key() {
    let mut e = engine();
    let extras = set_extras(1, 0);
    one(&mut e, set(b"key", b"v", &extras));
    let hit = one(
        &mut e,
        Req {
            opcode: Opcode::GetK,
            ..get(b"key")
        },
    );
    assert_eq!(hit.opcode, 0x0c);
    assert_eq!(hit.key, b"key");
    assert_eq!(hit.value, b"v");
}

#[test]
fn quiet_get_misses_are_silent_and_hits_answer() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    one(&mut e, set(b"a", b"1", &extras));
    none(
        &mut e,
        Req {
            quiet: true,
            ..get(b"missing")
        },
    );
    let hit = one(
        &mut e,
        Req {
            quiet: true,
            ..get(b"a")
        },
    );
    assert_eq!(hit.opcode, 0x09);
    let hitk = one(
        &mut e,
        Req {
            quiet: true,
            opcode: Opcode::GetK,
            ..get(b"a")
        },
    );
    assert_eq!(hitk.opcode, 0x0d);
    assert_eq!(hitk.key, b"a");
}

#[test]
fn add_replace_append_prepend_statuses() {
    let mut e = engine();
    let extras = set_extras(5, 0);
    let add = |key| Req {
        opcode: Opcode::Add,
        ..set(key, b"x", &extras)
    };
    assert_eq!(one(&mut e, add(b"k")).status, Status::NoError);
    let again = one(&mut e, add(b"k"));
    assert_eq!(again.status, Status::KeyExists);
    assert_eq!(again.value, b"Data exists for key.");
    let replace = one(
        &mut e,
        Req {
            opcode: Opcode::Replace,
            ..set(b"none", b"x", &extras)
        },
    );
    assert_eq!(replace.status, Status::KeyNotFound);
    let append = Req {
        opcode: Opcode::Append,
        key: b"k",
        value: b"yz",
        ..REQ
    };
    assert_eq!(one(&mut e, append).status, Status::NoError);
    let prepend = Req {
        opcode: Opcode::Prepend,
        key: b"k",
        value: b"w",
        ..REQ
    };
    assert_eq!(one(&mut e, prepend).status, Status::NoError);
    let hit = one(&mut e, get(b"k"));
    assert_eq!(hit.value, b"wxyz");
    assert_eq!(hit.extras, FlagsExtras { flags: 5 }.emit());
    let missing = one(
        &mut e,
        Req {
            key: b"none",
            ..append
        },
    );
    assert_eq!(missing.status, Status::ItemNotStored);
    assert_eq!(missing.value, b"Not stored.");
}

#[test]
fn cas_set_and_delete() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    let first = one(&mut e, set(b"k", b"1", &extras));
    let bad = one(
        &mut e,
        Req {
            cas: first.cas + 1000,
            ..set(b"k", b"2", &extras)
        },
    );
    assert_eq!(bad.status, Status::KeyExists);
    let good = one(
        &mut e,
        Req {
            cas: first.cas,
            ..set(b"k", b"2", &extras)
        },
    );
    assert_eq!(good.status, Status::NoError);
    assert_ne!(good.cas, first.cas);
    let missing = one(
        &mut e,
        Req {
            cas: 1,
            ..set(b"other", b"2", &extras)
        },
    );
    assert_eq!(missing.status, Status::KeyNotFound);
    let delete = Req {
        opcode: Opcode::Delete,
        key: b"k",
        ..REQ
    };
    assert_eq!(
        one(
            &mut e,
            Req {
                cas: first.cas,
                ..delete
            }
        )
        .status,
        Status::KeyExists
    );
    assert_eq!(one(&mut e, delete).status, Status::NoError);
    assert_eq!(one(&mut e, delete).status, Status::KeyNotFound);
}

// Regression: a binary ADD with a CAS on a live item was refused ("exists") even when the CAS
// matched; memcached makes any binary store with a non-zero CAS a compare-and-swap (an ADD
// too), so the matching one stores, another is "exists", and a missing key "not found".
#[test]
fn add_with_a_cas_is_a_compare_and_swap() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    let first = one(&mut e, set(b"k", b"1", &extras));
    let add = |key, cas| Req {
        opcode: Opcode::Add,
        cas,
        ..set(key, b"2", &extras)
    };
    assert_eq!(
        one(&mut e, add(b"k", first.cas + 1000)).status,
        Status::KeyExists
    );
    let stored = one(&mut e, add(b"k", first.cas));
    assert_eq!(stored.status, Status::NoError);
    assert_ne!(stored.cas, first.cas);
    assert_eq!(one(&mut e, get(b"k")).value, b"2");
    assert_eq!(one(&mut e, add(b"other", 1)).status, Status::KeyNotFound);
    // Without a CAS, ADD on a live key is "exists" as ever.
    assert_eq!(one(&mut e, add(b"k", 0)).status, Status::KeyExists);
}

#[test]
fn quiet_errors_are_answered() {
    let mut e = engine();
    let delete = Req {
        opcode: Opcode::Delete,
        quiet: true,
        key: b"missing",
        ..REQ
    };
    let reply = one(&mut e, delete);
    assert_eq!(reply.status, Status::KeyNotFound);
    assert_eq!(reply.opcode, 0x14);
}

fn counter<'a>(opcode: Opcode, key: &'a [u8], extras: &'a [u8; 20]) -> Req<'a> {
    Req {
        opcode,
        key,
        extras,
        ..REQ
    }
}

#[test]
fn incr_decr_create_wrap_floor_and_non_numeric() {
    let mut e = engine();
    let create = CounterExtras {
        delta: 5,
        initial: 10,
        expiration: 0,
    }
    .emit();
    let r = one(&mut e, counter(Opcode::Increment, b"n", &create));
    assert_eq!(r.status, Status::NoError);
    assert_eq!(
        r.value,
        10u64.to_be_bytes(),
        "a missing counter is created with initial"
    );
    let r = one(&mut e, counter(Opcode::Increment, b"n", &create));
    assert_eq!(r.value, 15u64.to_be_bytes());
    let down = CounterExtras {
        delta: 100,
        initial: 0,
        expiration: 0,
    }
    .emit();
    let r = one(&mut e, counter(Opcode::Decrement, b"n", &down));
    assert_eq!(r.value, 0u64.to_be_bytes(), "decr stops at 0");
    let no_create = CounterExtras {
        delta: 1,
        initial: 0,
        expiration: u32::MAX,
    }
    .emit();
    let r = one(&mut e, counter(Opcode::Increment, b"absent", &no_create));
    assert_eq!(r.status, Status::KeyNotFound);
    let max = u64::MAX.to_string();
    let extras = set_extras(0, 0);
    one(&mut e, set(b"big", max.as_bytes(), &extras));
    let two = CounterExtras {
        delta: 2,
        initial: 0,
        expiration: u32::MAX,
    }
    .emit();
    let r = one(&mut e, counter(Opcode::Increment, b"big", &two));
    assert_eq!(r.value, 1u64.to_be_bytes(), "incr wraps at 2^64");
    one(&mut e, set(b"text", b"abc", &extras));
    let r = one(&mut e, counter(Opcode::Increment, b"text", &two));
    assert_eq!(r.status, Status::NonNumeric);
    assert_eq!(r.value, b"Non-numeric server-side value for incr or decr");
    none(
        &mut e,
        Req {
            quiet: true,
            ..counter(Opcode::Increment, b"n", &create)
        },
    );
}

#[test]
fn touch_gat_and_gatk() {
    let mut e = engine();
    let extras = set_extras(3, 0);
    one(&mut e, set(b"k", b"v", &extras));
    let exp = ExpirationExtras { expiration: 100 }.emit();
    let touch = Req {
        opcode: Opcode::Touch,
        key: b"k",
        extras: &exp,
        ..REQ
    };
    let r = one(&mut e, touch);
    assert_eq!(r.status, Status::NoError);
    assert!(r.value.is_empty(), "TOUCH returns no value");
    let r = one(
        &mut e,
        Req {
            opcode: Opcode::Gat,
            ..touch
        },
    );
    assert_eq!(r.value, b"v");
    assert_eq!(r.extras, FlagsExtras { flags: 3 }.emit());
    let r = one(
        &mut e,
        Req {
            opcode: Opcode::GatK,
            ..touch
        },
    );
    assert_eq!(r.key, b"k");
    let r = one(&mut e, Req { key: b"x", ..touch });
    assert_eq!(r.status, Status::KeyNotFound);
    none(
        &mut e,
        Req {
            opcode: Opcode::Gat,
            quiet: true,
            key: b"x",
            ..touch
        },
    );
    // The new expiry holds: 101 s later the item is gone.
    let mut out = Vec::new();
    let mut session = Session::default();
    e.execute(&mut session, &get(b"k").bytes(), &mut out, NOW + 101);
    assert_eq!(parse_replies(&out)[0].status, Status::KeyNotFound);
}

#[test]
fn flush_noop_version_verbosity() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    one(&mut e, set(b"k", b"v", &extras));
    assert_eq!(
        one(
            &mut e,
            Req {
                opcode: Opcode::Flush,
                ..REQ
            }
        )
        .status,
        Status::NoError
    );
    assert_eq!(one(&mut e, get(b"k")).status, Status::KeyNotFound);
    none(
        &mut e,
        Req {
            opcode: Opcode::Flush,
            quiet: true,
            ..REQ
        },
    );
    assert_eq!(one(&mut e, REQ).status, Status::NoError);
    let version = one(
        &mut e,
        Req {
            opcode: Opcode::Version,
            ..REQ
        },
    );
    assert!(version.value.starts_with(b"1.6."));
    let level = VerbosityExtras { level: 1 }.emit();
    let r = one(
        &mut e,
        Req {
            opcode: Opcode::Verbosity,
            extras: &level,
            ..REQ
        },
    );
    assert_eq!(r.status, Status::NoError);
}

#[test]
fn delayed_flush_applies_later() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    one(&mut e, set(b"k", b"v", &extras));
    let delay = ExpirationExtras { expiration: 2 }.emit();
    one(
        &mut e,
        Req {
            opcode: Opcode::Flush,
            extras: &delay,
            ..REQ
        },
    );
    assert_eq!(one(&mut e, get(b"k")).status, Status::NoError);
    let mut out = Vec::new();
    e.execute(
        &mut Session::default(),
        &get(b"k").bytes(),
        &mut out,
        NOW + 3,
    );
    assert_eq!(parse_replies(&out)[0].status, Status::KeyNotFound);
}

#[test]
fn quit_answers_then_closes_and_quitq_closes_silently() {
    let mut e = engine();
    let mut session = Session::default();
    let mut input = Req {
        opcode: Opcode::Quit,
        ..REQ
    }
    .bytes();
    input.extend(REQ.bytes());
    let (replies, outcome) = exec(&mut e, &mut session, &input);
    assert_eq!(replies.len(), 1, "nothing after QUIT is executed");
    assert!(outcome.close);
    assert!(session.is_closing());
    let mut session = Session::default();
    let (replies, outcome) = exec(
        &mut e,
        &mut session,
        &Req {
            opcode: Opcode::Quit,
            quiet: true,
            ..REQ
        }
        .bytes(),
    );
    assert!(replies.is_empty());
    assert!(outcome.close);
}

#[test]
fn stats_lists_memcached_names_then_terminator() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    one(&mut e, set(b"k", b"v", &extras));
    one(&mut e, get(b"k"));
    one(&mut e, get(b"x"));
    let mut session = Session::default();
    let (replies, _) = exec(
        &mut e,
        &mut session,
        &Req {
            opcode: Opcode::Stat,
            ..REQ
        }
        .bytes(),
    );
    let last = replies.last().unwrap();
    assert!(last.key.is_empty() && last.value.is_empty());
    let stat = |name: &str| {
        replies
            .iter()
            .find(|r| r.key == name.as_bytes())
            .map(|r| String::from_utf8(r.value.clone()).unwrap())
            .unwrap_or_else(|| panic!("no stat {name}"))
    };
    for name in [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_items",
        "total_items",
        "bytes",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "get_expired",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "evictions",
        "limit_maxbytes",
        "threads",
    ] {
        stat(name);
    }
    assert_eq!(stat("cmd_get"), "2");
    assert_eq!(stat("get_hits"), "1");
    assert_eq!(stat("get_misses"), "1");
    assert_eq!(stat("curr_items"), "1");
    assert_eq!(stat("uptime"), "10");
    let (settings, _) = exec(
        &mut e,
        &mut session,
        &Req {
            opcode: Opcode::Stat,
            key: b"settings",
            ..REQ
        }
        .bytes(),
    );
    assert!(settings.iter().any(|r| r.key == b"item_size_max"));
    let (unknown, _) = exec(
        &mut e,
        &mut session,
        &Req {
            opcode: Opcode::Stat,
            key: b"bogus",
            ..REQ
        }
        .bytes(),
    );
    assert_eq!(unknown[0].status, Status::KeyNotFound);
}

// Regression: `stats detail on` (a conformance script's first request) was answered "not
// found". memcached's binary STAT groups: `reset`, `detail on|off` answer the terminator only,
// `detail dump` one `detailed` packet; `conns` is text only.
#[test]
fn binary_stat_groups_are_answered_as_memcached_answers_them() {
    let mut e = engine();
    let mut session = Session::default();
    let mut stat = |e: &mut Engine, key: &[u8]| {
        exec(
            e,
            &mut session,
            &Req {
                opcode: Opcode::Stat,
                key,
                ..REQ
            }
            .bytes(),
        )
        .0
    };
    let terminator_only = |replies: &[Reply]| {
        replies.len() == 1
            && replies[0].status == Status::NoError
            && replies[0].key.is_empty()
            && replies[0].value.is_empty()
    };
    assert!(terminator_only(&stat(&mut e, b"detail on")));
    assert!(e.control().detail());
    one(&mut e, set(b"p:k", b"v", &set_extras(0, 0)));
    one(&mut e, get(b"p:k"));
    let dump = stat(&mut e, b"detail dump");
    assert_eq!(dump.len(), 2);
    assert_eq!(dump[0].key, b"detailed");
    assert_eq!(
        dump[0].value, b"PREFIX p get 1 hit 1 set 1 del 0\r\nEND\r\n",
        "memcached 1.6.18's value, END included"
    );
    assert!(terminator_only(&dump[1..]));
    assert!(terminator_only(&stat(&mut e, b"detail off")));
    assert!(!e.control().detail());
    assert_eq!(stat(&mut e, b"detail bogus")[0].status, Status::KeyNotFound);
    assert!(terminator_only(&stat(&mut e, b"reset")));
    assert_eq!(e.counters().cmd_get, 0);
    one(&mut e, get(b"p:k"));
    let items = stat(&mut e, b"items");
    assert_eq!(items[0].key, b"items:1:number");
    assert!(items.iter().any(|r| r.key == b"items:1:evicted_time"));
    let slabs = stat(&mut e, b"slabs");
    assert!(slabs.iter().any(|r| r.key == b"1:chunk_size"));
    let sizes = stat(&mut e, b"sizes");
    assert_eq!(sizes.len(), 2);
    let latency = stat(&mut e, b"latency");
    assert!(latency.iter().any(|r| r.key == b"latency:get:count"));
    assert_eq!(stat(&mut e, b"conns")[0].status, Status::KeyNotFound);
    let enable = stat(&mut e, b"sizes_enable");
    assert_eq!(
        (enable.len(), &enable[0].key[..]),
        (1, &b"sizes_status"[..])
    );
}

#[test]
fn unknown_opcode_is_answered_skipped_and_connection_kept() {
    let mut e = engine();
    let mut frame = REQ.bytes();
    frame[1] = 0x55;
    frame[4] = 0; // extras_len
    frame[8..12].copy_from_slice(&5u32.to_be_bytes());
    frame.extend_from_slice(b"junk!");
    frame.extend(REQ.bytes());
    let mut session = Session::default();
    let (replies, outcome) = exec(&mut e, &mut session, &frame);
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0].status, Status::UnknownCommand);
    assert_eq!(replies[0].opcode, 0x55);
    assert_eq!(replies[0].value, b"Unknown command");
    assert_eq!(replies[1].opcode, 0x0a, "the NOOP after it is served");
    assert!(!outcome.close);
    assert_eq!(outcome.consumed, frame.len());
}

#[test]
fn malformed_frame_gets_einval_then_close() {
    let mut e = engine();
    // GET with extras is a shape error.
    let mut bytes = get(b"k").bytes();
    bytes[4] = 1;
    bytes[8..12].copy_from_slice(&2u32.to_be_bytes());
    let mut session = Session::default();
    let (replies, outcome) = exec(&mut e, &mut session, &bytes);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].status, Status::InvalidArguments);
    assert!(outcome.close);
    // Bad magic on a connection speaking binary: closed without a reply. (A connection whose
    // first byte is not 0x80 speaks the text protocol instead; see the text tests.)
    let mut session = Session::default();
    let mut bytes = REQ.bytes();
    let mut bad = REQ.bytes();
    bad[0] = 0x42;
    bytes.extend(bad);
    let (replies, outcome) = exec(&mut e, &mut session, &bytes);
    assert_eq!(replies.len(), 1, "only the NOOP before it is answered");
    assert!(outcome.close);
}

// A storage frame this large is refused and skipped (see
// `a_storage_frame_of_any_length_over_the_limit_is_refused_and_skipped`); any other frame
// announcing a body over twice `-I` closes the connection at once.
#[test]
fn huge_declared_body_closes_without_waiting_or_allocating() {
    let mut e = engine();
    let mut bytes = Req {
        opcode: Opcode::Increment,
        extras: &[0u8; 20],
        key: b"k",
        ..REQ
    }
    .bytes();
    bytes[8..12].copy_from_slice(&(2u32 << 30).to_be_bytes());
    let mut session = Session::default();
    let (replies, outcome) = exec(&mut e, &mut session, &bytes[..24]);
    assert!(outcome.close);
    assert_eq!(replies[0].status, Status::InvalidArguments);
}

#[test]
fn oversize_value_is_refused_skipped_and_connection_stays_usable() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    let big = vec![b'x'; (1 << 20) + 1];
    let mut input = set(b"big", &big, &extras).bytes();
    input.extend(get(b"big").bytes());
    let mut session = Session::default();
    let mut out = Vec::new();
    // Feed in 64 KiB pieces, as a receive buffer would, consuming as the engine says.
    let mut pending: Vec<u8> = Vec::new();
    for chunk in input.chunks(64 * 1024) {
        pending.extend_from_slice(chunk);
        let o = e.execute(&mut session, &pending, &mut out, NOW);
        pending.drain(..o.consumed);
        assert!(!o.close);
        assert!(
            pending.len() < 64 * 1024 + 24,
            "the value is skipped, not buffered"
        );
    }
    let replies = parse_replies(&out);
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0].status, Status::ValueTooLarge);
    assert_eq!(replies[0].value, b"Too large.");
    assert_eq!(replies[1].status, Status::KeyNotFound);
}

// Regression: a SET (or SETQ) refused for size left the old value in place; memcached's
// binary protocol unlinks it for SET only (process_bin_update), and ADD/REPLACE/APPEND/PREPEND
// keep it.
#[test]
fn a_set_refused_for_size_unlinks_the_old_item_other_stores_keep_it() {
    let extras = set_extras(0, 0);
    let big = vec![b'x'; (1 << 20) + 1];
    for (opcode, quiet, kept) in [
        (Opcode::Set, false, false),
        (Opcode::Set, true, false),
        (Opcode::Add, false, true),
        (Opcode::Replace, false, true),
        (Opcode::Append, false, true),
        (Opcode::Prepend, false, true),
    ] {
        let mut e = engine();
        assert_eq!(
            one(&mut e, set(b"k", b"old", &extras)).status,
            Status::NoError
        );
        let extras: &[u8] = if matches!(opcode, Opcode::Append | Opcode::Prepend) {
            &[]
        } else {
            &extras
        };
        let store_extras = set_extras(0, 0);
        let refused = Req {
            opcode,
            quiet,
            extras,
            ..set(b"k", &big, &store_extras)
        };
        assert_eq!(
            one(&mut e, refused).status,
            Status::ValueTooLarge,
            "{opcode:?}"
        );
        let got = one(&mut e, get(b"k"));
        if kept {
            assert_eq!(got.value, b"old", "{opcode:?}");
        } else {
            assert_eq!(got.status, Status::KeyNotFound, "{opcode:?} quiet {quiet}");
        }
        assert_eq!(e.snapshot().counters.store_too_large, 1);
    }
}

// Regression: a SET announcing more than twice `-I` was answered "invalid arguments" and its
// connection closed before the refusal, so the old value survived (pylibmc's binary client saw
// it after a 2 MiB set). memcached answers "too large" and swallows the value whatever its
// length; so does memspin now, as it arrives, never buffered.
#[test]
fn a_storage_frame_of_any_length_over_the_limit_is_refused_and_skipped() {
    let mut e = engine();
    assert_eq!(
        one(&mut e, set(b"k", b"old", &set_extras(0, 0))).status,
        Status::NoError
    );
    let mut frame = Req {
        opcode: Opcode::Set,
        extras: &set_extras(0, 0),
        key: b"k",
        ..REQ
    }
    .bytes();
    // Announce 4 GiB less a little; send 1 MiB of it, then the rest is taken as skipped.
    let body = u32::MAX - 64;
    frame[8..12].copy_from_slice(&body.to_be_bytes());
    let mut session = Session::default();
    let mut out = Vec::new();
    let o = e.execute(&mut session, &frame, &mut out, NOW);
    assert_eq!(o.consumed, frame.len());
    assert!(!o.close);
    let replies = parse_replies(&out);
    assert_eq!(replies[0].status, Status::ValueTooLarge);
    // Skipping continues for the announced length, without buffering.
    let chunk = vec![0u8; 1 << 20];
    let o = e.execute(&mut session, &chunk, &mut Vec::new(), NOW);
    assert_eq!((o.consumed, o.close), (chunk.len(), false));
    // The old value is gone (a SET).
    let mut fresh = Session::default();
    let (replies, _) = exec(&mut e, &mut fresh, &get(b"k").bytes());
    assert_eq!(replies[0].status, Status::KeyNotFound);
}

#[test]
fn value_just_under_the_limit_is_stored() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    let value: Vec<u8> = (0..(1 << 20) - 512).map(|i| (i % 251) as u8).collect();
    assert_eq!(
        one(&mut e, set(b"large", &value, &extras)).status,
        Status::NoError
    );
    assert_eq!(one(&mut e, get(b"large")).value, value);
}

/// A pipeline of mixed quiet and loud commands, as clients batch them.
fn mixed_pipeline() -> (Vec<u8>, Vec<(u8, Status)>) {
    let extras = set_extras(0, 0);
    let exp = ExpirationExtras { expiration: 0 }.emit();
    let reqs = [
        Req {
            quiet: true,
            ..set(b"a", b"1", &extras)
        },
        Req {
            quiet: true,
            ..set(b"b", b"2", &extras)
        },
        Req {
            quiet: true,
            ..get(b"a")
        },
        Req {
            quiet: true,
            ..get(b"zz")
        },
        Req {
            quiet: true,
            opcode: Opcode::GetK,
            ..get(b"b")
        },
        Req {
            opcode: Opcode::Delete,
            quiet: true,
            key: b"a",
            ..REQ
        },
        Req {
            opcode: Opcode::Gat,
            quiet: true,
            key: b"a",
            extras: &exp,
            ..REQ
        },
        REQ,
        get(b"a"),
        Req {
            quiet: true,
            opcode: Opcode::Add,
            ..set(b"b", b"3", &extras)
        },
        REQ,
    ];
    let bytes = reqs.iter().flat_map(|r| r.bytes()).collect();
    let expected = vec![
        (0x09, Status::NoError),
        (0x0d, Status::NoError),
        (0x0a, Status::NoError),
        (0x00, Status::KeyNotFound),
        (0x12, Status::KeyExists),
        (0x0a, Status::NoError),
    ];
    (bytes, expected)
}

#[test]
fn pipeline_of_quiet_and_loud_commands_replies_in_order() {
    let mut e = engine();
    let (bytes, expected) = mixed_pipeline();
    let mut session = Session::default();
    let (replies, outcome) = exec(&mut e, &mut session, &bytes);
    assert_eq!(outcome.consumed, bytes.len());
    let got: Vec<_> = replies.iter().map(|r| (r.opcode, r.status)).collect();
    assert_eq!(got, expected);
}

#[test]
fn fragment_sweeps_give_the_same_replies() {
    let (bytes, expected) = mixed_pipeline();
    for piece in PIECES {
        let out = feed_in_pieces(&bytes, piece);
        let got: Vec<_> = parse_replies(&out)
            .iter()
            .map(|r| (r.opcode, r.status))
            .collect();
        assert_eq!(got, expected, "piece {piece}");
    }
}

#[test]
fn every_truncation_consumes_nothing_and_asks_for_more() {
    let extras = set_extras(0, 0);
    let frame = set(b"key", b"value", &extras).bytes();
    for n in 0..frame.len() {
        let mut e = engine();
        let mut out = Vec::new();
        let o = e.execute(&mut Session::default(), &frame[..n], &mut out, NOW);
        assert_eq!(o.consumed, 0, "n = {n}");
        assert!(out.is_empty());
        assert!(!o.close);
        if n > 0 {
            assert!(o.needed > 0, "n = {n}");
        }
    }
}

#[test]
fn output_backlog_stops_execution_until_sent() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    let value = vec![7u8; 100 * 1024];
    one(&mut e, set(b"v", &value, &extras));
    let input: Vec<u8> = (0..10).flat_map(|_| get(b"v").bytes()).collect();
    let mut session = Session::default();
    let mut out = Vec::new();
    let o = e.execute(&mut session, &input, &mut out, NOW);
    assert!(o.consumed < input.len());
    assert!(out.len() < OUT_HIGH_WATER_BYTES + value.len() + 64);
    out.clear();
    let rest = e.execute(&mut session, &input[o.consumed..], &mut out, NOW);
    assert!(rest.consumed > 0);
}

#[test]
fn memory_budget_holds_through_the_engine() {
    let budget = 4 << 20;
    let mut e = engine_with(ShardConfig {
        memory_limit_bytes: budget,
        max_item_size: 1 << 20,
    });
    let extras = set_extras(0, 0);
    let value = [0x5a; 1024];
    let n = 2 * budget / 1024;
    for i in 0..n {
        let key = format!("key:{i}");
        assert_eq!(
            one(&mut e, set(key.as_bytes(), &value, &extras)).status,
            Status::NoError
        );
    }
    let stats = e.shard().stats();
    assert!(stats.bytes <= budget as u64);
    assert!(stats.evictions > 0);
    let newest = format!("key:{}", n - 1);
    assert_eq!(one(&mut e, get(newest.as_bytes())).value, value);
}

/// Runs `input` to the end through one session, the output sent away after every call, and
/// returns the replies, how many calls it took, and the most output held after a call.
fn run_to_end(e: &mut Engine, input: &[u8]) -> (Vec<u8>, usize, usize) {
    let mut session = Session::default();
    let (mut out, mut sent, mut calls, mut most) = (Vec::new(), Vec::new(), 0, 0);
    let mut pos = 0;
    while pos < input.len() {
        let outcome = e.execute(&mut session, &input[pos..], &mut out, NOW);
        assert!(outcome.consumed > 0 || !out.is_empty(), "progress");
        pos += outcome.consumed;
        calls += 1;
        most = most.max(out.len());
        sent.append(&mut out);
    }
    (sent, calls, most)
}

#[test]
fn getq_and_getkq_runs_stop_between_requests_and_resume() {
    let mut e = engine();
    let extras = set_extras(0, 0);
    let value = vec![7u8; 100 * 1024];
    one(&mut e, set(b"v", &value, &extras));
    let mut input = Vec::new();
    for i in 0..12u32 {
        let quiet = Req {
            opcode: if i % 2 == 0 {
                Opcode::Get
            } else {
                Opcode::GetK
            },
            quiet: true,
            opaque: i,
            key: if i % 3 == 0 { b"missing" } else { b"v" },
            ..REQ
        };
        input.extend(quiet.bytes());
    }
    input.extend(REQ.bytes());
    let (sent, calls, most) = run_to_end(&mut e, &input);
    assert!(
        calls >= 3,
        "the run stopped at the high water ({calls} calls)"
    );
    assert!(most < OUT_HIGH_WATER_BYTES + value.len() + 64);
    let replies = parse_replies(&sent);
    let opaques: Vec<u32> = replies.iter().map(|r| r.opaque).collect();
    // Hits answer, misses are silent, the NOOP ends the run: all in request order.
    assert_eq!(opaques, [1, 2, 4, 5, 7, 8, 10, 11, 0]);
    assert!(replies[..8].iter().all(|r| r.value == value));
}

// Regression: a RESP SET whose item can never fit (`-I`) was counted in `cmd_set` and not in
// `store_too_large`; memcached counts an oversize set in `store_too_large` only, as memspin's
// text and binary adapters do.
#[test]
fn an_oversize_resp_set_is_counted_where_memcached_counts_an_oversize_set() {
    let mut e = engine_with(ShardConfig {
        memory_limit_bytes: 64 << 20,
        max_item_size: 1024,
    });
    // 1020 bytes: a bulk string RESP takes (at most `-I`), an item over `-I` with its key.
    let value = "x".repeat(1020);
    let mut resp = Session::speaking(Protocol::Resp(protocol::resp::Version::Resp2));
    let mut out = Vec::new();
    let set = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1020\r\n{value}\r\n");
    let outcome = e.execute(&mut resp, set.as_bytes(), &mut out, NOW);
    assert_eq!(outcome.consumed, set.len());
    assert!(out.starts_with(b"-"), "{}", String::from_utf8_lossy(&out));
    // The same store over the text protocol, for comparison.
    let mut text = Session::default();
    out.clear();
    let line = format!("set k 0 0 1020\r\n{value}\r\n");
    e.execute(&mut text, line.as_bytes(), &mut out, NOW);
    assert_eq!(out, b"SERVER_ERROR object too large for cache\r\n");
    assert_eq!(e.counters().store_too_large, 2);
    assert_eq!(e.counters().cmd_set, 0);
    // An append past the limit is a store that did not happen: `cmd_set`, as memcached.
    out.clear();
    let small = format!(
        "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$990\r\n{}\r\n",
        &value[..990]
    );
    e.execute(&mut resp, small.as_bytes(), &mut out, NOW);
    let append = "*3\r\n$6\r\nAPPEND\r\n$1\r\nk\r\n$30\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n";
    out.clear();
    e.execute(&mut resp, append.as_bytes(), &mut out, NOW);
    assert!(out.starts_with(b"-"), "{}", String::from_utf8_lossy(&out));
    assert_eq!(e.counters().store_too_large, 2);
    assert_eq!(e.counters().cmd_set, 2);
}
