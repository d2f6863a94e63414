use super::*;

const TICK: u64 = 100;

fn t(ms: u64) -> Time {
    Time(ms)
}

/// The tracker's two maps agree: every non-expiring session is in exactly the bucket of
/// its deadline, expiring ones are in none, and no bucket is empty.
fn assert_consistent(tr: &SessionTracker) {
    let mut bucketed = 0;
    for (deadline, set) in &tr.buckets {
        assert!(!set.is_empty(), "empty bucket {deadline:?}");
        assert_eq!(deadline.0 % tr.tick_ms, 0, "bucket not on a tick");
        for id in set {
            let s = tr.sessions[id];
            assert!(!s.expiring, "expiring session {id} still bucketed");
            assert_eq!(s.deadline, *deadline, "session {id} in the wrong bucket");
            bucketed += 1;
        }
    }
    let live = tr.sessions.values().filter(|s| !s.expiring).count();
    assert_eq!(bucketed, live);
}

#[test]
fn bucket_rounds_up_to_the_next_tick_strictly_after() {
    let tr = SessionTracker::new(TICK);
    assert_eq!(tr.bucket_of(t(0)), t(100));
    assert_eq!(tr.bucket_of(t(1)), t(100));
    assert_eq!(tr.bucket_of(t(99)), t(100));
    // Exactly on a tick still goes to the next one, so nobody is due at
    // last + timeout itself.
    assert_eq!(tr.bucket_of(t(100)), t(200));
    assert_eq!(tr.bucket_of(t(1234)), t(1300));
}

#[test]
fn bucket_saturates_instead_of_overflowing() {
    let tr = SessionTracker::new(TICK);
    assert_eq!(tr.bucket_of(t(u64::MAX)), t(u64::MAX));
    assert_eq!(t(u64::MAX - 5).plus(10), t(u64::MAX));
}

#[test]
fn zero_tick_is_one_millisecond() {
    let tr = SessionTracker::new(0);
    assert_eq!(tr.tick_ms(), 1);
    assert_eq!(tr.bucket_of(t(7)), t(8));
}

#[test]
fn add_sets_a_full_timeout_from_now() {
    let mut tr = SessionTracker::new(TICK);
    assert!(tr.is_empty());
    tr.add(SessionId(1), 5000, t(1050));
    assert_eq!(tr.len(), 1);
    assert!(!tr.is_empty());
    assert!(tr.contains(SessionId(1)));
    assert!(!tr.contains(SessionId(2)));
    assert!(!tr.is_expiring(SessionId(1)));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(6100)));
    assert_eq!(tr.timeout_ms(SessionId(1)), Some(5000));
    assert_eq!(tr.next_deadline(), Some(t(6100)));
    assert_consistent(&tr);
}

#[test]
fn add_of_a_tracked_id_replaces_it_and_revives_it() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(0));
    assert_eq!(tr.expired(t(1100)), vec![SessionId(1)]);
    tr.add(SessionId(1), 3000, t(1200));
    assert!(!tr.is_expiring(SessionId(1)));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(4300)));
    assert_eq!(tr.timeout_ms(SessionId(1)), Some(3000));
    assert_eq!(tr.len(), 1);
    assert_consistent(&tr);
    // Replacing a live one leaves no trace in its old bucket.
    tr.add(SessionId(1), 100, t(1200));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(1400)));
    assert_eq!(tr.next_deadline(), Some(t(1400)));
    assert_consistent(&tr);
}

#[test]
fn touch_pushes_the_deadline_and_moves_the_bucket() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(0));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(1100)));
    assert!(tr.touch(SessionId(1), t(250)));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(1300)));
    assert_eq!(
        tr.buckets.keys().copied().collect::<Vec<_>>(),
        vec![t(1300)]
    );
    assert_consistent(&tr);
}

#[test]
fn touch_within_the_same_bucket_moves_nothing() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(210));
    tr.add(SessionId(2), 1000, t(220));
    let before = tr.buckets.clone();
    let set_ptr = |tr: &SessionTracker| std::ptr::from_ref(&tr.buckets[&t(1300)]);
    let ptr = set_ptr(&tr);
    let cap = tr.buckets[&t(1300)].capacity();
    for now in 210..300 {
        assert!(tr.touch(SessionId(1), t(now)));
        assert_eq!(tr.deadline(SessionId(1)), Some(t(1300)));
    }
    // Same buckets, and the very same set, untouched in place.
    assert_eq!(tr.buckets, before);
    assert_eq!(set_ptr(&tr), ptr);
    assert_eq!(tr.buckets[&t(1300)].capacity(), cap);
}

#[test]
fn a_lone_session_moving_reuses_its_emptied_bucket() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(0));
    let cap = tr.buckets[&t(1100)].capacity();
    assert!(tr.touch(SessionId(1), t(500)));
    assert_eq!(tr.buckets.len(), 1);
    assert_eq!(tr.buckets[&t(1600)].capacity(), cap);
}

#[test]
fn touch_never_moves_a_deadline_earlier() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(0));
    assert!(tr.touch(SessionId(1), t(900)));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(2000)));
    // A late-arriving touch stamped earlier (another member's batch) still counts as
    // activity but keeps the later deadline.
    assert!(tr.touch(SessionId(1), t(300)));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(2000)));
    assert_consistent(&tr);
}

