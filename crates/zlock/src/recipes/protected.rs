//! Protected nodes (Curator's `withProtection`): each contender's node is named
//! `_c_<guid>-<marker>NNNNNNNNNN`, so a create whose reply was lost is found again by its
//! GUID instead of being left behind as an orphan that blocks everyone; and a
//! contender's node is removed if its acquire is given up.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use super::nodes::{create_parents, delete_node, spawn_delete};
use crate::{Client, CreateMode, Error, ErrorCode, Result};

/// Curator's protection prefix: `_c_<guid>-`.
const PROTECTED_PREFIX: &str = "_c_";

/// A protected node's name up to its sequence number: `_c_<guid>-<marker>`.
pub(crate) fn node_prefix(guid: &str, marker: &str) -> String {
    format!("{PROTECTED_PREFIX}{guid}-{marker}")
}

/// A contender's node until its acquire settles; dropping it armed spawns its removal.
pub(crate) struct Pending {
    client: Client,
    parent: String,
    pub(crate) guid: String,
    /// The created node's path, once the create has answered.
    pub(crate) node: Option<String>,
    armed: bool,
}

impl Pending {
    /// A fresh GUID for one node about to be created under `parent`.
    pub(crate) fn new(client: &Client, parent: &str) -> Pending {
        Pending {
            client: client.clone(),
            parent: parent.to_owned(),
            guid: new_guid(),
            node: None,
            armed: true,
        }
    }

    /// The node is kept (held, or owned by someone else from now on).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes the node now (awaited) and disarms.
    pub(crate) async fn remove(&mut self) -> Result<()> {
        if let Some(node) = &self.node {
            delete_node(&self.client, node).await?;
        }
        self.armed = false;
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(node) = self.node.take() {
            spawn_delete(self.client.clone(), node);
            return;
        }
        // The create may still be in flight: requests of a session are ordered, so a
        // listing sent now sees it if it was applied.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let parent = std::mem::take(&mut self.parent);
        let guid = std::mem::take(&mut self.guid);
        rt.spawn(async move {
            if let Ok(Some(name)) = find_by_guid(&client, &parent, &guid).await {
                let _ = delete_node(&client, &format!("{parent}/{name}")).await;
            }
        });
    }
}

/// Creates the protected ephemeral sequential node
/// `<parent>/_c_<guid>-<marker>NNNNNNNNNN` with `data`, creating missing parents as
/// containers; returns its path and czxid. A lost reply is resolved by looking for
/// the GUID before creating again.
pub(crate) async fn create_node(
    client: &Client,
    parent: &str,
    guid: &str,
    marker: &str,
    data: &[u8],
) -> Result<(String, i64)> {
    let prefix = format!("{parent}/{}", node_prefix(guid, marker));
    let mut may_exist = false;
    loop {
        if may_exist {
            match find_by_guid(client, parent, guid).await {
                Ok(Some(name)) => {
                    let node = format!("{parent}/{name}");
                    match client.exists(&node, false).await {
                        Ok(Some(stat)) => return Ok((node, stat.czxid)),
                        Ok(None) => {}
                        Err(Error::ConnectionLoss) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Ok(None) => {}
                Err(Error::ConnectionLoss) => continue,
                Err(e) => return Err(e),
            }
        }
        match client
            .create(&prefix, data, CreateMode::EphemeralSequential)
            .await
        {
            Ok((node, stat)) => return Ok((node, stat.czxid)),
            Err(Error::Server(ErrorCode::NoNode)) => create_parents(client, &prefix).await?,
            Err(Error::ConnectionLoss) => may_exist = true,
            Err(e) => return Err(e),
        }
    }
}

/// The child of `parent` carrying `guid`, if any.
async fn find_by_guid(client: &Client, parent: &str, guid: &str) -> Result<Option<String>> {
    let tag = format!("{PROTECTED_PREFIX}{guid}-");
    match client.get_children(parent, false).await {
        Ok(children) => Ok(children.into_iter().find(|c| c.starts_with(&tag))),
        Err(Error::Server(ErrorCode::NoNode)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The last path segment.
pub(crate) fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A random UUID-formatted (version 4 layout) identifier for one node.
pub(crate) fn new_guid() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut w = [0u64; 2];
    for (i, x) in w.iter_mut().enumerate() {
        // RandomState carries per-process random keys.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u128(t);
        h.write_usize(i);
        h.write_u32(std::process::id());
        *x = h.finish();
    }
    let hi = (w[0] & 0xffff_ffff_ffff_0fff) | 0x4000;
    let lo = (w[1] & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_is_uuid_shaped_and_unique() {
        let a = new_guid();
        let b = new_guid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(
            a.split('-').map(str::len).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
    }
}
