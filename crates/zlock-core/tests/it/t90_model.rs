//! A model test: random create/delete/setData/multi/closeSession/container-expiry
//! sequences run against [`State`] and against a tiny reference model (a map from path
//! to data, version, owner and ZooKeeper's internal create counter). After every step
//! the reply codes, created names and the whole tree must agree, and the tree
//! invariants must hold. At the end the snapshot and a replay of the encoded log must
//! rebuild the same state.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use zlock_core::{snapshot, Config, State, Txn, TxnBody};
use zlock_proto::records::{MultiOp, MultiResult};
use zlock_proto::Request;

use crate::harness::*;

const FIXED: [&str; 8] = [
    "/a", "/b", "/a/x", "/a/y", "/b/x", "/a/x/z", "/a/y/z", "/b/x/z",
];
const SEQ_PARENTS: [&str; 4] = ["/", "/a", "/b", "/a/x"];
const SESSIONS: usize = 3;

#[derive(Debug, Clone)]
enum Target {
    Fixed(usize),
    Existing(usize),
}

#[derive(Debug, Clone, Copy)]
enum Ver {
    Any,
    Exact,
    Wrong,
}

#[derive(Debug, Clone)]
enum Op {
    /// `seq` picks a sequential parent instead of a fixed path.
    Create {
        s: usize,
        path: usize,
        seq: bool,
        ephemeral: bool,
        data: u8,
    },
    Container {
        s: usize,
        path: usize,
    },
    Delete {
        s: usize,
        t: Target,
        v: Ver,
    },
    Set {
        s: usize,
        t: Target,
        v: Ver,
        data: u8,
    },
    Multi {
        s: usize,
        ops: Vec<Op>,
    },
    Close {
        s: usize,
    },
    Expire,
    Tick(i64),
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        (0..FIXED.len()).prop_map(Target::Fixed),
        (0..64usize).prop_map(Target::Existing),
    ]
}

fn ver() -> impl Strategy<Value = Ver> {
    prop_oneof![4 => Just(Ver::Any), 4 => Just(Ver::Exact), 1 => Just(Ver::Wrong)]
}

