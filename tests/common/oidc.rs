//! An OAuth identity provider made at test time: an RSA key (made by `openssl`: ring signs with
//! RSA but cannot generate a key) and a P-256 key, their JSON Web Key Set, and the tokens (JWTs)
//! they sign with the claims a test asks for.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair, RsaPublicKeyComponents};
use serde_json::{json, Value};
use trestle_server::oidc::{JwksSource, Oidc, OidcSettings};

/// The issuer the provider's tokens name.
pub const ISSUER: &str =
    "https://login.microsoftonline.com/00000000-0000-0000-0000-00000000cafe/v2.0";
/// The audience the Azure SDKs ask tokens for.
pub const AUDIENCE: &str = "https://storage.azure.com";

/// The key a token is signed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signer {
    /// RS256, key id `rsa-<generation>` (what Entra ID signs with).
    Rsa,
    /// ES256, key id `ec-<generation>`.
    Ec,
}

pub struct Provider {
    rsa: RsaKeyPair,
    ec: EcdsaKeyPair,
    rng: SystemRandom,
    /// Told apart in key ids: the keys a provider rolls over to are of the next generation.
    generation: u32,
}

impl Provider {
    /// A provider with keys of generation 1.
    pub fn new() -> Provider {
        Provider::of_generation(1)
    }

    /// A provider with new keys, named as generation `generation`.
    pub fn of_generation(generation: u32) -> Provider {
        let dir = tempfile::tempdir().unwrap();
        let der = dir.path().join("rsa.der");
        let made = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .args(["-outform", "DER", "-out"])
            .arg(&der)
            .output()
            .expect("openssl makes the provider's RSA key (apt-get install openssl)");
        assert!(made.status.success(), "{made:?}");
        // OpenSSL writes an RSAPrivateKey (PKCS#1) in DER.
        let rsa = RsaKeyPair::from_der(&std::fs::read(&der).unwrap()).unwrap();
        let rng = SystemRandom::new();
        let algorithm = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(algorithm, &rng).unwrap();
        let ec = EcdsaKeyPair::from_pkcs8(algorithm, pkcs8.as_ref(), &rng).unwrap();
        Provider {
            rsa,
            ec,
            rng,
            generation,
        }
    }

    /// The provider's key set, as its `jwks_uri` serves it.
    pub fn jwks(&self) -> String {
        let rsa = RsaPublicKeyComponents::<Vec<u8>>::from(self.rsa.public());
        let point = self.ec.public_key().as_ref();
        json!({"keys": [
            {"kty": "RSA", "use": "sig", "kid": self.kid(Signer::Rsa), "alg": "RS256",
             "n": URL_SAFE_NO_PAD.encode(&rsa.n), "e": URL_SAFE_NO_PAD.encode(&rsa.e)},
            {"kty": "EC", "use": "sig", "kid": self.kid(Signer::Ec), "crv": "P-256",
             "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..])},
        ]})
        .to_string()
    }

    /// Settings that take this provider's tokens, its key set in `jwks_file`.
    pub fn settings(&self, jwks_file: &std::path::Path) -> OidcSettings {
        std::fs::write(jwks_file, self.jwks()).unwrap();
        OidcSettings {
            jwks: JwksSource::File(jwks_file.to_owned()),
            issuers: vec![ISSUER.to_owned()],
            audiences: trestle_server::oidc::DEFAULT_AUDIENCES
                .map(str::to_owned)
                .to_vec(),
            roles: trestle_server::oidc::azure_roles(),
            refresh: trestle_server::oidc::DEFAULT_REFRESH,
        }
    }

    /// A validator of this provider's tokens (its key set in `jwks_file`).
    pub fn validator(&self, jwks_file: &std::path::Path) -> Oidc {
        Oidc::new(self.settings(jwks_file)).unwrap()
    }

    /// Claims of a valid token for Azure Storage with `roles`, for an hour.
    pub fn claims(roles: &[&str]) -> Value {
        let now = now();
        json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "test-user", "oid": "test-user",
            "iat": now, "nbf": now - 10, "exp": now + 3600, "roles": roles,
        })
    }

    /// A token of `claims` signed by `signer`.
    pub fn token(&self, signer: Signer, claims: &Value) -> String {
        let alg = match signer {
            Signer::Rsa => "RS256",
            Signer::Ec => "ES256",
        };
        let kid = self.kid(signer);
        self.token_with_header(
            signer,
            &json!({"alg": alg, "kid": kid, "typ": "JWT"}),
            claims,
        )
    }

    /// The id of `signer`'s key.
    pub fn kid(&self, signer: Signer) -> String {
        match signer {
            Signer::Rsa => format!("rsa-{}", self.generation),
            Signer::Ec => format!("ec-{}", self.generation),
        }
    }

    /// A token of `claims` under `header`, signed by `signer`'s key whatever the header says.
    pub fn token_with_header(&self, signer: Signer, header: &Value, claims: &Value) -> String {
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = match signer {
            Signer::Rsa => {
                let mut signature = vec![0; self.rsa.public().modulus_len()];
                self.rsa
                    .sign(
                        &signature::RSA_PKCS1_SHA256,
                        &self.rng,
                        signed.as_bytes(),
                        &mut signature,
                    )
                    .unwrap();
                signature
            }
            Signer::Ec => self
                .ec
                .sign(&self.rng, signed.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec(),
        };
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
    }
}

/// Unix seconds now.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}
