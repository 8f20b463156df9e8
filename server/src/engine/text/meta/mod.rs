//! The text adapter's meta commands (`mg`, `ms`, `md`, `ma`, `mn`, `me`): executed through the core.
//!
//! Replies follow memcached 1.6's protocol.txt and proto_text.c: return flags come back in
//! request order, `q` silences nominal replies only (`HD`, and `EN` for `mg`), errors are always
//! answered. What memspin does with each flag, where it is not simply "as documented":
//!
//! - `l` (seconds since last access) and `me`'s `la`: the seconds since the item was last
//!   stored, fetched or touched (`mg`, `get`, `touch`, `gat`, `ma`, any store), as of before
//!   this request; `u` and `me` leave it alone. memcached updates its access time lazily (not
//!   on an item's first fetch, then at most once a minute while the item stays active), so it
//!   can report more seconds than memspin for an item read in between.
//! - `u` (no LRU bump): the item is looked at without being marked fetched or aged by the clock
//!   hand; `cmd_get` counts it but the store's `get_hits`/`get_misses` do not. With `T` the
//!   TTL changes all the same (a touch, counted in `cmd_touch` and `touch_hits`), and the item
//!   stays unmarked and its access time as it was.
//! - `N` on a miss: the reply shows the new item as created (`h0`, `l0`, the `N` TTL, `W`),
//!   then the item is marked fetched, as memcached bumps it once the reply is written (not
//!   with `u`): the next `mg ... h` says `h1 Z`, `me` says `fetch=yes`. The `mg` counts one
//!   `cmd_get` and, in the store, one miss (memcached counts it as a hit).
//! - `E<token>` (later 1.6 releases; 1.6.18 refuses it): the token becomes the CAS of the item
//!   the command creates or changes (`ms`; `md` with `I`; `ma`; `mg` only when `N` creates
//!   the item), and the CAS counter is not advanced. As in memcached, `ms ... E0` takes a CAS
//!   from the counter, the others set CAS 0. Any value is safe: the store flushes by
//!   generation, not by CAS order.
//! - `x` (`md` keeps the item, empty): refused as memcached 1.6.18 refuses flags it does not
//!   know.
//! - `ma` with `T` updates the TTL through the store's touch, which counts a touch hit.
//! - `ms` with `I` and an older (non-zero) `C`: the value is stored, keeps the old item's TTL
//!   and recache token (`Z` if one was handed out) and is marked stale, with one new CAS (the
//!   `E` token, if any).
//! - `me` answers `exp` as the seconds left (memcached 1.6.18 printed their negative), `cls=1`
//!   (memspin has no slab classes) and `size` as the bytes the store charges for the item.
//! - `k` with `b` returns the key in base64 followed by `b` whenever the request key was
//!   base64; memcached remembers per item whether its key was binary.

use protocol::meta::{
    ArithmeticMode, Command, DebugLine, Flags, ReplyLine, Request, SetMode, Status,
};
use protocol::text::{DataError, ErrorReply, MAX_KEY_LEN, data_block};
use store::{Arith, Delta, Expiry, ItemView, NewCas, Now, StoreError, StoreMode, Ttl, Write};

use super::part;
use crate::engine::session::{Cx, Step};

/// memspin's one item class, for `me`'s `cls`.
const ITEM_CLASS: u32 = 1;

