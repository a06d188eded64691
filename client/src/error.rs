//! The SDK's error: a coarse kind to branch on, and Azure's precise error code to report.

use tonic_types::StatusExt;
pub use trestle_proto::ErrorCode;

use crate::mapping::MappingError;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The table or entity does not exist.
    NotFound,
    /// The table or entity already exists (or the table is being deleted).
    Conflict,
    /// The entity's ETag did not match (`UpdateConditionNotSatisfied`), or the index queried is
    /// not ready (`IndexNotReady`).
    PreconditionFailed,
    /// The request was refused as invalid (bad name, key, value, filter, …).
    InvalidInput,
    /// The request or entity is over a size limit.
    TooLarge,
    /// The server could not be reached or went away (the connection broke mid-request).
    Unavailable,
    /// The request timed out.
    Timeout,
    /// No valid credential (`AuthenticationFailed`): missing, expired, tampered or unknown key;
    /// or an OAuth token that is not valid there (`InvalidAuthenticationInfo`).
    Unauthenticated,
    /// The credential does not allow this (`AuthorizationPermissionMismatch`,
    /// `AuthorizationResourceTypeMismatch`, `AuthorizationFailure`).
    PermissionDenied,
    /// The server turned the request away before doing anything (`ServerBusy`); safe to retry.
    Busy,
    /// The server's disk is full (`InsufficientStorage`): writes are refused, reads go on.
    StorageFull,
    /// A value could not be mapped to or from entity properties.
    Mapping,
    /// The server failed.
    Internal,
}

/// An SDK error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}{}", reason.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
pub struct Error {
    kind: ErrorKind,
    /// The `ErrorInfo.reason` the server sent, as sent.
    reason: Option<String>,
    /// The connection could not be made: the request never left the client.
    connect_failed: bool,
    message: String,
    operation_index: Option<usize>,
}

/// The SDK's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message` (no server code), for code built on the SDK.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            reason: None,
            connect_failed: false,
            message: message.into(),
            operation_index: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidInput, message).with_code(ErrorCode::InvalidInput)
    }

    pub(crate) fn with_code(mut self, code: ErrorCode) -> Error {
        self.reason = Some(code.as_str().to_owned());
        self
    }

    pub(crate) fn at_operation(mut self, index: usize) -> Error {
        self.operation_index = Some(index);
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Azure's error code ([`ErrorCode::EntityAlreadyExists`],
    /// [`ErrorCode::UpdateConditionNotSatisfied`], …), when the server gave one this SDK knows.
    ///
    /// ```
    /// # fn check(error: trestle_client::Error) {
    /// use trestle_client::ErrorCode;
    /// if error.code() == Some(ErrorCode::TableNotFound) {
    ///     // create the table
    /// }
    /// # }
    /// ```
    pub fn code(&self) -> Option<ErrorCode> {
        self.reason.as_deref().and_then(ErrorCode::parse)
    }

    /// The error's reason exactly as the server sent it, also when this SDK does not know it
    /// (a newer server's).
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The message, in plain words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// For a failed transaction, the 0-based index of the operation that failed.
    pub fn operation_index(&self) -> Option<usize> {
        self.operation_index
    }

    /// The table or entity does not exist.
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// The table does not exist (`TableNotFound`), as against a missing entity.
    pub fn is_table_not_found(&self) -> bool {
        self.code() == Some(ErrorCode::TableNotFound)
    }

    /// The entity does not exist (`ResourceNotFound`), in a table that does.
    pub fn is_entity_not_found(&self) -> bool {
        self.code() == Some(ErrorCode::ResourceNotFound)
    }

    /// The connection to the server could not be made, so the request certainly never reached
    /// it (even a write may be retried).
    pub fn is_connect_error(&self) -> bool {
        self.connect_failed
    }

    /// The table or entity already exists.
    pub fn is_conflict(&self) -> bool {
        self.kind == ErrorKind::Conflict
    }

    /// A precondition failed: an ETag condition (someone else changed the entity), or an index
    /// queried before its build ended (`IndexNotReady`).
    pub fn is_precondition_failed(&self) -> bool {
        self.kind == ErrorKind::PreconditionFailed
    }

    /// Whether the request certainly never reached the server (so even a write may be retried).
    pub(crate) fn never_sent(&self) -> bool {
        self.connect_failed
    }
}

impl Error {
    /// The SDK error for a gRPC status (kept out of the public API: no tonic type leaks).
    pub(crate) fn from_status(status: tonic::Status) -> Error {
        use tonic::Code;
        let details = status.get_error_details();
        let info = details.error_info();
        let kind = match status.code() {
            Code::NotFound => ErrorKind::NotFound,
            Code::AlreadyExists => ErrorKind::Conflict,
            Code::FailedPrecondition => ErrorKind::PreconditionFailed,
            Code::InvalidArgument | Code::OutOfRange => ErrorKind::InvalidInput,
            Code::ResourceExhausted => match info.map(|i| i.reason.as_str()) {
                Some("ServerBusy") => ErrorKind::Busy,
                Some("InsufficientStorage") => ErrorKind::StorageFull,
                _ => ErrorKind::TooLarge,
            },
            Code::Unauthenticated => ErrorKind::Unauthenticated,
            Code::PermissionDenied => ErrorKind::PermissionDenied,
            Code::Unavailable | Code::Cancelled => ErrorKind::Unavailable,
            Code::DeadlineExceeded => ErrorKind::Timeout,
            // Made here, not sent by the server: the connection broke midway (a server killed).
            Code::Unknown if std::error::Error::source(&status).is_some() => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        };
        Error {
            kind,
            connect_failed: status.code() == Code::Unavailable && caused_by_connecting(&status),
            reason: info.map(|i| i.reason.clone()),
            operation_index: info
                .and_then(|i| i.metadata.get("operationIndex"))
                .and_then(|i| i.parse().ok()),
            message: status.message().to_owned(),
        }
    }
}

impl Error {
    /// The SDK error for a failed connection to `endpoint`: the endpoint, and the whole chain of
    /// causes (refused, a name that does not resolve, a TLS failure), not tonic's bare
    /// "transport error".
    pub(crate) fn from_transport(endpoint: &str, error: tonic::transport::Error) -> Error {
        let mut causes = vec![error.to_string()];
        let mut cause = std::error::Error::source(&error);
        while let Some(inner) = cause {
            let text = inner.to_string();
            if !causes.iter().any(|known| known.contains(&text)) {
                causes.push(text);
            }
            cause = inner.source();
        }
        let mut error = Error::new(
            ErrorKind::Unavailable,
            format!("cannot connect to {endpoint}: {}", causes.join(": ")),
        );
        error.connect_failed = true;
        error
    }
}

/// Whether `status` comes from a connection that could not be made (tonic's `ConnectError` in its
/// chain of causes), rather than from the server or a connection lost midway.
fn caused_by_connecting(status: &tonic::Status) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(error) = cause {
        if error.is::<tonic::ConnectError>() {
            return true;
        }
        cause = error.source();
    }
    false
}

impl From<MappingError> for Error {
    fn from(error: MappingError) -> Error {
        Error::new(ErrorKind::Mapping, error.0)
    }
}
