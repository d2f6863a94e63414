//! zkCli-style one-shot commands: `zlock ls|get|set|create|delete|deleteall|stat|config`.
//!
//! Each command opens a session, does its work, closes the session and exits. Output
//! follows Apache ZooKeeper's zkCli: `ls` prints `[a, b]`, `-s` prints the Stat one field
//! a line, and errors print zkCli's messages (`Node does not exist: /x`) to stderr with
//! exit code 1. Bad paths and flags are rejected by the argument parser (exit code 2).

use zlock::{Client, CreateMode, Error, ErrorCode, Stat};
use zlock_proto::records::{
    Acl, Create2Response, CreateRequest, CreateTtlRequest, GetDataResponse, PathWatchRequest,
};
use zlock_proto::{OpCode, Reader, Record, Request};

use super::tls::TlsArgs;

const DEFAULT_SERVER: &str = "127.0.0.1:2181";

/// Connection flags shared by every command.
#[derive(clap::Args, Debug, Clone)]
pub struct Conn {
    /// Server address, host:port [default: $ZLOCK_SERVER, else 127.0.0.1:2181]
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// Session timeout to ask for, ms (also how long to wait for the connection)
    #[arg(long, value_name = "MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(i32).range(1..))]
    pub timeout: i32,
    /// Authenticate the session first, as zkCli's addauth: SCHEME:CREDENTIALS, e.g.
    /// digest:super:password (repeat for several)
    #[arg(long, value_name = "SCHEME:AUTH")]
    pub auth: Vec<String>,
    #[command(flatten)]
    pub tls: TlsArgs,
}

impl Conn {
    fn addr(&self) -> String {
        if let Some(s) = &self.server {
            return s.clone();
        }
        match std::env::var("ZLOCK_SERVER") {
            Ok(s) if !s.trim().is_empty() => s.trim().to_owned(),
            _ => DEFAULT_SERVER.to_owned(),
        }
    }
}

/// Appends the connection notes to a command's examples.
macro_rules! with_conn_help {
    ($s:expr) => {
        concat!(
            $s,
            "\n\nThe server is --server, else $ZLOCK_SERVER, else 127.0.0.1:2181.\n\
             Errors print zkCli's messages to stderr and exit with code 1;\n\
             bad paths or flags exit with code 2.\n\n",
            $crate::cmd::tls::tls_help!()
        )
    };
}

