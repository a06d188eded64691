//! A JSON Web Token (RFC 7519) in its compact form: the header and claims decoded, the signed
//! part kept for the signature check. Only the asymmetric algorithms identity providers sign
//! access tokens with are taken (RS256/384/512, ES256/384): `none` and the HMAC ones are refused,
//! so a published key can never be used as a shared secret.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Deserialize;

/// The longest token read: Entra ID's access tokens are 1–3 KiB; the bound keeps decoding a
/// hostile header cheap.
pub(super) const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// A signature algorithm a token may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Algorithm {
    Rs256,
    Rs384,
    Rs512,
    Es256,
    Es384,
}

impl Algorithm {
    /// The algorithm JOSE names `name`, if it is one taken here.
    pub(super) fn parse(name: &str) -> Option<Algorithm> {
        Some(match name {
            "RS256" => Algorithm::Rs256,
            "RS384" => Algorithm::Rs384,
            "RS512" => Algorithm::Rs512,
            "ES256" => Algorithm::Es256,
            "ES384" => Algorithm::Es384,
            _ => return None,
        })
    }
}

/// A decoded token whose signature is still to be checked.
#[derive(Debug)]
pub(super) struct Token<'a> {
    pub(super) alg: Algorithm,
    pub(super) kid: Option<String>,
    pub(super) claims: Claims,
    /// `header.payload`, as signed.
    pub(super) signed: &'a [u8],
    pub(super) signature: Vec<u8>,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
    /// Extensions the token says must be understood: none are, so any is refused.
    crit: Option<serde_json::Value>,
}

/// The claims this server reads; others are ignored.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Claims {
    pub(super) iss: Option<String>,
    #[serde(default)]
    pub(super) aud: Audience,
    pub(super) exp: Option<f64>,
    pub(super) nbf: Option<f64>,
    #[serde(default)]
    pub(super) roles: Vec<String>,
}

/// `aud`: one string or several.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
pub(super) enum Audience {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl Audience {
    pub(super) fn contains_any(&self, accepted: &[String]) -> bool {
        match self {
            Audience::None => false,
            Audience::One(one) => accepted.contains(one),
            Audience::Many(many) => many.iter().any(|aud| accepted.contains(aud)),
        }
    }
}

/// Whether `credential` has a JWT's shape: three base64url parts, the first a JSON object
/// (`eyJ` is `{"` encoded). Trestle's own tokens and account keys never do.
pub(super) fn looks_like_jwt(credential: &str) -> bool {
    credential.starts_with("eyJ") && credential.split('.').count() == 3
}

/// Decodes `token`, or says why it is not one this server takes.
pub(super) fn decode(token: &str) -> Result<Token<'_>, String> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(format!("the token is over {MAX_TOKEN_BYTES} bytes"));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a JWT has three parts separated by `.`".to_owned());
    };
    let part = |text: &str, what: &str| {
        URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| format!("the token's {what} is not base64url"))
    };
    let header: Header = serde_json::from_slice(&part(header, "header")?)
        .map_err(|e| format!("the token's header is not a JOSE header: {e}"))?;
    let alg = Algorithm::parse(&header.alg).ok_or_else(|| {
        format!(
            "the token is signed with {:?}; RS256, RS384, RS512, ES256 and ES384 are taken",
            header.alg
        )
    })?;
    if header.crit.is_some() {
        return Err("the token's header has critical extensions (`crit`)".to_owned());
    }
    let claims: Claims = serde_json::from_slice(&part(payload, "payload")?)
        .map_err(|e| format!("the token's claims are not a JWT claims set: {e}"))?;
    let signed_len = token.len() - signature.len() - 1;
    Ok(Token {
        alg,
        kid: header.kid,
        claims,
        signed: &token.as_bytes()[..signed_len],
        signature: part(signature, "signature")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(json: &str) -> String {
        URL_SAFE_NO_PAD.encode(json)
    }

    #[test]
    fn unsigned_and_hmac_tokens_are_refused_before_any_key_is_looked_at() {
        for alg in ["none", "HS256", "rs256"] {
            let token = format!(
                "{}.{}.",
                encode(&format!(r#"{{"alg":"{alg}"}}"#)),
                encode("{}")
            );
            assert!(looks_like_jwt(&token));
            let error = decode(&token).unwrap_err();
            assert!(error.contains("is signed with"), "{error}");
        }
    }

    #[test]
    fn the_signed_part_is_header_and_payload() {
        let token = format!(
            "{}.{}.{}",
            encode(r#"{"alg":"ES256","kid":"k"}"#),
            encode(r#"{"aud":["a","b"],"exp":1.5,"roles":["r"]}"#),
            encode("sig")
        );
        let decoded = decode(&token).unwrap();
        assert_eq!(decoded.kid.as_deref(), Some("k"));
        assert_eq!(decoded.signature, b"sig");
        assert!(token.starts_with(std::str::from_utf8(decoded.signed).unwrap()));
        assert!(decoded.claims.aud.contains_any(&["b".to_owned()]));
        assert_eq!(decoded.claims.exp, Some(1.5));
    }

    #[test]
    fn critical_extensions_and_extra_parts_are_refused() {
        let crit = format!(
            "{}.{}.{}",
            encode(r#"{"alg":"RS256","crit":["b64"]}"#),
            encode("{}"),
            encode("s")
        );
        assert!(decode(&crit).unwrap_err().contains("crit"));
        assert!(decode("eyJ.a.b.c").is_err());
    }
}
