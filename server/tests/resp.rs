//! RESP (`--resp-port`) for real, with Redis's own tools: `redis-cli`, `redis-benchmark` and
//! redis-py (Debian `redis-tools`, `python3-redis`) against memspin over kernel sockets
//! (127.0.0.1), TAP (a namespace of its own) and AF_XDP (a veth pair between two namespaces),
//! with one worker and with two.
//!
//! What "as Redis does" means here is checked against Redis itself: `redis-cli`'s transcript of
//! a script of every command and error (RESP2, and RESP3 after `HELLO 3`) must be byte for
//! byte the one a `redis-server` (Debian `redis-server`, started on a free loopback port,
//! persistence off) gives, and the redis-py session passes against `redis-server` too. Needs
//! root for the TAP and AF_XDP tests, as CI has.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use loadgen::client::Protocol;
use protocol::resp::write_command;
use support::redis::RedisServer;
use support::veth::Veth;
use support::{Netns, Server, assert_forwarded_both_ways};

/// One command per line, as `redis-cli` reads them from its input: every command memspin
/// serves, with the errors Redis 7 gives (`{same1}`, `{same2}`: two keys one worker of two
/// owns, for `MSETNX`, which memspin refuses across workers).
const CLI_SCRIPT: &str = r#"FLUSHALL
PING
PING "hello world"
PING a b
ECHO "x y"
ECHO
GET k
SET k v
GET k
GET k extra
SET k v2 NX
SET k v2 XX GET
SET k v3 NX GET
GET k
SET new n XX
SET k v EX 0
SET k v EX -1
SET k v PX 0
SET k v EX 9223372036854775807
SET k v EX 1.5
SET k v EX 10 PX 100
SET k v KEEPTTL EX 1
SET k v NX XX
SET k v foo
SET k v EX
SET gone v EXAT 1
GET gone
SET t v EX 100
TTL t
SET t w KEEPTTL
TTL t
SET t x
TTL t
SETNX k v
SETNX k2 v
SETNX k2
SETEX k 0 v
SETEX k x v
SETEX k 100 v
TTL k
PSETEX k -1 v
GETSET k new
GETSET nokey x
TTL k
GETDEL k
GETDEL k
SET k v EX 100
GETEX k
GETEX k PERSIST
TTL k
GETEX k EX 50
TTL k
GETEX k EX 0
GETEX k PERSIST EX 5
GETEX missing EX 5
GETEX k foo
GETEX k EXAT 1
EXISTS k
MSET a 1 b 2 c 3 d 4 e 5 f 6 g 7 h 8 i 9 j 10
MGET a b c d e f g h i j nope a
MSET a 1 b
MSET
MGET
MSETNX a 1 {same1} 3
MSETNX {same2} 1 {same1} 3
MGET {same2} {same1}
DEL a a nope c d
UNLINK e f
EXISTS a b b g h nope
EXISTS
DEL
SET n 10
INCR n
DECR n
INCRBY n -5
DECRBY n 3
INCRBY n x
INCRBY n 9223372036854775807
DECRBY n -9223372036854775808
SET n " 1"
INCR n
INCR newcounter
INCR
SET ttlkeep 5 EX 100
INCR ttlkeep
TTL ttlkeep
APPEND ap hello
APPEND ap " world"
GET ap
STRLEN ap
STRLEN nope
EXPIRE ap 100
TTL ap
EXPIRE ap 100 NX
EXPIRE ap 50 GT
EXPIRE ap 200 GT
TTL ap
EXPIRE ap 150 LT
TTL ap
EXPIRE ap 100 foo
EXPIRE ap 100 NX XX
EXPIRE ap 100 GT LT
EXPIRE ap x
EXPIRE nokey2 10
PERSIST ap
PERSIST ap
TTL ap
PTTL ap
TTL nokey2
PEXPIRE ap 9223372036854775807
EXPIRE ap -1
EXISTS ap
TYPE k2
TYPE nokey2
TYPE
SELECT 0
SELECT x
CLIENT SETNAME "my name"
CLIENT SETNAME myname
CLIENT GETNAME
CLIENT SETNAME ""
CLIENT GETNAME
CLIENT foo
CLIENT SETNAME
CONFIG GET save
CONFIG GET appendonly
CONFIG GET nosuchparameter
CONFIG GET
CONFIG foo
COMMAND foo
COMMAND INFO nosuchcommand
unknowncmd
foo a "b c"
HELLO 4
HELLO x
HELLO 2 AUTH a b
FLUSHDB ASYNC
DBSIZE
SET one 1
INFO keyspace
DBSIZE
DBSIZE x
FLUSHALL foo
FLUSHALL SYNC
DBSIZE
INFO keyspace
SET f 10.50
INCRBYFLOAT f 0.1
INCRBYFLOAT f -5
INCRBYFLOAT f abc
INCRBYFLOAT f inf
SET t hello EX 100
SETRANGE t 1 E
TTL t
SETRANGE t -1 x
SETRANGE nr 2 ""
GETRANGE t -3 -1
GETRANGE t a 1
SUBSTR t 0 2
SETBIT b 100 1
SETBIT b 8 2
GETBIT b 100
GETBIT b -1
SET bc foobar
BITCOUNT bc
BITCOUNT bc 5 30 BIT
BITCOUNT bc 1 2 foo
SET bp "\x00\xff\xf0"
BITPOS bp 1 2 -1 BYTE
BITPOS bp 1 7 15 BIT
BITPOS bp 2
SET {same1} ohmytext
SET {same2} mynewtext
LCS {same1} {same2}
LCS {same1} {same2} IDX MINMATCHLEN 4 WITHMATCHLEN
LCS {same1} {same2} LEN IDX
BITOP XOR {same1} {same1} {same2}
GET {same1}
BITOP NOT {same1} {same1} {same2}
BITFIELD bf SET i8 0 100 GET u4 0
BITFIELD bf OVERFLOW FAIL INCRBY u2 102 5
BITFIELD bf OVERFLOW SAT SET u8 0 -1 GET u8 #0
BITFIELD bf GET u64 0
BITFIELD_RO bf SET u8 0 1
TOUCH bf bc missing bf
TOUCH
SELECT 1
SET sw one
SELECT 0
SET sw zero
SWAPDB 0 1
GET sw
SELECT 1
GET sw
DBSIZE
SELECT 0
SWAPDB 1 0
GET sw
SWAPDB x 1
SWAPDB 0 99
FLUSHALL
SET k v
SELECT 3
SET a 1
SET b 2
SWAPDB 3 7
INFO keyspace
SWAPDB 3 7
SELECT 0
"#;

