//! A member's write path, pipelined: the sequencer hands batches over and goes on
//! sequencing while earlier batches replicate.
//!
//! Three parts, one per end of the path: how a leader takes batches into its Raft log
//! ([`Submitter`]) and the leader's side of a follower's forwarding connection
//! ([`super::submit::Forwards`]), both in `submit`; and here:
//!
//! - [`Writer`]: the member's own writer task. It takes the sequencer's batches, cuts
//!   them into frames of at most [`super::FORWARD_PROPOSALS`] proposals and keeps up to
//!   [`IN_FLIGHT`] of them in flight: to its own Raft while it leads, else over one
//!   connection to the leader. It reads their outcomes in order.
//!
//! # Order, and what a failure fails
//!
//! Frames are submitted in order on one route (this member's Raft, or one connection
//! to one leader); the route changes only when nothing is in flight on it. Outcomes are
//! read in order, and:
//!
//! - a frame refused untaken (not the leader) is sent again, with every later frame,
//!   to the leader this member knows next, once every frame in flight on the old route
//!   has been answered, and only if every one of them was refused too;
//! - anything else (no answer in time, a broken connection, an entry the next leader
//!   discarded, a later frame taken after an earlier one was refused, this member out
//!   of touch with its quorum) leaves the outcome unknown: the writer reports
//!   [`CommitError::Unavailable`], drops everything in flight and queued, and discards
//!   every batch that reaches it until the sequencer says it has dropped every client
//!   connection ([`Order::Dropped`]). Nobody waits for the discarded requests: their
//!   clients were told ConnectionLoss, and reconnect and resume their sessions. The
//!   writer never proposes a request after its client was told so (it would land after
//!   the client decided it had not). A frame already written to a connection this member
//!   gave up on may still reach the leader (TCP delivers it, late): the leader takes it
//!   only while this member has forwarded nothing over a newer connection, so it lands
//!   before any request sent after it, never behind one (`submit`'s fence).
//!
//! A frame refused while later ones are in flight is refused with all of them: openraft
//! refuses writes for a moment while its leader's lease has lapsed (no quorum heard for
//! an election timeout) or while it hands its leadership over, and takes them again
//! under the same leadership, but a leader's [`Submitter`] has its log append empty
//! (applied as nothing, answered as refused) every write after a refused one. The
//! refused frames then go again, in order, as above. Should a frame still be taken
//! after an earlier one was refused, the writer reports the outcome unknown
//! ([`Unknown::TakenAfterRefused`]) and the refused frame is not sent again.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::members::Addrs;
use super::peer::Request;
use super::peer::{read_frame, write_frame, ForwardError, FrameError, Identity, Peer, Reply};
use super::submit::{Pending, Submitter};
use super::types::{Proposal, Raft, WatchReceiver as _};
use super::FORWARD_PROPOSALS;
use super::{RaftFailure, Unknown};
use crate::commit::CommitError;

/// Frames a member keeps in flight before it waits for the oldest one's outcome.
pub const IN_FLIGHT: usize = 8;

/// What the sequencer hands the writer.
pub enum Order {
    /// A batch, in order after every earlier one; `done` (a synchronous proposer's)
    /// hears its outcome.
    Batch {
        props: Vec<Proposal>,
        done: Option<oneshot::Sender<Result<u64, CommitError>>>,
    },
    /// The sequencer dropped every client connection: the batches before this one hold
    /// requests nobody waits for any more.
    Dropped,
}

/// One frame: proposals sent together, in order.
struct Unit {
    props: Vec<Proposal>,
    /// When its batch reached the writer (its patience runs from then).
    since: Instant,
    /// Told the outcome, if it ends a synchronous proposer's batch.
    done: Option<oneshot::Sender<Result<u64, CommitError>>>,
}

/// Where frames go.
enum Route {
    /// This member's own Raft, while it leads.
    Local(Submitter),
    /// The leader, over one connection.
    Remote(Link),
}

/// A connection to the leader for forwarded frames: written as they come, the replies
/// read in order.
struct Link {
    leader: u64,
    wr: ForwardWrite,
    replies: std::pin::Pin<Box<dyn Stream<Item = Result<Reply, FrameError>> + Send>>,
}

/// A frame in flight and how its outcome comes.
struct Sent {
    unit: Unit,
    /// `None`: the next reply on the link.
    pending: Option<Pending>,
    /// When it was sent: a reply is due within the patience.
    at: Instant,
}

