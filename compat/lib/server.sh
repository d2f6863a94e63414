# shellcheck shell=bash
# Shared helpers for the compatibility harness: start/stop a ZooKeeper-wire
# server (zlock or Apache ZooKeeper) on a free loopback port.
#
# Source this file, then:
#   compat_start_server <kind>     # kind: zlock | zlock-ensemble | zookeeper | external
#     -> sets COMPAT_PORT, COMPAT_SERVER_PID (empty for external), COMPAT_TMP, and
#        COMPAT_HOSTS (host:port,... of every server: one, or three for zlock-ensemble)
#   zlock-ensemble: three zlock processes forming an ensemble on loopback ports
#   (each its own data dir; COMPAT_SERVER_PID lists the three pids).
#   compat_stop_server             # stops by pid, removes COMPAT_TMP (idempotent)
#
# Callers should `trap compat_stop_server EXIT`.
#
# Environment knobs:
#   ZLOCK_BIN          zlock binary (default: <repo>/target/release/zlock)
#   ZLOCK_SERVER_ARGS  extra args for `zlock server` (default: none). Both servers
#                      get the same generated zoo.cfg (extendedTypesEnabled=true,
#                      4lw.commands.whitelist=*, maxClientCnxns=0); zlock runs as
#                      `zlock server --config <zoo.cfg> --port <port> --data-dir <dir>`.
#   ZK_CLASSPATH       classpath for Apache ZooKeeper
#                      (default: /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar)
#   ZLOCK_TEST_PORT    with kind=external: port of an already running server
#   COMPAT_LOG_DIR     where the server log goes (default: the temp dir, which is
#                      deleted; the log tail is printed if the server fails to start)
#   COMPAT_START_TIMEOUT seconds to wait for the port to accept connections (default 60)

COMPAT_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
COMPAT_PORT=""
COMPAT_SERVER_PID=""
COMPAT_TMP=""
COMPAT_SERVER_LOG=""
COMPAT_HOSTS=""

compat_log() { printf '[compat] %s\n' "$*" >&2; }

# Print a free TCP port on 127.0.0.1 (the kernel picks it; we release it at once).
compat_free_port() {
    python3 - <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

# compat_port_open <port>: true if a TCP connect to 127.0.0.1:<port> succeeds.
compat_port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

compat_wait_port() {
    local port=$1 pid=${2:-} timeout=${COMPAT_START_TIMEOUT:-60}
    local deadline=$((SECONDS + timeout))
    while ((SECONDS < deadline)); do
        if compat_port_open "$port"; then
            return 0
        fi
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            compat_log "server process $pid exited before listening on 127.0.0.1:$port"
            return 1
        fi
        sleep 0.2
    done
    compat_log "timed out after ${timeout}s waiting for 127.0.0.1:$port"
    return 1
}

compat_start_server() {
    local kind=$1
    COMPAT_TMP="$(mktemp -d "${TMPDIR:-/tmp}/zlock-compat-${kind}.XXXXXX")"
    local logdir="${COMPAT_LOG_DIR:-$COMPAT_TMP}"
    mkdir -p "$logdir"
    COMPAT_SERVER_LOG="$logdir/server-${kind}.log"

    case "$kind" in
    zlock-ensemble)
        compat_start_ensemble "$logdir" || return 1
        return 0
        ;;
    external)
        COMPAT_PORT="${ZLOCK_TEST_PORT:?kind=external needs ZLOCK_TEST_PORT}"
        compat_log "using already running server at 127.0.0.1:$COMPAT_PORT"
        COMPAT_HOSTS="127.0.0.1:$COMPAT_PORT"
        compat_wait_port "$COMPAT_PORT" || return 1
        return 0
        ;;
    zlock | zookeeper)
        COMPAT_PORT="$(compat_free_port)"
        mkdir -p "$COMPAT_TMP/data"
        # One zoo.cfg for both servers, so they run with the same settings.
        cat >"$COMPAT_TMP/zoo.cfg" <<CFG
