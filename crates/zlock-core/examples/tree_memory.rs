//! The heap one znode costs, on a tree as `zlock bench load` builds it
//! (`/zlock-load/b<j>/n<k>`, 10,000 children per bucket, 100 bytes each):
//!
//! ```text
//! cargo run --release -p zlock-core --example tree_memory -- [ZNODES]
//! ```
//!
//! Counts the bytes and blocks live on the heap (dhat) before and after the load, and
//! prints them per znode, with an estimate of glibc malloc's chunks (a header and rounding
//! to 16 bytes per block) and the process's VmRSS.
//! A measurement, not a test: nothing is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use zlock_core::{Config, Origin, SessionId, State, Txn, TxnBody};
use zlock_proto::records::{Acl, CreateRequest};
use zlock_proto::{OpCode, Request};

const BUCKET: usize = 10_000;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn write(st: &mut State, session: SessionId, path: String, data: &[u8]) {
    let origin = Origin {
        session,
        ..Origin::default()
    };
    let request = Request::Create(
        OpCode::Create,
        CreateRequest {
            path,
            data: Some(data.to_vec()),
            acl: Acl::open_unsafe(),
            flags: 0,
        },
    );
    let txn = Txn::request(origin, 100, Arc::new(vec![]), request);
    let a = st.apply(st.applied.next(), &txn).expect("applied");
    assert_eq!(a.reply.err, 0);
}

fn main() {
    let znodes: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let _profiler = dhat::Profiler::builder().testing().build();
    let mut st = State::new(Config::default());
    let txn = Txn {
        origin: Origin::default(),
        time_ms: 100,
        body: TxnBody::CreateSession {
            passwd: vec![1; 16],
            timeout_ms: 30_000,
        },
    };
    let sid = st
        .apply(st.applied.next(), &txn)
        .expect("applied")
        .created_session
        .expect("a session");
    let before = dhat::HeapStats::get();
    write(&mut st, sid, "/zlock-load".into(), b"");
    for j in 0..znodes.div_ceil(BUCKET) {
        write(&mut st, sid, format!("/zlock-load/b{j}"), b"");
    }
    let data = vec![b'x'; 100];
    for g in 0..znodes {
        let p = format!("/zlock-load/b{}/n{}", g / BUCKET, g % BUCKET);
        write(&mut st, sid, p, &data);
    }
    let n = st.tree.len();
    let after = dhat::HeapStats::get();
    let live = after.curr_bytes - before.curr_bytes;
    let blocks = after.curr_blocks - before.curr_blocks;
    // glibc malloc: 8 bytes of header per chunk, rounded up to 16.
    let chunks = live + blocks * 16;
    println!(
        "{n} znodes: {:.1} MB requested in {blocks} blocks ({:.1} B, {:.2} blocks per znode), about {:.1} MB in malloc chunks ({:.1} B/znode), VmRSS {} kB",
        live as f64 / 1e6,
        live as f64 / n as f64,
        blocks as f64 / n as f64,
        chunks as f64 / 1e6,
        chunks as f64 / n as f64,
        rss_kb()
    );
}
