//! Declared secondary indexes: definitions to create a table or an index with, their states, and
//! the [`TableClient`] calls that manage them. Query through one with [`crate::Query::index`].

use std::time::Duration;

use trestle_proto::pb;

use crate::error::{Error, ErrorCode, ErrorKind, Result};
use crate::table::TableClient;

/// What an index orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexScope {
    /// Each partition's entities (a local index): results by PartitionKey, then the properties.
    Partition,
    /// The whole table's entities (a global index).
    Table,
}

/// An index to declare: a name, the properties (or paths into documents) it orders by, its
/// scope, and whether its values are unique.
///
/// ```
/// use trestle_client::IndexDefinition;
/// // "Which people live in Seattle": a path through every element of an array (multi-valued).
/// let by_city = IndexDefinition::table("ByCity", ["Addresses/*/City"]);
/// // "Which authors wrote b1": one entry per element of the Books array.
/// let by_book = IndexDefinition::table("ByBook", ["Books/*"]);
/// // One email per person, at a path inside a document.
/// let by_email = IndexDefinition::table("ByEmail", ["Contact/Email"]).unique();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDefinition {
    /// 1 to 63 letters and digits, starting with a letter.
    pub name: String,
    /// 1 to 4 paths, in order: property names, or values inside document properties
    /// (`Address/City`); one path in the index may expand an array with `*` (`Books/*`,
    /// `Addresses/*/City`), making it multi-valued: an entry per distinct value, found by a query
    /// that fixes the path with `eq` (`Books/any(b: b eq 'b1')`). A multi-valued index cannot be
    /// unique.
    pub properties: Vec<String>,
    /// What it orders.
    pub scope: IndexScope,
    /// Whether a second entity with the same values is refused.
    pub unique: bool,
}

impl IndexDefinition {
    /// An index over the whole table, ordered by `properties`.
    pub fn table<S: Into<String>>(
        name: impl Into<String>,
        properties: impl IntoIterator<Item = S>,
    ) -> IndexDefinition {
        IndexDefinition {
            name: name.into(),
            properties: properties.into_iter().map(Into::into).collect(),
            scope: IndexScope::Table,
            unique: false,
        }
    }

    /// An index within each partition, ordered by `properties`.
    pub fn partition<S: Into<String>>(
        name: impl Into<String>,
        properties: impl IntoIterator<Item = S>,
    ) -> IndexDefinition {
        IndexDefinition {
            scope: IndexScope::Partition,
            ..IndexDefinition::table(name, properties)
        }
    }

    /// Refuses a second entity (of the table, or of the partition) with the same values:
    /// writes fail with [`crate::ErrorCode::IndexValueAlreadyExists`].
    pub fn unique(mut self) -> IndexDefinition {
        self.unique = true;
        self
    }

    pub(crate) fn to_wire(&self) -> pb::IndexDefinition {
        pb::IndexDefinition {
            name: self.name.clone(),
            properties: self.properties.clone(),
            scope: match self.scope {
                IndexScope::Partition => pb::IndexScope::Partition,
                IndexScope::Table => pb::IndexScope::Table,
            } as i32,
            unique: self.unique,
        }
    }
}

/// Whether an index answers queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexState {
    /// Being built over the entities that were there when it was declared.
    Building,
    /// Covers every entity.
    Ready,
    /// The build failed (a unique index met duplicates): why.
    Failed(String),
}

/// A declared index and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexInfo {
    /// As declared.
    pub definition: IndexDefinition,
    /// Whether it answers queries.
    pub state: IndexState,
}

impl IndexInfo {
    fn from_wire(index: pb::Index) -> IndexInfo {
        let definition = index.definition.unwrap_or_default();
        let scope = match pb::IndexScope::try_from(definition.scope) {
            Ok(pb::IndexScope::Table) => IndexScope::Table,
            _ => IndexScope::Partition,
        };
        let state = match pb::IndexState::try_from(index.state) {
            Ok(pb::IndexState::Ready) => IndexState::Ready,
            Ok(pb::IndexState::Failed) => IndexState::Failed(index.failure),
            _ => IndexState::Building,
        };
        IndexInfo {
            definition: IndexDefinition {
                name: definition.name,
                properties: definition.properties,
                scope,
                unique: definition.unique,
            },
            state,
        }
    }
}

/// How often [`TableClient::wait_for_index`] asks.
const POLL_EVERY: Duration = Duration::from_millis(100);

impl TableClient {
    /// Creates the table with `indexes` declared, ready at once.
    ///
    /// # Errors
    /// `is_conflict()` if the table exists; `InvalidInput` for a bad definition.
    pub async fn create_with_indexes(
        &self,
        indexes: impl IntoIterator<Item = IndexDefinition>,
    ) -> Result<()> {
        let request = pb::CreateTableRequest {
            table: self.name().to_owned(),
            indexes: indexes.into_iter().map(|i| i.to_wire()).collect(),
            ..Default::default()
        };
        self.client
            .write(request, |mut c, r| async move { c.create_table(r).await })
            .await?;
        Ok(())
    }

    /// Declares an index on the table. Writes keep it at once; entities already there are added
    /// by a background build ([`IndexState::Building`] until then; see
    /// [`TableClient::wait_for_index`]).
    pub async fn create_index(&self, definition: IndexDefinition) -> Result<IndexInfo> {
        let request = pb::CreateIndexRequest {
            table: self.name().to_owned(),
            index: Some(definition.to_wire()),
        };
        let index = self
            .client
            .write(request, |mut c, r| async move { c.create_index(r).await })
            .await?;
        Ok(IndexInfo::from_wire(index))
    }

    /// Drops an index; its entries are reclaimed in the background.
    pub async fn drop_index(&self, name: impl Into<String>) -> Result<()> {
        let request = pb::DropIndexRequest {
            table: self.name().to_owned(),
            index: name.into(),
        };
        self.client
            .write(request, |mut c, r| async move { c.drop_index(r).await })
            .await?;
        Ok(())
    }

    /// The table's indexes and their states.
    pub async fn indexes(&self) -> Result<Vec<IndexInfo>> {
        Ok(self
            .describe()
            .await?
            .indexes
            .into_iter()
            .map(IndexInfo::from_wire)
            .collect())
    }

    /// Waits until index `name` is no longer building, up to `timeout`; returns it as it is then
    /// (`Ready`, or `Failed` with the reason).
    ///
    /// # Errors
    /// `IndexNotFound` if the table has no such index; a timeout error if it is still building.
    pub async fn wait_for_index(&self, name: &str, timeout: Duration) -> Result<IndexInfo> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let indexes = self.indexes().await?;
            let Some(index) = indexes
                .into_iter()
                .find(|i| i.definition.name.eq_ignore_ascii_case(name))
            else {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("table {:?} has no index {name:?}", self.name()),
                )
                .with_code(ErrorCode::IndexNotFound));
            };
            if index.state != IndexState::Building {
                return Ok(index);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "index {name:?} of table {:?} is still building after {timeout:?}",
                        self.name()
                    ),
                ));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}
