//! Write operations: create (all modes), delete, setData, setACL, check, multi.
//!
//! Each op checks in ZooKeeper's order (path, ACL fix-up, parent, permission, version,
//! ...) so the first failing check decides the error code, as in ZooKeeper's
//! PrepRequestProcessor. Inside a multi every mutation first saves the nodes it touches
//! in an [`Undo`] so a later failing op rolls the whole multi back.

use std::collections::HashSet;

use zlock_proto::records::{
    event_type, perms, Acl, CheckVersionRequest, Create2Response, CreateRequest, CreateResponse,
    DeleteRequest, Id, MultiOp, MultiResult, SetAclRequest, SetDataRequest, Stat, StatResponse,
};
use zlock_proto::{ErrorCode, OpCode, Record, Request};

use crate::acl;
use crate::path;
use crate::state::{Reply, State};
use crate::tree::{Node, NodeKind, SessionId};
use crate::watches::{Notification, Trigger};

/// Largest TTL ZooKeeper accepts (`EphemeralType.TTL`'s max: 2^40 - 1 ms).
pub const MAX_TTL_MS: i64 = 0xFF_FFFF_FFFF;

/// The fields of a create, whatever record carried them.
pub(crate) struct CreateArgs<'a> {
    pub(crate) path: &'a str,
    pub(crate) data: &'a Option<Vec<u8>>,
    pub(crate) acl: &'a [Acl],
    pub(crate) flags: i32,
}

/// The inputs of one write, all fixed in its Txn.
pub struct Ctx<'a> {
    pub session: SessionId,
    pub time: i64,
    pub auth: &'a [Id],
    pub zxid: i64,
}

/// Nodes as they were before a multi touched them, to restore on failure.
#[derive(Default)]
pub struct Undo {
    saved: Vec<(String, Option<Node>)>,
    seen: HashSet<String>,
}

impl Undo {
    fn save(&mut self, state: &State, p: &str) {
        if self.seen.insert(p.to_owned()) {
            self.saved.push((p.to_owned(), state.tree.get(p).cloned()));
        }
    }
}

fn save(undo: &mut Option<&mut Undo>, state: &State, p: &str) {
    if let Some(u) = undo.as_deref_mut() {
        u.save(state, p);
    }
}

fn check_version(current: i32, expected: i32) -> Result<(), ErrorCode> {
    if expected != -1 && current != expected {
        return Err(ErrorCode::BadVersion);
    }
    Ok(())
}

/// Nodes ZooKeeper refuses to delete (`DataTree.isSpecialPath`).
const SPECIAL_PATHS: [&str; 4] = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"];

/// The cheap check ZooKeeper's create and delete do first: some '/' and no NUL.
fn basic_path_check(p: &str) -> Result<(), ErrorCode> {
    if !p.contains('/') || p.contains('\0') {
        return Err(ErrorCode::BadArguments);
    }
    Ok(())
}

/// What the create flags (CreateMode) ask for. CONTAINER (4) is accepted but does not
/// make a container: the opcode does (see [`State::create`]).
struct Mode {
    ephemeral: bool,
    sequential: bool,
    ttl: bool,
}

fn mode(flags: i32) -> Result<Mode, ErrorCode> {
    let m = |ephemeral, sequential, ttl| Mode {
        ephemeral,
        sequential,
        ttl,
    };
    Ok(match flags {
        0 | 4 => m(false, false, false),
        1 => m(true, false, false),
        2 => m(false, true, false),
        3 => m(true, true, false),
        5 => m(false, false, true),
        6 => m(false, true, true),
        _ => return Err(ErrorCode::BadArguments),
    })
}

