//! Certificates made at test time (rcgen): a throwaway CA and a certificate for `localhost`
//! signed by it, for the servers' TLS (gRPC's and the REST endpoint's).

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use trestle_server::config::TlsIdentity;

/// The CA's certificate (PEM) and the server's identity it signed.
pub struct Certificates {
    pub ca_pem: String,
    pub identity: TlsIdentity,
}

/// A new CA and a server certificate for `localhost`.
pub fn certificates() -> Certificates {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    // Names of their own: OpenSSL (Python's, Node's) takes a certificate whose subject is its
    // issuer's for a self-signed one, and rcgen names both alike by default.
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Trestle test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let mut server_params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    server_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server_cert = server_params.signed_by(&server_key, &ca).unwrap();
    Certificates {
        ca_pem: ca.pem(),
        identity: TlsIdentity {
            cert_pem: server_cert.pem().into_bytes(),
            key_pem: server_key.serialize_pem().into_bytes(),
        },
    }
}