/// Ops allowed inside a multi.
fn write_op() -> impl Strategy<Value = Op> {
    let s = 0..SESSIONS;
    prop_oneof![
        5 => (s.clone(), 0..FIXED.len(), any::<bool>(), prop::bool::weighted(0.3), 0u8..6).prop_map(
            |(s, path, seq, ephemeral, data)| Op::Create { s, path, seq, ephemeral, data }
        ),
        3 => (s.clone(), target(), ver()).prop_map(|(s, t, v)| Op::Delete { s, t, v }),
        3 => (s, target(), ver(), 0u8..6).prop_map(|(s, t, v, data)| Op::Set { s, t, v, data }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => write_op(),
        1 => (0..SESSIONS, 0..FIXED.len()).prop_map(|(s, path)| Op::Container { s, path }),
        2 => (0..SESSIONS, prop::collection::vec(write_op(), 0..4))
            .prop_map(|(s, ops)| Op::Multi { s, ops }),
        1 => (0..SESSIONS).prop_map(|s| Op::Close { s }),
        1 => Just(Op::Expire),
        1 => (1..5000i64).prop_map(Op::Tick),
    ]
}

#[derive(Debug, Clone)]
struct MNode {
    data: Vec<u8>,
    version: i32,
    owner: Option<SessionId>,
    container: bool,
    /// Children ever created (ZooKeeper's internal cversion).
    creates: i32,
    children: BTreeSet<String>,
}

impl MNode {
    fn new(data: Vec<u8>, owner: Option<SessionId>, container: bool) -> MNode {
        MNode {
            data,
            version: 0,
            owner,
            container,
            creates: 0,
            children: BTreeSet::new(),
        }
    }
}

#[derive(Debug, Clone)]
struct Model {
    nodes: BTreeMap<String, MNode>,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Created(String),
    Deleted,
    Set(i32),
}

fn parent(p: &str) -> &str {
    zlock_core::path::parent(p)
}

fn name(p: &str) -> String {
    zlock_core::path::name(p).to_owned()
}

impl Model {
    fn new() -> Model {
        let mut m = Model {
            nodes: BTreeMap::new(),
        };
        m.nodes.insert("/".into(), MNode::new(vec![], None, false));
        for p in ["/zookeeper", "/zookeeper/quota", "/zookeeper/config"] {
            m.nodes.insert(p.into(), MNode::new(vec![], None, false));
            m.nodes.get_mut(parent(p)).unwrap().children.insert(name(p));
        }
        m
    }

    fn resolve(&self, t: &Target) -> String {
        match t {
            Target::Fixed(i) => FIXED[*i].to_owned(),
            Target::Existing(i) => {
                let user: Vec<&String> = self
                    .nodes
                    .keys()
                    .filter(|p| *p != "/" && !p.starts_with("/zookeeper"))
                    .collect();
                if user.is_empty() {
                    "/a".into()
                } else {
                    user[*i % user.len()].clone()
                }
            }
        }
    }

    fn version_for(&self, p: &str, v: Ver) -> i32 {
        let cur = self.nodes.get(p).map_or(0, |n| n.version);
        match v {
            Ver::Any => -1,
            Ver::Exact => cur,
            Ver::Wrong => cur + 1,
        }
    }

    fn create(
        &mut self,
        path: &str,
        seq: bool,
        owner: Option<SessionId>,
        container: bool,
        data: Vec<u8>,
    ) -> Result<Outcome, i32> {
        let par = parent(path).to_owned();
        let Some(pn) = self.nodes.get(&par) else {
            return Err(NO_NODE);
        };
        let full = if seq {
            format!("{path}{:010}", pn.creates)
        } else {
            path.to_owned()
        };
        if self.nodes.contains_key(&full) {
            return Err(NODE_EXISTS);
        }
        if pn.owner.is_some() {
            return Err(NO_CHILDREN_FOR_EPHEMERALS);
        }
        let pn = self.nodes.get_mut(&par).unwrap();
        pn.creates += 1;
        pn.children.insert(name(&full));
        self.nodes
            .insert(full.clone(), MNode::new(data, owner, container));
        Ok(Outcome::Created(full))
    }

    fn remove(&mut self, p: &str) {
        self.nodes.remove(p);
        self.nodes
            .get_mut(parent(p))
            .unwrap()
            .children
            .remove(&name(p));
    }

    fn delete(&mut self, p: &str, version: i32) -> Result<Outcome, i32> {
        if !self.nodes.contains_key(parent(p)) {
            return Err(NO_NODE);
        }
        let Some(n) = self.nodes.get(p) else {
            return Err(NO_NODE);
        };
        if version != -1 && version != n.version {
            return Err(BAD_VERSION);
        }
        if !n.children.is_empty() {
            return Err(NOT_EMPTY);
        }
        self.remove(p);
        Ok(Outcome::Deleted)
    }

    fn set(&mut self, p: &str, data: Vec<u8>, version: i32) -> Result<Outcome, i32> {
        let Some(n) = self.nodes.get_mut(p) else {
            return Err(NO_NODE);
        };
        if version != -1 && version != n.version {
            return Err(BAD_VERSION);
        }
        n.data = data;
        n.version += 1;
        Ok(Outcome::Set(n.version))
    }

    fn close(&mut self, sid: SessionId) {
        let mine: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.owner == Some(sid))
            .map(|(p, _)| p.clone())
            .collect();
        for p in mine {
            self.remove(&p);
        }
    }

    fn expired(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.container && n.children.is_empty() && n.creates > 0)
            .map(|(p, _)| p.clone())
            .collect()
    }
}

fn data_of(d: u8) -> Vec<u8> {
    vec![d; d as usize]
}

/// Turns a model-level write into the request, resolving targets against `m`.
/// Applies one op to the model.
type ModelStep = Box<dyn Fn(&mut Model) -> Result<Outcome, i32>>;

fn to_request(m: &Model, op: &Op, sid: SessionId) -> (MultiOp, ModelStep) {
    match op.clone() {
        Op::Create {
            path,
            seq,
            ephemeral,
            data,
            ..
        } => {
            let p = if seq {
                let par = SEQ_PARENTS[path % SEQ_PARENTS.len()];
                if par == "/" {
                    "/s-".to_owned()
                } else {
                    format!("{par}/s-")
                }
            } else {
                FIXED[path].to_owned()
            };
            let flags = i32::from(ephemeral) | if seq { 2 } else { 0 };
            let req = m_create(&p, &data_of(data), flags);
            let owner = ephemeral.then_some(sid);
            (
                req,
                Box::new(move |m: &mut Model| m.create(&p, seq, owner, false, data_of(data))),
            )
        }
        Op::Delete { t, v, .. } => {
            let p = m.resolve(&t);
            let version = m.version_for(&p, v);
            (
                m_delete(&p, version),
                Box::new(move |m: &mut Model| m.delete(&p, version)),
            )
        }
        Op::Set { t, v, data, .. } => {
            let p = m.resolve(&t);
            let version = m.version_for(&p, v);
            (
                m_set(&p, &data_of(data), version),
                Box::new(move |m: &mut Model| m.set(&p, data_of(data), version)),
            )
        }
        other => panic!("not a multi op: {other:?}"),
    }
}

