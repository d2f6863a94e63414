//! Read operations: exists, getData, getChildren(2), getACL, sync, getEphemerals,
//! getAllChildrenNumber, multiRead, and the watch-management requests (addWatch,
//! checkWatches, removeWatches, setWatches, whoAmI).

use zlock_proto::records::{
    add_watch_mode, event_type, keeper_state, perms, watcher_type, ClientInfo, ErrorResponse,
    GetAclResponse, GetAllChildrenNumberResponse, GetChildren2Response, GetChildrenResponse,
    GetDataResponse, GetEphemeralsResponse, Id, MultiOp, MultiResult, PathRequest, SetWatches2,
    Stat, StatResponse, WatcherEvent, WhoAmIResponse,
};
use zlock_proto::{ErrorCode, Record, Request};

use crate::acl;
use crate::state::{Answer, ConfigNode, Reply, State};
use crate::tree::{Node, Nodes, SessionId, SubtreeCount};
use crate::watches::{Notification, WatchKind};

/// Reads do not validate paths in ZooKeeper (`FinalRequestProcessor`): a malformed path
/// is simply not found. The empty path is the root: ZooKeeper's DataTree keeps the root
/// node under both "" and "/" (a watch set through "" still never fires, as there).
fn node<'a>(st: &'a State, p: &str) -> Result<&'a Node, ErrorCode> {
    st.tree
        .get(if p.is_empty() { "/" } else { p })
        .ok_or(ErrorCode::NoNode)
}

/// `n`'s Stat as readers see it: [`State::config_node`]'s view for `/zookeeper/config`.
fn stat_of(st: &State, p: &str, n: &Node) -> Stat {
    match &st.config_node {
        Some(c) if p == ConfigNode::PATH => c.stat(n.stat()),
        _ => n.stat(),
    }
}

/// `n`'s data as readers see it (see [`stat_of`]).
fn data_of(st: &State, p: &str, n: &Node) -> Option<Vec<u8>> {
    match &st.config_node {
        Some(c) if p == ConfigNode::PATH => Some(c.data.clone()),
        _ => n.data.clone(),
    }
}

/// Serves `req`; a walk longer than `budget` look-ups is left as a [`LongRead`].
pub(crate) fn read(
    st: &mut State,
    session: SessionId,
    auth: &[Id],
    req: &Request,
    budget: usize,
) -> Result<Answer, ErrorCode> {
    match req {
        Request::GetAllChildrenNumber(r) => all_children_number(st, auth, &r.path, budget),
        other => read_now(st, session, auth, other).map(|body| Answer::Now(Reply::ok(body))),
    }
}

/// getAllChildrenNumber: the nodes under `p` (ZooKeeper counts them from its flat map;
/// the tree walks the subtree). The node and its ACL are checked now; a walk of more
/// than `budget` look-ups goes on as a [`LongRead`].
fn all_children_number(
    st: &State,
    auth: &[Id],
    p: &str,
    budget: usize,
) -> Result<Answer, ErrorCode> {
    let n = node(st, p)?;
    acl::check(&n.acl, perms::READ, auth)?;
    let mut count = SubtreeCount::new(p);
    let nodes = st.tree.nodes();
    if count.walk(nodes, budget) {
        return Ok(Answer::Now(Reply::ok(children_number(count.total))));
    }
    Ok(Answer::Later(LongRead {
        nodes: nodes.clone(),
        count,
    }))
}

fn children_number(total: i64) -> Vec<u8> {
    GetAllChildrenNumberResponse {
        total_number: i32::try_from(total).unwrap_or(i32::MAX),
    }
    .to_bytes()
}

/// A read served under the caller's lock but not finished there: the rest of its walk,
/// on a copy of the tree as it was when the read was served (O(1) to take: see
/// [`Nodes`]). It can be finished on any thread and needs no lock: its answer is the
/// one of the moment it was served, whatever the live tree has done since.
#[derive(Debug)]
pub struct LongRead {
    nodes: Nodes,
    count: SubtreeCount,
}

impl LongRead {
    pub fn finish(mut self) -> Reply {
        self.count.walk(&self.nodes, usize::MAX);
        Reply::ok(children_number(self.count.total))
    }
}

