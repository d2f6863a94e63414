//! Connect strings (`host:port,host:port[/chroot]`), as ZooKeeper's clients take them.

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
    use super::rotate_hosts;

    #[test]
    fn sessions_start_on_successive_hosts() {
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 0), "a:1,b:2,c:3");
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 1), "b:2,c:3,a:1");
        assert_eq!(rotate_hosts("a:1,b:2,c:3", 5), "c:3,a:1,b:2");
        assert_eq!(rotate_hosts("a:1", 7), "a:1");
        assert_eq!(rotate_hosts("a:1,b:2/app/x", 1), "b:2,a:1/app/x");
        assert_eq!(rotate_hosts("a:1/app", 1), "a:1/app");
    }
}
