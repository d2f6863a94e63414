//! ACLs: which permission each operation needs (ZooKeeper's `checkACL` calls in
//! `PrepRequestProcessor` and `FinalRequestProcessor`), `fixupACL` (auth expansion,
//! validation, de-duplication), super, ip ranges, and getACL's digest redaction.

use zlock_core::acl::digest_id;
use zlock_proto::records::{perms, Id, MultiOp, PathRequest, WhoAmIResponse};
use zlock_proto::{Reader, Record, Request};

use crate::harness::*;

const RWA: i32 = perms::READ | perms::WRITE | perms::ADMIN;

fn digest(user_pass: &str) -> Id {
    Id::new("digest", &digest_id(user_pass).unwrap())
}

/// Creates `path` (under an open parent) with the given ACL.
fn locked(h: &mut Harness, s: SessionId, path: &str, list: Vec<zlock_proto::records::Acl>) {
    let a = h.write(s, create_with_acl(path, list, 0));
    assert_eq!(a.reply.err, OK, "create {path}");
}

#[test]
fn each_operation_needs_its_permission() {
    let mut h = Harness::new();
    let s = h.session();
    // One node per missing permission: everything except that one bit.
    for (name, bit) in [
        ("read", perms::READ),
        ("write", perms::WRITE),
        ("create", perms::CREATE),
        ("delete", perms::DELETE),
        ("admin", perms::ADMIN),
    ] {
        let p = format!("/no-{name}");
        locked(&mut h, s, &p, vec![acl(ALL & !bit, "world", "anyone")]);
        // A child to delete and read, created while CREATE is still allowed (or as super).
        let sup = [Id::new("super", "")];
        let a = h.write_as(s, &sup, create2(&format!("{p}/c"), b"", 0));
        assert_eq!(a.reply.err, OK);
    }
    let me = h.auth.clone();
    let code_of = |h: &mut Harness, req: Request| h.write_as(s, &me, req).reply.err;

    // READ: getData, getChildren(2), getACL (READ or ADMIN), check.
    assert_eq!(h.get_data(s, "/no-read", false), Err(NO_AUTH));
    assert_eq!(h.children(s, "/no-read", false), Err(NO_AUTH));
    assert_eq!(h.children2(s, "/no-read", false), Err(NO_AUTH));
    assert!(
        h.get_acl(s, "/no-read").is_ok(),
        "ADMIN alone is enough for getACL"
    );
    assert!(
        h.exists(s, "/no-read", false).is_ok(),
        "exists needs no permission"
    );
    let (_, res) = h.multi(s, vec![m_check("/no-read", -1)]);
    assert_eq!(multi_errors(&res), vec![NO_AUTH]);
    // WRITE: setData.
    assert_eq!(code_of(&mut h, set_data("/no-write", b"x", -1)), NO_AUTH);
    assert_eq!(code_of(&mut h, set_data("/no-read", b"x", -1)), OK);
    // CREATE on the parent.
    assert_eq!(code_of(&mut h, create2("/no-create/x", b"", 0)), NO_AUTH);
    assert_eq!(code_of(&mut h, create2("/no-read/x", b"", 0)), OK);
    // DELETE on the parent (the node's own ACL does not matter).
    assert_eq!(code_of(&mut h, delete("/no-delete/c", -1)), NO_AUTH);
    assert_eq!(code_of(&mut h, delete("/no-read/c", -1)), OK);
    // ADMIN: setACL.
    assert_eq!(code_of(&mut h, set_acl("/no-admin", open(), -1)), NO_AUTH);
    assert_eq!(code_of(&mut h, set_acl("/no-read", open(), -1)), OK);
    assert!(h.get_data(s, "/no-read", false).is_ok(), "opened up again");
}

#[test]
fn get_acl_needs_read_or_admin() {
    let mut h = Harness::new();
    let s = h.session();
    locked(
        &mut h,
        s,
        "/w",
        vec![acl(
            perms::WRITE | perms::CREATE | perms::DELETE,
            "world",
            "anyone",
        )],
    );
    assert_eq!(h.get_acl(s, "/w"), Err(NO_AUTH));
    locked(&mut h, s, "/r", vec![acl(perms::READ, "world", "anyone")]);
    assert!(h.get_acl(s, "/r").is_ok());
    assert_eq!(h.get_acl(s, "/missing"), Err(NO_NODE));
}

