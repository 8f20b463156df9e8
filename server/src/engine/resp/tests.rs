//! RESP adapter tests: every command and error against Redis 7's replies, RESP3, inline
//! commands, protocol errors, millisecond expiry, the other protocols' view of the same store,
//! fragments and truncations, multi-key commands stopped part-way, and keys of another worker.

use protocol::resp::{Frame, Version, value_len, write_command};
use store::Now;

use crate::engine::marks::MARKS_MAX;
use crate::engine::tests::{PIECES, engine};
use crate::engine::*;

const NOW: u64 = 1_700_000_000;

pub(super) fn now() -> Now {
    Now::from_secs(NOW)
}

pub(super) fn resp2() -> Session {
    Session::speaking(Protocol::Resp(Version::Resp2))
}

pub(super) fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    write_command(&mut out, args);
    out
}

/// Runs `input` at `now`, which must be consumed whole, and returns the replies as text.
#[track_caller]
pub(super) fn run_at(e: &mut Engine, session: &mut Session, input: &[u8], now: Now) -> String {
    let mut out = Vec::new();
    let outcome = e.execute(session, input, &mut out, now);
    assert_eq!(
        outcome.consumed,
        input.len(),
        "{:?} -> {:?}",
        String::from_utf8_lossy(input),
        String::from_utf8_lossy(&out)
    );
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs one command (its arguments as text) and returns the reply.
#[track_caller]
pub(super) fn call(e: &mut Engine, session: &mut Session, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    run_at(e, session, &command(&args), now())
}

/// Commands and the replies redis-server 7.0.15 gives them, run in order on one connection
/// from an empty database (expiry times read at once, so TTLs are whole).
#[rustfmt::skip]
const SCRIPT: &[(&[&str], &str)] = &[
    (&["FLUSHALL"], "+OK\r\n"),
    (&["PING"], "+PONG\r\n"),
    (&["ping", "hello"], "$5\r\nhello\r\n"),
    (&["PING", "a", "b"], "-ERR wrong number of arguments for 'ping' command\r\n"),
    (&["ECHO", "x y"], "$3\r\nx y\r\n"),
    (&["echo"], "-ERR wrong number of arguments for 'echo' command\r\n"),
    (&["GET", "k"], "$-1\r\n"),
    (&["SET", "k", "v"], "+OK\r\n"),
    (&["GET", "k"], "$1\r\nv\r\n"),
    (&["get", "k", "extra"], "-ERR wrong number of arguments for 'get' command\r\n"),
    (&["SET", "k", "v2", "NX"], "$-1\r\n"),
    (&["SET", "k", "v2", "XX", "GET"], "$1\r\nv\r\n"),
    (&["SET", "k", "v3", "NX", "GET"], "$2\r\nv2\r\n"),
    (&["GET", "k"], "$2\r\nv2\r\n"),
    (&["SET", "new", "n", "XX"], "$-1\r\n"),
    (&["GET", "new"], "$-1\r\n"),
    (&["SET", "new", "n", "NX", "GET"], "$-1\r\n"),
    (&["GET", "new"], "$1\r\nn\r\n"),
    (&["SET", "k", "v", "EX", "0"], "-ERR invalid expire time in 'set' command\r\n"),
    (&["SET", "k", "v", "EX", "-1"], "-ERR invalid expire time in 'set' command\r\n"),
    (&["SET", "k", "v", "PX", "0"], "-ERR invalid expire time in 'set' command\r\n"),
    (&["SET", "k", "v", "EX", "9223372036854775807"], "-ERR invalid expire time in 'set' command\r\n"),
    (&["SET", "k", "v", "EX", "1.5"], "-ERR value is not an integer or out of range\r\n"),
    (&["SET", "k", "v", "EX", "x"], "-ERR value is not an integer or out of range\r\n"),
    (&["SET", "k", "v", "EX", "10", "PX", "100"], "-ERR syntax error\r\n"),
    (&["SET", "k", "v", "KEEPTTL", "EX", "1"], "-ERR syntax error\r\n"),
    (&["SET", "k", "v", "EX", "1", "KEEPTTL"], "-ERR syntax error\r\n"),
    (&["SET", "k", "v", "NX", "XX"], "-ERR syntax error\r\n"),
    (&["SET", "k", "v", "foo"], "-ERR syntax error\r\n"),
    (&["SET", "k", "v", "EX"], "-ERR syntax error\r\n"),
    (&["SET", "k", "v", "GET", "GET"], "$2\r\nv2\r\n"),
    (&["SET", "k", "v", "foo", "EX", "x"], "-ERR syntax error\r\n"),
    (&["SET", "gone", "v", "EXAT", "1"], "+OK\r\n"),
    (&["GET", "gone"], "$-1\r\n"),
    (&["SET", "gone", "v", "PXAT", "100"], "+OK\r\n"),
    (&["EXISTS", "gone"], ":0\r\n"),
    (&["SET", "t", "v", "EX", "100"], "+OK\r\n"),
    (&["TTL", "t"], ":100\r\n"),
    (&["SET", "t", "w", "KEEPTTL"], "+OK\r\n"),
    (&["TTL", "t"], ":100\r\n"),
    (&["SET", "t", "x"], "+OK\r\n"),
    (&["TTL", "t"], ":-1\r\n"),
    // Regression: an expiry option given twice was a syntax error; Redis takes the last.
    (&["SET", "t", "x", "EX", "5", "EX", "100"], "+OK\r\n"),
    (&["TTL", "t"], ":100\r\n"),
    (&["SET", "t", "x", "PXAT", "x", "PXAT", "x"], "-ERR value is not an integer or out of range\r\n"),
    (&["SET", "t", "x", "KEEPTTL", "KEEPTTL", "NX", "NX"], "$-1\r\n"),
    (&["SET", "t", "x", "EX", "5", "PX", "5"], "-ERR syntax error\r\n"),
    (&["SET", "t", "x"], "+OK\r\n"),
    (&["SETNX", "k", "v"], ":0\r\n"),
    (&["SETNX", "k2", "v"], ":1\r\n"),
    (&["SETNX", "k2"], "-ERR wrong number of arguments for 'setnx' command\r\n"),
    (&["SETEX", "k", "0", "v"], "-ERR invalid expire time in 'setex' command\r\n"),
    (&["SETEX", "k", "x", "v"], "-ERR value is not an integer or out of range\r\n"),
    (&["SETEX", "k", "100", "v"], "+OK\r\n"),
    (&["TTL", "k"], ":100\r\n"),
    (&["PSETEX", "k", "-1", "v"], "-ERR invalid expire time in 'psetex' command\r\n"),
    (&["PSETEX", "k", "100000", "v"], "+OK\r\n"),
    (&["TTL", "k"], ":100\r\n"),
    (&["GETSET", "k", "new"], "$1\r\nv\r\n"),
    (&["GETSET", "nokey", "x"], "$-1\r\n"),
    (&["TTL", "k"], ":-1\r\n"),
    (&["GETSET", "k"], "-ERR wrong number of arguments for 'getset' command\r\n"),
    (&["GETDEL", "k"], "$3\r\nnew\r\n"),
    (&["GETDEL", "k"], "$-1\r\n"),
    (&["GETDEL", "a", "b"], "-ERR wrong number of arguments for 'getdel' command\r\n"),
    (&["SET", "k", "v", "EX", "100"], "+OK\r\n"),
    (&["GETEX", "k"], "$1\r\nv\r\n"),
    (&["TTL", "k"], ":100\r\n"),
    (&["GETEX", "k", "PERSIST"], "$1\r\nv\r\n"),
    (&["TTL", "k"], ":-1\r\n"),
    (&["GETEX", "k", "EX", "50"], "$1\r\nv\r\n"),
    (&["TTL", "k"], ":50\r\n"),
    (&["GETEX", "k", "EX", "0"], "-ERR invalid expire time in 'getex' command\r\n"),
    (&["GETEX", "k", "PX", "-5"], "-ERR invalid expire time in 'getex' command\r\n"),
    (&["GETEX", "k", "PERSIST", "EX", "5"], "-ERR syntax error\r\n"),
    (&["GETEX", "missing", "EX", "5"], "$-1\r\n"),
    // Regression: Redis looks the key up before it reads the expiry's value, and takes an
    // option given twice.
    (&["GETEX", "missing", "EX", "0"], "$-1\r\n"),
    (&["GETEX", "missing", "PX", "x"], "$-1\r\n"),
    (&["GETEX", "k", "EX", "5", "EX", "50"], "$1\r\nv\r\n"),
    (&["TTL", "k"], ":50\r\n"),
    (&["GETEX", "k", "PERSIST", "PERSIST"], "$1\r\nv\r\n"),
    (&["TTL", "k"], ":-1\r\n"),
    (&["GETEX", "k", "EX", "50"], "$1\r\nv\r\n"),
    (&["GETEX", "k", "foo"], "-ERR syntax error\r\n"),
    (&["GETEX", "k", "EX"], "-ERR syntax error\r\n"),
    (&["GETEX", "k", "EXAT", "1"], "$1\r\nv\r\n"),
    (&["EXISTS", "k"], ":0\r\n"),
    (&["MSET", "a", "1", "b", "2"], "+OK\r\n"),
    (&["MSET", "a", "1", "b"], "-ERR wrong number of arguments for 'mset' command\r\n"),
    (&["MSET"], "-ERR wrong number of arguments for 'mset' command\r\n"),
    (&["MGET", "a", "b", "zz", "a"], "*4\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n$1\r\n1\r\n"),
    (&["MGET"], "-ERR wrong number of arguments for 'mget' command\r\n"),
    (&["MSETNX", "a", "1", "c", "3"], ":0\r\n"),
    (&["MSETNX", "c", "1", "d", "3"], ":1\r\n"),
    (&["MGET", "c", "d"], "*2\r\n$1\r\n1\r\n$1\r\n3\r\n"),
    (&["MSETNX", "e"], "-ERR wrong number of arguments for 'msetnx' command\r\n"),
    (&["MSETNX", "e", "1", "f"], "-ERR wrong number of arguments for 'msetnx' command\r\n"),
    (&["DEL", "a", "a", "zz", "c"], ":2\r\n"),
    (&["UNLINK", "b"], ":1\r\n"),
    (&["EXISTS", "d", "d", "zz"], ":2\r\n"),
    (&["EXISTS"], "-ERR wrong number of arguments for 'exists' command\r\n"),
    (&["DEL"], "-ERR wrong number of arguments for 'del' command\r\n"),
    (&["SET", "n", "10"], "+OK\r\n"),
    (&["INCR", "n"], ":11\r\n"),
    (&["DECR", "n"], ":10\r\n"),
    (&["INCRBY", "n", "-5"], ":5\r\n"),
    (&["DECRBY", "n", "3"], ":2\r\n"),
    (&["GET", "n"], "$1\r\n2\r\n"),
    (&["INCRBY", "n", "x"], "-ERR value is not an integer or out of range\r\n"),
    (&["INCRBY", "n", "9223372036854775807"], "-ERR increment or decrement would overflow\r\n"),
    (&["DECRBY", "n", "-9223372036854775808"], "-ERR decrement would overflow\r\n"),
    (&["DECRBY", "n", "9223372036854775807"], ":-9223372036854775805\r\n"),
    (&["SET", "n", "9223372036854775807"], "+OK\r\n"),
    (&["INCR", "n"], "-ERR increment or decrement would overflow\r\n"),
    (&["SET", "n", "-9223372036854775808"], "+OK\r\n"),
    (&["DECR", "n"], "-ERR increment or decrement would overflow\r\n"),
    (&["SET", "n", " 1"], "+OK\r\n"),
    (&["INCR", "n"], "-ERR value is not an integer or out of range\r\n"),
    (&["SET", "n", "01"], "+OK\r\n"),
    (&["INCR", "n"], "-ERR value is not an integer or out of range\r\n"),
    (&["SET", "n", "1.0"], "+OK\r\n"),
    (&["INCR", "n"], "-ERR value is not an integer or out of range\r\n"),
    (&["SET", "n", ""], "+OK\r\n"),
    (&["INCR", "n"], "-ERR value is not an integer or out of range\r\n"),
    (&["INCR", "newn"], ":1\r\n"),
    (&["DECR", "newn2"], ":-1\r\n"),
    (&["INCRBY", "newn3", "-7"], ":-7\r\n"),
    (&["INCR"], "-ERR wrong number of arguments for 'incr' command\r\n"),
    (&["INCRBY", "n"], "-ERR wrong number of arguments for 'incrby' command\r\n"),
    (&["SET", "ttlkeep", "5", "EX", "100"], "+OK\r\n"),
    (&["INCR", "ttlkeep"], ":6\r\n"),
    (&["TTL", "ttlkeep"], ":100\r\n"),
    (&["APPEND", "ap", "hello"], ":5\r\n"),
    (&["APPEND", "ap", " world"], ":11\r\n"),
    (&["GET", "ap"], "$11\r\nhello world\r\n"),
    (&["STRLEN", "ap"], ":11\r\n"),
    (&["STRLEN", "nope"], ":0\r\n"),
    (&["APPEND", "ap"], "-ERR wrong number of arguments for 'append' command\r\n"),
    (&["EXPIRE", "ap", "100"], ":1\r\n"),
    (&["TTL", "ap"], ":100\r\n"),
    (&["EXPIRE", "ap", "100", "NX"], ":0\r\n"),
    (&["EXPIRE", "ap", "50", "GT"], ":0\r\n"),
    (&["EXPIRE", "ap", "200", "GT"], ":1\r\n"),
    (&["TTL", "ap"], ":200\r\n"),
    (&["EXPIRE", "ap", "150", "LT"], ":1\r\n"),
    (&["TTL", "ap"], ":150\r\n"),
    (&["EXPIRE", "ap", "100", "foo"], "-ERR Unsupported option foo\r\n"),
    (&["EXPIRE", "ap", "100", "NX", "XX"], "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n"),
    (&["EXPIRE", "ap", "100", "GT", "LT"], "-ERR GT and LT options at the same time are not compatible\r\n"),
    (&["EXPIRE", "ap", "x"], "-ERR value is not an integer or out of range\r\n"),
    (&["EXPIRE", "ap", "x", "foo"], "-ERR Unsupported option foo\r\n"),
    (&["EXPIRE", "nokey", "10"], ":1\r\n"),
    (&["EXPIRE", "ap", "9223372036854775807"], "-ERR invalid expire time in 'expire' command\r\n"),
    (&["PEXPIRE", "ap", "9223372036854775807"], "-ERR invalid expire time in 'pexpire' command\r\n"),
    (&["EXPIREAT", "ap", "99999999999"], ":1\r\n"),
    (&["PEXPIREAT", "ap", "99999999999999"], ":1\r\n"),
    (&["PERSIST", "ap"], ":1\r\n"),
    (&["PERSIST", "ap"], ":0\r\n"),
    (&["TTL", "ap"], ":-1\r\n"),
    (&["PTTL", "ap"], ":-1\r\n"),
    (&["TTL", "nokey"], ":10\r\n"),
    (&["PTTL", "nokey"], ":10000\r\n"),
    (&["EXPIRE", "ap", "10", "XX"], ":0\r\n"),
    (&["TTL", "ap"], ":-1\r\n"),
    (&["PERSIST", "ap"], ":0\r\n"),
    (&["EXPIRE", "ap", "10", "LT"], ":1\r\n"),
    (&["TTL", "ap"], ":10\r\n"),
    (&["PERSIST", "ap"], ":1\r\n"),
    (&["EXPIRE", "ap", "10", "GT"], ":0\r\n"),
    (&["TTL", "ap"], ":-1\r\n"),
    (&["EXPIRE", "ap", "-1"], ":1\r\n"),
    (&["EXISTS", "ap"], ":0\r\n"),
    (&["PERSIST", "nokey"], ":1\r\n"),
    (&["EXPIRE", "ap"], "-ERR wrong number of arguments for 'expire' command\r\n"),
    (&["TTL"], "-ERR wrong number of arguments for 'ttl' command\r\n"),
    (&["SET", "ty", "v"], "+OK\r\n"),
    (&["TYPE", "ty"], "+string\r\n"),
    (&["TYPE", "nokey"], "+string\r\n"),
    (&["TYPE"], "-ERR wrong number of arguments for 'type' command\r\n"),
    (&["SELECT", "0"], "+OK\r\n"),
    (&["SELECT", "x"], "-ERR value is not an integer or out of range\r\n"),
    (&["SELECT"], "-ERR wrong number of arguments for 'select' command\r\n"),
    (&["FLUSHDB", "ASYNC"], "+OK\r\n"),
    (&["DBSIZE"], ":0\r\n"),
    (&["SET", "a", "1"], "+OK\r\n"),
    (&["DBSIZE"], ":1\r\n"),
    (&["DBSIZE", "x"], "-ERR wrong number of arguments for 'dbsize' command\r\n"),
    (&["FLUSHALL", "SYNC"], "+OK\r\n"),
    (&["FLUSHALL", "foo"], "-ERR syntax error\r\n"),
    (&["FLUSHALL", "async", "sync"], "-ERR syntax error\r\n"),
    (&["DBSIZE"], ":0\r\n"),
    (&["CLIENT", "SETNAME", "my name"], "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"),
    (&["CLIENT", "SETNAME", "myname"], "+OK\r\n"),
    (&["CLIENT", "GETNAME"], "$6\r\nmyname\r\n"),
    (&["CLIENT", "SETNAME", ""], "+OK\r\n"),
    (&["CLIENT", "GETNAME"], "$-1\r\n"),
    (&["CLIENT"], "-ERR wrong number of arguments for 'client' command\r\n"),
    (&["CLIENT", "foo"], "-ERR unknown subcommand 'foo'. Try CLIENT HELP.\r\n"),
    (&["CLIENT", "SETNAME"], "-ERR wrong number of arguments for 'client|setname' command\r\n"),
    (&["CLIENT", "GETNAME", "x"], "-ERR wrong number of arguments for 'client|getname' command\r\n"),
    (&["CONFIG", "GET", "save"], "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"),
    (&["CONFIG", "GET", "appendonly"], "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"),
    (&["CONFIG", "GET", "nosuch"], "*0\r\n"),
    (&["CONFIG", "GET"], "-ERR wrong number of arguments for 'config|get' command\r\n"),
    (&["CONFIG", "foo"], "-ERR unknown subcommand 'foo'. Try CONFIG HELP.\r\n"),
    (&["CONFIG"], "-ERR wrong number of arguments for 'config' command\r\n"),
    (&["COMMAND", "foo"], "-ERR unknown subcommand 'foo'. Try COMMAND HELP.\r\n"),
    (&["COMMAND", "COUNT", "x"], "-ERR wrong number of arguments for 'command|count' command\r\n"),
    (&["COMMAND", "INFO", "nosuchcommand"], "*1\r\n$-1\r\n"),
    (&["unknowncmd"], "-ERR unknown command 'unknowncmd', with args beginning with: \r\n"),
    (&["foo", "a", "b"], "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"),
    (&["GET", "a", "b"], "-ERR wrong number of arguments for 'get' command\r\n"),
    (&["HELLO", "4"], "-NOPROTO unsupported protocol version\r\n"),
    (&["HELLO", "x"], "-ERR Protocol version is not an integer or out of range\r\n"),
    (&["HELLO", "2", "auth", "a", "b"], "-WRONGPASS invalid username-password pair or user is disabled.\r\n"),
    (&["HELLO", "3", "foo"], "-ERR Syntax error in HELLO option 'foo'\r\n"),
    (&["HELLO", "2", "SETNAME", "bad name"], "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"),
    (&["QUIT"], "+OK\r\n"),
];

#[test]
fn command_names_are_found_in_any_case_and_only_them() {
    use super::{COMMANDS, lookup};
    for spec in COMMANDS {
        // What `lookup`'s comparison relies on.
        assert!(
            spec.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{}",
            spec.name
        );
        let upper = spec.name.to_ascii_uppercase();
        let mixed: String = spec
            .name
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        for name in [spec.name, &upper, &mixed] {
            assert_eq!(lookup(name.as_bytes()).map(|s| s.name), Some(spec.name));
        }
        // A byte that differs from a letter in more than its case bit, anywhere, is another
        // name: `get` is not `ge\x14` (0x14 | 0x20 is `4`) nor `GE@`, and `bitfield_ro` is
        // not `bitfield\x7fro` (0x7f is `_` with the case bit).
        for at in 0..spec.name.len() {
            for other in [
                0x14u8,
                0x7f,
                b'@',
                b'`',
                b'{',
                0xf4,
                spec.name.as_bytes()[at] ^ 0x01,
            ] {
                let mut name = spec.name.as_bytes().to_vec();
                name[at] = other;
                assert!(
                    lookup(&name).is_none_or(|s| s.name.as_bytes() == name),
                    "{:?}",
                    name.escape_ascii().to_string()
                );
            }
        }
    }
    assert!(lookup(b"").is_none());
    assert!(lookup(b"gett").is_none());
}

#[test]
fn every_command_and_error_as_redis_answers_them() {
    let mut e = engine();
    let mut session = resp2();
    for (args, want) in SCRIPT {
        let got = call(&mut e, &mut session, args);
        assert_eq!(got, *want, "{args:?}");
    }
    assert!(session.is_closing(), "QUIT closes");
}

#[test]
fn the_script_in_pieces_and_pipelined_gives_the_same_replies() {
    let mut input = Vec::new();
    let mut want = String::new();
    for (args, reply) in SCRIPT {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        input.extend_from_slice(&command(&args));
        want.push_str(reply);
    }
    for piece in PIECES {
        let mut e = engine();
        let mut session = resp2();
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        for chunk in input.chunks(piece) {
            pending.extend_from_slice(chunk);
            let outcome = e.execute(&mut session, &pending, &mut out, now());
            pending.drain(..outcome.consumed);
        }
        assert!(pending.is_empty(), "piece {piece}");
        assert_eq!(String::from_utf8_lossy(&out), want, "piece {piece}");
    }
}

/// The adapter parses a pipeline ahead, 16 commands at a time, warms the store for their keys
/// and runs them from that parse (`Ahead`): that must change no reply, whatever the pipeline
/// holds (more than 16 commands, inline ones among them) and wherever it is cut.
#[test]
fn prefetching_a_pipeline_changes_no_reply() {
    let mut run = Vec::new();
    for i in 0..40u8 {
        let key = [b'k', b'0' + i / 5];
        match i % 5 {
            0 => run.extend_from_slice(&command(&[b"SET", &key, &[b'a' + i % 26; 5]])),
            1 => run.extend_from_slice(&command(&[b"GET", &key])),
            2 => run.extend_from_slice(&command(&[b"MGET", &key, b"absent", b"k1"])),
            3 => run.extend_from_slice(b"GET k3\r\n"),
            _ => run.extend_from_slice(&command(&[b"INCR", b"n"])),
        }
    }
    let replies = |piece: usize| {
        let (mut e, mut session, mut out) = (engine(), resp2(), Vec::new());
        let mut pending: Vec<u8> = Vec::new();
        for chunk in run.chunks(piece) {
            pending.extend_from_slice(chunk);
            let outcome = e.execute(&mut session, &pending, &mut out, now());
            pending.drain(..outcome.consumed);
            assert!(!outcome.close, "piece {piece}");
        }
        assert!(pending.is_empty(), "piece {piece}");
        String::from_utf8_lossy(&out).into_owned()
    };
    let one_by_one = replies(1);
    assert!(
        one_by_one.contains("$5\r\n") && one_by_one.ends_with(":8\r\n"),
        "{one_by_one}"
    );
    for piece in [run.len(), 7, 26, 100, 999] {
        assert_eq!(replies(piece), one_by_one, "pieces of {piece}");
    }
    for cut in 0..run.len() {
        let (mut e, mut session, mut out) = (engine(), resp2(), Vec::new());
        let outcome = e.execute(&mut session, &run[..cut], &mut out, now());
        assert!(outcome.consumed <= cut && !outcome.close, "cut at {cut}");
    }
    let mut garbage = b"*9\r\n$3\r\nGET\r\n$-5\r\n".to_vec();
    garbage.extend_from_slice(&run);
    let _ = engine().execute(&mut resp2(), &garbage, &mut Vec::new(), now());
}

/// A pipeline is parsed ahead once and executed from what the parse kept, for one engine
/// call only: a call that stops part-way (its turn used up) and the next call, given other
/// bytes in the same buffer where the rest of the pipeline was, answers those bytes.
#[test]
fn commands_parsed_ahead_are_not_taken_from_the_next_calls_bytes() {
    let (mut e, mut session) = (engine(), resp2());
    let set = command(&[b"SET", b"k", b"v"]);
    let get = command(&[b"GET", b"k"]);
    let mut buf = set.clone();
    for _ in 0..8 {
        buf.extend_from_slice(&get);
    }
    let mut out = Vec::new();
    session.begin_turn(2);
    let outcome = e.execute(&mut session, &buf, &mut out, now());
    assert_eq!(outcome.consumed, set.len() + get.len());
    assert_eq!(String::from_utf8_lossy(&out), "+OK\r\n$1\r\nv\r\n");
    // Other commands arrive where the rest of the pipeline was (the caller's buffer changed
    // between calls), and the next call starts where the next kept `GET` would have been.
    let consumed = outcome.consumed;
    let mut next = command(&[b"ECHO", b"hello"]);
    next.extend_from_slice(&command(&[b"STRLEN", b"k"]));
    next.extend_from_slice(&command(&[b"PING"]));
    assert!(next.len() <= buf.len() - consumed);
    buf.truncate(consumed);
    buf.extend_from_slice(&next);
    let rest = &buf[consumed..];
    session.begin_turn(64);
    out.clear();
    let outcome = e.execute(&mut session, rest, &mut out, now());
    assert_eq!(outcome.consumed, next.len());
    assert_eq!(
        String::from_utf8_lossy(&out),
        "$5\r\nhello\r\n:1\r\n+PONG\r\n"
    );
}

#[test]
fn every_truncation_consumes_nothing_and_asks_for_more() {
    let mut input = command(&[b"SET", b"key", b"value", b"PX", b"100"]);
    input.extend_from_slice(b"GET key\r\n");
    let first = command(&[b"SET", b"key", b"value", b"PX", b"100"]).len();
    for n in 1..first {
        let mut e = engine();
        let mut session = resp2();
        let mut out = Vec::new();
        let outcome = e.execute(&mut session, &input[..n], &mut out, now());
        assert_eq!(
            (outcome.consumed, outcome.stop),
            (0, Stop::Input),
            "cut at {n}"
        );
        assert!(outcome.needed >= 1 && out.is_empty(), "cut at {n}");
    }
}

#[test]
fn resp3_after_hello_3() {
    let mut e = engine();
    let mut session = resp2();
    let hello = call(&mut e, &mut session, &["HELLO"]);
    assert!(
        hello.starts_with("*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n"),
        "{hello}"
    );
    assert!(
        hello.contains("$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:1\r\n"),
        "{hello}"
    );
    let hello = call(&mut e, &mut session, &["HELLO", "3", "SETNAME", "app"]);
    assert!(hello.starts_with("%7\r\n$6\r\nserver\r\n"), "{hello}");
    assert!(hello.ends_with("$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"), "{hello}");
    assert!(
        hello.contains("$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:1\r\n"),
        "the same connection number: {hello}"
    );
    assert_eq!(session.protocol(), Some(Protocol::Resp(Version::Resp3)));
    assert_eq!(
        call(&mut e, &mut session, &["CLIENT", "GETNAME"]),
        "$3\r\napp\r\n"
    );
    assert_eq!(call(&mut e, &mut session, &["GET", "nope"]), "_\r\n");
    call(&mut e, &mut session, &["SET", "a", "1"]);
    assert_eq!(
        call(&mut e, &mut session, &["MGET", "a", "nope"]),
        "*2\r\n$1\r\n1\r\n_\r\n"
    );
    assert_eq!(
        call(&mut e, &mut session, &["CONFIG", "GET", "save"]),
        "%1\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    let info = call(&mut e, &mut session, &["INFO", "keyspace"]);
    assert_eq!(
        info,
        "=48\r\ntxt:# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n\r\n"
    );
    // And back.
    assert!(call(&mut e, &mut session, &["HELLO", "2"]).starts_with("*14\r\n"));
    assert_eq!(call(&mut e, &mut session, &["GET", "nope"]), "$-1\r\n");
    // HELLO with AUTH: the default user, whatever the password.
    assert!(
        call(
            &mut e,
            &mut session,
            &["HELLO", "3", "AUTH", "default", "x"]
        )
        .starts_with("%7")
    );
}

#[test]
fn client_ids_are_unique_and_kept() {
    let mut e = engine();
    let (mut a, mut b) = (resp2(), resp2());
    assert_eq!(call(&mut e, &mut a, &["CLIENT", "ID"]), ":1\r\n");
    assert_eq!(call(&mut e, &mut b, &["CLIENT", "ID"]), ":2\r\n");
    assert_eq!(call(&mut e, &mut a, &["CLIENT", "ID"]), ":1\r\n");
    assert_eq!(
        call(
            &mut e,
            &mut a,
            &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]
        ),
        "+OK\r\n"
    );
    assert_eq!(
        call(&mut e, &mut a, &["CLIENT", "SETINFO", "lib-ver", "4.3.4"]),
        "+OK\r\n"
    );
    assert_eq!(
        call(&mut e, &mut a, &["CLIENT", "SETINFO", "foo", "1"]),
        "-ERR Unrecognized option 'foo'\r\n"
    );
    assert_eq!(
        call(&mut e, &mut a, &["CLIENT", "SETINFO", "lib-name", "a b"]),
        "-ERR lib-name cannot contain spaces, newlines or special characters.\r\n"
    );
}

#[test]
fn inline_commands_as_redis_benchmark_and_telnet_send_them() {
    let mut e = engine();
    let mut session = resp2();
    let out = run_at(
        &mut e,
        &mut session,
        b"PING\r\nSET k \"a b\"\r\nget k\nMGET k nope\r\n\r\nECHO 'it\\'s'\r\n",
        now(),
    );
    assert_eq!(
        out,
        "+PONG\r\n+OK\r\n$3\r\na b\r\n*2\r\n$3\r\na b\r\n$-1\r\n$4\r\nit's\r\n"
    );
}

#[test]
fn unknown_commands_are_answered_and_the_connection_goes_on() {
    let mut e = engine();
    let mut session = resp2();
    let long = "x".repeat(200);
    let got = call(&mut e, &mut session, &["FOO", &long, "b"]);
    assert_eq!(
        got,
        format!(
            "-ERR unknown command 'FOO', with args beginning with: '{}' \r\n",
            &long[..128]
        )
    );
    // A newline in a name or argument is written as a space, so the reply stays one line.
    let got = run_at(&mut e, &mut session, &command(&[b"A\r\nB", b"c\nd"]), now());
    assert_eq!(
        got,
        "-ERR unknown command 'A  B', with args beginning with: 'c d' \r\n"
    );
    assert!(!session.is_closing());
    assert_eq!(call(&mut e, &mut session, &["PING"]), "+PONG\r\n");
    assert_eq!(e.counters().protocol_errors, 2);
}

#[track_caller]
fn closes_with(input: &[u8], want: &str) {
    let mut e = engine();
    let mut session = resp2();
    let mut out = Vec::new();
    let outcome = e.execute(&mut session, input, &mut out, now());
    assert!(outcome.close, "{:?}", String::from_utf8_lossy(input));
    assert_eq!(outcome.stop, Stop::Closing);
    assert_eq!(
        String::from_utf8_lossy(&out),
        want,
        "{:?}",
        String::from_utf8_lossy(input)
    );
    assert_eq!(e.counters().protocol_errors, 1);
}

#[test]
fn bad_input_gets_redis_protocol_errors_and_a_close() {
    closes_with(
        b"*2\r\n$3\r\nGET\r\n+k\r\n",
        "-ERR Protocol error: expected '$', got '+'\r\n",
    );
    closes_with(
        b"*1\r\n$-5\r\n",
        "-ERR Protocol error: invalid bulk length\r\n",
    );
    closes_with(
        b"*x\r\n",
        "-ERR Protocol error: invalid multibulk length\r\n",
    );
    closes_with(
        b"*3000000\r\n",
        "-ERR Protocol error: invalid multibulk length\r\n",
    );
    closes_with(
        b"SET k \"v\r\n",
        "-ERR Protocol error: unbalanced quotes in request\r\n",
    );
    // Replies before the bad command are kept.
    closes_with(
        b"PING\r\n*1\r\n$4\r\nPING\r\n*a\r\n",
        "+PONG\r\n+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n",
    );
}

#[test]
fn negative_and_zero_counts_are_nothing() {
    let mut e = engine();
    let mut session = resp2();
    assert_eq!(
        run_at(&mut e, &mut session, b"*0\r\n*-1\r\n*-7\r\nPING\r\n", now()),
        "+PONG\r\n"
    );
}

#[test]
fn a_huge_announced_value_is_never_allocated() {
    // A value of the largest size allowed, announced and then sent in pieces: the engine asks
    // for what is missing, and only consumes it once it is all there.
    let mut e = engine();
    let mut session = resp2();
    let header = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048000\r\n";
    let mut out = Vec::new();
    let outcome = e.execute(&mut session, header, &mut out, now());
    assert_eq!((outcome.consumed, outcome.needed), (0, 1_048_002));
    assert!(out.is_empty());
}

#[test]
fn milliseconds_are_honoured_to_the_millisecond() {
    let mut e = engine();
    let mut session = resp2();
    let start = Now::from_millis(NOW * 1000 + 250);
    let at = |ms: u64| Now::from_millis(start.millis() + ms);
    let run = |e: &mut Engine, s: &mut Session, args: &[&[u8]], when: Now| {
        run_at(e, s, &command(args), when)
    };
    assert_eq!(
        run(
            &mut e,
            &mut session,
            &[b"SET", b"k", b"v", b"PX", b"100"],
            start
        ),
        "+OK\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"PTTL", b"k"], at(1)),
        ":99\r\n"
    );
    assert_eq!(run(&mut e, &mut session, &[b"TTL", b"k"], at(1)), ":0\r\n");
    assert_eq!(
        run(&mut e, &mut session, &[b"GET", b"k"], at(99)),
        "$1\r\nv\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"GET", b"k"], at(100)),
        "$-1\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"PTTL", b"k"], at(100)),
        ":-2\r\n"
    );
    // PEXPIRE, PEXPIREAT, PSETEX, SET PXAT, GETEX PX: each to the millisecond.
    run(&mut e, &mut session, &[b"SET", b"k", b"v"], start);
    assert_eq!(
        run(&mut e, &mut session, &[b"PEXPIRE", b"k", b"1500"], start),
        ":1\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"PTTL", b"k"], at(500)),
        ":1000\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"TTL", b"k"], at(500)),
        ":1\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"EXISTS", b"k"], at(1499)),
        ":1\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"EXISTS", b"k"], at(1500)),
        ":0\r\n"
    );
    let deadline = (start.millis() + 42).to_string();
    run(
        &mut e,
        &mut session,
        &[b"SET", b"k", b"v", b"PXAT", deadline.as_bytes()],
        start,
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"PTTL", b"k"], at(2)),
        ":40\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"GET", b"k"], at(42)),
        "$-1\r\n"
    );
    run(&mut e, &mut session, &[b"PSETEX", b"k", b"7", b"v"], start);
    assert_eq!(
        run(&mut e, &mut session, &[b"GETEX", b"k", b"PX", b"30"], at(6)),
        "$1\r\nv\r\n"
    );
    assert_eq!(
        run(&mut e, &mut session, &[b"PTTL", b"k"], at(6)),
        ":30\r\n"
    );
    let deadline = (start.millis() + 9).to_string();
    assert_eq!(
        run(
            &mut e,
            &mut session,
            &[b"PEXPIREAT", b"k", deadline.as_bytes()],
            start
        ),
        ":1\r\n"
    );
    assert_eq!(run(&mut e, &mut session, &[b"GET", b"k"], at(9)), "$-1\r\n");
}

