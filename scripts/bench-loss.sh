#!/usr/bin/env bash
# Tail latency under packet loss (docs/loss-recovery.md): memcached -t 1 and memspin over TAP
# and AF_XDP, one server at a time, each measured by memspin-loadgen in open loop (RATE
# requests/s over CONNS connections, one request in flight each, SECONDS) while nftables
# drops LOSS in 10,000 frames in each direction. Every server runs with the kernel's default
# routes and with `rto_min 1ms` on the routes that exist (the client's, and memcached's end),
# in alternating order, RUNS times; then, without loss, the same open loop and a closed loop at
# full load (PIPELINE requests in flight per connection), to count spurious retransmissions.
# Prints medians over the runs of the corrected latency (p50, p90, p99, p99.9, p99.99, max),
# of memspin's recovery counters (its exit statistics) and of the kernel's retransmission
# counters on both ends (nstat), the frames the loss rules dropped each way, and the rows of
# docs/benchmarks.md's table, in markdown. Each run also leaves the client's `ss -tin` halfway
# through (its rto, ato and retransmissions per connection) in TAG.ss.txt.
#
# What is measured: the servers, not the machine's housekeeping. On a small virtual machine the
# tail without any loss is set by other tasks of the guest that take a vCPU for milliseconds
# at a time (agents' threads, the kernel's DAMON thread), during which whatever is pinned to
# that vCPU, server or generator, waits: that sets every server's p99.99, sleeping or
# spinning, and hides a loss tail of a few milliseconds (RT_PRIO=0 shows it). So the open-loop
# runs put the server and the generator in the real-time class (SCHED_FIFO, priority RT_PRIO), where such tasks cannot preempt them, and
# both sleep when idle (memspin --idle adaptive, memspin-loadgen --idle sleep; memcached sleeps
# in epoll): a real-time thread that spins would be throttled by the kernel (50 ms in every
# second, sched_rt_runtime_us). What remains is kernel work nothing preempts (a non-preemptible
# kernel). The full-load runs, which count spurious retransmissions rather than time them, keep the normal class and
# the generator's busy-polling (a saturated real-time thread would be throttled). RT_PRIO=0
# runs everything in the normal class.
#
# Servers (SERVERS, default all four):
#   memcached        memcached -t 1 in the middle namespace, on the bridge
#   memspin-tap      memspin --net tap --rto-min RTO_MIN (default 1ms, memspin's default)
#   memspin-tap-off  memspin --net tap --rto-min off: smoltcp's own retransmissions alone
#   memspin-xdp      memspin --net xdp (native, copy mode on veth) --rto-min RTO_MIN
#
# Topology (namespaces made here, removed on exit):
#
#   client ns                 middle ns                                   xdp ns
#   loadgen  lc ──veth── lm ─ br0 10.79.0.3 (memcached)
#   10.79.0.1/24 [drop in]    [drop in] ├─ ms0 (TAP) ─ memspin --net tap 10.79.0.2
#                                       └─ xm ──veth── xs ─ memspin --net xdp 10.79.0.4
#
# Frames are dropped at the ingress of lc (server to client) and of lm (client to servers):
# after the sending device took them, so the sender's TCP sees a loss on the wire. (A drop at
# the sender's own egress is reported back to its TCP, which then waits for its zero-window
# probe timer, at least 200 ms: not what a lost frame on a wire does.)
#
# Usage: scripts/bench-loss.sh [RUNS (default 3)] [SECONDS per run (default 20)]
#   RATE=20000 CONNS=64 LOSS=2 (in 10,000 frames, each direction) RTO_MIN=1ms
#   LOSS_DIR=both|down|up (drop only replies, server to client, or only requests)
#   IDLE=adaptive (memspin's --idle) LOADGEN_IDLE=sleep (memspin-loadgen's --idle)
#   RT_PRIO=10 (SCHED_FIFO priority of the open-loop runs; 0: normal class) PIPELINE=4
#   (full-load runs) SERVERS="..." ROUTES="default rto1ms" (the route settings to run with
#   loss; none: no runs with loss) NO_LOSS=1 (0: skip the runs without loss) MEMSPIN=/path (a memspin binary to
#   measure instead of this tree's, to compare builds)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

runs=${1:-3}
seconds=${2:-20}
rate=${RATE:-20000}
conns=${CONNS:-64}
loss=${LOSS:-2}
loss_dir=${LOSS_DIR:-both}
idle=${IDLE:-adaptive}
loadgen_idle=${LOADGEN_IDLE:-sleep}
rt_prio=${RT_PRIO:-10}
rto_min=${RTO_MIN:-1ms}
pipeline=${PIPELINE:-4}
read -r -a servers <<<"${SERVERS:-memcached memspin-tap memspin-tap-off memspin-xdp}"
need_packages iproute2 memcached nftables ethtool python3 util-linux
need_root_for_namespaces

