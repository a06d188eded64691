//! A table's entities out to JSON lines, and JSON lines or an Azure table into a table:
//! transactions of up to 100 entities of one partition, several partitions at once, re-runnable
//! after an interruption. An import reads and checks every line before it creates the table or
//! writes anything (spooling the lines to a temporary file), so that bad input, on any line,
//! changes nothing; a failure while writing says how many were written, and running the import
//! again finishes it.

use std::collections::BTreeMap;
use std::io::{BufRead, Seek, SeekFrom, Write};

use futures_util::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinSet;
use trestle_client::{
    EntityKey, ErrorCode, Filter, Properties, TableClient, UpsertMode, MAX_OPERATIONS,
};

use crate::args::ImportMode;
use crate::azure::AzureTables;
use crate::values::{entity_line, parse_entity_line};
use crate::CliError;

/// Transactions `import` keeps in flight at once (each of one partition).
const CONCURRENT_BATCHES: usize = 8;
/// Entities `import` holds waiting for their partition's batch to fill, at most.
const BUFFERED: usize = 10_000;

/// A spinner on standard error counting entities `verb` ("exported"), drawn only on a terminal.
fn progress(verb: &'static str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    let style = format!("{{spinner}} {{pos}} entities {verb} ({{per_sec}})");
    if let Ok(style) = ProgressStyle::with_template(&style) {
        bar.set_style(style);
    }
    bar
}

/// What `work` (a count) gives, with a ticking spinner and the time taken on standard error
/// meanwhile, drawn only on a terminal: a count of a big table is one long call.
pub(crate) async fn while_counting<T>(work: impl std::future::Future<Output = T>) -> T {
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} counting ({elapsed})") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let outcome = work.await;
    bar.finish_and_clear();
    outcome
}

/// Writes every entity of `table` (that `filter` matches) to `out`, one JSON line each: in key
/// order, or read as `parallel` segments at once, each in key order, their lines interleaved.
pub(crate) async fn export(
    table: &TableClient,
    filter: Option<String>,
    parallel: u32,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let mut query = table.entities();
    if let Some(filter) = filter {
        query = query.filter(Filter::raw(filter));
    }
    let mut entities = match parallel {
        0 | 1 => query.stream(),
        total => {
            let segments = (0..total).map(|segment| query.clone().segment(segment, total).stream());
            Box::pin(futures_util::stream::select_all(segments))
        }
    };
    let bar = progress("exported");
    while let Some(entity) = entities.try_next().await? {
        writeln!(out, "{}", entity_line(&entity))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

/// What an import or a copy did.
#[derive(Debug, Default)]
pub(crate) struct ImportReport {
    /// "imported" or "copied".
    verb: &'static str,
    written: u64,
    skipped: u64,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} entities, skipped {} that existed",
            self.verb, self.written, self.skipped
        )
    }
}

/// Reads JSON lines from `input` into `table` (created if missing), through a [`Loader`]: every
/// line is read and checked first, and only then is anything created or written.
pub(crate) async fn import(
    table: &TableClient,
    mode: ImportMode,
    input: &mut dyn BufRead,
) -> Result<ImportReport, CliError> {
    let mut spool = tempfile::tempfile()?;
    let mut writer = std::io::BufWriter::new(&mut spool);
    let mut lines = 0u64;
    each_line(input, |number, line| {
        parse_entity_line(line).map_err(|why| format!("line {number}: {why}"))?;
        writeln!(writer, "{line}").map_err(|e| format!("spooling line {number}: {e}"))?;
        lines += 1;
        Ok(())
    })?;
    writer.flush()?;
    drop(writer);
    spool.seek(SeekFrom::Start(0))?;
    let mut loader = Loader::start(table, mode, "imported").await?;
    let spooled = std::io::BufReader::new(spool);
    for line in spooled.lines() {
        let (key, properties) = parse_entity_line(&line?).map_err(CliError::Usage)?;
        if let Err(error) = loader.push(key, properties).await {
            return Err(loader.failed(error, lines));
        }
    }
    loader.finish(lines).await
}

