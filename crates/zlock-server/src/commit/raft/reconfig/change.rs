//! A `reconfig` request: what it asks ([`Change`]), why it can be refused
//! ([`ReconfigError`], each with ZooKeeper's code) and the configuration it asks for
//! ([`next_config`]), checked as ZooKeeper's leader checks it. Carrying it out is
//! [`super`]'s.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use zlock_proto::ErrorCode;

use super::super::leader::LinkError;
use super::super::members::ConfigView;
use super::super::RaftFailure;
use crate::config::MemberSpec;

/// A `reconfig` request as the leader needs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Change {
    /// `server.N=value` entries, comma-separated (incremental).
    pub joining: Option<String>,
    /// Member ids, comma-separated (incremental).
    pub leaving: Option<String>,
    /// The whole new member list, comma- or newline-separated (non-incremental).
    pub new_members: Option<String>,
    /// The version the asker read, or -1.
    pub from_config: i64,
    /// Whether the asking session may write `/zookeeper/config` (it is a super user).
    pub authorized: bool,
}

/// Why a reconfiguration was refused or failed, each with ZooKeeper's code.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub enum ReconfigError {
    #[error("a reconfiguration is in progress")]
    InProgress,
    #[error("{0}")]
    BadVersion(String),
    #[error("{0}")]
    BadArguments(String),
    #[error("reconfig needs a super user (or write permission on /zookeeper/config)")]
    NoAuth,
    #[error(transparent)]
    NoQuorum(NoQuorum),
    /// Asked of a member that does not lead (the asker tries the leader it learns of).
    #[error("member {0} is not the leader")]
    NotLeader(u64),
}

/// Why no quorum carried a reconfiguration out, or none answered in time
/// ([`ReconfigError::NoQuorum`]).
///
/// On the peer wire (a member's reconfiguration is carried out by the leader) it
/// travels as its text, as it did when it was a string: the frame's bytes stay the same,
/// and the asking member reads the leader's reason as [`NoQuorum::Leader`].
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
#[serde(into = "String", from = "String")]
pub enum NoQuorum {
    #[error("the membership change was not committed in time")]
    NotCommitted,
    #[error(
        "of the new voters {voters:?}, only {synced:?} are synced with the leader (every \
         joining one must be, and a majority)"
    )]
    NotSynced {
        voters: BTreeSet<u64>,
        synced: BTreeSet<u64>,
    },
    #[error("raft stopped")]
    Stopped,
    /// This member's Raft failed.
    #[error(transparent)]
    Raft(RaftFailure),
    #[error("the leader did not answer in time")]
    NoAnswer,
    #[error("unexpected reply")]
    UnexpectedReply,
    /// The link to the leader failed.
    #[error(transparent)]
    Link(Arc<LinkError>),
    /// The leader's reason, as it sent it.
    #[error("{0}")]
    Leader(String),
}

impl From<NoQuorum> for String {
    fn from(n: NoQuorum) -> String {
        match n {
            NoQuorum::Leader(said) => said,
            n => n.to_string(),
        }
    }
}

impl From<String> for NoQuorum {
    fn from(said: String) -> NoQuorum {
        NoQuorum::Leader(said)
    }
}

impl ReconfigError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ReconfigError::InProgress => ErrorCode::ReconfigInProgress,
            ReconfigError::BadVersion(_) => ErrorCode::BadVersion,
            ReconfigError::BadArguments(_) => ErrorCode::BadArguments,
            ReconfigError::NoAuth => ErrorCode::NoAuth,
            ReconfigError::NoQuorum(_) | ReconfigError::NotLeader(_) => {
                ErrorCode::NewConfigNoQuorum
            }
        }
    }
}

/// The next configuration: every member with its role, by id.
pub(super) type Next = BTreeMap<u64, MemberSpec>;

/// `server.N=value` into its spec (ZooKeeper wants all three ports given).
fn joiner(text: &str) -> Result<MemberSpec, ReconfigError> {
    let bad = |why: String| ReconfigError::BadArguments(format!("{text:?}: {why}"));
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| bad("expected server.N=host:port:port[:role];[host:]port".into()))?;
    let id = key
        .trim()
        .strip_prefix("server.")
        .ok_or_else(|| bad("expected server.N=...".into()))?;
    // Any integer id parses here; the range is checked once the asker is known to be
    // allowed (ZooKeeper checks the form, then the permission).
    let n: u64 = id
        .trim()
        .parse()
        .map_err(|_| bad(format!("{id:?} is not a server id")))?;
    let mut spec = MemberSpec::parse("1", value.trim()).map_err(|e| bad(e.to_string()))?;
    spec.id = n;
    if spec.client.is_none() {
        return Err(bad(
            "each server needs its client port too (host:port:port;clientPort)".into(),
        ));
    }
    Ok(spec)
}

