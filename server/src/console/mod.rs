//! The web console (`--console-listen`): pages to look at and change a server from a browser,
//! served from the binary (no JavaScript build step). A fourth protocol edge beside gRPC, REST
//! and the probes, and no new way in: the page calls the REST endpoint's own app under `/api`
//! (so every limit, body bound, admission rule and permission check of the REST endpoint holds
//! for it) and a few console calls under `/console` (a table's settings read and changed, its
//! feed's latest records, the server's metrics) through the same executor and [`crate::auth`]
//! checks.
//!
//! Sign-in takes an account key or a token and keeps it in the server's memory
//! ([`sessions`]); the browser holds only an `HttpOnly`, `SameSite=Strict` cookie naming the
//! session, and every call must carry the session's CSRF token in `x-trestle-csrf` (a header no
//! other site's form or image can send), else it is refused before anything runs. The listener
//! keeps [`MAX_CONSOLE_CONNECTIONS`] connections and the server's idle timeout
//! ([`crate::connections::http`]).

mod api;
mod assets;
mod sessions;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};

use trestle_proto::access;

use self::sessions::{Session, Sessions, SignInRefused};
use crate::auth::{Access, Authenticator};
use crate::config::Limits;
use crate::connections::http::HttpServer;
use crate::connections::{ConnectionTimeouts, Connections};
use crate::error::ErrorCode;
use crate::executor::Executor;
use crate::rest::failure::{error_response, Failure};
use crate::rest::odata::Metadata;

/// Connections the console's listener keeps open at once.
pub(crate) const MAX_CONSOLE_CONNECTIONS: usize = 256;
/// The biggest sign-in body read.
const MAX_SIGN_IN_BYTES: usize = 16 * 1024;
/// The cookie naming a session.
const COOKIE: &str = "trestle_console";
/// The header carrying the session's CSRF token.
const CSRF_HEADER: &str = "x-trestle-csrf";

/// What the console's handlers share.
#[derive(Clone)]
struct Console {
    executor: Executor,
    authenticator: Authenticator,
    sessions: Arc<Sessions>,
}

/// Serves the console on `listener` within `limits`. It keeps the server's metrics (its
/// dashboard draws them), installing the recorder if `--metrics-listen` did not.
pub(crate) fn serve(
    listener: std::net::TcpListener,
    executor: Executor,
    authenticator: Authenticator,
    limits: &Limits,
) -> std::io::Result<HttpServer> {
    crate::telemetry::install().map_err(std::io::Error::other)?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tracing::info!(console = %format!("http://{}/", listener.local_addr()?), "serving the web console");
    let console = Console {
        executor: executor.clone(),
        authenticator: authenticator.clone(),
        sessions: Arc::new(Sessions::default()),
    };
    let rest = crate::rest::app(executor, authenticator, limits, false).layer(
        axum::middleware::from_fn_with_state(console.clone(), as_signed_in),
    );
    let app = axum::Router::new()
        .route("/", get(assets::page))
        .route("/console.js", get(assets::script))
        .route("/console.css", get(assets::style))
        .route(
            "/session",
            get(current_session).post(sign_in).delete(sign_out),
        )
        .route("/console/tables/{table}", get(api::describe))
        .route("/console/tables/{table}/settings", put(api::set_settings))
        .route("/console/tables/{table}/indexes", post(api::create_index))
        .route(
            "/console/tables/{table}/indexes/{index}",
            delete(api::drop_index),
        )
        .route("/console/tables/{table}/changes", get(api::changes))
        .route("/console/metrics", get(api::metrics))
        .layer(DefaultBodyLimit::max(MAX_SIGN_IN_BYTES))
        .with_state(console)
        .nest("/api", rest);
    let connections = Connections::new(
        MAX_CONSOLE_CONNECTIONS,
        ConnectionTimeouts {
            handshake: None,
            idle: limits.idle_timeout,
        },
    );
    Ok(HttpServer::start(
        "console",
        listener,
        connections,
        None,
        app,
    ))
}

/// A refusal of the console's own (Azure's error body, as the REST endpoint answers).
fn refused(code: ErrorCode, message: impl Into<String>) -> Response {
    answer_failure(Failure::of(code, message))
}

/// The answer to `failure`.
fn answer_failure(failure: Failure) -> Response {
    error_response(Metadata::Minimal, failure)
}

/// The session a request's cookie names, checked against its CSRF header.
fn session_of(console: &Console, headers: &HeaderMap) -> Result<Session, Failure> {
    let not_signed_in = || {
        Failure::of(
            ErrorCode::AuthenticationFailed,
            "sign in to the console first",
        )
    };
    let id = session_cookie(headers).ok_or_else(not_signed_in)?;
    let session = console.sessions.find(id).ok_or_else(not_signed_in)?;
    let sent = headers.get(CSRF_HEADER).map(HeaderValue::as_bytes);
    let expected = session.csrf.as_bytes();
    let matches = |sent: &[u8]| {
        sent.len() == expected.len() && access::same_bytes_in_constant_time(sent, expected)
    };
    if !sent.is_some_and(matches) {
        return Err(Failure::of(
            ErrorCode::AuthenticationFailed,
            format!("the request lacks the session's {CSRF_HEADER} header"),
        ));
    }
    Ok(session)
}

