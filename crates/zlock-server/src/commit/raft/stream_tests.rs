//! [`Peer::stream_appends`] against a scripted follower on a loopback port: appends are
//! pipelined, replies matched in order, and a stream that ends on anything but whole
//! successes does not leave its connection to the next one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use openraft::network::RPCOption;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, StreamAppendError};
use tokio::net::TcpListener;

use super::peer::{read_frame, write_frame, Hello, Peer, Reply, Request};
use super::peer_tests::peer;
use super::types::{log_id, Vote, Zraft};

/// A follower that, on each connection it accepts (counted in the returned counter),
/// answers the hello, reads `batch` appends before it answers any (so a sender that
/// waits for each reply before the next never gets an answer), then answers them in
/// order with `answer(n)`, n counting appends on the whole from 0; again for the next
/// `batch`, until the connection closes.
async fn follower(
    batch: usize,
    answer: fn(usize) -> AppendEntriesResponse<Zraft>,
) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let conns = Arc::new(AtomicUsize::new(0));
    let counted = conns.clone();
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            if read_frame::<Hello>(&mut s).await.is_err() {
                continue;
            }
            write_frame(&mut s, &Reply::Hello(Ok(()))).await.unwrap();
            'conn: loop {
                for _ in 0..batch {
                    match read_frame::<Request>(&mut s).await {
                        Ok(Request::Append(_)) => {}
                        _ => break 'conn,
                    }
                }
                for _ in 0..batch {
                    let reply = Reply::Append(Ok(answer(n)));
                    n += 1;
                    if write_frame(&mut s, &reply).await.is_err() {
                        break 'conn;
                    }
                }
            }
        }
    });
    (addr, conns)
}

/// Every answer of one stream of `input`, within 30 s.
async fn run_stream(
    p: &mut Peer,
    input: impl futures_util::Stream<Item = AppendEntriesRequest<Zraft>> + Send + Unpin + 'static,
    option: RPCOption,
) -> Vec<Result<openraft::raft::StreamAppendResult<Zraft>, openraft::errors::RPCError<Zraft>>> {
    tokio::time::timeout(Duration::from_secs(30), async {
        p.stream_appends(input, option)
            .await
            .unwrap()
            .collect::<Vec<_>>()
            .await
    })
    .await
    .expect("the stream ends within 30 s")
}

/// The `i`-th of a run of entry-less appends (each one index after the last): what
/// matters here is only its `prev_log_id`, which its success acknowledges.
fn append(i: u64) -> AppendEntriesRequest<Zraft> {
    AppendEntriesRequest {
        vote: Vote::new_committed(1, 1),
        prev_log_id: Some(log_id(1, 1, 10 + i)),
        entries: Vec::new(),
        leader_commit: None,
    }
}

fn option() -> RPCOption {
    RPCOption::new(Duration::from_secs(10))
}

/// Eight appends are all written before the first reply comes (the follower answers
/// none before it has all eight): a transport that waits for each reply would get no
/// answer at all. The answers come in order, each acknowledging its own append.
#[tokio::test]
async fn appends_are_in_flight_together_and_answered_in_order() {
    let (addr, conns) = follower(8, |_| AppendEntriesResponse::Success).await;
    let mut p = peer(addr);
    let input = futures_util::stream::iter((0..8).map(append));
    let answers = run_stream(&mut p, input, option()).await;
    let got: Vec<_> = answers.into_iter().map(|a| a.unwrap().unwrap()).collect();
    let want: Vec<_> = (0..8).map(|i| Some(log_id(1, 1, 10 + i))).collect();
    assert_eq!(got, want);
    // A stream whose appends were all answered hands its connection on.
    let one = futures_util::stream::iter([append(8)]);
    tokio::time::timeout(Duration::from_secs(30), async {
        let mut s = p.stream_appends(one, option()).await.unwrap();
        // The scripted follower answers in batches of eight: this lone append waits,
        // unanswered, on the same connection (a new one would be counted).
        let waited = tokio::time::timeout(Duration::from_millis(300), s.next()).await;
        assert!(waited.is_err(), "no answer before seven more: {waited:?}");
    })
    .await
    .unwrap();
    assert_eq!(conns.load(Ordering::SeqCst), 1, "the connection was reused");
}

