//! Request and response records of the ordinary operations.

use super::{Acl, Stat};
use crate::record;

record! {
    /// create (1), create2 (15), createContainer (19).
    pub struct CreateRequest {
        pub path: String,
        /// `None` is jute's null buffer, which ZooKeeper keeps apart from empty.
        pub data: Option<Vec<u8>>,
        pub acl: Vec<Acl>,
        pub flags: i32,
    }
}

record! {
    /// createTTL (21).
    pub struct CreateTtlRequest {
        pub path: String,
        /// `None` is jute's null buffer, which ZooKeeper keeps apart from empty.
        pub data: Option<Vec<u8>>,
        pub acl: Vec<Acl>,
        pub flags: i32,
        pub ttl: i64,
    }
}

record! {
    pub struct CreateResponse {
        pub path: String,
    }
}

record! {
    pub struct Create2Response {
        pub path: String,
        pub stat: Stat,
    }
}

record! {
    pub struct DeleteRequest {
        pub path: String,
        pub version: i32,
    }
}

record! {
    /// exists (3), getData (4), getChildren (8), getChildren2 (12): a path and a watch flag.
    pub struct PathWatchRequest {
        pub path: String,
        pub watch: bool,
    }
}

record! {
    /// getACL (6), sync (9), getEphemerals (103), getAllChildrenNumber (104): a path.
    pub struct PathRequest {
        pub path: String,
    }
}

record! {
    pub struct StatResponse {
        pub stat: Stat,
    }
}

record! {
    pub struct GetDataResponse {
        /// `None` is jute's null buffer, which ZooKeeper keeps apart from empty.
        pub data: Option<Vec<u8>>,
        pub stat: Stat,
    }
}

record! {
    pub struct SetDataRequest {
        pub path: String,
        /// `None` is jute's null buffer, which ZooKeeper keeps apart from empty.
        pub data: Option<Vec<u8>>,
        pub version: i32,
    }
}

record! {
    pub struct GetAclResponse {
        pub acl: Vec<Acl>,
        pub stat: Stat,
    }
}

record! {
    pub struct SetAclRequest {
        pub path: String,
        pub acl: Vec<Acl>,
        pub version: i32,
    }
}

record! {
    pub struct GetChildrenResponse {
        pub children: Vec<String>,
    }
}

record! {
    pub struct GetChildren2Response {
        pub children: Vec<String>,
        pub stat: Stat,
    }
}

record! {
    /// check (13), only inside multi.
    pub struct CheckVersionRequest {
        pub path: String,
        pub version: i32,
    }
}

record! {
    pub struct GetEphemeralsResponse {
        pub ephemerals: Vec<String>,
    }
}

record! {
    pub struct GetAllChildrenNumberResponse {
        pub total_number: i32,
    }
}

record! {
    pub struct AuthPacket {
        pub auth_type: i32,
        pub scheme: String,
        pub auth: Vec<u8>,
    }
}

record! {
    pub struct ClientInfo {
        pub auth_scheme: String,
        pub user: String,
    }
}

record! {
    pub struct WhoAmIResponse {
        pub client_info: Vec<ClientInfo>,
    }
}

record! {
    pub struct ReconfigRequest {
        /// `server.N=...` entries, comma-separated; null if none.
        pub joining_servers: Option<String>,
        /// Member ids, comma-separated; null if none.
        pub leaving_servers: Option<String>,
        /// The whole new member list; null for an incremental change.
        pub new_members: Option<String>,
        pub cur_config_id: i64,
    }
}

record! {
    pub struct SaslRequest {
        pub token: Vec<u8>,
    }
}
