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
