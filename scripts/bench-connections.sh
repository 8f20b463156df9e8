#!/usr/bin/env bash
# Does the cost per request grow with the number of connections? Closed-loop throughput of one
# memspin worker (TAP, CPU 0) with FEW and with MANY connections, one request in flight each,
# driven by one memspin-loadgen thread (last CPU) with the same settings for both counts;
# alternating order, medians over the rounds, and the MANY/FEW throughput ratio.
#
# What lands where: memspin and, inside its writes to the TAP device, the kernel's receive path
# of the loadgen's TCP sockets (demux, ACK processing, wake-ups) run on CPU 0; the loadgen, its
# sends and the kernel's transmit path run on the last CPU. So per-connection kernel work on the
# client's receive side counts against memspin's core, as it would not on two machines.
#
# Each run starts with fresh connections. Linux ACKs the first replies on a new connection at
# once (quick-ACK mode, up to 16 segments) instead of riding the ACK on the next request: an
# extra frame for memspin per reply. At 10,000 connections that start-up phase lasts about
# 1.5 s, so the warm-up (WARMUP seconds, default 3) keeps it out of the window for both counts.
# The generator reads no kernel timestamps (--timestamps none): a transmit timestamp per request
# is an error-queue message the generator must read, a syscall per request that makes the
# generator, not memspin, the limit at 10,000 connections (LOADGEN_ARGS="--timestamps software"
# shows it). So the latency columns are the generator's own
# clock (its delay in reading a reply included), for comparing the two counts only.
# memspin spins (--idle spin) at both counts, though its default over TAP is adaptive: with 32
# connections the generator, not memspin, is the limit, and a memspin that sleeps between the
# generator's batches delays each batch by its wake-up, which lowers the 32-connection figure (and
# raises the ratio; IDLE=adaptive shows it) for a reason that has nothing to do with the cost
# per connection. Spinning costs the generator some of its host CPU
# instead, which makes the 32-connection figure, and so the ratio, vary from round to round.
# Between runs the script waits until the previous run's connections are closed on both sides,
# so that memspin (limited to MANY + 64 connections) does not refuse the next run's.
#
# Usage: scripts/bench-connections.sh [ROUNDS (default 5)] [SECONDS (default 5)] [FEW (32)] [MANY (1000)]
#   NET=tap|kernel (default tap), WARMUP=SECONDS (default 3), IDLE=spin|park|adaptive (memspin's
#   --idle, default spin), SERVER_ARGS="..." (more memspin options, e.g. --rto-min off),
#   LOADGEN_ARGS="..." (more memspin-loadgen options for both counts), MEMSPIN=/path (another
#   memspin binary, e.g. another build, run with the same settings), BUILD=0 (target/release's
#   binaries as they are, no cargo build), PROFILE=DIR (during
#   round 1, `perf record -e cpu-clock --call-graph dwarf` of the worker thread for each count,
#   DIR/cFEW.data and DIR/cMANY.data, and where its samples went; that round's figures then
#   include perf's cost)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-5}
seconds=${2:-5}
few=${3:-32}
many=${4:-1000}
net=${NET:-tap}
warmup=${WARMUP:-3}
idle=${IDLE:-spin}
loadgen_args=(--timestamps none ${LOADGEN_ARGS:-})
server_args=(${SERVER_ARGS:-})
profile=${PROFILE:-}
need_packages iproute2 python3
need_root_for_namespaces

build_release
MEMSPIN_BIN=${MEMSPIN:-$MEMSPIN_BIN}

results_init bench-connections "$@"
ns=memspin-conns-$$
ns_create "$ns"
# Every run leaves its client ports in TIME-WAIT for a minute, and smoltcp sends no TCP
# timestamps, so tcp_tw_reuse cannot help: widen the namespace's own port range instead.
ip netns exec "$ns" sysctl -qw net.ipv4.ip_local_port_range="1024 65535"
client_cpu=$(( $(nproc) - 1 ))
limit=$(( many + 64 ))
case $net in
  tap) args=(--net tap --iface ms0 --ip 10.77.0.2/24 --host-ip 10.77.0.1/24); addr=10.77.0.2:11211 ;;
  kernel) args=(--net kernel -l 127.0.0.1 -p 11211); addr=127.0.0.1:11211 ;;
  *) die "NET must be tap or kernel" ;;
esac
start_server "$ns" "$out/memspin.log" "${args[@]}" --cpus 0 --idle "$idle" -c "$limit" -m 256 \
  "${server_args[@]}"

# wait_closed: until no client socket of the last run is open or closing (30 s at most), then a
# pause for memspin to free the slots of the connections it saw close.
wait_closed() {
  local i
  for i in $(seq 1 300); do
    [ -z "$(ip netns exec "$ns" ss -Htan state established state fin-wait-1 state fin-wait-2 \
      state closing state last-ack state close-wait)" ] && break
    sleep 0.1
  done
  sleep 5
}

