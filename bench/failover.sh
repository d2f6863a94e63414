#!/usr/bin/env bash
# The failover benchmark, one command, on this machine:
#
#   bench/failover.sh
#
# For each three-member system in turn (a zlock ensemble, an Apache ZooKeeper 3.8
# ensemble, an etcd cluster; started by bench/lib/systems.sh on loopback with free
# ports and fresh directories), ROUNDS rounds of:
#   1. find the leader (zlock, ZooKeeper: `srvr` Mode; etcd: /v3/maintenance/status);
#   2. `zlock-bench failover`: 3 writer and 3 locker sessions spread over the members
#      run for WARMUP seconds, then the leader gets SIGKILL; the tool reports the time
#      from the kill to the first acknowledged write sent after it (write_ms) and to the
#      first lock grant of an acquire started after it (grant_ms);
#   3. start the killed member again on its ports and data, and wait until every
#      member serves again (one leader, the rest followers; etcd: every /health).
# Then writes bench/results/failover-<date>.md and .json: the median and the worst of
# each time per system, and every round.
#
# Systems (SYSTEMS): zlock-ens (native lock path), zlock-ens-recipe (the same kind of
# ensemble, the standard ZooKeeper recipe), zk-ens, etcd-ens.
#
# Settings (environment variables):
#   ROUNDS=10  WARMUP=1 (seconds)  ROUND_TIMEOUT=20 (seconds after the kill)
#   SYSTEMS="zlock-ens zlock-ens-recipe zk-ens etcd-ens"
#   SIGNAL=KILL         or TERM: the leader stopped by an operator (it closes its
#                       connections and ports and exits) instead of crashing
#   NO_BUILD=1          use the binaries in CARGO_TARGET_DIR as they are
#   CARGO_TARGET_DIR    default <repo>/target
#   KEEP_RAW=<dir>      also copy the raw rounds and server logs there
#
# Only 127.0.0.1 is used. Every process this script starts is stopped by pid on exit.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${ROUNDS:-10}"
WARMUP="${WARMUP:-1}"
ROUND_TIMEOUT="${ROUND_TIMEOUT:-20}"
SYSTEMS="${SYSTEMS:-zlock-ens zlock-ens-recipe zk-ens etcd-ens}"
SIGNAL="${SIGNAL:-KILL}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
BENCH="$CARGO_TARGET_DIR/release/zlock-bench"
export SYS_ZLOCK_BIN="$CARGO_TARGET_DIR/release/zlock"
T_START=$(date +%s)

log() { printf '[%s +%4ss] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - T_START ))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=lib/systems.sh
source "$REPO/bench/lib/systems.sh"
WORK="$(mktemp -d /tmp/zlock-failover.XXXXXX)"
RAW="$WORK/raw"; mkdir -p "$RAW"
sys_init "$WORK/sys"
cleanup() {
    local rc=$?
    SYS_KEEP_LOGS="$RAW/logs" sys_cleanup || true
    if [ -n "${KEEP_RAW:-}" ]; then mkdir -p "$KEEP_RAW" && cp -r "$RAW"/. "$KEEP_RAW"/ 2>/dev/null || true; fi
    rm -rf "$WORK"
    [ "$rc" -eq 0 ] || log "failed (exit $rc); servers stopped, $WORK removed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${NO_BUILD:-}" ]; then
    log "building (cargo build --release -p zlock-cli -p zlock-bench --features zlock-bench/etcd)"
    (cd "$REPO" && cargo build --release -p zlock-cli -p zlock-bench --features zlock-bench/etcd 2>&1 | tail -n 1 >&2)
fi
[ -x "$BENCH" ] && [ -x "$SYS_ZLOCK_BIN" ] || die "no zlock / zlock-bench binary in $CARGO_TARGET_DIR/release"

{
    echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nproc=$(nproc)"
    echo "cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "mem_total=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "zookeeper=$(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo unknown)"
    echo "etcd=$(etcd --version 2>/dev/null | head -1 | sed 's/^etcd Version: //' || echo none)"
    echo "zlock_git=$(cd "$REPO" && git describe --always --dirty 2>/dev/null || echo unknown)"
} >"$RAW/machine.env"

kind_of() { case $1 in zlock-ens*) echo zlock-ens ;; *) echo "$1" ;; esac; }
args_of() {
    case $1 in
    zlock-ens) echo "--system zk --lock-path auto" ;;
    zlock-ens-recipe) echo "--system zk --lock-path recipe" ;;
    zk-ens) echo "--system zk --lock-path recipe" ;;
    etcd-ens) echo "--system etcd" ;;
    esac
}

for sys in $SYSTEMS; do
    sys_start "$sys" "$(kind_of "$sys")"
    sys_wait "$sys" 90 || die "$sys did not come up"
    sys_config "$sys" >"$RAW/config-$sys.txt"
    log "$sys serving on ${SYS_HOSTS[$sys]}"
    for round in $(seq 1 "$ROUNDS"); do
        leader=""
        for _ in $(seq 1 150); do
            leader=$(sys_leader "$sys")
            [ -n "$leader" ] && break
            sleep 0.2
        done
        [ -n "$leader" ] || die "$sys: no leader after 30 s"
        pid=${SYS_PID[$sys.$leader]}
        out="$RAW/$sys-r$round.json"
        # shellcheck disable=SC2046
        timeout $(( ROUND_TIMEOUT + 60 )) "$BENCH" failover $(args_of "$sys") --server "${SYS_HOSTS[$sys]}" \
            --kill-pid "$pid" --signal "$SIGNAL" --warmup-secs "$WARMUP" --timeout-secs "$ROUND_TIMEOUT" \
            >"$out" 2>"${out%.json}.err" || { log "  $sys round $round failed: $(tail -n 3 "${out%.json}.err" | tr '\n' ' ')"; rm -f "$out"; }
        # A leader sent TERM exits on its own: give it the time to.
        if [ "$SIGNAL" = TERM ]; then
            for _ in $(seq 1 300); do
                kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid" | cut -c1)" != Z ] || break
                sleep 0.1
            done
        fi
        if kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid" | cut -c1)" != Z ]; then
            sys_kill9 "$sys" "$leader"   # the tool failed before its kill
        else
            sys_forget "$sys" "$leader"
        fi
        [ -f "$out" ] && log "  $sys round $round: killed member $leader (pid $pid): $(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("first write %s ms, next grant %s ms, %d errors after the kill" % (d["write_ms"], d["grant_ms"], d["errors_after"]))' "$out")"
        sys_restart "$sys" "$leader"
        sys_wait "$sys" 90 || die "$sys did not serve again after member $leader restarted"
        sleep 1
    done
    sys_stop "$sys" 30
    log "$sys done"
done
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.env"

mkdir -p "$REPO/bench/results"
STAMP=$(date +%Y-%m-%d)
[ -e "$REPO/bench/results/failover-$STAMP.md" ] && STAMP=$(date +%Y-%m-%d-%H%M%S)
OUT="$REPO/bench/results/failover-$STAMP"
python3 "$REPO/bench/failover-report.py" "$RAW" "$OUT" "rounds=$ROUNDS" "warmup=$WARMUP" \
    "round_timeout=$ROUND_TIMEOUT" "systems=$SYSTEMS" "signal=$SIGNAL" "script_secs=$(( $(date +%s) - T_START ))"
log "done in $(( $(date +%s) - T_START )) s: $OUT.md, $OUT.json"
cat "$OUT.md"
