//! The table operations: Create Table, Query Tables (with `$filter` on `TableName`, or of one
//! table by name), and the delete that `rest::dispatch` routes here.

use axum::response::IntoResponse;
use http::{HeaderValue, StatusCode};
use serde_json::{Map, Value as Json};

use super::failure::Failure;
use super::odata::Metadata;
use super::reply::{header_value, json_response, no_content};
use super::{odata, Answer, Call, ACCOUNT};
use crate::engine::TablePage;
use crate::model::{Ticks, ValidationError, ValueRef};
use crate::query::{self, Record};

/// Create Table: the name from the body's `TableName`.
pub(super) async fn create(call: &Call<'_>) -> Answer {
    let (api, request, access, base) = (call.api, call.request, call.access, &call.base);
    let body: Json = serde_json::from_slice(odata::without_bom(&request.body)).map_err(|e| {
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
    let entry = table_entry(metadata, base, &name.to_string());
    let mut response = json_response(StatusCode::CREATED, metadata, &entry);
    if request.header("prefer").is_some() {
        response.headers_mut().insert(
            "preference-applied",
            HeaderValue::from_static("return-content"),
        );
    }
    Ok(response)
}

/// Query Tables for one table (`GET Tables('name')`): its entry as Create Table answers it, or
/// `TableNotFound`. Allowed to whoever may read the table's description, as gRPC's `GetTable`.
pub(super) async fn get(call: &Call<'_>, table: String) -> Answer {
    let (api, request, access, base) = (call.api, call.request, call.access, &call.base);
    access.describe_table(&table)?;
    let (name, _) = api
        .executor
        .blocking(move |engine| engine.get_table(&table))
        .await?;
    let metadata = request.metadata();
    let entry = table_entry(metadata, base, &name.to_string());
    Ok(json_response(StatusCode::OK, metadata, &entry))
}

/// Query Tables, a page at a time.
pub(super) async fn list(call: &Call<'_>) -> Answer {
    let (api, request, access, base) = (call.api, call.request, call.access, &call.base);
    access.list_tables()?;
    let top = request.top()?;
    let after = request.param("NextTableName").unwrap_or_default();
    // `$filter` reads the one property a table has, `TableName`; a page holds the matches among
    // the `$top` tables it examined (possibly none, with a continuation to follow).
    let filter = match request.param("$filter") {
        Some(text) if !text.trim().is_empty() => {
            let mut spend = api.executor.work_budget().spend();
            Some(query::parse_filter(&text, &mut spend).map_err(Failure::invalid)?)
        }
        _ => None,
    };
    let page = match top {
        // `$top=0` asks for no tables: a page of none, and nothing to continue with.
        Some(0) => TablePage {
            tables: Vec::new(),
            next_page_token: None,
        },
        top => {
            let top = top.unwrap_or(0);
            api.executor
                .blocking(move |engine| engine.list_tables("", top, &after))
                .await?
        }
    };
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
        .map(|name| {
            let mut table = Map::new();
            table_members(&mut table, metadata, base, &name);
            Json::Object(table)
        })
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
pub(super) async fn delete(call: &Call<'_>, table: String) -> Answer {
    let (api, access) = (call.api, call.access);
    access.manage_table(&table)?;
    api.executor
        .blocking(move |engine| engine.delete_table(&table))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// One table as a response's whole body: its members, after the metadata URL unless asked for
/// none.
fn table_entry(metadata: Metadata, base: &str, name: &str) -> Json {
    let mut out = Map::new();
    if metadata != Metadata::None {
        out.insert(
            "odata.metadata".into(),
            format!("{base}/$metadata#Tables/@Element").into(),
        );
    }
    table_members(&mut out, metadata, base, name);
    Json::Object(out)
}

/// A table's members in a response: with full metadata, its type, id and edit link as Azure
/// writes them (`<account>.Tables`, the absolute id, the edit link relative to the account), then
/// `TableName`.
fn table_members(out: &mut Map<String, Json>, metadata: Metadata, base: &str, name: &str) {
    if metadata == Metadata::Full {
        let link = format!("Tables('{}')", odata::quote_key(name));
        out.insert("odata.type".into(), format!("{ACCOUNT}.Tables").into());
        out.insert("odata.id".into(), format!("{base}/{link}").into());
        out.insert("odata.editLink".into(), link.into());
    }
    out.insert("TableName".into(), name.into());
}
