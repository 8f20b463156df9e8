//! The server: `CONFIG GET`, `COMMAND`, `INFO`.

use super::*;
use crate::control::DbMap;

// ---- the server ----

/// `CONFIG GET pattern ...`: the parameters memspin has a value for, matched as Redis matches
/// them (glob-style, any case).
pub(super) fn config(cx: &mut Cx<'_>, spec: &'static Spec, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    if let Err(message) = subcommand(spec, args) {
        return error(out, v, &message);
    }
    let config = cx.config();
    // The whole budget, as `cache_memlimit` last set it.
    let memory = match cx.control().memory_limit_bytes() {
        0 => (config.shard.memory_limit_bytes * config.threads.max(1)) as u64,
        whole => whole,
    }
    .to_string();
    let params: [(&str, String); 8] = [
        ("appendonly", "no".into()),
        ("databases", config.databases.to_string()),
        ("io-threads", config.threads.to_string()),
        ("maxclients", config.conn_limit.to_string()),
        ("maxmemory", memory),
        ("maxmemory-policy", "allkeys-lru".into()),
        ("proto-max-bulk-len", config.shard.max_item_size.to_string()),
        ("save", String::new()),
    ];
    let patterns = &args[1..];
    let matched: Vec<&(&str, String)> = params
        .iter()
        .filter(|(name, _)| patterns.iter().any(|p| glob(p, name.as_bytes())))
        .collect();
    Reply::Map(matched.len()).emit_into(v, out);
    for (name, value) in matched {
        bulk(out, v, name.as_bytes());
        bulk(out, v, value.as_bytes());
    }
}