/// The same in RESP3 (`redis-cli -3` says `HELLO 3` first).
const CLI3_SCRIPT: &str = r#"FLUSHALL
SET k v
GET k
GET nope
MGET k nope
CONFIG GET save
CONFIG GET nosuch
INCR n
SET k v2 NX
INFO keyspace
CLIENT GETNAME
DEL k n
SET {same1} ohmytext
SET {same2} mynewtext
LCS {same1} {same2} IDX WITHMATCHLEN
INCRBYFLOAT n 2.5
BITFIELD b GET u8 0 OVERFLOW FAIL INCRBY u2 0 9
"#;

/// A redis-py session: every command through a real client library, expiry to the
/// millisecond, hundreds of keys in one `MSET`, `MGET`, `DEL` and `EXISTS` (replies in
/// request order, whichever worker owns each key), a pipeline, and (given the memcached port)
/// one store seen through both protocols.
const REDIS_PY_SCRIPT: &str = r#"import socket, sys, time
import redis

host, port, mc_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = redis.Redis(host=host, port=port, socket_timeout=10)

def check(what, got, want):
    if got != want:
        print("FAIL %s: got %r, want %r" % (what, got, want))
        sys.exit(1)

def error_of(call):
    try:
        call()
    except redis.ResponseError as e:
        return str(e)
    return None

