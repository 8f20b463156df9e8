#!/usr/bin/env bash
# Does memspin-loadgen add its own delays to the latency it reports? One memcached -t 1 pinned
# to CPU 0 inside a fresh network namespace (on its 127.0.0.1), the generator pinned to the last
# CPU, binary protocol, 32-byte values, 90 % GET, 10,000 keys written first, one request in
# flight per connection, at 1 and 16 connections, closed loop and open loop at RATE/s (Poisson):
#
#   defaults   memspin-loadgen as shipped: busy-polls while requests are in flight, send and reply
#              times from kernel timestamps
#   spin1000   --spin-us 1000: also busy-polls the last millisecond before every arrival, i.e.
#              nearly always at these rates (the busy-polling reference)
#   clock      --timestamps none: busy-polls, times from the generator's own clock (what a
#              busy-polling user-space client such as mutilate measures)
#   sleep      --idle sleep: sleeps in epoll while replies are due, kernel timestamps
#   sleep-clock --idle sleep --timestamps none: sleeps, times from its own clock
#   mutilate   mutilate's busy-polling event loop, when there is one (see MUTILATE)
#
# Only one generator runs at a time; every round runs every variant, in an order that rotates
# from round to round. Prints medians over the rounds of ops/s, mean, p50, p90 and p99 of the
# service time (µs; mutilate prints no p50), memspin-loadgen's generator delay p50 (kernel
# arrival of a reply -> the generator reading it), and each row's p50 and p90 against the
# defaults. On a shared or virtual machine quote the ratios, not the absolute figures.
#
# Usage: scripts/bench-loadgen-delay.sh [ROUNDS (default 5)] [SECONDS per run (default 3)]
#   RATE=5000       open-loop rate in requests/s, in total
#   MUTILATE=PATH   mutilate binary (default: `mutilate` on PATH; skipped when there is none).
#                   Debian does not package it. Build it from github.com/leverich/mutilate:
#                   its SConstruct is Python 2, so without scons: apt-get install libevent-dev
#                   gengetopt; in the checkout, `gengetopt < cmdline.ggo`, a config.h with
#                   `#define HAVE_CLOCK_GETTIME 1`, `#define HAVE_PTHREAD_BARRIER_INIT 1` and
#                   `#define HAVE_DECL_EVENT_BASE_FLAG_PRECISE_TIMER 1`, then
#                   `g++ -std=c++11 -O3 -D_GNU_SOURCE -D__STDC_FORMAT_MACROS -o mutilate
#                   mutilate.cc cmdline.cc log.cc distributions.cc util.cc Connection.cc
#                   Protocol.cc Generator.cc -levent -lpthread -lrt`; pass MUTILATE=$PWD/mutilate.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-5}
seconds=${2:-3}
rate=${RATE:-5000}
[ "$rounds" -ge 5 ] || die "at least 5 rounds (medians of fewer say little)"
need_packages iproute2 memcached python3
need_root_for_namespaces

mutilate=${MUTILATE:-$(command -v mutilate || true)}
if [ -n "$mutilate" ] && [ ! -x "$mutilate" ]; then
  die "MUTILATE=$mutilate is not an executable"
fi

build_release

results_init bench-loadgen-delay "$@"
ns=memspin-lgdelay-$$
ns_create "$ns"
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))
[ "$client_cpu" -ne "$server_cpu" ] || die "needs two CPUs: memcached and the generator must not share one"
port=11311

step "memcached -t 1 on CPU $server_cpu, generator on CPU $client_cpu"
start_memcached "$ns" "$out/memcached.log" "$port" 1 "$server_cpu"
common=(-s "127.0.0.1:$port" -t 1 --cpus "$client_cpu" --pipeline 1 --keys 10000 --key-size 16
  --value-size 32 --get-ratio 0.9 -q)
ip netns exec "$ns" "$LOADGEN_BIN" "${common[@]}" -c 16 -d 0.2 --warmup 0 --prefill >/dev/null

variants=(defaults spin1000 clock sleep sleep-clock)
[ -n "$mutilate" ] && variants+=(mutilate)
workloads=(closed-1 closed-16 open-1 open-16)

