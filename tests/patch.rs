//! Patch operations end to end: increments, sets, removals and set-if-absent applied in order
//! inside the entity's commit; concurrent increments without a condition all count; every refusal
//! (type mismatch, overflow, limits, a stale ETag, a missing entity) has its reason and changes
//! nothing; a patch inside a transaction is all or nothing with the rest.

mod common;

use common::{
    assert_error, entity, get_request, insert_request, int32, int64, operation_index, string,
    transaction, tx_insert, RawClient, TestServer,
};
use tonic::Code;
use trestle_proto::pb;

const T: &str = "Patches";

fn increment(property: &str, by: pb::Value) -> pb::PatchStep {
    pb::PatchStep {
        step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
            property: property.into(),
            by: Some(by),
        })),
    }
}

fn set(property: &str, value: pb::Value) -> pb::PatchStep {
    pb::PatchStep {
        step: Some(pb::patch_step::Step::Set(pb::SetStep {
            property: property.into(),
            value: Some(value),
        })),
    }
}

fn set_if_absent(property: &str, value: pb::Value) -> pb::PatchStep {
    pb::PatchStep {
        step: Some(pb::patch_step::Step::SetIfAbsent(pb::SetStep {
            property: property.into(),
            value: Some(value),
        })),
    }
}

fn remove(property: &str) -> pb::PatchStep {
    pb::PatchStep {
        step: Some(pb::patch_step::Step::Remove(pb::RemoveStep {
            property: property.into(),
        })),
    }
}

fn patch(row_key: &str, steps: Vec<pb::PatchStep>) -> pb::PatchEntityRequest {
    pb::PatchEntityRequest {
        table: T.into(),
        partition_key: "p".into(),
        row_key: row_key.into(),
        operations: steps,
        ..Default::default()
    }
}

async fn stored(client: &mut RawClient, row_key: &str) -> pb::Entity {
    client
        .get_entity(get_request(T, "p", row_key))
        .await
        .unwrap()
        .into_inner()
}

fn value(entity: &pb::Entity, name: &str) -> Option<pb::value::Kind> {
    entity.properties.get(name).and_then(|v| v.kind.clone())
}

#[tokio::test]
async fn steps_apply_in_order_and_the_reply_is_the_entity_as_stored() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let original = entity("p", "r", &[("Count", int64(40)), ("Gone", string("x"))]);
    let inserted = client
        .insert_entity(insert_request(T, original))
        .await
        .unwrap()
        .into_inner();
    let steps = vec![
        increment("Count", int64(3)),
        increment("Count", int64(-1)),
        increment("Visits", int32(1)),
        set("Name", string("first")),
        set_if_absent("Name", string("second")),
        set_if_absent("Since", string("today")),
        remove("Gone"),
        remove("NeverThere"),
    ];
    let patched = client
        .patch_entity(patch("r", steps))
        .await
        .unwrap()
        .into_inner();
    use pb::value::Kind;
    assert_eq!(value(&patched, "Count"), Some(Kind::Int64Value(42)));
    assert_eq!(value(&patched, "Visits"), Some(Kind::Int32Value(1)));
    assert_eq!(
        value(&patched, "Name"),
        Some(Kind::StringValue("first".into()))
    );
    assert_eq!(
        value(&patched, "Since"),
        Some(Kind::StringValue("today".into()))
    );
    assert_eq!(value(&patched, "Gone"), None);
    assert_ne!(patched.etag, inserted.etag);
    assert_eq!(stored(&mut client, "r").await, patched);

    // Conditioned on the ETag: the current one applies, a stale one is refused.
    let mut conditional = patch("r", vec![increment("Count", int64(1))]);
    conditional.if_match = inserted.etag.clone();
    assert_error(
        client.patch_entity(conditional.clone()).await,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    );
    conditional.if_match = patched.etag.clone();
    let again = client.patch_entity(conditional).await.unwrap().into_inner();
    assert_eq!(value(&again, "Count"), Some(Kind::Int64Value(43)));
}

#[tokio::test]
async fn a_missing_entity_is_not_found_unless_upsert_creates_it() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    assert_error(
        client
            .patch_entity(patch("new", vec![increment("N", int32(1))]))
            .await,
        Code::NotFound,
        "ResourceNotFound",
    );
    let mut upsert = patch("new", vec![increment("N", int32(5))]);
    upsert.upsert = true;
    let created = client
        .patch_entity(upsert.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(value(&created, "N"), Some(pb::value::Kind::Int32Value(5)));
    upsert.if_match = created.etag;
    assert_error(
        client.patch_entity(upsert).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_increments_without_a_condition_all_count() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(
            T,
            entity("p", "counter", &[("N", int64(0))]),
        ))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                client
                    .patch_entity(patch("counter", vec![increment("N", int64(1))]))
                    .await
                    .expect("a patch without a condition never conflicts");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let counter = stored(&mut client, "counter").await;
    assert_eq!(value(&counter, "N"), Some(pb::value::Kind::Int64Value(320)));
}