check("ping", r.ping(), True)
check("flushall", r.flushall(), True)
check("echo", r.echo("hi there"), b"hi there")
check("set", r.set("k", "v"), True)
check("get", r.get("k"), b"v")
check("get miss", r.get("nope"), None)
check("set nx held", r.set("k", "x", nx=True), None)
check("set xx get", r.set("k", "v2", xx=True, get=True), b"v")
check("setnx", r.setnx("k2", "1"), True)
check("setex", r.setex("k3", 100, "v"), True)
check("ttl", r.ttl("k3"), 100)
check("psetex", r.psetex("k4", 100000, "v"), True)
check("pttl", 99000 < r.pttl("k4") <= 100000, True)
check("getset", r.getset("k", "v3"), b"v2")
check("getdel", r.getdel("k"), b"v3")
check("getdel gone", r.getdel("k"), None)
r.set("t", "v", ex=100)
check("getex persist", r.getex("t", persist=True), b"v")
check("ttl persisted", r.ttl("t"), -1)
check("getex px", r.getex("t", px=50000), b"v")
check("pttl getex", 49000 < r.pttl("t") <= 50000, True)
# Expiry to the millisecond.
r.set("soon", "v", px=300)
check("before expiry", r.get("soon"), b"v")
time.sleep(0.6)
check("after expiry", r.get("soon"), None)
check("pttl expired", r.pttl("soon"), -2)
r.set("at", "v")
check("pexpireat", r.pexpireat("at", int(time.time() * 1000) + 300), True)
time.sleep(0.6)
check("after pexpireat", r.exists("at"), 0)
# Many keys at once, whichever workers own them, in request order.
keys = ["key:%d" % i for i in range(300)]
check("mset", r.mset({k: k.upper() for k in keys}), True)
got = r.mget(keys + ["nope"] + keys[:5])
check("mget", got, [k.upper().encode() for k in keys] + [None] + [k.upper().encode() for k in keys[:5]])
check("exists", r.exists(*(keys + ["nope", keys[0]])), 301)
check("msetnx held", r.msetnx({"key:0": "x", "fresh": "y"}), False)
check("delete", r.delete(*(keys[:100] + ["nope"])), 100)
check("unlink", r.unlink(*keys[100:150]), 50)
check("exists after", r.exists(*keys), 150)
check("dbsize", r.dbsize(), 154)
# Counters.
check("incr", r.incr("n"), 1)
check("incrby", r.incrby("n", 41), 42)
check("decr", r.decr("n"), 41)
check("decrby", r.decrby("n", 40), 1)
r.set("s", "abc")
check("incr not integer", error_of(lambda: r.incr("s")), "value is not an integer or out of range")
r.set("max", str(2**63 - 1))
check("incr overflow", error_of(lambda: r.incr("max")), "increment or decrement would overflow")
check("append", r.append("ap", "hello"), 5)
check("append more", r.append("ap", " world"), 11)
check("strlen", r.strlen("ap"), 11)
check("expire", r.expire("ap", 100), True)
check("ttl ap", r.ttl("ap"), 100)
check("persist", r.persist("ap"), True)
check("ttl -1", r.ttl("ap"), -1)
check("ttl -2", r.ttl("nope"), -2)
check("expireat past deletes", r.expireat("ap", 1), True)
check("gone", r.get("ap"), None)
check("type", r.type("k2"), b"string")
check("type none", r.type("nope"), b"none")
# Errors, word for word.
check("wrong arity", error_of(lambda: r.execute_command("GET", "a", "b")), "wrong number of arguments for 'get' command")
check("unknown", error_of(lambda: r.execute_command("NOSUCH", "a")), "unknown command 'NOSUCH', with args beginning with: 'a' ")
check("syntax", error_of(lambda: r.execute_command("SET", "a", "b", "NX", "XX")), "syntax error")
check("not integer", error_of(lambda: r.execute_command("INCRBY", "n", "x")), "value is not an integer or out of range")
check("expire time", error_of(lambda: r.execute_command("SET", "a", "b", "EX", "0")), "invalid expire time in 'set' command")
# The connection goes on after errors.
check("after errors", r.get("k2"), b"1")
# The connection's own state.
check("client setname", r.client_setname("app"), True)
check("client getname", r.client_getname(), "app")
other = redis.Redis(host=host, port=port, socket_timeout=10)
check("client ids differ", r.client_id() != other.client_id(), True)
# CLIENT LIST and CLIENT KILL reach connections of every worker.
other.client_setname("other")
check("client list", sorted(c["name"] for c in r.client_list() if c["name"]), ["app", "other"])
check("client list id", [c["name"] for c in r.client_list(client_id=[str(other.client_id())])], ["other"])
def raw_client():
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(b"CLIENT ID\r\n")
    reply = b""
    while not reply.endswith(b"\r\n"):
        reply += s.recv(100)
    return s, int(reply[1:])
victim, victim_id = raw_client()
check("client kill id", r.client_kill_filter(_id=victim_id), 1)
# Its worker closes it: the peer sees the end of the stream.
check("killed by id", victim.recv(100), b"")
victim.close()
victim, _ = raw_client()
check("client kill addr", r.client_kill("%s:%d" % victim.getsockname()[:2]), True)
check("killed by addr", victim.recv(100), b"")
victim.close()
check("client kill none", error_of(lambda: r.client_kill("127.0.0.1:1")), "No such client")
check("client kill skips me", r.client_kill_filter(_id=r.client_id()), 0)
check("select 0", r.execute_command("SELECT", "0"), True)
info = r.info()
check("info redis_version", "redis_version" in info, True)
check("info db0", info.get("db0", {}).get("keys"), r.dbsize())
check("info stats", "keyspace_hits" in r.info("stats"), True)
check("info memory", "used_memory" in r.info("memory"), True)
check("config get", r.config_get("appendonly"), {"appendonly": "no"})
check("command count", r.command_count() > 30, True)
# Pipelined, no transaction: replies in order.
p = r.pipeline(transaction=False)
for i in range(200):
    p.set("p:%d" % i, i)
    p.get("p:%d" % i)
    p.incr("pn")
