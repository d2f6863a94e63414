//! Lock-delay through the protocol: a holder that asked for one and dies (its session
//! expires) leaves its lock granting nothing for that long; a clean release hands over
//! at once, whatever the delay.

use std::time::{Duration, Instant};

use zlock::{ConnectionState, LockRequest, NativeLock};

use super::proxy::Proxy;
use super::target::Target;
use super::{connect, mntr, req, wait_mntr, within};

const RUNNING: &str = "zlock_lock_delays_running";

fn with_delay(path: &str, guid: &str, delay: Duration) -> LockRequest {
    LockRequest {
        lock_delay_ms: delay.as_millis() as i32,
        ..req(path, guid)
    }
}

/// The holder (member 0, through a proxy alone) asks for a 2 s lock-delay and is cut
/// off until its session expires; the waiter (member 1) is granted no sooner than the
/// delay after the holder's node went. The bound checked is half the delay, measured
/// from when an observer (member 2) saw the node go, which can only be later than the
/// expiry: a lock granted at the expiry, as without a delay, misses it by a second.
pub async fn lock_delay_after_the_holder_dies(t: &Target) {
    const P: &str = "/delay-dies";
    const DELAY: Duration = Duration::from_secs(2);
    let holder_proxy = Proxy::start(t.member(0)).await;
    let (holder, _) = zlock::Client::connect(&holder_proxy.addr.to_string(), 2_000)
        .await
        .unwrap();
    let waiter = connect(&t.hosts(1)).await;
    let observer = connect(&t.hosts(2)).await;
    let NativeLock::Granted { node: held, .. } =
        holder.lock_native(with_delay(P, "h", DELAY)).await.unwrap()
    else {
        panic!("uncontended: granted")
    };
    let NativeLock::Queued { node, grant, .. } = waiter.lock_native(req(P, "w")).await.unwrap()
    else {
        panic!("behind the holder: queued")
    };
    let (Some(_), gone) = observer.exists_watch(&held).await.unwrap() else {
        panic!("the holder's node exists")
    };
    holder_proxy.block(true);
    holder_proxy.cut();
    within("the holder's node deleted by its expiry", gone)
        .await
        .unwrap();
    let deleted = Instant::now();
    assert_eq!(mntr(t.member(2), RUNNING).await, 1, "a lock-delay runs");
    let g = within("grant after the lock-delay", grant).await.unwrap();
    let waited = deleted.elapsed();
    assert_eq!(g.node, node);
    assert!(
        waited >= DELAY / 2,
        "granted {waited:?} after the holder's node went, inside its {DELAY:?} lock-delay"
    );
    wait_mntr(t.member(2), RUNNING, 0).await;
    // The holder's client learns its session is gone once it can reach a server.
    holder_proxy.block(false);
    let mut st = holder.state_stream();
    within("holder sees its session lost", async {
        while *st.borrow_and_update() != ConnectionState::Lost {
            st.changed().await.unwrap();
        }
    })
    .await;
    waiter.delete(&node, -1).await.unwrap();
}

/// A holder that asked for a 20 s lock-delay releases by deleting its node: the waiter
/// is granted in that commit, well inside the 20 s, and no lock-delay runs.
pub async fn clean_release_hands_over_at_once(t: &Target) {
    const P: &str = "/delay-release";
    const DELAY: Duration = Duration::from_secs(20);
    let holder = connect(&t.hosts(0)).await;
    let waiter = connect(&t.hosts(1)).await;
    let NativeLock::Granted { node: held, .. } =
        holder.lock_native(with_delay(P, "h", DELAY)).await.unwrap()
    else {
        panic!("uncontended: granted")
    };
    let NativeLock::Queued { node, grant, .. } =
        waiter.lock_native(with_delay(P, "w", DELAY)).await.unwrap()
    else {
        panic!("behind the holder: queued")
    };
    holder.delete(&held, -1).await.unwrap();
    let g = tokio::time::timeout(DELAY / 2, grant)
        .await
        .expect("a release hands over without the lock-delay")
        .unwrap();
    assert_eq!(g.node, node);
    assert_eq!(mntr(t.member(1), RUNNING).await, 0);
    waiter.delete(&node, -1).await.unwrap();
}

/// A lock-delay longer than the bound is refused with BadArguments, nothing created.
pub async fn lock_delay_out_of_bounds_is_refused(t: &Target) {
    let c = connect(&t.hosts(0)).await;
    let too_long = LockRequest {
        lock_delay_ms: zlock_proto::records::MAX_LOCK_DELAY_MS + 1,
        ..req("/delay-bad", "x")
    };
    let e = c.lock_native(too_long).await.unwrap_err();
    assert_eq!(e.code(), Some(zlock_proto::ErrorCode::BadArguments));
    assert!(c.exists("/delay-bad", false).await.unwrap().is_none());
}
