//! A failed multi leaves the native lock index as it was, through the real protocol.

use std::time::Duration;

use zlock::{CheckVersionRequest, CreateMode, DeleteRequest, MultiOp, MultiResult, NativeLock};

use super::{connect, req};
use crate::target::Target;

/// Long enough for a grant on loopback, short enough to fail fast when it never comes.
const GRANT_WITHIN: Duration = Duration::from_secs(10);

/// Another session's multi `[delete(waiter's node), check(/x, bad version)]` fails and
/// is undone; the waiter still gets its grant when the holder releases. Holder, waiter
/// and other on members 0, 1 and 2.
pub async fn failed_multi_over_a_waiters_node_keeps_its_grant(t: &Target) {
    let holder = connect(&t.hosts(0)).await;
    let waiter = connect(&t.hosts(1)).await;
    let other = connect(&t.hosts(2)).await;
    let NativeLock::Granted { node: held, .. } = holder.lock_native(req("/rb", "h")).await.unwrap()
    else {
        panic!("uncontended: granted")
    };
    let NativeLock::Queued { node, grant, .. } = waiter.lock_native(req("/rb", "w")).await.unwrap()
    else {
        panic!("behind the holder: queued")
    };
    other
        .create("/x", b"", CreateMode::Persistent)
        .await
        .unwrap();
    let rs = other
        .multi(vec![
            MultiOp::Delete(DeleteRequest {
                path: node.clone(),
                version: -1,
            }),
            MultiOp::Check(CheckVersionRequest {
                path: "/x".into(),
                version: 5,
            }),
        ])
        .await
        .unwrap();
    assert!(
        matches!(rs.last(), Some(MultiResult::Error(code)) if *code != 0),
        "the multi failed: {rs:?}"
    );
    assert!(
        other.exists(&node, false).await.unwrap().is_some(),
        "undone"
    );
    holder.delete(&held, -1).await.unwrap();
    let g = tokio::time::timeout(GRANT_WITHIN, grant)
        .await
        .expect("the waiter's grant came after the holder released")
        .unwrap();
    assert_eq!(g.node, node);
}