pub(super) fn execute(
    cx: &mut Cx<'_>,
    request: Request<'_>,
    buf: &[u8],
    line_len: usize,
    out: &mut Vec<u8>,
) -> Step {
    let now = cx.now;
    let flags = &request.flags;
    if flags.remove_value {
        cx.protocol_error();
        let reply = match request.command {
            Command::Delete | Command::Arithmetic => ErrorReply::InvalidOrDuplicateFlag,
            _ => ErrorReply::InvalidFlag,
        };
        reply.emit_into(out);
        if request.command == Command::Set {
            cx.session.skip(request.datalen as u64 + 2);
        }
        return Step::Done(line_len);
    }
    let mut scratch = [0u8; MAX_KEY_LEN];
    let key = request.decode_key(&mut scratch);
    if request.command != Command::Noop
        && let Some(owner) = cx.owner_elsewhere(key)
    {
        // The whole request goes to the key's owner; a set once its data block is here (a
        // value that can never fit, or a bad data chunk, is refused here as below).
        // A set whose value can never fit goes as its line alone (the owner refuses it and
        // unlinks the old item) and its data block is skipped here.
        let too_large = request.command == Command::Set && !cx.fits(key.len(), request.datalen);
        let len = match request.command {
            Command::Set if too_large => Some(line_len),
            Command::Set => match data_block(&buf[line_len..], request.datalen) {
                Ok(_) => Some(line_len + request.datalen + 2),
                Err(DataError::Incomplete { needed }) => return Step::Wait(needed),
                Err(DataError::BadChunk) => None,
            },
            _ => Some(line_len),
        };
        if let Some(len) = len {
            return match cx.forward(owner, part::WHOLE, &buf[..len], out) {
                Ok(()) => {
                    if too_large {
                        cx.session.skip(request.datalen as u64 + 2);
                    }
                    Step::Done(len)
                }
                Err(stop) => Step::Stop(stop),
            };
        }
    }
    let step = match request.command {
        Command::Noop => {
            ReplyLine::start(out, Status::Mn).finish();
            Step::Done(line_len)
        }
        Command::Debug => {
            debug(cx, key, flags, out, now);
            Step::Done(line_len)
        }
        Command::Get => {
            get(cx, key, flags, out, now);
            Step::Done(line_len)
        }
        Command::Set => set(cx, key, &request, buf, line_len, out, now),
        Command::Delete => {
            delete(cx, key, flags, out, now);
            Step::Done(line_len)
        }
        Command::Arithmetic => {
            arithmetic(cx, key, flags, out, now);
            Step::Done(line_len)
        }
    };
    // Counted once, where it runs (an `ms` waiting for its data block comes back here; a
    // forwarded request is counted by its owner).
    if let Step::Done(_) = step {
        cx.count_meta();
    }
    step
}

/// Seconds an item has left: -1 for none, as `t` and `me` report it.
fn ttl(exptime: u32, now: Now) -> i64 {
    if exptime == 0 {
        -1
    } else {
        i64::from(exptime) - i64::try_from(now.secs()).unwrap_or(i64::MAX)
    }
}

/// The CAS an item created or changed by this request gets: the `E` token, else the counter's.
fn new_cas(flags: &Flags<'_>) -> NewCas {
    flags.new_cas.map_or(NewCas::Next, NewCas::Given)
}

/// The opaque and key flags, which every reply carries, hit or not.
fn echo(line: &mut ReplyLine<'_>, flags: &Flags<'_>, key: &[u8]) {
    for token in flags.tokens() {
        match token[0] {
            b'O' => {
                line.token(token);
            }
            b'k' => {
                line.key(key, flags.base64_key);
            }
            _ => {}
        }
    }
}

/// `mg`: the item's value and metadata; `T` touches, `N` creates on a miss, `R`/`N`/stale
/// items hand out the recache token (`W`), which later readers see as taken (`Z`).
fn get(cx: &mut Cx<'_>, key: &[u8], flags: &Flags<'_>, out: &mut Vec<u8>, now: Now) {
    let found = if let Some(ttl) = flags.ttl {
        if flags.no_bump {
            cx.touch_unbumped(key, Ttl::Exptime(ttl), now)
        } else {
            cx.touch(key, Ttl::Exptime(ttl), now)
        }
    } else if flags.no_bump {
        cx.get_unbumped(key, now)
    } else {
        cx.get(key, now)
    };
    let mut created = false;
    let won = match found {
        Some(item) => write_hit(out, key, flags, &item, false, now),
        None => {
            // `N`: create an empty item with that TTL and win its recache token.
            created = flags.vivify_ttl.is_some_and(|ttl| {
                cx.vivify(
                    Write {
                        ttl: Ttl::Exptime(ttl),
                        new_cas: new_cas(flags),
                        ..Write::new(StoreMode::Add, key, b"")
                    },
                    now,
                )
                .is_ok()
            });
            match created.then(|| cx.peek(key, now)).flatten() {
                Some(item) => write_hit(out, key, flags, &item, true, now),
                None => {
                    if !flags.quiet {
                        let mut line = ReplyLine::start(out, Status::En);
                        echo(&mut line, flags, key);
                        line.finish();
                    }
                    false
                }
            }
        }
    };
    if won {
        cx.claim_win(key, now);
    }
    // memcached bumps the item it created once the reply is written (which said `h0`): the
    // next reader sees it fetched (`h1`, `me`'s `fetch=yes`). Not with `u`.
    if created && !flags.no_bump {
        cx.mark_fetched(key, now);
    }
}

