//! [`TableClient`]: one table's entities, read and written as typed values.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;
use trestle_proto::pb;

use crate::client::{Client, Stub};
use crate::convert::{patch_condition, patch_if_match, patch_steps, typed, upsert_mode, wire};
use crate::entity::{ETag, Entity, EntityKey, IfMatch, UpsertMode};
use crate::error::{ErrorCode, Result};
use crate::idempotency::Keyed;
use crate::patch::Patch;
use crate::query::{Filter, Query};
use crate::transaction::Transaction;

impl Client {
    /// A handle on one table (no request is made).
    pub fn table(&self, name: impl Into<String>) -> TableClient {
        TableClient::new(self.clone(), name.into())
    }
}

/// A handle on one table. Cheap to clone.
///
/// Its writes return only the new ETag, so they ask the server not to send the entity back
/// (`return_no_content`, Azure's `Prefer: return-no-content`).
#[derive(Debug, Clone)]
pub struct TableClient {
    pub(crate) client: Client,
    name: String,
    /// The key the handle's writes carry ([`TableClient::idempotency_key`]); `None`: a new one
    /// per call.
    idempotency_key: Option<String>,
}

impl TableClient {
    pub(crate) fn new(client: Client, name: String) -> TableClient {
        TableClient {
            client,
            name,
            idempotency_key: None,
        }
    }

