//! The lines of each `stats` group, in memcached's order and under its names: one function per
//! group over a summed [`Snapshot`], shared by the binary and text protocols.

use std::fmt::Display;

use store::Now;

use super::path::is_recovery;
use super::{Group, PREFIX_DELIMITER, SIZES_STEP, Snapshot};
use crate::control::Control;
/// Bytes of a memcached slab page: `stats slabs` counts memory in these.
use crate::engine::config::PAGE_BYTES;

/// Calls `emit(name, value)` for every line of `group`, in memcached's order; `now` is the
/// request's clock. [`Group::Detail`] has no `STAT` lines (see
/// [`Prefixes::dump`](super::Prefixes::dump)), nor has [`Group::CacheDump`] (see
/// [`CacheDump`](super::CacheDump)), nor [`Group::Keyspace`] (Redis's `INFO` writes it).
pub fn render(
    group: Group,
    snapshot: &Snapshot,
    control: &Control,
    now: Now,
    mut emit: impl FnMut(&str, &dyn Display),
) {
    match group {
        Group::General => general(snapshot, control, now.secs(), &mut emit),
        Group::Settings => settings(snapshot, control, &mut emit),
        Group::Items => items(snapshot, &mut emit),
        Group::Slabs => slabs(snapshot, &mut emit),
        Group::Sizes => sizes(snapshot, control, &mut emit),
        Group::Conns => conns(snapshot, control, now, &mut emit),
        Group::Latency => {
            if let Some(latency) = &snapshot.latency {
                latency.lines(&mut emit);
            }
        }
        Group::Workers => workers(snapshot, &mut emit),
        Group::Worker => worker(snapshot, &mut emit),
        Group::Detail | Group::CacheDump { .. } | Group::Keyspace => {}
    }
}

/// The process's user and system CPU time, as memcached prints them (`seconds.micros`).
fn rusage() -> (String, String) {
    let (user, system) = crate::sys::process_cpu_time().unwrap_or_default();
    let time = |t: std::time::Duration| format!("{}.{:06}", t.as_secs(), t.subsec_micros());
    (time(user), time(system))
}

