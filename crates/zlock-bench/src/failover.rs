//! `zlock-bench failover`: one round of the failover benchmark against a three-member
//! ensemble (zlock, Apache ZooKeeper or etcd).
//!
//! `--clients` writer sessions each write one key (`setData` / `put`) in a loop, one
//! request at a time, and `--clients` locker sessions each take and release a lock of
//! their own in a loop (zlock's native lock or the ZooKeeper recipe, etcd's Lock API
//! with a lease), all sessions spread over the members of the connect string. After
//! `--warmup-secs` the leader (`--kill-pid`, found by the caller) is sent SIGKILL; from
//! the moment `kill` returns (T) the round measures:
//!
//! - `write_ms`: until the first write *sent at or after T* is acknowledged;
//! - `grant_ms`: until the first lock acquire *started at or after T* is granted.
//!
//! Requests sent before T and answered after it are not counted, as they might have
//! been committed before the kill. A request that fails (connection loss, a member
//! that is gone) is sent again after 1 ms; a lock whose release failed is given up and
//! a new one taken (its node may still be there, owned by the live session). Every
//! request has a deadline of `--op-timeout-ms`, the round one of `--timeout-secs`.
//!
//! Prints one JSON object: both times in ms (`null` if not reached within the round),
//! how many writes and grants there were before T, and the errors after T.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;

use crate::lock::backend::{Recipe, System, Target};
use crate::lock::LockPathArg;

#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "Examples:\n  \
    zlock-bench failover --system zk --server 127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183 \\\n    \
    --kill-pid 1234\n  \
    zlock-bench failover --system etcd --server 127.0.0.1:2379,127.0.0.1:2479,127.0.0.1:2579 \\\n    \
    --kill-pid 1234")]
pub struct FailoverArgs {
    /// `zk` (zlock or Apache ZooKeeper) or `etcd`
    #[arg(long, value_enum, default_value = "zk")]
    pub system: System,
    /// Every member, host:port,host:port,...
    #[arg(long, short = 's')]
    pub server: String,
    /// ZooKeeper protocol: `auto` takes zlock's native lock where the server has it
    #[arg(long, value_enum, default_value = "auto")]
    pub lock_path: LockPathArg,
    /// The leader's pid: sent `--signal` after the warm-up
    #[arg(long)]
    pub kill_pid: u32,
    /// The signal: KILL (a crash) or TERM (an operator stopping the leader for
    /// maintenance: it closes its connections and ports and exits)
    #[arg(long, default_value = "KILL", value_parser = ["KILL", "TERM"])]
    pub signal: String,
    /// Writer sessions, and as many locker sessions
    #[arg(long, default_value_t = 3)]
    pub clients: usize,
    /// Seconds of traffic before the kill
    #[arg(long, default_value_t = 1.0)]
    pub warmup_secs: f64,
    /// Deadline of one request (a write, an acquire, a release), ms
    #[arg(long, default_value_t = 3000)]
    pub op_timeout_ms: u64,
    /// Seconds after the kill before the round gives up
    #[arg(long, default_value_t = 20.0)]
    pub timeout_secs: f64,
}

/// What the traffic tasks saw, shared with the round.
#[derive(Default)]
struct Seen {
    /// T, once the kill has returned.
    kill_at: StdMutex<Option<Instant>>,
    /// The first write sent at or after T, acknowledged: the time of the ack.
    first_write: StdMutex<Option<Instant>>,
    /// The first acquire started at or after T, granted: the time of the grant.
    first_grant: StdMutex<Option<Instant>>,
    writes_before: AtomicU64,
    grants_before: AtomicU64,
    errors_after: AtomicU64,
    stop: AtomicBool,
}

