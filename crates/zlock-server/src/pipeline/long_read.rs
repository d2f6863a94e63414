//! Long reads: the part of a read that walks much of the tree (getAllChildrenNumber of a
//! big subtree), finished on a thread of its own, without the core's lock.
//!
//! Under the lock the router serves every read as far as [`IN_PLACE`] look-ups go
//! ([`State::read_within`](zlock_core::State::read_within)): the node and its ACL are
//! checked, and a short walk is answered there like any read. A longer one leaves a
//! [`LongRead`] (the rest of the walk, on an O(1) copy of the znodes as they are then)
//! and, taken in the same hold of the lock, a [`Reserved`] place on the asker's
//! connection. This thread finishes the walk and fills the reply into that place. So
//! the reply answers for the moment the read was served (after every earlier write of
//! its session, before every later one) and leaves after everything queued on its
//! connection before that moment and before everything queued after it: per-session
//! FIFO and xid order hold as if it had been answered in place, whether it was served by
//! the connection task (an idle session) or by the commit thread (a read queued behind
//! a write of its session).
//!
//! One thread: long reads are rare, and a second one would compete with the commit
//! thread. Its queue is bounded by the connections' budgets (every job holds its
//! request's slot until the reply is written).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use zlock_core::read::LongRead;

use crate::conn::frames::write_reply;
use crate::conn::out::Reserved;
use crate::conn::{ConnHandle, Permit};

/// Look-ups a read may make under the core's lock; past them it finishes here. About
/// as long as the lock is held for one chunk of applied Txns.
pub(crate) const IN_PLACE: usize = 1000;

/// A served read with its walk still to finish.
pub(crate) struct Job {
    pub read: LongRead,
    /// Its reply's place on the asker's connection.
    pub slot: Reserved,
    pub permit: Permit,
    pub xid: i32,
    /// The zxid the read was served at (the reply's header).
    pub zxid: i64,
}

impl Job {
    /// Finishes the walk and fills in the reply; returns the connection if the caller
    /// must flush it.
    fn run(self) -> Option<ConnHandle> {
        let Job {
            read,
            slot,
            permit,
            xid,
            zxid,
        } = self;
        let r = read.finish();
        slot.fill(permit, |out| write_reply(out, xid, zxid, r.err, &r.body))
    }
}

pub(crate) struct LongReads {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<()>>,
    /// Set at shutdown: the jobs still queued are dropped (their slots given up).
    stopping: Arc<AtomicBool>,
}

impl LongReads {
    pub fn start() -> std::io::Result<LongReads> {
        let (tx, rx) = mpsc::channel::<Job>();
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let handle = std::thread::Builder::new()
            .name("zlock-read".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    if stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    if let Some(c) = job.run() {
                        c.flush();
                    }
                }
            })?;
        Ok(LongReads {
            tx: Some(tx),
            handle: Some(handle),
            stopping,
        })
    }

    /// Hands `job` to the thread (never waits). If the thread is gone, the job is
    /// finished here instead; then the connection it returns must be flushed once the
    /// caller's lock is released.
    pub fn submit(&self, job: Job) -> Option<ConnHandle> {
        match &self.tx {
            Some(tx) => tx
                .send(job)
                .err()
                .and_then(|mpsc::SendError(job)| job.run()),
            None => job.run(),
        }
    }

    /// Stops the thread once the walk in progress (if any) is done; the queued jobs are
    /// dropped.
    pub fn stop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
