//! What a REST request fails with, and how it is answered: Azure's code (through [`ErrorCode`],
//! as on gRPC), the HTTP status Azure gives it (an exhaustive mapping), a message capped as gRPC's
//! are, and Azure's JSON error body. Engine errors become the same client text as on gRPC
//! ([`TableError::client_message`]): internal detail stays in the server log.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use serde_json::json;

use super::odata::Metadata;
use crate::auth::AuthError;
use crate::error::{bounded_message, ErrorCode, TableError};
use crate::executor::WorkError;
use crate::model::ValidationError;
use crate::storage::StorageError;

/// What a request failed with: Azure's code, an HTTP status and a message (capped as gRPC's are),
/// and whether the connection closes after the answer (a body left unread).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(super) status: StatusCode,
    pub(super) code: ErrorCode,
    pub(super) message: String,
    pub(super) close_connection: bool,
}

impl Failure {
    /// `code` with the HTTP status Azure answers it with.
    pub(crate) fn of(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure::new(status_of(code), code, message)
    }

    /// `code` with another status than its usual one.
    pub(super) fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure {
            status,
            code,
            message: bounded_message(message.into()),
            close_connection: false,
        }
    }

    pub(super) fn invalid(error: ValidationError) -> Failure {
        Failure::from(TableError::Invalid(error))
    }

    /// The failure of one operation of a batch: its own error, without the index (a changeset
    /// response carries the index apart).
    pub(super) fn of_operation(error: TableError) -> Failure {
        match error {
            TableError::Operation { source, .. } => Failure::from(*source),
            other => Failure::from(other),
        }
    }
}

/// The client's text of an engine error: the same as gRPC's (internal detail never sent). The
/// executor logged the failure already.
impl From<TableError> for Failure {
    fn from(error: TableError) -> Failure {
        crate::telemetry::refused(error.code());
        Failure::of(error.code(), error.client_message())
    }
}

impl From<AuthError> for Failure {
    fn from(error: AuthError) -> Failure {
        crate::telemetry::refused(error.code());
        Failure::of(error.code(), error.to_string())
    }
}

impl From<WorkError> for Failure {
    fn from(error: WorkError) -> Failure {
        match error {
            WorkError::Table(error) => Failure::from(error),
            WorkError::Panicked => Failure::of(ErrorCode::InternalError, error.to_string()),
            WorkError::ShuttingDown => {
                Failure::of(ErrorCode::ServiceUnavailable, error.to_string())
            }
            WorkError::Busy { .. } | WorkError::StreamsBusy(_) => {
                Failure::of(ErrorCode::ServerBusy, error.to_string())
            }
        }
    }
}

impl From<StorageError> for Failure {
    fn from(error: StorageError) -> Failure {
        Failure::from(TableError::Storage(error))
    }
}

/// The HTTP status Azure answers a code with.
pub(super) fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::TableNotFound | C::ResourceNotFound | C::IndexNotFound => StatusCode::NOT_FOUND,
        C::TableAlreadyExists
        | C::TableBeingDeleted
        | C::EntityAlreadyExists
        | C::IndexAlreadyExists
        | C::IndexValueAlreadyExists => StatusCode::CONFLICT,
        C::UpdateConditionNotSatisfied | C::IndexNotReady => StatusCode::PRECONDITION_FAILED,
        C::ChangeFeedCursorExpired => StatusCode::GONE,
        C::IdempotentParameterMismatch => StatusCode::UNPROCESSABLE_ENTITY,
        C::RequestBodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        C::InvalidAuthenticationInfo => StatusCode::UNAUTHORIZED,
        C::AuthenticationFailed
        | C::AuthorizationPermissionMismatch
        | C::AuthorizationResourceTypeMismatch
        | C::AuthorizationFailure
        | C::AuthorizationProtocolMismatch
        | C::AuthorizationSourceIPMismatch
        | C::AuthorizationServiceMismatch
        | C::CorsPreflightFailure => StatusCode::FORBIDDEN,
        C::NotImplemented => StatusCode::NOT_IMPLEMENTED,
        C::AtomFormatNotSupported => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        C::ServerBusy | C::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        C::OperationTimedOut => StatusCode::GATEWAY_TIMEOUT,
        C::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        C::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
        C::TooManyIndexes
        | C::EntityTooLarge
        | C::InvalidInput
        | C::OutOfRangeInput
        | C::PropertiesNeedValue
        | C::PropertyValueTooLarge
        | C::TooManyProperties
        | C::PropertyNameInvalid
        | C::PropertyNameTooLong
        | C::KeyValueTooLarge
        | C::InvalidDuplicateRow
        | C::CommandsInBatchActOnDifferentPartitions
        | C::InvalidUri
        | C::InvalidHeaderValue
        | C::InvalidXmlDocument => StatusCode::BAD_REQUEST,
    }
}

/// Azure's error answer: its JSON body, `x-ms-error-code`, and `Connection: close` when the
/// request's body was left unread.
pub(crate) fn error_response(metadata: Metadata, failure: Failure) -> Response {
    let body = json!({
        "odata.error": {
            "code": failure.code.as_str(),
            "message": {"lang": "en-US", "value": failure.message},
        }
    });
    let mut response = (failure.status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        "x-ms-error-code",
        HeaderValue::from_static(failure.code.as_str()),
    );
    if failure.close_connection {
        headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(metadata.content_type()),
    );
    response
}
