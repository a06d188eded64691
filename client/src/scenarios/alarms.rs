//! Reacting to changes without polling: sensors raise alarms into a table that keeps a change
//! feed, and a worker following the feed pages the on-call engineer for each serious alarm as it
//! commits, then marks it handled (a merge the worker itself sees, and passes over).

use std::time::Duration;

use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};

use super::wrong;
use crate::{ChangeKind, FeedCursor, IfMatch, Result, TableClient};

/// An alarm, keyed by site (the partition) and alarm id.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Alarm {
    /// 1 (a notice) to 5 (the building is on fire).
    pub level: i32,
    /// What the sensor said.
    pub message: String,
    /// Whether someone was paged for it.
    #[serde(default)]
    pub handled: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Handled {
    handled: bool,
}

/// The level from which an alarm pages someone.
pub const SERIOUS: i32 = 3;

/// Follows `alarms`' feed from `cursor`, pages for each new serious alarm and marks it handled;
/// returns what it did once it has handled `expected` alarms.
pub async fn page_on_call(
    alarms: TableClient,
    cursor: FeedCursor,
    expected: usize,
) -> Result<Vec<String>> {
    let mut changes = alarms.changes().from(cursor).follow().stream::<Alarm>();
    let mut done = Vec::new();
    while done.len() < expected {
        let Some(change) = changes.try_next().await? else {
            return Err(wrong("the feed ended while following".into()));
        };
        let Some(alarm) = change.entity else { continue };
        if change.kind != ChangeKind::Insert || alarm.value.level < SERIOUS {
            continue;
        }
        let key = change.key;
        done.push(format!(
            "paged on-call: {} at {} (level {})",
            alarm.value.message, key.partition_key, alarm.value.level
        ));
        let handled = Handled { handled: true };
        alarms
            .merge(key, &handled, IfMatch::from(&alarm.etag))
            .await?;
    }
    Ok(done)
}

/// The tour: a worker follows the feed while five alarms are raised at two sites; the three
/// serious ones page and end up handled. What happened, a line each.
pub async fn tour(alarms: &TableClient) -> Result<Vec<String>> {
    alarms.create().await?;
    alarms.set_change_feed(true, 3600).await?;
    let cursor = alarms.changes().cursor_now().await?;
    let worker = tokio::spawn(page_on_call(alarms.clone(), cursor, 3));
    let raised = [
        ("site-1", "a1", 1, "door left open"),
        ("site-1", "a2", 4, "server room at 41 C"),
        ("site-2", "a3", 2, "filter due"),
        ("site-2", "a4", 5, "smoke detected"),
        ("site-1", "a5", 3, "UPS on battery"),
    ];
    for (site, id, level, message) in raised {
        let alarm = Alarm {
            level,
            message: message.into(),
            handled: false,
        };
        alarms.insert((site, id), &alarm).await?;
    }
    let mut lines = tokio::time::timeout(Duration::from_secs(30), worker)
        .await
        .map_err(|_| wrong("the worker did not page within 30 s".into()))?
        .map_err(|e| wrong(format!("the worker failed: {e}")))??;
    for (site, id, level, _) in raised {
        let alarm = alarms.get::<Alarm>((site, id)).await?;
        if alarm.value.handled != (level >= SERIOUS) {
            return Err(wrong(format!(
                "{site}/{id} handled: {}",
                alarm.value.handled
            )));
        }
    }
    lines.push("the three serious alarms are handled, the others left alone".into());
    Ok(lines)
}
