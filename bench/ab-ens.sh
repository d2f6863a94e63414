#!/usr/bin/env bash
# Two zlock builds as three-member ensembles, side by side, in alternating rounds: did
# a change to the replicated write path make it faster?
#
#   bench/ab-ens.sh OLD_ZLOCK NEW_ZLOCK [ROUNDS]      (ROUNDS default 5)
#
# Build the old one from a worktree, for example
#   git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target \
#       cargo build --release -p zlock-cli)
#   cargo build --release -p zlock-cli -p zlock-bench
#   bench/ab-ens.sh /tmp/old-target/release/zlock target/release/zlock
#
# Both ensembles run at once (bench/lib/systems.sh: 127.0.0.1, free ports, fresh temp
# data dirs, stopped by pid on exit), each started with the same zoo.cfg as
# bench/compare's. Every round measures each in turn (the order alternates round by
# round, so both see the same background load) with the `zlock-bench` next to
# NEW_ZLOCK, on the native lock path, sessions spread over the members as in
# bench/compare: scenario A (1 client), A with combined requests (--reacquire), B (16
# clients, 16 locks) and D (101 clients on one lock). Over each run it records every
# member's CPU time (utime + stime from /proc) and divides it by the writes the run made
# (A, B: two per cycle; A combined: one; D: two per hand-over): server CPU per write,
# all three members together. One warm-up round is discarded. It prints a markdown table:
# the median of each figure with its min-max over the rounds, and new/old; and which
# member led each ensemble (session 0 goes to member 1: when member 1 leads, A's client
# is on the leader, else its writes are forwarded).
#
# Settings: SECS=2 (seconds per A and B run), D_CLIENTS=101, D_CYCLES=20,
# KEEP=<dir> (copy the raw JSON and the members' logs there), OLD_ARGS / NEW_ARGS (extra
# `zlock server` arguments of each side: one build against itself with a setting
# changed, e.g. NEW_ARGS="--commit-spin-us 0").
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OLD="${1:?usage: bench/ab-ens.sh OLD_ZLOCK NEW_ZLOCK [ROUNDS]}"
NEW="${2:?usage: bench/ab-ens.sh OLD_ZLOCK NEW_ZLOCK [ROUNDS]}"
ROUNDS="${3:-5}"
SECS="${SECS:-2}"
D_CLIENTS="${D_CLIENTS:-101}"
D_CYCLES="${D_CYCLES:-20}"
BENCH="$(cd "$(dirname "$NEW")" && pwd)/zlock-bench"
[[ -x "$OLD" && -x "$NEW" ]] || { echo "no zlock binary at $OLD or $NEW" >&2; exit 1; }
[[ -x "$BENCH" ]] || { echo "no zlock-bench next to $NEW (cargo build --release -p zlock-bench)" >&2; exit 1; }

# shellcheck source=lib/systems.sh
source "$REPO/bench/lib/systems.sh"
TMP="$(mktemp -d /tmp/zlock-ab-ens.XXXXXX)"
RAW="$TMP/raw"
mkdir -p "$RAW"
finish() {
    local rc=$?
    [[ -z "${KEEP:-}" ]] || { mkdir -p "$KEEP" && cp -r "$RAW" "$KEEP/" && SYS_KEEP_LOGS="$KEEP" sys_cleanup; }
    sys_cleanup
    rm -rf "$TMP"
    exit "$rc"
}
trap finish EXIT
sys_init "$TMP/sys"

log() { printf '[%5ss] %s\n' "$SECONDS" "$*" >&2; }

for name in old new; do
    bin=$OLD args="${OLD_ARGS:-}"
    [[ $name == new ]] && bin=$NEW args="${NEW_ARGS:-}"
    SYS_ZLOCK_BIN="$bin" SYS_ZLOCK_ARGS="$args" sys_start "$name" zlock-ens
