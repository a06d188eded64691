//! Where the provider's key set is read from: a file (mounted beside the server, re-read on
//! refresh) or the provider's `jwks_uri` over HTTPS. A fetch is bounded in time and size.

use std::path::PathBuf;
use std::time::Duration;

use super::jwks::{JwksError, KeySet};

/// The largest key set read (Entra ID's is about 10 KiB).
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// A key set's location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// A JWKS document on disk.
    File(PathBuf),
    /// An `http://` or `https://` URL serving one.
    Url(String),
}

impl JwksSource {
    /// A URL if `text` starts with a scheme, else a path.
    pub fn parse(text: &str) -> JwksSource {
        if text.starts_with("https://") || text.starts_with("http://") {
            JwksSource::Url(text.to_owned())
        } else {
            JwksSource::File(PathBuf::from(text))
        }
    }
}

impl std::fmt::Display for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JwksSource::File(path) => write!(f, "{}", path.display()),
            JwksSource::Url(url) => f.write_str(url),
        }
    }
}

/// Reads the key set at `source`.
pub(super) async fn load(source: &JwksSource) -> Result<KeySet, JwksError> {
    match source {
        JwksSource::File(path) => {
            let path = path.clone();
            tokio::task::spawn_blocking(move || read_file(&path))
                .await
                .map_err(|e| JwksError::at(source, e.to_string()))?
        }
        JwksSource::Url(url) => fetch(url)
            .await
            .map_err(|why| JwksError::at(source, why))
            .and_then(|bytes| KeySet::parse(&bytes)),
    }
}

/// Reads and parses the key file at `path`.
pub(super) fn read_file(path: &std::path::Path) -> Result<KeySet, JwksError> {
    let source = JwksSource::File(path.to_owned());
    let metadata = std::fs::metadata(path).map_err(|e| JwksError::at(&source, e.to_string()))?;
    if metadata.len() > MAX_JWKS_BYTES as u64 {
        return Err(JwksError::at(
            &source,
            format!("is over {MAX_JWKS_BYTES} bytes"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| JwksError::at(&source, e.to_string()))?;
    KeySet::parse(&bytes)
}

async fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let client = reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let mut response = client.get(url).send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(format!("is over {MAX_JWKS_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
