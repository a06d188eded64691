//! `ReadChanges`: a table's change feed streamed from a cursor, a batch at a time read on the
//! blocking pool; with `follow`, a reader that has caught up waits for the table's watcher to
//! see new commits ([`FeedWatch`]), until the reader goes away. A token bounded to a key range is shown only
//! the records of its range, a reader of one partition or one segment only that partition's or
//! segment's, and a reader with a filter only the records it matches ([`FeedFilter`]). The stream
//! holds the request's in-flight permit and a place among its connection's open scans while it
//! lives. Its batches are the stream framing's ([`STREAM_BATCH_BYTES`], read so by the store:
//! [`FeedBatch`]), each holding its share of the streams' memory budget until the transport takes
//! it, as a streamed scan's do.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;
use trestle_proto::access::Permissions;
use trestle_proto::pb;

use super::reply::ChangesReply;
use super::status::to_status;
use super::stream::{Holds, StreamLimits, STREAM_BATCH_BYTES};
use super::{invalid, wire};
use crate::auth::Access;
use crate::error::TableError;
use crate::executor::Executor;
use crate::feed_filter::{FeedFilter, Matched};
use crate::feed_watch::FeedWatch;
use crate::model::{ChangeKind, Segment, ValidationError, WorkBudget};
use crate::storage::{FeedBatch, FeedEnd, FeedPosition, StorageError, StoredChange};

/// What one batch holds at most: 500 records, and the stream framing's bytes.
const BATCH: FeedBatch = FeedBatch {
    records: 500,
    bytes: STREAM_BATCH_BYTES,
};
/// How often a caught-up reader without `follow` looks for the records it still waits for.
const SETTLE_EVERY: Duration = Duration::from_millis(5);
/// How long a read without `follow` waits, caught up, for the records of commits that had ended
/// when it began but are not readable yet (behind a transaction still running then); it ends at
/// its cursor after that, and a later read from the cursor finds them.
const SETTLE_AT_MOST: Duration = Duration::from_secs(10);

/// The batches of a feed, then its end (or the status that ended it).
pub(crate) type ChangeStream = Pin<Box<dyn Stream<Item = Result<ChangesReply, Status>> + Send>>;

/// A reader of one table's feed, and where it is.
pub(crate) struct Reader {
    table: String,
    after: Option<FeedPosition>,
    follow: bool,
    /// Only this partition's records, if given.
    partition_key: Option<String>,
    /// Start after the newest record (the first response tells where that is).
    from_end: bool,
    /// Only the records it matches, if given ([`FeedFilter`]).
    filter: Option<FeedFilter>,
    /// Only the records of these segments' partitions, if given.
    segments: Option<SegmentsShown>,
    access: Access,
    /// What its buffered batches may hold.
    limits: StreamLimits,
    /// Held while the stream lives (the reader moves into its task).
    _holds: Holds,
}

/// An answer on its way to the reader, with its batch's share of the memory budget.
struct Framed {
    answer: Result<ChangesReply, Status>,
    _memory: Option<OwnedSemaphorePermit>,
}

impl Reader {
    /// The reader `request` asks for, by a caller with `access`, holding `holds`, its batches
    /// within `limits`.
    pub(crate) fn new(
        request: pb::ReadChangesRequest,
        access: Access,
        limits: StreamLimits,
        holds: Holds,
        work_budget: WorkBudget,
    ) -> Result<Reader, Status> {
        let filter =
            FeedFilter::parse(&request.filter, &mut work_budget.spend()).map_err(invalid)?;
        let (segments, after) = SegmentsShown::of(&request)?;
        Ok(Reader {
            table: request.table,
            after,
            follow: request.follow,
            partition_key: Some(request.partition_key).filter(|pk| !pk.is_empty()),
            from_end: request.from_end,
            filter,
            segments,
            access,
            limits,
            _holds: holds,
        })
    }