/// Every read but the long ones, served in full.
fn read_now(
    st: &mut State,
    session: SessionId,
    auth: &[Id],
    req: &Request,
) -> Result<Vec<u8>, ErrorCode> {
    if watches_something(req) {
        st.watches.set_auth(session, auth);
    }
    match req {
        Request::Exists(r) => {
            // Only a NUL is refused; the watch is set even for a missing node.
            if r.path.contains('\0') {
                return Err(ErrorCode::BadArguments);
            }
            if r.watch {
                st.watches.add(session, &r.path, WatchKind::Data);
            }
            let n = node(st, &r.path)?;
            Ok(StatResponse {
                stat: stat_of(st, &r.path, n),
            }
            .to_bytes())
        }
        Request::GetData(r) => {
            let (data, stat) = get_data(st, session, auth, &r.path, r.watch)?;
            Ok(GetDataResponse { data, stat }.to_bytes())
        }
        Request::GetChildren(r) => {
            let (children, _) = get_children(st, session, auth, &r.path, r.watch)?;
            Ok(GetChildrenResponse { children }.to_bytes())
        }
        Request::GetChildren2(r) => {
            let (children, stat) = get_children(st, session, auth, &r.path, r.watch)?;
            Ok(GetChildren2Response { children, stat }.to_bytes())
        }
        Request::GetAcl(r) => {
            let n = node(st, &r.path)?;
            acl::check(&n.acl, perms::READ | perms::ADMIN, auth)?;
            let mut list = n.acl.as_ref().clone();
            // Without ADMIN, ZooKeeper hides digest hashes: `user:hash` reads `user:x`.
            if acl::check(&n.acl, perms::ADMIN, auth).is_err() {
                for a in list.iter_mut().filter(|a| a.id.scheme == "digest") {
                    if let Some(i) = a.id.id.find(':') {
                        a.id.id.replace_range(i.., ":x");
                    }
                }
            }
            Ok(GetAclResponse {
                acl: list,
                stat: stat_of(st, &r.path, n),
            }
            .to_bytes())
        }
        Request::Sync(r) => Ok(PathRequest {
            path: r.path.clone(),
        }
        .to_bytes()),
        Request::GetEphemerals(r) => {
            let prefix = r.path.as_str();
            let ephemerals = st
                .tree
                .ephemerals_of(session)
                .into_iter()
                .filter(|p| prefix.is_empty() || prefix == "/" || p.starts_with(prefix))
                .collect();
            Ok(GetEphemeralsResponse { ephemerals }.to_bytes())
        }
        Request::MultiRead(ops) => {
            let mut results = Vec::with_capacity(ops.len());
            for op in ops {
                let res = match op {
                    MultiOp::GetData(r) => get_data(st, session, auth, &r.path, r.watch)
                        .map(|(d, s)| MultiResult::GetData(d, s)),
                    MultiOp::GetChildren(r) => get_children(st, session, auth, &r.path, r.watch)
                        .map(|(c, _)| MultiResult::GetChildren(c)),
                    _ => Err(ErrorCode::BadArguments),
                };
                results.push(res.unwrap_or_else(|e| MultiResult::Error(e.code())));
            }
            let mut out = Vec::new();
            zlock_proto::records::encode_multi_results(&results, &mut out);
            Ok(out)
        }
        Request::AddWatch(r) => {
            // ZooKeeper registers the watch without looking at the path at all
            // (`FinalRequestProcessor` addWatch); a malformed one simply never fires.
            let kind = match r.mode {
                add_watch_mode::PERSISTENT => WatchKind::Persistent,
                add_watch_mode::PERSISTENT_RECURSIVE => WatchKind::Recursive,
                _ => return Err(ErrorCode::BadArguments),
            };
            st.watches.add(session, &r.path, kind);
            Ok(ErrorResponse { err: 0 }.to_bytes())
        }
        Request::CheckWatches(r) => {
            if watch_kinds(r.watcher_type)?
                .iter()
                .any(|k| st.watches.contains(session, &r.path, *k))
            {
                Ok(Vec::new())
            } else {
                Err(ErrorCode::NoWatcher)
            }
        }
        Request::RemoveWatches(r) => {
            let mut any = false;
            for k in watch_kinds(r.watcher_type)? {
                any |= st.watches.remove(session, &r.path, k);
            }
            if any {
                Ok(Vec::new())
            } else {
                Err(ErrorCode::NoWatcher)
            }
        }
        Request::WhoAmI => Ok(WhoAmIResponse {
            client_info: auth
                .iter()
                .map(|id| ClientInfo {
                    auth_scheme: id.scheme.clone(),
                    // ZooKeeper's AuthUtil.getUser: the scheme's provider names the user
                    // (DigestAuthenticationProvider: the part of "user:base64(sha1)"
                    // before the first ':'; ip and x509: the id); a scheme with no
                    // provider, `super`, gets "".
                    user: match id.scheme.as_str() {
                        "digest" => id.id.split(':').next().unwrap_or_default().to_owned(),
                        "ip" | "x509" => id.id.clone(),
                        _ => String::new(),
                    },
                })
                .collect(),
        }
        .to_bytes()),
        _ => Err(ErrorCode::Unimplemented),
    }
}

