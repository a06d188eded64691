//! `Backup`: the engine's snapshot streamed to the caller, read on the blocking pool into chunks
//! of about [`CHUNK_BYTES`] of rows, at most two chunks waiting for the reader. A reader that
//! stops reading holds the snapshot (and so the before images of what commits change meanwhile)
//! until it reads again or goes away; then the snapshot ends.

use std::time::SystemTime;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use super::convert::{index_definition_to_pb, table_to_pb};
use super::status::internal_status;
use crate::engine::Engine;
use crate::executor::Executor;
use crate::model::{AccessPolicy, ServiceProperties};
use crate::settings::TableDescription;
use crate::storage::{SnapshotItem, SnapshotTable, StorageError, CURRENT_FORMAT};
use trestle_proto::pb;

/// Most bytes of records in one chunk (a chunk may pass it by one row).
const CHUNK_BYTES: usize = 1024 * 1024;

/// The chunks of a backup, then its end: `complete` on the last, or the status that ended it.
pub(crate) type BackupStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<pb::BackupChunk, Status>> + Send>>;

/// Starts reading a snapshot for a caller let in with `permit`, held until the backup ends; a
/// store that takes no snapshots is refused here, before the stream begins.
pub(crate) async fn start(
    executor: Executor,
    permit: crate::admission::StreamPermit,
) -> Result<BackupStream, Status> {
    let (sender, receiver) = mpsc::channel(2);
    tokio::spawn(async move {
        let _holds = (permit, crate::telemetry::OpenStream::opened());
        let chunk_sender = sender.clone();
        let read = executor
            .blocking(move |engine| {
                let mut chunks = Chunks {
                    sender: chunk_sender,
                    chunk: pb::BackupChunk::default(),
                    bytes: 0,
                    service_properties: engine.service_properties()?,
                    places: Vec::new(),
                };
                engine.snapshot(&mut |item| match item {
                    SnapshotItem::Tables(tables) => chunks.send_header(engine, tables),
                    SnapshotItem::Row {
                        table,
                        partition_key,
                        row_key,
                        record,
                    } => chunks.add_row(table, partition_key, row_key, record),
                })?;
                chunks.chunk.complete = true;
                chunks.send()?;
                Ok(())
            })
            .await;
        if let Err(error) = read {
            let _ = sender.send(Err(error.into())).await;
        }
    });
    let mut receiver = ReceiverStream::new(receiver);
    match receiver.next().await {
        Some(Ok(header)) => Ok(Box::pin(tokio_stream::once(Ok(header)).chain(receiver))),
        Some(Err(status)) => Err(status),
        None => Err(internal_status("the backup ended before it began")),
    }
}

/// The chunk being filled, and where full ones go.
struct Chunks {
    sender: mpsc::Sender<Result<pb::BackupChunk, Status>>,
    chunk: pb::BackupChunk,
    bytes: usize,
    /// Read as the backup began; sent in the header.
    service_properties: ServiceProperties,
    /// Each snapshot table's place in the header; `None` for the server's own tables (the
    /// idempotency records), which a backup leaves out.
    places: Vec<Option<u32>>,
}

impl Chunks {
    /// Sends the header at once: the snapshot's tables, each with its stored access policies
    /// (none for a table deleted since the snapshot began), and the service's properties.
    fn send_header(
        &mut self,
        engine: &Engine,
        tables: &[SnapshotTable],
    ) -> Result<(), StorageError> {
        let mut described = Vec::with_capacity(tables.len());
        for table in tables {
            if table.name.is_hidden() {
                self.places.push(None);
                continue;
            }
            let place = u32::try_from(described.len()).expect("fewer than 2^32 tables");
            self.places.push(Some(place));
            described.push(backup_table(table, engine.table_policies(table.id)?));
        }
        let service_properties = if self.service_properties == ServiceProperties::default() {
            Vec::new()
        } else {
            self.service_properties.encode()
        };
        self.chunk.header = Some(pb::BackupHeader {
            record_format: CURRENT_FORMAT,
            instant: Some(SystemTime::now().into()),
            tables: described,
            service_properties,
        });
        self.send()
    }

    /// Adds a row of the `table`th table of the snapshot (none of a hidden table); a row of
    /// another table than the chunk's, or past [`CHUNK_BYTES`], sends the chunk first.
    fn add_row(
        &mut self,
        table: usize,
        partition_key: &str,
        row_key: &str,
        record: &[u8],
    ) -> Result<(), StorageError> {
        let Some(&Some(table)) = self.places.get(table) else {
            return Ok(());
        };
        if self.chunk.table != table && !self.chunk.rows.is_empty() {
            self.send()?;
        }
        self.chunk.table = table;
        self.bytes += partition_key.len() + row_key.len() + record.len();
        self.chunk.rows.push(pb::BackupRow {
            partition_key: partition_key.to_owned(),
            row_key: row_key.to_owned(),
            record: record.to_vec(),
        });
        if self.bytes >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(())
    }

    /// Sends the chunk, waiting while two wait for the reader; a reader gone ends the snapshot.
    fn send(&mut self) -> Result<(), StorageError> {
        let chunk = std::mem::take(&mut self.chunk);
        self.bytes = 0;
        self.sender.blocking_send(Ok(chunk)).map_err(|_| {
            StorageError::Io(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the backup's reader went away",
            ))
        })
    }
}

/// A table of the snapshot as a backup describes it: its settings as `Table` carries them.
fn backup_table(table: &SnapshotTable, policies: Vec<AccessPolicy>) -> pb::BackupTable {
    let pb::Table {
        name,
        indexes: _,
        access_policies,
        change_feed,
        change_feed_retention_seconds,
        time_to_live,
        default_time_to_live_seconds,
        change_feed_before_images,
    } = table_to_pb(TableDescription {
        name: table.name.clone(),
        indexes: Vec::new(),
        access_policies: policies,
        change_feed: table.change_feed,
        time_to_live: table.time_to_live,
    });
    pb::BackupTable {
        name,
        indexes: table
            .indexes
            .iter()
            .cloned()
            .map(index_definition_to_pb)
            .collect(),
        change_feed,
        change_feed_retention_seconds,
        time_to_live,
        default_time_to_live_seconds,
        change_feed_before_images,
        access_policies,
    }
}
