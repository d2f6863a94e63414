//! `zlock ensemble`: a local ensemble to try, every member a `zlock server` process of
//! its own on loopback, with its ports, data directory and log printed. With `--tls`
//! (`tls`) each member also serves TLS clients on a `secureClientPort` of its own, with
//! throwaway certificates.
//!
//! A TLS member keeps its plain client port: zlock always serves one (see the README's
//! TLS section), the `--server` lines name it, and the `echo srvr | nc` hint and the
//! members' own checks need it; it stays on loopback.

mod tls;

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

#[derive(clap::Args)]
pub struct EnsembleArgs {
    /// Members to start (3 or 5 tolerate one or two failures)
    #[arg(long, default_value_t = 3)]
    pub members: u16,
    /// Where each member's data directory goes (member-1, member-2, ...); kept across
    /// runs, so starting again continues the same ensemble
    #[arg(long, default_value = "./zlock-ensemble")]
    pub data_dir: PathBuf,
    /// Client port of member 1; member N serves clients on this + N - 1
    #[arg(long, default_value_t = 2181)]
    pub client_port: u16,
    /// Quorum port of member 1 (this + N - 1 for member N); election ports are 1000 above
    #[arg(long, default_value_t = 2888)]
    pub quorum_port: u16,
    /// Let a super user change the members with reconfig (every member gets
    /// --reconfig-enabled); prints how to add a member
    #[arg(long)]
    pub reconfig_enabled: bool,
    /// The super user, USER:DIGEST (`zlock digest USER:PASSWORD` prints it), given to
    /// every member
    #[arg(long, value_name = "USER:DIGEST")]
    pub super_digest: Option<String>,
    /// Serve TLS clients too: a throwaway CA, the members' and a client's certificates
    /// in <data-dir>/tls/, each member on a secureClientPort (requiring a client
    /// certificate); prints the client flags and a kazoo / zkCli hint
    #[arg(long)]
    pub tls: bool,
    /// With --tls, member 1's TLS port; member N's is this + N - 1 [default: the client
    /// port + 100, so 2281, 2282, 2283]
    #[arg(long, value_name = "PORT", requires = "tls")]
    pub secure_client_port: Option<u16>,
}

