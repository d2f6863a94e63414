//! The native lock (opcode 1001): grants decided in the commit that creates or removes a
//! node, FIFO with recipe contenders on the same path, one grant per hand-over however
//! long the queue; lock-delay after a holder dies.

use zlock_core::{Applied, TxnBody};
use zlock_proto::records::{lock_flags, lock_mode, LockRequest, LockResponse, MAX_LOCK_DELAY_MS};
use zlock_proto::{Reader, Record, Request};

use crate::harness::*;

fn lock_req(path: &str, prefix: &str, mode: i32, leases: i32, flags: i32) -> Request {
    Request::Lock(LockRequest {
        path: path.into(),
        prefix: prefix.into(),
        data: Some(b"me".to_vec()),
        acl: open(),
        mode,
        leases,
        flags,
        release: String::new(),
        ..LockRequest::default()
    })
}

fn answer(a: &Applied) -> LockResponse {
    assert_eq!(a.reply.err, OK, "lock failed: {}", a.reply.err);
    LockResponse::decode(&mut Reader::new(&a.reply.body)).unwrap()
}

fn lock(h: &mut Harness, s: SessionId, path: &str, mode: i32) -> (LockResponse, Applied) {
    let a = h.write(s, lock_req(path, "_c_x-lock-", mode, 1, 0));
    (answer(&a), a)
}

/// The sessions the grants of `a` went to, with their nodes.
fn grants(a: &Applied) -> Vec<(SessionId, String)> {
    a.grants.iter().map(|(s, g)| (*s, g.node.clone())).collect()
}

#[test]
fn first_contender_holds_and_parents_are_containers() {
    let mut h = Harness::new();
    let s = h.session();
    let (r, a) = lock(&mut h, s, "/app/locks/l", lock_mode::EXCLUSIVE);
    assert!(r.granted);
    assert_eq!(r.node, "/app/locks/l/_c_x-lock-0000000000");
    assert_eq!(r.czxid, a.zxid.0, "fencing token is the node's czxid");
    assert!(h.has("/app/locks/l/_c_x-lock-0000000000"));
    let n = h.dump();
    assert_eq!(n["/app"].kind, zlock_core::tree::NodeKind::Container);
    assert_eq!(
        n["/app/locks/l"].kind,
        zlock_core::tree::NodeKind::Container
    );
    assert_eq!(
        n["/app/locks/l/_c_x-lock-0000000000"].kind,
        zlock_core::tree::NodeKind::Ephemeral(s)
    );
}

#[test]
fn waiters_are_granted_in_order_one_per_release() {
    let mut h = Harness::new();
    let ss: Vec<SessionId> = (0..4).map(|_| h.session()).collect();
    let mut nodes = Vec::new();
    for (i, s) in ss.iter().enumerate() {
        let (r, a) = lock(&mut h, *s, "/l", lock_mode::EXCLUSIVE);
        assert_eq!(r.granted, i == 0);
        assert!(a.grants.is_empty());
        nodes.push(r.node);
    }
    for i in 0..3 {
        let a = h.delete(ss[i], &nodes[i], -1);
        assert_eq!(a.reply.err, OK);
        assert_eq!(grants(&a), vec![(ss[i + 1], nodes[i + 1].clone())]);
        assert_eq!(a.grants[0].1.czxid, h.stat(&nodes[i + 1]).czxid);
    }
}

#[test]
fn a_waiter_leaving_the_middle_grants_nobody() {
    let mut h = Harness::new();
    let (a, b, c) = (h.session(), h.session(), h.session());
    let (ra, _) = lock(&mut h, a, "/l", lock_mode::EXCLUSIVE);
    let (rb, _) = lock(&mut h, b, "/l", lock_mode::EXCLUSIVE);
    let (rc, _) = lock(&mut h, c, "/l", lock_mode::EXCLUSIVE);
    assert!(h.delete(b, &rb.node, -1).grants.is_empty());
    let x = h.delete(a, &ra.node, -1);
    assert_eq!(grants(&x), vec![(c, rc.node)]);
}

#[test]
fn session_close_and_expiry_hand_the_lock_on() {
    let mut h = Harness::new();
    let (a, b) = (h.session(), h.session());
    lock(&mut h, a, "/l", lock_mode::EXCLUSIVE);
    let (rb, _) = lock(&mut h, b, "/l", lock_mode::EXCLUSIVE);
    let x = h.close(a);
    assert_eq!(grants(&x), vec![(b, rb.node)]);
}

