//! Azure Table's error codes: the `reason` (in `google.rpc.ErrorInfo`, domain
//! [`ERROR_DOMAIN`](crate::codec::ERROR_DOMAIN)) of every error the server sends, one enum that the
//! server maps its errors to and the SDK reads them back as.

/// Azure Table's error codes: the `reason` of every error Trestle returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A request input is not valid.
    InvalidInput,
    /// A request input is out of range (an invalid table name, a page size, a DateTime).
    OutOfRangeInput,
    /// No such table.
    TableNotFound,
    /// A table of that name exists.
    TableAlreadyExists,
    /// A table of that name is still being deleted.
    TableBeingDeleted,
    /// No such entity.
    ResourceNotFound,
    /// An entity with those keys exists.
    EntityAlreadyExists,
    /// The entity's ETag does not match `if_match`.
    UpdateConditionNotSatisfied,
    /// A property has no value.
    PropertiesNeedValue,
    /// A string or binary value is over 64 KiB.
    PropertyValueTooLarge,
    /// The entity is over 1 MiB.
    EntityTooLarge,
    /// More than 252 custom properties.
    TooManyProperties,
    /// A property name is not allowed.
    PropertyNameInvalid,
    /// A property name is over 255 characters.
    PropertyNameTooLong,
    /// A key is over 1 KiB.
    KeyValueTooLarge,
    /// Two operations of a transaction act on the same row.
    InvalidDuplicateRow,
    /// An operation of a transaction acts on another partition.
    CommandsInBatchActOnDifferentPartitions,
    /// The request is over its size limit (4 MiB for a transaction).
    RequestBodyTooLarge,
    /// The server failed; the details are in its log.
    InternalError,
    /// No valid credential: missing, malformed, tampered, expired or signed by an unknown key.
    AuthenticationFailed,
    /// An OAuth bearer token that is not valid here: its signature, lifetime, issuer or audience.
    InvalidAuthenticationInfo,
    /// The credential does not grant this operation (a permission letter is missing).
    AuthorizationPermissionMismatch,
    /// The credential is for another table, or a table-scoped token was used on the service.
    AuthorizationResourceTypeMismatch,
    /// The request touches keys outside the credential's granted range.
    AuthorizationFailure,
    /// Too many requests are in flight; retry with backoff.
    ServerBusy,
    /// The request's deadline passed before it finished.
    OperationTimedOut,
    /// The data directory's disk is (nearly) full: writes are refused, reads go on.
    InsufficientStorage,
    /// The store's database cannot be reached (it is down or restarting): the request did
    /// nothing; retry with backoff. (Trestle's own; Azure answers `ServerBusy`.)
    ServiceUnavailable,
    /// The table has no index of that name. (Trestle's own: Azure has no declared indexes.)
    IndexNotFound,
    /// The table has an index of that name (ignoring case).
    IndexAlreadyExists,
    /// The index is still being built (or its build failed) and cannot answer queries yet.
    IndexNotReady,
    /// A unique index already holds another entity with the same values.
    IndexValueAlreadyExists,
    /// The table has as many indexes as it may.
    TooManyIndexes,
    /// The request asks for something this endpoint does not serve (REST).
    NotImplemented,
    /// The request's URL names no resource (REST).
    InvalidUri,
    /// A shared access signature allows another protocol (`spr=https` over HTTP) (REST).
    AuthorizationProtocolMismatch,
    /// A shared access signature allows other client addresses (`sip`) (REST).
    AuthorizationSourceIPMismatch,
    /// An account shared access signature is for other services than tables (REST).
    AuthorizationServiceMismatch,
    /// A header's value is not one the service takes (an unknown `x-ms-version`) (REST).
    InvalidHeaderValue,
    /// A settings body (service properties, a table's ACL) is not the XML document it must be
    /// (REST).
    InvalidXmlDocument,
    /// The request asks for answers in Atom, which Azure dropped for JSON in 2015 (REST).
    AtomFormatNotSupported,
    /// No CORS rule of the service lets the page's origin make the request a browser asked
    /// about (REST).
    CorsPreflightFailure,
    /// Records of a change feed after the cursor were removed by its retention: read the feed
    /// from its start again. (Trestle's own.)
    ChangeFeedCursorExpired,
    /// The idempotency key was sent with another request within the server's window: a key
    /// names one logical call. (Trestle's own; DynamoDB's `IdempotentParameterMismatch`.)
    IdempotentParameterMismatch,
}

