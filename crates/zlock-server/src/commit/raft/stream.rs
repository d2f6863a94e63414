//! Appends pipelined on the peer link: the leader keeps several AppendEntries in flight
//! to each follower, and the follower hands them to its Raft as they arrive.
//!
//! Without this, openraft sends one AppendEntries at a time to each follower and waits
//! for its reply, which comes after the follower's fsync. So the entry-less append that
//! tells a follower of a new commit waits behind the follower's own fsync, even when the
//! other follower's ack made the commit; and a follower's log writer gets one append per
//! fsync, never a group. Clients on followers (two thirds of them) see every reply and
//! every lock grant late by that much.
//!
//! The wire is unchanged: each [`Request::Append`] frame still gets one
//! [`Reply::Append`] frame, in order, on one connection. What changes is that the leader
//! writes the next request without waiting for the last reply ([`Peer::stream_appends`]),
//! and that the follower reads the next request while its Raft still works on the last
//! ([`Appends`], used by the peer server). A member that answers one request at a time
//! (an older build) is still correct to talk to: its replies come in order, later.
//!
//! Order is kept end to end: the leader writes requests in the order openraft yields
//! them on one TCP connection; the follower hands them to `Raft::stream_append` in the
//! order read, which answers in that order. Nothing is retried inside a stream: any
//! failure (a broken connection, a reply late beyond the RPC's time, an error reply)
//! ends the stream and drops the connection, so a late reply is never read as the
//! answer to a later request; openraft then starts a new stream from what the follower
//! acknowledged.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{Fatal, NetworkError, RPCError, RaftError, Timeout};
use openraft::network::{RPCOption, RPCTypes};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, StreamAppendError, StreamAppendResult,
};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::peer::{
    encode_frame, read_frame, FrameError, LinkRead, LinkWrite, Peer, Reply, Request,
};
use super::types::{LogId, Raft, Vote, Zraft};

/// How many appends the leader keeps in flight on one stream before it waits for a
/// reply. openraft sends at most `max_payload_entries` entries per append, so this
/// bounds what a follower that stopped answering can have queued.
const APPENDS_IN_FLIGHT: usize = 16;

/// How many times openraft's RPC time (`hard_ttl`, the heartbeat interval) an append's
/// reply may take before the stream is given up: four heartbeats, an election timeout
/// at zlock's default timing (`config::RaftTiming`). A reply waits for the follower's
/// fsync and for every append queued ahead of it, and on a disk shared by the members
/// (or a CPU they share) one fsync now and then takes longer than a heartbeat: with
/// one heartbeat's time, scenario B on three members on one 2-core machine gave up a
/// healthy follower's stream about every 4 s, and each time the connection was dropped,
/// opened again and the appends sent again, and the slowest lock acquires took 65 to
/// 140 ms. A follower that is really gone is still found: a broken connection fails at
/// once, a silent one after this time. Connecting (the hello) keeps one RPC time.
pub(super) const ANSWER_PATIENCE: u32 = 4;

/// How many appends a follower takes from one connection before it answers some: a
/// leader keeps at most [`APPENDS_IN_FLIGHT`]; this only bounds what a peer that does
/// not follow that rule can make the follower hold.
const APPENDS_HELD: usize = 4 * APPENDS_IN_FLIGHT;

/// One append written and not yet answered: what its reply is checked against.
struct Sent {
    /// See `rejoin::Acks::ticket`.
    ticket: Option<u64>,
    vote: Vote,
    prev: Option<LogId>,
    /// The last entry sent, or `prev` for an entry-less append.
    last: Option<LogId>,
    /// When its reply is due: sent plus [`ANSWER_PATIENCE`] times the RPC's time.
    due: tokio::time::Instant,
}

/// The last log id an append carries (its `prev_log_id` if it carries no entry): what
/// the follower holds if it takes the whole request.
fn last_of(req: &AppendEntriesRequest<Zraft>) -> Option<LogId> {
    use openraft::entry::RaftEntry as _;
    req.entries.last().map(|e| e.log_id()).or(req.prev_log_id)
}

