//! A leader's intake: how batches enter its Raft log, in order, whether they come from
//! its own writer or over a follower's forwarding connection (see `super::write` for the
//! whole path, and for what a failure fails).
//!
//! - [`Submitter`]: every batch goes to openraft pinned to the leadership this member
//!   held when the submitter took its first batch (`with_leader`: openraft checks it
//!   before it appends), so that once one is refused every later one is refused too (a
//!   member that lost the lead and won it back between two batches would otherwise take
//!   the second after refusing the first). A submitter that found this member not
//!   leading refuses everything.
//! - [`Forwards`]: the leader's side of a follower's forwarding connection: each batch
//!   read is submitted at once, and the answers go back in the order the batches came.

use std::collections::VecDeque;

use openraft::base::BoxFuture;
use openraft::errors::ClientWriteError;
use openraft::impls::ProgressResponder;

use super::peer::{ForwardError, Reply};
use super::types::{Proposal, Raft, Zraft};
use super::write::IN_FLIGHT;

/// Forwarded frames the leader takes from one connection before it answers some: a
/// member sends at most [`IN_FLIGHT`]; this bounds what a peer that does not follow the
/// rule can make the leader hold.
const FORWARDS_HELD: usize = 4 * IN_FLIGHT;

type CommittedLeaderId = openraft::type_config::alias::CommittedLeaderIdOf<Zraft>;

/// The outcome of one submitted batch: the last entry's index once all are committed
/// and applied on the leader, or why not.
pub type Outcome = Result<u64, ForwardError>;

/// A submitted batch's outcome, to be awaited.
pub type Pending = BoxFuture<'static, Outcome>;

/// Takes batches into this member's Raft as leader, pinned to one leadership (see the
/// module's documentation).
pub struct Submitter {
    raft: Raft,
    /// This member's id.
    pub(super) me: u64,
    /// The leadership every batch is pinned to, taken with the first batch; `Err`: this
    /// member did not lead then, and refuses every batch.
    pin: Option<Result<CommittedLeaderId, ()>>,
}

impl Submitter {
    pub fn new(raft: Raft, me: u64) -> Submitter {
        Submitter {
            raft,
            me,
            pin: None,
        }
    }

    /// Hands `batch` to openraft, every Txn stamped with `now_ms` (this member's wall
    /// clock: the time in the log is the leader's alone; see [`super::peer::write_as_leader`]),
    /// and returns its outcome to await. [`ForwardError::NotLeader`] only when no
    /// entry of the batch was taken (so that it is safe to send it elsewhere).
    pub async fn submit(&mut self, mut batch: Vec<Proposal>, now_ms: i64) -> Pending {
        let me = self.me;
        let raft = &self.raft;
        let pin = self.pin.get_or_insert_with(|| {
            raft.as_leader()
                .map(|l| l.to_committed_leader_id())
                .map_err(|_| ())
        });
        let Ok(pin) = *pin else {
            return Box::pin(async move { Err(ForwardError::NotLeader(me)) });
        };
        for txn in batch.iter_mut().flat_map(|p| p.0.iter_mut()) {
            txn.time_ms = now_ms;
            txn.clock = zlock_core::TxnClock::Leader;
        }
        let mut answers = Vec::with_capacity(batch.len());
        for p in batch {
            let (responder, answer) = ProgressResponder::complete_only();
            let sent = self
                .raft
                .write(p)
                .with_leader(pin)
                .responder(responder)
                .await;
            if let Err(e) = sent {
                // openraft stopped: what was handed over before is lost with it.
                let e = e.to_string();
                return Box::pin(async move { Err(ForwardError::Fatal(e)) });
            }
            answers.push(answer);
        }
        Box::pin(async move {
            let n = answers.len();
            let (mut last, mut refused, mut failed) = (0, 0, None);
            for a in answers {
                match a.await {
                    Ok(Ok(resp)) => last = resp.log_id.index,
                    Ok(Err(ClientWriteError::ForwardToLeader(_))) => refused += 1,
                    Ok(Err(e)) => failed = Some(e.to_string()),
                    Err(_) => failed = Some(format!("member {me}'s Raft stopped")),
                }
            }
            match failed {
                Some(e) => Err(ForwardError::Failed(e)),
                None if refused == n => Err(ForwardError::NotLeader(me)),
                None if refused > 0 => Err(ForwardError::Failed(format!(
                    "member {me} lost the lead during a batch"
                ))),
                None => Ok(last),
            }
        })
    }
}

/// The leader's side of one forwarding connection: batches submitted as they are read,
/// answered in the order they came.
pub struct Forwards {
    submitter: Submitter,
    waiting: VecDeque<Pending>,
}

impl Forwards {
    pub fn new(raft: Raft, me: u64) -> Forwards {
        Forwards {
            submitter: Submitter::new(raft, me),
            waiting: VecDeque::new(),
        }
    }

    /// Whether batches wait for their answers.
    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether another batch may be read before some are answered.
    pub fn room(&self) -> bool {
        self.waiting.len() < FORWARDS_HELD
    }

    /// Submits `batch` (stamped with this member's clock now).
    pub async fn take(&mut self, batch: Vec<Proposal>) {
        crate::stages::mark_txns("fwd", batch.iter().flat_map(|p| p.0.iter()));
        let p = self.submitter.submit(batch, crate::clock::now_ms()).await;
        self.waiting.push_back(p);
    }

    /// The oldest waiting batch's answer (cancel-safe: it stays first until it is
    /// answered). Pending forever if none waits.
    pub async fn answer(&mut self) -> Reply {
        let Some(front) = self.waiting.front_mut() else {
            return std::future::pending().await;
        };
        let r = front.as_mut().await;
        self.waiting.pop_front();
        Reply::Forward(r)
    }
}
