//! The numbered databases: `SELECT`, `SWAPDB`, `MOVE`, `DBSIZE`, `FLUSHDB`, and how a
//! command that spans every worker runs its share on each ([`every_worker`]).

use super::*;

/// Buckets one slice of a database walk visits before acting on what it found.
pub(super) const WALK_SLICE_BUCKETS: usize = 1024;

/// Runs `local` for this worker's share of a command that spans every worker (`DBSIZE`,
/// `FLUSHDB`), and, unless this is the only worker or the command came from another one,
/// sends the command to every other worker to run its share there; `gather` combines the
/// replies. The caller checked [`Cx::may_fan_out`].
pub(super) fn every_worker(
    cx: &mut Cx<'_>,
    raw: &[u8],
    gather: Box<dyn Gather>,
    out: &mut Vec<u8>,
    local: impl FnOnce(&mut Cx<'_>, &mut Vec<u8>),
) {
    if cx.workers() == 1 || cx.forwarded() {
        local(cx, out);
        return;
    }
    let Some(seq) = cx.gather(gather, out) else {
        local(cx, out);
        return;
    };
    let me = cx.config().worker;
    for worker in (0..cx.workers()).filter(|&w| w != me) {
        // No queue holds a batch back (checked), so none refuses this part.
        let _ = cx.forward_part(seq, worker, WHOLE, raw.len(), |bytes| {
            bytes.extend_from_slice(raw)
        });
    }
    let mut own = Vec::new();
    local(cx, &mut own);
    cx.seal(seq, Part::Bytes(&own), out);
}

/// Keys of the connection's database on this worker.
pub(super) fn database_size(cx: &Cx<'_>) -> i64 {
    let mut keys = 0;
    cx.visit_database(0, cx.num_buckets(), cx.now, |_, _| keys += 1);
    keys
}

/// Removes every key of the connection's database on this worker, a slice of the table at a
/// time (removing keys moves no other item, so the walk's place holds).
pub(super) fn flush_database(cx: &mut Cx<'_>) {
    let now = cx.now;
    let mut keys: Vec<u8> = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut start = 0;
    while start < cx.num_buckets() {
        let end = start + WALK_SLICE_BUCKETS;
        keys.clear();
        ends.clear();
        cx.visit_database(start, end, now, |key, _| {
            keys.extend_from_slice(key);
            ends.push(keys.len());
        });
        let mut from = 0;
        for &to in &ends {
            cx.unlink(&keys[from..to], now);
            from = to;
        }
        start = end;
    }
}

/// Makes `db` the connection's database for what follows, in the namespace it means now
/// (`SWAPDB`); each command starts with it.
pub(super) fn enter_db(cx: &mut Cx<'_>, db: u8) {
    cx.session.db = db;
    cx.session.stored_db = cx.control().databases.namespace(db);
}

/// The connection's database and its namespace, to put back after a look at another one.
pub(super) fn current_db(cx: &Cx<'_>) -> (u8, u8) {
    (cx.session.db, cx.session.stored_db)
}

/// Puts back what [`current_db`] returned.
pub(super) fn restore_db(cx: &mut Cx<'_>, (db, stored_db): (u8, u8)) {
    cx.session.db = db;
    cx.session.stored_db = stored_db;
}

/// `SWAPDB index1 index2`: the two databases trade their keys, for every connection and
/// every worker at once (the namespace each number means is swapped, no key moves; see
/// `control::DbMap`). A key watched in either database that is held in either changes its
/// item under the watcher, which fails its `EXEC`, as Redis touches such keys.
pub(super) fn swapdb(cx: &mut Cx<'_>, first: &[u8], second: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let index = |text: &[u8]| parse_integer(text).and_then(|n| i32::try_from(n).ok());
    let Some(a) = index(first) else {
        return error(out, v, "ERR invalid first DB index");
    };
    let Some(b) = index(second) else {
        return error(out, v, "ERR invalid second DB index");
    };
    let databases = i32::from(cx.config().databases);
    if !(0..databases).contains(&a) || !(0..databases).contains(&b) {
        return error(out, v, "ERR DB index is out of range");
    }
    cx.control().databases.swap(a as u8, b as u8);
    let db = cx.session.db;
    enter_db(cx, db);
    ok(out, v);
}

/// `SELECT index`.
pub(super) fn select(cx: &mut Cx<'_>, index: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    match parse_integer(index) {
        None => error(out, v, NOT_INTEGER),
        Some(n) if n >= 0 && n < i64::from(cx.config().databases) => {
            enter_db(cx, n as u8);
            note_client(cx);
            ok(out, v);
        }
        Some(_) => error(out, v, OUT_OF_RANGE_DB),
    }
}

/// `MOVE key db`: the key, with its value, flags and expiry, into database `db` when it is
/// held here and not there. A key's owner does not depend on its database, so both places
/// are on this worker.
pub(super) fn move_key(cx: &mut Cx<'_>, key: &[u8], db: &[u8], out: &mut Vec<u8>) {
    let v = version(cx);
    let now = cx.now;
    let target = match parse_integer(db) {
        None => return error(out, v, NOT_INTEGER),
        Some(n) if n >= 0 && n < i64::from(cx.config().databases) => n as u8,
        Some(_) => return error(out, v, OUT_OF_RANGE_DB),
    };
    let source = cx.session.db;
    if target == source {
        return error(out, v, "ERR source and destination objects are the same");
    }
    let Some((value, flags, expiry_ms)) = cx
        .peek(key, now)
        .map(|item| (item.value.to_vec(), item.flags, item.expiry_ms))
    else {
        return integer(out, v, 0);
    };
    let saved = current_db(cx);
    enter_db(cx, target);
    let moved = if cx.peek(key, now).is_some() {
        Ok(false)
    } else {
        let ttl = if expiry_ms == 0 {
            Ttl::Exptime(0)
        } else {
            Ttl::AtMillis(expiry_ms)
        };
        let write = Write {
            flags,
            ttl,
            ..Write::new(StoreMode::Add, key, &value)
        };
        cx.store(write, now).map(|_| true)
    };
    restore_db(cx, saved);
    match moved {
        Ok(true) => {
            cx.unlink(key, now);
            integer(out, v, 1);
        }
        Ok(false) => integer(out, v, 0),
        Err(e) => store_error(out, v, e),
    }
}
