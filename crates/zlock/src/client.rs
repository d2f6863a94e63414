//! The client handle: cheap to clone, requests queued in call order.

use tokio::sync::{mpsc, oneshot};
use zlock_proto::records::{
    Acl, Create2Response, CreateRequest, CreateResponse, DeleteRequest, GetAclResponse,
    GetChildren2Response, GetChildrenResponse, GetDataResponse, MultiOp, MultiResult, PathRequest,
    PathWatchRequest, SetDataRequest, Stat, StatResponse, WatcherEvent,
};
use zlock_proto::{ErrorCode, OpCode, Reader, Record, Request};

use crate::error::{Error, Result};
use crate::session::{self, Cmd};

/// How a node is created (ZooKeeper's CreateMode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    Persistent,
    Ephemeral,
    PersistentSequential,
    EphemeralSequential,
    Container,
}

impl CreateMode {
    pub fn flags(self) -> i32 {
        match self {
            CreateMode::Persistent => 0,
            CreateMode::Ephemeral => 1,
            CreateMode::PersistentSequential => 2,
            CreateMode::EphemeralSequential => 3,
            CreateMode::Container => 4,
        }
    }
}

/// A connected session. Clone it freely: clones share the session.
///
/// Requests are sent in the order the methods are *called* (not polled), and a
/// ZooKeeper server answers a session's requests in order.
#[derive(Clone)]
pub struct Client {
    tx: mpsc::UnboundedSender<Cmd>,
    session_id: i64,
    timeout_ms: i32,
}

impl Client {
    /// Connects to `host:port` and opens a session asking for `timeout_ms`. Watch events
    /// of the session arrive on the returned receiver.
    ///
    /// # Errors
    /// [`Error::Connect`] when the server cannot be reached; [`Error::Protocol`] when it
    /// does not answer the handshake like a ZooKeeper server.
    pub async fn connect(
        addr: &str,
        timeout_ms: i32,
    ) -> Result<(Client, mpsc::UnboundedReceiver<WatcherEvent>)> {
        let (stream, buf, est) = session::connect(addr, timeout_ms).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        tokio::spawn(session::run(stream, buf, est.timeout_ms, rx, ev_tx));
        Ok((
            Client {
                tx,
                session_id: est.session_id,
                timeout_ms: est.timeout_ms,
            },
            ev_rx,
        ))
    }

    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The negotiated session timeout, ms.
    pub fn session_timeout_ms(&self) -> i32 {
        self.timeout_ms
    }

    /// Sends a request; the returned future resolves with the raw reply. The request is
    /// queued before this returns.
    pub fn send(
        &self,
        req: &Request,
    ) -> impl std::future::Future<Output = Result<(zlock_proto::records::ReplyHeader, Vec<u8>)>>
    {
        let mut body = Vec::new();
        req.encode(&mut body);
        let (done, wait) = oneshot::channel();
        let sent = self
            .tx
            .send(Cmd::Request {
                op: req.op_code(),
                body,
                done,
            })
            .is_ok();
        async move {
            if !sent {
                return Err(Error::Closed);
            }
            wait.await.map_err(|_| Error::ConnectionLoss)?
        }
    }

    async fn call<T: Record>(&self, req: Request) -> Result<T> {
        let (h, body) = self.send(&req).await?;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        T::decode(&mut Reader::new(&body)).map_err(|e| Error::Protocol(e.to_string()))
    }

    async fn call_empty(&self, req: Request) -> Result<()> {
        let (h, _) = self.send(&req).await?;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        Ok(())
    }

    /// Creates a node with the open ACL; returns its actual path and Stat.
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<(String, Stat)> {
        self.create_with_acl(path, data, Acl::open_unsafe(), mode)
            .await
    }

