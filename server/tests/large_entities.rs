//! The binary's memory under entities near Azure's 1 MiB limit: written and read back, they stay
//! on disk, and the resident set after them stays within the cache bound plus a fixed overhead
//! (sled pages written as blobs are charged to the cache at their size, a shard never holds more
//! than its share plus one page, and a thread's retired large pages are freed promptly).
//! `trestle-bench --workloads large_entities` measures the same at 2,000 entities, with rates.

mod support;

use support::ServerProcess;
use trestle_proto::pb;

const TABLE: &str = "Large";
const ENTITIES: usize = 600;
const CACHE_MIB: u64 = 16;
/// The overhead allowed above the cache bound: the binary, its runtime, buffers in flight and a
/// page per cache shard.
const OVERHEAD_MIB: u64 = 250;

fn resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("procfs")
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS in KiB")
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
