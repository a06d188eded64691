//! Server configuration: the clap arguments of the binary, and the plain `Config` the library
//! takes (so tests build one without clap).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::storage::{Durability, StoreOptions};

/// Where the server listens by default: loopback only; opening wider is an explicit choice.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// Largest request message the server decodes. Above the 4 MiB transaction limit, so an over-size
/// transaction gets `RequestBodyTooLarge` rather than a transport error.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// What the library needs to serve.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data directory (created if missing).
    pub data_dir: PathBuf,
    /// Store settings.
    pub store: StoreOptions,
}

impl Config {
    /// Defaults for a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Config {
        Config {
            data_dir: data_dir.into(),
            store: StoreOptions::default(),
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

/// The `trestle-server` command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "trestle-server",
    version,
    about = "Trestle: a durable partitioned entity store with Azure Table semantics, over gRPC"
)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, env = "TRESTLE_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Directory holding the data (created if missing).
    #[arg(long, env = "TRESTLE_DATA_DIR", default_value = "./trestle-data")]
    pub data_dir: PathBuf,
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
    /// Bound of the page cache, in MiB.
    #[arg(long, env = "TRESTLE_CACHE_MIB", default_value_t = 64)]
    pub cache_mib: u64,
}

impl Args {
    /// The library configuration these arguments describe.
    pub fn config(&self) -> Config {
        let durability = match self.relaxed_flush_ms {
            Some(flush_every_ms) => Durability::Periodic { flush_every_ms },
            None => Durability::Sync,
        };
        Config {
            data_dir: self.data_dir.clone(),
            store: StoreOptions {
                cache_bytes: self.cache_mib * 1024 * 1024,
                durability,
                ..StoreOptions::default()
            },
        }
    }
}
