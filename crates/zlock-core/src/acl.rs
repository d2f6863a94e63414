//! ACL checks and identities (`world`, `auth`, `digest`, `ip`, `super`).

use base64::Engine;
use sha1::{Digest, Sha1};
use zlock_proto::records::{perms, Acl, Id};
use zlock_proto::ErrorCode;

/// The identity a `digest` auth packet `user:password` authenticates as:
/// `user:base64(sha1("user:password"))`.
pub fn digest_id(user_password: &str) -> Option<String> {
    let (user, _) = user_password.split_once(':')?;
    let hash = Sha1::digest(user_password.as_bytes());
    Some(format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    ))
}

/// Does `acl` grant `perm` to a caller holding `auth` identities?
///
/// `auth` always includes the caller's `ip` identity. A `super` identity passes every
/// check, as in ZooKeeper.
pub fn check(acl: &[Acl], perm: i32, auth: &[Id]) -> Result<(), ErrorCode> {
    if auth.iter().any(|a| a.scheme == "super") || acl.is_empty() {
        return Ok(());
    }
    for a in acl {
        if a.perms & perm == 0 {
            continue;
        }
        match a.id.scheme.as_str() {
            "world" if a.id.id == "anyone" => return Ok(()),
            "ip" => {
                if auth
                    .iter()
                    .any(|x| x.scheme == "ip" && ip_matches(&a.id.id, &x.id))
                {
                    return Ok(());
                }
            }
            scheme => {
                if auth.iter().any(|x| x.scheme == scheme && x.id == a.id.id) {
                    return Ok(());
                }
            }
        }
    }
    Err(ErrorCode::NoAuth)
}

/// Does `acl` grant every permission in `wanted`, each bit checked on its own (by
/// whichever entries grant it)? What ZooKeeper 3.9's AdminServer asks of a command's
/// caller (`Commands.handleAuthorization`; since ZOOKEEPER-4964, 3.9.4, each bit
/// separately: before, one entry granting any of the bits passed the whole check).
pub fn check_each(acl: &[Acl], wanted: i32, auth: &[Id]) -> Result<(), ErrorCode> {
    (0..i32::BITS)
        .map(|b| 1 << b)
        .filter(|bit| wanted & bit != 0)
        .try_for_each(|bit| check(acl, bit, auth))
}

/// The identities an `auth` ACL entry stands for: the caller's authenticated ones.
fn callers(auth: &[Id]) -> impl Iterator<Item = &Id> {
    auth.iter().filter(|x| x.scheme != "ip")
}

/// Would [`fixup`] accept this list? The same checks, without building the result.
pub fn check_valid(acl: &[Acl], auth: &[Id]) -> Result<(), ErrorCode> {
    if acl.is_empty() {
        return Err(ErrorCode::InvalidAcl);
    }
    for a in acl {
        let ok = match a.id.scheme.as_str() {
            "world" => a.id.id == "anyone",
            "auth" => callers(auth).next().is_some(),
            "digest" => digest_id_valid(&a.id.id),
            "ip" => parse_cidr(&a.id.id).is_some(),
            // No `super` provider exists in ZooKeeper, so a `super` ACL is InvalidACL.
            "sasl" | "x509" => true,
            _ => false,
        };
        if !ok {
            return Err(ErrorCode::InvalidAcl);
        }
    }
    Ok(())
}

/// Rewrites a create/setACL ACL list as ZooKeeper's `fixupACL` does: `auth` entries
/// become one entry per authenticated (non-ip) identity of the caller; an empty list,
/// an unknown scheme, a malformed id or `auth` without any identity is InvalidACL.
pub fn fixup(acl: &[Acl], auth: &[Id]) -> Result<Vec<Acl>, ErrorCode> {
    check_valid(acl, auth)?;
    let mut out: Vec<Acl> = Vec::with_capacity(acl.len());
    for a in acl {
        if a.id.scheme == "auth" {
            out.extend(callers(auth).map(|x| Acl {
                perms: a.perms,
                id: x.clone(),
            }));
        } else {
            out.push(a.clone());
        }
    }
    // ZooKeeper drops exact duplicates (its ACL list is de-duplicated by the ACL cache).
    let mut dedup: Vec<Acl> = Vec::with_capacity(out.len());
    for a in out {
        if !dedup.contains(&a) {
            dedup.push(a);
        }
    }
    Ok(dedup)
}

