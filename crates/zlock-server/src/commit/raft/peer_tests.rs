//! [`Peer::call`] against a scripted member on a loopback port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use super::peer::{read_frame, write_frame, Hello, Identity, Peer, Reply, Request};

/// A member that accepts one connection after another, answers the hello, then
/// answers the n-th `ReadIndex` on the whole (counting from 1) with `n`, the first one
/// after `first_delay`.
async fn scripted_member(first_delay: Duration) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut n = 0u64;
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            if read_frame::<Hello>(&mut s).await.is_err() {
                continue;
            }
            write_frame(&mut s, &Reply::Hello(Ok(()))).await.unwrap();
            while let Ok(Request::ReadIndex) = read_frame::<Request>(&mut s).await {
                n += 1;
                if n == 1 {
                    tokio::time::sleep(first_delay).await;
                }
                if write_frame(&mut s, &Reply::ReadIndex(Ok(n))).await.is_err() {
                    break;
                }
            }
        }
    });
    addr
}

/// A peer of member 1 to member 2 at `addr`.
pub(super) fn peer(addr: String) -> Peer {
    let id = Arc::new(Identity {
        ensemble: "test".into(),
        me: 1,
        members: BTreeSet::from([1, 2]),
        open: false,
        links: Default::default(),
    });
    Peer::new(id, 2, addr)
}

/// A call dropped before its reply arrived (openraft cancels an RPC at its own
/// timeout) must not leave that reply to be read as the answer to the next call.
#[tokio::test]
async fn a_cancelled_call_does_not_hand_its_reply_to_the_next() {
    let addr = scripted_member(Duration::from_millis(200)).await;
    let mut p = peer(addr);
    let ttl = Duration::from_secs(5);
    let cut = tokio::time::timeout(Duration::from_millis(50), p.call(&Request::ReadIndex, ttl));
    assert!(cut.await.is_err(), "the first call is cancelled");
    tokio::time::sleep(Duration::from_millis(300)).await;
    match p.call(&Request::ReadIndex, ttl).await.unwrap() {
        Reply::ReadIndex(Ok(n)) => assert_eq!(n, 2, "the second call got the first's reply"),
        other => panic!("{other:?}"),
    }
}
