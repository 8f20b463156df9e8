#!/usr/bin/env bash
# The three memtier_benchmark profiles of the memcrs-vs-memcached write-up the project started
# from, run against memspin (TAP, one worker) and memcached -t 1, one server at a time and
# alternating, measured by memspin-loadgen (and by memtier_benchmark when MEMTIER points at
# one), inside one fresh network namespace. Prints one table like the write-up's (medians over
# the rounds) and writes one HTML report per profile.
#
#   read-heavy   1:10 sets:gets, 256-byte values, keys 0..1M, uniform   (memtier R:R)
#   write-heavy  5:5  sets:gets, 1 KiB values,    keys 0..1M, uniform   (memtier R:R)
#   stress       1:10 sets:gets, 512-byte values, keys 0..10M, gaussian (memtier G:G:
#                median in the middle, standard deviation a sixth of the range)
#
# The write-up drove 6 memtier threads x 50 clients = 300 connections, one request in flight
# each (closed loop), binary protocol, on a 16-core laptop with memcached -t 8. Here the same
# 300 connections come from one generator thread on the last CPU and each server has one
# worker on CPU 0 (a 2-vCPU machine has no more to give). Every key is written once before a
# server's measured run (--prefill), so GETs hit as they would in a warm cache (the write-up's
# runs started empty and mostly missed: compare hit ratios before comparing figures).
#
# Memory: the stress profile's 10M keys of 512 bytes must all fit, or evictions and misses
# would decide the result. memcached stores such an item in a 600-byte slab chunk (48-byte
# header, 15-byte key, 512 bytes and CRLF round up to the 600 class), memspin needs about the
# same: about 6 GB. Each server gets -m = keys x (value + 128) x 1.2 MB, 7,300 MB for stress
# and 460 / 1,380 MB for the others; the machine needs that much free memory, once (servers
# never run together). Prefilling 10M keys takes a minute or two per server start.
#
# Usage: scripts/bench-seed-workloads.sh [ROUNDS (default 3)] [SECONDS per run (default 20)]
#   PROFILES="read-heavy write-heavy stress"  which profiles (default all three)
#   CONNS=300 THREADS=1                       generator connections and threads
#   MEMTIER=/path/to/memtier_benchmark        also run memtier_benchmark (same profiles,
#                                             connections = THREADS x CONNS/THREADS clients).
#     It is not packaged in Debian. To build it (not part of this repository):
#       apt-get install build-essential autoconf automake libpcre3-dev libevent-dev \
#         pkg-config zlib1g-dev libssl-dev
#       git clone https://github.com/RedisLabs/memtier_benchmark && cd memtier_benchmark
#       autoreconf -ivf && ./configure && make
#     then MEMTIER=$PWD/memtier_benchmark. memtier prefills each server itself
#     (--ratio=1:0 --key-pattern=P:P --requests=allkeys) with its own key names.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-3}
seconds=${2:-20}
read -r -a profiles <<<"${PROFILES:-read-heavy write-heavy stress}"
conns=${CONNS:-300}
threads=${THREADS:-1}
memtier=${MEMTIER:-}
need_packages iproute2 memcached python3
need_root_for_namespaces
if [ -n "$memtier" ]; then
  [ -x "$memtier" ] || die "MEMTIER=$memtier is not an executable"
fi

build_release

results_init bench-seed-workloads "$@"
ns=memspin-seed-$$
ns_create "$ns"
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))
key_size=15 # memtier's keys, "memtier-" and up to 7 digits, are 9 to 15 bytes

# profile NAME: sets KEYS VALUE GET_RATIO DIST MT_RATIO MT_PATTERN for one profile.
profile() {
  case $1 in
    read-heavy) KEYS=1000000; VALUE=256; GET_RATIO=0.9090909; DIST=uniform; MT_RATIO=1:10; MT_PATTERN=R:R ;;
    write-heavy) KEYS=1000000; VALUE=1024; GET_RATIO=0.5; DIST=uniform; MT_RATIO=5:5; MT_PATTERN=R:R ;;
    stress) KEYS=10000000; VALUE=512; GET_RATIO=0.9090909; DIST=gaussian; MT_RATIO=1:10; MT_PATTERN=G:G ;;
    *) die "unknown profile $1" ;;
  esac
  MEM_MB=$(( KEYS * (VALUE + 128) * 12 / 10 / 1048576 + 64 ))
}

