//! Reading a `zoo.cfg`: its `key=value` lines, what each key sets, and the keys read
//! and ignored (each logged).

use super::*;
use zlock_proto::records::MAX_LOCK_DELAY_MS;

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
pub(super) fn server_id(key: &str) -> Option<&str> {
    key.strip_prefix("server.")
}

/// One `key=value` line.
pub(super) struct Entry<'a> {
    /// 1-based.
    pub(super) line: usize,
    pub(super) raw: &'a str,
    pub(super) key: &'a str,
    pub(super) value: &'a str,
}

/// The `key=value` lines of `text`, skipping blanks and `#` comments; `Err` is a line
/// that is neither, as (1-based line, raw line).
pub(super) fn entries(text: &str) -> impl Iterator<Item = Result<Entry<'_>, (usize, &str)>> {
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

impl ServerConfig {
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
                    self.lock_delay_ms = lock_delay(num(v)?).map_err(|e| bad(&e.to_string()))?
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
                "zlock.ensembleId" => {
                    let ok = !v.is_empty()
                        && v.len() <= 64
                        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
                    if !ok {
                        return Err(bad("expected the id `zlock snapshot restore` printed (letters, digits and -)"));
                    }
                    self.ensemble_id = Some(v.to_owned());
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
        self.metrics
            .finish()
            .map_err(|(key, problem)| ConfigError::Metrics {
                path: path.to_owned(),
                key,
                problem,
            })?;
        let member_client_ports = self
            .declared
            .members
            .iter()
            .any(|(_, m)| m.client.is_some());
        let secure = self.tls.secure_client_port.is_some();
        // ZooKeeper then serves TLS only: no plain port opens at its default unasked.
        self.tls.tls_only = secure && !client_port_given && !member_client_ports;
        self.validate()?;
        Ok(ignored)
    }
}

/// A lock-delay from the configuration, ms: at most
/// [`MAX_LOCK_DELAY_MS`](zlock_proto::records::MAX_LOCK_DELAY_MS).
///
/// # Errors
/// [`LockDelayTooLong`] past that.
pub fn lock_delay(ms: u64) -> Result<i32, LockDelayTooLong> {
    i32::try_from(ms)
        .ok()
        .filter(|d| *d <= MAX_LOCK_DELAY_MS)
        .ok_or(LockDelayTooLong { ms })
}

/// A lock-delay asked for past
/// [`MAX_LOCK_DELAY_MS`](zlock_proto::records::MAX_LOCK_DELAY_MS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a lock-delay is at most {MAX_LOCK_DELAY_MS} ms")]
pub struct LockDelayTooLong {
    /// The lock-delay asked for, ms.
    pub ms: u64,
}
