use crate::record;

/// xid of a watch notification.
pub const XID_NOTIFICATION: i32 = -1;
/// xid of a ping and its reply.
pub const XID_PING: i32 = -2;
/// xid of an auth packet and its reply.
pub const XID_AUTH: i32 = -4;
/// xid of SetWatches / SetWatches2 after a reconnect.
pub const XID_SET_WATCHES: i32 = -8;

record! {
    pub struct RequestHeader {
        pub xid: i32,
        pub op_type: i32,
    }
}

record! {
    pub struct ReplyHeader {
        pub xid: i32,
        pub zxid: i64,
        pub err: i32,
    }
}

record! {
    /// The body of an error entry in a multi reply, and of addWatch's reply.
    pub struct ErrorResponse {
        pub err: i32,
    }
}
