//! Streamed scans (`ScanEntities`) that no reader can use to hold the server.
//!
//! A stream is a task that alternates two steps: wait, without a thread, until the reader has
//! taken the previous batch; then read one chunk (on the blocking pool, or awaited where the store
//! serves it so: `Executor::read_chunk`). So a reader that stops
//! reading holds no thread, and at most one batch of its scan is buffered here. Three bounds keep
//! what readers can hold in check:
//! - **stall**: a reader that takes nothing for [`StreamLimits::stall`] has its scan closed; it
//!   reads `DEADLINE_EXCEEDED` (`OperationTimedOut`) once it reads again;
//! - **per connection**: at most [`StreamLimits::per_connection`] open scans on one connection;
//! - **memory**: every buffered batch holds its size from one budget shared by all streams, taken
//!   before the batch is read and given back when the transport takes the batch.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use super::pages::ScanEntitiesResponse;
use super::wire::EntityEncoder;
use crate::engine::ScanCursor;
use crate::executor::Executor;

/// Most bytes of encoded entities or records in one streamed batch, of every stream that sends
/// entities (scans and change feeds; a batch may pass it by one entity and its before image, so
/// that any batch fits a client's default 4 MiB message limit). Small enough that a buffered
/// batch costs little, large enough that the hand-off per batch is lost in the work of reading
/// it. Each batch holds its share of the [`StreamLimits`] memory budget while it waits.
pub(crate) const STREAM_BATCH_BYTES: usize = 128 * 1024;

/// The bounds on what open streams may hold.
#[derive(Debug, Clone)]
pub(crate) struct StreamLimits {
    /// How long a stream's reader may take nothing before its scan is closed.
    pub(crate) stall: Duration,
    /// Most open scans on one connection.
    pub(crate) per_connection: usize,
    /// The budget of buffered batch bytes shared by every stream, in KiB.
    memory: Arc<Semaphore>,
    memory_kib: usize,
}

impl StreamLimits {
    /// Limits of `stall`, `per_connection` scans per connection and `memory_bytes` of buffered
    /// batches in all.
    pub(crate) fn new(stall: Duration, per_connection: usize, memory_bytes: usize) -> Self {
        let memory_kib = (memory_bytes / 1024).max(STREAM_BATCH_BYTES / 1024);
        StreamLimits {
            stall,
            per_connection,
            memory: Arc::new(Semaphore::new(memory_kib)),
            memory_kib,
        }
    }

    /// One batch's share of the memory budget, taken before the batch is read and held until the
    /// transport takes it; `ServerBusy` if none is free by `until`.
    pub(crate) async fn reserve_batch(
        &self,
        until: Instant,
    ) -> Result<OwnedSemaphorePermit, Status> {
        let memory = self
            .memory
            .clone()
            .acquire_many_owned((STREAM_BATCH_BYTES / 1024) as u32);
        match tokio::time::timeout_at(until.into(), memory).await {
            Ok(Ok(memory)) => Ok(memory),
            _ => Err(super::status::stream_memory_busy(self.memory_kib / 1024)),
        }
    }

    /// KiB of the memory budget not held by a batch.
    #[cfg(test)]
    pub(crate) fn memory_free_kib(&self) -> usize {
        self.memory.available_permits()
    }
}

/// One open scan counted against its connection's cap; the count drops with it.
#[derive(Debug)]
pub(crate) struct ScanSlot {
    open: Arc<AtomicUsize>,
}

impl ScanSlot {
    /// Counts one more open scan in `open`, unless `cap` are open already.
    pub(crate) fn claim(open: &Arc<AtomicUsize>, cap: usize) -> Option<ScanSlot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        })
        .ok()?;
        Some(ScanSlot { open: open.clone() })
    }
}

impl Drop for ScanSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A batch ready for the reader, holding its share of the memory budget.
struct Batch {
    response: ScanEntitiesResponse,
    _memory: OwnedSemaphorePermit,
}

/// Where the task leaves a batch and the reader takes it.
#[derive(Default)]
struct Slot {
    batch: Option<Batch>,
    /// How the stream ends, once it does: cleanly (`None`) or with a status.
    end: Option<Option<Status>>,
    /// The reader's waker, while it waits for a batch.
    reader: Option<Waker>,
    /// The reader dropped the stream (it finished, cancelled, or its connection closed).
    reader_gone: bool,
}

/// The slot and the signal that the reader took what was in it.
#[derive(Default)]
struct Handoff {
    slot: Mutex<Slot>,
    taken: Notify,
}

