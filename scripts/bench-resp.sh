#!/usr/bin/env bash
# RESP benchmark: memspin (one worker, --resp-port) against redis-server (Debian package,
# persistence off, one I/O thread), each pinned to CPU 0; clients pinned to the last CPU. Only
# one server runs at a time, and the order alternates every round. Two packet paths (NET):
#   tap (default)  one fresh namespace: memspin over TAP, redis-server on its loopback, every
#                  client in that namespace through the kernel;
#   xdp            a generator namespace and a server namespace joined by a veth pair: memspin
#                  on AF_XDP on the server end (10.78.0.200), redis-server on the kernel's
#                  address of the same end (10.78.0.201, protected mode off); redis-benchmark
#                  and the raw-socket client through the generator's kernel, memspin-loadgen on
#                  its own AF_XDP stack (`--net xdp`), so that the generator's kernel TCP is not
#                  the ceiling of the loadgen rows (the kernel client uses its whole CPU against
#                  memspin in the 32 x 16 run). For those rows redis-server's kernel sends full
#                  checksums (the bypass client verifies them; AF_XDP carries no offload state).
# Per server and round:
#   - redis-benchmark -t set,get -n N -r N -c 120 (the seed's run; N = 1,000,000 there),
#   - the same with -P 16,
#   - memspin-loadgen --protocol resp: 1 connection with 1 request in flight (latency), and
#     32 connections with 16 in flight each (throughput); 90 % GET, 32-byte values. The
#     throughput run reads no kernel timestamps (`--timestamps none`, PIPELINED_TIMESTAMPS to
#     change): a transmit stamp read per request makes the generator, not the server, the limit
#     of memspin's pipelined runs (see bench-efficiency.sh); its latencies are then from user
#     space and include the generator's own delay.
#   - MULTI/EXEC transactions (multi), which redis-benchmark cannot send: a small raw-socket
#     client (/usr/bin/python3, below) on 1 connection keeps TX_PIPELINE transactions in
#     flight, each `MULTI`, `SET`, `INCR`, `GET`, `EXEC` (memspin runs one worker here, so
#     every key is its own); transactions per second and the p50/p99 of a pipeline's round
#     trip, for SECONDS at most and TX_MAX transactions at most,
#   - SCAN over SCAN_KEYS keys (scan; default 1,000,000): the keys are stored first with
#     pipelined MSETs (not timed), then one full iteration of `SCAN cursor COUNT 1000` is
#     timed: seconds, calls, and keys returned (duplicates are counted: memspin returns each
#     key once, Redis may return one again while its table rehashes).
# Prints medians over the rounds and memspin's ratios against redis-server; then, per workload,
# the CPU each side used (cores: the client's user and system time per wall second, the
# server's on-CPU time from its threads' schedstat) and memspin's frames per request each
# way (its `stats` before and after each run).
#
# Usage: scripts/bench-resp.sh [ROUNDS (default 3)] [N requests per redis-benchmark test
#                              (default 200000; the seed's run: 1000000)] [SECONDS per loadgen
#                              run (default 5)]
#   IDLE=spin|park|adaptive  memspin's idle policy (default spin, the latency-first choice;
#     SERVERS=memspin-adaptive runs adaptive beside it in the same rounds)
#   PIPELINED_TIMESTAMPS=none|software  the generator's timestamps in the 32 x 16 run
#   PIPELINED_N=N  requests per test of the `-P 16` run (default: N, the second argument; the
#     keys stay `-r N`): at 200,000 that run lasts about a tenth of a second per test, which
#     redis-benchmark times to the millisecond, so it takes more to tell builds apart
#   TX_PIPELINE=N  transactions in flight in the multi run (default 16); TX_MAX=N  at most N
#     transactions per run (default 1000000); SCAN_KEYS=N  keys of the scan run (default
#     1000000)
#   WORKLOADS="seed pipelined latency throughput multi scan"  the runs to make, in this order (e.g.
#     WORKLOADS="pipelined throughput": only the pipelined ones)
#   NET=tap|xdp  the packet path (above; default tap)
#   SERVERS="redis-server memspin"  the servers (the order rotates every round); also
#     memspin-adaptive (memspin with --idle adaptive, whatever IDLE says) and
#     memspin-baseline (memspin with IDLE, the binary BASELINE=/path/to/memspin: another
#     build, for two builds' medians from alternating runs); memspin-tap is memspin with NET=tap
#   PROFILE=DIR  during round 1's memspin runs of `-P 16` and of the 32 x 16 loadgen run, `perf
#     record -e cpu-clock --call-graph dwarf` of memspin's worker into DIR/pipelined/ and
#     DIR/throughput/, and at the end where its samples went (scripts/profile-groups.py, as
#     bench-efficiency.sh groups them); perf runs on the clients' CPU, so these rounds'
#     figures are not comparable with others
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