/// Aborts the task when dropped: openraft drops a stream it no longer wants (a new
/// leader, a new payload), and the task writing its requests must stop with it.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The reading side of a stream: the replies, matched in order to what was sent.
struct Reading<'s> {
    peer: &'s mut Peer,
    /// Buffered: one read takes in every reply that has come (an append's reply is a
    /// few dozen bytes; unbuffered, each took two reads, its length and its body).
    rd: tokio::io::BufReader<LinkRead>,
    sent: mpsc::Receiver<Sent>,
    writer: AbortOnDrop<Result<LinkWrite, FrameError>>,
    patience: Duration,
}

type Answer = Result<StreamAppendResult<Zraft>, RPCError<Zraft>>;

impl Peer {
    /// openraft's `stream_append`, pipelined: a task writes each request as openraft
    /// yields it (up to [`APPENDS_IN_FLIGHT`] unanswered), and the returned stream reads
    /// the replies in order. A stream whose requests were all answered hands its
    /// connection back for the next stream (heartbeats are one-request streams); one that
    /// ends otherwise closes it.
    pub fn stream_appends<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, Answer>, RPCError<Zraft>>>
    where
        S: Stream<Item = AppendEntriesRequest<Zraft>> + Send + Unpin + 'static,
    {
        Box::pin(async move {
            let ttl = option.hard_ttl();
            let patience = ttl * ANSWER_PATIENCE;
            let me = self.me();
            let mut input = input;
            // The first request before the connection, as openraft's sequential stream
            // does: openraft sleeps out its backoff (500 ms after an unreachable member)
            // while it makes a request, so a member that refuses connections is tried
            // again only then. Connecting first, a refused connection failed the stream
            // before any request was asked for, and openraft started the next stream at
            // once: a leader whose follower was down retried thousands of times a second
            // and starved its own worker (the fault test of a blank member rejoining saw
            // it, with the pipelined stream only).
            let Some(first) = input.next().await else {
                return Ok(Box::pin(futures_util::stream::empty()) as BoxStream<'s, Answer>);
            };
            let s = match self.open(ttl).await {
                Ok(s) => s,
                Err(e) => {
                    let e = super::peer::rpc_err(e, me, RPCTypes::AppendEntries);
                    return Ok(Box::pin(futures_util::stream::once(async { Err(e) }))
                        as BoxStream<'s, Answer>);
                }
            };
            let (rd, wr) = s.into_split();
            let (tx, sent) = mpsc::channel(APPENDS_IN_FLIGHT);
            let input = futures_util::stream::iter([first]).chain(input);
            let writer = tokio::spawn(write_appends(
                input,
                wr,
                tx,
                (self.acks(), self.target()),
                patience,
            ));
            let reading = Reading {
                peer: self,
                rd: tokio::io::BufReader::new(rd),
                sent,
                writer: AbortOnDrop(writer),
                patience,
            };
            let answers = futures_util::stream::unfold(Some(reading), |r| async move {
                let (answer, more) = r?.next().await;
                Some((answer?, more))
            });
            Ok(Box::pin(answers) as BoxStream<'s, Answer>)
        })
    }
}

/// Writes each append of `input` as a frame, and tells the reader (on `tx`) what it
/// sent, until `input` ends (then the write half goes back for the next stream) or the
/// reader is gone. Holding a slot of `tx` before writing keeps at most
/// [`APPENDS_IN_FLIGHT`] unanswered.
async fn write_appends<S>(
    mut input: S,
    mut wr: LinkWrite,
    tx: mpsc::Sender<Sent>,
    (acks, target): (Option<std::sync::Arc<super::rejoin::Acks>>, u64),
    patience: Duration,
) -> Result<LinkWrite, FrameError>
where
    S: Stream<Item = AppendEntriesRequest<Zraft>> + Send + Unpin + 'static,
{
    while let Some(req) = input.next().await {
        let Ok(slot) = tx.reserve().await else {
            // The reader stopped (an error ended the stream): nothing more to send.
            return Err(FrameError::Unexpected);
        };
        let (vote, prev, last) = (req.vote, req.prev_log_id, last_of(&req));
        let ticket = acks.as_ref().map(|a| a.ticket(target));
        wr.write_all(&encode_frame(&Request::Append(req))?).await?;
        wr.flush().await?;
        if let Some(l) = last {
            crate::stages::mark_index_peer("rsent", l.index, target);
        }
        slot.send(Sent {
            ticket,
            vote,
            prev,
            last,
            due: tokio::time::Instant::now() + patience,
        });
    }
    Ok(wr)
}

impl Reading<'_> {
    /// The next answer, and the state to read the one after, if the stream goes on.
    /// `None`: the stream ended cleanly (every request answered, the input over), the
    /// connection back in the peer.
    async fn next(mut self) -> (Option<Answer>, Option<Self>) {
        let me = self.peer.me();
        let target = self.peer.target();
        let Some(sent) = self.sent.recv().await else {
            // The writer is done: the input ended, or writing failed.
            return match (&mut self.writer.0).await {
                Ok(Ok(wr)) => {
                    // Kept only if nothing beyond the last answer was read.
                    if self.rd.buffer().is_empty() {
                        if let Some(s) = self.rd.into_inner().reunite(wr) {
                            self.peer.put_back(s);
                        }
                    }
                    (None, None)
                }
                Ok(Err(e)) => (
                    Some(Err(super::peer::rpc_err(e, me, RPCTypes::AppendEntries))),
                    None,
                ),
                Err(e) => (Some(Err(RPCError::Network(NetworkError::new(&e)))), None),
            };
        };
        let reply = tokio::time::timeout_at(sent.due, read_frame::<Reply>(&mut self.rd)).await;
        let resp = match reply {
            Err(_) => {
                let timeout = Timeout {
                    action: RPCTypes::AppendEntries,
                    id: me,
                    target,
                    timeout: self.patience,
                };
                return (Some(Err(RPCError::Timeout(timeout))), None);
            }
            Ok(Err(e)) => {
                return (
                    Some(Err(super::peer::rpc_err(e, me, RPCTypes::AppendEntries))),
                    None,
                )
            }
            Ok(Ok(Reply::Append(Ok(resp)))) => {
                if let Some(l) = sent.last {
                    crate::stages::mark_index_peer("racked", l.index, target);
                }
                resp
            }
            Ok(Ok(Reply::Append(Err(e)))) => {
                let e = NetworkError::from_string(format!("member {target}: {e}"));
                return (Some(Err(RPCError::Network(e))), None);
            }
            Ok(Ok(_)) => {
                let e = FrameError::Unexpected;
                return (
                    Some(Err(super::peer::rpc_err(e, me, RPCTypes::AppendEntries))),
                    None,
                );
            }
        };
        // What openraft will take the member to hold (`into_stream_result`).
        let matching = match &resp {
            AppendEntriesResponse::Success => sent.last,
            AppendEntriesResponse::PartialSuccess(m) => *m,
            _ => None,
        };
        if let Err(e) = self
            .peer
            .took(sent.ticket, &sent.vote, matching, RPCTypes::AppendEntries)
        {
            return (Some(Err(e)), None);
        }
        if matches!(resp, AppendEntriesResponse::Conflict) && sent.prev.is_none() {
            // Nothing conflicts with an empty log: a reply that says so is not one of
            // openraft's, and openraft would panic on it.
            let e = NetworkError::from_string(format!(
                "member {target} answered a conflict at the start of the log"
            ));
            return (Some(Err(RPCError::Network(e))), None);
        }
        let whole = matches!(resp, AppendEntriesResponse::Success);
        let answer = resp.into_stream_result(sent.prev, sent.last);
        // A conflict, a higher vote, or a partial success ends the stream (openraft
        // starts again from what the member holds); requests already written after it
        // would be answered on this connection, so it is not reused.
        if whole && answer.is_ok() {
            (Some(Ok(answer)), Some(self))
        } else {
            (Some(Ok(answer)), None)
        }
    }
}

/// What `Raft::stream_append` answers, in the order of the requests.
type Answers = BoxStream<'static, Result<StreamAppendResult<Zraft>, Fatal<Zraft>>>;

/// The follower's side of one peer connection's appends: each goes to
/// `Raft::stream_append` as it is read, and its reply is written once that answers, in
/// the order the requests came.
pub struct Appends {
    raft: Raft,
    /// The requests handed to the current `stream_append`, and its answers; `None`
    /// until the first append, and again after a stream that ended on an error reply.
    stream: Option<(mpsc::UnboundedSender<AppendEntriesRequest<Zraft>>, Answers)>,
    /// The last log id of each request handed over and not yet answered, in order.
    waiting: VecDeque<Option<LogId>>,
}

/// What answering an append did to the connection.
pub enum Answered {
    /// The reply is written; go on.
    More,
    /// The reply is written, and requests handed over after it will get none (the
    /// stream that held them ended): close the connection.
    Close,
}

impl Appends {
    pub fn new(raft: Raft) -> Appends {
        Appends {
            raft,
            stream: None,
            waiting: VecDeque::new(),
        }
    }

    /// Whether requests wait for their replies.
    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether another request may be read before some are answered.
    pub fn room(&self) -> bool {
        self.waiting.len() < APPENDS_HELD
    }

    /// Hands `req` to this member's Raft.
    pub fn take(&mut self, req: AppendEntriesRequest<Zraft>) {
        let last = last_of(&req);
        if let Some(l) = last {
            crate::stages::mark_index("rread", l.index);
        }
        let (tx, _) = self.stream.get_or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let input = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|r| (r, rx))
            });
            let answers = self.raft.stream_append(input);
            (tx, Box::pin(answers) as Answers)
        });
        // The receiving end lives as long as the stream, which is held here.
        let _ = tx.send(req);
        self.waiting.push_back(last);
    }

    /// Waits for the oldest waiting request's answer (cancel-safe: its answer stays
    /// queued in the stream) and returns the reply to write. Pending forever if none
    /// waits.
    pub async fn answer(&mut self) -> (Reply, Answered) {
        let Some((_, answers)) = self.stream.as_mut() else {
            return std::future::pending().await;
        };
        if self.waiting.is_empty() {
            return std::future::pending().await;
        }
        let next = answers.next().await;
        let last = self.waiting.pop_front().flatten();
        let (reply, ended) = match next {
            Some(Ok(Ok(matching))) if matching == last => {
                (Reply::Append(Ok(AppendEntriesResponse::Success)), false)
            }
            Some(Ok(Ok(matching))) => (
                // openraft ends a stream after a partial success too.
                Reply::Append(Ok(AppendEntriesResponse::PartialSuccess(matching))),
                true,
            ),
            Some(Ok(Err(StreamAppendError::Conflict(_)))) => {
                (Reply::Append(Ok(AppendEntriesResponse::Conflict)), true)
            }
            Some(Ok(Err(StreamAppendError::HigherVote(v)))) => (
                Reply::Append(Ok(AppendEntriesResponse::HigherVote(v))),
                true,
            ),
            Some(Err(fatal)) => (Reply::Append(Err(RaftError::Fatal(fatal))), true),
            None => (Reply::Append(Err(RaftError::Fatal(Fatal::Stopped))), true),
        };
        if let Some(l) = last {
            crate::stages::mark_index("ranswered", l.index);
        }
        if !ended {
            return (reply, Answered::More);
        }
        // The next append starts a new stream; any handed to this one are lost.
        self.stream = None;
        if self.waiting.is_empty() {
            (reply, Answered::More)
        } else {
            self.waiting.clear();
            (reply, Answered::Close)
        }
    }
}
