//! Snapshots, restarts and check 1: the state rebuilt from a snapshot plus the log
//! suffix after it must equal the state after the whole log.
//!
//! Compared, all exactly: the snapshot encodings (the tree, sessions and zxid), each
//! replayed entry's reply, events and native grants against what it produced live, and
//! the number of native waiters (which the snapshot carries).

use zlock_core::sessions::{SessionTracker, Time};
use zlock_core::{snapshot, Config, LogIndex, State};
use zlock_proto::records::lock_flags;

use super::ops::lock_request;
use super::oracle::LOCKS;
use super::world::{replay, Entry, Produced, World};

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
    let got = replay(&mut r, at, &w.log[at..])?;
    compare(w, &w.log[at..], &got, &r).map_err(|e| format!("snapshot at {at} + suffix: {e}"))?;
    Ok(Some(r))
}

/// A restart: the live state becomes decode(snapshot) + the log suffix; the tracker
/// starts afresh (every session gets its whole timeout); the native waiters come back
/// from the snapshot, and some waiting clients (a live one half of the time) re-send
/// their request with RESUME, as the lock protocol asks after a reconnect, so both
/// restored and re-sent waiters are exercised.
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
    let waiting: Vec<_> = w
        .oracle
        .nodes
        .iter()
        .filter(|(_, c)| c.native && !c.holds)
        .map(|(p, c)| (p.clone(), c.clone()))
        .collect();
    for (node, c) in waiting {
        let alive = w.clients.get(&c.session).is_some_and(|cl| !cl.silent);
        if !alive || w.rng.chance(50) || !w.touch(c.session) {
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
    compare(w, &w.log, &got, &r).map_err(|e| format!("whole log replay: {e}"))
}

/// Compares a replayed run with the live one.
fn compare(w: &World, live: &[Entry], got: &[Produced], r: &State) -> Result<(), String> {
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
            return Err(format!(
                "grants differ for {:?}: replayed {grants:?} vs live {:?}",
                e.txn, e.grants
            ));
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
        return Err(format!(
            "native waiters: replayed {replayed}, live {live_waiting}"
        ));
    }
    Ok(())
}
