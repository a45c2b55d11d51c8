//! TLS on the listener: the certificate chain and key from PEM files (`server.tls`), served
//! through a resolver whose key pair a reload swaps, so a renewed certificate takes effect
//! without a restart and handshakes in progress keep the pair they started with.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::config::ConfigProblem;

/// The crypto the listener's TLS uses (the same as the providers' client).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Read and check the PEM files: a chain with at least one certificate, a private key, and
/// the key matching the leaf. Errors name the key of the file that is wrong. Read once per
/// config (at start and at each reload), by its validation.
pub fn load(cert_path: &str, key_path: &str) -> Result<Arc<CertifiedKey>, ConfigProblem> {
    let problem =
        |key: &str, message: String| ConfigProblem { key: format!("server.tls.{key}"), message };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_path)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|error| {
            problem("cert_path", format!("cannot read certificates from `{}`: {error}", cert_path))
        })?;
    if certs.is_empty() {
        return Err(problem("cert_path", format!("`{}` holds no PEM certificate", cert_path)));
    }
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|error| {
        problem("key_path", format!("cannot read a private key from `{}`: {error}", key_path))
    })?;
    let certified = CertifiedKey::from_der(certs, key, &provider()).map_err(|error| {
        problem("key_path", format!("`{}` does not fit the certificate: {error}", key_path))
    })?;
    Ok(Arc::new(certified))
}

/// The key pair in force; [`CertResolver::replace`] swaps it on reload.
#[derive(Debug)]
pub struct CertResolver(ArcSwap<CertifiedKey>);

impl CertResolver {
    pub fn new(key: Arc<CertifiedKey>) -> Arc<Self> {
        Arc::new(Self(ArcSwap::new(key)))
    }

    pub fn replace(&self, key: Arc<CertifiedKey>) {
        self.0.store(key);
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// The acceptor for the listener: TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN.
pub fn acceptor(resolver: Arc<CertResolver>) -> Result<tokio_rustls::TlsAcceptor, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
