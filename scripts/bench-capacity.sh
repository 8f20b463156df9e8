#!/usr/bin/env bash
# Capacity benchmark: how many items memcached -t 1 and memspin (--net kernel, one worker) hold
# in the same -m, and their miss ratios as look-aside caches, on 127.0.0.1, one server at a time.
#
#   items held  11-byte keys, values of 32 B, 200 B and a mixed size distribution, written far
#               past what fits; then `curr_items`, `bytes` and the server's RSS (VmRSS).
#   miss ratio  one fixed seeded stream of gets over 2,000,000 keys with Zipf popularity
#               (alpha 0.99 and 0.8); each miss is followed by a set of 100 B; the first third
#               warms up, the misses of the rest are counted. Gets go out in pipelined batches
#               of 100 and the sets of a batch's misses follow it, the same for both servers.
#               Beside them, three figures of the stream for a cache of memspin's item count:
#               first requests (misses in any cache), Belady's MIN (knows the future: no policy
#               misses less) and the most popular keys requested so far (knows the popularity:
#               the least a policy that does not know the future misses).
#   speed       (SPEED=1, the default) the store's criterion benches and loadgen's pipelined
#               throughput against both servers: timings, meaningful on a quiet machine only.
#
# Items held and miss ratios are counts, not timings: they do not depend on the machine's load.
# memcached's -m counts its slab pages (1 MiB each); memspin's -m is split evenly among its
# workers (-t), each worker's store keeping its segments and hash table within its share; here
# memspin runs one worker, so its one store has the whole -m.
#
# Usage: scripts/bench-capacity.sh [MEMORY_MB (default 64)]
#   MEMSPIN_BIN=path  measure this memspin binary instead of building one (e.g. an older build)
#   BUILD=0           use target/release as it is
#   SPEED=0           skip the timing part
#   QUICK=1           a tenth of the writes and requests (a smoke run of the script itself)
# Results: results/bench-capacity-<date>/ (summary.md, results.json, commit, machine, command).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

memory_mb=${1:-64}
speed=${SPEED:-1}
scale=1
[ "${QUICK:-0}" = 1 ] && scale=10
need_packages memcached python3

if [ -n "${MEMSPIN_BIN:-}" ]; then
  LOADGEN_BIN=$PWD/target/release/memspin-loadgen
else
  build_release
fi

out=results/bench-capacity-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
{
  echo "commit $(git rev-parse HEAD)"
  git status --short | sed 's/^/  dirty: /'
  echo "memspin binary $MEMSPIN_BIN"
} >"$out/commit"
{
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
  echo "vcpus: $(nproc)"
  echo "kernel: $(uname -r)"
  echo "memcached: $(memcached -V)"
} >"$out/machine"
echo "scripts/bench-capacity.sh $* (MEMORY_MB=$memory_mb SPEED=$speed QUICK=${QUICK:-0})" >"$out/command"

port_memcached=11611
port_memspin=11612
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]:-}"; do
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  return 0
}
trap cleanup EXIT

# serve NAME: starts server NAME on its port, fresh (empty), and sets PID and PORT.
serve() {
  local name=$1 i
  case $name in
    memcached)
      PORT=$port_memcached
      memcached -u root -U 0 -t 1 -l 127.0.0.1 -p "$PORT" -m "$memory_mb" >"$out/$name.log" 2>&1 &
      PID=$!
      ;;
    memspin)
      PORT=$port_memspin
      "$MEMSPIN_BIN" --net kernel -l 127.0.0.1 -p "$PORT" -t 1 -m "$memory_mb" \
        >"$out/$name.log" 2>&1 &
      PID=$!
      ;;
  esac
  pids=("$PID")
  for i in $(seq 1 300); do
    bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null && return 0
    kill -0 "$PID" 2>/dev/null || die "$name exited: $(cat "$out/$name.log")"
    sleep 0.1
  done
  die "$name did not start"
}

unserve() {
  kill -TERM "$PID"
  wait "$PID" 2>/dev/null || true
  pids=()
}