/// Why the writer stopped taking frames on its route.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    /// Nothing: frames go.
    No,
    /// A frame was refused: the rest in flight drain, then the refused ones go again.
    Refused,
}

/// The member's writer task (see the module's documentation).
pub struct Writer {
    pub raft: Raft,
    pub me: u64,
    pub id: Arc<Identity>,
    pub addrs: Addrs,
    pub patience: Duration,
    /// The silent time, and whether this member is in touch with its quorum.
    pub silent: Duration,
    pub touch: watch::Receiver<bool>,
    pub orders: mpsc::Receiver<Order>,
    /// Where outcomes that fail requests are reported (to the sequencer).
    pub troubles: mpsc::UnboundedSender<CommitError>,
    /// Set when this member's Raft failed: nothing more is taken.
    pub failed: Arc<AtomicBool>,
    /// The wall clock this member stamps Txns with while it leads (ms since the
    /// epoch; the member's own, `crate::clock::now_ms`, or the simulation's).
    pub wall: WallClock,
    /// How a forwarding connection to the leader is opened: `None`, over the peer link
    /// to the leader's address (the server); the simulation opens its own.
    pub dial: Option<Dial>,
}

/// A wall clock, in ms since the epoch.
pub type WallClock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The read end of a forwarding connection.
pub type ForwardRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
/// The write end of a forwarding connection.
pub type ForwardWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;
/// Opens a forwarding connection to the leader of the given id.
pub type Dial = Arc<
    dyn Fn(
            u64,
        ) -> futures_util::future::BoxFuture<
            'static,
            Result<(ForwardRead, ForwardWrite), FrameError>,
        > + Send
        + Sync,
>;

