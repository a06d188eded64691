//! Which store to open, and how: the embedded sled store in a data directory, or a PostgreSQL
//! database shared by stateless servers. The one place above both stores that names them.

use std::path::PathBuf;
use std::sync::Arc;

use super::{PostgresOptions, PostgresStore, SledStore, StorageError, Store, StoreOptions};

/// Connections a server holds to its PostgreSQL database by default.
pub const DEFAULT_STORE_POOL_SIZE: usize = 16;

/// The store a server keeps its tables in.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// The embedded sled store in `data_dir` (created if missing).
    Embedded {
        /// The data directory.
        data_dir: PathBuf,
        /// Cache, durability and disk reserve.
        options: StoreOptions,
    },
    /// A PostgreSQL database.
    Postgres {
        /// A libpq connection string or `postgres://` URL.
        url: String,
        /// Connections, TLS and purging.
        options: PostgresOptions,
    },
}

impl StoreConfig {
    /// The embedded store in `data_dir`, with the default options.
    pub fn embedded(data_dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig::Embedded {
            data_dir: data_dir.into(),
            options: StoreOptions::default(),
        }
    }

    /// The database at `url`, with the default options.
    pub fn postgres(url: impl Into<String>) -> StoreConfig {
        StoreConfig::Postgres {
            url: url.into(),
            options: PostgresOptions::default(),
        }
    }

    /// Whether deleted tables are reclaimed in the background (on by default; off only in tests
    /// that observe a table while it is being deleted).
    pub fn set_reclaim_deleted_tables(&mut self, reclaim: bool) {
        match self {
            StoreConfig::Embedded { options, .. } => options.reclaim_deleted_tables = reclaim,
            StoreConfig::Postgres { options, .. } => options.purge_deleted_tables = reclaim,
        }
    }

    /// The store and where it is, for logs: a database URL's password is hidden.
    pub fn describe(&self) -> String {
        match self {
            StoreConfig::Embedded { data_dir, .. } => format!("sled {}", data_dir.display()),
            StoreConfig::Postgres { url, .. } => format!("postgres {}", redact_password(url)),
        }
    }
}

/// Opens the store `config` names (blocking: run it off the async runtime).
pub fn open(config: &StoreConfig) -> Result<Arc<dyn Store>, StorageError> {
    Ok(match config {
        StoreConfig::Embedded { data_dir, options } => {
            Arc::new(SledStore::open(data_dir, options.clone())?)
        }
        StoreConfig::Postgres { url, options } => {
            Arc::new(PostgresStore::open(url, options.clone())?)
        }
    })
}

/// `url` (a `postgres://` URL or libpq's `key=value` form) with any password replaced by `***`.
fn redact_password(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let authority = match authority.rsplit_once('@') {
            Some((user_info, host)) => match user_info.split_once(':') {
                Some((user, _)) => format!("{user}:***@{host}"),
                None => authority.to_owned(),
            },
            None => authority.to_owned(),
        };
        let tail = tail
            .split('&')
            .map(|part| match part.split_once("password=") {
                Some((before, _)) => format!("{before}password=***"),
                None => part.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&");
        return format!("{scheme}://{authority}{tail}");
    }
    url.split_whitespace()
        .map(|pair| {
            if pair.starts_with("password=") {
                "password=***"
            } else {
                pair
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::redact_password;

    #[test]
    fn logged_database_urls_hide_the_password() {
        assert_eq!(
            redact_password("postgres://trestle:secret@db:5432/trestle?sslmode=require"),
            "postgres://trestle:***@db:5432/trestle?sslmode=require"
        );
        assert_eq!(
            redact_password("postgres://trestle@db/trestle?password=secret"),
            "postgres://trestle@db/trestle?password=***"
        );
        assert_eq!(
            redact_password("host=db user=trestle password=secret dbname=trestle"),
            "host=db user=trestle password=*** dbname=trestle"
        );
    }
}
