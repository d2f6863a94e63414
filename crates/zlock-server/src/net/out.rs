//! A connection's outgoing bytes: frames queue in order, and whoever queued them writes
//! them straight to the socket when it can.
//!
//! The thread that produced a reply (the commit thread after an fsync, or the
//! connection's own task for a read) writes it with a non-blocking `try_write` as soon
//! as its batch is done: no hand-off to another thread, no wake-up on the way out. Only
//! when the socket's send buffer is full (a slow reader) does the rest go to the
//! connection's writer task, which waits for the socket to drain. Order is kept by one
//! rule: nobody writes directly while the writer task holds unwritten bytes.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};

use super::{ConnHandle, Permit};
use crate::stats::{ConnInfo, Stats};

/// Kept after a burst; above this the buffer is given back (10,000 idle connections must
/// not each hold the largest reply they ever sent).
const OUT_KEEP: usize = 64 * 1024;

/// The write side of one connection, shared by every thread that answers it.
pub(crate) struct ConnOut {
    pub id: u64,
    stream: Arc<TcpStream>,
    queue: Mutex<Queue>,
    /// Wakes the writer task: bytes the socket did not take, or a close.
    wake: Notify,
    info: Arc<ConnInfo>,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for ConnOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnOut")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Queue {
    /// Frames not yet written, in order.
    bytes: Vec<u8>,
    /// Budget slots of the replies in `bytes`; freed once they are written.
    permits: Vec<Permit>,
    /// The writer task owns the head of the stream: nobody else may write.
    writer_busy: bool,
    /// Queued since the last flush (the producer has this connection in its dirty list).
    dirty: bool,
    /// Close once everything queued is written.
    close: bool,
    /// The socket failed: drop whatever comes.
    dead: bool,
}

impl ConnOut {
    pub fn new(id: u64, stream: Arc<TcpStream>, info: Arc<ConnInfo>, stats: Arc<Stats>) -> Self {
        ConnOut {
            id,
            stream,
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            info,
            stats,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing in here can be left half-changed by a panic that matters more than
        // losing this connection's queue.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues one frame, which `encode` appends (whole, length prefix included) right
    /// into the queue: no frame of its own to allocate and copy. `permit` is the budget
    /// slot of its request, for a reply. Returns true when the connection was not dirty
    /// yet: the caller must [`ConnOut::flush`] it.
    pub fn push_with(&self, permit: Permit, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        let mut q = self.lock();
        if q.dead || q.close {
            return false;
        }
        self.info.sent.fetch_add(1, Ordering::Relaxed);
        self.stats.packets_sent.fetch_add(1, Ordering::Relaxed);
        encode(&mut q.bytes);
        if permit.is_some() {
            q.permits.push(permit);
        }
        !std::mem::replace(&mut q.dirty, true)
    }

    /// Asks for the connection to be closed once everything queued before is written.
    /// Returns true when the caller must [`ConnOut::flush`] it.
    pub fn close(&self) -> bool {
        let mut q = self.lock();
        q.close = true;
        !std::mem::replace(&mut q.dirty, true)
    }

    /// Writes what is queued, as far as the socket takes it without blocking; hands the
    /// rest (and a close) to the writer task.
    pub fn flush(&self) {
        let mut q = self.lock();
        q.dirty = false;
        if q.writer_busy || q.dead {
            return;
        }
        let mut done = 0;
        while done < q.bytes.len() {
            match self.stream.try_write(&q.bytes[done..]) {
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    q.dead = true;
                    q.bytes = Vec::new();
                    q.permits.clear();
                    // The reader sees the failure too and ends the connection.
                    return;
                }
            }
        }
        if done == q.bytes.len() {
            q.bytes.clear();
            q.permits.clear();
            if q.bytes.capacity() > OUT_KEEP {
                q.bytes = Vec::new();
            }
            if !q.close {
                return;
            }
        } else {
            q.bytes.drain(..done);
        }
        q.writer_busy = true;
        drop(q);
        self.wake.notify_one();
    }

    /// Leaves what is queued to the writer task instead of writing it here (see
    /// [`flush`]).
    pub fn hand_off(&self) {
        let mut q = self.lock();
        q.dirty = false;
        if q.writer_busy || q.dead || (q.bytes.is_empty() && !q.close) {
            return;
        }
        q.writer_busy = true;
        drop(q);
        self.wake.notify_one();
    }

    /// The writer task: writes what [`ConnOut::flush`] could not, and closes the socket
    /// when asked. Signals `closed` when it ends.
    pub async fn writer(self: Arc<Self>, closed: oneshot::Sender<()>) {
        'run: loop {
            self.wake.notified().await;
            loop {
                let (bytes, permits, close) = {
                    let mut q = self.lock();
                    if q.dead {
                        break 'run;
                    }
                    if q.bytes.is_empty() && !q.close {
                        q.writer_busy = false;
                        break;
                    }
                    (
                        std::mem::take(&mut q.bytes),
                        std::mem::take(&mut q.permits),
                        q.close,
                    )
                };
                if write_all(&self.stream, &bytes).await.is_err() {
                    self.lock().dead = true;
                    break 'run;
                }
                // The replies are on the wire: their requests no longer count.
                drop(permits);
                if close {
                    // Nothing is queued after a close (push refuses it).
                    let sock = socket2::SockRef::from(&*self.stream);
                    let _ = sock.shutdown(std::net::Shutdown::Write);
                    self.lock().dead = true;
                    break 'run;
                }
            }
        }
        let _ = closed.send(());
    }
}

/// Above this many connections to write to at once (a watch firing for thousands of
/// sessions), the writes go to the connections' writer tasks on the io threads, so the
/// thread that applied the batch gets back to the log instead of making thousands of
/// system calls.
const INLINE_FLUSH_MAX: usize = 32;

/// Writes what was queued on these connections (after the core's lock is released) and
/// empties the list.
pub(crate) fn flush(dirty: &mut Vec<ConnHandle>) {
    let inline = dirty.len() <= INLINE_FLUSH_MAX;
    for c in dirty.drain(..) {
        if inline {
            c.flush();
        } else {
            c.hand_off();
        }
    }
}

/// Writes all of `bytes`, waiting for the socket to take them.
pub(crate) async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads what is available into `buf`, waiting until something is; 0 at end of stream.
pub(crate) async fn read_some(
    stream: &TcpStream,
    buf: &mut bytes::BytesMut,
) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read_buf(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}
