//! Executing binary-protocol frames against the shard.
//!
//! Quiet commands suppress exactly what memcached suppresses: a GETQ/GETKQ/GATQ/GATKQ miss and
//! the success reply of every other quiet command. Errors are always answered.

use protocol::binary::{
    CounterExtras, ExpirationExtras, FlagsExtras, HEADER_LEN, Invalid, Opcode, ParseError,
    RequestHeader, RequestRepr, ResponseHeader, ResponseRepr, Status, StoreExtras, VerbosityExtras,
};
use store::{Arith, Delta, Now, StoreError, StoreMode, Ttl, Write};

use super::session::{Cx, FanOut, Step, Stop};
use crate::control::Control;
use crate::stats::{self, Group, Kind, Snapshot};

/// The one form a binary request is forwarded in: the whole frame.
const WHOLE: u8 = 0;

/// What the caller does after one frame.
enum Flow {
    Continue,
    Close,
}

/// Executes (or refuses) the binary frame at the front of `buf`.
pub(super) fn step(cx: &mut Cx<'_>, buf: &[u8], out: &mut Vec<u8>) -> Step {
    match refuse_oversize_value(cx, buf, out) {
        Refusal::None => {}
        Refusal::Skip(frame_len) => {
            cx.session.skip(frame_len as u64);
            return Step::Done(0);
        }
        Refusal::Wait(needed) => return Step::Wait(needed),
        Refusal::Stop(stop) => return Step::Stop(stop),
    }
    match RequestRepr::parse(buf, cx.config().max_body()) {
        Ok((request, len)) => {
            cx.classify(kind_of(request.opcode));
            if keyed(request.opcode)
                && let Some(owner) = cx.owner_elsewhere(request.key)
            {
                return match cx.forward(owner, WHOLE, &buf[..len], out) {
                    Ok(()) => Step::Done(len),
                    Err(stop) => Step::Stop(stop),
                };
            }
            if matches!(request.opcode, Opcode::Flush | Opcode::Stat) && !cx.may_fan_out() {
                return Step::Stop(Stop::Blocked);
            }
            if let Flow::Close = dispatch(cx, &request, out) {
                cx.session.close();
            }
            Step::Done(len)
        }
        Err(ParseError::Incomplete { needed }) => Step::Wait(needed),
        Err(ParseError::UnknownOpcode {
            opcode,
            opaque,
            frame_len,
        }) => {
            cx.protocol_error();
            let (opcode, quiet) = Opcode::from_wire(opcode);
            write_error(out, opcode, quiet, opaque, Status::UnknownCommand, &[]);
            cx.session.skip(frame_len as u64);
            Step::Done(0)
        }
        Err(ParseError::Invalid(invalid)) => {
            cx.protocol_error();
            if !matches!(invalid, Invalid::BadMagic(_))
                && let Ok(header) = RequestHeader::new_checked(&buf[..HEADER_LEN.min(buf.len())])
            {
                let (opcode, quiet) = Opcode::from_wire(header.opcode());
                let opaque = header.opaque();
                write_error(out, opcode, quiet, opaque, Status::InvalidArguments, &[]);
            }
            cx.session.close();
            Step::Done(0)
        }
    }
}

/// Frames at the front of the input whose keys [`prefetch`] warms.
const PREFETCH_AHEAD: usize = super::config::PREFETCH_MAX;

