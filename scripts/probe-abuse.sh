#!/usr/bin/env bash
# Hostile-client probes: what one client can take from the others. For each server and each
# pattern (see scripts/probe_abuse.py), a fresh server inside a fresh network namespace, the
# pattern held for 3 s while a victim asks `version` every 20 ms, then SIGTERM with the attack
# still on. Prints one line per run: resident-memory growth, the victim's p50 and worst round
# trip and errors, and how long SIGTERM took to end the server.
#
# Usage: scripts/probe-abuse.sh [SERVERS] [PATTERNS]
#   SERVERS   comma list of memcached, tap, kernel, tap-t2, kernel-t2 (default: all)
#   PATTERNS  comma list of multiget, noread, unsent, skip, forward, flood (default: all;
#             forward runs only on the -t 2 servers and memcached)
#   MEMSPIN_BIN=path  probe this memspin binary instead of building the release one
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

servers=${1:-memcached,tap,kernel,tap-t2,kernel-t2}
patterns=${2:-multiget,noread,unsent,skip,forward,flood}
need_packages iproute2 memcached python3
need_root_for_namespaces
if [ -z "${MEMSPIN_BIN:-}" ]; then
  build_release
fi

results_init probe-abuse "$@"
ns=memspin-probe-$$
ns_create "$ns"

start_one() {
  local server=$1 log=$2
  case $server in
    memcached) start_memcached "$ns" "$log" 11311 1; addr=(127.0.0.1 11311) ;;
    tap|tap-t2)
      local t=1; [ "$server" = tap-t2 ] && t=2
      start_server "$ns" "$log" --net tap --iface ms0 --ip 10.77.0.2/24 --host-ip 10.77.0.1/24 \
        -t "$t" --idle park -m 1024
      addr=(10.77.0.2 11211) ;;
    kernel|kernel-t2)
      local t=1; [ "$server" = kernel-t2 ] && t=2
      start_server "$ns" "$log" --net kernel -l 127.0.0.1 -p 11411 -t "$t" --idle park -m 1024
      addr=(127.0.0.1 11411) ;;
    *) die "unknown server $server" ;;
  esac
}

IFS=, read -r -a server_list <<<"$servers"
IFS=, read -r -a pattern_list <<<"$patterns"
for server in "${server_list[@]}"; do
  for pattern in "${pattern_list[@]}"; do
    if [ "$pattern" = forward ] && [[ "$server" != *-t2 && "$server" != memcached ]]; then
      continue
    fi
    log=$out/$server-$pattern.log
    start_one "$server" "$log"
    result=$(ip netns exec "$ns" /usr/bin/python3 scripts/probe_abuse.py "$pattern" \
      "${addr[0]}" "${addr[1]}" "$SERVER_PID" 2>>"$log") || result='{"error": "probe failed"}'
    # The probe sent SIGTERM; make sure the server is gone before the next run.
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    MEMSPIN_PIDS=()
    printf '%-10s %-9s %s\n' "$server" "$pattern" "$result" | tee -a "$out/results.txt"
  done
done
results_summary <"$out/results.txt" >/dev/null
