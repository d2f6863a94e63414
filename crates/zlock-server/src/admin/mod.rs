//! Four-letter words answered from the core's view (`srvr`, `stat`, `mntr`,
//! `cons`, `wchs`, `wchc`, `wchp`, `dump`, `crst`, `srst`). `ruok`, `conf`, `envi` and
//! `isro` need no state and are answered by the connection itself (net::fourlw).
//! Texts and `mntr` key names follow ZooKeeper 3.8.
//!
//! The same answers as JSON, ZooKeeper's AdminServer, are in [`json`] (built from the
//! same [`Facts`]) and served over HTTP by [`http`].

pub(crate) mod auth;
pub(crate) mod context;
pub(crate) mod http;
pub(crate) mod json;
mod recipes;
mod restore;
mod snapshot;

use std::fmt::Write;
use std::sync::atomic::Ordering;

use zlock_core::State;

use crate::pipeline::AdminQuery;
use crate::stats::{Latency, Stats};

/// What the admin answers are made of: the applied state, read-only, and the member's
/// counters. (A small view, not the core itself, so admin depends on no pipeline type
/// but the query.)
pub(crate) struct Facts<'a> {
    pub state: &'a State,
    pub stats: &'a Stats,
    pub latency: &'a Latency,
    /// `standalone`, `leader` or `follower` (ZooKeeper's `Mode:` and `zk_server_state`).
    pub mode: &'a str,
    /// In an ensemble: what this member last saw of it.
    pub ensemble: Option<&'a crate::commit::raft::RaftFacts>,
    /// This member's session tracker: deadlines, for `dump`.
    pub tracker: &'a zlock_core::sessions::SessionTracker,
    /// This member's monotonic clock now, as the tracker reads it.
    pub now: zlock_core::sessions::Time,
    /// Requests waiting for their commit (or behind their session's writes).
    pub waiting: usize,
}

/// The version string: ZooKeeper's format, so tools that parse it (kazoo's
/// `server_version`) read 3.8.0.
pub const VERSION: &str = concat!("3.8.0-zlock-", env!("CARGO_PKG_VERSION"));

