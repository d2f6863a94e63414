//! `zlock-bench floor`: what one lock write cannot go below on this machine, measured
//! with nothing else of zlock in the way: one fdatasync of a small record in a log as
//! zlock writes it (`zlock_store::Wal`, its default preallocation), alone and three at
//! once (three members' logs on one disk, as the benchmark's ensembles run), and one
//! round trip of a small message over loopback TCP between two threads. Printed as one
//! JSON object, read by `bench/lock-report.py` for the report's floor model.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use zlock_store::{Wal, WalOptions};

#[derive(clap::Args)]
pub struct FloorArgs {
    /// A directory on the disk under test (the disk the servers' data directories are
    /// on); the logs written there are removed.
    #[arg(long)]
    dir: PathBuf,
    /// Samples of each measure.
    #[arg(long, default_value_t = 2000)]
    samples: usize,
}

pub fn run(a: FloorArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let one = syncs(&a.dir.join("floor-wal-1"), a.samples)?;
    let three: Vec<Vec<Duration>> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..3)
            .map(|i| {
                let dir = a.dir.join(format!("floor-wal-3-{i}"));
                s.spawn(move || syncs(&dir, a.samples))
            })
            .collect();
        runs.into_iter()
            .map(|r| {
                r.join()
                    .map_err(|_| anyhow::anyhow!("a sync thread panicked"))?
            })
            .collect::<anyhow::Result<_>>()
    })?;
    let three: Vec<Duration> = three.into_iter().flatten().collect();
    let rtt = round_trips(a.samples)?;
    let out = serde_json::json!({
        "fsync_us": p50_us(one),
        "fsync3_us": p50_us(three),
        "rtt_us": p50_us(rtt),
        "samples": a.samples,
    });
    println!("{out}");
    Ok(())
}

fn p50_us(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// `n` appends of 100 bytes, each followed by a sync, into a new log at `dir`: the
/// syncs' times. The log is removed.
fn syncs(dir: &Path, n: usize) -> anyhow::Result<Vec<Duration>> {
    let _ = std::fs::remove_dir_all(dir);
    let payload = [0x5a_u8; 100];
    let mut wal = Wal::open(dir, WalOptions::default(), 0, |_, _| Ok(()))
        .with_context(|| format!("opening a log in {}", dir.display()))?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        wal.append(wal.last_index() + 1, &payload)?;
        let start = Instant::now();
        wal.sync()?;
        times.push(start.elapsed());
    }
    drop(wal);
    std::fs::remove_dir_all(dir)?;
    Ok(times)
}

/// `n` round trips of 64 bytes over 127.0.0.1 to an echoing thread.
fn round_trips(n: usize) -> anyhow::Result<Vec<Duration>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = [0u8; 64];
        loop {
            if s.read_exact(&mut buf).is_err() {
                return Ok(()); // the measuring side closed
            }
            s.write_all(&buf)?;
        }
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut buf = [7u8; 64];
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        s.write_all(&buf)?;
        s.read_exact(&mut buf)?;
        times.push(start.elapsed());
    }
    drop(s);
    echo.join()
        .map_err(|_| anyhow::anyhow!("the echo thread panicked"))??;
    Ok(times)
}
