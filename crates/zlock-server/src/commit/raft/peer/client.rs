//! The sending side: one connection to one member ([`Peer`]), openraft's network over
//! it ([`Network`]), and the knock that tells a dead member from a silent one.

use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::BasicNode;

use super::{
    read_frame, write_frame, FrameError, Hello, Identity, Link, Reply, Request, PROTOCOL,
    SNAPSHOT_CHUNK,
};
use crate::commit::raft::rejoin::Acks;
use crate::commit::raft::types::{LogId, Snapshot, Vote, Zraft};

/// Opens connections to other members.
#[derive(Clone)]
pub struct Network {
    pub id: Arc<Identity>,
    /// Every reply to an append or a snapshot passes here ([`Acks::took`]).
    pub acks: Arc<Acks>,
}

/// One connection to one member, opened on first use and again after a failed or
/// cancelled call.
pub struct Peer {
    id: Arc<Identity>,
    target: u64,
    addr: String,
    conn: Option<Link>,
    /// openraft's connections only: where replies are counted and fenced.
    acks: Option<Arc<Acks>>,
}

impl Peer {
    pub fn new(id: Arc<Identity>, target: u64, addr: String) -> Peer {
        Peer {
            id,
            target,
            addr,
            conn: None,
            acks: None,
        }
    }

    /// The member this connects to.
    pub fn target(&self) -> u64 {
        self.target
    }

    /// This member's id.
    pub(in crate::commit::raft) fn me(&self) -> u64 {
        self.id.me
    }

    /// Where replies to openraft's requests are counted (openraft's connections only).
    pub(in crate::commit::raft) fn acks(&self) -> Option<Arc<Acks>> {
        self.acks.clone()
    }

    /// The open connection, or a new one whose hello was answered within `ttl`; taken
    /// out of `self` until [`Peer::put_back`]. Any failure here is
    /// [`FrameError::NotSent`]: no request went out.
    pub(in crate::commit::raft) async fn open(
        &mut self,
        ttl: Duration,
    ) -> Result<Link, FrameError> {
        match tokio::time::timeout(ttl, self.connect()).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(FrameError::NotSent(Box::new(e))),
            Err(_) => Err(FrameError::NotSent(Box::new(FrameError::Io(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "member {} did not answer the hello within {ttl:?}",
                        self.target
                    ),
                ),
            )))),
        }
    }

    /// Keeps `s` for the next call: only after whole exchanges, so that no reply is
    /// still to come on it.
    pub(in crate::commit::raft) fn put_back(&mut self, s: Link) {
        self.conn = Some(s);
    }

    /// The open connection, taken out of `self` (a new one if there is none); put back
    /// by [`Peer::call`] only after a whole exchange.
    async fn connect(&mut self) -> Result<Link, FrameError> {
        if let Some(s) = self.conn.take() {
            return Ok(s);
        }
        let mut s = self.id.links.dial(&self.addr).await?;
        write_frame(
            &mut s,
            &Hello {
                ensemble: self.id.ensemble.clone(),
                from: self.id.me,
                to: self.target,
                protocol: PROTOCOL,
            },
        )
        .await?;
        match read_frame::<Reply>(&mut s).await? {
            Reply::Hello(Ok(())) => Ok(s),
            Reply::Hello(Err(why)) => Err(FrameError::Refused(why)),
            _ => Err(FrameError::Unexpected),
        }
    }

    /// Sends `req` and waits for its reply, within `ttl`. Any failure drops the
    /// connection (the next call opens a new one).
    ///
    /// # Cancellation safety
    /// Dropping the future (openraft does at its own timeout) drops the connection
    /// too: it is kept only after a whole request and reply, so a late reply is never
    /// read as the answer to the next request.
    pub async fn call(&mut self, req: &Request, ttl: Duration) -> Result<Reply, FrameError> {
        let deadline = tokio::time::Instant::now() + ttl;
        let mut s = self.open(ttl).await?;
        let r = tokio::time::timeout_at(deadline, async {
            write_frame(&mut s, req).await?;
            read_frame::<Reply>(&mut s).await
        })
        .await;
        match r {
            Ok(Ok(reply)) => {
                self.conn = Some(s);
                Ok(reply)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(FrameError::Timeout {
                target: self.target,
                ttl,
            }),
        }
    }
}

