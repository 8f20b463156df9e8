//! The text adapter's operator commands: `stats` (every group, `cachedump` too), `verbosity`,
//! `slabs`, `lru_crawler` (`metadump`, `crawl` and its settings), `cache_memlimit`, `watch`
//! and `shutdown`, answered as memcached 1.6 answers them. What `slabs reassign`,
//! `lru_crawler crawl` and a lowered `cache_memlimit` start, each worker's loop carries out a
//! bounded step per iteration (`Core::housekeep`).
//!
//! ```text
//! stats <group> ─▶ one worker's figures, or every worker's gathered (Cx::fan_out) ─▶ STAT lines, END
//! stats reset / detail on|off / sizes_enable ─▶ every worker's counters, or the shared switches
//! stats cachedump 1 <n> ─▶ every worker's items (at most n, and 2 MiB of lines) ─▶ ITEM lines, END
//! lru_crawler metadump ─▶ each worker's table in slices of buckets, local or forwarded, resumable
//! watch ─▶ the connection becomes a watcher: the worker loop hands it log lines
//! ```
//!
//! `lru_crawler metadump` writes one line per live item (`key=... exp=... la=... cas=...
//! fetch=... cls=1 size=...`) and `END`. It walks worker 0's table, then worker 1's, and so on,
//! [`METADUMP_SLICE_BUCKETS`] buckets at a time: a slice of this worker's table is written
//! here, a slice of another's is forwarded to it (its lines come back into their place in the
//! output). Between slices it checks the output backlog, the forwarding limits and the turn, as
//! a multi-key `get` does between keys, and stops there when one says so: the line stays
//! unconsumed and the next call goes on from that slice. So a dump of any size holds at most
//! a slice or two of lines at once. Like memcached's crawler it is not a snapshot: items
//! stored, deleted or moved by a table's growth while it runs may be missed or repeated. A
//! dump waits until the connection's earlier forwarded requests are answered, so items those
//! stored are in it (memcached refuses a metadump pipelined behind other commands).

use std::fmt::Write as _;

use protocol::text::{
    Classes, CrawlerCommand, Detail, ErrorReply, Response, ShutdownMode, SlabsCommand, StatsGroup,
    WatchEvents,
};

use super::part;
use crate::control::{CloseReason, ConnState, EventKind, uri_encode};
use crate::engine::config::PAGE_BYTES;
use crate::engine::session::{Cx, FanOut, Resume, Step, Stop};
use crate::stats::{self, Group, ITEM_CLASS, Snapshot};

/// Buckets of a table one metadump slice walks (at most 7 items each: 112 items).
pub(super) const METADUMP_SLICE_BUCKETS: usize = 16;

/// The code a stopped metadump keeps in its [`Resume`].
pub(super) const METADUMP: u8 = 16;

/// Highest slab class number memcached accepts (`MAX_NUMBER_OF_SLAB_CLASSES - 1`).
const LARGEST_CLASS: u32 = 63;

