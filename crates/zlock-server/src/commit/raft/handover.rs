//! Leadership handed over when a leader stops.

use std::time::Duration;

use super::types::WatchReceiver as _;
use super::types::{self, Raft};

/// Hands leadership over before a member stops (see [`HandOver::run`]).
pub struct HandOver {
    pub(super) raft: Raft,
    pub(super) me: u64,
    pub(super) within: Duration,
}

impl HandOver {
    /// If this member leads, hands leadership to the voter whose log is furthest
    /// along (openraft's leadership transfer: the leader stops taking proposals and
    /// tells the voters; that voter campaigns at once and the others vote without
    /// waiting for their lease of this leader to run out), and waits until another
    /// member leads, within twice the longest election timeout. Clients see a new leader
    /// within a round trip or two rather than after a lease and an election timeout.
    /// Nothing is lost if it does not happen in time: the member stops anyway, and the
    /// others elect a leader as they would after a crash.
    pub async fn run(&self) {
        let me = self.me;
        let to = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            if !types::leads(&m, me) {
                return;
            }
            let matched = |id: &u64| {
                m.replication
                    .as_ref()
                    .and_then(|r| r.get(id).cloned().flatten())
            };
            m.membership_config
                .membership()
                .voter_ids()
                .filter(|&v| v != me)
                .max_by_key(|v| matched(v))
        };
        let Some(to) = to else { return };
        tracing::info!(member = me, to, "stopping: handing leadership over");
        if self.raft.trigger().transfer_leader(to).await.is_err() {
            return;
        }
        let mut m = self.raft.metrics();
        let moved = tokio::time::timeout(
            self.within,
            // Until the new leader is known here (its first append comes within a round
            // trip of its election).
            types::wait_for(&mut m, |x| x.current_leader.is_some_and(|l| l != me)),
        )
        .await;
        match moved {
            Ok(Ok(x)) => tracing::info!(
                member = me,
                leader = x.current_leader.unwrap_or(0),
                term = x.current_term,
                "leadership handed over"
            ),
            _ => tracing::warn!(
                member = me,
                to,
                "no new leader known in time; stopping anyway"
            ),
        }
    }
}
