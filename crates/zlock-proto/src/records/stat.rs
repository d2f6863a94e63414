use crate::record;

record! {
    /// A znode's metadata (68 bytes on the wire).
    pub struct Stat {
        /// zxid of the change that created the node.
        pub czxid: i64,
        /// zxid of the change that last modified its data.
        pub mzxid: i64,
        /// Creation time, ms since the epoch.
        pub ctime: i64,
        /// Last data change time, ms since the epoch.
        pub mtime: i64,
        /// Number of data changes.
        pub version: i32,
        /// Number of changes to the children.
        pub cversion: i32,
        /// Number of ACL changes.
        pub aversion: i32,
        /// Owning session for an ephemeral node, else 0.
        pub ephemeral_owner: i64,
        pub data_length: i32,
        pub num_children: i32,
        /// zxid of the change that last modified the children.
        pub pzxid: i64,
    }
}
