//! Transactions over two workers, each on a thread of its own that loops over its mesh as a
//! worker does: a transaction whose keys live on both, `WATCH` of the other worker's keys,
//! and a connection's earlier forwarded commands taking effect before its transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::tests::{command, now, shared_config};
use crate::conn::ClientConn;
use crate::engine::*;
use crate::worker::mesh::{self, Mesh};

/// Worker 0 driven by the test, worker 1 looping on a thread of its own.
struct Pair {
    home: Engine,
    mesh: Mesh,
    stop: Arc<AtomicBool>,
    other: Option<JoinHandle<Engine>>,
}

impl Pair {
    fn new() -> Pair {
        let shared = shared_config(2);
        let mut meshes = mesh::build(2).unwrap();
        let (mut theirs, mine) = (meshes.pop().unwrap(), meshes.pop().unwrap());
        let mut owner = Engine::new(shared(1));
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let other = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stopping.load(Ordering::Relaxed) && Instant::now() < deadline {
                theirs.send_forwards(&mut owner);
                if theirs.receive(&mut owner, now(), |_, _| {}) == 0 {
                    std::thread::yield_now();
                }
            }
            owner
        });
        Pair {
            home: Engine::new(shared(0)),
            mesh: mine,
            stop,
            other: Some(other),
        }
    }

    /// A RESP2 connection of worker 0.
    fn conn(token: u128) -> ClientConn {
        let mut conn = ClientConn::default();
        conn.session = super::tests::resp2();
        conn.session.set_token(token);
        conn
    }

    /// Runs `input` on `conn` until it is consumed and answered (10 s at most); returns what
    /// was sent.
    #[track_caller]
    fn run(&mut self, conn: &mut ClientConn, input: &[u8]) -> String {
        conn.input.extend(input);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            conn.session.begin_turn(TURN_REQUESTS);
            if !conn.input.is_empty() && conn.may_execute() {
                conn.execute_buffered(&mut self.home, now());
            }
            self.mesh.send_forwards(&mut self.home);
            self.mesh.receive(&mut self.home, now(), |home, replies| {
                for i in 0..replies.len() {
                    conn.deliver(home, replies.get(i).unwrap());
                }
            });
            let out = conn.pending_output().to_vec();
            conn.sent(out.len());
            conn.settle(&mut self.home);
            got.extend_from_slice(&out);
            if conn.input.is_empty() && !conn.awaiting_replies() {
                return String::from_utf8_lossy(&got).into_owned();
            }
        }
        panic!("no end: {:?}", String::from_utf8_lossy(&got));
    }

    /// Runs one command on `conn`.
    #[track_caller]
    fn call(&mut self, conn: &mut ClientConn, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.run(conn, &command(&args))
    }
}

impl Pair {
    /// Stops worker 1 and returns its engine.
    fn finish(mut self) -> Engine {
        self.stop.store(true, Ordering::Relaxed);
        self.other.take().unwrap().join().unwrap()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(other) = self.other.take() {
            let _ = other.join();
        }
    }
}

/// `n` keys worker `owner` of two owns.
fn keys_of(owner: usize, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("key:{i}"))
        .filter(|k| owner_of(k.as_bytes(), 2) == owner)
        .take(n)
        .collect()
}

#[test]
fn a_transaction_over_both_workers_runs_in_order_in_its_database() {
    let mut pair = Pair::new();
    let mut c = Pair::conn(1);
    let (mine, theirs) = (keys_of(0, 2), keys_of(1, 2));
    assert_eq!(pair.call(&mut c, &["SELECT", "3"]), "+OK\r\n");
    let mut input = Vec::new();
    let mut push = |args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        input.extend(command(&args));
    };
    push(&["MULTI"]);
    push(&["SET", &theirs[0], "1"]);
    push(&["SET", &mine[0], "2"]);
    push(&["INCR", &theirs[0]]);
    push(&["MGET", &theirs[0], &theirs[1]]);
    push(&["PING"]);
    push(&["INCRBY", &mine[0], "5"]);
    push(&["GET", &theirs[0]]);
    push(&["EXEC"]);
    assert_eq!(
        pair.run(&mut c, &input),
        "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
         *7\r\n+OK\r\n+OK\r\n:2\r\n*2\r\n$1\r\n2\r\n$-1\r\n+PONG\r\n:7\r\n$1\r\n2\r\n"
    );
    // In database 3, on each key's worker.
    assert_eq!(pair.call(&mut c, &["GET", &theirs[0]]), "$1\r\n2\r\n");
    assert_eq!(pair.call(&mut c, &["GET", &mine[0]]), "$1\r\n7\r\n");
    assert_eq!(pair.call(&mut c, &["SELECT", "0"]), "+OK\r\n");
    assert_eq!(
        pair.call(&mut c, &["EXISTS", &theirs[0], &mine[0]]),
        ":0\r\n"
    );
    // A command whose own keys span the workers is refused; so is one for every worker.
    let mut input = Vec::new();
    for args in [
        &["MULTI"][..],
        &["SET", &theirs[0], "x"],
        &["MGET", &theirs[0], &mine[0]],
        &["DBSIZE"],
        &["EXEC"],
    ] {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        input.extend(command(&args));
    }
    assert_eq!(
        pair.run(&mut c, &input),
        "+OK\r\n+QUEUED\r\n-CROSSSLOT Keys in request don't hash to the same slot\r\n\
         -ERR 'dbsize' inside MULTI needs a server of one worker (memspin -t 1)\r\n\
         -EXECABORT Transaction discarded because of previous errors.\r\n"
    );
}

