//! ZooKeeper's AdminServer: its commands as JSON over HTTP (`admin.*` keys, see
//! `crate::config::AdminConfig`), on the small HTTP server the metrics endpoint uses
//! too (`crate::http`: bounded request heads, slow clients dropped, a few connections
//! at once).
//!
//! The URL layout is ZooKeeper's `JettyAdminServer`:
//! - `GET <commandURL>` (default `/commands`) lists the commands, one HTML link a line;
//! - `GET <commandURL>/<name>` runs one, by its name or an alias (`srvr` for
//!   `server_stats`), and answers a flat JSON object: `command` (the primary name),
//!   `error` (null) and the command's fields;
//! - an unknown command is answered as ZooKeeper answers it: 200 with
//!   `{"command": <name>, "error": "Unknown command: <name>"}`; a core that does not
//!   answer within [`PATIENCE`] (a stopping server), 200 with ZooKeeper's "not
//!   currently serving requests" error;
//! - zlock's lock dashboard: its page at `/` and `/locks` (`dashboard.html`), and
//!   `/locks.json`, what the page polls;
//! - `snapshot` (GET) and `restore` (POST, the backup as the body), ZooKeeper 3.9's
//!   (`super::snapshot`, `super::restore`); `shed_connections` is not served;
//! - another path: 404; another method: 405 with `Allow: GET, HEAD` (`POST` for
//!   `restore`).
//!
//! With `zlock.adminAuthRequired`, the commands that show sessions, clients, watches or
//! lock holders, and the dashboard, ask for credentials first (`super::auth`).
//!
//! The commands that need only the configuration (`ruok`, `configuration`,
//! `environment`, `dirs`, `is_read_only`) are answered here; the others ask the core
//! through the sequencer (`Item::AdminJson`, see `admin::json`), in commit order.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::{Method, Request, StatusCode};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use super::auth::{self, Denied};
pub(crate) use super::context::Context;
use super::context::{ask, json};
use super::json::{Fields, Query};
use super::VERSION;
use crate::http::{plain, with_type, Peer, Reply};
use crate::pipeline::{AdminQuery, Item};
use crate::ServerConfig;

/// What a command is answered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Ruok,
    Configuration,
    Environment,
    Dirs,
    IsReadOnly,
    /// A four-letter word's effect (`crst`, `srst`): no fields.
    Reset(AdminQuery),
    Core(Query),
    /// A backup of the state, streamed (`super::snapshot`).
    Snapshot,
    /// A backup served instead of the state (`super::restore`).
    Restore,
}

/// A command: its names, the primary first (ZooKeeper's), and how it is answered.
struct Command {
    names: &'static [&'static str],
    run: Run,
    /// When it asks for credentials (`super::auth`).
    ask: Ask,
}

/// When a command asks for credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Never,
    /// It shows sessions, client addresses, watched paths or lock holders, or resets
    /// counters: with `zlock.adminAuthRequired`.
    WhenRequired,
    /// Always, as in ZooKeeper 3.9 (`snapshot`).
    Always,
}

/// Every command served, ZooKeeper's names and aliases (`Commands.java`).
const COMMANDS: &[Command] = &[
    cmd(&["configuration", "conf", "config"], Run::Configuration),
    guarded(
        &["connection_stat_reset", "crst"],
        Run::Reset(AdminQuery::Crst),
    ),
    guarded(&["connections", "cons"], Run::Core(Query::Connections)),
    cmd(&["dirs"], Run::Dirs),
    guarded(&["dump"], Run::Core(Query::Dump)),
    cmd(&["environment", "env", "envi"], Run::Environment),
    cmd(&["is_read_only", "isro"], Run::IsReadOnly),
    guarded(&["locks"], Run::Core(Query::Locks)),
    cmd(&["monitor", "mntr"], Run::Core(Query::Monitor)),
    cmd(&["ruok"], Run::Ruok),
    cmd(&["server_stats", "srvr"], Run::Core(Query::ServerStats)),
    Command {
        names: &["snapshot", "snap"],
        run: Run::Snapshot,
        ask: Ask::Always,
    },
    Command {
        names: &["restore", "rest"],
        run: Run::Restore,
        ask: Ask::Always,
    },
    guarded(&["sessions"], Run::Core(Query::Sessions)),
    guarded(&["stat_reset", "srst"], Run::Reset(AdminQuery::Srst)),
    guarded(&["stats", "stat"], Run::Core(Query::Stats)),
    cmd(&["watch_summary", "wchs"], Run::Core(Query::WatchSummary)),
    guarded(&["watches", "wchc"], Run::Core(Query::Watches)),
    guarded(
        &["watches_by_path", "wchp"],
        Run::Core(Query::WatchesByPath),
    ),
];