#[test]
fn recipe_contenders_share_the_queue() {
    // A Curator-style node created with an ordinary create comes first; the native
    // contender waits for it and is granted when it is deleted.
    let mut h = Harness::new();
    let (curator, native) = (h.session(), h.session());
    h.mk(curator, "/l");
    let a = h.create(curator, "/l/_c_abc-lock-", b"", flags::EPHEMERAL_SEQUENTIAL);
    assert_eq!(a.reply.err, OK);
    let (r, _) = lock(&mut h, native, "/l", lock_mode::EXCLUSIVE);
    assert!(!r.granted);
    assert_eq!(r.node, "/l/_c_x-lock-0000000001");
    // A recipe contender after the native one is behind it.
    let c = h.session();
    h.create(c, "/l/_c_def-lock-", b"", flags::EPHEMERAL_SEQUENTIAL);
    let x = h.delete(curator, "/l/_c_abc-lock-0000000000", -1);
    assert_eq!(grants(&x), vec![(native, r.node.clone())]);
    // Its delete fires the recipe waiter's watch as usual (nothing native about it).
    assert!(h.delete(native, &r.node, -1).grants.is_empty());
}

#[test]
fn readers_share_writers_exclude() {
    let mut h = Harness::new();
    let s: Vec<SessionId> = (0..5).map(|_| h.session()).collect();
    let read = |h: &mut Harness, s| {
        answer(&h.write(s, lock_req("/rw", "_c_x-__READ__", lock_mode::READ, 1, 0)))
    };
    let write = |h: &mut Harness, s| {
        answer(&h.write(s, lock_req("/rw", "_c_x-__WRIT__", lock_mode::WRITE, 1, 0)))
    };
    let r0 = read(&mut h, s[0]);
    let r1 = read(&mut h, s[1]);
    let w2 = write(&mut h, s[2]);
    let r3 = read(&mut h, s[3]);
    let r4 = read(&mut h, s[4]);
    assert!(r0.granted && r1.granted);
    assert!(
        !w2.granted && !r3.granted && !r4.granted,
        "a queued writer blocks later readers"
    );
    assert!(h.delete(s[0], &r0.node, -1).grants.is_empty());
    assert_eq!(
        grants(&h.delete(s[1], &r1.node, -1)),
        vec![(s[2], w2.node.clone())]
    );
    let x = h.delete(s[2], &w2.node, -1);
    assert_eq!(grants(&x), vec![(s[3], r3.node), (s[4], r4.node)]);
}

#[test]
fn semaphore_leases() {
    let mut h = Harness::new();
    let s: Vec<SessionId> = (0..4).map(|_| h.session()).collect();
    let mut r = Vec::new();
    for x in &s {
        let a = h.write(
            *x,
            lock_req("/sem", "_c_x-lease-", lock_mode::SEMAPHORE, 2, 0),
        );
        r.push(answer(&a));
    }
    assert_eq!(
        r.iter().map(|r| r.granted).collect::<Vec<_>>(),
        [true, true, false, false]
    );
    assert_eq!(
        grants(&h.delete(s[1], &r[1].node, -1)),
        vec![(s[2], r[2].node.clone())]
    );
    assert_eq!(
        grants(&h.delete(s[0], &r[0].node, -1)),
        vec![(s[3], r[3].node.clone())]
    );
}

#[test]
fn try_creates_nothing_when_busy() {
    let mut h = Harness::new();
    let (a, b) = (h.session(), h.session());
    lock(&mut h, a, "/l", lock_mode::EXCLUSIVE);
    let r = answer(&h.write(
        b,
        lock_req("/l", "_c_y-lock-", lock_mode::EXCLUSIVE, 1, lock_flags::TRY),
    ));
    assert!(!r.granted);
    assert_eq!(r.node, "");
    assert_eq!(h.children(a, "/l", false).unwrap().len(), 1);
}

