#!/usr/bin/env bash
# Syscalls, context switches and wake-ups per write on each member of a three-member
# zlock ensemble (leader and a follower apart), counted by the kernel's tracepoints
# while scenario B runs: where a write's CPU goes besides zlock's own code.
#
#   bench/syscalls-per-write.sh [ZLOCK]   (default target/release/zlock; zlock-bench beside it)
#
# Needs perf and root (tracepoints). Runs B (16 clients on 16 locks, native path) for
# SECS seconds (default 6) after a 3 s warm-up, counting on the leader and on one
# follower for the middle SECS-2 seconds, and divides each count by the writes made in
# that window (two per cycle, at the run's mean rate). SYSTEM=zk-ens counts Apache
# ZooKeeper's members instead (recipe path), for comparison.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZLOCK="${1:-$REPO/target/release/zlock}"
BENCH="$(cd "$(dirname "$ZLOCK")" && pwd)/zlock-bench"
SECS="${SECS:-6}"
SYSTEM="${SYSTEM:-zlock-ens}"
command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }
# shellcheck source=lib/systems.sh
source "$REPO/bench/lib/systems.sh"
TMP="$(mktemp -d /tmp/zlock-sysc.XXXXXX)"
trap 'sys_cleanup; rm -rf "$TMP"' EXIT
sys_init "$TMP/sys"
path="--lock-path auto"
[[ $SYSTEM == zk-ens ]] && path="--lock-path recipe"
SYS_ZLOCK_BIN="$ZLOCK" sys_start ens "$SYSTEM"
sys_wait ens 90 || { echo "the ensemble did not come up" >&2; exit 1; }
l=$(sys_leader ens)
f=$(( l % 3 + 1 ))
# shellcheck disable=SC2086
"$BENCH" lock --system zk --server "${SYS_HOSTS[ens]}" --scenario b --secs 3 $path --json >/dev/null
EV="syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync,sched:sched_switch,sched:sched_wakeup"
# shellcheck disable=SC2086
"$BENCH" lock --system zk --server "${SYS_HOSTS[ens]}" --scenario b --secs "$SECS" $path --json >"$TMP/b.json" &
bench=$!
sleep 1
window=$((SECS - 2))
perf stat -x, -e "$EV" -p "${SYS_PID[ens.$l]}" -o "$TMP/leader.csv" -- sleep "$window" &
p1=$!
perf stat -x, -e "$EV" -p "${SYS_PID[ens.$f]}" -o "$TMP/follower.csv" -- sleep "$window" &
p2=$!
wait "$p1" "$p2" "$bench"
python3 - "$TMP" "$window" "$SYSTEM" <<'PY'
import json, os, sys
tmp, window, system = sys.argv[1], float(sys.argv[2]), sys.argv[3]
j = json.load(open(os.path.join(tmp, "b.json")))
writes = 2 * j["cycles_per_sec"] * window
def counts(p):
    out = {}
    for line in open(p):
        parts = line.strip().split(",")
        if len(parts) < 3 or not parts[0].replace(".", "").isdigit():
            continue
        out[parts[2].split(":")[-1].replace("sys_enter_", "")] = float(parts[0])
    return out
lead, fol = counts(os.path.join(tmp, "leader.csv")), counts(os.path.join(tmp, "follower.csv"))
print(f"{system}, scenario B: {j['cycles_per_sec']:,.0f} cycles/s, {writes:,.0f} writes in the {window:.0f} s counted")
print()
print("| per write | leader | a follower |")
print("|---|---:|---:|")
for k in lead:
    print(f"| {k} | {lead[k] / writes:.2f} | {fol.get(k, 0) / writes:.2f} |")
PY