for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  order=("$few" "$many")
  [ $((round % 2)) -eq 0 ] && order=("$many" "$few")
  for conns in "${order[@]}"; do
    stats_to "$ns" "$addr" "$out/c$conns-$round.stats0"
    ip netns exec "$ns" "$LOADGEN_BIN" -s "$addr" -t 1 --cpus "$client_cpu" -c "$conns" --pipeline 1 \
      -d "$seconds" --warmup "$warmup" --keys 10000 --value-size 32 --get-ratio 0.9 --prefill -q \
      "${loadgen_args[@]}" --json "$out/c$conns-$round.json" >/dev/null &
    gen=$!
    if [ -n "$profile" ] && [ "$round" = 1 ]; then
      # Into the measured window, then perf for all but its last second.
      sleep $(( warmup + 1 ))
      profile_worker "$SERVER_PID" "$client_cpu" "$profile/c$conns" 999 $(( seconds > 3 ? seconds - 2 : 1 ))
    elif [ "$seconds" -ge 3 ]; then
      # memspin's counters over most of the measured window (its first and last half second
      # left out): what a request costs once the connections have started.
      sleep "$warmup.5"
      stats_to "$ns" "$addr" "$out/c$conns-$round.window0"
      sleep $(( seconds - 1 ))
      stats_to "$ns" "$addr" "$out/c$conns-$round.window1"
    fi
    wait "$gen" || die "memspin-loadgen failed with $conns connections"
    stats_to "$ns" "$addr" "$out/c$conns-$round.stats1"
    wait_closed
  done
done
stop_server

# The summary: printed, and written into $out/results.md under the run's header.
{
python3 - "$out" "$few" "$many" <<'PY'
import json, statistics, sys, glob, os
out, few, many = sys.argv[1], sys.argv[2], sys.argv[3]
def med(conns, key):
    vals = []
    for p in glob.glob(os.path.join(out, f"c{conns}-*.json")):
        d = json.load(open(p))
        vals.append(d["ops_per_sec"] if key == "ops" else d["latency_us"]["service"]["all"][key])
    return statistics.median(vals)
print(f"\n{'connections':>11} {'ops/s':>10} {'p50':>8} {'p90':>8} {'p99':>8}  (µs, service time, generator's clock)")
for c in (few, many):
    print(f"{c:>11} {med(c,'ops'):10.0f} {med(c,'p50'):8.1f} {med(c,'p90'):8.1f} {med(c,'p99'):8.1f}")
ops = lambda c, r: json.load(open(os.path.join(out, f"c{c}-{r}.json")))["ops_per_sec"]
rounds = sorted(int(p.rsplit("-", 1)[1][:-5]) for p in glob.glob(os.path.join(out, f"c{few}-*.json")))
ratios = [ops(many, r) / ops(few, r) for r in rounds]
print("per round (same round, adjacent runs): " + " ".join(f"{x:.2f}" for x in ratios)
      + f"  (lowest {min(ratios):.2f})")
for c in (few, many):
    print(f"  k ops/s per round, {c:>5} connections: " + " ".join(f"{ops(c, r) / 1000:5.0f}" for r in rounds))
def stats(path):
    try:
        return {k: int(v) for k, v in (l.split()[:2] for l in open(path) if len(l.split()) >= 2) if v.isdigit()}
    except OSError:
        return {}
KEYS = ("memspin_tap_rx_frames", "memspin_tap_tx_frames", "memspin_tap_rx_empty_reads",
        "memspin_polls", "memspin_loss_probes", "memspin_loss_probes_spurious",
        "memspin_loss_probes_withheld")
def per_request(conns, suffix):
    # Per get or set between the two snapshots; medians over the rounds.
    vals = {k: [] for k in KEYS}
    for r in rounds:
        a, b = (stats(os.path.join(out, f"c{conns}-{r}.{suffix}{i}")) for i in (0, 1))
        reqs = sum(b.get(k, 0) - a.get(k, 0) for k in ("cmd_get", "cmd_set"))
        for k in KEYS:
            if reqs > 0 and k in a and k in b:
                vals[k].append((b[k] - a[k]) / reqs)
    return {k: statistics.median(v) for k, v in vals.items() if v}
for suffix, what in (("stats", "each whole run, prefill and warm-up included"),
                    ("window", "the measured window but its first and last half second")):
    figures = {c: per_request(c, suffix) for c in (few, many)}
    if any(figures.values()):
        print(f"\nper request (memspin's stats over {what}): "
              + ", ".join(k.removeprefix("memspin_").removeprefix("tap_").removeprefix("loss_") for k in KEYS))
        for c in (few, many):
            print(f"{c:>11} " + " ".join(f"{figures[c].get(k, float('nan')):8.3f}" for k in KEYS))
print(f"\nthroughput ratio {many}/{few} connections: {med(many,'ops')/med(few,'ops'):.2f}")
PY
if [ -n "$profile" ]; then
  for conns in "$few" "$many"; do
    [ -s "$profile/c$conns.data" ] || continue
    step "where the worker's samples went with $conns connections (round 1; perf script, inlined frames)"
    perf script -i "$profile/c$conns.data" -F comm,tid,ip,sym,dso 2>/dev/null >"$profile/c$conns.txt"
    python3 scripts/profile-groups.py "$profile/c$conns.txt"
  done
fi
} 2>&1 | results_summary
printf '\nper-run JSON in %s\n' "$out"
