//! Throwaway certificates, made with rcgen: a self-signed CA and the certificates it
//! signs. For trying TLS on one machine (`zlock ensemble --tls`) and for tests; never
//! read by the server itself.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// A CA that signs [`leaf`] certificates.
pub type Issuer = CertifiedIssuer<'static, KeyPair>;

/// The subject `CN=<cn>,O=<org>` (Java's form of it: most specific first).
pub fn subject(org: &str, cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, org);
    dn.push(DnType::CommonName, cn);
    dn
}

/// A self-signed CA named `subject`.
pub fn ca(subject: DistinguishedName) -> Result<Issuer, rcgen::Error> {
    let mut p = CertificateParams::default();
    p.distinguished_name = subject;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(p, KeyPair::generate()?)
}

/// A certificate `issuer` signs for `subject`, valid for `names` (DNS names or IP
/// addresses; none for a client's) and `usage`: the certificate and its key.
pub fn leaf(
    issuer: &Issuer,
    subject: DistinguishedName,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> Result<(rcgen::Certificate, KeyPair), rcgen::Error> {
    signed(issuer, subject, names, vec![usage])
}

/// An ensemble member's certificate (`ssl.quorum.keyStore`): for `names`, and for both
/// ends of a link, since a member dials the others (a TLS client) and is dialled (a
/// server).
pub fn member(
    issuer: &Issuer,
    subject: DistinguishedName,
    names: &[&str],
) -> Result<(rcgen::Certificate, KeyPair), rcgen::Error> {
    use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    signed(issuer, subject, names, vec![ServerAuth, ClientAuth])
}

fn signed(
    issuer: &Issuer,
    subject: DistinguishedName,
    names: &[&str],
    usages: Vec<ExtendedKeyUsagePurpose>,
) -> Result<(rcgen::Certificate, KeyPair), rcgen::Error> {
    let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    p.distinguished_name = subject;
    p.extended_key_usages = usages;
    let key = KeyPair::generate()?;
    Ok((p.signed_by(&key, issuer)?, key))
}
