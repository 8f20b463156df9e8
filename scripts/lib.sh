# Shared helpers for memspin's scripts: sourced, not run.
# Network namespaces made here are removed on exit, also on failure (see ns_create).

step() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Installs the Debian packages that are missing (needs root and apt).
need_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing packages: ${missing[*]} (run as root, or install them)"
  step "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
}

need_root_for_namespaces() {
  [ "$(id -u)" -eq 0 ] || die "TAP and network namespaces need root"
  [ -c /dev/net/tun ] || die "/dev/net/tun is missing"
}

# Every namespace this shell created; removed by ns_cleanup on EXIT.
MEMSPIN_NAMESPACES=()
MEMSPIN_PIDS=()

ns_cleanup() {
  local pid ns
  for pid in "${MEMSPIN_PIDS[@]:-}"; do
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  for ns in "${MEMSPIN_NAMESPACES[@]:-}"; do
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
  done
  return 0
}

# ns_create NAME: a fresh network namespace with loopback up; removed when the script exits.
ns_create() {
  local ns=$1
  ip netns del "$ns" 2>/dev/null || true
  ip netns add "$ns"
  MEMSPIN_NAMESPACES+=("$ns")
  trap ns_cleanup EXIT
  ip -n "$ns" link set lo up
}

# start_server NS LOG ARGS...: starts memspin inside NS, waits for its `ready` line (30 s at most).
# Sets SERVER_PID.
# build_release: release binaries of memspin and memspin-loadgen; sets MEMSPIN_BIN, LOADGEN_BIN.
# BUILD=0: the binaries already in target/release, without cargo (a cargo frozen by another
# benchmark may hold the package cache's lock).
build_release() {
  if [ "${BUILD:-1}" = 0 ]; then
    MEMSPIN_BIN=$PWD/target/release/memspin LOADGEN_BIN=$PWD/target/release/memspin-loadgen
    return
  fi
  step "cargo build --release"
  cargo build --release -q -p server -p loadgen
  local target_dir
  target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  MEMSPIN_BIN=$target_dir/release/memspin
  LOADGEN_BIN=$target_dir/release/memspin-loadgen
}

# worker_tid PID: the thread id of memspin PID's first worker (memspin-w0), for perf -t.
worker_tid() {
  ps -T -p "$1" -o spid=,comm= | awk '$2 == "memspin-w0" { print $1 }'
}

# profile_worker PID CPU OUT HZ SECONDS: `perf record -e cpu-clock --call-graph dwarf` of memspin
# PID's first worker thread for SECONDS, perf itself pinned to CPU, into OUT.data (its messages in
# OUT.log); a failed record is a warning, not the end of the benchmark.
profile_worker() {
  local pid=$1 cpu=$2 out=$3 hz=$4 seconds=$5 worker
  mkdir -p "$(dirname "$out")"
  worker=$(worker_tid "$pid")
  taskset -c "$cpu" perf record -q -e cpu-clock -F "$hz" --call-graph dwarf,16384 \
    -t "$worker" -o "$out.data" -- sleep "$seconds" \
    2>"$out.log" || printf 'warning: perf record failed (see %s)\n' "$out.log" >&2
}

# start_memcached NS LOG PORT THREADS [CPU] [ADDR]: memcached -t THREADS on ADDR:PORT (default
# 127.0.0.1) inside NS (pinned to CPU when given), stopped like memspin by stop_server and on exit.
start_memcached() {
  local ns=$1 log=$2 port=$3 threads=$4 cpu=${5:-} addr=${6:-127.0.0.1}
  local pin=()
  [ -n "$cpu" ] && pin=(taskset -c "$cpu")
  ip netns exec "$ns" "${pin[@]}" memcached -u root -U 0 -t "$threads" -l "$addr" -p "$port" \
    -m 256 >"$log" 2>&1 &
  SERVER_PID=$!
  MEMSPIN_PIDS+=("$SERVER_PID")
  local i
  for i in $(seq 1 100); do
    ip netns exec "$ns" bash -c "exec 3<>/dev/tcp/$addr/$port" 2>/dev/null && return 0
    sleep 0.05
  done
  die "memcached did not start"
}

# start_redis NS LOG ADDR PORT CPU: redis-server on ADDR:PORT inside NS, pinned to CPU, no
# persistence, one I/O thread, protected mode off (it answers only loopback otherwise; its
# listener is in a namespace the script made); stopped like memspin by stop_server and on exit.
start_redis() {
  local ns=$1 log=$2 addr=$3 port=$4 cpu=$5
  ip netns exec "$ns" taskset -c "$cpu" redis-server --bind "$addr" --port "$port" \
    --protected-mode no --save "" --appendonly no --io-threads 1 --daemonize no --logfile "" \
    >"$log" 2>&1 &
  SERVER_PID=$!
  MEMSPIN_PIDS+=("$SERVER_PID")
  local i
  for i in $(seq 1 100); do
    ip netns exec "$ns" redis-cli -h "$addr" -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  cat "$log" >&2
  die "redis-server did not start"
}

start_server() {
  local ns=$1 log=$2; shift 2
  ip netns exec "$ns" "$MEMSPIN_BIN" "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  MEMSPIN_PIDS+=("$SERVER_PID")
  local i
  for i in $(seq 1 300); do
    grep -q ready "$log" && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log" >&2; die "memspin exited before it was ready"; }
    sleep 0.1
  done
  cat "$log" >&2
  die "memspin was not ready within 30 s"
}

# stop_server: SIGTERM, then the exit status of memspin.
stop_server() {
  kill -TERM "$SERVER_PID"
  local status=0
  wait "$SERVER_PID" || status=$?
  MEMSPIN_PIDS=()
  return "$status"
}