/// Writes an `mg` hit (`VA`/`HD`, its flags, its value); returns whether the client won the
/// recache token.
fn write_hit(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: &Flags<'_>,
    item: &ItemView<'_>,
    created: bool,
    now: Now,
) -> bool {
    // `C` with `v`: the value only if it changed.
    let send_value = flags.return_value && flags.compare_cas != Some(item.cas);
    let mut won = created;
    if let Some(recache) = flags.recache_ttl
        && !item.win_sent
        && !created
        && item.exptime != 0
        && let Expiry::At(at) = Expiry::resolve(recache, now)
        && item.expiry_ms < at
    {
        won = true;
    }
    let status = if send_value {
        Status::Va(item.value.len())
    } else {
        Status::Hd
    };
    let mut line = ReplyLine::start(out, status);
    for token in flags.tokens() {
        match token[0] {
            b's' => {
                line.number(b's', item.value.len() as u64);
            }
            b't' => {
                line.signed(b't', ttl(item.exptime, now));
            }
            b'c' => {
                line.number(b'c', item.cas);
            }
            b'f' => {
                line.number(b'f', u64::from(item.flags));
            }
            b'h' => {
                line.number(b'h', u64::from(item.fetched));
            }
            b'l' => {
                line.number(b'l', item.idle_secs(now));
            }
            b'O' => {
                line.token(token);
            }
            b'k' => {
                line.key(key, flags.base64_key);
            }
            _ => {}
        }
    }
    if item.win_sent {
        line.flag(b'Z');
    }
    if item.stale {
        line.flag(b'X');
        won |= !item.win_sent;
    }
    if won {
        line.flag(b'W');
    }
    line.finish();
    if send_value {
        out.extend_from_slice(item.value);
        out.extend_from_slice(b"\r\n");
    }
    won
}

