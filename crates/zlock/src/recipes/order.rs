//! Queue order for the recipes that list the queue: the order and what "first enough
//! to hold" means are [`zlock_proto::lock_order`]'s, the rule the server's native lock
//! applies too (every sequential child counts, whatever its prefix). A [`Rule`] turns
//! that into what one contender does next.

use zlock_proto::lock_order::{self, Mode};

/// What a contender does after listing the queue.
pub(crate) enum Decision {
    Hold,
    /// Wait for this sibling (a node name) to go, then look again.
    Watch(String),
}

/// Given the contenders in queue order ([`zlock_proto::lock_order::queue`]) and the index of our
/// own node, decide.
pub(crate) type Rule<'a> = &'a (dyn Fn(&[String], usize) -> Decision + Sync);

/// [`Mode::Exclusive`]: holds when first; otherwise watches the node just before (the
/// mutex, the write lock).
pub(crate) fn first_holds(sorted: &[String], idx: usize) -> Decision {
    if Mode::Exclusive.holds(sorted, idx) {
        return Decision::Hold;
    }
    match idx.checked_sub(1) {
        None => Decision::Hold,
        Some(p) => Decision::Watch(sorted[p].clone()),
    }
}

/// [`Mode::Read`]: holds when no writer precedes; otherwise watches the last writer
/// before it (Curator's reader watches the first: both are correct, the last wakes the
/// reader once instead of once per writer ahead). Any entry that is not a reader counts
/// as a writer, a foreign kind too.
pub(crate) fn no_writer_before(sorted: &[String], idx: usize) -> Decision {
    match lock_order::last_writer_before(sorted, idx) {
        Some(w) => Decision::Watch(sorted[w].clone()),
        None => Decision::Hold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_order_ignores_prefixes_and_counts_every_kind() {
        let v = lock_order::queue(vec![
            "_c_bbb-lock-0000000003".into(),
            "_c_aaa-lock-0000000010".into(),
            "lock-0000000001".into(),
            "unrelated".into(),
            "_c_ccc-__READ__0000000002".into(),
            "_c_ddd-lock--000000001".into(),
        ]);
        assert_eq!(
            v,
            vec![
                "lock-0000000001",
                "_c_ccc-__READ__0000000002",
                "_c_bbb-lock-0000000003",
                "_c_aaa-lock-0000000010",
                "_c_ddd-lock--000000001",
            ]
        );
        assert!(matches!(first_holds(&v, 0), Decision::Hold));
        assert!(matches!(first_holds(&v, 2), Decision::Watch(p) if p == v[1]));
    }
}