/// The zkCli-style commands (flattened into `zlock`'s top-level commands).
#[derive(clap::Subcommand, Debug)]
pub enum ZkCmd {
    /// List a node's children: `[a, b]` (zkCli `ls`)
    #[command(after_help = with_conn_help!(
        "Examples:\n  zlock ls /\n  zlock ls -s /orders          # children, then the Stat\n  \
         zlock ls -R /orders          # every path under /orders, one a line\n  \
         zlock ls / --server 10.0.0.5:2181"
    ))]
    Ls(LsArgs),
    /// Print a node's data (zkCli `get`)
    #[command(after_help = with_conn_help!(
        "Examples:\n  zlock get /config/db\n  zlock get -s /config/db      # data, then the Stat"
    ))]
    Get(GetArgs),
    /// Set a node's data (zkCli `set`)
    #[command(after_help = with_conn_help!(
        "Examples:\n  zlock set /config/db postgres://db1\n  \
         zlock set /config/db postgres://db2 -v 3   # only if dataVersion is 3"
    ))]
    Set(SetArgs),
    /// Create a node; prints `Created <path>` (zkCli `create`)
    #[command(after_help = with_conn_help!(
        "Examples:\n  zlock create /orders\n  zlock create /config/db postgres://db1\n  \
         zlock create -s /orders/job- payload   # Created /orders/job-0000000000\n  \
         zlock create -c /locks                 # a container: removed once emptied\n  \
         zlock create -t 60000 /tmp/lease       # TTL node (server needs extended types)\n  \
         zlock create -e /me                    # ephemeral: gone when this command exits"
    ))]
    Create(CreateArgs),
    /// Delete a node that has no children (zkCli `delete`)
    #[command(after_help = with_conn_help!(
        "Examples:\n  zlock delete /orders/job-0000000000\n  \
         zlock delete /config/db -v 4           # only if dataVersion is 4\n  \
         zlock deleteall /orders                # a node and everything under it"
    ))]
    Delete(DeleteArgs),
    /// Delete a node and everything under it (zkCli `deleteall`)
    #[command(after_help = with_conn_help!("Examples:\n  zlock deleteall /orders"))]
    Deleteall(DeleteallArgs),
    /// Print a node's Stat, one field a line (zkCli `stat`)
    #[command(after_help = with_conn_help!(
        "Examples:\n  zlock stat /orders\n\n\
         Prints cZxid, ctime, mZxid, mtime, pZxid, cversion, dataVersion, aclVersion,\n\
         ephemeralOwner, dataLength and numChildren, as zkCli does."
    ))]
    Stat(StatArgs),
    /// Print the ensemble's configuration, `/zookeeper/config` (zkCli `config`)
    #[command(after_help = with_conn_help!(
        "Examples:\n  zlock config                 # server.N lines, then version=<hex>\n  \
         zlock config -s              # then the node's Stat\n  \
         zlock config -c              # <version> <host:clientPort,...>\n  \
         zlock config -w              # then wait until it changes; print the event\n\n\
         An ensemble member prints one line per member in ZooKeeper's dynamic-config\n\
         format, server.N=host:quorumPort:electionPort:participant|observer;clientHost:clientPort,\n\
         in id order, then version=<hex> (0: the configuration from zoo.cfg). A standalone\n\
         server prints an empty line, as a standalone ZooKeeper does."
    ))]
    Config(ConfigArgs),
    /// Change the ensemble's members online (zkCli `reconfig`; needs reconfigEnabled and
    /// a super user, --auth digest:super:PASSWORD)
    #[command(after_help = with_conn_help!(
        "Examples:\n  \
         zlock reconfig --auth digest:super:pw --add 'server.4=10.0.0.4:2888:3888;2181'\n  \
         zlock reconfig --auth digest:super:pw --remove 3\n  \
         zlock reconfig --auth digest:super:pw --add 'server.4=10.0.0.4:2888:3888:observer;2181' --remove 1,2\n  \
         zlock reconfig --auth digest:super:pw --members 'server.1=...,server.2=...,server.3=...'\n  \
         zlock reconfig --auth digest:super:pw --file zoo.cfg.dynamic.next -v 1c\n\n\
         zkCli's single-dash spellings work too (-add, -remove, -members, -file).\n\
         Prints \"Committed new configuration:\" and the new configuration, as zkCli.\n\
         A member to add is started first (blank, its server.N lines the current\n\
         members' and its own); it catches up as a learner, then votes. The change is\n\
         refused unless a majority of the new voters is up and caught up\n\
         (NewConfigNoQuorum), with a stale -v (BadVersion), or if fewer than two voters\n\
         would be left (BadArguments). Removing a member (the leader too) is safe\n\
         under load; stop the removed member's process afterwards."
    ))]
    Reconfig(ReconfigArgs),
    /// Print the digest of USER:PASSWORD, for a digest ACL or the server's superDigest
    /// (ZooKeeper's DigestAuthenticationProvider.generateDigest)
    #[command(after_help = "Examples:\n  zlock digest super:secret\n  \
        zlock server --reconfig-enabled --super-digest \"$(zlock digest super:secret)\"")]
    Digest(DigestArgs),
}

#[derive(clap::Args, Debug)]
pub struct DigestArgs {
    /// USER:PASSWORD
    pub user_password: String,
}

#[derive(clap::Args, Debug)]
pub struct ReconfigArgs {
    /// Servers to add (or to change), comma-separated server.N=host:quorumPort:electionPort[:participant|:observer];[host:]clientPort
    #[arg(long = "add", value_name = "SERVERS")]
    pub add: Option<String>,
    /// Server ids to remove, comma-separated
    #[arg(long = "remove", value_name = "IDS")]
    pub remove: Option<String>,
    /// The whole new member list, comma-separated server.N=... (not with --add/--remove)
    #[arg(long = "members", value_name = "SERVERS", conflicts_with_all = ["add", "remove", "file"])]
    pub members: Option<String>,
    /// A dynamic config file holding the whole new member list (server.N lines)
    #[arg(long = "file", value_name = "PATH", conflicts_with_all = ["add", "remove"])]
    pub file: Option<std::path::PathBuf>,
    /// Only if the current configuration's version is this (hex, as `zlock config` shows)
    #[arg(short = 'v', long = "version", value_name = "HEX", value_parser = parse_hex_version)]
    pub version: Option<i64>,
    /// Also print the configuration node's Stat
    #[arg(short = 's', long = "stat")]
    pub stat: bool,
    #[command(flatten)]
    pub conn: Conn,
}