# start NAME MEM_MB: one server, pinned to CPU 0; sets ADDR.
start() {
  local name=$1 mem=$2 log=$out/$1-$3-$4.log
  case $name in
    memcached)
      ip netns exec "$ns" taskset -c "$server_cpu" memcached -u root -U 0 -t 1 -l 127.0.0.1 \
        -p 11311 -m "$mem" -c 4096 >"$log" 2>&1 &
      SERVER_PID=$!
      MEMSPIN_PIDS+=("$SERVER_PID")
      local i
      for i in $(seq 1 100); do
        ip netns exec "$ns" bash -c "exec 3<>/dev/tcp/127.0.0.1/11311" 2>/dev/null && break
        [ "$i" -eq 100 ] && die "memcached did not start"
        sleep 0.05
      done
      ADDR=127.0.0.1:11311 ;;
    memspin)
      start_server "$ns" "$log" --net tap --iface ms0 --ip 10.77.0.2/24 --host-ip 10.77.0.1/24 \
        --cpus "$server_cpu" --idle spin -m "$mem" -c 4096
      ADDR=10.77.0.2:11211 ;;
  esac
}

# loadgen NAME PROFILE ROUND: prefill, then the measured closed-loop run.
loadgen() {
  local name=$1 prof=$2 round=$3
  ip netns exec "$ns" "$LOADGEN_BIN" -s "$ADDR" -t "$threads" --cpus "$client_cpu" \
    -c "$conns" --pipeline 1 -d "$seconds" --warmup 2 --keys "$KEYS" --key-size "$key_size" \
    --value-size "$VALUE" --get-ratio "$GET_RATIO" --key-dist "$DIST" --prefill -q \
    --label "$name" --json "$out/loadgen-$prof-$name-$round.json" \
    --hlog "$out/loadgen-$prof-$name-$round.hlog" >"$out/loadgen-$prof-$name-$round.txt"
}

