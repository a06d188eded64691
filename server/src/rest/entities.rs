//! The entity operations: insert, update / merge / insert-or-replace / insert-or-merge, get, and
//! query with `$filter`, `$select`, `$top` and continuation; each body parsed off the runtime's
//! threads when large, each write answered once durable.

use axum::body::Bytes;
use axum::response::IntoResponse;
use http::{HeaderValue, StatusCode};
use serde_json::Value as Json;
use trestle_proto::access::Permissions;

use super::apply::Apply;
use super::failure::Failure;
use super::odata::{self, Metadata};
use super::reply::{header_value, json_text_response, no_content};
use super::request::Request;
use super::{Answer, Call, RestApi};
use crate::engine::MatchSink;
use crate::error::ErrorCode;
use crate::executor::WorkError;
use crate::idempotency::IdempotencyClaim;
use crate::model::{
    EntityKey, IfMatch, NewEntity, Operation, StoredEntity, UpsertMode, ValidationError,
};
use crate::query::order::OrderBy;
use crate::query::QuerySpec;
use crate::storage::{EntityView, StorageError};

pub(super) async fn insert(call: &Call<'_>, table: String) -> Answer {
    let (api, request, access, base) = (call.api, call.request, call.access, &call.base);
    access.on_table(&table, Permissions::ADD)?;
    let entity = parse_body(&request.body, |body| {
        odata::entity_from_json(body, None).map_err(Failure::invalid)
    })
    .await?;
    let operation = Operation::Insert(entity);
    let needed = crate::auth::needed_for(&operation);
    access.entity(
        &table,
        needed,
        operation.partition_key(),
        operation.row_key(),
    )?;
    let content = request.return_content(true);
    let metadata = request.metadata();
    let claim = request.idempotency_claim(access)?;
    let stored = write_durably(api, &table, operation, claim).await?;
    let mut response = if content {
        let json = odata::EntityJson::element(metadata, base, &table).stored(&stored);
        json_text_response(StatusCode::CREATED, metadata, json)
    } else {
        no_content(true)
    };
    response
        .headers_mut()
        .insert(http::header::ETAG, header_value(stored.etag().as_str()));
    Ok(response)
}

/// Bodies up to this size are parsed on the runtime's thread; larger ones on the blocking pool, so
/// that parsing megabytes never holds up other clients' requests.
pub(super) const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// `parse` of `body`, off the runtime's worker threads when the body is large.
pub(super) async fn parse_body<T: Send + 'static>(
    body: &Bytes,
    parse: impl FnOnce(&[u8]) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    if body.len() <= INLINE_PARSE_BYTES {
        return parse(body);
    }
    let body = body.clone();
    tokio::task::spawn_blocking(move || parse(&body))
        .await
        .map_err(|_| Failure::from(WorkError::Panicked))?
}

/// Applies one write (once, with an idempotency `claim`) and answers once it is durable: the
/// entity as stored.
pub(super) async fn write_durably(
    api: &RestApi,
    table: &str,
    operation: Operation,
    claim: Option<IdempotencyClaim>,
) -> Result<StoredEntity, Failure> {
    let pending = api
        .executor
        .write(table.to_owned(), operation, claim)
        .await?;
    api.executor.durable(pending).await?.ok_or_else(|| {
        tracing::error!(table, "a REST write stored no entity");
        Failure::of(
            ErrorCode::InternalError,
            "internal error; the server log has the details",
        )
    })
}

/// The write an entity body asks for, by the method and `If-Match`: with it an update (`PUT`) or a
/// merge (`MERGE`, `PATCH`), without it an insert-or-replace or an insert-or-merge; the same
/// alone or inside `$batch`.
pub(super) fn entity_write(
    entity: NewEntity,
    if_match: Option<IfMatch>,
    replace: bool,
) -> Operation {
    match (if_match, replace) {
        (Some(if_match), true) => Operation::Update(entity, if_match),
        (Some(if_match), false) => Operation::Merge(entity, if_match),
        (None, true) => Operation::Upsert(entity, UpsertMode::Replace),
        (None, false) => Operation::Upsert(entity, UpsertMode::Merge),
    }
}

/// `PUT`, `PATCH` or `MERGE` of one entity.
pub(super) async fn write(call: &Call<'_>, table: String, key: EntityKey) -> Answer {
    let (api, request, access) = (call.api, call.request, call.access);
    // Checked before the body is parsed: what is needed follows from If-Match alone (an update
    // or merge with it, an upsert without), as `auth::needed_for` says of the operation.
    let if_match = request.if_match()?;
    let needed = if if_match.is_some() {
        Permissions::UPDATE
    } else {
        Permissions::ADD.union(Permissions::UPDATE)
    };
    access.entity(&table, needed, &key.partition_key, &key.row_key)?;
    let keys = key.clone();
    let entity = parse_body(&request.body, move |body| {
        odata::entity_from_json(body, Some(&keys)).map_err(Failure::invalid)
    })
    .await?;
    let operation = entity_write(entity, if_match, request.method == http::Method::PUT);
    let claim = request.idempotency_claim(access)?;
    let etag = write_durably(api, &table, operation, claim).await?.etag();
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert(http::header::ETAG, header_value(etag.as_str()));
    Ok(response)
}

