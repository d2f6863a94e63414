//! The chroot of a connect string (`h1:2181/app`): client paths are relative to it, the
//! server sees them with it prefixed.

use zlock_proto::records::MultiOp;
use zlock_proto::Request;

/// Prefixes the chroot to a client path ("/" is the chroot itself).
pub(crate) fn prefix(chroot: &str, path: &mut String) {
    if path == "/" {
        *path = chroot.to_owned();
    } else if path.starts_with('/') {
        path.insert_str(0, chroot);
    }
}

/// Strips the chroot from a server path.
pub(crate) fn strip_chroot(chroot: &str, path: &str) -> String {
    if chroot.is_empty() {
        return path.to_owned();
    }
    match path.strip_prefix(chroot) {
        Some("") => "/".to_owned(),
        Some(rest) if rest.starts_with('/') => rest.to_owned(),
        _ => path.to_owned(),
    }
}

fn chroot_op(chroot: &str, op: &mut MultiOp) {
    match op {
        MultiOp::Create(_, r) => prefix(chroot, &mut r.path),
        MultiOp::CreateTtl(r) => prefix(chroot, &mut r.path),
        MultiOp::Delete(r) => prefix(chroot, &mut r.path),
        MultiOp::SetData(r) => prefix(chroot, &mut r.path),
        MultiOp::Check(r) => prefix(chroot, &mut r.path),
        MultiOp::GetData(r) | MultiOp::GetChildren(r) => prefix(chroot, &mut r.path),
    }
}

/// The request with the chroot prefixed to every path in it.
pub(crate) fn chroot_request(chroot: &str, req: &Request) -> Request {
    let mut req = req.clone();
    match &mut req {
        Request::Create(_, r) => prefix(chroot, &mut r.path),
        Request::CreateTtl(r) => prefix(chroot, &mut r.path),
        Request::Delete(r) => prefix(chroot, &mut r.path),
        Request::Exists(r)
        | Request::GetData(r)
        | Request::GetChildren(r)
        | Request::GetChildren2(r) => prefix(chroot, &mut r.path),
        Request::SetData(r) => prefix(chroot, &mut r.path),
        Request::GetAcl(r)
        | Request::Sync(r)
        | Request::GetEphemerals(r)
        | Request::GetAllChildrenNumber(r) => prefix(chroot, &mut r.path),
        Request::SetAcl(r) => prefix(chroot, &mut r.path),
        Request::Check(r) => prefix(chroot, &mut r.path),
        Request::Multi(ops) | Request::MultiRead(ops) => {
            for op in ops {
                chroot_op(chroot, op);
            }
        }
        Request::CheckWatches(r) | Request::RemoveWatches(r) => prefix(chroot, &mut r.path),
        Request::AddWatch(r) => prefix(chroot, &mut r.path),
        Request::Lock(r) => {
            prefix(chroot, &mut r.path);
            if !r.release.is_empty() {
                prefix(chroot, &mut r.release);
            }
        }
        _ => {}
    }
    req
}

#[cfg(test)]
mod tests {
    use zlock_proto::records::PathWatchRequest;

    use super::*;

    #[test]
    fn chroot_paths() {
        let r = chroot_request(
            "/app",
            &Request::GetData(PathWatchRequest {
                path: "/".into(),
                watch: false,
            }),
        );
        assert!(matches!(r, Request::GetData(p) if p.path == "/app"));
        assert_eq!(strip_chroot("/app", "/app"), "/");
        assert_eq!(strip_chroot("/app", "/app/x"), "/x");
        assert_eq!(strip_chroot("/app", "/apple"), "/apple");
    }
}
