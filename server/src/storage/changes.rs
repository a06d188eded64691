//! Change records, as every store keeps them: what a commit of a table with a change feed writes
//! beside its rows, in the same atomic write, one record per entity it changes; and where a
//! reader is in the feed.
//!
//! A record names its position: the transaction that wrote it (a number from the store, the same
//! for every record of one transaction, across partitions and tables) and its place in it.
//! Positions only grow in the order readers may see them: a store shows a reader the records of a
//! transaction only once every earlier transaction is finished and durable, so a reader that
//! resumes after a position misses nothing and sees nothing twice.

use crate::model::{ChangeKind, CommitPlan, EntityKey, PlannedChange, StoredEntity, Ticks};
use crate::storage::{codec, EntityView, StorageError};

/// The versions of a record's encoding: without a before image, and with one.
const RECORD_V1: u8 = 1;
const RECORD_V2: u8 = 2;

/// A place in a table's change feed: a transaction, and a record of it. Its text (a feed
/// cursor) is `<transaction>-<record>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FeedPosition {
    /// The transaction (store-wide; shared by every record of one transaction).
    pub transaction: u64,
    /// The record's place in its transaction, in the transaction's operation order.
    pub record: u32,
}

impl std::fmt::Display for FeedPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.transaction, self.record)
    }
}

impl FeedPosition {
    /// The position a cursor's text names (`<transaction>-<record>`, as [`FeedPosition`]'s
    /// `Display` writes it), if it is one.
    pub fn parse(text: &str) -> Option<FeedPosition> {
        let (transaction, record) = text.split_once('-')?;
        Some(FeedPosition {
            transaction: transaction.parse().ok()?,
            record: record.parse().ok()?,
        })
    }

    /// The position just before every record of `transaction` and later ones.
    pub fn before_transaction(transaction: u64) -> FeedPosition {
        match transaction.checked_sub(1) {
            Some(previous) => FeedPosition {
                transaction: previous,
                record: u32::MAX,
            },
            None => FeedPosition::default(),
        }
    }
}

/// Where a table's feed ends, seen at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedEnd {
    /// After every record readable at the instant and before every record to come.
    pub readable: FeedPosition,
    /// After the records of every commit that had ended at the instant, some of which may not
    /// be readable yet (an earlier transaction was still running, or not yet durable).
    pub committed: FeedPosition,
}

impl FeedEnd {
    /// The ends of a feed whose readers may read below transaction `horizon`, and whose next
    /// transaction will be numbered `next` or later.
    pub fn new(horizon: u64, next: u64) -> FeedEnd {
        FeedEnd {
            readable: FeedPosition::before_transaction(horizon),
            committed: FeedPosition::before_transaction(next),
        }
    }
}

/// How much one read of a feed returns at most: a number of records and their stored bytes. A
/// read stops before the record that would pass either, except that the first record always
/// comes (an entity and its before image, 2 MiB at most); so a batch of the stream framing's byte
/// bound fits a client's default 4 MiB message limit whatever the entities' sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedBatch {
    /// Most records.
    pub records: usize,
    /// Most bytes of stored records (past the first).
    pub bytes: usize,
}

impl FeedBatch {
    /// At most `records` records, of any size (for housekeeping, which keeps only positions).
    pub fn records(records: usize) -> FeedBatch {
        FeedBatch {
            records,
            bytes: usize::MAX,
        }
    }

    /// Whether a batch already holding `held` records of `held_bytes` stored bytes takes one more
    /// of `bytes`.
    pub fn admits(&self, held: usize, held_bytes: usize, bytes: usize) -> bool {
        held == 0 || (held < self.records && held_bytes.saturating_add(bytes) <= self.bytes)
    }
}

/// A change record as read back: the entities it holds stay in their stored form, read in place
/// ([`StoredChange::after`]) by whoever sends them on.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredChange {
    /// Where it is.
    pub position: FeedPosition,
    /// How the entity changed.
    pub kind: ChangeKind,
    /// When the commit was (what retention counts from).
    pub at: Ticks,
    /// The entity.
    pub key: EntityKey,
    /// The entity as stored after the change; empty for a delete.
    after: Vec<u8>,
    /// The entity as stored before the change; empty where the feed keeps no before images or
    /// there was none.
    before: Vec<u8>,
}