rounds=${1:-3}
requests=${2:-200000}
seconds=${3:-5}
pipelined_requests=${PIPELINED_N:-$requests}
idle=${IDLE:-spin}
pipelined_timestamps=${PIPELINED_TIMESTAMPS:-none}
workloads=(${WORKLOADS:-seed pipelined latency throughput multi scan})
tx_pipeline=${TX_PIPELINE:-16}
tx_max=${TX_MAX:-1000000}
scan_keys=${SCAN_KEYS:-1000000}
profile=${PROFILE:-}
servers=(${SERVERS:-redis-server memspin})
net=${NET:-tap}
case $net in tap | xdp) ;; *) die "NET=$net: tap or xdp" ;; esac
need_packages iproute2 ethtool redis-server redis-tools python3
need_root_for_namespaces

build_release

results_init bench-resp "$@"
# The servers run in $ns, the clients in $cns (the same namespace over TAP).
ns=memspin-bench-resp-$$
ns_create "$ns"
cns=$ns
memspin_path=(--net tap --iface ms0 --ip 10.77.0.2/24 --host-ip 10.77.0.1/24)
memspin_addr=10.77.0.2
redis_addr=127.0.0.1
loadgen_path=()
if [ "$net" = xdp ]; then
  cns=memspin-bench-resp-g-$$
  ns_create "$cns"
  veth_pair_create "$cns" "$ns" xg0 xs0 10.78.0.3/24
  ip -n "$ns" addr add 10.78.0.201/24 dev xs0
  memspin_path=(--net xdp --iface xs0 --ip 10.78.0.200/24)
  memspin_addr=10.78.0.200
  redis_addr=10.78.0.201
  loadgen_path=(--net xdp --iface xg0 --ip 10.78.0.2/24)
fi
server_cpu=0
client_cpu=$(( $(nproc) - 1 ))

# measured BASE CMD...: runs the client CMD on the client CPU; writes BASE.cpu (the client's
# wall, user and system seconds; the server's on-CPU nanoseconds and the wall nanoseconds over
# the run) and, for memspin, BASE.stats0 and BASE.stats1 (`stats` before and after). With
# PROFILE, round 1's memspin runs of the pipelined workloads are recorded by perf meanwhile.
measured() {
  local base=$1; shift
  [ -n "$STATS_ADDR" ] && stats_to "$cns" "$STATS_ADDR" "$base.stats0"
  local perf_pid=""
  if [ -n "$PROFILE_TO" ]; then
    local worker
    worker=$(worker_tid "$SERVER_PID")
    mkdir -p "$PROFILE_TO"
    taskset -c "$client_cpu" perf record -q -e cpu-clock -F 1999 --call-graph dwarf,16384 \
      -t "$worker" -o "$PROFILE_TO/perf.data" >/dev/null 2>"$PROFILE_TO/perf.log" &
    perf_pid=$!
    sleep 0.5
  fi
  local c0 t0 c1 t1
  c0=$(cpu_ns "$SERVER_PID"); t0=$(date +%s%N)
  /usr/bin/time -f '%e %U %S' -o "$base.time" ip netns exec "$cns" taskset -c "$client_cpu" "$@"
  c1=$(cpu_ns "$SERVER_PID"); t1=$(date +%s%N)
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid"
    wait "$perf_pid" || printf 'warning: perf record failed (see %s)\n' "$PROFILE_TO/perf.log" >&2
  fi
  echo "$(cat "$base.time") $(( c1 - c0 )) $(( t1 - t0 ))" >"$base.cpu"
  rm -f "$base.time"
  [ -n "$STATS_ADDR" ] && stats_to "$cns" "$STATS_ADDR" "$base.stats1"
  return 0
}

