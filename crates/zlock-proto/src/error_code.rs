//! ZooKeeper error codes (`KeeperException.Code`, 3.8), exact numbers.

use thiserror::Error;

/// A non-zero `err` value of a `ReplyHeader`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
#[repr(i32)]
pub enum ErrorCode {
    #[error("system error")]
    SystemError = -1,
    #[error("runtime inconsistency")]
    RuntimeInconsistency = -2,
    #[error("data inconsistency")]
    DataInconsistency = -3,
    #[error("connection loss")]
    ConnectionLoss = -4,
    #[error("marshalling error")]
    MarshallingError = -5,
    #[error("unimplemented")]
    Unimplemented = -6,
    #[error("operation timeout")]
    OperationTimeout = -7,
    #[error("bad arguments")]
    BadArguments = -8,
    #[error("unknown session")]
    UnknownSession = -12,
    #[error("new config has no quorum")]
    NewConfigNoQuorum = -13,
    #[error("reconfig in progress")]
    ReconfigInProgress = -14,
    #[error("API error")]
    ApiError = -100,
    #[error("no node")]
    NoNode = -101,
    #[error("not authorized")]
    NoAuth = -102,
    #[error("bad version")]
    BadVersion = -103,
    #[error("ephemeral nodes may not have children")]
    NoChildrenForEphemerals = -108,
    #[error("node exists")]
    NodeExists = -110,
    #[error("directory not empty")]
    NotEmpty = -111,
    #[error("session expired")]
    SessionExpired = -112,
    #[error("invalid callback")]
    InvalidCallback = -113,
    #[error("invalid ACL")]
    InvalidAcl = -114,
    #[error("authentication failed")]
    AuthFailed = -115,
    #[error("session moved")]
    SessionMoved = -118,
    #[error("not a read-only call")]
    NotReadOnly = -119,
    #[error("ephemeral on local session")]
    EphemeralOnLocalSession = -120,
    #[error("no watcher")]
    NoWatcher = -121,
    #[error("request timeout")]
    RequestTimeout = -122,
    #[error("reconfig disabled")]
    ReconfigDisabled = -123,
    #[error("session closed, SASL auth required")]
    SessionClosedRequireSaslAuth = -124,
    #[error("quota exceeded")]
    QuotaExceeded = -125,
    #[error("throttled operation")]
    ThrottledOp = -127,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 31] = [
        ErrorCode::SystemError,
        ErrorCode::RuntimeInconsistency,
        ErrorCode::DataInconsistency,
        ErrorCode::ConnectionLoss,
        ErrorCode::MarshallingError,
        ErrorCode::Unimplemented,
        ErrorCode::OperationTimeout,
        ErrorCode::BadArguments,
        ErrorCode::UnknownSession,
        ErrorCode::NewConfigNoQuorum,
        ErrorCode::ReconfigInProgress,
        ErrorCode::ApiError,
        ErrorCode::NoNode,
        ErrorCode::NoAuth,
        ErrorCode::BadVersion,
        ErrorCode::NoChildrenForEphemerals,
        ErrorCode::NodeExists,
        ErrorCode::NotEmpty,
        ErrorCode::SessionExpired,
        ErrorCode::InvalidCallback,
        ErrorCode::InvalidAcl,
        ErrorCode::AuthFailed,
        ErrorCode::SessionMoved,
        ErrorCode::NotReadOnly,
        ErrorCode::EphemeralOnLocalSession,
        ErrorCode::NoWatcher,
        ErrorCode::RequestTimeout,
        ErrorCode::ReconfigDisabled,
        ErrorCode::SessionClosedRequireSaslAuth,
        ErrorCode::QuotaExceeded,
        ErrorCode::ThrottledOp,
    ];

    pub fn code(self) -> i32 {
        self as i32
    }

    /// The code for a wire value; 0 (Ok) and unknown values give `None`.
    pub fn from_i32(v: i32) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| *c as i32 == v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_i32(c.code()), Some(c));
        }
        assert_eq!(ErrorCode::from_i32(0), None);
        assert_eq!(ErrorCode::NoNode.code(), -101);
        assert_eq!(ErrorCode::ThrottledOp.code(), -127);
    }
}