/// `stats <group>`: its lines and `END`, or the group's own reply.
pub(super) fn stats(cx: &mut Cx<'_>, group: StatsGroup, out: &mut Vec<u8>) {
    let control = cx.control().clone();
    let gathered = match group {
        StatsGroup::General => Group::General,
        StatsGroup::Items => Group::Items,
        StatsGroup::Slabs => Group::Slabs,
        StatsGroup::Sizes => Group::Sizes,
        StatsGroup::Latency => Group::Latency,
        StatsGroup::Workers => Group::Workers,
        StatsGroup::Worker => Group::Worker,
        // memspin's one class; any other (below 64) holds nothing, as an empty class.
        StatsGroup::CacheDump { class, .. } if class != ITEM_CLASS => {
            Response::End.emit_into(out);
            return;
        }
        StatsGroup::CacheDump { limit, .. } => Group::CacheDump { limit },
        StatsGroup::Detail(Detail::Dump) => Group::Detail,
        StatsGroup::Settings => {
            let snapshot = cx.snapshot(Group::Settings, cx.now);
            render(out, Group::Settings, cx, &snapshot);
            return;
        }
        StatsGroup::Conns => {
            let snapshot = cx.snapshot(Group::Conns, cx.now);
            render(out, Group::Conns, cx, &snapshot);
            return;
        }
        StatsGroup::SizesEnable | StatsGroup::SizesDisable => {
            let on = group == StatsGroup::SizesEnable;
            control.set_sizes(on);
            let value = if on { "enabled" } else { "disabled" };
            // memcached ends this reply without `END`.
            Response::Stat {
                name: "sizes_status",
                value,
            }
            .emit_into(out);
            return;
        }
        StatsGroup::Detail(Detail::On | Detail::Off) => {
            control.set_detail(group == StatsGroup::Detail(Detail::On));
            Response::Ok.emit_into(out);
            return;
        }
        StatsGroup::Reset => {
            log::info!("stats reset");
            cx.reset_stats();
            cx.fan_out(FanOut::Reset, None, None, out);
            Response::Reset.emit_into(out);
            return;
        }
    };
    if gathered == Group::Latency {
        // The requests this call executed before this one are done: count them too.
        let elapsed = control.now_ns().saturating_sub(cx.session.arrived_ns);
        cx.record_samples(elapsed);
    }
    let now = cx.now;
    cx.gather_snapshots(gathered, out, move |snapshot, out| {
        render_with(out, gathered, &control, now, snapshot);
    });
}

/// The reply of `group` for `snapshot`.
fn render(out: &mut Vec<u8>, group: Group, cx: &Cx<'_>, snapshot: &Snapshot) {
    render_with(out, group, cx.control(), cx.now, snapshot);
}

/// The reply of `group` for `snapshot`: `STAT` lines (`stats detail dump`: `PREFIX` lines),
/// then `END`.
fn render_with(
    out: &mut Vec<u8>,
    group: Group,
    control: &crate::control::Control,
    now: store::Now,
    snapshot: &Snapshot,
) {
    if group == Group::Detail {
        if let Some(prefixes) = &snapshot.prefixes {
            out.extend_from_slice(prefixes.dump().as_bytes());
        }
        Response::End.emit_into(out);
        return;
    }
    if let Group::CacheDump { .. } = group {
        if let Some(dump) = &snapshot.cachedump {
            out.extend_from_slice(dump.text());
        }
        Response::End.emit_into(out);
        return;
    }
    let mut value = String::new();
    stats::render(group, snapshot, control, now, |name, v| {
        value.clear();
        let _ = write!(value, "{v}");
        Response::Stat {
            name,
            value: &value,
        }
        .emit_into(out);
    });
    Response::End.emit_into(out);
}

/// `verbosity <level>`: what is logged from now on, on every worker.
pub(super) fn verbosity(cx: &mut Cx<'_>, level: u32, noreply: bool, out: &mut Vec<u8>) {
    cx.control().change_verbosity(level);
    if !noreply {
        Response::Ok.emit_into(out);
    }
}

/// `slabs reassign` and `slabs automove`, answered as memcached answers them (see
/// [`reassign`]); the automover has nothing to do with one class that holds every item (its
/// settings are kept and reported).
pub(super) fn slabs(cx: &mut Cx<'_>, command: SlabsCommand, out: &mut Vec<u8>) {
    let control = cx.control();
    match command {
        SlabsCommand::Reassign { src, dst } => match reassign(cx, src, dst) {
            Ok(()) => Response::Ok.emit_into(out),
            Err(reply) => reply.emit_into(out),
        },
        SlabsCommand::Automove { level, noreply } => {
            control.set_automove(level);
            if !noreply {
                Response::Ok.emit_into(out);
            }
        }
        SlabsCommand::AutomoveRatio { ratio, noreply } => {
            control.set_automove_ratio(ratio);
            if !noreply {
                Response::Ok.emit_into(out);
            }
        }
    }
}

