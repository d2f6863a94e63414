//! A small harness around [`State`]: a fake clock, sessions, request builders, reply
//! decoding and a tree invariant checker. Every write goes through [`State::apply`] as a
//! [`Txn`], exactly as the server logs it.

use std::collections::BTreeMap;

use zlock_core::tree::{Node, NodeKind};
pub use zlock_core::SessionId;
use zlock_core::{Applied, Config, Origin, Reply, State, Txn, TxnBody};
use zlock_proto::records::{
    decode_multi_results, keeper_state, perms, Acl, CheckVersionRequest, Create2Response,
    CreateRequest, CreateTtlRequest, DeleteRequest, GetAclResponse, GetChildren2Response,
    GetChildrenResponse, GetDataResponse, Id, MultiOp, MultiResult, PathRequest, PathWatchRequest,
    SetAclRequest, SetDataRequest, Stat, StatResponse, WatcherEvent, WatchesRequest,
};
use zlock_proto::{OpCode, Reader, Record, Request};

/// Reply error codes (`KeeperException.Code`) as the i32 a reply carries.
pub const OK: i32 = 0;

pub const NO_NODE: i32 = -101;
pub const NO_AUTH: i32 = -102;
pub const BAD_VERSION: i32 = -103;
pub const NO_CHILDREN_FOR_EPHEMERALS: i32 = -108;
pub const NODE_EXISTS: i32 = -110;
pub const NOT_EMPTY: i32 = -111;
pub const INVALID_ACL: i32 = -114;
pub const BAD_ARGUMENTS: i32 = -8;
pub const UNIMPLEMENTED: i32 = -6;
pub const RUNTIME_INCONSISTENCY: i32 = -2;
pub const NO_WATCHER: i32 = -121;

/// Create flags (CreateMode).
pub mod flags {
    pub const PERSISTENT: i32 = 0;
    pub const EPHEMERAL: i32 = 1;
    pub const PERSISTENT_SEQUENTIAL: i32 = 2;
    pub const EPHEMERAL_SEQUENTIAL: i32 = 3;
    pub const CONTAINER: i32 = 4;
    pub const TTL: i32 = 5;
    pub const TTL_SEQUENTIAL: i32 = 6;
}

/// Start of the fake clock: any fixed wall time works.
pub const T0: i64 = 1_700_000_000_000;

pub struct Harness {
    pub st: State,
    /// The fake clock, in ms; every Txn carries it.
    pub now: i64,
    /// Identities sent with requests unless a call says otherwise.
    pub auth: Vec<Id>,
    last_session: SessionId,
}

