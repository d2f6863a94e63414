//! A peer program a test drives by its standard streams (Curator's `CuratorLockCheck`,
//! a kazoo script): its stdout read line by line as it comes, a line sent to its stdin,
//! its exit awaited; SIGKILLed (by pid) and reaped on drop, so a failing test leaves
//! none behind. Every wait is bounded by [`BOUND`].

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;

/// How long any wait on the program may take before the test fails, naming it.
pub const BOUND: Duration = Duration::from_secs(60);

/// A running peer program.
pub struct PeerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
}

impl PeerProcess {
    /// Starts `cmd` with its stdin and stdout piped (its stderr is the test's).
    pub fn spawn(mut cmd: Command) -> PeerProcess {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting a peer program");
        let stdout = child.stdout.take().expect("its stdout is piped");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        PeerProcess {
            child,
            stdin,
            lines,
        }
    }

    /// Waits for the next line, which must start with `want`; what follows `want`,
    /// trimmed.
    pub async fn expect(&mut self, want: &str) -> String {
        let got = tokio::time::timeout(BOUND, self.lines.recv())
            .await
            .unwrap_or_else(|_| panic!("the peer program printed no {want} within {BOUND:?}"));
        let got = got.unwrap_or_else(|| panic!("the peer program ended before {want}"));
        match got.strip_prefix(want) {
            Some(rest) => rest.trim().to_owned(),
            None => panic!("the peer program's output: {got:?}, expected {want}"),
        }
    }

    /// Sends it a line (a holder releases on it).
    pub fn send_line(&mut self) {
        let stdin = self.stdin.as_mut().expect("its stdin is piped");
        stdin.write_all(b"\n").expect("writing to the peer program");
        stdin.flush().expect("writing to the peer program");
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for it to exit; its exit code (-1: killed by a signal).
    pub async fn exit_code(&mut self) -> i32 {
        let exited = async {
            loop {
                if let Some(st) = self.child.try_wait().expect("waiting for the peer program") {
                    return st.code().unwrap_or(-1);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(BOUND, exited)
            .await
            .unwrap_or_else(|_| panic!("the peer program did not exit within {BOUND:?}"))
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
