//! ZooKeeper's AdminServer answers, as JSON, for the commands that read the core: each
//! a flat object of ZooKeeper's field names (`Commands.java` of ZooKeeper 3.8/3.9, and
//! what a 3.8 server answers), to which `admin::http` adds `command` and `error`, plus
//! zlock's own `locks` and `sessions`. Built in commit order under the core's lock, as
//! the four-letter words are, from the same [`Facts`].
//!
//! A field ZooKeeper has and zlock cannot fill truthfully is left out rather than
//! invented (a monitoring tool then sees it missing, not wrong); the list, with the
//! reasons, is the comparison test `tests/it/admin_http.rs`. Fields read from the disk or
//! `/proc` (`data_dir_size`, file descriptors) are added by `admin::http`, off the
//! core's lock.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::UNIX_EPOCH;

use serde_json::{json, Map, Value};
use zlock_core::locks::Standing;
use zlock_proto::lock_order::Mode;

use super::{Facts, VERSION};

/// One answer's fields.
pub(crate) type Fields = Map<String, Value>;

/// The commands answered from the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Query {
    /// `server_stats` (`srvr`).
    ServerStats,
    /// `stats` (`stat`): `server_stats` plus the connections.
    Stats,
    /// `monitor` (`mntr`).
    Monitor,
    /// `connections` (`cons`).
    Connections,
    Dump,
    /// `watch_summary` (`wchs`).
    WatchSummary,
    /// `watches` (`wchc`).
    Watches,
    /// `watches_by_path` (`wchp`).
    WatchesByPath,
    /// zlock's `locks`.
    Locks,
    /// zlock's `sessions`.
    Sessions,
    /// The lock dashboard's data (`GET /locks.json`, not a command): `locks` and
    /// `sessions` read at once, and the member's wall clock (`now`, ms).
    Dashboard,
}

fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

pub(crate) fn answer(q: Query, f: &Facts<'_>) -> Fields {
    let mut m = Fields::new();
    match q {
        Query::ServerStats | Query::Stats => {
            server_stats(f, &mut m);
            if q == Query::Stats {
                let conns: Vec<Value> = f
                    .stats
                    .conns()
                    .iter()
                    .map(|c| {
                        json!({
                            "remote_socket_address": c.addr.to_string(),
                            "packets_received": load(&c.received),
                            "packets_sent": load(&c.sent),
                        })
                    })
                    .collect();
                m.insert("connections".into(), conns.into());
                m.insert("secure_connections".into(), json!([]));
            }
        }
        Query::Monitor => monitor(f, &mut m),
        Query::Connections => {
            let conns: Vec<Value> = f
                .stats
                .conns()
                .iter()
                .map(|c| {
                    let mut o = json!({
                        "remote_socket_address": c.addr.to_string(),
                        "packets_received": load(&c.received),
                        "packets_sent": load(&c.sent),
                    });
                    let sid = c.session.load(Ordering::Relaxed);
                    if let (Some(o), true) = (o.as_object_mut(), sid != 0) {
                        // As ZooKeeper: the session's fields once its handshake is done.
                        o.insert("session_id".into(), sid.into());
                        let established = c
                            .since
                            .duration_since(UNIX_EPOCH)
                            .map_or(0, |d| d.as_millis() as u64);
                        o.insert("established".into(), established.into());
                        let timeout = f
                            .state
                            .sessions
                            .get(&zlock_core::SessionId(sid))
                            .map(|s| s.timeout_ms);
                        if let Some(t) = timeout {
                            o.insert("session_timeout".into(), t.into());
                        }
                    }
                    o
                })
                .collect();
            m.insert("connections".into(), conns.into());
            m.insert("secure_connections".into(), json!([]));
        }
        Query::Dump => {
            let mut expiry: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
            for sid in f.state.sessions.keys() {
                if let Some(t) = f.tracker.deadline(*sid) {
                    expiry.entry(t.0).or_default().push(sid.0);
                }
            }
            let expiry: Fields = expiry
                .into_iter()
                .map(|(t, ids)| (t.to_string(), ids.into()))
                .collect();
            let eph: Fields = f
                .state
                .tree
                .ephemeral_sessions()
                .map(|(sid, paths)| {
                    (
                        sid.0.to_string(),
                        paths.iter().map(String::as_str).collect::<Vec<_>>().into(),
                    )
                })
                .collect();
            m.insert("expiry_time_to_session_ids".into(), expiry.into());
            m.insert("session_id_to_ephemeral_paths".into(), eph.into());
        }
        Query::WatchSummary => {
            let w = &f.state.watches;
            m.insert("num_connections".into(), w.session_count().into());
            m.insert("num_paths".into(), w.path_count().into());
            m.insert("num_total_watches".into(), w.count().into());
        }
        Query::Watches => {
            let mut by_session = Fields::new();
            for sid in f.state.sessions.keys() {
                let mut paths: Vec<String> = f
                    .state
                    .watches
                    .of_session(*sid)
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect();
                paths.dedup();
                if !paths.is_empty() {
                    by_session.insert(sid.0.to_string(), paths.into());
                }
            }
            m.insert("session_id_to_watched_paths".into(), by_session.into());
        }
        Query::WatchesByPath => {
            let by_path: Fields = f
                .state
                .watches
                .by_path()
                .into_iter()
                .map(|(p, sids)| (p, sids.iter().map(|s| s.0).collect::<Vec<_>>().into()))
                .collect();
            m.insert("path_to_session_ids".into(), by_path.into());
        }
        Query::Locks => locks(f, &mut m),
        Query::Sessions => sessions(f, &mut m),
        Query::Dashboard => {
            locks(f, &mut m);
            sessions(f, &mut m);
            m.insert("now".into(), crate::clock::now_ms().into());
        }
    }
    m
}

