//! openraft's messages as they travel between members: zlock's own types, laid out as
//! peer protocol 3 first sent them (field for field as openraft 0.10.0-alpha.37's serde
//! types, so the frames' bytes did not change when these types came in: the golden
//! files pin them), converted to and from openraft's here only. The peer frames
//! ([`super::peer::Request`], [`super::peer::Reply`]) name these modules in
//! `#[serde(with = ...)]`, so the code that handles a message still works with
//! openraft's types, and an openraft upgrade that changes one breaks the build of a
//! conversion below, never silently the protocol. The log ids, votes, entries and
//! snapshot metas inside are the disk records' own ([`super::codec::v1`]).
//!
//! One part is not openraft's layout: a storage failure in a Raft error travels as its
//! message (openraft's carries its subject, verb and source, types that change from
//! release to release). A member of an earlier build cannot decode such a reply, which
//! fails its call as the failure would have anyway; every other frame is the same.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use openraft::errors::{Fatal, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderError,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{ErrorSubject, ErrorVerb, StorageError};

use super::codec::{self, v1};
use super::types::{Entry, LogId, Vote, Zraft};

fn to_id(l: &Option<LogId>) -> Option<v1::LogId> {
    l.as_ref().map(codec::to_v1_id)
}

fn from_id(l: Option<v1::LogId>) -> Option<LogId> {
    l.map(codec::from_v1_id)
}

/// Reads a wire type and makes openraft's of it with `from`.
fn take<'de, D: Deserializer<'de>, W: Deserialize<'de>, T>(
    d: D,
    from: impl FnOnce(W) -> std::io::Result<T>,
) -> Result<T, D::Error> {
    from(W::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// A vote (`Reply::Forgotten`, `Request::SnapshotDone`).
pub mod vote {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Vote, s: S) -> Result<S::Ok, S::Error> {
        codec::to_v1_vote(v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vote, D::Error> {
        take(d, |v: v1::Vote| Ok(codec::from_v1_vote(v)))
    }
}

pub mod opt_vote {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<Vote>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().map(codec::to_v1_vote).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vote>, D::Error> {
        take(d, |v: Option<v1::Vote>| Ok(v.map(codec::from_v1_vote)))
    }
}

pub mod opt_log_id {
    use super::*;

    pub fn serialize<S: Serializer>(l: &Option<LogId>, s: S) -> Result<S::Ok, S::Error> {
        to_id(l).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LogId>, D::Error> {
        take(d, |l: Option<v1::LogId>| Ok(from_id(l)))
    }
}

/// A snapshot's Raft meta, as a snapshot file's head holds it.
pub mod snapshot_meta {
    use super::*;
    use crate::commit::raft::types::SnapshotMeta;

    pub fn serialize<S: Serializer>(m: &SnapshotMeta, s: S) -> Result<S::Ok, S::Error> {
        codec::to_v1_meta(m).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SnapshotMeta, D::Error> {
        take(d, codec::from_v1_meta)
    }
}

#[derive(Serialize)]
struct AppendOut<'a> {
    vote: v1::Vote,
    prev: Option<v1::LogId>,
    entries: EntriesOut<'a>,
    commit: Option<v1::LogId>,
}

#[derive(Deserialize)]
struct AppendIn {
    vote: v1::Vote,
    prev: Option<v1::LogId>,
    entries: EntriesIn,
    commit: Option<v1::LogId>,
}

/// An append's entries, written as a sequence of [`v1::EntryRef`]s straight from
/// openraft's (no copy of the list on the request path).
struct EntriesOut<'a>(&'a [Entry]);

impl Serialize for EntriesOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(codec::to_v1_entry))
    }
}

/// An append's entries, each made openraft's as it is read (one list, not two).
struct EntriesIn(Vec<Entry>);

impl<'de> Deserialize<'de> for EntriesIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = EntriesIn;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence of log entries")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<EntriesIn, A::Error> {
                // The hint comes from the peer: bounded, as serde's own Vec does.
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(e) = seq.next_element::<v1::EntryOwned>()? {
                    out.push(codec::from_v1_entry(e).map_err(serde::de::Error::custom)?);
                }
                Ok(EntriesIn(out))
            }
        }
        d.deserialize_seq(Visit)
    }
}

pub mod append {
    use super::*;

