//! Asking an ensemble's members what they are: four-letter words, and who leads.

use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::ChildEnsemble;

impl ChildEnsemble {
    /// A four-letter word's answer from member `i` (`None` if it does not answer
    /// within `within`, e.g. while stopped).
    pub async fn four_letters(&self, i: usize, word: &str, within: Duration) -> Option<String> {
        let addr = self.members[i].client;
        let ask = async {
            let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
            s.write_all(word.as_bytes()).await.ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).await.ok()?;
            Some(out)
        };
        tokio::time::timeout(within, ask).await.ok().flatten()
    }

    /// What member `i`'s `srvr` says after `Mode:` (`leader`, `follower`, `observer`), if it
    /// answers within 500 ms. `None` too while it serves nobody (it waits for its peers,
    /// has no quorum, or was removed): `srvr` then answers ZooKeeper's "not currently
    /// serving requests", with no mode.
    pub async fn mode(&self, i: usize) -> Option<String> {
        let out = self
            .four_letters(i, "srvr", Duration::from_millis(500))
            .await?;
        out.lines()
            .find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_owned()))
    }

    /// The one member (among those up and not cut off) that says it leads, once exactly
    /// one does and every other such member says `follower` (`observer` for an
    /// observer), the same in two rounds of
    /// asking 20 ms apart (the members are asked one after another: while an election
    /// settles, one round can catch a candidate's moment as leader and the winner
    /// before it wins); waits at most `within`. A cut-off member is not asked: it may
    /// still believe it leads.
    pub async fn leader_within(&self, within: Duration) -> anyhow::Result<usize> {
        let all: Vec<usize> = (0..self.members.len()).collect();
        self.leader_among(&all, within).await
    }

    /// As [`ChildEnsemble::leader_within`], asking only `members` (those of them up and
    /// not cut off): for instance the members a `reconfig` kept, while those it removed
    /// still run (they serve nobody, and say so: neither leader nor follower).
    pub async fn leader_among(&self, members: &[usize], within: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + within;
        let mut last = Vec::new();
        let mut seen = None;
        loop {
            last.clear();
            for &i in members {
                if self.is_up(i) && !self.is_cut(i) {
                    last.push((i, self.mode(i).await));
                }
            }
            let leaders: Vec<usize> = last
                .iter()
                .filter(|(_, m)| m.as_deref() == Some("leader"))
                .map(|(i, _)| *i)
                .collect();
            let followers = last
                .iter()
                .filter(|(i, m)| {
                    let want = if self.is_observer(*i) {
                        "observer"
                    } else {
                        "follower"
                    };
                    m.as_deref() == Some(want)
                })
                .count();
            let now = (leaders.len() == 1 && followers + 1 == last.len()).then(|| leaders[0]);
            if now.is_some() && now == seen {
                return Ok(leaders[0]);
            }
            seen = now;
            if Instant::now() > deadline {
                bail!("no single leader after {within:?}: {last:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`ChildEnsemble::leader_within`] 30 s.
    pub async fn leader(&self) -> anyhow::Result<usize> {
        self.leader_within(Duration::from_secs(30)).await
    }
}
