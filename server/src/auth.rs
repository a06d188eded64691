//! Who may do what: authenticates a request's bearer credential against the server's account keys
//! (or, for an OAuth token, the identity provider's keys: [`crate::oidc`]), then checks what the request touches (a table, a row, every operation of a transaction, a
//! query's key range) against a scoped token's grant. Nothing here knows gRPC; messages never hold
//! a secret or a token.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::SystemTime;

use trestle_proto::access::{self, Grant, KeyRing, Permissions, TokenError};

use crate::across::TableEntityKey;
use crate::admission::Credential;
use crate::error::ErrorCode;
use crate::model::{quoted, Operation, Value};
use crate::oidc::{JwksError, Oidc, OidcError};
use crate::query::filter::{CompareOp, Property};
use crate::query::{Expr, QuerySpec};
use crate::transaction::TableOperation;

/// Why a request was not allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No valid credential.
    #[error("{0}")]
    Unauthenticated(String),
    /// An OAuth bearer token that is not valid here (signature, lifetime, issuer, audience).
    #[error("{0}")]
    InvalidBearerToken(String),
    /// The grant lacks a permission.
    #[error("the access token does not grant {needed:?} permission (it grants {granted:?})")]
    PermissionMismatch { needed: String, granted: String },
    /// A valid OAuth token whose roles grant nothing here.
    #[error("{0}")]
    NoRole(String),
    /// The grant is for another resource.
    #[error("{0}")]
    ResourceMismatch(String),
    /// A key outside the granted range.
    #[error("{0}")]
    OutOfScope(String),
}

impl AuthError {
    /// The Azure error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            AuthError::Unauthenticated(_) => ErrorCode::AuthenticationFailed,
            AuthError::InvalidBearerToken(_) => ErrorCode::InvalidAuthenticationInfo,
            AuthError::PermissionMismatch { .. } | AuthError::NoRole(_) => {
                ErrorCode::AuthorizationPermissionMismatch
            }
            AuthError::ResourceMismatch(_) => ErrorCode::AuthorizationResourceTypeMismatch,
            AuthError::OutOfScope(_) => ErrorCode::AuthorizationFailure,
        }
    }
}

/// Checks bearer credentials against the server's keys and its OAuth provider's; with neither,
/// the server is open.
#[derive(Debug, Clone)]
pub struct Authenticator {
    keys: Option<KeyRing>,
    oidc: Option<Arc<Oidc>>,
}

impl Authenticator {
    /// Open mode: every request has full access.
    pub fn open() -> Authenticator {
        Authenticator {
            keys: None,
            oidc: None,
        }
    }

    /// Requests need an account key or a token signed by one of `keys`.
    pub fn with_keys(keys: KeyRing) -> Authenticator {
        Authenticator {
            keys: Some(keys),
            oidc: None,
        }
    }

    /// Also (or, without keys, only) OAuth bearer tokens that `oidc` validates.
    pub fn with_oidc(mut self, oidc: Oidc) -> Authenticator {
        self.oidc = Some(Arc::new(oidc));
        self
    }

    /// Loads what the OAuth provider's keys need from the network and keeps them fresh.
    pub async fn start(&self) -> Result<(), JwksError> {
        match &self.oidc {
            Some(oidc) => oidc.start().await,
            None => Ok(()),
        }
    }

    /// Whether requests are let in without a credential.
    pub fn is_open(&self) -> bool {
        self.keys.is_none() && self.oidc.is_none()
    }

    /// The account keys, in keyed mode (the REST endpoint checks Azure's signatures with them).
    pub fn keys(&self) -> Option<&KeyRing> {
        self.keys.as_ref()
    }

