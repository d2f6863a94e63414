//! znode path validation and helpers, following ZooKeeper's `PathUtils.validatePath`.
//!
//! A valid path starts with `/`, does not end with `/` (except the root itself), has no
//! empty, `.` or `..` segment, and contains none of the characters ZooKeeper rejects:
//! U+0000, U+0001..U+001F, U+007F..U+009F, U+D800..U+F8FF, U+FFF0..U+FFFF, and (since
//! Java checks UTF-16 units) anything beyond U+FFFF.

use zlock_proto::ErrorCode;

/// Checks a path. `sequential` allows a trailing `/` (ZooKeeper validates `path + "1"`
/// for sequential creates, so `/queue/` names children `/queue/0000000001`).
pub fn validate(path: &str, sequential: bool) -> Result<(), ErrorCode> {
    if sequential {
        let mut p = String::with_capacity(path.len() + 1);
        p.push_str(path);
        p.push('1');
        return validate_plain(&p);
    }
    validate_plain(path)
}

fn validate_plain(path: &str) -> Result<(), ErrorCode> {
    if !path.starts_with('/') {
        return Err(ErrorCode::BadArguments);
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err(ErrorCode::BadArguments);
    }
    for seg in path[1..].split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return Err(ErrorCode::BadArguments);
        }
    }
    for c in path.chars() {
        let c = c as u32;
        if c == 0
            || (0x01..=0x1f).contains(&c)
            || (0x7f..=0x9f).contains(&c)
            || (0xd800..=0xf8ff).contains(&c)
            || (0xfff0..=0xffff).contains(&c)
            // Java sees a character outside the BMP as two UTF-16 surrogates
            // (U+D800..U+DFFF), which the range above rejects.
            || c > 0xffff
        {
            return Err(ErrorCode::BadArguments);
        }
    }
    Ok(())
}

/// The parent of a valid non-root path (`/a/b` → `/a`, `/a` → `/`).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The last segment of a valid non-root path.
pub fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// `parent` joined with a child name.
pub fn join(parent: &str, child: &str) -> String {
    let mut s = String::with_capacity(parent.len() + 1 + child.len());
    s.push_str(parent);
    if parent != "/" {
        s.push('/');
    }
    s.push_str(child);
    s
}

/// Every proper ancestor of `path`, nearest first, ending with `/`.
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut cur = if path == "/" { None } else { Some(path) };
    std::iter::from_fn(move || {
        let p = cur?;
        let par = parent(p);
        cur = if par == "/" { None } else { Some(par) };
        if p == "/" {
            None
        } else {
            Some(par)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_and_invalid() {
        for ok in ["/", "/a", "/a/b", "/a-b_c.d", "/zookeeper", "/ü"] {
            assert_eq!(validate(ok, false), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a",
            "/a/",
            "//",
            "/a//b",
            "/.",
            "/a/..",
            "/a/./b",
            "/a\u{0}",
            "/a\u{1f}",
            "/\u{fff5}",
        ] {
            assert_eq!(
                validate(bad, false),
                Err(ErrorCode::BadArguments),
                "{bad:?}"
            );
        }
        assert_eq!(validate("/q/", true), Ok(()));
        assert_eq!(validate("/", true), Ok(()));
    }

    #[test]
    fn parent_name_join_ancestors() {
        assert_eq!(parent("/a/b"), "/a");
        assert_eq!(parent("/a"), "/");
        assert_eq!(name("/a/b"), "b");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert_eq!(
            ancestors("/a/b/c").collect::<Vec<_>>(),
            vec!["/a/b", "/a", "/"]
        );
        assert_eq!(ancestors("/").count(), 0);
    }
}
