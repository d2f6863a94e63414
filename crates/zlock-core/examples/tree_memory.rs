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

use zlock_core::{Config, State};

mod common;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let znodes: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let _profiler = dhat::Profiler::builder().testing().build();
    let mut st = State::new(Config::default());
    let sid = common::sessions(&mut st, 1)[0];
    let before = dhat::HeapStats::get();
    common::load(&mut st, sid, znodes);
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
