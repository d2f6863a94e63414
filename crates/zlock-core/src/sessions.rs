//! Session liveness: which sessions have gone quiet for longer than their timeout.
//!
//! This is ZooKeeper's `SessionTrackerImpl` over its `ExpiryQueue`, as pure code: the
//! caller passes the time in and proposes a CloseSession for each session that
//! [`SessionTracker::expired`] returns. Nothing here closes a session by itself; the
//! tracker only answers "whose deadline has passed".
//!
//! # Expiry buckets
//! Deadlines are rounded up to the next multiple of the tick interval,
//! `(t / tick + 1) * tick`, and sessions are kept in a map from that rounded deadline (a
//! bucket) to the set of sessions due then. So:
//! - a touch moves a session only when its bucket changes, and a touch that stays in its
//!   bucket is a hash lookup and a compare, with no allocation (the hot path: the server
//!   touches on every request);
//! - an expiry check pops only the buckets whose deadline has passed, never a scan of
//!   all sessions;
//! - [`SessionTracker::next_deadline`] is the first bucket, so a caller can sleep until
//!   then instead of polling.
//!
//! # Guarantee
//! With `last` the latest time a session was added, touched, restarted or given a new
//! timeout, and `timeout` its current timeout, the session is never reported before
//! `last + timeout` has passed (`now > last + timeout` when it is reported), and it is
//! reported by any call `expired(now)` with `now >= last + timeout + tick`: at most one
//! tick late. It is reported once; afterwards it is expiring until [`remove`]d (or
//! revived by [`add`] or [`restart_all`]), and a touch no longer counts.
//!
//! Times far beyond any real clock (near `u64::MAX` milliseconds) saturate, so such a
//! session simply never expires rather than overflowing.
//!
//! [`remove`]: SessionTracker::remove
//! [`add`]: SessionTracker::add
//! [`restart_all`]: SessionTracker::restart_all

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::tree::SessionId;

/// A point in time: milliseconds since an arbitrary monotonic origin chosen by the
/// caller (a newly started process may pick its start). Kept apart from the timeouts,
/// which are plain millisecond counts, so `add(id, timeout, now)` cannot be called with
/// the two swapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub u64);

impl Time {
    /// `self + ms`, saturating.
    pub fn plus(self, ms: u64) -> Time {
        Time(self.0.saturating_add(ms))
    }
}

/// What the tracker knows of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tracked {
    /// The negotiated timeout in milliseconds; each touch pushes the deadline to
    /// `now + timeout`, rounded up to the tick.
    timeout_ms: u64,
    /// The bucket the session sits in. An expiring session keeps the deadline it
    /// expired at but is in no bucket any more, so it is never reported twice.
    deadline: Time,
    /// Reported by [`SessionTracker::expired`] and waiting for its CloseSession to be
    /// applied; a touch no longer counts (ZooKeeper's `SessionImpl.isClosing`).
    expiring: bool,
}

/// Session deadlines in tick-sized expiry buckets (see the module doc).
#[derive(Debug, Clone)]
pub struct SessionTracker {
    /// Bucket width in milliseconds (ZooKeeper's `tickTime`). Wider buckets mean fewer
    /// bucket moves on touch and fewer wake-ups, at the price of reporting up to one
    /// tick late.
    tick_ms: u64,
    /// Every tracked session, expiring or not.
    sessions: HashMap<SessionId, Tracked>,
    /// Rounded deadline -> the non-expiring sessions due then. Ordered so an expiry check
    /// pops from the front, and no bucket is ever empty, so the first key is the next
    /// deadline.
    buckets: BTreeMap<Time, HashSet<SessionId>>,
}

impl SessionTracker {
    /// An empty tracker with buckets `tick_ms` wide. A tick of 0 is taken as 1 ms
    /// (there is no zero-width bucket to round to).
    pub fn new(tick_ms: u64) -> SessionTracker {
        SessionTracker {
            tick_ms: tick_ms.max(1),
            sessions: HashMap::new(),
            buckets: BTreeMap::new(),
        }
    }