    /// This handle with every write carrying `key` as its idempotency key, in place of the new
    /// one the SDK makes for each call: for a caller who retries one logical call itself, across
    /// process restarts too, within the server's window (10 minutes by default). A key names one
    /// call: another write with it is refused `IdempotentParameterMismatch`.
    ///
    /// ```no_run
    /// #[derive(serde::Serialize)]
    /// struct Charge {
    ///     cents: i64,
    /// }
    /// # async fn charge(orders: &trestle_client::TableClient) -> trestle_client::Result<()> {
    /// // The order's id makes the key: running this again after a crash charges once.
    /// orders
    ///     .idempotency_key("charge-order-1017")
    ///     .insert(("customer-7", "charge-1017"), &Charge { cents: 4200 })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn idempotency_key(&self, key: impl Into<String>) -> TableClient {
        TableClient {
            idempotency_key: Some(key.into()),
            ..self.clone()
        }
    }

    /// The key a write of this handle sends (empty: the SDK makes one).
    fn key(&self) -> String {
        self.idempotency_key.clone().unwrap_or_default()
    }

    /// The table as `GetTable` describes it (its indexes, its stored access policies).
    pub(crate) async fn describe(&self) -> Result<pb::Table> {
        let request = pb::GetTableRequest {
            table: self.name.clone(),
        };
        self.client
            .read(request, |mut c, r| async move { c.get_table(r).await })
            .await
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the table.
    ///
    /// # Errors
    /// `is_conflict()` if it exists (or is still being deleted).
    pub async fn create(&self) -> Result<()> {
        let request = pb::CreateTableRequest {
            table: self.name.clone(),
            ..Default::default()
        };
        self.client
            .write(request, |mut c, r| async move { c.create_table(r).await })
            .await?;
        Ok(())
    }

    /// Creates the table unless it exists.
    pub async fn create_if_not_exists(&self) -> Result<()> {
        match self.create().await {
            Err(error) if error.code() == Some(ErrorCode::TableAlreadyExists) => Ok(()),
            other => other,
        }
    }

    /// Deletes the table and all its entities.
    pub async fn delete_table(&self) -> Result<()> {
        let request = pb::DeleteTableRequest {
            table: self.name.clone(),
        };
        self.client
            .write(request, |mut c, r| async move { c.delete_table(r).await })
            .await?;
        Ok(())
    }

    /// Reads one entity.
    ///
    /// # Errors
    /// `is_not_found()` if there is no such entity (see [`TableClient::get_if_exists`]).
    pub async fn get<T: DeserializeOwned>(&self, key: impl Into<EntityKey>) -> Result<Entity<T>> {
        let key = key.into();
        let request = pb::GetEntityRequest {
            table: self.name.clone(),
            partition_key: key.partition_key,
            row_key: key.row_key,
            select: vec![],
        };
        let entity = self
            .client
            .read(request, |mut c, r| async move { c.get_entity(r).await })
            .await?;
        typed(entity)
    }

    /// Reads one entity, or `None` if it does not exist.
    pub async fn get_if_exists<T: DeserializeOwned>(
        &self,
        key: impl Into<EntityKey>,
    ) -> Result<Option<Entity<T>>> {
        match self.get(key).await {
            Ok(entity) => Ok(Some(entity)),
            Err(error) if error.code() == Some(ErrorCode::ResourceNotFound) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Inserts an entity that must not exist; returns its ETag.
    ///
    /// # Errors
    /// `is_conflict()` if an entity with that key exists.
    pub async fn insert<T: Serialize + ?Sized>(
        &self,
        key: impl Into<EntityKey>,
        value: &T,
    ) -> Result<ETag> {
        let request = pb::InsertEntityRequest {
            idempotency_key: self.key(),
            table: self.name.clone(),
            entity: Some(wire(&key.into(), value)?),
            return_no_content: true,
        };
        self.write_for_etag(request, |mut c, r| async move { c.insert_entity(r).await })
            .await
    }

    /// Replaces an existing entity; returns its new ETag.
    ///
    /// # Errors
    /// `is_precondition_failed()` if its ETag is not `if_match`; `is_not_found()` if it does not
    /// exist.
    pub async fn update<T: Serialize + ?Sized>(
        &self,
        key: impl Into<EntityKey>,
        value: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<ETag> {
        let request = pb::UpdateEntityRequest {
            idempotency_key: self.key(),
            table: self.name.clone(),
            entity: Some(wire(&key.into(), value)?),
            if_match: if_match.into().to_wire(),
            return_no_content: true,
        };
        self.write_for_etag(request, |mut c, r| async move { c.update_entity(r).await })
            .await
    }

    /// Merges properties into an existing entity (others are kept); returns its new ETag.
    ///
    /// # Errors
    /// `is_precondition_failed()` if its ETag is not `if_match`; `is_not_found()` if it does not
    /// exist.
    pub async fn merge<T: Serialize + ?Sized>(
        &self,
        key: impl Into<EntityKey>,
        properties: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<ETag> {
        let request = pb::MergeEntityRequest {
            idempotency_key: self.key(),
            table: self.name.clone(),
            entity: Some(wire(&key.into(), properties)?),
            if_match: if_match.into().to_wire(),
            return_no_content: true,
        };
        self.write_for_etag(request, |mut c, r| async move { c.merge_entity(r).await })
            .await
    }

    /// Applies `patch` to the entity, in order, inside its commit; returns the entity as stored.
    ///
    /// # Errors
    /// `is_not_found()` if it does not exist (unless [`Patch::upsert`]); `is_precondition_failed()`
    /// if [`Patch::if_match`] or [`Patch::condition`] no longer holds; `ErrorCode::InvalidInput` for an increment of another
    /// type, `OutOfRangeInput` for one that overflows, and every entity limit. A refused patch
    /// changes nothing.
    pub async fn patch<T: DeserializeOwned>(
        &self,
        key: impl Into<EntityKey>,
        patch: &Patch,
    ) -> Result<Entity<T>> {
        let key = key.into();
        let request = pb::PatchEntityRequest {
            idempotency_key: self.key(),
            table: self.name.clone(),
            partition_key: key.partition_key,
            row_key: key.row_key,
            operations: patch_steps(patch)?,
            if_match: patch_if_match(patch),
            upsert: patch.upsert,
            return_no_content: false,
            condition: patch_condition(patch),
        };
        let stored = self
            .client
            .write_once(request, |mut c, r| async move { c.patch_entity(r).await })
            .await?;
        typed(stored)
    }

    /// Inserts the entity, or replaces / merges the existing one; returns its new ETag.
    pub async fn upsert<T: Serialize + ?Sized>(
        &self,
        key: impl Into<EntityKey>,
        value: &T,
        mode: UpsertMode,
    ) -> Result<ETag> {
        let request = pb::UpsertEntityRequest {
            idempotency_key: self.key(),
            table: self.name.clone(),
            entity: Some(wire(&key.into(), value)?),
            mode: upsert_mode(mode) as i32,
            return_no_content: true,
        };
        self.write_for_etag(request, |mut c, r| async move { c.upsert_entity(r).await })
            .await
    }

    /// Deletes an entity.
    ///
    /// # Errors
    /// `is_precondition_failed()` if its ETag is not `if_match`; `is_not_found()` if it does not
    /// exist.
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        let key = key.into();
        let request = pb::DeleteEntityRequest {
            idempotency_key: self.key(),
            table: self.name.clone(),
            partition_key: key.partition_key,
            row_key: key.row_key,
            if_match: if_match.into().to_wire(),
        };
        self.client
            .write_once(request, |mut c, r| async move { c.delete_entity(r).await })
            .await?;
        Ok(())
    }

    /// Deletes the entities of partition `partition_key` whose RowKey is in `[start, end)` (an
    /// empty bound is open) and, with `filter`, that match it; returns how many. The server
    /// deletes in commits of at most 100, never an entity changed since it was read; this call
    /// follows its continuations until the range is done. Interrupted, it can simply be called
    /// again: it deletes what still matches.
    ///
    /// ```
    /// # async fn example(logs: trestle_client::TableClient) -> trestle_client::Result<()> {
    /// use trestle_client::Filter;
    /// // A device's log lines before 2026, and its debug lines of any date.
    /// let old = logs.delete_range("device-7", "", "2026", None).await?;
    /// let debug = logs
    ///     .delete_range("device-7", "", "", Some(Filter::eq("Level", "debug")))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete_range(
        &self,
        partition_key: impl Into<String>,
        start: impl Into<String>,
        end: impl Into<String>,
        filter: Option<Filter>,
    ) -> Result<u64> {
        let mut request = pb::DeleteEntitiesRequest {
            table: self.name.clone(),
            partition_key: Some(partition_key.into()),
            row_key_start: start.into(),
            row_key_end: end.into(),
            filter: filter.map(|f| f.as_str().to_owned()).unwrap_or_default(),
            continuation_token: String::new(),
            idempotency_key: String::new(),
        };
        let mut deleted = 0;
        loop {
            // Each call with a key of its own: a retry answers the count it deleted.
            let answer = self
                .client
                .write_once(request.clone(), |mut c, r| async move {
                    c.delete_entities(r).await
                })
                .await?;
            deleted += answer.deleted;
            if answer.continuation_token.is_empty() {
                return Ok(deleted);
            }
            request.continuation_token = answer.continuation_token;
        }
    }

    /// A query over this table, read as `T`.
    pub fn query<T: DeserializeOwned>(&self) -> Query<T> {
        Query::new(self.client.clone(), self.name.clone())
    }

    /// Every entity of the table as `T`, split into `total` segments read concurrently over
    /// streams of their own ([`Query::scan_parallel`]).
    pub fn scan_parallel<T: DeserializeOwned + Send + 'static>(
        &self,
        total: u32,
    ) -> Vec<crate::EntityStream<crate::Entity<T>>> {
        self.query::<T>().scan_parallel(total)
    }

    /// Aggregates over this table's entities, computed by the server: narrow them with
    /// [`crate::Aggregate::partition`] and [`crate::Aggregate::filter`] (or start from a query:
    /// [`Query::aggregate`]).
    pub fn aggregate(&self) -> crate::Aggregate {
        self.entities().aggregate()
    }

    /// A query over this table whose entities are read as dynamic [`Properties`]: for counting
    /// and for existence checks, which need no type (`table.entities().partition("p").count()`).
    ///
    /// [`Properties`]: crate::Properties
    pub fn entities(&self) -> Query<crate::Properties> {
        Query::new(self.client.clone(), self.name.clone())
    }

    /// Sends a single-entity write that asks for no content back; returns the new ETag.
    async fn write_for_etag<R, F, Fut>(&self, request: R, call: F) -> Result<ETag>
    where
        R: Clone + Keyed,
        F: Fn(Stub, R) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<pb::Entity>, tonic::Status>>,
    {
        let stored = self.client.write_once(request, call).await?;
        Ok(ETag::new(stored.etag))
    }

    /// A transaction on one partition of this table.
    pub fn transaction(&self, partition_key: impl Into<String>) -> Transaction {
        let transaction =
            Transaction::new(self.client.clone(), self.name.clone(), partition_key.into());
        match &self.idempotency_key {
            Some(key) => transaction.idempotency_key(key.clone()),
            None => transaction,
        }
    }
}
