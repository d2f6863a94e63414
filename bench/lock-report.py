#!/usr/bin/env python3
"""Turns the raw files of bench/compare into the lock benchmark report.

usage: lock-report.py RAW_DIR OUT_PREFIX key=value...
writes OUT_PREFIX.md (tables with ratios: the standalone systems, then the three-member
ones), .json (every run and the medians) and .png (acquire-latency distributions of
scenarios A and D per system, drawn with matplotlib: bench/compare runs this script from
a venv that has it).
"""
import glob
import json
import math
import os
import re
import statistics
import sys

from benchlib import read_env  # bench/benchlib.py, next to this script

raw, prefix = sys.argv[1:3]
params = dict(a.split("=", 1) for a in sys.argv[3:])
SYSTEMS = params.get("systems", "zlock zlock-recipe zlock-reacquire zk zk-combined redis redis-aof etcd").split()
NAME = {
    "zlock": "zlock (native)",
    "zlock-recipe": "zlock (recipe)",
    "zlock-reacquire": "zlock (native, combined requests)",
    "zk": "ZooKeeper",
    "zk-combined": "ZooKeeper (combined, C only)",
    "redis": "Redis (no persistence)",
    "redis-aof": "Redis (AOF always)",
    "etcd": "etcd",
    "zlock-ens": "zlock ×3 (native)",
    "zlock-ens-reacquire": "zlock ×3 (native, combined requests)",
    "zlock-ens-recipe": "zlock ×3 (recipe)",
    "zk-ens": "ZooKeeper ×3",
    "etcd-ens": "etcd ×3",
    "redis-repl": "Redis + replica (AOF always, WAIT 1)",
    "zlock-tls": "zlock TLS (native)",
    "zk-tls": "ZooKeeper TLS",
    "zlock-ens-tls": "zlock ×3 TLS (native)",
    "zk-ens-tls": "ZooKeeper ×3 TLS",
    "zk-netty": "ZooKeeper (Netty)",
    "zk-ens-netty": "ZooKeeper ×3 (Netty)",
}
SHORT = {"zlock": "zlock", "zlock-recipe": "zlock recipe", "zlock-reacquire": "combined", "zk": "ZK", "zk-combined": "ZK combined", "redis": "Redis", "redis-aof": "Redis AOF", "etcd": "etcd",
         "zlock-ens": "zlock×3", "zlock-ens-reacquire": "combined×3", "zlock-ens-recipe": "zlock recipe×3", "zk-ens": "ZK×3", "etcd-ens": "etcd×3",
         "redis-repl": "Redis+replica", "zlock-tls": "zlock TLS", "zk-tls": "ZK TLS",
         "zlock-ens-tls": "zlock×3 TLS", "zk-ens-tls": "ZK×3 TLS", "zk-netty": "ZK Netty",
         "zk-ens-netty": "ZK×3 Netty"}
ENSEMBLE = [s for s in ("zlock-ens", "zlock-ens-reacquire", "zlock-ens-recipe", "zk-ens", "etcd-ens", "redis-repl",
                         "zlock-ens-tls", "zk-ens-tls", "zk-ens-netty")]
# The TLS systems and the plain ones they are measured against (the cost of TLS).
TLS_OF = {"zlock-tls": "zlock", "zk-tls": "zk", "zlock-ens-tls": "zlock-ens", "zk-ens-tls": "zk-ens"}
# ZooKeeper in plain text on the Netty factory its TLS needs (the control of zk-tls).
NETTY_OF = {"zk-netty": "zk", "zk-ens-netty": "zk-ens"}
TLS_STORES = ("TLS on the client port (`secureClientPort`, PEM stores, `ssl.clientAuth=need`; "
              "the bench's sessions present a client certificate; EC P-256 certificates made for the run)")