/// Why the task stopped waiting for the reader.
enum Wait {
    /// The slot is free.
    Taken,
    /// Nobody will read any more.
    ReaderGone,
    /// The reader took nothing before `until`.
    TimedOut,
}

impl Handoff {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the slot is free or the reader is gone, at most until `until`.
    async fn wait_for_reader(&self, until: Instant) -> Wait {
        let waiting = async {
            loop {
                let taken = self.taken.notified();
                {
                    let slot = self.lock();
                    if slot.reader_gone {
                        return Wait::ReaderGone;
                    }
                    if slot.batch.is_none() {
                        return Wait::Taken;
                    }
                }
                taken.await;
            }
        };
        tokio::time::timeout_at(until.into(), waiting)
            .await
            .unwrap_or(Wait::TimedOut)
    }

    /// Leaves `batch` for the reader.
    fn put(&self, batch: Batch) {
        let mut slot = self.lock();
        slot.batch = Some(batch);
        if let Some(reader) = slot.reader.take() {
            reader.wake();
        }
    }

    /// Ends the stream: cleanly with `None`, or with `status`, dropping any batch not yet taken
    /// (its memory goes back to the budget at once).
    fn end(&self, status: Option<Status>) {
        let mut slot = self.lock();
        if status.is_some() {
            slot.batch = None;
        }
        slot.end = Some(status);
        if let Some(reader) = slot.reader.take() {
            reader.wake();
        }
    }
}

/// What a stream holds while it runs: released, all of it, when its task ends.
pub(crate) struct Holds {
    /// The call's permit of the long-lived class.
    pub(crate) _in_flight: crate::admission::StreamPermit,
    /// The scan's place under its connection's cap, if the connection is known.
    pub(crate) _slot: Option<ScanSlot>,
    /// Counted among the open streams while it lives.
    pub(crate) _open: crate::telemetry::OpenStream,
}

/// The reader's side: the response stream tonic sends from.
pub struct ScanStream {
    handoff: Arc<Handoff>,
    finished: bool,
}

impl std::fmt::Debug for ScanStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanStream")
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl tokio_stream::Stream for ScanStream {
    type Item = Result<ScanEntitiesResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.finished {
            return Poll::Ready(None);
        }
        let handoff = self.handoff.clone();
        let mut slot = handoff.lock();
        if let Some(batch) = slot.batch.take() {
            drop(slot);
            handoff.taken.notify_one();
            // The batch's memory permit drops here: the transport holds the bytes from now on.
            return Poll::Ready(Some(Ok(batch.response)));
        }
        if let Some(end) = slot.end.take() {
            drop(slot);
            self.finished = true;
            return Poll::Ready(end.map(Err));
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for ScanStream {
    fn drop(&mut self) {
        let mut slot = self.handoff.lock();
        slot.reader_gone = true;
        slot.batch = None;
        drop(slot);
        self.handoff.taken.notify_one();
    }
}

/// What reads a stream's next chunk: the executor's streaming mode ([`Executor::read_chunk`],
/// finished as any other work, on the blocking pool or awaited where the store serves it so).
pub(crate) fn chunk_reader(
    executor: &Executor,
) -> impl Fn(ScanCursor, EntityEncoder) -> ChunkFuture<ScanCursor> + Send + 'static {
    let executor = executor.clone();
    move |cursor: ScanCursor, encoder: EntityEncoder| {
        let executor = executor.clone();
        Box::pin(async move {
            let chunk = executor.read_chunk(cursor, encoder, STREAM_BATCH_BYTES);
            Ok(chunk.await?)
        }) as ChunkFuture<ScanCursor>
    }
}

/// A sorted stream (`ScanEntities` with an `order_by` that no index's order gives) between
/// batches: the query, and the sorted token after the last match sent (empty: none sent yet).
#[derive(Debug)]
pub(crate) struct SortedPasses {
    table: String,
    spec: crate::query::QuerySpec,
    continuation: String,
}

impl SortedPasses {
    /// The sorted stream of `spec` over `table`, from `continuation` (a sorted query's token).
    pub(crate) fn new(
        table: String,
        spec: crate::query::QuerySpec,
        continuation: String,
    ) -> SortedPasses {
        SortedPasses {
            table,
            spec,
            continuation,
        }
    }
}

/// What reads a sorted stream's next batch: one sorted pass of the whole query
/// ([`Executor::sorted_pass`]: every match examined, the best after the last one sent kept
/// within one batch's bytes). So a sorted stream holds no more than any stream's batch, and costs
/// one read of its matches a batch (each pass bounded as a sorted page is); its batches are the
/// pages a client paging the sorted query would read, writes in between included.
pub(crate) fn sorted_pass_reader(
    executor: &Executor,
) -> impl Fn(SortedPasses, EntityEncoder) -> ChunkFuture<SortedPasses> + Send + 'static {
    let executor = executor.clone();
    move |passes: SortedPasses, encoder: EntityEncoder| {
        let executor = executor.clone();
        Box::pin(async move {
            let SortedPasses {
                table,
                spec,
                continuation,
            } = passes;
            let pass = executor.sorted_pass(
                table.clone(),
                spec.clone(),
                continuation,
                encoder,
                STREAM_BATCH_BYTES,
            );
            let (page, encoder) = pass.await?;
            let more = page.continuation_token.is_some();
            let next = SortedPasses::new(table, spec, page.continuation_token.unwrap_or_default());
            Ok((next, encoder, more))
        }) as ChunkFuture<SortedPasses>
    }
}

