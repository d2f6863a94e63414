//! A deterministic simulation of the ensemble: three or five members running zlock's
//! Raft commit stage (openraft, zlock's Raft log store and state machine, the real
//! `zlock_core::State` as each member's host) in one process, on one thread, in
//! simulated time, with a simulated network and disks. A seed decides everything:
//! elections, partitions, message loss, delay, reordering and duplication, crashes
//! (with torn log writes) and restarts, crashes that lose a member's whole disk (it
//! restarts blank and rejoins through `commit::raft::rejoin`, one such member at a
//! time), the clients' writes: through the leader's `write_as_leader`, in groups
//! through one pinned `Submitter`, or handed by a member's sequencer (`desk`) to its own
//! writer task, one batch at a time with its outcome asked for
//! (`commit::raft::write::Writer`, started on every member as the server does; a
//! member that does not lead forwards them to the leader over a simulated connection
//! that behaves as TCP does, `forward`, taken there by the server's own
//! `submit::Forwards`), or pipelined through a member's sequencer (`desk`: several
//! batches of one session at once, its connection dropped when the writer reports an
//! outcome it cannot know). Appends go one at a time as messages in even seeds, and
//! as pipelined streams in odd ones (several in flight on one simulated connection, in
//! order, through the server's own follower side, `commit::raft::stream::Appends`; a
//! loss breaks the connection). After a faulty phase the
//! network heals, every member comes back, and the run waits for one history.
//!
//! Checked at every step or applied point: election safety as openraft defines it
//! (every leader seen, in any member's metrics after each step or in any AppendEntries,
//! was granted by a quorum; no member grants a vote lower than one it granted before,
//! across its restarts: openraft's default leader ids `(term, member)` let a higher
//! member win a term another already won, so "one leader per term" is not one of its
//! invariants, and the runs count how often it happens); every member
//! applies the same Txn with the same outcome at each log position (across restarts);
//! nothing is visible before a majority has it on disk (each entry a member applies,
//! and so may reply to, fire a watch for or grant a lock by, is then already synced
//! on a majority of the voters' disks: the same record at the same index, what a
//! crash keeps; a member down counts with what its disk kept, and a disk lost in a
//! wipe with what it held when lost);
//! no two sessions hold one lock at any applied point (holders: told so by their
//! reply or a pushed grant, node still there); each lock's fencing tokens (the
//! grant's czxid) rise. At the end: one history on every member, every acknowledged
//! write in it exactly once, each session's writes in the order it sent them, and of
//! the batches handed together (to one submitter, or over one client connection) only
//! a prefix applied.
//!
//! # Running
//!
//! `cargo test -p zlock-server --test raft_sim` runs seeds 0..8 and one seed twice
//! (the two event traces must be equal). `ZLOCK_SIM_SEEDS=500` runs seeds 0..500
//! (`ZLOCK_SIM_FIRST` moves the start, `ZLOCK_SIM_THREADS` runs seeds side by side),
//! `ZLOCK_SIM_SEED=<seed>` replays one seed, with its event trace's tail on failure;
//! `ZLOCK_SIM_STEPS` sets the faulty phase's length (10 ms steps, default 1500). A
//! failing seed is printed with the command that replays it. Long batches: add
//! `--release` (about 13 times faster; 6,000 seeds in 12 minutes on 2 threads).
//!
//! # Determinism, and what it takes
//!
//! - **One thread, simulated time.** A current-thread tokio runtime with a paused
//!   clock: tasks run in a fixed order and time jumps to the next timer when all are
//!   idle. No real thread may touch the members: the Raft log's writer (a thread in
//!   the server) is handed to the simulation (`RaftLog::open_with_writer`), which runs
//!   it on a task of its own after a seeded fsync latency (not in its main loop:
//!   openraft's `initialize`, `truncate` and `shutdown` wait on the writer, and the
//!   main loop awaits them); snapshots are off (the state machine builds, sends and
//!   receives them through `spawn_blocking` and `tokio::fs`, i.e. threads).
//! - **Elections.** openraft draws its election timeouts (and its tickers' first
//!   waits) from its runtime's RNG, which zlock's runtime seeds from the run's seed
//!   (`commit::raft::runtime`). Its own elections are off (`enable_elect: false`,
//!   heartbeats stay on); the simulation, which sees every AppendEntries a member
//!   accepts, starts an election (`trigger().elect()`) on a member that has heard from
//!   no leader for a timeout drawn from the seed, and now and then on one that has.
//!   Split votes and competing candidates still happen, chosen by the seed.
//! - **No unbiased `select!`.** tokio's `select!` picks among ready branches with its
//!   unseeded thread-local RNG. openraft 0.10 selects through its runtime, biased
//!   (first ready branch in order); the simulation's own `select!`s are biased (in
//!   `forward`), as is the writer's. (The zlock code it runs has an unbiased `select!`
//!   only in the peer server's connection handling, which is not simulated, and in the snapshot
//!   sender, which is never called.)
//! - **Watch channels wake in order.** tokio's watch spreads its waiters over eight
//!   queues chosen by tokio's unseeded RNG; openraft's watches (metrics, heartbeat and
//!   replication events) are zlock's runtime's instead, which wakes waiters in the
//!   order they began to wait.
//! - **Ordered maps only** (BTreeMap), and one RNG per component, each seeded from the
//!   run's seed, drawn in the fixed order tasks run in.
//! - The vote and purge point are zlock's `MetaFile`s in a temporary directory (real,
//!   synchronous file writes: deterministic, and durable when `save_vote` returns, as
//!   on a real disk).
//!
//! # What is not simulated
//!
//! Snapshots (building, sending, installing; log purging), the TCP peer protocol's own
//! code (appends and forwarded frames go over simulated connections), session expiry
//! and the server's pipeline above the commit stage (sequencer, router), membership
//! changes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod check;
mod client;
mod desk;
mod disk;
mod forward;
mod host;
mod net;
mod sim;
mod world;