/// Calls `check` with each non-blank line of `input` and its number (from 1); the first refusal,
/// or a line that is not UTF-8, stops the reading with its line number.
fn each_line(
    input: &mut dyn BufRead,
    mut check: impl FnMut(u64, &str) -> Result<(), String>,
) -> Result<(), CliError> {
    let mut bytes = Vec::new();
    let mut number = 0;
    loop {
        bytes.clear();
        if input.read_until(b'\n', &mut bytes)? == 0 {
            return Ok(());
        }
        number += 1;
        let line = std::str::from_utf8(&bytes).map_err(|error| {
            let at = error.valid_up_to() + 1;
            CliError::Usage(format!(
                "line {number}: not UTF-8 (at byte {at}); nothing was imported"
            ))
        })?;
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        check(number, line)
            .map_err(|why| CliError::Usage(format!("{why}; nothing was imported")))?;
    }
}

/// Copies the entities of the Azure table `source` (those `filter` matches) into `table`
/// (created if missing), page by page, through a [`Loader`].
pub(crate) async fn copy(
    azure: &AzureTables,
    source: &str,
    filter: Option<String>,
    table: &TableClient,
    mode: ImportMode,
) -> Result<ImportReport, CliError> {
    let mut pages = azure.entities(source, filter);
    // The first page before the table here is created: a source that refuses leaves nothing.
    let mut page = pages.next().await?;
    let mut loader = Loader::start(table, mode, "copied").await?;
    let mut read = 0;
    while let Some(entities) = page {
        for (key, properties) in entities {
            read += 1;
            if let Err(error) = loader.push(key, properties).await {
                return Err(loader.failed(error, read));
            }
        }
        page = match pages.next().await {
            Ok(page) => page,
            Err(error) => return Err(loader.failed(error, read)),
        };
    }
    loader.finish(read).await
}

/// Writes entities given in any order into a table: entities of one partition are gathered
/// into transactions of up to 100 (at most [`BUFFERED`] entities waiting in all, so that memory
/// stays bounded), [`CONCURRENT_BATCHES`] at once. With [`ImportMode::Insert`], a batch refused
/// because an entity exists is written one entity at a time, skipping those that exist, so a
/// second run after an interruption finishes the work.
struct Loader {
    table: TableClient,
    mode: ImportMode,
    report: ImportReport,
    running: JoinSet<Result<ImportReport, CliError>>,
    pending: BTreeMap<String, Vec<(EntityKey, Properties)>>,
    buffered: usize,
    bar: ProgressBar,
}

impl Loader {
    /// A loader into `table`, created if missing, reporting entities as `verb` ("imported").
    async fn start(
        table: &TableClient,
        mode: ImportMode,
        verb: &'static str,
    ) -> Result<Loader, CliError> {
        table.create_if_not_exists().await?;
        Ok(Loader {
            table: table.clone(),
            mode,
            report: ImportReport {
                verb,
                ..ImportReport::default()
            },
            running: JoinSet::new(),
            pending: BTreeMap::new(),
            buffered: 0,
            bar: progress(verb),
        })
    }

    /// Adds an entity, sending its partition's batch once full (or every batch once
    /// [`BUFFERED`] entities wait).
    async fn push(&mut self, key: EntityKey, properties: Properties) -> Result<(), CliError> {
        let batch = self.pending.entry(key.partition_key.clone()).or_default();
        batch.push((key, properties));
        self.buffered += 1;
        let full: Vec<Vec<(EntityKey, Properties)>> = if batch.len() == MAX_OPERATIONS {
            vec![std::mem::take(batch)]
        } else if self.buffered >= BUFFERED {
            std::mem::take(&mut self.pending).into_values().collect()
        } else {
            return Ok(());
        };
        self.pending.retain(|_, batch| !batch.is_empty());
        for batch in full {
            self.buffered -= batch.len();
            self.send(batch).await?;
        }
        Ok(())
    }

