#!/usr/bin/env bash
# The 1,000-session scenarios on two zlock builds as three-member ensembles (and,
# with ZK=1, Apache ZooKeeper's ensemble beside them), in alternating rounds: did a
# change keep zlock's lead at the seeds' scale?
#
#   bench/ab-ens-sessions.sh OLD_ZLOCK NEW_ZLOCK [ROUNDS]      (ROUNDS default 4)
#
# Build the old one as for bench/ab-ens.sh. Every ensemble runs at once (bench/lib/
# systems.sh: 127.0.0.1, free ports, fresh temp data dirs, stopped by pid on exit).
# Each round runs, for each system in turn (the order alternates), scenario G (1,000
# sessions on 1,000 locks) and H (1,000 sessions on 10 locks) for SECS seconds
# (default 2) with the `zlock-bench` next to NEW_ZLOCK, on each lock path in PATHS
# (default "recipe auto": the standard ZooKeeper recipe as Curator runs it, and
# zlock's native path; ZooKeeper runs the recipe only). One warm-up round is
# discarded. Prints the median cycles/s with its min-max over the rounds, the median
# acquire p99, and each zlock figure over ZooKeeper's recipe.
#
# ZooKeeper's three JVMs take CPU even when idle: with ZK=1 the zlock figures are
# lower and noisier than without (2026-12-04: G on the recipe 0.87x old->new with
# ZK=1, 0.98x without, the ranges overlapping both times). Compare the two zlock
# builds in a run without it.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OLD="${1:?usage: bench/ab-ens-sessions.sh OLD_ZLOCK NEW_ZLOCK [ROUNDS]}"
NEW="${2:?usage: bench/ab-ens-sessions.sh OLD_ZLOCK NEW_ZLOCK [ROUNDS]}"
ROUNDS="${3:-4}"
SECS="${SECS:-2}"
PATHS="${PATHS:-recipe auto}"
BENCH="$(cd "$(dirname "$NEW")" && pwd)/zlock-bench"
[[ -x "$OLD" && -x "$NEW" ]] || { echo "no zlock binary at $OLD or $NEW" >&2; exit 1; }
[[ -x "$BENCH" ]] || { echo "no zlock-bench next to $NEW (cargo build --release -p zlock-bench)" >&2; exit 1; }

# shellcheck source=lib/systems.sh
source "$REPO/bench/lib/systems.sh"
TMP="$(mktemp -d /tmp/zlock-ab-sessions.XXXXXX)"
RAW="$TMP/raw"
mkdir -p "$RAW"
trap 'sys_cleanup; rm -rf "$TMP"' EXIT
sys_init "$TMP/sys"
log() { printf '[%5ss] %s\n' "$SECONDS" "$*" >&2; }

SYSTEMS="old new"
SYS_ZLOCK_BIN="$OLD" sys_start old zlock-ens
SYS_ZLOCK_BIN="$NEW" sys_start new zlock-ens
if [[ "${ZK:-0}" == 1 ]]; then
    sys_start zk zk-ens
    SYSTEMS="old new zk"
fi
for n in $SYSTEMS; do
    sys_wait "$n" 90 || { echo "$n did not come up" >&2; exit 1; }
done
reversed=$(echo "$SYSTEMS" | tr ' ' '\n' | tac | tr '\n' ' ')

for ((r = 0; r <= ROUNDS; r++)); do
    order=$SYSTEMS
    ((r % 2 == 0)) || order=$reversed
    for n in $order; do
        for sc in g h; do
            locks=1000
            [[ $sc == h ]] && locks=10
            for path in $PATHS; do
                [[ $n == zk && $path != recipe ]] && continue
                f="$RAW/$n-$sc-$path-$r.json"
                timeout 300 "$BENCH" lock --system zk --server "${SYS_HOSTS[$n]}" --scenario "$sc" \
                    --json --lock-path "$path" --secs "$SECS" --clients 1000 --locks "$locks" \
                    >"$f" 2>"$f.err" || { log "$n $sc $path failed: $(tail -n 2 "$f.err")"; rm -f "$f"; }
            done
        done
    done
    log "round $r/$ROUNDS done$([[ $r == 0 ]] && echo ' (warm-up)')"
done

python3 - "$RAW" "$ROUNDS" <<'PY'
import json, os, statistics, sys
raw, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for n in ("old", "new", "zk"):
    for sc in ("g", "h"):
        for path in ("recipe", "auto"):
            v, p99 = [], []
            for r in range(1, rounds + 1):
                f = os.path.join(raw, f"{n}-{sc}-{path}-{r}.json")
                if os.path.exists(f):
                    d = json.load(open(f))
                    v.append(d["cycles_per_sec"])
                    p99.append(d["acquire_us"]["p99"] / 1e3)
            if v:
                rows[(n, sc, path)] = (statistics.median(v), min(v), max(v), statistics.median(p99))
print("| system | scenario | lock path | cycles/s: median [min-max] | acquire p99 ms, median |")
print("|---|---|---|---|---|")
for (n, sc, path), (m, lo, hi, p) in rows.items():
    print(f"| {n} | {sc.upper()} | {path} | {m:,.0f} [{lo:,.0f}-{hi:,.0f}] | {p:.1f} |")
print()
for sc in ("g", "h"):
    for path in ("recipe", "auto"):
        o, n = rows.get(("old", sc, path)), rows.get(("new", sc, path))
        if o and n:
            print(f"- {sc.upper()} {path}: new/old {n[0] / o[0]:.2f}x")
    z = rows.get(("zk", sc, "recipe"))
    for b in ("old", "new"):
        for path in ("recipe", "auto"):
            x = rows.get((b, sc, path))
            if x and z:
                print(f"- {sc.upper()} {b} {path} / ZooKeeper x3 (recipe): {x[0] / z[0]:.2f}x, p99 {z[3] / x[3]:.2f}x")
PY
