# shellcheck shell=bash
# One place that starts, waits for and stops the systems that zlock's benchmarks and its
# compatibility harness run on this machine (bench/compare, bench/server-compare.sh,
# bench/failover.sh, compat/lib/server.sh): zlock and Apache ZooKeeper 3.8 (standalone,
# or an ensemble of N members), Redis (with or without an fsync'd AOF), and etcd (one
# member, or a cluster of N). Only 127.0.0.1, free ports, a fresh directory per
# instance, every process stopped by its pid.
#
# Source it, then:
#   sys_init DIR               where the instances' directories go (created)
#   sys_start NAME KIND        start an instance; KIND is one of
#                                zlock  zlock-ens  zk  zk-ens  redis  redis-aof  redis-repl
#                                etcd  etcd-ens
#                              and the TLS kinds zlock-tls  zk-tls  zlock-ens-tls  zk-ens-tls:
#                              as zlock, zk, zlock-ens, zk-ens, plus a secureClientPort per
#                              member (PEM stores, ssl.clientAuth=need; ZooKeeper with
#                              NettyServerCnxnFactory and Debian's Netty jars), and for the
#                              -ens-tls kinds TLS between members too (sslQuorum=true,
#                              ssl.quorum.* PEM stores). SYS_HOSTS then names the secure
#                              ports (the plain clientPort stays, on loopback, for srvr);
#                              the certificates are made once per sys_init (sys_tls_certs);
#                              zk-netty  zk-ens-netty: ZooKeeper in plain text on the
#                              NettyServerCnxnFactory the TLS kinds need (its default is NIO),
#                              the TLS kinds' control
#                              (redis-repl: a primary and one replica, both `appendonly yes`,
#                              `appendfsync always`; SYS_HOSTS names the primary only)
#                              (-ens: SYS_MEMBERS members, default 3). Sets, for NAME:
#                                SYS_HOSTS[NAME]  host:port,... of every member's client port
#                                SYS_PORT[NAME]   the first member's client port (plain)
#                                SYS_TLS[NAME]    1 for a TLS kind (SYS_KIND is then the
#                                                 kind without -tls)
#                                SYS_NETTY[NAME]  1 for ZooKeeper on Netty (the TLS kinds,
#                                                 the -netty kinds; SYS_KIND without -netty)
#                                SYS_DIR[NAME]    its directory (configs, data, logs)
#                                SYS_PID[NAME.i]  member i's pid (i = 1..n; 1 when standalone)
#                              Call it in the shell itself, not in $(...): stops `wait`
#                              for their children.
#   sys_wait NAME [SECS]       until it serves (default 60 s): standalone zlock/ZooKeeper
#                              answer `srvr` with a Mode, an ensemble has one leader and
#                              the rest followers, Redis answers PING (redis-repl: and the
#                              primary lists its replica online), every etcd member
#                              /health
#   sys_wait_port PORT [PID] [SECS]   until 127.0.0.1:PORT accepts (PID: fail if it exits)
#   sys_leader NAME            prints the leader's member number (zlock/ZooKeeper: `srvr`;
#                              etcd: /v3/maintenance/status); empty if none
#   sys_cpu_ticks PID          prints a process's CPU time so far (utime + stime), in ticks
#   sys_kill9 NAME I           SIGKILL member I and reap it
#   sys_restart NAME I         start member I again, same ports, config and data
#   sys_members NAME           prints the member numbers (1..n)
#   sys_stop NAME [SECS]       SIGTERM every member, SIGKILL after SECS (default 30)
#   sys_stop_pid PID [SECS]    one process, the same way
#   sys_cleanup                stops every instance still running (call it from an EXIT
#                              trap); with SYS_KEEP_LOGS=DIR the instances' logs and
#                              configs are copied there first, and with a non-zero exit
#                              status the last lines of each log are printed
#   sys_free_port              a free loopback port not handed out before since sys_init
#   sys_4lw PORT WORD          a four-letter word's answer (2 s at most)
#   sys_config NAME            prints the instance's config file(s), for the reports
#   sys_tls_certs              makes (once per sys_init) a throwaway CA, a member
#                              certificate (SAN IP:127.0.0.1 and localhost, extendedKeyUsage
#                              serverAuth,clientAuth; chain then PKCS8 key in one PEM, as
#                              both zlock and ZooKeeper 3.8 read it) and a client
#                              certificate, in DIR/tls; sets SYS_TLS_CA, SYS_TLS_CERT,
#                              SYS_TLS_KEY (the client's flags: --tls-ca --tls-cert --tls-key)
#   sys_tls_evidence NAME      prints the log lines showing a TLS instance came up with
#                              TLS (client port, and between members for -ens-tls); fails
#                              when one is missing
#
# Settings (environment, read at sys_start):
#   SYS_ZLOCK_BIN      the zlock binary (default: <repo>/target/release/zlock)
#   SYS_ZLOCK_ARGS     extra `zlock server` arguments
#   SYS_ZLOCK_LOG      ZLOCK_LOG of zlock servers (default warn)
#   SYS_ZK_CLASSPATH   Apache ZooKeeper's classpath
#                      (default /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar)
#   SYS_ZK_JVMFLAGS    extra JVM flags for ZooKeeper (default none)
#   SYS_CFG_EXTRA      extra zoo.cfg lines for zlock and ZooKeeper (newline-separated)
#   SYS_MEMBERS        members of an -ens kind (default 3)
#   SYS_OBSERVERS      of those, how many (the last ones) are observers
#                      (server.N=...:observer; ZooKeeper's also get peerType=observer)
#                      (zlock-ens and zk-ens; default 0)
#   SYS_EXTENDED_TYPES=1  extendedTypesEnabled=true (TTL nodes) in zoo.cfg
#   SYS_LOG_PREFIX     where the logs go: PREFIX.log, or PREFIX-<i>.log per member
#                      (default: the instance's directory, server.log / m<i>.log)
#
# The zoo.cfg is the same for zlock and ZooKeeper: tickTime=2000, maxClientCnxns=0,
# admin.enableServer=false, 4lw.commands.whitelist=*, and for
# an ensemble initLimit=10, syncLimit=5 and one server.N=127.0.0.1:quorum:election;127.0.0.1:client
# line per member (shared/reference/peers.md). zlock members get `--myid N`, ZooKeeper
# members a myid file; each member has its own data directory and log.

