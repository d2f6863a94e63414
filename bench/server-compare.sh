#!/usr/bin/env bash
# zlock vs Apache ZooKeeper 3.8, one command, on this machine:
#
#   bench/server-compare.sh
#
# 1. builds zlock (release) if needed;
# 2. operation throughput / latency: the servers run side by side (started by
#    bench/lib/systems.sh: fresh temp dataDir each, free loopback ports, the same
#    zoo.cfg): zlock and ZooKeeper standalone, and (ENSEMBLES=1, the default) a
#    three-member zlock ensemble and a three-member ZooKeeper 3.8 ensemble, every member
#    in the connect string; they are measured ONE AT A TIME, in turn run by run so that
#    all see the same background load; `zlock bench ops` with 1 and with 32 clients: one
#    warm-up run (discarded), then RUNS runs; the median of each figure is reported;
# 3. memory / load / restart, one server at a time on a fresh dataDir: bulk-loads
#    LOAD_COUNT znodes of 100 bytes (`zlock bench load`: LOAD_CLIENTS sessions x
#    LOAD_PIPELINE creates in flight), VmRSS of the server process, SIGTERM, restart on
#    the same dataDir, time from process start until a client reads a known node;
# 4. writes bench/results/server-<date>.md and .json.
#
# Settings (environment variables):
#   OPS_N1=5000        znodes per client per phase with 1 client
#   OPS_N32=3000       znodes per client per phase with 32 clients
#   RUNS=3             measured runs per setting (plus one warm-up)
#   LOAD_COUNT=1000000 znodes for the memory / restart test
#   LOAD_CLIENTS=16 LOAD_PIPELINE=64
#   LOAD_TIMEOUT=300   seconds a load may take before it is cut off (then the count
#                      actually loaded is reported, never extrapolated)
#   ZK_JVMFLAGS=""     extra JVM flags for ZooKeeper; default none = the Debian package's
#                      default (JAVA_OPTS="" in /etc/zookeeper/conf/environment), i.e. the
#                      JVM's ergonomic heap (MaxHeapSize = 1/4 of RAM)
#   ENSEMBLES=1        also the three-member systems in phase 1 (0: standalone only)
#   TLS=0              1: also zlock-tls and zk-tls (and, with ENSEMBLES, zlock-ens-tls and
#                      zk-ens-tls) in phase 1: a secureClientPort with PEM stores and
#                      ssl.clientAuth=need, the ensembles with sslQuorum too, the clients
#                      presenting a certificate (bench/lib/systems.sh's TLS kinds); the
#                      report then has "The cost of TLS"
#   METRICS=1          also a standalone zlock with the Prometheus endpoint on
#                      (`--metrics-port 0`: every request records its latency summary) in
#                      phase 1, reported as the cost of the metrics (0: not)
#   SKIP_LOAD=1        skip phase 3 (the report then has no memory / restart table)
#   CARGO_TARGET_DIR   default <repo>/target-bench
#   KEEP_RAW=<dir>     also copy the raw measurements and server logs there
#
# Only 127.0.0.1 is used. Every process this script starts is stopped by pid on exit,
# and its temp directory is removed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OPS_N1="${OPS_N1:-5000}"
OPS_N32="${OPS_N32:-3000}"
RUNS="${RUNS:-3}"
LOAD_COUNT="${LOAD_COUNT:-1000000}"
LOAD_CLIENTS="${LOAD_CLIENTS:-16}"
LOAD_PIPELINE="${LOAD_PIPELINE:-64}"
LOAD_TIMEOUT="${LOAD_TIMEOUT:-300}"
ZK_JVMFLAGS="${ZK_JVMFLAGS:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target-bench}"
ZLOCK="$CARGO_TARGET_DIR/release/zlock"
ENSEMBLES="${ENSEMBLES:-1}"
METRICS="${METRICS:-1}"
TLS="${TLS:-0}"
T_START=$(date +%s)

