//! The load the fault tests run under, and what they check afterwards.
//!
//! - Lock workers, each its own session: acquire a [`Mutex`] (native or recipe path),
//!   then inside the critical section bump the overlap detector (`holders`, never above
//!   1), record the fencing token, and increment a counter znode by compare-and-set;
//!   then release; until told to stop.
//! - Plain writers, each its own session: create `/plain/w<k>-<n>` one after another.
//!
//! Every acknowledged write is recorded. A write that failed with `ConnectionLoss` is
//! in doubt: a counter increment is settled under the lock (after `sync`, by reading the
//! counter and repeating the same compare-and-set until one answer says what happened),
//! so the counter must end equal to the number of increments known applied; a plain
//! create in doubt is only counted as such.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use zlock::recipes::Mutex;
use zlock::{Client, CreateMode, Error, ErrorCode, LockPath};
use zlock_testkit::ChildEnsemble;

use super::{children, connect, read_counter, sync, within, LOCK, PLAIN};

/// Path of the counter the lock holders increment.
pub const COUNTER: &str = "/counter";

/// What the workers record (shared, appended in the order things happened).
#[derive(Default)]
pub struct Record {
    pub holders: AtomicUsize,
    /// Fencing tokens in acquisition order.
    pub tokens: StdMutex<Vec<i64>>,
    /// Each acquisition: when its acquire was called, when it completed.
    pub grants: StdMutex<Vec<(Instant, Instant)>>,
    /// Counter values acknowledged, in lock order: (value, when sent, when
    /// acknowledged) of the compare-and-set that answered.
    pub increments: StdMutex<Vec<(u64, Instant, Instant)>>,
    /// Increments whose reply was lost but which were applied (found under the lock).
    pub applied_unacked: AtomicU64,
    /// Plain creates acknowledged: (writer, n, sent, acknowledged).
    pub writes: StdMutex<Vec<(usize, u64, Instant, Instant)>>,
    /// Plain creates whose reply was lost.
    pub writes_in_doubt: AtomicU64,
    stop: AtomicBool,
}

/// Running load: lock workers and plain writers on an ensemble.
pub struct Traffic {
    pub rec: Arc<Record>,
    tasks: JoinSet<()>,
    pub lock_clients: Vec<Client>,
    pub writer_clients: Vec<Client>,
}

impl Traffic {
    /// `lockers` lock workers on `path`, worker `k` connected first to member
    /// `k % members` (every member in its connect string); one plain writer connected
    /// first to each member in `writers_on`. Waits until every worker has made some
    /// progress.
    pub async fn start(
        ens: &ChildEnsemble,
        path: LockPath,
        lockers: usize,
        writers_on: &[usize],
    ) -> Traffic {
        let setup = connect(&ens.connect_string()).await;
        setup.ensure_path(PLAIN).await.unwrap();
        match setup.create(COUNTER, b"0", CreateMode::Persistent).await {
            Ok(_) | Err(Error::Server(ErrorCode::NodeExists)) => {}
            Err(e) => panic!("create {COUNTER}: {e}"),
        }
        setup.close().await.unwrap();
        let rec = Arc::new(Record::default());
        let mut tasks = JoinSet::new();
        let mut lock_clients = Vec::new();
        for k in 0..lockers {
            let zk = connect(&ens.connect_string_from(k % ens.len()))
                .await
                .with_lock_path(path);
            if path == LockPath::Native {
                assert!(zk.uses_native_locks(), "the ensemble offers native locks");
            }
            lock_clients.push(zk.clone());
            tasks.spawn(lock_worker(zk, rec.clone()));
        }
        let mut writer_clients = Vec::new();
        for (w, &m) in writers_on.iter().enumerate() {
            let zk = connect(&ens.connect_string_from(m)).await;
            writer_clients.push(zk.clone());
            tasks.spawn(plain_writer(zk, w, rec.clone()));
        }
        let t = Traffic {
            rec,
            tasks,
            lock_clients,
            writer_clients,
        };
        t.progress_since(Instant::now(), lockers * 3, writers_on.len() * 5)
            .await;
        t
    }

