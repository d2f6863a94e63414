//! The ZooKeeper operations of a [`Client`]: create, delete, reads, writes, multi, and
//! the reads that set a watch.

use tokio::sync::{mpsc, oneshot};
use zlock_proto::records::{
    add_watch_mode, Acl, AddWatchRequest, Create2Response, CreateRequest, CreateResponse,
    DeleteRequest, GetAclResponse, GetChildren2Response, GetChildrenResponse, GetDataResponse,
    MultiOp, MultiResult, PathRequest, PathWatchRequest, ReconfigRequest, SetAclRequest,
    SetDataRequest, Stat, StatResponse,
};
use zlock_proto::{ErrorCode, OpCode, Reader, Record, Request};

use super::Client;
use crate::chroot::strip_chroot;
use crate::error::{Error, Result};
use crate::session::{Sink, WatchKind};
use crate::watcher::{OneshotWatcher, PersistentWatcher};

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

impl Client {
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
        Ok((strip_chroot(&self.chroot, &r.path), r.stat))
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
        Ok(strip_chroot(&self.chroot, &r.path))
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

    /// ZooKeeper's `sync`: once it returns, the member this client is connected to has
    /// applied every write committed before the sync reached the leader, so a read sent
    /// after it sees them (reads are otherwise answered from the member's own state,
    /// which may lag the leader's in an ensemble).
    pub async fn sync(&self, path: &str) -> Result<()> {
        self.call_empty(Request::Sync(PathRequest {
            path: path.to_owned(),
        }))
        .await
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

    /// Replaces `path`'s ACL (`version`: the ACL version expected, -1 for any); the
    /// node's new Stat.
    pub async fn set_acl(&self, path: &str, acl: Vec<Acl>, version: i32) -> Result<Stat> {
        let r: StatResponse = self
            .call(Request::SetAcl(SetAclRequest {
                path: path.to_owned(),
                acl,
                version,
            }))
            .await?;
        Ok(r.stat)
    }

    /// An atomic multi; per-op results (an error entry for each op when it failed).
    pub async fn multi(&self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>> {
        let (h, body) = self.send(&Request::Multi(ops)).await?;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        let mut rs = zlock_proto::records::decode_multi_results(&mut Reader::new(&body))
            .map_err(|e| Error::Protocol(e.to_string()))?;
        for r in &mut rs {
            if let MultiResult::Create(p) | MultiResult::Create2(p, _) = r {
                *p = strip_chroot(&self.chroot, p);
            }
        }
        Ok(rs)
    }

    /// The node's data and Stat, and a one-shot watcher for its next data change or
    /// deletion.
    pub async fn get_data_watch(&self, path: &str) -> Result<(Vec<u8>, Stat, OneshotWatcher)> {
        let req = Request::GetData(PathWatchRequest {
            path: path.to_owned(),
            watch: true,
        });
        let (r, watcher) = self
            .call_watch::<GetDataResponse>(req, WatchKind::Data, path)
            .await;
        let r = r?;
        Ok((r.data.unwrap_or_default(), r.stat, watcher))
    }

    /// The node's Stat (None if absent) and a one-shot watcher for its creation, data
    /// change or deletion.
    pub async fn exists_watch(&self, path: &str) -> Result<(Option<Stat>, OneshotWatcher)> {
        let req = Request::Exists(PathWatchRequest {
            path: path.to_owned(),
            watch: true,
        });
        let (r, watcher) = self
            .call_watch::<StatResponse>(req, WatchKind::Exists, path)
            .await;
        let stat = match r {
            Ok(s) => Some(s.stat),
            Err(Error::Server(ErrorCode::NoNode)) => None,
            Err(e) => return Err(e),
        };
        Ok((stat, watcher))
    }

    /// The node's children and a one-shot watcher for a change of them (or deletion).
    pub async fn get_children_watch(&self, path: &str) -> Result<(Vec<String>, OneshotWatcher)> {
        let req = Request::GetChildren(PathWatchRequest {
            path: path.to_owned(),
            watch: true,
        });
        let (r, watcher) = self
            .call_watch::<GetChildrenResponse>(req, WatchKind::Child, path)
            .await;
        Ok((r?.children, watcher))
    }

    /// Sends `req`, a read that sets a watch of `kind` on `path`: its answer, and the
    /// one-shot watcher the watch fires (made whatever the answer; a watch the server
    /// did not set never fires).
    async fn call_watch<T: Record>(
        &self,
        req: Request,
        kind: WatchKind,
        path: &str,
    ) -> (Result<T>, OneshotWatcher) {
        let (tx, rx) = oneshot::channel();
        let r = self.call_with(req, Sink::Oneshot(tx)).await;
        let watcher = OneshotWatcher {
            rx,
            _forget: self.forget(kind, path),
        };
        (r, watcher)
    }

    /// A persistent watch on `path` (addWatch, ZooKeeper 3.6+), recursive or not.
    pub async fn add_watch(&self, path: &str, recursive: bool) -> Result<PersistentWatcher> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mode = if recursive {
            add_watch_mode::PERSISTENT_RECURSIVE
        } else {
            add_watch_mode::PERSISTENT
        };
        let (h, _) = self
            .submit(
                &Request::AddWatch(AddWatchRequest {
                    path: path.to_owned(),
                    mode,
                }),
                Sink::Persistent(tx),
            )
            .await?;
        if h.err != 0 {
            return Err(Error::from_code(h.err));
        }
        let kind = if recursive {
            WatchKind::PersistentRecursive
        } else {
            WatchKind::Persistent
        };
        Ok(PersistentWatcher {
            rx,
            _forget: self.forget(kind, path),
        })
    }

    /// ZooKeeper's `reconfig`: changes the ensemble's members, as zkCli's `reconfig`.
    /// Incremental with `joining` (`server.N=host:quorumPort:electionPort[:role];[host:]clientPort`
    /// entries, comma-separated) and/or `leaving` (ids, comma-separated), or the whole
    /// list with `new_members`; `from_config` is the version the change is based on
    /// (-1: whatever is current), so that two administrators do not undo each other.
    /// Returns the new configuration (`/zookeeper/config`'s data: `server.N=` lines and
    /// `version=<hex>`) and its Stat.
    ///
    /// The server must have `reconfigEnabled=true`, and the session must be a super
    /// user (`add_auth("digest", b"super:password")` matching the server's
    /// superDigest): errors `ReconfigDisabled`, `NoAuth`, `BadArguments` (a malformed
    /// or quorum-less request), `BadVersion` (`from_config` is stale),
    /// `ReconfigInProgress`, `NewConfigNoQuorum`, or `Unimplemented` on a standalone
    /// server.
    pub async fn reconfig(
        &self,
        joining: Option<&str>,
        leaving: Option<&str>,
        new_members: Option<&str>,
        from_config: i64,
    ) -> Result<(Vec<u8>, Stat)> {
        let r: GetDataResponse = self
            .call(Request::Reconfig(ReconfigRequest {
                joining_servers: joining.map(str::to_owned),
                leaving_servers: leaving.map(str::to_owned),
                new_members: new_members.map(str::to_owned),
                cur_config_id: from_config,
            }))
            .await?;
        Ok((r.data.unwrap_or_default(), r.stat))
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
}
