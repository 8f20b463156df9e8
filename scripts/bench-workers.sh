#!/usr/bin/env bash
# One worker against two: memspin (TAP multi-queue, and kernel sockets with SO_REUSEPORT) with
# -t 1 and -t 2, beside memcached -t 1 and -t 2, each measured by the same memspin-loadgen run
# inside one fresh network namespace. Only one server runs at a time; the order rotates every
# round. Prints medians over the rounds and the 2-worker/1-worker ratios.
#
# Read the 2-worker figures with the machine in mind: on a 2-vCPU box the two workers and the
# load generator share two CPUs (and on a shared host the two vCPUs may get less than two host
# CPUs), so a second worker competes with the loadgen for CPU time. The default idle policy is
# therefore `park` for every memspin run (a worker sleeps when its queue is empty instead of
# spinning against the loadgen); IDLE=spin measures the dedicated-core configuration.
#
# Usage: scripts/bench-workers.sh [ROUNDS (default 5)] [SECONDS per run (default 5)]
#   IDLE=park|spin  memspin's idle policy (default park)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-5}
seconds=${2:-5}
idle=${IDLE:-park}
need_packages iproute2 memcached python3
need_root_for_namespaces

build_release

results_init bench-workers "$@"
ns=memspin-workers-$$
ns_create "$ns"
last_cpu=$(( $(nproc) - 1 ))

run_server() {
  local name=$1 round=$2 threads=${1##*-t}
  cpus=0
  [ "$threads" = 2 ] && cpus=0,$last_cpu
  case $name in
    memcached-t*) start_memcached "$ns" "$out/memcached.log" 11311 "$threads"; addr=127.0.0.1:11311 ;;
    tap-t*)
      start_server "$ns" "$out/$name-$round.log" --net tap --iface ms0 --ip 10.77.0.2/24 \
        --host-ip 10.77.0.1/24 -t "$threads" --cpus "$cpus" --idle "$idle" -m 256
      addr=10.77.0.2:11211 ;;
    kernel-t*)
      start_server "$ns" "$out/$name-$round.log" --net kernel -l 127.0.0.1 -p 11411 \
        -t "$threads" --cpus "$cpus" --idle "$idle" -m 256
      addr=127.0.0.1:11411 ;;
  esac
  ip netns exec "$ns" "$LOADGEN_BIN" -s "$addr" -t 1 -c 32 --pipeline 16 \
    -d "$seconds" --warmup 1 --keys 10000 --key-size 16 --value-size 32 --get-ratio 0.9 \
    --prefill -q --json "$out/$name-$round.json" >/dev/null
  stop_server || true
}

servers=(memcached-t1 memcached-t2 tap-t1 tap-t2 kernel-t1 kernel-t2)
n=${#servers[@]}
for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  for k in $(seq 0 $((n - 1))); do
    run_server "${servers[$(( (k + round) % n ))]}" "$round"
  done
done

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $rounds rounds: 32 connections x 16 in flight, 90 % GET, 32-byte values (service time, µs; memspin --idle $idle; 1 worker on CPU 0, 2 workers on CPUs 0,$last_cpu; loadgen unpinned)"
python3 - "$out" <<'PY'
import json, statistics, sys, glob, os
out = sys.argv[1]
def med(name, key):
    vals = []
    for path in glob.glob(os.path.join(out, f"{name}-[0-9]*.json")):
        d = json.load(open(path))
        vals.append(d["ops_per_sec"] if key == "ops" else d["latency_us"]["service"]["all"][key])
    return statistics.median(vals) if vals else float("nan")
print(f"{'server':14} {'ops/s':>10} {'p50':>8} {'p90':>8} {'p99':>8}   {'t2/t1 ops':>9}")
for base in ["memcached", "tap", "kernel"]:
    one = med(f"{base}-t1", "ops")
    for t in (1, 2):
        name = f"{base}-t{t}"
        ops, p50, p90, p99 = (med(name, k) for k in ("ops", "p50", "p90", "p99"))
        ratio = f"{ops/one:9.2f}" if t == 2 else f"{'':9}"
        print(f"{name:14} {ops:10.0f} {p50:8.1f} {p90:8.1f} {p99:8.1f}   {ratio}")
PY
} 2>&1 | results_summary
printf '\nper-run JSON in %s\n' "$out"
