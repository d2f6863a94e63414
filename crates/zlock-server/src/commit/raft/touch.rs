//! Whether this member is in touch with its quorum.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::failover;
use super::types::WatchReceiver as _;
use super::types::{self, Raft};

/// Publishes [`in_touch`], looked at every `every` (a heartbeat), as it changes, until
/// `stopped` or nobody watches.
pub(super) async fn watch_touch(
    raft: Raft,
    (contact, observer): (Arc<failover::Contact>, bool),
    (silent, every): (Duration, Duration),
    tx: watch::Sender<bool>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !tx.is_closed() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
        let now = in_touch(&raft, &contact, silent, observer);
        tx.send_if_modified(|t| std::mem::replace(t, now) != now);
    }
}

/// See [`super::Reporter::touch`].
///
/// An observer also needs the leader to have said, within the silent time, that it is
/// in touch itself ([`super::observers::confirm_leader`]): a leader that lost its voters goes
/// on sending heartbeats to the observer (openraft's leader does not step down), and
/// without this the observer would go on serving reads, stale ones if the voters
/// elected another leader on the far side of a partition, where ZooKeeper's observer
/// would have lost its leader with the leader's quorum. A follower needs no such
/// answer in a three-voter ensemble (a leader that reaches it has its quorum).
///
/// A member that its membership does not hold (a `reconfig` removed it, or it has not
/// been added yet) is in touch with nobody, whatever it hears: it serves no client and
/// claims no role, not even while it is still the leader that commits the change that
/// removed it (openraft keeps such a leader a moment before it hands over, see
/// [`removed`]).
pub(super) fn in_touch(
    raft: &Raft,
    contact: &failover::Contact,
    silent: Duration,
    observer: bool,
) -> bool {
    if !is_member(&raft.metrics().borrow_watched()) {
        return false;
    }
    if let Some(leader_in_touch) = leader_in_touch(raft, silent) {
        return leader_in_touch;
    }
    let recent = |t: Option<tokio::time::Instant>| t.is_some_and(|t| t.elapsed() <= silent);
    recent(contact.last_heard_any()) && (!observer || recent(contact.last_confirmed()))
}

/// Whether this member's membership (the effective one, committed or not: a member
/// that has seen the entry that leaves it out no longer votes) holds it, as a voter or a
/// learner (an observer, or a member being added).
pub(super) fn is_member(m: &types::Metrics) -> bool {
    m.membership_config.membership().get_node(&m.id).is_some()
}

/// Whether a `reconfig` removed this member: it has a membership, one that leaves it
/// out. After the change that removes it commits, openraft's leader goes on leading for
/// a moment (`removed_leader_step_down`, 150 ms, so that the followers hear of the
/// commit), then hands leadership to the most up-to-date voter and becomes a learner.
pub(super) fn removed(m: &types::Metrics) -> bool {
    m.membership_config.log_id().is_some() && !is_member(m)
}

/// `None` if this member does not lead; else whether a quorum of voters answered it
/// within `silent`. openraft's quorum acknowledgement counts voters only: an
/// observer's (a learner's) acknowledgements never count.
pub(super) fn leader_in_touch(raft: &Raft, silent: Duration) -> Option<bool> {
    let m = raft.metrics();
    let m = m.borrow_watched();
    if m.state != openraft::ServerState::Leader {
        return None;
    }
    // No acknowledgement yet: it has just been elected, by a quorum.
    Some(
        m.last_quorum_acked
            .as_ref()
            .is_none_or(|at| openraft::Instant::elapsed(&**at) <= silent),
    )
}

/// Whether this member is a Raft learner now (an observer).
pub(super) fn is_learner(raft: &Raft) -> bool {
    raft.metrics().borrow_watched().state == openraft::ServerState::Learner
}
