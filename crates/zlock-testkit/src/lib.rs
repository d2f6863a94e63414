//! Test servers on ephemeral loopback ports, each with its own temporary data directory.
//!
//! - [`TestServer`]: zlock in-process (fast; shares the test's tokio runtime).
//! - [`ChildServer`]: zlock as a child process, for `kill -9` and restart tests.
//! - [`ChildEnsemble`]: three `zlock server` processes forming one ensemble, for fault
//!   tests (`kill -9`, `SIGSTOP`, restart, a wiped member; in network namespaces
//!   ([`Netns`]), a member cut off from the others).
//! - [`ZooKeeper`]: Apache ZooKeeper 3.8 from Debian's `zookeeper` package, for
//!   differential tests.
//! - [`require`]`(`[`Peer`]`)`: the one rule for what a test needs besides zlock
//!   (ZooKeeper, Curator, a JDK, kazoo, a browser, root): there, or the test fails,
//!   unless `ZLOCK_TEST_ALLOW_MISSING=1` (module `peers`).
//! - [`pki::Pki`]: throwaway certificates (a CA, a server's, clients') for TLS tests.
//! - [`zlock_bin`]: the `zlock` binary, built for the test process (module `binary`).
//!
//! Every process started here is stopped by its pid when its handle drops.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tempfile::TempDir;
use tokio::sync::oneshot;
use zlock_server::ServerConfig;

mod binary;
pub mod curator;
mod ensemble;
mod netns;
mod peer_process;
mod peers;
pub mod pki;
pub use binary::zlock_bin;
pub use ensemble::{ChildEnsemble, EnsembleOptions};
pub use netns::Netns;
pub use peer_process::PeerProcess;
use peers::ZK_JAR;
pub use peers::{allow_missing, find, require, Missing, Peer, CURATOR_JAR, NETTY_JARS};

/// Copies a directory tree: what a `kill -9` leaves on disk, taken while the writer is
/// still running, or a checked-in data directory to open without touching it.
///
/// # Panics
/// On any I/O error (a test helper).
#[allow(clippy::unwrap_used)]
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The last `lines` lines of the file at `path` (a server's log, for a failing test's
/// message); empty if it cannot be read.
pub fn file_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A free loopback port (bound then released), for a server that a test may kill and
/// start again on the same port.
///
/// Picked below the kernel's ephemeral range (`ip_local_port_range`), not with a bind
/// to port 0: a port from that range, once its server is killed, can be taken as the
/// local port of any client connection in the meantime, and the restart then fails
/// with "Address already in use" (CI saw it in `crash.rs`). Successive calls walk the
/// range from an offset of this process's, so concurrent tests and test processes
/// rarely meet; each port is checked free by a bind.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const FROM: u32 = 10_000;
    if low > FROM + 1000 {
        let span = low - FROM;
        let start = std::process::id().wrapping_mul(7919) % span;
        for _ in 0..span.min(4000) {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = (FROM + (start + n) % span) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// `mntr` over a server's client port, as key -> value (zlock and ZooKeeper alike).
///
/// # Panics
/// If the server cannot be reached or answers with something that is not text.
pub async fn mntr(addr: SocketAddr) -> std::collections::BTreeMap<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("mntr: connect {addr}: {e}"));
    let mut out = String::new();
    let sent = s.write_all(b"mntr").await;
    let read = s.read_to_string(&mut out).await;
    if let Err(e) = sent.and(read.map(|_| ())) {
        panic!("mntr of {addr}: {e}");
    }
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Waits until something accepts TCP connections at `addr`.
pub fn wait_for_port(addr: SocketAddr, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("nothing listening on {addr} after {within:?}")
}

/// A zlock server running inside the test process.
pub struct TestServer {
    pub addr: SocketAddr,
    pub config: ServerConfig,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), zlock_server::ServerError>>>,
    _dir: Option<TempDir>,
}

impl TestServer {
    /// Starts a server with test-friendly settings: short ticks (session timeouts 200 ms
    /// to 60 s), all four-letter words, TTL nodes on, containers checked every 100 ms.
    pub async fn start() -> anyhow::Result<TestServer> {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tune: impl FnOnce(&mut ServerConfig)) -> anyhow::Result<TestServer> {
        let dir = tempfile::tempdir()?;
        let mut cfg = test_config(dir.path());
        tune(&mut cfg);
        Self::start_in(cfg, Some(dir)).await
    }

    /// Starts on an existing data directory (to test recovery).
    pub async fn start_in(cfg: ServerConfig, dir: Option<TempDir>) -> anyhow::Result<TestServer> {
        let listener = zlock_server::bind("127.0.0.1:0".parse()?, 1024)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let c = cfg.clone();
        let task = tokio::spawn(async move {
            zlock_server::serve(c, listener, async {
                let _ = rx.await;
            })
            .await
        });
        Ok(TestServer {
            addr,
            config: cfg,
            stop: Some(tx),
            task: Some(task),
            _dir: dir,
        })
    }

    /// `127.0.0.1:<port>`
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// Where `GET /metrics` is served, if metrics are on (see [`with_metrics`]).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        let m = &self.config.metrics;
        m.enabled.then(|| SocketAddr::new(m.http_host, m.http_port))
    }

    /// Where the AdminServer's commands are served, if it is on (see [`with_admin`]).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        let a = &self.config.admin;
        a.enabled
            .then(|| SocketAddr::new(a.server_address, a.server_port))
    }

    /// Stops the server and waits until it has flushed and released the port. Returns
    /// the data directory so a new server can recover from it.
    pub async fn stop(mut self) -> anyhow::Result<Option<TempDir>> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await??;
        }
        Ok(self._dir.take())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Turns the Prometheus endpoint on, at a free loopback port: for
