//! A tiny ZooKeeper wire client for robustness tests, built on `zlock-proto` only.
//!
//! - [`RawClient::connect`]: handshake (new session), then a reader task that matches
//!   replies to requests by xid and a pinger that keeps the session alive.
//! - [`RawClient::send`] queues a request and returns at once: many requests can be in
//!   flight on one connection (pipelining); [`PendingReply::wait`] gets the answer.
//! - [`RawClient::call`] and the helpers (`create`, `set_data`, ...) send and wait.
//! - [`RawClient::write_raw`] writes arbitrary bytes, for malformed-input tests.
//!
//! Every pending reply fails with an I/O error once the connection is gone, so a killed
//! server never leaves a caller hanging.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
use zlock_proto::frame;
use zlock_proto::records::{
    Acl, ConnectRequest, ConnectResponse, CreateRequest, DeleteRequest, GetChildrenResponse,
    GetDataResponse, PathWatchRequest, ReplyHeader, RequestHeader, SetDataRequest, Stat,
    StatResponse, XID_NOTIFICATION, XID_PING,
};
use zlock_proto::{OpCode, Reader, Record, Request};

/// How long any single wait in these helpers may take before the test fails instead of
/// hanging. Not a performance assertion: only a bound on a stuck test.
pub const STUCK: Duration = Duration::from_secs(60);

/// One reply: its header and the raw body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub xid: i32,
    pub zxid: i64,
    pub err: i32,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn is_ok(&self) -> bool {
        self.err == 0
    }

    /// Decodes the body as `R`; panics if it does not decode (a protocol bug).
    pub fn decode<R: Record>(&self) -> R {
        R::decode(&mut Reader::new(&self.body))
            .unwrap_or_else(|e| panic!("reply xid {} does not decode: {e}", self.xid))
    }
}

fn lost() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "connection lost")
}

#[derive(Default)]
struct Pending {
    waiting: HashMap<i32, oneshot::Sender<Reply>>,
    closed: bool,
}

struct Writer {
    half: OwnedWriteHalf,
    next_xid: i32,
}

struct Inner {
    writer: tokio::sync::Mutex<Writer>,
    pending: Mutex<Pending>,
}

/// A request sent and not yet answered.
pub struct PendingReply {
    rx: oneshot::Receiver<Reply>,
    pub xid: i32,
}

impl PendingReply {
    /// The reply, or an error once the connection is lost.
    pub async fn wait(self) -> io::Result<Reply> {
        self.rx.await.map_err(|_| lost())
    }
}

/// A connected session.
pub struct RawClient {
    inner: Arc<Inner>,
    closed: watch::Receiver<bool>,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for RawClient {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Encodes one request frame: header then body.
pub fn request_frame(xid: i32, op: i32, body: &[u8]) -> Vec<u8> {
    let mut payload = RequestHeader { xid, op_type: op }.to_bytes();
    payload.extend_from_slice(body);
    let mut out = Vec::with_capacity(payload.len() + 4);
    frame::encode(&payload, &mut out);
    out
}

/// A new-session ConnectRequest frame (45 bytes with the readOnly byte).
pub fn connect_frame(timeout_ms: i32) -> Vec<u8> {
    let req = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: 0,
        time_out: timeout_ms,
        session_id: 0,
        passwd: vec![0; 16],
        read_only: Some(false),
        features: None,
    };
    let mut out = Vec::new();
    frame::encode(&req.to_bytes(), &mut out);
    out
}

/// Reads one whole frame body from `s`.
pub async fn read_frame(s: &mut (impl AsyncReadExt + Unpin)) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = i32::from_be_bytes(len);
    if len < 0 || len as usize > 64 << 20 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("server sent frame length {len}"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    s.read_exact(&mut body).await?;
    Ok(body)
}

/// Connects a plain socket and completes a new-session handshake on it.
pub async fn handshake(addr: SocketAddr) -> io::Result<(TcpStream, ConnectResponse)> {
    handshake_with(addr, &connect_frame(30_000)).await
}

/// Connects a plain socket and completes the handshake of `connect` (a ConnectRequest
/// frame) on it.
pub async fn handshake_with(
    addr: SocketAddr,
    connect: &[u8],
) -> io::Result<(TcpStream, ConnectResponse)> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    s.write_all(connect).await?;
    let body = tokio::time::timeout(STUCK, read_frame(&mut s))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no handshake reply"))??;
    let resp = ConnectResponse::decode(&mut Reader::new(&body))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    if resp.time_out <= 0 {
        return Err(io::Error::other("session refused"));
    }
    Ok((s, resp))
}

