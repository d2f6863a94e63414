#!/usr/bin/env bash
# Observers: read capacity without slower writes? One command, on this machine:
#
#   bench/observers.sh
#
# Four ensembles up side by side (bench/lib/systems.sh: fresh data directories, free
# loopback ports, the same zoo.cfg): zlock with 3 voters, zlock with 3 voters and 2
# observers, and the same two for Apache ZooKeeper 3.8. Each is measured ONE AT A TIME,
# in turn run by run (so all see the same background load), with `zlock bench ops
# --clients 32`, every member in the connect string and session i starting at member
# i (so the reads spread over all members, observers included): one warm-up run
# (discarded), then RUNS runs; the median of each phase's throughput is reported, and
# the ratio with observers / without. Writes go through the leader either way.
#
# Mind the machine: every member of every ensemble shares this machine's CPUs with the
# 32 clients, so members added here add no CPU; on separate machines each observer
# brings its own. What this shows on one machine is the cost side: whether observers
# slow the writes.
#
# Settings: RUNS=3, PER_CLIENT=2000 (znodes per client per phase), ZK_JVMFLAGS,
# CARGO_TARGET_DIR (default <repo>/target). Writes bench/results/observers-<date>.md.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${RUNS:-3}"
PER_CLIENT="${PER_CLIENT:-2000}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
ZLOCK="$CARGO_TARGET_DIR/release/zlock"
T_START=$(date +%s)
log() { printf '[%s +%4ss] %s\n' "$(date +%H:%M:%S)" "$(($(date +%s) - T_START))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=lib/systems.sh
source "$REPO/bench/lib/systems.sh"
RAW="$(mktemp -d "${TMPDIR:-/tmp}/zlock-observers.XXXXXX")"
trap 'sys_cleanup; rm -rf "$RAW"' EXIT
sys_init "$RAW/systems"
export SYS_ZK_JVMFLAGS="${ZK_JVMFLAGS:-}"

log "building zlock (release)"
(cd "$REPO" && cargo build --release -q -p zlock-cli) || die "build failed"

SYSTEMS="zlock-3 zlock-3+2 zk-3 zk-3+2"
for s in $SYSTEMS; do
    kind=zlock-ens
    [[ $s == zk-* ]] && kind=zk-ens
    obs=0
    [[ $s == *+2 ]] && obs=2
    SYS_MEMBERS=$((3 + obs)) SYS_OBSERVERS=$obs sys_start "$s" "$kind"
done
for s in $SYSTEMS; do
    sys_wait "$s" 120 || die "$s did not come up"
    log "  $s up on ${SYS_HOSTS[$s]}"
done

for run in $(seq 0 "$RUNS"); do
    for s in $SYSTEMS; do
        out="$RAW/$s-r$run.jsonl"
        "$ZLOCK" bench ops --server "${SYS_HOSTS[$s]}" --clients 32 --per-client "$PER_CLIENT" \
            --data-size 100 --json >"$out" || die "bench ops against $s failed"
        label="run $run"; [[ $run == 0 ]] && label="warm-up"
        log "  $s $label: $(python3 -c '
import json, sys
print("  ".join("%s %.0f/s" % (d["phase"], d["ops_per_sec"]) for d in map(json.loads, open(sys.argv[1]))))' "$out")  [load $(cut -d' ' -f1 /proc/loadavg)]"
    done
done

date_tag=$(date -u +%Y-%m-%d)
report="$REPO/bench/results/observers-$date_tag.md"
python3 - "$RAW" "$RUNS" "$PER_CLIENT" "$SYSTEMS" >"$report" <<'EOF'
import json, statistics, sys, os, platform
raw, runs, per, systems = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()
med = {}
for s in systems:
    by = {}
    for r in range(1, runs + 1):
        for d in map(json.loads, open(os.path.join(raw, f"{s}-r{r}.jsonl"))):
            by.setdefault(d["phase"], []).append(d["ops_per_sec"])
    med[s] = {p: statistics.median(v) for p, v in by.items()}
phases = ["getData", "create", "setData", "delete"]
print("# Observers: reads and writes with 32 clients, 3 voters vs 3 voters + 2 observers\n")
print(f"`bench/observers.sh` on {platform.node()} ({os.cpu_count()} CPUs), "
      f"{runs} runs after a warm-up, median ops/s; `zlock bench ops --clients 32 "
      f"--per-client {per}`, every member in the connect string, session i starting at "
      "member i. Every member and the clients share this machine's CPUs.\n")
def table(head, rows):
    print(f"| {head} | " + " | ".join(phases) + " |")
    print("|---|" + "---:|" * len(phases))
    for name, cells in rows:
        print(f"| {name} | " + " | ".join(cells) + " |")
def ratios(a, b):
    return [f"{a[p] / b[p]:.2f}" for p in phases if p in a]
table("system", [(s, [f"{med[s].get(p, 0):,.0f}" for p in phases]) for s in systems])
print("\nWith observers / without (same system):\n")
table("system", [(b, ratios(med[f"{b}-3+2"], med[f"{b}-3"])) for b in ("zlock", "zk")])
print("\nzlock / ZooKeeper (same shape):\n")
table("shape", [(x, ratios(med[f"zlock-{x}"], med[f"zk-{x}"])) for x in ("3", "3+2")])
EOF
log "wrote $report"
cat "$report"