const fn cmd(names: &'static [&'static str], run: Run) -> Command {
    Command {
        names,
        run,
        ask: Ask::Never,
    }
}

const fn guarded(names: &'static [&'static str], run: Run) -> Command {
    Command {
        names,
        run,
        ask: Ask::WhenRequired,
    }
}

fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.names.contains(&name))
}

/// Serves `listener` until `shutdown` turns true.
pub(crate) async fn serve(
    listener: TcpListener,
    ctx: Context,
    https: Option<crate::http::Https>,
    shutdown: watch::Receiver<bool>,
) {
    let ctx = Arc::new(ctx);
    let respond = move |req| {
        let ctx = ctx.clone();
        async move { respond(req, &ctx).await }
    };
    crate::http::serve(listener, "admin server", respond, https, shutdown).await;
}

async fn respond(req: Request<Incoming>, ctx: &Context) -> Reply {
    let base = ctx.config.admin.command_url.as_str();
    if let Some(reply) = dashboard(&req, ctx).await {
        return reply;
    }
    let rest = match req.uri().path().strip_prefix(base) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: the admin server's commands are listed at its commandURL \
                 (default /commands)\n",
            )
        }
    };
    let name = rest.strip_prefix('/').unwrap_or(rest).to_owned();
    // `restore` takes its file as a POST's body, as in ZooKeeper 3.9; every other
    // command is a GET.
    let posts = find(&name).is_some_and(|c| c.run == Run::Restore);
    let allowed = match posts {
        true => req.method() == Method::POST,
        false => req.method() == Method::GET || req.method() == Method::HEAD,
    };
    if !allowed {
        let (text, allow) = match posts {
            true => ("only POST, with the backup file as the body\n", "POST"),
            false => ("only GET and HEAD\n", "GET, HEAD"),
        };
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, text);
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
        return r;
    }
    let name = name.as_str();
    if name.is_empty() {
        return with_type(
            StatusCode::OK,
            Bytes::from(links(base)),
            "text/html; charset=utf-8",
        );
    }
    let (status, answer) = match run(name, &req, ctx).await {
        Ran::Json(status, answer) => (status, answer),
        Ran::Reply(reply) => return reply,
        Ran::Restore(out) => return super::restore::answer(req, ctx, out).await,
    };
    json(status, answer)
}

/// What a command answered.
enum Ran {
    Json(StatusCode, Fields),
    /// A reply of its own (`snapshot`'s file).
    Reply(Reply),
    /// `restore`, its checks passed: it reads the request's body.
    Restore(Fields),
}

/// The lock dashboard: its page at `/` and `/locks` (one HTML file, inline CSS and
/// script, no build step), and what the page polls, `/locks.json` (`locks` and
/// `sessions` read at once, and the member's wall clock). None for another path (or
/// method: those are answered as for the commands).
async fn dashboard(req: &Request<Incoming>, ctx: &Context) -> Option<Reply> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return None;
    }
    let path = req.uri().path();
    if !matches!(path, "/" | "/locks" | "/locks/" | "/locks.json") {
        return None;
    }
    if ctx.config.admin.auth_required {
        if let Err(denied) = authorize(req, ctx).await {
            return Some(login(denied));
        }
    }
    match path {
        "/" | "/locks" | "/locks/" => Some(with_type(
            StatusCode::OK,
            Bytes::from_static(DASHBOARD.as_bytes()),
            "text/html; charset=utf-8",
        )),
        "/locks.json" => {
            let (tx, rx) = oneshot::channel();
            let query = Query::Dashboard;
            let mut out = match ask(ctx, Item::AdminJson { query, done: tx }, rx).await {
                Some(f) => {
                    let mut out = Fields::from_iter([("error".into(), Value::Null)]);
                    out.extend(f);
                    out
                }
                None => Fields::from_iter([(
                    "error".into(),
                    "This ZooKeeper instance is not currently serving requests".into(),
                )]),
            };
            out.insert("server_id".into(), server_id(ctx).into());
            let body = serde_json::to_vec(&Value::Object(out)).unwrap_or_default();
            Some(with_type(
                StatusCode::OK,
                Bytes::from(body),
                "application/json",
            ))
        }
        _ => None,
    }
}

