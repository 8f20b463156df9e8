#!/usr/bin/env bash
# The bypass client (memspin-loadgen --net xdp) against the kernel client (--net kernel), both
# measuring the same memspin on AF_XDP, one server at a time, medians over ROUNDS rounds whose
# order alternates (docs/af_xdp.md, "the load generator on AF_XDP"):
#
#   cost       requests per client CPU-second at one open-loop rate (COST_RATE over 16
#              connections, both clients with --idle sleep --spin-us 0 so CPU time is work,
#              not spinning: neither while replies are due nor before an arrival);
#              target: bypass >= 2x kernel
#   ceiling    memspin -t 1's pipelined throughput (32 connections x 16 in flight) as each
#              client sees it, and memcached -t 1 through the kernel client beside it
#   resp       RESP pipelined (32 connections x 16 in flight, --protocol resp): memspin -t 1's
#              --resp-port against redis-server (persistence off, one I/O thread) on the
#              kernel's address of the same interface (its transmit checksums in software for
#              this run, as the bypass client verifies them), each as both clients see it; the ratio
#              memspin / redis-server per client (the kernel client's own cost caps what it
#              can show of memspin)
#   single     one request in flight (1 connection, closed loop, --idle spin): service
#              p50/p90/p99 of each client; target: bypass p50 <= 0.7x kernel's
#   loss       LOSS in 10,000 TCP frames dropped each way by a router namespace in the middle
#              (nftables netdev ingress; XDP on the ends takes frames before netfilter), open
#              loop LOSS_RATE/s over LOSS_CONNS connections for LOSS_SECONDS, --verify:
#              memspin (--rto-min 1ms) with the bypass client vs memcached -t 1 with the kernel
#              client, the kernel's routes with rto_min 1ms on both ends; corrected p99.99 and
#              max (target p99.99 <= 2 ms, max <= 5 ms), values lost, and the recovery counters
#              of both sides (the generator's JSON, memspin's exit report, nstat for kernels);
#              with FLOOR=1 (the default) each round also runs both pairs with nothing dropped,
#              the same topology and load: the tail the machine gives without loss. As in
#              scripts/bench-loss.sh, the servers and the generator run in the real-time class
#              (SCHED_FIFO at RT_PRIO) and sleep when idle (memspin --idle adaptive, the
#              generator --idle sleep; memcached sleeps in epoll), so that the guest's own
#              housekeeping (the kernel's DAMON thread takes a vCPU for about 1.5 ms a few times
#              a second) cannot preempt them; RT_PRIO=0 keeps the normal class and spins
#
# Topologies (namespaces made here, removed on exit, also on failure):
#
#   direct: gen  xg0 10.78.0.3 (kernel client; the bypass client is 10.78.0.2) ═veth═ xs0 srv
#                memspin --net xdp 10.78.0.200 on xs0; memcached on the kernel's 10.78.0.201
#   routed: gen  xg0 10.78.0.3 ═veth═ rg0 10.78.0.1 ─ router ─ 10.77.0.1 rs0 ═veth═ xs0 srv
#                memspin --net xdp 10.77.0.2 on xs0; memcached on the kernel's 10.77.0.3
#
# The server is pinned to CPU 0 and the generator to the last CPU. At the end it runs
# scripts/bench-steer.sh if that exists. Results: results/bench-bypass-client-<time>/
# (results.md, every run's JSON and server log, machine.json with commit and command).
#
# Usage: scripts/bench-bypass-client.sh [ROUNDS (default 5)] [SECONDS per run (default 5)]
#   COST_RATE=20000 LOSS=2 LOSS_RATE=20000 LOSS_CONNS=64 LOSS_SECONDS=20 FLOOR=1 RT_PRIO=10
#   PARTS="cost ceiling resp single loss" (which parts to run) STEER=1 (0: skip bench-steer.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-5}
seconds=${2:-5}
cost_rate=${COST_RATE:-20000}
loss=${LOSS:-2}
loss_rate=${LOSS_RATE:-20000}
loss_conns=${LOSS_CONNS:-64}
loss_seconds=${LOSS_SECONDS:-20}
floor=${FLOOR:-1}
rt_prio=${RT_PRIO:-10}
parts=${PARTS:-cost ceiling resp single loss}
steer=${STEER:-1}
need_packages iproute2 ethtool python3 memcached nftables redis-server redis-tools
need_root_for_namespaces
build_release
results_init bench-bypass-client "$@"