/// [`TestServer::start_with`], then [`TestServer::metrics_addr`].
pub fn with_metrics(cfg: &mut ServerConfig) {
    cfg.metrics.enabled = true;
    cfg.metrics.http_host = std::net::IpAddr::from([127, 0, 0, 1]);
    cfg.metrics.http_port = free_port();
}

/// Turns the AdminServer on, at a free loopback port: for [`TestServer::start_with`],
/// then [`TestServer::admin_addr`].
pub fn with_admin(cfg: &mut ServerConfig) {
    cfg.admin.enabled = true;
    cfg.admin.server_address = std::net::IpAddr::from([127, 0, 0, 1]);
    cfg.admin.server_port = free_port();
}

/// Settings for test servers: everything enabled, short timers.
pub fn test_config(dir: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_owned(),
        tick_time_ms: 100,
        min_session_timeout_ms: Some(200),
        max_session_timeout_ms: Some(60_000),
        four_letter_words: vec!["*".into()],
        extended_types: true,
        container_check_interval_ms: 100,
        max_client_cnxns: 0,
        ..ServerConfig::default()
    }
}

/// zlock as a child process on a fixed data directory, so it can be killed with
/// SIGKILL and restarted on the same data.
pub struct ChildServer {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
}

impl ChildServer {
    pub fn start(data_dir: &Path, extra: &[&str]) -> anyhow::Result<ChildServer> {
        let mut s = ChildServer {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: data_dir.to_owned(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.restart()?;
        Ok(s)
    }

    /// (Re)starts the process on the same data directory and a fresh port.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.spawn_on(free_port())
    }

    /// SIGKILLs and restarts the process on the same data directory and the same
    /// port, so a client that stays connected to this address can reconnect.
    pub fn restart_same_port(&mut self) -> anyhow::Result<()> {
        let port = self.addr.port();
        self.spawn_on(port)
    }

    fn spawn_on(&mut self, port: u16) -> anyhow::Result<()> {
        self.kill9();
        let child = Command::new(zlock_bin()?)
            .args(["server", "--port", &port.to_string(), "--data-dir"])
            .arg(&self.data_dir)
            .args(["--tick-time", "100", "--four-letter-words", "*"])
            .args(&self.extra)
            .env("ZLOCK_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting zlock")?;
        self.addr = SocketAddr::from(([127, 0, 0, 1], port));
        self.child = Some(child);
        wait_for_port(self.addr, Duration::from_secs(60))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL, no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (a clean shutdown).
    pub fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let mut c = self.child.take().context("not running")?;
        Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status()?;
        Ok(c.wait()?)
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Apache ZooKeeper 3.8 (Debian package) standalone on a free loopback port.
pub struct ZooKeeper {
    pub addr: SocketAddr,
    /// Its AdminServer (`/commands`), if started with [`ZooKeeper::start_with_admin`].
    pub admin_addr: Option<SocketAddr>,
    /// Its `dataDir` (holding `version-2`).
    pub data_dir: PathBuf,
    child: Option<Child>,
    _dir: TempDir,
}

/// What Jetty's AdminServer needs besides ZooKeeper's jar (Debian's `zookeeper` package
/// depends on these, but its own start script leaves them off the class path).
const ADMIN_JARS: [&str; 11] = [
    "servlet-api",
    "jetty9-server",
    "jetty9-servlet",
    "jetty9-util",
    "jetty9-util-ajax",
    "jetty9-http",
    "jetty9-io",
    "jetty9-security",
    "jackson-core",
    "jackson-databind",
    "jackson-annotations",
];

impl ZooKeeper {
    pub fn start() -> anyhow::Result<ZooKeeper> {
        Self::start_opts(false, None, "")
    }

    /// Starts it on `data_dir` (a new temp directory if None) with `extra` zoo.cfg lines
    /// (`snapCount=10\n`, say), so a test can make ZooKeeper write files of its own,
    /// stop it ([`ZooKeeper::stop`]) and read or restart on them.
    pub fn start_on(data_dir: Option<&Path>, extra: &str) -> anyhow::Result<ZooKeeper> {
        Self::start_opts(false, data_dir, extra)
    }

    /// Kills the server (SIGKILL to its pid, as a crash) and waits for it; its data
    /// directory stays until this is dropped.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it with its AdminServer (`admin.enableServer=true`) on a free loopback
    /// port, [`ZooKeeper::admin_addr`], and waits until that answers too.
    pub fn start_with_admin() -> anyhow::Result<ZooKeeper> {
        Self::start_opts(true, None, "")
    }

    fn start_opts(admin: bool, data_dir: Option<&Path>, extra: &str) -> anyhow::Result<ZooKeeper> {
        find(Peer::ZooKeeper)?;
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let cfg = dir.path().join("zoo.cfg");
        let data = data_dir.map_or_else(|| dir.path().join("data"), Path::to_path_buf);
        let admin_port = admin.then(free_port);
        let admin_keys = match admin_port {
            Some(p) => format!(
                "admin.enableServer=true\nadmin.serverAddress=127.0.0.1\nadmin.serverPort={p}\n"
            ),
            None => "admin.enableServer=false\n".into(),
        };
        std::fs::write(
            &cfg,
            format!(
                "tickTime=100\nminSessionTimeout=200\nmaxSessionTimeout=60000\n\
                 dataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 maxClientCnxns=0\n{admin_keys}4lw.commands.whitelist=*\n\
                 extendedTypesEnabled=true\nznode.container.checkIntervalMs=100\n{extra}",
                data.display()
            ),
        )?;
        let mut class_path = format!("{ZK_JAR}:/usr/share/java/slf4j-simple.jar");
        // Netty, for a config that names NettyServerCnxnFactory (TLS needs it).
        for jar in NETTY_JARS {
            if Path::new(jar).is_file() {
                class_path.push(':');
                class_path.push_str(jar);
            }
        }
        if admin {
            for jar in ADMIN_JARS {
                let path = format!("/usr/share/java/{jar}.jar");
                if !Path::new(&path).exists() {
                    bail!("{path} is missing: ZooKeeper's AdminServer needs it");
                }
                class_path.push(':');
                class_path.push_str(&path);
            }
        }
        let log = std::fs::File::create(dir.path().join("zk.log"))?;
        let child = Command::new("java")
            .arg("-Dzookeeper.extendedTypesEnabled=true")
            .arg("-Dznode.container.checkIntervalMs=100")
            .args([
                "-cp",
                &class_path,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            ])
            .arg(&cfg)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting java")?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let admin_addr = admin_port.map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
        let zk = ZooKeeper {
            addr,
            admin_addr,
            data_dir: data,
            child: Some(child),
            _dir: dir,
        };
        wait_for_port(addr, Duration::from_secs(60))?;
        if let Some(a) = admin_addr {
            wait_for_port(a, Duration::from_secs(60))?;
        }
        Ok(zk)
    }

    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
