//! Azure Table semantics over the store: the operations the service offers, on validated model
//! types, synchronous (the gRPC layer runs them on the blocking pool).

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use crate::error::TableError;
use crate::model::{
    EntityKey, IfMatch, Operation, Refusal, StoredEntity, TableName, ValidationError,
};
use crate::query::{self, ContinuationToken, QuerySpec, TablesToken};
use crate::storage::{
    CreateRefusal, PageLimit, RejectReason, Rejection, Store, StoreOptions, Table,
};

/// Stop filling a query page after this many stored bytes, so that a page of large entities stays
/// well under gRPC's default 4 MiB message limit.
pub const PAGE_BYTE_BUDGET: usize = 2 * 1024 * 1024;

/// One page of tables.
#[derive(Debug)]
pub struct TablePage {
    /// Tables in folded-name order.
    pub tables: Vec<TableName>,
    /// Token of the next page, if any.
    pub next_page_token: Option<String>,
}

/// One page of entities.
#[derive(Debug)]
pub struct EntityPage {
    /// Entities in query order.
    pub entities: Vec<StoredEntity>,
    /// Token of the next page, if any.
    pub continuation_token: Option<String>,
}

/// The table service's semantics.
#[derive(Debug)]
pub struct Engine {
    store: Store,
}

impl Engine {
    /// Opens the store in `data_dir`.
    pub fn open(data_dir: &Path, options: StoreOptions) -> Result<Engine, TableError> {
        Ok(Engine {
            store: Store::open(data_dir, options)?,
        })
    }

    /// Creates a table.
    pub fn create_table(&self, name: &str) -> Result<TableName, TableError> {
        let name = TableName::parse(name)?;
        match self.store.create_table(&name)? {
            Ok(table) => Ok(table.name().clone()),
            Err(CreateRefusal::AlreadyExists) => {
                Err(TableError::TableAlreadyExists(name.to_string()))
            }
            Err(CreateRefusal::BeingDeleted) => {
                Err(TableError::TableBeingDeleted(name.to_string()))
            }
        }
    }

    /// Deletes a table; its data is reclaimed in the background.
    pub fn delete_table(&self, name: &str) -> Result<(), TableError> {
        let name = lookup_name(name)?;
        if self.store.delete_table(&name)? {
            Ok(())
        } else {
            Err(TableError::TableNotFound(name.to_string()))
        }
    }