fn parse_hex_version(s: &str) -> Result<i64, String> {
    i64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|_| {
        format!("-v must be a configuration version in hex (zlock config shows it), not {s:?}")
    })
}

/// zkCli's single-dash long flags as clap's double-dash ones: `-client-configuration`
/// for every command, `reconfig`'s `-add`, `-remove`, `-members`, `-file`. Nothing after
/// `--` (`zlock lock`'s command) is touched.
pub fn zkcli_spellings(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let reconfig = args.get(1).and_then(|a| a.to_str()) == Some("reconfig");
    let mut command = false;
    args.into_iter()
        .map(|a| match a.to_str() {
            _ if command => a,
            Some("--") => {
                command = true;
                a
            }
            Some("-client-configuration") => "--client-configuration".into(),
            Some(f @ ("-add" | "-remove" | "-members" | "-file")) if reconfig => {
                format!("-{f}").into()
            }
            _ => a,
        })
        .collect()
}

#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    /// Only the version and the client connection string: `<version> <host:port,...>`
    #[arg(short = 'c', long = "client")]
    pub client: bool,
    /// Also print the node's Stat
    #[arg(short = 's', long = "stat")]
    pub stat: bool,
    /// Watch the configuration: wait until it changes, then print the event
    #[arg(short = 'w', long = "watch")]
    pub watch: bool,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(clap::Args, Debug)]
pub struct LsArgs {
    #[arg(value_parser = parse_path)]
    pub path: String,
    /// Also print the node's Stat
    #[arg(short = 's', long = "stat")]
    pub stat: bool,
    /// Recursive: every path under <PATH>, one a line
    #[arg(short = 'R', long = "recursive")]
    pub recursive: bool,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[arg(value_parser = parse_path)]
    pub path: String,
    /// Also print the node's Stat
    #[arg(short = 's', long = "stat")]
    pub stat: bool,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(clap::Args, Debug)]
pub struct SetArgs {
    #[arg(value_parser = parse_path)]
    pub path: String,
    /// The new data (UTF-8)
    pub data: String,
    /// Only if the node's dataVersion is this (-1 = any)
    #[arg(
        short = 'v',
        long = "version",
        value_name = "VERSION",
        allow_negative_numbers = true
    )]
    pub version: Option<i32>,
    /// Print the node's new Stat
    #[arg(short = 's', long = "stat")]
    pub stat: bool,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// The node to create; with -s the server appends a 10-digit counter
    #[arg(value_parser = parse_create_path)]
    pub path: String,
    /// The node's data (UTF-8); without it the data is null, as in zkCli
    pub data: Option<String>,
    /// Ephemeral: removed when the session ends (right after this command)
    #[arg(short = 'e', long = "ephemeral")]
    pub ephemeral: bool,
    /// Sequential: append a monotonically increasing counter to the name
    #[arg(short = 's', long = "sequential")]
    pub sequential: bool,
    /// Container: removed by the server once its last child is gone
    #[arg(short = 'c', long = "container", conflicts_with_all = ["ephemeral", "sequential", "ttl"])]
    pub container: bool,
    /// TTL node: removed once unmodified and childless for this many ms
    #[arg(short = 't', long = "ttl", value_name = "MS", conflicts_with = "ephemeral",
          value_parser = clap::value_parser!(i64).range(1..))]
    pub ttl: Option<i64>,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(clap::Args, Debug)]
pub struct DeleteArgs {
    #[arg(value_parser = parse_path)]
    pub path: String,
    /// Only if the node's dataVersion is this (-1 = any)
    #[arg(
        short = 'v',
        long = "version",
        value_name = "VERSION",
        allow_negative_numbers = true
    )]
    pub version: Option<i32>,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(clap::Args, Debug)]
pub struct DeleteallArgs {
    #[arg(value_parser = parse_path)]
    pub path: String,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(clap::Args, Debug)]
pub struct StatArgs {
    #[arg(value_parser = parse_path)]
    pub path: String,
    #[command(flatten)]
    pub conn: Conn,
}

