//! `zlock demo orders`: the classic order-number example. N clients, each with its own
//! session, take an order number from a shared counter znode (read, increment, write
//! back with version -1) under a lock, and the numbers are checked for duplicates.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use zlock::recipes::{Mutex, NaiveLock};
use zlock::{Client, CreateMode, Error, ErrorCode};
use zlock_server::ServerConfig;

use super::lock::{connect, server_addr};
use super::tls::TlsArgs;

const ROOT: &str = "/zlock-demo";
const COUNTER: &str = "/zlock-demo/order-counter";
const LOCK: &str = "/zlock-demo/order-lock";
const SESSION_TIMEOUT_MS: i32 = 30_000;

#[derive(clap::Subcommand, Debug)]
pub enum DemoCmd {
    /// N clients take order numbers from a shared counter under a lock; checks them
    #[command(
        after_help = concat!("Examples:\n  zlock demo orders                  # 101 clients, fair lock (Mutex)\n  \
         zlock demo orders --naive          # the naive lock; also counts watch notifications\n  \
         zlock demo orders --no-lock        # no lock: lost updates show as duplicates\n  \
         zlock demo orders --recipe         # the Mutex via the standard recipe, not the native path\n  \
         zlock demo orders --server 127.0.0.1:2181 --clients 500\n\n\
         Each client reads /zlock-demo/order-counter, waits 1 ms (to widen the race\n\
         window, so --no-lock shows duplicates), and writes the number + 1 back with\n\
         version -1. All clients start at once (a barrier). Without --server an embedded\n\
         zlock server runs on 127.0.0.1 (ephemeral port, temporary data directory).\n\
         Exit code 1 if duplicates appear with a lock; --no-lock exits 0 either way.\n\n",
         super::tls::tls_help!())
    )]
    Orders(OrdersArgs),
}

#[derive(clap::Args, Debug)]
pub struct OrdersArgs {
    /// How many concurrent clients (one session each)
    #[arg(long, default_value_t = 101, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub clients: u32,
    /// Use this server instead of an embedded one (host:port)
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// No lock at all: shows the lost updates
    #[arg(long, conflicts_with = "naive")]
    pub no_lock: bool,
    /// The naive single-node lock (NaiveLock) instead of the fair Mutex
    #[arg(long)]
    pub naive: bool,
    /// The fair Mutex through the standard ZooKeeper recipe (create, getChildren,
    /// watch) even when the server offers zlock's one-round-trip native lock
    #[arg(long, conflicts_with_all = ["naive", "no_lock"])]
    pub recipe: bool,
    /// TLS to --server (the embedded server is plain)
    #[command(flatten)]
    pub tls: TlsArgs,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Fair,
    Naive,
    NoLock,
}

/// Runs a demo; returns the exit code.
pub fn run(cmd: DemoCmd) -> i32 {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zlock demo: starting the async runtime: {e}");
            return 1;
        }
    };
    match cmd {
        DemoCmd::Orders(a) => rt.block_on(async move {
            match orders(a).await {
                Ok(code) => code,
                Err(msg) => {
                    eprintln!("zlock demo orders: {msg}");
                    1
                }
            }
        }),
    }
}

/// A temporary data directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!("zlock-demo-{}-{nanos:09}", std::process::id()));
        std::fs::create_dir(&p)?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An embedded server; stopped (and its directory removed) by `stop`.
struct Embedded {
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), zlock_server::ServerError>>,
    dir: TempDir,
}

impl Embedded {
    async fn start() -> Result<Embedded, String> {
        let dir = TempDir::new().map_err(|e| format!("creating a temporary directory: {e}"))?;
        let listener = zlock_server::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), 1024)
            .map_err(|e| format!("starting the embedded server: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("starting the embedded server: {e}"))?;
        let config = ServerConfig {
            data_dir: dir.0.clone(),
            client_port: addr.port(),
            client_port_address: addr.ip(),
            max_client_cnxns: 0,
            ..ServerConfig::default()
        };
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(zlock_server::serve(config, listener, async {
            let _ = rx.await;
        }));
        Ok(Embedded {
            addr,
            stop,
            task,
            dir,
        })
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        drop(self.dir);
    }
}

