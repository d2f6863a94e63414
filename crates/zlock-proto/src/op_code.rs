//! ZooKeeper operation codes (`ZooDefs.OpCode`), exact numbers.

/// An operation code as sent in a `RequestHeader`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum OpCode {
    Notification = 0,
    Create = 1,
    Delete = 2,
    Exists = 3,
    GetData = 4,
    SetData = 5,
    GetAcl = 6,
    SetAcl = 7,
    GetChildren = 8,
    Sync = 9,
    Ping = 11,
    GetChildren2 = 12,
    Check = 13,
    Multi = 14,
    Create2 = 15,
    Reconfig = 16,
    CheckWatches = 17,
    RemoveWatches = 18,
    CreateContainer = 19,
    DeleteContainer = 20,
    CreateTtl = 21,
    MultiRead = 22,
    Auth = 100,
    SetWatches = 101,
    Sasl = 102,
    GetEphemerals = 103,
    GetAllChildrenNumber = 104,
    SetWatches2 = 105,
    AddWatch = 106,
    WhoAmI = 107,
    /// zlock's native lock ([`LockRequest`](crate::records::LockRequest)); not ZooKeeper's.
    Lock = 1001,
    CreateSession = -10,
    CloseSession = -11,
    Error = -1,
}

impl OpCode {
    /// Every code, for exhaustive tests.
    pub const ALL: [OpCode; 34] = [
        OpCode::Notification,
        OpCode::Create,
        OpCode::Delete,
        OpCode::Exists,
        OpCode::GetData,
        OpCode::SetData,
        OpCode::GetAcl,
        OpCode::SetAcl,
        OpCode::GetChildren,
        OpCode::Sync,
        OpCode::Ping,
        OpCode::GetChildren2,
        OpCode::Check,
        OpCode::Multi,
        OpCode::Create2,
        OpCode::Reconfig,
        OpCode::CheckWatches,
        OpCode::RemoveWatches,
        OpCode::CreateContainer,
        OpCode::DeleteContainer,
        OpCode::CreateTtl,
        OpCode::MultiRead,
        OpCode::Auth,
        OpCode::SetWatches,
        OpCode::Sasl,
        OpCode::GetEphemerals,
        OpCode::GetAllChildrenNumber,
        OpCode::SetWatches2,
        OpCode::AddWatch,
        OpCode::WhoAmI,
        OpCode::Lock,
        OpCode::CreateSession,
        OpCode::CloseSession,
        OpCode::Error,
    ];

    pub fn from_i32(v: i32) -> Option<OpCode> {
        OpCode::ALL.iter().copied().find(|c| *c as i32 == v)
    }

    pub fn code(self) -> i32 {
        self as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for c in OpCode::ALL {
            assert_eq!(OpCode::from_i32(c.code()), Some(c));
        }
        assert_eq!(OpCode::from_i32(10), None);
        assert_eq!(OpCode::Create2.code(), 15);
        assert_eq!(OpCode::WhoAmI.code(), 107);
    }
}