#[test]
fn the_same_store_as_the_memcached_protocols() {
    let mut e = engine();
    let mut redis = resp2();
    let mut text = Session::default();
    assert_eq!(
        call(&mut e, &mut redis, &["SET", "shared", "from redis"]),
        "+OK\r\n"
    );
    assert_eq!(
        run_at(&mut e, &mut text, b"get shared\r\n", now()),
        "VALUE shared 0 10\r\nfrom redis\r\nEND\r\n",
        "a RESP SET stores flags 0"
    );
    run_at(&mut e, &mut text, b"set counter 5 0 2\r\n41\r\n", now());
    assert_eq!(call(&mut e, &mut redis, &["INCR", "counter"]), ":42\r\n");
    assert_eq!(
        run_at(&mut e, &mut text, b"gets counter\r\n", now())
            .split(' ')
            .nth(2),
        Some("5"),
        "INCR keeps the item's flags"
    );
    run_at(&mut e, &mut text, b"set timed 0 100 1\r\nx\r\n", now());
    assert_eq!(call(&mut e, &mut redis, &["TTL", "timed"]), ":100\r\n");
    assert_eq!(call(&mut e, &mut redis, &["DEL", "shared"]), ":1\r\n");
    assert_eq!(
        run_at(&mut e, &mut text, b"get shared\r\n", now()),
        "END\r\n"
    );
}