#[test]
fn resume_finds_the_sessions_node() {
    let mut h = Harness::new();
    let (a, b) = (h.session(), h.session());
    lock(&mut h, a, "/l", lock_mode::EXCLUSIVE);
    let r1 = answer(&h.write(b, lock_req("/l", "_c_g1-lock-", lock_mode::EXCLUSIVE, 1, 0)));
    // The reply was lost: the retry finds the node instead of queueing a second one.
    let r2 = answer(&h.write(
        b,
        lock_req(
            "/l",
            "_c_g1-lock-",
            lock_mode::EXCLUSIVE,
            1,
            lock_flags::RESUME,
        ),
    ));
    assert_eq!(r1.node, r2.node);
    assert!(!r2.granted);
    assert_eq!(h.children(a, "/l", false).unwrap().len(), 2);
    // Another session's node with the same prefix is not "found".
    let c = h.session();
    let r3 = answer(&h.write(
        c,
        lock_req(
            "/l",
            "_c_g1-lock-",
            lock_mode::EXCLUSIVE,
            1,
            lock_flags::RESUME,
        ),
    ));
    assert_ne!(r3.node, r1.node);
}

#[test]
fn bad_requests_are_refused_cleanly() {
    let mut h = Harness::new();
    let s = h.session();
    for req in [
        lock_req("l", "p-", lock_mode::EXCLUSIVE, 1, 0),
        lock_req("/l", "a/b-", lock_mode::EXCLUSIVE, 1, 0),
        lock_req("/l", "p-", 9, 1, 0),
        lock_req("/l", "p-", lock_mode::SEMAPHORE, 0, 0),
        lock_req("/l/", "p-", lock_mode::EXCLUSIVE, 1, 0),
    ] {
        assert_eq!(h.write(s, req).reply.err, BAD_ARGUMENTS);
    }
    // Under an ephemeral node: ZooKeeper's error for the create.
    h.create(s, "/e", b"", flags::EPHEMERAL);
    assert_eq!(
        h.write(s, lock_req("/e", "p-", lock_mode::EXCLUSIVE, 1, 0))
            .reply
            .err,
        NO_CHILDREN_FOR_EPHEMERALS
    );
}

/// 10,000 waiters: each release grants exactly one waiter, the next in line, and
/// fires no watch event.
#[test]
fn ten_thousand_waiters_one_grant_per_hand_over() {
    let mut h = Harness::new();
    let n = 10_000;
    let ss: Vec<SessionId> = (0..n).map(|_| h.session()).collect();
    let mut nodes = Vec::with_capacity(n);
    for s in &ss {
        let (r, _) = lock(&mut h, *s, "/big", lock_mode::EXCLUSIVE);
        nodes.push(r.node);
    }
    assert_eq!(h.st.locks.waiting(), n - 1);
    for i in 0..n - 1 {
        let a = h.delete(ss[i], &nodes[i], -1);
        assert_eq!(a.grants.len(), 1, "hand-over {i}");
        assert_eq!(a.grants[0].0, ss[i + 1]);
        assert!(a.events.is_empty());
    }
    assert_eq!(h.st.locks.waiting(), 0);
}

#[test]
fn release_and_requeue_in_one_request() {
    let mut h = Harness::new();
    let (a, b) = (h.session(), h.session());
    let (ra, _) = lock(&mut h, a, "/l", lock_mode::EXCLUSIVE);
    let (rb, _) = lock(&mut h, b, "/l", lock_mode::EXCLUSIVE);
    // a releases and queues again in one Txn: b is granted in it, a waits behind b.
    let Request::Lock(mut again) = lock_req("/l", "_c_x2-lock-", lock_mode::EXCLUSIVE, 1, 0) else {
        unreachable!()
    };
    again.release = ra.node.clone();
    let x = h.write(a, Request::Lock(again.clone()));
    let r = answer(&x);
    assert!(!r.granted);
    assert_eq!(grants(&x), vec![(b, rb.node.clone())]);
    assert!(!h.has(&ra.node));
    // b does the same: a is granted, b queues behind it.
    again.release = rb.node.clone();
    again.prefix = "_c_y2-lock-".into();
    let y = h.write(b, Request::Lock(again.clone()));
    assert_eq!(grants(&y), vec![(a, r.node.clone())]);
    // Alone, it is granted at once; a node that is gone already is fine (a retry).
    h.close(b);
    again.release = r.node.clone();
    again.prefix = "_c_z-lock-".into();
    let z = answer(&h.write(a, Request::Lock(again.clone())));
    assert!(z.granted);
    let z2 = answer(&h.write(a, Request::Lock(again.clone())));
    assert!(
        !z2.granted,
        "queued behind its own first node: the release was gone already"
    );
    // Someone else's node, or a node elsewhere, is refused and changes nothing.
    let c = h.session();
    let mut bad = again.clone();
    bad.release = z.node.clone();
    assert_eq!(h.write(c, Request::Lock(bad)).reply.err, BAD_ARGUMENTS);
    h.create(c, "/other", b"", flags::EPHEMERAL);
    let mut bad = again;
    bad.release = "/other".into();
    assert_eq!(h.write(c, Request::Lock(bad)).reply.err, BAD_ARGUMENTS);
    assert!(h.has(&z.node));
}