    /// What the `authorization` header value `authorization` grants.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Access, AuthError> {
        if self.is_open() {
            return Ok(Access::Full);
        }
        let unauthenticated = |why: &str| Err(AuthError::Unauthenticated(why.to_owned()));
        let Some(header) = authorization else {
            return unauthenticated(
                "this server needs a credential: send `authorization: Bearer <token or key>`",
            );
        };
        let Some(credential) = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
        else {
            return unauthenticated("the authorization header is not `Bearer <token or key>`");
        };
        let credential = credential.trim();
        if let Some(oidc) = self
            .oidc
            .as_ref()
            .filter(|_| Oidc::looks_like_jwt(credential))
        {
            return match oidc.validate(credential, SystemTime::now()) {
                Ok(grant) => Ok(Access::Scoped(grant)),
                Err(OidcError::Invalid(why)) => Err(AuthError::InvalidBearerToken(why)),
                Err(OidcError::NoRole(why)) => Err(AuthError::NoRole(why)),
            };
        }
        let Some(keys) = &self.keys else {
            return unauthenticated("this server takes OAuth bearer tokens (JWTs) only");
        };
        // Tokens are told from account keys by their prefix, so a token costs one HMAC, not one
        // per key of the ring.
        if !access::looks_like_token(credential) {
            return match keys.key_with_secret(credential) {
                Some(_) => Ok(Access::Full),
                None => unauthenticated(
                    "the credential is neither an account key of this server nor an access token",
                ),
            };
        }
        match access::verify(keys, credential, SystemTime::now()) {
            Ok(grant) => Ok(Access::Scoped(grant)),
            Err(TokenError::Malformed) => unauthenticated("the access token is malformed"),
            Err(error) => Err(AuthError::Unauthenticated(error.to_string())),
        }
    }
}

/// What an authenticated request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// An account key, or open mode: everything.
    Full,
    /// A scoped token.
    Scoped(Grant),
}

impl Access {
    /// Who a long-lived call is counted against ([`crate::admission`]): the account (its key,
    /// or open mode), or one token's grant.
    pub fn credential(&self) -> Credential {
        match self {
            Access::Full => Credential(0),
            Access::Scoped(grant) => {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                grant.hash(&mut hasher);
                Credential(hasher.finish() | 1)
            }
        }
    }

    /// Whose idempotency keys a request's are ([`crate::idempotency`]): the account (its key, or
    /// open mode), or one grant, named the same on every server and build.
    pub fn idempotency_scope(&self) -> String {
        match self {
            Access::Full => "account".to_owned(),
            Access::Scoped(grant) => {
                let digest = crate::model::RequestDigest::of(grant);
                format!("grant-{}", digest.hex())
            }
        }
    }

    /// Creating or deleting table `table`: a table-level operation, which touches every key, so
    /// a token bounded to a key range cannot do it.
    pub fn manage_table(&self, table: &str) -> Result<(), AuthError> {
        self.on_table(table, Permissions::MANAGE_TABLES)?;
        match self {
            Access::Scoped(grant) => unbounded_keys(grant, "create or delete a table"),
            Access::Full => Ok(()),
        }
    }

    /// Reading a table's description (its indexes) needs read access to the table.
    pub fn describe_table(&self, table: &str) -> Result<(), AuthError> {
        self.on_table(table, Permissions::READ)
    }

    /// Changing the service's settings (its CORS rules): an account key (or open mode) only.
    pub fn manage_service(&self) -> Result<(), AuthError> {
        self.account_key_only("changes the service's settings")
    }

    /// Reading the server's metrics (every table's traffic): an account key (or open mode) only.
    pub fn read_metrics(&self) -> Result<(), AuthError> {
        self.account_key_only("reads the server's metrics")
    }

    /// Taking a backup (every entity of every table): an account key (or open mode) only.
    pub fn back_up(&self) -> Result<(), AuthError> {
        self.account_key_only("takes a backup")
    }

    fn account_key_only(&self, what: &str) -> Result<(), AuthError> {
        match self {
            Access::Full => Ok(()),
            Access::Scoped(_) => Err(AuthError::ResourceMismatch(format!(
                "only the account key {what}, not a token or a shared access signature"
            ))),
        }
    }

    /// Listing tables: a service-level operation, which a token for one table, or for a key
    /// range, cannot do.
    pub fn list_tables(&self) -> Result<(), AuthError> {
        let Access::Scoped(grant) = self else {
            return Ok(());
        };
        if grant.table.is_some() {
            return Err(AuthError::ResourceMismatch(
                "a token for one table cannot list tables; it needs a token for every table".into(),
            ));
        }
        unbounded_keys(grant, "list tables")?;
        require(grant, Permissions::LIST_TABLES)
    }

    /// `needed` on the entity (`partition_key`, `row_key`) of `table`.
    pub fn entity(
        &self,
        table: &str,
        needed: Permissions,
        partition_key: &str,
        row_key: &str,
    ) -> Result<(), AuthError> {
        self.on_table(table, needed)?;
        match self {
            Access::Scoped(grant) if !grant.covers_key(partition_key, row_key) => {
                Err(AuthError::OutOfScope(format!(
                    "the access token does not cover entity (PartitionKey {}, RowKey {})",
                    quoted(partition_key),
                    quoted(row_key)
                )))
            }
            _ => Ok(()),
        }
    }

