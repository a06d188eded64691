//! Read-modify-write under an ETag, retried while other writers get there first:
//! [`retry_on_conflict`] for any optimistic update, and [`TableClient::modify`] for the common
//! case (one entity read, changed by a closure, written back under the ETag it was read with).

use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::entity::{Entity, EntityKey, IfMatch};
use crate::error::{Error, ErrorCode, Result};
use crate::table::TableClient;

/// How attempts that lost to another writer are retried: at most `max_attempts` in all, waiting
/// between them a random time up to a backoff that doubles from `first_backoff` to
/// `max_backoff`.
///
/// ```
/// use std::time::Duration;
/// let patient = trestle_client::ConflictRetry::default()
///     .with_max_attempts(50)
///     .with_backoff(Duration::from_millis(2), Duration::from_millis(500));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct ConflictRetry {
    max_attempts: u32,
    first_backoff: Duration,
    max_backoff: Duration,
}

impl Default for ConflictRetry {
    /// 20 attempts, backing off from 1 ms to 100 ms.
    fn default() -> ConflictRetry {
        ConflictRetry {
            max_attempts: 20,
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(100),
        }
    }
}

impl ConflictRetry {
    /// At most `attempts` attempts in all (at least 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> ConflictRetry {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Backoff from `first` doubling up to `max`.
    pub fn with_backoff(mut self, first: Duration, max: Duration) -> ConflictRetry {
        self.first_backoff = first;
        self.max_backoff = max.max(first);
        self
    }
}

/// Whether `error` means another writer got there first: the ETag no longer matches, or the key
/// was inserted meanwhile.
pub fn is_conflict(error: &Error) -> bool {
    error.is_precondition_failed() || error.code() == Some(ErrorCode::EntityAlreadyExists)
}

/// The state of one retried operation: attempts made, and the next backoff.
#[derive(Debug)]
struct Backoff {
    policy: ConflictRetry,
    attempts: u32,
    next: Duration,
}

impl Backoff {
    fn new(policy: ConflictRetry) -> Backoff {
        Backoff {
            policy,
            attempts: 0,
            next: policy.first_backoff,
        }
    }

    /// After an attempt that failed with `error`: waits and says `true` if it may be tried again.
    async fn retry_after(&mut self, error: &Error) -> bool {
        self.attempts += 1;
        if !is_conflict(error) || self.attempts >= self.policy.max_attempts {
            return false;
        }
        // Full jitter: writers that collided do not collide again in step.
        let fraction = (uuid::Uuid::new_v4().as_u128() % 1_000) as u32;
        tokio::time::sleep(self.next * fraction / 1_000).await;
        self.next = (self.next * 2).min(self.policy.max_backoff);
        true
    }
}

/// Runs `attempt` until it succeeds, fails for another reason than a conflict ([`is_conflict`]),
/// or `policy` allows no more attempts (then its last error). Each attempt must read what it
/// changes afresh: an ETag from an earlier attempt is stale.
///
/// The future is `Send` whenever `attempt` and its futures are, so it can be spawned:
///
/// ```no_run
/// use trestle_client::{retry_on_conflict, ConflictRetry, IfMatch, Properties, TableClient};
///
/// fn count_one(authors: TableClient, author: String) -> tokio::task::JoinHandle<trestle_client::Result<()>> {
///     tokio::spawn(retry_on_conflict(ConflictRetry::default(), move || {
///         let (authors, author) = (authors.clone(), author.clone());
///         async move {
///             let mut row = authors.get::<Properties>(("authors", author.as_str())).await?;
///             let posts = row.value.get_i64("Posts").unwrap_or(0);
///             row.value.set("Posts", posts + 1);
///             authors.update(("authors", author.as_str()), &row.value, IfMatch::Tag(row.etag)).await?;
///             Ok(())
///         }
///     }))
/// }
/// ```
pub async fn retry_on_conflict<T, F, Fut>(policy: ConflictRetry, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut backoff = Backoff::new(policy);
    loop {
        match attempt().await {
            Err(error) if backoff.retry_after(&error).await => continue,
            outcome => return outcome,
        }
    }
}

impl TableClient {
    /// Reads the entity, applies `change` to its value, and merges it back under the ETag it was
    /// read with; when another writer changed it meanwhile, does it all again, with the default
    /// [`ConflictRetry`]. Returns the entity as written (with its new ETag). `change` may run
    /// several times, on a fresh copy each time.
    ///
    /// The write is a merge, so `T` may be a partial view of the entity: properties it does not
    /// name are kept (a row-kind property, say). A field set to `None` is therefore left as it
    /// was, not removed; to remove properties, update the whole entity under its ETag inside
    /// [`retry_on_conflict`].
    ///
    /// ```no_run
    /// # async fn example(posts: trestle_client::TableClient) -> trestle_client::Result<()> {
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Post { title: String, likes: i64 }
    ///
    /// let liked = posts.modify::<Post, _>(("blog", "post-1"), |post| post.likes += 1).await?;
    /// println!("{} likes", liked.value.likes);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// `is_not_found()` if there is no such entity; `is_precondition_failed()` if every attempt
    /// lost to another writer.
    pub async fn modify<T, F>(&self, key: impl Into<EntityKey>, change: F) -> Result<Entity<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(&mut T),
    {
        self.modify_with(ConflictRetry::default(), key, change)
            .await
    }

    /// [`TableClient::modify`] with its own retry policy.
    pub async fn modify_with<T, F>(
        &self,
        policy: ConflictRetry,
        key: impl Into<EntityKey>,
        mut change: F,
    ) -> Result<Entity<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(&mut T),
    {
        let key = key.into();
        let mut backoff = Backoff::new(policy);
        loop {
            let mut entity = self.get::<T>(key.clone()).await?;
            change(&mut entity.value);
            let written = self
                .merge(
                    key.clone(),
                    &entity.value,
                    IfMatch::Tag(entity.etag.clone()),
                )
                .await;
            match written {
                Ok(etag) => {
                    entity.etag = etag;
                    return Ok(entity);
                }
                Err(error) if backoff.retry_after(&error).await => continue,
                Err(error) => return Err(error),
            }
        }
    }
}
