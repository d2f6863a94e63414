#!/usr/bin/env python3
"""Turns the raw files of bench/server-compare.sh into the Markdown and JSON reports.

usage: server-report.py RAW_DIR OUT.md OUT.json key=value...
"""
import glob
import json
import os
import re
import statistics
import sys

from benchlib import read_env  # bench/benchlib.py, next to this script

raw, md_path, json_path = sys.argv[1:4]
params = dict(a.split("=", 1) for a in sys.argv[4:])
SYS = ("zlock", "zk", "zlock-ens", "zk-ens", "zlock-metrics",
       "zlock-tls", "zk-tls", "zlock-ens-tls", "zk-ens-tls")
NAME = {
    "zlock": "zlock",
    "zk": "ZooKeeper",
    "zlock-ens": "zlock ×3",
    "zk-ens": "ZooKeeper ×3",
    "zlock-metrics": "zlock, metrics on",
    "zlock-tls": "zlock, TLS",
    "zk-tls": "ZooKeeper, TLS",
    "zlock-ens-tls": "zlock ×3, TLS",
    "zk-ens-tls": "ZooKeeper ×3, TLS",
}
LOADED = ("zlock", "zk")  # the memory / restart phase runs standalone only
PHASES = ("create", "setData", "getData", "delete")


def num(v):
    try:
        f = float(v)
        return int(f) if f.is_integer() else f
    except (TypeError, ValueError):
        return None


