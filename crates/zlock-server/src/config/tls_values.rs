//! The values the TLS keys take, client port and quorum alike: protocols, suites,
//! switches, and the defaults ZooKeeper gives them. Parsers only: which key takes which
//! value is [`super::tls`]'s and [`super::quorum_tls`]'s.

/// The TLS 1.3 and 1.2 suites zlock offers (rustls's, with the ring provider), by the
/// IANA names Java's `ssl.ciphersuites` uses. `crate::tls` maps each to rustls's suite.
pub const CIPHER_SUITES: [&str; 9] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
];

/// ZooKeeper's default `ssl.handshakeDetectionTimeoutMillis`.
pub(super) const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 5000;

/// A TLS protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tls12,
    Tls13,
}

/// `TLSv1.2`, `TLSv1.3`, or `TLS` (both) as Java names them.
pub(super) fn protocols(v: &str) -> Result<Vec<Protocol>, String> {
    let mut out = Vec::new();
    for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let p: &[Protocol] = match name {
            "TLSv1.3" => &[Protocol::Tls13],
            "TLSv1.2" => &[Protocol::Tls12],
            "TLS" => &[Protocol::Tls13, Protocol::Tls12],
            _ => {
                return Err(format!(
                    "{name} is not offered: zlock speaks TLSv1.2 and TLSv1.3 only"
                ))
            }
        };
        for p in p {
            if !out.contains(p) {
                out.push(*p);
            }
        }
    }
    if out.is_empty() {
        return Err("no protocol given".into());
    }
    Ok(out)
}

/// `true` or `false`, in any case, as Java's `Boolean.parseBoolean` reads a switch
/// (but anything else is refused, not read as false).
pub(super) fn boolean(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

/// A switch zlock accepts only off: `false` is accepted (it asks for nothing), `true`
/// is refused with `why`.
pub(super) fn only_off(v: &str, why: &str) -> Result<(), String> {
    match boolean(v)? {
        false => Ok(()),
        true => Err(why.to_owned()),
    }
}

/// `v` as a list of suite names from [`CIPHER_SUITES`].
pub(super) fn suites(v: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !CIPHER_SUITES.contains(&name) {
            return Err(format!(
                "{name} is not a suite zlock offers; it has {}",
                CIPHER_SUITES.join(", ")
            ));
        }
        out.push(name.to_owned());
    }
    if out.is_empty() {
        return Err("no cipher suite given".into());
    }
    Ok(out)
}

/// That every enabled protocol has a suite among `suites` (none given: rustls's, which
/// has suites for both); `Err`: an enabled protocol with none.
pub(super) fn check_suites(protocols: &[Protocol], suites: &[String]) -> Result<(), Protocol> {
    if suites.is_empty() {
        return Ok(());
    }
    let tls13 = |s: &String| !s.starts_with("TLS_ECDHE_");
    for p in protocols {
        let any = match p {
            Protocol::Tls13 => suites.iter().any(tls13),
            Protocol::Tls12 => suites.iter().any(|s| !tls13(s)),
        };
        if !any {
            return Err(*p);
        }
    }
    Ok(())
}
