//! Idempotency keys: a client's name for one logical write, so that a retry of it applies once.
//!
//! A write sent with a key carries, in the same commit, a *record* of it: an insert into the
//! store's hidden idempotency table, at the caller's credential and the key, holding the request's
//! digest and, sealed in by the store once the commit is planned ([`seal_outcome`]), each
//! operation's timestamp (from which its ETag derives). Being an insert, a second commit with the
//! same key is refused where the record is, by the store's own locks and rules, on every server
//! over the same database; the engine then reads the record and answers the first outcome
//! (`crate::idempotency`). What bounds it: a record is the key, a 32-byte digest and 9 bytes per
//! operation (at most 100), and it lives for the window by the table's time to live, which the
//! housekeeping sweeps.

use std::fmt::{Debug, Write as _};

use super::{
    EntityKey, Properties, Refusal, StoredEntity, Ticks, ValidationError, Value, TTL_PROPERTY,
};

/// The longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 128;

/// The record's property holding the request's digest.
const DIGEST_PROPERTY: &str = "Digest";
/// The record's property holding the outcome: per operation `0`, or `1` and its timestamp's 8
/// bytes (little-endian), in the request's order.
const OUTCOME_PROPERTY: &str = "Outcome";
/// The record's property holding a refusal instead: the refused operation's position, its kind
/// and the kind's detail, space separated (`2 NotFound`, `0 PatchConditionFalse N gt 3`).
const REFUSED_PROPERTY: &str = "Refused";
/// The record's property holding, for a bulk delete (`DeleteEntities`), how many entities the
/// call deleted; beside it, where the next call resumes, unless the range was done.
const DELETED_PROPERTY: &str = "Deleted";
const CONTINUATION_PROPERTY: &str = "Continuation";

/// A client's name for one logical write: 1 to 128 printable ASCII characters other than space,
/// `/`, `\`, `#` and `?` (so that it is a valid row key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key `text` names; `None` for the empty string (no key).
    pub fn parse(text: &str) -> Result<Option<IdempotencyKey>, ValidationError> {
        if text.is_empty() {
            return Ok(None);
        }
        let allowed = |c: char| c.is_ascii_graphic() && !matches!(c, '/' | '\\' | '#' | '?');
        if text.len() > MAX_IDEMPOTENCY_KEY_BYTES || !text.chars().all(allowed) {
            return Err(ValidationError::Argument(format!(
                "an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_BYTES} printable ASCII \
                 characters other than space, '/', '\\', '#' and '?'"
            )));
        }
        Ok(Some(IdempotencyKey(text.to_owned())))
    }

    /// The key as the client sent it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The SHA-256 of a request in the model's form, which is canonical: properties are in name
/// order, and the same request decodes to the same value whatever protocol or client sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestDigest([u8; 32]);

impl RequestDigest {
    /// The digest of `request` (validated model values, formatted as `Debug` shows them).
    pub fn of(request: &impl Debug) -> RequestDigest {
        let mut sink = DigestSink(ring::digest::Context::new(&ring::digest::SHA256));
        write!(sink, "{request:?}").expect("a digest takes any text");
        let mut bytes = [0; 32];
        bytes.copy_from_slice(sink.0.finish().as_ref());
        RequestDigest(bytes)
    }
}

impl RequestDigest {
    /// The digest in lower-case hexadecimal.
    pub fn hex(&self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }
}

/// Feeds formatted text to a digest without building the text.
struct DigestSink(ring::digest::Context);

impl std::fmt::Write for DigestSink {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.0.update(text.as_bytes());
        Ok(())
    }
}

/// The custom properties of a new record of a request with `digest`, living `window_seconds`.
pub fn record_properties(digest: RequestDigest, window_seconds: u64) -> Properties {
    let seconds = i64::try_from(window_seconds).unwrap_or(i64::MAX);
    Properties::from([
        (DIGEST_PROPERTY.to_owned(), Value::Binary(digest.0.to_vec())),
        (TTL_PROPERTY.to_owned(), Value::Int64(seconds)),
    ])
}

/// The custom properties of a record of a request with `digest` refused at operation `position`
/// for `refusal`, living `window_seconds`; `None` for a refusal a record does not keep (an entity
/// a merge would make invalid: the retry is decided afresh, and refused the same way).
pub fn refusal_properties(
    digest: RequestDigest,
    window_seconds: u64,
    position: usize,
    refusal: &Refusal,
) -> Option<Properties> {
    let detail = match refusal {
        Refusal::NotFound => "NotFound".to_owned(),
        Refusal::AlreadyExists => "AlreadyExists".to_owned(),
        Refusal::ConditionNotSatisfied => "ConditionNotSatisfied".to_owned(),
        Refusal::PatchConditionFalse { condition } => format!("PatchConditionFalse {condition}"),
        Refusal::IndexValueTaken { index, .. } => format!("IndexValueTaken {index}"),
        Refusal::Invalid(_) => return None,
    };
    let mut properties = record_properties(digest, window_seconds);
    let refused = Value::String(format!("{position} {detail}"));
    properties.insert(REFUSED_PROPERTY.to_owned(), refused);
    Some(properties)
}

