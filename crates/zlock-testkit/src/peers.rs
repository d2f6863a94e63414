//! What the tests run zlock against or beside ("peers": Apache ZooKeeper, Curator, a JDK,
//! kazoo, a headless browser, root for network namespaces) and the one rule for a peer
//! that is missing: the test fails, naming it and how to install it.
//!
//! A test asks with [`require`]: `let Some(_) = require(Peer::ZooKeeper) else { return };`.
//! The peer found, it gets its path. Missing, the test panics with what is missing and
//! how to install it (`scripts/test.sh` installs every peer; CI runs it), so a green run
//! means every comparison ran. Only with `ZLOCK_TEST_ALLOW_MISSING=1` (a quick local run
//! on a machine without the peers; `scripts/test.sh` never sets it) does [`require`]
//! return `None`, and the test passes without that part, after a notice.
//!
//! What a developer sees: the harness captures `eprintln!` of a passing test, so the
//! notice is written to the process's stderr directly, as a `!!` banner among the
//! `test ... ok` lines of `cargo test` (one per test and peer, naming both). With
//! `ZLOCK_TEST_MISSING_LOG=<file>` set, each notice is also appended there as one line;
//! `scripts/test.sh` sets it and prints the file in its summary, so a run with missing
//! peers ends saying which tests did not run what.
//!
//! The zlock binary is not a peer: [`crate::zlock_bin`] builds it from this workspace, so
//! it cannot be missing, only fail to build, which always fails the test.
//!
//! Where peers are looked for:
//! - Apache ZooKeeper: Debian's `zookeeper` package, `$ZLOCK_ZK_HOME` (default
//!   `/usr/share/zookeeper`, whose `bin/` has `zkCli.sh`), its jar
//!   `/usr/share/java/zookeeper.jar`, and `java` on `PATH`. Pointing `ZLOCK_ZK_HOME`
//!   elsewhere (`/nonexistent`) hides an installed ZooKeeper, to see what the tests do
//!   without it.
//! - Curator: `/usr/share/java/curator-recipes.jar` (`libcurator-recipes-java`).
//! - The JDK: `javac` on `PATH` (`default-jdk-headless`).
//! - kazoo: `$ZLOCK_VENV/bin/python` (default `<repo>/.venv`) that imports `kazoo`.
//! - The browser: chromium at `$CHROMIUM` (default `/usr/bin/chromium`), `node` on
//!   `PATH`, and `compat/dashboard/node_modules/playwright-core` (`npm ci` there).
//! - Root: the effective uid 0 and iproute2's `ip` on `PATH`.
//! - libfaketime: `/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1` (Debian's
//!   `libfaketime`), or `$ZLOCK_FAKETIME_LIB`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Apache ZooKeeper's jar from Debian's `zookeeper` package.
pub(crate) const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
/// Apache Curator's recipes from Debian's `libcurator-recipes-java`.
pub const CURATOR_JAR: &str = "/usr/share/java/curator-recipes.jar";
/// What ZooKeeper's Java client needs on its class path for TLS
/// (`zookeeper.clientCnxnSocket=...ClientCnxnSocketNetty`), from Debian's
/// libnetty-java, which its `zookeeper` package brings. (Its `netty-all.jar` lacks
/// the resolver classes.)
pub const NETTY_JARS: [&str; 8] = [
    "/usr/share/java/netty-buffer.jar",
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-common.jar",
    "/usr/share/java/netty-handler.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport.jar",
    "/usr/share/java/netty-transport-native-epoll.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];

/// Something a test needs besides zlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Apache ZooKeeper 3.8 (Debian's package) and `java` to run it: the tests that
    /// compare zlock with ZooKeeper. [`find`] gives its home (`bin/zkCli.sh` in it).
    ZooKeeper,
    /// Apache Curator's recipes jar: the Curator interop tests. [`find`] gives the jar.
    Curator,
    /// `javac` (and `java`): to compile and run the Curator lock contender. [`find`]
    /// gives `javac`.
    Jdk,
    /// A Python venv with kazoo: the kazoo lock contender. [`find`] gives its python.
    Kazoo,
    /// Headless chromium driven by node's playwright-core: the dashboard's browser test.
    /// [`find`] gives chromium.
    Browser,
    /// Root and iproute2: network namespaces, to cut a member off. [`find`] gives `ip`.
    Root,
    /// libfaketime, preloaded into a member to skew its wall clock. [`find`] gives the
    /// library.
    Faketime,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::ZooKeeper => "Apache ZooKeeper",
            Peer::Curator => "Apache Curator",
            Peer::Jdk => "a JDK (javac)",
            Peer::Kazoo => "kazoo (a Python venv)",
            Peer::Browser => "headless chromium with node's playwright-core",
            Peer::Root => "root (for network namespaces)",
            Peer::Faketime => "libfaketime (to skew a member's wall clock)",
        }
    }

    /// How to get it, besides `scripts/test.sh`, which installs every peer.
    fn install(self) -> &'static str {
        match self {
            Peer::ZooKeeper => "apt-get install zookeeper",
            Peer::Curator => "apt-get install libcurator-recipes-java",
            Peer::Jdk => "apt-get install default-jdk-headless",
            Peer::Kazoo => {
                "python3 -m venv .venv && .venv/bin/pip install 'kazoo[test]==2.11.0' \
                 (or ZLOCK_VENV=<venv>)"
            }
            Peer::Browser => {
                "apt-get install chromium nodejs npm, then `npm ci` in compat/dashboard"
            }
            Peer::Root => "run the test as root, with iproute2 installed",
            Peer::Faketime => "apt-get install libfaketime",
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A peer that is not there: which, what exactly is missing, and how to install it.
#[derive(Debug, thiserror::Error)]
#[error(
    "{peer} is missing: {detail}. Install it: {} (scripts/test.sh installs every peer)",
    peer.install()
)]
pub struct Missing {
    pub peer: Peer,
    /// The file, command or condition that was not found.
    pub detail: String,
}

