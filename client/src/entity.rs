//! Entities as the SDK returns them, their keys, ETags and write preconditions.

use crate::value::DateTime;

/// An entity's full key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityKey {
    /// The PartitionKey.
    pub partition_key: String,
    /// The RowKey.
    pub row_key: String,
}

impl EntityKey {
    /// A key from its two parts.
    pub fn new(partition_key: impl Into<String>, row_key: impl Into<String>) -> EntityKey {
        EntityKey {
            partition_key: partition_key.into(),
            row_key: row_key.into(),
        }
    }
}

impl<P: Into<String>, R: Into<String>> From<(P, R)> for EntityKey {
    fn from((partition_key, row_key): (P, R)) -> EntityKey {
        EntityKey::new(partition_key, row_key)
    }
}

/// An entity's version tag, as the server returned it. Opaque: compare and pass it back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ETag(String);

impl ETag {
    pub(crate) fn new(tag: String) -> ETag {
        ETag(tag)
    }

    /// The tag's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An ETag kept as text (from a command line, a file): the server checks it when it is used.
impl From<String> for ETag {
    fn from(tag: String) -> ETag {
        ETag(tag)
    }
}

impl std::fmt::Display for ETag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The precondition of an update, merge or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    /// Any existing version (`*`).
    Any,
    /// Exactly this version.
    Tag(ETag),
}

impl IfMatch {
    pub(crate) fn to_wire(&self) -> String {
        match self {
            IfMatch::Any => "*".to_owned(),
            IfMatch::Tag(tag) => tag.0.clone(),
        }
    }
}

impl From<ETag> for IfMatch {
    fn from(tag: ETag) -> IfMatch {
        IfMatch::Tag(tag)
    }
}

impl From<&ETag> for IfMatch {
    fn from(tag: &ETag) -> IfMatch {
        IfMatch::Tag(tag.clone())
    }
}

/// How an upsert treats an existing entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpsertMode {
    /// Replace it: properties not given are dropped.
    #[default]
    Replace,
    /// Merge into it: properties not given are kept.
    Merge,
}

/// An entity read from a table: its key, version and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Entity<T> {
    /// The entity's key.
    pub key: EntityKey,
    /// Its current ETag, for conditional writes.
    pub etag: ETag,
    /// When it was last written (server time).
    pub timestamp: DateTime,
    /// Its properties, as `T`.
    pub value: T,
}

impl<T> Entity<T> {
    /// The same entity with its value mapped by `f` (key, ETag and timestamp kept): for reading
    /// several row types of one partition through one enum and keeping only some of them.
    ///
    /// ```
    /// # fn example(entity: trestle_client::Entity<(String, i32)>) {
    /// let name_only = entity.map(|(name, _age)| name);
    /// # }
    /// ```
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Entity<U> {
        Entity {
            key: self.key,
            etag: self.etag,
            timestamp: self.timestamp,
            value: f(self.value),
        }
    }
}