SYS_LIB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SYS_WORK=""
declare -gA SYS_KIND=() SYS_DIR=() SYS_HOSTS=() SYS_PORT=() SYS_PID=() SYS_N=() SYS_LOG=() SYS_TLS=() SYS_NETTY=()
SYS_TLS_CA="" SYS_TLS_CERT="" SYS_TLS_KEY=""
# Debian's libnetty-java: ZooKeeper's TLS client port needs NettyServerCnxnFactory
# (crates/zlock-testkit/src/peers.rs, NETTY_JARS).
SYS_NETTY_JARS="/usr/share/java/netty-buffer.jar:/usr/share/java/netty-codec.jar:\
/usr/share/java/netty-common.jar:/usr/share/java/netty-handler.jar:\
/usr/share/java/netty-resolver.jar:/usr/share/java/netty-transport.jar:\
/usr/share/java/netty-transport-native-epoll.jar:/usr/share/java/netty-transport-native-unix-common.jar"
declare -ga SYS_NAMES=()

sys_log() { printf '[systems] %s\n' "$*" >&2; }

sys_init() {
    SYS_WORK=$1
    mkdir -p "$SYS_WORK"
    SYS_TLS_CA="" SYS_TLS_CERT="" SYS_TLS_KEY=""
}

# Throwaway certificates for the TLS kinds (openssl; EC P-256), never kept: see the header.
sys_tls_certs() {
    [[ -z "$SYS_TLS_CA" ]] || return 0
    local t="$SYS_WORK/tls"
    mkdir -p "$t"
    (
        set -e
        cd "$t"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3 \
            -subj "/O=zlock bench/CN=bench CA" -keyout ca.key -out ca.pem
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >member.ext
        printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=clientAuth\n' >client.ext
        for who in member client; do
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                -subj "/O=zlock bench/CN=bench-$who" -keyout "$who.key" -out "$who.csr"
            openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 \
                -extfile "$who.ext" -out "$who.crt"
        done
        cat member.crt member.key >member.pem
    ) >"$t/openssl.log" 2>&1 || { sys_log "openssl failed:"; cat "$t/openssl.log" >&2; return 1; }
    SYS_TLS_CA="$t/ca.pem" SYS_TLS_CERT="$t/client.crt" SYS_TLS_KEY="$t/client.key"
}

