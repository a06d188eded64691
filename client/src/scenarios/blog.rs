//! A blog: each author's posts and their comments in the author's partition, one typed stream for
//! both row kinds, newest first; the author's post count kept exact by transactions retried on
//! conflict; each post's comment count and its 3 most recent comments (embedded in the post, a
//! bounded array as the Cosmos DB guide models it) kept by a patch in the comment's own
//! transaction, never conflicting; a post deleted with its comments atomically.
//!
//! Row keys: the author's profile is `profile`; a post is `post_<log-tail id>` (newest first); its
//! comments follow it as `post_<id>_comment_<time-ordered id>` (oldest first), so one prefix scan
//! reads a post with its comments, and the posts of a partition come newest first.

use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};

use super::{scenario_retry, wrong};
use crate::keys::{compound, compound_prefix, log_tail_id, time_ordered_id};
use crate::{retry_on_conflict, Entity, Filter, Patch, Result, TableClient};

/// The author's profile row.
const PROFILE: &str = "profile";

/// Every row of an author's partition, told apart by its `Kind` property.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Kind")]
pub enum Row {
    /// The author's profile, with an exact count of their posts.
    Profile(Profile),
    /// A post.
    Post(Post),
    /// A comment on a post.
    Comment(Comment),
}

/// An author's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The author's display name.
    pub name: String,
    /// How many posts the author has, exactly.
    pub posts: i64,
}

/// A post.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Post {
    /// The title.
    pub title: String,
    /// The text.
    pub body: String,
    /// Likes.
    pub likes: i64,
    /// How many comments the post has, exactly.
    pub comments: i64,
    /// Its most recent comments, oldest first, at most [`RECENT_COMMENTS`]: shown with the post
    /// without reading the comment rows.
    #[serde(default)]
    pub recent_comments: Vec<Comment>,
}

/// How many of its most recent comments a post embeds.
pub const RECENT_COMMENTS: u32 = 3;

/// A comment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comment {
    /// Who wrote it.
    pub author: String,
    /// What they wrote.
    pub text: String,
}

/// The profile's count, merged on its own.
#[derive(Serialize)]
struct PostCount {
    posts: i64,
}

/// The blog, over one table.
#[derive(Debug, Clone)]
pub struct Blog {
    table: TableClient,
}

impl Blog {
    /// The blog in `table`.
    pub fn new(table: TableClient) -> Blog {
        Blog { table }
    }

    /// Creates the table unless it exists.
    pub async fn setup(&self) -> Result<()> {
        self.table.create_if_not_exists().await
    }

    /// Adds an author with no posts.
    pub async fn add_author(&self, author: &str, name: &str) -> Result<()> {
        let profile = Row::Profile(Profile {
            name: name.into(),
            posts: 0,
        });
        self.table.insert((author, PROFILE), &profile).await?;
        Ok(())
    }

    /// The author's profile.
    pub async fn profile(&self, author: &str) -> Result<Profile> {
        match self.table.get::<Row>((author, PROFILE)).await?.value {
            Row::Profile(profile) => Ok(profile),
            other => Err(crate::Error::new(
                crate::ErrorKind::Mapping,
                format!("the profile row of {author} holds {other:?}"),
            )),
        }
    }

    /// Publishes a post: the post and the author's count in one transaction, conditional on the
    /// profile's ETag and retried on conflict. Returns the post's id.
    pub async fn publish(&self, author: &str, title: &str, body: &str) -> Result<String> {
        let id = log_tail_id();
        let post = Row::Post(Post {
            title: title.into(),
            body: body.into(),
            likes: 0,
            comments: 0,
            recent_comments: Vec::new(),
        });
        let (post, id_ref) = (&post, id.as_str());
        retry_on_conflict(scenario_retry(), move || async move {
            let profile = self.table.get::<Profile>((author, PROFILE)).await?;
            let mut tx = self.table.transaction(author);
            let posts = PostCount {
                posts: profile.value.posts + 1,
            };
            tx.merge(PROFILE, &posts, &profile.etag)?;
            tx.insert(post_row(id_ref), post)?;
            tx.commit().await?;
            Ok(())
        })
        .await?;
        Ok(id)
    }

