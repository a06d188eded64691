//! Account keys and scoped access tokens: the credential format shared by the server, which
//! verifies them, and by the SDK and the `trestle-server token` command, which mint them.
//!
//! A key file lists named secrets, one a line (`<id> <secret>`, the secret 32 random bytes in
//! unpadded base64url); the first line signs new tokens and every line verifies, so a key is
//! rotated by listing the new one first and dropping the old one once its tokens have expired.
//! A token is `tt1.<claims>.<signature>`: the protobuf [`AccessClaims`](claims::AccessClaims) and
//! HMAC-SHA256 over `tt1.<claims>`, both unpadded base64url. Signatures and secrets are compared in
//! constant time, and no error message or `Debug` output ever holds a secret.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use prost::Message;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// Generated `trestle.access.v1` claims.
pub mod claims {
    #![allow(missing_docs, unreachable_pub, missing_debug_implementations)]
    #![allow(clippy::all, clippy::pedantic)]

    tonic::include_proto!("trestle.access.v1");
}

const TOKEN_PREFIX: &str = "tt1.";
const SECRET_BYTES: usize = 32;
/// The longest token accepted; anything longer is refused before it is decoded.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Why a key file or key could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A line of the file is not `<id> <secret>`.
    #[error("key file line {line}: {problem}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong (never the secret).
        problem: String,
    },
    /// The file lists no key.
    #[error("the key file lists no key")]
    Empty,
    /// The system's random source failed.
    #[error("the system random source failed")]
    Random,
}

/// Why a bearer credential was not accepted. Messages name no secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token of this format, or not decodable.
    #[error("the access token is malformed")]
    Malformed,
    /// No key of this server has the token's key id.
    #[error("the access token names a key this server does not have")]
    UnknownKey,
    /// The signature does not match the claims.
    #[error("the access token's signature does not match")]
    BadSignature,
    /// The token is not valid yet.
    #[error("the access token is not valid until {not_before} (Unix seconds)")]
    NotYetValid {
        /// Its start of validity.
        not_before: i64,
    },
    /// The token has expired.
    #[error("the access token expired at {expires} (Unix seconds)")]
    Expired {
        /// Its end of validity.
        expires: i64,
    },
    /// The claims are not a valid grant (an unknown permission letter, an empty range).
    #[error("the access token's claims are invalid: {0}")]
    InvalidClaims(String),
}

/// Whether two slices of the same length hold the same bytes, reading every byte whatever they
/// hold (no early exit that would time how long a prefix matched).
pub fn same_bytes_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    let difference = a
        .iter()
        .zip(b)
        .fold(0u8, |difference, (x, y)| difference | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// One named secret.
#[derive(Clone)]
pub struct AccountKey {
    id: String,
    secret: Vec<u8>,
    signing: hmac::Key,
}

impl fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccountKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl AccountKey {
    /// A new key with 32 bytes from the system's random source.
    pub fn generate(id: impl Into<String>) -> Result<AccountKey, KeyError> {
        let mut secret = vec![0; SECRET_BYTES];
        SystemRandom::new()
            .fill(&mut secret)
            .map_err(|_| KeyError::Random)?;
        Ok(AccountKey::from_parts(id.into(), secret))
    }

    fn from_parts(id: String, secret: Vec<u8>) -> AccountKey {
        let signing = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        AccountKey {
            id,
            secret,
            signing,
        }
    }

    /// The key's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The secret as written in key files and sent as an operator's bearer credential.
    pub fn secret_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(&self.secret)
    }

    /// The secret in standard padded base64: the `AccountKey` of an Azure connection string.
    pub fn secret_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.secret)
    }

    /// Whether `presented` is exactly this key's secret text: the same length and the same bytes,
    /// compared in constant time. Never through a key derived from it: HMAC pads a short key with
    /// zero bytes, so the secret with zero bytes appended would derive the same key.
    pub fn is_secret(&self, presented: &str) -> bool {
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(presented) else {
            return false;
        };
        bytes.len() == self.secret.len() && same_bytes_in_constant_time(&bytes, &self.secret)
    }
}

