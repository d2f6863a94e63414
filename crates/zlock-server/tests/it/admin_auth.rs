//! The AdminServer's authentication (`src/admin/auth.rs`), ZooKeeper 3.9's model, with
//! `zlock.adminAuthRequired=true`: the commands that show sessions, clients, watches or
//! lock holders, and the dashboard, answer 401 without credentials, 403 to an
//! identity without ALL on `/` (each permission checked on its own), and serve one with
//! it; the other commands keep answering everyone. Apache ZooKeeper 3.8 has no such
//! check (3.9 added it, for `snapshot` and `restore` only), so the answers are checked
//! against 3.9's documented statuses and words rather than against a running peer.

use std::net::SocketAddr;

use base64::Engine;
use serde_json::Value;
use zlock::{Client, LockRequest, NativeLock};
use zlock_proto::records::{perms, Acl, Id};
use zlock_testkit::{with_admin, TestServer};

/// One request (`auth`: the `Authorization` header's value); status, head, body.
async fn ask(addr: SocketAddr, path: &str, auth: Option<&str>) -> (u16, String, String) {
    let a = crate::common::http::get(addr, path, auth).await;
    let body = a.text();
    (a.status, a.head, body)
}

/// A command's status and its `error` field.
async fn command(addr: SocketAddr, name: &str, auth: Option<&str>) -> (u16, Value) {
    let (status, head, body) = ask(addr, &format!("/commands/{name}"), auth).await;
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{name}: {head}"
    );
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{name}: {e}: {body}"));
    assert!(v["command"].is_string(), "{body}");
    (status, v["error"].clone())
}

fn digest(user_password: &str) -> Id {
    Id::new(
        "digest",
        &zlock_core::acl::digest_id(user_password).unwrap(),
    )
}

const ROOT_PW: &str = "root:r00t";
const SUPER_PW: &str = "boss:b0ss";

#[tokio::test]
async fn guarded_commands_ask_for_all_on_root() {
    let boss = digest(SUPER_PW).id;
    let s = TestServer::start_with(|cfg| {
        with_admin(cfg);
        cfg.admin.auth_required = true;
        cfg.super_digest = Some(boss);
    })
    .await
    .unwrap();
    let a = s.admin_addr().unwrap();
    let (c, _events) = Client::connect(&s.connect_string(), 30_000).await.unwrap();
    let NativeLock::Granted { .. } = c
        .lock_native(LockRequest::exclusive("/locks/l", "_c_x-lock-"))
        .await
        .unwrap()
    else {
        panic!("an uncontended lock is granted at once");
    };

    // A new tree's `/` grants ALL to world:anyone: every authenticated caller passes,
    // but the header is still needed.
    let guarded = [
        "locks", "sessions", "cons", "stat", "dump", "wchc", "wchp", "crst", "srst",
    ];
    for name in guarded {
        assert_eq!(
            command(a, name, None).await,
            (401, "Auth info is missing for the command".into()),
            "{name}"
        );
        assert_eq!(
            command(a, name, Some("digest alice:a")).await,
            (200, Value::Null),
            "{name}"
        );
    }
    let (status, locks) = {
        let (st, _, body) = ask(a, "/commands/locks", Some("digest alice:a")).await;
        (st, serde_json::from_str::<Value>(&body).unwrap())
    };
    assert_eq!(status, 200);
    assert_eq!(locks["locks"][0]["path"], "/locks/l", "{locks}");

    // The open commands answer everyone, with or without a header.
    for name in ["ruok", "srvr", "mntr", "conf", "wchs", "isro"] {
        assert_eq!(command(a, name, None).await, (200, Value::Null), "{name}");
    }

    // Headers no provider takes: 401 "Not authenticated".
    for bad in ["digest", "digest nocolon", "sasl x", "x509", "digest a:b c"] {
        assert_eq!(
            command(a, "locks", Some(bad)).await,
            (401, "Not authenticated".into()),
            "{bad}"
        );
    }

    // `/` now: root has ALL, split over two entries; 127.0.0.1 may read; anyone else
    // may read.
    let root = digest(ROOT_PW);
    let acl = vec![
        Acl {
            perms: perms::READ | perms::WRITE,
            id: root.clone(),
        },
        Acl {
            perms: perms::CREATE | perms::DELETE | perms::ADMIN,
            id: root.clone(),
        },
        Acl {
            perms: perms::READ,
            id: Id::new("ip", "127.0.0.1"),
        },
        Acl {
            perms: perms::READ,
            id: Id::new("world", "anyone"),
        },
    ];
    c.set_acl("/", acl, -1).await.unwrap();

    let basic = |up: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(up)
        )
    };
    let cases: [(String, u16, Value); 6] = [
        (format!("digest {ROOT_PW}"), 200, Value::Null),
        (basic(ROOT_PW), 200, Value::Null),
        ("digest root:wrong".into(), 403, "Not authorized".into()),
        ("ip".into(), 403, "Not authorized".into()),
        // superDigest's user is super: every check passes.
        (format!("digest {SUPER_PW}"), 200, Value::Null),
        ("digest alice:a".into(), 403, "Not authorized".into()),
    ];
    for (header, status, error) in &cases {
        for name in guarded {
            assert_eq!(
                command(a, name, Some(header)).await,
                (*status, error.clone()),
                "{name} with {header}"
            );
        }
    }

    // The ip identity passes once an entry gives 127.0.0.0/8 ALL (set by root: the
    // session needs ADMIN on `/` now).
    c.add_auth("digest", ROOT_PW.as_bytes()).await.unwrap();
    let mut acl = c.get_acl("/").await.unwrap().0;
    acl.push(Acl {
        perms: perms::ALL,
        id: Id::new("ip", "127.0.0.0/8"),
    });
    c.set_acl("/", acl, -1).await.unwrap();
    assert_eq!(command(a, "sessions", Some("ip")).await, (200, Value::Null));

    // The dashboard: a 401 challenges a browser for Basic credentials; they open it.
    for path in ["/", "/locks", "/locks.json"] {
        let (status, head, _) = ask(a, path, None).await;
        assert_eq!(status, 401, "{path}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("www-authenticate: basic realm=\"zlock admin\""),
            "{path}: {head}"
        );
        let (status, head, _) = ask(a, path, Some("digest alice:a")).await;
        assert_eq!(status, 403, "{path}: {head}");
        assert!(!head.to_ascii_lowercase().contains("www-authenticate"));
        let (status, head, body) = ask(a, path, Some(&basic(ROOT_PW))).await;
        assert_eq!(status, 200, "{path}: {head}");
        if path == "/locks.json" {
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["locks"][0]["path"], "/locks/l", "{body}");
        }
    }
    s.stop().await.unwrap();
}

/// Off by default, as in ZooKeeper: every command answers without a header.
#[tokio::test]
async fn without_the_key_nothing_asks() {
    let s = TestServer::start_with(with_admin).await.unwrap();
    let a = s.admin_addr().unwrap();
    for name in ["locks", "sessions", "cons", "dump"] {
        assert_eq!(command(a, name, None).await, (200, Value::Null), "{name}");
    }
    let (status, _, _) = ask(a, "/locks.json", None).await;
    assert_eq!(status, 200);
    s.stop().await.unwrap();
}
