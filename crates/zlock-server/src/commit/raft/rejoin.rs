//! A member that starts with nothing on disk: the first start of an ensemble, or a
//! member whose data directory was lost (wiped, a new disk) rejoining under its old id.
//!
//! The two look the same from inside, and the second is dangerous in Raft: the member
//! has forgotten whom it voted for and what it acknowledged. Voting again at once it can
//! grant a vote lower than one it granted before (two leaders elected with one member's
//! two votes), accept appends from a deposed leader, or help elect a member that lacks
//! entries committed with its own lost acknowledgements (openraft's FAQ: "Can I wipe out
//! the data of ONE node...": no). ZooKeeper has the same hole. So a blank member first
//! asks the others where they stand ([`Standing`]: their vote and last log id) and
//! decides ([`decide`]):
//!
//! - **No member has voted yet** (every answer blank, or holding only the initial
//!   membership): the first start. It goes on once a majority of the ensemble (itself
//!   included) has answered, as a first start needs a quorum anyway, and proposes the
//!   initial membership.
//! - **Some member has voted** (had a leader, or campaigned: an election may have made
//!   a leader this member served before it lost its disk): it is rejoining. It waits for an answer from
//!   *every* other member (a vote it granted before it lost its disk is then at most the
//!   highest vote among them: the candidate it voted for holds a vote at least as high),
//!   then takes that highest vote as its own before it starts ([`Found::Join`]'s
//!   `floor`), so openraft refuses any lower vote or any append from a lower leader, and
//!   keeps a catch-up [`Gate`]: until its log is at least as far along as the furthest
//!   log among the answers, it grants no vote to a candidate whose log is behind that
//!   one too, so it can no longer help elect a member that lacks an entry committed with
//!   its lost acknowledgements (Raft's election rule: a log at least as up to date as
//!   every log of a majority holds every committed entry).
//!
//! - **Unless the leader says the lost acknowledgements are not needed** ([`Acks`],
//!   [`Local::forget`](super::peer::Local::forget)). The gate alone leaves a gap: a
//!   member that only started late is gated too, and if the leader dies before it
//!   caught up while the leader's log held entries the third member lacks (writes in
//!   flight), the two left cannot elect until the leader returns. So a blank member also
//!   asks each member that says it leads to forget it (`peer::Request::Forget`),
//!   and joins without the gate when the member holding the highest vote `V` (the
//!   floor) answers that it leads under `V` and that what it counted of the asker's
//!   acknowledgements is held without the asker: the furthest log id `h` the asker
//!   acknowledged to it under `V` (none for a member that starts late), and a majority
//!   of the voters other than the asker, the leader included, that it knows hold an
//!   entry of `V` at or past `h` ([`held_without`]). Before answering it fences the
//!   asker: a reply of the asker to a request sent before the answer is dropped, never
//!   counted (as a lost message is), so that an acknowledgement of the member's
//!   previous life still in flight (delayed, reordered, duplicated) cannot be counted
//!   after the answer. Why every entry committed so far then survives the asker's
//!   votes, for a majority holds it and none of them is the asker:
//!   - *Entries committed under a leader lower than `V`*, whenever they were counted
//!     (a deposed leader may count an acknowledgement late): the leader of `V` holds
//!     them (Raft's leader completeness; its election did not involve the blank member,
//!     which has not started), before its first entry of `V`, so every member holding
//!     an entry of `V` holds them too. A majority without the asker does.
//!   - *Entries committed under `V`* with an acknowledgement of the asker counted before
//!     the answer are at or before `h`, held by that majority. After the answer only
//!     replies to requests sent after it count, which the member's previous life
//!     (dead before the blank one started) never received: acknowledgements of this
//!     life, kept on its disk as anyone's. The rest were acknowledged by others, as
//!     in plain Raft.
//!   - *Entries committed under a leader higher than `V`*: no such leader existed
//!     while the member's previous life ran (every other member answered after it
//!     stopped, with a vote of at most `V`, and votes only rise), so none counted it.
//!   - The answer stays true after the leader is deposed (a deposed leader counts
//!     nothing more; the fence lasts as long as the leader's process, the only one
//!     that could count a reply to a request it sent), and holds for five members
//!     alike (a majority of five without the asker is three of the other four).
//!   - A member the leader cannot vouch for (its acknowledgements are on no majority
//!     without it yet: the third member was behind when it lost its disk, and
//!     electing that member could lose acknowledged writes) is gated as before, as
//!     when the leader's membership is changing (joint) or its vote not yet shown
//!     committed. A member of an older build does not know the question and closes
//!     the connection: the asker is gated. The simulation checks the rule: with the
//!     majority condition dropped (any leader's word lifting the gate), 5 of 500
//!     seeds applied different entries at one position.
//!
//! What this does not cover: two members that lost their disks at the same time (the
//! one or two survivors may not hold every committed entry; nothing can recover that),
//! which the README asks operators not to do. A member that joined without the gate
//! has not caught up until its log reaches the leader's: lose a second disk only after
//! that.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use zlock_store::MetaFile;

