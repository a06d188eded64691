//! Transactions and reads across partitions and tables: [`CrossTransaction`] (from
//! [`Client::transaction`]) commits up to 100 operations on entities of any tables all or
//! nothing, and [`Client::get_many`] reads up to 100 entities at one instant.
//!
//! Where a store lacks such transactions, the Azure guide's pattern is an eventually consistent
//! transfer: a durable record of the intent and idempotent, resumable steps
//! ([`crate::scenarios::hr`] keeps both).

use std::collections::HashSet;

use serde::de::DeserializeOwned;
use serde::Serialize;
use trestle_proto::pb;
use trestle_proto::pb::transaction_operation::Operation;

use crate::client::Client;
use crate::convert::typed;
use crate::entity::{ETag, Entity, EntityKey, IfMatch, UpsertMode};
use crate::error::{Error, ErrorCode, ErrorKind, Result};
use crate::patch::Patch;
use crate::transaction::{etags, operation, MAX_OPERATIONS};

/// A transaction across partitions and tables: up to 100 operations on different entities of any
/// tables, committed all or nothing with [`CrossTransaction::commit`]. Built like
/// [`crate::Transaction`], each operation naming its table and full key.
///
/// It refuses at once what the server would refuse: a second operation on one entity, a 101st
/// operation.
#[derive(Debug)]
#[must_use]
pub struct CrossTransaction {
    client: Client,
    operations: Vec<pb::TableOperation>,
    entities: HashSet<(String, EntityKey)>,
    /// The caller's idempotency key ([`CrossTransaction::idempotency_key`]); empty: a new one.
    idempotency_key: String,
}

impl CrossTransaction {
    pub(crate) fn new(client: Client) -> CrossTransaction {
        CrossTransaction {
            client,
            operations: Vec::new(),
            entities: HashSet::new(),
            idempotency_key: String::new(),
        }
    }

    /// The transaction committing with `key` as its idempotency key, in place of the new one the
    /// SDK makes: for a caller who retries it itself, across restarts too
    /// ([`crate::TableClient::idempotency_key`]).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> CrossTransaction {
        self.idempotency_key = key.into();
        self
    }

    /// Operations added so far.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    /// Whether no operation was added.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// Checks the entity may join the transaction and returns its key.
    fn admit(&mut self, table: &str, key: EntityKey) -> Result<EntityKey> {
        let index = self.operations.len();
        let refused = |code, message| Error::invalid(message).with_code(code).at_operation(index);
        if index >= MAX_OPERATIONS {
            let message = format!("a transaction holds at most {MAX_OPERATIONS} operations");
            return Err(refused(ErrorCode::InvalidInput, message));
        }
        if !self
            .entities
            .insert((table.to_ascii_lowercase(), key.clone()))
        {
            let message = format!(
                "the entity ('{table}', '{}', '{}') is already in the transaction",
                key.partition_key, key.row_key
            );
            return Err(refused(ErrorCode::InvalidDuplicateRow, message));
        }
        Ok(key)
    }

    /// Admits the entity at `key` of `table` and adds the operation `build` makes for it.
    fn add(
        &mut self,
        table: &str,
        key: EntityKey,
        build: impl FnOnce(EntityKey) -> Result<Operation>,
    ) -> Result<&mut Self> {
        let key = self.admit(table, key)?;
        let partition_key = key.partition_key.clone();
        self.operations.push(pb::TableOperation {
            table: table.to_owned(),
            partition_key,
            operation: Some(pb::TransactionOperation {
                operation: Some(build(key)?),
            }),
        });
        Ok(self)
    }

    /// Inserts an entity that must not exist.
    pub fn insert<T: Serialize + ?Sized>(
        &mut self,
        table: &str,
        key: impl Into<EntityKey>,
        value: &T,
    ) -> Result<&mut Self> {
        self.add(table, key.into(), |key| operation::insert(&key, value))
    }

    /// Replaces an existing entity.
    pub fn update<T: Serialize + ?Sized>(
        &mut self,
        table: &str,
        key: impl Into<EntityKey>,
        value: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let if_match = if_match.into();
        self.add(table, key.into(), |key| {
            operation::update(&key, value, if_match)
        })
    }

    /// Merges properties into an existing entity.
    pub fn merge<T: Serialize + ?Sized>(
        &mut self,
        table: &str,
        key: impl Into<EntityKey>,
        properties: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let if_match = if_match.into();
        self.add(table, key.into(), |key| {
            operation::merge(&key, properties, if_match)
        })
    }

    /// Inserts, or replaces / merges an existing entity.
    pub fn upsert<T: Serialize + ?Sized>(
        &mut self,
        table: &str,
        key: impl Into<EntityKey>,
        value: &T,
        mode: UpsertMode,
    ) -> Result<&mut Self> {
        self.add(table, key.into(), |key| {
            operation::upsert(&key, value, mode)
        })
    }

    /// Patches an entity (see [`Patch`]): an increment of a counter beside a move, say.
    pub fn patch(
        &mut self,
        table: &str,
        key: impl Into<EntityKey>,
        patch: &Patch,
    ) -> Result<&mut Self> {
        self.add(table, key.into(), |key| operation::patch(key, patch))
    }

    /// Deletes an existing entity.
    pub fn delete(
        &mut self,
        table: &str,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let if_match = if_match.into();
        self.add(table, key.into(), |key| {
            Ok(operation::delete(key, if_match))
        })
    }

    /// Requires an entity to exist (with this ETag, unless `IfMatch::Any`), without writing it.
    pub fn check_exists(
        &mut self,
        table: &str,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let if_match = Some(if_match.into());
        self.add(table, key.into(), |key| Ok(operation::check(key, if_match)))
    }

    /// Requires an entity not to exist, without writing it.
    pub fn check_absent(&mut self, table: &str, key: impl Into<EntityKey>) -> Result<&mut Self> {
        self.add(table, key.into(), |key| Ok(operation::check(key, None)))
    }

    /// Commits every operation or none, serializable with every other write to the entities it
    /// touches. Returns each operation's new ETag (`None` for deletes and checks), in order.
    ///
    /// # Errors
    /// The failing operation's index is in [`Error::operation_index`], with that operation's own
    /// kind and code.
    pub async fn commit(self) -> Result<Vec<Option<ETag>>> {
        if self.operations.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a transaction needs at least one operation",
            ));
        }
        let request = pb::TransactWriteRequest {
            idempotency_key: self.idempotency_key,
            operations: self.operations,
        };
        let response = self
            .client
            .write_once(request, |mut c, r| async move { c.transact_write(r).await })
            .await?;
        Ok(etags(response.results))
    }
}

