//! The systems under test behind one small interface: a [`Target`] opens [`Session`]s
//! (one connection / ZooKeeper session each); a session makes [`Lock`] handles and
//! reads and writes the shared counter of scenario C.
//!
//! - ZooKeeper protocol (zlock or Apache ZooKeeper) through the zlock client, with the
//!   fair [`zlock::Mutex`] (Curator's InterProcessMutex) or the [`zlock::NaiveLock`].
//! - Redis: acquire `SET key token NX PX ttl`, release by a Lua compare-and-delete;
//!   waiters retry with an exponential backoff with jitter (what most Redis users run);
//!   with `--redis-wait-replicas N`, each lock write is followed by `WAIT N` (a primary
//!   with replicas, as Redisson runs it: the write is on N replicas before the lock is
//!   taken or given up, though a replica does not fsync before it acknowledges).
//! - etcd (with the `etcd` feature): the v3 Lock API, each session's lock keys attached
//!   to its own lease (kept alive while the session is open).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rand::Rng;
use zlock::recipes::{Mutex, MutexGuard, NaiveGuard, NaiveLock};
use zlock::{Client, CreateMode, Error, ErrorCode};

/// Which system a target speaks to.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// Any ZooKeeper-protocol server (zlock, Apache ZooKeeper), zlock client
    Zk,
    /// Redis: SET NX PX + Lua compare-and-delete, retry with backoff
    Redis,
    /// etcd v3 Lock API with a lease (needs the `etcd` build feature)
    Etcd,
}

/// Which ZooKeeper lock recipe.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    /// The fair lock (Curator InterProcessMutex semantics)
    Mutex,
    /// One node everyone races to create (herd effect)
    Naive,
}

/// Counters shared by every session of a target (read by the herd scenario).
#[derive(Default)]
pub struct Stats {
    /// ZooKeeper watch notifications received (all sessions).
    pub zk_events: AtomicU64,
    /// Redis `SET NX` attempts, successful or not.
    pub redis_attempts: AtomicU64,
    /// Requests the bench itself sent for locking (Redis commands, etcd RPCs).
    pub lock_requests: AtomicU64,
    /// Sessions opened so far: a ZooKeeper session `i` tries the connect string's hosts
    /// from the `i`-th on, so that sessions spread over an ensemble's members (the zlock
    /// client tries them in order) as they do in a deployment.
    pub sessions: AtomicUsize,
}

/// Where and how to connect, and the namespace of this run's keys.
#[derive(Clone)]
pub struct Target {
    pub system: System,
    pub addr: String,
    pub recipe: Recipe,
    /// ZooKeeper protocol: native lock path or the standard recipe (`Auto`: native when
    /// the server offers it).
    pub lock_path: zlock::LockPath,
    /// ZooKeeper `Mutex`: each cycle after a contender's first is
    /// `Mutex::reacquire` (release and queue again; one request on the native path).
    pub reacquire: bool,
    /// Prefix of every key or path of this run (unique per run).
    pub ns: String,
    pub redis_backoff_min: Duration,
    pub redis_backoff_max: Duration,
    /// Redis: replicas each lock write waits for (`WAIT n`), 0 for none.
    pub redis_wait_replicas: u32,
    /// ZooKeeper protocol: every session over TLS with these options; `None`: plain TCP.
    pub tls: Option<zlock::TlsOptions>,
    pub stats: Arc<Stats>,
}

/// How long a Redis lock write waits for its replicas (`WAIT`) before the run fails.
const REDIS_WAIT_MS: u64 = 5_000;

/// After a Redis lock write: `WAIT` until `t.redis_wait_replicas` replicas have every
/// write of this connection so far (nothing when 0). Fewer within [`REDIS_WAIT_MS`]
/// fails the run: the lock would not survive the primary's loss.
async fn redis_wait(con: &mut redis::aio::MultiplexedConnection, t: &Target) -> anyhow::Result<()> {
    let want = t.redis_wait_replicas;
    if want == 0 {
        return Ok(());
    }
    t.stats.lock_requests.fetch_add(1, Ordering::Relaxed);
    let got: i64 = redis::cmd("WAIT")
        .arg(want)
        .arg(REDIS_WAIT_MS)
        .query_async(con)
        .await?;
    anyhow::ensure!(
        got >= i64::from(want),
        "WAIT {want}: only {got} replicas acknowledged a lock write within {REDIS_WAIT_MS} ms"
    );
    Ok(())
}

