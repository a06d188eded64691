//! The pieces of a REST answer: a request id, header values, JSON bodies with the content type
//! of their metadata level, and `204 No Content`.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use serde_json::Value as Json;

use super::odata::Metadata;

/// A random GUID naming the request (`x-ms-request-id`).
pub(super) fn request_id() -> String {
    let mut bytes = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

pub(super) fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

pub(super) fn json_response(status: StatusCode, metadata: Metadata, body: &Json) -> Response {
    json_text_response(status, metadata, body.to_string())
}

pub(super) fn json_text_response(status: StatusCode, metadata: Metadata, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(metadata.content_type()),
    );
    response
}

pub(super) fn no_content(return_content_asked: bool) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    if return_content_asked {
        response.headers_mut().insert(
            "preference-applied",
            HeaderValue::from_static("return-no-content"),
        );
    }
    response
}