/// Applies `txn` at the next log position of `st` (a log of nothing but Txns, as the
/// WAL writes).
pub fn apply_next(st: &mut State, txn: &Txn) -> Applied {
    st.apply(st.applied.next(), txn).expect("in order")
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(Config::default())
    }

    /// A state with `extendedTypesEnabled` (TTL nodes).
    pub fn with_ttl() -> Harness {
        Harness::with_config(Config {
            extended_types: true,
        })
    }

    pub fn with_config(config: Config) -> Harness {
        Harness {
            st: State::new(config),
            now: T0,
            auth: vec![ip()],
            last_session: SessionId::NONE,
        }
    }

    /// Opens a new session through a CreateSession Txn.
    pub fn session(&mut self) -> SessionId {
        self.session_with(vec![7; 16], 30_000)
    }

    /// Opens a new session with this password and timeout; its id is the one apply
    /// derived (and is checked to be new).
    pub fn session_with(&mut self, passwd: Vec<u8>, timeout_ms: i32) -> SessionId {
        let txn = self.txn(
            SessionId::NONE,
            TxnBody::CreateSession { passwd, timeout_ms },
        );
        let a = self.apply(&txn);
        assert_eq!(a.reply.err, 0);
        let id = a
            .created_session
            .expect("a CreateSession creates a session");
        assert!(id > self.last_session, "session ids are new");
        self.last_session = id;
        id
    }

    /// A Txn of session `s` (0 for none) at the fake clock.
    pub fn txn(&self, s: SessionId, body: TxnBody) -> Txn {
        let origin = Origin {
            session: s,
            ..Origin::default()
        };
        Txn::new(origin, self.now, body)
    }

    pub fn tick(&mut self, ms: i64) {
        self.now += ms;
    }

    /// Applies a Txn at the next log position and checks that it took exactly the next
    /// zxid.
    pub fn apply(&mut self, txn: &Txn) -> Applied {
        let before = self.st.zxid.0;
        let a = self
            .st
            .apply(self.st.applied.next(), txn)
            .expect("in order");
        assert_eq!(a.zxid.0, before + 1, "every Txn takes the next zxid");
        assert_eq!(self.st.zxid.0, a.zxid.0);
        a
    }

    pub fn write(&mut self, s: SessionId, request: Request) -> Applied {
        let auth = self.auth.clone();
        self.write_as(s, &auth, request)
    }

    pub fn write_as(&mut self, s: SessionId, auth: &[Id], request: Request) -> Applied {
        let txn = self.txn(
            s,
            TxnBody::Request {
                auth: auth.to_vec().into(),
                request,
            },
        );
        self.apply(&txn)
    }

    pub fn close(&mut self, s: SessionId) -> Applied {
        let txn = self.txn(s, TxnBody::CloseSession { session_id: s });
        self.apply(&txn)
    }

    pub fn read(&mut self, s: SessionId, request: &Request) -> Reply {
        let auth = self.auth.clone();
        self.st.read(s, &auth, request)
    }

    pub fn read_as(&mut self, s: SessionId, auth: &[Id], request: &Request) -> Reply {
        self.st.read(s, auth, request)
    }

    // ---- writes ----

    /// create2 with an open ACL.
    pub fn create(&mut self, s: SessionId, path: &str, data: &[u8], flags: i32) -> Applied {
        self.write(s, create2(path, data, flags))
    }

    /// create2 that must succeed; returns the actual path and the new node's Stat.
    pub fn create_ok(
        &mut self,
        s: SessionId,
        path: &str,
        data: &[u8],
        flags: i32,
    ) -> (String, Stat) {
        let a = self.create(s, path, data, flags);
        assert_eq!(a.reply.err, OK, "create {path}");
        let r = Create2Response::decode(&mut Reader::new(&a.reply.body)).unwrap();
        (r.path, r.stat)
    }

    /// Creates a persistent node with empty data, which must succeed.
    pub fn mk(&mut self, s: SessionId, path: &str) -> Stat {
        self.create_ok(s, path, b"", flags::PERSISTENT).1
    }

    pub fn delete(&mut self, s: SessionId, path: &str, version: i32) -> Applied {
        self.write(s, delete(path, version))
    }

    pub fn set_data(&mut self, s: SessionId, path: &str, data: &[u8], version: i32) -> Applied {
        self.write(s, set_data(path, data, version))
    }

    pub fn set_data_ok(&mut self, s: SessionId, path: &str, data: &[u8]) -> Stat {
        let a = self.set_data(s, path, data, -1);
        assert_eq!(a.reply.err, OK, "setData {path}");
        stat_body(&a.reply)
    }

    /// Runs a multi; the reply header must be ok. Returns the per-op results.
    pub fn multi(&mut self, s: SessionId, ops: Vec<MultiOp>) -> (Applied, Vec<MultiResult>) {
        let a = self.write(s, Request::Multi(ops));
        assert_eq!(a.reply.err, OK, "a multi's reply header is always ok");
        let res = multi_results(&a.reply);
        (a, res)
    }

    // ---- reads ----

    pub fn exists(&mut self, s: SessionId, path: &str, watch: bool) -> Result<Stat, i32> {
        let r = self.read(s, &Request::Exists(pw(path, watch)));
        result(&r).map(|_| stat_body(&r))
    }

    pub fn get_data(
        &mut self,
        s: SessionId,
        path: &str,
        watch: bool,
    ) -> Result<(Vec<u8>, Stat), i32> {
        let r = self.read(s, &Request::GetData(pw(path, watch)));
        result(&r)?;
        let g = GetDataResponse::decode(&mut Reader::new(&r.body)).unwrap();
        Ok((g.data.unwrap_or_default(), g.stat))
    }

    /// getChildren (8), sorted.
    pub fn children(&mut self, s: SessionId, path: &str, watch: bool) -> Result<Vec<String>, i32> {
        let r = self.read(s, &Request::GetChildren(pw(path, watch)));
        result(&r)?;
        let mut c = GetChildrenResponse::decode(&mut Reader::new(&r.body))
            .unwrap()
            .children;
        c.sort();
        Ok(c)
    }

    /// getChildren2 (12), sorted children and the Stat.
    pub fn children2(
        &mut self,
        s: SessionId,
        path: &str,
        watch: bool,
    ) -> Result<(Vec<String>, Stat), i32> {
        let r = self.read(s, &Request::GetChildren2(pw(path, watch)));
        result(&r)?;
        let g = GetChildren2Response::decode(&mut Reader::new(&r.body)).unwrap();
        let mut c = g.children;
        c.sort();
        Ok((c, g.stat))
    }

    pub fn get_acl(&mut self, s: SessionId, path: &str) -> Result<(Vec<Acl>, Stat), i32> {
        let r = self.read(s, &Request::GetAcl(PathRequest { path: path.into() }));
        result(&r)?;
        let g = GetAclResponse::decode(&mut Reader::new(&r.body)).unwrap();
        Ok((g.acl, g.stat))
    }

    /// The Stat a client would see, read straight from the tree.
    pub fn stat(&self, path: &str) -> Stat {
        self.st
            .tree
            .get(path)
            .unwrap_or_else(|| panic!("{path} should exist"))
            .stat()
    }

    pub fn has(&self, path: &str) -> bool {
        self.st.tree.contains(path)
    }

    pub fn add_watch(&mut self, s: SessionId, path: &str, recursive: bool) {
        let r = self.read(
            s,
            &Request::AddWatch(zlock_proto::records::AddWatchRequest {
                path: path.into(),
                mode: i32::from(recursive),
            }),
        );
        assert_eq!(r.err, OK);
        assert_eq!(
            r.body,
            vec![0, 0, 0, 0],
            "addWatch answers ErrorResponse{{0}}"
        );
    }

    pub fn check_watches(&mut self, s: SessionId, path: &str, ty: i32) -> i32 {
        self.read(
            s,
            &Request::CheckWatches(WatchesRequest {
                path: path.into(),
                watcher_type: ty,
            }),
        )
        .err
    }

    pub fn remove_watches(&mut self, s: SessionId, path: &str, ty: i32) -> i32 {
        self.read(
            s,
            &Request::RemoveWatches(WatchesRequest {
                path: path.into(),
                watcher_type: ty,
            }),
        )
        .err
    }

    /// Every node, keyed by path, for whole-tree comparisons.
    pub fn dump(&self) -> BTreeMap<String, Node> {
        dump(&self.st)
    }
}

