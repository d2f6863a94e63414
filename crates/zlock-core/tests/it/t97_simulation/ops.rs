//! One simulation step: virtual time moves, the tracker expires the silent, clients
//! ping, and one random operation runs: session churn, native lock requests
//! (TRY, RESUME, `release`), recipe locks (create, getChildren, delete), deletes of
//! contenders by others, plain data writes, multis that fail part-way, container
//! sweeps, snapshots and restarts.

use zlock_core::path;
use zlock_core::tree::NodeKind;
use zlock_core::{Origin, SessionId, Txn, TxnBody};
use zlock_proto::records::{
    lock_flags, lock_mode, Create2Response, LockRequest, MultiOp, MultiResult,
};
use zlock_proto::{ErrorCode, Reader, Record, Request};

use super::oracle::{Contender, Kind, LOCKS};
use super::restart;
use super::world::World;
use crate::harness::{self, flags};

#[derive(Debug, Clone, Copy)]
enum Op {
    SelfClose,
    GoSilent,
    Stale,
    NativeLock,
    NativeRelease,
    RecipeAcquire,
    RecipeRecheck,
    RecipeRelease,
    OthersDelete,
    Data,
    Multi,
    LockMulti,
    Sweep,
    Snapshot,
    Restart,
}

/// Relative weights, in tenths of a percent of the steps.
const OPS: [(Op, u64); 15] = [
    (Op::SelfClose, 15),
    (Op::GoSilent, 10),
    (Op::Stale, 10),
    (Op::NativeLock, 250),
    (Op::NativeRelease, 110),
    (Op::RecipeAcquire, 100),
    (Op::RecipeRecheck, 90),
    (Op::RecipeRelease, 60),
    (Op::OthersDelete, 25),
    (Op::Data, 150),
    (Op::Multi, 80),
    (Op::LockMulti, 60),
    (Op::Sweep, 15),
    (Op::Snapshot, 10),
    (Op::Restart, 5),
];

/// The native lock request for lock `li`.
pub fn lock_request(li: usize, prefix: &str, mode: i32, flags: i32, release: String) -> Request {
    let (path, kind) = LOCKS[li];
    let leases = match kind {
        Kind::Semaphore(n) => n as i32,
        _ => 1,
    };
    Request::Lock(LockRequest {
        path: path.into(),
        prefix: prefix.into(),
        data: Some(b"sim".to_vec()),
        acl: harness::open(),
        mode,
        leases,
        flags,
        release,
        ..LockRequest::default()
    })
}

/// The node prefix and mode a client uses on lock `li`: per session, so a RESUME
/// finds its own node, and `__READ__`/`__WRIT__` on the read-write lock.
fn role(w: &mut World, s: SessionId, li: usize, native: bool) -> (String, i32) {
    let tag = if native { "n" } else { "r" };
    match LOCKS[li].1 {
        Kind::Exclusive => (format!("_{tag}_{s:x}-lock-"), lock_mode::EXCLUSIVE),
        Kind::ReadWrite if w.rng.chance(60) => (format!("_{tag}_{s:x}-__READ__"), lock_mode::READ),
        Kind::ReadWrite => (format!("_{tag}_{s:x}-__WRIT__"), lock_mode::WRITE),
        Kind::Semaphore(_) => (format!("_{tag}_{s:x}-lease-"), lock_mode::SEMAPHORE),
    }
}

pub fn step(w: &mut World) -> Result<(), String> {
    let dt = match w.rng.below(100) {
        0..=69 => w.rng.range(0, 50),
        70..=98 => w.rng.range(50, 500),
        // A pause longer than some timeouts: live clients expire too.
        _ => w.rng.range(1_000, 5_000),
    };
    w.now += dt;
    w.expire()?;
    w.heartbeats();
    w.close_expired()?;
    if w.clients.len() < w.target_sessions && w.rng.chance(30) {
        w.create_session()?;
    }
    let total: u64 = OPS.iter().map(|(_, n)| n).sum();
    let mut roll = w.rng.range(0, total - 1);
    let op = OPS
        .iter()
        .find(|(_, n)| {
            let hit = roll < *n;
            roll = roll.saturating_sub(*n);
            hit
        })
        .map_or(Op::Data, |(op, _)| *op);
    run(w, op)?;
    w.check_step()
}

