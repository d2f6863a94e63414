//! The zkCli-style commands (`zlock ls|get|set|create|delete|deleteall|stat`), run as the
//! built binary against an in-process zlock server, and once against Apache ZooKeeper to
//! show the output has the same shape.

use crate::common::{run, zlock_cmd, Out, RUN_BOUND};
use zlock_testkit::{require, Peer, TestServer, ZooKeeper};

async fn zl_env(server: &str, args: &[&str], env: Option<&str>) -> Out {
    let mut cmd = zlock_cmd(args);
    match env {
        Some(e) => {
            cmd.env("ZLOCK_SERVER", e);
        }
        None => {
            cmd.args(["--server", server]);
        }
    }
    run(cmd, &format!("zlock {args:?}"), RUN_BOUND).await
}

async fn zl(server: &str, args: &[&str]) -> Out {
    zl_env(server, args, None).await
}

/// Runs and expects success; returns stdout.
async fn ok(server: &str, args: &[&str]) -> String {
    let o = zl(server, args).await;
    assert_eq!(
        o.code, 0,
        "zlock {args:?}: exit {} stderr {:?}",
        o.code, o.stderr
    );
    assert_eq!(o.stderr, "", "zlock {args:?}: stderr");
    o.stdout
}

/// Runs and expects exit 1 with exactly `msg` on stderr and nothing on stdout.
async fn fails(server: &str, args: &[&str], msg: &str) {
    let o = zl(server, args).await;
    assert_eq!(o.code, 1, "zlock {args:?}: stdout {:?}", o.stdout);
    assert_eq!(o.stderr, format!("{msg}\n"), "zlock {args:?}");
    assert_eq!(o.stdout, "", "zlock {args:?}");
}

/// The Stat block as (name, value) pairs, checking the names and their order.
fn stat_fields(block: &str) -> Vec<(String, String)> {
    let names = [
        "cZxid",
        "ctime",
        "mZxid",
        "mtime",
        "pZxid",
        "cversion",
        "dataVersion",
        "aclVersion",
        "ephemeralOwner",
        "dataLength",
        "numChildren",
    ];
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines.len(), names.len(), "stat block: {block:?}");
    lines
        .iter()
        .zip(names)
        .map(|(l, n)| {
            let (k, v) = l.split_once(" = ").expect("name = value");
            assert_eq!(k, n, "in {block:?}");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn field<'a>(f: &'a [(String, String)], name: &str) -> &'a str {
    f.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .expect("field")
}