#[test]
fn get_acl_hides_digests_without_admin() {
    let mut h = Harness::new();
    let s = h.session();
    let alice = digest("alice:secret");
    let list = vec![
        acl(ALL, "digest", &alice.id),
        acl(perms::READ, "world", "anyone"),
        acl(perms::READ, "ip", "10.0.0.0/8"),
    ];
    locked(&mut h, s, "/n", list.clone());
    // Without ADMIN: FinalRequestProcessor rewrites `user:hash` to `user:x`.
    let (got, _) = h.get_acl(s, "/n").unwrap();
    assert_eq!(
        got,
        vec![
            acl(ALL, "digest", "alice:x"),
            acl(perms::READ, "world", "anyone"),
            acl(perms::READ, "ip", "10.0.0.0/8"),
        ]
    );
    // With ADMIN (alice herself, or super): the real list.
    let r = h.read_as(
        s,
        &[ip(), alice.clone()],
        &Request::GetAcl(PathRequest { path: "/n".into() }),
    );
    assert_eq!(r.err, OK);
    let g = zlock_proto::records::GetAclResponse::decode(&mut Reader::new(&r.body)).unwrap();
    assert_eq!(g.acl, list);
    let r = h.read_as(
        s,
        &[Id::new("super", "")],
        &Request::GetAcl(PathRequest { path: "/n".into() }),
    );
    let g = zlock_proto::records::GetAclResponse::decode(&mut Reader::new(&r.body)).unwrap();
    assert_eq!(g.acl, list);
}

#[test]
fn digest_identity() {
    let mut h = Harness::new();
    let s = h.session();
    let bob = digest("bob:pw");
    assert_eq!(bob.id, digest_id("bob:pw").unwrap());
    assert!(bob.id.starts_with("bob:"));
    locked(&mut h, s, "/bob", vec![acl(ALL, "digest", &bob.id)]);
    assert_eq!(h.get_data(s, "/bob", false), Err(NO_AUTH));
    let with_bob = [ip(), bob.clone()];
    let r = h.read_as(s, &with_bob, &Request::GetData(pw("/bob", false)));
    assert_eq!(r.err, OK);
    // The wrong password is a different identity.
    let wrong = [ip(), digest("bob:nope")];
    let r = h.read_as(s, &wrong, &Request::GetData(pw("/bob", false)));
    assert_eq!(r.err, NO_AUTH);
    assert_eq!(
        h.write_as(s, &with_bob, set_data("/bob", b"x", -1))
            .reply
            .err,
        OK
    );
    assert_eq!(
        h.write_as(s, &wrong, set_data("/bob", b"x", -1)).reply.err,
        NO_AUTH
    );
}

#[test]
fn auth_scheme_expands_to_the_callers_identities() {
    let mut h = Harness::new();
    let s = h.session();
    let u1 = digest("u1:p");
    let u2 = digest("u2:p");
    let auth = [ip(), u1.clone(), u2.clone()];
    let a = h.write_as(
        s,
        &auth,
        create_with_acl("/mine", vec![acl(RWA, "auth", "")], 0),
    );
    assert_eq!(a.reply.err, OK);
    // One entry per authenticated identity; `ip` is not an authenticated identity.
    let r = h.read_as(
        s,
        &auth,
        &Request::GetAcl(PathRequest {
            path: "/mine".into(),
        }),
    );
    let g = zlock_proto::records::GetAclResponse::decode(&mut Reader::new(&r.body)).unwrap();
    assert_eq!(
        g.acl,
        vec![acl(RWA, "digest", &u1.id), acl(RWA, "digest", &u2.id),]
    );
    // Only those identities may read it now.
    assert_eq!(h.get_data(s, "/mine", false), Err(NO_AUTH));
    let r = h.read_as(
        s,
        std::slice::from_ref(&u2),
        &Request::GetData(pw("/mine", false)),
    );
    assert_eq!(r.err, OK);
    // `auth` with no authenticated identity is InvalidACL.
    let a = h.write(s, create_with_acl("/nobody", vec![acl(ALL, "auth", "")], 0));
    assert_eq!(a.reply.err, INVALID_ACL);
    let a = h.write(s, set_acl("/mine", vec![acl(ALL, "auth", "")], -1));
    assert_eq!(a.reply.err, INVALID_ACL);
}

