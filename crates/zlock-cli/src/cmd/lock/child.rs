//! The command `zlock lock` runs: started in a process group of its own, given
//! SIGINT/SIGTERM as `zlock lock` receives them, and stopped (SIGTERM, then SIGKILL
//! after `--kill-after`) when the lock is lost.
//!
//! # Why a process group of its own
//! A command is often a shell that starts other processes (`sh -c 'a; b'`, a script).
//! When the lock is lost, all of them must stop, not only the shell: a grandchild left
//! running would go on working without the lock. So the command leads a new process
//! group and every signal goes to the whole group (`kill -SIG -- -PGID`), as
//! `timeout(1)` does. The cost is the terminal's: a background group that reads the
//! terminal is stopped (SIGTTIN), and Ctrl-C reaches only `zlock lock`, which passes
//! it on. `--foreground` (as `timeout --foreground`) keeps the command in our group for
//! interactive commands; then signals go to the command's pid only, and a lock loss
//! cannot reach its children.
//!
//! Signals are sent with the `kill` utility: this workspace forbids unsafe code, and
//! no safe signal crate is a dependency.

use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;
use tokio::time::Instant;

use zlock::ConnectionState;

pub const SIGINT: i32 = 2;
pub const SIGKILL: i32 = 9;
pub const SIGTERM: i32 = 15;

/// How often to look whether a lost lock's command left processes in its group.
const GROUP_POLL: Duration = Duration::from_millis(100);

#[cfg(unix)]
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    pub fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT or SIGTERM.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => SIGINT,
            _ = self.term.recv() => SIGTERM,
        }
    }
}

#[cfg(not(unix))]
pub struct Signals;

#[cfg(not(unix))]
impl Signals {
    pub fn new() -> std::io::Result<Signals> {
        Ok(Signals)
    }

    pub async fn recv(&mut self) -> i32 {
        let _ = tokio::signal::ctrl_c().await;
        SIGINT
    }
}

/// Where signals for the command go.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pid: u32,
    /// The command leads a process group of its own (its pgid is its pid).
    group: bool,
}

impl Target {
    /// `kill` arguments addressing the target (`-- -PGID` for the group).
    fn whom(&self) -> Vec<String> {
        if self.group {
            vec!["--".into(), format!("-{}", self.pid)]
        } else {
            vec![self.pid.to_string()]
        }
    }

    /// Sends `sig`; a target already gone is not an error worth a message.
    pub async fn signal(&self, sig: i32) {
        if let Err(e) = kill(&format!("-{sig}"), &self.whom()).await {
            eprintln!("zlock lock: cannot send signal {sig} to {}: {e}", self.pid);
        }
    }

    /// Is any process of the target's group left? (For a single pid, false once it was
    /// waited for.)
    async fn group_alive(&self) -> bool {
        self.group && matches!(kill("-0", &self.whom()).await, Ok(true))
    }
}

/// Runs `kill <sig> <whom>`; whether it succeeded (false: no such process).
async fn kill(sig: &str, whom: &[String]) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        let st = tokio::process::Command::new("kill")
            .arg(sig)
            .args(whom)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await?;
        Ok(st.success())
    }
    #[cfg(not(unix))]
    {
        let _ = (sig, whom);
        Ok(false)
    }
}

/// Starts the command with `env`, in its own process group unless `foreground`.
///
/// # Errors
/// The spawn's (not found, not executable, ...).
pub fn spawn(
    command: &[String],
    env: &[(&str, String)],
    foreground: bool,
) -> std::io::Result<(Child, Target)> {
    let Some((program, args)) = command.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no command given",
        ));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    #[cfg(unix)]
    if !foreground {
        cmd.process_group(0);
    }
    let child = cmd.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the command exited before its pid could be read"))?;
    Ok((
        child,
        Target {
            pid,
            group: cfg!(unix) && !foreground,
        },
    ))
}

/// How the command ended.
pub struct Ended {
    /// Its exit status.
    pub status: std::io::Result<ExitStatus>,
    /// The last SIGINT/SIGTERM `zlock lock` received (and passed on) meanwhile.
    pub signal: Option<i32>,
    /// The lock was lost meanwhile, in this state; the command was stopped.
    pub lost: Option<ConnectionState>,
}

/// Waits for the command, passing SIGINT/SIGTERM on to it. When `lost` resolves,
/// prints why (`describe` turns the state into words), sends SIGTERM and, if the
/// command (or, in group mode, any process of its group) is still there after
/// `kill_after`, SIGKILL.
pub async fn supervise(
    child: &mut Child,
    target: Target,
    signals: &mut Signals,
    lost: impl Future<Output = ConnectionState>,
    kill_after: Duration,
    describe: impl Fn(ConnectionState) -> String,
) -> Ended {
    tokio::pin!(lost);
    let mut signal = None;
    let mut lost_state = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        let kill_timer = async {
            match kill_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            st = child.wait() => break st,
            sig = signals.recv() => {
                signal = Some(sig);
                target.signal(sig).await;
            }
            state = &mut lost, if lost_state.is_none() => {
                lost_state = Some(state);
                eprintln!("zlock lock: {}; stopping the command", describe(state));
                target.signal(SIGTERM).await;
                kill_at = Some(Instant::now() + kill_after);
            }
            () = kill_timer, if !killed => {
                killed = true;
                eprintln!(
                    "zlock lock: the command is still running {kill_after:?} after SIGTERM; \
                     sending SIGKILL"
                );
                target.signal(SIGKILL).await;
            }
        }
    };
    if let (Some(deadline), false) = (kill_at, killed) {
        // The leader is gone; what it started in its group gets the rest of the grace
        // period, then SIGKILL: nothing may go on working without the lock.
        while target.group_alive().await {
            if Instant::now() >= deadline {
                eprintln!(
                    "zlock lock: processes of the command are still running {kill_after:?} \
                     after SIGTERM; sending SIGKILL"
                );
                target.signal(SIGKILL).await;
                break;
            }
            tokio::time::sleep(GROUP_POLL.min(deadline.saturating_duration_since(Instant::now())))
                .await;
        }
    }
    Ended {
        status,
        signal,
        lost: lost_state,
    }
}

/// The shell's view of an exit status: the code, or 128 + the signal that ended it.
pub fn exit_code(st: ExitStatus) -> i32 {
    if let Some(c) = st.code() {
        return c;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(s) = st.signal() {
            return 128 + s;
        }
    }
    1
}
