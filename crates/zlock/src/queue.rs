//! The session's request queue: bounded in bytes, in call order, with callers waiting in
//! line when it is full.
//!
//! A request is *queued* (handed to the session actor, sent even if its caller drops the
//! reply future) while the bytes queued and not yet written to the socket stay within
//! [`QUEUE_BYTES`]. Past that it *waits* in line: it keeps its place in the call order,
//! the actor takes it once earlier requests are written, and dropping its reply future
//! before then withdraws it. Memory held for requests is therefore at most
//! [`QUEUE_BYTES`] plus what callers' own pending futures hold.
//!
//! Room is given back by the actor ([`Inbox::release`]) once the commands it took are
//! written (or answered, when the connection broke or the session is lost). Every move
//! from the line to the actor happens under one lock, so the actor receives commands in
//! exactly the order they were pushed.
//!
//! The callers' side owns the channel's sender: when every [`Queue`] (every client
//! handle) and every [`Place`] in line is gone, the actor's [`Inbox::recv`] ends, as the
//! session's end.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::mpsc;

use crate::session::Cmd;

/// Bytes of requests a session keeps queued or unwritten before callers wait in line.
/// Each request counts its body plus [`PER_REQUEST`] bytes.
pub(crate) const QUEUE_BYTES: usize = 4 << 20;

/// What a request counts for besides its body: header, framing and bookkeeping. Makes
/// a flood of tiny requests wait too (at most ~65,000 queued).
const PER_REQUEST: usize = 64;

/// The callers' end: cheap to clone, shared by every handle of a session.
#[derive(Clone)]
pub(crate) struct Queue {
    line: Arc<Mutex<Line>>,
}

/// The actor's end.
pub(crate) struct Inbox {
    rx: mpsc::UnboundedReceiver<(Cmd, usize)>,
    /// Weak: the line (and the sender in it) lives as long as the callers' side.
    line: Weak<Mutex<Line>>,
    /// Room taken by the commands received since the last [`Inbox::release`].
    taken: usize,
}

struct Line {
    /// To the actor. Only sent to under the lock, which keeps the order.
    tx: mpsc::UnboundedSender<(Cmd, usize)>,
    /// Bytes of [`QUEUE_BYTES`] not taken by queued or unwritten commands.
    room: usize,
    /// Commands waiting for room, oldest first; tickets rise.
    waiting: VecDeque<Waiting>,
    next_ticket: u64,
    /// The actor is gone: nothing is queued any more.
    closed: bool,
}

struct Waiting {
    ticket: u64,
    cmd: Cmd,
    weight: usize,
}

/// A pushed command's place in line: dropping it withdraws the command if it is still
/// waiting for room (a queued command stays queued).
#[must_use]
pub(crate) struct Place {
    waiting: Option<(Arc<Mutex<Line>>, u64)>,
}

/// The room a command takes.
fn weight(cmd: &Cmd) -> usize {
    let body = match cmd {
        Cmd::Request { body, .. } => body.len(),
        Cmd::Auth { scheme, auth, .. } => scheme.len() + auth.len(),
        Cmd::Close { .. } => 0,
    };
    (body + PER_REQUEST).min(QUEUE_BYTES)
}

fn lock(line: &Mutex<Line>) -> MutexGuard<'_, Line> {
    // No code holding the lock can panic half-way through a change.
    line.lock().unwrap_or_else(|e| e.into_inner())
}

impl Queue {
    pub(crate) fn new() -> (Queue, Inbox) {
        let (tx, rx) = mpsc::unbounded_channel();
        let line = Arc::new(Mutex::new(Line {
            tx,
            room: QUEUE_BYTES,
            waiting: VecDeque::new(),
            next_ticket: 0,
            closed: false,
        }));
        let inbox = Inbox {
            rx,
            line: Arc::downgrade(&line),
            taken: 0,
        };
        (Queue { line }, inbox)
    }

    /// Queues `cmd` behind every command pushed before it, or puts it in line when the
    /// queue is full. Once the actor is gone the command is dropped, which its caller
    /// sees as its reply channel closing.
    pub(crate) fn push(&self, cmd: Cmd) -> Place {
        let weight = weight(&cmd);
        let mut line = lock(&self.line);
        if line.closed {
            return Place { waiting: None };
        }
        if line.waiting.is_empty() && line.room >= weight {
            line.room -= weight;
            let _ = line.tx.send((cmd, weight));
            return Place { waiting: None };
        }
        let ticket = line.next_ticket;
        line.next_ticket += 1;
        line.waiting.push_back(Waiting {
            ticket,
            cmd,
            weight,
        });
        Place {
            waiting: Some((self.line.clone(), ticket)),
        }
    }
}

impl Line {
    /// Queues waiting commands, oldest first, while they fit. Every weight is at most
    /// [`QUEUE_BYTES`], so an empty queue always takes the oldest.
    fn admit(&mut self) {
        while self.waiting.front().is_some_and(|w| w.weight <= self.room) {
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            self.room -= w.weight;
            let _ = self.tx.send((w.cmd, w.weight));
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let Some((line, ticket)) = self.waiting.take() else {
            return;
        };
        let mut line = lock(&line);
        if let Ok(i) = line.waiting.binary_search_by_key(&ticket, |w| w.ticket) {
            line.waiting.remove(i);
            // The head may have gone: whoever is next may fit now.
            line.admit();
        }
    }
}

impl Inbox {
    /// The next queued command.
    ///
    /// # Cancellation safety
    /// Cancel safe: a command is taken only when this resolves.
    pub(crate) async fn recv(&mut self) -> Option<Cmd> {
        let (cmd, weight) = self.rx.recv().await?;
        self.taken += weight;
        Some(cmd)
    }