    /// Comments on a post: the comment row, and a patch of the post that counts it and appends
    /// it to the post's recent comments (keeping the last [`RECENT_COMMENTS`]), in one
    /// transaction. The patch applies to the post as it stands when the transaction commits, so
    /// concurrent commenters never conflict. The future is `Send`: spawn as many as you like.
    pub async fn comment(&self, author: &str, post_id: &str, comment: Comment) -> Result<()> {
        let row = compound(&["post", post_id, "comment", &time_ordered_id()]);
        let count_and_embed = Patch::new()
            .increment("comments", 1i64)
            .append("recent_comments", &comment)
            .keep_last(RECENT_COMMENTS);
        let mut tx = self.table.transaction(author);
        tx.insert(row, &Row::Comment(comment))?;
        tx.patch(post_row(post_id), &count_and_embed)?;
        tx.commit().await?;
        Ok(())
    }

    /// Likes a post: read, change and write back under the ETag (retried on conflict).
    pub async fn like(&self, author: &str, post_id: &str) -> Result<i64> {
        let liked = self
            .table
            .modify::<Post, _>((author, post_row(post_id)), |post| post.likes += 1)
            .await?;
        Ok(liked.value.likes)
    }

    /// A post and its comments, in one typed stream of the partition's rows.
    pub async fn post_with_comments(
        &self,
        author: &str,
        post_id: &str,
    ) -> Result<(Entity<Post>, Vec<Comment>)> {
        let mut rows = self
            .table
            .query::<Row>()
            .partition(author)
            .row_key_prefix(post_row(post_id))
            .stream();
        let mut post = None;
        let mut comments = Vec::new();
        while let Some(row) = rows.try_next().await? {
            match row.value {
                Row::Post(value) => {
                    post = Some(Entity {
                        key: row.key,
                        etag: row.etag,
                        timestamp: row.timestamp,
                        value,
                    });
                }
                Row::Comment(comment) => comments.push(comment),
                Row::Profile(_) => {}
            }
        }
        let post = post.ok_or_else(|| {
            crate::Error::new(
                crate::ErrorKind::NotFound,
                format!("post {post_id} of {author} does not exist"),
            )
        })?;
        Ok((post, comments))
    }

    /// The author's `n` newest posts, newest first (comments left out by a filter on `Kind`).
    pub async fn recent(&self, author: &str, n: usize) -> Result<Vec<Entity<Post>>> {
        let posts = self
            .table
            .query::<Post>()
            .partition(author)
            .row_key_prefix(compound_prefix(&["post"]))
            .filter(Filter::eq("Kind", "Post"))
            .page_size(n.clamp(1, 1000) as u32)
            .page()
            .await?;
        Ok(posts.items.into_iter().take(n).collect())
    }

    /// The author's posts with at least `likes` likes: a typed filter, whose literal takes the
    /// field's own type (`likes ge 10L`, `likes` being an `i64`).
    pub async fn popular(&self, author: &str, likes: u32) -> Result<Vec<Entity<Post>>> {
        self.table
            .query::<Post>()
            .partition(author)
            .filter(Filter::eq("Kind", "Post").and(Filter::field::<Post>("likes").ge(likes)))
            .all()
            .await
    }

