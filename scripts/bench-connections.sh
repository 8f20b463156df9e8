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
# is an error-queue message the generator must read, a syscall per request that made the
# generator, not memspin, the limit at 10,000 connections (measured on a shared 2-vCPU machine:
# ratio 0.61 with timestamps, 0.73 without). So the latency columns are the generator's own
# clock (its delay in reading a reply included), for comparing the two counts only.
# Between runs the script waits until the previous run's connections are closed on both sides,
# so that memspin (limited to MANY + 64 connections) does not refuse the next run's.
#
# Usage: scripts/bench-connections.sh [ROUNDS (default 5)] [SECONDS (default 5)] [FEW (32)] [MANY (1000)]
#   NET=tap|kernel (default tap), WARMUP=SECONDS (default 3), IDLE=spin|park|adaptive (memspin's
#   --idle, default spin), SERVER_ARGS="..." (more memspin options, e.g. --rto-min off),
#   LOADGEN_ARGS="..." (more memspin-loadgen options for both counts)
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
need_packages iproute2 python3
need_root_for_namespaces

build_release

out=results/connections-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
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
    ip netns exec "$ns" "$LOADGEN_BIN" -s "$addr" -t 1 --cpus "$client_cpu" -c "$conns" --pipeline 1 \
      -d "$seconds" --warmup "$warmup" --keys 10000 --value-size 32 --get-ratio 0.9 --prefill -q \
      "${loadgen_args[@]}" --json "$out/c$conns-$round.json" >/dev/null
    wait_closed
  done
done
stop_server

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
print("per round (same round, adjacent runs): " + " ".join(f"{ops(many, r) / ops(few, r):.2f}" for r in rounds))
print(f"\nthroughput ratio {many}/{few} connections: {med(many,'ops')/med(few,'ops'):.2f}")
PY
printf '\nper-run JSON in %s\n' "$out"
