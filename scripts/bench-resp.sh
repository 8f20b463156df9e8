#!/usr/bin/env bash
# RESP benchmark: memspin (TAP, one worker, --resp-port) against redis-server (Debian package,
# persistence off, one I/O thread), each pinned to CPU 0, inside one fresh network namespace;
# clients pinned to the last CPU. Only one server runs at a time, and the order alternates
# every round. Per server and round:
#   - redis-benchmark -t set,get -n N -r N -c 120 (the seed's run; N = 1,000,000 there),
#   - the same with -P 16,
#   - memspin-loadgen --protocol resp: 1 connection with 1 request in flight (latency), and
#     32 connections with 16 in flight each (throughput); 90 % GET, 32-byte values. The
#     throughput run reads no kernel timestamps (`--timestamps none`, PIPELINED_TIMESTAMPS to
#     change): a transmit stamp read per request makes the generator, not the server, the limit
#     of memspin's pipelined runs (see bench-efficiency.sh); its latencies are then from user
#     space and include the generator's own delay.
# Prints medians over the rounds and memspin's ratios against redis-server.
#
# Usage: scripts/bench-resp.sh [ROUNDS (default 3)] [N requests per redis-benchmark test
#                              (default 200000; the seed's run: 1000000)] [SECONDS per loadgen
#                              run (default 5)]
#   IDLE=spin|park|adaptive  memspin's idle policy (default spin: nothing else runs on its core)
#   PIPELINED_TIMESTAMPS=none|software  the generator's timestamps in the 32 x 16 run
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-3}
requests=${2:-200000}
seconds=${3:-5}
idle=${IDLE:-spin}
pipelined_timestamps=${PIPELINED_TIMESTAMPS:-none}
need_packages iproute2 redis-server redis-tools python3
need_root_for_namespaces

build_release

out=results/bench-resp-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
ns=memspin-bench-resp-$$
ns_create "$ns"
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))

# start_redis LOG PORT: redis-server on 127.0.0.1:PORT inside the namespace, pinned to the
# server CPU, no persistence; stopped by stop_server and on exit.
start_redis() {
  local log=$1 port=$2
  ip netns exec "$ns" taskset -c "$server_cpu" redis-server --bind 127.0.0.1 --port "$port" \
    --save "" --appendonly no --io-threads 1 --daemonize no --logfile "" >"$log" 2>&1 &
  SERVER_PID=$!
  MEMSPIN_PIDS+=("$SERVER_PID")
  local i
  for i in $(seq 1 100); do
    ip netns exec "$ns" redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  cat "$log" >&2
  die "redis-server did not start"
}

# bench NAME HOST PORT ROUND: every workload against the server that is up now.
bench() {
  local name=$1 host=$2 port=$3 round=$4
  local base=(ip netns exec "$ns" taskset -c "$client_cpu" redis-benchmark -h "$host" -p "$port"
    -t set,get -n "$requests" -r "$requests" -c 120 --csv)
  "${base[@]}" >"$out/seed-$name-$round.csv"
  "${base[@]}" -P 16 >"$out/pipelined-$name-$round.csv"
  ip netns exec "$ns" "$LOADGEN_BIN" -s "$host:$port" --protocol resp -t 1 --cpus "$client_cpu" \
    -c 1 --pipeline 1 -d "$seconds" --warmup 1 --keys 10000 --key-size 16 --value-size 32 \
    --get-ratio 0.9 --prefill -q --json "$out/latency-$name-$round.json" >/dev/null
  ip netns exec "$ns" "$LOADGEN_BIN" -s "$host:$port" --protocol resp -t 1 --cpus "$client_cpu" \
    -c 32 --pipeline 16 -d "$seconds" --warmup 1 --keys 10000 --key-size 16 --value-size 32 \
    --get-ratio 0.9 --prefill --timestamps "$pipelined_timestamps" -q --json "$out/throughput-$name-$round.json" >/dev/null
}

