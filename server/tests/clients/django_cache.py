"""Django's cache framework with the django-redis backend (the PyPI versions pinned in
requirements.txt), its cache in database 1 as a project's settings would put it.

Usage: django_cache.py HOST PORT PART, where PART is
  cache           get/set/add/get_many/set_many/delete_many/touch/ttl/clear
  incr            incr/decr keep the TTL; a missing key is a ValueError
  delete_pattern  delete_pattern removes the matching keys and returns how many it removed
  lock            cache.lock(): held, refused to a second holder, released, taken again
Prints OK at the end.
"""

import sys

import django
from django.conf import settings

host, port, part = sys.argv[1], int(sys.argv[2]), sys.argv[3]
settings.configure(
    CACHES={
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://%s:%d/1" % (host, port),
            "KEY_PREFIX": "app",
            "OPTIONS": {"SOCKET_TIMEOUT": 10, "SOCKET_CONNECT_TIMEOUT": 10},
        }
    }
)
django.setup()

import django_redis  # noqa: E402
import redis  # noqa: E402
from django.core.cache import cache  # noqa: E402


def check(what, got, want):
    if got != want:
        print("FAIL %s: got %r, want %r" % (what, got, want))
        sys.exit(1)


check("versions", (django.__version__, django_redis.__version__), ("5.2.20", "7.0.0"))
raw = redis.Redis(host=host, port=port, db=1, socket_timeout=10)
db0 = redis.Redis(host=host, port=port, db=0, socket_timeout=10)
raw.flushall()
db0.set("outside-the-cache", "db0")

if part == "cache":
    # Values are pickled, integers stored as they are (INCR works on them).
    check("set", cache.set("user:1", {"name": "ada", "langs": ["en"]}, timeout=100), True)
    check("get", cache.get("user:1"), {"name": "ada", "langs": ["en"]})
    check("stored under the prefix and version", raw.exists("app:1:user:1"), 1)
    check("get default", cache.get("missing", "fallback"), "fallback")
    check("add existing", cache.add("user:1", "other"), False)
    check("add new", cache.add("user:2", "bob", timeout=100), True)
    check("after add", cache.get("user:2"), "bob")
    # set_many is one MULTI/EXEC pipeline; get_many one MGET.
    data = {"many:%d" % i: i * i for i in range(50)}
    cache.set_many(data, timeout=100)
    got = cache.get_many(list(data) + ["many:none"])
    check("get_many", got, data)
    check("set_many ttl", 99 <= cache.ttl("many:7") <= 100, True)
    check("delete_many", cache.delete_many(["many:%d" % i for i in range(10)]), 10)
    check("after delete_many", cache.get_many(["many:0", "many:9", "many:10"]), {"many:10": 100})
    check("delete", cache.delete("many:10"), True)
    check("delete missing", cache.delete("many:10"), False)
    # touch and ttl: seconds left, None for no expiry, 0 for a missing key.
    check("touch", cache.touch("user:1", 50), True)
    check("ttl after touch", 49 <= cache.ttl("user:1") <= 50, True)
    check("touch forever", cache.touch("user:1", None), True)
    check("ttl forever", cache.ttl("user:1"), None)
    check("touch missing", cache.touch("missing", 50), False)
    check("ttl missing", cache.ttl("missing"), 0)
    check("set timeout 0 deletes", cache.set("user:2", "x", timeout=0), True)
    check("after timeout 0", cache.get("user:2"), None)
    check("has_key", (cache.has_key("user:1"), cache.has_key("user:2")), (True, False))
    # clear empties the cache's database only.
    cache.clear()
    check("after clear", cache.get("user:1"), None)
    check("database 1 empty", raw.dbsize(), 0)
    check("database 0 kept", db0.get("outside-the-cache"), b"db0")
elif part == "incr":
    # django-redis runs incr/decr as a Lua script (EXISTS, then INCRBY, atomically); on an
    # error reply it falls back to TTL, GET and SET. They keep the TTL; a missing key is a
    # ValueError.
    cache.set("hits", 10, timeout=100)
    check("incr", cache.incr("hits", 5), 15)
    check("decr", cache.decr("hits"), 14)
    check("get counter", cache.get("hits"), 14)
    check("ttl after incr", 99 <= cache.ttl("hits") <= 100, True)
    try:
        cache.incr("no-counter")
        print("FAIL incr missing: no ValueError")
        sys.exit(1)
    except ValueError:
        pass
    check("incr missing created nothing", cache.get("no-counter"), None)
elif part == "delete_pattern":
    cache.set_many({"session:%d" % i: i for i in range(40)}, timeout=100)
    cache.set_many({"page:%d" % i: i for i in range(5)}, timeout=100)
    check("delete_pattern", cache.delete_pattern("session:*"), 40)
    check("sessions gone", cache.keys("session:*"), [])
    check("pages kept", sorted(cache.keys("page:*")), ["page:%d" % i for i in range(5)])
    check("delete_pattern none", cache.delete_pattern("nothing:*"), 0)
elif part == "lock":
    lock = cache.lock("report", timeout=10)
    check("acquire", lock.acquire(blocking=False), True)
    check("held", raw.exists("app:1:report"), 1)
    rival = cache.lock("report", timeout=10)
    check("rival refused", rival.acquire(blocking=False), False)
    lock.release()
    check("released", raw.exists("app:1:report"), 0)
    check("rival takes it", rival.acquire(blocking=False), True)
    with cache.lock("job", timeout=10, blocking_timeout=2):
        check("with held", raw.exists("app:1:job"), 1)
    check("with released", raw.exists("app:1:job"), 0)
    rival.release()
else:
    sys.exit("unknown part " + part)

check("database 0 untouched", db0.dbsize(), 1)
print("OK")
