//! [`ChildEnsemble`]: three (or more) `zlock server` processes forming one ensemble on
//! loopback ports (voters, and [`EnsembleOptions::observers`] observers after them), for fault tests: `kill -9`, `SIGSTOP`/`SIGCONT`, restart on the same
//! ports and data, restart with the data directory wiped. With
//! [`EnsembleOptions::netns`], each member runs in a network namespace of its own
//! ([`Netns`]) instead, reached over a bridge, and can also be cut off from the others
//! while its clients stay connected ([`ChildEnsemble::cut`]).
//!
//! Every member gets the same `zoo.cfg` (tuning and the `server.N` lines) and its own
//! `--myid` and `--data-dir`; the config file and each member's log (`m<id>.log`, all
//! its runs appended) sit beside the data directories in one temporary root, so a wiped
//! member keeps its identity and its earlier log. When the handle drops, every process
//! is SIGKILLed by its pid (a stopped one too) and reaped; if the thread is panicking,
//! the tail of each member's log is printed. With `ZLOCK_TEST_KEEP` set in the
//! environment the temporary root is kept (its path printed), logs and data included.
//! Asking the members what they are (four-letter words, who leads) is in `ask`.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tempfile::TempDir;

use crate::netns::Netns;
use crate::zlock_bin;

mod ask;

/// How the members are tuned (written to their shared `zoo.cfg`).
#[derive(Debug, Clone)]
pub struct EnsembleOptions {
    /// Voting members (participants), `myid` 1 to `members`.
    pub members: u64,
    /// Observers (`server.N=...:observer`), after the voters: `myid` `members + 1`
    /// on, member indexes `members` on.
    pub observers: u64,
    /// `tickTime`; session timeouts may range from 2 ticks to `maxSessionTimeout`.
    pub tick_time_ms: u64,
    /// `zlock.raftHeartbeatMs`.
    pub heartbeat_ms: u64,
    /// `zlock.electionTimeoutMs`: the shortest election timeout (the longest, which is
    /// also the leader's lease, is a third more).
    pub election_timeout_ms: u64,
    /// `snapCount`: a Raft snapshot after this many entries.
    pub snap_count: u64,
    /// Spare members, after the voters and observers: given ports, an id and a data
    /// directory but neither started nor in the others' `server.N` lines, for tests
    /// that add members with `reconfig` ([`ChildEnsemble::start_spare`]).
    pub spares: u64,
    /// Extra `zoo.cfg` lines.
    pub extra: Vec<String>,
    /// Each member in a network namespace of its own, on its own address (client port
    /// 2181, quorum port 2888): needed by [`ChildEnsemble::cut`]; needs root.
    pub netns: bool,
    /// Extra environment for one member's process, by member index (at every start):
    /// say, libfaketime preloaded to skew its wall clock.
    pub member_env: Vec<(usize, Vec<(String, String)>)>,
    /// Extra `zoo.cfg` lines for one member, by member index, after the shared ones
    /// (a later line wins): say, another key store. Changed between its runs with
    /// [`ChildEnsemble::set_member_extra`].
    pub member_extra: Vec<(usize, Vec<String>)>,
    /// Each member serves its AdminServer on a loopback port of its own
    /// ([`ChildEnsemble::admin_addr`]).
    pub admin: bool,
}

impl Default for EnsembleOptions {
    /// Three members; heartbeat 50 ms and election timeout 300 to 400 ms (twice the
    /// defaults at `tickTime=2000`: a loaded 2-core test machine, two tests at a time,
    /// each with three debug-built members, can stall a member for 400 ms, which the
    /// defaults would take for a dead leader); session timeouts up to 60 s; snapshots every 100,000.
    fn default() -> Self {
        EnsembleOptions {
            members: 3,
            observers: 0,
            tick_time_ms: 100,
            heartbeat_ms: 50,
            election_timeout_ms: 300,
            snap_count: 100_000,
            spares: 0,
            extra: Vec::new(),
            netns: false,
            member_env: Vec::new(),
            member_extra: Vec::new(),
            admin: false,
        }
    }
}