/// The keys a server trusts; the first one signs.
#[derive(Debug, Clone)]
pub struct KeyRing {
    keys: Vec<AccountKey>,
}

impl KeyRing {
    /// A ring of one new key.
    pub fn generate() -> Result<KeyRing, KeyError> {
        let mut suffix = [0u8; 4];
        SystemRandom::new()
            .fill(&mut suffix)
            .map_err(|_| KeyError::Random)?;
        let id = format!("key-{}", u32::from_be_bytes(suffix));
        Ok(KeyRing {
            keys: vec![AccountKey::generate(id)?],
        })
    }

    /// Parses key-file text: `<id> <secret>` lines; blank lines and `#` comments are skipped.
    pub fn parse(text: &str) -> Result<KeyRing, KeyError> {
        let mut keys: Vec<AccountKey> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let syntax = |problem: &str| KeyError::Syntax {
                line: index + 1,
                problem: problem.to_owned(),
            };
            let mut fields = line.split_whitespace();
            let (Some(id), Some(secret), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(syntax("expected `<id> <secret>`"));
            };
            let secret = URL_SAFE_NO_PAD
                .decode(secret)
                .map_err(|_| syntax("the secret is not unpadded base64url"))?;
            if secret.len() < 16 {
                return Err(syntax("the secret is shorter than 16 bytes"));
            }
            if keys.iter().any(|k| k.id == id) {
                return Err(syntax("the key id appears twice"));
            }
            keys.push(AccountKey::from_parts(id.to_owned(), secret));
        }
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(KeyRing { keys })
    }

    /// The key-file text of this ring.
    pub fn to_file_text(&self) -> String {
        let mut text = String::from(
            "# Trestle account keys: `<id> <secret>`. The first signs new tokens; all verify.\n",
        );
        for key in &self.keys {
            text.push_str(&format!("{} {}\n", key.id, key.secret_text()));
        }
        text
    }

    /// The key that signs new tokens.
    pub fn signing_key(&self) -> &AccountKey {
        &self.keys[0]
    }

    /// The key called `id`.
    pub fn get(&self, id: &str) -> Option<&AccountKey> {
        self.keys.iter().find(|k| k.id == id)
    }

    /// Whether `signature` is the HMAC-SHA256 of `message` under one of the keys (as Azure's
    /// SharedKey and shared access signatures are made); each is checked in constant time.
    pub fn signed(&self, message: &[u8], signature: &[u8]) -> bool {
        self.keys
            .iter()
            .any(|key| hmac::verify(&key.signing, message, signature).is_ok())
    }

    /// The key whose secret is `presented`, checking every key in constant time.
    pub fn key_with_secret(&self, presented: &str) -> Option<&AccountKey> {
        let mut found = None;
        for key in &self.keys {
            if key.is_secret(presented) {
                found = Some(key);
            }
        }
        found
    }
}

/// What a token may do, as a set of operation letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Permissions(u8);

impl Permissions {
    /// `r`: get, query, scan, count, and `check` in transactions.
    pub const READ: Permissions = Permissions(1);
    /// `a`: insert (and, with `u`, upsert).
    pub const ADD: Permissions = Permissions(2);
    /// `u`: update and merge (and, with `a`, upsert).
    pub const UPDATE: Permissions = Permissions(4);
    /// `d`: delete entities.
    pub const DELETE: Permissions = Permissions(8);
    /// `l`: list tables.
    pub const LIST_TABLES: Permissions = Permissions(16);
    /// `c`: create and delete tables.
    pub const MANAGE_TABLES: Permissions = Permissions(32);

    const LETTERS: [(char, Permissions); 6] = [
        ('r', Permissions::READ),
        ('a', Permissions::ADD),
        ('u', Permissions::UPDATE),
        ('d', Permissions::DELETE),
        ('l', Permissions::LIST_TABLES),
        ('c', Permissions::MANAGE_TABLES),
    ];

