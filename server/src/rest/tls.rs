//! The REST endpoint over TLS (`--rest-tls-cert`, `--rest-tls-key`): the acceptor made from a PEM
//! certificate chain and key, offering HTTP/1.1, the protocol the Azure SDKs speak to it.

use std::io;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsIdentity;

/// The acceptor of `identity`, or why its certificate or key cannot serve.
pub(super) fn acceptor(identity: &TlsIdentity) -> io::Result<TlsAcceptor> {
    let invalid = |what: &str, error: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the REST endpoint's TLS {what} is invalid: {error}"),
        )
    };
    let chain = CertificateDer::pem_slice_iter(&identity.cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| invalid("certificate (--rest-tls-cert)", &error))?;
    if chain.is_empty() {
        return Err(invalid(
            "certificate (--rest-tls-cert)",
            &"no certificate in it",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&identity.key_pem)
        .map_err(|error| invalid("key (--rest-tls-key)", &error))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| invalid("configuration", &error))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|error| invalid("certificate and key", &error))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