/// `DELETE` of one entity: `If-Match` required.
pub(super) async fn delete(call: &Call<'_>, table: String, key: EntityKey) -> Answer {
    let (api, request, access) = (call.api, call.request, call.access);
    let if_match = request
        .if_match()?
        .ok_or_else(|| Failure::invalid(ValidationError::IfMatchMissing))?;
    access.entity(
        &table,
        Permissions::DELETE,
        &key.partition_key,
        &key.row_key,
    )?;
    let delete = Operation::Delete { key, if_match };
    let claim = request.idempotency_claim(access)?;
    let pending = api.executor.write(table, delete, claim).await?;
    api.executor.durable(pending).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// One entity of `table` as the caller may read it, its JSON (in `metadata`, showing what
/// `select`, a `$select`, names) and its ETag: a `GET` alone or in `$batch`.
pub(super) async fn read_entity(
    call: &Call<'_>,
    metadata: Metadata,
    table: String,
    key: EntityKey,
    select: Option<&str>,
) -> Result<(String, crate::model::ETag), Failure> {
    let (api, access, base) = (call.api, call.access, &call.base);
    access.entity(&table, Permissions::READ, &key.partition_key, &key.row_key)?;
    let shown = odata::Projection::of_select(select);
    let (base, name) = (base.to_owned(), table.clone());
    let read = move |entity: &EntityView<'_>| {
        let mut json = String::new();
        odata::EntityJson::element(metadata, &base, &name)
            .showing(shown)
            .write_view(&mut json, entity)?;
        Ok((json, crate::model::ETag::for_timestamp(entity.timestamp)))
    };
    Ok(api.executor.get(table, key, selected(select), read).await?)
}

/// `$select` as property names (empty: all).
pub(super) fn selection(request: &Request) -> Vec<String> {
    selected(request.param("$select").as_deref())
}

/// The custom property names a `$select` of `select` names (empty: all).
fn selected(select: Option<&str>) -> Vec<String> {
    let names: Vec<String> = select
        .map(|s| {
            s.split(',')
                .map(|p| p.trim().to_owned())
                .filter(|p| {
                    !p.is_empty() && !matches!(p.as_str(), "PartitionKey" | "RowKey" | "Timestamp")
                })
                .collect()
        })
        .unwrap_or_default();
    // OData's `*` selects every property, as no `$select` does.
    match names.iter().any(|name| name == "*") {
        true => Vec::new(),
        false => names,
    }
}

/// `GET` of one entity, with `$select`.
pub(super) async fn get(call: &Call<'_>, table: String, key: EntityKey) -> Answer {
    let (request, metadata) = (call.request, call.request.metadata());
    let select = request.param("$select");
    let (json, etag) = read_entity(call, metadata, table, key, select.as_deref()).await?;
    let mut response = json_text_response(StatusCode::OK, metadata, json);
    response
        .headers_mut()
        .insert(http::header::ETAG, header_value(etag.as_str()));
    Ok(response)
}

/// Writes a page's entities into the response body as they are read: `{..."value":[` first,
/// then each entity's object.
struct JsonPage {
    shown: odata::Projection,
    metadata: Metadata,
    base: String,
    table: String,
    body: String,
    empty: bool,
}

impl MatchSink for JsonPage {
    fn take(&mut self, entity: &EntityView<'_>) -> Result<usize, StorageError> {
        if !std::mem::take(&mut self.empty) {
            self.body.push(',');
        }
        let writer = odata::EntityJson {
            shown: self.shown,
            metadata: self.metadata,
            base: &self.base,
            table: &self.table,
            context: None,
        };
        writer.write_view(&mut self.body, entity)?;
        Ok(entity.stored_len())
    }
}

