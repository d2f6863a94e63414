//! `zlock bench ops`: create / setData / getData / delete throughput and latency against
//! any ZooKeeper-protocol server, with N concurrent sessions (each a closed loop: one
//! request in flight per session, as a typical service thread behaves).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use zlock::{Client, CreateMode, Error, ErrorCode};

#[derive(clap::Args, Debug, Clone)]
pub struct OpsArgs {
    /// Server address, host:port
    #[arg(long, short = 's', default_value = "127.0.0.1:2181")]
    pub server: String,
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

pub async fn run(a: OpsArgs) -> anyhow::Result<Vec<PhaseResult>> {
    let mut clients = Vec::with_capacity(a.clients);
    for _ in 0..a.clients {
        let (c, _ev) = Client::connect(&a.server, 30_000)
            .await
            .with_context(|| format!("connecting to {}", a.server))?;
        clients.push(c);
    }
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
