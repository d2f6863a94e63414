#!/usr/bin/env bash
# Times `zlock import --from-zookeeper` on an Apache ZooKeeper data directory of 1M znodes.
#
#   bench/zk-import-1m.sh [COUNT]     (SYS_ZLOCK_BIN: the zlock binary, default
#                                      target/release/zlock; COUNT default 1000000)
#
# 1. starts Apache ZooKeeper 3.8 standalone on a fresh directory (bench/lib/systems.sh;
#    forceSync=no, since how fast ZooKeeper loads is not what is measured here; its
#    default snapCount=100000, so the load leaves several snapshots and logs after the
#    last one, as a long-running server has);
# 2. `zlock bench load` of COUNT znodes x 100 B into it (16 sessions x 64 in flight);
# 3. stops ZooKeeper by pid (SIGTERM), prints the size of its files;
# 4. `zlock import` of its dataDir, under /usr/bin/time (wall seconds, max RSS), and
#    the import's own summary line;
# 5. starts zlock on the result and prints the seconds until a loaded node reads.
# Every process is stopped by its pid and the directory removed on exit
# (SYS_KEEP_LOGS=DIR keeps the logs).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/lib/systems.sh
. "$HERE/lib/systems.sh"
COUNT=${1:-1000000}
BIN=${SYS_ZLOCK_BIN:-$HERE/../target/release/zlock}
D=$(mktemp -d /tmp/zlock-zk-import.XXXXXX)
ZPID=""
trap 'sys_cleanup; [[ -z $ZPID ]] || sys_stop_pid "$ZPID" 10 || true; rm -rf "$D"' EXIT
sys_init "$D/systems"
SYS_CFG_EXTRA="forceSync=no" sys_start zk zk
sys_wait zk 120
T0=$(date +%s.%N)
"$BIN" bench load --server "${SYS_HOSTS[zk]}" --count "$COUNT" --clients 16 --pipeline 64 \
    --data-size 100 --root /zk-load --json >"$D/load.json"
T1=$(date +%s.%N)
echo "load into ZooKeeper: $COUNT znodes in $(python3 -c "print(round($T1-$T0,1))") s"
sys_stop zk 60
ZK_DATA="${SYS_DIR[zk]}/data"
echo "ZooKeeper's files: $(du -sh --apparent-size "$ZK_DATA/version-2" | cut -f1) apparent," \
    "$(ls "$ZK_DATA/version-2" | grep -c '^snapshot\.') snapshots," \
    "$(ls "$ZK_DATA/version-2" | grep -c '^log\.') logs"
/usr/bin/time -f 'import: wall %e s, max RSS %M KB' \
    "$BIN" import --from-zookeeper "$ZK_DATA" --data-dir "$D/zlock" 2>&1 | grep -v '^\s*$'
echo "zlock snapshot: $(du -sh --apparent-size "$D/zlock/snapshots" | cut -f1)"
PORT=$(sys_free_port)
T0=$(date +%s.%N)
ZLOCK_LOG=warn "$BIN" server --data-dir "$D/zlock" --port "$PORT" --max-client-cnxns 0 \
    >"$D/zlock.log" 2>&1 &
ZPID=$!
"$BIN" bench ready --server "127.0.0.1:$PORT" --path /zk-load/b0/n0 --timeout-secs 300 >/dev/null
T1=$(date +%s.%N)
echo "zlock on the import: a loaded node reads after $(python3 -c "print(round($T1-$T0,2))") s"
