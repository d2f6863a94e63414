//! Server configuration: defaults, `zoo.cfg`-style files, and overrides.
//!
//! With no configuration at all the server listens on 127.0.0.1:2181 and keeps its data
//! in `./zlock-data`. A `zoo.cfg` file uses ZooKeeper's key names; unknown keys are
//! logged and ignored (ZooKeeper has many that mean nothing here).

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

    /// Applies `key=value` lines (comments start with `#`).
    pub fn apply_text(&mut self, path: &Path, text: &str) -> Result<(), ConfigError> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(ConfigError::Syntax {
                    path: path.to_owned(),
                    line: i + 1,
                    text: raw.to_owned(),
                });
            };
            let (k, v) = (k.trim(), v.trim());
            let bad = |reason: &str| ConfigError::Value {
                path: path.to_owned(),
                line: i + 1,
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
                "listenBacklog" => {
                    self.listen_backlog = u32::try_from(num(v)?).map_err(|_| bad("too large"))?
                }
                _ => tracing::warn!(key = k, "ignoring unknown configuration key"),
            }
        }
        self.validate()
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
}
