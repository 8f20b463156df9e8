#!/usr/bin/python3
"""Hostile-client probes against a memcached-compatible server (run by probe-abuse.sh).

One pattern per run, against a server that was just started: the pattern's setup, then the
attack held for a few seconds while a victim connection asks `version` every 20 ms and the
server's resident memory is sampled every 50 ms; then, with the attack still going, SIGTERM,
and the time until the process is gone. Prints one JSON object.

Patterns (each a way one client can try to take memory or time from the others):
  multiget  one `get k k k ...` line (3,000 times a key holding 1,000,000 bytes), never read
  noread    64 connections each pipelining 200 `get` of that key, never read
  unsent    256 connections each announcing a 1,000,000-byte `set` and sending 100 bytes of it
  skip      a binary frame with an unknown opcode announcing a 4 GiB body, then 1 byte / 10 ms
  forward   16 connections each pipelining 1,024 binary GETs over 64 keys of 1,000,000 bytes,
            all owned by worker 0 of 2 (so connections on worker 1 forward them all), never read
  flood     4 connections pipelining 1,000 small gets per write as fast as the server answers
"""

import argparse
import json
import os
import select
import signal
import socket
import struct
import threading
import time

BIG = 1_000_000
HOLD_S = 3.0


def connect(addr, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(10)
    s.connect(addr)
    return s


def text_call(s, request, end):
    s.sendall(request)
    data = b""
    while not data.endswith(end):
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def set_text(addr, key, size):
    s = connect(addr)
    reply = text_call(s, b"set %s 0 0 %d\r\n" % (key, size) + b"v" * size + b"\r\n", b"\r\n")
    s.close()
    if reply != b"STORED\r\n":
        raise RuntimeError("set %r: %r" % (key, reply))


def binary_get(key):
    # magic, opcode GET, key length, extras, data type, vbucket, body length, opaque, cas
    return struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(key), 0, 0, 0, len(key), 0, 0) + key


M64 = (1 << 64) - 1


def owner_hash(key):
    """memspin's key-owner hash (server/src/engine/forward.rs, owner_hash)."""
    k = 0x9E3779B97F4A7C15
    h = 0x6D656D7370696E21 ^ ((len(key) * k) & M64)
    whole = len(key) // 8 * 8
    for i in range(0, whole, 8):
        w = int.from_bytes(key[i:i + 8], "little")
        h = ((h ^ w) * k) & M64
        h = ((h << 29) | (h >> 35)) & M64
    tail = int.from_bytes(key[whole:] + bytes(8 - len(key[whole:])), "little")
    h = ((h ^ tail) * k) & M64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


# 64 keys that worker 0 of 2 owns: connections on worker 1 forward every GET.
FORWARD_KEYS = [k for k in (b"f%d" % i for i in range(1000)) if owner_hash(k) % 2 == 0][:64]


def rss_bytes(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        return None
    return None


class Victim(threading.Thread):
    """Asks `version` every 20 ms; records each round trip (a timeout counts as 10 s)."""

    def __init__(self, addr):
        super().__init__(daemon=True)
        self.addr = addr
        self.latencies = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self):
        try:
            s = connect(self.addr)
        except OSError:
            self.errors += 1
            return
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                text_call(s, b"version\r\n", b"\r\n")
                self.latencies.append(time.monotonic() - t0)
            except (OSError, ConnectionError):
                self.errors += 1
                self.latencies.append(time.monotonic() - t0)
                try:
                    s.close()
                    s = connect(self.addr)
                except OSError:
                    time.sleep(0.1)
            time.sleep(0.02)


class Sampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            rss = rss_bytes(self.pid)
            if rss is not None:
                self.peak = max(self.peak, rss)
            time.sleep(0.05)


