//! The `trestle-server` binary: parse flags, set up logging, serve until SIGINT or SIGTERM.

use clap::Parser;
use tracing_subscriber::EnvFilter;
use trestle_server::config::LogFormat;
use trestle_server::Args;

/// glibc's allocator spent about 40% of the server's CPU on 100-insert transactions (profiled with
/// `perf`); mimalloc's thread-local free lists remove most of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Threads for blocking storage work. Writes wait for durability asynchronously, so blocking tasks
/// are short; a small pool keeps context switches (and malloc arenas, hence RSS) down on a small
/// machine.
const MAX_BLOCKING_THREADS: usize = 32;

fn main() -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> std::process::ExitCode {
    let args = Args::parse();
    let filter = EnvFilter::try_new(&args.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    match args.log_format {
        LogFormat::Text => subscriber.init(),
        LogFormat::Json => subscriber.json().init(),
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(addr = %args.listen, %error, "cannot listen");
            return std::process::ExitCode::FAILURE;
        }
    };
    match trestle_server::serve(listener, args.config(), shutdown_signal()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "server failed");
            std::process::ExitCode::FAILURE
        }
    }
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
