//! The final checks, once every member has applied the same log after healing.

use std::collections::BTreeMap;

use crate::client::Ledger;
use crate::host::Rec;

/// One history on every member, every acknowledged write in it exactly once, each
/// session's writes in the order it sent them. Returns the history's length.
pub fn histories(histories: &[(u64, Vec<Rec>)], ledger: &Ledger) -> Result<usize, String> {
    let (first, h0) = &histories[0];
    for (id, h) in &histories[1..] {
        if h != h0 {
            let at = h.iter().zip(h0).position(|(a, b)| a != b);
            return Err(format!(
                "members {first} and {id} applied different histories (lengths {} and {}, \
                 first difference at {at:?})",
                h0.len(),
                h.len()
            ));
        }
    }
    // Every Txn by its origin: a client's is unique (its own member id, rising xids).
    let mut seen: BTreeMap<(u64, i64, i32), u64> = BTreeMap::new();
    let mut by_session: BTreeMap<i64, Vec<(i32, u64)>> = BTreeMap::new();
    for r in h0 {
        let Some(t) = &r.txn else { continue };
        let o = t.origin;
        if seen
            .insert((o.member.0, o.session.0, o.xid), r.index)
            .is_some()
        {
            return Err(format!("{o:?} applied twice"));
        }
        if o.session.0 != 0 {
            by_session
                .entry(o.session.0)
                .or_default()
                .push((o.xid, r.index));
        }
    }
    for t in &ledger.acked {
        let o = t.origin;
        if !seen.contains_key(&(o.member.0, o.session.0, o.xid)) {
            return Err(format!("acknowledged write lost: {t:?}"));
        }
    }
    let key = |t: &zlock_core::Txn| (t.origin.member.0, t.origin.session.0, t.origin.xid);
    if let Some(v) = ledger.violations.first() {
        return Err(v.clone());
    }
    // Refused means not taken (the writer sends a refused batch again elsewhere).
    for t in &ledger.refused_txns {
        if seen.contains_key(&key(t)) {
            return Err(format!("a refused write was applied: {t:?}"));
        }
    }
    // Batches in flight together, or handed over one connection: what was applied of
    // them is a prefix.
    for g in ledger.groups.iter().chain(&ledger.conns) {
        let applied: Vec<bool> = g
            .iter()
            .map(|b| b.iter().any(|t| seen.contains_key(&key(t))))
            .collect();
        if applied.windows(2).any(|w| !w[0] && w[1]) {
            return Err(format!(
                "a group's later batch was applied without an earlier one: {applied:?} \
                 (first Txn {:?})",
                g[0].first().map(|t| t.origin)
            ));
        }
    }
    // A client sends one batch at a time, so even the writes whose outcome it never
    // learned must keep their order (a later leader's log can hold an earlier one
    // only before the later writes).
    for (s, writes) in &by_session {
        if writes.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(format!(
                "session {s:#x}'s writes out of order (xid, index): {writes:?}"
            ));
        }
    }
    Ok(h0.len())
}
