//! Opaque, versioned, sealed continuation tokens.
//!
//! An entity token is base64url of `[version u8 = 2][table id u64][query shape u64]
//! [PartitionKey length u16][PartitionKey][RowKey][seal]`, the keys being the entity the next page
//! starts at: it only resumes the query (same table incarnation, same key fields and filter) that
//! issued it, on any store. A table token is base64url of `[version u8 = 2]['T'][folded table name][seal]`.
//! The seal is the first 16 bytes of HMAC-SHA256, under the store's secret, of what precedes it,
//! so a token a client changed (a flipped byte would otherwise resume elsewhere in the query's
//! range) is refused, after a restart as before it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::hmac;

use crate::model::{quoted, KeyPosition, ValidationError};

const VERSION: u8 = 2;
/// The version byte of a token resuming an index query.
const INDEX_VERSION: u8 = 3;
/// The version byte of a token resuming an aggregate ([`CarryingToken`]).
const CARRYING_VERSION: u8 = 4;
const TABLES_KIND: u8 = b'T';
/// Bytes of the HMAC kept as a token's seal.
const SEAL_BYTES: usize = 16;
/// Bytes of an entity token before its keys: version, table id, shape, PartitionKey length.
const HEADER_BYTES: usize = 1 + 8 + 8 + 2;

/// Seals tokens and checks their seals, with a key derived from the store's secret.
#[derive(Debug, Clone)]
pub struct TokenSeal {
    key: hmac::Key,
}

impl TokenSeal {
    /// A seal keyed by `secret`.
    pub fn new(secret: &[u8]) -> TokenSeal {
        TokenSeal {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        }
    }

    /// `bytes` with their seal appended, as token text.
    fn seal(&self, mut bytes: Vec<u8>) -> String {
        let tag = hmac::sign(&self.key, &bytes);
        bytes.extend_from_slice(&tag.as_ref()[..SEAL_BYTES]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The bytes of token `text` whose seal holds, without the seal.
    fn open(&self, text: &str) -> Result<Vec<u8>, ValidationError> {
        let mut bytes = decode_base64(text)?;
        if bytes.len() < 1 + SEAL_BYTES
            || !matches!(bytes[0], VERSION | INDEX_VERSION | CARRYING_VERSION)
        {
            return Err(invalid(text, "it is not a token this server issued"));
        }
        let body_len = bytes.len() - SEAL_BYTES;
        let expected = hmac::sign(&self.key, &bytes[..body_len]);
        // Comparing HMAC tags leaks nothing useful: the key never leaves the server.
        if expected.as_ref()[..SEAL_BYTES] != bytes[body_len..] {
            return Err(invalid(text, "it was altered, or not issued by this store"));
        }
        bytes.truncate(body_len);
        Ok(bytes)
    }
}

/// Where a scan resumes: at an entity's keys, or at a sort key of the index it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeAt {
    /// An entity's position in key order.
    Key(KeyPosition),
    /// An entry's sort key in the index's order.
    Sort(Vec<u8>),
}

/// Where the next page of an entity query starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuationToken {
    /// The table incarnation the token belongs to.
    pub table_id: u64,
    /// The shape of the query that issued it ([`super::QuerySpec::shape`]).
    pub shape: u64,
    /// The entity the next page starts at (inclusive, in the query's direction).
    pub resume_at: ResumeAt,
}