fn run(w: &mut World, op: Op) -> Result<(), String> {
    match op {
        Op::SelfClose => {
            if let Some(s) = w.active_client() {
                w.close_session(s, true)?;
                w.stats.self_closed += 1;
            }
        }
        Op::GoSilent => {
            if let Some(s) = w.active_client() {
                w.note(format!("{s:#x} goes silent"));
                if let Some(c) = w.clients.get_mut(&s) {
                    c.silent = true;
                }
            }
        }
        Op::Stale => stale(w)?,
        Op::NativeLock => native_lock(w)?,
        Op::NativeRelease => release(w, true)?,
        Op::RecipeAcquire => recipe_acquire(w)?,
        Op::RecipeRecheck => recipe_recheck(w)?,
        Op::RecipeRelease => release(w, false)?,
        Op::OthersDelete => others_delete(w)?,
        Op::Data => super::data::data_op(w)?,
        Op::Multi => super::data::multi(w)?,
        Op::LockMulti => lock_multi(w)?,
        Op::Sweep => sweep(w)?,
        Op::Snapshot => restart::take_snapshot(w)?,
        Op::Restart => restart::restart(w)?,
    }
    Ok(())
}

/// A request logged after its session ended must be refused and change nothing.
fn stale(w: &mut World) -> Result<(), String> {
    let Some(&s) = w.rng.pick(&w.dead) else {
        return Ok(());
    };
    let r = w.request(s, harness::create2("/d/stale", b"", flags::EPHEMERAL))?;
    if r.err != ErrorCode::SessionExpired.code() || w.st.tree.contains("/d/stale") {
        return Err(format!(
            "a write of closed session {s:#x} answered {}",
            r.err
        ));
    }
    Ok(())
}

fn native_lock(w: &mut World) -> Result<(), String> {
    let Some(s) = w.active_client() else {
        return Ok(());
    };
    let li = w.rng.below(LOCKS.len());
    let (prefix, mode) = role(w, s, li, true);
    let mine = w.oracle.nodes_of(s, li);
    let same = mine
        .iter()
        .find(|p| w.oracle.nodes[*p].native && path::name(p).starts_with(&prefix))
        .cloned();
    let mut flags = 0;
    if w.rng.chance(20) {
        flags |= lock_flags::TRY;
    }
    if w.rng.chance(25) {
        flags |= lock_flags::RESUME;
    }
    let mut release = String::new();
    let mut refused = false;
    if let Some(n) = same {
        // One native node per prefix, as a client has (a RESUME could only find one):
        // re-ask for it, or release it and ask anew.
        if flags & lock_flags::RESUME == 0 || w.rng.chance(30) {
            release = n;
        }
    } else if !mine.is_empty() && w.rng.chance(30) {
        release = w.rng.pick(&mine).cloned().unwrap_or_default();
    } else if w.rng.chance(5) {
        // Not this session's node, or not under this lock: refused.
        let others: Vec<String> = w
            .oracle
            .nodes
            .iter()
            .filter(|(_, c)| c.session != s)
            .map(|(p, _)| p.clone())
            .collect();
        release = w
            .rng
            .pick(&others)
            .cloned()
            .unwrap_or_else(|| "/d/a".into());
        refused = true;
    }
    let desc = format!(
        "{s:#x} lock {} mode {mode} flags {flags} release {release:?}",
        LOCKS[li].0
    );
    let txn = w.txn(s, lock_request(li, &prefix, mode, flags, release));
    let r = w.apply(txn, Some((li, &prefix, mode)))?;
    w.note(format!("{desc} -> err {}", r.err));
    let want = if refused {
        ErrorCode::BadArguments.code()
    } else {
        0
    };
    if r.err != want {
        return Err(format!("{desc}: answered {}, expected {want}", r.err));
    }
    Ok(())
}

