//! openraft's async runtime for zlock: tokio, as openraft's own [`TokioRuntime`], with
//! two changes, both so that a single-threaded run on a seed repeats exactly (the
//! deterministic simulation, `tests/raft_sim`):
//!
//! - the random numbers openraft draws (election timeouts, a ticker's first wait) come
//!   from a seed when the simulation has set one on its thread ([`seed_this_thread`]),
//!   and from the operating system otherwise;
//! - its watch channels ([`ZWatch`]: metrics, heartbeat and replication events) wake
//!   their waiters in the order they began to wait. tokio's watch spreads its waiters
//!   over eight queues picked by tokio's own unseeded random numbers, so the leader's
//!   heartbeat workers, woken by one broadcast, sent in a different order each run.
//!
//! Everything else is handed to [`TokioRuntime`].

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use openraft::async_runtime::watch::{RecvError, SendError, Watch, WatchReceiver, WatchSender};
use openraft::async_runtime::AsyncRuntime;
use openraft::{OptionalSend, OptionalSync, TokioRuntime};
use rand010::rngs::SmallRng;
use rand010::SeedableRng;

type Tokio = TokioRuntime;

thread_local! {
    /// The simulation's seed for this thread, advanced by every draw.
    static SEED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Makes every later draw of openraft's random numbers on this thread follow `seed`
/// (`None`: from the operating system again). For a single-threaded simulation, whose
/// tasks run in a fixed order.
pub fn seed_this_thread(seed: Option<u64>) {
    SEED.with(|s| s.set(seed));
}

/// SplitMix64: the next seed in a sequence.
fn next(seed: u64) -> u64 {
    let z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// zlock's runtime for openraft (see the module doc).
#[derive(Debug)]
pub struct ZRuntime(Tokio);

impl AsyncRuntime for ZRuntime {
    type JoinError = <Tokio as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <Tokio as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <Tokio as AsyncRuntime>::Sleep;
    type Instant = <Tokio as AsyncRuntime>::Instant;
    type TimeoutError = <Tokio as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <Tokio as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = SmallRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        Tokio::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        Tokio::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        Tokio::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        Tokio::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        Tokio::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        Tokio::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        let seeded = SEED.with(|s| {
            let cur = s.get()?;
            s.set(Some(next(cur)));
            Some(cur)
        });
        match seeded {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => rand010::make_rng(),
        }
    }

    type Mpsc = <Tokio as AsyncRuntime>::Mpsc;
    type Watch = ZWatch;
    type Oneshot = <Tokio as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <Tokio as AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        ZRuntime(Tokio::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

/// A watch channel whose waiters wake in the order they began to wait (see the module
/// doc), with tokio's watch semantics otherwise: a receiver has seen the value it was
/// made with; `send` fails once every receiver is gone; `changed` fails once every
/// sender is gone and the last value was seen.
///
/// It is production's watch too (openraft's metrics, and its fsync-complete
/// notifications, `IOFlushed`), on a multi-threaded runtime: a single one for both keeps
/// what the simulation proves about the server the server's own code. The test
/// `no_wake_up_is_lost_across_threads` checks it on many threads.
pub struct ZWatch;

struct Shared<T> {
    value: RwLock<T>,
    /// Bumped under the value's write lock by every change.
    version: AtomicU64,
    /// Waiters of `changed`, woken together (in the order they registered).
    notify: tokio::sync::Notify,
    senders: AtomicUsize,
    receivers: AtomicUsize,
}

impl<T> Shared<T> {
    fn read(&self) -> RwLockReadGuard<'_, T> {
        self.value.read().unwrap_or_else(|p| p.into_inner())
    }

    fn modify(&self, f: impl FnOnce(&mut T) -> bool) -> bool {
        let changed = {
            let mut v = self.value.write().unwrap_or_else(|p| p.into_inner());
            let changed = f(&mut v);
            if changed {
                self.version.fetch_add(1, Ordering::SeqCst);
            }
            changed
        };
        if changed {
            self.notify.notify_waiters();
        }
        changed
    }
}

pub struct ZWatchSender<T>(Arc<Shared<T>>);

pub struct ZWatchReceiver<T> {
    shared: Arc<Shared<T>>,
    seen: u64,
}

impl<T> Clone for ZWatchSender<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::SeqCst);
        ZWatchSender(self.0.clone())
    }
}

