//! Server configuration: defaults, `zoo.cfg`-style files, and overrides.
//!
//! With no configuration at all the server listens on 127.0.0.1:2181 and keeps its data
//! in `./zlock-data`. A `zoo.cfg` file uses ZooKeeper's key names; unknown keys are
//! logged and ignored (ZooKeeper has many that mean nothing here).
//!
//! An ensemble's configuration is refused rather than ignored: `server.N` lines (in the
//! file or in its `dynamicConfigFile`) and a `myid` file in `dataDir`. zlock does not
//! replicate yet, so three members started from such files would be three independent
//! servers, each accepting writes and granting the same locks. Keys that only tune how
//! members talk to each other (`initLimit`, `syncLimit`, ...) are logged and ignored:
//! ZooKeeper's single-node sample config carries some of them too.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use thiserror::Error;
use zlock_store::WalOptions;

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
    #[error("minSessionTimeout ({min} ms) is greater than maxSessionTimeout ({max} ms)")]
    SessionTimeouts { min: u64, max: u64 },
    /// `server.N` lines: the configuration of a ZooKeeper ensemble member.
    #[error(
        "refusing to start: this configuration describes a ZooKeeper ensemble, and zlock \
         does not replicate yet:\n{}\n{NOT_REPLICATED} A single-node zlock server needs no \
         server.N lines: remove them (and any myid file in dataDir) to run one node.",
        show_lines(.lines)
    )]
    Ensemble { lines: Vec<ConfigLine> },
    /// A `myid` file in `dataDir`: the data directory of a ZooKeeper ensemble member.
    #[error(
        "refusing to start: {} exists, so this data directory belongs to a ZooKeeper \
         ensemble member, and zlock does not replicate yet. {NOT_REPLICATED} A single-node \
         zlock server needs no myid file: remove it to run one node.",
        .path.display()
    )]
    MyId { path: PathBuf },
}

/// Why an ensemble's configuration is refused rather than ignored.
const NOT_REPLICATED: &str = "Started from it, each member would run as an independent \
    server, accepting its own writes and granting the same locks as the others.";

/// One line of a configuration file, for messages that quote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigLine {
    pub path: PathBuf,
    /// 1-based.
    pub line: usize,
    /// The line as written, trimmed.
    pub text: String,
}

fn show_lines(lines: &[ConfigLine]) -> String {
    lines
        .iter()
        .map(|l| format!("  {}:{}: {}", l.path.display(), l.line, l.text))
        .collect::<Vec<_>>()
        .join("\n")
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
    /// A ZooKeeper key that only matters between ensemble members.
    EnsembleOnly,
}

/// ZooKeeper keys that only configure how ensemble members talk to each other. Their
/// presence alone does not mean the file is an ensemble's (`zoo_sample.cfg`, a single
/// node's, has `initLimit` and `syncLimit`), so they are logged, not refused: what makes
/// an ensemble is its `server.N` lines, which are refused.
fn ensemble_only(key: &str) -> bool {
    matches!(
        key,
        "initLimit"
            | "syncLimit"
            | "connectToLearnerMasterLimit"
            | "electionAlg"
            | "electionPortBindRetry"
            | "cnxTimeout"
            | "quorumListenOnAllIPs"
            | "peerType"
            | "syncEnabled"
            | "standaloneEnabled"
            | "reconfigEnabled"
            | "observerMasterPort"
            | "sslQuorum"
            | "sslQuorumReloadCertFiles"
            | "oraclePath"
            | "dynamicConfigFile"
    ) || ["group.", "weight.", "quorum.", "multiAddress."]
        .iter()
        .any(|p| key.starts_with(p))
}

/// ZooKeeper reads every key starting with `server.` as an ensemble member.
fn is_server_line(key: &str) -> bool {
    key.starts_with("server.")
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
    /// `tickTime`, ms: the unit of session timeouts.
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
    /// `zlock.commitSpinMicros` (zlock's own key): after a batch, how long the commit
    /// thread keeps polling for the next write (yielding the CPU between polls) before it
    /// sleeps. Waking a sleeping thread costs 15-20 µs on a small VM, on the path of
    /// every write that arrives while the server is not busy; polling trades that for CPU
    /// time that is otherwise idle (at most this long after each batch). `None`: 100 µs
    /// with 2 or more CPUs, 0 (never poll) with one.
    pub commit_spin_us: Option<u64>,
    /// `extendedTypesEnabled`: TTL nodes.
    pub extended_types: bool,
    /// `znode.container.checkIntervalMs`: how often empty containers and expired TTL
    /// nodes are looked for.
    pub container_check_interval_ms: u64,
    /// Listen backlog. ZooKeeper's 50 makes the 51st of a burst of clients wait a second
    /// for a SYN retry; 1024 lets a burst of 1000 in at once.
    pub listen_backlog: u32,
    /// `globalOutstandingLimit`: requests that may wait for the sequencer, over all
    /// connections, before connections stop reading. ZooKeeper's default is 1000; zlock's
    /// is two of its batches (8192), so that group commit never runs dry for want of
    /// queued requests.
    pub global_outstanding_limit: usize,
    /// `server.N` lines and `myid`: this server is member `me` of an ensemble. `None`:
    /// the standalone server.
    pub ensemble: Option<EnsembleConfig>,
}

