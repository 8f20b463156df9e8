#!/usr/bin/env bash
# The demo: memspin serving over TAP (smoltcp, one pinned worker) inside a fresh network
# namespace, measured by memspin-loadgen from the same namespace for about 10 seconds.
# Prints the latency table; writes the JSON summary, HdrHistogram files and the plot into
# results/demo-<time>/. Everything it creates is removed on exit, also on failure.
#
# Usage: scripts/demo.sh [extra memspin-loadgen flags, e.g. --rate 20000]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

need_packages iproute2 libmemcached-tools
need_root_for_namespaces

step "cargo build --release (memspin, memspin-loadgen)"
cargo build --release -q -p server -p loadgen
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
MEMSPIN_BIN=$target_dir/release/memspin
LOADGEN_BIN=$target_dir/release/memspin-loadgen

results=results/demo-$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"
ns=memspin-demo-$$
ns_create "$ns"

# The server's worker on CPU 0, the load generator on the last CPU.
last_cpu=$(( $(nproc) - 1 ))
step "memspin --net tap in namespace $ns (10.77.0.2:11211, kernel side 10.77.0.1)"
start_server "$ns" "$results/memspin.log" --net tap --iface memspin0 \
  --ip 10.77.0.2/24 --host-ip 10.77.0.1/24 --cpus 0 --idle spin
head -n 1 "$results/memspin.log"

step "a short client session (memcached's own tools)"
ip netns exec "$ns" memcstat --servers=10.77.0.2:11211 --binary | grep -E 'version|curr_connections' || true
ip netns exec "$ns" memccapable -h 10.77.0.2 -p 11211 -b -T "binary get" | tail -n 2

step "memspin-loadgen: 10 s, 32 connections x 4 in flight, 90 % GET, 32-byte values, --verify"
ip netns exec "$ns" "$LOADGEN_BIN" -s 10.77.0.2:11211 -c 32 --pipeline 4 -t 1 --cpus "$last_cpu" \
  -d 10 --warmup 1 --keys 10000 --key-size 16 --value-size 32 --get-ratio 0.9 --prefill --verify \
  --json "$results/summary.json" --hgrm-prefix "$results/latency" --plot "$results/latency.svg" "$@"

step "stopping memspin (SIGTERM)"
stop_server
grep -E 'STAT (cmd_get|cmd_set|get_hits|get_misses|curr_items|total_connections) ' "$results/memspin.log" || true
printf '\nresults: %s (summary.json, latency*.hgrm, latency.svg, memspin.log)\n' "$results"
