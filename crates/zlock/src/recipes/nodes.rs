//! Node chores every recipe shares: parents created as containers, deletes that
//! survive a connection loss, and a release that does not wait.

use crate::{Client, CreateMode, Error, ErrorCode, Result};

/// Creates every missing ancestor of `node` (not `node` itself) as a container, as
/// Curator's `creatingParentContainersIfNeeded` does. The server may reap an empty
/// ancestor container between two steps (`NoNode`): then it starts again from the top.
pub(crate) async fn create_parents(client: &Client, node: &str) -> Result<()> {
    let Some(end) = node.rfind('/') else {
        return Ok(());
    };
    const ATTEMPTS: usize = 100;
    'again: for _ in 0..ATTEMPTS {
        let mut cur = String::new();
        for seg in node[..end].split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(seg);
            loop {
                match client.create(&cur, b"", CreateMode::Container).await {
                    Ok(_) | Err(Error::Server(ErrorCode::NodeExists)) => break,
                    Err(Error::ConnectionLoss) => continue,
                    Err(Error::Server(ErrorCode::NoNode)) => continue 'again,
                    Err(e) => return Err(e),
                }
            }
        }
        return Ok(());
    }
    Err(Error::Server(ErrorCode::NoNode))
}

/// Deletes `path`, retrying on connection loss; a missing node is success.
pub(crate) async fn delete_node(client: &Client, path: &str) -> Result<()> {
    loop {
        match client.delete(path, -1).await {
            Ok(()) | Err(Error::Server(ErrorCode::NoNode)) => return Ok(()),
            Err(Error::ConnectionLoss) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Releases `path` without waiting: the delete is queued at once, so it goes before
/// anything this client sends next (a drop followed by a new acquire travels in the same
/// write, and the acquire does not queue behind the old node). A task on the current
/// tokio runtime, if there is one, retries it after a connection loss.
pub(crate) fn spawn_delete(client: Client, path: String) {
    let req = zlock_proto::Request::Delete(zlock_proto::records::DeleteRequest {
        path: path.clone(),
        version: -1,
    });
    let first = client.send(&req);
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let r = match first.await {
            Ok((h, _)) if h.err == 0 || h.err == ErrorCode::NoNode.code() => Ok(()),
            Ok((h, _)) => Err(Error::from_code(h.err)),
            Err(Error::ConnectionLoss) => delete_node(&client, &path).await,
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            tracing::debug!("releasing {path}: {e}");
        }
    });
}
