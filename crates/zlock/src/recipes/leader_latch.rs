//! Leader election: Curator's `LeaderLatch` recipe.

use std::future::pending;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zlock_proto::lock_order;

use super::lost::default_window;
use super::protected::{create_node, node_name, Pending};
use crate::{Client, ConnectionState, Error, ErrorCode, OneshotWatcher, Result};

/// Curator's marker of a latch node: `_c_<guid>-latch-NNNNNNNNNN`.
const LATCH_NAME: &str = "latch-";

/// Leader election with the semantics and node names of Apache Curator's
/// `LeaderLatch`: among all latches started on one path, exactly one is the leader.
///
/// # Algorithm
/// [`LeaderLatch::start`] spawns a task that creates an ephemeral sequential node
/// `<path>/_c_<guid>-latch-NNNNNNNNNN` whose data is the participant's id. The node
/// with the lowest sequence is the leader; every other participant watches the node
/// just before its own and looks again when it goes, so leadership passes in the
/// order participants joined, and each change wakes one participant.
///
/// # Guarantees
/// - While sessions live, at most one latch believes it leads: a new leader is named
///   only once the old leader's node is gone (closed, or its session ended).
/// - The leadership stream ([`LeaderLatch::leadership`]) reports every change; it
///   turns `false` before the latch's node is deleted on [`LeaderLatch::close`].
///
/// # Connection loss and session expiry
/// - While the connection is Suspended the session may still live, so leadership is
///   kept for the safe window (a third of the session timeout, as
///   [`MutexGuard::lost`](super::MutexGuard::lost)); past it, leadership turns
///   `false`.
/// - On Reconnected (the same session, so the same node) the latch looks again and
///   leadership comes back if its node is still first.
/// - On a Lost session (or a closed [`Client`]) leadership turns `false` and the
///   latch is done: its node went with the session, and this client cannot open a
///   new one. Make a new [`Client`] and a new `LeaderLatch`.
///   [`LeaderLatch::await_leadership`] then fails with [`Error::SessionExpired`] /
///   [`Error::Closed`].
/// - Unlike Curator, a reconnect does not recreate the node (Curator's `reset`), so
///   the latch keeps its place in the queue. If its node is deleted by someone else,
///   the latch creates a new one (at the back of the queue).
///
/// # Cancellation safety
/// [`LeaderLatch::await_leadership`] and the stream are cancellation safe. Dropping
/// the latch without [`LeaderLatch::close`] stops its task, which then deletes the
/// node; `close` waits for that.
///
/// ```no_run
/// # async fn demo() -> Result<(), zlock::Error> {
/// use zlock::{recipes::LeaderLatch, Client};
///
/// let (zk, _events) = Client::connect("127.0.0.1:2181", 10_000).await?;
/// let latch = LeaderLatch::new(zk, "/election/scheduler", "node-1");
/// latch.start();
/// let mut leading = latch.leadership();
/// latch.await_leadership().await?;
/// // lead until leadership goes
/// while *leading.borrow_and_update() {
///     if leading.changed().await.is_err() {
///         break;
///     }
/// }
/// println!("participants: {:?}", latch.participants().await?);
/// latch.close().await?;
/// # Ok(()) }
/// ```
pub struct LeaderLatch {
    client: Client,
    path: String,
    id: String,
    leading: watch::Receiver<bool>,
    /// Why the latch's task ended (None while it runs or after a clean close).
    ended: Arc<std::sync::Mutex<Option<Error>>>,
    run: std::sync::Mutex<Run>,
}

enum Run {
    /// Not started: the stream's sender waits here, so the stream stays open.
    Idle(watch::Sender<bool>),
    /// Dropping `stop` (with the latch) stops the task too.
    Running {
        stop: oneshot::Sender<()>,
        task: JoinHandle<()>,
    },
    Closed,
}

impl LeaderLatch {
    /// A latch on `path` for the participant `id` (stored as its node's data).
    pub fn new(client: Client, path: &str, id: &str) -> LeaderLatch {
        let (tx, leading) = watch::channel(false);
        LeaderLatch {
            client,
            path: path.trim_end_matches('/').to_owned(),
            id: id.to_owned(),
            leading,
            ended: Arc::new(std::sync::Mutex::new(None)),
            run: std::sync::Mutex::new(Run::Idle(tx)),
        }
    }

