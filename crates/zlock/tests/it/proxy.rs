//! A TCP proxy the tests can cut, block and stall, to break a client's connection
//! while the server (and the session) stays up.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Default)]
struct Shared {
    /// Refuse new connections (accept and drop them at once).
    blocked: AtomicBool,
    /// Stop forwarding client → server bytes.
    stalled: AtomicBool,
    /// Stop forwarding client → server bytes after a connection's first read (its
    /// ConnectRequest, once the client waits for the answer): a handshake succeeds,
    /// what follows it is held.
    stall_after_hello: AtomicBool,
    conns: Mutex<Vec<JoinHandle<()>>>,
}

pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((c, _)) = l.accept().await {
                if sh.blocked.load(Ordering::SeqCst) {
                    drop(c);
                    continue;
                }
                let Ok(s) = TcpStream::connect(target).await else {
                    continue;
                };
                let sh2 = sh.clone();
                let h = tokio::spawn(pump(c, s, sh2));
                sh.conns.lock().unwrap().push(h);
            }
        });
        Proxy {
            addr,
            shared,
            accept,
        }
    }

    /// Drops every open connection (the client sees EOF).
    pub fn cut(&self) {
        for h in self.shared.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    pub fn block(&self, on: bool) {
        self.shared.blocked.store(on, Ordering::SeqCst);
    }

    pub fn stall(&self, on: bool) {
        self.shared.stalled.store(on, Ordering::SeqCst);
    }

    /// New and open connections forward their first read (the handshake) and hold
    /// every later client → server byte while `on`.
    pub fn stall_after_hello(&self, on: bool) {
        self.shared.stall_after_hello.store(on, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

async fn pump(c: TcpStream, s: TcpStream, sh: Arc<Shared>) {
    let (mut cr, mut cw) = c.into_split();
    let (mut sr, mut sw) = s.into_split();
    let up = async {
        let mut b = vec![0u8; 64 * 1024];
        let mut first = true;
        loop {
            let n = match cr.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            while sh.stalled.load(Ordering::SeqCst)
                || (!first && sh.stall_after_hello.load(Ordering::SeqCst))
            {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            first = false;
            if sw.write_all(&b[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async {
        let mut b = vec![0u8; 64 * 1024];
        loop {
            let n = match sr.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if cw.write_all(&b[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! { _ = up => {}, _ = down => {} }
}
