//! The ticker thread: every [`TICK`], asks the core's session tracker which sessions are
//! past their timeout and which containers or TTL nodes look removable, and proposes
//! their removal through the sequencer like any write.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;

use super::core::{with_core, Core};
use super::Item;
use super::TICK;

/// Starts the ticker thread: every [`TICK`], session liveness and container checks
/// ([`Core::tick`]), whose expiries and removals it proposes through `commit`. It stops when the returned sender is dropped.
pub(crate) fn start_ticker(
    core: Arc<Mutex<Core>>,
    commit: mpsc::Sender<Item>,
) -> std::io::Result<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
    let (stop, ticks) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("zlock-tick".into())
        .spawn(move || {
            let mut dirty = Vec::new();
            let mut proposals = Vec::new();
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = ticks.recv_timeout(TICK) {
                with_core(&core, &mut dirty, |c| {
                    c.tick(Instant::now(), &mut proposals)
                });
                crate::conn::out::flush(&mut dirty);
                // Sent with the core's lock released: the sequencer needs the lock to
                // drain the queue this may wait for.
                for item in proposals.drain(..) {
                    if commit.blocking_send(item).is_err() {
                        return;
                    }
                }
            }
        })?;
    Ok((stop, thread))
}