/// `Mon Nov 30 02:23:12 UTC 2026`
fn is_java_date(s: &str) -> bool {
    let p: Vec<&str> = s.split(' ').collect();
    p.len() == 6
        && p[0].len() == 3
        && p[1].len() == 3
        && p[2].len() == 2
        && p[3].len() == 8
        && p[3].matches(':').count() == 2
        && p[4] == "UTC"
        && p[5].parse::<u32>().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_set_stat_ls() {
    let server = TestServer::start().await.expect("server");
    let s = &server.connect_string();

    assert_eq!(ok(s, &["create", "/app"]).await, "Created /app\n");
    assert_eq!(
        ok(s, &["create", "/app/db", "postgres://db1"]).await,
        "Created /app/db\n"
    );
    assert_eq!(
        ok(s, &["create", "/app/cache", ""]).await,
        "Created /app/cache\n"
    );

    // No data given: null, printed as zkCli does.
    assert_eq!(ok(s, &["get", "/app"]).await, "null\n");
    assert_eq!(ok(s, &["get", "/app/cache"]).await, "\n");
    assert_eq!(ok(s, &["get", "/app/db"]).await, "postgres://db1\n");

    assert_eq!(ok(s, &["set", "/app/db", "postgres://db2"]).await, "");
    assert_eq!(
        ok(s, &["set", "/app/db", "postgres://db3", "-v", "1"]).await,
        ""
    );
    let out = ok(s, &["get", "-s", "/app/db"]).await;
    let (data, stat) = out.split_once('\n').expect("data line");
    assert_eq!(data, "postgres://db3");
    let f = stat_fields(stat);
    assert_eq!(field(&f, "dataVersion"), "2");
    assert_eq!(field(&f, "dataLength"), "14");
    assert_eq!(field(&f, "numChildren"), "0");
    assert_eq!(field(&f, "ephemeralOwner"), "0x0");
    assert_eq!(field(&f, "aclVersion"), "0");
    assert!(field(&f, "cZxid").starts_with("0x"));
    assert!(is_java_date(field(&f, "ctime")), "{f:?}");
    assert!(is_java_date(field(&f, "mtime")), "{f:?}");
    assert_ne!(field(&f, "cZxid"), field(&f, "mZxid"));

    let f = stat_fields(&ok(s, &["stat", "/app"]).await);
    assert_eq!(field(&f, "numChildren"), "2");
    assert_eq!(field(&f, "cversion"), "2");
    assert_eq!(field(&f, "dataLength"), "0");

    let f = stat_fields(&ok(s, &["set", "-s", "/app", "x"]).await);
    assert_eq!(field(&f, "dataVersion"), "1");

    // ls: sorted, zkCli's brackets.
    assert_eq!(ok(s, &["ls", "/app"]).await, "[cache, db]\n");
    assert_eq!(ok(s, &["ls", "/app/db"]).await, "[]\n");
    assert!(ok(s, &["ls", "/"]).await.contains("app"));
    let out = ok(s, &["ls", "-s", "/app"]).await;
    let (list, stat) = out.split_once('\n').expect("list line");
    assert_eq!(list, "[cache, db]");
    assert_eq!(field(&stat_fields(stat), "numChildren"), "2");

    assert_eq!(ok(s, &["delete", "/app/cache"]).await, "");
    assert_eq!(ok(s, &["delete", "/app/db", "-v", "2"]).await, "");
    assert_eq!(ok(s, &["ls", "/app"]).await, "[]\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_modes() {
    let server = TestServer::start().await.expect("server");
    let s = &server.connect_string();

    ok(s, &["create", "/q"]).await;
    assert_eq!(
        ok(s, &["create", "-s", "/q/job-", "a"]).await,
        "Created /q/job-0000000000\n"
    );
    assert_eq!(
        ok(s, &["create", "-s", "/q/job-", "b"]).await,
        "Created /q/job-0000000001\n"
    );
    // Sequential with a trailing slash: the counter is the name.
    assert_eq!(
        ok(s, &["create", "-s", "/q/"]).await,
        "Created /q/0000000002\n"
    );

    // Ephemeral: created, then gone with the command's session.
    assert_eq!(ok(s, &["create", "-e", "/me"]).await, "Created /me\n");
    fails(s, &["stat", "/me"], "Node does not exist: /me").await;
    let out = ok(s, &["create", "-e", "-s", "/q/e-"]).await;
    assert!(out.starts_with("Created /q/e-00000000"), "{out}");

    // Container: removed once its last child goes.
    assert_eq!(ok(s, &["create", "-c", "/locks"]).await, "Created /locks\n");
    ok(s, &["create", "/locks/a"]).await;
    ok(s, &["delete", "/locks/a"]).await;
    let mut gone = false;
    for _ in 0..50 {
        if zl(s, &["stat", "/locks"]).await.code == 1 {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(gone, "the empty container was not removed");

    // TTL (the test server has extended types on).
    assert_eq!(
        ok(s, &["create", "-t", "60000", "/lease", "x"]).await,
        "Created /lease\n"
    );
    ok(s, &["create", "/leases"]).await;
    let out = ok(s, &["create", "-t", "60000", "-s", "/leases/l-"]).await;
    assert_eq!(out, "Created /leases/l-0000000000\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_ls_and_deleteall() {
    let server = TestServer::start().await.expect("server");
    let s = &server.connect_string();
    for p in ["/t", "/t/b", "/t/a", "/t/a/y", "/t/a/x", "/t/c"] {
        ok(s, &["create", p]).await;
    }
    assert_eq!(
        ok(s, &["ls", "-R", "/t"]).await,
        "/t\n/t/a\n/t/a/x\n/t/a/y\n/t/b\n/t/c\n"
    );
    fails(s, &["delete", "/t"], "Node not empty: /t").await;
    assert_eq!(ok(s, &["deleteall", "/t"]).await, "");
    fails(s, &["ls", "/t"], "Node does not exist: /t").await;
    fails(s, &["deleteall", "/t"], "Node does not exist: /t").await;
    fails(s, &["ls", "-R", "/t"], "Node does not exist: /t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_exit_1_with_zkcli_messages() {
    let server = TestServer::start().await.expect("server");
    let s = &server.connect_string();
    ok(s, &["create", "/a", "1"]).await;
    ok(s, &["create", "/a/b"]).await;

    fails(s, &["get", "/nope"], "Node does not exist: /nope").await;
    fails(s, &["get", "-s", "/nope"], "Node does not exist: /nope").await;
    fails(s, &["stat", "/nope"], "Node does not exist: /nope").await;
    fails(s, &["ls", "/nope"], "Node does not exist: /nope").await;
    fails(s, &["set", "/nope", "x"], "Node does not exist: /nope").await;
    fails(s, &["delete", "/nope"], "Node does not exist: /nope").await;
    fails(s, &["create", "/nope/x"], "Node does not exist: /nope/x").await;
    fails(s, &["create", "/a"], "Node already exists: /a").await;
    fails(
        s,
        &["set", "/a", "2", "-v", "7"],
        "version No is not valid : /a",
    )
    .await;
    fails(
        s,
        &["delete", "/a/b", "-v", "3"],
        "version No is not valid : /a/b",
    )
    .await;
    fails(s, &["delete", "/a"], "Node not empty: /a").await;

    // Nothing changed.
    assert_eq!(ok(s, &["get", "/a"]).await, "1\n");
    assert_eq!(ok(s, &["ls", "/a"]).await, "[b]\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_and_flags_exit_2() {
    let server = TestServer::start().await.expect("server");
    let s = &server.connect_string();
    for (args, needle) in [
        (&["get", "a"][..], "Path must start with / character"),
        (&["ls", "/a/"][..], "Path must not end with / character"),
        (&["stat", "/a//b"][..], "empty node name specified"),
        (&["delete", "/a/../b"][..], "relative paths not allowed"),
    ] {
        let o = zl(s, args).await;
        assert_eq!(o.code, 2, "zlock {args:?}: {}", o.stderr);
        assert!(o.stderr.contains(needle), "zlock {args:?}: {}", o.stderr);
        assert_eq!(o.stdout, "");
    }
    for args in [
        &["create", "-c", "-e", "/x"][..],
        &["create", "-c", "-s", "/x"][..],
        &["create", "-e", "-t", "100", "/x"][..],
        &["create", "-t", "0", "/x"][..],
        &["set", "/x"][..],
        &["set", "/x", "d", "-v", "abc"][..],
        &["get", "/x", "--bogus"][..],
        &["ls"][..],
    ] {
        let o = zl(s, args).await;
        assert_eq!(o.code, 2, "zlock {args:?}: {}", o.stderr);
        assert!(!o.stderr.is_empty());
    }
    // Nothing was created by the rejected commands.
    fails(s, &["stat", "/x"], "Node does not exist: /x").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_from_env_and_unreachable_server() {
    let server = TestServer::start().await.expect("server");
    let s = server.connect_string();
    let o = zl_env("", &["create", "/env", "e"], Some(&s)).await;
    assert_eq!(
        (o.code, o.stdout.as_str()),
        (0, "Created /env\n"),
        "{}",
        o.stderr
    );
    // --server wins over $ZLOCK_SERVER.
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_zlock"));
    let o = cmd
        .args(["get", "/env", "--server", &s])
        .env("ZLOCK_SERVER", "127.0.0.1:1")
        .output()
        .await
        .expect("run");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "e\n");

    let port = zlock_testkit::free_port();
    let o = zl(&format!("127.0.0.1:{port}"), &["ls", "/"]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("cannot connect"), "{}", o.stderr);
    assert_eq!(o.stdout, "");

    let o = zl(&s, &["get", "/env", "--timeout", "5000"]).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "e\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_teaches_with_examples() {
    for cmd in ["ls", "get", "set", "create", "delete", "deleteall", "stat"] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_zlock"))
            .args([cmd, "--help"])
            .output()
            .expect("run");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{cmd} --help");
        assert!(out.contains("Examples:"), "{cmd}: {out}");
        assert!(out.contains(&format!("zlock {cmd}")), "{cmd}: {out}");
        assert!(out.contains("ZLOCK_SERVER"), "{cmd}: {out}");
        assert!(out.contains("--server"), "{cmd}: {out}");
        assert!(out.contains("--timeout"), "{cmd}: {out}");
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zlock"))
        .arg("--help")
        .output()
        .expect("run");
    let out = String::from_utf8_lossy(&o.stdout);
    for cmd in ["ls", "get", "set", "create", "delete", "deleteall", "stat"] {
        assert!(out.contains(&format!("  {cmd} ")), "{out}");
    }
}

/// One script of commands: (args, exit code, stdout, stderr) with the Stat values that
/// differ between servers (zxids, times, session ids) blanked.
async fn transcript(s: &str) -> Vec<(String, i32, String, String)> {
    let script: &[&[&str]] = &[
        &["create", "/shape"],
        &["create", "/shape/a", "hello"],
        &["create", "/shape/b", ""],
        &["create", "-s", "/shape/q-", "1"],
        &["create", "-s", "/shape/q-", "2"],
        &["create", "-c", "/shape/c"],
        &["create", "-c", "/shape/c/x"],
        &["create", "-t", "60000", "/shape/ttl", "t"],
        &["create", "-e", "/shape/eph"],
        &["create", "/shape/a"],
        &["create", "/shape/none/x"],
        &["ls", "/shape"],
        &["ls", "-s", "/shape"],
        &["ls", "-R", "/shape"],
        &["get", "/shape"],
        &["get", "/shape/a"],
        &["get", "/shape/b"],
        &["get", "-s", "/shape/a"],
        &["get", "/shape/none"],
        &["set", "/shape/a", "world"],
        &["set", "-s", "/shape/a", "again", "-v", "1"],
        &["set", "/shape/a", "x", "-v", "9"],
        &["set", "/shape/none", "x"],
        &["stat", "/shape/a"],
        &["stat", "/shape/none"],
        &["delete", "/shape/a", "-v", "0"],
        &["delete", "/shape"],
        &["delete", "/shape/a", "-v", "2"],
        &["delete", "/shape/a"],
        &["deleteall", "/shape"],
        &["ls", "/shape"],
    ];
    let mut out = Vec::new();
    for args in script {
        let o = zl(s, args).await;
        let stdout = o
            .stdout
            .lines()
            .map(|l| match l.split_once(" = ") {
                Some((k @ ("cZxid" | "mZxid" | "pZxid"), v)) => {
                    assert!(v.starts_with("0x"), "{l}");
                    format!("{k} = 0x?")
                }
                Some((k @ ("ctime" | "mtime"), v)) => {
                    assert!(is_java_date(v), "{l}");
                    format!("{k} = <date>")
                }
                _ => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        out.push((args.join(" "), o.code, stdout, o.stderr));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_output_shape_as_apache_zookeeper() {
    let Some(_) = require(Peer::ZooKeeper) else {
        return;
    };
    let server = TestServer::start().await.expect("server");
    let ours = transcript(&server.connect_string()).await;
    let zk = tokio::task::spawn_blocking(ZooKeeper::start)
        .await
        .expect("join")
        .expect("start ZooKeeper");
    let z = zk.connect_string();
    // The port opens before ZooKeeper serves sessions: wait until a command works.
    let mut ready = false;
    for _ in 0..120 {
        if zl(&z, &["stat", "/"]).await.code == 0 {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(ready, "Apache ZooKeeper did not start serving");
    let theirs = transcript(&z).await;
    assert_eq!(ours.len(), theirs.len());
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a, b, "zlock vs Apache ZooKeeper");
    }
    // Sanity: the script did exercise both success and failure.
    assert!(ours.iter().any(|t| t.1 == 1) && ours.iter().any(|t| t.1 == 0));
}

/// A server at its `maxClientCnxns` for this address closes the connection before the
/// handshake: the command says why it could not connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_connections_explained() {
    let server = TestServer::start_with(|c| c.max_client_cnxns = 1)
        .await
        .expect("server");
    let s = &server.connect_string();
    let (holder, _events) = zlock::Client::connect(s, 10_000).await.expect("connect");
    fails(
        s,
        &["ls", "/"],
        &format!(
            "cannot connect to {s}: the server closed the connection during the handshake; \
             too many connections from this address? (maxClientCnxns)"
        ),
    )
    .await;
    holder.close().await.expect("close");
}
