//! One connection of the session: the loop that writes requests and reads replies,
//! events and grants until the connection breaks or the session is closed.
//!
//! A new connection is primed before any command: auth packets, then the watches
//! (SetWatches), then the native lock waiters (RESUME), then removals of dropped
//! watches; the server answers in that order.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::time::Instant;
use zlock_proto::frame;
use zlock_proto::records::{
    AuthPacket, LockGrant, ReplyHeader, RequestHeader, WatcherEvent, XID_AUTH, XID_LOCK_GRANT,
    XID_NOTIFICATION, XID_PING, XID_SET_WATCHES,
};
use zlock_proto::{OpCode, Reader, Record};

use super::{Actor, Cmd, End, OnReply, Pending, Reply, Stream};
use crate::chroot::strip_chroot;
use crate::error::Error;
use crate::watcher::{EventType, WatchedEvent};

/// Appends one request frame: its header, then what `body` writes.
pub(super) fn write_request(
    out: &mut Vec<u8>,
    xid: i32,
    op: OpCode,
    body: impl FnOnce(&mut Vec<u8>),
) {
    let at = frame::begin(out);
    RequestHeader {
        xid,
        op_type: op.code(),
    }
    .encode(out);
    body(out);
    frame::finish(out, at);
}

fn write_auth(out: &mut Vec<u8>, scheme: &str, auth: &[u8]) {
    let packet = AuthPacket {
        auth_type: 0,
        scheme: scheme.to_owned(),
        auth: auth.to_vec(),
    };
    write_request(out, XID_AUTH, OpCode::Auth, |o| packet.encode(o));
}

/// Writes some of `bytes` (how many), or with none left flushes the stream (0): a TLS
/// stream's `write` may leave records in rustls that the socket did not take, and they
/// go out on a flush (a no-op on a plain socket).
async fn write_or_flush<W: AsyncWrite + Unpin>(wr: &mut W, bytes: &[u8]) -> std::io::Result<usize> {
    if bytes.is_empty() {
        wr.flush().await.map(|()| 0)
    } else {
        wr.write(bytes).await
    }
}

/// The xids of one connection's requests: 1, 2, ..., wrapping past the special
/// (negative) xids.
pub(super) struct Xids(i32);

impl Xids {
    pub(super) fn next(&mut self) -> i32 {
        let xid = self.0;
        self.0 = self.0.wrapping_add(1).max(1);
        xid
    }
}

/// Auth packets awaiting their reply: the caller, and the credentials to keep for
/// later reconnects once the server accepts them.
type AuthWait = (Option<oneshot::Sender<Reply>>, Option<(String, Vec<u8>)>);

impl Actor {
    /// Serves one connection until it breaks or the session is closed.
    pub(super) async fn serve(&mut self, stream: Stream, buf: BytesMut) -> End {
        match stream {
            Stream::Plain(s) => {
                let (rd, wr) = s.into_split();
                self.serve_halves(rd, wr, buf, false).await
            }
            // One task reads and writes, so the halves' lock is never contended.
            Stream::Tls(s) => {
                let (rd, wr) = tokio::io::split(*s);
                self.serve_halves(rd, wr, buf, true).await
            }
        }
    }

    /// `flushes`: a write may leave bytes behind that only a flush sends (TLS); a plain
    /// socket's flush does nothing, and skipping it saves a pass of the loop per write.
    async fn serve_halves<R, W>(
        &mut self,
        mut rd: R,
        mut wr: W,
        mut buf: BytesMut,
        flushes: bool,
    ) -> End
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut pending: Pending = VecDeque::new();
        let mut auth_pending: VecDeque<AuthWait> = VecDeque::new();
        let mut xids = Xids(1);
        let timeout = Duration::from_millis(self.timeout_ms.max(30) as u64);
        let ping_every = timeout / 3;
        let read_timeout = timeout * 2 / 3;
        let mut ping = tokio::time::interval(ping_every);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        // Frames to write; `written` of its bytes are on the socket. New commands are
        // taken only once it is all written (so it holds at most one batch, within the
        // queue's bound, plus pings).
        let mut out = Vec::with_capacity(64 * 1024);
        let mut written = 0;
        // Written since the last flush (see `write_or_flush`).
        let mut unflushed = false;
        let mut closing = false;

        for (scheme, auth) in &self.auths {
            write_auth(&mut out, scheme, auth);
            auth_pending.push_back((None, None));
        }
        self.watches.resend(self.last_zxid, &mut out);
        let resent = self.grants.resend(&mut out, &mut xids, &mut pending);