    /// Reads the first batch (so that a table without a feed is refused before the stream
    /// begins), then streams on a task of its own.
    pub(crate) async fn start(
        mut self,
        executor: Executor,
        feeds: &FeedWatch,
    ) -> Result<ChangeStream, Status> {
        // Before the first read: a commit after it wakes the follower.
        let mut commits = self.follow.then(|| feeds.subscribe(&self.table));
        let (sender, receiver) = mpsc::channel(1);
        let end = self.end(&executor).await?;
        if self.from_end {
            self.after = Some(end.readable);
            let at_end = ChangesReply {
                changes: Vec::new(),
                cursor: cursor_of(end.readable),
            };
            let framed = Framed {
                answer: Ok(at_end),
                _memory: None,
            };
            sender.try_send(framed).expect("a new channel has room");
        }
        let first = self.read(&executor).await?;
        tokio::spawn(async move {
            let settle_until = Instant::now() + SETTLE_AT_MOST;
            let (mut batch, mut memory) = first;
            loop {
                if batch.is_empty() {
                    drop(memory.take());
                    if !self.follow
                        && (Instant::now() >= settle_until
                            || self.has_passed(&executor, end.committed).await)
                    {
                        return;
                    }
                    let behind = commits.as_ref().is_some_and(|commits| {
                        let found = *commits.borrow();
                        found.is_some_and(|found| self.after.is_none_or(|after| after < found))
                    });
                    let woken = async {
                        match commits.as_mut() {
                            // Woken for a record this read did not reach yet: read again soon.
                            Some(_) if behind => {
                                tokio::time::sleep(crate::feed_watch::LOOK_EVERY).await;
                                true
                            }
                            Some(commits) => commits.changed().await.is_ok(),
                            None => {
                                tokio::time::sleep(SETTLE_EVERY).await;
                                true
                            }
                        }
                    };
                    tokio::select! {
                        () = sender.closed() => return,
                        woken = woken => { if !woken { return } },
                    }
                } else {
                    let answer = self
                        .answer(batch)
                        .map_err(|error| to_status(&TableError::from(error)));
                    let failed = answer.is_err();
                    let framed = Framed {
                        answer,
                        _memory: memory.take(),
                    };
                    if sender.send(framed).await.is_err() || failed {
                        return;
                    }
                }
                (batch, memory) = match self.read(&executor).await {
                    Ok(read) => read,
                    Err(status) => {
                        let failed = Framed {
                            answer: Err(status),
                            _memory: None,
                        };
                        let _ = sender.send(failed).await;
                        return;
                    }
                };
            }
        });
        // A batch's memory goes back to the budget as the transport takes it.
        let answers = ReceiverStream::new(receiver).map(|framed| framed.answer);
        Ok(Box::pin(answers))
    }

    /// Where the feed ends now.
    async fn end(&self, executor: &Executor) -> Result<FeedEnd, Status> {
        let table = self.table.clone();
        let end = executor.blocking(move |engine| engine.feed_end(&table));
        Ok(end.await?)
    }

    /// Whether the reader, caught up, has seen every record up to `position`: true once
    /// `position` is readable and a read after that finds nothing more (an error here is left for
    /// the next read to report).
    async fn has_passed(&self, executor: &Executor, position: FeedPosition) -> bool {
        match self.end(executor).await {
            Ok(end) if end.readable >= position => {
                matches!(self.read(executor).await, Ok((batch, _)) if batch.is_empty())
            }
            _ => false,
        }
    }

    /// The next batch after the reader's position, with its share of the memory budget (taken
    /// before it is read; `ServerBusy` if none frees within the stall time).
    async fn read(
        &self,
        executor: &Executor,
    ) -> Result<(Vec<StoredChange>, Option<OwnedSemaphorePermit>), Status> {
        let memory = self
            .limits
            .reserve_batch(Instant::now() + self.limits.stall)
            .await?;
        let (table, after) = (self.table.clone(), self.after);
        let batch = executor.blocking(move |engine| engine.read_changes(&table, after, BATCH));
        Ok((batch.await?, Some(memory)))
    }

    /// The response of `batch`, of the records the caller may see, written from their stored
    /// bytes; the reader moves past all.
    fn answer(&mut self, batch: Vec<StoredChange>) -> Result<ChangesReply, StorageError> {
        self.after = batch.last().map(|change| change.position).or(self.after);
        let mut changes = Vec::with_capacity(batch.len() * 256);
        for change in &batch {
            let key = &change.key;
            let pk = &key.partition_key;
            let other_partition = (self.partition_key.as_ref()).is_some_and(|only| only != pk);
            let other_segment = (self.segments.as_ref())
                .is_some_and(|segments| !segments.shows(pk, change.position));
            if other_partition || other_segment {
                continue;
            }
            let read = Permissions::READ;
            let access = &self.access;
            if access
                .entity(&self.table, read, &key.partition_key, &key.row_key)
                .is_err()
            {
                continue;
            }
            let matched = match &self.filter {
                None => pb::ChangeMatch::Unspecified,
                Some(filter) => match filter.matched(change)? {
                    None => continue,
                    Some(Matched::After) => pb::ChangeMatch::Entity,
                    Some(Matched::Before) => pb::ChangeMatch::Before,
                    Some(Matched::Both) => pb::ChangeMatch::Both,
                },
            };
            let kind = kind_to_pb(change.kind) as i32;
            let cursor = cursor_of(change.position);
            wire::put_change(change, kind, &cursor, matched as i32, &mut changes)?;
        }
        Ok(ChangesReply {
            changes,
            cursor: self.after.map(cursor_of).unwrap_or_default(),
        })
    }
}

