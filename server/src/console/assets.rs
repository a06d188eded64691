//! The console's page, script and style sheet, built into the binary (`include_str!`): plain
//! HTML, CSS and JavaScript, nothing to build. Each is answered with a Content-Security-Policy
//! that lets the page load only its own script and style and call only its own origin.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// Only the console's own files and calls; no frame may hold it.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'none'";

fn asset(content_type: &'static str, text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        text,
    )
        .into_response()
}

/// `GET /`.
pub(super) async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// `GET /console.js`.
pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /console.css`.
pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