#[test]
fn invalid_acls() {
    let mut h = Harness::new();
    let s = h.session();
    let bad = vec![
        vec![],
        vec![acl(ALL, "world", "someone")],
        vec![acl(ALL, "foo", "bar")],
        vec![acl(ALL, "digest", "nocolon")],
        vec![acl(ALL, "digest", "user:")],
        vec![acl(ALL, "digest", "a:b:c")],
        vec![acl(ALL, "ip", "not-an-ip")],
        vec![acl(ALL, "ip", "300.1.1.1")],
        vec![acl(ALL, "ip", "10.0.0.0/33")],
        vec![acl(ALL, "ip", "10.0.0.0/x")],
        // ZooKeeper has no `super` authentication provider to validate such an id.
        vec![acl(ALL, "super", "x")],
        // One bad entry spoils the list.
        vec![acl(ALL, "world", "anyone"), acl(ALL, "foo", "bar")],
    ];
    for (i, list) in bad.into_iter().enumerate() {
        let a = h.write(s, create_with_acl(&format!("/bad{i}"), list.clone(), 0));
        assert_eq!(a.reply.err, INVALID_ACL, "{list:?}");
    }
    let good = vec![
        vec![acl(ALL, "digest", "user:hash")],
        // Java's split(":") drops trailing empty parts, so these have two parts.
        vec![acl(ALL, "digest", "user:hash:")],
        vec![acl(ALL, "digest", ":hash")],
        vec![acl(ALL, "ip", "10.0.0.0/8")],
        vec![acl(ALL, "ip", "10.1.2.3")],
        vec![acl(ALL, "ip", "0.0.0.0/0")],
        vec![acl(0, "world", "anyone")],
    ];
    for (i, list) in good.into_iter().enumerate() {
        let a = h.write(s, create_with_acl(&format!("/good{i}"), list.clone(), 0));
        assert_eq!(a.reply.err, OK, "{list:?}");
    }
}

#[test]
fn duplicate_entries_are_dropped() {
    let mut h = Harness::new();
    let s = h.session();
    let dup = vec![
        acl(perms::READ, "world", "anyone"),
        acl(ALL, "ip", "127.0.0.1"),
        acl(perms::READ, "world", "anyone"),
    ];
    locked(&mut h, s, "/d", dup);
    assert_eq!(
        h.get_acl(s, "/d").unwrap().0,
        vec![
            acl(perms::READ, "world", "anyone"),
            acl(ALL, "ip", "127.0.0.1")
        ]
    );
}

#[test]
fn super_passes_every_check() {
    let mut h = Harness::new();
    let s = h.session();
    locked(
        &mut h,
        s,
        "/vault",
        vec![acl(perms::READ, "ip", "10.9.9.9")],
    );
    let sup = [ip(), Id::new("super", "")];
    assert_eq!(
        h.write_as(s, &sup, create2("/vault/x", b"", 0)).reply.err,
        OK
    );
    assert_eq!(
        h.write_as(s, &sup, set_data("/vault", b"x", -1)).reply.err,
        OK
    );
    assert_eq!(
        h.read_as(s, &sup, &Request::GetData(pw("/vault", false)))
            .err,
        OK
    );
    assert_eq!(h.write_as(s, &sup, delete("/vault/x", -1)).reply.err, OK);
    assert_eq!(
        h.write_as(s, &sup, set_acl("/vault", open(), -1)).reply.err,
        OK
    );
    // The config node is read-only, except for super.
    assert_eq!(
        h.create(s, "/zookeeper/config/x", b"", 0).reply.err,
        NO_AUTH
    );
    assert_eq!(
        h.write_as(s, &sup, set_data("/zookeeper/config", b"c", -1))
            .reply
            .err,
        OK
    );
}

#[test]
fn ip_ranges() {
    let mut h = Harness::new();
    let s = h.session();
    locked(
        &mut h,
        s,
        "/net",
        vec![acl(perms::READ, "ip", "10.0.0.0/8")],
    );
    locked(&mut h, s, "/host", vec![acl(perms::READ, "ip", "10.1.2.3")]);
    let from = |a: &str| [Id::new("ip", a)];
    let read = |h: &mut Harness, who: &[Id], p: &str| {
        h.read_as(s, who, &Request::GetData(pw(p, false))).err
    };
    assert_eq!(read(&mut h, &from("10.200.3.4"), "/net"), OK);
    assert_eq!(read(&mut h, &from("11.0.0.1"), "/net"), NO_AUTH);
    assert_eq!(read(&mut h, &from("10.1.2.3"), "/host"), OK);
    assert_eq!(read(&mut h, &from("10.1.2.4"), "/host"), NO_AUTH);
    assert_eq!(read(&mut h, &from("127.0.0.1"), "/host"), NO_AUTH);
}

