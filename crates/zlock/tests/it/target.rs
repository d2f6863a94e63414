//! Where a suite runs: one server (an in-process zlock server, Apache ZooKeeper) or the
//! members of a zlock ensemble ([`zlock_testkit::ChildEnsemble`]). Scenarios take a
//! [`Target`] and give their client `k` the connect string [`Target::hosts`]`(k)`: on
//! an ensemble that names every member, member `k % n` first (the zlock client tries
//! the hosts in order, so it sits on that member while it is up), which spreads the
//! contenders of a scenario over the members: a lock handed from one contender to the
//! next crosses members.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zlock::Client;
use zlock_proto::records::PathRequest;
use zlock_proto::Request;

/// The client addresses of a server or of an ensemble's members.
#[derive(Clone, Debug)]
pub struct Target {
    members: Vec<SocketAddr>,
}

impl Target {
    /// From a connect string without chroot (`host:port[,host:port...]`), as the
    /// testkit's servers and ensembles give it.
    pub fn parse(connect_string: &str) -> Target {
        let members: Vec<SocketAddr> = connect_string
            .split(',')
            .map(|h| {
                h.parse()
                    .unwrap_or_else(|e| panic!("{h} in {connect_string}: {e}"))
            })
            .collect();
        assert!(!members.is_empty(), "no host in {connect_string:?}");
        Target { members }
    }

    /// More than one member.
    pub fn is_ensemble(&self) -> bool {
        self.members.len() > 1
    }

    /// Member `k % n`'s client address.
    pub fn member(&self, k: usize) -> SocketAddr {
        self.members[k % self.members.len()]
    }

    /// Every member's client address.
    pub fn members(&self) -> &[SocketAddr] {
        &self.members
    }

    /// The connect string of client `k`: every member, member `k % n` first.
    pub fn hosts(&self, k: usize) -> String {
        let n = self.members.len();
        join((0..n).map(|i| self.member(k + i)))
    }

    /// Every member but `k % n` (the one server if there is only one): for a client
    /// that shuffles its hosts (Curator, kazoo) and must not sit on member `k`.
    pub fn hosts_except(&self, k: usize) -> String {
        let n = self.members.len();
        if n == 1 {
            return self.hosts(0);
        }
        join((1..n).map(|i| self.member(k + i)))
    }

    /// `first` (a proxy in front of member `k`), then the members other than `k`: a
    /// client given this moves to another member when the proxy refuses it.
    pub fn hosts_after(&self, first: SocketAddr, k: usize) -> String {
        let n = self.members.len();
        join(std::iter::once(first).chain((1..n).map(|i| self.member(k + i))))
    }
}

fn join(hosts: impl Iterator<Item = SocketAddr>) -> String {
    hosts.map(|h| h.to_string()).collect::<Vec<_>>().join(",")
}

/// A four-letter word's answer from one server.
pub async fn four_letters(addr: SocketAddr, word: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(word).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// A numeric `mntr` key of one server, if it has it.
pub async fn mntr(addr: SocketAddr, key: &str) -> Option<u64> {
    four_letters(addr, b"mntr")
        .await
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
}

/// The watches registered on every member (`Total watches:` of `wchs`, summed: each
/// member holds the watches of its own clients) plus zlock's queued native lock
/// waiters (`zlock_native_lock_waiters` of `mntr`; the lock queue is replicated state,
/// so it is read from member 0 alone; absent on ZooKeeper). How a test knows that
/// waiters sit on their watch or grant, with no request of theirs in flight.
///
/// Read while every member reports one zxid (`srvr`), before and after: members apply
/// at their own pace, and a session's expiry applied on one member and not yet on the
/// one holding its watch would count that watch for a moment. Waits (at most a minute)
/// for such a quiet moment.
pub async fn parked(t: &Target) -> usize {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let before = zxids(t).await;
        let n = parked_now(t).await;
        let after = zxids(t).await;
        if before == after && before.windows(2).all(|w| w[0] == w[1]) {
            return n;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the members never agreed on a zxid: {before:?} then {after:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Every member's `Zxid:` line of `srvr` (as text: ZooKeeper prints it in hex).
async fn zxids(t: &Target) -> Vec<String> {
    let mut out = Vec::new();
    for &m in t.members() {
        let srvr = four_letters(m, b"srvr").await;
        let z = srvr
            .lines()
            .find_map(|l| l.strip_prefix("Zxid:"))
            .unwrap_or_else(|| panic!("srvr of {m} gave no zxid:\n{srvr}"));
        out.push(z.trim().to_owned());
    }
    out
}

async fn parked_now(t: &Target) -> usize {
    let mut watches = 0;
    for &m in t.members() {
        watches += four_letters(m, b"wchs")
            .await
            .lines()
            .find_map(|l| l.strip_prefix("Total watches:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or_else(|| panic!("wchs of {m} gave no total"));
    }
    let native = mntr(t.member(0), "zlock_native_lock_waiters")
        .await
        .unwrap_or(0);
    watches + native as usize
}

/// What [`parked`] counted, member by member (`wchp`: each watched path with its
/// sessions), for a failure message.
pub async fn parked_detail(t: &Target) -> String {
    let mut out = String::new();
    for &m in t.members() {
        let paths = four_letters(m, b"wchp").await;
        let native = mntr(m, "zlock_native_lock_waiters").await;
        out.push_str(&format!(
            "{m} (native lock waiters {native:?}) wchp:\n{paths}"
        ));
    }
    out
}

/// `sync("/")`: afterwards the client's member has applied every write acknowledged
/// before, by whichever member. Reads are answered by the member a client is on and
/// are sequentially consistent per session, not across sessions: on an ensemble a
/// client checking what another client (on another member) did syncs first. A round
/// trip more on one server.
pub async fn sync(zk: &Client) {
    let (h, _) = zk
        .send(&Request::Sync(PathRequest { path: "/".into() }))
        .await
        .unwrap_or_else(|e| panic!("sync: {e}"));
    assert_eq!(h.err, 0, "sync: error code {}", h.err);
}