/// `slabs reassign <src> <dst>`: moves a page (1 MiB) of memory from class `src` to class
/// `dst`, in memspin's terms. memspin's memory is not cut into pages per size class: class 1
/// holds every item, and memory no item holds is class 0, memcached's global page pool,
/// which every item can use. So a page out of class 1 (to the pool, or to a class 2 to 63,
/// which hold nothing and take memory from the pool as memcached's empty classes do) is
/// freed: every worker evicts its share of 1 MiB of items with the clock hand, a bounded step
/// per turn, counted in `slab_reassign_evictions_nomem`, and the move runs
/// (`slab_reassign_running`, `BUSY` to another move) until all are done (`slabs_moved`). A
/// page out of the pool into a class is already that class's to take: the move is done at
/// once. memcached's answers, in its order: `BUSY` while a move runs, `SAME`, `BADCLASS` for
/// a class outside 0..=63 (`src` -1 picks class 1 when it has pages to spare, as memcached's
/// "any class"), `NOSPARE` when `src` has fewer than two pages (class 1: `stats slabs`'
/// `1:total_pages`; the pool: whole free pages of the budget), else `OK`.
fn reassign(cx: &mut Cx<'_>, src: i32, dst: i32) -> Result<(), ErrorReply> {
    let control = cx.control().clone();
    if control.pages.running() {
        return Err(ErrorReply::ReassignBusy);
    }
    if src == dst {
        return Err(ErrorReply::SameClass);
    }
    let memory = cx.memory_figures();
    let item_pages = if memory.items == 0 {
        0
    } else {
        memory.heap_bytes.div_ceil(PAGE_BYTES)
    };
    let pool_pages = memory.limit_bytes.saturating_sub(memory.heap_bytes) / PAGE_BYTES;
    let item_class = ITEM_CLASS as i32;
    let src = if src == -1 && dst != item_class && item_pages >= 2 {
        item_class
    } else {
        src
    };
    let classes = 0..=LARGEST_CLASS as i32;
    if !classes.contains(&src) || !classes.contains(&dst) {
        return Err(ErrorReply::BadReassignClass);
    }
    let pages = match src {
        0 => pool_pages,
        1 => item_pages,
        _ => 0,
    };
    if pages < 2 {
        return Err(ErrorReply::NoSpare);
    }
    let workers = if src == item_class { cx.workers() } else { 0 };
    if !control.pages.start(workers) {
        return Err(ErrorReply::ReassignBusy);
    }
    log::info!("slabs reassign {src} {dst}: {pages} pages in class {src}");
    Ok(())
}

/// The other `lru_crawler` commands, answered as memcached answers them. `crawl` starts a
/// crawl of memspin's one class on every worker (each walks its own table, a bounded step
/// per turn, pausing `sleep` microseconds between steps, looking at `tocrawl` items at
/// most); a list without class 1 holds nothing to crawl, and is done at once. `enable` and
/// `disable` switch the background crawler and the `crawl` and `metadump` commands.
pub(super) fn lru_crawler(cx: &mut Cx<'_>, command: CrawlerCommand<'_>, out: &mut Vec<u8>) {
    let reply = match command {
        CrawlerCommand::Crawl(classes) => crawl(cx, classes),
        CrawlerCommand::ToCrawl(n) => {
            cx.control().crawler.set_tocrawl(n);
            Ok(())
        }
        CrawlerCommand::Sleep(us) => {
            cx.control().crawler.set_sleep_us(us);
            Ok(())
        }
        CrawlerCommand::Enable => {
            if cx.control().crawler.set_enabled(true) {
                Err(ErrorReply::CrawlerStartFailed)
            } else {
                log::info!("lru_crawler enabled");
                Ok(())
            }
        }
        CrawlerCommand::Disable => {
            if cx.control().crawler.set_enabled(false) {
                log::info!("lru_crawler disabled");
            }
            Ok(())
        }
    };
    match reply {
        Ok(()) => Response::Ok.emit_into(out),
        Err(reply) => reply.emit_into(out),
    }
}

/// `lru_crawler crawl <classes>`: memcached's checks in its order (disabled, a bad class,
/// busy, `hash`, an empty list), then the crawl starts.
fn crawl(cx: &mut Cx<'_>, classes: Classes<'_>) -> Result<(), ErrorReply> {
    let crawls_items = classes_to_walk(cx, classes)?;
    let crawler = &cx.control().crawler;
    if classes == Classes::Hash {
        // Only a metadump walks the hash table.
        return Err(if crawler.running() {
            ErrorReply::CrawlerBusy
        } else {
            ErrorReply::CrawlerError
        });
    }
    let workers = if crawls_items { cx.workers() } else { 0 };
    if !crawler.start(workers) {
        return Err(ErrorReply::CrawlerBusy);
    }
    log::info!("lru_crawler crawl started");
    Ok(())
}

