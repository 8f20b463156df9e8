#!/usr/bin/env bash
# Side-by-side benchmark: memcached -t 1, memspin over TAP and memspin on kernel sockets, each
# with one worker pinned to CPU 0, measured by memspin-loadgen pinned to the last CPU, inside
# one fresh network namespace. Only one server runs at a time; the order alternates every
# round. Prints medians over the rounds and the ratios against memcached.
#
# Usage: scripts/bench-vs-memcached.sh [ROUNDS (default 5)] [SECONDS per run (default 5)]
#   IDLE=spin|park  memspin's idle policy (default spin: nothing else runs on its core)
#   MEMSPIN=PATH    the memspin binary to measure (default: this checkout's release build)
#   BESIDE=PATH     another memspin build, measured in the same rounds as memspin-tap-beside and
#                   memspin-kernel-beside (a before/after pair side by side: five servers rotate)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-5}
seconds=${2:-5}
idle=${IDLE:-spin}
beside=${BESIDE:-}
need_packages iproute2 memcached python3
need_root_for_namespaces

build_release
MEMSPIN_BIN=${MEMSPIN:-$MEMSPIN_BIN}
main_bin=$MEMSPIN_BIN
[ -x "$MEMSPIN_BIN" ] || die "MEMSPIN=$MEMSPIN_BIN is not executable"
[ -z "$beside" ] || [ -x "$beside" ] || die "BESIDE=$beside is not executable"

results_init bench-vs-memcached "$@"
ns=memspin-bench-$$
ns_create "$ns"
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))

# run_one NAME ADDR WORKLOAD: one loadgen run against the server that is up now.
run_one() {
  local name=$1 addr=$2 workload=$3 round=$4 flags
  case $workload in
    throughput) flags=(-c 32 --pipeline 16) ;;
    latency) flags=(-c 1 --pipeline 1) ;;
  esac
  ip netns exec "$ns" "$LOADGEN_BIN" -s "$addr" -t 1 --cpus "$client_cpu" "${flags[@]}" \
    -d "$seconds" --warmup 1 --keys 10000 --key-size 16 --value-size 32 --get-ratio 0.9 \
    --prefill -q --json "$out/$workload-$name-$round.json" >/dev/null
}

run_server() {
  local name=$1 round=$2 workload
  MEMSPIN_BIN=$main_bin
  case $name in *-beside) MEMSPIN_BIN=$beside ;; esac
  case $name in
    memcached) start_memcached "$ns" "$out/memcached.log" 11311 1 "$server_cpu"; addr=127.0.0.1:11311 ;;
    memspin-tap | memspin-tap-beside)
      start_server "$ns" "$out/$name-$round.log" --net tap --iface ms0 --ip 10.77.0.2/24 \
        --host-ip 10.77.0.1/24 --cpus "$server_cpu" --idle "$idle" -m 256
      addr=10.77.0.2:11211 ;;
    memspin-kernel | memspin-kernel-beside)
      start_server "$ns" "$out/$name-$round.log" --net kernel -l 127.0.0.1 -p 11411 \
        --cpus "$server_cpu" --idle "$idle" -m 256
      addr=127.0.0.1:11411 ;;
  esac
  for workload in throughput latency; do
    run_one "$name" "$addr" "$workload" "$round"
  done
  stop_server || true
}

servers=(memcached memspin-tap memspin-kernel)
if [ -n "$beside" ]; then
  servers=(memcached memspin-tap memspin-tap-beside memspin-kernel memspin-kernel-beside)
fi
n=${#servers[@]}
for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  # Rotate the order every round so drift in the machine's load does not favour one server.
  for k in $(seq 0 $(( n - 1 ))); do
    run_server "${servers[$(( (k + round) % n ))]}" "$round"
  done
done

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $rounds rounds (service time, µs; loadgen on CPU $client_cpu, servers on CPU $server_cpu, memspin --idle $idle)"
[ -z "$beside" ] || printf 'memspin: %s\nbeside:  %s\n' "$main_bin" "$beside"
python3 - "$out" "$rounds" "${servers[@]}" <<'PY'
import json, statistics, sys, glob, os
out, rounds, servers = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def med(workload, name, key):
    vals = []
    for path in glob.glob(os.path.join(out, f"{workload}-{name}-[0-9]*.json")):
        d = json.load(open(path))
        vals.append(d["ops_per_sec"] if key == "ops" else d["latency_us"]["service"]["all"][key])
    return statistics.median(vals) if vals else float("nan")
for workload, label in [("throughput", "32 connections x 16 in flight"), ("latency", "1 connection, 1 in flight")]:
    print(f"\n{workload}: {label}, 90 % GET, 32-byte values")
    print(f"{'server':21} {'ops/s':>10} {'p50':>8} {'p90':>8} {'p99':>8}   {'ops ratio':>9} {'p50 ratio':>9}")
    base_ops, base_p50 = med(workload, "memcached", "ops"), med(workload, "memcached", "p50")
    for name in servers:
        ops, p50, p90, p99 = (med(workload, name, k) for k in ("ops", "p50", "p90", "p99"))
        print(f"{name:21} {ops:10.0f} {p50:8.1f} {p90:8.1f} {p99:8.1f}   {ops/base_ops:9.2f} {p50/base_p50:9.2f}")
PY
} 2>&1 | results_summary
printf '\nper-run JSON in %s\n' "$out"
