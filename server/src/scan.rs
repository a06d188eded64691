//! Running a planned query: reading the planned key ranges a bounded chunk at a time, evaluating
//! the filter, and resuming from continuation tokens.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::TableError;
use crate::model::{
    Index, IndexRange, IndexState, KeyRange, Ticks, TimeToLive, ValidationError, ValueRef,
};
use crate::query::{
    index_range, order::OrderBy, plan, CarryingToken, CheckedQuery, ContinuationToken, Expr,
    PlanKind, QuerySpec, Record, ResumeAt, ScanPlan, TokenSeal,
};
use crate::storage::{AwaitedSnapshot, EntityView, IndexScan, KeyScan, StorageError, Table, Visit};

/// Most entities one chunk (one page) examines, matching or not: a selective filter over a large
/// table returns a short or empty page with a continuation instead of stalling.
pub const MAX_EXAMINED_PER_CHUNK: usize = 50_000;
/// Most entities one chunk examines in one partition. A scan holds a partition's lock (shared)
/// while it reads the partition, so this bounds how long a commit to a large partition waits
/// behind a scan, while a scan over many small partitions still makes few round trips.
pub const MAX_EXAMINED_IN_ONE_PARTITION: usize = 10_000;
/// Longest time one chunk spends reading.
pub const CHUNK_TIME_BUDGET: Duration = Duration::from_millis(500);

/// A stored entity as a filter reads it: in place, each property it names found in the stored
/// bytes and decoded alone; the first corrupt property met is kept to fail the scan with.
struct FilterView<'v, 'a> {
    entity: &'v EntityView<'a>,
    corrupt: Cell<Option<StorageError>>,
}

/// Whether the stored `entity` matches `filter`, each property it names decoded alone, or why
/// its stored bytes could not be read: how every filter is evaluated on stored entities.
pub(crate) fn entity_matches(filter: &Expr, entity: &EntityView<'_>) -> Result<bool, StorageError> {
    FilterView::matches(filter, entity)
}

impl FilterView<'_, '_> {
    /// Whether `entity` matches `filter`, or why its stored bytes could not be read.
    fn matches(filter: &Expr, entity: &EntityView<'_>) -> Result<bool, StorageError> {
        let view = FilterView {
            entity,
            corrupt: Cell::new(None),
        };
        let matched = filter.matches(&view);
        match view.corrupt.into_inner() {
            Some(error) => Err(error),
            None => Ok(matched),
        }
    }
}

impl Record for FilterView<'_, '_> {
    fn partition_key(&self) -> &str {
        self.entity.partition_key
    }

    fn row_key(&self) -> &str {
        self.entity.row_key
    }

    fn timestamp(&self) -> Ticks {
        self.entity.timestamp
    }

    fn property(&self, name: &str) -> Option<ValueRef<'_>> {
        self.entity.property(name).unwrap_or_else(|error| {
            self.corrupt.set(Some(error));
            None
        })
    }
}

/// A query bound to its table and plan, positioned at the next entity to read.
#[derive(Debug)]
pub(crate) struct Scan {
    table: Arc<dyn Table>,
    pub(crate) spec: QuerySpec,
    /// The query's filter (with the caller's scope), if any.
    filter: Option<Expr>,
    /// What is still to read.
    source: Source,
    /// Seals the tokens the scan issues.
    seal: TokenSeal,
    /// When the table's entities expire (an expired one is examined, never matched).
    ttl: Option<TimeToLive>,
    /// Most entities one chunk examines ([`MAX_EXAMINED_PER_CHUNK`], or fewer for a reader
    /// bounded in all: an aggregate call).
    chunk_examined: usize,
}

/// What a scan reads, and what of it is still to read.
#[derive(Debug)]
enum Source {
    /// Key ranges (ascending and disjoint), as planned from the query's keys and filter.
    Keys {
        /// The ranges still to read.
        ranges: Vec<KeyRange>,
        /// How they were planned (for query stats).
        kind: PlanKind,
    },
    /// A declared index, in its order.
    Index {
        /// The index.
        index: Index,
        /// The range of it still to read.
        range: IndexRange,
        /// Whether its order is the query's `order_by` (no sort needed).
        gives_order: bool,
    },
}

/// What one chunk read.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// Where the next chunk starts, or `None` when the query is complete.
    pub(crate) resume_at: Option<ResumeAt>,
    /// Entities examined.
    pub(crate) examined: usize,
}

