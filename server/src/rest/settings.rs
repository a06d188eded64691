//! The settings calls SDKs and tools make at setup (`?comp=`): table ACLs and the table service's
//! properties. Trestle keeps no stored access policies and no logging, metrics or CORS settings,
//! so it answers reads as Azure answers them for an account with none set, accepts writes that
//! set none, and refuses the rest with `NotImplemented` and the reason.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};

use super::paths::Resource;
use super::{not_implemented, Failure, Request, RestApi};
use crate::auth::Access;

/// Azure's table service properties with logging, metrics and CORS off.
const SERVICE_PROPERTIES: &str = concat!(
    r#"<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties>"#,
    "<Logging><Version>1.0</Version><Delete>false</Delete><Read>false</Read><Write>false</Write>",
    "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging>",
    "<HourMetrics><Version>1.0</Version><Enabled>false</Enabled>",
    "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics>",
    "<MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled>",
    "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics>",
    "<Cors /></StorageServiceProperties>"
);

/// A table's ACL: no stored access policies.
const NO_POLICIES: &str = r#"<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers />"#;

/// Answers `?comp=<setting>` on `resource`.
pub(super) async fn serve(
    api: &RestApi,
    request: &Request,
    access: &Access,
    resource: Resource,
    setting: &str,
) -> Result<Response, Failure> {
    match (setting, resource, &request.method) {
        ("properties", Resource::Service, &Method::GET) => {
            access.list_tables()?;
            Ok(xml(SERVICE_PROPERTIES))
        }
        ("properties", Resource::Service, &Method::PUT) => Err(not_implemented(
            request,
            "Trestle has no logging, metrics or CORS settings to set (it logs through tracing)",
        )),
        ("acl", Resource::Entities(table), method)
            if method == Method::GET || method == Method::PUT =>
        {
            access.manage_table(&table)?;
            if method == Method::PUT && sets_a_policy(&request.body) {
                return Err(not_implemented(
                    request,
                    "Trestle keeps no stored access policies; sign permissions and expiry into \
                     each shared access signature instead",
                ));
            }
            api.executor
                .blocking(move |engine| engine.get_table(&table))
                .await?;
            Ok(if method == Method::GET {
                xml(NO_POLICIES)
            } else {
                StatusCode::NO_CONTENT.into_response()
            })
        }
        _ => Err(not_implemented(request, "")),
    }
}

/// Whether a Set Table ACL body lists a policy (rather than clearing them all).
fn sets_a_policy(body: &[u8]) -> bool {
    body.windows(b"<SignedIdentifier>".len())
        .any(|window| window == b"<SignedIdentifier>")
}

fn xml(body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    response
}
