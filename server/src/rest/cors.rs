//! CORS as Azure's storage services answer it, from the service's rules (Set Service Properties):
//! a browser's preflight `OPTIONS` is answered without credentials, allowed or refused
//! (`403 CorsPreflightFailure`); the answer to a request from a page (`Origin`) that a rule lets in
//! carries the `Access-Control-*` headers the browser needs to hand it to the page.

use axum::response::{IntoResponse, Response};
use http::header::{self, HeaderMap, HeaderName};
use http::StatusCode;

use super::reply::header_value;
use super::{Failure, Request, RestApi};
use crate::error::ErrorCode;
use crate::model::CorsRule;

/// Answers a preflight: which rule, if any, lets the page's origin make the request it asks
/// about (`Access-Control-Request-Method`, `Access-Control-Request-Headers`).
pub(super) async fn preflight(api: &RestApi, request: &Request) -> Result<Response, Failure> {
    let (Some(origin), Some(method)) = (
        request.header("origin"),
        request.header("access-control-request-method"),
    ) else {
        // Azure's text (an OPTIONS request is a preflight: it names its Origin and
        // Access-Control-Request-Method).
        return Err(Failure::of(
            ErrorCode::InvalidHeaderValue,
            "A required CORS header is not present.",
        ));
    };
    let headers = request
        .header("access-control-request-headers")
        .unwrap_or("");
    let _in_flight = api.executor.admit().map_err(Failure::from)?;
    let properties = api
        .executor
        .blocking(|engine| engine.service_properties())
        .await?;
    let Some(rule) = properties
        .rule_for(origin, method)
        .filter(|rule| rule.allows_headers(headers))
    else {
        // Azure's text, which clients' tests match.
        return Err(Failure::of(
            ErrorCode::CorsPreflightFailure,
            "CORS not enabled or no matching rule found for this request.",
        ));
    };
    let mut response = StatusCode::OK.into_response();
    let out = response.headers_mut();
    allow_origin(out, rule, origin);
    out.insert(header::ACCESS_CONTROL_ALLOW_METHODS, header_value(method));
    if !headers.is_empty() {
        out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, header_value(headers));
    }
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        header_value(&rule.max_age_seconds.to_string()),
    );
    Ok(response)
}

/// Adds to `response` (the answer to a request from a page at `origin`) the headers that let the
/// browser hand it over, if a rule lets the origin in with the request's method; otherwise only
/// `Vary: Origin` where the service has rules (another origin may be answered otherwise, so a
/// cache must not serve this answer to it), and the browser keeps the answer from the page.
pub(super) async fn allow(api: &RestApi, origin: &str, method: &str, response: &mut Response) {
    let properties = match api
        .executor
        .blocking(|engine| engine.service_properties())
        .await
    {
        Ok(properties) => properties,
        Err(error) => {
            tracing::warn!(%error, "the CORS rules cannot be read; the answer carries none");
            return;
        }
    };
    let Some(rule) = properties.rule_for(origin, method) else {
        if !properties.cors.is_empty() {
            let vary = header_value("Origin");
            response.headers_mut().insert(header::VARY, vary);
        }
        return;
    };
    let out = response.headers_mut();
    let exposed: Vec<&str> = out
        .keys()
        .map(HeaderName::as_str)
        .filter(|name| rule.exposes(name))
        .collect();
    let exposed = header_value(&exposed.join(","));
    out.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, exposed);
    allow_origin(out, rule, origin);
}

/// `Access-Control-Allow-Origin`: `*` for a rule that lets any origin in (which then takes no
/// credentials, and the answer is the same for every origin: no `Vary`, as Azure's rules say);
/// otherwise the origin itself, credentials allowed, and `Vary: Origin`.
fn allow_origin(out: &mut HeaderMap, rule: &CorsRule, origin: &str) {
    if rule.any_origin() {
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, header_value("*"));
        return;
    }
    out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, header_value(origin));
    out.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        header_value("true"),
    );
    out.insert(header::VARY, header_value("Origin"));
}
