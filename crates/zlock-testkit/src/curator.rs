//! Apache Curator as a test peer: `compat/curator/CuratorLockCheck.java` (Curator's
//! `InterProcessMutex` driven from the command line) compiled against Debian's
//! `libcurator-recipes-java`, and the `java` command that runs it.

use std::path::Path;
use std::process::Command;

use crate::peers::{require, Peer, CURATOR_JAR, NETTY_JARS};

/// Quiets ZooKeeper's client logging (Debian's libslf4j-java), when present.
const SLF4J_NOP: &str = "/usr/share/java/slf4j-nop.jar";

/// `CuratorLockCheck` compiled into a temporary directory. `None`: Curator or the JDK
/// is missing and missing peers are allowed (see [`require`]); otherwise a missing
/// peer or a failed compile panics.
pub fn compile_lock_check() -> Option<tempfile::TempDir> {
    require(Peer::Curator)?;
    require(Peer::Jdk)?;
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat/curator/CuratorLockCheck.java");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new("javac")
        .args(["-cp", CURATOR_JAR, "-d"])
        .arg(dir.path())
        .arg(&src)
        .output()
        .expect("running javac");
    assert!(
        out.status.success(),
        "javac {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(dir)
}

/// `java <jvm flags> CuratorLockCheck <args>` with the classes [`compile_lock_check`]
/// made, Curator, and Netty on the class path (ZooKeeper's Java client speaks TLS
/// through Netty only). `CuratorLockCheck`'s usage is in its source.
pub fn lock_check_command(classes: &Path, jvm: &[String], args: &[&str]) -> Command {
    let mut cp = format!("{CURATOR_JAR}:{}", classes.display());
    for jar in std::iter::once(SLF4J_NOP).chain(NETTY_JARS) {
        if Path::new(jar).exists() {
            cp.push(':');
            cp.push_str(jar);
        }
    }
    let mut cmd = Command::new("java");
    cmd.args(jvm)
        .args(["-cp", &cp, "CuratorLockCheck"])
        .args(args);
    cmd
}