    pub fn serialize<S: Serializer>(
        r: &AppendEntriesRequest<Zraft>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        AppendOut {
            vote: codec::to_v1_vote(&r.vote),
            prev: to_id(&r.prev_log_id),
            entries: EntriesOut(&r.entries),
            commit: to_id(&r.leader_commit),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<AppendEntriesRequest<Zraft>, D::Error> {
        take(d, |a: AppendIn| {
            Ok(AppendEntriesRequest {
                vote: codec::from_v1_vote(a.vote),
                prev_log_id: from_id(a.prev),
                entries: a.entries.0,
                leader_commit: from_id(a.commit),
            })
        })
    }
}

/// What a Raft call's failure says: openraft's `RaftError` without an API error
/// (`Infallible`: the tag is kept, nothing can be sent in it).
#[derive(Serialize, Deserialize)]
enum Failure {
    Api(Never),
    Fatal(FatalV),
}

#[derive(Serialize, Deserialize)]
enum Never {}

#[derive(Serialize, Deserialize)]
enum FatalV {
    /// Its message (see the module's note).
    Storage(String),
    Panicked,
    Stopped,
}

fn to_failure(e: &RaftError<Zraft>) -> Failure {
    let f = match e {
        RaftError::Fatal(f) => f,
        RaftError::APIError(never) => match *never {},
    };
    Failure::Fatal(match f {
        Fatal::StorageError(e) => FatalV::Storage(e.to_string()),
        Fatal::Panicked => FatalV::Panicked,
        Fatal::Stopped => FatalV::Stopped,
    })
}

fn from_failure(f: Failure) -> RaftError<Zraft> {
    let f = match f {
        Failure::Fatal(f) => f,
        Failure::Api(never) => match never {},
    };
    RaftError::Fatal(match f {
        FatalV::Storage(msg) => Fatal::StorageError(StorageError::from_io_error(
            ErrorSubject::None,
            ErrorVerb::Read,
            std::io::Error::other(format!("on the member that answered: {msg}")),
        )),
        FatalV::Panicked => Fatal::Panicked,
        FatalV::Stopped => Fatal::Stopped,
    })
}

#[derive(Serialize, Deserialize)]
enum AppendReplyV {
    Success,
    PartialSuccess(Option<v1::LogId>),
    Conflict,
    HigherVote(v1::Vote),
}

pub mod append_reply {
    use super::*;

    type T = Result<AppendEntriesResponse<Zraft>, RaftError<Zraft>>;

    pub fn serialize<S: Serializer>(r: &T, s: S) -> Result<S::Ok, S::Error> {
        let w = match r {
            Ok(AppendEntriesResponse::Success) => Ok(AppendReplyV::Success),
            Ok(AppendEntriesResponse::PartialSuccess(l)) => {
                Ok(AppendReplyV::PartialSuccess(to_id(l)))
            }
            Ok(AppendEntriesResponse::Conflict) => Ok(AppendReplyV::Conflict),
            Ok(AppendEntriesResponse::HigherVote(v)) => {
                Ok(AppendReplyV::HigherVote(codec::to_v1_vote(v)))
            }
            Err(e) => Err(to_failure(e)),
        };
        w.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        take(d, |w: Result<AppendReplyV, Failure>| {
            Ok(match w {
                Ok(AppendReplyV::Success) => Ok(AppendEntriesResponse::Success),
                Ok(AppendReplyV::PartialSuccess(l)) => {
                    Ok(AppendEntriesResponse::PartialSuccess(from_id(l)))
                }
                Ok(AppendReplyV::Conflict) => Ok(AppendEntriesResponse::Conflict),
                Ok(AppendReplyV::HigherVote(v)) => {
                    Ok(AppendEntriesResponse::HigherVote(codec::from_v1_vote(v)))
                }
                Err(f) => Err(from_failure(f)),
            })
        })
    }
}

#[derive(Serialize, Deserialize)]
struct VoteAsk {
    vote: v1::Vote,
    last: Option<v1::LogId>,
    transfer: bool,
}

pub mod vote_request {
    use super::*;

    pub fn serialize<S: Serializer>(r: &VoteRequest<Zraft>, s: S) -> Result<S::Ok, S::Error> {
        VoteAsk {
            vote: codec::to_v1_vote(&r.vote),
            last: to_id(&r.last_log_id),
            transfer: r.leadership_transfer,
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VoteRequest<Zraft>, D::Error> {
        take(d, |a: VoteAsk| {
            Ok(VoteRequest {
                vote: codec::from_v1_vote(a.vote),
                last_log_id: from_id(a.last),
                leadership_transfer: a.transfer,
            })
        })
    }
}

#[derive(Serialize, Deserialize)]
struct VoteAnswer {
    vote: v1::Vote,
    granted: bool,
    last: Option<v1::LogId>,
}

pub mod vote_reply {
    use super::*;

    type T = Result<VoteResponse<Zraft>, RaftError<Zraft>>;

    pub fn serialize<S: Serializer>(r: &T, s: S) -> Result<S::Ok, S::Error> {
        let w = match r {
            Ok(v) => Ok(VoteAnswer {
                vote: codec::to_v1_vote(&v.vote),
                granted: v.vote_granted,
                last: to_id(&v.last_log_id),
            }),
            Err(e) => Err(to_failure(e)),
        };
        w.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        take(d, |w: Result<VoteAnswer, Failure>| {
            Ok(match w {
                Ok(a) => Ok(VoteResponse {
                    vote: codec::from_v1_vote(a.vote),
                    vote_granted: a.granted,
                    last_log_id: from_id(a.last),
                }),
                Err(f) => Err(from_failure(f)),
            })
        })
    }
}

pub mod snapshot_reply {
    use super::*;

    type T = Result<SnapshotResponse<Zraft>, String>;

    pub fn serialize<S: Serializer>(r: &T, s: S) -> Result<S::Ok, S::Error> {
        let w: Result<v1::Vote, &String> = match r {
            Ok(r) => Ok(codec::to_v1_vote(&r.vote)),
            Err(e) => Err(e),
        };
        w.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        take(d, |w: Result<v1::Vote, String>| {
            Ok(w.map(|v| SnapshotResponse::new(codec::from_v1_vote(v))))
        })
    }
}

#[derive(Serialize, Deserialize)]
struct Transfer {
    from: v1::Vote,
    to: u64,
    last: Option<v1::LogId>,
}

pub mod transfer {
    use super::*;

    pub fn serialize<S: Serializer>(
        r: &TransferLeaderRequest<Zraft>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        Transfer {
            from: codec::to_v1_vote(r.from_leader()),
            to: *r.to_node_id(),
            last: r.last_log_id().map(codec::to_v1_id),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<TransferLeaderRequest<Zraft>, D::Error> {
        take(d, |t: Transfer| {
            Ok(TransferLeaderRequest::new(
                codec::from_v1_vote(t.from),
                t.to,
                from_id(t.last),
            ))
        })
    }
}

#[derive(Serialize, Deserialize)]
enum TransferRefused {
    VoteChanged {
        expected: v1::Vote,
        actual: v1::Vote,
    },
    LogNotFlushed {
        expected: Option<v1::LogId>,
        actual: Option<v1::LogId>,
    },
}

pub mod transfer_reply {
    use super::*;

    type T = Result<TransferLeaderResponse<Zraft>, String>;

    pub fn serialize<S: Serializer>(r: &T, s: S) -> Result<S::Ok, S::Error> {
        let w: Result<Result<(), TransferRefused>, &String> = match r {
            Ok(Ok(())) => Ok(Ok(())),
            Ok(Err(TransferLeaderError::VoteChanged { expected, actual })) => {
                Ok(Err(TransferRefused::VoteChanged {
                    expected: codec::to_v1_vote(expected),
                    actual: codec::to_v1_vote(actual),
                }))
            }
            Ok(Err(TransferLeaderError::LogNotFlushed { expected, actual })) => {
                Ok(Err(TransferRefused::LogNotFlushed {
                    expected: to_id(expected),
                    actual: to_id(actual),
                }))
            }
            Err(e) => Err(e),
        };
        w.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        take(d, |w: Result<Result<(), TransferRefused>, String>| {
            Ok(w.map(|r| {
                r.map_err(|refused| match refused {
                    TransferRefused::VoteChanged { expected, actual } => {
                        TransferLeaderError::VoteChanged {
                            expected: codec::from_v1_vote(expected),
                            actual: codec::from_v1_vote(actual),
                        }
                    }
                    TransferRefused::LogNotFlushed { expected, actual } => {
                        TransferLeaderError::LogNotFlushed {
                            expected: from_id(expected),
                            actual: from_id(actual),
                        }
                    }
                })
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::commit::raft::peer::{self, Reply};
    use crate::commit::raft::types::log_id;

    /// A storage failure's message reaches the asker (its subject and verb do not: they
    /// are openraft's types, not part of the protocol).
    #[test]
    fn a_storage_failure_travels_as_its_message() {
        let failure = StorageError::from_io_error(
            ErrorSubject::Log(log_id(3, 1, 7)),
            ErrorVerb::Write,
            std::io::Error::other("disk full"),
        );
        let reply = Reply::Append(Err(RaftError::Fatal(Fatal::StorageError(failure))));
        let frame = peer::encode_frame(&reply).unwrap();
        let Reply::Append(Err(RaftError::Fatal(Fatal::StorageError(back)))) =
            peer::decode_body(&frame[4..]).unwrap()
        else {
            panic!("not a storage failure")
        };
        let text = back.to_string();
        assert!(text.contains("disk full"), "{text}");
        assert!(text.contains("on the member that answered"), "{text}");
    }
}