impl Writer {
    pub async fn run(mut self) {
        let mut queue: VecDeque<Unit> = VecDeque::new();
        let mut in_flight: VecDeque<Sent> = VecDeque::new();
        let mut refused: Vec<Unit> = Vec::new();
        let mut route: Option<Route> = None;
        let mut held = Held::No;
        let mut poisoned = false;
        loop {
            // Send what may go.
            // (Nothing is queued while batches are discarded, but a synchronous
            // proposer's.)
            while held == Held::No && in_flight.len() < IN_FLIGHT {
                let Some(unit) = queue.pop_front() else { break };
                match self.send(unit, &mut route, in_flight.is_empty()).await {
                    Ok(Some(sent)) => in_flight.push_back(sent),
                    Ok(None) => {}
                    Err(Failure::Unknown(why, unit)) => {
                        if let Some(u) = unit {
                            queue.push_front(u);
                        }
                        self.poison(why, &mut queue, &mut in_flight, &mut refused);
                        (route, held, poisoned) = (None, Held::No, true);
                    }
                    Err(Failure::Fatal(e)) => return self.fatal(e, queue, in_flight, refused),
                }
            }
            let since = in_flight
                .front()
                .map(|s| s.unit.since)
                .or_else(|| queue.front().map(|u| u.since));
            let remote = match &route {
                Some(Route::Remote(l)) if !in_flight.is_empty() => Some(l.leader),
                _ => None,
            };
            let can_take = queue.is_empty() && held == Held::No && in_flight.len() < IN_FLIGHT;
            let retry = held == Held::Refused && in_flight.is_empty();
            let refused_by = match &route {
                Some(Route::Remote(l)) => Some(l.leader),
                Some(Route::Local(s)) => Some(s.me),
                None => None,
            };
            let (raft, touch, silent) = (self.raft.clone(), self.touch.clone(), self.silent);
            tokio::select! {
                biased;
                outcome = next_outcome(&mut in_flight, &mut route, self.patience), if !in_flight.is_empty() => {
                    let Some(sent) = in_flight.pop_front() else { continue };
                    match outcome {
                        Ok(last) if refused.is_empty() => {
                            if let Some(d) = sent.unit.done {
                                let _ = d.send(Ok(last));
                            }
                        }
                        Ok(_) => {
                            queue.push_front(sent.unit);
                            self.poison(
                                Unknown::TakenAfterRefused,
                                &mut queue, &mut in_flight, &mut refused,
                            );
                            (route, held, poisoned) = (None, Held::No, true);
                        }
                        Err(Heard::Said(ForwardError::NotLeader(_) | ForwardError::NotSent(_))) => {
                            refused.push(sent.unit);
                            held = Held::Refused;
                        }
                        Err(Heard::Said(ForwardError::Fatal(_))) if matches!(route, Some(Route::Local(_))) => {
                            queue.push_front(sent.unit);
                            return self.fatal(stopped_at_write(&self.raft), queue, in_flight, refused);
                        }
                        Err(heard) => {
                            queue.push_front(sent.unit);
                            let why = match heard {
                                Heard::Said(said) => Unknown::Leader { leader: refused_by.unwrap_or(self.me), said },
                                Heard::Lost(why) => why,
                            };
                            self.poison(why, &mut queue, &mut in_flight, &mut refused);
                            (route, held, poisoned) = (None, Held::No, true);
                        }
                    }
                }
                () = super::other_leader(&raft, remote.unwrap_or(0)), if remote.is_some() => {
                    let l = remote.unwrap_or(0);
                    self.poison(
                        Unknown::Replaced(l),
                        &mut queue, &mut in_flight, &mut refused,
                    );
                    (route, held, poisoned) = (None, Held::No, true);
                }
                () = out_of_touch(touch, since.unwrap_or_else(Instant::now) + silent), if since.is_some() => {
                    self.poison(
                        Unknown::OutOfTouch,
                        &mut queue, &mut in_flight, &mut refused,
                    );
                    (route, held, poisoned) = (None, Held::No, true);
                }
                () = next_leader(&raft, refused_by), if retry => {
                    // Every frame on the old route was refused: they go again, first.
                    for u in refused.drain(..).rev() {
                        queue.push_front(u);
                    }
                    (route, held) = (None, Held::No);
                    if queue.front().is_some_and(|u| u.since.elapsed() > self.patience) {
                        self.poison(
                            Unknown::NotTaken(self.patience),
                            &mut queue, &mut in_flight, &mut refused,
                        );
                        poisoned = true;
                    }
                }
                order = self.orders.recv(), if can_take => match order {
                    None => return, // stopping
                    Some(Order::Dropped) => poisoned = false,
                    // While discarding: its clients were dropped, or are being dropped,
                    // and nobody waits for it.
                    Some(Order::Batch { done: None, .. }) if poisoned => {}
                    // A synchronous proposer heard every earlier failure itself, so its
                    // batch goes even then. It does not end the discarding of the others:
                    // batches handed over after it, before the sequencer has dropped
                    // their clients, would land without the ones discarded before it (the
                    // simulation, which mixes the two, found such gaps).
                    Some(Order::Batch { props, done }) => cut(props, done, &mut queue),
                },
            }
        }
    }

    /// Sends `unit` on the route (opening one if there is none, or if the leader
    /// changed and nothing is in flight). `Ok(None)`: nothing was left to send.
    async fn send(
        &mut self,
        mut unit: Unit,
        route: &mut Option<Route>,
        idle: bool,
    ) -> Result<Option<Sent>, Failure> {
        if idle {
            // Nothing in flight: the route may change (and a leader's pin is taken
            // afresh: every earlier outcome is known).
            let leader = match self.leader(unit.since).await {
                Ok(Ok(l)) => l,
                Ok(Err(f)) => return Err(Failure::Fatal(f)),
                Err(why) => return Err(Failure::Unknown(why, Some(unit))),
            };
            let keep = matches!(route, Some(Route::Remote(l)) if l.leader == leader);
            if !keep {
                *route = None;
            }
            if route.is_none() {
                *route = Some(if leader == self.me {
                    Route::Local(Submitter::new(self.raft.clone(), self.me))
                } else {
                    match self.link(leader).await {
                        Ok(l) => Route::Remote(l),
                        Err(e) => {
                            // Not sent: the next leader may take it.
                            tracing::debug!(leader, error = %e, "no connection to the leader");
                            return Ok(Some(Sent {
                                unit,
                                pending: Some(Box::pin(async move {
                                    Err(ForwardError::NotSent(e.to_string()))
                                })),
                                at: Instant::now(),
                            }));
                        }
                    }
                });
            }
        }
        let Some(route) = route.as_mut() else {
            // No connection to the leader (the first frame found none): not sent.
            return Ok(Some(Sent {
                unit,
                pending: Some(Box::pin(async {
                    Err(ForwardError::NotSent("no connection to the leader".into()))
                })),
                at: Instant::now(),
            }));
        };
        match route {
            Route::Local(s) => {
                crate::stages::mark_txns("sent", unit.props.iter().flat_map(|p| p.0.iter()));
                let pending = s.submit(unit.props.clone(), (self.wall)()).await;
                Ok(Some(Sent {
                    unit,
                    pending: Some(pending),
                    at: Instant::now(),
                }))
            }
            Route::Remote(link) => {
                // Expiries are the leader's decisions, from its own view of the
                // sessions; this member, not leading, does not hand them to the member
                // that leads now, which expires what it finds idle itself. (A leader cut
                // off from the others expires every session it stops hearing of:
                // forwarded after the heal, those expiries would close sessions that
                // were alive on the majority all along.)
                for p in &mut unit.props {
                    p.0.retain(|t| !t.is_expiry());
                }
                unit.props.retain(|p| !p.0.is_empty());
                if unit.props.is_empty() {
                    if let Some(d) = unit.done.take() {
                        let _ = d.send(Ok(0));
                    }
                    return Ok(None);
                }
                crate::stages::mark_txns("sent", unit.props.iter().flat_map(|p| p.0.iter()));
                let req = Request::Forward(unit.props.clone());
                match write_frame(&mut link.wr, &req).await {
                    Ok(()) => Ok(Some(Sent {
                        unit,
                        pending: None,
                        at: Instant::now(),
                    })),
                    Err(e) => Err(Failure::Unknown(
                        Unknown::Link {
                            leader: link.leader,
                            source: Arc::new(e),
                        },
                        Some(unit),
                    )),
                }
            }
        }
    }

