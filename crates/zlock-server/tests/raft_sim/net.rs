//! The simulated network: openraft's RPCs between members in one process. Each message
//! is delivered, lost, delayed, held late (delivered after its sender has given up on
//! it, so later messages overtake it) or delivered twice, by the seed; a partition is a
//! set of cut links; a member that is down refuses connections. Replies take the same
//! chances on the way back.
//!
//! Every failure reaches openraft as a timeout (its own, around each call) or as a
//! `NetworkError` after a delay, never as `Unreachable`: that one sends openraft's
//! replication into a back-off whose `select!` is not biased, i.e. picks its branch
//! with tokio's unseeded thread-local RNG.

use std::future::Future;
use std::time::Duration;

use openraft::base::BoxStream;
use openraft::entry::RaftEntry as _;
use openraft::errors::{NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use rand::Rng;
use zlock_server::commit::raft::types::{Raft, Snapshot, Vote, Zraft};

use crate::world::{lock, Shared};

type RpcErr = RPCError<Zraft>;

/// Builds one member's connections.
pub struct SimNetwork {
    pub world: Shared,
    pub from: u64,
}

pub struct SimPeer {
    world: Shared,
    from: u64,
    to: u64,
}

impl RaftNetworkFactory<Zraft> for SimNetwork {
    type Network = SimPeer;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> SimPeer {
        SimPeer {
            world: self.world.clone(),
            from: self.from,
            to: target,
        }
    }
}

/// What happens to one message, drawn when it is sent.
struct Fate {
    refused: bool,
    request_lost: bool,
    reply_lost: bool,
    there: Duration,
    back: Duration,
    twice: Option<Duration>,
}

/// A message's one-way delay in the current weather (late now and then).
pub fn one_way(w: &mut crate::world::World) -> Duration {
    let weather = w.weather;
    let ms = if w.odds(weather.late) {
        w.rng.gen_range(40..=400)
    } else {
        w.rng.gen_range(0..=weather.max_delay)
    };
    // Sub-millisecond steps too, so that messages sent together do not all arrive together.
    Duration::from_micros(ms * 1000 + w.rng.gen_range(0..1000))
}

fn fate(world: &Shared, to: u64) -> Fate {
    let mut w = lock(world);
    let refused = !w.rafts.contains_key(&to);
    let loss = w.weather.loss;
    let dup = w.weather.dup;
    let request_lost = w.odds(loss);
    let reply_lost = w.odds(loss);
    let there = one_way(&mut w);
    let back = one_way(&mut w);
    let twice = if w.odds(dup) {
        Some(one_way(&mut w))
    } else {
        None
    };
    Fate {
        refused,
        request_lost,
        reply_lost,
        there,
        back,
        twice,
    }
}

/// Whether a message from `from` can reach `to` now; the receiver's Raft if so.
fn reach(world: &Shared, from: u64, to: u64) -> Option<Raft> {
    let w = lock(world);
    if w.cut.contains(&(from, to)) {
        return None;
    }
    w.rafts.get(&to).cloned()
}

impl SimPeer {
    /// Sends `req` to the peer through the simulated network; `handle` is the
    /// receiver's processing of it, `summary` names it in the trace.
    async fn call<Req, Resp, F, Fut>(
        &self,
        kind: &'static str,
        req: Req,
        summary: String,
        handle: F,
        ttl: Duration,
    ) -> Result<Resp, RpcErr>
    where
        Req: Clone + Send + 'static,
        Resp: std::fmt::Debug + Send + 'static,
        F: Fn(Raft, Req) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<Resp, RaftError<Zraft>>> + Send + 'static,
    {
        let (from, to) = (self.from, self.to);
        let f = fate(&self.world, to);
        if f.refused {
            // A connection refused takes a moment to learn (and an error at once would
            // let openraft retry without simulated time moving).
            tokio::time::sleep(f.there + Duration::from_millis(1)).await;
            return Err(RPCError::Network(NetworkError::from_string(format!(
                "member {to} is down"
            ))));
        }
        if let Some(later) = f.twice {
            let (world, req, handle) = (self.world.clone(), req.clone(), handle.clone());
            tokio::spawn(async move {
                tokio::time::sleep(later).await;
                if let Some(raft) = reach(&world, from, to) {
                    let r = handle(raft, req).await;
                    lock(&world).event(format!("{kind} {from}->{to} again: {r:?}"));
                }
            });
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let world = self.world.clone();
        tokio::spawn(async move {
            tokio::time::sleep(f.there).await;
            let Some(raft) = reach(&world, from, to).filter(|_| !f.request_lost) else {
                lock(&world).event(format!("{kind} {from}->{to} lost: {summary}"));
                return;
            };
            let r = handle(raft, req).await;
            lock(&world).event(format!("{kind} {from}->{to} {summary}: {r:?}"));
            tokio::time::sleep(f.back).await;
            if f.reply_lost || reach(&world, to, from).is_none() {
                lock(&world).event(format!("{kind} {to}->{from} reply lost"));
                return;
            }
            let _ = tx.send(r);
        });
        match rx.await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(RPCError::Network(NetworkError::from_string(format!(
                "member {to}: {e}"
            )))),
            // Lost: no reply within the call's time, as the server's peer link answers
            // (openraft 0.10 leaves the timeout of an append to the network; it still
            // puts its own around votes and heartbeats).
            Err(_) => {
                tokio::time::sleep(ttl).await;
                Err(RPCError::Timeout(openraft::errors::Timeout {
                    action: openraft::network::RPCTypes::AppendEntries,
                    id: from,
                    target: to,
                    timeout: ttl,
                }))
            }
        }
    }
}

/// One append written on a simulated stream and not yet answered (see
/// `SimPeer::pipelined`).
struct Sent {
    ticket: Option<u64>,
    vote: Vote,
    prev: Option<zlock_server::commit::raft::types::LogId>,
    last: Option<zlock_server::commit::raft::types::LogId>,
    due: tokio::time::Instant,
}

type Answer = Result<openraft::raft::StreamAppendResult<Zraft>, RpcErr>;

/// Aborts the task when dropped (openraft drops a stream it no longer wants).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl SimPeer {
    /// Appends as a pipelined stream over one simulated connection, as the server's
    /// peer link sends them (`commit::raft::stream`): requests arrive in the order sent,
    /// each no sooner than the one before, several in flight; the receiving member hands
    /// them to its Raft through the server's own `stream::Appends`, which answers in
    /// order; replies come back in order. A request or a reply lost, or a link cut,
    /// breaks the connection: what is in flight gets no answer, and the stream ends (a
    /// reply not in by its due time is a timeout, as on the peer link).
    async fn pipelined<S>(
        &mut self,
        mut input: S,
        option: RPCOption,
    ) -> Result<BoxStream<'static, Answer>, RpcErr>
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<Zraft>> + Send + Unpin + 'static,
    {
        use futures_util::StreamExt;
        let (world, from, to) = (self.world.clone(), self.from, self.to);
        let ttl = option.hard_ttl();
        // The first request before the connection, as the peer link does (openraft's
        // backoff is slept while it makes one).
        let Some(first) = input.next().await else {
            return Ok(Box::pin(futures_util::stream::empty()));
        };
        let f = fate(&world, to);
        let raft = reach(&world, from, to);
        let Some(raft) = raft.filter(|_| !f.refused) else {
            tokio::time::sleep(f.there + Duration::from_millis(1)).await;
            let e = RPCError::Network(NetworkError::from_string(format!(
                "member {to} is down or cut off"
            )));
            return Ok(Box::pin(futures_util::stream::once(async { Err(e) })));
        };
        let acks = lock(&world).locals.get(&from).map(|l| l.acks.clone());
        let (sent_tx, sent_rx) = tokio::sync::mpsc::unbounded_channel::<Sent>();
        let (req_tx, mut req_rx) = tokio::sync::mpsc::unbounded_channel();
        let (rep_tx, rep_rx) = tokio::sync::mpsc::unbounded_channel();
        // The sender: each request on its way, in order.
        let w = world.clone();
        let sender = tokio::spawn(async move {
            let mut input = futures_util::stream::iter([first]).chain(input);
            let mut arrive = tokio::time::Instant::now();
            while let Some(req) = input.next().await {
                let f = fate(&w, to);
                let ticket = acks.as_ref().map(|a| a.ticket(to));
                let last = req.entries.last().map(|e| e.log_id()).or(req.prev_log_id);
                let sent = Sent {
                    ticket,
                    vote: req.vote,
                    prev: req.prev_log_id,
                    last,
                    due: tokio::time::Instant::now() + ttl,
                };
                if sent_tx.send(sent).is_err() {
                    return;
                }
                arrive = arrive.max(tokio::time::Instant::now() + f.there);
                tokio::time::sleep_until(arrive).await;
                if f.request_lost || reach(&w, from, to).is_none() {
                    lock(&w).event(format!("append stream {from}->{to} broken (request lost)"));
                    return;
                }
                if req.vote.is_committed() {
                    lock(&w).saw_leader(
                        req.vote.leader_id.term,
                        req.vote.leader_id.node_id,
                        "append",
                    );
                }
                if req_tx.send(req).is_err() {
                    return;
                }
            }
        });
        // The receiving member's end of the connection.
        let w = world.clone();
        let receiver = tokio::spawn(async move {
            use zlock_server::commit::raft::stream::{Answered, Appends};
            let mut appends = Appends::new(raft);
            let mut back = tokio::time::Instant::now();
            let mut open = true;
            loop {
                let (reply, answered) = tokio::select! {
                    biased;
                    a = appends.answer() => a,
                    r = req_rx.recv(), if open => {
                        match r {
                            Some(req) => appends.take(req),
                            None => open = false,
                        }
                        continue;
                    }
                };
                if let zlock_server::commit::raft::peer::Reply::Append(Ok(
                    AppendEntriesResponse::Success
                    | AppendEntriesResponse::PartialSuccess(_)
                    | AppendEntriesResponse::Conflict,
                )) = &reply
                {
                    let mut w = lock(&w);
                    let now = w.now_ms();
                    w.heard.insert(to, now);
                }
                let f = fate(&w, from);
                back = back.max(tokio::time::Instant::now() + f.back);
                if f.reply_lost || reach(&w, to, from).is_none() {
                    lock(&w).event(format!("append stream {to}->{from} broken (reply lost)"));
                    return;
                }
                if rep_tx.send((back, reply)).is_err() {
                    return;
                }
                if matches!(answered, Answered::Close) || (!open && !appends.waiting()) {
                    return;
                }
            }
        });
        let tasks = (AbortOnDrop(sender), AbortOnDrop(receiver));
        let w = world.clone();
        let state = Some((tasks, sent_rx, rep_rx));
        let answers = futures_util::stream::unfold(state, move |st| {
            let w = w.clone();
            async move {
                let (tasks, mut sent_rx, mut rep_rx) = st?;
                let sent = sent_rx.recv().await?;
                let timeout = RPCError::Timeout(openraft::errors::Timeout {
                    action: openraft::network::RPCTypes::AppendEntries,
                    id: from,
                    target: to,
                    timeout: ttl,
                });
                let (at, reply) = match tokio::time::timeout_at(sent.due, rep_rx.recv()).await {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        // The connection broke: nothing more comes.
                        tokio::time::sleep_until(sent.due).await;
                        return Some((Err(timeout), None));
                    }
                    Err(_) => return Some((Err(timeout), None)),
                };
                if at > sent.due {
                    tokio::time::sleep_until(sent.due).await;
                    return Some((Err(timeout), None));
                }
                tokio::time::sleep_until(at).await;
                let resp = match reply {
                    zlock_server::commit::raft::peer::Reply::Append(Ok(r)) => r,
                    other => {
                        let e = NetworkError::from_string(format!("member {to}: {other:?}"));
                        return Some((Err(RPCError::Network(e)), None));
                    }
                };
                let matching = match &resp {
                    AppendEntriesResponse::Success => sent.last,
                    AppendEntriesResponse::PartialSuccess(m) => *m,
                    _ => None,
                };
                let acks = lock(&w).locals.get(&from).map(|l| l.acks.clone());
                if let (Some(acks), Some(t)) = (acks, sent.ticket) {
                    if !acks.took(to, t, &sent.vote, matching) {
                        lock(&w).event(format!(
                            "append stream {to}->{from} reply dropped: {to} asked to be \
                             forgotten since"
                        ));
                        let e =
                            NetworkError::from_string(format!("member {to} started blank since"));
                        return Some((Err(RPCError::Network(e)), None));
                    }
                }
                let whole = matches!(resp, AppendEntriesResponse::Success);
                let answer = resp.into_stream_result(sent.prev, sent.last);
                let more = (whole && answer.is_ok()).then_some((tasks, sent_rx, rep_rx));
                Some((Ok(answer), more))
            }
        });
        Ok(Box::pin(answers))
    }
}