struct Member {
    id: u16,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

fn spawn(exe: &PathBuf, m: &Member) -> anyhow::Result<Child> {
    let log =
        std::fs::File::create(&m.log).with_context(|| format!("creating {}", m.log.display()))?;
    let err = log.try_clone()?;
    Command::new(exe)
        .args(&m.args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting member {}", m.id))
}

pub async fn run(a: EnsembleArgs) -> anyhow::Result<()> {
    anyhow::ensure!((1..=255).contains(&a.members), "--members must be 1 to 255");
    if a.members.is_multiple_of(2) {
        eprintln!(
            "note: {} members tolerate no more failures than {}",
            a.members,
            a.members - 1
        );
    }
    let exe = std::env::current_exe().context("finding the zlock binary")?;
    let servers: Vec<String> = (1..=a.members)
        .map(|i| {
            format!(
                "{i}=127.0.0.1:{}:{};{}",
                a.quorum_port + i - 1,
                a.quorum_port + 1000 + i - 1,
                a.client_port + i - 1
            )
        })
        .collect();
    let tls = match a.tls {
        true => Some(tls::files(&a.data_dir)?),
        false => None,
    };
    let secure_base = a
        .secure_client_port
        .unwrap_or(a.client_port.saturating_add(100));
    let mut members = Vec::new();
    println!(
        "member  client           {}quorum           data directory (log: server.log)",
        if a.tls { "TLS              " } else { "" }
    );
    for i in 1..=a.members {
        let dir = a.data_dir.join(format!("member-{i}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut args = vec![
            "server".to_string(),
            "--myid".into(),
            i.to_string(),
            "--data-dir".into(),
            dir.display().to_string(),
        ];
        for s in &servers {
            args.push("--server".into());
            args.push(s.clone());
        }
        if a.reconfig_enabled {
            args.push("--reconfig-enabled".into());
        }
        if let Some(d) = &a.super_digest {
            args.push("--super-digest".into());
            args.push(d.clone());
        }
        let secure = match &tls {
            Some(files) => {
                let port = secure_base + i - 1;
                let cfg = dir.join("zoo.cfg");
                std::fs::write(&cfg, files.member_config(a.client_port + i - 1, port))
                    .with_context(|| format!("writing {}", cfg.display()))?;
                args.push("--config".into());
                args.push(cfg.display().to_string());
                format!("127.0.0.1:{port:<6}  ")
            }
            None => String::new(),
        };
        println!(
            "{i:>6}  127.0.0.1:{:<6}  {secure}127.0.0.1:{:<6}  {}",
            a.client_port + i - 1,
            a.quorum_port + i - 1,
            dir.display()
        );
        members.push(Member {
            id: i,
            args,
            log: dir.join("server.log"),
            child: None,
        });
    }
    for m in &mut members {
        m.child = Some(spawn(&exe, m)?);
    }
    let connect = (1..=a.members)
        .map(|i| format!("127.0.0.1:{}", a.client_port + i - 1))
        .collect::<Vec<_>>()
        .join(",");
    println!("\nconnect string: {connect}");
    println!("  zlock ls / --server {connect}");
    println!(
        "  echo srvr | nc 127.0.0.1 {}   (Mode: leader or follower)",
        a.client_port
    );
    if let Some(files) = &tls {
        let secure = (1..=a.members)
            .map(|i| format!("127.0.0.1:{}", secure_base + i - 1))
            .collect::<Vec<_>>()
            .join(",");
        tls::print_hints(files, &secure);
    }
    if a.reconfig_enabled {
        let n = a.members + 1;
        let line = format!(
            "{n}=127.0.0.1:{}:{};{}",
            a.quorum_port + n - 1,
            a.quorum_port + 1000 + n - 1,
            a.client_port + n - 1
        );
        let mut flags: String = servers.iter().map(|s| format!(" --server '{s}'")).collect();
        if let Some(d) = &a.super_digest {
            flags.push_str(&format!(" --super-digest '{d}'"));
        }
        println!("\nadd member {n} while it serves (reconfig):");
        println!(
            "  zlock server --myid {n} --data-dir {} --reconfig-enabled{flags} --server '{line}' &",
            a.data_dir.join(format!("member-{n}")).display()
        );
        println!(
            "  zlock reconfig --server {connect} --auth digest:USER:PASSWORD --add 'server.{line}'"
        );
        if a.super_digest.is_none() {
            println!("  (needs a super user: --super-digest \"$(zlock digest USER:PASSWORD)\")");
        }
    }
    println!("pids: {}", pids(&members));
    println!("kill -9 one of them to see the ensemble go on; Ctrl-C stops them all.\n");

    let mut every = tokio::time::interval(std::time::Duration::from_millis(200));
    let stop = crate::shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = every.tick() => {
                for m in &mut members {
                    let Some(c) = m.child.as_mut() else { continue };
                    if let Ok(Some(status)) = c.try_wait() {
                        println!(
                            "member {} exited ({status}); its log: {}\n  restart it: {} {}",
                            m.id,
                            m.log.display(),
                            exe.display(),
                            m.args.iter().map(|x| shell_quote(x)).collect::<Vec<_>>().join(" ")
                        );
                        m.child = None;
                    }
                }
            }
        }
    }
    println!("stopping the members");
    for m in &mut members {
        if let Some(c) = m.child.as_mut() {
            if let Some(pid) = c.id() {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
        }
    }
    for m in &mut members {
        if let Some(mut c) = m.child.take() {
            let waited = tokio::time::timeout(std::time::Duration::from_secs(10), c.wait()).await;
            if waited.is_err() {
                let _ = c.kill().await;
            }
        }
    }
    Ok(())
}

fn pids(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| {
            format!(
                "{}={}",
                m.id,
                m.child.as_ref().and_then(|c| c.id()).unwrap_or(0)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./=:".contains(c))
    {
        s.to_string()
    } else {
        format!("'{s}'")
    }
}
