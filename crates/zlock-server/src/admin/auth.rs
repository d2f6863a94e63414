//! Who asks the AdminServer, and may they: ZooKeeper 3.9's model
//! (`Commands.runCommand`, `handleAuthentication`, `handleAuthorization`).
//!
//! A command that needs it asks for an `Authorization: <scheme> [<credentials>]`
//! header, one space between the two, and for ALL on `/` for the identities it gives:
//! - `digest user:password`: the identity `digest:user:base64(sha1(user:password))`,
//!   and `super` too when it is `DigestAuthenticationProvider.superDigest`, as an
//!   `addauth digest` on the client port gives;
//! - `ip`: the identity `ip:<the client's address>` (no credentials sent);
//! - `x509`: the subject of the certificate the client presented on an HTTPS
//!   connection (`admin.needClientAuth`), and `super` when it is
//!   `X509AuthenticationProvider.superUser`; without one, refused as unauthenticated;
//! - `Basic <base64(user:password)>` (zlock's addition): read as `digest user:password`,
//!   so that a browser, which sends this header after its own login prompt, can open
//!   the lock dashboard when it asks for credentials.
//!
//! Answers, as ZooKeeper's: no header, 401 "Auth info is missing for the command";
//! a header no provider accepts (unknown scheme, missing or malformed credentials, more
//! than two parts), 401 "Not authenticated"; identities that lack any one permission
//! of ALL on `/`, each permission checked on its own (ZOOKEEPER-4964), 403 "Not
//! authorized". An ACL on `/` that grants ALL to `world:anyone` (a new tree's) lets
//! every authenticated caller in: the header is still required, as in ZooKeeper.
//!
//! Which commands ask: none of ZooKeeper 3.8's; with `zlock.adminAuthRequired=true`
//! (see `crate::config::AdminConfig`) those that show sessions, client addresses,
//! watched paths or lock holders, or reset counters, and the dashboard.

use std::net::IpAddr;

use base64::Engine;
use hyper::StatusCode;
use zlock_proto::records::{perms, Id};

/// Why a command is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    /// No `Authorization` header.
    Missing,
    /// A header no authentication provider accepts.
    NotAuthenticated,
    /// Authenticated, without ALL on `/`.
    NotAuthorized,
    /// The core did not answer with `/`'s ACL in time (a stopping server).
    NotServing,
}

impl Denied {
    /// The status ZooKeeper answers with.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Denied::Missing | Denied::NotAuthenticated => StatusCode::UNAUTHORIZED,
            Denied::NotAuthorized => StatusCode::FORBIDDEN,
            Denied::NotServing => StatusCode::OK,
        }
    }

    /// The command's `error` field, in ZooKeeper's words.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Denied::Missing => "Auth info is missing for the command",
            Denied::NotAuthenticated => "Not authenticated",
            Denied::NotAuthorized => "Not authorized",
            Denied::NotServing => "This ZooKeeper instance is not currently serving requests",
        }
    }
}

/// The permission a command asks for, and on which node: ALL on `/`, as every
/// ZooKeeper 3.9 command that asks.
pub(crate) const WANTED: i32 = perms::ALL;
pub(crate) const ON: &str = "/";

/// The identities the header value `value` gives a client at `peer`, as ZooKeeper's
/// server authentication providers give them over HTTP.
pub(crate) fn identities(
    value: &str,
    (peer, x509): (IpAddr, &[Id]),
    super_digest: Option<&str>,
) -> Result<Vec<Id>, Denied> {
    // Java's `split(" ")`: empty parts at the end dropped, others kept.
    let mut parts: Vec<&str> = value.split(' ').collect();
    while parts.len() > 1 && parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    let (scheme, credentials) = match parts.as_slice() {
        [scheme] => (*scheme, None),
        [scheme, credentials] => (*scheme, Some(*credentials)),
        _ => return Err(Denied::NotAuthenticated),
    };
    match (scheme, credentials) {
        ("digest", Some(user_password)) => digest(user_password, super_digest),
        ("ip", _) => Ok(vec![Id::new("ip", &peer.to_string())]),
        ("x509", _) if !x509.is_empty() => Ok(x509.to_vec()),
        (basic, Some(encoded)) if basic.eq_ignore_ascii_case("basic") => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| Denied::NotAuthenticated)?;
            let user_password = String::from_utf8(decoded).map_err(|_| Denied::NotAuthenticated)?;
            digest(&user_password, super_digest)
        }
        _ => Err(Denied::NotAuthenticated),
    }
}

/// `digest user:password`'s identities.
fn digest(user_password: &str, super_digest: Option<&str>) -> Result<Vec<Id>, Denied> {
    let id = zlock_core::acl::digest_id(user_password).ok_or(Denied::NotAuthenticated)?;
    let mut ids = Vec::with_capacity(2);
    if super_digest == Some(id.as_str()) {
        ids.push(Id::new("super", ""));
    }
    ids.push(Id::new("digest", &id));
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn schemes_give_zookeepers_identities() {
        let admin = zlock_core::acl::digest_id("admin:secret").unwrap();
        assert_eq!(
            identities("digest admin:secret", (HOME, &[]), None),
            Ok(vec![Id::new("digest", &admin)])
        );
        assert_eq!(
            identities("digest admin:secret", (HOME, &[]), Some(&admin)),
            Ok(vec![Id::new("super", ""), Id::new("digest", &admin)]),
            "superDigest's user is super too"
        );
        assert_eq!(
            identities("ip", (HOME, &[]), None),
            Ok(vec![Id::new("ip", "127.0.0.1")])
        );
        let basic = base64::engine::general_purpose::STANDARD.encode("admin:secret");
        assert_eq!(
            identities(&format!("Basic {basic}"), (HOME, &[]), None),
            identities("digest admin:secret", (HOME, &[]), None),
            "a browser's Basic header is a digest identity"
        );
        // Java's split drops trailing empty parts only.
        assert!(identities("digest admin:secret ", (HOME, &[]), None).is_ok());
        for bad in [
            "digest",
            "digest nocolon",
            "digest  admin:secret",
            "digest a:b c",
            "x509",
            "sasl x",
            "Basic !!!",
            "",
        ] {
            assert_eq!(
                identities(bad, (HOME, &[]), None),
                Err(Denied::NotAuthenticated),
                "{bad:?}"
            );
        }
    }
}
