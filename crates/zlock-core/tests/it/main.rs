//! Integration tests of zlock-core against ZooKeeper 3.8 semantics.
//!
//! One test binary (`tests/it`), one module per topic. Every write goes through
//! [`zlock_core::State::apply`] as a Txn built by [`harness::Harness`], which also
//! checks that each Txn takes exactly one zxid.
//!
//! Where a test pins a ZooKeeper quirk, the comment names the ZooKeeper code it follows
//! (`PrepRequestProcessor`, `DataTree`, `DataNode`, `WatchManager`,
//! `FinalRequestProcessor`, `ContainerManager`). Facts marked "checked live" were also
//! confirmed against a real ZooKeeper 3.8.0 (Debian package) with raw requests.

// Helpers outside `#[test]` functions panic on purpose too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

mod t10_create;
mod t20_delete_set;
mod t30_multi;
mod t40_watches;
mod t50_sessions_ephemeral;
mod t55_session_tracker;
mod t60_acl;
mod t70_container_ttl;
mod t80_snapshot;
mod t85_long_read;
mod t90_model;
mod t95_native_lock;
mod t96_native_lock_replicated;
mod t97_simulation;
mod t98_txn_time;
mod t99_handovers;