pub fn dump(st: &State) -> BTreeMap<String, Node> {
    st.tree
        .iter()
        .map(|(p, n)| (p.to_owned(), n.clone()))
        .collect()
}

// ---- request builders ----

pub fn open() -> Vec<Acl> {
    Acl::open_unsafe()
}

pub fn ip() -> Id {
    Id::new("ip", "127.0.0.1")
}

pub fn pw(path: &str, watch: bool) -> PathWatchRequest {
    PathWatchRequest {
        path: path.into(),
        watch,
    }
}

pub fn create_req(path: &str, data: &[u8], flags: i32) -> CreateRequest {
    CreateRequest {
        path: path.into(),
        data: Some(data.to_vec()),
        acl: open(),
        flags,
    }
}

pub fn create2(path: &str, data: &[u8], flags: i32) -> Request {
    Request::Create(OpCode::Create2, create_req(path, data, flags))
}

pub fn create1(path: &str, data: &[u8], flags: i32) -> Request {
    Request::Create(OpCode::Create, create_req(path, data, flags))
}

pub fn create_with_acl(path: &str, acl: Vec<Acl>, flags: i32) -> Request {
    Request::Create(
        OpCode::Create2,
        CreateRequest {
            path: path.into(),
            data: Some(Vec::new()),
            acl,
            flags,
        },
    )
}

