//! A model test of [`SessionTracker`]: random add/touch/set_timeout/remove/restart_all
//! and time steps, checked against a naive model that keeps each session's timeout and
//! latest activity time. After each expiry check:
//! - no session is reported before its timeout has passed since its latest activity;
//! - every session whose timeout plus one tick has passed is reported;
//! - a session is reported at most once (until it is added again or restarted).
//!
//! Touches are sometimes stamped in the past, as a touch relayed from another member's
//! batch can be; the model's "latest activity" is the maximum stamp seen.

use std::collections::BTreeMap;

use proptest::prelude::*;
use zlock_core::sessions::{SessionTracker, Time};
use zlock_core::SessionId;

const IDS: i64 = 6;

#[derive(Debug, Clone)]
enum Op {
    Add {
        id: SessionId,
        timeout: u64,
    },
    /// A touch stamped `back` ms before the current time.
    Touch {
        id: SessionId,
        back: u64,
    },
    SetTimeout {
        id: SessionId,
        timeout: u64,
    },
    Remove {
        id: SessionId,
    },
    Advance {
        ms: u64,
    },
    /// Jump to `early` ms before the tracker's next deadline (if that is ahead), as a
    /// caller sleeping until `next_deadline` does; this hits the bucket edges exactly.
    Sleep {
        early: u64,
    },
    Expire,
    RestartAll,
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0..IDS;
    let timeout = 0u64..3000;
    prop_oneof![
        2 => (id.clone(), timeout.clone()).prop_map(|(id, timeout)| Op::Add { id: SessionId(id), timeout }),
        4 => (id.clone(), prop_oneof![3 => Just(0u64), 1 => 0u64..2000])
            .prop_map(|(id, back)| Op::Touch { id: SessionId(id), back }),
        1 => (id.clone(), timeout).prop_map(|(id, timeout)| Op::SetTimeout { id: SessionId(id), timeout }),
        1 => id.prop_map(|id| Op::Remove { id: SessionId(id) }),
        4 => (0u64..1500).prop_map(|ms| Op::Advance { ms }),
        2 => (0u64..2).prop_map(|early| Op::Sleep { early }),
        3 => Just(Op::Expire),
        1 => Just(Op::RestartAll),
    ]
}

#[derive(Debug, Clone, Copy)]
struct Model {
    timeout: u64,
    /// The latest activity stamp (add, touch, set_timeout, restart).
    last: u64,
    expiring: bool,
}

fn run(tick: u64, start: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut tr = SessionTracker::new(tick);
    let mut model: BTreeMap<SessionId, Model> = BTreeMap::new();
    let mut now = start;
    for op in ops {
        match *op {
            Op::Add { id, timeout } => {
                tr.add(id, timeout, Time(now));
                model.insert(
                    id,
                    Model {
                        timeout,
                        last: now,
                        expiring: false,
                    },
                );
            }
            Op::Touch { id, back } => {
                let stamp = now.saturating_sub(back);
                let want = model.get_mut(&id).filter(|m| !m.expiring);
                prop_assert_eq!(tr.touch(id, Time(stamp)), want.is_some(), "touch {}", id);
                if let Some(m) = want {
                    m.last = m.last.max(stamp);
                }
            }
            Op::SetTimeout { id, timeout } => {
                let want = model.get_mut(&id).filter(|m| !m.expiring);
                prop_assert_eq!(
                    tr.set_timeout(id, timeout, Time(now)),
                    want.is_some(),
                    "set_timeout {}",
                    id
                );
                if let Some(m) = want {
                    m.timeout = timeout;
                    m.last = now;
                }
            }
            Op::Remove { id } => {
                prop_assert_eq!(tr.remove(id), model.remove(&id).is_some());
            }
            Op::Advance { ms } => now += ms,
            Op::Sleep { early } => {
                if let Some(next) = tr.next_deadline() {
                    now = now.max(next.0.saturating_sub(early));
                }
            }
            Op::Expire => {
                let got = tr.expired(Time(now));
                let mut seen = got.clone();
                seen.sort_unstable();
                seen.dedup();
                prop_assert_eq!(seen.len(), got.len(), "reported twice in one call");
                for id in &got {
                    let m = model.get_mut(id).ok_or_else(|| {
                        TestCaseError::fail(format!("unknown session {id} reported"))
                    })?;
                    prop_assert!(!m.expiring, "session {} reported again", id);
                    prop_assert!(
                        now > m.last + m.timeout,
                        "session {} reported at {} but last active at {} with timeout {}",
                        id,
                        now,
                        m.last,
                        m.timeout
                    );
                    m.expiring = true;
                }
                for (id, m) in &model {
                    if !m.expiring {
                        prop_assert!(
                            now < m.last + m.timeout + tick,
                            "session {} not reported at {}, last active at {} timeout {}",
                            id,
                            now,
                            m.last,
                            m.timeout
                        );
                    }
                }
            }
            Op::RestartAll => {
                tr.restart_all(Time(now));
                for m in model.values_mut() {
                    m.last = now;
                    m.expiring = false;
                }
            }
        }
        // The cheap views agree with the model after every step.
        prop_assert_eq!(tr.len(), model.len());
        prop_assert_eq!(tr.is_empty(), model.is_empty());
        for id in (0..IDS).map(SessionId) {
            let m = model.get(&id);
            prop_assert_eq!(tr.contains(id), m.is_some());
            prop_assert_eq!(tr.is_expiring(id), m.is_some_and(|m| m.expiring));
            prop_assert_eq!(tr.timeout_ms(id), m.map(|m| m.timeout));
            if let Some(m) = m.filter(|m| !m.expiring) {
                let d = tr
                    .deadline(id)
                    .ok_or_else(|| TestCaseError::fail(format!("no deadline for {id}")))?
                    .0;
                prop_assert!(d > m.last + m.timeout && d <= m.last + m.timeout + tick);
                prop_assert_eq!(d % tick, 0);
            }
        }
        let next = model
            .iter()
            .filter(|(_, m)| !m.expiring)
            .filter_map(|(id, _)| tr.deadline(*id))
            .min();
        prop_assert_eq!(tr.next_deadline(), next);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn tracker_matches_a_naive_model(
        tick in prop_oneof![Just(1u64), Just(100), 1u64..700],
        start in 0u64..10_000,
        ops in prop::collection::vec(op(), 0..80),
    ) {
        run(tick, start, &ops)?;
    }
}