/// A refusal of the dashboard: ZooKeeper's status and words, and on a 401 a
/// `WWW-Authenticate: Basic` challenge, so that a browser asks its user for a name and
/// a password and sends them (see `super::auth`).
fn login(denied: Denied) -> Reply {
    let mut r = plain(denied.status(), denied.message());
    if denied.status() == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"zlock admin\", charset=\"UTF-8\""),
        );
    }
    r
}

/// Does the request carry credentials with ALL on `/` (see `super::auth`)?
async fn authorize(req: &Request<Incoming>, ctx: &Context) -> Result<(), Denied> {
    let value = req.headers().get(AUTHORIZATION).ok_or(Denied::Missing)?;
    let value = value.to_str().map_err(|_| Denied::NotAuthenticated)?;
    let peer = req
        .extensions()
        .get::<Peer>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |p| p.0.ip().to_canonical());
    let x509 = req
        .extensions()
        .get::<crate::http::X509>()
        .map_or(&[][..], |x| &x.0[..]);
    let ids = auth::identities(value, (peer, x509), ctx.config.super_digest.as_deref())?;
    let (tx, rx) = oneshot::channel();
    let path = auth::ON.to_owned();
    let acl = ask(ctx, Item::Acl { path, done: tx }, rx)
        .await
        .ok_or(Denied::NotServing)?
        // `/` is never deleted; were it gone, nobody has ALL on it.
        .ok_or(Denied::NotAuthorized)?;
    zlock_core::acl::check_each(&acl, auth::WANTED, &ids).map_err(|_| Denied::NotAuthorized)
}

/// The dashboard page.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The member's id, for the page's title (0: standalone).
fn server_id(ctx: &Context) -> u64 {
    ctx.config.ensemble.as_ref().map_or(0, |e| e.me)
}

/// The command list, as ZooKeeper prints it: a link to each primary name.
fn links(base: &str) -> String {
    let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.names[0]).collect();
    names.sort_unstable();
    names
        .iter()
        .map(|n| format!("<a href=\"{base}/{n}\">{n}</a>\n<br/>\n"))
        .collect()
}

/// The status, and `command`, `error` and the fields of command `name`; in
/// ZooKeeper's order: an unknown command, a member not serving, then the caller's
/// credentials if the command asks for them.
async fn run(name: &str, req: &Request<Incoming>, ctx: &Context) -> Ran {
    let mut out = Fields::new();
    let Some(command) = find(name) else {
        out.insert("command".into(), name.into());
        out.insert("error".into(), format!("Unknown command: {name}").into());
        return Ran::Json(StatusCode::OK, out);
    };
    let primary = command.names[0];
    out.insert("command".into(), primary.into());
    let cfg = &ctx.config;
    let serving = ctx.quorum.as_ref().is_none_or(|q| q.borrow().in_touch);
    let asks = match command.ask {
        Ask::Never => false,
        Ask::WhenRequired => cfg.admin.auth_required,
        Ask::Always => true,
    };
    if asks && serving {
        if let Err(denied) = authorize(req, ctx).await {
            out.insert("error".into(), denied.message().into());
            return Ran::Json(denied.status(), out);
        }
    }
    let fields = match command.run {
        Run::Snapshot if serving => {
            return Ran::Reply(super::snapshot::answer(req, ctx, out).await);
        }
        Run::Snapshot => None,
        Run::Restore if serving => return Ran::Restore(out),
        Run::Restore => None,
        Run::Reset(_) | Run::Core(_) if !serving => None,
        Run::Ruok => Some(Fields::new()),
        Run::Configuration => Some(configuration(cfg)),
        Run::Environment => Some(environment()),
        Run::Dirs => Some(dirs(cfg)),
        Run::IsReadOnly => Some(Fields::from_iter([("read_only".into(), false.into())])),
        Run::Reset(query) => {
            let (tx, rx) = oneshot::channel();
            ask(ctx, Item::Admin { query, done: tx }, rx)
                .await
                .map(|_| Fields::new())
        }
        Run::Core(query) => {
            let (tx, rx) = oneshot::channel();
            let fields = ask(ctx, Item::AdminJson { query, done: tx }, rx).await;
            fields.map(|f| off_lock(query, f, cfg))
        }
    };
    match fields {
        Some(fields) => {
            out.insert("error".into(), Value::Null);
            out.extend(fields);
        }
        None => {
            out.insert(
                "error".into(),
                "This ZooKeeper instance is not currently serving requests".into(),
            );
        }
    }
    Ran::Json(StatusCode::OK, out)
}