impl ErrorCode {
    /// Every code.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidInput,
        ErrorCode::OutOfRangeInput,
        ErrorCode::TableNotFound,
        ErrorCode::TableAlreadyExists,
        ErrorCode::TableBeingDeleted,
        ErrorCode::ResourceNotFound,
        ErrorCode::EntityAlreadyExists,
        ErrorCode::UpdateConditionNotSatisfied,
        ErrorCode::PropertiesNeedValue,
        ErrorCode::PropertyValueTooLarge,
        ErrorCode::EntityTooLarge,
        ErrorCode::TooManyProperties,
        ErrorCode::PropertyNameInvalid,
        ErrorCode::PropertyNameTooLong,
        ErrorCode::KeyValueTooLarge,
        ErrorCode::InvalidDuplicateRow,
        ErrorCode::CommandsInBatchActOnDifferentPartitions,
        ErrorCode::RequestBodyTooLarge,
        ErrorCode::InternalError,
        ErrorCode::AuthenticationFailed,
        ErrorCode::InvalidAuthenticationInfo,
        ErrorCode::AuthorizationPermissionMismatch,
        ErrorCode::AuthorizationResourceTypeMismatch,
        ErrorCode::AuthorizationFailure,
        ErrorCode::ServerBusy,
        ErrorCode::OperationTimedOut,
        ErrorCode::InsufficientStorage,
        ErrorCode::ServiceUnavailable,
        ErrorCode::IndexNotFound,
        ErrorCode::IndexAlreadyExists,
        ErrorCode::IndexNotReady,
        ErrorCode::IndexValueAlreadyExists,
        ErrorCode::TooManyIndexes,
        ErrorCode::NotImplemented,
        ErrorCode::InvalidUri,
        ErrorCode::AuthorizationProtocolMismatch,
        ErrorCode::AuthorizationSourceIPMismatch,
        ErrorCode::AuthorizationServiceMismatch,
        ErrorCode::InvalidHeaderValue,
        ErrorCode::InvalidXmlDocument,
        ErrorCode::AtomFormatNotSupported,
        ErrorCode::CorsPreflightFailure,
        ErrorCode::ChangeFeedCursorExpired,
        ErrorCode::IdempotentParameterMismatch,
    ];

    /// The code as Azure spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidInput => "InvalidInput",
            ErrorCode::OutOfRangeInput => "OutOfRangeInput",
            ErrorCode::TableNotFound => "TableNotFound",
            ErrorCode::TableAlreadyExists => "TableAlreadyExists",
            ErrorCode::TableBeingDeleted => "TableBeingDeleted",
            ErrorCode::ResourceNotFound => "ResourceNotFound",
            ErrorCode::EntityAlreadyExists => "EntityAlreadyExists",
            ErrorCode::UpdateConditionNotSatisfied => "UpdateConditionNotSatisfied",
            ErrorCode::PropertiesNeedValue => "PropertiesNeedValue",
            ErrorCode::PropertyValueTooLarge => "PropertyValueTooLarge",
            ErrorCode::EntityTooLarge => "EntityTooLarge",
            ErrorCode::TooManyProperties => "TooManyProperties",
            ErrorCode::PropertyNameInvalid => "PropertyNameInvalid",
            ErrorCode::PropertyNameTooLong => "PropertyNameTooLong",
            ErrorCode::KeyValueTooLarge => "KeyValueTooLarge",
            ErrorCode::InvalidDuplicateRow => "InvalidDuplicateRow",
            ErrorCode::CommandsInBatchActOnDifferentPartitions => {
                "CommandsInBatchActOnDifferentPartitions"
            }
            ErrorCode::RequestBodyTooLarge => "RequestBodyTooLarge",
            ErrorCode::InternalError => "InternalError",
            ErrorCode::AuthenticationFailed => "AuthenticationFailed",
            ErrorCode::InvalidAuthenticationInfo => "InvalidAuthenticationInfo",
            ErrorCode::AuthorizationPermissionMismatch => "AuthorizationPermissionMismatch",
            ErrorCode::AuthorizationResourceTypeMismatch => "AuthorizationResourceTypeMismatch",
            ErrorCode::AuthorizationFailure => "AuthorizationFailure",
            ErrorCode::ServerBusy => "ServerBusy",
            ErrorCode::OperationTimedOut => "OperationTimedOut",
            ErrorCode::InsufficientStorage => "InsufficientStorage",
            ErrorCode::ServiceUnavailable => "ServiceUnavailable",
            ErrorCode::IndexNotFound => "IndexNotFound",
            ErrorCode::IndexAlreadyExists => "IndexAlreadyExists",
            ErrorCode::IndexNotReady => "IndexNotReady",
            ErrorCode::IndexValueAlreadyExists => "IndexValueAlreadyExists",
            ErrorCode::TooManyIndexes => "TooManyIndexes",
            ErrorCode::NotImplemented => "NotImplemented",
            ErrorCode::InvalidUri => "InvalidUri",
            ErrorCode::AuthorizationProtocolMismatch => "AuthorizationProtocolMismatch",
            ErrorCode::AuthorizationSourceIPMismatch => "AuthorizationSourceIPMismatch",
            ErrorCode::AuthorizationServiceMismatch => "AuthorizationServiceMismatch",
            ErrorCode::InvalidHeaderValue => "InvalidHeaderValue",
            ErrorCode::InvalidXmlDocument => "InvalidXmlDocument",
            ErrorCode::AtomFormatNotSupported => "AtomFormatNotSupported",
            ErrorCode::CorsPreflightFailure => "CorsPreflightFailure",
            ErrorCode::ChangeFeedCursorExpired => "ChangeFeedCursorExpired",
            ErrorCode::IdempotentParameterMismatch => "IdempotentParameterMismatch",
        }
    }

    /// The code Azure spells `text`, if it is one of these.
    pub fn parse(text: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str() == text)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_from_its_text() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            assert_eq!(code.to_string(), code.as_str());
        }
        assert_eq!(ErrorCode::parse("NoSuchCode"), None);
    }
}
