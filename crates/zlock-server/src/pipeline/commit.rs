//! The commit stage: makes writes durable, in order, with group commit.
//!
//! Runs on its own thread. It blocks for the first item, then takes every item that
//! queued up meanwhile (up to [`MAX_BATCH`]), appends the writes among them to the log
//! and syncs once, then applies the whole batch to the core and writes its replies out
//! (see the parent module for why that happens here). While one fsync runs, the next
//! batch gathers: throughput rises with concurrency, latency stays near one fsync.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use zlock_core::{SessionId, State, Txn};
use zlock_proto::Request;

use super::apply::{self, Core};
use super::{Committed, Item};
use crate::commit::CommitLog;

/// Most items in one batch; bounds the latency one batch adds to the next.
pub const MAX_BATCH: usize = 4096;

pub(crate) struct CommitStage<L: CommitLog> {
    pub log: L,
    pub next_index: u64,
    pub next_session: SessionId,
    pub rx: mpsc::UnboundedReceiver<Item>,
    pub core: Arc<Mutex<Core>>,
    /// How long to poll for the next item before sleeping.
    pub spin: Duration,
    /// Set when the log fails: the server must stop (nothing after a failed write may
    /// be acknowledged).
    pub fatal: tokio::sync::watch::Sender<Option<String>>,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A session id seed as ZooKeeper makes one: the clock in the high bits, so ids do not
/// repeat across restarts.
pub(crate) fn session_seed(min_exclusive: SessionId) -> SessionId {
    let t = ((now_ms() as u64) << 24) >> 8;
    (t as i64).max(min_exclusive + 1)
}

impl<L: CommitLog> CommitStage<L> {
    pub fn run(mut self) {
        self.serve();
        // Stopped, or the log failed: nothing more is applied.
        let mut dirty = Vec::new();
        apply::with_core(&self.core, &mut dirty, Core::finish);
        apply::flush(&mut dirty);
    }

    fn serve(&mut self) {
        let mut buf = Vec::with_capacity(4096);
        let mut dirty = Vec::new();
        loop {
            let Some(first) = self.next_item() else {
                break;
            };
            let mut batch = Vec::with_capacity(16);
            let mut wrote = false;
            let mut stop = false;
            let mut item = Some(first);
            while let Some(it) = item.take() {
                if matches!(it, Item::Shutdown) {
                    stop = true;
                }
                match self.stage(it, &mut buf) {
                    Ok(c) => {
                        wrote |= c.txn.is_some();
                        batch.push(c);
                    }
                    Err(e) => return self.fail(e),
                }
                if stop || batch.len() >= MAX_BATCH {
                    break;
                }
                item = self.rx.try_recv().ok();
            }
            if wrote {
                if let Err(e) = self.log.sync() {
                    return self.fail(e);
                }
            }
            let go_on = apply::with_core(&self.core, &mut dirty, |c| c.apply_batch(batch));
            apply::flush(&mut dirty);
            if !go_on || stop {
                break;
            }
        }
    }

    /// The next item: polled for up to `spin` first (yielding the CPU between polls),
    /// then waited for. See `ServerConfig::commit_spin_us`.
    fn next_item(&mut self) -> Option<Item> {
        if !self.spin.is_zero() {
            let until = Instant::now() + self.spin;
            loop {
                match self.rx.try_recv() {
                    Ok(item) => return Some(item),
                    Err(mpsc::error::TryRecvError::Disconnected) => return None,
                    Err(mpsc::error::TryRecvError::Empty) => {}
                }
                if Instant::now() >= until {
                    break;
                }
                std::thread::yield_now();
            }
        }
        self.rx.blocking_recv()
    }

    fn fail(&self, e: crate::commit::CommitError) {
        tracing::error!(error = %e, "write-ahead log failed; stopping the server");
        let _ = self.fatal.send(Some(e.to_string()));
    }

    fn stage(
        &mut self,
        mut item: Item,
        buf: &mut Vec<u8>,
    ) -> Result<Committed, crate::commit::CommitError> {
        let txn = match &mut item {
            Item::Connect {
                timeout_ms, passwd, ..
            } => {
                let session_id = self.next_session;
                self.next_session += 1;
                Some(Txn::CreateSession {
                    session_id,
                    passwd: passwd.clone(),
                    timeout_ms: *timeout_ms,
                })
            }
            Item::Request {
                session, auth, req, ..
            } if State::is_write(req) => {
                if matches!(req, Request::CloseSession) {
                    Some(Txn::CloseSession {
                        session_id: *session,
                    })
                } else {
                    Some(Txn::Request {
                        session_id: *session,
                        time_ms: now_ms(),
                        auth: auth.clone(),
                        request: std::mem::replace(req, Request::Ping),
                    })
                }
            }
            Item::Expire { session } => Some(Txn::CloseSession {
                session_id: *session,
            }),
            Item::DeleteExpired { paths } => Some(Txn::DeleteExpired {
                time_ms: now_ms(),
                paths: std::mem::take(paths),
            }),
            Item::Purge { through } => {
                if let Err(e) = self.log.purge_through(*through) {
                    // Failing to delete old segments loses nothing; keep serving.
                    tracing::warn!(error = %e, "could not remove old log segments");
                }
                None
            }
            _ => None,
        };
        let txn = match txn {
            Some(t) => {
                let index = self.next_index;
                self.next_index += 1;
                buf.clear();
                t.encode(buf);
                self.log.append(index, buf)?;
                Some((index, t))
            }
            None => None,
        };
        Ok(Committed { item, txn })
    }
}