done
for name in old new; do
    sys_wait "$name" 60 || { echo "$name ensemble did not come up" >&2; exit 1; }
done
log "old: $OLD (leader: member $(sys_leader old)); new: $NEW (leader: member $(sys_leader new))"

cpu_ticks() { # name: utime+stime of every member, in clock ticks
    local pid total=0
    for pid in $(sys_pids "$1"); do
        total=$((total + $(sys_cpu_ticks "$pid")))
    done
    echo "$total"
}

run() { # name label scenario out args...
    local name=$1 label=$2 sc=$3 out=$4; shift 4
    local t0 t1
    t0=$(cpu_ticks "$name")
    timeout 300 "$BENCH" lock --system zk --server "${SYS_HOSTS[$name]}" --scenario "$sc" --json \
        --lock-path auto "$@" >"$out" 2>"$out.err" || { log "$name $label failed: $(tail -n 3 "$out.err")"; rm -f "$out"; return 0; }
    t1=$(cpu_ticks "$name")
    echo "$((t1 - t0))" >"$out.cpu"
}

for ((r = 0; r <= ROUNDS; r++)); do
    order="old new"
    ((r % 2 == 0)) || order="new old"
    for name in $order; do
        d="$RAW/$name/$r"
        mkdir -p "$d"
        run "$name" A a "$d/a.json" --secs "$SECS"
        run "$name" "A combined" a "$d/a2.json" --secs "$SECS" --reacquire
        run "$name" B b "$d/b.json" --secs "$SECS"
        run "$name" D d "$d/d.json" --clients "$D_CLIENTS" --cycles "$D_CYCLES"
    done
    log "round $r/$ROUNDS done$([[ $r == 0 ]] && echo ' (warm-up)')"
done
log "leaders at the end: old member $(sys_leader old), new member $(sys_leader new)"

python3 - "$RAW" "$ROUNDS" "$(getconf CLK_TCK)" <<'EOF'
import json, os, statistics, sys
raw, rounds, tck = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# (file, figure, key in the JSON, writes per unit of that figure)
figs = [("a", "A cycles/s", "cycles_per_sec", 2), ("a2", "A combined cycles/s", "cycles_per_sec", 1),
        ("b", "B cycles/s", "cycles_per_sec", 2), ("d", "D hand-overs/s", "handovers_per_sec", 2)]
rows = {}
for name in ("old", "new"):
    for r in range(1, rounds + 1):
        for f, label, key, writes in figs:
            p = os.path.join(raw, name, str(r), f + ".json")
            if not os.path.exists(p):
                continue
            d = json.load(open(p))
            rate = d[key]
            rows.setdefault(label, {"old": [], "new": []})[name].append(rate)
            if "acquire_us" in d:
                rows.setdefault(label + ": acquire p50 ms", {"old": [], "new": []})[name].append(d["acquire_us"]["p50"] / 1e3)
            secs = d.get("secs") or d.get("wall_secs")
            units = d.get("cycles") or d.get("handovers")
            cpu = open(p + ".cpu").read().strip()
            if units:
                cpu_us = int(cpu) * 1e6 / tck / (units * writes)
                rows.setdefault(label + ": CPU µs per write, 3 members", {"old": [], "new": []})[name].append(cpu_us)
print("| figure | old: median [min-max] | new: median [min-max] | new/old |")
print("|---|---|---|---|")
for label, v in rows.items():
    if not v["old"] or not v["new"]:
        continue
    mo, mn = statistics.median(v["old"]), statistics.median(v["new"])
    fmt = (lambda x: f"{x:.3f}") if ("ms" in label or "µs" in label) else (lambda x: f"{x:,.0f}")
    print(f"| {label} | {fmt(mo)} [{fmt(min(v['old']))}-{fmt(max(v['old']))}] "
          f"| {fmt(mn)} [{fmt(min(v['new']))}-{fmt(max(v['new']))}] | {mn / mo:.2f} |")
EOF
