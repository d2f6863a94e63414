//! Four-letter words: a new connection whose first four bytes spell a known word gets a
//! plain-text answer and is closed. Words outside `4lw.commands.whitelist` are refused
//! with ZooKeeper's message.
//!
//! A member that serves no client (it waits for its peers at start, it is out of touch
//! with its quorum, or a `reconfig` removed it) answers as a ZooKeeper server whose
//! `ZooKeeperServer` is not running (a LOOKING one): `ruok` and `envi` as usual (they
//! are about the process), `isro` with `null`, every other word with [`NOT_SERVING`],
//! so that `srvr`, `stat` and `mntr` never show it as a leader or a follower then. They
//! are answered here, never queued behind the commit stage, which may be waiting for a
//! quorum.

use std::fmt::Write;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::Shared;
use crate::admin::VERSION;
use crate::config::ServerConfig;
use crate::pipeline::{AdminQuery, Item};

/// Every word this server knows.
pub const WORDS: [&str; 15] = [
    "ruok", "srvr", "stat", "mntr", "cons", "wchs", "wchc", "wchp", "conf", "envi", "isro", "dump",
    "crst", "srst", "dirs",
];

/// ZooKeeper's answer (`AbstractFourLetterCommand.ZK_NOT_SERVING`, with its newline)
/// of a server that serves no client now.
pub const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests\n";

/// The word spelled by the first four bytes of a connection, if any.
pub fn detect(first: &[u8]) -> Option<&'static str> {
    WORDS.iter().copied().find(|w| w.as_bytes() == first)
}

/// `word`'s answer on a member that serves no client now (see the module doc).
pub(crate) fn not_serving(word: &str, cfg: &ServerConfig) -> String {
    if !cfg.four_letter_allowed(word) {
        return refused(word);
    }
    match word {
        "ruok" | "envi" => local(word, cfg).unwrap_or_default(),
        "isro" => "null".into(),
        _ => NOT_SERVING.into(),
    }
}

fn refused(word: &str) -> String {
    format!("{word} is not executed because it is not in the whitelist.\n")
}

pub(crate) async fn answer(word: &str, shared: &Arc<Shared>) -> String {
    let cfg = &shared.config;
    if !cfg.four_letter_allowed(word) {
        return refused(word);
    }
    // An ensemble member serves clients only while in touch with its quorum.
    if shared.quorum.as_ref().is_some_and(|q| !q.borrow().in_touch) {
        return not_serving(word, cfg);
    }
    if let Some(text) = local(word, cfg) {
        return text;
    }
    let query = match word {
        "srvr" => AdminQuery::Srvr,
        "stat" => AdminQuery::Stat,
        "mntr" => AdminQuery::Mntr,
        "cons" => AdminQuery::Cons,
        "wchs" => AdminQuery::Wchs,
        "wchc" => AdminQuery::Wchc,
        "wchp" => AdminQuery::Wchp,
        "dump" => AdminQuery::Dump,
        "crst" => AdminQuery::Crst,
        "srst" => AdminQuery::Srst,
        _ => return String::new(),
    };
    let (tx, rx) = oneshot::channel();
    if shared
        .commit
        .send(Item::Admin { query, done: tx })
        .await
        .is_err()
    {
        return String::new();
    }
    rx.await.unwrap_or_default()
}

/// The answer of a word that needs only the configuration and the process, if `word`
/// is one.
fn local(word: &str, cfg: &ServerConfig) -> Option<String> {
    let text = match word {
        "ruok" => "imok".into(),
        "isro" => "rw".into(),
        "conf" => {
            let mut s = String::new();
            // As ZooKeeper's dumpConf: -1 for a port that is not served.
            let secure = cfg.tls.secure_client_port.map_or(-1, i32::from);
            let _ = writeln!(s, "clientPort={}", cfg.served_client_port());
            let _ = writeln!(s, "secureClientPort={secure}");
            let _ = writeln!(s, "clientPortAddress={}", cfg.client_port_address);
            let _ = writeln!(s, "dataDir={}", cfg.data_dir.display());
            let _ = writeln!(s, "dataLogDir={}", cfg.wal_dir().display());
            let _ = writeln!(s, "tickTime={}", cfg.tick_time_ms);
            let _ = writeln!(s, "maxClientCnxns={}", cfg.max_client_cnxns);
            let _ = writeln!(s, "minSessionTimeout={}", cfg.min_session_timeout());
            let _ = writeln!(s, "maxSessionTimeout={}", cfg.max_session_timeout());
            let _ = writeln!(s, "snapCount={}", cfg.snap_count);
            let _ = writeln!(s, "preAllocSize={}", cfg.wal_preallocate_bytes / 1024);
            let _ = writeln!(
                s,
                "zlock.commitSpinMicros={}",
                cfg.commit_spin().as_micros()
            );
            let _ = writeln!(s, "jute.maxbuffer={}", cfg.max_packet);
            let _ = writeln!(s, "globalOutstandingLimit={}", cfg.global_outstanding_limit);
            let _ = writeln!(s, "extendedTypesEnabled={}", cfg.extended_types);
            if cfg.metrics.enabled {
                let m = &cfg.metrics;
                let class = crate::config::PROMETHEUS_CLASS;
                let _ = writeln!(s, "metricsProvider.className={class}");
                let _ = writeln!(s, "metricsProvider.httpHost={}", m.http_host);
                let _ = writeln!(s, "metricsProvider.httpPort={}", m.http_port);
            }
            match &cfg.ensemble {
                None => {
                    let _ = writeln!(s, "serverId=0");
                }
                Some(e) => {
                    let _ = writeln!(s, "serverId={}", e.me);
                    let _ = writeln!(s, "initLimit={}", cfg.init_limit);
                    let _ = writeln!(s, "syncLimit={}", cfg.sync_limit);
                    let _ = writeln!(s, "zlock.raftHeartbeatMs={}", e.heartbeat_ms);
                    let _ = writeln!(
                        s,
                        "zlock.electionTimeoutMs={}-{}",
                        e.election_min_ms, e.election_max_ms
                    );
                    for m in e.members.values() {
                        let _ = writeln!(s, "server.{}={m}", m.id);
                    }
                }
            }
            s
        }
        "envi" => {
            let mut s = String::from("Environment:\n");
            let _ = writeln!(s, "zookeeper.version={VERSION}");
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
            let _ = writeln!(s, "host.name={host}");
            let _ = writeln!(s, "os.name={}", std::env::consts::OS);
            let _ = writeln!(s, "os.arch={}", std::env::consts::ARCH);
            let _ = writeln!(
                s,
                "user.dir={}",
                std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            );
            let _ = writeln!(s, "zlock.version={}", env!("CARGO_PKG_VERSION"));
            s
        }
        "dirs" => format!(
            "datadir_size: {}\nlogdir_size: {}\n",
            dir_size(&cfg.snapshot_dir()),
            dir_size(&cfg.wal_dir())
        ),
        _ => return None,
    };
    Some(text)
}

/// Bytes in the files directly in `p` (`dirs`, as the four-letter word and the
/// AdminServer command report it); 0 if it cannot be read.
pub(crate) fn dir_size(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