/// `server_stats`: ZooKeeper's fields that zlock keeps (`data_dir_size` and
/// `log_dir_size` are added by `admin::http`).
fn server_stats(f: &Facts<'_>, m: &mut Fields) {
    let s = f.stats;
    let stats = json!({
        "packets_sent": load(&s.packets_sent),
        "packets_received": load(&s.packets_received),
        // ZooKeeper's BufferStats start at -1, "nothing recorded": zlock records no
        // response sizes.
        "client_response_stats": no_buffer_stats(),
        "provider_null": s.timings.is_none(),
        "server_state": f.mode,
        "last_processed_zxid": f.state.zxid.0,
        "outstanding_requests": f.waiting,
        "avg_latency": f.latency.avg(),
        "max_latency": f.latency.max.round() as u64,
        "min_latency": f.latency.min.unwrap_or(0.0).round() as u64,
        "num_alive_client_connections": s.conn_count(),
        "uptime": s.started.elapsed().as_millis() as u64,
    });
    m.insert("version".into(), VERSION.into());
    m.insert("read_only".into(), false.into());
    m.insert("server_stats".into(), stats);
    m.insert("client_response".into(), no_buffer_stats());
    m.insert("node_count".into(), f.state.tree.len().into());
}

fn no_buffer_stats() -> Value {
    json!({"last_buffer_size": -1, "min_buffer_size": -1, "max_buffer_size": -1})
}

/// `monitor`: the names of ZooKeeper's `mntr` without `zk_`, as its JSON has them,
/// and zlock's own, `zlock_` (file descriptors are added by `admin::http`).
fn monitor(f: &Facts<'_>, m: &mut Fields) {
    let s = f.stats;
    let st = f.state;
    let mut put = |k: &str, v: Value| {
        m.insert(k.into(), v);
    };
    put("version", VERSION.into());
    put("server_state", f.mode.into());
    put("ephemerals_count", st.tree.ephemeral_count().into());
    put("num_alive_connections", s.conn_count().into());
    put("avg_latency", f.latency.avg().into());
    put("max_latency", (f.latency.max.round() as u64).into());
    put(
        "min_latency",
        (f.latency.min.unwrap_or(0.0).round() as u64).into(),
    );
    put("outstanding_requests", f.waiting.into());
    put("znode_count", st.tree.len().into());
    put("global_sessions", st.sessions.len().into());
    put("local_sessions", 0.into());
    put("watch_count", st.watches.count().into());
    put(
        "approximate_data_size",
        st.tree.approximate_data_size().into(),
    );
    put("packets_sent", load(&s.packets_sent).into());
    put("packets_received", load(&s.packets_received).into());
    put("uptime", (s.started.elapsed().as_millis() as u64).into());
    put("bytes_received_count", load(&s.bytes_received).into());
    put("response_bytes", load(&s.response_bytes).into());
    put("watch_bytes", load(&s.watch_bytes).into());
    put("connection_request_count", load(&s.connect_requests).into());
    put("connection_rejected", load(&s.connections_rejected).into());
    put("stale_sessions_expired", load(&s.sessions_expired).into());
    put("looking_count", load(&s.looking).into());
    put("zlock_native_lock_waiters", st.locks.waiting().into());
    put("zlock_lock_paths", st.locks.len().into());
    put("zlock_lock_delays_running", st.locks.delayed().into());
    put("zlock_native_lock_requests", load(&s.lock_requests).into());
    put("zlock_native_lock_grants", load(&s.lock_grants).into());
    put("zlock_native_lock_failures", load(&s.lock_failures).into());
    if let Some(e) = f.ensemble {
        let leads = f.mode == "leader";
        let peer = if leads {
            "leading - broadcast"
        } else {
            "following - broadcast"
        };
        put("peer_state", peer.into());
        put("quorum_size", e.voters.into());
        put("synced_observers", 0.into());
        if leads {
            put("learners", e.followers.into());
            put("synced_followers", e.synced_followers.into());
            put("synced_non_voting_followers", 0.into());
            put("pending_syncs", e.pending_syncs.into());
        }
        put("zlock_raft_term", e.term.into());
        put("zlock_raft_last_log_index", e.last_log_index.into());
    }
}