    pub async fn create_with_acl(
        &self,
        path: &str,
        data: &[u8],
        acl: Vec<Acl>,
        mode: CreateMode,
    ) -> Result<(String, Stat)> {
        let op = if mode == CreateMode::Container {
            OpCode::CreateContainer
        } else {
            OpCode::Create2
        };
        let r: Create2Response = self
            .call(Request::Create(
                op,
                CreateRequest {
                    path: path.to_owned(),
                    data: Some(data.to_vec()),
                    acl,
                    flags: mode.flags(),
                },
            ))
            .await?;
        Ok((r.path, r.stat))
    }

    /// create (opcode 1): the reply holds only the path.
    pub async fn create_path_only(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<String> {
        let r: CreateResponse = self
            .call(Request::Create(
                OpCode::Create,
                CreateRequest {
                    path: path.to_owned(),
                    data: Some(data.to_vec()),
                    acl: Acl::open_unsafe(),
                    flags: mode.flags(),
                },
            ))
            .await?;
        Ok(r.path)
    }

    /// Deletes `path` if its version is `version` (-1 = any).
    pub async fn delete(&self, path: &str, version: i32) -> Result<()> {
        self.call_empty(Request::Delete(DeleteRequest {
            path: path.to_owned(),
            version,
        }))
        .await
    }

    /// The node's Stat, or None if it does not exist. `watch` sets a data/exist watch.
    pub async fn exists(&self, path: &str, watch: bool) -> Result<Option<Stat>> {
        match self
            .call::<StatResponse>(Request::Exists(PathWatchRequest {
                path: path.to_owned(),
                watch,
            }))
            .await
        {
            Ok(s) => Ok(Some(s.stat)),
            Err(Error::Server(ErrorCode::NoNode)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The node's data (a null value reads as empty) and Stat.
    pub async fn get_data(&self, path: &str, watch: bool) -> Result<(Vec<u8>, Stat)> {
        let r: GetDataResponse = self
            .call(Request::GetData(PathWatchRequest {
                path: path.to_owned(),
                watch,
            }))
            .await?;
        Ok((r.data.unwrap_or_default(), r.stat))
    }

    pub async fn set_data(&self, path: &str, data: &[u8], version: i32) -> Result<Stat> {
        let r: StatResponse = self
            .call(Request::SetData(SetDataRequest {
                path: path.to_owned(),
                data: Some(data.to_vec()),
                version,
            }))
            .await?;
        Ok(r.stat)
    }

    pub async fn get_children(&self, path: &str, watch: bool) -> Result<Vec<String>> {
        let r: GetChildrenResponse = self
            .call(Request::GetChildren(PathWatchRequest {
                path: path.to_owned(),
                watch,
            }))
            .await?;
        Ok(r.children)
    }

    pub async fn get_children2(&self, path: &str, watch: bool) -> Result<(Vec<String>, Stat)> {
        let r: GetChildren2Response = self
            .call(Request::GetChildren2(PathWatchRequest {
                path: path.to_owned(),
                watch,
            }))
            .await?;
        Ok((r.children, r.stat))
    }

    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        let r: GetAclResponse = self
            .call(Request::GetAcl(PathRequest {
                path: path.to_owned(),
            }))
            .await?;
        Ok((r.acl, r.stat))
    }

    /// An atomic multi; per-op results (an error entry for each op when it failed).
    pub async fn multi(&self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
        let (h, body) = self.send(&Request::Multi(ops)).await?;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        zlock_proto::records::decode_multi_results(&mut Reader::new(&body))
            .map_err(|e| Error::Protocol(e.to_string()))
    }

    /// Creates every missing node of `path` (persistent, empty).
    pub async fn ensure_path(&self, path: &str) -> Result<()> {
        let mut cur = String::new();
        for seg in path.split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(seg);
            match self.create(&cur, b"", CreateMode::Persistent).await {
                Ok(_) | Err(Error::Server(ErrorCode::NodeExists)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Closes the session: its ephemeral nodes go at once.
    pub async fn close(&self) -> Result<()> {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Cmd::Close { done }).is_err() {
            return Ok(());
        }
        match wait.await {
            Ok(Ok(_)) | Err(_) | Ok(Err(Error::ConnectionLoss)) => Ok(()),
            Ok(Err(e)) => Err(e),
        }
    }
}