impl Scan {
    /// Plans `spec` on `table` and positions it at `continuation` (empty = the start), a token
    /// whose seal `seal` checks.
    pub(crate) fn prepare(
        table: Arc<dyn Table>,
        query: CheckedQuery,
        continuation: &str,
        seal: &TokenSeal,
    ) -> Result<Scan, TableError> {
        let CheckedQuery { mut spec, filter } = query;
        let source = match spec.index.as_str() {
            "" => {
                let ScanPlan { ranges, kind } = plan(filter.as_ref(), &spec.key_range());
                Source::Keys { ranges, kind }
            }
            name => {
                let index = ready_index(table.as_ref(), name)?;
                let range = index_range(
                    &index.definition,
                    filter.as_ref(),
                    spec.partition_key.as_deref(),
                )?;
                // An ordering the index's own order gives is no sort: the query is paged (or
                // streamed) in index order, its tokens those of an index query.
                let gives_order =
                    (spec.order_by).served_by(&index.definition, spec.partition_key.is_some());
                if gives_order {
                    spec.order_by = OrderBy::default();
                }
                Source::Index {
                    index,
                    range,
                    gives_order,
                }
            }
        };
        let ttl = table.time_to_live();
        let mut scan = Scan {
            table,
            spec,
            filter,
            source,
            seal: seal.clone(),
            ttl,
            chunk_examined: MAX_EXAMINED_PER_CHUNK,
        };
        if !continuation.is_empty() {
            let token =
                ContinuationToken::decode(continuation, seal, scan.table.id(), scan.spec.shape())?;
            let inside = match (&token.resume_at, &scan.source) {
                (ResumeAt::Key(key), Source::Keys { ranges, .. }) => {
                    ranges.iter().any(|r| r.contains(key))
                }
                (ResumeAt::Sort(sort_key), Source::Index { range, .. }) => range.contains(sort_key),
                _ => false,
            };
            if !inside {
                return Err(ValidationError::Argument(
                    "continuation token points outside the query's range".into(),
                )
                .into());
            }
            scan.resume_at(token.resume_at);
        }
        Ok(scan)
    }

    /// The plan's name for query stats: `index:<name>` for an index query, `index:<name>
    /// (order_by)` when the index's order is the query's ordering.
    pub(crate) fn plan_name(&self) -> String {
        match &self.source {
            Source::Index {
                index, gives_order, ..
            } => match gives_order {
                true => format!("index:{} (order_by)", index.definition.name),
                false => format!("index:{}", index.definition.name),
            },
            Source::Keys { kind, .. } => kind.as_str().to_owned(),
        }
    }

    /// Moves the scan to `position` (inclusive, in the scan's direction).
    pub(crate) fn resume_at(&mut self, position: ResumeAt) {
        let reverse = self.spec.reverse;
        match (position, &mut self.source) {
            (ResumeAt::Key(position), Source::Keys { ranges, .. }) => {
                *ranges = ranges
                    .iter()
                    .map(|r| r.from(&position, reverse))
                    .filter(|r| !r.is_empty())
                    .collect();
            }
            (ResumeAt::Sort(sort_key), Source::Index { range, .. }) => {
                *range = range.from(&sort_key, reverse);
            }
            // A position of the other kind than the scan's source is refused by `prepare`.
            _ => {}
        }
    }

    /// Where a sorted query's `continuation` (empty: none) resumes: after this sort key. A token
    /// of another query, or of a query in key or index order, is refused.
    pub(crate) fn sorted_resume(&self, continuation: &str) -> Result<Option<Vec<u8>>, TableError> {
        if continuation.is_empty() {
            return Ok(None);
        }
        let token = ContinuationToken::decode(
            continuation,
            &self.seal,
            self.table.id(),
            self.spec.shape(),
        )?;
        match token.resume_at {
            ResumeAt::Sort(after) => Ok(Some(after)),
            ResumeAt::Key(_) => Err(ValidationError::Argument(
                "continuation token is not one of this sorted query's".into(),
            )
            .into()),
        }
    }

    /// The continuation token that resumes this query at `key`.
    pub(crate) fn token(&self, key: ResumeAt) -> String {
        ContinuationToken {
            table_id: self.table.id(),
            shape: self.spec.shape(),
            resume_at: key,
        }
        .encode(&self.seal)
    }

    /// Bounds each chunk to `entities` examined (at least one), below [`MAX_EXAMINED_PER_CHUNK`].
    pub(crate) fn examine_at_most(&mut self, entities: usize) {
        self.chunk_examined = entities.clamp(1, MAX_EXAMINED_PER_CHUNK);
    }

