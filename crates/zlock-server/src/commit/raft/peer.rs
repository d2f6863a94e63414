//! The peer protocol: openraft's RPCs and forwarded proposals between members, over
//! TCP on each member's quorum port.
//!
//! A connection starts with a [`Hello`] naming the ensemble, the sender and the member
//! it means to reach; the receiver refuses (with a reason, then closes) a stranger, a
//! member of another ensemble, or a hello meant for another id. After that each request
//! frame gets one reply frame, in order; appends may be several in flight (the leader
//! writes the next before the last is answered, see [`super::stream`]), any other
//! request is answered once the appends before it are. A frame is `u32 length (big-endian) |
//! postcard`; one longer than [`MAX_FRAME`] or one that does not decode closes the
//! connection with a log line. Nothing a peer sends can reach the tree except through
//! openraft (which checks terms and log positions) or as a forwarded proposal, which is
//! validated at apply like any other Txn.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{
    Fatal, NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Timeout,
    Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::failover::Contact;
use super::log::LogView;
use super::rejoin::{Acks, Gate, Standing};
use super::types::WatchReceiver as _;
use super::types::{LogId, Proposal, Raft, Snapshot, SnapshotMeta, Vote, Zraft};

/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 64 << 20;

/// The bytes of a snapshot file one [`Request::SnapshotChunk`] carries.
const SNAPSHOT_CHUNK: usize = 4 << 20;

/// The peer protocol's version, in every [`Hello`]. 2: openraft 0.10's messages
/// (leadership transfer, snapshots sent as a file in chunks). 3: the leader stamps the
/// time of every Txn it takes (Txn encoding 3, which a member of version 2 cannot read,
/// and whose time it would not apply the same way). Members of different versions do
/// not talk: the newer one refuses the older one's hello, naming both.
pub const PROTOCOL: u32 = 3;

/// The first frame on a connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub ensemble: String,
    pub from: u64,
    pub to: u64,
    pub protocol: u32,
}