use super::log::io_err;
use super::peer::{self, Identity, Local, Peer, Reply, Request};
use super::types::{LogId, Vote};

/// Where a member stands, as it answers a blank member's question.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// Its current vote; `None` while it is blank itself.
    #[serde(with = "super::wire::opt_vote")]
    pub vote: Option<Vote>,
    #[serde(with = "super::wire::opt_log_id")]
    pub last_log_id: Option<LogId>,
    /// Whether it leads now.
    pub leads: bool,
    /// The voters of its membership, as a set of ids ([`Standing::votes`]).
    pub voters: [u64; 4],
}

impl Standing {
    /// Whether member `id` is a voter in the answerer's membership.
    pub fn votes(&self, id: u64) -> bool {
        id < 256 && self.voters[(id / 64) as usize] & (1 << (id % 64)) != 0
    }

    /// Adds member `id` to [`Standing::voters`].
    pub fn add_voter(&mut self, id: u64) {
        if id < 256 {
            self.voters[(id / 64) as usize] |= 1 << (id % 64);
        }
    }

    /// Whether the ensemble may have had a leader, as far as this answer shows: a vote
    /// cast (a campaign, of term 1 or later: it may have elected a leader, and a member
    /// that voted for one and then campaigned itself shows only its own, uncommitted,
    /// vote), or a log past the initial membership entry (a leader's first entry).
    pub fn may_have_had_a_leader(&self) -> bool {
        self.vote.is_some() || self.last_log_id.is_some_and(|l| l.index > 0)
    }
}

/// What a blank member found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The ensemble's first start, nobody has voted yet: propose the initial
    /// membership.
    Bootstrap,
    /// Start from `floor` as this member's vote (not committed), propose nothing (a
    /// leader sends the membership), and grant no vote before the log has reached
    /// `target`: set when the ensemble has had a leader (a rejoin); without one (a
    /// member already campaigning at a first start) nothing was committed yet.
    Join { floor: Vote, target: Option<LogId> },
}

/// Decides, for member `me`, from the answers of the other members (by id) of an
/// ensemble of `members` voters; `None` while more answers are needed.
///
/// A member being added by `reconfig` starts blank too, with the members it is to
/// join listed beside it, some of which may be down for good (it replaces one). It is
/// a newcomer, not a member that lost its disk, when the leader (and every other
/// answer) says it is not a voter (absent, or a learner: `reconfig` adds a joining
/// member as a learner at once, maybe before it has asked), and a majority of the
/// listed members answered: its votes and acknowledgements count for no quorum of
/// the configuration in force (a learner's never do), and it becomes a voter only
/// once it has caught up (`reconfig` waits for that). It then joins without the gate.
///
/// `forgotten` holds, by member, the leader vote under which a member that leads
/// answered that this member's earlier acknowledgements are not needed ([`Acks`]): if
/// the member holding the highest vote said so under that vote, the member joins
/// without the gate.
pub fn decide(
    me: u64,
    members: usize,
    answers: &BTreeMap<u64, Standing>,
    forgotten: &BTreeMap<u64, Vote>,
) -> Option<Found> {
    let others = members.saturating_sub(1);
    let quorum = members / 2 + 1;
    // The highest vote among the answers, not committed (openraft's initial vote if
    // there is none).
    let floor = answers
        .values()
        .filter_map(|s| s.vote)
        .max_by_key(|v| v.leader_id)
        .map_or(Vote::new(0, 0), |v| {
            Vote::new(v.leader_id.term, v.leader_id.node_id)
        });
    // A leader this member may have been or acknowledged before it lost its disk makes
    // it a rejoin, not a first start (the simulation found a member that had led,
    // wiped, take a campaigning member's answer for a first start, vote without a gate,
    // and elect a member lacking what it had committed).
    if answers.values().any(Standing::may_have_had_a_leader) {
        let newcomer = answers.values().any(|s| s.leads)
            && answers.values().all(|s| !s.votes(me))
            && answers.len() + 1 >= quorum;
        if newcomer {
            return Some(Found::Join {
                floor,
                target: None,
            });
        }
        if answers.len() < others {
            return None;
        }
        // No gate if the leader of the highest vote needs none of this member's
        // earlier acknowledgements (see the module doc).
        let target = if forgiven(answers, forgotten) {
            None
        } else {
            furthest(answers)
        };
        return Some(Found::Join { floor, target });
    }
    if answers.len() + 1 < quorum {
        return None;
    }
    Some(Found::Bootstrap)
}