pub(super) async fn query(call: &Call<'_>, table: String) -> Answer {
    let (api, request, access, base) = (call.api, call.request, call.access, &call.base);
    if let Some(apply) = request.param("$apply") {
        return aggregate(call, table, &apply).await;
    }
    let top = request.top()?;
    // `$orderby` is Trestle's own extension: Azure has none.
    let order_by = match request.param("$orderby") {
        Some(text) => OrderBy::parse_odata(&text).map_err(Failure::invalid)?,
        None => OrderBy::default(),
    };
    let mut spec = QuerySpec {
        filter: request.param("$filter").unwrap_or_default(),
        select: selection(request),
        page_size: top.unwrap_or(0),
        segment: request.segment()?,
        order_by,
        ..QuerySpec::default()
    };
    access.query(&table, &mut spec)?;
    // The continuation is Trestle's own token, carried in NextPartitionKey.
    let continuation = request.param("NextPartitionKey").unwrap_or_default();
    let metadata = request.metadata();
    let mut body = String::from("{");
    if metadata != Metadata::None {
        body.push_str("\"odata.metadata\":");
        body.push_str(&Json::String(format!("{base}/$metadata#{table}")).to_string());
        body.push(',');
    }
    body.push_str("\"value\":[");
    if top == Some(0) {
        // No entities asked for: the query and its table are checked as any query's, nothing read.
        spec.validate(api.executor.work_budget())
            .map_err(Failure::invalid)?;
        api.executor
            .blocking(move |engine| engine.get_table(&table))
            .await?;
        body.push_str("]}");
        return Ok(json_text_response(StatusCode::OK, metadata, body));
    }
    let page = JsonPage {
        shown: odata::Projection::of_select(request.param("$select").as_deref()),
        metadata,
        base: base.to_owned(),
        table: table.clone(),
        body,
        empty: true,
    };
    let (info, page) = api.executor.query(table, spec, continuation, page).await?;
    let mut body = page.body;
    body.push_str("]}");
    let mut response = json_text_response(StatusCode::OK, metadata, body);
    // Trestle's own, as gRPC's `QueryEntitiesResponse` carries them: how the page was read.
    let headers = response.headers_mut();
    headers.insert("x-trestle-plan", header_value(&info.plan));
    headers.insert(
        "x-trestle-examined",
        header_value(&info.examined.to_string()),
    );
    if let Some(token) = info.continuation_token {
        let headers = response.headers_mut();
        headers.insert("x-ms-continuation-nextpartitionkey", header_value(&token));
        headers.insert(
            "x-ms-continuation-nextrowkey",
            HeaderValue::from_static("next"),
        );
    }
    Ok(response)
}

/// A query with `$apply` (Trestle's own, OData's aggregation extension, [`apply`]): the
/// aggregate of the query's matches as `AggregateEntities` computes it, one row per group, each
/// column under its name. `$filter` narrows the matches; paging, `$select`, `$top` and
/// `$orderby` have no meaning for it and are refused.
async fn aggregate(call: &Call<'_>, table: String, apply: &str) -> Answer {
    let (api, request, access, base) = (call.api, call.request, call.access, &call.base);
    for unused in ["$select", "$top", "$orderby", "NextPartitionKey"] {
        if request.param(unused).is_some() {
            let why = format!("{unused} is not taken with $apply: an aggregate answers whole");
            return Err(Failure::invalid(ValidationError::Argument(why)));
        }
    }
    let apply = Apply::parse(apply).map_err(Failure::invalid)?;
    let mut spec = QuerySpec {
        filter: request.param("$filter").unwrap_or_default(),
        segment: request.segment()?,
        ..QuerySpec::default()
    };
    access.query(&table, &mut spec)?;
    let metadata = request.metadata();
    let context = format!("{base}/$metadata#{table}");
    // Answered whole: the calls' continuation tokens (carrying the groups so far, up to the
    // groups' bound of 1 MiB of keys) are followed here, as no header could carry them.
    let (mut continuation, mut examined) = (String::new(), 0);
    let aggregated = loop {
        let call = (api.executor).aggregate(
            table.clone(),
            spec.clone(),
            continuation,
            apply.spec.clone(),
        );
        let aggregated = call.await?;
        examined += aggregated.examined;
        match aggregated.continuation_token {
            Some(token) => continuation = token,
            None => break aggregated,
        }
    };
    let mut body = String::from("{");
    if metadata != Metadata::None {
        body.push_str("\"odata.metadata\":");
        body.push_str(&Json::String(context).to_string());
        body.push(',');
    }
    body.push_str("\"value\":[");
    for (at, group) in aggregated.groups.iter().enumerate() {
        if at > 0 {
            body.push(',');
        }
        let cells = group.keys.iter().chain(&group.values);
        let shown = apply
            .columns
            .iter()
            .zip(cells)
            .filter_map(|(name, value)| name.as_deref().map(|name| (name, value.borrowed())));
        odata::write_row(&mut body, metadata, shown);
    }
    body.push_str("]}");
    let mut response = json_text_response(StatusCode::OK, metadata, body);
    let headers = response.headers_mut();
    headers.insert("x-trestle-plan", header_value(&aggregated.plan));
    let examined = examined.to_string();
    headers.insert("x-trestle-examined", header_value(&examined));
    Ok(response)
}