#[test]
fn info_reports_redis_fields_in_every_section() {
    let mut e = engine();
    let mut session = resp2();
    call(&mut e, &mut session, &["SET", "a", "1", "EX", "100"]);
    call(&mut e, &mut session, &["SET", "b", "2"]);
    call(&mut e, &mut session, &["GET", "a"]);
    call(&mut e, &mut session, &["GET", "nope"]);
    let reply = call(&mut e, &mut session, &["INFO"]);
    let (frame, len) = Frame::parse(reply.as_bytes()).unwrap();
    assert_eq!(len, reply.len());
    let Frame::Bulk(text) = frame else {
        panic!("a bulk string in RESP2: {reply}")
    };
    let text = String::from_utf8_lossy(text);
    for field in [
        "# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\n",
        "uptime_in_seconds:10\r\n",
        "\r\n\r\n# Clients\r\nconnected_clients:",
        "maxclients:1024\r\n",
        "\r\n\r\n# Memory\r\nused_memory:",
        "maxmemory:67108864\r\nmaxmemory_human:64.00M\r\nmaxmemory_policy:allkeys-lru\r\n",
        "\r\n\r\n# Stats\r\ntotal_connections_received:",
        "keyspace_hits:1\r\nkeyspace_misses:1\r\n",
        "\r\n\r\n# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=100000\r\n",
    ] {
        assert!(text.contains(field), "{field:?} in\n{text}");
    }
    assert!(text.ends_with("avg_ttl=100000\r\n"), "{text}");
    let stats = call(&mut e, &mut session, &["INFO", "STATS", "nosuch"]);
    // Five before it, as Redis counts: a command is counted once it is done.
    assert!(stats.contains("total_commands_processed:5\r\n"), "{stats}");
    assert!(!stats.contains("# Server"), "{stats}");
    assert_eq!(
        call(&mut e, &mut session, &["INFO", "nosuch"]),
        "$0\r\n\r\n"
    );
}

// `stats reset` (from a memcached connection) restarts the counters INFO shares with `stats`;
// what the keyspace holds stays.
#[test]
fn stats_reset_restarts_infos_counters() {
    let mut e = engine();
    let mut session = resp2();
    call(&mut e, &mut session, &["SET", "a", "1", "EX", "100"]);
    call(&mut e, &mut session, &["GET", "a"]);
    call(&mut e, &mut session, &["GET", "nope"]);
    let before = call(&mut e, &mut session, &["INFO"]);
    for field in [
        "total_commands_processed:3\r\n",
        "keyspace_hits:1\r\nkeyspace_misses:1\r\n",
    ] {
        assert!(before.contains(field), "{field:?} in\n{before}");
    }
    let mut admin = Session::default();
    assert_eq!(
        run_at(&mut e, &mut admin, b"stats reset\r\n", now()),
        "RESET\r\n"
    );
    let after = call(&mut e, &mut session, &["INFO"]);
    for field in [
        // The reset itself, as Redis counts its CONFIG RESETSTAT.
        "total_commands_processed:1\r\n",
        "keyspace_hits:0\r\nkeyspace_misses:0\r\n",
        "db0:keys=1,expires=1,avg_ttl=100000\r\n",
    ] {
        assert!(after.contains(field), "{field:?} in\n{after}");
    }
}

