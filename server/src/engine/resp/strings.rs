//! The string commands that store or change a value: `SET` with its options, `GETEX`,
//! `INCR`/`DECR` and their kin, `APPEND`, `MSETNX`.

use super::*;

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]` (and `GETSET`, which is
/// `SET ... GET`): options are checked first (syntax), then the expiry's value.
pub(super) fn set(cx: &mut Cx<'_>, key: &[u8], value: &[u8], options: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    #[derive(PartialEq)]
    enum Cond {
        Any,
        Nx,
        Xx,
    }
    let mut cond = Cond::Any;
    let mut get = false;
    let mut keep_ttl = false;
    // The expiry's unit, base, value and option name.
    let mut expiry: Option<(Unit, Base, &[u8], &[u8])> = None;
    let mut i = 0;
    while i < options.len() {
        let option = options[i];
        let next = options.get(i + 1);
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        if is("nx") && cond != Cond::Xx {
            cond = Cond::Nx;
        } else if is("xx") && cond != Cond::Nx {
            cond = Cond::Xx;
        } else if is("get") {
            get = true;
        } else if is("keepttl") && expiry.is_none() {
            keep_ttl = true;
        } else if (is("ex") || is("px") || is("exat") || is("pxat"))
            // Redis takes the same expiry option again (the last one counts), not another.
            && expiry.is_none_or(|(_, _, _, name)| option.eq_ignore_ascii_case(name))
            && !keep_ttl
            && let Some(&next) = next
        {
            let (unit, base) = if is("ex") {
                (Unit::Seconds, Base::Relative)
            } else if is("px") {
                (Unit::Millis, Base::Relative)
            } else if is("exat") {
                (Unit::Seconds, Base::Absolute)
            } else {
                (Unit::Millis, Base::Absolute)
            };
            expiry = Some((unit, base, next, option));
            i += 1;
        } else {
            error(out, v, SYNTAX);
            return;
        }
        i += 1;
    }
    let ttl = match expiry {
        Some((unit, base, text, _)) => match deadline(text, unit, base, now) {
            Ok(at) => Ttl::AtMillis(at),
            Err(e) => return expire_error(out, v, e, "set"),
        },
        None if keep_ttl => Ttl::Keep,
        None => Ttl::Exptime(0),
    };
    // `GET`: the old value is the reply, whatever the condition says.
    let start = out.len();
    let mut found = None;
    if get {
        match cx.get(key, now) {
            Some(item) => {
                bulk(out, v, item.value);
                found = Some(true);
            }
            None => {
                null(out, v);
                found = Some(false);
            }
        }
    }
    let mode = match cond {
        Cond::Any => StoreMode::Set,
        Cond::Nx => StoreMode::Add,
        Cond::Xx => StoreMode::Replace,
    };
    match cx.store(
        Write {
            ttl,
            ..Write::new(mode, key, value)
        },
        now,
    ) {
        Ok(_) if found.is_none() => ok(out, v),
        Ok(_) => {}
        Err(StoreError::NotStored) => {
            if found.is_none() {
                null(out, v);
            }
        }
        Err(e) => {
            out.truncate(start);
            store_error(out, v, e);
        }
    }
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`.
pub(super) fn getex(cx: &mut Cx<'_>, key: &[u8], options: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let mut persist = false;
    // The expiry's unit, base, value and option name.
    let mut expiry: Option<(Unit, Base, &[u8], &[u8])> = None;
    let mut i = 0;
    while i < options.len() {
        let option = options[i];
        let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
        // As for `SET`, an option may come again (the last one counts), another may not.
        if is("persist") && expiry.is_none() {
            persist = true;
        } else if (is("ex") || is("px") || is("exat") || is("pxat"))
            && expiry.is_none_or(|(_, _, _, name)| option.eq_ignore_ascii_case(name))
            && !persist
            && let Some(&next) = options.get(i + 1)
        {
            let unit = if is("ex") || is("exat") {
                Unit::Seconds
            } else {
                Unit::Millis
            };
            let base = if is("ex") || is("px") {
                Base::Relative
            } else {
                Base::Absolute
            };
            expiry = Some((unit, base, next, option));
            i += 1;
        } else {
            return error(out, v, SYNTAX);
        }
        i += 1;
    }
    let ttl = match expiry {
        Some((unit, base, text, _)) => match deadline(text, unit, base, now) {
            Ok(at) => Some(Ttl::AtMillis(at)),
            // Redis looks the key up before it reads the expiry: a missing key is nil.
            Err(_) if cx.peek(key, now).is_none() => return null(out, v),
            Err(e) => return expire_error(out, v, e, "getex"),
        },
        None if persist => Some(Ttl::Exptime(0)),
        None => None,
    };
    let item = match ttl {
        // A past time returns the value this once, and the key is gone.
        Some(ttl) => cx.touch(key, ttl, now),
        None => cx.get(key, now),
    };
    match item {
        Some(item) => bulk(out, v, item.value),
        None => null(out, v),
    }
}