/// A client deletes one of its contender nodes: mostly a holder releasing (holders
/// do not sit on a lock), else a waiter giving up.
fn release(w: &mut World, native: bool) -> Result<(), String> {
    let holders = w.rng.chance(75);
    let nodes: Vec<(String, SessionId)> = w
        .oracle
        .nodes
        .iter()
        .filter(|(_, c)| c.native == native && (c.holds || !holders))
        .filter(|(_, c)| w.clients.get(&c.session).is_some_and(|cl| !cl.silent))
        .map(|(p, c)| (p.clone(), c.session))
        .collect();
    let Some((node, s)) = w.rng.pick(&nodes).cloned() else {
        return Ok(());
    };
    if !w.touch(s) {
        return Ok(());
    }
    let r = w.request(s, harness::delete(&node, -1))?;
    w.note(format!("{s:#x} deletes its {node} -> {}", r.err));
    if r.err != 0 {
        return Err(format!("delete of own {node}: {}", r.err));
    }
    Ok(())
}

/// Curator's lock recipe: create the lock path's missing ancestors as containers,
/// create an ephemeral sequential contender, then look at the children.
fn recipe_acquire(w: &mut World) -> Result<(), String> {
    let Some(s) = w.active_client() else {
        return Ok(());
    };
    let li = w.rng.below(LOCKS.len());
    let lock = LOCKS[li].0;
    let mut missing: Vec<&str> = path::ancestors(lock)
        .chain(std::iter::once(lock))
        .filter(|p| *p != "/" && !w.st.tree.contains(p))
        .collect();
    missing.sort_by_key(|p| p.len());
    for p in missing {
        let r = w.request(s, harness::create_container(p))?;
        if r.err != 0 {
            return Err(format!("container {p}: {}", r.err));
        }
    }
    let (prefix, mode) = role(w, s, li, false);
    let r = w.request(
        s,
        harness::create2(
            &format!("{lock}/{prefix}"),
            b"",
            flags::EPHEMERAL_SEQUENTIAL,
        ),
    )?;
    if r.err != 0 {
        return Err(format!("recipe contender under {lock}: {}", r.err));
    }
    let node = Create2Response::decode(&mut Reader::new(&r.body))
        .map_err(|e| e.to_string())?
        .path;
    w.oracle.nodes.insert(
        node.clone(),
        Contender {
            session: s,
            lock: li,
            native: false,
            prefix,
            mode,
            holds: false,
        },
    );
    recipe_view(w, s, &node)
}

/// The recipe's getChildren: it holds if it sees itself at the front.
fn recipe_view(w: &mut World, s: SessionId, node: &str) -> Result<(), String> {
    let lock = path::parent(node).to_owned();
    let auth = World::auth();
    let r =
        w.st.read(s, &auth, &Request::GetChildren(harness::pw(&lock, false)));
    if r.err != 0 {
        return Err(format!("getChildren {lock}: {}", r.err));
    }
    let children = zlock_proto::records::GetChildrenResponse::decode(&mut Reader::new(&r.body))
        .map_err(|e| e.to_string())?
        .children;
    w.oracle.on_recipe_view(node, &children);
    let holds = w.oracle.nodes.get(node).is_some_and(|c| c.holds);
    w.note(format!("{s:#x} recipe {node} holds: {holds}"));
    w.oracle.check(&w.st.tree)
}

/// A waiting recipe client woken (by its watch, in real life) looks again.
fn recipe_recheck(w: &mut World) -> Result<(), String> {
    let waiting: Vec<(String, SessionId)> = w
        .oracle
        .nodes
        .iter()
        .filter(|(_, c)| !c.native && !c.holds)
        .map(|(p, c)| (p.clone(), c.session))
        .collect();
    let Some((node, s)) = w.rng.pick(&waiting).cloned() else {
        return Ok(());
    };
    if w.clients.get(&s).is_none_or(|c| c.silent) || !w.touch(s) {
        return Ok(());
    }
    recipe_view(w, s, &node)
}