/// Whether `classes` includes memspin's one class (`all` and `hash` do), after the checks
/// `lru_crawler crawl` and `metadump` share: the crawler is enabled, every class is a number
/// from 1 to 63, no crawl runs, and the list names a class at all.
fn classes_to_walk(cx: &Cx<'_>, classes: Classes<'_>) -> Result<bool, ErrorReply> {
    let crawler = &cx.control().crawler;
    if !crawler.enabled() {
        return Err(ErrorReply::CrawlerDisabled);
    }
    let (walks, named) = match classes {
        Classes::All | Classes::Hash => (true, true),
        Classes::List(_) => {
            let numbers: Vec<u32> = classes.numbers().ok_or(ErrorReply::BadClass)?.collect();
            if numbers.iter().any(|&n| n == 0 || n > LARGEST_CLASS) {
                return Err(ErrorReply::BadClass);
            }
            (numbers.contains(&ITEM_CLASS), !numbers.is_empty())
        }
    };
    if crawler.running() {
        return Err(ErrorReply::CrawlerBusy);
    }
    if !named {
        return Err(ErrorReply::CrawlerNotStarted);
    }
    Ok(walks)
}

/// `cache_memlimit <megabytes>`: the whole memory budget from now on (`stats settings`'
/// `maxbytes`). This worker's shard takes its share at once, the others on their next loop
/// iteration; a lower budget is reached by evicting a bounded step per turn.
pub(super) fn cache_memlimit(cx: &mut Cx<'_>, megabytes: u32, noreply: bool, out: &mut Vec<u8>) {
    let bytes = u64::from(megabytes) << 20;
    cx.control().set_memory_limit_bytes(bytes);
    cx.apply_memory_limit();
    log::info!("maxbytes adjusted to {megabytes}m");
    if !noreply {
        Response::Ok.emit_into(out);
    }
}

/// `watch ...`: the connection becomes a log watcher (`OK`), or is told why not.
pub(super) fn watch(cx: &mut Cx<'_>, events: WatchEvents, out: &mut Vec<u8>) {
    let mut kinds = 0;
    for (wanted, kind) in [
        (events.fetchers, EventKind::Fetchers),
        (events.mutations, EventKind::Mutations),
        (events.evictions, EventKind::Evictions),
        (events.connevents, EventKind::ConnEvents),
    ] {
        if wanted {
            kinds |= kind as u32;
        }
    }
    let number = cx.session.record.as_ref().map_or(0, |r| r.number);
    let worker = cx.config().worker;
    let token = cx.session.holes.token;
    match cx.control().watchers.add(number, worker, token, kinds) {
        Ok(()) => {
            log::debug!("<{number} watches (mask {kinds:#x})");
            Response::Ok.emit_into(out);
            cx.session.watching = true;
            if let Some(record) = &cx.session.record {
                record.set_state(ConnState::Watch);
            }
        }
        Err(_) => ErrorReply::WatcherTooMany.emit_into(out),
    }
}

/// `shutdown [graceful]`: stops the server when `-A` allowed it (the connection closes without
/// a reply, as memcached's does); memspin's stop is the same for both modes.
pub(super) fn shutdown(cx: &mut Cx<'_>, mode: ShutdownMode, out: &mut Vec<u8>) {
    let control = cx.control().clone();
    if !control.settings.shutdown_enabled {
        ErrorReply::ShutdownDisabled.emit_into(out);
        return;
    }
    if mode == ShutdownMode::Invalid {
        ErrorReply::ShutdownMode.emit_into(out);
        return;
    }
    log::info!("shutdown requested by a client");
    if let Some(record) = &cx.session.record {
        record.closing(CloseReason::Shutdown);
    }
    control.request_shutdown();
    cx.session.close();
}