impl StoredChange {
    /// The entity as stored after the change (Timestamp, and so ETag, included), or `None` for a
    /// delete.
    pub fn after(&self) -> Result<Option<EntityView<'_>>, StorageError> {
        self.view(&self.after)
    }

    /// The entity as it was before the change, where the feed keeps before images and there was
    /// one.
    pub fn before(&self) -> Result<Option<EntityView<'_>>, StorageError> {
        self.view(&self.before)
    }

    fn view<'a>(&'a self, stored: &'a [u8]) -> Result<Option<EntityView<'a>>, StorageError> {
        if stored.is_empty() {
            return Ok(None);
        }
        let key = &self.key;
        EntityView::parse(&key.partition_key, &key.row_key, stored).map(Some)
    }

    /// The entities after and before the change, decoded.
    #[cfg(test)]
    pub(crate) fn entities(
        &self,
    ) -> Result<(Option<StoredEntity>, Option<StoredEntity>), StorageError> {
        let entity = |stored: &[u8]| match stored.is_empty() {
            true => Ok(None),
            false => codec::decode_selected(self.key.clone(), stored, None).map(Some),
        };
        Ok((entity(&self.after)?, entity(&self.before)?))
    }
}

/// The encoded records of what `plan` changes in partition `partition_key` (none if it changes
/// nothing), each as [`record`] writes it; a change that replaces an expired row the sweep had
/// not removed yet is preceded by that row's expiry, so the feed never shows two inserts in a row.
pub(crate) fn records_of(plan: &CommitPlan, partition_key: &str) -> Vec<Vec<u8>> {
    let mut records = Vec::with_capacity(plan.changes.len());
    for change in &plan.changes {
        if let Some(expired) = &change.replaces_expired {
            // The expiry the sweep had not written yet, first.
            let expiry = PlannedChange {
                writes: false,
                kind: ChangeKind::Expire,
                before: expired.before.clone(),
                replaces_expired: None,
                ..change.clone()
            };
            records.push(record(plan, &expiry, partition_key, &[]));
        }
        let after = match change.writes {
            true => plan.results[change.operation].as_ref().map(stored),
            false => None,
        };
        records.push(record(
            plan,
            change,
            partition_key,
            &after.unwrap_or_default(),
        ));
    }
    records
}

/// The encoded record of `change`, one of `plan`'s changes in partition `partition_key`, whose
/// entity after it is stored as `after` (empty for a removal): `[version 1][kind][the commit's
/// time: i64 LE ticks][partition key: u16 LE length, UTF-8][row key: the same][the entity's
/// stored record, for a write]`; with a before image, `[version 2]` and the same up to the keys,
/// then `[the stored record after: u32 LE length (0 for none), bytes][the stored record
/// before]`.
pub(crate) fn record(
    plan: &CommitPlan,
    change: &PlannedChange,
    partition_key: &str,
    after: &[u8],
) -> Vec<u8> {
    let version = match change.before {
        Some(_) => RECORD_V2,
        None => RECORD_V1,
    };
    let keys = 4 + partition_key.len() + change.row_key.len();
    let mut out = Vec::with_capacity(2 + 8 + keys + 4 + after.len());
    out.extend_from_slice(&[version, change.kind.code()]);
    out.extend_from_slice(&plan.stamped.0.to_le_bytes());
    put_text(&mut out, partition_key);
    put_text(&mut out, &change.row_key);
    if let Some(before) = &change.before {
        out.extend_from_slice(&(after.len() as u32).to_le_bytes());
        out.extend_from_slice(after);
        out.extend_from_slice(&stored(before));
    } else {
        out.extend_from_slice(after);
    }
    out
}

