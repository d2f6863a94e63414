//! Snapshots, restarts and check 1: the state rebuilt from a snapshot plus the log
//! suffix after it must equal the state after the whole log.
//!
//! Compared: the snapshot encodings (the tree, sessions and zxid), each replayed
//! entry's reply and events against what it produced live, its native grants, and the
//! number of native waiters. The last two differ while waiters are not part of the
//! snapshot (see [`super::WAITERS_SNAPSHOTTED`]); until then a difference is
//! accepted only when lost waiters explain it, and counted.

use zlock_core::locks::Grant;
use zlock_core::sessions::{SessionTracker, Time};
use zlock_core::{snapshot, Config, LogIndex, State};
use zlock_proto::records::lock_flags;

use super::ops::lock_request;
use super::oracle::LOCKS;
use super::world::{replay, Entry, Produced, World};
use super::WAITERS_SNAPSHOTTED;

/// Which run may have lost native waiters, so lacks grants the other has.
#[derive(Clone, Copy)]
enum Lost {
    /// The replayed run started from a snapshot taken at this zxid: the waiters
    /// registered before it are gone.
    ReplayedBefore(i64),
    /// The live run restarted (this many times) and lost waiters; the replay from an
    /// empty state did not.
    Live(u64),
}

pub fn take_snapshot(w: &mut World) -> Result<(), String> {
    let mut bytes = Vec::new();
    snapshot::encode(&w.st, &mut bytes);
    let back = snapshot::decode(&bytes, Config::default()).map_err(|e| e.to_string())?;
    let mut again = Vec::new();
    snapshot::encode(&back, &mut again);
    if again != bytes {
        return Err("a decoded snapshot does not encode to the same bytes".into());
    }
    w.snap = Some((w.log.len(), bytes));
    w.stats.snapshots += 1;
    w.note(format!("snapshot at log position {}", w.log.len()));
    Ok(())
}

/// The state a restart would build from the latest snapshot, checked against the
/// live one. None without a snapshot.
fn restore(w: &mut World) -> Result<Option<State>, String> {
    let Some((at, bytes)) = w.snap.clone() else {
        return Ok(None);
    };
    let mut r = snapshot::decode(&bytes, Config::default()).map_err(|e| e.to_string())?;
    // The server takes the position from the snapshot file's name (Image::applied);
    // the payload holds only the zxid.
    r.applied = LogIndex(at as u64);
    let lost = Lost::ReplayedBefore(r.zxid);
    let got = replay(&mut r, at, &w.log[at..])?;
    let diff = compare(w, &w.log[at..], &got, &r, lost)
        .map_err(|e| format!("snapshot at {at} + suffix: {e}"))?;
    w.stats.waiter_diffs += u64::from(diff);
    Ok(Some(r))
}

/// A restart: the live state becomes decode(snapshot) + the log suffix; the tracker
/// starts afresh (every session gets its whole timeout); waiting native clients
/// re-send their request with RESUME, as the lock protocol asks after a reconnect.
pub fn restart(w: &mut World) -> Result<(), String> {
    let Some(r) = restore(w)? else {
        return Ok(());
    };
    w.st = r;
    w.stats.restarts += 1;
    w.note("restart from the snapshot".into());
    w.tracker = SessionTracker::new(w.tracker.tick_ms());
    w.last_seen.clear();
    for (&id, s) in &w.st.sessions {
        w.tracker.add(id, s.timeout_ms as u64, Time(w.now));
        w.last_seen.insert(id, w.now);
    }
    // Proposed expiries that were not logged are lost; the tracker reports again.
    w.pending_close.clear();
    let mut waiting = Vec::new();
    for (p, c) in w.oracle.nodes.iter_mut() {
        if c.native && !c.holds {
            if !WAITERS_SNAPSHOTTED {
                c.registered = false;
            }
            waiting.push((p.clone(), c.clone()));
        }
    }
    for (node, c) in waiting {
        let alive = w.clients.get(&c.session).is_some_and(|cl| !cl.silent);
        // With waiters in the snapshot, only some clients re-send, so the restored
        // waiters are exercised too.
        if !alive || (WAITERS_SNAPSHOTTED && w.rng.chance(50)) || !w.touch(c.session) {
            continue;
        }
        let req = lock_request(c.lock, &c.prefix, c.mode, lock_flags::RESUME, String::new());
        let txn = w.txn(c.session, req);
        let reply = w.apply(txn, Some((c.lock, &c.prefix, c.mode)))?;
        if reply.err != 0 {
            return Err(format!(
                "RESUME of {node} after restart failed: {}",
                reply.err
            ));
        }
        w.stats.resumes_after_restart += 1;
        w.note(format!(
            "resume {node} on {} after restart",
            LOCKS[c.lock].0
        ));
    }
    Ok(())
}

/// At the end: the latest snapshot + suffix, and a replay of the whole log from an
/// empty state, must both give the live state.
pub fn final_check(w: &mut World) -> Result<(), String> {
    restore(w)?;
    let mut r = State::new(Config::default());
    let got = replay(&mut r, 0, &w.log)?;
    let lost = Lost::Live(w.stats.restarts);
    let diff = compare(w, &w.log, &got, &r, lost).map_err(|e| format!("whole log replay: {e}"))?;
    w.stats.waiter_diffs += u64::from(diff);
    Ok(())
}

/// Compares a replayed run with the live one; true if they differed where lost
/// waiters explain it.
fn compare(
    w: &World,
    live: &[Entry],
    got: &[Produced],
    r: &State,
    lost: Lost,
) -> Result<bool, String> {
    let mut waiter_diff = false;
    for (e, (reply, events, grants)) in live.iter().zip(got) {
        if *reply != e.reply {
            return Err(format!(
                "reply differs for {:?}: {reply:?} vs live {:?}",
                e.txn, e.reply
            ));
        }
        if *events != e.events {
            return Err(format!("events differ for {:?}", e.txn));
        }
        if *grants != e.grants {
            // Waiters are not snapshotted yet (issue 10): a run that lost waiters
            // lacks their grants, and only those.
            let explained = !WAITERS_SNAPSHOTTED
                && match lost {
                    Lost::ReplayedBefore(zxid) => {
                        subset(grants, &e.grants)
                            && missing(&e.grants, grants).all(|g| g.1.czxid <= zxid)
                    }
                    Lost::Live(restarts) => restarts > 0 && subset(&e.grants, grants),
                };
            if !explained {
                return Err(format!(
                    "grants differ for {:?}: replayed {grants:?} vs live {:?}",
                    e.txn, e.grants
                ));
            }
            waiter_diff = true;
        }
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    snapshot::encode(r, &mut a);
    snapshot::encode(&w.st, &mut b);
    if a != b {
        return Err("snapshot encodings differ".into());
    }
    let (replayed, live_waiting) = (r.locks.waiting(), w.st.locks.waiting());
    if replayed != live_waiting {
        let explained = !WAITERS_SNAPSHOTTED
            && match lost {
                Lost::ReplayedBefore(_) => replayed < live_waiting,
                Lost::Live(restarts) => restarts > 0 && replayed > live_waiting,
            };
        if !explained {
            return Err(format!(
                "native waiters: replayed {replayed}, live {live_waiting}"
            ));
        }
        waiter_diff = true;
    }
    Ok(waiter_diff)
}

fn subset(small: &[Grant], big: &[Grant]) -> bool {
    small.iter().all(|g| big.contains(g))
}

fn missing<'a>(all: &'a [Grant], have: &'a [Grant]) -> impl Iterator<Item = &'a Grant> {
    all.iter().filter(move |g| !have.contains(g))
}