#[tokio::test]
async fn every_refusal_has_its_reason_and_changes_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let original = entity(
        "p",
        "r",
        &[
            ("Small", int32(i32::MAX)),
            ("Text", string("t")),
            ("Big", int64(1)),
        ],
    );
    client
        .insert_entity(insert_request(T, original))
        .await
        .unwrap();
    let before = stored(&mut client, "r").await;
    let many: Vec<_> = (0..252).map(|n| set(&format!("P{n}"), int32(n))).collect();
    let cases: Vec<(Vec<pb::PatchStep>, Code, &str)> = vec![
        (
            vec![increment("Small", int32(1))],
            Code::InvalidArgument,
            "OutOfRangeInput",
        ),
        (
            vec![increment("Text", int32(1))],
            Code::InvalidArgument,
            "InvalidInput",
        ),
        (
            vec![increment("Big", int32(1))],
            Code::InvalidArgument,
            "InvalidInput",
        ),
        (
            vec![increment("N", string("1"))],
            Code::InvalidArgument,
            "InvalidInput",
        ),
        (
            vec![
                set("Ok", int32(1)),
                set("Text", string(&"x".repeat(40_000))),
            ],
            Code::InvalidArgument,
            "PropertyValueTooLarge",
        ),
        (
            vec![set("1bad", int32(1))],
            Code::InvalidArgument,
            "PropertyNameInvalid",
        ),
        (
            vec![set("RowKey", int32(1))],
            Code::InvalidArgument,
            "PropertyNameInvalid",
        ),
        (many, Code::InvalidArgument, "TooManyProperties"),
        (vec![], Code::InvalidArgument, "InvalidInput"),
        (
            vec![pb::PatchStep { step: None }],
            Code::InvalidArgument,
            "InvalidInput",
        ),
    ];
    for (steps, code, reason) in cases {
        assert_error(client.patch_entity(patch("r", steps)).await, code, reason);
        assert_eq!(stored(&mut client, "r").await, before, "after {reason}");
    }
    // Twenty strings of 30,000 characters (60,000 bytes as UTF-16): each fits, the entity not.
    let huge: Vec<_> = (0..20)
        .map(|n| set(&format!("H{n}"), string(&"y".repeat(30_000))))
        .collect();
    assert_error(
        client.patch_entity(patch("r", huge)).await,
        Code::ResourceExhausted,
        "EntityTooLarge",
    );
    assert_eq!(stored(&mut client, "r").await, before);
}

