//! Property tests: random operation sequences against a plain `HashMap` model.
//!
//! With a budget large enough that nothing is evicted, the shard must agree with the
//! model on every result, CAS values (counted or client-chosen) and last-access times
//! included. With a small budget, the shard may forget items, but anything
//! it returns must be exactly what the model holds (a cache may lose data, never invent
//! or resurrect it).

use std::collections::HashMap;

use proptest::prelude::*;

use crate::*;

const START: u64 = 1_700_000_000;
const MAX_ITEM: usize = 256;

/// An expiry as the test writes it; `AbsOffset` becomes `now + offset` when run.
#[derive(Debug, Clone, Copy)]
enum Exp {
    Raw(i64),
    AbsOffset(i64),
}

impl Exp {
    fn at(self, now: u64) -> i64 {
        match self {
            Exp::Raw(e) => e,
            Exp::AbsOffset(d) => now as i64 + d,
        }
    }
}

/// Which CAS a conditional operation sends.
#[derive(Debug, Clone, Copy)]
enum Cas {
    None,
    Current,
    Wrong,
}

#[derive(Debug, Clone)]
enum Op {
    Store {
        mode: StoreMode,
        key: usize,
        value: Vec<u8>,
        flags: u32,
        exp: Exp,
        cas: Cas,
        new_cas: NewCas,
    },
    Get(usize),
    Peek(usize),
    MarkFetched(usize),
    Touch(usize, Exp),
    TouchUnbumped(usize, Exp),
    Delete(usize, Cas),
    IncrDecr {
        key: usize,
        delta: u64,
        direction: Delta,
        create: Option<(u64, Exp)>,
        cas: Cas,
        new_cas: NewCas,
    },
    Invalidate {
        key: usize,
        cas: Cas,
        exp: Option<Exp>,
        new_cas: NewCas,
    },
    FlushAll(Exp),
    Sweep(usize),
    Advance(u64),
}

fn keys() -> Vec<Vec<u8>> {
    vec![
        b"a".to_vec(),
        b"b".to_vec(),
        b"c".to_vec(),
        b"counter".to_vec(),
        Vec::new(),
        vec![b'x'; MAX_KEY_LEN + 1],
    ]
}

fn key_index() -> impl Strategy<Value = usize> {
    prop_oneof![8 => 0usize..4, 1 => 4usize..6]
}

fn exp() -> impl Strategy<Value = Exp> {
    prop_oneof![
        4 => Just(Exp::Raw(0)),
        4 => (1i64..6).prop_map(Exp::Raw),
        1 => Just(Exp::Raw(REALTIME_MAXDELTA)),
        1 => Just(Exp::Raw(REALTIME_MAXDELTA + 1)),
        1 => (-3i64..0).prop_map(Exp::Raw),
        2 => (-3i64..8).prop_map(Exp::AbsOffset),
    ]
}

fn cas() -> impl Strategy<Value = Cas> {
    prop_oneof![6 => Just(Cas::None), 2 => Just(Cas::Current), 1 => Just(Cas::Wrong)]
}

/// Mostly the counter; sometimes a client's choice, low, high or 0.
fn new_cas() -> impl Strategy<Value = NewCas> {
    prop_oneof![
        6 => Just(NewCas::Next),
        1 => Just(NewCas::Given(0)),
        2 => (1u64..4).prop_map(NewCas::Given),
        1 => Just(NewCas::Given(u64::MAX)),
        1 => any::<u64>().prop_map(NewCas::Given),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..24),
        3 => any::<u64>().prop_map(counter),
        1 => (0u64..3).prop_map(|n| format!("{:020}", n).into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 200..300),
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

fn mode() -> impl Strategy<Value = StoreMode> {
    prop_oneof![
        4 => Just(StoreMode::Set),
        2 => Just(StoreMode::Add),
        2 => Just(StoreMode::Replace),
        2 => Just(StoreMode::Append),
        2 => Just(StoreMode::Prepend),
    ]
}

fn delta() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(1), any::<u64>(), Just(u64::MAX)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (mode(), key_index(), value(), any::<u32>(), exp(), cas(), new_cas()).prop_map(
            |(mode, key, value, flags, exp, cas, new_cas)| Op::Store {
                mode,
                key,
                value,
                flags,
                exp,
                cas,
                new_cas
            }
        ),
        5 => key_index().prop_map(Op::Get),
        1 => key_index().prop_map(Op::Peek),
        1 => key_index().prop_map(Op::MarkFetched),
        2 => (key_index(), exp()).prop_map(|(k, e)| Op::Touch(k, e)),
        1 => (key_index(), exp()).prop_map(|(k, e)| Op::TouchUnbumped(k, e)),
        2 => (key_index(), cas()).prop_map(|(k, c)| Op::Delete(k, c)),
        3 => (
            key_index(),
            delta(),
            prop_oneof![Just(Delta::Incr), Just(Delta::Decr)],
            proptest::option::of((any::<u64>(), exp())),
            cas(),
            new_cas()
        )
            .prop_map(|(key, delta, direction, create, cas, new_cas)| Op::IncrDecr {
                key,
                delta,
                direction,
                create,
                cas,
                new_cas
            }),
        1 => (key_index(), cas(), proptest::option::of(exp()), new_cas()).prop_map(
            |(key, cas, exp, new_cas)| Op::Invalidate { key, cas, exp, new_cas }
        ),
        1 => exp().prop_map(Op::FlushAll),
        1 => prop_oneof![Just(3usize), Just(usize::MAX)].prop_map(Op::Sweep),
        4 => prop_oneof![6 => 0u64..3, 1 => Just(REALTIME_MAXDELTA as u64)].prop_map(Op::Advance),
    ]
}