log() { printf '[%s +%4ss] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - T_START ))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 3))" "$1" "$2"; }

[ -f /usr/share/java/zookeeper.jar ] || die "Apache ZooKeeper is not installed (apt-get install -y zookeeper)"
command -v java >/dev/null || die "java not found"
command -v python3 >/dev/null || die "python3 not found"

WORK="$(mktemp -d /tmp/zlock-server-compare.XXXXXX)"
# shellcheck source=lib/systems.sh
source "$REPO/bench/lib/systems.sh"
sys_init "$WORK/sys"
export SYS_ZLOCK_BIN="$ZLOCK" SYS_ZLOCK_LOG=info SYS_ZK_JVMFLAGS="$ZK_JVMFLAGS"
cleanup() {
    local rc=$?
    sys_cleanup || true
    rm -rf "$WORK"
    [ "$rc" -eq 0 ] || log "failed (exit $rc); servers stopped, $WORK removed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

STOP_SECS=
stop_server() { # name -> STOP_SECS: seconds from SIGTERM until the process is gone
    # (not in a $(...) subshell: only this shell can reap its child)
    local t0
    t0=$(now)
    sys_stop "$1" 120
    STOP_SECS=$(elapsed "$t0" "$(now)")
}

ready() { # connect-string path [tls flags...] -> JSON {"ready_secs":...}
    local server=$1 path=$2
    shift 2
    "$ZLOCK" bench ready --server "$server" --path "$path" --timeout-secs 300 "$@"
}

# A TLS system's clients: the run's CA and client certificate (sys_tls_certs).
tls_args() {
    case $1 in
    *-tls) echo "--tls-ca $SYS_TLS_CA --tls-cert $SYS_TLS_CERT --tls-key $SYS_TLS_KEY" ;;
    esac
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }   # utime + stime, clock ticks
vol_csw() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ { n += $2 } END { print n + 0 }'; }

rss_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

fourlw() { # port word
    python3 - "$1" "$2" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(sys.argv[2].encode())
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
print(out.decode(errors="replace"), end="")
EOF
}
mntr_value() { fourlw "$1" mntr | awk -v k="$2" '$1 == k { print $2 }'; }

# ---------------------------------------------------------------------------- build
log "building zlock (cargo build --release -p zlock-cli, CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
(cd "$REPO" && cargo build --release -p zlock-cli 2>&1 | tail -n 2 >&2)
[ -x "$ZLOCK" ] || die "no zlock binary at $ZLOCK"

# ---------------------------------------------------------------------------- machine
RAW="$WORK/raw"; mkdir -p "$RAW"
{
    echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nproc=$(nproc)"
    echo "cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "mem_total=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "kernel=$(uname -sr)"
    echo "disk_free_tmp=$(df -h --output=avail,size,target /tmp | tail -1 | awk '{ print $1 " free of " $2 " on " $3 }')"
    echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "java=$(java -version 2>&1 | head -1)"
    echo "zk_jar=$(readlink -f /usr/share/java/zookeeper.jar)"
    echo "zk_max_heap=$(java $ZK_JVMFLAGS -XX:+PrintFlagsFinal -version 2>/dev/null | awk '$2 == "MaxHeapSize" { printf "%.2f GiB", $4 / 1073741824 }')"
    echo "zk_gc=$(java $ZK_JVMFLAGS -XX:+PrintFlagsFinal -version 2>/dev/null | awk '$4 == "true" && $2 ~ /^Use(G1|Serial|Parallel|Z|Shenandoah)GC$/ { print $2 }' | head -1)"
    echo "zlock_git=$(cd "$REPO" && git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "zlock_dirty_files=$(cd "$REPO" && git status --porcelain -- crates | awk '{ print $2 }' | tr '\n' ' ')"
} >"$RAW/machine.env"
log "machine: $(grep -E '^(nproc|cpu_model|mem_total|loadavg_start)=' "$RAW/machine.env" | tr '\n' ' ')"

# ---------------------------------------------------------------------------- ops
OPS_SYSTEMS="zlock zk"
[ "$ENSEMBLES" = 0 ] || OPS_SYSTEMS="zlock zk zlock-ens zk-ens"
[ "$METRICS" = 0 ] || OPS_SYSTEMS="$OPS_SYSTEMS zlock-metrics"
if [ "$TLS" = 1 ]; then
    OPS_SYSTEMS="$OPS_SYSTEMS zlock-tls zk-tls"
    [ "$ENSEMBLES" = 0 ] || OPS_SYSTEMS="$OPS_SYSTEMS zlock-ens-tls zk-ens-tls"
fi
log "phase 1: operations ($OPS_SYSTEMS up, measured one at a time, in turn)"
for sys in $OPS_SYSTEMS; do
    if [ "$sys" = zlock-metrics ]; then
        # The same server with its metrics endpoint on (a free port of its choosing).
        SYS_ZLOCK_ARGS="${SYS_ZLOCK_ARGS:-} --metrics-port 0" sys_start "ops-$sys" zlock
    else
        sys_start "ops-$sys" "$sys"
    fi
    sys_config "ops-$sys" >"$RAW/zoo-$sys-ops.cfg"
done
for sys in $OPS_SYSTEMS; do
    sys_wait "ops-$sys" 90 || die "$sys did not come up"
    # shellcheck disable=SC2046  # the flags are words
    ready "${SYS_HOSTS[ops-$sys]}" / $(tls_args "$sys") >/dev/null || die "$sys does not serve a read"
    case $sys in
    *-tls) sys_tls_evidence "ops-$sys" >"$RAW/tls-evidence-$sys.txt" || die "$sys: its logs do not show TLS" ;;
    esac
    log "  $sys up on ${SYS_HOSTS[ops-$sys]} (pids $(sys_pids "ops-$sys"))"