/// When `buf` holds more than one complete frame, warms the store for the keys of the first
/// [`PREFETCH_AHEAD`] keyed frames this worker owns, before any of them runs: their cache misses
/// (a GET hit misses on the table's bucket and on the item's block) then overlap instead of
/// following one another. Reads the headers only; a frame that is incomplete, malformed or of
/// another worker is passed over, and what `step` then does is unchanged.
pub(super) fn prefetch(cx: &Cx<'_>, buf: &[u8]) {
    let mut keys: [&[u8]; PREFETCH_AHEAD] = [&[]; PREFETCH_AHEAD];
    let mut found = 0;
    let mut pos = 0;
    for _ in 0..PREFETCH_AHEAD {
        let Ok(header) = RequestHeader::new_checked(&buf[pos..]) else {
            break;
        };
        let end = pos.saturating_add(header.frame_len());
        if end > buf.len() || (pos == 0 && end == buf.len()) {
            // Incomplete, or the only frame: nothing to overlap with.
            break;
        }
        let key_at = pos + HEADER_LEN + usize::from(header.extras_len());
        let key = &buf[key_at..key_at + usize::from(header.key_len())];
        if keyed(Opcode::from_wire(header.opcode()).0)
            && !key.is_empty()
            && cx.owner_elsewhere(key).is_none()
        {
            keys[found] = key;
            found += 1;
        }
        pos = end;
    }
    cx.prefetch(&keys[..found]);
}

/// A request as the log shows it: its opcode and key (`request` is one complete frame).
pub(super) fn describe(request: &[u8]) -> String {
    match RequestHeader::new_checked(request) {
        Ok(header) => {
            let key_at = HEADER_LEN + usize::from(header.extras_len());
            let key = request
                .get(key_at..key_at + usize::from(header.key_len()))
                .unwrap_or_default();
            format!(
                "binary opcode {:#04x} key {}",
                header.opcode(),
                key.escape_ascii()
            )
        }
        Err(_) => "binary frame".to_string(),
    }
}

/// A reply as the log shows it: the status of its first frame (`None`: no reply).
pub(super) fn describe_reply(reply: &[u8]) -> Option<String> {
    let header = ResponseHeader::new_checked(reply).ok()?;
    Some(format!("status {:#06x}", header.status()))
}

/// Executes a frame another worker forwarded here (complete: the sender parsed it).
pub(super) fn run_forwarded(cx: &mut Cx<'_>, _part: u8, request: &[u8], out: &mut Vec<u8>) {
    let _ = step(cx, request, out);
}

/// What [`refuse_oversize_value`] did with the frame at the front of the input.
enum Refusal {
    /// Not a storage frame too large to store: parse it as usual.
    None,
    /// Refused (here, or by the key's owner): skip this many bytes, the whole frame.
    Skip(usize),
    /// Refused, but its key has not arrived yet: read this many more bytes.
    Wait(usize),
    /// The key's owner must refuse it (the old item is there) and its queue is full.
    Stop(Stop),
}

/// A well-formed storage frame whose value can never fit is answered "too large" once its
/// header, extras and key are in, so its value is skipped rather than buffered, whatever
/// length it announces (as memcached swallows it). A SET also unlinks the item held under its
/// key, as memcached does, so no stale value survives; when another worker owns the key, the
/// frame's head (header, extras, key) goes there to be refused, and the value is skipped here.
fn refuse_oversize_value(cx: &mut Cx<'_>, buf: &[u8], out: &mut Vec<u8>) -> Refusal {
    // No body limit here: a storage frame past it is refused like any too large for `-I`.
    let Ok(header) = RequestRepr::parse_header(buf, u32::MAX) else {
        return Refusal::None;
    };
    let (opcode, quiet) = Opcode::from_wire(header.opcode());
    let storage = matches!(
        opcode,
        Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend
    );
    if !storage || cx.fits(usize::from(header.key_len()), header.value_len()) {
        return Refusal::None;
    }
    let key_start = HEADER_LEN + usize::from(header.extras_len());
    let head_len = key_start + usize::from(header.key_len());
    if buf.len() < head_len {
        return Refusal::Wait(head_len - buf.len());
    }
    let key = &buf[key_start..head_len];
    if let Some(owner) = cx.owner_elsewhere(key) {
        return match cx.forward(owner, WHOLE, &buf[..head_len], out) {
            Ok(()) => Refusal::Skip(header.frame_len()),
            Err(stop) => Refusal::Stop(stop),
        };
    }
    cx.refuse_too_large(key, opcode == Opcode::Set, cx.now);
    write_error(
        out,
        opcode,
        quiet,
        header.opaque(),
        Status::ValueTooLarge,
        &[],
    );
    Refusal::Skip(header.frame_len())
}