# veth_pair_create CLIENT_NS SERVER_NS CLIENT_IF SERVER_IF CLIENT_CIDR [QUEUES]: a veth pair
# between two namespaces (made with ns_create, so removed on exit with everything in them):
# CLIENT_IF in CLIENT_NS with CLIENT_CIDR, SERVER_IF in SERVER_NS without an address, for
# memspin --net xdp to attach to; QUEUES rx and tx queues on each end (default 1). Transmit
# checksum offload is turned off on the client end: its kernel would otherwise send TCP
# segments with partial checksums (CHECKSUM_PARTIAL), which memspin verifies and drops. And
# the client keeps each flow on its queue (net.core.txrehash=0): a veth delivers to the peer's
# queue of the sender's transmit queue, which the kernel picks anew after a retransmission
# timeout, moving the connection to another worker, which resets it.
veth_pair_create() {
  local cns=$1 sns=$2 cif=$3 sif=$4 cidr=$5 queues=${6:-1}
  ip -n "$cns" link add "$cif" numtxqueues "$queues" numrxqueues "$queues" type veth \
    peer name "$sif" numtxqueues "$queues" numrxqueues "$queues" netns "$sns"
  ip -n "$cns" addr add "$cidr" dev "$cif"
  ip -n "$cns" link set "$cif" up
  ip -n "$sns" link set "$sif" up
  ip netns exec "$cns" ethtool -K "$cif" tx off >/dev/null
  ip netns exec "$cns" sysctl -q -w net.core.txrehash=0
}

# router_loss NS IN_A IN_B LOSS: in router namespace NS, drop LOSS in 10,000 TCP frames arriving
# on IN_A (towards the server) and on IN_B (towards the client), counted (see router_drops).
router_loss() {
  local ns=$1 to_server=$2 to_client=$3 loss=$4
  ip netns exec "$ns" nft -f - <<EOF
table netdev memspin_loss {
  chain to_server {
    type filter hook ingress device "$to_server" priority 0;
    meta l4proto tcp numgen random mod 10000 < $loss counter drop
  }
  chain to_client {
    type filter hook ingress device "$to_client" priority 0;
    meta l4proto tcp numgen random mod 10000 < $loss counter drop
  }
}
EOF
}

# router_drops NS: the frames router_loss dropped so far, "to-server to-client".
router_drops() {
  ip netns exec "$1" nft list table netdev memspin_loss \
    | sed -n 's/.*counter packets \([0-9]*\) .*/\1/p' | tr '\n' ' '
}

# cpu_ns PID: nanoseconds on CPU of all of PID's threads so far (their schedstat).
cpu_ns() {
  local total=0 t run
  for t in /proc/"$1"/task/*/schedstat; do
    read -r run _ <"$t" || continue
    total=$(( total + run ))
  done
  echo "$total"
}

# stats_to NS ADDR FILE: the memcached `stats` of the server at ADDR (host:port), asked from
# namespace NS, into FILE as "name value" lines; FILE is left empty if the server does not answer.
stats_to() {
  ip netns exec "$1" python3 - "$2" >"$3" <<'PY' || true
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=5)
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
for line in buf.decode().splitlines():
    if line.startswith("STAT "):
        print(line[5:])
PY
}

# results_init NAME ARGS...: this run's results directory, results/NAME-<UTC time>/, in $out,
# with machine.json: the commit (and whether the tree had changes), the machine (CPU model,
# vCPUs, kernel), the date and the exact command: ARGS, and the environment variables the
# script reads (`${VAR:-...}`) that are set. results_summary writes the same header into
# results.md above the tables the script prints. Needs python3.
results_init() {
  local name=$1; shift
  out=results/$name-$(date -u +%Y%m%d-%H%M%S)
  mkdir -p "$out"
  local script=scripts/$(basename "$0") var command=""
  for var in $(grep -o '\${[A-Z][A-Z0-9_]*:-' "$script" | sed 's/^\${//; s/:-$//' | sort -u); do
    if [ -n "${!var+set}" ]; then command+="$var=$(printf '%q' "${!var}") "; fi
  done
  command+="$script"
  if [ $# -gt 0 ]; then command+=$(printf ' %q' "$@"); fi
  local commit dirty=false cpu
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then dirty=true; fi
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
  python3 - "$out/machine.json" "$name" "$commit" "$dirty" "${cpu:-unknown}" "$(nproc)" \
    "$(uname -r)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$command" <<'PY'
import json, sys
path, name, commit, dirty, cpu, vcpus, kernel, date, command = sys.argv[1:]
json.dump({"script": name, "commit": commit, "dirty": dirty == "true", "cpu_model": cpu,
           "vcpus": int(vcpus), "kernel": kernel, "date": date, "command": command},
          open(path, "w"), indent=2)
PY
}

# results_summary: copies its input (the summary tables a script prints) to stdout, and writes
# $out/results.md: the header from machine.json, then that summary.
results_summary() {
  tee "$out/summary.txt"
  python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
m = json.load(open(os.path.join(out, "machine.json")))
summary = open(os.path.join(out, "summary.txt")).read()
commit = m["commit"] + (" (with uncommitted changes)" if m["dirty"] else "")
with open(os.path.join(out, "results.md"), "w") as f:
    f.write(f"# {m['script']}, {m['date']}\n\n```text\n")
    f.write(f"commit:  {commit}\n")
    f.write(f"machine: {m['cpu_model']}, {m['vcpus']} vCPUs, Linux {m['kernel']}\n")
    f.write(f"date:    {m['date']}\ncommand: {m['command']}\n```\n\n")
    f.write("```text\n" + summary.strip("\n") + "\n```\n")
PY
  rm -f "$out/summary.txt"
  printf '\nresults: %s/results.md\n' "$out" >&2
}