/// A write borrowed from a request or a multi op, so neither path copies its data.
pub(crate) enum Write<'a> {
    Create {
        op: OpCode,
        path: &'a str,
        data: &'a Option<Vec<u8>>,
        acl: &'a [Acl],
        flags: i32,
        /// -1 unless createTTL.
        ttl: i64,
    },
    Delete(&'a DeleteRequest),
    SetData(&'a SetDataRequest),
    SetAcl(&'a SetAclRequest),
    Check(&'a CheckVersionRequest),
}

impl<'a> Write<'a> {
    /// The write a request asks for; `None` for anything that is not a single write.
    pub(crate) fn of_request(req: &'a Request) -> Option<Write<'a>> {
        Some(match req {
            Request::Create(op, r) => Write::create(*op, r, -1),
            Request::CreateTtl(r) => Write::Create {
                op: OpCode::CreateTtl,
                path: &r.path,
                data: &r.data,
                acl: &r.acl,
                flags: r.flags,
                ttl: r.ttl,
            },
            Request::Delete(r) => Write::Delete(r),
            Request::SetData(r) => Write::SetData(r),
            Request::SetAcl(r) => Write::SetAcl(r),
            Request::Check(r) => Write::Check(r),
            _ => return None,
        })
    }

    /// The write of a multi op; `None` for the read ops of a multiRead.
    ///
    /// ZooKeeper rebuilds each create of a multi through `Op.create(.., flags)`, which
    /// takes the opcode from the create mode when it can (3.8.0 and, with ZOOKEEPER-4026,
    /// 3.8.2+ alike): CONTAINER flags make a createContainer whatever the opcode sent
    /// (create, create2, even createTTL, whose ttl is then dropped). Outside a multi the
    /// opcode decides instead.
    fn of_multi_op(op: &'a MultiOp) -> Option<Write<'a>> {
        Some(match op {
            MultiOp::Create(_, r) if r.flags == 4 => Write::create(OpCode::CreateContainer, r, -1),
            MultiOp::CreateTtl(r) if r.flags == 4 => Write::Create {
                op: OpCode::CreateContainer,
                path: &r.path,
                data: &r.data,
                acl: &r.acl,
                flags: r.flags,
                ttl: -1,
            },
            MultiOp::Create(c, r) => Write::create(*c, r, -1),
            MultiOp::CreateTtl(r) => Write::Create {
                op: OpCode::CreateTtl,
                path: &r.path,
                data: &r.data,
                acl: &r.acl,
                flags: r.flags,
                ttl: r.ttl,
            },
            MultiOp::Delete(r) => Write::Delete(r),
            MultiOp::SetData(r) => Write::SetData(r),
            MultiOp::Check(r) => Write::Check(r),
            MultiOp::GetData(_) | MultiOp::GetChildren(_) => return None,
        })
    }

    fn create(op: OpCode, r: &'a CreateRequest, ttl: i64) -> Write<'a> {
        Write::Create {
            op,
            path: &r.path,
            data: &r.data,
            acl: &r.acl,
            flags: r.flags,
            ttl,
        }
    }
}

/// What a successful write answers, before encoding.
pub(crate) enum Written {
    /// create (1): the path only.
    Path(String),
    /// create2, createContainer, createTTL: path and Stat.
    PathStat(String, Stat),
    /// setData, setACL.
    Stat(Stat),
    Deleted,
    Checked,
}

impl Written {
    /// The response record of a single write.
    pub(crate) fn into_body(self) -> Vec<u8> {
        match self {
            Written::Path(path) => CreateResponse { path }.to_bytes(),
            Written::PathStat(path, stat) => Create2Response { path, stat }.to_bytes(),
            Written::Stat(stat) => StatResponse { stat }.to_bytes(),
            Written::Deleted | Written::Checked => Vec::new(),
        }
    }

    /// The entry of a multi reply.
    fn into_multi(self) -> MultiResult {
        match self {
            Written::Path(path) => MultiResult::Create(path),
            Written::PathStat(path, stat) => MultiResult::Create2(path, stat),
            Written::Stat(stat) => MultiResult::SetData(stat),
            Written::Deleted => MultiResult::Delete,
            Written::Checked => MultiResult::Check,
        }
    }
}

impl State {
    /// One write outside or inside a multi.
    pub(crate) fn write_one(
        &mut self,
        cx: &Ctx<'_>,
        w: Write<'_>,
        undo: &mut Option<&mut Undo>,
        trig: &mut Vec<Trigger>,
    ) -> Result<Written, ErrorCode> {
        match w {
            Write::Create {
                op,
                path,
                data,
                acl,
                flags,
                ttl,
            } => {
                let c = CreateArgs {
                    path,
                    data,
                    acl,
                    flags,
                };
                let (p, stat) = self.create(cx, op, &c, ttl, undo, trig)?;
                Ok(if op == OpCode::Create {
                    Written::Path(p)
                } else {
                    Written::PathStat(p, stat)
                })
            }
            Write::Delete(r) => {
                self.delete(cx, &r.path, r.version, undo, trig)?;
                Ok(Written::Deleted)
            }
            Write::SetData(r) => {
                let stat = self.set_data(cx, &r.path, &r.data, r.version, undo, trig)?;
                Ok(Written::Stat(stat))
            }
            Write::SetAcl(r) => {
                let stat = self.set_acl(cx, &r.path, &r.acl, r.version, undo)?;
                Ok(Written::Stat(stat))
            }
            Write::Check(r) => {
                self.check(cx, &r.path, r.version)?;
                Ok(Written::Checked)
            }
        }
    }

    pub(crate) fn create(
        &mut self,
        cx: &Ctx<'_>,
        op: OpCode,
        r: &CreateArgs<'_>,
        ttl: i64,
        undo: &mut Option<&mut Undo>,
        trig: &mut Vec<Trigger>,
    ) -> Result<(String, zlock_proto::records::Stat), ErrorCode> {
        let m = mode(r.flags)?;
        if m.ttl && !self.config.extended_types {
            return Err(ErrorCode::Unimplemented);
        }
        if op == OpCode::CreateTtl && !self.config.extended_types {
            return Err(ErrorCode::Unimplemented);
        }
        if m.ttl {
            if ttl <= 0 || ttl > MAX_TTL_MS {
                return Err(ErrorCode::BadArguments);
            }
        } else if ttl >= 0 {
            return Err(ErrorCode::BadArguments);
        }
        // ZooKeeper only checks for a '/' and NUL here (`validatePathForCreate`); the full
        // path check comes after the parent and permission checks, on the final name.
        basic_path_check(r.path)?;
        let acl_list = acl::fixup(r.acl, cx.auth)?;
        let parent_path = path::parent(r.path).to_owned();
        let parent = self.tree.get(&parent_path).ok_or(ErrorCode::NoNode)?;
        acl::check(&parent.acl, perms::CREATE, cx.auth)?;
        let mut p = r.path.to_owned();
        if m.sequential {
            p.push_str(&format!("{:010}", parent.cversion));
        }
        path::validate(&p, false)?;
        if self.tree.contains(&p) {
            return Err(ErrorCode::NodeExists);
        }
        if matches!(parent.kind, NodeKind::Ephemeral(_)) {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        // Like ZooKeeper's txn types: createContainer always makes a container (its
        // CreateContainerTxn ignores the flags), while create/create2 with CONTAINER flags
        // make a plain persistent node (CreateTxn only knows "ephemeral or not").
        let kind = if op == OpCode::CreateContainer {
            NodeKind::Container
        } else if m.ephemeral {
            NodeKind::Ephemeral(cx.session)
        } else if m.ttl {
            NodeKind::Ttl(ttl)
        } else {
            NodeKind::Persistent
        };
        save(undo, self, &parent_path);
        save(undo, self, &p);
        if let Some(par) = self.tree.get_mut(&parent_path) {
            par.cversion = par.cversion.wrapping_add(1);
            par.pzxid = cx.zxid;
        }
        let acl = self.tree.intern_acl(acl_list);
        let node = Node::new(r.data.clone(), acl.clone(), kind, cx.zxid, cx.time);
        let stat = node.stat();
        self.tree.insert(&p, node);
        if !self.watches.is_empty() {
            let parent_acl = self.tree.get(&parent_path).map(|n| n.acl.clone());
            trig.push((p.clone(), event_type::NODE_CREATED, Some(acl)));
            trig.push((parent_path, event_type::NODE_CHILDREN_CHANGED, parent_acl));
        }
        Ok((p, stat))
    }

    pub(crate) fn delete(
        &mut self,
        cx: &Ctx<'_>,
        p: &str,
        version: i32,
        undo: &mut Option<&mut Undo>,
        trig: &mut Vec<Trigger>,
    ) -> Result<(), ErrorCode> {
        // ZooKeeper's `getParentPathAndValidate`: a '/' and no NUL, and never one of the
        // paths the server owns; anything else malformed is simply not found.
        basic_path_check(p)?;
        if SPECIAL_PATHS.contains(&p) {
            return Err(ErrorCode::BadArguments);
        }
        let parent_path = path::parent(p);
        let parent = self.tree.get(parent_path).ok_or(ErrorCode::NoNode)?;
        acl::check(&parent.acl, perms::DELETE, cx.auth)?;
        let node = self.tree.get(p).ok_or(ErrorCode::NoNode)?;
        check_version(node.version, version)?;
        if !node.children.is_empty() {
            return Err(ErrorCode::NotEmpty);
        }
        save(undo, self, parent_path);
        save(undo, self, p);
        self.unlink(p, cx.zxid, trig);
        Ok(())
    }

    fn set_data(
        &mut self,
        cx: &Ctx<'_>,
        p: &str,
        data: &Option<Vec<u8>>,
        version: i32,
        undo: &mut Option<&mut Undo>,
        trig: &mut Vec<Trigger>,
    ) -> Result<zlock_proto::records::Stat, ErrorCode> {
        path::validate(p, false)?;
        let node = self.tree.get(p).ok_or(ErrorCode::NoNode)?;
        acl::check(&node.acl, perms::WRITE, cx.auth)?;
        check_version(node.version, version)?;
        save(undo, self, p);
        let (stat, acl) = match self.tree.get_mut(p) {
            Some(n) => {
                n.data = data.clone();
                n.version = n.version.wrapping_add(1);
                n.mzxid = cx.zxid;
                n.mtime = cx.time;
                (n.stat(), n.acl.clone())
            }
            None => return Err(ErrorCode::NoNode),
        };
        if !self.watches.is_empty() {
            trig.push((p.to_owned(), event_type::NODE_DATA_CHANGED, Some(acl)));
        }
        Ok(stat)
    }

    fn set_acl(
        &mut self,
        cx: &Ctx<'_>,
        p: &str,
        new_acl: &[zlock_proto::records::Acl],
        version: i32,
        undo: &mut Option<&mut Undo>,
    ) -> Result<zlock_proto::records::Stat, ErrorCode> {
        path::validate(p, false)?;
        let list = acl::fixup(new_acl, cx.auth)?;
        let node = self.tree.get(p).ok_or(ErrorCode::NoNode)?;
        acl::check(&node.acl, perms::ADMIN, cx.auth)?;
        check_version(node.aversion, version)?;
        save(undo, self, p);
        let interned = self.tree.intern_acl(list);
        match self.tree.get_mut(p) {
            Some(n) => {
                n.acl = interned;
                n.aversion = n.aversion.wrapping_add(1);
                Ok(n.stat())
            }
            None => Err(ErrorCode::NoNode),
        }
    }

    fn check(&self, cx: &Ctx<'_>, p: &str, version: i32) -> Result<(), ErrorCode> {
        path::validate(p, false)?;
        let node = self.tree.get(p).ok_or(ErrorCode::NoNode)?;
        acl::check(&node.acl, perms::READ, cx.auth)?;
        check_version(node.version, version)
    }

    /// An atomic multi: all ops apply or none. The reply header is always ok; a failure
    /// is reported per op (0 before the failing op, its code, then -2 after it), exactly
    /// as ZooKeeper 3.8 answers.
    pub(crate) fn multi(
        &mut self,
        cx: &Ctx<'_>,
        ops: &[MultiOp],
        events: &mut Vec<Notification>,
    ) -> Reply {
        let mut undo = Undo::default();
        // No lock op runs inside a multi, so nothing drains the lock changes until the
        // multi is done (see the rollback below).
        let lock_mark = self.tree.lock_mark();
        let handover_mark = self.handovers.mark();
        let mut pending = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        let mut failed: Option<(usize, ErrorCode)> = None;
        for (i, op) in ops.iter().enumerate() {
            let Some(w) = Write::of_multi_op(op) else {
                failed = Some((i, ErrorCode::BadArguments));
                break;
            };
            let mut u = Some(&mut undo);
            match self.write_one(cx, w, &mut u, &mut pending) {
                Ok(written) => results.push(written.into_multi()),
                Err(e) => {
                    failed = Some((i, e));
                    break;
                }
            }
        }
        let mut out = Vec::new();
        match failed {
            None => {
                self.fire(pending, events);
                zlock_proto::records::encode_multi_results(&results, &mut out);
            }
            Some((at, err)) => {
                for (p, node) in undo.saved.into_iter().rev() {
                    match node {
                        Some(n) => self.tree.insert(&p, n),
                        None => {
                            self.tree.remove(&p);
                        }
                    }
                }
                // The lock index must come out as it went in, waiters included.
                self.tree.rollback_lock_changes(lock_mark);
                self.handovers.forget_since(handover_mark);
                // A failed multi changed nothing, so none of its triggers fire.
                drop(pending);
                let res: Vec<MultiResult> = (0..ops.len())
                    .map(|i| {
                        MultiResult::Error(if i < at {
                            0
                        } else if i == at {
                            err.code()
                        } else {
                            ErrorCode::RuntimeInconsistency.code()
                        })
                    })
                    .collect();
                zlock_proto::records::encode_multi_results(&res, &mut out);
            }
        }
        Reply::ok(out)
    }
}