/// Calls `emit(name, value)` for every general statistic, in memcached's order, then
/// memspin's own (`memspin_*`).
pub fn general(
    snapshot: &Snapshot,
    control: &Control,
    now_unix_secs: u64,
    mut emit: impl FnMut(&str, &dyn Display),
) {
    let s = &snapshot.shard;
    let c = &snapshot.counters;
    let i = &snapshot.info;
    let (user, system) = rusage();
    emit("pid", &std::process::id());
    emit(
        "uptime",
        &now_unix_secs.saturating_sub(snapshot.started_unix_secs),
    );
    emit("time", &now_unix_secs);
    emit("version", &snapshot.version);
    emit("pointer_size", &(usize::BITS));
    emit("rusage_user", &user);
    emit("rusage_system", &system);
    emit("max_connections", &snapshot.conn_limit);
    emit("curr_connections", &i.curr_connections);
    emit("total_connections", &i.total_connections);
    emit("rejected_connections", &i.rejected_connections);
    emit("cmd_get", &c.cmd_get);
    emit("cmd_set", &c.cmd_set);
    emit("cmd_flush", &c.cmd_flush);
    emit("cmd_touch", &c.cmd_touch);
    emit("cmd_meta", &c.cmd_meta);
    emit("get_hits", &s.get_hits);
    emit("get_misses", &s.get_misses);
    emit("get_expired", &s.get_expired);
    emit("get_flushed", &s.get_flushed);
    emit("delete_misses", &s.delete_misses);
    emit("delete_hits", &s.delete_hits);
    emit("incr_misses", &s.incr_misses);
    emit("incr_hits", &s.incr_hits);
    emit("decr_misses", &s.decr_misses);
    emit("decr_hits", &s.decr_hits);
    emit("cas_misses", &s.cas_misses);
    emit("cas_hits", &s.cas_hits);
    emit("cas_badval", &s.cas_badval);
    emit("touch_hits", &s.touch_hits);
    emit("touch_misses", &s.touch_misses);
    emit("store_too_large", &c.store_too_large);
    emit("store_no_memory", &c.store_no_memory);
    emit("protocol_errors", &c.protocol_errors);
    emit("bytes_read", &c.bytes_read);
    emit("bytes_written", &c.bytes_written);
    emit("limit_maxbytes", &whole_budget(snapshot, control));
    // memspin keeps listening at the connection limit and refuses the excess (memcached's
    // `maxconns_fast`), so it never stops accepting.
    emit("accepting_conns", &1);
    emit("listen_disabled_num", &0);
    emit("time_in_listen_disabled_us", &0);
    emit("threads", &snapshot.threads);
    emit("conn_yields", &c.conn_yields);
    emit("hash_bytes", &s.heap_bytes.saturating_sub(s.bytes));
    emit(
        "slab_reassign_evictions_nomem",
        &s.slab_reassign_evictions_nomem,
    );
    let background = &snapshot.background;
    emit(
        "slab_reassign_running",
        &u8::from(background.reassign_running),
    );
    emit("slabs_moved", &background.slabs_moved);
    emit("lru_crawler_running", &u8::from(background.crawler_running));
    emit("lru_crawler_starts", &control.crawler.starts());
    let (sent, skipped, watchers) = control.watchers.figures();
    emit("log_watcher_skipped", &skipped);
    emit("log_watcher_sent", &sent);
    emit("log_watchers", &watchers);
    emit("bytes", &s.bytes);
    emit("curr_items", &s.curr_items);
    emit("total_items", &s.total_items);
    // memspin's "global page pool": whole pages of the budget no item holds, which any item
    // may take (see `slabs reassign`).
    emit(
        "slab_global_page_pool",
        &(snapshot.limit_maxbytes.saturating_sub(s.heap_bytes) / PAGE_BYTES),
    );
    emit("expired_unfetched", &s.expired_unfetched);
    emit("evicted_unfetched", &s.evicted_unfetched);
    emit("evictions", &s.evictions);
    emit("reclaimed", &s.reclaimed);
    emit("crawler_reclaimed", &s.crawler_reclaimed);
    emit("crawler_items_checked", &s.crawler_items_checked);
    emit("memspin_forwarded", &c.forwarded);
    let r = &i.recovery;
    emit("memspin_loss_probes", &r.probes);
    emit("memspin_loss_sack_resends", &r.sack_resends);
    emit("memspin_loss_recovered", &r.recovered);
    emit("memspin_loss_spurious", &r.spurious);
    emit("memspin_smoltcp_retransmits", &r.smoltcp_retransmits);
    emit("memspin_loss_probes_withheld", &r.probes_withheld);
    emit("memspin_loss_probes_spurious", &r.probes_spurious);
    emit("memspin_loss_probes_stretched", &r.probes_stretched);
    emit(
        "memspin_loss_peer_retransmit_resends",
        &r.peer_retransmit_resends,
    );
    emit("memspin_loss_probes_recovered", &r.probes_recovered);
    emit("memspin_loss_probes_recovered_us", &r.probes_recovered_us);
    let total = snapshot.loop_totals();
    emit("memspin_busy_us", &(total.busy_ns / 1000));
    emit("memspin_idle_us", &(total.idle_ns / 1000));
    emit("memspin_polls", &total.polls);
    emit("memspin_polls_with_work", &total.polls_with_work);
    emit("memspin_parks", &total.parks);
    // Loss recovery's counters are in the path's too (per worker in `stats workers`); they
    // were written above, once.
    for (name, value) in total.path.iter().filter(|(name, _)| !is_recovery(name)) {
        emit(&format!("memspin_{name}"), &value);
    }
}

/// `yes` or `no`.
fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// The whole memory budget (`-m`, or the last `cache_memlimit`): one worker may answer, so
/// it is the shared figure, not that worker's share; an engine built without settings sums
/// its workers' budgets.
fn whole_budget(snapshot: &Snapshot, control: &Control) -> u64 {
    match control.memory_limit_bytes() {
        0 => snapshot.limit_maxbytes,
        total => total,
    }
}

