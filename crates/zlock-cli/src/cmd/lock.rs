//! `zlock lock <path> -- <command...>`: run a command while holding the fair lock
//! (`recipes::Mutex`), like `flock` and `etcdctl lock`.
//!
//! The command gets `ZLOCK_FENCING_TOKEN` (the lock node's czxid, strictly increasing
//! across holders) and `ZLOCK_LOCK_NODE` in its environment. Its exit code is passed
//! through; SIGINT/SIGTERM are forwarded to it, and once it has exited the lock is
//! released and `zlock lock` exits with 128 + the signal number.

use std::time::Duration;

use zlock::recipes::Mutex;
use zlock::{Client, Error};

const DEFAULT_SERVER: &str = "127.0.0.1:2181";

#[derive(clap::Args, Debug)]
pub struct LockArgs {
    /// The lock path; contenders' nodes are created under it
    #[arg(value_parser = parse_lock_path)]
    pub path: String,
    /// Give up if the lock is not acquired within this time (e.g. 10s, 500ms, 2m):
    /// prints `timed out waiting for lock <path>` and exits 1, leaving no node behind
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Server address, host:port [default: $ZLOCK_SERVER, else 127.0.0.1:2181]
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// Session timeout to ask for, ms: a crashed `zlock lock` frees the lock after it
    #[arg(long, value_name = "MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(i32).range(1..))]
    pub session_timeout: i32,
    /// The command to run while holding the lock (after `--`)
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The server from `--server`, else `$ZLOCK_SERVER`, else 127.0.0.1:2181.
pub fn server_addr(flag: Option<&str>) -> String {
    if let Some(s) = flag {
        return s.to_owned();
    }
    match std::env::var("ZLOCK_SERVER") {
        Ok(s) if !s.trim().is_empty() => s.trim().to_owned(),
        _ => DEFAULT_SERVER.to_owned(),
    }
}

fn parse_lock_path(s: &str) -> Result<String, String> {
    if !s.starts_with('/') || s == "/" || s.ends_with('/') || s.contains("//") {
        return Err("a lock path is absolute, not /, with no trailing or double /".into());
    }
    Ok(s.to_owned())
}

/// `10s`, `500ms`, `2m`, `1h`, or a bare number of seconds (fractions allowed).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (try 10s or 500ms)"))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" => v,
        "ms" => v / 1000.0,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("unknown unit in {s:?} (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("bad duration {s:?}: {e}"))
}

/// Connects within the session timeout; a clear message on failure.
pub async fn connect(
    addr: &str,
    session_timeout_ms: i32,
) -> Result<
    (
        Client,
        tokio::sync::mpsc::UnboundedReceiver<zlock::WatcherEvent>,
    ),
    String,
> {
    let wait = Duration::from_millis(u64::try_from(session_timeout_ms).unwrap_or(0));
    match tokio::time::timeout(wait, Client::connect(addr, session_timeout_ms)).await {
        Err(_) => Err(format!(
            "cannot connect to {addr}: timed out after {wait:?}"
        )),
        Ok(Err(e @ (Error::Connect(..) | Error::HandshakeClosed(_)))) => Err(format!("{e}")),
        Ok(Err(e)) => Err(format!("cannot connect to {addr}: {e}")),
        Ok(Ok(c)) => Ok(c),
    }
}

/// Runs `zlock lock`; returns the process exit code.
pub fn run(a: LockArgs) -> i32 {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zlock lock: starting the async runtime: {e}");
            return 1;
        }
    };
    rt.block_on(run_async(a))
}

#[cfg(unix)]
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT (2) or SIGTERM (15).
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => 2,
            _ = self.term.recv() => 15,
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals)
    }

    async fn recv(&mut self) -> i32 {
        let _ = tokio::signal::ctrl_c().await;
        2
    }
}

/// Sends `sig` to `pid` (the `kill` utility: this workspace forbids unsafe code).
fn forward(pid: u32, sig: i32) {
    #[cfg(unix)]
    {
        let r = std::process::Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        if let Err(e) = r {
            eprintln!("zlock lock: cannot forward signal {sig} to {pid}: {e}");
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (pid, sig);
    }
}

async fn run_async(a: LockArgs) -> i32 {
    // Installed first, so a signal while connecting or waiting ends us cleanly.
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("zlock lock: cannot handle signals: {e}");
            return 1;
        }
    };
    let addr = server_addr(a.server.as_deref());
    let client = tokio::select! {
        r = connect(&addr, a.session_timeout) => match r {
            Ok((c, _events)) => c,
            Err(msg) => {
                eprintln!("zlock lock: {msg}");
                return 1;
            }
        },
        sig = signals.recv() => return 128 + sig,
    };
    let code = hold_and_run(&client, &a, &mut signals).await;
    // Closing the session also removes any node of ours a failure left behind.
    let _ = client.close().await;
    code
}

async fn hold_and_run(client: &Client, a: &LockArgs, signals: &mut Signals) -> i32 {
    let lock = Mutex::new(client.clone(), &a.path);
    let acquired = tokio::select! {
        r = async {
            match a.timeout {
                Some(d) => lock.acquire_timeout(d).await,
                None => lock.acquire().await.map(Some),
            }
        } => r,
        sig = signals.recv() => return 128 + sig,
    };
    let guard = match acquired {
        Ok(Some(g)) => g,
        Ok(None) => {
            eprintln!("timed out waiting for lock {}", a.path);
            return 1;
        }
        Err(e) => {
            eprintln!("zlock lock: acquiring {}: {e}", a.path);
            return 1;
        }
    };
    let (program, args) = match a.command.split_first() {
        Some(x) => x,
        None => {
            eprintln!("zlock lock: no command given");
            return 2;
        }
    };
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .env("ZLOCK_FENCING_TOKEN", guard.fencing_token().to_string())
        .env("ZLOCK_LOCK_NODE", guard.node())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("zlock lock: cannot run {program}: {e}");
            let _ = guard.release().await;
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let pid = child.id();
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut lost_reported = false;
    let mut got_signal: Option<i32> = None;
    let status = loop {
        tokio::select! {
            st = child.wait() => break st,
            sig = signals.recv() => {
                got_signal = Some(sig);
                if let Some(pid) = pid {
                    forward(pid, sig);
                }
            }
            state = &mut lost, if !lost_reported => {
                lost_reported = true;
                eprintln!(
                    "zlock lock: WARNING: the lock on {} may be lost (session {state:?})",
                    a.path
                );
            }
        }
    };
    if let Err(e) = guard.release().await {
        eprintln!("zlock lock: releasing {}: {e}", a.path);
    }
    if let Some(sig) = got_signal {
        return 128 + sig;
    }
    match status {
        Ok(st) => exit_code(st),
        Err(e) => {
            eprintln!("zlock lock: waiting for {program}: {e}");
            1
        }
    }
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("5y").is_err());
    }
}
