#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;

/// The name ZooKeeper gives a sequential node created with `prefix` when the parent's
/// counter is `c`.
fn zk_name(prefix: &str, c: i32) -> String {
    // Java's `%010d` and Rust's `{:010}` both pad after the sign.
    format!("{prefix}{c:010}")
}

#[test]
fn zookeeper_formats_parse_back() {
    assert_eq!(zk_name("lock-", -1), "lock--000000001");
    assert_eq!(zk_name("lock-", i32::MIN), "lock--2147483648");
    assert_eq!(sequence("_c_x-lock-0000000007"), Some(7));
    assert_eq!(sequence("0000000012"), Some(12));
    assert_eq!(sequence("lock-2147483647"), Some(i32::MAX));
    assert_eq!(sequence("lock--000000001"), Some(-1));
    assert_eq!(sequence("lock--000000003"), Some(-3));
    assert_eq!(sequence("lock--999999999"), Some(-999_999_999));
    assert_eq!(sequence("lock--1000000000"), Some(-1_000_000_000));
    assert_eq!(sequence("lock--2147483648"), Some(i32::MIN));
    assert_eq!(sequence("__READ__-1500000000"), Some(-1_500_000_000));
    assert_eq!(sequence("-1500000000"), Some(-1_500_000_000));
    // ZooKeeper's own example: prefix "lock" (no separator) at the wrap.
    assert_eq!(sequence("lock-2147483648"), Some(i32::MIN));
}

#[test]
fn a_dash_after_a_letter_or_digit_is_part_of_the_prefix() {
    // Counter 1,500,000,000 under the prefix "lock-", not -1,500,000,000 under "lock".
    assert_eq!(sequence("lock-1500000000"), Some(1_500_000_000));
    assert_eq!(sequence("_c_0f-1500000000"), Some(1_500_000_000));
    // Below a billion an eleven-character "negative" is not how %010d writes it.
    assert_eq!(sequence("lock--0999999999"), Some(999_999_999));
}

#[test]
fn names_without_a_suffix_are_no_entries() {
    for name in [
        "config",
        "lock",
        "lock-abc",
        "lock-",
        "",
        "000000001",
        "lock-12345",
        "é000000012",
        "lock-2147483648x",
        "lock2147483648",
        "lock-9999999999",
        "lock--000000000",
        "lock-+000000001",
        "lock- 000000001",
    ] {
        assert_eq!(sequence(name), None, "{name}");
        assert_eq!(QueueKey::of(name), None, "{name}");
        assert!(!is_reader(name), "{name}");
    }
    assert_eq!(
        queue(vec!["config".into(), "lock-0000000001".into(), "x".into()]),
        ["lock-0000000001"]
    );
}

#[test]
fn readers_have_the_marker_right_before_the_number() {
    assert!(is_reader("_c_x-__READ__0000000003"));
    assert!(is_reader("__READ__-000000003"));
    assert!(is_reader("__READ__-2147483648"));
    assert!(!is_reader("_c_x-__WRIT__0000000003"));
    assert!(
        !is_reader("_c___READ__x-lock-0000000003"),
        "marker elsewhere"
    );
    assert!(
        !is_reader("x__rlock__0000000003"),
        "kazoo's reader counts as writer"
    );
    assert!(!is_reader("__READ__"), "no entry at all");
}

#[test]
fn order_is_creation_order_across_the_wrap() {
    let names = vec![
        zk_name("_c_d-lock-", -1),
        zk_name("_c_c-lock-", i32::MIN),
        zk_name("_c_b-lock-", i32::MAX),
        zk_name("_c_a-lock-", 5),
        "config".into(),
        zk_name("_c_e-__READ__", 5),
        "lock-0000000000".into(),
    ];
    assert_eq!(
        queue(names),
        [
            "lock-0000000000",
            "_c_a-lock-0000000005",
            // Same number (a literal name): by name.
            "_c_e-__READ__0000000005",
            "_c_b-lock-2147483647",
            "_c_c-lock--2147483648",
            "_c_d-lock--000000001",
        ]
    );
}

