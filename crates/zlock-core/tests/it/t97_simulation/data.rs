//! Plain data writes under `/d`, beside the locks: creates of every mode, deletes and
//! setData with right, wrong and no versions, and random multis (so many fail
//! part-way). Their answers are ZooKeeper's business and pinned by the other tests;
//! here they move zxids, sequence counters and ephemerals around the lock traffic, and
//! every one goes through the snapshot and replay checks.

use zlock_proto::records::{MultiOp, MultiResult};
use zlock_proto::Request;

use super::world::World;
use crate::harness::{self, flags};

const NAMES: [&str; 5] = ["a", "b", "x", "y", "q-"];
const MODES: [i32; 4] = [
    flags::PERSISTENT,
    flags::EPHEMERAL,
    flags::PERSISTENT_SEQUENTIAL,
    flags::EPHEMERAL_SEQUENTIAL,
];

/// Every node under `/d` (not `/d` itself, which stays).
fn data_nodes(w: &World) -> Vec<String> {
    let mut v: Vec<String> =
        w.st.tree
            .iter()
            .map(|(p, _)| p)
            .filter(|p| p.starts_with("/d/"))
            .map(str::to_owned)
            .collect();
    v.sort();
    v
}

fn version(w: &mut World, p: &str) -> i32 {
    let current = w.st.tree.get(p).map_or(0, |n| n.version);
    match w.rng.below(10) {
        0..=4 => -1,
        5..=7 => current,
        _ => current + 1,
    }
}

/// A create path: under `/d` or an existing data node (maybe an ephemeral, refused).
fn create_path(w: &mut World, nodes: &[String]) -> String {
    let parent = if nodes.is_empty() || w.rng.chance(40) {
        "/d".to_owned()
    } else {
        w.rng.pick(nodes).cloned().unwrap_or_else(|| "/d".into())
    };
    let name = w.rng.pick(&NAMES).copied().unwrap_or("x");
    format!("{parent}/{name}")
}

fn target(w: &mut World, nodes: &[String]) -> String {
    w.rng.pick(nodes).cloned().unwrap_or_else(|| "/d/a".into())
}

pub fn data_op(w: &mut World) -> Result<(), String> {
    let Some(s) = w.active_client() else {
        return Ok(());
    };
    let nodes = data_nodes(w);
    let req = match w.rng.below(3) {
        0 => {
            let p = create_path(w, &nodes);
            let mode = w.rng.pick(&MODES).copied().unwrap_or(0);
            harness::create2(&p, b"v", mode)
        }
        1 => {
            let p = target(w, &nodes);
            let v = version(w, &p);
            harness::delete(&p, v)
        }
        _ => {
            let p = target(w, &nodes);
            let v = version(w, &p);
            harness::set_data(&p, b"w", v)
        }
    };
    let desc = format!("{s:#x} {req:?}");
    let r = w.request(s, req)?;
    w.note(format!("{desc} -> {}", r.err));
    Ok(())
}

pub fn multi(w: &mut World) -> Result<(), String> {
    let Some(s) = w.active_client() else {
        return Ok(());
    };
    let nodes = data_nodes(w);
    let n = w.rng.range(2, 4);
    let mut ops: Vec<MultiOp> = Vec::new();
    for _ in 0..n {
        ops.push(match w.rng.below(4) {
            0 => {
                let p = create_path(w, &nodes);
                let mode = w.rng.pick(&MODES).copied().unwrap_or(0);
                harness::m_create(&p, b"m", mode)
            }
            1 => {
                let p = target(w, &nodes);
                let v = version(w, &p);
                harness::m_delete(&p, v)
            }
            2 => {
                let p = target(w, &nodes);
                let v = version(w, &p);
                harness::m_set(&p, b"m", v)
            }
            _ => {
                let p = target(w, &nodes);
                let v = version(w, &p);
                harness::m_check(&p, v)
            }
        });
    }
    let desc = format!("{s:#x} multi {ops:?}");
    let r = w.request(s, Request::Multi(ops))?;
    if r.err != 0 {
        return Err(format!(
            "{desc}: a multi's header is always ok, got {}",
            r.err
        ));
    }
    let failed = harness::multi_results(&r)
        .iter()
        .any(|x| matches!(x, MultiResult::Error(e) if *e != 0));
    w.stats.failed_multis += u64::from(failed);
    w.note(format!("{desc} -> failed: {failed}"));
    Ok(())
}
