//! Noticing a dead leader before the election timeout runs out.
//!
//! openraft starts an election on a follower that has heard nothing from the leader
//! for the leader's lease (`election_max`) plus a random election timeout, and a voter
//! refuses every candidate while its own lease of the leader runs. That is right for a
//! leader that is slow, paused or cut off, which no member can tell from one that is
//! gone. A leader whose *process* died can be told apart: its operating system closes
//! its connections, and its quorum port refuses new ones. So when a connection from
//! the leader breaks, this member knocks on the leader's quorum port; if the port
//! refuses, the member campaigns as soon as the lease has run out on every voter (no
//! voter heard from the leader after the connection broke, so one lease after that),
//! without the random timeout. A paused, cut-off or unreachable machine (no answer rather than a
//! refusal) is left to the timeout, as before.
//!
//! Followers take turns by id, one stagger apart, so that two of them do not split the
//! vote; the next in turn campaigns only if no election has moved the term meanwhile.
//! A member campaigns above the highest term it has seen any candidate ask for, so that
//! a candidate that failed (its log was behind, or a voter's lease had not run out)
//! does not block the next one with its own vote for itself.
//!
//! Nothing here decides anything openraft would not: a campaign is an ordinary Raft
//! election, voters still check logs and terms.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::members::Addrs;
use super::peer::{self, Identity, Knock};
use super::types::Raft;
use super::types::WatchReceiver as _;

/// What the peer server saw of the other members: when a leader last sent an append,
/// when the leader last said it was in touch with its quorum (asked by an observer),
/// the highest term a candidate asked for, and connections that broke. Updated on every
/// append and vote request, so atomics rather than a lock.
pub struct Contact {
    /// Set up when the record is made: `last_append` counts microseconds from it.
    epoch: Instant,
    /// 0: no append yet; else microseconds after `epoch`, plus one.
    last_append: AtomicU64,
    /// As `last_append`, for the leader's answers that it is in touch.
    last_confirmed: AtomicU64,
    asked_term: AtomicU64,
    broke: mpsc::Sender<u64>,
    /// How long a member may go without its quorum before it is out of touch (see
    /// `Reporter::touch`).
    pub silent: Duration,
}

impl Contact {
    /// The contact record and the receiving end of its broken-connection reports.
    pub fn new(silent: Duration) -> (Arc<Contact>, mpsc::Receiver<u64>) {
        let (broke, rx) = mpsc::channel(16);
        let c = Contact {
            epoch: Instant::now(),
            last_append: AtomicU64::new(0),
            last_confirmed: AtomicU64::new(0),
            asked_term: AtomicU64::new(0),
            broke,
            silent,
        };
        (Arc::new(c), rx)
    }

    fn stamp(&self, at: &AtomicU64) {
        let us = self.epoch.elapsed().as_micros() as u64 + 1;
        at.fetch_max(us, Ordering::Relaxed);
    }

    fn when(&self, at: &AtomicU64) -> Option<Instant> {
        match at.load(Ordering::Relaxed) {
            0 => None,
            us => Some(self.epoch + Duration::from_micros(us - 1)),
        }
    }

    /// A member sent an append (entries or a heartbeat): only a leader sends them.
    pub fn heard(&self) {
        self.stamp(&self.last_append);
    }

    /// When a leader last sent an append to this member.
    pub fn last_heard_any(&self) -> Option<Instant> {
        self.when(&self.last_append)
    }

    /// The leader answered this member (an observer) that it is in touch with its
    /// quorum.
    pub fn confirmed(&self) {
        self.stamp(&self.last_confirmed);
    }

    /// When the leader last answered that it is in touch.
    pub fn last_confirmed(&self) -> Option<Instant> {
        self.when(&self.last_confirmed)
    }

    /// A candidate asked for this member's vote in `term`.
    pub fn asked(&self, term: u64) {
        self.asked_term.fetch_max(term, Ordering::Relaxed);
    }

