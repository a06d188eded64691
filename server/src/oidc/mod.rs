//! OAuth bearer tokens from an OpenID Connect provider (Entra ID style), the Azure SDKs'
//! `TokenCredential` path: a JWT signed by a key of the provider's JWKS, issued by a configured
//! issuer for a configured audience, inside its lifetime, whose `roles` map to Trestle's
//! permissions. A token is checked in this order (a forged token learns nothing of the claims):
//! its shape and algorithm, its signature, its lifetime, issuer and audience, its roles. Each
//! check is one signature verification and a few comparisons: the cost of a request is bounded
//! by [`jwt::MAX_TOKEN_BYTES`] and [`jwks::MAX_KEYS`].

mod jwks;
mod jwt;
mod source;

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use trestle_proto::access::{Grant, KeyBounds, Permissions};

pub use jwks::{JwksError, KeySet};
pub use source::JwksSource;

/// The audiences Azure Storage takes for every account: what `https://storage.azure.com/.default`
/// scopes a token to.
pub const DEFAULT_AUDIENCES: [&str; 2] =
    ["https://storage.azure.com", "https://storage.azure.com/"];
/// How far a token's `exp` and `nbf` may be from the server's clock (Azure's five minutes).
pub const CLOCK_SKEW: Duration = Duration::from_secs(300);
/// How often the key set is fetched again by default (providers roll keys over weeks).
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(3600);
/// The least time between two fetches that a token signed by an unknown key asks for (or the
/// refresh interval, if shorter).
const MIN_REFETCH: Duration = Duration::from_secs(60);

/// Azure's built-in data roles, by name, and what each allows here.
pub fn azure_roles() -> Vec<(String, Permissions)> {
    let reader = Permissions::READ.union(Permissions::LIST_TABLES);
    let contributor = reader
        .union(Permissions::ADD)
        .union(Permissions::UPDATE)
        .union(Permissions::DELETE)
        .union(Permissions::MANAGE_TABLES);
    vec![
        ("Storage Table Data Reader".to_owned(), reader),
        ("Storage Table Data Contributor".to_owned(), contributor),
    ]
}

/// What the server accepts.
#[derive(Debug, Clone)]
pub struct OidcSettings {
    /// Where the provider's signing keys are.
    pub jwks: JwksSource,
    /// Accepted `iss` values (Entra ID: `https://login.microsoftonline.com/<tenant>/v2.0` or
    /// `https://sts.windows.net/<tenant>/`).
    pub issuers: Vec<String>,
    /// Accepted `aud` values; a token must name one.
    pub audiences: Vec<String>,
    /// Role names and what they allow; a token's permissions are the union of its roles'.
    pub roles: Vec<(String, Permissions)>,
    /// How often the key set is read again.
    pub refresh: Duration,
}

/// Why a bearer token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcError {
    /// Not a valid token for this server (shape, signature, lifetime, issuer, audience):
    /// Azure's `InvalidAuthenticationInfo`.
    #[error("{0}")]
    Invalid(String),
    /// A valid token none of whose roles this server maps: Azure's
    /// `AuthorizationPermissionMismatch`.
    #[error("{0}")]
    NoRole(String),
}

/// Validates bearer tokens against the settings and the provider's current keys.
#[derive(Debug)]
pub struct Oidc {
    settings: OidcSettings,
    keys: RwLock<Arc<KeySet>>,
    last_fetch: Mutex<Option<Instant>>,
}

impl Oidc {
    /// A validator; a key file is read now (its errors stop the start), a URL on [`Oidc::start`].
    pub fn new(settings: OidcSettings) -> Result<Oidc, JwksError> {
        let keys = match &settings.jwks {
            JwksSource::File(path) => source::read_file(path)?,
            JwksSource::Url(_) => KeySet::default(),
        };
        Ok(Oidc {
            settings,
            keys: RwLock::new(Arc::new(keys)),
            last_fetch: Mutex::new(None),
        })
    }

    /// Whether `credential` is shaped like a JWT (and so is checked here rather than as one of
    /// Trestle's own credentials).
    pub fn looks_like_jwt(credential: &str) -> bool {
        jwt::looks_like_jwt(credential)
    }