#[test]
fn what_blocks_what() {
    assert!(Mode::Exclusive.may_hold(0, 0));
    assert!(!Mode::Exclusive.may_hold(1, 0));
    assert!(Mode::Read.may_hold(3, 0));
    assert!(!Mode::Read.may_hold(3, 1));
    assert!(Mode::Semaphore(3).may_hold(2, 2));
    assert!(!Mode::Semaphore(3).may_hold(3, 0));
    assert!(!Mode::Semaphore(0).may_hold(1, 0), "0 leases means 1");

    let q = [
        "_c_a-__READ__0000000001",
        "_c_b-__READ__0000000002",
        "_c_c-__WRIT__0000000003",
        "_c_d-__READ__0000000004",
        "k__lock__0000000005",
        "_c_e-__READ__0000000006",
    ];
    assert!(Mode::Read.holds(&q, 1));
    assert!(!Mode::Read.holds(&q, 3));
    assert!(!Mode::Exclusive.holds(&q, 1));
    assert!(Mode::Exclusive.holds(&q, 0));
    assert!(Mode::Semaphore(3).holds(&q, 2));
    assert!(!Mode::Semaphore(3).holds(&q, 3));
    assert_eq!(last_writer_before(&q, 1), None);
    assert_eq!(last_writer_before(&q, 3), Some(2));
    assert_eq!(
        last_writer_before(&q, 5),
        Some(4),
        "a foreign kind is a writer"
    );
}

proptest! {
    /// Every counter, under every prefix ending in a separator, parses back exactly.
    #[test]
    fn every_counter_parses_back(
        c in any::<i32>(),
        prefix in "(_c_[0-9a-f]{8}-)?(lock-|lease-|latch-|__READ__|__WRIT__|x-[0-9]{3}-)",
    ) {
        let name = zk_name(&prefix, c);
        prop_assert_eq!(sequence(&name), Some(c));
        prop_assert_eq!(is_reader(&name), prefix.ends_with(READ_MARKER));
    }

    /// A prefix ending in a letter or digit parses back too, except in the documented
    /// ambiguous range (-2,147,483,647 to -1,000,000,000).
    #[test]
    fn alphanumeric_prefixes_parse_back_outside_the_ambiguous_range(
        c in any::<i32>(),
        prefix in "[a-z0-9]{0,6}[a-z0-9]",
    ) {
        let name = zk_name(&prefix, c);
        if (-2_147_483_647..=-1_000_000_000).contains(&c) {
            prop_assert_eq!(sequence(&name), Some(-c));
        } else {
            prop_assert_eq!(sequence(&name), Some(c));
        }
    }

    /// Within any window of fewer than 2^32 creates starting at a counter of 0 or more
    /// (so across the wrap at 2^31), the order is creation order.
    #[test]
    fn creation_order_within_the_counter_range(start in 0u32.., gap in 1u32..1_000_000) {
        let Some(later) = start.checked_add(gap) else { return Ok(()) };
        let a = QueueKey::of(zk_name("lock-", start as i32)).unwrap();
        let b = QueueKey::of(zk_name("lock-", later as i32)).unwrap();
        prop_assert!(a < b);
        prop_assert_eq!(a.sequence(), start as i32);
    }

    /// `holds` over a listing is `may_hold` over its counts.
    #[test]
    fn holds_agrees_with_may_hold(
        kinds in proptest::collection::vec(any::<bool>(), 1..12),
        leases in 1usize..4,
    ) {
        let q: Vec<String> = kinds
            .iter()
            .enumerate()
            .map(|(i, r)| zk_name(if *r { "__READ__" } else { "__WRIT__" }, i as i32))
            .collect();
        for idx in 0..q.len() {
            let writers = kinds[..idx].iter().filter(|r| !**r).count();
            for m in [Mode::Exclusive, Mode::Read, Mode::Semaphore(leases)] {
                prop_assert_eq!(m.holds(&q, idx), m.may_hold(idx, writers));
            }
            prop_assert_eq!(last_writer_before(&q, idx).is_none(), Mode::Read.holds(&q, idx));
        }
    }
}