/// Calls `emit(name, value)` for every `stats settings` line memspin has a value for, in
/// memcached's order, then memspin's own (`memspin_*`), the packet path's last.
pub fn settings(snapshot: &Snapshot, control: &Control, mut emit: impl FnMut(&str, &dyn Display)) {
    let set = &control.settings;
    let (automove, ratio) = control.automove();
    emit("maxbytes", &whole_budget(snapshot, control));
    emit("maxconns", &snapshot.conn_limit);
    emit("tcpport", &control.tcp_port());
    emit("udpport", &0);
    emit("inter", &set.interface);
    emit("verbosity", &control.verbosity());
    emit("evictions", &if set.no_evictions { "off" } else { "on" });
    emit("domain_socket", &"NULL");
    emit("shutdown_command", &yes_no(set.shutdown_enabled));
    emit("num_threads", &snapshot.threads);
    emit("stat_key_prefix", &(PREFIX_DELIMITER as char));
    emit("detail_enabled", &yes_no(control.detail()));
    emit("reqs_per_event", &crate::engine::TURN_REQUESTS);
    emit("cas_enabled", &"yes");
    emit("binding_protocol", &"auto-negotiate");
    emit("auth_enabled_sasl", &"no");
    emit("auth_enabled_ascii", &"no");
    emit("item_size_max", &snapshot.item_size_max);
    emit("maxconns_fast", &"yes");
    emit("slab_reassign", &"yes");
    emit("slab_automove", &automove);
    emit("slab_automove_ratio", &format!("{ratio:.2}"));
    let crawler = &control.crawler;
    emit("lru_crawler", &yes_no(crawler.enabled()));
    emit("lru_crawler_sleep", &crawler.sleep_us());
    emit("lru_crawler_tocrawl", &crawler.tocrawl());
    emit("flush_enabled", &"yes");
    emit("dump_enabled", &"yes");
    emit("lru_maintainer_thread", &"no");
    emit("lru_segmented", &"no");
    emit("temp_lru", &"no");
    emit("idle_timeout", &set.idle_timeout_secs);
    emit("watcher_logbuf_size", &crate::control::WATCHER_BUFFER_BYTES);
    emit("track_sizes", &yes_no(control.sizes()));
    emit("ssl_enabled", &"no");
    emit("memspin_net", &set.net);
    emit("memspin_idle", &set.idle);
    let cpus: Vec<String> = set.cpus.iter().map(ToString::to_string).collect();
    emit("memspin_cpus", &cpus.join(","));
    match control.resp_port() {
        Some(port) => emit("memspin_resp_port", &port),
        None => emit("memspin_resp_port", &"off"),
    }
    if let Some(rto_min) = &set.rto_min {
        emit("memspin_rto_min", rto_min);
    }
    // The packet path's own lines follow: `memspin_xdp_*` on AF_XDP.
    for (name, value) in control.path_settings() {
        if *name != "memspin_net" {
            emit(name, value);
        }
    }
}

/// The one class memspin reports under `stats items` and `stats slabs`.
pub const ITEM_CLASS: u32 = 1;

/// Calls `emit(name, value)` for every `stats items` line: one class (see the module docs),
/// named `items:1:<stat>` as memcached names them; nothing while the cache is empty, as
/// memcached skips empty classes.
pub fn items(snapshot: &Snapshot, mut emit: impl FnMut(&str, &dyn Display)) {
    let s = &snapshot.shard;
    if s.curr_items == 0 {
        return;
    }
    let mut line = |stat: &str, value: &dyn Display| {
        emit(&format!("items:{ITEM_CLASS}:{stat}"), value);
    };
    line("number", &s.curr_items);
    line("age", &snapshot.oldest_idle_secs);
    line("mem_requested", &s.bytes);
    line("evicted", &s.evictions);
    line("evicted_nonzero", &s.evicted_nonzero);
    line("evicted_time", &s.evicted_time);
    line("outofmemory", &s.outofmemory);
    line("tailrepairs", &0);
    line("reclaimed", &s.reclaimed);
    line("expired_unfetched", &s.expired_unfetched);
    line("evicted_unfetched", &s.evicted_unfetched);
    line("crawler_reclaimed", &s.crawler_reclaimed);
    line("crawler_items_checked", &s.crawler_items_checked);
    line("lrutail_reflocked", &0);
}

