//! The consumer groups of a table's change feed, as the SDK's feed processor keeps them
//! (docs/semantics.md#consumer-groups): in a lease table (`<table>Leases` unless named), one
//! partition per group, one entity per range of the feed (row key the range's number, `0000`
//! up; `Owner`, `ExpiresMs`, `Cursor`), each range being the feed segment of that number among
//! the group's ranges. `ListConsumers` reads them here: who holds each range and until when,
//! where its checkpoint is, and how many of the feed's records after the checkpoint are the
//! range's (its lag, with the oldest one's commit time).
//!
//! Bounded by: at most [`MAX_LEASES`] lease entities read (refused past it, naming the group
//! to ask for), and at most [`MAX_EXAMINED`] feed records examined a call for the pending
//! counts, in the stream framing's batches ([`FeedBatch`]); past it the counts are lower
//! bounds, and the answer says so.

use std::collections::BTreeMap;

use crate::engine::{Engine, MatchSink};
use crate::error::TableError;
use crate::model::{Segment, Ticks, ValidationError, ValueRef};
use crate::query::QuerySpec;
use crate::storage::{EntityView, FeedBatch, FeedPosition, StorageError};

/// The most lease entities one call reads: four groups of the processor's most ranges.
pub const MAX_LEASES: usize = 4096;
/// The most feed records one call examines to count what waits after the checkpoints.
pub const MAX_EXAMINED: usize = 20_000;
/// Feed records read at a time.
const BATCH: FeedBatch = FeedBatch {
    records: 500,
    bytes: 512 * 1024,
};

/// One range's lease, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeLease {
    /// The range (its feed segment's number).
    pub range: u32,
    /// The worker holding it; empty: none.
    pub owner: String,
    /// When the lease ends unless renewed, in milliseconds since the Unix epoch.
    pub expires_ms: i64,
    /// Where the group has processed the range to; `None`: the feed's start.
    pub cursor: Option<FeedPosition>,
    /// The range's records after the cursor (counted up to the call's bound).
    pub pending: u64,
    /// When the oldest of them was committed.
    pub oldest_pending: Option<Ticks>,
}

/// A group and its ranges, in range order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroup {
    /// The group's name.
    pub name: String,
    /// Its ranges' leases.
    pub ranges: Vec<RangeLease>,
}

/// What `ListConsumers` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumers {
    /// The groups, by name.
    pub groups: Vec<ConsumerGroup>,
    /// Whether every pending record was counted (else the counts are lower bounds).
    pub pending_complete: bool,
}

/// The lease entities of a page, as read.
struct Leases(Vec<(String, RangeLease)>);

impl MatchSink for Leases {
    fn take(&mut self, entity: &EntityView<'_>) -> Result<usize, StorageError> {
        let Ok(range) = entity.row_key.parse::<u32>() else {
            return Ok(0);
        };
        let owner = match entity.property("Owner")? {
            Some(ValueRef::String(owner)) => owner.to_owned(),
            _ => String::new(),
        };
        let expires_ms = match entity.property("ExpiresMs")? {
            Some(ValueRef::Int64(ms)) => ms,
            Some(ValueRef::Int32(ms)) => i64::from(ms),
            _ => 0,
        };
        let cursor = match entity.property("Cursor")? {
            Some(ValueRef::String(cursor)) if !cursor.is_empty() => FeedPosition::parse(cursor),
            _ => None,
        };
        let lease = RangeLease {
            range,
            owner,
            expires_ms,
            cursor,
            pending: 0,
            oldest_pending: None,
        };
        self.0.push((entity.partition_key.to_owned(), lease));
        Ok(entity.row_key.len() + 64)
    }
}

impl Engine {
    /// The consumer groups of `table`'s feed kept in `leases` (only `group`'s if given), with
    /// each range's pending records counted (this module's doc).
    pub fn list_consumers(
        &self,
        table: &str,
        leases: &str,
        group: Option<&str>,
    ) -> Result<Consumers, TableError> {
        // A table without a feed is refused up front (one record read), group or none.
        self.read_changes(table, None, FeedBatch::records(1))?;
        let mut groups = self.read_groups(leases, group)?;
        let mut examined = 0;
        let mut pending_complete = true;
        for group in &mut groups {
            pending_complete &= self.count_pending(table, group, &mut examined)?;
        }
        Ok(Consumers {
            groups,
            pending_complete,
        })
    }

    /// The groups' leases in table `leases`.
    fn read_groups(
        &self,
        leases: &str,
        group: Option<&str>,
    ) -> Result<Vec<ConsumerGroup>, TableError> {
        let spec = QuerySpec {
            partition_key: group.map(str::to_owned),
            page_size: 1000,
            ..QuerySpec::default()
        };
        let mut read = Leases(Vec::new());
        let mut token = String::new();
        loop {
            let page = self.query(leases, spec.clone(), &token, &mut read)?;
            if read.0.len() > MAX_LEASES {
                return Err(ValidationError::Argument(format!(
                    "{leases} holds more than {MAX_LEASES} leases: ask for one group"
                ))
                .into());
            }
            match page.continuation_token {
                Some(next) => token = next,
                None => break,
            }
        }
        let mut groups: BTreeMap<String, Vec<RangeLease>> = BTreeMap::new();
        for (name, lease) in read.0 {
            groups.entry(name).or_default().push(lease);
        }
        Ok((groups.into_iter())
            .map(|(name, ranges)| ConsumerGroup { name, ranges })
            .collect())
    }

    /// Counts each of `group`'s ranges' records after its cursor, reading the feed once from
    /// the earliest cursor, `examined` records at most in all: whether it reached the end.
    fn count_pending(
        &self,
        table: &str,
        group: &mut ConsumerGroup,
        examined: &mut usize,
    ) -> Result<bool, TableError> {
        let total = u32::try_from(group.ranges.len()).unwrap_or(u32::MAX);
        if Segment::of(0, total).is_err() {
            return Ok(true);
        }
        let by_range: BTreeMap<u32, usize> = (group.ranges.iter().enumerate())
            .map(|(at, lease)| (lease.range, at))
            .collect();
        let mut after = group
            .ranges
            .iter()
            .map(|lease| lease.cursor)
            .min()
            .flatten();
        loop {
            if *examined >= MAX_EXAMINED {
                return Ok(false);
            }
            let batch = self.read_changes(table, after, BATCH)?;
            let Some(last) = batch.last() else {
                return Ok(true);
            };
            after = Some(last.position);
            for change in &batch {
                *examined += 1;
                let range = Segment::index_of(&change.key.partition_key, total);
                let Some(lease) = by_range.get(&range).map(|&at| &mut group.ranges[at]) else {
                    continue;
                };
                if lease.cursor.is_none_or(|cursor| change.position > cursor) {
                    lease.pending += 1;
                    lease.oldest_pending.get_or_insert(change.at);
                }
            }
        }
    }
}
