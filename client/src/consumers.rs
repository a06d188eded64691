//! What a table's consumer groups stand at, as the server reads their leases
//! (`ListConsumers`): each range's holder, lease end, checkpoint and lag, for every group of
//! [`crate::FeedProcessor`]s on the table, in whatever process or language they run.

use std::time::Duration;

use trestle_proto::pb;

use crate::changes::FeedCursor;
use crate::convert::timestamp_from_pb;
use crate::{DateTime, Result, TableClient};

/// A consumer group's ranges, in range order.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerGroup {
    /// The group's name.
    pub name: String,
    /// Its ranges.
    pub ranges: Vec<RangeStatus>,
}

/// Where one range of a group stands.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeStatus {
    /// The range (its feed segment's number).
    pub range: u32,
    /// The worker holding its lease, if any worker does now.
    pub holder: Option<String>,
    /// When the lease ends unless renewed (`None`: never taken).
    pub expires_at: Option<DateTime>,
    /// The group's checkpoint (`None`: the feed's start).
    pub cursor: Option<FeedCursor>,
    /// How many of the range's records lie after the checkpoint.
    pub pending: u64,
    /// When the oldest of them was committed.
    pub oldest_pending_at: Option<DateTime>,
}

impl RangeStatus {
    /// How far the range is behind: the age of its oldest record not yet processed (zero when
    /// none is pending).
    pub fn lag(&self) -> Duration {
        let Some(oldest) = self.oldest_pending_at else {
            return Duration::ZERO;
        };
        let behind = DateTime::now().ticks() - oldest.ticks();
        Duration::from_nanos(u64::try_from(behind).unwrap_or(0).saturating_mul(100))
    }
}

/// A table's consumer groups, and whether their pending counts are complete.
#[derive(Debug, Clone, PartialEq)]
pub struct Consumers {
    /// The groups, by name.
    pub groups: Vec<ConsumerGroup>,
    /// Whether every pending record was counted (the server examines at most 20,000 feed
    /// records a call; past that the counts are lower bounds).
    pub pending_complete: bool,
}

impl TableClient {
    /// The consumer groups on this table's feed whose leases are in the default lease table
    /// (this table's name with `Leases` appended).
    pub async fn consumers(&self) -> Result<Consumers> {
        self.consumers_in("", "").await
    }

    /// The consumer groups on this table's feed with leases in table `leases` (empty: the
    /// default), only group `group` if not empty.
    ///
    /// # Errors
    /// `TableNotFound` for either table; `InvalidInput` for a table keeping no feed, or a lease
    /// table holding more than 4,096 leases (ask for one group).
    pub async fn consumers_in(&self, leases: &str, group: &str) -> Result<Consumers> {
        let request = pb::ListConsumersRequest {
            table: self.name().to_owned(),
            leases_table: leases.to_owned(),
            group: group.to_owned(),
        };
        let answer = (self.client)
            .read(request, |mut c, r| async move { c.list_consumers(r).await })
            .await?;
        let range_from_pb = |lease: pb::ConsumerLease| RangeStatus {
            range: lease.range,
            holder: lease.held.then_some(lease.owner),
            expires_at: lease.expires_at.map(timestamp_from_pb),
            cursor: lease.cursor.parse().ok(),
            pending: lease.pending,
            oldest_pending_at: lease.oldest_pending_at.map(timestamp_from_pb),
        };
        let groups = (answer.groups.into_iter())
            .map(|group| ConsumerGroup {
                name: group.name,
                ranges: group.leases.into_iter().map(range_from_pb).collect(),
            })
            .collect();
        Ok(Consumers {
            groups,
            pending_complete: answer.pending_complete,
        })
    }
}
