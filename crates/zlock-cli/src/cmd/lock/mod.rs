//! `zlock lock <path> -- <command...>`: run a command while holding a lock, like `flock`
//! and `consul lock`: the exclusive lock (`recipes::Mutex`), the read side of the
//! read-write lock (`--shared`) or one lease of a semaphore (`--semaphore N`).
//!
//! # Layout
//! - `mod.rs`: the flags, the exit codes, and the run: connect, acquire, run the
//!   command, release, close the session.
//! - `held.rs`: the three kinds of lock behind one type, and why the exclusive and
//!   shared modes on one path exclude each other.
//! - `child.rs`: the command's process group, signal forwarding, and stopping the
//!   command when the lock is lost.
//!
//! The session is closed before `zlock lock` exits, whatever happened: closing it
//! deletes every ephemeral node it made, so an acquire abandoned on a signal, or a
//! cleanup that failed, leaves nothing behind. The close is awaited (a spawned cleanup
//! task would die with the process).

mod child;
mod held;

use std::time::Duration;

use zlock::{Client, ConnectionState, Error};

use super::tls::TlsArgs;
use child::Signals;
use held::{Kind, Wait};

const DEFAULT_SERVER: &str = "127.0.0.1:2181";

/// The exit codes of `zlock lock` other than the command's own (listed in
/// [`AFTER_HELP`] and the README).
pub mod exit {
    /// An error of `zlock lock` itself: cannot connect, a server error while acquiring.
    pub const ERROR: i32 = 1;
    /// A usage error (clap's code for them; here also an empty command).
    pub const USAGE: i32 = 2;
    /// `-n` found the lock held, or `--timeout` ran out: flock's default for both
    /// (`-E` changes it).
    pub const CONFLICT_DEFAULT: i32 = 1;
    /// The lock was lost while the command ran, and the command was stopped. 75 is
    /// sysexits' EX_TEMPFAIL ("try again later"): flock exits 1 or a sysexits code for
    /// its own errors but never 75; it is below 126 (cannot execute, not found) and
    /// 128+signal; and a 3 would be a likely code of the command itself.
    pub const LOCK_LOST: i32 = 75;
    /// The command was found but could not be run (as the shell).
    pub const CANNOT_EXECUTE: i32 = 126;
    /// The command was not found (as the shell).
    pub const NOT_FOUND: i32 = 127;
    /// 128 + the signal (SIGINT, SIGTERM) that ended `zlock lock` (as the shell).
    pub const SIGNAL_BASE: i32 = 128;
}

/// `zlock lock --help`'s epilogue: examples, environment, exit codes.
pub const AFTER_HELP: &str = concat!(
    "\
Examples:
  zlock lock /locks/backup -- ./backup.sh
  zlock lock -n /locks/cron -- ./job.sh          # skip this run if the last one still runs
  zlock lock --timeout 10s -E 9 /locks/db -- ./migrate.sh
  zlock lock --shared /locks/catalog -- ./read-report.sh
  zlock lock --semaphore 3 /pools/ffmpeg -- ./encode.sh in.mov
  zlock lock --lock-delay 10s /locks/pay -- ./settle.sh   # a killed holder: 10 s gap
  zlock lock /locks/backup -- sh -c 'echo $ZLOCK_FENCING_TOKEN $ZLOCK_LOCK_NODE'

The command runs in a process group of its own (unless --foreground) and gets:
  ZLOCK_LOCK_NODE      the node held (for --semaphore: the lease node)
  ZLOCK_FENCING_TOKEN  that node's czxid; for the exclusive lock strictly increasing
                       across holders, so a resource can refuse a stale holder
  ZLOCK_SESSION_ID     the session holding it, hex (0x...), as zkCli prints it
SIGINT and SIGTERM are passed on to the command; once it has exited the lock is
released. If the lock is lost while the command runs (the session expired, or the
connection stayed down for a third of the session timeout), zlock lock says so on
stderr, sends SIGTERM to the command, SIGKILL after --kill-after, and exits 75.

Exit codes:
  the command's      the command ran and exited (128+N if a signal N ended it)
  1 (or -E N)        -n: the lock is held; --timeout: it did not come in time
  1                  an error of zlock lock: cannot connect, a server error
  2                  usage error
  75                 the lock was lost while the command ran; the command was stopped
  126, 127           the command cannot be run / was not found
  128+N              zlock lock got signal N (SIGINT 2, SIGTERM 15): passed on to the
                     command while it ran; while waiting, the wait was abandoned
                     and no node is left behind\n\n",
    super::tls::tls_help!()
);

