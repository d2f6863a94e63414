//! A connection's outgoing bytes: frames queue in order, and whoever queued them writes
//! them straight to the socket when it can.
//!
//! The thread that produced a reply (the commit thread after an fsync, or the
//! connection's own task for a read) writes it with a non-blocking `try_write` as soon
//! as its batch is done: no hand-off to another thread, no wake-up on the way out. Only
//! when the socket's send buffer is full (a slow reader) does the rest go to the
//! connection's writer task, which waits for the socket to drain. Order is kept by one
//! rule: nobody writes directly while the writer task holds unwritten bytes.
//!
//! A TLS connection (`super::tls`) keeps the same model: its flush turns the queued
//! frames into records under the rustls state's lock and writes them with the same
//! `try_write`; records the socket did not take wait inside rustls, in order, for the
//! writer task. A plain connection never touches any of it (one `Option` looked at).
//!
//! A reply computed after its place in the stream was decided (a long read, finished
//! off the core's lock) holds that place with a [`Reserved`] slot: frames queued after
//! the slot wait behind it, unwritten, until its reply is filled in.

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};

use super::tls::{self, TlsState};
use super::{ConnHandle, Permit};
use crate::stats::{ConnInfo, Stats};

/// Kept after a burst; above this the buffer is given back (10,000 idle connections must
/// not each hold the largest reply they ever sent).
const OUT_KEEP: usize = 64 * 1024;

/// The write side of one connection, shared by every thread that answers it.
pub(crate) struct ConnOut {
    pub id: u64,
    stream: Arc<TcpStream>,
    /// A TLS connection's rustls state (shared with its reader); `None`: plain.
    tls: Option<TlsState>,
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
    /// Replies whose place is held (see [`Reserved`]), in stream order, each with what
    /// was queued after it; none of it is in `bytes` until every slot before it is filled.
    held: VecDeque<Held>,
    next_slot: u64,
}

/// A held place in the stream and the frames queued behind it.
struct Held {
    slot: u64,
    /// Its reply, once filled in (it still waits while an earlier slot is open).
    reply: Option<Vec<u8>>,
    /// Frames queued after the slot (and before the next one).
    behind: Vec<u8>,
    /// Budget slots of the reply and of the replies in `behind`.
    permits: Vec<Permit>,
}

impl Queue {
    /// Moves the queued frames into a TLS connection's rustls state, in order (it makes
    /// them records). `false`: rustls refused them, and the connection is dead.
    fn hand_to_rustls(&mut self, c: &mut rustls::ServerConnection) -> bool {
        if self.bytes.is_empty() {
            return true;
        }
        if c.writer().write_all(&self.bytes).is_err() {
            self.dead = true;
            return false;
        }
        self.bytes.clear();
        if self.bytes.capacity() > OUT_KEEP {
            self.bytes = Vec::new();
        }
        true
    }

    /// Close now: asked for, and no held reply still to go before the close.
    fn closing(&self) -> bool {
        self.close && self.held.is_empty()
    }

    /// Moves the filled slots at the front, with what waits behind them, to `bytes`.
    /// True when anything moved.
    fn release(&mut self) -> bool {
        let mut moved = false;
        while self.held.front().is_some_and(|h| h.reply.is_some()) {
            let Some(h) = self.held.pop_front() else {
                break;
            };
            self.bytes
                .extend_from_slice(h.reply.as_deref().unwrap_or_default());
            self.bytes.extend_from_slice(&h.behind);
            self.permits.extend(h.permits);
            moved = true;
        }
        moved
    }
}

/// A held place in a connection's stream for a reply that will be filled in later (by
/// another thread, with no lock of the core's). Whatever is queued after the slot was
/// taken, replies and watch events alike, is written only after that reply. Dropped
/// unfilled (the server stopping), the slot is given up and what waits behind it goes.
pub(crate) struct Reserved {
    conn: ConnHandle,
    slot: u64,
    filled: bool,
}

impl Reserved {
    /// Fills in the reply (`encode` appends the whole frame). Returns the connection
    /// when frames became writable and nobody has it to flush yet: the caller must
    /// [`ConnOut::flush`] it.
    pub fn fill(mut self, permit: Permit, encode: impl FnOnce(&mut Vec<u8>)) -> Option<ConnHandle> {
        self.filled = true;
        let mut frame = Vec::new();
        encode(&mut frame);
        self.conn
            .settle(self.slot, Some((frame, permit)))
            .then(|| self.conn.clone())
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.filled && self.conn.settle(self.slot, None) {
            // Whoever drops it may hold the core's lock: the writer task writes.
            self.conn.hand_off();
        }
    }
}

