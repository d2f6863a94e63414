//! Identifiers that must not be mixed up: a session, a member of the ensemble, a zxid
//! and a position in the commit log. (A zxid is not a log position: a log may hold
//! entries that are not Txns, such as a Raft leader's blank entry, which take a position
//! but no zxid.)

/// Display as ZooKeeper prints session ids and zxids (`0x` and hex), and `{:x}` as the
/// plain number's.
macro_rules! display_hex {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "0x{:x}", self.0)
            }
        }
        impl std::fmt::LowerHex for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::LowerHex::fmt(&self.0, f)
            }
        }
    };
}

/// A member of an ensemble, as ZooKeeper numbers them (`server.N`, the `myid` file);
/// the single node is member 0, as a standalone ZooKeeper is server 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MemberId(pub u64);

/// A position in the commit log (the WAL's record index, a Raft log index); 0 is
/// "nothing yet", the first entry is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogIndex(pub u64);

impl LogIndex {
    pub fn next(self) -> LogIndex {
        LogIndex(self.0 + 1)
    }
}

impl std::fmt::Display for LogIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A ZooKeeper session id (64 bits on the wire). Session 0 is "none": the owner of a
/// node that is not ephemeral, the origin of a Txn no client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SessionId(pub i64);

impl SessionId {
    pub const NONE: SessionId = SessionId(0);
}

display_hex!(SessionId);

/// A ZooKeeper transaction id: the count of Txns applied, the same on every member.
/// (Stat fields such as czxid carry its value as the wire's 64-bit integer.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Zxid(pub i64);

impl Zxid {
    pub fn next(self) -> Zxid {
        Zxid(self.0 + 1)
    }
}

display_hex!(Zxid);