pub fn create_container(path: &str) -> Request {
    Request::Create(
        OpCode::CreateContainer,
        create_req(path, b"", flags::CONTAINER),
    )
}

pub fn ttl_req(path: &str, flags: i32, ttl: i64) -> CreateTtlRequest {
    CreateTtlRequest {
        path: path.into(),
        data: Some(Vec::new()),
        acl: open(),
        flags,
        ttl,
    }
}

pub fn create_ttl(path: &str, flags: i32, ttl: i64) -> Request {
    Request::CreateTtl(ttl_req(path, flags, ttl))
}

pub fn delete(path: &str, version: i32) -> Request {
    Request::Delete(DeleteRequest {
        path: path.into(),
        version,
    })
}

pub fn set_data(path: &str, data: &[u8], version: i32) -> Request {
    Request::SetData(SetDataRequest {
        path: path.into(),
        data: Some(data.to_vec()),
        version,
    })
}

pub fn set_acl(path: &str, acl: Vec<Acl>, version: i32) -> Request {
    Request::SetAcl(SetAclRequest {
        path: path.into(),
        acl,
        version,
    })
}

pub fn acl(perms: i32, scheme: &str, id: &str) -> Acl {
    Acl {
        perms,
        id: Id::new(scheme, id),
    }
}

pub const ALL: i32 = perms::ALL;

// multi ops

pub fn m_create(path: &str, data: &[u8], flags: i32) -> MultiOp {
    MultiOp::Create(OpCode::Create2, create_req(path, data, flags))
}

pub fn m_create1(path: &str, flags: i32) -> MultiOp {
    MultiOp::Create(OpCode::Create, create_req(path, b"", flags))
}

pub fn m_delete(path: &str, version: i32) -> MultiOp {
    MultiOp::Delete(DeleteRequest {
        path: path.into(),
        version,
    })
}

pub fn m_set(path: &str, data: &[u8], version: i32) -> MultiOp {
    MultiOp::SetData(SetDataRequest {
        path: path.into(),
        data: Some(data.to_vec()),
        version,
    })
}

pub fn m_check(path: &str, version: i32) -> MultiOp {
    MultiOp::Check(CheckVersionRequest {
        path: path.into(),
        version,
    })
}

// ---- reply decoding ----

pub fn result(r: &Reply) -> Result<(), i32> {
    if r.err == OK {
        Ok(())
    } else {
        assert!(r.body.is_empty(), "an error reply has no body");
        Err(r.err)
    }
}

pub fn stat_body(r: &Reply) -> Stat {
    assert_eq!(r.err, OK);
    let mut rd = Reader::new(&r.body);
    let s = StatResponse::decode(&mut rd).unwrap().stat;
    assert!(rd.is_empty());
    s
}

pub fn create2_body(r: &Reply) -> Create2Response {
    assert_eq!(r.err, OK);
    Create2Response::decode(&mut Reader::new(&r.body)).unwrap()
}

pub fn multi_results(r: &Reply) -> Vec<MultiResult> {
    let mut rd = Reader::new(&r.body);
    let res = decode_multi_results(&mut rd).unwrap();
    assert!(rd.is_empty(), "nothing after the multi end marker");
    res
}

/// The per-op error codes of a failed multi.
pub fn multi_errors(res: &[MultiResult]) -> Vec<i32> {
    res.iter()
        .map(|r| match r {
            MultiResult::Error(e) => *e,
            other => panic!("expected an error entry, got {other:?}"),
        })
        .collect()
}

// ---- events ----

/// A notification as (session, type, path), checking the state is SyncConnected.
pub fn evs(a: &Applied) -> Vec<(SessionId, i32, String)> {
    flat(&a.events)
}

