//! Scenarios A to E: closed loops of acquire + release, each client its own session.
//! Mutual exclusion is checked in the bench: a per-lock holder count goes up right
//! after an acquire and down right before the release; above 1 is a violation.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::backend::{Session, System, Target};
use super::{close_all, connect_all, distribution, histogram, proxy, record, summary};

/// How long each client runs.
#[derive(Clone, Copy)]
enum Stop {
    Until(Instant),
    /// Cycles per client.
    Cycles(u64),
    /// Cycles by all clients together; clients keep contending until then.
    Total(u64),
}

/// What the contenders measured together.
struct Contention {
    acquire: Histogram<u64>,
    release: Histogram<u64>,
    cycles: u64,
    secs: f64,
    violations: u64,
}

/// Runs one contender per session; session `i` uses lock `lock-(i % locks)`. All start
/// together (a barrier). With [`Stop::Total`], `at_total` runs once, right after the
/// last counted cycle (before the contenders still queued drain).
async fn contend(
    t: &Target,
    sessions: &[Session],
    locks: usize,
    stop: impl Fn() -> Stop,
    at_total: Option<Arc<dyn Fn() + Send + Sync>>,
) -> anyhow::Result<Contention> {
    let holders: Arc<Vec<AtomicI64>> = Arc::new((0..locks).map(|_| AtomicI64::new(0)).collect());
    let violations = Arc::new(AtomicU64::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(sessions.len() + 1));
    let mut tasks = Vec::with_capacity(sessions.len());
    let stop_at = stop();
    for (i, s) in sessions.iter().enumerate() {
        let k = i % locks;
        let mut lock = s.lock(&format!("lock-{k}"));
        let (t, holders, violations, total, barrier) = (
            t.clone(),
            holders.clone(),
            violations.clone(),
            total.clone(),
            barrier.clone(),
        );
        let at_total = at_total.clone();
        tasks.push(tokio::spawn(async move {
            let (mut acq, mut rel) = (histogram(), histogram());
            barrier.wait().await;
            let mut n = 0u64;
            // With `reacquire`: the hold carried into the next cycle.
            let mut carried = None;
            loop {
                match stop_at {
                    Stop::Until(end) if Instant::now() >= end => break,
                    Stop::Cycles(c) if n >= c => break,
                    Stop::Total(c) if total.load(Ordering::SeqCst) >= c => break,
                    _ => {}
                }
                let t0 = Instant::now();
                let held = match carried.take() {
                    Some(h) => lock.reacquire(&t, h).await?,
                    None => lock.acquire(&t).await?,
                };
                record(&mut acq, t0.elapsed());
                if holders[k].fetch_add(1, Ordering::SeqCst) != 0 {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                holders[k].fetch_sub(1, Ordering::SeqCst);
                if t.reacquire {
                    carried = Some(held);
                } else {
                    let t1 = Instant::now();
                    lock.release(&t, held).await?;
                    record(&mut rel, t1.elapsed());
                }
                n += 1;
                let all = total.fetch_add(1, Ordering::SeqCst) + 1;
                if let (Stop::Total(c), Some(f)) = (stop_at, &at_total) {
                    if all == c {
                        f();
                    }
                }
            }
            if let Some(h) = carried {
                lock.release(&t, h).await?;
            }
            anyhow::Ok((acq, rel, n))
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let (mut acquire, mut release, mut cycles) = (histogram(), histogram(), 0);
    for task in tasks {
        let (a, r, n) = task.await??;
        acquire.add(&a)?;
        release.add(&r)?;
        cycles += n;
    }
    Ok(Contention {
        acquire,
        release,
        cycles,
        secs: started.elapsed().as_secs_f64(),
        violations: violations.load(Ordering::Relaxed),
    })
}

/// A and B: `clients` sessions spread over `locks` locks for `secs`.
pub async fn throughput(
    t: &Target,
    clients: usize,
    locks: usize,
    secs: f64,
) -> anyhow::Result<Value> {
    let (mut sessions, connect_secs) = connect_all(t, clients, 64).await?;
    sessions[0].setup().await?;
    let run = Duration::from_secs_f64(secs.max(0.1));
    let c = contend(
        t,
        &sessions,
        locks,
        || Stop::Until(Instant::now() + run),
        None,
    )
    .await?;
    close_all(sessions, 64).await;
    Ok(json!({
        "clients": clients,
        "locks": locks,
        "connect_secs": connect_secs,
        "cycles": c.cycles,
        "secs": c.secs,
        "cycles_per_sec": c.cycles as f64 / c.secs,
        "violations": c.violations,
        "acquire_us": summary(&c.acquire),
        "release_us": summary(&c.release),
        "acquire_dist": distribution(&c.acquire),
    }))
}

/// D: `clients` sessions on one lock, `cycles` each: hand-overs/s and fairness.
pub async fn handovers(t: &Target, clients: usize, cycles: u64) -> anyhow::Result<Value> {
    let (mut sessions, connect_secs) = connect_all(t, clients, 64).await?;
    sessions[0].setup().await?;
    let c = contend(t, &sessions, 1, || Stop::Cycles(cycles), None).await?;
    close_all(sessions, 64).await;
    let p50 = c.acquire.value_at_quantile(0.5);
    let p99 = c.acquire.value_at_quantile(0.99);
    Ok(json!({
        "clients": clients,
        "cycles_per_client": cycles,
        "connect_secs": connect_secs,
        "handovers": c.cycles,
        "secs": c.secs,
        "handovers_per_sec": c.cycles as f64 / c.secs,
        "violations": c.violations,
        "wait_p99_over_p50": p99 as f64 / p50.max(1) as f64,
        "longest_wait_us": c.acquire.max(),
        "acquire_us": summary(&c.acquire),
        "release_us": summary(&c.release),
        "acquire_dist": distribution(&c.acquire),
    }))
}

/// C: the order-number case. `clients` sessions, one lock, one cycle each: read the
/// counter, write it back plus one, under the lock.
pub async fn orders(t: &Target, clients: usize) -> anyhow::Result<Value> {
    let (mut sessions, connect_secs) = connect_all(t, clients, clients).await?;
    sessions[0].setup().await?;
    let holders = Arc::new(AtomicI64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let mut tasks = Vec::with_capacity(clients);
    for mut s in sessions {
        let (t, holders, violations, barrier) = (
            t.clone(),
            holders.clone(),
            violations.clone(),
            barrier.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let r = order(&t, &mut s, &holders, &violations, &barrier).await;
            r.map(|(n, wait)| (n, wait, s))
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut numbers = Vec::with_capacity(clients);
    let mut sessions = Vec::with_capacity(clients);
    let mut acquire = histogram();
    for task in tasks {
        let (n, wait, s) = task.await??;
        numbers.push(n);
        record(&mut acquire, wait);
        sessions.push(s);
    }
    let wall_secs = started.elapsed().as_secs_f64();
    let final_counter = sessions[0].final_counter().await?;
    let mut seen = numbers.clone();
    seen.sort_unstable();
    seen.dedup();
    let duplicates = numbers.len() - seen.len();
    close_all(sessions, 64).await;
    Ok(json!({
        "clients": clients,
        "connect_secs": connect_secs,
        "wall_secs": wall_secs,
        "violations": violations.load(Ordering::Relaxed),
        "duplicates": duplicates,
        "final_counter": final_counter,
        "expected_counter": clients,
        "ok": duplicates == 0 && final_counter == clients as i64
            && violations.load(Ordering::Relaxed) == 0,
        "acquire_us": summary(&acquire),
    }))
}

/// One client of C: waits at the barrier, then takes a number. Returns the number
/// read and the wait for the lock.
async fn order(
    t: &Target,
    s: &mut Session,
    holders: &AtomicI64,
    violations: &AtomicU64,
    barrier: &tokio::sync::Barrier,
) -> anyhow::Result<(i64, Duration)> {
    let mut lock = s.lock("lock-c");
    barrier.wait().await;
    let t0 = Instant::now();
    let held = lock.acquire(t).await?;
    let wait = t0.elapsed();
    if holders.fetch_add(1, Ordering::SeqCst) != 0 {
        violations.fetch_add(1, Ordering::Relaxed);
    }
    let n = s.get_counter().await?;
    // The holder count drops right before the releasing request is sent (with
    // `--reacquire` that request also carries the write).
    let leaving = || {
        holders.fetch_sub(1, Ordering::SeqCst);
    };
    lock.write_and_release(t, s, held, n + 1, leaving).await?;
    Ok((n, wait))
}

/// E: the herd. `clients` sessions (one holder, the rest waiting) on one lock, through
/// a counting proxy, until `handovers` cycles are done by all together; everyone keeps
/// contending until then, so the queue stays full. Messages and bytes per hand-over.
pub async fn herd(t: &Target, clients: usize, handovers: u64) -> anyhow::Result<Value> {
    let (addr, counts) = proxy::start(t.addr.clone()).await?;
    let mut via = t.clone();
    via.addr = addr;
    let (mut sessions, _) = connect_all(&via, clients, 64).await?;
    sessions[0].setup().await?;
    // Let the handshakes' own traffic settle before the first snapshot.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let snap = {
        let (counts, stats) = (counts.clone(), via.stats.clone());
        move || {
            (
                counts.snapshot(),
                stats.zk_events.load(Ordering::Relaxed),
                stats.redis_attempts.load(Ordering::Relaxed),
                stats.lock_requests.load(Ordering::Relaxed),
            )
        }
    };
    let start = snap();
    let end_cell = Arc::new(OnceLock::new());
    let on_total: Arc<dyn Fn() + Send + Sync> = {
        let (cell, snap) = (end_cell.clone(), snap.clone());
        Arc::new(move || {
            let _ = cell.set(snap());
        })
    };
    let stop = Stop::Total(handovers.max(1));
    let c = contend(&via, &sessions, 1, || stop, Some(on_total)).await?;
    close_all(sessions, 64).await;
    let end = end_cell.get().copied().unwrap_or_else(snap);
    let h = handovers.max(1) as f64;
    let per = |a: u64, b: u64| ((b.saturating_sub(a)) as f64 / h * 10.0).round() / 10.0;
    let zk = t.system == System::Zk;
    let requests = if zk {
        per(start.0.frames_up, end.0.frames_up)
    } else {
        per(start.3, end.3)
    };
    Ok(json!({
        "clients": clients,
        "waiters": clients - 1,
        "handovers_counted": handovers,
        "violations": c.violations,
        "requests_per_handover": requests,
        "responses_per_handover": if zk {
            json!(per(start.0.frames_down, end.0.frames_down))
        } else { Value::Null },
        "watch_events_per_handover": if zk { json!(per(start.1, end.1)) } else { Value::Null },
        "redis_set_nx_per_handover": if t.system == System::Redis {
            json!(per(start.2, end.2))
        } else { Value::Null },
        "bytes_up_per_handover": per(start.0.bytes_up, end.0.bytes_up),
        "bytes_down_per_handover": per(start.0.bytes_down, end.0.bytes_down),
        "bytes_per_handover": per(
            start.0.bytes_up + start.0.bytes_down,
            end.0.bytes_up + end.0.bytes_down,
        ),
        "handovers_per_sec": c.cycles as f64 / c.secs,
        "acquire_us": summary(&c.acquire),
    }))
}
