//! The gRPC edge of transactions and reads across partitions and tables: `TransactWrite` and
//! `GetEntities` (the engine's `across` module does the work).

use prost::Message;
use tonic::{Request, Response, Status};
use trestle_proto::pb;

use super::reply::GetEntitiesReply;
use super::{convert, status, wire, TableApi};
use crate::across::{CrossCommit, TableEntityKey};
use crate::error::TableError;
use crate::model::Spend;
use crate::transaction::TableOperation;

impl TableApi {
    /// `TransactWrite`: converted, authorized operation by operation, committed (awaited where
    /// the store serves it so), acknowledged once durable.
    pub(super) async fn transact_across(
        &self,
        request: Request<pb::TransactWriteRequest>,
    ) -> Result<Response<pb::TransactWriteResponse>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let request_bytes = req.encoded_len();
        // One budget for the request: every operation's condition is charged to it.
        let mut spend = self.executor.work_budget().spend();
        let operations = req
            .operations
            .into_iter()
            .enumerate()
            .map(|(index, op)| {
                table_operation(op, &mut spend).map_err(|error| error.at_operation(index))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| status::to_status(&error))?;
        admitted
            .access
            .transaction_across(&operations)
            .map_err(|(index, error)| status::auth_status(&error, Some(index)))?;
        let prepared = CrossCommit::prepare(operations, request_bytes)
            .map_err(|error| status::to_status(&error))?;
        let claim = admitted.claim(&req.idempotency_key)?;
        let pending = self.executor.transact_across(prepared, claim).await?;
        let results = self.durable(pending).await?;
        Ok(Response::new(pb::TransactWriteResponse {
            results: results.into_iter().map(convert::operation_result).collect(),
        }))
    }

    /// `GetEntities`: every key authorized, read at one instant.
    pub(super) async fn read_many(
        &self,
        request: Request<pb::GetEntitiesRequest>,
    ) -> Result<Response<GetEntitiesReply>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let keys = req
            .keys
            .into_iter()
            .enumerate()
            .map(|(index, key)| {
                let entity = convert::entity_key(key.partition_key, key.row_key)
                    .map_err(|error| TableError::Invalid(error).at_operation(index))?;
                Ok(TableEntityKey {
                    table: key.table,
                    key: entity,
                })
            })
            .collect::<Result<Vec<_>, TableError>>()
            .map_err(|error| status::to_status(&error))?;
        admitted
            .access
            .read_many(&keys)
            .map_err(|(index, error)| status::auth_status(&error, Some(index)))?;
        let select = req.select;
        let entities = self
            .executor
            .get_many(keys, select, wire::entity_message)
            .await?;
        Ok(Response::new(GetEntitiesReply { entities }))
    }
}

/// One operation of a `TransactWrite`: an entity it carries must be of the operation's partition.
fn table_operation(
    op: pb::TableOperation,
    spend: &mut Spend,
) -> Result<TableOperation, TableError> {
    let Some(operation) = op.operation else {
        return Err(TableError::Invalid(
            crate::model::ValidationError::Argument(
                "the operation is missing: set `operation`".into(),
            ),
        ));
    };
    let operation =
        convert::operation(operation, &op.partition_key, spend).map_err(TableError::Invalid)?;
    if operation.partition_key() != op.partition_key {
        return Err(TableError::DifferentPartitions {
            expected: op.partition_key,
            found: operation.partition_key().to_owned(),
        });
    }
    Ok(TableOperation {
        table: op.table,
        operation,
    })
}
