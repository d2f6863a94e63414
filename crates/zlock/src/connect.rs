//! Connect strings (`host:port,host:port[/chroot]`), as ZooKeeper's clients take them.

use crate::error::{Error, Result};

/// Splits a connect string `h1:2181,h2:2181/app` into hosts and chroot ("" for none).
pub(crate) fn parse_connect_string(s: &str) -> Result<(Vec<String>, String)> {
    let (hosts, chroot) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            if h.contains(':') {
                h.to_owned()
            } else {
                format!("{h}:2181")
            }
        })
        .collect();
    if hosts.is_empty() {
        return Err(Error::BadConnectString(s.to_owned()));
    }
    let chroot = chroot.trim_end_matches('/');
    if chroot.contains("//") {
        return Err(Error::BadConnectString(s.to_owned()));
    }
    Ok((hosts, chroot.to_owned()))
}

/// `connect` with its hosts starting from the `n`-th (`b:2,c:3,a:1` for 1), the chroot
/// kept: the client tries the hosts in order, so a program that opens many sessions
/// (a benchmark, a pool) spreads them over an ensemble's members this way. One host:
/// unchanged.
pub fn rotate_hosts(connect: &str, n: usize) -> String {
    let (hosts, chroot) = connect.split_at(connect.find('/').unwrap_or(connect.len()));
    let hosts: Vec<&str> = hosts.split(',').collect();
    let k = n % hosts.len();
    [&hosts[k..], &hosts[..k]].concat().join(",") + chroot
}

#[cfg(test)]
mod tests {
    use super::{parse_connect_string, rotate_hosts};

    #[test]
    fn sessions_start_on_successive_hosts() {
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 0), "a:1,b:2,c:3");
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 1), "b:2,c:3,a:1");
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 5), "c:3,a:1,b:2");
        assert_eq!(rotate_hosts("a:1", 7), "a:1");
        assert_eq!(rotate_hosts("a:1,b:2/app/x", 1), "b:2,a:1/app/x");
        assert_eq!(rotate_hosts("a:1/app", 1), "a:1/app");
    }

    #[test]
    fn connect_strings() {
        let (h, c) = parse_connect_string("a:1,b:2/app/x").unwrap();
        assert_eq!(h, vec!["a:1", "b:2"]);
        assert_eq!(c, "/app/x");
        let (h, c) = parse_connect_string("a").unwrap();
        assert_eq!(h, vec!["a:2181"]);
        assert_eq!(c, "");
        assert_eq!(parse_connect_string("a:1/").unwrap().1, "");
        assert!(parse_connect_string("/app").is_err());
    }
}
