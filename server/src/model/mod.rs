//! The data model: tables, keys, entities, typed values, ETags and write operations, with Azure's
//! validation rules. Pure data, no I/O.

mod access_policy;
mod change;
mod cors;
mod document;
pub(crate) mod encoding;
mod entity;
mod error;
mod etag;
mod idempotency;
mod index;
mod names;
mod operation;
mod patch;
mod paths;
mod plan;
mod quote;
mod range;
mod segment;
mod time;
mod ttl;
mod value;
mod work;

pub use access_policy::{
    decode_policies, encode_policies, validate_policies, AccessPolicy, MAX_ACCESS_POLICIES,
    MAX_POLICY_ID_CHARS,
};
pub use change::{
    feed_retention, ChangeFeed, ChangeKind, DEFAULT_FEED_RETENTION_SECONDS,
    MAX_FEED_RETENTION_SECONDS,
};
pub use cors::{CorsRule, ServiceProperties, MAX_CORS_RULES};
pub use document::{
    Document, DocumentRef, Entries, MAX_DOCUMENT_DEPTH, MAX_DOCUMENT_VALUES, MAX_MEMBER_NAME_CHARS,
};
pub use entity::{
    billed_size, validate_selected_name, validate_shape, NewEntity, Properties, StoredEntity,
};
pub use error::{KeyKind, ValidationError};
pub use etag::{ETag, ETagText, IfMatch};
pub use idempotency::{
    bulk_delete_properties, record_key, record_properties, refusal_properties, seal_outcome,
    IdempotencyKey, Recorded, RecordedOutcome, RequestDigest, MAX_IDEMPOTENCY_KEY_BYTES,
};
pub use index::{
    put_escaped, put_value, successor_of_prefix, type_tag, Index, IndexDefinition, IndexEntry,
    IndexRange, IndexScope, IndexState, TooManyEntries, MAX_INDEXES_PER_TABLE,
    MAX_INDEX_ENTRIES_PER_ENTITY, MAX_INDEX_PROPERTIES,
};
pub use names::{validate_key, EntityKey, TableName};
pub use operation::{CheckCondition, Effect, Operation, Refusal, UpsertMode};
pub use patch::{PatchCondition, PatchStep};
pub use paths::{prune, selected, selects, Path, Selected};
pub use plan::{
    plan_commit, AddedEntry, CommitPlan, Expired, PlanRefusal, PlanRules, PlannedChange,
};
pub use quote::{quoted, Quoted, MAX_QUOTED_CHARS};
pub use range::{partition_end, partition_start, tighter, KeyPosition, KeyRange, RowPosition};
pub use segment::{Segment, MAX_TOTAL_SEGMENTS};
pub use time::{Ticks, TICKS_PER_SECOND};
pub use ttl::{default_ttl, validate_own_ttl, TimeToLive, MAX_TTL_SECONDS, TTL_PROPERTY};
pub use value::{utf16_bytes, Value, ValueRef};
pub use work::{OverBudget, Spend, WorkBudget, DEFAULT_WORK_BUDGET};

/// Longest PartitionKey or RowKey, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 1024;
/// Most custom properties in one entity (255 including the three system properties).
pub const MAX_PROPERTIES: usize = 252;
/// Longest property name, in characters.
pub const MAX_PROPERTY_NAME_CHARS: usize = 255;
/// Largest string (as UTF-16) or binary value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Largest entity, in bytes of Azure's size formula ([`billed_size`]).
pub const MAX_ENTITY_BYTES: usize = 1024 * 1024;
/// Most operations in one transaction.
pub const MAX_TRANSACTION_OPERATIONS: usize = 100;
/// Most keys one read of several entities names.
pub const MAX_READ_KEYS: usize = 100;
/// Largest transaction request, in encoded bytes.
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;
/// Most entities or tables in one page.
pub const MAX_PAGE_SIZE: u32 = 1000;