pub(crate) fn answer(q: AdminQuery, st: &Facts<'_>) -> String {
    let mut s = String::new();
    match q {
        AdminQuery::Srvr | AdminQuery::Stat => {
            let _ = writeln!(s, "Zookeeper version: {VERSION}, built by zlock");
            if q == AdminQuery::Stat {
                s.push_str("Clients:\n");
                for c in st.stats.conns() {
                    let _ = writeln!(
                        s,
                        " /{}[1](queued=0,recved={},sent={})",
                        c.addr,
                        c.received.load(Ordering::Relaxed),
                        c.sent.load(Ordering::Relaxed)
                    );
                }
                s.push('\n');
            }
            let _ = writeln!(
                s,
                "Latency min/avg/max: {}/{:.4}/{}",
                st.latency.min.unwrap_or(0.0).round() as u64,
                st.latency.avg(),
                st.latency.max.round() as u64
            );
            let _ = writeln!(
                s,
                "Received: {}",
                st.stats.packets_received.load(Ordering::Relaxed)
            );
            let _ = writeln!(s, "Sent: {}", st.stats.packets_sent.load(Ordering::Relaxed));
            let _ = writeln!(s, "Connections: {}", st.stats.conn_count());
            let _ = writeln!(s, "Outstanding: 0");
            let _ = writeln!(s, "Zxid: {}", st.state.zxid);
            let _ = writeln!(s, "Mode: {}", st.mode);
            let _ = writeln!(s, "Node count: {}", st.state.tree.len());
        }
        AdminQuery::Mntr => {
            let mut kv: Vec<(&str, String)> = vec![
                ("zk_version", VERSION.to_string()),
                ("zk_server_state", st.mode.into()),
                ("zk_avg_latency", format!("{:.4}", st.latency.avg())),
                (
                    "zk_max_latency",
                    format!("{}", st.latency.max.round() as u64),
                ),
                (
                    "zk_min_latency",
                    format!("{}", st.latency.min.unwrap_or(0.0).round() as u64),
                ),
                (
                    "zk_packets_received",
                    st.stats
                        .packets_received
                        .load(Ordering::Relaxed)
                        .to_string(),
                ),
                (
                    "zk_packets_sent",
                    st.stats.packets_sent.load(Ordering::Relaxed).to_string(),
                ),
                (
                    "zk_num_alive_connections",
                    st.stats.conn_count().to_string(),
                ),
                ("zk_outstanding_requests", "0".into()),
                ("zk_znode_count", st.state.tree.len().to_string()),
                ("zk_watch_count", st.state.watches.count().to_string()),
                (
                    "zk_ephemerals_count",
                    st.state.tree.ephemeral_count().to_string(),
                ),
                (
                    "zk_approximate_data_size",
                    st.state.tree.approximate_data_size().to_string(),
                ),
                ("zk_global_sessions", st.state.sessions.len().to_string()),
                ("zk_last_zxid", st.state.zxid.to_string()),
                // zlock's own keys (mntr consumers ignore unknown keys).
                (
                    "zlock_native_lock_waiters",
                    st.state.locks.waiting().to_string(),
                ),
                (
                    "zlock_lock_delays_running",
                    st.state.locks.delayed().to_string(),
                ),
                (
                    "zlock_native_lock_grants",
                    st.stats.lock_grants.load(Ordering::Relaxed).to_string(),
                ),
                (
                    "zk_uptime",
                    st.stats.started.elapsed().as_millis().to_string(),
                ),
            ];
            if let Some(e) = st.ensemble {
                let leads = st.mode == "leader";
                // ZooKeeper's QuorumPeer.getDetailedPeerState: the peer state, then
                // the Zab state.
                let peer_state = match st.mode {
                    "leader" => "leading - broadcast",
                    "observer" => "observing - broadcast",
                    _ => "following - broadcast",
                };
                kv.push(("zk_peer_state", peer_state.into()));
                if st.mode == "observer" {
                    // ZooKeeper's observer reports whom it follows (its "observer
                    // master": here always the leader).
                    let master = e.leader.map_or_else(|| "-1".into(), |l| l.to_string());
                    kv.push(("zk_observer_master_id", master));
                }
                kv.push(("zk_quorum_size", e.voters.to_string()));
                if leads {
                    // ZooKeeper reports these on the leader only (3.6+ says learners;
                    // 3.4/3.5 said followers: both are given).
                    // Learners are followers and observers alike (ZooKeeper's
                    // Leader.getLearners); synced followers vote, synced observers
                    // do not (getForwardingFollowers, getObservingLearners).
                    let learners = (e.followers + e.observers).to_string();
                    kv.push(("zk_learners", learners.clone()));
                    kv.push(("zk_followers", learners));
                    kv.push(("zk_synced_followers", e.synced_followers.to_string()));
                    kv.push(("zk_synced_non_voting_followers", "0".into()));
                    kv.push(("zk_synced_observers", e.synced_observers.to_string()));
                    kv.push(("zk_pending_syncs", e.pending_syncs.to_string()));
                }
                kv.push(("zlock_raft_term", e.term.to_string()));
                kv.push(("zlock_raft_last_log_index", e.last_log_index.to_string()));
            }
            for (k, v) in kv {
                let _ = writeln!(s, "{k}\t{v}");
            }
        }
        AdminQuery::Cons => {
            for c in st.stats.conns() {
                let sid = c.session.load(Ordering::Relaxed);
                let _ = writeln!(
                    s,
                    " /{}[1](queued=0,recved={},sent={},sid=0x{:x})",
                    c.addr,
                    c.received.load(Ordering::Relaxed),
                    c.sent.load(Ordering::Relaxed),
                    sid
                );
            }
            s.push('\n');
        }
        AdminQuery::Wchs => {
            let w = &st.state.watches;
            let _ = writeln!(
                s,
                "{} connections watching {} paths\nTotal watches:{}",
                w.session_count(),
                w.path_count(),
                w.count()
            );
        }
        AdminQuery::Wchc => {
            let mut sessions: Vec<_> = st.state.sessions.keys().copied().collect();
            sessions.sort_unstable();
            for sid in sessions {
                let ws = st.state.watches.of_session(sid);
                if ws.is_empty() {
                    continue;
                }
                let _ = writeln!(s, "{sid}");
                for (_, p) in ws {
                    let _ = writeln!(s, "\t{p}");
                }
            }
        }
        AdminQuery::Wchp => {
            for (p, sessions) in st.state.watches.by_path() {
                let _ = writeln!(s, "{p}");
                for sid in sessions {
                    let _ = writeln!(s, "\t{sid}");
                }
            }
        }
        AdminQuery::Dump => {
            let _ = writeln!(s, "SessionTracker dump:");
            let _ = writeln!(s, "Global Sessions({}):", st.state.sessions.len());
            for (sid, sess) in &st.state.sessions {
                let _ = writeln!(s, "{sid}\t{}ms", sess.timeout_ms);
            }
            let _ = writeln!(s, "ephemeral nodes dump:");
            let mut eph: Vec<_> = st.state.tree.ephemeral_sessions().collect();
            eph.sort_by_key(|(sid, _)| **sid);
            let _ = writeln!(s, "Sessions with Ephemerals ({}):", eph.len());
            for (sid, paths) in eph {
                let _ = writeln!(s, "{sid}:");
                for p in paths {
                    let _ = writeln!(s, "\t{p}");
                }
            }
        }
        AdminQuery::Crst => {
            st.stats.reset();
            s.push_str("Connection stats reset.\n");
        }
        AdminQuery::Srst => {
            st.stats.reset();
            s.push_str("Server stats reset.\n");
        }
    }
    s
}