/// One connection (one ZooKeeper session, one Redis connection, one etcd client+lease).
pub struct Session {
    conn: Conn,
    target: Target,
}

enum Conn {
    Zk(Client),
    Redis(redis::aio::MultiplexedConnection, u64),
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd_client::Client>, i64, tokio::task::JoinHandle<()>),
}

/// A lock handle bound to one session; acquire and release repeatedly.
pub enum Lock {
    ZkMutex(Mutex),
    ZkNaive(NaiveLock),
    Redis(redis::aio::MultiplexedConnection, String, u64),
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd_client::Client>, String, i64),
}

/// Proof of holding a [`Lock`].
pub enum Held {
    ZkMutex(MutexGuard),
    ZkNaive(NaiveGuard),
    Redis(String),
    #[cfg(feature = "etcd")]
    Etcd(Vec<u8>),
}

const REDIS_TTL_MS: u64 = 60_000;
const ZK_SESSION_MS: i32 = 30_000;
#[cfg(feature = "etcd")]
const ETCD_LEASE_SECS: i64 = 30;

const RELEASE_LUA: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

impl Target {
    /// The counter of scenario C, as a key or path.
    fn counter_key(&self) -> String {
        match self.system {
            System::Zk => format!("{}/counter", self.ns),
            System::Redis | System::Etcd => format!("{}:counter", self.ns),
        }
    }

    /// Opens one session.
    pub async fn connect(&self) -> anyhow::Result<Session> {
        let conn = match self.system {
            System::Zk => {
                let n = self.stats.sessions.fetch_add(1, Ordering::Relaxed);
                let addr = zlock::connect::rotate_hosts(&self.addr, n);
                let (client, mut events) = Client::builder(&addr)
                    .session_timeout_ms(ZK_SESSION_MS)
                    .tls(self.tls.clone())
                    .connect()
                    .await
                    .with_context(|| format!("connecting to {}", self.addr))?;
                let stats = self.stats.clone();
                tokio::spawn(async move {
                    while events.recv().await.is_some() {
                        stats.zk_events.fetch_add(1, Ordering::Relaxed);
                    }
                });
                Conn::Zk(client.with_lock_path(self.lock_path))
            }
            System::Redis => {
                let client = redis::Client::open(format!("redis://{}/", self.addr))?;
                let con = client
                    .get_multiplexed_async_connection()
                    .await
                    .with_context(|| format!("connecting to redis at {}", self.addr))?;
                Conn::Redis(con, rand::thread_rng().gen())
            }
            System::Etcd => self.connect_etcd().await?,
        };
        Ok(Session {
            conn,
            target: self.clone(),
        })
    }

    #[cfg(feature = "etcd")]
    async fn connect_etcd(&self) -> anyhow::Result<Conn> {
        let endpoints: Vec<&str> = self.addr.split(',').collect();
        let mut client = etcd_client::Client::connect(endpoints, None)
            .await
            .with_context(|| format!("connecting to etcd at {}", self.addr))?;
        let lease = client.lease_grant(ETCD_LEASE_SECS, None).await?.id();
        let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
        let keep = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(ETCD_LEASE_SECS as u64 / 3)).await;
                if keeper.keep_alive().await.is_err() {
                    return;
                }
                if !matches!(stream.message().await, Ok(Some(_))) {
                    return;
                }
            }
        });
        Ok(Conn::Etcd(Box::new(client), lease, keep))
    }

    #[cfg(not(feature = "etcd"))]
    async fn connect_etcd(&self) -> anyhow::Result<Conn> {
        anyhow::bail!(
            "this zlock-bench was built without the `etcd` feature \
             (cargo build --release -p zlock-bench --features etcd)"
        )
    }
}

impl Session {
    /// A handle on the lock called `name` (one per contender).
    pub fn lock(&self, name: &str) -> Lock {
        let t = &self.target;
        match &self.conn {
            Conn::Zk(c) => {
                let path = format!("{}/{name}", t.ns);
                match t.recipe {
                    Recipe::Mutex => Lock::ZkMutex(Mutex::new(c.clone(), &path)),
                    Recipe::Naive => Lock::ZkNaive(NaiveLock::new(c.clone(), &path)),
                }
            }
            Conn::Redis(con, id) => Lock::Redis(con.clone(), format!("{}:{name}", t.ns), *id),
            #[cfg(feature = "etcd")]
            Conn::Etcd(c, lease, _) => Lock::Etcd(c.clone(), format!("{}/{name}", t.ns), *lease),
        }
    }

