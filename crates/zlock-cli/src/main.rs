//! `zlock`: the zlock server and tools.

use std::path::PathBuf;

mod cmd;

use anyhow::Context;
use clap::{Parser, Subcommand};
use zlock_server::config::{MemberSpec, MemberSyntax, Origin};
use zlock_server::ServerConfig;

#[derive(Parser)]
#[command(
    name = "zlock",
    version,
    about = "zlock: a ZooKeeper-compatible coordination service and distributed-lock toolkit",
    long_about = "zlock speaks the ZooKeeper wire protocol: Curator, kazoo, zkCli and other \
                  ZooKeeper clients work against it unchanged.\n\n\
                  Start a single-node server on 127.0.0.1:2181 with data in ./zlock-data:\n  \
                  zlock server"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a server: a single node (defaults: 127.0.0.1:2181, data in ./zlock-data), or
    /// a member of an ensemble (--server, --myid).
    #[command(after_help = SERVER_HELP)]
    Server(ServerArgs),
    /// Start a local ensemble to try, each member its own process:
    /// `zlock ensemble --members 3`
    #[command(after_help = ENSEMBLE_HELP)]
    Ensemble(cmd::ensemble::EnsembleArgs),
    /// Create a zlock data directory from Apache ZooKeeper's (3.5-3.9) data files:
    /// `zlock import --from-zookeeper /var/lib/zookeeper --data-dir /var/lib/zlock`
    #[command(after_help = cmd::import::AFTER_HELP)]
    Import(cmd::import::ImportArgs),
    /// Measure a server: `zlock bench ops --server 127.0.0.1:2181 --clients 32`
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Run a command while holding a lock (exclusive, --shared or --semaphore N):
    /// `zlock lock /locks/job -- ./job.sh`
    #[command(after_help = cmd::lock::AFTER_HELP)]
    Lock(cmd::lock::LockArgs),
    /// Backups: `zlock snapshot save --server HOST:ADMINPORT --auth digest:USER:PW FILE`,
    /// `zlock snapshot status FILE`
    #[command(subcommand)]
    Snapshot(cmd::snapshot::SnapshotCmd),
    /// Inspect a data directory offline, read-only: `zlock data dump-snapshot DIR`,
    /// `zlock data dump-log DIR` (zkSnapShotToolkit and zkTxnLogToolkit for zlock's files)
    #[command(subcommand)]
    Data(cmd::data::DataCmd),
    /// Demonstrations: `zlock demo orders --clients 101 [--no-lock | --naive]`
    #[command(subcommand)]
    Demo(cmd::demo::DemoCmd),
    // zkCli-style commands: ls, get, set, create, delete, deleteall, stat, config
    // (cmd/zk.rs).
    #[command(flatten)]
    Zk(cmd::zk::ZkCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// create / setData / getData / delete throughput and p50/p99 latency
    #[command(after_help = cmd::tls::tls_help!())]
    Ops(cmd::bench::OpsArgs),
    /// Bulk-create many znodes with pipelined sessions (memory and restart tests)
    #[command(after_help = cmd::tls::tls_help!())]
    Load(cmd::bench::LoadArgs),
    /// Wait until a session can read a node; prints the seconds it took
    #[command(after_help = cmd::tls::tls_help!())]
    Ready(cmd::bench::ReadyArgs),
    // The lock benchmark against ZooKeeper, Redis and etcd (and the failover benchmark)
    // is the separate `zlock-bench` binary (crates/zlock-bench), so that the zlock users
    // install carries no Redis or etcd client.
}

const ENSEMBLE_HELP: &str = "\
Examples:
  zlock ensemble
  zlock ensemble --members 5 --data-dir /tmp/zl --client-port 12181

