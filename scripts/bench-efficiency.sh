#!/usr/bin/env bash
# What memspin costs per request, beside memcached -t 1, and what it does flat out.
#
#  1. Open loop at each of RATES requests/s (Poisson arrivals, 32 connections x 4 in flight,
#     90 % GET, 32-byte values): the server's CPU seconds per million requests and the service
#     time p50/p90/p99, for memcached -t 1 and memspin (one worker, `--idle $IDLE`, default
#     adaptive) over TAP, AF_XDP (a veth pair, copy mode) and kernel sockets. The server's CPU
#     is the sum of its threads' on-CPU time (/proc/PID/task/*/schedstat) over a window of
#     SECONDS that starts a second after the generator (connections made, warm); the requests
#     in that window are the generator's achieved rate times its length, and a run whose
#     achieved rate is more than 2 % off the target is marked (`rate!`) and left out.
#  2. Pipelined, closed loop: 32 connections x 16 in flight, ops/s of memcached -t 1 and
#     memspin over TAP (and the other paths), same generator. The generator runs with
#     `--timestamps none` here (PIPELINED_TIMESTAMPS to change): reading a kernel transmit stamp
#     for every request makes the generator itself the limit of memspin's runs
#     (PIPELINED_TIMESTAMPS=software shows it), so its latencies are from user space (they
#     include the generator's delay).
#  3. With CONNS="FEW MANY" (e.g. "32 10000"): scripts/bench-connections.sh's MANY/FEW ratio.
#  Over TAP it also prints, per request in the open-loop windows (from `stats` before and after):
#  frames in and out, empty reads, sleeps, loop iterations and loss recovery's probes.
#
# Servers on CPU 0, memspin-loadgen on the last CPU, one server at a time, the order rotating
# every round; medians over ROUNDS rounds, and memspin / memcached ratios. What runs where: the
# kernel's receive path of the generator's sockets runs inside the server's sends (TAP writes,
# loopback sends), so it counts against the server for both; this kernel charges softirq time
# to the task it interrupts (no IRQ time accounting), which is the server while it runs. On a
# shared or virtual machine compare the ratios of one run, not absolute figures.
#
# Usage: scripts/bench-efficiency.sh [ROUNDS (default 5)] [SECONDS per run (default 5)]
#   RATES="10000 50000 100000"  SERVERS="memcached tap xdp kernel"  IDLE=adaptive|park|spin
#   (tap-rto-off in SERVERS: memspin over TAP with --rto-min off, loss recovery's probes off;
#   tap-spin, xdp-spin: --idle spin whatever IDLE says; tap-base, xdp-base: the memspin binary
#   BASE_BIN, e.g. a copy of another build, for two builds in alternating rounds)
#   PIPELINED=1 (0: skip part 2)  PIPELINED_TIMESTAMPS=none|software  CONNS="" (part 3 off;
#   "32 10000" to run it)  RATES="" skips part 1
#   PROFILE=DIR: during round 1's pipelined run over TAP, `perf record -e cpu-clock --call-graph
#   dwarf` of memspin's worker thread into DIR/perf.data, and at the end where its samples went
#   (frame writes with the client's TCP receive inside them, frame reads, the store, parsing,
#   the engine, smoltcp, the table, sleeping, the clock), from DIR/script.txt; needs perf
#   BUILD=0: run target/release's binaries as they are (no cargo build)
#   OPEN_PROFILE=DIR: during round 1's open-loop windows, `perf record -e cpu-clock -g` of the
#   server's CPU (every task on it, the idle task included) into DIR/SERVER-RATE.data, and at
#   the end each one's shares by task and library, and its leading symbols
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-5}
seconds=${2:-5}
rates=(${RATES-10000 50000 100000})
servers=(${SERVERS:-memcached tap xdp kernel})
idle=${IDLE:-adaptive}
pipelined=${PIPELINED:-1}
pipelined_timestamps=${PIPELINED_TIMESTAMPS:-none}
profile=${PROFILE:-}
open_profile=${OPEN_PROFILE:-}
conns=(${CONNS:-})
need_packages iproute2 ethtool memcached python3
need_root_for_namespaces

build_release

results_init bench-efficiency "$@"
ns=memspin-eff-$$
client_ns=memspin-effc-$$
server_ns=memspin-effs-$$
ns_create "$ns"
ns_create "$client_ns"
ns_create "$server_ns"
veth_pair_create "$client_ns" "$server_ns" mse0 mse1 10.78.0.1/24
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))