/// The configuration `change` asks for, from `current`.
pub(super) fn next_config(current: &ConfigView, change: &Change) -> Result<Next, ReconfigError> {
    let given = |s: &Option<String>| {
        s.as_deref()
            .filter(|t| !t.trim().is_empty())
            .map(str::to_owned)
    };
    let mut next: Next = BTreeMap::new();
    match given(&change.new_members) {
        Some(all) => {
            for line in all
                .split([',', '\n'])
                .map(str::trim)
                .filter(|l| !l.is_empty())
            {
                // A `version=` line (a config file pasted whole) is not a member.
                if line.starts_with("version=") {
                    continue;
                }
                let spec = joiner(line)?;
                if next.insert(spec.id, spec).is_some() {
                    return Err(ReconfigError::BadArguments(format!(
                        "{line:?}: that server is listed twice"
                    )));
                }
            }
        }
        None => {
            next = current.members.iter().map(|m| (m.id, m.clone())).collect();
            for id in given(&change.leaving).iter().flat_map(|l| l.split(',')) {
                let id: u64 = id.trim().parse().map_err(|_| {
                    ReconfigError::BadArguments(format!("{id:?} is not a server id"))
                })?;
                next.remove(&id);
            }
            for j in given(&change.joining).iter().flat_map(|j| j.split(',')) {
                let spec = joiner(j.trim())?;
                next.insert(spec.id, spec);
            }
        }
    }
    // Two members on one address cannot both listen there.
    let mut seen: BTreeMap<(String, u16), u64> = BTreeMap::new();
    for m in next.values() {
        for a in m.addresses() {
            if let Some(other) = seen.insert(a.clone(), m.id) {
                if other != m.id {
                    return Err(ReconfigError::BadArguments(format!(
                        "servers {other} and {} both use {}:{}",
                        m.id, a.0, a.1
                    )));
                }
            }
        }
    }
    let voters = next.values().filter(|m| !m.observer).count();
    if voters < 2 {
        return Err(ReconfigError::BadArguments(format!(
            "the new configuration must keep at least 2 voters ({voters} given)"
        )));
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(line: &str) -> MemberSpec {
        joiner(line).unwrap()
    }

    fn three() -> ConfigView {
        ConfigView {
            members: (1..=3)
                .map(|i| {
                    spec(&format!(
                        "server.{i}=127.0.0.1:{}:{}:participant;127.0.0.1:{}",
                        2880 + i,
                        3880 + i,
                        2180 + i
                    ))
                })
                .collect(),
            version: 0,
        }
    }

    fn change(joining: Option<&str>, leaving: Option<&str>, new_members: Option<&str>) -> Change {
        Change {
            joining: joining.map(str::to_owned),
            leaving: leaving.map(str::to_owned),
            new_members: new_members.map(str::to_owned),
            from_config: -1,
            authorized: true,
        }
    }

    #[test]
    fn incremental_and_whole_lists() {
        let c = three();
        let n = next_config(&c, &change(Some("server.4=127.0.0.1:2884:3884:participant;2184,server.5=127.0.0.1:2885:3885:observer;127.0.0.1:2185"), Some("1"), None)).unwrap();
        assert_eq!(n.keys().copied().collect::<Vec<_>>(), vec![2, 3, 4, 5]);
        assert!(n[&5].observer && !n[&4].observer);
        let n = next_config(&c, &change(None, None, Some("server.1=127.0.0.1:2881:3881;2181\nserver.2=127.0.0.1:2882:3882;2182\nversion=0"))).unwrap();
        assert_eq!(n.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        // Empty strings are "not given", as a null string.
        let n = next_config(&c, &change(Some(""), Some(""), Some(""))).unwrap();
        assert_eq!(n.len(), 3);
    }

    #[test]
    fn bad_requests_are_bad_arguments() {
        let c = three();
        for bad in [
            change(Some("some thing"), None, None),
            change(Some("server.4=127.0.0.1:2884:3884"), None, None),
            change(Some("server.x=127.0.0.1:2884:3884;2184"), None, None),
            change(Some("server.4=127.0.0.1:2884:3884:voter;2184"), None, None),
            change(None, Some("two"), None),
            change(None, Some("2,3"), None),
            change(Some("server.4=127.0.0.1:2881:3884;2184"), None, None),
            change(None, None, Some("server.1=127.0.0.1:2881:3881;2181")),
        ] {
            let e = next_config(&c, &bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::BadArguments, "{bad:?}: {e}");
        }
    }

    /// `NoQuorum` was a string on the peer wire: a typed one is sent as its text, in the
    /// same bytes, and read back as the leader's reason, with the same code.
    #[test]
    fn no_quorum_keeps_its_wire_form() {
        #[derive(Serialize)]
        #[allow(dead_code)]
        enum AsString {
            InProgress,
            BadVersion(String),
            BadArguments(String),
            NoAuth,
            NoQuorum(String),
            NotLeader(u64),
        }
        let typed = ReconfigError::NoQuorum(NoQuorum::NotSynced {
            voters: [1, 2, 4].into(),
            synced: [1].into(),
        });
        let text = typed.to_string();
        assert_eq!(
            text,
            "of the new voters {1, 2, 4}, only {1} are synced with the leader (every joining \
             one must be, and a majority)"
        );
        let bytes = postcard::to_allocvec(&typed).unwrap();
        assert_eq!(
            bytes,
            postcard::to_allocvec(&AsString::NoQuorum(text.clone())).unwrap()
        );
        let back: ReconfigError = postcard::from_bytes(&bytes).unwrap();
        assert!(
            matches!(&back, ReconfigError::NoQuorum(NoQuorum::Leader(said)) if *said == text),
            "{back:?}"
        );
        assert_eq!(back.code(), ErrorCode::NewConfigNoQuorum);
        assert_eq!(postcard::to_allocvec(&back).unwrap(), bytes);
    }
}