# The zoo.cfg lines of a TLS member: its secure client port, and for an ensemble the
# links between members.
sys_tls_cfg() { # secure-port ensemble(0|1)
    local t="$SYS_WORK/tls"
    echo "secureClientPort=$1"
    echo "secureClientPortAddress=127.0.0.1"
    echo "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"
    echo "ssl.keyStore.location=$t/member.pem"
    echo "ssl.trustStore.location=$t/ca.pem"
    echo "ssl.clientAuth=need"
    if [[ $2 == 1 ]]; then
        echo "sslQuorum=true"
        echo "ssl.quorum.keyStore.location=$t/member.pem"
        echo "ssl.quorum.trustStore.location=$t/ca.pem"
    fi
}

# A port for a member to bind later, and to bind again after a kill (sys_restart).
# Picked below the kernel's ephemeral range (ip_local_port_range), as the Rust tests'
# zlock_testkit::free_port does: a port from that range, once released, can be taken
# meanwhile as the local port of any client connection, or handed out again by another
# bind to port 0. Callers take the port as $(sys_free_port), in a subshell, so the ports
# handed out are kept in a file under SYS_WORK: a subshell's variables die with it (the
# record used to be one, and CI once got one port for a member's client port and for
# another's quorum port). The walk starts at an offset of this shell's pid, so shells
# running side by side rarely meet; each port is checked free by a bind.
sys_free_port() {
    [[ -n $SYS_WORK ]] || { sys_log "sys_free_port: call sys_init first"; return 1; }
    local used="$SYS_WORK/ports-handed-out" p
    touch "$used"
    p=$(python3 - "$used" "$$" <<'PY'
import socket, sys
used = set(open(sys.argv[1]).read().split())
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError):
    low = 32768
first = 10000
span = max(low - first, 1000)
start = (int(sys.argv[2]) * 7919 + len(used)) % span
for i in range(min(span, 4000)):
    port = first + (start + i) % span
    if str(port) in used:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
PY
)
    [[ -n $p ]] || { sys_log "sys_free_port: no free port found below the ephemeral range"; return 1; }
    echo "$p" >>"$used"
    echo "$p"
}

sys_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

sys_wait_port() { # port [pid] [secs]
    local port=$1 pid=${2:-} deadline=$((SECONDS + ${3:-60}))
    while ((SECONDS < deadline)); do
        sys_port_open "$port" && return 0
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            sys_log "process $pid exited before listening on 127.0.0.1:$port"
            return 1
        fi
        sleep 0.1
    done
    sys_log "timed out waiting for 127.0.0.1:$port"
    return 1
}

sys_4lw() { # port word
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' _ "$1" "$2" 2>/dev/null || true
}

# The zoo.cfg both zlock and ZooKeeper get (standalone: clientPort and dataDir in it).
sys_zoo_cfg() { # file [dataDir clientPort]
    {
        echo "tickTime=2000"
        if [[ -n "${2:-}" ]]; then
            echo "dataDir=$2"
            echo "clientPort=$3"
            echo "clientPortAddress=127.0.0.1"
        fi
        echo "maxClientCnxns=0"
        echo "admin.enableServer=false"
        echo "4lw.commands.whitelist=*"
        [[ "${SYS_EXTENDED_TYPES:-0}" != 1 ]] || echo "extendedTypesEnabled=true"
        [[ -z "${SYS_CFG_EXTRA:-}" ]] || printf '%s\n' "$SYS_CFG_EXTRA"
    } >"$1"
}

