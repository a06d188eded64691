//! `$batch`: an entity group transaction as the SDKs send it, a `multipart/mixed` body holding
//! exactly one changeset of `application/http` requests on one partition, each part closed by its
//! delimiter, answered the same way (every operation's status and ETag, or the failing operation
//! alone with its index in the message); or, as Azure serves it, one retrieve of an entity alone
//! (a `GET` outside any changeset), answered as the `GET` would be, inside the batch's answer.

use axum::response::{IntoResponse, Response};
use http::StatusCode;

use super::entities::{entity_write, parse_body, read_entity};
use super::failure::Failure;
use super::odata;
use super::paths::{self, Resource};
use super::reply::{header_value, request_id};
use super::request::{query_param, Request};
use super::{Answer, Call};
use crate::error::ErrorCode;
use crate::executor::WorkError;
use crate::model::{quoted, EntityKey, IfMatch, Operation, ValidationError};

/// One operation of a changeset, parsed.
#[derive(Debug)]
pub(crate) struct BatchOperation {
    /// The table it names.
    pub(crate) table: String,
    /// What it does.
    pub(crate) operation: Operation,
    /// An insert whose answer carries the entity (`201 Created`): unless its `Prefer` says
    /// `return-no-content`, as a single insert's.
    pub(crate) returns_content: bool,
}

/// What a `$batch` body asks for.
#[derive(Debug)]
pub(crate) enum BatchRequest {
    /// One changeset: its operations, in order.
    Changeset(Vec<BatchOperation>),
    /// One retrieve of an entity, alone in the batch, with its `$select` and its `Accept` if it
    /// has them.
    Retrieve {
        table: String,
        key: EntityKey,
        select: Option<String>,
        accept: Option<String>,
    },
}

/// Why a batch body was refused.
#[derive(Debug)]
pub(crate) enum BatchError {
    /// It is malformed, or an operation in it is.
    Invalid(ValidationError),
    /// It asks for something a batch here does not do (a retrieve operation).
    NotServed(String),
}

impl From<ValidationError> for BatchError {
    fn from(error: ValidationError) -> BatchError {
        BatchError::Invalid(error)
    }
}

fn invalid(why: impl Into<String>) -> BatchError {
    BatchError::Invalid(ValidationError::Argument(why.into()))
}

/// The boundary a `multipart/mixed` content type names.
pub(crate) fn boundary(content_type: &str) -> Option<&str> {
    content_type.split(';').find_map(|part| {
        part.trim()
            .strip_prefix("boundary=")
            .map(|b| b.trim_matches('"'))
    })
}

/// The parts of a multipart body between `--boundary` lines; refused unless the closing
/// `--boundary--` ends them.
fn parts<'a>(body: &'a str, boundary: &str, what: &str) -> Result<Vec<&'a str>, BatchError> {
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    for chunk in body.split(delimiter.as_str()).skip(1) {
        if chunk.starts_with("--") {
            return Ok(parts);
        }
        parts.push(chunk.trim_start_matches("\r\n").trim_start_matches('\n'));
    }
    Err(invalid(format!(
        "the {what} does not end with its closing delimiter --{}--",
        quoted(boundary)
    )))
}

/// Headers (up to a blank line) and what follows.
fn split_headers(text: &str) -> (Vec<(&str, &str)>, &str) {
    let (head, rest) = match text.find("\r\n\r\n") {
        Some(at) => (&text[..at], &text[at + 4..]),
        None => match text.find("\n\n") {
            Some(at) => (&text[..at], &text[at + 2..]),
            None => (text, ""),
        },
    };
    let headers = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim(), value.trim()))
        .collect();
    (headers, rest)
}

/// The value of header `name` (case-insensitive, as HTTP's header names are).
fn header<'h>(headers: &[(&str, &'h str)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
}

