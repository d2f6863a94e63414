//! How a member takes part in an ensemble: the options it starts with.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{CommitError, RaftFailure};

/// How a member takes part in an ensemble.
#[derive(Debug, Clone)]
pub struct RaftOptions {
    /// This member's id (`server.N`, `myid`).
    pub me: u64,
    /// Every voting member's id and quorum (peer) address, this one included unless it
    /// is an observer.
    pub members: BTreeMap<u64, String>,
    /// Every observer's id and quorum address (this one included if it is one):
    /// members that never vote. They are Raft learners, added by whichever voter
    /// leads ([`super::observers`]); the voters' membership is `members` alone, so an observer
    /// never counts towards a quorum and never campaigns (openraft elects and counts
    /// votes and acknowledgements among voters only).
    pub observers: BTreeMap<u64, String>,
    /// Each member's `server.N` value (voters and observers), which its node in the
    /// membership holds ([`super::members`]); a member missing here gets its quorum address.
    pub specs: BTreeMap<u64, crate::config::MemberSpec>,
    /// `reconfigEnabled`: the membership changes through `reconfig`. A peer need not be
    /// in `members` or `observers` to talk (a member being added is not, in the
    /// others' configuration), and the configured observers are added only while the
    /// ensemble is first formed (after that, only `reconfig` adds and removes).
    pub reconfig: bool,
    /// A name the members share; a peer naming another one is refused.
    pub ensemble: String,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// A snapshot after this many Txns applied (ZooKeeper's snapCount); `None`: only
    /// when asked.
    pub snapshot_every: Option<u64>,
    /// Entries kept behind a snapshot (a member lagging further gets the snapshot).
    pub keep_behind_snapshot: u64,
    /// Where snapshots are written and received.
    pub snapshot_dir: PathBuf,
    /// Where the vote and the purge point are kept.
    pub meta_dir: PathBuf,
    /// How connections between members are secured (`sslQuorum`, `portUnification`).
    pub links: super::peer::Links,
}

/// Entries in one replication frame: with proposals of at most about 1 MiB
/// ([`super::types::PROPOSAL_BYTES`], or one larger Txn, within the client packet limit), a
/// frame stays well under the peer link's [`super::peer::MAX_FRAME`].
pub(super) const MAX_PAYLOAD_ENTRIES: u64 = 16;

/// Proposals in one forwarded frame, for the same reason: a follower's batch (up to
/// 4096 requests of up to a client packet each) goes to the leader in frames of at most
/// this many, one after the other.
pub(super) const FORWARD_PROPOSALS: usize = MAX_PAYLOAD_ENTRIES as usize;

impl RaftOptions {
    pub(super) fn config(&self) -> Result<openraft::Config, CommitError> {
        let c = openraft::Config {
            cluster_name: self.ensemble.clone(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_min_ms,
            election_timeout_max: self.election_max_ms,
            // Per chunk (3 MiB), so it does not grow with the snapshot.
            install_snapshot_timeout: 2_000,
            // Asked for by the state machine, which counts Txns (`snapshot_every`).
            snapshot_policy: openraft::SnapshotPolicy::Never,
            // An entry is one proposal, at most about 1 MiB of Txns: a replication
            // frame stays within the peer link's limit.
            max_payload_entries: MAX_PAYLOAD_ENTRIES,
            max_in_snapshot_log_to_keep: self.keep_behind_snapshot,
            // A member that lost its disk rejoins blank (`rejoin`): the leader must take
            // its empty log for what it is and send everything again.
            allow_log_reversion: Some(true),
            // The state machine is rebuilt from the log after a restart and the commit
            // point is not saved, so a restarted leader must win an election (which
            // brings the commit point) before it leads again.
            enable_leader_restore: Some(false),
            ..openraft::Config::default()
        };
        c.validate()
            .map_err(|e| RaftFailure::Config(Arc::new(e)).into())
    }

    /// How long a proposal waits for a leader, and for its answer.
    pub(super) fn patience(&self) -> Duration {
        Duration::from_millis(self.election_max_ms * 4 + 2_000)
    }
}
