//! A counting TCP proxy on 127.0.0.1 for the herd scenario: every byte between the
//! bench's clients and the server passes through it, so bytes (and, for the ZooKeeper
//! protocol, length-prefixed frames) are counted per direction whatever the system.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Totals since the proxy started.
#[derive(Default)]
pub struct Counts {
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
    /// ZooKeeper-protocol frames (4-byte big-endian length + body), client to server.
    pub frames_up: AtomicU64,
    /// ... and server to client.
    pub frames_down: AtomicU64,
}

/// A snapshot of [`Counts`].
#[derive(Clone, Copy, Default, Debug)]
pub struct Snapshot {
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub frames_up: u64,
    pub frames_down: u64,
}

impl Counts {
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
            frames_up: self.frames_up.load(Ordering::Relaxed),
            frames_down: self.frames_down.load(Ordering::Relaxed),
        }
    }
}

/// Starts the proxy towards `upstream`; returns its address and its counters. It runs
/// until the runtime ends.
pub async fn start(upstream: String) -> anyhow::Result<(String, Arc<Counts>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    tokio::spawn(async move {
        while let Ok((down, _)) = listener.accept().await {
            let Ok(up) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let _ = down.set_nodelay(true);
            let _ = up.set_nodelay(true);
            let (dr, dw) = down.into_split();
            let (ur, uw) = up.into_split();
            tokio::spawn(pump(dr, uw, c.clone(), true));
            tokio::spawn(pump(ur, dw, c.clone(), false));
        }
    });
    Ok((addr, counts))
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    counts: Arc<Counts>,
    up: bool,
) {
    let mut frames = FrameCounter::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let f = frames.feed(&buf[..n]);
        let (bytes, fr) = if up {
            (&counts.bytes_up, &counts.frames_up)
        } else {
            (&counts.bytes_down, &counts.frames_down)
        };
        bytes.fetch_add(n as u64, Ordering::Relaxed);
        fr.fetch_add(f, Ordering::Relaxed);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Counts length-prefixed frames in a byte stream split arbitrarily into chunks.
#[derive(Default)]
struct FrameCounter {
    /// Bytes of the current length header seen so far (0..4).
    header: Vec<u8>,
    /// Body bytes still to skip.
    remaining: u64,
}

impl FrameCounter {
    /// Consumes a chunk; returns how many frames started in it.
    fn feed(&mut self, mut chunk: &[u8]) -> u64 {
        let mut started = 0;
        while !chunk.is_empty() {
            if self.remaining > 0 {
                let skip = (self.remaining as usize).min(chunk.len());
                self.remaining -= skip as u64;
                chunk = &chunk[skip..];
                continue;
            }
            let take = (4 - self.header.len()).min(chunk.len());
            self.header.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.header.len() == 4 {
                let len = u32::from_be_bytes([
                    self.header[0],
                    self.header[1],
                    self.header[2],
                    self.header[3],
                ]);
                self.header.clear();
                self.remaining = u64::from(len);
                started += 1;
            }
        }
        started
    }
}

#[cfg(test)]
mod tests {
    use super::FrameCounter;

    #[test]
    fn frames_split_anywhere_are_counted_once() {
        let mut stream = Vec::new();
        for body in [&b"abc"[..], b"", b"0123456789"] {
            stream.extend_from_slice(&(body.len() as u32).to_be_bytes());
            stream.extend_from_slice(body);
        }
        for split in 0..stream.len() {
            let mut fc = FrameCounter::default();
            let n = fc.feed(&stream[..split]) + fc.feed(&stream[split..]);
            assert_eq!(n, 3, "split at {split}");
        }
        let mut fc = FrameCounter::default();
        let n: u64 = stream
            .iter()
            .map(|b| fc.feed(std::slice::from_ref(b)))
            .sum();
        assert_eq!(n, 3);
    }
}
