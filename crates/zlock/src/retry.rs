//! A retry helper for operations that are safe to repeat (reads, or writes made
//! idempotent by the caller).
//!
//! Only [`Error::ConnectionLoss`] is retried: it is the one failure where the request
//! may not have reached the server and the session is still alive. Session expiry,
//! closing and server errors are returned at once. Cancellation safe when the operation
//! is (dropping the future stops retrying).

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};

/// Bounded exponential backoff: `max_attempts` tries, sleeping `base`, 2·`base`, ...
/// (capped at `max_sleep`) between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub max_sleep: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(50),
            max_sleep: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// Runs `op` until it succeeds, fails with anything but ConnectionLoss, or the
    /// attempts are used up (then the last ConnectionLoss is returned).
    ///
    /// ```no_run
    /// # async fn demo(zk: zlock::Client) -> Result<(), zlock::Error> {
    /// let (data, _stat) = zlock::RetryPolicy::default()
    ///     .run(|| zk.get_data("/config", false))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut sleep = self.base;
        let mut attempt = 1;
        loop {
            match op().await {
                Err(Error::ConnectionLoss) if attempt < self.max_attempts.max(1) => {
                    tokio::time::sleep(sleep).await;
                    sleep = (sleep * 2).min(self.max_sleep);
                    attempt += 1;
                }
                r => return r,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn retries_only_connection_loss() {
        let p = RetryPolicy {
            max_attempts: 3,
            base: Duration::from_millis(1),
            max_sleep: Duration::from_millis(1),
        };
        let mut n = 0;
        let r: Result<()> = p
            .run(|| {
                n += 1;
                async { Err(Error::ConnectionLoss) }
            })
            .await;
        assert_eq!((r, n), (Err(Error::ConnectionLoss), 3));
        let mut n = 0;
        let r: Result<()> = p
            .run(|| {
                n += 1;
                async { Err(Error::SessionExpired) }
            })
            .await;
        assert_eq!((r, n), (Err(Error::SessionExpired), 1));
    }
}