/// A multi that deletes a waiter's node and then fails is undone: the node is back and
/// so is its waiter, whose grant comes when the holder releases.
#[test]
fn a_failed_multi_keeps_the_waiter_of_the_node_it_restored() {
    let mut h = Harness::new();
    let (holder, waiter, other) = (h.session(), h.session(), h.session());
    let (rh, _) = lock(&mut h, holder, "/l", lock_mode::EXCLUSIVE);
    let (rw, _) = lock(&mut h, waiter, "/l", lock_mode::EXCLUSIVE);
    h.mk(other, "/x");
    let before = h.st.locks.pending();
    assert_eq!(before.len(), 1);
    let (a, res) = h.multi(other, vec![m_delete(&rw.node, -1), m_check("/x", 5)]);
    assert_eq!(multi_errors(&res), vec![OK, BAD_VERSION]);
    assert!(a.grants.is_empty());
    assert!(h.has(&rw.node));
    assert_eq!(
        h.st.locks.pending(),
        before,
        "the index is as before the multi"
    );
    let x = h.delete(holder, &rh.node, -1);
    assert_eq!(grants(&x), vec![(waiter, rw.node)]);
}

/// The same when the multi also deleted the lock path itself: it is still followed
/// after the undo, with its waiter.
#[test]
fn a_failed_multi_that_deleted_the_lock_path_keeps_it_followed() {
    let mut h = Harness::new();
    let (holder, waiter, other) = (h.session(), h.session(), h.session());
    let (rh, _) = lock(&mut h, holder, "/m", lock_mode::EXCLUSIVE);
    let (rw, _) = lock(&mut h, waiter, "/m", lock_mode::EXCLUSIVE);
    h.mk(other, "/x");
    let before = h.st.locks.pending();
    let (_, res) = h.multi(
        other,
        vec![
            m_delete(&rh.node, -1),
            m_delete(&rw.node, -1),
            m_delete("/m", -1),
            m_check("/x", 5),
        ],
    );
    assert_eq!(multi_errors(&res), vec![OK, OK, OK, BAD_VERSION]);
    assert!(h.has(&rw.node) && h.has(&rh.node));
    assert_eq!(h.st.locks.pending(), before);
    let x = h.delete(holder, &rh.node, -1);
    assert_eq!(grants(&x), vec![(waiter, rw.node)]);
}

/// A refused lock request changes nothing, as a failed ZooKeeper request changes
/// nothing: not even the lock path's missing containers are made (found by the seeded
/// simulation: a `release` naming another session's node used to leave them behind).
#[test]
fn a_refused_request_creates_no_containers() {
    let mut h = Harness::new();
    let (a, b) = (h.session(), h.session());
    h.create(a, "/mine", b"", flags::EPHEMERAL);
    h.create(a, "/ro", b"", 0);
    h.write(
        a,
        set_acl(
            "/ro",
            vec![acl(zlock_proto::records::perms::READ, "world", "anyone")],
            0,
        ),
    );
    let before = h.dump();
    let refused = |release: &str, path: &str| {
        let Request::Lock(mut r) = lock_req(path, "_c_x-lock-", lock_mode::EXCLUSIVE, 1, 0) else {
            unreachable!()
        };
        r.release = release.into();
        Request::Lock(r)
    };
    // Another session's node, a node outside the lock, no CREATE on the first missing
    // container's parent, a lock path under an ephemeral node.
    for (req, err) in [
        (refused("/ro", "/new/locks/l"), BAD_ARGUMENTS),
        (refused("/mine", "/new/locks/l"), BAD_ARGUMENTS),
        (refused("", "/ro/locks/l"), NO_AUTH),
        (refused("", "/mine/l"), NO_CHILDREN_FOR_EPHEMERALS),
    ] {
        assert_eq!(h.write(b, req).reply.err, err);
        assert_eq!(h.dump(), before, "a refused lock request changed the tree");
    }
}