run_server() {
  local name=$1 round=$2
  case $name in
    redis-server)
      start_redis "$out/$name-$round.log" 6380
      bench "$name" 127.0.0.1 6380 "$round" ;;
    memspin-tap)
      start_server "$ns" "$out/$name-$round.log" --net tap --iface ms0 --ip 10.77.0.2/24 \
        --host-ip 10.77.0.1/24 --resp-port 6379 --cpus "$server_cpu" --idle "$idle" -m 1024
      bench "$name" 10.77.0.2 6379 "$round" ;;
  esac
  stop_server || true
}

servers=(redis-server memspin-tap)
for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  # Swap the order every round so drift in the machine's load does not favour one server.
  for k in 0 1; do
    run_server "${servers[$(( (k + round) % 2 ))]}" "$round"
  done
done

step "medians over $rounds rounds (servers on CPU $server_cpu, clients on CPU $client_cpu, memspin --idle $idle)"
python3 - "$out" "$requests" "$pipelined_timestamps" <<'PY'
import csv, glob, json, os, statistics, sys
out, requests, pipelined_timestamps = sys.argv[1], sys.argv[2], sys.argv[3]
servers = ["redis-server", "memspin-tap"]

def median(values):
    return statistics.median(values) if values else float("nan")

def bench(kind, name, test, column):
    values = []
    for path in glob.glob(os.path.join(out, f"{kind}-{name}-*.csv")):
        for row in csv.DictReader(open(path)):
            if row["test"] == test:
                values.append(float(row[column]))
    return median(values)

def loadgen(kind, name, key):
    values = []
    for path in glob.glob(os.path.join(out, f"{kind}-{name}-*.json")):
        d = json.load(open(path))
        values.append(d["ops_per_sec"] if key == "ops" else d["latency_us"]["service"]["all"][key])
    return median(values)

for kind, label in [("seed", f"redis-benchmark -t set,get -n {requests} -r {requests} -c 120"),
                    ("pipelined", f"redis-benchmark -t set,get -n {requests} -r {requests} -c 120 -P 16")]:
    print(f"\n{label} (requests/s; p50 in ms)")
    print(f"{'server':14} {'SET rps':>10} {'GET rps':>10} {'SET p50':>8} {'GET p50':>8}   {'rps ratio':>9}")
    base = bench(kind, "redis-server", "GET", "rps") + bench(kind, "redis-server", "SET", "rps")
    for name in servers:
        s, g = bench(kind, name, "SET", "rps"), bench(kind, name, "GET", "rps")
        sp, gp = bench(kind, name, "SET", "p50_latency_ms"), bench(kind, name, "GET", "p50_latency_ms")
        print(f"{name:14} {s:10.0f} {g:10.0f} {sp:8.3f} {gp:8.3f}   {(s + g) / base:9.2f}")

for kind, label, stamps in [
        ("latency", "memspin-loadgen --protocol resp, 1 connection, 1 in flight", "software"),
        ("throughput", "memspin-loadgen --protocol resp, 32 connections x 16 in flight",
         pipelined_timestamps)]:
    clock = "kernel timestamps" if stamps != "none" else "user-space clock, --timestamps none"
    print(f"\n{label}, 90 % GET, 32-byte values (service time, µs; {clock})")
    print(f"{'server':14} {'ops/s':>10} {'p50':>8} {'p90':>8} {'p99':>8}   {'ops ratio':>9} {'p50 ratio':>9}")
    base_ops, base_p50 = loadgen(kind, "redis-server", "ops"), loadgen(kind, "redis-server", "p50")
    for name in servers:
        ops, p50, p90, p99 = (loadgen(kind, name, k) for k in ("ops", "p50", "p90", "p99"))
        print(f"{name:14} {ops:10.0f} {p50:8.1f} {p90:8.1f} {p99:8.1f}   {ops / base_ops:9.2f} {p50 / base_p50:9.2f}")
PY
printf '\nper-run CSV and JSON in %s\n' "$out"
