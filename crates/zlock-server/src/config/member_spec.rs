//! A member's `server.N` value, as ZooKeeper writes it
//! (`host:quorumPort:electionPort[:participant|:observer][;[clientHost:]clientPort]`):
//! parsed, checked and printed back. Which members make the ensemble, and this
//! server's place in it, is [`super::ensemble`]'s.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use super::MemberSpec;
/// The largest member id. A member puts its id in the top byte of the session ids it
/// creates, as ZooKeeper does (`zlock_core::state::session_id_for`), so two ids that
/// differ only above that byte would hand out the same session ids; ZooKeeper's
/// administrator's guide asks for ids from 1 to 255 for the same reason.
pub const MAX_MEMBER_ID: u64 = 255;

/// Why one `server.N` value (or `--server` flag) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MemberSyntax {
    #[error(
        "expected host:quorumPort:electionPort[:participant|:observer][;[clientHost:]clientPort]"
    )]
    Form,
    /// A `--server` flag without `N=`.
    #[error("expected N=host:quorumPort:electionPort[;[clientHost:]clientPort]")]
    FlagForm,
    #[error("the id {0:?} is not an integer from 1 to {MAX_MEMBER_ID}")]
    Id(String),
    #[error("the {which} {value:?} is not a port number (1 to 65535)")]
    Port { which: &'static str, value: String },
    #[error("{0:?} is neither participant nor observer")]
    Role(String),
    #[error("the host is empty (an IPv6 address goes in brackets: [::1]:2888:3888)")]
    Host,
    #[error(
        "several addresses per member (`|`, ZooKeeper's multiAddress.enabled) are not supported"
    )]
    MultiAddress,
    #[error("a secure client port (a second `;`) is not supported")]
    SecurePort,
    /// Found when this member's client address is worked out, not when parsing.
    #[error("the client host {0:?} is neither an IP address nor a name that resolves")]
    ClientHost(String),
}

fn port(which: &'static str, text: &str) -> Result<u16, MemberSyntax> {
    match text.trim().parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(MemberSyntax::Port {
            which,
            value: text.trim().to_owned(),
        }),
    }
}

/// `host:rest` or `[v6]:rest` into the host (brackets removed) and the rest.
fn split_host(text: &str) -> Result<(&str, &str), MemberSyntax> {
    let text = text.trim();
    let (host, rest) = match text.strip_prefix('[') {
        Some(v6) => {
            let (host, rest) = v6.split_once(']').ok_or(MemberSyntax::Form)?;
            (host, rest.strip_prefix(':').ok_or(MemberSyntax::Form)?)
        }
        None => text.split_once(':').ok_or(MemberSyntax::Form)?,
    };
    let host = host.trim();
    if host.is_empty() {
        return Err(MemberSyntax::Host);
    }
    Ok((host, rest))
}

/// `[clientHost:]clientPort`, the host possibly `[v6]`.
fn client(text: &str) -> Result<(Option<String>, u16), MemberSyntax> {
    let text = text.trim();
    if text.is_empty() {
        return Err(MemberSyntax::Form);
    }
    if !text.starts_with('[') && !text.contains(':') {
        return Ok((None, port("client port", text)?));
    }
    let (host, p) = split_host(text)?;
    Ok((Some(host.to_owned()), port("client port", p)?))
}

/// A member id: an integer from 1 to [`MAX_MEMBER_ID`].
pub fn parse_member_id(text: &str) -> Option<u64> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|id| (1..=MAX_MEMBER_ID).contains(id))
}

impl MemberSpec {
    /// Parses a `server.N=value` line: `id` is its `N`, `value` what follows the `=`.
    /// The syntax is ZooKeeper 3.5+'s, and the older one without `;client`:
    /// `host:quorumPort:electionPort[:participant|:observer][;[clientHost:]clientPort]`,
    /// an IPv6 host in brackets (`[::1]:2888:3888`).
    pub fn parse(id: &str, value: &str) -> Result<MemberSpec, MemberSyntax> {
        let id = parse_member_id(id).ok_or_else(|| MemberSyntax::Id(id.trim().to_owned()))?;
        let mut parts = value.split(';');
        let addr = parts.next().unwrap_or_default();
        let client = parts.next().map(client).transpose()?;
        if parts.next().is_some() {
            return Err(MemberSyntax::SecurePort);
        }
        if addr.contains('|') {
            return Err(MemberSyntax::MultiAddress);
        }
        let (host, rest) = split_host(addr)?;
        let fields: Vec<&str> = rest.split(':').collect();
        let (quorum, election, role) = match fields[..] {
            [q, e] => (q, e, None),
            [q, e, r] => (q, e, Some(r.trim())),
            _ => return Err(MemberSyntax::Form),
        };
        let observer = match role.map(str::to_ascii_lowercase).as_deref() {
            None | Some("participant") => false,
            Some("observer") => true,
            Some(_) => return Err(MemberSyntax::Role(role.unwrap_or_default().to_owned())),
        };
        Ok(MemberSpec {
            id,
            host: host.to_owned(),
            quorum_port: port("quorum port", quorum)?,
            election_port: port("election port", election)?,
            observer,
            client,
        })
    }

    /// `host:electionPort`.
    pub fn election_addr(&self) -> String {
        join_host_port(&self.host, self.election_port)
    }

    /// The `host:port` pairs this member listens on, for the duplicate check: its quorum
    /// and election ports, and its client port on `clientHost` (or, without one, on its
    /// host: two members on one host cannot share a client port either).
    pub(crate) fn addresses(&self) -> Vec<(String, u16)> {
        let host = self.host.to_ascii_lowercase();
        let mut out = vec![
            (host.clone(), self.quorum_port),
            (host.clone(), self.election_port),
        ];
        if let Some((client_host, p)) = &self.client {
            let h = client_host
                .as_ref()
                .map_or(host, |h| h.to_ascii_lowercase());
            out.push((h, *p));
        }
        out
    }
}

pub(super) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The value of a `server.N` line, as ZooKeeper's `conf` prints it:
/// `host:quorumPort:electionPort:participant[;[clientHost:]clientPort]`.
impl fmt::Display for MemberSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = if self.observer {
            "observer"
        } else {
            "participant"
        };
        write!(f, "{}:{}:{role}", self.quorum_addr(), self.election_port)?;
        match &self.client {
            Some((Some(h), p)) => write!(f, ";{}", join_host_port(h, *p)),
            Some((None, p)) => write!(f, ";{p}"),
            None => Ok(()),
        }
    }
}

/// `N=host:quorumPort:electionPort[...]`: the `--server` flag.
impl FromStr for MemberSpec {
    type Err = MemberSyntax;

    fn from_str(s: &str) -> Result<MemberSpec, MemberSyntax> {
        let (id, value) = s.split_once('=').ok_or(MemberSyntax::FlagForm)?;
        MemberSpec::parse(id, value)
    }
}