# The transaction and SCAN client: raw RESP over one socket, bounded in time and count.
# Arguments: multi HOST PORT SECONDS PIPELINE MAX_TX | scan HOST PORT KEYS; prints one JSON
# object. Errors in a reply (anything starting with '-', a null EXEC) stop it with status 1.
# shellcheck disable=SC2016
RESP_CLIENT_PY='
import json, socket, sys, time

def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

class Conn:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
    def fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise SystemExit("connection closed")
        self.buf += data
    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line
    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise SystemExit("error reply: %r" % line)
        if kind in (b"+", b":"):
            return rest
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.fill()
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        if kind == b"*":
            n = int(rest)
            if n < 0:
                raise SystemExit("null array (a transaction was aborted)")
            return [self.reply() for _ in range(n)]
        raise SystemExit("unexpected reply %r" % line)

mode, host, port = sys.argv[1], sys.argv[2], sys.argv[3]
c = Conn(host, port)
if mode == "multi":
    seconds, depth, max_tx = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    batch = b"".join(command("MULTI") + command("SET", "tx:%d" % i, "v" * 32)
                     + command("INCR", "tx:counter") + command("GET", "tx:%d" % i)
                     + command("EXEC") for i in range(depth))
    rtts, done, start = [], 0, time.monotonic()
    while done < max_tx and time.monotonic() - start < seconds:
        t0 = time.monotonic_ns()
        c.sock.sendall(batch)
        for _ in range(depth):
            for _ in range(4):
                c.reply()
            if len(c.reply()) != 3:
                raise SystemExit("EXEC did not answer 3 replies")
        rtts.append(time.monotonic_ns() - t0)
        done += depth
    wall = time.monotonic() - start
    rtts.sort()
    pick = lambda q: rtts[min(len(rtts) - 1, int(q * len(rtts)))] / 1000 if rtts else 0
    print(json.dumps({"transactions": done, "seconds": wall, "tx_per_sec": done / wall,
                      "pipeline": depth, "rtt_p50_us": pick(0.5), "rtt_p99_us": pick(0.99)}))
elif mode == "scan":
    keys, per = int(sys.argv[4]), 1000
    c.sock.sendall(command("FLUSHALL")); c.reply()
    for first in range(0, keys, per):
        args = ["MSET"]
        for i in range(first, min(keys, first + per)):
            args += ["scan:%d" % i, "v"]
        c.sock.sendall(command(*args))
        c.reply()
    cursor, calls, returned, seen, longest = b"0", 0, 0, set(), 0.0
    start = time.monotonic()
    while True:
        sent = time.monotonic()
        c.sock.sendall(command("SCAN", cursor, "COUNT", 1000))
        cursor, found = c.reply()
        longest = max(longest, time.monotonic() - sent)
        calls += 1
        returned += len(found)
        seen.update(found)
        if cursor == b"0" or calls > 100 * keys + 10:
            break
    wall = time.monotonic() - start
    if len(seen) != keys:
        raise SystemExit("SCAN returned %d distinct keys of %d" % (len(seen), keys))
    print(json.dumps({"keys": keys, "seconds": wall, "calls": calls, "returned": returned,
                      "distinct": len(seen), "longest_call_ms": longest * 1000}))
'

# tx_checksums on|off: the transmit checksum offload of the interface named in $checksums, if
# any (set by bench).
tx_checksums() {
  [ -z "$checksums" ] || ip netns exec "$ns" ethtool -K "$checksums" tx "$1" >/dev/null
}

