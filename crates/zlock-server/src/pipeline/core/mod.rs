//! The core: this member's state-machine host. It owns the [`State`] (replicated: every
//! member applies the same Txns), the [`Router`] (member-local: connections and
//! unanswered requests), and the [`SessionTracker`] (liveness, owned by the one member
//! allowed to expire sessions: the single node today, the leader in an ensemble).
//!
//! It is not a thread of its own: it sits behind a lock that the sequencer thread takes
//! to register a batch's requests and then, as the commit stage's [`Apply`], to apply
//! the batch once durable; that a connection task takes to answer a read in place; and
//! that the ticker takes to check liveness. Frames are queued on the connections while
//! the lock is held and written to the sockets after it is released ([`with_core`],
//! [`crate::conn::out::flush`]).
//!
//! One concern per file: this one (the core, its lock, its construction), `sequence`
//! (requests in: writes become Txns, handshakes, reads in place), `apply` (committed
//! entries, a snapshot installed, the end of serving), `ensemble` (what the ensemble
//! tells the core: leadership, quorum contact, configuration, sessions active
//! elsewhere), `facts` (what admin commands and metrics read) and `tick` (liveness).

mod apply;
mod ensemble;
mod facts;
mod sequence;
mod tick;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use zlock_core::sessions::SessionTracker;
use zlock_core::{LogIndex, MemberId, Origin, SessionId, State, Txn, TxnBody, Zxid};
use zlock_proto::records::{Id, LOCK_DELAY_SERVER_DEFAULT};
use zlock_proto::Request;

use crate::clock::{now_ms, Clock};

use super::router::{Handshaking, Router, Waiting};
use super::{AdminQuery, Asker, Item};
use crate::admin;
use crate::commit::{Apply, Entry};
use crate::config::ServerConfig;
use crate::conn::ConnHandle;
use crate::snapshot::SnapshotWorker;
use crate::stats::Latency;

pub(crate) struct Core {
    state: State,
    router: Router,
    sessions: SessionTracker,
    clock: Clock,
    config: Arc<ServerConfig>,
    snapshots: SnapshotWorker,
    since_snapshot: u64,
    next_container_check: Instant,
    /// Set by [`Core::finish`]: the state is gone.
    stopped: bool,
    /// This member may expire sessions: the single node, or an ensemble's leader...
    leads: bool,
    /// ... while it is in touch with a quorum (always, on the single node).
    in_touch: bool,
    /// In an ensemble: `leader` or `follower`; `standalone` otherwise.
    mode: &'static str,
    /// In an ensemble, since when this member leads (`leader_uptime`).
    led_since: Option<Instant>,
    /// In an ensemble, the sessions active here since the last report to the leader
    /// (whose tracker is the one that expires); `None` on the single node.
    touched: Option<std::collections::HashSet<SessionId>>,
    /// In an ensemble: the ensemble as this member last saw it (for `mntr`).
    ensemble: Option<crate::commit::raft::RaftFacts>,
    /// Whether the core takes snapshots itself (the single node; in an ensemble the
    /// Raft log asks for them).
    snapshot_self: bool,
    /// A restore sequenced and not yet done (`Item::Restore`).
    restore_due: Option<(Box<State>, crate::pipeline::RestoreDone)>,
}

/// Locks the core. A panic while it was held means a bug in applying a Txn: the state
/// may be half-changed, and serving from it could acknowledge what is not in the log, so
/// the process stops (the log is the truth; a restart recovers from it).
fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    match core.lock() {
        Ok(g) => g,
        Err(_) => {
            tracing::error!("the server core was poisoned by a panic; stopping");
            std::process::abort();
        }
    }
}

/// Runs `f` under the core's lock and moves the connections it queued frames on into
/// `dirty`, for the caller to flush once the lock is released. (Moved, not swapped:
/// both lists keep their capacity, so the request path allocates no list.)
pub(crate) fn with_core<R>(
    core: &Mutex<Core>,
    dirty: &mut Vec<ConnHandle>,
    f: impl FnOnce(&mut Core) -> R,
) -> R {
    let mut c = lock(core);
    let r = f(&mut c);
    dirty.append(&mut c.router.dirty);
    r
}