fn stored(entity: &StoredEntity) -> Vec<u8> {
    codec::encode(entity.timestamp, &entity.properties)
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// The change a record [`records_of`] wrote holds, at `position`.
pub(crate) fn decode(position: FeedPosition, bytes: &[u8]) -> Result<StoredChange, StorageError> {
    let corrupt = || StorageError::Corrupt("unreadable change record".into());
    let (&[version, kind], rest) = bytes.split_first_chunk::<2>().ok_or_else(corrupt)?;
    let kind = ChangeKind::from_code(kind).filter(|_| matches!(version, RECORD_V1 | RECORD_V2));
    let kind = kind.ok_or_else(corrupt)?;
    let (at, rest) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
    let at = Ticks(i64::from_le_bytes(*at));
    let (partition_key, rest) = take_text(rest).ok_or_else(corrupt)?;
    let (row_key, rest) = take_text(rest).ok_or_else(corrupt)?;
    let key = EntityKey {
        partition_key: partition_key.to_owned(),
        row_key: row_key.to_owned(),
    };
    let (after, before) = match version {
        RECORD_V1 => (rest, &[][..]),
        _ => {
            let (length, rest) = rest.split_first_chunk::<4>().ok_or_else(corrupt)?;
            let length = u32::from_le_bytes(*length) as usize;
            let before = rest.get(length..).filter(|before| !before.is_empty());
            (&rest[..length.min(rest.len())], before.ok_or_else(corrupt)?)
        }
    };
    let removed = matches!(kind, ChangeKind::Delete | ChangeKind::Expire);
    if after.is_empty() != removed {
        return Err(corrupt());
    }
    let change = StoredChange {
        position,
        kind,
        at,
        key,
        after: after.to_vec(),
        before: before.to_vec(),
    };
    // The headers are checked here, the properties as they are read.
    change.after()?;
    change.before()?;
    Ok(change)
}

fn take_text(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let (length, rest) = bytes.split_first_chunk::<2>()?;
    let length = usize::from(u16::from_le_bytes(*length));
    let (text, rest) = (rest.get(..length)?, rest.get(length..)?);
    Some((std::str::from_utf8(text).ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        plan_commit, EntityKey, NewEntity, Operation, PlanRules, Properties, Ticks, Value,
    };

    fn entity(row: &str) -> NewEntity {
        let key = EntityKey::new("p".into(), row.into()).unwrap();
        let properties = Properties::from([("N".to_owned(), Value::Int32(7))]);
        NewEntity::new(key, properties).unwrap()
    }

    #[test]
    fn records_read_back_as_written() {
        let existing = plan_commit(
            "p",
            vec![Operation::Insert(entity("b"))],
            vec![None],
            Ticks::next_commit(),
            PlanRules::default(),
        )
        .unwrap()
        .results;
        let operations = vec![
            Operation::Insert(entity("a")),
            Operation::Delete {
                key: EntityKey::new("p".into(), "b".into()).unwrap(),
                if_match: crate::model::IfMatch::Any,
            },
        ];
        let plan = plan_commit(
            "p",
            operations,
            vec![None, existing[0].clone()],
            Ticks::next_commit(),
            PlanRules::default(),
        )
        .unwrap();
        let records = records_of(&plan, "p");
        assert_eq!(records.len(), 2);
        let at = |record| FeedPosition {
            transaction: 9,
            record,
        };
        let inserted = decode(at(0), &records[0]).unwrap();
        assert_eq!(inserted.kind, ChangeKind::Insert);
        assert_eq!(inserted.key.row_key, "a");
        assert_eq!(
            inserted.entities().unwrap(),
            (Some(plan.results[0].clone().unwrap()), None)
        );
        let deleted = decode(at(1), &records[1]).unwrap();
        assert_eq!(deleted.kind, ChangeKind::Delete);
        assert_eq!(deleted.entities().unwrap(), (None, None));
        for cut in 0..records[0].len().min(8) {
            assert!(decode(at(0), &records[0][..cut]).is_err(), "cut at {cut}");
        }
        // With before images: a delete's record holds the entity it removed.
        let with_before = PlanRules {
            before_images: true,
            ..PlanRules::default()
        };
        let delete = Operation::Delete {
            key: EntityKey::new("p".into(), "b".into()).unwrap(),
            if_match: crate::model::IfMatch::Any,
        };
        let plan = plan_commit(
            "p",
            vec![delete],
            vec![existing[0].clone()],
            Ticks::next_commit(),
            with_before,
        )
        .unwrap();
        let record = &records_of(&plan, "p")[0];
        let deleted = decode(at(2), record).unwrap();
        assert_eq!(deleted.kind, ChangeKind::Delete);
        assert_eq!(deleted.entities().unwrap(), (None, existing[0].clone()));
        for cut in 0..record.len() {
            let read = decode(at(2), &record[..cut]).and_then(|change| change.entities());
            assert!(read.is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_row_that_expired_unswept_is_shown_expired_before_it_is_replaced() {
        use crate::model::{TimeToLive, TICKS_PER_SECOND};
        let ttl = PlanRules {
            time_to_live: Some(TimeToLive {
                default_seconds: Some(1),
            }),
            before_images: true,
            ..PlanRules::default()
        };
        let written = entity("a");
        let expired = StoredEntity {
            key: written.key.clone(),
            properties: written.properties.clone(),
            timestamp: Ticks(1),
        };
        let plan = plan_commit(
            "p",
            vec![Operation::Insert(entity("a"))],
            vec![Some(expired.clone())],
            Ticks(10 * TICKS_PER_SECOND),
            ttl,
        )
        .unwrap();
        let records = records_of(&plan, "p");
        let at = |record| FeedPosition {
            transaction: 3,
            record,
        };
        let kinds: Vec<ChangeKind> = records
            .iter()
            .enumerate()
            .map(|(n, record)| decode(at(n as u32), record).unwrap().kind)
            .collect();
        assert_eq!(kinds, [ChangeKind::Expire, ChangeKind::Insert]);
        let expiry = decode(at(0), &records[0]).unwrap();
        assert_eq!(expiry.entities().unwrap(), (None, Some(expired)));
    }
}