replies = p.execute()
check("pipeline", replies, [x for i in range(200) for x in (True, str(i).encode(), i + 1)])
# One store, both protocols: values are bytes, a RESP SET stores flags 0.
if mc_port:
    mc = socket.create_connection((host, mc_port), timeout=10)
    def mc_call(line, until=b"\r\n"):
        mc.sendall(line)
        data = b""
        while not data.endswith(until):
            data += mc.recv(65536)
        return data
    r.set("shared", b"from redis\x00\xff")
    check("memcached sees it", mc_call(b"get shared\r\n", b"END\r\n"), b"VALUE shared 0 12\r\nfrom redis\x00\xff\r\nEND\r\n")
    check("memcached set", mc_call(b"set frommc 7 0 5\r\nhello\r\n"), b"STORED\r\n")
    check("redis sees it", r.get("frommc"), b"hello")
    check("memcached counter", mc_call(b"set ctr 0 100 2\r\n41\r\n"), b"STORED\r\n")
    check("redis incr", r.incr("ctr"), 42)
    # memcached counts expiry in whole seconds: 99.x to 100 seconds are left.
    check("ttl from memcached", r.ttl("ctr") in (99, 100), True)
    check("memcached incr", mc_call(b"incr ctr 8\r\n"), b"50\r\n")
    check("redis del", r.delete("frommc"), 1)
    check("memcached miss", mc_call(b"get frommc\r\n", b"END\r\n"), b"END\r\n")
    mc.close()
check("flushdb", r.flushdb(), True)
check("empty", r.dbsize(), 0)
check("info keyspace empty", r.info("keyspace"), {})
# QUIT closes the connection; the client reconnects on its next command.
check("quit", r.execute_command("QUIT"), True)
# The server's FIN must have arrived for the pool to see the connection closed.
time.sleep(0.2)
check("after quit", r.ping(), True)
print("OK")
"#;

/// This file's servers are tested one at a time (each test holds the lock while its server
/// runs): their heavy clients (`redis-benchmark`, memspin-loadgen) would otherwise share the
/// machine's CPUs with every other test's server and clients.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Takes [`ONE_AT_A_TIME`] (a test that failed holding it does not stop the others).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A `redis-cli` script with `{same1}` and `{same2}` filled in.
fn fill_in(script: &str) -> String {
    let same: Vec<String> = (0..)
        .map(|i| format!("nx:{i}"))
        .filter(|key| server::engine::owner_of(key.as_bytes(), 2) == 1)
        .take(2)
        .collect();
    script
        .replace("{same1}", &same[0])
        .replace("{same2}", &same[1])
}

/// `redis-server`'s transcripts of [`CLI_SCRIPT`] and [`CLI3_SCRIPT`], taken once.
fn redis_transcripts() -> &'static (String, String) {
    static TRANSCRIPTS: OnceLock<(String, String)> = OnceLock::new();
    TRANSCRIPTS.get_or_init(|| {
        let redis = RedisServer::start();
        (
            redis_cli(None, redis.addr, &fill_in(CLI_SCRIPT), false),
            redis_cli(None, redis.addr, &fill_in(CLI3_SCRIPT), true),
        )
    })
}

/// A command run inside `netns` when given.
fn command(netns: Option<&Netns>, program: &str) -> Command {
    match netns {
        Some(ns) => ns.command(program),
        None => Command::new(program),
    }
}

/// Runs `cmd` with `input` on its stdin, for at most `limit`; returns its exit success,
/// stdout and stderr.
#[track_caller]
fn run_bounded(mut cmd: Command, input: &str, limit: Duration) -> (bool, String, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.is_some(), "{cmd:?} ran over {limit:?}:\n{out}{err}");
    (status.is_some_and(|s| s.success()), out, err)
}