    /// `token` sealed with the scan's seal.
    pub(crate) fn seal_carrying(&self, token: CarryingToken) -> String {
        token.encode(&self.seal)
    }

    /// Whether the request's deadline has passed at `now`.
    fn past_deadline(&self, now: Instant) -> bool {
        self.spec.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// Reads one chunk: up to `page_size` matches, `byte_budget` bytes of output (as `on_match`
    /// counts them), [`MAX_EXAMINED_PER_CHUNK`] entities examined
    /// ([`MAX_EXAMINED_IN_ONE_PARTITION`] in any one partition) and [`CHUNK_TIME_BUDGET`] of time,
    /// whichever comes first. Each match goes to `on_match`, read in place and showing only the
    /// selected properties; an error from `on_match` (a corrupt record) ends the chunk.
    pub(crate) fn read(
        &self,
        byte_budget: usize,
        on_match: &mut dyn FnMut(&EntityView<'_>) -> Result<usize, StorageError>,
    ) -> Result<Chunk, TableError> {
        let mut chunk = ChunkReader::new(self, byte_budget, on_match)?;
        let mut visitor = |entity: &EntityView<'_>| chunk.visit(entity);
        let reverse = self.spec.reverse;
        let resume_at = match &self.source {
            Source::Index { index, range, .. } => {
                let scan = IndexScan {
                    index,
                    range,
                    reverse,
                    expected_rows: self.expected_rows(),
                };
                self.table
                    .visit_index(scan, &mut visitor)?
                    .map(ResumeAt::Sort)
            }
            Source::Keys { ranges, .. } => {
                let scan = KeyScan {
                    ranges,
                    reverse,
                    expected_rows: self.expected_rows(),
                };
                self.table.visit(scan, &mut visitor)?.map(ResumeAt::Key)
            }
        };
        chunk.finish(resume_at)
    }

    /// How many rows a chunk is expected to read, if that is known: without a filter every row
    /// is a match (but for expired ones), and the chunk stops on the row past its last.
    fn expected_rows(&self) -> Option<usize> {
        let page_size = self.spec.page_size as usize;
        self.filter.is_none().then_some(page_size.saturating_add(1))
    }

    /// The key ranges the scan reads, or `None` if it reads an index.
    pub(crate) fn key_ranges(&self) -> Option<&[KeyRange]> {
        match &self.source {
            Source::Keys { ranges, .. } => Some(ranges),
            Source::Index { .. } => None,
        }
    }

    /// The query as requested.
    pub(crate) fn into_spec(self) -> QuerySpec {
        self.spec
    }

    /// [`Scan::read`] of `ranges` (the scan's [`Scan::key_ranges`]) in `snapshot`, awaited.
    pub(crate) async fn read_awaited(
        &self,
        ranges: &[KeyRange],
        snapshot: &mut dyn AwaitedSnapshot,
        byte_budget: usize,
        on_match: &mut (dyn FnMut(&EntityView<'_>) -> Result<usize, StorageError> + Send),
    ) -> Result<Chunk, TableError> {
        let mut chunk = ChunkReader::new(self, byte_budget, on_match)?;
        let mut visitor = |entity: &EntityView<'_>| chunk.visit(entity);
        let scan = KeyScan {
            ranges,
            reverse: self.spec.reverse,
            expected_rows: self.expected_rows(),
        };
        let stopped = snapshot.visit(self.table.id(), scan, &mut visitor).await?;
        chunk.finish(stopped.map(ResumeAt::Key))
    }
}

/// One chunk of a scan being read: what it has examined, matched and output so far, and whether
/// it must stop.
struct ChunkReader<'s, M> {
    scan: &'s Scan,
    on_match: M,
    byte_budget: usize,
    started: Instant,
    now: Ticks,
    timed_out: bool,
    matches: usize,
    examined: usize,
    bytes: usize,
    partition: String,
    examined_in_partition: usize,
    /// Whether the query's segment (if any) holds `partition`.
    partition_in_segment: bool,
}

impl<'s, M> ChunkReader<'s, M>
where
    M: FnMut(&EntityView<'_>) -> Result<usize, StorageError>,
{
    /// A chunk of `scan` starting now, or [`TableError::DeadlineExceeded`] if the request's
    /// deadline has passed.
    fn new(scan: &'s Scan, byte_budget: usize, on_match: M) -> Result<Self, TableError> {
        let started = Instant::now();
        if scan.past_deadline(started) {
            return Err(TableError::DeadlineExceeded);
        }
        Ok(ChunkReader {
            scan,
            on_match,
            byte_budget,
            started,
            now: Ticks::now(),
            timed_out: false,
            matches: 0,
            examined: 0,
            bytes: 0,
            partition: String::new(),
            examined_in_partition: 0,
            partition_in_segment: true,
        })
    }

    /// Looks at the next entity of the scan's order.
    fn visit(&mut self, entity: &EntityView<'_>) -> Result<Visit, StorageError> {
        let mut over_time = false;
        if self.examined % 256 == 255 {
            let now = Instant::now();
            self.timed_out = self.scan.past_deadline(now);
            over_time = self.timed_out || now - self.started > CHUNK_TIME_BUDGET;
        }
        let spec = &self.scan.spec;
        if entity.partition_key != self.partition {
            self.partition.clear();
            self.partition.push_str(entity.partition_key);
            self.examined_in_partition = 0;
            self.partition_in_segment = spec
                .segment
                .is_none_or(|segment| segment.holds(entity.partition_key));
        }
        if self.matches >= spec.page_size as usize
            || self.bytes >= self.byte_budget
            || self.examined >= self.scan.chunk_examined
            || self.examined_in_partition >= MAX_EXAMINED_IN_ONE_PARTITION
            || over_time
        {
            return Ok(Visit::Stop);
        }
        self.examined += 1;
        self.examined_in_partition += 1;
        // Another segment's partition: a scan by key seeks past it, an index scan goes on.
        if !self.partition_in_segment {
            return Ok(Visit::SkipPartition);
        }
        // An index query's range may span partitions the request's partition_key excludes.
        if (spec.partition_key.as_deref()).is_some_and(|pk| pk != entity.partition_key) {
            return Ok(Visit::Next);
        }
        if entity.expired(self.scan.ttl, self.now)? {
            return Ok(Visit::Next);
        }
        if let Some(filter) = &self.scan.filter {
            if !FilterView::matches(filter, entity)? {
                return Ok(Visit::Next);
            }
        }
        self.matches += 1;
        self.bytes += (self.on_match)(&entity.selecting(&spec.select))?;
        Ok(Visit::Next)
    }

    /// The chunk read, ending at `resume_at`.
    fn finish(self, resume_at: Option<ResumeAt>) -> Result<Chunk, TableError> {
        crate::telemetry::scanned(self.examined, self.matches);
        if self.timed_out {
            return Err(TableError::DeadlineExceeded);
        }
        Ok(Chunk {
            resume_at,
            examined: self.examined,
        })
    }
}

/// The index `name` of `table`, if it can answer queries.
fn ready_index(table: &dyn Table, name: &str) -> Result<Index, TableError> {
    let catalog = table.indexes()?;
    let Some(index) = catalog.find(name) else {
        return Err(TableError::IndexNotFound {
            table: table.name().to_string(),
            index: name.to_owned(),
        });
    };
    let why = match &index.state {
        IndexState::Ready => return Ok(index.clone()),
        IndexState::Building => {
            "it is being built; its state turns READY once it covers every entity".to_owned()
        }
        IndexState::Failed(why) => format!("its build failed ({why}); drop it"),
    };
    Err(TableError::IndexNotReady {
        index: index.definition.name.clone(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EntityKey, Properties, StoredEntity, Value};
    use crate::storage::StoredRecord;

    #[test]
    fn filters_read_stored_bytes_and_fail_on_corrupt_ones() {
        let mut record = StoredRecord::of(&StoredEntity {
            key: EntityKey::new("p".into(), "r".into()).unwrap(),
            timestamp: Ticks(7),
            properties: Properties::from([
                ("Age".to_owned(), Value::Int32(40)),
                ("Name".to_owned(), Value::String("Ada".into())),
            ]),
        });
        let entity = record.view().unwrap();
        let filter = |text| Expr::parse(text).unwrap();
        let matches = |text| FilterView::matches(&filter(text), &entity).unwrap();
        assert!(matches(
            "Name eq 'Ada' and Age gt 30 and PartitionKey eq 'p'"
        ));
        assert!(!matches("Missing eq 1"));
        assert!(!matches("Age eq 'forty'"));

        // The header is whole, the last property is cut short: a filter reading it fails.
        let whole = record.value.len();
        record.value.truncate(whole - 2);
        let entity = record.view().unwrap();
        assert!(FilterView::matches(&filter("Name eq 'Ada'"), &entity).is_err());
    }
}