#[derive(clap::Args, Debug)]
pub struct LockArgs {
    /// The lock path; contenders' nodes are created under it
    #[arg(value_parser = parse_lock_path)]
    pub path: String,
    /// Do not wait: if the lock is held, exit at once with the conflict code (1, or
    /// -E), leaving no node behind (flock -n)
    #[arg(short = 'n', long, conflicts_with = "timeout")]
    pub no_wait: bool,
    /// Give up if the lock is not acquired within this time (e.g. 10s, 500ms, 2m):
    /// prints `timed out waiting for lock <path>` and exits with the conflict code (1,
    /// or -E), leaving no node behind (flock -w)
    #[arg(long, short = 'w', value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// The exit code when -n finds the lock held or --timeout runs out (flock -E)
    #[arg(short = 'E', long, value_name = "N", default_value_t = exit::CONFLICT_DEFAULT,
          value_parser = clap::value_parser!(i32).range(0..=255))]
    pub conflict_exit_code: i32,
    /// Take the shared (read) side of the read-write lock on the path: shared holders
    /// run at once, a `zlock lock` without --shared on the same path excludes them all
    /// (flock -s)
    #[arg(short = 's', long)]
    pub shared: bool,
    /// Take one of N leases of a semaphore on the path instead (at most N commands at
    /// once; all users of the path must give the same N). Its nodes are under
    /// <path>/leases, apart from the lock's
    #[arg(long, value_name = "N", conflicts_with = "shared",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub semaphore: Option<u32>,
    /// When the lock is lost the command gets SIGTERM; if it is still running this long
    /// after, SIGKILL (timeout -k). zlock lock then exits 75
    #[arg(long, short = 'k', value_name = "DURATION", default_value = "10s",
          value_parser = parse_duration)]
    pub kill_after: Duration,
    /// Lock-delay (e.g. 5s, at most 60s): if this holder's session ends without a
    /// release (zlock lock was killed, or paused past its session timeout), the server
    /// grants the lock to no one for this long, so a paused holder can notice first.
    /// Needs a zlock server (exit 1 against Apache ZooKeeper). Default: the server's
    /// (zlock.lockDelayMs, none unless set)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lock_delay: Option<Duration>,
    /// Run the command in zlock lock's process group (timeout --foreground): for a
    /// command that reads the terminal. Signals, and the stop on lock loss, then reach
    /// the command's process only, not the processes it started
    #[arg(long)]
    pub foreground: bool,
    /// Server address, host:port [default: $ZLOCK_SERVER, else 127.0.0.1:2181]
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// Session timeout to ask for, ms: a crashed `zlock lock` frees the lock after it,
    /// and a holder cut off from the server for a third of it counts the lock as lost
    #[arg(long, value_name = "MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(i32).range(1..))]
    pub session_timeout: i32,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The command to run while holding the lock (after `--`)
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl LockArgs {
    fn kind(&self) -> Kind {
        match (self.semaphore, self.shared) {
            (Some(n), _) => Kind::Semaphore(usize::try_from(n).unwrap_or(usize::MAX)),
            (None, true) => Kind::Shared,
            (None, false) => Kind::Exclusive,
        }
    }

    fn wait(&self) -> Wait {
        match (self.no_wait, self.timeout) {
            (true, _) => Wait::No,
            (false, Some(d)) => Wait::Within(d),
            (false, None) => Wait::Forever,
        }
    }
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

/// Connects (over TLS with `tls`) within the session timeout; a clear message on
/// failure.
pub async fn connect(
    addr: &str,
    session_timeout_ms: i32,
    tls: &TlsArgs,
) -> Result<
    (
        Client,
        tokio::sync::mpsc::UnboundedReceiver<zlock::WatcherEvent>,
    ),
    String,
> {
    let tls = tls.options().map_err(|e| e.to_string())?;
    let wait = Duration::from_millis(u64::try_from(session_timeout_ms).unwrap_or(0));
    let builder = Client::builder(addr)
        .session_timeout_ms(session_timeout_ms)
        .tls(tls);
    match tokio::time::timeout(wait, builder.connect()).await {
        Err(_) => Err(format!(
            "cannot connect to {addr}: timed out after {wait:?}"
        )),
        Ok(Err(
            e @ (Error::Connect(..)
            | Error::HandshakeClosed(_)
            | Error::Tls(_)
            | Error::TlsHandshake(..)),
        )) => Err(format!("{e}")),
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
            return exit::ERROR;
        }
    };
    rt.block_on(run_async(a))
}

