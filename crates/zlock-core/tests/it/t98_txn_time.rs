//! The state's time (`State::time_ms`): a Txn stamped by a leader applies at its own
//! time or the state's, whichever is later, so ctime/mtime, TTLs and lock-delays never
//! see time go back when leadership moves to a member whose clock is behind; a Txn
//! logged before leaders stamped time (encoding version 2) applies at its own.

use zlock_core::{Txn, TxnBody, TxnClock};

use crate::harness::*;

fn write(request: zlock_proto::Request) -> TxnBody {
    let auth = std::sync::Arc::new(vec![ip()]);
    TxnBody::Request { auth, request }
}

#[test]
fn a_leader_clock_behind_the_state_takes_the_state_time() {
    let mut h = Harness::new();
    let s = h.session();
    h.tick(1_000);
    let a = h.mk(s, "/a");
    assert_eq!(a.ctime, T0 + 1_000);
    h.tick(-600);
    let b = h.mk(s, "/b");
    assert_eq!((b.ctime, b.mtime), (T0 + 1_000, T0 + 1_000));
    assert_eq!(h.st.time_ms, T0 + 1_000);
    h.tick(700);
    let c = h.mk(s, "/c");
    assert_eq!(
        c.ctime,
        T0 + 1_100,
        "time moves on once the clock passes it"
    );
}

#[test]
fn a_txn_of_the_proposers_clock_applies_at_its_own_time_and_moves_nothing() {
    let mut h = Harness::new();
    let s = h.session();
    let before = h.st.time_ms;
    let mut t = h.txn(s, write(create1("/old", b"", 0)));
    t.clock = TxnClock::Proposer;
    t.time_ms = T0 + 5_000;
    assert_eq!(h.apply(&t).reply.err, OK);
    let n = h.st.tree.get("/old").unwrap();
    assert_eq!(n.ctime, T0 + 5_000);
    assert_eq!(
        h.st.time_ms, before,
        "a version 2 Txn does not move the time"
    );
    let mut t = h.txn(s, write(create1("/older", b"", 0)));
    t.clock = TxnClock::Proposer;
    t.time_ms = T0 - 5_000;
    assert_eq!(h.apply(&t).reply.err, OK);
    assert_eq!(h.st.tree.get("/older").unwrap().ctime, T0 - 5_000);
}

#[test]
fn the_encoding_version_says_whose_clock() {
    let mut h = Harness::new();
    let s = h.session();
    let t = h.txn(s, TxnBody::CloseSession { session_id: s });
    let bytes = t.to_bytes();
    assert_eq!(bytes[0], zlock_core::txn::TXN_VERSION);
    assert_eq!(Txn::decode(&bytes).unwrap().clock, TxnClock::Leader);
    // What an older zlock wrote: the same bytes under version 2.
    let mut v2 = bytes.clone();
    v2[0] = 2;
    let old = Txn::decode(&v2).unwrap();
    assert_eq!(old.clock, TxnClock::Proposer);
    assert_eq!(
        (old.origin, old.time_ms, &old.body),
        (t.origin, t.time_ms, &t.body)
    );
    assert_eq!(old.to_bytes(), v2, "re-encoded as it was written");
}
