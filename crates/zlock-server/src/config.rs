//! Server configuration: defaults, `zoo.cfg`-style files, and overrides.
//!
//! With no configuration at all the server listens on 127.0.0.1:2181 and keeps its data
//! in `./zlock-data`. A `zoo.cfg` file uses ZooKeeper's key names; unknown keys are
//! logged and ignored (ZooKeeper has many that mean nothing here), except TLS keys:
//! one zlock does not implement stops the start (see [`TlsConfig`]), so that asking
//! for TLS never gets plain text.
//!
//! # Ensembles
//!
//! `server.N` lines make the server a member of an ensemble, and the file `myid` in
//! `dataDir` says which member: ZooKeeper's syntax and files (see [`MemberSpec::parse`]),
//! so a ZooKeeper ensemble's `zoo.cfg` and data directories serve unchanged. The lines
//! are in `zoo.cfg` or in the `dynamicConfigFile` it names (not both, as ZooKeeper
//! requires); the `--server` and `--myid` flags give the same without files. Because a
//! flag may change `dataDir` after the file is read, the members are first collected
//! ([`ServerConfig::declared`]) and then [`ServerConfig::resolve_ensemble`] reads `myid`
//! and builds [`ServerConfig::ensemble`]. One line is a one-member ensemble (where
//! ZooKeeper, with `standaloneEnabled` on, would run a standalone server). An
//! `:observer` line is a member that never votes (`crate::commit::raft` adds it as a
//! Raft learner); an ensemble needs at least one participant. A `myid` file without `server.N` lines is refused
//! too: its data directory belongs to an ensemble member, which run alone would accept
//! writes and grant locks its ensemble never hears of. This member's own line, if it
//! has `;[clientHost:]clientPort`, sets the client port (and address), as in ZooKeeper
//! 3.5+; a flag still overrides it.
//!
//! # Timing
//!
//! ZooKeeper counts its peers' timeouts in ticks; Raft (openraft) has a heartbeat and a
//! randomized election timeout, both derived from `tickTime`: the heartbeat is
//! `tickTime / 40`, at least 10 ms (50 ms with the sample config's `tickTime=2000`), and
//! a follower that hears nothing from the leader for 3 to 6 heartbeats (150 to 300 ms)
//! starts an election. zlock's own keys `zlock.raftHeartbeatMs` and
//! `zlock.electionTimeoutMs` (the lower bound; the upper is twice it) set them directly.
//! `initLimit` and `syncLimit` are read, checked (whole numbers of ticks, at least 1)
//! and kept for `conf`, but govern nothing: Raft's timing is the above. (In ZooKeeper,
//! `syncLimit × tickTime`, 10 s with the sample config, is how long a follower waits
//! for a silent leader; a zlock follower notices within the election timeout.) The
//! other keys that tune how ZooKeeper's peers talk (`electionAlg`, `cnxTimeout`,
//! `quorumListenOnAllIPs`, ...) are logged and ignored.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use thiserror::Error;
use zlock_store::WalOptions;

mod admin;
pub mod dynamic;
mod ensemble;
#[cfg(test)]
mod ensemble_tests;
mod metrics;
mod tls;
#[cfg(test)]
mod tls_tests;

