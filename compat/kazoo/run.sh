#!/usr/bin/env bash
# Run kazoo 2.11.0's own test suite against a server on a free loopback port.
#
#   compat/kazoo/run.sh <zlock|zookeeper|external> [--update] [extra pytest args...]
#
#   zlock      start target/release/zlock (or $ZLOCK_BIN) with a temp data dir
#   zlock-ensemble  start three zlock members forming an ensemble; kazoo's clients
#              get all three in their connect string (expected_pass.txt applies, and
#              ensemble_pass.txt: what needs an ensemble, kazoo's TestReconfig). The
#              members run with --reconfig-enabled and kazoo's harness's super user
#              (super:test), as its harness configures ZooKeeper, unless
#              ZLOCK_SERVER_ARGS is set
#   zookeeper  start Apache ZooKeeper 3.8 (Debian package) with a temp zoo.cfg
#   external   use a server already listening on 127.0.0.1:$ZLOCK_TEST_PORT
#   --update   zookeeper: rewrite zookeeper_pass.txt with this run's passes;
#              zlock/external: add this run's passes to expected_pass.txt
#              (grow only; remove tests by hand)
#
# The suite's failures do NOT fail this script. It fails (exit 1) only if a
# test listed in the expectation file did not pass:
#   zlock / external -> compat/kazoo/expected_pass.txt  (grown by server engineers)
#   zookeeper        -> compat/kazoo/zookeeper_pass.txt (the reference baseline)
# Exit 2 means the harness itself broke (server did not start, pytest crashed).
#
# Outputs in compat/kazoo/results/ (git-ignored):
#   <kind>.txt         one "<OUTCOME> <test id>" line per test + summary
#   <kind>.xml         junit xml
#   <kind>.log         full pytest output
#   server-<kind>.log  server log
#
# Env: KAZOO_TESTS (default kazoo.tests; e.g. kazoo.tests.test_lock),
#      KAZOO_TIMEOUT (per-test seconds, default 120),
#      KAZOO_SUITE_TIMEOUT (whole run, default 900; exceeding it = exit 2),
#      ZLOCK_VENV, ZLOCK_BIN,
#      ZLOCK_SERVER_ARGS, ZK_CLASSPATH (see compat/lib/server.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib/server.sh
source "$HERE/../lib/server.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

[[ $# -ge 1 ]] || usage
KIND=$1
shift
case "$KIND" in zlock | zlock-ensemble | zookeeper | external) ;; *) usage ;; esac
UPDATE=0
if [[ "${1:-}" == "--update" ]]; then
    UPDATE=1
    shift
fi

RESULTS="$HERE/results"
mkdir -p "$RESULTS"
OUT_TXT="$RESULTS/$KIND.txt"
OUT_XML="$RESULTS/$KIND.xml"
OUT_LOG="$RESULTS/$KIND.log"
if [[ "$KIND" == zookeeper ]]; then
    EXPECT="$HERE/zookeeper_pass.txt"
else
    EXPECT="$HERE/expected_pass.txt"
fi
# Tests that need an ensemble (reconfig), expected on zlock-ensemble on top of EXPECT.
EXTRA_EXPECT=""
if [[ "$KIND" == zlock-ensemble ]]; then
    EXTRA_EXPECT="$HERE/ensemble_pass.txt"
    # kazoo's harness runs ZooKeeper with reconfigEnabled=true and superDigest super:test.
    export ZLOCK_SERVER_ARGS="${ZLOCK_SERVER_ARGS:---reconfig-enabled --super-digest super:D/InIHSb7yEEbrWz8b9l71RjZJU=}"
