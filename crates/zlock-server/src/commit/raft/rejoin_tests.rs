//! `rejoin`'s decisions, acknowledgements and gate, case by case.

use super::*;
use crate::commit::raft::types::CommittedLeaderId;

fn vote(term: u64, node: u64, committed: bool) -> Option<Vote> {
    Some(if committed {
        Vote::new_committed(term, node)
    } else {
        Vote::new(term, node)
    })
}

fn log(term: u64, node: u64, index: u64) -> Option<LogId> {
    Some(LogId::new(
        CommittedLeaderId {
            term,
            node_id: node,
        },
        index,
    ))
}

fn answers(a: &[(u64, Standing)]) -> BTreeMap<u64, Standing> {
    a.iter().copied().collect()
}

/// [`super::decide`] with no leader's word on this member's acknowledgements.
fn decide(me: u64, members: usize, answers: &BTreeMap<u64, Standing>) -> Option<Found> {
    super::decide(me, members, answers, &BTreeMap::new())
}

const BLANK: Standing = Standing {
    vote: None,
    last_log_id: None,
    leads: false,
    voters: [0; 4],
};

#[test]
fn a_first_start_goes_on_with_a_majority() {
    assert_eq!(decide(1, 3, &answers(&[])), None);
    assert_eq!(
        decide(1, 3, &answers(&[(2, BLANK)])),
        Some(Found::Bootstrap)
    );
    assert_eq!(decide(1, 5, &answers(&[(2, BLANK)])), None);
    // Members that proposed the initial membership and have not campaigned yet.
    let initialized = Standing {
        last_log_id: log(0, 0, 0),
        ..BLANK
    };
    assert_eq!(
        decide(1, 3, &answers(&[(2, initialized)])),
        Some(Found::Bootstrap)
    );
    // A member already campaigning: a leader may have been elected (this member
    // among its voters), so it is a rejoin: every other member answers first, and
    // the gate holds until the furthest log past the initial membership (none
    // here).
    let campaigning = Standing {
        vote: vote(2, 3, false),
        last_log_id: log(0, 0, 0),
        ..BLANK
    };
    let two = answers(&[(2, BLANK), (3, campaigning)]);
    assert_eq!(decide(1, 5, &two), None);
    let all = answers(&[(2, BLANK), (3, campaigning), (4, BLANK), (5, BLANK)]);
    assert_eq!(
        decide(1, 5, &all),
        Some(Found::Join {
            floor: Vote::new(2, 3),
            target: None
        })
    );
    assert_eq!(decide(1, 1, &answers(&[])), Some(Found::Bootstrap));
}

#[test]
fn a_member_that_lost_its_data_waits_for_every_other_member() {
    let mut led = Standing {
        vote: vote(4, 2, true),
        last_log_id: log(4, 2, 17),
        leads: true,
        ..BLANK
    };
    for m in 1..=3 {
        led.add_voter(m);
    }
    // A majority would do for a first start, not for a rejoin.
    assert_eq!(decide(1, 3, &answers(&[(2, led)])), None);
    let mut behind = Standing {
        vote: vote(5, 3, false),
        last_log_id: log(3, 1, 20),
        ..BLANK
    };
    behind.add_voter(1);
    assert_eq!(
        decide(1, 3, &answers(&[(2, led), (3, behind)])),
        Some(Found::Join {
            // The highest vote (not committed), the furthest log by Raft's order:
            // the later term wins over the longer log.
            floor: Vote::new(5, 3),
            target: log(4, 2, 17),
        })
    );
    let five = answers(&[(2, led), (3, behind), (4, BLANK)]);
    assert_eq!(decide(1, 5, &five), None);
}

