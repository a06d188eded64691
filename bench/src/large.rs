//! `large_entities`: 2,000 entities of about 0.94 MiB each (15 string properties of 64 KiB, near
//! Azure's 1 MiB entity limit) written by 4 writers, then each read back once; the row reports the
//! rate of both passes and the server's resident memory after them, which must stay near its cache
//! bound however large the entities.

use std::time::Instant;

use trestle_proto::pb;

use crate::measure::Measurement;
use crate::workloads::Client;

/// The workload's table.
const TABLE: &str = "LargeEntities";
/// Entities written, then read back.
pub(crate) const ENTITIES: u64 = 2_000;
/// Writers (and readers) at once.
const CONCURRENCY: u64 = 4;
/// String properties per entity, each [`VALUE_CHARS`] long: 15 × 64 KiB of UTF-16.
const PROPERTIES: usize = 15;
const VALUE_CHARS: usize = 32 * 1024;

fn large_entity(n: u64) -> pb::Entity {
    let mut entity = pb::Entity {
        partition_key: format!("p{:02}", n % 16),
        row_key: format!("r{n:05}"),
        ..Default::default()
    };
    for property in 0..PROPERTIES {
        // Different bytes per entity and property, so that nothing compresses or shares.
        let fill = char::from(b'a' + ((n as usize + property) % 26) as u8);
        entity.properties.insert(
            format!("S{property:02}"),
            pb::Value {
                kind: Some(pb::value::Kind::StringValue(
                    fill.to_string().repeat(VALUE_CHARS),
                )),
            },
        );
    }
    entity
}

/// Writes [`ENTITIES`] large entities, then reads each back: one measurement of both passes
/// (an operation is one entity written or read).
pub(crate) async fn large_entities(client: &Client) -> Measurement {
    let mut admin = client.clone();
    let _ = admin
        .create_table(pb::CreateTableRequest {
            table: TABLE.into(),
            ..Default::default()
        })
        .await;
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..CONCURRENCY {
        let mut client = client.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for n in (worker..ENTITIES).step_by(CONCURRENCY as usize) {
                let begun = Instant::now();
                client
                    .insert_entity(pb::InsertEntityRequest {
                        idempotency_key: String::new(),
                        table: TABLE.into(),
                        entity: Some(large_entity(n)),
                        return_no_content: true,
                    })
                    .await
                    .expect("insert a large entity");
                latencies.push(begun.elapsed().as_micros() as u32);
            }
            for n in (worker..ENTITIES).step_by(CONCURRENCY as usize) {
                let begun = Instant::now();
                let entity = client
                    .get_entity(pb::GetEntityRequest {
                        table: TABLE.into(),
                        partition_key: format!("p{:02}", n % 16),
                        row_key: format!("r{n:05}"),
                        ..Default::default()
                    })
                    .await
                    .expect("read a large entity")
                    .into_inner();
                assert_eq!(entity.properties.len(), PROPERTIES, "entity {n} read whole");
                latencies.push(begun.elapsed().as_micros() as u32);
            }
            latencies
        }));
    }
    let mut measurement = Measurement::default();
    for worker in workers {
        measurement
            .latencies_us
            .extend(worker.await.expect("worker"));
    }
    measurement.elapsed = started.elapsed();
    measurement.ops = 2 * ENTITIES;
    measurement.entities = 2 * ENTITIES;
    measurement
}