        let end = 'conn: loop {
            if !closing {
                self.watches
                    .write_removals(&mut out, &mut xids, &mut pending);
            }
            let unwritten = written < out.len();
            tokio::select! {
                Some(f) = self.forgotten.recv() => self.watches.forget(f.kind, f.path),
                // Cancel safe: a write that loses the race wrote nothing, and what a
                // flush that loses it did not write stays in rustls for the next one.
                r = write_or_flush(&mut wr, &out[written..]), if unwritten || unflushed => {
                    match r {
                        Err(_) => break 'conn End::Broken,
                        Ok(0) if unwritten => break 'conn End::Broken,
                        Ok(0) => unflushed = false,
                        Ok(n) => {
                            written += n;
                            unflushed = flushes;
                        }
                    }
                    if unwritten && written == out.len() {
                        out.clear();
                        written = 0;
                        self.cmds.release();
                    }
                }
                cmd = self.cmds.recv(), if !closing && !unwritten => {
                    let Some(cmd) = cmd else { break 'conn End::Closed };
                    let mut cmd = Some(cmd);
                    // Take every queued command: one write for all of them.
                    while let Some(c) = cmd.take() {
                        match c {
                            Cmd::Request { op, body, on_reply, done } => {
                                let xid = xids.next();
                                write_request(&mut out, xid, op, |o| o.extend_from_slice(&body));
                                pending.push_back((xid, done, on_reply));
                            }
                            Cmd::Auth { scheme, auth, done } => {
                                write_auth(&mut out, &scheme, &auth);
                                auth_pending.push_back((Some(done), Some((scheme, auth))));
                            }
                            Cmd::Close { done } => {
                                closing = true;
                                let xid = xids.next();
                                write_request(&mut out, xid, OpCode::CloseSession, |_| {});
                                pending.push_back((xid, done, OnReply::Nothing));
                            }
                        }
                        if closing { break; }
                        cmd = self.cmds.try_recv();
                    }
                    ping.reset();
                }
                _ = tokio::time::sleep_until(last_heard + read_timeout) => {
                    tracing::debug!("nothing heard for {read_timeout:?}: connection lost");
                    break 'conn End::Broken;
                }
                _ = ping.tick() => write_request(&mut out, XID_PING, OpCode::Ping, |_| {}),
                r = rd.read_buf(&mut buf) => {
                    match r {
                        Ok(0) | Err(_) => break 'conn if closing { End::Closed } else { End::Broken },
                        Ok(_) => {}
                    }
                    last_heard = Instant::now();
                    loop {
                        let parsed = match frame::parse(&buf, usize::MAX >> 1) {
                            Ok(Some((n, body))) => {
                                let mut r = Reader::new(body);
                                let Ok(h) = ReplyHeader::decode(&mut r) else { break 'conn End::Broken };
                                Some((n, h, r.rest().to_vec()))
                            }
                            Ok(None) => None,
                            Err(_) => break 'conn End::Broken,
                        };
                        let Some((n, h, rest)) = parsed else { break };
                        buf.advance(n);
                        match h.xid {
                            XID_NOTIFICATION => {
                                if let Ok(ev) = WatcherEvent::decode(&mut Reader::new(&rest)) {
                                    self.notify(ev);
                                }
                            }
                            XID_LOCK_GRANT => {
                                self.last_zxid = self.last_zxid.max(h.zxid);
                                if let Ok(g) = LockGrant::decode(&mut Reader::new(&rest)) {
                                    self.grants.granted(g);
                                }
                            }
                            XID_PING | XID_SET_WATCHES => {}
                            XID_AUTH => {
                                if let Some((done, cred)) = auth_pending.pop_front() {
                                    if let (0, Some(c)) = (h.err, cred) {
                                        self.auths.push(c);
                                    }
                                    if let Some(done) = done {
                                        let _ = done.send(Ok((h, rest)));
                                    }
                                }
                            }
                            xid => {
                                if h.zxid > 0 {
                                    self.last_zxid = self.last_zxid.max(h.zxid);
                                }
                                match pending.pop_front() {
                                    Some((want, done, on_reply)) if want == xid => {
                                        match on_reply {
                                            OnReply::Nothing => {}
                                            OnReply::Watch(reg) => self.watches.accepted(&h, reg),
                                            OnReply::Grant(w) => self.grants.answered(&h, &rest, w),
                                        }
                                        let _ = done.send(Ok((h, rest)));
                                    }
                                    _ => break 'conn End::Broken,
                                }
                            }
                        }
                    }
                    if closing && pending.is_empty() { break 'conn End::Closed; }
                }
            }
        };
        let mut resent = resent;
        for (xid, done, on_reply) in pending {
            match (on_reply, resent.remove(&xid)) {
                (OnReply::Grant(w), Some(node)) => self.grants.restore(node, w),
                _ => {
                    let _ = done.send(Err(Error::ConnectionLoss));
                }
            }
        }
        for done in auth_pending.into_iter().filter_map(|(d, _)| d) {
            let _ = done.send(Err(Error::ConnectionLoss));
        }
        // The commands taken are answered (or will be re-sent from `grants`).
        self.cmds.release();
        end
    }

    fn notify(&mut self, mut ev: WatcherEvent) {
        let server_path = std::mem::take(&mut ev.path);
        ev.path = strip_chroot(&self.chroot, &server_path);
        let typed = WatchedEvent {
            event_type: EventType::from_i32(ev.event_type),
            path: ev.path.clone(),
        };
        self.watches.dispatch(&server_path, &typed);
        let _ = self.events.send(ev);
    }
}