/// `redis-cli --no-raw` (RESP3 with `-3`) with `script` on its input: its transcript.
#[track_caller]
fn redis_cli(netns: Option<&Netns>, addr: SocketAddr, script: &str, resp3: bool) -> String {
    let mut cmd = command(netns, "redis-cli");
    cmd.args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()]);
    cmd.arg("--no-raw");
    if resp3 {
        cmd.arg("-3");
    }
    let (ok, out, err) = run_bounded(cmd, script, Duration::from_secs(60));
    assert!(ok, "redis-cli failed:\n{out}{err}");
    // redis-cli adds the time a command took when it took over half a second: on a shared
    // machine that says nothing about the replies.
    out.lines()
        .filter(|line| {
            let timing = line
                .strip_prefix('(')
                .and_then(|l| l.strip_suffix("s)"))
                .is_some_and(|secs| secs.parse::<f64>().is_ok());
            !timing
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The redis-py session against `resp` (`mc`: the memcached port of the same server, or 0).
#[track_caller]
fn redis_py(netns: Option<&Netns>, resp: SocketAddr, mc: u16) {
    let mut cmd = command(netns, "/usr/bin/python3");
    cmd.args(["-c", REDIS_PY_SCRIPT, &resp.ip().to_string()]);
    cmd.args([resp.port().to_string(), mc.to_string()]);
    let (ok, out, err) = run_bounded(cmd, "", Duration::from_secs(120));
    assert!(
        ok && out.trim_end().ends_with("OK"),
        "redis-py session failed (Debian package python3-redis, /usr/bin/python3):\n{out}{err}"
    );
}

/// `redis-benchmark -t ping,set,get,incr,mset -n 100000 -P 16`: every test runs to the end,
/// and no reply is an error.
#[track_caller]
fn redis_benchmark(netns: Option<&Netns>, addr: SocketAddr) {
    let mut cmd = command(netns, "redis-benchmark");
    cmd.args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()]);
    cmd.args([
        "-t",
        "ping,set,get,incr,mset",
        "-n",
        "100000",
        "-P",
        "16",
        "--csv",
    ]);
    let (ok, out, err) = run_bounded(cmd, "", Duration::from_secs(300));
    assert!(ok, "redis-benchmark failed:\n{out}{err}");
    let text = format!("{out}{err}");
    assert!(!text.to_ascii_lowercase().contains("error"), "{text}");
    for test in [
        "PING_INLINE",
        "PING_MBULK",
        "SET",
        "GET",
        "INCR",
        "MSET (10 keys)",
    ] {
        let rps = out
            .lines()
            .find_map(|line| line.strip_prefix(&format!("\"{test}\",\"")))
            .and_then(|rest| rest.split('"').next())
            .and_then(|rps| rps.parse::<f64>().ok());
        assert!(rps.is_some_and(|r| r > 0.0), "{test} in:\n{out}");
    }
}

