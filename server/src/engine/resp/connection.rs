//! The connection: `HELLO`, `CLIENT`.

use super::*;

// ---- the connection ----

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`: switches the connection
/// to RESP2 or RESP3 and describes the server, in the new version.
pub(super) fn hello(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let mut wanted = v;
    if let Some(&proto) = args.first() {
        wanted = match parse_integer(proto) {
            None => {
                return error(
                    out,
                    v,
                    "ERR Protocol version is not an integer or out of range",
                );
            }
            Some(2) => Version::Resp2,
            Some(3) => Version::Resp3,
            Some(_) => return error(out, v, "NOPROTO unsupported protocol version"),
        };
    }
    let mut name = None;
    let mut user_ok = true;
    let mut gave_auth = false;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = args[i];
        if option.eq_ignore_ascii_case(b"auth") && more >= 2 {
            // One user, Redis's `default`, with `--requirepass`'s password if there is one.
            user_ok = args[i + 1] == b"default" && password_fits(cx, args[i + 2]);
            gave_auth = true;
            i += 2;
        } else if option.eq_ignore_ascii_case(b"setname") && more >= 1 {
            name = Some(args[i + 1]);
            i += 1;
        } else {
            let mut message = b"ERR Syntax error in HELLO option '".to_vec();
            message.extend_from_slice(option);
            message.push(b'\'');
            return error_bytes(out, v, &message);
        }
        i += 1;
    }
    if !user_ok {
        return error(out, v, WRONGPASS);
    }
    if gave_auth {
        cx.session.authenticated = true;
    } else if !authenticated(cx) {
        return error(out, v, HELLO_NOAUTH);
    }
    if let Some(name) = name
        && !set_name(cx, name)
    {
        return error(out, v, BAD_NAME);
    }
    cx.session.switch(Protocol::Resp(wanted));
    note_client(cx);
    let id = connection_id(cx);
    let v = wanted;
    Reply::Map(7).emit_into(v, out);
    for (key, value) in [("server", "redis"), ("version", REDIS_VERSION)] {
        bulk(out, v, key.as_bytes());
        bulk(out, v, value.as_bytes());
    }
    bulk(out, v, b"proto");
    integer(out, v, if v == Version::Resp3 { 3 } else { 2 });
    bulk(out, v, b"id");
    integer(out, v, id as i64);
    for (key, value) in [("mode", "standalone"), ("role", "master")] {
        bulk(out, v, key.as_bytes());
        bulk(out, v, value.as_bytes());
    }
    bulk(out, v, b"modules");
    Reply::Array(0).emit_into(v, out);
}

/// The connection's number, as `stats conns` shows it.
pub(super) fn connection_id(cx: &mut Cx<'_>) -> u64 {
    cx.connection_number()
}

/// Whether `value` may be a client name or attribute: printable ASCII without spaces.
pub(super) fn printable(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

/// Names the connection (an empty name removes it); false for a name Redis refuses.
pub(super) fn set_name(cx: &mut Cx<'_>, name: &[u8]) -> bool {
    if !printable(name) {
        return false;
    }
    cx.session.name = if name.is_empty() {
        None
    } else {
        Some(name.into())
    };
    note_client(cx);
    true
}

/// Tells the connection's record its RESP version, database and name, as `CLIENT LIST` on
/// other connections shows them; called when one changes, never per command.
pub(super) fn note_client(cx: &Cx<'_>) {
    if let Some(record) = cx.session.record() {
        let resp = match version(cx) {
            Version::Resp2 => 2,
            Version::Resp3 => 3,
        };
        record.note_client(resp, cx.session.db, cx.session.name.as_deref());
    }
}

/// Which connections `CLIENT KILL` closes: every filter given must match.
#[derive(Debug, Default)]
struct KillFilter<'a> {
    id: Option<u64>,
    addr: Option<&'a [u8]>,
    laddr: Option<&'a [u8]>,
    /// A type no connection has (`master`, `replica`, `pubsub`): nothing matches.
    no_type: bool,
    skip_me: bool,
    max_age_secs: Option<i64>,
}

/// `CLIENT KILL ip:port` (closes the client at that address, the asking one too: `OK`, or
/// `ERR No such client`) and `CLIENT KILL [ID id] [TYPE type] [ADDR ip:port] [LADDR ip:port]
/// [USER name] [SKIPME yes|no] [MAXAGE secs]` (the number closed; `SKIPME yes` unless said).
/// A connection on another worker is marked for its worker to close in its next turn
/// (`control::Kills`), after it sends what it owes; the asking one closes after this reply.
fn client_kill(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let old_form = args.len() == 1;
    let mut filter = KillFilter {
        skip_me: !old_form,
        ..KillFilter::default()
    };
    if old_form {
        filter.addr = Some(args[0]);
    } else {
        for pair in args.chunks(2) {
            let [option, value] = pair else {
                return error(out, v, SYNTAX);
            };
            let option = option.to_ascii_lowercase();
            match option.as_slice() {
                b"id" => match parse_integer(value) {
                    Some(n) if n >= 1 => filter.id = Some(n as u64),
                    _ => return error(out, v, "ERR client-id should be greater than 0"),
                },
                b"type" => match value.to_ascii_lowercase().as_slice() {
                    b"normal" => {}
                    b"master" | b"replica" | b"slave" | b"pubsub" => filter.no_type = true,
                    _ => {
                        let mut message = b"ERR Unknown client type '".to_vec();
                        message.extend_from_slice(value);
                        message.push(b'\'');
                        return error_bytes(out, v, &message);
                    }
                },
                b"addr" => filter.addr = Some(value),
                b"laddr" => filter.laddr = Some(value),
                b"user" if *value == b"default" => {}
                b"user" => {
                    let mut message = b"ERR No such user '".to_vec();
                    message.extend_from_slice(value);
                    message.push(b'\'');
                    return error_bytes(out, v, &message);
                }
                b"skipme" if value.eq_ignore_ascii_case(b"yes") => filter.skip_me = true,
                b"skipme" if value.eq_ignore_ascii_case(b"no") => filter.skip_me = false,
                b"maxage" => match parse_integer(value) {
                    Some(n) => filter.max_age_secs = Some(n),
                    None => return error(out, v, NOT_INTEGER),
                },
                _ => return error(out, v, SYNTAX),
            }
        }
    }
    let own = connection_id(cx);
    let now_ms = cx.now.millis();
    let addr_is = |wanted: Option<&[u8]>, addr: Option<std::net::SocketAddr>| {
        wanted.is_none_or(|wanted| addr.is_some_and(|a| a.to_string().as_bytes() == wanted))
    };
    let mut closed = 0;
    for record in cx.control().connections() {
        let matches = record.client().is_some()
            && !filter.no_type
            && filter.id.is_none_or(|id| id == record.number)
            && addr_is(filter.addr, record.peer)
            && addr_is(filter.laddr, record.local)
            && !(filter.skip_me && record.number == own)
            && filter.max_age_secs.is_none_or(|max| {
                max == 0 || (now_ms.saturating_sub(record.opened_ms) / 1000) as i64 >= max
            });
        if !matches {
            continue;
        }
        if record.number == own {
            cx.session.close();
            closed += 1;
        } else if record.request_close() {
            closed += 1;
        }
    }
    if !old_form {
        integer(out, v, closed);
    } else if closed == 0 {
        error(out, v, "ERR No such client");
    } else {
        ok(out, v);
    }
}