pub fn flat(events: &[(SessionId, WatcherEvent)]) -> Vec<(SessionId, i32, String)> {
    events
        .iter()
        .map(|(s, e)| {
            assert_eq!(e.state, keeper_state::SYNC_CONNECTED);
            (*s, e.event_type, e.path.clone())
        })
        .collect()
}

/// Events sorted, for comparisons where order between sessions does not matter.
pub fn sorted(a: &Applied) -> Vec<(SessionId, i32, String)> {
    let mut v = evs(a);
    v.sort();
    v
}

pub fn ev(s: SessionId, ty: i32, path: &str) -> (SessionId, i32, String) {
    (s, ty, path.to_owned())
}

// ---- invariants ----

/// Checks the tree's structural invariants: every node but `/` has a parent that lists
/// it, every listed child exists, numChildren matches, and the ephemeral, container
/// and TTL indexes agree with the nodes.
pub fn check_invariants(st: &State) {
    let t = &st.tree;
    assert!(t.contains("/"), "root exists");
    let mut ephemerals: BTreeMap<SessionId, Vec<String>> = BTreeMap::new();
    let mut containers = Vec::new();
    let mut ttls = Vec::new();
    for (p, n) in t.iter() {
        let stat = n.stat();
        assert_eq!(stat.num_children as usize, n.children.len(), "{p}");
        assert_eq!(stat.data_length as usize, n.data_len(), "{p}");
        for c in n.children.iter() {
            let cp = if p == "/" {
                format!("/{c}")
            } else {
                format!("{p}/{c}")
            };
            assert!(t.contains(&cp), "child {cp} of {p} exists");
        }
        if p != "/" {
            let parent = zlock_core::path::parent(p);
            let name = zlock_core::path::name(p);
            let par = t
                .get(parent)
                .unwrap_or_else(|| panic!("parent of {p} exists"));
            assert!(par.children.contains(name), "{parent} lists {name}");
            assert!(
                !matches!(par.kind, NodeKind::Ephemeral(_)),
                "{p}: an ephemeral has no children"
            );
            assert!(
                zlock_core::path::validate(p, false).is_ok(),
                "{p:?} is valid"
            );
        }
        assert!(n.czxid <= n.mzxid || n.czxid == 0, "{p}: czxid <= mzxid");
        assert!(
            n.mzxid <= st.zxid.0 && n.pzxid <= st.zxid.0,
            "{p}: no zxid from the future"
        );
        match n.kind {
            NodeKind::Ephemeral(s) => {
                assert!(
                    st.sessions.contains_key(&s),
                    "{p}: owner {s} is a live session"
                );
                ephemerals.entry(s).or_default().push(p.to_owned());
                assert_eq!(stat.ephemeral_owner, s.0);
            }
            NodeKind::Container => {
                containers.push(p.to_owned());
                assert_eq!(stat.ephemeral_owner, 0);
            }
            NodeKind::Ttl(_) => {
                ttls.push(p.to_owned());
                assert_eq!(stat.ephemeral_owner, 0);
            }
            NodeKind::Persistent => assert_eq!(stat.ephemeral_owner, 0),
        }
    }
    for v in ephemerals.values_mut() {
        v.sort();
    }
    let index: BTreeMap<SessionId, Vec<String>> = t
        .ephemeral_sessions()
        .map(|(s, set)| (*s, set.iter().cloned().collect()))
        .collect();
    assert_eq!(index, ephemerals, "ephemeral index matches the nodes");
    for (s, paths) in &index {
        assert_eq!(&t.ephemerals_of(*s), paths);
    }
    assert_eq!(
        t.ephemeral_count(),
        ephemerals.values().map(Vec::len).sum::<usize>()
    );
    containers.sort();
    ttls.sort();
    assert_eq!(t.containers().cloned().collect::<Vec<_>>(), containers);
    assert_eq!(t.ttl_nodes().cloned().collect::<Vec<_>>(), ttls);
}