/// The latency instrument's kind of an opcode (for a request forwarded to another worker).
fn kind_of(opcode: Opcode) -> Kind {
    match opcode {
        Opcode::Get | Opcode::GetK => Kind::Get,
        Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend => Kind::Set,
        Opcode::Delete => Kind::Delete,
        Opcode::Increment | Opcode::Decrement => Kind::Arith,
        Opcode::Touch | Opcode::Gat | Opcode::GatK => Kind::Touch,
        Opcode::Flush => Kind::Flush,
        _ => Kind::Other,
    }
}

/// Opcodes that act on one key, executed by the worker that owns it.
fn keyed(opcode: Opcode) -> bool {
    matches!(
        opcode,
        Opcode::Get
            | Opcode::GetK
            | Opcode::Set
            | Opcode::Add
            | Opcode::Replace
            | Opcode::Append
            | Opcode::Prepend
            | Opcode::Delete
            | Opcode::Increment
            | Opcode::Decrement
            | Opcode::Touch
            | Opcode::Gat
            | Opcode::GatK
    )
}

fn dispatch(cx: &mut Cx<'_>, request: &RequestRepr<'_>, out: &mut Vec<u8>) -> Flow {
    let now = cx.now;
    match request.opcode {
        Opcode::Get | Opcode::GetK => {
            let with_key = request.opcode == Opcode::GetK;
            match cx.get(request.key, now) {
                Some(item) => write_item(out, request, with_key, item.flags, item.value, item.cas),
                None => write_miss(out, request, with_key),
            }
        }
        Opcode::Touch | Opcode::Gat | Opcode::GatK => {
            let Some(extras) = ExpirationExtras::parse(request.extras) else {
                return invalid(cx, request, out);
            };
            let exptime = i64::from(extras.expiration);
            let with_key = request.opcode == Opcode::GatK;
            match cx.touch(request.key, Ttl::Exptime(exptime), now) {
                Some(item) if request.opcode == Opcode::Touch => {
                    write_item(out, request, false, item.flags, &[], item.cas)
                }
                Some(item) => write_item(out, request, with_key, item.flags, item.value, item.cas),
                None => write_miss(out, request, with_key),
            }
        }
        Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend => {
            let (mode, flags, exptime) = match request.opcode {
                Opcode::Append => (StoreMode::Append, 0, 0),
                Opcode::Prepend => (StoreMode::Prepend, 0, 0),
                opcode => {
                    let Some(extras) = StoreExtras::parse(request.extras) else {
                        return invalid(cx, request, out);
                    };
                    let mode = match opcode {
                        // memcached: a binary store with a CAS is a compare-and-swap, an ADD
                        // too (a matching CAS replaces the item).
                        Opcode::Add if request.cas != 0 => StoreMode::Set,
                        Opcode::Add => StoreMode::Add,
                        Opcode::Replace => StoreMode::Replace,
                        _ => StoreMode::Set,
                    };
                    (mode, extras.flags, i64::from(extras.expiration))
                }
            };
            let result = cx.store(
                Write {
                    flags,
                    ttl: Ttl::Exptime(exptime),
                    cas: request.cas,
                    ..Write::new(mode, request.key, request.value)
                },
                now,
            );
            match result {
                Ok(cas) => write_success(out, request, cas, &[], &[]),
                Err(error) => {
                    // No stale value survives a SET refused for memory (memcached unlinks it).
                    if error == StoreError::OutOfMemory && mode == StoreMode::Set {
                        cx.unlink(request.key, now);
                    }
                    let status = match (error, mode) {
                        // memcached's binary protocol: ADD on a live key is "exists", REPLACE on a
                        // missing key is "not found"; APPEND/PREPEND say "not stored".
                        (StoreError::NotStored, StoreMode::Add) => Status::KeyExists,
                        (StoreError::NotStored, StoreMode::Replace) => Status::KeyNotFound,
                        (error, _) => store_status(error),
                    };
                    write_request_error(out, request, status);
                }
            }
        }
        Opcode::Delete => match cx.delete(request.key, request.cas, now) {
            Ok(()) => write_success(out, request, 0, &[], &[]),
            Err(error) => write_request_error(out, request, store_status(error)),
        },
        Opcode::Increment | Opcode::Decrement => {
            let Some(extras) = CounterExtras::parse(request.extras) else {
                return invalid(cx, request, out);
            };
            let direction = if request.opcode == Opcode::Increment {
                Delta::Incr
            } else {
                Delta::Decr
            };
            // Expiration 0xffffffff: fail if missing; anything else creates with `initial`.
            let create = (extras.expiration != u32::MAX)
                .then_some((extras.initial, i64::from(extras.expiration)));
            let result = cx.arith(
                Arith {
                    create,
                    cas: request.cas,
                    ..Arith::new(request.key, direction, extras.delta)
                },
                now,
            );
            match result {
                Ok((value, cas)) => write_success(out, request, cas, &[], &value.to_be_bytes()),
                Err(error) => write_request_error(out, request, store_status(error)),
            }
        }
        Opcode::Flush => {
            let delay = match request.extras.len() {
                0 => 0,
                _ => match ExpirationExtras::parse(request.extras) {
                    Some(extras) => i64::from(extras.expiration),
                    None => return invalid(cx, request, out),
                },
            };
            cx.flush_all(delay, now);
            cx.fan_out(FanOut::Flush { delay }, None, None, out);
            write_success(out, request, 0, &[], &[]);
        }
        Opcode::Noop => write_success(out, request, 0, &[], &[]),
        Opcode::Version => write_success(out, request, 0, &[], cx.version().as_bytes()),
        Opcode::Verbosity => {
            let Some(extras) = VerbosityExtras::parse(request.extras) else {
                return invalid(cx, request, out);
            };
            cx.control().change_verbosity(extras.level);
            write_success(out, request, 0, &[], &[]);
        }
        Opcode::Quit => {
            write_success(out, request, 0, &[], &[]);
            return Flow::Close;
        }
        Opcode::Stat => return write_stats(cx, request, out),
        Opcode::Unknown(_) => {
            cx.protocol_error();
            write_request_error(out, request, Status::UnknownCommand);
        }
    }
    Flow::Continue
}