    /// Parses letters such as `"rau"`.
    pub fn parse(letters: &str) -> Result<Permissions, TokenError> {
        let mut set = Permissions::default();
        for letter in letters.chars() {
            let (_, permission) = Permissions::LETTERS
                .iter()
                .find(|(l, _)| *l == letter)
                .ok_or_else(|| {
                    TokenError::InvalidClaims(format!(
                        "unknown permission letter {letter:?}; letters are r, a, u, d, l, c"
                    ))
                })?;
            set = set.union(*permission);
        }
        Ok(set)
    }

    /// The letters of this set, in `raudlc` order.
    pub fn letters(self) -> String {
        Permissions::LETTERS
            .iter()
            .filter(|(_, p)| self.contains(*p))
            .map(|(l, _)| *l)
            .collect()
    }

    /// Both sets.
    pub const fn union(self, other: Permissions) -> Permissions {
        Permissions(self.0 | other.0)
    }

    /// Whether every permission of `other` is in this set.
    pub const fn contains(self, other: Permissions) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A half-open range of key values: `start` inclusive, `end` exclusive, either open when `None`.
/// Keys compare as UTF-8 bytes, the store's collation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyBounds {
    /// Smallest key covered.
    pub start: Option<String>,
    /// First key past the range.
    pub end: Option<String>,
}

impl KeyBounds {
    /// Whether `key` is in the range.
    pub fn contains(&self, key: &str) -> bool {
        self.start.as_deref().is_none_or(|start| key >= start)
            && self.end.as_deref().is_none_or(|end| key < end)
    }

    /// Whether the range is unbounded on both sides.
    pub fn is_everything(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }
}

/// What a scoped token grants: the verified claims.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    /// Allowed operations.
    pub permissions: Permissions,
    /// The one table, or every table when `None`.
    pub table: Option<String>,
    /// PartitionKeys covered.
    pub partitions: KeyBounds,
    /// RowKeys covered in each covered partition.
    pub rows: KeyBounds,
    /// Valid from (Unix seconds).
    pub not_before: i64,
    /// Valid until, exclusive (Unix seconds).
    pub expires: i64,
}

impl Grant {
    /// A grant of `permissions` on every table and key, valid from now for `ttl_seconds`.
    pub fn new(permissions: Permissions, ttl_seconds: u64) -> Grant {
        let now = unix_seconds(SystemTime::now());
        Grant {
            permissions,
            table: None,
            partitions: KeyBounds::default(),
            rows: KeyBounds::default(),
            not_before: now,
            expires: now.saturating_add(i64::try_from(ttl_seconds).unwrap_or(i64::MAX)),
        }
    }

    /// Whether the grant covers table `name` (ignoring case, as table names do).
    pub fn covers_table(&self, name: &str) -> bool {
        self.table
            .as_deref()
            .is_none_or(|table| table.eq_ignore_ascii_case(name))
    }

    /// Whether the grant covers the entity at (`partition_key`, `row_key`).
    pub fn covers_key(&self, partition_key: &str, row_key: &str) -> bool {
        self.partitions.contains(partition_key) && self.rows.contains(row_key)
    }

    fn to_claims(&self, key_id: &str) -> claims::AccessClaims {
        claims::AccessClaims {
            key_id: key_id.to_owned(),
            permissions: self.permissions.letters(),
            table: self.table.clone(),
            partition_start: self.partitions.start.clone(),
            partition_end: self.partitions.end.clone(),
            row_start: self.rows.start.clone(),
            row_end: self.rows.end.clone(),
            not_before: self.not_before,
            expires: self.expires,
        }
    }

