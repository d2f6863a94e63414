//! The member's two clocks: the monotonic one its session tracker reads (time since the
//! server started, in ms), and the wall clock fixed into each Txn (ctime, mtime, TTL
//! checks, lock-delays) by the single node's sequencer or, in an ensemble, by the leader
//! when it takes the Txn (`commit::raft::peer::write_as_leader`). Nothing that applies
//! Txns reads either.

use std::time::Instant;

use zlock_core::sessions::Time;

/// The member's monotonic clock as the session tracker reads it: ms since start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub fn start() -> Clock {
        Clock(Instant::now())
    }
    pub fn at(&self, t: Instant) -> Time {
        Time(t.saturating_duration_since(self.0).as_millis() as u64)
    }
    pub fn now(&self) -> Time {
        self.at(Instant::now())
    }
}

/// The wall clock, as fixed into Txns (ms since the epoch).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