#[test]
fn config_get_matches_patterns_as_redis_does() {
    let mut e = engine();
    let mut session = resp2();
    assert_eq!(
        call(&mut e, &mut session, &["CONFIG", "GET", "MAX*"]),
        "*6\r\n$10\r\nmaxclients\r\n$4\r\n1024\r\n$9\r\nmaxmemory\r\n$8\r\n67108864\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lru\r\n"
    );
    let all = call(&mut e, &mut session, &["CONFIG", "GET", "*"]);
    assert!(all.starts_with("*16\r\n"), "{all}");
    assert_eq!(
        call(
            &mut e,
            &mut session,
            &["CONFIG", "GET", "s?ve", "app[a-e]ndonly", "x"]
        ),
        "*4\r\n$10\r\nappendonly\r\n$2\r\nno\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
}

#[test]
fn globs() {
    for (pattern, text, want) in [
        ("*", "anything", true),
        ("", "", true),
        ("", "a", false),
        ("a*c", "abbbc", true),
        ("a*c", "abbbd", false),
        ("a?c", "abc", true),
        ("a?c", "ac", false),
        ("[a-c]x", "bx", true),
        ("[^a-c]x", "bx", false),
        ("[^a-c]x", "dx", true),
        ("\\*x", "*x", true),
        ("\\*x", "ax", false),
        ("*max-*-entries*", "hash-max-listpack-entries", true),
        ("MAXMEMORY", "maxmemory", true),
        ("**a", "a", true),
    ] {
        assert_eq!(
            super::glob(pattern.as_bytes(), text.as_bytes()),
            want,
            "{pattern} {text}"
        );
    }
}

#[test]
fn command_describes_every_command_in_well_formed_replies() {
    let mut e = engine();
    for version in ["2", "3"] {
        let mut session = resp2();
        call(&mut e, &mut session, &["HELLO", version]);
        let count = call(&mut e, &mut session, &["COMMAND", "COUNT"]);
        let n: usize = count.trim_start_matches(':').trim().parse().unwrap();
        assert_eq!(n, super::COMMANDS.len());
        for args in [
            &["COMMAND"][..],
            &["COMMAND", "INFO"],
            &["COMMAND", "INFO", "get", "nosuch", "CLIENT"],
            &["COMMAND", "DOCS"],
            &["COMMAND", "DOCS", "set", "config"],
        ] {
            let reply = call(&mut e, &mut session, args);
            assert_eq!(
                value_len(reply.as_bytes()),
                Ok(reply.len()),
                "{args:?} RESP{version}"
            );
        }
        let info = call(&mut e, &mut session, &["COMMAND", "INFO", "get"]);
        assert!(
            info.starts_with("*1\r\n*10\r\n$3\r\nget\r\n:2\r\n"),
            "{info}"
        );
        let docs = call(&mut e, &mut session, &["COMMAND", "DOCS", "client"]);
        assert!(docs.contains("$11\r\nsubcommands\r\n"), "{docs}");
        assert!(docs.contains("$14\r\nclient|setname\r\n"), "{docs}");
    }
}

/// A pipeline of `MGET`s of several large values, read a little at a time: each stops at the
/// output high-water mark and goes on from its next key, and the replies are exactly those of
/// uninterrupted runs.
#[test]
fn multi_key_commands_stop_at_the_high_water_mark_and_go_on() {
    let value = vec![b'v'; 100_000];
    let mut setup = Vec::new();
    for i in 0..8 {
        setup.extend_from_slice(&command(&[b"SET", format!("k{i}").as_bytes(), &value]));
    }
    let keys: Vec<Vec<u8>> = (0..8).map(|i| format!("k{i}").into_bytes()).collect();
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(keys.iter().map(Vec::as_slice));
    mget.extend(keys.iter().map(Vec::as_slice));
    let mut input = command(&mget);
    input.extend_from_slice(&command(&[b"DEL", b"k1", b"k2", b"nope", b"k1"]));
    input.extend_from_slice(&command(&[b"EXISTS", b"k0", b"k1", b"k3"]));
    // One run, all at once.
    let mut e = engine();
    let mut session = resp2();
    run_at(&mut e, &mut session, &setup, now());
    let (mut whole, mut out, mut pos) = (Vec::new(), Vec::new(), 0);
    loop {
        let outcome = e.execute(&mut session, &input[pos..], &mut out, now());
        pos += outcome.consumed;
        whole.append(&mut out);
        if outcome.stop == Stop::Input {
            break;
        }
    }
    assert_eq!(pos, input.len());
    // The same, with at most 10,000 bytes read between calls.
    let mut e = engine();
    let mut session = resp2();
    run_at(&mut e, &mut session, &setup, now());
    let (mut out, mut read, mut pos, mut stops) = (Vec::new(), Vec::new(), 0, 0);
    while pos < input.len() || !out.is_empty() {
        session.begin_turn(TURN_REQUESTS);
        let outcome = e.execute(&mut session, &input[pos..], &mut out, now());
        pos += outcome.consumed;
        assert!(
            out.len() < OUT_HIGH_WATER_BYTES + value.len() + 64,
            "bounded output"
        );
        if outcome.stop == Stop::Output {
            stops += 1;
            assert!(session.mid_request() || outcome.consumed > 0);
        }
        let n = out.len().min(10_000);
        read.extend(out.drain(..n));
    }
    assert!(stops >= 2, "the MGET stopped part-way");
    assert_eq!(read, whole);
    let tail = String::from_utf8_lossy(&whole[whole.len() - 8..]).into_owned();
    assert_eq!(tail, ":2\r\n:2\r\n");
}

/// [`config`] for each worker of a server of `workers`, all sharing one control block, as a
/// server's workers do.
pub(super) fn shared_config(workers: usize) -> impl Fn(usize) -> EngineConfig {
    let control = crate::control::Control::new(Default::default(), 0);
    move |worker| EngineConfig {
        control: std::sync::Arc::clone(&control),
        ..config(workers, worker)
    }
}

pub(super) fn config(workers: usize, worker: usize) -> EngineConfig {
    EngineConfig {
        started_unix_secs: NOW - 10,
        threads: workers,
        worker,
        ..EngineConfig::new(
            store::ShardConfig {
                memory_limit_bytes: 16 << 20,
                max_item_size: 1 << 20,
            },
            crate::control::Control::new(Default::default(), 0),
        )
    }
}

/// Runs `input` on a connection of worker 0 of two (`home`), worker 1 (`owner`) serving what
/// is forwarded to it and its replies delivered in batches (newest first when `reverse`), the
/// connection's output sent as it becomes sendable; returns everything sent.
#[track_caller]
pub(super) fn run_on_two_workers(
    home: &mut Engine,
    owner: &mut Engine,
    input: &[u8],
    reverse: bool,
) -> String {
    let mut conn = crate::conn::ClientConn::default();
    conn.session = resp2();
    conn.session.set_token(9);
    conn.input.extend(input);
    let mut got = Vec::new();
    for _ in 0..10_000 {
        conn.session.begin_turn(TURN_REQUESTS);
        conn.execute_buffered(home, now());
        let mut batches = Vec::new();
        home.take_forwards(|dest, batch| {
            assert_eq!(dest, 1);
            batches.push(batch);
            Ok(())
        });
        for batch in batches {
            owner.serve_forwarded(0, batch, now());
        }
        let mut messages = Vec::new();
        owner.take_replies(|_, replies| {
            messages.push(replies);
            Ok(())
        });
        for replies in messages {
            let mut order: Vec<usize> = (0..replies.len()).collect();
            if reverse {
                order.reverse();
            }
            for index in order {
                conn.deliver(home, replies.get(index).unwrap());
            }
            owner.recycle(replies);
        }
        let out = conn.pending_output().to_vec();
        conn.sent(out.len());
        conn.settle(home);
        got.extend_from_slice(&out);
        if conn.input.is_empty() && !conn.awaiting_replies() && conn.pending_output().is_empty() {
            return String::from_utf8_lossy(&got).into_owned();
        }
    }
    panic!(
        "no end: {} bytes left, {} sent",
        conn.input.len(),
        got.len()
    );
}

/// A connection on worker 0 of two whose keys live on both: the replies are exactly those of
/// one worker alone, in request order, whatever order the other worker's replies come back in.
#[test]
fn keys_of_another_worker_give_one_workers_replies() {
    let keys: Vec<String> = (0..12).map(|i| format!("key:{i}")).collect();
    assert!(keys.iter().any(|k| owner_of(k.as_bytes(), 2) == 0));
    assert!(keys.iter().any(|k| owner_of(k.as_bytes(), 2) == 1));
    let mut script: Vec<Vec<&str>> = Vec::new();
    let mut mset = vec!["MSET"];
    for key in &keys {
        mset.push(key);
        mset.push(key);
    }
    script.push(mset);
    script.push(
        std::iter::once("MGET")
            .chain(keys.iter().map(String::as_str))
            .chain(["nope"])
            .collect(),
    );
    script.push(vec!["SET", &keys[1], "x", "GET"]);
    script.push(vec!["INCR", &keys[2]]);
    script.push(vec!["INCR", "counter"]);
    script.push(
        std::iter::once("EXISTS")
            .chain(keys.iter().map(String::as_str))
            .chain(["nope"])
            .collect(),
    );
    script.push(vec![
        "DEL", &keys[0], &keys[1], &keys[2], &keys[3], "nope", &keys[0],
    ]);
    script.push(vec!["UNLINK", &keys[4], &keys[5]]);
    script.push(
        std::iter::once("MGET")
            .chain(keys.iter().map(String::as_str))
            .collect(),
    );
    script.push(vec!["DBSIZE"]);
    // MSETNX whose keys the other worker owns goes there whole.
    let theirs: Vec<&str> = keys
        .iter()
        .filter(|k| owner_of(k.as_bytes(), 2) == 1)
        .map(String::as_str)
        .collect();
    script.push(vec!["MSETNX", theirs[0], "a", theirs[1], "b"]);
    script.push(vec!["FLUSHALL"]);
    script.push(vec!["DBSIZE"]);
    script.push(vec!["PING"]);
    let mut input = Vec::new();
    for args in &script {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        input.extend_from_slice(&command(&args));
    }
    // One worker alone.
    let mut alone = Engine::new(config(1, 0));
    let mut session = resp2();
    let want = run_at(&mut alone, &mut session, &input, now());
    assert!(want.ends_with(":0\r\n+PONG\r\n"), "{want}");
    // Two workers; the other one answers in batches, newest reply first.
    for reverse in [false, true] {
        let mut home = Engine::new(config(2, 0));
        let mut owner = Engine::new(config(2, 1));
        let got = run_on_two_workers(&mut home, &mut owner, &input, reverse);
        assert_eq!(got, want, "reverse {reverse}");
    }
    // MSETNX over both workers is refused rather than half done.
    let mixed: Vec<&str> = keys
        .iter()
        .take(4)
        .flat_map(|k| [k.as_str(), "v"])
        .collect();
    let mut home = Engine::new(config(2, 0));
    let mut session = resp2();
    let mut args = vec!["MSETNX"];
    args.extend(mixed);
    assert_eq!(
        call(&mut home, &mut session, &args),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
}

/// Regression: a `DEL` or `EXISTS` whose keys on the other worker add up to more forwarded
/// bytes than a connection may have awaiting replies stopped for good: its parts' bytes were
/// counted until the whole command was answered, which could not happen before it went on.
#[test]
fn a_multi_key_command_larger_than_the_forwarding_limit_completes() {
    let keys: Vec<String> = (0..6000).map(|i| format!("{i:0>120}")).collect();
    let theirs = keys
        .iter()
        .filter(|k| owner_of(k.as_bytes(), 2) == 1)
        .count();
    assert!(theirs * 120 > FORWARD_REQUEST_HIGH_WATER_BYTES);
    let mut input = Vec::new();
    for name in ["MSET", "EXISTS", "DEL", "EXISTS"] {
        let mut args: Vec<&[u8]> = vec![name.as_bytes()];
        for key in &keys {
            args.push(key.as_bytes());
            if name == "MSET" {
                args.push(b"v");
            }
        }
        input.extend_from_slice(&command(&args));
    }
    let mut home = Engine::new(config(2, 0));
    let mut owner = Engine::new(config(2, 1));
    let got = run_on_two_workers(&mut home, &mut owner, &input, false);
    assert_eq!(got, "+OK\r\n:6000\r\n:6000\r\n:0\r\n");
}

/// Regression: an `MSET` pair the other worker refused (too large for `-I`) was answered
/// `+OK`: the owner's reply was dropped. It is the command's reply now, as on one worker.
#[test]
fn an_mset_pair_another_worker_refuses_is_reported() {
    let keys: Vec<String> = (0..20).map(|i| format!("key:{i}")).collect();
    let mine = keys
        .iter()
        .find(|k| owner_of(k.as_bytes(), 2) == 0)
        .unwrap();
    let theirs = keys
        .iter()
        .find(|k| owner_of(k.as_bytes(), 2) == 1)
        .unwrap();
    let big = vec![b'x'; 1 << 20];
    let input = command(&[b"MSET", mine.as_bytes(), b"v", theirs.as_bytes(), &big]);
    let want = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    let mut alone = Engine::new(config(1, 0));
    assert_eq!(run_at(&mut alone, &mut resp2(), &input, now()), want);
    let mut home = Engine::new(config(2, 0));
    let mut owner = Engine::new(config(2, 1));
    assert_eq!(
        run_on_two_workers(&mut home, &mut owner, &input, false),
        want
    );
}

/// memcached's key limit holds on RESP too: a key over 250 bytes (or an empty one) is refused
/// by the commands that store, and is simply not there for those that read or remove.
#[test]
fn keys_over_250_bytes_are_refused_by_stores_and_missing_for_reads() {
    let mut e = engine();
    let mut session = resp2();
    let long = "k".repeat(251);
    let bad = "-ERR key is empty or longer than 250 bytes\r\n";
    for args in [
        vec!["SET", &long, "v"],
        vec!["SET", "", "v"],
        vec!["SETEX", &long, "10", "v"],
        vec!["SETNX", &long, "v"],
        vec!["INCR", &long],
        vec!["APPEND", &long, "v"],
        vec!["MSET", "ok", "1", &long, "2"],
        vec!["MSETNX", &long, "2"],
    ] {
        assert_eq!(call(&mut e, &mut session, &args), bad, "{}", args[0]);
    }
    for (args, want) in [
        (vec!["GET", &long], "$-1\r\n"),
        (vec!["GETDEL", &long], "$-1\r\n"),
        (vec!["EXISTS", &long, "ok"], ":1\r\n"),
        (vec!["DEL", &long], ":0\r\n"),
        (vec!["TTL", &long], ":-2\r\n"),
        (vec!["EXPIRE", &long, "10"], ":0\r\n"),
        (vec!["MGET", &long, "ok"], "*2\r\n$-1\r\n$1\r\n1\r\n"),
    ] {
        assert_eq!(call(&mut e, &mut session, &args), want, "{}", args[0]);
    }
    assert_eq!(call(&mut e, &mut session, &["PING"]), "+PONG\r\n");
}

/// Regression: a multi-key command that stopped (here at the output high-water mark) was
/// parsed again from its first argument on every call, so a command of many keys, stopping
/// once per turn, cost its whole length per turn. The parser's progress now stays at the
/// command's end while it is stopped.
#[test]
fn a_stopped_multi_key_command_is_not_walked_again() {
    let mut e = engine();
    let mut session = resp2();
    let value = vec![b'v'; 100_000];
    run_at(
        &mut e,
        &mut session,
        &command(&[b"SET", b"big", &value]),
        now(),
    );
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(std::iter::repeat_n(&b"big"[..], 10));
    let mget = command(&args);
    let mut out = Vec::new();
    let outcome = e.execute(&mut session, &mget, &mut out, now());
    assert_eq!((outcome.stop, outcome.consumed), (Stop::Output, 0));
    assert!(session.mid_request());
    assert_eq!(
        (session.scan.bytes, session.scan.items),
        (mget.len(), args.len())
    );
    let mut read = out.len();
    loop {
        out.clear();
        let outcome = e.execute(&mut session, &mget, &mut out, now());
        read += out.len();
        if outcome.consumed == mget.len() {
            break;
        }
        assert_eq!(outcome.stop, Stop::Output);
    }
    assert_eq!(
        read,
        "*10\r\n".len() + 10 * (value.len() + "$100000\r\n\r\n".len())
    );
    assert_eq!(session.scan, super::super::session::Scan::default());
}

/// Numbered databases: each its own keyspace; `FLUSHDB` empties the selected one only,
/// `DBSIZE` counts it, `MOVE` goes between them, `FLUSHALL` empties all; the memcached
/// protocols and database 0 share their keys.
#[test]
fn databases_are_separate_keyspaces() {
    let mut e = engine();
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    assert_eq!(c(&["SET", "k", "zero"]), "+OK\r\n");
    assert_eq!(c(&["SELECT", "3"]), "+OK\r\n");
    assert_eq!(c(&["GET", "k"]), "$-1\r\n");
    assert_eq!(c(&["SET", "k", "three"]), "+OK\r\n");
    assert_eq!(c(&["SET", "other", "x"]), "+OK\r\n");
    assert_eq!(c(&["MSET", "a", "1", "b", "2"]), "+OK\r\n");
    assert_eq!(c(&["DBSIZE"]), ":4\r\n");
    assert_eq!(c(&["GET", "k"]), "$5\r\nthree\r\n");
    assert_eq!(c(&["SELECT", "16"]), "-ERR DB index is out of range\r\n");
    assert_eq!(c(&["SELECT", "-1"]), "-ERR DB index is out of range\r\n");
    assert_eq!(
        c(&["SELECT", "x"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(c(&["MOVE", "other", "0"]), ":1\r\n");
    assert_eq!(c(&["MOVE", "k", "0"]), ":0\r\n", "database 0 holds k");
    assert_eq!(c(&["MOVE", "nope", "0"]), ":0\r\n");
    assert_eq!(
        c(&["MOVE", "k", "3"]),
        "-ERR source and destination objects are the same\r\n"
    );
    assert_eq!(c(&["MOVE", "k", "99"]), "-ERR DB index is out of range\r\n");
    assert_eq!(c(&["EXISTS", "other"]), ":0\r\n");
    assert_eq!(c(&["FLUSHDB"]), "+OK\r\n");
    assert_eq!(c(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(c(&["DBSIZE"]), ":2\r\n");
    assert_eq!(c(&["GET", "k"]), "$4\r\nzero\r\n");
    assert_eq!(c(&["GET", "other"]), "$1\r\nx\r\n");
    // The memcached protocols see database 0.
    let mut text = Session::default();
    let mut out = Vec::new();
    e.execute(&mut text, b"get k other\r\n", &mut out, now());
    assert_eq!(
        String::from_utf8_lossy(&out),
        "VALUE k 0 4\r\nzero\r\nVALUE other 0 1\r\nx\r\nEND\r\n"
    );
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    assert_eq!(
        c(&["CONFIG", "GET", "databases"]),
        "*2\r\n$9\r\ndatabases\r\n$2\r\n16\r\n"
    );
    assert_eq!(c(&["SELECT", "5"]), "+OK\r\n");
    assert_eq!(c(&["SET", "five", "5"]), "+OK\r\n");
    assert_eq!(c(&["FLUSHALL"]), "+OK\r\n");
    assert_eq!(c(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(c(&["DBSIZE"]), ":0\r\n");
}

/// A key of database 0 whose first byte is the namespace mark is kept apart from every other
/// database's keys (it is escaped), and the other way round.
#[test]
fn a_key_starting_with_the_namespace_mark_meets_no_other_database() {
    let mut e = engine();
    let mut s = resp2();
    let marked: &[u8] = b"\xff\x03k";
    assert_eq!(
        run_at(&mut e, &mut s, &command(&[b"SET", marked, b"zero"]), now()),
        "+OK\r\n"
    );
    assert_eq!(call(&mut e, &mut s, &["SELECT", "3"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["GET", "k"]), "$-1\r\n");
    assert_eq!(call(&mut e, &mut s, &["DBSIZE"]), ":0\r\n");
    assert_eq!(call(&mut e, &mut s, &["SET", "k", "three"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["SELECT", "0"]), "+OK\r\n");
    assert_eq!(
        run_at(&mut e, &mut s, &command(&[b"GET", marked]), now()),
        "$4\r\nzero\r\n"
    );
    assert_eq!(call(&mut e, &mut s, &["DBSIZE"]), ":1\r\n");
}

/// With two workers a database's keys live on both: commands forwarded to the owner run in
/// the connection's database, and `DBSIZE`/`FLUSHDB` add up or empty every worker's share.
#[test]
fn databases_span_workers() {
    let mut home = Engine::new(config(2, 0));
    let mut owner = Engine::new(config(2, 1));
    let keys: Vec<String> = (0..12).map(|i| format!("key:{i}")).collect();
    let mut input = Vec::new();
    let mut push = |args: Vec<&str>| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        input.extend(command(&args));
    };
    let mut want = String::new();
    for key in &keys {
        push(vec!["SET", key, "zero"]);
        want.push_str("+OK\r\n");
    }
    push(vec!["SELECT", "2"]);
    want.push_str("+OK\r\n");
    for key in &keys[..8] {
        push(vec!["SET", key, "two"]);
        want.push_str("+OK\r\n");
    }
    push(vec!["GET", &keys[0]]);
    push(vec!["GET", &keys[1]]);
    push(vec!["GET", &keys[9]]);
    want.push_str("$3\r\ntwo\r\n$3\r\ntwo\r\n$-1\r\n");
    push(vec!["DBSIZE"]);
    want.push_str(":8\r\n");
    push(vec!["MGET", &keys[0], &keys[9]]);
    want.push_str("*2\r\n$3\r\ntwo\r\n$-1\r\n");
    push(vec!["FLUSHDB"]);
    want.push_str("+OK\r\n");
    push(vec!["DBSIZE"]);
    want.push_str(":0\r\n");
    push(vec!["SELECT", "0"]);
    want.push_str("+OK\r\n");
    push(vec!["DBSIZE"]);
    want.push_str(":12\r\n");
    push(vec!["GET", &keys[1]]);
    want.push_str("$4\r\nzero\r\n");
    assert_eq!(
        run_on_two_workers(&mut home, &mut owner, &input, false),
        want
    );
}

/// A worker's open transactions share one bound: a command that would take them past it is
/// refused (and its transaction aborts at `EXEC`), and a transaction's bytes come back when
/// it runs, is discarded, or its connection goes away.
#[test]
fn open_transactions_of_a_worker_share_one_bound() {
    let mut e = Engine::new(EngineConfig {
        queued_max_bytes: 64 << 10,
        ..config(1, 0)
    });
    let value = "v".repeat(10 << 10);
    let (mut a, mut b, mut c) = (resp2(), resp2(), resp2());
    for s in [&mut a, &mut b, &mut c] {
        assert_eq!(call(&mut e, s, &["MULTI"]), "+OK\r\n");
    }
    // a holds about 40 KiB, b about 20 KiB: the next 10 KiB, from c, does not fit.
    for i in 0..4 {
        let key = format!("a{i}");
        assert_eq!(call(&mut e, &mut a, &["SET", &key, &value]), "+QUEUED\r\n");
    }
    for i in 0..2 {
        let key = format!("b{i}");
        assert_eq!(call(&mut e, &mut b, &["SET", &key, &value]), "+QUEUED\r\n");
    }
    let refused = call(&mut e, &mut c, &["SET", "c", &value]);
    assert!(
        refused.starts_with("-ERR transactions too long"),
        "{refused}"
    );
    assert!(
        call(&mut e, &mut c, &["EXEC"]).starts_with("-EXECABORT"),
        "the refused command aborts its transaction"
    );
    // a runs: its bytes come back, and c's next transaction fits.
    assert_eq!(
        call(&mut e, &mut a, &["EXEC"]),
        "*4\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n"
    );
    assert_eq!(call(&mut e, &mut c, &["MULTI"]), "+OK\r\n");
    for i in 0..4 {
        let key = format!("c{i}");
        assert_eq!(call(&mut e, &mut c, &["SET", &key, &value]), "+QUEUED\r\n");
    }
    // A connection that goes away with its transaction open gives its bytes back too.
    drop(c);
    assert_eq!(call(&mut e, &mut b, &["SET", "b2", &value]), "+QUEUED\r\n");
    assert_eq!(call(&mut e, &mut b, &["SET", "b3", &value]), "+QUEUED\r\n");
    assert_eq!(call(&mut e, &mut b, &["DISCARD"]), "+OK\r\n");
    let mut d = resp2();
    assert_eq!(call(&mut e, &mut d, &["MULTI"]), "+OK\r\n");
    for i in 0..6 {
        let key = format!("d{i}");
        assert_eq!(call(&mut e, &mut d, &["SET", &key, &value]), "+QUEUED\r\n");
    }
}

/// A queued command is charged its bytes and the word that records where it ends, so that
/// many small commands cannot hold more than the bound says.
#[test]
fn a_queued_command_is_charged_with_its_bookkeeping() {
    let mut e = Engine::new(EngineConfig {
        queued_max_bytes: 100,
        ..config(1, 0)
    });
    let mut s = resp2();
    assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
    // `*2\r\n$3\r\nGET\r\n$1\r\na\r\n` is 20 bytes, 28 with its end: three fit in 100.
    for _ in 0..3 {
        assert_eq!(call(&mut e, &mut s, &["GET", "a"]), "+QUEUED\r\n");
    }
    let refused = call(&mut e, &mut s, &["GET", "a"]);
    assert!(
        refused.starts_with("-ERR transactions too long"),
        "{refused}"
    );
}

/// `MULTI`/`EXEC`/`DISCARD` as redis-server 7 answers them: queued commands answer
/// `+QUEUED`, run as one at `EXEC`, and a command that cannot be queued aborts the whole.
#[test]
fn transactions_queue_and_run_as_one() {
    let mut e = engine();
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    assert_eq!(c(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(c(&["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
    assert_eq!(c(&["MULTI"]), "+OK\r\n");
    assert_eq!(c(&["MULTI"]), "-ERR MULTI calls can not be nested\r\n");
    assert_eq!(c(&["SET", "a", "1"]), "+QUEUED\r\n");
    assert_eq!(
        c(&["NOPE"]),
        "-ERR unknown command 'NOPE', with args beginning with: \r\n"
    );
    assert_eq!(
        c(&["GET", "a", "b"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        c(&["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(c(&["GET", "a"]), "$-1\r\n", "nothing of it ran");
    assert_eq!(c(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        c(&["WATCH", "x"]),
        "-ERR WATCH inside MULTI is not allowed\r\n"
    );
    assert_eq!(c(&["SET", "a", "2"]), "+QUEUED\r\n");
    assert_eq!(c(&["INCR", "a"]), "+QUEUED\r\n");
    assert_eq!(c(&["GET", "a"]), "+QUEUED\r\n");
    assert_eq!(c(&["SELECT", "1"]), "+QUEUED\r\n");
    assert_eq!(c(&["EXEC"]), "*4\r\n+OK\r\n:3\r\n$1\r\n3\r\n+OK\r\n");
    assert_eq!(
        c(&["GET", "a"]),
        "$-1\r\n",
        "SELECT in the transaction holds"
    );
    assert_eq!(c(&["MULTI"]), "+OK\r\n");
    assert_eq!(c(&["SET", "b", "1"]), "+QUEUED\r\n");
    assert_eq!(c(&["DISCARD"]), "+OK\r\n");
    assert_eq!(c(&["GET", "b"]), "$-1\r\n");
    assert_eq!(c(&["MULTI"]), "+OK\r\n");
    assert_eq!(c(&["EXEC"]), "*0\r\n");
    assert_eq!(c(&["MULTI"]), "+OK\r\n");
    assert_eq!(c(&["SET", "r", "1"]), "+QUEUED\r\n");
    assert_eq!(c(&["RESET"]), "+RESET\r\n");
    assert_eq!(c(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(c(&["GET", "a"]), "$1\r\n3\r\n", "RESET selects database 0");
}

/// `WATCH` makes `EXEC` fail (a null array) when a watched key changed: written by another
/// RESP client or a memcached one, deleted, given an expiry, or expired; unchanged keys and
/// `UNWATCH` let it run.
#[test]
fn a_watched_key_that_changed_fails_exec() {
    let mut e = engine();
    let mut s = resp2();
    let mut other = resp2();
    assert_eq!(call(&mut e, &mut s, &["SET", "k", "1"]), "+OK\r\n");
    // Unchanged: runs.
    assert_eq!(call(&mut e, &mut s, &["WATCH", "k", "absent"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["INCR", "k"]), "+QUEUED\r\n");
    assert_eq!(call(&mut e, &mut s, &["EXEC"]), "*1\r\n:2\r\n");
    type Change = fn(&mut Engine, &mut Session);
    let changes: [(&str, Change); 5] = [
        ("SET by another client", |e, o| {
            assert_eq!(call(e, o, &["SET", "k", "x"]), "+OK\r\n");
        }),
        ("a memcached set", |e, _| {
            let mut text = Session::default();
            let mut out = Vec::new();
            e.execute(&mut text, b"set k 0 0 1\r\ny\r\n", &mut out, now());
            assert_eq!(out, b"STORED\r\n");
        }),
        ("DEL", |e, o| {
            assert_eq!(call(e, o, &["DEL", "k"]), ":1\r\n");
        }),
        ("EXPIRE", |e, o| {
            assert_eq!(call(e, o, &["EXPIRE", "k", "100"]), ":1\r\n");
        }),
        ("expiry", |e, o| {
            assert_eq!(call(e, o, &["PEXPIRE", "k", "1"]), ":1\r\n");
        }),
    ];
    for (what, change) in changes {
        assert_eq!(call(&mut e, &mut s, &["SET", "k", "1"]), "+OK\r\n");
        assert_eq!(call(&mut e, &mut s, &["WATCH", "k"]), "+OK\r\n");
        change(&mut e, &mut other);
        let later = Now::from_millis(NOW * 1000 + 10);
        assert_eq!(
            run_at(&mut e, &mut s, &command(&[b"MULTI"]), later),
            "+OK\r\n"
        );
        assert_eq!(
            run_at(&mut e, &mut s, &command(&[b"SET", b"k", b"mine"]), later),
            "+QUEUED\r\n"
        );
        assert_eq!(
            run_at(&mut e, &mut s, &command(&[b"EXEC"]), later),
            "*-1\r\n",
            "{what}"
        );
        assert_ne!(
            call(&mut e, &mut s, &["GET", "k"]),
            "$4\r\nmine\r\n",
            "{what}"
        );
    }
    // UNWATCH forgets; a watch in another database is that database's key.
    assert_eq!(call(&mut e, &mut s, &["WATCH", "k"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut other, &["SET", "k", "z"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["UNWATCH"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["EXEC"]), "*0\r\n");
    assert_eq!(call(&mut e, &mut s, &["SELECT", "4"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["WATCH", "k"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut other, &["SET", "k", "db0"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["SET", "k", "db4"]), "+QUEUED\r\n");
    assert_eq!(call(&mut e, &mut s, &["EXEC"]), "*1\r\n+OK\r\n");
}

/// A connection may not grow its watched list past what a worker keeps notes for: one key
/// more makes its next EXEC fail (a retry), in one WATCH or in several, and the flag goes with
/// that EXEC, UNWATCH or DISCARD.
#[test]
fn watching_more_keys_than_a_worker_notes_fails_the_next_exec() {
    let mut e = engine();
    let mut s = resp2();
    let keys =
        |from: usize, to: usize| -> Vec<String> { (from..to).map(|i| format!("w:{i}")).collect() };
    let watch = |e: &mut Engine, s: &mut Session, keys: &[String]| {
        let mut args = vec!["WATCH"];
        args.extend(keys.iter().map(String::as_str));
        call(e, s, &args)
    };
    let transaction = |e: &mut Engine, s: &mut Session| {
        assert_eq!(call(e, s, &["MULTI"]), "+OK\r\n");
        assert_eq!(call(e, s, &["SET", "k", "v"]), "+QUEUED\r\n");
        call(e, s, &["EXEC"])
    };
    // Exactly as many as a worker notes: the transaction runs.
    assert_eq!(watch(&mut e, &mut s, &keys(0, MARKS_MAX)), "+OK\r\n");
    assert_eq!(transaction(&mut e, &mut s), "*1\r\n+OK\r\n");
    // One more in one WATCH: nothing changed, yet EXEC fails; the next one runs again.
    assert_eq!(watch(&mut e, &mut s, &keys(0, MARKS_MAX + 1)), "+OK\r\n");
    assert!(s.watched.is_empty() && s.watch_overflow);
    assert_eq!(transaction(&mut e, &mut s), "*-1\r\n");
    assert!(!s.watch_overflow);
    assert_eq!(transaction(&mut e, &mut s), "*1\r\n+OK\r\n");
    // Over several WATCHes; a WATCH after the overflow keeps it; UNWATCH clears it.
    assert_eq!(watch(&mut e, &mut s, &keys(0, MARKS_MAX - 10)), "+OK\r\n");
    assert_eq!(
        watch(&mut e, &mut s, &keys(MARKS_MAX, MARKS_MAX + 20)),
        "+OK\r\n"
    );
    assert_eq!(watch(&mut e, &mut s, &keys(0, 1)), "+OK\r\n");
    assert!(s.watched.is_empty() && s.watch_overflow);
    assert_eq!(transaction(&mut e, &mut s), "*-1\r\n");
    assert_eq!(watch(&mut e, &mut s, &keys(0, MARKS_MAX + 1)), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["UNWATCH"]), "+OK\r\n");
    assert_eq!(transaction(&mut e, &mut s), "*1\r\n+OK\r\n");
}

/// With two workers a transaction whose keys live on the other worker is sent there whole;
/// one with a command whose keys span both is refused with CROSSSLOT and aborts.
#[test]
fn a_transaction_runs_on_the_worker_of_its_keys() {
    let theirs: Vec<String> = (0..40)
        .map(|i| format!("key:{i}"))
        .filter(|k| owner_of(k.as_bytes(), 2) == 1)
        .take(2)
        .collect();
    let mine: Vec<String> = (0..40)
        .map(|i| format!("key:{i}"))
        .filter(|k| owner_of(k.as_bytes(), 2) == 0)
        .take(1)
        .collect();
    let mut input = Vec::new();
    let mut push = |args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        input.extend(command(&args));
    };
    push(&["SELECT", "1"]);
    push(&["MULTI"]);
    push(&["SET", &theirs[0], "5"]);
    push(&["INCRBY", &theirs[0], "2"]);
    push(&["MGET", &theirs[0], &theirs[1]]);
    push(&["PING"]);
    push(&["EXEC"]);
    push(&["GET", &theirs[0]]);
    push(&["MULTI"]);
    push(&["SET", &theirs[0], "a"]);
    push(&["MGET", &theirs[0], &mine[0]]);
    push(&["DBSIZE"]);
    push(&["EXEC"]);
    push(&["GET", &theirs[0]]);
    let mut home = Engine::new(config(2, 0));
    let mut owner = Engine::new(config(2, 1));
    assert_eq!(
        run_on_two_workers(&mut home, &mut owner, &input, false),
        "+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
         *4\r\n+OK\r\n:7\r\n*2\r\n$1\r\n7\r\n$-1\r\n+PONG\r\n$1\r\n7\r\n\
         +OK\r\n+QUEUED\r\n-CROSSSLOT Keys in request don't hash to the same slot\r\n\
         -ERR 'dbsize' inside MULTI needs a server of one worker (memspin -t 1)\r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n$1\r\n7\r\n"
    );
}

/// A bulk string over the item limit (1 MiB here) refuses its command, not the connection:
/// the error is answered at once, the announced bytes and the command's later arguments are
/// skipped as they arrive (the engine never asks for more than a read's worth), nothing is
/// stored, and the next command is served.
#[test]
fn a_value_over_the_item_limit_is_refused_and_skipped() {
    let big = vec![b'x'; (1 << 20) + 1];
    let refused = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    let cases: [(Vec<&[u8]>, &str); 4] = [
        (vec![b"SET", b"k", &big], ""),
        (vec![b"SET", b"k", &big, b"EX", b"10"], ""),
        (vec![b"MSET", b"a", b"1", b"k", &big, b"b", &big], ""),
        (vec![b"APPEND", b"k", &big], ""),
    ];
    for (args, _) in &cases {
        let mut input = command(args);
        input.extend(command(&[b"GET", b"k"]));
        input.extend(command(&[b"PING"]));
        let want = format!("{refused}$-1\r\n+PONG\r\n");
        for piece in [1 << 10, 64 << 10, input.len()] {
            let mut e = engine();
            let mut session = resp2();
            let mut out = Vec::new();
            let mut pending: Vec<u8> = Vec::new();
            for chunk in input.chunks(piece) {
                pending.extend_from_slice(chunk);
                loop {
                    let outcome = e.execute(&mut session, &pending, &mut out, now());
                    assert!(!outcome.close);
                    assert!(outcome.needed <= 64 << 10, "{}", outcome.needed);
                    pending.drain(..outcome.consumed);
                    if outcome.consumed == 0 || pending.is_empty() {
                        break;
                    }
                }
                assert!(
                    pending.len() <= 2 * piece + 64,
                    "{} buffered",
                    pending.len()
                );
            }
            assert!(pending.is_empty());
            assert_eq!(String::from_utf8_lossy(&out), want, "piece {piece}");
            assert_eq!(e.shard().len(), 0, "nothing stored");
        }
    }
    // Announced as 2 GiB and never sent: refused at once, never asked for.
    let mut e = engine();
    let mut session = resp2();
    let mut out = Vec::new();
    let outcome = e.execute(&mut session, b"*1\r\n$2147483648\r\n", &mut out, now());
    assert_eq!(String::from_utf8_lossy(&out), refused);
    assert!(!outcome.close);
    assert!(outcome.needed <= 64 << 10);
}

/// The keys and next cursor of a `SCAN` reply.
#[track_caller]
fn scan_reply(reply: &str) -> (String, Vec<String>) {
    let mut lines = reply.split("\r\n");
    assert_eq!(lines.next(), Some("*2"), "{reply}");
    lines.next();
    let cursor = lines.next().unwrap().to_string();
    let n: usize = lines.next().unwrap()[1..].parse().unwrap();
    let keys = (0..n)
        .map(|_| {
            lines.next();
            lines.next().unwrap().to_string()
        })
        .collect();
    (cursor, keys)
}

/// A full `SCAN` iteration returns every key held throughout, also when the table grows
/// several times part-way; `MATCH`, `COUNT` and `TYPE` filter as Redis's do, and other
/// databases' keys never show.
#[test]
fn scan_returns_every_key_while_the_table_grows() {
    let mut e = engine();
    let mut s = resp2();
    assert_eq!(call(&mut e, &mut s, &["SET", "db0-key", "x"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["SELECT", "2"]), "+OK\r\n");
    let held: Vec<String> = (0..500).map(|i| format!("held:{i}")).collect();
    for key in &held {
        assert_eq!(call(&mut e, &mut s, &["SET", key, "v"]), "+OK\r\n");
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let (next, keys) = scan_reply(&call(&mut e, &mut s, &["SCAN", &cursor, "COUNT", "7"]));
        seen.extend(keys);
        calls += 1;
        if calls == 5 {
            // The table grows a few times over.
            for i in 0..20_000 {
                let key = format!("new:{i}");
                assert_eq!(call(&mut e, &mut s, &["SET", &key, "v"]), "+OK\r\n");
            }
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
        assert!(calls < 10_000, "no end");
    }
    for key in &held {
        assert!(seen.contains(key), "{key} missed");
    }
    assert!(!seen.contains("db0-key"));
    let (_, keys) = scan_reply(&call(
        &mut e,
        &mut s,
        &["SCAN", "0", "MATCH", "held:1?", "COUNT", "100000"],
    ));
    let mut keys: Vec<String> = keys;
    keys.sort();
    let want: Vec<String> = (10..20).map(|i| format!("held:{i}")).collect();
    assert_eq!(keys, want);
    let (_, keys) = scan_reply(&call(&mut e, &mut s, &["SCAN", "0", "TYPE", "hash"]));
    assert!(keys.is_empty());
    assert_eq!(
        call(&mut e, &mut s, &["SCAN", "x"]),
        "-ERR invalid cursor\r\n"
    );
    assert_eq!(
        call(&mut e, &mut s, &["SCAN", "0", "COUNT", "0"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        call(&mut e, &mut s, &["SCAN", "0", "MATCH"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(call(&mut e, &mut s, &["SELECT", "0"]), "+OK\r\n");
    assert_eq!(
        call(&mut e, &mut s, &["KEYS", "*"]),
        "*1\r\n$7\r\ndb0-key\r\n"
    );
}

/// Regression: the cursor went on from the last key's position, so each call but the last
/// returned the previous call's last key again (django-redis's `delete_pattern` counted 44
/// keys for 40). A full iteration over a table nobody writes returns each key exactly once.
#[test]
fn scan_returns_each_key_once_when_nothing_changes() {
    let mut e = engine();
    let mut s = resp2();
    for i in 0..40 {
        let key = format!("k:{i}");
        assert_eq!(call(&mut e, &mut s, &["SET", &key, "v"]), "+OK\r\n");
    }
    for count in ["1", "3", "10", "39", "40", "1000"] {
        let mut seen = Vec::new();
        let mut cursor = "0".to_string();
        for _ in 0..100 {
            let reply = call(&mut e, &mut s, &["SCAN", &cursor, "COUNT", count]);
            let (next, keys) = scan_reply(&reply);
            seen.extend(keys);
            cursor = next;
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(cursor, "0", "COUNT {count}: no end");
        assert_eq!(seen.len(), 40, "COUNT {count}: {seen:?}");
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 40, "COUNT {count}");
    }
}

/// A full `SCAN` iteration returns every key held throughout while the store evicts: the
/// keys present before the first call and after the last (none is written again, so those
/// were held the whole time) all come back, each once.
#[test]
fn scan_returns_every_key_held_throughout_while_items_are_evicted() {
    let mut e = crate::engine::tests::engine_with(store::ShardConfig {
        memory_limit_bytes: 2 << 20,
        max_item_size: 64 << 10,
    });
    let mut s = resp2();
    let value = "v".repeat(1000);
    // More than the store holds: it is full, and evicts from then on.
    for i in 0..2500 {
        let key = format!("old:{i}");
        assert_eq!(call(&mut e, &mut s, &["SET", &key, &value]), "+OK\r\n");
    }
    let before: std::collections::HashSet<String> = scan_all(&mut e, &mut s).into_iter().collect();
    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let (next, keys) = scan_reply(&call(&mut e, &mut s, &["SCAN", &cursor, "COUNT", "20"]));
        seen.extend(keys);
        calls += 1;
        // Every call, new keys push old ones out.
        for i in 0..5 {
            let key = format!("new:{calls}:{i}");
            assert_eq!(call(&mut e, &mut s, &["SET", &key, &value]), "+OK\r\n");
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
        assert!(calls < 10_000, "no end");
    }
    let after: std::collections::HashSet<String> = scan_all(&mut e, &mut s).into_iter().collect();
    let held: Vec<&String> = before.intersection(&after).collect();
    assert!(
        held.len() < before.len(),
        "nothing was evicted: the test proves nothing"
    );
    assert!(
        !held.is_empty(),
        "everything was evicted: the test proves nothing"
    );
    for key in held {
        assert_eq!(seen.iter().filter(|k| *k == key).count(), 1, "{key}");
    }
}

/// Every key of a full `SCAN` iteration with nothing written meanwhile.
fn scan_all(e: &mut Engine, s: &mut Session) -> Vec<String> {
    let mut all = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, keys) = scan_reply(&call(e, s, &["SCAN", &cursor, "COUNT", "1000"]));
        all.extend(keys);
        cursor = next;
        if cursor == "0" {
            return all;
        }
    }
}

/// With two workers the cursor names the worker: a full iteration returns both workers' keys,
/// and `KEYS` joins both workers' matches.
#[test]
fn scan_and_keys_span_workers() {
    let mut home = Engine::new(config(2, 0));
    let mut owner = Engine::new(config(2, 1));
    let keys: Vec<String> = (0..50).map(|i| format!("key:{i}")).collect();
    let mut input = Vec::new();
    for key in &keys {
        input.extend(command(&[b"SET", key.as_bytes(), b"v"]));
    }
    run_on_two_workers(&mut home, &mut owner, &input, false);
    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    for _ in 0..1000 {
        let reply = run_on_two_workers(
            &mut home,
            &mut owner,
            &command(&[b"SCAN", cursor.as_bytes(), b"COUNT", b"5"]),
            false,
        );
        let (next, found) = scan_reply(&reply);
        seen.extend(found);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(cursor, "0");
    seen.sort();
    seen.dedup();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(seen, want);
    let reply = run_on_two_workers(
        &mut home,
        &mut owner,
        &command(&[b"KEYS", b"key:4?"]),
        false,
    );
    let mut found: Vec<&str> = reply
        .split("\r\n")
        .filter(|l| l.starts_with("key:"))
        .collect();
    found.sort();
    let want: Vec<String> = (40..50).map(|i| format!("key:{i}")).collect();
    assert_eq!(found, want);
    assert!(reply.starts_with("*10\r\n"), "{reply}");
}

/// A watched key the connection itself writes and deletes again fails `EXEC`, as in Redis
/// (the key is absent at `WATCH` and at `EXEC`, but was touched between).
#[test]
fn a_watched_key_written_and_deleted_by_the_connection_fails_exec() {
    let mut e = engine();
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    assert_eq!(c(&["WATCH", "k"]), "+OK\r\n");
    assert_eq!(c(&["SET", "k", "1"]), "+OK\r\n");
    assert_eq!(c(&["DEL", "k"]), ":1\r\n");
    assert_eq!(c(&["MULTI"]), "+OK\r\n");
    assert_eq!(c(&["SET", "k", "2"]), "+QUEUED\r\n");
    assert_eq!(c(&["EXEC"]), "*-1\r\n");
    assert_eq!(c(&["GET", "k"]), "$-1\r\n");
}

/// Regression: a watched key absent at `WATCH` and at `EXEC` that another client created and
/// deleted between (or a memcached client, or a `FLUSHALL`) let `EXEC` run; Redis counts the
/// key as modified. A key that expires between fails it too; writes to other keys do not.
#[test]
fn a_watched_key_created_and_deleted_by_another_client_fails_exec() {
    type Change = fn(&mut Engine, &mut Session);
    let changes: [(&str, Change); 3] = [
        ("SET and DEL", |e, o| {
            assert_eq!(call(e, o, &["SET", "k", "x"]), "+OK\r\n");
            assert_eq!(call(e, o, &["DEL", "k"]), ":1\r\n");
        }),
        ("memcached set and delete", |e, _| {
            let mut text = Session::default();
            let mut out = Vec::new();
            e.execute(
                &mut text,
                b"set k 0 0 1\r\ny\r\ndelete k\r\n",
                &mut out,
                now(),
            );
            assert_eq!(out, b"STORED\r\nDELETED\r\n");
        }),
        ("SET and FLUSHALL", |e, o| {
            assert_eq!(call(e, o, &["SET", "k", "x"]), "+OK\r\n");
            assert_eq!(call(e, o, &["FLUSHALL"]), "+OK\r\n");
        }),
    ];
    for (what, change) in changes {
        let mut e = engine();
        let mut s = resp2();
        let mut other = resp2();
        assert_eq!(call(&mut e, &mut s, &["WATCH", "k"]), "+OK\r\n", "{what}");
        change(&mut e, &mut other);
        assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
        assert_eq!(call(&mut e, &mut s, &["SET", "k", "mine"]), "+QUEUED\r\n");
        assert_eq!(call(&mut e, &mut s, &["EXEC"]), "*-1\r\n", "{what}");
        assert_eq!(call(&mut e, &mut s, &["GET", "k"]), "$-1\r\n", "{what}");
    }
    // Writes to other keys, a FLUSHALL that removes no watched key (Redis 7 touches only the
    // watched keys a flush removes), commands that leave the key as it was, and a watch
    // released by UNWATCH leave the EXEC alone.
    let mut e = engine();
    let mut s = resp2();
    let mut other = resp2();
    assert_eq!(call(&mut e, &mut s, &["WATCH", "k"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut other, &["FLUSHALL"]), "+OK\r\n");
    // Regression: a DEL or EXPIRE of the absent watched key changes nothing, and Redis does
    // not count it (the first write marks noted every delete, done or not).
    assert_eq!(call(&mut e, &mut other, &["DEL", "k"]), ":0\r\n");
    assert_eq!(call(&mut e, &mut s, &["DEL", "k"]), ":0\r\n");
    assert_eq!(call(&mut e, &mut other, &["EXPIRE", "k", "10"]), ":0\r\n");
    assert_eq!(
        call(&mut e, &mut other, &["SET", "k", "x", "XX"]),
        "$-1\r\n"
    );
    assert_eq!(call(&mut e, &mut other, &["SET", "j", "x"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut other, &["DEL", "j"]), ":1\r\n");
    assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["SET", "k", "mine"]), "+QUEUED\r\n");
    assert_eq!(call(&mut e, &mut s, &["EXEC"]), "*1\r\n+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["WATCH", "k"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["UNWATCH"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut other, &["SET", "k", "x"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["WATCH", "k"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["EXEC"]), "*0\r\n");
    // A watched key that expires before EXEC fails it, though nobody wrote it.
    assert_eq!(
        call(&mut e, &mut s, &["SET", "t", "v", "PX", "5"]),
        "+OK\r\n"
    );
    assert_eq!(call(&mut e, &mut s, &["WATCH", "t"]), "+OK\r\n");
    let later = Now::from_millis(NOW * 1000 + 10);
    assert_eq!(
        run_at(&mut e, &mut s, &command(&[b"MULTI"]), later),
        "+OK\r\n"
    );
    assert_eq!(
        run_at(&mut e, &mut s, &command(&[b"SET", b"t", b"mine"]), later),
        "+QUEUED\r\n"
    );
    assert_eq!(
        run_at(&mut e, &mut s, &command(&[b"EXEC"]), later),
        "*-1\r\n"
    );
}

/// `TOUCH` counts the keys held (a key named twice counts twice, as in Redis) without
/// changing them: a watching transaction still runs; with two workers each owner counts its
/// own keys and the counts add up.
#[test]
fn touch_counts_held_keys_and_changes_nothing() {
    let mut e = engine();
    let mut s = resp2();
    let mut other = resp2();
    assert_eq!(
        call(&mut e, &mut s, &["SET", "a", "1", "PX", "5000"]),
        "+OK\r\n"
    );
    assert_eq!(call(&mut e, &mut s, &["SET", "b", "2"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["WATCH", "a"]), "+OK\r\n");
    assert_eq!(
        call(&mut e, &mut other, &["TOUCH", "a", "b", "missing", "a"]),
        ":3\r\n"
    );
    assert_eq!(call(&mut e, &mut s, &["PTTL", "a"]), ":5000\r\n");
    assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["GET", "a"]), "+QUEUED\r\n");
    assert_eq!(call(&mut e, &mut s, &["EXEC"]), "*1\r\n$1\r\n1\r\n");
    assert_eq!(
        call(&mut e, &mut s, &["TOUCH"]),
        "-ERR wrong number of arguments for 'touch' command\r\n"
    );
    let mut home = Engine::new(config(2, 0));
    let mut owner = Engine::new(config(2, 1));
    let keys: Vec<String> = (0..20).map(|i| format!("key:{i}")).collect();
    let mut input = Vec::new();
    for key in &keys[..10] {
        input.extend(command(&[b"SET", key.as_bytes(), b"v"]));
    }
    run_on_two_workers(&mut home, &mut owner, &input, false);
    let mut touch: Vec<&[u8]> = vec![b"TOUCH"];
    touch.extend(keys.iter().map(|k| k.as_bytes()));
    assert_eq!(
        run_on_two_workers(&mut home, &mut owner, &command(&touch), false),
        ":10\r\n"
    );
}

/// `SWAPDB` trades two databases' keys for every connection at once (the other connection
/// sees it at its next command), with Redis's errors; memcached's protocols keep the store's
/// namespace 0, which Redis's database 1 means after `SWAPDB 0 1`.
#[test]
fn swapdb_trades_two_databases_for_every_connection() {
    let mut e = engine();
    let mut s = resp2();
    let mut other = resp2();
    let script: &[(&[&str], &str)] = &[
        (&["SET", "a", "zero"], "+OK\r\n"),
        (&["SET", "only0", "x", "PX", "5000"], "+OK\r\n"),
        (&["SELECT", "1"], "+OK\r\n"),
        (&["SET", "a", "one"], "+OK\r\n"),
        (&["SWAPDB", "0", "1"], "+OK\r\n"),
        (&["GET", "a"], "$4\r\nzero\r\n"),
        (&["PTTL", "only0"], ":5000\r\n"),
        (&["DBSIZE"], ":2\r\n"),
        (&["SELECT", "0"], "+OK\r\n"),
        (&["GET", "a"], "$3\r\none\r\n"),
        (&["EXISTS", "only0"], ":0\r\n"),
        (&["KEYS", "*"], "*1\r\n$1\r\na\r\n"),
        (&["MOVE", "a", "1"], ":0\r\n"),
        (&["SWAPDB", "1", "1"], "+OK\r\n"),
        (&["SWAPDB", "x", "1"], "-ERR invalid first DB index\r\n"),
        (&["SWAPDB", "0", "1.5"], "-ERR invalid second DB index\r\n"),
        (
            &["SWAPDB", "99999999999", "1"],
            "-ERR invalid first DB index\r\n",
        ),
        (&["SWAPDB", "0", "16"], "-ERR DB index is out of range\r\n"),
        (&["SWAPDB", "-1", "0"], "-ERR DB index is out of range\r\n"),
        (
            &["SWAPDB", "0"],
            "-ERR wrong number of arguments for 'swapdb' command\r\n",
        ),
    ];
    for (args, want) in script {
        assert_eq!(call(&mut e, &mut s, args), *want, "{args:?}");
    }
    // The other connection, in database 0, sees the swap.
    assert_eq!(call(&mut e, &mut other, &["GET", "a"]), "$3\r\none\r\n");
    // memcached reads the store's namespace 0: what database 1 means now.
    let mut text = Session::default();
    let mut out = Vec::new();
    e.execute(&mut text, b"get a\r\n", &mut out, now());
    assert_eq!(out, b"VALUE a 0 4\r\nzero\r\nEND\r\n");
    // Swapped back, everything is where it was.
    assert_eq!(call(&mut e, &mut other, &["SWAPDB", "1", "0"]), "+OK\r\n");
    assert_eq!(call(&mut e, &mut s, &["GET", "a"]), "$4\r\nzero\r\n");
    assert_eq!(call(&mut e, &mut s, &["EXISTS", "only0"]), ":1\r\n");
}

/// A watched key held in either swapped database fails the watcher's `EXEC`, as Redis
/// touches it; one held in neither does not.
#[test]
fn swapdb_fails_exec_of_a_key_held_in_either_database() {
    for (setup, fails) in [
        (&["SET", "k", "v"][..], true),
        (&["SET", "elsewhere", "v"], false),
    ] {
        let mut e = engine();
        let mut s = resp2();
        let mut other = resp2();
        assert_eq!(call(&mut e, &mut other, &["SELECT", "3"]), "+OK\r\n");
        assert_eq!(call(&mut e, &mut other, setup), "+OK\r\n");
        assert_eq!(call(&mut e, &mut s, &["WATCH", "k"]), "+OK\r\n");
        assert_eq!(call(&mut e, &mut other, &["SWAPDB", "0", "3"]), "+OK\r\n");
        assert_eq!(call(&mut e, &mut s, &["MULTI"]), "+OK\r\n");
        assert_eq!(call(&mut e, &mut s, &["SET", "k", "mine"]), "+QUEUED\r\n");
        let want = if fails { "*-1\r\n" } else { "*1\r\n+OK\r\n" };
        assert_eq!(call(&mut e, &mut s, &["EXEC"]), want, "{setup:?}");
    }
}

/// With two workers (one control, as a server has) a swap made on one is what a command
/// forwarded to the other sees.
#[test]
fn swapdb_holds_on_every_worker() {
    let shared = shared_config(2);
    let mut home = Engine::new(shared(0));
    let mut owner = Engine::new(shared(1));
    let keys: Vec<String> = (0..20).map(|i| format!("key:{i}")).collect();
    let mut input = Vec::new();
    for key in &keys {
        input.extend(command(&[b"SET", key.as_bytes(), b"zero"]));
    }
    input.extend(command(&[b"SELECT", b"1"]));
    for key in &keys {
        input.extend(command(&[b"SET", key.as_bytes(), b"one"]));
    }
    input.extend(command(&[b"SWAPDB", b"0", b"1"]));
    run_on_two_workers(&mut home, &mut owner, &input, false);
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(keys.iter().map(|k| k.as_bytes()));
    let reply = run_on_two_workers(&mut home, &mut owner, &command(&mget), false);
    assert_eq!(
        reply.matches("$3\r\none\r\n").count(),
        keys.len(),
        "{reply}"
    );
}

/// `EXPIRETIME`, `RENAME`, `RENAMENX`, `COPY`, `RANDOMKEY`, `WAIT` and `FUNCTION FLUSH` as
/// redis-server 7 answers them.
#[test]
fn keyspace_commands_as_redis_answers_them() {
    let mut e = engine();
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    let script: &[(&[&str], &str)] = &[
        (&["RANDOMKEY"], "$-1\r\n"),
        (&["SET", "a", "1", "PXAT", "1700000100500"], "+OK\r\n"),
        (&["SET", "b", "2"], "+OK\r\n"),
        (&["EXPIRETIME", "nope"], ":-2\r\n"),
        (&["EXPIRETIME", "b"], ":-1\r\n"),
        (&["EXPIRETIME", "a"], ":1700000100\r\n"),
        (&["PEXPIRETIME", "a"], ":1700000100500\r\n"),
        (&["RENAME", "nope", "x"], "-ERR no such key\r\n"),
        (&["RENAME", "a", "a"], "+OK\r\n"),
        (&["RENAMENX", "a", "a"], ":0\r\n"),
        (&["RENAMENX", "a", "b"], ":0\r\n"),
        (&["RENAME", "a", "c"], "+OK\r\n"),
        (&["EXISTS", "a"], ":0\r\n"),
        (&["PEXPIRETIME", "c"], ":1700000100500\r\n"),
        (
            &["COPY", "c", "c"],
            "-ERR source and destination objects are the same\r\n",
        ),
        (&["COPY", "c", "d"], ":1\r\n"),
        (&["COPY", "c", "d"], ":0\r\n"),
        (&["COPY", "c", "d", "REPLACE"], ":1\r\n"),
        (&["COPY", "c", "d", "DB", "3"], ":1\r\n"),
        (
            &["COPY", "c", "d", "DB", "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["COPY", "c", "d", "DB", "99"],
            "-ERR DB index is out of range\r\n",
        ),
        (&["COPY", "c", "d", "BOGUS"], "-ERR syntax error\r\n"),
        (&["COPY", "nope", "z"], ":0\r\n"),
        (&["SELECT", "3"], "+OK\r\n"),
        (&["GET", "d"], "$1\r\n1\r\n"),
        (&["RANDOMKEY"], "$1\r\nd\r\n"),
        (&["SELECT", "0"], "+OK\r\n"),
        (&["WAIT", "0", "0"], ":0\r\n"),
        (&["WAIT", "0", "-1"], "-ERR timeout is negative\r\n"),
        (
            &["WAIT", "x", "0"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (&["FUNCTION", "FLUSH"], "+OK\r\n"),
        (&["FUNCTION", "FLUSH", "ASYNC"], "+OK\r\n"),
        (
            &["FUNCTION", "FLUSH", "x"],
            "-ERR FUNCTION FLUSH only supports SYNC|ASYNC option\r\n",
        ),
    ];
    for (args, want) in script {
        assert_eq!(c(args), *want, "{args:?}");
    }
}

/// `OBJECT`, `MEMORY USAGE` and `CLIENT NO-EVICT | NO-TOUCH | INFO`.
#[test]
fn object_memory_and_client_info() {
    let mut e = engine();
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    let raw = "a".repeat(45);
    let script: &[(&[&str], &str)] = &[
        (&["SET", "i", "123"], "+OK\r\n"),
        (&["SET", "e", "hello"], "+OK\r\n"),
        (&["SET", "r", &raw], "+OK\r\n"),
        (&["OBJECT", "ENCODING", "i"], "$3\r\nint\r\n"),
        (&["OBJECT", "ENCODING", "e"], "$6\r\nembstr\r\n"),
        (&["OBJECT", "ENCODING", "r"], "$3\r\nraw\r\n"),
        (&["OBJECT", "ENCODING", "nope"], "$-1\r\n"),
        (&["OBJECT", "IDLETIME", "i"], ":0\r\n"),
        (&["OBJECT", "REFCOUNT", "i"], ":1\r\n"),
        (
            &["OBJECT", "BOGUS", "i"],
            "-ERR unknown subcommand 'BOGUS'. Try OBJECT HELP.\r\n",
        ),
        (
            &["OBJECT", "ENCODING"],
            "-ERR wrong number of arguments for 'object|encoding' command\r\n",
        ),
        (&["MEMORY", "USAGE", "nope"], "$-1\r\n"),
        (
            &["MEMORY", "USAGE", "i", "FOO", "1"],
            "-ERR syntax error\r\n",
        ),
        (
            &["MEMORY", "BOGUS"],
            "-ERR unknown subcommand 'BOGUS'. Try MEMORY HELP.\r\n",
        ),
        (&["CLIENT", "NO-EVICT", "on"], "+OK\r\n"),
        (&["CLIENT", "NO-TOUCH", "off"], "+OK\r\n"),
        (&["CLIENT", "NO-EVICT", "maybe"], "-ERR syntax error\r\n"),
    ];
    for (args, want) in script {
        assert_eq!(c(args), *want, "{args:?}");
    }
    let usage = c(&["MEMORY", "USAGE", "e"]);
    assert_eq!(usage, format!(":{}\r\n", store::item_size(1, 5)));
    assert_eq!(c(&["SELECT", "2"]), "+OK\r\n");
    assert_eq!(c(&["WATCH", "x"]), "+OK\r\n");
    let info = c(&["CLIENT", "INFO"]);
    assert!(info.contains(" db=2 multi=-1 watch=1 resp=2 "), "{info}");
}

/// With `--requirepass` every command but `AUTH`, `HELLO`, `QUIT` and `RESET` is refused
/// until the connection gives the password (redis-server 7.0's words); `RESET` forgets it.
#[test]
fn requirepass_refuses_commands_until_auth() {
    let mut e = Engine::new(EngineConfig {
        requirepass: Some(Secret(b"sekret"[..].into())),
        ..config(1, 0)
    });
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    let noauth = "-NOAUTH Authentication required.\r\n";
    let wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    let script: &[(&[&str], &str)] = &[
        (&["GET", "a"], noauth),
        (&["PING"], noauth),
        (
            &["NOPE"],
            "-ERR unknown command 'NOPE', with args beginning with: \r\n",
        ),
        (
            &["HELLO", "3"],
            "-NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO AUTH <user> <pass> option can be used to authenticate the client and select \
             the RESP protocol version at the same time\r\n",
        ),
        (&["HELLO", "2", "AUTH", "default", "wrong"], wrongpass),
        (&["AUTH", "wrong"], wrongpass),
        (&["AUTH", "a", "b", "c"], "-ERR syntax error\r\n"),
        (&["AUTH", "other", "sekret"], wrongpass),
        (&["AUTH", "sekret"], "+OK\r\n"),
        (&["GET", "a"], "$-1\r\n"),
        (&["RESET"], "+RESET\r\n"),
        (&["GET", "a"], noauth),
        (&["AUTH", "default", "sekret"], "+OK\r\n"),
        (&["SET", "a", "1"], "+OK\r\n"),
    ];
    for (args, want) in script {
        assert_eq!(c(args), *want, "{args:?}");
    }
    // Without a password, AUTH with one argument is Redis's configuration error.
    let mut e = engine();
    let mut s = resp2();
    assert_eq!(
        call(&mut e, &mut s, &["AUTH", "x"]),
        "-ERR AUTH <password> called without any password configured for the default user. \
         Are you sure your configuration is correct?\r\n"
    );
    assert_eq!(call(&mut e, &mut s, &["AUTH", "default", "any"]), "+OK\r\n");
}

/// The text of an `INFO` reply in RESP2 (a bulk string).
#[track_caller]
fn info_body(reply: &str) -> String {
    let (frame, len) = Frame::parse(reply.as_bytes()).unwrap();
    assert_eq!(len, reply.len(), "{reply}");
    let Frame::Bulk(text) = frame else {
        panic!("a bulk string in RESP2: {reply}")
    };
    String::from_utf8_lossy(text).into_owned()
}

/// `INFO keyspace` lists each database that holds keys under its own number, with the keys
/// that expire and their mean remaining time to live; after `SWAPDB` under the number that
/// means it now.
#[test]
fn info_keyspace_lists_each_database() {
    let mut e = engine();
    let mut s = resp2();
    let mut c = |args: &[&str]| call(&mut e, &mut s, args);
    c(&["SET", "a", "1"]);
    c(&["SET", "b", "2", "PX", "10000"]);
    c(&["SELECT", "2"]);
    c(&["SET", "a", "1"]);
    c(&["SET", "c", "3", "PX", "20000"]);
    c(&["SET", "d", "4", "PX", "40000"]);
    assert_eq!(
        info_body(&c(&["INFO", "keyspace"])),
        "# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=10000\r\n\
         db2:keys=3,expires=2,avg_ttl=30000\r\n"
    );
    c(&["SWAPDB", "0", "2"]);
    c(&["SWAPDB", "2", "5"]);
    let all = info_body(&c(&["INFO", "everything"]));
    assert!(
        all.ends_with(
            "\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=2,avg_ttl=30000\r\n\
             db5:keys=2,expires=1,avg_ttl=10000\r\n"
        ),
        "{all}"
    );
    c(&["FLUSHALL"]);
    assert_eq!(info_body(&c(&["INFO", "keyspace"])), "# Keyspace\r\n");
}

/// Only `INFO` with its keyspace section asks every worker to walk its table; the other
/// sections (and memcached's `stats`) take the counters alone.
#[test]
fn only_the_keyspace_section_walks_the_table() {
    let of = |names: &[&str]| {
        let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        super::Sections::of(&names).group()
    };
    assert_eq!(of(&[]), Group::Keyspace);
    assert_eq!(of(&["all"]), Group::Keyspace);
    assert_eq!(of(&["memory", "KEYSPACE"]), Group::Keyspace);
    assert_eq!(
        of(&["server", "clients", "memory", "stats"]),
        Group::General
    );
    assert_eq!(of(&["nosuch"]), Group::General);
    // The general snapshot counts no namespace.
    let e = engine();
    assert!(e.snapshot().keyspace.is_empty());
}

/// With two workers each counts the keys of its own table and the counts add up.
#[test]
fn info_keyspace_adds_up_every_workers_keys() {
    let shared = shared_config(2);
    let mut home = Engine::new(shared(0));
    let mut owner = Engine::new(shared(1));
    let keys: Vec<String> = (0..20).map(|i| format!("key:{i}")).collect();
    let mut input = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        if i % 2 == 0 {
            input.extend(command(&[b"SET", key.as_bytes(), b"v", b"PX", b"10000"]));
        } else {
            input.extend(command(&[b"SET", key.as_bytes(), b"v"]));
        }
    }
    input.extend(command(&[b"SELECT", b"3"]));
    for key in &keys[..5] {
        input.extend(command(&[b"SET", key.as_bytes(), b"v"]));
    }
    run_on_two_workers(&mut home, &mut owner, &input, false);
    // Both workers hold some of them.
    assert!(home.snapshot().shard.curr_items > 0);
    assert!(owner.snapshot().shard.curr_items > 0);
    let reply = run_on_two_workers(
        &mut home,
        &mut owner,
        &command(&[b"INFO", b"keyspace"]),
        false,
    );
    assert_eq!(
        info_body(&reply),
        "# Keyspace\r\ndb0:keys=20,expires=10,avg_ttl=10000\r\n\
         db3:keys=5,expires=0,avg_ttl=0\r\n"
    );
}

/// A Redis client's session on a connection accepted on the RESP port at `opened_secs` from
/// peer port `port`, with its record, as the packet path makes it (its token is `port`).
fn accepted_redis_client(e: &Engine, port: u16, opened_secs: u64) -> Session {
    use std::net::SocketAddr;
    let peer = SocketAddr::from(([127, 0, 0, 1], port));
    let local = SocketAddr::from(([127, 0, 0, 1], 6379));
    let record =
        e.control()
            .open_connection(0, Some(peer), Some(local), Now::from_secs(opened_secs));
    // Its token, as its first turn sets it: the peer's port stands for the table's id.
    record.set_token(u128::from(port));
    let mut conn = crate::conn::ClientConn::default();
    conn.session.set_record(record);
    conn.accepted_on(6379, Some(6379));
    std::mem::take(&mut conn.session)
}

/// `CLIENT LIST` shows every Redis client connection from the registry in the order they
/// opened, each with the name, database and RESP version its session noted, the asking one
/// with its command; memcached's connections are not listed. `TYPE` and `ID`
/// filter it as Redis does.
#[test]
fn client_list_shows_every_redis_connection() {
    let mut e = engine();
    let mut a = accepted_redis_client(&e, 5001, NOW - 5);
    let mut b = accepted_redis_client(&e, 5002, NOW - 3);
    let mut memcached = Session::default();
    memcached.set_record(
        e.control()
            .open_connection(0, None, None, Now::from_secs(NOW)),
    );
    assert!(run_at(&mut e, &mut memcached, b"version\r\n", now()).starts_with("VERSION "));
    assert!(call(&mut e, &mut a, &["HELLO", "3", "SETNAME", "app"]).starts_with("%7"));
    assert_eq!(call(&mut e, &mut b, &["SELECT", "2"]), "+OK\r\n");
    let (ida, idb) = (a.record().unwrap().number, b.record().unwrap().number);
    let neutral = "sub=0 psub=0 ssub=0";
    let buffers = "qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 \
                   tot-mem=0 events=r";
    let line_a = format!(
        "id={ida} addr=127.0.0.1:5001 laddr=127.0.0.1:6379 fd=-1 name=app age=5 idle=0 \
         flags=N db=0 {neutral} multi=-1 {buffers} cmd=NULL user=default redir=-1 resp=3\n"
    );
    let line_b = format!(
        "id={idb} addr=127.0.0.1:5002 laddr=127.0.0.1:6379 fd=-1 name= age=3 idle=0 \
         flags=N db=2 {neutral} multi=-1 {buffers} cmd=client|list user=default redir=-1 \
         resp=2\n"
    );
    let list = call(&mut e, &mut b, &["CLIENT", "LIST"]);
    let body = format!("{line_a}{line_b}");
    assert_eq!(list, format!("${}\r\n{body}\r\n", body.len()));
    let only_a = call(
        &mut e,
        &mut b,
        &["CLIENT", "LIST", "ID", &ida.to_string(), "999"],
    );
    assert_eq!(only_a, format!("${}\r\n{line_a}\r\n", line_a.len()));
    let normal = call(&mut e, &mut b, &["client", "list", "type", "NORMAL"]);
    assert_eq!(normal, list);
    let c = |e: &mut Engine, b: &mut Session, args: &[&str]| call(e, b, args);
    for (args, reply) in [
        (&["CLIENT", "LIST", "TYPE", "pubsub"][..], "$0\r\n\r\n"),
        (
            &["CLIENT", "LIST", "TYPE", "x"],
            "-ERR Unknown client type 'x'\r\n",
        ),
        (&["CLIENT", "LIST", "ID", "0"], "-ERR Invalid client ID\r\n"),
        (&["CLIENT", "LIST", "ID", "a"], "-ERR Invalid client ID\r\n"),
        (&["CLIENT", "LIST", "ID"], "-ERR syntax error\r\n"),
        (&["CLIENT", "LIST", "foo"], "-ERR syntax error\r\n"),
    ] {
        assert_eq!(c(&mut e, &mut b, args), reply, "{args:?}");
    }
}

/// `CLIENT KILL` marks each Redis connection its filters match for its worker to close (the
/// worker finds it by the token left in `control.kills`), closes the asking one after its
/// reply when it matches, and answers as Redis does: the old form `OK` or `No such client`,
/// the new one the number closed, skipping the asking connection unless `SKIPME no`.
#[test]
fn client_kill_marks_the_matching_connections_for_their_worker() {
    let mut e = engine();
    let mut a = accepted_redis_client(&e, 5001, NOW - 5);
    let mut b = accepted_redis_client(&e, 5002, NOW - 3);
    let mut memcached = Session::default();
    memcached.set_record(
        e.control()
            .open_connection(0, None, None, Now::from_secs(NOW)),
    );
    let idb = b.record().unwrap().number.to_string();
    let control = std::sync::Arc::clone(e.control());
    let marked = || {
        let mut tokens = Vec::new();
        control.kills.drain(0, |token| tokens.push(token));
        tokens
    };
    let mut c = |args: &[&str]| call(&mut e, &mut a, args);
    for (args, reply) in [
        (
            &["CLIENT", "KILL", "127.0.0.1:9"][..],
            "-ERR No such client\r\n",
        ),
        (&["CLIENT", "KILL", "ID"], "-ERR No such client\r\n"),
        (
            &["CLIENT", "KILL", "ID", "0"],
            "-ERR client-id should be greater than 0\r\n",
        ),
        (
            &["CLIENT", "KILL", "ID", "1", "SKIPME"],
            "-ERR syntax error\r\n",
        ),
        (
            &["CLIENT", "KILL", "SKIPME", "maybe"],
            "-ERR syntax error\r\n",
        ),
        (
            &["CLIENT", "KILL", "USER", "bob"],
            "-ERR No such user 'bob'\r\n",
        ),
        (
            &["CLIENT", "KILL", "TYPE", "x"],
            "-ERR Unknown client type 'x'\r\n",
        ),
        (
            &["CLIENT", "KILL", "MAXAGE", "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (&["CLIENT", "KILL", "TYPE", "pubsub"], ":0\r\n"),
        (&["CLIENT", "KILL", "ADDR", "127.0.0.1:5001"], ":0\r\n"),
        (
            &["CLIENT", "KILL", "MAXAGE", "4", "USER", "default"],
            ":0\r\n",
        ),
    ] {
        assert_eq!(c(args), reply, "{args:?}");
    }
    assert!(marked().is_empty());
    assert_eq!(
        c(&["CLIENT", "KILL", "ID", &idb, "TYPE", "normal"]),
        ":1\r\n"
    );
    assert_eq!(marked(), [5002]);
    assert_eq!(c(&["CLIENT", "KILL", "127.0.0.1:5002"]), "+OK\r\n");
    assert_eq!(marked(), [5002]);
    assert_eq!(
        c(&["CLIENT", "KILL", "LADDR", "127.0.0.1:6379", "MAXAGE", "4"]),
        ":0\r\n"
    );
    assert!(marked().is_empty(), "b is 3 seconds old, a skips itself");
    assert!(!a.is_closing());
    let killed = call(
        &mut e,
        &mut a,
        &["CLIENT", "KILL", "MAXAGE", "4", "SKIPME", "no"],
    );
    assert_eq!(killed, ":1\r\n");
    assert!(marked().is_empty(), "the asking connection closes itself");
    assert!(a.is_closing());
    // The old form closes the asking connection too, after its reply.
    assert_eq!(
        call(&mut e, &mut b, &["CLIENT", "KILL", "127.0.0.1:5002"]),
        "+OK\r\n"
    );
    assert!(b.is_closing());
}
