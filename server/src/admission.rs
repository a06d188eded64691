//! Admission classes: the pools a request's permit comes from, whichever protocol it came by.
//!
//! - **Short** calls (point reads, writes, transactions, query pages, counts, every REST request)
//!   take one of `--max-in-flight` permits for as long as they run.
//! - **Long-lived** calls (change-feed readers, following or not, streamed scans, backups) are let
//!   in with a short permit, for their credential to be checked, and then hold one of
//!   `--max-open-streams` permits of a pool of their own instead, at most
//!   `--max-streams-per-credential` of them per credential. So no number of streams takes the
//!   permits that short calls need (a caught-up follower may be open for days), and no one
//!   credential takes every stream.
//!
//! Whatever adds a long-lived call admits it here ([`Streams::admit`]); its other bounds (bytes
//! buffered, stall, per connection) are the stream framing's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Who a long-lived call is counted against: the account (the account key, or open mode) or one
/// token's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Credential(pub u64);

/// Why a long-lived call was turned away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamRefusal {
    /// Every stream permit is held.
    #[error("the server is at its limit of {0} open streams (feed readers, streamed scans, backups); retry with backoff")]
    Full(usize),
    /// The credential holds its share.
    #[error("this credential has {0} streams open (feed readers, streamed scans, backups), its limit; close one or retry later")]
    CredentialFull(usize),
}

/// The pool of long-lived calls, and what each credential holds of it.
#[derive(Debug)]
pub struct Streams {
    permits: Arc<Semaphore>,
    max_open: usize,
    per_credential: usize,
    held: Mutex<HashMap<Credential, usize>>,
}

/// One long-lived call let in: its permit and its place in its credential's share, both given
/// back when it drops.
#[derive(Debug)]
pub struct StreamPermit {
    streams: Arc<Streams>,
    credential: Credential,
    _permit: OwnedSemaphorePermit,
}

impl Streams {
    /// A pool of `max_open` long-lived calls, `per_credential` of them at most for one credential.
    pub fn new(max_open: usize, per_credential: usize) -> Arc<Streams> {
        Arc::new(Streams {
            permits: Arc::new(Semaphore::new(max_open)),
            max_open,
            per_credential,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// Lets one more long-lived call of `credential` in.
    pub fn admit(self: &Arc<Self>, credential: Credential) -> Result<StreamPermit, StreamRefusal> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.get(&credential).copied().unwrap_or(0) >= self.per_credential {
            return Err(StreamRefusal::CredentialFull(self.per_credential));
        }
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| StreamRefusal::Full(self.max_open))?;
        *held.entry(credential).or_default() += 1;
        Ok(StreamPermit {
            streams: self.clone(),
            credential,
            _permit: permit,
        })
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut held = self
            .streams
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.credential) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.credential);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_holds_its_share_and_the_pool_its_cap() {
        let streams = Streams::new(3, 2);
        let (a, b) = (Credential(1), Credential(2));
        let first = streams.admit(a).unwrap();
        let _second = streams.admit(a).unwrap();
        assert_eq!(
            streams.admit(a).unwrap_err(),
            StreamRefusal::CredentialFull(2)
        );
        let _third = streams.admit(b).unwrap();
        assert_eq!(streams.admit(b).unwrap_err(), StreamRefusal::Full(3));
        drop(first);
        let _fourth = streams.admit(b).unwrap();
        assert_eq!(streams.admit(a).unwrap_err(), StreamRefusal::Full(3));
    }
}
