//! TLS to the database with rustls (the stack the gRPC side uses). Used when the URL asks for it
//! (`sslmode=require`); the database's certificate is then always verified, against the CA file
//! given (`--store-ca-file`) or else the system's roots, and its name against the host the URL
//! names. (`sslmode=prefer`, libpq's default, connects without TLS: an unverified encryption
//! would only look safe.)

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use postgres::Socket;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::storage::StorageError;

/// Makes verified TLS connections to the database.
#[derive(Clone)]
pub(super) struct Rustls {
    config: Arc<rustls::ClientConfig>,
}

impl Rustls {
    /// Trusting the certificates of `ca_pem`, or the system's roots if `None`.
    pub(super) fn trusting(ca_pem: Option<&[u8]>) -> Result<Rustls, StorageError> {
        let invalid =
            |what: String| StorageError::Io(io::Error::new(io::ErrorKind::InvalidData, what));
        let mut roots = rustls::RootCertStore::empty();
        match ca_pem {
            Some(pem) => {
                for certificate in CertificateDer::pem_slice_iter(pem) {
                    let certificate = certificate
                        .map_err(|error| invalid(format!("the database's CA file: {error}")))?;
                    roots
                        .add(certificate)
                        .map_err(|error| invalid(format!("the database's CA file: {error}")))?;
                }
                if roots.is_empty() {
                    return Err(invalid(
                        "the database's CA file holds no certificate".into(),
                    ));
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| invalid(format!("TLS to the database: {error}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Rustls {
            config: Arc::new(config),
        })
    }
}

impl MakeTlsConnect<Socket> for Rustls {
    type Stream = Stream;
    type TlsConnect = Connect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<Connect, Self::Error> {
        Ok(Connect {
            config: self.config.clone(),
            name: ServerName::try_from(host.to_owned())?,
        })
    }
}

/// One connection's handshake, verifying `name`.
pub(super) struct Connect {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for Connect {
    type Stream = Stream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream>> + Send>>;

    fn connect(self, socket: Socket) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move { Ok(Stream(connector.connect(self.name, socket).await?)) })
    }
}

/// A TLS connection to the database.
pub(super) struct Stream(tokio_rustls::client::TlsStream<Socket>);

impl TlsStream for Stream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
