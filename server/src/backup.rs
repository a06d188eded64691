//! Backups on disk: `trestle-server backup` writes what a server's `Backup` stream gives into a
//! new directory, and `trestle-server restore` builds a new data directory from one.
//!
//! A backup directory holds `tables/NNNNN.rows` (each table's rows, every one a big-endian u32
//! length and a `BackupRow` message) and `manifest.json`, written last: the format, the instant,
//! the service's properties (CORS rules), and per table its name, indexes, feed and expiry
//! settings, stored access policies, file, entity count, byte count and SHA-256. A stream that
//! ends before its last chunk leaves no backup (the directory is removed). A restore checks every
//! file and setting against the manifest before it writes anything, then loads the rows as stored
//! (Timestamps and ETags kept), sets the settings again and builds each declared index anew.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use prost::Message;
use ring::digest;
use serde::{Deserialize, Serialize};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use trestle_proto::datetime;
use trestle_proto::pb;
use trestle_proto::pb::table_service_client::TableServiceClient;

use crate::engine::Engine;
use crate::error::TableError;
use crate::grpc::access_policy_from_pb;
use crate::model::{
    quoted, validate_policies, AccessPolicy, EntityKey, IndexDefinition, IndexScope, IndexState,
    ServiceProperties, ValidationError,
};
use crate::storage::{EntityView, StoreConfig, StoredRow, CURRENT_FORMAT};

/// The version of the backup directory's layout.
const LAYOUT_VERSION: u32 = 1;
const MANIFEST: &str = "manifest.json";
/// Rows a restore loads at once.
const LOAD_BATCH: usize = 1_000;

/// What can go wrong with a backup or a restore.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The command was given something it cannot use.
    #[error("{0}")]
    Usage(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The server could not be reached or refused.
    #[error("the server: {0}")]
    Server(String),
    /// The backup is not whole or not as its manifest says.
    #[error("{0}")]
    Damaged(String),
    /// The restored store refused.
    #[error("the restored store: {0}")]
    Store(#[from] TableError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_owned(),
        source,
    }
}

/// `manifest.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    layout: u32,
    record_format: u32,
    /// The backup's instant, RFC 3339.
    instant: String,
    tables: Vec<TableManifest>,
    /// The service's properties (CORS rules), if any were set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    service_properties: Option<ServiceProperties>,
}

#[derive(Debug, Serialize, Deserialize)]
struct TableManifest {
    name: String,
    indexes: Vec<IndexManifest>,
    /// The table keeps a change feed (its records are not in the backup).
    #[serde(default)]
    change_feed: bool,
    /// The feed's retention in seconds (0: the default).
    #[serde(default)]
    change_feed_retention_seconds: u64,
    /// The feed's records hold before images.
    #[serde(default)]
    change_feed_before_images: bool,
    /// Its entities expire, by default after this many seconds (0: only those that say).
    #[serde(default)]
    time_to_live: bool,
    #[serde(default)]
    default_time_to_live_seconds: u64,
    /// Its stored access policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    access_policies: Vec<AccessPolicy>,
    /// Below the backup directory.
    file: String,
    entities: u64,
    bytes: u64,
    sha256: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct IndexManifest {
    name: String,
    properties: Vec<String>,
    /// `partition` or `table`.
    scope: String,
    unique: bool,
}

/// What a backup or a restore did.
#[derive(Debug)]
pub struct Summary {
    pub tables: usize,
    pub entities: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} tables, {} entities", self.tables, self.entities)
    }
}

/// A table's rows file being written: its hash, counts and writer.
struct RowsFile {
    manifest: TableManifest,
    hash: digest::Context,
    out: BufWriter<File>,
    path: PathBuf,
}

