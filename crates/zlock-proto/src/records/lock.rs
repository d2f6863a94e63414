//! zlock's native lock operation: one request creates a contender node and says whether
//! it holds the lock; a waiter is told by a pushed [`LockGrant`] when it does. Nothing
//! here exists in Apache ZooKeeper: the opcode sits outside ZooKeeper's ranges and a
//! client only sends it to a server that offered [`FEATURE_NATIVE_LOCK`] in the
//! handshake (see [`ConnectRequest::features`](super::ConnectRequest)).

use super::Acl;
use crate::jute::{DecodeError, Field, Reader, Record, Writer};
use crate::record;

/// Marks the zlock feature words appended to the handshake records, after the readOnly
/// byte: `int magic, int features`. Apache ZooKeeper ignores trailing bytes of a
/// ConnectRequest and never sends them, so a client that finds no magic in the reply
/// knows it talks to a server without zlock's extensions.
pub const HANDSHAKE_MAGIC: i32 = 0x7a6c_6b31; // "zlk1"

/// Feature bit: the server takes the native lock operation (opcode 1001).
pub const FEATURE_NATIVE_LOCK: i32 = 1;

/// Feature bit: the server takes [`LockRequest::lock_delay_ms`] (lock-delay).
pub const FEATURE_LOCK_DELAY: i32 = 2;

/// [`LockRequest::lock_delay_ms`] when the request does not say: the server's default
/// (`lockDelay` in its configuration). Also what a request without the field decodes to.
pub const LOCK_DELAY_SERVER_DEFAULT: i32 = -1;

/// The longest lock-delay a request may ask for, ms (Chubby bounds it the same way,
/// "typically one minute"): a longer one would leave a lock unusable for longer than a
/// paused holder plausibly needs to notice it lost its session.
pub const MAX_LOCK_DELAY_MS: i32 = 60_000;

/// The xid of a pushed [`LockGrant`] frame (`ReplyHeader{xid, zxid, err 0}` + record).
pub const XID_LOCK_GRANT: i32 = -101;

/// What a contender asks for; decides which earlier nodes block it.
pub mod lock_mode {
    /// Blocked by any earlier node (Curator's InterProcessMutex).
    pub const EXCLUSIVE: i32 = 0;
    /// Blocked by an earlier node that is not a read node (`__READ__` in its name).
    pub const READ: i32 = 1;
    /// Blocked by any earlier node (the write side of a read-write lock).
    pub const WRITE: i32 = 2;
    /// Blocked once `leases` earlier nodes exist (a counting semaphore).
    pub const SEMAPHORE: i32 = 3;
}

/// Bits of [`LockRequest::flags`].
pub mod lock_flags {
    /// Reuse the node this session already has under the lock path whose name starts
    /// with the request's prefix, instead of creating one (a retry after a lost reply,
    /// or re-registering a waiter after a reconnect). Creates one if there is none.
    pub const RESUME: i32 = 1;
    /// Do not queue: if the lock is not free, create nothing and answer not granted.
    pub const TRY: i32 = 2;
}

/// The native lock request (opcode 1001). Creates the ephemeral sequential node
/// `path + "/" + prefix + NNNNNNNNNN` (missing ancestors as containers), in the same
/// commit decides whether it holds, and registers the session as its waiter if not.
///
/// Encoded as a jute record of the fields in order; `lock_delay_ms` is a trailing
/// field written only when it is not [`LOCK_DELAY_SERVER_DEFAULT`], so a request that
/// leaves it alone is the record older servers read, and a client sends it only to a
/// server that offers [`FEATURE_LOCK_DELAY`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockRequest {
    /// The lock path: the parent of the contenders' nodes.
    pub path: String,
    /// Node name up to the sequence number, e.g. `_c_<guid>-lock-`.
    pub prefix: String,
    pub data: Option<Vec<u8>>,
    pub acl: Vec<Acl>,
    /// One of [`lock_mode`].
    pub mode: i32,
    /// For [`lock_mode::SEMAPHORE`]: how many may hold at once.
    pub leases: i32,
    /// [`lock_flags`] bits.
    pub flags: i32,
    /// A node of this session under the same lock path to delete first, in the same
    /// commit ("" for none): a holder's release and its next acquire in one message.
    /// Already gone is fine (a retried request).
    pub release: String,
    /// Lock-delay, ms: if this contender's session ends (expires or is closed) while it
    /// holds, without releasing, the lock path grants nothing more until this long
    /// after (Chubby's lock-delay). 0 for none, [`LOCK_DELAY_SERVER_DEFAULT`] for the
    /// server's default; at most [`MAX_LOCK_DELAY_MS`].
    pub lock_delay_ms: i32,
}

