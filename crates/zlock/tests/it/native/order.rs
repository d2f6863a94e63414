//! The server's native index and the client's recipes put the same children in the same
//! order (`zlock_proto::lock_order`): names past the counter's wrap, foreign node kinds
//! and names with no sequence number, through the real protocol.

use std::time::Duration;

use zlock::{lock_flags, lock_mode, Client, CreateMode, LockPath, NativeLock};

use super::{connect, req, within};
use crate::target::{sync, Target};

/// How long a grant that must not come is given to show up anyway.
const QUIET: Duration = Duration::from_millis(300);

fn recipe(c: &Client) -> Client {
    c.clone().with_lock_path(LockPath::Recipe)
}

async fn try_native(c: &Client, path: &str, guid: &str, mode: i32) -> NativeLock {
    let mut r = req(path, guid);
    if mode == lock_mode::READ {
        r.prefix = format!("_c_{guid}-__READ__");
    }
    r.mode = mode;
    r.flags = lock_flags::TRY;
    c.lock_native(r).await.unwrap()
}

/// A kazoo-style node (`__lock__`, no Curator marker) is a writer ahead of everyone for
/// both sides; a node without a sequence number (`config`) blocks nobody on either.
/// `admin`, `a` and `b` on members 0, 1 and 2 (every check of `a` and `b` is a write,
/// ordered after `admin`'s).
pub async fn foreign_kinds_block_alike_and_unnumbered_names_block_nobody(t: &Target) {
    let admin = connect(&t.hosts(0)).await;
    let (a, b) = (connect(&t.hosts(1)).await, connect(&t.hosts(2)).await);
    let p = "/agree/kinds";
    admin.ensure_path(p).await.unwrap();
    admin
        .create(&format!("{p}/config"), b"", CreateMode::Persistent)
        .await
        .unwrap();
    let kazoo = format!("{p}/0f1e__lock__0000000000");
    admin
        .create(&kazoo, b"", CreateMode::Persistent)
        .await
        .unwrap();

    let mutex = zlock::Mutex::new(recipe(&a), p);
    assert!(
        mutex.try_acquire().await.unwrap().is_none(),
        "the recipe mutex waits for the kazoo node"
    );
    let rw = zlock::ReadWriteLock::new(recipe(&a), p);
    assert!(
        rw.read_lock().try_acquire().await.unwrap().is_none(),
        "a recipe reader counts the kazoo node as a writer"
    );
    assert!(matches!(
        try_native(&b, p, "n1", lock_mode::EXCLUSIVE).await,
        NativeLock::Busy
    ));
    assert!(matches!(
        try_native(&b, p, "n2", lock_mode::READ).await,
        NativeLock::Busy
    ));

    admin.delete(&kazoo, -1).await.unwrap();
    let g = mutex
        .try_acquire()
        .await
        .unwrap()
        .expect("only `config` is left: it blocks nobody");
    assert!(matches!(
        try_native(&b, p, "n3", lock_mode::EXCLUSIVE).await,
        NativeLock::Busy
    ));
    g.release().await.unwrap();
    let NativeLock::Granted { node, .. } = try_native(&b, p, "n4", lock_mode::EXCLUSIVE).await
    else {
        panic!("free but for `config`: the native contender holds")
    };
    assert!(rw.read_lock().try_acquire().await.unwrap().is_none());
    b.delete(&node, -1).await.unwrap();
}

/// Literal names past the wrap at 2^31 (`-2147483648` is eleven characters, then up to
/// `-000000001`) come after 2147483647, in creation order, for both sides: the client's
/// order shows in a latch's participants, the server's in when it grants a native
/// contender queued on a wrapped name, and a recipe contender and that native one never
/// both hold. `admin`, the native contender and the recipe one on members 0, 1 and 2.
pub async fn wrapped_counters_order_alike(t: &Target) {
    let admin = connect(&t.hosts(0)).await;
    let native = connect(&t.hosts(1)).await;
    let r = connect(&t.hosts(2)).await;
    let p = "/agree/wrap";
    admin.ensure_path(p).await.unwrap();
    let lit = |name: &str| format!("{p}/{name}");
    for name in ["config", "_c_a-lock-2147483647", "_c_b-lock--2147483648"] {
        admin
            .create(&lit(name), name.as_bytes(), CreateMode::Persistent)
            .await
            .unwrap();
    }
    // The native contender's node is the newest of all: counter 2^32 - 3.
    let own = "_c_n-lock--000000003";
    native
        .create(&lit(own), own.as_bytes(), CreateMode::Ephemeral)
        .await
        .unwrap();

    let latch = zlock::LeaderLatch::new(admin.clone(), p, "observer");
    sync(&admin).await;
    assert_eq!(
        latch.participants().await.unwrap(),
        ["_c_a-lock-2147483647", "_c_b-lock--2147483648", own],
        "the client's order"
    );

    // RESUME takes the session's existing node as its contender.
    let mut rq = req(p, "n");
    rq.flags = lock_flags::RESUME;
    let NativeLock::Queued {
        node, mut grant, ..
    } = native.lock_native(rq).await.unwrap()
    else {
        panic!("two names of earlier counters are ahead of the native contender")
    };
    assert_eq!(node, lit(own));

    // A recipe contender's fresh node has a small counter: first for both sides.
    let mutex = zlock::Mutex::new(recipe(&r), p);
    let g = mutex
        .try_acquire()
        .await
        .unwrap()
        .expect("the recipe's node is first");
    assert!(
        tokio::time::timeout(QUIET, &mut grant).await.is_err(),
        "granted while the recipe holds"
    );
    g.release().await.unwrap();
    assert!(
        tokio::time::timeout(QUIET, &mut grant).await.is_err(),
        "granted with 2147483647 and -2147483648 still ahead"
    );
    admin
        .delete(&lit("_c_a-lock-2147483647"), -1)
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(QUIET, &mut grant).await.is_err(),
        "granted with -2147483648 still ahead"
    );
    admin
        .delete(&lit("_c_b-lock--2147483648"), -1)
        .await
        .unwrap();
    let got = within("grant once the earlier counters are gone", grant)
        .await
        .unwrap();
    assert_eq!(got.node, lit(own));
}