/// Does this read register a watch?
fn watches_something(req: &Request) -> bool {
    match req {
        Request::Exists(r)
        | Request::GetData(r)
        | Request::GetChildren(r)
        | Request::GetChildren2(r) => r.watch,
        Request::AddWatch(_) => true,
        Request::MultiRead(ops) => ops.iter().any(|op| match op {
            MultiOp::GetData(r) | MultiOp::GetChildren(r) => r.watch,
            _ => false,
        }),
        _ => false,
    }
}

fn watch_kinds(ty: i32) -> Result<Vec<WatchKind>, ErrorCode> {
    Ok(match ty {
        watcher_type::CHILDREN => vec![WatchKind::Child],
        watcher_type::DATA => vec![WatchKind::Data],
        watcher_type::PERSISTENT => vec![WatchKind::Persistent],
        watcher_type::PERSISTENT_RECURSIVE => vec![WatchKind::Recursive],
        watcher_type::ANY => vec![
            WatchKind::Child,
            WatchKind::Data,
            WatchKind::Persistent,
            WatchKind::Recursive,
        ],
        _ => return Err(ErrorCode::BadArguments),
    })
}

fn get_data(
    st: &mut State,
    session: SessionId,
    auth: &[Id],
    p: &str,
    watch: bool,
) -> Result<(Option<Vec<u8>>, zlock_proto::records::Stat), ErrorCode> {
    let n = node(st, p)?;
    acl::check(&n.acl, perms::READ, auth)?;
    let res = (data_of(st, p, n), stat_of(st, p, n));
    if watch {
        st.watches.add(session, p, WatchKind::Data);
    }
    Ok(res)
}

fn get_children(
    st: &mut State,
    session: SessionId,
    auth: &[Id],
    p: &str,
    watch: bool,
) -> Result<(Vec<String>, zlock_proto::records::Stat), ErrorCode> {
    let n = node(st, p)?;
    acl::check(&n.acl, perms::READ, auth)?;
    let res = (
        n.children.iter().map(|c| c.to_string()).collect(),
        stat_of(st, p, n),
    );
    if watch {
        st.watches.add(session, p, WatchKind::Child);
    }
    Ok(res)
}

/// Re-arms a reconnecting session's watches (setWatches / setWatches2), first sending
/// the events it missed since `relative_zxid`, as ZooKeeper's `DataTree.setWatches` does.
pub fn set_watches(
    st: &mut State,
    session: SessionId,
    auth: &[Id],
    w: &SetWatches2,
) -> Vec<Notification> {
    st.watches.set_auth(session, auth);
    let rel = w.relative_zxid;
    let mut out = Vec::new();
    let ev = |ty: i32, p: &str| {
        (
            session,
            WatcherEvent {
                event_type: ty,
                state: keeper_state::SYNC_CONNECTED,
                path: p.to_owned(),
            },
        )
    };
    for p in &w.data_watches {
        match st.tree.get(p) {
            None => out.push(ev(event_type::NODE_DELETED, p)),
            Some(n) if n.mzxid > rel => out.push(ev(event_type::NODE_DATA_CHANGED, p)),
            Some(_) => st.watches.add(session, p, WatchKind::Data),
        }
    }
    for p in &w.exist_watches {
        if st.tree.contains(p) {
            out.push(ev(event_type::NODE_CREATED, p));
        } else {
            st.watches.add(session, p, WatchKind::Data);
        }
    }
    for p in &w.child_watches {
        match st.tree.get(p) {
            None => out.push(ev(event_type::NODE_DELETED, p)),
            Some(n) if n.pzxid > rel => out.push(ev(event_type::NODE_CHILDREN_CHANGED, p)),
            Some(_) => st.watches.add(session, p, WatchKind::Child),
        }
    }
    for p in &w.persistent_watches {
        st.watches.add(session, p, WatchKind::Persistent);
    }
    for p in &w.persistent_recursive_watches {
        st.watches.add(session, p, WatchKind::Recursive);
    }
    out
}