/// The name of a contender's mode, and its leases.
fn mode_name(mode: Mode) -> (&'static str, usize) {
    match mode {
        Mode::Exclusive => ("exclusive", 1),
        Mode::Read => ("read", 1),
        Mode::Semaphore(n) => ("semaphore", n),
    }
}

/// zlock's `locks`: every lock path the native lock index follows, its entries in
/// queue order (see `zlock_core::locks::Standing` for what `state` means).
fn locks(f: &Facts<'_>, m: &mut Fields) {
    let st = f.state;
    let locks: Vec<Value> = st
        .locks
        .view()
        .into_iter()
        .map(|l| {
            let entries: Vec<Value> = l
                .entries
                .iter()
                .map(|e| {
                    let node = if &*l.path == "/" {
                        format!("/{}", e.name)
                    } else {
                        format!("{}/{}", l.path, e.name)
                    };
                    let (state, mode, leases) = match e.standing {
                        Standing::Waiting(mode) => {
                            let (name, leases) = mode_name(mode);
                            ("waiting", name, Some(leases))
                        }
                        // The index keeps no mode once granted (nor for a recipe's
                        // node): the node's kind is what is known.
                        Standing::Holds => ("holds", if e.read { "read" } else { "write" }, None),
                        Standing::Queued => ("queued", if e.read { "read" } else { "write" }, None),
                    };
                    // The node's czxid is the fencing token a native grant carries; its
                    // ctime (the Txn time of its create, ms) is when it joined the queue.
                    let znode = st.tree.get(&node);
                    json!({
                        "node": node,
                        "session_id": e.owner.0,
                        // Exact in JavaScript, where a large id as a number is not.
                        "session_id_hex": format!("0x{:x}", e.owner.0),
                        "state": state,
                        "mode": mode,
                        "leases": leases,
                        "lock_delay_ms": e.delay_ms,
                        "czxid": znode.map(|n| n.czxid),
                        "ctime": znode.map(|n| n.ctime),
                    })
                })
                .collect();
            json!({
                "path": &*l.path,
                "entries": entries,
                "lock_delay_until": l.held_until,
            })
        })
        .collect();
    let followed: std::collections::BTreeSet<String> = locks
        .iter()
        .filter_map(|l| l["path"].as_str().map(str::to_owned))
        .collect();
    let mut locks = locks;
    locks.extend(super::recipes::queues(st, &followed));
    locks.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    m.insert("locks".into(), locks.into());
    m.insert("handovers".into(), handovers(st));
    m.insert("native_lock_waiters".into(), st.locks.waiting().into());
    m.insert("lock_delays_running".into(), st.locks.delayed().into());
}

/// The member's recent hand-overs, newest first (see `zlock_core::locks::Handovers`):
/// the lock, the Txn (zxid, time), the contender that went and the one first after it
/// (null: the lock was left free).
fn handovers(st: &zlock_core::State) -> Value {
    let side = |lock: &str, (name, owner): &(Box<str>, zlock_core::SessionId)| {
        json!({
            "node": zlock_core::path::join(lock, name),
            "session_id": owner.0,
            "session_id_hex": format!("0x{:x}", owner.0),
        })
    };
    st.handovers
        .recent()
        .map(|h| {
            json!({
                "path": &*h.path,
                "zxid": h.zxid,
                "time": h.time_ms,
                "from": side(&h.path, &h.from),
                "to": h.to.as_ref().map(|t| side(&h.path, t)),
            })
        })
        .collect::<Vec<_>>()
        .into()
}

/// zlock's `sessions`: every session of the applied state, whether (and from where)
/// it is connected to this member, and how long this member has not heard from it
/// (`silent_ms`: the session timeout less the time left before this member's tracker
/// would expire it; deadlines are rounded up to a tick, so it may read up to a tick
/// low; null where this member tracks no deadline for it).
fn sessions(f: &Facts<'_>, m: &mut Fields) {
    let here: BTreeMap<i64, String> = f
        .stats
        .conns()
        .iter()
        .filter_map(|c| {
            let sid = c.session.load(Ordering::Relaxed);
            (sid != 0).then(|| (sid, c.addr.to_string()))
        })
        .collect();
    let sessions: Vec<Value> = f
        .state
        .sessions
        .iter()
        .map(|(sid, s)| {
            let addr = here.get(&sid.0);
            let silent = f.tracker.deadline(*sid).map(|d| {
                let timeout = u64::try_from(s.timeout_ms).unwrap_or(0);
                timeout.saturating_sub(d.0.saturating_sub(f.now.0))
            });
            json!({
                "session_id": sid.0,
                "session_id_hex": format!("0x{:x}", sid.0),
                "session_timeout": s.timeout_ms,
                "connected_here": addr.is_some(),
                "client_address": addr,
                "silent_ms": silent,
            })
        })
        .collect();
    m.insert("sessions".into(), sessions.into());
}