# bench NAME HOST PORT ROUND: the workloads of WORKLOADS against the server that is up now.
bench() {
  local name=$1 host=$2 port=$3 round=$4
  local rb=(redis-benchmark -h "$host" -p "$port" -t set,get -n "$requests" -r "$requests" -c 120
    --csv)
  local lg=("$LOADGEN_BIN" -s "$host:$port" --protocol resp "${loadgen_path[@]}" -t 1
    --cpus "$client_cpu" -d "$seconds" --warmup 1 --keys 10000 --key-size 16 --value-size 32
    --get-ratio 0.9 --prefill -q)
  local profile_base=""
  [ -n "$profile" ] && [[ $name == memspin || $name == memspin-tap ]] && [ "$round" = 1 ] &&
    profile_base=$profile
  # The bypass client verifies checksums, which redis-server's kernel otherwise leaves to an
  # offload a veth never does: full checksums for the loadgen rows only.
  local checksums=""
  [ "$net" = xdp ] && [ "$name" = redis-server ] && checksums=xs0
  local w
  for w in "${workloads[@]}"; do
    PROFILE_TO=""
    case $w in
      seed)
        measured "$out/seed-$name-$round" "${rb[@]}" >"$out/seed-$name-$round.csv" ;;
      pipelined)
        [ -n "$profile_base" ] && PROFILE_TO=$profile_base/pipelined
        measured "$out/pipelined-$name-$round" "${rb[@]}" -P 16 -n "$pipelined_requests" \
          >"$out/pipelined-$name-$round.csv" ;;
      latency)
        tx_checksums off
        measured "$out/latency-$name-$round" "${lg[@]}" -c 1 --pipeline 1 \
          --json "$out/latency-$name-$round.json" >/dev/null
        tx_checksums on ;;
      throughput)
        [ -n "$profile_base" ] && PROFILE_TO=$profile_base/throughput
        tx_checksums off
        measured "$out/throughput-$name-$round" "${lg[@]}" -c 32 --pipeline 16 \
          --timestamps "$pipelined_timestamps" --json "$out/throughput-$name-$round.json" >/dev/null
        tx_checksums on ;;
      multi)
        measured "$out/multi-$name-$round" /usr/bin/python3 -c "$RESP_CLIENT_PY" multi "$host" \
          "$port" "$seconds" "$tx_pipeline" "$tx_max" >"$out/multi-$name-$round.json" ;;
      scan)
        measured "$out/scan-$name-$round" /usr/bin/python3 -c "$RESP_CLIENT_PY" scan "$host" \
          "$port" "$scan_keys" >"$out/scan-$name-$round.json" ;;
      *) die "unknown workload $w (WORKLOADS: seed pipelined latency throughput multi scan)" ;;
    esac
  done
}

run_server() {
  local name=$1 round=$2
  case $name in
    redis-server)
      start_redis "$ns" "$out/$name-$round.log" "$redis_addr" 6380 "$server_cpu"
      STATS_ADDR=""
      bench "$name" "$redis_addr" 6380 "$round" ;;
    memspin|memspin-tap|memspin-adaptive|memspin-baseline)
      [ "$name" = memspin-tap ] && [ "$net" != tap ] && die "memspin-tap is for NET=tap"
      local bin=$MEMSPIN_BIN policy=$idle
      [ "$name" = memspin-adaptive ] && policy=adaptive
      [ "$name" = memspin-baseline ] && bin=${BASELINE:?memspin-baseline needs BASELINE=/path/to/memspin}
      MEMSPIN_BIN=$bin start_server "$ns" "$out/$name-$round.log" "${memspin_path[@]}" \
        --resp-port 6379 --cpus "$server_cpu" --idle "$policy" -m 1024
      STATS_ADDR=$memspin_addr:11211
      bench "$name" "$memspin_addr" 6379 "$round" ;;
    *) die "unknown server $name (redis-server, memspin, memspin-adaptive, memspin-baseline)" ;;
  esac
  stop_server || true
}