impl<T> Drop for ZWatchSender<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The last one: waiters learn the channel is closed.
            self.0.notify.notify_waiters();
        }
    }
}

impl<T> Clone for ZWatchReceiver<T> {
    fn clone(&self) -> Self {
        self.shared.receivers.fetch_add(1, Ordering::SeqCst);
        ZWatchReceiver {
            shared: self.shared.clone(),
            seen: self.seen,
        }
    }
}

impl<T> Drop for ZWatchReceiver<T> {
    fn drop(&mut self) {
        self.shared.receivers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Watch for ZWatch {
    type Sender<T: OptionalSend + OptionalSync> = ZWatchSender<T>;
    type Receiver<T: OptionalSend + OptionalSync> = ZWatchReceiver<T>;
    type Ref<'a, T: OptionalSend + 'a> = RwLockReadGuard<'a, T>;

    fn channel<T: OptionalSend + OptionalSync>(init: T) -> (ZWatchSender<T>, ZWatchReceiver<T>) {
        let shared = Arc::new(Shared {
            value: RwLock::new(init),
            version: AtomicU64::new(0),
            notify: tokio::sync::Notify::new(),
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
        });
        let rx = ZWatchReceiver {
            shared: shared.clone(),
            seen: 0,
        };
        (ZWatchSender(shared), rx)
    }
}

impl<T: OptionalSend + OptionalSync> WatchSender<ZWatch, T> for ZWatchSender<T> {
    fn send(&self, value: T) -> Result<(), SendError<T>> {
        if self.0.receivers.load(Ordering::SeqCst) == 0 {
            return Err(SendError(value));
        }
        self.0.modify(|v| {
            *v = value;
            true
        });
        Ok(())
    }

    fn send_if_modified<F>(&self, modify: F) -> bool
    where
        F: FnOnce(&mut T) -> bool,
    {
        self.0.modify(modify)
    }

    fn borrow_watched(&self) -> RwLockReadGuard<'_, T> {
        self.0.read()
    }

    fn subscribe(&self) -> ZWatchReceiver<T> {
        self.0.receivers.fetch_add(1, Ordering::SeqCst);
        let g = self.0.read();
        let seen = self.0.version.load(Ordering::SeqCst);
        drop(g);
        ZWatchReceiver {
            shared: self.0.clone(),
            seen,
        }
    }
}

impl<T: OptionalSend + OptionalSync> WatchReceiver<ZWatch, T> for ZWatchReceiver<T> {
    async fn changed(&mut self) -> Result<(), RecvError> {
        loop {
            // Registered before looking, so a change made in between still wakes it.
            let notified = self.shared.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let now = self.shared.version.load(Ordering::SeqCst);
            if now != self.seen {
                self.seen = now;
                return Ok(());
            }
            if self.shared.senders.load(Ordering::SeqCst) == 0 {
                return Err(RecvError(()));
            }
            notified.await;
        }
    }

    fn borrow_watched(&self) -> RwLockReadGuard<'_, T> {
        self.shared.read()
    }

    fn borrow_and_update(&mut self) -> RwLockReadGuard<'_, T> {
        let g = self.shared.read();
        self.seen = self.shared.version.load(Ordering::SeqCst);
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand010::RngExt;

