//! [`Netns`]: one network namespace per member of a test ensemble, so that a member can
//! be cut off from the others while its clients (the test process, in the root
//! namespace) stay connected to it.
//!
//! Layout, for a run that claimed subnet `10.77.<k>.0/24`:
//!
//! ```text
//!   root namespace (the test and its clients)
//!     bridge zlbr<k>, 10.77.<k>.254/24
//!       ├── veth zlv<k>m1 ── eth0 10.77.<k>.1/24 in zlock-<pid>-<k>-m1
//!       ├── veth zlv<k>m2 ── eth0 10.77.<k>.2/24 in zlock-<pid>-<k>-m2
//!       └── veth zlv<k>m3 ── eth0 10.77.<k>.3/24 in zlock-<pid>-<k>-m3
//! ```
//!
//! The bridge is created first and its name is the claim on the subnet: `ip link add`
//! fails if another run (in this process or another) holds it, and the next `k` is
//! tried. The namespaces carry the pid, to tell whose they are if one is ever left
//! behind (a test process killed with SIGKILL cannot clean up).
//!
//! [`Netns::cut`] makes member `i` and every other member send what they address to
//! each other to a hardware address nobody has (a permanent neighbour entry on both
//! sides): frames leave and are dropped by the bridge's ports, so the packets vanish
//! silently in both directions, as on a failed link: open connections stall and new
//! ones time out, with no error to react to. Only iproute2 is needed (no nftables, no
//! tc classifiers in this kernel). Traffic between a member and the root namespace is
//! untouched. [`Netns::heal`] removes the entries; address resolution works again.
//!
//! Everything is removed on drop (also while panicking). Creating namespaces needs
//! root: [`Netns::create`] fails with a message saying so, it never quietly falls back.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context};

/// The hardware address a cut member's peers are sent to: locally administered, unicast,
/// owned by no interface.
const NOWHERE: &str = "02:7a:6c:00:00:01";

/// The namespaces and links of one test ensemble.
pub struct Netns {
    /// `k` in `10.77.<k>.0/24`.
    subnet: u8,
    bridge: String,
    /// One per member, in member order.
    names: Vec<String>,
    /// Which members are cut off now.
    cut: Vec<bool>,
}

impl Netns {
    /// One namespace per member (`members` of them), each with `lo` up and `eth0`
    /// joined to a bridge in the root namespace.
    ///
    /// # Errors
    /// Not root, iproute2 missing, or no free subnet; anything created is removed.
    pub fn create(members: usize) -> anyhow::Result<Netns> {
        if !is_root() {
            bail!(
                "network namespaces need root (ip netns add, veth, a bridge): run this test \
                 as root, as CI does"
            );
        }
        static RUNS: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let taken = ip_out(&["-o", "-4", "addr", "show"])?;
        let first = (pid + run * 37) % 250;
        let mut claimed = None;
        for step in 0..250 {
            let k = ((first + step) % 250 + 1) as u8;
            if taken.contains(&format!(" 10.77.{k}.")) {
                continue;
            }
            let bridge = format!("zlbr{k}");
            if ip_quiet(&["link", "add", &bridge, "type", "bridge"]) {
                claimed = Some((k, bridge));
                break;
            }
        }
        let Some((subnet, bridge)) = claimed else {
            bail!("no free 10.77.<k>.0/24 subnet (or no bridge could be created)");
        };
        let mut n = Netns {
            subnet,
            bridge,
            names: Vec::new(),
            cut: vec![false; members],
        };
        // From here on, a failure drops `n`, which removes what was made.
        let alias = format!("zlock-testkit pid {pid}");
        ip(&["link", "set", "dev", &n.bridge, "alias", &alias])?;
        let gateway = format!("10.77.{subnet}.254/24");
        ip(&["addr", "add", &gateway, "dev", &n.bridge])?;
        ip(&["link", "set", &n.bridge, "up"])?;
        for i in 0..members {
            let id = i + 1;
            let ns = format!("zlock-{pid}-{subnet}-m{id}");
            ip(&["netns", "add", &ns])?;
            n.names.push(ns.clone());
            let veth = n.veth(i);
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &veth, "master", &n.bridge, "up"])?;
            let addr = format!("{}/24", n.addr(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(n)
    }

    /// Member `i`'s address, `10.77.<k>.<i + 1>`.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, (i + 1) as u8)
    }

    /// Member `i`'s namespace.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// `program` to be run in member `i`'s namespace: `ip netns exec <ns> program`.
    /// `ip` execs the program, so the child's pid is the program's (signals reach it).
    pub fn command(&self, i: usize, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.name(i)]).arg(program);
        c
    }

    /// Cuts member `i` off from every other member, both ways; its traffic with the
    /// root namespace goes on.
    pub fn cut(&mut self, i: usize) -> anyhow::Result<()> {
        for j in (0..self.names.len()).filter(|j| *j != i) {
            for (from, to) in [(i, j), (j, i)] {
                let to = self.addr(to).to_string();
                ip(&[
                    "-n",
                    self.name(from),
                    "neigh",
                    "replace",
                    &to,
                    "lladdr",
                    NOWHERE,
                    "dev",
                    "eth0",
                    "nud",
                    "permanent",
                ])?;
            }
        }
        self.cut[i] = true;
        Ok(())
    }

    /// Undoes [`Netns::cut`] of member `i`. A pair where the other member is cut off
    /// too stays cut.
    pub fn heal(&mut self, i: usize) -> anyhow::Result<()> {
        for j in (0..self.names.len()).filter(|j| *j != i && !self.cut[*j]) {
            for (from, to) in [(i, j), (j, i)] {
                let to = self.addr(to).to_string();
                ip(&["-n", self.name(from), "neigh", "del", &to, "dev", "eth0"])?;
            }
        }
        self.cut[i] = false;
        Ok(())
    }

    /// Whether member `i` is cut off now.
    pub fn is_cut(&self, i: usize) -> bool {
        self.cut[i]
    }

    fn veth(&self, i: usize) -> String {
        format!("zlv{}m{}", self.subnet, i + 1)
    }
}

impl Drop for Netns {
    /// Removes the namespaces (their `eth0` ends go with them, and the root ends with
    /// those), the root ends again in case a namespace outlives its deletion (a
    /// process still inside it), and the bridge.
    fn drop(&mut self) {
        for (i, ns) in self.names.iter().enumerate() {
            if !ip_quiet(&["netns", "del", ns]) {
                eprintln!("testkit: could not remove network namespace {ns}");
            }
            ip_quiet(&["link", "del", &self.veth(i)]);
        }
        if !ip_quiet(&["link", "del", &self.bridge]) {
            eprintln!("testkit: could not remove bridge {}", self.bridge);
        }
    }
}

pub(crate) fn is_root() -> bool {
    // The effective uid is the `Uid:` line's second field.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Runs `ip args`; fails with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    ip_out(args).map(drop)
}

/// Runs `ip args`; whether it succeeded.
fn ip_quiet(args: &[&str]) -> bool {
    ip(args).is_ok()
}

/// `ip args`' standard output.
fn ip_out(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
