//! The ticker's look at session liveness and containers.

use super::*;

impl Core {
    /// Liveness and container checks; what must be proposed goes to `out`.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<Item>) {
        if self.stopped {
            return;
        }
        // Only the member that leads expires, and only while a quorum answers it (in an
        // ensemble, the others' trackers only keep the sessions for when they lead).
        if self.leads && self.in_touch {
            for session in self.sessions.expired(self.clock.at(now)) {
                out.push(Item::Expire { session });
            }
        }
        let mut paths = Vec::new();
        if now >= self.next_container_check {
            self.next_container_check =
                now + Duration::from_millis(self.config.container_check_interval_ms);
            paths = self.state.expired_candidates(now_ms());
        }
        // A lock-delay ends at the first Txn whose time reaches it; the member that
        // expires sessions proposes one then, so its waiters are granted within a tick
        // even when nothing else is written. Proposed again each tick until applied.
        let delay_due = self.leads
            && self.in_touch
            && self
                .state
                .locks
                .next_delay_end()
                .is_some_and(|end| end <= now_ms());
        if !paths.is_empty() || delay_due {
            out.push(Item::DeleteExpired { paths });
        }
    }
}
