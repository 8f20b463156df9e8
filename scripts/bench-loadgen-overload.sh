#!/usr/bin/env bash
# Does memspin-loadgen hold a server at its capacity when it offers more than the server can
# take? One server at a time on CPU 0 inside a fresh network namespace, the generator on the last
# CPU, binary protocol, 16-byte keys, 32-byte values, 90 % GET, 10,000 keys written first, CONNS
# connections with one request in flight each:
#
#   memcached        memcached -t 1 on the namespace's 127.0.0.1
#   memspin          memspin -t 1 over TAP (--net tap, 10.77.0.2 inside the namespace)
#
# For each server: a first closed loop over the same connections calibrates the capacity C0
# that sets the offered rates (POINTS × C0). Then ROUNDS rounds, each a closed loop (that
# round's capacity C) and one open-loop run (Poisson) per point, from below the knee to far past
# it (in reverse order every other round, so a drift of the machine favours no point), with
# memspin-loadgen and, when there is one, with mutilate (-c CONNS -d 1 -q RATE) at the same
# rates. Each point is its own run (--rate): `--sweep` stops at the first point past saturation,
# and this benchmark is about the points after it. A point's ratio to C is the median over the
# rounds of (rate sent / that round's C): on a shared VM the capacity moves by 10 % from one
# run to the next, so a rate is only compared with a capacity measured beside it.
#
# Reported per point: the rate asked for, the rate sent (memspin-loadgen: requests sent in the
# window; mutilate: its QPS) and its ratio to C, memspin-loadgen's corrected p50 and p99 (from
# the intended send time: they grow with the run's length past saturation, as they should) and
# whether it found the run past saturation, memspin-loadgen's CPU time per request sent (its
# thread's CPU time in the window / requests sent in it), and mutilate's p99 (from its actual
# send, so it does not grow). The target: past the knee, the rate sent stays at 0.9 × C or more
# at every point, for both servers, and no lower than mutilate's.
#
# Writes results/bench-loadgen-overload-<date>/: results.md (the tables), every run's JSON (and
# mutilate's output), commit.txt, machine.txt and command.txt.
#
# Usage: scripts/bench-loadgen-overload.sh [SECONDS per run (default 3)]
#   ROUNDS=5                            rounds (medians over them)
#   POINTS="0.25 0.5 0.75 1 1.5 2 3 4"   offered load as multiples of the calibrated capacity
#   CONNS=32                            connections (one request in flight each)
#   SERVERS="memcached memspin"         which servers
#   WARMUP=1                            warm-up of every run, s
#   LOADGEN_FLAGS=                      more memspin-loadgen flags (e.g. "--idle sleep")
#   MUTILATE=PATH                       mutilate binary (its column is left out without it); see
#                                       scripts/bench-loadgen-delay.sh for how to build it
#   BUILD=0                             use the binaries already in target/release
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

seconds=${1:-3}
rounds=${ROUNDS:-5}
points=(${POINTS:-0.25 0.5 0.75 1 1.5 2 3 4})
conns=${CONNS:-32}
servers=(${SERVERS:-memcached memspin})
warmup=${WARMUP:-1}
extra=(${LOADGEN_FLAGS:-})
mutilate=${MUTILATE:-}
if [ -n "$mutilate" ] && [ ! -x "$mutilate" ]; then
  die "MUTILATE=$mutilate is not an executable"
fi
[ ${#points[@]} -le 20 ] || die "at most 20 points"
[ "$rounds" -ge 1 ] && [ "$rounds" -le 20 ] || die "ROUNDS: 1 to 20"
need_packages iproute2 memcached python3
need_root_for_namespaces

build_release

out=results/bench-loadgen-overload-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"

# The results file's header: what ran, where, on which commit.
write_context() {
  git rev-parse HEAD >"$out/commit.txt"
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "(with local changes)" >>"$out/commit.txt"
  fi
  {
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "vcpus: $(nproc)"
    echo "kernel: $(uname -r) $(uname -v)"
    echo "memcached: $(memcached -V 2>/dev/null || echo unknown)"
    echo "mutilate: ${mutilate:-none}"
  } >"$out/machine.txt"
  printf '%q ' "$0" "$@" >"$out/command.txt"
  printf '\n(ROUNDS=%s POINTS="%s" CONNS=%s SERVERS="%s" WARMUP=%s LOADGEN_FLAGS="%s" MUTILATE=%s)\n' \
    "$rounds" "${points[*]}" "$conns" "${servers[*]}" "$warmup" "${extra[*]}" "${mutilate:-}" \
    >>"$out/command.txt"
}
write_context "$@"

ns=memspin-overload-$$
ns_create "$ns"
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))
[ "$client_cpu" -ne "$server_cpu" ] || die "needs two CPUs: the server and the generator must not share one"
# No run may outlast this (warm-up, window, drain, start-up).
run_limit=$(( warmup + seconds + 30 ))