/// ZooKeeper's PathUtils.validatePath.
fn validate_path(path: &str, sequential_ok: bool) -> Result<(), String> {
    if path.is_empty() {
        return Err("Path length must be > 0".into());
    }
    if !path.starts_with('/') {
        return Err("Path must start with / character".into());
    }
    if path.len() == 1 {
        return Ok(());
    }
    let body = if sequential_ok {
        path.strip_suffix('/').unwrap_or(path)
    } else {
        path
    };
    if body.ends_with('/') {
        return Err("Path must not end with / character".into());
    }
    for (i, seg) in body.split('/').enumerate().skip(1) {
        if seg.is_empty() {
            return Err(format!("empty node name specified @{i}"));
        }
        if seg == "." || seg == ".." {
            return Err(format!("relative paths not allowed @{i}"));
        }
        if let Some(c) = seg.chars().find(|&c| {
            c == '\0'
                || ('\u{1}'..='\u{1f}').contains(&c)
                || ('\u{7f}'..='\u{9f}').contains(&c)
                || ('\u{e000}'..='\u{f8ff}').contains(&c)
                || ('\u{fff0}'..='\u{ffff}').contains(&c)
        }) {
            return Err(format!("invalid character {c:?}"));
        }
    }
    Ok(())
}

fn parse_path(s: &str) -> Result<String, String> {
    validate_path(s, false).map(|()| s.to_owned())
}

/// A create path may end in `/` when sequential (the counter becomes the name).
fn parse_create_path(s: &str) -> Result<String, String> {
    validate_path(s, true).map(|()| s.to_owned())
}

/// A failure, printed zkCli-style.
struct Failure(String);

impl Failure {
    /// zkCli's CliWrapperException messages.
    fn zk(e: Error, path: &str) -> Failure {
        let msg = match &e {
            Error::Server(ErrorCode::NoNode) => format!("Node does not exist: {path}"),
            Error::Server(ErrorCode::NodeExists) => format!("Node already exists: {path}"),
            Error::Server(ErrorCode::NotEmpty) => format!("Node not empty: {path}"),
            Error::Server(ErrorCode::BadVersion) => format!("version No is not valid : {path}"),
            Error::Server(ErrorCode::NoAuth) => format!("Insufficient permission : {path}"),
            Error::Server(ErrorCode::NoChildrenForEphemerals) => {
                format!("Ephemerals cannot have children: {path}")
            }
            Error::Server(ErrorCode::BadArguments) => {
                format!("Arguments are not valid : {path}")
            }
            Error::Server(ErrorCode::InvalidAcl) => format!("Acl is not valid : {path}"),
            Error::Server(ErrorCode::Unimplemented) => {
                format!("Operation not supported by the server (extended types off?): {path}")
            }
            Error::Server(ErrorCode::ReconfigDisabled) => "Reconfig is disabled: the server \
                needs reconfigEnabled=true (zlock server --reconfig-enabled)"
                .to_owned(),
            Error::Server(ErrorCode::NewConfigNoQuorum) => "No quorum of new config is \
                connected and up-to-date with the leader of last committed config - try \
                invoking reconfiguration after new servers are connected and synced"
                .to_owned(),
            Error::Server(ErrorCode::ReconfigInProgress) => {
                "Another reconfiguration is in progress -- concurrent reconfigs not supported \
                 (yet)"
                    .to_owned()
            }
            other => format!("{other}: {path}"),
        };
        Failure(msg)
    }
}

type Res<T> = Result<T, Failure>;

/// Runs one command; false after printing an error to stderr (exit code 1).
pub fn run(cmd: ZkCmd) -> bool {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("starting the async runtime: {e}");
            return false;
        }
    };
    match rt.block_on(dispatch(cmd)) {
        Ok(out) => {
            print!("{out}");
            true
        }
        Err(Failure(msg)) => {
            eprintln!("{msg}");
            false
        }
    }
}

fn conn_of(cmd: &ZkCmd) -> &Conn {
    match cmd {
        ZkCmd::Ls(a) => &a.conn,
        ZkCmd::Get(a) => &a.conn,
        ZkCmd::Set(a) => &a.conn,
        ZkCmd::Create(a) => &a.conn,
        ZkCmd::Delete(a) => &a.conn,
        ZkCmd::Deleteall(a) => &a.conn,
        ZkCmd::Stat(a) => &a.conn,
        ZkCmd::Config(a) => &a.conn,
        ZkCmd::Reconfig(a) => &a.conn,
        ZkCmd::Digest(_) => unreachable!("digest needs no server"),
    }
}

