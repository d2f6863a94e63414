//! `zlock bench ops`: create / setData / getData / delete throughput and latency against
//! any ZooKeeper-protocol server, with N concurrent sessions (each a closed loop: one
//! request in flight per session, as a typical service thread behaves).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use zlock::{Client, CreateMode, Error, ErrorCode};

use super::tls::TlsArgs;

#[derive(clap::Args, Debug, Clone)]
pub struct OpsArgs {
    /// Server address, host:port, or a connect string naming every member of an
    /// ensemble (session i starts at the i-th)
    #[arg(long, short = 's', default_value = "127.0.0.1:2181")]
    pub server: String,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Concurrent clients (each its own session)
    #[arg(long, short = 'c', default_value_t = 1)]
    pub clients: usize,
    /// Znodes per client for each phase
    #[arg(long, short = 'n', default_value_t = 2000)]
    pub per_client: usize,
    /// Bytes of data per znode
    #[arg(long, default_value_t = 100)]
    pub data_size: usize,
    /// Parent path of the benchmark's nodes (removed first)
    #[arg(long, default_value = "/zlock-bench")]
    pub root: String,
    /// Print one JSON object per phase instead of a table
    #[arg(long)]
    pub json: bool,
    /// Skip the delete phase (leave the nodes; for load tests)
    #[arg(long)]
    pub keep: bool,
    /// Only the create phase
    #[arg(long)]
    pub create_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Create,
    SetData,
    GetData,
    Delete,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Create => "create",
            Phase::SetData => "setData",
            Phase::GetData => "getData",
            Phase::Delete => "delete",
        }
    }
}

/// Results of one phase.
pub struct PhaseResult {
    pub name: &'static str,
    pub ops: u64,
    pub secs: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl PhaseResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
}

/// `n` sessions, session `i` starting at the `i`-th host of `server`.
async fn sessions(server: &str, n: usize, tls: &TlsArgs) -> anyhow::Result<Vec<Client>> {
    let tls = tls.options()?;
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let (c, _ev) = Client::builder(&zlock::connect::rotate_hosts(server, i))
            .session_timeout_ms(30_000)
            .tls(tls.clone())
            .connect()
            .await
            .with_context(|| format!("connecting to {server}"))?;
        clients.push(c);
    }
    Ok(clients)
}