#[test]
fn acl_check_order_against_permissions() {
    let mut h = Harness::new();
    let s = h.session();
    locked(&mut h, s, "/ro", vec![acl(perms::READ, "world", "anyone")]);
    // fixupACL runs before the parent's CREATE check and before the node's ADMIN check.
    assert_eq!(
        h.write(s, create_with_acl("/ro/x", vec![], 0)).reply.err,
        INVALID_ACL
    );
    assert_eq!(
        h.write(s, set_acl("/ro", vec![], -1)).reply.err,
        INVALID_ACL
    );
    // Permission before NodeExists.
    h.write_as(s, &[Id::new("super", "")], create2("/ro/x", b"", 0));
    assert_eq!(h.create(s, "/ro/x", b"", 0).reply.err, NO_AUTH);
    // Permission before BadVersion.
    assert_eq!(h.set_data(s, "/ro", b"", 99).reply.err, NO_AUTH);
    assert_eq!(h.write(s, set_acl("/ro", open(), 99)).reply.err, NO_AUTH);
}

#[test]
fn who_am_i_lists_the_callers_identities() {
    let mut h = Harness::new();
    let s = h.session();
    let ids = [ip(), digest("u:p"), Id::new("super", "CN=carol,O=zlock")];
    let r = h.read_as(s, &ids, &Request::WhoAmI);
    assert_eq!(r.err, OK);
    let w = WhoAmIResponse::decode(&mut Reader::new(&r.body)).unwrap();
    let got: Vec<(String, String)> = w
        .client_info
        .into_iter()
        .map(|c| (c.auth_scheme, c.user))
        .collect();
    assert_eq!(
        got,
        vec![
            ("ip".to_string(), "127.0.0.1".to_string()),
            // ZooKeeper reports a digest identity by its user name only.
            ("digest".to_string(), "u".to_string()),
            // No provider names a super user (checked against ZooKeeper 3.8 over TLS:
            // crates/zlock-server/tests/it/tls/same_config.rs).
            ("super".to_string(), String::new()),
        ]
    );
}

#[test]
fn multi_read_and_write_respect_acls() {
    let mut h = Harness::new();
    let s = h.session();
    locked(
        &mut h,
        s,
        "/secret",
        vec![acl(perms::WRITE, "world", "anyone")],
    );
    let r = h.read(
        s,
        &Request::MultiRead(vec![MultiOp::GetData(pw("/secret", false))]),
    );
    assert_eq!(
        multi_results(&r),
        vec![zlock_proto::records::MultiResult::Error(NO_AUTH)]
    );
    let (_, res) = h.multi(
        s,
        vec![m_set("/secret", b"ok", -1), m_create("/secret/x", b"", 0)],
    );
    assert_eq!(multi_errors(&res), vec![0, NO_AUTH]);
    assert_eq!(h.stat("/secret").version, 0, "rolled back");
}

/// A watcher that may not READ a node gets no event about it (ZooKeeper's fix for
/// CVE-2024-23944, carried by Debian's 3.8.0): neither a recursive watch above it nor an
/// exists watch on it leaks the node's creation, changes or deletion.
#[test]
fn watch_events_need_read_permission() {
    let mut h = Harness::new();
    let owner = h.session();
    let snoop = h.session();
    let friend = h.session();
    let alice = digest("alice:pw");
    let with_alice = [ip(), alice.clone()];
    h.add_watch(snoop, "/", true);
    let r = h.read_as(friend, &with_alice, &Request::Exists(pw("/secret", true)));
    assert_eq!(r.err, -101);
    let r = h.read(snoop, &Request::Exists(pw("/secret", true)));
    assert_eq!(r.err, -101);
    let a = h.write_as(
        owner,
        &with_alice,
        create_with_acl("/secret", vec![acl(ALL, "digest", &alice.id)], 0),
    );
    assert_eq!(a.reply.err, OK);
    let got: Vec<(SessionId, String)> =
        a.events.iter().map(|(s, e)| (*s, e.path.clone())).collect();
    // The friend (who can READ) hears of the creation; the snooper only of "/"'s
    // children changing, which "/" lets everyone read.
    assert!(got.contains(&(friend, "/secret".into())), "{got:?}");
    assert!(!got.contains(&(snoop, "/secret".into())), "{got:?}");
    let a = h.write_as(owner, &with_alice, set_data("/secret", b"x", -1));
    assert!(a.events.iter().all(|(s, _)| *s != snoop), "{:?}", a.events);
    let a = h.write_as(owner, &with_alice, delete("/secret", -1));
    assert!(
        a.events.iter().all(|(s, e)| *s != snoop || e.path == "/"),
        "{:?}",
        a.events
    );
}