impl RowsFile {
    /// The new, empty file of the backup's table number `at`, described by `table`.
    fn create(to: &Path, at: usize, table: pb::BackupTable) -> Result<RowsFile, BackupError> {
        let access_policies = table
            .access_policies
            .into_iter()
            .map(access_policy_from_pb)
            .collect::<Result<_, _>>()
            .map_err(|e| BackupError::Damaged(format!("table {}: {e}", table.name)))?;
        let file = format!("tables/{at:05}.rows");
        let path = to.join(&file);
        let out = BufWriter::new(File::create(&path).map_err(io(&path))?);
        Ok(RowsFile {
            manifest: TableManifest {
                name: table.name,
                indexes: table.indexes.into_iter().map(index_manifest).collect(),
                change_feed: table.change_feed,
                change_feed_retention_seconds: table.change_feed_retention_seconds,
                change_feed_before_images: table.change_feed_before_images,
                time_to_live: table.time_to_live,
                default_time_to_live_seconds: table.default_time_to_live_seconds,
                access_policies,
                file,
                entities: 0,
                bytes: 0,
                sha256: String::new(),
            },
            hash: digest::Context::new(&digest::SHA256),
            out,
            path,
        })
    }

    fn append(&mut self, row: &pb::BackupRow) -> Result<(), BackupError> {
        let body = row.encode_to_vec();
        let length = u32::try_from(body.len()).expect("a row is under 4 GiB");
        for bytes in [&length.to_be_bytes()[..], &body] {
            self.hash.update(bytes);
            self.out.write_all(bytes).map_err(io(&self.path))?;
            self.manifest.bytes += bytes.len() as u64;
        }
        self.manifest.entities += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<TableManifest, BackupError> {
        self.out.flush().map_err(io(&self.path))?;
        self.out.get_ref().sync_all().map_err(io(&self.path))?;
        self.manifest.sha256 = hex(self.hash.finish().as_ref());
        Ok(self.manifest)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Takes a backup of the server at `endpoint` (with `token`, an account key; `ca_file` for
/// `https`) into `to`, a directory that must not exist or be empty.
pub async fn back_up(
    endpoint: &str,
    token: Option<&str>,
    ca_file: Option<&Path>,
    to: &Path,
) -> Result<Summary, BackupError> {
    prepare_empty_dir(to)?;
    let written = receive(endpoint, token, ca_file, to).await;
    if written.is_err() {
        // No backup without its last chunk: nothing half-written is left to be mistaken for one.
        let _ = std::fs::remove_dir_all(to);
    }
    written
}

async fn receive(
    endpoint: &str,
    token: Option<&str>,
    ca_file: Option<&Path>,
    to: &Path,
) -> Result<Summary, BackupError> {
    let mut stream = open_stream(endpoint, token, ca_file).await?;
    let first = stream.message().await.map_err(server_error)?;
    let header = first
        .and_then(|chunk| chunk.header)
        .ok_or_else(|| BackupError::Damaged("the backup stream began without a header".into()))?;
    std::fs::create_dir_all(to.join("tables")).map_err(io(to))?;
    let service_properties = match header.service_properties.as_slice() {
        [] => None,
        record => Some(ServiceProperties::decode(record).ok_or_else(|| {
            BackupError::Damaged("the server sent service properties that do not decode".into())
        })?),
    };
    let mut files = header
        .tables
        .into_iter()
        .enumerate()
        .map(|(at, table)| RowsFile::create(to, at, table))
        .collect::<Result<Vec<_>, _>>()?;
    loop {
        let chunk = stream
            .message()
            .await
            .map_err(server_error)?
            .ok_or_else(|| {
                BackupError::Damaged("the backup stream ended before its last chunk".into())
            })?;
        if !chunk.rows.is_empty() {
            let file = files.get_mut(chunk.table as usize).ok_or_else(|| {
                BackupError::Damaged(format!("rows of table {} the header lacks", chunk.table))
            })?;
            for row in &chunk.rows {
                file.append(row)?;
            }
        }
        if chunk.complete {
            break;
        }
    }
    let tables: Vec<TableManifest> = files
        .into_iter()
        .map(RowsFile::finish)
        .collect::<Result<_, _>>()?;
    let instant = header.instant.map(instant_text).unwrap_or_default();
    let manifest = Manifest {
        layout: LAYOUT_VERSION,
        record_format: header.record_format,
        instant,
        tables,
        service_properties,
    };
    let summary = Summary {
        tables: manifest.tables.len(),
        entities: manifest.tables.iter().map(|t| t.entities).sum(),
    };
    write_manifest(to, &manifest)?;
    Ok(summary)
}

/// The `Backup` stream of the server at `endpoint`, asked for with `token`.
async fn open_stream(
    endpoint: &str,
    token: Option<&str>,
    ca_file: Option<&Path>,
) -> Result<tonic::Streaming<pb::BackupChunk>, BackupError> {
    let mut client = TableServiceClient::new(connect(endpoint, ca_file).await?)
        .max_decoding_message_size(64 * 1024 * 1024);
    let mut request = tonic::Request::new(pb::BackupRequest {});
    if let Some(token) = token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| BackupError::Usage("the token is not a valid header value".into()))?;
        request.metadata_mut().insert("authorization", value);
    }
    let response = client.backup(request).await.map_err(server_error)?;
    Ok(response.into_inner())
}

fn server_error(status: tonic::Status) -> BackupError {
    BackupError::Server(status.message().to_owned())
}

/// The backup's instant as the manifest writes it (Azure's `Timestamp` form).
fn instant_text(instant: prost_types::Timestamp) -> String {
    let ticks = instant.seconds * datetime::TICKS_PER_SECOND + i64::from(instant.nanos) / 100;
    datetime::format(ticks)
}

/// A channel to `endpoint`, over TLS trusting `ca_file` for `https`.
async fn connect(endpoint: &str, ca_file: Option<&Path>) -> Result<Channel, BackupError> {
    let usage = |e: &dyn std::fmt::Display| BackupError::Usage(format!("{endpoint}: {e}"));
    let mut channel = Channel::from_shared(endpoint.to_owned())
        .map_err(|e| usage(&e))?
        .connect_timeout(Duration::from_secs(5));
    if endpoint.starts_with("https://") {
        let ca_file = ca_file.ok_or_else(|| {
            BackupError::Usage("an https endpoint needs --ca-file, the CA that signed it".into())
        })?;
        let pem = std::fs::read(ca_file).map_err(io(ca_file))?;
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
        channel = channel.tls_config(tls).map_err(|e| usage(&e))?;
    }
    channel
        .connect()
        .await
        .map_err(|e| BackupError::Server(format!("{endpoint}: {e}")))
}

/// Creates `dir`, or accepts it if it exists and is empty.
fn prepare_empty_dir(dir: &Path) -> Result<(), BackupError> {
    if let Ok(mut entries) = std::fs::read_dir(dir) {
        if entries.next().is_some() {
            return Err(BackupError::Usage(format!(
                "{} is not empty: name a new directory (nothing is ever overwritten)",
                dir.display()
            )));
        }
    }
    std::fs::create_dir_all(dir).map_err(io(dir))
}

fn write_manifest(to: &Path, manifest: &Manifest) -> Result<(), BackupError> {
    let text = serde_json::to_vec_pretty(manifest).expect("a manifest serializes");
    let partial = to.join("manifest.json.partial");
    let mut file = File::create(&partial).map_err(io(&partial))?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(io(&partial))?;
    let path = to.join(MANIFEST);
    std::fs::rename(&partial, &path).map_err(io(&path))?;
    File::open(to)
        .and_then(|dir| dir.sync_all())
        .map_err(io(to))
}

fn index_manifest(definition: pb::IndexDefinition) -> IndexManifest {
    let scope = match pb::IndexScope::try_from(definition.scope) {
        Ok(pb::IndexScope::Table) => "table",
        _ => "partition",
    };
    IndexManifest {
        name: definition.name,
        properties: definition.properties,
        scope: scope.to_owned(),
        unique: definition.unique,
    }
}

fn index_definition(index: &IndexManifest) -> Result<IndexDefinition, BackupError> {
    let scope = match index.scope.as_str() {
        "partition" => IndexScope::Partition,
        "table" => IndexScope::Table,
        other => {
            return Err(BackupError::Damaged(format!(
                "the manifest names index scope {other:?}"
            )))
        }
    };
    IndexDefinition::new(
        index.name.clone(),
        index.properties.clone(),
        scope,
        index.unique,
    )
    .map_err(|e| BackupError::Damaged(format!("the manifest's index {}: {e}", index.name)))
}

/// The rows of a table's file, each checked to be whole.
struct Rows {
    input: BufReader<File>,
    path: PathBuf,
}

impl Iterator for Rows {
    type Item = Result<pb::BackupRow, BackupError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut length = [0u8; 4];
        match self.input.read(&mut length[..1]) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => return Some(Err(io(&self.path)(e))),
        }
        let truncated = |_| BackupError::Damaged(format!("{} is truncated", self.path.display()));
        let read = self.input.read_exact(&mut length[1..]).map_err(truncated);
        let row = read.and_then(|()| {
            let mut body = vec![0u8; u32::from_be_bytes(length) as usize];
            self.input.read_exact(&mut body).map_err(truncated)?;
            pb::BackupRow::decode(body.as_slice()).map_err(|e| {
                BackupError::Damaged(format!(
                    "{}: a row does not decode: {e}",
                    self.path.display()
                ))
            })
        });
        Some(row)
    }
}

