//! Property test: random pipelines of binary requests (quiet and loud, fed to the engine in
//! random fragments) get exactly the replies a simple model of memcached predicts.

use std::collections::HashMap;

use proptest::prelude::*;
use protocol::binary::{
    CounterExtras, ExpirationExtras, FlagsExtras, Opcode, RequestRepr, ResponseRepr, Status,
    StoreExtras,
};
use server::engine::{Engine, EngineConfig, Session};
use store::ShardConfig;

#[derive(Debug, Clone)]
enum Op {
    Get { key: u8, with_key: bool },
    Set { key: u8, value: Vec<u8>, flags: u32 },
    Add { key: u8, value: Vec<u8>, flags: u32 },
    Replace { key: u8, value: Vec<u8>, flags: u32 },
    Append { key: u8, value: Vec<u8> },
    Prepend { key: u8, value: Vec<u8> },
    Delete { key: u8 },
    Counter { key: u8, incr: bool, delta: u64 },
    Touch { key: u8 },
    Flush,
    Noop,
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        any::<u64>().prop_map(counter),
        (0u64..100).prop_map(counter),
    ]
}

/// `n` in decimal; one in 16 (by `n`, so the draw stays as it was) with a NUL and bytes
/// after it, which memcached's incr/decr does not look at.
fn counter(n: u64) -> Vec<u8> {
    let mut text = n.to_string().into_bytes();
    if n.is_multiple_of(16) {
        text.extend_from_slice(b"\0-x");
    }
    text
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    prop_oneof![
        (key.clone(), any::<bool>()).prop_map(|(key, with_key)| Op::Get { key, with_key }),
        (key.clone(), value(), any::<u32>()).prop_map(|(key, value, flags)| Op::Set {
            key,
            value,
            flags
        }),
        (key.clone(), value(), any::<u32>()).prop_map(|(key, value, flags)| Op::Add {
            key,
            value,
            flags
        }),
        (key.clone(), value(), any::<u32>()).prop_map(|(key, value, flags)| Op::Replace {
            key,
            value,
            flags
        }),
        (key.clone(), value()).prop_map(|(key, value)| Op::Append { key, value }),
        (key.clone(), value()).prop_map(|(key, value)| Op::Prepend { key, value }),
        key.clone().prop_map(|key| Op::Delete { key }),
        (
            key.clone(),
            any::<bool>(),
            prop_oneof![0u64..10, any::<u64>()]
        )
            .prop_map(|(key, incr, delta)| Op::Counter { key, incr, delta }),
        key.prop_map(|key| Op::Touch { key }),
        Just(Op::Flush),
        Just(Op::Noop),
    ]
}

/// What the model expects back: opcode byte, status, and for hits the value and flags.
type Expected = (u8, Status, Option<(Vec<u8>, u32)>);

#[derive(Default)]
struct Model {
    items: HashMap<Vec<u8>, (Vec<u8>, u32)>,
}

impl Model {
    /// Applies `op`; returns the reply it expects (None when a quiet command stays silent).
    fn apply(&mut self, op: &Op, quiet: bool) -> Option<Expected> {
        let k = |key: &u8| format!("key{key}").into_bytes();
        let (opcode, status, item) = match op {
            Op::Get { key, with_key } => {
                let opcode = if *with_key { Opcode::GetK } else { Opcode::Get };
                match self.items.get(&k(key)) {
                    Some((v, f)) => (opcode, Status::NoError, Some((v.clone(), *f))),
                    None if quiet => return None,
                    None => (opcode, Status::KeyNotFound, None),
                }
            }
            Op::Set { key, value, flags } => {
                self.items.insert(k(key), (value.clone(), *flags));
                (Opcode::Set, Status::NoError, None)
            }
            Op::Add { key, value, flags } => match self.items.entry(k(key)) {
                std::collections::hash_map::Entry::Occupied(_) => {
                    (Opcode::Add, Status::KeyExists, None)
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert((value.clone(), *flags));
                    (Opcode::Add, Status::NoError, None)
                }
            },
            Op::Replace { key, value, flags } => match self.items.get_mut(&k(key)) {
                Some(item) => {
                    *item = (value.clone(), *flags);
                    (Opcode::Replace, Status::NoError, None)
                }
                None => (Opcode::Replace, Status::KeyNotFound, None),
            },
            Op::Append { key, value } | Op::Prepend { key, value } => {
                let opcode = if matches!(op, Op::Append { .. }) {
                    Opcode::Append
                } else {
                    Opcode::Prepend
                };
                match self.items.get_mut(&k(key)) {
                    Some((v, _)) => {
                        if opcode == Opcode::Append {
                            v.extend_from_slice(value);
                        } else {
                            v.splice(0..0, value.iter().copied());
                        }
                        (opcode, Status::NoError, None)
                    }
                    None => (opcode, Status::ItemNotStored, None),
                }
            }
            Op::Delete { key } => match self.items.remove(&k(key)) {
                Some(_) => (Opcode::Delete, Status::NoError, None),
                None => (Opcode::Delete, Status::KeyNotFound, None),
            },
            Op::Counter { key, incr, delta } => {
                let opcode = if *incr {
                    Opcode::Increment
                } else {
                    Opcode::Decrement
                };
                match self.items.get_mut(&k(key)) {
                    None => (opcode, Status::KeyNotFound, None),
                    Some((v, _)) => match counter_value(v) {
                        None => (opcode, Status::NonNumeric, None),
                        Some(n) => {
                            let n = if *incr {
                                n.wrapping_add(*delta)
                            } else {
                                n.saturating_sub(*delta)
                            };
                            *v = n.to_string().into_bytes();
                            (opcode, Status::NoError, Some((n.to_be_bytes().to_vec(), 0)))
                        }
                    },
                }
            }
            Op::Touch { key } => match self.items.get(&k(key)) {
                Some(_) => (Opcode::Touch, Status::NoError, None),
                None => (Opcode::Touch, Status::KeyNotFound, None),
            },
            Op::Flush => {
                self.items.clear();
                (Opcode::Flush, Status::NoError, None)
            }
            Op::Noop => (Opcode::Noop, Status::NoError, None),
        };
        let silent = quiet && status == Status::NoError && !matches!(op, Op::Get { .. } | Op::Noop);
        (!silent).then(|| (opcode.to_wire(quiet), status, item))
    }
}