ZLOCK_DURABLE = "WAL fdatasync before each reply (group commit); locks survive a crash and a restart"
DURABILITY = {
    "zlock": ZLOCK_DURABLE,
    "zlock-recipe": ZLOCK_DURABLE,
    "zlock-reacquire": ZLOCK_DURABLE,
    "zk": "forceSync=yes (default): txn log fsync before each reply (group commit)",
    "zk-combined": "as ZooKeeper",
    "redis": "none: `save \"\"`, `appendonly no`; a restart forgets every lock and the counter",
    "redis-aof": "`appendonly yes`, `appendfsync always`: AOF fsync before each reply",
    "etcd": "one member, defaults: Raft WAL fsync before each commit (batched)",
    "zlock-ens": "3 members: a write is acknowledged once a majority has it in its fsync'd Raft log",
    "zlock-ens-reacquire": "as zlock ×3",
    "zlock-ens-recipe": "as zlock ×3",
    "zk-ens": "3 members, forceSync=yes: acknowledged once a quorum has fsync'd it",
    "etcd-ens": "3 members, defaults: acknowledged once a majority has fsync'd its WAL",
    "redis-repl": "a primary and one replica, both `appendonly yes`, `appendfsync always`; the "
                  "primary fsyncs before it replies, the replica acknowledges `WAIT` once it has "
                  "the write in memory (it does not fsync first); asynchronous replication, so a "
                  "failover can still lose a lock whose WAIT had not returned",
    "zlock-tls": "as zlock",
    "zk-tls": "as ZooKeeper",
    "zlock-ens-tls": "as zlock ×3",
    "zk-ens-tls": "as ZooKeeper ×3",
    "zk-netty": "as ZooKeeper",
    "zk-ens-netty": "as ZooKeeper ×3",
}
LOCK = {
    "zlock": "zlock client, `Mutex` on the native lock path: one request creates the node and "
             "answers granted or queued; the server pushes the grant (no getChildren, no watch)",
    "zlock-recipe": "zlock client, `Mutex` through the standard recipe (Curator InterProcessMutex: "
                    "create, getChildren, watch the predecessor)",
    "zlock-reacquire": "as zlock (native); in A, B and D each cycle after a contender's first is "
                       "`Mutex::reacquire`: release and re-queue in one request (acquire figures "
                       "are then whole cycles); in C the counter's write and the release are one "
                       "multi (`MutexGuard::release_with`: setData fenced by the lock node, then "
                       "its delete)",
    "zk": "zlock client, `Mutex` recipe (Curator InterProcessMutex semantics)",
    "zk-combined": "as ZooKeeper, C only: the counter's write and the release in one multi "
                   "(`MutexGuard::release_with`), the trick zlock (combined requests) uses in C",
    "redis": "`SET key token NX PX 60000`, Lua compare-and-delete; waiters poll",
    "redis-aof": "`SET key token NX PX 60000`, Lua compare-and-delete; waiters poll",
    "etcd": "v3 Lock API (etcd-client crate), lease per session (TTL 30 s, kept alive)",
    "zlock-ens": "as zlock (native); sessions spread over the members (session i starts at member i mod 3)",
    "zlock-ens-reacquire": "as zlock (native, combined requests), sessions spread over the members",
    "zlock-ens-recipe": "as zlock (recipe), sessions spread over the members",
    "zk-ens": "as ZooKeeper, sessions spread over the members",
    "etcd-ens": "as etcd, the client given every member's endpoint",
    "redis-repl": "as Redis, against the primary, each lock write (acquire, release) followed by "
                  "`WAIT 1 5000` (as Redisson does with replicas)",
    "zlock-tls": "as zlock (native), over " + TLS_STORES,
    "zk-tls": "as ZooKeeper, over " + TLS_STORES + "; `serverCnxnFactory` Netty (ZooKeeper's TLS "
              "needs it; its plain port is then Netty's too), Debian's libnetty-java",
    "zlock-ens-tls": "as zlock ×3 (native), over " + TLS_STORES + " on every member, and TLS between "
                     "the members (`sslQuorum=true`, `ssl.quorum.*` PEM stores)",
    "zk-ens-tls": "as ZooKeeper ×3, over " + TLS_STORES + " on every member (Netty), and TLS between "
                  "the members (`sslQuorum=true`, `ssl.quorum.*` PEM stores)",
    "zk-netty": "as ZooKeeper, in plain text, on `serverCnxnFactory` Netty (the factory ZooKeeper TLS "
                "needs; its default is NIO): the control that separates the cost of TLS from the factory's",
    "zk-ens-netty": "as ZooKeeper ×3, in plain text, on Netty (as ZooKeeper (Netty))",
}


