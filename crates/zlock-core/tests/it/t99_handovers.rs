//! The hand-over history (`State::handovers`): recorded when the first contender of a
//! lock's queue goes, on native lock paths and on the standard recipes' paths, at the
//! Txn's time and zxid; nothing for a waiter that leaves, for nodes that are no lock,
//! or for a multi that failed; bounded.

use zlock_core::locks::{Handover, HISTORY};
use zlock_proto::records::{lock_mode, LockRequest};
use zlock_proto::Request;

use crate::harness::*;

fn native(h: &mut Harness, s: SessionId, path: &str) -> String {
    let a = h.write(
        s,
        Request::Lock(LockRequest {
            path: path.into(),
            prefix: "_c_x-lock-".into(),
            data: Some(Vec::new()),
            acl: open(),
            mode: lock_mode::EXCLUSIVE,
            leases: 1,
            ..LockRequest::default()
        }),
    );
    assert_eq!(a.reply.err, OK);
    h.st.tree
        .ephemerals_of(s)
        .into_iter()
        .filter(|p| p.starts_with(path))
        .max()
        .unwrap()
}

/// (lock path, from node name, from session, to node name and session).
type Shape = (String, String, SessionId, Option<(String, SessionId)>);

fn recent(h: &Harness) -> Vec<Shape> {
    h.st.handovers
        .recent()
        .map(|x: &Handover| {
            (
                x.path.to_string(),
                x.from.0.to_string(),
                x.from.1,
                x.to.as_ref().map(|(n, s)| (n.to_string(), *s)),
            )
        })
        .collect()
}

fn name(p: &str) -> String {
    p.rsplit('/').next().unwrap().to_owned()
}

#[test]
fn a_native_release_and_a_holders_end_are_hand_overs_a_leaving_waiter_is_not() {
    let mut h = Harness::new();
    let (a, b, c, d) = (h.session(), h.session(), h.session(), h.session());
    let na = native(&mut h, a, "/l");
    let nb = native(&mut h, b, "/l");
    let nc = native(&mut h, c, "/l");
    let nd = native(&mut h, d, "/l");
    assert!(recent(&h).is_empty());

    // c leaves the middle of the queue: nobody's turn came.
    assert_eq!(h.delete(c, &nc, -1).reply.err, OK);
    assert!(recent(&h).is_empty());

    h.tick(5);
    let released = h.delete(a, &na, -1);
    let first = h.st.handovers.recent().next().unwrap().clone();
    assert_eq!(first.zxid, released.zxid.0);
    assert_eq!(first.time_ms, h.now);
    assert_eq!(
        recent(&h),
        vec![("/l".into(), name(&na), a, Some((name(&nb), b)))]
    );

    // The holder's session ends: its node goes, the lock passes on; then the last
    // holder's session ends and the lock is free.
    h.close(b);
    h.close(d);
    assert_eq!(
        recent(&h),
        vec![
            ("/l".into(), name(&nd), d, None),
            ("/l".into(), name(&nb), b, Some((name(&nd), d))),
            ("/l".into(), name(&na), a, Some((name(&nb), b))),
        ]
    );
}

#[test]
fn recipe_paths_are_followed_by_their_names() {
    let mut h = Harness::new();
    let (a, b, s) = (h.session(), h.session(), h.session());
    h.mk(s, "/kz");
    h.mk(s, "/cur");
    h.mk(s, "/svc");
    let (ka, _) = h.create_ok(a, "/kz/aa__lock__", b"", flags::EPHEMERAL_SEQUENTIAL);
    let (kb, _) = h.create_ok(b, "/kz/bb__lock__", b"", flags::EPHEMERAL_SEQUENTIAL);
    let (ca, _) = h.create_ok(a, "/cur/_c_1-lock-", b"", flags::EPHEMERAL_SEQUENTIAL);
    let (cb, _) = h.create_ok(b, "/cur/_c_2-lock-", b"", flags::EPHEMERAL_SEQUENTIAL);
    // A service registry's instances are no lock.
    let (ia, _) = h.create_ok(a, "/svc/instance-", b"", flags::EPHEMERAL_SEQUENTIAL);
    h.create_ok(b, "/svc/instance-", b"", flags::EPHEMERAL_SEQUENTIAL);

    assert_eq!(h.delete(a, &ia, -1).reply.err, OK);
    assert!(recent(&h).is_empty(), "{:?}", recent(&h));
    assert_eq!(h.delete(a, &ka, -1).reply.err, OK);
    h.close(a);
    assert_eq!(
        recent(&h),
        vec![
            ("/cur".into(), name(&ca), a, Some((name(&cb), b))),
            ("/kz".into(), name(&ka), a, Some((name(&kb), b))),
        ]
    );
    assert!(h.has(&kb) && h.has(&cb));
}

#[test]
fn a_failed_multi_records_nothing() {
    let mut h = Harness::new();
    let (a, b) = (h.session(), h.session());
    let na = native(&mut h, a, "/l");
    native(&mut h, b, "/l");
    let (m, _) = h.multi(a, vec![m_delete(&na, -1), m_check("/nope", 0)]);
    assert_eq!(m.reply.err, OK);
    assert!(h.has(&na), "the multi failed");
    assert!(recent(&h).is_empty(), "{:?}", recent(&h));
    let (_, res) = h.multi(a, vec![m_delete(&na, -1)]);
    assert_eq!(res.len(), 1);
    assert_eq!(recent(&h).len(), 1);
}

#[test]
fn the_history_is_bounded() {
    let mut h = Harness::new();
    let s = h.session();
    for _ in 0..HISTORY + 10 {
        let n = native(&mut h, s, "/l");
        assert_eq!(h.delete(s, &n, -1).reply.err, OK);
    }
    let all: Vec<&Handover> = h.st.handovers.recent().collect();
    assert_eq!(all.len(), HISTORY);
    assert!(
        all.windows(2).all(|w| w[0].zxid > w[1].zxid),
        "newest first"
    );
}
