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
//!
//! # A member's older forwarding connections are fenced off
//!
//! A member forwards over one connection at a time, and opens a new one after it gave
//! up on the old (no answer within its patience, a broken connection): its clients were
//! told ConnectionLoss, and resume their sessions with requests that go on the new
//! connection. But what it wrote on the old one may still arrive. TCP loses nothing: a
//! frame held by a partition is retransmitted after the heal, at the sender's next
//! retransmission (whose interval doubled while the link was cut), and closing a socket
//! sends its FIN after the data. A connection opened after the heal can be read first,
//! and the old frame would then land after the newer requests of its session, against
//! per-session FIFO (the simulation found this: `tests/raft_sim/forward.rs`). So:
//!
//! - the leader numbers its peer connections as it accepts them ([`Fence::admit`]), and
//!   takes a member's forwarded frame only if no connection from that member accepted
//!   after this one has had a frame taken; a stale connection is closed. A member
//!   opens a connection only after it stopped using the one before, so accepted later
//!   is opened later. (ZooKeeper does the same with its session owner, which is the
//!   learner's connection: a session revalidated over a new connection refuses requests
//!   from the old one as SessionMoved.)
//! - the fence is the leader's memory, so a connection's frames are pinned to the
//!   leadership this member held when it accepted the connection (not when its first
//!   frame came, which may be terms later): a member that leads again after another
//!   led in between refuses them.

use std::collections::{HashMap, VecDeque};
use std::future::Future as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;

use openraft::base::BoxFuture;
use openraft::errors::ClientWriteError;
use openraft::impls::ProgressResponder;
use tokio::sync::oneshot::error::TryRecvError;

use super::peer::{ForwardError, Reply};
use super::types::{AppendNote, OnAppend, Proposal, Raft, Zraft};
use super::write::{WallClock, IN_FLIGHT};

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

type WriteResult = openraft::raft::ClientWriteResult<Zraft>;
type Answer = tokio::sync::oneshot::Receiver<WriteResult>;

/// A submitter's writes, as its log appends them (in the order they were handed over).
struct Chain {
    /// One was appended empty: so is every later one.
    voided: AtomicBool,
}

/// One write handed to openraft: its answer, read by its batch's outcome and, as the log
/// appends the next write, by that write's [`AppendNote`]; and its own note.
struct Write {
    me: u64,
    /// The submitter's write before this one, until this one is appended.
    before: Mutex<Option<Arc<Write>>>,
    chain: Arc<Chain>,
    /// Whether the log kept it, decided once, as the leader appends it.
    kept: OnceLock<bool>,
    /// openraft's answer: waited for, or come. One lock for both readers, so that the
    /// log's look never races the batch's wait (and never takes its waker: it only
    /// tries the channel).
    answer: Mutex<Result<Said, Answer>>,
}

impl Write {
    /// What openraft's answer says (`None`: openraft dropped it, stopping).
    fn said(&self, r: Option<WriteResult>) -> Said {
        match r {
            // Appended empty: applied as nothing.
            Some(Ok(_)) if self.kept.get() == Some(&false) => Said::Refused,
            Some(Ok(resp)) => Said::Applied(resp.log_id.index),
            Some(Err(ClientWriteError::ForwardToLeader(_))) => Said::Refused,
            Some(Err(e)) => Said::Failed(e.to_string()),
            None => Said::Failed(format!("member {}'s Raft stopped", self.me)),
        }
    }

    /// The answer, read from the channel by `read` (`Ready(None)`: openraft dropped it)
    /// unless it was read before.
    fn read(&self, read: impl FnOnce(&mut Answer) -> Poll<Option<WriteResult>>) -> Poll<Said> {
        let mut a = lock(&self.answer);
        let r = match &mut *a {
            Ok(said) => return Poll::Ready(said.clone()),
            Err(rx) => std::task::ready!(read(rx)),
        };
        let said = self.said(r);
        *a = Ok(said.clone());
        Poll::Ready(said)
    }

    /// The answer, if it has come (tries the channel: the waiter's waker stays).
    fn said_now(&self) -> Option<Said> {
        let tried = self.read(|rx| match rx.try_recv() {
            Ok(r) => Poll::Ready(Some(r)),
            Err(TryRecvError::Empty) => Poll::Pending,
            Err(TryRecvError::Closed) => Poll::Ready(None),
        });
        match tried {
            Poll::Ready(said) => Some(said),
            Poll::Pending => None,
        }
    }