def load(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


def get(d, path):
    for k in path.split("."):
        if d is None:
            return None
        d = d.get(k)
    return d


machine = read_env(os.path.join(raw, "machine.env"))
configs = {}
for p in sorted(glob.glob(os.path.join(raw, "config-*"))):
    sysname = re.sub(r"^config-|\.[a-z]+$", "", os.path.basename(p))
    configs[sysname] = open(p).read()
# The TLS systems' log lines showing they came up with TLS (bench/compare, sys_tls_evidence).
tls_evidence = {}
for p in sorted(glob.glob(os.path.join(raw, "tls-evidence-*.txt"))):
    tls_evidence[re.sub(r"^tls-evidence-|\.txt$", "", os.path.basename(p))] = open(p).read()

# runs[sys][scenario] = [result of each measured run]; warm-up (r0) discarded
runs = {s: {} for s in SYSTEMS}
for s in SYSTEMS:
    for sc in "abcdgh":
        rs = []
        for p in sorted(glob.glob(os.path.join(raw, f"{s}-{sc}-r*.json"))):
            if p.endswith("-r0.json"):
                continue
            d = load(p)
            if d is not None:
                rs.append(d)
        runs[s][sc.upper()] = rs
    for r in ("mutex", "naive"):
        d = load(os.path.join(raw, f"{s}-e-{r}.json"))
        if d is not None:
            runs[s]["E-" + r] = d
    d = load(os.path.join(raw, f"{s}-f.json"))
    if d is not None:
        runs[s]["F"] = d


def med(s, sc, path):
    vals = [get(r, path) for r in runs[s].get(sc, [])]
    vals = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(vals) if vals else None


def median_run(s, sc, path):
    """The run whose `path` figure is the median (for its distribution)."""
    rs = [r for r in runs[s].get(sc, []) if get(r, path) is not None]
    if not rs:
        return None
    rs.sort(key=lambda r: get(r, path))
    return rs[(len(rs) - 1) // 2]


# (label, scenario, json path, scale, unit, higher_is_better)
ROWS = [
    ("A: cycles/s (1 client, 1 lock)", "A", "cycles_per_sec", 1, "", True),
    ("A: acquire p50", "A", "acquire_us.p50", 1e-3, " ms", False),
    ("A: acquire p99", "A", "acquire_us.p99", 1e-3, " ms", False),
    ("A: acquire p99.9", "A", "acquire_us.p999", 1e-3, " ms", False),
    ("B: cycles/s (16 clients, 16 locks)", "B", "cycles_per_sec", 1, "", True),
    ("B: acquire p50", "B", "acquire_us.p50", 1e-3, " ms", False),
    ("B: acquire p99", "B", "acquire_us.p99", 1e-3, " ms", False),
    ("B: acquire p99.9", "B", "acquire_us.p999", 1e-3, " ms", False),
    ("C: wall time (101 clients x 1 counter increment)", "C", "wall_secs", 1e3, " ms", False),
    ("C: connect time (101 sessions)", "C", "connect_secs", 1e3, " ms", False),
    ("D: hand-overs/s (101 clients x 20 cycles)", "D", "handovers_per_sec", 1, "", True),
    ("D: wait p50", "D", "acquire_us.p50", 1e-3, " ms", False),
    ("D: wait p99", "D", "acquire_us.p99", 1e-3, " ms", False),
    ("D: fairness, wait p99/p50", "D", "wait_p99_over_p50", 1, "", False),
    ("D: longest wait", "D", "longest_wait_us", 1e-3, " ms", False),
    ("G: cycles/s (1,000 sessions, 1,000 locks)", "G", "cycles_per_sec", 1, "", True),
    ("G: acquire p99", "G", "acquire_us.p99", 1e-3, " ms", False),
    ("H: cycles/s (1,000 sessions, 10 locks)", "H", "cycles_per_sec", 1, "", True),
    ("H: acquire p99", "H", "acquire_us.p99", 1e-3, " ms", False),
]


def fmt(v, unit=""):
    if v is None:
        return "n/a"
    a = abs(v)
    if a >= 1000:
        s = f"{v:,.0f}"
    elif a >= 100:
        s = f"{v:.0f}"
    elif a >= 10:
        s = f"{v:.1f}"
    elif a >= 1:
        s = f"{v:.2f}"
    else:
        s = f"{v:.3f}"
    return s + unit


def ratio(z, o, higher):
    if z is None or o is None or z == 0 or o == 0:
        return "n/a"
    r = z / o if higher else o / z
    return (f"{r:.2f}" if 0.1 <= r < 100 else fmt(r)) + "x"


medians = {s: {} for s in SYSTEMS}


def table(systems, ratios):
    """One A-D table: a column per system, then the ratio columns."""
    rows = []
    hdr = "| | " + " | ".join(NAME[s] for s in systems)
    hdr += "".join(f" | {SHORT[z]}/{SHORT[o]}" for z, o in ratios)
    rows.append(hdr + " |")
    rows.append("|" + "---|" * (1 + len(systems) + len(ratios)))
    for label, sc, path, scale, unit, higher in ROWS:
        vals = {s: med(s, sc, path) for s in set(systems) | {x for pair in ratios for x in pair}}
        if all(vals[s] is None for s in systems):
            continue  # a scenario this run left out
        for s in systems:
            medians[s][f"{sc}.{path}"] = vals[s]
        cells = [fmt(None if vals[s] is None else vals[s] * scale, unit) for s in systems]
        line = f"| {label} | " + " | ".join(cells)
        line += "".join(" | " + ratio(vals[z], vals[o], higher) for z, o in ratios)
        rows.append(line + " |")
    if not any(runs[s].get("C") for s in systems):
        return rows  # C left out of this run
    cells = []
    for s in systems:
        rs = runs[s].get("C", [])
        if not rs:
            cells.append("n/a")
        else:
            ok = all(r.get("ok") for r in rs)
            fc = sorted({r.get("final_counter") for r in rs})
            cells.append(("ok" if ok else "**FAIL**") + f" ({len(rs)} runs, counter {'/'.join(map(str, fc))})")
    line = "| C: mutual exclusion, no duplicate, final counter = 101 | " + " | ".join(cells)
    line += "".join(" | " for _ in ratios)
    rows.append(line + " |")
    return rows


STANDALONE = [s for s in SYSTEMS if s not in ENSEMBLE]
ENS = [s for s in SYSTEMS if s in ENSEMBLE]
others = [s for s in STANDALONE if not s.startswith("zlock") and s not in TLS_OF and s not in NETTY_OF]
# Ratio columns: the native path against every peer, then the recipe against ZooKeeper.
RATIOS = [("zlock", o) for o in others] if "zlock" in STANDALONE else []
if "zlock-recipe" in SYSTEMS and "zk" in SYSTEMS:
    RATIOS.append(("zlock-recipe", "zk"))
if "zlock-tls" in SYSTEMS and "zk-tls" in SYSTEMS:
    RATIOS.append(("zlock-tls", "zk-tls"))
headline = table(STANDALONE, RATIOS) if STANDALONE else []
ENS_RATIOS = []
for z in ("zlock-ens", "zlock-ens-reacquire"):
    for o in ("zk-ens", "etcd-ens", "redis-repl"):
        if z in ENS and o in ENS:
            ENS_RATIOS.append((z, o))
if "zlock-ens-recipe" in ENS and "zk-ens" in ENS:
    ENS_RATIOS.append(("zlock-ens-recipe", "zk-ens"))
if "zlock-ens-tls" in ENS and "zk-ens-tls" in ENS:
    ENS_RATIOS.append(("zlock-ens-tls", "zk-ens-tls"))
ens_headline = table(ENS, ENS_RATIOS) if ENS else []
# The price of replication: each replicated system against the same system standalone.
OWN = [(e, s) for e, s in (("zlock-ens", "zlock"), ("zlock-ens-reacquire", "zlock-reacquire"),
                           ("zlock-ens-recipe", "zlock-recipe"), ("zk-ens", "zk"), ("etcd-ens", "etcd"),
                           ("redis-repl", "redis-aof"), ("zlock-ens-tls", "zlock-tls"), ("zk-ens-tls", "zk-tls"))
       if e in SYSTEMS and s in SYSTEMS]
own_rows = []
if OWN:
    own_rows.append("| | " + " | ".join(f"{SHORT[e]} / {SHORT[s]}" for e, s in OWN) + " |")
    own_rows.append("|" + "---|" * (1 + len(OWN)))
    for label, sc, path, _scale, _unit, higher in ROWS:
        if path not in ("cycles_per_sec", "handovers_per_sec"):
            continue
        cells = [ratio(med(e, sc, path), med(s, sc, path), higher) for e, s in OWN]
        if all(c == "n/a" for c in cells):
            continue
        own_rows.append(f"| {label} | " + " | ".join(cells) + " |")


def times(z, o, sc, path, higher=True):
    a, b = med(z, sc, path), med(o, sc, path)
    if not a or not b:
        return None
    return a / b if higher else b / a


def verdict(parts):
    shown = ", ".join(f"{what} {'n/a' if r is None else f'{r:.2f}x'}" for what, r, _ in parts)
    met = all(r is not None and r >= need for _, r, need in parts)
    return shown + (": met." if met else ": **not met**.")


THROUGHPUT = (("A", "cycles_per_sec"), ("B", "cycles_per_sec"), ("D", "handovers_per_sec"))
goals = []
if "zlock-recipe" in SYSTEMS and "zk" in SYSTEMS:
    goals.append("- Issue 4, the standard recipe at least 3x Apache ZooKeeper on A, B and D. This run: "
                 + verdict([(sc, times("zlock-recipe", "zk", sc, p), 3) for sc, p in THROUGHPUT]))
for z in ("zlock", "zlock-reacquire"):
    if z not in SYSTEMS:
        continue
    parts = []
    if "zk" in SYSTEMS:
        parts.append(("A vs ZooKeeper (goal 4x)", times(z, "zk", "A", "cycles_per_sec"), 4))
    if "redis" in SYSTEMS:
        # "within 2x of Redis without persistence": zlock/Redis at least 0.5
        parts.append(("A vs Redis without persistence (goal 0.5x)", times(z, "redis", "A", "cycles_per_sec"), 0.5))
    if "redis-aof" in SYSTEMS:
        for sc, p in THROUGHPUT:
            if med(z, sc, p) is not None:
                parts.append((f"{sc} vs Redis AOF (goal >1x)", times(z, "redis-aof", sc, p), 1.0001))
        if med(z, "C", "wall_secs") is not None:
            parts.append(("C vs Redis AOF (goal >1x)", times(z, "redis-aof", "C", "wall_secs", False), 1.0001))
    peers_c = [med(o, "C", "wall_secs") for o in others if med(o, "C", "wall_secs")]
    if med(z, "C", "wall_secs") is not None and peers_c:
        parts.append(("C vs the best peer (goal 4x)", min(peers_c) / med(z, "C", "wall_secs"), 4))
    if "redis" in SYSTEMS:
        parts.append(("D vs Redis without persistence (goal >1x)", times(z, "redis", "D", "handovers_per_sec"), 1.0001))
    if parts:
        goals.append(f"- Issue 5, {NAME[z]}: " + verdict(parts))
ens_goals = []
if "zlock-ens" in ENS and "zk-ens" in ENS:
    ens_goals.append("- Issue 11, the 3-member zlock ensemble (native path) at least 3x the 3-member ZooKeeper "
                     "ensemble on A, B and D. This run: "
                     + verdict([(sc, times("zlock-ens", "zk-ens", sc, p), 3) for sc, p in THROUGHPUT]))
if "zlock-ens" in ENS and "etcd-ens" in ENS:
    parts = []
    for label, sc, path, _scale, _unit, higher in ROWS:
        if path == "wait_p99_over_p50":
            continue
        if med("zlock-ens", sc, path) is None and med("etcd-ens", sc, path) is None:
            continue  # a scenario this run left out
        parts.append((label.split(" (")[0], times("zlock-ens", "etcd-ens", sc, path, higher), 1.0001))
    behind = [f"{w} {r:.2f}x" for w, r, _ in parts if r is not None and r < 1.0001]
    ens_goals.append("- Issue 11, the 3-member zlock ensemble (native path) ahead of the 3-member etcd cluster "
                     "on every row: " + ("met." if not behind and all(r is not None for _, r, _ in parts)
                                         else "**not met**: behind on " + (", ".join(behind) or "rows with no figure") + "."))
if "zlock-ens" in ENS and "redis-repl" in ENS:
    ens_goals.append("- Issue 25, the 3-member zlock ensemble (native path) ahead of Redis with a replica "
                     "and WAIT 1 on A, B and D. This run: "
                     + verdict([(sc, times("zlock-ens", "redis-repl", sc, p), 1.0001) for sc, p in THROUGHPUT]))

# ---- the floor model (inputs from `zlock-bench floor`, run by bench/compare)
floor_in = load(os.path.join(raw, "floor.json"))
floor_rows = []
if floor_in:
    r, f, f3 = floor_in["rtt_us"], floor_in["fsync_us"], floor_in["fsync3_us"]
    # Per write, in µs. Standalone: the request's way in and the reply's way out (one
    # round trip) and one fsync. Ensemble (three logs on this disk at once: f3): client to
    # member, the leader sends to the followers, a follower's fsync (the leader's own runs
    # meanwhile), its ack, the reply: 2 round trips; a client on a follower adds the
    # forward and the commit notice: 3.
    lead, follow = 2 * r + f3, 3 * r + f3
    spread = (lead + 2 * follow) / 3  # sessions spread over the three members
    model = {
        # (system, scenario): (floor as a rate, how)
        ("zlock", "A"): (1e6 / (2 * (r + f)), "2 writes of r + f"),
        ("zlock", "B"): (16e6 / (2 * (r + f)), "16 clients x 2 writes of r + f (latency only: CPU not modelled)"),
        ("zlock", "D"): (1e6 / (r + f), "release to grant: r + f"),
        ("zlock-ens", "A"): (1e6 / (2 * follow), "2 writes from a follower, 3r + f3 each "
                             "(from the leader: 2r + f3, floor " + fmt(1e6 / (2 * lead)) + ")"),
        ("zlock-ens", "B"): (16e6 / (2 * spread), "16 clients spread over 3 members x 2 writes "
                             "(latency only: CPU not modelled)"),
        ("zlock-ens", "D"): (1e6 / (3 * r + f3), "release to grant, members spread: about 3r + f3"),
    }
    for (sy, sc), (fl, how) in model.items():
        if sy not in SYSTEMS:
            continue
        path = dict((a, b) for a, b in THROUGHPUT)[sc]
        m = med(sy, sc, path)
        floor_rows.append(f"| {NAME[sy]} | {sc} | {fmt(fl)} | {fmt(m)} | "
                          f"{'n/a' if m is None else f'{m / fl:.2f}'} | {how} |")
    if "zlock-ens" in SYSTEMS:
        parts = []
        for sc in "ABD":
            fl = model[("zlock-ens", sc)][0]
            m = med("zlock-ens", sc, dict(THROUGHPUT)[sc])
            parts.append((sc, None if m is None else m / fl * 1.5, 1))
        ens_goals.append("- Issue 25, each figure of the 3-member zlock ensemble (native path) within 1.5x "
                         "of its floor (see Floor). This run, 1.5 x measured / floor: " + verdict(parts))
goals += ens_goals


# ---- the cost of TLS: each TLS system against the same system in plain text, and
# zlock's lead over ZooKeeper over TLS against its lead in plain text
def pct(r):
    return "n/a" if r is None else f"{r:.2f}x ({(r - 1) * 100:+.0f}%)"


tls_rows, tls_goal_parts = [], {"cost": [], "margin": []}
NETTY_COLS = any(n in SYSTEMS for n in NETTY_OF)
for setup, z, k in (("standalone", "zlock", "zk"), ("3 members", "zlock-ens", "zk-ens")):
    zt, kt, kn = z + "-tls", k + "-tls", k + "-netty"
    if zt not in SYSTEMS and kt not in SYSTEMS:
        continue
    for sc, path in THROUGHPUT:
        if all(med(x, sc, path) is None for x in (z, zt, k, kt)):
            continue  # a scenario this run left out
        label = next(lab for lab, s_, p_, *_ in ROWS if s_ == sc and p_ == path)
        cost_z, cost_k = times(zt, z, sc, path), times(kt, k, sc, path)
        lead_tls, lead_plain = times(zt, kt, sc, path), times(z, k, sc, path)
        kept = None if lead_tls is None or lead_plain is None else lead_tls / lead_plain
        line = (f"| {setup}, {label} | {pct(cost_z)} | {pct(cost_k)} | "
                f"{'n/a' if lead_tls is None else f'{lead_tls:.2f}x'} | "
                f"{'n/a' if lead_plain is None else f'{lead_plain:.2f}x'} | "
                f"{'n/a' if kept is None else f'{kept:.2f}'} |")
        if NETTY_COLS:
            # Against ZooKeeper in plain text on Netty: its TLS alone, and zlock's lead.
            lead_netty = times(z, kn, sc, path)
            kept_n = None if lead_tls is None or lead_netty is None else lead_tls / lead_netty
            line += (f" {pct(times(kt, kn, sc, path))} | {pct(times(kn, k, sc, path))} | "
                     f"{'n/a' if lead_netty is None else f'{lead_netty:.2f}x'} | "
                     f"{'n/a' if kept_n is None else f'{kept_n:.2f}'} |")
        tls_rows.append(line)
        if sc in "BD":
            tls_goal_parts["cost"].append((f"{setup} {sc}", cost_z, 0.85))
        tls_goal_parts["margin"].append((f"{setup} {sc}", kept, 1.0))
if tls_rows:
    head = ("| | zlock TLS / zlock plain | ZooKeeper TLS / ZooKeeper plain | zlock/ZK over TLS | "
            "zlock/ZK plain | lead kept (TLS lead / plain lead) |")
    if NETTY_COLS:
        head += (" ZooKeeper TLS / ZooKeeper plain on Netty | ZooKeeper plain: Netty / NIO | "
                 "zlock/ZK plain on Netty | lead kept against ZK on Netty |")
    tls_rows = [head, "|" + "---|" * (head.count("|") - 1)] + tls_rows
    if tls_goal_parts["cost"]:
        goals.append("- TLS and authentication, must-show 5: TLS costs zlock (native) under 15% on B and D "
                     "(zlock TLS / zlock plain at least 0.85x). This run: " + verdict(tls_goal_parts["cost"]))
    if tls_goal_parts["margin"]:
        goals.append("- TLS and authentication, must-show 5: zlock over TLS ahead of ZooKeeper over TLS by at "
                     "least its plain-text margin (zlock/ZK over TLS divided by zlock/ZK plain, at least 1) on "
                     "A, B and D. This run: " + verdict(tls_goal_parts["margin"]))
goal_line = ("Goals (targets, not thresholds):\n\n" + "\n".join(goals)) if goals else None
viol = {s: sum(r.get("violations", 0) for sc in "ABCD" for r in runs[s].get(sc, [])) for s in SYSTEMS}

# ---- E
e_rows = []
e_rows.append("| system | lock | waiters | requests / hand-over | responses / hand-over | "
              "watch events / hand-over | Redis SET NX / hand-over | bytes / hand-over (up + down) |")
e_rows.append("|---|---|---|---|---|---|---|---|")
for s in SYSTEMS:
    for r in ("mutex", "naive"):
        d = runs[s].get("E-" + r)
        if d is None:
            continue
        lock = r if s == "zk" or s.startswith("zlock") else "standard"
        lock = {"mutex": "`Mutex`", "naive": "`NaiveLock`"}.get(lock, "standard")
        e_rows.append(
            f"| {NAME[s]} | {lock} | {d['waiters']} | {fmt(d['requests_per_handover'])} | "
            f"{fmt(d.get('responses_per_handover'))} | {fmt(d.get('watch_events_per_handover'))} | "
            f"{fmt(d.get('redis_set_nx_per_handover'))} | {fmt(d['bytes_per_handover'])} "
            f"({fmt(d['bytes_up_per_handover'])} + {fmt(d['bytes_down_per_handover'])}) |"
        )

# ---- F
f_rows = []
f_rows.append("| system | sessions | connect | queue built in | server RSS: idle / sessions open / queue built | "
              "hand-overs/s from the full queue | hand-over p50 / p99 |")
f_rows.append("|---|---|---|---|---|---|---|")


def mb(kb):
    return "n/a" if kb is None else f"{kb / 1024:.0f} MB"


for s in SYSTEMS:
    d = runs[s].get("F")
    if d is None and s in ("zlock-reacquire", "zk-combined"):
        continue  # F queues each waiter once: nothing to combine, not run
    if d is None:
        why = "failed"
        errp = os.path.join(raw, f"{s}-f.err")
        if os.path.exists(errp):
            m = re.search(r"cut off after (\d+) s", open(errp).read())
            if m:
                why = f"did not finish within {m.group(1)} s"
        f_rows.append(f"| {NAME[s]} | {why} | | | | | |")
        continue
    q = f"{fmt(d['queue_secs'])} s" + ("" if d["queue_complete"] else f" (only {d['queued']} queued)")
    if d.get("queue_is_polling"):
        q += " (no queue: all polling)"
    if not d["handovers"]:
        ho = "none: no waiter got the lock within 60 s of the release | n/a"
    else:
        ho = fmt(d["handovers_per_sec"])
        if d["handovers"] < int(params.get("f_handovers", 0)):
            ho += f" (only {d['handovers']} hand-overs, then 60 s without one)"
        ho += f" | {fmt(d['handover_us']['p50'] / 1e3)} / {fmt(d['handover_us']['p99'] / 1e3)} ms"
    f_rows.append(
        f"| {NAME[s]} | {d['sessions']:,} | {fmt(d['connect_secs'])} s | {q} | "
        f"{mb(d['server_rss_kb_before'])} / {mb(d['server_rss_kb_connected'])} / "
        f"{mb(d['server_rss_kb_queued'])} | {ho} |"
    )

# ---- plot: acquire-latency percentile curves for A and D (matplotlib)
COLORS = {"zlock": "#d62728", "zlock-recipe": "#ff9896", "zlock-reacquire": "#8c564b", "zk": "#1f77b4",
          "zk-combined": "#aec7e8", "redis": "#2ca02c", "redis-aof": "#98df8a", "etcd": "#9467bd",
          "zlock-ens": "#d62728", "zlock-ens-reacquire": "#8c564b", "zlock-ens-recipe": "#ff9896",
          "zk-ens": "#1f77b4", "etcd-ens": "#9467bd"}


def xpos(p):
    """Percentile on a log scale of 1 / (1 - p): 0, 90, 99, 99.9 ... equally spaced; max at the end."""
    return 4.7 if p >= 100 else math.log10(1 / (1 - p / 100))


def plot(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [("standalone", STANDALONE), ("three members", ENS)]
    groups = [(g, ss) for g, ss in groups if ss]
    fig, axes = plt.subplots(2, len(groups), figsize=(7.5 * len(groups), 9), squeeze=False)
    for col, (group, systems) in enumerate(groups):
        for row, (title, sc, key) in enumerate((
                ("A: uncontended acquire (1 client, 1 lock)", "A", "cycles_per_sec"),
                (f"D: wait for the lock ({params.get('d_clients', 101)} clients, one lock)", "D", "handovers_per_sec"))):
            ax = axes[row][col]
            for s in systems:
                r = median_run(s, sc, key)
                if r and r.get("acquire_dist"):
                    pts = [(xpos(p), max(v, 1) / 1e3) for p, v in r["acquire_dist"]]
                    ax.plot([x for x, _ in pts], [y for _, y in pts], label=NAME[s],
                            color=COLORS.get(TLS_OF.get(s, s)), linewidth=1.8,
                            linestyle=":" if s in TLS_OF else
                            "--" if s in ("zlock-recipe", "zlock-ens-recipe", "zk-combined", "redis-aof") else "-")
            ax.set_yscale("log")
            ax.set_title(f"{title}, {group}", fontsize=10)
            ticks = [(0, "0%"), (90, "90%"), (99, "99%"), (99.9, "99.9%"), (99.99, "99.99%"), (100, "max")]
            ax.set_xticks([xpos(p) for p, _ in ticks], [lab for _, lab in ticks])
            ax.set_xlabel("percentile of acquires")
            ax.set_ylabel("ms")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(f"Lock benchmark {machine.get('date_utc', '?')[:10]}: acquire latency, median run of each system",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


has_ad = any(runs[s].get(sc) for s in SYSTEMS for sc in "ABCD")
has_e = any(runs[s].get("E-mutex") for s in SYSTEMS)
scenarios = params.get("scenarios", "a b c d e f").split()
if has_ad:
    plot(prefix + ".png")

# ---- Markdown
date = machine.get("date_utc", "?")
md = []
md.append(f"# Lock benchmark, {date[:10]}" + ("" if len(scenarios) == 6 else
          " (scenarios " + ", ".join(x.upper() for x in scenarios) + " only)"))
md.append("")
md.append(f"Machine: {machine.get('nproc', '?')} cores ({machine.get('cpu_model', '?')}), "
          f"{machine.get('mem_total', '?')} RAM, {machine.get('kernel', '?')}; load average "
          f"{machine.get('loadavg_start', '?')} at the start, {machine.get('loadavg_end', '?')} at the end "
          "(the cores are shared with other work). All systems on 127.0.0.1, each on a fresh temporary "
          "data directory, running side by side and measured one at a time: A-D in rounds, every "
          "system in turn in each round, so that bursts of other work spread over all systems. zlock " + machine.get("zlock_git", "?") + ", "
          + "Apache ZooKeeper " + machine.get("zookeeper", "?") + " on " + machine.get("java", "?") + ", Redis "
          + machine.get("redis", "?").split()[0] + ", etcd " + machine.get("etcd", "?") + ".")
md.append("")
md.append(f"Produced by `bench/compare` in {params.get('script_secs', '?')} s. Scenarios A-D: one warm-up round "
          f"(discarded), then {params.get('runs')} rounds; the tables show the median of each figure. "
          f"E and F: one run. Each client is its own session / connection, in one bench process "
          f"(`zlock-bench lock`). Raw figures: `{os.path.basename(prefix)}.json`"
          + (f"; latency plot: `{os.path.basename(prefix)}.png`." if has_ad else "."))
md.append("")
md.append("## Configurations and their durability")
md.append("")
md.append("| system | lock | durability of an acknowledged acquire |")
md.append("|---|---|---|")
for s in SYSTEMS:
    md.append(f"| {NAME[s]} | {LOCK[s]} | {DURABILITY[s]} |")
md.append("")
md.append("Redis waiters retry `SET NX` with an exponential backoff from "
          f"{params.get('redis_backoff_min_us')} µs doubling to {params.get('redis_backoff_max_ms')} ms, "
          "with jitter (a short backoff that favours Redis' throughput; common libraries wait 50-200 ms). "
          "The exact configs are in the JSON report.")
md.append("")
md.append("## A-D")
md.append("")
md.append("Ratios are how many times better zlock is: zlock/other for throughput, other/zlock for "
          "latencies, times and the p99/p50 spread, so above 1 always means zlock is better. "
          "`zlock/...` columns are the native path; `zlock recipe/ZK` is the standard recipe, the same "
          "requests Curator and kazoo send.")
md.append("")
md += headline
md.append("")
if ens_headline:
    md.append("### Replicated, on one machine (zlock ensemble, ZooKeeper ensemble, etcd cluster: three "
              "members; Redis: a primary and a replica)")
    md.append("")
    md.append("Every member on this machine's 2 cores, so replication competes with the clients and "
              "the other members for the CPUs; the connect string names all three members and the "
              "sessions start on successive members.")
    md.append("")
    md += ens_headline
    if own_rows:
        md.append("")
        md.append("The price of replication: each replicated system's throughput as a fraction of the same "
                  "system standalone in this run (Redis with a replica against Redis with AOF):")
        md.append("")
        md += own_rows
    md.append("")
if tls_rows:
    md.append("### The cost of TLS")
    md.append("")
    md.append("Each TLS system's throughput against the same system in plain text in this run (below "
              "1x: TLS costs; the percentage is the change), and zlock's lead over ZooKeeper over TLS "
              "against its lead in plain text (above 1: zlock's lead grows over TLS). ZooKeeper over "
              "TLS runs on Netty (`serverCnxnFactory`, which its TLS needs), plain ZooKeeper on its "
              "default NIO factory, so ZooKeeper's column is the cost of its TLS set-up, Netty "
              "included. The ensembles have TLS on the client ports and between the members. That they "
              "came up with TLS is checked in their logs (the lines are in the JSON report, "
              "`tls_evidence`): ZooKeeper's Netty listener `secure: true`, and for its ensemble `Using "
              "TLS encrypted quorum communication` and the members' TLS handshakes; zlock's members "
              "`links between members dial=\"tls\" accept=\"tls only\"`; zlock's and ZooKeeper's "
              "client ports take only TLS clients with a certificate."
              + (" The last four columns take ZooKeeper in plain text on Netty (`zk-netty`, "
                 "`zk-ens-netty`) as the baseline instead: the cost of ZooKeeper's TLS alone, what "
                 "the factory changes, and zlock's lead against that baseline." if NETTY_COLS else ""))
    md.append("")
    md += tls_rows
    md.append("")
md.append("Mutual-exclusion violations seen by the bench over all runs of A-D: "
          + ", ".join(f"{NAME[s]} {viol[s]}" for s in SYSTEMS) + ". "
          "C: each client reads the counter stored in the system under test (a znode, a Redis key, "
          "an etcd key), writes it back plus one, under the lock; all 101 start together after "
          "connecting (connect time measured apart). D: wait = time from calling acquire to holding "
          "the lock; a low p99/p50 means waits are even (FIFO), a high one means some clients "
          "wait far longer than the typical one. Redis has no queue: the client that has just "
          "released usually takes the lock again at once while the others sleep in their backoff, "
          "hence its tiny p50 and long tail.")
md.append("")
if goal_line:
    md.append(goal_line)
    md.append("")
md.append("ZooKeeper's connect time in C: 101 sessions connecting at once overflow its listen backlog "
          "(`clientPortListenBacklog` unset, so 50) and the kernel retries the dropped SYNs after "
          "1 s; zlock's backlog is 1024. With connects spread out (A, B) ZooKeeper connects in "
          "milliseconds.")
md.append("")
if floor_rows:
    md.append("## Floor")
    md.append("")
    md.append(f"What a lock write cannot go below on this machine, from `zlock-bench floor` at the start of "
              f"the run (medians of {floor_in['samples']} samples each): fdatasync of a small record in "
              f"zlock's log f = {floor_in['fsync_us']:.0f} µs alone, f3 = {floor_in['fsync3_us']:.0f} µs with "
              f"three logs syncing at once on this disk (an ensemble's members), and a loopback round trip "
              f"r = {floor_in['rtt_us']:.1f} µs between two threads (thread wake-ups, parsing and the "
              "state machine are not in it). Each figure as a fraction of its floor:")
    md.append("")
    md.append("| system | scenario | floor | measured | measured / floor | floor from |")
    md.append("|---|---|---|---|---|---|")
    md += floor_rows
    md.append("")
md.append("## E: herd (one lock, every contender in a loop, through a counting proxy)")
md.append("")
md.append(f"{params.get('e_clients')} clients on one lock ({int(params.get('e_clients', 33)) - 1} waiting "
          f"at any time), counted over the first {int(params.get('e_clients', 33)) * int(params.get('e_cycles', 5))} "
          "hand-overs while everyone is still contending. ZooKeeper protocol: requests and responses are "
          "frames counted in the proxy (watch notifications are responses too; pings included); Redis: "
          "commands the bench sent (SET NX attempts + release scripts); etcd: RPCs the bench sent (lock + "
          "unlock; the wait happens in the server). Bytes: everything on the wire both ways, TCP payload.")
md.append("")
md += e_rows
md.append("")
md.append("## F: scale")
md.append("")
md.append(f"{int(params.get('f_sessions', 0)):,} sessions: one holds a lock, all others wait on it; then "
          f"{params.get('f_handovers')} hand-overs from the full queue (each waiter releases as soon as it "
          "has the lock). Server memory is VmRSS of the server process (ZooKeeper: a JVM whose heap is "
          "sized by the JVM's defaults). Waiters join in batches of 250, each once the previous one "
          "is queued. A fair ZooKeeper-protocol queue of n costs O(n^2) bytes to build (every joining "
          "waiter lists all contenders, as Curator does). "
          + ("" if int(params.get("f_sessions", 0)) >= 10000 else
             "The issue asks for 10,000 sessions; `bench/compare` uses 2,000 by default so that the "
             "whole run stays within 10 minutes (with 10,000, F alone takes about 6 minutes and etcd "
             "does not finish within 300 s). The full size: `SCENARIOS=f F_SESSIONS=10000 "
             "OUT_SUFFIX=-f10000 bench/compare`, reported in `lock-<date>-f10000.md`."))
md.append("")
md += f_rows
md.append("")

def drop_section(title):
    if title in md:
        i = md.index(title)
        j = next((k for k in range(i + 1, len(md)) if md[k].startswith("## ")), len(md))
        del md[i:j]


if not has_ad:
    drop_section("## A-D")
if not has_e:
    drop_section("## E: herd (one lock, every contender in a loop, through a counting proxy)")
if "f" not in scenarios:
    drop_section("## F: scale")
md.append("## Settings")
md.append("")
md.append(", ".join(f"{k}={v}" for k, v in params.items()))
md.append("")
with open(prefix + ".md", "w") as f:
    f.write("\n".join(md))

report = {
    "machine": machine,
    "params": params,
    "configs": configs,
    "durability": {s: DURABILITY[s] for s in SYSTEMS},
    "lock": {s: LOCK[s] for s in SYSTEMS},
    "medians": medians,
    "runs": runs,
    "headline_markdown": "\n".join(headline),
    "ensemble_headline_markdown": "\n".join(ens_headline),
    "tls_cost_markdown": "\n".join(tls_rows),
    "tls_evidence": tls_evidence,
}
with open(prefix + ".json", "w") as f:
    json.dump(report, f, indent=1, sort_keys=True)
    f.write("\n")

# ---- the headline, for the README
HEAD = [r[0] for r in ROWS if r[0].split(" (")[0] in (
    "A: cycles/s", "A: acquire p50", "A: acquire p99", "B: cycles/s", "C: wall time",
    "D: hand-overs/s", "D: fairness, wait p99/p50", "D: longest wait")]
HEAD.append("C: mutual exclusion, no duplicate, final counter = 101")
short = headline[:2] + [l for l in headline[2:] if any(l.startswith(f"| {h} |") for h in HEAD)]
ens_short = ens_headline[:2] + [l for l in ens_headline[2:] if any(l.startswith(f"| {h} |") for h in HEAD)]
head_md = [
    f"### Lock benchmark ({date[:10]}, {machine.get('nproc', '?')} cores {machine.get('cpu_model', '?')}, "
    f"{machine.get('mem_total', '?')} RAM, shared)",
    "",
    f"Medians of {params.get('runs')} runs, `bench/compare`; full report: "
    f"[bench/results/{os.path.basename(prefix)}.md](bench/results/{os.path.basename(prefix)}.md). "
    "Ratios: above 1 means zlock is better (throughput zlock/other, latency other/zlock); `zlock/...` "
    "is the native lock path, `zlock recipe/ZK` the standard recipe. "
    "zlock and ZooKeeper fsync before acknowledging; Redis without persistence does not, Redis AOF "
    "fsyncs every write; etcd fsyncs its WAL.",
    "",
] + short + [""] + (["Three members each (zlock ensemble, ZooKeeper ensemble, etcd cluster), all on this machine:", ""]
                     + ens_short + [""] if ens_short else []) + ([goal_line, ""] if goal_line else [])
if all(sc in scenarios for sc in "abcd") and has_ad:
    with open(os.path.join(os.path.dirname(prefix), "LOCK-HEADLINE.md"), "w") as f:
        f.write("\n".join(head_md))
