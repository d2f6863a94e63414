#!/usr/bin/env bash
# Run every compatibility check against one server kind.
#
#   compat/run_all.sh [zlock|zookeeper]      (default: zlock)
#
# 1. zkCli (Apache ZooKeeper's Java CLI) scripted session  -> must pass
# 2. kazoo 2.11.0's own test suite                         -> must pass every
#    test listed in compat/kazoo/expected_pass.txt (zlock) or
#    compat/kazoo/zookeeper_pass.txt (zookeeper); other failures are reported only.
# 3. (zlock only) kazoo's suite again against a three-member zlock ensemble, every
#    member in the connect string                           -> expected_pass.txt too
#
# Logs: compat/results/ (zkCli part), compat/kazoo/results/ (kazoo part).
# Each part starts its own server on a free 127.0.0.1 port and stops it (by pid)
# on exit. ZLOCK_BIN / ZLOCK_SERVER_ARGS / ZLOCK_VENV: see compat/lib/server.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KIND="${1:-zlock}"
case "$KIND" in zlock | zookeeper) ;; *) echo "usage: $0 [zlock|zookeeper]" >&2; exit 2 ;; esac

# shellcheck source=lib/server.sh
source "$HERE/lib/server.sh"
trap compat_stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

status=0

echo "---- compat: zkCli against $KIND"
start=$SECONDS
mkdir -p "$HERE/results"
COMPAT_LOG_DIR="$HERE/results" compat_start_server "$KIND"
if "$HERE/zkcli/test_zkcli.sh" "$COMPAT_PORT" 2>&1 | tee "$HERE/results/zkcli-$KIND.txt"; then
    zkcli_result="passed"
else
    zkcli_result="FAILED"
    status=1
fi
compat_stop_server
echo "zkCli: $zkcli_result ($((SECONDS - start))s)"

echo "---- compat: kazoo test suite against $KIND"
start=$SECONDS
if "$HERE/kazoo/run.sh" "$KIND"; then
    kazoo_result="passed (every expected test passed)"
else
    rc=$?
    kazoo_result="FAILED (exit $rc)"
    status=1
fi
echo "kazoo: $kazoo_result ($((SECONDS - start))s)"

ensemble_result="not run"
if [[ "$KIND" == zlock ]]; then
    echo "---- compat: kazoo test suite against a three-member zlock ensemble"
    start=$SECONDS
    if "$HERE/kazoo/run.sh" zlock-ensemble; then
        ensemble_result="passed (every expected test passed)"
    else
        rc=$?
        ensemble_result="FAILED (exit $rc)"
        status=1
    fi
    echo "kazoo on an ensemble: $ensemble_result ($((SECONDS - start))s)"
fi

echo "---- compat summary ($KIND): zkCli $zkcli_result; kazoo $kazoo_result; kazoo on a zlock ensemble $ensemble_result"
exit $status
