//! The readers on small files built here byte by byte, to the layouts in the module
//! docs of `snap` and `log`.

use std::path::Path;

use zlock_core::tree::NodeKind;
use zlock_core::{Config, SessionId};
use zlock_proto::jute::{Field, Writer};
use zlock_proto::records::{perms, Acl, Id};

use super::error::ImportError;
use super::log::{entries, End};
use super::snap::{parse, Failure};
use super::txn::ZkTxn;

fn digest_acl() -> Vec<Acl> {
    vec![
        Acl {
            perms: perms::READ,
            id: Id::new("world", "anyone"),
        },
        Acl {
            perms: perms::ALL,
            id: Id::new("digest", "u:x"),
        },
    ]
}

/// One node record: path, data, ACL index, StatPersisted.
fn node(out: &mut Vec<u8>, path: &str, data: Option<&[u8]>, acl: i64, owner: i64, zxid: i64) {
    out.write_string(path);
    out.write_opt_buffer(data);
    out.write_i64(acl);
    for v in [zxid, zxid + 1, 1000, 2000] {
        out.write_i64(v);
    }
    for v in [3, 4, 5] {
        out.write_i32(v);
    }
    out.write_i64(owner);
    out.write_i64(zxid + 2);
}

fn seal(out: &mut Vec<u8>) {
    let sum = adler2::adler32_slice(out);
    out.write_i64(i64::from(sum));
    out.write_string("/");
}

/// A 3.8 snapshot: two sessions, an ACL cache of one list, a root, a node of null data,
/// one of empty data, an ephemeral, a container, a TTL node; the digest section after
/// the seal.
fn snapshot() -> Vec<u8> {
    let mut s = Vec::new();
    s.write_i32(0x5a4b_534e);
    s.write_i32(2);
    s.write_i64(-1);
    s.write_i32(2);
    for (id, timeout) in [(0x100, 4000), (0x200, 9000)] {
        s.write_i64(id);
        s.write_i32(timeout);
    }
    s.write_i32(1);
    s.write_i64(1);
    digest_acl().put(&mut s);
    node(&mut s, "", Some(b""), -1, 0, 0);
    node(&mut s, "/null", None, 1, 0, 10);
    node(&mut s, "/empty", Some(b""), -1, 0, 11);
    node(&mut s, "/null/eph", Some(b"e"), -1, 0x100, 12);
    node(&mut s, "/box", Some(b"c"), -1, i64::MIN, 13);
    node(
        &mut s,
        "/ttl",
        Some(b"t"),
        -1,
        (0xff00_0000_0000_0000_u64 as i64) | 5000,
        14,
    );
    s.write_string("/");
    seal(&mut s);
    s.write_i64(0x20);
    s.write_i32(2);
    s.write_i64(0x1234);
    seal(&mut s);
    s
}

#[test]
fn a_snapshot_reads_with_every_field() {
    let bytes = snapshot();
    let loaded = match parse(&bytes, 0x20, Config::default(), &mut |_| {}) {
        Ok(l) => l,
        Err(_) => panic!("the snapshot should read"),
    };
    let t = &loaded.state.tree;
    assert_eq!(t.len(), 6);
    let null = t.get("/null").map(|n| (n.data.clone(), n.acl.to_vec()));
    assert_eq!(null, Some((None, digest_acl())));
    assert_eq!(
        t.get("/empty").map(|n| n.data.clone()),
        Some(Some(Vec::new()))
    );
    let stat = t.get("/empty").map(|n| n.stat());
    let stat = stat.map(|s| {
        (
            s.czxid, s.mzxid, s.ctime, s.mtime, s.version, s.aversion, s.pzxid,
        )
    });
    assert_eq!(stat, Some((11, 12, 1000, 2000, 3, 5, 13)));
    // The stored cversion is the creates count: the Stat shows 2 * 4 - children.
    assert_eq!(t.get("/null").map(|n| n.stat().cversion), Some(7));
    let kinds: Vec<_> = ["/null/eph", "/box", "/ttl"]
        .iter()
        .filter_map(|p| t.get(p).map(|n| n.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            NodeKind::Ephemeral(SessionId(0x100)),
            NodeKind::Container,
            NodeKind::Ttl(5000)
        ]
    );
    let sessions = &loaded.state.sessions;
    assert_eq!(
        sessions.get(&SessionId(0x200)).map(|s| s.timeout_ms),
        Some(9000)
    );
    assert_eq!(
        sessions.get(&SessionId(0x100)).map(|s| s.passwd.len()),
        Some(16)
    );
    assert_eq!(loaded.max_time, 2000);
}

