//! What the ensemble tells the core: leadership, contact with the quorum, the
//! configuration, sessions active on other members, the ensemble's facts.

use super::*;

impl Core {
    /// Activity of `session` on this member.
    pub(super) fn touch(&mut self, session: SessionId) {
        self.sessions.touch(session, self.clock.now());
        if let Some(t) = &mut self.touched {
            t.insert(session);
        }
    }

    /// Sessions reported active by another member (to the leader).
    pub fn touched_elsewhere(&mut self, sessions: &[SessionId]) {
        let now = self.clock.now();
        for s in sessions {
            self.sessions.touch(*s, now);
        }
    }

    /// This member became the leader (`true`) or stopped being it. A new leader gives
    /// every session a full timeout from now, as a new ZooKeeper leader does: its
    /// clients may be reconnecting from the old leader.
    pub fn set_leader(&mut self, leads: bool) {
        if leads && !self.leads {
            self.sessions.restart_all(self.clock.now());
        }
        if leads != self.leads || self.led_since.is_none() {
            self.led_since = leads.then(Instant::now);
        }
        self.leads = leads;
        let observer = self
            .config
            .ensemble
            .as_ref()
            .is_some_and(|e| e.is_observer());
        self.mode = match (leads, observer) {
            (true, _) => "leader",
            // ZooKeeper's srvr `Mode: observer`, mntr `zk_server_state observer`.
            (false, true) => "observer",
            (false, false) => "follower",
        };
    }

    /// Whether a quorum answers this member. Back in touch, every session gets a full
    /// timeout, as under a new leader: while cut off, the leader heard nothing of the
    /// sessions that other members serve.
    pub fn set_in_touch(&mut self, in_touch: bool) {
        if in_touch && !self.in_touch {
            self.sessions.restart_all(self.clock.now());
        }
        self.in_touch = in_touch;
    }

    /// The ensemble's committed configuration is (now) `text` at `version`:
    /// `/zookeeper/config` shows it, and its data watches fire as on ZooKeeper, where a
    /// reconfig is a setData of that node. An older or the same version changes nothing.
    pub fn set_config_view(&mut self, text: String, version: u64) {
        let Some(cur) = &self.state.config_node else {
            return;
        };
        let version = i64::try_from(version).unwrap_or(i64::MAX);
        if version < cur.version || (version == cur.version && cur.data == text.as_bytes()) {
            return;
        }
        self.state.config_node = Some(zlock_core::ConfigNode {
            data: text.into_bytes(),
            version,
            mtime: crate::clock::now_ms(),
        });
        let mut events = Vec::new();
        self.state.watches.trigger(
            zlock_core::ConfigNode::PATH,
            zlock_proto::records::event_type::NODE_DATA_CHANGED,
            None,
            &mut events,
        );
        self.router.deliver(&events);
    }

    /// Closes every client connection here (they reconnect and resume elsewhere, or
    /// here once the member is back in touch).
    pub fn drop_all_clients(&mut self) {
        self.router.drop_all();
    }

    /// The server's counters (shared: they live as long as the server).
    pub fn stats(&self) -> Arc<crate::stats::Stats> {
        self.router.stats.clone()
    }

    /// The ensemble as this member sees it now, for `mntr` and `srvr`.
    pub fn saw_ensemble(&mut self, facts: crate::commit::raft::RaftFacts) {
        self.ensemble = Some(facts);
    }

    /// The sessions active here since the last call.
    pub fn take_touched(&mut self) -> Vec<SessionId> {
        self.touched
            .as_mut()
            .map(|t| t.drain().collect())
            .unwrap_or_default()
    }
}