/// Connects, runs the command, closes the session. Returns what to print on stdout.
async fn dispatch(cmd: ZkCmd) -> Res<String> {
    if let ZkCmd::Digest(a) = &cmd {
        return zlock_core::acl::digest_id(&a.user_password)
            .map(|d| format!("{d}\n"))
            .ok_or_else(|| Failure(format!("expected USER:PASSWORD, not {:?}", a.user_password)));
    }
    let conn = conn_of(&cmd);
    let addr = conn.addr();
    // A server that accepts but never answers the handshake must not hang the command.
    let (client, _events) = super::lock::connect(&addr, conn.timeout, &conn.tls)
        .await
        .map_err(Failure)?;
    for a in &conn.auth {
        let (scheme, auth) = a
            .split_once(':')
            .ok_or_else(|| Failure(format!("--auth: expected SCHEME:CREDENTIALS, not {a:?}")))?;
        if let Err(e) = client.add_auth(scheme, auth.as_bytes()).await {
            let _ = client.close().await;
            return Err(Failure(format!("--auth {scheme}: {e}")));
        }
    }
    let out = exec(&client, cmd).await;
    let _ = client.close().await;
    out
}

async fn exec(c: &Client, cmd: ZkCmd) -> Res<String> {
    let mut out = String::new();
    match cmd {
        ZkCmd::Ls(a) => {
            if a.recursive {
                for p in subtree(c, &a.path).await? {
                    out.push_str(&p);
                    out.push('\n');
                }
            } else {
                let (mut children, stat) = c
                    .get_children2(&a.path, false)
                    .await
                    .map_err(|e| Failure::zk(e, &a.path))?;
                children.sort();
                out.push_str(&format!("[{}]\n", children.join(", ")));
                if a.stat {
                    out.push_str(&format_stat(&stat));
                }
            }
        }
        ZkCmd::Get(a) => {
            let (data, stat) = get_raw(c, &a.path).await?;
            match data {
                Some(d) => out.push_str(&String::from_utf8_lossy(&d)),
                None => out.push_str("null"),
            }
            out.push('\n');
            if a.stat {
                out.push_str(&format_stat(&stat));
            }
        }
        ZkCmd::Set(a) => {
            let stat = c
                .set_data(&a.path, a.data.as_bytes(), a.version.unwrap_or(-1))
                .await
                .map_err(|e| Failure::zk(e, &a.path))?;
            if a.stat {
                out.push_str(&format_stat(&stat));
            }
        }
        ZkCmd::Create(a) => {
            let created = create_raw(c, &a).await?;
            out.push_str(&format!("Created {created}\n"));
        }
        ZkCmd::Delete(a) => {
            c.delete(&a.path, a.version.unwrap_or(-1))
                .await
                .map_err(|e| Failure::zk(e, &a.path))?;
        }
        ZkCmd::Deleteall(a) => {
            let all = subtree(c, &a.path).await?;
            // Deepest first: a pre-order listing reversed puts children before parents.
            for p in all.iter().rev() {
                if p == "/" || p == "/zookeeper" || p.starts_with("/zookeeper/") {
                    continue;
                }
                match c.delete(p, -1).await {
                    Ok(()) => {}
                    // Gone meanwhile (an ephemeral's session ended, a container reaped).
                    Err(Error::Server(ErrorCode::NoNode)) if p != &a.path => {}
                    Err(e) => return Err(Failure::zk(e, p)),
                }
            }
        }
        ZkCmd::Stat(a) => {
            let stat = c
                .exists(&a.path, false)
                .await
                .map_err(|e| Failure::zk(e, &a.path))?
                .ok_or_else(|| Failure::zk(Error::Server(ErrorCode::NoNode), &a.path))?;
            out.push_str(&format_stat(&stat));
        }
        ZkCmd::Config(a) => return config(c, &a).await,
        ZkCmd::Reconfig(a) => return reconfig(c, &a).await,
        ZkCmd::Digest(_) => {}
    }
    Ok(out)
}