/// `INCR`, `DECR`, `INCRBY`, `DECRBY`: the value (0 when missing) read as Redis reads an
/// integer, plus `delta`; the key keeps its flags and expiry.
pub(super) fn arith(cx: &mut Cx<'_>, key: &[u8], delta: Result<i64, &str>, out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let delta = match delta {
        Ok(delta) => delta,
        Err(message) => return error(out, v, message),
    };
    let (current, flags) = match cx.peek(key, now) {
        None => (0, 0),
        Some(item) => match parse_integer(item.value) {
            Some(n) => (n, item.flags),
            None => return error(out, v, NOT_INTEGER),
        },
    };
    let Some(next) = current.checked_add(delta) else {
        return error(out, v, OVERFLOW);
    };
    let mut digits = Vec::with_capacity(20);
    protocol::text::push_i64(&mut digits, next);
    let write = Write {
        flags,
        ttl: Ttl::Keep,
        ..Write::new(StoreMode::Set, key, &digits)
    };
    match cx.store(write, now) {
        Ok(_) => integer(out, v, next),
        Err(e) => store_error(out, v, e),
    }
}

/// `APPEND key value`: appends, or stores the value when the key is missing; replies the new
/// length.
pub(super) fn append(cx: &mut Cx<'_>, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let mut result = cx.store(Write::new(StoreMode::Append, key, value), now);
    if result == Err(StoreError::NotStored) {
        result = cx.vivify(Write::new(StoreMode::Set, key, value), now);
    }
    match result {
        Ok(_) => {
            let len = cx
                .peek(key, now)
                .map_or(value.len(), |item| item.value.len());
            integer(out, v, len as i64);
        }
        Err(e) => store_error(out, v, e),
    }
}

/// `MSETNX key value ...`: all stored, or none when any key is held. Atomic only on one
/// worker: keys of one other worker go there whole, keys of several are refused (`CROSSSLOT`).
pub(super) fn msetnx(
    cx: &mut Cx<'_>,
    command: &Command<'_>,
    raw: &[u8],
    out: &mut Vec<u8>,
) -> Step {
    let v = version(cx);
    let now = cx.now;
    let len = raw.len();
    if command.argc() % 2 == 0 {
        error(out, v, "ERR wrong number of arguments for 'msetnx' command");
        return Step::Done(len);
    }
    let pairs: Vec<&[u8]> = command.args().skip(1).collect();
    let owners: Vec<Option<usize>> = pairs
        .chunks(2)
        .map(|pair| cx.owner_elsewhere(pair[0]))
        .collect();
    match owners.first().copied().flatten() {
        _ if owners.windows(2).any(|w| w[0] != w[1]) => {
            error(out, v, CROSSSLOT);
            return Step::Done(len);
        }
        Some(owner) => {
            return match cx.forward(owner, WHOLE, raw, out) {
                Ok(()) => Step::Done(len),
                Err(stop) => Step::Stop(stop),
            };
        }
        None => {}
    }
    if pairs.chunks(2).any(|pair| cx.peek(pair[0], now).is_some()) {
        integer(out, v, 0);
        return Step::Done(len);
    }
    for pair in pairs.chunks(2) {
        if let Err(e) = cx.store(Write::new(StoreMode::Set, pair[0], pair[1]), now) {
            store_error(out, v, e);
            return Step::Done(len);
        }
    }
    integer(out, v, 1);
    Step::Done(len)
}
