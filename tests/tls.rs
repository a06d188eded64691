//! TLS with rustls: a certificate made at test time (rcgen) by a throwaway CA; the SDK connects with
//! `https://` and that CA, and refuses a server it cannot verify.

mod common;

use common::tls::{certificates, Certificates};
use common::TestServer;
use trestle_client::{Client, ErrorKind, Properties};

async fn tls_server(certificates: &Certificates) -> TestServer {
    let identity = certificates.identity.clone();
    TestServer::start_with(move |config| config.tls = Some(identity)).await
}

#[tokio::test]
async fn the_sdk_talks_tls_with_the_servers_ca() {
    let certificates = certificates();
    let server = tls_server(&certificates).await;
    let client = Client::builder()
        .endpoint(format!("https://{}", server.addr))
        .ca_certificate(certificates.ca_pem.clone())
        .tls_domain("localhost")
        .connect()
        .await
        .unwrap();
    let table = client.table("Secure");
    table.create().await.unwrap();
    let row = Properties::new().with("Note", "over TLS");
    table.insert(("p", "r"), &row).await.unwrap();
    let read = table.get::<Properties>(("p", "r")).await.unwrap();
    assert_eq!(read.value.get_str("Note"), Some("over TLS"));

    let ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca_file.path(), &certificates.ca_pem).unwrap();
    let from_file = Client::builder()
        .endpoint(format!("https://{}", server.addr))
        .ca_file(ca_file.path())
        .tls_domain("localhost")
        .connect()
        .await
        .unwrap();
    assert_eq!(from_file.list_tables("").await.unwrap(), ["Secure"]);
}

#[tokio::test]
async fn unverifiable_or_plaintext_connections_fail() {
    let certificates = certificates();
    let server = tls_server(&certificates).await;
    /// Lists tables through `builder`, connecting first.
    async fn list_through(
        builder: trestle_client::ClientBuilder,
    ) -> trestle_client::Result<Vec<String>> {
        builder.connect().await?.list_tables("").await
    }
    let https = || Client::builder().endpoint(format!("https://{}", server.addr));
    // The system roots do not know the throwaway CA.
    let untrusted = list_through(https().tls_domain("localhost"));
    assert_eq!(untrusted.await.unwrap_err().kind(), ErrorKind::Unavailable);
    // The certificate names localhost, not another host.
    let wrong_name = list_through(
        https()
            .ca_certificate(certificates.ca_pem.clone())
            .tls_domain("example.com"),
    );
    assert_eq!(wrong_name.await.unwrap_err().kind(), ErrorKind::Unavailable);
    let plaintext = list_through(Client::builder().endpoint(server.endpoint()));
    assert!(plaintext.await.is_err(), "plaintext reached a TLS server");
}