/// Writes bytes on a plain socket (kept here so test files need not import
/// `AsyncWriteExt`, whose `write_i32` clashes with jute's `Writer` on `Vec<u8>`).
pub async fn send_bytes(s: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    s.write_all(bytes).await
}

/// Half-closes a plain socket: the server reads EOF.
pub async fn finish_sending(s: &mut TcpStream) -> io::Result<()> {
    s.shutdown().await
}

/// Reads (and discards) until the peer closes. Ok(()) on EOF or a reset; panics if the
/// peer keeps the connection open for [`STUCK`].
pub async fn expect_closed(s: &mut TcpStream, what: &str) {
    let mut buf = vec![0u8; 64 * 1024];
    let r = tokio::time::timeout(STUCK, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(r.is_ok(), "{what}: the server kept the connection open");
}

impl RawClient {
    /// Opens a new session (requested timeout 30 s; the server may clamp it).
    pub async fn connect(addr: SocketAddr) -> io::Result<RawClient> {
        let (s, resp) = handshake(addr).await?;
        Self::over(s, resp)
    }

    /// Resumes session `session_id` (with its password) on a new connection to `addr`.
    pub async fn resume(addr: SocketAddr, session_id: i64, passwd: &[u8]) -> io::Result<RawClient> {
        let req = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0,
            time_out: 30_000,
            session_id,
            passwd: passwd.to_vec(),
            read_only: Some(false),
            features: None,
        };
        let mut frame_bytes = Vec::new();
        frame::encode(&req.to_bytes(), &mut frame_bytes);
        let (s, resp) = handshake_with(addr, &frame_bytes).await?;
        Self::over(s, resp)
    }

    fn over(s: TcpStream, resp: ConnectResponse) -> io::Result<RawClient> {
        let (mut rd, wr) = s.into_split();
        let inner = Arc::new(Inner {
            writer: tokio::sync::Mutex::new(Writer {
                half: wr,
                next_xid: 1,
            }),
            pending: Mutex::new(Pending::default()),
        });
        let (closed_tx, closed_rx) = watch::channel(false);
        let reader_inner = inner.clone();
        let reader = tokio::spawn(async move {
            while let Ok(body) = read_frame(&mut rd).await {
                let mut r = Reader::new(&body);
                let Ok(h) = ReplyHeader::decode(&mut r) else {
                    break;
                };
                if h.xid == XID_NOTIFICATION || h.xid == XID_PING {
                    continue;
                }
                let reply = Reply {
                    xid: h.xid,
                    zxid: h.zxid,
                    err: h.err,
                    body: r.rest().to_vec(),
                };
                let tx = reader_inner.pending.lock().unwrap().waiting.remove(&h.xid);
                if let Some(tx) = tx {
                    let _ = tx.send(reply);
                }
            }
            let mut p = reader_inner.pending.lock().unwrap();
            p.closed = true;
            p.waiting.clear();
            drop(p);
            let _ = closed_tx.send(true);
        });
        let pinger = tokio::spawn(ping_loop(
            Arc::downgrade(&inner),
            Duration::from_millis((resp.time_out.max(30) / 3) as u64),
        ));
        Ok(RawClient {
            inner,
            closed: closed_rx,
            session_id: resp.session_id,
            passwd: resp.passwd.clone(),
            tasks: vec![reader, pinger],
        })
    }

    /// Sends a request with the next xid; returns without waiting for the reply.
    pub async fn send_raw(&self, op: i32, body: &[u8]) -> io::Result<PendingReply> {
        let mut w = self.inner.writer.lock().await;
        let xid = w.next_xid;
        w.next_xid += 1;
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.inner.pending.lock().unwrap();
            if p.closed {
                return Err(lost());
            }
            p.waiting.insert(xid, tx);
        }
        w.half.write_all(&request_frame(xid, op, body)).await?;
        Ok(PendingReply { rx, xid })
    }

    pub async fn send(&self, req: &Request) -> io::Result<PendingReply> {
        let mut body = Vec::new();
        req.encode(&mut body);
        self.send_raw(req.op_code().code(), &body).await
    }

    pub async fn call(&self, req: &Request) -> io::Result<Reply> {
        let p = self.send(req).await?;
        tokio::time::timeout(STUCK, p.wait())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no reply"))?
    }

    /// Writes arbitrary bytes on the connection (no framing, no xid).
    pub async fn write_raw(&self, bytes: &[u8]) -> io::Result<()> {
        self.inner.writer.lock().await.half.write_all(bytes).await
    }

    /// Resolves once the server has closed the connection; panics after [`STUCK`].
    pub async fn wait_closed(&self, what: &str) {
        let mut c = self.closed.clone();
        let r = tokio::time::timeout(STUCK, c.wait_for(|v| *v)).await;
        assert!(r.is_ok(), "{what}: the server kept the connection open");
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    pub async fn create(&self, path: &str, data: &[u8]) -> io::Result<Reply> {
        self.call(&create_req(path, data)).await
    }

    pub async fn set_data(&self, path: &str, data: &[u8], version: i32) -> io::Result<Reply> {
        self.call(&set_data_req(path, data, version)).await
    }

    pub async fn delete(&self, path: &str, version: i32) -> io::Result<Reply> {
        self.call(&delete_req(path, version)).await
    }

    /// `Ok(Err(code))` when the server answered with an error code.
    pub async fn get_data(&self, path: &str) -> io::Result<Result<(Vec<u8>, Stat), i32>> {
        let r = self.call(&get_data_req(path)).await?;
        Ok(if r.is_ok() {
            let d: GetDataResponse = r.decode();
            Ok((d.data.unwrap_or_default(), d.stat))
        } else {
            Err(r.err)
        })
    }

    pub async fn exists(&self, path: &str) -> io::Result<Result<Stat, i32>> {
        let r = self
            .call(&Request::Exists(PathWatchRequest {
                path: path.into(),
                watch: false,
            }))
            .await?;
        Ok(if r.is_ok() {
            Ok(r.decode::<StatResponse>().stat)
        } else {
            Err(r.err)
        })
    }

    /// Children names, sorted.
    pub async fn get_children(&self, path: &str) -> io::Result<Result<Vec<String>, i32>> {
        let r = self.call(&get_children_req(path)).await?;
        Ok(if r.is_ok() {
            let mut c = r.decode::<GetChildrenResponse>().children;
            c.sort();
            Ok(c)
        } else {
            Err(r.err)
        })
    }

    /// Every node under (and including) `root`, with its data and Stat, by path.
    pub async fn dump_tree(&self, root: &str) -> io::Result<BTreeMap<String, (Vec<u8>, Stat)>> {
        let mut out = BTreeMap::new();
        let mut todo = vec![root.to_owned()];
        while let Some(p) = todo.pop() {
            let Ok((data, stat)) = self.get_data(&p).await? else {
                continue; // removed meanwhile
            };
            out.insert(p.clone(), (data, stat));
            if let Ok(children) = self.get_children(&p).await? {
                for c in children {
                    todo.push(if p == "/" {
                        format!("/{c}")
                    } else {
                        format!("{p}/{c}")
                    });
                }
            }
        }
        Ok(out)
    }

    /// Closes the session and waits for the server to answer.
    pub async fn close_session(&self) -> io::Result<Reply> {
        self.call(&Request::CloseSession).await
    }
}