/// The hello of version 1 (no version in it), to name what refused it.
#[derive(Debug, Deserialize)]
struct HelloV1 {
    _ensemble: String,
    from: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Append(#[serde(with = "super::wire::append")] AppendEntriesRequest<Zraft>),
    Vote(#[serde(with = "super::wire::vote_request")] VoteRequest<Zraft>),
    /// Part of a snapshot file, at `offset` (0 starts a new file on this connection).
    SnapshotChunk {
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The snapshot file sent on this connection is whole: install it.
    SnapshotDone {
        #[serde(with = "super::wire::vote")]
        vote: Vote,
        #[serde(with = "super::wire::snapshot_meta")]
        meta: SnapshotMeta,
    },
    /// The leader hands leadership to the named member (see [`super::HandOver`]).
    TransferLeader(#[serde(with = "super::wire::transfer")] TransferLeaderRequest<Zraft>),
    /// Proposals from a member that is not the leader, in order.
    Forward(Vec<Proposal>),
    /// Sessions active at the sending member since its last report (to the leader,
    /// whose session tracker expires).
    Touch(Vec<i64>),
    /// The leader's committed position, confirmed by a quorum (a read index).
    ReadIndex,
    /// Where the member stands: asked by a member starting blank ([`super::rejoin`]).
    Standing,
    /// Whether the member leads and a quorum of voters answered it within the silent
    /// time: asked of the leader by an observer every heartbeat ([`super::observers`]).
    LeaderInTouch,
    /// A client's `reconfig`, for the leader to carry out ([`super::reconfig`]).
    Reconfig(super::reconfig::Change),
    /// Asked of a member that leads by a member starting blank: forget what the asker
    /// acknowledged before, and say whether the leader needs it ([`Local::forget`]).
    /// Last of the requests, so that a member that does not know it fails to decode
    /// it and closes the connection (the asker is then gated, as before).
    Forget,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Hello(Result<(), String>),
    Append(
        #[serde(with = "super::wire::append_reply")]
        Result<AppendEntriesResponse<Zraft>, RaftError<Zraft>>,
    ),
    Vote(#[serde(with = "super::wire::vote_reply")] Result<VoteResponse<Zraft>, RaftError<Zraft>>),
    /// A chunk written (`Ok`), or why not.
    SnapshotChunk(Result<(), String>),
    Snapshot(
        #[serde(with = "super::wire::snapshot_reply")] Result<SnapshotResponse<Zraft>, String>,
    ),
    TransferLeader(
        #[serde(with = "super::wire::transfer_reply")]
        Result<TransferLeaderResponse<Zraft>, String>,
    ),
    /// The last forwarded proposal's log index once all are committed and applied on the
    /// leader, or why not (possibly committed: the caller treats it as lost).
    Forward(Result<u64, ForwardError>),
    Touch,
    ReadIndex(Result<u64, String>),
    Standing(Standing),
    LeaderInTouch(bool),
    /// The configuration made, or why none was.
    Reconfig(Result<super::members::ConfigView, super::reconfig::ReconfigError>),
    /// The leader vote under which none of the asker's earlier acknowledgements are
    /// needed; `None`: they may be (see [`super::rejoin`]).
    Forgotten(#[serde(with = "super::wire::opt_vote")] Option<Vote>),
}

/// What the peer server hands to the member's host.
#[derive(Clone)]
pub struct Hooks {
    /// Sessions another member reported active.
    pub touch: Arc<dyn Fn(Vec<i64>) + Send + Sync>,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            touch: Arc::new(|_| {}),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub enum ForwardError {
    #[error("member {0} is not the leader")]
    NotLeader(u64),
    #[error("{0}")]
    Failed(String),
    /// Never reached the member: safe to send elsewhere.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The leader's Raft stopped (its log failed).
    #[error("raft stopped: {0}")]
    Fatal(String),
}

/// What the peer server reads of this member besides its Raft: its log's end, its
/// catch-up gate and what it counted of others' acknowledgements as leader
/// ([`super::rejoin`]).
#[derive(Clone)]
pub struct Local {
    pub view: LogView,
    pub gate: Arc<Gate>,
    /// Shared with this member's [`Network`], which records every reply in it.
    pub acks: Arc<Acks>,
    /// Where snapshots from the leader are received.
    pub snapshot_dir: std::path::PathBuf,
}

impl Local {
    /// Whether this member may campaign: not while its catch-up gate is closed (its
    /// vote for itself would be a vote for a log behind the target, which the gate
    /// exists to refuse; the simulation found a rejoined member elected so, with a
    /// member that was behind too, missing committed entries).
    pub fn may_campaign(&self) -> bool {
        !self.gate.refuses(self.view.last_log_id())
    }

    /// Answers a vote request: refused without asking openraft while the catch-up gate
    /// is closed to this candidate ([`Gate::refuses_candidate`]).
    pub async fn vote(
        &self,
        raft: &Raft,
        req: VoteRequest<Zraft>,
    ) -> Result<VoteResponse<Zraft>, RaftError<Zraft>> {
        let last = self.view.last_log_id();
        if self.gate.refuses_candidate(last, req.last_log_id.as_ref()) {
            let vote = raft.metrics().borrow_watched().vote;
            return Ok(VoteResponse::new(vote, last, false));
        }
        raft.vote(req).await
    }

    /// Answers member `asker`, which starts blank: fences its replies to requests sent
    /// before now (they are dropped, never counted: they may come from its previous
    /// life), then, if this member leads, whether what it counted of the asker's
    /// acknowledgements under its vote is held by a majority without the asker
    /// ([`super::rejoin::held_without`]): its vote if so. Read from openraft's metrics
    /// before the fence (the replication progress there is a value the leader had:
    /// each member held that much), and `None` if this member counted acknowledgements
    /// under a higher vote since, or its membership is changing (joint), or its vote
    /// is not yet committed in them.
    pub fn forget(&self, raft: &Raft, asker: u64) -> Option<Vote> {
        let m = raft.metrics().borrow_watched().clone();
        let furthest = self.acks.forget(asker, &m.vote)?;
        if m.state != openraft::ServerState::Leader || !m.vote.is_committed() {
            return None;
        }
        let membership = m.membership_config.membership();
        if membership.get_joint_config().len() != 1 {
            return None;
        }
        let voters: Vec<u64> = membership.voter_ids().collect();
        let matching = m.replication.as_ref()?;
        super::rejoin::held_without(asker, &m.vote, &voters, matching, furthest).then_some(m.vote)
    }

    /// Writes a chunk of a snapshot file from the leader: one at offset 0 starts a new
    /// file (an unlinked file in the snapshot directory), any other must follow on.
    async fn receive(
        &self,
        receiving: &mut Option<(tokio::fs::File, u64)>,
        offset: u64,
        data: &[u8],
    ) -> Result<(), String> {
        use tokio::io::AsyncWriteExt;
        if offset == 0 {
            let f = super::sm::receiving_file(&self.snapshot_dir)
                .await
                .map_err(|e| e.to_string())?;
            *receiving = Some((f, 0));
        }
        match receiving {
            Some((file, len)) if *len == offset => {
                file.write_all(data).await.map_err(|e| e.to_string())?;
                *len += data.len() as u64;
                Ok(())
            }
            _ => {
                let have = receiving.take().map(|(_, len)| len);
                Err(format!(
                    "snapshot chunk at {offset}, {have:?} bytes received"
                ))
            }
        }
    }

    /// Where this member stands, for a member starting blank; `None` once its Raft has
    /// stopped (the asker then hears nothing, as from a member that is down). Asked of
    /// openraft's core, which answers once it has loaded this member's vote and log
    /// (its metrics may not show them yet just after a start: a member restarted a
    /// moment before answered "never voted", and a blank member asking then started a
    /// second history; the simulation caught it).
    pub async fn standing(&self, raft: &Raft) -> Option<Standing> {
        let (vote, voters, leads) = raft
            .with_raft_state(|st| {
                let voters: Vec<u64> = st
                    .membership_state
                    .effective()
                    .membership()
                    .voter_ids()
                    .collect();
                (
                    *st.vote_ref(),
                    voters,
                    st.server_state == openraft::ServerState::Leader,
                )
            })
            .await
            .ok()?;
        let mut s = Standing {
            // openraft's initial vote (term 0, uncommitted; 0.10 names the member
            // itself in it): none cast yet. Every real vote is of term 1 or later.
            vote: (vote.leader_id().term > 0 || vote.is_committed()).then_some(vote),
            last_log_id: self.view.last_log_id(),
            leads,
            voters: [0; 4],
        };
        for id in voters {
            s.add_voter(id);
        }
        Some(s)
    }
}

/// Who this member is and who may talk to it.
#[derive(Debug, Clone)]
pub struct Identity {
    pub ensemble: String,
    pub me: u64,
    pub members: BTreeSet<u64>,
    /// Any member id may talk, not only `members` (reconfiguration: a member being
    /// added, or one added since this member started, is not in its configuration).
    pub open: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes is larger than the {MAX_FRAME} allowed")]
    TooLarge(usize),
    #[error("frame does not decode: {0}")]
    Decode(#[from] postcard::Error),
    #[error("refused by the peer: {0}")]
    Refused(String),
    #[error("unexpected reply")]
    Unexpected,
    /// Sent (or being sent), no reply within the call's time: the member may be slow
    /// rather than gone.
    #[error("no reply from member {target} within {ttl:?}")]
    Timeout { target: u64, ttl: Duration },
    /// The request was never sent (no connection, or the hello was refused): safe to
    /// send elsewhere.
    #[error("not sent: {0}")]
    NotSent(Box<FrameError>),
}

/// `msg` as one frame: its encoding's length (u32, big-endian), then its postcard
/// encoding. The golden files (`golden_tests.rs`) pin these bytes for every message.
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let body = postcard::to_allocvec(msg)?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    Ok(buf)
}

/// A frame's body (what follows its length) decoded.
pub fn decode_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    Ok(postcard::from_bytes(body)?)
}

pub async fn write_frame<T: Serialize>(
    s: &mut (impl tokio::io::AsyncWrite + Unpin),
    msg: &T,
) -> Result<(), FrameError> {
    s.write_all(&encode_frame(msg)?).await?;
    Ok(())
}

pub async fn read_frame<T: serde::de::DeserializeOwned>(
    s: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Result<T, FrameError> {
    decode_body(&read_body(s).await?)
}

/// The next frame's body.
async fn read_body<R: tokio::io::AsyncRead + Unpin>(s: &mut R) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(FrameError::TooLarge(n));
    }
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).await?;
    Ok(body)
}

// ---- the receiving side ------------------------------------------------------------------

/// Serves peers on `listener` until `stop` turns true (then every peer connection is
/// closed too).
pub async fn serve(
    listener: TcpListener,
    raft: Raft,
    (local, leader): (Local, Arc<super::reconfig::Leader>),
    id: Arc<Identity>,
    hooks: Hooks,
    contact: Arc<Contact>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok((stream, addr)) = accepted else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let raft = raft.clone();
        let local = local.clone();
        let leader = leader.clone();
        let id = id.clone();
        let hooks = hooks.clone();
        let contact = contact.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let served = tokio::select! {
                r = serve_peer(stream, raft, (&local, &leader), &id, &hooks, &contact) => r,
                _ = stop.wait_for(|s| *s) => Ok(()),
            };
            if let Err(e) = served {
                match e {
                    FrameError::Io(ref io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {}
                    e => tracing::warn!(peer = %addr, error = %e, "closing peer connection"),
                }
            }
        });
    }
}

/// Reads the hello on `s` and answers it: the member it names if it is one that may
/// talk to this one.
async fn greet(s: &mut TcpStream, id: &Identity) -> Result<u64, FrameError> {
    let body = read_body(s).await?;
    let hello: Hello = match decode_body(&body) {
        Ok(h) => h,
        Err(e) => {
            let Ok(old) = decode_body::<HelloV1>(&body) else {
                return Err(e);
            };
            let why = format!(
                "member {} speaks peer protocol 1 (an older zlock), this member {PROTOCOL}: \
                 stop every member and start them all on one version",
                old.from
            );
            let _ = write_frame(s, &Reply::Hello(Err(why.clone()))).await;
            return Err(FrameError::Refused(why));
        }
    };
    let refusal = if hello.protocol != PROTOCOL {
        Some(format!(
            "member {} speaks peer protocol {}, this member {PROTOCOL}: start them all on \
             one version",
            hello.from, hello.protocol
        ))
    } else if hello.ensemble != id.ensemble {
        Some(format!(
            "member of ensemble {:?}, this is {:?}",
            hello.ensemble, id.ensemble
        ))
    } else if hello.to != id.me {
        Some(format!("this is member {}, not {}", id.me, hello.to))
    } else if hello.from == id.me
        || !(id.members.contains(&hello.from)
            || id.open && (1..=crate::config::MAX_MEMBER_ID).contains(&hello.from))
    {
        Some(format!("{} is not a member of this ensemble", hello.from))
    } else {
        None
    };
    if let Some(why) = refusal {
        let _ = write_frame(s, &Reply::Hello(Err(why.clone()))).await;
        return Err(FrameError::Refused(why));
    }
    write_frame(s, &Reply::Hello(Ok(()))).await?;
    Ok(hello.from)
}

async fn serve_peer(
    mut s: TcpStream,
    raft: Raft,
    local: (&Local, &super::reconfig::Leader),
    id: &Identity,
    hooks: &Hooks,
    contact: &Contact,
) -> Result<(), FrameError> {
    let from = greet(&mut s, id).await?;
    let served = serve_requests(&mut s, raft, local, (id, from), hooks, contact).await;
    // A broken connection may be a dead leader (see `failover`).
    contact.broke(from);
    served
}

/// Serves a peer of a member that has not started yet, being blank
/// ([`super::rejoin::settle`]): the question where it stands is answered (blank), any
/// other request closes the connection, as would a member not yet started. Ends when
/// `stop` turns true.
pub async fn answer_blank(
    mut s: TcpStream,
    id: Arc<Identity>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let answered = async {
        greet(&mut s, &id).await?;
        loop {
            match read_frame::<Request>(&mut s).await? {
                Request::Standing => {
                    write_frame(&mut s, &Reply::Standing(Standing::default())).await?
                }
                Request::Forget => write_frame(&mut s, &Reply::Forgotten(None)).await?,
                _ => return Ok::<(), FrameError>(()),
            }
        }
    };
    tokio::select! {
        _ = answered => {}
        _ = stop.wait_for(|s| *s) => {}
    }
}

async fn serve_requests(
    s: &mut TcpStream,
    raft: Raft,
    (local, leader): (&Local, &super::reconfig::Leader),
    (id, from): (&Identity, u64),
    hooks: &Hooks,
    contact: &Contact,
) -> Result<(), FrameError> {
    use super::stream::{Answered, Appends};
    use super::write::Forwards;
    use futures_util::StreamExt as _;
    // The snapshot file being received on this connection, and its length so far.
    let mut receiving: Option<(tokio::fs::File, u64)> = None;
    let (rd, mut wr) = s.split();
    // The requests as they come (a stream keeps a frame half read when the select below
    // takes another branch).
    let mut frames = std::pin::pin!(futures_util::stream::unfold(rd, |mut rd| async move {
        let r = read_frame::<Request>(&mut rd).await;
        Some((r, rd))
    }));
    // Appends are answered as this member's Raft takes them, while the next ones are
    // read (see `stream`).
    let mut appends = Appends::new(raft.clone());
    // Forwarded batches are taken into the log as they are read, and answered in order
    // (see `write`).
    let mut forwards = Forwards::new(raft.clone(), id.me);
    loop {
        let req = tokio::select! {
            biased;
            (reply, answered) = appends.answer() => {
                write_frame(&mut wr, &reply).await?;
                match answered {
                    Answered::More => continue,
                    Answered::Close => return Ok(()),
                }
            }
            reply = forwards.answer() => {
                write_frame(&mut wr, &reply).await?;
                continue;
            }
            next = frames.next(), if appends.room() && forwards.room() => match next {
                Some(r) => r?,
                None => return Ok(()),
            },
        };
        if !matches!(req, Request::Append(_)) {
            // Any other request is answered after the appends before it, in order.
            while appends.waiting() {
                let (reply, answered) = appends.answer().await;
                write_frame(&mut wr, &reply).await?;
                if let Answered::Close = answered {
                    return Ok(());
                }
            }
        }
        if !matches!(req, Request::Forward(_)) {
            // And after the forwarded batches before it.
            while forwards.waiting() {
                let reply = forwards.answer().await;
                write_frame(&mut wr, &reply).await?;
            }
        }
        let reply = match req {
            Request::Append(r) => {
                contact.heard();
                appends.take(r);
                continue;
            }
            Request::Forward(batch) => {
                forwards.take(batch).await;
                continue;
            }
            Request::Vote(r) => {
                contact.asked(r.vote.leader_id().term);
                Reply::Vote(local.vote(&raft, r).await)
            }
            Request::SnapshotChunk { offset, data } => {
                Reply::SnapshotChunk(local.receive(&mut receiving, offset, &data).await)
            }
            Request::SnapshotDone { vote, meta } => {
                let r = match receiving.take() {
                    None => Err("no snapshot file was sent on this connection".to_string()),
                    Some((file, _)) => raft
                        .install_full_snapshot(
                            vote,
                            Snapshot {
                                meta,
                                snapshot: file,
                            },
                        )
                        .await
                        .map_err(|e| e.to_string()),
                };
                Reply::Snapshot(r)
            }
            Request::TransferLeader(r) => Reply::TransferLeader(
                raft.handle_transfer_leader(r)
                    .await
                    .map_err(|e: Fatal<Zraft>| e.to_string()),
            ),
            Request::Touch(sessions) => {
                (hooks.touch)(sessions);
                Reply::Touch
            }
            Request::ReadIndex => Reply::ReadIndex(read_index(&raft).await),
            Request::Standing => match local.standing(&raft).await {
                Some(s) => Reply::Standing(s),
                None => return Ok(()),
            },
            Request::LeaderInTouch => {
                Reply::LeaderInTouch(super::leader_in_touch(&raft, contact.silent) == Some(true))
            }
            Request::Reconfig(change) => Reply::Reconfig(leader.apply(change).await),
            Request::Forget => Reply::Forgotten(local.forget(&raft, from)),
        };
        write_frame(&mut wr, &reply).await?;
    }
}

/// Writes `batch` through this member's Raft, which must be the leader, at time
/// `now_ms` (this member's wall clock); returns the last entry's index once all are
/// committed and applied here. [`ForwardError::NotLeader`] only when no entry of the
/// batch was taken (so it is safe to send it elsewhere).
///
/// Every Txn is stamped with `now_ms` here, whichever member sequenced it: the time in
/// the log is the leader's clock alone, as on ZooKeeper, so that a follower whose clock
/// is off can neither end a lock-delay early (by forwarding a write stamped in its
/// future) nor stretch one (by stamping a holder's close in its past); and apply never
/// lets time go back (`zlock_core::State::time_ms`) when leadership moves to a member
/// whose clock is behind.
pub async fn write_as_leader(
    raft: &Raft,
    me: u64,
    batch: Vec<Proposal>,
    now_ms: i64,
) -> Result<u64, ForwardError> {
    let mut s = super::write::Submitter::new(raft.clone(), me);
    s.submit(batch, now_ms).await.await
}

/// This member's committed position once a quorum has confirmed that it still leads
/// (and it has applied through it).
pub async fn read_index(raft: &Raft) -> Result<u64, String> {
    raft.ensure_linearizable(openraft::ReadPolicy::ReadIndex)
        .await
        .map(|l| l.log_id().index)
        .map_err(|e| e.to_string())
}

// ---- the sending side ------------------------------------------------------------------

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
    conn: Option<TcpStream>,
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
    pub(super) fn me(&self) -> u64 {
        self.id.me
    }

    /// Where replies to openraft's requests are counted (openraft's connections only).
    pub(super) fn acks(&self) -> Option<Arc<Acks>> {
        self.acks.clone()
    }

    /// The open connection, or a new one whose hello was answered within `ttl`; taken
    /// out of `self` until [`Peer::put_back`]. Any failure here is
    /// [`FrameError::NotSent`]: no request went out.
    pub(super) async fn open(&mut self, ttl: Duration) -> Result<TcpStream, FrameError> {
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
    pub(super) fn put_back(&mut self, s: TcpStream) {
        self.conn = Some(s);
    }

    /// The open connection, taken out of `self` (a new one if there is none); put back
    /// by [`Peer::call`] only after a whole exchange.
    async fn connect(&mut self) -> Result<TcpStream, FrameError> {
        if let Some(s) = self.conn.take() {
            return Ok(s);
        }
        let addr: SocketAddr = tokio::net::lookup_host(&self.addr)
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{} does not resolve", self.addr)))?;
        let mut s = TcpStream::connect(addr).await?;
        let _ = s.set_nodelay(true);
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
            super::members::quorum_addr(target, node),
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
pub(super) fn rpc_err(e: FrameError, me: u64, action: RPCTypes) -> RPCError<Zraft> {
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
    pub(super) fn took(
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
