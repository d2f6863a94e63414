//! A leader's intake: how batches enter its Raft log, in order, whether they come from
//! its own writer or over a follower's forwarding connection (see `super::write` for the
//! whole path, and for what a failure fails).
//!
//! - [`Submitter`]: what its writes make of the state is always a prefix of what it was
//!   given: once one is refused, none after it is applied. Two things make that so:
//!   - every write is pinned to the leadership this member held when the submitter took
//!     its first batch (`with_leader`: openraft checks it before it appends): a member
//!     that lost the lead and won it back between two writes refuses the second. A
//!     submitter that found this member not leading refuses everything.
//!   - a leader whose lease has lapsed (no quorum heard for an election timeout), or
//!     which is handing its leadership over, refuses writes for a while and then takes
//!     them again under the same leadership: a write queued behind a refused one would
//!     be taken, and land without it. So this member's log asks each write, as it
//!     appends it ([`AppendNote`]), whether to keep it: a write whose predecessor was
//!     refused (or taken and then discarded), or that comes after one not kept, is
//!     appended empty, a blank in the log that every member applies as nothing, and
//!     answered as refused. openraft takes its messages in order and answers a
//!     refusal at once, so when a write is appended, its predecessor's answer has come
//!     if it was refused. Nothing waits for it: writes are handed over as they come.
//! - [`Forwards`]: the leader's side of a follower's forwarding connection: each batch
//!   read is submitted at once, and the answers go back in the order the batches came.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use futures_util::future::{FutureExt as _, Shared};
use openraft::base::BoxFuture;
use openraft::errors::ClientWriteError;
use openraft::impls::ProgressResponder;

use super::peer::{ForwardError, Reply};
use super::types::{AppendNote, OnAppend, Proposal, Raft, Zraft};
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
    /// cannot take writes now), or appended empty (see the module's documentation):
    /// never applied.
    Refused,
    /// Taken, then not applied here (discarded, or openraft stopped).
    Failed(String),
}

/// One write's answer, read by its batch's outcome and by the next write's note.
type Answer = Shared<BoxFuture<'static, Said>>;

/// A submitter's writes, as its log appends them.
struct Chain {
    /// The first write appended empty; `u64::MAX`: none.
    voided_from: AtomicU64,
}

/// One write's [`AppendNote`]: whether the log keeps it, decided once, as the leader
/// appends it.
struct Note {
    seq: u64,
    /// The answer of the submitter's write before this one.
    before: Option<Answer>,
    chain: Arc<Chain>,
    kept: OnceLock<bool>,
}

impl OnAppend for Note {
    fn keep(&self) -> bool {
        *self.kept.get_or_init(|| {
            if self.seq > self.chain.voided_from.load(Ordering::Acquire) {
                return false;
            }
            // Appended only after its predecessor was refused or appended (openraft
            // takes its messages in order): a refusal has its answer by now.
            let before_lost = self.before.as_ref().is_some_and(|a| {
                matches!(
                    a.clone().now_or_never(),
                    Some(Said::Refused | Said::Failed(_))
                )
            });
            if before_lost {
                self.chain.voided_from.fetch_min(self.seq, Ordering::AcqRel);
            }
            !before_lost
        })
    }
}

/// Takes batches into this member's Raft as leader, as a prefix of what it is given
/// (see the module's documentation).
pub struct Submitter {
    raft: Raft,
    /// This member's id.
    pub(super) me: u64,
    /// The leadership every batch is pinned to, taken with the first batch; `Err`: this
    /// member did not lead then, and refuses every batch.
    pin: Option<Result<CommittedLeaderId, ()>>,
    /// The latest write handed over: its number and its answer.
    last: (u64, Option<Answer>),
    chain: Arc<Chain>,
}

impl Submitter {
    pub fn new(raft: Raft, me: u64) -> Submitter {
        Submitter {
            raft,
            me,
            pin: None,
            last: (0, None),
            chain: Arc::new(Chain {
                voided_from: AtomicU64::new(u64::MAX),
            }),
        }
    }

    /// Hands `batch` to openraft, every Txn stamped with `now_ms` (this member's wall
    /// clock: the time in the log is the leader's alone; see [`super::peer::write_as_leader`]),
    /// and returns its outcome to await. [`ForwardError::NotLeader`] only when no
    /// entry of the batch was applied, nor will be (so that it is safe to send it
    /// elsewhere).
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
            let note = Arc::new(Note {
                seq: self.last.0 + 1,
                before: self.last.1.take(),
                chain: self.chain.clone(),
                kept: OnceLock::new(),
            });
            p.1 = AppendNote::new(note.clone());
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
            let seq = note.seq;
            let answer: Answer = async move {
                match answer.await {
                    // Appended empty: applied as nothing.
                    Ok(Ok(_)) if note.kept.get() == Some(&false) => Said::Refused,
                    Ok(Ok(resp)) => Said::Applied(resp.log_id.index),
                    Ok(Err(ClientWriteError::ForwardToLeader(_))) => Said::Refused,
                    Ok(Err(e)) => Said::Failed(e.to_string()),
                    Err(_) => Said::Failed(format!("member {me}'s Raft stopped")),
                }
            }
            .boxed()
            .shared();
            self.last = (seq, Some(answer.clone()));
            answers.push(answer);
        }
        Box::pin(async move {
            let (mut last, mut refused, mut failed) = (0, 0, None);
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