/// One member: its addresses, its directories and its process.
struct Member {
    id: u64,
    client: SocketAddr,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// SIGSTOPped (and not yet continued).
    stopped: bool,
    /// An observer: never votes, `srvr` says `Mode: observer`.
    observer: bool,
    /// Its `server.N` value (`host:quorumPort:electionPort:role;client`).
    line: String,
    /// A spare: its own `--server` list (the others' and its own), once started.
    servers: Option<Vec<String>>,
    /// Extra environment for its process ([`EnsembleOptions::member_env`]).
    env: Vec<(String, String)>,
    /// Its own `zoo.cfg` lines ([`EnsembleOptions::member_extra`]); with any, it starts
    /// from a file of its own (`m<id>.cfg`: the shared file, then these).
    extra: Vec<String>,
    /// Its AdminServer ([`EnsembleOptions::admin`]).
    admin: Option<SocketAddr>,
}

/// Where one member listens: clients on `client`, peers on its host's `quorum_port`.
struct MemberAddrs {
    client: SocketAddr,
    quorum_port: u16,
    election_port: u16,
}

/// Free loopback ports for `n` members, below the ephemeral range (members are killed
/// and restarted on their ports: see [`crate::free_port`]). Every port is bound at
/// once, then released, so none is handed out twice.
fn loopback_addrs(n: usize) -> anyhow::Result<Vec<MemberAddrs>> {
    let held = (0..n * 3)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", crate::free_port())))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ports = Vec::new();
    for l in &held {
        ports.push(l.local_addr()?.port());
    }
    Ok(ports
        .chunks(3)
        .map(|p| MemberAddrs {
            client: SocketAddr::from(([127, 0, 0, 1], p[0])),
            quorum_port: p[1],
            election_port: p[2],
        })
        .collect())
}

/// An ensemble of `zlock server` child processes; members are indexed from 0 (member
/// `i` has `myid` `i + 1`).
pub struct ChildEnsemble {
    members: Vec<Member>,
    config: PathBuf,
    /// The same `--server` list for every member.
    servers: Vec<String>,
    /// Holds `root_path`; taken (kept on disk) when `ZLOCK_TEST_KEEP` is set.
    root: Option<TempDir>,
    root_path: PathBuf,
    /// The members' namespaces, with [`EnsembleOptions::netns`]. Dropped after the
    /// members are killed (a namespace goes only once nothing runs in it).
    netns: Option<Netns>,
}

impl ChildEnsemble {
    /// Starts the members with [`EnsembleOptions::default`] and waits until each
    /// accepts connections on its client port (not until a leader is elected; see
    /// [`ChildEnsemble::leader`]).
    pub async fn start() -> anyhow::Result<ChildEnsemble> {
        Self::start_with(EnsembleOptions::default()).await
    }