/// `ms`: like the text storage commands (a value that can never fit is refused and skipped
/// unread), with its mode, `C`/`I` compare rules and `N` for append/prepend on a miss.
#[allow(clippy::too_many_arguments)]
fn set(
    cx: &mut Cx<'_>,
    key: &[u8],
    request: &Request<'_>,
    buf: &[u8],
    line_len: usize,
    out: &mut Vec<u8>,
    now: Now,
) -> Step {
    let flags = &request.flags;
    let datalen = request.datalen;
    if !cx.fits(key.len(), datalen) {
        // memcached unlinks the old item whatever the mode.
        cx.refuse_too_large(key, true, now);
        ErrorReply::TooLarge.emit_into(out);
        cx.session.skip(datalen as u64 + 2);
        return Step::Done(line_len);
    }
    let data = match data_block(&buf[line_len..], datalen) {
        Ok(data) => data,
        Err(DataError::Incomplete { needed }) => return Step::Wait(needed),
        Err(DataError::BadChunk) => {
            cx.protocol_error();
            ErrorReply::BadDataChunk.emit_into(out);
            return Step::Done(line_len + datalen + 2);
        }
    };
    let consumed = line_len + datalen + 2;
    let mode = match flags.set_mode().unwrap_or(SetMode::Set) {
        SetMode::Set => StoreMode::Set,
        SetMode::Add => StoreMode::Add,
        SetMode::Replace => StoreMode::Replace,
        SetMode::Append => StoreMode::Append,
        SetMode::Prepend => StoreMode::Prepend,
    };
    let client_flags = flags.client_flags.unwrap_or(0);
    let mut ttl = Ttl::Exptime(flags.ttl.unwrap_or(0));
    let mut compare = match (mode, flags.compare_cas) {
        // memcached: add ignores a CAS; append/prepend compare a non-zero one.
        (StoreMode::Add, _) | (_, None) => 0,
        (StoreMode::Append | StoreMode::Prepend, Some(cas)) => cas,
        // Set/replace compare any CAS, 0 included (see `Core::cas_matching_nothing`).
        (_, Some(0)) => cx.cas_matching_nothing(key, now),
        (_, Some(cas)) => cas,
    };
    // memcached's text path reads `E0` on `ms` as "no E".
    let new_cas = match flags.new_cas {
        Some(0) => NewCas::Next,
        _ => new_cas(flags),
    };
    // `I` with an older CAS: store anyway, keeping the TTL (and a recache token already
    // handed out), and mark the result stale.
    let mut stale = None;
    if flags.invalidate
        && matches!(mode, StoreMode::Set | StoreMode::Replace)
        && let Some(cas) = flags.compare_cas
        && cas != 0
        && let Some(item) = cx.peek(key, now)
        && cas < item.cas
    {
        compare = item.cas;
        ttl = Ttl::Keep;
        stale = Some(item.win_sent);
    }
    let mut result = cx.store(
        Write {
            flags: client_flags,
            ttl,
            cas: compare,
            new_cas,
            ..Write::new(mode, key, data)
        },
        now,
    );
    if let (Err(StoreError::NotStored), Some(ttl)) = (result, flags.vivify_ttl)
        && matches!(mode, StoreMode::Append | StoreMode::Prepend)
    {
        result = cx.vivify(
            Write {
                flags: client_flags,
                ttl: Ttl::Exptime(ttl),
                new_cas,
                ..Write::new(StoreMode::Add, key, data)
            },
            now,
        );
    }
    // Marking it stale keeps the CAS the store just gave it.
    if let (Some(win_sent), Ok(cas)) = (stale, result) {
        result = cx.invalidate(key, cas, None, NewCas::Given(cas), now);
        if win_sent {
            cx.claim_win(key, now);
        }
    }
    let status = match result {
        Ok(_) => Status::Hd,
        Err(StoreError::NotStored | StoreError::TooLarge) => Status::Ns,
        Err(StoreError::Exists) => Status::Ex,
        Err(StoreError::NotFound) => Status::Nf,
        Err(StoreError::OutOfMemory) => {
            cx.unlink(key, now);
            ErrorReply::OutOfMemory.emit_into(out);
            return Step::Done(consumed);
        }
        Err(StoreError::KeyTooLong | StoreError::NonNumeric) => {
            ErrorReply::BadFormat.emit_into(out);
            return Step::Done(consumed);
        }
    };
    if status == Status::Hd && flags.quiet {
        return Step::Done(consumed);
    }
    let size = match (result, mode) {
        (Ok(_), StoreMode::Append | StoreMode::Prepend) => {
            cx.peek(key, now).map_or(datalen, |item| item.value.len())
        }
        _ => datalen,
    };
    let mut line = ReplyLine::start(out, status);
    for token in flags.tokens() {
        match token[0] {
            b'O' => {
                line.token(token);
            }
            b'k' => {
                line.key(key, flags.base64_key);
            }
            // memcached answers 0 when nothing was stored.
            b'c' => {
                line.number(b'c', result.unwrap_or(0));
            }
            b's' => {
                line.number(b's', size as u64);
            }
            _ => {}
        }
    }
    line.finish();
    Step::Done(consumed)
}

