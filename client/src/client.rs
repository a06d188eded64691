//! The connection: [`Client`], its builder, and the retry policy.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use trestle_proto::pb;
use trestle_proto::pb::table_service_client::TableServiceClient;

use crate::error::{Error, ErrorKind, Result};
use crate::idempotency::{new_key, Keyed};

/// What may be sent again after a failure that leaves its fate unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Safety {
    /// A read, or a write carrying an idempotency key: anything retryable.
    Idempotent,
    /// A write without a key: only what never reached the server, or it turned away unread.
    OnlyUnsent,
}

/// A random 50-100% of `backoff`.
fn jittered(backoff: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    backoff.mul_f64(0.5 + (random % 1_000) as f64 / 2_000.0)
}

/// The generated gRPC stub the client drives, every request carrying the credential.
pub(crate) type Stub = TableServiceClient<InterceptedService<Channel, Credential>>;

/// Adds `authorization: Bearer …` to every request when a credential is set.
#[derive(Clone, Default)]
pub(crate) struct Credential(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Credential(<redacted>)"
        } else {
            "Credential(None)"
        })
    }
}

impl Interceptor for Credential {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// The address [`Client::builder`] uses unless told otherwise.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:50051";
/// The per-request timeout [`Client::builder`] uses unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Which failures are retried, and for how long.
///
/// Only what is safe is ever retried: reads (gets, query pages, counts, listings) when the server
/// is unavailable; entity writes and transactions when the server is unavailable, the request
/// timed out or the connection failed, because each carries an idempotency key (one per logical
/// call, or the caller's own: [`crate::TableClient::idempotency_key`]) with which the server
/// applies it once however often it arrives; anything the server turned away unread (`ServerBusy`)
/// or that certainly never reached it. Other writes (tables, indexes, settings) are retried only
/// then. Read-modify-write loops on ETag conflicts are the caller's
/// ([`crate::retry_on_conflict`]).
///
/// Waits between attempts grow twofold from `initial_backoff` to `max_backoff`, each a random
/// 50-100% of that (so that clients a failover interrupted together do not retry together), until
/// `max_attempts` or `deadline` after the first attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// Wait before the first retry; doubled on each further one.
    pub initial_backoff: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
    /// No attempt starts later than this after the first.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    /// Up to 30 s (a PostgreSQL failover's usual span) in at most 20 attempts, from 50 ms apart to
    /// 2 s.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 20,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            deadline: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Never retry (writes then carry no idempotency key unless the caller gives one).
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }
}

/// Builds a [`Client`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    /// The servers' addresses: one, or several serving one store.
    endpoints: Vec<String>,
    timeout: Duration,
    retry: RetryPolicy,
    token: Option<Secret>,
    ca: Option<CaSource>,
    tls_domain: Option<String>,
}

/// A credential kept out of `Debug` output.
#[derive(Clone)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where the certificate authority for `https://` endpoints comes from.
#[derive(Debug, Clone)]
enum CaSource {
    Pem(Vec<u8>),
    File(PathBuf),
}

impl ClientBuilder {
    /// The server address, e.g. `http://127.0.0.1:50051`.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoints = vec![endpoint.into()];
        self
    }

    /// Several servers over one store (PostgreSQL): requests are spread over those that answer,
    /// and a request that fails on one for want of it (a server killed or stopped) is retried
    /// ([`RetryPolicy`]) on the others. The connections are made as requests need them, so
    /// [`ClientBuilder::connect`] does not fail for a server that is down.
    pub fn endpoints<S: Into<String>>(mut self, endpoints: impl IntoIterator<Item = S>) -> Self {
        self.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// The timeout of each request.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The retry policy.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The credential sent with every request: a scoped access token (see [`crate::keys::mint`]
    /// and `trestle-server token`) or, for operators, an account key's secret.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Secret(token.into()));
        self
    }

    /// Trust this PEM certificate authority for an `https://` endpoint (instead of the system's
    /// roots).
    pub fn ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca = Some(CaSource::Pem(pem.into()));
        self
    }

    /// Trust the PEM certificate authority in `path` for an `https://` endpoint.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(CaSource::File(path.into()));
        self
    }

    /// The name the server's certificate must carry, when it is not the endpoint's host.
    pub fn tls_domain(mut self, domain: impl Into<String>) -> Self {
        self.tls_domain = Some(domain.into());
        self
    }

    /// Connects; an `https://` endpoint is reached over TLS, checked against the configured
    /// authority or else the system's roots.
    pub async fn connect(self) -> Result<Client> {
        let endpoints = (self.endpoints.iter())
            .map(|address| self.endpoint_of(address))
            .collect::<Result<Vec<Endpoint>>>()?;
        let channel = match endpoints.as_slice() {
            [] => return Err(Error::invalid("no endpoint to connect to")),
            [endpoint] => endpoint
                .connect()
                .await
                .map_err(|error| Error::from_transport(&self.endpoints[0], error))?,
            _ => Channel::balance_list(endpoints.into_iter()),
        };
        let credential = match &self.token {
            Some(Secret(token)) => Credential(Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| Error::invalid("the token is not printable ASCII"))?,
            )),
            None => Credential(None),
        };
        Ok(Client {
            inner: TableServiceClient::with_interceptor(channel, credential)
                .max_decoding_message_size(16 << 20),
            retry: self.retry,
        })
    }

    /// The endpoint `address` names, with the builder's timeout and TLS settings.
    fn endpoint_of(&self, address: &str) -> Result<Endpoint> {
        if !address.contains("://") {
            return Err(Error::invalid(format!(
                "endpoint '{address}' has no scheme: write http://{address} (or https:// for TLS)"
            )));
        }
        let mut endpoint = Endpoint::from_shared(address.to_owned())
            .map_err(|e| Error::invalid(format!("endpoint '{address}': {e}")))?
            .timeout(self.timeout)
            .tcp_nodelay(true);
        if address.starts_with("https://") {
            endpoint = endpoint
                .tls_config(self.tls_config()?)
                .map_err(|e| Error::invalid(format!("TLS settings: {e}")))?;
        }
        Ok(endpoint)
    }

    fn tls_config(&self) -> Result<ClientTlsConfig> {
        let mut tls = ClientTlsConfig::new();
        tls = match &self.ca {
            Some(CaSource::Pem(pem)) => tls.ca_certificate(Certificate::from_pem(pem)),
            Some(CaSource::File(path)) => {
                let pem = std::fs::read(path)
                    .map_err(|e| Error::invalid(format!("CA file {}: {e}", path.display())))?;
                tls.ca_certificate(Certificate::from_pem(pem))
            }
            None => tls.with_native_roots(),
        };
        if let Some(domain) = &self.tls_domain {
            tls = tls.domain_name(domain.clone());
        }
        Ok(tls)
    }
}

