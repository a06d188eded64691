//! Opaque, versioned continuation tokens.
//!
//! An entity token is base64url of `[version u8 = 1][table id u64][query shape u64][resume key]`:
//! it only resumes the query (same table incarnation, same key fields and filter) that issued it.
//! A table token is base64url of `[version u8 = 1]['T'][folded table name]`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::model::ValidationError;

const VERSION: u8 = 1;
const TABLES_KIND: u8 = b'T';

/// Where the next page of an entity query starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuationToken {
    /// The table incarnation the token belongs to.
    pub table_id: u64,
    /// The shape of the query that issued it ([`super::QuerySpec::shape`]).
    pub shape: u64,
    /// The encoded key the next page starts at (inclusive, in the query's direction).
    pub resume_at: Vec<u8>,
}

impl ContinuationToken {
    /// The token's text form.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(17 + self.resume_at.len());
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.table_id.to_be_bytes());
        bytes.extend_from_slice(&self.shape.to_be_bytes());
        bytes.extend_from_slice(&self.resume_at);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Parses a token and checks that it belongs to this table and query.
    pub fn decode(
        text: &str,
        table_id: u64,
        shape: u64,
    ) -> Result<ContinuationToken, ValidationError> {
        let bytes = decode_base64(text)?;
        if bytes.len() < 17 || bytes[0] != VERSION {
            return Err(invalid(text, "it is not a continuation token"));
        }
        let token = ContinuationToken {
            table_id: u64::from_be_bytes(bytes[1..9].try_into().expect("8 bytes")),
            shape: u64::from_be_bytes(bytes[9..17].try_into().expect("8 bytes")),
            resume_at: bytes[17..].to_vec(),
        };
        if token.table_id != table_id {
            return Err(invalid(text, "it belongs to another table"));
        }
        if token.shape != shape {
            return Err(invalid(text, "it belongs to a different query"));
        }
        Ok(token)
    }
}

/// Where the next page of a table listing starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablesToken {
    /// The folded name of the last table of the previous page.
    pub after: String,
}

impl TablesToken {
    /// The token's text form.
    pub fn encode(&self) -> String {
        let mut bytes = vec![VERSION, TABLES_KIND];
        bytes.extend_from_slice(self.after.as_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Parses a table-listing token.
    pub fn decode(text: &str) -> Result<TablesToken, ValidationError> {
        let bytes = decode_base64(text)?;
        match bytes.as_slice() {
            [VERSION, TABLES_KIND, name @ ..] => match std::str::from_utf8(name) {
                Ok(after)
                    if after
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
    let shown: String = text.chars().take(64).collect();
    ValidationError::Argument(format!("continuation token '{shown}' is invalid: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_are_bound_to_table_and_shape() {
        let token = ContinuationToken {
            table_id: 3,
            shape: 9,
            resume_at: b"p\0r".to_vec(),
        };
        let text = token.encode();
        assert_eq!(ContinuationToken::decode(&text, 3, 9).unwrap(), token);
        assert!(ContinuationToken::decode(&text, 4, 9).is_err());
        assert!(ContinuationToken::decode(&text, 3, 8).is_err());
        assert!(ContinuationToken::decode("garbage!", 3, 9).is_err());
        assert!(ContinuationToken::decode("AAAA", 3, 9).is_err());
    }

    #[test]
    fn table_tokens_round_trip() {
        let token = TablesToken {
            after: "orders2024".into(),
        };
        assert_eq!(TablesToken::decode(&token.encode()).unwrap(), token);
        assert!(TablesToken::decode("nonsense").is_err());
    }
}