/// Adds what is read from the disk or `/proc`, after the core answered.
fn off_lock(query: Query, mut f: Fields, cfg: &ServerConfig) -> Fields {
    match query {
        Query::ServerStats | Query::Stats => {
            if let Some(Value::Object(s)) = f.get_mut("server_stats") {
                // ZooKeeper's names here differ from `dirs`'s.
                for (from, to) in [
                    ("datadir_size", "data_dir_size"),
                    ("logdir_size", "log_dir_size"),
                ] {
                    if let Some(v) = dirs(cfg).remove(from) {
                        s.insert(to.into(), v);
                    }
                }
            }
        }
        Query::Monitor => {
            if let Some((open, max)) = crate::metrics::file_descriptors() {
                f.insert("open_file_descriptor_count".into(), open.into());
                f.insert("max_file_descriptor_count".into(), max.into());
            }
        }
        _ => {}
    }
    f
}

/// `configuration`: ZooKeeper's `ZooKeeperServerConf` fields.
fn configuration(cfg: &ServerConfig) -> Fields {
    let mut f = Fields::new();
    let mut put = |k: &str, v: Value| {
        f.insert(k.into(), v);
    };
    put("client_port", cfg.served_client_port().into());
    put("data_dir", cfg.data_dir.display().to_string().into());
    put("data_log_dir", cfg.wal_dir().display().to_string().into());
    put("tick_time", cfg.tick_time_ms.into());
    put("max_client_cnxns", cfg.max_client_cnxns.into());
    put("min_session_timeout", cfg.min_session_timeout().into());
    put("max_session_timeout", cfg.max_session_timeout().into());
    put(
        "server_id",
        cfg.ensemble.as_ref().map_or(0, |e| e.me).into(),
    );
    put("client_port_listen_backlog", cfg.listen_backlog.into());
    f
}

/// `environment`: ZooKeeper's keys that mean something outside a JVM.
fn environment() -> Fields {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "localhost".into());
    let os_version = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|v| v.trim().to_owned())
        .unwrap_or_default();
    let dir = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let pairs = [
        ("zookeeper.version", VERSION.to_owned()),
        ("host.name", host),
        ("os.name", std::env::consts::OS.to_owned()),
        ("os.arch", std::env::consts::ARCH.to_owned()),
        ("os.version", os_version),
        ("user.name", var("USER")),
        ("user.home", var("HOME")),
        ("user.dir", dir),
        ("zlock.version", env!("CARGO_PKG_VERSION").to_owned()),
    ];
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::from(v)))
        .collect()
}

/// `dirs`: bytes in the snapshot and log directories (as the four-letter word).
fn dirs(cfg: &ServerConfig) -> Fields {
    let size = crate::net::fourlw::dir_size;
    Fields::from_iter([
        ("datadir_size".into(), size(&cfg.snapshot_dir()).into()),
        ("logdir_size".into(), size(&cfg.wal_dir()).into()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_zookeepers_aliases_resolve() {
        let mut all: Vec<&str> = COMMANDS
            .iter()
            .flat_map(|c| c.names.iter().copied())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a name twice");
        for (alias, primary) in [
            ("srvr", "server_stats"),
            ("stat", "stats"),
            ("mntr", "monitor"),
            ("conf", "configuration"),
            ("cons", "connections"),
            ("envi", "environment"),
            ("isro", "is_read_only"),
            ("wchs", "watch_summary"),
            ("wchc", "watches"),
            ("wchp", "watches_by_path"),
        ] {
            assert_eq!(find(alias).map(|c| c.names[0]), Some(primary), "{alias}");
        }
        assert!(find("nope").is_none());
        assert!(links("/commands").contains("<a href=\"/commands/ruok\">ruok</a>"));
    }
}