impl ContinuationToken {
    /// The token's text form, sealed with `seal`.
    ///
    /// # Panics
    /// If `resume_at` is not an entity's position (scans resume at entities).
    pub fn encode(&self, seal: &TokenSeal) -> String {
        let position = match &self.resume_at {
            ResumeAt::Key(position) => position,
            ResumeAt::Sort(sort_key) => {
                let mut bytes = Vec::with_capacity(17 + sort_key.len() + SEAL_BYTES);
                bytes.push(INDEX_VERSION);
                bytes.extend_from_slice(&self.table_id.to_be_bytes());
                bytes.extend_from_slice(&self.shape.to_be_bytes());
                bytes.extend_from_slice(sort_key);
                return seal.seal(bytes);
            }
        };
        let (partition_key, row_key) = position.entity_key().expect("a scan resumes at an entity");
        let partition_len =
            u16::try_from(partition_key.len()).expect("a PartitionKey is at most 1 KiB");
        let mut bytes =
            Vec::with_capacity(HEADER_BYTES + partition_key.len() + row_key.len() + SEAL_BYTES);
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.table_id.to_be_bytes());
        bytes.extend_from_slice(&self.shape.to_be_bytes());
        bytes.extend_from_slice(&partition_len.to_be_bytes());
        bytes.extend_from_slice(partition_key.as_bytes());
        bytes.extend_from_slice(row_key.as_bytes());
        seal.seal(bytes)
    }

    /// Parses a token, checks its seal, and checks that it belongs to this table and query.
    pub fn decode(
        text: &str,
        seal: &TokenSeal,
        table_id: u64,
        shape: u64,
    ) -> Result<ContinuationToken, ValidationError> {
        let bytes = seal.open(text)?;
        let token = if bytes[0] == INDEX_VERSION && bytes.len() >= 17 {
            ContinuationToken {
                table_id: u64::from_be_bytes(bytes[1..9].try_into().expect("8 bytes")),
                shape: u64::from_be_bytes(bytes[9..17].try_into().expect("8 bytes")),
                resume_at: ResumeAt::Sort(bytes[17..].to_vec()),
            }
        } else {
            Self::decode_key_token(text, &bytes)?
        };
        if token.table_id != table_id {
            return Err(invalid(text, "it belongs to another table"));
        }
        if token.shape != shape {
            return Err(invalid(text, "it belongs to a different query"));
        }
        Ok(token)
    }

    /// The token of a key-order query, from its opened bytes.
    fn decode_key_token(text: &str, bytes: &[u8]) -> Result<ContinuationToken, ValidationError> {
        let not_a_token = || invalid(text, "it is not a continuation token");
        if bytes.len() < HEADER_BYTES || bytes[0] != VERSION {
            return Err(not_a_token());
        }
        let partition_len = usize::from(u16::from_be_bytes([bytes[17], bytes[18]]));
        let keys = &bytes[HEADER_BYTES..];
        if keys.len() < partition_len {
            return Err(not_a_token());
        }
        let (partition_key, row_key) = keys.split_at(partition_len);
        let (Ok(partition_key), Ok(row_key)) = (
            std::str::from_utf8(partition_key),
            std::str::from_utf8(row_key),
        ) else {
            return Err(not_a_token());
        };
        Ok(ContinuationToken {
            table_id: u64::from_be_bytes(bytes[1..9].try_into().expect("8 bytes")),
            shape: u64::from_be_bytes(bytes[9..17].try_into().expect("8 bytes")),
            resume_at: ResumeAt::Key(KeyPosition::row(partition_key, row_key)),
        })
    }
}

/// A token that resumes a scan and carries what the calls before it computed (an aggregate's
/// groups so far): base64url of `[version u8 = 4][scan token length u32][scan token][carried]
/// [seal]`, the scan token being a [`ContinuationToken`]'s text (sealed itself: it is checked
/// again when the scan resumes from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarryingToken {
    /// The scan's own continuation token.
    pub scan: String,
    /// What the calls so far computed.
    pub carried: Vec<u8>,
}

impl CarryingToken {
    /// The token's text form, sealed with `seal`.
    pub fn encode(&self, seal: &TokenSeal) -> String {
        let scan_len = u32::try_from(self.scan.len()).expect("a scan token is small");
        let mut bytes = Vec::with_capacity(5 + self.scan.len() + self.carried.len() + SEAL_BYTES);
        bytes.push(CARRYING_VERSION);
        bytes.extend_from_slice(&scan_len.to_be_bytes());
        bytes.extend_from_slice(self.scan.as_bytes());
        bytes.extend_from_slice(&self.carried);
        seal.seal(bytes)
    }

    /// Parses a token and checks its seal.
    pub fn decode(text: &str, seal: &TokenSeal) -> Result<CarryingToken, ValidationError> {
        let bytes = seal.open(text)?;
        let not_one = || invalid(text, "it is not an aggregate's continuation token");
        if bytes[0] != CARRYING_VERSION || bytes.len() < 5 {
            return Err(not_one());
        }
        let scan_len = u32::from_be_bytes(bytes[1..5].try_into().expect("4 bytes")) as usize;
        let Some((scan, carried)) = bytes[5..].split_at_checked(scan_len) else {
            return Err(not_one());
        };
        let scan = std::str::from_utf8(scan).map_err(|_| not_one())?;
        Ok(CarryingToken {
            scan: scan.to_owned(),
            carried: carried.to_vec(),
        })
    }
}