/// Malformed commands get Redis's protocol error and a close, never an allocation of the
/// announced size; the server goes on serving.
#[track_caller]
fn bad_input_closes(addr: SocketAddr) {
    for (input, reply) in [
        (
            &b"*1\r\n$-5\r\n"[..],
            &b"-ERR Protocol error: invalid bulk length\r\n"[..],
        ),
        (
            b"*2\r\n$3\r\nGET\r\n:1\r\n",
            b"-ERR Protocol error: expected '$', got ':'\r\n",
        ),
        (
            b"*99999999999\r\n",
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"SET k \"v\r\n",
            b"-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ] {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(b"PING\r\n").unwrap();
        stream.write_all(input).unwrap();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).expect("closed by the server");
        let mut want = b"+PONG\r\n".to_vec();
        want.extend_from_slice(reply);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.write_all(b"PING\r\n").unwrap();
    let mut pong = [0u8; 7];
    stream.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
}

/// A value over the item limit (1 MiB) refuses its command with an error, and its bytes are
/// skipped without being stored; the connection goes on. One of exactly the limit is stored.
#[track_caller]
fn oversize_values_are_refused_and_the_connection_kept(addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let big = vec![b'x'; (1 << 20) + 1];
    let fits = vec![b'y'; 1 << 19];
    let mut input = Vec::new();
    let commands: [&[&[u8]]; 5] = [
        &[b"SET", b"big", &big, b"EX", b"10"],
        &[b"GET", b"big"],
        &[b"SET", b"fits", &fits],
        &[b"STRLEN", b"fits"],
        &[b"PING"],
    ];
    for args in commands {
        write_command(&mut input, args);
    }
    stream.write_all(&input).unwrap();
    let want = b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n\
                 $-1\r\n+OK\r\n:524288\r\n+PONG\r\n";
    let mut got = vec![0u8; want.len()];
    stream.read_exact(&mut got).expect("the replies");
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

/// Everything above against one server, from where it is reachable (the caller has entered
/// its namespace, if any; `netns` is where the tools run): `resp` its RESP address, `mc` its
/// memcached address. Then the server stops cleanly, and with two workers forwarded both ways.
#[track_caller]
fn check_server(netns: Option<&Netns>, server: &mut Server, resp: SocketAddr, workers: usize) {
    let (redis2, redis3) = redis_transcripts();
    let got = redis_cli(netns, resp, &fill_in(CLI_SCRIPT), false);
    assert_eq!(
        &got, redis2,
        "RESP2 transcript (left: memspin, right: redis-server)"
    );
    let got = redis_cli(netns, resp, &fill_in(CLI3_SCRIPT), true);
    assert_eq!(
        &got, redis3,
        "RESP3 transcript (left: memspin, right: redis-server)"
    );
    redis_py(netns, resp, server.addr.port());
    bad_input_closes(resp);
    oversize_values_are_refused_and_the_connection_kept(resp);
    redis_benchmark(netns, resp);
    loadgen_verify(resp, false);
    loadgen_verify(resp, true);
    let (status, stderr) = server.stop();
    assert!(status.is_some_and(|s| s.success()), "{stderr}");
    if workers > 1 {
        assert_forwarded_both_ways(&stderr, workers);
    }
}

/// memspin-loadgen `--protocol resp --verify` for 3 s: `GET`s and `SET`s from 16 connections
/// with 8 requests in flight each, or (`mixed`) also `MGET`s of 8 keys, `DEL`s and `SET ...
/// EX` from 8 connections with 4 each. Every value read back is one written, nothing is lost,
/// no reply is an error. A correctness run: a reply may take 5 s (on a shared machine the
/// generator itself may not run for a second), and the generator sleeps between replies
/// rather than spin on a CPU a memspin worker may be pinned to.
#[track_caller]
fn loadgen_verify(resp: SocketAddr, mixed: bool) {
    let base = loadgen::Config {
        servers: vec![resp],
        protocol: Protocol::Resp,
        connections: 16,
        threads: 1,
        pipeline: 8,
        duration: Duration::from_secs(3),
        warmup: Duration::from_millis(200),
        timeout: Duration::from_secs(5),
        keys: 20_000,
        key_size: 16,
        value_min: 32,
        value_max: 2_000,
        get_ratio: 0.5,
        verify: true,
        progress: false,
        idle: loadgen::config::Idle::Sleep,
        ..loadgen::Config::default()
    };
    let config = if mixed {
        loadgen::Config {
            connections: 8,
            pipeline: 4,
            keys: 5_000,
            value_min: 16,
            value_max: 512,
            get_ratio: 0.6,
            delete_ratio: 0.1,
            multiget: 8,
            ttl: 3_600,
            ..base
        }
    } else {
        base
    };
    let report = loadgen::run(&config).expect("loadgen run");
    let table = report.table();
    assert_eq!(report.errors.total(), 0, "{table}");
    assert_eq!(
        (report.verify.mismatches, report.verify.lost),
        (0, 0),
        "{table}"
    );
    assert!(
        report.verify.checked > 0 && report.completed() >= 1_000,
        "{table}"
    );
}

fn kernel(workers: &str) {
    let _one = one_at_a_time();
    let mut server = Server::start_kernel(&["--resp-port", "0", "-t", workers]);
    let resp = server.resp_addr();
    check_server(None, &mut server, resp, workers.parse().unwrap());
}

#[test]
fn kernel_one_worker_answers_as_redis_does() {
    kernel("1");
}

#[test]
fn kernel_two_workers_answer_as_redis_does() {
    kernel("2");
}

fn tap(workers: &str) {
    let _one = one_at_a_time();
    let ns = Netns::new();
    let mut server = Server::start_tap(&ns, &["--resp-port", "6379", "-t", workers]);
    assert!(
        server.ready_line.contains("RESP on 10.77.0.2:6379"),
        "{}",
        server.ready_line
    );
    ns.enter();
    check_server(
        Some(&ns),
        &mut server,
        "10.77.0.2:6379".parse().unwrap(),
        workers.parse().unwrap(),
    );
}

#[test]
fn tap_one_worker_answers_as_redis_does() {
    tap("1");
}

#[test]
fn tap_two_workers_answer_as_redis_does() {
    tap("2");
}

fn xdp(workers: usize) {
    let _one = one_at_a_time();
    let veth = Veth::with_queues(workers);
    let threads = workers.to_string();
    let mut server = veth.start(&["--resp-port", "6379", "-t", &threads]);
    assert!(
        server.ready_line.contains("RESP on 10.78.0.2:6379"),
        "{}",
        server.ready_line
    );
    veth.client.enter();
    check_server(
        Some(&veth.client),
        &mut server,
        "10.78.0.2:6379".parse().unwrap(),
        workers,
    );
}

#[test]
fn xdp_one_worker_answers_as_redis_does() {
    xdp(1);
}

#[test]
fn xdp_two_workers_answer_as_redis_does() {
    xdp(2);
}

/// What an application's Redis cache does through redis-py: a database picked in the URL,
/// `pipeline()` with its default `MULTI`/`EXEC`, `scan_iter`, and `WATCH`-based optimistic
/// locking (a write by another client between `WATCH` and `EXEC` fails the transaction).
const REDIS_CACHE_SCRIPT: &str = r#"import sys
import redis

host, port = sys.argv[1], int(sys.argv[2])
url = "redis://%s:%d/%%d" % (host, port)
r = redis.Redis.from_url(url % 3, socket_timeout=10)
other = redis.Redis.from_url(url % 3, socket_timeout=10)
zero = redis.Redis.from_url(url % 0, socket_timeout=10)

def check(what, got, want):
    if got != want:
        print("FAIL %s: got %r, want %r" % (what, got, want))
        sys.exit(1)

check("flushdb", r.flushdb(), True)
zero.set("shared", "database 0")
check("database 3 is its own", r.get("shared"), None)
p = r.pipeline()
p.set("a", "1").incr("a").get("a").set("b", "x", ex=100).ttl("b")
check("pipeline in a transaction", p.execute(), [True, 2, b"2", True, 100])
for i in range(250):
    r.set("item:%d" % i, i)
got = set(r.scan_iter(match="item:*", count=20))
check("scan_iter", got, set(("item:%d" % i).encode() for i in range(250)))
check("dbsize", r.dbsize(), 252)
r.set("counter", 10)
def add_five(pipe):
    current = int(pipe.get("counter"))
    pipe.multi()
    pipe.set("counter", current + 5)
check("optimistic transaction", r.transaction(add_five, "counter"), [True])
check("counter", r.get("counter"), b"15")
with r.pipeline() as pipe:
    pipe.watch("counter")
    other.set("counter", 99)
    pipe.multi()
    pipe.set("counter", 1)
    try:
        pipe.execute()
        check("WatchError raised", False, True)
    except redis.WatchError:
        pass
check("the other client's write stands", r.get("counter"), b"99")
check("flushdb again", r.flushdb(), True)
check("dbsize after", r.dbsize(), 0)
check("database 0 kept", zero.get("shared"), b"database 0")
zero.delete("shared")
print("OK")
"#;

/// The cache session against `resp` with redis-py.
#[track_caller]
fn redis_py_cache(resp: SocketAddr) {
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.args(["-c", REDIS_CACHE_SCRIPT, &resp.ip().to_string()]);
    cmd.arg(resp.port().to_string());
    let (ok, out, err) = run_bounded(cmd, "", Duration::from_secs(120));
    assert!(
        ok && out.trim_end().ends_with("OK"),
        "redis-py cache session failed (Debian package python3-redis, /usr/bin/python3):\n{out}{err}"
    );
}

#[test]
fn a_redis_py_cache_works_unchanged() {
    let _one = one_at_a_time();
    let server = Server::start_kernel(&["--resp-port", "0", "-t", "1"]);
    redis_py_cache(server.resp_addr());
}

/// The cache session's expectations are Redis's: it passes against `redis-server` too.
#[test]
fn the_redis_py_cache_session_passes_against_redis_server() {
    let redis = RedisServer::start();
    redis_py_cache(redis.addr);
}

/// The redis-py session's expectations are Redis's: it passes against `redis-server` too.
#[test]
fn the_redis_py_session_passes_against_redis_server() {
    let redis = RedisServer::start();
    redis_py(None, redis.addr, 0);
}

/// One RESP reply read from `client`: a simple string, error or integer as its line, a bulk
/// string as its bytes (`nil` for a null), an array as its elements between brackets.
fn resp_reply(client: &mut support::TextClient) -> String {
    let line = String::from_utf8(client.line().expect("a reply line")).expect("UTF-8");
    let (kind, rest) = line.split_at(1);
    match kind {
        "$" => match rest.parse::<i64>().expect("a bulk length") {
            -1 => "nil".to_string(),
            n => {
                let bytes = client.exact(n as usize + 2).expect("a bulk string");
                String::from_utf8_lossy(&bytes[..n as usize]).into_owned()
            }
        },
        "*" => match rest.parse::<i64>().expect("an array length") {
            -1 => "nil".to_string(),
            n => {
                let items: Vec<String> = (0..n).map(|_| resp_reply(client)).collect();
                format!("[{}]", items.join(","))
            }
        },
        _ => line,
    }
}

/// Sends `commands` in one write and reads one reply for each.
fn resp_calls(client: &mut support::TextClient, commands: &[&[&str]]) -> Vec<String> {
    let mut bytes = Vec::new();
    for args in commands {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        write_command(&mut bytes, &args);
    }
    client.send(&bytes).expect("send");
    commands.iter().map(|_| resp_reply(client)).collect()
}

/// With two workers, transactions move a unit from a key of one worker to a key of the other
/// (`a` + `b` stays 100) while other clients hammer both: RESP clients reading both keys in
/// their own transactions, and a memcached client and a RESP client reading them one after
/// the other with no transaction, writing keys of both workers in between. None ever sees a
/// transaction half done: a transaction's reads always add up to 100, and `a` read before `b`
/// never exceeds it while a second kind of transaction raises both together (a reader would
/// catch `a` raised and `b` not yet). Bounded: 400 moves, 60 s.
#[test]
fn transactions_over_two_workers_are_never_seen_half_done() {
    use server::engine::owner_of;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let _one = one_at_a_time();
    let server = Server::start_kernel(&["--resp-port", "0", "-t", "2"]);
    let (resp, mc) = (server.resp_addr(), server.addr);
    let key_of = |owner: usize, name: &str| {
        (0..)
            .map(|i| format!("{name}{i}"))
            .find(|k| owner_of(k.as_bytes(), 2) == owner)
            .unwrap()
    };
    let (a, b) = (key_of(0, "a"), key_of(1, "b"));
    let (up, down) = (key_of(0, "up"), key_of(1, "down"));
    let mut mover = support::TextClient::connect(resp);
    assert_eq!(
        resp_calls(
            &mut mover,
            &[
                &["SET", &a, "100"],
                &["SET", &b, "0"],
                &["SET", &up, "0"],
                &["SET", &down, "0"]
            ]
        ),
        ["+OK", "+OK", "+OK", "+OK"]
    );
    let done = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut readers = Vec::new();
    // Readers in transactions: a + b is 100, up equals down.
    for _ in 0..2 {
        let (a, b, up, down, done) = (a.clone(), b.clone(), up.clone(), down.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let mut c = support::TextClient::connect(resp);
            let mut checked = 0u64;
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                let got = resp_calls(
                    &mut c,
                    &[
                        &["MULTI"],
                        &["GET", &a],
                        &["GET", &up],
                        &["GET", &b],
                        &["GET", &down],
                        &["EXEC"],
                    ],
                );
                let exec = got[5].trim_matches(['[', ']']).to_string();
                let v: Vec<i64> = exec.split(',').map(|x| x.parse().unwrap()).collect();
                assert_eq!(
                    v[0] + v[2],
                    100,
                    "a transaction saw a move half done: {exec}"
                );
                assert_eq!(v[1], v[3], "a transaction saw a raise half done: {exec}");
                checked += 1;
            }
            checked
        }));
    }
    // Readers without transactions: `up` then `down` (up is raised first, so a reader that
    // sees up raised and down not yet caught a transaction half done), writing keys of both
    // workers between reads, each read answered before the next is sent.
    {
        let (up, down, done) = (up.clone(), down.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let mut c = support::TextClient::connect(resp);
            let mut checked = 0u64;
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                // One at a time: pipelined, the two reads could run on their workers in
                // either order.
                let got: Vec<String> =
                    [&["GET", &up][..], &["SET", "noise:0", "x"], &["GET", &down]]
                        .iter()
                        .flat_map(|command| resp_calls(&mut c, &[command]))
                        .collect();
                let (u, d): (i64, i64) = (got[0].parse().unwrap(), got[2].parse().unwrap());
                assert!(
                    u <= d,
                    "saw up {u} before down {d}: a transaction half done"
                );
                checked += 1;
            }
            checked
        }));
    }
    {
        let (up, down, done) = (up.clone(), down.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let mut c = support::TextClient::connect(mc);
            let value = |reply: &[u8]| -> i64 {
                let text = String::from_utf8_lossy(reply);
                text.lines().nth(1).expect("a value").parse().unwrap()
            };
            let mut checked = 0u64;
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                let u = value(&c.call(format!("get {up}\r\n").as_bytes()).unwrap());
                c.call(b"set mc:noise 0 0 1\r\nz\r\n").unwrap();
                let d = value(&c.call(format!("get {down}\r\n").as_bytes()).unwrap());
                assert!(
                    u <= d,
                    "memcached saw up {u} before down {d}: a transaction half done"
                );
                checked += 1;
            }
            checked
        }));
    }
    let mut moves = 0;
    while moves < 400 && Instant::now() < deadline {
        let got = resp_calls(
            &mut mover,
            &[
                &["MULTI"],
                &["DECR", &a],
                &["INCR", &up],
                &["INCR", &b],
                &["INCR", &down],
                &["EXEC"],
            ],
        );
        assert_eq!(
            got[..5],
            ["+OK", "+QUEUED", "+QUEUED", "+QUEUED", "+QUEUED"]
        );
        assert!(got[5].starts_with('['), "{got:?}");
        moves += 1;
    }
    done.store(true, Ordering::Relaxed);
    let checked: Vec<u64> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(moves, 400, "400 moves within 60 s");
    assert!(
        checked.iter().all(|&n| n > 0),
        "every reader read: {checked:?}"
    );
    assert_eq!(
        resp_calls(
            &mut mover,
            &[&["DECRBY", &a, "0"], &["GET", &b], &["GET", &up]]
        ),
        [":-300", "400", "400"]
    );
}
