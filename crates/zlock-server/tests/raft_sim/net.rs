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

fn one_way(w: &mut crate::world::World) -> Duration {
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

impl RaftNetworkV2<Zraft> for SimPeer {
    type SnapshotData = tokio::fs::File;

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