pub use admin::AdminConfig;
pub use ensemble::{
    dynamic_config_text, parse_member_id, read_myid, DeclaredEnsemble, IdFrom, MemberSyntax,
    Origin, RaftTiming, MAX_MEMBER_ID,
};
use ensemble::{member, read_dynamic};
pub use metrics::{MetricsConfig, PROMETHEUS_CLASS, PROMETHEUS_SHORT};
pub use tls::{
    location_key, ClientAuth, Protocol, Store, StoreConfig, StoreType, StoreTypeError, TlsConfig,
    TlsSetupError, CIPHER_SUITES,
};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: invalid value {value:?} for {key}: {reason}")]
    Value {
        path: PathBuf,
        line: usize,
        key: String,
        value: String,
        reason: String,
    },
    #[error("{path}:{line}: expected key=value, got {text:?}")]
    Syntax {
        path: PathBuf,
        line: usize,
        text: String,
    },
    /// A TLS setting that depends on several keys (see [`TlsConfig`]), or a store
    /// that cannot be read; `key` is the one to change.
    #[error("{}: {key}: {problem}", .path.display())]
    Tls {
        path: PathBuf,
        key: &'static str,
        problem: TlsSetupError,
    },
    #[error("minSessionTimeout ({min} ms) is greater than maxSessionTimeout ({max} ms)")]
    SessionTimeouts { min: u64, max: u64 },
    /// A `server.N` line that does not parse.
    #[error("{at}: invalid {text:?}: {reason}")]
    Member {
        at: Origin,
        /// The line as written, trimmed.
        text: String,
        reason: MemberSyntax,
    },
    #[error("{at}: server.{id} is listed twice (first at {first})")]
    DuplicateId { id: u64, at: Origin, first: Origin },
    /// Two members (or one, twice) on one `host:port`. Hosts are compared as written.
    #[error("{}", duplicate_address(.addr, *.id, .at, *.other, .first))]
    DuplicateAddress {
        addr: String,
        id: u64,
        at: Origin,
        other: u64,
        first: Origin,
    },
    #[error(
        "{at}: server.N lines must be in the dynamicConfigFile ({}) when there is one, \
         as in ZooKeeper",
        .dynamic.display()
    )]
    ServersBesideDynamic { at: Origin, dynamic: PathBuf },
    /// Members are listed, and this server's id is not known.
    #[error(
        "this server's id is not known: the configuration lists ensemble members ({}), \
         and {} does not exist. Write this server's id into it, as for a ZooKeeper \
         member (for example: echo {} > {}), or pass --myid",
        ids(.members), .path.display(), .members.first().copied().unwrap_or(1), .path.display()
    )]
    MissingMyId { path: PathBuf, members: Vec<u64> },
    /// `--myid` with no members to be one of.
    #[error(
        "--myid {id} gives this server's id in an ensemble, but no members are listed: add \
         a --server flag (or a server.N line) for every member, this one included"
    )]
    MyIdWithoutMembers { id: u64 },
    #[error(
        "{}: expected this server's id, an integer from 1 to {MAX_MEMBER_ID}, got {text:?}",
        .path.display()
    )]
    BadMyId { path: PathBuf, text: String },
    #[error(
        "this server's id is {me} ({from}), which is not among the ensemble's members: {}",
        ids(.members)
    )]
    NotAMember {
        me: u64,
        from: IdFrom,
        members: Vec<u64>,
    },
    /// An [`EnsembleConfig`] built in code whose member ids are out of range or do not
    /// match their keys.
    #[error(
        "ensemble member {key} has id {id}: a member is kept under its own id, which is \
         from 1 to {MAX_MEMBER_ID}"
    )]
    MemberId { id: u64, key: u64 },
    #[error(
        "the ensemble has no participants: every server.N line is an observer, and \
         observers need participants to follow"
    )]
    NoParticipants,
    #[error(
        "Raft's election timeout ({}-{} ms) must be longer than its heartbeat ({} ms), and \
         its upper bound above its lower: set zlock.raftHeartbeatMs and \
         zlock.electionTimeoutMs (or tickTime, which they derive from) accordingly",
        .0.election_min_ms, .0.election_max_ms, .0.heartbeat_ms
    )]
    RaftTiming(RaftTiming),
    /// A `myid` file in `dataDir` and no members: the data directory of an ensemble
    /// member, started alone.
    #[error(
        "refusing to start: {} exists, so this data directory belongs to a member of an \
         ensemble, but the configuration lists no members (server.N lines or --server \
         flags). Run alone, the member would accept writes and grant locks that the rest \
         of its ensemble never sees. Give the ensemble's server.N lines to run it as that \
         member, or remove the myid file to run a single node.",
        .path.display()
    )]
    MyId { path: PathBuf },
    /// `declared` members that [`ServerConfig::resolve_ensemble`] never turned into
    /// `ensemble`: a caller's mistake, refused rather than run as a single node.
    #[error(
        "the configuration lists ensemble members, but this server's place among them \
         was never worked out (ServerConfig::resolve_ensemble was not called)"
    )]
    Unresolved,
}

fn ids(members: &[u64]) -> String {
    members
        .iter()
        .map(|id| format!("server.{id}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn duplicate_address(addr: &str, id: u64, at: &Origin, other: u64, first: &Origin) -> String {
    if id == other {
        format!("{at}: server.{id} uses {addr} twice: its quorum, election and client ports must differ")
    } else {
        format!(
            "{at}: server.{id} uses {addr}, as server.{other} ({first}) does: each member \
             needs its own quorum, election and client ports"
        )
    }
}

/// A `zoo.cfg` key that was read and has no effect here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredKey {
    /// 1-based line number in the file given to [`ServerConfig::apply_text`].
    pub line: usize,
    pub key: String,
    pub why: Ignored,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// Not a key zlock knows.
    Unknown,
    /// A ZooKeeper key that tunes how its ensemble members talk to each other, which
    /// zlock's Raft replication has no use for.
    EnsembleOnly,
    /// A `metricsProvider.*` key for the JVM or the Java provider's worker pool, or an
    /// `admin.*` key for Jetty (idle timeout, TLS).
    NotApplicable,
}

/// ZooKeeper keys that only tune how its ensemble members talk to each other (its own
/// election and peer protocol), which mean nothing to zlock's Raft: logged and ignored.
/// (`initLimit` and `syncLimit` are read, see the module doc.)
fn ensemble_only(key: &str) -> bool {
    matches!(
        key,
        "connectToLearnerMasterLimit"
            | "electionAlg"
            | "electionPortBindRetry"
            | "cnxTimeout"
            | "quorumListenOnAllIPs"
            | "syncEnabled"
            | "standaloneEnabled"
            | "observerMasterPort"
            | "oraclePath"
    ) || ["group.", "weight.", "quorum.", "multiAddress."]
        .iter()
        .any(|p| key.starts_with(p))
}

/// ZooKeeper reads every key starting with `server.` as an ensemble member; the rest of
/// the key is its id.
fn server_id(key: &str) -> Option<&str> {
    key.strip_prefix("server.")
}

/// One `key=value` line.
struct Entry<'a> {
    /// 1-based.
    line: usize,
    raw: &'a str,
    key: &'a str,
    value: &'a str,
}

