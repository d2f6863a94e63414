//! Latency of [`Wal::sync`] for one 100-byte record at a time, with preallocation off
//! and at its default, on the disk that holds `<dir>`.
//!
//! ```text
//! cargo run --release -p zlock-store --example wal_sync_latency -- <dir> [syncs] [rounds]
//! ```
//!
//! Each round runs both settings, one after the other, on a fresh log in `<dir>`:
//! `syncs` (default 2000) times append + sync, then a reopen of that log. It prints the
//! p50, p99 and maximum of the syncs and the reopen time. `<dir>` must be on the disk
//! under test (not a tmpfs), and is left empty.

use std::error::Error;
use std::path::Path;
use std::time::{Duration, Instant};

use zlock_store::{Wal, WalOptions};

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: wal_sync_latency <dir> [syncs] [rounds]")?;
    let syncs: usize = args.next().map_or(Ok(2000), |s| s.parse())?;
    let rounds: usize = args.next().map_or(Ok(1), |s| s.parse())?;
    let dir = Path::new(&dir);
    let settings = [
        ("preallocate 0", 0),
        ("preallocate 4 MiB", WalOptions::default().preallocate_bytes),
    ];
    for round in 1..=rounds {
        for (name, preallocate_bytes) in settings {
            let opts = WalOptions {
                preallocate_bytes,
                ..WalOptions::default()
            };
            let log = dir.join(format!("wal-{preallocate_bytes}"));
            let (mut times, reopen) = run(&log, opts, syncs)?;
            std::fs::remove_dir_all(&log)?;
            times.sort();
            let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
            println!(
                "round {round}, {name:<18} {syncs} syncs: p50 {:>4} µs  p99 {:>4} µs  \
                 max {:>5} µs   reopen {:.2} ms",
                at(0.50).as_micros(),
                at(0.99).as_micros(),
                at(1.0).as_micros(),
                reopen.as_secs_f64() * 1e3,
            );
        }
    }
    Ok(())
}

/// `syncs` rounds of append + sync into a new log at `dir`, then a reopen: the sync
/// times and the reopen time.
fn run(
    dir: &Path,
    opts: WalOptions,
    syncs: usize,
) -> zlock_store::Result<(Vec<Duration>, Duration)> {
    let payload = [0x5a_u8; 100];
    let mut wal = Wal::open(dir, opts.clone(), 0, |_, _| Ok(()))?;
    let mut times = Vec::with_capacity(syncs);
    for _ in 0..syncs {
        wal.append(wal.last_index() + 1, &payload)?;
        let start = Instant::now();
        wal.sync()?;
        times.push(start.elapsed());
    }
    drop(wal);
    let start = Instant::now();
    let mut replayed = 0;
    let wal = Wal::open(dir, opts, 0, |_, _| {
        replayed += 1;
        Ok(())
    })?;
    let reopen = start.elapsed();
    assert_eq!((replayed, wal.last_index()), (syncs, syncs as u64));
    Ok((times, reopen))
}