#[derive(Debug, Clone)]
struct MItem {
    value: Vec<u8>,
    flags: u32,
    /// Visible while `now < t`; `None` = never expires.
    dead_at: Option<u64>,
    cas: u64,
    /// The second of the last store, fetch or touch.
    last_access: u64,
}

/// The reference: a map of live items with memcached's rules written out plainly.
#[derive(Default)]
struct Model {
    items: HashMap<Vec<u8>, MItem>,
    pending_flush: Option<u64>,
    last_cas: u64,
}

/// `None` = already expired; `Some(None)` = never; `Some(Some(t))` = visible while now < t.
fn resolve(exptime: i64, now: u64) -> Option<Option<u64>> {
    match exptime {
        0 => Some(None),
        e if e < 0 => None,
        e if e <= REALTIME_MAXDELTA => Some(Some(now + e as u64)),
        e if e as u64 <= now => None,
        e => Some(Some(e as u64)),
    }
}

fn key_ok(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}

/// memcached's `safe_strtoull` over an item's data: white space, a sign, digits, then white
/// space, a NUL (the end of the C string it reads) or the end.
fn decimal(value: &[u8]) -> Option<u64> {
    let value = value.split(|&b| b == 0).next().unwrap_or_default();
    let text = String::from_utf8_lossy(value);
    let text = text.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let tail = &text[end..];
    if end == 0 || !(tail.is_empty() || tail.starts_with([' ', '\t', '\n', '\r', '\x0b', '\x0c'])) {
        return None;
    }
    let n: u64 = text[..end].parse().ok()?;
    match negative {
        false => Some(n),
        true => Some(n.wrapping_neg()).filter(|&m| (m as i64) >= 0),
    }
}

impl Model {
    fn begin(&mut self, now: u64) {
        if let Some(at) = self.pending_flush
            && now >= at
        {
            self.items.clear();
            self.pending_flush = None;
        }
    }

    fn live(&mut self, key: &[u8], now: u64) -> Option<&mut MItem> {
        let dead = self
            .items
            .get(key)
            .is_some_and(|it| it.dead_at.is_some_and(|t| now >= t));
        if dead {
            self.items.remove(key);
        }
        self.items.get_mut(key)
    }

    fn cas_value(&mut self, cas: Cas, key: &[u8], now: u64) -> u64 {
        let current = self.live(key, now).map(|it| it.cas);
        match cas {
            Cas::None => 0,
            Cas::Current => current.unwrap_or(7),
            Cas::Wrong => current.map_or(9, |c| if c == 9 { 10 } else { 9 }),
        }
    }

    /// Checks a CAS the shard handed out: the counter's next one, or exactly the given one
    /// (which leaves the counter alone).
    #[track_caller]
    fn take_cas(&mut self, cas: u64, new_cas: NewCas) -> u64 {
        match new_cas {
            NewCas::Next => {
                assert_eq!(cas, self.last_cas + 1, "the counter's next CAS");
                self.last_cas = cas;
            }
            NewCas::Given(given) => assert_eq!(cas, given, "the given CAS"),
        }
        cas
    }

