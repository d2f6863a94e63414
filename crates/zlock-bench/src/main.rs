//! `zlock-bench`: zlock's benchmark tools, kept out of the `zlock` binary users install
//! so that it carries no Redis or etcd client.
//!
//! - `zlock-bench lock`: lock scenarios A-F against a ZooKeeper-protocol server (zlock
//!   or Apache ZooKeeper), Redis or etcd (`bench/compare` runs them all).
//! - `zlock-bench failover`: lock and write traffic against a three-member ensemble,
//!   `kill -9` of its leader, time to the first acknowledged write and to the next lock
//!   grant (`bench/failover.sh` runs the rounds).
//!
//! etcd needs the `etcd` feature (`cargo build --release -p zlock-bench --features
//! etcd`; the etcd client compiles its protos at build time and needs `protoc`).
//! `zlock bench ops`, `load` and `ready` stay in `zlock`: they speak only the ZooKeeper
//! protocol, and measure a user's own server.
//!
//! # Layout
//! - `lock`: the lock benchmark (systems behind `lock::backend`, scenarios A-F).
//! - `failover`: one failover round.

mod failover;
mod floor;
mod lock;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "zlock-bench", version, about = "zlock's benchmark tools")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Lock scenarios A-F against zlock / ZooKeeper, Redis or etcd
    Lock(lock::LockArgs),
    /// One failover round: traffic, kill -9 of the leader, time to the next write and grant
    Failover(failover::FailoverArgs),
    /// The machine's floor for a write: fdatasync of a small log record (alone and three
    /// at once) and a loopback round trip, as JSON
    Floor(floor::FloorArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match cli.cmd {
        Cmd::Lock(a) => rt.block_on(lock::run(a)),
        Cmd::Failover(a) => rt.block_on(failover::run(a)),
        Cmd::Floor(a) => floor::run(a),
    }
}
