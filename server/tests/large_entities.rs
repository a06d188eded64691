//! The binary's memory under entities near Azure's 1 MiB limit: written and read back, they stay
//! on disk, and the resident set after them stays within the cache bound plus a fixed overhead
//! (sled pages written as blobs are charged to the cache at their size, a shard never holds more
//! than its share plus one page, and a thread's retired large pages are freed promptly).
//! Over PostgreSQL, a page of large entities holds the rows it uses, not the batch it asks the
//! database for, on both of the store's read paths (a key range read awaited; an index read
//! through a portal).
//! `trestle-bench --workloads large_entities` measures the same at 2,000 entities, with rates.

#[path = "../../tests/common/postgres.rs"]
mod postgres_cluster;
mod support;

use support::{create_table, ServerProcess};
use trestle_proto::pb;

const TABLE: &str = "Large";
const ENTITIES: usize = 600;
const CACHE_MIB: u64 = 16;
/// The overhead allowed above the cache bound: the binary, its runtime, buffers in flight and a
/// page per cache shard.
const OVERHEAD_MIB: u64 = 250;

/// A line `key: <n> kB` of `/proc/<pid>/status`, in KiB.
fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("procfs")
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("{key} in KiB"))
}

fn resident_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// About 0.94 MiB: 15 string properties of 64 KiB (as UTF-16), different for each entity.
fn large_entity(n: usize) -> pb::Entity {
    let mut entity = pb::Entity {
        partition_key: format!("p{}", n % 8),
        row_key: format!("r{n:04}"),
        ..Default::default()
    };
    for property in 0..15 {
        let fill = char::from(b'a' + ((n + property) % 26) as u8);
        entity.properties.insert(
            format!("S{property:02}"),
            pb::Value {
                kind: Some(pb::value::Kind::StringValue(
                    fill.to_string().repeat(32 * 1024),
                )),
            },
        );
    }
    entity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_entities_written_and_read_back_keep_memory_near_the_cache_bound() {
    let data_dir = tempfile::tempdir().unwrap();
    let cache = CACHE_MIB.to_string();
    let server = ServerProcess::start_with(data_dir.path(), &["--cache-mib", &cache]);
    let pid = server.child.id();
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: TABLE.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = resident_kib(pid);
    let mut writers = Vec::new();
    for writer in 0..4 {
        let mut client = client.clone();
        writers.push(tokio::spawn(async move {
            for n in (writer..ENTITIES).step_by(4) {
                client
                    .insert_entity(pb::InsertEntityRequest {
                        idempotency_key: String::new(),
                        table: TABLE.into(),
                        entity: Some(large_entity(n)),
                        return_no_content: true,
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    for n in 0..ENTITIES {
        let read = client
            .get_entity(pb::GetEntityRequest {
                table: TABLE.into(),
                partition_key: format!("p{}", n % 8),
                row_key: format!("r{n:04}"),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(read, {
            let mut expected = large_entity(n);
            expected.timestamp = read.timestamp;
            expected.etag = read.etag.clone();
            expected
        });
    }
    let after = resident_kib(pid);
    let bound = (CACHE_MIB + OVERHEAD_MIB) * 1024;
    assert!(
        after <= bound,
        "after {ENTITIES} entities of 0.94 MiB written and read back the server holds {} MiB \
         (it started at {} MiB); the bound is {} MiB",
        after / 1024,
        before / 1024,
        bound / 1024
    );
}

/// Entities of 0.48 MB in one partition, read by pages that take a few each (a page's budget
/// is 2 MiB) while the store asks the database for up to 256 rows at a time.
const PAGED_ENTITIES: usize = 300;
/// Four pages at once holding whole batches would hold about 500 MB.
const PAGES_PEAK_MIB: u64 = 200;

/// `entity` with an `N` property for the index to sort by.
fn numbered(mut entity: pb::Entity, n: usize) -> pb::Entity {
    entity.partition_key = "p".into();
    entity.properties.insert(
        "N".into(),
        pb::Value {
            kind: Some(pb::value::Kind::Int64Value(n as i64)),
        },
    );
    entity
}

/// Four first pages of `request` at once; each must hold an entity or more.
async fn four_pages_at_once(client: &support::Client, request: pb::QueryEntitiesRequest) {
    let pages = (0..4).map(|_| {
        let (mut client, request) = (client.clone(), request.clone());
        tokio::spawn(async move { client.query_entities(request).await })
    });
    for page in futures_util::future::join_all(pages).await {
        let page = page.unwrap().unwrap().into_inner();
        assert!(!page.entities.is_empty() && !page.continuation_token.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_large_entities_over_postgres_hold_the_rows_they_use_not_their_batch() {
    // The cluster's programs and its admin connection block: off the runtime's turn.
    let Some((_cluster, url)) = tokio::task::block_in_place(|| {
        let cluster = postgres_cluster::Postgres::start()?;
        let url = cluster.database("large");
        Some((cluster, url))
    }) else {
        return;
    };
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_with(data_dir.path(), &["--store", &url]);
    let pid = server.child.id();
    let mut client = server.client().await;
    create_table(&mut client, TABLE).await;
    client
        .create_index(pb::CreateIndexRequest {
            table: TABLE.into(),
            index: Some(pb::IndexDefinition {
                name: "ByN".into(),
                properties: vec!["N".into()],
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    for n in 0..PAGED_ENTITIES {
        client
            .insert_entity(pb::InsertEntityRequest {
                idempotency_key: String::new(),
                table: TABLE.into(),
                entity: Some(numbered(large_entity(n), n)),
                return_no_content: true,
            })
            .await
            .unwrap();
    }
    // The index was declared over an empty table: it is ready once its (empty) build ends.
    let table = pb::GetTableRequest {
        table: TABLE.into(),
    };
    loop {
        let table = client.get_table(table.clone()).await.unwrap().into_inner();
        if table.indexes[0].state == pb::IndexState::Ready as i32 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Writing "5" to clear_refs resets the peak resident set to the current one.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let by_keys = pb::QueryEntitiesRequest {
        table: TABLE.into(),
        partition_key: Some("p".into()),
        ..Default::default()
    };
    four_pages_at_once(&client, by_keys).await;
    let by_index = pb::QueryEntitiesRequest {
        table: TABLE.into(),
        index: "ByN".into(),
        ..Default::default()
    };
    four_pages_at_once(&client, by_index).await;
    let peak = status_kib(pid, "VmHWM:");
    assert!(
        peak <= PAGES_PEAK_MIB * 1024,
        "four pages at once of {PAGED_ENTITIES} entities of 0.48 MB peaked the server at {} MiB \
         (the bound is {PAGES_PEAK_MIB} MiB)",
        peak / 1024
    );
}