for round in $(seq 1 "$rounds"); do
  step "round $round of $rounds"
  # Rotate the order every round so drift in the machine's load does not favour one server.
  n=${#servers[@]}
  for k in $(seq 0 $(( n - 1 ))); do
    run_server "${servers[$(( (k + round) % n ))]}" "$round"
  done
done

# The summary: printed, and written into $out/results.md under the run's header.
{
step "medians over $rounds rounds (servers on CPU $server_cpu, clients on CPU $client_cpu, memspin --idle $idle, NET=$net)"
python3 - "$out" "$requests" "$pipelined_timestamps" "${servers[*]}" "$pipelined_requests" "$net" <<'PY'
import csv, glob, json, os, statistics, sys
out, requests, pipelined_timestamps = sys.argv[1], sys.argv[2], sys.argv[3]
servers = sys.argv[4].split()
pipelined_requests = sys.argv[5]
net = sys.argv[6]
client = "memspin-loadgen --net xdp" if net == "xdp" else "memspin-loadgen"

def median(values):
    return statistics.median(values) if values else float("nan")

def bench(kind, name, test, column):
    values = []
    for path in glob.glob(os.path.join(out, f"{kind}-{name}-*.csv")):
        for row in csv.DictReader(open(path)):
            if row["test"] == test:
                values.append(float(row[column]))
    return median(values)

def loadgen(kind, name, key):
    values = []
    for path in glob.glob(os.path.join(out, f"{kind}-{name}-*.json")):
        d = json.load(open(path))
        values.append(d["ops_per_sec"] if key == "ops" else d["latency_us"]["service"]["all"][key])
    return median(values)

for kind, label in [("seed", f"redis-benchmark -t set,get -n {requests} -r {requests} -c 120"),
                    ("pipelined", f"redis-benchmark -t set,get -n {pipelined_requests} -r {requests} -c 120 -P 16")]:
    print(f"\n{label} (requests/s; p50 in ms)")
    print(f"{'server':16} {'SET rps':>10} {'GET rps':>10} {'SET p50':>8} {'GET p50':>8}   {'rps ratio':>9}")
    base = bench(kind, "redis-server", "GET", "rps") + bench(kind, "redis-server", "SET", "rps")
    for name in servers:
        s, g = bench(kind, name, "SET", "rps"), bench(kind, name, "GET", "rps")
        sp, gp = bench(kind, name, "SET", "p50_latency_ms"), bench(kind, name, "GET", "p50_latency_ms")
        print(f"{name:16} {s:10.0f} {g:10.0f} {sp:8.3f} {gp:8.3f}   {(s + g) / base:9.2f}")

for kind, label, stamps in [
        ("latency", f"{client} --protocol resp, 1 connection, 1 in flight", "software"),
        ("throughput", f"{client} --protocol resp, 32 connections x 16 in flight",
         pipelined_timestamps)]:
    if net == "xdp":
        clock = "the bypass client's own clock"
    elif stamps != "none":
        clock = "kernel timestamps"
    else:
        clock = "user-space clock, --timestamps none"
    print(f"\n{label}, 90 % GET, 32-byte values (service time, µs; {clock})")
    print(f"{'server':16} {'ops/s':>10} {'p50':>8} {'p90':>8} {'p99':>8}   {'ops ratio':>9} {'p50 ratio':>9}")
    base_ops, base_p50 = loadgen(kind, "redis-server", "ops"), loadgen(kind, "redis-server", "p50")
    for name in servers:
        ops, p50, p90, p99 = (loadgen(kind, name, k) for k in ("ops", "p50", "p90", "p99"))
        print(f"{name:16} {ops:10.0f} {p50:8.1f} {p90:8.1f} {p99:8.1f}   {ops / base_ops:9.2f} {p50 / base_p50:9.2f}")

def loaded(kind, name, key):
    values = []
    for path in glob.glob(os.path.join(out, f"{kind}-{name}-*.json")):
        try:
            values.append(json.load(open(path))[key])
        except (OSError, ValueError, KeyError):
            pass
    return median(values)

if glob.glob(os.path.join(out, "multi-*.json")):
    print("\nMULTI/EXEC (SET, INCR, GET) on 1 connection, pipelined (raw-socket client)")
    print(f"{'server':16} {'tx/s':>10} {'rtt p50':>9} {'rtt p99':>9}   {'tx ratio':>9}")
    base = loaded("multi", "redis-server", "tx_per_sec")
    for name in servers:
        tx = loaded("multi", name, "tx_per_sec")
        p50, p99 = loaded("multi", name, "rtt_p50_us"), loaded("multi", name, "rtt_p99_us")
        print(f"{name:16} {tx:10.0f} {p50:9.1f} {p99:9.1f}   {tx / base:9.2f}")

if glob.glob(os.path.join(out, "scan-*.json")):
    print("\nSCAN COUNT 1000, one full iteration (seconds; keys returned per distinct key; the "
          "longest call, ms)")
    print(f"{'server':16} {'keys':>9} {'seconds':>9} {'calls':>7} {'returned/key':>13} "
          f"{'longest':>8}")
    for name in servers:
        keys, wall = loaded("scan", name, "keys"), loaded("scan", name, "seconds")
        calls, returned = loaded("scan", name, "calls"), loaded("scan", name, "returned")
        longest = loaded("scan", name, "longest_call_ms")
        print(f"{name:16} {keys:9.0f} {wall:9.3f} {calls:7.0f} {returned / keys:13.3f} "
              f"{longest:8.2f}")

# What each side used (cores: on-CPU seconds per wall second over the run; the client's from
# its user and system time, the server's from its threads' schedstat) and, for memspin, TAP
# frames per request each way (from `stats` before and after the run, prefill included).
print(f"\nCPU use (cores) and memspin's {net.upper()} frames per request, medians")
print(f"{'workload':12} {'server':16} {'client':>7} {'server':>7} {'in/req':>7} {'out/req':>7} {'req/in':>7}")
for kind in ["seed", "pipelined", "latency", "throughput", "multi", "scan"]:
    for name in servers:
        client, server, fin, fout = [], [], [], []
        for path in glob.glob(os.path.join(out, f"{kind}-{name}-*.cpu")):
            wall, user, system, cpu_ns, wall_ns = open(path).read().split()
            client.append((float(user) + float(system)) / float(wall))
            server.append(int(cpu_ns) / int(wall_ns))
            base = path[:-len(".cpu")]
            try:
                a, b = ({l.split()[0]: l.split()[1] for l in open(base + f".stats{i}") if len(l.split()) == 2}
                        for i in (0, 1))
                reqs = sum(int(b[k]) - int(a[k]) for k in ("cmd_get", "cmd_set"))
                if reqs > 0:
                    rx, tx = f"memspin_{net}_rx_frames", f"memspin_{net}_tx_frames"
                    fin.append((int(b[rx]) - int(a[rx])) / reqs)
                    fout.append((int(b[tx]) - int(a[tx])) / reqs)
            except (OSError, KeyError, ValueError):
                pass
        if not client:
            continue
        inv = 1 / median(fin) if fin else float("nan")
        print(f"{kind:12} {name:16} {median(client):7.2f} {median(server):7.2f} {median(fin):7.3f} {median(fout):7.3f} {inv:7.1f}")
PY
if [ -n "$profile" ]; then
  for w in pipelined throughput; do
    [ -s "$profile/$w/perf.data" ] || continue
    step "where memspin's worker's samples went ($w, round 1; perf script, inlined frames)"
    perf script -i "$profile/$w/perf.data" -F comm,tid,ip,sym,dso 2>/dev/null >"$profile/$w/script.txt"
    python3 scripts/profile-groups.py "$profile/$w/script.txt"
  done
fi
} 2>&1 | results_summary
printf '\nper-run CSV, JSON, CPU and stats files in %s\n' "$out"