/// The `key=value` lines of `text`, skipping blanks and `#` comments; `Err` is a line
/// that is neither, as (1-based line, raw line).
fn entries(text: &str) -> impl Iterator<Item = Result<Entry<'_>, (usize, &str)>> {
    text.lines().enumerate().filter_map(|(i, raw)| {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        Some(match line.split_once('=') {
            Some((k, v)) => Ok(Entry {
                line: i + 1,
                raw,
                key: k.trim(),
                value: v.trim(),
            }),
            None => Err((i + 1, raw)),
        })
    })
}

/// Every setting of the server. Field docs give the `zoo.cfg` key.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `tickTime`, ms: the unit of session timeouts, and what an ensemble's Raft timing
    /// derives from (see [`EnsembleConfig`]).
    pub tick_time_ms: u64,
    /// `dataDir`: snapshots (and the log unless `dataLogDir` is set).
    pub data_dir: PathBuf,
    /// `dataLogDir`: the write-ahead log, ideally on its own disk.
    pub data_log_dir: Option<PathBuf>,
    /// `clientPort`.
    pub client_port: u16,
    /// `clientPortAddress`. Loopback by default: a coordination service should not be
    /// reachable from the network until an operator says so.
    pub client_port_address: IpAddr,
    /// `maxClientCnxns`: connections per client IP; 0 = unlimited.
    pub max_client_cnxns: u32,
    /// `minSessionTimeout`, ms; default 2 × tickTime.
    pub min_session_timeout_ms: Option<u64>,
    /// `maxSessionTimeout`, ms; default 20 × tickTime.
    pub max_session_timeout_ms: Option<u64>,
    /// `4lw.commands.whitelist`; `*` allows all.
    pub four_letter_words: Vec<String>,
    /// `jute.maxbuffer`: largest accepted frame, bytes.
    pub max_packet: usize,
    /// `snapCount`: Txns between snapshots.
    pub snap_count: u64,
    /// `preAllocSize`, in KiB in the file as in ZooKeeper: how far ahead of its last
    /// record the WAL's active segment is kept zero-filled, so that each commit's fsync
    /// flushes data only (see `zlock_store::WalOptions::preallocate_bytes`). 0 = off.
    /// Default 4 MiB (ZooKeeper's is 64 MiB, for a log it never cuts at a roll).
    pub wal_preallocate_bytes: u64,
    /// `zlock.commitSpinMicros` (zlock's own key): after a batch, how long a standalone
    /// server's commit thread keeps polling for the next write (yielding the CPU between
    /// polls) before it sleeps (an ensemble member sequences on its runtime, and does
    /// not poll). Waking a sleeping thread costs 15-20 µs on a small VM, on the path of
    /// every write that arrives while the server is not busy; polling trades that for CPU
    /// time that is otherwise idle (at most this long after each batch). `None`: 100 µs
    /// with 2 or more CPUs, 0 (never poll) with one.
    pub commit_spin_us: Option<u64>,
    /// `extendedTypesEnabled`: TTL nodes.
    pub extended_types: bool,
    /// `reconfigEnabled`: whether a super user may change an ensemble's members with
    /// `reconfig` (ZooKeeper's default: off; `ReconfigDisabled` then). See
    /// `commit::raft::reconfig`.
    pub reconfig_enabled: bool,
    /// The file this configuration was read from (`--config`), if any: after a
    /// reconfiguration the members are written back beside it
    /// ([`dynamic::write_back`]), as ZooKeeper does.
    pub config_file: Option<PathBuf>,
    /// `DigestAuthenticationProvider.superDigest` (ZooKeeper's
    /// `-Dzookeeper.DigestAuthenticationProvider.superDigest`; ZooKeeper also takes an
    /// unknown `zoo.cfg` key as a `zookeeper.`-prefixed system property, so the line
    /// works there too): `user:base64(sha1(user:password))`. A session that adds
    /// digest auth matching it is a super user: every ACL lets it through, and it may
    /// `reconfig`.
    pub super_digest: Option<String>,
    /// `znode.container.checkIntervalMs`: how often empty containers and expired TTL
    /// nodes are looked for.
    pub container_check_interval_ms: u64,
    /// `zlock.lockDelayMs` (zlock's own key): the lock-delay, ms, given to a native lock
    /// request that does not ask for one (see `zlock_core::locks`). Default 0: none, as
    /// in ZooKeeper, where a dead holder's lock goes to the next waiter at once. At most
    /// `zlock_proto::records::MAX_LOCK_DELAY_MS`.
    pub lock_delay_ms: i32,
    /// Listen backlog. ZooKeeper's 50 makes the 51st of a burst of clients wait a second
    /// for a SYN retry; 1024 lets a burst of 1000 in at once.
    pub listen_backlog: u32,
    /// `globalOutstandingLimit`: requests that may wait for the sequencer, over all
    /// connections, before connections stop reading. ZooKeeper's default is 1000; zlock's
    /// is two of its batches (8192), so that group commit never runs dry for want of
    /// queued requests.
    pub global_outstanding_limit: usize,
    /// `server.N` lines and `myid`: this server is member `me` of an ensemble. `None`:
    /// the standalone server. Built by [`ServerConfig::resolve_ensemble`] from
    /// `declared`.
    pub ensemble: Option<EnsembleConfig>,
    /// The members as the file (`server.N` lines) or the flags (`--server`, `--myid`)
    /// declare them, before `myid` is read: the input of
    /// [`ServerConfig::resolve_ensemble`]. The server itself reads `ensemble`.
    pub declared: DeclaredEnsemble,
    /// `initLimit`, ticks; default 10 (`zoo_sample.cfg`'s). In ZooKeeper, how long a
    /// follower may take to connect to a new leader and catch up. zlock reads and checks
    /// it and shows it in `conf`; nothing else uses it, because Raft's timing is set by
    /// the heartbeat and election timeout (see [`EnsembleConfig`]).
    pub init_limit: u32,
    /// `syncLimit`, ticks; default 5 (`zoo_sample.cfg`'s). In ZooKeeper, how far a
    /// follower may fall behind the leader, and so how long (`syncLimit × tickTime`, 10 s
    /// with the sample config) a follower waits for a silent leader. zlock keeps it for
    /// `conf` only: a zlock follower campaigns after a silent leader's lease plus the
    /// election timeout (350-400 ms with the sample config).
    pub sync_limit: u32,
    /// `zlock.raftHeartbeatMs` (zlock's own key): the Raft heartbeat, instead of the
    /// one derived from `tickTime` (see [`EnsembleConfig`]).
    pub raft_heartbeat_ms: Option<u64>,
    /// `zlock.electionTimeoutMs` (zlock's own key): the lower bound of Raft's election
    /// timeout, instead of 3 heartbeats; the upper bound is twice it.
    pub election_timeout_ms: Option<u64>,
    /// `metricsProvider.*`: the Prometheus endpoint, off by default (see
    /// [`MetricsConfig`]).
    pub metrics: MetricsConfig,
    /// `admin.*`: the AdminServer (commands as JSON over HTTP), off by default (see
    /// [`AdminConfig`]).
    pub admin: AdminConfig,
    /// `secureClientPort` and `ssl.*`: TLS on the client port, off by default (see
    /// [`TlsConfig`]).
    pub tls: TlsConfig,
}