/// Starts streaming `cursor`'s matches with `limits`, stopping at `deadline`; `read_chunk` reads
/// one chunk (it is the executor's, so that a chunk that fails or panics ends the stream as any
/// request ends).
pub(crate) fn start<C, R>(
    cursor: C,
    holds: Holds,
    deadline: Option<Instant>,
    limits: StreamLimits,
    read_chunk: R,
) -> ScanStream
where
    C: Send + 'static,
    R: Fn(C, EntityEncoder) -> ChunkFuture<C> + Send + 'static,
{
    let handoff = Arc::new(Handoff::default());
    let stream = ScanStream {
        handoff: handoff.clone(),
        finished: false,
    };
    tokio::spawn(async move {
        let _holds = holds;
        let status = pump(&handoff, cursor, deadline, &limits, read_chunk).await;
        handoff.end(status);
    });
    stream
}

/// What reading one chunk gives back: the cursor (a [`ScanCursor`], or [`SortedPasses`]) and
/// encoder for the next, and whether the query has more; or the status that ends the stream.
pub(crate) type ChunkFuture<C> =
    Pin<Box<dyn std::future::Future<Output = Result<(C, EntityEncoder, bool), Status>> + Send>>;

/// Reads chunks and hands them over until the query ends (`None`), the reader goes away (`None`:
/// nobody is left to tell), or something ends it with a status.
async fn pump<C, R>(
    handoff: &Handoff,
    mut cursor: C,
    deadline: Option<Instant>,
    limits: &StreamLimits,
    read_chunk: R,
) -> Option<Status>
where
    R: Fn(C, EntityEncoder) -> ChunkFuture<C>,
{
    let mut encoder = EntityEncoder::default();
    loop {
        let stalled_at = Instant::now() + limits.stall;
        let until = deadline.map_or(stalled_at, |deadline| deadline.min(stalled_at));
        match handoff.wait_for_reader(until).await {
            Wait::Taken => {}
            Wait::ReaderGone => return None,
            Wait::TimedOut if until < stalled_at => return Some(super::status::deadline()),
            Wait::TimedOut => return Some(super::status::reader_stalled(limits.stall)),
        }
        let memory = match limits.reserve_batch(until).await {
            Ok(memory) => memory,
            Err(status) => return Some(status),
        };
        let (next, used, more) = match read_chunk(cursor, encoder).await {
            Ok(read) => read,
            Err(status) => return Some(status),
        };
        cursor = next;
        encoder = used;
        if !encoder.encoded.is_empty() {
            handoff.put(Batch {
                response: ScanEntitiesResponse {
                    entities: Vec::new(),
                    encoded_entities: encoder.take_encoded(),
                },
                _memory: memory,
            });
        }
        if !more {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_opens_at_most_its_cap_of_scans() {
        let open = Arc::new(AtomicUsize::new(0));
        let first = ScanSlot::claim(&open, 2).unwrap();
        let _second = ScanSlot::claim(&open, 2).unwrap();
        assert!(ScanSlot::claim(&open, 2).is_none());
        drop(first);
        assert!(ScanSlot::claim(&open, 2).is_some());
    }

    #[test]
    fn the_memory_budget_fits_at_least_one_batch() {
        let limits = StreamLimits::new(Duration::from_secs(1), 1, 0);
        assert_eq!(limits.memory_free_kib(), STREAM_BATCH_BYTES / 1024);
    }
}