fn open_rows(path: PathBuf) -> Result<Rows, BackupError> {
    let input = BufReader::new(File::open(&path).map_err(io(&path))?);
    Ok(Rows { input, path })
}

/// Checks that `row` of table `table` holds an entity this build reads whole: a record damaged
/// before it was backed up (its manifest then agrees with it) is refused, naming it, before
/// anything is written.
fn check_record(table: &str, row: &pb::BackupRow) -> Result<(), BackupError> {
    let read =
        EntityView::parse(&row.partition_key, &row.row_key, &row.record).and_then(|entity| {
            entity
                .properties()
                .try_for_each(|property| property.map(drop))
        });
    read.map_err(|error| {
        BackupError::Damaged(format!(
            "table {table}: the entity with PartitionKey {} and RowKey {} cannot be read ({error}): \
             the store it was backed up from holds it damaged",
            quoted(&row.partition_key),
            quoted(&row.row_key)
        ))
    })
}

/// Reads and checks `from`'s manifest and every file against it.
fn verify(from: &Path) -> Result<Manifest, BackupError> {
    let path = from.join(MANIFEST);
    let text = std::fs::read(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => BackupError::Damaged(format!(
            "{} has no {MANIFEST}: not a backup, or one that did not complete",
            from.display()
        )),
        _ => io(&path)(e),
    })?;
    let manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| BackupError::Damaged(format!("{}: {e}", path.display())))?;
    if manifest.layout != LAYOUT_VERSION || manifest.record_format > CURRENT_FORMAT {
        return Err(BackupError::Damaged(format!(
            "the backup has layout {} and record format {}; this build reads layout \
             {LAYOUT_VERSION} and record formats up to {CURRENT_FORMAT}",
            manifest.layout, manifest.record_format
        )));
    }
    for table in &manifest.tables {
        if table.file.contains("..") || table.file.starts_with('/') {
            return Err(BackupError::Damaged(format!(
                "the manifest names the file {:?} outside the backup",
                table.file
            )));
        }
        let path = from.join(&table.file);
        let mut hash = digest::Context::new(&digest::SHA256);
        let (mut bytes, mut entities) = (0u64, 0u64);
        let mut input = BufReader::new(File::open(&path).map_err(io(&path))?);
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = input.read(&mut buffer).map_err(io(&path))?;
            if read == 0 {
                break;
            }
            hash.update(&buffer[..read]);
            bytes += read as u64;
        }
        for row in open_rows(path.clone())? {
            check_record(&table.name, &row?)?;
            entities += 1;
        }
        let sha256 = hex(hash.finish().as_ref());
        if bytes != table.bytes || entities != table.entities || sha256 != table.sha256 {
            return Err(BackupError::Damaged(format!(
                "{} differs from the manifest ({bytes} bytes, {entities} entities, SHA-256 \
                 {sha256}; the manifest says {} bytes, {} entities, {}): the backup was altered \
                 or damaged",
                path.display(),
                table.bytes,
                table.entities,
                table.sha256
            )));
        }
    }
    Ok(manifest)
}

