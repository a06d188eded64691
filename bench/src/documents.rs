//! The document workloads, over a table of the main table's size whose entities also hold a
//! document `D` = `{V, Tags: [<the entity's own tag>, "shared"]}`: `path_filter_scan`, a filter on
//! `D/V` over the whole table, beside the same filter on the top-level `V` of the same entities;
//! `array_index_lookup`, lookups of one entity's tag through the multi-valued index over
//! `D/Tags/*`; and `append_keep_last`, 64 clients appending to one entity's array bounded to its
//! last 3 elements.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use trestle_proto::pb;

use crate::indexed::lookups;
use crate::measure::{drive, Measurement, OpResult};
use crate::workloads::{
    filtered_pass, load_with, partition_key, row_key, small_entity, Client, Plan,
};

/// The table of entities with documents.
pub(crate) const DOC_TABLE: &str = "DocumentBench";
/// The entity `append_keep_last` appends to.
const APPEND_TABLE: &str = "AppendBench";
/// How many elements `append_keep_last` keeps.
const KEEP_LAST: u32 = 3;

fn value(kind: pb::value::Kind) -> pb::Value {
    pb::Value { kind: Some(kind) }
}

fn text(s: &str) -> pb::Value {
    value(pb::value::Kind::StringValue(s.to_owned()))
}

/// An entity's own tag.
fn tag(p: u64, r: u64) -> String {
    format!("tag-{p:04}-{r:04}")
}

/// The main table's entity with the document `D`.
fn document_entity(p: u64, r: u64) -> pb::Entity {
    let mut entity = small_entity(partition_key(p), row_key(r), r as i32);
    let tags = pb::ArrayValue {
        values: vec![text(&tag(p, r)), text("shared")],
    };
    let document = pb::ObjectValue {
        members: [
            ("V".to_owned(), value(pb::value::Kind::Int32Value(r as i32))),
            ("Tags".to_owned(), value(pb::value::Kind::ArrayValue(tags))),
        ]
        .into(),
    };
    entity
        .properties
        .insert("D".into(), value(pb::value::Kind::ObjectValue(document)));
    entity
}

/// Loads the document table with its multi-valued index `ByTag` over `D/Tags/*`, kept by every
/// load transaction.
pub(crate) async fn load(client: &Client, plan: &Plan) -> Duration {
    let create = pb::CreateTableRequest {
        table: DOC_TABLE.into(),
        indexes: vec![pb::IndexDefinition {
            name: "ByTag".into(),
            properties: vec!["D/Tags/*".into()],
            scope: pb::IndexScope::Table as i32,
            unique: false,
        }],
        ..Default::default()
    };
    load_with(
        client,
        create,
        plan.partitions,
        plan.rows_per_partition,
        document_entity,
    )
    .await
}

/// Full-table scans of the document table with `filter`, as `filter_scan` does.
async fn scans(client: &Client, plan: &Plan, filter: &'static str) -> Measurement {
    let client = client.clone();
    drive(2, plan.warmup, plan.duration, move |_, _| {
        let mut client = client.clone();
        async move { filtered_pass(&mut client, DOC_TABLE, filter).await }
    })
    .await
}

/// `D/V eq 7` (a member of a document), then `V eq 7` (a top-level property) over the same
/// entities: both match 0.1%.
pub(crate) async fn path_filter_scan(client: &Client, plan: &Plan) -> (Measurement, Measurement) {
    let path = scans(client, plan, "D/V eq 7").await;
    let flat = scans(client, plan, "V eq 7").await;
    (path, flat)
}

/// Lookups of one entity by its tag through `ByTag`, 64 at once.
pub(crate) async fn array_index_lookup(client: &Client, plan: &Plan) -> Measurement {
    lookups(client, plan, DOC_TABLE, "ByTag", |p, r| {
        format!("D/Tags/any(t: t eq '{}')", tag(p, r))
    })
    .await
}

/// 64 clients append a number to one entity's `Recent` array, keeping its last 3, and count the
/// append in `N`, in one patch each. Returns the measurement and whether the entity counts every
/// acknowledged append and holds 3 elements.
pub(crate) async fn append_keep_last(client: &Client, plan: &Plan) -> (Measurement, bool) {
    let mut c = client.clone();
    let create = pb::CreateTableRequest {
        table: APPEND_TABLE.into(),
        ..Default::default()
    };
    c.create_table(create).await.expect("create");
    let acknowledged = Arc::new(AtomicI64::new(0));
    let (counting, driving) = (acknowledged.clone(), client.clone());
    let measurement = drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let (mut client, acknowledged) = (driving.clone(), counting.clone());
        let append = pb::patch_step::Step::Append(pb::AppendStep {
            property: "Recent".into(),
            value: Some(value(pb::value::Kind::Int64Value(
                (worker as i64) << 32 | seq as i64,
            ))),
            keep_last: KEEP_LAST,
        });
        let count = pb::patch_step::Step::Increment(pb::IncrementStep {
            property: "N".into(),
            by: Some(value(pb::value::Kind::Int64Value(1))),
        });
        let request = pb::PatchEntityRequest {
            table: APPEND_TABLE.into(),
            partition_key: "post".into(),
            row_key: "comments".into(),
            operations: [append, count]
                .map(|step| pb::PatchStep { step: Some(step) })
                .to_vec(),
            upsert: true,
            return_no_content: true,
            ..Default::default()
        };
        async move {
            client.patch_entity(request).await.expect("append");
            acknowledged.fetch_add(1, Ordering::SeqCst);
            OpResult::entities(1)
        }
    })
    .await;
    let stored = c
        .get_entity(pb::GetEntityRequest {
            table: APPEND_TABLE.into(),
            partition_key: "post".into(),
            row_key: "comments".into(),
            select: vec![],
        })
        .await
        .expect("read the entity")
        .into_inner();
    let kind = |name: &str| stored.properties.get(name).and_then(|v| v.kind.clone());
    let counted = matches!(kind("N"), Some(pb::value::Kind::Int64Value(n))
        if n == acknowledged.load(Ordering::SeqCst));
    let kept = matches!(kind("Recent"), Some(pb::value::Kind::ArrayValue(a))
        if a.values.len() == KEEP_LAST as usize);
    (measurement, counted && kept)
}
