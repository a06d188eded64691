//! The `trestle-server` binary: parse flags, set up logging, serve until SIGINT or SIGTERM; or
//! run one of its tools (`config`, `probe`, `keygen`, `token`, `connection-string`, `backup`,
//! `restore`).

use std::io::Write;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;
use trestle_proto::access::{self, Grant, KeyBounds, KeyRing, Permissions};
use trestle_server::config::{file, Command, LogFormat, ServeArgs, TokenArgs};
use trestle_server::{backup, traces, Args};

/// glibc's allocator spent about 40% of the server's CPU on 100-insert transactions (profiled with
/// `perf`); mimalloc's thread-local free lists remove most of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Threads for blocking storage work. Writes wait for durability asynchronously, so blocking tasks
/// are short; a small pool keeps context switches (and malloc arenas, hence RSS) down on a small
/// machine.
const MAX_BLOCKING_THREADS: usize = 32;

fn main() -> ExitCode {
    let args = match parse(std::env::args_os().collect()) {
        Ok((args, _)) => args,
        Err(code) => return code,
    };
    let outcome = match args.command {
        Some(Command::Config { flags }) => match parse(flags_of_config(flags)) {
            Ok((args, effective)) => print_config(&args.serve, &effective),
            Err(code) => return code,
        },
        Some(Command::Probe { url }) => probe(&url),
        Some(Command::Keygen { out }) => keygen(&out),
        Some(Command::Token(token_args)) => token(&token_args),
        Some(Command::ConnectionString { key_file, endpoint }) => {
            connection_string(&key_file, &endpoint)
        }
        Some(Command::Backup {
            endpoint,
            token,
            ca_file,
            to,
        }) => back_up(&endpoint, token.as_deref(), ca_file.as_deref(), &to),
        Some(Command::Restore { from, data_dir }) => restore(&from, &data_dir),
        None => return serve(args.serve),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("trestle-server: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The command line `argv` with its configuration file; or, when it is not valid, the exit
/// code after saying why.
fn parse(argv: Vec<std::ffi::OsString>) -> Result<(Args, file::Effective), ExitCode> {
    match file::parse(argv) {
        Ok(parsed) => Ok(parsed),
        Err(file::ParseError::Flags(error)) => error.exit(),
        Err(file::ParseError::File(error)) => {
            eprintln!("trestle-server: {error}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// The command line `config`'s `flags` (serve flags and `--config`) stand for.
fn flags_of_config(flags: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    std::iter::once("trestle-server".into())
        .chain(flags)
        .collect()
}

/// Prints the configuration `serve` resolves to, once it is known to load.
fn print_config(serve: &ServeArgs, effective: &file::Effective) -> Result<(), String> {
    serve.config().map_err(|e| e.to_string())?;
    write!(std::io::stdout(), "{}", effective.to_toml()).map_err(|e| e.to_string())
}

/// How long `probe` waits for the server to connect and answer.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks the probe at `url` (`http://host:port/path`): `Ok` on `200`, else what it answered.
fn probe(url: &str) -> Result<(), String> {
    use std::io::Read;
    use std::net::ToSocketAddrs;
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: a probe URL is http://host:port/path"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let address = authority
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority}: no address"))?;
    let mut socket = std::net::TcpStream::connect_timeout(&address, PROBE_TIMEOUT)
        .map_err(|e| format!("{address}: {e}"))?;
    socket
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    socket
        .write_all(request.as_bytes())
        .map_err(|e| format!("{address}: {e}"))?;
    let mut answer = Vec::new();
    let _ = socket.take(4096).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or("no answer");
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").trim();
        Err(format!("{url}: {status} {body}"))
    }
}

/// Writes a new key file, readable by its owner only, never over an existing file.
fn keygen(out: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let keys = KeyRing::generate().map_err(|e| e.to_string())?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    file.write_all(keys.to_file_text().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!("wrote key {} to {}", keys.signing_key().id(), out.display());
    Ok(())
}

/// Prints a token signed with the key file's first key.
fn token(args: &TokenArgs) -> Result<(), String> {
    let keys = trestle_server::config::load_key_file(&args.key_file).map_err(|e| e.to_string())?;
    let permissions = Permissions::parse(&args.permissions).map_err(|e| e.to_string())?;
    let mut grant = Grant::new(permissions, args.ttl);
    grant.table = args.table.clone();
    grant.partitions = KeyBounds {
        start: args.partition_start.clone(),
        end: args.partition_end.clone(),
    };
    grant.rows = KeyBounds {
        start: args.row_start.clone(),
        end: args.row_end.clone(),
    };
    let token = access::mint(keys.signing_key(), &grant);
    writeln!(std::io::stdout(), "{token}").map_err(|e| e.to_string())
}

/// Prints the REST endpoint's Azure connection string with the key file's first key.
fn connection_string(key_file: &std::path::Path, endpoint: &str) -> Result<(), String> {
    let keys = trestle_server::config::load_key_file(key_file).map_err(|e| e.to_string())?;
    let key = keys.signing_key().secret_base64();
    let text = trestle_server::rest::connection_string(endpoint, &key);
    writeln!(std::io::stdout(), "{text}").map_err(|e| e.to_string())
}

/// Writes a backup of the server at `endpoint` into `to`.
fn back_up(
    endpoint: &str,
    token: Option<&str>,
    ca_file: Option<&std::path::Path>,
    to: &std::path::Path,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let summary = runtime
        .block_on(backup::back_up(endpoint, token, ca_file, to))
        .map_err(|e| e.to_string())?;
    eprintln!("backed up {summary} into {}", to.display());
    Ok(())
}

/// Builds the data directory `data_dir` from the backup in `from`.
fn restore(from: &std::path::Path, data_dir: &std::path::Path) -> Result<(), String> {
    let summary = backup::restore(from, data_dir).map_err(|e| e.to_string())?;
    eprintln!("restored {summary} into {}", data_dir.display());
    Ok(())
}

fn serve(args: ServeArgs) -> ExitCode {
    prefer_small_pages();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run(args)),
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Turns transparent huge pages off for this process. mimalloc asks for them on its arenas, and
/// the kernel then backs every touched 2 MiB range in full: 45 MiB of RSS on an idle server (8 MiB
/// without), about 50 MiB more with 1,000,000 entities loaded, and no faster in `trestle-bench`.
/// Best effort: a kernel without the setting leaves things as they were.
fn prefer_small_pages() {
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

async fn run(args: ServeArgs) -> ExitCode {
    let exporting = match set_up_logs_and_traces(&args) {
        Ok(exporting) => exporting,
        Err(error) => {
            tracing::error!(%error, "cannot export traces");
            return ExitCode::FAILURE;
        }
    };
    let served = serve_until_stopped(args).await;
    if let Some(exporting) = exporting {
        let _ = tokio::task::spawn_blocking(move || exporting.shutdown()).await;
    }
    served
}

/// The log (`--log-level`, `--log-format`) and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, the
/// export of the request spans ([`traces`]): the log never shows those spans, and without the
/// variable nothing makes them.
fn set_up_logs_and_traces(args: &ServeArgs) -> Result<Option<traces::Exporting>, String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let quiet_spans = format!("{}=off", traces::TARGET);
    let filter = EnvFilter::try_new(format!("{},{quiet_spans}", args.log_level))
        .unwrap_or_else(|_| EnvFilter::new(format!("info,{quiet_spans}")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let log = match args.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_filter(filter)
            .boxed(),
    };
    let subscriber = tracing_subscriber::registry().with(log);
    match traces::otlp_layer() {
        Ok(Some((export, exporting))) => {
            subscriber.with(export).init();
            let endpoint = std::env::var(traces::ENDPOINT_VARIABLE).unwrap_or_default();
            tracing::info!(%endpoint, "exporting traces over OTLP");
            Ok(Some(exporting))
        }
        Ok(None) => {
            subscriber.init();
            Ok(None)
        }
        Err(error) => {
            subscriber.init();
            Err(error)
        }
    }
}

async fn serve_until_stopped(args: ServeArgs) -> ExitCode {
    let mut config = match args.config() {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(%error, "cannot load the configuration");
            return ExitCode::FAILURE;
        }
    };
    if let Some(descriptors) = raise_descriptor_limit() {
        let affordable = usize::try_from(descriptors.saturating_sub(DESCRIPTORS_KEPT_FOR_STORE))
            .unwrap_or(usize::MAX)
            .max(1);
        if config.limits.max_connections > affordable {
            tracing::warn!(
                requested = config.limits.max_connections,
                allowed = affordable,
                "--max-connections is more than the file-descriptor limit allows; lowered"
            );
            config.limits.max_connections = affordable;
        }
    }
    if let Err(error) = trestle_server::check_exposure(args.listen, &config) {
        tracing::error!(%error, "not serving");
        return ExitCode::FAILURE;
    }
    if let Some(metrics_addr) = args.metrics_listen {
        match std::net::TcpListener::bind(metrics_addr) {
            Ok(listener) => config.metrics_listen = Some(std::sync::Arc::new(listener)),
            Err(error) => {
                tracing::error!(addr = %metrics_addr, %error, "cannot listen for metrics");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(health_addr) = args.health_listen {
        match std::net::TcpListener::bind(health_addr) {
            Ok(listener) => config.health_listen = Some(std::sync::Arc::new(listener)),
            Err(error) => {
                tracing::error!(addr = %health_addr, %error, "cannot listen for the probes");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(console_addr) = args.console_listen {
        if let Err(error) = trestle_server::check_exposure(console_addr, &config) {
            tracing::error!(%error, "not serving");
            return ExitCode::FAILURE;
        }
        match std::net::TcpListener::bind(console_addr) {
            Ok(listener) => config.console_listen = Some(std::sync::Arc::new(listener)),
            Err(error) => {
                tracing::error!(addr = %console_addr, %error, "cannot listen for the console");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut rest = None;
    if let Some(rest_addr) = args.rest_listen {
        if let Err(error) = trestle_server::check_exposure(rest_addr, &config) {
            tracing::error!(%error, "not serving");
            return ExitCode::FAILURE;
        }
        match std::net::TcpListener::bind(rest_addr) {
            Ok(listener) => rest = Some(listener),
            Err(error) => {
                tracing::error!(addr = %rest_addr, %error, "cannot listen for REST");
                return ExitCode::FAILURE;
            }
        }
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(addr = %args.listen, %error, "cannot listen");
            return ExitCode::FAILURE;
        }
    };
    let listeners = trestle_server::Listeners {
        grpc: listener,
        rest,
    };
    match trestle_server::serve(listeners, config, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "server failed");
            ExitCode::FAILURE
        }
    }
}

/// File descriptors left for the store, logs and listener when connections are capped to fit the
/// process's limit.
const DESCRIPTORS_KEPT_FOR_STORE: u64 = 256;

/// Raises the soft limit on open file descriptors to the hard limit (a common soft limit of 1,024
/// would let about a thousand idle sockets lock every new client out), logs both, and returns the
/// soft limit now in force (`None` if unlimited).
fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let was = limit.current;
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(%error, "cannot raise the file-descriptor limit");
        }
    }
    let now = getrlimit(Resource::Nofile);
    tracing::info!(
        soft_was = ?was,
        soft = ?now.current,
        hard = ?now.maximum,
        "file-descriptor limit"
    );
    now.current
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutdown requested");
}
