//! The mapping from [`TableError`] (and the executor's [`WorkError`], by `From`) to
//! `tonic::Status`: a gRPC code, a plain-words message and a `google.rpc.ErrorInfo` detail with
//! Azure's error code as `reason`. Each refusal is counted by its code (`telemetry::refused`);
//! nothing is logged here: the caller logs.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::auth::AuthError;
use crate::error::{bounded_message, ErrorCode, TableError};
use crate::executor::WorkError;

pub use trestle_proto::codec::ERROR_DOMAIN;
/// The `ErrorInfo.metadata` key that names the failing operation of a transaction.
pub const OPERATION_INDEX_KEY: &str = "operationIndex";

/// Converts an error into the status sent to the client.
pub(crate) fn to_status(error: &TableError) -> Status {
    crate::telemetry::refused(error.code());
    status(
        error.code(),
        error.client_message(),
        error.operation_index(),
    )
}

impl From<WorkError> for Status {
    /// The status of work that gave no value.
    fn from(error: WorkError) -> Status {
        match error {
            WorkError::Table(error) => to_status(&error),
            WorkError::Panicked => internal(),
            WorkError::ShuttingDown => Status::unavailable("the server is shutting down"),
            WorkError::Busy { max_in_flight } => server_busy(max_in_flight),
            WorkError::StreamsBusy(refusal) => {
                status(ErrorCode::ServerBusy, refusal.to_string(), None)
            }
        }
    }
}

/// The status of a fault of the server itself, told in fixed words (never an internal error's
/// text), with `InternalError` as every other reply gives it.
pub(crate) fn internal_status(what: &str) -> Status {
    crate::telemetry::refused(ErrorCode::InternalError);
    status(ErrorCode::InternalError, what.to_owned(), None)
}

/// Converts a refused credential into the status sent to the client; `operation` is the failing
/// operation of a transaction.
pub(crate) fn auth_status(error: &AuthError, operation: Option<usize>) -> Status {
    crate::telemetry::refused(error.code());
    status(error.code(), error.to_string(), operation)
}

impl From<AuthError> for Status {
    /// A refusal outside a transaction (one inside names its operation: `auth_status`).
    fn from(error: AuthError) -> Status {
        auth_status(&error, None)
    }
}

/// The status of a request turned away because `max_in_flight` requests are running.
pub(crate) fn server_busy(max_in_flight: usize) -> Status {
    status(
        ErrorCode::ServerBusy,
        format!(
            "the server is at its limit of {max_in_flight} requests in flight; retry with backoff"
        ),
        None,
    )
}

/// The status for `code`, saying `message`.
pub(crate) fn of(code: ErrorCode, message: String) -> Status {
    status(code, message, None)
}

/// The status of a stream whose request deadline passed while it waited for its reader.
pub(crate) fn deadline() -> Status {
    to_status(&TableError::DeadlineExceeded)
}

/// The status of a stream closed because its reader took nothing for `stall`.
pub(crate) fn reader_stalled(stall: std::time::Duration) -> Status {
    status(
        ErrorCode::OperationTimedOut,
        format!(
            "the stream was closed: its reader read nothing for {} s (the server's --stream-stall-secs)",
            stall.as_secs_f64()
        ),
        None,
    )
}

/// The status of a stream that could not buffer a batch within the memory bound of all streams.
pub(crate) fn stream_memory_busy(budget_mib: usize) -> Status {
    status(
        ErrorCode::ServerBusy,
        format!(
            "open streams hold the server's whole {budget_mib} MiB of buffered stream data; retry with backoff"
        ),
        None,
    )
}

/// The status of a scan refused because its connection has `cap` open already.
pub(crate) fn connection_scans_busy(cap: usize) -> Status {
    status(
        ErrorCode::ServerBusy,
        format!(
            "this connection has {cap} open streamed scans, the server's limit per connection; read or cancel one first"
        ),
        None,
    )
}

/// The status of a request whose handler panicked (the panic itself is logged).
pub(crate) fn internal() -> Status {
    status(
        ErrorCode::InternalError,
        "internal error; the server log has the details".to_owned(),
        None,
    )
}

fn status(code: ErrorCode, message: String, operation_index: Option<usize>) -> Status {
    let message = bounded_message(message);
    let mut metadata = HashMap::new();
    if let Some(index) = operation_index {
        metadata.insert(OPERATION_INDEX_KEY.to_owned(), index.to_string());
    }
    let details = ErrorDetails::with_error_info(code.as_str(), ERROR_DOMAIN, metadata);
    Status::with_error_details(grpc_code(code), message, details)
}

fn grpc_code(code: ErrorCode) -> Code {
    match code {
        ErrorCode::TableNotFound | ErrorCode::ResourceNotFound | ErrorCode::IndexNotFound => {
            Code::NotFound
        }
        ErrorCode::TableAlreadyExists
        | ErrorCode::TableBeingDeleted
        | ErrorCode::EntityAlreadyExists
        | ErrorCode::IndexAlreadyExists
        | ErrorCode::IndexValueAlreadyExists => Code::AlreadyExists,
        ErrorCode::IndexNotReady => Code::FailedPrecondition,
        ErrorCode::TooManyIndexes => Code::ResourceExhausted,
        ErrorCode::UpdateConditionNotSatisfied => Code::FailedPrecondition,
        ErrorCode::EntityTooLarge
        | ErrorCode::RequestBodyTooLarge
        | ErrorCode::ServerBusy
        | ErrorCode::InsufficientStorage => Code::ResourceExhausted,
        ErrorCode::AuthenticationFailed | ErrorCode::InvalidAuthenticationInfo => {
            Code::Unauthenticated
        }
        ErrorCode::AuthorizationPermissionMismatch
        | ErrorCode::AuthorizationResourceTypeMismatch
        | ErrorCode::AuthorizationFailure
        | ErrorCode::AuthorizationProtocolMismatch
        | ErrorCode::AuthorizationSourceIPMismatch
        | ErrorCode::AuthorizationServiceMismatch
        | ErrorCode::CorsPreflightFailure => Code::PermissionDenied,
        ErrorCode::NotImplemented => Code::Unimplemented,
        ErrorCode::OperationTimedOut => Code::DeadlineExceeded,
        ErrorCode::ChangeFeedCursorExpired => Code::OutOfRange,
        ErrorCode::IdempotentParameterMismatch => Code::InvalidArgument,
        ErrorCode::ServiceUnavailable => Code::Unavailable,
        ErrorCode::InvalidInput
        | ErrorCode::OutOfRangeInput
        | ErrorCode::PropertiesNeedValue
        | ErrorCode::PropertyValueTooLarge
        | ErrorCode::TooManyProperties
        | ErrorCode::PropertyNameInvalid
        | ErrorCode::PropertyNameTooLong
        | ErrorCode::KeyValueTooLarge
        | ErrorCode::InvalidDuplicateRow
        | ErrorCode::CommandsInBatchActOnDifferentPartitions
        | ErrorCode::InvalidUri
        | ErrorCode::InvalidHeaderValue
        | ErrorCode::InvalidXmlDocument
        | ErrorCode::AtomFormatNotSupported => Code::InvalidArgument,
        ErrorCode::InternalError => Code::Internal,
    }
}