/// What a `$batch` body asks for (`content_type` names its boundary).
pub(crate) fn parse(content_type: &str, body: &[u8]) -> Result<BatchRequest, BatchError> {
    let body = std::str::from_utf8(body).map_err(|_| invalid("the batch body is not UTF-8"))?;
    let batch = boundary(content_type)
        .ok_or_else(|| invalid("the batch's Content-Type names no multipart boundary"))?;
    let [part] = parts(body, batch, "batch")?[..] else {
        return Err(invalid(
            "a batch holds exactly one changeset (Azure's entity group transaction)",
        ));
    };
    let (headers, content) = split_headers(part);
    let part_type = header(&headers, "content-type").unwrap_or("");
    if part_type.trim().starts_with("application/http") {
        return retrieve(content);
    }
    let changeset = boundary(part_type).ok_or_else(|| {
        invalid("the batch's part is neither a changeset (multipart/mixed) nor one retrieve")
    })?;
    let operations = parts(content, changeset, "changeset")?
        .into_iter()
        .map(operation)
        .collect::<Result<Vec<_>, _>>()?;
    if operations.is_empty() {
        return Err(invalid("the batch holds no operation"));
    }
    Ok(BatchRequest::Changeset(operations))
}

/// The retrieve a batch's lone `application/http` part asks for: a `GET` of one entity.
fn retrieve(http: &str) -> Result<BatchRequest, BatchError> {
    let (method, url, rest) = request_line(http)?;
    let (headers, _) = split_headers(rest);
    let (path, query) = url_parts(url);
    match (method, paths::parse(path).map(|(_, resource)| resource)) {
        (
            "GET",
            Some(Resource::Entity {
                table,
                partition_key,
                row_key,
            }),
        ) => Ok(BatchRequest::Retrieve {
            table,
            key: EntityKey::new(partition_key, row_key)?,
            select: query.and_then(|query| query_param(query, "$select")),
            accept: header(&headers, "accept").map(str::to_owned),
        }),
        _ => Err(invalid(format!(
            "a batch part outside a changeset is one retrieve (a GET of one entity), not {} {}",
            quoted(method),
            quoted(url)
        ))),
    }
}

/// The method, URL and what follows the request line of an `application/http` part.
fn request_line(http: &str) -> Result<(&str, &str, &str), BatchError> {
    let (request_line, rest) = http
        .split_once('\n')
        .ok_or_else(|| invalid("a batch operation has no request line"))?;
    let mut words = request_line.trim().split(' ');
    Ok((words.next().unwrap_or(""), words.next().unwrap_or(""), rest))
}

/// A part's URL (absolute, or a path) as its path and its query string.
fn url_parts(url: &str) -> (&str, Option<&str>) {
    let path = match url.find("://") {
        Some(at) => &url[url[at + 3..].find('/').map_or(url.len(), |p| at + 3 + p)..],
        None => url,
    };
    match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    }
}

/// One `application/http` request of a changeset as an operation.
fn operation(part: &str) -> Result<BatchOperation, BatchError> {
    let (_, http) = split_headers(part);
    let (method, url, rest) = request_line(http)?;
    let (headers, body) = split_headers(rest);
    let (path, _) = url_parts(url);
    let (_, resource) = paths::parse(path)
        .ok_or_else(|| invalid(format!("{} names no entity resource", quoted(url))))?;
    if method == "GET" {
        return Err(BatchError::NotServed(
            "a retrieve operation inside a changeset (send it alone in the batch, or with its \
             own GET)"
                .to_owned(),
        ));
    }
    let if_match = header(&headers, "if-match")
        .map(IfMatch::parse)
        .transpose()?;
    let body = body.trim_end().as_bytes();
    let (table, operation) = match (method, resource) {
        ("POST", Resource::Entities(table)) => (
            table,
            Operation::Insert(odata::entity_from_json(body, None)?),
        ),
        (
            "PUT" | "MERGE" | "PATCH",
            Resource::Entity {
                table,
                partition_key,
                row_key,
            },
        ) => {
            let key = EntityKey::new(partition_key, row_key)?;
            let entity = odata::entity_from_json(body, Some(&key))?;
            (table, entity_write(entity, if_match, method == "PUT"))
        }
        (
            "DELETE",
            Resource::Entity {
                table,
                partition_key,
                row_key,
            },
        ) => {
            let if_match = if_match.ok_or(ValidationError::IfMatchMissing)?;
            let key = EntityKey::new(partition_key, row_key)?;
            return Ok(BatchOperation {
                table,
                operation: Operation::Delete { key, if_match },
                returns_content: false,
            });
        }
        (method, _) => {
            return Err(invalid(format!(
                "{} {} cannot be part of a batch",
                quoted(method),
                quoted(url)
            )))
        }
    };
    let returns_content = matches!(operation, Operation::Insert(_))
        && !header(&headers, "prefer").is_some_and(|p| p.contains("return-no-content"));
    Ok(BatchOperation {
        table,
        operation,
        returns_content,
    })
}

