//! TLS between members (`sslQuorum`): the rustls configurations a member accepts and
//! dials other members with, from the `ssl.quorum.*` keys
//! ([`crate::config::QuorumTls`] and the quorum stores). Both sides are mutual, as
//! ZooKeeper's quorum TLS: the accepting member requires a certificate from the dialling
//! one, and each checks the other's against its `ssl.quorum.trustStore`.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::{build, stores, versions, Side, TlsError};
use crate::config::{location_key, ClientAuth, Store, TlsConfig};

/// What an accepting member is set up with: its key store, a certificate required of
/// the dialling member and checked against the trust store.
pub(crate) fn server_config(cfg: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    build(&Side {
        key: (Store::QuorumKey, &cfg.quorum_key_store),
        trust: (Store::QuorumTrust, &cfg.quorum_trust_store),
        client_auth: ClientAuth::Need,
        protocols: &cfg.quorum.protocols,
        cipher_suites: &cfg.quorum.cipher_suites,
    })
}

/// What a dialling member is set up with: its key store presented, the dialled member's
/// certificate checked against the trust store, and against the host it was dialled at
/// unless `ssl.quorum.hostnameVerification=false`.
pub(crate) fn client_config(cfg: &TlsConfig) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let q = &cfg.quorum;
    let crypto = Arc::new(super::crypto(&q.cipher_suites));
    let mut roots = RootCertStore::empty();
    for c in stores::trusted(Store::QuorumTrust, &cfg.quorum_trust_store)? {
        roots.add(c).map_err(|source| TlsError::Rustls {
            key: location_key(Store::QuorumTrust),
            source,
        })?;
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), crypto.clone())
        .build()
        .map_err(|e| TlsError::Rustls {
            key: location_key(Store::QuorumTrust),
            source: rustls::Error::General(e.to_string()),
        })?;
    let verifier: Arc<dyn ServerCertVerifier> = match q.hostname_verification {
        true => webpki,
        false => Arc::new(AnyName(webpki)),
    };
    let id = stores::identity(Store::QuorumKey, &cfg.quorum_key_store)?;
    let config = rustls::ClientConfig::builder_with_provider(crypto)
        .with_protocol_versions(&versions(&q.protocols))
        .map_err(|source| TlsError::Rustls {
            key: "ssl.quorum.ciphersuites",
            source,
        })?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(id.chain, id.key)
        .map_err(|source| TlsError::Rustls {
            key: location_key(Store::QuorumKey),
            source,
        })?;
    Ok(Arc::new(config))
}

/// `ssl.quorum.hostnameVerification=false`: the dialled member's certificate must still
/// chain to the trust store, whatever names it is for. rustls's verifier checks the
/// chain before the name, so its "not valid for this name" means the chain was good.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
