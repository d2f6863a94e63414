use crate::record;

/// ACL permission bits (`ZooDefs.Perms`).
pub mod perms {
    pub const READ: i32 = 1;
    pub const WRITE: i32 = 2;
    pub const CREATE: i32 = 4;
    pub const DELETE: i32 = 8;
    pub const ADMIN: i32 = 16;
    pub const ALL: i32 = 31;
}

record! {
    /// An identity: `world:anyone`, `digest:user:hash`, `ip:10.0.0.0/8`, `auth:`...
    pub struct Id {
        pub scheme: String,
        pub id: String,
    }
}

record! {
    pub struct Acl {
        pub perms: i32,
        pub id: Id,
    }
}

impl Id {
    pub fn new(scheme: &str, id: &str) -> Id {
        Id {
            scheme: scheme.to_owned(),
            id: id.to_owned(),
        }
    }
}

impl Acl {
    /// `world:anyone` with every permission (`ZooDefs.Ids.OPEN_ACL_UNSAFE`).
    pub fn open_unsafe() -> Vec<Acl> {
        vec![Acl {
            perms: perms::ALL,
            id: Id::new("world", "anyone"),
        }]
    }
}