fn encode(op: &Op, quiet: bool, out: &mut Vec<u8>) {
    let key_bytes = |key: &u8| format!("key{key}").into_bytes();
    let (opcode, key, extras, value): (Opcode, Vec<u8>, Vec<u8>, Vec<u8>) = match op {
        Op::Get { key, with_key } => {
            let opcode = if *with_key { Opcode::GetK } else { Opcode::Get };
            (opcode, key_bytes(key), vec![], vec![])
        }
        Op::Set { key, value, flags }
        | Op::Add { key, value, flags }
        | Op::Replace { key, value, flags } => {
            let opcode = match op {
                Op::Set { .. } => Opcode::Set,
                Op::Add { .. } => Opcode::Add,
                _ => Opcode::Replace,
            };
            let extras = StoreExtras {
                flags: *flags,
                expiration: 0,
            }
            .emit()
            .to_vec();
            (opcode, key_bytes(key), extras, value.clone())
        }
        Op::Append { key, value } => (Opcode::Append, key_bytes(key), vec![], value.clone()),
        Op::Prepend { key, value } => (Opcode::Prepend, key_bytes(key), vec![], value.clone()),
        Op::Delete { key } => (Opcode::Delete, key_bytes(key), vec![], vec![]),
        Op::Counter { key, incr, delta } => {
            let opcode = if *incr {
                Opcode::Increment
            } else {
                Opcode::Decrement
            };
            let extras = CounterExtras {
                delta: *delta,
                initial: 0,
                expiration: u32::MAX,
            };
            (opcode, key_bytes(key), extras.emit().to_vec(), vec![])
        }
        Op::Touch { key } => {
            let extras = ExpirationExtras { expiration: 0 }.emit().to_vec();
            (Opcode::Touch, key_bytes(key), extras, vec![])
        }
        Op::Flush => (Opcode::Flush, vec![], vec![], vec![]),
        Op::Noop => (Opcode::Noop, vec![], vec![], vec![]),
    };
    RequestRepr {
        opcode,
        quiet,
        opaque: 0,
        cas: 0,
        vbucket: 0,
        extras: &extras,
        key: &key,
        value: &value,
    }
    .emit_into(out);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn engine_agrees_with_model(
        ops in proptest::collection::vec((op(), any::<bool>()), 1..60),
        chunk in 1usize..200,
    ) {
        let mut engine = Engine::new(EngineConfig {
            started_unix_secs: 1,
            conn_limit: 16,
            ..EngineConfig::new(ShardConfig { memory_limit_bytes: 64 << 20, max_item_size: 1 << 20 }, server::control::Control::new(Default::default(), 0))
        });
        let mut model = Model::default();
        let mut input = Vec::new();
        let mut expected = Vec::new();
        for (op, quiet) in &ops {
            let quiet = *quiet && !matches!(op, Op::Noop | Op::Touch { .. });
            encode(op, quiet, &mut input);
            expected.extend(model.apply(op, quiet));
        }
        let mut session = Session::default();
        let mut out = Vec::new();
        let mut pending = Vec::new();
        for piece in input.chunks(chunk) {
            pending.extend_from_slice(piece);
            let outcome = engine.execute(&mut session, &pending, &mut out, 1_000);
            pending.drain(..outcome.consumed);
            prop_assert!(!outcome.close);
        }
        prop_assert!(pending.is_empty());
        let mut got = Vec::new();
        let mut bytes = &out[..];
        while !bytes.is_empty() {
            let (r, len) = ResponseRepr::parse(bytes, u32::MAX).unwrap();
            let item = match (r.status, r.opcode) {
                (Status::NoError, Opcode::Get | Opcode::GetK) => {
                    let flags = FlagsExtras::parse(r.extras).unwrap().flags;
                    Some((r.value.to_vec(), flags))
                }
                (Status::NoError, Opcode::Increment | Opcode::Decrement) => Some((r.value.to_vec(), 0)),
                _ => None,
            };
            got.push((r.opcode.to_wire(r.quiet), r.status, item));
            bytes = &bytes[len..];
        }
        prop_assert_eq!(got, expected);
    }
}

/// A stored value as memcached's incr/decr reads it (`safe_strtoull`): white space, an
/// optional sign, digits that fit a `u64`, then the end, white space or a NUL (whatever
/// follows: it reads a C string); a `-` only when the number is not negative as a signed
/// 64-bit one (`-0`).
fn counter_value(value: &[u8]) -> Option<u64> {
    let value = value.split(|&b| b == 0).next().unwrap_or_default();
    let space = |b: u8| b" \t\n\r\x0b\x0c".contains(&b);
    let start = value.iter().position(|&b| !space(b))?;
    let mut rest = &value[start..];
    let negative = rest.first() == Some(&b'-');
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    let end = rest
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(rest.len());
    if end == 0 || rest.get(end).is_some_and(|&b| !space(b)) {
        return None;
    }
    let n: u64 = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    if negative {
        Some(n.wrapping_neg()).filter(|&m| m as i64 >= 0)
    } else {
        Some(n)
    }
}