server_cpu=0
client_cpu=$(( $(nproc) - 1 ))
gen=memspin-bbc-g-$$
srv=memspin-bbc-s-$$
rt=memspin-bbc-r-$$
has() { [[ " $parts " == *" $1 "* ]]; }

# veth NS_A A NS_B B: a veth pair with one queue each way, both ends up.
veth() {
  ip -n "$1" link add "$2" type veth peer name "$4" netns "$3"
  ip -n "$1" link set "$2" up
  ip -n "$3" link set "$4" up
}

# client_args KIND: the generator's packet-path arguments for KIND (xdp or kernel).
client_args() {
  case $1 in
    xdp) echo "--net xdp --iface xg0 --ip 10.78.0.2/24 ${gateway:+--gateway $gateway}" ;;
    kernel) echo "--net kernel" ;;
  esac
}

# loadgen TAG KIND SERVER ARGS...: one run of the generator in $gen, pinned, with 32-byte
# values prefilled, JSON into TAG.json.
# The loss part runs the generator as `${run_as[@]} memspin-loadgen` (the real-time class).
run_as=()
loadgen() {
  local tag=$1 kind=$2 server=$3; shift 3
  # shellcheck disable=SC2046
  ip netns exec "$gen" "${run_as[@]}" timeout --foreground 300 "$LOADGEN_BIN" -s "$server" \
    $(client_args "$kind") \
    --cpus "$client_cpu" -t 1 --value-size 32 --prefill -q \
    --json "$out/$tag.json" "$@" >/dev/null 2>"$out/$tag.err" \
    || { cat "$out/$tag.err" >&2; die "memspin-loadgen $tag failed"; }
}

# start_memspin TAG ADDR/PREFIX [GATEWAY [IDLE]]: memspin -t 1 on AF_XDP on xs0 (IDLE: spin).
start_memspin() {
  start_server "$srv" "$out/$1.log" --net xdp --iface xs0 --ip "$2" ${3:+--gateway $3} \
    --cpus "$server_cpu" --idle "${4:-spin}" -m 256 --rto-min 1ms --resp-port 6379
}

# in_rt_class: every thread of the server just started (SERVER_PID) into SCHED_FIFO at
# RT_PRIO, unless RT_PRIO is 0.
in_rt_class() {
  [ "$rt_prio" = 0 ] || chrt -f -a -p "$rt_prio" "$SERVER_PID" >/dev/null
}

if has cost || has ceiling || has resp || has single; then
  step "direct topology: $gen xg0 <-> xs0 $srv"
  ns_create "$gen"
  ns_create "$srv"
  veth "$gen" xg0 "$srv" xs0
  ip -n "$gen" addr add 10.78.0.3/24 dev xg0
  # Full checksums from the kernel client (memspin verifies them; AF_XDP carries no offload
  # state), and its flows kept on their queue.
  ip netns exec "$gen" ethtool -K xg0 tx off >/dev/null
  ip netns exec "$gen" sysctl -qw net.core.txrehash=0
  ip -n "$srv" addr add 10.78.0.201/24 dev xs0
  gateway=
  clients=(xdp kernel)
  for round in $(seq 1 "$rounds"); do
    step "round $round of $rounds (direct)"
    first=$(( round % 2 ))
    for s in 0 1; do
      if [ $(( (s + round) % 2 )) = 0 ]; then
        start_memspin "memspin-$round" 10.78.0.200/24
        for c in 0 1; do
          kind=${clients[$(( (c + first) % 2 ))]}
          if has cost; then
            loadgen "cost-$kind-$round" "$kind" 10.78.0.200:11211 -c 16 --rate "$cost_rate" \
              -d "$seconds" --warmup 1 --keys 10000 --idle sleep --spin-us 0
          fi
          if has ceiling; then
            loadgen "ceiling-$kind-$round" "$kind" 10.78.0.200:11211 -c 32 --pipeline 16 \
              -d "$seconds" --warmup 1 --keys 10000
          fi
          if has resp; then
            loadgen "resp-memspin-$kind-$round" "$kind" 10.78.0.200:6379 --protocol resp \
              -c 32 --pipeline 16 -d "$seconds" --warmup 1 --keys 10000
          fi
          if has single; then
            loadgen "single-$kind-$round" "$kind" 10.78.0.200:11211 -c 1 -d "$seconds" \
              --warmup 1 --keys 10000 --idle spin
          fi
        done
        stop_server || die "memspin exited with an error (see $out/memspin-$round.log)"
      else
        if has ceiling; then
          start_memcached "$srv" "$out/memcached-$round.log" 11211 1 "$server_cpu" 10.78.0.201
          loadgen "ceiling-memcached-$round" kernel 10.78.0.201:11211 -c 32 --pipeline 16 \
            -d "$seconds" --warmup 1 --keys 10000
          stop_server || true
        fi
        if has resp; then
          # Full checksums from redis-server's kernel too: the bypass client verifies them.
          ip netns exec "$srv" ethtool -K xs0 tx off >/dev/null
          start_redis "$srv" "$out/redis-$round.log" 10.78.0.201 6379 "$server_cpu"
          for c in 0 1; do
            kind=${clients[$(( (c + first) % 2 ))]}
            loadgen "resp-redis-$kind-$round" "$kind" 10.78.0.201:6379 --protocol resp \
              -c 32 --pipeline 16 -d "$seconds" --warmup 1 --keys 10000
          done
          stop_server || true
          ip netns exec "$srv" ethtool -K xs0 tx on >/dev/null
        fi
      fi
    done
  done
  ns_cleanup
  MEMSPIN_NAMESPACES=()
