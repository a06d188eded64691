//! A JSON Web Key Set (RFC 7517) of an identity provider's public signing keys, as its `jwks_uri`
//! serves it: RSA keys (`n`, `e`) and elliptic-curve keys on P-256 or P-384 (`x`, `y`). Keys
//! of other types, or for encryption (`"use": "enc"`), are skipped, as the RFC asks; a set with no
//! usable key is refused, so a misconfigured server fails at start rather than on every request.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;

use super::jwt::Algorithm;

/// The most keys a set may hold: Entra ID publishes a handful; a set of thousands would make
/// every token without a `kid` cost thousands of signature checks.
pub(super) const MAX_KEYS: usize = 64;

/// One usable public key.
#[derive(Debug, Clone)]
struct Key {
    kid: Option<String>,
    /// The algorithm the key is for, when the set says (`alg`).
    alg: Option<Algorithm>,
    material: Material,
}

#[derive(Debug, Clone)]
enum Material {
    /// An RSA modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed elliptic-curve point (`04 ‖ x ‖ y`).
    Ec { curve: Curve, point: Vec<u8> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
}

/// The keys tokens may be signed with.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

/// Why a key set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the JSON Web Key Set {0}")]
pub struct JwksError(String);

impl JwksError {
    /// The set at `source` could not be read for `why`.
    pub(super) fn at(source: &super::JwksSource, why: impl std::fmt::Display) -> JwksError {
        JwksError(format!("at {source}: {why}"))
    }
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mismatch {
    /// No key of the set has the token's `kid` (or, without one, suits its algorithm).
    UnknownKey,
    /// A key was found and the signature is not its.
    BadSignature,
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl KeySet {
    /// Parses a JWKS document.
    pub fn parse(json: &[u8]) -> Result<KeySet, JwksError> {
        let set: JwkSet = serde_json::from_slice(json)
            .map_err(|e| JwksError(format!("is not a {{\"keys\": [...]}} document: {e}")))?;
        let mut keys = Vec::new();
        for jwk in set.keys {
            if jwk.usage.as_deref().is_some_and(|usage| usage != "sig") {
                continue;
            }
            if let Some(key) = Key::of(jwk)? {
                keys.push(key);
            }
        }
        if keys.is_empty() {
            return Err(JwksError(
                "has no RSA or P-256/P-384 signing key".to_owned(),
            ));
        }
        if keys.len() > MAX_KEYS {
            return Err(JwksError(format!(
                "has {} keys; at most {MAX_KEYS} are taken",
                keys.len()
            )));
        }
        Ok(KeySet { keys })
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set is empty (before its first fetch).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Checks `signature` over `message` with the key named `kid` (any key suiting `alg` if the
    /// token names none).
    pub(super) fn verify(
        &self,
        alg: Algorithm,
        kid: Option<&str>,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), Mismatch> {
        let mut candidates = self
            .keys
            .iter()
            .filter(|key| kid.is_none() || key.kid.as_deref() == kid)
            .filter(|key| key.alg.is_none_or(|named| named == alg))
            .filter(|key| key.suits(alg))
            .peekable();
        if candidates.peek().is_none() {
            return Err(Mismatch::UnknownKey);
        }
        if candidates.any(|key| key.verifies(alg, message, signature)) {
            Ok(())
        } else {
            Err(Mismatch::BadSignature)
        }
    }
}

impl Key {
    /// The key `jwk` describes, or `None` for a type this server does not verify with.
    fn of(jwk: Jwk) -> Result<Option<Key>, JwksError> {
        let named = |field: &str| format!("key {:?}", jwk.kid.as_deref().unwrap_or("")) + field;
        let decode = |value: &Option<String>, field: &str| -> Result<Vec<u8>, JwksError> {
            let text = value
                .as_deref()
                .ok_or_else(|| JwksError(format!("{} has no `{field}`", named(""))))?;
            URL_SAFE_NO_PAD
                .decode(text.trim_end_matches('='))
                .map_err(|_| JwksError(format!("{}'s `{field}` is not base64url", named(""))))
        };
        let alg = match jwk.alg.as_deref() {
            None => None,
            Some(name) => match Algorithm::parse(name) {
                Some(alg) => Some(alg),
                None => return Ok(None),
            },
        };
        let material = match jwk.kty.as_str() {
            "RSA" => Material::Rsa {
                n: decode(&jwk.n, "n")?,
                e: decode(&jwk.e, "e")?,
            },
            "EC" => {
                let (curve, width) = match jwk.crv.as_deref() {
                    Some("P-256") => (Curve::P256, 32),
                    Some("P-384") => (Curve::P384, 48),
                    _ => return Ok(None),
                };
                let (x, y) = (decode(&jwk.x, "x")?, decode(&jwk.y, "y")?);
                if x.len() != width || y.len() != width {
                    return Err(JwksError(format!(
                        "{}'s coordinates are not {width} bytes",
                        named("")
                    )));
                }
                let mut point = Vec::with_capacity(1 + 2 * width);
                point.push(4);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                Material::Ec { curve, point }
            }
            _ => return Ok(None),
        };
        Ok(Some(Key {
            kid: jwk.kid,
            alg,
            material,
        }))
    }

    fn suits(&self, alg: Algorithm) -> bool {
        match (&self.material, alg) {
            (Material::Rsa { .. }, Algorithm::Rs256 | Algorithm::Rs384 | Algorithm::Rs512) => true,
            (Material::Ec { curve, .. }, Algorithm::Es256) => *curve == Curve::P256,
            (Material::Ec { curve, .. }, Algorithm::Es384) => *curve == Curve::P384,
            _ => false,
        }
    }

    fn verifies(&self, alg: Algorithm, message: &[u8], signature: &[u8]) -> bool {
        match &self.material {
            Material::Rsa { n, e } => {
                let parameters = match alg {
                    Algorithm::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    Algorithm::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    Algorithm::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                    Algorithm::Es256 | Algorithm::Es384 => return false,
                };
                RsaPublicKeyComponents { n, e }
                    .verify(parameters, message, signature)
                    .is_ok()
            }
            Material::Ec { point, .. } => {
                let algorithm = match alg {
                    Algorithm::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
                    Algorithm::Es384 => &signature::ECDSA_P384_SHA384_FIXED,
                    Algorithm::Rs256 | Algorithm::Rs384 | Algorithm::Rs512 => return false,
                };
                UnparsedPublicKey::new(algorithm, point)
                    .verify(message, signature)
                    .is_ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_without_a_usable_key_is_refused_and_foreign_keys_are_skipped() {
        let only_foreign = br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"},
            {"kty":"RSA","use":"enc","n":"AQAB","e":"AQAB"}]}"#;
        assert!(KeySet::parse(only_foreign).is_err());
        assert!(KeySet::parse(b"[]").is_err());
        let mixed = br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"},{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}"#;
        assert_eq!(KeySet::parse(mixed).unwrap().len(), 1);
    }

    #[test]
    fn an_ec_key_with_short_coordinates_is_refused() {
        let short = br#"{"keys":[{"kty":"EC","crv":"P-256","x":"AQAB","y":"AQAB"}]}"#;
        assert!(KeySet::parse(short).is_err());
    }
}
