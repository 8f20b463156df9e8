#!/usr/bin/env bash
# One box, network namespaces joined by veth pairs: memspin in one, the kernel-bypass load
# generator in another, neither using the kernel's TCP stack.
#
# NET=xdp (the default): memspin --net xdp on one end of a veth pair, memspin-loadgen --net xdp
# on the other (AF_XDP in copy mode: veth has no zero-copy), one queue per thread:
#
#   ns mslg-gen                                    ns mslg-srv
#   generator 10.78.0.2 ─ xg0 ════════veth════════ xs0 ─ memspin 10.78.0.200
#
# NET=xdp ROUTER=1: the same through a router namespace whose kernel forwards between two veth
# pairs, and drops LOSS in 10,000 TCP frames arriving on each of its ends (nftables netdev
# ingress: XDP takes frames on the ends before netfilter, so the drops happen in the middle):
#
#   generator 10.78.0.2 ─ xg0 ═veth═ rg0 10.78.0.1 ─ mslg-rt ─ 10.77.0.1 rs0 ═veth═ xs0 ─ memspin 10.77.0.2
#
# NET=tap: memspin on a TAP device in one namespace, the generator (--net tap) on a TAP device
# of its own in the other; each namespace's kernel forwards between its TAP device and the veth:
#
#   memspin 10.77.0.2 ─ ms0 (10.77.0.1) ─ vs0 10.79.0.1 ═veth═ vg0 10.79.0.2 ─ lg0 (10.78.0.1) ─ generator 10.78.0.2
#
# Every namespace (and with it every device and program) is removed when the script exits,
# also on failure. Traffic stays inside them.
#
# Usage: scripts/veth-pair.sh [LOADGEN ARGS...]
#   Without arguments: a closed loop and an open loop, both with --verify, 2 s each.
#   With arguments: one run of memspin-loadgen with them added (after -s, --net, --iface, --ip,
#   --gateway, -t).
# Environment: NET (xdp or tap, default xdp), THREADS (generator threads, default 1: one queue
#   each; over xdp memspin gets as many workers), ROUTER (xdp: 1 for the router namespace,
#   default 0), LOSS (with ROUTER=1: TCP frames dropped in 10,000 each way, default 0),
#   MEMSPIN_BIN and LOADGEN_BIN (binaries to use; without both, release builds), OUT (JSON
#   files, default target/veth-pair).
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
net=${NET:-xdp}
threads=${THREADS:-1}
router=${ROUTER:-0}
loss=${LOSS:-0}
out=${OUT:-target/veth-pair}
mkdir -p "$out"
srv=mslg-srv
gen=mslg-gen
rt=mslg-rt
case "$net" in xdp | tap) ;; *) die "NET=$net: xdp or tap" ;; esac
[ "$router" = 0 ] || [ "$net" = xdp ] || die "ROUTER=1 is for NET=xdp"
[ "$loss" = 0 ] || [ "$router" = 1 ] || die "LOSS needs ROUTER=1 (the drops happen in the router)"

# veth NS_A A NS_B B: a veth pair with THREADS queues each way on both ends, both up.
veth() {
  ip -n "$1" link add "$2" numtxqueues "$threads" numrxqueues "$threads" type veth \
    peer name "$4" numtxqueues "$threads" numrxqueues "$threads" netns "$3"
  ip -n "$1" link set "$2" up
  ip -n "$3" link set "$4" up
}

ns_create "$srv"
ns_create "$gen"
if [ "$net" = xdp ]; then
  if [ "$router" = 1 ]; then
    step "namespaces $gen, $rt and $srv: xg0 <-> rg0, rs0 <-> xs0 ($threads queue(s))"
    ns_create "$rt"
    veth "$gen" xg0 "$rt" rg0
    veth "$srv" xs0 "$rt" rs0
    ip -n "$rt" addr add 10.78.0.1/24 dev rg0
    ip -n "$rt" addr add 10.77.0.1/24 dev rs0
    ip netns exec "$rt" sysctl -qw net.ipv4.ip_forward=1
    if [ "$loss" != 0 ]; then
      step "router drops $loss in 10,000 TCP frames each way"
      router_loss "$rt" rg0 rs0 "$loss"
    fi
    server=10.77.0.2
    start_server "$srv" "$out/memspin.log" --net xdp --iface xs0 --ip 10.77.0.2/24 \
      --gateway 10.77.0.1 -p 11211 -t "$threads" --idle park
    link=(--ip 10.78.0.2/24 --gateway 10.78.0.1)
  else
    step "namespaces $gen and $srv, veth pair xg0 <-> xs0 ($threads queue(s))"
    veth "$gen" xg0 "$srv" xs0
    server=10.78.0.200
    start_server "$srv" "$out/memspin.log" --net xdp --iface xs0 --ip 10.78.0.200/24 \
      -p 11211 -t "$threads" --idle park
    link=(--ip 10.78.0.2/24)
  fi
  iface=xg0
else
  step "namespaces $srv and $gen, veth pair vs0 <-> vg0"
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
  server=10.77.0.2
  start_server "$srv" "$out/memspin.log" --net tap --iface ms0 --ip 10.77.0.2/24 \
    --host-ip 10.77.0.1/24 --gateway 10.77.0.1 -p 11211 -t 1 --idle park
  link=(--ip 10.78.0.2/24 --gateway 10.78.0.1)
  iface=lg0
fi

loadgen() {
  ip netns exec "$gen" timeout --foreground 120 "$LOADGEN_BIN" -s "$server:11211" --net "$net" \
    --iface "$iface" "${link[@]}" -t "$threads" "$@"
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
if [ "$loss" != 0 ]; then
  step "frames the router dropped"
  ip netns exec "$rt" nft list table netdev memspin_loss | grep -E 'chain|counter'
fi
stop_server
step "done (namespaces removed on exit)"