fi

if has loss; then
  gen=$gen-l srv=$srv-l
  step "routed topology: $gen xg0 <-> rg0 $rt rs0 <-> xs0 $srv, $loss in 10,000 dropped each way"
  ns_create "$gen"
  ns_create "$rt"
  ns_create "$srv"
  veth "$gen" xg0 "$rt" rg0
  veth "$srv" xs0 "$rt" rs0
  ip -n "$rt" addr add 10.78.0.1/24 dev rg0
  ip -n "$rt" addr add 10.77.0.1/24 dev rs0
  ip netns exec "$rt" sysctl -qw net.ipv4.ip_forward=1
  ip -n "$gen" addr add 10.78.0.3/24 dev xg0
  ip netns exec "$gen" ethtool -K xg0 tx off >/dev/null
  ip netns exec "$gen" sysctl -qw net.core.txrehash=0
  ip -n "$srv" addr add 10.77.0.3/24 dev xs0
  # The kernels' routes across the router with rto_min 1ms (memcached's side and the kernel
  # client's), as bench-loss.sh does.
  ip -n "$gen" route add 10.77.0.0/24 via 10.78.0.1 rto_min 1ms
  ip -n "$srv" route add 10.78.0.0/24 via 10.77.0.1 rto_min 1ms
  router_loss "$rt" rg0 rs0 "$loss"
  drops() { router_drops "$rt" >"$1"; }
  counters() {
    ip netns exec "$1" nstat -asz -j TcpRetransSegs TcpExtTCPLossProbes \
      TcpExtTCPLossProbeRecovery TcpExtTCPSpuriousRTOs TcpExtTCPTimeouts >"$2"
  }
  gateway=10.78.0.1
  # drop_rate N: the router drops N in 10,000 frames each way from now on.
  drop_rate() {
    ip netns exec "$rt" nft delete table netdev memspin_loss
    router_loss "$rt" rg0 rs0 "$1"
  }
  conditions=(loss)
  [ "$floor" = 1 ] && conditions+=(floor)
  server_idle=spin client_idle=spin
  if [ "$rt_prio" != 0 ]; then
    run_as=(chrt -f "$rt_prio")
    server_idle=adaptive client_idle=sleep
  fi
  for round in $(seq 1 "$rounds"); do
    # The conditions and the servers alternate from round to round.
    order=("${conditions[@]}")
    [ $(( round % 2 )) = 0 ] && [ "${#order[@]}" = 2 ] && order=(floor loss)
    for cond in "${order[@]}"; do
      step "round $round of $rounds ($cond)"
      if [ "$cond" = loss ]; then drop_rate "$loss"; else drop_rate 0; fi
      for s in 0 1; do
        if [ $(( (s + round) % 2 )) = 0 ]; then
          tag=$cond-memspin-$round
          start_memspin "$tag" 10.77.0.2/24 10.77.0.1 "$server_idle"
          in_rt_class
          drops "$out/$tag.drops-before"
          loadgen "$tag" xdp 10.77.0.2:11211 -c "$loss_conns" --rate "$loss_rate" \
            -d "$loss_seconds" --warmup 1 --verify --get-ratio 0.8 --keys 20000 \
            --idle "$client_idle"
          drops "$out/$tag.drops-after"
          stop_server || die "memspin exited with an error (see $out/$tag.log)"
        else
          tag=$cond-memcached-$round
          start_memcached "$srv" "$out/$tag.log" 11211 1 "$server_cpu" 10.77.0.3
          in_rt_class
          counters "$gen" "$out/$tag.client-before.json"
          counters "$srv" "$out/$tag.server-before.json"
          drops "$out/$tag.drops-before"
          loadgen "$tag" kernel 10.77.0.3:11211 -c "$loss_conns" --rate "$loss_rate" \
            -d "$loss_seconds" --warmup 1 --verify --get-ratio 0.8 --keys 20000 \
            --idle "$client_idle"
          drops "$out/$tag.drops-after"
          counters "$gen" "$out/$tag.client-after.json"
          counters "$srv" "$out/$tag.server-after.json"
          stop_server || true
        fi
      done
    done
  done