    /// Waits (bounded) until, since `t`, at least `grants` acquisitions completed and
    /// at least `writes` plain creates sent after `t` were acknowledged.
    pub async fn progress_since(&self, t: Instant, grants: usize, writes: usize) {
        let what = format!("{grants} lock grants and {writes} acknowledged writes");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (g, w) = self.counts_since(t);
            if g >= grants && w >= writes {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "traffic did not resume: after 30 s, {g} grants and {w} writes of {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn counts_since(&self, t: Instant) -> (usize, usize) {
        let g = self
            .rec
            .grants
            .lock()
            .unwrap()
            .iter()
            .filter(|x| x.1 > t)
            .count();
        let w = self
            .rec
            .writes
            .lock()
            .unwrap()
            .iter()
            .filter(|x| x.2 >= t)
            .count();
        (g, w)
    }

    /// Failover times after a fault at `t`, each to the first answer to a request made
    /// after `t`: an acknowledged plain create, a lock grant (an acquire called after
    /// `t`), an acknowledged increment (a compare-and-set sent after `t`).
    pub fn failover(&self, t: Instant) -> Failover {
        let write = self
            .rec
            .writes
            .lock()
            .unwrap()
            .iter()
            .filter(|x| x.2 >= t)
            .map(|x| x.3 - t)
            .min();
        let grant = self
            .rec
            .grants
            .lock()
            .unwrap()
            .iter()
            .filter(|x| x.0 >= t)
            .map(|x| x.1 - t)
            .min();
        let increment = self
            .rec
            .increments
            .lock()
            .unwrap()
            .iter()
            .filter(|x| x.1 >= t)
            .map(|x| x.2 - t)
            .min();
        Failover {
            write,
            grant,
            increment,
        }
    }

    /// Stops the workers after their current round and waits for them (bounded); a
    /// worker's panic is re-raised here. Checks that no lock node is left, then closes
    /// the sessions.
    pub async fn stop(mut self) -> Arc<Record> {
        self.rec.stop.store(true, Ordering::SeqCst);
        let joined = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(r) = self.tasks.join_next().await {
                if let Err(e) = r {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                    panic!("worker: {e}");
                }
            }
        })
        .await;
        if joined.is_err() {
            let states: Vec<_> = self.lock_clients.iter().map(|c| c.state()).collect();
            panic!("workers did not stop within 30 s; lock clients: {states:?}");
        }
        // Every holder released (before the sessions close and take their nodes along).
        if let Some(zk) = self.lock_clients.first() {
            within("sync", sync(zk)).await.unwrap();
            let left = children(zk, LOCK).await;
            assert!(
                left.is_empty(),
                "lock nodes left after every release: {left:?}"
            );
        }
        for c in self.lock_clients.iter().chain(&self.writer_clients) {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
        }
        self.rec.clone()
    }
}

/// Fault → first acknowledged write / lock grant / counter increment.
#[derive(Debug)]
pub struct Failover {
    pub write: Option<Duration>,
    pub grant: Option<Duration>,
    pub increment: Option<Duration>,
}

impl std::fmt::Display for Failover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Option<Duration>| d.map_or("-".to_string(), |d| d.as_millis().to_string());
        write!(
            f,
            "write {} ms, lock grant {} ms, increment {} ms",
            ms(self.write),
            ms(self.grant),
            ms(self.increment)
        )
    }
}