/// Where the next page of a table listing starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablesToken {
    /// The folded name of the last table of the previous page.
    pub after: String,
}

impl TablesToken {
    /// The token's text form, sealed with `seal`.
    pub fn encode(&self, seal: &TokenSeal) -> String {
        let mut bytes = vec![VERSION, TABLES_KIND];
        bytes.extend_from_slice(self.after.as_bytes());
        seal.seal(bytes)
    }

    /// Parses a table-listing token and checks its seal.
    pub fn decode(text: &str, seal: &TokenSeal) -> Result<TablesToken, ValidationError> {
        let bytes = seal.open(text)?;
        match bytes.as_slice() {
            [VERSION, TABLES_KIND, name @ ..] => match std::str::from_utf8(name) {
                // A folded name, or one of the server's own tables (`$`...), which a page may
                // end with though it does not show it.
                Ok(after)
                    if (after.strip_prefix('$').unwrap_or(after))
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) =>
                {
                    Ok(TablesToken {
                        after: after.to_owned(),
                    })
                }
                _ => Err(invalid(text, "it is not a table-listing token")),
            },
            _ => Err(invalid(text, "it is not a table-listing token")),
        }
    }
}

fn decode_base64(text: &str) -> Result<Vec<u8>, ValidationError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| invalid(text, "it is not a token this server issued"))
}

fn invalid(text: &str, why: &str) -> ValidationError {
    ValidationError::Argument(format!(
        "continuation token {} is invalid: {why}",
        quoted(text)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token of table 3 and query shape 9, and the seal it is sealed with.
    fn sample() -> (ContinuationToken, TokenSeal) {
        let token = ContinuationToken {
            table_id: 3,
            shape: 9,
            resume_at: ResumeAt::Key(KeyPosition::row("p", "r")),
        };
        (token, TokenSeal::new(b"secret"))
    }

    #[test]
    fn tokens_round_trip_and_are_bound_to_table_and_shape() {
        let (token, seal) = sample();
        let text = token.encode(&seal);
        assert_eq!(
            ContinuationToken::decode(&text, &seal, 3, 9).unwrap(),
            token
        );
        assert!(ContinuationToken::decode(&text, &seal, 4, 9).is_err());
        assert!(ContinuationToken::decode(&text, &seal, 3, 8).is_err());
        assert!(ContinuationToken::decode("garbage!", &seal, 3, 9).is_err());
        assert!(ContinuationToken::decode("AAAA", &seal, 3, 9).is_err());
        let index_token = ContinuationToken {
            resume_at: ResumeAt::Sort(vec![0x80, b'x', 0, 1]),
            ..token
        };
        let text = index_token.encode(&seal);
        assert_eq!(
            ContinuationToken::decode(&text, &seal, 3, 9).unwrap(),
            index_token
        );
        assert!(ContinuationToken::decode(&text, &seal, 3, 8).is_err());
    }

    #[test]
    fn a_token_with_any_byte_changed_or_from_another_store_is_refused() {
        let (token, seal) = sample();
        let bytes = URL_SAFE_NO_PAD.decode(token.encode(&seal)).unwrap();
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut tampered = bytes.clone();
                tampered[at] ^= 1 << bit;
                let text = URL_SAFE_NO_PAD.encode(&tampered);
                assert!(ContinuationToken::decode(&text, &seal, 3, 9).is_err());
            }
        }
        let other_store = TokenSeal::new(b"another secret");
        assert!(ContinuationToken::decode(&token.encode(&seal), &other_store, 3, 9).is_err());
    }

    #[test]
    fn table_tokens_round_trip() {
        let token = TablesToken {
            after: "orders2024".into(),
        };
        let seal = TokenSeal::new(b"secret");
        assert_eq!(
            TablesToken::decode(&token.encode(&seal), &seal).unwrap(),
            token
        );
        assert!(TablesToken::decode("nonsense", &seal).is_err());
    }
}
