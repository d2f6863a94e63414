//! A client certificate's subject as ZooKeeper's `X509AuthenticationProvider` names it:
//! Java's `X509Certificate.getSubjectX500Principal().getName()`, the RFC 2253 form
//! (`sun.security.x509.X500Name.getRFC2253Name`, `AVA.toRFC2253String`).
//!
//! What Java does, and so what this does:
//! - RDNs in reverse of their order in the certificate (the most specific first), joined
//!   by `,` with no space; the values of a multi-valued RDN joined by `+`, in the order
//!   encoded.
//! - Attribute types RFC 2253 names get their keyword (CN, C, L, ST, O, OU, STREET, DC,
//!   UID); any other type is its dotted OID (`1.2.840.113549.1.9.1` for emailAddress),
//!   and then its value is `#` and the hex of its DER encoding, as for a value that is not
//!   one of Java's string types (PrintableString, T61String, IA5String, GeneralString,
//!   UTF8String, BMPString).
//! - In a string value, each of `, = + < > # ; " \` is escaped with a backslash wherever
//!   it is, a NUL is `\00`, and leading or trailing spaces (and CRs) are escaped; other
//!   characters, non-ASCII ones included, are kept as they are.

use x509_parser::asn1_rs::{Tag, ToDer};
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::AttributeTypeAndValue;

/// The subject of a DER certificate in Java's RFC 2253 form; `None` if it does not
/// parse (the handshake already checked it, so this is not expected).
pub(crate) fn subject_name(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let rdns: Vec<String> = cert
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(ava)
                .collect::<Option<Vec<_>>>()
                .map(|v| v.join("+"))
        })
        .collect::<Option<_>>()?;
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// RFC 2253's keywords, as Java's `AVAKeyword` marks them.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn ava(a: &AttributeTypeAndValue<'_>) -> Option<String> {
    let oid = a.attr_type().to_id_string();
    let value = a.attr_value();
    let text = match keyword(&oid) {
        Some(_) => string_value(value.tag(), value.data),
        None => None,
    };
    Some(match (keyword(&oid), text) {
        (Some(k), Some(s)) => format!("{k}={}", escape(&s)),
        (k, _) => {
            let der = value.to_der_vec().ok()?;
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{}=#{hex}", k.unwrap_or(&oid))
        }
    })
}

/// The value as text, for Java's string types.
fn string_value(tag: Tag, data: &[u8]) -> Option<String> {
    match tag {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::GeneralString => {
            String::from_utf8(data.to_vec()).ok()
        }
        // Java reads a T61String as ISO-8859-1.
        Tag::T61String => Some(data.iter().map(|&b| char::from(b)).collect()),
        Tag::BmpString => {
            let units: Vec<u16> = data
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

fn escape(s: &str) -> String {
    let mut out: Vec<(bool, String)> = Vec::with_capacity(s.len());
    for c in s.chars() {
        out.push(match c {
            ',' | '=' | '+' | '<' | '>' | '#' | ';' | '"' | '\\' => (true, format!("\\{c}")),
            '\0' => (true, "\\00".into()),
            c => (false, c.to_string()),
        });
    }
    let blank = |p: &(bool, String)| !p.0 && (p.1 == " " || p.1 == "\r");
    let lead = out.iter().take_while(|p| blank(p)).count();
    let trail = out.iter().rev().take_while(|p| blank(p)).count();
    let n = out.len();
    out.into_iter()
        .enumerate()
        .map(|(i, (_, s))| {
            if i < lead || i >= n - trail {
                format!("\\{s}")
            } else {
                s
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    fn cert(dn: &[(DnType, &str)]) -> Vec<u8> {
        let mut p = CertificateParams::default();
        let mut name = DistinguishedName::new();
        for (t, v) in dn {
            name.push(t.clone(), *v);
        }
        p.distinguished_name = name;
        let key = KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn most_specific_first_no_spaces() {
        let der = cert(&[
            (DnType::CountryName, "DE"),
            (DnType::OrganizationName, "zlock"),
            (DnType::CommonName, "alice"),
        ]);
        assert_eq!(subject_name(&der).unwrap(), "CN=alice,O=zlock,C=DE");
    }

    #[test]
    fn specials_are_escaped_as_java_does() {
        let der = cert(&[(DnType::CommonName, " a,b=c+d#e;\"f\\ ")]);
        assert_eq!(
            subject_name(&der).unwrap(),
            r#"CN=\ a\,b\=c\+d\#e\;\"f\\\ "#
        );
    }

    #[test]
    fn types_without_a_keyword_are_oids_with_hex_values() {
        let der = cert(&[
            (
                DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]),
                "a@b",
            ),
            (DnType::CommonName, "alice"),
        ]);
        // rcgen writes a custom type's value as a UTF8String (tag 0x0c).
        assert_eq!(
            subject_name(&der).unwrap(),
            "CN=alice,1.2.840.113549.1.9.1=#0c03614062"
        );
    }
}