    /// Deletes a post with all its comments and lowers the author's count, in one transaction
    /// (at most 98 comments, so that it fits one), retried on conflict.
    pub async fn delete_post(&self, author: &str, post_id: &str) -> Result<()> {
        retry_on_conflict(scenario_retry(), move || async move {
            let profile = self.table.get::<Profile>((author, PROFILE)).await?;
            let rows = self
                .table
                .entities()
                .partition(author)
                .row_key_prefix(post_row(post_id))
                .select(["Kind"])
                .all()
                .await?;
            let mut tx = self.table.transaction(author);
            let posts = PostCount {
                posts: profile.value.posts - 1,
            };
            tx.merge(PROFILE, &posts, &profile.etag)?;
            for row in rows {
                tx.delete(row.key, row.etag)?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }
}

/// A post's row key.
fn post_row(post_id: &str) -> String {
    compound(&["post", post_id])
}

/// 20 readers comment on Ada's post `post_id` at once (each spawned on the runtime); checks the
/// post's count and its embedded recent comments, and says what it found.
async fn comment_at_once(blog: &Blog, post_id: &str) -> Result<String> {
    let commenters: Vec<_> = (0..20)
        .map(|n| {
            let (blog, post) = (blog.clone(), post_id.to_owned());
            tokio::spawn(async move {
                let comment = Comment {
                    author: format!("reader-{n}"),
                    text: format!("comment {n}"),
                };
                blog.comment("ada", &post, comment).await
            })
        })
        .collect();
    for commenter in commenters {
        commenter
            .await
            .map_err(|error| wrong(format!("a commenter failed: {error}")))??;
    }
    let (post, comments) = blog.post_with_comments("ada", post_id).await?;
    let embedded = &post.value.recent_comments;
    if post.value.comments != 20 || comments.len() != 20 || embedded.len() != 3 {
        return Err(wrong(format!(
            "20 comments written, the post counts {}, holds {} and embeds {}",
            post.value.comments,
            comments.len(),
            embedded.len()
        )));
    }
    Ok(format!(
        "20 concurrent commenters: the post counts {} comments, holds {} and embeds the {} most \
         recent ({})",
        post.value.comments,
        comments.len(),
        embedded.len(),
        embedded
            .iter()
            .map(|c| c.author.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The whole scenario on `blog`, as the `blog` example runs it: an author, three posts, 20
/// commenters at once on one post (each spawned on the runtime), likes, the newest posts, a typed
/// filter, and a post deleted with its comments. Checks every count on the way; returns what it
/// did, a line per step.
///
/// # Errors
/// A request's error, or `Internal` if a count is not exact.
pub async fn tour(blog: &Blog) -> Result<Vec<String>> {
    let mut report = Vec::new();
    blog.setup().await?;
    blog.add_author("ada", "Ada Lovelace").await?;
    let first = blog
        .publish("ada", "Notes", "On the Analytical Engine")
        .await?;
    let second = blog
        .publish("ada", "Bernoulli", "Numbers, step by step")
        .await?;
    let third = blog
        .publish("ada", "Poetical science", "Imagination")
        .await?;
    report.push(format!("published 3 posts: {first}, {second}, {third}"));

    report.push(comment_at_once(blog, &second).await?);

    for _ in 0..12 {
        blog.like("ada", &second).await?;
    }
    blog.like("ada", &first).await?;
    let recent = blog.recent("ada", 2).await?;
    let titles: Vec<_> = recent.iter().map(|p| p.value.title.as_str()).collect();
    report.push(format!("the 2 newest posts: {titles:?}"));
    let popular = blog.popular("ada", 10).await?;
    let titles: Vec<_> = popular.iter().map(|p| p.value.title.as_str()).collect();
    report.push(format!("posts with 10 likes or more: {titles:?}"));

    blog.delete_post("ada", &second).await?;
    let profile = blog.profile("ada").await?;
    let left = blog
        .table
        .entities()
        .partition("ada")
        .row_key_prefix(post_row(&second))
        .count()
        .await?;
    if profile.posts != 2 || left != 0 {
        return Err(wrong(format!(
            "after the delete the profile counts {} posts and {left} rows of the post remain",
            profile.posts
        )));
    }
    report.push(format!(
        "deleted a post with its 20 comments in one transaction: {} posts left, {left} rows of it",
        profile.posts
    ));
    Ok(report)
}