/// What knocking on a member's quorum port found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knock {
    /// It answered the hello.
    Answered,
    /// It refused the connection, or reset or closed it before answering: its process
    /// is gone (or going: a dying process's listening socket may still complete a
    /// handshake, then reset it).
    Gone,
    /// No answer in time, or another failure: it may be slow, paused or cut off.
    Silent,
}

/// Opens a connection to `target` at `addr` and waits for the answer to the hello,
/// within `ttl`.
pub async fn knock(id: Arc<Identity>, target: u64, addr: String, ttl: Duration) -> Knock {
    use std::io::ErrorKind::{ConnectionRefused, ConnectionReset, UnexpectedEof};
    let mut p = Peer::new(id, target, addr);
    match tokio::time::timeout(ttl, p.connect()).await {
        Ok(Ok(_)) => Knock::Answered,
        Ok(Err(FrameError::Io(e)))
            if matches!(
                e.kind(),
                ConnectionRefused | ConnectionReset | UnexpectedEof
            ) =>
        {
            Knock::Gone
        }
        _ => Knock::Silent,
    }
}

impl RaftNetworkFactory<Zraft> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Peer {
        let mut p = Peer::new(
            self.id.clone(),
            target,
            crate::commit::raft::members::quorum_addr(target, node),
        );
        p.acks = Some(self.acks.clone());
        p
    }
}

/// How openraft should take a failed call: `Unreachable` (the member is down: openraft
/// backs off, 500 ms) when no connection could be opened or one broke, `Timeout`
/// (retried at the next heartbeat) when a request sent on a working connection got no
/// reply in time (a slow member: backing off would stall its clients for 500 ms), and
/// `Network` (retried at once) otherwise, a connection opened but its hello not answered
/// in time included: the call after a timeout opens a new connection, and a member too
/// busy to answer within a heartbeat once (all members writing a snapshot at once, on a
/// loaded machine) must not be left without appends for 500 ms, which outlasts the
/// election timeout.
pub(in crate::commit::raft) fn rpc_err(
    e: FrameError,
    me: u64,
    action: RPCTypes,
) -> RPCError<Zraft> {
    match e {
        FrameError::Timeout { target, ttl } => RPCError::Timeout(Timeout {
            action,
            id: me,
            target,
            timeout: ttl,
        }),
        FrameError::Io(io) => RPCError::Unreachable(Unreachable::new(&io)),
        FrameError::NotSent(e) if timed_out(&e) => RPCError::Network(NetworkError::new(&*e)),
        FrameError::NotSent(e) => RPCError::Unreachable(Unreachable::new(&e)),
        other => RPCError::Network(NetworkError::new(&other)),
    }
}

/// Whether a connection attempt failed for want of an answer in time (not refused).
fn timed_out(e: &FrameError) -> bool {
    matches!(e, FrameError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}

impl Peer {
    /// One of openraft's calls: `req` within `option`'s time, its reply picked out by
    /// `pick` (`None`: another kind of reply), the member's refusal or any failure as
    /// openraft takes them ([`rpc_err`]).
    async fn rpc<T>(
        &mut self,
        req: &Request,
        option: RPCOption,
        action: RPCTypes,
        pick: impl FnOnce(Reply) -> Option<Result<T, String>>,
    ) -> Result<T, RPCError<Zraft>> {
        let me = self.id.me;
        match self.call(req, option.hard_ttl()).await.map(pick) {
            Ok(Some(Ok(r))) => Ok(r),
            Ok(Some(Err(e))) => Err(RPCError::Network(NetworkError::from_string(format!(
                "member {}: {e}",
                self.target
            )))),
            Ok(None) => Err(rpc_err(FrameError::Unexpected, me, action)),
            Err(e) => Err(rpc_err(e, me, action)),
        }
    }

    /// Whether a reply to a request sent with `ticket` by the leader of `vote` may go to
    /// openraft ([`Acks::took`]), `matching` being what it acknowledges; if not, the
    /// error it goes as instead (a reply lost).
    pub(in crate::commit::raft) fn took(
        &self,
        ticket: Option<u64>,
        vote: &Vote,
        matching: Option<LogId>,
        action: RPCTypes,
    ) -> Result<(), RPCError<Zraft>> {
        match (&self.acks, ticket) {
            (Some(acks), Some(t)) if !acks.took(self.target, t, vote, matching) => {
                Err(RPCError::Network(NetworkError::from_string(format!(
                    "member {} started blank since this {action:?} was sent: its reply \
                     is not counted",
                    self.target
                ))))
            }
            _ => Ok(()),
        }
    }

    /// Sends a snapshot file in chunks, then asks the member to install it.
    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        ttl: Duration,
    ) -> Result<SnapshotResponse<Zraft>, FrameError> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        let Snapshot {
            meta,
            snapshot: mut file,
        } = snapshot;
        file.seek(std::io::SeekFrom::Start(0)).await?;
        let mut offset = 0u64;
        loop {
            let mut data = Vec::with_capacity(SNAPSHOT_CHUNK);
            (&mut file)
                .take(SNAPSHOT_CHUNK as u64)
                .read_to_end(&mut data)
                .await?;
            if data.is_empty() && offset > 0 {
                break;
            }
            let n = data.len() as u64;
            match self
                .call(&Request::SnapshotChunk { offset, data }, ttl)
                .await?
            {
                Reply::SnapshotChunk(Ok(())) => {}
                Reply::SnapshotChunk(Err(e)) => return Err(FrameError::Refused(e)),
                _ => return Err(FrameError::Unexpected),
            }
            offset += n;
            if n < SNAPSHOT_CHUNK as u64 {
                break;
            }
        }
        match self
            .call(&Request::SnapshotDone { vote, meta }, ttl)
            .await?
        {
            Reply::Snapshot(Ok(r)) => Ok(r),
            Reply::Snapshot(Err(e)) => Err(FrameError::Refused(e)),
            _ => Err(FrameError::Unexpected),
        }
    }
}

