#!/usr/bin/env bash
# memspin over AF_XDP serving IPv4 and IPv6 on one veth link, measured from a client on the
# link and from a client one router away, over each family. Three namespaces: memspin's
# (10.77.0.2, fd77::2, --gateway 10.77.0.1 and fd77::1, one worker pinned to CPU 0, --idle
# spin), a router (10.77.0.1 and fd77::1 on memspin's link, kernel forwarding) and a client
# in 10.79.0.0/24 and fd79::/64 behind it. "link" runs memspin-loadgen in the router's
# namespace (on memspin's link), "routed" in the client's. memspin-loadgen is pinned to the
# last CPU; the router's forwarding runs in softirq wherever the kernel puts it. One memspin
# serves every run; the order of the four runs rotates every round. Prints medians.
#
# Usage: scripts/bench-routes.sh [ROUNDS (default 3)] [SECONDS per run (default 5)]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-3}
seconds=${2:-5}
need_packages iproute2 ethtool python3
need_root_for_namespaces

build_release

results_init bench-routes "$@"
s=memspin-brs-$$
r=memspin-brr-$$
c=memspin-brc-$$
ns_create "$s"
ns_create "$r"
ns_create "$c"
ip -n "$r" link add msr0 type veth peer name msr1 netns "$s"
ip -n "$r" link add msc0 type veth peer name msc1 netns "$c"
ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
ip -n "$r" addr add 10.77.0.1/24 dev msr0
ip -n "$r" addr add fd77::1/64 dev msr0 nodad
ip -n "$r" addr add 10.79.0.1/24 dev msc0
ip -n "$r" addr add fd79::1/64 dev msc0 nodad
ip -n "$c" addr add 10.79.0.2/24 dev msc1
ip -n "$c" addr add fd79::2/64 dev msc1 nodad
for dev in "$r msr0" "$r msc0" "$c msc1" "$s msr1"; do
  set -- $dev
  ip -n "$1" link set "$2" up
done
ip -n "$c" route add default via 10.79.0.1
ip -n "$c" -6 route add default via fd79::1
# Full checksums from the kernels (memspin verifies every one; see veth_pair_create).
for dev in "$c msc1" "$r msc0" "$r msr0"; do
  set -- $dev
  ip netns exec "$1" ethtool -K "$2" tx off >/dev/null
done
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))

start_server "$s" "$out/memspin.log" --net xdp --iface msr1 --ip 10.77.0.2/24 --ip fd77::2/64 \
  --gateway 10.77.0.1 --gateway fd77::1 --cpus "$server_cpu" --idle spin -m 256

# run_one NAME NS ADDR ROUND
run_one() {
  ip netns exec "$2" "$LOADGEN_BIN" -s "$3" -c 32 --pipeline 16 -t 1 --cpus "$client_cpu" \
    -d "$seconds" --keys 10000 --value-size 32 --prefill -q --json "$out/$1-$4.json" >/dev/null
}

runs=("link4 $r 10.77.0.2:11211" "link6 $r [fd77::2]:11211" \
  "routed4 $c 10.77.0.2:11211" "routed6 $c [fd77::2]:11211")
for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  for k in 0 1 2 3; do
    set -- ${runs[$(( (k + round) % 4 ))]}
    run_one "$1" "$2" "$3" "$round"
  done
done
stop_server || die "memspin exited with an error (see $out/memspin.log)"
grep -h -e ready -e 'gateways:' "$out/memspin.log" >&2

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $rounds rounds (32 connections x 16 in flight, 1 loadgen thread on CPU $client_cpu, memspin on CPU $server_cpu, --idle spin)"
python3 - "$out" <<'PY'
import json, statistics, sys, glob, os
out = sys.argv[1]
print(f"{'client':8} {'ops/s':>10} {'p50 µs':>8} {'p90 µs':>8} {'p99 µs':>8}   runs (ops/s)")
for name in ["link4", "link6", "routed4", "routed6"]:
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, f"{name}-*.json")))]
    ops = [r["ops_per_sec"] for r in runs]
    lat = lambda k: statistics.median(r["latency_us"]["service"]["all"][k] for r in runs)
    print(f"{name:8} {statistics.median(ops):10.0f} {lat('p50'):8.1f} {lat('p90'):8.1f} {lat('p99'):8.1f}   "
          + " ".join(f"{o:.0f}" for o in ops))
PY
} 2>&1 | results_summary
printf '\nper-run JSON and the server log in %s\n' "$out"