/// The custom properties of a record of a bulk delete with `digest` that deleted `count`
/// entities and answered `continuation` (`None`: the range is done), living `window_seconds`.
pub fn bulk_delete_properties(
    digest: RequestDigest,
    window_seconds: u64,
    count: u64,
    continuation: Option<&str>,
) -> Properties {
    let mut properties = record_properties(digest, window_seconds);
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    properties.insert(DELETED_PROPERTY.to_owned(), Value::Int64(count));
    if let Some(continuation) = continuation {
        let continuation = Value::String(continuation.to_owned());
        properties.insert(CONTINUATION_PROPERTY.to_owned(), continuation);
    }
    properties
}

/// Seals the commit's outcome into its record (`record`, as planned): every operation's
/// timestamp, from `parts` (each planned batch's positions in the request and results), for
/// `operations` operations.
pub fn seal_outcome<'a>(
    record: &mut StoredEntity,
    parts: impl Iterator<Item = (&'a [usize], &'a [Option<StoredEntity>])>,
    operations: usize,
) {
    let mut stamps: Vec<Option<Ticks>> = vec![None; operations];
    for (positions, results) in parts {
        for (&position, result) in positions.iter().zip(results) {
            if let Some(stamp) = stamps.get_mut(position) {
                *stamp = result.as_ref().map(|entity| entity.timestamp);
            }
        }
    }
    let mut outcome = Vec::with_capacity(operations * 9);
    for stamp in stamps {
        match stamp {
            Some(Ticks(ticks)) => {
                outcome.push(1);
                outcome.extend_from_slice(&ticks.to_le_bytes());
            }
            None => outcome.push(0),
        }
    }
    record
        .properties
        .insert(OUTCOME_PROPERTY.to_owned(), Value::Binary(outcome));
}

/// A record as read back: the request it names and what the commit stored, or its refusal.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The digest of the request that wrote it.
    pub digest: RequestDigest,
    /// What the request did.
    pub outcome: RecordedOutcome,
}

/// What a recorded request did.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordedOutcome {
    /// It committed: each operation's stored timestamp (`None`: it stored no entity), the
    /// record's own first.
    Committed(Vec<Option<Ticks>>),
    /// It was refused at this operation (a position in the request), for this; nothing of it
    /// was written. (The entity a refusal of an index value names is not kept.)
    Refused(usize, Refusal),
    /// A bulk delete answered: how many entities it deleted, and where the next call resumes
    /// (`None`: the range was done).
    Deleted {
        count: u64,
        continuation: Option<String>,
    },
}

impl Recorded {
    /// The record `properties` hold; `None` if they are not one.
    pub fn read(properties: &Properties) -> Option<Recorded> {
        let Some(Value::Binary(digest)) = properties.get(DIGEST_PROPERTY) else {
            return None;
        };
        let digest = RequestDigest(digest.as_slice().try_into().ok()?);
        if let Some(Value::String(refused)) = properties.get(REFUSED_PROPERTY) {
            let (position, refused) = refused.split_once(' ')?;
            let (kind, detail) = refused.split_once(' ').unwrap_or((refused, ""));
            let refusal = match kind {
                "NotFound" => Refusal::NotFound,
                "AlreadyExists" => Refusal::AlreadyExists,
                "ConditionNotSatisfied" => Refusal::ConditionNotSatisfied,
                "PatchConditionFalse" => Refusal::PatchConditionFalse {
                    condition: detail.to_owned(),
                },
                "IndexValueTaken" => Refusal::IndexValueTaken {
                    index: detail.to_owned(),
                    holder: EntityKey {
                        partition_key: String::new(),
                        row_key: String::new(),
                    },
                },
                _ => return None,
            };
            let outcome = RecordedOutcome::Refused(position.parse().ok()?, refusal);
            return Some(Recorded { digest, outcome });
        }
        if let Some(Value::Int64(count)) = properties.get(DELETED_PROPERTY) {
            let continuation = match properties.get(CONTINUATION_PROPERTY) {
                Some(Value::String(continuation)) => Some(continuation.clone()),
                _ => None,
            };
            let count = u64::try_from(*count).ok()?;
            let outcome = RecordedOutcome::Deleted {
                count,
                continuation,
            };
            return Some(Recorded { digest, outcome });
        }
        let Some(Value::Binary(outcome)) = properties.get(OUTCOME_PROPERTY) else {
            return None;
        };
        let mut stamps = Vec::new();
        let mut rest = outcome.as_slice();
        while let Some((&tag, tail)) = rest.split_first() {
            rest = tail;
            stamps.push(match tag {
                0 => None,
                1 => {
                    let (ticks, tail) = rest.split_first_chunk::<8>()?;
                    rest = tail;
                    Some(Ticks(i64::from_le_bytes(*ticks)))
                }
                _ => return None,
            });
        }
        let outcome = RecordedOutcome::Committed(stamps);
        Some(Recorded { digest, outcome })
    }
}