    /// Prepares the run's namespace and sets the counter to 0.
    pub async fn setup(&mut self) -> anyhow::Result<()> {
        let key = self.target.counter_key();
        match &mut self.conn {
            Conn::Zk(c) => {
                c.ensure_path(&self.target.ns).await?;
                match c.create(&key, b"0", CreateMode::Persistent).await {
                    Ok(_) => {}
                    Err(Error::Server(ErrorCode::NodeExists)) => {
                        c.set_data(&key, b"0", -1).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            _ => self.set_counter(0).await?,
        }
        Ok(())
    }

    /// Reads the counter of scenario C once every write before now is in: on a
    /// ZooKeeper-protocol ensemble after a `sync` (the member this session is on may
    /// not have applied the last holder's write yet: 3 of 25 runs on a zlock ensemble
    /// reported 100 of 101 while all 101 numbers taken were distinct). Redis and etcd
    /// reads are already the leader's.
    pub async fn final_counter(&mut self) -> anyhow::Result<i64> {
        if let Conn::Zk(c) = &self.conn {
            c.sync(&self.target.counter_key()).await?;
        }
        self.get_counter().await
    }

    /// Reads the counter of scenario C.
    pub async fn get_counter(&mut self) -> anyhow::Result<i64> {
        let key = self.target.counter_key();
        let raw: Vec<u8> = match &mut self.conn {
            Conn::Zk(c) => c.get_data(&key, false).await?.0,
            Conn::Redis(con, _) => {
                let v: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query_async(con).await?;
                v.unwrap_or_default()
            }
            #[cfg(feature = "etcd")]
            Conn::Etcd(c, _, _) => {
                let r = c.get(key.as_bytes(), None).await?;
                r.kvs()
                    .first()
                    .map(|kv| kv.value().to_vec())
                    .unwrap_or_default()
            }
        };
        let s = String::from_utf8_lossy(&raw);
        Ok(s.trim().parse().unwrap_or(0))
    }

    /// Writes the counter of scenario C (blind write: the lock must protect it).
    pub async fn set_counter(&mut self, v: i64) -> anyhow::Result<()> {
        let key = self.target.counter_key();
        let val = v.to_string();
        match &mut self.conn {
            Conn::Zk(c) => {
                c.set_data(&key, val.as_bytes(), -1).await?;
            }
            Conn::Redis(con, _) => {
                let () = redis::cmd("SET")
                    .arg(&key)
                    .arg(&val)
                    .query_async(con)
                    .await?;
            }
            #[cfg(feature = "etcd")]
            Conn::Etcd(c, _, _) => {
                c.put(key.as_bytes(), val.as_bytes(), None).await?;
            }
        }
        Ok(())
    }

    /// How many contenders are queued on `name` (holder included), where the system
    /// keeps a queue; `None` for Redis (its waiters poll).
    pub async fn queue_len(&mut self, name: &str) -> anyhow::Result<Option<usize>> {
        let ns = &self.target.ns;
        Ok(match &mut self.conn {
            Conn::Zk(c) => match self.target.recipe {
                Recipe::Mutex => Some(c.get_children(&format!("{ns}/{name}"), false).await?.len()),
                Recipe::Naive => None,
            },
            Conn::Redis(..) => None,
            #[cfg(feature = "etcd")]
            Conn::Etcd(c, _, _) => {
                let opts = etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only();
                let r = c.get(format!("{ns}/{name}/"), Some(opts)).await?;
                Some(usize::try_from(r.count()).unwrap_or(0))
            }
        })
    }

    /// Ends the session (ZooKeeper: closeSession; etcd: revokes the lease).
    pub async fn close(self) {
        match self.conn {
            Conn::Zk(c) => {
                let _ = tokio::time::timeout(Duration::from_secs(10), c.close()).await;
            }
            Conn::Redis(..) => {}
            #[cfg(feature = "etcd")]
            Conn::Etcd(mut c, lease, keep) => {
                keep.abort();
                let _ = tokio::time::timeout(Duration::from_secs(10), c.lease_revoke(lease)).await;
            }
        }
    }
}

impl Lock {
    /// Waits for the lock.
    pub async fn acquire(&mut self, t: &Target) -> anyhow::Result<Held> {
        match self {
            Lock::ZkMutex(m) => Ok(Held::ZkMutex(m.acquire().await?)),
            Lock::ZkNaive(m) => Ok(Held::ZkNaive(m.acquire().await?)),
            Lock::Redis(con, key, id) => {
                let token = format!("{id:016x}-{:016x}", rand::thread_rng().gen::<u64>());
                let mut delay = t.redis_backoff_min;
                loop {
                    t.stats.redis_attempts.fetch_add(1, Ordering::Relaxed);
                    t.stats.lock_requests.fetch_add(1, Ordering::Relaxed);
                    let ok: Option<String> = redis::cmd("SET")
                        .arg(&*key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(REDIS_TTL_MS)
                        .query_async(con)
                        .await?;
                    if ok.is_some() {
                        redis_wait(con, t).await?;
                        return Ok(Held::Redis(token));
                    }
                    // Full jitter in [delay/2, delay], then double up to the maximum.
                    let us = delay.as_micros() as u64;
                    let sleep = rand::thread_rng().gen_range(us / 2..=us.max(1));
                    tokio::time::sleep(Duration::from_micros(sleep)).await;
                    delay = (delay * 2).min(t.redis_backoff_max);
                }
            }
            #[cfg(feature = "etcd")]
            Lock::Etcd(c, name, lease) => {
                t.stats.lock_requests.fetch_add(1, Ordering::Relaxed);
                let opts = etcd_client::LockOptions::new().with_lease(*lease);
                let r = c.lock(name.as_bytes(), Some(opts)).await?;
                Ok(Held::Etcd(r.key().to_vec()))
            }
        }
    }

    /// Releases what [`Lock::acquire`] returned.
    /// Releases `held` and queues again: `Mutex::reacquire` for the ZooKeeper `Mutex`
    /// (one request on zlock's native path), release then acquire otherwise.
    pub async fn reacquire(&mut self, t: &Target, held: Held) -> anyhow::Result<Held> {
        match (&*self, held) {
            (Lock::ZkMutex(m), Held::ZkMutex(g)) => Ok(Held::ZkMutex(m.reacquire(g).await?)),
            (_, held) => {
                self.release(t, held).await?;
                self.acquire(t).await
            }
        }
    }

    /// C's critical section's write and the release: with `--reacquire` on the ZooKeeper
    /// `Mutex`, one multi (`MutexGuard::release_with`: the counter's setData, fenced by
    /// the lock node, and its delete; one request, one commit); otherwise the write,
    /// then the release. `leaving` runs right before the request that releases is sent.
    pub async fn write_and_release(
        &mut self,
        t: &Target,
        s: &mut Session,
        held: Held,
        value: i64,
        leaving: impl FnOnce(),
    ) -> anyhow::Result<()> {
        match held {
            Held::ZkMutex(g) if t.reacquire => {
                leaving();
                let set = zlock::MultiOp::SetData(zlock::SetDataRequest {
                    path: t.counter_key(),
                    data: Some(value.to_string().into_bytes()),
                    version: -1,
                });
                g.release_with(vec![set]).await?;
                Ok(())
            }
            held => {
                s.set_counter(value).await?;
                leaving();
                self.release(t, held).await
            }
        }
    }

    pub async fn release(&mut self, t: &Target, held: Held) -> anyhow::Result<()> {
        match (self, held) {
            (Lock::ZkMutex(_), Held::ZkMutex(g)) => g.release().await?,
            (Lock::ZkNaive(_), Held::ZkNaive(g)) => g.release().await?,
            (Lock::Redis(con, key, _), Held::Redis(token)) => {
                t.stats.lock_requests.fetch_add(1, Ordering::Relaxed);
                let deleted: i64 = redis::Script::new(RELEASE_LUA)
                    .key(&*key)
                    .arg(token)
                    .invoke_async(con)
                    .await?;
                anyhow::ensure!(deleted == 1, "redis lock {key} expired before release");
                redis_wait(con, t).await?;
            }
            #[cfg(feature = "etcd")]
            (Lock::Etcd(c, _, _), Held::Etcd(key)) => {
                t.stats.lock_requests.fetch_add(1, Ordering::Relaxed);
                c.unlock(key).await?;
            }
            #[allow(unreachable_patterns)]
            _ => anyhow::bail!("released a lock with another lock's guard"),
        }
        Ok(())
    }
}