async fn ping_loop(inner: Weak<Inner>, every: Duration) {
    let frame = request_frame(XID_PING, OpCode::Ping.code(), &[]);
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        if inner
            .writer
            .lock()
            .await
            .half
            .write_all(&frame)
            .await
            .is_err()
        {
            return;
        }
    }
}

pub fn create_req(path: &str, data: &[u8]) -> Request {
    Request::Create(
        OpCode::Create,
        CreateRequest {
            path: path.into(),
            data: Some(data.to_vec()),
            acl: Acl::open_unsafe(),
            flags: 0,
        },
    )
}

pub fn set_data_req(path: &str, data: &[u8], version: i32) -> Request {
    Request::SetData(SetDataRequest {
        path: path.into(),
        data: Some(data.to_vec()),
        version,
    })
}

pub fn delete_req(path: &str, version: i32) -> Request {
    Request::Delete(DeleteRequest {
        path: path.into(),
        version,
    })
}

pub fn get_data_req(path: &str) -> Request {
    Request::GetData(PathWatchRequest {
        path: path.into(),
        watch: false,
    })
}

pub fn get_children_req(path: &str) -> Request {
    Request::GetChildren(PathWatchRequest {
        path: path.into(),
        watch: false,
    })
}

/// A reply's xid, and the data it reads (`None`: a write's reply).
pub type Expected = (i32, Option<Vec<u8>>);