#[tokio::test]
async fn a_patch_in_a_transaction_is_all_or_nothing_with_the_rest() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(
            T,
            entity("p", "total", &[("Sum", int64(10))]),
        ))
        .await
        .unwrap();
    let patch_op = |steps| pb::TransactionOperation {
        operation: Some(pb::transaction_operation::Operation::Patch(
            pb::PatchOperation {
                row_key: "total".into(),
                operations: steps,
                ..Default::default()
            },
        )),
    };
    // The item and the total move together.
    let ops = vec![
        tx_insert(entity("p", "item-1", &[("Amount", int64(5))])),
        patch_op(vec![increment("Sum", int64(5))]),
    ];
    client
        .submit_transaction(transaction(T, "p", ops))
        .await
        .unwrap();
    let total = stored(&mut client, "total").await;
    assert_eq!(value(&total, "Sum"), Some(pb::value::Kind::Int64Value(15)));

    // A patch that fails names its operation, and the insert before it is not applied.
    let ops = vec![
        tx_insert(entity("p", "item-2", &[("Amount", int64(7))])),
        patch_op(vec![increment("Sum", int32(7))]),
    ];
    let status = assert_error(
        client.submit_transaction(transaction(T, "p", ops)).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    assert_eq!(operation_index(&status), Some(1));
    assert_error(
        client.get_entity(get_request(T, "p", "item-2")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
    assert_eq!(stored(&mut client, "total").await, total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_patches_entities_and_transactions() {
    use trestle_client::{ErrorCode, Patch, Properties, Value};
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let expenses = client.table("Expenses");
    expenses.create().await.unwrap();

    // The report's total is created by the first patch, then kept with each item's insert.
    let created = expenses
        .patch::<Properties>(
            ("r1", "total"),
            &Patch::new().increment("Total", 0i64).upsert(),
        )
        .await
        .unwrap();
    assert_eq!(created.value.get("Total"), Some(&Value::Int64(0)));
    for (item, amount) in [("item-1", 12i64), ("item-2", 30)] {
        let mut transaction = expenses.transaction("r1");
        let mut line = Properties::default();
        line.0.insert("Amount".into(), Value::Int64(amount));
        transaction
            .insert(item, &line)
            .unwrap()
            .patch("total", &Patch::new().increment("Total", amount))
            .unwrap();
        transaction.commit().await.unwrap();
    }
    let total = expenses
        .patch::<Properties>(("r1", "total"), &Patch::new().set("Currency", "EUR"))
        .await
        .unwrap();
    assert_eq!(total.value.get("Total"), Some(&Value::Int64(42)));
    assert_eq!(
        total.value.get("Currency"),
        Some(&Value::String("EUR".into()))
    );

    // Refusals come back as typed errors.
    let stale = expenses
        .patch::<Properties>(
            ("r1", "total"),
            &Patch::new().increment("Total", 1i64).if_match(created.etag),
        )
        .await
        .unwrap_err();
    assert!(stale.is_precondition_failed(), "{stale:?}");
    let mismatch = expenses
        .patch::<Properties>(("r1", "total"), &Patch::new().increment("Total", 1i32))
        .await
        .unwrap_err();
    assert_eq!(
        mismatch.code(),
        Some(ErrorCode::InvalidInput),
        "{mismatch:?}"
    );
    let missing = expenses
        .patch::<Properties>(("r1", "nothing"), &Patch::new().remove("X"))
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_and_min_keep_extremes_beside_concurrent_increments_and_a_condition_guards_a_patch() {
    use trestle_client::{ErrorCode, Filter, Patch, Properties, Value};
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let devices = client.table("Devices");
    devices.create().await.unwrap();

    // 8 writers report readings while 8 others count them: none conflicts, none is lost.
    let mut tasks = Vec::new();
    for writer in 0..16 {
        let devices = devices.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..25 {
                let patch = if writer % 2 == 0 {
                    let reading = f64::from(writer * 25 + n);
                    Patch::new()
                        .max("MaxTemp", reading)
                        .min("MinTemp", reading)
                        .upsert()
                } else {
                    Patch::new().increment("Readings", 1i64).upsert()
                };
                devices
                    .patch::<Properties>(("d1", "state"), &patch)
                    .await
                    .expect("max, min and increments never conflict");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let state = devices
        .get::<Properties>(("d1", "state"))
        .await
        .unwrap()
        .value;
    assert_eq!(
        state.get("MaxTemp"),
        Some(&Value::Double(14.0 * 25.0 + 24.0))
    );
    assert_eq!(state.get("MinTemp"), Some(&Value::Double(0.0)));
    assert_eq!(state.get("Readings"), Some(&Value::Int64(200)));

    // A condition over the entity as stored: true, the patch applies; false, it is refused and
    // nothing changes.
    let raise = Patch::new()
        .set("Alarm", true)
        .condition(Filter::raw("MaxTemp gt 300.0 and Readings ge 200L"));
    let alarmed = devices
        .patch::<Properties>(("d1", "state"), &raise)
        .await
        .unwrap();
    assert_eq!(alarmed.value.get("Alarm"), Some(&Value::Bool(true)));
    let guarded = Patch::new()
        .set("MaxTemp", 0.0)
        .condition(Filter::raw("MaxTemp lt 45.0"));
    let refused = devices
        .patch::<Properties>(("d1", "state"), &guarded)
        .await
        .unwrap_err();
    assert!(refused.is_precondition_failed(), "{refused:?}");
    assert_eq!(refused.code(), Some(ErrorCode::UpdateConditionNotSatisfied));
    assert!(refused.to_string().contains("MaxTemp lt 45.0"), "{refused}");
    let after = devices.get::<Properties>(("d1", "state")).await.unwrap();
    assert_eq!(after.etag, alarmed.etag, "a refused patch changes nothing");

    // A bad condition or a max of another type is bad input.
    let bad = devices
        .patch::<Properties>(
            ("d1", "state"),
            &Patch::new()
                .set("X", 1)
                .condition(Filter::raw("MaxTemp lt")),
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Some(ErrorCode::InvalidInput), "{bad:?}");
    let mismatch = devices
        .patch::<Properties>(("d1", "state"), &Patch::new().max("MaxTemp", 5i64))
        .await
        .unwrap_err();
    assert_eq!(
        mismatch.code(),
        Some(ErrorCode::InvalidInput),
        "{mismatch:?}"
    );
}