fn multi_to_request(op: MultiOp) -> Request {
    match op {
        MultiOp::Create(c, r) => Request::Create(c, r),
        MultiOp::Delete(r) => Request::Delete(r),
        MultiOp::SetData(r) => Request::SetData(r),
        other => panic!("{other:?}"),
    }
}

fn outcome_of_reply(req: &MultiOp, r: &zlock_core::Reply) -> Result<Outcome, i32> {
    result(r)?;
    Ok(match req {
        MultiOp::Create(..) => Outcome::Created(create2_body(r).path),
        MultiOp::Delete(_) => Outcome::Deleted,
        MultiOp::SetData(_) => Outcome::Set(stat_body(r).version),
        other => panic!("{other:?}"),
    })
}

fn outcome_of_result(r: &MultiResult) -> Outcome {
    match r {
        MultiResult::Create2(p, _) => Outcome::Created(p.clone()),
        MultiResult::Delete => Outcome::Deleted,
        MultiResult::SetData(st) => Outcome::Set(st.version),
        other => panic!("{other:?}"),
    }
}

/// The whole tree must match the model, Stat by Stat.
fn compare(h: &Harness, m: &Model) {
    let got: BTreeSet<String> = h.st.tree.iter().map(|(p, _)| p.to_owned()).collect();
    let want: BTreeSet<String> = m.nodes.keys().cloned().collect();
    assert_eq!(got, want, "same paths");
    for (p, mn) in &m.nodes {
        let n = h.st.tree.get(p).unwrap();
        let st = n.stat();
        assert_eq!(
            n.data.as_deref().unwrap_or_default(),
            &mn.data[..],
            "{p} data"
        );
        assert_eq!(st.version, mn.version, "{p} version");
        assert_eq!(st.ephemeral_owner, mn.owner.map_or(0, |o| o.0), "{p} owner");
        assert_eq!(
            st.num_children as usize,
            mn.children.len(),
            "{p} numChildren"
        );
        assert_eq!(
            st.cversion,
            2 * mn.creates - mn.children.len() as i32,
            "{p} cversion = creates + deletes"
        );
        let names: BTreeSet<String> = n.children.iter().map(|c| c.to_string()).collect();
        assert_eq!(names, mn.children, "{p} children");
    }
    check_invariants(&h.st);
}

fn open(h: &mut Harness, log: &mut Vec<Txn>) -> SessionId {
    let t = h.txn(
        SessionId::NONE,
        TxnBody::CreateSession {
            passwd: vec![0; 16],
            timeout_ms: 5000,
        },
    );
    let sid = h.apply(&t).created_session.unwrap();
    log.push(t);
    sid
}

fn write(
    h: &mut Harness,
    log: &mut Vec<Txn>,
    sid: SessionId,
    request: Request,
) -> zlock_core::Applied {
    let t = h.txn(
        sid,
        TxnBody::Request {
            auth: vec![ip()].into(),
            request,
        },
    );
    let a = h.apply(&t);
    log.push(t);
    a
}