impl Seen {
    fn kill_at(&self) -> Option<Instant> {
        *self.kill_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts an operation sent at `sent` and done at `done`: before T, or the first
    /// one sent after it.
    fn done(
        &self,
        first: &StdMutex<Option<Instant>>,
        before: &AtomicU64,
        sent: Instant,
        done: Instant,
    ) {
        match self.kill_at() {
            Some(t) if sent >= t => {
                let mut f = first.lock().unwrap_or_else(|e| e.into_inner());
                if f.is_none_or(|x| done < x) {
                    *f = Some(done);
                }
            }
            Some(_) => {}
            None => {
                before.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn failed(&self) {
        if self.kill_at().is_some() {
            self.errors_after.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs one round and prints its figures.
pub async fn run(a: FailoverArgs) -> anyhow::Result<()> {
    let nonce = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
    let target = Target {
        system: a.system,
        addr: a.server.clone(),
        recipe: Recipe::Mutex,
        lock_path: a.lock_path.into(),
        reacquire: false,
        ns: match a.system {
            System::Redis => bail!("failover: zk or etcd (Redis has no ensemble here)"),
            _ => format!("/zlock-bench-failover/r{nonce}"),
        },
        redis_backoff_min: Duration::from_micros(500),
        redis_backoff_max: Duration::from_millis(20),
        redis_wait_replicas: 0,
        tls: None,
        stats: Arc::default(),
    };
    let op_timeout = Duration::from_millis(a.op_timeout_ms.max(1));
    let seen = Arc::new(Seen::default());

    let mut setup = target.connect().await.context("first session")?;
    setup.setup().await.context("preparing the namespace")?;
    let mut tasks = Vec::new();
    for _ in 0..a.clients {
        let mut s = target.connect().await.context("writer session")?;
        let seen = seen.clone();
        tasks.push(tokio::spawn(async move {
            let mut v = 0i64;
            while !seen.stop.load(Ordering::Relaxed) {
                v += 1;
                let sent = Instant::now();
                match tokio::time::timeout(op_timeout, s.set_counter(v)).await {
                    Ok(Ok(())) => {
                        seen.done(&seen.first_write, &seen.writes_before, sent, Instant::now())
                    }
                    _ => {
                        seen.failed();
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            s
        }));
    }
    for i in 0..a.clients {
        let s = target.connect().await.context("locker session")?;
        let seen = seen.clone();
        let t = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut generation = 0u64;
            let mut lock = s.lock(&format!("l{i}-{generation}"));
            while !seen.stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let held = match tokio::time::timeout(op_timeout, lock.acquire(&t)).await {
                    Ok(Ok(h)) => h,
                    _ => {
                        seen.failed();
                        generation += 1;
                        lock = s.lock(&format!("l{i}-{generation}"));
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                };
                seen.done(&seen.first_grant, &seen.grants_before, sent, Instant::now());
                if !matches!(
                    tokio::time::timeout(op_timeout, lock.release(&t, held)).await,
                    Ok(Ok(()))
                ) {
                    seen.failed();
                    generation += 1;
                    lock = s.lock(&format!("l{i}-{generation}"));
                }
            }
            s
        }));
    }

    tokio::time::sleep(Duration::from_secs_f64(a.warmup_secs.max(0.0))).await;
    let (writes, grants) = (
        seen.writes_before.load(Ordering::Relaxed),
        seen.grants_before.load(Ordering::Relaxed),
    );
    if writes == 0 || grants == 0 {
        seen.stop.store(true, Ordering::Relaxed);
        bail!("no traffic before the kill: {writes} writes, {grants} grants");
    }
    let status = std::process::Command::new("kill")
        .args([&format!("-{}", a.signal), &a.kill_pid.to_string()])
        .status()
        .context("running kill")?;
    let t = Instant::now();
    *seen.kill_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
    if !status.success() {
        seen.stop.store(true, Ordering::Relaxed);
        bail!("kill -{} {} failed: {status}", a.signal, a.kill_pid);
    }

    let deadline = t + Duration::from_secs_f64(a.timeout_secs.max(0.1));
    let since = |m: &StdMutex<Option<Instant>>| {
        m.lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|x| x.duration_since(t).as_secs_f64() * 1e3)
    };
    loop {
        if since(&seen.first_write).is_some() && since(&seen.first_grant).is_some() {
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    seen.stop.store(true, Ordering::Relaxed);
    let round = |x: Option<f64>| x.map(|v| (v * 10.0).round() / 10.0);
    let out = json!({
        "system": format!("{:?}", a.system).to_lowercase(),
        "lock_path": format!("{:?}", a.lock_path).to_lowercase(),
        "clients": a.clients,
        "killed_pid": a.kill_pid,
        "write_ms": round(since(&seen.first_write)),
        "grant_ms": round(since(&seen.first_grant)),
        "writes_before": writes,
        "grants_before": grants,
        "errors_after": seen.errors_after.load(Ordering::Relaxed),
        "timeout_secs": a.timeout_secs,
    });
    println!("{out}");

    // The tasks end within one request's deadline; their sessions are closed (with a
    // deadline of their own) so the servers do not keep them for their timeout.
    let mut sessions = vec![setup];
    for task in tasks {
        if let Ok(Ok(s)) = tokio::time::timeout(op_timeout * 2, task).await {
            sessions.push(s);
        }
    }
    crate::lock::close_all(sessions, 16).await;
    Ok(())
}