    /// The bucket width in milliseconds.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms
    }

    /// The bucket a deadline of `t` falls into: the next multiple of the tick strictly
    /// after `t` (ZooKeeper's `ExpiryQueue.roundToNextInterval`). Strictly after, so a
    /// session is never due at exactly `last + timeout`.
    pub fn bucket_of(&self, t: Time) -> Time {
        round_up(self.tick_ms, t)
    }

    /// Tracks a new or recovered session with a full `timeout_ms` from `now`. An id
    /// already tracked is replaced: its timeout and deadline are set afresh and an
    /// expiring mark is cleared, as for a session the caller has decided is live again.
    pub fn add(&mut self, id: SessionId, timeout_ms: u64, now: Time) {
        self.unbucket(id);
        let deadline = self.bucket_of(now.plus(timeout_ms));
        self.sessions.insert(
            id,
            Tracked {
                timeout_ms,
                deadline,
                expiring: false,
            },
        );
        self.buckets.entry(deadline).or_default().insert(id);
    }

    /// Records activity of `id` at `now`: its deadline becomes `now + timeout`, rounded
    /// up, unless that is not later than the current one. Touches may come from this
    /// member's connections or from another member's batch, so they can arrive out of
    /// time order; a touch never moves a deadline earlier. (ZooKeeper 3.4's
    /// `touchSession` returned early on `tickTime >= expireTime` the same way; 3.5+'s
    /// `ExpiryQueue.update` only skips an unchanged bucket, which suffices there because
    /// its touches all read one local clock.)
    ///
    /// Returns false, and changes nothing, if `id` is unknown or already expiring: the
    /// caller should then answer SessionExpired rather than serve the request.
    pub fn touch(&mut self, id: SessionId, now: Time) -> bool {
        let tick_ms = self.tick_ms;
        let Some(s) = self.sessions.get_mut(&id) else {
            return false;
        };
        if s.expiring {
            return false;
        }
        let new = round_up(tick_ms, now.plus(s.timeout_ms));
        if new <= s.deadline {
            // The hot path: same bucket (or an older touch); nothing moves.
            return true;
        }
        let old = std::mem::replace(&mut s.deadline, new);
        Self::rebucket(&mut self.buckets, id, old, new);
        true
    }

    /// Gives `id` a new timeout, with the deadline set to `now + timeout_ms` rounded up,
    /// as for a reconnect that renegotiated its timeout. Unlike [`touch`](Self::touch)
    /// this may move the deadline earlier: a shorter timeout takes effect at once.
    /// Returns false, and changes nothing, if `id` is unknown or expiring.
    pub fn set_timeout(&mut self, id: SessionId, timeout_ms: u64, now: Time) -> bool {
        let new = self.bucket_of(now.plus(timeout_ms));
        let Some(s) = self.sessions.get_mut(&id) else {
            return false;
        };
        if s.expiring {
            return false;
        }
        s.timeout_ms = timeout_ms;
        let old = std::mem::replace(&mut s.deadline, new);
        if old != new {
            Self::rebucket(&mut self.buckets, id, old, new);
        }
        true
    }

    /// Stops tracking `id` (closed, or expired and the CloseSession applied). Returns
    /// whether it was tracked.
    pub fn remove(&mut self, id: SessionId) -> bool {
        self.unbucket(id);
        self.sessions.remove(&id).is_some()
    }

    /// The sessions whose deadline is at or before `now`, ordered by deadline and then
    /// id (so the CloseSession proposals come out the same on every run). Each is marked
    /// expiring and returned only this once; it stays tracked until
    /// [`remove`](Self::remove)d.
    pub fn expired(&mut self, now: Time) -> Vec<SessionId> {
        let mut out = Vec::new();
        while let Some(entry) = self.buckets.first_entry() {
            if *entry.key() > now {
                break;
            }
            let start = out.len();
            out.extend(entry.remove());
            out[start..].sort_unstable();
        }
        for id in &out {
            if let Some(s) = self.sessions.get_mut(id) {
                s.expiring = true;
            }
        }
        out
    }

    /// Gives every tracked session a full timeout from `now` and clears every expiring
    /// mark. A newly elected leader, or a single node after a restart, does this: it
    /// cannot know when sessions were last heard from, so each gets its whole timeout to
    /// reconnect (ZooKeeper's leader builds a fresh `SessionTrackerImpl` from the
    /// snapshot's sessions, each starting its timeout at election). A session that was
    /// expiring is no longer reported unless it goes quiet again; the caller should
    /// treat any CloseSession it proposed earlier as possibly lost.
    pub fn restart_all(&mut self, now: Time) {
        self.buckets.clear();
        let tick_ms = self.tick_ms;
        for (&id, s) in &mut self.sessions {
            s.deadline = round_up(tick_ms, now.plus(s.timeout_ms));
            s.expiring = false;
            self.buckets.entry(s.deadline).or_default().insert(id);
        }
    }

    /// The number of tracked sessions, expiring ones included.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session is tracked.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Whether `id` is tracked (expiring or not).
    pub fn contains(&self, id: SessionId) -> bool {
        self.sessions.contains_key(&id)
    }

    /// Whether `id` has been reported by [`expired`](Self::expired) and not revived.
    /// False for an unknown id.
    pub fn is_expiring(&self, id: SessionId) -> bool {
        self.sessions.get(&id).is_some_and(|s| s.expiring)
    }

    /// The rounded deadline of `id` (for an expiring session, the one it expired at).
    pub fn deadline(&self, id: SessionId) -> Option<Time> {
        self.sessions.get(&id).map(|s| s.deadline)
    }

    /// The timeout of `id` in milliseconds.
    pub fn timeout_ms(&self, id: SessionId) -> Option<u64> {
        self.sessions.get(&id).map(|s| s.timeout_ms)
    }

    /// The earliest bucket that still holds a session: the next time
    /// [`expired`](Self::expired) can return anything. None when no session can expire.
    pub fn next_deadline(&self) -> Option<Time> {
        self.buckets.keys().next().copied()
    }

    /// Takes `id` out of its bucket, if it is in one, dropping the bucket if it empties.
    fn unbucket(&mut self, id: SessionId) {
        let Some(s) = self.sessions.get(&id) else {
            return;
        };
        if s.expiring {
            return;
        }
        if let Some(set) = self.buckets.get_mut(&s.deadline) {
            set.remove(&id);
            if set.is_empty() {
                self.buckets.remove(&s.deadline);
            }
        }
    }

    /// Moves `id` from bucket `old` to bucket `new`. An emptied old bucket's set is
    /// reused for a new bucket, so a lone session (or a group moving in step) does not
    /// allocate on each move.
    fn rebucket(
        buckets: &mut BTreeMap<Time, HashSet<SessionId>>,
        id: SessionId,
        old: Time,
        new: Time,
    ) {
        let mut spare = None;
        if let Some(set) = buckets.get_mut(&old) {
            set.remove(&id);
            if set.is_empty() {
                spare = buckets.remove(&old);
            }
        }
        buckets
            .entry(new)
            .or_insert_with(|| spare.unwrap_or_default())
            .insert(id);
    }
}

/// The next multiple of `tick_ms` strictly after `t`, saturating. A free function so
/// it can run while a session is mutably borrowed.
fn round_up(tick_ms: u64, t: Time) -> Time {
    Time((t.0 / tick_ms).saturating_add(1).saturating_mul(tick_ms))
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
