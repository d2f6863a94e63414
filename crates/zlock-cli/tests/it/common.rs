//! What the tests of the `zlock` binary share: running it (bounded), its output, and a
//! scratch directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one run of the binary may take before the test fails.
pub const RUN_BOUND: Duration = Duration::from_secs(60);

/// A finished run: exit code (-1 if a signal ended it) and its output.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<std::process::Output> for Out {
    fn from(o: std::process::Output) -> Out {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// `zlock args...` with no ZLOCK_SERVER or ZLOCK_LOG from the test's environment, its
/// output piped, killed if the test drops it.
pub fn zlock_cmd(args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_zlock"));
    cmd.args(args)
        .env_remove("ZLOCK_SERVER")
        .env_remove("ZLOCK_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs `cmd` to its end within `bound`; `what` names it in the failure.
pub async fn run(mut cmd: tokio::process::Command, what: &str, bound: Duration) -> Out {
    tokio::time::timeout(bound, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish in {bound:?}"))
        .expect("run zlock")
        .into()
}

/// Waits for a started `zlock` to exit (bounded by [`RUN_BOUND`]).
pub async fn finish(child: tokio::process::Child) -> Out {
    tokio::time::timeout(RUN_BOUND, child.wait_with_output())
        .await
        .expect("zlock did not exit in time")
        .unwrap()
        .into()
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "zlock-cli-test-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path of `name` in it, as a string (for shell scripts).
    pub fn file(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A base port with `n` free ports from it (and from it + 1000, the election ports),
/// below the ephemeral range.
pub fn free_run(n: u16) -> u16 {
    for _ in 0..200 {
        let base = 20_000 + (rand_u16() % 8_000);
        let all = (0..n).flat_map(|i| [base + i, base + 1000 + i]);
        let held: Vec<_> = all
            .map(|p| std::net::TcpListener::bind(("127.0.0.1", p)))
            .collect();
        if held.iter().all(Result::is_ok) {
            return base;
        }
    }
    panic!("no run of {n} free ports");
}

fn rand_u16() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) as u16
}

/// Sends SIGINT to a child when dropped and gives it 10 s to exit.
pub struct Interrupt(pub tokio::process::Child);

impl Drop for Interrupt {
    fn drop(&mut self) {
        let Some(pid) = self.0.id() else { return };
        let _ = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status();
        for _ in 0..100 {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// What `zlock ensemble` prints about its members, up to its `pids:` line (bounded by
/// [`RUN_BOUND`]).
pub async fn ensemble_printout<R>(lines: &mut tokio::io::Lines<R>) -> Vec<String>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    let mut printed = Vec::new();
    tokio::time::timeout(RUN_BOUND, async {
        while let Some(l) = lines.next_line().await.unwrap() {
            let done = l.starts_with("pids:");
            printed.push(l);
            if done {
                break;
            }
        }
    })
    .await
    .expect("zlock ensemble printed its members");
    printed
}