    /// The model's store; `write.new_cas` is checked by the caller ([`Model::take_cas`]).
    fn store(&mut self, write: Write<'_>, now: u64) -> Result<(), StoreError> {
        let Write {
            mode,
            key,
            value,
            flags,
            ttl,
            cas,
            ..
        } = write;
        let Ttl::Exptime(exptime) = ttl else {
            panic!("the model follows memcached's exptime only");
        };
        if !key_ok(key) {
            return Err(StoreError::KeyTooLong);
        }
        let extends = matches!(mode, StoreMode::Append | StoreMode::Prepend);
        if !extends && item_size(key.len(), value.len()) > MAX_ITEM {
            return Err(StoreError::TooLarge);
        }
        let Some(old) = self.live(key, now).cloned() else {
            if extends {
                return Err(StoreError::NotStored);
            }
            if cas != 0 {
                return Err(StoreError::NotFound);
            }
            if !matches!(mode, StoreMode::Set | StoreMode::Add) {
                return Err(StoreError::NotStored);
            }
            if let Some(dead_at) = resolve(exptime, now) {
                let item = MItem {
                    value: value.to_vec(),
                    flags,
                    dead_at,
                    cas: 0,
                    last_access: now,
                };
                self.items.insert(key.to_vec(), item);
            }
            return Ok(());
        };
        if mode == StoreMode::Add {
            return Err(StoreError::NotStored);
        }
        if cas != 0 && cas != old.cas {
            return Err(StoreError::Exists);
        }
        let new = if extends {
            if item_size(key.len(), old.value.len() + value.len()) > MAX_ITEM {
                return Err(StoreError::TooLarge);
            }
            let value = if mode == StoreMode::Append {
                [&old.value[..], value].concat()
            } else {
                [value, &old.value[..]].concat()
            };
            Some(MItem {
                value,
                last_access: now,
                ..old
            })
        } else {
            resolve(exptime, now).map(|dead_at| MItem {
                value: value.to_vec(),
                flags,
                dead_at,
                cas: 0,
                last_access: now,
            })
        };
        match new {
            Some(item) => self.items.insert(key.to_vec(), item),
            None => self.items.remove(key),
        };
        Ok(())
    }

    fn set_cas(&mut self, key: &[u8], cas: u64) {
        if let Some(it) = self.items.get_mut(key) {
            it.cas = cas;
        }
    }
}

/// `(value, flags, cas, last access)`.
type Seen = (Vec<u8>, u32, u64, u64);

fn view(v: Option<ItemView<'_>>) -> Option<Seen> {
    v.map(|v| (v.value.to_vec(), v.flags, v.cas, u64::from(v.last_access)))
}

fn mview(m: Option<&mut MItem>) -> Option<Seen> {
    m.map(|m| (m.value.clone(), m.flags, m.cas, m.last_access))
}

