#!/usr/bin/env python3
"""The failover benchmark's report (bench/failover.sh): median and worst per system.

    failover-report.py RAW_DIR OUT_PREFIX key=value...

Reads RAW_DIR/<system>-r<round>.json (one `zlock-bench failover` round each) and
machine.env; writes OUT_PREFIX.md and OUT_PREFIX.json.
"""
import glob
import json
import os
import re
import statistics
import sys

raw, prefix = sys.argv[1], sys.argv[2]
settings = dict(a.split("=", 1) for a in sys.argv[3:])
machine = {}
for line in open(os.path.join(raw, "machine.env")):
    k, _, v = line.rstrip("\n").partition("=")
    machine[k] = v
systems = settings.get("systems", "").split()
rounds = {}
for f in glob.glob(os.path.join(raw, "*-r*.json")):
    m = re.match(r"(.+)-r(\d+)\.json$", os.path.basename(f))
    if m:
        rounds.setdefault(m.group(1), []).append((int(m.group(2)), json.load(open(f))))

LABEL = {
    "zlock-ens": "zlock, 3 members (native lock)",
    "zlock-ens-recipe": "zlock, 3 members (recipe)",
    "zk-ens": "Apache ZooKeeper 3.8, 3 members (recipe)",
    "etcd-ens": "etcd 3.4, 3 members (Lock API)",
}


def stats(vals):
    got = [v for v in vals if v is not None]
    return {
        "rounds": len(vals),
        "reached": len(got),
        "median_ms": round(statistics.median(got), 1) if got else None,
        "worst_ms": round(max(got), 1) if got else None,
        "best_ms": round(min(got), 1) if got else None,
    }


summary = {}
for s in systems:
    rs = [d for _, d in sorted(rounds.get(s, []), key=lambda x: x[0])]
    summary[s] = {
        "write": stats([d["write_ms"] for d in rs]),
        "grant": stats([d["grant_ms"] for d in rs]),
        "errors_after": [d["errors_after"] for d in rs],
    }
json.dump({"machine": machine, "settings": settings, "summary": summary,
           "rounds": {s: [d for _, d in sorted(rounds.get(s, []), key=lambda x: x[0])] for s in systems}},
          open(prefix + ".json", "w"), indent=1)


def ms(v):
    return "-" if v is None else f"{v:.0f}"


out = []
sig = settings.get("signal", "KILL")
what = "kill -9 of the leader" if sig == "KILL" else "the leader stopped (SIGTERM, as for maintenance)"
out.append(f"# Failover after {what}, {machine.get('date_utc', '?')[:10]}\n")
out.append(f"Machine: {machine.get('nproc')} cores ({machine.get('cpu_model')}), {machine.get('mem_total')}, "
           f"load average {machine.get('loadavg_start')} at the start, {machine.get('loadavg_end')} at the end; "
           "other engineers were compiling on it during the run, so single figures are noisy. "
           f"ZooKeeper {machine.get('zookeeper')}, etcd {machine.get('etcd')}, zlock {machine.get('zlock_git')}.\n")
out.append(f"Command: `bench/failover.sh` (ROUNDS={settings.get('rounds')}, WARMUP={settings.get('warmup')} s, "
           f"ROUND_TIMEOUT={settings.get('round_timeout')} s, SIGNAL={sig}); took {settings.get('script_secs')} s. "
           f"Raw rounds: `{os.path.basename(prefix)}.json`.\n")
out.append("Each round: 3 writer and 3 locker sessions (each its own lock) spread over the three members "
           f"run for the warm-up, the leader gets SIG{sig}, and the tool times from the return of kill(2) to "
           "the first acknowledged write *sent after the kill*, and to the first grant of a lock acquire "
           "*started after the kill*; then the member is started again and the round waits until all three "
           "serve. The zoo.cfg is the same for zlock and ZooKeeper (tickTime=2000, initLimit=10, syncLimit=5); "
           "zlock's election timeout is its default (150-200 ms, leader lease 200 ms); etcd runs its defaults (heartbeat 100 ms, "
           "election timeout 1000 ms).\n")
out.append("| system | rounds | first write: median | worst | next lock grant: median | worst |")
out.append("|---|---:|---:|---:|---:|---:|")
for s in systems:
    w, g = summary[s]["write"], summary[s]["grant"]
    n = f"{w['reached']}/{w['rounds']}" if w["reached"] == g["reached"] else f"{w['reached']}, {g['reached']} of {w['rounds']}"
    out.append(f"| {LABEL.get(s, s)} | {n} | {ms(w['median_ms'])} ms | {ms(w['worst_ms'])} ms | "
               f"{ms(g['median_ms'])} ms | {ms(g['worst_ms'])} ms |")
out.append("")
out.append("Every round, ms (first write / next grant):\n")
for s in systems:
    rs = [d for _, d in sorted(rounds.get(s, []), key=lambda x: x[0])]
    out.append(f"- {s}: " + ", ".join(f"{ms(d['write_ms'])}/{ms(d['grant_ms'])}" for d in rs))
out.append("")
open(prefix + ".md", "w").write("\n".join(out))