/// One operation's part of a successful changeset's response: the entity's address and, when it
/// was written, its new ETag.
pub(crate) struct SubResponse {
    /// `<account URL>/<table>(PartitionKey='…',RowKey='…')`.
    pub(crate) entity_url: String,
    /// The new ETag of a written entity.
    pub(crate) etag: Option<String>,
    /// The entity as its answer carries it (an insert that returns content: `201 Created`),
    /// OData JSON.
    pub(crate) entity_json: Option<String>,
}

/// The response body of a successful changeset: each operation's status, with `Location` and
/// `DataServiceId` naming its entity (the SDKs read each sub-response's RowKey from them), the
/// ETag of what it wrote, and for an insert that returns content `201 Created` with the entity.
pub(crate) fn committed_changeset(boundary: &str, parts: &[SubResponse]) -> String {
    let changeset = format!("changesetresponse_{boundary}");
    let mut out = format!(
        "--batchresponse_{boundary}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n"
    );
    for part in parts {
        let url = &part.entity_url;
        let (status, version) = match part.entity_json {
            Some(_) => ("201 Created", "3.0"),
            None => ("204 No Content", "1.0"),
        };
        out.push_str(&format!(
            "--{changeset}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 {status}\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\nDataServiceVersion: {version};\r\nLocation: {url}\r\nDataServiceId: {url}\r\n"
        ));
        if let Some(etag) = &part.etag {
            out.push_str(&format!("ETag: {etag}\r\n"));
        }
        match &part.entity_json {
            Some(json) => out.push_str(&format!(
                "Preference-Applied: return-content\r\nContent-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n\r\n{json}\r\n"
            )),
            None => out.push_str("\r\n"),
        }
    }
    out.push_str(&format!(
        "--{changeset}--\r\n--batchresponse_{boundary}--\r\n"
    ));
    out
}

/// The response body of a failed changeset: the failing operation's status and Azure's error
/// body, its message starting with the operation's index (`"1:..."`), as Azure writes it.
pub(crate) fn failed_changeset(
    boundary: &str,
    status: StatusCode,
    code: &str,
    index: usize,
    message: &str,
) -> String {
    let changeset = format!("changesetresponse_{boundary}");
    let body = error_json(code, &format!("{index}:{message}"));
    format!(
        "--batchresponse_{boundary}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n--{changeset}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 {} {}\r\nX-Content-Type-Options: nosniff\r\nDataServiceVersion: 3.0;\r\nContent-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n\r\n{body}\r\n--{changeset}--\r\n--batchresponse_{boundary}--\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
}

/// Azure's JSON error body.
fn error_json(code: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "odata.error": {"code": code, "message": {"lang": "en-US", "value": message}}
    })
}

/// A batch's answer to its one retrieve: the entity as its `GET` answers it, or the refusal, as
/// the batch's one part.
async fn answer_retrieve(
    call: &Call<'_>,
    boundary: &str,
    table: String,
    key: EntityKey,
    select: Option<String>,
    accept: Option<String>,
) -> Response {
    let metadata = match accept {
        Some(accept) => odata::Metadata::from_accept(Some(&accept)),
        None => call.request.metadata(),
    };
    let part = match read_entity(call, metadata, table, key, select.as_deref()).await {
        Ok((json, etag)) => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\nDataServiceVersion: 3.0;\r\nETag: {}\r\n\r\n{json}\r\n",
            metadata.content_type(),
            etag.as_str()
        ),
        Err(failure) => format!(
            "HTTP/1.1 {} {}\r\nContent-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nDataServiceVersion: 3.0;\r\n\r\n{}\r\n",
            failure.status.as_u16(),
            failure.status.canonical_reason().unwrap_or(""),
            error_json(failure.code.as_str(), &failure.message)
        ),
    };
    let body = format!(
        "--batchresponse_{boundary}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n{part}--batchresponse_{boundary}--\r\n"
    );
    batch_response(boundary, body)
}