    /// Every operation of a transaction, each on its own entity; on refusal, the failing
    /// operation's index.
    pub fn transaction(
        &self,
        table: &str,
        operations: &[Operation],
    ) -> Result<(), (usize, AuthError)> {
        self.each_operation(operations.iter().map(|operation| (table, operation)))
    }

    /// Every operation of a transaction across partitions, each on its own table and entity; on
    /// refusal, the failing operation's index.
    pub fn transaction_across(
        &self,
        operations: &[TableOperation],
    ) -> Result<(), (usize, AuthError)> {
        self.each_operation(
            operations
                .iter()
                .map(|op| (op.table.as_str(), &op.operation)),
        )
    }

    /// Each (table, operation) on its own entity; on refusal, the failing one's index.
    fn each_operation<'a>(
        &self,
        operations: impl Iterator<Item = (&'a str, &'a Operation)>,
    ) -> Result<(), (usize, AuthError)> {
        for (index, (table, operation)) in operations.enumerate() {
            let (partition_key, row_key) = (operation.partition_key(), operation.row_key());
            self.entity(table, needed_for(operation), partition_key, row_key)
                .map_err(|error| (index, error))?;
        }
        Ok(())
    }

    /// Reading every key of a read across partitions; on refusal, the failing key's index.
    pub fn read_many(&self, keys: &[TableEntityKey]) -> Result<(), (usize, AuthError)> {
        for (index, TableEntityKey { table, key }) in keys.iter().enumerate() {
            self.entity(table, Permissions::READ, &key.partition_key, &key.row_key)
                .map_err(|error| (index, error))?;
        }
        Ok(())
    }

    /// Deleting what `spec` matches in `table`: delete and read permission (a filter tells the
    /// caller something of the values), narrowed to the granted key range as a query is.
    pub fn delete_matching(&self, table: &str, spec: &mut QuerySpec) -> Result<(), AuthError> {
        self.on_table(table, Permissions::DELETE)?;
        self.query(table, spec)
    }

    /// Reading with `spec` from `table`: refused when it names a partition outside the grant,
    /// otherwise narrowed to the granted key range.
    pub fn query(&self, table: &str, spec: &mut QuerySpec) -> Result<(), AuthError> {
        self.on_table(table, Permissions::READ)?;
        let Access::Scoped(grant) = self else {
            return Ok(());
        };
        if let Some(partition_key) = &spec.partition_key {
            if !grant.partitions.contains(partition_key) {
                return Err(AuthError::OutOfScope(format!(
                    "the access token does not cover partition {}",
                    quoted(partition_key)
                )));
            }
        }
        spec.scope = key_scope(grant);
        Ok(())
    }

    /// `needed` on some entities of `table`: what can be checked of an entity operation before
    /// its keys are known (they come from a body not yet parsed).
    pub fn on_table(&self, table: &str, needed: Permissions) -> Result<(), AuthError> {
        let Access::Scoped(grant) = self else {
            return Ok(());
        };
        if !grant.covers_table(table) {
            return Err(AuthError::ResourceMismatch(format!(
                "the access token is not for table {}",
                quoted(table)
            )));
        }
        require(grant, needed)
    }
}

/// Refuses a table-level operation (`what`) to a token bounded to a key range.
fn unbounded_keys(grant: &Grant, what: &str) -> Result<(), AuthError> {
    if grant.partitions.is_everything() && grant.rows.is_everything() {
        return Ok(());
    }
    Err(AuthError::ResourceMismatch(format!(
        "a token bounded to a key range cannot {what}; it needs a token without key bounds"
    )))
}

fn require(grant: &Grant, needed: Permissions) -> Result<(), AuthError> {
    if grant.permissions.contains(needed) {
        Ok(())
    } else {
        Err(AuthError::PermissionMismatch {
            needed: needed.letters(),
            granted: grant.permissions.letters(),
        })
    }
}

/// The permissions an operation needs: Azure's (an upsert needs both add and update).
pub fn needed_for(operation: &Operation) -> Permissions {
    match operation {
        Operation::Insert(_) => Permissions::ADD,
        Operation::Update(..) | Operation::Merge(..) => Permissions::UPDATE,
        Operation::Upsert(..) => Permissions::ADD.union(Permissions::UPDATE),
        Operation::Patch {
            upsert, condition, ..
        } => {
            let mut needed = Permissions::UPDATE;
            if *upsert {
                needed = needed.union(Permissions::ADD);
            }
            // A condition tells the caller something of the entity's values.
            if condition.is_some() {
                needed = needed.union(Permissions::READ);
            }
            needed
        }
        Operation::Delete { .. } | Operation::Expire { .. } => Permissions::DELETE,
        Operation::Check { .. } => Permissions::READ,
    }
}