now_ns() { date +%s%N; }

# loadgen CLIENT_NS ADDR JSON ARGS...: one memspin-loadgen run on the client CPU.
loadgen() {
  local cns=$1 addr=$2 json=$3; shift 3
  ip netns exec "$cns" "$LOADGEN_BIN" -s "$addr" -t 1 --cpus "$client_cpu" --keys 10000 \
    --key-size 16 --value-size 32 --get-ratio 0.9 -q --json "$json" "$@" >/dev/null
}

# start NAME ROUND: starts server NAME; sets CNS (the client's namespace) and ADDR.
start() {
  local name=$1 round=$2
  case $name in
    memcached)
      start_memcached "$ns" "$out/memcached-$round.log" 11311 1 "$server_cpu"
      CNS=$ns; ADDR=127.0.0.1:11311 ;;
    tap|tap-rto-off|tap-spin|tap-base)
      local recovery=() policy=$idle bin=$MEMSPIN_BIN
      [ "$name" = tap-rto-off ] && recovery=(--rto-min off)
      [ "$name" = tap-spin ] && policy=spin
      [ "$name" = tap-base ] && bin=${BASE_BIN:?BASE_BIN: the memspin binary tap-base runs}
      MEMSPIN_BIN=$bin start_server "$ns" "$out/$name-$round.log" --net tap --iface ms0 \
        --ip 10.77.0.2/24 --host-ip 10.77.0.1/24 --cpus "$server_cpu" --idle "$policy" -m 256 \
        "${recovery[@]}"
      CNS=$ns; ADDR=10.77.0.2:11211 ;;
    xdp|xdp-spin|xdp-base)
      local policy=$idle bin=$MEMSPIN_BIN
      [ "$name" = xdp-spin ] && policy=spin
      [ "$name" = xdp-base ] && bin=${BASE_BIN:?BASE_BIN: the memspin binary xdp-base runs}
      MEMSPIN_BIN=$bin start_server "$server_ns" "$out/$name-$round.log" --net xdp \
        --iface mse1 --ip 10.78.0.2/24 --cpus "$server_cpu" --idle "$policy" -m 256
      CNS=$client_ns; ADDR=10.78.0.2:11211 ;;
    kernel)
      start_server "$ns" "$out/kernel-$round.log" --net kernel -l 127.0.0.1 -p 11411 \
        --cpus "$server_cpu" --idle "$idle" -m 256
      CNS=$ns; ADDR=127.0.0.1:11411 ;;
    *) die "unknown server $name (memcached, tap, tap-rto-off, tap-spin, tap-base, xdp, xdp-spin, xdp-base, kernel)" ;;
  esac
}

# open_loop NAME ROUND RATE: one open-loop run; writes the JSON and NAME-RATE-ROUND.cpu
# (CPU nanoseconds and wall nanoseconds of the measured window).
open_loop() {
  local name=$1 round=$2 rate=$3 json
  json=$out/open-$name-$rate-$round.json
  loadgen "$CNS" "$ADDR" "$json" -c 32 --pipeline 4 --rate "$rate" --warmup 1 \
    -d $(( seconds + 1 )) &
  local gen=$!
  sleep 1.5
  local c0 w0 c1 w1
  stats_to "$CNS" "$ADDR" "$out/open-$name-$rate-$round.stats0"
  c0=$(cpu_ns "$SERVER_PID"); w0=$(now_ns)
  if [ -n "$open_profile" ] && [ "$round" = 1 ]; then
    mkdir -p "$open_profile"
    taskset -c "$client_cpu" perf record -q -e cpu-clock -F 4999 -g -C "$server_cpu" \
      -o "$open_profile/$name-$rate.data" -- sleep "$seconds" \
      2>"$open_profile/$name-$rate.log" || printf 'warning: perf record failed (see %s)\n' "$open_profile/$name-$rate.log" >&2
  else
    sleep "$seconds"
  fi
  c1=$(cpu_ns "$SERVER_PID"); w1=$(now_ns)
  stats_to "$CNS" "$ADDR" "$out/open-$name-$rate-$round.stats1"
  wait "$gen" || die "memspin-loadgen failed against $name at $rate/s"
  echo "$(( c1 - c0 )) $(( w1 - w0 ))" >"$out/open-$name-$rate-$round.cpu"
}

