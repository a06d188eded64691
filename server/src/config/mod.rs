//! Server configuration: the clap arguments of the binary (with a configuration file beneath
//! them: [`file`]), and the plain `Config` the library takes (so tests build one without clap).

pub mod file;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use trestle_proto::access::Permissions;

use crate::auth::Authenticator;
use crate::oidc;
use crate::storage::{Durability, PostgresOptions, StoreOptions, DEFAULT_CACHE_MIB};
pub use crate::storage::{StoreConfig, DEFAULT_STORE_POOL_SIZE};

/// Where the server listens by default: loopback only; opening wider is an explicit choice.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// Largest request message the server decodes. Above the 4 MiB transaction limit, so an over-size
/// transaction gets `RequestBodyTooLarge` rather than a transport error.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Requests in flight at once by default; past it requests get `ServerBusy`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;
/// Concurrent HTTP/2 streams (calls) one connection may open by default.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 256;

/// How long a streamed scan's reader may read nothing, by default, before the scan is closed.
pub const DEFAULT_STREAM_STALL: Duration = Duration::from_secs(60);
/// Streamed scans one connection may have open at once, by default.
pub const DEFAULT_MAX_STREAMS_PER_CONNECTION: usize = 64;
/// Long-lived calls (feed readers, streamed scans, backups) open at once, by default: a class of
/// their own beside the requests in flight ([`crate::admission`]).
pub const DEFAULT_MAX_OPEN_STREAMS: usize = 1024;
/// Long-lived calls one credential may have open at once, by default.
pub const DEFAULT_MAX_STREAMS_PER_CREDENTIAL: usize = 256;
/// Bytes of streamed batches all streams together may buffer, by default.
pub const DEFAULT_STREAM_BUFFER_MIB: usize = 64;
/// How long a new connection has, by default, to complete its handshake (TLS, then the HTTP/2
/// preface and SETTINGS) before it is closed.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection with no call open is kept, by default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How often the server pings a connection, by default, to find peers that are gone.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// How long the server waits for a ping's answer before it closes the connection.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Connections open at once, by default; one over it is closed as soon as it is accepted.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// Default MiB of request bodies the REST endpoint may hold buffered at once, all requests together.
pub const DEFAULT_REST_BODY_BUFFER_MIB: usize = 256;
/// Default time a REST request's body may take to arrive.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default distance a SharedKey request's date may be from the server's clock (Azure's 15
/// minutes).
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);
/// How long a shutdown waits, by default, for open calls to finish.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// What the library needs to serve.
#[derive(Debug, Clone)]
pub struct Config {
    /// The store: embedded in a data directory, or in a PostgreSQL database.
    pub store: StoreConfig,
    /// Who may do what; open (no keys) by default, which only a loopback listener allows.
    pub authenticator: Authenticator,
    /// Serve open mode on a non-loopback address anyway.
    pub insecure_open: bool,
    /// Health and reflection need a credential too (they are open by default).
    pub protect_introspection: bool,
    /// Serve TLS with this certificate chain and key.
    pub tls: Option<TlsIdentity>,
    /// Serve the REST endpoint over TLS with this certificate chain and key (plain HTTP if none).
    pub rest_tls: Option<TlsIdentity>,
    /// Serve the HTTP probes (`/healthz`, `/readyz`) on this listener.
    pub health_listen: Option<Arc<std::net::TcpListener>>,
    /// Serve Prometheus metrics (`/metrics`) on this listener.
    pub metrics_listen: Option<Arc<std::net::TcpListener>>,
    /// Serve the web console on this listener.
    pub console_listen: Option<Arc<std::net::TcpListener>>,
    /// Request limits.
    pub limits: Limits,
    /// How long a shutdown waits for open calls to finish before closing their connections.
    pub shutdown_grace: Duration,
}