/// The segments whose records a reader is shown, each after its own position (`None`: from the
/// feed's start).
struct SegmentsShown {
    total: u32,
    after: HashMap<u32, Option<FeedPosition>>,
}

impl SegmentsShown {
    /// The segments `request` names (`segment`, or `segment_cursors`), if any, and the position
    /// the reader starts after (the request's cursor, or the earliest of the segments').
    fn of(
        request: &pb::ReadChangesRequest,
    ) -> Result<(Option<SegmentsShown>, Option<FeedPosition>), Status> {
        let (total, from_cursor) = (request.total_segments, request.cursor.as_str());
        let after = match from_cursor {
            "" => None,
            _ if request.from_end => {
                return Err(invalid(ValidationError::Argument(
                    "give either a cursor or from_end, not both".into(),
                )))
            }
            cursor => Some(parse_cursor(cursor).map_err(invalid)?),
        };
        if request.segment_cursors.is_empty() {
            let segment = Segment::of(request.segment, total).map_err(invalid)?;
            let shown = segment.map(|segment| SegmentsShown {
                total,
                after: HashMap::from([(segment.index(), None)]),
            });
            return Ok((shown, after));
        }
        if request.segment != 0 || after.is_some() || request.from_end {
            return Err(invalid(ValidationError::Argument(
                "segment_cursors give each segment's cursor: not with segment, cursor or \
                 from_end"
                    .into(),
            )));
        }
        let mut shown = SegmentsShown {
            total,
            after: HashMap::new(),
        };
        for from in &request.segment_cursors {
            let refused = |text: String| invalid(ValidationError::Argument(text));
            let Some(segment) = Segment::of(from.segment, total).map_err(invalid)? else {
                return Err(refused("segment_cursors need total_segments".into()));
            };
            let cursor = match from.cursor.as_str() {
                "" => None,
                cursor => Some(parse_cursor(cursor).map_err(invalid)?),
            };
            if shown.after.insert(segment.index(), cursor).is_some() {
                let index = segment.index();
                return Err(refused(format!(
                    "segment_cursors name segment {index} twice"
                )));
            }
        }
        let earliest = shown.after.values().min().copied().flatten();
        Ok((Some(shown), earliest))
    }

    /// Whether the record of `partition_key`'s partition at `position` is shown.
    fn shows(&self, partition_key: &str, position: FeedPosition) -> bool {
        let segment = Segment::index_of(partition_key, self.total);
        (self.after.get(&segment)).is_some_and(|after| after.is_none_or(|after| position > after))
    }
}

fn kind_to_pb(kind: ChangeKind) -> pb::ChangeKind {
    match kind {
        ChangeKind::Insert => pb::ChangeKind::Insert,
        ChangeKind::Replace => pb::ChangeKind::Replace,
        ChangeKind::Merge => pb::ChangeKind::Merge,
        ChangeKind::Patch => pb::ChangeKind::Patch,
        ChangeKind::Delete => pb::ChangeKind::Delete,
        ChangeKind::Expire => pb::ChangeKind::Expire,
    }
}

/// A cursor's text: `<transaction>-<record>`.
fn cursor_of(position: FeedPosition) -> String {
    position.to_string()
}

fn parse_cursor(text: &str) -> Result<FeedPosition, ValidationError> {
    FeedPosition::parse(text).ok_or_else(|| {
        ValidationError::Argument(format!(
            "cursor {text:?} is not one that ReadChanges gave (`<transaction>-<record>`)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_others_are_refused() {
        let position = FeedPosition {
            transaction: 1 << 40,
            record: 7,
        };
        assert_eq!(parse_cursor(&cursor_of(position)).unwrap(), position);
        for bad in [
            "",
            "7",
            "a-1",
            "1-",
            "-1",
            "1-2-3",
            "1--2",
            "18446744073709551616-0",
        ] {
            assert!(parse_cursor(bad).is_err(), "{bad}");
        }
    }
}