# A Redis config: loopback, no RDB snapshots; AOF yes means `appendfsync always`.
sys_redis_conf() { # port dir aof(yes|no)
    echo "port $1"
    echo "bind 127.0.0.1"
    echo "daemonize no"
    echo "dir $2"
    echo "save \"\""
    echo "maxclients 15000"
    echo "appendonly $3"
    [[ $3 != yes ]] || echo "appendfsync always"
}

sys_start() { # name kind
    local name=$1 kind=$2 d
    [[ -n "$SYS_WORK" ]] || { sys_log "sys_init first"; return 1; }
    d="$SYS_WORK/$name"
    mkdir -p "$d"
    SYS_TLS[$name]=0 SYS_NETTY[$name]=0
    case $kind in
    zlock-tls | zk-tls | zlock-ens-tls | zk-ens-tls)
        SYS_TLS[$name]=1 kind=${kind%-tls}
        [[ $kind != zk* ]] || SYS_NETTY[$name]=1
        sys_tls_certs || return 1
        ;;
    zk-netty | zk-ens-netty) SYS_NETTY[$name]=1 kind=${kind%-netty} ;;
    esac
    SYS_KIND[$name]=$kind SYS_DIR[$name]=$d SYS_LOG[$name]=${SYS_LOG_PREFIX:-}
    SYS_NAMES+=("$name")
    local n=1 i hosts=() port
    case $kind in *-ens) n=${SYS_MEMBERS:-3} ;; redis-repl) n=2 ;; esac
    SYS_N[$name]=$n
    case $kind in
    zlock | zk)
        port=$(sys_free_port)
        mkdir -p "$d/data"
        sys_zoo_cfg "$d/zoo.cfg" "$d/data" "$port"
        echo "$port" >"$d/port.1"
        hosts=("127.0.0.1:$port")
        if [[ ${SYS_TLS[$name]} == 1 ]]; then
            port=$(sys_free_port)
            sys_tls_cfg "$port" 0 >>"$d/zoo.cfg"
            hosts=("127.0.0.1:$port")
        elif [[ ${SYS_NETTY[$name]} == 1 ]]; then
            echo "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory" >>"$d/zoo.cfg"
        fi
        ;;
    zlock-ens | zk-ens)
        sys_zoo_cfg "$d/zoo.cfg"
        {
            echo "initLimit=10"
            echo "syncLimit=5"
            if [[ ${SYS_NETTY[$name]} == 1 && ${SYS_TLS[$name]} != 1 ]]; then
                echo "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"
            fi
        } >>"$d/zoo.cfg"
        local observers=${SYS_OBSERVERS:-0} role
        for ((i = 1; i <= n; i++)); do
            port=$(sys_free_port)
            echo "$port" >"$d/port.$i"
            if [[ ${SYS_TLS[$name]} == 1 ]]; then
                sys_free_port >"$d/sport.$i"
                hosts+=("127.0.0.1:$(cat "$d/sport.$i")")
            else
                hosts+=("127.0.0.1:$port")
            fi
            role=""
            ((i <= n - observers)) || role=":observer"
            echo "server.$i=127.0.0.1:$(sys_free_port):$(sys_free_port)$role;127.0.0.1:$port" >>"$d/zoo.cfg"
            mkdir -p "$d/m$i/data"
            echo "$i" >"$d/m$i/data/myid"
        done
        if [[ $kind == zk-ens ]]; then
            # A ZooKeeper member reads its dataDir and clientPort from its own file: the
            # shared lines (every server.N among them) and its own.
            for ((i = 1; i <= n; i++)); do
                {
                    cat "$d/zoo.cfg"
                    echo "dataDir=$d/m$i/data"
                    echo "clientPort=$(cat "$d/port.$i")"
                    echo "clientPortAddress=127.0.0.1"
                    ((i <= n - observers)) || echo "peerType=observer"
                    [[ ${SYS_TLS[$name]} != 1 ]] || sys_tls_cfg "$(cat "$d/sport.$i")" 1
                } >"$d/m$i/zoo.cfg"
            done
        elif [[ ${SYS_TLS[$name]} == 1 ]]; then
            # zlock members share zoo.cfg (their client ports are on the server.N lines);
            # the secure client port is a member's own: one file each.
            for ((i = 1; i <= n; i++)); do
                {
                    cat "$d/zoo.cfg"
                    sys_tls_cfg "$(cat "$d/sport.$i")" 1
                } >"$d/m$i/zoo.cfg"
            done
        fi
        ;;
    redis-repl)
        for ((i = 1; i <= n; i++)); do
            port=$(sys_free_port)
            echo "$port" >"$d/port.$i"
            mkdir -p "$d/m$i/data"
        done
        hosts=("127.0.0.1:$(cat "$d/port.1")")
        sys_redis_conf "$(cat "$d/port.1")" "$d/m1/data" yes >"$d/redis-m1.conf"
        {
            sys_redis_conf "$(cat "$d/port.2")" "$d/m2/data" yes
            echo "replicaof 127.0.0.1 $(cat "$d/port.1")"
        } >"$d/redis-m2.conf"
        ;;
    redis | redis-aof)
        port=$(sys_free_port)
        echo "$port" >"$d/port.1"
        hosts=("127.0.0.1:$port")
        mkdir -p "$d/data"
        local aof=yes
        [[ $kind != redis ]] || aof=no
        sys_redis_conf "$port" "$d/data" "$aof" >"$d/redis.conf"
        ;;
    etcd | etcd-ens)
        local cluster=() peers=()
        for ((i = 1; i <= n; i++)); do
            port=$(sys_free_port)
            echo "$port" >"$d/port.$i"
            hosts+=("127.0.0.1:$port")
            peers[i]=$(sys_free_port)
            cluster+=("m$i=http://127.0.0.1:${peers[i]}")
        done
        for ((i = 1; i <= n; i++)); do
            port=$(cat "$d/port.$i")
            cat >"$d/etcd-m$i.yml" <<EOF
