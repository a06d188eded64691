//! Change feeds' retention: a task of the server that, every [`TRIM_EVERY`], removes from each
//! table's feed the records older than the feed's retention, a bounded batch at a time on the
//! blocking pool. Over PostgreSQL every server trims; the removals are idempotent.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::TableError;
use crate::model::{Ticks, TICKS_PER_SECOND};

/// How often the feeds are trimmed.
const TRIM_EVERY: Duration = Duration::from_secs(1);
/// Records one trimming step removes at most.
const TRIM_BATCH: usize = 1_000;

/// Trims every feed of `engine` every [`TRIM_EVERY`] until the task is aborted.
pub(crate) fn trim_in_background(engine: Arc<Engine>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(TRIM_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let engine = engine.clone();
            let trimmed =
                tokio::task::spawn_blocking(move || trim_all(&engine, Ticks::now())).await;
            match trimmed {
                Ok(Ok(0)) => {}
                Ok(Ok(removed)) => {
                    tracing::debug!(removed, "trimmed change feeds");
                    crate::telemetry::background_done("feed_trim");
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "trimming change feeds failed; trying again")
                }
                Err(error) => tracing::error!(%error, "trimming change feeds panicked"),
            }
        }
    })
}

/// Removes from every table's feed the records older than its retention at `now`: how many.
pub(crate) fn trim_all(engine: &Engine, now: Ticks) -> Result<usize, TableError> {
    let mut removed = 0;
    let mut page_token = String::new();
    loop {
        let page = engine.list_tables("", 1_000, &page_token)?;
        for name in &page.tables {
            let table = match engine.table(name.as_str()) {
                Ok(table) => table,
                // Deleted meanwhile.
                Err(TableError::TableNotFound(_)) => continue,
                Err(error) => return Err(error),
            };
            let catalog = table.indexes()?;
            if !catalog.change_feed {
                continue;
            }
            let retention = i64::try_from(catalog.feed_retention_seconds).unwrap_or(i64::MAX);
            let before = Ticks(
                now.0
                    .saturating_sub(retention.saturating_mul(TICKS_PER_SECOND)),
            );
            loop {
                let step = table.trim_changes(before, TRIM_BATCH)?;
                removed += step;
                if step < TRIM_BATCH {
                    break;
                }
            }
        }
        match page.next_page_token {
            Some(next) => page_token = next,
            None => return Ok(removed),
        }
    }
}