/// A lock request asking for a lock-delay of `delay_ms`.
fn lock_with_delay(h: &mut Harness, s: SessionId, path: &str, delay_ms: i32) -> LockResponse {
    let Request::Lock(mut r) = lock_req(path, "_c_x-lock-", lock_mode::EXCLUSIVE, 1, 0) else {
        unreachable!()
    };
    r.lock_delay_ms = delay_ms;
    answer(&h.write(s, Request::Lock(r)))
}

/// An expiry of `s`: a CloseSession no client asked for.
fn expire(h: &mut Harness, s: SessionId) -> Applied {
    let txn = h.txn(SessionId::NONE, TxnBody::CloseSession { session_id: s });
    h.apply(&txn)
}

/// A Txn that changes nothing but carries the time (what the server proposes when a
/// lock-delay is due).
fn tick_txn(h: &mut Harness) -> Applied {
    let txn = h.txn(
        SessionId::NONE,
        TxnBody::DeleteExpired { paths: Vec::new() },
    );
    h.apply(&txn)
}

#[test]
fn lock_delay_holds_back_the_next_grant_after_a_holder_dies() {
    let mut h = Harness::new();
    let (a, b, c) = (h.session(), h.session(), h.session());
    assert!(lock_with_delay(&mut h, a, "/l", 500).granted);
    let rb = lock_with_delay(&mut h, b, "/l", 500);
    assert!(!rb.granted);
    h.tick(100);
    let x = expire(&mut h, a);
    assert!(x.grants.is_empty(), "granted inside the lock-delay");
    assert_eq!(h.st.locks.next_delay_end(), Some(T0 + 100 + 500));
    // A newcomer waits too, and a try finds the lock busy.
    let rc = lock_with_delay(&mut h, c, "/l", 0);
    assert!(!rc.granted);
    let Request::Lock(mut t) = lock_req("/l", "_c_t-lock-", lock_mode::EXCLUSIVE, 1, 0) else {
        unreachable!()
    };
    t.flags = lock_flags::TRY;
    let d = h.session();
    assert!(!answer(&h.write(d, Request::Lock(t))).granted);
    h.tick(499);
    assert!(tick_txn(&mut h).grants.is_empty(), "1 ms early");
    h.tick(1);
    let x = tick_txn(&mut h);
    assert_eq!(
        grants(&x),
        vec![(b, rb.node.clone())],
        "granted when it ends"
    );
    assert_eq!(h.st.locks.next_delay_end(), None);
    // b releases cleanly: c is granted at once.
    let x = h.delete(b, &rb.node, -1);
    assert_eq!(grants(&x), vec![(c, rc.node)]);
}

#[test]
fn lock_delay_ends_at_any_txn_whose_time_reaches_it_and_not_for_a_release() {
    let mut h = Harness::new();
    let (a, b, other) = (h.session(), h.session(), h.session());
    let ra = lock_with_delay(&mut h, a, "/l", 200);
    let rb = lock_with_delay(&mut h, b, "/l", 200);
    // A clean release hands over at once, whatever the delay asked.
    assert_eq!(
        grants(&h.delete(a, &ra.node, -1)),
        vec![(b, rb.node.clone())]
    );
    let a2 = h.session();
    let ra2 = lock_with_delay(&mut h, a2, "/l", 200);
    // A client's own closeSession without a release counts as dying while holding.
    assert!(h.close(b).grants.is_empty());
    h.tick(250);
    // Someone else's write carries the time past the end: the grant rides on it.
    let x = h.create(other, "/unrelated", b"", 0);
    assert_eq!(grants(&x), vec![(a2, ra2.node)]);
}