/// Whether `ZLOCK_TEST_ALLOW_MISSING` is set (to anything but `0`): tests then pass
/// without a missing peer's part, saying so (see the module doc).
pub fn allow_missing() -> bool {
    std::env::var("ZLOCK_TEST_ALLOW_MISSING").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The peer's path if it is there; what is missing otherwise. Never panics, never asks
/// [`allow_missing`]: for a test, [`require`] is the rule.
pub fn find(peer: Peer) -> Result<PathBuf, Missing> {
    let missing = |detail: String| Missing { peer, detail };
    match peer {
        Peer::ZooKeeper => {
            let home = zk_home();
            let cli = home.join("bin/zkCli.sh");
            if !cli.is_file() {
                let how = match std::env::var_os("ZLOCK_ZK_HOME") {
                    Some(_) => " (ZLOCK_ZK_HOME)",
                    None => "",
                };
                return Err(missing(format!("no {}{how}", cli.display())));
            }
            if !Path::new(ZK_JAR).is_file() {
                return Err(missing(format!("no {ZK_JAR}")));
            }
            on_path("java").ok_or_else(|| missing("no `java` on PATH".into()))?;
            Ok(home)
        }
        Peer::Curator => match Path::new(CURATOR_JAR).is_file() {
            true => Ok(CURATOR_JAR.into()),
            false => Err(missing(format!("no {CURATOR_JAR}"))),
        },
        Peer::Jdk => {
            on_path("java").ok_or_else(|| missing("no `java` on PATH".into()))?;
            on_path("javac").ok_or_else(|| missing("no `javac` on PATH".into()))
        }
        Peer::Kazoo => {
            let venv = std::env::var_os("ZLOCK_VENV")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo_root().join(".venv"));
            let py = venv.join("bin/python");
            let imports = Command::new(&py)
                .args(["-c", "import kazoo"])
                .output()
                .is_ok_and(|o| o.status.success());
            match imports {
                true => Ok(py),
                false => Err(missing(format!(
                    "{} does not exist or cannot import kazoo",
                    py.display()
                ))),
            }
        }
        Peer::Browser => {
            let chromium = std::env::var_os("CHROMIUM")
                .map(PathBuf::from)
                .unwrap_or_else(|| "/usr/bin/chromium".into());
            if !chromium.is_file() {
                return Err(missing(format!("no chromium at {}", chromium.display())));
            }
            on_path("node").ok_or_else(|| missing("no `node` on PATH".into()))?;
            let pw = repo_root().join("compat/dashboard/node_modules/playwright-core");
            if !pw.is_dir() {
                return Err(missing(format!("no {}", pw.display())));
            }
            Ok(chromium)
        }
        Peer::Root => {
            if !crate::netns::is_root() {
                return Err(missing("not running as root (effective uid 0)".into()));
            }
            on_path("ip").ok_or_else(|| missing("no `ip` (iproute2) on PATH".into()))
        }
        Peer::Faketime => {
            let lib = std::env::var_os("ZLOCK_FAKETIME_LIB")
                .map(PathBuf::from)
                .unwrap_or_else(|| "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into());
            match lib.is_file() {
                true => Ok(lib),
                false => Err(missing(format!("no {}", lib.display()))),
            }
        }
    }
}

/// The one rule for a test's peer: its path if it is there. Missing, the test fails
/// (this panics with what is missing and how to install it), unless
/// `ZLOCK_TEST_ALLOW_MISSING=1`: then this returns `None` after a notice on the
/// process's stderr (and in `$ZLOCK_TEST_MISSING_LOG`), and the caller skips what
/// needs the peer.
///
/// # Panics
/// If the peer is missing and missing peers are not allowed.
#[track_caller]
pub fn require(peer: Peer) -> Option<PathBuf> {
    match find(peer) {
        Ok(p) => Some(p),
        Err(m) if allow_missing() => {
            notice(&m);
            None
        }
        Err(m) => panic!(
            "{m}\n(for a quick local run without it, ZLOCK_TEST_ALLOW_MISSING=1 lets the \
             tests that need it pass without that part, saying so)"
        ),
    }
}

/// Says loudly that the calling test passes without what needs `m.peer`.
fn notice(m: &Missing) {
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("a test")
        .to_owned();
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            Some((name, _hash)) => name.to_owned(),
            None => s,
        })
        .unwrap_or_default();
    let line = format!(
        "NOT RUN (ZLOCK_TEST_ALLOW_MISSING=1): {binary}::{test}: what needs {}; {m}",
        m.peer
    );
    let banner = "!".repeat(78);
    // Straight to the process's stderr: the harness captures `eprintln!` of a passing
    // test, and this must be seen.
    let _ = writeln!(std::io::stderr().lock(), "\n{banner}\n!! {line}\n{banner}");
    if let Some(log) = std::env::var_os("ZLOCK_TEST_MISSING_LOG") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = appended {
            let _ = writeln!(
                std::io::stderr().lock(),
                "!! could not append to ZLOCK_TEST_MISSING_LOG={}: {e}",
                Path::new(&log).display()
            );
        }
    }
}

/// Where Apache ZooKeeper's scripts are: `$ZLOCK_ZK_HOME`, else Debian's place.
fn zk_home() -> PathBuf {
    std::env::var_os("ZLOCK_ZK_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/share/zookeeper".into())
}

/// The workspace root (where `compat/` and `.venv` are).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `name` in one of `PATH`'s directories, as an executable file.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