#[test]
fn touch_of_an_unknown_or_expiring_session_is_refused() {
    let mut tr = SessionTracker::new(TICK);
    assert!(!tr.touch(SessionId(9), t(0)));
    tr.add(SessionId(1), 1000, t(0));
    assert_eq!(tr.expired(t(1100)), vec![SessionId(1)]);
    assert!(!tr.touch(SessionId(1), t(1100)));
    assert!(tr.is_expiring(SessionId(1)));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(1100)));
    assert_eq!(tr.next_deadline(), None);
    assert_consistent(&tr);
}

#[test]
fn an_overdue_session_not_yet_reported_can_still_be_touched() {
    // As in ZooKeeper: only the expiry check marks a session closing; until then a
    // late request keeps it alive.
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(0));
    assert!(tr.touch(SessionId(1), t(5000)));
    assert_eq!(tr.expired(t(5000)), Vec::<SessionId>::new());
    assert_eq!(tr.deadline(SessionId(1)), Some(t(6100)));
}

#[test]
fn set_timeout_renegotiates_and_may_move_earlier() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 10_000, t(0));
    assert!(tr.set_timeout(SessionId(1), 2000, t(500)));
    assert_eq!(tr.timeout_ms(SessionId(1)), Some(2000));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(2600)));
    assert_consistent(&tr);
    // Later touches use the new timeout.
    assert!(tr.touch(SessionId(1), t(1000)));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(3100)));
    assert!(!tr.set_timeout(SessionId(9), 2000, t(0)));
    assert_eq!(tr.expired(t(3100)), vec![SessionId(1)]);
    assert!(!tr.set_timeout(SessionId(1), 2000, t(3100)));
    assert_eq!(tr.timeout_ms(SessionId(1)), Some(2000));
    assert_consistent(&tr);
}

#[test]
fn remove_forgets_live_and_expiring_sessions() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(0));
    tr.add(SessionId(2), 2000, t(0));
    assert_eq!(tr.expired(t(1100)), vec![SessionId(1)]);
    assert!(tr.remove(SessionId(1)));
    assert!(tr.remove(SessionId(2)));
    assert!(!tr.remove(SessionId(2)));
    assert!(tr.is_empty());
    assert!(tr.buckets.is_empty());
    assert_eq!(tr.next_deadline(), None);
    assert_eq!(tr.expired(t(1_000_000)), Vec::<SessionId>::new());
}

#[test]
fn expired_pops_only_due_buckets_in_deadline_then_id_order() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(5), 1000, t(0)); // 1100
    tr.add(SessionId(3), 1000, t(50)); // 1100
    tr.add(SessionId(4), 900, t(0)); // 1000
    tr.add(SessionId(1), 3000, t(0)); // 3100
    assert_eq!(tr.expired(t(999)), Vec::<SessionId>::new());
    assert_eq!(tr.next_deadline(), Some(t(1000)));
    assert_eq!(
        tr.expired(t(1150)),
        vec![SessionId(4), SessionId(3), SessionId(5)]
    );
    assert_eq!(tr.next_deadline(), Some(t(3100)));
    assert_eq!(tr.buckets.len(), 1);
    assert!(
        tr.is_expiring(SessionId(3))
            && tr.is_expiring(SessionId(4))
            && tr.is_expiring(SessionId(5))
    );
    assert!(!tr.is_expiring(SessionId(1)));
    assert_eq!(tr.len(), 4);
    assert_consistent(&tr);
}

#[test]
fn an_expiring_session_is_reported_once() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(0));
    assert_eq!(tr.expired(t(1100)), vec![SessionId(1)]);
    assert_eq!(tr.expired(t(1100)), Vec::<SessionId>::new());
    assert_eq!(tr.expired(t(99_999)), Vec::<SessionId>::new());
    assert!(tr.contains(SessionId(1)));
}

#[test]
fn never_early_and_at_most_one_tick_late() {
    // For every offset of the last touch within a tick.
    for last in 1000..1100 {
        let mut tr = SessionTracker::new(TICK);
        tr.add(SessionId(1), 0, t(0));
        assert!(tr.set_timeout(SessionId(1), 700, t(last)));
        assert_eq!(tr.expired(t(last + 700)), Vec::<SessionId>::new());
        assert!(tr.next_deadline() > Some(t(last + 700)));
        assert!(tr.next_deadline() <= Some(t(last + 700 + TICK)));
        assert_eq!(tr.expired(t(last + 700 + TICK)), vec![SessionId(1)]);
    }
}

#[test]
fn restart_all_gives_a_full_timeout_and_clears_expiring() {
    let mut tr = SessionTracker::new(TICK);
    tr.add(SessionId(1), 1000, t(0));
    tr.add(SessionId(2), 5000, t(0));
    tr.add(SessionId(3), 1000, t(0));
    assert_eq!(tr.expired(t(1100)), vec![SessionId(1), SessionId(3)]);
    tr.remove(SessionId(3));
    tr.restart_all(t(10_000));
    assert!(!tr.is_expiring(SessionId(1)));
    assert_eq!(tr.deadline(SessionId(1)), Some(t(11_100)));
    assert_eq!(tr.deadline(SessionId(2)), Some(t(15_100)));
    assert_eq!(tr.len(), 2);
    assert!(tr.touch(SessionId(1), t(10_050)));
    assert_consistent(&tr);
    assert_eq!(tr.expired(t(11_099)), Vec::<SessionId>::new());
    assert_eq!(tr.expired(t(11_100)), vec![SessionId(1)]);
    assert_eq!(tr.expired(t(15_100)), vec![SessionId(2)]);
}