name: m$i
data-dir: $d/m$i/data
listen-client-urls: http://127.0.0.1:$port
advertise-client-urls: http://127.0.0.1:$port
listen-peer-urls: http://127.0.0.1:${peers[i]}
initial-advertise-peer-urls: http://127.0.0.1:${peers[i]}
initial-cluster: $(IFS=,; echo "${cluster[*]}")
initial-cluster-state: new
initial-cluster-token: $name
enable-grpc-gateway: true
EOF
        done
        ;;
    *)
        sys_log "unknown kind '$kind'"
        return 2
        ;;
    esac
    SYS_HOSTS[$name]=$(IFS=,; echo "${hosts[*]}")
    SYS_PORT[$name]=$(cat "$d/port.1")
    for ((i = 1; i <= n; i++)); do
        sys_spawn "$name" "$i" || return 1
    done
    sys_log "started $name ($kind, pids $(sys_pids "$name")) on ${SYS_HOSTS[$name]}, directory $d"
}

sys_pids() { # name: every running member's pid
    local i out=()
    for ((i = 1; i <= ${SYS_N[$1]}; i++)); do
        [[ -z "${SYS_PID[$1.$i]:-}" ]] || out+=("${SYS_PID[$1.$i]}")
    done
    echo "${out[*]}"
}

sys_members() { seq 1 "${SYS_N[$1]}"; }