/// The request's session ([`session_of`]) and what its credential grants now (a token may have
/// expired since the sign-in).
fn signed_in(console: &Console, headers: &HeaderMap) -> Result<Access, Failure> {
    let session = session_of(console, headers)?;
    authenticate(&console.authenticator, session.credential.as_deref())
}

/// What `credential` grants on this server.
fn authenticate(
    authenticator: &Authenticator,
    credential: Option<&str>,
) -> Result<Access, Failure> {
    let header = credential.map(|credential| format!("Bearer {credential}"));
    Ok(authenticator.authenticate(header.as_deref())?)
}

/// The session id in the request's `cookie` header.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// A call of the REST app under `/api`, made as the session's credential: a request with no
/// session or without its CSRF token is refused, one carrying a signature of its own
/// (a shared access signature, a SharedKey header) too, so that the console only ever acts with
/// the credential it signed in with.
async fn as_signed_in(
    State(console): State<Console>,
    mut request: Request,
    next: Next,
) -> Response {
    let session = match session_of(&console, request.headers()) {
        Ok(session) => session,
        Err(refusal) => return answer_failure(refusal),
    };
    let signs_itself = request
        .uri()
        .query()
        .is_some_and(|query| query.split('&').any(|pair| pair.starts_with("sig=")));
    if signs_itself || request.headers().contains_key(header::AUTHORIZATION) {
        return refused(
            ErrorCode::AuthenticationFailed,
            "the console signs its calls with the session's credential; send no other",
        );
    }
    if let Some(credential) = session.credential {
        match HeaderValue::try_from(format!("Bearer {credential}")) {
            Ok(mut value) => {
                value.set_sensitive(true);
                request.headers_mut().insert(header::AUTHORIZATION, value);
            }
            Err(_) => return refused(ErrorCode::AuthenticationFailed, "unusable credential"),
        }
    }
    request.headers_mut().remove(header::COOKIE);
    next.run(request).await
}

/// `POST /session` with `{"credential": "<account key or token>"}`: checks the credential and
/// opens a session (the cookie) for it; answers the CSRF token and what it grants.
async fn sign_in(State(console): State<Console>, body: Bytes) -> Response {
    #[derive(serde::Deserialize)]
    struct SignIn {
        #[serde(default)]
        credential: String,
    }
    let Ok(SignIn { credential }) = serde_json::from_slice::<SignIn>(&body) else {
        return refused(
            ErrorCode::InvalidInput,
            r#"sign in with a JSON body {"credential": "<account key or token>"}"#,
        );
    };
    let credential = Some(credential.trim().to_owned()).filter(|c| !c.is_empty());
    let access = match authenticate(&console.authenticator, credential.as_deref()) {
        Ok(access) => access,
        Err(failure) => return answer_failure(failure),
    };
    let (id, session) = match console.sessions.open(credential) {
        Ok(opened) => opened,
        Err(SignInRefused::Full) => {
            return refused(
                ErrorCode::ServerBusy,
                format!(
                    "the console holds {} sessions already; sign out of one or retry later",
                    sessions::MAX_SESSIONS
                ),
            )
        }
        Err(SignInRefused::NoRandom) => {
            return refused(ErrorCode::InternalError, "no random source for a session")
        }
    };
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        sessions::LIVES_FOR.as_secs()
    );
    let mut answer = session_json(&session, &access).into_response();
    if let Ok(cookie) = HeaderValue::try_from(cookie) {
        answer.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    answer
}

/// `GET /session`: the signed-in session's CSRF token (a page reloaded finds its session).
/// Reading it needs the cookie only; a page of another site can send neither it (`SameSite`) nor
/// read the answer (no CORS).
async fn current_session(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some(session) = session_cookie(&headers).and_then(|id| console.sessions.find(id)) else {
        return refused(ErrorCode::AuthenticationFailed, "not signed in");
    };
    match authenticate(&console.authenticator, session.credential.as_deref()) {
        Ok(access) => session_json(&session, &access).into_response(),
        Err(failure) => answer_failure(failure),
    }
}

/// `DELETE /session`: signs out (CSRF-checked, so another site cannot sign a user out).
async fn sign_out(State(console): State<Console>, headers: HeaderMap) -> Response {
    if let Err(refusal) = session_of(&console, &headers) {
        return answer_failure(refusal);
    }
    if let Some(id) = session_cookie(&headers) {
        console.sessions.close(id);
    }
    let mut answer = StatusCode::NO_CONTENT.into_response();
    let expired =
        HeaderValue::from_static("trestle_console=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    answer.headers_mut().insert(header::SET_COOKIE, expired);
    answer
}

/// What the page learns of its session: the CSRF token and whether it holds an account key.
fn session_json(session: &Session, access: &Access) -> Response {
    let body = serde_json::json!({
        "csrf": session.csrf,
        "access": match access { Access::Full => "account", Access::Scoped(_) => "token" },
    });
    json_response(StatusCode::OK, body.to_string())
}

/// A JSON answer the browser must not cache.
fn json_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from(body),
    )
        .into_response()
}
