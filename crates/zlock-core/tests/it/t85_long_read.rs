//! Long reads: getAllChildrenNumber served with a budget of look-ups
//! ([`State::read_within`]). What it checks is checked at once; a walk past the budget
//! comes back as a [`LongRead`] on a copy of the tree, which answers for the moment the
//! read was served, whatever the state does before it is finished.

use zlock_core::read::LongRead;
use zlock_core::{Answer, State};
use zlock_proto::records::{GetAllChildrenNumberResponse, PathRequest};
use zlock_proto::{Reader, Record, Request};

use crate::harness::*;

fn count_req(path: &str) -> Request {
    Request::GetAllChildrenNumber(PathRequest { path: path.into() })
}

fn total(r: &zlock_core::Reply) -> i32 {
    assert_eq!(r.err, OK);
    GetAllChildrenNumberResponse::decode(&mut Reader::new(&r.body))
        .unwrap()
        .total_number
}

fn read_within(st: &mut State, s: SessionId, path: &str, budget: usize) -> Answer {
    st.read_within(s, &[ip()], &count_req(path), budget)
}

fn later(a: Answer) -> LongRead {
    match a {
        Answer::Later(l) => l,
        Answer::Now(r) => panic!("answered at once: {r:?}"),
    }
}

/// `/t`: a wide node (`/t/w`, 300 leaves), a chain 40 deep (`/t/c/c/...`), and a node
/// whose children all have children (`/t/m`, 20 x 5).
fn tree(h: &mut Harness, s: SessionId) -> i32 {
    h.mk(s, "/t");
    h.mk(s, "/t/w");
    for i in 0..300 {
        h.mk(s, &format!("/t/w/n{i}"));
    }
    let mut p = "/t".to_string();
    for _ in 0..40 {
        p.push_str("/c");
        h.mk(s, &p);
    }
    h.mk(s, "/t/m");
    for i in 0..20 {
        h.mk(s, &format!("/t/m/k{i}"));
        for j in 0..5 {
            h.mk(s, &format!("/t/m/k{i}/l{j}"));
        }
    }
    1 + 300 + 40 + 1 + 20 * 5 + 20
}

#[test]
fn a_walk_cut_anywhere_counts_what_one_walk_counts() {
    let mut h = Harness::new();
    let s = h.session();
    let want = tree(&mut h, s);
    assert_eq!(total(&h.read(s, &count_req("/t"))), want);
    for budget in [1, 2, 3, 7, 50, 299, 300, 301, want as usize - 1] {
        let rest = later(read_within(&mut h.st, s, "/t", budget));
        assert_eq!(total(&rest.finish()), want, "budget {budget}");
    }
    // Enough look-ups (one per node under the path): answered at once.
    let enough = h.st.tree.len();
    for path in ["/t", "/t/w", "/t/m", "/"] {
        let full = total(&h.read(s, &count_req(path)));
        match read_within(&mut h.st, s, path, enough) {
            Answer::Now(r) => assert_eq!(total(&r), full, "{path}"),
            Answer::Later(_) => panic!("{path}: {enough} look-ups are enough"),
        }
    }
    // The root counts everything but itself, whatever the budget.
    let all = h.st.tree.len() as i32 - 1;
    assert_eq!(
        total(&later(read_within(&mut h.st, s, "/", 5)).finish()),
        all
    );
    assert_eq!(total(&h.read(s, &count_req("/"))), all);
}

#[test]
fn a_long_read_answers_for_the_moment_it_was_served() {
    let mut h = Harness::new();
    let s = h.session();
    let want = tree(&mut h, s);
    let rest = later(read_within(&mut h.st, s, "/t", 10));
    // After it was served: nodes created and deleted under the subtree, data changed
    // in place, and the part of it not walked yet deleted.
    for i in 0..100 {
        h.mk(s, &format!("/t/w/added{i}"));
    }
    for i in 0..5 {
        assert_eq!(h.delete(s, &format!("/t/m/k3/l{i}"), -1).reply.err, OK);
    }
    h.set_data_ok(s, "/t/w/n7", b"changed");
    assert_eq!(total(&h.read(s, &count_req("/t"))), want + 100 - 5);
    assert_eq!(total(&rest.finish()), want);
}

#[test]
fn what_a_long_read_checks_is_answered_at_once() {
    let mut h = Harness::new();
    let s = h.session();
    tree(&mut h, s);
    match read_within(&mut h.st, s, "/missing", 1) {
        Answer::Now(r) => assert_eq!(r.err, NO_NODE),
        Answer::Later(_) => panic!("a missing node is not walked"),
    }
    let a = h.write(
        s,
        create_with_acl("/closed", vec![acl(0, "world", "anyone")], 0),
    );
    assert_eq!(a.reply.err, OK);
    match read_within(&mut h.st, s, "/closed", 1) {
        Answer::Now(r) => assert_eq!(r.err, NO_AUTH),
        Answer::Later(_) => panic!("a read without READ is not walked"),
    }
}
