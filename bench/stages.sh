#!/usr/bin/env bash
# Where one write's time goes in a three-member zlock ensemble: a per-stage breakdown,
# from the client's frame in to the reply queued, for a client on the leader and for a
# client on a follower.
#
#   bench/stages.sh [ZLOCK]        (default target/release/zlock; zlock-bench beside it)
#
# Starts a 3-member ensemble (bench/lib/systems.sh, loopback, fresh temp dirs) with
# ZLOCK_STAGES set, so each member marks every write at each stage in memory and writes
# the marks out when it stops (crates/zlock-server/src/stages.rs). Runs scenario A (one
# client, acquire and release, one write at a time) for SECS seconds (default 3) with
# the client's session on the leader, then on a follower, stops the members (SIGTERM)
# and prints the median and p90 of each stage over the writes of each run:
#   in -> seq        the frame read, to the sequencer's Txn (queue, batch)
#   seq -> sent      to the writer task's hand-over to openraft, or to the forward frame
#   sent -> fwd      (follower) the forward frame read by the leader's peer server
#   sent|fwd -> L    the leader's Raft: append, replicate, a quorum's fsync, commit, apply;
#                    replication in detail, per follower: the leader's append to the append
#                    frame written on the peer link, to the frame read by the follower, to
#                    its append; its fsync; its fsync's end to its answer written, to the
#                    answer read by the leader
#   L -> O           (follower) the commit notice to the client's member, and its apply
#   in -> reply      the whole, at the member that holds the client's connection
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZLOCK="${1:-$REPO/target/release/zlock}"
BENCH="$(cd "$(dirname "$ZLOCK")" && pwd)/zlock-bench"
SECS="${SECS:-3}"
[[ -x "$ZLOCK" && -x "$BENCH" ]] || { echo "build first: cargo build --release -p zlock-cli -p zlock-bench" >&2; exit 1; }
# shellcheck source=lib/systems.sh
source "$REPO/bench/lib/systems.sh"
TMP="$(mktemp -d /tmp/zlock-stages.XXXXXX)"
trap 'sys_cleanup; rm -rf "$TMP"' EXIT
sys_init "$TMP/sys"
log() { printf '[%5ss] %s\n' "$SECONDS" "$*" >&2; }

declare -A LEADER
for where in leader follower; do
    mkdir -p "$TMP/$where"
    ZLOCK_STAGES="$TMP/$where" SYS_ZLOCK_BIN="$ZLOCK" sys_start "$where" zlock-ens
    sys_wait "$where" 60 || { echo "the ensemble did not come up" >&2; exit 1; }
    l=$(sys_leader "$where")
    LEADER[$where]=$l
    IFS=, read -r -a hosts <<<"${SYS_HOSTS[$where]}"
    if [[ $where == leader ]]; then at=$l; else at=$(( l % 3 + 1 )); fi
    log "$where run: leader member $l, client on member $at (${hosts[$((at - 1))]})"
    "$BENCH" lock --system zk --server "${hosts[$((at - 1))]}" --scenario a --secs "$SECS" \
        --lock-path auto --json >"$TMP/$where/a.json"
    echo "$at" >"$TMP/$where/client-member"
    sys_stop "$where" 30
done

python3 - "$TMP" <<'PY'
import csv, glob, os, statistics, sys, json
tmp = sys.argv[1]
MIN = -2147483648
for where in ("leader", "follower"):
    d = os.path.join(tmp, where)
    at = int(open(os.path.join(d, "client-member")).read())
    marks = {}    # (session, xid) -> {(member, stage): ns}
    idx = {}      # (member, stage) -> {entry index: [ns, ...]} (flushed, rsent, rread, ...)
    members = set()
    for p in glob.glob(os.path.join(d, "stages-*.csv")):
        for m, stage, s, x, ns in csv.reader(open(p)):
            m, x, ns = int(m), int(x), int(ns)
            members.add(m)
            if MIN < x < MIN + 1000:
                stage = f"{stage}@{x - MIN - 1}"
                x = MIN
            if x == MIN:
                idx.setdefault((m, stage), {}).setdefault(int(s), []).append(ns)
            else:
                marks.setdefault((s, x), {})[(m, stage)] = ns
    leader = at
    for v in marks.values():
        for (m, st) in v:
            if st == "fwd":
                leader = m
    followers = sorted(members - {leader})
    stages = {}
    def add(name, a, b):
        if a is not None and b is not None:
            stages.setdefault(name, []).append((b - a) / 1000)
    for k, v in marks.items():
        g = lambda m, st: v.get((m, st))
        if g(at, "in") is None or g(at, "applied") is None:
            continue
        def at_ix(m, st, n=0, of=None):
            got = idx.get((m, st), {}).get(g(of if of is not None else m, "ix"), [])
            return sorted(got)[n] if len(got) > n else None
        fl = lambda m: at_ix(m, "flushed")
        add("in -> seq (to the sequencer, batched)", g(at, "in"), g(at, "seq"))
        add("seq -> sent (to the writer task, handed over)", g(at, "seq"), g(at, "sent"))
        if at != leader:
            add("sent -> fwd (forward frame read by the leader)", g(at, "sent"), g(leader, "fwd"))
            start = g(leader, "fwd")
        else:
            start = g(at, "sent")
        add("-> leader's log append (openraft's core)", start, g(leader, "append"))
        add("leader append -> its fsync done", g(leader, "append"), fl(leader))
        firsts = sorted(x for x in (g(f, "append") for f in followers) if x is not None)
        if firsts:
            add("leader append -> first follower append (replication)", g(leader, "append"), firsts[0])
        for f in followers:
            sent_f = at_ix(leader, f"rsent@{f}", of=leader)
            add(f"  leader append -> append frame written to follower {f}", g(leader, "append"), sent_f)
            add(f"  append frame written -> read by follower {f}", sent_f, at_ix(f, "rread", of=leader))
            add(f"  read -> appended, follower {f}", at_ix(f, "rread", of=leader), g(f, "append"))
            add(f"follower {f}: append -> its fsync done", g(f, "append"), fl(f))
            add(f"  follower {f}: fsync done -> answer written", fl(f), at_ix(f, "ranswered", of=leader))
            add(f"  follower {f}: answer written -> read by leader", at_ix(f, "ranswered", of=leader), at_ix(leader, f"racked@{f}", of=leader))
        ffl = sorted(x for x in (fl(f) for f in followers) if x is not None)
        quorum = sorted(x for x in [fl(leader)] + ffl if x is not None)
        if len(quorum) >= 2:
            add("quorum durable (2nd fsync done) -> applied on leader", quorum[1], g(leader, "applied"))
        if at != leader:
            add("leader applied -> applied here (commit notice, apply)", g(leader, "applied"), g(at, "applied"))
        add("in -> reply queued (whole)", g(at, "in"), g(at, "applied"))
    a = json.load(open(os.path.join(d, "a.json")))
    print(f"\n### Client on the {where} (member {at}; leader member {leader}); scenario A "
          f"{a['cycles_per_sec']:.0f} cycles/s, acquire p50 {a['acquire_us']['p50'] / 1000:.3f} ms\n")
    print("| stage | writes | p50 µs | p90 µs |")
    print("|---|---:|---:|---:|")
    for name, v in stages.items():
        v.sort()
        print(f"| {name} | {len(v)} | {statistics.median(v):.0f} | {v[int(len(v) * 0.9)]:.0f} |")
PY