#[test]
fn lock_delay_only_for_a_holder_that_asked_and_within_bounds() {
    let mut h = Harness::new();
    let (a, b, c) = (h.session(), h.session(), h.session());
    // A holder without a delay: the waiter is granted by the expiry itself.
    lock_with_delay(&mut h, a, "/l", 0);
    let rb = lock_with_delay(&mut h, b, "/l", 1000);
    assert_eq!(grants(&expire(&mut h, a)), vec![(b, rb.node.clone())]);
    // A waiter (not a holder) with a delay dies: nothing is held back.
    let rc = lock_with_delay(&mut h, c, "/l", 1000);
    let d = h.session();
    let rd = lock_with_delay(&mut h, d, "/l", 0);
    assert!(expire(&mut h, c).grants.is_empty());
    assert_eq!(h.st.locks.next_delay_end(), None);
    assert!(!rc.granted);
    // b held with a delay: its expiry holds d back.
    assert!(expire(&mut h, b).grants.is_empty());
    assert!(h.st.locks.next_delay_end().is_some());
    h.tick(1000);
    assert_eq!(grants(&tick_txn(&mut h)), vec![(d, rd.node)]);
    // Out of bounds: refused, nothing created.
    let e = h.session();
    for bad in [MAX_LOCK_DELAY_MS + 1, -2] {
        let Request::Lock(mut r) = lock_req("/l2", "_c_x-lock-", lock_mode::EXCLUSIVE, 1, 0) else {
            unreachable!()
        };
        r.lock_delay_ms = bad;
        assert_eq!(h.write(e, Request::Lock(r)).reply.err, BAD_ARGUMENTS);
    }
    assert!(!h.has("/l2"));
}

/// The operator's view (`LockIndex::view`): entries in queue order, who holds, who
/// waits in which mode, a standard-recipe contender among them, and a running
/// lock-delay.
#[test]
fn view_shows_queue_order_holders_waiters_and_delays() {
    use zlock_core::locks::Standing;
    use zlock_proto::lock_order::Mode;
    let mut h = Harness::new();
    let (a, b, c, d) = (h.session(), h.session(), h.session(), h.session());
    let ra = lock_with_delay(&mut h, a, "/l", 300);
    assert!(ra.granted);
    let rb = lock(&mut h, b, "/l", lock_mode::EXCLUSIVE).0;
    // A Curator-style contender: a plain ephemeral sequential child.
    let (cnode, _) = h.create_ok(c, "/l/_c_y-lock-", b"", flags::EPHEMERAL_SEQUENTIAL);
    let rd = answer(&h.write(d, lock_req("/r", "_c_z-__READ__", lock_mode::READ, 1, 0)));
    assert!(rd.granted);
    let v = h.st.locks.view();
    assert_eq!(v.len(), 2);
    assert_eq!(&*v[0].path, "/l");
    let name = |n: &str| n.rsplit('/').next().unwrap_or_default().to_string();
    let l: Vec<_> = v[0]
        .entries
        .iter()
        .map(|e| (e.name.to_string(), e.owner, e.standing, e.delay_ms))
        .collect();
    assert_eq!(
        l,
        vec![
            (name(&ra.node), a, Standing::Holds, 300),
            (name(&rb.node), b, Standing::Waiting(Mode::Exclusive), 0),
            (name(&cnode), c, Standing::Queued, 0),
        ]
    );
    assert_eq!(v[0].held_until, None);
    assert_eq!(&*v[1].path, "/r");
    assert!(v[1].entries[0].read);
    assert_eq!(v[1].entries[0].standing, Standing::Holds);
    // The holder dies: its lock-delay runs, the waiter still waits.
    expire(&mut h, a);
    let v = h.st.locks.view();
    assert!(v[0].held_until.is_some());
    assert_eq!(
        v[0].entries[0].standing,
        Standing::Waiting(Mode::Exclusive),
        "b is first now, and waits out the delay"
    );
}

#[test]
fn a_leader_clock_that_goes_back_does_not_end_a_lock_delay_early() {
    let mut h = Harness::new();
    let (a, b) = (h.session(), h.session());
    assert!(lock_with_delay(&mut h, a, "/l", 500).granted);
    let rb = lock_with_delay(&mut h, b, "/l", 500);
    // The leader that stamps the close runs 10 s ahead; the next one is right.
    h.tick(10_000);
    assert!(expire(&mut h, a).grants.is_empty());
    assert_eq!(h.st.locks.next_delay_end(), Some(T0 + 10_500));
    h.tick(-10_000);
    // Its Txns apply at the state's time, not before it: still inside the delay.
    assert!(tick_txn(&mut h).grants.is_empty());
    assert_eq!(h.st.time_ms, T0 + 10_000, "time does not go back");
    // The delay ends once the state's time passes it (here at T0 + 10.5 s of the
    // new leader's clock: what a leader whose clock was ahead costs, stretching a
    // delay by its lead, never shortening one).
    h.tick(10_499);
    assert!(tick_txn(&mut h).grants.is_empty(), "1 ms early");
    h.tick(1);
    assert_eq!(grants(&tick_txn(&mut h)), vec![(b, rb.node)]);
}