impl Config {
    /// Defaults for the embedded store in a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Config {
        Config::over(StoreConfig::embedded(data_dir))
    }

    /// Defaults for `store`.
    pub fn over(store: StoreConfig) -> Config {
        Config {
            store,
            authenticator: Authenticator::open(),
            insecure_open: false,
            protect_introspection: false,
            tls: None,
            rest_tls: None,
            health_listen: None,
            metrics_listen: None,
            console_listen: None,
            limits: Limits::default(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// A PEM certificate chain and its private key.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key, PEM.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity { key: <redacted> }")
    }
}

/// Bounds on what clients can make the server hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request message decoded, in bytes.
    pub max_message_bytes: usize,
    /// Short requests in flight at once.
    pub max_in_flight: usize,
    /// Long-lived calls (feed readers, streamed scans, backups) open at once.
    pub max_open_streams: usize,
    /// Long-lived calls one credential may have open at once.
    pub max_streams_per_credential: usize,
    /// Evaluation steps one request may cost on one entity (`crate::model::WorkBudget`).
    pub work_budget: u64,
    /// About the most entities one `AggregateEntities` call examines before it answers a
    /// continuation token (`crate::query::aggregate`).
    pub aggregate_examined_per_call: u64,
    /// Seconds an idempotency key's record answers retries (`crate::idempotency`).
    pub idempotency_window_seconds: u64,
    /// Concurrent calls per connection.
    pub max_concurrent_streams: u32,
    /// How long a streamed scan's reader may read nothing before the scan is closed.
    pub stream_stall: Duration,
    /// Streamed scans open at once on one connection.
    pub max_streams_per_connection: usize,
    /// Bytes of streamed batches all streams together may buffer.
    pub stream_buffer_bytes: usize,
    /// How long a new connection has to complete its handshake.
    pub handshake_timeout: Duration,
    /// How long a connection with no call open is kept.
    pub idle_timeout: Duration,
    /// How often a connection is pinged.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered.
    pub keepalive_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Bytes of request bodies the REST endpoint may hold buffered at once, all requests together.
    pub rest_body_buffer_bytes: usize,
    /// How long a REST request's body may take to arrive once its headers have.
    pub body_timeout: Duration,
    /// How far a SharedKey-signed request's date may be from the server's clock.
    pub max_clock_skew: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: MAX_MESSAGE_BYTES,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_open_streams: DEFAULT_MAX_OPEN_STREAMS,
            max_streams_per_credential: DEFAULT_MAX_STREAMS_PER_CREDENTIAL,
            work_budget: crate::model::DEFAULT_WORK_BUDGET,
            aggregate_examined_per_call: crate::query::aggregate::DEFAULT_EXAMINED_PER_CALL,
            idempotency_window_seconds: crate::idempotency::DEFAULT_WINDOW_SECONDS,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            stream_stall: DEFAULT_STREAM_STALL,
            max_streams_per_connection: DEFAULT_MAX_STREAMS_PER_CONNECTION,
            stream_buffer_bytes: DEFAULT_STREAM_BUFFER_MIB * 1024 * 1024,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            rest_body_buffer_bytes: DEFAULT_REST_BODY_BUFFER_MIB * 1024 * 1024,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_clock_skew: DEFAULT_MAX_CLOCK_SKEW,
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

/// The `trestle-server` command line: serve (no subcommand), or a key or token tool.
#[derive(Debug, clap::Parser)]
#[command(
    name = "trestle-server",
    version,
    about = "Trestle: a durable partitioned entity store with Azure Table semantics, over gRPC",
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// A tool to run instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// How to serve.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The tools beside serving.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print the configuration the server would serve with (`trestle-server config --config
    /// trestle.toml [flags]`): every flag's value and where it came from, secrets masked, as a
    /// configuration file.
    Config {
        /// The serve flags (and `--config`) to resolve.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        flags: Vec<std::ffi::OsString>,
    },
    /// Ask an HTTP probe of a server (`--health-listen`) and exit 0 only if it answers 200: a
    /// container's `HEALTHCHECK` with nothing but this binary in the image.
    Probe {
        /// The probe's URL (`http://127.0.0.1:8081/readyz`).
        #[arg(default_value = "http://127.0.0.1:8081/readyz")]
        url: String,
    },
    /// Write a new key file (one random account key) readable only by its owner.
    Keygen {
        /// The file to create; an existing file is never overwritten.
        #[arg(long)]
        out: PathBuf,
    },
    /// Print a scoped access token signed with the key file's first key.
    Token(TokenArgs),
    /// Print the Azure connection string of the REST endpoint with the key file's first key, for
    /// the Azure SDKs and tools.
    ConnectionString {
        /// The key file whose first key the connection string carries.
        #[arg(long)]
        key_file: PathBuf,
        /// The REST endpoint as clients reach it (`--rest-listen`'s address).
        #[arg(long, default_value = "http://127.0.0.1:10002")]
        endpoint: String,
    },
    /// Back up a running server (embedded store) into a new directory: every table, then every
    /// entity as it was at one instant, while the server goes on serving.
    Backup {
        /// The server.
        #[arg(
            long,
            env = "TRESTLE_ENDPOINT",
            default_value = "http://127.0.0.1:50051"
        )]
        endpoint: String,
        /// An account key of the server (not needed in open mode). A key may begin with `-`.
        #[arg(
            long,
            env = "TRESTLE_TOKEN",
            hide_env_values = true,
            allow_hyphen_values = true
        )]
        token: Option<String>,
        /// The CA certificate (PEM) that signed an `https` endpoint's certificate.
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// The directory to write: new, or empty.
        #[arg(long)]
        to: PathBuf,
    },
    /// Build a new data directory from a backup, after checking every file against its
    /// manifest; then serve it with `--data-dir`.
    Restore {
        /// The backup's directory.
        #[arg(long)]
        from: PathBuf,
        /// The data directory to build: new, or empty.
        #[arg(long)]
        data_dir: PathBuf,
    },
}