build_release
MEMSPIN_BIN=${MEMSPIN:-$MEMSPIN_BIN}
read -r -a route_modes <<<"${ROUTES:-default rto1ms}"
[ "${route_modes[*]}" = none ] && route_modes=()

results_init bench-loss "$@"
client=memspin-loss-c-$$
middle=memspin-loss-m-$$
xdp=memspin-loss-x-$$
for ns in "$client" "$middle" "$xdp"; do
  ns_create "$ns"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
done
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))

step "topology: client -- bridge (memcached, TAP) -- AF_XDP veth"
ip -n "$client" link add lc type veth peer name lm netns "$middle"
ip -n "$client" addr add 10.79.0.1/24 dev lc
ip -n "$client" link set lc up
# Full checksums from the client: memspin verifies every checksum, and AF_XDP gets the frame
# as the client's kernel left it.
ip netns exec "$client" ethtool -K lc tx off >/dev/null
ip -n "$middle" link add br0 type bridge
ip -n "$middle" link set lm master br0
ip -n "$middle" link add xm type veth peer name xs netns "$xdp"
ip -n "$middle" link set xm master br0
ip -n "$middle" addr add 10.79.0.3/24 dev br0
for dev in lm xm br0; do ip -n "$middle" link set "$dev" up; done
ip -n "$xdp" link set xs up

# loss on|off: LOSS in 10,000 frames dropped at the ingress of lc (replies, LOSS_DIR down) and
# of lm (requests, LOSS_DIR up), or nothing.
loss() {
  local ns dev dir
  for ns_dev in "$client:lc:down" "$middle:lm:up"; do
    IFS=: read -r ns dev dir <<<"$ns_dev"
    ip netns exec "$ns" nft delete table netdev memspin_loss 2>/dev/null || true
    [ "$1" = on ] || continue
    [ "$loss_dir" = both ] || [ "$loss_dir" = "$dir" ] || continue
    ip netns exec "$ns" nft -f - <<EOF
table netdev memspin_loss {
  chain in {
    type filter hook ingress device "$dev" priority 0;
    numgen random mod 10000 < $loss counter drop
  }
}
EOF
  done
}

# drops: frames the loss rules dropped so far, "down UP" (replies, requests).
drops() {
  local ns n counts=()
  for ns in "$client" "$middle"; do
    n=$(ip netns exec "$ns" nft list table netdev memspin_loss 2>/dev/null |
      sed -n 's/.*counter packets \([0-9]*\).*/\1/p' || true)
    counts+=("${n:-0}")
  done
  echo "${counts[*]}"
}

# routes MODE: the connected routes of the client and of memcached's end, with `rto_min 1ms`
# (MODE rto1ms) or as the kernel made them (default). memspin has no kernel route of its own.
routes() {
  local metric=()
  [ "$1" = rto1ms ] && metric=(rto_min 1ms)
  ip -n "$client" route replace 10.79.0.0/24 dev lc proto kernel scope link src 10.79.0.1 "${metric[@]}"
  ip -n "$middle" route replace 10.79.0.0/24 dev br0 proto kernel scope link src 10.79.0.3 "${metric[@]}"
}

# counters NS FILE: the kernel's TCP retransmission counters of NS, as JSON.
counters() {
  ip netns exec "$1" nstat -asz -j TcpRetransSegs TcpExtTCPLossProbes TcpExtTCPLossProbeRecovery \
    TcpExtTCPDSACKRecv TcpExtTCPSpuriousRTOs TcpExtTCPTimeouts TcpOutSegs TcpInSegs >"$2"
}

