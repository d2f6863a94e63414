//! `zlock snapshot save | status`: a backup of a running server, taken through its
//! AdminServer's `snapshot` command (ZooKeeper 3.9's), and what a backup file holds.
//! The file format is `zlock_server::backup`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use http_body_util::BodyExt;
use hyper::header::AUTHORIZATION;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use indicatif::{ProgressBar, ProgressStyle};
use zlock_server::backup::{self, Header};

#[derive(Subcommand)]
pub enum SnapshotCmd {
    /// Take a backup of a running server through its admin server (ZooKeeper 3.9's
    /// `snapshot` command) and write it to FILE, its checksums checked.
    #[command(after_help = SAVE_HELP)]
    Save(SaveArgs),
    /// What a backup file holds (last zxid, znodes, sessions, where it comes from), its
    /// checksums and its state checked; exit 1 if it is damaged.
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Write a new data directory from a backup, before a server starts on it: the
    /// tree as the backup has it, no session, the zxid moved to the next epoch.
    #[command(after_help = RESTORE_HELP)]
    Restore(RestoreArgs),
}

const RESTORE_HELP: &str = "\
Example:
  zlock snapshot restore backup.zlock --data-dir /var/lib/zlock-new
  zlock server --data-dir /var/lib/zlock-new

What the restored server starts from:
  - the backup's tree: data, ACLs, every Stat field, TTL and container nodes, lock-delays;
  - no session: each session of the backup is closed as an expiry closes it, so its
    ephemeral nodes are deleted and its place in lock queues goes to the next waiter;
  - its zxid moved to the next epoch (0x100000000 above a backup made in epoch 0), so that
    a ZooKeeper client that saw a later change of the old server is not refused.
The data directory must hold no data yet (a myid file may be there).

A new ensemble: run it on every member with the same file and the same member list, then
start the members:
  zlock snapshot restore backup.zlock --data-dir /data/zl1 --myid 1 --config zoo.cfg
  (zoo.cfg holding the new ensemble's server.N lines; or --server N=HOST:PORT:PORT;PORT
  flags for each member, as `zlock server` takes them)
Each member gets the same Raft log start: the state as a snapshot, the new ensemble's
membership. Start every member on its restored directory; they elect a leader.";

#[derive(Args)]
pub struct RestoreArgs {
    /// The backup file (`zlock snapshot save`).
    pub file: PathBuf,
    /// The new data directory (dataDir).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Where the log goes, if not in the data directory (dataLogDir).
    #[arg(long)]
    pub data_log_dir: Option<PathBuf>,
    /// The server's zoo.cfg, for dataDir, dataLogDir, extendedTypesEnabled and an
    /// ensemble's server.N lines (the flags override it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// This member's id in the new ensemble (else <data-dir>/myid), as `zlock server`
    /// takes it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=255))]
    pub myid: Option<u64>,
    /// A member of the new ensemble, as `zlock server --server` takes it; repeat for
    /// every member, this one included.
    #[arg(long = "server", value_name = "N=HOST:PORT:PORT[;PORT]", value_parser = crate::server_flag)]
    pub servers: Vec<(String, zlock_server::config::MemberSpec)>,
}

const SAVE_HELP: &str = "\
Examples:
  zlock snapshot save --server 127.0.0.1:8080 --auth digest:root:secret backup.zlock
  zlock snapshot save --server 10.0.0.2:8080 --auth ip backup.zlock

The server needs its admin server on (admin.enableServer=true or --admin-port) and
answers only a caller whose identity has ALL on / (as ZooKeeper 3.9 asks): `digest` with
a user and password (or `ip` for the caller's address) that an ACL entry on / grants.
A member of an ensemble answers with its own applied state: every change up to the
file's last zxid, none after. Progress goes to stderr.";

const STATUS_HELP: &str = "\
Example:
  zlock snapshot status backup.zlock

Exit 0: the file is whole (both checksums match and the state decodes); 1: it is
damaged or not a backup (the message says which part).";

#[derive(Args)]
pub struct SaveArgs {
    /// The admin server, HOST:PORT (admin.serverAddress and admin.serverPort).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub server: String,
    /// Credentials, SCHEME:CREDENTIALS as the Authorization header carries them:
    /// `digest:USER:PASSWORD`, or `ip` (the address this command connects from).
    #[arg(long)]
    pub auth: Option<String>,
    /// The admin server's commandURL (admin.commandURL).
    #[arg(long, default_value = "/commands")]
    pub command_url: String,
    /// How long to wait for the whole backup, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Where to write the backup (written beside it first, renamed once checked).
    pub file: PathBuf,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Print the fields as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The backup file.
    pub file: PathBuf,
}

/// Runs a `snapshot` subcommand; the exit code.
pub fn run(cmd: SnapshotCmd) -> i32 {
    let result = match cmd {
        SnapshotCmd::Save(a) => save(&a),
        SnapshotCmd::Status(a) => status(&a),
        SnapshotCmd::Restore(a) => restore(&a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("zlock snapshot: {e:#}");
            1
        }
    }
}

/// `Authorization`'s value for `--auth SCHEME:CREDENTIALS` (`ip` and `x509` carry none).
fn authorization(auth: &str) -> String {
    match auth.split_once(':') {
        Some((scheme, credentials)) => format!("{scheme} {credentials}"),
        None => auth.to_owned(),
    }
}

fn save(a: &SaveArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let tmp = temp_beside(&a.file);
    let fetched = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(a.timeout), fetch(a, &tmp))
            .await
            .map_err(|_| anyhow::anyhow!("no whole backup within {} s", a.timeout))?
    });
    if let Err(e) = fetched {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let bytes = std::fs::read(&tmp)?;
    let checked = backup::decode(&bytes, zlock_core::Config::default());
    let (header, _) = match checked {
        Ok(h) => h,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            anyhow::bail!("the backup received from {} is damaged: {e}", a.server);
        }
    };
    std::fs::rename(&tmp, &a.file)?;
    eprintln!(
        "saved {}: last zxid 0x{:x}, {} znodes, {} sessions, {} bytes, checksums ok, in {:.1} s",
        a.file.display(),
        header.zxid,
        header.nodes,
        header.sessions,
        bytes.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `FILE.part` beside `file`.
fn temp_beside(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".part");
    file.with_file_name(name)
}

