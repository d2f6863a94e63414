//! The native lock index is replicated state: a state restored from a snapshot taken at
//! any point of a log, then given the rest of the log, answers, grants and encodes
//! exactly as the state that applied the whole log.

use zlock_core::snapshot;
use zlock_core::{Applied, Config, Origin, State, Txn, TxnBody};
use zlock_proto::records::{lock_mode, LockRequest, LockResponse};
use zlock_proto::{Reader, Record, Request};

use crate::harness::*;

fn lock_req(path: &str, prefix: &str, mode: i32, leases: i32) -> Request {
    Request::Lock(LockRequest {
        path: path.into(),
        prefix: prefix.into(),
        data: Some(Vec::new()),
        acl: open(),
        mode,
        leases,
        flags: 0,
        release: String::new(),
        ..LockRequest::default()
    })
}

fn node_of(a: &Applied) -> String {
    assert_eq!(a.reply.err, OK, "lock failed: {}", a.reply.err);
    LockResponse::decode(&mut Reader::new(&a.reply.body))
        .unwrap()
        .node
}

/// Builds a log with waiters of every mode on several lock paths, hand-overs by delete,
/// session close, release-and-requeue and a multi, and a lock path that goes away.
fn log() -> Vec<Txn> {
    let mut h = Harness::new();
    let mut txns = Vec::new();
    let mut run = |h: &mut Harness, txn: Txn| {
        let a = h.apply(&txn);
        assert_eq!(a.reply.err, OK, "{txn:?}");
        txns.push(txn);
        a
    };
    let mut ss: Vec<SessionId> = Vec::new();
    for _ in 1..=6 {
        let t = h.txn(
            SessionId::NONE,
            TxnBody::CreateSession {
                passwd: vec![1; 16],
                timeout_ms: 30_000,
            },
        );
        ss.push(run(&mut h, t).created_session.unwrap());
    }
    // The clock stands still: nothing here depends on time.
    let at_t0 = |s: SessionId, body: TxnBody| {
        let origin = Origin {
            session: s,
            ..Origin::default()
        };
        Txn::new(origin, T0, body)
    };
    let req = |s: SessionId, request: Request| {
        at_t0(
            s,
            TxnBody::Request {
                auth: vec![ip()].into(),
                request,
            },
        )
    };
    let ex = |g: &str| lock_req("/l", &format!("_c_{g}-lock-"), lock_mode::EXCLUSIVE, 1);
    let mut l = Vec::new();
    for (i, s) in ss[..3].iter().enumerate() {
        l.push(node_of(&run(&mut h, req(*s, ex(&format!("l{i}"))))));
    }
    let rd = |g: &str| lock_req("/rw", &format!("_c_{g}-__READ__"), lock_mode::READ, 1);
    let wr = |g: &str| lock_req("/rw", &format!("_c_{g}-__WRIT__"), lock_mode::WRITE, 1);
    let r0 = node_of(&run(&mut h, req(ss[3], rd("r0"))));
    node_of(&run(&mut h, req(ss[4], wr("w1"))));
    node_of(&run(&mut h, req(ss[5], rd("r2"))));
    let sem = |g: &str, n| lock_req("/sem", &format!("_c_{g}-lease-"), lock_mode::SEMAPHORE, n);
    let mut leases = Vec::new();
    for (i, s) in ss.iter().enumerate() {
        let n = if i == 5 { 3 } else { 2 };
        leases.push(node_of(&run(&mut h, req(*s, sem(&format!("s{i}"), n)))));
    }
    // A recipe contender (plain create) queues behind the native ones.
    run(
        &mut h,
        req(
            ss[5],
            create2("/l/_c_rec-lock-", b"", flags::EPHEMERAL_SEQUENTIAL),
        ),
    );
    // Hand-overs: by delete, by session close (s1 held /l and a lease), by a multi, by
    // release-and-requeue in one request.
    run(&mut h, req(ss[0], delete(&l[0], -1)));
    run(&mut h, req(ss[3], delete(&r0, -1)));
    run(
        &mut h,
        at_t0(ss[1], TxnBody::CloseSession { session_id: ss[1] }),
    );
    run(
        &mut h,
        req(
            ss[2],
            Request::Multi(vec![m_delete(&l[2], -1), m_create("/elsewhere", b"", 0)]),
        ),
    );
    let Request::Lock(mut again) = sem("s0b", 2) else {
        unreachable!()
    };
    again.release = leases[0].clone();
    run(&mut h, req(ss[0], Request::Lock(again)));
    // A lock path whose last contender leaves, reaped as an empty container: no longer
    // followed.
    let g = node_of(&run(&mut h, req(ss[3], lock_req("/gone/l", "x-", 0, 1))));
    run(&mut h, req(ss[3], delete(&g, -1)));
    run(
        &mut h,
        at_t0(
            SessionId::NONE,
            TxnBody::DeleteExpired {
                paths: vec!["/gone/l".into()],
            },
        ),
    );
    // A lock-delay: a holder that asked for one expires, and its waiter is granted by
    // the first Txn whose time reaches the end (the only Txns here whose time moves).
    let mut ds = Vec::new();
    for _ in 0..2 {
        let t = h.txn(
            SessionId::NONE,
            TxnBody::CreateSession {
                passwd: vec![2; 16],
                timeout_ms: 30_000,
            },
        );
        ds.push(run(&mut h, t).created_session.unwrap());
    }
    let delayed = |g: &str| {
        let Request::Lock(mut r) = lock_req("/d", &format!("_c_{g}-lock-"), 0, 1) else {
            unreachable!()
        };
        r.lock_delay_ms = 300;
        Request::Lock(r)
    };
    run(&mut h, req(ds[0], delayed("d0")));
    run(&mut h, req(ds[1], delayed("d1")));
    let at = |t: i64, s: SessionId, body: TxnBody| Txn {
        time_ms: T0 + t,
        clock: zlock_core::TxnClock::Leader,
        ..at_t0(s, body)
    };
    let expiry = at(
        10,
        SessionId::NONE,
        TxnBody::CloseSession { session_id: ds[0] },
    );
    assert!(run(&mut h, expiry).grants.is_empty());
    let tick = |t: i64| {
        at(
            t,
            SessionId::NONE,
            TxnBody::DeleteExpired { paths: Vec::new() },
        )
    };
    assert!(run(&mut h, tick(309)).grants.is_empty());
    assert_eq!(run(&mut h, tick(310)).grants.len(), 1);
    run(
        &mut h,
        at(320, ds[1], TxnBody::CloseSession { session_id: ds[1] }),
    );
    // More waiters after the reap, then everyone leaves one by one.
    run(&mut h, req(ss[4], ex("late")));
    for s in [ss[2], ss[4], ss[0], ss[5], ss[3]] {
        run(&mut h, at_t0(s, TxnBody::CloseSession { session_id: s }));
    }
    txns
}