/// The grant's key range as a filter condition, `None` when it covers every key.
fn key_scope(grant: &Grant) -> Option<Expr> {
    let bound = |property: Property, op: CompareOp, value: &Option<String>| {
        value.as_ref().map(|value| Expr::Compare {
            property,
            op,
            literal: Value::String(value.clone()),
        })
    };
    [
        bound(
            Property::PartitionKey,
            CompareOp::Ge,
            &grant.partitions.start,
        ),
        bound(Property::PartitionKey, CompareOp::Lt, &grant.partitions.end),
        bound(Property::RowKey, CompareOp::Ge, &grant.rows.start),
        bound(Property::RowKey, CompareOp::Lt, &grant.rows.end),
    ]
    .into_iter()
    .flatten()
    .reduce(|all, next| Expr::And(Box::new(all), Box::new(next)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_proto::access::KeyBounds;

    fn scoped(letters: &str, table: Option<&str>, partitions: (&str, &str)) -> Access {
        let mut grant = Grant::new(Permissions::parse(letters).unwrap(), 60);
        grant.table = table.map(str::to_owned);
        grant.partitions = KeyBounds {
            start: Some(partitions.0.into()),
            end: Some(partitions.1.into()),
        };
        Access::Scoped(grant)
    }

    #[test]
    fn entity_checks_table_permission_and_range() {
        let access = scoped("ra", Some("Orders"), ("b", "d"));
        assert_eq!(access.entity("orders", Permissions::READ, "b", "x"), Ok(()));
        assert_eq!(
            access
                .entity("Orders", Permissions::DELETE, "b", "x")
                .unwrap_err()
                .code(),
            ErrorCode::AuthorizationPermissionMismatch
        );
        assert_eq!(
            access
                .entity("Other", Permissions::READ, "b", "x")
                .unwrap_err()
                .code(),
            ErrorCode::AuthorizationResourceTypeMismatch
        );
        assert_eq!(
            access
                .entity("Orders", Permissions::READ, "d", "x")
                .unwrap_err()
                .code(),
            ErrorCode::AuthorizationFailure
        );
        assert_eq!(
            access.list_tables().unwrap_err().code(),
            ErrorCode::AuthorizationResourceTypeMismatch
        );
        assert_eq!(Access::Full.list_tables(), Ok(()));
    }

    #[test]
    fn queries_are_narrowed_or_refused() {
        let access = scoped("r", None, ("b", "d"));
        let mut spec = QuerySpec::default();
        access.query("T", &mut spec).unwrap();
        assert!(spec.scope.is_some());
        let mut outside = QuerySpec {
            partition_key: Some("e".into()),
            ..QuerySpec::default()
        };
        assert_eq!(
            access.query("T", &mut outside).unwrap_err().code(),
            ErrorCode::AuthorizationFailure
        );
    }

    #[test]
    fn a_patch_condition_needs_read_permission_too() {
        let patch = |upsert, condition: Option<crate::model::PatchCondition>| Operation::Patch {
            key: crate::model::EntityKey::new("p".into(), "r".into()).unwrap(),
            steps: Vec::new(),
            if_match: crate::model::IfMatch::Any,
            upsert,
            condition,
        };
        assert_eq!(needed_for(&patch(false, None)), Permissions::UPDATE);
        let condition = crate::model::PatchCondition::new("A eq 1".into(), |_| true);
        let conditioned = needed_for(&patch(true, Some(condition)));
        assert_eq!(conditioned.letters(), "rau");
        let access = scoped("u", None, ("a", "z"));
        let refused = access.entity("T", conditioned, "p", "r").unwrap_err();
        assert_eq!(refused.code(), ErrorCode::AuthorizationPermissionMismatch);
    }

    #[test]
    fn open_mode_and_missing_credentials() {
        assert_eq!(Authenticator::open().authenticate(None), Ok(Access::Full));
        let keys = KeyRing::generate().unwrap();
        let secret = format!("Bearer {}", keys.signing_key().secret_text());
        let auth = Authenticator::with_keys(keys);
        assert_eq!(auth.authenticate(Some(&secret)), Ok(Access::Full));
        for bad in [None, Some("Basic abc"), Some("Bearer nope")] {
            assert_eq!(
                auth.authenticate(bad).unwrap_err().code(),
                ErrorCode::AuthenticationFailed
            );
        }
    }
}