/// Someone else (an operator, a misbehaving client) deletes a contender's node: its
/// holder stops holding, and the queue moves on.
fn others_delete(w: &mut World) -> Result<(), String> {
    let nodes: Vec<String> = w.oracle.nodes.keys().cloned().collect();
    let Some(node) = w.rng.pick(&nodes).cloned() else {
        return Ok(());
    };
    let Some(s) = w.active_client() else {
        return Ok(());
    };
    let r = w.request(s, harness::delete(&node, -1))?;
    w.note(format!("{s:#x} deletes someone's {node} -> {}", r.err));
    if r.err != 0 {
        return Err(format!("delete of {node}: {}", r.err));
    }
    Ok(())
}

/// Multis around lock nodes: a delete of the session's contender followed by an op
/// that fails (all rolled back: the contender keeps its place, and waits on if it
/// waited) or succeeds (a hand-over); or a contender create that is rolled back.
fn lock_multi(w: &mut World) -> Result<(), String> {
    let Some(s) = w.active_client() else {
        return Ok(());
    };
    let mine: Vec<String> = w
        .oracle
        .nodes
        .iter()
        .filter(|(_, c)| c.session == s)
        .map(|(p, _)| p.clone())
        .collect();
    let d_version = w.st.tree.get("/d").map_or(0, |n| n.version);
    let fail = w.rng.chance(60);
    let last = if fail {
        harness::m_check("/d", d_version + 1_000)
    } else {
        harness::m_set("/d", b"multi", -1)
    };
    let mut ops: Vec<MultiOp> = Vec::new();
    match w.rng.pick(&mine).cloned() {
        Some(node) => {
            ops.push(harness::m_delete(&node, -1));
            if w.rng.chance(30) {
                // A contender of another session too.
                let other = w.oracle.nodes.keys().find(|p| **p != node).cloned();
                if let Some(o) = other {
                    ops.push(harness::m_delete(&o, -1));
                }
            }
        }
        None => {
            let li = w.rng.below(LOCKS.len());
            let lock = LOCKS[li].0;
            if !w.st.tree.contains(lock) {
                return Ok(());
            }
            let (prefix, _) = role(w, s, li, false);
            if !fail {
                // A contender created by a successful multi would be one the oracle
                // does not track; keep this one failing.
                return Ok(());
            }
            ops.push(harness::m_create(
                &format!("{lock}/{prefix}"),
                b"",
                flags::EPHEMERAL_SEQUENTIAL,
            ));
        }
    }
    ops.push(last);
    let desc = format!("{s:#x} lock multi {ops:?}");
    let r = w.request(s, Request::Multi(ops))?;
    let res = harness::multi_results(&r);
    let failed = res
        .iter()
        .any(|x| matches!(x, MultiResult::Error(e) if *e != 0));
    w.note(format!("{desc} -> failed: {failed}"));
    if failed != fail {
        return Err(format!("{desc}: failed {failed}, expected {fail}"));
    }
    w.stats.failed_multis += u64::from(failed);
    Ok(())
}

/// The server's container sweep: empty containers that had children go.
fn sweep(w: &mut World) -> Result<(), String> {
    let paths = w.st.expired_candidates(w.time_ms());
    if paths.is_empty() {
        return Ok(());
    }
    w.note(format!("sweep {paths:?}"));
    let txn = Txn {
        origin: Origin::default(),
        time_ms: w.time_ms(),
        clock: zlock_core::TxnClock::Leader,
        body: TxnBody::DeleteExpired {
            paths: paths.clone(),
        },
    };
    w.apply(txn, None)?;
    for p in paths {
        if w.st
            .tree
            .get(&p)
            .is_some_and(|n| n.kind == NodeKind::Container && n.children.is_empty())
        {
            return Err(format!("swept container {p} is still there"));
        }
    }
    Ok(())
}