done
for clients in 1 32; do
    if [ "$clients" = 1 ]; then per=$OPS_N1; else per=$OPS_N32; fi
    for run in $(seq 0 "$RUNS"); do
        for sys in $OPS_SYSTEMS; do
            label="run $run"; [ "$run" = 0 ] && label="warm-up"
            out="$RAW/ops-$sys-c$clients-r$run.jsonl"
            cut -d' ' -f1 /proc/loadavg >"${out%.jsonl}.loadavg"
            # Server CPU: of every member (an ensemble's is the sum of its three).
            c0=0 v0=0
            for spid in $(sys_pids "ops-$sys"); do
                c0=$((c0 + $(cpu_ticks "$spid"))); v0=$((v0 + $(vol_csw "$spid")))
            done
            # shellcheck disable=SC2046  # the flags are words
            "$ZLOCK" bench ops --server "${SYS_HOSTS[ops-$sys]}" --clients "$clients" \
                --per-client "$per" --data-size 100 --json $(tls_args "$sys") >"$out" \
                || die "bench ops against $sys failed"
            c1=0 v1=0
            for spid in $(sys_pids "ops-$sys"); do
                c1=$((c1 + $(cpu_ticks "$spid"))); v1=$((v1 + $(vol_csw "$spid")))
            done
            printf 'cpu_ticks=%s\nclk_tck=%s\nvol_csw=%s\n' "$((c1 - c0))" "$(getconf CLK_TCK)" "$((v1 - v0))" \
                >"${out%.jsonl}.cpu"
            log "  $sys clients=$clients $label: $(python3 -c '
import json, sys
print("  ".join("%s %.0f/s p50 %.2fms p99 %.2fms" % (d["phase"], d["ops_per_sec"], d["p50_us"] / 1e3, d["p99_us"] / 1e3)
                for d in map(json.loads, open(sys.argv[1]))))' "$out")  [load $(cut -d' ' -f1 /proc/loadavg)]"
        done
    done
done
for sys in $OPS_SYSTEMS; do stop_server "ops-$sys"; done