# client WORKLOAD: one run of the counting client against the server up now; prints one JSON
# object (the server's stats after the run, the RSS, the counts).
client() {
  python3 - "$PORT" "$PID" "$1" "$scale" <<'PY'
import json, random, socket, sys

port, pid, workload, scale = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sock = socket.create_connection(("127.0.0.1", port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = bytearray()

def fill(n):
    """Reads until buf holds at least n bytes."""
    while len(buf) < n:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("server closed the connection")
        buf.extend(chunk)

def line():
    """One reply line, without its CRLF."""
    while True:
        at = buf.find(b"\r\n")
        if at >= 0:
            text = bytes(buf[:at])
            del buf[:at + 2]
            return text
        fill(len(buf) + 1)

def key(i):
    return b"k%010d" % i  # 11 bytes

def sets(pairs):
    """Pipelined sets; returns how many were refused (not STORED)."""
    out = bytearray()
    for k, size in pairs:
        out += b"set %s 0 0 %d\r\n" % (k, size) + b"x" * size + b"\r\n"
    sock.sendall(out)
    return sum(line() != b"STORED" for _ in pairs)

def gets(keys):
    """Pipelined gets; returns whether each hit."""
    sock.sendall(b"".join(b"get %s\r\n" % k for k in keys))
    hits = []
    for _ in keys:
        first = line()
        if first == b"END":
            hits.append(False)
            continue
        size = int(first.split()[3])
        fill(size + 2)
        del buf[:size + 2]
        if line() != b"END":
            raise SystemExit("bad get reply")
        hits.append(True)
    return hits

def stats():
    sock.sendall(b"stats\r\n")
    found = {}
    while True:
        text = line()
        if text == b"END":
            return found
        parts = text.decode().split()
        if len(parts) >= 3 and parts[0] == "STAT":
            found[parts[1]] = parts[2]

def rss_bytes():
    with open(f"/proc/{pid}/status") as f:
        for text in f:
            if text.startswith("VmRSS:"):
                return int(text.split()[1]) * 1024
    return 0

result = {"workload": workload}
rng = random.Random(20261207)
if workload.startswith("fill-"):
    kind = workload[len("fill-"):]
    writes = {"32": 3_000_000, "200": 1_000_000, "mixed": 1_000_000}[kind] // scale
    mixed = [16, 32, 64, 100, 128, 200, 256, 512, 1024]
    refused = 0
    for start in range(0, writes, 500):
        batch = []
        for i in range(start, min(start + 500, writes)):
            size = int(kind) if kind != "mixed" else rng.choice(mixed)
            batch.append((key(i), size))
        refused += sets(batch)
    result.update(writes=writes, refused=refused)
elif workload.startswith("zipf-"):
    alpha = float(workload[len("zipf-"):])
    keys, requests = 2_000_000, 3_000_000 // scale
    weights, total = [], 0.0
    for rank in range(1, keys + 1):
        total += rank ** -alpha
        weights.append(total)
    stream = rng.choices(range(keys), cum_weights=weights, k=requests)
    warmup = requests // 3
    counted = misses = 0
    for start in range(0, requests, 100):
        batch = [key(i) for i in stream[start:start + 100]]
        hits = gets(batch)
        missed = [k for k, hit in zip(batch, hits) if not hit]
        if missed:
            sets([(k, 100) for k in missed])
        if start >= warmup:
            counted += len(batch)
            misses += len(missed)
    result.update(keys=keys, requests=requests, counted=counted, misses=misses,
                  miss_ratio=misses / counted)
found = stats()
if workload.startswith("zipf-"):
    # Three caches of the server's final curr_items on this stream. first_ratio: only the
    # counted requests for a key not requested before miss (they miss in any cache).
    # belady_ratio: Belady's MIN, evicting the key used again last; it knows the future, so no
    # policy misses less with that many items. popular_ratio: the most popular keys requested
    # so far (key i has rank i + 1); with requests drawn independently, as here, the least a
    # policy that does not know the future misses.
    import heapq
    held = int(found.get("curr_items", 0))
    never = len(stream)
    following, later = [never] * len(stream), {}
    for n in range(len(stream) - 1, -1, -1):
        following[n] = later.get(stream[n], never)
        later[stream[n]] = n
    cached, heap, belady = {}, [], 0
    tree, seen = [0] * (keys + 1), bytearray(keys)
    first = popular = 0
    for n, i in enumerate(stream):
        tallied = n >= warmup
        if i not in cached:
            belady += tallied
        cached[i] = following[n]
        heapq.heappush(heap, (-following[n], i))
        while len(cached) > held:
            use_at, victim = heapq.heappop(heap)
            if cached.get(victim) == -use_at:
                del cached[victim]
        if not seen[i]:
            seen[i] = 1
            first += tallied
            popular += tallied
            at = i + 1
            while at <= keys:
                tree[at] += 1
                at += at & -at
        else:
            more_popular, at = 0, i
            while at > 0:
                more_popular += tree[at]
                at &= at - 1
            popular += tallied and more_popular >= held
    result.update(first_ratio=first / counted, belady_ratio=belady / counted,
                  popular_ratio=popular / counted)
result.update(curr_items=int(found.get("curr_items", 0)), bytes=int(found.get("bytes", 0)),
              evictions=int(found.get("evictions", 0)), rss_bytes=rss_bytes(),
              limit_maxbytes=int(found.get("limit_maxbytes", 0)))
print(json.dumps(result))
PY
}

workloads=(fill-32 fill-200 fill-mixed zipf-0.99 zipf-0.8)
for workload in "${workloads[@]}"; do
  for name in memcached memspin; do
    step "$name $workload (-m $memory_mb)"
    serve "$name"
    client "$workload" | sed "s/^{/{\"server\": \"$name\", /" | tee -a "$out/raw.jsonl"
    unserve
  done
done

python3 - "$out" "$memory_mb" <<'PY'
import json, sys
out, memory_mb = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(f"{out}/raw.jsonl")]
by = {(r["server"], r["workload"]): r for r in rows}
json.dump(rows, open(f"{out}/results.json", "w"), indent=1)
lines = [f"# Capacity, -m {memory_mb}: memcached -t 1 against memspin --net kernel -t 1", "",
         "| workload | memcached items | memspin items | memspin / memcached | memspin bytes per item | memcached RSS MiB | memspin RSS MiB |",
         "|---|---|---|---|---|---|---|"]
for w in ["fill-32", "fill-200", "fill-mixed"]:
    a, b = by.get(("memcached", w)), by.get(("memspin", w))
    if not a or not b:
        continue
    per = memory_mb * 2**20 / b["curr_items"] if b["curr_items"] else 0
    lines.append(f"| {w} | {a['curr_items']:,} | {b['curr_items']:,} | {b['curr_items'] / max(a['curr_items'], 1):.2f} "
                 f"| {per:.0f} | {a['rss_bytes'] / 2**20:.1f} | {b['rss_bytes'] / 2**20:.1f} |")
lines += ["", "| workload | memcached miss ratio | memspin miss ratio | memspin / memcached | memspin items at the end "
          "| first requests | Belady's MIN | most popular seen |", "|---|---|---|---|---|---|---|---|"]
for w in ["zipf-0.99", "zipf-0.8"]:
    a, b = by.get(("memcached", w)), by.get(("memspin", w))
    if not a or not b:
        continue
    lines.append(f"| {w} | {a['miss_ratio']:.4f} | {b['miss_ratio']:.4f} | {b['miss_ratio'] / a['miss_ratio']:.2f} | {b['curr_items']:,} "
                 f"| {b['first_ratio']:.4f} | {b['belady_ratio']:.4f} | {b['popular_ratio']:.4f} |")
lines += ["", "first requests: the share of counted gets for a key not requested before, which miss in any cache; "
          "Belady's MIN: a cache of memspin's final item count that evicts the key used again last (it knows the "
          "future: no policy misses less with that many items); most popular seen: one that holds the most popular "
          "keys requested so far (it knows the popularity: on requests drawn independently, the least a policy "
          "that does not know the future misses)."]
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY

if [ "$speed" = 1 ]; then
  step "criterion: cargo bench -p store (timings: meaningful on a quiet machine only)"
  cargo bench -q -p store -- 'get_hit|set' 2>&1 | tee "$out/criterion.txt"
  for name in memcached memspin; do
    step "$name pipelined throughput (loadgen -c 32 --pipeline 16)"
    serve "$name"
    "$LOADGEN_BIN" -s "127.0.0.1:$PORT" -t 1 -c 32 --pipeline 16 -d 5 --warmup 1 --keys 10000 \
      --key-size 16 --value-size 32 --get-ratio 0.9 --prefill -q \
      --json "$out/throughput-$name.json" >/dev/null
    unserve
  done
fi
echo "results in $out"