    /// Starts writing `batch`, once fewer than [`CONCURRENT_BATCHES`] are running.
    async fn send(&mut self, batch: Vec<(EntityKey, Properties)>) -> Result<(), CliError> {
        if self.running.len() == CONCURRENT_BATCHES {
            let done = self.running.join_next().await;
            add(&mut self.report, done, &self.bar)?;
        }
        self.running
            .spawn(write_batch(self.table.clone(), self.mode, batch));
        Ok(())
    }

    /// Writes what waits and what runs; what was done (of `total` entities, if known).
    async fn finish(mut self, total: u64) -> Result<ImportReport, CliError> {
        for batch in std::mem::take(&mut self.pending).into_values() {
            if let Err(error) = self.send(batch).await {
                return Err(self.failed(error, total));
            }
        }
        while let Some(done) = self.running.join_next().await {
            if let Err(error) = add(&mut self.report, Some(done), &self.bar) {
                return Err(self.failed(error, total));
            }
        }
        self.bar.finish_and_clear();
        Ok(self.report)
    }

    /// `error`, saying what was written of `total` before it and how to finish.
    fn failed(&self, error: CliError, total: u64) -> CliError {
        self.bar.finish_and_clear();
        CliError::Usage(format!(
            "{error}; {} entities had been written of {total} read ({} skipped that existed): run the \
             same import again to finish it (entities already written are skipped)",
            self.report.written, self.report.skipped
        ))
    }
}

fn add(
    report: &mut ImportReport,
    done: Option<Result<Result<ImportReport, CliError>, tokio::task::JoinError>>,
    bar: &ProgressBar,
) -> Result<(), CliError> {
    let Some(done) = done else {
        return Ok(());
    };
    let batch = done.map_err(|e| CliError::Usage(format!("an import task failed: {e}")))??;
    report.written += batch.written;
    report.skipped += batch.skipped;
    bar.inc(batch.written + batch.skipped);
    Ok(())
}

/// The idempotency key of a batch: a digest of the table, the mode and the batch's entities, so
/// that a run again after an interruption sends each batch it had sent with the same key, and a
/// batch that had committed answers as it did (written, not skipped) without applying again.
fn batch_key(table: &str, mode: ImportMode, batch: &[(EntityKey, Properties)]) -> String {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    digest.update(format!("{table}\0{mode:?}\0{batch:?}").as_bytes());
    let hex: String = (digest.finish().as_ref().iter())
        .take(16)
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("import-{hex}")
}

/// Writes one partition's batch in one transaction (insert or replace); for an insert refused
/// because an entity exists, one at a time, skipping those that exist.
async fn write_batch(
    table: TableClient,
    mode: ImportMode,
    batch: Vec<(EntityKey, Properties)>,
) -> Result<ImportReport, CliError> {
    let Some((first, _)) = batch.first() else {
        return Ok(ImportReport::default());
    };
    let key = batch_key(table.name(), mode, &batch);
    let mut tx = (table.transaction(first.partition_key.clone())).idempotency_key(key);
    for (key, properties) in &batch {
        match mode {
            ImportMode::Insert => tx.insert(key.row_key.clone(), properties)?,
            ImportMode::Upsert => {
                tx.upsert(key.row_key.clone(), properties, UpsertMode::Replace)?
            }
        };
    }
    let exists =
        |error: &trestle_client::Error| error.code() == Some(ErrorCode::EntityAlreadyExists);
    match tx.commit().await {
        Ok(_) => Ok(ImportReport {
            written: batch.len() as u64,
            ..ImportReport::default()
        }),
        Err(error) if mode == ImportMode::Insert && exists(&error) => {
            let mut report = ImportReport::default();
            for (key, properties) in batch {
                match table.insert(key, &properties).await {
                    Ok(_) => report.written += 1,
                    Err(error) if exists(&error) => report.skipped += 1,
                    Err(error) => return Err(error.into()),
                }
            }
            Ok(report)
        }
        Err(error) => Err(error.into()),
    }
}
