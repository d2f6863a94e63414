#!/usr/bin/env bash
# Drive Apache ZooKeeper's Java CLI (zkCli.sh, Debian package `zookeeper`)
# against a server on 127.0.0.1:<port> and check its outputs.
#
#   compat/zkcli/test_zkcli.sh <port>
#
# Works under /zkcli_t (removed first if left over). Exit 0 if every check
# passes, 1 otherwise. ZKCLI overrides the zkCli.sh path.
set -uo pipefail

PORT="${1:?usage: $0 <port>}"
ZKCLI="${ZKCLI:-/usr/share/zookeeper/bin/zkCli.sh}"
SERVER="127.0.0.1:$PORT"
CMD_TIMEOUT="${ZKCLI_TIMEOUT:-30}"

if [[ ! -x "$ZKCLI" ]]; then
    echo "zkCli not found at $ZKCLI (apt-get install -y zookeeper)" >&2
    exit 2
fi

PASS=0
FAIL=0
OUT=""
RC=0

# Strip the JVM/client chatter so only command output remains.
filter() {
    { grep -v -E '^(SLF4J:|Connecting to |Welcome to ZooKeeper!|JLine support is|WATCHER::|WatchedEvent state:)' || true; } |
        sed '/^[[:space:]]*$/d'
}

# zk <args...>: one zkCli invocation (one command, one session).
zk() {
    local raw
    raw="$(timeout "$CMD_TIMEOUT" "$ZKCLI" -server "$SERVER" "$@" 2>&1 </dev/null)"
    RC=$?
    OUT="$(printf '%s\n' "$raw" | filter)"
    LAST="zkCli $*"
    check_timeout
}

# zk_session <script>: several commands in one session (stdin), then quit.
zk_session() {
    local raw
    raw="$(printf '%s\nquit\n' "$1" | timeout "$CMD_TIMEOUT" "$ZKCLI" -server "$SERVER" 2>&1)"
    RC=$?
    OUT="$(printf '%s\n' "$raw" | filter)"
    LAST="zkCli session: $(printf '%s' "$1" | tr '\n' ';')"
    check_timeout
}

# A hung command or a lost connection means the server is not answering:
# stop at once rather than failing (or waiting on) every remaining check.
check_timeout() {
    local why=""
    if [[ "$RC" == 124 ]]; then
        why="no answer within ${CMD_TIMEOUT}s"
    elif printf '%s\n' "$OUT" | grep -q 'KeeperErrorCode = ConnectionLoss'; then
        why="connection lost"
    fi
    if [[ -n "$why" ]]; then
        printf '  FAIL  %s: %s; giving up. Output:\n' "$LAST" "$why"
        printf '%s\n' "$OUT" | tail -n 20 | sed 's/^/        | /'
        echo "zkCli checks: $PASS passed, $((FAIL + 1)) failed (aborted)"
        exit 1
    fi
}

ok() { PASS=$((PASS + 1)); printf '  ok    %s\n' "$1"; }
bad() {
    FAIL=$((FAIL + 1))
    printf '  FAIL  %s\n        (%s, exit %s) output:\n' "$1" "$LAST" "$RC"
    printf '%s\n' "$OUT" | sed 's/^/        | /'
}

expect_rc() { # expect_rc <code> <what>
    if [[ "$RC" == "$1" ]]; then ok "$2 (exit $1)"; else bad "$2: expected exit $1"; fi
}
expect_line() { # expect_line <exact line> [what]
    if printf '%s\n' "$OUT" | grep -qxF -- "$1"; then ok "${2:-output has line '$1'}"; else bad "${2:-output has line '$1'}"; fi
}
expect_re() { # expect_re <ERE matching a whole line> [what]
    if printf '%s\n' "$OUT" | grep -qxE -- "$1"; then ok "${2:-output matches /$1/}"; else bad "${2:-output matches /$1/}"; fi
}
expect_no_re() {
    if printf '%s\n' "$OUT" | grep -qxE -- "$1"; then bad "${2:-output has no line /$1/}"; else ok "${2:-output has no line /$1/}"; fi
}
field() { printf '%s\n' "$OUT" | sed -n "s/^$1 = //p" | head -n1; }