#[test]
fn commands_pipelined_before_a_transaction_take_effect_before_it() {
    let mut pair = Pair::new();
    let mut c = Pair::conn(1);
    let (mine, theirs) = (keys_of(0, 1), keys_of(1, 1));
    let mut input = Vec::new();
    for i in 0..50 {
        input.extend(command(&[
            b"SET",
            theirs[0].as_bytes(),
            i.to_string().as_bytes(),
        ]));
    }
    input.extend(command(&[b"MULTI"]));
    input.extend(command(&[b"GET", theirs[0].as_bytes()]));
    input.extend(command(&[b"SET", mine[0].as_bytes(), b"m"]));
    input.extend(command(&[b"EXEC"]));
    input.extend(command(&[b"SET", theirs[0].as_bytes(), b"after"]));
    let got = pair.run(&mut c, &input);
    assert_eq!(
        got,
        format!(
            "{}+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$2\r\n49\r\n+OK\r\n+OK\r\n",
            "+OK\r\n".repeat(50)
        )
    );
}

#[test]
fn watch_takes_any_workers_key_and_exec_checks_it_there() {
    let mut pair = Pair::new();
    let (mut c, mut other) = (Pair::conn(1), Pair::conn(2));
    let (mine, theirs) = (keys_of(0, 1), keys_of(1, 2));
    assert_eq!(pair.call(&mut c, &["SET", &theirs[0], "1"]), "+OK\r\n");
    // Unchanged: runs.
    assert_eq!(
        pair.call(&mut c, &["WATCH", &theirs[0], &theirs[1], &mine[0]]),
        "+OK\r\n"
    );
    assert_eq!(pair.call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["INCR", &theirs[0]]), "+QUEUED\r\n");
    assert_eq!(pair.call(&mut c, &["EXEC"]), "*1\r\n:2\r\n");
    // Written by another client (on the key's worker), or created while absent: nil, and
    // nothing runs.
    for (written, args) in [
        (&theirs[0], &["SET", &theirs[0], "x"][..]),
        (&theirs[1], &["SET", &theirs[1], "new"]),
        (&theirs[1], &["DEL", &theirs[1]]),
    ] {
        assert_eq!(pair.call(&mut c, &["WATCH", written]), "+OK\r\n");
        assert_ne!(pair.call(&mut other, args), "");
        assert_eq!(pair.call(&mut c, &["MULTI"]), "+OK\r\n");
        assert_eq!(pair.call(&mut c, &["SET", &mine[0], "ran"]), "+QUEUED\r\n");
        assert_eq!(pair.call(&mut c, &["EXEC"]), "*-1\r\n", "{args:?}");
        assert_eq!(pair.call(&mut c, &["GET", &mine[0]]), "$-1\r\n");
    }
    // A transaction of this worker's keys alone that watches the other's.
    assert_eq!(pair.call(&mut c, &["WATCH", &theirs[0]]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["SET", &mine[0], "ran"]), "+QUEUED\r\n");
    assert_eq!(pair.call(&mut c, &["EXEC"]), "*1\r\n+OK\r\n");
    // The other worker's key written by the transaction's own commands does not fail it.
    assert_eq!(pair.call(&mut c, &["WATCH", &theirs[0]]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["SET", &theirs[0], "a"]), "+QUEUED\r\n");
    assert_eq!(pair.call(&mut c, &["SET", &theirs[0], "b"]), "+QUEUED\r\n");
    assert_eq!(pair.call(&mut c, &["EXEC"]), "*2\r\n+OK\r\n+OK\r\n");
    // UNWATCH and DISCARD forget them.
    assert_eq!(pair.call(&mut c, &["WATCH", &theirs[0]]), "+OK\r\n");
    assert_eq!(pair.call(&mut other, &["SET", &theirs[0], "y"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["UNWATCH"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["GET", &theirs[0]]), "+QUEUED\r\n");
    assert_eq!(pair.call(&mut c, &["EXEC"]), "*1\r\n$1\r\ny\r\n");
}

#[test]
fn unwatch_discard_and_exec_let_go_of_the_other_workers_marks() {
    let mut pair = Pair::new();
    let mut c = Pair::conn(1);
    let theirs = keys_of(1, 3);
    assert_eq!(pair.call(&mut c, &["WATCH", &theirs[0]]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["UNWATCH"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["SELECT", "2"]), "+OK\r\n");
    assert_eq!(
        pair.call(&mut c, &["WATCH", &theirs[1], &theirs[2]]),
        "+OK\r\n"
    );
    assert_eq!(pair.call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["DISCARD"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["WATCH", &theirs[0]]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(pair.call(&mut c, &["EXEC"]), "*0\r\n");
    let mut owner = pair.finish();
    assert_eq!(owner.core.marks().len(), 0);
}