fn run(ops: Vec<Op>) {
    let mut h = Harness::new();
    let mut m = Model::new();
    let mut log: Vec<Txn> = Vec::new();
    let mut sessions: Vec<SessionId> = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(open(&mut h, &mut log));
    }
    for op in ops {
        match &op {
            Op::Create { s, .. } | Op::Delete { s, .. } | Op::Set { s, .. } => {
                let sid = sessions[*s];
                let (req, f) = to_request(&m, &op, sid);
                let a = write(&mut h, &mut log, sid, multi_to_request(req.clone()));
                let want = f(&mut m);
                assert_eq!(outcome_of_reply(&req, &a.reply), want, "{op:?}");
            }
            Op::Container { s, path } => {
                let sid = sessions[*s];
                let a = write(&mut h, &mut log, sid, create_container(FIXED[*path]));
                let want = m.create(FIXED[*path], false, None, true, vec![]);
                let got = result(&a.reply).map(|_| Outcome::Created(create2_body(&a.reply).path));
                assert_eq!(got, want, "{op:?}");
            }
            Op::Multi { s, ops } => {
                let sid = sessions[*s];
                let mut scratch = m.clone();
                let mut reqs = Vec::new();
                let mut want: Vec<Result<Outcome, i32>> = Vec::new();
                let mut failed = None;
                for (i, sub) in ops.iter().enumerate() {
                    let (req, f) = to_request(&scratch, sub, sid);
                    reqs.push(req);
                    if failed.is_none() {
                        let r = f(&mut scratch);
                        if let Err(e) = r {
                            failed = Some((i, e));
                        }
                        want.push(r);
                    }
                }
                let a = write(&mut h, &mut log, sid, Request::Multi(reqs));
                assert_eq!(a.reply.err, OK);
                let res = multi_results(&a.reply);
                match failed {
                    None => {
                        let got: Vec<Result<Outcome, i32>> =
                            res.iter().map(|r| Ok(outcome_of_result(r))).collect();
                        assert_eq!(got, want, "{op:?}");
                        m = scratch;
                    }
                    Some((at, e)) => {
                        let mut codes = vec![0; at];
                        codes.push(e);
                        codes.resize(ops.len(), RUNTIME_INCONSISTENCY);
                        assert_eq!(multi_errors(&res), codes, "{op:?}");
                        assert!(a.events.is_empty());
                    }
                }
            }
            Op::Close { s } => {
                let sid = sessions[*s];
                let t = h.txn(sid, TxnBody::CloseSession { session_id: sid });
                let a = h.apply(&t);
                log.push(t);
                assert_eq!(a.closed_session, Some(sid));
                m.close(sid);
                sessions[*s] = open(&mut h, &mut log);
            }
            Op::Expire => {
                let mut got = h.st.expired_candidates(h.now);
                got.sort();
                let want = m.expired();
                assert_eq!(got, want, "expiry candidates");
                let t = h.txn(
                    SessionId::NONE,
                    TxnBody::DeleteExpired { paths: got.clone() },
                );
                h.apply(&t);
                log.push(t);
                for p in want {
                    m.remove(&p);
                }
            }
            Op::Tick(ms) => h.tick(*ms),
        }
        compare(&h, &m);
    }
    // The snapshot and the replayed log rebuild the same state.
    let mut bytes = Vec::new();
    snapshot::encode(&h.st, &mut bytes);
    let back = snapshot::decode(&bytes, Config::default()).unwrap();
    assert_eq!(dump(&back), h.dump());
    assert_eq!(back.zxid.0, h.st.zxid.0);
    let mut replay = State::new(Config::default());
    for t in &log {
        apply_next(&mut replay, &Txn::decode(&t.to_bytes()).unwrap());
    }
    assert_eq!(dump(&replay), h.dump());
    assert_eq!(replay.zxid.0, h.st.zxid.0);
    assert_eq!(replay.sessions, h.st.sessions);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn tree_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        run(ops);
    }
}

/// A fixed, longer run with a simple seeded generator, so the model also covers long
/// histories (proptest keeps its sequences short).
#[test]
fn long_seeded_run() {
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut ops = Vec::new();
    for _ in 0..3000 {
        let s = next(SESSIONS);
        let t = if next(2) == 0 {
            Target::Fixed(next(FIXED.len()))
        } else {
            Target::Existing(next(64))
        };
        let v = [Ver::Any, Ver::Exact, Ver::Wrong][next(3)];
        ops.push(match next(20) {
            0..=6 => Op::Create {
                s,
                path: next(FIXED.len()),
                seq: next(2) == 0,
                ephemeral: next(4) == 0,
                data: next(6) as u8,
            },
            7..=11 => Op::Delete { s, t, v },
            12..=14 => Op::Set {
                s,
                t,
                v,
                data: next(6) as u8,
            },
            15 => Op::Container {
                s,
                path: next(FIXED.len()),
            },
            16 => Op::Close { s },
            17 => Op::Expire,
            _ => {
                let mut sub: Vec<Op> = (0..next(4))
                    .map(|_| Op::Delete {
                        s,
                        t: Target::Existing(next(64)),
                        v: Ver::Any,
                    })
                    .collect();
                sub.push(Op::Create {
                    s,
                    path: next(SEQ_PARENTS.len()),
                    seq: true,
                    ephemeral: false,
                    data: 1,
                });
                Op::Multi { s, ops: sub }
            }
        });
    }
    run(ops);
}
