#!/usr/bin/env python3
"""Two zlock builds side by side, measured in alternating rounds: did a change cost speed?

    bench/ab.py OLD_ZLOCK NEW_ZLOCK [--rounds 8]

Build the old one from a worktree, for example
    git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target \
        cargo build --release -p zlock-cli)
    cargo build --release -p zlock-cli -p zlock-bench
    bench/ab.py /tmp/old-target/release/zlock target/release/zlock

Both servers run at once on fresh temp data dirs and free loopback ports; every round
measures each in turn (the order alternates round by round, so both see the same
background load) with the NEW build's clients: lock scenarios A (plain and
--reacquire), B and D with the `zlock-bench` next to NEW_ZLOCK (`zlock-bench lock`;
build it with `-p zlock-bench` too), `zlock bench ops` with 1 and 32 clients, and the server's
CPU time per operation over the 32-client ops run. One warm-up round is discarded. It
prints a markdown table: the median of each figure with its min-max over the rounds (the
run-to-run spread), and new/old.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    client = args.new
    tmp = tempfile.mkdtemp(prefix="zlock-ab-")
    servers = {}
    for name, binary in (("old", args.old), ("new", args.new)):
        port = free_port()
        data = os.path.join(tmp, name)
        os.makedirs(data)
        log = open(os.path.join(tmp, name + ".log"), "w")
        proc = subprocess.Popen(
            [binary, "server", "--data-dir", data, "--port", str(port),
             "--max-client-cnxns", "0"],
            stdout=log, stderr=log)
        servers[name] = (proc, f"127.0.0.1:{port}")
    time.sleep(1.5)

    lock_client = os.path.join(os.path.dirname(os.path.abspath(client)), "zlock-bench")

    def bench(*a):
        # `lock` is zlock-bench's (the Redis / etcd clients are not in zlock); the rest zlock's.
        cmd = [lock_client, *a] if a[0] == "lock" else [client, "bench", *a]
        out = subprocess.run([*cmd, "--json"], capture_output=True,
                             text=True, timeout=600, check=True).stdout
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    figures = {}

    def add(name, key, value):
        figures.setdefault(key, {"old": [], "new": []})[name].append(value)

    started = time.time()
    try:
        for r in range(args.rounds + 1):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for name in order:
                proc, addr = servers[name]
                got = {
                    "A cycles/s": bench("lock", "--server", addr, "--scenario", "a", "--secs", "2"),
                    "A combined cycles/s": bench("lock", "--server", addr, "--scenario", "a",
                                                 "--secs", "2", "--reacquire"),
                    "B cycles/s": bench("lock", "--server", addr, "--scenario", "b", "--secs", "2"),
                    "D hand-overs/s": bench("lock", "--server", addr, "--scenario", "d"),
                }
                ops1 = bench("ops", "--server", addr, "--clients", "1", "--per-client", "3000",
                             "--data-size", "100")
                t0 = cpu_ticks(proc.pid)
                ops32 = bench("ops", "--server", addr, "--clients", "32", "--per-client", "1000",
                              "--data-size", "100")
                cpu_us = (cpu_ticks(proc.pid) - t0) * 1e6 / os.sysconf("SC_CLK_TCK")
                if r == 0:
                    continue
                for key, rows in got.items():
                    row = rows[0]
                    add(name, key, next(v for k, v in row.items() if k.endswith("per_sec")))
                for o in ops1:
                    add(name, f"1 client {o['phase']} ops/s", o["ops_per_sec"])
                for o in ops32:
                    add(name, f"32 clients {o['phase']} ops/s", o["ops_per_sec"])
                add(name, "32 clients: server CPU µs/op (lower is better)",
                    cpu_us / sum(o["ops"] for o in ops32))
            print(f"[{time.time() - started:5.0f}s] round {r}/{args.rounds} done"
                  + (" (warm-up)" if r == 0 else ""), file=sys.stderr)
    finally:
        for proc, _ in servers.values():
            proc.kill()

    print(f"| figure | old: median [min-max] | new: median [min-max] | new/old |")
    print("|---|---|---|---|")
    for key, v in figures.items():
        mo, mn = statistics.median(v["old"]), statistics.median(v["new"])
        fmt = (lambda x: f"{x:.2f}") if "CPU" in key else (lambda x: f"{x:,.0f}")
        print(f"| {key} | {fmt(mo)} [{fmt(min(v['old']))}-{fmt(max(v['old']))}] "
              f"| {fmt(mn)} [{fmt(min(v['new']))}-{fmt(max(v['new']))}] | {mn / mo:.2f} |")


if __name__ == "__main__":
    main()