/// `trestle-server token`.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// The key file whose first key signs.
    #[arg(long)]
    pub key_file: PathBuf,
    /// Granted operations: r read, a add, u update, d delete, l list tables, c create/delete
    /// tables (e.g. `rau`).
    #[arg(long)]
    pub permissions: String,
    /// The one table the token is for; every table when absent.
    #[arg(long)]
    pub table: Option<String>,
    /// Smallest PartitionKey covered (inclusive).
    #[arg(long, allow_hyphen_values = true)]
    pub partition_start: Option<String>,
    /// First PartitionKey past the range (exclusive).
    #[arg(long, allow_hyphen_values = true)]
    pub partition_end: Option<String>,
    /// Smallest RowKey covered in each partition (inclusive).
    #[arg(long, allow_hyphen_values = true)]
    pub row_start: Option<String>,
    /// First RowKey past the range (exclusive).
    #[arg(long, allow_hyphen_values = true)]
    pub row_end: Option<String>,
    /// Seconds the token is valid from now.
    #[arg(long, default_value_t = 3600)]
    pub ttl: u64,
}

/// The flags of the server itself.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A TOML file of flags by their long names (`rest-listen = "127.0.0.1:10002"`); a flag or
    /// its environment variable overrides the file's value ([`file`]).
    #[arg(long = "config", id = "config", env = "TRESTLE_CONFIG")]
    pub config_file: Option<PathBuf>,
    /// Also serve the Azure Table REST endpoint (path-style, `http://<addr>/devstoreaccount1`)
    /// on this address; off unless given. Open mode needs a loopback address here too.
    #[arg(long, env = "TRESTLE_REST_LISTEN")]
    pub rest_listen: Option<SocketAddr>,
    /// Also serve Prometheus metrics as text at `http://<addr>/metrics`; off unless given. The
    /// endpoint has no authentication: serve it on a loopback or private address.
    #[arg(long, env = "TRESTLE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Also serve HTTP probes on this address: `/healthz` (the process serves) and `/readyz` (the
    /// store answers and the server is not shutting down), for Kubernetes; off unless given.
    #[arg(long, env = "TRESTLE_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,
    /// Also serve the web console (`http://<addr>/`) on this address: sign in with an account
    /// key or a token; off unless given. Open mode needs a loopback address here too.
    #[arg(long, env = "TRESTLE_CONSOLE_LISTEN")]
    pub console_listen: Option<SocketAddr>,
    /// Address to listen on.
    #[arg(long, env = "TRESTLE_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Directory holding the data (created if missing): the embedded sled store.
    #[arg(long, env = "TRESTLE_DATA_DIR", default_value = "./trestle-data")]
    pub data_dir: PathBuf,
    /// Keep the store in this PostgreSQL database instead (`postgres://user@host:5432/db`), so
    /// that several servers serve one store. `--data-dir` is then unused.
    #[arg(long, env = "TRESTLE_STORE")]
    pub store: Option<String>,
    /// Connections to the `--store` database, twice over: at most this many point reads and
    /// one-trip inserts (awaited) and this many other storage calls (blocking) at once.
    #[arg(long, env = "TRESTLE_STORE_POOL_SIZE", default_value_t = DEFAULT_STORE_POOL_SIZE,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub store_pool_size: usize,
    /// CA certificates (PEM) that verify the `--store` database's certificate when its URL says
    /// `sslmode=require` (default: the system's roots).
    #[arg(long, env = "TRESTLE_STORE_CA_FILE")]
    pub store_ca_file: Option<PathBuf>,
    /// Log filter, in `tracing` EnvFilter syntax (e.g. `info`, `trestle_server=debug`).
    #[arg(long, env = "TRESTLE_LOG", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "TRESTLE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Acknowledge writes before they reach disk and flush every N milliseconds instead. A crash
    /// then loses up to N ms of acknowledged writes. Off by default: every write is durable first.
    #[arg(long, env = "TRESTLE_RELAXED_FLUSH_MS")]
    pub relaxed_flush_ms: Option<u64>,
    /// Bound of the page cache, in MiB of stored bytes (as sled counts them).
    #[arg(long, env = "TRESTLE_CACHE_MIB", default_value_t = DEFAULT_CACHE_MIB)]
    pub cache_mib: u64,
    /// Refuse writes while the data directory's disk has less free space than this, in MiB.
    #[arg(long, env = "TRESTLE_MIN_FREE_MIB", default_value_t = 64)]
    pub min_free_mib: u64,
    /// Account keys (see `trestle-server keygen`): requests then need a key or a token. Without
    /// it the server is open, which it allows only on a loopback address.
    #[arg(long, env = "TRESTLE_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// OAuth bearer tokens (Entra ID style): the identity provider's JSON Web Key Set, a file or
    /// an `https://` URL (its `jwks_uri`). Requests may then carry a JWT it signed, checked for
    /// issuer, audience, lifetime and roles; with no key file, only such tokens are taken.
    #[arg(long, env = "TRESTLE_OAUTH_JWKS")]
    pub oauth_jwks: Option<String>,
    /// An accepted token issuer (`iss`), such as
    /// `https://login.microsoftonline.com/<tenant>/v2.0`; repeatable.
    #[arg(long)]
    pub oauth_issuer: Vec<String>,
    /// An accepted token audience (`aud`); repeatable. Default: `https://storage.azure.com`
    /// (with or without its trailing slash), what Azure SDKs ask tokens for.
    #[arg(long)]
    pub oauth_audience: Vec<String>,
    /// A token role and the permissions it grants, as `NAME=LETTERS` (`Orders.Writer=rau`);
    /// repeatable. `Storage Table Data Reader` (`rl`) and `Storage Table Data Contributor`
    /// (`raudlc`) are mapped already.
    #[arg(long, value_parser = parse_role)]
    pub oauth_role: Vec<(String, Permissions)>,
    /// Seconds between two reads of the key set.
    #[arg(long, default_value_t = oidc::DEFAULT_REFRESH.as_secs(),
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub oauth_refresh_secs: u64,
    /// Serve with no key file on a non-loopback address: anyone who reaches it can do anything.
    #[arg(long)]
    pub insecure_open: bool,
    /// Require a credential for health checks and reflection too.
    #[arg(long)]
    pub protect_introspection: bool,
    /// Serve TLS with this PEM certificate chain (needs `--tls-key`).
    #[arg(long, env = "TRESTLE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, env = "TRESTLE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Serve the REST endpoint (`--rest-listen`) over TLS with this PEM certificate chain
    /// (needs `--rest-tls-key`; may be the same files as `--tls-cert`).
    #[arg(long, env = "TRESTLE_REST_TLS_CERT")]
    pub rest_tls_cert: Option<PathBuf>,
    /// The PEM private key of `--rest-tls-cert`.
    #[arg(long, env = "TRESTLE_REST_TLS_KEY")]
    pub rest_tls_key: Option<PathBuf>,
    /// Requests in flight at once (long-lived calls have their own class); past it requests get
    /// RESOURCE_EXHAUSTED `ServerBusy`.
    #[arg(long, default_value_t = DEFAULT_MAX_IN_FLIGHT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_in_flight: usize,
    /// Long-lived calls (change-feed readers, streamed scans, backups) open at once, a class of
    /// their own that never takes the requests' permits; past it they get `ServerBusy`.
    #[arg(long, default_value_t = DEFAULT_MAX_OPEN_STREAMS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_open_streams: usize,
    /// Long-lived calls one credential (the account key, or one token) may have open at once.
    #[arg(long, default_value_t = DEFAULT_MAX_STREAMS_PER_CREDENTIAL,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_streams_per_credential: usize,
    /// Evaluation steps one request may cost on one entity: every filter it carries (a query's,
    /// each condition of a patch or transaction) is costed at its worst case before it runs and
    /// the request refused `InvalidInput` past this.
    #[arg(long, default_value_t = crate::model::DEFAULT_WORK_BUDGET,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub work_budget: u64,
    /// About the most entities one AggregateEntities call examines (it stops at the end of the
    /// chunk that passes it): a longer aggregate answers a continuation token carrying its
    /// groups so far, and the caller sends it back.
    #[arg(long, default_value_t = crate::query::aggregate::DEFAULT_EXAMINED_PER_CALL,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub aggregate_examined_per_call: u64,
    /// Seconds a write's idempotency key answers retries with the first outcome (its record is
    /// then expired by the housekeeping).
    #[arg(long = "idempotency-window", default_value_t = crate::idempotency::DEFAULT_WINDOW_SECONDS,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub idempotency_window_seconds: u64,
    /// Concurrent calls one connection may open.
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENT_STREAMS)]
    pub max_concurrent_streams: u32,
    /// Largest request message, in MiB.
    #[arg(long, default_value_t = 16,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub max_message_mib: usize,
    /// Seconds a streamed scan's reader may read nothing before the scan is closed with
    /// DEADLINE_EXCEEDED `OperationTimedOut`.
    #[arg(long, default_value_t = DEFAULT_STREAM_STALL.as_secs(),
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub stream_stall_secs: u64,
    /// Streamed scans one connection may have open at once; past it scans get RESOURCE_EXHAUSTED
    /// `ServerBusy`.
    #[arg(long, default_value_t = DEFAULT_MAX_STREAMS_PER_CONNECTION,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_streams_per_connection: usize,
    /// MiB of streamed batches all streams together may buffer.
    #[arg(long, default_value_t = DEFAULT_STREAM_BUFFER_MIB,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub stream_buffer_mib: usize,
    /// Seconds a new connection has to complete its handshake (TLS, then the HTTP/2 preface and
    /// SETTINGS) before it is closed.
    #[arg(long, default_value_t = DEFAULT_HANDSHAKE_TIMEOUT.as_secs(),
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub handshake_timeout_secs: u64,
    /// Seconds a connection with no call open is kept before it is closed.
    #[arg(long, default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs(),
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub idle_timeout_secs: u64,
    /// Seconds between HTTP/2 keepalive pings; a ping unanswered for --keepalive-timeout-secs
    /// closes the connection.
    #[arg(long, default_value_t = DEFAULT_KEEPALIVE_INTERVAL.as_secs(),
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub keepalive_secs: u64,
    /// Seconds a keepalive ping may go unanswered.
    #[arg(long, default_value_t = DEFAULT_KEEPALIVE_TIMEOUT.as_secs(),
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub keepalive_timeout_secs: u64,
    /// Connections open at once; one over it is closed as soon as it is accepted. Lowered at
    /// start to what the process's file-descriptor limit allows.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
    /// MiB of request bodies the REST endpoint may hold buffered at once, all requests together;
    /// a request whose body would pass it is refused with 503 `ServerBusy`.
    #[arg(long, default_value_t = DEFAULT_REST_BODY_BUFFER_MIB,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub rest_body_buffer_mib: usize,
    /// Seconds a REST request's body may take to arrive once its headers have; past it the
    /// request is refused and its connection closed.
    #[arg(long, default_value_t = DEFAULT_BODY_TIMEOUT.as_secs(),
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub body_timeout_secs: u64,
    /// Seconds a SharedKey-signed REST request's date may be from the server's clock (Azure
    /// allows 15 minutes); outside it the request is refused with `AuthenticationFailed`.
    #[arg(long, default_value_t = DEFAULT_MAX_CLOCK_SKEW.as_secs(),
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
    pub max_clock_skew_secs: u64,
    /// Seconds a shutdown waits for open calls (a stream whose reader stopped, say) before closing
    /// their connections; acknowledged writes are durable either way.
    #[arg(long, env = "TRESTLE_SHUTDOWN_GRACE_SECS", default_value_t = DEFAULT_SHUTDOWN_GRACE.as_secs())]
    pub shutdown_grace_secs: u64,
}