    /// The next queued command if one is there now.
    pub(crate) fn try_recv(&mut self) -> Option<Cmd> {
        let (cmd, weight) = self.rx.try_recv().ok()?;
        self.taken += weight;
        Some(cmd)
    }

    /// Gives back the room of every command received so far: they are written to the
    /// socket, or answered. Commands waiting in line move up.
    pub(crate) fn release(&mut self) {
        let taken = std::mem::take(&mut self.taken);
        if taken == 0 {
            return;
        }
        if let Some(line) = self.line.upgrade() {
            let mut line = lock(&line);
            line.room += taken;
            line.admit();
        }
    }
}

impl Drop for Inbox {
    /// The actor is gone: the commands in line are dropped (their callers see the
    /// session closed) and no more are taken.
    fn drop(&mut self) {
        let Some(line) = self.line.upgrade() else {
            return;
        };
        let waiting = {
            let mut line = lock(&line);
            line.closed = true;
            std::mem::take(&mut line.waiting)
        };
        drop(waiting);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tokio::sync::oneshot;
    use zlock_proto::OpCode;

    use super::*;
    use crate::session::Reply;

    const MIB: usize = 1 << 20;

    /// A request whose body is `len` bytes of `tag`.
    fn request(tag: u8, len: usize) -> (Cmd, oneshot::Receiver<Reply>) {
        let (done, wait) = oneshot::channel();
        let cmd = Cmd::Request {
            op: OpCode::SetData,
            body: vec![tag; len],
            on_reply: crate::session::OnReply::Nothing,
            done,
        };
        (cmd, wait)
    }

    fn tag(cmd: &Cmd) -> u8 {
        match cmd {
            Cmd::Request { body, .. } => body[0],
            _ => panic!("not a request"),
        }
    }

    /// Every command the actor can take now, by tag.
    fn drain(inbox: &mut Inbox) -> Vec<u8> {
        std::iter::from_fn(|| inbox.try_recv())
            .map(|c| tag(&c))
            .collect()
    }

    #[test]
    fn queues_within_the_bound_and_lets_the_line_in_as_room_is_given_back() {
        let (queue, mut inbox) = Queue::new();
        // 1 MiB + 64 each: three fit in 4 MiB, the rest wait in line.
        let mut held = Vec::new();
        for t in 0..8 {
            held.push(queue.push(request(t, MIB).0));
        }
        assert_eq!(drain(&mut inbox), [0, 1, 2]);
        // A small one still waits behind the line: call order is kept.
        held.push(queue.push(request(8, 1).0));
        assert_eq!(drain(&mut inbox), Vec::<u8>::new());
        inbox.release();
        assert_eq!(drain(&mut inbox), [3, 4, 5]);
        inbox.release();
        assert_eq!(drain(&mut inbox), [6, 7, 8]);
        inbox.release();
        assert_eq!(lock(&queue.line).room, QUEUE_BYTES);
    }

    #[test]
    fn a_request_larger_than_the_bound_goes_alone() {
        let (queue, mut inbox) = Queue::new();
        let _a = queue.push(request(0, 1).0);
        let _b = queue.push(request(1, 2 * QUEUE_BYTES).0);
        let _c = queue.push(request(2, 1).0);
        assert_eq!(drain(&mut inbox), [0]);
        inbox.release();
        assert_eq!(drain(&mut inbox), [1]);
        inbox.release();
        assert_eq!(drain(&mut inbox), [2]);
    }

    #[test]
    fn dropping_a_place_in_line_withdraws_the_request_and_only_that() {
        let (queue, mut inbox) = Queue::new();
        let queued = queue.push(request(0, 4 * MIB - PER_REQUEST).0);
        let (cmd, mut withdrawn) = request(1, MIB);
        let place = queue.push(cmd);
        let _kept = queue.push(request(2, MIB).0);
        drop(place);
        let gone = withdrawn.try_recv();
        assert_eq!(
            gone,
            Err(oneshot::error::TryRecvError::Closed),
            "the caller sees it gone"
        );
        // A request already queued stays queued when its place is dropped.
        drop(queued);
        assert_eq!(drain(&mut inbox), [0]);
        inbox.release();
        assert_eq!(drain(&mut inbox), [2]);
    }

    #[test]
    fn once_the_actor_is_gone_waiting_and_new_requests_are_dropped() {
        let (queue, inbox) = Queue::new();
        let (cmd, mut queued) = request(0, QUEUE_BYTES);
        let _a = queue.push(cmd);
        let (cmd, mut waiting) = request(1, 1);
        let _b = queue.push(cmd);
        drop(inbox);
        let (cmd, mut late) = request(2, 1);
        let _c = queue.push(cmd);
        for rx in [&mut queued, &mut waiting, &mut late] {
            assert_eq!(rx.try_recv(), Err(oneshot::error::TryRecvError::Closed));
        }
    }

    #[test]
    fn the_inbox_ends_when_every_handle_and_place_in_line_is_gone() {
        let (queue, mut inbox) = Queue::new();
        let _queued = queue.push(request(0, QUEUE_BYTES).0);
        let waiting = queue.push(request(1, 1).0);
        drop(queue);
        assert_eq!(drain(&mut inbox), [0]);
        assert!(inbox.rx.try_recv().is_err(), "nothing yet, but not ended");
        inbox.release();
        drop(waiting);
        // Admitted by the release before its place went: still delivered, then the end.
        assert_eq!(drain(&mut inbox), [1]);
        assert_eq!(
            inbox.rx.try_recv().err(),
            Some(mpsc::error::TryRecvError::Disconnected)
        );
    }
}