/// What [`Client::get_many`] read: one slot per key, in order, each decoded as the caller asks
/// (keys of different tables usually hold different types).
#[derive(Debug, Clone)]
pub struct Snapshot {
    entities: Vec<Option<pb::Entity>>,
}

impl Snapshot {
    /// How many keys were read.
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    /// Whether no key was read.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    /// The entity of the `index`th key as a `T`, or `None` if it does not exist.
    ///
    /// # Errors
    /// `index` out of range, or the entity does not decode as a `T`.
    pub fn get<T: DeserializeOwned>(&self, index: usize) -> Result<Option<Entity<T>>> {
        let slot = self.entities.get(index).ok_or_else(|| {
            Error::invalid(format!(
                "the snapshot has {} keys, not {}",
                self.len(),
                index + 1
            ))
        })?;
        slot.clone().map(typed).transpose()
    }

    /// Every entity as a `T`, in key order.
    pub fn all<T: DeserializeOwned>(self) -> Result<Vec<Option<Entity<T>>>> {
        self.entities
            .into_iter()
            .map(|slot| slot.map(typed).transpose())
            .collect()
    }
}

impl Client {
    /// A transaction across partitions and tables: add operations, then commit.
    pub fn transaction(&self) -> CrossTransaction {
        CrossTransaction::new(self.clone())
    }

    /// Reads 1 to 100 entities, each a (table, key), at one instant: the read sees all or none of
    /// every transaction. Decode each with [`Snapshot::get`].
    pub async fn get_many<S, K>(&self, keys: impl IntoIterator<Item = (S, K)>) -> Result<Snapshot>
    where
        S: Into<String>,
        K: Into<EntityKey>,
    {
        let keys = keys
            .into_iter()
            .map(|(table, key)| {
                let key = key.into();
                pb::EntityRef {
                    table: table.into(),
                    partition_key: key.partition_key,
                    row_key: key.row_key,
                }
            })
            .collect();
        let request = pb::GetEntitiesRequest {
            keys,
            select: Vec::new(),
        };
        let response = self
            .read(request, |mut c, r| async move { c.get_entities(r).await })
            .await?;
        let entities = response.entities.into_iter().map(|f| f.entity).collect();
        Ok(Snapshot { entities })
    }
}