/// A client that pipelines far more reply bytes than a socket buffer holds: /big and /n
/// created, then 200 reads of /big's 64 KiB, every third followed by a write of /n and
/// a read of it queued behind the write (read-your-writes). The frames, the last xid,
/// and what each xid must answer: `None` for a write, the data for a read.
pub fn late_reader_script() -> (Vec<u8>, i32, Vec<Expected>) {
    let big = vec![b'x'; 64 * 1024];
    let mut xid = 0;
    let mut frames = Vec::new();
    let mut next = |req: Request, frames: &mut Vec<u8>| {
        xid += 1;
        let mut body = Vec::new();
        req.encode(&mut body);
        frames.extend_from_slice(&request_frame(xid, req.op_code() as i32, &body));
        xid
    };
    next(create_req("/big", &big), &mut frames);
    next(create_req("/n", b"0"), &mut frames);
    let mut expect: Vec<Expected> = vec![(1, None), (2, None)];
    for i in 1..=200 {
        let x = next(get_data_req("/big"), &mut frames);
        expect.push((x, Some(big.clone())));
        if i % 3 == 0 {
            let v = i.to_string().into_bytes();
            let x = next(set_data_req("/n", &v, -1), &mut frames);
            expect.push((x, None));
            let x = next(get_data_req("/n"), &mut frames);
            expect.push((x, Some(v)));
        }
    }
    let last = expect.last().map_or(0, |e| e.0);
    (frames, last, expect)
}

/// Reads the replies `expect` names, in that order, each within `within`: each must
/// carry its xid and no error, and a read's reply its data.
pub async fn expect_in_order(
    s: &mut (impl AsyncReadExt + Unpin),
    expect: Vec<Expected>,
    within: Duration,
) {
    for (want_xid, want_data) in expect {
        let body = tokio::time::timeout(within, read_frame(s))
            .await
            .expect("reply did not arrive")
            .unwrap();
        let mut r = Reader::new(&body);
        let hdr = ReplyHeader::decode(&mut r).unwrap();
        assert_eq!(hdr.xid, want_xid, "replies out of order");
        assert_eq!(hdr.err, 0, "xid {want_xid} failed");
        if let Some(data) = want_data {
            let resp = GetDataResponse::decode(&mut r).unwrap();
            assert_eq!(resp.data.as_deref(), Some(&data[..]), "xid {want_xid}");
        }
    }
}
