#!/usr/bin/env bash
# Steering against forwarding: memspin -t 2 on kernel sockets (SO_REUSEPORT), measured by the
# same memspin-loadgen run with and without --steer, inside one fresh network namespace. With
# --steer every key goes to a connection of the worker that owns it; without it about half of
# the requests are forwarded to the other worker. Reports, per mode, the requests memspin
# forwarded per request it served (memspin_forwarded over cmd_get + cmd_set, from `stats`
# before and after the run) and the throughput, medians over the rounds. One server runs at a
# time, started afresh for each run; the two modes alternate which goes first every round.
#
# On a 2-vCPU box the two workers and the generator share two CPUs: the workers park when idle
# (--idle park) and the generator runs one thread.
#
# Usage: scripts/bench-steer.sh [ROUNDS (default 5)] [SECONDS per run (default 5)]
#   CONNS=N      connections (default 32)
#   PROTOCOL=P   binary|text|meta|resp (default binary)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-5}
seconds=${2:-5}
conns=${CONNS:-32}
protocol=${PROTOCOL:-binary}
need_packages iproute2 python3
need_root_for_namespaces

build_release

results_init bench-steer "$@"
ns=memspin-steer-$$
ns_create "$ns"
last_cpu=$(( $(nproc) - 1 ))

# stat FILE NAME: NAME's value in a stats_to FILE (0 when absent).
stat_of() { awk -v n="$2" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }' "$1"; }

run_mode() {
  local mode=$1 round=$2 steer=()
  [ "$mode" = steer ] && steer=(--steer)
  local base=$out/$mode-$round
  start_server "$ns" "$base.log" --net kernel -l 127.0.0.1 -p 11511 --resp-port 16511 \
    -t 2 --cpus "0,$last_cpu" --idle park -m 256
  local addr=127.0.0.1:11511
  [ "$protocol" = resp ] && addr=127.0.0.1:16511
  stats_to "$ns" 127.0.0.1:11511 "$base.before"
  ip netns exec "$ns" "$LOADGEN_BIN" -s "$addr" --protocol "$protocol" -t 1 -c "$conns" \
    --pipeline 8 -d "$seconds" --warmup 1 --keys 20000 --key-size 16 --value-size 32 \
    --get-ratio 0.9 --idle sleep "${steer[@]}" -q --json "$base.json" >/dev/null
  stats_to "$ns" 127.0.0.1:11511 "$base.after"
  stop_server || true
  local fwd req
  fwd=$(( $(stat_of "$base.after" memspin_forwarded) - $(stat_of "$base.before" memspin_forwarded) ))
  req=$(( $(stat_of "$base.after" cmd_get) + $(stat_of "$base.after" cmd_set) \
        - $(stat_of "$base.before" cmd_get) - $(stat_of "$base.before" cmd_set) ))
  printf '{"forwarded": %d, "requests": %d}\n' "$fwd" "$req" >"$base.server.json"
}

modes=(plain steer)
for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  for k in 0 1; do
    run_mode "${modes[$(( (k + round) % 2 ))]}" "$round"
  done
done

{
step "medians over $rounds rounds: memspin -t 2 --idle park (kernel sockets), $protocol, $conns connections x 8 in flight, 90 % GET, 32-byte values, ${seconds} s"
python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
def runs(mode):
    for path in sorted(glob.glob(os.path.join(out, f"{mode}-[0-9]*.json"))):
        if path.endswith(".server.json"):
            continue
        server = json.load(open(path[: -len(".json")] + ".server.json"))
        yield json.load(open(path)), server
print(f"{'mode':8} {'ops/s':>10} {'p50 µs':>8} {'p99 µs':>8} {'fwd/req':>8} {'conns/worker':>14}")
for mode in ("plain", "steer"):
    rows = list(runs(mode))
    if not rows:
        continue
    med = lambda f: statistics.median(f(r, s) for r, s in rows)
    ops = med(lambda r, s: r["ops_per_sec"])
    p50 = med(lambda r, s: r["latency_us"]["service"]["all"]["p50"])
    p99 = med(lambda r, s: r["latency_us"]["service"]["all"]["p99"])
    fwd = med(lambda r, s: s["forwarded"] / max(s["requests"], 1))
    spread = rows[-1][0].get("steer_connections")
    print(f"{mode:8} {ops:10.0f} {p50:8.1f} {p99:8.1f} {fwd:8.3f} {str(spread):>14}")
PY
} 2>&1 | results_summary
printf '\nper-run JSON in %s\n' "$out"