pub async fn run(a: OpsArgs) -> anyhow::Result<Vec<PhaseResult>> {
    let clients = sessions(&a.server, a.clients, &a.tls).await?;
    let setup = clients[0].clone();
    remove_tree(&setup, &a.root).await?;
    setup.ensure_path(&a.root).await?;
    for i in 0..a.clients {
        setup
            .create(&format!("{}/c{i}", a.root), b"", CreateMode::Persistent)
            .await?;
    }
    let data = Arc::new(vec![b'x'; a.data_size]);
    let mut phases = vec![Phase::Create];
    if !a.create_only {
        phases.extend([Phase::SetData, Phase::GetData]);
        if !a.keep {
            phases.push(Phase::Delete);
        }
    }
    let mut results = Vec::new();
    for phase in phases {
        let total = (a.clients * a.per_client) as u64;
        let bar = if a.json {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(total)
        };
        bar.set_style(
            ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} {per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(phase.name());
        let started = Instant::now();
        let mut tasks = Vec::new();
        for (i, c) in clients.iter().enumerate() {
            let c = c.clone();
            let data = data.clone();
            let root = a.root.clone();
            let n = a.per_client;
            let bar = bar.clone();
            tasks.push(tokio::spawn(async move {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                for k in 0..n {
                    let p = format!("{root}/c{i}/n{k}");
                    let t = Instant::now();
                    match phase {
                        Phase::Create => {
                            c.create_path_only(&p, &data, CreateMode::Persistent)
                                .await?;
                        }
                        Phase::SetData => {
                            c.set_data(&p, &data, -1).await?;
                        }
                        Phase::GetData => {
                            c.get_data(&p, false).await?;
                        }
                        Phase::Delete => c.delete(&p, -1).await?,
                    }
                    let _ = h.record(t.elapsed().as_micros().max(1) as u64);
                    if k % 64 == 63 {
                        bar.inc(64);
                    }
                }
                anyhow::Ok(h)
            }));
        }
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for t in tasks {
            let h = t.await??;
            hist.add(&h).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let secs = started.elapsed().as_secs_f64();
        bar.finish_and_clear();
        let r = PhaseResult {
            name: phase.name(),
            ops: total,
            secs,
            p50_us: hist.value_at_quantile(0.50),
            p99_us: hist.value_at_quantile(0.99),
            max_us: hist.max(),
        };
        if a.json {
            println!(
                "{}",
                serde_json::json!({
                    "phase": r.name, "clients": a.clients, "ops": r.ops, "secs": r.secs,
                    "ops_per_sec": r.ops_per_sec(), "p50_us": r.p50_us, "p99_us": r.p99_us,
                    "max_us": r.max_us,
                })
            );
        } else {
            println!(
                "{:>8}  clients={:<3} {:>10.0} ops/s   p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>8.3} ms",
                r.name,
                a.clients,
                r.ops_per_sec(),
                r.p50_us as f64 / 1000.0,
                r.p99_us as f64 / 1000.0,
                r.max_us as f64 / 1000.0
            );
        }
        results.push(r);
    }
    if !a.keep {
        remove_tree(&setup, &a.root).await?;
    }
    for c in clients {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
    }
    Ok(results)
}

/// Deletes `path` and everything under it (depth first).
async fn remove_tree(c: &Client, path: &str) -> anyhow::Result<()> {
    let children = match c.get_children(path, false).await {
        Ok(ch) => ch,
        Err(Error::Server(ErrorCode::NoNode)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for ch in children {
        Box::pin(remove_tree(c, &format!("{path}/{ch}"))).await?;
    }
    match c.delete(path, -1).await {
        Ok(()) | Err(Error::Server(ErrorCode::NoNode)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `zlock bench load`: bulk-creates `count` persistent znodes as fast as the server takes
/// them: `clients` sessions, each keeping `pipeline` creates in flight. Nodes go under
/// `<root>/b<j>/n<k>` with at most `bucket` children per parent, so no children list
/// grows past what a client can read (jute.maxbuffer).
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// Server address, host:port
    #[arg(long, short = 's', default_value = "127.0.0.1:2181")]
    pub server: String,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Concurrent sessions
    #[arg(long, short = 'c', default_value_t = 16)]
    pub clients: usize,
    /// Znodes to create in all (the bucket parents come on top)
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    pub count: usize,
    /// Creates each session keeps in flight
    #[arg(long, short = 'p', default_value_t = 64)]
    pub pipeline: usize,
    /// Bytes of data per znode
    #[arg(long, default_value_t = 100)]
    pub data_size: usize,
    /// Children per bucket parent
    #[arg(long, default_value_t = 10_000)]
    pub bucket: usize,
    /// Parent path of the nodes; must not exist yet
    #[arg(long, default_value = "/zlock-load")]
    pub root: String,
    /// Print one JSON object instead of a line of text
    #[arg(long)]
    pub json: bool,
}

pub async fn load(a: LoadArgs) -> anyhow::Result<()> {
    let clients_n = a.clients.max(1);
    let depth = a.pipeline.max(1);
    let bucket = a.bucket.max(1);
    let clients = sessions(&a.server, clients_n, &a.tls).await?;
    let setup = clients[0].clone();
    if setup.exists(&a.root, false).await?.is_some() {
        anyhow::bail!("{} already exists; load into an empty path", a.root);
    }
    setup.ensure_path(&a.root).await?;
    let buckets = a.count.div_ceil(bucket);
    let started = Instant::now();
    // The bucket parents, pipelined on one session (replies come in order).
    let mut q = std::collections::VecDeque::new();
    for j in 0..buckets {
        q.push_back(setup.send(&create_req(format!("{}/b{j}", a.root), Vec::new())));
        if q.len() >= depth {
            if let Some(f) = q.pop_front() {
                check_reply(f.await?)?;
            }
        }
    }
    while let Some(f) = q.pop_front() {
        check_reply(f.await?)?;
    }
    let bar = if a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(a.count as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("  load [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let data = Arc::new(vec![b'x'; a.data_size]);
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let (lo, hi) = (a.count * i / clients_n, a.count * (i + 1) / clients_n);
        let (c, data, root, bar) = (c.clone(), data.clone(), a.root.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut q = std::collections::VecDeque::with_capacity(depth);
            let mut unreported = 0u64;
            for g in lo..hi {
                let p = format!("{root}/b{}/n{}", g / bucket, g % bucket);
                q.push_back((Instant::now(), c.send(&create_req(p, data.to_vec()))));
                if q.len() >= depth {
                    if let Some((t, f)) = q.pop_front() {
                        check_reply(f.await?)?;
                        let _ = h.record(t.elapsed().as_micros().max(1) as u64);
                        unreported += 1;
                        if unreported == 256 {
                            bar.inc(256);
                            unreported = 0;
                        }
                    }
                }
            }
            while let Some((t, f)) = q.pop_front() {
                check_reply(f.await?)?;
                let _ = h.record(t.elapsed().as_micros().max(1) as u64);
            }
            anyhow::Ok(h)
        }));
    }
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| anyhow::anyhow!("{e}"))?;
    for t in tasks {
        let h = t.await??;
        hist.add(&h).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let rate = a.count as f64 / secs.max(1e-9);
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "phase": "load", "count": a.count, "buckets": buckets, "clients": clients_n,
                "pipeline": depth, "data_size": a.data_size, "secs": secs, "ops_per_sec": rate,
                "p50_us": hist.value_at_quantile(0.50), "p99_us": hist.value_at_quantile(0.99),
                "max_us": hist.max(),
                "known_path": format!("{}/b0/n0", a.root),
            })
        );
    } else {
        println!(
            "    load  {} znodes (+{buckets} parents) in {secs:.2} s = {rate:.0} creates/s \
             ({clients_n} clients x {depth} in flight; per request p50 {:.3} ms p99 {:.3} ms)",
            a.count,
            hist.value_at_quantile(0.50) as f64 / 1000.0,
            hist.value_at_quantile(0.99) as f64 / 1000.0,
        );
    }
    for c in clients {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
    }
    Ok(())
}

fn create_req(path: String, data: Vec<u8>) -> zlock_proto::Request {
    zlock_proto::Request::Create(
        zlock_proto::OpCode::Create,
        zlock_proto::records::CreateRequest {
            path,
            data: Some(data),
            acl: zlock::Acl::open_unsafe(),
            flags: CreateMode::Persistent.flags(),
        },
    )
}

fn check_reply(r: (zlock_proto::records::ReplyHeader, Vec<u8>)) -> anyhow::Result<()> {
    if r.0.err != 0 {
        let e = match ErrorCode::from_i32(r.0.err) {
            Some(c) => Error::Server(c),
            None => Error::Protocol(format!("unknown error code {}", r.0.err)),
        };
        return Err(anyhow::anyhow!("create failed: {e}"));
    }
    Ok(())
}

/// `zlock bench ready`: waits until a session can be opened and `path` read, then prints
/// the seconds it took (for restart times: start it right after the server process).
///
/// A new attempt starts every `interval_ms` without abandoning the earlier ones: a
/// server that is still recovering may hold a connection unanswered (zlock queues it
/// until recovery ends) or accept it and never answer (ZooKeeper 3.8 while its database
/// loads), so the first attempt to succeed wins and no attempt's timeout skews the time.
#[derive(clap::Args, Debug, Clone)]
pub struct ReadyArgs {
    /// Server address, host:port
    #[arg(long, short = 's', default_value = "127.0.0.1:2181")]
    pub server: String,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// A node that must be readable
    #[arg(long, default_value = "/")]
    pub path: String,
    /// Give up after this many seconds (exit status 1)
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Start a new attempt this often, ms
    #[arg(long, default_value_t = 20)]
    pub interval_ms: u64,
    /// Most attempts open at once
    #[arg(long, default_value_t = 64)]
    pub max_open: usize,
}

pub async fn ready(a: ReadyArgs) -> anyhow::Result<()> {
    let tls = a.tls.options()?;
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(a.timeout_secs);
    let mut attempts = 0u64;
    let mut last_err = String::from("no attempt finished");
    let mut open = tokio::task::JoinSet::new();
    let mut next = tokio::time::Instant::now();
    loop {
        if open.len() < a.max_open.max(1) && tokio::time::Instant::now() >= next {
            attempts += 1;
            next = tokio::time::Instant::now() + Duration::from_millis(a.interval_ms.max(1));
            let (server, path) = (a.server.clone(), a.path.clone());
            let tls = tls.clone();
            open.spawn(async move {
                let (c, _ev) = Client::builder(&server)
                    .session_timeout_ms(30_000)
                    .tls(tls)
                    .connect()
                    .await
                    .map_err(|e| e.to_string())?;
                let r = c.get_data(&path, false).await;
                let _ = tokio::time::timeout(Duration::from_secs(2), c.close()).await;
                r.map(|_| ()).map_err(|e| format!("reading {path}: {e}"))
            });
        }
        tokio::select! {
            Some(r) = open.join_next(), if !open.is_empty() => match r {
                Ok(Ok(())) => {
                    println!(
                        "{}",
                        serde_json::json!({
                            "ready_secs": started.elapsed().as_secs_f64(),
                            "attempts": attempts, "path": a.path,
                        })
                    );
                    open.abort_all();
                    return Ok(());
                }
                Ok(Err(e)) => last_err = e,
                Err(e) => last_err = e.to_string(),
            },
            _ = tokio::time::sleep_until(next), if open.len() < a.max_open.max(1) => {}
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    open.abort_all();
    anyhow::bail!(
        "{} not readable at {} after {} s ({attempts} attempts; last error: {last_err})",
        a.path,
        a.server,
        a.timeout_secs
    )
}