# run_one SERVER MODE CLASS TAG LOADGEN-ARGS...: starts SERVER, runs the loadgen against it
# with the counters read before and after, stops it (memspin's exit statistics land in
# TAG.log). CLASS rt puts the server's threads and the loadgen in SCHED_FIFO at RT_PRIO.
run_one() {
  local name=$1 mode=$2 class=$3 tag=$4 addr; shift 4
  local rt=() waiting=spin
  if [ "$class" = rt ]; then
    waiting=$loadgen_idle
    [ "$rt_prio" != 0 ] && rt=(chrt -f "$rt_prio")
  fi
  routes "$mode"
  case $name in
    memcached)
      start_memcached "$middle" "$out/$tag.log" 11211 1 "$server_cpu" 10.79.0.3
      addr=10.79.0.3:11211 ;;
    memspin-tap|memspin-tap-off)
      local floor=$rto_min
      [ "$name" = memspin-tap-off ] && floor=off
      start_server "$middle" "$out/$tag.log" --net tap --iface ms0 --ip 10.79.0.2/24 \
        --host-ip none --cpus "$server_cpu" --idle "$idle" -m 256 --rto-min "$floor"
      ip -n "$middle" link set ms0 master br0
      addr=10.79.0.2:11211 ;;
    memspin-xdp)
      start_server "$xdp" "$out/$tag.log" --net xdp --iface xs --ip 10.79.0.4/24 \
        --cpus "$server_cpu" --idle "$idle" -m 256 --rto-min "$rto_min"
      addr=10.79.0.4:11211 ;;
    *) die "unknown server $name" ;;
  esac
  # Every thread of the server (memspin's workers, memcached's worker and helpers).
  [ ${#rt[@]} -gt 0 ] && chrt -f -a -p "$rt_prio" "$SERVER_PID" >/dev/null
  counters "$client" "$out/$tag.client-before.json"
  counters "$middle" "$out/$tag.server-before.json"
  drops >"$out/$tag.drops-before.txt"
  # The client's view of its connections (rto, ato, retransmissions) halfway through.
  ( sleep $(( seconds / 2 + 2 )); ip netns exec "$client" ss -tin >"$out/$tag.ss.txt" 2>&1 ) &
  local ss_pid=$!
  ip netns exec "$client" "${rt[@]}" "$LOADGEN_BIN" -s "$addr" -t 1 --cpus "$client_cpu" \
    -c "$conns" --idle "$waiting" --warmup 2 --keys 10000 --key-size 16 --value-size 32 \
    --get-ratio 0.9 --prefill \
    --timeout-ms 5000 -q --json "$out/$tag.json" "$@" >"$out/$tag.loadgen.txt" 2>&1 || true
  counters "$client" "$out/$tag.client-after.json"
  counters "$middle" "$out/$tag.server-after.json"
  drops >"$out/$tag.drops-after.txt"
  wait "$ss_pid" 2>/dev/null || true
  stop_server || printf 'warning: %s exited with an error (see %s)\n' "$name" "$out/$tag.log" >&2
}

count=${#servers[@]}
loss on
for run in $(seq 1 "$runs"); do
  for mode in "${route_modes[@]}"; do
    step "loss $loss/10000 ($loss_dir), run $run of $runs, routes: $mode"
    # Rotate the order every run so drift in the machine's load favours no server.
    for k in $(seq 0 $(( count - 1 ))); do
      name=${servers[$(( (k + run) % count ))]}
      run_one "$name" "$mode" rt "loss-$name-$mode-$run" -d "$seconds" --rate "$rate"
    done
  done
done
loss off
for run in $(seq 1 "$runs"); do
  [ "${NO_LOSS:-1}" = 0 ] && break
  step "no loss, run $run of $runs: open loop $rate/s, and closed loop x $pipeline in flight"
  for k in $(seq 0 $(( count - 1 ))); do
    name=${servers[$(( (k + run) % count ))]}
    run_one "$name" rto1ms rt "open-$name-$run" -d "$seconds" --rate "$rate"
    run_one "$name" rto1ms normal "full-$name-$run" -d "$seconds" --pipeline "$pipeline"
  done
done

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $runs runs (corrected latency, µs)"
/usr/bin/python3 - "$out" "$runs" "$rate" "$conns" "$loss" "$pipeline" "$loss_dir" "${servers[@]}" <<'PY'
import json, os, re, statistics, sys
out, runs, rate, conns, loss, pipeline, loss_dir = sys.argv[1:8]
servers = sys.argv[8:]
runs = int(runs)
kernel = ["TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPDSACKRecv", "TcpExtTCPTimeouts"]
memspin = ["probes", "probes_spurious", "probes_stretched", "sack_resends",
           "peer_retransmit_resends", "recovered", "spurious", "smoltcp", "probes_recovered"]
cols = ["p50", "p90", "p99", "p99_9", "p99_99", "max"]

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def load(tag):
    try:
        return json.load(open(os.path.join(out, tag + ".json")))
    except (OSError, ValueError):
        return None

def nstat(tag, side):
    def read(when):
        d = json.load(open(os.path.join(out, f"{tag}.{side}-{when}.json")))
        return d.get("kernel", d)
    try:
        a, b = read("before"), read("after")
    except (OSError, ValueError):
        return {}
    return {k: b.get(k, 0) - a.get(k, 0) for k in kernel}

def drops(tag):
    try:
        a = [int(x) for x in open(os.path.join(out, tag + ".drops-before.txt")).read().split()]
        b = [int(x) for x in open(os.path.join(out, tag + ".drops-after.txt")).read().split()]
    except (OSError, ValueError):
        return None
    return [y - x for x, y in zip(a, b)] if len(a) == len(b) == 2 else None

def exit_stats(tag):
    found = {}
    try:
        for line in open(os.path.join(out, tag + ".log")):
            m = re.match(r"STAT memspin_(?:loss_)?(\w+) (\d+)$", line.strip())
            if m:
                found[m.group(1).replace("_retransmits", "")] = int(m.group(2))
    except OSError:
        pass
    return found

def fmt(v, width):
    if v is None:
        return f"{'-':>{width}}"
    return f"{v:>{width},.0f}" if v >= 100 else f"{v:>{width}.1f}"

def ms(v):
    if v is None:
        return "-"
    return f"{v:,.0f} µs" if v < 1000 else f"{v / 1000:,.1f} ms"

readme = []
def table(title, prefix, mode):
    print(f"\n{title}")
    print(f"{'server':16}" + "".join(f"{c.replace('_', '.'):>9}" for c in cols)
          + f"{'ops/s':>9}{'errors':>8}{'timeouts':>9}")
    for name in servers:
        rows = [load(f"{prefix}-{name}{mode}-{r}") for r in range(1, runs + 1)]
        rows = [r for r in rows if r]
        if not rows:
            print(f"{name:16} (no result)")
            continue
        lat = [(r.get("latency_us") or {}).get("corrected") or (r.get("latency_us") or {}).get("service") or {} for r in rows]
        lat = [l.get("all", {}) for l in lat]
        vals = [med([l.get(c) for l in lat]) for c in cols]
        ops = med([r.get("ops_per_sec") for r in rows])
        errs = med([(r.get("errors") or {}).get("total", 0) for r in rows])
        tmo = med([(r.get("errors") or {}).get("timeout", 0) for r in rows])
        print(f"{name:16}" + "".join(fmt(v, 9) for v in vals) + fmt(ops, 9) + fmt(errs, 8) + fmt(tmo, 9))
        if prefix == "loss":
            readme.append((name, mode.strip("-"), vals))

def counters(title, prefix, mode):
    print(f"\n{title}: median per run")
    print(f"{'':28}" + "".join(f"{k.replace('TcpExtTCP', '').replace('Tcp', ''):>14}" for k in kernel))
    for name in servers:
        tags = [f"{prefix}-{name}{mode}-{r}" for r in range(1, runs + 1)]
        for side in ["client", "server"] if name == "memcached" else ["client"]:
            d = [nstat(t, side) for t in tags]
            vals = [med([x.get(k) for x in d if x]) for k in kernel]
            print(f"{name + ' kernel ' + side:28}" + "".join(fmt(v, 14) for v in vals))
        d = [drops(t) for t in tags]
        d = [x for x in d if x]
        if d and any(sum(x) for x in d):
            print(f"{'':28}frames dropped: replies {fmt(med([x[0] for x in d]), 1).strip()}, "
                  f"requests {fmt(med([x[1] for x in d]), 1).strip()}")
        if name != "memcached":
            s = [exit_stats(t) for t in tags]
            vals = {k: med([x.get(k) for x in s if x]) for k in memspin}
            print(f"{name + ' recovery':28}" + ", ".join(
                f"{k} {fmt(v, 1).strip()}" for k, v in vals.items() if v is not None))
            # Spurious probes per 1,000 requests: each costs two frames (the copy and the
            # client's ACK of it).
            per = [x.get("probes_spurious", x.get("spurious")) / r["ops"] * 1000
                   for x, r in zip(s, [load(t) for t in tags])
                   if x and r and r.get("ops") and x.get("probes_spurious", x.get("spurious")) is not None]
            if per:
                print(f"{'':28}spurious probes per 1,000 requests: {med(per):.1f}")
            # How long a lost segment waited for the probe that repaired it, on average.
            wait = [x["probes_recovered_us"] / x["probes_recovered"] for x in s
                    if x and x.get("probes_recovered")]
            if wait:
                print(f"{'':28}mean wait from a lost segment's transmission to its repairing "
                      f"probe: {med(wait) / 1000:.2f} ms")

for mode in ["default", "rto1ms"]:
    table(f"loss {loss}/10000 ({loss_dir}), open loop {rate}/s, {conns} connections x 1, routes: {mode}",
          "loss", f"-{mode}")
    counters(f"counters, routes {mode}", "loss", f"-{mode}")
table(f"no loss, open loop {rate}/s, {conns} connections x 1", "open", "")
counters("counters, no loss, open loop", "open", "")
table(f"no loss, closed loop (full load), {conns} connections x {pipeline}", "full", "")
counters("counters, no loss, full load", "full", "")

print(f"\nmarkdown rows (medians of {runs} runs):")
names = {"memcached": "memcached -t 1", "memspin-tap": "memspin over TAP",
         "memspin-tap-off": "memspin over TAP, `--rto-min off`", "memspin-xdp": "memspin over AF_XDP"}
for name, mode, vals in readme:
    routes = "`rto_min 1ms`" if mode == "rto1ms" else "default"
    print(f"| {names.get(name, name)} | {routes} | " + " | ".join(ms(v) for v in vals) + " |")
PY
} 2>&1 | results_summary
printf '\nper-run JSON, logs and counters in %s\n' "$out"