async fn orders(a: OrdersArgs) -> Result<i32, String> {
    let embedded = match &a.server {
        Some(_) => None,
        None if a.tls.ca.is_some() || a.tls.client_configuration.is_some() => {
            return Err("the TLS flags need --server (the embedded server is plain)".into())
        }
        None => Some(Embedded::start().await?),
    };
    let addr = match &embedded {
        Some(e) => e.addr.to_string(),
        None => server_addr(a.server.as_deref()),
    };
    let r = orders_on(&a, &addr, embedded.as_ref().map(|e| e.dir.0.clone())).await;
    if let Some(e) = embedded {
        e.stop().await;
    }
    r
}

async fn orders_on(a: &OrdersArgs, addr: &str, dir: Option<PathBuf>) -> Result<i32, String> {
    let mode = if a.no_lock {
        Mode::NoLock
    } else if a.naive {
        Mode::Naive
    } else {
        Mode::Fair
    };
    let n = a.clients as usize;
    let how = match mode {
        Mode::Fair => format!("fair lock (Mutex) at {LOCK}"),
        Mode::Naive => format!("naive lock (NaiveLock) at {LOCK}"),
        Mode::NoLock => "NO lock".to_owned(),
    };
    match &dir {
        Some(d) => println!(
            "embedded zlock server on {addr} (data in {}, removed at exit)",
            d.display()
        ),
        None => println!("zlock server {addr}"),
    }
    println!("{n} clients, {how}, counter {COUNTER}");

    // One session per client, opened concurrently.
    let mut opening = tokio::task::JoinSet::new();
    for i in 1..=n {
        let addr = addr.to_owned();
        let tls = a.tls.clone();
        opening.spawn(async move { (i, connect(&addr, SESSION_TIMEOUT_MS, &tls).await) });
    }
    let mut clients = Vec::with_capacity(n);
    let mut failed = None;
    while let Some(r) = opening.join_next().await {
        match r {
            Ok((i, Ok((c, ev)))) => {
                let path = if a.recipe {
                    zlock::LockPath::Recipe
                } else {
                    zlock::LockPath::Auto
                };
                clients.push((i, c.with_lock_path(path), ev))
            }
            Ok((_, Err(msg))) => failed = Some(msg),
            Err(e) => failed = Some(format!("connect task: {e}")),
        }
    }
    if let Some(msg) = failed {
        for (_, c, _) in &clients {
            let _ = c.close().await;
        }
        return Err(msg);
    }
    clients.sort_by_key(|(i, _, _)| *i);
    if mode == Mode::Fair {
        if clients
            .first()
            .is_some_and(|(_, c, _)| c.uses_native_locks())
        {
            println!("lock path: native (one round trip; the server pushes each grant)");
        } else {
            println!("lock path: standard recipe (create, getChildren, watch the predecessor)");
        }
    }

    let result = run_clients(&clients, mode).await;
    let mut notifications = 0usize;
    for (_, c, ev) in &mut clients {
        while ev.try_recv().is_ok() {
            notifications += 1;
        }
        let _ = c.close().await;
    }
    let numbers = result?;
    report(&numbers, n, mode, notifications)
}

