//! Observers (`server.N=...:observer`): members that take client connections, serve
//! reads from what they applied, forward writes to the leader and report their
//! sessions to it as a follower does, and never vote.
//!
//! An observer is an openraft *learner*: it receives the log from the leader and
//! applies what is committed, but it is not in the voters' membership, so openraft
//! never counts its acknowledgement towards a commit or a leader's quorum
//! (`millis_since_quorum_ack`, read indexes) and never lets it campaign (its election
//! timer and `trigger().elect()` both check that the member is a voter). That is all
//! ZooKeeper's observers promise: read capacity without slower commits.
//!
//! An observer is in touch (serves clients, starts and resumes sessions) while the
//! leader sends to it *and* the leader says, when asked every heartbeat
//! ([`confirm_leader`]), that a quorum of voters answers it: a leader cut off from its
//! voters goes on sending heartbeats to an observer it still reaches, and ZooKeeper's
//! observer would have lost that leader when the leader lost its quorum.
//!
//! Nothing here decides membership on its own: the voters' initial membership
//! (`Raft::initialize`, proposed by blank voters) holds the participants only, and
//! whichever voter leads adds each configured observer that the membership lacks with
//! openraft's `add_learner` (a membership entry, committed by the voters). Every
//! leader does it after it is elected, so an observer that joins late, or whose adding
//! was cut short by a failover, is added by the next leader. Removing an observer, or
//! adding one to a running ensemble whose members do not list it, is reconfiguration,
//! which this does not do.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use tokio::sync::watch;

use super::failover::Contact;
use super::leader::LeaderLink;
use super::peer::{Reply, Request};
use super::types::Raft;
use super::types::WatchReceiver as _;

/// While `me` leads, adds every observer in `observers` (id, node) that the
/// membership lacks as a learner, one at a time (openraft takes one membership change
/// at a time), looking again on every change of the metrics and every `retry` (a
/// heartbeat) after a failed or refused change (a new leader's first change waits for
/// its blank entry to commit), each change given `patience`. Ends when `stopped` turns
/// true or openraft stops, and with `once` as soon as the membership has held every
/// one of them (from then on `reconfig` decides: an observer it removed stays removed).
pub(super) async fn add_when_leading(
    raft: Raft,
    me: u64,
    observers: BTreeMap<u64, BasicNode>,
    once: bool,
    (retry, patience): (Duration, Duration),
    mut stopped: watch::Receiver<bool>,
) {
    if observers.is_empty() {
        return;
    }
    // openraft's server metrics: they change with the vote, the state, the leader and
    // the membership, which is all this looks at (its full metrics change on every turn
    // of its core loop, several times per write).
    let mut metrics = raft.server_metrics();
    loop {
        let missing: Vec<(u64, BasicNode)> = {
            if raft.metrics().borrow_watched().running_state.is_err() {
                return;
            }
            let m = metrics.borrow_and_update();
            let leads = m.state == openraft::ServerState::Leader && m.current_leader == Some(me);
            let membership = m.membership_config.membership();
            let missing: Vec<(u64, BasicNode)> = observers
                .iter()
                .filter(|(id, _)| membership.get_node(id).is_none())
                .map(|(id, node)| (*id, node.clone()))
                .collect();
            if once && missing.is_empty() {
                return;
            }
            if leads {
                missing
            } else {
                Vec::new()
            }
        };
        let mut failed = false;
        for (id, node) in missing {
            // Non-blocking: returns once the membership entry is committed, without
            // waiting for the observer to catch up (it may be down; openraft keeps
            // replicating to it). Bounded, in case the voters cannot commit now.
            let added = tokio::select! {
                r = tokio::time::timeout(patience, raft.add_learner(id, node.clone(), false)) => r,
                _ = stopped.wait_for(|s| *s) => return,
            };
            match added {
                Ok(Ok(_)) => {
                    tracing::info!(observer = id, node = %node.addr, "observer added (a learner)")
                }
                Ok(Err(e)) => {
                    tracing::debug!(observer = id, error = %e, "observer not added yet");
                    failed = true;
                    break;
                }
                Err(_) => {
                    tracing::debug!(observer = id, "observer not added in time");
                    failed = true;
                    break;
                }
            }
        }
        tokio::select! {
            r = metrics.changed(), if !failed => if r.is_err() { return },
            () = tokio::time::sleep(retry), if failed => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
    }
}

/// On an observer: asks the leader every `heartbeat` whether it is in touch with its
/// quorum ([`Request::LeaderInTouch`], answered from the leader's own metrics: no
/// quorum round), and records each yes in `contact` (see `in_touch`). The leader's
/// address is looked up in `addrs`. Ends when `stopped` turns true.
pub(super) async fn confirm_leader(
    mut link: LeaderLink,
    contact: Arc<Contact>,
    heartbeat: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
        let Some(leader) = link.current() else {
            continue;
        };
        // Within a silent time's share: an answer that comes later is stale anyway.
        let ttl = (contact.silent / 2).max(heartbeat);
        if let Ok(Some(Reply::LeaderInTouch(true))) =
            link.ask(leader, &Request::LeaderInTouch, ttl).await
        {
            contact.confirmed();
        }
    }
}