fn run_exact(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut shard = Shard::new(ShardConfig {
        memory_limit_bytes: 64 << 20,
        max_item_size: MAX_ITEM,
    });
    let mut model = Model::default();
    let keys = keys();
    let mut now = START;
    let mut gets = 0;
    for op in ops {
        model.begin(now);
        match op {
            Op::Store {
                mode,
                key,
                value,
                flags,
                exp,
                cas,
                new_cas,
            } => {
                let key = &keys[*key];
                let cas = model.cas_value(*cas, key, now);
                let exptime = exp.at(now);
                let want = model.store(
                    Write {
                        flags: *flags,
                        ttl: Ttl::Exptime(exptime),
                        cas,
                        ..Write::new(*mode, key, value)
                    },
                    now,
                );
                let got = shard.store(
                    Write {
                        flags: *flags,
                        ttl: Ttl::Exptime(exptime),
                        cas,
                        new_cas: *new_cas,
                        ..Write::new(*mode, key, value)
                    },
                    now,
                );
                match (got, want) {
                    (Ok(c), Ok(())) => {
                        let c = model.take_cas(c, *new_cas);
                        model.set_cas(key, c);
                    }
                    (got, want) => prop_assert_eq!(got.map(|_| ()), want, "{:?}", op),
                }
            }
            Op::Get(key) => {
                let key = &keys[*key];
                gets += 1;
                let want = mview(model.live(key, now));
                if let Some(it) = model.live(key, now) {
                    it.last_access = now;
                }
                prop_assert_eq!(view(shard.get(key, now)), want, "{:?}", op);
            }
            Op::Peek(key) => {
                let key = &keys[*key];
                let want = mview(model.live(key, now));
                prop_assert_eq!(view(shard.peek(key, now)), want, "{:?}", op);
            }
            Op::MarkFetched(key) => {
                let key = &keys[*key];
                let want = match model.live(key, now) {
                    Some(it) => {
                        it.last_access = now;
                        true
                    }
                    None => false,
                };
                prop_assert_eq!(shard.mark_fetched(key, now), want, "{:?}", op);
            }
            Op::Touch(key, exp) => {
                let key = &keys[*key];
                let exptime = exp.at(now);
                let want = mview(model.live(key, now));
                if let Some(it) = model.live(key, now) {
                    it.dead_at = resolve(exptime, now).unwrap_or(Some(now));
                    it.last_access = now;
                }
                prop_assert_eq!(
                    view(shard.touch(key, Ttl::Exptime(exptime), now)),
                    want,
                    "{:?}",
                    op
                );
            }
            Op::TouchUnbumped(key, exp) => {
                let key = &keys[*key];
                let exptime = exp.at(now);
                let want = mview(model.live(key, now));
                if let Some(it) = model.live(key, now) {
                    it.dead_at = resolve(exptime, now).unwrap_or(Some(now));
                }
                prop_assert_eq!(
                    view(shard.touch_unbumped(key, Ttl::Exptime(exptime), now)),
                    want,
                    "{:?}",
                    op
                );
            }
            Op::Delete(key, cas) => {
                let key = &keys[*key];
                let cas = model.cas_value(*cas, key, now);
                let want = if !key_ok(key) {
                    Err(StoreError::KeyTooLong)
                } else {
                    match model.live(key, now) {
                        None => Err(StoreError::NotFound),
                        Some(it) if cas != 0 && it.cas != cas => Err(StoreError::Exists),
                        Some(_) => {
                            model.items.remove(&key[..]);
                            Ok(())
                        }
                    }
                };
                prop_assert_eq!(shard.delete(key, cas, now), want, "{:?}", op);
            }
            Op::IncrDecr {
                key,
                delta,
                direction,
                create,
                cas,
                new_cas,
            } => {
                let key = &keys[*key];
                let cas = model.cas_value(*cas, key, now);
                let create = create.map(|(initial, exp)| (initial, exp.at(now)));
                let got = shard.incr_decr(
                    Arith {
                        create,
                        cas,
                        new_cas: *new_cas,
                        ..Arith::new(key, *direction, *delta)
                    },
                    now,
                );
                let want: Result<u64, StoreError> = if !key_ok(key) {
                    Err(StoreError::KeyTooLong)
                } else {
                    match (model.live(key, now).cloned(), create) {
                        (None, None) => Err(StoreError::NotFound),
                        (None, Some((initial, exptime))) => {
                            if let Some(dead_at) = resolve(exptime, now) {
                                let item = MItem {
                                    value: initial.to_string().into_bytes(),
                                    flags: 0,
                                    dead_at,
                                    cas: 0,
                                    last_access: now,
                                };
                                model.items.insert(key.to_vec(), item);
                            }
                            Ok(initial)
                        }
                        // An empty value is non-numeric before the CAS is compared (memcached).
                        (Some(it), _) if it.value.is_empty() => Err(StoreError::NonNumeric),
                        (Some(it), _) if cas != 0 && it.cas != cas => Err(StoreError::Exists),
                        (Some(it), _) => match decimal(&it.value) {
                            None => Err(StoreError::NonNumeric),
                            Some(n) => {
                                let n = match direction {
                                    Delta::Incr => n.wrapping_add(*delta),
                                    Delta::Decr => n.saturating_sub(*delta),
                                };
                                let item = MItem {
                                    value: n.to_string().into_bytes(),
                                    last_access: now,
                                    ..it
                                };
                                model.items.insert(key.to_vec(), item);
                                Ok(n)
                            }
                        },
                    }
                };
                match (got, want) {
                    (Ok((n, c)), Ok(m)) => {
                        prop_assert_eq!(n, m, "{:?}", op);
                        let c = model.take_cas(c, *new_cas);
                        model.set_cas(key, c);
                    }
                    (got, want) => prop_assert_eq!(got.map(|(n, _)| n), want, "{:?}", op),
                }
            }
            Op::Invalidate {
                key,
                cas,
                exp,
                new_cas,
            } => {
                let key = &keys[*key];
                let cas = model.cas_value(*cas, key, now);
                let exptime = exp.map(|exp| exp.at(now));
                let got = shard.invalidate_with(key, cas, exptime, *new_cas, now);
                let want = if !key_ok(key) {
                    Err(StoreError::KeyTooLong)
                } else {
                    match model.live(key, now) {
                        None => Err(StoreError::NotFound),
                        Some(it) if cas != 0 && it.cas != cas => Err(StoreError::Exists),
                        Some(it) => {
                            if let Some(exptime) = exptime {
                                it.dead_at = resolve(exptime, now).unwrap_or(Some(now));
                            }
                            Ok(())
                        }
                    }
                };
                match (got, want) {
                    (Ok(c), Ok(())) => {
                        let c = model.take_cas(c, *new_cas);
                        model.set_cas(key, c);
                    }
                    (got, want) => prop_assert_eq!(got.map(|_| ()), want, "{:?}", op),
                }
            }
            Op::FlushAll(exp) => {
                let delay = exp.at(now);
                match resolve(delay, now) {
                    Some(Some(at)) if at > now => model.pending_flush = Some(at),
                    _ => {
                        model.items.clear();
                        model.pending_flush = None;
                    }
                }
                shard.flush_all(delay, now);
            }
            Op::Sweep(max) => {
                shard.sweep_expired(*max, now);
                if *max == usize::MAX {
                    // A full sweep leaves exactly the live items.
                    let live = model
                        .items
                        .values()
                        .filter(|it| it.dead_at.is_none_or(|t| now < t))
                        .count();
                    prop_assert_eq!(shard.len(), live);
                }
            }
            Op::Advance(secs) => now += secs,
        }
        shard.check_invariants();
        prop_assert_eq!(shard.stats().get_hits + shard.stats().get_misses, gets);
        prop_assert!(shard.stats().get_expired + shard.stats().get_flushed <= gets);
    }
    Ok(())
}