    /// As [`ChildEnsemble::start`], tuned. Ports are picked free, then bound by the
    /// members a moment later; if one was taken meanwhile (by a test running beside
    /// this one) and a member exits at start, the whole ensemble is started again on
    /// other ports, up to three times. (Not in namespaces: there no port is shared.)
    pub async fn start_with(opts: EnsembleOptions) -> anyhow::Result<ChildEnsemble> {
        // Built (or found) first: a failed build is not a port taken, to try again.
        zlock_bin()?;
        let mut attempt = 1;
        loop {
            match Self::try_start(&opts).await {
                Ok(e) => return Ok(e),
                Err(e) if attempt < 3 && !opts.netns => {
                    eprintln!("testkit: the ensemble did not start ({e:#}); again on other ports");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn try_start(opts: &EnsembleOptions) -> anyhow::Result<ChildEnsemble> {
        let root = tempfile::tempdir()?;
        let total = (opts.members + opts.observers + opts.spares) as usize;
        let netns = match opts.netns {
            true => Some(Netns::create(total)?),
            false => None,
        };
        let addrs = match &netns {
            // A namespace to itself: ZooKeeper's usual ports, each on its own address.
            Some(n) => (0..total)
                .map(|i| MemberAddrs {
                    client: SocketAddr::new(n.addr(i).into(), 2181),
                    quorum_port: 2888,
                    election_port: 3888,
                })
                .collect(),
            None => loopback_addrs(total)?,
        };
        let mut servers = Vec::new();
        let mut members = Vec::new();
        for (id, a) in (1..=opts.members + opts.observers + opts.spares).zip(addrs) {
            let (client, host) = (a.client, a.client.ip());
            let observer = id > opts.members && id <= opts.members + opts.observers;
            let spare = id > opts.members + opts.observers;
            let line = format!(
                "{host}:{}:{}:{};{client}",
                a.quorum_port,
                a.election_port,
                if observer { "observer" } else { "participant" }
            );
            if !spare {
                servers.push(format!("{id}={line}"));
            }
            let data_dir = root.path().join(format!("m{id}"));
            std::fs::create_dir_all(&data_dir)?;
            members.push(Member {
                id,
                client,
                data_dir,
                log: root.path().join(format!("m{id}.log")),
                child: None,
                stopped: false,
                observer,
                line,
                servers: None,
                env: opts
                    .member_env
                    .iter()
                    .filter(|(i, _)| *i == members.len())
                    .flat_map(|(_, env)| env.iter().cloned())
                    .collect(),
                extra: opts
                    .member_extra
                    .iter()
                    .filter(|(i, _)| *i == members.len())
                    .flat_map(|(_, lines)| lines.iter().cloned())
                    .collect(),
                admin: opts
                    .admin
                    .then(|| SocketAddr::from(([127, 0, 0, 1], crate::free_port()))),
            });
        }
        let config = root.path().join("zoo.cfg");
        let mut cfg = format!(
            "tickTime={}\nminSessionTimeout={}\nmaxSessionTimeout=60000\n\
             4lw.commands.whitelist=*\nmaxClientCnxns=0\nsnapCount={}\n\
             zlock.raftHeartbeatMs={}\nzlock.electionTimeoutMs={}\n",
            opts.tick_time_ms,
            opts.tick_time_ms * 2,
            opts.snap_count,
            opts.heartbeat_ms,
            opts.election_timeout_ms,
        );
        for l in &opts.extra {
            cfg.push_str(l);
            cfg.push('\n');
        }
        std::fs::write(&config, cfg)?;
        let mut e = ChildEnsemble {
            members,
            config,
            servers,
            root_path: root.path().to_owned(),
            root: Some(root),
            netns,
        };
        let started = (opts.members + opts.observers) as usize;
        for i in 0..started {
            e.spawn(i)?;
        }
        for i in 0..started {
            e.wait_serving(i).await?;
        }
        Ok(e)
    }

    /// Where member `i` serves its AdminServer, with [`EnsembleOptions::admin`].
    pub fn admin_addr(&self, i: usize) -> Option<SocketAddr> {
        self.members[i].admin
    }

    /// Member `i`'s `server.N=...` line, as `reconfig` joins it
    /// (`server.N=host:quorumPort:electionPort:participant;host:clientPort`).
    pub fn server_line(&self, i: usize) -> String {
        let m = &self.members[i];
        format!("server.{}={}", m.id, m.line)
    }

    /// Starts spare member `i` ([`EnsembleOptions::spares`]), blank, with the started
    /// members' `server.N` lines and its own (as ZooKeeper's documentation has a
    /// server that is to join started), and waits until it accepts client connections.
    /// It serves nobody until `reconfig` adds it.
    pub async fn start_spare(&mut self, i: usize) -> anyhow::Result<()> {
        let own = format!("{}={}", self.members[i].id, self.members[i].line);
        let mut list = self.servers.clone();
        list.push(own);
        self.members[i].servers = Some(list);
        self.spawn(i)?;
        self.wait_serving(i).await
    }

    /// How many members there are.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i`'s client address.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        self.members[i].client
    }

    /// Every member's client address, member `first` first then the others in order:
    /// a client given this connects to `first` (if it is up).
    pub fn connect_string_from(&self, first: usize) -> String {
        let n = self.members.len();
        (0..n)
            .map(|k| self.members[(first + k) % n].client.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every member's client address, member 0 first.
    pub fn connect_string(&self) -> String {
        self.connect_string_from(0)
    }

    /// Member `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> &Path {
        &self.members[i].data_dir
    }

    /// The pid of member `i`, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(|c| c.id())
    }

    /// Whether member `i` is a spare ([`EnsembleOptions::spares`]).
    pub fn is_spare(&self, i: usize) -> bool {
        !self
            .servers
            .iter()
            .any(|s| s.starts_with(&format!("{}=", self.members[i].id)))
    }

    /// Whether member `i` is an observer.
    pub fn is_observer(&self, i: usize) -> bool {
        self.members[i].observer
    }

    /// Whether member `i`'s process runs and is not stopped.
    pub fn is_up(&self, i: usize) -> bool {
        self.members[i].child.is_some() && !self.members[i].stopped
    }

    /// Cuts member `i` off from the other members, both ways, silently (packets dropped,
    /// as on a failed link); its clients stay connected to it. Needs
    /// [`EnsembleOptions::netns`].
    pub fn cut(&mut self, i: usize) -> anyhow::Result<()> {
        self.netns
            .as_mut()
            .context("cut needs the members in namespaces (EnsembleOptions::netns)")?
            .cut(i)
    }

    /// Undoes [`ChildEnsemble::cut`] of member `i`.
    pub fn heal(&mut self, i: usize) -> anyhow::Result<()> {
        self.netns
            .as_mut()
            .context("heal needs the members in namespaces (EnsembleOptions::netns)")?
            .heal(i)
    }

    /// Whether member `i` is cut off from the others now.
    pub fn is_cut(&self, i: usize) -> bool {
        self.netns.as_ref().is_some_and(|n| n.is_cut(i))
    }

    /// SIGKILL member `i` (no chance to flush anything) and reap it.
    pub fn kill9(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(mut c) = m.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        m.stopped = false;
    }

    /// Stops member `i` as an operator would (SIGTERM: it closes its connections and
    /// its quorum port and exits), waits for it (SIGKILL after 20 s) and reaps it.
    pub fn stop(&mut self, i: usize) -> anyhow::Result<()> {
        if self.members[i].stopped {
            self.sigcont(i)?;
        }
        let m = &mut self.members[i];
        let Some(mut c) = m.child.take() else {
            return Ok(());
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                bail!("member {i} did not exit within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Starts member `i` (stopped or killed before) on its ports and data directory,
    /// and waits until it accepts client connections.
    pub async fn start_again(&mut self, i: usize) -> anyhow::Result<()> {
        anyhow::ensure!(self.members[i].child.is_none(), "member {i} runs");
        self.spawn(i)?;
        self.wait_serving(i).await
    }

    /// Member `i`'s own `zoo.cfg` lines from its next start on, after the shared ones
    /// (replacing those it had): with a restart, a rolling change of configuration.
    pub fn set_member_extra(&mut self, i: usize, lines: Vec<String>) {
        self.members[i].extra = lines;
    }

    /// The `zoo.cfg` every member is started with (`--config`), but for the lines of
    /// its own ([`ChildEnsemble::set_member_extra`]).
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// SIGSTOP member `i`: it keeps its sockets but runs nothing until
    /// [`ChildEnsemble::sigcont`].
    pub fn sigstop(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, "STOP")?;
        self.members[i].stopped = true;
        Ok(())
    }

    /// SIGCONT member `i`.
    pub fn sigcont(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, "CONT")?;
        self.members[i].stopped = false;
        Ok(())
    }

    fn signal(&self, i: usize, sig: &str) -> anyhow::Result<()> {
        let pid = self.pid(i).context("member not running")?;
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .context("running kill")?;
        if !st.success() {
            bail!("kill -{sig} {pid}: {st}");
        }
        Ok(())
    }

    /// SIGKILLs member `i` if it runs, then starts it again on the same ports and data
    /// directory and waits until it accepts client connections.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill9(i);
        self.spawn(i)?;
        self.wait_serving(i).await
    }

    /// Restarts every member (SIGKILLing those that run), all spawned before waiting
    /// for any, as after a power cut.
    pub async fn restart_all(&mut self) -> anyhow::Result<()> {
        for i in 0..self.members.len() {
            self.kill9(i);
        }
        // Spares never started stay down.
        let up: Vec<usize> = (0..self.members.len())
            .filter(|&i| !self.is_spare(i) || self.members[i].servers.is_some())
            .collect();
        for &i in &up {
            self.spawn(i)?;
        }
        for &i in &up {
            self.wait_serving(i).await?;
        }
        Ok(())
    }

    /// As [`ChildEnsemble::restart`], with member `i`'s data directory emptied first:
    /// it comes back knowing nothing but its id and the members.
    pub async fn wipe_and_restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill9(i);
        let d = &self.members[i].data_dir;
        std::fs::remove_dir_all(d).with_context(|| format!("wiping {}", d.display()))?;
        std::fs::create_dir_all(d)?;
        self.spawn(i)?;
        self.wait_serving(i).await
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let bin = zlock_bin()?;
        let m = &mut self.members[i];
        let mut log = OpenOptions::new().create(true).append(true).open(&m.log)?;
        writeln!(log, "==== testkit: starting member {} ====", m.id)?;
        let config = match m.extra.is_empty() {
            true => self.config.clone(),
            false => {
                let own = self.root_path.join(format!("m{}.cfg", m.id));
                let mut text = std::fs::read_to_string(&self.config)?;
                for l in &m.extra {
                    text.push_str(l);
                    text.push('\n');
                }
                std::fs::write(&own, text)?;
                own
            }
        };
        let mut cmd = match &self.netns {
            Some(n) => n.command(i, &bin),
            None => Command::new(bin),
        };
        cmd.arg("server")
            .arg("--config")
            .arg(&config)
            .args(["--myid", &m.id.to_string(), "--data-dir"])
            .arg(&m.data_dir);
        for s in m.servers.as_ref().unwrap_or(&self.servers) {
            cmd.args(["--server", s]);
        }
        if let Some(a) = m.admin {
            cmd.args(["--admin-port", &a.port().to_string()]);
        }
        let child = cmd
            .env(
                "ZLOCK_LOG",
                std::env::var("ZLOCK_LOG").unwrap_or_else(|_| "info,openraft=warn".into()),
            )
            .envs(m.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting zlock server")?;
        m.child = Some(child);
        m.stopped = false;
        Ok(())
    }

    /// Waits (at most 60 s) until member `i` accepts client connections; fails at once
    /// if its process exits.
    async fn wait_serving(&mut self, i: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = self.members[i].client;
        loop {
            if let Some(c) = self.members[i].child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    self.members[i].child = None;
                    bail!(
                        "member {i} (myid {}) exited at start ({st}); its log:\n{}",
                        self.members[i].id,
                        self.log_tail(i, 40)
                    );
                }
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("member {i} not listening on {addr} after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last `lines` lines of member `i`'s log (all its runs).
    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        crate::file_tail(&self.members[i].log, lines)
    }

    /// Member `i`'s whole log (all its runs).
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.members[i].log).unwrap_or_default()
    }

    /// The temporary directory holding the config, the logs and the data directories.
    pub fn root(&self) -> &Path {
        &self.root_path
    }
}

impl Drop for ChildEnsemble {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill9(i);
        }
        if std::env::var_os("ZLOCK_TEST_KEEP").is_some() {
            if let Some(dir) = self.root.take() {
                eprintln!(
                    "ZLOCK_TEST_KEEP: logs and data kept in {}",
                    dir.keep().display()
                );
            }
        }
        if std::thread::panicking() {
            for i in 0..self.members.len() {
                eprintln!(
                    "---- member {i} (myid {}) log, last 60 lines ----\n{}",
                    self.members[i].id,
                    self.log_tail(i, 60)
                );
            }
        }
    }
}