    /// The leader this member knows of, waiting for one until `since` plus the
    /// patience (`Err`: none by then; `Ok(Err)`: this member's Raft failed).
    async fn leader(&self, since: Instant) -> Result<Result<u64, RaftFailure>, Unknown> {
        tokio::time::timeout_at(since + self.patience, super::known_leader(&self.raft))
            .await
            .map_err(|_| Unknown::NoLeader(self.patience))
    }

    /// A new forwarding connection to `leader`.
    async fn link(&self, leader: u64) -> Result<Link, FrameError> {
        let (rd, wr) = match &self.dial {
            Some(dial) => dial(leader).await?,
            None => {
                let Some(addr) = self.addrs.get(leader) else {
                    return Err(FrameError::Io(std::io::Error::other(format!(
                        "unknown leader {leader}"
                    ))));
                };
                let mut peer = Peer::new(self.id.clone(), leader, addr);
                let (rd, wr) = peer.open(self.patience).await?.into_split();
                (Box::new(rd) as ForwardRead, Box::new(wr) as ForwardWrite)
            }
        };
        // Buffered: one read takes in every answer that has come, not two per answer.
        let rd = tokio::io::BufReader::new(rd);
        let replies = futures_util::stream::unfold(rd, |mut rd| async move {
            let r = read_frame::<Reply>(&mut rd).await;
            Some((r, rd))
        });
        Ok(Link {
            leader,
            wr,
            replies: Box::pin(replies),
        })
    }

    /// The outcome of everything in flight and queued is unknown: report it, and drop
    /// it all (see the module's documentation).
    fn poison(
        &self,
        why: Unknown,
        queue: &mut VecDeque<Unit>,
        in_flight: &mut VecDeque<Sent>,
        refused: &mut Vec<Unit>,
    ) {
        // Not unknown if this member's Raft failed: that is what they hear.
        let failed = stopped(&self.raft);
        if failed.is_some() {
            self.failed.store(true, Ordering::SeqCst);
        }
        let why = || match &failed {
            Some(e) => CommitError::from(e.clone()),
            None => CommitError::from(why.clone()),
        };
        let _ = self.troubles.send(why());
        let units = in_flight
            .drain(..)
            .map(|s| s.unit)
            .chain(refused.drain(..))
            .chain(queue.drain(..));
        for u in units {
            if let Some(d) = u.done {
                let _ = d.send(Err(why()));
            }
        }
    }

