//! TLS on the listener: the key pair the config read from its PEM files (`server.tls`), served
//! through a resolver whose pair a reload swaps, so a renewed certificate takes effect without a
//! restart and handshakes in progress keep the pair they started with.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The crypto the listener's TLS uses (the same as the providers' client).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The key pair in force; [`CertResolver::replace`] swaps it on reload.
#[derive(Debug)]
pub(crate) struct CertResolver(ArcSwap<CertifiedKey>);

impl CertResolver {
    pub(crate) fn new(key: Arc<CertifiedKey>) -> Arc<Self> {
        Arc::new(Self(ArcSwap::new(key)))
    }

    pub(crate) fn replace(&self, key: Arc<CertifiedKey>) {
        self.0.store(key);
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// The acceptor for the listener: TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN.
pub(crate) fn acceptor(
    resolver: Arc<CertResolver>,
) -> Result<tokio_rustls::TlsAcceptor, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