/// `DigestAuthenticationProvider.isValid`: Java's `id.split(":").length == 2`, where
/// `split` drops trailing empty parts (so `u:h:` is valid, `u:` and `u:h:x` are not).
fn digest_id_valid(id: &str) -> bool {
    let mut parts: Vec<&str> = id.split(':').collect();
    while parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts.len() == 2
}

fn parse_cidr(s: &str) -> Option<(std::net::IpAddr, u32)> {
    let (addr, bits) = match s.split_once('/') {
        Some((a, b)) => (a, Some(b.parse::<u32>().ok()?)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(max);
    (bits <= max).then_some((ip, bits))
}

fn ip_matches(acl_id: &str, client: &str) -> bool {
    let (Some((net, bits)), Ok(ip)) = (parse_cidr(acl_id), client.parse::<std::net::IpAddr>())
    else {
        return false;
    };
    match (net, ip) {
        (std::net::IpAddr::V4(n), std::net::IpAddr::V4(c)) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(n) & mask == u32::from(c) & mask
        }
        (std::net::IpAddr::V6(n), std::net::IpAddr::V6(c)) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(n) & mask == u128::from(c) & mask
        }
        _ => false,
    }
}

/// A convenience for tests and callers: `perms` for `scheme:id`.
pub fn acl(perms: i32, scheme: &str, id: &str) -> Acl {
    Acl {
        perms,
        id: Id::new(scheme, id),
    }
}

/// All permissions.
pub const ALL: i32 = perms::ALL;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_each_asks_every_bit_of_its_own() {
        let me = [Id::new("digest", "admin:x")];
        let split = [
            acl(perms::READ | perms::WRITE, "digest", "admin:x"),
            acl(
                perms::CREATE | perms::DELETE | perms::ADMIN,
                "digest",
                "admin:x",
            ),
        ];
        assert_eq!(
            check_each(&split, ALL, &me),
            Ok(()),
            "two entries cover ALL"
        );
        let part = [acl(perms::READ | perms::ADMIN, "digest", "admin:x")];
        assert_eq!(
            check(&part, ALL, &me),
            Ok(()),
            "one bit is enough for check"
        );
        assert_eq!(check_each(&part, ALL, &me), Err(ErrorCode::NoAuth));
        let other = [Id::new("digest", "alice:y")];
        assert_eq!(check_each(&split, ALL, &other), Err(ErrorCode::NoAuth));
        let anyone = [acl(ALL, "world", "anyone")];
        assert_eq!(check_each(&anyone, ALL, &other), Ok(()));
        let sup = [Id::new("super", "")];
        assert_eq!(check_each(&part, ALL, &sup), Ok(()), "super passes");
    }

    #[test]
    fn digest_matches_zookeeper() {
        // DigestAuthenticationProvider.generateDigest("super:test")
        assert_eq!(
            digest_id("super:test").unwrap(),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
    }

    #[test]
    fn checks() {
        let ip = Id::new("ip", "127.0.0.1");
        let open = Acl::open_unsafe();
        assert_eq!(check(&open, perms::READ, std::slice::from_ref(&ip)), Ok(()));
        let d = vec![acl(perms::READ, "digest", "u:h")];
        assert_eq!(
            check(&d, perms::READ, std::slice::from_ref(&ip)),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(
            check(&d, perms::READ, &[ip.clone(), Id::new("digest", "u:h")]),
            Ok(())
        );
        assert_eq!(
            check(&d, perms::WRITE, &[Id::new("digest", "u:h")]),
            Err(ErrorCode::NoAuth)
        );
        let net = vec![acl(perms::ALL, "ip", "127.0.0.0/8")];
        assert_eq!(check(&net, perms::READ, &[ip]), Ok(()));
        assert_eq!(
            check(&net, perms::READ, &[Id::new("ip", "10.0.0.1")]),
            Err(ErrorCode::NoAuth)
        );
    }

    #[test]
    fn fixups() {
        let ip = Id::new("ip", "127.0.0.1");
        assert_eq!(
            fixup(&[acl(31, "auth", "")], std::slice::from_ref(&ip)),
            Err(ErrorCode::InvalidAcl)
        );
        let d = Id::new("digest", "u:h");
        assert_eq!(
            fixup(&[acl(31, "auth", "")], &[ip, d.clone()]).unwrap(),
            vec![Acl { perms: 31, id: d }]
        );
        assert_eq!(fixup(&[], &[]), Err(ErrorCode::InvalidAcl));
        assert_eq!(
            fixup(&[acl(31, "foo", "x")], &[]),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(31, "ip", "nope")], &[]),
            Err(ErrorCode::InvalidAcl)
        );
    }
}