impl ConnOut {
    pub fn new(
        id: u64,
        stream: Arc<TcpStream>,
        tls: Option<TlsState>,
        info: Arc<ConnInfo>,
        stats: Arc<Stats>,
    ) -> Self {
        ConnOut {
            id,
            stream,
            tls,
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
        let mut guard = self.lock();
        let q = &mut *guard;
        if q.dead || q.close {
            return false;
        }
        self.info.sent.fetch_add(1, Ordering::Relaxed);
        self.stats.packets_sent.fetch_add(1, Ordering::Relaxed);
        let (bytes, permits) = match q.held.back_mut() {
            Some(h) => (&mut h.behind, &mut h.permits),
            None => (&mut q.bytes, &mut q.permits),
        };
        encode(bytes);
        if permit.is_some() {
            permits.push(permit);
        }
        // Behind a held slot nothing is writable yet, but the caller's flush is
        // harmless (it writes what is before the slot).
        !std::mem::replace(&mut q.dirty, true)
    }

    /// Holds the next place in the stream for a reply to fill in later; `None` when
    /// the connection is closing or gone (nothing queued now would be written).
    pub fn reserve(self: &Arc<Self>) -> Option<Reserved> {
        let mut q = self.lock();
        if q.dead || q.close {
            return None;
        }
        let slot = q.next_slot;
        q.next_slot += 1;
        q.held.push_back(Held {
            slot,
            reply: None,
            behind: Vec::new(),
            permits: Vec::new(),
        });
        Some(Reserved {
            conn: self.clone(),
            slot,
            filled: false,
        })
    }

    /// Fills in (or, with `None`, gives up) a held slot. True when frames became
    /// writable and the connection was not dirty yet: the caller must flush it.
    fn settle(&self, slot: u64, reply: Option<(Vec<u8>, Permit)>) -> bool {
        let mut q = self.lock();
        let Some(h) = q.held.iter_mut().find(|h| h.slot == slot) else {
            return false;
        };
        match reply {
            Some((frame, permit)) => {
                self.info.sent.fetch_add(1, Ordering::Relaxed);
                self.stats.packets_sent.fetch_add(1, Ordering::Relaxed);
                h.reply = Some(frame);
                if permit.is_some() {
                    h.permits.push(permit);
                }
            }
            None => h.reply = Some(Vec::new()),
        }
        if q.dead {
            q.held.clear();
            return false;
        }
        q.release() && !std::mem::replace(&mut q.dirty, true)
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
        if let Some(tls) = &self.tls {
            return self.flush_tls(tls);
        }
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
            if !q.closing() {
                return;
            }
        } else {
            q.bytes.drain(..done);
        }
        q.writer_busy = true;
        drop(q);
        self.wake.notify_one();
    }

    /// [`ConnOut::flush`] of a TLS connection: the queued frames become records (in
    /// order, under the queue's lock) and go out as far as the socket takes them; the
    /// rest waits in rustls for the writer task, with the frames' budget slots.
    fn flush_tls(&self, state: &TlsState) {
        let mut q = self.lock();
        q.dirty = false;
        if q.dead {
            return;
        }
        let mut c = tls::lock(state);
        if !q.hand_to_rustls(&mut c) {
            q.bytes = Vec::new();
            q.permits.clear();
            return;
        }
        if q.writer_busy {
            // It writes what rustls holds, these records included.
            return;
        }
        match tls::send_pending(&mut c, &self.stream) {
            Ok(true) => {
                q.permits.clear();
                if !q.closing() {
                    return;
                }
            }
            Ok(false) => {}
            Err(_) => {
                q.dead = true;
                q.permits.clear();
                return;
            }
        }
        drop(c);
        q.writer_busy = true;
        drop(q);
        self.wake.notify_one();
    }

    /// Leaves what is queued to the writer task instead of writing it here (see
    /// [`flush`]).
    pub fn hand_off(&self) {
        let mut q = self.lock();
        q.dirty = false;
        if q.writer_busy || q.dead || (q.bytes.is_empty() && !q.closing()) {
            return;
        }
        q.writer_busy = true;
        drop(q);
        self.wake.notify_one();
    }