    /// Fetches the key set from a URL (an error stops the start), then keeps it fresh every
    /// [`OidcSettings::refresh`] for as long as the validator lives.
    pub async fn start(self: &Arc<Oidc>) -> Result<(), JwksError> {
        if matches!(self.settings.jwks, JwksSource::Url(_)) {
            self.refresh().await?;
        }
        let every = self.settings.refresh;
        let oidc = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(oidc) = oidc.upgrade() else { return };
                if let Err(error) = oidc.refresh().await {
                    tracing::warn!(%error, "cannot refresh the OAuth key set; keeping the last one");
                }
            }
        });
        Ok(())
    }

    /// Reads the key set again, replacing the current one only if the new one is usable.
    async fn refresh(&self) -> Result<(), JwksError> {
        *self.last_fetch.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let keys = source::load(&self.settings.jwks).await?;
        tracing::info!(keys = keys.len(), "OAuth key set loaded");
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
        Ok(())
    }

    /// A refresh, at most every [`MIN_REFETCH`], after a token named a key the set lacks (the
    /// provider may have rolled its keys over): the token is refused now, its retry may pass.
    fn refresh_soon(self: &Arc<Oidc>) {
        let mut last = self.last_fetch.lock().unwrap_or_else(|e| e.into_inner());
        let least = MIN_REFETCH.min(self.settings.refresh);
        if last.is_some_and(|at| at.elapsed() < least) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *last = Some(Instant::now());
        let oidc = self.clone();
        runtime.spawn(async move {
            if let Err(error) = oidc.refresh().await {
                tracing::warn!(%error, "cannot refresh the OAuth key set");
            }
        });
    }

    /// What `token` grants at `now`.
    pub fn validate(self: &Arc<Oidc>, token: &str, now: SystemTime) -> Result<Grant, OidcError> {
        let invalid = |why: String| OidcError::Invalid(why);
        let decoded = jwt::decode(token).map_err(invalid)?;
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner()).clone();
        let kid = decoded.kid.as_deref();
        match keys.verify(decoded.alg, kid, decoded.signed, &decoded.signature) {
            Ok(()) => {}
            Err(jwks::Mismatch::UnknownKey) => {
                if matches!(self.settings.jwks, JwksSource::Url(_)) {
                    self.refresh_soon();
                }
                return Err(invalid(format!(
                    "Signature validation failed: no key of the issuer's key set is {}",
                    kid.map_or("for this algorithm".to_owned(), |kid| format!("{kid:?}"))
                )));
            }
            Err(jwks::Mismatch::BadSignature) => {
                return Err(invalid(
                    "Signature validation failed: the signature is not the key's".to_owned(),
                ))
            }
        }
        let claims = decoded.claims;
        let now = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let skew = CLOCK_SKEW.as_secs_f64();
        let Some(exp) = claims.exp else {
            return Err(invalid(
                "Lifetime validation failed: the token has no `exp`".to_owned(),
            ));
        };
        if now >= exp + skew {
            return Err(invalid(
                "Lifetime validation failed. The token is expired.".to_owned(),
            ));
        }
        if claims.nbf.is_some_and(|nbf| now + skew < nbf) {
            return Err(invalid(
                "Lifetime validation failed. The token is not yet valid (`nbf`).".to_owned(),
            ));
        }
        if !claims
            .iss
            .as_ref()
            .is_some_and(|iss| self.settings.issuers.contains(iss))
        {
            return Err(invalid(
                "Issuer validation failed. Issuer did not match.".to_owned(),
            ));
        }
        if !claims.aud.contains_any(&self.settings.audiences) {
            return Err(invalid(
                "Audience validation failed. Audience did not match.".to_owned(),
            ));
        }
        let permissions = claims
            .roles
            .iter()
            .filter_map(|role| {
                let mapped = self
                    .settings
                    .roles
                    .iter()
                    .rev()
                    .find(|(name, _)| name == role);
                mapped.map(|(_, permissions)| *permissions)
            })
            .fold(Permissions::default(), Permissions::union);
        if permissions == Permissions::default() {
            return Err(OidcError::NoRole(format!(
                "This request is not authorized to perform this operation using this permission: \
                 the token's roles {:?} name none this server maps to permissions",
                claims.roles
            )));
        }
        let seconds = |at: f64| at as i64;
        Ok(Grant {
            permissions,
            table: None,
            partitions: KeyBounds::default(),
            rows: KeyBounds::default(),
            not_before: claims.nbf.map_or(0, |nbf| seconds(nbf - skew)),
            expires: seconds(exp + skew),
        })
    }
}
