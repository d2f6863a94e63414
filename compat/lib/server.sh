# shellcheck shell=bash
# Shared helpers for the compatibility harness: start/stop a ZooKeeper-wire
# server (zlock or Apache ZooKeeper) on a free loopback port. The servers are started by
# bench/lib/systems.sh, the one library that starts systems for the benchmarks and
# this harness; this file keeps the harness's names and knobs.
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
#                      `zlock server --config <zoo.cfg> --port <port> --data-dir <dir>`
#                      (an ensemble member: `--config <zoo.cfg with server.N lines>
#                      --myid N --data-dir <dir>`).
#   ZK_CLASSPATH       classpath for Apache ZooKeeper
#                      (default: /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar)
#   ZLOCK_TEST_PORT    with kind=external: port of an already running server
#   COMPAT_LOG_DIR     where the server log goes (default: the temp dir, which is
#                      deleted; the log tail is printed if the server fails to start)
#   COMPAT_START_TIMEOUT seconds to wait until the server serves (default 60)

COMPAT_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../../bench/lib/systems.sh
source "$COMPAT_REPO_ROOT/bench/lib/systems.sh"
COMPAT_PORT=""
COMPAT_SERVER_PID=""
COMPAT_TMP=""
COMPAT_SERVER_LOG=""
COMPAT_HOSTS=""
COMPAT_INSTANCE=""

compat_log() { printf '[compat] %s\n' "$*" >&2; }

# compat_port_open <port>: true if a TCP connect to 127.0.0.1:<port> succeeds.
compat_port_open() { sys_port_open "$1"; }

compat_wait_port() { sys_wait_port "$1" "${2:-}" "${COMPAT_START_TIMEOUT:-60}"; }

compat_start_server() {
    local kind=$1 sys_kind
    COMPAT_TMP="$(mktemp -d "${TMPDIR:-/tmp}/zlock-compat-${kind}.XXXXXX")"
    local logdir="${COMPAT_LOG_DIR:-$COMPAT_TMP}"
    mkdir -p "$logdir"
    COMPAT_SERVER_LOG="$logdir/server-${kind}.log"

    case "$kind" in
    external)
        COMPAT_PORT="${ZLOCK_TEST_PORT:?kind=external needs ZLOCK_TEST_PORT}"
        compat_log "using already running server at 127.0.0.1:$COMPAT_PORT"
        COMPAT_HOSTS="127.0.0.1:$COMPAT_PORT"
        compat_wait_port "$COMPAT_PORT" || return 1
        return 0
        ;;
    zlock) sys_kind=zlock ;;
    zlock-ensemble) sys_kind=zlock-ens ;;
    zookeeper) sys_kind=zk ;;
    *)
        compat_log "unknown server kind '$kind' (expected zlock | zlock-ensemble | zookeeper | external)"
        return 2
        ;;
    esac
    if [[ "$sys_kind" == zlock* ]]; then
        local bin="${ZLOCK_BIN:-$COMPAT_REPO_ROOT/target/release/zlock}"
        if [[ ! -x "$bin" ]]; then
            compat_log "zlock binary not found at $bin (build it: cargo build --release -p zlock-cli)"
            return 1
        fi
    fi

    sys_init "$COMPAT_TMP"
    COMPAT_INSTANCE=$kind
    SYS_ZLOCK_BIN="${ZLOCK_BIN:-$COMPAT_REPO_ROOT/target/release/zlock}" \
        SYS_ZLOCK_ARGS="${ZLOCK_SERVER_ARGS:-}" SYS_ZLOCK_LOG="${ZLOCK_LOG:-info}" \
        SYS_ZK_CLASSPATH="${ZK_CLASSPATH:-}" SYS_ZK_JVMFLAGS="-Xmx512m" \
        SYS_EXTENDED_TYPES=1 SYS_MEMBERS=3 SYS_LOG_PREFIX="$logdir/server-$kind" \
        sys_start "$kind" "$sys_kind" || return 1
    COMPAT_SERVER_PID="$(sys_pids "$kind")"
    COMPAT_PORT="${SYS_PORT[$kind]}"
    COMPAT_HOSTS="${SYS_HOSTS[$kind]}"
    [[ "$sys_kind" != zlock-ens ]] || COMPAT_SERVER_LOG="$logdir/server-$kind-1.log"
    compat_log "started $kind (pids $COMPAT_SERVER_PID) on $COMPAT_HOSTS, log $COMPAT_SERVER_LOG"
    # Serving: `srvr` answers with a Mode; an ensemble once it has a leader (a write
    # through any member then succeeds).
    if ! sys_wait "$kind" "${COMPAT_START_TIMEOUT:-60}"; then
        return 1
    fi
    compat_log "$kind is serving on $COMPAT_HOSTS"
}

compat_stop_server() {
    if [[ -n "$COMPAT_INSTANCE" ]]; then
        sys_stop "$COMPAT_INSTANCE" 5
        compat_log "stopped $COMPAT_INSTANCE (pids $COMPAT_SERVER_PID)"
    fi
    COMPAT_INSTANCE=""
    COMPAT_SERVER_PID=""
    if [[ -n "$COMPAT_TMP" && -d "$COMPAT_TMP" ]]; then
        rm -rf "$COMPAT_TMP"
    fi
    COMPAT_TMP=""
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
