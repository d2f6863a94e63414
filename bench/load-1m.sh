#!/usr/bin/env bash
# One zlock binary with 1M znodes loaded: memory, snapshot image hold time, a long read's
# effect on another session's reads, restart. Run it once per binary, alternating.
#
#   bench/load-1m.sh SERVER_BIN [LABEL]      (ZLOCK_CLIENT: the `zlock bench` client,
#                                             default SERVER_BIN)
#
# 1. starts SERVER_BIN on a fresh temp data dir and a free loopback port, with the
#    snapshot module at debug level (it logs how long taking each image held the core);
# 2. `zlock bench load` of 1,000,000 znodes x 100 B (16 sessions x 64 in flight, as
#    bench/server-compare.sh), VmRSS right after and 5 s later, VmHWM;
# 3. bench/long-read-probe.py for 15 s: getAllChildrenNumber of the whole load back to
#    back on one session, getData timed on another;
# 4. SIGTERM, restart on the same data, seconds until a loaded node reads, VmRSS then.
# The server is stopped by pid and the temp dir removed on exit.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN=$1; LABEL=${2:-zlock}; CLIENT=${ZLOCK_CLIENT:-$BIN}
D=$(mktemp -d /tmp/zlock-load-1m.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ZLOCK_LOG="info,zlock_server::snapshot=debug" "$BIN" server --data-dir "$D/data" --port "$PORT" --max-client-cnxns 0 >"$D/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$D"' EXIT
"$CLIENT" bench ready --server "127.0.0.1:$PORT" --path / --timeout-secs 60 >/dev/null
rss() { awk -v k="$1:" '$1 == k { print $2 }' /proc/$PID/status; }
E=$(rss VmRSS)
"$CLIENT" bench load --server "127.0.0.1:$PORT" --count 1000000 --clients 16 --pipeline 64 --data-size 100 --root /zlock-load --json > "$D/load.json"
L=$(rss VmRSS)
sleep 5
S=$(rss VmRSS); H=$(rss VmHWM)
LOADJ=$(cat "$D/load.json")
IMG=$(grep -o 'us=[0-9]*' "$D/server.log" | sed 's/us=//' | tr '\n' ' ')
SNAPMS=$(grep 'snapshot written' "$D/server.log" | grep -o 'ms=[0-9]*' | sed 's/ms=//' | tr '\n' ' ')
echo "$LABEL rss_empty_kb=$E rss_loaded_kb=$L rss_settled_kb=$S hwm_kb=$H"
echo "$LABEL load: $LOADJ"
echo "$LABEL image_taken_us: $IMG"
echo "$LABEL snapshot_written_ms: $SNAPMS"
python3 "$HERE/long-read-probe.py" "127.0.0.1:$PORT" /zlock-load /zlock-load/b0/n1 15 | sed "s/^/$LABEL probe: /"
T0=$(date +%s.%N); kill -TERM $PID; wait $PID 2>/dev/null || true
T1=$(date +%s.%N)
ZLOCK_LOG=info "$BIN" server --data-dir "$D/data" --port "$PORT" --max-client-cnxns 0 >>"$D/server.log" 2>&1 &
PID=$!
"$CLIENT" bench ready --server "127.0.0.1:$PORT" --path /zlock-load/b0/n0 --timeout-secs 300 >/dev/null
T2=$(date +%s.%N)
echo "$LABEL stop_secs=$(python3 -c "print(round($T1-$T0,2))") restart_ready_secs=$(python3 -c "print(round($T2-$T1,2))") rss_after_restart_kb=$(rss VmRSS)"