fi
TESTS="${KAZOO_TESTS:-kazoo.tests}"
# A partial run (subset of modules, -k, ...) only checks the expected tests it ran.
PARTIAL=0
if [[ "$TESTS" != kazoo.tests || $# -gt 0 ]]; then PARTIAL=1; fi

PY="$(compat_ensure_venv)"

OUTCOMES="$(mktemp "${TMPDIR:-/tmp}/zlock-kazoo-outcomes.XXXXXX")"
TXT_WRITTEN=0
PYTEST_PID=""
cleanup() {
    if [[ -n "$PYTEST_PID" ]] && kill -0 "$PYTEST_PID" 2>/dev/null; then
        kill -TERM "$PYTEST_PID" 2>/dev/null || true   # timeout(1) passes it on to pytest
        wait "$PYTEST_PID" 2>/dev/null || true
    fi
    compat_stop_server
    if [[ $TXT_WRITTEN -eq 0 && -s "$OUTCOMES" ]]; then
        # interrupted: keep whatever finished
        { echo "# INCOMPLETE run against $KIND"; sort -k2 "$OUTCOMES"; } >"$OUT_TXT"
    fi
    rm -f "$OUTCOMES"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

COMPAT_LOG_DIR="$RESULTS" compat_start_server "$KIND" || exit 2

SITE="$("$PY" -c 'import os, kazoo; print(os.path.dirname(os.path.dirname(kazoo.__file__)))')"

echo "== kazoo suite ($TESTS) against $KIND at 127.0.0.1:$COMPAT_PORT"
start=$SECONDS
(
    cd "$RESULTS"   # keep pytest's rootdir away from the repo's files
    export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
    export ZLOCK_TEST_PORT="$COMPAT_PORT"
    export ZLOCK_TEST_HOSTS="$COMPAT_HOSTS"
    export ZLOCK_KAZOO_OUTCOMES="$OUTCOMES"
    exec timeout -k 10 "${KAZOO_SUITE_TIMEOUT:-900}" \
        "$PY" -m pytest -p zlock_kazoo_plugin --pyargs "$TESTS" \
        --timeout "${KAZOO_TIMEOUT:-120}" -p no:cacheprovider -q \
        --rootdir "$SITE" --junitxml "$OUT_XML" -o junit_family=xunit1 "$@"
) >"$OUT_LOG" 2>&1 &
PYTEST_PID=$!
rc=0
wait "$PYTEST_PID" || rc=$?
PYTEST_PID=""
elapsed=$((SECONDS - start))

passed=$(grep -c '^PASSED ' "$OUTCOMES" || true)
failed=$(grep -c '^FAILED ' "$OUTCOMES" || true)
errors=$(grep -c '^ERROR ' "$OUTCOMES" || true)
skipped=$(grep -c '^SKIPPED ' "$OUTCOMES" || true)
summary_line="$(grep -E '^[=]* ?[0-9]+ (passed|failed|skipped|error)' "$OUT_LOG" | tail -n 1 || true)"
{
    echo "# kazoo 2.11.0 suite ($TESTS) against $KIND; $(date -u +%Y-%m-%dT%H:%M:%SZ); ${elapsed}s"
    echo "# passed=$passed failed=$failed errors=$errors skipped=$skipped"
    echo "# pytest: $summary_line"
    sort -k2 "$OUTCOMES"
} >"$OUT_TXT"
TXT_WRITTEN=1

echo "kazoo vs $KIND: passed=$passed failed=$failed errors=$errors skipped=$skipped in ${elapsed}s"
echo "  pytest: $summary_line"
echo "  details: $OUT_TXT (log: $OUT_LOG)"

# pytest exit codes: 0 all passed, 1 some failed; others = harness trouble
# (2 interrupted, 3 internal error, 4 usage error, 5 nothing collected;
#  124/137: the whole suite exceeded KAZOO_SUITE_TIMEOUT)
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    echo "the kazoo suite did not finish within ${KAZOO_SUITE_TIMEOUT:-900}s (results above are partial)" >&2
    exit 2
elif [[ $rc -ne 0 && $rc -ne 1 ]]; then
    echo "pytest exited with $rc (not a test failure); last lines of $OUT_LOG:" >&2
    tail -n 40 "$OUT_LOG" >&2
    exit 2
fi

pass_list() { grep '^PASSED ' "$OUTCOMES" | cut -d' ' -f2- | sort -u; }
read_list() { grep -v -E '^[[:space:]]*(#|$)' "$1" | sed 's/[[:space:]]*$//' | sort -u; }

# Tests whose outcome depends on the machine, not on the server under test;
# `--update` never adds them to expected_pass.txt.
ENV_DEPENDENT=(
    # hard-wired to 127.0.0.1:2181 (zlock's default port): fails if anything listens there
    "kazoo/tests/test_utils.py::TestCreateTCPConnection::test_slow_connect"
)

if [[ $UPDATE -eq 1 ]]; then
    if [[ "$KIND" == zookeeper ]]; then
        # The reference list: replaced by this run's passes.
        {
            echo "# kazoo 2.11.0 tests that pass against Apache ZooKeeper 3.8 through compat/kazoo/run.sh."
            echo "# Regenerate: compat/kazoo/run.sh zookeeper --update"
            pass_list
        } >"$EXPECT.new"
    else
        # Grow only: keep the header comments and every listed test, add new passes.
        # (Removing a test from the list is a deliberate, manual edit.)
        {
            sed -n '/^[[:space:]]*#/!q; p' "$EXPECT" 2>/dev/null || true
            { read_list "$EXPECT" 2>/dev/null || true; pass_list; } | sort -u |
                grep -v -x -F -f <(printf '%s\n' "${ENV_DEPENDENT[@]}") || true
        } >"$EXPECT.new"
    fi
    mv "$EXPECT.new" "$EXPECT"
    echo "updated $EXPECT ($(read_list "$EXPECT" | wc -l) tests)"
fi

# Compare against the expectation file(s).
expected="$( { read_list "$EXPECT" 2>/dev/null || true
    [[ -z "$EXTRA_EXPECT" ]] || read_list "$EXTRA_EXPECT"; } | sort -u)"
if [[ $PARTIAL -eq 1 ]]; then
    ran="$(cut -d' ' -f2- "$OUTCOMES" | sort -u)"
    expected="$(comm -12 <(printf '%s\n' "$expected") <(printf '%s\n' "$ran") | sed '/^$/d')"
fi
missing="$(comm -23 <(printf '%s\n' "$expected" | sed '/^$/d') <(pass_list))"
n_expected=$(printf '%s\n' "$expected" | sed '/^$/d' | wc -l)

if [[ "$KIND" != zookeeper && -f "$HERE/zookeeper_pass.txt" ]]; then
    zk_total=$(read_list "$HERE/zookeeper_pass.txt" | wc -l)
    zk_both=$(comm -12 <(read_list "$HERE/zookeeper_pass.txt") <(pass_list) | wc -l)
    echo "  $zk_both of the $zk_total tests that pass on Apache ZooKeeper pass on $KIND$([[ $PARTIAL -eq 1 ]] && echo ' (partial run)')"
    new_passes=$(comm -13 <(printf '%s\n' "$expected" | sed '/^$/d') <(pass_list) |
        { grep -v -x -F -f <(printf '%s\n' "${ENV_DEPENDENT[@]}") || true; } | wc -l)
    if [[ $new_passes -gt 0 ]]; then
        echo "  $new_passes passing tests are not yet in $(basename "$EXPECT") (add them: $0 $KIND --update)"
    fi
fi

if [[ -n "$missing" ]]; then
    echo "REGRESSION: $(printf '%s\n' "$missing" | wc -l) of $n_expected expected tests did not pass (listed in $(basename "$EXPECT")):" >&2
    awk 'NR == FNR { want[$0] = 1; next }
         { id = substr($0, index($0, " ") + 1); if (id in want) { got[id] = $1 } }
         END { for (t in want) printf "  %s %s\n", ((t in got) ? got[t] : "NOT-RUN"), t }' \
        <(printf '%s\n' "$missing") "$OUTCOMES" | sort -k2 >&2
    exit 1
fi
echo "OK: all $n_expected expected tests passed ($(basename "$EXPECT"))"