fi

python3 - "$out" "$rounds" <<'PY' | results_summary
import glob, json, os, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def runs(prefix):
    found = []
    for r in range(1, rounds + 1):
        try:
            found.append(json.load(open(os.path.join(out, f"{prefix}-{r}.json"))))
        except (OSError, ValueError):
            pass
    return found

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None

def f(v, unit=""):
    if v is None:
        return "-"
    return f"{v:,.0f}{unit}" if abs(v) >= 100 else f"{v:.2f}{unit}"

def ratio(a, b):
    return None if a is None or not b else a / b

print(f"rounds: {rounds} (medians)")
cost = {k: med([r["ops"] / r["generator"]["cpu_s"] for r in runs(f"cost-{k}") if r["generator"]["cpu_s"]])
        for k in ("xdp", "kernel")}
if any(cost.values()):
    print("\nclient cost: requests per client CPU-second (open loop, same rate)")
    for k in ("xdp", "kernel"):
        print(f"  {k:8} {f(cost[k])}")
    print(f"  bypass/kernel: {f(ratio(cost['xdp'], cost['kernel']))}x (target >= 2x)")
ceiling = {k: med([r["ops_per_sec"] for r in runs(f"ceiling-{k}")]) for k in ("xdp", "kernel", "memcached")}
if any(ceiling.values()):
    print("\nceiling: pipelined ops/s of one server worker (32 connections x 16)")
    print(f"  memspin -t 1, bypass client  {f(ceiling['xdp'])}")
    print(f"  memspin -t 1, kernel client  {f(ceiling['kernel'])}")
    print(f"  memcached -t 1, kernel client {f(ceiling['memcached'])}")
resp = {(server, k): med([r["ops_per_sec"] for r in runs(f"resp-{server}-{k}")])
        for server in ("memspin", "redis") for k in ("xdp", "kernel")}
if any(resp.values()):
    print("\nRESP pipelined ops/s (32 connections x 16, 90 % GET), one server worker")
    print(f"  {'client':8} {'memspin':>10} {'redis-server':>13} {'memspin/redis':>14} {'errors':>7}")
    for k in ("xdp", "kernel"):
        m, r = resp[("memspin", k)], resp[("redis", k)]
        errors = sum(x["errors"]["total"] for server in ("memspin", "redis")
                     for x in runs(f"resp-{server}-{k}"))
        print(f"  {k:8} {f(m):>10} {f(r):>13} {f(ratio(m, r)):>14} {errors:>7}")
single = {k: {p: med([r["latency_us"]["service"]["all"][p] for r in runs(f"single-{k}")]) for p in ("p50", "p90", "p99")}
          for k in ("xdp", "kernel")}
