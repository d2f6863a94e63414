//! The leader's write path: the batches that reach it at once (its own sequencer's, and
//! those the followers forward) merged into as few Raft entries as proposals allow, with
//! at most [`DEPTH`] rounds of entries in flight.
//!
//! openraft 0.9 appends and fsyncs each entry on its own, and only then replicates it,
//! so an entry per batch costs the leader one fsync per member per round; merged, the
//! round costs one. While [`DEPTH`] rounds are in flight the next batches queue, and
//! they make the next round together: the busier the ensemble, the more each fsync
//! carries (the group commit of the standalone WAL, one level up).
//!
//! Measured (`zlock bench ops -c 32 --create-only` on a local 3-member ensemble, 2 cores):
//! with this disk's fsync (~0.2 ms) the CPUs are the limit and merging changes nothing
//! measurable; with fsync made 2 ms slower (`strace --seccomp-bpf -e
//! inject=fdatasync:delay_exit=2000`, a slower disk) it gave 2,291-2,395 creates/s
//! against 1,970-2,163 with every batch sent on at once, and lower tails.
//!
//! Order: a round's entries are handed to openraft in the order their batches arrived,
//! and openraft logs them in that order; each source sends its next batch only once the
//! previous one is answered, so its Txns keep their order.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use super::peer::ForwardError;
use super::types::{Packer, Proposal, Raft};

/// Rounds in flight: one being appended on the leader while the one before it is
/// replicated.
const DEPTH: usize = 2;

/// Most batches merged into one round (each is at most a sequencer's batch).
const ROUND_BATCHES: usize = 256;

/// What a batch's Txns came to.
type Answer = Result<u64, ForwardError>;

struct Job {
    batch: Vec<Proposal>,
    done: oneshot::Sender<Answer>,
}

/// A handle on the member's write path (cheap to clone). Works on every member; only
/// the leader's openraft takes the entries (elsewhere every batch is refused as
/// [`ForwardError::NotLeader`], untaken).
#[derive(Clone)]
pub struct Combiner {
    tx: mpsc::UnboundedSender<Job>,
}

impl Combiner {
    /// Starts the write path over `raft` (member `me`) on the current tokio runtime; it
    /// stops once every handle is dropped.
    pub fn start(raft: Raft, me: u64) -> Combiner {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(raft, me, rx));
        Combiner { tx }
    }

    /// Writes `batch` through this member's Raft, which must be the leader; returns the
    /// last entry's index once all its Txns are committed and applied here.
    /// [`ForwardError::NotLeader`] only when none of its Txns was taken (so it is safe to
    /// send it elsewhere).
    pub async fn write(&self, batch: Vec<Proposal>) -> Answer {
        let (done, answer) = oneshot::channel();
        if self.tx.send(Job { batch, done }).is_err() {
            return Err(ForwardError::Fatal("the write path stopped".into()));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(ForwardError::Fatal("the write path stopped".into())))
    }
}

async fn run(raft: Raft, me: u64, mut rx: mpsc::UnboundedReceiver<Job>) {
    let depth = Arc::new(Semaphore::new(DEPTH));
    while let Some(first) = rx.recv().await {
        let Ok(permit) = depth.clone().acquire_owned().await else {
            return;
        };
        // What queued while the rounds in flight held the permits joins this round.
        let mut jobs = vec![first];
        while jobs.len() < ROUND_BATCHES {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let (entries, spans) = merge(&mut jobs);
        let mut waits = Vec::with_capacity(entries.len());
        let mut fatal = None;
        for p in entries {
            match raft.client_write_ff(p).await {
                Ok(w) => waits.push(w),
                Err(e) => {
                    fatal = Some(e.to_string());
                    break;
                }
            }
        }
        if let Some(e) = fatal {
            for j in jobs {
                let _ = j.done.send(Err(ForwardError::Fatal(e.clone())));
            }
            continue;
        }
        tokio::spawn(async move {
            let mut outcomes = Vec::with_capacity(waits.len());
            for w in waits {
                outcomes.push(match w.await {
                    Ok(Ok(resp)) => Outcome::Logged(resp.log_id.index),
                    Ok(Err(openraft::error::ClientWriteError::ForwardToLeader(_))) => {
                        Outcome::Refused
                    }
                    Ok(Err(e)) => Outcome::Failed(e.to_string()),
                    Err(e) => Outcome::Failed(e.to_string()),
                });
            }
            drop(permit);
            for (j, span) in jobs.into_iter().zip(spans) {
                let _ = j.done.send(answer(me, span.map(|(a, b)| &outcomes[a..=b])));
            }
        });
    }
}

/// What became of one entry.
enum Outcome {
    Logged(u64),
    Refused,
    Failed(String),
}

/// Packs the jobs' Txns, in order, into entries; returns them and, for each job, the
/// range of entries its Txns went into (`None`: it had none).
fn merge(jobs: &mut [Job]) -> (Vec<Proposal>, Vec<Option<(usize, usize)>>) {
    let mut packer = Packer::default();
    let mut spans = Vec::with_capacity(jobs.len());
    for j in jobs.iter_mut() {
        let mut span: Option<(usize, usize)> = None;
        for p in std::mem::take(&mut j.batch) {
            for t in p.0 {
                let at = packer.push(t);
                span = Some(span.map_or((at, at), |(a, _)| (a, at)));
            }
        }
        spans.push(span);
    }
    (packer.finish(), spans)
}

/// A batch's answer from the outcomes of the entries that hold its Txns.
fn answer(me: u64, entries: Option<&[Outcome]>) -> Answer {
    let Some(entries) = entries else {
        return Ok(0);
    };
    let (mut last, mut refused) = (0, 0);
    for o in entries {
        match o {
            Outcome::Logged(i) => last = last.max(*i),
            Outcome::Refused => refused += 1,
            Outcome::Failed(e) => return Err(ForwardError::Failed(e.clone())),
        }
    }
    match refused {
        0 => Ok(last),
        n if n == entries.len() => Err(ForwardError::NotLeader(me)),
        _ => Err(ForwardError::Failed(format!(
            "member {me} lost the lead during a batch"
        ))),
    }
}
