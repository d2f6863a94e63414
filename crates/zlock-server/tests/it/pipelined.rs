//! Replies leave in request order, whoever writes them: reads of an idle session are
//! answered by the connection task, writes (and reads queued behind them) by the commit
//! thread, and bytes the socket does not take at once by the connection's writer task.
//! A client that pipelines hundreds of requests and reads nothing until the end forces
//! all three paths on one connection. Long reads (getAllChildrenNumber of a big subtree)
//! add a fourth writer, the long-read thread, filling in replies whose place was held.

use std::time::Duration;

use crate::common::rawclient::{handshake, read_frame, request_frame, send_bytes};
use zlock_proto::records::{
    event_type, GetAllChildrenNumberResponse, GetDataResponse, PathRequest, PathWatchRequest,
    ReplyHeader, WatcherEvent, XID_NOTIFICATION,
};
use zlock_proto::{Reader, Record, Request};
use zlock_testkit::TestServer;

use crate::common::rawclient::{
    create_req, delete_req, expect_in_order, get_data_req, late_reader_script,
};

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
    let (frames, _, expect) = late_reader_script();
    send_bytes(&mut s, &frames).await.unwrap();
    // Let the server run into the full socket buffer before anything is read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    expect_in_order(&mut s, expect, Duration::from_secs(20)).await;
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

fn count_req(path: &str) -> Request {
    Request::GetAllChildrenNumber(PathRequest { path: path.into() })
}

/// Sends `reqs` pipelined on `s` (xids from `first`), then reads every reply in order;
/// returns the bodies, each checked for its xid and for error 0.
async fn pipeline(s: &mut tokio::net::TcpStream, first: i32, reqs: &[Request]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for (i, req) in reqs.iter().enumerate() {
        let (op, body) = encode(req);
        frames.extend_from_slice(&request_frame(first + i as i32, op, &body));
    }
    send_bytes(s, &frames).await.unwrap();
    let mut bodies = Vec::new();
    for (i, req) in reqs.iter().enumerate() {
        let want = first + i as i32;
        let f = tokio::time::timeout(Duration::from_secs(60), read_frame(s))
            .await
            .expect("reply did not arrive")
            .unwrap();
        let mut r = Reader::new(&f);
        let h = ReplyHeader::decode(&mut r).unwrap();
        assert_eq!(h.xid, want, "replies out of order");
        assert_eq!(h.err, 0, "xid {want} ({:?}) failed", req.op_code());
        bodies.push(r.rest().to_vec());
    }
    bodies
}

fn total(body: &[u8]) -> i32 {
    GetAllChildrenNumberResponse::decode(&mut Reader::new(body))
        .unwrap()
        .total_number
}

/// getAllChildrenNumber of a subtree too big to walk under the core's lock (its walk is
/// finished by the long-read thread, its reply's place held on the connection),
/// pipelined with writes of the same session that change the count: served in place
/// (nothing in flight) and behind writes, every count is the one after exactly the
/// writes sent before it, and every reply leaves in xid order, short reads included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_reads_pipelined_with_writes_count_in_order() {
    let server = TestServer::start().await.unwrap();
    let (mut s, _) = handshake(server.addr).await.unwrap();
    let mut setup = vec![create_req("/big", b""), create_req("/big/sub", b"")];
    setup.extend((0..10).map(|i| create_req(&format!("/big/sub/x{i}"), b"")));
    setup.extend((0..3000).map(|i| create_req(&format!("/big/n{i}"), b"x")));
    let mut xid = 1;
    pipeline(&mut s, xid, &setup).await;
    xid += setup.len() as i32;
    let mut count = 3000 + 1 + 10;

    // A long read of an idle session first (answered by the connection task), then
    // writes with long and short reads behind them.
    let mut reqs = vec![count_req("/big")];
    let mut want: Vec<Option<i32>> = vec![Some(count)];
    for i in 0..40 {
        reqs.push(create_req(&format!("/big/a{i}"), b""));
        want.push(None);
        count += 1;
        if i % 3 == 0 {
            reqs.push(delete_req(&format!("/big/n{i}"), -1));
            want.push(None);
            count -= 1;
        }
        reqs.push(count_req("/big"));
        want.push(Some(count));
        reqs.push(count_req("/big/sub"));
        want.push(Some(10));
        reqs.push(get_data_req(&format!("/big/n{}", 2999 - i)));
        want.push(None);
    }
    let bodies = pipeline(&mut s, xid, &reqs).await;
    xid += reqs.len() as i32;
    for (i, (body, want)) in bodies.iter().zip(&want).enumerate() {
        if let Some(n) = want {
            assert_eq!(total(body), *n, "request {i} of the batch");
        }
    }
    // Idle again: one more, in place.
    let bodies = pipeline(&mut s, xid, &[count_req("/big")]).await;
    assert_eq!(total(&bodies[0]), count);
}

