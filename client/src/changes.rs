//! A table's change feed (`ReadChanges`) as a stream of typed changes: from the start or a saved
//! cursor, of one partition or all, ending at the newest record or following new ones.

use std::fmt;
use std::str::FromStr;

use futures_util::{stream, TryStreamExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use trestle_proto::pb;

use crate::convert::typed;
use crate::query::{server_messages, EntityStream, Filter};
use crate::{Entity, EntityKey, Error, Result, TableClient};

/// Where a reader is in a change feed: after the record that gave it. Keep it (as text, or
/// through serde) to resume later, on any server of the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FeedCursor(String);

impl fmt::Display for FeedCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for FeedCursor {
    type Err = Error;

    /// A cursor saved as text (the server checks it when the feed is read).
    fn from_str(text: &str) -> Result<FeedCursor> {
        if text.is_empty() {
            return Err(Error::invalid("a feed cursor is not empty"));
        }
        Ok(FeedCursor(text.to_owned()))
    }
}

/// How a commit changed an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// It did not exist (an insert, or an upsert or patch making it).
    Insert,
    /// It was replaced whole.
    Replace,
    /// Properties were merged into it.
    Merge,
    /// Patch steps changed it.
    Patch,
    /// It was deleted.
    Delete,
    /// Its time to live ran out and the server removed it.
    Expire,
}

/// What a table's change feed keeps ([`TableClient::keep_change_feed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedSettings {
    /// How long each record is kept, in seconds (0: a day; at most 30 days).
    pub retention_seconds: u64,
    /// Each record holds the entity as it was before the change too ([`Change::before`]), as
    /// DynamoDB's `NEW_AND_OLD_IMAGES` streams do: what an auditor or a reverse index needs.
    pub before_images: bool,
}

/// One entity's change, as the feed records it.
#[derive(Debug, Clone)]
pub struct Change<T> {
    /// How it changed.
    pub kind: ChangeKind,
    /// The entity's key.
    pub key: EntityKey,
    /// The entity as stored after the change (with its ETag and Timestamp); `None` for a delete
    /// or an expiry.
    pub entity: Option<Entity<T>>,
    /// The entity as it was before the change, on a table whose feed keeps before images
    /// ([`FeedSettings::before_images`]); `None` for an insert. For an expiry, the entity that
    /// expired.
    pub before: Option<Entity<T>>,
    /// The transaction's number, shared by every change of one transaction.
    pub transaction_id: u64,
    /// Resumes the feed after this change.
    pub cursor: FeedCursor,
    /// In a filtered feed ([`ChangeFeed::filter`]), which image of the entity the filter
    /// matched; `None` without a filter.
    pub matched: Option<ChangeMatch>,
}

/// Which image of an entity a filtered feed's change matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeMatch {
    /// The entity as the change left it ([`Change::entity`]).
    Entity,
    /// The entity before the change ([`Change::before`]).
    Before,
    /// Both.
    Both,
}

/// A read of a table's change feed, built up then streamed ([`ChangeFeed::stream`]).
#[derive(Debug, Clone)]
#[must_use = "a change feed reads nothing until streamed"]
pub struct ChangeFeed {
    table: TableClient,
    request: pb::ReadChangesRequest,
}

impl TableClient {
    /// The table's change feed (the table must keep one: [`TableClient::set_change_feed`], or
    /// `change_feed` at creation), from its first record.
    ///
    /// ```
    /// # async fn example(alarms: trestle_client::TableClient) -> trestle_client::Result<()> {
    /// use futures_util::TryStreamExt;
    /// let mut changes = alarms.changes().partition("site-7").follow().stream::<trestle_client::Properties>();
    /// while let Some(change) = changes.try_next().await? {
    ///     println!("{:?} {} (resume with {})", change.kind, change.key.row_key, change.cursor);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn changes(&self) -> ChangeFeed {
        ChangeFeed {
            table: self.clone(),
            request: pb::ReadChangesRequest {
                table: self.name().to_owned(),
                ..Default::default()
            },
        }
    }

    /// Starts (or stops) keeping the table's change feed, each record kept `retention_seconds`
    /// (0: a day; at most 30 days).
    ///
    /// # Errors
    /// `InvalidInput` for a retention over 30 days; `TableNotFound`.
    pub async fn set_change_feed(&self, enabled: bool, retention_seconds: u64) -> Result<()> {
        let settings = FeedSettings {
            retention_seconds,
            before_images: false,
        };
        self.send_change_feed(enabled, settings).await
    }

    /// Starts keeping the table's change feed as `settings` say (or changes them): from the next
    /// commit on, every record is kept and holds what they ask.
    ///
    /// # Errors
    /// `InvalidInput` for a retention over 30 days; `TableNotFound`.
    pub async fn keep_change_feed(&self, settings: FeedSettings) -> Result<()> {
        self.send_change_feed(true, settings).await
    }

    async fn send_change_feed(&self, enabled: bool, settings: FeedSettings) -> Result<()> {
        let request = pb::SetChangeFeedRequest {
            table: self.name().to_owned(),
            enabled,
            retention_seconds: settings.retention_seconds,
            before_images: settings.before_images,
        };
        self.client
            .write(
                request,
                |mut c, r| async move { c.set_change_feed(r).await },
            )
            .await?;
        Ok(())
    }
}

