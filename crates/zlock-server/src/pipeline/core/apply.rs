//! Committed entries applied in order, a snapshot installed, and the end of serving.

use super::*;

impl Core {
    /// Applies committed entries in log order (the commit stage's [`Apply`]).
    pub fn apply_entries(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>) {
        if self.stopped {
            // Stopping: the state is gone (see `finish`). In an ensemble openraft may
            // still apply committed entries until it stops; they are in its log, and a
            // restart applies them again.
            return;
        }
        for (index, entry) in entries {
            if let Err(e) = self.state.enter(index) {
                diverged(e);
            }
            let Entry::Txns(txns) = entry else {
                continue;
            };
            for txn in txns {
                self.apply_txn(txn);
            }
        }
    }

    /// Applies the next Txn of the entry the state has entered, and hands on what it
    /// produced: replies, events and grants to the router, sessions to the tracker.
    fn apply_txn(&mut self, txn: &Txn) {
        let a = self.state.apply_txn(txn);
        if txn.origin.member == self.router.me {
            self.count_applied(txn, &a);
        }
        if let Some(s) = a.created_session {
            let timeout = self.state.sessions.get(&s).map_or(0, |s| s.timeout_ms);
            self.sessions
                .add(s, timeout.max(0) as u64, self.clock.now());
        }
        if let Some((s, true)) = a.moved {
            if txn.origin.member == self.router.me {
                self.touch(s);
            }
        }
        self.router.applied(&mut self.state, txn.origin, &a);
        if let Some(s) = a.closed_session {
            if txn.origin.session == SessionId::NONE {
                tracing::info!(session = %s, "session expired");
            }
            self.sessions.remove(s);
            self.router.end_session(s);
        }
        self.since_snapshot += 1;
        if self.snapshot_self && self.since_snapshot >= self.config.snap_count {
            self.since_snapshot = 0;
            self.snapshots.submit(&self.state);
        }
    }

    /// The counters of a Txn this member proposed: lock hand-overs and failures,
    /// expiries. (A Txn's time is the leader's clock: on a follower, a hand-over's time
    /// also holds the difference of the two clocks.)
    fn count_applied(&self, txn: &Txn, a: &zlock_core::Applied) {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = &self.router.stats;
        if let (Some(t), false) = (&stats.timings, a.grants.is_empty()) {
            let ms = (now_ms() - txn.time_ms).max(0) as f64;
            for _ in &a.grants {
                t.handover.record(ms);
            }
        }
        let is_lock = matches!(
            &txn.body,
            TxnBody::Request {
                request: Request::Lock(_),
                ..
            }
        );
        if is_lock && a.reply.err != 0 {
            stats.lock_failures.fetch_add(1, Relaxed);
        }
        if a.closed_session.is_some() && txn.origin.session == SessionId::NONE {
            stats.sessions_expired.fetch_add(1, Relaxed);
        }
    }

    /// Replaces the state by a snapshot payload (from the ensemble's leader) taken at
    /// `index`. Watches and the `/zookeeper/config` view are member-local and stay; sessions are tracked again from the
    /// snapshot's, each with a full timeout.
    pub fn install(
        &mut self,
        index: LogIndex,
        payload: &[u8],
    ) -> Result<(), zlock_core::snapshot::SnapshotError> {
        let config = zlock_core::Config {
            extended_types: self.config.extended_types,
        };
        let mut st = zlock_core::snapshot::decode(payload, config)?;
        st.applied = index;
        st.watches = std::mem::take(&mut self.state.watches);
        // So is the view of `/zookeeper/config` (ZooKeeper resets the node from its local
        // configuration after a leader's snapshot too, ZOOKEEPER-2819).
        st.config_node = self.state.config_node.take();
        let old = std::mem::replace(&mut self.state, st);
        for id in old.sessions.keys() {
            if !self.state.sessions.contains_key(id) {
                self.sessions.remove(*id);
                self.router.end_session(*id);
            }
        }
        let now = self.clock.now();
        for (id, s) in &self.state.sessions {
            if !self.sessions.contains(*id) {
                self.sessions.add(*id, s.timeout_ms.max(0) as u64, now);
            }
        }
        crate::free::elsewhere(old);
        tracing::info!(index = index.0, zxid = %self.state.zxid, nodes = self.state.tree.len(), "state replaced by the leader's snapshot");
        Ok(())
    }

    /// Serves a restored state instead of this one, if a restore was sequenced (the
    /// AdminServer's `restore`, single node only; called by the sequencer once every
    /// Txn before it is applied). In order:
    /// - the state takes this one's log position, and a zxid of the epoch after both
    ///   its own and this one's (clients of this server must not see zxids go back);
    /// - it is written as this log position's snapshot, durably, the older snapshots
    ///   removed (a restart must start from it, never from a snapshot before it with
    ///   the log replayed over it); a failure here changes nothing and is the answer;
    /// - every client connection is closed (their sessions are gone: they get
    ///   SessionExpired when they reconnect), the session tracker follows the restored
    ///   state (no session), watches go with the connections.
    ///
    /// The core's lock is held throughout, so nothing is read or sequenced meanwhile.
    pub fn restore(&mut self) {
        let Some((mut st, done)) = self.restore_due.take() else {
            return;
        };
        st.applied = self.state.applied;
        if st.zxid <= self.state.zxid {
            st.zxid = zlock_core::Zxid(crate::restore::next_epoch(self.state.zxid.0));
        }
        let mut payload = Vec::new();
        zlock_core::snapshot::encode(&st, &mut payload);
        if let Err(e) = self.snapshots.write_now(st.applied.0, &payload) {
            tracing::error!(error = %e, "restore: writing the restored snapshot failed; the state is unchanged");
            let _ = done.send(Err(format!("writing the restored snapshot: {e}")));
            return;
        }
        self.router.drop_all();
        st.config_node = self.state.config_node.take();
        let old = std::mem::replace(&mut self.state, *st);
        for id in old.sessions.keys() {
            self.sessions.remove(*id);
            self.router.end_session(*id);
        }
        self.since_snapshot = 0;
        let zxid = self.state.zxid.0;
        tracing::warn!(zxid = %self.state.zxid, nodes = self.state.tree.len(), index = self.state.applied.0, "state replaced by a restored backup; every client connection closed");
        crate::free::elsewhere(old);
        let _ = done.send(Ok(zxid));
    }

    /// Stops the snapshot worker and frees the state on a thread of its own: dropping a
    /// million znodes takes a noticeable fraction of a second that nobody needs to wait
    /// for (everything is durable by now).
    pub fn finish(&mut self) {
        self.stopped = true;
        self.snapshots.stop();
        self.router.long_reads.stop();
        let state = std::mem::take(&mut self.state);
        crate::free::elsewhere(state);
    }
}
