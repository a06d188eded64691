//! The console's own calls, for what the REST protocol does not carry: a table's settings
//! (indexes and their states, feed, TTL, access policies) read and changed (the feed and TTL
//! set, indexes declared and dropped), the latest records of its change feed (the page's live
//! tail polls it), and the server's metrics (the dashboard). Each is admitted as a REST request
//! is ([`crate::executor::Executor::admit`]), checked by [`crate::auth`] as gRPC's `GetTable`,
//! `SetChangeFeed`, `SetTimeToLive`, `CreateIndex`, `DropIndex`, `ReadChanges` and the service
//! settings are, validated by the same model constructors, and bounded: a body by the console's
//! 16 KiB, a feed read by [`TAIL_BATCH`] (records and bytes), as `ReadChanges`' batches are.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value as Json};
use tokio::sync::OwnedSemaphorePermit;
use trestle_proto::access::Permissions;

use super::{json_response, signed_in, Console};
use crate::auth::Access;
use crate::engine::Engine;
use crate::error::{ErrorCode, TableError};
use crate::model::{
    ChangeFeed, ChangeKind, IndexDefinition, IndexScope, IndexState, ValidationError,
};
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

/// A signed-in caller allowed to change table `table`'s settings, admitted as a request.
fn managing(
    console: &Console,
    headers: &HeaderMap,
    table: &str,
) -> Result<OwnedSemaphorePermit, Failure> {
    signed_in(console, headers)?.manage_table(table)?;
    Ok(console.executor.admit()?)
}

/// The JSON body of a console call, or an `InvalidInput` naming what is wrong with it.
fn body_of<'a, T: Deserialize<'a>>(body: &'a [u8], shape: &str) -> Result<T, Failure> {
    serde_json::from_slice(body).map_err(|error| {
        Failure::of(
            ErrorCode::InvalidInput,
            format!("the body is not {shape}: {error}"),
        )
    })
}

/// A change of a table's settings: each one the body names is set (`null`: off); one it does
/// not name is left as it is.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SettingsBody {
    #[serde(default, deserialize_with = "named")]
    change_feed: Option<Option<FeedSetting>>,
    #[serde(default, deserialize_with = "named")]
    time_to_live: Option<Option<TimeToLiveSetting>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FeedSetting {
    /// 0: a day, as `SetChangeFeed`'s default.
    #[serde(default)]
    retention_seconds: u64,
    #[serde(default)]
    before_images: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TimeToLiveSetting {
    /// 0: an entity lives until its own `TimeToLive` says.
    #[serde(default)]
    default_seconds: u64,
}

/// A field that is present, `null` or not: `Some` of what it holds.
fn named<'de, D, T>(value: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(value).map(Some)
}

/// `PUT /console/tables/{table}/settings` with `{"changeFeed": {"retentionSeconds",
/// "beforeImages"} | null, "timeToLive": {"defaultSeconds"} | null}`: sets what it names, then
/// answers the table's settings as [`describe`] does.
pub(super) async fn set_settings(
    State(console): State<Console>,
    Path(table): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answered(change_settings(&console, table, &headers, &body).await)
}

async fn change_settings(
    console: &Console,
    table: String,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, Failure> {
    let _in_flight = managing(console, headers, &table)?;
    let shape = r#"{"changeFeed": {...} | null, "timeToLive": {...} | null}"#;
    let change: SettingsBody = body_of(body, shape)?;
    let feed = match change.change_feed {
        Some(Some(feed)) => Some(Some(
            ChangeFeed::new(feed.retention_seconds, feed.before_images)
                .map_err(TableError::Invalid)?,
        )),
        Some(None) => Some(None),
        None => None,
    };
    let time_to_live = match change.time_to_live {
        Some(ttl) => Some(crate::engine::time_to_live(
            ttl.is_some(),
            ttl.as_ref().map_or(0, |ttl| ttl.default_seconds),
        )?),
        None => None,
    };
    let change = crate::storage::SettingsChange {
        change_feed: feed,
        time_to_live,
    };
    // Both in one change: a bad value of either changes neither.
    settings_after(console, table, move |engine, table| {
        engine.set_settings(table, change)
    })
    .await
}

/// Table `table`'s settings (as [`describe`] answers them) once `change` has been made to it.
async fn settings_after(
    console: &Console,
    table: String,
    change: impl FnOnce(&Engine, &str) -> Result<(), TableError> + Send + 'static,
) -> Result<Response, Failure> {
    let described = console
        .executor
        .blocking(move |engine| {
            change(engine, &table)?;
            engine.describe_table(&table)
        })
        .await?;
    let body = description_json(&described).to_string();
    Ok(json_response(StatusCode::OK, body))
}

/// An index to declare, as [`description_json`] shows one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexDeclaration {
    name: String,
    paths: Vec<String>,
    /// `partition` (the default) or `table`.
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    unique: bool,
}

/// `POST /console/tables/{table}/indexes` with `{"name", "paths", "scope", "unique"}`: declares
/// the index (built in the background, as `CreateIndex` builds it), then answers the table's
/// settings.
pub(super) async fn create_index(
    State(console): State<Console>,
    Path(table): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answered(declare_index(&console, table, &headers, &body).await)
}

async fn declare_index(
    console: &Console,
    table: String,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, Failure> {
    let _in_flight = managing(console, headers, &table)?;
    let shape =
        r#"{"name": "...", "paths": ["..."], "scope": "partition" | "table", "unique": false}"#;
    let declared: IndexDeclaration = body_of(body, shape)?;
    let scope = match declared.scope.as_deref() {
        None | Some("partition") => IndexScope::Partition,
        Some("table") => IndexScope::Table,
        Some(other) => {
            let why = format!("index scope {other:?} is not \"partition\" or \"table\"");
            return Err(TableError::Invalid(ValidationError::Argument(why)).into());
        }
    };
    let definition = IndexDefinition::new(declared.name, declared.paths, scope, declared.unique)
        .map_err(TableError::Invalid)?;
    settings_after(console, table, move |engine, table| {
        engine.create_index(table, definition).map(drop)
    })
    .await
}

/// `DELETE /console/tables/{table}/indexes/{index}`: drops the index at once (its entries are
/// reclaimed in the background), then answers the table's settings.
pub(super) async fn drop_index(
    State(console): State<Console>,
    Path((table, index)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    answered(drop_declared_index(&console, table, index, &headers).await)
}

async fn drop_declared_index(
    console: &Console,
    table: String,
    index: String,
    headers: &HeaderMap,
) -> Result<Response, Failure> {
    let _in_flight = managing(console, headers, &table)?;
    settings_after(console, table, move |engine, table| {
        engine.drop_index(table, &index)
    })
    .await
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