/// GETs the snapshot into `into`, with a progress bar on stderr.
async fn fetch(a: &SaveArgs, into: &Path) -> anyhow::Result<()> {
    let stream = tokio::net::TcpStream::connect(&a.server)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to the admin server at {}: {e}", a.server))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let url = format!(
        "{}/snapshot?streaming=true",
        a.command_url.trim_end_matches('/')
    );
    let mut req = Request::get(url).header("host", &a.server);
    if let Some(auth) = &a.auth {
        req = req.header(AUTHORIZATION, authorization(auth));
    }
    let resp = sender
        .send_request(req.body(http_body_util::Empty::<bytes::Bytes>::new())?)
        .await?;
    let status = resp.status();
    if status != StatusCode::OK {
        let body = resp.into_body().collect().await?.to_bytes();
        let why = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_owned());
        let hint = match status {
            StatusCode::UNAUTHORIZED => " (give --auth digest:USER:PASSWORD)",
            StatusCode::FORBIDDEN => " (the identity needs ALL on /)",
            StatusCode::TOO_MANY_REQUESTS => {
                " (admin.rateLimiterIntervalInMS allows one snapshot per interval)"
            }
            _ => "",
        };
        anyhow::bail!("the admin server answered {status}: {why}{hint}");
    }
    let size = resp
        .headers()
        .get("snapshot_size")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let bar = if a.quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::with_draw_target(size, indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(into)?);
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            out.write_all(&data)?;
            bar.inc(data.len() as u64);
        }
    }
    bar.finish_and_clear();
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(())
}

fn status(a: &StatusArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&a.file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", a.file.display()))?;
    let (header, state) = backup::decode(&bytes, zlock_core::Config::default())
        .map_err(|e| anyhow::anyhow!("{} is damaged: {e}", a.file.display()))?;
    let decoded = state.tree.len() as u64;
    if decoded != header.nodes {
        anyhow::bail!(
            "{} is damaged: its header says {} znodes, its state holds {decoded}",
            a.file.display(),
            header.nodes
        );
    }
    print(a, &header, bytes.len());
    Ok(())
}

fn print(a: &StatusArgs, h: &Header, size: usize) {
    if a.json {
        let v = serde_json::json!({
            "file": a.file.display().to_string(),
            "format_version": backup::VERSION,
            "last_zxid": format!("0x{:x}", h.zxid),
            "applied_index": h.applied,
            "state_time_ms": h.time_ms,
            "znodes": h.nodes,
            "sessions": h.sessions,
            "source": h.source,
            "file_size": size,
            "checksums": "ok",
        });
        println!("{v}");
        return;
    }
    println!("file           {}", a.file.display());
    println!("format         zlock backup, version {}", backup::VERSION);
    println!("last zxid      0x{:x}", h.zxid);
    println!("applied index  {}", h.applied);
    println!("state time     {} ms since the epoch", h.time_ms);
    println!("znodes         {}", h.nodes);
    println!("sessions       {}", h.sessions);
    println!("source         {}", h.source);
    println!("file size      {size} bytes");
    println!("checksums      ok (header and payload; the state decodes)");
}

fn restore(a: &RestoreArgs) -> anyhow::Result<()> {
    let mut cfg = match &a.config {
        Some(p) => zlock_server::ServerConfig::from_file(p)?,
        None => zlock_server::ServerConfig::default(),
    };
    if let Some(d) = &a.data_dir {
        cfg.data_dir = d.clone();
    } else if a.config.is_none() {
        anyhow::bail!("give --data-dir (or --config naming a dataDir)");
    }
    if let Some(d) = &a.data_log_dir {
        cfg.data_log_dir = Some(d.clone());
    }
    if let Some(v) = a.myid {
        cfg.declared.myid = Some(v);
    }
    if !a.servers.is_empty() {
        cfg.declared.members.clear();
        for (flag, m) in &a.servers {
            cfg.declared
                .add(zlock_server::config::Origin::Flag(flag.clone()), m.clone())?;
        }
    }
    cfg.resolve_ensemble()?;
    let r = zlock_server::restore::restore(&a.file, &cfg)?;
    eprintln!(
        "restored {} into {}{}: {} znodes from zxid 0x{:x} ({}), {} sessions closed ({} \
         ephemeral nodes deleted), the server starts at zxid 0x{:x}",
        a.file.display(),
        cfg.data_dir.display(),
        cfg.ensemble.as_ref().map_or(String::new(), |e| format!(
            " as member {} of {}",
            e.me,
            e.members.len()
        )),
        r.header.nodes,
        r.header.zxid,
        r.header.source,
        r.sessions_closed,
        r.ephemerals_deleted,
        r.zxid
    );
    if let Some(id) = &r.ensemble_id {
        eprintln!(
            "new ensemble id {id}: its members refuse any member of another ensemble (the \
             backup's own among them); add `zlock.ensembleId={id}` to every member's zoo.cfg \
             so that a member whose data directory is lost rejoins this ensemble"
        );
    }
    Ok(())
}