/// One `server.N=host:quorumPort:electionPort[:participant|:observer][;[clientHost:]clientPort]`
/// line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberSpec {
    pub id: u64,
    pub host: String,
    /// Raft's traffic (votes, log replication, forwarded writes) goes here.
    pub quorum_port: u16,
    /// Read and kept for `conf`; Raft elects over the quorum port.
    pub election_port: u16,
    pub observer: bool,
    /// `;[clientHost:]clientPort`, if given.
    pub client: Option<(Option<String>, u16)>,
}

impl MemberSpec {
    /// `host:quorumPort`, an IPv6 host in brackets (`[::1]:2888`).
    pub fn quorum_addr(&self) -> String {
        ensemble::join_host_port(&self.host, self.quorum_port)
    }
}

/// This server's place in an ensemble, and the Raft timing derived from `tickTime`.
///
/// The timing is openraft's: the leader sends a heartbeat every `heartbeat_ms`, and a
/// follower that hears nothing for the leader's lease (`election_max_ms`) plus a random
/// time between `election_min_ms` and `election_max_ms` starts an election (one whose
/// leader's process died campaigns after the lease alone, see
/// `commit::raft::failover`). From `tickTime`: `heartbeat_ms = max(10, tickTime / 40)`
/// (50 ms at ZooKeeper's sample `tickTime=2000`), `election_min_ms = 3 × heartbeat_ms`,
/// `election_max_ms = 4 × heartbeat_ms` (150-200 ms). `zlock.raftHeartbeatMs` replaces
/// the heartbeat (the election timeout still follows it), and `zlock.electionTimeoutMs`
/// the election timeout's lower bound (the upper is a third more). See [`RaftTiming::derive`]; [`EnsembleConfig::validate`]
/// checks that the election timeout exceeds the heartbeat, as openraft requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsembleConfig {
    /// `myid`.
    pub me: u64,
    /// Every member, this one included, by id.
    pub members: BTreeMap<u64, MemberSpec>,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tick_time_ms: 2000,
            data_dir: PathBuf::from("zlock-data"),
            data_log_dir: None,
            client_port: 2181,
            client_port_address: IpAddr::from([127, 0, 0, 1]),
            max_client_cnxns: 60,
            min_session_timeout_ms: None,
            max_session_timeout_ms: None,
            four_letter_words: ["srvr", "ruok", "stat", "mntr", "isro"]
                .map(String::from)
                .to_vec(),
            max_packet: zlock_proto::frame::DEFAULT_MAX_PACKET,
            snap_count: 100_000,
            wal_preallocate_bytes: WalOptions::default().preallocate_bytes,
            commit_spin_us: None,
            extended_types: false,
            reconfig_enabled: false,
            config_file: None,
            super_digest: None,
            container_check_interval_ms: 60_000,
            lock_delay_ms: 0,
            listen_backlog: 1024,
            global_outstanding_limit: 8192,
            ensemble: None,
            declared: DeclaredEnsemble::default(),
            init_limit: 10,
            sync_limit: 5,
            raft_heartbeat_ms: None,
            election_timeout_ms: None,
            metrics: MetricsConfig::default(),
            admin: AdminConfig::default(),
            tls: TlsConfig::default(),
        }
    }
}