for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  n=${#servers[@]}
  for k in $(seq 0 $(( n - 1 ))); do
    name=${servers[$(( (k + round) % n ))]}
    start "$name" "$round"
    # Fill the keys once, outside every measured window.
    loadgen "$CNS" "$ADDR" "$out/prefill-$name-$round.json" -c 4 --rate 1000 -d 0.5 --warmup 0 --prefill
    for rate in "${rates[@]}"; do
      open_loop "$name" "$round" "$rate"
    done
    if [ "$pipelined" = 1 ] && [ -n "$profile" ] && [ "$name" = tap ] && [ "$round" = 1 ]; then
      loadgen "$CNS" "$ADDR" "$out/pipelined-$name-$round.json" -c 32 --pipeline 16 \
        -d "$seconds" --warmup 1 --timestamps "$pipelined_timestamps" &
      gen=$!
      sleep 1.5
      profile_worker "$SERVER_PID" "$client_cpu" "$profile/perf" 1999 $(( seconds > 2 ? seconds - 1 : 1 ))
      wait "$gen" || die "memspin-loadgen failed against $name (pipelined)"
    elif [ "$pipelined" = 1 ]; then
      loadgen "$CNS" "$ADDR" "$out/pipelined-$name-$round.json" -c 32 --pipeline 16 \
        -d "$seconds" --warmup 1 --timestamps "$pipelined_timestamps"
    fi
    # A failed exit spoils nothing measured; say so and go on.
    stop_server || printf 'warning: %s exited with an error (see %s)\n' "$name" "$out/$name-$round.log" >&2
  done
done
grep -h ready "$out"/*-1.log >&2 || true

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $rounds rounds (servers on CPU $server_cpu, loadgen on CPU $client_cpu, memspin --idle $idle)"
python3 - "$out" "$rounds" "${servers[*]}" "${rates[*]:-}" "$pipelined" "$pipelined_timestamps" <<'PY'
import json, statistics, sys, os
out, rounds, servers, rates, pipelined = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), [int(r) for r in sys.argv[4].split()], sys.argv[5] == "1"
pipelined_timestamps = sys.argv[6]
def med(v):
    return statistics.median(v) if v else float("nan")
def open_runs(name, rate):
    runs = []
    for r in range(1, rounds + 1):
        base = os.path.join(out, f"open-{name}-{rate}-{r}")
        if not os.path.exists(base + ".json"):
            continue
        d = json.load(open(base + ".json"))
        cpu_ns, wall_ns = map(int, open(base + ".cpu").read().split())
        ol = d.get("open_loop") or {}
        achieved = ol.get("achieved_rate", d["ops_per_sec"])
        ok = abs(achieved / rate - 1) <= 0.02
        requests = achieved * wall_ns / 1e9
        runs.append({"ok": ok, "cpu_per_m": cpu_ns / 1e9 / (requests / 1e6), "cpu_share": cpu_ns / wall_ns,
                     "p50": d["latency_us"]["service"]["all"]["p50"], "p90": d["latency_us"]["service"]["all"]["p90"],
                     "p99": d["latency_us"]["service"]["all"]["p99"], "achieved": achieved})
    return runs
if rates:
    print("\nopen loop, 32 connections x 4 in flight: server CPU s per million requests, service time µs")
    print(f"{'rate/s':>7} {'server':10} {'CPU s/M':>8} {'cores':>6} {'p50':>7} {'p90':>7} {'p99':>8}  {'CPU ratio':>9} {'p50 ratio':>9}  runs")
for rate in rates:
    base = None
    for name in servers:
        runs = open_runs(name, rate)
        good = [r for r in runs if r["ok"]]
        m = {k: med([r[k] for r in good]) for k in ("cpu_per_m", "cpu_share", "p50", "p90", "p99")}
        if name == "memcached":
            base = m
        ratio = lambda k: m[k] / base[k] if base and base[k] else float("nan")
        notes = " ".join(f"{r['cpu_per_m']:.1f}" + ("" if r["ok"] else "(rate!)") for r in runs)
        print(f"{rate:7d} {name:10} {m['cpu_per_m']:8.2f} {m['cpu_share']:6.2f} {m['p50']:7.1f} {m['p90']:7.1f} {m['p99']:8.1f}  "
              f"{ratio('cpu_per_m'):9.2f} {ratio('p50'):9.2f}  {notes}")
TAP_KEYS = ("memspin_tap_rx_frames", "memspin_tap_tx_frames", "memspin_tap_rx_empty_reads",
            "memspin_parks", "memspin_polls", "memspin_loss_probes")
XDP_KEYS = ("memspin_xdp_rx_frames", "memspin_xdp_tx_frames", "memspin_xdp_tx_kicks",
            "memspin_parks", "memspin_polls", "memspin_loss_probes")
def counters(name, rate, keys):
    # memspin's frames, empty reads or kicks, sleeps and loss probes per request over the windows
    per = {}
    for r in range(1, rounds + 1):
        base = os.path.join(out, f"open-{name}-{rate}-{r}")
        try:
            a, b = ({l.split()[0]: l.split()[1] for l in open(base + f".stats{i}") if len(l.split()) == 2} for i in (0, 1))
            reqs = sum(int(b[k]) - int(a[k]) for k in ("cmd_get", "cmd_set"))
        except (OSError, KeyError, ValueError):
            continue
        if reqs <= 0:
            continue
        for k in keys:
            if k in a and k in b:
                per.setdefault(k, []).append((int(b[k]) - int(a[k])) / reqs)
    return {k: med(v) for k, v in per.items()}
for path, keys, third in (("tap", TAP_KEYS, "empty reads"), ("xdp", XDP_KEYS, "sendto kicks")):
    rows = [(rate, name, counters(name, rate, keys)) for rate in rates for name in servers if name.startswith(path)]
    if any(c for _, _, c in rows):
        print(f"\nmemspin over {path.upper()}, per request (medians): frames in, frames out, {third}, sleeps, loop iterations, loss probes")
        print(f"{'rate/s':>7} {'server':12} {'in':>6} {'out':>6} {third.split()[-1][:6]:>6} {'sleeps':>6} {'loops':>6} {'probes':>6}")
        for rate, name, c in rows:
            v = [c.get(k, float("nan")) for k in keys]
            print(f"{rate:7d} {name:12} " + " ".join(f"{x:6.2f}" for x in v))
if pipelined:
    print(f"\npipelined, closed loop, 32 connections x 16 in flight (generator --timestamps {pipelined_timestamps})")
    print(f"{'server':10} {'ops/s':>10} {'p50':>7} {'p99':>8} {'ratio':>6}  runs (ops/s)")
    base = None
    for name in servers:
        runs = [json.load(open(os.path.join(out, f"pipelined-{name}-{r}.json"))) for r in range(1, rounds + 1)
                if os.path.exists(os.path.join(out, f"pipelined-{name}-{r}.json"))]
        ops = [d["ops_per_sec"] for d in runs]
        lat = lambda k: med([d["latency_us"]["service"]["all"][k] for d in runs])
        if name == "memcached":
            base = med(ops)
        ratio = med(ops) / base if base else float("nan")
        print(f"{name:10} {med(ops):10.0f} {lat('p50'):7.1f} {lat('p99'):8.1f} {ratio:6.2f}  " + " ".join(f"{o:.0f}" for o in ops))
PY

if [ ${#conns[@]} -eq 2 ]; then
  step "connections: ${conns[1]} vs ${conns[0]} (scripts/bench-connections.sh $rounds $seconds ${conns[0]} ${conns[1]})"
  ns_cleanup
  MEMSPIN_NAMESPACES=()
  bash scripts/bench-connections.sh "$rounds" "$seconds" "${conns[0]}" "${conns[1]}" | tail -4
fi
if [ -n "$profile" ] && [ -s "$profile/perf.data" ]; then
  step "where the TAP worker's samples went (pipelined, round 1; perf script, inlined frames)"
  perf script -i "$profile/perf.data" -F comm,tid,ip,sym,dso 2>/dev/null >"$profile/script.txt"
  python3 scripts/profile-groups.py "$profile/script.txt"
fi
if [ -n "$open_profile" ]; then
  for data in "$open_profile"/*.data; do
    [ -s "$data" ] || continue
    step "the server's CPU at $(basename "$data" .data) (open loop, round 1; every task on CPU $server_cpu)"
    perf report -i "$data" --no-children --sort comm,dso -q --stdio 2>/dev/null | grep -v '^$' | head -12
    perf report -i "$data" --no-children --sort sym -g none -q --stdio 2>/dev/null | grep -v '^$' | head -30
  done
fi
} 2>&1 | results_summary
printf '\nper-run JSON, CPU windows and server logs in %s\n' "$out"