/// Whether `text` matches the glob `pattern` (`*`, `?`, `[...]` with ranges and `^`, `\`
/// escapes), ignoring case, as Redis's `stringmatchlen` with `nocase`.
pub(super) fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let lower = |b: u8| b.to_ascii_lowercase();
    let (mut p, mut t) = (0, 0);
    // Where to go on from after the last `*`.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let mut advanced = false;
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    advanced = true;
                }
                b'[' => {
                    let mut q = p + 1;
                    let negate = pattern.get(q) == Some(&b'^');
                    if negate {
                        q += 1;
                    }
                    let mut hit = false;
                    while q < pattern.len() && pattern[q] != b']' {
                        if pattern[q] == b'\\' && q + 1 < pattern.len() {
                            q += 1;
                            hit |= lower(pattern[q]) == lower(text[t]);
                        } else if q + 2 < pattern.len()
                            && pattern[q + 1] == b'-'
                            && pattern[q + 2] != b']'
                        {
                            let (a, b) = (lower(pattern[q]), lower(pattern[q + 2]));
                            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                            hit |= (lo..=hi).contains(&lower(text[t]));
                            q += 2;
                        } else {
                            hit |= lower(pattern[q]) == lower(text[t]);
                        }
                        q += 1;
                    }
                    if hit != negate {
                        p = (q + 1).min(pattern.len());
                        t += 1;
                        advanced = true;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if lower(pattern[p + 1]) == lower(text[t]) {
                        p += 2;
                        t += 1;
                        advanced = true;
                    }
                }
                c => {
                    if lower(c) == lower(text[t]) {
                        p += 1;
                        t += 1;
                        advanced = true;
                    }
                }
            }
        }
        if !advanced {
            match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            }
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO [name ...]`, `COMMAND DOCS [name ...]`.
pub(super) fn command_info(spec: &'static Spec, args: &[&[u8]], v: Version, out: &mut Vec<u8>) {
    if args.is_empty() {
        Reply::Array(COMMANDS.len()).emit_into(v, out);
        for spec in COMMANDS {
            write_info(spec, v, out);
        }
        return;
    }
    let sub = match subcommand(spec, args) {
        Ok(sub) => sub,
        Err(message) => return error(out, v, &message),
    };
    let names = &args[1..];
    match sub.name {
        "count" => integer(out, v, COMMANDS.len() as i64),
        "info" if names.is_empty() => {
            Reply::Array(COMMANDS.len()).emit_into(v, out);
            for spec in COMMANDS {
                write_info(spec, v, out);
            }
        }
        "info" => {
            Reply::Array(names.len()).emit_into(v, out);
            for name in names {
                match lookup(name) {
                    Some(spec) => write_info(spec, v, out),
                    None => null(out, v),
                }
            }
        }
        _ => {
            let specs: Vec<&Spec> = if names.is_empty() {
                COMMANDS.iter().collect()
            } else {
                names.iter().filter_map(|name| lookup(name)).collect()
            };
            Reply::Map(specs.len()).emit_into(v, out);
            for spec in specs {
                bulk(out, v, spec.name.as_bytes());
                write_docs(spec, v, out);
            }
        }
    }
}

/// One command's `COMMAND INFO` entry: name, arity, flags, first key, last key, step, ACL
/// categories, tips, key specifications (none given) and subcommands.
pub(super) fn write_info(spec: &Spec, v: Version, out: &mut Vec<u8>) {
    Reply::Array(10).emit_into(v, out);
    bulk(out, v, spec.name.as_bytes());
    integer(out, v, spec.arity);
    Reply::Set(spec.flags.len()).emit_into(v, out);
    for flag in spec.flags {
        simple(out, v, flag);
    }
    integer(out, v, spec.keys.0);
    integer(out, v, spec.keys.1);
    integer(out, v, spec.keys.2);
    Reply::Set(spec.acl.len()).emit_into(v, out);
    for category in spec.acl {
        simple(out, v, category);
    }
    Reply::Set(0).emit_into(v, out);
    Reply::Array(0).emit_into(v, out);
    Reply::Array(spec.subcommands.len()).emit_into(v, out);
    for sub in spec.subcommands {
        Reply::Array(10).emit_into(v, out);
        bulk(out, v, format!("{}|{}", spec.name, sub.name).as_bytes());
        integer(out, v, sub.arity);
        Reply::Set(0).emit_into(v, out);
        for _ in 0..3 {
            integer(out, v, 0);
        }
        Reply::Set(0).emit_into(v, out);
        Reply::Set(0).emit_into(v, out);
        Reply::Array(0).emit_into(v, out);
        Reply::Array(0).emit_into(v, out);
    }
}

/// One command's `COMMAND DOCS` entry: summary, since, group, complexity, and its
/// subcommands' entries.
pub(super) fn write_docs(spec: &Spec, v: Version, out: &mut Vec<u8>) {
    let fields = [
        ("summary", spec.summary),
        ("since", spec.since),
        ("group", spec.group),
        ("complexity", spec.complexity),
    ];
    let with_subs = !spec.subcommands.is_empty();
    Reply::Map(fields.len() + usize::from(with_subs)).emit_into(v, out);
    for (key, value) in fields {
        bulk(out, v, key.as_bytes());
        bulk(out, v, value.as_bytes());
    }
    if with_subs {
        bulk(out, v, b"subcommands");
        Reply::Map(spec.subcommands.len()).emit_into(v, out);
        for sub in spec.subcommands {
            bulk(out, v, format!("{}|{}", spec.name, sub.name).as_bytes());
            Reply::Map(3).emit_into(v, out);
            for (key, value) in [
                ("summary", sub.summary),
                ("since", spec.since),
                ("group", spec.group),
            ] {
                bulk(out, v, key.as_bytes());
                bulk(out, v, value.as_bytes());
            }
        }
    }
}

/// The `INFO` sections asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sections(u8);

impl Sections {
    const SERVER: u8 = 1;
    const CLIENTS: u8 = 2;
    const MEMORY: u8 = 4;
    const STATS: u8 = 8;
    const KEYSPACE: u8 = 16;
    const ALL: u8 = 31;

    /// The sections `INFO` names (none: the default ones, which are all memspin has).
    pub(super) fn of(names: &[&[u8]]) -> Sections {
        if names.is_empty() {
            return Sections(Sections::ALL);
        }
        let mut bits = 0;
        for name in names {
            bits |= match name.to_ascii_lowercase().as_slice() {
                b"server" => Sections::SERVER,
                b"clients" => Sections::CLIENTS,
                b"memory" => Sections::MEMORY,
                b"stats" => Sections::STATS,
                b"keyspace" => Sections::KEYSPACE,
                b"all" | b"default" | b"everything" => Sections::ALL,
                _ => 0,
            };
        }
        Sections(bits)
    }

    /// The figures these sections need: the keyspace walks every shard, so only `INFO` with
    /// that section asks for it.
    pub(super) fn group(self) -> Group {
        if self.has(Sections::KEYSPACE) {
            Group::Keyspace
        } else {
            Group::General
        }
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// The `INFO` text: `# Section` headers, `name:value` lines, an empty line between sections.
/// The keyspace section needs a snapshot of [`Group::Keyspace`] (see [`Sections::group`]);
/// `databases` says which namespace each database number means.
pub(super) fn info_text(sections: Sections, s: &Snapshot, databases: &DbMap, now: Now) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut text = String::new();
    let mut section = |name: &str, lines: &[(&str, String)]| {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let _ = write!(text, "# {name}\r\n");
        for (key, value) in lines {
            let _ = write!(text, "{key}:{value}\r\n");
        }
    };
    let uptime = now.secs().saturating_sub(s.started_unix_secs);
    if sections.has(Sections::SERVER) {
        section(
            "Server",
            &[
                ("redis_version", REDIS_VERSION.into()),
                ("redis_mode", "standalone".into()),
                ("memspin_version", s.version.into()),
                ("arch_bits", usize::BITS.to_string()),
                ("process_id", std::process::id().to_string()),
                ("uptime_in_seconds", uptime.to_string()),
                ("uptime_in_days", (uptime / 86_400).to_string()),
                ("io_threads_active", "0".into()),
                ("server_threads", s.threads.to_string()),
            ],
        );
    }
    if sections.has(Sections::CLIENTS) {
        section(
            "Clients",
            &[
                ("connected_clients", s.info.curr_connections.to_string()),
                ("maxclients", s.conn_limit.to_string()),
                ("blocked_clients", "0".into()),
            ],
        );
    }
    if sections.has(Sections::MEMORY) {
        let used = s.shard.heap_bytes;
        section(
            "Memory",
            &[
                ("used_memory", used.to_string()),
                ("used_memory_human", human(used)),
                ("used_memory_dataset", s.shard.bytes.to_string()),
                ("maxmemory", s.limit_maxbytes.to_string()),
                ("maxmemory_human", human(s.limit_maxbytes)),
                ("maxmemory_policy", "allkeys-lru".into()),
            ],
        );
    }
    if sections.has(Sections::STATS) {
        let c = &s.counters;
        section(
            "Stats",
            &[
                (
                    "total_connections_received",
                    s.info.total_connections.to_string(),
                ),
                ("total_commands_processed", c.requests.to_string()),
                ("total_net_input_bytes", c.bytes_read.to_string()),
                ("total_net_output_bytes", c.bytes_written.to_string()),
                (
                    "rejected_connections",
                    s.info.rejected_connections.to_string(),
                ),
                ("evicted_keys", s.shard.evictions.to_string()),
                ("keyspace_hits", s.shard.get_hits.to_string()),
                ("keyspace_misses", s.shard.get_misses.to_string()),
            ],
        );
    }
    if sections.has(Sections::KEYSPACE) {
        // Databases by number, each counted in the namespace it means now (`SWAPDB`).
        let lines: Vec<(String, String)> = (0..s.keyspace.len())
            .filter_map(|db| {
                let namespace = usize::from(databases.namespace(db as u8));
                let counts = s.keyspace.get(namespace)?;
                (counts.keys > 0).then(|| {
                    let line = format!(
                        "keys={},expires={},avg_ttl={}",
                        counts.keys,
                        counts.expires,
                        counts.avg_ttl_ms()
                    );
                    (format!("db{db}"), line)
                })
            })
            .collect();
        let lines: Vec<(&str, String)> = lines
            .iter()
            .map(|(db, line)| (db.as_str(), line.clone()))
            .collect();
        section("Keyspace", &lines);
    }
    text.into_bytes()
}

/// Bytes as Redis's `bytesToHuman` writes them: `512B`, `1.50K`, `64.00M`, ...
pub(super) fn human(bytes: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "P"),
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size {
            return format!("{:.2}{unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}B")
}
