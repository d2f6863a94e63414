//! The session actor: owns the socket, writes requests in call order, matches replies
//! (which a ZooKeeper server sends in request order) and forwards watch events.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use zlock_proto::frame;
use zlock_proto::records::{
    ConnectRequest, ConnectResponse, ReplyHeader, RequestHeader, WatcherEvent, XID_AUTH,
    XID_NOTIFICATION, XID_PING, XID_SET_WATCHES,
};
use zlock_proto::{OpCode, Reader, Record};

use crate::error::{Error, Result};

/// A reply: its header and the bytes after it.
pub(crate) type Reply = Result<(ReplyHeader, Vec<u8>)>;

pub(crate) enum Cmd {
    Request {
        op: OpCode,
        body: Vec<u8>,
        done: oneshot::Sender<Reply>,
    },
    Close {
        done: oneshot::Sender<Reply>,
    },
}

pub(crate) struct Established {
    pub session_id: i64,
    pub timeout_ms: i32,
}

/// Connects and performs the handshake.
pub(crate) async fn connect(
    addr: &str,
    timeout_ms: i32,
) -> Result<(TcpStream, BytesMut, Established)> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| Error::Connect(addr.to_owned(), e.to_string()))?;
    let _ = s.set_nodelay(true);
    let req = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: 0,
        time_out: timeout_ms,
        session_id: 0,
        passwd: vec![0; 16],
        read_only: Some(false),
    };
    let mut out = Vec::new();
    let at = frame::begin(&mut out);
    req.encode(&mut out);
    frame::finish(&mut out, at);
    s.write_all(&out).await.map_err(|_| Error::ConnectionLoss)?;
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        if let Some((n, body)) =
            frame::parse(&buf, usize::MAX >> 1).map_err(|e| Error::Protocol(e.to_string()))?
        {
            let resp = ConnectResponse::decode(&mut Reader::new(body))
                .map_err(|e| Error::Protocol(e.to_string()))?;
            buf.advance(n);
            if resp.time_out <= 0 {
                return Err(Error::SessionExpired);
            }
            return Ok((
                s,
                buf,
                Established {
                    session_id: resp.session_id,
                    timeout_ms: resp.time_out,
                },
            ));
        }
        if s.read_buf(&mut buf)
            .await
            .map_err(|_| Error::ConnectionLoss)?
            == 0
        {
            return Err(Error::ConnectionLoss);
        }
    }
}

/// Runs the session until it is closed or the connection breaks.
pub(crate) async fn run(
    stream: TcpStream,
    mut buf: BytesMut,
    timeout_ms: i32,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    events: mpsc::UnboundedSender<WatcherEvent>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let mut pending: VecDeque<(i32, oneshot::Sender<Reply>)> = VecDeque::new();
    let mut next_xid: i32 = 1;
    let ping_every = Duration::from_millis((timeout_ms as u64 / 3).max(10));
    let mut ping = tokio::time::interval(ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut out = Vec::with_capacity(64 * 1024);
    let mut closing = false;
    'session: loop {
        tokio::select! {
            cmd = cmds.recv(), if !closing => {
                let Some(cmd) = cmd else { break 'session };
                let mut cmd = Some(cmd);
                // Take every queued command: one write for all of them.
                while let Some(c) = cmd.take() {
                    let (xid, op, body, done) = match c {
                        Cmd::Request { op, body, done } => {
                            let x = next_xid;
                            next_xid = next_xid.wrapping_add(1).max(1);
                            (x, op, body, done)
                        }
                        Cmd::Close { done } => {
                            closing = true;
                            let x = next_xid;
                            next_xid = next_xid.wrapping_add(1).max(1);
                            (x, OpCode::CloseSession, Vec::new(), done)
                        }
                    };
                    let at = frame::begin(&mut out);
                    RequestHeader { xid, op_type: op.code() }.encode(&mut out);
                    out.extend_from_slice(&body);
                    frame::finish(&mut out, at);
                    pending.push_back((xid, done));
                    if closing { break; }
                    cmd = cmds.try_recv().ok();
                }
                if wr.write_all(&out).await.is_err() { break 'session; }
                out.clear();
                ping.reset();
            }
            _ = ping.tick() => {
                let at = frame::begin(&mut out);
                RequestHeader { xid: XID_PING, op_type: OpCode::Ping.code() }.encode(&mut out);
                frame::finish(&mut out, at);
                if wr.write_all(&out).await.is_err() { break 'session; }
                out.clear();
            }
            r = rd.read_buf(&mut buf) => {
                match r {
                    Ok(0) | Err(_) => break 'session,
                    Ok(_) => {}
                }
                loop {
                    let parsed = match frame::parse(&buf, usize::MAX >> 1) {
                        Ok(Some((n, body))) => {
                            let mut r = Reader::new(body);
                            let h = match ReplyHeader::decode(&mut r) {
                                Ok(h) => h,
                                Err(_) => break 'session,
                            };
                            Some((n, h, r.rest().to_vec()))
                        }
                        Ok(None) => None,
                        Err(_) => break 'session,
                    };
                    let Some((n, h, rest)) = parsed else { break };
                    buf.advance(n);
                    match h.xid {
                        XID_NOTIFICATION => {
                            if let Ok(ev) = WatcherEvent::decode(&mut Reader::new(&rest)) {
                                let _ = events.send(ev);
                            }
                        }
                        XID_PING | XID_AUTH | XID_SET_WATCHES => {}
                        xid => {
                            match pending.pop_front() {
                                Some((want, done)) if want == xid => {
                                    let _ = done.send(Ok((h, rest)));
                                }
                                _ => break 'session,
                            }
                        }
                    }
                }
                if closing && pending.is_empty() { break 'session; }
            }
        }
    }
    for (_, done) in pending {
        let _ = done.send(Err(Error::ConnectionLoss));
    }
}