/// Runs `f` under the core's lock, then writes what it queued on any connection once
/// the lock is released: the usual way in. [`with_core`] is for a caller that gathers
/// several holds' connections for one flush (the sequencer's chunks, the apply path, a
/// connection task answering in place).
pub(crate) fn locked<R>(core: &Mutex<Core>, f: impl FnOnce(&mut Core) -> R) -> R {
    let mut dirty = Vec::new();
    let r = with_core(core, &mut dirty, f);
    crate::conn::out::flush(&mut dirty);
    r
}

/// What the sequencer should do after an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Go,
    Stop,
}

impl Core {
    /// The core of a server with `config`, over `state` (recovered, or a member's
    /// empty state until its Raft restores it). On the single node it leads and is in
    /// touch from the start; an ensemble member is a follower (or an observer) until
    /// its Raft says otherwise.
    pub fn new(
        config: Arc<ServerConfig>,
        state: State,
        stats: Arc<crate::stats::Stats>,
        snapshots: SnapshotWorker,
        long_reads: super::long_read::LongReads,
    ) -> Core {
        let me = config
            .ensemble
            .as_ref()
            .map_or(STANDALONE, |e| zlock_core::MemberId(e.me));
        let standalone = config.ensemble.is_none();
        Core {
            state,
            router: Router::new(me, stats, long_reads),
            sessions: SessionTracker::new(super::TICK.as_millis() as u64),
            clock: Clock::start(),
            snapshots,
            since_snapshot: 0,
            next_container_check: Instant::now()
                + Duration::from_millis(config.container_check_interval_ms),
            stopped: false,
            leads: standalone,
            in_touch: standalone,
            mode: match &config.ensemble {
                None => "standalone",
                Some(e) if e.is_observer() => "observer",
                Some(_) => "follower",
            },
            led_since: None,
            touched: config.ensemble.as_ref().map(|_| Default::default()),
            snapshot_self: standalone,
            restore_due: None,
            ensemble: None,
            config,
        }
    }

    /// Tracks the recovered sessions: each gets a full timeout from now to reconnect,
    /// as ZooKeeper gives them.
    pub fn start_clocks(&mut self) {
        let now = self.clock.now();
        for (id, s) in &self.state.sessions {
            self.sessions.add(*id, s.timeout_ms.max(0) as u64, now);
        }
    }
}

/// The log and the state disagree: continuing would spread the damage.
fn diverged(e: zlock_core::OutOfOrder) -> ! {
    tracing::error!(error = %e, "the commit log and the state diverged; stopping");
    std::process::abort();
}

/// The commit stage's receiving end: the core, locked for each committed batch, with
/// the frames it queued written once the lock is released.
pub(crate) struct CoreApply {
    pub core: Arc<Mutex<Core>>,
    pub dirty: Vec<ConnHandle>,
}

impl crate::commit::Snapshots for CoreApply {
    fn image(&mut self) -> crate::commit::SnapshotJob {
        let image = locked(&self.core, |c| zlock_core::snapshot::Image::of(&c.state));
        Box::new(move |w| zlock_core::snapshot::write_image(&image, w))
    }

    fn install(
        &mut self,
        index: LogIndex,
        payload: &[u8],
    ) -> Result<(), crate::commit::InstallError> {
        let r = with_core(&self.core, &mut self.dirty, |c| c.install(index, payload));
        crate::conn::out::flush(&mut self.dirty);
        Ok(r?)
    }
}

/// Txns applied per hold of the core's lock: a connection task answering a read in
/// place waits for about this many (a chunk ends with the entry that reaches it, and a
/// Raft entry holds up to 256), never for a whole batch (up to 4096 Txns).
pub(crate) const APPLY_CHUNK: usize = 64;

impl Apply for CoreApply {
    fn apply(&mut self, entries: &mut dyn Iterator<Item = (LogIndex, Entry<'_>)>) {
        loop {
            let (mut txns, mut more) = (0, false);
            let mut chunk = std::iter::from_fn(|| {
                if txns >= APPLY_CHUNK {
                    more = true;
                    return None;
                }
                let e = entries.next()?;
                txns += match e.1 {
                    Entry::Txns(t) => t.len().max(1),
                    Entry::Blank => 1,
                };
                Some(e)
            });
            with_core(&self.core, &mut self.dirty, |c| c.apply_entries(&mut chunk));
            // Each chunk's replies and events leave before the next is applied.
            crate::conn::out::flush(&mut self.dirty);
            if !more {
                return;
            }
        }
    }
}

/// The member id of the single node (a standalone ZooKeeper is server 0).
pub(crate) const STANDALONE: MemberId = MemberId(0);
