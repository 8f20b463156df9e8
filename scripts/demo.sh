#!/usr/bin/env bash
# The demo: memspin serving over TAP (smoltcp, one pinned worker) inside a fresh network
# namespace, measured by memspin-loadgen from the same namespace for 10 seconds. Prints the
# latency table; writes the JSON summary, HdrHistogram files, the plot and an HTML report into
# results/demo-<time>/. Everything it creates is removed on exit, also on failure.
#
# Its settings suit a machine with two CPUs, where the server and the generator each have one:
# memspin keeps its default idle policy over TAP (adaptive: it sleeps between requests instead
# of spinning against the generator for the host's CPU), and the generator, one thread on the
# other CPU, sends an open-loop Poisson stream at RATE requests/s over 8 connections, one
# request in flight each, a load neither side saturates (at about 30 µs a request, one
# connection is busy a third of the time). So the latency table is the service
# time of an unloaded server, and the generator reads every reply at once.
#
# Both run in the real-time class (SCHED_FIFO at RT_PRIO) and sleep when idle (the generator
# with --idle sleep): on a small machine the guest's own housekeeping takes a CPU for a
# millisecond or more at a time (the kernel's DAMON thread, kdamond, about 1.5 ms a few times a
# second), and whatever it preempts, server or generator, shows that in its tail and its send
# times. A real-time thread is not preempted by it; a real-time thread that spun would be
# throttled by the kernel instead (50 ms in every second), hence sleeping. RT_PRIO=0 keeps the
# normal class and the generator's busy-polling.
#
# Usage: scripts/demo.sh [extra memspin-loadgen flags, e.g. -d 30]
#   RATE=10000   the open-loop rate, requests/s
#   RT_PRIO=10   SCHED_FIFO priority of server and generator (0: the normal class)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rate=${RATE:-10000}
rt_prio=${RT_PRIO:-10}
# A machine (or container, or cgroup) may refuse the real-time class: then the normal one.
if [ "$rt_prio" != 0 ] && ! chrt -f "$rt_prio" true 2>/dev/null; then
  printf 'note: SCHED_FIFO is refused here; the demo runs in the normal class (RT_PRIO=0)\n' >&2
  rt_prio=0
fi
rt=() waiting=spin
if [ "$rt_prio" != 0 ]; then
  rt=(chrt -f "$rt_prio")
  waiting=sleep
fi
need_packages iproute2 libmemcached-tools
need_root_for_namespaces
[ "$(nproc)" -ge 2 ] || die "the demo needs two CPUs: one for memspin, one for the generator"

build_release

# Other work on the machine takes CPU from one side or the other, and the generator's warnings
# then describe that work rather than memspin: measure the CPU the machine uses for a second
# (from /proc/stat) and say so before the figures.
busy=$( { head -n 1 /proc/stat; sleep 1; head -n 1 /proc/stat; } | awk '
  { idle[NR] = $5 + $6; total[NR] = 0; for (i = 2; i <= NF; i++) total[NR] += $i }
  END { printf "%.0f", 100 * (1 - (idle[2] - idle[1]) / (total[2] - total[1])) }')
if [ "$busy" -gt 25 ]; then
  printf 'note: other work keeps %s %% of the CPUs busy: the figures (and any generator\n' "$busy" >&2
  printf '      warnings) will show it; the demo means to run on a quiet machine.\n' >&2
fi

results=results/demo-$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"
ns=memspin-demo-$$
ns_create "$ns"

# The server's worker on CPU 0, the load generator on the last CPU.
last_cpu=$(( $(nproc) - 1 ))
step "memspin --net tap in namespace $ns (10.77.0.2:11211, kernel side 10.77.0.1)"
start_server "$ns" "$results/memspin.log" --net tap --iface memspin0 \
  --ip 10.77.0.2/24 --host-ip 10.77.0.1/24 --cpus 0
[ "$rt_prio" = 0 ] || chrt -f -a -p "$rt_prio" "$SERVER_PID" >/dev/null
head -n 1 "$results/memspin.log"

step "a short client session (memcached's own tools)"
ip netns exec "$ns" memcstat --servers=10.77.0.2:11211 --binary | grep -E 'version|curr_connections' || true
ip netns exec "$ns" memccapable -h 10.77.0.2 -p 11211 -b -T "binary get" | tail -n 2

step "memspin-loadgen: 10 s, open loop at $rate/s over 8 connections, 90 % GET, 32-byte values, --verify"
ip netns exec "$ns" "${rt[@]}" "$LOADGEN_BIN" -s 10.77.0.2:11211 -c 8 --pipeline 1 -t 1 \
  --cpus "$last_cpu" --idle "$waiting" --rate "$rate" -d 10 --warmup 1 --keys 10000 \
  --key-size 16 --value-size 32 --get-ratio 0.9 \
  --prefill --verify --json "$results/summary.json" --hgrm-prefix "$results/latency" \
  --plot "$results/latency.svg" "$@"

step "stopping memspin (SIGTERM)"
stop_server
grep -E 'STAT (cmd_get|cmd_set|get_hits|get_misses|curr_items|total_connections) ' "$results/memspin.log" || true

step "the HTML report"
"$LOADGEN_BIN" report "$results/summary.json" --html "$results/report.html"
printf '\nresults: %s (summary.json, latency*.hgrm, latency.svg, memspin.log)\n' "$results"
printf 'report:  %s\n' "$PWD/$results/report.html"
printf 'open it: xdg-open %s (or copy it to a machine with a browser: it is one self-contained file)\n' \
  "$results/report.html"
if [ "$busy" -gt 25 ]; then
  printf '\nnote: other work kept %s %% of the CPUs busy when the demo started; warnings above may\n' "$busy"
  printf '      describe that work rather than memspin.\n'
fi