/// Where the record of `key` sent by `scope` (the caller's credential) is: a partition of its own
/// (so that records of one caller never queue on one lock), the empty row key.
pub fn record_key(scope: &str, key: &IdempotencyKey) -> EntityKey {
    EntityKey {
        partition_key: format!("{scope}:{}", key.as_str()),
        row_key: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_printable_ascii_of_at_most_128_bytes_and_empty_is_none() {
        assert_eq!(IdempotencyKey::parse("").unwrap(), None);
        let uuid = "0190b4d2-7c1e-7a3b-9c4d-5e6f7a8b9c0d";
        assert_eq!(IdempotencyKey::parse(uuid).unwrap().unwrap().as_str(), uuid);
        assert!(IdempotencyKey::parse(&"k".repeat(128)).unwrap().is_some());
        for bad in [
            "k".repeat(129),
            "a b".into(),
            "a/b".into(),
            "a?b".into(),
            "é".into(),
        ] {
            assert!(IdempotencyKey::parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_digest_tells_requests_apart_and_repeats_for_the_same_one() {
        let a = RequestDigest::of(&("write", "orders", 1));
        assert_eq!(a, RequestDigest::of(&("write", "orders", 1)));
        assert_ne!(a, RequestDigest::of(&("write", "orders", 2)));
    }

    #[test]
    fn a_sealed_record_reads_back_its_digest_and_each_operation_s_stamp() {
        let digest = RequestDigest::of(&"request");
        let key = EntityKey::new("p".into(), "r".into()).unwrap();
        let entity = |ticks| StoredEntity {
            key: key.clone(),
            properties: Properties::new(),
            timestamp: Ticks(ticks),
        };
        let mut record = StoredEntity {
            properties: record_properties(digest, 600),
            ..entity(7)
        };
        // Two batches, positions interleaved; position 1 stored nothing (a delete).
        let first = ([0, 2], [Some(entity(5)), Some(entity(6))]);
        let second = ([1], [None]);
        let parts = [(&first.0[..], &first.1[..]), (&second.0[..], &second.1[..])];
        seal_outcome(&mut record, parts.into_iter(), 3);
        let recorded = Recorded::read(&record.properties).unwrap();
        assert_eq!(recorded.digest, digest);
        let stamps = vec![Some(Ticks(5)), None, Some(Ticks(6))];
        assert_eq!(recorded.outcome, RecordedOutcome::Committed(stamps));
        assert_eq!(Recorded::read(&Properties::new()), None);
    }

    #[test]
    fn a_refusal_reads_back_with_its_position_and_detail_and_an_invalid_entity_is_not_kept() {
        let digest = RequestDigest::of(&"request");
        let condition = Refusal::PatchConditionFalse {
            condition: "N gt 3".into(),
        };
        for (position, refusal) in [(2, Refusal::NotFound), (0, condition)] {
            let properties = refusal_properties(digest, 60, position, &refusal).unwrap();
            let recorded = Recorded::read(&properties).unwrap();
            assert_eq!(recorded.digest, digest);
            assert_eq!(
                recorded.outcome,
                RecordedOutcome::Refused(position, refusal)
            );
        }
        let invalid = Refusal::Invalid(ValidationError::EntityMissing);
        assert_eq!(refusal_properties(digest, 60, 0, &invalid), None);
    }

    #[test]
    fn a_bulk_delete_s_record_reads_back_its_count_and_continuation() {
        let digest = RequestDigest::of(&"delete");
        for continuation in [Some("token"), None] {
            let properties = bulk_delete_properties(digest, 600, 1000, continuation);
            let recorded = Recorded::read(&properties).unwrap();
            assert_eq!(recorded.digest, digest);
            let continuation = continuation.map(str::to_owned);
            let count = 1000;
            let deleted = RecordedOutcome::Deleted {
                count,
                continuation,
            };
            assert_eq!(recorded.outcome, deleted);
        }
    }
}
