//! Lock-delay through the protocol: a holder that asked for one and dies (its session
//! expires) leaves its lock granting nothing for that long; a clean release hands over
//! at once, whatever the delay; the recipes' `with_lock_delay`, and a paused holder
//! that comes back inside the delay.

use std::time::{Duration, Instant};

use zlock::recipes::Mutex;
use zlock::{ConnectionState, LockRequest, NativeLock};

use super::{connect, mntr, req, wait_mntr, within};
use crate::proxy::Proxy;
use crate::target::Target;

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
    // The observer's member may not have applied the holder's node yet (a read is
    // served by the member it reaches): a sync first, as a ZooKeeper client would.
    observer.sync(P).await.unwrap();
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

/// The recipe with `with_lock_delay`: its holder (member 0, through a proxy alone) is
/// cut off past its session, as a paused process would be; when it comes back, inside
/// the delay, `lost()` has fired and its fenced write is refused, and the waiter
/// (member 1, the plain recipe) is granted only after that and no sooner than half the
/// delay after the holder's node went, with a higher fencing token.
pub async fn paused_recipe_holder_sees_lost_and_its_fenced_write_is_refused(t: &Target) {
    const P: &str = "/delay-recipe";
    const RESOURCE: &str = "/delay-recipe-resource";
    const DELAY: Duration = Duration::from_secs(8);
    let holder_proxy = Proxy::start(t.member(0)).await;
    let (holder, _) = zlock::Client::connect(&holder_proxy.addr.to_string(), 2_000)
        .await
        .unwrap();
    let waiter = connect(&t.hosts(1)).await;
    let observer = connect(&t.hosts(2)).await;
    observer
        .create(RESOURCE, b"0", zlock::CreateMode::Persistent)
        .await
        .unwrap();
    let lock = Mutex::new(holder.clone(), P).with_lock_delay(DELAY);
    let guard = lock.acquire().await.unwrap();
    let lost = guard.lost();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let g = Mutex::new(waiter, P).acquire().await.unwrap();
            (g, Instant::now())
        }
    });
    // The observer reads from its own member, which may not have applied the lock's
    // parent yet (a read is served by the member it reaches, as in ZooKeeper): NoNode
    // there is "nobody queued yet".
    within("the waiter queued", async {
        loop {
            let queued = match observer.get_children(P, false).await {
                Ok(children) => children.len(),
                Err(e) if e.code() == Some(zlock_proto::ErrorCode::NoNode) => 0,
                Err(e) => panic!("listing {P}: {e}"),
            };
            if queued >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let (Some(_), gone) = observer.exists_watch(guard.node()).await.unwrap() else {
        panic!("the holder's node exists")
    };
    holder_proxy.block(true);
    holder_proxy.cut();
    within("the holder's node deleted by its expiry", gone)
        .await
        .unwrap();
    let deleted = Instant::now();
    // The holder resumes: it learns its session is gone, and writes nothing under
    // the lock.
    holder_proxy.block(false);
    let state = within("lost() fires", lost).await;
    assert!(
        matches!(state, ConnectionState::Lost | ConnectionState::Suspended),
        "{state:?}"
    );
    let fenced = guard
        .fenced(vec![zlock::MultiOp::SetData(zlock::SetDataRequest {
            path: RESOURCE.into(),
            data: Some(b"stale".to_vec()),
            version: -1,
        })])
        .await;
    let refused = Instant::now();
    assert!(
        fenced.is_err(),
        "a fenced write after the lock was lost: {fenced:?}"
    );
    let (g, granted) = within("grant after the lock-delay", waiting).await.unwrap();
    assert!(refused < granted, "the holder resumed inside the delay");
    let waited = granted.duration_since(deleted);
    assert!(
        waited >= DELAY / 2,
        "granted {waited:?} after the holder's node went, inside its {DELAY:?} lock-delay"
    );
    assert!(g.fencing_token() > guard.fencing_token());
    assert_eq!(observer.get_data(RESOURCE, false).await.unwrap().0, b"0");
    g.release().await.unwrap();
    drop(guard);
}

/// The recipe refuses a lock-delay on the standard path rather than lock without it.
pub async fn recipe_refuses_a_lock_delay_without_the_native_path(t: &Target) {
    let c = connect(&t.hosts(0))
        .await
        .with_lock_path(zlock::LockPath::Recipe);
    let e = Mutex::new(c.clone(), "/delay-std")
        .with_lock_delay(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(e, zlock::Error::LockDelayUnsupported);
    assert!(c.exists("/delay-std", false).await.unwrap().is_none());
}