#[test]
fn a_member_new_to_the_ensemble_joins_once_the_leader_says_so() {
    let mut leader = Standing {
        vote: vote(4, 2, true),
        last_log_id: log(4, 2, 17),
        leads: true,
        ..BLANK
    };
    let mut follower = Standing {
        vote: vote(4, 2, true),
        last_log_id: log(4, 2, 17),
        ..BLANK
    };
    for m in 1..=3 {
        leader.add_voter(m);
        follower.add_voter(m);
    }
    // Member 4 of 1-4, member 1 down for good: the leader and another member
    // answer that 4 is not a member: it joins without waiting for member 1.
    let two = answers(&[(2, leader), (3, follower)]);
    assert_eq!(
        decide(4, 4, &two),
        Some(Found::Join {
            floor: Vote::new(4, 2),
            target: None
        })
    );
    // Not without the leader's word, nor with fewer than a majority answering.
    assert_eq!(decide(4, 4, &answers(&[(3, follower)])), None);
    assert_eq!(decide(4, 5, &answers(&[(2, leader)])), None);
    // A member the membership holds (its disk lost) waits for every answer.
    assert_eq!(decide(3, 4, &two), None);
    // One answer that counts it a voter is enough to wait.
    let mut knows = follower;
    knows.add_voter(4);
    assert_eq!(decide(4, 4, &answers(&[(2, leader), (3, knows)])), None);
}

#[test]
fn the_leader_of_the_highest_vote_can_lift_the_gate() {
    let mut leader = Standing {
        vote: vote(4, 2, true),
        last_log_id: log(4, 2, 17),
        leads: true,
        ..BLANK
    };
    let mut behind = Standing {
        vote: vote(4, 2, true),
        last_log_id: log(4, 2, 15),
        ..BLANK
    };
    for m in 1..=3 {
        leader.add_voter(m);
        behind.add_voter(m);
    }
    let both = answers(&[(2, leader), (3, behind)]);
    let word = |m: u64, v: Option<Vote>| -> BTreeMap<u64, Vote> {
        v.map(|v| (m, v)).into_iter().collect()
    };
    assert_eq!(
        super::decide(1, 3, &both, &word(2, vote(4, 2, true))),
        Some(Found::Join {
            floor: Vote::new(4, 2),
            target: None
        })
    );
    // Not without every answer, nor from a member that does not hold the highest
    // vote, nor under a lower vote, nor an uncommitted one.
    let one = answers(&[(2, leader)]);
    assert_eq!(super::decide(1, 3, &one, &word(2, vote(4, 2, true))), None);
    let gated = Some(Found::Join {
        floor: Vote::new(4, 2),
        target: log(4, 2, 17),
    });
    assert_eq!(
        super::decide(1, 3, &both, &word(3, vote(4, 2, true))),
        gated
    );
    assert_eq!(
        super::decide(1, 3, &both, &word(2, vote(3, 2, true))),
        gated
    );
    assert_eq!(
        super::decide(1, 3, &both, &word(2, vote(4, 2, false))),
        gated
    );
    // A member campaigning above the leader: its vote is the floor, the leader's
    // word is under a lower one.
    let campaigning = Standing {
        vote: vote(5, 3, false),
        ..behind
    };
    let above = answers(&[(2, leader), (3, campaigning)]);
    assert_eq!(
        super::decide(1, 3, &above, &word(2, vote(4, 2, true))),
        Some(Found::Join {
            floor: Vote::new(5, 3),
            target: log(4, 2, 17),
        })
    );
}

#[test]
fn a_reply_sent_before_the_asker_was_forgotten_is_dropped() {
    let acks = Acks::default();
    let v4 = Vote::new_committed(4, 2);
    // Member 1 acknowledges up to 10, then (in flight) 12.
    let t = acks.ticket(1);
    assert!(acks.took(1, t, &v4, log(4, 2, 10)));
    let in_flight = acks.ticket(1);
    assert!(acks.took(3, acks.ticket(3), &v4, log(4, 2, 11)));
    // Member 1 starts blank and asks: what was counted of it is returned, and its
    // reply still in flight is not counted.
    assert_eq!(acks.forget(1, &v4), Some(log(4, 2, 10)));
    assert!(!acks.took(1, in_flight, &v4, log(4, 2, 12)));
    assert_eq!(acks.forget(1, &v4), Some(log(4, 2, 10)));
    // Replies to requests sent after the answer count; others' were never fenced.
    assert!(acks.took(1, acks.ticket(1), &v4, log(4, 2, 12)));
    assert!(acks.took(3, t, &v4, log(4, 2, 12)));
    // Under a new vote nothing was counted yet; under an older one, nothing can be
    // said once a newer one counted.
    let v6 = Vote::new_committed(6, 2);
    assert_eq!(acks.forget(3, &v6), Some(None));
    assert!(acks.took(1, acks.ticket(1), &v6, log(6, 2, 13)));
    assert_eq!(acks.forget(1, &v4), None);
    assert_eq!(acks.forget(1, &v6), Some(log(6, 2, 13)));
    // A reply that acknowledges nothing is handed on, and counts nothing.
    assert!(acks.took(2, acks.ticket(2), &v6, None));
    assert_eq!(acks.forget(2, &v6), Some(None));
}