def read_json(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


machine = read_env(os.path.join(raw, "machine.env"))

# ---- operations: runs[sys][clients][phase] = [ {ops_per_sec, p50_us, p99_us, ...}, ...]
ops = {s: {} for s in SYS}
cpu_runs = {}  # sys -> clients -> [ {server_cpu_us_per_op, server_vol_csw_per_op} per run ]
for path in sorted(glob.glob(os.path.join(raw, "ops-*-c*-r*.jsonl"))):
    m = re.search(r"ops-([\w-]+?)-c(\d+)-r(\d+)\.jsonl$", path)
    s, clients, run = m.group(1), int(m.group(2)), int(m.group(3))
    la = None
    try:
        la = float(open(path[: -len(".jsonl")] + ".loadavg").read().strip())
    except (OSError, ValueError):
        pass
    lines = [json.loads(line) for line in open(path)]
    cpu = read_env(path[: -len(".jsonl")] + ".cpu")
    if cpu and lines:
        total = sum(d["ops"] for d in lines)
        tck = float(cpu.get("clk_tck", 100))
        cpu_runs.setdefault(s, {}).setdefault(clients, []).append(
            {
                "run": run,
                "ops": total,
                "server_cpu_us_per_op": float(cpu["cpu_ticks"]) / tck * 1e6 / total,
                "server_vol_csw_per_op": float(cpu["vol_csw"]) / total,
            }
        )
    for d in lines:
        d["run"] = run
        d["loadavg_1min_before"] = la
        ops[s].setdefault(clients, {}).setdefault(d["phase"], []).append(d)

cpu_summary = {s: {} for s in SYS}
for s in SYS:
    for clients, runs in cpu_runs.get(s, {}).items():
        measured = [r for r in runs if r["run"] > 0]
        if measured:
            cpu_summary[s][str(clients)] = {
                "server_cpu_us_per_op": statistics.median(r["server_cpu_us_per_op"] for r in measured),
                "server_vol_csw_per_op": statistics.median(r["server_vol_csw_per_op"] for r in measured),
                "all_runs": measured,
            }

summary = {s: {} for s in SYS}
for s in SYS:
    for clients, phases in ops[s].items():
        for phase, runs in phases.items():
            measured = [r for r in runs if r["run"] > 0]  # run 0 is the warm-up
            summary[s].setdefault(str(clients), {})[phase] = {
                "runs": len(measured),
                "ops_per_sec": statistics.median(r["ops_per_sec"] for r in measured),
                "p50_us": statistics.median(r["p50_us"] for r in measured),
                "p99_us": statistics.median(r["p99_us"] for r in measured),
                "ops_per_sec_all_runs": [round(r["ops_per_sec"]) for r in measured],
                "p99_us_all_runs": [r["p99_us"] for r in measured],
                "loadavg_all_runs": [r.get("loadavg_1min_before") for r in measured],
                "warmup": next(
                    (
                        {k: r[k] for k in ("ops_per_sec", "p50_us", "p99_us")}
                        for r in runs
                        if r["run"] == 0
                    ),
                    None,
                ),
            }

# ---- load / memory / restart
load = {}
for s in LOADED:
    e = {k: num(v) if num(v) is not None else v for k, v in read_env(os.path.join(raw, f"load-{s}.env")).items()}
    e["load"] = read_json(os.path.join(raw, f"load-{s}.json"))
    e["restart_ready"] = read_json(os.path.join(raw, f"restart-{s}.json"))
    e["start_empty_ready"] = read_json(os.path.join(raw, f"start-empty-{s}.json"))
    load[s] = e

configs = {}
for path in sorted(glob.glob(os.path.join(raw, "zoo-*.cfg"))):
    configs[os.path.basename(path)] = open(path).read()

result = {
    "date_utc": machine.get("date_utc"),
    "machine": machine,
    "params": params,
    "method": {
        "ops": "zlock bench ops (closed loop, one request in flight per session, 100-byte data); "
        "both servers up side by side, measured one at a time, alternating zlock/ZooKeeper per run; "
        "run 0 = warm-up (discarded); each figure = median over the measured runs",
        "load": "zlock bench load (pipelined creates, nodes under /zlock-load/b<j>/n<k>, 10,000 per parent); "
        "one server at a time on a fresh dataDir",
        "restart": "SIGTERM, wait for exit, start the same command on the same dataDir; time from process "
        "start until a new session reads /zlock-load/b0/n0 (zlock bench ready)",
    },
    "configs": configs,
    "ops": summary,
    "server_cpu": cpu_summary,
    "ops_raw": ops,
    "load": load,
}
with open(json_path, "w") as f:
    json.dump(result, f, indent=1, sort_keys=False)
    f.write("\n")

# ---------------------------------------------------------------------------- Markdown


def fmt(v, nd=0):
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    return f"{v:,.{nd}f}"


def ratio(a, b):
    if not a or not b:
        return None
    return a / b


rows = []  # (metric, zlock, zk, ratio, how)
ens_rows = []  # the same for the three-member systems


def row(metric, z, k, higher_better, nd=0, unit_scale=1.0, into=None):
    into = rows if into is None else into
    zv = None if z is None else z * unit_scale
    kv = None if k is None else k * unit_scale
    r = ratio(zv, kv) if higher_better else ratio(kv, zv)
    into.append((metric, fmt(zv, nd), fmt(kv, nd), "n/a" if r is None else f"{r:.2f}", "zlock/ZK" if higher_better else "ZK/zlock"))


for zs, ks, into in (("zlock", "zk", rows), ("zlock-ens", "zk-ens", ens_rows)):
    for clients in ("1", "32"):
        for phase in PHASES:
            z = summary[zs].get(clients, {}).get(phase)
            k = summary[ks].get(clients, {}).get(phase)
            if not z or not k:
                continue
            c = f"{clients} client{'s' if clients != '1' else ''}"
            row(f"{phase}, {c}: throughput (ops/s)", z["ops_per_sec"], k["ops_per_sec"], True, into=into)
            row(f"{phase}, {c}: p50 latency (ms)", z["p50_us"], k["p50_us"], False, 3, 1e-3, into=into)
            row(f"{phase}, {c}: p99 latency (ms)", z["p99_us"], k["p99_us"], False, 3, 1e-3, into=into)
    for clients in ("1", "32"):
        z, k = cpu_summary[zs].get(clients), cpu_summary[ks].get(clients)
        if z and k and into is ens_rows:  # the standalone CPU rows follow below
            c = f"{clients} client{'s' if clients != '1' else ''}"
            row(f"server CPU time per operation, all three members, {c}, all 4 phases (µs)",
                z["server_cpu_us_per_op"], k["server_cpu_us_per_op"], False, 1, into=into)

for clients in ("1", "32"):
    z, k = cpu_summary["zlock"].get(clients), cpu_summary["zk"].get(clients)
    if z and k:
        c = f"{clients} client{'s' if clients != '1' else ''}"
        row(f"server CPU time per operation, {c}, all 4 phases (µs)", z["server_cpu_us_per_op"], k["server_cpu_us_per_op"], False, 1)
        row(f"server voluntary context switches per operation, {c}", z["server_vol_csw_per_op"], k["server_vol_csw_per_op"], False, 2)

# The cost of the metrics: zlock with its Prometheus endpoint on against zlock without,
# the same runs in turn.
metrics_rows = []
for clients in ("1", "32"):
    for phase in PHASES:
        on = summary["zlock-metrics"].get(clients, {}).get(phase)
        off = summary["zlock"].get(clients, {}).get(phase)
        if not on or not off:
            continue
        c = f"{clients} client{'s' if clients != '1' else ''}"
        runs_on = ", ".join(f"{v:,}" for v in on["ops_per_sec_all_runs"])
        runs_off = ", ".join(f"{v:,}" for v in off["ops_per_sec_all_runs"])
        metrics_rows.append(
            f"| {phase}, {c}: throughput (ops/s) | {fmt(on['ops_per_sec'])} | {fmt(off['ops_per_sec'])} "
            f"| {on['ops_per_sec'] / off['ops_per_sec']:.2f} | {runs_on} | {runs_off} |"
        )
        metrics_rows.append(
            f"| {phase}, {c}: p50 latency (ms) | {fmt(on['p50_us'] / 1e3, 3)} | {fmt(off['p50_us'] / 1e3, 3)} "
            f"| {off['p50_us'] / on['p50_us']:.2f} | | |"
        )

# The cost of TLS: each system over TLS against itself in plain text (the same runs in
# turn), and zlock's lead over ZooKeeper over TLS against its lead in plain text.
tls_rows = []
for label, (z, zt, k, kt) in (
    ("standalone", ("zlock", "zlock-tls", "zk", "zk-tls")),
    ("three members", ("zlock-ens", "zlock-ens-tls", "zk-ens", "zk-ens-tls")),
):
    for clients in ("1", "32"):
        for phase in PHASES:
            v = [summary[s].get(clients, {}).get(phase) for s in (z, zt, k, kt)]
            if not all(v):
                continue
            zp, ztp, kp, ktp = (x["ops_per_sec"] for x in v)
            c = f"{clients} client{'s' if clients != '1' else ''}"
            lead_plain, lead_tls = zp / kp, ztp / ktp
            tls_rows.append(
                f"| {label}, {phase}, {c} | {fmt(zp)} → {fmt(ztp)} | {ztp / zp:.2f} "
                f"| {fmt(kp)} → {fmt(ktp)} | {ktp / kp:.2f} | {lead_plain:.2f} | {lead_tls:.2f} "
                f"| {lead_tls / lead_plain:.2f} |"
            )

lz, lk = load["zlock"], load["zk"]


def loaded_count(e):
    return e.get("znodes_loaded")


def load_secs(e):
    return e["load"]["secs"] if e.get("load") else None


def load_rate(e):
    return e["load"]["ops_per_sec"] if e.get("load") else None


mem_rows = []


def mrow(metric, z, k, higher_better, nd=0, unit_scale=1.0):
    global rows
    saved = rows
    rows = mem_rows
    row(metric, z, k, higher_better, nd, unit_scale)
    rows = saved


MiB = 1 / 1024.0
mrow("znodes in the server after the load (mntr zk_znode_count)", loaded_count(lz), loaded_count(lk), True)
mrow("load time (s)", load_secs(lz), load_secs(lk), False, 1)
mrow("load rate (creates/s)", load_rate(lz), load_rate(lk), True)
mrow("VmRSS, empty server after start (MiB)", lz.get("rss_empty_kb"), lk.get("rss_empty_kb"), False, 0, MiB)
mrow("VmRSS right after the load (MiB)", lz.get("rss_loaded_kb"), lk.get("rss_loaded_kb"), False, 0, MiB)
mrow("VmRSS 5 s after the load (MiB)", lz.get("rss_settled_kb"), lk.get("rss_settled_kb"), False, 0, MiB)
mrow("VmHWM, peak RSS during the load (MiB)", lz.get("hwm_loaded_kb"), lk.get("hwm_loaded_kb"), False, 0, MiB)


def per_node(e):
    n, a, b = e.get("znodes_loaded"), e.get("rss_settled_kb"), e.get("rss_empty_kb")
    if not n or a is None or b is None:
        return None
    return (a - b) * 1024 / n


mrow("RSS growth per znode, 5 s after the load (bytes)", per_node(lz), per_node(lk), False)
mrow("data directory on disk after the load (MiB)", lz.get("data_dir_kb"), lk.get("data_dir_kb"), False, 0, MiB)
mrow("stop time, SIGTERM until exit (s)", lz.get("stop_secs"), lk.get("stop_secs"), False, 2)
mrow("restart time, process start until a node is read (s)", lz.get("restart_secs"), lk.get("restart_secs"), False, 2)
mrow("znodes after the restart", lz.get("znodes_restarted"), lk.get("znodes_restarted"), True)
mrow("VmRSS after the restart (MiB)", lz.get("rss_restarted_kb"), lk.get("rss_restarted_kb"), False, 0, MiB)
mrow("cold start of an empty server until a read (s)", lz.get("start_empty_secs"), lk.get("start_empty_secs"), False, 2)


def table(rs):
    out = [
        "| metric | zlock | ZooKeeper 3.8 | ratio (>1 = zlock better) | ratio is |",
        "|---|---:|---:|---:|---|",
    ]
    for m, z, k, r, how in rs:
        out.append(f"| {m} | {z} | {k} | {r} | {how} |")
    return "\n".join(out)


# Goals from the issue.
goal_lines = []
for phase in ("create", "setData", "delete"):
    z = summary["zlock"].get("32", {}).get(phase)
    k = summary["zk"].get("32", {}).get(phase)
    if z and k:
        r = z["ops_per_sec"] / k["ops_per_sec"]
        goal_lines.append(
            f"- {phase}, 32 clients: zlock {z['ops_per_sec']:,.0f} ops/s vs ZooKeeper {k['ops_per_sec']:,.0f} ops/s "
            f"= **{r:.2f}x** (target ≥ 2x: {'met' if r >= 2 else 'NOT met'})"
        )
for label, key in (("right after the load", "rss_loaded_kb"), ("5 s after the load", "rss_settled_kb")):
    a, b = lz.get(key), lk.get(key)
    if a and b:
        f = a / b
        goal_lines.append(
            f"- memory with {fmt(loaded_count(lz))} / {fmt(loaded_count(lk))} znodes, VmRSS {label}: zlock {a / 1024:,.0f} MiB "
            f"vs ZooKeeper {b / 1024:,.0f} MiB = **{f:.3f}** of ZooKeeper's (target ≤ 0.33: {'met' if f <= 1 / 3 else 'NOT met'})"
        )
heap = lk.get("zk_heap_used_after_gc_kb")
if heap and lz.get("rss_settled_kb"):
    after_gc = lk.get("rss_after_gc_kb")
    after_gc = f"{after_gc / 1024:,.0f} MiB" if after_gc else "n/a"
    goal_lines.append(
        f"- for scale: ZooKeeper's live Java heap after a full GC (jcmd GC.run, then GC.heap_info) was "
        f"{heap / 1024:,.0f} MiB (its VmRSS after that GC: {after_gc}); zlock's whole process "
        f"(VmRSS 5 s after the load) was {lz['rss_settled_kb'] / 1024:,.0f} MiB = {lz['rss_settled_kb'] / heap:.2f} x that heap"
    )

notes = []
for s in LOADED:
    e = load[s]
    if e.get("load_rc") not in (0, None):
        notes.append(
            f"- **{NAME[s]}: the load did not finish** (exit status {e.get('load_rc')}, cut off after "
            f"{params.get('load_timeout')} s or failed); the server held {fmt(e.get('znodes_loaded'))} znodes. "
            "Figures for it are for that count, not extrapolated."
        )
    if e.get("znodes_restarted") != e.get("znodes_loaded"):
        notes.append(f"- {NAME[s]}: znode count after restart ({e.get('znodes_restarted')}) differs from before ({e.get('znodes_loaded')}).")

M = machine
cfg_text = ""
for name, text in configs.items():
    cfg_text += f"\n`{name}`:\n\n```\n{text.rstrip()}\n```\n"

spread = []
for s in SYS:
    for clients in ("1", "32"):
        for phase in PHASES:
            x = summary[s].get(clients, {}).get(phase)
            if x:
                las = ", ".join("n/a" if v is None else f"{v:.2f}" for v in x["loadavg_all_runs"])
                spread.append(
                    f"| {NAME[s]} | {clients} | {phase} | {', '.join(f'{v:,}' for v in x['ops_per_sec_all_runs'])} "
                    f"| {', '.join(f'{v / 1000:.2f}' for v in x['p99_us_all_runs'])} | {las} |"
                )

load_section = "" if params.get("skip_load") else f"""## Load {fmt(int(params.get('load_count', 0)))} znodes of 100 bytes, memory, restart

`zlock bench load --count {params.get('load_count')} --clients {params.get('load_clients')} --pipeline {params.get('load_pipeline')}`
(creates pipelined, {params.get('load_clients')} sessions x {params.get('load_pipeline')} in flight; nodes /zlock-load/b<j>/n<k>, 10,000
children per parent, so {fmt(int(params.get('load_count', 0)) // 10000)} parents on top). One server at a time, each on a fresh
dataDir. Memory is VmRSS of the server process from /proc/<pid>/status (for ZooKeeper the java
process). Restart: SIGTERM, wait until the process is gone, start the same command on the same
dataDir; the time runs from the process start until a new session has read /zlock-load/b0/n0.

**Ratio column: >1 means zlock is better** (for memory and times: ZooKeeper/zlock).

{table(mem_rows)}

"""
ens_section = "" if not ens_rows else f"""
### Three members: a zlock ensemble and a ZooKeeper 3.8 ensemble

The same runs against three-member ensembles on this machine (one zoo.cfg with three
`server.N` lines, tickTime=2000, initLimit=10, syncLimit=5; every member in the connect string,
sessions starting on successive members). A write is acknowledged once a majority has it on
disk; reads are served by the member the session is on. All members share the 2 CPUs with the
client. Server CPU is the sum over the three members.

{table(ens_rows).replace("| metric | zlock | ZooKeeper 3.8 |", "| metric | zlock ×3 | ZooKeeper 3.8 ×3 |")}
"""
metrics_section = "" if not metrics_rows else f"""
### The cost of the metrics

zlock with its Prometheus endpoint on (`--metrics-port 0`: every request records its
read or update latency summary, the counters count as always) against the same zlock
without, measured in turn with the others. **Ratio: on/off for throughput, off/on for
latency; 1.00 = no cost**, and the per-run figures show how far apart runs of one server
already are (the noise).

| metric | metrics on | metrics off | ratio | on, per run | off, per run |
|---|---:|---:|---:|---|---|
{chr(10).join(metrics_rows)}
"""
tls_section = "" if not tls_rows else f"""
### The cost of TLS

The same operations over TLS (`TLS=1`): zlock and ZooKeeper 3.8 with a `secureClientPort`
(PEM stores, `ssl.clientAuth=need`; ZooKeeper on the Netty factory its TLS needs), the
three-member systems with TLS between members too (`sslQuorum=true`), every session
presenting a client certificate. Throughput (ops/s), plain → TLS, and TLS/plain for each;
then zlock/ZooKeeper in plain text and over TLS, and their quotient (**lead kept**: 1.00 =
zlock's lead is the same over TLS).

| setting | zlock plain → TLS | zlock TLS/plain | ZooKeeper plain → TLS | ZK TLS/plain | zlock/ZK plain | zlock/ZK TLS | lead kept |
|---|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(tls_rows)}
"""
jvm_note = "the JVM flags above" if params.get("zk_jvmflags") else 'no JVM flags, as the Debian package does (JAVA_OPTS="")'
md = f"""# zlock vs Apache ZooKeeper 3.8: server benchmark

- date (UTC): {M.get('date_utc')}
- machine: {M.get('nproc')} CPUs ({M.get('cpu_model')}), {M.get('mem_total')} RAM, {M.get('kernel')}, disk: {M.get('disk_free_tmp')}
- load average (1/5/15 min) at start: {M.get('loadavg_start')}, at end: {M.get('loadavg_end')} (the machine is shared; see "Caveats")
- zlock: git {M.get('zlock_git')} (release build); uncommitted files in crates/ at the time: {M.get('zlock_dirty_files') or 'none'}
- ZooKeeper: {M.get('zk_jar')}, {M.get('java')}, started as
  `java {params.get('zk_jvmflags') or ''}-cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg`
  with {jvm_note}: heap = the JVM's ergonomic default, MaxHeapSize {M.get('zk_max_heap')} (1/4 of RAM), {M.get('zk_gc')}
- command: `bench/server-compare.sh` (took {params.get('script_secs')} s)

Both servers get the same zoo.cfg (only the port and dataDir differ; zlock ignores
`admin.enableServer`, which it does not have). Both fsync the log before acknowledging a write
(ZooKeeper `forceSync=yes` default; zlock group commit with fdatasync).

## Operations: `zlock bench ops`, median of {params.get('runs')} runs

Closed loop: each session keeps one request in flight; 100-byte data; {params.get('ops_n1')} znodes per phase with 1
client, {params.get('ops_n32')} per client with 32 clients. Both servers ran side by side but were measured one at a
time, alternating zlock and ZooKeeper run by run; a warm-up run of each was discarded. Each cell is the median over
the runs of that figure (ops/s, p50 and p99 taken separately). Server CPU time is utime + stime of the server
process (/proc/<pid>/stat) over a whole `bench ops` run divided by its operations: it does not depend on how
much CPU the shared machine had left, so it is the steadier way to compare the two.

**Ratio column: >1 always means zlock is better** — for throughput it is zlock/ZooKeeper, for latency
ZooKeeper/zlock (the "ratio is" column says which).

{table(rows)}
{ens_section}{metrics_section}{tls_section}
{load_section}## Against the issue's goals

{chr(10).join(goal_lines)}
{chr(10).join(notes)}

## Spread of the measured runs

| server | clients | phase | ops/s per run | p99 ms per run | 1-min load average before each run |
|---|---:|---|---|---|---|
{chr(10).join(spread)}

## Caveats

- The benchmark client (`zlock bench`, one tokio process) runs on the same {M.get('nproc')}-CPU machine as the
  server, so client and server compete for CPU, more so with 32 clients and in the pipelined load. The same
  client drives both servers.
- The machine is shared: other work (builds, tests) may run at the same time. The 1-minute load average
  before each run is in the table above; alternating the two servers run by run spreads such noise over
  both, and the median of {params.get('runs')} runs damps it, but p99 figures in particular stay noisy.
- ZooKeeper runs in a JVM: the warm-up run is discarded, but the JIT may keep improving over longer runs.
- ZooKeeper's VmRSS depends on its heap settings: with the default heap (MaxHeapSize {M.get('zk_max_heap')}),
  G1 lets the heap grow well beyond the live data before collecting. Its live heap after a full GC is given
  above for scale; VmRSS is what the machine actually gives the process.
- The load is bulk ingest with {params.get('load_pipeline')} requests in flight per session, not the closed loop of
  the operations table.

## Configs
{cfg_text}
Raw figures: the JSON file next to this one.
"""
with open(md_path, "w") as f:
    f.write(md)
