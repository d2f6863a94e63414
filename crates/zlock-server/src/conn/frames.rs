//! The frames the server sends, encoded straight into a connection's queue: replies,
//! watch events, pushed native lock grants and the handshake answer.

use zlock_proto::frame;
use zlock_proto::records::{
    ConnectResponse, LockGrant, ReplyHeader, WatcherEvent, XID_LOCK_GRANT, XID_NOTIFICATION,
};
use zlock_proto::Record;

/// Appends a reply frame to `out`: header, then the body when there is one.
pub(crate) fn write_reply(out: &mut Vec<u8>, xid: i32, zxid: i64, err: i32, body: &[u8]) {
    let at = frame::begin(out);
    ReplyHeader { xid, zxid, err }.encode(out);
    out.extend_from_slice(body);
    frame::finish(out, at);
}

/// A reply frame of its own (for replies built before they are queued).
pub(crate) fn reply_frame(xid: i32, zxid: i64, err: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + body.len());
    write_reply(&mut out, xid, zxid, err, body);
    out
}

pub(crate) fn write_event(out: &mut Vec<u8>, ev: &WatcherEvent) {
    let at = frame::begin(out);
    ReplyHeader {
        xid: XID_NOTIFICATION,
        zxid: -1,
        err: 0,
    }
    .encode(out);
    ev.encode(out);
    frame::finish(out, at);
}

/// A pushed native lock grant (see `zlock_core::locks`).
pub(crate) fn write_grant(out: &mut Vec<u8>, zxid: i64, g: &LockGrant) {
    let at = frame::begin(out);
    ReplyHeader {
        xid: XID_LOCK_GRANT,
        zxid,
        err: 0,
    }
    .encode(out);
    g.encode(out);
    frame::finish(out, at);
}

pub(crate) fn write_connect(out: &mut Vec<u8>, resp: &ConnectResponse) {
    let at = frame::begin(out);
    resp.encode(out);
    frame::finish(out, at);
}