def attack(pattern, addr, stop):
    """Starts the pattern; returns the sockets it holds open (and threads it runs)."""
    held = []
    if pattern == "multiget":
        s = connect(addr, rcvbuf=4096)
        s.sendall(b"get" + b" k" * 3000 + b"\r\n")
        held.append(s)
    elif pattern == "noread":
        for _ in range(64):
            s = connect(addr, rcvbuf=4096)
            s.setblocking(False)
            try:
                s.send(b"get k\r\n" * 200)
            except BlockingIOError:
                pass
            held.append(s)
    elif pattern == "unsent":
        for i in range(256):
            s = connect(addr)
            s.sendall(b"set u%d 0 0 %d\r\n" % (i, BIG) + b"x" * 100)
            held.append(s)
    elif pattern == "skip":
        s = connect(addr)
        s.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0xFE, 0, 0, 0, 0, 0xFFFFFFFF, 0, 0))

        def trickle():
            while not stop.is_set():
                try:
                    s.send(b"x")
                except OSError:
                    return
                time.sleep(0.01)

        threading.Thread(target=trickle, daemon=True).start()
        held.append(s)
    elif pattern == "forward":
        burst = b"".join(binary_get(FORWARD_KEYS[i % 64]) for i in range(1024))
        conns = []
        for _ in range(16):
            s = connect(addr, rcvbuf=4096)
            s.setblocking(False)
            conns.append([s, 0])
            held.append(s)

        def push():
            # Keeps writing each connection's burst as far as the server takes it.
            while not stop.is_set() and any(sent < len(burst) for _, sent in conns):
                for c in conns:
                    try:
                        c[1] += c[0].send(burst[c[1]:])
                    except (BlockingIOError, ValueError):
                        pass
                    except OSError:
                        c[1] = len(burst)
                time.sleep(0.01)

        threading.Thread(target=push, daemon=True).start()
    elif pattern == "flood":
        def flood():
            s = connect(addr)
            s.setblocking(False)
            burst = b"get s\r\n" * 1000
            while not stop.is_set():
                try:
                    s.send(burst)
                except BlockingIOError:
                    pass
                except OSError:
                    return
                select.select([s], [], [], 0.001)
                try:
                    while s.recv(1 << 20):
                        pass
                except (BlockingIOError, OSError):
                    pass

        for _ in range(4):
            threading.Thread(target=flood, daemon=True).start()
    else:
        raise SystemExit("unknown pattern " + pattern)
    return held


def setup(pattern, addr):
    if pattern in ("multiget", "noread"):
        set_text(addr, b"k", BIG)
    elif pattern == "forward":
        for key in FORWARD_KEYS:
            set_text(addr, key, BIG)
    elif pattern == "flood":
        set_text(addr, b"s", 32)


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("pattern")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("pid", type=int)
    args = parser.parse_args()
    addr = (args.host, args.port)

    setup(args.pattern, addr)
    time.sleep(0.3)
    base = rss_bytes(args.pid)
    sampler = Sampler(args.pid)
    sampler.start()
    victim = Victim(addr)
    victim.start()
    time.sleep(0.3)
    stop = threading.Event()
    attack_error = None
    try:
        held = attack(args.pattern, addr, stop)
    except OSError as e:
        attack_error, held = repr(e), []
    time.sleep(HOLD_S)
    victim.stop.set()
    victim.join(timeout=12)
    sampler.stop.set()
    sampler.join()

    t0 = time.monotonic()
    os.kill(args.pid, signal.SIGTERM)
    exit_s = None
    while time.monotonic() - t0 < 30:
        if rss_bytes(args.pid) is None or open("/proc/%d/stat" % args.pid).read().split()[2] == "Z":
            exit_s = time.monotonic() - t0
            break
        time.sleep(0.005)
    stop.set()
    for s in held:
        s.close()

    lat = victim.latencies
    print(json.dumps({
        "pattern": args.pattern,
        "attack_error": attack_error,
        "rss_base_mb": round(base / 2**20, 1) if base else None,
        "rss_growth_mb": round((sampler.peak - base) / 2**20, 1) if base else None,
        "victim_requests": len(lat),
        "victim_errors": victim.errors,
        "victim_p50_ms": round(percentile(lat, 0.5) * 1e3, 2) if lat else None,
        "victim_max_ms": round(max(lat) * 1e3, 2) if lat else None,
        "sigterm_exit_s": round(exit_s, 3) if exit_s is not None else None,
    }))


if __name__ == "__main__":
    main()