# Starts member i of an instance whose files are in place (first start or restart).
sys_spawn() { # name i
    local name=$1 i=$2 d=${SYS_DIR[$1]} kind=${SYS_KIND[$1]} log
    local bin="${SYS_ZLOCK_BIN:-$SYS_LIB_ROOT/target/release/zlock}"
    local zkcp="${SYS_ZK_CLASSPATH:-/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar}"
    local extra=() jvm=() zlog="${SYS_ZLOCK_LOG:-warn}" cfg="$d/zoo.cfg"
    [[ ${SYS_NETTY[$name]} != 1 ]] || zkcp="$zkcp:$SYS_NETTY_JARS"
    if [[ ${SYS_TLS[$name]} == 1 ]]; then
        # How the members link, at start (sys_tls_evidence).
        zlog="$zlog,zlock_server::ensemble=info"
        [[ ! -f "$d/m$i/zoo.cfg" ]] || cfg="$d/m$i/zoo.cfg"
    fi
    read -r -a extra <<<"${SYS_ZLOCK_ARGS:-}"
    read -r -a jvm <<<"${SYS_ZK_JVMFLAGS:-}"
    log="$d/server.log"
    [[ "${SYS_N[$name]}" == 1 ]] || log="$d/m$i.log"
    if [[ -n "${SYS_LOG[$name]}" ]]; then
        log="${SYS_LOG[$name]}.log"
        [[ "${SYS_N[$name]}" == 1 ]] || log="${SYS_LOG[$name]}-$i.log"
    fi
    case $kind in
    zlock | zlock-ens)
        if [[ ! -x "$bin" ]]; then
            sys_log "zlock binary not found at $bin (build it: cargo build --release -p zlock-cli)"
            return 1
        fi
        if [[ $kind == zlock ]]; then
            ZLOCK_LOG="$zlog" "$bin" server --config "$cfg" \
                --port "$(cat "$d/port.1")" --data-dir "$d/data" "${extra[@]}" >>"$log" 2>&1 &
        else
            ZLOCK_LOG="$zlog" "$bin" server --config "$cfg" --myid "$i" \
                --data-dir "$d/m$i/data" "${extra[@]}" >>"$log" 2>&1 &
        fi
        ;;
    zk)
        java "${jvm[@]}" -cp "$zkcp" org.apache.zookeeper.server.quorum.QuorumPeerMain \
            "$d/zoo.cfg" >>"$log" 2>&1 &
        ;;
    zk-ens)
        java "${jvm[@]}" -cp "$zkcp" org.apache.zookeeper.server.quorum.QuorumPeerMain \
            "$d/m$i/zoo.cfg" >>"$log" 2>&1 &
        ;;
    redis | redis-aof) redis-server "$d/redis.conf" >>"$log" 2>&1 & ;;
    redis-repl) redis-server "$d/redis-m$i.conf" >>"$log" 2>&1 & ;;
    etcd | etcd-ens) etcd --config-file "$d/etcd-m$i.yml" >>"$log" 2>&1 & ;;
    esac
    SYS_PID[$name.$i]=$!
}

sys_restart() { # name i
    sys_spawn "$1" "$2" || return 1
    sys_log "restarted $1 member $2 (pid ${SYS_PID[$1.$2]})"
}

# Mode of a zlock / ZooKeeper server from `srvr` (leader, follower, standalone), or empty.
sys_mode() { sys_4lw "$1" srvr | awk '/^Mode: / { print $2 }'; }

# etcd member status: "<member_id> <leader>" from the gRPC gateway, or empty.
sys_etcd_status() {
    python3 - "$1" <<'EOF' 2>/dev/null || true
import json, sys, urllib.request
r = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v3/maintenance/status", data=b"{}",
                           headers={"Content-Type": "application/json"})
with urllib.request.urlopen(r, timeout=2) as f:
    d = json.load(f)
print(d["header"]["member_id"], d.get("leader", ""))
EOF
}

sys_cpu_ticks() { # pid: its CPU time so far (utime + stime), in clock ticks
    # Fields after the comm (which may hold spaces): state is $1, utime $12, stime $13.
    sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}