/// `md`: delete, or with `I` mark stale (and with `T` set a new TTL); `C` must match.
fn delete(cx: &mut Cx<'_>, key: &[u8], flags: &Flags<'_>, out: &mut Vec<u8>, now: Now) {
    // memcached compares any `C`, 0 included (an item whose CAS is 0 matches it); the store
    // reads 0 as "no compare".
    let cas = match flags.compare_cas {
        None => 0,
        Some(0) => match cx.peek(key, now) {
            Some(item) if item.cas == 0 => 0,
            _ => cx.cas_matching_nothing(key, now),
        },
        Some(cas) => cas,
    };
    let result = if flags.invalidate {
        cx.invalidate(key, cas, flags.ttl, new_cas(flags), now)
            .map(|_| ())
    } else {
        cx.delete(key, cas, now)
    };
    let status = match result {
        Ok(()) if flags.quiet => return,
        Ok(()) => Status::Hd,
        Err(StoreError::Exists) => Status::Ex,
        Err(StoreError::KeyTooLong) => {
            ErrorReply::BadFormat.emit_into(out);
            return;
        }
        Err(_) => Status::Nf,
    };
    let mut line = ReplyLine::start(out, status);
    echo(&mut line, flags, key);
    line.finish();
}

/// `ma`: incr/decr by `D` (default 1); `N` creates a missing key with `J` (default 0).
fn arithmetic(cx: &mut Cx<'_>, key: &[u8], flags: &Flags<'_>, out: &mut Vec<u8>, now: Now) {
    let direction = match flags.arithmetic_mode().unwrap_or(ArithmeticMode::Incr) {
        ArithmeticMode::Incr => Delta::Incr,
        ArithmeticMode::Decr => Delta::Decr,
    };
    let delta = flags.delta.unwrap_or(1);
    let create = flags
        .vivify_ttl
        .map(|ttl| (flags.initial.unwrap_or(0), ttl));
    let cas = flags.compare_cas.unwrap_or(0);
    let result = cx.arith(
        Arith {
            create,
            cas,
            new_cas: new_cas(flags),
            ..Arith::new(key, direction, delta)
        },
        now,
    );
    let (value, cas) = match result {
        Ok(done) => done,
        Err(StoreError::NotFound) | Err(StoreError::Exists) => {
            let status = if result == Err(StoreError::Exists) {
                Status::Ex
            } else {
                Status::Nf
            };
            let mut line = ReplyLine::start(out, status);
            echo(&mut line, flags, key);
            line.finish();
            return;
        }
        Err(StoreError::NonNumeric) => {
            ErrorReply::NonNumeric.emit_into(out);
            return;
        }
        Err(StoreError::KeyTooLong) => {
            ErrorReply::BadFormat.emit_into(out);
            return;
        }
        Err(_) => {
            ErrorReply::NoMemory.emit_into(out);
            return;
        }
    };
    if let Some(ttl) = flags.ttl {
        cx.retouch(key, Ttl::Exptime(ttl), now);
    }
    if flags.quiet {
        return;
    }
    let exptime = cx.peek(key, now).map_or(0, |item| item.exptime);
    let mut digits = Vec::with_capacity(20);
    protocol::text::push_u64(&mut digits, value);
    let status = if flags.return_value {
        Status::Va(digits.len())
    } else {
        Status::Hd
    };
    let mut line = ReplyLine::start(out, status);
    for token in flags.tokens() {
        match token[0] {
            b'c' => {
                line.number(b'c', cas);
            }
            b't' => {
                line.signed(b't', ttl(exptime, now));
            }
            b'O' => {
                line.token(token);
            }
            b'k' => {
                line.key(key, flags.base64_key);
            }
            _ => {}
        }
    }
    line.finish();
    if flags.return_value {
        out.extend_from_slice(&digits);
        out.extend_from_slice(b"\r\n");
    }
}

/// `me`: the item's metadata as memcached's debug line, or `EN`.
fn debug(cx: &mut Cx<'_>, key: &[u8], flags: &Flags<'_>, out: &mut Vec<u8>, now: Now) {
    match cx.peek(key, now) {
        Some(item) => DebugLine {
            key,
            base64_key: flags.base64_key,
            exp: ttl(item.exptime, now),
            last_access: item.idle_secs(now),
            cas: item.cas,
            fetched: item.fetched,
            class: ITEM_CLASS,
            size: if item.expiry_ms == 0 {
                store::item_size(key.len(), item.value.len())
            } else {
                store::item_size_expiring(key.len(), item.value.len())
            } as u64,
        }
        .emit_into(out),
        None => ReplyLine::start(out, Status::En).finish(),
    }
}

#[cfg(test)]
mod tests;
