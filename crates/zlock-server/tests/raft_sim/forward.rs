//! The simulated forwarding connection: a member that does not lead forwards its
//! writer's frames (`write::Writer`'s remote route) to the leader over one, as over the
//! peer link in the server, and the leader takes them through the server's own
//! `submit::Forwards`, stamped with its clock, and answers in order.
//!
//! It behaves as a TCP connection does, which is what the writer's rules have to hold
//! against:
//!
//! - opening one takes a round trip, and fails if the leader is down or cut off;
//! - frames arrive in the order written, each after the usual one-way delay (or late);
//! - a cut link loses nothing: a frame waits for the heal, and then for the sender's
//!   next retransmission, whose interval doubles from 200 ms while the link stays cut
//!   (so a frame can arrive a second or more after the heal, behind a connection opened
//!   since);
//! - a writer that closes its end (it gave up on the leader) still has what it wrote
//!   delivered, as a FIN follows the data; the answers to it are lost;
//! - the leader's crash breaks the connection: the writer reads its end.

use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::watch::{Watch as _, WatchReceiver as _, WatchSender as _};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zlock_server::commit::raft::peer::{read_frame, write_frame, FrameError, Reply, Request};
use zlock_server::commit::raft::runtime::{ZWatch, ZWatchSender};
use zlock_server::commit::raft::submit::Forwards;
use zlock_server::commit::raft::types::Proposal;
use zlock_server::commit::raft::write::{Dial, ForwardRead, ForwardWrite};

use crate::net::one_way;
use crate::world::{lock, wall_of, Shared};

/// Whether a connection broke (the leader died, or a frame was given up), for every
/// task of it: zlock's runtime's watch, whose waiters wake in the order they began to
/// wait (tokio's draws the order from its unseeded RNG; see the crate's documentation).
type Dead = ZWatchSender<bool>;

/// Resolves once the connection breaks.
async fn broke(dead: &Dead) {
    let mut rx = dead.subscribe();
    while !*rx.borrow_watched() {
        // `dead` is a sender still: the channel cannot close under this wait.
        let _ = rx.changed().await;
    }
}

/// The first retransmission interval of a frame held by a cut link (Linux's minimum
/// RTO); it doubles with each retransmission.
const FIRST_RTO: Duration = Duration::from_millis(200);

/// How long a frame is retransmitted before the connection is given up (a reset).
const GIVE_UP: Duration = Duration::from_secs(60);

/// How `from`'s writer opens a forwarding connection in the simulation.
pub fn dial(world: Shared, from: u64) -> Dial {
    Arc::new(move |to| {
        let world = world.clone();
        Box::pin(async move { open(world, from, to).await })
    })
}

/// Whether `from` reaches `to` now, and the leader is the incarnation `life` still.
fn up(world: &Shared, (from, to): (u64, u64), (leader, life): (u64, u64)) -> Link {
    let w = lock(world);
    if w.incarnations.get(&leader) != Some(&life) || !w.rafts.contains_key(&leader) {
        Link::Dead
    } else if w.cut.contains(&(from, to)) {
        Link::Cut
    } else {
        Link::Up
    }
}

#[derive(PartialEq, Eq)]
enum Link {
    Up,
    Cut,
    Dead,
}

/// One direction of a connection between a member and the leader `(leader, life)`.
#[derive(Clone)]
struct Way {
    world: Shared,
    from: u64,
    to: u64,
    leader: (u64, u64),
    dead: Arc<Dead>,
}

impl Way {
    /// Carries what is sent on it, in order, each sent at the time it carries: after
    /// the one-way delay, and while the link is cut, at the sender's next retransmission
    /// once it heals (the interval doubling from [`FIRST_RTO`]). Ends when `input` does
    /// (what was sent still arrives), or when the connection breaks.
    async fn carry<T>(
        self,
        mut input: mpsc::UnboundedReceiver<(Instant, T)>,
        output: mpsc::UnboundedSender<T>,
    ) {
        let mut arrive = Instant::now();
        loop {
            let next = tokio::select! {
                biased;
                () = broke(&self.dead) => return,
                n = input.recv() => n,
            };
            let Some((sent, item)) = next else { return };
            let delay = one_way(&mut lock(&self.world));
            arrive = arrive.max(sent + delay);
            tokio::time::sleep_until(arrive).await;
            let mut rto = FIRST_RTO;
            loop {
                match up(&self.world, (self.from, self.to), self.leader) {
                    Link::Up => break,
                    Link::Dead => return self.broken("the leader is gone"),
                    Link::Cut if arrive - sent > GIVE_UP => return self.broken("given up"),
                    Link::Cut => {
                        arrive += rto;
                        rto *= 2;
                        tokio::time::sleep_until(arrive).await;
                    }
                }
            }
            if output.send(item).is_err() {
                return;
            }
        }
    }

    fn broken(&self, why: &str) {
        lock(&self.world).event(format!(
            "forwarding connection {}->{} broken: {why}",
            self.from, self.to
        ));
        // Not `send`, which changes nothing while no task waits.
        self.dead.send_if_modified(|d| !std::mem::replace(d, true));
    }
}

