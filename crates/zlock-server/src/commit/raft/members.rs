//! The ensemble's members as the Raft membership holds them.
//!
//! Each member's node in openraft's membership holds its `server.N` value
//! (`host:quorumPort:electionPort:role;clientHost:clientPort`, [`node_text`]), so the
//! membership alone says where every member is and what `/zookeeper/config` shows: a
//! reconfiguration changes the membership, and with it the addresses every member
//! uses. A node written before nodes held the whole value holds its quorum address
//! alone; the static configuration fills in the rest for it.
//!
//! The role shown is the membership's (a voter is a participant, a learner an
//! observer), whatever the text says.

use std::collections::BTreeMap;
use std::sync::Arc;

use openraft::BasicNode;

use super::types::WatchReceiver as _;
use super::types::{Membership, Raft};
use crate::config::{dynamic_config_text, MemberSpec};

/// What member `spec`'s node holds in the membership.
pub fn node_text(spec: &MemberSpec) -> String {
    spec.to_string()
}

/// Member `id`'s `server.N` value from its node, if the node holds one.
pub fn spec_of(id: u64, node: &BasicNode) -> Option<MemberSpec> {
    MemberSpec::parse(&id.to_string(), &node.addr).ok()
}

/// Member `id`'s quorum address from its node.
pub fn quorum_addr(id: u64, node: &BasicNode) -> String {
    spec_of(id, node).map_or_else(|| node.addr.clone(), |s| s.quorum_addr())
}

/// Where each member's quorum port is: the membership's node (the newest word: a
/// reconfiguration may have added or moved the member), else the static configuration.
#[derive(Clone)]
pub struct Addrs {
    raft: Raft,
    fixed: Arc<BTreeMap<u64, String>>,
}

impl Addrs {
    pub fn new(raft: Raft, fixed: BTreeMap<u64, String>) -> Addrs {
        Addrs {
            raft,
            fixed: Arc::new(fixed),
        }
    }

    /// Member `id`'s quorum address, if it is known.
    pub fn get(&self, id: u64) -> Option<String> {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        match m.membership_config.membership().get_node(&id) {
            Some(n) => Some(quorum_addr(id, n)),
            None => self.fixed.get(&id).cloned(),
        }
    }

    /// The voters in id order: the membership's, or the configured ones (those with
    /// an address here) before this member has a membership.
    pub fn voters(&self, configured: &BTreeMap<u64, String>) -> Vec<u64> {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
        if voters.is_empty() {
            configured.keys().copied().collect()
        } else {
            voters
        }
    }
}

/// The committed configuration as ZooKeeper shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConfigView {
    /// Every member, its role the membership's, in id order.
    pub members: Vec<MemberSpec>,
    /// The Raft log position of the membership entry that made it (0: the initial one).
    pub version: u64,
}

impl ConfigView {
    /// ZooKeeper's dynamic-config text (`/zookeeper/config`'s data).
    pub fn text(&self) -> String {
        dynamic_config_text(&self.members, self.version)
    }

    /// The voters' ids.
    pub fn voters(&self) -> impl Iterator<Item = u64> + '_ {
        self.members.iter().filter(|m| !m.observer).map(|m| m.id)
    }
}

/// The configuration `membership` holds, members whose node lacks its `server.N`
/// value taken from `fixed`; `None` while it is a joint configuration (a change under
/// way: ZooKeeper shows a configuration once it is committed) or empty.
pub fn view(membership: &Membership, fixed: &BTreeMap<u64, MemberSpec>) -> Option<ConfigView> {
    let m = membership.membership();
    if m.get_joint_config().len() != 1 {
        return None;
    }
    let voters: std::collections::BTreeSet<u64> = m.voter_ids().collect();
    let mut members = Vec::new();
    for (&id, node) in m.nodes() {
        let spec = spec_of(id, node).or_else(|| fixed.get(&id).cloned());
        // A node with nothing but a quorum address, and no line for it here: not
        // shown (it cannot be written as a `server.N` line).
        let Some(mut spec) = spec else { continue };
        spec.observer = !voters.contains(&id);
        members.push(spec);
    }
    if members.is_empty() {
        return None;
    }
    members.sort_by_key(|s| s.id);
    Some(ConfigView {
        members,
        version: membership.log_id().map_or(0, |l| l.index),
    })
}