/// What must be equal: the pending waiters and the snapshot bytes.
#[derive(PartialEq)]
struct Fingerprint {
    pending: Vec<zlock_core::locks::PendingWaiter>,
    bytes: Vec<u8>,
}

/// Only the waiters: the bytes are too long to read.
impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} ({} snapshot bytes)",
            self.pending,
            self.bytes.len()
        )
    }
}

fn fingerprint(st: &State) -> Fingerprint {
    let mut bytes = Vec::new();
    snapshot::encode(st, &mut bytes);
    Fingerprint {
        pending: st.locks.pending(),
        bytes,
    }
}

#[test]
fn snapshot_anywhere_then_suffix_equals_the_whole_log() {
    let log = log();
    let mut whole = State::new(Config::default());
    let mut outcomes = Vec::new();
    let mut after = Vec::new();
    for t in &log {
        let a = apply_next(&mut whole, t);
        outcomes.push((a.reply, a.grants));
        after.push(fingerprint(&whole));
    }
    let mut cuts_with_waiters_and_later_grants = 0;
    for cut in 0..=log.len() {
        let mut st = State::new(Config::default());
        for t in &log[..cut] {
            apply_next(&mut st, t);
        }
        let waiting = !st.locks.pending().is_empty();
        let mut bytes = Vec::new();
        snapshot::encode(&st, &mut bytes);
        let mut back = snapshot::decode(&bytes, Config::default()).unwrap();
        assert_eq!(fingerprint(&back), fingerprint(&st), "decode at {cut}");
        let mut later_grants = false;
        for (i, t) in log.iter().enumerate().skip(cut) {
            let a = apply_next(&mut back, t);
            later_grants |= !a.grants.is_empty();
            assert_eq!(
                (a.reply, a.grants),
                outcomes[i],
                "txn {i} after a snapshot at {cut}"
            );
            assert_eq!(fingerprint(&back), after[i], "after txn {i}, cut {cut}");
        }
        if waiting && later_grants {
            cuts_with_waiters_and_later_grants += 1;
        }
    }
    assert!(
        cuts_with_waiters_and_later_grants > 10,
        "the log hands over to waiters that were pending at the cut"
    );
    assert!(whole.locks.pending().is_empty(), "everyone left in the end");
}