/// Opens a connection from `from` to the leader `to`, with its tasks: the frames' way
/// there, the leader's end, the answers' way back.
async fn open(
    world: Shared,
    from: u64,
    to: u64,
) -> Result<(ForwardRead, ForwardWrite), FrameError> {
    let (there, back) = {
        let mut w = lock(&world);
        (one_way(&mut w), one_way(&mut w))
    };
    tokio::time::sleep(there + back).await;
    let (raft, life, admitted) = {
        let w = lock(&world);
        let reached = !w.cut.contains(&(from, to)) && !w.cut.contains(&(to, from));
        match (w.rafts.get(&to), w.incarnations.get(&to), w.locals.get(&to)) {
            (Some(r), Some(&life), Some(l)) if reached => (r.clone(), life, l.forwards.admit(from)),
            _ => {
                return Err(FrameError::Io(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    format!("member {to} is down or cut off"),
                )))
            }
        }
    };
    lock(&world).event(format!("forwarding connection {from}->{to} opened"));
    let (mine, theirs) = tokio::io::duplex(1 << 20);
    let (their_rd, their_wr) = tokio::io::split(theirs);
    let dead = Arc::new(ZWatch::channel(false).0);
    let there = Way {
        world: world.clone(),
        from,
        to,
        leader: (to, life),
        dead: dead.clone(),
    };
    let back = Way {
        from: to,
        to: from,
        ..there.clone()
    };
    let (sent_tx, sent) = mpsc::unbounded_channel();
    let (frames_tx, frames) = mpsc::unbounded_channel();
    let (answers_tx, answers) = mpsc::unbounded_channel();
    let (back_tx, back_rx) = mpsc::unbounded_channel();
    tokio::spawn(inbound(their_rd, sent_tx, dead.clone()));
    tokio::spawn(there.clone().carry(sent, frames_tx));
    tokio::spawn(leader_side(
        there,
        Forwards::new(raft, to, wall_of(&world, to), admitted),
        frames,
        answers_tx,
    ));
    tokio::spawn(back.carry(answers, back_tx));
    tokio::spawn(outbound(their_wr, back_rx, dead));
    let (rd, wr) = tokio::io::split(mine);
    Ok((Box::new(rd), Box::new(wr)))
}

/// The frames as the writer writes them, until it closes its end (what it wrote still
/// goes) or the connection breaks.
async fn inbound(
    mut rd: tokio::io::ReadHalf<tokio::io::DuplexStream>,
    sent: mpsc::UnboundedSender<(Instant, Vec<Proposal>)>,
    dead: Arc<Dead>,
) {
    loop {
        let r = tokio::select! {
            biased;
            () = broke(&dead) => return,
            r = read_frame::<Request>(&mut rd) => r,
        };
        match r {
            Ok(Request::Forward(batch)) => {
                if sent.send((Instant::now(), batch)).is_err() {
                    return;
                }
            }
            // Nothing else goes on a forwarding connection; or the end of what was written.
            Ok(_) | Err(_) => return,
        }
    }
}

/// The leader's end: each frame taken as it arrives, through `Forwards` as the peer
/// server does, and the answers sent back in order.
async fn leader_side(
    way: Way,
    mut forwards: Forwards,
    mut frames: mpsc::UnboundedReceiver<Vec<Proposal>>,
    answers: mpsc::UnboundedSender<(Instant, Reply)>,
) {
    let mut open = true;
    while open || forwards.waiting() {
        tokio::select! {
            biased;
            () = broke(&way.dead) => return,
            reply = forwards.answer() => {
                if answers.send((Instant::now(), reply)).is_err() {
                    return;
                }
            }
            batch = frames.recv(), if open && forwards.room() => {
                let Some(batch) = batch else {
                    open = false;
                    continue;
                };
                let n: usize = batch.iter().map(|p| p.0.len()).sum();
                lock(&way.world).event(format!(
                    "member {} takes a forwarded frame of {n} Txns from {}",
                    way.to, way.from
                ));
                if let Err(stale) = forwards.take(batch).await {
                    lock(&way.world).forwards.1 += 1;
                    return way.broken(&stale.to_string());
                }
                lock(&way.world).forwards.0 += 1;
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                if up(&way.world, (way.from, way.to), way.leader) == Link::Dead {
                    return way.broken("the leader is gone");
                }
            }
        }
    }
}

/// Writes the answers as they arrive; the writer reads them from its end.
async fn outbound(
    mut wr: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    mut answers: mpsc::UnboundedReceiver<Reply>,
    dead: Arc<Dead>,
) {
    loop {
        let reply = tokio::select! {
            biased;
            () = broke(&dead) => None,
            r = answers.recv() => r,
        };
        let Some(reply) = reply else { return };
        if write_frame(&mut wr, &reply).await.is_err() {
            // The writer closed its end: its answers are lost.
            return;
        }
    }
}