sys_leader() { # name
    local name=$1 i port st
    for ((i = 1; i <= ${SYS_N[$name]}; i++)); do
        [[ -n "${SYS_PID[$name.$i]:-}" ]] || continue
        port=$(cat "${SYS_DIR[$name]}/port.$i")
        case ${SYS_KIND[$name]} in
        etcd*)
            st=$(sys_etcd_status "$port")
            if [[ -n "$st" && "${st% *}" == "${st#* }" ]]; then echo "$i"; return 0; fi
            ;;
        *)
            if [[ "$(sys_mode "$port")" == leader ]]; then echo "$i"; return 0; fi
            ;;
        esac
    done
}

# True when every running member serves: see the header.
sys_serving() { # name
    local name=$1 kind=${SYS_KIND[$1]} i port m leaders=0 others=0 n=${SYS_N[$1]}
    for ((i = 1; i <= n; i++)); do
        port=$(cat "${SYS_DIR[$name]}/port.$i")
        case $kind in
        zlock | zk) [[ -n "$(sys_mode "$port")" ]] || return 1 ;;
        zlock-ens | zk-ens)
            m=$(sys_mode "$port")
            case $m in leader) leaders=$((leaders + 1)) ;; follower | observer) others=$((others + 1)) ;; *) return 1 ;; esac
            ;;
        redis*)
            [[ "$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "PING\r\n" >&3 && head -c 5 <&3' _ "$port" 2>/dev/null)" == "+PONG" ]] || return 1
            ;;
        etcd*)
            python3 - "$port" <<'EOF' 2>/dev/null || return 1
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2) as r:
    sys.exit(0 if b"true" in r.read() else 1)
EOF
            ;;
        esac
    done
    case $kind in *-ens) [[ $kind == etcd-ens ]] || ((leaders == 1 && others == n - 1)) || return 1 ;; esac
    if [[ $kind == redis-repl ]]; then
        # The replica has synced: the primary lists it online.
        redis-cli -p "$(cat "${SYS_DIR[$name]}/port.1")" info replication 2>/dev/null \
            | grep -q '^slave0:.*state=online' || return 1
    fi
    return 0
}

sys_wait() { # name [secs]
    local name=$1 deadline=$((SECONDS + ${2:-60})) i pid
    while ((SECONDS < deadline)); do
        sys_serving "$name" && return 0
        for ((i = 1; i <= ${SYS_N[$name]}; i++)); do
            pid=${SYS_PID[$name.$i]:-}
            if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
                sys_log "$name member $i (pid $pid) exited while starting"
                sys_log_tails "$name"
                return 1
            fi
        done
        sleep 0.2
    done
    sys_log "$name is not serving after ${2:-60} s"
    sys_log_tails "$name"
    return 1
}

sys_logs() { # name: its log files
    local i
    for ((i = 1; i <= ${SYS_N[$1]}; i++)); do
        if [[ -n "${SYS_LOG[$1]}" ]]; then
            if [[ "${SYS_N[$1]}" == 1 ]]; then echo "${SYS_LOG[$1]}.log"; else echo "${SYS_LOG[$1]}-$i.log"; fi
        elif [[ "${SYS_N[$1]}" == 1 ]]; then
            echo "${SYS_DIR[$1]}/server.log"
        else
            echo "${SYS_DIR[$1]}/m$i.log"
        fi
    done
}

sys_log_tails() { # name
    local f
    for f in $(sys_logs "$1"); do
        [[ -f "$f" ]] || continue
        sys_log "---- last lines of $f ----"
        tail -n 20 "$f" >&2 || true
    done
}

sys_stop_pid() { # pid [secs]: SIGTERM, wait, SIGKILL if needed
    local pid=$1 max=${2:-30}
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    # `wait` returns the moment the child exits (a `kill -0` poll with an external
    # `sleep` per round added tens of ms on a loaded machine); a watchdog SIGKILLs it
    # after $max seconds. For a process that is not this shell's child, poll.
    if ! jobs -p | grep -qx "$pid"; then
        local deadline=$((SECONDS + max))
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        return 0
    fi
    (
        sleep "$max" && kill -KILL "$pid" 2>/dev/null
    ) 2>/dev/null & # (its "Terminated" when the sleep is ended below is not news)
    local watchdog=$!
    wait "$pid" 2>/dev/null || true
    pkill -P "$watchdog" 2>/dev/null || true # its sleep, by the watchdog's pid
    kill "$watchdog" 2>/dev/null || true
    wait "$watchdog" 2>/dev/null || true
}