async fn lock_worker(zk: Client, rec: Arc<Record>) {
    let lock = Mutex::new(zk.clone(), LOCK).without_metrics();
    while !rec.stop.load(Ordering::SeqCst) {
        let asked = Instant::now();
        let g = lock
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire (session {:#x}): {e}", zk.session_id()));
        let now = Instant::now();
        assert_eq!(rec.holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
        rec.tokens.lock().unwrap().push(g.fencing_token());
        rec.grants.lock().unwrap().push((asked, now));
        increment(&zk, &rec).await;
        tokio::task::yield_now().await;
        assert_eq!(rec.holders.fetch_sub(1, Ordering::SeqCst), 1, "two holders");
        g.release()
            .await
            .unwrap_or_else(|e| panic!("release (session {:#x}): {e}", zk.session_id()));
    }
}

/// Reads `COUNTER` (value, version), retrying after a connection loss.
async fn read(zk: &Client) -> (u64, i32) {
    loop {
        match read_counter(zk).await {
            Ok(r) => return r,
            Err(Error::ConnectionLoss) => continue,
            Err(e) => panic!("read {COUNTER}: {e}"),
        }
    }
}

/// `sync`, retrying after a connection loss.
pub async fn synced(zk: &Client) {
    loop {
        match sync(zk).await {
            Ok(()) => return,
            Err(Error::ConnectionLoss) => continue,
            Err(e) => panic!("sync: {e}"),
        }
    }
}

/// One increment of the counter by the lock holder, settled even if replies are lost:
/// the same compare-and-set is repeated until it answers; while one of ours may have
/// landed, the counter is read (after `sync`) to tell.
async fn increment(zk: &Client, rec: &Record) {
    let (v, ver) = read(zk).await;
    let next = (v + 1).to_string();
    let mut in_doubt = false;
    loop {
        let sent = Instant::now();
        match zk.set_data(COUNTER, next.as_bytes(), ver).await {
            Ok(_) => {
                let acked = (v + 1, sent, Instant::now());
                rec.increments.lock().unwrap().push(acked);
                return;
            }
            Err(Error::ConnectionLoss) => {
                in_doubt = true;
                synced(zk).await;
                let now = read(zk).await;
                if now == (v + 1, ver + 1) {
                    rec.applied_unacked.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                assert_eq!(now, (v, ver), "the counter moved under its lock holder");
            }
            Err(Error::Server(ErrorCode::BadVersion)) if in_doubt => {
                // An earlier attempt of ours landed (no one else writes under the lock).
                synced(zk).await;
                let now = read(zk).await;
                assert_eq!(now, (v + 1, ver + 1), "the counter moved under its holder");
                rec.applied_unacked.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(e) => panic!(
                "set {COUNTER} {v} -> {} at version {ver} (session {:#x}): {e}",
                v + 1,
                zk.session_id()
            ),
        }
    }
}

async fn plain_writer(zk: Client, w: usize, rec: Arc<Record>) {
    let mut n = 0u64;
    while !rec.stop.load(Ordering::SeqCst) {
        n += 1;
        let path = format!("{PLAIN}/w{w}-{n:08}");
        let sent = Instant::now();
        match zk.create(&path, b"", CreateMode::Persistent).await {
            Ok(_) => rec
                .writes
                .lock()
                .unwrap()
                .push((w, n, sent, Instant::now())),
            Err(Error::ConnectionLoss) => {
                rec.writes_in_doubt.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => panic!("create {path} (session {:#x}): {e}", zk.session_id()),
        }
    }
}

/// After the load: on every member that is up, through a client connected to it alone
/// and after `sync`, the counter equals the increments known applied and every
/// acknowledged create is there. Fencing tokens rose strictly across holders.
pub async fn verify(ens: &ChildEnsemble, rec: &Record) {
    let tokens = rec.tokens.lock().unwrap().clone();
    assert!(!tokens.is_empty(), "no lock was ever granted");
    if let Some(w) = tokens.windows(2).find(|w| w[0] >= w[1]) {
        panic!("fencing tokens not strictly rising across holders: {w:?} in {tokens:?}");
    }
    let incs = rec.increments.lock().unwrap().clone();
    assert!(
        incs.windows(2).all(|w| w[0].0 < w[1].0),
        "acknowledged increments not rising in lock order"
    );
    let applied = incs.len() as u64 + rec.applied_unacked.load(Ordering::SeqCst);
    let writes = rec.writes.lock().unwrap().clone();
    let in_doubt = rec.writes_in_doubt.load(Ordering::SeqCst);
    for i in 0..ens.len() {
        if !ens.is_up(i) {
            continue;
        }
        let zk = connect(&ens.client_addr(i).to_string()).await;
        let synced = within("sync", sync(&zk)).await;
        synced.unwrap_or_else(|e| panic!("member {i}: sync: {e}"));
        let (v, _) = within("read the counter", read_counter(&zk)).await.unwrap();
        assert_eq!(
            v,
            applied,
            "member {i}: the counter against {} acknowledged increments + {} found applied",
            incs.len(),
            rec.applied_unacked.load(Ordering::SeqCst)
        );
        if let Some(last) = incs.last() {
            assert!(v >= last.0);
        }
        let present: std::collections::HashSet<String> =
            children(&zk, PLAIN).await.into_iter().collect();
        let missing: Vec<String> = writes
            .iter()
            .map(|(w, n, _, _)| format!("w{w}-{n:08}"))
            .filter(|p| !present.contains(p))
            .collect();
        assert!(
            missing.is_empty(),
            "member {i}: acknowledged creates missing: {missing:?}"
        );
        assert!(
            present.len() as u64 <= writes.len() as u64 + in_doubt,
            "member {i}: more creates than were sent"
        );
        within("close", zk.close()).await.unwrap();
    }
    eprintln!(
        "  checked: {} grants, {} increments acknowledged + {} found applied after a lost \
         reply, {} creates acknowledged + {in_doubt} in doubt",
        tokens.len(),
        incs.len(),
        rec.applied_unacked.load(Ordering::SeqCst),
        writes.len()
    );
}
