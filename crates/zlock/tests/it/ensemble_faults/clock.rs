//! One member's wall clock 120 s off (ahead, or behind), with libfaketime preloaded into
//! its process, while a holder that asked for a 5 s lock-delay closes its session: the
//! waiter is granted no sooner than 5 s after the close was sent, and not much later,
//! whatever the skewed member does. The skewed member is a follower in three roles:
//!
//! 1. it holds the waiter's session (the waiter's lock request is forwarded from it);
//! 2. it forwards another client's writes all through the delay (before the leader
//!    stamped time, each of those writes carried its clock: 120 s ahead, the first one
//!    ended the delay at once);
//! 3. it holds the holder's session, so that it sequences the close (before, the close
//!    carried its clock: 120 s ahead, the delay lasted 125 s; behind, it ended at once).
//!
//! The leader's clock is the ensemble's (README: "Time in an ensemble"); a skewed
//! member that becomes leader would move the ensemble's time, so the test makes sure
//! the skewed member does not lead, and fails saying so if it came to lead meanwhile.

use std::time::{Duration, Instant};

use zlock::{LockRequest, NativeLock};
use zlock_testkit::{require, ChildEnsemble, EnsembleOptions, Peer};

use super::{bounded, connect, within};

/// The lock-delay the holders ask for.
const DELAY: Duration = Duration::from_secs(5);
/// How much longer than the delay a grant may take: the server grants within a tick
/// of the delay's end, and a loaded machine adds to that; a 120 s skew is far beyond.
const STRETCH: Duration = Duration::from_secs(20);
/// The member whose clock is off (a follower: see the module doc).
const SKEWED: usize = 2;

/// Runs the three roles with member [`SKEWED`]'s clock off by `faketime` (libfaketime's
/// `FAKETIME`, e.g. `+120s`).
pub async fn lock_delay_with_a_skewed_follower(faketime: &str) {
    let Some(lib) = require(Peer::Faketime) else {
        return;
    };
    let env = vec![
        ("LD_PRELOAD".to_string(), lib.display().to_string()),
        ("FAKETIME".to_string(), faketime.to_string()),
        // Only the wall clock: timers, elections and session expiry read the
        // monotonic one.
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
    ];
    bounded(async move {
        let opts = EnsembleOptions {
            member_env: vec![(SKEWED, env)],
            // Fewer elections on a loaded machine: the skewed member must not lead.
            heartbeat_ms: 100,
            election_timeout_ms: 1_000,
            ..EnsembleOptions::default()
        };
        let mut ens = ChildEnsemble::start_with(opts).await.unwrap();
        let mut leader = ens.leader().await.unwrap();
        if leader == SKEWED {
            // Stopped, it hands leadership over; back, it follows.
            ens.stop(SKEWED).unwrap();
            ens.start_again(SKEWED).await.unwrap();
            leader = ens.leader().await.unwrap();
        }
        assert_ne!(leader, SKEWED, "the skewed member leads");
        let other = (0..3).find(|i| *i != leader && *i != SKEWED).unwrap();
        let roles = [
            ("holds the waiter", other, SKEWED, None),
            (
                "forwards writes during the delay",
                other,
                leader,
                Some(SKEWED),
            ),
            ("sequences the holder's close", SKEWED, other, None),
        ];
        for (n, (role, holder_at, waiter_at, writer_at)) in roles.into_iter().enumerate() {
            let path = format!("/skew-{n}");
            let waited = one_lock_delay(&ens, &path, holder_at, waiter_at, writer_at).await;
            eprintln!("clock {faketime}, skewed follower {role}: granted after {waited:?}");
            let now = ens.leader().await.unwrap();
            assert_ne!(
                now, SKEWED,
                "the skewed member came to lead during the test (an election on a loaded \
                 machine): its clock then is the ensemble's, and this test shows nothing"
            );
            assert!(
                waited >= DELAY - Duration::from_millis(100),
                "clock {faketime}, the skewed follower {role}: granted {waited:?} after the \
                 holder's close, inside its {DELAY:?} lock-delay"
            );
            assert!(
                waited <= DELAY + STRETCH,
                "clock {faketime}, the skewed follower {role}: granted {waited:?} after the \
                 holder's close, for a {DELAY:?} lock-delay"
            );
        }
    })
    .await;
}

/// A holder on member `holder_at` (asking for [`DELAY`]) and a waiter on `waiter_at`;
/// a writer on `writer_at`, if any, writes all through the delay. Returns how long after
/// the holder's close was sent the waiter was granted.
async fn one_lock_delay(
    ens: &ChildEnsemble,
    path: &str,
    holder_at: usize,
    waiter_at: usize,
    writer_at: Option<usize>,
) -> Duration {
    let holder = connect(&ens.client_addr(holder_at).to_string()).await;
    let waiter = connect(&ens.client_addr(waiter_at).to_string()).await;
    let held = LockRequest {
        lock_delay_ms: DELAY.as_millis() as i32,
        ..LockRequest::exclusive(path, "_c_holder-lock-")
    };
    let NativeLock::Granted { .. } = within("holder's lock", holder.lock_native(held))
        .await
        .unwrap()
    else {
        panic!("an uncontended lock is granted")
    };
    let queued = LockRequest::exclusive(path, "_c_waiter-lock-");
    let NativeLock::Queued { node, grant, .. } =
        within("waiter's lock", waiter.lock_native(queued))
            .await
            .unwrap()
    else {
        panic!("behind the holder: queued")
    };
    let writes = match writer_at {
        Some(i) => {
            let writer = connect(&ens.client_addr(i).to_string()).await;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let stopped = stop.clone();
            let task = tokio::spawn(async move {
                let mut acked = 0u32;
                let node = format!("/skew-writes-{}", std::process::id());
                let _ = writer
                    .create(&node, b"", zlock::CreateMode::Persistent)
                    .await;
                while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    if writer.set_data(&node, b"tick", -1).await.is_ok() {
                        acked += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                acked
            });
            Some((stop, task))
        }
        None => None,
    };
    let closed = Instant::now();
    within("holder's close", holder.close()).await.unwrap();
    let g = tokio::time::timeout(DELAY + STRETCH + Duration::from_secs(10), grant)
        .await
        .unwrap_or_else(|_| panic!("no grant on {path} within {:?}", DELAY + STRETCH))
        .unwrap();
    let waited = closed.elapsed();
    assert_eq!(g.node, node);
    if let Some((stop, task)) = writes {
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let acked = within("the writer's end", task).await.unwrap();
        assert!(
            acked > 0,
            "the skewed member forwarded no write during the delay"
        );
    }
    within("waiter's release", waiter.delete(&node, -1))
        .await
        .unwrap();
    waited
}
