//! A REST request as the handlers see it (its peer, line, headers and body, with Azure's query
//! parameters and headers read the way Azure reads them), and who is asking: a shared access
//! signature, a SharedKey signature, or Trestle's own `Bearer` credential.

use std::borrow::Cow;
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use http::{HeaderMap, Method, Uri};

use super::failure::Failure;
use super::odata::Metadata;
use super::{paths, sas, shared_key, RestApi, ACCOUNT};
use crate::auth::Access;
use crate::error::ErrorCode;
use crate::error::TableError;
use crate::idempotency::IdempotencyClaim;
use crate::model::{AccessPolicy, IfMatch, Segment, ValidationError};

/// What the secondary location's account name adds to the primary's.
const SECONDARY_SUFFIX: &str = "-secondary";

/// One request, parsed enough to dispatch.
pub(super) struct Request {
    pub(super) peer: IpAddr,
    pub(super) method: Method,
    pub(super) uri: Uri,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    /// The path as sent, when it named the secondary location (then `uri` names the primary):
    /// a signature may cover either.
    pub(super) secondary_path: Option<String>,
}

impl Request {
    /// `NotImplemented` for this request, which the endpoint does not serve, and why (`because`,
    /// if known).
    pub(super) fn not_served(&self, because: &str) -> Failure {
        let mut message = format!(
            "{} {} is not served by Trestle's REST endpoint",
            self.method,
            self.uri.path()
        );
        if !because.is_empty() {
            message = format!("{message}: {because}");
        }
        Failure::of(ErrorCode::NotImplemented, message)
    }

    /// Turns a request to the secondary location (`/<account>-secondary/<account>/...`, where the
    /// SDKs send what Azure serves only there: statistics) into the same request to the primary:
    /// the endpoint is both locations of its one account. The path as sent is kept: the Python
    /// SDK signs the primary's path, the JS SDK the secondary's.
    pub(super) fn address_primary_location(&mut self) -> Result<(), Failure> {
        let secondary = format!("/{ACCOUNT}{SECONDARY_SUFFIX}");
        let Some(rest) = self.uri.path().strip_prefix(&secondary) else {
            return Ok(());
        };
        if self.param("comp").as_deref() != Some("stats") {
            return Err(Failure::of(
                ErrorCode::InvalidUri,
                "the secondary location serves the service's statistics only",
            ));
        }
        let primary = format!("/{ACCOUNT}");
        let path = match rest.strip_prefix(&primary) {
            Some(_) => rest.to_owned(),
            None => format!("{primary}{rest}"),
        };
        let query = self.uri.query().map_or(String::new(), |q| format!("?{q}"));
        self.secondary_path = Some(self.uri.path().to_owned());
        self.uri = format!("{path}{query}")
            .parse()
            .map_err(|_| Failure::of(ErrorCode::InvalidUri, "the request's URL is not valid"))?;
        Ok(())
    }

    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// How many times the query names parameter `name`.
    pub(super) fn param_count(&self, name: &str) -> usize {
        self.uri.query().map_or(0, |query| {
            query
                .split('&')
                .filter(|pair| {
                    let key = pair.split_once('=').map_or(*pair, |(key, _)| key);
                    paths::percent_decode(key).is_some_and(|key| key == name)
                })
                .count()
        })
    }

    /// A query parameter, percent-decoded (`+` stays a plus, as Azure reads it).
    pub(super) fn param(&self, name: &str) -> Option<String> {
        query_param(self.uri.query()?, name)
    }

    /// `$top`: how many results a page may hold, `None` when absent (the server's page size).
    /// `Some(0)` asks for none, as OData has it: callers answer an empty page.
    pub(super) fn top(&self) -> Result<Option<u32>, Failure> {
        self.param("$top")
            .map(|top| {
                top.parse::<u32>().map_err(|_| {
                    Failure::invalid(ValidationError::Argument(format!(
                        "$top {top:?} is not a number"
                    )))
                })
            })
            .transpose()
    }

    /// The scan segment a query names (Trestle's own custom query options, as gRPC's
    /// `segment`/`total_segments`): `segment=<n>&totalSegments=<total>`, `None` without them.
    pub(super) fn segment(&self) -> Result<Option<Segment>, Failure> {
        let number = |name: &str| {
            let Some(text) = self.param(name) else {
                return Ok(0);
            };
            text.parse::<u32>().map_err(|_| {
                Failure::invalid(ValidationError::Argument(format!(
                    "{name} {text:?} is not a number"
                )))
            })
        };
        let (index, total) = (number("segment")?, number("totalSegments")?);
        Segment::of(index, total).map_err(Failure::invalid)
    }

    /// `AtomFormatNotSupported` when the client takes Atom answers only (`$format`, or else
    /// `Accept`, names Atom and no JSON): Azure has answered in JSON alone since 2015, and such a
    /// client could not read a JSON answer.
    pub(super) fn accepts_json(&self) -> Result<(), Failure> {
        let accepted = self.accepted_format().unwrap_or_default();
        if accepted.contains("atom") && !accepted.contains("json") {
            return Err(Failure::of(
                ErrorCode::AtomFormatNotSupported,
                format!("answers are JSON only, and the request accepts {accepted:?}"),
            ));
        }
        Ok(())
    }