    /// The writer task: writes what [`ConnOut::flush`] could not, and closes the socket
    /// when asked. Signals `closed` when it ends.
    pub async fn writer(self: Arc<Self>, closed: oneshot::Sender<()>) {
        if let Some(state) = self.tls.clone() {
            self.tls_writer(&state).await;
            let _ = closed.send(());
            return;
        }
        'run: loop {
            self.wake.notified().await;
            loop {
                let (bytes, permits, close) = {
                    let mut q = self.lock();
                    if q.dead {
                        break 'run;
                    }
                    if q.bytes.is_empty() && !q.closing() {
                        q.writer_busy = false;
                        break;
                    }
                    (
                        std::mem::take(&mut q.bytes),
                        std::mem::take(&mut q.permits),
                        q.closing(),
                    )
                };
                if write_all(&self.stream, &bytes).await.is_err() {
                    self.lock().dead = true;
                    break 'run;
                }
                // The replies are on the wire: their requests no longer count.
                drop(permits);
                if close {
                    // Nothing is queued after a close (push refuses it), and no held
                    // reply was still to come before it.
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

impl ConnOut {
    /// [`ConnOut::writer`] of a TLS connection: moves queued frames into rustls and
    /// writes its records, waiting for the socket; on a close, sends close_notify first.
    async fn tls_writer(&self, state: &TlsState) {
        loop {
            self.wake.notified().await;
            loop {
                let (permits, close) = {
                    let mut q = self.lock();
                    if q.dead {
                        return;
                    }
                    let mut c = tls::lock(state);
                    if !q.hand_to_rustls(&mut c) {
                        return;
                    }
                    let close = q.closing();
                    if !c.wants_write() && !close {
                        // Everything is on the wire: the replies' slots are free.
                        q.permits.clear();
                        q.writer_busy = false;
                        break;
                    }
                    if close {
                        c.send_close_notify();
                    }
                    (std::mem::take(&mut q.permits), close)
                };
                if tls::drain(state, &self.stream).await.is_err() {
                    self.lock().dead = true;
                    return;
                }
                drop(permits);
                if close {
                    let sock = socket2::SockRef::from(&*self.stream);
                    let _ = sock.shutdown(std::net::Shutdown::Write);
                    self.lock().dead = true;
                    return;
                }
            }
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use tokio::io::AsyncReadExt;

    /// A connection's write side on a loopback socket, its writer task running, and
    /// the peer's end to read what it writes.
    async fn pair() -> (ConnHandle, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (ours, addr) = listener.accept().await.unwrap();
        let stats = Arc::new(Stats::default());
        let info = stats.add_conn(1, addr);
        let conn = Arc::new(ConnOut::new(1, Arc::new(ours), None, info, stats));
        let (closed, _) = oneshot::channel();
        tokio::spawn(conn.clone().writer(closed));
        (conn, peer)
    }

    fn push(conn: &ConnHandle, bytes: &[u8]) {
        if conn.push_with(None, |out| out.extend_from_slice(bytes)) {
            conn.flush();
        }
    }

    fn fill(slot: Reserved, bytes: &[u8]) {
        if let Some(c) = slot.fill(None, |out| out.extend_from_slice(bytes)) {
            c.flush();
        }
    }

    async fn read_n(peer: &mut tokio::net::TcpStream, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        peer.read_exact(&mut b).await.unwrap();
        b
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_place_keeps_what_follows_behind_it() {
        let (conn, mut peer) = pair().await;
        push(&conn, b"a");
        let first = conn.reserve().unwrap();
        push(&conn, b"c");
        let second = conn.reserve().unwrap();
        push(&conn, b"e");
        // What was queued before the first place leaves at once.
        assert_eq!(read_n(&mut peer, 1).await, b"a");
        // Filled out of order: the second waits for the first.
        fill(second, b"d");
        fill(first, b"b");
        assert_eq!(read_n(&mut peer, 4).await, b"bcde");
        // A place given up lets what waits behind it go.
        let dropped = conn.reserve().unwrap();
        push(&conn, b"f");
        drop(dropped);
        assert_eq!(read_n(&mut peer, 1).await, b"f");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_waits_for_the_held_reply_before_it() {
        let (conn, mut peer) = pair().await;
        push(&conn, b"a");
        let slot = conn.reserve().unwrap();
        push(&conn, b"c");
        if conn.close() {
            conn.flush();
        }
        // Closing: nothing more is queued, and no new place is held.
        assert!(!conn.push_with(None, |out| out.extend_from_slice(b"x")));
        assert!(conn.reserve().is_none());
        assert_eq!(read_n(&mut peer, 1).await, b"a");
        fill(slot, b"b");
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).await.unwrap();
        assert_eq!(
            rest, b"bc",
            "the held reply, what followed it, then the close"
        );
    }
}