    /// This member's Raft failed: nothing more is taken, and the server stops.
    fn fatal(
        &mut self,
        e: RaftFailure,
        queue: VecDeque<Unit>,
        in_flight: VecDeque<Sent>,
        refused: Vec<Unit>,
    ) {
        self.failed.store(true, Ordering::SeqCst);
        let _ = self.troubles.send(e.clone().into());
        let units = in_flight
            .into_iter()
            .map(|s| s.unit)
            .chain(refused)
            .chain(queue);
        for u in units {
            if let Some(d) = u.done {
                let _ = d.send(Err(e.clone().into()));
            }
        }
    }
}

/// Why a frame could not be sent.
enum Failure {
    /// Its outcome (and every later one's) is unknown; the frame, if it is still here.
    Unknown(Unknown, Option<Unit>),
    /// This member's Raft failed.
    Fatal(RaftFailure),
}

/// Cuts a batch into frames, queued in order; the last frame carries `done`.
fn cut(
    mut props: Vec<Proposal>,
    done: Option<oneshot::Sender<Result<u64, CommitError>>>,
    queue: &mut VecDeque<Unit>,
) {
    let since = Instant::now();
    while props.len() > FORWARD_PROPOSALS {
        let rest = props.split_off(FORWARD_PROPOSALS);
        queue.push_back(Unit {
            props,
            since,
            done: None,
        });
        props = rest;
    }
    queue.push_back(Unit { props, since, done });
}

/// A frame's outcome as the writer sees it: the answer its route gave, or what became of
/// the connection it went on.
enum Heard {
    /// The leader's (or this member's submitter's) answer.
    Said(ForwardError),
    /// No answer: the connection failed, closed or stayed silent.
    Lost(Unknown),
}

/// The outcome of the oldest frame in flight (cancel-safe: a local one's future stays
/// in place; a reply half read stays in the link's stream).
async fn next_outcome(
    in_flight: &mut VecDeque<Sent>,
    route: &mut Option<Route>,
    patience: Duration,
) -> Result<u64, Heard> {
    let Some(front) = in_flight.front_mut() else {
        return std::future::pending().await;
    };
    if let Some(p) = front.pending.as_mut() {
        return p.as_mut().await.map_err(Heard::Said);
    }
    let Some(Route::Remote(link)) = route.as_mut() else {
        return Err(Heard::Lost(Unknown::NoLink));
    };
    let (due, leader) = (front.at + patience, link.leader);
    match tokio::time::timeout_at(due, link.replies.next()).await {
        Ok(Some(Ok(Reply::Forward(r)))) => r.map_err(Heard::Said),
        Ok(Some(Ok(_))) => Err(Heard::Lost(Unknown::UnexpectedReply { leader })),
        Ok(Some(Err(e))) => Err(Heard::Lost(Unknown::Link {
            leader,
            source: Arc::new(e),
        })),
        Ok(None) => Err(Heard::Lost(Unknown::Closed { leader })),
        Err(_) => Err(Heard::Lost(Unknown::Silent {
            leader,
            within: patience,
        })),
    }
}

/// Resolves once the member is out of touch with its quorum, and no sooner than
/// `not_before` (see `RaftCommit::out_of_touch`).
async fn out_of_touch(mut touch: watch::Receiver<bool>, not_before: Instant) {
    tokio::time::sleep_until(not_before).await;
    if touch.wait_for(|t| !*t).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves when the refused frames may go again: once this member learns of a leader
/// other than the one that refused them, or after 20 ms (the same member may lead
/// still, its connection broken for a moment, or its lease lapsed).
async fn next_leader(raft: &Raft, refused_by: Option<u64>) {
    let wait = tokio::time::sleep(Duration::from_millis(20));
    match refused_by {
        Some(l) => tokio::select! {
            () = super::other_leader(raft, l) => {}
            () = wait => {}
        },
        None => wait.await,
    }
}

/// The reason this member's Raft stopped, if it did.
fn stopped(raft: &Raft) -> Option<RaftFailure> {
    match &raft.metrics().borrow_watched().running_state {
        Err(e) => Some(RaftFailure::Fatal(e.clone())),
        Ok(()) => None,
    }
}

/// Why this member's Raft stopped, once its `write` failed (the local route's
/// [`ForwardError::Fatal`], which carries only the text: the peer wire's form). openraft
/// returns that error after the end of its core task, which records the same error in
/// the metrics as it ends, for every reason but a panic: a panic leaves them `Ok`.
fn stopped_at_write(raft: &Raft) -> RaftFailure {
    stopped(raft).unwrap_or(RaftFailure::Fatal(openraft::errors::Fatal::Panicked))
}