# ---------------------------------------------------------------------------- load
LOAD_SYSTEMS="zlock zk"
[ -z "${SKIP_LOAD:-}" ] || LOAD_SYSTEMS=""
log "phase 2: load $LOAD_COUNT znodes x 100 B, memory, restart (one server at a time): ${LOAD_SYSTEMS:-skipped}"
for sys in $LOAD_SYSTEMS; do
    f="$RAW/load-$sys.env"; : >"$f"
    t0=$(now)
    sys_start "load-$sys" "$sys"
    d=${SYS_DIR[load-$sys]} port=${SYS_PORT[load-$sys]} pid=${SYS_PID[load-$sys.1]}
    sys_config "load-$sys" >"$RAW/zoo-$sys-load.cfg"
    ready "127.0.0.1:$port" / >"$RAW/start-empty-$sys.json" || die "$sys did not start"
    echo "start_empty_secs=$(elapsed "$t0" "$(now)")" >>"$f"
    echo "rss_empty_kb=$(rss_kb "$pid" VmRSS)" >>"$f"
    log "  $sys up on 127.0.0.1:$port (pid $pid, VmRSS $(rss_kb "$pid" VmRSS) kB); loading"
    rc=0
    timeout --signal=INT "$LOAD_TIMEOUT" "$ZLOCK" bench load --server "127.0.0.1:$port" \
        --count "$LOAD_COUNT" --clients "$LOAD_CLIENTS" --pipeline "$LOAD_PIPELINE" \
        --data-size 100 --root /zlock-load --json >"$RAW/load-$sys.json" || rc=$?
    echo "load_rc=$rc" >>"$f"
    echo "loadavg_after_load=$(cut -d' ' -f1 /proc/loadavg)" >>"$f"
    echo "rss_loaded_kb=$(rss_kb "$pid" VmRSS)" >>"$f"
    echo "hwm_loaded_kb=$(rss_kb "$pid" VmHWM)" >>"$f"
    echo "znodes_loaded=$(mntr_value "$port" zk_znode_count)" >>"$f"
    echo "approx_data_size=$(mntr_value "$port" zk_approximate_data_size)" >>"$f"
    if [ "$rc" -ne 0 ]; then
        log "  $sys: load cut off or failed (rc $rc); reporting what was loaded"
    else
        log "  $sys: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%d znodes in %.1f s = %.0f creates/s" % (d["count"], d["secs"], d["ops_per_sec"]))' "$RAW/load-$sys.json")"
    fi
    # Let the snapshot that the load may have started finish, then sample again.
    sleep 5
    echo "rss_settled_kb=$(rss_kb "$pid" VmRSS)" >>"$f"
    log "  $sys: VmRSS $(grep rss_loaded_kb "$f" | cut -d= -f2) kB right after the load, $(rss_kb "$pid" VmRSS) kB 5 s later, peak $(rss_kb "$pid" VmHWM) kB"
    if [ "$sys" = zk ] && command -v jcmd >/dev/null; then
        # Informational: the live Java heap after a full GC (what the tree really needs).
        jcmd "$pid" GC.run >/dev/null 2>&1 || true
        jcmd "$pid" GC.heap_info >"$RAW/zk-heap-after-gc.txt" 2>&1 || true
        echo "zk_heap_used_after_gc_kb=$(awk '/garbage-first heap|def new generation|PSYoungGen/ { for (i = 1; i <= NF; i++) if ($i == "used") { v = $(i + 1); sub(/K,?/, "", v); print v; exit } }' "$RAW/zk-heap-after-gc.txt")" >>"$f"
        echo "rss_after_gc_kb=$(rss_kb "$pid" VmRSS)" >>"$f"
    fi
    du -sk "$d/data" | awk '{ print "data_dir_kb=" $1 }' >>"$f"
    stop_server "load-$sys"
    echo "stop_secs=$STOP_SECS" >>"$f"
    log "  $sys stopped (SIGTERM) after $(grep stop_secs "$f" | cut -d= -f2) s; restarting on the same dataDir"
    t0=$(now)
    sys_restart "load-$sys" 1
    pid=${SYS_PID[load-$sys.1]}
    known=/zlock-load/b0/n0
    ready "127.0.0.1:$port" "$known" >"$RAW/restart-$sys.json" || die "$sys did not come back"
    echo "restart_secs=$(elapsed "$t0" "$(now)")" >>"$f"
    echo "rss_restarted_kb=$(rss_kb "$pid" VmRSS)" >>"$f"
    echo "znodes_restarted=$(mntr_value "$port" zk_znode_count)" >>"$f"
    log "  $sys: restart until $known is readable: $(grep restart_secs "$f" | cut -d= -f2) s, $(grep znodes_restarted "$f" | cut -d= -f2) znodes, VmRSS $(grep rss_restarted_kb "$f" | cut -d= -f2) kB"
    stop_server "load-$sys"
    cp "$d/server.log" "$RAW/server-$sys-load.log" 2>/dev/null || true
done
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.env"

# ---------------------------------------------------------------------------- report
if [ -n "${KEEP_RAW:-}" ]; then mkdir -p "$KEEP_RAW" && cp -r "$RAW"/. "$KEEP_RAW"/; fi
mkdir -p "$REPO/bench/results"
STAMP=$(date +%Y-%m-%d)
[ -e "$REPO/bench/results/server-$STAMP.md" ] && STAMP=$(date +%Y-%m-%d-%H%M%S)
MD="$REPO/bench/results/server-$STAMP.md"; JSON="$REPO/bench/results/server-$STAMP.json"
python3 "$REPO/bench/server-report.py" "$RAW" "$MD" "$JSON" \
    "runs=$RUNS" "ops_n1=$OPS_N1" "ops_n32=$OPS_N32" "load_count=$LOAD_COUNT" \
    "load_clients=$LOAD_CLIENTS" "load_pipeline=$LOAD_PIPELINE" "load_timeout=$LOAD_TIMEOUT" \
    "zk_jvmflags=$ZK_JVMFLAGS" "skip_load=${SKIP_LOAD:-}" "script_secs=$(( $(date +%s) - T_START ))"
log "done in $(( $(date +%s) - T_START )) s: $MD, $JSON"
cat "$MD"