impl RaftNetworkV2<Zraft> for Peer {
    type SnapshotData = tokio::fs::File;

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> openraft::base::BoxFuture<
        's,
        Result<
            openraft::base::BoxStream<
                's,
                Result<openraft::raft::StreamAppendResult<Zraft>, RPCError<Zraft>>,
            >,
            RPCError<Zraft>,
        >,
    >
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<Zraft>> + Send + Unpin + 'static,
    {
        self.stream_appends(input, option)
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Zraft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<Zraft>, RPCError<Zraft>> {
        use openraft::entry::RaftEntry as _;
        let (vote, last) = (
            rpc.vote,
            rpc.entries.last().map(|e| e.log_id()).or(rpc.prev_log_id),
        );
        let ticket = self.acks.as_ref().map(|a| a.ticket(self.target));
        let req = Request::Append(rpc);
        let r = self
            .rpc(&req, option, RPCTypes::AppendEntries, |r| match r {
                Reply::Append(r) => Some(r.map_err(|e| e.to_string())),
                _ => None,
            })
            .await?;
        // What openraft will take the member to hold (`into_stream_result`).
        let matching = match &r {
            AppendEntriesResponse::Success => last,
            AppendEntriesResponse::PartialSuccess(m) => *m,
            _ => None,
        };
        self.took(ticket, &vote, matching, RPCTypes::AppendEntries)?;
        Ok(r)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<Zraft>,
        option: RPCOption,
    ) -> Result<VoteResponse<Zraft>, RPCError<Zraft>> {
        let req = Request::Vote(rpc);
        self.rpc(&req, option, RPCTypes::Vote, |r| match r {
            Reply::Vote(r) => Some(r.map_err(|e| e.to_string())),
            _ => None,
        })
        .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl std::future::Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<Zraft>, StreamingError<Zraft>> {
        let ttl = option.hard_ttl();
        let ticket = self.acks.as_ref().map(|a| a.ticket(self.target));
        let last = snapshot.meta.last_log_id;
        let sent = tokio::select! {
            r = self.send_snapshot(vote, snapshot, ttl) => r,
            closed = cancel => {
                // A chunk may have been cut off mid-exchange: start over next time.
                self.conn = None;
                return Err(StreamingError::Closed(closed));
            }
        };
        let r = sent.map_err(|e| rpc_err(e, self.id.me, RPCTypes::InstallSnapshot))?;
        self.took(ticket, &vote, last, RPCTypes::InstallSnapshot)?;
        Ok(r)
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<Zraft>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<Zraft>, RPCError<Zraft>> {
        let req = Request::TransferLeader(req);
        self.rpc(&req, option, RPCTypes::TransferLeader, |r| match r {
            Reply::TransferLeader(r) => Some(r),
            _ => None,
        })
        .await
    }
}