/// A conflict ends the stream: the answers before it and the conflict itself reach
/// openraft, nothing after it does, and the next stream opens a new connection (replies
/// to appends written after the conflict may still come on the old one).
#[tokio::test]
async fn a_conflict_ends_the_stream_and_its_connection() {
    let (addr, conns) = follower(4, |n| match n {
        1 => AppendEntriesResponse::Conflict,
        _ => AppendEntriesResponse::Success,
    })
    .await;
    let mut p = peer(addr);
    let input = futures_util::stream::iter((0..4).map(append));
    let answers = run_stream(&mut p, input, option()).await;
    let got: Vec<_> = answers.into_iter().map(|a| a.unwrap()).collect();
    assert_eq!(
        got,
        vec![
            Ok(Some(log_id(1, 1, 10))),
            Err(StreamAppendError::Conflict(log_id(1, 1, 11))),
        ]
    );
    let input = futures_util::stream::iter((4..8).map(append));
    let answers = run_stream(&mut p, input, option()).await;
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert_eq!(conns.load(Ordering::SeqCst), 2, "a new connection");
}

/// A reply that does not come within the RPC's time ends the stream with a timeout
/// (openraft retries at the next heartbeat), and the connection is not reused.
#[tokio::test]
async fn a_late_reply_ends_the_stream_with_a_timeout() {
    // Answers only in batches of two: a lone append is never answered.
    let (addr, conns) = follower(2, |_| AppendEntriesResponse::Success).await;
    let mut p = peer(addr);
    let input = futures_util::stream::iter([append(0)]);
    let answers = run_stream(&mut p, input, RPCOption::new(Duration::from_millis(200))).await;
    assert_eq!(answers.len(), 1);
    assert!(
        matches!(answers[0], Err(openraft::errors::RPCError::Timeout(_))),
        "{answers:?}"
    );
    let input = futures_util::stream::iter([append(1), append(2)]);
    let answers = run_stream(&mut p, input, option()).await;
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(
        answers.iter().all(|a| matches!(a, Ok(Ok(_)))),
        "{answers:?}"
    );
    assert_eq!(conns.load(Ordering::SeqCst), 2, "a new connection");
}

/// A reply may take longer than the RPC's time (a follower's fsync on a shared disk
/// sometimes does), up to [`super::stream::ANSWER_PATIENCE`] times it: the stream goes
/// on, on the same connection. With one RPC time, the first reply here was late.
#[tokio::test]
async fn a_reply_later_than_the_rpc_time_but_within_the_patience_is_taken() {
    // Answers in batches of two: the first append's reply comes only once the second,
    // sent two RPC times after it, has been read.
    let (addr, conns) = follower(2, |_| AppendEntriesResponse::Success).await;
    let mut p = peer(addr);
    let rpc = Duration::from_millis(200);
    let second = Box::pin(futures_util::stream::once(async move {
        tokio::time::sleep(rpc * 2).await;
        append(1)
    }));
    let input = futures_util::stream::iter([append(0)]).chain(second);
    let answers = run_stream(&mut p, input, RPCOption::new(rpc)).await;
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(
        answers.iter().all(|a| matches!(a, Ok(Ok(_)))),
        "{answers:?}"
    );
    assert_eq!(conns.load(Ordering::SeqCst), 1, "one connection");
}

/// A member that refuses connections fails the stream as unreachable, and only after
/// the stream asked openraft for its first request: openraft waits out its backoff
/// while it makes one, and a stream that failed before asking had the leader retry a
/// down member in a tight loop.
#[tokio::test]
async fn a_refused_connection_fails_after_the_first_request_is_asked_for() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let mut p = peer(addr);
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let input = futures_util::stream::iter((0..3).map(append)).inspect(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let answers = run_stream(&mut p, input, option()).await;
    assert_eq!(asked.load(Ordering::SeqCst), 1, "one request asked for");
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(
        matches!(answers[0], Err(openraft::errors::RPCError::Unreachable(_))),
        "{answers:?}"
    );
}
