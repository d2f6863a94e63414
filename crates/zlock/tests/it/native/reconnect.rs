//! A native waiter granted while its connection is down gets the grant on reconnect;
//! a waiter whose re-sent request is cut off by a second break keeps waiting.

use zlock::{ConnectionState, NativeLock};

use super::{connect, mntr, req, within};
use crate::proxy::Proxy;
use crate::target::Target;

/// The waiter's connection is cut (and new ones refused) before the holder releases, so
/// the grant the server pushes has no connection to go to; once the waiter reconnects
/// its client re-sends the request with RESUME and learns that it holds. The holder is
/// on member 0; the waiter reaches member 1 through the proxy alone, and member 1 is
/// the one that makes the grant it cannot push.
pub async fn grant_made_while_disconnected_arrives_on_reconnect(t: &Target) {
    const WAITERS: &str = "zlock_native_lock_waiters";
    let holder = connect(&t.hosts(0)).await;
    let waiter_proxy = Proxy::start(t.member(1)).await;
    let waiter = connect(&waiter_proxy.addr.to_string()).await;
    let base = mntr(t.member(1), WAITERS).await;
    let NativeLock::Granted { node: held, .. } = holder.lock_native(req("/dc", "h")).await.unwrap()
    else {
        panic!("uncontended: granted")
    };
    let NativeLock::Queued { node, grant, .. } = waiter.lock_native(req("/dc", "w")).await.unwrap()
    else {
        panic!("behind the holder: queued")
    };
    assert_eq!(mntr(t.member(1), WAITERS).await, base + 1);

    waiter_proxy.block(true);
    waiter_proxy.cut();
    let mut st = waiter.state_stream();
    within(
        "waiter disconnected",
        st.wait_for(|s| *s == ConnectionState::Suspended),
    )
    .await
    .unwrap();
    holder.delete(&held, -1).await.unwrap();
    // The server granted (the waiter is no longer registered) while nobody listened.
    within("grant made on the server", async {
        while mntr(t.member(1), WAITERS).await != base {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(waiter.state(), ConnectionState::Suspended, "still away");

    waiter_proxy.block(false);
    let g = within("grant after reconnect", grant).await.unwrap();
    assert_eq!(g.node, node);
    assert_eq!(waiter.state(), ConnectionState::Reconnected);
    // It holds: a TRY from another session is refused, and its release frees the lock.
    let mut r = req("/dc", "t");
    r.flags = zlock::lock_flags::TRY;
    assert!(matches!(
        holder.lock_native(r.clone()).await.unwrap(),
        NativeLock::Busy
    ));
    waiter.delete(&node, -1).await.unwrap();
    assert!(matches!(
        holder.lock_native(r).await.unwrap(),
        NativeLock::Granted { .. }
    ));
}

/// The connection breaks again after a reconnect, before the server has answered the
/// waiter's re-sent request (RESUME): the waiter still waits, is re-sent on the next
/// reconnect, and gets its grant. The holder is on member 0, the waiter reaches member
/// 1 through the proxy.
pub async fn waiter_survives_a_second_break_before_its_resume_is_answered(t: &Target) {
    let holder = connect(&t.hosts(0)).await;
    let waiter_proxy = Proxy::start(t.member(1)).await;
    let waiter = connect(&waiter_proxy.addr.to_string()).await;
    let NativeLock::Granted { node: held, .. } = holder.lock_native(req("/db", "h")).await.unwrap()
    else {
        panic!("uncontended: granted")
    };
    let NativeLock::Queued { node, grant, .. } = waiter.lock_native(req("/db", "w")).await.unwrap()
    else {
        panic!("behind the holder: queued")
    };

    // First break: the waiter reconnects, and its re-sent request is held by the proxy.
    waiter_proxy.stall_after_hello(true);
    let mut st = waiter.state_stream();
    st.borrow_and_update();
    waiter_proxy.cut();
    within(
        "waiter reconnected",
        st.wait_for(|s| *s == ConnectionState::Reconnected),
    )
    .await
    .unwrap();
    // Second break, with the re-sent request unanswered.
    waiter_proxy.stall_after_hello(false);
    st.borrow_and_update();
    waiter_proxy.cut();
    within(
        "waiter reconnected again",
        st.wait_for(|s| *s == ConnectionState::Reconnected),
    )
    .await
    .unwrap();

    holder.delete(&held, -1).await.unwrap();
    let g = within("grant after two breaks", grant).await.unwrap();
    assert_eq!(g.node, node);
}
