//! What the core tells admin commands and a metrics scrape, read under its lock.

use super::*;

impl Core {
    /// What the admin answers read (see `admin::Facts`).
    pub(super) fn facts(&self) -> admin::Facts<'_> {
        admin::Facts {
            state: &self.state,
            stats: &self.router.stats,
            latency: &self.router.latency,
            mode: self.mode,
            ensemble: self.ensemble.as_ref(),
            tracker: &self.sessions,
            now: self.clock.now(),
            waiting: self.router.waiting(),
        }
    }

    /// What a metrics scrape reads of the applied state (see `crate::metrics`): numbers,
    /// and an O(1) copy of the znodes.
    pub(super) fn scrape(&self) -> crate::pipeline::Scrape {
        let st = &self.state;
        // One walk of the lock queues (O(entries), once a scrape): holders, and the
        // oldest waiting native request by its node's creation time.
        let (mut holders, mut oldest) = (0, None::<i64>);
        for lock in st.locks.view() {
            for e in &lock.entries {
                match e.standing {
                    zlock_core::locks::Standing::Holds => holders += 1,
                    zlock_core::locks::Standing::Waiting(_) => {
                        let node = zlock_core::path::join(&lock.path, &e.name);
                        if let Some(n) = st.tree.get(&node) {
                            oldest = Some(oldest.map_or(n.ctime, |o: i64| o.min(n.ctime)));
                        }
                    }
                    zlock_core::locks::Standing::Queued => {}
                }
            }
        }
        crate::pipeline::Scrape {
            latency: self.router.latency.clone(),
            znode_count: st.tree.len(),
            watch_count: st.watches.count(),
            ephemerals_count: st.tree.ephemeral_count(),
            global_sessions: st.sessions.len(),
            nodes: st.tree.nodes().clone(),
            waiting: self.router.waiting(),
            lock_waiters: st.locks.waiting(),
            lock_paths: st.locks.len(),
            lock_delays: st.locks.delayed(),
            lock_holders: holders,
            lock_longest_wait_ms: oldest.map_or(0, |t| now_ms().saturating_sub(t)),
            ensemble: self.ensemble.clone(),
            led_since: if self.ensemble.is_some() && self.leads {
                self.led_since
            } else {
                None
            },
        }
    }
}