/// A frame whose extras did not decode: answered like memcached's protocol error, then closed.
fn invalid(cx: &mut Cx<'_>, request: &RequestRepr<'_>, out: &mut Vec<u8>) -> Flow {
    cx.protocol_error();
    write_request_error(out, request, Status::InvalidArguments);
    Flow::Close
}

fn store_status(error: StoreError) -> Status {
    match error {
        StoreError::NotFound => Status::KeyNotFound,
        StoreError::Exists => Status::KeyExists,
        StoreError::NotStored => Status::ItemNotStored,
        StoreError::TooLarge => Status::ValueTooLarge,
        StoreError::OutOfMemory => Status::OutOfMemory,
        StoreError::NonNumeric => Status::NonNumeric,
        StoreError::KeyTooLong => Status::InvalidArguments,
    }
}

fn write_item(
    out: &mut Vec<u8>,
    request: &RequestRepr<'_>,
    with_key: bool,
    flags: u32,
    value: &[u8],
    cas: u64,
) {
    let extras = FlagsExtras { flags }.emit();
    ResponseRepr {
        opcode: request.opcode,
        quiet: request.quiet,
        status: Status::NoError,
        opaque: request.opaque,
        cas,
        extras: &extras,
        key: if with_key { request.key } else { &[] },
        value,
    }
    .emit_into(out);
}

fn write_miss(out: &mut Vec<u8>, request: &RequestRepr<'_>, with_key: bool) {
    if request.quiet {
        return;
    }
    if with_key {
        // GETK/GATK misses carry the key instead of the message, as memcached sends them.
        ResponseRepr {
            opcode: request.opcode,
            quiet: false,
            status: Status::KeyNotFound,
            opaque: request.opaque,
            cas: 0,
            extras: &[],
            key: request.key,
            value: &[],
        }
        .emit_into(out);
    } else {
        write_request_error(out, request, Status::KeyNotFound);
    }
}

