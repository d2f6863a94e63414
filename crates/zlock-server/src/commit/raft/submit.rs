//! A leader's intake: how batches enter its Raft log, in order, whether they come from
//! its own writer or over a follower's forwarding connection (see `super::write` for the
//! whole path, and for what a failure fails).
//!
//! - [`Submitter`]: once it has a write refused, it refuses every later one, so what
//!   openraft takes from it is always a prefix of what it was given. Two things make
//!   that so:
//!   - every write is pinned to the leadership this member held when the submitter took
//!     its first batch (`with_leader`: openraft checks it before it appends): a member
//!     that lost the lead and won it back between two writes refuses the second. A
//!     submitter that found this member not leading refuses everything.
//!   - a write goes to openraft only once openraft is known to have taken the one
//!     before. A leader whose lease has lapsed (no quorum heard for an election
//!     timeout) or which is handing its leadership over refuses writes for a while, and
//!     takes them again under the same leadership: the write queued behind a refused
//!     one would be taken, and land without it. openraft takes its messages in order
//!     and answers a refusal at once, while its log is handed every write it takes
//!     ([`AppendNote`]: the log notes the write's number as it appends it). So when
//!     the next write is due, the last one is settled by whichever comes first: its
//!     answer (a refusal, or already applied) or its note (taken). Both come without a
//!     message to openraft's core; a submitter with one write at a time finds its last
//!     write answered and waits for nothing.
//! - [`Forwards`]: the leader's side of a follower's forwarding connection: each batch
//!   read is submitted at once, and the answers go back in the order the batches came.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::future::{FutureExt as _, Shared};
use openraft::base::BoxFuture;
use openraft::errors::ClientWriteError;
use openraft::impls::ProgressResponder;

use super::peer::{ForwardError, Reply};
use super::types::{AppendNote, Proposal, Raft, Taken, Zraft};
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

/// What openraft said of one write, as far as it is known.
#[derive(Debug, Clone)]
enum Said {
    /// Committed and applied at this index.
    Applied(u64),
    /// Refused untaken (this member does not lead, or not the leadership pinned, or it
    /// cannot take writes now).
    Refused,
    /// Taken, then not applied here (discarded, or openraft stopped).
    Failed(String),
}

/// One write's answer, read both by its batch's outcome and by the submitter, which
/// must know whether its last write was refused before it hands over the next.
type Answer = Shared<BoxFuture<'static, Said>>;

/// Takes batches into this member's Raft as leader, as a prefix of what it is given
/// (see the module's documentation).
pub struct Submitter {
    raft: Raft,
    /// This member's id.
    pub(super) me: u64,
    /// The leadership every batch is pinned to, taken with the first batch; `Err`: this
    /// member did not lead then, and refuses every batch.
    pin: Option<Result<CommittedLeaderId, ()>>,
    /// The answer of the latest write handed over, until it is known to be taken, and
    /// its number.
    last: Option<(Answer, u64)>,
    /// Writes handed over.
    written: u64,
    /// The number of the latest write this member's log has taken (its [`AppendNote`]).
    taken: Arc<Taken>,
    /// A write was refused: every later one is refused too, and not handed over.
    refused: bool,
}

impl Submitter {
    pub fn new(raft: Raft, me: u64) -> Submitter {
        Submitter {
            raft,
            me,
            pin: None,
            last: None,
            written: 0,
            taken: Arc::new(Taken::default()),
            refused: false,
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
        let n = batch.len();
        let mut answers = Vec::with_capacity(n);
        for mut p in batch {
            self.settle().await;
            if self.refused {
                break;
            }
            self.written += 1;
            let seq = self.written;
            p.1 = AppendNote::new(self.taken.clone(), seq);
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
            let answer: Answer = async move {
                match answer.await {
                    Ok(Ok(resp)) => Said::Applied(resp.log_id.index),
                    Ok(Err(ClientWriteError::ForwardToLeader(_))) => Said::Refused,
                    Ok(Err(e)) => Said::Failed(e.to_string()),
                    Err(_) => Said::Failed(format!("member {me}'s Raft stopped")),
                }
            }
            .boxed()
            .shared();
            self.last = Some((answer.clone(), seq));
            answers.push(answer);
        }
        // The writes not handed over, refused with the first refusal.
        let untaken = n - answers.len();
        Box::pin(async move {
            let (mut last, mut refused, mut failed) = (0, untaken, None);
            for a in answers {
                match a.await {
                    Said::Applied(i) => last = i,
                    Said::Refused => refused += 1,
                    Said::Failed(e) => failed = Some(e),
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

    /// Learns whether the latest write handed over was refused, waiting for its answer
    /// or for the log to take it, whichever comes first.
    async fn settle(&mut self) {
        let Some((last, seq)) = self.last.take() else {
            return;
        };
        let said = match last.clone().now_or_never() {
            Some(said) => Some(said),
            None if self.taken.upto() >= seq => None,
            None => tokio::select! {
                biased;
                said = last => Some(said),
                () = self.taken.reached(seq) => None,
            },
        };
        if matches!(said, Some(Said::Refused)) {
            self.refused = true;
        }
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