# run_one VARIANT WORKLOAD ROUND
run_one() {
  local variant=$1 workload=$2 round=$3 conns=${2##*-} flags=() mflags=()
  case $workload in
    # mutilate's default --iadist ("exponential", no parameter) crashes in its parser with
    # current glibc (strtok_r on NULL); the parameter is rescaled to --qps anyway.
    open-*) flags=(--rate "$rate"); mflags=(-q "$rate" -i exponential:1) ;;
    closed-*) mflags=(-q 0) ;;
  esac
  case $variant in
    defaults) ;;
    spin1000) flags+=(--spin-us 1000) ;;
    clock) flags+=(--timestamps none) ;;
    sleep) flags+=(--idle sleep) ;;
    sleep-clock) flags+=(--idle sleep --timestamps none) ;;
    mutilate)
      ip netns exec "$ns" taskset -c "$client_cpu" "$mutilate" -s "127.0.0.1:$port" --binary \
        -T 1 -c "$conns" -d 1 "${mflags[@]}" -t "$seconds" -w 1 -K 16 -V 32 -u 0.1 -r 10000 \
        >"$out/$workload-$variant-$round.txt" 2>&1 || echo "mutilate failed ($workload, round $round)" >&2
      return ;;
  esac
  ip netns exec "$ns" "$LOADGEN_BIN" "${common[@]}" -c "$conns" -d "$seconds" --warmup 1 \
    "${flags[@]}" --json "$out/$workload-$variant-$round.json" >/dev/null
}

n=${#variants[@]}
for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  for workload in "${workloads[@]}"; do
    for k in $(seq 0 $((n - 1))); do
      run_one "${variants[$(( (k + round) % n ))]}" "$workload" "$round"
    done
  done
done

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $rounds rounds: memcached -t 1 (CPU $server_cpu), generator on CPU $client_cpu, one request in flight per connection, open loop at $rate/s; service time, µs"
python3 - "$out" "$rate" "${variants[@]}" <<'PY'
import glob, json, os, re, statistics, sys
out, rate, variants = sys.argv[1], sys.argv[2], sys.argv[3:]

def loadgen(path):
    d = json.load(open(path))
    s = d["latency_us"]["service"]["all"]
    return {"ops": d["ops_per_sec"], "mean": s["mean"], "p50": s["p50"], "p90": s["p90"],
            "p99": s["p99"], "delay": d["latency_us"]["generator_delay"]["p50"]}

def mutilate(path):
    text = open(path).read()
    read = re.search(r"^read\s+(.*)$", text, re.M)
    qps = re.search(r"^Total QPS = ([0-9.]+)", text, re.M)
    if not read or not qps:
        return None
    # avg std min 5th 10th 90th 95th 99th
    f = [float(x) for x in read.group(1).split()]
    return {"ops": float(qps.group(1)), "mean": f[0], "p50": None, "p90": f[5], "p99": f[7],
            "delay": None}

def medians(workload, variant):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, f"{workload}-{variant}-[0-9]*"))):
        r = mutilate(path) if path.endswith(".txt") else loadgen(path)
        if r:
            rows.append(r)
    if not rows:
        return None
    return {k: (statistics.median([r[k] for r in rows]) if rows[0][k] is not None else None)
            for k in rows[0]}

def cell(v, width=8):
    return f"{v:{width}.1f}" if v is not None else f"{'-':>{width}}"

titles = {"closed-1": "closed loop, 1 connection", "closed-16": "closed loop, 16 connections",
          "open-1": f"open loop at {rate}/s, 1 connection",
          "open-16": f"open loop at {rate}/s, 16 connections"}
for workload in ["closed-1", "closed-16", "open-1", "open-16"]:
    print(f"\n{titles[workload]}")
    print(f"{'generator':10} {'ops/s':>9} {'mean':>8} {'p50':>8} {'p90':>8} {'p99':>8}"
          f" {'gen.delay':>9}   {'p50/dflt':>8} {'p90/dflt':>8}")
    base = medians(workload, "defaults")
    for variant in variants:
        m = medians(workload, variant)
        if m is None:
            print(f"{variant:10} (no result)")
            continue
        ratio = lambda k: (f"{m[k] / base[k]:8.2f}" if base and m[k] and base[k] else f"{'-':>8}")
        print(f"{variant:10} {m['ops']:9.0f} {cell(m['mean'])} {cell(m['p50'])} {cell(m['p90'])}"
              f" {cell(m['p99'])} {cell(m['delay'], 9)}   {ratio('p50')} {ratio('p90')}")
PY
} 2>&1 | results_summary
printf '\nper-run results in %s\n' "$out"
