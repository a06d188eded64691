//! The console's own calls, for what the REST protocol does not carry: a table's settings
//! (indexes and their states, feed, TTL, access policies), the latest records of its change
//! feed (the page's live tail polls it), and the server's metrics (the dashboard). Each is
//! admitted as a REST request is ([`Executor::admit`]), checked by [`crate::auth`] as gRPC's
//! `GetTable`, `ReadChanges` and the service settings are, and bounded: a feed read returns at
//! most [`TAIL_BATCH`] (records and bytes), as `ReadChanges`' batches are.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value as Json};
use tokio::sync::OwnedSemaphorePermit;
use trestle_proto::access::Permissions;

use super::{json_response, signed_in, Console};
use crate::auth::Access;
use crate::error::TableError;
use crate::model::{ChangeKind, IndexScope, IndexState, ValidationError};
use crate::rest::failure::{error_response, Failure};
use crate::rest::odata::{EntityJson, Metadata};
use crate::settings::TableDescription;
use crate::storage::{FeedBatch, FeedPosition, StoredChange};

/// What one tail read returns at most.
const TAIL_BATCH: FeedBatch = FeedBatch {
    records: 100,
    bytes: 1024 * 1024,
};

/// The answer of a call: its own, or its failure's.
fn answered(call: Result<Response, Failure>) -> Response {
    call.unwrap_or_else(|failure| error_response(Metadata::Minimal, failure))
}

/// A signed-in caller allowed to read table `table`'s description, admitted as a request.
fn reading(
    console: &Console,
    headers: &HeaderMap,
    table: &str,
) -> Result<(Access, OwnedSemaphorePermit), Failure> {
    let access = signed_in(console, headers)?;
    access.describe_table(table)?;
    let permit = console.executor.admit()?;
    Ok((access, permit))
}

/// `GET /console/tables/{table}`: the table's settings, as `GetTable` describes them.
pub(super) async fn describe(
    State(console): State<Console>,
    Path(table): Path<String>,
    headers: HeaderMap,
) -> Response {
    answered(describe_table(&console, table, &headers).await)
}

async fn describe_table(
    console: &Console,
    table: String,
    headers: &HeaderMap,
) -> Result<Response, Failure> {
    let (_, _in_flight) = reading(console, headers, &table)?;
    let described = console
        .executor
        .blocking(move |engine| engine.describe_table(&table))
        .await?;
    let body = description_json(&described).to_string();
    Ok(json_response(StatusCode::OK, body))
}

fn description_json(table: &TableDescription) -> Json {
    let indexes: Vec<Json> = table
        .indexes
        .iter()
        .map(|index| {
            let (state, why) = match &index.state {
                IndexState::Building => ("building", None),
                IndexState::Ready => ("ready", None),
                IndexState::Failed(why) => ("failed", Some(why.as_str())),
            };
            json!({
                "name": index.definition.name,
                "paths": index.definition.properties,
                "scope": match index.definition.scope {
                    IndexScope::Partition => "partition",
                    IndexScope::Table => "table",
                },
                "unique": index.definition.unique,
                "state": state,
                "failure": why,
            })
        })
        .collect();
    let policies: Vec<&str> = table
        .access_policies
        .iter()
        .map(|p| p.id.as_str())
        .collect();
    json!({
        "name": table.name.as_str(),
        "indexes": indexes,
        "changeFeed": table.change_feed.as_ref().map(|feed| json!({
            "retentionSeconds": feed.retention_seconds,
            "beforeImages": feed.before_images,
        })),
        "timeToLive": table.time_to_live.as_ref().map(|ttl| json!({
            "defaultSeconds": ttl.default_seconds,
        })),
        "accessPolicies": policies,
    })
}

/// `GET /console/tables/{table}/changes?after=<position>`: the feed's records after `after`
/// (at most [`TAIL_BATCH`]) and the position to ask after next.
pub(super) async fn changes(
    State(console): State<Console>,
    Path(table): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    answered(read_changes(&console, table, query.as_deref(), &headers).await)
}

async fn read_changes(
    console: &Console,
    table: String,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Response, Failure> {
    let (access, _in_flight) = reading(console, headers, &table)?;
    // After `after` (`<transaction>.<record>`); without it, from the feed's end now, so that the
    // tail shows what comes next.
    let after = query.and_then(|query| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("after="))
    });
    let after = after.map(parse_position).transpose()?;
    let name = table.clone();
    let (changes, next) = console
        .executor
        .blocking(move |engine| {
            let after = match after {
                Some(after) => after,
                None => engine.feed_end(&name)?.readable,
            };
            let changes = engine.read_changes(&name, Some(after), TAIL_BATCH)?;
            let next = changes.last().map_or(after, |change| change.position);
            Ok((changes, next))
        })
        .await?;
    let records = changes
        .iter()
        .filter(|change| {
            let key = &change.key;
            let read = Permissions::READ;
            access
                .entity(&table, read, &key.partition_key, &key.row_key)
                .is_ok()
        })
        .map(|change| change_json(&table, change))
        .collect::<Result<Vec<Json>, TableError>>()?;
    let body = json!({"records": records, "next": position_text(next)});
    Ok(json_response(StatusCode::OK, body.to_string()))
}

fn parse_position(text: &str) -> Result<FeedPosition, TableError> {
    let invalid = || {
        TableError::Invalid(ValidationError::Argument(format!(
            "after={text:?} is not a feed position (<transaction>.<record>)"
        )))
    };
    let (transaction, record) = text.split_once('.').ok_or_else(invalid)?;
    Ok(FeedPosition {
        transaction: transaction.parse().map_err(|_| invalid())?,
        record: record.parse().map_err(|_| invalid())?,
    })
}

fn position_text(position: FeedPosition) -> String {
    format!("{}.{}", position.transaction, position.record)
}

fn change_json(table: &str, change: &StoredChange) -> Result<Json, TableError> {
    let writer = EntityJson::element(Metadata::Full, "", table);
    let mut entity = String::new();
    if let Some(after) = change.after().map_err(TableError::from)? {
        writer
            .write_view(&mut entity, &after)
            .map_err(TableError::from)?;
    }
    let entity: Json = serde_json::from_str(&entity).unwrap_or(Json::Null);
    Ok(json!({
        "position": position_text(change.position),
        "kind": kind_name(change.kind),
        "partitionKey": change.key.partition_key,
        "rowKey": change.key.row_key,
        "entity": entity,
    }))
}

fn kind_name(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Insert => "insert",
        ChangeKind::Replace => "replace",
        ChangeKind::Merge => "merge",
        ChangeKind::Patch => "patch",
        ChangeKind::Delete => "delete",
        ChangeKind::Expire => "expire",
    }
}

/// `GET /console/metrics`: the server's metrics in Prometheus' text format, for an account key
/// (they describe every table's traffic).
pub(super) async fn metrics(State(console): State<Console>, headers: HeaderMap) -> Response {
    let allowed = signed_in(&console, &headers).and_then(|access| Ok(access.read_metrics()?));
    if let Err(failure) = allowed {
        return answered(Err(failure));
    }
    let text = crate::telemetry::render().unwrap_or_default();
    (
        StatusCode::OK,
        [
            (
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4",
            ),
            (axum::http::header::CACHE_CONTROL, "no-store"),
        ],
        text,
    )
        .into_response()
}
