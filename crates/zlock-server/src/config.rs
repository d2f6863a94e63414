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
mod error;
mod member_spec;
mod metrics;
mod quorum_tls;
#[cfg(test)]
mod quorum_tls_tests;
#[cfg(test)]
mod tests;
mod tls;
#[cfg(test)]
mod tls_tests;
mod tls_values;
mod zoo_cfg;

pub use admin::AdminConfig;
pub use ensemble::{dynamic_config_text, read_myid, DeclaredEnsemble, IdFrom, Origin, RaftTiming};
use ensemble::{member, read_dynamic};
pub use error::ConfigError;
pub use member_spec::{parse_member_id, MemberSyntax, MAX_MEMBER_ID};
pub use metrics::{MetricsConfig, MetricsTls, PROMETHEUS_CLASS, PROMETHEUS_SHORT};
pub use quorum_tls::QuorumTls;
pub use tls::{
    location_key, ClientAuth, Store, StoreConfig, StoreType, StoreTypeError, TlsConfig,
    TlsSetupError,
};
pub use tls_values::{Protocol, CIPHER_SUITES};
pub use zoo_cfg::{lock_delay, Ignored, IgnoredKey, LockDelayTooLong};

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
    /// `zlock.ensembleId` (zlock's own key): the identity of an ensemble made by a
    /// restore (`zlock snapshot restore` prints it). A member's data directory keeps the
    /// identity it was made with; with the key, a member whose directory was lost takes
    /// it back when it rejoins. Members of different identities never talk (see
    /// `crate::ensemble`).
    pub ensemble_id: Option<String>,
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
        member_spec::join_host_port(&self.host, self.quorum_port)
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
            ensemble_id: None,
            metrics: MetricsConfig::default(),
            admin: AdminConfig::default(),
            tls: TlsConfig::default(),
        }
    }
}

impl ServerConfig {
    /// Where the caller of [`crate::serve`] binds the client listener: `clientPort`, or,
    /// when TLS is the only way in ([`TlsConfig::tls_only`]), the secure client port,
    /// which then serves TLS only.
    pub fn client_listen_addr(&self) -> std::net::SocketAddr {
        match (self.tls.tls_only, self.tls.secure_client_port) {
            (true, Some(port)) => std::net::SocketAddr::new(
                self.tls
                    .secure_client_port_address
                    .unwrap_or(self.client_port_address),
                port,
            ),
            _ => std::net::SocketAddr::new(self.client_port_address, self.client_port),
        }
    }

    /// The plain client port as ZooKeeper reports it (`conf`, the admin server's
    /// `configuration`): -1 when it is not served ([`TlsConfig::tls_only`]).
    pub fn served_client_port(&self) -> i32 {
        match self.tls.tls_only {
            true => -1,
            false => i32::from(self.client_port),
        }
    }

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
}