/// Builds the data directory `data_dir` (new, or empty) from the backup in `from`, after checking
/// every file against the manifest; waits until every index is built.
pub fn restore(from: &Path, data_dir: &Path) -> Result<Summary, BackupError> {
    let manifest = verify(from)?;
    // Everything the manifest declares is checked before anything is written.
    let damaged =
        |what: String| move |e: ValidationError| BackupError::Damaged(format!("{what}: {e}"));
    for table in &manifest.tables {
        for index in &table.indexes {
            index_definition(index)?;
        }
        validate_policies(&mut table.access_policies.clone()).map_err(damaged(format!(
            "the access policies of table {}",
            table.name
        )))?;
    }
    if let Some(properties) = &manifest.service_properties {
        properties
            .validate()
            .map_err(damaged("the service properties".into()))?;
    }
    prepare_empty_dir(data_dir)?;
    let engine = Engine::open(&StoreConfig::embedded(data_dir))?;
    if let Some(properties) = &manifest.service_properties {
        engine.set_service_properties(properties)?;
    }
    let mut entities = 0;
    for table in &manifest.tables {
        let settings = crate::engine::settings_change(
            Some((
                table.change_feed,
                table.change_feed_retention_seconds,
                table.change_feed_before_images,
            )),
            Some((table.time_to_live, table.default_time_to_live_seconds)),
        )?;
        engine.create_table_with(&table.name, Vec::new(), settings)?;
        if !table.access_policies.is_empty() {
            engine.set_access_policies(&table.name, table.access_policies.clone())?;
        }
        let mut batch = Vec::with_capacity(LOAD_BATCH);
        for row in open_rows(from.join(&table.file))? {
            let row = row?;
            batch.push(StoredRow {
                key: EntityKey::new(row.partition_key, row.row_key).map_err(TableError::from)?,
                record: row.record,
            });
            if batch.len() == LOAD_BATCH {
                engine.load(&table.name, &batch)?;
                batch.clear();
            }
        }
        engine.load(&table.name, &batch)?;
        entities += table.entities;
        for index in &table.indexes {
            engine.create_index(&table.name, index_definition(index)?)?;
        }
    }
    for table in &manifest.tables {
        wait_for_indexes(&engine, &table.name)?;
    }
    engine.flush()?;
    Ok(Summary {
        tables: manifest.tables.len(),
        entities,
    })
}

/// Waits until every index of `table` is built; an index whose build failed is an error.
fn wait_for_indexes(engine: &Engine, table: &str) -> Result<(), BackupError> {
    loop {
        let (_, indexes) = engine.get_table(table)?;
        if let Some(failed) = indexes.iter().find_map(|index| match &index.state {
            IndexState::Failed(why) => Some(format!("{}: {why}", index.definition.name)),
            _ => None,
        }) {
            return Err(BackupError::Damaged(format!(
                "building index {failed} of table {table} failed"
            )));
        }
        if indexes.iter().all(|index| index.state == IndexState::Ready) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
