//! The peer server: takes a peer's link (TLS or plain, as [`super::Links`] says),
//! greets the peer, then answers its requests in order (appends several
//! in flight), handing openraft's RPCs to this member's Raft and forwarded proposals to
//! its write path.

use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{Fatal, RaftError};
use openraft::raft::{VoteRequest, VoteResponse};
use tokio::net::{TcpListener, TcpStream};

use super::frame::read_body;
use super::{
    decode_body, read_frame, write_frame, ForwardError, FrameError, Hello, HelloV1, Identity, Link,
    Reply, Request, PROTOCOL,
};
use crate::commit::raft::failover::Contact;
use crate::commit::raft::log::LogView;
use crate::commit::raft::rejoin::{Acks, Gate, Standing};
use crate::commit::raft::types::WatchReceiver as _;
use crate::commit::raft::types::{Proposal, Raft, Snapshot, Vote, Zraft};

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

/// What the peer server reads of this member besides its Raft: its log's end, its
/// catch-up gate and what it counted of others' acknowledgements as leader
/// ([`crate::commit::raft::rejoin`]).
#[derive(Clone)]
pub struct Local {
    pub view: LogView,
    pub gate: Arc<Gate>,
    /// Shared with this member's [`super::Network`], which records every reply in it.
    pub acks: Arc<Acks>,
    /// Where snapshots from the leader are received.
    pub snapshot_dir: std::path::PathBuf,
    /// Which connection of each member may forward to this member, as leader.
    pub forwards: Arc<crate::commit::raft::submit::Fence>,
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
    /// ([`crate::commit::raft::rejoin::held_without`]): its vote if so. Read from openraft's metrics
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
        crate::commit::raft::rejoin::held_without(asker, &m.vote, &voters, matching, furthest)
            .then_some(m.vote)
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
            let f = crate::commit::raft::sm::receiving_file(&self.snapshot_dir)
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

/// Serves peers on `listener` until `stop` turns true (then every peer connection is
/// closed too).
pub async fn serve(
    listener: TcpListener,
    raft: Raft,
    (local, leader): (Local, Arc<crate::commit::raft::reconfig::Leader>),
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
        let raft = raft.clone();
        let local = local.clone();
        let leader = leader.clone();
        let id = id.clone();
        let hooks = hooks.clone();
        let contact = contact.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let served = tokio::select! {
                r = async {
                    // Refused (and logged) at the handshake: nothing more to say.
                    let Some(link) = id.links.accept(stream, addr).await else {
                        return Ok(());
                    };
                    serve_peer(link, raft, (&local, &leader), &id, &hooks, &contact).await
                } => r,
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
async fn greet(s: &mut Link, id: &Identity) -> Result<u64, FrameError> {
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
    mut s: Link,
    raft: Raft,
    local: (&Local, &crate::commit::raft::reconfig::Leader),
    id: &Identity,
    hooks: &Hooks,
    contact: &Contact,
) -> Result<(), FrameError> {
    let from = greet(&mut s, id).await?;
    let served = serve_requests(s, raft, local, (id, from), hooks, contact).await;
    // A broken connection may be a dead leader (see `failover`).
    contact.broke(from);
    served
}

/// Serves a peer of a member that has not started yet, being blank
/// ([`crate::commit::raft::rejoin::settle`]): the question where it stands is answered (blank), any
/// other request closes the connection, as would a member not yet started. Ends when
/// `stop` turns true.
pub async fn answer_blank(
    (s, addr): (TcpStream, std::net::SocketAddr),
    id: Arc<Identity>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let answered = async {
        let Some(mut s) = id.links.accept(s, addr).await else {
            return Ok(());
        };
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
    s: Link,
    raft: Raft,
    (local, leader): (&Local, &crate::commit::raft::reconfig::Leader),
    (id, from): (&Identity, u64),
    hooks: &Hooks,
    contact: &Contact,
) -> Result<(), FrameError> {
    use crate::commit::raft::stream::{Answered, Appends};
    use crate::commit::raft::submit::Forwards;
    use futures_util::StreamExt as _;
    // The snapshot file being received on this connection, and its length so far.
    let mut receiving: Option<(tokio::fs::File, u64)> = None;
    let (rd, mut wr) = s.into_split();
    // Buffered: one read takes in every frame that has come (a burst of appends, or of
    // forwarded batches), not two reads per frame.
    let rd = tokio::io::BufReader::new(rd);
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
    // Numbered as accepted: no await since the hello was answered, so before the peer
    // can have sent a frame on it (see `submit`'s fence).
    let admitted = local.forwards.admit(from);
    let mut forwards = Forwards::new(
        raft.clone(),
        id.me,
        Arc::new(crate::clock::now_ms),
        admitted,
    );
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
                if let Err(stale) = forwards.take(batch).await {
                    // Its member gave up on this connection and forwards over a newer
                    // one: nobody reads what this one would answer.
                    tracing::info!(
                        peer = from,
                        "closing a stale forwarding connection: {stale}"
                    );
                    return Ok(());
                }
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
            Request::LeaderInTouch => Reply::LeaderInTouch(
                crate::commit::raft::leader_in_touch(&raft, contact.silent) == Some(true),
            ),
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
    let mut s = crate::commit::raft::submit::Submitter::new(raft.clone(), me);
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