    #[tokio::test]
    async fn the_watch_wakes_on_a_change_and_closes_with_its_senders() {
        let (tx, mut rx) = ZWatch::channel(1u64);
        let mut rx2 = tx.subscribe();
        // Nothing new yet.
        let quiet = tokio::time::timeout(Duration::from_millis(20), rx.changed()).await;
        assert!(quiet.is_err());
        let waiter = tokio::spawn(async move {
            rx2.changed().await.unwrap();
            *rx2.borrow_and_update()
        });
        tokio::task::yield_now().await;
        tx.send(2).unwrap();
        assert_eq!(waiter.await.unwrap(), 2);
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow_watched(), 2);
        assert!(!tx.send_if_modified(|_| false));
        assert!(tx.send_if_modified(|v| {
            *v = 3;
            true
        }));
        drop(tx);
        // The last change is still seen, then the channel is closed.
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow_and_update(), 3);
        assert!(rx.changed().await.is_err());
    }

    /// `ZWatch` carries openraft's fsync-complete notifications (`IOFlushed`) in
    /// production, on a multi-threaded runtime, where the simulation runs it on one
    /// thread only. Senders on many threads change the value while receivers on many
    /// threads wait for changes, subscribe and drop; then the senders go. Every change
    /// adds one to the value, so the value counts the changes: a receiver told of a
    /// change finds a larger value than it saw before, and each one sees the final value
    /// and then the channel closed. A lost wake-up leaves a receiver waiting: the round
    /// does not finish within its deadline and the test fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_wake_up_is_lost_across_threads() {
        const SENDERS: u64 = 4;
        const CHANGES: u64 = 250;
        const RECEIVERS: usize = 6;
        const ROUNDS: usize = 200;
        let total = SENDERS * CHANGES;
        for round in 0..ROUNDS {
            let (tx, rx) = ZWatch::channel(0u64);
            let mut receivers = Vec::new();
            for r in 0..RECEIVERS {
                // Half of them from the channel's receiver, half subscribed: both kinds
                // start having seen the value they were made with.
                let mut rx = match r % 2 {
                    0 => rx.clone(),
                    _ => tx.subscribe(),
                };
                receivers.push(tokio::spawn(async move {
                    let mut last = *rx.borrow_and_update();
                    let mut wakes = 0u64;
                    loop {
                        match rx.changed().await {
                            Ok(()) => {
                                let v = *rx.borrow_and_update();
                                assert!(v > last, "told of a change, found {v} after {last}");
                                last = v;
                                wakes += 1;
                                // Now and then a short-lived extra receiver comes and
                                // goes, as openraft's do.
                                if wakes.is_multiple_of(16) {
                                    let mut extra = rx.clone();
                                    assert!(*extra.borrow_and_update() >= last);
                                }
                            }
                            Err(_) => return last,
                        }
                    }
                }));
            }
            drop(rx);
            let mut senders = Vec::new();
            for _ in 0..SENDERS {
                let tx = tx.clone();
                senders.push(tokio::spawn(async move {
                    for i in 0..CHANGES {
                        tx.send_if_modified(|v| {
                            *v += 1;
                            true
                        });
                        if i.is_multiple_of(8) {
                            tokio::task::yield_now().await;
                        }
                    }
                }));
            }
            drop(tx);
            let finished = async {
                for s in senders {
                    s.await.unwrap();
                }
                let mut last = Vec::new();
                for r in receivers {
                    last.push(r.await.unwrap());
                }
                last
            };
            let last = tokio::time::timeout(Duration::from_secs(60), finished)
                .await
                .unwrap_or_else(|_| panic!("round {round}: a receiver was never woken"));
            assert!(
                last.iter().all(|v| *v == total),
                "round {round}: receivers ended at {last:?}, not at the last value {total}"
            );
        }
    }

    #[test]
    fn send_fails_without_receivers() {
        let (tx, rx) = ZWatch::channel(0u8);
        drop(rx);
        assert!(tx.send(1).is_err());
    }

    fn draws() -> Vec<u64> {
        (0..4)
            .map(|_| ZRuntime::thread_rng().random_range(0..1_000_000))
            .collect()
    }

    #[test]
    fn a_seed_makes_the_draws_repeat() {
        seed_this_thread(Some(42));
        let a = draws();
        seed_this_thread(Some(42));
        let b = draws();
        seed_this_thread(Some(43));
        let c = draws();
        seed_this_thread(None);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
