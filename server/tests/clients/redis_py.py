"""redis-py (the PyPI version pinned in requirements.txt) as applications use it: a pipeline
with its default MULTI/EXEC transaction, scan_iter, a database chosen by the URL, and WATCH-based
optimistic locking, retried on conflict. Usage: redis_py.py HOST PORT; prints OK at the end.
"""

import sys
import threading

import redis

host, port = sys.argv[1], int(sys.argv[2])
URL = "redis://%s:%d" % (host, port)
TIMEOUT = 10


def check(what, got, want):
    if got != want:
        print("FAIL %s: got %r, want %r" % (what, got, want))
        sys.exit(1)


def client(db=0):
    return redis.Redis(host=host, port=port, db=db, socket_timeout=TIMEOUT)


check("version", redis.__version__, "8.2.0")
r = client()
check("flushall", r.flushall(), True)

# pipeline(): transaction=True by default, so the batch goes as MULTI ... EXEC and its replies
# come back as EXEC's array, in order.
p = r.pipeline()
p.set("tx:a", "1").incr("tx:a").get("tx:a").set("tx:b", "x", nx=True).set("tx:b", "y", nx=True)
check("transaction", p.execute(), [True, 2, b"2", True, None])
# An error at run time (INCR of a string) fails that command only; EXEC runs the rest.
p = r.pipeline()
p.set("tx:s", "abc").incr("tx:s").set("tx:after", "ran")
replies = p.execute(raise_on_error=False)
check("run-time error replies", [replies[0], replies[2]], [True, True])
check("run-time error", isinstance(replies[1], redis.ResponseError), True)
check("run-time error text", str(replies[1]), "value is not an integer or out of range")
check("after run-time error", r.get("tx:after"), b"ran")
# An error at queue time (wrong arity) aborts the whole transaction: nothing runs.
p = r.pipeline()
p.set("tx:never", "1").execute_command("GET", "a", "b")
try:
    p.execute()
    print("FAIL queue-time error: EXEC ran")
    sys.exit(1)
except redis.ResponseError as e:
    check("queue-time error", "wrong number of arguments for 'get' command" in str(e), True)
check("aborted transaction wrote nothing", r.exists("tx:never"), 0)
# A long transaction, keys on every worker.
p = r.pipeline()
for i in range(300):
    p.set("txmany:%d" % i, i)
    p.incrby("txmany:%d" % i, 1000)
check("long transaction", p.execute(), [x for i in range(300) for x in (True, 1000 + i)])
check("after long transaction", r.mget(["txmany:0", "txmany:299"]), [b"1000", b"1299"])

# scan_iter: every key at least once (SCAN's guarantee: a key may come twice), whichever
# worker owns it, with MATCH, COUNT and TYPE.
r.mset({"scan:%d" % i: i for i in range(500)})
got = list(r.scan_iter(match="scan:*", count=37))
check("scan_iter keys", set(got), {b"scan:%d" % i for i in range(500)})
if len(got) != 500:
    print("note: scan_iter returned %d keys for 500 (%d twice)" % (len(got), len(got) - 500))
got = set(r.scan_iter(match="scan:4?"))
check("scan_iter match", got, {b"scan:%d" % i for i in range(40, 50)})
got = set(r.scan_iter(match="scan:1*", _type="STRING"))
check("scan_iter type", len(got), 111)
check("scan_iter no match", list(r.scan_iter(match="nothing:*")), [])
check("every key", len(set(r.scan_iter(count=1000))), r.dbsize())

# from_url picks database 3 (SELECT 3 on every new connection of its pool).
db3 = redis.Redis.from_url(URL + "/3", socket_timeout=TIMEOUT)
check("db from url", db3.connection_pool.connection_kwargs["db"], 3)
check("db3 empty", db3.dbsize(), 0)
check("db3 set", db3.set("shared-name", "in db3"), True)
check("db0 does not see it", r.get("shared-name"), None)
check("db3 sees it", client(3).get("shared-name"), b"in db3")
check("db3 scan", list(db3.scan_iter()), [b"shared-name"])
p = db3.pipeline()
p.incr("db3:n").incr("db3:n")
check("db3 transaction", p.execute(), [1, 2])
check("db3 dbsize", db3.dbsize(), 2)
check("db3 flushdb", db3.flushdb(), True)
check("db0 kept", r.get("tx:a"), b"2")

# WATCH: optimistic locking. Unchanged watched key: EXEC runs.
r.set("balance", 100)
with r.pipeline() as p:
    p.watch("balance")
    balance = int(p.get("balance"))
    p.multi()
    p.set("balance", balance - 30)
    check("watch unchanged", p.execute(), [True])
check("balance after", r.get("balance"), b"70")
# Another client writes the watched key between WATCH and EXEC: EXEC answers nil, WatchError.
other = client()
with r.pipeline() as p:
    p.watch("balance")
    balance = int(p.get("balance"))
    other.set("balance", 1000)
    p.multi()
    p.set("balance", balance - 30)
    try:
        p.execute()
        print("FAIL watch conflict: EXEC ran")
        sys.exit(1)
    except redis.WatchError:
        pass
check("conflicting write kept", r.get("balance"), b"1000")
# transaction() retries its function until EXEC runs.
calls = []


def withdraw(pipe):
    balance = int(pipe.get("balance"))
    calls.append(balance)
    if len(calls) == 1:
        other.set("balance", 500)
    pipe.multi()
    pipe.set("balance", balance - 1)


check("transaction()", r.transaction(withdraw, "balance"), [True])
check("transaction() retried once", calls, [1000, 500])
check("balance after retry", r.get("balance"), b"499")
# Concurrent optimistic increments from four connections: none is lost.
r.set("counter", 0)
errors = []


def increment(pipe):
    value = int(pipe.get("counter"))
    pipe.multi()
    pipe.set("counter", value + 1)


def bump(times):
    c = client()
    try:
        for _ in range(times):
            c.transaction(increment, "counter")
    except Exception as e:
        errors.append(repr(e))


threads = [threading.Thread(target=bump, args=(50,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
check("bump errors", errors, [])
check("concurrent watched increments", r.get("counter"), b"200")
# UNWATCH forgets the watched keys.
with r.pipeline() as p:
    p.watch("balance")
    other.set("balance", 1)
    p.unwatch()
    p.multi()
    p.set("balance", 2)
    check("unwatched", p.execute(), [True])
check("flushall at the end", r.flushall(), True)
print("OK")