/// Parses `--oauth-role NAME=LETTERS`.
fn parse_role(text: &str) -> Result<(String, Permissions), String> {
    let (name, letters) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=LETTERS (such as Orders.Writer=rau)"))?;
    if name.is_empty() {
        return Err(format!("{text:?} names no role"));
    }
    let permissions = Permissions::parse(letters).map_err(|e| e.to_string())?;
    Ok((name.to_owned(), permissions))
}

/// Why the command line's files could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The key file's contents.
    #[error("key file: {0}")]
    Keys(#[from] trestle_proto::access::KeyError),
    /// Flags that do not fit together (given in a configuration file, say, where clap's own
    /// checks do not reach).
    #[error("{0}")]
    Invalid(String),
    /// The OAuth key set (`--oauth-jwks`).
    #[error("--oauth-jwks: {0}")]
    Oauth(#[from] oidc::JwksError),
    /// A file (the key file, a TLS file) could not be read.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Reads and parses a key file (see `trestle-server keygen`).
pub fn load_key_file(
    path: &std::path::Path,
) -> Result<trestle_proto::access::KeyRing, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::File {
        path: path.display().to_string(),
        source,
    })?;
    Ok(trestle_proto::access::KeyRing::parse(&text)?)
}

impl ServeArgs {
    /// Refuses flags that need another one absent. Checked here rather than by clap, which does
    /// not count a value from the configuration file as given.
    fn check_together(&self) -> Result<(), ConfigError> {
        let pairs = [
            (
                self.store_ca_file.is_some(),
                self.store.is_some(),
                "--store-ca-file",
                "--store",
            ),
            (
                self.oauth_jwks.is_some(),
                !self.oauth_issuer.is_empty(),
                "--oauth-jwks",
                "--oauth-issuer",
            ),
            (
                !self.oauth_issuer.is_empty(),
                self.oauth_jwks.is_some(),
                "--oauth-issuer",
                "--oauth-jwks",
            ),
            (
                !self.oauth_audience.is_empty(),
                self.oauth_jwks.is_some(),
                "--oauth-audience",
                "--oauth-jwks",
            ),
            (
                !self.oauth_role.is_empty(),
                self.oauth_jwks.is_some(),
                "--oauth-role",
                "--oauth-jwks",
            ),
            (
                self.tls_cert.is_some(),
                self.tls_key.is_some(),
                "--tls-cert",
                "--tls-key",
            ),
            (
                self.tls_key.is_some(),
                self.tls_cert.is_some(),
                "--tls-key",
                "--tls-cert",
            ),
            (
                self.rest_tls_cert.is_some(),
                self.rest_tls_key.is_some(),
                "--rest-tls-cert",
                "--rest-tls-key",
            ),
            (
                self.rest_tls_key.is_some(),
                self.rest_tls_cert.is_some(),
                "--rest-tls-key",
                "--rest-tls-cert",
            ),
        ];
        match pairs
            .iter()
            .find(|(given, needed, _, _)| *given && !*needed)
        {
            Some((_, _, flag, needs)) => Err(ConfigError::Invalid(format!("{flag} needs {needs}"))),
            None => Ok(()),
        }
    }

