//! The Rust SDK for Trestle, the durable partitioned entity store with Azure Table semantics.
//!
//! Store typed structs, stream query results, commit partition transactions, and use the Azure
//! table-design patterns as tested library code ([`keys`], [`scenarios`]).
//!
//! ```no_run
//! use futures_util::TryStreamExt;
//! use serde::{Deserialize, Serialize};
//! use trestle_client::{Client, Filter, IfMatch};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Employee {
//!     name: String,
//!     age: i32,
//! }
//!
//! # async fn example() -> trestle_client::Result<()> {
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let people = client.table("People");
//! people.create_if_not_exists().await?;
//!
//! let etag = people.insert(("sales", "ada"), &Employee { name: "Ada".into(), age: 36 }).await?;
//! people.merge(("sales", "ada"), &serde_json_free::Age { age: 37 }, IfMatch::Tag(etag)).await?;
//!
//! let mut seniors = people
//!     .query::<Employee>()
//!     .partition("sales")
//!     .filter(Filter::ge("age", 30))
//!     .stream();
//! while let Some(employee) = seniors.try_next().await? {
//!     println!("{} is {}", employee.value.name, employee.value.age);
//! }
//!
//! let mut tx = people.transaction("sales");
//! tx.insert(("sales", "grace"), &Employee { name: "Grace".into(), age: 45 })?;
//! tx.delete(("sales", "ada"), IfMatch::Any)?;
//! tx.commit().await?;
//! # Ok(())
//! # }
//! # mod serde_json_free { #[derive(serde::Serialize)] pub struct Age { pub age: i32 } }
//! ```
//!
//! # Several row types in one partition
//!
//! The table-design guides keep a post with its comments, or a department with its employees, in
//! one partition, so that one transaction changes both and one scan reads both. Give each row a
//! property naming its type and read the partition as an internally tagged enum; a query read as
//! one struct alone fails on the first row of another type (the error names that row's keys),
//! unless it is told to leave such rows out ([`Query::skip_undecodable`]).
//!
//! ```no_run
//! use futures_util::TryStreamExt;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! #[serde(tag = "Kind")]
//! enum Row {
//!     Post { title: String, likes: i64 },
//!     Comment { author: String, text: String },
//! }
//!
//! # async fn example(blog: trestle_client::TableClient) -> trestle_client::Result<()> {
//! let mut rows = blog.query::<Row>().partition("post-1").stream();
//! while let Some(row) = rows.try_next().await? {
//!     match row.value {
//!         Row::Post { title, .. } => println!("{title}"),
//!         Row::Comment { author, text } => println!("  {author}: {text}"),
//!     }
//! }
//! // Only the comments, as the enum's variant they are:
//! let comments: Vec<_> = blog
//!     .query::<Row>()
//!     .partition("post-1")
//!     .filter(trestle_client::Filter::eq("Kind", "Comment"))
//!     .all()
//!     .await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod access;
mod across;
mod aggregate;
mod changes;
mod client;
mod consumers;
mod convert;
mod entity;
mod error;
mod idempotency;
mod index;
pub mod keys;
mod mapping;
mod modify;
mod patch;
mod processor;
mod query;
pub mod scenarios;
mod settings;
mod table;
mod transaction;
mod value;

pub use access::AccessPolicy;
pub use across::{CrossTransaction, Snapshot};
pub use aggregate::{Aggregate, AggregateGroup};
pub use changes::{Change, ChangeFeed, ChangeKind, ChangeMatch, FeedCursor, FeedSettings};
pub use client::{Client, ClientBuilder, RetryPolicy, DEFAULT_ENDPOINT, DEFAULT_TIMEOUT};
pub use consumers::{ConsumerGroup, Consumers, RangeStatus};
pub use entity::{ETag, Entity, EntityKey, IfMatch, UpsertMode};
pub use error::{Error, ErrorCode, ErrorKind, Result};
pub use index::{IndexDefinition, IndexInfo, IndexScope, IndexState};
pub use mapping::{from_properties, to_properties, to_value, MappingError};
pub use modify::{is_conflict, retry_on_conflict, ConflictRetry};
pub use patch::Patch;
pub use processor::{ChangeBatch, FeedProcessor, FeedProcessorBuilder, Handler, MAX_BATCH_RANGES};
pub use query::{EntityStream, FieldFilter, Filter, Page, Query, QueryStats};
pub use settings::TableSettings;
pub use table::TableClient;
pub use transaction::{Transaction, TransactionRow, MAX_OPERATIONS};
pub use value::{DateTime, DateTimeParseError, Properties, Value};