    fn from_claims(claims: claims::AccessClaims) -> Result<Grant, TokenError> {
        let grant = Grant {
            permissions: Permissions::parse(&claims.permissions)?,
            table: claims.table,
            partitions: KeyBounds {
                start: claims.partition_start,
                end: claims.partition_end,
            },
            rows: KeyBounds {
                start: claims.row_start,
                end: claims.row_end,
            },
            not_before: claims.not_before,
            expires: claims.expires,
        };
        if grant.expires <= grant.not_before {
            return Err(TokenError::InvalidClaims(
                "it expires before it becomes valid".into(),
            ));
        }
        Ok(grant)
    }
}

/// Whether `credential` has the form of an access token (rather than an account key's secret,
/// which is plain base64url and never contains the token prefix's `.`).
pub fn looks_like_token(credential: &str) -> bool {
    credential.starts_with(TOKEN_PREFIX)
}

/// Signs `grant` with `key`: the token to send as `authorization: Bearer <token>`.
pub fn mint(key: &AccountKey, grant: &Grant) -> String {
    let claims = URL_SAFE_NO_PAD.encode(grant.to_claims(&key.id).encode_to_vec());
    let signed = format!("{TOKEN_PREFIX}{claims}");
    let signature = URL_SAFE_NO_PAD.encode(hmac::sign(&key.signing, signed.as_bytes()));
    format!("{signed}.{signature}")
}

/// Checks `token`'s format, signature (with the key it names) and validity at `now`; returns
/// what it grants.
pub fn verify(keys: &KeyRing, token: &str, now: SystemTime) -> Result<Grant, TokenError> {
    if token.len() > MAX_TOKEN_BYTES || !token.starts_with(TOKEN_PREFIX) {
        return Err(TokenError::Malformed);
    }
    let (signed, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
    let claims_text = signed
        .strip_prefix(TOKEN_PREFIX)
        .ok_or(TokenError::Malformed)?;
    let claims_bytes = URL_SAFE_NO_PAD
        .decode(claims_text)
        .map_err(|_| TokenError::Malformed)?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| TokenError::Malformed)?;
    let claims =
        claims::AccessClaims::decode(claims_bytes.as_slice()).map_err(|_| TokenError::Malformed)?;
    if claims.key_id.is_empty() {
        return Err(TokenError::Malformed);
    }
    let key = keys.get(&claims.key_id).ok_or(TokenError::UnknownKey)?;
    hmac::verify(&key.signing, signed.as_bytes(), &signature)
        .map_err(|_| TokenError::BadSignature)?;
    let grant = Grant::from_claims(claims)?;
    let now = unix_seconds(now);
    if now < grant.not_before {
        return Err(TokenError::NotYetValid {
            not_before: grant.not_before,
        });
    }
    if now >= grant.expires {
        return Err(TokenError::Expired {
            expires: grant.expires,
        });
    }
    Ok(grant)
}

fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> KeyRing {
        KeyRing::generate().unwrap()
    }

    #[test]
    fn a_minted_token_verifies_and_round_trips_its_grant() {
        let keys = ring();
        let mut grant = Grant::new(Permissions::parse("rau").unwrap(), 60);
        grant.table = Some("Orders".into());
        grant.partitions = KeyBounds {
            start: Some("a".into()),
            end: Some("m".into()),
        };
        let token = mint(keys.signing_key(), &grant);
        assert_eq!(verify(&keys, &token, SystemTime::now()), Ok(grant));
    }

    #[test]
    fn tampered_expired_early_and_foreign_tokens_are_refused() {
        let keys = ring();
        let grant = Grant::new(Permissions::READ, 60);
        let token = mint(keys.signing_key(), &grant);
        let (signed, _) = token.rsplit_once('.').unwrap();
        // Same key id, other claims, the old signature.
        let mut wider = grant.clone();
        wider.permissions = Permissions::parse("raudlc").unwrap();
        let forged = format!(
            "{}.{}",
            mint(keys.signing_key(), &wider).rsplit_once('.').unwrap().0,
            token.rsplit_once('.').unwrap().1
        );
        assert_eq!(
            verify(&keys, &forged, SystemTime::now()),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            verify(&keys, &format!("{signed}.AAAA"), SystemTime::now()),
            Err(TokenError::BadSignature)
        );
        let later = SystemTime::now() + std::time::Duration::from_secs(61);
        assert!(matches!(
            verify(&keys, &token, later),
            Err(TokenError::Expired { .. })
        ));
        let earlier = SystemTime::now() - std::time::Duration::from_secs(30);
        assert!(matches!(
            verify(&keys, &token, earlier),
            Err(TokenError::NotYetValid { .. })
        ));
        assert_eq!(
            verify(&ring(), &token, SystemTime::now()),
            Err(TokenError::UnknownKey)
        );
        for junk in ["", "tt1.", "tt1..", "Bearer x", "tt1.!!!.???", "tt2.a.b"] {
            assert_eq!(
                verify(&keys, junk, SystemTime::now()),
                Err(TokenError::Malformed),
                "{junk}"
            );
        }
    }

    #[test]
    fn key_files_round_trip_and_secrets_match_only_themselves() {
        let keys = ring();
        let parsed = KeyRing::parse(&keys.to_file_text()).unwrap();
        let secret = keys.signing_key().secret_text();
        assert_eq!(
            parsed.key_with_secret(&secret).map(AccountKey::id),
            Some(keys.signing_key().id())
        );
        assert!(parsed
            .key_with_secret(&ring().signing_key().secret_text())
            .is_none());
        assert!(parsed.key_with_secret("not base64 !").is_none());
        // HMAC pads a short key with zero bytes: a secret with zero bytes appended derives the
        // same HMAC key, but is not the secret.
        for padding in ["A", "AA", "AAAA", "AAAAAAAA"] {
            let padded = format!("{secret}{padding}");
            assert!(parsed.key_with_secret(&padded).is_none(), "{padding}");
        }
        assert!(parsed
            .key_with_secret(&secret[..secret.len() - 2])
            .is_none());
        assert!(!format!("{parsed:?}").contains(&secret), "Debug leaks");
        assert!(matches!(
            KeyRing::parse("# nothing\n"),
            Err(KeyError::Empty)
        ));
        assert!(matches!(
            KeyRing::parse("k1 c2hvcnQ\n"),
            Err(KeyError::Syntax { line: 1, .. })
        ));
        let two = format!(
            "{}{}",
            keys.to_file_text(),
            ring().to_file_text().lines().nth(1).unwrap()
        );
        assert!(KeyRing::parse(&two).is_ok());
    }

    #[test]
    fn a_rotated_ring_verifies_tokens_of_both_keys_and_signs_with_the_new_one() {
        let old = ring();
        let new = ring();
        let old_token = mint(old.signing_key(), &Grant::new(Permissions::READ, 60));
        let new_line = new.to_file_text().lines().nth(1).unwrap().to_owned();
        let old_line = old.to_file_text().lines().nth(1).unwrap().to_owned();
        let rotated = KeyRing::parse(&format!("{new_line}\n{old_line}\n")).unwrap();
        assert_eq!(rotated.signing_key().id(), new.signing_key().id());
        let new_token = mint(rotated.signing_key(), &Grant::new(Permissions::READ, 60));
        assert!(verify(&rotated, &old_token, SystemTime::now()).is_ok());
        assert!(verify(&rotated, &new_token, SystemTime::now()).is_ok());
        // Once the old key is dropped, its tokens stop working.
        assert_eq!(
            verify(&new, &old_token, SystemTime::now()),
            Err(TokenError::UnknownKey)
        );
    }

    #[test]
    fn permissions_parse_letters_and_refuse_others() {
        let p = Permissions::parse("dr").unwrap();
        assert_eq!(p.letters(), "rd");
        assert!(p.contains(Permissions::READ) && !p.contains(Permissions::ADD));
        assert!(Permissions::parse("rx").is_err());
    }
}