/// One `server.N=host:quorumPort:electionPort[:participant|:observer][;[clientHost:]clientPort]`
/// line.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// `host:quorumPort`.
    pub fn quorum_addr(&self) -> String {
        format!("{}:{}", self.host, self.quorum_port)
    }
}

/// This server's place in an ensemble, and the Raft timing derived from `tickTime`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsembleConfig {
    /// `myid`.
    pub me: u64,
    /// Every member, this one included, by id.
    pub members: std::collections::BTreeMap<u64, MemberSpec>,
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
            container_check_interval_ms: 60_000,
            listen_backlog: 1024,
            global_outstanding_limit: 8192,
            ensemble: None,
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

    /// Checks cross-field constraints.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (min, max) = (self.min_session_timeout(), self.max_session_timeout());
        if min > max {
            return Err(ConfigError::SessionTimeouts { min, max });
        }
        Ok(())
    }

    /// Reads a `zoo.cfg`-style file over the defaults.
    pub fn from_file(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut cfg = ServerConfig::default();
        cfg.apply_text(path, &text)?;
        Ok(cfg)
    }

    /// Refuses a data directory that holds a ZooKeeper `myid` file (see the module doc).
    /// Separate from [`ServerConfig::validate`] because it looks at the disk, and must run
    /// on the final `dataDir`, after flags have overridden the file.
    pub fn check_standalone(&self) -> Result<(), ConfigError> {
        let path = self.data_dir.join("myid");
        // An error other than "not found" (an unreadable or non-directory dataDir) is left
        // to recovery, which reports it; only a myid that is known to exist is refused.
        if path.try_exists().unwrap_or(false) {
            return Err(ConfigError::MyId { path });
        }
        Ok(())
    }

    /// Applies `key=value` lines (comments start with `#`) and returns the keys it
    /// ignored, each also logged. Refuses an ensemble's configuration (`server.N` lines
    /// here or in the `dynamicConfigFile` it names, which it reads) before applying
    /// anything, so that the refusal is what the user sees even if other lines are bad.
    pub fn apply_text(&mut self, path: &Path, text: &str) -> Result<Vec<IgnoredKey>, ConfigError> {
        let mut ignored = Vec::new();
        refuse_ensemble(path, text)?;
        for entry in entries(text) {
            let Entry {
                line,
                key: k,
                value: v,
                ..
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
            match k {
                "tickTime" => self.tick_time_ms = num(v)?.max(1),
                "dataDir" => self.data_dir = PathBuf::from(v),
                "dataLogDir" => self.data_log_dir = Some(PathBuf::from(v)),
                "clientPort" => {
                    self.client_port = v.parse().map_err(|_| bad("expected a port number"))?
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
                "znode.container.checkIntervalMs" => {
                    self.container_check_interval_ms = num(v)?.max(1)
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
                _ if ensemble_only(k) => {
                    tracing::info!(
                        "{}:{line}: ignoring {k}: it only matters between ensemble members, \
                         and zlock runs a single node",
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
        self.validate()?;
        Ok(ignored)
    }
}

/// Refuses `text` if it lists ensemble members: `server.N` lines, or a
/// `dynamicConfigFile` that has them (ZooKeeper keeps the member list there once dynamic
/// reconfiguration is on). The error quotes every such line.
fn refuse_ensemble(path: &Path, text: &str) -> Result<(), ConfigError> {
    let quote = |path: &Path, line: usize, raw: &str| ConfigLine {
        path: path.to_owned(),
        line,
        text: raw.trim().to_owned(),
    };
    let mut lines = Vec::new();
    // Syntax errors are left to the caller's pass, which reports them.
    for e in entries(text).flatten() {
        if is_server_line(e.key) {
            lines.push(quote(path, e.line, e.raw));
        } else if e.key == "dynamicConfigFile" {
            // Read as ZooKeeper reads it: relative to the working directory. Unreadable
            // is an error, not "no members": it cannot be told apart from an ensemble.
            let dynamic = PathBuf::from(e.value);
            let dtext = std::fs::read_to_string(&dynamic).map_err(|source| ConfigError::Read {
                path: dynamic.clone(),
                source,
            })?;
            let members: Vec<ConfigLine> = entries(&dtext)
                .flatten()
                .filter(|d| is_server_line(d.key))
                .map(|d| quote(&dynamic, d.line, d.raw))
                .collect();
            if !members.is_empty() {
                lines.push(quote(path, e.line, e.raw));
                lines.extend(members);
            }
        }
    }
    if lines.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Ensemble { lines })
    }
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

    const ENSEMBLE: &str = "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=/var/lib/zk\n\
        clientPort=2181\n# members\nserver.1=10.0.0.1:2888:3888\n\
        server.2=10.0.0.2:2888:3888\nserver.3=10.0.0.3:2888:3888\n";

    #[test]
    fn server_lines_are_refused_naming_each_line() {
        let mut c = ServerConfig::default();
        let e = c.apply_text(Path::new("zoo.cfg"), ENSEMBLE).unwrap_err();
        let ConfigError::Ensemble { lines } = &e else {
            panic!("not refused as an ensemble: {e}");
        };
        let at: Vec<(usize, &str)> = lines.iter().map(|l| (l.line, l.text.as_str())).collect();
        assert_eq!(
            at,
            [
                (7, "server.1=10.0.0.1:2888:3888"),
                (8, "server.2=10.0.0.2:2888:3888"),
                (9, "server.3=10.0.0.3:2888:3888"),
            ]
        );
        let msg = e.to_string();
        for want in [
            "zoo.cfg:7: server.1=10.0.0.1:2888:3888",
            "zoo.cfg:9: server.3=10.0.0.3:2888:3888",
            "zlock does not replicate yet",
            "needs no server.N lines",
        ] {
            assert!(msg.contains(want), "{want:?} not in {msg}");
        }
        // Nothing was applied: the refusal comes before the other lines.
        assert_eq!(c.data_dir, PathBuf::from("zlock-data"));
    }

    #[test]
    fn refusal_wins_over_a_bad_value() {
        let e = ServerConfig::default()
            .apply_text(Path::new("z"), "clientPort=abc\nserver.1=h:2888:3888\n")
            .unwrap_err();
        assert!(matches!(e, ConfigError::Ensemble { .. }), "{e}");
    }

    #[test]
    fn dynamic_config_file_with_members_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dynamic = dir.path().join("zoo.cfg.dynamic.100000000");
        std::fs::write(
            &dynamic,
            "server.1=a:2888:3888;2181\nserver.2=b:2888:3888;2181\n",
        )
        .unwrap();
        let text = format!("dataDir=/x\ndynamicConfigFile={}\n", dynamic.display());
        let e = ServerConfig::default()
            .apply_text(Path::new("zoo.cfg"), &text)
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("zoo.cfg:2: dynamicConfigFile="), "{msg}");
        let member = format!("{}:2: server.2=b:2888:3888;2181", dynamic.display());
        assert!(msg.contains(&member), "{member:?} not in {msg}");

        // Without members it is only ignored; unreadable, it cannot be told apart from an
        // ensemble's and is an error.
        std::fs::write(&dynamic, "# empty\n").unwrap();
        let ignored = ServerConfig::default()
            .apply_text(Path::new("zoo.cfg"), &text)
            .unwrap();
        assert_eq!(ignored[0].key, "dynamicConfigFile");
        assert_eq!(ignored[0].why, Ignored::EnsembleOnly);
        std::fs::remove_file(&dynamic).unwrap();
        let e = ServerConfig::default()
            .apply_text(Path::new("zoo.cfg"), &text)
            .unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
    }

    #[test]
    fn myid_in_data_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = ServerConfig {
            data_dir: dir.path().to_owned(),
            ..ServerConfig::default()
        };
        c.check_standalone().unwrap();
        std::fs::write(dir.path().join("myid"), "1\n").unwrap();
        let e = c.check_standalone().unwrap_err();
        let msg = e.to_string();
        let named = format!("{} exists", dir.path().join("myid").display());
        assert!(msg.contains(&named), "{msg}");
        assert!(msg.contains("zlock does not replicate yet"), "{msg}");
        assert!(msg.contains("needs no myid file"), "{msg}");
    }

    #[test]
    fn unknown_and_ensemble_only_keys_are_reported_as_ignored() {
        let mut c = ServerConfig::default();
        let ignored = c
            .apply_text(
                Path::new("zoo.cfg"),
                "tickTime=2000\ninitLimit=10\nsyncLimit=5\nautopurge.purgeInterval=1\n\
                 clientPort=2999\nfoo.bar=1\nquorum.auth.enableSasl=false\n",
            )
            .unwrap();
        let got: Vec<(usize, &str, Ignored)> = ignored
            .iter()
            .map(|i| (i.line, i.key.as_str(), i.why))
            .collect();
        assert_eq!(
            got,
            [
                (2, "initLimit", Ignored::EnsembleOnly),
                (3, "syncLimit", Ignored::EnsembleOnly),
                (4, "autopurge.purgeInterval", Ignored::Unknown),
                (6, "foo.bar", Ignored::Unknown),
                (7, "quorum.auth.enableSasl", Ignored::EnsembleOnly),
            ]
        );
        // Known keys still apply around them.
        assert_eq!(c.client_port, 2999);
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
