//! Scenario F: many sessions on one lock. One session holds it, every other one
//! waits (a queue of `sessions - 1` for the fair locks; Redis waiters poll instead).
//! Measured: connect time, the time to build the queue, the server's VmRSS before,
//! with the sessions open and with the queue built (given `--server-pid`), and the
//! cost of the first `handovers` hand-overs from the full queue.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::backend::{System, Target};
use super::{close_all, connect_all, distribution, histogram, record, summary};

const QUEUE_TIMEOUT: Duration = Duration::from_secs(300);
/// Waiters that join the queue together.
const JOIN_BATCH: usize = 250;

fn rss_kb(pid: Option<u32>) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

pub async fn scale(
    t: &Target,
    sessions: usize,
    handovers: usize,
    pid: Option<u32>,
) -> anyhow::Result<Value> {
    let sessions = sessions.max(2);
    let handovers = handovers.min(sessions - 1).max(1);
    let rss_before = rss_kb(pid);
    let (mut all, connect_secs) = connect_all(t, sessions, 128).await?;
    let rss_connected = rss_kb(pid);
    all[0].setup().await?;
    let mut holder_lock = all[0].lock("lock-f");
    let held = holder_lock.acquire(t).await?;

    // Every other session queues up; each one, once it has the lock, notes the time
    // and hands it on at once. They join in batches, each batch once the previous one
    // is queued: a fair-lock waiter lists every contender when it joins, so joining all
    // at once would put n lists of up to n names in flight together.
    let queue_started = Instant::now();
    let deadline = queue_started + QUEUE_TIMEOUT;
    let attempts_before = t.stats.redis_attempts.load(Ordering::Relaxed);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let mut waiters = tokio::task::JoinSet::new();
    let mut queued = 1;
    let (first, rest) = all.split_at_mut(1);
    let first = &mut first[0];
    for batch in rest.chunks(JOIN_BATCH) {
        for s in batch {
            let mut lock = s.lock("lock-f");
            let (t, tx) = (t.clone(), tx.clone());
            waiters.spawn(async move {
                let held = lock.acquire(&t).await?;
                let _ = tx.send(Instant::now());
                lock.release(&t, held).await
            });
        }
        let want = 1 + waiters.len();
        queued = loop {
            let n = match first.queue_len("lock-f").await? {
                Some(n) => n,
                None => {
                    // Redis: no queue; every waiter has tried once.
                    let tried = t.stats.redis_attempts.load(Ordering::Relaxed) - attempts_before;
                    (tried as usize).min(want - 1) + 1
                }
            };
            if n >= want || Instant::now() >= deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if Instant::now() >= deadline {
            break;
        }
    }
    drop(tx);
    let queue_secs = queue_started.elapsed().as_secs_f64();
    let rss_queued = rss_kb(pid);

    // Hand-overs from the full queue.
    let t0 = Instant::now();
    holder_lock.release(t, held).await?;
    let mut gaps = histogram();
    let mut last = t0;
    let mut got = 0;
    while got < handovers {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
            Ok(Some(at)) => {
                record(&mut gaps, at.saturating_duration_since(last));
                last = at;
                got += 1;
            }
            _ => break,
        }
    }
    let handover_secs = last.saturating_duration_since(t0).as_secs_f64();
    waiters.abort_all();
    while waiters.join_next().await.is_some() {}
    let close_started = Instant::now();
    close_all(all, 128).await;
    let close_secs = close_started.elapsed().as_secs_f64();
    Ok(json!({
        "sessions": sessions,
        "queued": queued,
        "queue_complete": queued >= sessions,
        "queue_is_polling": t.system == System::Redis,
        "connect_secs": connect_secs,
        "queue_secs": queue_secs,
        "server_rss_kb_before": rss_before,
        "server_rss_kb_connected": rss_connected,
        "server_rss_kb_queued": rss_queued,
        "handovers": got,
        "handover_secs": handover_secs,
        "handovers_per_sec": got as f64 / handover_secs.max(1e-9),
        "handover_us": summary(&gaps),
        "handover_dist": distribution(&gaps),
        "close_secs": close_secs,
    }))
}
