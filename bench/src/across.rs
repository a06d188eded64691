//! Transactions and reads across partitions, over the main table: `tx_cross_10`, 10 merges
//! (each conditional on its entity existing) in 10 partitions a transaction; `tx_local_10`, the
//! same 10 merges in one partition (a partition transaction), to tell the cost of spanning
//! partitions from the cost of the merges; and `get_many_10`, 10 keys in 10 partitions a
//! `GetEntities` call.

use trestle_proto::pb;

use crate::measure::{drive, Measurement, OpResult, Rng};
use crate::workloads::{partition_key, row_key, small_entity, Client, Plan, MAIN_TABLE};

/// Keys each call names, each in a partition of its own.
const KEYS_PER_CALL: u64 = 10;

/// `KEYS_PER_CALL` distinct rows of one partition of the main table, at random.
fn random_rows(rng: &mut Rng, plan: &Plan) -> Vec<(String, String)> {
    let partition = partition_key(rng.below(plan.partitions));
    let mut rows: Vec<u64> = Vec::new();
    while (rows.len() as u64) < KEYS_PER_CALL.min(plan.rows_per_partition) {
        let row = rng.below(plan.rows_per_partition);
        if !rows.contains(&row) {
            rows.push(row);
        }
    }
    rows.into_iter()
        .map(|r| (partition.clone(), row_key(r)))
        .collect()
}

/// `KEYS_PER_CALL` distinct partitions of the main table and a row in each, at random.
fn random_keys(rng: &mut Rng, plan: &Plan) -> Vec<(String, String)> {
    let mut partitions: Vec<u64> = Vec::new();
    while (partitions.len() as u64) < KEYS_PER_CALL.min(plan.partitions) {
        let partition = rng.below(plan.partitions);
        if !partitions.contains(&partition) {
            partitions.push(partition);
        }
    }
    partitions
        .into_iter()
        .map(|p| {
            (
                partition_key(p),
                row_key(rng.below(plan.rows_per_partition)),
            )
        })
        .collect()
}

/// Transactions of 10 merges across 10 partitions, 16 at once: entities/s.
pub(crate) async fn tx_cross_10(client: &Client, plan: &Plan) -> Measurement {
    ten_merges(client, plan, random_keys).await
}

/// Transactions of 10 merges in one partition, 16 at once, through `TransactWrite` (which takes
/// the partition-transaction path): entities/s.
pub(crate) async fn tx_local_10(client: &Client, plan: &Plan) -> Measurement {
    ten_merges(client, plan, random_rows).await
}

/// Transactions of 10 merges of the keys `keys` picks, 16 at once.
async fn ten_merges(
    client: &Client,
    plan: &Plan,
    keys: fn(&mut Rng, &Plan) -> Vec<(String, String)>,
) -> Measurement {
    let (client, plan) = (client.clone(), plan.clone());
    drive(16, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let operations = keys(&mut rng, &plan)
            .into_iter()
            .map(|(pk, rk)| {
                let merge = pb::MergeOperation {
                    entity: Some(small_entity(pk.clone(), rk, seq as i32)),
                    if_match: "*".into(),
                };
                pb::TableOperation {
                    table: MAIN_TABLE.into(),
                    partition_key: pk,
                    operation: Some(pb::TransactionOperation {
                        operation: Some(pb::transaction_operation::Operation::Merge(merge)),
                    }),
                }
            })
            .collect();
        async move {
            let request = pb::TransactWriteRequest {
                operations,
                idempotency_key: String::new(),
            };
            client.transact_write(request).await.expect("transact");
            OpResult::entities(KEYS_PER_CALL)
        }
    })
    .await
}

/// The reads `get_many_10` makes, as the loop of ten point reads (`GetEntity`, one key after
/// another) that a `GetEntities` call replaces, 64 loops at once: keys/s. Run right after
/// `get_many_10`, over the store as it stands then, so that the two compare like with like:
/// `point_read` runs first, before the write workloads have grown the store and left its pages
/// fragmented, which makes a read that misses the cache dearer.
pub(crate) async fn point_read_loop_10(client: &Client, plan: &Plan) -> Measurement {
    let (client, plan) = (client.clone(), plan.clone());
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let keys = random_keys(&mut rng, &plan);
        async move {
            for (partition_key, row_key) in keys {
                let request = pb::GetEntityRequest {
                    table: MAIN_TABLE.into(),
                    partition_key,
                    row_key,
                    select: vec![],
                };
                client.get_entity(request).await.expect("get");
            }
            OpResult::entities(KEYS_PER_CALL)
        }
    })
    .await
}

/// Reads of 10 keys across 10 partitions a call, 64 at once: keys/s.
pub(crate) async fn get_many_10(client: &Client, plan: &Plan) -> Measurement {
    let (client, plan) = (client.clone(), plan.clone());
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let keys = random_keys(&mut rng, &plan)
            .into_iter()
            .map(|(partition_key, row_key)| pb::EntityRef {
                table: MAIN_TABLE.into(),
                partition_key,
                row_key,
            })
            .collect();
        async move {
            let request = pb::GetEntitiesRequest {
                keys,
                select: vec![],
            };
            let found = client.get_entities(request).await.expect("get many");
            let found = found.into_inner().entities;
            assert!(
                found.iter().all(|f| f.entity.is_some()),
                "a key was not found"
            );
            OpResult::entities(KEYS_PER_CALL)
        }
    })
    .await
}
