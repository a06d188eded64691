//! The declared-index workloads: lookups through a unique TABLE index, 1,000-entity index
//! ranges, and inserts into a table keeping two indexes.

use std::time::Duration;

use trestle_proto::pb;

use crate::framed::Framed;
use crate::measure::{drive, Measurement, OpResult, Rng};
use crate::workloads::{load_with, partition_key, row_key, small_entity, Client, Plan};

/// The indexed table: the main table's shape, with `Email` (unique) and `Rank` indexed.
pub(crate) const INDEX_TABLE: &str = "IndexBench";
const INSERT_TABLE: &str = "IndexedInsertBench";
/// Entities one index range reads.
const RANGE: u64 = 1_000;

fn email(p: u64, r: u64) -> String {
    format!("user-{p:04}-{r:04}@example.com")
}

/// `ByEmail` (unique, over the table) and `ByRank` (over the table).
fn indexes() -> Vec<pb::IndexDefinition> {
    let index = |name: &str, property: &str, unique| pb::IndexDefinition {
        name: name.into(),
        properties: vec![property.into()],
        scope: pb::IndexScope::Table as i32,
        unique,
    };
    vec![
        index("ByEmail", "Email", true),
        index("ByRank", "Rank", false),
    ]
}

/// The main table's entity with an `Email` and a `Rank` (its ordinal: the main table's
/// partitions hold 1,000 rows each).
fn indexed_entity(pk: String, rk: String, email: String, rank: i32) -> pb::Entity {
    let mut entity = small_entity(pk, rk, rank);
    let value = |kind| pb::Value { kind: Some(kind) };
    entity
        .properties
        .insert("Email".into(), value(pb::value::Kind::StringValue(email)));
    entity
        .properties
        .insert("Rank".into(), value(pb::value::Kind::Int32Value(rank)));
    entity
}

/// Loads the indexed table, its indexes kept by every load transaction.
pub(crate) async fn load(client: &Client, plan: &Plan) -> Duration {
    let create = pb::CreateTableRequest {
        table: INDEX_TABLE.into(),
        indexes: indexes(),
        ..Default::default()
    };
    load_with(
        client,
        create,
        plan.partitions,
        plan.rows_per_partition,
        |p, r| {
            indexed_entity(
                partition_key(p),
                row_key(r),
                email(p, r),
                (p * 1_000 + r) as i32,
            )
        },
    )
    .await
}

/// Point lookups by `Email eq '...'` through the unique `ByEmail` index.
pub(crate) async fn index_lookup(client: &Client, plan: &Plan) -> Measurement {
    lookups(client, plan, INDEX_TABLE, "ByEmail", |p, r| {
        format!("Email eq '{}'", email(p, r))
    })
    .await
}

/// Lookups of one entity each, 64 at once: the entity `(p, r)` (at random) found through `index`
/// of `table` by the filter `filter(p, r)`.
pub(crate) async fn lookups(
    client: &Client,
    plan: &Plan,
    table: &'static str,
    index: &'static str,
    filter: fn(u64, u64) -> String,
) -> Measurement {
    let (client, plan) = (client.clone(), plan.clone());
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let (p, r) = (
            rng.below(plan.partitions),
            rng.below(plan.rows_per_partition),
        );
        let request = pb::QueryEntitiesRequest {
            table: table.into(),
            index: index.into(),
            filter: filter(p, r),
            page_size: 1,
            ..Default::default()
        };
        async move {
            let page = client
                .query_entities(request)
                .await
                .expect("lookup")
                .into_inner();
            assert_eq!(page.entities.len(), 1, "the lookup finds its entity");
            OpResult::entities(1)
        }
    })
    .await
}

/// Ranges of 1,000 consecutive ranks through `ByRank`, one page each; `extra` counts the
/// entities the server examined.
pub(crate) async fn index_range(framed: &Framed, plan: &Plan) -> Measurement {
    let (framed, plan) = (framed.clone(), plan.clone());
    drive(2, plan.warmup, plan.duration, move |worker, seq| {
        let framed = framed.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let first = rng.below(plan.entities() - RANGE);
        let request = pb::QueryEntitiesRequest {
            table: INDEX_TABLE.into(),
            index: "ByRank".into(),
            filter: format!("Rank ge {first} and Rank lt {}", first + RANGE),
            page_size: RANGE as u32,
            ..Default::default()
        };
        async move {
            let page = framed.query(request).await;
            assert!(
                page.continuation_token.is_empty(),
                "one page holds the range"
            );
            OpResult {
                entities: page.entities.len() as u64,
                extra: page.stats.map_or(0, |s| s.entities_examined),
            }
        }
    })
    .await
}

/// Inserts into a table keeping `ByEmail` (unique) and `ByRank`, as `insert` does without.
pub(crate) async fn indexed_insert(client: &Client, plan: &Plan) -> Measurement {
    let create = pb::CreateTableRequest {
        table: INSERT_TABLE.into(),
        indexes: indexes(),
        ..Default::default()
    };
    client.clone().create_table(create).await.expect("create");
    let client = client.clone();
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let entity = indexed_entity(
            format!("p{:08}", rng.below(100_000_000)),
            format!("w{worker:02}-{seq:09}"),
            format!("w{worker:02}-{seq:09}@example.com"),
            rng.below(1 << 30) as i32,
        );
        async move {
            client
                .insert_entity(pb::InsertEntityRequest {
                    table: INSERT_TABLE.into(),
                    entity: Some(entity),
                    ..Default::default()
                })
                .await
                .expect("insert");
            OpResult::entities(1)
        }
    })
    .await
}