fn write_success(out: &mut Vec<u8>, request: &RequestRepr<'_>, cas: u64, key: &[u8], value: &[u8]) {
    if request.quiet {
        return;
    }
    ResponseRepr {
        opcode: request.opcode,
        quiet: false,
        status: Status::NoError,
        opaque: request.opaque,
        cas,
        extras: &[],
        key,
        value,
    }
    .emit_into(out);
}

fn write_request_error(out: &mut Vec<u8>, request: &RequestRepr<'_>, status: Status) {
    write_error(
        out,
        request.opcode,
        request.quiet,
        request.opaque,
        status,
        &[],
    );
}

/// An error reply: always sent, quiet or not, with memcached's message as its value.
fn write_error(
    out: &mut Vec<u8>,
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    status: Status,
    key: &[u8],
) {
    ResponseRepr {
        opcode,
        quiet,
        status,
        opaque,
        cas: 0,
        extras: &[],
        key,
        value: status.message().as_bytes(),
    }
    .emit_into(out);
}

/// What a binary STAT request's key asks for (memcached's `process_bin_stat`: `reset`,
/// `settings` and `detail` are matched as prefixes, other groups exactly; `conns` is text
/// only, as in memcached).
enum StatKey {
    /// Lines of a group, then the terminating empty packet.
    Group(Group),
    /// `reset`: every worker's counters start over; the terminating packet only.
    Reset,
    /// `detail on` / `detail off`: the terminating packet only.
    Detail(bool),
    /// `detail dump`: one packet, key `detailed`, the dump as its value; then the terminator.
    DetailDump,
    /// `sizes_enable` / `sizes_disable`: one packet (`sizes_status`), no terminator, as
    /// memcached sends it.
    Sizes(bool),
}

fn stat_key(key: &[u8]) -> Option<StatKey> {
    Some(match key {
        b"" => StatKey::Group(Group::General),
        k if k.starts_with(b"reset") => StatKey::Reset,
        k if k.starts_with(b"settings") => StatKey::Group(Group::Settings),
        k if k.starts_with(b"detail") => match &k[6..] {
            d if d.starts_with(b" dump") => StatKey::DetailDump,
            d if d.starts_with(b" on") => StatKey::Detail(true),
            d if d.starts_with(b" off") => StatKey::Detail(false),
            _ => return None,
        },
        b"items" => StatKey::Group(Group::Items),
        b"slabs" => StatKey::Group(Group::Slabs),
        b"sizes" => StatKey::Group(Group::Sizes),
        b"sizes_enable" => StatKey::Sizes(true),
        b"sizes_disable" => StatKey::Sizes(false),
        b"latency" => StatKey::Group(Group::Latency),
        b"workers" => StatKey::Group(Group::Workers),
        b"worker" => StatKey::Group(Group::Worker),
        _ => return None,
    })
}

fn write_stats(cx: &mut Cx<'_>, request: &RequestRepr<'_>, out: &mut Vec<u8>) -> Flow {
    let Some(stat) = stat_key(request.key) else {
        write_request_error(out, request, Status::KeyNotFound);
        return Flow::Continue;
    };
    let (opcode, quiet, opaque, now) = (request.opcode, request.quiet, request.opaque, cx.now);
    let control = cx.control().clone();
    let group = match stat {
        StatKey::Group(group) => group,
        StatKey::DetailDump => Group::Detail,
        StatKey::Reset => {
            log::info!("stats reset");
            cx.reset_stats();
            cx.fan_out(FanOut::Reset, None, None, out);
            write_success_always(out, opcode, quiet, opaque, &[], &[]);
            return Flow::Continue;
        }
        StatKey::Detail(on) => {
            control.set_detail(on);
            write_success_always(out, opcode, quiet, opaque, &[], &[]);
            return Flow::Continue;
        }
        StatKey::Sizes(on) => {
            control.set_sizes(on);
            let value: &[u8] = if on { b"enabled" } else { b"disabled" };
            write_success_always(out, opcode, quiet, opaque, b"sizes_status", value);
            return Flow::Continue;
        }
    };
    if group == Group::Latency {
        // The requests this call executed before this one are done: count them too.
        let elapsed = control.now_ns().saturating_sub(cx.session.arrived_ns);
        cx.record_samples(elapsed);
    }
    cx.gather_snapshots(group, out, move |snapshot, out| {
        render_stats(out, opcode, quiet, opaque, group, &control, now, snapshot);
    });
    Flow::Continue
}

