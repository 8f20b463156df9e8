#!/usr/bin/env bash
# memspin over AF_XDP vs memspin over TAP, one worker pinned to CPU 0 (--idle spin), measured
# by memspin-loadgen pinned to the last CPU. TAP: one namespace, the kernel side of the TAP
# is the client. XDP: two namespaces joined by a veth pair (client 10.78.0.1, memspin on the
# other end serving 10.78.0.2, native XDP, copy mode). Only one server runs at a time and
# the order alternates every round. Prints medians over the rounds.
#
# Usage: scripts/bench-xdp-vs-tap.sh [ROUNDS (default 5)] [SECONDS per run (default 5)]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-5}
seconds=${2:-5}
need_packages iproute2 ethtool python3
need_root_for_namespaces

build_release

results_init bench-xdp-vs-tap "$@"
tap_ns=memspin-bt-$$
client_ns=memspin-bxc-$$
server_ns=memspin-bxs-$$
ns_create "$tap_ns"
ns_create "$client_ns"
ns_create "$server_ns"
veth_pair_create "$client_ns" "$server_ns" msb0 msb1 10.78.0.1/24
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))

# run_one NAME CLIENT_NS ADDR ROUND
run_one() {
  ip netns exec "$2" "$LOADGEN_BIN" -s "$3" -c 32 --pipeline 16 -t 1 --cpus "$client_cpu" \
    -d "$seconds" --keys 10000 --value-size 32 --prefill -q --json "$out/$1-$4.json" >/dev/null
}

run_server() {
  local name=$1 round=$2
  case $name in
    tap)
      start_server "$tap_ns" "$out/tap-$round.log" --net tap --iface ms0 --ip 10.77.0.2/24 \
        --host-ip 10.77.0.1/24 --cpus "$server_cpu" --idle spin -m 256
      run_one tap "$tap_ns" 10.77.0.2:11211 "$round" ;;
    xdp)
      start_server "$server_ns" "$out/xdp-$round.log" --net xdp --iface msb1 --ip 10.78.0.2/24 \
        --cpus "$server_cpu" --idle spin -m 256
      run_one xdp "$client_ns" 10.78.0.2:11211 "$round" ;;
  esac
  stop_server || die "memspin $name exited with an error (see $out/$name-$round.log)"
}

servers=(xdp tap)
for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  for k in 0 1; do
    run_server "${servers[$(( (k + round) % 2 ))]}" "$round"
  done
done
grep -h ready "$out"/xdp-1.log "$out"/tap-1.log >&2

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $rounds rounds (32 connections x 16 in flight, 1 loadgen thread on CPU $client_cpu, memspin on CPU $server_cpu, --idle spin)"
python3 - "$out" <<'PY'
import json, statistics, sys, glob, os
out = sys.argv[1]
print(f"{'path':6} {'ops/s':>10} {'p50 µs':>8} {'p90 µs':>8} {'p99 µs':>8}   runs (ops/s)")
rows = {}
for name in ["xdp", "tap"]:
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, f"{name}-*.json")))]
    ops = [r["ops_per_sec"] for r in runs]
    lat = lambda k: statistics.median(r["latency_us"]["service"]["all"][k] for r in runs)
    rows[name] = statistics.median(ops)
    print(f"{name:6} {statistics.median(ops):10.0f} {lat('p50'):8.1f} {lat('p90'):8.1f} {lat('p99'):8.1f}   "
          + " ".join(f"{o:.0f}" for o in ops))
print(f"\nxdp / tap throughput: {rows['xdp'] / rows['tap']:.2f}")
PY
} 2>&1 | results_summary
printf '\nper-run JSON and server logs in %s\n' "$out"