if any(single["xdp"].values()):
    print("\none request in flight: service latency (µs)")
    print(f"  {'client':8} {'p50':>8} {'p90':>8} {'p99':>8}")
    for k in ("xdp", "kernel"):
        print(f"  {k:8} " + " ".join(f"{f(single[k][p]):>8}" for p in ("p50", "p90", "p99")))
    print(f"  bypass p50 / kernel p50: {f(ratio(single['xdp']['p50'], single['kernel']['p50']))} (target <= 0.7)")

def drops(tag):
    try:
        a = [int(x) for x in open(os.path.join(out, tag + ".drops-before")).read().split()]
        b = [int(x) for x in open(os.path.join(out, tag + ".drops-after")).read().split()]
        return [y - x for x, y in zip(a, b)]
    except (OSError, ValueError):
        return None

def nstat(tag, side):
    try:
        a = json.load(open(os.path.join(out, f"{tag}.{side}-before.json")))
        b = json.load(open(os.path.join(out, f"{tag}.{side}-after.json")))
    except (OSError, ValueError):
        return {}
    a, b = a.get("kernel", a), b.get("kernel", b)
    return {k: b.get(k, 0) - a.get(k, 0) for k in b}

def memspin_recovery(tag):
    try:
        text = open(os.path.join(out, tag + ".log")).read()
    except OSError:
        return {}
    m = re.search(r"recovery: RecoveryStats \{([^}]*)\}", text)
    if not m:
        return {}
    return {k.strip(): int(v) for k, v in (kv.split(":") for kv in m.group(1).split(","))}

def pair(cond):
    found = {}
    for name in ("memspin", "memcached"):
        rs = runs(f"{cond}-{name}")
        if not rs:
            continue
        tags = [f"{cond}-{name}-{r}" for r in range(1, rounds + 1)]
        c = [r["latency_us"]["corrected"]["all"] for r in rs]
        found[name] = {
            "p99": med([x["p99"] for x in c]), "p99.99": med([x["p99_99"] for x in c]),
            "max": med([x["max"] for x in c]), "lost": sum(r["verify"]["lost"] for r in rs),
            "mismatches": sum(r["verify"]["mismatches"] for r in rs),
            "errors": sum(r["errors"]["total"] for r in rs),
            "client": {k: med([r["recovery"][k] for r in rs if r.get("recovery")]) for k in ("probes", "resends", "repaired", "spurious", "smoltcp_retransmits")} if name == "memspin" else
                      {k: med([nstat(t, "client").get(k) for t in tags]) for k in ("TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPTimeouts")},
            "server": {k: med([memspin_recovery(t).get(k) for t in tags]) for k in ("probes", "recovered", "spurious", "smoltcp_retransmits")} if name == "memspin" else
                      {k: med([nstat(t, "server").get(k) for t in tags]) for k in ("TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPTimeouts")},
            "drops": [med([(drops(t) or [None, None])[i] for t in tags]) for i in (0, 1)],
        }
    return found

for cond, title in (("loss", "loss both ways"),
                    ("floor", "nothing dropped, same topology, load and rounds (the machine's floor)")):
    found = pair(cond)
    if not found:
        continue
    print(f"\n{title}: corrected latency (µs), values lost over all rounds, recovery (medians)")
    print(f"  {'server + client':30} {'p99':>8} {'p99.99':>8} {'max':>8} {'lost':>5} {'mism.':>5} {'errors':>6}")
    for name, label in (("memspin", "memspin + bypass client"), ("memcached", "memcached + kernel client")):
        if name in found:
            l = found[name]
            print(f"  {label:30} {f(l['p99']):>8} {f(l['p99.99']):>8} {f(l['max']):>8} {l['lost']:>5} {l['mismatches']:>5} {l['errors']:>6}")
    for name in found:
        l = found[name]
        print(f"  {name} client recovery: " + ", ".join(f"{k} {f(v)}" for k, v in l["client"].items()))
        print(f"  {name} server recovery: " + ", ".join(f"{k} {f(v)}" for k, v in l["server"].items()))
        print(f"  {name} frames dropped: to server {f(l['drops'][0])}, to client {f(l['drops'][1])}")
    if cond == "loss":
        print("  targets: p99.99 <= 2,000 µs, max <= 5,000 µs, no value lost")
PY

if [ "$steer" = 1 ] && [ -f scripts/bench-steer.sh ]; then
  step "scripts/bench-steer.sh"
  bash scripts/bench-steer.sh
fi