impl ServerConfig {
    pub fn min_session_timeout(&self) -> u64 {
        self.min_session_timeout_ms.unwrap_or(2 * self.tick_time_ms)
    }

    pub fn max_session_timeout(&self) -> u64 {
        self.max_session_timeout_ms
            .unwrap_or(20 * self.tick_time_ms)
    }

    /// How long the commit thread polls before it sleeps (see `commit_spin_us`).
    pub fn commit_spin(&self) -> std::time::Duration {
        let us = self.commit_spin_us.unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            if cpus >= 2 {
                100
            } else {
                0
            }
        });
        std::time::Duration::from_micros(us)
    }

    /// Where the WAL lives.
    pub fn wal_dir(&self) -> PathBuf {
        self.data_log_dir
            .as_ref()
            .unwrap_or(&self.data_dir)
            .join("wal")
    }

    /// Where snapshots live.
    pub fn snapshot_dir(&self) -> PathBuf {
        self.data_dir.join("snapshots")
    }

    pub fn four_letter_allowed(&self, cmd: &str) -> bool {
        self.four_letter_words.iter().any(|w| w == "*" || w == cmd)
    }

    /// Openraft's heartbeat and election timeout, from `tickTime` and zlock's keys
    /// (see [`EnsembleConfig`]).
    pub fn raft_timing(&self) -> RaftTiming {
        RaftTiming::derive(
            self.tick_time_ms,
            self.raft_heartbeat_ms,
            self.election_timeout_ms,
        )
    }

    /// Checks cross-field constraints, the ensemble's included.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (min, max) = (self.min_session_timeout(), self.max_session_timeout());
        if min > max {
            return Err(ConfigError::SessionTimeouts { min, max });
        }
        if let Some(e) = &self.ensemble {
            e.validate()?;
        }
        Ok(())
    }

    /// Reads a `zoo.cfg`-style file over the defaults. Its members, if any, are in
    /// `declared`: call [`ServerConfig::resolve_ensemble`] once flags are applied.
    pub fn from_file(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut cfg = ServerConfig::default();
        cfg.apply_text(path, &text)?;
        cfg.config_file = Some(path.to_owned());
        Ok(cfg)
    }

    /// Refuses a data directory that holds a `myid` file when no ensemble is configured
    /// (see the module doc), and members that were declared but never resolved.
    /// Separate from [`ServerConfig::validate`] because it looks at the disk, and must
    /// run on the final `dataDir`, after flags have overridden the file.
    pub fn check_standalone(&self) -> Result<(), ConfigError> {
        if self.ensemble.is_some() {
            return Ok(());
        }
        if !self.declared.is_empty() {
            return Err(ConfigError::Unresolved);
        }
        let path = self.data_dir.join("myid");
        // An error other than "not found" (an unreadable or non-directory dataDir) is left
        // to recovery, which reports it; only a myid that is known to exist is refused.
        if path.try_exists().unwrap_or(false) {
            return Err(ConfigError::MyId { path });
        }
        Ok(())
    }

    /// Applies `key=value` lines (comments start with `#`) and returns the keys it
    /// ignored, each also logged. `server.N` lines, here or in the `dynamicConfigFile`
    /// named here (which it reads), replace `declared.members` if there are any.
    pub fn apply_text(&mut self, path: &Path, text: &str) -> Result<Vec<IgnoredKey>, ConfigError> {
        let mut ignored = Vec::new();
        let mut members = DeclaredEnsemble::default();
        let mut first_member: Option<Origin> = None;
        let mut dynamic: Option<PathBuf> = None;
        let mut client_port_given = false;
        for entry in entries(text) {
            let Entry {
                line,
                raw,
                key: k,
                value: v,
            } = entry.map_err(|(line, raw)| ConfigError::Syntax {
                path: path.to_owned(),
                line,
                text: raw.to_owned(),
            })?;
            let bad = |reason: &str| ConfigError::Value {
                path: path.to_owned(),
                line,
                key: k.to_owned(),
                value: v.to_owned(),
                reason: reason.to_owned(),
            };
            let num = |v: &str| v.parse::<u64>().map_err(|_| bad("expected a whole number"));
            let ticks = |v: &str| {
                u32::try_from(num(v)?)
                    .ok()
                    .filter(|&t| t >= 1)
                    .ok_or_else(|| bad("expected a whole number of ticks, at least 1"))
            };
            let ms = |v: &str| {
                Some(num(v)?)
                    .filter(|&t| t >= 1)
                    .ok_or_else(|| bad("expected a whole number of ms, at least 1"))
            };
            if let Some(id) = server_id(k) {
                let at = Origin::Line {
                    path: path.to_owned(),
                    line,
                };
                first_member.get_or_insert_with(|| at.clone());
                members.add(at.clone(), member(at, raw, id, v)?)?;
                continue;
            }
            if let Some(applied) = self.tls.apply(k, v) {
                applied.map_err(|e| bad(&e))?;
                continue;
            }
            let section = match k.split_once('.') {
                Some(("metricsProvider", key)) => Some(self.metrics.apply(key, v)),
                Some(("admin", key)) => Some(self.admin.apply(key, v)),
                _ => None,
            };
            if let Some(applied) = section {
                let why = match applied.map_err(|e| bad(&e))? {
                    metrics::Applied::Set => continue,
                    metrics::Applied::NotApplicable => {
                        tracing::info!(
                            "{}:{line}: ignoring {k}: it tunes ZooKeeper's JVM, its Java \
                             metrics provider or its Jetty admin server",
                            path.display()
                        );
                        Ignored::NotApplicable
                    }
                    metrics::Applied::Unknown => {
                        tracing::warn!(
                            "{}:{line}: ignoring unknown configuration key {k}",
                            path.display()
                        );
                        Ignored::Unknown
                    }
                };
                ignored.push(IgnoredKey {
                    line,
                    key: k.to_owned(),
                    why,
                });
                continue;
            }
            match k {
                "tickTime" => self.tick_time_ms = num(v)?.max(1),
                "dataDir" => self.data_dir = PathBuf::from(v),
                "dataLogDir" => self.data_log_dir = Some(PathBuf::from(v)),
                "clientPort" => {
                    self.client_port = v.parse().map_err(|_| bad("expected a port number"))?;
                    client_port_given = true;
                }
                "clientPortAddress" => {
                    self.client_port_address =
                        v.parse().map_err(|_| bad("expected an IP address"))?
                }
                "maxClientCnxns" => {
                    self.max_client_cnxns = u32::try_from(num(v)?).map_err(|_| bad("too large"))?
                }
                "minSessionTimeout" => self.min_session_timeout_ms = Some(num(v)?),
                "maxSessionTimeout" => self.max_session_timeout_ms = Some(num(v)?),
                "4lw.commands.whitelist" => {
                    self.four_letter_words = v
                        .split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect()
                }
                "jute.maxbuffer" => {
                    self.max_packet = usize::try_from(num(v)?).map_err(|_| bad("too large"))?
                }
                "snapCount" => self.snap_count = num(v)?.max(1),
                "preAllocSize" => {
                    self.wal_preallocate_bytes =
                        num(v)?.checked_mul(1024).ok_or_else(|| bad("too large"))?
                }
                "zlock.commitSpinMicros" => self.commit_spin_us = Some(num(v)?),
                "extendedTypesEnabled" => {
                    self.extended_types = v.parse().map_err(|_| bad("expected true or false"))?
                }
                "reconfigEnabled" => {
                    self.reconfig_enabled = v.parse().map_err(|_| bad("expected true or false"))?
                }
                "DigestAuthenticationProvider.superDigest"
                | "zookeeper.DigestAuthenticationProvider.superDigest" => {
                    if !v.contains(':') {
                        return Err(bad("expected user:base64-digest (as ZooKeeper's DigestAuthenticationProvider.generateDigest prints)"));
                    }
                    self.super_digest = Some(v.to_owned())
                }
                "znode.container.checkIntervalMs" => {
                    self.container_check_interval_ms = num(v)?.max(1)
                }
                "zlock.lockDelayMs" => {
                    self.lock_delay_ms = lock_delay(num(v)?).map_err(|e| bad(&e))?
                }
                "globalOutstandingLimit" => {
                    self.global_outstanding_limit = usize::try_from(num(v)?)
                        .map_err(|_| bad("too large"))?
                        .max(1)
                }
                // ZooKeeper 3.6+'s name, and the shorter one zlock read first.
                "clientPortListenBacklog" | "listenBacklog" => {
                    self.listen_backlog = u32::try_from(num(v)?).map_err(|_| bad("too large"))?
                }
                "initLimit" => self.init_limit = ticks(v)?,
                "syncLimit" => self.sync_limit = ticks(v)?,
                "zlock.adminAuthRequired" => {
                    self.admin.auth_required =
                        v.parse().map_err(|_| bad("expected true or false"))?
                }
                "zlock.raftHeartbeatMs" => self.raft_heartbeat_ms = Some(ms(v)?),
                "zlock.electionTimeoutMs" => self.election_timeout_ms = Some(ms(v)?),
                // As ZooKeeper reads it; checked against this server's own line when
                // the ensemble is resolved (the line decides).
                "peerType" => {
                    self.declared.observer = match v.to_ascii_lowercase().as_str() {
                        "observer" => Some(true),
                        "participant" => Some(false),
                        _ => return Err(bad("expected participant or observer")),
                    }
                }
                // Read after this file's other lines: ZooKeeper requires its server.N
                // lines to be there, not here, whichever comes first.
                "dynamicConfigFile" => dynamic = Some(PathBuf::from(v)),
                _ if ensemble_only(k) => {
                    tracing::info!(
                        "{}:{line}: ignoring {k}: it tunes how ZooKeeper's ensemble members \
                         talk to each other, which zlock's Raft replication does not use",
                        path.display()
                    );
                    ignored.push(IgnoredKey {
                        line,
                        key: k.to_owned(),
                        why: Ignored::EnsembleOnly,
                    });
                }
                _ => {
                    tracing::warn!(
                        "{}:{line}: ignoring unknown configuration key {k}",
                        path.display()
                    );
                    ignored.push(IgnoredKey {
                        line,
                        key: k.to_owned(),
                        why: Ignored::Unknown,
                    });
                }
            }
        }
        if let Some(dynamic) = dynamic {
            if let Some(at) = first_member {
                return Err(ConfigError::ServersBesideDynamic { at, dynamic });
            }
            members = read_dynamic(&dynamic)?;
        }
        if !members.is_empty() {
            self.declared.members = members.members;
        }
        let tls = |key, problem| ConfigError::Tls {
            path: path.to_owned(),
            key,
            problem,
        };
        self.tls
            .finish()
            .map_err(|(key, problem)| tls(key, problem))?;
        let member_client_ports = self
            .declared
            .members
            .iter()
            .any(|(_, m)| m.client.is_some());
        let secure = self.tls.secure_client_port.is_some();
        if secure && !client_port_given && !member_client_ports {
            // ZooKeeper then serves TLS only; zlock always has its plain port, which
            // must not open at its default unasked.
            return Err(tls("secureClientPort", TlsSetupError::NoPlainPort));
        }
        self.validate()?;
        Ok(ignored)
    }
}