Members serve clients on 2181, 2182, 2183 and talk to each other on 2888, 2889, 2890 (the
ports of a ZooKeeper ensemble's sample configuration). Each runs
`zlock server --myid N --server ...`; the command that starts it is printed when it exits,
so a member killed with kill -9 can be started again by hand. Ctrl-C stops them all.";

const SERVER_HELP: &str = "\
Examples:
  zlock server
  zlock server --port 2182 --data-dir /var/lib/zlock
  zlock server --config /etc/zookeeper/zoo.cfg

A three-member ensemble on one machine, each member in its own terminal. Every member gets
the same --server list (this one included); --myid says which line is its own, and the
client port of that line (;2181) is the one it serves clients on:
  zlock server --myid 1 --data-dir /tmp/zl1 \\
    --server '1=127.0.0.1:2888:3888;2181' \\
    --server '2=127.0.0.1:2889:3889;2182' \\
    --server '3=127.0.0.1:2890:3890;2183'
  zlock server --myid 2 --data-dir /tmp/zl2 --server ... (the same three)
  zlock server --myid 3 --data-dir /tmp/zl3 --server ... (the same three)
Members reach each other on their quorum port (2888, 2889, 2890); the election port is
read for ZooKeeper compatibility. Followers elect a new leader 350-400 ms after they
last heard from a silent one, 150-200 ms after one whose process died (tickTime / 40 is
the heartbeat; see zlock.raftHeartbeatMs and zlock.electionTimeoutMs). Use 3 or 5 members: 2 tolerate no
failure. An observer (a line ending :observer before the client port, e.g.
--server '4=127.0.0.1:2891:3891:observer;2184', on every member) serves clients, reads
and watches, forwards writes to the leader and never votes: read capacity that does not
slow commits, and that counts for no quorum (3 voters and 2 observers still need 2 of
the 3 voters up).

Members can be added, removed and replaced while the ensemble serves, with reconfig
(ZooKeeper's): every member started with --reconfig-enabled and a super user
(--super-digest \"$(zlock digest super:PASSWORD)\"); start the new member with the
members' --server lines and its own, then
  zlock reconfig --auth digest:super:PASSWORD --add 'server.4=127.0.0.1:2891:3891;2184'
(see zlock reconfig --help). After a change, a member started with --config writes the
members back beside its file (zoo.cfg.dynamic.<version>, zoo.cfg pointing at it).

A ZooKeeper ensemble's files work too, read as ZooKeeper reads them: lines like
server.1=127.0.0.1:2888:3888;2181 in zoo.cfg (or in its dynamicConfigFile), and each
member's id in <dataDir>/myid (echo 1 > /tmp/zl1/myid):
  zlock server --config zoo.cfg

Flags override the config file; --server flags replace its server.N lines, and --myid
its myid file. Check a running server with:
  echo ruok | nc 127.0.0.1 2181";

#[derive(clap::Args)]
struct ServerArgs {
    /// A zoo.cfg-style file (tickTime, dataDir, dataLogDir, clientPort, clientPortAddress,
    /// maxClientCnxns, minSessionTimeout, maxSessionTimeout, 4lw.commands.whitelist,
    /// jute.maxbuffer, snapCount, preAllocSize, extendedTypesEnabled,
    /// znode.container.checkIntervalMs, clientPortListenBacklog, globalOutstandingLimit,
    /// zlock.commitSpinMicros, zlock.lockDelayMs, metricsProvider.className,
    /// metricsProvider.httpHost, metricsProvider.httpPort, admin.enableServer,
    /// admin.serverAddress, admin.serverPort, admin.commandURL,
    /// DigestAuthenticationProvider.superDigest; TLS clients: secureClientPort,
    /// secureClientPortAddress, client.portUnification, ssl.keyStore.*, ssl.trustStore.*, ssl.clientAuth,
    /// ssl.protocol, ssl.enabledProtocols, ssl.ciphersuites,
    /// ssl.handshakeDetectionTimeoutMillis, X509AuthenticationProvider.superUser; for an
    /// ensemble server.N, dynamicConfigFile, peerType, reconfigEnabled, initLimit,
    /// syncLimit, zlock.raftHeartbeatMs, zlock.electionTimeoutMs, and the member's id in
    /// <dataDir>/myid). A TLS key zlock does not implement stops the start; other keys
    /// are logged and ignored.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// This server's id in the ensemble, 1-255, instead of the one in <data-dir>/myid
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=255))]
    myid: Option<u64>,
    /// An ensemble member, as zoo.cfg's server.N line without "server.":
    /// N=host:quorumPort:electionPort[;[clientHost:]clientPort] (an IPv6 host in
    /// brackets). Repeat for every member, this one included
    #[arg(long = "server", value_name = "N=HOST:PORT:PORT[;PORT]", value_parser = server_flag)]
    servers: Vec<(String, MemberSpec)>,
    /// Client port (clientPort) [default: 2181]
    #[arg(long, short = 'p')]
    port: Option<u16>,
    /// Address to listen on (clientPortAddress) [default: 127.0.0.1]
    #[arg(long)]
    bind: Option<std::net::IpAddr>,
    /// Data directory for snapshots and, unless --log-dir is given, the log (dataDir)
    /// [default: ./zlock-data]
    #[arg(long, short = 'd', value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Directory for the write-ahead log (dataLogDir) [default: the data directory]
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// Base time unit in ms (tickTime); session timeouts default to 2x..20x of it
    #[arg(long, value_name = "MS")]
    tick_time: Option<u64>,
    /// Allow TTL nodes (extendedTypesEnabled=true)
    #[arg(long)]
    extended_types: bool,
    /// Four-letter words to allow, comma-separated, or '*' (4lw.commands.whitelist)
    #[arg(long, value_name = "WORDS")]
    four_letter_words: Option<String>,
    /// Max connections per client IP, 0 = unlimited (maxClientCnxns)
    #[arg(long, value_name = "N")]
    max_client_cnxns: Option<u32>,
    /// How often to remove empty containers and expired TTL nodes, ms
    /// (znode.container.checkIntervalMs)
    #[arg(long, value_name = "MS")]
    container_check_interval: Option<u64>,
    /// Lock-delay for native lock requests that do not ask for one, ms
    /// (zlock.lockDelayMs) [default: 0, none]: when a holder's session expires or
    /// closes without releasing, its lock is granted to the next waiter only this long
    /// after, so a holder that was merely paused has time to notice. At most 60000
    #[arg(long, value_name = "MS", value_parser = parse_lock_delay)]
    lock_delay: Option<i32>,
    /// Threads for client connections [default: CPUs minus 1, at least 1: the commit
    /// thread (fsync, then apply) wants a CPU of its own]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    io_threads: Option<u16>,
    /// After a batch, how long the commit thread polls for the next write before it
    /// sleeps, µs (zlock.commitSpinMicros) [default: 100 with 2+ CPUs, else 0]. Saves a
    /// thread wake-up (15-20 µs on a small VM) per write on a lightly loaded server at
    /// the cost of otherwise idle CPU time; 0 never polls
    #[arg(long, value_name = "US")]
    commit_spin_us: Option<u64>,
    /// Serve Prometheus metrics at http://HOST:N/metrics (metricsProvider.className=
    /// prometheus, metricsProvider.httpPort=N) [default: off; ZooKeeper's port is 7000]
    #[arg(long, value_name = "N")]
    metrics_port: Option<u16>,
    /// Address for the metrics endpoint (metricsProvider.httpHost) [default: 127.0.0.1;
    /// 0.0.0.0 for every interface, ZooKeeper's default]
    #[arg(long, value_name = "ADDR")]
    metrics_host: Option<std::net::IpAddr>,
    /// Serve ZooKeeper's AdminServer commands as JSON at http://HOST:N/commands
    /// (admin.enableServer=true, admin.serverPort=N) [default: off; ZooKeeper's is on,
    /// at port 8080]
    #[arg(long, value_name = "N")]
    admin_port: Option<u16>,
    /// Address for the admin server (admin.serverAddress) [default: 127.0.0.1; 0.0.0.0
    /// for every interface, ZooKeeper's default]
    #[arg(long, value_name = "ADDR")]
    admin_host: Option<std::net::IpAddr>,
    /// Let a super user change the ensemble's members online with reconfig
    /// (reconfigEnabled=true; `zlock reconfig`, zkCli's reconfig) [default: off, as
    /// ZooKeeper]. Give it to every member
    #[arg(long)]
    reconfig_enabled: bool,
    /// The super user, as user:base64(sha1(user:password))
    /// (DigestAuthenticationProvider.superDigest, ZooKeeper's
    /// -Dzookeeper.DigestAuthenticationProvider.superDigest): a session that adds that
    /// digest auth passes every ACL and may reconfig. `zlock digest USER:PASSWORD`
    /// prints one
    #[arg(long, value_name = "USER:DIGEST")]
    super_digest: Option<String>,
}

