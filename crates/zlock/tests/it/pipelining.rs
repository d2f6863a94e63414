//! Pipelining on one connection: thousands of reads with large replies in flight at once
//! must all complete, each with its node's data.
//!
//! Why this can hang: the server stops reading a connection that has 1000 unwritten
//! replies (`MAX_OUTSTANDING` in zlock-server's `net/connection.rs`, ZooKeeper's
//! `globalOutstandingLimit`). A client that does not read while one of its writes is
//! blocked then deadlocks: the replies fill the socket towards the client, so the server
//! stops reading, so the requests fill the socket towards the server, so the client's
//! write never finishes and it never reads. The sizes below are chosen to fill both
//! directions many times over: each request carries a ~4 KB path (requests: ~40 MB in
//! all, against socket buffers of at most a few MB each way on Linux loopback) and each
//! reply 32 KB of data (replies: ~320 MB in all, while 1000 unwritten replies are 32 MB).
//!
//! The only deadline is [`DEADLINE`], for liveness: in a release build the work takes a
//! few seconds; a client that deadlocks fails with a message instead of hanging.

use std::time::Duration;

use tokio::task::JoinSet;
use zlock::{Client, CreateMode, Error};
use zlock_proto::records::{GetDataResponse, PathWatchRequest};
use zlock_proto::{Reader, Record, Request};
use zlock_testkit::TestServer;

/// Liveness only: the whole scenario, setup included.
const DEADLINE: Duration = Duration::from_secs(120);
/// Nodes read round-robin; each holds different data.
const NODES: usize = 8;
/// Bytes of each node's name: every getData request carries its path.
const NAME_LEN: usize = 4000;
/// Bytes of data in each node: every reply carries them.
const DATA_LEN: usize = 32 * 1024;
/// Reads in flight at once, all on one session.
const READS: usize = 10_000;

fn path(node: usize) -> String {
    format!("/pipe/n{node}-{}", "x".repeat(NAME_LEN))
}

fn data(node: usize) -> Vec<u8> {
    (0..DATA_LEN).map(|j| (node * 31 + j) as u8).collect()
}

/// A session on a fresh server with the nodes created.
async fn setup(server: &TestServer) -> Client {
    let (zk, _events) = Client::connect(&server.connect_string(), 30_000)
        .await
        .unwrap();
    zk.create("/pipe", b"", CreateMode::Persistent)
        .await
        .unwrap();
    for node in 0..NODES {
        zk.create(&path(node), &data(node), CreateMode::Persistent)
            .await
            .unwrap();
    }
    eprintln!(
        "{READS} reads on one connection: requests ~{} MB, replies ~{} MB",
        (READS * (NAME_LEN + 20)) >> 20,
        (READS * DATA_LEN) >> 20
    );
    zk
}

/// Fails the test with `what` if `work` does not finish within [`DEADLINE`].
async fn live<F: std::future::Future>(what: &str, work: F) -> F::Output {
    tokio::time::timeout(DEADLINE, work)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{what}: not done within {DEADLINE:?}; the client and the server are waiting \
             for each other (does the client stop reading while a write is blocked?)"
            )
        })
}

/// Every read is its own task calling `get_data`: they all queue at once, so the
/// client's queue fills and callers wait for room while the connection is busy both
/// ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_large_reads_in_flight_all_complete() {
    let server = TestServer::start().await.unwrap();
    let started = std::time::Instant::now();
    live("get_data x10,000", async {
        let zk = setup(&server).await;
        let mut reads = JoinSet::new();
        for i in 0..READS {
            let zk = zk.clone();
            reads.spawn(async move {
                let node = i % NODES;
                let (got, _stat) = zk.get_data(&path(node), false).await?;
                Ok::<_, Error>((node, got))
            });
        }
        let mut done = 0;
        while let Some(r) = reads.join_next().await {
            let (node, got) = r.unwrap().unwrap_or_else(|e| panic!("a read failed: {e}"));
            assert!(got == data(node), "read of node {node}: wrong data");
            done += 1;
        }
        assert_eq!(done, READS);
        zk.close().await.unwrap();
    })
    .await;
    eprintln!("done in {:?}", started.elapsed());
}

/// The same reads through `Client::send` from one task: each is queued (or takes its
/// place in line) when `send` is called, and the replies are awaited in call order, so
/// each must be the reply to its own request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_large_sends_answered_in_call_order() {
    let server = TestServer::start().await.unwrap();
    let started = std::time::Instant::now();
    live("send x10,000", async {
        let zk = setup(&server).await;
        let replies: Vec<_> = (0..READS)
            .map(|i| {
                zk.send(&Request::GetData(PathWatchRequest {
                    path: path(i % NODES),
                    watch: false,
                }))
            })
            .collect();
        for (i, reply) in replies.into_iter().enumerate() {
            let (h, body) = reply
                .await
                .unwrap_or_else(|e| panic!("send {i} failed: {e}"));
            assert_eq!(h.err, 0, "send {i}: error {}", h.err);
            let r = GetDataResponse::decode(&mut Reader::new(&body)).unwrap();
            let node = i % NODES;
            assert!(
                r.data == Some(data(node)),
                "send {i}: not node {node}'s data"
            );
        }
        zk.close().await.unwrap();
    })
    .await;
    eprintln!("done in {:?}", started.elapsed());
}