# memtier NAME PROFILE ROUND: memtier's own prefill, then the measured run.
memtier_run() {
  local name=$1 prof=$2 round=$3 host=${ADDR%:*} port=${ADDR#*:}
  local common=(-s "$host" -p "$port" --protocol=memcache_binary --threads="$threads"
    --clients=$(( conns / threads )) --data-size="$VALUE" --key-maximum="$KEYS"
    --key-minimum=1 --hide-histogram)
  ip netns exec "$ns" taskset -c "$client_cpu" "$memtier" "${common[@]}" --ratio=1:0 \
    --key-pattern=P:P --requests=allkeys >/dev/null 2>&1
  ip netns exec "$ns" taskset -c "$client_cpu" "$memtier" "${common[@]}" --ratio="$MT_RATIO" \
    --key-pattern="$MT_PATTERN" --test-time="$seconds" \
    --json-out-file="$out/memtier-$prof-$name-$round.json" >"$out/memtier-$prof-$name-$round.txt" 2>&1
}

servers=(memcached memspin)
tools=(loadgen)
[ -n "$memtier" ] && tools+=(memtier)
for prof in "${profiles[@]}"; do
  profile "$prof"
  for round in $(seq 1 "$rounds"); do
    # Alternate the order every round so drift in the machine's load favours no server.
    for k in 0 1; do
      name=${servers[$(( (k + round) % 2 ))]}
      for tool in "${tools[@]}"; do
        step "$prof round $round/$rounds: $name with $tool (-m $MEM_MB, $KEYS keys of $VALUE bytes)"
        start "$name" "$MEM_MB" "$prof" "$round-$tool"
        case $tool in
          loadgen) loadgen "$name" "$prof" "$round" ;;
          memtier) memtier_run "$name" "$prof" "$round" ;;
        esac
        stop_server || true
      done
    done
  done
  # One page per profile: each server's median round (by throughput).
  pages=()
  for name in "${servers[@]}"; do
    pages+=("$(python3 - "$out" "$prof" "$name" <<'PY'
import json, glob, os, statistics, sys
out, prof, name = sys.argv[1:]
runs = sorted(glob.glob(os.path.join(out, f"loadgen-{prof}-{name}-*.json")),
              key=lambda p: json.load(open(p))["ops_per_sec"])
print(runs[len(runs) // 2])
PY
)")
  done
  "$LOADGEN_BIN" report "${pages[@]}" --html "$out/report-$prof.html"
done

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $rounds rounds: closed loop, $conns connections x 1 in flight, binary protocol; servers on CPU $server_cpu, generator on CPU $client_cpu"
python3 - "$out" "$rounds" "${profiles[@]}" <<'PY'
import json, glob, os, statistics, sys
out, rounds, profiles = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def loadgen(prof, name):
    rows = []
    for p in glob.glob(os.path.join(out, f"loadgen-{prof}-{name}-*.json")):
        d = json.load(open(p))
        s = d["latency_us"]["service"]["all"]
        rows.append((d["ops_per_sec"], s["mean"] / 1e3, s["p99"] / 1e3, s["p99_9"] / 1e3, d["hit_ratio"], d["errors"]["total"]))
    return rows

def memtier(prof, name):
    rows = []
    for p in glob.glob(os.path.join(out, f"memtier-{prof}-{name}-*.json")):
        t = json.load(open(p))["ALL STATS"]["Totals"]
        pct = t.get("Percentile Latencies", {})
        hits, misses = t.get("Hits/sec", 0), t.get("Misses/sec", 0)
        # memtier rounds "Average Latency" in some versions; the sum over the count does not.
        avg = t["Accumulated Latency"] / t["Count"] if t.get("Count") else t.get("Average Latency", 0)
        rows.append((t["Ops/sec"], avg,
                     pct.get("p99.00", 0), pct.get("p99.90", 0),
                     hits / (hits + misses) if hits + misses else 0, 0))
    return rows

def med(rows, i):
    return statistics.median(r[i] for r in rows) if rows else float("nan")

def delta(a, b):
    return f"{100 * (b / a - 1):+.1f}%" if a == a and b == b and a else "n/a"

tools = [("memspin-loadgen (latency: service time, kernel send to kernel receive stamp, ms)", loadgen)]
if glob.glob(os.path.join(out, "memtier-*.json")):
    tools.append(("memtier_benchmark (latency: its own send to reply, ms)", memtier))
for tool, read in tools:
    print(f"\n{tool}; medians of {rounds} rounds\n")
    print("| Workload | memcached ops/sec | memspin ops/sec | Throughput delta | memcached avg latency | memspin avg latency | Latency delta | memcached p99 | memspin p99 | memcached p99.9 | memspin p99.9 | hit ratio (mc / ms) | errors (mc / ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for prof in profiles:
        mc, ms = read(prof, "memcached"), read(prof, "memspin")
        print(f"| {prof} | {med(mc,0):,.0f} | {med(ms,0):,.0f} | {delta(med(mc,0), med(ms,0))} "
              f"| {med(mc,1):.5f} | {med(ms,1):.5f} | {delta(med(mc,1), med(ms,1))} "
              f"| {med(mc,2):.3f} | {med(ms,2):.3f} | {med(mc,3):.3f} | {med(ms,3):.3f} "
              f"| {med(mc,4):.3f} / {med(ms,4):.3f} | {sum(r[5] for r in mc)} / {sum(r[5] for r in ms)} |")
print("\nNegative throughput delta favours memcached; positive latency delta favours memcached.")
PY
} 2>&1 | results_summary
printf '\nper-run JSON, .hlog and tables in %s; HTML reports: %s\n' "$out" \
  "$(printf '%s ' "$out"/report-*.html)"
