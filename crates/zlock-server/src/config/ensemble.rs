//! The ensemble's part of the configuration: `server.N` lines (and `--server` flags),
//! the `myid` file, and the Raft timing derived from `tickTime`.
//!
//! Reading happens in two steps because this server's id lives in `dataDir/myid` and a
//! flag may change `dataDir` after the file is read: the member list is collected into a
//! [`DeclaredEnsemble`] (duplicate ids and addresses are caught there, where the line of
//! each is known), then [`ServerConfig::resolve_ensemble`](super::ServerConfig::resolve_ensemble)
//! reads `myid` and builds the [`EnsembleConfig`] the server runs. The `dynamicConfigFile`
//! is read here too.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use super::member_spec::{join_host_port, parse_member_id, MemberSyntax, MAX_MEMBER_ID};
use super::zoo_cfg::{entries, server_id};
use super::{ConfigError, EnsembleConfig, MemberSpec, ServerConfig};

/// Where a member was declared, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A line of a file (1-based).
    Line { path: PathBuf, line: usize },
    /// A command-line flag, as given (`--server 2=127.0.0.1:2889:3889`).
    Flag(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Line { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Flag(flag) => f.write_str(flag),
        }
    }
}

/// Where this server's id came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdFrom {
    /// `dataDir/myid`.
    File(PathBuf),
    /// `--myid`.
    Flag,
    /// An [`EnsembleConfig`] built in code.
    Given,
}

impl fmt::Display for IdFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdFrom::File(path) => write!(f, "in {}", path.display()),
            IdFrom::Flag => f.write_str("from --myid"),
            IdFrom::Given => f.write_str("as configured"),
        }
    }
}

/// The members as the file (or the flags) declare them, before this server's id is
/// known. Turned into an [`EnsembleConfig`] by
/// [`ServerConfig::resolve_ensemble`](super::ServerConfig::resolve_ensemble).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeclaredEnsemble {
    /// In the order given, each with where it was declared.
    pub members: Vec<(Origin, MemberSpec)>,
    /// `--myid`: this server's id, instead of the one in `dataDir/myid`.
    pub myid: Option<u64>,
    /// `peerType`, if given: `Some(true)` for `observer`. Only checked against this
    /// server's own `server.N` line, which decides.
    pub observer: Option<bool>,
}

impl DeclaredEnsemble {
    /// Adds a member; refuses an id, or a `host:port`, that an earlier member has (or
    /// that this one uses twice).
    pub fn add(&mut self, at: Origin, spec: MemberSpec) -> Result<(), ConfigError> {
        if let Some((first, _)) = self.members.iter().find(|(_, m)| m.id == spec.id) {
            return Err(ConfigError::DuplicateId {
                id: spec.id,
                at,
                first: first.clone(),
            });
        }
        let mine = spec.addresses();
        for (i, a) in mine.iter().enumerate() {
            if mine[..i].contains(a) {
                return Err(ConfigError::DuplicateAddress {
                    addr: join_host_port(&a.0, a.1),
                    id: spec.id,
                    at: at.clone(),
                    other: spec.id,
                    first: at,
                });
            }
            let earlier = self.members.iter().find(|(_, m)| m.addresses().contains(a));
            if let Some((first, m)) = earlier {
                return Err(ConfigError::DuplicateAddress {
                    addr: join_host_port(&a.0, a.1),
                    id: spec.id,
                    at,
                    other: m.id,
                    first: first.clone(),
                });
            }
        }
        self.members.push((at, spec));
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Every member, by id.
    pub fn by_id(&self) -> BTreeMap<u64, MemberSpec> {
        self.members
            .iter()
            .map(|(_, m)| (m.id, m.clone()))
            .collect()
    }
}

/// Reads this server's id from `data_dir/myid` as ZooKeeper does: an ASCII integer
/// (surrounding whitespace is trimmed). `Ok(None)`: there is no such file.
pub fn read_myid(data_dir: &Path) -> Result<Option<(u64, PathBuf)>, ConfigError> {
    let path = data_dir.join("myid");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ConfigError::Read { path, source }),
    };
    match parse_member_id(&text) {
        Some(id) => Ok(Some((id, path))),
        None => Err(ConfigError::BadMyId {
            path,
            text: text.trim().to_owned(),
        }),
    }
}