/// `CLIENT LIST [TYPE normal | master | replica | slave | pubsub] [ID id ...]`: one line per
/// Redis client connection of every worker, from the connection registry, in the order they
/// opened. Every client is `normal` (no replicas, no pub/sub). The asking connection's line
/// is from its session; another's has the name, database and RESP version its session last
/// noted, and Redis's neutral values for what only its worker knows (`multi=-1`, `cmd=NULL`).
fn client_list(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let mut ids: Option<Vec<u64>> = None;
    match args {
        [] => {}
        [option, kind] if option.eq_ignore_ascii_case(b"type") => {
            let kind = kind.to_ascii_lowercase();
            match kind.as_slice() {
                b"normal" => {}
                b"master" | b"replica" | b"slave" | b"pubsub" => ids = Some(Vec::new()),
                _ => {
                    let mut message = b"ERR Unknown client type '".to_vec();
                    message.extend_from_slice(args[1]);
                    message.push(b'\'');
                    return error_bytes(out, v, &message);
                }
            }
        }
        [option, wanted @ ..] if option.eq_ignore_ascii_case(b"id") && !wanted.is_empty() => {
            let mut list = Vec::with_capacity(wanted.len());
            for id in wanted {
                match parse_integer(id) {
                    Some(n) if n >= 1 => list.push(n as u64),
                    _ => return error(out, v, "ERR Invalid client ID"),
                }
            }
            ids = Some(list);
        }
        _ => return error(out, v, SYNTAX),
    }
    let own = connection_id(cx);
    let now_ms = cx.now.millis();
    let mut text = String::new();
    for record in cx.control().connections() {
        if ids
            .as_ref()
            .is_some_and(|ids| !ids.contains(&record.number))
        {
            continue;
        }
        let Some(mut fields) = record.client() else {
            continue;
        };
        let (mut multi, mut cmd) = (-1, "NULL");
        if record.number == own {
            fields.resp = match v {
                Version::Resp2 => 2,
                Version::Resp3 => 3,
            };
            fields.db = cx.session.db;
            fields.name = cx.session.name.clone().unwrap_or_default();
            multi = cx
                .session
                .queued
                .as_ref()
                .map_or(-1, |q| q.ends.len() as i64);
            cmd = "client|list";
        }
        let addr = |a: Option<std::net::SocketAddr>| a.map_or("?".to_string(), |a| a.to_string());
        text.push_str(&format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags=N db={} sub=0 psub=0 \
             ssub=0 multi={multi} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 \
             oll=0 omem=0 tot-mem=0 events=r cmd={cmd} user=default redir=-1 resp={}\n",
            record.number,
            addr(record.peer),
            addr(record.local),
            String::from_utf8_lossy(&fields.name),
            now_ms.saturating_sub(record.opened_ms) / 1000,
            now_ms.saturating_sub(record.last_cmd_ms()) / 1000,
            fields.db,
            fields.resp,
        ));
    }
    Reply::Verbatim {
        format: b"txt",
        text: text.as_bytes(),
    }
    .emit_into(v, out);
}