/// Resets the counter, releases all clients at once, returns (client, order number).
async fn run_clients(
    clients: &[(
        usize,
        Client,
        tokio::sync::mpsc::UnboundedReceiver<zlock::WatcherEvent>,
    )],
    mode: Mode,
) -> Result<Vec<(usize, u64)>, String> {
    let Some((_, first, _)) = clients.first() else {
        return Ok(Vec::new());
    };
    reset_counter(first)
        .await
        .map_err(|e| format!("resetting {COUNTER}: {e}"))?;
    let barrier = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, c, _) in clients {
        let (i, c, barrier) = (*i, c.clone(), Arc::clone(&barrier));
        tasks.spawn(async move {
            barrier.wait().await;
            (i, take_order(&c, mode).await)
        });
    }
    let mut out = Vec::with_capacity(clients.len());
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok((i, Ok(num))) => out.push((i, num)),
            Ok((i, Err(e))) => return Err(format!("client {i}: {e}")),
            Err(e) => return Err(format!("client task: {e}")),
        }
    }
    out.sort_unstable();
    Ok(out)
}

async fn reset_counter(c: &Client) -> zlock::Result<()> {
    c.ensure_path(ROOT).await?;
    match c.create(COUNTER, b"0", CreateMode::Persistent).await {
        Ok(_) => Ok(()),
        Err(Error::Server(ErrorCode::NodeExists)) => {
            c.set_data(COUNTER, b"0", -1).await.map(|_| ())
        }
        Err(e) => Err(e),
    }
}

/// The critical section: read the counter, wait a little, write it back + 1.
async fn next_number(c: &Client) -> zlock::Result<u64> {
    let (data, _) = c.get_data(COUNTER, false).await?;
    let current: u64 = std::str::from_utf8(&data)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| Error::Protocol(format!("{COUNTER} does not hold a number")))?;
    let next = current + 1;
    // Widens the read-modify-write race so that --no-lock shows lost updates.
    tokio::time::sleep(Duration::from_millis(1)).await;
    c.set_data(COUNTER, next.to_string().as_bytes(), -1).await?;
    Ok(next)
}

async fn take_order(c: &Client, mode: Mode) -> zlock::Result<u64> {
    match mode {
        Mode::NoLock => next_number(c).await,
        Mode::Fair => {
            let guard = Mutex::new(c.clone(), LOCK).acquire().await?;
            let r = next_number(c).await;
            guard.release().await?;
            r
        }
        Mode::Naive => {
            let guard = NaiveLock::new(c.clone(), LOCK).acquire().await?;
            let r = next_number(c).await;
            guard.release().await?;
            r
        }
    }
}

fn report(
    numbers: &[(usize, u64)],
    n: usize,
    mode: Mode,
    notifications: usize,
) -> Result<i32, String> {
    let line = numbers
        .iter()
        .map(|(i, o)| format!("client {i} -> order {o}"))
        .collect::<Vec<_>>()
        .join("\n");
    println!("{line}");
    let mut by_number: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, o) in numbers {
        by_number.entry(*o).or_default().push(*i);
    }
    let dups: Vec<String> = by_number
        .iter()
        .filter(|(_, who)| who.len() > 1)
        .map(|(o, who)| {
            let who: Vec<String> = who.iter().map(|i| i.to_string()).collect();
            format!("order {o} x{} (clients {})", who.len(), who.join(", "))
        })
        .collect();
    if mode != Mode::NoLock {
        let per_client = notifications as f64 / n.max(1) as f64;
        println!("watch notifications delivered: {notifications} ({per_client:.1} per client)");
    }
    let consecutive =
        numbers.len() == n && by_number.len() == n && by_number.keys().copied().eq(1..=(n as u64));
    if dups.is_empty() && consecutive {
        println!("OK: {n} unique consecutive order numbers");
        if mode == Mode::NoLock {
            println!("(no lost update this run without a lock: try again or with more --clients)");
        }
        return Ok(0);
    }
    if !dups.is_empty() {
        println!(
            "DUPLICATES: {} distinct numbers for {n} clients: {}",
            by_number.len(),
            dups.join("; ")
        );
    } else {
        let keys: Vec<String> = by_number.keys().map(|k| k.to_string()).collect();
        println!("NOT CONSECUTIVE: {}", keys.join(", "));
    }
    Ok(if mode == Mode::NoLock { 0 } else { 1 })
}