sys_kill9() { # name i
    local pid=${SYS_PID[$1.$2]:-}
    [[ -n "$pid" ]] || return 0
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    SYS_PID[$1.$2]=""
}

sys_forget() { # name i: the member was killed by someone else; reap it
    local pid=${SYS_PID[$1.$2]:-}
    [[ -n "$pid" ]] || return 0
    wait "$pid" 2>/dev/null || true
    SYS_PID[$1.$2]=""
}

sys_stop() { # name [secs]
    local name=$1 i pid
    for ((i = 1; i <= ${SYS_N[$name]:-0}; i++)); do
        pid=${SYS_PID[$name.$i]:-}
        [[ -n "$pid" ]] || continue
        sys_stop_pid "$pid" "${2:-30}"
        SYS_PID[$name.$i]=""
    done
}

sys_config() { # name
    local d=${SYS_DIR[$1]}
    case ${SYS_KIND[$1]} in
    zlock | zk) cat "$d/zoo.cfg" ;;
    zlock-ens) if [[ -f "$d/m1/zoo.cfg" ]]; then cat "$d/m1/zoo.cfg"; else cat "$d/zoo.cfg"; fi ;;
    zk-ens) cat "$d/m1/zoo.cfg" ;;
    redis-repl) cat "$d/redis-m1.conf" "$d/redis-m2.conf" ;;
    redis*) cat "$d/redis.conf" ;;
    etcd*) cat "$d/etcd-m1.yml" ;;
    esac
}

sys_cleanup() {
    local rc=$? name
    for name in "${SYS_NAMES[@]}"; do
        if [[ $rc -ne 0 && -n "$(sys_pids "$name")" ]]; then sys_log_tails "$name"; fi
        sys_stop "$name" 10
        if [[ -n "${SYS_KEEP_LOGS:-}" && -d "${SYS_DIR[$name]:-}" ]]; then
            mkdir -p "$SYS_KEEP_LOGS/$name"
            # shellcheck disable=SC2046
            cp $(sys_logs "$name") "${SYS_DIR[$name]}"/*.cfg "${SYS_DIR[$name]}"/*.conf \
                "${SYS_DIR[$name]}"/*.yml "$SYS_KEEP_LOGS/$name/" 2>/dev/null || true
        fi
    done
    return $rc
}

# The log lines that show a TLS instance came up with TLS; fails when a member's are
# missing. zlock: the member's line on how it links (ensembles; logged at info, see
# sys_spawn); its secure client port shows by serving TLS clients at all (a plain
# client is closed there). ZooKeeper: Netty's secure listener, and for an ensemble its
# TLS quorum and the members' handshakes.
sys_tls_evidence() { # name
    local name=$1 f ok=0 pats=()
    [[ ${SYS_TLS[$name]:-0} == 1 ]] || return 0
    case ${SYS_KIND[$name]} in
    zlock) return 0 ;;
    zlock-ens) pats=('links between members.*dial="tls" accept="tls only"') ;;
    zk) pats=('NettyServerCnxnFactory.*secure: true') ;;
    zk-ens) pats=('NettyServerCnxnFactory.*secure: true' 'Using TLS encrypted quorum communication'
        'SSL handshake complete|Accepted TLS connection') ;;
    esac
    for f in $(sys_logs "$name"); do
        local p
        for p in "${pats[@]}"; do
            if grep -E -m 2 "$p" "$f"; then :; else
                sys_log "$name: no line matching /$p/ in $f"
                ok=1
            fi
        done
    done
    return $ok
}