impl RaftNetworkV2<Zraft> for SimPeer {
    type SnapshotData = tokio::fs::File;

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> openraft::base::BoxFuture<'s, Result<BoxStream<'s, Answer>, RpcErr>>
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<Zraft>> + Send + Unpin + 'static,
    {
        if !lock(&self.world).streams {
            return openraft::network::stream_append_sequential(self, input, option);
        }
        Box::pin(async move {
            let s = self.pipelined(input, option).await?;
            Ok(s as BoxStream<'s, Answer>)
        })
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Zraft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<Zraft>, RpcErr> {
        let summary = format!(
            "append vote={} prev={:?} n={} commit={:?}",
            rpc.vote,
            rpc.prev_log_id.map(|l| (l.leader_id.term, l.index)),
            rpc.entries.len(),
            rpc.leader_commit.map(|l| l.index),
        );
        let world = self.world.clone();
        let to = self.to;
        // Through the sender's acknowledgement book, as the server's network does
        // (`rejoin::Acks`): a reply to a request sent before `to` asked, blank, to be
        // forgotten is dropped.
        let acks = lock(&world).locals.get(&self.from).map(|l| l.acks.clone());
        let ticket = acks.as_ref().map(|a| a.ticket(to));
        let (vote, last) = (
            rpc.vote,
            rpc.entries.last().map(|e| e.log_id()).or(rpc.prev_log_id),
        );
        let r = self
            .call(
                "append",
                rpc,
                summary,
                move |raft: Raft, rpc: AppendEntriesRequest<Zraft>| {
                    let world = world.clone();
                    async move {
                        let vote = rpc.vote;
                        let r = raft.append_entries(rpc).await;
                        let mut w = lock(&world);
                        if vote.is_committed() {
                            w.saw_leader(vote.leader_id.term, vote.leader_id.node_id, "append");
                        }
                        if matches!(
                            r,
                            Ok(AppendEntriesResponse::Success
                                | AppendEntriesResponse::PartialSuccess(_)
                                | AppendEntriesResponse::Conflict)
                        ) {
                            let now = w.now_ms();
                            w.heard.insert(to, now);
                        }
                        r
                    }
                },
                option.hard_ttl(),
            )
            .await?;
        let matching = match &r {
            AppendEntriesResponse::Success => last,
            AppendEntriesResponse::PartialSuccess(m) => *m,
            _ => None,
        };
        if let (Some(acks), Some(t)) = (acks, ticket) {
            if !acks.took(to, t, &vote, matching) {
                lock(&self.world).event(format!(
                    "append {to}->{} reply dropped: {to} asked to be forgotten since",
                    self.from
                ));
                return Err(RPCError::Network(NetworkError::from_string(format!(
                    "member {to} started blank since"
                ))));
            }
        }
        Ok(r)
    }

    /// Snapshots are off in the simulation (see `main`): never sent.
    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<Zraft>, StreamingError<Zraft>> {
        Err(StreamingError::Network(NetworkError::from_string(
            "snapshots are not simulated",
        )))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<Zraft>,
        option: RPCOption,
    ) -> Result<VoteResponse<Zraft>, RpcErr> {
        let summary = format!(
            "vote {} last={:?}",
            rpc.vote,
            rpc.last_log_id.map(|l| l.index)
        );
        let world = self.world.clone();
        let to = self.to;
        self.call(
            "vote",
            rpc,
            summary,
            move |raft: Raft, rpc: VoteRequest<Zraft>| {
                let world = world.clone();
                async move {
                    let id = (rpc.vote.leader_id.term, rpc.vote.leader_id.node_id);
                    // Through the catch-up gate, as the peer server answers.
                    let local = lock(&world).locals.get(&to).cloned();
                    let r = match local {
                        Some(local) => local.vote(&raft, rpc).await,
                        None => raft.vote(rpc).await,
                    };
                    if r.as_ref().is_ok_and(|r| r.vote_granted) {
                        lock(&world).saw_grant(to, id.0, id.1);
                    }
                    r
                }
            },
            option.hard_ttl(),
        )
        .await
    }
}