use sim::{Failure, Length, Outcome};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn length() -> Length {
    Length {
        faulty: env("ZLOCK_SIM_STEPS").unwrap_or(1500),
        settle: 6_000,
    }
}

/// Runs one seed on its own runtime.
fn run(seed: u64, len: Length) -> Result<Outcome, Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    // openraft's own random draws (election timeouts, tickers' first waits) from the
    // seed too: its runtime (`commit::raft::runtime`) reads this thread's seed.
    zlock_server::commit::raft::runtime::seed_this_thread(Some(seed ^ 0x6f70_656e_7261_6674));
    let out = rt.block_on(sim::run(seed, len));
    zlock_server::commit::raft::runtime::seed_this_thread(None);
    out
}

fn report(seed: u64, f: &Failure) -> String {
    let mut s = format!("raft_sim: seed {seed} FAILED: {}\n", f.what);
    s.push_str("latest events:\n");
    for e in &f.recent {
        s.push_str("  ");
        s.push_str(e);
        s.push('\n');
    }
    s.push_str(&format!(
        "replay: ZLOCK_SIM_SEED={seed} cargo test -p zlock-server --test raft_sim -- seeds --nocapture\n"
    ));
    s
}

/// Runs `seeds`, on `threads` threads; returns the failures' reports.
fn run_all(seeds: Vec<u64>, threads: usize, len: Length) -> (usize, Vec<String>) {
    let next = std::sync::Mutex::new(seeds.into_iter());
    let passed = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let Some(seed) = next.lock().unwrap().next() else {
                    return;
                };
                let r = std::panic::catch_unwind(|| run(seed, len));
                match r {
                    Ok(Ok(o)) => {
                        passed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        println!("raft_sim: seed {seed} ok: {o:?}");
                    }
                    Ok(Err(f)) => {
                        let r = report(seed, &f);
                        eprintln!("{r}");
                        failures.lock().unwrap().push(r);
                    }
                    Err(p) => {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        let r = report(
                            seed,
                            &Failure {
                                what: format!("panicked: {msg}"),
                                recent: Vec::new(),
                            },
                        );
                        eprintln!("{r}");
                        failures.lock().unwrap().push(r);
                    }
                }
            });
        }
    });
    (passed.into_inner(), failures.into_inner().unwrap())
}

#[test]
fn seeds() {
    let seeds: Vec<u64> = match env("ZLOCK_SIM_SEED") {
        Some(s) => vec![s],
        None => {
            let first = env("ZLOCK_SIM_FIRST").unwrap_or(0);
            let n = env("ZLOCK_SIM_SEEDS").unwrap_or(8);
            (first..first + n).collect()
        }
    };
    let threads = env("ZLOCK_SIM_THREADS").unwrap_or(1) as usize;
    let total = seeds.len();
    let (passed, failures) = run_all(seeds, threads, length());
    println!("raft_sim: {passed} of {total} seeds passed");
    assert!(
        failures.is_empty(),
        "{} of {total} seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn same_seed_same_trace() {
    let seed = env("ZLOCK_SIM_SEED").unwrap_or(3);
    let len = Length {
        faulty: 500,
        settle: 6_000,
    };
    let a = run(seed, len).unwrap_or_else(|f| panic!("{}", report(seed, &f)));
    let b = run(seed, len).unwrap_or_else(|f| panic!("{}", report(seed, &f)));
    assert_eq!(a, b, "seed {seed} ran twice, differently");
}

/// A leader's lease lapses and comes back between two writes of one submitter: the
/// second is refused like the first, not taken without it (see `sim::lease_lapse`).
#[test]
fn a_write_refused_for_a_lapsed_lease_holds_back_the_next() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    zlock_server::commit::raft::runtime::seed_this_thread(Some(0x1ea5e));
    let out = rt.block_on(sim::lease_lapse());
    zlock_server::commit::raft::runtime::seed_this_thread(None);
    match out {
        Ok(said) => {
            for s in said {
                println!("lease_lapse: {s}");
            }
        }
        Err(f) => panic!(
            "lease_lapse FAILED: {}\nlatest events:\n  {}",
            f.what,
            f.recent.join("\n  ")
        ),
    }
}