/// Openraft's timing, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
}

impl RaftTiming {
    /// See [`EnsembleConfig`]: the heartbeat is `tickTime / 40` (at least 10 ms) unless
    /// `heartbeat_ms` is given; the election timeout 3 to 4 heartbeats unless
    /// `election_min_ms` is given (then up to a third more). openraft's leader lease is
    /// the longest election timeout, so a follower that hears nothing campaigns after
    /// lease + timeout: 7 to 8 heartbeats (350-400 ms at tickTime 2000); after a
    /// leader's process died, after the lease alone (`commit::raft::failover`).
    pub fn derive(
        tick_time_ms: u64,
        heartbeat_ms: Option<u64>,
        election_min_ms: Option<u64>,
    ) -> RaftTiming {
        let heartbeat_ms = heartbeat_ms.unwrap_or((tick_time_ms / 40).max(10));
        let election_min_ms = election_min_ms.unwrap_or(heartbeat_ms.saturating_mul(3));
        RaftTiming {
            heartbeat_ms,
            election_min_ms,
            election_max_ms: election_min_ms.saturating_add((election_min_ms / 3).max(1)),
        }
    }
}

impl EnsembleConfig {
    /// The members as one line, `id=host:quorumPort` each (`:observer` after an
    /// observer's), by id: what names the ensemble to its peers, a backup's source and
    /// a restored ensemble's identity.
    pub fn member_lines(&self) -> String {
        self.members
            .values()
            .map(|m| match m.observer {
                false => format!("{}={}", m.id, m.quorum_addr()),
                true => format!("{}={}:observer", m.id, m.quorum_addr()),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// This server's own line.
    pub fn this_member(&self) -> Option<&MemberSpec> {
        self.members.get(&self.me)
    }

    /// The voting members.
    pub fn participants(&self) -> impl Iterator<Item = &MemberSpec> {
        self.members.values().filter(|m| !m.observer)
    }

    /// The observers: members that follow the log and serve clients but never vote
    /// (`:observer` lines).
    pub fn observers(&self) -> impl Iterator<Item = &MemberSpec> {
        self.members.values().filter(|m| m.observer)
    }

    /// Whether this server is an observer.
    pub fn is_observer(&self) -> bool {
        self.this_member().is_some_and(|m| m.observer)
    }

    /// The ensemble in ZooKeeper's dynamic-config format, as `/zookeeper/config` and
    /// `getConfig` show it: one `server.N=host:quorumPort:electionPort:role[;client]`
    /// line per member in id order, then `version=<hex>` (`version` is the zxid of the
    /// change that made this configuration; 0 for the static one from `zoo.cfg`), lines
    /// joined by `\n` with none after the last, as ZooKeeper 3.8's `QuorumMaj.toString`.
    /// A line shows its client address only if the `server.N` line gives one (ZooKeeper
    /// leaves out an address taken from `clientPort`, `isClientAddrFromStatic`), and a
    /// bare `;clientPort` as ZooKeeper reads it, on `0.0.0.0`.
    pub fn dynamic_config(&self, version: u64) -> String {
        dynamic_config_text(self.members.values(), version)
    }

    pub fn timing(&self) -> RaftTiming {
        RaftTiming {
            heartbeat_ms: self.heartbeat_ms,
            election_min_ms: self.election_min_ms,
            election_max_ms: self.election_max_ms,
        }
    }

    /// Checks what the server relies on: ids in range and matching their keys, this
    /// server among the members, at least one participant (observers follow a leader,
    /// and only a participant can be one), and a timing openraft accepts. (Duplicate addresses are caught
    /// when members are declared, see [`DeclaredEnsemble::add`].)
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_from(&IdFrom::Given)
    }

    pub(super) fn validate_from(&self, from: &IdFrom) -> Result<(), ConfigError> {
        for (&id, m) in &self.members {
            if id != m.id || !(1..=MAX_MEMBER_ID).contains(&id) {
                return Err(ConfigError::MemberId { id: m.id, key: id });
            }
        }
        if !self.members.contains_key(&self.me) {
            return Err(ConfigError::NotAMember {
                me: self.me,
                from: from.clone(),
                members: self.members.keys().copied().collect(),
            });
        }
        if self.participants().next().is_none() {
            return Err(ConfigError::NoParticipants);
        }
        let t = self.timing();
        if t.heartbeat_ms == 0
            || t.election_min_ms <= t.heartbeat_ms
            || t.election_max_ms <= t.election_min_ms
        {
            return Err(ConfigError::RaftTiming(t));
        }
        Ok(())
    }
}

impl ServerConfig {
    /// Works out this server's place in the declared ensemble and sets `ensemble`: reads
    /// `dataDir/myid` (unless `declared.myid`, from `--myid`, replaces it), derives the
    /// Raft timing, checks the whole (ids, this server a member, at least one
    /// participant, the timing), warns about an even number of participants and about a
    /// `peerType` that its own line contradicts, and takes the client port (and address)
    /// from this member's line if it has one. Does nothing when no members are
    /// declared (but refuses `--myid` then). Run it after flags have overridden the
    /// file's `dataDir`, `tickTime` and members, and before they override the client
    /// port.
    ///
    /// # Errors
    ///
    /// [`ConfigError::MissingMyId`], [`ConfigError::BadMyId`] or [`ConfigError::Read`]
    /// for the `myid` file; [`ConfigError::NotAMember`], [`ConfigError::NoParticipants`],
    /// [`ConfigError::RaftTiming`]; [`ConfigError::Member`] for
    /// a client host that is neither an IP address nor a name that resolves.
    pub fn resolve_ensemble(&mut self) -> Result<(), ConfigError> {
        if self.declared.is_empty() {
            return match self.declared.myid {
                Some(id) => Err(ConfigError::MyIdWithoutMembers { id }),
                None => Ok(()),
            };
        }
        let members = self.declared.by_id();
        let on_disk = read_myid(&self.data_dir);
        let (me, from) = match self.declared.myid {
            Some(id) => {
                if let Ok(Some((file_id, path))) = &on_disk {
                    if *file_id != id {
                        tracing::warn!(
                            "{} says this server is server.{file_id}; --myid {id} overrides it",
                            path.display()
                        );
                    }
                }
                (id, IdFrom::Flag)
            }
            None => match on_disk? {
                Some((id, path)) => (id, IdFrom::File(path)),
                None => {
                    return Err(ConfigError::MissingMyId {
                        path: self.data_dir.join("myid"),
                        members: members.keys().copied().collect(),
                    })
                }
            },
        };
        let t = self.raft_timing();
        let ensemble = EnsembleConfig {
            me,
            members,
            heartbeat_ms: t.heartbeat_ms,
            election_min_ms: t.election_min_ms,
            election_max_ms: t.election_max_ms,
        };
        ensemble.validate_from(&from)?;
        if let Some(said) = self
            .declared
            .observer
            .filter(|o| *o != ensemble.is_observer())
        {
            // As ZooKeeper 3.5+ does (`QuorumPeerConfig.setupPeerType`): the member's
            // own `server.N` line decides, since every other member reads that line
            // (and not this server's peerType) to know whether it votes.
            let (said, line) = match said {
                true => ("observer", "participant"),
                false => ("participant", "observer"),
            };
            tracing::warn!(
                "peerType={said} does not match this server's line server.{me}, which \
                 makes it {} {line}: the server.{me} line decides",
                if line == "observer" { "an" } else { "a" }
            );
        }
        match ensemble.participants().count() {
            2 => tracing::warn!(
                "an ensemble of 2 members tolerates no failure: a majority of 2 is 2, so \
                 both must be up to write. 3 members tolerate one failure"
            ),
            n if n >= 4 && n % 2 == 0 => tracing::warn!(
                "an ensemble of {n} members tolerates no more failures than one of {}: \
                 consider an odd number",
                n - 1
            ),
            _ => {}
        }
        if let Some(mine) = ensemble.this_member() {
            if let Some((host, port)) = &mine.client {
                self.client_port = *port;
                if let Some(host) = host {
                    self.client_port_address = self.client_ip(mine, host, *port)?;
                }
            }
        }
        self.ensemble = Some(ensemble);
        Ok(())
    }

    /// The address a member's `;clientHost:clientPort` names: an IP address, or a name
    /// resolved as ZooKeeper resolves it (to its first address).
    fn client_ip(&self, mine: &MemberSpec, host: &str, port: u16) -> Result<IpAddr, ConfigError> {
        if let Ok(ip) = host.parse() {
            return Ok(ip);
        }
        let resolved = (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next());
        resolved.map(|a| a.ip()).ok_or_else(|| {
            let at = self
                .declared
                .members
                .iter()
                .find(|(_, m)| m.id == mine.id)
                .map(|(at, _)| at.clone());
            ConfigError::Member {
                at: at.unwrap_or_else(|| Origin::Flag(format!("server.{}", mine.id))),
                text: format!("server.{}={mine}", mine.id),
                reason: MemberSyntax::ClientHost(host.to_owned()),
            }
        })
    }
}

/// Parses the `server.{id}={value}` line `raw`, read at `at`.
pub(super) fn member(
    at: Origin,
    raw: &str,
    id: &str,
    value: &str,
) -> Result<MemberSpec, ConfigError> {
    MemberSpec::parse(id, value).map_err(|reason| ConfigError::Member {
        at,
        text: raw.trim().to_owned(),
        reason,
    })
}

/// `members` (in id order) in ZooKeeper's dynamic-config format: see
/// [`EnsembleConfig::dynamic_config`].
pub fn dynamic_config_text<'a>(
    members: impl IntoIterator<Item = &'a MemberSpec>,
    version: u64,
) -> String {
    let mut out = String::new();
    for m in members {
        let line = match &m.client {
            Some((None, port)) => MemberSpec {
                client: Some((Some("0.0.0.0".to_owned()), *port)),
                ..m.clone()
            }
            .to_string(),
            _ => m.to_string(),
        };
        out.push_str(&format!("server.{}={line}\n", m.id));
    }
    out.push_str(&format!("version={version:x}"));
    out
}

/// The members a `dynamicConfigFile` lists. Read as ZooKeeper reads it: relative to the
/// working directory, and holding nothing but `server.N` lines, its `version`, and the
/// hierarchical quorum's `group.`/`weight.` keys (logged and ignored).
pub(super) fn read_dynamic(path: &Path) -> Result<DeclaredEnsemble, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut members = DeclaredEnsemble::default();
    for entry in entries(&text) {
        let e = entry.map_err(|(line, raw)| ConfigError::Syntax {
            path: path.to_owned(),
            line,
            text: raw.to_owned(),
        })?;
        let at = Origin::Line {
            path: path.to_owned(),
            line: e.line,
        };
        if let Some(id) = server_id(e.key) {
            members.add(at.clone(), member(at, e.raw, id, e.value)?)?;
        } else if e.key.starts_with("group.") || e.key.starts_with("weight.") {
            tracing::warn!(
                "{at}: ignoring {}: zlock has no hierarchical quorums, its quorum is a \
                 majority of all participants",
                e.key
            );
        } else if e.key != "version" {
            return Err(ConfigError::Value {
                path: path.to_owned(),
                line: e.line,
                key: e.key.to_owned(),
                value: e.value.to_owned(),
                reason: "a dynamic config file holds only server.N lines (and version)".to_owned(),
            });
        }
    }
    Ok(members)
}