/// A lock-delay from the configuration, ms: at most
/// [`MAX_LOCK_DELAY_MS`](zlock_proto::records::MAX_LOCK_DELAY_MS).
pub fn lock_delay(ms: u64) -> Result<i32, String> {
    use zlock_proto::records::MAX_LOCK_DELAY_MS;
    i32::try_from(ms)
        .ok()
        .filter(|d| *d <= MAX_LOCK_DELAY_MS)
        .ok_or_else(|| format!("a lock-delay is at most {MAX_LOCK_DELAY_MS} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = ServerConfig::default();
        assert_eq!(c.client_port, 2181);
        assert_eq!(c.min_session_timeout(), 4000);
        assert_eq!(c.max_session_timeout(), 40000);
        assert_eq!(c.wal_dir(), PathBuf::from("zlock-data/wal"));
    }

    #[test]
    fn parses_zoo_cfg() {
        let mut c = ServerConfig::default();
        c.apply_text(
            Path::new("zoo.cfg"),
            "# comment\ntickTime=1000\nclientPort=2999\ndataDir=/tmp/x\n\
             4lw.commands.whitelist=ruok, mntr\nextendedTypesEnabled=true\nfoo=bar\n\
             zlock.commitSpinMicros=0\n",
        )
        .unwrap();
        assert_eq!(c.commit_spin(), std::time::Duration::ZERO);
        assert_eq!(c.tick_time_ms, 1000);
        assert_eq!(c.client_port, 2999);
        assert_eq!(c.max_session_timeout(), 20000);
        assert!(c.four_letter_allowed("mntr"));
        assert!(!c.four_letter_allowed("dump"));
        assert!(c.extended_types);
    }

    #[test]
    fn lock_delay_is_read_in_ms_and_bounded() {
        let mut c = ServerConfig::default();
        assert_eq!(
            c.lock_delay_ms, 0,
            "none unless configured, as in ZooKeeper"
        );
        c.apply_text(Path::new("zoo.cfg"), "zlock.lockDelayMs=1500\n")
            .unwrap();
        assert_eq!(c.lock_delay_ms, 1500);
        for bad in ["60001", "-1", "1s"] {
            let e = c
                .apply_text(Path::new("zoo.cfg"), &format!("zlock.lockDelayMs={bad}\n"))
                .unwrap_err();
            assert!(e.to_string().contains("zlock.lockDelayMs"), "{e}");
        }
        assert_eq!(c.lock_delay_ms, 1500);
    }

    #[test]
    fn pre_alloc_size_is_in_kib() {
        let mut c = ServerConfig::default();
        assert_eq!(c.wal_preallocate_bytes, 4 << 20);
        c.apply_text(Path::new("zoo.cfg"), "preAllocSize=65536\n")
            .unwrap();
        assert_eq!(c.wal_preallocate_bytes, 64 << 20);
        c.apply_text(Path::new("zoo.cfg"), "preAllocSize=0\n")
            .unwrap();
        assert_eq!(c.wal_preallocate_bytes, 0);
        for bad in ["-1", "4M", "18014398509481984"] {
            let e = c
                .apply_text(Path::new("zoo.cfg"), &format!("preAllocSize={bad}\n"))
                .unwrap_err();
            assert!(e.to_string().contains("preAllocSize"), "{e}");
        }
    }

    #[test]
    fn errors_name_the_line() {
        let mut c = ServerConfig::default();
        let e = c
            .apply_text(Path::new("zoo.cfg"), "tickTime=2000\nclientPort=abc\n")
            .unwrap_err();
        assert!(e.to_string().contains("zoo.cfg:2"), "{e}");
        let e = c
            .apply_text(Path::new("z"), "minSessionTimeout=9\nmaxSessionTimeout=1\n")
            .unwrap_err();
        assert!(matches!(e, ConfigError::SessionTimeouts { .. }));
    }

    #[test]
    fn unknown_and_ensemble_only_keys_are_reported_as_ignored() {
        let mut c = ServerConfig::default();
        let ignored = c
            .apply_text(
                Path::new("zoo.cfg"),
                "tickTime=2000\ninitLimit=10\nsyncLimit=5\nautopurge.purgeInterval=1\n\
                 clientPort=2999\nfoo.bar=1\nquorum.auth.enableSasl=false\ncnxTimeout=5000\n\
                 electionAlg=3\n",
            )
            .unwrap();
        let got: Vec<(usize, &str, Ignored)> = ignored
            .iter()
            .map(|i| (i.line, i.key.as_str(), i.why))
            .collect();
        assert_eq!(
            got,
            [
                (4, "autopurge.purgeInterval", Ignored::Unknown),
                (6, "foo.bar", Ignored::Unknown),
                (7, "quorum.auth.enableSasl", Ignored::EnsembleOnly),
                (8, "cnxTimeout", Ignored::EnsembleOnly),
                (9, "electionAlg", Ignored::EnsembleOnly),
            ]
        );
        // Known keys still apply around them; initLimit and syncLimit are known now.
        assert_eq!(c.client_port, 2999);
        assert_eq!((c.init_limit, c.sync_limit), (10, 5));
    }

    #[test]
    fn listen_backlog_under_zookeepers_name() {
        let mut c = ServerConfig::default();
        let ignored = c
            .apply_text(Path::new("zoo.cfg"), "clientPortListenBacklog=77\n")
            .unwrap();
        assert!(ignored.is_empty());
        assert_eq!(c.listen_backlog, 77);
        c.apply_text(Path::new("zoo.cfg"), "listenBacklog=88\n")
            .unwrap();
        assert_eq!(c.listen_backlog, 88);
    }

    #[test]
    fn admin_server_keys() {
        let mut c = ServerConfig::default();
        assert!(!c.admin.enabled);
        let ignored = c
            .apply_text(
                Path::new("zoo.cfg"),
                "admin.enableServer=true\nadmin.serverAddress=0.0.0.0\n\
                 admin.serverPort=8081\nadmin.commandURL=/cmds\nadmin.idleTimeout=5000\n",
            )
            .unwrap();
        assert!(c.admin.enabled);
        assert_eq!(c.admin.server_address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(
            (c.admin.server_port, c.admin.command_url.as_str()),
            (8081, "/cmds")
        );
        assert_eq!(
            ignored
                .iter()
                .map(|i| (i.line, i.key.as_str(), i.why))
                .collect::<Vec<_>>(),
            [(5, "admin.idleTimeout", Ignored::NotApplicable)]
        );
        assert!(c
            .apply_text(Path::new("zoo.cfg"), "admin.serverPort=http\n")
            .is_err());
    }

    #[test]
    fn metrics_provider_keys() {
        let mut c = ServerConfig::default();
        assert!(!c.metrics.enabled);
        let ignored = c
            .apply_text(
                Path::new("zoo.cfg"),
                "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.\
                 PrometheusMetricsProvider\nmetricsProvider.httpPort=7001\n\
                 metricsProvider.httpHost=0.0.0.0\nmetricsProvider.exportJvmInfo=true\n",
            )
            .unwrap();
        assert!(c.metrics.enabled);
        assert_eq!(c.metrics.http_port, 7001);
        assert_eq!(c.metrics.http_host, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(
            ignored
                .iter()
                .map(|i| (i.line, i.key.as_str(), i.why))
                .collect::<Vec<_>>(),
            [(4, "metricsProvider.exportJvmInfo", Ignored::NotApplicable)]
        );
        let e = c
            .apply_text(
                Path::new("zoo.cfg"),
                "metricsProvider.className=com.example.Other\n",
            )
            .unwrap_err();
        assert!(e.to_string().contains("zoo.cfg:1"), "{e}");
        assert!(e.to_string().contains(PROMETHEUS_CLASS), "{e}");
    }

    #[test]
    fn global_outstanding_limit_is_read_and_at_least_one() {
        let mut c = ServerConfig::default();
        assert_eq!(c.global_outstanding_limit, 8192);
        c.apply_text(Path::new("zoo.cfg"), "globalOutstandingLimit=1000\n")
            .unwrap();
        assert_eq!(c.global_outstanding_limit, 1000);
        c.apply_text(Path::new("zoo.cfg"), "globalOutstandingLimit=0\n")
            .unwrap();
        assert_eq!(c.global_outstanding_limit, 1, "a queue needs room for one");
    }
}
