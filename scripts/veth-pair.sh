#!/usr/bin/env bash
# One box, two network namespaces joined by a veth pair: memspin serving on a TAP device in
# one, the kernel-bypass load generator (memspin-loadgen --net tap) on a TAP device of its own
# in the other. Each namespace's kernel forwards between its TAP device and the veth end, so
# neither memspin nor the generator uses the kernel's TCP stack:
#
#   ns mslg-srv                                      ns mslg-gen
#   memspin 10.77.0.2 ─ ms0 (10.77.0.1) ─ vs0 10.79.0.1 ═veth═ vg0 10.79.0.2 ─ lg0 (10.78.0.1) ─ generator 10.78.0.2
#
# Both namespaces (and with them every device) are removed when the script exits, also on
# failure. Traffic stays inside them.
#
# Usage: scripts/veth-pair.sh [LOADGEN ARGS...]
#   Without arguments: a closed loop and an open loop, both with --verify, 2 s each.
#   With arguments: one run of memspin-loadgen with them added (after -s, --net, --iface, --ip,
#   --gateway, -t).
# Environment: THREADS (generator threads, default 1: one TAP queue each), MEMSPIN_BIN and
#   LOADGEN_BIN (binaries to use; without both, release builds), OUT (JSON files, default
#   target/veth-pair).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

need_root_for_namespaces
if [ -n "${MEMSPIN_BIN:-}" ] && [ -n "${LOADGEN_BIN:-}" ]; then
  [ -x "$MEMSPIN_BIN" ] || die "MEMSPIN_BIN=$MEMSPIN_BIN is not executable"
  [ -x "$LOADGEN_BIN" ] || die "LOADGEN_BIN=$LOADGEN_BIN is not executable"
else
  build_release
fi
threads=${THREADS:-1}
out=${OUT:-target/veth-pair}
mkdir -p "$out"
srv=mslg-srv
gen=mslg-gen

step "namespaces $srv and $gen, veth pair vs0 <-> vg0"
ns_create "$srv"
ns_create "$gen"
ip -n "$srv" link add vs0 type veth peer name vg0 netns "$gen"
ip -n "$srv" addr add 10.79.0.1/24 dev vs0
ip -n "$gen" addr add 10.79.0.2/24 dev vg0
ip -n "$srv" link set vs0 up
ip -n "$gen" link set vg0 up
for ns in "$srv" "$gen"; do
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
done

step "generator TAP lg0 in $gen ($threads queue(s))"
if [ "$threads" -gt 1 ]; then
  ip -n "$gen" tuntap add dev lg0 mode tap multi_queue
else
  ip -n "$gen" tuntap add dev lg0 mode tap
fi
ip -n "$gen" addr add 10.78.0.1/24 dev lg0
ip -n "$gen" link set lg0 up
ip -n "$gen" route add 10.77.0.0/24 via 10.79.0.1

step "memspin on TAP ms0 in $srv"
ip -n "$srv" route add 10.78.0.0/24 via 10.79.0.2
start_server "$srv" "$out/memspin.log" --net tap --iface ms0 --ip 10.77.0.2/24 \
  --host-ip 10.77.0.1/24 --gateway 10.77.0.1 -p 11211 -t 1 --idle park

loadgen() {
  ip netns exec "$gen" timeout 120 "$LOADGEN_BIN" -s 10.77.0.2:11211 --net tap --iface lg0 \
    --ip 10.78.0.2/24 --gateway 10.78.0.1 -t "$threads" "$@"
}

if [ $# -gt 0 ]; then
  step "memspin-loadgen $*"
  loadgen "$@"
else
  step "closed loop, --verify"
  loadgen -c 8 --pipeline 4 -d 2 --warmup 0.5 --keys 2000 --prefill --verify \
    --get-ratio 0.8 -q --json "$out/closed.json"
  step "open loop at 5,000/s, --verify"
  loadgen -c 8 --rate 5k -d 2 --warmup 0.5 --keys 2000 --prefill --verify \
    --get-ratio 0.8 -q --json "$out/open.json"
fi
stop_server
step "done (namespaces removed on exit)"