/// Small budget: evictions happen; whatever the shard returns must match the model.
fn run_evicting(ops: &[(u8, usize, usize)]) -> Result<(), TestCaseError> {
    let mut shard = Shard::new(ShardConfig {
        memory_limit_bytes: 8 * 1024,
        max_item_size: 4096,
    });
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut serial = 0u32;
    for &(kind, key, len) in ops {
        let key = format!("key{key}").into_bytes();
        serial += 1;
        let value: Vec<u8> = format!("{serial}:")
            .into_bytes()
            .into_iter()
            .chain(std::iter::repeat_n(b'v', len))
            .collect();
        match kind % 4 {
            0 => {
                shard
                    .store(Write::new(StoreMode::Set, &key, &value), START)
                    .map_err(|e| TestCaseError::fail(format!("set: {e}")))?;
                model.insert(key, value);
            }
            1 => match shard.get(&key, START) {
                Some(v) => prop_assert_eq!(Some(v.value), model.get(&key).map(|v| &v[..])),
                None => {
                    model.remove(&key);
                }
            },
            2 => match shard.store(Write::new(StoreMode::Append, &key, &value), START) {
                Ok(_) => {
                    let old = model.get_mut(&key);
                    prop_assert!(old.is_some(), "append to an item the model lacks");
                    if let Some(old) = old {
                        old.extend_from_slice(&value);
                    }
                }
                Err(StoreError::NotStored) | Err(StoreError::TooLarge) => {
                    if shard.get(&key, START).is_none() {
                        model.remove(&key);
                    }
                }
                Err(e) => return Err(TestCaseError::fail(format!("append: {e}"))),
            },
            _ => {
                let deleted = shard.delete(&key, 0, START).is_ok();
                let had = model.remove(&key).is_some();
                prop_assert!(!deleted || had, "deleted an item the model lacks");
            }
        }
        shard.check_invariants();
    }
    Ok(())
}

proptest! {
    // 256 cases by default; `PROPTEST_CASES=10000 cargo test -p store model` digs deeper.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn shard_agrees_with_model(ops in proptest::collection::vec(op(), 1..120)) {
        run_exact(&ops)?;
    }

    #[test]
    fn evicting_shard_never_returns_wrong_data(
        ops in proptest::collection::vec((any::<u8>(), 0usize..40, 0usize..1500), 1..300)
    ) {
        run_evicting(&ops)?;
    }
}
