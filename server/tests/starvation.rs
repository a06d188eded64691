//! The binary under clients that stop reading: 200 streamed scans of a 200,000-entity table left
//! unread hold no thread (queries, counts, table creation and new scans answer promptly) and
//! keep the server's peak RSS under its 300 MiB budget; and the process raised its
//! file-descriptor limit at start.

mod support;

use std::time::Duration;

use support::{fill_sized, ServerProcess};
use tokio_stream::StreamExt;
use trestle_proto::pb;
use trestle_server::storage::StoreConfig;
use trestle_server::Engine;

const TABLE: &str = "Wide";
const RSS_BUDGET_KIB: u64 = 300 * 1024;

/// A line of `/proc/<pid>/<file>` starting with `key`.
fn proc_line(pid: u32, file: &str, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .expect("procfs")
        .lines()
        .find(|line| line.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/{file}"))
        .to_owned()
}

/// The process's peak resident set, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    proc_line(pid, "status", "VmHWM:")
        .split_whitespace()
        .nth(1)
        .and_then(|kib| kib.parse().ok())
        .expect("VmHWM in KiB")
}

async fn promptly<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not answer within 10 s"))
}

fn whole_table() -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: TABLE.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_unread_streams_of_a_large_table_starve_nothing_and_stay_in_budget() {
    let data_dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(&StoreConfig::embedded(data_dir.path())).unwrap();
        engine.create_table(TABLE).unwrap();
        fill_sized(&engine, TABLE, 200_000, 200);
        engine.flush().unwrap();
    }
    let server = ServerProcess::start(data_dir.path());
    let pid = server.child.id();

    let limits = proc_line(pid, "limits", "Max open files");
    let fields: Vec<&str> = limits.split_whitespace().collect();
    assert_eq!(
        fields[3], fields[4],
        "soft limit not raised to the hard: {limits}"
    );

    let mut streams = Vec::new();
    for _ in 0..8 {
        let mut client = server.client().await;
        for _ in 0..25 {
            let stream = promptly("opening a stream", client.scan_entities(whole_table()))
                .await
                .unwrap()
                .into_inner();
            streams.push(stream);
        }
    }
    // Let every stream fill what it can hold.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut client = server.client().await;
    let mut filtered = whole_table();
    filtered.filter = "V eq 7".into();
    filtered.page_size = 10;
    let fresh = pb::CreateTableRequest {
        table: "Fresh".into(),
        ..Default::default()
    };
    let (mut querier, mut counter, mut lister, mut creator) = (
        client.clone(),
        client.clone(),
        client.clone(),
        client.clone(),
    );
    promptly(
        "a query, a count, a table listing and a table creation",
        async {
            tokio::try_join!(
                querier.query_entities(filtered.clone()),
                counter.count_entities(filtered.clone()),
                lister.list_tables(pb::ListTablesRequest::default()),
                creator.create_table(fresh),
            )
        },
    )
    .await
    .unwrap();
    let mut scan = promptly("a new scan", client.scan_entities(filtered))
        .await
        .unwrap()
        .into_inner();
    promptly("a new scan's first batch", scan.next())
        .await
        .expect("a batch")
        .unwrap();

    let peak = peak_rss_kib(pid);
    eprintln!(
        "server peak RSS with 200 unread streams: {} MiB",
        peak / 1024
    );
    assert!(
        peak < RSS_BUDGET_KIB,
        "peak RSS {} MiB with 200 unread streams",
        peak / 1024
    );
    drop(streams);
    server.kill_9();
}
