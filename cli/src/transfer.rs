//! A table's entities out to JSON lines, and JSON lines into a table: transactions of up to 100
//! entities of one partition, several partitions at once, re-runnable after an interruption.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use futures_util::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinSet;
use trestle_client::{
    EntityKey, ErrorCode, Filter, Properties, TableClient, UpsertMode, MAX_OPERATIONS,
};

use crate::args::ImportMode;
use crate::values::{entity_line, parse_entity_line};
use crate::CliError;

/// Transactions `import` keeps in flight at once (each of one partition).
const CONCURRENT_BATCHES: usize = 8;
/// Entities `import` holds waiting for their partition's batch to fill, at most.
const BUFFERED: usize = 10_000;

/// A spinner on standard error counting `what`, drawn only on a terminal.
fn progress(what: &'static str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    let style = format!("{{spinner}} {{pos}} {what} ({{per_sec}})");
    if let Ok(style) = ProgressStyle::with_template(&style) {
        bar.set_style(style);
    }
    bar
}

/// Writes every entity of `table` (that `filter` matches) to `out`, one JSON line each, in key
/// order.
pub(crate) async fn export(
    table: &TableClient,
    filter: Option<String>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let mut query = table.entities();
    if let Some(filter) = filter {
        query = query.filter(Filter::raw(filter));
    }
    let mut entities = query.stream();
    let bar = progress("entities exported");
    while let Some(entity) = entities.try_next().await? {
        writeln!(out, "{}", entity_line(&entity))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

/// What an import did.
#[derive(Debug, Default)]
pub(crate) struct ImportReport {
    written: u64,
    skipped: u64,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "imported {} entities, skipped {} that existed",
            self.written, self.skipped
        )
    }
}

/// Reads JSON lines from `input` into `table` (created if missing): entities of one partition
/// are gathered into transactions of up to 100 (at most [`BUFFERED`] entities waiting in all, so
/// that input in any order keeps memory bounded). With [`ImportMode::Insert`], a batch refused
/// because an entity exists is written one entity at a time, skipping those that exist, so a
/// second run after an interruption finishes the work.
pub(crate) async fn import(
    table: &TableClient,
    mode: ImportMode,
    input: &mut dyn BufRead,
) -> Result<ImportReport, CliError> {
    table.create_if_not_exists().await?;
    let mut report = ImportReport::default();
    let mut running: JoinSet<Result<ImportReport, CliError>> = JoinSet::new();
    let mut pending: BTreeMap<String, Vec<(EntityKey, Properties)>> = BTreeMap::new();
    let mut buffered = 0;
    let bar = progress("entities imported");
    for (at, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let (key, properties) = parse_entity_line(&line)
            .map_err(|why| CliError::Usage(format!("line {}: {why}", at + 1)))?;
        let batch = pending.entry(key.partition_key.clone()).or_default();
        batch.push((key, properties));
        buffered += 1;
        let full: Vec<Vec<(EntityKey, Properties)>> = if batch.len() == MAX_OPERATIONS {
            vec![std::mem::take(batch)]
        } else if buffered >= BUFFERED {
            std::mem::take(&mut pending).into_values().collect()
        } else {
            continue;
        };
        pending.retain(|_, batch| !batch.is_empty());
        for batch in full {
            buffered -= batch.len();
            if running.len() == CONCURRENT_BATCHES {
                add(&mut report, running.join_next().await, &bar)?;
            }
            running.spawn(write_batch(table.clone(), mode, batch));
        }
    }
    for batch in pending.into_values() {
        if running.len() == CONCURRENT_BATCHES {
            add(&mut report, running.join_next().await, &bar)?;
        }
        running.spawn(write_batch(table.clone(), mode, batch));
    }
    while let Some(done) = running.join_next().await {
        add(&mut report, Some(done), &bar)?;
    }
    bar.finish_and_clear();
    Ok(report)
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
    let mut tx = table.transaction(first.partition_key.clone());
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
            skipped: 0,
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