#[test]
fn a_damaged_snapshot_is_skipped_with_its_offset() {
    let mut bytes = snapshot();
    // The TTL node's one byte of data ("/ttl", then the data's length, then the byte).
    let at = bytes.windows(4).position(|w| w == b"/ttl").unwrap_or(0);
    bytes[at + 8] = b'T';
    match parse(&bytes, 0x20, Config::default(), &mut |_| {}) {
        Err(Failure::Skip { what, .. }) => assert!(what.contains("checksum mismatch"), "{what}"),
        _ => panic!("a failed checksum skips the snapshot"),
    }
    assert!(super::snap::well_formed("/a/b") && !super::snap::well_formed("a"));
    assert!(!super::snap::well_formed("/a/") && !super::snap::well_formed("//a"));
    let cut = &snapshot()[..100];
    assert!(matches!(
        parse(cut, 0x20, Config::default(), &mut |_| {}),
        Err(Failure::Skip { .. })
    ));
}

/// A log entry: checksum, length, header + record, 'B'.
fn entry(out: &mut Vec<u8>, zxid: i64, kind: i32, record: &[u8]) {
    let mut body = Vec::new();
    body.write_i64(0x100);
    body.write_i32(1);
    body.write_i64(zxid);
    body.write_i64(5000 + zxid);
    body.write_i32(kind);
    body.extend_from_slice(record);
    // A 3.6+ digest: read past.
    body.write_i32(2);
    body.write_i64(77);
    out.write_i64(i64::from(adler2::adler32_slice(&body)));
    out.write_buffer(&body);
    out.push(b'B');
}

fn log_file(entries_then: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut l = Vec::new();
    l.write_i32(0x5a4b_4c47);
    l.write_i32(2);
    l.write_i64(0);
    entries_then(&mut l);
    l
}

/// Each entry read: its offset, its zxid, its transaction.
type Seen = Vec<(u64, i64, ZkTxn)>;

fn read(bytes: &[u8]) -> (Seen, Result<End, ImportError>) {
    let mut seen = Vec::new();
    let end = entries(Path::new("log.1"), bytes, &mut |at, h, t| {
        seen.push((at, h.zxid, t));
        Ok(())
    });
    (seen, end)
}

#[test]
fn a_log_ends_at_its_zeros_or_at_a_torn_entry() {
    let mut set = Vec::new();
    set.write_string("/a");
    set.write_opt_buffer(None);
    set.write_i32(3);
    let whole = log_file(|l| {
        entry(l, 1, -10, &30_000i32.to_be_bytes());
        entry(l, 2, 5, &set);
        l.extend_from_slice(&[0; 64]);
    });
    let (seen, end) = read(&whole);
    assert!(matches!(end, Ok(End::Clean)));
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].2, ZkTxn::CreateSession { timeout_ms: 30_000 });
    let expected = ZkTxn::SetData {
        path: "/a".into(),
        data: None,
        version: 3,
    };
    assert_eq!((seen[1].1, &seen[1].2), (2, &expected));

    // The second entry cut short: the first is kept, the tear reported at its start.
    let second_at = seen[1].0 as usize;
    let (seen, end) = read(&whole[..second_at + 20]);
    assert_eq!(seen.len(), 1);
    assert!(matches!(end, Ok(End::Torn { offset }) if offset == second_at as u64));
}

#[test]
fn a_damaged_entry_before_the_end_names_file_and_offset() {
    let mut bytes = log_file(|l| {
        entry(l, 1, -10, &30_000i32.to_be_bytes());
        entry(l, 2, -10, &30_000i32.to_be_bytes());
    });
    bytes[16 + 12 + 3] ^= 1;
    match read(&bytes).1 {
        Err(ImportError::Corrupt { offset, what, .. }) => {
            assert_eq!(offset, 16);
            assert!(what.contains("checksum"), "{what}");
        }
        other => panic!("expected a corrupt entry, got {other:?}"),
    }
}

#[test]
fn ephemerals_of_no_session_go_as_when_zookeeper_starts() {
    let bytes = snapshot();
    let Ok(mut loaded) = parse(&bytes, 0x20, Config::default(), &mut |_| {}) else {
        panic!("the snapshot should read");
    };
    loaded.state.sessions.remove(&SessionId(0x100));
    let mut replay = super::replay::Replay {
        state: &mut loaded.state,
        last_zxid: 0x30,
        max_time: 0,
        applied: 0,
    };
    assert_eq!(replay.drop_orphan_ephemerals(), 1);
    assert!(loaded.state.tree.get("/null/eph").is_none());
    assert_eq!(loaded.state.tree.get("/null").map(|n| n.pzxid), Some(0x30));
}

#[test]
fn a_last_zxid_section_without_a_digest_reads() {
    let mut bytes = snapshot();
    // Cut the digest section, put a 3.9 last-processed-zxid section in its place.
    let end_of_tree = bytes.len() - (8 + 4 + 8 + 13);
    bytes.truncate(end_of_tree);
    bytes.write_i64(0x21);
    seal(&mut bytes);
    assert!(parse(&bytes, 0x20, Config::default(), &mut |_| {}).is_ok());
}