common=(-t 1 --cpus "$client_cpu" -c "$conns" --pipeline 1 --keys 10000 --key-size 16
  --value-size 32 --get-ratio 0.9 --warmup "$warmup" -d "$seconds" -q "${extra[@]}")

# loadgen ADDR JSON [FLAGS...]: one memspin-loadgen run into JSON.
loadgen() {
  local addr=$1 json=$2; shift 2
  ip netns exec "$ns" timeout "$run_limit" "$LOADGEN_BIN" -s "$addr" "${common[@]}" "$@" \
    --json "$json" >/dev/null
}

# mutilate_at ADDR RATE TXT: one mutilate run at RATE into TXT (a failure is noted, not fatal).
mutilate_at() {
  local addr=$1 rate=$2 txt=$3
  # mutilate's default --iadist ("exponential", no parameter) crashes in its parser with current
  # glibc; the parameter is rescaled to -q anyway.
  ip netns exec "$ns" timeout "$run_limit" taskset -c "$client_cpu" "$mutilate" -s "$addr" \
    --binary -T 1 -c "$conns" -d 1 -q "$rate" -i exponential:1 -t "$seconds" -w "$warmup" \
    -K 16 -V 32 -u 0.1 -r 10000 >"$txt" 2>&1 || echo "mutilate failed at $rate/s" >&2
}