/// zkCli's `reconfig`.
async fn reconfig(c: &Client, a: &ReconfigArgs) -> Res<String> {
    if a.add.is_none() && a.remove.is_none() && a.members.is_none() && a.file.is_none() {
        return Err(Failure(
            "reconfig needs --add and/or --remove, or --members, or --file".into(),
        ));
    }
    let members = match &a.file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Failure(format!("cannot read {}: {e}", path.display())))?;
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| l.starts_with("server."))
                .collect();
            if lines.is_empty() {
                return Err(Failure(format!(
                    "{} holds no server.N lines",
                    path.display()
                )));
            }
            Some(lines.join(","))
        }
        None => a.members.clone(),
    };
    let (data, stat) = c
        .reconfig(
            a.add.as_deref(),
            a.remove.as_deref(),
            members.as_deref(),
            a.version.unwrap_or(-1),
        )
        .await
        // zkCli names no path in a reconfig's errors ("Insufficient permission : ").
        .map_err(|e| Failure::zk(e, ""))?;
    let mut out = format!(
        "Committed new configuration:\n{}\n",
        String::from_utf8_lossy(&data)
    );
    if a.stat {
        out.push_str(&format_stat(&stat));
    }
    Ok(out)
}

/// zkCli's `config`: ZooKeeper's `getConfig` is a getData of `/zookeeper/config` (with
/// the watch a data watch on that path).
async fn config(c: &Client, a: &ConfigArgs) -> Res<String> {
    const PATH: &str = "/zookeeper/config";
    let (data, stat, watcher) = if a.watch {
        let (d, s, w) = c
            .get_data_watch(PATH)
            .await
            .map_err(|e| Failure::zk(e, PATH))?;
        (d, s, Some(w))
    } else {
        let (d, s) = c
            .get_data(PATH, false)
            .await
            .map_err(|e| Failure::zk(e, PATH))?;
        (d, s, None)
    };
    let text = String::from_utf8_lossy(&data);
    let mut out = if a.client {
        client_config(&text)
    } else {
        text.into_owned()
    };
    out.push('\n');
    if a.stat {
        out.push_str(&format_stat(&stat));
    }
    if let Some(w) = watcher {
        // One-shot: print what we have, then wait for the change (zkCli's interactive
        // shell prints the event whenever it comes).
        print!("{out}");
        out.clear();
        let ev = w.await.map_err(|e| Failure::zk(e, PATH))?;
        out.push_str(&format!(
            "WatchedEvent state:SyncConnected type:{:?} path:{}\n",
            ev.event_type, ev.path
        ));
    }
    Ok(out)
}

/// zkCli's `config -c` (ZooKeeper's `ConfigUtils.getClientConfigStr`): the version, a
/// space, and every member's `clientHost:clientPort`, comma-separated. ZooKeeper lists
/// them in a hash table's order; here they keep the lines' (id) order. A line without a
/// client address (one taken from `clientPort`, which ZooKeeper leaves out of the text)
/// is skipped.
fn client_config(text: &str) -> String {
    let mut version = "";
    let mut clients = Vec::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key.trim() {
            "version" => version = value.trim(),
            k if k.starts_with("server.") => {
                if let Some((_, client)) = value.trim().split_once(';') {
                    clients.push(if client.contains(':') {
                        client.to_owned()
                    } else {
                        format!("0.0.0.0:{client}")
                    });
                }
            }
            _ => {}
        }
    }
    format!("{version} {}", clients.join(","))
}

/// getData keeping null data apart from empty (zkCli prints `null`).
async fn get_raw(c: &Client, path: &str) -> Res<(Option<Vec<u8>>, Stat)> {
    let (h, body) = c
        .send(&Request::GetData(PathWatchRequest {
            path: path.to_owned(),
            watch: false,
        }))
        .await
        .map_err(|e| Failure::zk(e, path))?;
    if h.err != 0 {
        return Err(Failure::zk(server_error(h.err), path));
    }
    let r = GetDataResponse::decode(&mut Reader::new(&body))
        .map_err(|e| Failure(format!("protocol error: {e}: {path}")))?;
    Ok((r.data, r.stat))
}