#[test]
fn acknowledgements_are_not_needed_when_a_majority_without_the_asker_holds_them() {
    let v = Vote::new_committed(4, 2);
    let matching = |m: &[(u64, Option<LogId>)]| -> BTreeMap<u64, Option<LogId>> {
        m.iter().copied().collect()
    };
    let three = [1, 2, 3];
    // Leader 2 and member 3 hold 4-2-12; member 1 acknowledged up to 10 (or never).
    let m = matching(&[(1, None), (2, log(4, 2, 12)), (3, log(4, 2, 12))]);
    assert!(held_without(1, &v, &three, &m, log(4, 2, 10)));
    assert!(held_without(1, &v, &three, &m, None));
    assert!(held_without(1, &v, &three, &m, log(4, 2, 12)));
    assert!(!held_without(1, &v, &three, &m, log(4, 2, 13)));
    // Member 3 behind what member 1 acknowledged: only the leader holds it.
    let m = matching(&[(2, log(4, 2, 12)), (3, log(4, 2, 9))]);
    assert!(!held_without(1, &v, &three, &m, log(4, 2, 10)));
    // An entry of an older leader proves nothing: the holders need one of this
    // vote (it follows everything committed before it).
    let m = matching(&[(2, log(4, 2, 12)), (3, log(3, 1, 40))]);
    assert!(!held_without(1, &v, &three, &m, None));
    // Nor does the asker's own progress count.
    let m = matching(&[(1, log(4, 2, 12)), (2, log(4, 2, 12))]);
    assert!(!held_without(1, &v, &three, &m, None));
    // Five members: three holders without the asker.
    let five = [1, 2, 3, 4, 5];
    let m = matching(&[(2, log(4, 2, 12)), (3, log(4, 2, 11)), (4, log(4, 2, 9))]);
    assert!(held_without(1, &v, &five, &m, log(4, 2, 9)));
    assert!(!held_without(1, &v, &five, &m, log(4, 2, 10)));
}

#[test]
fn the_gate_holds_until_the_log_has_caught_up_and_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let g = Gate::open(dir.path()).unwrap();
    assert!(!g.refuses(None));
    g.close_until(log(4, 2, 17)).unwrap();
    assert!(g.refuses(log(4, 2, 16)));
    assert!(g.refuses(log(3, 1, 40)));
    // A candidate as far along as the target is not refused (the gate stays
    // closed to the others); one behind it is.
    assert!(!g.refuses_candidate(None, log(4, 2, 17).as_ref()));
    assert!(!g.refuses_candidate(None, log(5, 3, 2).as_ref()));
    assert!(g.refuses_candidate(None, log(4, 2, 16).as_ref()));
    assert!(g.refuses_candidate(log(4, 2, 3), None));
    assert!(g.refuses(None), "a candidate's vote does not open the gate");
    drop(g);
    let g = Gate::open(dir.path()).unwrap();
    assert!(g.refuses(None), "the gate was kept across a restart");
    assert!(!g.refuses(log(5, 1, 3)));
    assert!(!g.refuses(None), "open for good once caught up");
    drop(g);
    assert_eq!(Gate::open(dir.path()).unwrap().target(), None);
}