/// The STAT replies of `group` for `snapshot`: one frame per figure (`detail dump`: one frame,
/// key `detailed`, with every `PREFIX` line), then the terminating empty one.
#[allow(clippy::too_many_arguments)]
fn render_stats(
    out: &mut Vec<u8>,
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    group: Group,
    control: &Control,
    now: Now,
    snapshot: &Snapshot,
) {
    if group == Group::Detail {
        let mut dump = snapshot
            .prefixes
            .as_ref()
            .map(|p| p.dump())
            .unwrap_or_default();
        // memcached's value is the text reply whole, its `END` included.
        dump.push_str("END\r\n");
        write_success_always(out, opcode, quiet, opaque, b"detailed", dump.as_bytes());
    } else {
        let mut value = String::new();
        stats::render(group, snapshot, control, now, |name, v| {
            use std::fmt::Write as _;
            value.clear();
            let _ = write!(value, "{v}");
            write_success_always(
                out,
                opcode,
                quiet,
                opaque,
                name.as_bytes(),
                value.as_bytes(),
            );
        });
    }
    write_success_always(out, opcode, quiet, opaque, &[], &[]);
}

fn write_success_always(
    out: &mut Vec<u8>,
    opcode: Opcode,
    quiet: bool,
    opaque: u32,
    key: &[u8],
    value: &[u8],
) {
    ResponseRepr {
        opcode,
        quiet,
        status: Status::NoError,
        opaque,
        cas: 0,
        extras: &[],
        key,
        value,
    }
    .emit_into(out);
}

#[cfg(test)]
mod tests {
    use protocol::binary::{Opcode, RequestRepr, StoreExtras};

    use super::super::session::Session;
    use super::super::tests::{engine, feed_in_pieces};

    fn frame(opcode: Opcode, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        let extras = StoreExtras {
            flags: 0,
            expiration: 0,
        }
        .emit();
        let extras: &[u8] = if opcode == Opcode::Set { &extras } else { &[] };
        RequestRepr {
            opcode,
            quiet: false,
            opaque: 7,
            cas: 0,
            vbucket: 0,
            extras,
            key,
            value,
        }
        .emit_into(out);
    }

    /// Prefetching the keys of a pipelined run changes no reply, whatever the input holds:
    /// whole runs, any prefix of one (frames cut anywhere), a run behind bytes that are not
    /// a header, and one frame at a time.
    #[test]
    fn prefetching_a_pipeline_changes_no_reply() {
        let mut run = Vec::new();
        for i in 0..40u8 {
            let key = [b'k', b'0' + i % 10];
            match i % 4 {
                0 => frame(Opcode::Set, &key, &[i; 5], &mut run),
                1 => frame(Opcode::Get, &key, &[], &mut run),
                2 => frame(Opcode::GetK, b"absent", &[], &mut run),
                _ => frame(Opcode::Noop, &[], &[], &mut run),
            }
        }
        let one_by_one = feed_in_pieces(&run, 1);
        for piece in [run.len(), 24, 25, 100, 999] {
            assert_eq!(feed_in_pieces(&run, piece), one_by_one, "pieces of {piece}");
        }
        for cut in 0..run.len() {
            let (mut e, mut session, mut out) = (engine(), Session::default(), Vec::new());
            let outcome = e.execute(&mut session, &run[..cut], &mut out, 1);
            assert!(outcome.consumed <= cut && !outcome.close, "cut at {cut}");
        }
        let mut garbage = vec![0x80, 0x00, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1];
        garbage.extend_from_slice(&run);
        let mut e = engine();
        let _ = e.execute(&mut Session::default(), &garbage, &mut Vec::new(), 1);
    }
}