/// The furthest log among `answers` past the initial membership entry (index 0, which
/// holds nothing a client wrote and which each member that proposed it wrote under its
/// own id).
pub fn furthest(answers: &BTreeMap<u64, Standing>) -> Option<LogId> {
    answers
        .values()
        .filter_map(|s| s.last_log_id)
        .filter(|l| l.index > 0)
        .max()
}

/// Whether the member holding the highest vote among `answers` said, under that vote,
/// that the asker's earlier acknowledgements are not needed (`forgotten`, see
/// [`decide`]).
pub fn forgiven(answers: &BTreeMap<u64, Standing>, forgotten: &BTreeMap<u64, Vote>) -> bool {
    let Some(top) = answers
        .values()
        .filter_map(|s| s.vote)
        .max_by_key(|v| v.leader_id)
    else {
        return false;
    };
    forgotten
        .get(&top.leader_id.node_id)
        .is_some_and(|v| v.leader_id == top.leader_id && v.is_committed())
}

/// What a member, while it leads, counted of each other member's acknowledgements
/// (appends and snapshots it reported taken), and the fence that keeps the
/// acknowledgements of a member's previous life from being counted once a blank member
/// has asked to be forgotten (see the module doc). Kept by the member's network: every
/// reply passes [`Acks::took`] before openraft sees it. In memory: a leader that
/// restarts leads again only under a higher vote, for which it has counted nothing.
#[derive(Default)]
pub struct Acks {
    inner: Mutex<AckBook>,
}

#[derive(Default)]
struct AckBook {
    /// Per member: how many times it asked to be forgotten. A reply counts only if
    /// this has not changed since its request was sent.
    fences: BTreeMap<u64, u64>,
    /// The leader vote (term, member) the acknowledgements in `acked` were given
    /// under: the highest seen.
    under: Option<(u64, u64)>,
    /// Per member: the furthest log id it acknowledged under `under`.
    acked: BTreeMap<u64, LogId>,
}

/// A vote's leader, comparable whether or not the vote is committed.
fn leader_of(v: &Vote) -> (u64, u64) {
    (v.leader_id.term, v.leader_id.node_id)
}

impl Acks {
    /// Taken before a request is sent to member `to`: its reply counts only if `to` has
    /// not asked to be forgotten meanwhile.
    pub fn ticket(&self, to: u64) -> u64 {
        self.lock().fences.get(&to).copied().unwrap_or(0)
    }

    /// Whether the reply of member `to` to a request sent with `ticket` by the leader
    /// of `vote` may be handed to openraft (if not, it is dropped as a lost one would
    /// be); records `matching`, the log id it acknowledges if it acknowledges one.
    pub fn took(&self, to: u64, ticket: u64, vote: &Vote, matching: Option<LogId>) -> bool {
        let mut b = self.lock();
        if b.fences.get(&to).copied().unwrap_or(0) != ticket {
            return false;
        }
        let Some(m) = matching else {
            return true;
        };
        let under = leader_of(vote);
        if b.under.is_some_and(|u| u > under) {
            // A reply to a leadership of this member's that ended: openraft drops it.
            return true;
        }
        if b.under != Some(under) {
            b.under = Some(under);
            b.acked.clear();
        }
        let a = b.acked.entry(to).or_insert(m);
        *a = (*a).max(m);
        true
    }