impl LockRequest {
    /// An exclusive lock request for `path/prefixNNNNNNNNNN` with empty data and the
    /// open ACL (what the recipes send), no flags, no release, the server's lock-delay.
    pub fn exclusive(path: impl Into<String>, prefix: impl Into<String>) -> LockRequest {
        LockRequest {
            path: path.into(),
            prefix: prefix.into(),
            data: Some(Vec::new()),
            acl: Acl::open_unsafe(),
            mode: lock_mode::EXCLUSIVE,
            leases: 1,
            ..LockRequest::default()
        }
    }
}

impl Default for LockRequest {
    fn default() -> LockRequest {
        LockRequest {
            path: String::new(),
            prefix: String::new(),
            data: None,
            acl: Vec::new(),
            mode: lock_mode::EXCLUSIVE,
            leases: 0,
            flags: 0,
            release: String::new(),
            lock_delay_ms: LOCK_DELAY_SERVER_DEFAULT,
        }
    }
}

impl Record for LockRequest {
    fn encode(&self, out: &mut Vec<u8>) {
        self.path.put(out);
        self.prefix.put(out);
        self.data.put(out);
        self.acl.put(out);
        out.write_i32(self.mode);
        out.write_i32(self.leases);
        out.write_i32(self.flags);
        self.release.put(out);
        if self.lock_delay_ms != LOCK_DELAY_SERVER_DEFAULT {
            out.write_i32(self.lock_delay_ms);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut req = LockRequest {
            path: Field::get(r)?,
            prefix: Field::get(r)?,
            data: Field::get(r)?,
            acl: Field::get(r)?,
            mode: r.read_i32()?,
            leases: r.read_i32()?,
            flags: r.read_i32()?,
            release: Field::get(r)?,
            lock_delay_ms: LOCK_DELAY_SERVER_DEFAULT,
        };
        if !r.is_empty() {
            req.lock_delay_ms = r.read_i32()?;
        }
        Ok(req)
    }
}

record! {
    /// The reply: the contender's node and whether it holds now. With
    /// [`lock_flags::TRY`] and a busy lock: `node` is empty and `granted` false.
    pub struct LockResponse {
        /// Full path of the contender's node.
        pub node: String,
        /// The node's creation zxid: the holder's fencing token.
        pub czxid: i64,
        pub granted: bool,
    }
}

record! {
    /// Pushed to a waiting session (xid [`XID_LOCK_GRANT`]) in the commit that removed
    /// the last node blocking `node`.
    pub struct LockGrant {
        pub node: String,
        pub czxid: i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_delay_is_a_trailing_field_written_only_when_set() {
        let mut req = LockRequest {
            path: "/l".into(),
            prefix: "lock-".into(),
            ..LockRequest::default()
        };
        let old = req.to_bytes();
        assert_eq!(
            LockRequest::decode(&mut Reader::new(&old)).unwrap(),
            req,
            "a request without the field means the server's default"
        );
        req.lock_delay_ms = 0;
        let b = req.to_bytes();
        assert_eq!(b.len(), old.len() + 4);
        assert_eq!(LockRequest::decode(&mut Reader::new(&b)).unwrap(), req);
        req.lock_delay_ms = 1500;
        let b = req.to_bytes();
        assert_eq!(LockRequest::decode(&mut Reader::new(&b)).unwrap(), req);
        assert!(LockRequest::decode(&mut Reader::new(&b[..b.len() - 2])).is_err());
    }
}
