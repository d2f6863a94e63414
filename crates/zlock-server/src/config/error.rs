//! Why a configuration is refused: each error names the file, the line or the key.

use super::*;

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
    /// Metrics endpoint keys that do not fit together (its HTTPS); `key` is the one
    /// to change.
    #[error("{}: {key}: {problem}", .path.display())]
    Metrics {
        path: PathBuf,
        key: &'static str,
        problem: String,
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
