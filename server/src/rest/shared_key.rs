//! Azure's SharedKey and SharedKeyLite signatures of Table requests: the string the client
//! signed, rebuilt from the request, and its HMAC-SHA256 under one of the account's keys (the
//! development key in open mode, the key file's keys otherwise).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::HeaderMap;
use ring::hmac;
use trestle_proto::access::KeyRing;

use crate::auth::Authenticator;

/// The development account's well-known key (public: it protects nothing).
pub(crate) const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The keys requests to the account are signed with.
#[derive(Debug, Clone)]
pub(crate) enum AccountKeys {
    /// Open mode: the development account's well-known key.
    Development(hmac::Key),
    /// Keyed mode: every key of the key file (standard base64 of its secret is the `AccountKey`).
    Ring(KeyRing),
}

impl AccountKeys {
    /// The keys of a server authenticating with `authenticator`.
    pub(crate) fn of(authenticator: &Authenticator) -> AccountKeys {
        match authenticator.keys() {
            Some(ring) => AccountKeys::Ring(ring.clone()),
            None => {
                let key = STANDARD
                    .decode(DEV_KEY)
                    .expect("the development key is base64");
                AccountKeys::Development(hmac::Key::new(hmac::HMAC_SHA256, &key))
            }
        }
    }

    /// Whether `signature` (base64) is the HMAC-SHA256 of `message` under one of the keys.
    pub(crate) fn signed(&self, message: &[u8], signature: &str) -> bool {
        let Ok(signature) = STANDARD.decode(signature) else {
            return false;
        };
        match self {
            AccountKeys::Development(key) => hmac::verify(key, message, &signature).is_ok(),
            AccountKeys::Ring(ring) => ring.signed(message, &signature),
        }
    }
}

/// Whether `authorization` (`SharedKey account:signature` or `SharedKeyLite ...`) signs this
/// request with one of `keys` for `account`; `Err` says why not.
pub(crate) fn verify(
    authorization: &str,
    account: &str,
    keys: &AccountKeys,
    method: &str,
    raw_path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), String> {
    let (scheme, credential) = authorization
        .split_once(' ')
        .ok_or("the Authorization header is not `SharedKey <account>:<signature>`")?;
    let (signer, signature) = credential
        .split_once(':')
        .ok_or("the Authorization header has no `<account>:<signature>`")?;
    if signer != account {
        return Err(format!(
            "the request is signed for account {signer:?}, not {account:?}"
        ));
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let date = match header("x-ms-date") {
        "" => header("date"),
        date => date,
    };
    let mut resource = format!("/{account}{raw_path}");
    if let Some(comp) = query.and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("comp=")))
    {
        resource.push_str("?comp=");
        resource.push_str(comp);
    }
    let to_sign = match scheme {
        "SharedKey" => format!(
            "{method}\n{}\n{}\n{date}\n{resource}",
            header("content-md5"),
            header("content-type")
        ),
        "SharedKeyLite" => format!("{date}\n{resource}"),
        other => return Err(format!("unknown authorization scheme {other:?}")),
    };
    if keys.signed(to_sign.as_bytes(), signature) {
        Ok(())
    } else {
        Err(
            "the signature does not match the request (check the account key and the clock)"
                .to_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::ACCOUNT;

    #[test]
    fn a_signature_made_as_the_sdks_make_it_verifies() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-ms-date",
            "Tue, 24 Nov 2026 10:00:00 GMT".parse().unwrap(),
        );
        headers.insert("content-type", "application/json".parse().unwrap());
        let to_sign = "POST\n\napplication/json\nTue, 24 Nov 2026 10:00:00 GMT\n/devstoreaccount1/devstoreaccount1/Tables";
        let key = hmac::Key::new(hmac::HMAC_SHA256, &STANDARD.decode(DEV_KEY).unwrap());
        let signature = STANDARD.encode(hmac::sign(&key, to_sign.as_bytes()));
        let authorization = format!("SharedKey devstoreaccount1:{signature}");
        let check = |method, path| {
            verify(
                &authorization,
                ACCOUNT,
                &AccountKeys::of(&Authenticator::open()),
                method,
                path,
                None,
                &headers,
            )
        };
        assert!(check("POST", "/devstoreaccount1/Tables").is_ok());
        assert!(check("GET", "/devstoreaccount1/Tables").is_err());
        assert!(check("POST", "/devstoreaccount1/Other").is_err());
    }
}