tickTime=2000
dataDir=$COMPAT_TMP/data
clientPort=$COMPAT_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
extendedTypesEnabled=true
CFG
        if [[ "$kind" == zlock ]]; then
            local bin="${ZLOCK_BIN:-$COMPAT_REPO_ROOT/target/release/zlock}"
            if [[ ! -x "$bin" ]]; then
                compat_log "zlock binary not found at $bin (build it: cargo build --release -p zlock-cli)"
                return 1
            fi
            local extra=()
            read -r -a extra <<<"${ZLOCK_SERVER_ARGS:-}"
            "$bin" server --config "$COMPAT_TMP/zoo.cfg" --port "$COMPAT_PORT" \
                --data-dir "$COMPAT_TMP/data" "${extra[@]}" >"$COMPAT_SERVER_LOG" 2>&1 &
        else
            local cp="${ZK_CLASSPATH:-/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar}"
            java -Xmx512m -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain \
                "$COMPAT_TMP/zoo.cfg" >"$COMPAT_SERVER_LOG" 2>&1 &
        fi
        COMPAT_SERVER_PID=$!
        ;;
    *)
        compat_log "unknown server kind '$kind' (expected zlock | zookeeper | external)"
        return 2
        ;;
    esac

    compat_log "started $kind (pid $COMPAT_SERVER_PID) on 127.0.0.1:$COMPAT_PORT, log $COMPAT_SERVER_LOG"
    if ! compat_wait_port "$COMPAT_PORT" "$COMPAT_SERVER_PID"; then
        compat_log "---- last lines of $COMPAT_SERVER_LOG ----"
        tail -n 40 "$COMPAT_SERVER_LOG" >&2 || true
        return 1
    fi
    COMPAT_HOSTS="127.0.0.1:$COMPAT_PORT"
    compat_log "$kind is accepting connections on 127.0.0.1:$COMPAT_PORT"
}

# Three zlock members on loopback: every member gets the same --server list.
compat_start_ensemble() {
    local logdir=$1 bin="${ZLOCK_BIN:-$COMPAT_REPO_ROOT/target/release/zlock}"
    if [[ ! -x "$bin" ]]; then
        compat_log "zlock binary not found at $bin (build it: cargo build --release -p zlock-cli)"
        return 1
    fi
    local i ports=() servers=() pids=() hosts=()
    for i in 1 2 3; do
        ports[i]="$(compat_free_port)"
        servers+=(--server "$i=127.0.0.1:$(compat_free_port):$(compat_free_port);${ports[i]}")
        hosts+=("127.0.0.1:${ports[i]}")
    done
    cat >"$COMPAT_TMP/zoo.cfg" <<CFG
tickTime=2000
maxClientCnxns=0
4lw.commands.whitelist=*
extendedTypesEnabled=true
CFG
    local extra=()
    read -r -a extra <<<"${ZLOCK_SERVER_ARGS:-}"
    for i in 1 2 3; do
        mkdir -p "$COMPAT_TMP/data$i"
        "$bin" server --config "$COMPAT_TMP/zoo.cfg" --myid "$i" --data-dir "$COMPAT_TMP/data$i" \
            "${servers[@]}" "${extra[@]}" >"$logdir/server-zlock-ensemble-$i.log" 2>&1 &
        pids+=($!)
    done
    COMPAT_SERVER_PID="${pids[*]}"
    COMPAT_PORT="${ports[1]}"
    COMPAT_HOSTS="$(IFS=,; echo "${hosts[*]}")"
    COMPAT_SERVER_LOG="$logdir/server-zlock-ensemble-1.log"
    compat_log "started a zlock ensemble (pids $COMPAT_SERVER_PID) on $COMPAT_HOSTS"
    for i in 1 2 3; do
        if ! compat_wait_port "${ports[i]}" "${pids[i - 1]}"; then
            tail -n 40 "$logdir/server-zlock-ensemble-$i.log" >&2 || true
            return 1
        fi
    done
    # Serving once a leader is elected: a write through any member then succeeds.
    local deadline=$((SECONDS + ${COMPAT_START_TIMEOUT:-60}))
    while ((SECONDS < deadline)); do
        for i in 1 2 3; do
            if printf 'srvr' | nc -q 1 127.0.0.1 "${ports[i]}" 2>/dev/null | grep -q '^Mode: leader'; then
                compat_log "zlock ensemble serving on $COMPAT_HOSTS (leader: member $i)"
                return 0
            fi
        done
        sleep 0.2
    done
    compat_log "no zlock ensemble member became the leader"
    return 1
}

compat_stop_server() {
    local pid
    for pid in $COMPAT_SERVER_PID; do
        compat_stop_pid "$pid"
    done
    COMPAT_SERVER_PID=""
    if [[ -n "$COMPAT_TMP" && -d "$COMPAT_TMP" ]]; then
        rm -rf "$COMPAT_TMP"
    fi
    COMPAT_TMP=""
}

compat_stop_pid() {
    local pid="$1"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        local i
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            compat_log "server pid $pid ignored SIGTERM for 5s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
        compat_log "stopped server pid $pid"
    fi
}

# Ensure the Python venv with kazoo's test suite exists; prints its python path.
#   ZLOCK_VENV  venv directory (default: <repo>/.venv)
compat_ensure_venv() {
    local venv="${ZLOCK_VENV:-$COMPAT_REPO_ROOT/.venv}"
    if ! "$venv/bin/python" -c 'import kazoo.tests, pytest_timeout, kazoo.version as v; assert v.__version__ == "2.11.0"' 2>/dev/null; then
        compat_log "creating venv $venv with kazoo[test]==2.11.0 pytest-timeout"
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install -q --disable-pip-version-check \
            "kazoo[test]==2.11.0" pytest-timeout >&2
    fi
    printf '%s\n' "$venv/bin/python"
}