    /// The metadata level asked for ([`Request::accepted_format`]).
    pub(super) fn metadata(&self) -> Metadata {
        Metadata::from_accept(self.accepted_format().as_deref())
    }

    /// The answer format the client takes: OData's `$format` if given (OData has it override
    /// `Accept`; the .NET SDK sends it), else `Accept`.
    fn accepted_format(&self) -> Option<Cow<'_, str>> {
        match self.param("$format") {
            Some(format) => Some(Cow::Owned(format)),
            None => self.header("accept").map(Cow::Borrowed),
        }
    }

    /// Whether the client asked for the written entity back (`Prefer`), with `default`.
    pub(super) fn return_content(&self, default: bool) -> bool {
        match self.header("prefer") {
            Some(p) if p.contains("return-no-content") => false,
            Some(p) if p.contains("return-content") => true,
            _ => default,
        }
    }

    /// The `Idempotency-Key` header (the IETF httpapi draft's name) as `access`'s claim: a write
    /// sent again with it applies once ([`crate::idempotency`]).
    pub(super) fn idempotency_claim(
        &self,
        access: &crate::auth::Access,
    ) -> Result<Option<IdempotencyClaim>, Failure> {
        let key = self.header("idempotency-key").unwrap_or("");
        IdempotencyClaim::parse(access.idempotency_scope(), key).map_err(Failure::invalid)
    }

    pub(super) fn if_match(&self) -> Result<Option<IfMatch>, Failure> {
        self.header("if-match")
            .map(|v| IfMatch::parse(v).map_err(Failure::invalid))
            .transpose()
    }
}

/// The stored access policy `id` of `table`, as it stands now: so that a signature naming it is
/// refused as soon as the policy is removed or changed. (A missing table has none.)
async fn stored_policy(
    api: &RestApi,
    table: String,
    id: &str,
) -> Result<Option<AccessPolicy>, Failure> {
    let policies = api
        .executor
        .blocking(move |engine| match engine.access_policies(&table) {
            Err(TableError::TableNotFound(_)) => Ok(Vec::new()),
            read => read,
        })
        .await?;
    Ok(policies.into_iter().find(|policy| policy.id == id))
}

/// Who is asking: a shared access signature (`sig` among the query parameters), a SharedKey or
/// SharedKeyLite signature under one of the account's keys, or the `Bearer` credentials
/// Trestle's gRPC service takes (none needed in open mode).
pub(super) async fn authenticate(
    api: &RestApi,
    request: &Request,
    account: &str,
) -> Result<Access, Failure> {
    let failed = |why: String| Failure::of(ErrorCode::AuthenticationFailed, why);
    let served_account = || {
        if account == ACCOUNT {
            Ok(())
        } else {
            Err(failed(format!(
                "this server's account is {:?}, not {account:?}",
                ACCOUNT
            )))
        }
    };
    if request.param("sig").is_some() {
        served_account()?;
        // A field given twice could be read either way: refused, as a tampered signature.
        if let Some(twice) = sas::FIELDS
            .iter()
            .find(|name| request.param_count(name) > 1)
        {
            return Err(failed(format!(
                "the shared access signature gives its field {twice} more than once"
            )));
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let presented = sas::Presented {
            account,
            peer: request.peer,
            now,
        };
        let refused = |refusal: sas::Refusal| Failure::of(refusal.code, refusal.message);
        let signed =
            sas::verify(|name| request.param(name), &api.keys, &presented).map_err(refused)?;
        let policy = match signed.named_policy() {
            Some((table, id)) => stored_policy(api, table, &id).await?,
            None => None,
        };
        let grant = signed.grant(policy.as_ref()).map_err(refused)?;
        return Ok(Access::Scoped(grant));
    }
    match request.header("authorization") {
        Some(a) if a.starts_with("SharedKey") => {
            served_account()?;
            let signed = |raw_path| shared_key::Signed {
                method: request.method.as_str(),
                raw_path,
                query: request.uri.query(),
                headers: &request.headers,
            };
            let clock = shared_key::Clock {
                now: SystemTime::now(),
                max_skew: api.max_clock_skew,
            };
            let verify = |path| shared_key::verify(a, account, &api.keys, &signed(path), &clock);
            let verified = match (verify(request.uri.path()), &request.secondary_path) {
                (Err(_), Some(sent)) => verify(sent),
                (verified, _) => verified,
            };
            verified.map_err(failed)?;
            Ok(Access::Full)
        }
        authorization => Ok(api.authenticator.authenticate(authorization)?),
    }
}

/// Parameter `name` of the query string `query`, percent-decoded (`+` stays a plus, as Azure
/// reads it).
pub(super) fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (paths::percent_decode(key)? == name).then(|| paths::percent_decode(value))?
    })
}