    /// Lists tables whose name starts with `prefix` (ignoring case).
    pub fn list_tables(
        &self,
        prefix: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<TablePage, TableError> {
        let limit = query::page_size(page_size)? as usize;
        let folded_prefix = prefix.to_ascii_lowercase();
        let after = match page_token {
            "" => None,
            token => Some(TablesToken::decode(token)?.after),
        };
        let (tables, more) = self
            .store
            .list_tables(&folded_prefix, after.as_deref(), limit)?;
        let next_page_token = match tables.last() {
            Some(last) if more => Some(
                TablesToken {
                    after: last.folded().to_owned(),
                }
                .encode(),
            ),
            _ => None,
        };
        Ok(TablePage {
            tables,
            next_page_token,
        })
    }

    /// Applies one write outside a transaction.
    pub fn write(
        &self,
        table: &str,
        operation: Operation,
    ) -> Result<Option<StoredEntity>, TableError> {
        let partition_key = operation
            .partition_key()
            .expect("single-entity writes carry their entity")
            .to_owned();
        let mut results = self.commit(table, &partition_key, vec![operation], false)?;
        Ok(results.pop().flatten())
    }

    /// Deletes one entity outside a transaction.
    pub fn delete(&self, table: &str, key: EntityKey, if_match: IfMatch) -> Result<(), TableError> {
        let operation = Operation::Delete {
            row_key: key.row_key,
            if_match,
        };
        self.commit(table, &key.partition_key, vec![operation], false)?;
        Ok(())
    }

    /// Applies a transaction: all operations or none. Errors name the failing operation's index.
    pub fn transact(
        &self,
        table: &str,
        partition_key: &str,
        operations: Vec<Operation>,
        request_bytes: usize,
    ) -> Result<Vec<Option<StoredEntity>>, TableError> {
        crate::transaction::validate(partition_key, &operations, request_bytes)?;
        self.commit(table, partition_key, operations, true)
            .map_err(|error| match error {
                TableError::TableNotFound(_) => error.at_operation(0),
                other => other,
            })
    }

    fn commit(
        &self,
        table_name: &str,
        partition_key: &str,
        operations: Vec<Operation>,
        in_transaction: bool,
    ) -> Result<Vec<Option<StoredEntity>>, TableError> {
        let table = self.table(table_name)?;
        match table.commit(partition_key, &operations)? {
            Ok(results) => Ok(results),
            Err(Rejection { index, reason }) => {
                let error = rejection_error(&table, partition_key, &operations[index], reason);
                Err(if in_transaction {
                    error.at_operation(index)
                } else {
                    error
                })
            }
        }
    }

    /// Reads one entity, keeping only the `select`ed properties (all when empty).
    pub fn get(
        &self,
        table: &str,
        key: EntityKey,
        select: Vec<String>,
    ) -> Result<StoredEntity, TableError> {
        let select = query::validate_select(select)?;
        let table = self.table(table)?;
        match table.get(&key)? {
            Some(entity) => Ok(entity.project(&select)),
            None => Err(TableError::EntityNotFound {
                partition_key: key.partition_key,
                row_key: key.row_key,
            }),
        }
    }

    /// Reads one page of a query.
    pub fn query(
        &self,
        table: &str,
        spec: QuerySpec,
        continuation: &str,
    ) -> Result<EntityPage, TableError> {
        let spec = spec.validate()?;
        if !spec.filter.is_empty() {
            return Err(TableError::NotImplemented("the filter language"));
        }
        let table = self.table(table)?;
        let shape = spec.shape();
        let mut range = spec.key_range();
        if !continuation.is_empty() {
            let token = ContinuationToken::decode(continuation, table.id(), shape)?;
            if !range.contains(&token.resume_at) {
                return Err(ValidationError::Argument(
                    "continuation token points outside the query's key range".into(),
                )
                .into());
            }
            if spec.reverse {
                range.end = Bound::Included(token.resume_at);
            } else {
                range.start = Bound::Included(token.resume_at);
            }
        }
        let limit = PageLimit {
            entities: spec.page_size as usize,
            bytes: PAGE_BYTE_BUDGET,
        };
        let page = table.scan(&range, spec.reverse, limit)?;
        let entities = page
            .entities
            .into_iter()
            .map(|entity| entity.project(&spec.select))
            .collect();
        let continuation_token = page.resume_at.map(|resume_at| {
            ContinuationToken {
                table_id: table.id(),
                shape,
                resume_at,
            }
            .encode()
        });
        Ok(EntityPage {
            entities,
            continuation_token,
        })
    }

    /// Flushes everything to disk (for shutdown).
    pub fn flush(&self) -> Result<(), TableError> {
        Ok(self.store.flush()?)
    }

    fn table(&self, name: &str) -> Result<Arc<Table>, TableError> {
        let name = lookup_name(name)?;
        self.store
            .table(&name)
            .ok_or_else(|| TableError::TableNotFound(name.to_string()))
    }
}

/// A table name used to look a table up: one that could never have been created does not exist.
fn lookup_name(name: &str) -> Result<TableName, TableError> {
    TableName::parse(name).map_err(|_| TableError::TableNotFound(name.to_owned()))
}

fn rejection_error(
    table: &Table,
    partition_key: &str,
    operation: &Operation,
    reason: RejectReason,
) -> TableError {
    let partition_key = partition_key.to_owned();
    let row_key = operation.row_key().to_owned();
    match reason {
        RejectReason::TableGone => TableError::TableNotFound(table.name().to_string()),
        RejectReason::Refused(Refusal::NotFound) => TableError::EntityNotFound {
            partition_key,
            row_key,
        },
        RejectReason::Refused(Refusal::AlreadyExists) => TableError::EntityAlreadyExists {
            partition_key,
            row_key,
        },
        RejectReason::Refused(Refusal::ConditionNotSatisfied) => {
            TableError::ConditionNotSatisfied {
                partition_key,
                row_key,
            }
        }
        RejectReason::Refused(Refusal::Invalid(invalid)) => TableError::Invalid(invalid),
    }
}