    /// A connection from member `from` broke (not closed by this member's shutdown).
    /// Reports are dropped while the watcher is behind: one per member is enough.
    pub fn broke(&self, from: u64) {
        let _ = self.broke.try_send(from);
    }
}

/// The watcher's settings and handles.
pub struct Watcher {
    pub raft: Raft,
    pub id: Arc<Identity>,
    /// Members' quorum addresses.
    pub addrs: Addrs,
    /// The configured voters (until the membership names them).
    pub voters: BTreeMap<u64, String>,
    pub contact: Arc<Contact>,
    /// openraft's leader lease: `election_timeout_max`.
    pub lease: Duration,
    /// The heartbeat: the knock's patience, the margin after the lease, and the turn
    /// between two followers.
    pub heartbeat: Duration,
    /// Whether this member may campaign ([`peer::Local::may_campaign`]).
    pub local: peer::Local,
}

/// The leader this member follows, and in which term, if it is a follower.
fn following(raft: &Raft) -> Option<(u64, u64)> {
    let m = raft.metrics();
    let m = m.borrow_watched();
    match (m.state, m.current_leader) {
        (openraft::ServerState::Follower, Some(l)) => Some((l, m.current_term)),
        _ => None,
    }
}

impl Watcher {
    /// Runs until `stop` turns true or the reports end.
    pub async fn run(self, mut broke: mpsc::Receiver<u64>, mut stop: watch::Receiver<bool>) {
        loop {
            let from = tokio::select! {
                f = broke.recv() => match f { Some(f) => f, None => return },
                _ = stop.wait_for(|s| *s) => return,
            };
            tokio::select! {
                () = self.on_broken(from) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            // Reports that queued while this one was handled are about the same loss.
            while broke.try_recv().is_ok() {}
        }
    }

    async fn on_broken(&self, from: u64) {
        // The leader is gone by now, so no voter hears from it after this instant.
        let gone_by = Instant::now();
        let Some((leader, term)) = following(&self.raft) else {
            return;
        };
        if leader != from || !self.gone(from).await {
            return;
        }
        // Turns among the voters (`addrs`): an observer never campaigns.
        let turn = self
            .addrs
            .voters(&self.voters)
            .into_iter()
            .filter(|&v| v != leader)
            .position(|v| v == self.id.me);
        let Some(turn) = turn else { return };
        let at = gone_by + self.lease + self.heartbeat * turn as u32;
        tokio::time::sleep_until(at).await;
        // An election (won or not) that moved this member's term, or a new leader: the
        // next in turn steps in only if nothing happened.
        if following(&self.raft) != Some((leader, term)) || !self.local.may_campaign() {
            return;
        }
        tracing::info!(
            member = self.id.me,
            leader,
            term,
            "the leader's process is gone (its quorum port refuses connections): campaigning \
             without waiting for the election timeout"
        );
        self.campaign().await;
    }

    /// Whether member `m`'s process is gone: its quorum port refuses a connection, or
    /// resets it before answering the hello. An answer, no answer in time or any other
    /// error: no.
    async fn gone(&self, m: u64) -> bool {
        let Some(addr) = self.addrs.get(m) else {
            return false;
        };
        peer::knock(self.id.clone(), m, addr, self.heartbeat).await == Knock::Gone
    }

    /// Starts an election at a term above every term a candidate asked this member
    /// for (each `elect` moves this member's term up by one).
    async fn campaign(&self) {
        let above = self.contact.asked_term.load(Ordering::Relaxed);
        let mut m = self.raft.metrics();
        for _ in 0..3 {
            let before = m.borrow_and_update().current_term;
            if self.raft.trigger().elect(false).await.is_err() {
                return;
            }
            let moved = tokio::time::timeout(
                self.heartbeat,
                super::types::wait_for(&mut m, |x| x.current_term > before),
            )
            .await;
            match moved {
                Ok(Ok(x)) if x.current_term > above => return,
                Ok(Ok(_)) => {}
                _ => return,
            }
        }
    }
}