/// `lru_crawler metadump <classes>`: starts the dump (see the module docs) whose line, of
/// `line_len` bytes, is at the front of the input.
pub(super) fn metadump(
    cx: &mut Cx<'_>,
    classes: Classes<'_>,
    line_len: usize,
    out: &mut Vec<u8>,
) -> Step {
    let dumps = match classes_to_walk(cx, classes) {
        Ok(dumps) => dumps,
        Err(reply) => {
            reply.emit_into(out);
            return Step::Done(line_len);
        }
    };
    if !dumps {
        Response::End.emit_into(out);
        return Step::Done(line_len);
    }
    // Items the connection's earlier requests stored on other workers are in the dump.
    if cx.session.holes.pending_len() > 0 {
        return Step::Stop(Stop::Blocked);
    }
    let resume = Resume {
        len: line_len,
        at: 0,
        code: METADUMP,
        arg: 0,
        index: 0,
        gather: None,
    };
    dump_slices(cx, resume, out)
}

/// Goes on with a metadump stopped part-way.
pub(super) fn resume_metadump(
    cx: &mut Cx<'_>,
    resume: Resume,
    buf: &[u8],
    out: &mut Vec<u8>,
) -> Step {
    if buf.len() < resume.len {
        return Step::Wait(resume.len - buf.len());
    }
    dump_slices(cx, resume, out)
}

/// Writes (or forwards) slices from `resume`'s worker (`arg`) and bucket (`at`) on, until the
/// last worker's table is done (then `END`, and the line is consumed) or something says to
/// pause.
fn dump_slices(cx: &mut Cx<'_>, mut resume: Resume, out: &mut Vec<u8>) -> Step {
    let workers = cx.workers();
    let me = cx.config().worker;
    let mut first = true;
    loop {
        let worker = resume.arg as usize;
        if worker >= workers {
            break;
        }
        let buckets = if worker == me {
            cx.num_buckets()
        } else {
            cx.control().table_buckets(worker)
        };
        if resume.at >= buckets {
            resume.arg += 1;
            resume.at = 0;
            continue;
        }
        if !first && let Some(stop) = cx.pause(out) {
            cx.session.resume = Some(resume);
            return Step::Stop(stop);
        }
        first = false;
        let (start, end) = (resume.at, resume.at + METADUMP_SLICE_BUCKETS);
        if worker == me {
            dump_local(cx, start, end, out);
        } else {
            let sent = cx.forward_written(worker, part::METADUMP_SLICE, 16, out, |bytes| {
                bytes.extend_from_slice(&(start as u64).to_le_bytes());
                bytes.extend_from_slice(&(end as u64).to_le_bytes());
            });
            if let Err(stop) = sent {
                cx.session.resume = Some(resume);
                return Step::Stop(stop);
            }
        }
        cx.session.spend_turn();
        resume.at = end;
    }
    Response::End.emit_into(out);
    cx.session.resume = None;
    cx.session.scan.bytes = 0;
    Step::Done(resume.len)
}

/// Writes the metadump lines of this worker's buckets `start..end`.
fn dump_local(cx: &mut Cx<'_>, start: usize, end: usize, out: &mut Vec<u8>) {
    let mut line = String::new();
    cx.visit(start, end, cx.now, |key, item, size| {
        line.clear();
        line.push_str("key=");
        uri_encode(&mut line, key);
        let exp = if item.exptime == 0 {
            -1
        } else {
            i64::from(item.exptime)
        };
        let _ = writeln!(
            line,
            " exp={exp} la={} cas={} fetch={} cls={ITEM_CLASS} size={size}",
            item.last_access,
            item.cas,
            if item.fetched { "yes" } else { "no" },
        );
        out.extend_from_slice(line.as_bytes());
    });
}

/// On the owner: a slice of a metadump another worker forwarded (`request`: the first and
/// last bucket, little-endian u64s).
pub(super) fn run_metadump_slice(cx: &mut Cx<'_>, request: &[u8], out: &mut Vec<u8>) {
    let word = |i: usize| {
        request
            .get(i * 8..i * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes) as usize
    };
    dump_local(cx, word(0), word(1), out);
}