for name in "${servers[@]}"; do
  case $name in
    memcached)
      start_memcached "$ns" "$out/memcached.log" 11311 1 "$server_cpu"
      addr=127.0.0.1:11311 ;;
    memspin)
      start_server "$ns" "$out/memspin.log" --net tap --iface ms0 --ip 10.77.0.2/24 \
        --host-ip 10.77.0.1/24 -t 1 --cpus "$server_cpu" -m 256
      addr=10.77.0.2:11211 ;;
    *) die "unknown server $name (memcached, memspin)" ;;
  esac
  step "$name: prefill, then the closed-loop capacity over $conns connections (calibration)"
  ip netns exec "$ns" timeout "$run_limit" "$LOADGEN_BIN" -s "$addr" -t 1 -c 16 --keys 10000 \
    --key-size 16 --value-size 32 -d 0.2 --warmup 0 --prefill -q >/dev/null
  loadgen "$addr" "$out/$name-calibration.json"
  capacity=$(/usr/bin/python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["ops_per_sec"]))' \
    "$out/$name-calibration.json")
  [ "$capacity" -gt 0 ] || die "$name: no request completed in closed loop"
  for round in $(seq 1 "$rounds"); do
    order=("${points[@]}")
    if [ $(( round % 2 )) = 0 ]; then
      order=()
      for (( k = ${#points[@]} - 1; k >= 0; k-- )); do order+=("${points[$k]}"); done
    fi
    step "$name: round $round of $rounds: closed loop"
    loadgen "$addr" "$out/$name-closed-r$round.json"
    for f in "${order[@]}"; do
      rate=$(/usr/bin/python3 -c 'import sys; print(max(1, round(float(sys.argv[1]) * float(sys.argv[2]))))' \
        "$f" "$capacity")
      step "$name: round $round: ${f} × $capacity = $rate/s"
      loadgen "$addr" "$out/$name-x$f-r$round.json" --rate "$rate"
      if [ -n "$mutilate" ]; then
        mutilate_at "$addr" "$rate" "$out/$name-x$f-r$round-mutilate.txt"
      fi
    done
  done
  stop_server || true
done

/usr/bin/python3 - "$out" "$conns" "$rounds" "${servers[*]}" "${points[@]}" <<'PY' >"$out/results.md"
import json, os, re, statistics, sys
out, conns, rounds, servers, points = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5:]
points = list(dict.fromkeys(points))

def mutilate(path):
    if not os.path.exists(path):
        return None
    text = open(path).read()
    read = re.search(r"^read\s+(.*)$", text, re.M)
    qps = re.search(r"^Total QPS = ([0-9.]+)", text, re.M)
    if not read or not qps:
        return None
    # avg std min 5th 10th 90th 95th 99th
    return {"qps": float(qps.group(1)), "p99": float(read.group(1).split()[7])}

def read(path):
    return json.load(open(path)) if os.path.exists(path) else None

med = statistics.median

print("# memspin-loadgen past saturation\n")
print(f"commit: {open(os.path.join(out, 'commit.txt')).read().strip()}  ")
for line in open(os.path.join(out, "machine.txt")):
    print(line.rstrip() + "  ")
print(f"command: `{open(os.path.join(out, 'command.txt')).read().strip()}`\n")
print(f"{conns} connections, one request in flight each; server on CPU 0, generator on the last "
      f"CPU. Medians over {rounds} rounds; \"/ C\" is the median of each round's rate over that "
      "round's closed-loop capacity. Rates in requests/s, latencies in µs, CPU in µs per "
      "request sent.\n")
verdicts = []
for name in servers:
    cal = read(os.path.join(out, f"{name}-calibration.json"))
    if cal is None:
        continue
    closed = {r: read(os.path.join(out, f"{name}-closed-r{r}.json")) for r in range(1, rounds + 1)}
    closed = {r: c for r, c in closed.items() if c}
    if not closed:
        continue
    caps = {r: c["ops_per_sec"] for r, c in closed.items()}
    print(f"## {name}\n")
    print(f"calibration (sets the offered rates): {cal['ops_per_sec']:.0f}/s; closed loop per "
          f"round: {', '.join(f'{caps[r]:.0f}' for r in sorted(caps))} (median {med(caps.values()):.0f}), "
          f"service p50 {med(c['latency_us']['service']['all']['p50'] for c in closed.values()):.1f}, "
          f"generator CPU {med(c['generator']['cpu_per_request_us'] for c in closed.values()):.2f} per request\n")
    print("| offered | × C0 | loadgen sent | / C | corrected p50 | corrected p99 | saturated "
          "| loadgen CPU/req | mutilate QPS | / C | mutilate p99 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    past, mut_plateau = [], []
    for f in points:
        runs = {r: read(os.path.join(out, f"{name}-x{f}-r{r}.json")) for r in caps}
        runs = {r: j for r, j in runs.items() if j}
        if not runs:
            continue
        ol = {r: j["open_loop"] for r, j in runs.items()}
        ratio = med(ol[r]["achieved_rate"] / caps[r] for r in runs)
        lat = [j["latency_us"]["corrected"]["all"] for j in runs.values()]
        mut = {r: mutilate(os.path.join(out, f"{name}-x{f}-r{r}-mutilate.txt")) for r in caps}
        mut = {r: m for r, m in mut.items() if m}
        if mut:
            mratio = med(m["qps"] / caps[r] for r, m in mut.items())
            mq = f"{med(m['qps'] for m in mut.values()):.0f} | {mratio:.3f} | {med(m['p99'] for m in mut.values()):.1f}"
        else:
            mq = "- | - | -"
        saturated = sum(1 for o in ol.values() if o["saturated"])
        target = next(iter(ol.values()))["target_rate"]
        print(f"| {target:.0f} | {f} | {med(o['achieved_rate'] for o in ol.values()):.0f} | "
              f"{ratio:.3f} | {med(l['p50'] for l in lat):.1f} | {med(l['p99'] for l in lat):.1f} | "
              f"{saturated} of {len(ol)} | "
              f"{med(j['generator']['cpu_per_request_us'] for j in runs.values()):.2f} | {mq} |")
        if float(f) > 1:
            past.append(ratio)
            if mut:
                mut_plateau.append(mratio)
    print()
    if past:
        ok = min(past) >= 0.9
        verdicts.append(f"{name}: past the knee (points above 1 × C0) memspin-loadgen sent "
                        f"{min(past):.3f}–{max(past):.3f} × C (medians): "
                        f"{'meets' if ok else 'MISSES'} the 0.9 × C target")
        if mut_plateau:
            verdicts.append(f"{name}: mutilate's plateau {min(mut_plateau):.3f}–"
                            f"{max(mut_plateau):.3f} × C; memspin-loadgen's lowest point is "
                            f"{min(past) / max(mut_plateau):.3f} × mutilate's highest")
print("## Verdict\n")
for v in verdicts:
    print(f"- {v}")
PY
cat "$out/results.md"
printf '\nresults in %s\n' "$out"