/// Calls `emit(name, value)` for every `stats slabs` line: the one class's geometry in
/// memcached's terms (1 MiB pages of what the store holds, a chunk the size of the mean item)
/// and its per-class command figures (`1:<stat>`), then `active_slabs` and `total_malloced`
/// (the heap the store is charged for: items and hash table).
pub fn slabs(snapshot: &Snapshot, mut emit: impl FnMut(&str, &dyn Display)) {
    let s = &snapshot.shard;
    let c = &snapshot.counters;
    let active = u64::from(s.curr_items > 0);
    if active == 1 {
        let chunk_size = s.bytes.div_ceil(s.curr_items).max(1);
        let chunks_per_page = (PAGE_BYTES / chunk_size).max(1);
        let total_pages = s.heap_bytes.div_ceil(PAGE_BYTES).max(1);
        let total_chunks = total_pages * chunks_per_page;
        let used = s.curr_items.min(total_chunks);
        let mut line = |stat: &str, value: &dyn Display| {
            emit(&format!("{ITEM_CLASS}:{stat}"), value);
        };
        line("chunk_size", &chunk_size);
        line("chunks_per_page", &chunks_per_page);
        line("total_pages", &total_pages);
        line("total_chunks", &total_chunks);
        line("used_chunks", &used);
        line("free_chunks", &(total_chunks - used));
        line("free_chunks_end", &0);
        line("get_hits", &s.get_hits);
        line("cmd_set", &c.cmd_set);
        line("delete_hits", &s.delete_hits);
        line("incr_hits", &s.incr_hits);
        line("decr_hits", &s.decr_hits);
        line("cas_hits", &s.cas_hits);
        line("cas_badval", &s.cas_badval);
        line("touch_hits", &s.touch_hits);
    }
    emit("active_slabs", &active);
    emit("total_malloced", &s.heap_bytes);
}

/// Calls `emit(name, value)` for every `stats sizes` line: `<size> <count>` for each
/// [`SIZES_STEP`]-byte class holding items, or `sizes_status disabled` after `stats
/// sizes_disable`.
pub fn sizes(snapshot: &Snapshot, control: &Control, mut emit: impl FnMut(&str, &dyn Display)) {
    if !control.sizes() {
        emit("sizes_status", &"disabled");
        return;
    }
    for (class, &count) in snapshot.sizes.iter().enumerate() {
        if count > 0 {
            emit(&(class * SIZES_STEP).to_string(), &count);
        }
    }
}

/// Calls `emit(name, value)` for every `stats conns` line: each worker's listener (then its
/// RESP listener, when Redis clients are served), then every open connection
/// (`<number>:addr`, `:listen_addr`, `:state`, `:secs_since_last_cmd`).
pub fn conns(
    snapshot: &Snapshot,
    control: &Control,
    now: Now,
    mut emit: impl FnMut(&str, &dyn Display),
) {
    let interface = &control.settings.interface;
    let listener = |port: u16| match interface.parse::<std::net::IpAddr>() {
        Ok(ip) => crate::control::conn_addr(std::net::SocketAddr::new(ip, port)),
        Err(_) => format!("tcp:{interface}:{port}"),
    };
    let ports = [Some(control.tcp_port()), control.resp_port()];
    let workers = control.settings.cpus.len().max(1);
    for (number, port) in ports
        .iter()
        .flatten()
        .flat_map(|port| std::iter::repeat_n(port, workers))
        .enumerate()
    {
        emit(&format!("{number}:addr"), &listener(*port));
        emit(&format!("{number}:state"), &"conn_listening");
        // A listener's last command is its opening, as memcached counts it.
        emit(
            &format!("{number}:secs_since_last_cmd"),
            &now.secs().saturating_sub(snapshot.started_unix_secs),
        );
    }
    for record in control.connections() {
        record.stats_lines(now, &mut emit);
    }
}

/// Calls `emit(name, value)` for every `stats workers` line: per worker
/// (`worker:<i>:<stat>`), its loop's busy and idle time, polls, parks, and its packet path's
/// counters.
pub fn workers(snapshot: &Snapshot, mut emit: impl FnMut(&str, &dyn Display)) {
    for w in &snapshot.workers {
        let i = w.worker;
        emit(&format!("worker:{i}:busy_us"), &(w.busy_ns / 1000));
        emit(&format!("worker:{i}:idle_us"), &(w.idle_ns / 1000));
        emit(&format!("worker:{i}:polls"), &w.polls);
        emit(&format!("worker:{i}:polls_with_work"), &w.polls_with_work);
        emit(&format!("worker:{i}:parks"), &w.parks);
        emit(&format!("worker:{i}:forwarded"), &w.forwarded);
        for (name, value) in w.path.iter() {
            emit(&format!("worker:{i}:{name}"), &value);
        }
    }
}

/// `stats worker`: the worker that took the snapshot (the one serving the connection that
/// asked), the number of workers, and the name of the owner hash, so that a client can send
/// each key on a connection its owner serves (`docs/steering.md`).
pub fn worker(snapshot: &Snapshot, mut emit: impl FnMut(&str, &dyn Display)) {
    let worker = snapshot.workers.first().map_or(0, |w| w.worker);
    emit("worker", &worker);
    emit("workers", &snapshot.threads.max(1));
    emit("owner_hash", &owner::OWNER_HASH_NAME);
}
