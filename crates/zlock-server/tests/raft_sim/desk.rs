//! What a member's sequencer does for its writer (`pipeline::core::sequence`), as far as
//! the writer's rules depend on it: it hands the writer its clients' batches in order,
//! without waiting for their outcomes (a client hears its replies as the member applies
//! its writes), and when the writer reports a trouble (an outcome it cannot know), it
//! drops every client connection and then tells the writer so (`Order::Dropped`). Until
//! then the writer discards what it is handed; after it, the clients that were dropped
//! resume their sessions, and their new requests must land after whatever of their old
//! ones lands (per-session FIFO, checked at the end).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, oneshot};
use zlock_server::commit::raft::types::Proposal;
use zlock_server::commit::raft::write::Order;
use zlock_server::commit::CommitError;

use crate::world::{lock, Shared};

/// One client connection at a member: dropped once, for good (its client looks).
#[derive(Default)]
pub struct Conn {
    dropped: AtomicBool,
}

impl Conn {
    pub fn dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }

    fn drop_now(&self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// A batch handed to a member's sequencer by a client connection.
pub struct Handed {
    pub conn: Arc<Conn>,
    pub props: Vec<Proposal>,
    /// Told the batch's outcome (a synchronous proposer's, `Order::Batch`'s `done`);
    /// dropped untold if the sequencer does not hand the batch over.
    pub done: Option<oneshot::Sender<Result<u64, CommitError>>>,
}

/// Runs member `id`'s sequencer for its writer: until the member stops (its clients'
/// side closes, or the writer ends).
pub async fn run(
    world: Shared,
    id: u64,
    mut input: mpsc::UnboundedReceiver<Handed>,
    orders: mpsc::Sender<Order>,
    mut troubles: mpsc::UnboundedReceiver<CommitError>,
) {
    // The connections that handed a batch since the last drop.
    let mut conns: Vec<Arc<Conn>> = Vec::new();
    // When the sequencer gets to a trouble reported: it takes it in turn with its
    // clients' requests, which it goes on handing over meanwhile (0-20 ms).
    let mut drop_at: Option<(tokio::time::Instant, CommitError)> = None;
    loop {
        let due = drop_at.as_ref().map(|(at, _)| *at);
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                let Some((_, trouble)) = drop_at.take() else { continue };
                // Every trouble reported before the drop is answered by it.
                while troubles.try_recv().is_ok() {}
                let n = conns.len();
                for c in conns.drain(..) {
                    c.drop_now();
                }
                lock(&world).event(format!(
                    "member {id}'s sequencer drops its client connections ({n} with \
                     batches) on: {trouble}"
                ));
                if orders.send(Order::Dropped).await.is_err() {
                    return;
                }
            }
            trouble = troubles.recv(), if due.is_none() => {
                let Some(trouble) = trouble else { return };
                let wait = Duration::from_micros(lock(&world).rng.gen_range(0..=20_000));
                drop_at = Some((tokio::time::Instant::now() + wait, trouble));
            }
            handed = input.recv() => {
                let Some(Handed { conn, props, done }) = handed else { return };
                if conn.dropped() {
                    // Its connection is gone: the sequencer has nobody to take it from.
                    continue;
                }
                if !conns.iter().any(|c| Arc::ptr_eq(c, &conn)) {
                    conns.push(conn);
                }
                if orders.send(Order::Batch { props, done }).await.is_err() {
                    return;
                }
            }
        }
    }
}