async fn run_async(a: LockArgs) -> i32 {
    // Installed first, so a signal while connecting or waiting ends us cleanly.
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("zlock lock: cannot handle signals: {e}");
            return exit::ERROR;
        }
    };
    let addr = server_addr(a.server.as_deref());
    let client = tokio::select! {
        r = connect(&addr, a.session_timeout, &a.tls) => match r {
            Ok((c, _events)) => c,
            Err(msg) => {
                eprintln!("zlock lock: {msg}");
                return exit::ERROR;
            }
        },
        sig = signals.recv() => return exit::SIGNAL_BASE + sig,
    };
    let code = hold_and_run(&client, &a, &mut signals).await;
    // Awaited, not spawned: the close deletes every node of the session (an acquire
    // abandoned on a signal included), and the process must not exit before the
    // server has done it. On a lost session it returns at once.
    let _ = client.close().await;
    code
}

async fn hold_and_run(client: &Client, a: &LockArgs, signals: &mut Signals) -> i32 {
    let acquired = tokio::select! {
        r = held::acquire(client, &a.path, a.kind(), a.wait(), a.lock_delay) => r,
        // Dropping the acquire abandons it; the session's close (in `run_async`)
        // removes its node if the recipe's own cleanup task has not yet.
        sig = signals.recv() => return exit::SIGNAL_BASE + sig,
    };
    let held = match acquired {
        Ok(Some(h)) => h,
        Ok(None) => {
            if a.no_wait && a.semaphore.is_some() {
                eprintln!("no lease of {} is free; not waiting (--no-wait)", a.path);
            } else if a.no_wait {
                eprintln!("lock {} is held; not waiting (--no-wait)", a.path);
            } else {
                eprintln!("timed out waiting for lock {}", a.path);
            }
            return a.conflict_exit_code;
        }
        Err(e) => {
            eprintln!("zlock lock: acquiring {}: {e}", a.path);
            return exit::ERROR;
        }
    };
    let env = [
        ("ZLOCK_FENCING_TOKEN", held.fencing_token().to_string()),
        ("ZLOCK_LOCK_NODE", held.node().to_owned()),
        // `{:x}` of an i64 is its two's complement, as Java's Long.toHexString.
        ("ZLOCK_SESSION_ID", format!("0x{:x}", client.session_id())),
    ];
    let (mut child, target) = match child::spawn(&a.command, &env, a.foreground) {
        Ok(c) => c,
        Err(e) => {
            let program = a.command.first().map_or("", String::as_str);
            eprintln!("zlock lock: cannot run {program}: {e}");
            let _ = held.release().await;
            return match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                std::io::ErrorKind::InvalidInput => exit::USAGE,
                _ => exit::CANNOT_EXECUTE,
            };
        }
    };
    // The recipes' safe window, a third of the negotiated timeout, for the message.
    let third = client.session_timeout_ms() / 3;
    let window = Duration::from_millis(u64::try_from(third).unwrap_or(0));
    let describe = |state| format!("lock {} lost ({})", a.path, why_lost(state, window));
    let ended = child::supervise(
        &mut child,
        target,
        signals,
        held.lost(),
        a.kill_after,
        describe,
    )
    .await;
    if let Err(e) = held.release().await {
        // After a loss the delete fails with the session; nothing to add to the
        // message already printed.
        if ended.lost.is_none() {
            eprintln!("zlock lock: releasing {}: {e}", a.path);
        }
    }
    if ended.lost.is_some() {
        // Whatever the command's status: its work may have overlapped another holder's.
        return exit::LOCK_LOST;
    }
    if let Some(sig) = ended.signal {
        return exit::SIGNAL_BASE + sig;
    }
    match ended.status {
        Ok(st) => child::exit_code(st),
        Err(e) => {
            eprintln!("zlock lock: waiting for the command: {e}");
            exit::ERROR
        }
    }
}

/// Why `lost()` fired, in words.
fn why_lost(state: ConnectionState, window: Duration) -> String {
    match state {
        ConnectionState::Lost => "session expired".into(),
        ConnectionState::Suspended => {
            format!("no connection to the server for {window:?}, a third of the session timeout")
        }
        ConnectionState::Closed => "session closed".into(),
        other => format!("connection {other:?}"),
    }
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