impl TableClient {
    /// Lets the table's entities expire (`enabled`): each after its own `TimeToLive` property's
    /// seconds (an Int32 or Int64, or -1 for never) or else `default_seconds` (0: never), counted
    /// from its last write; or stops it.
    ///
    /// # Errors
    /// `InvalidInput` for a default over ten years; `TableNotFound`.
    pub async fn set_time_to_live(&self, enabled: bool, default_seconds: u64) -> Result<()> {
        let request = pb::SetTimeToLiveRequest {
            table: self.name().to_owned(),
            enabled,
            default_seconds,
        };
        self.client
            .write(
                request,
                |mut c, r| async move { c.set_time_to_live(r).await },
            )
            .await?;
        Ok(())
    }
}

impl ChangeFeed {
    /// Only the changes of partition `partition_key`.
    pub fn partition(mut self, partition_key: impl Into<String>) -> Self {
        self.request.partition_key = partition_key.into();
        self
    }

    /// Only the changes whose entity `filter` matches, as the change left it or, on a feed that
    /// keeps before images, as it was before ([`Change::matched`] says which). A delete or an
    /// expiry leaves no entity: it comes only through its before image.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.request.filter = filter.as_str().to_owned();
        self
    }

    /// Only the changes of segment `segment` of `total` (as [`TableClient::scan_parallel`]
    /// splits a table, by a hash of the PartitionKey): `total` readers, one per segment, together
    /// read every change once, each partition's in one segment and in feed order.
    pub fn segment(mut self, segment: u32, total: u32) -> Self {
        self.request.segment = segment;
        self.request.total_segments = total;
        self
    }

    /// After the change `cursor` came with (a reader resuming where it stopped).
    pub fn from(mut self, cursor: FeedCursor) -> Self {
        self.request.cursor = cursor.0;
        self.request.from_end = false;
        self
    }

    /// After the newest change when the stream opens (its first poll): only changes committed
    /// from then on (instead of a cursor; [`ChangeFeed::cursor_now`] marks "now" at once).
    pub fn from_now(mut self) -> Self {
        self.request.from_end = true;
        self.request.cursor.clear();
        self
    }

    /// The cursor after the newest change now: a reader that starts from it later sees every
    /// change committed since (a cache takes it before it loads).
    pub async fn cursor_now(&self) -> Result<FeedCursor> {
        let mut request = self.request.clone();
        request.from_end = true;
        request.cursor.clear();
        request.follow = false;
        let mut responses = self
            .table
            .client
            .read(request, |mut c, r| async move { c.read_changes(r).await })
            .await?;
        let first = responses.message().await.map_err(Error::from_status)?;
        let cursor = first.map(|response| response.cursor).unwrap_or_default();
        cursor.parse()
    }

    /// Stays open and gives new changes as they commit, instead of ending at the newest.
    pub fn follow(mut self) -> Self {
        self.request.follow = true;
        self
    }

    /// The changes, in feed order, each entity decoded as `T`. Opening is retried as reads are;
    /// an error midway ends the stream with it (`ChangeFeedCursorExpired` when retention has
    /// removed changes after the cursor: read from the start again).
    pub fn stream<T: DeserializeOwned + Send + 'static>(self) -> EntityStream<Change<T>> {
        let opening = async move {
            self.table
                .client
                .read(
                    self.request,
                    |mut c, r| async move { c.read_changes(r).await },
                )
                .await
        };
        let batches = server_messages(opening);
        Box::pin(
            batches
                .map_ok(|batch| stream::iter(batch.changes.into_iter().map(change_from_pb)))
                .try_flatten(),
        )
    }
}

pub(crate) fn change_from_pb<T: DeserializeOwned>(change: pb::Change) -> Result<Change<T>> {
    let kind = match pb::ChangeKind::try_from(change.kind) {
        Ok(pb::ChangeKind::Insert) => ChangeKind::Insert,
        Ok(pb::ChangeKind::Replace) => ChangeKind::Replace,
        Ok(pb::ChangeKind::Merge) => ChangeKind::Merge,
        Ok(pb::ChangeKind::Patch) => ChangeKind::Patch,
        Ok(pb::ChangeKind::Delete) => ChangeKind::Delete,
        Ok(pb::ChangeKind::Expire) => ChangeKind::Expire,
        Ok(pb::ChangeKind::Unspecified) | Err(_) => {
            return Err(Error::invalid(format!(
                "the server sent a change of unknown kind {}",
                change.kind
            )))
        }
    };
    Ok(Change {
        kind,
        key: EntityKey::new(change.partition_key, change.row_key),
        entity: change.entity.map(typed).transpose()?,
        before: change.before.map(typed).transpose()?,
        transaction_id: change.transaction_id,
        cursor: FeedCursor(change.cursor),
        matched: match pb::ChangeMatch::try_from(change.matched) {
            Ok(pb::ChangeMatch::Entity) => Some(ChangeMatch::Entity),
            Ok(pb::ChangeMatch::Before) => Some(ChangeMatch::Before),
            Ok(pb::ChangeMatch::Both) => Some(ChangeMatch::Both),
            Ok(pb::ChangeMatch::Unspecified) | Err(_) => None,
        },
    })
}
