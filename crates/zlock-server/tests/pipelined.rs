//! Replies leave in request order, whoever writes them: reads of an idle session are
//! answered by the connection task, writes (and reads queued behind them) by the commit
//! thread, and bytes the socket does not take at once by the connection's writer task.
//! A client that pipelines hundreds of requests and reads nothing until the end forces
//! all three paths on one connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::rawclient::{handshake, read_frame, request_frame, send_bytes};
use zlock_proto::records::{GetDataResponse, ReplyHeader};
use zlock_proto::{Reader, Record, Request};
use zlock_testkit::TestServer;

use common::rawclient::{create_req, get_data_req, set_data_req};

fn encode(req: &Request) -> (i32, Vec<u8>) {
    let mut body = Vec::new();
    req.encode(&mut body);
    (req.op_code() as i32, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_late_gets_every_reply_in_order() {
    let server = TestServer::start().await.unwrap();
    let (mut s, _) = handshake(server.addr).await.unwrap();

    // 64 KiB per read reply, 200 of them: far more than a socket buffer holds.
    let big = vec![b'x'; 64 * 1024];
    let mut xid = 0;
    let mut frames = Vec::new();
    let mut next = |req: Request, frames: &mut Vec<u8>| {
        xid += 1;
        let (op, body) = encode(&req);
        frames.extend_from_slice(&request_frame(xid, op, &body));
        xid
    };
    next(create_req("/big", &big), &mut frames);
    next(create_req("/n", b"0"), &mut frames);
    // What each xid must answer: None for a write, Some(data) for a read.
    let mut expect: Vec<(i32, Option<Vec<u8>>)> = vec![(1, None), (2, None)];
    for i in 1..=200 {
        let x = next(get_data_req("/big"), &mut frames);
        expect.push((x, Some(big.clone())));
        if i % 3 == 0 {
            let v = i.to_string().into_bytes();
            let x = next(set_data_req("/n", &v, -1), &mut frames);
            expect.push((x, None));
            // Read-your-writes: queued behind the write of the same session.
            let x = next(get_data_req("/n"), &mut frames);
            expect.push((x, Some(v)));
        }
    }
    send_bytes(&mut s, &frames).await.unwrap();
    // Let the server run into the full socket buffer before anything is read.
    tokio::time::sleep(Duration::from_millis(300)).await;

    for (want_xid, want_data) in expect {
        let body = tokio::time::timeout(Duration::from_secs(20), read_frame(&mut s))
            .await
            .expect("reply did not arrive")
            .unwrap();
        let mut r = Reader::new(&body);
        let hdr = ReplyHeader::decode(&mut r).unwrap();
        assert_eq!(hdr.xid, want_xid, "replies out of order");
        assert_eq!(hdr.err, 0, "xid {want_xid} failed");
        if let Some(data) = want_data {
            let resp = GetDataResponse::decode(&mut r).unwrap();
            assert_eq!(resp.data.as_deref(), Some(&data[..]), "xid {want_xid}");
        }
    }
}

/// One write whose watch fires for more sessions than the commit thread writes to
/// itself (the rest goes through the connections' writer tasks): every session gets its
/// event, and sees the new data when it reads after the event. Sessions of 30 s ping
/// every 10 s: an event left sitting in a queue would only leave with the next ping's
/// reply, after the 5 s this test waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_firing_for_many_sessions_reaches_every_one() {
    use zlock::{Client, CreateMode, EventType};

    let server = TestServer::start().await.unwrap();
    let addr = server.connect_string();
    let (writer, _) = Client::connect(&addr, 30_000).await.unwrap();
    writer
        .create("/w", b"old", CreateMode::Persistent)
        .await
        .unwrap();
    let mut watchers = Vec::new();
    for _ in 0..100 {
        let (c, _) = Client::connect(&addr, 30_000).await.unwrap();
        let (data, _, w) = c.get_data_watch("/w").await.unwrap();
        assert_eq!(data, b"old");
        watchers.push((c, w));
    }
    // The writer's reply leaves in the same batch as the events, by the same path.
    tokio::time::timeout(Duration::from_secs(5), writer.set_data("/w", b"new", -1))
        .await
        .expect("reply did not arrive")
        .unwrap();
    for (c, w) in watchers {
        let ev = tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("event did not arrive")
            .unwrap();
        assert_eq!(ev.event_type, EventType::NodeDataChanged);
        assert_eq!(c.get_data("/w", false).await.unwrap().0, b"new");
        c.close().await.unwrap();
    }
}

/// Far more requests in flight than the sequencer's queue holds (`globalOutstandingLimit`
/// set to 4 here): 12 connections each pipeline 900 writes, each followed by a read of
/// what it wrote, all sent before any reply is read. The connections find the queue
/// full and must wait for room, over and over, without deadlock (nothing that drains
/// the queue waits for them); every reply still comes, in order, with the session's own
/// write visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_in_flight_than_the_queue_holds_all_answered_in_order() {
    const CONNS: usize = 12;
    const EACH: i32 = 900;
    let server = TestServer::start_with(|c| c.global_outstanding_limit = 4)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for c in 0..CONNS {
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let (mut s, _) = handshake(addr).await.unwrap();
            let mut frames = Vec::new();
            for i in 1..=EACH {
                let p = format!("/q{c}-{i}");
                let (op, body) = encode(&create_req(&p, p.as_bytes()));
                frames.extend_from_slice(&request_frame(2 * i - 1, op, &body));
                let (op, body) = encode(&get_data_req(&p));
                frames.extend_from_slice(&request_frame(2 * i, op, &body));
            }
            send_bytes(&mut s, &frames).await.unwrap();
            for xid in 1..=2 * EACH {
                let f = read_frame(&mut s).await.unwrap();
                let mut r = Reader::new(&f);
                let h = ReplyHeader::decode(&mut r).unwrap();
                assert_eq!(h.xid, xid, "connection {c}: replies in request order");
                assert_eq!(h.err, 0, "connection {c}, xid {xid}");
                if xid % 2 == 0 {
                    let d = GetDataResponse::decode(&mut r).unwrap();
                    let want = format!("/q{c}-{}", xid / 2);
                    assert_eq!(d.data.as_deref(), Some(want.as_bytes()), "read-your-writes");
                }
            }
        }));
    }
    tokio::time::timeout(Duration::from_secs(120), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("every pipelined request answered within 120 s");
}