/// create2 / createContainer / createTTL with zkCli's null-when-absent data.
async fn create_raw(c: &Client, a: &CreateArgs) -> Res<String> {
    let data = a.data.as_ref().map(|d| d.as_bytes().to_vec());
    let req = if let Some(ttl) = a.ttl {
        // CreateMode.PERSISTENT_WITH_TTL = 5, PERSISTENT_SEQUENTIAL_WITH_TTL = 6.
        Request::CreateTtl(CreateTtlRequest {
            path: a.path.clone(),
            data,
            acl: Acl::open_unsafe(),
            flags: if a.sequential { 6 } else { 5 },
            ttl,
        })
    } else {
        let mode = match (a.container, a.ephemeral, a.sequential) {
            (true, _, _) => CreateMode::Container,
            (false, true, true) => CreateMode::EphemeralSequential,
            (false, true, false) => CreateMode::Ephemeral,
            (false, false, true) => CreateMode::PersistentSequential,
            (false, false, false) => CreateMode::Persistent,
        };
        let op = if a.container {
            OpCode::CreateContainer
        } else {
            OpCode::Create2
        };
        Request::Create(
            op,
            CreateRequest {
                path: a.path.clone(),
                data,
                acl: Acl::open_unsafe(),
                flags: mode.flags(),
            },
        )
    };
    let (h, body) = c.send(&req).await.map_err(|e| Failure::zk(e, &a.path))?;
    if h.err != 0 {
        return Err(Failure::zk(server_error(h.err), &a.path));
    }
    let r = Create2Response::decode(&mut Reader::new(&body))
        .map_err(|e| Failure(format!("protocol error: {e}: {}", a.path)))?;
    Ok(r.path)
}

fn server_error(code: i32) -> Error {
    match ErrorCode::from_i32(code) {
        Some(c) => Error::Server(c),
        None => Error::Protocol(format!("unknown error code {code}")),
    }
}

/// `path` and every node under it, pre-order, children sorted (zkCli's `ls -R`).
async fn subtree(c: &Client, path: &str) -> Res<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![path.to_owned()];
    while let Some(p) = stack.pop() {
        let mut children = match c.get_children(&p, false).await {
            Ok(ch) => ch,
            // A descendant that vanished while we walked: skip it.
            Err(Error::Server(ErrorCode::NoNode)) if p != path => continue,
            Err(e) => return Err(Failure::zk(e, &p)),
        };
        children.sort();
        for ch in children.iter().rev() {
            stack.push(if p == "/" {
                format!("/{ch}")
            } else {
                format!("{p}/{ch}")
            });
        }
        out.push(p);
    }
    Ok(out)
}

/// zkCli's StatPrinter: one `name = value` a line.
pub fn format_stat(s: &Stat) -> String {
    format!(
        "cZxid = 0x{:x}\nctime = {}\nmZxid = 0x{:x}\nmtime = {}\npZxid = 0x{:x}\n\
         cversion = {}\ndataVersion = {}\naclVersion = {}\nephemeralOwner = 0x{:x}\n\
         dataLength = {}\nnumChildren = {}\n",
        s.czxid,
        java_date(s.ctime),
        s.mzxid,
        java_date(s.mtime),
        s.pzxid,
        s.cversion,
        s.version,
        s.aversion,
        s.ephemeral_owner,
        s.data_length,
        s.num_children,
    )
}

/// Java's `Date.toString()` in UTC: `Mon Nov 30 02:23:12 UTC 2026`.
pub(crate) fn java_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let month = MONTHS[(m - 1).clamp(0, 11) as usize];
    format!(
        "{weekday} {month} {d:02} {:02}:{:02}:{:02} UTC {y}",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Days since 1970-01-01 to (year, month 1..=12, day 1..=31) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_like_java() {
        assert_eq!(java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        // 2026-11-30T02:23:12Z
        assert_eq!(java_date(1_796_005_392_000), "Mon Nov 30 02:23:12 UTC 2026");
        assert_eq!(java_date(951_782_400_000), "Tue Feb 29 00:00:00 UTC 2000");
    }

    #[test]
    fn client_config_string() {
        let text = "server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\n\
                    server.2=127.0.0.1:2889:3889:observer;0.0.0.0:2182\n\
                    server.3=127.0.0.1:2890:3890:participant\n\
                    version=100000000";
        assert_eq!(client_config(text), "100000000 127.0.0.1:2181,0.0.0.0:2182");
        // A standalone server's empty node: zkCli prints a lone space.
        assert_eq!(client_config(""), " ");
    }

    #[test]
    fn paths_are_checked_like_zookeeper() {
        assert!(validate_path("/", false).is_ok());
        assert!(validate_path("/a/b", false).is_ok());
        assert!(validate_path("a", false).is_err());
        assert!(validate_path("", false).is_err());
        assert!(validate_path("/a/", false).is_err());
        assert!(validate_path("/a/", true).is_ok());
        assert!(validate_path("/a//b", false).is_err());
        assert!(validate_path("/a/../b", false).is_err());
        assert!(validate_path("/a/./b", false).is_err());
        assert!(validate_path("/a\0", false).is_err());
    }
}