    /// The answer, once it comes.
    fn poll_said(&self, cx: &mut std::task::Context<'_>) -> Poll<Said> {
        self.read(|rx| std::pin::Pin::new(rx).poll(cx).map(Result::ok))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl OnAppend for Write {
    fn keep(&self) -> bool {
        *self.kept.get_or_init(|| {
            // Asked once: the write before is not needed after this.
            let before = lock(&self.before).take();
            if self.chain.voided.load(Ordering::Acquire) {
                return false;
            }
            // Appended only after its predecessor was refused or appended (openraft
            // takes its messages in order): a refusal has its answer by now.
            let before_lost = before
                .is_some_and(|b| matches!(b.said_now(), Some(Said::Refused | Said::Failed(_))));
            if before_lost {
                self.chain.voided.store(true, Ordering::Release);
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
    /// The latest write handed over.
    last: Option<Arc<Write>>,
    chain: Arc<Chain>,
}

impl Submitter {
    /// Pins the submitter to the leadership this member holds now, unless it is pinned
    /// already (see the module's documentation).
    fn pin_now(&mut self) -> &Result<CommittedLeaderId, ()> {
        let raft = &self.raft;
        self.pin.get_or_insert_with(|| {
            raft.as_leader()
                .map(|l| l.to_committed_leader_id())
                .map_err(|_| ())
        })
    }

    pub fn new(raft: Raft, me: u64) -> Submitter {
        Submitter {
            raft,
            me,
            pin: None,
            last: None,
            chain: Arc::new(Chain {
                voided: AtomicBool::new(false),
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
        let pin = *self.pin_now();
        let Ok(pin) = pin else {
            return Box::pin(async move { Err(ForwardError::NotLeader(me)) });
        };
        for txn in batch.iter_mut().flat_map(|p| p.0.iter_mut()) {
            txn.time_ms = now_ms;
            txn.clock = zlock_core::TxnClock::Leader;
        }
        let n = batch.len();
        let mut writes = Vec::with_capacity(n);
        for mut p in batch {
            let (responder, answer) = ProgressResponder::complete_only();
            let w = Arc::new(Write {
                me,
                before: Mutex::new(self.last.take()),
                chain: self.chain.clone(),
                kept: OnceLock::new(),
                answer: Mutex::new(Err(answer)),
            });
            p.1 = AppendNote::new(w.clone());
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
            self.last = Some(w.clone());
            writes.push(w);
        }
        Box::pin(async move {
            let (mut last, mut refused, mut failed) = (0, 0, None);
            for w in writes {
                match std::future::poll_fn(|cx| w.poll_said(cx)).await {
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

/// Which peer connection of each member may forward to this member (see the module's
/// documentation): shared by the peer server's connections.
#[derive(Debug, Default)]
pub struct Fence {
    /// Connections accepted so far.
    accepted: AtomicU64,
    /// By member: the number of the latest connection of its whose frame was taken. Held
    /// while a frame is handed to openraft, so that a frame checked is in the log's
    /// order before any frame of a later connection.
    taken: tokio::sync::Mutex<HashMap<u64, u64>>,
}

/// A connection's place in its member's order (see [`Fence`]).
#[derive(Debug, Clone)]
pub struct Admitted {
    fence: Arc<Fence>,
    from: u64,
    number: u64,
}

impl Fence {
    /// Numbers a connection from member `from`, accepted now.
    pub fn admit(self: &Arc<Self>, from: u64) -> Admitted {
        Admitted {
            fence: self.clone(),
            from,
            number: self.accepted.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Admitted {
    /// Whether a frame of this connection may be taken, given the latest connection of
    /// each member whose frame was (which this one becomes if it may).
    fn may_take(&self, taken: &mut HashMap<u64, u64>) -> Result<(), Stale> {
        let latest = taken.entry(self.from).or_insert(self.number);
        if *latest > self.number {
            return Err(Stale { from: self.from });
        }
        *latest = self.number;
        Ok(())
    }
}

/// A forwarded frame came on a connection older than one its member forwarded over
/// since: it is not taken, and the connection is closed.
#[derive(Debug, thiserror::Error)]
#[error("a forwarded frame from member {from} came on a connection older than one it forwarded over since")]
pub struct Stale {
    pub from: u64,
}

/// The leader's side of one forwarding connection: batches submitted as they are read,
/// answered in the order they came.
pub struct Forwards {
    submitter: Submitter,
    waiting: VecDeque<Pending>,
    /// This member's wall clock, that stamps the batches.
    wall: WallClock,
    /// The connection's place among its member's.
    admitted: Admitted,
}

impl Forwards {
    /// The leader's side of a connection accepted now; its frames are pinned to the
    /// leadership this member holds now (see the module's documentation).
    pub fn new(raft: Raft, me: u64, wall: WallClock, admitted: Admitted) -> Forwards {
        let mut submitter = Submitter::new(raft, me);
        submitter.pin_now();
        Forwards {
            submitter,
            waiting: VecDeque::new(),
            wall,
            admitted,
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

    /// Submits `batch` (stamped with this member's clock now), unless a later
    /// connection of its member has had a frame taken.
    pub async fn take(&mut self, batch: Vec<Proposal>) -> Result<(), Stale> {
        let mut taken = self.admitted.fence.taken.lock().await;
        self.admitted.may_take(&mut taken)?;
        crate::stages::mark_txns("fwd", batch.iter().flat_map(|p| p.0.iter()));
        let p = self.submitter.submit(batch, (self.wall)()).await;
        drop(taken);
        self.waiting.push_back(p);
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A member's connection is fenced off once a connection of its accepted later has
    /// had a frame taken; until then both may forward (the older one's frames are in the
    /// log first), and other members' connections are not touched.
    #[test]
    fn a_members_older_forwarding_connection_is_fenced_off_by_a_newer_ones_frame() {
        let fence = Arc::new(Fence::default());
        let mut taken = HashMap::new();
        let (old, new, other) = (fence.admit(1), fence.admit(1), fence.admit(2));
        assert!(old.may_take(&mut taken).is_ok());
        assert!(
            new.may_take(&mut taken).is_ok(),
            "a newer connection may always take"
        );
        let stale = old
            .may_take(&mut taken)
            .expect_err("the older one is fenced off");
        assert_eq!(stale.from, 1);
        assert!(
            other.may_take(&mut taken).is_ok(),
            "another member's is not"
        );
        assert!(new.may_take(&mut taken).is_ok());
        assert!(old.may_take(&mut taken).is_err(), "for good");
    }
}
