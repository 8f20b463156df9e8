#!/usr/bin/env python3
"""Where a worker's perf samples went: reads `perf script -F comm,tid,ip,sym,dso` output of a
`perf record --call-graph dwarf` of one memspin worker thread (the file named as the argument)
and prints each group's share, largest first. Used by bench-efficiency.sh and bench-resp.sh
(PROFILE=DIR)."""
import collections, re, sys
# Each sample's stack, leaf first, is put in the first group that claims one of its frames
# (kernel frames by the system call they are under).
USER = [
    (r"__GI___libc_write|__libc_write\b", "write(2) of frames: the system call"),
    (r"__GI___libc_read|__libc_read\b", "read(2) of frames"),
    (r"__GI___poll|__poll\b", "sleeping and waking (poll)"),
    (r"clock_gettime|vdso", "the clock"),
    (r"\bstore::|hashbrown", "the store"),
    (r"protocol::resp::request", "RESP: parsing commands (protocol::resp)"),
    (r"protocol::resp::reply|protocol::resp::", "RESP: encoding replies (protocol::resp)"),
    (r"server::engine::resp", "RESP: the adapter (server::engine::resp)"),
    (r"\bprotocol::", "parsing requests, writing replies (protocol)"),
    (r"server::engine|server::conn", "the engine (executing, replies)"),
    (r"smoltcp::", "smoltcp"),
    (r"netstack::", "the connection table (netstack)"),
    (r"server::", "the worker loop, idle policy, stats"),
]
def kernel_group(kernel, user):
    u = " ".join(user[:6])
    if re.search(r"\b(__GI___libc_write|__libc_write|write)\b", u):
        if re.search(r"tcp_v[46]_rcv|ip_rcv|ip6_rcv|__netif_receive_skb|process_backlog", kernel):
            return "write(2) of frames: the client's TCP receive inside it"
        if re.search(r"tun_get_user|tun_chr_write|tun_build_skb", kernel):
            return "write(2) of frames: the TAP's work per frame"
        return "write(2) of frames: the system call"
    if re.search(r"\b(__GI___libc_read|__libc_read|read)\b", u):
        return "read(2) of frames"
    if re.search(r"poll", u):
        return "sleeping and waking (poll)"
    if "clock_gettime" in u:
        return "the clock"
    return "kernel, other (interrupts, softirqs)"
def group(frames):
    first_user = next((i for i, (_, dso) in enumerate(frames) if "kernel" not in dso and dso != "[unknown]"), len(frames))
    if first_user > 0:
        kernel = " ".join(sym for sym, _ in frames[:first_user])
        return kernel_group(kernel, [sym for sym, _ in frames[first_user:]])
    for sym, _ in frames:
        for pattern, name in USER:
            if re.search(pattern, sym):
                return name
    return "other"
counts, frames = collections.Counter(), []
def flush():
    global frames
    if frames:
        counts[group(frames)] += 1
    frames = []
for line in open(sys.argv[1]):
    if not line.strip() or not line[0].isspace():
        flush()
        continue
    m = re.match(r"\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
    if m:
        frames.append((re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)), m.group(2)))
flush()
total = sum(counts.values())
print(f"{total} samples of memspin's worker")
for name, n in counts.most_common():
    print(f"{100 * n / total:6.1f} %  {name}")
