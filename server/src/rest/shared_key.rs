//! Azure's SharedKey and SharedKeyLite signatures of Table requests: the string the client
//! signed, rebuilt from the request, and its HMAC-SHA256 under one of the account's keys (the
//! development key in open mode, the key file's keys otherwise), and the date it was signed at,
//! which must be within the allowed skew of the server's clock (15 minutes by default, as on
//! Azure): a captured signature stops working once that window has passed.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use std::time::{Duration, SystemTime};

use http::HeaderMap;
use ring::hmac;
use trestle_proto::access::KeyRing;

use crate::auth::Authenticator;
use crate::model::quoted;

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
    /// OAuth tokens only (no key file): no signature is the account's.
    None,
}

impl AccountKeys {
    /// The keys of a server authenticating with `authenticator`.
    pub(crate) fn of(authenticator: &Authenticator) -> AccountKeys {
        match authenticator.keys() {
            Some(ring) => AccountKeys::Ring(ring.clone()),
            None if !authenticator.is_open() => AccountKeys::None,
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
            AccountKeys::None => false,
        }
    }
}

/// The parts of a request a SharedKey signature covers.
#[derive(Debug)]
pub(crate) struct Signed<'a> {
    pub(crate) method: &'a str,
    pub(crate) raw_path: &'a str,
    pub(crate) query: Option<&'a str>,
    pub(crate) headers: &'a HeaderMap,
}

/// The server's clock, and how far a signed date may be from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) now: SystemTime,
    pub(crate) max_skew: Duration,
}

/// Whether `authorization` (`SharedKey account:signature` or `SharedKeyLite ...`) signs this
/// request with one of `keys` for `account`, at a date within the clock's skew; `Err` says why
/// not.
pub(crate) fn verify(
    authorization: &str,
    account: &str,
    keys: &AccountKeys,
    request: &Signed<'_>,
    clock: &Clock,
) -> Result<(), String> {
    let (scheme, credential) = authorization
        .split_once(' ')
        .ok_or("the Authorization header is not `SharedKey <account>:<signature>`")?;
    let (signer, signature) = credential
        .split_once(':')
        .ok_or("the Authorization header has no `<account>:<signature>`")?;
    if signer != account {
        return Err(format!(
            "the request is signed for account {}, not {}",
            quoted(signer),
            quoted(account)
        ));
    }
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let date = match header("x-ms-date") {
        "" => header("date"),
        date => date,
    };
    check_date(date, clock)?;
    let mut resource = format!("/{account}{}", request.raw_path);
    if let Some(comp) = request
        .query
        .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("comp=")))
    {
        resource.push_str("?comp=");
        resource.push_str(comp);
    }
    let to_sign = match scheme {
        "SharedKey" => format!(
            "{}\n{}\n{}\n{date}\n{resource}",
            request.method,
            header("content-md5"),
            header("content-type")
        ),
        "SharedKeyLite" => format!("{date}\n{resource}"),
        other => return Err(format!("unknown authorization scheme {}", quoted(other))),
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

/// A signed request must carry its date (`x-ms-date` or `Date`, in HTTP's form), within the
/// clock's skew of now either way.
fn check_date(date: &str, clock: &Clock) -> Result<(), String> {
    if date.is_empty() {
        return Err("a SharedKey request must carry its date in x-ms-date or Date".to_owned());
    }
    let signed_at = httpdate::parse_http_date(date).map_err(|_| {
        format!(
            "the request's date {} is not an HTTP date (such as \"Wed, 25 Nov 2026 10:00:00 GMT\")",
            quoted(date)
        )
    })?;
    let skew = clock
        .now
        .duration_since(signed_at)
        .unwrap_or_else(|early| early.duration());
    if skew > clock.max_skew {
        return Err(format!(
            "the request's date {} is {} s from the server's clock, more than the {} s allowed \
             (a stale or replayed signature, or a wrong clock)",
            quoted(date),
            skew.as_secs(),
            clock.max_skew.as_secs()
        ));
    }
    Ok(())
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
        let signed_at = httpdate::parse_http_date("Tue, 24 Nov 2026 10:00:00 GMT").unwrap();
        let check_at = |method, path, now| {
            let request = Signed {
                method,
                raw_path: path,
                query: None,
                headers: &headers,
            };
            let clock = Clock {
                now,
                max_skew: Duration::from_secs(900),
            };
            verify(
                &authorization,
                ACCOUNT,
                &AccountKeys::of(&Authenticator::open()),
                &request,
                &clock,
            )
        };
        let check = |method, path| check_at(method, path, signed_at + Duration::from_secs(60));
        assert!(check("POST", "/devstoreaccount1/Tables").is_ok());
        assert!(check("GET", "/devstoreaccount1/Tables").is_err());
        assert!(check("POST", "/devstoreaccount1/Other").is_err());
        // Outside the window on either side, the same signature is refused.
        let late = check_at(
            "POST",
            "/devstoreaccount1/Tables",
            signed_at + Duration::from_secs(901),
        );
        assert!(late.unwrap_err().contains("more than the 900 s allowed"));
        let early = check_at(
            "POST",
            "/devstoreaccount1/Tables",
            signed_at - Duration::from_secs(901),
        );
        assert!(early.is_err());
    }

    #[test]
    fn a_missing_or_unparsable_date_is_refused() {
        let clock = Clock {
            now: SystemTime::now(),
            max_skew: Duration::from_secs(900),
        };
        assert!(check_date("", &clock)
            .unwrap_err()
            .contains("must carry its date"));
        assert!(check_date("yesterday", &clock)
            .unwrap_err()
            .contains("not an HTTP date"));
        let now = httpdate::fmt_http_date(clock.now);
        assert!(check_date(&now, &clock).is_ok());
    }
}
