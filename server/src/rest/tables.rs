//! The table operations: Create Table, Query Tables (with `$filter` on `TableName`), and the
//! delete that `rest::dispatch` routes here.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use serde_json::{json, Map, Value as Json};

use super::failure::Failure;
use super::odata::Metadata;
use super::reply::{header_value, json_response, no_content};
use super::request::Request;
use super::RestApi;
use crate::auth::Access;
use crate::model::{Ticks, ValidationError, ValueRef};
use crate::query::{self, Record};

/// Create Table: the name from the body's `TableName`.
pub(super) async fn create(
    api: &RestApi,
    request: &Request,
    access: &Access,
    base: &str,
) -> Result<Response, Failure> {
    let body: Json = serde_json::from_slice(&request.body).map_err(|e| {
        Failure::invalid(ValidationError::Argument(format!(
            "the body is not JSON: {e}"
        )))
    })?;
    let Some(table) = body
        .get("TableName")
        .and_then(Json::as_str)
        .map(str::to_owned)
    else {
        return Err(Failure::invalid(ValidationError::Argument(
            "the body has no TableName".into(),
        )));
    };
    access.manage_table(&table)?;
    let name = api
        .executor
        .blocking(move |engine| engine.create_table(&table))
        .await?;
    if !request.return_content(true) {
        return Ok(no_content(request.header("prefer").is_some()));
    }
    let metadata = request.metadata();
    let mut out = Map::new();
    if metadata != Metadata::None {
        out.insert(
            "odata.metadata".into(),
            format!("{base}/$metadata#Tables/@Element").into(),
        );
    }
    out.insert("TableName".into(), name.to_string().into());
    let mut response = json_response(StatusCode::CREATED, metadata, &Json::Object(out));
    if request.header("prefer").is_some() {
        response.headers_mut().insert(
            "preference-applied",
            HeaderValue::from_static("return-content"),
        );
    }
    Ok(response)
}

/// Query Tables, a page at a time.
pub(super) async fn list(
    api: &RestApi,
    request: &Request,
    access: &Access,
    base: &str,
) -> Result<Response, Failure> {
    access.list_tables()?;
    let top = request.top()?;
    let after = request.param("NextTableName").unwrap_or_default();
    // `$filter` reads the one property a table has, `TableName`; a page holds the matches among
    // the `$top` tables it examined (possibly none, with a continuation to follow).
    let filter = match request.param("$filter") {
        Some(text) if !text.trim().is_empty() => {
            Some(query::parse_filter(&text).map_err(Failure::invalid)?)
        }
        _ => None,
    };
    let page = api
        .executor
        .blocking(move |engine| engine.list_tables("", top, &after))
        .await?;
    let metadata = request.metadata();
    let tables: Vec<Json> = page
        .tables
        .iter()
        .map(ToString::to_string)
        .filter(|name| {
            filter
                .as_ref()
                .is_none_or(|f| f.matches(&TableRecord(name)))
        })
        .map(|name| json!({ "TableName": name }))
        .collect();
    let mut out = Map::new();
    if metadata != Metadata::None {
        out.insert(
            "odata.metadata".into(),
            format!("{base}/$metadata#Tables").into(),
        );
    }
    out.insert("value".into(), Json::Array(tables));
    let mut response = json_response(StatusCode::OK, metadata, &Json::Object(out));
    if let Some(next) = page.next_page_token {
        response
            .headers_mut()
            .insert("x-ms-continuation-nexttablename", header_value(&next));
    }
    Ok(response)
}

/// A table as a `$filter` of Query Tables sees it: one string property, `TableName`.
struct TableRecord<'a>(&'a str);

impl Record for TableRecord<'_> {
    fn partition_key(&self) -> &str {
        ""
    }

    fn row_key(&self) -> &str {
        ""
    }

    fn timestamp(&self) -> Ticks {
        Ticks(0)
    }

    fn property(&self, name: &str) -> Option<ValueRef<'_>> {
        (name == "TableName").then_some(ValueRef::String(self.0))
    }
}

/// Delete Table.
pub(super) async fn delete(
    api: &RestApi,
    access: &Access,
    table: String,
) -> Result<Response, Failure> {
    access.manage_table(&table)?;
    api.executor
        .blocking(move |engine| engine.delete_table(&table))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
