use crate::record;

/// `Watcher.Event.EventType`.
pub mod event_type {
    pub const NONE: i32 = -1;
    pub const NODE_CREATED: i32 = 1;
    pub const NODE_DELETED: i32 = 2;
    pub const NODE_DATA_CHANGED: i32 = 3;
    pub const NODE_CHILDREN_CHANGED: i32 = 4;
    pub const DATA_WATCH_REMOVED: i32 = 5;
    pub const CHILD_WATCH_REMOVED: i32 = 6;
    pub const PERSISTENT_WATCH_REMOVED: i32 = 7;
}

/// `Watcher.Event.KeeperState`.
pub mod keeper_state {
    pub const DISCONNECTED: i32 = 0;
    pub const SYNC_CONNECTED: i32 = 3;
    pub const AUTH_FAILED: i32 = 4;
    pub const EXPIRED: i32 = -112;
    pub const CLOSED: i32 = 7;
}

/// `WatcherType` of checkWatches / removeWatches.
pub mod watcher_type {
    pub const CHILDREN: i32 = 1;
    pub const DATA: i32 = 2;
    pub const ANY: i32 = 3;
    pub const PERSISTENT: i32 = 4;
    pub const PERSISTENT_RECURSIVE: i32 = 5;
}

/// `AddWatchMode`.
pub mod add_watch_mode {
    pub const PERSISTENT: i32 = 0;
    pub const PERSISTENT_RECURSIVE: i32 = 1;
}

record! {
    pub struct WatcherEvent {
        pub event_type: i32,
        pub state: i32,
        pub path: String,
    }
}

record! {
    pub struct SetWatches {
        pub relative_zxid: i64,
        pub data_watches: Vec<String>,
        pub exist_watches: Vec<String>,
        pub child_watches: Vec<String>,
    }
}

record! {
    pub struct SetWatches2 {
        pub relative_zxid: i64,
        pub data_watches: Vec<String>,
        pub exist_watches: Vec<String>,
        pub child_watches: Vec<String>,
        pub persistent_watches: Vec<String>,
        pub persistent_recursive_watches: Vec<String>,
    }
}

record! {
    /// checkWatches (17) and removeWatches (18).
    pub struct WatchesRequest {
        pub path: String,
        pub watcher_type: i32,
    }
}

record! {
    pub struct AddWatchRequest {
        pub path: String,
        pub mode: i32,
    }
}