/// A watch event and a long read of the watching session keep the order in which the
/// core produced them: a create of another session either was applied before the read
/// was served (then its NodeChildrenChanged comes first and the count includes it) or
/// after (then the reply comes first, without it, and the event waits behind the
/// reply's held place). Every other round sends the write and the read at once, and
/// either may win (here usually the read: the write waits for an fsync); the rounds
/// between send the write first and wait for its answer, so the event comes first.
/// Whatever happened, it must be one of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_event_and_a_long_read_leave_in_the_order_served() {
    let server = TestServer::start().await.unwrap();
    let (mut a, _) = handshake(server.addr).await.unwrap();
    let (mut b, _) = handshake(server.addr).await.unwrap();
    let mut setup = vec![create_req("/w", b"")];
    setup.extend((0..2000).map(|i| create_req(&format!("/w/n{i}"), b"")));
    pipeline(&mut a, 1, &setup).await;
    let mut xid = 1 + setup.len() as i32;
    for round in 0..30 {
        // Children of /w before this round's create.
        let before = 2000 + round;
        let watch = Request::GetChildren(PathWatchRequest {
            path: "/w".into(),
            watch: true,
        });
        pipeline(&mut a, xid, &[watch]).await;
        xid += 1;
        let (op, body) = encode(&count_req("/w"));
        let read = request_frame(xid, op, &body);
        let (op, body) = encode(&create_req(&format!("/w/r{round}"), b""));
        let write = request_frame(round + 1, op, &body);
        let mut b_answered = false;
        if round % 2 == 0 {
            tokio::join!(async { send_bytes(&mut a, &read).await.unwrap() }, async {
                send_bytes(&mut b, &write).await.unwrap()
            },);
        } else {
            // The write first, answered before the read is sent: the event comes first.
            send_bytes(&mut b, &write).await.unwrap();
            let f = read_frame(&mut b).await.unwrap();
            assert_eq!(ReplyHeader::decode(&mut Reader::new(&f)).unwrap().err, 0);
            b_answered = true;
            send_bytes(&mut a, &read).await.unwrap();
        }
        let mut event_first = None;
        let mut counted = None;
        while counted.is_none() {
            let f = tokio::time::timeout(Duration::from_secs(60), read_frame(&mut a))
                .await
                .expect("frame did not arrive")
                .unwrap();
            let mut r = Reader::new(&f);
            let h = ReplyHeader::decode(&mut r).unwrap();
            if h.xid == XID_NOTIFICATION {
                let ev = WatcherEvent::decode(&mut r).unwrap();
                assert_eq!(ev.event_type, event_type::NODE_CHILDREN_CHANGED);
                event_first.get_or_insert(true);
            } else {
                assert_eq!(h.xid, xid);
                event_first.get_or_insert(false);
                counted = Some(GetAllChildrenNumberResponse::decode(&mut r).unwrap());
            }
        }
        let n = counted.unwrap().total_number;
        if event_first == Some(true) {
            assert_eq!(
                n,
                before + 1,
                "round {round}: event first, count without its node"
            );
        } else {
            assert_eq!(
                n, before,
                "round {round}: reply first, count with the new node"
            );
            // The event follows.
            let f = read_frame(&mut a).await.unwrap();
            let h = ReplyHeader::decode(&mut Reader::new(&f)).unwrap();
            assert_eq!(h.xid, XID_NOTIFICATION);
        }
        if !b_answered {
            let f = read_frame(&mut b).await.unwrap();
            assert_eq!(ReplyHeader::decode(&mut Reader::new(&f)).unwrap().err, 0);
        }
        xid += 1;
    }
}