fn parse_lock_delay(s: &str) -> Result<i32, String> {
    let ms: u64 = s
        .parse()
        .map_err(|_| format!("not a number of ms: {s:?}"))?;
    zlock_server::config::lock_delay(ms).map_err(|e| e.to_string())
}

/// A `--server` flag's member, and the flag as given (for messages).
fn server_flag(s: &str) -> Result<(String, MemberSpec), MemberSyntax> {
    Ok((format!("--server '{s}'"), s.parse()?))
}

/// The default number of connection threads: what the CPUs leave after the commit
/// thread. On 2 CPUs that is 1; measured there (`zlock-bench lock`, A, when a separate
/// apply thread still took a CPU too), one connection thread cut the acquire p50 from
/// 0.21-0.26 ms to 0.18 ms, with 32-client write throughput within 5%.
fn default_io_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    cpus.saturating_sub(1).max(1)
}

impl ServerArgs {
    /// The file, then the flags over it. The ensemble is resolved once the flags it
    /// depends on (`--data-dir` for myid, `--tick-time`, `--myid`, `--server`) are in, and
    /// before `--port` and `--bind`, which override this member's line.
    fn into_config(self) -> anyhow::Result<ServerConfig> {
        let mut c = match &self.config {
            Some(p) => ServerConfig::from_file(p)?,
            None => ServerConfig::default(),
        };
        if let Some(v) = self.data_dir {
            c.data_dir = v;
        }
        if let Some(v) = self.log_dir {
            c.data_log_dir = Some(v);
        }
        if let Some(v) = self.tick_time {
            c.tick_time_ms = v.max(1);
        }
        if self.extended_types {
            c.extended_types = true;
        }
        if self.reconfig_enabled {
            c.reconfig_enabled = true;
        }
        if let Some(v) = self.super_digest {
            if !v.contains(':') {
                anyhow::bail!(
                    "--super-digest: expected USER:DIGEST (zlock digest USER:PASSWORD prints it)"
                );
            }
            c.super_digest = Some(v);
        }
        if let Some(v) = self.four_letter_words {
            c.four_letter_words = v.split(',').map(|s| s.trim().to_owned()).collect();
        }
        if let Some(v) = self.max_client_cnxns {
            c.max_client_cnxns = v;
        }
        if let Some(v) = self.container_check_interval {
            c.container_check_interval_ms = v.max(1);
        }
        if let Some(v) = self.lock_delay {
            c.lock_delay_ms = v;
        }
        if let Some(v) = self.commit_spin_us {
            c.commit_spin_us = Some(v);
        }
        if let Some(v) = self.metrics_port {
            c.metrics.enabled = true;
            c.metrics.http_port = v;
            c.metrics.plain_http = true;
        }
        if let Some(v) = self.metrics_host {
            c.metrics.http_host = v;
        }
        if let Some(v) = self.admin_port {
            c.admin.enabled = true;
            c.admin.server_port = v;
        }
        if let Some(v) = self.admin_host {
            c.admin.server_address = v;
        }
        if let Some(v) = self.myid {
            c.declared.myid = Some(v);
        }
        if !self.servers.is_empty() {
            c.declared.members.clear();
            for (flag, m) in self.servers {
                c.declared.add(Origin::Flag(flag), m)?;
            }
        }
        c.resolve_ensemble()?;
        if let Some(v) = self.port {
            // A plain port asked for: TLS is not the only way in any more.
            c.client_port = v;
            c.tls.tls_only = false;
        }
        if let Some(v) = self.bind {
            c.client_port_address = v;
        }
        c.validate()?;
        // `serve` checks this too; here it comes before binding the port, which a
        // ZooKeeper member being replaced on this host may still hold.
        c.check_standalone()?;
        Ok(c)
    }
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// An error ends the program with its message and its causes, as anyhow prints them, but
/// never with a stack backtrace: a bad `zoo.cfg` or a port in use is the operator's to
/// fix, and `RUST_BACKTRACE=1` in their environment should not bury the one line that
/// says what to fix under forty lines of frames.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            let mut causes = e.chain().skip(1).peekable();
            if causes.peek().is_some() {
                eprintln!("\nCaused by:");
                for cause in causes {
                    eprintln!("    {cause}");
                }
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse_from(cmd::zk::zkcli_spellings(std::env::args_os().collect()));
    if let Cmd::Zk(c) = cli.cmd {
        // Their own exit codes and zkCli-style messages; no log lines on stderr.
        std::process::exit(if cmd::zk::run(c) { 0 } else { 1 });
    }
    let cli = match cli.cmd {
        // Their own exit codes and messages; no log lines on stderr.
        Cmd::Lock(a) => std::process::exit(cmd::lock::run(a)),
        Cmd::Demo(d) => std::process::exit(cmd::demo::run(d)),
        Cmd::Snapshot(c) => std::process::exit(cmd::snapshot::run(c)),
        Cmd::Data(c) => std::process::exit(cmd::data::run(c)),
        Cmd::Import(a) => std::process::exit(cmd::import::run(a)),
        other => Cli { cmd: other },
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ZLOCK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.cmd {
        Cmd::Ensemble(a) => {
            let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            rt.block_on(cmd::ensemble::run(a))
        }
        Cmd::Bench(BenchCmd::Ops(a)) => {
            let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            rt.block_on(cmd::bench::run(a))?;
            Ok(())
        }
        Cmd::Bench(BenchCmd::Load(a)) => {
            let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            rt.block_on(cmd::bench::load(a))
        }
        Cmd::Bench(BenchCmd::Ready(a)) => {
            let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            rt.block_on(cmd::bench::ready(a))
        }
        Cmd::Server(args) => {
            let io_threads = args.io_threads.map_or_else(default_io_threads, usize::from);
            let config = args.into_config()?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(io_threads)
                .thread_name("zlock-io")
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            rt.block_on(async move {
                let addr = config.client_listen_addr();
                let listener = zlock_server::bind(addr, config.listen_backlog)?;
                tracing::info!(
                    data_dir = %config.data_dir.display(),
                    version = zlock_server::VERSION,
                    "starting zlock server on {addr}"
                );
                zlock_server::serve(config, listener, shutdown_signal()).await?;
                tracing::info!("stopped");
                anyhow::Ok(())
            })
        }
        Cmd::Zk(_)
        | Cmd::Lock(_)
        | Cmd::Demo(_)
        | Cmd::Snapshot(_)
        | Cmd::Data(_)
        | Cmd::Import(_) => Ok(()),
    }
}
