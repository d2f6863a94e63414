#!/usr/bin/env bash
# Server CPU per write on each member of a three-member ensemble, leader and followers
# apart: zlock (native lock path) beside Apache ZooKeeper (Curator-style recipe, as
# bench/compare runs it), in one run.
#
#   bench/cpu-per-write.sh [ZLOCK]     (default target/release/zlock; zlock-bench beside it)
#
# For each system (SYSTEMS, default "zlock-ens zk-ens"; bench/lib/systems.sh starts them
# on loopback with fresh temp dirs) and each scenario (SCENARIOS, default "a b d"), ROUNDS
# runs (default 3, after one warm-up) of SECS seconds (default 5; D runs D_CLIENTS=101
# clients for D_CYCLES=10 cycles each): each member's CPU time (utime + stime from
# /proc/PID/stat) over the run, divided by the writes the run made (A and B: two per
# cycle, acquire and release; D: two per hand-over). Prints, per system and scenario, the
# median over the rounds of: the rate, the leader's CPU µs per write, a follower's (the
# mean of the two), and the three members' sum. The rate is what the run made, with the
# three members, the client and this script sharing the machine's cores.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZLOCK="${1:-$REPO/target/release/zlock}"
BENCH="$(cd "$(dirname "$ZLOCK")" && pwd)/zlock-bench"
SYSTEMS="${SYSTEMS:-zlock-ens zk-ens}"
SCENARIOS="${SCENARIOS:-a b d}"
ROUNDS="${ROUNDS:-3}"
SECS="${SECS:-5}"
D_CLIENTS="${D_CLIENTS:-101}"
D_CYCLES="${D_CYCLES:-10}"
[[ -x "$ZLOCK" && -x "$BENCH" ]] || { echo "build first: cargo build --release -p zlock-cli -p zlock-bench" >&2; exit 1; }
# shellcheck source=lib/systems.sh
source "$REPO/bench/lib/systems.sh"
TMP="$(mktemp -d /tmp/zlock-cpu.XXXXXX)"
trap 'sys_cleanup; rm -rf "$TMP"' EXIT
sys_init "$TMP/sys"
log() { printf '[%5ss] %s\n' "$SECONDS" "$*" >&2; }

for sys in $SYSTEMS; do
    case $sys in
    zlock-ens) path="--lock-path auto" ;;
    zk-ens) path="--lock-path recipe" ;;
    *) echo "unknown system $sys (zlock-ens or zk-ens)" >&2; exit 2 ;;
    esac
    SYS_ZLOCK_BIN="$ZLOCK" sys_start "$sys" "$sys"
    sys_wait "$sys" 90 || { echo "$sys did not come up" >&2; exit 1; }
    for ((r = 0; r <= ROUNDS; r++)); do
        for sc in $SCENARIOS; do
            leader=$(sys_leader "$sys")
            [[ -n "$leader" ]] || { log "$sys: no leader; skipping a run"; continue; }
            d="$TMP/out/$sys/$sc/$r"
            mkdir -p "$d"
            declare -A before=()
            for i in $(sys_members "$sys"); do before[$i]=$(sys_cpu_ticks "${SYS_PID[$sys.$i]}"); done
            args=(--secs "$SECS")
            [[ $sc == d ]] && args=(--clients "$D_CLIENTS" --cycles "$D_CYCLES")
            # shellcheck disable=SC2086
            timeout 300 "$BENCH" lock --system zk --server "${SYS_HOSTS[$sys]}" --scenario "$sc" \
                --json $path "${args[@]}" >"$d/run.json" 2>"$d/run.err" ||
                { log "$sys $sc failed: $(tail -n 3 "$d/run.err")"; rm -f "$d/run.json"; continue; }
            for i in $(sys_members "$sys"); do
                role=follower
                [[ $i == "$leader" ]] && role=leader
                echo "$role $(( $(sys_cpu_ticks "${SYS_PID[$sys.$i]}") - ${before[$i]} ))" >>"$d/cpu"
            done
        done
        log "$sys: round $r/$ROUNDS done$([[ $r == 0 ]] && echo ' (warm-up)')"
    done
    sys_stop "$sys" 30
done

python3 - "$TMP/out" "$ROUNDS" "$(getconf CLK_TCK)" "$SYSTEMS" "$SCENARIOS" <<'PY'
import json, os, statistics, sys
out, rounds, tck = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
systems, scenarios = sys.argv[4].split(), sys.argv[5].split()
print(f"nproc={os.cpu_count()} rounds={rounds}; CPU µs per write (median over rounds)")
print()
print("| system | scenario | rate/s | leader | a follower | 3 members |")
print("|---|---|---:|---:|---:|---:|")
for s in systems:
    for sc in scenarios:
        rates, lead, fol, tot = [], [], [], []
        for r in range(1, rounds + 1):
            d = os.path.join(out, s, sc, str(r))
            if not os.path.exists(os.path.join(d, "run.json")):
                continue
            j = json.load(open(os.path.join(d, "run.json")))
            units = j.get("cycles") or j.get("handovers")
            rate = j.get("cycles_per_sec") or j.get("handovers_per_sec")
            if not units:
                continue
            writes = 2 * units
            cpu = [l.split() for l in open(os.path.join(d, "cpu"))]
            us = lambda t: int(t) * 1e6 / tck / writes
            l = [us(t) for role, t in cpu if role == "leader"]
            f = [us(t) for role, t in cpu if role == "follower"]
            if len(l) != 1 or not f:
                continue
            rates.append(rate); lead.append(l[0]); fol.append(sum(f) / len(f)); tot.append(l[0] + sum(f))
        if not rates:
            print(f"| {s} | {sc.upper()} | no run | | | |")
            continue
        m = statistics.median
        print(f"| {s} | {sc.upper()} | {m(rates):,.0f} | {m(lead):.1f} | {m(fol):.1f} | {m(tot):.1f} |")
PY