/// What a `$batch` request's body asks for, parsed off the runtime if it is large.
async fn parse_request(request: &Request) -> Result<BatchRequest, Failure> {
    let content_type = request.header("content-type").unwrap_or("").to_owned();
    parse_body(&request.body, move |body| {
        parse(&content_type, body).map_err(|error| match error {
            BatchError::Invalid(invalid) => Failure::invalid(invalid),
            BatchError::NotServed(what) => Failure::of(
                ErrorCode::NotImplemented,
                format!("{what} is not served by Trestle's REST endpoint"),
            ),
        })
    })
    .await
}

/// A batch's `202 Accepted` response, its parts delimited by `batchresponse_<boundary>`.
fn batch_response(boundary: &str, body: String) -> Response {
    let mut response = (StatusCode::ACCEPTED, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        header_value(&format!(
            "multipart/mixed; boundary=batchresponse_{boundary}"
        )),
    );
    response
}

/// `$batch`: one changeset, all of it or none, answered `202 Accepted` with each operation's
/// response (or the failing one's, its index first in the message).
pub(super) async fn submit_batch(call: &Call<'_>) -> Answer {
    let (api, request, access, base) = (call.api, call.request, call.access, &call.base);
    let boundary = request_id();
    let parsed = match parse_request(request).await? {
        BatchRequest::Changeset(operations) => operations,
        BatchRequest::Retrieve {
            table,
            key,
            select,
            accept,
        } => {
            return Ok(answer_retrieve(call, &boundary, table, key, select, accept).await);
        }
    };
    let respond = |body: String| batch_response(&boundary, body);
    let refuse = |index: usize, failure: Failure| {
        let Failure {
            status,
            code,
            message,
            ..
        } = failure;
        respond(failed_changeset(
            &boundary,
            status,
            code.as_str(),
            index,
            &message,
        ))
    };
    let returns_content: Vec<bool> = parsed.iter().map(|p| p.returns_content).collect();
    let (table, operations) = match one_table(parsed) {
        Ok(batch) => batch,
        Err((index, failure)) => return Ok(refuse(index, failure)),
    };
    // The first operation's partition is the batch's: the engine refuses any other, once.
    let partition_key = operations[0].partition_key().to_owned();
    if let Err((index, error)) = access.transaction(&table, &operations) {
        return Ok(refuse(index, Failure::from(error)));
    }
    let entity_urls: Vec<String> = operations
        .iter()
        .map(|operation| {
            format!(
                "{base}/{table}(PartitionKey='{}',RowKey='{}')",
                odata::quote_key(&partition_key),
                odata::quote_key(operation.row_key())
            )
        })
        .collect();
    let request_bytes = request.body.len();
    let claim = request.idempotency_claim(access)?;
    let committed = api
        .executor
        .transact(
            table.clone(),
            partition_key,
            operations,
            request_bytes,
            claim,
        )
        .await;
    let outcome = match committed {
        Ok(pending) => api.executor.durable(pending).await,
        Err(error) => Err(error),
    };
    match outcome {
        Ok(stored) => {
            let json = odata::EntityJson::element(request.metadata(), base, &table);
            let parts: Vec<SubResponse> = stored
                .iter()
                .zip(entity_urls)
                .zip(returns_content)
                .map(|((entity, entity_url), returns_content)| SubResponse {
                    entity_url,
                    etag: entity.as_ref().map(|e| e.etag().into_string()),
                    entity_json: entity
                        .as_ref()
                        .filter(|_| returns_content)
                        .map(|e| json.stored(e)),
                })
                .collect();
            Ok(respond(committed_changeset(&boundary, &parts)))
        }
        Err(WorkError::Table(error)) => {
            let index = error.operation_index().unwrap_or(0);
            Ok(refuse(index, Failure::of_operation(error)))
        }
        Err(other) => Ok(refuse(0, Failure::from(other))),
    }
}

/// The table and operations of a batch whose operations all name the first one's table; or the
/// first that does not, and why.
fn one_table(parsed: Vec<BatchOperation>) -> Result<(String, Vec<Operation>), (usize, Failure)> {
    let table = parsed[0].table.clone();
    let mut operations = Vec::with_capacity(parsed.len());
    for (index, operation) in parsed.into_iter().enumerate() {
        if operation.table != table {
            let why = format!(
                "a batch acts on one table; operation {index} names {:?}",
                operation.table
            );
            return Err((index, Failure::invalid(ValidationError::Argument(why))));
        }
        operations.push(operation.operation);
    }
    Ok((table, operations))
}