    /// The library configuration these arguments describe, with the key and TLS files read.
    pub fn config(&self) -> Result<Config, ConfigError> {
        self.check_together()?;
        let durability = match self.relaxed_flush_ms {
            Some(flush_every_ms) => Durability::Periodic { flush_every_ms },
            None => Durability::Sync,
        };
        let mut authenticator = match &self.key_file {
            Some(path) => Authenticator::with_keys(load_key_file(path)?),
            None => Authenticator::open(),
        };
        if let Some(jwks) = &self.oauth_jwks {
            let audiences = match self.oauth_audience.is_empty() {
                true => oidc::DEFAULT_AUDIENCES.map(str::to_owned).to_vec(),
                false => self.oauth_audience.clone(),
            };
            let mut roles = oidc::azure_roles();
            roles.extend(self.oauth_role.iter().cloned());
            authenticator = authenticator.with_oidc(oidc::Oidc::new(oidc::OidcSettings {
                jwks: oidc::JwksSource::parse(jwks),
                issuers: self.oauth_issuer.clone(),
                audiences,
                roles,
                refresh: Duration::from_secs(self.oauth_refresh_secs),
            })?);
        }
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| ConfigError::File {
                path: path.display().to_string(),
                source,
            })
        };
        let identity = |cert: &Option<PathBuf>, key: &Option<PathBuf>| match (cert, key) {
            (Some(cert), Some(key)) => Ok::<_, ConfigError>(Some(TlsIdentity {
                cert_pem: read(cert)?,
                key_pem: read(key)?,
            })),
            _ => Ok(None),
        };
        let tls = identity(&self.tls_cert, &self.tls_key)?;
        let rest_tls = identity(&self.rest_tls_cert, &self.rest_tls_key)?;
        Ok(Config {
            store: match &self.store {
                Some(url) => StoreConfig::Postgres {
                    url: url.clone(),
                    options: PostgresOptions {
                        pool_size: self.store_pool_size,
                        ca_pem: self.store_ca_file.as_ref().map(read).transpose()?,
                        ..PostgresOptions::default()
                    },
                },
                None => StoreConfig::Embedded {
                    data_dir: self.data_dir.clone(),
                    options: StoreOptions {
                        cache_bytes: self.cache_mib * 1024 * 1024,
                        durability,
                        min_free_bytes: self.min_free_mib * 1024 * 1024,
                        ..StoreOptions::default()
                    },
                },
            },
            authenticator,
            insecure_open: self.insecure_open,
            protect_introspection: self.protect_introspection,
            tls,
            rest_tls,
            health_listen: None,
            metrics_listen: None,
            console_listen: None,
            limits: Limits {
                max_message_bytes: self.max_message_mib * 1024 * 1024,
                max_in_flight: self.max_in_flight,
                max_open_streams: self.max_open_streams,
                max_streams_per_credential: self.max_streams_per_credential,
                work_budget: self.work_budget,
                aggregate_examined_per_call: self.aggregate_examined_per_call,
                idempotency_window_seconds: self.idempotency_window_seconds,
                max_concurrent_streams: self.max_concurrent_streams,
                stream_stall: Duration::from_secs(self.stream_stall_secs),
                max_streams_per_connection: self.max_streams_per_connection,
                stream_buffer_bytes: self.stream_buffer_mib * 1024 * 1024,
                handshake_timeout: Duration::from_secs(self.handshake_timeout_secs),
                idle_timeout: Duration::from_secs(self.idle_timeout_secs),
                keepalive_interval: Duration::from_secs(self.keepalive_secs),
                keepalive_timeout: Duration::from_secs(self.keepalive_timeout_secs),
                max_connections: self.max_connections,
                rest_body_buffer_bytes: self.rest_body_buffer_mib * 1024 * 1024,
                body_timeout: Duration::from_secs(self.body_timeout_secs),
                max_clock_skew: Duration::from_secs(self.max_clock_skew_secs),
            },
            shutdown_grace: Duration::from_secs(self.shutdown_grace_secs),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn scoped_token_key_ranges_may_begin_with_a_hyphen() {
        let args = [
            "trestle-server",
            "token",
            "--key-file",
            "k",
            "--permissions",
            "r",
            "--partition-start",
            "-a",
            "--partition-end",
            "-b",
            "--row-start",
            "-c",
            "--row-end",
            "-d",
        ];
        let Some(Command::Token(token)) = Args::try_parse_from(args).expect("parsed").command
        else {
            panic!("not a token");
        };
        let range = [
            token.partition_start,
            token.partition_end,
            token.row_start,
            token.row_end,
        ];
        assert_eq!(range.map(|key| key.unwrap()), ["-a", "-b", "-c", "-d"]);
    }

    fn serve_args(extra: &[&str]) -> Result<ServeArgs, clap::Error> {
        let args = ["trestle-server"].iter().chain(extra);
        Args::try_parse_from(args).map(|args| args.serve)
    }

    #[test]
    fn oauth_flags_need_an_issuer_and_a_usable_key_set() {
        let dir = tempfile::tempdir().unwrap();
        let jwks = dir.path().join("jwks.json");
        let jwks = jwks.to_str().unwrap();
        std::fs::write(
            jwks,
            r#"{"keys":[{"kty":"RSA","kid":"k","n":"AQAB","e":"AQAB"}]}"#,
        )
        .unwrap();
        let config = |args: &[&str]| serve_args(args).unwrap().config();
        let error = config(&["--oauth-jwks", jwks]).unwrap_err().to_string();
        assert_eq!(error, "--oauth-jwks needs --oauth-issuer");
        let error = config(&["--oauth-issuer", "https://i"])
            .unwrap_err()
            .to_string();
        assert_eq!(error, "--oauth-issuer needs --oauth-jwks");
        let error = serve_args(&[
            "--oauth-jwks",
            jwks,
            "--oauth-issuer",
            "i",
            "--oauth-role",
            "x",
        ])
        .unwrap_err()
        .to_string();
        assert!(error.contains("NAME=LETTERS"), "{error}");
        let error = serve_args(&[
            "--oauth-jwks",
            jwks,
            "--oauth-issuer",
            "i",
            "--oauth-role",
            "x=rz",
        ])
        .unwrap_err()
        .to_string();
        assert!(error.contains("unknown permission letter"), "{error}");
        let args = [
            "--oauth-jwks",
            jwks,
            "--oauth-issuer",
            "i",
            "--oauth-role",
            "Orders.Writer=rau",
        ];
        let config = serve_args(&args).unwrap().config().unwrap();
        assert!(!config.authenticator.is_open());
        std::fs::write(jwks, r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).unwrap();
        let error = serve_args(&args).unwrap().config().unwrap_err().to_string();
        assert!(
            error.contains("--oauth-jwks") && error.contains("no RSA"),
            "{error}"
        );
        let missing = [
            "--oauth-jwks",
            "/nonexistent/jwks.json",
            "--oauth-issuer",
            "i",
        ];
        let error = serve_args(&missing)
            .unwrap()
            .config()
            .unwrap_err()
            .to_string();
        assert!(error.contains("/nonexistent/jwks.json"), "{error}");
    }

    #[test]
    fn a_backup_key_may_begin_with_a_hyphen() {
        let args = ["trestle-server", "backup", "--token", "-6key", "--to", "b"];
        let parsed = Args::try_parse_from(args).expect("parsed");
        assert!(
            matches!(parsed.command, Some(Command::Backup { token: Some(token), .. }) if token == "-6key")
        );
    }
}