    /// Joins the election: spawns the latch's task on the current tokio runtime. A
    /// second call, or a call after [`LeaderLatch::close`], does nothing.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start(&self) {
        let mut run = self.run.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = match std::mem::replace(&mut *run, Run::Closed) {
            Run::Idle(tx) => tx,
            other => {
                *run = other;
                return;
            }
        };
        let (stop, stopped) = oneshot::channel();
        let latch = Latch {
            client: self.client.clone(),
            path: self.path.clone(),
            id: self.id.clone(),
            leading: tx,
            ended: Arc::clone(&self.ended),
        };
        let task = tokio::spawn(latch.run(stopped));
        *run = Run::Running { stop, task };
    }

    /// Whether this latch leads now.
    pub fn has_leadership(&self) -> bool {
        *self.leading.borrow()
    }

    /// The leadership stream: `true` while this latch leads. It closes (after a
    /// final `false`) when the latch ends.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Waits until this latch leads (at once if it does). Waits forever if the
    /// latch was never started.
    ///
    /// # Errors
    /// [`Error::SessionExpired`] / [`Error::Closed`] (or another server error that
    /// stopped the latch) once the latch has ended without leading.
    pub async fn await_leadership(&self) -> Result<()> {
        let mut leading = self.leading.clone();
        loop {
            if *leading.borrow_and_update() {
                return Ok(());
            }
            if leading.changed().await.is_err() {
                let ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
                return Err(ended.clone().unwrap_or(Error::Closed));
            }
        }
    }

    /// The participants' ids in queue order: the first is the leader.
    ///
    /// # Errors
    /// Server and connection errors of the reads.
    pub async fn participants(&self) -> Result<Vec<String>> {
        let children = match self.client.get_children(&self.path, false).await {
            Ok(c) => c,
            Err(Error::Server(ErrorCode::NoNode)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut ids = Vec::new();
        for name in lock_order::queue(children) {
            match self
                .client
                .get_data(&format!("{}/{name}", self.path), false)
                .await
            {
                Ok((data, _)) => ids.push(String::from_utf8_lossy(&data).into_owned()),
                Err(Error::Server(ErrorCode::NoNode)) => {} // left meanwhile
                Err(e) => return Err(e),
            }
        }
        Ok(ids)
    }

    /// Leaves the election: leadership turns `false`, then the node is deleted; waits
    /// for both. Does nothing if not started or already closed.
    ///
    /// # Errors
    /// None today; kept fallible for symmetry with the other recipes' release.
    pub async fn close(&self) -> Result<()> {
        let run = std::mem::replace(
            &mut *self.run.lock().unwrap_or_else(PoisonError::into_inner),
            Run::Closed,
        );
        if let Run::Running { stop, task } = run {
            let _ = stop.send(());
            let _ = task.await;
        }
        Ok(())
    }
}

/// The latch's task state.
struct Latch {
    client: Client,
    path: String,
    id: String,
    /// Dropping it closes the stream, which tells `await_leadership` to look at
    /// `ended`.
    leading: watch::Sender<bool>,
    ended: Arc<std::sync::Mutex<Option<Error>>>,
}

/// What one look at the queue found.
enum Look {
    Leader,
    /// Behind someone: wait for this watcher.
    Follower(OneshotWatcher),
    /// Our predecessor went between the listing and the watch.
    Again,
    /// Our node is gone (deleted by someone else).
    Gone,
}

/// Why a wait ended.
enum Woken {
    Look,
    Stop,
    Ended(Error),
}

impl Latch {
    /// Runs until stopped or the session ends. On return leadership is `false`, the
    /// node deleted, the cause (if not a stop) in `ended`, then the stream closes.
    async fn run(self, mut stop: oneshot::Receiver<()>) {
        let mut pending = Pending::new(&self.client, &self.path);
        let ended = self.elect(&mut pending, &mut stop).await;
        self.leading.send_replace(false);
        match ended {
            // Leaving on purpose: delete now rather than through a spawned task.
            None => {
                let _ = pending.remove().await;
            }
            Some(e) => *self.ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(e),
        }
    }

    async fn elect(
        &self,
        pending: &mut Pending,
        stop: &mut oneshot::Receiver<()>,
    ) -> Option<Error> {
        let mut state = self.client.state_stream();
        let window = default_window(&self.client);
        loop {
            if pending.node.is_none() {
                let guid = pending.guid.clone();
                let create = create_node(
                    &self.client,
                    &self.path,
                    &guid,
                    LATCH_NAME,
                    self.id.as_bytes(),
                );
                tokio::select! {
                    r = create => match r {
                        Ok((node, _)) => pending.node = Some(node),
                        Err(e) => return Some(e),
                    },
                    _ = &mut *stop => return None,
                }
            }
            let own = pending.node.as_deref().map(node_name).unwrap_or_default();
            let look = tokio::select! {
                r = self.look(own) => r,
                _ = &mut *stop => return None,
            };
            let watcher = match look {
                Ok(Look::Leader) => {
                    self.leading.send_replace(true);
                    None
                }
                Ok(Look::Follower(w)) => {
                    self.leading.send_replace(false);
                    Some(w)
                }
                Ok(Look::Again) | Err(Error::ConnectionLoss) => continue,
                Ok(Look::Gone) => {
                    self.leading.send_replace(false);
                    // A new node under a new GUID, at the back of the queue.
                    *pending = Pending::new(&self.client, &self.path);
                    continue;
                }
                Err(e) => return Some(e),
            };
            match self.wait(watcher, &mut state, window, stop).await {
                Woken::Look => {}
                Woken::Stop => return None,
                Woken::Ended(e) => return Some(e),
            }
        }
    }

    /// Lists the queue and finds our place; a follower sets its watch.
    async fn look(&self, own: &str) -> Result<Look> {
        let children = self.client.get_children(&self.path, false).await?;
        let sorted = lock_order::queue(children);
        match sorted.iter().position(|c| c == own) {
            None => Ok(Look::Gone),
            Some(0) => Ok(Look::Leader),
            Some(i) => {
                let pred = format!("{}/{}", self.path, sorted[i - 1]);
                match self.client.exists_watch(&pred).await? {
                    (None, _) => Ok(Look::Again),
                    (Some(_), w) => Ok(Look::Follower(w)),
                }
            }
        }
    }

    /// Waits for the predecessor to go (followers), a stop, or a connection change:
    /// a suspension longer than `window` drops leadership, a reconnect after a
    /// suspension looks again, a lost or closed session ends the latch.
    async fn wait(
        &self,
        watcher: Option<OneshotWatcher>,
        state: &mut watch::Receiver<ConnectionState>,
        window: Duration,
        stop: &mut oneshot::Receiver<()>,
    ) -> Woken {
        let predecessor_gone = async {
            match watcher {
                Some(w) => w.await,
                None => pending().await,
            }
        };
        tokio::pin!(predecessor_gone);
        let mut suspended = false;
        let mut in_doubt_at: Option<Instant> = None;
        loop {
            match *state.borrow_and_update() {
                ConnectionState::Lost => return Woken::Ended(Error::SessionExpired),
                ConnectionState::Closed => return Woken::Ended(Error::Closed),
                ConnectionState::Suspended => {
                    if !suspended {
                        suspended = true;
                        in_doubt_at = Some(Instant::now() + window);
                    }
                }
                ConnectionState::Connected | ConnectionState::Reconnected => {
                    if suspended {
                        return Woken::Look;
                    }
                }
            }
            let in_doubt = async {
                match in_doubt_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => pending().await,
                }
            };
            tokio::select! {
                r = &mut predecessor_gone => return match r {
                    Ok(_) => Woken::Look,
                    Err(e) => Woken::Ended(e),
                },
                _ = &mut *stop => return Woken::Stop,
                r = state.changed() => if r.is_err() {
                    return Woken::Ended(Error::Closed);
                },
                () = in_doubt => {
                    self.leading.send_replace(false);
                    in_doubt_at = None;
                }
            }
        }
    }
}