    /// Fences `asker` (see [`Acks::took`]), then returns the furthest log id it
    /// acknowledged under `vote` (`Some(None)`: none), or `None` if acknowledgements
    /// under a higher vote were counted since.
    pub fn forget(&self, asker: u64, vote: &Vote) -> Option<Option<LogId>> {
        let mut b = self.lock();
        *b.fences.entry(asker).or_insert(0) += 1;
        match b.under {
            Some(u) if u > leader_of(vote) => None,
            Some(u) if u == leader_of(vote) => Some(b.acked.get(&asker).copied()),
            _ => Some(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AckBook> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether the leader of `vote` can tell member `asker` that its earlier
/// acknowledgements are not needed: a majority of `voters` other than `asker` hold, as
/// far as `matching` (the leader's replication progress, itself included) shows, an
/// entry of `vote` at or past `furthest`, the furthest log id `asker` acknowledged
/// under `vote` (see the module doc).
pub fn held_without(
    asker: u64,
    vote: &Vote,
    voters: &[u64],
    matching: &BTreeMap<u64, Option<LogId>>,
    furthest: Option<LogId>,
) -> bool {
    let holders = voters
        .iter()
        .filter(|m| **m != asker)
        .filter_map(|m| matching.get(m).copied().flatten())
        .filter(|p| {
            (p.leader_id.term, p.leader_id.node_id) == leader_of(vote) && Some(*p) >= furthest
        })
        .count();
    holders > voters.len() / 2
}

/// The catch-up gate of a rejoining member, kept in a file beside the vote so that it
/// survives a restart before the member has caught up.
pub struct Gate {
    inner: Mutex<GateFile>,
}

struct GateFile {
    file: MetaFile,
    target: Option<LogId>,
}

impl Gate {
    /// The gate saved in `meta_dir` (open if there is none).
    pub fn open(meta_dir: &Path) -> std::io::Result<Gate> {
        let file = MetaFile::open(meta_dir, "rejoin").map_err(io_err)?;
        let target = match file.load().map_err(io_err)? {
            None => None,
            Some(b) => super::codec::decode_gate(&b)?,
        };
        Ok(Gate {
            inner: Mutex::new(GateFile { file, target }),
        })
    }

    /// Closes the gate until the log reaches `target` (saved before it returns).
    pub fn close_until(&self, target: Option<LogId>) -> std::io::Result<()> {
        let mut g = self.lock();
        g.save(target)
    }

    /// The log position the member must reach before it votes, if any.
    pub fn target(&self) -> Option<LogId> {
        self.lock().target
    }

    /// Whether a vote must be refused while this member's log ends at `last`. Opens
    /// (for good) once `last` has reached the target.
    pub fn refuses(&self, last: Option<LogId>) -> bool {
        let mut g = self.lock();
        let Some(target) = g.target else {
            return false;
        };
        if last >= Some(target) {
            tracing::info!(%target, "caught up after rejoining: this member votes again");
            if let Err(e) = g.save(None) {
                // Open in memory; closed again after a restart, which only delays votes.
                tracing::warn!(error = %e, "cannot clear the rejoin gate");
                g.target = None;
            }
            return false;
        }
        true
    }

    /// Whether the vote of a candidate whose log ends at `candidate` must be refused
    /// while this member's log ends at `last`: only while the gate is closed and the
    /// candidate's log is behind the target too. A candidate whose log is at least as
    /// up to date as the target (the furthest log of every other member when this one
    /// rejoined) holds every entry committed before, whatever this member acknowledged
    /// and lost (Raft's election argument: a log at least as up to date as that of a
    /// member holding a committed entry holds it). Without this, a member that lost its
    /// disk could not help elect the one member that has the data while the others are
    /// gated or blank too (the simulation found such an ensemble stuck for good).
    pub fn refuses_candidate(&self, last: Option<LogId>, candidate: Option<&LogId>) -> bool {
        if !self.refuses(last) {
            return false;
        }
        let target = self.lock().target;
        !(target.is_some() && candidate >= target.as_ref())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateFile> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl GateFile {
    fn save(&mut self, target: Option<LogId>) -> std::io::Result<()> {
        let bytes = super::codec::encode_gate(&target)?;
        self.file.store(&bytes).map_err(io_err)?;
        self.target = target;
        Ok(())
    }
}

/// Opens `local`'s gate as soon as its log has caught up (looked at every 100 ms; a
/// vote request also opens it), so that the member says so when it happens, and then
/// lets openraft's election timer run (off while the gate is closed: a gated member
/// does not campaign, see [`Local::may_campaign`]).
pub async fn open_when_caught_up(
    local: Local,
    raft: super::types::Raft,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while !local.may_campaign() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
    raft.runtime_config().elect(true);
}

/// How often a blank member asks the others, and how long it gives each answer.
const ASK_EVERY: Duration = Duration::from_millis(200);
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// How often it says what it is waiting for.
const SAY_EVERY: Duration = Duration::from_secs(5);

/// A blank member's start: asks every other member in `addrs` where it stands, until
/// [`decide`] can tell, while answering the same question from others (as blank) on
/// `listener`; any other request is refused by closing the connection, as a member not
/// yet started would.
pub async fn settle(
    listener: &TcpListener,
    id: Arc<Identity>,
    addrs: &BTreeMap<u64, String>,
) -> Found {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Standing, Option<Vote>)>();
    let mut askers = tokio::task::JoinSet::new();
    for (&member, addr) in addrs.iter().filter(|(m, _)| **m != id.me) {
        let (mut p, tx) = (Peer::new(id.clone(), member, addr.clone()), tx.clone());
        askers.spawn(async move {
            let mut tick = tokio::time::interval(ASK_EVERY);
            loop {
                tick.tick().await;
                let Ok(Reply::Standing(s)) = p.call(&Request::Standing, ANSWER_WITHIN).await else {
                    continue;
                };
                // A member that leads is asked to forget this one's earlier
                // acknowledgements (a member that does not know the question closes the
                // connection: no answer, the gate stays).
                let forgotten = match s.leads {
                    true => match p.call(&Request::Forget, ANSWER_WITHIN).await {
                        Ok(Reply::Forgotten(v)) => v,
                        _ => None,
                    },
                    false => None,
                };
                if tx.send((member, s, forgotten)).is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let (mut answers, mut forgotten) = (BTreeMap::new(), BTreeMap::new());
    let mut say = tokio::time::interval(SAY_EVERY);
    say.tick().await;
    let found = loop {
        if let Some(f) = decide(id.me, addrs.len(), &answers, &forgotten) {
            break f;
        }
        tokio::select! {
            a = listener.accept() => {
                if let Ok(a) = a {
                    tokio::spawn(peer::answer_blank(a, id.clone(), stopped.clone()));
                }
            }
            Some((member, s, v)) = rx.recv() => {
                answers.insert(member, s);
                match v {
                    Some(v) => forgotten.insert(member, v),
                    None => forgotten.remove(&member),
                };
            }
            _ = say.tick() => {
                let missing: Vec<u64> = addrs
                    .keys()
                    .filter(|m| **m != id.me && !answers.contains_key(*m))
                    .copied()
                    .collect();
                tracing::warn!(
                    ?missing,
                    "this member's data directory is empty: waiting for the other members to \
                     answer before it joins (a member that lost its data hears from every \
                     other member first)"
                );
            }
        }
    };
    askers.abort_all();
    let _ = stop.send(true);
    match found {
        Found::Bootstrap => tracing::info!("first start of the ensemble"),
        Found::Join {
            floor,
            target: None,
        } if answers.values().any(Standing::may_have_had_a_leader)
            && forgiven(&answers, &forgotten) =>
        {
            tracing::info!(
                %floor,
                furthest = ?furthest(&answers),
                "this member's data directory is empty and the ensemble has had a leader \
                 (a member started late, or one whose data was lost): the leader needs \
                 none of what it may have acknowledged before, so it takes the highest \
                 vote among the others and votes at once; it has caught up once its log \
                 reaches the leader's"
            )
        }
        Found::Join {
            floor,
            target: None,
        } => tracing::info!(
            %floor,
            "first start of the ensemble joining a campaign, or a member new to the \
             ensemble waiting to be added"
        ),
        Found::Join {
            floor,
            target: Some(target),
        } => tracing::info!(
            %floor,
            %target,
            "this member's data directory is empty and the ensemble has had a leader (a \
             member started late, or one whose data was lost): it takes the highest vote \
             among the others and votes only once its log has caught up"
        ),
    }
    found
}

#[cfg(test)]
#[path = "rejoin_tests.rs"]
mod tests;