/// A connection to a Trestle server: one HTTP/2 channel, cheap to clone and share between tasks.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Stub,
    retry: RetryPolicy,
}

impl Client {
    /// Connects to `endpoint` with the default timeout and retry policy.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Client> {
        Client::builder().endpoint(endpoint).connect().await
    }

    /// A builder, starting from [`DEFAULT_ENDPOINT`], [`DEFAULT_TIMEOUT`] and
    /// [`RetryPolicy::default`].
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            endpoints: vec![DEFAULT_ENDPOINT.to_owned()],
            timeout: DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            token: None,
            ca: None,
            tls_domain: None,
        }
    }

    /// Names of the tables whose name starts with `prefix` (ignoring case), in name order.
    pub async fn list_tables(&self, prefix: &str) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = pb::ListTablesRequest {
                prefix: prefix.to_owned(),
                page_size: 0,
                page_token: page_token.clone(),
            };
            let page = self
                .read(request, |mut c, r| async move { c.list_tables(r).await })
                .await?;
            names.extend(page.tables.into_iter().map(|t| t.name));
            if page.next_page_token.is_empty() {
                return Ok(names);
            }
            page_token = page.next_page_token;
        }
    }

    /// Runs an idempotent read, retrying per the policy.
    pub(crate) async fn read<R, T, F, Fut>(&self, request: R, call: F) -> Result<T>
    where
        R: Clone,
        F: Fn(Stub, R) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.attempt(Safety::Idempotent, request, call).await
    }

    /// Runs a write without an idempotency key (a table's, an index's, a setting's), retried
    /// only if it certainly never reached the server.
    pub(crate) async fn write<R, T, F, Fut>(&self, request: R, call: F) -> Result<T>
    where
        R: Clone,
        F: Fn(Stub, R) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.attempt(Safety::OnlyUnsent, request, call).await
    }

    /// Runs an entity write or a transaction once however often it is sent: with the key it
    /// carries, or a new one if it carries none and the policy retries; retried as a read is.
    pub(crate) async fn write_once<R, T, F, Fut>(&self, mut request: R, call: F) -> Result<T>
    where
        R: Clone + Keyed,
        F: Fn(Stub, R) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let key = request.idempotency_key();
        if key.is_empty() && self.retry.max_attempts > 1 {
            *key = new_key();
        }
        let safety = match key.is_empty() {
            true => Safety::OnlyUnsent,
            false => Safety::Idempotent,
        };
        self.attempt(safety, request, call).await
    }

    async fn attempt<R, T, F, Fut>(&self, safety: Safety, request: R, call: F) -> Result<T>
    where
        R: Clone,
        F: Fn(Stub, R) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let started = Instant::now();
        let mut backoff = self.retry.initial_backoff;
        let mut attempt = 1;
        loop {
            let error = match call(self.inner.clone(), request.clone()).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) => Error::from_status(status),
            };
            let wait = jittered(backoff);
            let retryable = error.never_sent()
                || error.kind() == ErrorKind::Busy
                || (safety == Safety::Idempotent
                    && matches!(error.kind(), ErrorKind::Unavailable | ErrorKind::Timeout));
            let in_time = started.elapsed() + wait <= self.retry.deadline;
            if !retryable || attempt >= self.retry.max_attempts || !in_time {
                return Err(error);
            }
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(self.retry.max_backoff);
            attempt += 1;
        }
    }
}