if ! (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "nothing accepts connections on $SERVER" >&2
    exit 1
fi

echo "zkCli compatibility checks against $SERVER"

# --- clean slate -----------------------------------------------------------
zk deleteall /zkcli_t
zk stat /zkcli_t
expect_rc 1 "stat of a missing node fails"
expect_line "Node does not exist: /zkcli_t"

# --- create / ls / get -----------------------------------------------------
zk create /zkcli_t v1
expect_rc 0 "create /zkcli_t v1"
expect_line "Created /zkcli_t"

zk create /zkcli_t v1
expect_rc 1 "create of an existing node fails"
expect_line "Node already exists: /zkcli_t"

zk ls /
expect_rc 0 "ls /"
expect_re '\[(.*, )?zkcli_t(, .*)?\]' "ls / lists zkcli_t"
if printf '%s\n' "$OUT" | grep -qxE '\[(.*, )?zookeeper(, .*)?\]'; then
    ok "ls / lists the zookeeper system node"
else
    printf '  note  ls / does not list /zookeeper (ZooKeeper has it; not enforced)\n'
fi

zk get /zkcli_t
expect_rc 0 "get /zkcli_t"
expect_line "v1" "get returns v1"

# --- set / stat ------------------------------------------------------------
zk set /zkcli_t v2
expect_rc 0 "set /zkcli_t v2"

zk get -s /zkcli_t
expect_rc 0 "get -s /zkcli_t"
expect_line "v2" "get -s returns v2"
expect_line "dataVersion = 1"
expect_line "cversion = 0"
expect_line "aclVersion = 0"
expect_line "ephemeralOwner = 0x0"
expect_line "dataLength = 2"
expect_line "numChildren = 0"
expect_re 'cZxid = 0x[0-9a-f]+'
expect_re 'ctime = [A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8} [A-Z]+ [0-9]{4}' "ctime is a date"
czxid="$(field cZxid)"
mzxid="$(field mZxid)"
if [[ -n "$czxid" && -n "$mzxid" ]] && ((mzxid > czxid)); then
    ok "mZxid ($mzxid) > cZxid ($czxid) after set"
else
    bad "mZxid ($mzxid) > cZxid ($czxid) after set"
fi

zk stat /zkcli_t
expect_rc 0 "stat /zkcli_t"
expect_line "dataVersion = 1" "stat shows dataVersion = 1"
expect_no_re 'v[12]' "stat prints no data"

zk set -v 0 /zkcli_t v3
expect_rc 1 "set with a stale version fails"
expect_line "version No is not valid : /zkcli_t"
zk get /zkcli_t
expect_line "v2" "failed set left v2 in place"

zk getAcl /zkcli_t
expect_rc 0 "getAcl /zkcli_t"
expect_line "'world,'anyone" "acl is world:anyone"
expect_line ": cdrwa" "acl perms are cdrwa"

# --- ephemeral -------------------------------------------------------------
zk_session $'create -e /zkcli_t/eph e1\nget /zkcli_t/eph\nstat /zkcli_t/eph\nls /zkcli_t'
expect_line "Created /zkcli_t/eph" "create -e /zkcli_t/eph"
expect_line "e1" "get of the ephemeral node"
expect_re 'ephemeralOwner = 0x0*[1-9a-f][0-9a-f]*' "ephemeralOwner is the (non-zero) session id"
expect_line "[eph]" "ls shows the ephemeral node inside its session"

# The session closed when zkCli quit: the ephemeral node must be gone.
gone=0
for _ in 1 2 3; do
    zk ls /zkcli_t
    if [[ "$RC" == 0 ]] && printf '%s\n' "$OUT" | grep -qxF '[]'; then
        gone=1
        break
    fi
    sleep 1
done
if [[ $gone == 1 ]]; then ok "ephemeral node removed after its session closed"; else bad "ephemeral node removed after its session closed"; fi

# --- sequential ------------------------------------------------------------
zk create /zkcli_t/sq ""
expect_rc 0 "create /zkcli_t/sq"
zk create -s /zkcli_t/sq/n- a
expect_rc 0 "create -s /zkcli_t/sq/n- a"
expect_re 'Created /zkcli_t/sq/n-[0-9]{10}' "sequential name has a 10-digit suffix"
expect_line "Created /zkcli_t/sq/n-0000000000" "first sequence number is 0000000000"
zk create -s /zkcli_t/sq/n- b
expect_line "Created /zkcli_t/sq/n-0000000001" "second sequence number is 0000000001"
zk ls /zkcli_t/sq
expect_line "[n-0000000000, n-0000000001]" "ls lists both sequential nodes"
zk get /zkcli_t/sq/n-0000000001
expect_line "b" "get of the second sequential node"

# --- delete ----------------------------------------------------------------
zk delete /zkcli_t
expect_rc 1 "delete of a non-empty node fails"
expect_line "Node not empty: /zkcli_t"

zk delete /zkcli_t/sq/n-0000000000
expect_rc 0 "delete /zkcli_t/sq/n-0000000000"
zk ls /zkcli_t/sq
expect_line "[n-0000000001]" "ls after delete"
zk delete /zkcli_t/sq/n-0000000001
expect_rc 0 "delete /zkcli_t/sq/n-0000000001"
zk delete /zkcli_t/sq
expect_rc 0 "delete /zkcli_t/sq"
zk delete /zkcli_t
expect_rc 0 "delete /zkcli_t"

zk get /zkcli_t
expect_rc 1 "get of the deleted node fails"
expect_line "Node does not exist: /zkcli_t"
zk ls /
expect_no_re '\[(.*, )?zkcli_t(, .*)?\]' "ls / no longer lists zkcli_t"

echo "zkCli checks: $PASS passed, $FAIL failed"
[[ $FAIL -eq 0 ]]
