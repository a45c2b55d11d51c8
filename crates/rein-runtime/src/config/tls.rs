//! The listener's TLS files (`server.tls`): the certificate chain and key read from PEM and
//! checked once per config (at start and at each reload), by its validation, so a reload that
//! names a broken pair is refused by key and the gateway serves the pair it read.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::ConfigProblem;

/// The crypto the listener's TLS uses (the same as the providers' client).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Read and check the PEM files: a chain with at least one certificate, a private key, and
/// the key matching the leaf. Errors name the key of the file that is wrong. Read once per
/// config (at start and at each reload), by its validation.
pub(crate) fn load(cert_path: &str, key_path: &str) -> Result<Arc<CertifiedKey>, ConfigProblem> {
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