/// The subcommand of `spec` named `name`, with its arity checked: `Err` holds the error reply.
pub(super) fn subcommand(spec: &'static Spec, args: &[&[u8]]) -> Result<&'static Sub, String> {
    let name = args.first().copied().unwrap_or_default();
    let Some(sub) = spec
        .subcommands
        .iter()
        .find(|sub| sub.name.as_bytes().eq_ignore_ascii_case(name))
    else {
        return Err(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            String::from_utf8_lossy(c_string(name, 128)),
            spec.name.to_ascii_uppercase()
        ));
    };
    if !arity_fits(sub.arity, args.len() + 1) {
        return Err(format!(
            "ERR wrong number of arguments for '{}|{}' command",
            spec.name, sub.name
        ));
    }
    Ok(sub)
}

/// `CLIENT SETNAME | GETNAME | ID | LIST | KILL | SETINFO | NO-EVICT | NO-TOUCH | INFO` (`INFO` names the
/// fields memspin knows: id, name, db, multi, watch, resp; the addresses are `?`).
pub(super) fn client(cx: &mut Cx<'_>, spec: &'static Spec, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let sub = match subcommand(spec, args) {
        Ok(sub) => sub,
        Err(message) => return error(out, v, &message),
    };
    match sub.name {
        "setname" => {
            if set_name(cx, args[1]) {
                ok(out, v);
            } else {
                error(out, v, BAD_NAME);
            }
        }
        "getname" => match cx.session.name.as_deref() {
            Some(name) => bulk(out, v, name),
            None => null(out, v),
        },
        "id" => {
            let id = connection_id(cx);
            integer(out, v, id as i64);
        }
        "list" => client_list(cx, &args[1..], out),
        "kill" => client_kill(cx, &args[1..], out),
        "no-evict" | "no-touch" => {
            // Accepted and acknowledged: eviction and access times are the store's, for every
            // connection alike.
            let mode = args[1];
            if mode.eq_ignore_ascii_case(b"on") || mode.eq_ignore_ascii_case(b"off") {
                ok(out, v);
            } else {
                error(out, v, SYNTAX);
            }
        }
        "info" => {
            let id = connection_id(cx);
            let name = cx.session.name.as_deref().unwrap_or_default();
            let mut line = format!("id={id} addr=? laddr=? fd=? name=");
            line.push_str(&String::from_utf8_lossy(name));
            let multi = match &cx.session.queued {
                Some(queued) => queued.ends.len() as i64,
                None => -1,
            };
            let resp = match version(cx) {
                Version::Resp2 => 2,
                Version::Resp3 => 3,
            };
            line.push_str(&format!(
                " db={} multi={multi} watch={} resp={resp} lib-name= lib-ver= worker={}\n",
                cx.session.db,
                cx.session.watched.len(),
                cx.config().worker
            ));
            Reply::Verbatim {
                format: b"txt",
                text: line.as_bytes(),
            }
            .emit_into(v, out);
        }
        _ => {
            // SETINFO LIB-NAME | LIB-VER <value>: checked and acknowledged.
            let attribute = args[1];
            if !attribute.eq_ignore_ascii_case(b"lib-name")
                && !attribute.eq_ignore_ascii_case(b"lib-ver")
            {
                let mut message = b"ERR Unrecognized option '".to_vec();
                message.extend_from_slice(attribute);
                message.push(b'\'');
                return error_bytes(out, v, &message);
            }
            if !printable(args[2]) {
                let mut message = b"ERR ".to_vec();
                message.extend_from_slice(attribute);
                message
                    .extend_from_slice(b" cannot contain spaces, newlines or special characters.");
                return error_bytes(out, v, &message);
            }
            ok(out, v);
        }
    }
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, \
                            otherwise the HELLO AUTH <user> <pass> option can be used to \
                            authenticate the client and select the RESP protocol version at the \
                            same time";

/// Whether `password` is `--requirepass`'s (any is, without one).
fn password_fits(cx: &Cx<'_>, password: &[u8]) -> bool {
    cx.config()
        .requirepass
        .as_ref()
        .is_none_or(|secret| *secret.0 == *password)
}

/// Whether the connection may run commands: no password is asked for, it gave it, or the
/// request came from another worker (which checked).
pub(super) fn authenticated(cx: &Cx<'_>) -> bool {
    cx.config().requirepass.is_none() || cx.session.authenticated || cx.forwarded()
}

/// `AUTH [username] password`.
pub(super) fn auth(cx: &mut Cx<'_>, args: &[&[u8]], out: &mut Vec<u8>) {
    let v = version(cx);
    let (user, password) = match args {
        [password] => {
            if cx.config().requirepass.is_none() {
                return error(
                    out,
                    v,
                    "ERR AUTH <password> called without any password configured for the \
                     default user. Are you sure your configuration is correct?",
                );
            }
            (&b"default"[..], *password)
        }
        [user, password] => (*user, *password),
        _ => return error(out, v, SYNTAX),
    };
    if user == b"default" && password_fits(cx, password) {
        cx.session.authenticated = true;
        ok(out, v);
    } else {
        error(out, v, WRONGPASS);
    }
}
